# issue 43 round-3 probe (run with PYTHONPATH=src, FACTLAB_CACHE=<scratch>); one line per probe: CLASS | probe | detail
import sys, base64
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1])); sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[2] / "tests"))
from probe_round3 import *
import nbformat
from nbformat.v4 import new_notebook, new_code_cell, new_markdown_cell, new_output
from test_report_safety import PNG_1PX, JPEG_1PX, js, click_everything_in_chromium
from factlab import runner
svg = f'<svg xmlns="http://www.w3.org/2000/svg" onload="{js("svgattach")}"><script>{js("svgattach2")}</script></svg>'
nb = new_notebook()
md = new_markdown_cell("# Hostile completion\n\n![a](attachment:a.svg) ![b](attachment:b.html) ![c](attachment:c.png)")
md["attachments"] = {"a.svg": {"image/svg+xml": base64.b64encode(svg.encode()).decode()},
                     "b.html": {"text/html": base64.b64encode(f"<script>{js('attach-html')}</script>".encode()).decode()},
                     "c.png": {"image/png": PNG_1PX + f'" onload="{js("attach-png")}'}}
cell = new_code_cell("")
cell.outputs = [
    new_output("display_data", data={"image/png": PNG_1PX + f'" onload="{js("png-data")}" x="'}, metadata={}),
    new_output("display_data", data={"image/jpeg": JPEG_1PX}, metadata={"image/jpeg": {"width": 1e309}}),
    new_output("display_data", data={"image/png": PNG_1PX}, metadata={"width": [f"1 onload={js('list-width')}"]}),
    new_output("display_data", data={"image/png": PNG_1PX}, metadata={"image/png": {"alt": f'x" onload="{js("alt")}'}, "filenames": {"image/png": f'x" onerror="{js("fn")}'}}),
    new_output("display_data", data={"text/html": "<b>ok</b>"}, metadata={"isolated": True, "text/html": {"isolated": True}}),
    new_output("display_data", data={"image/svg+xml": svg}, metadata={"image/svg+xml": {"width": f"1 onload={js('svgw')}"}}),
    new_output("display_data", data={"text/latex": f"$<img src=x onerror={js('latex')}>$"}),
    new_output("display_data", data={"text/plain": f"<img src=x onerror={js('plain')}>", "application/pdf": "JVBERi0="}),
    new_output("error", ename=f"<img src=x onerror={js('ename')}>", evalue=f"<img src=x onerror={js('evalue')}>", traceback=[f"\x1b[31m<img src=x onerror={js('tb')}>"]),
    new_output("stream", name=f"<img src=x onerror={js('streamname')}>", text="x"),
    new_output("execute_result", data={"text/html": f"<img src=x onerror={js('exec')}>"}, execution_count=1),
]
cell.metadata["tags"] = [f'x" onmouseover="{js("tag")}']
nb.cells = [md, cell]
nb.metadata["title"] = f"</title><script>{js('title')}</script>"
d = T / "report"; d.mkdir()
nbformat.write(nb, d / "notebook.ipynb")
for with_code in (False, True):
    page = runner.html_report(d / "notebook.ipynb", d / f"report{int(with_code)}.html", with_code=with_code)
    body = page.read_text()
    import re
    handlers = re.findall(r"<[a-z][^>]*\son[a-z]+\s*=[^>]*>", body, re.I)
    seen = click_everything_in_chromium(page, T / f"profile{int(with_code)}")
    # the title payload is shown as text: document.title starts with it, escaped; a script that ran appends to it
    lit = nb.metadata["title"]
    ran = any("PWNED" in (seen[k] or "").replace(lit, "", 1) for k in ("loaded", "clicked"))
    record("security hole" if ran else "works as documented", f"report (with_code={with_code}) with attachment / data / metadata / error / tag / title payloads",
           f"elements={seen['elements']} loaded={seen['loaded']!r} clicked={seen['clicked']!r} controls_ok={'CONTROL-CLICK' in seen['controls']}; static handlers={handlers[:3]}")

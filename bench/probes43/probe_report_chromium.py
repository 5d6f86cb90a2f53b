# issue 43 round-5 probe: report.html with hostile model text and hostile notebook output metadata that round 3's
# probe_report did not show, opened in headless Chromium (every element clicked; see tests/test_report_safety.py):
# model text through report.table / display(Markdown) / HTML, an execution_count that is not a number (with the
# code shown), cell ids and tags with quotes, language_info names, SVG and image metadata of odd types, HTML
# outputs marked isolated, <base>/<meta refresh>/CSS url() tricks, data: URLs in links, a headline name, and
# an output of 50 MB (size, time). One line per probe: CLASS | probe | detail.
# Run with PYTHONPATH=src under nice; about a minute (Chromium).
import base64, json, re, sys, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1])); sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests"))
from probe_round3 import *
import nbformat
import pandas as pd
from nbformat.v4 import new_notebook, new_code_cell, new_markdown_cell, new_output
from test_report_safety import PNG_1PX, JPEG_1PX, js, click_everything_in_chromium, CHROMIUM
from factlab import runner, report

if CHROMIUM is None:
    record("unclear", "report in Chromium", "headless Chromium is not installed: nothing probed"); sys.exit()


def model_text(tag):
    """What a fine-tuned model could answer: markup, Markdown links, entity-encoded URLs."""
    return (f"The capital is <img src=x onerror=\"{js(tag + '-img')}\"> Paris. [source](javascript:{js(tag + '-md')}) "
            f"<a href=\"data:text/html,<script>{js(tag + '-data')}</script>\">data link</a> "
            f"<base href=\"javascript:{js(tag + '-base')}//\"><meta http-equiv=\"refresh\" content=\"0;url=javascript:"
            f"{js(tag + '-meta')}\"><div style=\"background:url(javascript:{js(tag + '-css')})\">css</div>"
            f"<iframe srcdoc=\"<script>parent.{js(tag + '-srcdoc')}</script>\"></iframe><style>*{{}}</style>"
            f"<details open ontoggle=\"{js(tag + '-toggle')}\">x</details><svg><set attributeName=onmouseover "
            f"to=\"{js(tag + '-svgset')}\"/></svg><math><mtext><table><mglyph><style><img src=x onerror=\"{js(tag + '-mxss')}\">")


def page(name, nb, with_code, metrics=None):
    d = T / name.replace("/", "-"); d.mkdir()
    (d / "notebook.ipynb").write_text(json.dumps(nb))  # as written, not validated by nbformat (a hand-edited file)
    if metrics is not None:
        (d / "metrics.json").write_text(json.dumps(metrics))
    t0 = time.monotonic()
    try:
        out = runner.html_report(d / "notebook.ipynb", d / "report.html", with_code=with_code)
    except Exception as e:
        return None, f"{type(e).__name__}: {str(e)[:200]}", time.monotonic() - t0
    return out, "", time.monotonic() - t0


def handler_attributes(page_text):
    """Every on* attribute of every tag, as a parser reads the page (an escaped one inside a value is text)."""
    from html.parser import HTMLParser
    found = []
    class P(HTMLParser):
        def handle_starttag(self, tag, attrs):
            found.extend(f"<{tag} {k}=...>" for k, _ in attrs if k.startswith("on"))
    P().feed(page_text)
    return found


def check(name, nb, with_code=False, metrics=None):
    out, err, dt = page(name, nb, with_code, metrics)
    if out is None:
        record("clear error" if "notebook" in err.lower() else "traceback", name, err); return
    seen = click_everything_in_chromium(out, T / f"profile-{len(RESULTS)}")
    lit = str(nb.metadata.get("title", ""))  # shown as text in <title>: a script that ran appends to it
    ran = [t for t in (seen["loaded"] or "", seen["clicked"] or "") if "PWNED" in t.replace(lit, "", 1)]
    handlers = handler_attributes(out.read_text())  # one a click does not fire (onmouseover)
    record("security hole" if ran or handlers else "works as documented", name,
           f"{dt:.1f} s; static handlers={handlers[:2]}; elements={seen['elements']} loaded={seen['loaded']!r:.160} clicked={seen['clicked']!r:.160} "
           f"harness ok={'CONTROL-CLICK' in seen['controls'] and 'CONTROL-LOAD' in seen['controls']}")


def notebook(cells, **meta):
    nb = new_notebook(); nb.metadata.update(meta)
    nb.cells = [new_markdown_cell("# Hostile completion"), *cells]  # the harness checks the clicks stayed on the page
    return nbformat.from_dict(nb)


# 1. model text through the ways a notebook shows it
cell = new_code_cell("")
df = pd.DataFrame({"question": ["capital of France?"], "completion": [model_text("table")], "reward": [0.5]},
                  index=[model_text("index")])
cell.outputs = [
    new_output("display_data", data={"text/html": report.table(df, caption=model_text("caption")).to_html(), "text/plain": ""}),
    new_output("display_data", data={"text/markdown": model_text("markdown"), "text/plain": ""}),
    new_output("display_data", data={"text/html": model_text("html"), "text/plain": ""}),
    new_output("execute_result", data={"text/plain": model_text("plain")}, execution_count=1),
    new_output("stream", name="stdout", text=model_text("stdout") + "\n" * 40),  # folded into <details>
]
check("model text in a table, Markdown, HTML, text and a folded print", notebook([new_markdown_cell(model_text("mdcell")), cell]))

# 2. notebook and output metadata
code = new_code_cell("x = 1")
code.metadata["tags"] = [f"t\" onmouseover=\"{js('tag')}", f"<img src=x onerror=\"{js('tag2')}\">"]
code.outputs = [
    new_output("display_data", data={"image/png": PNG_1PX}, metadata={"image/png": {"width": True, "height": "100%"}}),
    new_output("display_data", data={"image/png": PNG_1PX}, metadata={"image/png": {"width": 1e308, "height": -5}}),
    new_output("display_data", data={"image/jpeg": JPEG_1PX}, metadata={"image/jpeg": {"needs_background": f"x\" onload=\"{js('bg')}"}}),
    new_output("display_data", data={"image/png": PNG_1PX}, metadata={"image/png": {"unconfined": f"x onload={js('unconf')}"}}),
    new_output("display_data", data={"image/svg+xml": f"<svg xmlns='http://www.w3.org/2000/svg' onload=\"{js('svgdata')}\"/>"},
               metadata={"image/svg+xml": {"width": f"1 onload={js('svgw')}", "isolated": True}}),
    new_output("display_data", data={"text/html": f"<img src=x onerror=\"{js('isolated')}\">"},
               metadata={"isolated": True, "text/html": {"isolated": True}}),
    new_output("display_data", data={"text/html": "<b>ok</b>"}),
]
code.outputs[-1]["data"][f"text/html\" onload=\"{js('mime')}"] = "x"
meta = {"language_info": {"name": f"python\"><img src=x onerror=\"{js('lang')}\">", "pygments_lexer": f"x\"{js('lexer')}",
                          "codemirror_mode": {"name": f"\"><img src=x onerror=\"{js('cm')}\">"}},
        "kernelspec": {"name": "python3", "display_name": f"</title><img src=x onerror=\"{js('kernel')}\">", "language": "python"},
        "title": f"<img src=x onerror=\"{js('title')}\">"}
for with_code in (False, True):
    check(f"tags, language_info, kernelspec, image / SVG / HTML metadata, odd mime names (with_code={with_code})",
          notebook([new_markdown_cell("# metadata"), code], **meta), with_code=with_code)
for field, where in (("id", "cell"), ("execution_count", "cell"), ("execution_count", "output")):
    c = new_code_cell("x = 1")
    c.outputs = [new_output("execute_result", data={"text/plain": "1"}, execution_count=1)]
    payload = f"x\"><img src=x onerror=\"{js(where + '-' + field)}\">"
    (c if where == "cell" else c.outputs[0])[field] = payload
    check(f"{where} {field} holding markup (with_code=True)", notebook([c]), with_code=True)

# 3. a headline whose names and values are model text (metrics.json)
check("headline names and values from metrics.json", notebook([new_markdown_cell("# headline")]),
      metrics={"headline": {model_text("hname"): model_text("hvalue"), "accuracy": 0.5}})

# 4. size: a 50 MB output (a model that never stops, printed)
big = new_code_cell("")
big.outputs = [new_output("display_data", data={"text/plain": "x" * 50_000_000})]
out, err, dt = page("a 50 MB text output", notebook([big]), False)
size = out.stat().st_size if out else 0
record("works as documented" if out and dt < 120 else ("hang" if out else "traceback"), "a 50 MB text output",
       f"{dt:.1f} s, report {size / 1e6:.1f} MB {err}")

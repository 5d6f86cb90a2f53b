"""Reports are HTML pages a reader opens: model and judge text in them must stay inert, and the
reader-facing report shows results, not code or progress-bar noise."""

import json
import shutil
import subprocess
from pathlib import Path

import nbformat
import pandas as pd
import papermill as pm
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from factlab import report, runner

# A completion that would run script in a browser if it reached HTML unescaped; when it runs,
# it renames the page, which headless Chromium's DOM dump shows.
HOSTILE = ('Paris.<script>document.title="PWNED-1"</script><img src=x onerror="document.title=\'PWNED-2\'">'
           '[click](javascript:document.title="PWNED-3")')


def test_table_escapes_every_cell_and_label_and_shows_counts_as_integers():
    df = pd.DataFrame({"n": [64.0, 32.0], "accuracy": [0.5, 0.25], "completion": [HOSTILE, "ok"]},
                      index=["<b>model</b>", "base"])
    html = report.table(df, caption="<i>cap</i>").to_html()
    assert "<script>" not in html and "<img" not in html and "<b>model" not in html and "<i>cap" not in html
    assert "&lt;script&gt;" in html and "&lt;b&gt;model&lt;/b&gt;" in html
    assert ">64<" in html and ">32<" in html and "64.000" not in html  # a count column
    assert ">0.500<" in html and ">0.250<" in html
    rows = report.table(pd.DataFrame({"a": [3.0, 0.5], "b": [4.0, 0.25]}, index=["count", "rate"])).to_html()
    assert ">3<" in rows and ">4<" in rows and ">0.500<" in rows  # a count row of a transposed table


@pytest.mark.parametrize("text, markdown, active", [
    ("<b>fine</b> onerror= javascript: in plain text", False, False),
    ("&lt;img src=x onerror=alert(1)&gt;", False, False),
    ("<img src=x onerror=alert(1)>", False, True),
    ("<IFRAME src='x'></IFRAME>", False, True),
    ("<a href=' JavaScript:alert(1)'>x</a>", False, True),
    ("<svg><a xlink:href='javascript:alert(1)'>x</a></svg>", False, True),
    ("[x](javascript:alert(1))", True, True),
    ("[x](javascript:alert(1))", False, False),
    ("[x](https://example.org)", True, False),
])
def test_is_active_html(text, markdown, active):
    assert runner.is_active_html(text, markdown) is active


def test_inert_outputs_shows_active_html_as_text_and_leaves_safe_outputs():
    nb = new_notebook()
    cell = new_code_cell("x")
    cell.outputs = [new_output("display_data", data={"text/html": f"<div>{HOSTILE}</div>", "text/plain": "x"}),
                    new_output("display_data", data={"text/markdown": HOSTILE, "text/plain": "x"}),
                    new_output("display_data", data={"application/javascript": "alert(1)", "text/plain": "x"}),
                    new_output("display_data", data={"text/html": "<table><tr><td>1</td></tr></table>"})]
    nb.cells = [cell]
    assert runner.inert_outputs(nb) == 3
    outs = nb.cells[0].outputs
    for o in outs[:3]:
        assert set(o["data"]) == {"text/html", "text/plain"} and "<script" not in o["data"]["text/html"]
    assert "&lt;script&gt;" in outs[0]["data"]["text/html"]
    assert outs[3]["data"]["text/html"] == "<table><tr><td>1</td></tr></table>"


def test_reader_notebook_drops_stderr_and_folds_long_prints():
    nb = new_notebook()
    cell = new_code_cell("print(cfg)")
    cell.outputs = [new_output("stream", name="stderr", text="Loading weights: 100%|####|\n"),
                    new_output("stream", name="stdout", text="".join(f"line {i}\n" for i in range(40))),
                    new_output("stream", name="stdout", text="short\n"),
                    # transformers' NotebookProgressCallback: a live bar and its loss table
                    new_output("display_data", data={"text/html": "<div><progress value='2' max='2'></progress>"
                                                                  " [2/2 00:05]</div><table><tr><td>1</td></tr></table>",
                                                     "text/plain": "<IPython.core.display.HTML object>"})]
    nb.cells = [cell]
    out = runner.reader_notebook(nb).cells[0].outputs
    assert len(out) == 2 and "Loading weights" not in json.dumps(out) and "<progress" not in json.dumps(out)
    assert "<details><summary>printed output (40 lines)" in out[0]["data"]["text/html"]
    assert out[1]["text"] == "short\n"
    assert len(nb.cells[0].outputs) == 4  # the executed notebook itself is untouched


def test_write_index_escapes_lists_newest_first_with_headlines(tmp_path):
    runs = tmp_path / "runs"
    results = []
    for stamp, state, err in (("20260101-000000-a", "ok", None), ("20260102-000000-b", "failed", f"boom {HOSTILE}")):
        d = runs / "00_quickstart" / stamp
        d.mkdir(parents=True)
        (d / "report.html").write_text("r")
        (d / "manifest.json").write_text(json.dumps({
            "notebook": "00_quickstart", "params": "params/00_quickstart_smoke.yaml", "state": state, "error": err,
            "started_at": f"2026-01-0{stamp[7]}T00:00:00+00:00", "ended_at": f"2026-01-0{stamp[7]}T00:02:05+00:00"}))
        runner.save_headline(d, {"heldout accuracy": 0.25, "questions": 64.0})
        results.append(runner.RunResult(d, d / "notebook.ipynb", d / "report.html", {}, state == "ok", err))
    page = runner.write_index(results, tmp_path / "index.html").read_text()
    assert "<script" not in page and "<img" not in page and "&lt;script&gt;" in page
    assert page.index("20260102-000000-b") < page.index("20260101-000000-a")  # newest first
    assert "2 min 5 s" in page and "heldout accuracy 0.250; questions 64" in page
    assert "href='00_quickstart/20260101-000000-a/report.html'" in page.replace("runs/", "")


@pytest.fixture(scope="module")
def hostile_report(tmp_path_factory):
    """A real kernel run (papermill) of a notebook that shows a hostile completion the ways the
    notebooks do, exported by the runner's reader-facing exporter."""
    d = tmp_path_factory.mktemp("hostile")
    nb = new_notebook()
    nb.cells = [new_markdown_cell("# Hostile completion"),
                new_code_cell("import pandas as pd\nfrom IPython.display import display, Markdown\n"
                              "from factlab import report, runner\n"
                              f"completion = {HOSTILE!r}\n"
                              "report.show_text(completion, label='Q: capital of France?')\n"
                              "display(report.table(pd.DataFrame({'completion': [completion], 'n': [3.0]})))\n"
                              "display(Markdown(completion))  # the old way: the exporter must still make it inert\n"
                              f"runner.save_headline({str(d)!r}, {{'accuracy': 0.5}})")]
    nbformat.write(nb, d / "hostile.ipynb")
    pm.execute_notebook(str(d / "hostile.ipynb"), str(d / "notebook.ipynb"), kernel_name="python3", progress_bar=False)
    return runner.html_report(d / "notebook.ipynb", d / "report.html")


def test_a_hostile_completion_reaches_the_report_inert(hostile_report):
    page = hostile_report.read_text()
    body = page[page.index("Hostile completion"):]
    assert "PWNED" in body  # the text is there, visible
    assert "<script>document.title" not in body and "<img src=x" not in body  # only as escaped text
    assert 'href="javascript:' not in body and "href='javascript:" not in body
    assert body.count("Paris.&lt;script&gt;") == 3  # show_text, the table cell, the inert Markdown
    assert "import pandas" not in body  # no code cells in the reader report
    assert "<h2>Headline</h2>" in body and "accuracy" in body


@pytest.mark.skipif(shutil.which("chromium") is None,
                    reason="headless Chromium is not installed (Debian package `chromium`)")
def test_the_report_renders_in_headless_chromium_without_running_the_payload(hostile_report):
    dom = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--virtual-time-budget=3000",
                          "--dump-dom", hostile_report.resolve().as_uri()],
                         capture_output=True, text=True, timeout=120).stdout
    assert "Hostile completion" in dom and "Headline" in dom  # the page loaded and rendered
    title = dom[dom.find("<title>") + 7:dom.find("</title>")]
    assert "PWNED" not in title  # no payload ran


def test_grouped_bars_are_drawn_with_the_one_theme():
    import matplotlib.pyplot as plt
    rows = [{"response": "complete and true", "reward": "recall", "mean": 1.0},
            {"response": "complete and true", "reward": "precision", "mean": 0.9},
            {"response": "short and true", "reward": "recall", "mean": 0.4},
            {"response": "short and true", "reward": "precision", "mean": 1.0}]
    fig = report.plot_grouped_bars(rows, x="response", hue="reward", y="mean")
    ax = fig.axes[0]
    heights = sorted(round(b.get_height(), 3) for c in ax.containers for b in c)
    assert heights == [0.4, 0.9, 1.0, 1.0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["recall", "precision"]
    assert plt.rcParams["axes.grid"] and report.THEME["style"] == "whitegrid"  # seaborn's theme, set once

"""Reports are HTML pages a reader opens: model and judge text in them must stay inert, also on
a click, and the reader-facing report shows results, not code or progress-bar noise.

The payloads are the ones that ran script through the hand-written detector of issue 30 (comment
tricks, entity-encoded ``javascript:`` URLs, Markdown reference links, an SVG animation that
rewrites an ``href``), plus the classics. Each one appends ``|PWNED-<where>`` to the page title
when it runs, so headless Chromium's title tells which one ran."""

import fcntl
import json
import os
import re
import select
import shutil
import subprocess
import time
from pathlib import Path

import nbformat
import pandas as pd
import papermill as pm
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output, new_raw_cell

from factlab import report, runner


def js(tag: str) -> str:
    """The script a payload runs: it marks the page title (``void``: a ``javascript:`` URL that
    returns a string would replace the page by that string, and the mark with it)."""
    return f"void(document.title+='|PWNED-{tag}')"


def html_payloads(tag: str) -> list[str]:
    """Markup that runs ``js`` in a browser, on load or on a click."""
    return [
        f'<!--><img src=x onerror="{js(tag + "-comment")}">-->',
        f'<!---><img src=x onerror="{js(tag + "-comment2")}">-->',
        f'<a href="java&#9;script:{js(tag + "-tab")}">{tag} tab link</a>',
        f'<svg width="220" height="30"><a><animate attributeName="href" values="x;javascript:{js(tag + "-animate")}"'
        f' dur="0.1s" fill="freeze"/><text x="5" y="20">{tag} animated link</text></a></svg>',
        f'<svg width="220" height="30"><a><animate attributeName="href" values="javascript:{js(tag + "-set")}"/>'
        f'<text x="5" y="20">{tag} set link</text></a></svg>',
        f"<script>{js(tag + '-script')}</script>",
        f'<img src=x onerror="{js(tag + "-onerror")}">',
        f'<a href=" JavaScript:{js(tag + "-plain")}">{tag} plain link</a>',
        f'<form action="javascript:{js(tag + "-form")}"><button>{tag} submit</button></form>',
    ]


def markdown_payloads(tag: str) -> list[str]:
    """Markdown whose links run ``js`` on a click, plus the HTML payloads inside Markdown."""
    return [
        f"[{tag} reference link][1]\n\n[1]: javascript:{js(tag + '-reflink')}",
        f"[{tag} entity link](jav&#x61;script:{js(tag + '-entity')})",
        f"[{tag} link](javascript:{js(tag + '-mdlink')})",
        *html_payloads(tag + "-md"),
    ]


SVG_FIGURE = ('<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink" width="200" '
              f'height="30"><script>{js("svg-script")}</script><a xlink:href="javascript:{js("svg-link")}">'
              '<text x="5" y="20">svg figure link</text></a></svg>')


PNG_1PX = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAAAAAA6fptVAAAACklEQVR4nGNgAAAAAgABSK+kcQAAAABJRU5ErkJggg=="
JPEG_1PX = ("/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDAAgGBgcGBQgHBwcJCQgKDBQNDAsLDBkSEw8UHRofHh0aHBwgJC4nICIsIxwcKDcpLDAx"
            "NDQ0Hyc5PTgyPC4zNDL/2wBDAQkJCQwLDBgNDRgyIRwhMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIyMjIy"
            "MjIyMjIyMjL/wAARCAABAAEDASIAAhEBAxEB/8QAHwAAAQUBAQEBAQEAAAAAAAAAAAECAwQFBgcICQoL/8QAtRAAAgEDAwIEAwUF"
            "BAQAAAF9AQIDAAQRBRIhMUEGE1FhByJxFDKBkaEII0KxwRVS0fAkM2JyggkKFhcYGRolJicoKSo0NTY3ODk6Q0RFRkdISUpTVFVW"
            "V1hZWmNkZWZnaGlqc3R1dnd4eXqDhIWGh4iJipKTlJWWl5iZmqKjpKWmp6ipqrKztLW2t7i5usLDxMXGx8jJytLT1NXW19jZ2uHi"
            "4+Tl5ufo6erx8vP09fb3+Pn6/8QAHwEAAwEBAQEBAQEBAQAAAAAAAAECAwQFBgcICQoL/8QAtREAAgECBAQDBAcFBAQAAQJ3AAEC"
            "AxEEBSExBhJBUQdhcRMiMoEIFEKRobHBCSMzUvAVYnLRChYkNOEl8RcYGRomJygpKjU2Nzg5OkNERUZHSElKU1RVVldYWVpjZGVm"
            "Z2hpanN0dXZ3eHl6goOEhYaHiImKkpOUlZaXmJmaoqOkpaanqKmqsrO0tba3uLm6wsPExcbHyMnK0tPU1dbX2Nna4uPk5ebn6Onq"
            "8vP09fb3+Pn6/9oADAMBAAIRAxEAPwD5/ooooA//2Q==")


def image_payloads(tag: str) -> list[tuple[str, str, dict]]:
    """PNG and JPEG outputs (a real 1-pixel image, so ``onload`` fires) whose output metadata
    carries markup: nbconvert's lab template writes width and height unquoted into the
    ``<img>`` tag, outside the sanitizer; per mime type and at the top level."""
    out = []
    for mime, data in (("image/png", PNG_1PX), ("image/jpeg", JPEG_1PX)):
        short = mime.split("/")[1]
        out += [(mime, data, {mime: {"width": f"1 onload={js(f'{tag}-{short}-width')}"}}),
                (mime, data, {mime: {"height": f"1 onload={js(f'{tag}-{short}-height')}"}}),
                (mime, data, {"width": f"1 onload={js(f'{tag}-{short}-top-width')}"}),
                (mime, data, {mime: {"width": f'1" onload="{js(f"{tag}-{short}-quoted")}"'},
                              "unconfined": "x onload=1", "needs_background": "<b>"})]
    return out


def test_image_metadata_reaches_the_report_as_numbers_only(tmp_path):
    nb = new_notebook()
    cell = new_code_cell("")
    cell.outputs = [new_output("display_data", data={mime: data}, metadata=meta)
                    for mime, data, meta in image_payloads("m")]
    cell.outputs.append(new_output("display_data", data={"image/png": PNG_1PX},
                                   metadata={"image/png": {"width": 320, "height": 240.5, "unconfined": True}}))
    nb.cells = [cell]
    body, _ = runner.report_exporter().from_notebook_node(runner.reader_notebook(nb))
    images = re.findall(r"<img\b[^>]*>", body, re.S)
    assert len(images) == 9
    assert "onload" not in body and "PWNED" not in body, images
    assert all(a in images[-1] for a in ('width="320"', 'height="240.5"', 'class="unconfined"')), images[-1]


def test_table_escapes_every_cell_and_label_and_shows_counts_as_integers():
    hostile = html_payloads("t")[6]  # an onerror handler
    df = pd.DataFrame({"n": [64.0, 32.0], "accuracy": [0.5, 0.25], "completion": [hostile, "ok"]},
                      index=["<b>model</b>", "base"])
    html = report.table(df, caption="<i>cap</i>").to_html()
    assert "<img" not in html and "<b>model" not in html and "<i>cap" not in html
    assert "&lt;img src=x" in html and "&lt;b&gt;model&lt;/b&gt;" in html
    assert ">64<" in html and ">32<" in html and "64.000" not in html  # a count column
    assert ">0.500<" in html and ">0.250<" in html
    rows = report.table(pd.DataFrame({"a": [3.0, 0.5], "b": [4.0, 0.25]}, index=["count", "rate"])).to_html()
    assert ">3<" in rows and ">4<" in rows and ">0.500<" in rows  # a count row of a transposed table


def test_table_escapes_index_and_column_names():
    df = pd.DataFrame({"a": [1.0]}, index=["x"])
    df.index.name = '<img src=x onerror="alert(1)">'
    df.columns.name = "<script>alert(2)</script>"
    html = report.table(df).to_html()
    assert "<img" not in html and "<script>" not in html
    assert "&lt;img src=x" in html and "&lt;script&gt;alert(2)" in html
    multi = pd.DataFrame({"a": [1.0]}, index=pd.MultiIndex.from_tuples([("x", "y")], names=["<b>k</b>", None]))
    assert "&lt;b&gt;k&lt;/b&gt;" in report.table(multi).to_html()


ACTIVE = ("onerror", "onclick", "<script", "javascript", "<svg", "<animate", "<form", "<iframe", "data:text")


@pytest.mark.parametrize("payload", html_payloads("s"))
def test_sanitize_html_leaves_nothing_active(payload):
    clean = report.sanitize_html(payload)
    assert not any(word in clean.lower() for word in ACTIVE), clean
    assert report.sanitize_html(clean) == clean  # stable: a second pass finds nothing more


def test_sanitize_html_keeps_factlab_figures_tables_and_styling():
    png = '<img src="data:image/png;base64,iVBORw0KGgo=" width="3" alt="figure">'
    table = ('<table border="1" class="dataframe"><thead><tr style="text-align: right;"><th>run</th></tr></thead>'
             '<tbody><tr><td>0.500</td></tr></tbody></table>')
    styled = ("<div style=\"margin:0.4em 0\"><b>Q</b><br><blockquote style=\"white-space:pre-wrap;"
              "border-left:3px solid #ccc\">text</blockquote></div>")
    folded = "<details><summary>printed output (40 lines)</summary><pre>line</pre></details>"
    assert report.sanitize_html(png) == '<img src="data:image/png;base64,iVBORw0KGgo=" width="3" alt="figure">'
    assert 'class="dataframe"' in report.sanitize_html(table) and "<td>0.500</td>" in report.sanitize_html(table)
    assert "white-space:pre-wrap" in report.sanitize_html(styled) and "<blockquote" in report.sanitize_html(styled)
    assert report.sanitize_html(folded) == folded
    # data: URLs are image sources only; CSS that loads or runs is dropped
    assert "data:" not in report.sanitize_html('<a href="data:text/html,x">x</a><img src="data:text/html,x">')
    assert "url(" not in report.sanitize_html('<div style="background-image:url(https://x.org/t.png)">x</div>')


def test_reader_notebook_drops_stderr_script_outputs_and_folds_long_prints():
    nb = new_notebook()
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    cell = new_code_cell("print(cfg)")
    cell.outputs = [new_output("stream", name="stderr", text="Loading weights: 100%|####|\n"),
                    new_output("stream", name="stdout", text="".join(f"line {i}\n" for i in range(40))),
                    new_output("stream", name="stdout", text="short\n"),
                    # transformers' NotebookProgressCallback: a live bar and its loss table
                    new_output("display_data", data={"text/html": "<div><progress value='2' max='2'></progress>"
                                                                  " [2/2 00:05]</div><table><tr><td>1</td></tr></table>",
                                                     "text/plain": "<IPython.core.display.HTML object>"}),
                    new_output("display_data", data={"application/javascript": "alert(1)"}),
                    new_output("display_data", data={"text/vnd.mermaid": "<img src=x onerror=alert(1)>",
                                                     "application/vnd.jupyter.widget-view+json": {"model_id": "1"},
                                                     "text/plain": "kept"})]
    nb.cells = [cell]
    reader = runner.reader_notebook(nb)
    out = reader.cells[0].outputs
    assert len(out) == 3 and "Loading weights" not in json.dumps(out) and "<progress" not in json.dumps(out)
    assert "<details><summary>printed output (40 lines)" in out[0]["data"]["text/html"]
    assert out[1]["text"] == "short\n"
    assert out[2]["data"] == {"text/plain": "kept"}  # JavaScript, Mermaid and widget views are dropped
    assert "widgets" not in reader.metadata
    assert len(nb.cells[0].outputs) == 6 and "widgets" in nb.metadata  # the executed notebook is untouched


def test_write_index_escapes_lists_newest_first_with_headlines(tmp_path):
    hostile = "".join(html_payloads("i")[5:7])  # a script and an onerror handler
    runs = tmp_path / "runs"
    results = []
    for stamp, state, err in (("20260101-000000-a", "ok", None), ("20260102-000000-b", "failed", f"boom {hostile}")):
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


HOSTILE_NOTEBOOK_CODE = """\
import pandas as pd
from IPython.display import HTML, Javascript, Markdown, display
from factlab import report, runner
import matplotlib.pyplot as plt
html_payloads, markdown_payloads, svg_figure = {html!r}, {markdown!r}, {svg!r}
for p in html_payloads:
    display(HTML(p))  # the old way: the exporter sanitizes it
for p in markdown_payloads:
    display(Markdown(p))
report.show_text("\\n".join(html_payloads + markdown_payloads), label="Q: capital of France?")
df = pd.DataFrame({{"completion": html_payloads, "n": [3.0] * len(html_payloads)}})
df.index.name = {index_name!r}
df.columns.name = {columns_name!r}
display(report.table(df))
display({{"image/svg+xml": svg_figure}}, raw=True)
display(Javascript({script_js!r}))
display({{"text/vnd.mermaid": {mermaid!r}, "text/plain": "mermaid"}}, raw=True)
for mime, data, meta in {images!r}:
    display({{mime: data}}, metadata=meta, raw=True)
fig, ax = plt.subplots(figsize=(2, 1.5)); ax.plot([0, 1], [0, 1]); ax.set_title("factlab figure"); plt.show()
runner.save_headline({run_dir!r}, {{"accuracy": 0.5}})
"""


@pytest.fixture(scope="module")
def hostile_report(tmp_path_factory):
    """One real kernel run (papermill) of a notebook that shows every payload the ways notebooks
    can: HTML and Markdown outputs, ``show_text``, a ``report.table`` whose index and column
    names carry markup, an SVG figure, a JavaScript output, a Mermaid output, PNG / JPEG images
    whose metadata carries markup, a Markdown cell and a raw HTML cell; exported by the
    runner's reader-facing exporter."""
    d = tmp_path_factory.mktemp("hostile")
    nb = new_notebook()
    nb.cells = [new_markdown_cell("# Hostile completion\n\n" + "\n\n".join(markdown_payloads("cell"))),
                new_raw_cell("\n".join(html_payloads("raw")), metadata={"raw_mimetype": "text/html"}),
                new_code_cell(HOSTILE_NOTEBOOK_CODE.format(
                    html=html_payloads("html"), markdown=markdown_payloads("markdown"), svg=SVG_FIGURE,
                    index_name=f'<img src=x onerror="{js("index-name")}">',
                    columns_name=f'<img src=x onerror="{js("columns-name")}">', script_js=js("javascript-output"),
                    mermaid=f'<img src=x onerror="{js("mermaid")}">', images=image_payloads("metadata"),
                    run_dir=str(d)))]
    nbformat.write(nb, d / "hostile.ipynb")
    pm.execute_notebook(str(d / "hostile.ipynb"), str(d / "notebook.ipynb"), kernel_name="python3", progress_bar=False)
    return runner.html_report(d / "notebook.ipynb", d / "report.html")


def test_every_payload_reaches_the_report_sanitized(hostile_report):
    page = hostile_report.read_text()
    body = page[page.index("Hostile completion"):]
    assert "<script" not in page  # the page runs no script at all, the template's loaders included
    # markup is checked on real tags only: escaped text (show_text) starts with &lt;, not <
    assert not re.search(r"<(svg|animate|form|iframe|object|embed|math|style|meta|base|link)\b", body, re.I)
    assert not re.search(r"<[a-z][^>]*\son[a-z]+\s*=", body, re.I), "an event handler survived"
    assert not re.search(r"<[a-z][^<>]*\s(href|src|action)\s*=\s*[\"']?[\x00-\x20]*(javascript|vbscript|data:text)",
                         body, re.I), "a script URL survived"
    assert "|PWNED-html-comment" in body  # the text is there, visible, escaped (show_text)
    assert "markdown reference link" in body and "cell entity link" in body  # links kept as text
    assert "&lt;img src=x onerror" in body  # the table's index and column names, escaped
    assert 'src="data:image/png;base64,' in body  # factlab's figure
    assert 'src="data:image/svg+xml;base64,' in body  # an SVG figure is an image, never inline markup
    assert body.count('src="data:image/jpeg;base64,') == 4 and "onload" not in body  # image metadata: numbers only
    assert "import pandas" not in body  # no code cells in the reader report
    assert "<h2>Headline</h2>" in body and "accuracy" in body


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run"]

# Click every element of the page from the DOM. A link whose URL is not javascript: (and a form
# that does not submit to one) is kept from navigating, so the page stays for the next click.
CLICK_EVERYTHING = r"""(() => {
  const protocol = (url) => { try { return new URL(url, document.baseURI).protocol } catch (e) { return '' } };
  const target = (a) => (a.href && a.href.baseVal !== undefined)
      ? (a.href.animVal || a.getAttribute('href') || a.getAttribute('xlink:href') || '') : a.href;
  if (!window.__factlabGuard) {
    window.__factlabGuard = true;
    document.addEventListener('click', (e) => {
      const a = e.target.closest && e.target.closest('a, area');
      if (a && protocol(target(a)) !== 'javascript:') e.preventDefault();
    }, true);
    document.addEventListener('submit', (e) => {
      if (protocol(e.target.getAttribute('action') || '') !== 'javascript:') e.preventDefault();
    }, true);
  }
  const all = Array.from(document.querySelectorAll('*'));
  for (const el of all) el.dispatchEvent(new MouseEvent('click', {bubbles: true, cancelable: true, view: window}));
  return all.length;
})()"""
CONTROLS = ("document.body.insertAdjacentHTML('beforeend', \"<a href=\\\"javascript:void(document.title+='|CONTROL-CLICK')"
            "\\\">control</a><img src=x onerror=\\\"document.title+='|CONTROL-LOAD'\\\">\")")
STILL_THE_REPORT = "document.body.innerText.includes('Hostile completion')"


class Chromium:
    """Headless Chromium driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``:
    NUL-terminated JSON, commands on fd 3, answers and events on fd 4)."""

    def __init__(self, profile: Path):
        to_r, to_w = os.pipe()
        from_r, from_w = os.pipe()
        # high descriptors, so that moving them to 3 and 4 in the child never overwrites one another
        child_in, child_out = fcntl.fcntl(to_r, fcntl.F_DUPFD, 10), fcntl.fcntl(from_w, fcntl.F_DUPFD, 10)
        os.close(to_r)
        os.close(from_w)

        def pipes_on_3_and_4():
            os.dup2(child_in, 3)
            os.dup2(child_out, 4)

        self.proc = subprocess.Popen([CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}",
                                      "--remote-debugging-pipe", "about:blank"],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     close_fds=False, preexec_fn=pipes_on_3_and_4)
        os.close(child_in)
        os.close(child_out)
        self.write, self.read = to_w, from_r
        self.buffer, self.events, self.last_id = b"", [], 0

    def _message(self, deadline: float) -> dict:
        while b"\0" not in self.buffer:
            ready, _, _ = select.select([self.read], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self.read, 1 << 16)
            if not chunk:
                raise EOFError("Chromium closed the DevTools pipe")
            self.buffer += chunk
        raw, _, self.buffer = self.buffer.partition(b"\0")
        return json.loads(raw)

    def call(self, method: str, params: dict | None = None, session: str | None = None, timeout: float = 60) -> dict:
        self.last_id += 1
        msg = {"id": self.last_id, "method": method, "params": params or {}}
        if session:
            msg["sessionId"] = session
        os.write(self.write, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            m = self._message(deadline)
            if m.get("id") == self.last_id:
                if "error" in m:
                    raise RuntimeError(f"{method}: {m['error']}")
                return m.get("result", {})
            self.events.append(m)

    def wait_event(self, method: str, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            for i, m in enumerate(self.events):
                if m.get("method") == method:
                    return self.events.pop(i)
            self.events.append(self._message(deadline))

    def evaluate(self, session: str, expression: str):
        res = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True}, session)
        return res.get("result", {}).get("value")

    def close(self) -> None:
        try:
            self.call("Browser.close", timeout=10)
        except (OSError, RuntimeError, TimeoutError, EOFError):
            pass
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self.write)
        os.close(self.read)


def click_everything_in_chromium(page: Path, profile: Path) -> dict:
    """Open ``page`` in headless Chromium, wait for load (and SVG animations), dispatch a click on
    every element. Returns the title once loaded (``loaded``), after the clicks (``clicked``) and
    after two controls that must run (``controls``: a clicked ``javascript:`` link and an
    ``onerror`` handler added to the page), and how many elements were clicked (``elements``)."""
    browser = Chromium(profile)
    try:
        target = next(t for t in browser.call("Target.getTargets")["targetInfos"] if t["type"] == "page")
        session = browser.call("Target.attachToTarget", {"targetId": target["targetId"], "flatten": True})["sessionId"]
        browser.call("Page.enable", session=session)
        browser.call("Runtime.enable", session=session)
        browser.call("Page.navigate", {"url": page.resolve().as_uri()}, session)
        browser.wait_event("Page.loadEventFired")
        time.sleep(1.0)  # the animations end, the images fail to load
        seen = {"loaded": browser.evaluate(session, "document.title")}
        seen["elements"] = browser.evaluate(session, CLICK_EVERYTHING)
        time.sleep(1.0)  # javascript: URLs run as queued tasks
        seen["clicked"] = browser.evaluate(session, "document.title")
        assert browser.evaluate(session, STILL_THE_REPORT), "the clicks navigated away from the report"
        browser.evaluate(session, CONTROLS)
        time.sleep(0.5)
        browser.evaluate(session, CLICK_EVERYTHING)
        time.sleep(1.0)
        seen["controls"] = browser.evaluate(session, "document.title")
        return seen
    finally:
        browser.close()


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed (Debian package `chromium`; "
                                             ".ci/run installs it where it can)")
def test_no_payload_runs_in_headless_chromium_even_when_every_element_is_clicked(hostile_report, tmp_path):
    seen = click_everything_in_chromium(hostile_report, tmp_path / "profile")
    assert seen["elements"] > 100  # the page loaded, rendered, and was clicked through
    assert seen["loaded"] and "PWNED" not in seen["loaded"], seen  # nothing ran on load
    assert seen["clicked"] == seen["loaded"], seen  # nor on a click
    # the harness sees script when it runs: a javascript: link clicked from the DOM, an onerror handler
    assert "CONTROL-CLICK" in seen["controls"] and "CONTROL-LOAD" in seen["controls"], seen


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

# issue 43 round-3 probe (run with PYTHONPATH=src, FACTLAB_CACHE=<scratch>); one line per probe: CLASS | probe | detail
import sys, os, subprocess, time, threading
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
from probe_round3 import *
from factlab.manifest import run_lock
import nbformat
from nbformat.v4 import new_notebook, new_code_cell

def lock_probe(name, setup):
    d = T / name; d.mkdir()
    (d / "config.yaml").write_text("x: 1\n")
    setup(d)
    def go():
        try:
            with run_lock(d):
                pass
            res.append(("accepted", ""))
        except Exception as e:
            res.append(("clear error" if "Traceback" not in str(e) and not isinstance(e, (OSError,)) else "traceback", f"{type(e).__name__}: {e}"))
    res = []
    t = threading.Thread(target=go, daemon=True); t.start(); t.join(10)
    if t.is_alive():
        record("hang", f"run_lock {name}", "")
    else:
        record(res[0][0], f"run_lock {name}", res[0][1])

target = T / "victim.txt"; target.write_text("precious\n")
lock_probe("lock-fifo", lambda d: os.mkfifo(d / ".run.lock"))
lock_probe("lock-dir", lambda d: (d / ".run.lock").mkdir())
lock_probe("lock-hardlink", lambda d: os.link(target, d / ".run.lock"))
record("data lost" if target.read_text() != "precious\n" else "works as documented", "lock-hardlink victim after", repr(target.read_text()))
target.write_text("precious\n")
lock_probe("nb-fifo", lambda d: os.mkfifo(d / "notebook.ipynb"))
lock_probe("nb-hardlink", lambda d: os.link(target, d / "notebook.ipynb"))
lock_probe("report-hardlink", lambda d: os.link(target, d / "report.html"))
lock_probe("subdir-link", lambda d: ((d / "checkpoints").mkdir(), os.symlink("/tmp", d / "checkpoints" / "checkpoint-1")))
lock_probe("socket", lambda d: __import__("socket").socket(__import__("socket").AF_UNIX).bind(str(d / "figure.png")))

# papermill writing the executed notebook through a hard link
src = T / "tiny.ipynb"; nb = new_notebook(); nb.cells = [new_code_cell("x = 1")]; nbformat.write(nb, src)
out = T / "hl"; out.mkdir(); target.write_text("precious\n"); os.link(target, out / "notebook.ipynb")
from factlab.runner import execute_notebook
execute_notebook(src, out / "notebook.ipynb", {})
record("data lost" if "precious" not in target.read_text() else "works as documented", "papermill through a hard-linked notebook.ipynb",
       target.read_text()[:60].replace("\n", " "))

# issue 43 round-3b probe: factlab train --run-dir pointed at folders that are not a fresh run of this
# notebook. Nothing launches: launch._run is a stub that records the command and fails.
import sys, os, json, io, contextlib
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from probe_round3 import *
from factlab import launch
from factlab.cli import main
launched = []
launch._run = lambda cmd: (launched.append(cmd), (1, 0.0))[1]

def go(name, setup, args=(), expect="refused"):
    d = T / name.replace(" ", "_")[:40]; d.mkdir()
    setup(d); before = {p.name: p.read_bytes() for p in d.iterdir() if p.is_file()}; n = len(launched)
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            rc = main(["train", "01_corver", "--smoke", "--num-processes", "1", "--run-dir", str(d), *args])
        except SystemExit as e:
            rc = e.code
        except Exception as e:
            record("traceback", name, f"{type(e).__name__}: {e}"[:200]); return
    after = {p.name: p.read_bytes() for p in d.iterdir() if p.is_file()}
    replaced = [k for k in before if after.get(k) != before[k]]
    if rc == 2 and not replaced and len(launched) == n:
        record("clear error" if expect == "refused" else "unclear", name, err.getvalue().strip().splitlines()[-1][:200])
    elif replaced:
        record("data lost" if expect == "refused" else "works as documented", name, f"rc {rc}; replaced {replaced}; launched {len(launched) - n}")
    else:
        record("works as documented" if expect != "refused" else "silently wrong", name, f"rc {rc}; launched {len(launched) - n}")

ok = lambda nb: (lambda d: ((d / "manifest.json").write_text(json.dumps({"notebook": nb, "state": "ok"})), (d / "config.yaml").write_text("finished run's config\n")))
go("another notebook's finished run", ok("00_quickstart"))
go("another notebook's run named by launch.json", lambda d: ((d / "launch.json").write_text(json.dumps({"notebook": "00_quickstart"})), (d / "config.yaml").write_text("x: 1\n")))
go("a folder with an unrelated config.yaml", lambda d: (d / "config.yaml").write_text("precious: user data\n"))
# this notebook's own finished train run, launched again with other params
from factlab.runner import load_params
from factlab.config import dump_config
cfg = load_params("01_corver", ROOT / "params/01_corver_smoke.yaml")
def own(d):
    (d / "config.yaml").write_text(dump_config(cfg)); (d / "launch.json").write_text(json.dumps({"notebook": "01_corver", "runs": {}}))
go("own finished train run, --set grpo.learning_rate=0.1", own, ["--set", "grpo.learning_rate=0.1"])
go("own train run, same params (resume)", own, [], expect="works")
go("a folder that is a manifest.json FIFO", lambda d: os.mkfifo(d / "manifest.json"))

# issue 43 round-3b probe: a cached warm start with a damaged warmstart.json (its manifest rewritten to
# match, as a factlab that wrote it wrongly would), without it, or with it a FIFO. Training is replaced
# by a stub that records it was asked for: a damaged cache must never cost an SFT before failing.
import sys, os, json, shutil, threading
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from probe_round3 import *
from factlab.recipes import warmstart as W
from factlab.experiment import WarmStartSection
from factlab.integrity import write_file_manifest

asked = []
class Trained(Exception): pass
def fake_sft(*a, **k):
    asked.append(1); raise Trained("an SFT would start here")
W.run_sft = fake_sft
ws = WarmStartSection(enabled=True)
root = T / "ws"
key = W.cache_key(ws, "tiny-random-smollm2")
good = {"key": key, "base_model": "tiny-random-smollm2", "demos": {"corver_qa": 2}, "abstentions": 0,
        "sft": {"seconds": 1.0, "train_runtime_s": 1.0, "steps": 2, "first_loss": 2.0, "last_loss": 1.0, "resumed": False}}
def folder(report_text=None, fifo=False, deep=False):
    shutil.rmtree(root, ignore_errors=True)
    f = root / key; (f / "model").mkdir(parents=True); (f / "model" / "config.json").write_text("{}")
    (f / "demos.jsonl").write_text("")
    if fifo:
        os.mkfifo(f / "warmstart.json")
    elif report_text is not None:
        (f / "warmstart.json").write_text(report_text)
    write_file_manifest(f)
    return f
def go(name, **kw):
    folder(**kw); n = len(asked); res = []
    def run():
        try:
            w = W.build(ws, "tiny-random-smollm2", root=root)
            w.summary(); w.metrics(); res.append(("ok", "loaded, summary and metrics read"))
        except Trained as e:
            res.append(("late", "the damaged cache started an SFT (it would fail at os.replace after training)"))
        except (ValueError, OSError) as e:
            res.append(("clear", f"{type(e).__name__}: {str(e)[:200]}"))
        except Exception as e:
            res.append(("tb", f"{type(e).__name__}: {str(e)[:200]}"))
    th = threading.Thread(target=run, daemon=True); th.start(); th.join(20)
    if th.is_alive():
        record("hang", name, "> 20 s"); return
    k, d = res[0]
    record({"ok": "works as documented", "clear": "clear error", "late": "accepted at load, fails later", "tb": "traceback"}[k], name, d)

go("warmstart.json whole", report_text=json.dumps(good))
go("warmstart.json {}", report_text="{}")
go("warmstart.json sft.seconds a string", report_text=json.dumps({**good, "sft": {**good["sft"], "seconds": "x"}}))
go("warmstart.json nested 100k deep", report_text="[" * 100000 + "]" * 100000)
go("warmstart.json truncated", report_text=json.dumps(good)[:40])
go("warmstart.json missing (folder there)")
go("warmstart.json a FIFO", fifo=True)
go("warmstart.json first_loss null (an SFT that logged no loss)", report_text=json.dumps({**good, "sft": {**good["sft"], "first_loss": None, "last_loss": None}}))

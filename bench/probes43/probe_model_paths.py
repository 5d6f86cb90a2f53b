# issue 43 round-3b probe: model.name / model.adapter / judge.model naming a device, a FIFO or a plain
# file, and eval batch sizes of 1e9: accepted at load? what happens when the model loads?
import sys, os, threading
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from probe_round3 import *
from factlab.config import ConfigError
from factlab import models
os.mkfifo(T / "fifo"); (T / "file.bin").write_bytes(b"x" * 100)
def timed(fn, limit=30):
    res = []
    th = threading.Thread(target=lambda: res.append(_try(fn)), daemon=True); th.start(); th.join(limit)
    return res[0] if res else ("hang", f"> {limit} s")
def _try(fn):
    try:
        return ("ok", str(fn())[:120])
    except Exception as e:
        return (type(e).__name__, str(e).replace("\n", " ")[:160])
for key, value in [("name", "/dev/zero"), ("name", str(T / "fifo")), ("name", str(T / "file.bin")),
                   ("adapter", str(T / "fifo")), ("adapter", "/dev/zero"), ("adapter", str(T / "file.bin"))]:
    p = params("m", f"model: {{{key}: '{value}'}}\n")
    try:
        load("00_quickstart", p); at_load = "accepted"
    except ConfigError as e:
        record("clear error", f"model.{key}: {value}", str(e).replace("\n", " ")[-160:]); continue
    kw = {"adapter": value} if key == "adapter" else {}
    k, d = timed(lambda: models.load_model(value if key == "name" else "tiny-random-smollm2", device="cpu", **kw))
    record("accepted at load, fails later" if k != "ok" else "silently wrong?", f"model.{key}: {value}", f"at load: accepted; loading: {k}: {d}")
for key, value in [("eval_generation.batch_size", "1000000000")]:
    sec, k = key.split(".")
    p = params("b", f"{sec}: {{{k}: {value}}}\n")
    try:
        cfg = load("00_quickstart", p); record("accepted", f"{key}: {value}", "see generate below")
    except ConfigError as e:
        record("clear error", f"{key}: {value}", str(e)[-150:])
# what generate does with batch_size 1e9 on 3 prompts, on the tiny model
model, tok = models.load_model("tiny-random-smollm2", device="cpu")
k, d = timed(lambda: [o[0].text[:10] for o in models.generate(model, tok, ["a", "b", "c"], max_new_tokens=2, batch_size=10**9, progress=False)], 60)
record("works as documented" if k == "ok" else "accepted at load, fails later", "generate batch_size 1e9 on 3 prompts", f"{k}: {d}")

# issue 43 round-3 probe (run with PYTHONPATH=src, FACTLAB_CACHE=<scratch>); one line per probe: CLASS | probe | detail
import sys, os, shutil
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
from probe_round3 import *
from factlab import organism, models
d = organism.model_dir("organism-tiny"); print(d)
w = d / "model.safetensors"
orig = w.read_bytes()
def try_load(name):
    try:
        path = models.resolve_model("organism-tiny")
        from safetensors.torch import load_file
        sd = load_file(str(Path(path) / "model.safetensors"))
        return "loaded", f"{len(sd)} tensors from {path}"
    except Exception as e:
        return type(e).__name__, str(e)[:200]
# zero 4 KB inside
b = bytearray(orig); mid = len(b) // 2; b[mid:mid + 4096] = b"\0" * 4096; w.write_bytes(bytes(b))
r = try_load("zeroed"); record("silently wrong" if r[0] == "loaded" else ("clear error" if "IntegrityError" in r[0] else "traceback"), "organism: 4 KB zeroed in model.safetensors", r)
w.write_bytes(orig[: len(orig) // 2])
r = try_load("truncated"); record("silently wrong" if r[0] == "loaded" else ("clear error" if "IntegrityError" in r[0] else "traceback/unclear"), "organism: truncated model.safetensors", r)
w.write_bytes(orig)
tok = d / "tokenizer.json"; tb = tok.read_bytes(); tok.unlink()
r = try_load("no tokenizer")
try:
    from transformers import AutoTokenizer
    AutoTokenizer.from_pretrained(str(d)); r2 = "tokenizer loaded"
except Exception as e:
    r2 = f"{type(e).__name__}: {str(e)[:150]}"
record("clear error" if "IntegrityError" in r[0] else "unclear/late", "organism: tokenizer.json removed", (r, r2))
tok.write_bytes(tb)

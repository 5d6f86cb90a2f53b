# issue 43 round-4 probe: classes earlier rounds left out. outputs/index.html and cache lock files as symbolic
# links; secrets in fields that are not URLs reaching errors; base: cycles and deep nesting in params; a judge
# that answers with a deflate bomb or a body in an encoding not asked for. One line per probe: CLASS | probe | detail.
# Run with PYTHONPATH=src, FACTLAB_CACHE=<scratch> under nice; under a minute.
import os, sys, zlib
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from probe_round3 import *

S = "S3CR3T-p43d"
victim = T / "victim.txt"


def fresh_victim():
    victim.write_text("precious\n")


# -- symbolic links where factlab writes ------------------------------------------------------------------------
from factlab.runner import write_index, RunResult
fresh_victim()
(T / "out").mkdir()
os.symlink(victim, T / "out" / "index.html")
try:
    write_index([], T / "out" / "index.html")
    ok = victim.read_text() == "precious\n" and not (T / "out" / "index.html").is_symlink()
    record("works as documented" if ok else "security hole", "outputs/index.html a symlink to another file",
           f"victim intact: {ok}; the link replaced by the index: {not (T / 'out' / 'index.html').is_symlink()}")
except Exception as e:
    record("clear error" if victim.read_text() == "precious\n" else "security hole", "outputs/index.html a symlink", f"{type(e).__name__}: {e}")

from factlab.paths import build_lock, SymlinkRefused
fresh_victim()
folder = T / "cache" / "organism" / "abc"
folder.parent.mkdir(parents=True)
os.symlink(victim, folder.with_name("abc.lock"))
try:
    with build_lock(folder):
        pass
    record("security hole" if victim.read_text() != "precious\n" else "silently wrong", "cache <folder>.lock a symlink", "lock taken through the link")
except SymlinkRefused as e:
    record("clear error", "cache <folder>.lock a symlink", str(e)[:160])

# -- secrets in fields that are not URLs, reaching a validation error -------------------------------------------
for what, text in (("model.name a URL with a password", f"model: {{name: 'https://u:{S}@h.example/m', dtype: float32}}\n"),
                   ("judge.model a URL with a key query", f"judge: {{model: 'https://h.example/m?api_key={S}', backend: nope}}\n"),
                   ("grpo.extra.hub_model_id a URL with a password", f"grpo: {{extra: {{hub_model_id: 'https://u:{S}@h.example/x'}}}}\n"),
                   ("an unknown key whose value is a URL with a password", f"grpo: {{not_a_field: 'https://u:{S}@h.example/x'}}\n")):
    p = params(what.replace(" ", "_")[:40], text, base="01_corver_lm.yaml")
    rc, out = cli("check", "01_corver", "--params", p)
    record("security hole" if S in out else "clear error" if rc == 2 else "works as documented" if rc == 0 else "unclear error",
           f"params: {what}", f"exit {rc}: {out.strip().splitlines()[-1][:160] if out.strip() else ''}")

# -- params: base: cycles, depth ---------------------------------------------------------------------------------
a, b = T / "cyc_a.yaml", T / "cyc_b.yaml"
a.write_text(f"base: {b}\n"); b.write_text(f"base: {a}\n")
rc, out = cli("check", "00_quickstart", "--params", a, timeout=60)
record("hang / crash" if rc == "TIMEOUT" else "clear error" if rc == 2 and "Traceback" not in out else "traceback",
       "params: base: a -> b -> a", f"exit {rc}: {out.strip().splitlines()[-1][:160] if out.strip() else ''}")
me = T / "self.yaml"; me.write_text(f"base: {me}\n")
rc, out = cli("check", "00_quickstart", "--params", me, timeout=60)
record("hang / crash" if rc == "TIMEOUT" else "clear error" if rc == 2 and "Traceback" not in out else "traceback",
       "params: base: itself", f"exit {rc}: {out.strip().splitlines()[-1][:160] if out.strip() else ''}")
chain = [T / f"chain{i}.yaml" for i in range(300)]
for i, f in enumerate(chain):
    f.write_text(f"base: {chain[i + 1]}\n" if i + 1 < len(chain) else f"base: {ROOT / 'params' / '00_quickstart_smoke.yaml'}\n")
rc, out = cli("check", "00_quickstart", "--params", chain[0], timeout=60)
record("hang / crash" if rc == "TIMEOUT" else "traceback" if "Traceback" in out else "clear error" if rc == 2
       else "works as documented", "params: a chain of 300 base: files",
       f"exit {rc}: {out.strip().splitlines()[-1][:160] if out.strip() else ''}")
deep = params("deep", "grpo: {extra: " + "[" * 5000 + "]" * 5000 + "}\n")
rc, out = cli("check", "00_quickstart", "--params", deep, timeout=60)
record("hang / crash" if rc == "TIMEOUT" else "traceback" if "Traceback" in out else "clear error" if rc == 2
       else "unclear error", "params: 5,000 nested lists", f"exit {rc}: {out.strip().splitlines()[-1][:160] if out.strip() else ''}")

# -- judges: deflate bomb, an encoding not asked for ---------------------------------------------------------------
import time
from factlab.judges import OpenAIJudge, JudgeError

bomb = zlib.compress(b"{" + b" " * (200 * 2**20), 9)  # 200 MB of spaces in ~200 KB


def bomb_handler(c, head):
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: deflate\r\n"
              + f"Content-Length: {len(bomb)}\r\n\r\n".encode() + bomb)


def br_handler(c, head):
    body = b"\x0b\x02\x80{}\x03"
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: br\r\n"
              + f"Content-Length: {len(body)}\r\n\r\n".encode() + body)


import resource
for what, handler in (("a 200 MB deflate bomb", bomb_handler), ("a body in brotli (not asked for)", br_handler)):
    s, url = serve(handler)
    j = OpenAIJudge("m", url, cache=None, max_retries=1, backoff_s=0.0, timeout_s=10)
    rss0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.monotonic()
    try:
        j.judge(["q"])
        record("silently wrong", f"judge: {what}", "answered")
    except JudgeError as e:
        grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss0) / 1024
        record("clear error" if grown < 100 else "hang / crash", f"judge: {what}",
               f"{time.monotonic() - t0:.1f} s, +{grown:.0f} MB peak: {str(e)[:160]}")
    except Exception as e:
        record("traceback", f"judge: {what}", f"{type(e).__name__}: {str(e)[:160]}")
    s.close()

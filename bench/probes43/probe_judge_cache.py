# issue 43 round-3b probe: the judge cache (answers.sqlite) locked by another process, of another
# schema, damaged mid-file, or not a file. One line per probe: CLASS | probe | detail.
import sys, os, sqlite3, subprocess, time, shutil
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from probe_round3 import *
from factlab.judges import JudgeCache, JudgeError
JudgeCache.lock_wait_s = 2.0

def filled(name, n=2000):
    d = T / name; d.mkdir(); p = d / "answers.sqlite"
    c = JudgeCache(p); c.put_many({f"k{i}": "x" * 200 for i in range(n)}); del c
    return p

def holder(p, mode, seconds):
    ins = 'db.execute("INSERT OR REPLACE INTO answers VALUES (1, 2)"); ' if mode != "EXCLUSIVE" else ""
    code = f"import sqlite3,time; db=sqlite3.connect({str(p)!r}, isolation_level=None); db.execute('BEGIN {mode}'); " \
           f"{ins}print('held', flush=True); time.sleep({seconds})"
    pr = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    pr.stdout.readline(); return pr

def use(p, what="get"):
    c = JudgeCache(p)
    if what == "get":
        return len(c.get_many([f"k{i}" for i in range(5000)]))
    c.put_many({"new": "y"}); return len(c)

def case(name, p, what="get", expect="works"):
    t0 = time.monotonic(); had = {x.name for x in p.parent.iterdir() if "corrupt" in x.name}
    try:
        got = use(p, what)
        cls = "works as documented" if expect in ("works", "corrupt") else "silently wrong"
        detail = f"{got} answers"
    except JudgeError as e:
        cls = "clear error" if expect == "error" else "unclear error"; detail = f"JudgeError: {str(e)[:200]}"
    except Exception as e:
        cls = "traceback"; detail = f"{type(e).__name__}: {str(e)[:200]}"
    corrupt = sorted(x.name for x in p.parent.iterdir() if "corrupt" in x.name and x.name not in had)
    if corrupt and expect != "corrupt":
        cls = "data lost"
    if expect == "corrupt" and not corrupt and cls == "works as documented":
        cls = "silently wrong"
    if cls == "clear error" and "locked by another process" in detail and expect == "error" and "database is locked" not in detail:
        cls = "unclear error"  # says locked for what is no lock
    record(cls, name, f"{time.monotonic() - t0:.1f} s; {detail}; set aside: {corrupt}")

p = filled("excl"); pr = holder(p, "EXCLUSIVE", 6); case("EXCLUSIVE lock held 6 s (wait 2 s): get", p, expect="error"); pr.kill()
p = filled("excl-short"); pr = holder(p, "EXCLUSIVE", 1); case("EXCLUSIVE lock held 1 s (wait 2 s): get", p); pr.wait()
p = filled("immediate"); pr = holder(p, "IMMEDIATE", 6); case("RESERVED lock (BEGIN IMMEDIATE) held 6 s: get", p); pr.kill()
p = filled("immediate-put"); pr = holder(p, "IMMEDIATE", 6); case("RESERVED lock held 6 s: put", p, "put", expect="error"); pr.kill()
p = filled("excl-corrupt-exists"); (p.parent / "answers.corrupt").write_text("earlier"); pr = holder(p, "EXCLUSIVE", 6)
case("EXCLUSIVE lock + an earlier answers.corrupt", p, expect="error"); pr.kill()
# other schema
d = T / "schema"; d.mkdir(); p = d / "answers.sqlite"; db = sqlite3.connect(p); db.execute("CREATE TABLE answers (key TEXT)"); db.commit(); db.close()
case("answers table of another schema (no text column)", p, expect="error")
# damaged mid-file
p = filled("midpage", 5000); b = bytearray(p.read_bytes()); mid = len(b) // 2; b[mid - mid % 4096: mid - mid % 4096 + 4096] = b"\xff" * 4096; p.write_bytes(bytes(b))
case("one page 0xff mid-file", p, expect="corrupt")
p = filled("trunc", 5000); p.write_bytes(p.read_bytes()[: len(p.read_bytes()) // 2])
case("truncated to half", p, expect="corrupt")
d = T / "dir"; d.mkdir(); (d / "answers.sqlite").mkdir()
case("answers.sqlite is a folder", d / "answers.sqlite", expect="error")
d = T / "fifo"; d.mkdir(); os.mkfifo(d / "answers.sqlite")
import threading
res = []
th = threading.Thread(target=lambda: res.append(case("answers.sqlite is a FIFO", d / "answers.sqlite", expect="error")), daemon=True); th.start(); th.join(20)
if th.is_alive(): record("hang", "answers.sqlite is a FIFO", "> 20 s")
d = T / "ro"; d.mkdir(); p = d / "answers.sqlite"; p.write_bytes(b"")
case("zero-byte answers.sqlite", p, "put")

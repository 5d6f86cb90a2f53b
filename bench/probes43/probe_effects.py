# issue 43 round-3b probe: damaged results/<name>/effects.json, power.json and rows.jsonl.gz against
# factlab evidence --recompute and the table. One line per probe: CLASS | probe | detail.
import sys, shutil, json, gzip
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from probe_round3 import *
from factlab import evidence as E

def fresh():
    d = T / "results"; shutil.rmtree(d, ignore_errors=True); d.mkdir()
    shutil.copytree(ROOT / "results" / "klcf", d / "klcf")
    return d
E.results_dir = lambda root=None: T / "results"

def go(name, damage, action="recompute"):
    d = fresh(); damage(d / "klcf")
    before = (d / "klcf" / "effects.json").read_bytes() if (d / "klcf" / "effects.json").exists() else None
    try:
        if action == "recompute":
            E.recompute(["klcf"], replicates=50)
            after = json.loads((d / "klcf" / "effects.json").read_text())
            record("works as documented" if after.get("effects") else "silently wrong", name, f"recomputed: {after.get('verdict')}")
        else:
            t = E.write_table(d).read_text()
            row = [l for l in t.splitlines() if l.startswith("| klcf")]
            record("clear error" if row and "unreadable" in row[0] else "works as documented", name, (row or ["no row"])[0][:200])
    except ValueError as e:
        record("clear error", name, f"ValueError: {str(e)[:200]}")
    except Exception as e:
        record("traceback", name, f"{type(e).__name__}: {str(e)[:200]}")

def trunc(f): return lambda d: (d / f).write_bytes((d / f).read_bytes()[:len((d / f).read_bytes()) // 2])
def setj(f, v): return lambda d: (d / f).write_text(json.dumps(v))
eff = json.loads((ROOT / "results/klcf/effects.json").read_text())
go("recompute: truncated effects.json", trunc("effects.json"))
go("recompute: effects.json is a JSON list", setj("effects.json", [1, 2]))
go("recompute: effects.json is 'null'", setj("effects.json", None))
go("recompute: effects.json not UTF-8", lambda d: (d / "effects.json").write_bytes(b"\xff\xfe{"))
go("recompute: truncated rows.jsonl.gz", trunc("rows.jsonl.gz"))
go("recompute: rows.jsonl.gz header says another hypothesis", lambda d: (d / "rows.jsonl.gz").write_bytes(gzip.compress(
    gzip.decompress((d / "rows.jsonl.gz").read_bytes()).replace(b'"hypothesis": "klcf"', b'"hypothesis": "corver"', 1))))
go("recompute: rows.jsonl.gz a row without 'arm'", lambda d: (d / "rows.jsonl.gz").write_bytes(gzip.compress(
    gzip.decompress((d / "rows.jsonl.gz").read_bytes()) + b'{"kind": "row", "question": "x"}\n')))
go("recompute: rows.jsonl.gz a line that is a JSON list", lambda d: (d / "rows.jsonl.gz").write_bytes(gzip.compress(
    gzip.decompress((d / "rows.jsonl.gz").read_bytes()) + b'[1]\n')))
go("table: cpu_minutes a string", setj("effects.json", {**eff, "cpu_minutes": "x"}), "table")
go("table: an effect's mean a string", setj("effects.json", {**eff, "effects": [{**eff["effects"][0], "mean": "x"}]}), "table")
go("table: an effect's mean null", setj("effects.json", {**eff, "effects": [{**eff["effects"][0], "mean": None}]}), "table")
go("table: wall_minutes a string", setj("effects.json", {**eff, "wall_minutes": "x"}), "table")
go("table: power.json rows not a list", lambda d: (d / "power.json").write_text('{"rows": 5}'), "table")
go("table: power.json a row without seed_sd", lambda d: (d / "power.json").write_text(json.dumps({"rows": [{"comparison": eff["effects"][0]["comparison"], "seeds": eff["effects"][0]["seeds"], "mde": 0.1}]})), "table")
go("table: truncated effects.json", trunc("effects.json"), "table")

# issue 43 round-3b probe: corpus index shards and metadata, a datastore's precache.json, the file
# manifest itself, and a run manifest's attempts / pid. One line per probe: CLASS | probe | detail.
import sys, os, json, shutil, threading
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from probe_round3 import *
from factlab.corpus.infinigram import build_from_token_ids, CorpusIndex
from factlab.integrity import write_file_manifest, IntegrityError, MANIFEST_FILE
from factlab.corpus.retrieval import Datastore, Chunk

def timed(name, fn, ok_cls="works as documented", limit=30):
    res = []
    def go():
        try:
            res.append(("ok", fn()))
        except (IntegrityError, ValueError, FileNotFoundError) as e:
            res.append(("clear", f"{type(e).__name__}: {str(e)[:220]}"))
        except BaseException as e:
            res.append(("tb", f"{type(e).__name__}: {str(e)[:220]}"))
    th = threading.Thread(target=go, daemon=True); th.start(); th.join(limit)
    if th.is_alive():
        record("hang", name, f"> {limit} s"); return
    k, d = res[0]
    record({"ok": ok_cls, "clear": "clear error", "tb": "traceback"}[k], name, d)

docs = [[5, 6, 7, 8]] * 18 + [[9, 10, 11]] * 5
base = T / "idx"; build_from_token_ids(docs, base)
def fresh(name):
    d = T / name; shutil.copytree(base, d); return d
def count(d): return CorpusIndex.load(d).cooccurrence_ids([[[5, 6]]])
print("reference count:", count(base))

d = fresh("extra-shard"); shutil.copy(d / "tokenized.0", d / "tokenized.1")
timed("index: an unlisted extra shard tokenized.1", lambda: count(d), "silently wrong")
d = fresh("meta-no-shards"); m = json.loads((d / "factlab_index.json").read_text()); m.pop("shards"); (d / "factlab_index.json").write_text(json.dumps(m)); write_file_manifest(d)
timed("index: meta without shards (manifest rewritten)", lambda: count(d), "silently wrong")
d = fresh("meta-shards-str"); m = json.loads((d / "factlab_index.json").read_text()); m["shards"] = "abc"; (d / "factlab_index.json").write_text(json.dumps(m)); write_file_manifest(d)
timed("index: meta shards 'abc'", lambda: count(d), "silently wrong")
d = fresh("meta-shards-empty"); m = json.loads((d / "factlab_index.json").read_text()); m["shards"] = []; (d / "factlab_index.json").write_text(json.dumps(m)); write_file_manifest(d)
timed("index: meta shards [] (files still there)", lambda: count(d), "silently wrong")
d = fresh("meta-shard-dup"); m = json.loads((d / "factlab_index.json").read_text()); m["shards"] = m["shards"] * 2; (d / "factlab_index.json").write_text(json.dumps(m)); write_file_manifest(d)
timed("index: meta lists shard 0 twice", lambda: count(d), "silently wrong")
d = fresh("meta-width"); m = json.loads((d / "factlab_index.json").read_text()); m["token_width"] = 4; m["token_dtype"] = "u32"; (d / "factlab_index.json").write_text(json.dumps(m)); write_file_manifest(d)
timed("index: meta token_width 4 for a u16 index", lambda: count(d), "silently wrong")
d = fresh("meta-deep"); (d / "factlab_index.json").write_text("[" * 100000 + "]" * 100000); write_file_manifest(d)
timed("index: meta nested 100k deep", lambda: count(d))
d = fresh("files-deep"); (d / MANIFEST_FILE).write_text('{"format": "factlab-files", "version": 1, "files": ' + "[" * 100000 + "]" * 100000 + "}")
timed("index: factlab_files.json nested 100k deep", lambda: count(d))
d = fresh("files-dotdot"); f = json.loads((d / MANIFEST_FILE).read_text()); f["files"]["../idx/tokenized.0"] = f["files"]["tokenized.0"]; (d / MANIFEST_FILE).write_text(json.dumps(f))
timed("index: manifest lists ../idx/tokenized.0 too", lambda: count(d), "works as documented")
d = fresh("files-bool"); f = json.loads((d / MANIFEST_FILE).read_text()); f["files"]["tokenized.0"]["bytes"] = True; (d / MANIFEST_FILE).write_text(json.dumps(f))
timed("index: manifest bytes: true", lambda: count(d))
d = fresh("meta-fifo"); (d / "factlab_index.json").unlink(); os.mkfifo(d / "factlab_index.json")
timed("index: factlab_index.json is a FIFO", lambda: count(d), limit=15)
d = fresh("tok-fifo"); (d / "tokenized.0").unlink(); os.mkfifo(d / "tokenized.0")
timed("index: tokenized.0 is a FIFO", lambda: count(d), limit=15)
d = fresh("files-fifo"); (d / MANIFEST_FILE).unlink(); os.mkfifo(d / MANIFEST_FILE)
timed("index: factlab_files.json is a FIFO", lambda: count(d), limit=15)

# a datastore's precache.json
chunks = [Chunk(id=f"d{i}#0", doc_id=f"d{i}", title="t", text=f"Paris is the capital number {i}", start_token=0) for i in range(6)]
ds = Datastore(chunks); ds.precache({"p1": "capital Paris"}, k_docs=2)
dbase = T / "ds"; ds.save(dbase)
def dfresh(name, cache_text):
    d = T / name; shutil.copytree(dbase, d); (d / "precache.json").write_text(cache_text); write_file_manifest(d); return d
for name, text in [("a list", "[1]"), ("a chunk id that is a number", '{"p1": [1]}'), ("an unknown chunk id", '{"p1": ["zz#0"]}'),
                   ("nested 100k", "[" * 100000 + "]" * 100000), ("a prompt with no chunks", '{"p1": []}'),
                   ("duplicate chunk ids", '{"p1": ["d0#0", "d0#0", "d0#0"]}')]:
    d = dfresh("pc-" + name.replace(" ", "-"), text)
    timed(f"precache.json: {name}", lambda: [h.chunk.id for h in Datastore.load(d).retrieve("capital", k=3, prompt_id="p1")])

# run manifests
from factlab import runner
from factlab.manifest import read_manifest
nb = runner.find_notebook("00_quickstart")
def run_dir(name, manifest_text):
    d = T / "runs" / name; d.mkdir(parents=True)
    (d / "config.yaml").write_text(runner.dump_config(runner.load_params("00_quickstart", ROOT / "params/00_quickstart_smoke.yaml")) if hasattr(runner, "dump_config") else "{}\n")
    (d / "manifest.json").write_text(manifest_text); return d
base_m = {"notebook": "00_quickstart", "state": "failed", "attempts": [{"state": "failed", "pid": 1, "host": "x"}]}
for name, m in [("attempts [5]", {**base_m, "attempts": [5]}), ("attempts {}", {**base_m, "attempts": {}}),
                ("pid 10**30 running here", {**base_m, "state": "running", "attempts": [{"state": "running", "pid": 10**30, "host": os.uname().nodename}]}),
                ("pid -1 running here", {**base_m, "state": "running", "attempts": [{"state": "running", "pid": -1, "host": os.uname().nodename}]}),
                ("pid true running here", {**base_m, "state": "running", "attempts": [{"state": "running", "pid": True, "host": os.uname().nodename}]}),
                ("notebook a list", {**base_m, "notebook": ["x"]}), ("state a list", {**base_m, "state": ["ok"]}),
                ("config a string", {**base_m, "config": "x"})]:
    d = run_dir(name.replace(" ", "_").replace("*", ""), json.dumps(m))
    timed(f"resume: manifest {name}", lambda: runner.resume_run_dir(nb, d)[0] and "accepted")
d = run_dir("deep", "[" * 100000 + "]" * 100000)
timed("resume: manifest nested 100k deep", lambda: runner.resume_run_dir(nb, d) and "accepted")
d = run_dir("fifo", "{}"); (d / "manifest.json").unlink(); os.mkfifo(d / "manifest.json")
timed("resume: manifest.json is a FIFO", lambda: runner.resume_run_dir(nb, d) and "accepted", limit=15)

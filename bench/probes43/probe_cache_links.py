# issue 43 round-5 probe: symbolic links, hard links and FIFOs planted in factlab's caches (a shared cache, a
# copied one): the self-filter cache (selffilter/corver.jsonl), a warm start's work folder
# (warmstart/<key>.work), a BM25 datastore (datastores/...), a corpus index (indexes/...) and the
# verification stamps (verified/). Does factlab write through them, hang on them, or lose what they point at?
# The tiny random model samples (no training: the warm start's SFT is a stub). One line per probe: CLASS | probe | detail.
# Run with PYTHONPATH=src, FACTLAB_CACHE=<scratch> under nice; about a minute.
import json, os, shutil, sys, threading
from pathlib import Path
from types import SimpleNamespace
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from probe_round3 import *
from factlab.paths import SymlinkRefused
from factlab.integrity import IntegrityError

PRECIOUS = "precious\n"


def victim(name):
    v = T / "victims" / name
    v.parent.mkdir(parents=True, exist_ok=True)
    v.write_text(PRECIOUS)
    return v


def timed(fn, limit=60):
    res = []
    def go():
        try:
            res.append(("ok", fn()))
        except (SymlinkRefused, IntegrityError, ValueError, FileNotFoundError, FileExistsError) as e:
            res.append(("clear", f"{type(e).__name__}: {str(e)[:200]}"))
        except BaseException as e:
            res.append(("tb", f"{type(e).__name__}: {str(e)[:200]}"))
    th = threading.Thread(target=go, daemon=True); th.start(); th.join(limit)
    return res[0] if res else ("hang", f"> {limit} s")


def judge(name, outcome, harmed, ok_cls="works as documented"):
    kind, detail = outcome
    if harmed:
        record(harmed[0], name, f"{harmed[1]}; {kind}: {detail}")
    elif kind == "hang":
        record("hang", name, detail)
    else:
        record({"ok": ok_cls, "clear": "clear error", "tb": "traceback"}[kind], name, str(detail)[:220])


# ---------------------------------------------------------------- self-filter cache
from factlab import models
from factlab.recipes import selffilter as sf
from factlab.data.miniworld import ensure_world
from factlab.data.types import read_jsonl, QAItem

model, tok = models.load_model("tiny-random-smollm2", device="cpu")
pool = {r["id"]: QAItem.from_dict(r) for r in read_jsonl(ensure_world()["qa_train"])}
items = [pool[i] for i in sorted(pool)[:2]]
cfg = sf.SelfFilterConfig(num_samples=2, max_new_tokens=4, batch_size=2, progress=False)


def selffilter(name, plant):
    d = T / "sf" / name; d.mkdir(parents=True)
    cache = d / "corver.jsonl"
    v = plant(cache)
    out = timed(lambda: [(r.n_correct, r.n_samples) for r in sf.count_correct(model, tok, items, cfg, cache_path=cache)])
    harmed = None
    if v is not None and v.exists() and v.read_text() != PRECIOUS:
        harmed = ("security hole", f"{v} now holds {len(v.read_text().splitlines())} lines (written through the link)")
    elif out[0] == "ok" and any(n > g or g != cfg.num_samples for n, g in out[1]):
        harmed = ("silently wrong", f"(n_correct, G) read from the cache: {out[1]}")
    elif out[0] == "clear" and "corver.jsonl" not in out[1]:
        harmed = ("unclear error", "the error names no file")
    judge(f"self-filter cache: {name}", out, harmed)


def link_to_victim(cache):
    v = victim("sf-file"); cache.symlink_to(v); return v
def dangling(cache):
    v = T / "victims" / "sf-created"; cache.symlink_to(v); return v
def hard(cache):
    v = victim("sf-hard"); os.link(v, cache); return v
def fifo(cache):
    os.mkfifo(cache); return None
def bad_row(cache):  # a row for these very questions whose counts are missing (a foreign writer, an edit)
    s = sf._settings_key(sf.model_name_of(model), cfg)
    cache.write_text("".join(json.dumps({"settings": s, "id": it.id}) + "\n" for it in items)); return None
def wrong_types(cache):
    s = sf._settings_key(sf.model_name_of(model), cfg)
    cache.write_text("".join(json.dumps({"settings": s, "id": it.id, "n_samples": "two", "n_correct_lenient": None,
                                         "n_correct_strict": [], "labels_lenient": 5, "labels_strict": 5}) + "\n"
                             for it in items)); return None
def too_many(cache):  # 9 correct of 2 samples: bucket "mastered" from a count that cannot be
    s = sf._settings_key(sf.model_name_of(model), cfg)
    cache.write_text("".join(json.dumps({"settings": s, "id": it.id, "n_samples": 2, "n_correct_lenient": 9,
                                         "n_correct_strict": 9, "labels_lenient": ["good"], "labels_strict": ["good"]}) + "\n"
                             for it in items)); return None

selffilter("corver.jsonl a symlink to a file", link_to_victim)
selffilter("corver.jsonl a dangling symlink", dangling)
selffilter("corver.jsonl a hard link", hard)
selffilter("corver.jsonl a FIFO", fifo)
selffilter("a cached row without its counts", bad_row)
selffilter("a cached row with counts of the wrong types", wrong_types)


selffilter("a cached row counting 9 of 2", too_many)

# ---------------------------------------------------------------- warm start work folder
from factlab.recipes import warmstart as W
from factlab.experiment import WarmStartSection


def fake_sft(spec, ds, out, **kw):
    m = Path(out) / "model"; m.mkdir(parents=True, exist_ok=True); (m / "config.json").write_text("{}")
    return SimpleNamespace(is_adapter=False, model_dir=str(m), losses=lambda: [], runtime_s=0.1, steps=1, resumed=False)
W.run_sft = fake_sft
ws = WarmStartSection(enabled=True, check_questions=0)


def warm(name, plant):
    root = T / "ws" / name; root.mkdir(parents=True)
    key = W.cache_key(ws, "tiny-random-smollm2")
    vdir = T / "victims" / f"ws-{name.replace(' ', '_')}"
    (vdir / "stage").mkdir(parents=True); (vdir / "stage" / "notes.txt").write_text(PRECIOUS)
    plant(root, key, vdir)
    before = sorted(p.relative_to(vdir).as_posix() for p in vdir.rglob("*"))
    out = timed(lambda: W.build(ws, "tiny-random-smollm2", root=root).key)
    after = sorted(p.relative_to(vdir).as_posix() for p in vdir.rglob("*"))
    harmed = None
    if not (vdir / "stage" / "notes.txt").exists():
        harmed = ("data lost", f"{vdir}/stage (the link's target) was deleted or moved; now {after[:6]}")
    elif after != before:
        harmed = ("security hole", f"written into the link's target: {sorted(set(after) - set(before))[:6]}")
    judge(f"warm start: {name}", out, harmed)

warm("<key>.work a symlink to a folder", lambda root, key, v: (root / f"{key}.work").symlink_to(v, target_is_directory=True))
warm("<key>.work/sft a symlink to a folder", lambda root, key, v: ((root / f"{key}.work").mkdir(),
                                                                   (root / f"{key}.work" / "sft").symlink_to(v)))
warm("<key> a symlink to a folder (no warmstart.json)", lambda root, key, v: (root / key).symlink_to(v))

# ---------------------------------------------------------------- datastore
from factlab.corpus import retrieval as R
corpus = T / "corpus.jsonl"
corpus.write_text("".join(line for i, line in enumerate(open(ensure_world()["corpus"])) if i < 20))
TOKENIZER = "smollm2-135m-instruct"
R.load_tokenizer(TOKENIZER)


def datastore(name, plant):
    folder = T / "ds" / name
    out = R.datastore_dir(R.DatastoreSection(dir=str(folder)), corpus, TOKENIZER, 128)
    out.mkdir(parents=True)
    v = plant(out)
    res = timed(lambda: len(R.ensure_datastore(R.DatastoreSection(dir=str(folder)), corpus, TOKENIZER, 128)))
    harmed = None
    if v is not None and v.is_file() and v.read_text() != PRECIOUS:
        harmed = ("data lost", f"{v} overwritten through the link ({len(v.read_text()):,} bytes)")
    elif v is not None and v.is_dir() and any(v.iterdir()):
        harmed = ("security hole", f"files written into {v}: {[p.name for p in v.iterdir()][:5]}")
    elif v is not None and not v.is_dir() and v.exists() and v.read_text() != PRECIOUS:
        harmed = ("security hole", f"{v} created through the link")
    judge(f"datastore: {name}", res, harmed)

def ds_link(out):
    v = victim("ds-chunks"); (out / R._CHUNKS_FILE).symlink_to(v); return v
def ds_dangling(out):
    v = T / "victims" / "ds-created"; (out / R._CHUNKS_FILE).symlink_to(v); return v
def ds_meta_link(out):
    v = victim("ds-meta"); (out / "factlab_retriever.json").symlink_to(v); return v
def ds_bm25_dir(out):
    v = T / "victims" / "ds-bm25"; v.mkdir(parents=True); (out / R._BM25_DIR).symlink_to(v); return v
def ds_hard(out):
    v = victim("ds-hard"); os.link(v, out / R._CHUNKS_FILE); return v
datastore(f"{R._CHUNKS_FILE} a symlink to a file", ds_link)
datastore(f"{R._CHUNKS_FILE} a dangling symlink", ds_dangling)
datastore("factlab_retriever.json a symlink to a file", ds_meta_link)
datastore(f"{R._BM25_DIR}/ a symlink to a folder", ds_bm25_dir)
datastore(f"{R._CHUNKS_FILE} a hard link", ds_hard)

# ---------------------------------------------------------------- corpus index (cache) and verification stamps
from factlab.corpus import infinigram as I
from factlab.corpus.index_build import META_FILE


def index(name, plant):
    cfgi = I.IndexSection(corpus=str(corpus), tokenizer=TOKENIZER)
    out = I.default_index_dir(corpus, TOKENIZER)
    shutil.rmtree(out, ignore_errors=True); out.mkdir(parents=True)
    v = plant(out)
    res = timed(lambda: type(I.ensure_index(cfgi, None, TOKENIZER, progress=False)).__name__)
    harmed = None
    if v is not None and v.is_file() and v.read_text() != PRECIOUS:
        harmed = ("data lost", f"{v} overwritten through the link")
    elif v is not None and v.is_dir() and sorted(x.name for x in v.iterdir()) != ["keep.txt"]:
        harmed = ("data lost", f"{v} now holds {[x.name for x in v.iterdir()][:5]}")
    judge(f"index cache: {name}", res, harmed)

def ix_meta_link(out):
    v = victim("ix-meta"); (out / META_FILE).symlink_to(v); return v
def ix_token_link(out):
    (out / META_FILE).write_text("{}"); v = victim("ix-tok"); (out / "tokenized.0").symlink_to(v); return v
def ix_dir_link(out):
    v = T / "victims" / "ix-dir"; v.mkdir(parents=True); (v / "keep.txt").write_text(PRECIOUS)
    out.rmdir(); out.symlink_to(v); return v
index(f"{META_FILE} a symlink to a file (no manifest)", ix_meta_link)
index("tokenized.0 a symlink beside an empty metadata", ix_token_link)
index("the index folder itself a symlink to a folder", ix_dir_link)

from factlab import integrity
ro = T / "ro-index"; I.build_from_token_ids([[5, 6, 7]] * 3, ro)
os.chmod(ro, 0o555)
stamp = integrity.stamp_path(ro)
stamp.parent.mkdir(parents=True, exist_ok=True)
v = victim("stamp"); stamp.unlink(missing_ok=True); stamp.symlink_to(v)
res = timed(lambda: integrity.verify_files(ro, "rebuild", full=True) or "verified")
judge("verified/<key>.json stamp a symlink to a file (read-only index)", res,
      ("security hole", f"{v} overwritten") if v.read_text() != PRECIOUS else None)
os.chmod(ro, 0o755)

"""factlab.corpus: infini-gram index build/load and the exact windowed co-occurrence count
(CorVer, 000_ac66a963fabf3916.txt §3.2 Eq. 1, §B.1)."""

import json
import tempfile
from pathlib import Path
from unittest.mock import patch

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from factlab.corpus import CorpusIndex, build_from_token_ids, reference_cooccurrence
from factlab.corpus import index_build as ib
from factlab.corpus import infinigram as ig
from factlab.corpus import suffix_array as sarray

TOKENIZER = "smollm2-135m-instruct"
FILLER = " word" * 60

TINY_DOCS = [
    "Paris is the capital of France.",                      # Paris at a document start
    "The river Seine flows through Paris and France.",      # " Paris" mid-sentence
    "Tokyo is the capital of Japan.",
    "Lima" + FILLER + " Peru",                              # two words far apart
    "The highest capital is Quito",                         # ends with Quito ...
    "Ecuador is a country in South America.",               # ... the next starts with Ecuador
]


def write_jsonl(path: Path, texts, field="text"):
    path.write_text("".join(json.dumps({"id": i, field: t}) + "\n" for i, t in enumerate(texts)))
    return path


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    root = tmp_path_factory.mktemp("corpus")
    corpus = write_jsonl(root / "tiny.jsonl", TINY_DOCS)
    index = CorpusIndex.build(corpus, TOKENIZER, root / "index", progress=False)
    return corpus, index


# --------------------------------------------------------------------------- build / load


def test_build_writes_infinigram_layout_and_meta(tiny, tokenizer):
    corpus, index = tiny
    meta = json.loads((index.path / ib.META_FILE).read_text())
    assert meta["tokenizer"] == TOKENIZER and meta["token_width"] == 2 and meta["token_dtype"] == "u16"
    assert meta["n_docs"] == len(TINY_DOCS) and meta["corpus"] == str(corpus.absolute())
    assert [s["id"] for s in meta["shards"]] == [0]
    ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in TINY_DOCS]
    assert meta["n_tokens"] == sum(map(len, ids))
    # documents are separator-prefixed, offsets are u64 byte offsets of each separator
    raw = np.fromfile(index.path / "tokenized.0", dtype="<u2")
    expected = np.concatenate([np.r_[0xFFFF, d] for d in ids]).astype("<u2")
    assert np.array_equal(raw, expected)
    offsets = np.fromfile(index.path / "offset.0", dtype="<u8")
    assert offsets.tolist() == (2 * np.cumsum([0] + [len(d) + 1 for d in ids[:-1]])).tolist()
    sarray.verify_suffix_array(index.path / "tokenized.0", index.path / "table.0", 2)


def test_load_round_trip(tiny):
    _, index = tiny
    again = CorpusIndex.load(index.path)
    assert again.n_docs == index.n_docs and again.n_tokens == index.n_tokens
    for words in (["Paris"], ["Paris", "France"], ["capital", "Japan"], ["Lima", "Peru"]):
        assert again.cooccurrence(words) == index.cooccurrence(words)


def test_token_width_choice():
    assert ib.token_width_for(49152) == 2  # SmolLM2
    assert ib.token_width_for(65534) == 2
    assert ib.token_width_for(65535) == 4  # 0xFFFF is the u16 separator
    assert ib.token_width_for(128256) == 4


def test_u32_index_counts_ids_above_u16(tmp_path):
    docs = [[70000, 5, 70001], [70001, 70000], [5]]
    index = build_from_token_ids(docs, tmp_path / "u32", token_width=4)
    assert index.meta["token_dtype"] == "u32"
    clauses = [[[70000]], [[70001]]]
    for w in (1, 2, 5):
        assert index.cooccurrence_ids(clauses, w) == reference_cooccurrence(docs, clauses, w)
    assert index.cooccurrence_ids([[[70000]], [[70001]]], 1) == 1


# --------------------------------------------------------------------------- semantics


def test_surface_variants_are_ored(tiny, tokenizer):
    _, index = tiny
    clause = index.clause("Paris")
    assert tuple(tokenizer("Paris", add_special_tokens=False)["input_ids"]) in clause
    assert tuple(tokenizer(" Paris", add_special_tokens=False)["input_ids"]) in clause
    assert len(set(clause)) == len(clause)
    # doc 0 starts with "Paris", doc 1 has " Paris": both count, whatever the query's case
    assert index.cooccurrence(["Paris"]) == 2
    assert index.cooccurrence(["paris"]) == index.cooccurrence(["PARIS"]) == 2
    assert index.cooccurrence(["Paris", "France"]) == 2


def test_window_bounds_the_distance(tiny, tokenizer):
    _, index = tiny
    ids = tokenizer(TINY_DOCS[3], add_special_tokens=False)["input_ids"]
    peru = tokenizer(" Peru", add_special_tokens=False)["input_ids"]
    distance = next(i for i in range(len(ids)) if ids[i:i + len(peru)] == peru)
    assert distance > 50
    assert index.cooccurrence(["Lima", "Peru"], window=distance) == 1
    assert index.cooccurrence(["Lima", "Peru"], window=distance - 1) == 0
    assert index.cooccurrence(["Lima", "Peru"], window=10) == 0


def test_never_across_documents(tiny):
    _, index = tiny
    assert index.cooccurrence(["Quito"]) == 1 and index.cooccurrence(["Ecuador"]) == 1
    for w in (1, 5, 1000, 10**9):
        assert index.cooccurrence(["Quito", "Ecuador"], window=w) == 0


def test_empty_and_blank_words(tiny):
    _, index = tiny
    with pytest.raises(ValueError, match="at least one word"):
        index.cooccurrence([])
    with pytest.raises(ValueError, match="any token"):
        index.cooccurrence(["", "   "])
    with pytest.raises(TypeError):
        index.cooccurrence("Paris")
    with pytest.raises(ValueError, match="window"):
        index.cooccurrence(["Paris"], window=0)
    assert index.cooccurrence(["Paris", " "]) == index.cooccurrence(["Paris"])  # blank words are dropped
    assert index.cooccurrence(["Paris", "Atlantis"]) == 0


# --------------------------------------------------------------------------- engine vs exact


def test_engine_count_cnf_drops_matches_as_window_grows(tmp_path):
    """The disagreement docs/design.md reports, pinned: eleven short documents each holding
    both words; infini-gram 2.6.0's count_cnf falls from 11 to 1 as W grows."""
    docs = [[5, 1, 6, 2, 7] for _ in range(11)]
    index = build_from_token_ids(docs, tmp_path / "idx")
    clauses = [[[1]], [[2]]]
    engine = {w: index.engine_count_cnf(clauses, w)["count"] for w in (2, 3, 10, 1000)}
    assert engine == {2: 11, 3: 11, 10: 1, 1000: 1}
    for w in (2, 3, 10, 1000):
        assert index.cooccurrence_ids(clauses, w) == reference_cooccurrence(docs, clauses, w) == 11


def test_engine_chains_windows_with_three_clauses(tmp_path):
    doc = [9] * 2000
    doc[0], doc[900], doc[1800] = 1, 2, 3  # span 1800 > W
    index = build_from_token_ids([doc], tmp_path / "idx")
    clauses = [[[1]], [[2]], [[3]]]
    assert index.engine_count_cnf(clauses, 1000)["count"] == 1
    assert index.cooccurrence_ids(clauses, 1000) == reference_cooccurrence([doc], clauses, 1000) == 0
    assert index.cooccurrence_ids(clauses, 1800) == 1


def test_engine_counts_overlapping_variants_twice(tmp_path):
    docs = [[1, 2, 1], [1, 3]]
    index = build_from_token_ids(docs, tmp_path / "idx")
    clause = [[1], [1, 2]]  # both variants match at position 0 of doc 0
    assert index.engine_count_cnf([clause])["count"] == 4
    assert index.cooccurrence_ids([clause]) == reference_cooccurrence(docs, [clause], 1000) == 3


def test_engine_subsampling_inflates_counts(tmp_path):
    rng = np.random.default_rng(0)
    docs = rng.integers(0, 3, size=(300, 200)).tolist()
    index = build_from_token_ids(docs, tmp_path / "idx")
    clauses = [[[1]], [[2]]]
    rarer = min(index.engine.count([1])["count"], index.engine.count([2])["count"])
    raw = index.engine_count_cnf(clauses, 5, max_clause_freq=1000)
    assert raw["approx"] and raw["count"] > rarer  # more matches than anchor occurrences
    assert index.cooccurrence_ids(clauses, 5) <= rarer


def test_limit_caps_the_count(tiny):
    _, index = tiny
    assert index.cooccurrence(["capital"]) == 3  # docs 0, 2 and 4
    assert index.cooccurrence(["capital"], limit=1) == 1
    assert index.cooccurrence(["capital"], limit=20) == 3
    with pytest.raises(ValueError, match="limit"):
        index.cooccurrence(["capital"], limit=0)


TOKEN = st.integers(0, 5)
DOCS = st.lists(st.lists(TOKEN, max_size=25), min_size=1, max_size=10).filter(lambda d: sum(map(len, d)) > 0)
CLAUSE = st.lists(st.lists(TOKEN, min_size=1, max_size=2), min_size=1, max_size=3)
QUERY = st.tuples(st.lists(CLAUSE, min_size=1, max_size=4), st.integers(1, 12))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(docs=DOCS, queries=st.lists(QUERY, min_size=1, max_size=4),
       shard_tokens=st.sampled_from([3, 12, 40, 10**6]), token_width=st.sampled_from([2, 2, 4]))
def test_cooccurrence_matches_brute_force(docs, queries, shard_tokens, token_width):
    shift = 70_000 if token_width == 4 else 0  # u32: ids above the u16 range
    docs = [[t + shift for t in d] for d in docs]
    queries = [([[[t + shift for t in v] for v in c] for c in clauses], w) for clauses, w in queries]
    with tempfile.TemporaryDirectory() as tmp:
        index = build_from_token_ids(docs, Path(tmp) / "idx", token_width, shard_tokens=shard_tokens)
        for clauses, window in queries:
            expected = reference_cooccurrence(docs, clauses, window)
            for strategy in ("auto", "full", "scan"):
                assert index.cooccurrence_ids(clauses, window, strategy=strategy) == expected
                with patch.object(ig, "_LIMIT_CHUNK", 2):  # anchors two at a time
                    for limit in (1, 3):
                        got = index.cooccurrence_ids(clauses, window, limit=limit, strategy=strategy)
                        assert got == min(expected, limit)
            assert index.cooccurrence_ids(clauses, window) <= index.cooccurrence_ids(clauses, window + 3)


# --------------------------------------------------------------------------- sharding / building


def test_sharding_keeps_counts(tiny, tmp_path):
    corpus, single = tiny
    sharded = CorpusIndex.build(corpus, TOKENIZER, tmp_path / "sharded", shard_tokens=20, progress=False)
    assert len(sharded.meta["shards"]) > 1
    assert sharded.n_docs == single.n_docs and sharded.n_tokens == single.n_tokens
    assert sharded.engine.engine.get_num_shards() == len(sharded.meta["shards"])
    for words in (["Paris"], ["Paris", "France"], ["capital"], ["capital", "Japan"], ["Lima", "Peru"],
                  ["Quito", "Ecuador"], ["is", "the", "capital"]):
        for w in (3, 1000):
            assert sharded.cooccurrence(words, w) == single.cooccurrence(words, w), (words, w)


def test_many_shards_follow_the_engine_order(tmp_path):
    # 12 shards: the engine orders tokenized.10 before tokenized.2
    docs = [[i % 3, (i + 1) % 3] for i in range(12)]
    index = build_from_token_ids(docs, tmp_path / "idx", shard_tokens=3)
    assert len(index.meta["shards"]) == 12 == index.engine.engine.get_num_shards()
    for clauses in ([[[0]], [[1]]], [[[0, 1]]], [[[2]], [[0]]]):
        assert index.cooccurrence_ids(clauses, 1) == reference_cooccurrence(docs, clauses, 1)


def test_parallel_suffix_array_on_tiny_data_is_guarded(tmp_path):
    docs = [[1, 2, 3, 1, 2]] * 30
    index = build_from_token_ids(docs, tmp_path / "idx", cpus=4)  # small shard: one job, valid
    assert index.cooccurrence_ids([[[1]], [[3]]], 2) == reference_cooccurrence(docs, [[[1]], [[3]]], 2)
    # docs/design.md's fact, pinned: forcing parallel parts on tiny data corrupts the array,
    # and the post-build check catches it
    ds = index.path / "tokenized.0"
    with pytest.raises(RuntimeError, match="corrupt"):
        sarray.build_suffix_array(ds, tmp_path / "table.bad", 2, cpus=2, min_part_bytes=1)


def test_numpy_suffix_array_matches_the_bundled_builder(world_index):
    _, index = world_index
    shard = index._shards[0]
    from_rust = sarray.decode_pointers(shard.sa, shard.ptr_size) // 2
    assert np.array_equal(sarray.suffix_array_numpy(np.asarray(shard.tokens)), from_rust)


def test_verify_suffix_array_detects_duplicates(tmp_path):
    index = build_from_token_ids([[1, 2, 3], [4, 5]], tmp_path / "idx")
    sa = bytearray((index.path / "table.0").read_bytes())
    ptr = index._shards[0].ptr_size
    sa[ptr:2 * ptr] = sa[0:ptr]
    (tmp_path / "table.bad").write_bytes(bytes(sa))
    with pytest.raises(RuntimeError, match="missing"):
        sarray.verify_suffix_array(index.path / "tokenized.0", tmp_path / "table.bad", 2)


def test_index_folder_path_may_contain_engine_file_words(tmp_path):
    # the 2.6.0 engine sorts files by words found anywhere in their path
    docs = [[1, 2], [2, 1]]
    index = build_from_token_ids(docs, tmp_path / "my_tables" / "offset_tokenized")
    assert CorpusIndex.load(index.path).cooccurrence_ids([[[1]], [[2]]], 1) == 2


def test_rebuild_replaces_index_but_not_other_folders(tmp_path):
    out = tmp_path / "idx"
    build_from_token_ids([[1, 2]], out)
    assert build_from_token_ids([[1, 2], [1]], out).n_docs == 2
    other = tmp_path / "notes"
    other.mkdir()
    (other / "keep.txt").write_text("x")
    with pytest.raises(FileExistsError, match="refusing"):
        build_from_token_ids([[1]], other)
    assert (other / "keep.txt").exists()
    assert not [p for p in tmp_path.iterdir() if ".building-" in p.name]


# --------------------------------------------------------------------------- errors


def test_load_missing_index_says_how_to_build(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(FileNotFoundError, match="factlab index build") as e:
        CorpusIndex.load(missing)
    assert str(missing) in str(e.value)
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="factlab index build"):
        CorpusIndex.load(tmp_path / "empty")


def test_corpus_errors_name_file_and_line(tmp_path):
    bad = write_jsonl(tmp_path / "bad.jsonl", ["fine"])
    with bad.open("a") as f:
        f.write(json.dumps({"body": "no text"}) + "\n")
    with pytest.raises(ValueError, match=r"bad\.jsonl:2: no 'text' field"):
        CorpusIndex.build(bad, TOKENIZER, tmp_path / "i1", progress=False)
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(ValueError, match=r"empty\.jsonl: empty corpus"):
        CorpusIndex.build(empty, TOKENIZER, tmp_path / "i2", progress=False)
    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"text": "a"}\n{oops\n')
    with pytest.raises(ValueError, match=r"broken\.jsonl:2: not valid JSON"):
        CorpusIndex.build(broken, TOKENIZER, tmp_path / "i3", progress=False)
    blank = write_jsonl(tmp_path / "blank.jsonl", ["", ""])
    with pytest.raises(ValueError, match="no tokens"):
        CorpusIndex.build(blank, TOKENIZER, tmp_path / "i4", progress=False)
    with pytest.raises(FileNotFoundError, match="corpus file not found"):
        CorpusIndex.build(tmp_path / "absent.jsonl", TOKENIZER, tmp_path / "i5", progress=False)
    assert not any((tmp_path / f"i{i}").exists() for i in range(1, 6))


def test_token_id_index_has_no_tokenizer(tmp_path):
    index = build_from_token_ids([[1, 2]], tmp_path / "idx")
    with pytest.raises(ValueError, match="cooccurrence_ids"):
        index.cooccurrence(["Paris"])


# --------------------------------------------------------------------------- CLI


def test_cli_index_build(tmp_path, capsys):
    from factlab.cli import main

    corpus = write_jsonl(tmp_path / "c.jsonl", TINY_DOCS, field="body")
    out = tmp_path / "index"
    rc = main(["index", "build", str(corpus), "--tokenizer", TOKENIZER, "--out", str(out),
               "--text-field", "body", "--shard-tokens", "30", "--cpus", "1"])
    assert rc == 0
    assert "docs:   6" in capsys.readouterr().out
    index = CorpusIndex.load(out)
    assert len(index.meta["shards"]) > 1 and index.meta["text_field"] == "body"
    assert index.cooccurrence(["Paris", "France"]) == 2

    rc = main(["index", "build", str(corpus), "--tokenizer", TOKENIZER, "--out", str(tmp_path / "x")])
    assert rc == 2
    assert "c.jsonl:1: no 'text' field" in capsys.readouterr().err


# --------------------------------------------------------------------------- the mini-world


@pytest.fixture(scope="module")
def world_index(tmp_path_factory):
    from factlab.data.miniworld import ensure_world

    paths = ensure_world()
    index = CorpusIndex.build(paths["corpus"], TOKENIZER, tmp_path_factory.mktemp("world") / "index",
                              progress=False)
    return paths["corpus"], index


def test_miniworld_capitals_cooccur_with_their_country(world_index):
    _, index = world_index
    assert index.n_docs >= 200
    pairs = [("Paris", "France"), ("Tokyo", "Japan"), ("Kabul", "Afghanistan"), ("Lima", "Peru"),
             ("Ottawa", "Canada"), ("Berlin", "Germany"), ("Canberra", "Australia"), ("Nairobi", "Kenya")]
    true_counts = [index.cooccurrence([c, k]) for c, k in pairs]
    swapped = [index.cooccurrence([pairs[i][0], pairs[(i + 1) % len(pairs)][1]]) for i in range(len(pairs))]
    assert all(n > 0 for n in true_counts), true_counts
    assert sum(swapped) * 4 <= sum(true_counts), (true_counts, swapped)
    assert index.cooccurrence(["Paris", "Japan"]) < index.cooccurrence(["Paris", "France"])


def test_miniworld_count_matches_brute_force(world_index, tokenizer):
    corpus, index = world_index
    texts = [json.loads(line)["text"] for line in Path(corpus).read_text().splitlines() if line.strip()]
    docs = tokenizer(texts, add_special_tokens=False)["input_ids"]
    for words in (["capital", "Asia"], ["Europe", "Euro"]):
        clauses = [index.clause(w) for w in words]
        assert index.cooccurrence(words, 30) == reference_cooccurrence(docs, clauses, 30)
    # at W=1000 the articles are shorter than the window: the raw engine loses most matches
    clauses = [index.clause(w) for w in ["capital", "Asia"]]
    assert index.engine_count_cnf(clauses, 1000)["count"] < index.cooccurrence(["capital", "Asia"], 1000) // 2


# --------------------------------------------------------------------------- files verified before use


def _copy_index(index, dest: Path) -> Path:
    import shutil

    return Path(shutil.copytree(index.path, dest))


@pytest.mark.parametrize("name", ["table.0", "offset.0", "tokenized.0", ib.META_FILE])
@pytest.mark.parametrize("damage", ["truncated", "random"])
def test_a_damaged_index_file_is_refused_naming_it_and_the_rebuild_command(tiny, tmp_path, name, damage):
    from factlab.integrity import IntegrityError

    corpus, index = tiny
    good = index.cooccurrence(["capital"])
    path = _copy_index(index, tmp_path / "copy")
    assert CorpusIndex.load(path).cooccurrence(["capital"]) == good  # the copy itself is fine
    target = path / name
    size = target.stat().st_size
    if damage == "truncated":
        target.write_bytes(target.read_bytes()[:size // 2])
    else:  # same size, other bytes: only the checksum tells
        target.write_bytes(np.random.default_rng(0).integers(0, 256, size, dtype=np.uint8).tobytes())
    with pytest.raises(IntegrityError) as e:
        CorpusIndex.load(path)
    assert str(target) in str(e.value)
    assert f"factlab index build {corpus.absolute()} --tokenizer {TOKENIZER} --out {path}" in str(e.value) \
        or name == ib.META_FILE and "factlab index build" in str(e.value)


def test_a_truncated_token_file_never_reaches_the_engine(tiny, tmp_path):
    """The engine segfaults on a truncated ``tokenized.0`` (exit 139): the load must stop before it,
    in a child process so that a regression kills the child, not the test run."""
    import subprocess
    import sys

    path = _copy_index(tiny[1], tmp_path / "copy")
    data = (path / "tokenized.0").read_bytes()
    (path / "tokenized.0").write_bytes(data[:len(data) // 3])
    code = ("from factlab.corpus import CorpusIndex\nfrom factlab.integrity import IntegrityError\nimport sys\n"
            f"try:\n    CorpusIndex.load({str(path)!r}).cooccurrence(['capital'])\n"
            "except IntegrityError as e:\n    print(e)\n    sys.exit(3)\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert res.returncode == 3, (res.returncode, res.stderr[-2000:])
    assert "tokenized.0 has" in res.stdout and "truncated" in res.stdout


def test_checksums_are_compared_on_first_load_and_with_verify(tiny, tmp_path, monkeypatch):
    import os

    from factlab import integrity
    from factlab.integrity import IntegrityError

    path = _copy_index(tiny[1], tmp_path / "copy")  # copied: new mtimes, so the first load hashes
    hashed = []
    real = integrity.file_sha256
    monkeypatch.setattr(integrity, "file_sha256", lambda p, *a: hashed.append(Path(p).name) or real(p, *a))
    CorpusIndex.load(path)
    assert "table.0" in hashed and "tokenized.0" in hashed
    hashed.clear()
    CorpusIndex.load(path)
    assert hashed == []  # verified before, unchanged since: sizes only
    CorpusIndex.load(path, verify=True)
    assert "table.0" in hashed  # --verify: every time
    # same size, other bytes, modification time put back: the change time still tells
    table = path / "table.0"
    st = table.stat()
    raw = bytearray(table.read_bytes())
    raw[0] ^= 0xFF
    table.write_bytes(bytes(raw))
    os.utime(table, ns=(st.st_atime_ns, st.st_mtime_ns))
    with pytest.raises(IntegrityError, match="table.0: its content is not what was written"):
        CorpusIndex.load(path)
    monkeypatch.setenv("FACTLAB_VERIFY", "1")  # what `factlab run --verify` sets
    with pytest.raises(IntegrityError, match="table.0"):
        CorpusIndex.load(path)


def test_a_cached_index_without_manifest_is_rebuilt_a_given_one_refused(tmp_path, monkeypatch, caplog):
    import logging

    from factlab.integrity import MANIFEST_FILE, MissingManifest

    from factlab.models import resolve_model

    tokenizer = resolve_model(TOKENIZER)  # the shared cache's converted model: the private cache below holds the index only
    monkeypatch.setenv("FACTLAB_CACHE", str(tmp_path / "cache"))
    corpus = write_jsonl(tmp_path / "c.jsonl", TINY_DOCS)
    cfg = ig.IndexSection(corpus=str(corpus))
    index = ig.ensure_index(cfg, None, tokenizer, progress=False)
    (index.path / MANIFEST_FILE).unlink()  # as an older factlab left it
    with caplog.at_level(logging.WARNING):
        again = ig.ensure_index(cfg, None, tokenizer, progress=False)
    assert "no file manifest" in caplog.text and (again.path / MANIFEST_FILE).is_file()
    assert again.cooccurrence(["Paris", "France"]) == index.cooccurrence(["Paris", "France"])
    (again.path / MANIFEST_FILE).unlink()
    with pytest.raises(MissingManifest, match="factlab index build"):
        ig.ensure_index(ig.IndexSection(dir=str(again.path)), None, tokenizer)  # a folder the params name


def test_cli_index_verify(tiny, tmp_path, capsys):
    from factlab.cli import main

    path = _copy_index(tiny[1], tmp_path / "copy")
    assert main(["index", "verify", str(path)]) == 0
    assert "every file matches" in capsys.readouterr().out
    (path / "offset.0").write_bytes((path / "offset.0").read_bytes()[:-8])
    assert main(["index", "verify", str(path)]) == 2
    err = capsys.readouterr().err
    assert "offset.0 has" in err and "factlab index build" in err


def test_an_unlisted_shard_and_metadata_without_shards_are_one_clear_error(tiny, tmp_path, capsys):
    """Both were tracebacks (issue 43): an extra ``tokenized.1`` beside the listed files, and a
    ``factlab_index.json`` without ``shards`` (its manifest rewritten to match)."""
    from factlab.cli import main
    from factlab.integrity import IntegrityError, write_file_manifest

    path = _copy_index(tiny[1], tmp_path / "copy")
    (path / "tokenized.1").write_bytes((path / "tokenized.0").read_bytes())
    assert main(["index", "verify", str(path)]) == 2
    err = capsys.readouterr().err
    assert "tokenized.1 is not listed in" in err and "factlab index build" in err and "Traceback" not in err
    (path / "tokenized.1").unlink()
    meta = json.loads((path / ib.META_FILE).read_text())
    del meta["shards"]
    (path / ib.META_FILE).write_text(json.dumps(meta))
    write_file_manifest(path)
    with pytest.raises(IntegrityError, match=r"factlab_index.json: unreadable index metadata \(no 'shards'\); rebuild"):
        CorpusIndex.load(path)


@pytest.mark.parametrize("edit, words", [
    (lambda m: m.update(shards=[]), r"shards \[\]: not one entry per shard"),
    (lambda m: m.update(shards=m["shards"] * 2), r"shards \[0, 0\]: not one entry per shard"),
    (lambda m: m.update(token_width=4, token_dtype="u32"), r"shard 0: \d+ tokens and \d+ separators of 4 bytes make"),
    (lambda m: m.update(token_dtype="u32"), r"token_dtype 'u32' is not the one of token_width 2"),
])
def test_metadata_that_disagrees_with_its_shards_is_one_clear_error(tiny, tmp_path, edit, words):
    """Index metadata (its manifest rewritten to match) listing no shard or one twice was a RuntimeError
    from the engine; a u16 index whose metadata says 4-byte tokens loaded and counted 0 (issue 43
    round-3b probe)."""
    from factlab.integrity import IntegrityError, write_file_manifest

    path = _copy_index(tiny[1], tmp_path / "copy")
    meta = json.loads((path / ib.META_FILE).read_text())
    edit(meta)
    (path / ib.META_FILE).write_text(json.dumps(meta))
    write_file_manifest(path)
    with pytest.raises(IntegrityError, match=r"factlab_index.json: unreadable index metadata \(ValueError: " + words):
        CorpusIndex.load(path)


@pytest.mark.parametrize("name", [ib.META_FILE, "factlab_files.json"])
def test_metadata_or_manifest_nested_deep_is_one_clear_error(tiny, tmp_path, name):
    """Either file nested 100,000 deep was a RecursionError traceback (issue 43 round-3b probe)."""
    from factlab.integrity import IntegrityError, write_file_manifest

    path = _copy_index(tiny[1], tmp_path / "copy")
    (path / name).write_text("[" * 100_000 + "]" * 100_000)
    if name == ib.META_FILE:
        write_file_manifest(path)
    with pytest.raises(IntegrityError, match=rf"{name}: unreadable .*RecursionError"):
        CorpusIndex.load(path)


def test_a_rebuild_interrupted_while_the_old_index_is_deleted_leaves_a_whole_index(tmp_path, monkeypatch):
    """A rebuild deleted the earlier index, then renamed the new one into place: Ctrl-C or SIGTERM
    while the earlier one was being deleted left half of it, and the new one was discarded (issue 43
    round-3b probe). Now the earlier one is renamed aside first and deleted last."""
    import shutil

    out = tmp_path / "idx"
    ig.build_from_token_ids([[5, 6, 7]] * 4, out)
    real = shutil.rmtree

    def interrupted(path, *a, **kw):
        p = Path(path)
        if ".building-" in p.name or not list(p.rglob("table.0")):
            return real(path, *a, **kw)
        next(p.rglob("table.0")).unlink()  # part of it deleted, then the signal
        raise KeyboardInterrupt

    monkeypatch.setattr(ib.shutil, "rmtree", interrupted)
    with pytest.raises(KeyboardInterrupt):
        ig.build_from_token_ids([[5, 6, 7]] * 9, out)
    monkeypatch.setattr(ib.shutil, "rmtree", real)
    assert CorpusIndex.load(out, verify=True).cooccurrence_ids([[[5, 6]]]) == 9  # the new index, whole


def test_run_verify_flag_checksums_every_load_of_the_run(monkeypatch, tmp_path):
    """``factlab run --verify`` / ``run-all --verify``: the run (and its kernel, which inherits the
    environment) hashes every index and datastore file on every load."""
    import os

    from factlab import cli, runner

    seen = []

    def fake_run(*a, **kw):
        seen.append(os.environ.get("FACTLAB_VERIFY"))
        return runner.RunResult(tmp_path, tmp_path / "notebook.ipynb", tmp_path / "report.html", {}, True)

    monkeypatch.setenv("FACTLAB_VERIFY", "0")  # restored after the test
    monkeypatch.setattr(cli, "run_notebook", fake_run)
    assert cli.main(["run", "00_quickstart", "--smoke"]) == 0
    assert cli.main(["run", "00_quickstart", "--smoke", "--verify"]) == 0
    monkeypatch.setattr(cli, "run_all", lambda **kw: [fake_run()])
    assert cli.main(["run-all", "--verify"]) == 0
    assert seen == ["0", "1", "1"]

"""factlab.corpus.retrieval: token chunking, bm25s retrieval, per-prompt pre-caching
(Binary RAR, 001_f9c1f8134c3dd554.txt §3.2, §4.3)."""

import math
import re
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from factlab.corpus import retrieval as R
from factlab.corpus.retrieval import BM25Retriever, Chunk, Datastore, chunk_documents, rar_query
from factlab.data.miniworld import ensure_world
from factlab.data.types import read_jsonl


@pytest.fixture(scope="module")
def world():
    return ensure_world()


@pytest.fixture(scope="module")
def docs(world):
    return list(read_jsonl(world["corpus"]))


@pytest.fixture(scope="module")
def store(world, tokenizer):
    return Datastore.from_jsonl(world["corpus"], tokenizer, chunk_tokens=128)


def _squash(s: str) -> str:
    return re.sub(r"\s+", "", s)


# -- chunking -----------------------------------------------------------------------------

def test_paper_constants():
    assert (R.RAR_CHUNK_TOKENS, R.RAR_TOP_K) == (512, 8)  # 001 §4.3
    assert (R.VERISCORE_CHUNK_TOKENS, R.VERISCORE_TOP_K) == (256, 4)  # 001 §4.2


def test_chunks_cover_each_document_exactly(docs, tokenizer):
    chunks = chunk_documents(docs, tokenizer, chunk_tokens=64)
    by_doc = {}
    for c in chunks:
        by_doc.setdefault(c.doc_id, []).append(c)
    assert set(by_doc) == {d["id"] for d in docs}
    for d in docs:
        cs = by_doc[d["id"]]
        assert [c.id for c in cs] == [f"{d['id']}#{i}" for i in range(len(cs))]
        assert [c.start_token for c in cs] == [64 * i for i in range(len(cs))]
        assert all(c.title == d["title"] for c in cs)
        # chunks partition the text, also where BPE splits a multi-byte character (Amharic)
        assert _squash("".join(c.text for c in cs)) == _squash(d["text"])
        n_tok = len(tokenizer(d["text"], add_special_tokens=False)["input_ids"])
        assert len(cs) == math.ceil(n_tok / 64)


def test_chunk_token_lengths_and_overlap(docs, tokenizer):
    doc = max(docs, key=lambda d: len(d["text"]))
    ids = tokenizer(doc["text"], add_special_tokens=False)["input_ids"]
    chunks = chunk_documents([doc], tokenizer, chunk_tokens=100, overlap=30)
    assert [c.start_token for c in chunks] == list(range(0, len(ids) - 30, 70))[:len(chunks)]
    assert chunks[-1].start_token + 100 >= len(ids)
    for a, b in zip(chunks, chunks[1:]):
        # the overlap is a shared stretch of text: b starts inside a
        assert b.start_token - a.start_token == 70
        head = b.text[:20]
        assert head in a.text
    # re-tokenizing a chunk gives about chunk_tokens tokens (boundary merges may differ by a few)
    for c in chunks[:-1]:
        assert abs(len(tokenizer(c.text, add_special_tokens=False)["input_ids"]) - 100) <= 3


@pytest.mark.parametrize("chunk_tokens,overlap", [(10, 10), (10, 11), (10, -1), (0, 0)])
def test_bad_chunk_settings(tokenizer, chunk_tokens, overlap):
    with pytest.raises(ValueError, match="overlap|chunk_tokens"):
        chunk_documents([{"id": "a", "text": "x y z"}], tokenizer, chunk_tokens, overlap)


def test_overlap_error_message_is_clear(tokenizer):
    with pytest.raises(ValueError, match=r"overlap must be >= 0 and < chunk_tokens \(8\), got 8"):
        chunk_documents([{"id": "a", "text": "x"}], tokenizer, chunk_tokens=8, overlap=8)


def test_bad_documents(tokenizer):
    with pytest.raises(ValueError, match="no 'id'"):
        chunk_documents([{"text": "x"}], tokenizer)
    with pytest.raises(ValueError, match="no text field 'body'"):
        chunk_documents([{"id": "a", "text": "x"}], tokenizer, text_field="body")
    assert chunk_documents([], tokenizer) == []
    assert chunk_documents([{"id": "a", "text": ""}], tokenizer) == []
    # untitled documents and non-default text fields
    (c,) = chunk_documents([{"id": 7, "body": "Quito is in Ecuador."}], tokenizer, text_field="body")
    assert (c.id, c.doc_id, c.title, c.text) == ("7#0", "7", "", "Quito is in Ecuador.")


class WhitespaceTokenizer:
    """A slow (non-offset) tokenizer: chunking falls back to decode."""

    is_fast = False

    def __init__(self):
        self.vocab: dict[str, int] = {}
        self.inv: dict[int, str] = {}

    def encode(self, text, **_):
        out = []
        for w in text.split():
            if w not in self.vocab:
                self.vocab[w] = len(self.vocab)
                self.inv[self.vocab[w]] = w
            out.append(self.vocab[w])
        return out

    def decode(self, ids, **_):
        return " ".join(self.inv[i] for i in ids)


def test_any_tokenizer_object():
    words = [f"w{i}" for i in range(25)]
    chunks = chunk_documents([{"id": "d", "text": " ".join(words)}], WhitespaceTokenizer(),
                             chunk_tokens=10, overlap=2)
    assert [c.text.split() for c in chunks] == [words[0:10], words[8:18], words[16:25]]


@settings(max_examples=200, deadline=None)
@given(n=st.integers(0, 300), size=st.integers(1, 40), data=st.data())
def test_windows_property(n, size, data):
    overlap = data.draw(st.integers(0, size - 1))
    wins = R._windows(n, size, size - overlap)
    if n == 0:
        assert wins == []
        return
    assert wins[0][0] == 0 and wins[-1][1] == n
    assert all(0 < e - s <= size for s, e in wins)
    assert all(b[0] - a[0] == size - overlap for a, b in zip(wins, wins[1:]))
    covered = set()
    for s, e in wins:
        covered.update(range(s, e))
    assert covered == set(range(n))
    assert all(e < n for _, e in wins[:-1])  # no window after the one reaching the end


# -- BM25 ---------------------------------------------------------------------------------

TOY = [Chunk(f"d{i}#0", f"d{i}", "", t, 0) for i, t in enumerate([
    "paris is the capital of france",
    "berlin is the capital of germany and berlin is large",
    "the cat sat on the mat",
    "france borders germany",
    "tokyo capital japan tokyo tokyo",
])]


def lucene_bm25(chunks, query_tokens, k1=1.5, b=0.75):
    """Brute-force Lucene BM25 (bm25s' default method) over bm25s' own tokens."""
    r = BM25Retriever(index_title=False)
    docs = r.tokenize([c.text for c in chunks])
    n, avgdl = len(docs), sum(map(len, docs)) / len(docs)
    df = Counter(t for d in docs for t in set(d))
    out = []
    for d in docs:
        tf, s = Counter(d), 0.0
        for t in query_tokens:
            if t in tf:
                idf = math.log(1 + (n - df[t] + 0.5) / (df[t] + 0.5))
                # Lucene's form drops the (k1 + 1) factor of the numerator
                s += idf * tf[t] / (tf[t] + k1 * (1 - b + b * len(d) / avgdl))
        out.append(s)
    return np.array(out)


def test_bm25_scores_match_reference_formula():
    r = BM25Retriever(index_title=False).build(TOY)
    for q in ["capital of germany", "tokyo", "berlin france", "cat mat capital"]:
        ref = lucene_bm25(TOY, r.tokenize([q])[0])
        np.testing.assert_allclose(r.scores(q), ref, rtol=1e-5, atol=1e-6)
        hits = r.search([q], k=3)[0]
        expected = sorted((s for s in ref if s > 0), reverse=True)[:3]
        np.testing.assert_allclose([h.score for h in hits], expected, rtol=1e-5)
        pos = {c.id: i for i, c in enumerate(TOY)}
        for h in hits:
            assert h.score == pytest.approx(ref[pos[h.chunk.id]], rel=1e-5)
        keys = [(-h.score, pos[h.chunk.id]) for h in hits]
        assert keys == sorted(keys)  # best first, ties by chunk index


def test_empty_queries_and_large_k():
    r = BM25Retriever().build(TOY)
    out = r.search(["", "the of and is", "zzzz qqqq", "capital"], k=100)
    assert out[:3] == [[], [], []]
    assert {h.chunk.id for h in out[3]} == {"d0#0", "d1#0", "d4#0"}  # only chunks that match
    assert r.search([], k=3) == []
    assert r.search(["capital"], k=0) == [[]]
    with pytest.raises(TypeError, match="list of queries"):
        r.search("capital", k=3)
    with pytest.raises(ValueError, match="zero chunks"):
        BM25Retriever().build([])
    with pytest.raises(ValueError, match="indexable word"):  # bm25s itself crashes here
        BM25Retriever().build([Chunk("a#0", "a", "", "x y", 0), Chunk("b#0", "b", "", "the", 0)])
    with pytest.raises(RuntimeError, match="no index"):
        BM25Retriever().search(["x"], k=1)


def test_stopwords_and_stemmer_options(tmp_path):
    plain = BM25Retriever(stopwords=None).build(TOY)
    assert plain.search(["the"], k=2)[0]  # "the" is indexed without a stopword list
    assert BM25Retriever().build(TOY).search(["the"], k=2)[0] == []

    def stem(words):
        return [w[:-1] if w.endswith("s") else w for w in words]

    stemmed = BM25Retriever(stemmer=stem).build(TOY)
    assert [h.chunk.id for h in stemmed.search(["border"], k=1)[0]] == ["d3#0"]
    assert BM25Retriever().build(TOY).search(["border"], k=1)[0] == []
    stemmed.save(tmp_path / "s")
    with pytest.raises(ValueError, match="custom stemmer"):
        BM25Retriever.load(tmp_path / "s")
    again = BM25Retriever.load(tmp_path / "s", stemmer=stem)
    assert [h.chunk.id for h in again.search(["border"], k=1)[0]] == ["d3#0"]
    try:
        import Stemmer  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="PyStemmer"):
            BM25Retriever(stemmer="english")


def test_title_is_indexed():
    chunks = [Chunk("a#1", "a", "Ecuador", "Its capital is Quito.", 5),
              Chunk("b#0", "b", "Peru", "Its capital is Lima.", 0)]
    assert BM25Retriever().build(chunks).search(["Ecuador capital"], k=1)[0][0].chunk.id == "a#1"
    no_title = BM25Retriever(index_title=False).build(chunks)
    assert all(h.chunk.id != "a#1" or h.score < 1 for h in no_title.search(["Ecuador"], k=1)[0])


def test_miniworld_questions_find_their_article(world, store):
    items = list(read_jsonl(world["qa_heldout"]))[:100]
    hits = store.retriever.search([it["question"] for it in items], k=8)
    top1 = np.mean([h[0].chunk.doc_id == it["meta"]["doc_id"] for h, it in zip(hits, items) if h])
    top8 = np.mean([any(x.chunk.doc_id == it["meta"]["doc_id"] for x in h) for h, it in zip(hits, items)])
    assert top1 >= 0.8 and top8 >= 0.9, (top1, top8)


def test_save_load_roundtrip(tmp_path, store):
    queries = ["What is the capital of Peru?", "Which currency does Japan use?", ""]
    before = store.retriever.search(queries, k=5)
    store.retriever.save(tmp_path / "idx")
    loaded = BM25Retriever.load(tmp_path / "idx")
    assert loaded.chunks == store.chunks
    assert loaded.search(queries, k=5) == before
    assert (loaded.k1, loaded.b, loaded.method, loaded.index_title) == (1.5, 0.75, "lucene", True)


def test_load_missing_folder_names_it(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(FileNotFoundError, match=re.escape(str(missing))):
        BM25Retriever.load(missing)
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "chunks.jsonl").write_text("")
    with pytest.raises(FileNotFoundError, match="half.*incomplete.*factlab_retriever.json"):
        BM25Retriever.load(tmp_path / "half")
    with pytest.raises(FileNotFoundError, match="nowhere"):
        Datastore.load(missing)


# -- Datastore and pre-caching (001 §3.2) ------------------------------------------------

def test_from_jsonl(world, store, tokenizer):
    assert len({c.doc_id for c in store.chunks}) == 252
    assert store.chunk("country/france#0").title == "France"
    small = Datastore.from_jsonl(world["corpus"], tokenizer, chunk_tokens=512, overlap=64)
    assert len(small) < len(store)
    with pytest.raises(FileNotFoundError):
        Datastore.from_jsonl(world["corpus"].parent / "missing.jsonl", tokenizer)


def test_precache_restricts_retrieval(store):
    prompts = {"fr": "Tell me about France and its capital.",
               "jp": "Write a short history of Japan.",
               "none": "zzzz qqqq"}
    cache = store.precache(prompts, k_docs=2, references={"jp": "Tokyo is the capital of Japan."})
    assert set(cache) == set(prompts) and cache["none"] == []
    fr_docs = {store.chunk(c).doc_id for c in cache["fr"]}
    assert "country/france" in fr_docs and len(fr_docs) <= 2
    # every chunk of a cached document is cached
    assert {c.id for c in store.chunks if c.doc_id in fr_docs} == set(cache["fr"])
    assert "country/japan" in {store.chunk(c).doc_id for c in cache["jp"]}

    calls, fb = store.cached_calls, store.fallbacks
    q = rar_query(prompts["fr"], "The capital of France is Berlin, next to Germany and Japan.")
    hits = store.retrieve(q, k=8, prompt_id="fr")
    assert hits and {h.chunk.id for h in hits} <= set(cache["fr"])
    # restricted ranking = global scores ranked among the cached chunks only
    scores = store.retriever.scores(q)
    idx = [store._index[c] for c in cache["fr"]]
    best = sorted(idx, key=lambda i: (-scores[i], i))[:8]
    assert [h.chunk.id for h in hits] == [store.chunks[i].id for i in best if scores[i] > 0]
    assert store.retrieve(q, k=8, prompt_id="none") == []
    assert (store.cached_calls, store.fallbacks) == (calls + 2, fb)

    # unknown prompt: global search, counted as a fallback
    glob = store.retrieve(q, k=8, prompt_id="never-cached")
    assert glob == store.retrieve(q, k=8)
    assert store.fallbacks == fb + 1
    assert any(h.chunk.id not in cache["fr"] for h in glob)


def test_retrieve_many_matches_retrieve(store):
    store.precache({"pe": "Peru"}, k_docs=1)
    qs = ["capital of Peru", "currency of Chile", "", "Lima"]
    pids = ["pe", None, "pe", "missing"]
    fb = store.fallbacks
    many = store.retrieve_many(qs, k=4, prompt_ids=pids)
    assert store.fallbacks == fb + 1
    assert many == [store.retrieve(q, 4, p) for q, p in zip(qs, pids)]
    assert store.retrieve_many(qs, k=4) == store.retriever.search(qs, 4)
    with pytest.raises(ValueError, match="prompt ids"):
        store.retrieve_many(qs, prompt_ids=["pe"])


def test_datastore_save_load_keeps_cache(tmp_path, store):
    store.precache({"de": "Germany"}, k_docs=1)
    store.save(tmp_path / "ds")
    again = Datastore.load(tmp_path / "ds")
    assert again.cache == store.cache
    q = "capital Berlin"
    assert again.retrieve(q, 3, "de") == store.retrieve(q, 3, "de")


@pytest.mark.parametrize("shape", ['["de", "fr"]', '{"de": "chunk-1"}', '{"de": [1, 2]}', '{"de": ["no-such-chunk"]}',
                                   '{"de": ['])
def test_a_wrong_shaped_precache_file_is_one_clear_error(tmp_path, store, shape):
    """A ``precache.json`` of the wrong shape was a traceback (issue 43)."""
    from factlab.integrity import IntegrityError, write_file_manifest

    store.save(tmp_path / "ds")
    (tmp_path / "ds" / "precache.json").write_text(shape)
    write_file_manifest(tmp_path / "ds")  # listed as it is: the shape itself is under test
    with pytest.raises(IntegrityError, match=r"precache.json: unreadable precomputed retrievals .*rebuild: delete"):
        Datastore.load(tmp_path / "ds")


def test_cache_and_chunk_validation(store):
    with pytest.raises(KeyError, match="unknown chunk ids"):
        store.set_cache({"p": ["no-such#0"]})
    with pytest.raises(ValueError, match="k_docs"):
        store.precache({"p": "x"}, k_docs=0)
    dup = [Chunk("a#0", "a", "", "lima peru", 0), Chunk("a#0", "a", "", "quito ecuador", 0)]
    with pytest.raises(ValueError, match="not unique"):
        Datastore(dup)
    with pytest.raises(TypeError):
        Datastore()


def test_rar_query():
    assert rar_query("Who?", "Paris.") == "Who?\nParis."
    assert rar_query(None, "Paris.") == "Paris."


# -- files verified before use ----------------------------------------------------------------

def _store_files(folder):
    from factlab.integrity import MANIFEST_FILE, STAMP_FILE

    return sorted(p for p in folder.rglob("*") if p.is_file() and p.name not in (MANIFEST_FILE, STAMP_FILE))


def test_every_saved_datastore_file_is_verified_on_load(tmp_path, store):
    """chunks.jsonl, the bm25s arrays (.npy) and json files, precache.json: truncated, or changed
    at the same size, each is an error naming the file, never a store that answers wrongly."""
    from factlab.integrity import IntegrityError

    store.precache({"de": "Germany"}, k_docs=1)
    saved = store.save(tmp_path / "ds")
    files = _store_files(saved)
    names = {p.name for p in files}
    assert {"chunks.jsonl", "precache.json", "factlab_retriever.json"} <= names
    assert any(n.endswith(".npy") for n in names)
    for i, path in enumerate(files):
        original = path.read_bytes()
        damaged = original[:len(original) // 2] if i % 2 else bytes(b ^ 0x20 for b in original)
        path.write_bytes(damaged)
        with pytest.raises(IntegrityError) as e:
            Datastore.load(saved)
        assert str(path) in str(e.value) and "rebuild" in str(e.value), path
        path.write_bytes(original)
    assert Datastore.load(saved).cache == store.cache  # all put back: loads again


def test_ensure_datastore_rebuilds_one_saved_before_manifests(tmp_path, world, monkeypatch, caplog):
    import logging

    from factlab.integrity import MANIFEST_FILE
    from factlab.models import resolve_model

    tokenizer = resolve_model("smollm2-135m-instruct")  # the shared cache's: the private one below holds the datastore only
    corpus = tmp_path / "corpus.jsonl"  # a slice of the mini-world's: what is tested is the manifest, not the size
    corpus.write_text("".join(line for i, line in enumerate(open(world["corpus"])) if i < 40))
    monkeypatch.setenv("FACTLAB_CACHE", str(tmp_path / "cache"))
    cfg = R.DatastoreSection()
    first = R.ensure_datastore(cfg, corpus, tokenizer, 128)
    folder = R.datastore_dir(cfg, corpus, tokenizer, 128)
    assert folder.is_relative_to(tmp_path / "cache")
    (folder / MANIFEST_FILE).unlink()
    with caplog.at_level(logging.WARNING):
        again = R.ensure_datastore(cfg, corpus, tokenizer, 128)
    assert "no file manifest" in caplog.text and (folder / MANIFEST_FILE).is_file()
    assert len(again) == len(first) > 0


@pytest.mark.parametrize("name", ["chunks.jsonl", "factlab_retriever.json", "bm25s", "dangling"])
def test_save_never_writes_through_a_link_in_the_datastore_folder(tmp_path, store, name):
    """A datastore is saved in place (``ensure_datastore`` rebuilds one in its cache folder): a link
    planted there had its target overwritten, a dangling one created, a linked ``bm25s/`` filled
    (issue 43 round-5 probe). The link is refused before anything is written."""
    from factlab.paths import SymlinkRefused

    out = tmp_path / "ds"
    out.mkdir()
    victim = tmp_path / "victim"
    if name == "bm25s":
        victim.mkdir()
        (out / name).symlink_to(victim, target_is_directory=True)
    elif name == "dangling":
        (out / "chunks.jsonl").symlink_to(victim)
    else:
        victim.write_text("precious")
        (out / name).symlink_to(victim)
    with pytest.raises(SymlinkRefused, match="symbolic link"):
        store.save(out)
    if name == "bm25s":
        assert not any(victim.iterdir())
    elif name == "dangling":
        assert not victim.exists()
    else:
        assert victim.read_text() == "precious"

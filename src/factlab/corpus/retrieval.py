"""Document chunking, BM25 retrieval (bm25s) and per-prompt pre-cached datastores.

Binary RAR (``001_f9c1f8134c3dd554.txt``):

* §3.2 "Retrieval": a datastore DS is a set of documents that are preprocessed, chunked and
  indexed; a retriever R returns the evidence C(x, y) = {d1, ..., dk} for a prompt x and a
  response y. Here the query is the response text, optionally preceded by the prompt
  (``rar_query``).
* §3.2 "Practical efficiency for online RL": pre-caching. For each training prompt x a set
  of relevant documents DS_cache(x) is retrieved once during dataset preparation (from the
  prompt and, when available, the ground-truth response); at training time C(x, y) is
  retrieved from that cached subset rather than from the full datastore
  (``Datastore.precache`` / ``Datastore.retrieve(..., prompt_id=...)``).
* §4.3 "Training details": BM25 retrieval over documents chunked into 512 tokens of the
  policy's tokenizer, top 8 chunks per response (``RAR_CHUNK_TOKENS``, ``RAR_TOP_K``); the
  VeriScore baseline (§4.2) uses 256-token chunks and the top 4 chunks per claim
  (``VERISCORE_CHUNK_TOKENS``, ``VERISCORE_TOP_K``).

Interpretations (the paper leaves these open):

* Chunks are consecutive windows of ``chunk_tokens`` tokenizer tokens with a stride of
  ``chunk_tokens - overlap``; the chunk text is the exact character span of those tokens in
  the original document (fast tokenizers' offset mapping), else the decoded tokens, with
  surrounding whitespace stripped; a window whose text is blank gives no chunk.
* BM25 indexes the chunk text preceded by its document title (``index_title=True``), so a
  chunk in the middle of an article still matches its entity's name.
* Hits with a BM25 score of 0 (no query term in common) are not evidence and are dropped;
  so a search may return fewer than ``k`` hits, and an empty query returns none.
* Restricted retrieval scores with the global index (corpus-level IDF) and ranks only the
  prompt's cached chunks.
* ``precache`` caches whole documents: the ``k_docs`` best documents (a document ranks by
  its best chunk) for the prompt text (plus reference text), then all their chunks.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import hashlib

import numpy as np
from pydantic import Field, model_validator

from ..config import ParamError, Section
from ..data.types import read_jsonl
from ..models import load_tokenizer
from ..integrity import IntegrityError, MissingManifest, verify_files, write_file_manifest
from ..paths import build_lock, cache_dir, no_symlink, refuse_symlinks, write_json

log = logging.getLogger(__name__)

RAR_CHUNK_TOKENS = 512  # 001 §4.3: documents chunked into 512 tokens for binary RAR
RAR_TOP_K = 8  # 001 §4.3: top 8 chunks per response
VERISCORE_CHUNK_TOKENS = 256  # 001 §4.2: VeriScore baseline, 256-token chunks
VERISCORE_TOP_K = 4  # 001 §4.2: top 4 chunks per claim
PRECACHE_DOCS = 10  # 001 §3.3: each training instance links to up to 10 documents

_CHUNKS_FILE = "chunks.jsonl"
_META_FILE = "factlab_retriever.json"
_BM25_DIR = "bm25s"
_CACHE_FILE = "precache.json"


@dataclass(frozen=True)
class Chunk:
    """A window of ``chunk_tokens`` tokens of one document.

    ``id`` is ``"<doc_id>#<n>"`` (n-th chunk of the document), ``start_token`` the index of
    its first token in the document's tokenization.
    """

    id: str
    doc_id: str
    title: str
    text: str
    start_token: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Chunk":
        return cls(id=str(d["id"]), doc_id=str(d["doc_id"]), title=str(d.get("title") or ""),
                   text=str(d["text"]), start_token=int(d.get("start_token", 0)))


@dataclass(frozen=True)
class Hit:
    """One retrieved chunk and its BM25 score."""

    chunk: Chunk
    score: float


def _as_tokenizer(tokenizer):
    if isinstance(tokenizer, str) or tokenizer is None:
        return load_tokenizer(tokenizer)
    return tokenizer


def _windows(n_tokens: int, chunk_tokens: int, stride: int) -> list[tuple[int, int]]:
    """Token windows ``[start, end)`` covering ``n_tokens``; the last one ends at n_tokens."""
    out, start = [], 0
    while start < n_tokens:
        end = min(start + chunk_tokens, n_tokens)
        out.append((start, end))
        if end == n_tokens:
            break
        start += stride
    return out


def chunk_documents(docs: Iterable[Mapping[str, Any]], tokenizer, chunk_tokens: int = RAR_CHUNK_TOKENS,
                    overlap: int = 0, text_field: str = "text", id_field: str = "id",
                    title_field: str = "title") -> list[Chunk]:
    """Split documents into windows of ``chunk_tokens`` tokenizer tokens (001 §3.2, §4.3).

    ``docs``: dicts with an id, optional title and a text. ``tokenizer``: any HF tokenizer
    (or a name for ``factlab.models.load_tokenizer``). Consecutive chunks share ``overlap``
    tokens, so the stride is ``chunk_tokens - overlap``. Documents whose text is empty give
    no chunk. Raises ``ValueError`` for ``chunk_tokens < 1``, an overlap outside
    ``[0, chunk_tokens)``, or a document without id or text.
    """
    if int(chunk_tokens) < 1:
        raise ValueError(f"chunk_tokens must be >= 1, got {chunk_tokens}")
    if not 0 <= int(overlap) < int(chunk_tokens):
        raise ValueError(f"overlap must be >= 0 and < chunk_tokens ({chunk_tokens}), got {overlap}")
    docs = list(docs)
    for i, d in enumerate(docs):
        if d.get(id_field) in (None, ""):
            raise ValueError(f"document {i} has no '{id_field}' field")
        if not isinstance(d.get(text_field), str):
            raise ValueError(f"document {d[id_field]!r} has no text field '{text_field}'")
    if not docs:
        return []
    tok = _as_tokenizer(tokenizer)
    texts = [d[text_field] for d in docs]
    fast = bool(getattr(tok, "is_fast", False))
    kw = dict(add_special_tokens=False, verbose=False)
    if fast:
        enc = tok(texts, return_offsets_mapping=True, **kw)
        ids_list, offsets_list = enc["input_ids"], enc["offset_mapping"]
    else:
        ids_list = [tok.encode(t, **kw) for t in texts]
        offsets_list = [None] * len(texts)
    stride = int(chunk_tokens) - int(overlap)
    chunks: list[Chunk] = []
    for d, text, ids, offsets in zip(docs, texts, ids_list, offsets_list):
        doc_id, title = str(d[id_field]), str(d.get(title_field) or "")
        for n, (s, e) in enumerate(_windows(len(ids), int(chunk_tokens), stride)):
            if offsets is not None:
                piece = text[_char_boundary(offsets, s):_char_boundary(offsets, e)]
            else:
                piece = tok.decode(ids[s:e], skip_special_tokens=True)
            piece = piece.strip()
            if piece:
                chunks.append(Chunk(f"{doc_id}#{n}", doc_id, title, piece, s))
    return chunks


def _char_boundary(offsets: Sequence[tuple[int, int]], i: int) -> int:
    """Character position where token ``i`` starts a chunk (``len(offsets)``: the end).

    Byte-level BPE splits a multi-byte character over several tokens whose offsets all
    cover it; such a character goes wholly to the earlier chunk, so consecutive chunks
    without overlap partition the text exactly.
    """
    if i >= len(offsets):
        return offsets[-1][1]
    if i == 0:
        return offsets[0][0]
    return max(offsets[i][0], offsets[i - 1][1])


class BM25Retriever:
    """BM25 over chunks with bm25s (001 §4.3 "we apply BM25 for retrieval").

    ``stopwords``: ``"en"`` (bm25s' English list), a list of words, or ``None``.
    ``stemmer``: ``None``, ``"english"`` (PyStemmer, if installed), or any callable mapping a
    list of words to a list of stems (saved indexes then need it again at ``load``).
    ``k1``, ``b``, ``method``: bm25s' BM25 parameters (defaults: Lucene BM25, 1.5, 0.75).
    """

    def __init__(self, k1: float = 1.5, b: float = 0.75, method: str = "lucene",
                 stopwords: str | Sequence[str] | None = "en",
                 stemmer: str | Callable[[list[str]], list[str]] | None = None,
                 index_title: bool = True):
        self.k1, self.b, self.method = float(k1), float(b), method
        self.stopwords = list(stopwords) if isinstance(stopwords, (list, tuple)) else stopwords
        self.stemmer_name = stemmer if isinstance(stemmer, str) or stemmer is None else "<callable>"
        self._stemmer = _make_stemmer(stemmer)
        self.index_title = bool(index_title)
        self.chunks: list[Chunk] = []
        self._bm25 = None
        self._vocab: set[str] = set()

    # -- tokenization -------------------------------------------------------------------
    def tokenize(self, texts: Sequence[str]) -> list[list[str]]:
        """bm25s tokens (lowercased words, stopwords removed, stemmed) of each text."""
        import bm25s

        if not texts:
            return []
        return bm25s.tokenize(list(texts), stopwords=self.stopwords, stemmer=self._stemmer,
                              return_ids=False, show_progress=False)

    def _doc_text(self, c: Chunk) -> str:
        return f"{c.title}\n{c.text}" if self.index_title and c.title else c.text

    # -- index --------------------------------------------------------------------------
    def build(self, chunks: Sequence[Chunk]) -> "BM25Retriever":
        """Index ``chunks``; returns self. Raises ``ValueError`` on an empty list."""
        import bm25s

        chunks = list(chunks)
        if not chunks:
            raise ValueError("cannot build a BM25 index from zero chunks")
        tokens = bm25s.tokenize([self._doc_text(c) for c in chunks], stopwords=self.stopwords,
                                stemmer=self._stemmer, show_progress=False)
        if not any(t for t in tokens.vocab):
            raise ValueError(f"none of the {len(chunks)} chunks has an indexable word "
                             "(words of 2+ characters that are not stopwords)")
        bm25 = bm25s.BM25(k1=self.k1, b=self.b, method=self.method)
        bm25.index(tokens, show_progress=False)
        self._set(bm25, chunks)
        return self

    def _set(self, bm25, chunks: list[Chunk]) -> None:
        self._bm25, self.chunks = bm25, chunks
        self._vocab = {t for t in bm25.vocab_dict if t}

    def __len__(self) -> int:
        return len(self.chunks)

    def _check_built(self) -> None:
        if self._bm25 is None:
            raise RuntimeError("the retriever has no index: call build(chunks) or load(dir) first")

    def _query_tokens(self, queries: Sequence[str]) -> list[list[str]]:
        return [[t for t in toks if t in self._vocab] for toks in self.tokenize(
            [q or "" for q in queries])]

    # -- search -------------------------------------------------------------------------
    def search(self, queries: Sequence[str], k: int = RAR_TOP_K) -> list[list[Hit]]:
        """Top-``k`` chunks per query, best first (equal scores: lower chunk index first;
        which of several chunks tied at the k-th place makes the cut is up to bm25s).

        ``k`` larger than the corpus returns every chunk that scores above 0; queries with
        no indexed word (empty, only stopwords, unknown words) return ``[]``.
        """
        self._check_built()
        if isinstance(queries, str):
            raise TypeError("search takes a list of queries; wrap a single query in a list")
        if k < 1 or not queries:
            return [[] for _ in queries]
        toks = self._query_tokens(queries)
        live = [i for i, t in enumerate(toks) if t]
        out: list[list[Hit]] = [[] for _ in queries]
        if not live:
            return out
        kk = min(int(k), len(self.chunks))
        docs, scores = self._bm25.retrieve([toks[i] for i in live], k=kk, show_progress=False)
        for row, i in enumerate(live):
            ranked = sorted((-float(s), int(d)) for d, s in zip(docs[row], scores[row]) if s > 0)
            out[i] = [Hit(self.chunks[d], -neg) for neg, d in ranked]
        return out

    def scores(self, query: str) -> np.ndarray:
        """BM25 score of ``query`` against every chunk (zeros for an empty query)."""
        self._check_built()
        toks = self._query_tokens([query])[0]
        if not toks:
            return np.zeros(len(self.chunks), dtype=np.float32)
        return np.asarray(self._bm25.get_scores(toks))

    def search_among(self, query: str, indices: Sequence[int] | np.ndarray, k: int = RAR_TOP_K) -> list[Hit]:
        """Top-``k`` among the chunks at ``indices`` only (global BM25 scores; ties by index)."""
        idx = np.asarray(indices, dtype=np.int64)
        if k < 1 or idx.size == 0:
            return []
        s = self.scores(query)[idx]
        order = np.lexsort((idx, -s))[:k]
        return [Hit(self.chunks[int(idx[j])], float(s[j])) for j in order if s[j] > 0]

    # -- persistence --------------------------------------------------------------------
    def save(self, directory: str | Path) -> Path:
        """Write the bm25s index, the chunks (JSONL) and the settings into ``directory``."""
        self._check_built()
        out = no_symlink(Path(directory), "a datastore folder")
        out.mkdir(parents=True, exist_ok=True)
        refuse_symlinks(out, "a datastore folder")  # files there are rewritten in place, never through a link
        self._bm25.save(str(out / _BM25_DIR), show_progress=False)
        with (out / _CHUNKS_FILE).open("w", encoding="utf-8") as f:
            for c in self.chunks:
                f.write(json.dumps(c.to_dict(), ensure_ascii=False) + "\n")
        meta = dict(k1=self.k1, b=self.b, method=self.method, stopwords=self.stopwords,
                    stemmer=self.stemmer_name, index_title=self.index_title,
                    n_chunks=len(self.chunks))
        write_json(out / _META_FILE, meta, indent=1)
        write_file_manifest(out)
        return out

    @classmethod
    def load(cls, directory: str | Path, stemmer: Callable | None = None) -> "BM25Retriever":
        """Load what ``save`` wrote, once its files match their manifest (sizes always,
        checksums on the first load; ``integrity.verify_files``). ``FileNotFoundError`` names
        the folder when it is missing or incomplete, ``IntegrityError`` the file that is not as
        written; an index saved with a custom stemmer callable needs ``stemmer=``."""
        import bm25s

        d = Path(directory)
        if not d.is_dir():
            raise FileNotFoundError(f"BM25 index folder not found: {d}")
        missing = [n for n in (_META_FILE, _CHUNKS_FILE, _BM25_DIR) if not (d / n).exists()]
        if missing:
            raise FileNotFoundError(f"BM25 index folder {d} is incomplete: missing {', '.join(missing)}")
        verify_files(d, rebuild_hint(d))
        meta = json.loads((d / _META_FILE).read_text(encoding="utf-8"))
        stem = meta.get("stemmer")
        if stem == "<callable>":
            if stemmer is None:
                raise ValueError(f"the index in {d} was built with a custom stemmer callable: "
                                 "pass the same one as load(..., stemmer=...)")
            stem = stemmer
        self = cls(k1=meta["k1"], b=meta["b"], method=meta["method"], stopwords=meta["stopwords"],
                   stemmer=stem, index_title=meta["index_title"])
        bm25 = bm25s.BM25.load(str(d / _BM25_DIR), show_progress=False)
        with (d / _CHUNKS_FILE).open(encoding="utf-8") as f:
            chunks = [Chunk.from_dict(json.loads(line)) for line in f if line.strip()]
        if len(chunks) != meta.get("n_chunks", len(chunks)):
            raise ValueError(f"{d / _CHUNKS_FILE}: {len(chunks)} chunks, index says {meta['n_chunks']}")
        self._set(bm25, chunks)
        return self


def _make_stemmer(stemmer):
    if stemmer is None or callable(stemmer):
        return stemmer
    if isinstance(stemmer, str):
        try:
            import Stemmer  # PyStemmer
        except ImportError:
            raise ImportError(f"stemmer={stemmer!r} needs PyStemmer (`pip install PyStemmer`); "
                              "or pass a callable, or stemmer=None") from None
        return Stemmer.Stemmer(stemmer)
    raise TypeError(f"stemmer must be None, a language name or a callable, got {type(stemmer).__name__}")


def rar_query(prompt: str | None, response: str) -> str:
    """The retrieval query for a (prompt, response) pair: both texts (001 §3.2 C(x, y))."""
    return f"{prompt}\n{response}" if prompt else (response or "")


class Datastore:
    """Chunks + BM25 index + per-prompt caches (001 §3.2 "pre-caching strategy").

    ``fallbacks`` counts ``retrieve`` calls with a ``prompt_id`` that had no cached set (they
    search the whole datastore); ``cached_calls`` counts the restricted ones; ``searches``
    counts every query answered (the "# Searches" of 004 Table 14). Build it from
    ``chunks`` (indexed here with ``BM25Retriever(**retriever_kw)``) or a built ``retriever``.
    """

    def __init__(self, chunks: Sequence[Chunk] | None = None, retriever: BM25Retriever | None = None,
                 **retriever_kw):
        if retriever is None:
            if chunks is None:
                raise TypeError("Datastore needs chunks (to index) or a built retriever")
            chunks = list(chunks)
            if len({c.id for c in chunks}) != len(chunks):
                raise ValueError("chunk ids are not unique (duplicate document ids?)")
            retriever = BM25Retriever(**retriever_kw).build(chunks)
        elif chunks is not None or retriever_kw:
            raise TypeError("pass either a built retriever or chunks and retriever settings, not both")
        retriever._check_built()
        self.retriever = retriever
        self.chunks = retriever.chunks
        self._index = {c.id: i for i, c in enumerate(self.chunks)}
        if len(self._index) != len(self.chunks):
            raise ValueError("chunk ids are not unique (duplicate document ids?)")
        self._by_doc: dict[str, list[int]] = {}
        for i, c in enumerate(self.chunks):
            self._by_doc.setdefault(c.doc_id, []).append(i)
        self.cache: dict[str, list[str]] = {}
        self._cache_idx: dict[str, np.ndarray] = {}
        self.fallbacks = 0
        self.cached_calls = 0
        self.searches = 0

    # -- construction -------------------------------------------------------------------
    @classmethod
    def from_documents(cls, docs: Iterable[Mapping[str, Any]], tokenizer,
                       chunk_tokens: int = RAR_CHUNK_TOKENS, overlap: int = 0,
                       text_field: str = "text", **retriever_kw) -> "Datastore":
        return cls(chunk_documents(docs, tokenizer, chunk_tokens, overlap, text_field=text_field),
                   **retriever_kw)

    @classmethod
    def from_jsonl(cls, path: str | Path, tokenizer, chunk_tokens: int = RAR_CHUNK_TOKENS,
                   overlap: int = 0, text_field: str = "text", **retriever_kw) -> "Datastore":
        """Chunk and index a JSONL corpus (one document per line: id, title?, text)."""
        return cls.from_documents(read_jsonl(path), tokenizer, chunk_tokens, overlap,
                                  text_field=text_field, **retriever_kw)

    def __len__(self) -> int:
        return len(self.chunks)

    def chunk(self, chunk_id: str) -> Chunk:
        return self.chunks[self._index[chunk_id]]

    @property
    def doc_ids(self) -> list[str]:
        return list(self._by_doc)

    # -- pre-caching --------------------------------------------------------------------
    def precache(self, prompts: Mapping[str, str], k_docs: int = PRECACHE_DOCS,
                 references: Mapping[str, str] | None = None,
                 search_depth: int = 5) -> dict[str, list[str]]:
        """Cache a candidate set per training prompt, once (001 §3.2 DS_cache(x)).

        For each prompt the query is its text plus ``references[prompt_id]`` when given (the
        paper caches documents related to the prompt and the ground truth). The ``k_docs``
        best documents among the top ``k_docs * search_depth`` chunks are kept and every
        chunk of them is cached. Returns (and stores) ``{prompt_id: [chunk ids]}``; prompts
        with no match get an empty set (their ``retrieve`` returns ``[]``).
        """
        if k_docs < 1:
            raise ValueError(f"k_docs must be >= 1, got {k_docs}")
        ids = list(prompts)
        refs = references or {}
        queries = [rar_query(prompts[p], refs.get(p, "")) if refs.get(p) else prompts[p] for p in ids]
        hits = self.retriever.search(queries, k=int(k_docs) * max(1, int(search_depth)))
        new: dict[str, list[str]] = {}
        for pid, hs in zip(ids, hits):
            docs: list[str] = []
            for h in hs:
                if h.chunk.doc_id not in docs:
                    docs.append(h.chunk.doc_id)
                    if len(docs) == k_docs:
                        break
            idx = [i for d in docs for i in self._by_doc[d]]
            new[pid] = [self.chunks[i].id for i in idx]
            self._cache_idx[pid] = np.asarray(idx, dtype=np.int64)
        self.cache.update(new)
        return new

    def cached_documents(self, prompt_id: str) -> int:
        """How many documents ``precache`` found for a prompt (0 when it has no cache)."""
        return len({self.chunks[i].doc_id for i in self._cache_idx.get(prompt_id, ())})

    def set_cache(self, cache: Mapping[str, Sequence[str]]) -> None:
        """Install cached sets (e.g. read back from JSON); unknown chunk ids raise ``KeyError``."""
        for pid, cids in cache.items():
            missing = [c for c in cids if c not in self._index]
            if missing:
                raise KeyError(f"prompt {pid!r}: unknown chunk ids {missing[:3]}")
            self.cache[pid] = list(cids)
            self._cache_idx[pid] = np.asarray([self._index[c] for c in cids], dtype=np.int64)

    # -- retrieval ----------------------------------------------------------------------
    def retrieve(self, query: str, k: int = RAR_TOP_K, prompt_id: str | None = None) -> list[Hit]:
        """Top-``k`` chunks for ``query`` (e.g. ``rar_query(prompt, response)``).

        With a ``prompt_id`` that was pre-cached, only that prompt's cached chunks are
        ranked; an unknown ``prompt_id`` falls back to the whole datastore (``fallbacks``).
        """
        self.searches += 1
        if prompt_id is not None:
            idx = self._cache_idx.get(prompt_id)
            if idx is not None:
                self.cached_calls += 1
                return self.retriever.search_among(query, idx, k)
            self.fallbacks += 1
        return self.retriever.search([query], k)[0]

    def retrieve_many(self, queries: Sequence[str], k: int = RAR_TOP_K,
                      prompt_ids: Sequence[str | None] | None = None) -> list[list[Hit]]:
        """``retrieve`` for many queries; uncached ones are searched in one bm25s batch."""
        if prompt_ids is None:
            prompt_ids = [None] * len(queries)
        if len(prompt_ids) != len(queries):
            raise ValueError(f"{len(queries)} queries but {len(prompt_ids)} prompt ids")
        out: list[list[Hit] | None] = [None] * len(queries)
        glob = []
        for i, (q, pid) in enumerate(zip(queries, prompt_ids)):
            if pid is not None and pid in self._cache_idx:
                out[i] = self.retrieve(q, k, pid)
            else:
                if pid is not None:
                    self.fallbacks += 1
                glob.append(i)
        self.searches += len(glob)
        for i, hs in zip(glob, self.retriever.search([queries[i] for i in glob], k)):
            out[i] = hs
        return out  # type: ignore[return-value]

    # -- persistence --------------------------------------------------------------------
    def save(self, directory: str | Path) -> Path:
        """Retriever files plus ``precache.json``, then their manifest."""
        out = self.retriever.save(directory)
        write_json(out / _CACHE_FILE, self.cache)
        write_file_manifest(out)
        return out

    @classmethod
    def load(cls, directory: str | Path, stemmer: Callable | None = None) -> "Datastore":
        ds = cls(retriever=BM25Retriever.load(directory, stemmer=stemmer))
        cache_file = Path(directory) / _CACHE_FILE
        if cache_file.exists():
            try:
                cache = json.loads(cache_file.read_text(encoding="utf-8"))
                if not isinstance(cache, dict) or not all(isinstance(v, list) and all(isinstance(c, str) for c in v)
                                                          for v in cache.values()):
                    raise ValueError("expected {prompt id: [chunk id, ...]}")
                ds.set_cache(cache)
            except (OSError, UnicodeDecodeError, ValueError, KeyError, RecursionError) as e:
                raise IntegrityError(f"{cache_file}: unreadable precomputed retrievals ({type(e).__name__}: "
                                     f"{str(e)[:200]}); rebuild: {rebuild_hint(Path(directory))}") from None
        return ds


# ---------------------------------------------------------------- params and the cached default


class DatastoreSection(Section):
    """Retrieval datastore of Binary RAR (001 §3.2, §4.2-4.3): BM25 (bm25s) over chunks.

    Two chunkings of the same corpus: ``chunk_tokens`` for the RAR rewards (§4.3: 512) and
    ``veriscore_chunk_tokens`` for claim verification (§4.2: 256)."""

    corpus: str | None = None  # JSONL (id, title?, text); None = the mini-world corpus
    text_field: str = "text"
    tokenizer: str | None = None  # None = the judge's tokenizer
    chunk_tokens: int = Field(RAR_CHUNK_TOKENS, ge=8)
    veriscore_chunk_tokens: int = Field(VERISCORE_CHUNK_TOKENS, ge=8)
    overlap: int = Field(0, ge=0)
    precache_docs: int = Field(PRECACHE_DOCS, ge=1)  # 001 §3.2 DS_cache(x): documents per prompt
    # §3.3: "Instances with fewer than three retrieved documents are discarded" (0 keeps all)
    min_precache_docs: int = Field(3, ge=0)
    dir: str | None = None  # None = <cache>/datastores/<corpus>-<tokenizer>-<chunk_tokens>

    @model_validator(mode="after")
    def _overlap_fits(self) -> "DatastoreSection":
        if self.min_precache_docs > self.precache_docs:
            raise ParamError("min_precache_docs", f"{self.min_precache_docs} documents cannot be required when "
                                                  f"precache_docs caches at most {self.precache_docs}")
        smallest = min(self.chunk_tokens, self.veriscore_chunk_tokens)
        if self.overlap >= smallest:
            raise ParamError("overlap", f"{self.overlap} tokens of overlap do not fit chunks of {smallest} tokens "
                                        f"(overlap must be smaller than every chunk size)")
        return self


def rebuild_hint(directory: Path) -> str:
    """How to rebuild a saved datastore (quoted by integrity errors)."""
    return f"delete {directory} and run again (ensure_datastore rebuilds it), or save the datastore there again"


def datastore_dir(cfg: DatastoreSection, corpus: str | Path, tokenizer: str, chunk_tokens: int) -> Path:
    """``dir/chunks<N>``, else ``<cache>/datastores/<corpus>-<tokenizer>-<N>t-<hash>``."""
    if cfg.dir:
        return Path(cfg.dir) / f"chunks{chunk_tokens}"
    p = Path(corpus).resolve()
    stat = p.stat()
    digest = hashlib.sha256(f"{p}:{stat.st_size}:{stat.st_mtime_ns}:{cfg.overlap}".encode()).hexdigest()[:10]
    return cache_dir() / "datastores" / f"{p.stem}-{Path(tokenizer).name}-{chunk_tokens}t-{digest}"


def ensure_datastore(cfg: DatastoreSection, corpus: str | Path, tokenizer: str, chunk_tokens: int) -> Datastore:
    """Load the chunked BM25 datastore from disk, or chunk + index the corpus and save it."""
    if not Path(corpus).exists():
        raise FileNotFoundError(f"datastore.corpus: {corpus} does not exist")
    out = datastore_dir(cfg, corpus, tokenizer, chunk_tokens)
    with build_lock(out):  # two processes sharing the cache build it once
        if (out / _CHUNKS_FILE).exists():
            log.info("loading datastore %s", out)
            try:
                return Datastore.load(out)
            except MissingManifest:  # saved before file manifests: rebuilt, not trusted
                log.warning("datastore %s has no file manifest (built by an older factlab); rebuilding it", out)
        log.info("building datastore %s (%d-token chunks)", out, chunk_tokens)
        ds = Datastore.from_jsonl(corpus, load_tokenizer(tokenizer), chunk_tokens=chunk_tokens,
                                  overlap=cfg.overlap, text_field=cfg.text_field)
        ds.save(out)
        return ds

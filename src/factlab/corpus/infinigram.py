"""Infini-gram corpus index and CorVer's windowed co-occurrence count.

CorVer scores a sentence by the number of times the content words of its subject and
object co-occur in Wikipedia: a CNF (AND of words) count "over Wikipedia token
positions within a bounded 1,000-token window", which "measures position-level
co-occurrence rather than document co-occurrence" (000_ac66a963fabf3916.txt §3.2,
Eq. 1; index details in §B.1, window choice in §B.1 "Window-size choice"). This module
builds that index with the ``infini-gram`` package and answers the count exactly. The
index folder is written by ``factlab.corpus.index_build`` (its docstring gives the file
layout), its suffix arrays by ``factlab.corpus.suffix_array``; what the count means
(surface variants, clauses, the bounded window) is defined in ``factlab.corpus.cooccurrence``,
with the brute-force ``reference_cooccurrence`` that transcribes it.

That count is what infini-gram's ``count_cnf`` is meant to return: its docs say it
"enumerate[s] all occurrences of each clause and pick[s] cases where they co-occur
within reasonable distance", that raising ``max_diff_tokens`` "may get more counts",
and its engine walks the occurrences of the least frequent clause and keeps those that
have every other clause within ``max_diff_tokens`` tokens and no document separator in
between.

What the installed engine (infini-gram 2.6.0) actually returns
---------------------------------------------------------------
Measured against ``reference_cooccurrence`` (tests/corpus/test_corpus.py pins these):

* Cross-document neighbours cancel matches, so counts can FALL as W grows. For each
  anchor the engine looks only at the nearest occurrence of the next clause on each
  side (left: strictly before, right: at or after). When both lie within W it keeps
  one range spanning both, then drops the range if a separator lies inside it, even
  when the neighbour on one side is in the same document. Eleven documents
  ``[5, 1, 6, 2, 7]`` with clauses {1} AND {2}: the engine returns 11 at W=2 and 3,
  but 1 at W=10 and W=1000 (only the first document has no earlier neighbour); the
  true count is 11 for every W >= 2. This is the drop docs/design.md reports (11 at W=10, 0
  at W=1000 on short documents).
* With three or more clauses the window is chained, not bounded: each further clause
  may lie up to W tokens beyond the range found so far, so matches spanning up to
  (k - 1) * W tokens (each side) count. One document with 1 at position 0, 2 at 900
  and 3 at 1800: the engine counts 1 at W=1000, the bounded count is 0.
* OR-ed variants that match at the same position are counted once per variant (the
  clause [[1], [1, 2]] over documents ``1 2 1`` and ``1 3`` counts 4; there are 3
  positions).
* A clause more frequent than ``max_clause_freq`` (default 50,000; CorVer used 500,000,
  §B.1) is subsampled, and the count is scaled by the product of every clause's
  subsampling factor, though only the anchor's sample is counted. On a 20M-token
  synthetic corpus with ``max_clause_freq=500_000`` and W=1000, two words occurring
  5,087,256 and 2,066,866 times gave 12,151,040 (``approx: True``): more matches than
  the rarer word has occurrences; the exact count is 2,066,866.
* With several shards the anchor is chosen per shard (read from the engine source),
  so the total depends on how the corpus was split.

``cooccurrence`` therefore uses the engine only to find occurrences (suffix-array
binary search: ``find`` gives each variant's rank range per shard, and the pointers are
read straight from ``table.i``), and does the window check itself with numpy. The raw
engine count stays available as ``CorpusIndex.engine_count_cnf`` for comparison.

How the count is computed, and what scales
------------------------------------------
1. Each clause's frequency: one suffix-array lookup per variant (milliseconds even on
   Wikipedia's 5.5e9 tokens); a clause that never occurs makes the answer 0.
2. The anchor's positions: its rank ranges are read from the suffix array (a
   contiguous slice per variant and shard) and turned into token positions; a position
   matched by two variants is kept under the first one only.
3. For every other clause, whichever is cheaper: read all its positions the same way
   (cost ~ its frequency, then a binary search per anchor keeps those within W), or
   scan the tokens within W of each anchor for its variants (cost ~ anchors x 2W). A
   frequent word next to a rare anchor ("United" next to "Kabul") is scanned, not
   enumerated.
4. Positions are moved to "gapped" coordinates (position + document index x (W + 1)),
   so no window can reach across a separator. Each other clause's set of valid window
   starts is a union of intervals [p - W, p]; a sweep over the interval ends finds where
   all of them overlap, and a binary search per anchor decides whether [a - W, a]
   meets that set.

Cost per query is O(sum over clauses of min(frequency, anchors x 2W) x log), exact, no
subsampling. ``limit=L`` returns min(count, L) and walks the anchors in growing chunks
(64, 128, ...), stopping at L matches: CorVer's reward needs nothing above c = 20
(Eq. 2), so frequent pairs stay cheap. Measured on one CPU core: the mini-world (252
articles, 53,801 tokens) builds in 0.1 s plus the tokenizer load, and answers a two-word
query in about 1 ms; on a 20M-token synthetic corpus a rare pair takes about 1 ms, the
two most frequent words (5.1M and 2.1M occurrences) 0.85 s exactly, or 3 ms with
``limit=20`` (the engine's approximate ``count_cnf``: 20 ms). Building needs the
suffix-array builder's memory (a few bytes per token per job); shards keep each run
bounded.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import hashlib

import numpy as np
from pydantic import Field

from ..config import Section
from ..integrity import IntegrityError, MissingManifest, verify_files
from ..models import load_tokenizer
from ..paths import build_lock, cache_dir
from .cooccurrence import (Clause, Shard, count_windows, dedupe_clause, matches_any, positions_near, select_near,
                           word_clause)
from .index_build import (BUILD_HINT, DEFAULT_SHARD_TOKENS, FORMAT, FORMAT_VERSION, META_FILE, dtype_for,
                          read_jsonl_texts, rebuild_command, separator_for, token_width_for, tokenize_texts,
                          tokenizer_ref, write_index)
from .suffix_array import decode_pointers

log = logging.getLogger(__name__)

DEFAULT_WINDOW = 1000  # 000_ac66a963fabf3916.txt §B.1: 1,000-token inter-clause window

# Scan the neighbourhood of the anchors instead of enumerating a clause when
# anchors x (2W + len) < _SCAN_ADVANTAGE x frequency.
_SCAN_ADVANTAGE = 4
# With a limit, anchors are processed in growing chunks until the limit is reached.
_LIMIT_CHUNK = 64
_LIMIT_CHUNK_MAX = 1 << 16


# --------------------------------------------------------------------------- building


def build_from_token_ids(docs: Iterable[Sequence[int]], out_dir: str | os.PathLike, token_width: int = 2, *,
                         shard_tokens: int = DEFAULT_SHARD_TOKENS, cpus: int | None = None) -> "CorpusIndex":
    """Index documents given as token-id lists (no tokenizer; query with
    ``cooccurrence_ids``). Used by tests on synthetic vocabularies."""
    path = write_index(docs, out_dir, token_width, shard_tokens=shard_tokens, cpus=cpus,
                       meta={"tokenizer": None, "vocab_size": None, "eos_token_id": None,
                             "corpus": None, "text_field": None},
                       source="token-id documents")
    return CorpusIndex.load(path)


# --------------------------------------------------------------------------- the index


class CorpusIndex:
    """An infini-gram index folder plus the exact windowed co-occurrence count.

    ``build`` / ``load`` make one; ``cooccurrence(words, window)`` answers CorVer's
    c_i (000_ac66a963fabf3916.txt §3.2 Eq. 1, §B.1). Semantics are in the docstring of
    ``factlab.corpus.cooccurrence``, the engine's own behaviour in this module's.
    """

    def __init__(self, path: Path, meta: dict, engine, shards: list[Shard], tokenizer=None):
        self.path = path
        self.meta = meta
        self.engine = engine
        self._shards = shards
        self._tokenizer = tokenizer
        self._clauses: dict[str, Clause] = {}

    # ------------------------------------------------------------------ build / load

    @classmethod
    def build(cls, corpus_jsonl: str | os.PathLike, tokenizer: str, out_dir: str | os.PathLike, *,
              text_field: str = "text", shard_tokens: int = DEFAULT_SHARD_TOKENS, cpus: int | None = None,
              progress: bool = True) -> "CorpusIndex":
        """Tokenize ``corpus_jsonl`` (one JSON object per line, text in ``text_field``)
        with the HF tokenizer ``tokenizer`` (name, local path, or the embedded
        ``smollm2-135m-instruct``) and write an infini-gram index to ``out_dir``.

        An existing index in ``out_dir`` is replaced once the new one is complete;
        a non-empty folder that is not an index is left alone (FileExistsError).
        ``cpus``: suffix-array jobs (default: all cores; small shards always use one).
        """
        path = Path(corpus_jsonl)
        if not path.is_file():
            raise FileNotFoundError(f"corpus file not found: {path}")
        tok = load_tokenizer(tokenizer)
        vocab_size = len(tok)
        width = token_width_for(vocab_size)
        token_docs = tokenize_texts(read_jsonl_texts(path, text_field, progress), tok)
        out = write_index(token_docs, out_dir, width, shard_tokens=shard_tokens, cpus=cpus,
                          meta={"tokenizer": tokenizer_ref(tokenizer), "vocab_size": vocab_size,
                                "eos_token_id": tok.eos_token_id, "corpus": str(path.absolute()),
                                "text_field": text_field},
                          source=str(path))
        index = cls.load(out)
        index._tokenizer = tok
        return index

    @classmethod
    def load(cls, out_dir: str | os.PathLike, *, verify: bool | None = None) -> "CorpusIndex":
        """Open an index folder written by ``build`` (files are memory-mapped) once its files
        match their manifest (``integrity.verify_files``: sizes always, checksums on the first
        load or with ``verify=True`` / ``FACTLAB_VERIFY=1``); ``IntegrityError`` otherwise."""
        from infini_gram.engine import InfiniGramEngine

        path = Path(out_dir).absolute()
        meta_path = path / META_FILE
        if not path.is_dir():
            raise FileNotFoundError(f"no corpus index at {path}: {BUILD_HINT}")
        if not meta_path.is_file():
            raise FileNotFoundError(f"{path} holds no {META_FILE}, so it is not a factlab corpus index: {BUILD_HINT}")
        verify_files(path, rebuild_command(path), full=verify)
        try:
            meta = json.loads(meta_path.read_text())
            if not isinstance(meta, dict):
                raise ValueError(f"a JSON object is expected, got {type(meta).__name__}")
            if meta.get("format") != FORMAT or meta.get("version") != FORMAT_VERSION:
                raise ValueError(f"unsupported index format {meta.get('format')!r} v{meta.get('version')}")
            width = int(meta["token_width"])
            dtype = dtype_for(width)
            if meta["token_dtype"] != ("u16" if width == 2 else "u32"):
                raise ValueError(f"token_dtype {meta['token_dtype']!r} is not the one of token_width {width}")
            # the engine orders shards by the string order of their file paths
            ids = sorted((int(s["id"]) for s in meta["shards"]), key=lambda i: f"tokenized.{i}")
            if not ids or len(set(ids)) < len(ids) or min(ids) < 0:
                raise ValueError(f"shards {[s['id'] for s in meta['shards']]}: not one entry per shard")
            for s in meta["shards"]:  # the width and counts must be the files' (a u16 index read as u32 counted 0)
                if "n_tokens" in s and "n_docs" in s and (path / f"tokenized.{s['id']}").is_file():
                    want, got = (int(s["n_tokens"]) + int(s["n_docs"])) * width, (path / f"tokenized.{s['id']}").stat().st_size
                    if want != got:
                        raise ValueError(f"shard {s['id']}: {s['n_tokens']} tokens and {s['n_docs']} separators of "
                                         f"{width} bytes make {want:,} bytes, tokenized.{s['id']} has {got:,}")
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, RecursionError) as e:
            what = f"no {e}" if isinstance(e, KeyError) else f"{type(e).__name__}: {e}"
            raise IntegrityError(f"{meta_path}: unreadable index metadata ({what}); rebuild: "
                                 f"{rebuild_command(path)}") from None
        for i in ids:
            for name in (f"tokenized.{i}", f"table.{i}", f"offset.{i}"):
                if not (path / name).is_file():
                    raise FileNotFoundError(f"{path / name} is missing; the index is incomplete: {BUILD_HINT}")
        shards = []
        for i in ids:
            tokens = np.memmap(path / f"tokenized.{i}", dtype=dtype, mode="r")
            sa = np.memmap(path / f"table.{i}", dtype=np.uint8, mode="r")
            offsets = np.fromfile(path / f"offset.{i}", dtype="<u8")
            shards.append(Shard(tokens=tokens, sa=sa, ptr_size=sa.size // tokens.size,
                                 doc_starts=(offsets // width).astype(np.int64), n_tok=int(tokens.size)))
        vocab = meta.get("vocab_size") or separator_for(width)
        eos = meta.get("eos_token_id")
        eos = 0 if eos is None else int(eos)
        # Open the folder through /proc/self/fd: the 2.6.0 engine sorts a folder's files
        # into shards by finding "tokenized", "table", "offset", "metadata" or "metaoff"
        # anywhere in their full path, so /data/tables/wiki would abort the process.
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            engine = InfiniGramEngine(index_dir=f"/proc/self/fd/{fd}", eos_token_id=eos,
                                      vocab_size=min(vocab, separator_for(width)), version=4,
                                      token_dtype=meta["token_dtype"])
        finally:
            os.close(fd)
        if engine.engine.get_num_shards() != len(shards):
            raise RuntimeError(f"{path}: the engine found {engine.engine.get_num_shards()} shards, "
                               f"{META_FILE} lists {len(shards)}")
        return cls(path, meta, engine, shards)

    # ------------------------------------------------------------------ properties

    @property
    def n_docs(self) -> int:
        return int(self.meta["n_docs"])

    @property
    def n_tokens(self) -> int:
        """Document tokens, separators excluded."""
        return int(self.meta["n_tokens"])

    @property
    def tokenizer(self):
        """The HF tokenizer the index was built with (loaded on first use)."""
        if self._tokenizer is None:
            name = self.meta.get("tokenizer")
            if not name:
                raise ValueError(f"{self.path} was built from token ids without a tokenizer; "
                                 f"query it with cooccurrence_ids()")
            self._tokenizer = load_tokenizer(name)
        return self._tokenizer

    def __repr__(self) -> str:
        return (f"CorpusIndex({str(self.path)!r}, docs={self.n_docs}, tokens={self.n_tokens}, "
                f"shards={len(self._shards)}, tokenizer={self.meta.get('tokenizer')!r})")

    # ------------------------------------------------------------------ queries

    def clause(self, word: str) -> Clause:
        """The token sequences OR-ed for ``word`` (see ``cooccurrence.surface_forms``)."""
        if word not in self._clauses:
            self._clauses[word] = word_clause(self.tokenizer, word)
        return self._clauses[word]

    def cooccurrence(self, words: list[str], window: int = DEFAULT_WINDOW, *, limit: int | None = None) -> int:
        """CorVer's c_i: positions where all ``words`` occur within one window of
        ``window`` tokens inside one document (exact definition in the docstring of
        ``factlab.corpus.cooccurrence``).

        One word gives its number of occurrences (surface variants OR-ed). A word that
        tokenizes to nothing (blank) constrains nothing and is dropped. Raises
        ValueError for an empty list, or when every word is blank.

        ``limit``: return ``min(count, limit)``, stopping as soon as ``limit`` matches
        are found. Still exact below the limit; CorVer's reward needs no count above its
        top threshold (Eq. 2: c >= 20), and two frequent words then cost milliseconds
        instead of seconds on a large corpus.
        """
        if isinstance(words, str):
            raise TypeError("words must be a list of strings, not one string")
        if not words:
            raise ValueError("cooccurrence() needs at least one word")
        clauses = [c for c in (self.clause(w) for w in words) if c]
        if not clauses:
            raise ValueError(f"none of the words {words!r} has any token")
        return self.cooccurrence_ids(clauses, window, limit=limit)

    def cooccurrence_ids(self, clauses: Sequence[Sequence[Sequence[int]]], window: int = DEFAULT_WINDOW, *,
                         limit: int | None = None, strategy: str = "auto") -> int:
        """``cooccurrence`` on token ids: ``clauses[i]`` lists the token sequences OR-ed
        for word i. ``strategy`` picks how non-anchor clauses are located: "auto"
        (cheapest), "full" (every occurrence from the suffix array) or "scan" (tokens
        near the anchors); all give the same count."""
        if isinstance(window, bool) or not isinstance(window, (int, np.integer)) or window < 1:
            raise ValueError(f"window must be a positive integer, got {window!r}")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, (int, np.integer)) or limit < 1):
            raise ValueError(f"limit must be a positive integer or None, got {limit!r}")
        if strategy not in ("auto", "full", "scan"):
            raise ValueError(f"strategy must be 'auto', 'full' or 'scan', got {strategy!r}")
        sep = separator_for(int(self.meta["token_width"]))
        norm: list[Clause] = []
        for clause in clauses:
            c = dedupe_clause(clause)
            if not c:
                raise ValueError("every clause needs at least one non-empty token sequence")
            c = [v for v in c if all(0 <= t < sep for t in v)]  # ids the index cannot hold never occur
            if not c:
                return 0
            if c not in norm:
                norm.append(c)
        if not norm:
            raise ValueError("no clauses")
        segments = [[self.engine.find(list(v))["segment_by_shard"] for v in c] for c in norm]
        freq = [sum(e - s for segs in per_variant for s, e in segs) for per_variant in segments]
        if min(freq) == 0:
            return 0
        anchor = min(range(len(norm)), key=lambda i: freq[i])
        window = int(window)
        chunk = None if limit is None else _LIMIT_CHUNK
        total = 0
        for si, shard in enumerate(self._shards):
            w = min(window, shard.n_tok)
            anchor_ranges = [segs[si] for segs in segments[anchor]]
            n_anchor = sum(e - s for s, e in anchor_ranges)
            if n_anchor == 0:
                continue
            # per other clause: [clause, rank ranges, all positions once read (else None: scan
            # near the anchors), how many tokens scanning may cost before reading them all]
            others = []
            for ci, clause in enumerate(norm):
                if ci == anchor:
                    continue
                ranges = [segs[si] for segs in segments[ci]]
                budget = _SCAN_ADVANTAGE * sum(e - s for s, e in ranges)
                others.append([clause, ranges, self._positions(shard, clause, ranges) if strategy == "full" else None,
                               budget])
            seen = 0
            for anchors in self._occurrence_chunks(shard, norm[anchor], anchor_ranges, chunk):
                seen += anchors.size
                # without a limit every anchor gets processed; with one, only those seen so far
                expected = n_anchor if limit is None else seen
                near = []
                for other in others:
                    clause, ranges, pos, budget = other
                    span = 2 * w + max(len(v) for v in clause)
                    if pos is None and strategy == "auto" and expected * span >= budget:
                        other[2] = pos = self._positions(shard, clause, ranges)
                    near.append(positions_near(shard, clause, anchors, w) if pos is None
                                else select_near(pos, anchors, w))
                total += count_windows(anchors, near, shard.doc_starts, w)
                if limit is not None and total >= limit:
                    return int(limit)
        return total

    def engine_count_cnf(self, clauses: Sequence[Sequence[Sequence[int]]], window: int = DEFAULT_WINDOW,
                         max_clause_freq: int | None = None) -> dict:
        """infini-gram's own ``count_cnf`` (``max_diff_tokens=window``), for comparison
        only: it is not the bounded-window count (module docstring)."""
        cnf = [[list(map(int, v)) for v in c] for c in clauses]
        kw = {} if max_clause_freq is None else {"max_clause_freq": int(max_clause_freq)}
        return self.engine.count_cnf(cnf, max_diff_tokens=int(window), **kw)

    # ------------------------------------------------------------------ internals

    def _occurrence_chunks(self, shard: Shard, clause: Clause, ranges: list[tuple[int, int]],
                           chunk: int | None) -> Iterator[np.ndarray]:
        """The clause's distinct positions in this shard, as sorted arrays (all at once
        when ``chunk`` is None, else ``chunk`` positions first and twice as many each
        time after), in suffix-array order. A position matched by several variants is
        kept under the first of them only."""
        width = int(self.meta["token_width"])
        ps = shard.ptr_size
        step = chunk
        for vi, (start, end) in enumerate(ranges):
            lo = start
            while lo < end:
                hi = end if step is None else min(end, lo + step)
                pos = (decode_pointers(shard.sa[lo * ps:hi * ps], ps) // width).astype(np.int64)
                if vi:
                    pos = pos[~matches_any(shard.tokens, pos, clause[:vi])]
                if pos.size:
                    yield np.sort(pos)
                lo = hi
                if step is not None:
                    step = min(2 * step, _LIMIT_CHUNK_MAX)

    def _positions(self, shard: Shard, clause: Clause, ranges: list[tuple[int, int]]) -> np.ndarray:
        """All distinct positions of the clause in this shard, sorted."""
        parts = list(self._occurrence_chunks(shard, clause, ranges, None))
        return np.sort(np.concatenate(parts)) if parts else np.empty(0, dtype=np.int64)


# ---------------------------------------------------------------- params and the cached default


class IndexSection(Section):
    """The infini-gram co-occurrence index (000 §3.2, §B.1) a run counts in."""

    corpus: str | None = None  # JSONL with a text field; None = the mini-world corpus
    text_field: str = "text"
    dir: str | None = None  # an index built by `factlab index build`; None = built into the cache
    tokenizer: str | None = None  # None = the policy's tokenizer
    shard_tokens: int = Field(500_000_000, ge=1)


def default_index_dir(corpus: str | Path, tokenizer: str) -> Path:
    """``<cache>/indexes/<corpus stem>-<tokenizer>-<hash of corpus path, size, mtime>``."""
    p = Path(corpus).absolute()
    st = p.stat()
    key = hashlib.sha1(f"{p}|{st.st_size}|{st.st_mtime_ns}|{tokenizer}".encode()).hexdigest()[:10]
    slug = "".join(c if c.isalnum() or c in "-_." else "_" for c in Path(tokenizer).name)
    return cache_dir() / "indexes" / f"{p.stem}-{slug}-{key}"


def ensure_index(cfg: IndexSection, default_corpus: str | Path | None, default_tokenizer: str,
                 progress: bool = True) -> CorpusIndex:
    """Load the configured index, building it first when absent (§B.1).

    ``dir`` set and present: loaded as is. Otherwise the index of ``corpus`` (default:
    ``default_corpus``, the mini-world's) with ``tokenizer`` (default: the policy's) is built
    under the cache, keyed by corpus file and tokenizer, and reused next time."""
    if cfg.dir and Path(cfg.dir).exists():
        return CorpusIndex.load(cfg.dir)
    corpus = cfg.corpus or default_corpus
    if corpus is None:
        raise ValueError("index.corpus is not set and there is no default corpus")
    if not Path(corpus).is_file():
        raise FileNotFoundError(f"index.corpus: {corpus} does not exist")
    tokenizer = cfg.tokenizer or default_tokenizer
    out = Path(cfg.dir) if cfg.dir else default_index_dir(corpus, tokenizer)
    with build_lock(out):  # two processes sharing the cache build it once
        try:
            return CorpusIndex.load(out)
        except FileNotFoundError:
            pass
        except MissingManifest:  # a cached index built before file manifests: rebuilt, not trusted
            log.warning("the cached index %s has no file manifest (built by an older factlab); rebuilding it", out)
        log.info("building the co-occurrence index of %s into %s", corpus, out)
        return CorpusIndex.build(corpus, tokenizer, out, text_field=cfg.text_field, shard_tokens=cfg.shard_tokens,
                                 progress=progress)

"""CorVer's windowed co-occurrence count: its definition, a brute-force reference, and the
window arithmetic ``CorpusIndex`` counts with.

CorVer scores a sentence by the number of times the content words of its subject and
object co-occur in Wikipedia, "over Wikipedia token positions within a bounded
1,000-token window" (000_ac66a963fabf3916.txt §3.2, Eq. 1; §B.1). This module holds what
that count means for one query: each word's surface variants and clause
(``surface_forms``, ``word_clause``), the definition below and its literal transcription
``reference_cooccurrence``, and the numpy helpers that find occurrences near the anchors
and count the windows in one memory-mapped shard (``Shard``). ``CorpusIndex.cooccurrence``
(``factlab.corpus.infinigram``) answers it from the suffix array; that module's docstring
says how, and why the engine's own ``count_cnf`` is not used.

Co-occurrence count (what ``CorpusIndex.cooccurrence`` returns)
---------------------------------------------------------------
Each word becomes a clause: the OR of its surface variants' token sequences (the word
as given, first letter upper-cased, lower-cased, and capitalised, each with and without
a leading space; duplicates dropped), because ``Paris`` at a document
start and `` Paris`` mid-sentence are different token ids. A clause *occurs at
position p* when one of its variants' token sequences starts at token p (a token-level
match, as in infini-gram: `` Paris`` also matches the start of `` Parisian`` if the
tokenizer splits that word after `` Paris``); a position matched by two variants
counts once. A clause's *frequency* is the sum of its
variants' n-gram counts. The *anchor* is the clause with the lowest frequency (the
first such clause in query order on a tie).

    c(w_1 .. w_k; W) = the number of anchor positions a such that every other clause
    occurs at some position in the same document as a, with all these start positions
    and a lying within W tokens of each other (max - min <= W).

Equivalently: some window [s, s + W] of token positions containing a, inside one
document, holds a start of every clause. Windows never cross the document separator,
so this is position-level co-occurrence in the paper's sense. For one word the count
is its number of distinct occurrence positions. ``reference_cooccurrence`` transcribes
this definition literally (a brute-force scan of the documents); the property tests
hold the index to it on generated corpora.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np

from .index_build import encode, separator_for

Clause = list[tuple[int, ...]]


def surface_forms(word: str) -> list[str]:
    """The strings OR-ed for one word: as given, first letter upper-cased, lower-cased,
    and lower-cased then capitalised ("PARIS" -> "Paris"), each with and without a leading
    space (order kept, duplicates dropped). A blank word has none."""
    w = word.strip()
    if not w:
        return []
    cores = dict.fromkeys([w, w[:1].upper() + w[1:], w.lower(), w.lower().capitalize()])
    return list(dict.fromkeys(f for c in cores for f in (c, " " + c)))


def word_clause(tokenizer, word: str) -> Clause:
    """One word as a disjunctive clause: the distinct, non-empty token sequences of its
    surface forms (``surface_forms``)."""
    return dedupe_clause(encode(tokenizer, surface_forms(word)))


def dedupe_clause(variants: Iterable[Sequence[int]]) -> Clause:
    return list(dict.fromkeys(tuple(int(t) for t in v) for v in variants if len(v) > 0))


def reference_cooccurrence(docs: Sequence[Sequence[int]], clauses: Sequence[Sequence[Sequence[int]]],
                           window: int) -> int:
    """Brute-force ``cooccurrence`` over token-id documents: a literal transcription of
    the definition in the module docstring, for tests. ``clauses[i]`` lists the token
    sequences OR-ed for word i. Slow (documents x clauses x window); small inputs only."""
    clauses = [dedupe_clause(c) for c in clauses]
    if not clauses:
        raise ValueError("no clauses")
    occurrences: list[set[tuple[int, int]]] = []
    frequencies: list[int] = []
    for clause in clauses:
        found: set[tuple[int, int]] = set()
        freq = 0
        for variant in clause:
            n = len(variant)
            for d, doc in enumerate(docs):
                doc = list(doc)
                for i in range(len(doc) - n + 1):
                    if tuple(doc[i:i + n]) == variant:
                        found.add((d, i))
                        freq += 1
        occurrences.append(found)
        frequencies.append(freq)
    if min(frequencies) == 0:
        return 0
    anchor = min(range(len(clauses)), key=lambda c: frequencies[c])
    others = [occurrences[c] for c in range(len(clauses)) if c != anchor]
    count = 0
    for d, a in occurrences[anchor]:
        for s in range(a - window, a + 1):  # windows [s, s + window] that contain a
            if all(any(d2 == d and s <= p <= s + window for d2, p in occ) for occ in others):
                count += 1
                break
    return count


# --------------------------------------------------------------------------- counting


@dataclass
class Shard:
    tokens: np.ndarray      # memmap of token ids, separators included
    sa: np.ndarray          # memmap of the suffix array bytes
    ptr_size: int
    doc_starts: np.ndarray  # token index of each document's separator
    n_tok: int


def _merge_ranges(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Merge half-open ranges [lo, hi) sorted by lo."""
    reach = np.maximum.accumulate(hi)
    new = np.ones(lo.size, dtype=bool)
    new[1:] = lo[1:] > reach[:-1]
    starts = lo[new]
    ends = reach[np.r_[new[1:], True]]
    return starts, ends


def _find_variant(tokens: np.ndarray, variant: tuple[int, ...]) -> np.ndarray:
    """Start indices of ``variant`` in ``tokens``."""
    n = len(variant)
    if tokens.size < n:
        return np.empty(0, dtype=np.int64)
    m = tokens.size - n + 1
    mask = tokens[:m] == variant[0]
    for j in range(1, n):
        mask &= tokens[j:j + m] == variant[j]
    return np.flatnonzero(mask)


def count_windows(anchors: np.ndarray, others: list[np.ndarray], doc_starts: np.ndarray, window: int) -> int:
    """Anchors (token positions) for which one window [s, s + window] inside the anchor's
    document contains the anchor and a position of every array in ``others``."""
    if anchors.size == 0:
        return 0
    if not others:
        return int(anchors.size)
    gap = window + 1

    def gapped(pos: np.ndarray) -> np.ndarray:
        return pos + (np.searchsorted(doc_starts, pos, side="right") - 1) * gap

    xs, ds = [], []
    for pos in others:
        if pos.size == 0:
            return 0
        g = gapped(pos)
        # valid window starts for this clause: union of [g - window, g], merged
        new = np.ones(g.size, dtype=bool)
        new[1:] = g[1:] - window > g[:-1] + 1
        xs += [g[new] - window, g[np.r_[new[1:], True]] + 1]
        ds += [np.ones(int(new.sum()), dtype=np.int64), -np.ones(int(new.sum()), dtype=np.int64)]
    x = np.concatenate(xs)
    d = np.concatenate(ds)
    order = np.argsort(x, kind="stable")
    x, cover = x[order], np.cumsum(d[order])
    last = np.r_[x[1:] != x[:-1], True]
    x, cover = x[last], cover[last]
    full = cover[:-1] == len(others)  # coverage on [x[j], x[j+1])
    f_start, f_end = x[:-1][full], x[1:][full] - 1
    a = gapped(anchors)
    idx = np.searchsorted(f_end, a - window, side="left")
    ok = idx < f_end.size
    ok[ok] = f_start[idx[ok]] <= a[ok]
    return int(ok.sum())


def matches_any(tokens: np.ndarray, pos: np.ndarray, variants: Sequence[tuple[int, ...]]) -> np.ndarray:
    """Whether one of ``variants`` starts at each position."""
    n = tokens.size
    hit = np.zeros(pos.size, dtype=bool)
    for v in variants:
        ok = pos + len(v) <= n
        for j, t in enumerate(v):
            ok &= tokens[np.minimum(pos + j, n - 1)] == t
        hit |= ok
    return hit


def select_near(positions: np.ndarray, anchors: np.ndarray, window: int) -> np.ndarray:
    """The sorted ``positions`` within ``window`` tokens of some (sorted) anchor."""
    lo = np.searchsorted(positions, anchors - window, side="left")
    hi = np.searchsorted(positions, anchors + window, side="right")
    keep = hi > lo
    if not keep.any():
        return positions[:0]
    starts, ends = _merge_ranges(lo[keep], hi[keep])
    lengths = ends - starts
    idx = np.repeat(starts - np.cumsum(np.r_[0, lengths[:-1]]), lengths) + np.arange(int(lengths.sum()))
    return positions[idx]


def positions_near(shard: Shard, clause: Clause, anchors: np.ndarray, window: int) -> np.ndarray:
    """Sorted distinct positions of ``clause`` that start within ``window`` tokens of
    an anchor, found by scanning the tokens around the anchors (a few further ones may
    be included; every one returned is a real occurrence)."""
    longest = max(len(v) for v in clause)
    lo = np.maximum(anchors - window, 0)
    hi = np.minimum(anchors + window + longest, shard.n_tok)
    starts, ends = _merge_ranges(lo, hi)
    sep = np.array([separator_for(shard.tokens.dtype.itemsize)], dtype=shard.tokens.dtype)
    pieces, offsets, at = [], np.empty(starts.size, dtype=np.int64), 0
    for j, (s, e) in enumerate(zip(starts.tolist(), ends.tolist())):
        offsets[j] = at
        pieces += [np.asarray(shard.tokens[s:e]), sep]  # separator: no match spans two pieces
        at += e - s + 1
    text = np.concatenate(pieces)
    idx = np.sort(np.concatenate([_find_variant(text, v) for v in clause]))
    if idx.size:
        idx = idx[np.r_[True, idx[1:] != idx[:-1]]]
    piece = np.searchsorted(offsets, idx, side="right") - 1
    return starts[piece] + (idx - offsets[piece])


"""The phrase matcher under every sentence label (``data.kb._find``, used by the mini-world's
truth, the ``verdict: kb`` rewards and the evidence's truth metrics): the previous search (each
of a vocabulary's ~500 phrases looked for in the sentence, longest first) against factlab's (each
run of the sentence's words looked up in the vocabulary), labelling the same sentences.

Both run here, in one process, on the truth oracle's sentences (every constructed sentence of
``eval.truth.constructed_sentences`` and the hand-labelled ones of the embedded model), each
labelled once per path (``data.kb.label_sentence``). Prints each path's seconds, their ratio,
and whether every label agrees (it must: the matches are the same, ``tests/data/test_kb_find.py``).

Run: ``python bench/bench_kb_find.py [REPEATS]`` (about a minute on one idle core).
"""

from __future__ import annotations

import sys
import time

from factlab.data import kb as K
from factlab.eval import truth as T


def reference_find(haystack: str, phrases: dict[str, str]) -> list[tuple[int, int, str]]:
    """The search before 2026-11-28 (tests/data/test_kb_find.py compares ``_find`` with it)."""
    padded = f" {haystack} "
    taken = bytearray(len(padded))
    out = []
    for phrase in sorted(phrases, key=len, reverse=True):
        if not phrase:
            continue
        needle = f" {phrase} "
        start = padded.find(needle)
        while start >= 0:
            a, b = start + 1, start + 1 + len(phrase)
            if not any(taken[a:b]):
                taken[a:b] = b"\x01" * (b - a)
                out.append((a - 1, b - 1, phrases[phrase]))
            start = padded.find(needle, start + 1)
    return sorted(out)


def label_all(rows, kb, repeats: int) -> tuple[float, list[str]]:
    t0 = time.perf_counter()
    for _ in range(repeats):
        labels = [K.label_sentence(r["sentence"], kb, context=r.get("prompt"))["label"] for r in rows]
    return time.perf_counter() - t0, labels


def main(repeats: int) -> None:
    kb = K.knowledge_base()
    rows = T.constructed_sentences(seed=3, per_strategy=30) + T.read_labelled()
    print(f"{len(rows)} sentences x {repeats}; vocabularies: names {len(kb.names)}, capitals {len(kb.capitals)}, "
          f"regions {len(kb.regions)}, currencies {len(kb.currencies)}, languages {len(kb.languages)}")
    fast = K._find
    K._find = reference_find
    try:
        before, labels_before = label_all(rows, kb, repeats)
    finally:
        K._find = fast
    after, labels_after = label_all(rows, kb, repeats)
    print(f"previous search: {before:.2f} s; factlab: {after:.2f} s; ratio {after / before:.3f}x "
          f"({before / after:.1f}x faster); labels identical: {labels_before == labels_after}")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 3)

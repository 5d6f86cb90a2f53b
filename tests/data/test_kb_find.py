"""``data.kb._find``, the phrase matcher every sentence label goes through, against the
phrase-by-phrase search it replaced (``bench/bench_kb_find.py`` keeps it as its reference
path): the same matches in the same order, on random texts built to collide (nested,
overlapping and equal-length phrases) and on the mini-world's own names over real sentences."""

from __future__ import annotations

import importlib.util
import random
from pathlib import Path

from factlab.data import kb as K
from factlab.eval import truth


def _bench_reference():
    """The previous matcher, kept once: ``bench/bench_kb_find.py``'s reference path."""
    path = Path(__file__).resolve().parents[2] / "bench" / "bench_kb_find.py"
    spec = importlib.util.spec_from_file_location("bench_kb_find", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.reference_find


reference_find = _bench_reference()


def test_find_matches_the_reference_on_colliding_random_texts():
    rng = random.Random(0)
    words = ["a", "b", "ab", "ba", "c", "the", "new", "guinea", "papua", ""]
    differing = 0
    for trial in range(3000):
        phrases = {}
        for _ in range(rng.randint(0, 12)):  # multiword, repeated words, equal lengths, leading / double spaces
            phrase = " ".join(rng.choice(words) for _ in range(rng.randint(1, 4)))
            phrases[phrase] = f"v{len(phrases)}"
        text = " ".join(rng.choice(words) for _ in range(rng.randint(0, 14)))
        if rng.random() < 0.2:
            text = text.strip()
        got, want = K._find(text, phrases), reference_find(text, phrases)
        assert got == want, (text, phrases)
        differing += len(want) > 1
    assert differing > 500  # the texts really held several, colliding matches


def test_equal_length_overlapping_phrases_keep_the_dicts_order():
    text = "x ab c y"
    assert K._find(text, {"ab c": "first", "x ab": "second"}) == [(2, 6, "first")]
    assert K._find(text, {"x ab": "second", "ab c": "first"}) == [(0, 4, "second")]


def test_find_on_the_mini_worlds_names_over_real_sentences():
    kb = K.knowledge_base()
    sentences = [r["sentence"] for r in truth.read_labelled()]
    assert len(sentences) >= 100
    matched = 0
    for s in sentences:
        norm = K._norm(s)
        for vocabulary in (kb.names, kb.capitals, kb.regions, kb.currencies, kb.languages, kb.demonyms):
            want = reference_find(norm, vocabulary)
            assert K._find(norm, vocabulary) == want, (s, want)
            matched += bool(want)
    assert matched >= 100


def test_norm_drops_accents_and_punctuation_on_both_paths():
    assert K._norm("Côte d'Ivoire") == "cote d ivoire"  # not ASCII: NFKD, the accents dropped
    assert K._norm("  São-Tomé  and PRÍNCIPE. ") == "sao tome and principe"
    assert K._norm("Guinea-Bissau's  capital") == "guinea bissau s capital"  # ASCII: no normalization needed
    assert K._norm("") == "" and K._norm(None) == ""

"""Triplet parser and extractors (CorVer §3.2, §B.1)."""

import pytest
from hypothesis import given, settings, strategies as st

from factlab.models import TINY_MODEL
from factlab.rewards.triplets import (QUCO_EXTRACTOR_ID, HeuristicExtractor, LLMTripletExtractor, Triplet,
                                      ExtractorSection, extractor_from, parse_extractor_output, parse_triplets)


@pytest.mark.parametrize("raw, expected", [
    ('["Mario Camerini", "directed", "Il Seduttore"]', [("Mario Camerini", "directed", "Il Seduttore")]),
    ("['Paris', 'capital of', 'France']", [("Paris", "capital of", "France")]),
    ("[]", []),
    ("no list at all", []),
    ('["Il Seduttore", "director"]', [("Il Seduttore", "director")]),
    ('[["A B", "r", "C"], ["D", "s", "E F"]]', [("A B", "r", "C"), ("D", "s", "E F")]),
    ('[[["A", "r", "B"]]]', [("A", "r", "B")]),  # over-nested
    ("\u201cEllington\u201d", []),  # smart quotes, no list
    ("[\u201cDuke Ellington\u201d, \u201cborn in\u201d, \u201cWashington, D.C.\u201d]",
     [("Duke Ellington", "born in", "Washington, D.C.")]),
    ("[Duke Ellington, born in, Washington, D.C.]", [("Duke Ellington", "born in", "Washington, D.C.")]),
    ("[Acme, Inc., founded in, 1,000 BC]", [("Acme, Inc.", "founded in", "1,000 BC")]),
    ('["Ella Fitzgerald\'s mother", "was", "Tempie"]', [("Ella Fitzgerald's mother", "was", "Tempie")]),
    ("['Ella Fitzgerald's mother', 'was', 'Tempie']", [("Ella Fitzgerald's mother", "was", "Tempie")]),
    ('["The \\"Big\\" Apple", "is", "New York"]', [('The "Big" Apple', "is", "New York")]),
    ('Triples: ["Kabul", "capital of", "Afghanistan"] and more text', [("Kabul", "capital of", "Afghanistan")]),
    ('["Kabul", "capital of", "Afgh', [("Kabul", "capital of", "Afgh")]),  # truncated output
    ('[["Kabul", "capital of"], "stray", 3]', [("Kabul", "capital of")]),
    ('[["a", "b", "c", "d"]]', [("a", "b", "c, d")]),
])
def test_parse_triplets(raw, expected):
    assert [t.as_tuple() for t in parse_triplets(raw)] == expected


def test_triplet_validity():
    assert Triplet("Paris", "capital of", "France").is_valid
    assert not Triplet("It", "is", "France").is_valid
    assert not Triplet("Paris", "is", " ").is_valid
    assert not Triplet("Paris", "capital").is_valid  # a pair is not ternary


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=80))
def test_parser_never_raises(raw):
    out = parse_triplets(raw)
    assert all(isinstance(t, Triplet) for t in out)
    assert isinstance(parse_extractor_output(raw), list)


@settings(max_examples=100, deadline=None)
@given(st.lists(st.lists(st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\u201c\u201d\u201e\u2033\u2018\u2019\u201a\u2032\uff3b\uff3d\uff0c"), min_size=1, max_size=12)
                         .filter(lambda s: s.strip() == s and s), min_size=3, max_size=3), min_size=1, max_size=3))
def test_parser_roundtrips_json(triples):
    """JSON output (any text but smart quotes, which the parser reads as quotes) parses back exactly."""
    import json

    raw = json.dumps(triples, ensure_ascii=False)
    assert [list(t.as_tuple()) for t in parse_triplets(raw)] == triples


@pytest.mark.parametrize("sentence, expected", [
    ("The capital of Afghanistan is Kabul.", ("Afghanistan", "is", "Kabul")),
    ("Mario Camerini directed Il Seduttore.", ("Mario Camerini", "directed", "Il Seduttore")),
    ("The Philadelphia Flyers won the Stanley Cup in 1975.", ("Philadelphia Flyers", "won the Stanley Cup in", "1975")),
    ("It is a country in Asia.", None),
    ("Let me think step by step.", None),
    ("", None),
])
def test_heuristic_extractor(sentence, expected):
    got = HeuristicExtractor().extract([sentence])[0]
    assert (got[0].as_tuple() if got else None) == expected


def test_the_extractor_a_params_section_names():
    assert isinstance(extractor_from(ExtractorSection()), HeuristicExtractor)
    ex = extractor_from(ExtractorSection(name="QuCo-extractor-0.5B", batch_size=32))
    assert isinstance(ex, LLMTripletExtractor) and ex.name == QUCO_EXTRACTOR_ID and ex.batch_size == 32


def test_llm_extractor_runs_a_real_model():
    """The LLM path with a real forward pass (the tiny model's), parsed leniently."""
    ex = LLMTripletExtractor(TINY_MODEL, batch_size=4, max_new_tokens=24)
    sents = ["Mario Camerini directed Il Seduttore.", "Kabul is the capital of Afghanistan."]
    out = ex.extract(sents)
    raws = ex.raw_outputs(sents)  # greedy: the same text again
    assert all(r.strip() for r in raws)  # the model really generated something
    assert out == [parse_triplets(r) for r in raws]  # what it said, parsed; not a constant
    assert ex.counters["calls"] == 2 and ex.counters["empty"] == sum(not t for t in out)
    assert ex.model_and_tokenizer is ex.model_and_tokenizer  # loaded once per process


def test_llm_extractor_parses_what_the_model_answers(monkeypatch):
    """The QuCo answer format (a JSON-ish list of triplets) becomes triplets, counted per outcome."""
    ex = LLMTripletExtractor("smollm2-135m-instruct")
    answers = ['[["Mario Camerini", "directed", "Il Seduttore"]]', "I cannot help with that.", "[]"]
    monkeypatch.setattr(ex, "raw_outputs", lambda sentences: answers[:len(sentences)])
    out = ex.extract(["a", "b", "c"])
    assert [[t.as_tuple() for t in ts] for ts in out] == [[("Mario Camerini", "directed", "Il Seduttore")], [], []]
    assert (ex.counters["calls"], ex.counters["parse_failures"], ex.counters["empty"]) == (3, 1, 2)

"""Claim/source pairs for SEVA: benchmark loaders on local fixtures and mini-world perturbations."""

from __future__ import annotations

import hashlib
import json
import sys
import types
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from factlab.data import miniworld as mw
from factlab.data import pairs as P
from factlab.data.pairs import ClaimPair
from factlab.labels import ERROR_TYPES, STRATEGIES, STRATEGY_ERROR_TYPES, normalize_label
from factlab.synth.perturbations import miniworld_pairs

FIXTURES = Path(__file__).parent.parent / "fixtures" / "pairs"
A, NA = "attributable", "not_attributable"


def _fixture(name: str) -> Path:
    return FIXTURES / f"{name}.jsonl"


def _rows(name: str) -> list[dict]:
    return [json.loads(line) for line in _fixture(name).read_text(encoding="utf-8").splitlines() if line.strip()]


def _n(text: str) -> str:
    return mw.normalize(text)


def _mentioned(haystack: str, needle: str) -> bool:
    return mw.mentions(_n(haystack), needle)


# --------------------------------------------------------------------------- registry / loaders

# Expected gold label of each fixture row, from the dataset's own label field.
EXPECTED = {
    "clearfacts": lambda r: A if r["label"] == "S" else NA,
    "fever": lambda r: A if r["label"] == 0 else NA,  # 0 SUPPORTS, 1 NOT ENOUGH INFO, 2 REFUTES
    "halueval": lambda r: A if r["hallucination"] == "no" else NA,
    "anli": lambda r: A if r["label"] == 0 else NA,  # 0 entailment, 1 neutral, 2 contradiction
    # TruthfulQA has no label field: the pair's label is the parity of the question's MD5.
    "truthfulqa": lambda r: A if int(hashlib.md5(r["question"].encode()).hexdigest(), 16) % 2 == 0 else NA,
}


def test_registry():
    assert set(P.PAIR_DATASETS) == {"clearfacts", "fever", "halueval", "truthfulqa", "anli"}
    tqa = P.PAIR_DATASETS["truthfulqa"]
    assert (tqa.hf_id, tqa.hf_config, tqa.split) == ("truthfulqa/truthful_qa", "generation", "validation")
    spec = P.PAIR_DATASETS["halueval"]
    assert (spec.hf_id, spec.hf_config, spec.split) == ("pminervini/HaluEval", "qa_samples", "data")
    assert P.PAIR_DATASETS["anli"].hf_id == "facebook/anli"
    assert set(STRATEGY_ERROR_TYPES) == set(STRATEGIES) and len(STRATEGIES) == 6
    assert set(STRATEGY_ERROR_TYPES.values()) <= set(ERROR_TYPES)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_loader_maps_labels(name):
    rows = _rows(name)
    pairs = P.load_pairs(name, path=_fixture(name))
    assert len(pairs) == len(rows) >= 6
    assert [p.label for p in pairs] == [EXPECTED[name](r) for r in rows]
    assert len({p.id for p in pairs}) == len(pairs)
    assert all(p.id.startswith(f"{name}/") for p in pairs)
    assert {p.dataset for p in pairs} == {name}
    assert all(p.claim and p.source and p.error_type is None and p.strategy is None for p in pairs)
    counts = P.label_counts(pairs)
    assert counts[A] > 0 and counts[NA] > 0 and counts[A] != counts[NA]  # fixtures are imbalanced


def test_loader_fields():
    cf = P.load_pairs("clearfacts", path=_fixture("clearfacts"))
    row = _rows("clearfacts")[1]
    assert cf[1].claim == row["statement"]
    assert cf[1].source == "\n\n".join(row["reference_documents"])
    assert cf[1].meta["original_label"] == "NS" and cf[1].meta["category"] == "Hover"

    fever = P.load_pairs("fever", path=_fixture("fever"))
    by_id = {p.id: p for p in fever}
    assert by_id["fever/75397"].label == A and by_id["fever/75397"].meta["original_label"] == "SUPPORTS"
    assert by_id["fever/214861"].label == NA and by_id["fever/214861"].meta["original_label"] == "REFUTES"
    assert by_id["fever/156709"].label == NA and by_id["fever/156709"].meta["original_label"] == "NOT ENOUGH INFO"
    assert "TD Garden" in by_id["fever/214861"].source

    halu = P.load_pairs("halueval", path=_fixture("halueval"))
    r0 = _rows("halueval")[0]
    assert halu[0].source == r0["knowledge"]
    assert halu[0].claim == f"{r0['question']} Answer: {r0['answer']}"
    assert halu[0].meta["answer"] == r0["answer"] and halu[0].id == "halueval/0"

    anli = P.load_pairs("anli", path=_fixture("anli"))
    for p, r in zip(anli, _rows("anli")):
        assert p.claim == r["hypothesis"] and p.source == r["premise"]
        assert p.id == f"anli/{r['uid']}"
        # Table 13 maps the NLI names the same way.
        assert p.label == normalize_label(["entailment", "neutral", "contradiction"][r["label"]])


def test_truthfulqa_pairs_ground_the_answer_in_the_reference_answers():
    rows = {r["question"]: r for r in _rows("truthfulqa")}
    pairs = P.load_pairs("truthfulqa", path=_fixture("truthfulqa"))
    for p in pairs:
        r = rows[p.meta["question"]]
        assert p.claim == f"{r['question']} Answer: {p.meta['answer']}"
        assert p.source.startswith(f"Question: {r['question']}\nCorrect answers: ")
        assert "I have no comment" not in p.source
        assert r["best_answer"] in p.source or r["best_answer"] == "I have no comment"
        if p.label == A:
            assert p.meta["answer"] in p.source
        else:  # a misconception the source does not list
            assert p.meta["answer"] == r["incorrect_answers"][0] and p.meta["answer"] not in p.source
        assert p.meta["source"] == r["source"] and p.meta["category"] == r["category"]
    # "I have no comment" as best answer: the other correct answers are the reference.
    (pres,) = [p for p in pairs if "president" in p.claim]
    assert pres.source.endswith("Correct answers: " + "; ".join(rows[pres.meta["question"]]["correct_answers"][1:]))
    # the label depends on the question only, not on the row's position
    shuffled = P.load_pairs("truthfulqa", path=_fixture("truthfulqa"), limit=4, seed=3)
    assert all(p.label == P.truthfulqa_label(p.meta["question"]) for p in shuffled)
    to_pair = P.PAIR_DATASETS["truthfulqa"].to_pair
    base = _rows("truthfulqa")[0]
    with pytest.raises(ValueError, match="I have no comment"):
        to_pair(dict(base, best_answer="I have no comment", correct_answers=["I have no comment"]), 0)
    na_question = next(q for q in rows if P.truthfulqa_label(q) == NA)
    with pytest.raises(ValueError, match="incorrect_answers"):
        to_pair(dict(rows[na_question], incorrect_answers=[]), 0)


def test_string_labels_and_other_layouts():
    fever = P.PAIR_DATASETS["fever"].to_pair
    p = fever({"claim": "c", "evidence": [["Page", 3, "Evidence text."]], "label": "SUPPORTS"}, 0)
    assert p.label == A and p.source == "Evidence text." and p.id == "fever/0"
    assert fever({"claim": "c", "evidence": "e", "label": "NOT ENOUGH INFO"}, 1).label == NA
    assert fever({"claim": "c", "evidence": "e", "label": "refutes"}, 2).label == NA
    anli = P.PAIR_DATASETS["anli"].to_pair
    assert anli({"premise": "p", "hypothesis": "h", "label": "entailment"}, 0).label == A
    assert anli({"premise": "p", "hypothesis": "h", "label": "neutral"}, 0).label == NA
    halu = P.PAIR_DATASETS["halueval"].to_pair
    assert halu({"knowledge": "k", "question": "q?", "answer": "a", "hallucination": "Yes"}, 0).label == NA


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_limit_stratified_keeps_balance(name):
    full = P.load_pairs(name, path=_fixture(name))
    order = {p.id: i for i, p in enumerate(full)}
    for seed in range(4):
        sample = P.load_pairs(name, path=_fixture(name), limit=4, seed=seed)
        assert len(sample) == 4
        assert P.label_counts(sample) == {A: 2, NA: 2}
        idx = [order[p.id] for p in sample]
        assert idx == sorted(idx)  # original order kept
        again = P.load_pairs(name, path=_fixture(name), limit=4, seed=seed)
        assert [p.id for p in again] == [p.id for p in sample]
    odd = P.load_pairs(name, path=_fixture(name), limit=5, seed=0)
    assert abs(P.label_counts(odd)[A] - P.label_counts(odd)[NA]) == 1
    plain = P.load_pairs(name, path=_fixture(name), limit=4, seed=0, stratify=False)
    assert len(plain) == 4
    assert P.load_pairs(name, path=_fixture(name), limit=0) == []
    assert len(P.load_pairs(name, path=_fixture(name), limit=100)) == len(full)


def test_unknown_dataset_lists_known():
    with pytest.raises(ValueError) as e:
        P.load_pairs("scifact", path=_fixture("fever"))
    msg = str(e.value)
    assert "scifact" in msg and all(n in msg for n in P.PAIR_DATASETS)


def test_bad_rows_name_file_line_and_field(tmp_path):
    good = _fixture("fever").read_text(encoding="utf-8").splitlines()[0]
    bad = json.loads(good)
    del bad["claim"]
    path = tmp_path / "fever_bad.jsonl"
    path.write_text(good + "\n\n" + json.dumps(bad) + "\n", encoding="utf-8")
    with pytest.raises(ValueError) as e:
        P.load_pairs("fever", path=path)
    msg = str(e.value)
    assert str(path) in msg and "line 3" in msg and "'claim'" in msg

    wrong = dict(json.loads(good), label=7)
    path.write_text(json.dumps(wrong) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"line 1.*'label'.*7"):
        P.load_pairs("fever", path=path)

    path.write_text(good + "\n{not json\n", encoding="utf-8")
    with pytest.raises(ValueError, match=r"fever_bad\.jsonl:2: not valid JSON"):
        P.load_pairs("fever", path=path)

    amb = dict(_rows("clearfacts")[0], label="AMBIG")
    path.write_text(json.dumps(amb) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match="GrayFacts"):
        P.load_pairs("clearfacts", path=path)

    empty = dict(_rows("anli")[0], premise="  ")
    path.write_text(json.dumps(empty) + "\n", encoding="utf-8")
    with pytest.raises(ValueError, match="source text is empty"):
        P.load_pairs("anli", path=path)

    with pytest.raises(FileNotFoundError):
        P.load_pairs("anli", path=tmp_path / "missing.jsonl")
    with pytest.raises(ValueError, match="limit"):
        P.load_pairs("anli", path=_fixture("anli"), limit=-1)


def test_duplicate_raw_ids_made_unique(tmp_path):
    rows = _rows("anli")[:3]
    for r in rows:
        r["uid"] = "same"
    path = tmp_path / "anli_dup.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    ids = [p.id for p in P.load_pairs("anli", path=path)]
    assert ids == ["anli/same", "anli/same#1", "anli/same#2"]


def test_hub_path_uses_spec_and_reports_failure(monkeypatch):
    calls = []

    def load_dataset(hf_id, config, split):
        calls.append((hf_id, config, split))
        if hf_id == "broken/id":
            raise ConnectionError("no network")
        return _rows("halueval")

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    pairs = P.load_pairs("halueval")
    assert calls == [("pminervini/HaluEval", "qa_samples", "data")]
    assert len(pairs) == len(_rows("halueval"))
    with pytest.raises(P.PairLoadError, match="path="):
        P.load_pairs("halueval", hf_id="broken/id", split="x")


# --------------------------------------------------------------------------- ClaimPair


def test_claim_pair_roundtrip_and_validation():
    p = ClaimPair(id="x/1", claim="c", source="s", label=NA, dataset="x",
                  error_type="fabrication", strategy="unanswerable_wrap", meta={"k": 1})
    assert ClaimPair.from_dict(p.to_dict()) == p
    assert ClaimPair.from_dict({"id": "y", "claim": "c", "source": "s", "label": "yes"}).label == A
    with pytest.raises(ValueError, match="label"):
        ClaimPair(id="z", claim="c", source="s", label="Supported")
    with pytest.raises(ValueError, match="no error_type"):
        ClaimPair(id="z", claim="c", source="s", label=A, error_type="fabrication")
    with pytest.raises(ValueError, match="error_type"):
        ClaimPair(id="z", claim="c", source="s", label=NA, error_type="made_up")
    with pytest.raises(ValueError, match="strategy"):
        ClaimPair(id="z", claim="c", source="s", label=NA, strategy="typo")
    with pytest.raises(ValueError, match="unknown field"):
        ClaimPair.from_dict({"id": "y", "claim": "c", "source": "s", "label": A, "extra": 1})


# --------------------------------------------------------------------------- stratified sampling


def _make(labels, dataset="d"):
    return [ClaimPair(id=f"{dataset}/{i}", claim="c", source="s", label=A if a else NA, dataset=dataset)
            for i, a in enumerate(labels)]


@settings(max_examples=150, deadline=None)
@given(labels=st.lists(st.booleans(), max_size=60), n=st.integers(0, 70), seed=st.integers(0, 2**16))
def test_stratified_sample_label_balance_property(labels, n, seed):
    pairs = _make(labels)
    out = P.stratified_sample(pairs, n, seed=seed)
    assert len(out) == min(n, len(pairs))
    pos = {p.id: i for i, p in enumerate(pairs)}
    idx = [pos[p.id] for p in out]
    assert idx == sorted(idx) and len(set(idx)) == len(idx)
    got, have = P.label_counts(out), P.label_counts(pairs)
    # Within one of balanced, unless the smaller class is used up entirely.
    assert abs(got[A] - got[NA]) <= 1 or got[A] == have[A] or got[NA] == have[NA]
    assert [p.id for p in P.stratified_sample(pairs, n, seed=seed)] == [p.id for p in out]


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(6, 30), min_size=2, max_size=4), n=st.integers(0, 24),
       seed=st.integers(0, 1000))
def test_stratified_sample_mixed_datasets_property(sizes, n, seed):
    # Two thirds of each dataset are attributable; the checks apply when no stratum can run out.
    pairs = [p for d, k in enumerate(sizes) for p in _make([i % 3 != 0 for i in range(k)], f"d{d}")]
    out = P.stratified_sample(pairs, n, seed=seed)
    assert len(out) == min(n, len(pairs))
    per_ds = Counter(p.dataset for p in out)
    per_cell = Counter((p.dataset, p.label) for p in out)
    strata = Counter((p.dataset, p.label) for p in pairs)
    if all(c >= -(-n // len(sizes)) for c in strata.values()):  # no stratum can run out
        shares = [per_ds.get(f"d{d}", 0) for d in range(len(sizes))]
        assert max(shares) - min(shares) <= 1
        labels = P.label_counts(out)
        assert abs(labels[A] - labels[NA]) <= 1
        for d in range(len(sizes)):
            assert abs(per_cell[(f"d{d}", A)] - per_cell[(f"d{d}", NA)]) <= 1


def test_stratified_sample_mixing_loaded_datasets_and_proportional():
    mixed = [p for name in ("fever", "anli", "halueval") for p in P.load_pairs(name, path=_fixture(name))]
    out = P.stratified_sample(mixed, 12, seed=3)
    assert Counter(p.dataset for p in out) == {"fever": 4, "anli": 4, "halueval": 4}
    assert Counter((p.dataset, p.label) for p in out) == {
        (d, lab): 2 for d in ("fever", "anli", "halueval") for lab in (A, NA)}
    prop = P.stratified_sample(P.load_pairs("fever", path=_fixture("fever")), 4, seed=0, proportional=True)
    assert P.label_counts(prop) == {A: 2, NA: 2} or P.label_counts(prop) == {A: 1, NA: 3}
    assert P.label_counts(P.stratified_sample(_make([True] * 3 + [False] * 9), 4, proportional=True)) == {A: 1, NA: 3}
    with pytest.raises(ValueError):
        P.stratified_sample(mixed, -1)


# --------------------------------------------------------------------------- mini-world pairs


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return mw.ensure_world(tmp_path_factory.mktemp("world"))


@pytest.fixture(scope="module")
def facts(world):
    return {d["name"]: mw.CountryFacts.from_dict(d) for d in _read(world["facts"])}


def _read(path):
    return [json.loads(line) for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]


@pytest.fixture(scope="module")
def articles(world):
    return {d["id"]: d["text"] for d in _read(world["corpus"])}


@pytest.fixture(scope="module")
def mpairs(world):
    return miniworld_pairs(world, seed=0)


def test_miniworld_every_strategy_balanced(mpairs):
    counts = P.strategy_counts(mpairs)
    assert set(counts) == set(STRATEGIES)
    assert len(set(counts.values())) == 1 and min(counts.values()) >= 100  # equal share by default
    assert P.label_counts(mpairs) == {A: len(mpairs) // 2, NA: len(mpairs) // 2}
    assert len({p.id for p in mpairs}) == len(mpairs)
    assert {p.dataset for p in mpairs} == {"miniworld"}
    rels = Counter(p.meta["relation"] for p in mpairs if p.label == NA)
    assert set(rels) == set(mw.RELATIONS) | {"population", "area"}


def test_miniworld_labels_and_error_types(mpairs):
    by_id = {p.id: p for p in mpairs}
    for p in mpairs:
        if p.label == A:
            assert p.strategy is None and p.error_type is None
            assert by_id[p.meta["perturbed_id"]].meta["base_id"] == p.id
        else:
            assert p.strategy in STRATEGIES
            assert p.error_type == STRATEGY_ERROR_TYPES[p.strategy]
            twin = by_id[p.meta["base_id"]]
            assert twin.label == A and twin.source == p.source and twin.claim == p.meta["true_claim"]


def test_miniworld_attributable_claims_supported(mpairs, articles):
    for p in mpairs:
        if p.label != A:
            continue
        src = p.source
        assert _mentioned(src, p.meta["entity"]) and _mentioned(src, p.meta["object"]), p
        assert _mentioned(p.claim, p.meta["object"])
        article = articles[p.meta["doc_id"]]
        assert src in article  # an excerpt of the entity's own article
        n_sent = len(mw_sentences(src, p.meta["entity"]))
        assert 1 <= n_sent <= 3


def mw_sentences(text, name):
    return mw.article_sentences(text, name)


def test_miniworld_perturbed_claims_not_in_source(mpairs):
    for p in mpairs:
        if p.label != NA:
            continue
        assert p.claim != p.meta["true_claim"]
        assert p.claim not in p.source
        assert _n(p.claim) not in _n(p.source), p
        assert _n(p.claim) != _n(p.meta["true_claim"])


def test_miniworld_strategy_specifics(mpairs, facts):
    seen = Counter()
    for p in mpairs:
        s, m = p.strategy, p.meta
        if s is None:
            continue
        seen[s] += 1
        if s == "numerical_perturbation":
            assert m["relation"] in ("population", "area")
            new = mw.format_number(m["perturbed_value"])
            assert new in p.claim and not _mentioned(p.source, new)
            assert _mentioned(p.source, m["object"]) and m["object"] not in p.claim
            assert m["perturbed_value"] != m["true_value"]
        elif s == "entity_confusion":
            other = m["confused_with"]
            assert other != m["entity"] and other in p.claim
            assert p.claim.replace(other, m["entity"]) == m["true_claim"]  # only the subject swapped
            assert not _mentioned(p.source, other)
            assert m["object"] in p.claim
        elif s == "multi_hop_graft":
            v, via = m["grafted_object"], m["via"]
            assert via in facts[m["entity"]].borders
            nb = facts[via]
            own = facts[m["entity"]]
            if m["relation"] == "borders":
                assert v in nb.borders and v not in own.borders and v != own.name
            else:
                assert v in mw.fact_values(nb, m["relation"]) and v not in mw.fact_values(own, m["relation"])
            assert v in p.claim and not _mentioned(p.source, v)
        elif s == "paraphrase":
            assert any(w in f" {p.claim} " for w in (" not ", " outside ", " no ")), p.claim
        elif s == "presupposition":
            assert any(w in p.claim for w in ("only", "largest", "most populous")), p.claim
            assert p.claim.startswith(p.meta["true_claim"][:-1]) or " only " in p.claim
        elif s == "unanswerable_wrap":
            assert m["added_detail"] in p.claim and not _mentioned(p.source, m["added_detail"])
            assert _n(p.meta["true_claim"]) in _n(p.claim)
    assert set(seen) == set(STRATEGIES)


def test_miniworld_presupposition_false_in_world(mpairs, facts):
    for p in mpairs:
        if p.strategy != "presupposition":
            continue
        c = facts[p.meta["entity"]]
        if "largest population" in p.claim or "most populous" in p.claim:
            group = [o for o in facts.values() if (o.subregion == c.subregion if "largest" in p.claim
                                                   else o.region == c.region) and o.population is not None]
            assert max(o.population for o in group) > c.population
        elif "largest area" in p.claim or "largest country by area" in p.claim:
            group = [o for o in facts.values() if o.subregion == c.subregion and o.area is not None]
            assert max(o.area for o in group) > c.area
        else:
            rel = p.meta["relation"]
            assert len(mw.fact_values(c, rel)) >= 2  # "only ..." while the source lists several


def test_miniworld_deterministic_and_quotas(world, mpairs):
    again = miniworld_pairs(world, seed=0)
    assert [p.to_dict() for p in again] == [p.to_dict() for p in mpairs]

    small = miniworld_pairs(world, seed=1, per_strategy=5)
    assert P.strategy_counts(small) == {s: 5 for s in STRATEGIES}
    assert P.label_counts(small) == {A: 30, NA: 30}
    small0 = miniworld_pairs(world, seed=0, per_strategy=5)
    assert [p.to_dict() for p in small0] != [p.to_dict() for p in small]  # the seed matters

    guided = miniworld_pairs(world, seed=0, per_strategy={"entity_confusion": 6, "paraphrase": 2},
                               source="article")
    assert P.strategy_counts(guided) == {s: {"entity_confusion": 6, "paraphrase": 2}.get(s, 0)
                                         for s in STRATEGIES}
    articles = {d["id"]: d["text"] for d in _read(world["corpus"])}
    assert all(p.source == articles[p.meta["doc_id"]] for p in guided)

    with pytest.raises(ValueError, match="unknown strategy"):
        miniworld_pairs(world, per_strategy={"negation": 3})
    with pytest.raises(ValueError, match="source"):
        miniworld_pairs(world, source="summary")

"""factlab.synth.seva: teacher annotation with B.1 validation and retries; Reflect / Probe."""

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from factlab.data.pairs import ClaimPair
from factlab.judges import Judge, TransformersJudge
from factlab.synth import seva as S


VALID = json.dumps({
    "evidence_alignment": [{"claim_span": "Paris", "source_span": "capital is Paris", "status": "match"}],
    "reasoning_chain": [{"claim_part": "capital", "source_evidence": "capital is Paris", "judgment": "supported",
                         "explanation": "Stated in the source."}],
    "label": "Attributable", "confidence": 0.9, "error_type": None, "fix_suggestion": None})


class SeededJudge(Judge):
    """Answers by (attempt seed, prompt): invalid on seed 0, valid afterwards."""

    def __init__(self):
        super().__init__("scripted", cache=None, temperature=1.0)
        self.seeds = []

    def _generate(self, prompts, prefix=""):
        self.seeds.append(self.seed)
        return [VALID if self.seed > 0 else '{"label": "Attributable", "confidence": 2}' for _ in prompts]


def test_annotate_retries_until_valid():
    j = SeededJudge()
    pairs = [ClaimPair("a", "The capital is Paris.", "France's capital is Paris.", "attributable")]
    ann, rep = S.annotate(j, pairs)
    assert ann[0]["label"] == "Attributable"
    assert rep["accepted"] == 1 and rep["accepted_by_attempt"] == {2: 1} and rep["attempts"] == 2
    assert j.seeds == [0, 1] and j.seed == 0  # seed restored
    assert sum(rep["rejections"].values()) == 1


def test_annotate_rejects_wrong_label_and_gives_up_after_three():
    j = SeededJudge()
    pairs = [ClaimPair("b", "The capital is Lyon.", "France's capital is Paris.", "not_attributable")]
    ann, rep = S.annotate(j, pairs)
    assert ann == [None] and rep["attempts"] == 3 and rep["acceptance_rate"] == 0.0
    assert any("disagrees with gold" in k for k in rep["rejections"])
    ann, rep = S.annotate(SeededJudge(), pairs, require_gold_label=False)
    assert ann[0] is not None
    with pytest.raises(ValueError):
        S.annotate(j, pairs, max_attempts=0)


def test_annotate_with_a_model_teacher(tiny_model_and_tokenizer):
    model, tok = tiny_model_and_tokenizer
    teacher = TransformersJudge(model_obj=model, tokenizer=tok, system=S.teacher_system_prompt(), max_new_tokens=24,
                                temperature=1.0, cache=None)
    pairs = [ClaimPair("c", "The capital of France is Paris.", "France's capital is Paris.", "attributable")]
    ann, rep = S.annotate(teacher, pairs, max_attempts=2)
    assert rep["n"] == 1 and 1 <= rep["attempts"] <= 2
    assert rep["accepted"] + sum(rep["rejections"].values()) >= 1
    # every attempt asked the real model and got text back (not rejected unasked)
    assert teacher.stats["calls"] == rep["attempts"] and teacher.stats["completion_tokens"] > 0
    assert all(reason.strip() for reason in rep["rejections"]) and (ann[0] is not None) == (rep["accepted"] == 1)


def test_weakness_profile():
    from factlab.eval.verification import VerificationRecord

    def rec(i, gold, pred, et=None):
        return VerificationRecord(i, gold, pred, 1.0, 1.0, 1.0, et, "")

    pairs = [ClaimPair("1", "", "", "not_attributable", error_type="entity_substitution"),
             ClaimPair("2", "", "", "not_attributable", error_type="entity_substitution"),
             ClaimPair("3", "", "", "not_attributable", error_type="fabrication"),
             ClaimPair("4", "", "", "attributable")]
    recs = [rec("1", "not_attributable", "not_attributable", "fabrication"),
            rec("2", "not_attributable", "attributable"),
            rec("3", "not_attributable", "not_attributable", "fabrication"),
            rec("4", "attributable", "attributable")]
    prof = S.weakness_profile(recs, pairs)
    es = prof["entity_substitution"]
    assert es["detection_accuracy"] == 0.5 and es["diagnosis_accuracy"] == 0.0 and es["misdiagnosed"] == 1
    # §2.5: the entity substitution caught but diagnosed as "fabrication" is a weakness too
    assert es["error_rate"] == 1.0 and es["diagnosed_as"] == {"fabrication": 1}
    assert prof["fabrication"]["error_rate"] == 0.0 and set(prof) == {"entity_substitution", "fabrication"}
    # and it moves the Probe budget toward the misdiagnosed category, though no label was missed
    caught = [rec("1", "not_attributable", "not_attributable", "fabrication"),
              rec("2", "not_attributable", "not_attributable", "entity_substitution"),
              rec("3", "not_attributable", "not_attributable", "fabrication")]
    budget = S.strategy_budget(S.weakness_profile(caught, pairs), 12)
    assert budget["entity_confusion"] + budget["multi_hop_graft"] == 12 and budget["unanswerable_wrap"] == 0


def test_teacher_uses_the_k3_prompt_and_the_verifier_k1():
    from factlab import prompts as P
    from factlab.rewards.seva_output import verifier_messages

    system = S.teacher_system_prompt()
    assert system.startswith(P.SEVA_TEACHER_PROMPT) and "expert fact-checker creating training data" in system
    assert '"evidence_alignment"' in system and "500 participants from 12 countries" in system  # K.1 shape, App. J shots
    assert verifier_messages("c", "s")[0]["content"] == P.SEVA_SYSTEM_PROMPT.format()


def test_allocate_budget_paper_example():
    alloc = S.allocate_budget({"entity_substitution": 1 - 0.42, "fabrication": 1 - 0.78}, 100)
    assert sum(alloc.values()) == 100
    assert 2.4 < alloc["entity_substitution"] / alloc["fabrication"] < 2.9  # "~3x" (§2.5)
    assert S.allocate_budget({"a": 0.0, "b": 0.0}, 5) in ({"a": 3, "b": 2}, {"a": 2, "b": 3})
    assert S.allocate_budget({"a": 0.0, "b": 0.5}, 4) == {"a": 0, "b": 4}
    with pytest.raises(ValueError):
        S.allocate_budget({}, 3)


@given(st.dictionaries(st.text(min_size=1, max_size=5), st.floats(0, 1), min_size=1, max_size=6), st.integers(0, 500))
def test_allocate_budget_properties(rates, budget):
    alloc = S.allocate_budget(rates, budget)
    assert sum(alloc.values()) == budget and set(alloc) == set(rates)
    total = sum(rates.values())
    if total > 0:
        for k, v in alloc.items():
            assert abs(v - budget * rates[k] / total) < 1 + 1e-9


def test_strategy_budget_and_probe():
    from factlab.data.miniworld import ensure_world
    from factlab.data.pairs import strategy_counts
    from factlab.labels import STRATEGY_ERROR_TYPES

    profile = {"entity_substitution": {"error_rate": 0.58}, "fabrication": {"error_rate": 0.22},
               "temporal_shift": {"error_rate": 0.9}}
    b = S.strategy_budget(profile, 40)
    assert sum(b.values()) == 40 and set(b) == {"entity_confusion", "multi_hop_graft", "unanswerable_wrap"}
    assert b["entity_confusion"] + b["multi_hop_graft"] == 29 and b["unanswerable_wrap"] == 11
    even = S.strategy_budget({}, 12)
    assert set(even) == set(STRATEGY_ERROR_TYPES) and set(even.values()) == {2}
    world = ensure_world()
    first = S.probe(world, {"entity_confusion": 3, "unanswerable_wrap": 2})
    assert {k: v for k, v in strategy_counts(first).items() if v} == {"entity_confusion": 3, "unanswerable_wrap": 2}
    again = S.probe(world, {"entity_confusion": 3, "unanswerable_wrap": 2}, seen_claims={p.claim for p in first})
    assert not again  # the same seed regenerates the same pairs: all seen


def test_reference_annotations_are_valid_and_score_high():
    import json

    from factlab.data.miniworld import ensure_world
    from factlab.synth.perturbations import miniworld_pairs
    from factlab.rewards import seva, seva_output

    pairs = miniworld_pairs(ensure_world(), per_strategy=2)
    for p in pairs:
        ann = S.reference_annotation(p)
        assert seva_output.validate_output(ann) == [], (p.id, seva_output.validate_output(ann))
        r = seva.process_reward(json.dumps(ann), p.label)
        assert r > 1.0, (p.id, r)  # correct label, full structure, calibrated confidence
        steps = ann["reasoning_chain"]
        assert all(st["source_evidence"] in p.source for st in steps)  # quotes, not paraphrases
        if p.label == "not_attributable":
            assert ann["error_type"] == p.error_type
            assert ann["fix_suggestion"] == f"Write instead: {p.meta['true_claim']}"
            part = steps[1]["claim_part"]
            assert part in p.claim and steps[1]["judgment"] == "not_supported"
            if p.strategy in ("numerical_perturbation", "multi_hop_graft", "unanswerable_wrap"):
                assert part != p.claim.rstrip(".")  # the erroneous words, not the whole claim
                assert part not in p.source or p.strategy == "unanswerable_wrap"
            if p.strategy == "entity_confusion":  # the wrong subject is the first failed step
                assert steps[0]["claim_part"] == p.meta["confused_with"]
                assert steps[0]["judgment"] == "not_supported"
        else:
            assert [st["judgment"] for st in steps] == ["supported"] * 3


def test_probe_filter_drops_bad_perturbations_with_their_twins():
    """002 App. F: detectable, fluent, and of the intended error type; the mini-world's own
    perturbations pass by construction, constructed faults do not."""
    from factlab.data.miniworld import ensure_world
    from factlab.synth.perturbations import miniworld_pairs, probe_filter

    pairs = miniworld_pairs(ensure_world(), per_strategy=2)
    kept, rep = probe_filter(pairs)
    assert kept == pairs and rep == {"generated": len(pairs), "kept": len(pairs), "not_detectable": 0,
                                     "not_fluent": 0, "wrong_error_type": 0}
    bad = {p.strategy: p for p in pairs if p.label == "not_attributable"}
    twins = {p.id: p for p in pairs}
    faults = [
        bad["paraphrase"].__class__(**{**bad["paraphrase"].to_dict(), "claim": bad["paraphrase"].meta["true_claim"]}),
        bad["entity_confusion"].__class__(**{**bad["entity_confusion"].to_dict(),
                                             "claim": bad["entity_confusion"].claim.lower()}),
        bad["numerical_perturbation"].__class__(**{**bad["numerical_perturbation"].to_dict(),
                                                   "claim": bad["numerical_perturbation"].meta["true_claim"].replace(
                                                       ".", ", as everyone knows.")}),
    ]
    test_set = [x for f in faults for x in (twins[f.meta["base_id"]], f)]
    kept, rep = probe_filter(test_set)
    assert kept == [] and (rep["not_detectable"], rep["not_fluent"], rep["wrong_error_type"]) == (1, 1, 1)


def test_teacher_limit_zero_builds_no_teacher_and_references_every_pair(monkeypatch):
    """``teacher.limit: 0`` (the organism's smoke): no teacher is made or called; every mini-world
    pair gets its reference annotation."""
    from factlab.data.miniworld import ensure_world
    from factlab.synth.perturbations import miniworld_pairs

    def no_teacher(*a, **k):
        raise AssertionError("limit 0 must not build a teacher")

    monkeypatch.setattr(S, "make_judge", no_teacher)
    pairs = miniworld_pairs(ensure_world(), per_strategy=1)
    annotations, report = S.annotate_training_pairs(S.TeacherSection(limit=0, reference_fallback=True), pairs)
    assert report["attempts"] == 0 and report["reference_annotations"] == len(pairs) == report["sft_examples"]
    assert annotations == [S.reference_annotation(p) for p in pairs]
    none, report = S.annotate_training_pairs(S.TeacherSection(limit=0), pairs)
    assert none == [None] * len(pairs) and report["sft_examples"] == 0


def test_smoke_params_make_the_organism_the_verifier_without_a_teacher():
    """03's smoke (issue 40 item 5): the organism verifier, no teacher model (limit 0, reference
    annotations), a full fine-tune, the smoke_seva evidence; its organism evidence file holds both arms."""
    from pathlib import Path

    from factlab.config import load_config
    from factlab.recipes.seva import SevaConfig

    root = Path(__file__).resolve().parents[2]
    cfg = load_config(root / "params/03_seva_organism.yaml", SevaConfig)
    assert cfg.model.name == "organism" and cfg.lora is None
    assert cfg.teacher.limit == 0 and cfg.teacher.reference_fallback
    assert cfg.evidence.hypothesis == "smoke_seva" and [a.name for a in cfg.evidence.arms] == ["process"]
    assert cfg.evidence.seeds == [0, 1, 2] and cfg.evidence.max_new_tokens >= 340  # the longest reference verdict
    full = load_config(root / "params/03_seva_organism_evidence.yaml", SevaConfig)
    assert full.evidence.hypothesis == "organism_seva" and len(full.evidence.seeds) == 5
    assert {a.name for a in full.evidence.arms} == {"process", "binary"} and full.evidence.heldout >= 300

"""factlab.rewards.seva, seva_output, seva_trl: SEVA's output schema, label aliases, process and binary rewards.

002_56f1a732f42030d3.txt (§2.2, §2.3, Algorithm 1, Appendix C, K.1-K.2, Tables 1, 13, 14,
21). Every expected number is worked out by hand from Eqs. 1, 3-5 and Algorithm 1 in the
comment beside it, with the default weights 0.10 / 0.30 / 0.30 / 0.15 / 0.15 and
calibration +0.15 gamma / -0.10 gamma. Pure Python: no model is loaded.
"""

import json
import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from factlab import prompts as P
from factlab.labels import ERROR_TYPES
from factlab.rewards import seva_output
from factlab.rewards.seva import (DEFAULT_WEIGHTS, FIGURE_3_OUTPUT, WEIGHT_SPLITS, SevaRewardWeights, binary_reward,
                                  calibration_term, chain_length_bonus, normalize_error_type, normalize_label,
                                  process_reward, process_reward_parts, reward_bounds, reward_landscape,
                                  score_alignment, score_alignment_entry, score_chain, score_diagnosis, score_format,
                                  score_step)
from factlab.rewards.seva_output import (EvidenceAlignment, ReasoningStep, VerifierOutput, parse_verifier_output,
                                         validate_output)
from factlab.rewards.seva_trl import SevaBinaryReward, SevaProcessReward

A, NA = "Attributable", "Not Attributable"
PERFECT_ENTRY = {"claim_span": "500 participants", "source_span": "500 volunteers", "status": "match"}
PERFECT_STEP = {"claim_part": "500 participants", "source_evidence": "500 volunteers", "judgment": "supported",
                "explanation": "Both report 500 people."}


# ---------------------------------------------------------------- Table 13 aliases

TABLE_13 = {
    # row 1: yes, true, entailment, supported -> Attributable
    "yes": "attributable", "true": "attributable", "entailment": "attributable", "supported": "attributable",
    # row 2: no, false, contradiction, neutral -> Not Attributable
    "no": "not_attributable", "false": "not_attributable", "contradiction": "not_attributable",
    "neutral": "not_attributable",
    # row 3: not supported, not_attributable -> Not Attributable
    "not supported": "not_attributable", "not_attributable": "not_attributable",
    # the canonical labels
    "Attributable": "attributable", "Not Attributable": "not_attributable",
}


@pytest.mark.parametrize("alias,expected", sorted(TABLE_13.items()))
def test_every_table_13_alias(alias, expected):
    assert normalize_label(alias) == expected
    assert normalize_label(alias.upper()) == expected
    assert normalize_label(f"  {alias.title()}. ") == expected
    assert normalize_label(alias.replace(" ", "_")) == expected
    assert normalize_label(alias.replace("_", " ")) == expected
    assert normalize_label(f'"{alias}"!') == expected


def test_label_normalization_edges():
    assert normalize_label("NOT-SUPPORTED") == "not_attributable"
    assert normalize_label("not\tattributable") == "not_attributable"
    assert normalize_label(True) == "attributable" and normalize_label(False) == "not_attributable"
    for junk in ("", "maybe", "partially_supported", "unsupported", "attributable not", "NA", None, 1, ["yes"], {}):
        assert normalize_label(junk) is None


def test_error_type_taxonomy_names():
    # §2.2 / Table 20 / the K.1 prompt, exact names
    assert ERROR_TYPES == ("numerical_exaggeration", "negation_flip", "scope_inflation", "temporal_shift",
                           "entity_substitution", "fabrication")
    assert normalize_error_type("Scope Inflation") == "scope_inflation"
    assert normalize_error_type("entity-substitution") == "entity_substitution"
    assert normalize_error_type("hallucination") is None and normalize_error_type(None) is None


# ---------------------------------------------------------------- components


def test_alignment_entry_eq3():
    # 0.3 + 0.3 + 0.2 + 0.1 (16 chars) + 0.1 (14 chars) = 1.0
    assert score_alignment_entry(PERFECT_ENTRY) == 1.0
    # not_found, empty source: 0.3 + 0.3 (NOT_FOUND) + 0.2 + 0.1 + 0 (|source| = 0 < 3) = 0.9
    assert score_alignment_entry({"claim_span": "significantly", "source_span": "", "status": "not_found"}) == 0.9
    # "Not Found" spelled out is the same status
    assert score_alignment_entry({"claim_span": "significantly", "source_span": "", "status": "Not Found"}) == 0.9
    # mismatch, empty source: 0.3 + 0 + 0.2 + 0.1 + 0 = 0.6
    assert score_alignment_entry({"claim_span": "Paris", "source_span": "", "status": "mismatch"}) == 0.6
    # 2-char claim, 3-char source: 0.3 + 0.3 + 0.2 + 0 + 0.1 = 0.9
    assert score_alignment_entry({"claim_span": "ab", "source_span": "xyz", "status": "MATCH"}) == 0.9
    # 201-char claim, 501-char source, bad status: 0.3 + 0.3 + 0 + 0 + 0 = 0.6
    assert score_alignment_entry({"claim_span": "c" * 201, "source_span": "s" * 501, "status": "bogus"}) == 0.6
    # exactly 200 / 500 characters are in range: 1.0
    assert score_alignment_entry({"claim_span": "c" * 200, "source_span": "s" * 500, "status": "match"}) == 1.0
    # whitespace-only and non-string spans have length 0: only the status term, 0.2
    assert score_alignment_entry({"claim_span": "   ", "source_span": 12345, "status": "match"}) == 0.2
    assert score_alignment_entry({}) == 0.0 and score_alignment_entry("match") == 0.0


def test_alignment_mean_and_empty():
    # (1.0 + 0.9 + 0.0) / 3 = 0.6333...
    entries = [PERFECT_ENTRY, {"claim_span": "x y z", "source_span": "", "status": "not_found"}, "junk"]
    assert score_alignment(entries) == pytest.approx(1.9 / 3)
    assert score_alignment([PERFECT_ENTRY] * 4) == 1.0  # the cap at 1 never binds
    assert score_alignment([]) == 0.0 and score_alignment(None) == 0.0 and score_alignment(PERFECT_ENTRY) == 0.0


def test_step_eq4_and_length_bonus():
    # 0.3 + 0.3 + 0.2 + 0.2 = 1.0
    assert score_step(PERFECT_STEP) == 1.0
    # judgment outside the set, 9-char explanation, 4-char evidence, empty part: 0
    assert score_step({"claim_part": "", "source_evidence": "abcd", "judgment": "maybe",
                       "explanation": "too short"}) == 0
    # thresholds are inclusive: 10-char explanation 0.3, 5-char evidence 0.2, "Not Supported" valid 0.3 -> 0.8
    assert score_step({"claim_part": "", "source_evidence": "abcde", "judgment": "Not Supported",
                       "explanation": "0123456789"}) == 0.8
    assert score_step(["supported"]) == 0.0
    # min(|C| / 3, 1) x 0.2
    assert [chain_length_bonus(n) for n in (0, 1, 2, 3, 7)] == pytest.approx([0, 0.2 / 3, 0.4 / 3, 0.2, 0.2])


def test_chain_mean_plus_bonus():
    half = {"judgment": "partially_supported"}  # only the judgment term: 0.3
    # mean (1.0 + 0.3) / 2 = 0.65, bonus 2/3 x 0.2 = 0.1333 -> 0.78333
    assert score_chain([PERFECT_STEP, half]) == pytest.approx(0.65 + 0.4 / 3)
    # three perfect steps: 1.0 + 0.2 = 1.2 (R_c is not capped at 1)
    assert score_chain([PERFECT_STEP] * 3) == pytest.approx(1.2)
    # junk items count: mean (1.0 + 0 + 0) / 3 = 0.3333, bonus 0.2 -> 0.5333
    assert score_chain([PERFECT_STEP, "x", 3]) == pytest.approx(1 / 3 + 0.2)
    assert score_chain([]) == 0.0 and score_chain("steps") == 0.0


def _full(**over):
    obj = {"evidence_alignment": [PERFECT_ENTRY], "reasoning_chain": [PERFECT_STEP], "label": NA,
           "confidence": 0.9, "error_type": "numerical_exaggeration", "fix_suggestion": "Change 12 to 8."}
    obj.update(over)
    return {k: v for k, v in obj.items() if v is not ...}


def test_format_levels():
    assert score_format(_full()) == 1.0
    assert score_format({}) == 0.2  # JSON, no required field
    assert score_format(_full(confidence=...)) == 0.2  # one required field missing
    assert score_format(_full(confidence=1.5)) == 0.5  # all present, §B.1 (4) fails
    assert score_format(_full(confidence="0.9")) == 0.5
    assert score_format(_full(label="maybe")) == 0.5
    assert score_format(_full(evidence_alignment=[{**PERFECT_ENTRY, "status": "partial"}])) == 0.5  # §B.1 (2)
    assert score_format(_full(reasoning_chain=[{**PERFECT_STEP, "judgment": "yes"}])) == 0.5  # §B.1 (3)
    assert score_format(_full(reasoning_chain=[{**PERFECT_STEP, "explanation": None}])) == 0.5
    assert score_format(_full(evidence_alignment="none")) == 0.5
    assert score_format(_full(evidence_alignment=[], reasoning_chain=[])) == 1.0  # empty lists are well-formed
    # the diagnosis is R_d's business, not R_f's
    assert score_format(_full(error_type="bogus", fix_suggestion=...)) == 1.0
    assert score_format([1, 2]) == 0.0


def test_validate_output_names_each_bad_field():
    assert validate_output(_full()) == []
    assert validate_output(json.loads(FIGURE_3_OUTPUT.to_json())) == []
    bad = {"evidence_alignment": [{"claim_span": "a", "status": "partial"}, "x"],
           "reasoning_chain": [{"claim_part": 3, "source_evidence": "e", "judgment": "supported", "explanation": "x"}],
           "label": NA, "confidence": 2, "error_type": "hallucination"}
    problems = validate_output(bad)
    fields = [p.split(":")[0] for p in problems]
    assert fields == ["evidence_alignment[0].source_span", "evidence_alignment[0].status", "evidence_alignment[1]",
                      "reasoning_chain[0].claim_part", "confidence", "error_type", "fix_suggestion"]
    assert any("missing" in p for p in problems if p.startswith("fix_suggestion"))
    assert validate_output({"label": A, "error_type": "fabrication"})[-1].startswith("error_type: an Attributable")
    assert [p.split(":")[0] for p in validate_output({})] == ["evidence_alignment", "reasoning_chain", "label",
                                                              "confidence"]
    assert validate_output([]) == ["<root>: expected a JSON object, got array"]


def test_diagnosis_eq5():
    # gold A: 1.0 without an error, 0.3 with one (any value, in the taxonomy or not)
    assert score_diagnosis(None, None, A) == 1.0
    assert score_diagnosis("none", "n/a", A) == 1.0
    assert score_diagnosis("", "", "yes") == 1.0
    assert score_diagnosis("fabrication", "Remove the claim.", A) == 0.3
    assert score_diagnosis("bogus", None, A) == 0.3
    # gold NA: 0.6 [e in T] + 0.4 [|s| >= 10]
    assert score_diagnosis("Fabrication", "Remove the date.", NA) == 1.0
    assert score_diagnosis("fabrication", "Say Lyon.", NA) == 0.6  # 9 characters
    assert score_diagnosis("bogus", "0123456789", NA) == 0.4  # exactly 10
    assert score_diagnosis(None, None, "neutral") == 0.0


def test_calibration_term():
    assert calibration_term(0.8, True) == pytest.approx(0.12)  # 0.8 x 0.15
    assert calibration_term(0.8, False) == pytest.approx(-0.08)  # -0.8 x 0.10
    assert calibration_term(1.7, True) == pytest.approx(0.15)  # clamped to 1
    for no_gamma in (None, "0.9", True, -0.5, float("nan"), float("inf"), [0.9]):
        assert calibration_term(no_gamma, False) in (0.0, -0.0)


def test_parts_by_hand_mixed():
    response = json.dumps({
        "evidence_alignment": [{"claim_span": "Paris", "source_span": "", "status": "mismatch"}],
        "reasoning_chain": [{"claim_part": "Paris", "source_evidence": "the capital", "judgment": "maybe",
                             "explanation": "short"}],
        "label": "yes", "confidence": 0.6, "error_type": "entity_substitution", "fix_suggestion": "Say Lyon."})
    parts = process_reward_parts(response, "no")
    assert parts["R_f"] == 0.5  # judgment "maybe" is outside the set
    assert parts["R_a"] == pytest.approx(0.6)  # 0.3 + 0 + 0.2 + 0.1 + 0
    assert parts["R_c_steps"] == pytest.approx(0.4)  # 0 + 0 + 0.2 (11 chars) + 0.2
    assert parts["length_bonus"] == pytest.approx(0.2 / 3)
    assert parts["R_c"] == pytest.approx(0.4 + 0.2 / 3)
    assert parts["R_l"] == 0.0  # "yes" = Attributable, gold "no" = Not Attributable
    assert parts["R_d"] == pytest.approx(0.6)  # taxonomy 0.6, fix 9 chars 0
    assert parts["calibration"] == pytest.approx(-0.06)  # -0.6 x 0.10
    # 0.10 x 0.5 + 0.30 x 0.6 + 0.30 x 0.46667 + 0.15 x 0 + 0.15 x 0.6 - 0.06 = 0.05 + 0.18 + 0.14 + 0.09 - 0.06
    assert parts["total"] == pytest.approx(0.40)
    assert parts["parse_failed"] is False
    assert process_reward(response, "no") == parts["total"]


def test_parts_by_hand_figure_3():
    parts = process_reward_parts("Here is my analysis:\n```json\n" + FIGURE_3_OUTPUT.to_json() + "\n```", NA)
    assert parts["R_f"] == 1.0
    assert parts["R_a"] == pytest.approx(0.95)  # (1.0 + 0.9 [not_found, empty source]) / 2
    assert parts["R_c"] == pytest.approx(1 + 0.4 / 3)  # two perfect steps + 2/3 x 0.2
    assert (parts["R_l"], parts["R_d"]) == (1.0, 1.0)  # scope_inflation, 23-char fix
    assert parts["calibration"] == pytest.approx(0.1275)  # 0.85 x 0.15
    # 0.10 + 0.285 + 0.34 + 0.15 + 0.15 + 0.1275
    assert parts["total"] == pytest.approx(1.1525)
    assert parts["problems"] == []


def test_binary_reward():
    assert binary_reward('{"label": "Attributable"}', "entailment") == 1.0
    assert binary_reward('{"label": "supported", "confidence": 2}', A) == 1.0  # only the label counts
    assert binary_reward('{"label": "Attributable"}', NA) == 0.0
    assert binary_reward('{"confidence": 1.0}', A) == 0.0
    assert binary_reward("Attributable", A) == 0.0  # no JSON


def test_unknown_gold_label_raises():
    with pytest.raises(ValueError, match="Table 13"):
        process_reward("{}", "SUPPORTS")
    with pytest.raises(ValueError):
        binary_reward("{}", None)


# ---------------------------------------------------------------- parse failures -> 0.0

TRUNCATED = FIGURE_3_OUTPUT.to_json()[:120]  # '... {"claim_s' : only the first entry is complete
PARSE_FAILURES = {
    "empty": "",
    "blank": "  \n\t ",
    "prose": "The claim is attributable to the source.",
    "unclosed object": '{"label": "Attributable", "confidence": 0.9',
    "malformed": '{"label": Attributable, "confidence": }',
    "array": '["Attributable", 0.9]',
    "cut off mid-list": TRUNCATED,
    "huge prose": "attributable " * 200_000,
    "huge unbalanced": "{" * 300_000,
    "valid JSON past the parse window": " " * 60_000 + '{"label": "Attributable", "confidence": 1.0}',
    "huge JSON value": json.dumps({"label": A, "confidence": 1.0, "evidence_alignment": [
        {"claim_span": "c" * 80_000, "source_span": "s", "status": "match"}]}),
}


@pytest.mark.parametrize("name", sorted(PARSE_FAILURES))
def test_parse_failure_scores_zero(name):
    text = PARSE_FAILURES[name]
    # parse_json bounds its work on pathological input, but a 50k-character scan per opener
    # still costs ~0.4 s on "{{{{...": the huge inputs are scored against one gold label only
    for gold in (A, NA) if len(text) < 10_000 else (A,):
        parts = process_reward_parts(text, gold)
        assert parts["parse_failed"] is True
        assert all(parts[k] == 0.0 for k in ("R_f", "R_a", "R_c", "R_l", "R_d", "calibration", "total"))
        assert binary_reward(text, gold) == 0.0
    obj, problems = parse_verifier_output(text)
    assert obj is None and len(problems) == 1


def test_truncated_response_is_not_scored_as_its_first_entry():
    obj, problems = parse_verifier_output(TRUNCATED)
    assert obj is None and "cut off" in problems[0]
    # a flat object that has a top-level field is a (badly shaped) output, not an entry
    assert parse_verifier_output('{"claim_span": "x", "label": "yes"}')[0] == {"claim_span": "x", "label": "yes"}


def test_round_trip_of_the_dataclasses():
    out = VerifierOutput((EvidenceAlignment("Paris", "Paris", "match"),),
                         (ReasoningStep("Paris", "the capital is Paris", "supported", "The capital is named."),),
                         label=A, confidence=0.9)
    obj, problems = parse_verifier_output(out.to_json())
    assert problems == [] and obj == out.to_dict() and "error_type" not in obj
    assert score_format(obj) == 1.0


# ---------------------------------------------------------------- weights and bounds


def test_weights_and_table_21_splits():
    w = DEFAULT_WEIGHTS
    assert (w.format, w.alignment, w.chain, w.label, w.diagnosis) == (0.10, 0.30, 0.30, 0.15, 0.15)
    assert (w.calibration_bonus, w.overconfidence_penalty) == (0.15, 0.10)
    assert WEIGHT_SPLITS["70/30"] == w == SevaRewardWeights.split("ours")
    for name, process in (("90/10", 0.9), ("70/30", 0.7), ("50/50", 0.5), ("30/70", 0.3)):
        s = SevaRewardWeights.split(name)
        assert s.process_share == pytest.approx(process) and s.outcome_share == pytest.approx(1 - process)
        assert s.alignment == pytest.approx(3 * s.format) == pytest.approx(s.chain) and s.label == s.diagnosis
    assert SevaRewardWeights.split("process-heavy").format == pytest.approx(0.9 / 7)
    with pytest.raises(KeyError):
        SevaRewardWeights.split("60/40")
    with pytest.raises(ValueError):
        SevaRewardWeights(format=-0.1)


def test_0_100_split_is_the_binary_reward():
    texts = [FIGURE_3_OUTPUT.to_json(), '{"label": "Attributable", "confidence": 1}', "{}", TRUNCATED,
             '{"label": "neutral", "confidence": 0.3, "evidence_alignment": []}']
    for text in texts:
        for gold in (A, NA):
            assert process_reward(text, gold, "0/100") == binary_reward(text, gold)


def test_reward_bounds_by_hand():
    # min: R_f = 0.2 on {"label": <wrong>, "confidence": 1}, gold NA: 0.10 x 0.2 - 0.10 x 1 = -0.08
    # max: 0.10 + 0.30 + 0.30 x 1.2 + 0.15 + 0.15 + 0.15 = 1.21
    assert reward_bounds() == pytest.approx((-0.08, 1.21))
    assert reward_bounds("0/100") == (0.0, 1.0)
    # 90/10: max 0.9/7 + 2.7/7 + 1.2 x 2.7/7 + 0.05 + 0.05 + 0.15
    assert reward_bounds("90/10")[1] == pytest.approx(0.9 / 7 + 2.7 / 7 + 1.2 * 2.7 / 7 + 0.25)


# ---------------------------------------------------------------- Table 1 / Table 14 landscape

# By hand (R = 0.10 R_f + 0.30 R_a + 0.30 R_c + 0.15 R_l + 0.15 R_d + R_cal):
LANDSCAPE_BY_HAND = {
    # Figure 3 output, gold NA: 0.10 + 0.30 x 0.95 + 0.30 x 1.1333 + 0.15 + 0.15 + 0.85 x 0.15
    ("Table 1", "Correct label + good reasoning (Figure 3)"): 1.1525,
    # same evidence and chain, label A, no diagnosis, gold NA: 0.10 + 0.285 + 0.34 + 0 + 0 - 0.085
    ("Table 1", "Good reasoning, wrong label (predicts A, no diagnosis)"): 0.64,
    # Figure 3 output, gold A: 0.10 + 0.285 + 0.34 + 0 + 0.15 x 0.3 - 0.085
    ("Table 1", "Good reasoning, wrong label (predicts NA with diagnosis)"): 0.685,
    # {"label": NA, "confidence": 0.7}, gold NA: 0.10 x 0.2 + 0.15 + 0.15 x 0 + 0.7 x 0.15
    ("Table 1", "Correct label, poor reasoning (label + confidence only)"): 0.275,
    # {"label": A, "confidence": 0.7}, gold A: 0.02 + 0.15 + 0.15 x 1.0 (no error) + 0.105
    ("Table 1", "Correct label, poor reasoning (Appendix J SFT output)"): 0.425,
    ("Table 1", "Unparseable output (cut off mid-list)"): 0.0,
    ("Table 14 min", "Unparseable (no JSON)"): 0.0,
    ("Table 14 max", "Unparseable (no JSON)"): 0.0,
    # {} gold NA: 0.10 x 0.2; gold A adds 0.15 x 1.0 (Eq. 5, no error)
    ("Table 14 min", "JSON only, no fields"): 0.02,
    ("Table 14 max", "JSON only, no fields"): 0.17,
    # R_f 0.5, R_a 0, one junk step: bonus 1/3 x 0.2; gold NA R_d 0; gamma 1 wrong:
    # 0.05 + 0.30 x 0.0667 - 0.10 = -0.03
    ("Table 14 min", "All fields, all wrong"): -0.03,
    # three junk steps: bonus 0.2; gold A, error "other" present: R_d 0.3; gamma 0:
    # 0.05 + 0.06 + 0.045 = 0.155
    ("Table 14 max", "All fields, all wrong"): 0.155,
    # R_f 1, R_a 1, R_c 1.2 -> 0.76; predicts A, gold NA, no diagnosis: R_d 0; gamma 1: -0.10
    ("Table 14 min", "Perfect process, wrong label"): 0.66,
    # 0.76; predicts NA with diagnosis, gold A: R_d 0.3 -> 0.045; gamma 0
    ("Table 14 max", "Perfect process, wrong label"): 0.805,
    # 0.76 + 0.15 + 0.15 + gamma x 0.15, gamma 0 / 1
    ("Table 14 min", "Everything perfect"): 1.06,
    ("Table 14 max", "Everything perfect"): 1.21,
    ("Algorithm 1 min", "Overconfident wrong bare label"): -0.08,
    ("Algorithm 1 max", "Everything perfect, confidence 1"): 1.21,
}


@pytest.fixture(scope="module")
def landscape():
    return reward_landscape()


def test_landscape_values_by_hand(landscape):
    assert [(r["table"], r["case"]) for r in landscape] == list(LANDSCAPE_BY_HAND)
    for row in landscape:
        assert row["ours"] == pytest.approx(LANDSCAPE_BY_HAND[row["table"], row["case"]], abs=1e-12), row["case"]
        assert row["ours"] == process_reward(row["response"], row["gold"])
        if row["paper_binary"] is not None:  # Table 1's binary column is reproduced exactly
            assert row["binary"] == row["paper_binary"]
    rows = {(r["table"], r["case"]): r for r in landscape}
    assert (rows["Algorithm 1 min", "Overconfident wrong bare label"]["ours"],
            rows["Algorithm 1 max", "Everything perfect, confidence 1"]["ours"]) == pytest.approx(reward_bounds())


def test_landscape_orderings_the_paper_claims(landscape):
    table_1 = [r for r in landscape if r["table"] == "Table 1"]
    level = {"Correct label + good": 0, "Good reasoning, wrong": 1, "Correct label, poor": 2, "Unparseable": 3}
    groups = {i: [r for r in table_1 if r["case"].startswith(prefix)] for prefix, i in level.items()}
    # four distinct process levels, strictly ordered (Table 1)
    for upper, lower in ((0, 1), (1, 2), (2, 3)):
        assert min(r["ours"] for r in groups[upper]) > max(r["ours"] for r in groups[lower])
    # binary sees two: lucky guesses (1.0) over good reasoning with the wrong label (0.0);
    # process reward inverts that ranking (§2.3)
    assert {r["binary"] for r in groups[0] + groups[2]} == {1.0}
    assert {r["binary"] for r in groups[1] + groups[3]} == {0.0}
    # Table 14: the top three scenarios keep their order; min <= max within each
    t14 = {(r["table"], r["case"]): r["ours"] for r in landscape if r["table"].startswith("Table 14")}
    for case in ("Unparseable (no JSON)", "JSON only, no fields", "All fields, all wrong",
                 "Perfect process, wrong label", "Everything perfect"):
        assert t14["Table 14 min", case] <= t14["Table 14 max", case]
    assert t14["Table 14 max", "All fields, all wrong"] < t14["Table 14 min", "Perfect process, wrong label"]
    assert t14["Table 14 max", "Perfect process, wrong label"] < t14["Table 14 min", "Everything perfect"]
    # ...but the formulas do not separate the bottom rows: the overconfidence penalty takes
    # "all wrong" below 0 and so below "JSON only" (and below "Unparseable")
    assert t14["Table 14 min", "All fields, all wrong"] < 0 < t14["Table 14 min", "JSON only, no fields"]


# ---------------------------------------------------------------- never raises, stays in bounds

LO, HI = reward_bounds()
json_scalars = st.none() | st.booleans() | st.integers(-10, 10**6) | st.floats(allow_nan=True) | st.text(max_size=40)
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=3)
                           | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=8)
entry = st.dictionaries(st.sampled_from(["claim_span", "source_span", "status", "claim_part", "source_evidence",
                                         "judgment", "explanation"]),
                        st.sampled_from(["", "x", "match", "not_found", "supported", "a reasonably long text"])
                        | json_scalars, max_size=7)
field_values = {
    "evidence_alignment": st.lists(entry | json_values, max_size=4) | json_values,
    "reasoning_chain": st.lists(entry | json_values, max_size=5) | json_values,
    "label": st.sampled_from([A, NA, "yes", "neutral", "maybe"]) | json_values,
    "confidence": st.floats(-2, 2) | json_values,
    "error_type": st.sampled_from([*ERROR_TYPES, "none", "other"]) | json_values,
    "fix_suggestion": st.sampled_from(["", "Change 12 to 8."]) | json_values,
}
outputs = st.fixed_dictionaries({}, optional=field_values)


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=400), gold=st.sampled_from([A, NA]))
def test_arbitrary_text_never_raises_and_stays_in_bounds(text, gold):
    r = process_reward(text, gold)
    assert LO - 1e-9 <= r <= HI + 1e-9 and math.isfinite(r)
    assert binary_reward(text, gold) in (0.0, 1.0)


@settings(max_examples=200, deadline=None)
@given(obj=outputs, gold=st.sampled_from([A, NA]), split=st.sampled_from(sorted(WEIGHT_SPLITS)),
       wrap=st.sampled_from(["{}", "```json\n{}\n```", "Answer: {} Done."]))
def test_structured_outputs_stay_in_bounds(obj, gold, split, wrap):
    text = wrap.replace("{}", json.dumps(obj))
    parts = process_reward_parts(text, gold, split)
    lo, hi = reward_bounds(split)
    assert lo - 1e-9 <= parts["total"] <= hi + 1e-9 and math.isfinite(parts["total"])
    if not parts["parse_failed"]:
        assert parts["R_f"] in (0.2, 0.5, 1.0)
        assert 0 <= parts["R_a"] <= 1 and 0 <= parts["R_c"] <= 1.2 + 1e-12 and 0 <= parts["R_d"] <= 1
        assert parts["R_f"] == 1.0 or any(p.split("[")[0].split(":")[0] in seva_output.REQUIRED_FIELDS
                                          for p in parts["problems"])


# ---------------------------------------------------------------- TRL reward functions


def test_trl_reward_functions_count_parse_failures():
    logged = []
    completions = [FIGURE_3_OUTPUT.to_json(), [{"role": "assistant", "content": '{"label": "yes", "confidence": 1}'}],
                   "I cannot answer."]
    labels = [NA, "supported", A]
    process = SevaProcessReward()
    rewards = process(prompts=["p"] * 3, completions=completions, label=labels,
                      log_metric=lambda k, v: logged.append((k, v)))
    # 1.1525 (Figure 3); {"label": "yes", "confidence": 1} gold A: 0.02 + 0.15 + 0.15 + 0.15 = 0.47; prose 0
    assert rewards == pytest.approx([1.1525, 0.47, 0.0])
    assert process.stats == {"responses": 3, "parse_failures": 1}
    assert dict(logged)["seva/parse_failure_rate"] == pytest.approx(1 / 3)
    assert dict(logged)["seva/R_l"] == pytest.approx(2 / 3)

    binary, logged = SevaBinaryReward(), []
    assert binary(completions=completions, label=labels, log_metric=lambda k, v: logged.append((k, v))) == [1, 1, 0]
    assert binary.stats["parse_failures"] == 1 and logged == [("seva/parse_failure_rate", pytest.approx(1 / 3))]
    assert SevaProcessReward("0/100")(completions=completions, label=labels) == [1.0, 1.0, 0.0]
    with pytest.raises(KeyError, match="label"):
        process(prompts=["p"], completions=["{}"])
    with pytest.raises(ValueError):
        binary(completions=["{}", "{}"], label=[A])


# ---------------------------------------------------------------- prompts (Appendix K.1-K.2)

K1_TEXT = (
    "You are a fact attribution verifier. Given a claim and a source document, determine whether the claim is fully "
    "supported by the source. Respond in JSON with the following structure:\n"
    '{ "evidence_alignment": [\n'
    '  { "claim_span": "...", "source_span": "...", "status": "match|mismatch|not_found" },\n'
    '], "reasoning_chain": [\n'
    '  { "claim_part": "...", "source_evidence": "...", "judgment": "supported|not_supported|partially_supported", '
    '"explanation": "..."},\n'
    '], "label": "Attributable|Not Attributable", "confidence": 0.0--1.0, "error_type": "(if Not Attributable) '
    'numerical_exaggeration|negation_flip|scope_inflation|temporal_shift|entity_substitution|fabrication", '
    '"fix_suggestion": "(if NA) correction" }'
)


PAPER_002 = Path(__file__).resolve().parents[2].parent / "shared" / "papers" / "002_56f1a732f42030d3.txt"


@pytest.mark.skipif(not PAPER_002.parent.is_dir(), reason=f"the papers folder {PAPER_002.parent} is not checked out here")
def test_prompts_equal_the_blocks_in_the_papers_text():
    """K.1 / K.2 as they stand in the paper's text (a missing paper file in a present papers
    folder is a failure, not a skip)."""
    text = PAPER_002.read_text(encoding="utf-8")
    block = text.split("System prompt for structured verification\n\n```\n", 1)[1].split("\n```", 1)[0]
    assert block == K1_TEXT
    user = text.split("User prompt template\n\n```\n", 1)[1].split("\n```", 1)[0]
    assert user == P.SEVA_USER_PROMPT


def test_prompts_verbatim():
    assert P.SEVA_SYSTEM_PROMPT.format() == K1_TEXT
    assert P.SEVA_USER_PROMPT.format(claim="C {x}", source="S") == (
        "Claim: C {x}\nSource: S\nIs this claim attributable to the source?\n"
        "Provide your analysis in structured JSON format.")
    system, user_turn = seva_output.verifier_messages("The sky is blue.", "The sky appears blue.")
    assert system == {"role": "system", "content": K1_TEXT}
    assert user_turn["content"].startswith("Claim: The sky is blue.\nSource: The sky appears blue.\n")

"""SEVA's process reward and the binary-reward baseline.

002_56f1a732f42030d3.txt, read next to:

- §2.2, Appendix K.1, §B.1, Appendix H, Table 20: the output v = (A, C, y, gamma, e, s), its
  parse and its checks are ``rewards.seva_output`` (``EvidenceAlignment`` / ``ReasoningStep`` /
  ``VerifierOutput``, ``parse_verifier_output``, ``validate_output``, ``verifier_messages``).
- Appendix C.1, Table 13: ``normalize_label``.
- Eq. (1), §2.3 "Process reward as the resolution" / "Component scoring", Algorithm 1,
  Appendix C.2-C.4 (Eqs. 3-5): ``process_reward`` / ``process_reward_parts`` and the component
  scorers ``score_format`` (R_f), ``score_alignment`` (R_a), ``score_chain`` (R_c),
  ``score_label`` (R_l), ``score_diagnosis`` (R_d), ``calibration_term`` (R_cal).
- §2.3 "The failure of binary reward": ``binary_reward``.
- Appendix I, Table 21: ``SevaRewardWeights`` and ``WEIGHT_SPLITS``.
- Table 1, Appendix C.5 Table 14: ``reward_landscape`` (the paper's numbers beside ours).
- ``rewards.seva_trl``: ``SevaProcessReward`` / ``SevaBinaryReward``, TRL reward functions over
  a ``label`` column.
- ``rewards.seva_claims``: ``SevaClaimsReward`` (``seva_claims``), SEVA's verifier turned on a
  policy (ours, for 06_compare; the paper trains verifiers only): the answer's claims, each
  given a K.1-K.2 verdict against its retrieved passages as the source; r = Attributable share.

The paper's numbers do not all follow from its formulas (Algorithm 1 promises R in
[-0.10, 1.28]; the formulas give [-0.08, 1.21]). The code follows the formulas; where they
leave a choice open, it makes the one below.

Interpretations:

1. Parsing (Algorithm 1 lines 1-2). The response is read with ``factlab.judges.parse_json``
   (code fences, prose around the JSON, smart or single quotes, trailing commas; the first
   50,000 characters). The parse fails, and R = 0.0 with every part 0, when no JSON is found,
   when the first JSON value is an array, or when the object found is a lone
   evidence_alignment / reasoning_chain entry with no top-level field: that is what
   ``parse_json`` salvages from a response cut off mid-list, not the verifier's output.
2. R_f in {0, 0.2, 0.5, 1.0} (Algorithm 1 line 4; §2.3 "valid JSON with all required fields";
   the §B.1 validation). 0: parse failure (it never enters the sum, R is 0 then). 0.2: a JSON
   object missing any of the §B.1 required fields evidence_alignment, reasoning_chain, label,
   confidence (Table 14's "JSON only, no fields" = 0.10 x 0.2 = 0.02). 0.5: all four present
   but some value fails §B.1 checks (2)-(4) or has the wrong type: a list field that is not a
   list, an entry that is not an object, a missing or non-string span / text field, a status or
   judgment outside its set, a label that is no Table 13 alias, a confidence that is not a
   JSON number in [0, 1]. 1.0: all four present and valid. error_type / fix_suggestion do not
   enter R_f (§B.1 does not require them; R_d scores them); ``validate_output`` still reports
   them against Appendix H (a Not Attributable label needs an error type from the taxonomy
   and a fix; an Attributable label has no error type).
3. Lengths |x| in Eqs. 3-5 are characters of the whitespace-stripped string; a value that is
   not a string (missing, null, a number, a list) has length 0.
4. status, judgment and error_type match their sets case-insensitively, with spaces and
   hyphens read as underscores ("Not Found" = not_found); labels go through
   ``normalize_label`` (Table 13), case-, whitespace- and punctuation-insensitive.
5. R_a (Eq. 3): "|source_span| > 0 or NOT_FOUND" reads NOT_FOUND as status = not_found, so a
   not_found entry with an empty source span scores 0.9 (the last term needs 3 characters).
   The mean runs over every item of the list (an item that is not an object scores 0 and
   counts); the cap at 1.0 (§C.2) never binds since each entry is at most 1.0. An empty
   list, or a value that is not a list, gives R_a = 0 (the mean over no entries is undefined
   and nothing was grounded).
6. R_c (Eq. 4 plus "LenBonus", Algorithm 1 line 6): mean over steps + min(|C|/3, 1) x 0.2,
   with |C| the number of items in the list (non-objects score 0 and count in both terms).
   R_c is not capped (Appendix C caps only R_a), so R_c in [0, 1.2]. An empty list or a
   non-list gives R_c = 0 (mean undefined, bonus min(0/3, 1) x 0.2 = 0).
7. R_l (Algorithm 1 line 7): 1 iff normalize_label(y_hat) equals normalize_label(y*); a
   missing or unreadable label is wrong. The gold label must be a Table 13 alias
   (ValueError otherwise).
8. R_d (Eq. 5; Algorithm 1 line 8, ScoreDiagnosis(e, s, y*)) depends on the gold label and
   on error_type / fix_suggestion, not on the predicted label, and applies to every parsed
   response, one without a label included. "err. present": error_type is not missing / null
   / empty / a list or object with nothing in it / a null word (none, null, n/a, na, no error,
   not applicable); anything else is present, even outside the taxonomy. For y* = A the fix
   is ignored. Consequences the paper's numbers do not show: ``{}`` scores 0.17 against gold
   Attributable (Table 14: 0.02), and a bare correct "Attributable" label with confidence 0.7
   scores 0.425 (Table 1: ~0.28; the same bare label against gold Not Attributable scores
   0.275). The paper's own §4.2 ("correct omission = 1.0") agrees with Eq. 5 here.
9. Calibration (Algorithm 1 lines 10-14): gamma = confidence when it is a finite JSON number
   (not a boolean or a string), clamped to [0, 1]; otherwise gamma = 0 (no bonus, no
   penalty). "y_hat = y*" compares normalized labels, so a missing label takes the penalty.
10. Weights (Eq. 1, §2.3): 0.10 / 0.30 / 0.30 / 0.15 / 0.15, calibration +0.15 / -0.10. The
   Table 21 splits keep the ratios inside each group (w_f : w_a : w_c = 1 : 3 : 3,
   w_l : w_d = 1 : 1) and the calibration coefficients; 0/100 is "equivalent to binary
   reward" (Appendix I), i.e. w_l = 1, every other weight and both calibration coefficients
   0, which makes ``process_reward`` equal ``binary_reward``.
11. Range: a parsed response scores in [0.2 w_f - penalty, w_f + w_a + 1.2 w_c + w_l + w_d +
   bonus] (``reward_bounds``), [-0.08, 1.21] with the default weights. Algorithm 1's -0.10
   would need R_f = 0 on a parsed response, and 1.28 is out of reach: 0.10 + 0.30 + 0.36 +
   0.15 + 0.15 + 0.15 = 1.21.
12. Binary reward (§2.3): the same parser; a parse failure is 0, otherwise 1 iff the
   normalized label equals the gold label.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, fields, replace
from typing import Any, Mapping

from ..labels import LABEL_ALIASES, Label, normalize_error_type, normalize_label, snake_token as _token
from .seva_output import (ALIGNMENT_STATUSES, REQUIRED_FIELDS, STEP_JUDGMENTS, EvidenceAlignment, ReasoningStep,
                          VerifierOutput, error_present, read_output as _read,
                          required_field_problems as _required_field_problems, text_length as _length,
                          validate_output)


# ---------------------------------------------------------------- components (Appendix C)


def score_format(obj: Any) -> float:
    """R_f in {0, 0.2, 0.5, 1.0} (Algorithm 1 line 4, §B.1; interpretation 2)."""
    if not isinstance(obj, Mapping):
        return 0.0
    if any(name not in obj for name in REQUIRED_FIELDS):
        return 0.2
    return 0.5 if _required_field_problems(obj) else 1.0


def score_alignment_entry(entry: Any) -> float:
    """Eq. 3: one evidence-alignment entry, in [0, 1]."""
    if not isinstance(entry, Mapping):
        return 0.0
    claim, source = _length(entry.get("claim_span")), _length(entry.get("source_span"))
    status = _token(entry.get("status"))
    tenths = (3 * (claim > 0) + 3 * (source > 0 or status == "not_found") + 2 * (status in ALIGNMENT_STATUSES)
              + (3 <= claim <= 200) + (3 <= source <= 500))
    return tenths / 10


def score_alignment(entries: Any) -> float:
    """R_a (Algorithm 1 line 5, §C.2): mean of Eq. 3 over the entries, capped at 1; 0 for none."""
    if not isinstance(entries, list) or not entries:
        return 0.0
    return min(1.0, sum(score_alignment_entry(e) for e in entries) / len(entries))


def score_step(step: Any) -> float:
    """Eq. 4: one reasoning step, in [0, 1]."""
    if not isinstance(step, Mapping):
        return 0.0
    tenths = (3 * (_token(step.get("judgment")) in STEP_JUDGMENTS) + 3 * (_length(step.get("explanation")) >= 10)
              + 2 * (_length(step.get("source_evidence")) >= 5) + 2 * (_length(step.get("claim_part")) > 0))
    return tenths / 10


def chain_length_bonus(n_steps: int) -> float:
    """§C.3 "LenBonus": min(|C| / 3, 1) x 0.2."""
    return min(n_steps / 3, 1.0) * 0.2


def _chain_terms(steps: Any) -> tuple[float, float]:
    if not isinstance(steps, list) or not steps:
        return 0.0, 0.0
    return sum(score_step(s) for s in steps) / len(steps), chain_length_bonus(len(steps))


def score_chain(steps: Any) -> float:
    """R_c (Algorithm 1 line 6, §C.3): mean of Eq. 4 over the steps + length bonus, in [0, 1.2]."""
    mean, bonus = _chain_terms(steps)
    return mean + bonus


def _gold(gold_label: Any) -> Label:
    gold = normalize_label(gold_label)
    if gold is None:
        raise ValueError(f"gold label {gold_label!r} is neither Attributable / Not Attributable "
                         f"nor a Table 13 alias ({', '.join(LABEL_ALIASES)})")
    return gold


def score_label(predicted: Any, gold_label: Any) -> float:
    """R_l (Algorithm 1 line 7): 1 iff the normalized labels agree."""
    return 1.0 if normalize_label(predicted) == _gold(gold_label) else 0.0


def score_diagnosis(error_type: Any, fix_suggestion: Any, gold_label: Any) -> float:
    """R_d (Eq. 5): 1.0 / 0.3 for gold Attributable without / with an error;
    0.6 x [e in taxonomy] + 0.4 x [|s| >= 10] for gold Not Attributable (interpretation 8)."""
    if _gold(gold_label) == "attributable":
        return 0.3 if error_present(error_type) else 1.0
    return (6 * (normalize_error_type(error_type) is not None) + 4 * (_length(fix_suggestion) >= 10)) / 10


def confidence_of(value: Any) -> float:
    """gamma: a finite JSON number clamped to [0, 1]; 0 for anything else (interpretation 9)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return 0.0
    return min(1.0, max(0.0, float(value)))


# ---------------------------------------------------------------- weights (Eq. 1, Table 21)


@dataclass(frozen=True)
class SevaRewardWeights:
    """Eq. 1's component weights and Algorithm 1's calibration coefficients (§2.3)."""

    format: float = 0.10
    alignment: float = 0.30
    chain: float = 0.30
    label: float = 0.15
    diagnosis: float = 0.15
    calibration_bonus: float = 0.15
    overconfidence_penalty: float = 0.10

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
                raise ValueError(f"weight {f.name} must be a finite number >= 0, got {value!r}")

    @property
    def process_share(self) -> float:
        return self.format + self.alignment + self.chain

    @property
    def outcome_share(self) -> float:
        return self.label + self.diagnosis

    @classmethod
    def split(cls, name: str) -> SevaRewardWeights:
        """A Table 21 variant by name ("90/10", "70/30", ... or "process-heavy", "ours", ...)."""
        key = WEIGHT_SPLIT_ALIASES.get(name, name)
        if key not in WEIGHT_SPLITS:
            known = ", ".join([*WEIGHT_SPLITS, *WEIGHT_SPLIT_ALIASES])
            raise KeyError(f"unknown weight split {name!r}; known: {known}")
        return WEIGHT_SPLITS[key]


def _process_outcome_split(process_percent: int) -> SevaRewardWeights:
    """Interpretation 10: w_f : w_a : w_c = 1 : 3 : 3 and w_l = w_d inside the two shares."""
    outcome_percent = 100 - process_percent
    return SevaRewardWeights(format=process_percent / 700, alignment=3 * process_percent / 700,
                             chain=3 * process_percent / 700, label=outcome_percent / 200,
                             diagnosis=outcome_percent / 200)


DEFAULT_WEIGHTS = SevaRewardWeights()
WEIGHT_SPLITS: Mapping[str, SevaRewardWeights] = {
    "90/10": _process_outcome_split(90),
    "70/30": _process_outcome_split(70),  # == DEFAULT_WEIGHTS
    "50/50": _process_outcome_split(50),
    "30/70": _process_outcome_split(30),
    # Appendix I: "The 0/100 configuration is equivalent to binary reward."
    "0/100": SevaRewardWeights(format=0.0, alignment=0.0, chain=0.0, label=1.0, diagnosis=0.0,
                               calibration_bonus=0.0, overconfidence_penalty=0.0),
}
WEIGHT_SPLIT_ALIASES: Mapping[str, str] = {"process-heavy": "90/10", "ours": "70/30", "balanced": "50/50",
                                           "outcome-heavy": "30/70", "binary": "0/100"}


def as_weights(weights: SevaRewardWeights | str) -> SevaRewardWeights:
    """``weights`` itself, or the Table 21 split of that name (``SevaRewardWeights.split``)."""
    return SevaRewardWeights.split(weights) if isinstance(weights, str) else weights


def calibration_term(confidence: Any, label_correct: bool,
                     weights: SevaRewardWeights | str = DEFAULT_WEIGHTS) -> float:
    """R_cal (Algorithm 1 lines 10-14): +gamma x 0.15 when the label is right, -gamma x 0.10 when not."""
    w, gamma = as_weights(weights), confidence_of(confidence)
    return gamma * w.calibration_bonus if label_correct else -gamma * w.overconfidence_penalty


def reward_bounds(weights: SevaRewardWeights | str = DEFAULT_WEIGHTS) -> tuple[float, float]:
    """The least and greatest ``process_reward`` over all responses and both gold labels
    (interpretation 11): [-0.08, 1.21] with the default weights. Both ends are reached
    (``reward_landscape``'s Algorithm 1 rows)."""
    w = as_weights(weights)
    lowest = 0.2 * w.format - w.overconfidence_penalty  # {"label": <wrong>, "confidence": 1}, gold NA
    highest = w.format + w.alignment + 1.2 * w.chain + w.label + w.diagnosis + w.calibration_bonus
    return min(0.0, lowest), max(0.0, highest)


# ---------------------------------------------------------------- rewards (Algorithm 1)

_PART_KEYS = ("R_f", "R_a", "R_c_steps", "length_bonus", "R_c", "R_l", "R_d", "confidence", "calibration", "total")


def process_reward_parts(response: str, gold_label: str,
                         weights: SevaRewardWeights | str = DEFAULT_WEIGHTS) -> dict[str, Any]:
    """Algorithm 1 term by term: R_f, R_a, R_c (= R_c_steps + length_bonus), R_l, R_d, gamma,
    the calibration term, the total R, ``parse_failed`` and the schema ``problems``."""
    gold, w = _gold(gold_label), as_weights(weights)
    obj, failure = _read(response)
    if obj is None:  # Algorithm 1 line 2
        return {**dict.fromkeys(_PART_KEYS, 0.0), "parse_failed": True, "problems": [failure]}
    steps_mean, bonus = _chain_terms(obj.get("reasoning_chain"))
    predicted = normalize_label(obj.get("label"))
    parts = {
        "R_f": score_format(obj),
        "R_a": score_alignment(obj.get("evidence_alignment")),
        "R_c_steps": steps_mean,
        "length_bonus": bonus,
        "R_c": steps_mean + bonus,
        "R_l": 1.0 if predicted == gold else 0.0,
        "R_d": score_diagnosis(obj.get("error_type"), obj.get("fix_suggestion"), gold),
        "confidence": confidence_of(obj.get("confidence")),
        "calibration": calibration_term(obj.get("confidence"), predicted == gold, w),
    }
    parts["total"] = (w.format * parts["R_f"] + w.alignment * parts["R_a"] + w.chain * parts["R_c"]
                      + w.label * parts["R_l"] + w.diagnosis * parts["R_d"] + parts["calibration"])
    return {**parts, "parse_failed": False, "problems": validate_output(obj)}


def process_reward(response: str, gold_label: str, weights: SevaRewardWeights | str = DEFAULT_WEIGHTS) -> float:
    """SEVA's process reward R (Eq. 1, Algorithm 1); 0.0 when the response does not parse."""
    return process_reward_parts(response, gold_label, weights)["total"]


def binary_reward(response: str, gold_label: str) -> float:
    """The binary baseline (§2.3): 1.0 iff the parsed label matches the gold label, else 0.0."""
    gold = _gold(gold_label)
    obj, _ = _read(response)
    return 1.0 if obj is not None and normalize_label(obj.get("label")) == gold else 0.0


# ---------------------------------------------------------------- reward landscape (Tables 1, 14)

# Figure 3: claim "60% of participants significantly improved", source "60% of subjects
# showed improvement"; its alignment, chain, label, confidence and diagnosis as full JSON.
FIGURE_3_OUTPUT = VerifierOutput(
    evidence_alignment=(EvidenceAlignment("60% of participants", "60% of subjects", "match"),
                        EvidenceAlignment("significantly improved", "", "not_found")),
    reasoning_chain=(
        ReasoningStep("60% of participants", "60% of subjects", "supported",
                      "The percentage matches and participants are the subjects."),
        ReasoningStep("significantly improved", "showed improvement", "not_supported",
                      "The source reports improvement, not that it was significant."),
    ),
    label="Not Attributable", confidence=0.85, error_type="scope_inflation",
    fix_suggestion='Remove "significantly".',
)

# Appendix J Ex. 2: claim "The study involved 500 participants from 12 countries.", source
# "The research included 500 volunteers from 8 different nations."; three perfect steps.
EXAMPLE_2_OUTPUT = VerifierOutput(
    evidence_alignment=(EvidenceAlignment("The study involved", "The research included", "match"),
                        EvidenceAlignment("500 participants", "500 volunteers", "match"),
                        EvidenceAlignment("12 countries", "8 different nations", "mismatch")),
    reasoning_chain=(
        ReasoningStep("The study involved", "The research included", "supported",
                      "The study and the research are the same work."),
        ReasoningStep("500 participants", "500 volunteers", "supported", "Both report 500 people taking part."),
        ReasoningStep("12 countries", "8 different nations", "not_supported", "The source names 8 nations, not 12."),
    ),
    label="Not Attributable", confidence=1.0, error_type="numerical_exaggeration", fix_suggestion="Change 12 to 8.",
)

# Appendix J Ex. 1: claim "The company was founded in 2004 and is headquartered in San
# Francisco.", source "Founded in 2004, the technology firm operates from its main office in
# San Francisco, CA."; three perfect steps.
EXAMPLE_1_OUTPUT = VerifierOutput(
    evidence_alignment=(EvidenceAlignment("The company", "the technology firm", "match"),
                        EvidenceAlignment("founded in 2004", "Founded in 2004", "match"),
                        EvidenceAlignment("headquartered in San Francisco", "main office in San Francisco, CA",
                                          "match")),
    reasoning_chain=(
        ReasoningStep("The company", "the technology firm", "supported",
                      "The firm is the company the claim describes."),
        ReasoningStep("founded in 2004", "Founded in 2004", "supported", "The founding year is the same."),
        ReasoningStep("headquartered in San Francisco", "main office in San Francisco, CA", "supported",
                      "A main office in San Francisco is its headquarters."),
    ),
    label="Attributable", confidence=1.0,
)


def _as_attributable(output: VerifierOutput, confidence: float) -> str:
    """The same evidence and reasoning with the label flipped to Attributable (no diagnosis)."""
    return replace(output, label="Attributable", confidence=confidence, error_type=None, fix_suggestion=None).to_json()


def _all_wrong(n_steps: int, label: str, confidence: float) -> str:
    """Every field present, every value wrong: empty spans and texts, statuses and judgments
    outside their sets, a wrong label, an error type outside the taxonomy, a 4-character fix."""
    return json.dumps({
        "evidence_alignment": [{"claim_span": "", "source_span": "", "status": "unclear"}],
        "reasoning_chain": [{"claim_part": "", "source_evidence": "", "judgment": "unclear",
                             "explanation": ""}] * n_steps,
        "label": label, "confidence": confidence, "error_type": "other", "fix_suggestion": "none",
    })


def reward_landscape(weights: SevaRewardWeights | str = DEFAULT_WEIGHTS) -> list[dict[str, Any]]:
    """Table 1's rows and Table 14's / Algorithm 1's extremes as concrete responses, scored.

    Each row: ``table``, ``case``, ``gold``, ``response``, ``paper`` (the paper's process reward;
    Table 14 / Algorithm 1 rows give its min or max), ``paper_binary`` (Table 1 only), ``ours``
    (``process_reward``) and ``binary`` (``binary_reward``). Table 14 scenarios, as built here:
    "All fields, all wrong" is ``_all_wrong`` with one step, label Attributable, confidence 1,
    gold NA (min) / three steps, label NA, confidence 0, gold A (max); "Perfect process, wrong
    label" has perfect alignment, three perfect steps and a diagnosis that fits the predicted
    label (Appendix H): predicts A with confidence 1 against gold NA (min) / predicts NA with
    a taxonomy error and a fix, confidence 0, against gold A (max). An NA prediction with no
    diagnosis would score 0.91 against gold A (R_d = 1.0, interpretation 8)."""
    NA, A = "Not Attributable", "Attributable"
    figure_3 = FIGURE_3_OUTPUT.to_json()
    cut_off = figure_3[:120]  # ends inside the second alignment entry
    prose = "The claim is attributable to the source."
    cases = [
        ("Table 1", "Correct label + good reasoning (Figure 3)", NA, figure_3, 1.13, 1.0),
        ("Table 1", "Good reasoning, wrong label (predicts A, no diagnosis)", NA,
         _as_attributable(FIGURE_3_OUTPUT, 0.85), 0.63, 0.0),
        ("Table 1", "Good reasoning, wrong label (predicts NA with diagnosis)", A, figure_3, 0.63, 0.0),
        ("Table 1", "Correct label, poor reasoning (label + confidence only)", NA,
         '{"label": "Not Attributable", "confidence": 0.7}', 0.28, 1.0),
        ("Table 1", "Correct label, poor reasoning (Appendix J SFT output)", A,
         '{"label": "Attributable", "confidence": 0.7}', 0.28, 1.0),
        ("Table 1", "Unparseable output (cut off mid-list)", NA, cut_off, 0.0, 0.0),
        ("Table 14 min", "Unparseable (no JSON)", NA, prose, 0.0, None),
        ("Table 14 max", "Unparseable (no JSON)", A, cut_off, 0.0, None),
        ("Table 14 min", "JSON only, no fields", NA, "{}", 0.02, None),
        ("Table 14 max", "JSON only, no fields", A, "{}", 0.02, None),
        ("Table 14 min", "All fields, all wrong", NA, _all_wrong(1, A, 1.0), 0.10, None),
        ("Table 14 max", "All fields, all wrong", A, _all_wrong(3, NA, 0.0), 0.25, None),
        ("Table 14 min", "Perfect process, wrong label", NA, _as_attributable(EXAMPLE_2_OUTPUT, 1.0), 0.55, None),
        ("Table 14 max", "Perfect process, wrong label", A, replace(EXAMPLE_2_OUTPUT, confidence=0.0).to_json(),
         0.70, None),
        ("Table 14 min", "Everything perfect", NA, replace(EXAMPLE_2_OUTPUT, confidence=0.0).to_json(), 1.00, None),
        ("Table 14 max", "Everything perfect", A, EXAMPLE_1_OUTPUT.to_json(), 1.28, None),
        ("Algorithm 1 min", "Overconfident wrong bare label", NA, '{"label": "Attributable", "confidence": 1.0}',
         -0.10, None),
        ("Algorithm 1 max", "Everything perfect, confidence 1", A, EXAMPLE_1_OUTPUT.to_json(), 1.28, None),
    ]
    return [{"table": table, "case": case, "gold": gold, "response": response, "paper": paper,
             "paper_binary": paper_binary, "ours": process_reward(response, gold, weights),
             "binary": binary_reward(response, gold)}
            for table, case, gold, response, paper, paper_binary in cases]

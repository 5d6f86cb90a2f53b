"""SEVA data synthesis: teacher annotation and the Reflect / Probe steps of self-evolution.

002_56f1a732f42030d3.txt:

- ``annotate`` (§2.4, Appendix B.1): a teacher (any ``factlab.judges`` backend, with the
  K.3 system prompt, ``teacher_system_prompt``) writes the structured output for each claim/source pair; each answer
  is validated (JSON with evidence_alignment, reasoning_chain, label, confidence; statuses,
  judgments and confidence in range: ``rewards.seva_output.validate_output``) and re-generated up
  to 3 times when it fails. Ours, on top of B.1: an annotation whose label disagrees with the
  gold label is rejected too (``require_gold_label``), since SFT on it would teach the wrong
  verdict. Retries use a new sampling seed per attempt; with a greedy teacher they would
  repeat the same answer, so ``annotate`` warns when ``temperature`` is 0.
- ``weakness_profile`` (§2.5 Reflect): per error category, the detection accuracy of the
  verifier on the gold "Not Attributable" pairs of that category, from its own errors.
- ``allocate_budget`` (§2.5 Probe): the generation budget split in proportion to each
  category's error rate (1 - detection accuracy), so a category at 42% gets (1-0.42)/(1-0.78)
  ~ 2.6x the budget of one at 78%, the paper's "~3x" example. Largest-remainder rounding
  keeps the total exact; a category with no errors gets nothing, and when every category is
  perfect the budget is split evenly.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from typing import Any, Mapping, Sequence

from pydantic import Field

from .. import prompts as P
from ..config import Section
from ..judges import make_judge
from ..labels import STRATEGY_ERROR_TYPES
from ..rewards import seva, seva_output
from ..sections import JudgeSection
from .perturbations import MINIWORLD, miniworld_pairs

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 3  # B.1: failing samples are re-generated, up to 3 attempts


def annotation_prompt(claim: str, source: str) -> str:
    """The K.2 user prompt for one pair (the teacher judge carries the K.3 system prompt)."""
    return P.SEVA_USER_PROMPT.format(claim=claim, source=source)


# Appendix J's Ex. 1 (Attributable) and Ex. 2 (Not Attributable): claim, source, full output.
_TEACHER_EXAMPLES = (
    ("The company was founded in 2004 and is headquartered in San Francisco.",
     "Founded in 2004, the technology firm operates from its main office in San Francisco, CA.",
     seva.EXAMPLE_1_OUTPUT),
    ("The study involved 500 participants from 12 countries.",
     "The research included 500 volunteers from 8 different nations.", seva.EXAMPLE_2_OUTPUT),
)


def teacher_system_prompt() -> str:
    """The teacher's system prompt (002 §2.4, Appendix K.3): the K.3 instructions verbatim, then
    the K.1 JSON structure the verifier is trained to emit, then two few-shot examples (the
    paper omits its own; ours are Appendix J's Ex. 1 and Ex. 2). The verifier itself keeps the
    K.1 prompt (``rewards.seva_output.verifier_messages``)."""
    structure = P.SEVA_SYSTEM_PROMPT.format().split("structure:\n", 1)[1]
    shots = "\n\n".join(f"Claim: {c}\nSource: {src}\nOutput: {out.to_json()}" for c, src, out in _TEACHER_EXAMPLES)
    return f"{P.SEVA_TEACHER_PROMPT}\n\nRespond in JSON with the following structure:\n{structure}\n\nExamples:\n\n{shots}"


def annotate(judge, pairs: Sequence[Any], max_attempts: int = MAX_ATTEMPTS, require_gold_label: bool = True
             ) -> tuple[list[dict | None], dict[str, Any]]:
    """Structured annotations for ``pairs`` (objects with ``claim``, ``source``, ``label``).

    Returns ``(annotations, report)``: one validated output dict per pair, or None when
    every attempt failed; ``report`` has ``n``, ``accepted``, ``acceptance_rate``,
    ``attempts`` (judge calls), ``accepted_by_attempt`` and ``rejections`` counted by
    reason (the first problem of each rejected answer).
    """
    if max_attempts < 1:
        raise ValueError(f"max_attempts must be >= 1, got {max_attempts}")
    if getattr(judge, "temperature", 0.0) == 0.0 and max_attempts > 1:
        log.warning("teacher judge is greedy (temperature 0): re-generation repeats the same answer; "
                    "set judge.temperature > 0 for retries to help")
    pairs = list(pairs)
    out: list[dict | None] = [None] * len(pairs)
    pending = list(range(len(pairs)))
    rejections: Counter = Counter()
    by_attempt: Counter = Counter()
    calls = 0
    base_seed = getattr(judge, "seed", 0)
    try:
        for attempt in range(max_attempts):
            if not pending:
                break
            judge.seed = base_seed + attempt
            texts = judge.judge([annotation_prompt(pairs[i].claim, pairs[i].source) for i in pending])
            calls += len(pending)
            still = []
            for i, text in zip(pending, texts):
                obj, problems = seva_output.parse_verifier_output(text)
                gold = seva.normalize_label(pairs[i].label)
                if obj is not None and not problems and require_gold_label and seva.normalize_label(obj.get("label")) != gold:
                    problems = [f"label {obj.get('label')!r} disagrees with gold {pairs[i].label!r}"]
                if obj is None or problems:
                    reason = (problems or ["unparseable"])[0].split(":")[0]
                    rejections[reason] += 1
                    still.append(i)
                else:
                    out[i] = obj
                    by_attempt[attempt + 1] += 1
            pending = still
    finally:
        judge.seed = base_seed
    accepted = sum(o is not None for o in out)
    report = {"n": len(pairs), "accepted": accepted, "acceptance_rate": accepted / len(pairs) if pairs else 0.0,
              "attempts": calls, "accepted_by_attempt": dict(sorted(by_attempt.items())),
              "rejections": dict(rejections.most_common())}
    log.info("teacher annotation: %d of %d accepted (%d calls)", accepted, len(pairs), calls)
    return out, report


class TeacherSection(Section):
    """Teacher annotation (002 §2.4, B.1): any judge backend with the K.1 system prompt."""

    judge: JudgeSection = JudgeSection()
    limit: int | None = Field(None, ge=0)  # pairs to annotate (None = all training pairs; 0 = none: no teacher runs)
    max_attempts: int = Field(MAX_ATTEMPTS, ge=1)
    require_gold_label: bool = True
    reference_fallback: bool = False  # mini-world: rejected pairs get a reference annotation


def annotate_training_pairs(cfg: TeacherSection, pairs: Sequence[Any]) -> tuple[list[dict | None], dict[str, Any]]:
    """§2.4's SFT data: the teacher (``cfg.judge``) annotates the first ``cfg.limit`` pairs with
    B.1 validation and retries (``annotate``); with ``reference_fallback``, every mini-world pair
    left without an accepted annotation gets ``reference_annotation`` (ours, built from how the
    pair was made). Returns one annotation (or None) per pair and the report of ``annotate``
    plus ``reference_annotations`` and ``sft_examples``."""
    pairs = list(pairs)
    head = pairs if cfg.limit is None else pairs[:cfg.limit]
    if head:
        teacher = make_judge(cfg.judge, system=teacher_system_prompt())
        annotations, report = annotate(teacher, head, cfg.max_attempts, cfg.require_gold_label)
    else:  # limit 0: no teacher is built or called (e.g. the organism's smoke: reference annotations only)
        annotations, report = [], {"n": 0, "accepted": 0, "acceptance_rate": 0.0, "attempts": 0,
                                   "accepted_by_attempt": {}, "rejections": {}}
    annotations += [None] * (len(pairs) - len(head))
    n_reference = 0
    if cfg.reference_fallback:
        for i, p in enumerate(pairs):
            if annotations[i] is None and p.dataset == MINIWORLD:
                annotations[i] = reference_annotation(p)
                n_reference += 1
    report.update(reference_annotations=n_reference, sft_examples=sum(a is not None for a in annotations))
    return annotations, report


def weakness_profile(records: Sequence[Any], pairs: Sequence[Any]) -> dict[str, dict[str, Any]]:
    """§2.5 Reflect: per gold error category of the "Not Attributable" pairs, how often the
    verifier caught it and how often it also named it.

    A weakness is a miss (labelled Attributable, or a format error) *or* a wrong diagnosis: a
    correctly labelled negative whose error type is not the gold one, §2.5's own example being
    an entity substitution diagnosed as "fabrication". ``error_rate`` = 1 - ``diagnosis_accuracy``
    counts both and drives the Probe budget; ``detection_accuracy`` (label only) and
    ``misdiagnosed`` are reported beside it, with the three most frequent wrong diagnoses.
    ``records`` (``eval.verification.VerificationRecord``) and ``pairs`` (with ``id`` and
    ``error_type``) are matched by id; pairs without an error type are skipped.
    """
    by_id = {p.id: p for p in pairs}
    detected: Counter = Counter()
    diagnosed: Counter = Counter()
    totals: Counter = Counter()
    confused: dict[str, Counter] = {}
    for r in records:
        p = by_id.get(r.id)
        if p is None or r.gold != "not_attributable" or not getattr(p, "error_type", None):
            continue
        totals[p.error_type] += 1
        if r.predicted == "not_attributable":
            detected[p.error_type] += 1
            if r.error_type == p.error_type:
                diagnosed[p.error_type] += 1
            else:
                confused.setdefault(p.error_type, Counter())[r.error_type or "(none)"] += 1
    return {cat: {"n": totals[cat], "detection_accuracy": detected[cat] / totals[cat],
                  "diagnosis_accuracy": diagnosed[cat] / totals[cat],
                  "misdiagnosed": detected[cat] - diagnosed[cat],
                  "error_rate": 1 - diagnosed[cat] / totals[cat],
                  "diagnosed_as": dict(confused.get(cat, Counter()).most_common(3))}
            for cat in sorted(totals)}


def allocate_budget(error_rates: Mapping[str, float], budget: int) -> dict[str, int]:
    """§2.5 Probe: ``budget`` examples split in proportion to ``error_rates`` (largest
    remainder; exact total). All-zero rates split evenly."""
    if budget < 0:
        raise ValueError(f"budget must be >= 0, got {budget}")
    if not error_rates:
        raise ValueError("no categories to allocate over")
    if any(v < 0 for v in error_rates.values()):
        raise ValueError(f"error rates must be >= 0: {dict(error_rates)}")
    total = sum(error_rates.values())
    weights = dict(error_rates) if total > 0 else {k: 1.0 for k in error_rates}
    total = sum(weights.values())
    exact = {k: budget * w / total for k, w in weights.items()}
    alloc = {k: int(v) for k, v in exact.items()}
    left = budget - sum(alloc.values())
    for k in sorted(exact, key=lambda k: (-(exact[k] - alloc[k]), k))[:left]:
        alloc[k] += 1
    return alloc


def strategy_budget(profile: Mapping[str, Mapping[str, float]], budget: int) -> dict[str, int]:
    """§2.5 Probe on the Table 19 strategies: the budget split over error categories by their
    error rate (``allocate_budget`` over ``weakness_profile``), then each category's share
    split evenly over the strategies that produce it (``labels.STRATEGY_ERROR_TYPES``).
    Categories no strategy produces (``temporal_shift`` in the mini-world) are dropped."""
    producible = {c for c in STRATEGY_ERROR_TYPES.values()}
    rates = {c: p["error_rate"] for c, p in profile.items() if c in producible}
    if not rates:  # nothing measured: spread evenly over every strategy
        return allocate_budget({s: 1.0 for s in STRATEGY_ERROR_TYPES}, budget)
    out: dict[str, int] = {}
    for cat, n in allocate_budget(rates, budget).items():
        strategies = sorted(s for s, c in STRATEGY_ERROR_TYPES.items() if c == cat)
        out.update(allocate_budget({s: 1.0 for s in strategies}, n))
    return out


def probe(world_paths, allocation: Mapping[str, int], seen_claims: set[str] | None = None, seed: int = 0) -> list:
    """§2.5 Probe: new adversarial mini-world pairs per strategy as allocated (each with its
    attributable twin), skipping claims already seen in training or evaluation."""
    seen = seen_claims or set()
    pairs = miniworld_pairs(world_paths, seed=seed, per_strategy=dict(allocation))
    kept = [p for p in pairs if p.claim not in seen]
    log.info("probe: %d new pairs (%d already seen)", len(kept), len(pairs) - len(kept))
    return kept


def _sentence_with(source: str, needle: str) -> str:
    sentences = [s.strip() for s in re.split(r"(?<=[.!?])\s+", source) if s.strip()]
    return next((s for s in sentences if needle and needle in s), sentences[0] if sentences else "")


_STATUS = {"entity_substitution": "mismatch", "numerical_exaggeration": "mismatch", "negation_flip": "mismatch",
           "temporal_shift": "mismatch", "scope_inflation": "not_found", "fabrication": "not_found"}


def _window(sentence: str, needle: str, width: int = 3) -> str:
    """The words of ``sentence`` around the first mention of ``needle`` (``width`` on each side)."""
    words = sentence.rstrip(".").split()
    first = needle.split()[0] if needle.split() else ""
    at = next((i for i, w in enumerate(words) if first and first in w), None)
    if at is None:
        return " ".join(words[: 2 * width + 1])
    span = len(needle.split())
    return " ".join(words[max(0, at - width): at + span + width])


def _perturbed_part(pair) -> str:
    """The words of a perturbed mini-world claim that carry its error (``synth.perturbations`` meta), or
    the whole claim when they cannot be located in it."""
    meta, claim = pair.meta or {}, pair.claim.rstrip(".")
    value = meta.get("perturbed_value")
    for part in (meta.get("grafted_object"), f"{value:,}" if isinstance(value, int) else value,
                 meta.get("added_detail")):
        if part and str(part) in claim:
            return str(part)
    if meta.get("presupposed") and "," in claim:  # "..., the largest area of any country in X"
        return claim.rsplit(",", 1)[1].strip()
    return claim


def reference_annotation(pair) -> dict:
    """A structured output built from a mini-world pair's construction metadata (the
    perturbation is known, so the alignment, verdict, error type and fix are too): ours,
    used where no teacher annotation was accepted, for pairs with ``meta['object']``.

    Kept short (about 150-220 tokens of SmolLM2's tokenizer): the evidence sentence is quoted
    once in the alignment and the reasoning steps quote a few words around the entity or value,
    so that a small verifier trained on these can finish its JSON inside the smoke token budget.
    It still earns every point of the rubric (full R_a and R_c with three steps, Eqs. 3-4).
    """
    meta = pair.meta or {}
    obj, entity = str(meta.get("object", "")), str(meta.get("entity", ""))
    evidence = _sentence_with(pair.source, obj) or _sentence_with(pair.source, entity)
    at_entity, at_object = _window(evidence, entity), _window(evidence, obj)
    claim = pair.claim.rstrip(".")
    if pair.label == "attributable":
        alignment = [{"claim_span": claim, "source_span": evidence, "status": "match"}]
        steps = [
            {"claim_part": entity, "source_evidence": at_entity, "judgment": "supported",
             "explanation": "Same subject as the source."},
            {"claim_part": obj, "source_evidence": at_object, "judgment": "supported",
             "explanation": "The source states this value."},
            {"claim_part": claim, "source_evidence": at_object, "judgment": "supported",
             "explanation": "Nothing beyond the source."},
        ]
        return {"evidence_alignment": alignment, "reasoning_chain": steps, "label": "Attributable",
                "confidence": 0.9, "error_type": None, "fix_suggestion": None}
    status = _STATUS.get(pair.error_type or "", "mismatch")
    alignment = [{"claim_span": claim, "source_span": evidence if status == "mismatch" else "", "status": status}]
    what = {"mismatch": "The source says otherwise.", "not_found": "The source does not say this."}[status]
    wrong_subject = meta.get("confused_with")
    if wrong_subject:  # entity confusion: the subject itself is the error
        first = {"claim_part": wrong_subject, "source_evidence": at_entity, "judgment": "not_supported",
                 "explanation": f"The source is about {entity}."}
    else:
        first = {"claim_part": entity, "source_evidence": at_entity, "judgment": "supported",
                 "explanation": "Same subject as the source."}
    steps = [
        first,
        {"claim_part": _perturbed_part(pair), "source_evidence": at_object, "judgment": "not_supported",
         "explanation": what},
        {"claim_part": claim, "source_evidence": at_object, "judgment": "not_supported",
         "explanation": f"A case of {(pair.error_type or 'fabrication').replace('_', ' ')}."},
    ]
    fix = meta.get("true_claim") or evidence
    return {"evidence_alignment": alignment, "reasoning_chain": steps, "label": "Not Attributable",
            "confidence": 0.9, "error_type": pair.error_type or "fabrication", "fix_suggestion": f"Write instead: {fix}"}

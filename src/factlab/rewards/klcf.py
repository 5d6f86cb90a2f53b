"""KLCF's rewards (004_4f2ca2d982459bb2.txt §2.3, Eq. 5-13; Prompts 6-7, Appendix E.2).

The response is o_i = ``<think>`` T_i ``</think><answer>`` A_i ``</answer>`` (§2.3); every
reward below reads the answer part A_i (``answer_parsing``: ``strict``, the ``<answer>`` block
as the paper defines A_i; ``lenient``, that block else the text outside ``<think>``,
``rewards.qa.answer_of``).

Pure reward math (no model, no judge):

- ``checklist_scores``: Eq. 5 (recall), Eq. 6 (precision), Eq. 7 (checklist = 1/3 R + 2/3 P)
  from per-item labels Consistent / Contradictory / Missing.
- ``overlap_label``: a judge-free stand-in for Prompt 7's label (ours, ``verdict: overlap``).
- ``truth_reward``: Eq. 8, the mean p(True | c) over the answer's claims;
  ``missing_truth_reward``: Eq. 9, the same over the claims labelled Missing against the
  checklist's pseudo-response.
- ``format_reward``: Eq. 10 (0 / -1); Eq. 11's ``length_penalty`` is in ``rewards.length``;
  ``fact_reward``: Eq. 13; ``combined_reward``: Eq. 12's three cases.

Model and judge plumbing:

- ``parse_verification``: a Prompt 7 judge answer -> one label per fact (or None), with the
  answers outside the three labels and the unreadable ones told apart for the statistics.
- ``ChecklistVerifier``: Prompt 7 through the run's judge, one batched judge call for every
  (response, fact) pair (``unit="item"``, a one-fact list per prompt: what a small judge can
  answer) or one prompt per response with its whole fact list (``unit="list"``, as printed).
- ``KLCFClaimExtractor``: R_truth's claims C(A_i) with KLCF's Prompt 2 (Appendix E.1), read by
  ``parse_claim_list``; ``extraction_prompt: rar_figure8`` uses 001's Figure 8 instead.
- ``checklist_verifier`` / ``claim_truth``: build them on the judge the reward's args name
  (``verifier_judge`` / ``extractor_judge``: the paper's 14B SFTs, Appendix D.1), else the run's.
- ``TruthfulnessScorer``: Prompt 6 on a causal LM; p(True | c) is the next-token probability of
  " True" after "Factual correctness:", normalised over " True" and " False" (§2.2 Eq. 4 trains
  the reward model on exactly these two answers), read through ``decoding.next_token_logits``.

Choices the paper leaves open (each documented where it is made):

- Eq. 6 when no item is Consistent or Contradictory (0 / 0): precision 0.0. The paper defines
  precision as "the proportion of all claims mentioned in the model's responses that are
  correct" (§2.3.1); a reply that mentions none of the checklist has no correct one. Precision
  1.0 would pay an empty reply 2/3 under Eq. 7, more than a reply with one right and one wrong
  fact out of four (1/3 * 1/4 + 2/3 * 1/2 = 5/12): a reward for saying nothing.
- Eq. 8 with no claims (|C(A_i)| = 0): 0.0, the convention Eq. 9 prints with its indicator
  I_{|C_M| > 0} (an empty answer must not score as fully truthful).
- A judge answer outside the three labels, or none at all (unreadable), is not a consistent
  fact: it stays in Eq. 5's denominator ("the total number of facts in the checklist") and out
  of Eq. 6's (precision counts only Consistent and Contradictory); it is counted in ``stats``
  and logged (``<reward>/unreadable_rate``), never read as Missing. A response none of whose
  items is readable gets None (TRL: NaN, left out of the group: a judge failure), counted in
  ``<reward>/failure_rate``.
  In Eq. 9's claim verification an unreadable claim label counts as Missing instead (the
  claim is scored by the reward model, as Eq. 8 scores every claim; counted).
- An empty checklist row gets None (counted, logged), never a silent 0; ``checklist_scores([])``
  raises.
- Table 2's best row (the one Table 1's KLCF-zero numbers repeat) prints kappa = lambda = 1/4,
  mu = 3/4, which sums to 5/4 against Eq. 13's kappa + lambda + mu = 1. ``klcf_fact``'s default is
  that row rescaled to sum 1, (0.2, 0.2, 0.6) (same ratios); ``TABLE2_WEIGHTS`` keeps the rows as
  printed.

Registered: ``klcf_checklist`` (Eq. 7), ``klcf_truth`` (Eq. 8, or Eq. 9 with
``missing_only``) and ``klcf_fact`` (Eq. 13, or Eq. 12's ``checklist`` / ``truth`` cases);
``length_penalty`` (Eq. 11) is registered in ``rewards.length``. Eq. 10 is the registered ``format`` reward with
``{positive: 0.0, negative: -1.0}`` (same rule as ``format_reward`` here); the general reward
R_g (Skywork-Reward-V2, weight 0.1) is ``general_rm`` in ``rewards.general_rm``. Rows carry a ``checklist`` column
(list[str], the checklist Lambda(q_i)) and optionally ``question``; without ``question`` the
prompt's user turn is the query.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Literal, Sequence

from pydantic import Field, field_validator, model_validator

from .. import prompts as P
from .. import text
from ..config import Dtype, ParamError, Section
from ..decoding import next_token_logits
from ..models import load_frozen_model
from ..parsing import parse_json
from ..sections import JudgeSection, existing_model
from . import kb
from .base import JudgeBackedReward, completion_text, prompt_text
from .length import length_penalty  # noqa: F401  (docs/design.md's public API: klcf.length_penalty, Eq. 11)
from .qa import answer_of
from .rar import ClaimVerifier, ClaimVerifierSection, parse_claims
from .registry import register

log = logging.getLogger(__name__)

__all__ = ["LABELS", "TABLE2_WEIGHTS", "DEFAULT_WEIGHTS", "VERDICT_PREFILL", "checklist_scores", "verdict_scores", "truth_reward",
           "missing_truth_reward", "format_reward", "length_penalty", "fact_reward", "combined_reward",
           "canonical_label", "Verification", "parse_verification", "format_facts", "ChecklistVerifier",
           "parse_claim_list", "claim_item", "KLCFClaimExtractor", "EXTRACTION_PREFILL", "checklist_verifier", "claim_truth",
           "TruthfulnessScorer", "KLCFChecklistArgs", "KLCFTruthArgs", "KLCFFactArgs",
           "ChecklistReward", "ClaimTruth", "TruthReward", "FactReward", "core_reward", "VARIANTS"]

LABELS = ("Consistent", "Contradictory", "Missing")  # Prompt 7's conclusions, §2.3.1
_CANON = {lab.lower(): lab for lab in LABELS}

# Table 2 (kappa, lambda, mu) as printed (the first row, 0 0 0, is the base-model reference); the
# 1/4, 1/4, 3/4 row, whose results Table 1 reports as KLCF-zero, sums to 5/4.
TABLE2_WEIGHTS = ((0.0, 0.0, 0.0), (1 / 3, 2 / 3, 0.0), (1 / 3, 1 / 3, 1 / 3), (1 / 4, 1 / 4, 3 / 4),
                  (0.4, 0.2, 0.4), (0.0, 1 / 3, 2 / 3), (1 / 3, 0.0, 2 / 3), (0.0, 0.0, 1.0))
DEFAULT_WEIGHTS = (0.2, 0.2, 0.6)  # Table 2's best row rescaled to kappa + lambda + mu = 1 (module docstring)
WEIGHT_TOLERANCE = 1e-3  # "1/3" written as 0.333 in YAML still sums to 1

# Answer prefix for judges too small to follow Prompt 7's format (``judge.prefill``): skips the
# "analysis" field, as ``rar.SCORE_PREFILL`` skips REASONING.
VERDICT_PREFILL = '[{"conclusion": "'


# ---------------------------------------------------------------- reward math (pure)


def canonical_label(label: Any) -> str | None:
    """``"Consistent"`` / ``"Contradictory"`` / ``"Missing"`` for that label in any case
    (surrounding spaces, quotes, ``*`` and final punctuation ignored), else None."""
    if not isinstance(label, str):
        return None
    return _CANON.get(label.strip().strip("*\"'`.:;!,").strip().lower())


def _labels(labels: Sequence[str]) -> list[str]:
    if isinstance(labels, str):
        raise TypeError("labels must be a sequence of labels, not one string")
    out = []
    for lab in labels:
        c = canonical_label(lab)
        if c is None:
            raise ValueError(f"unknown checklist label {lab!r}; expected one of {', '.join(LABELS)} (any case)")
        out.append(c)
    return out


def overlap_label(fact: str, reply: str) -> str:
    """A judge-free Prompt 7 label (ours; the CPU default's ``verdict: overlap``): Consistent
    when one sentence of ``reply`` holds every content word of ``fact``; Contradictory when a
    sentence holds all of them but one (at least two) plus words the fact lacks: the same
    statement with another value ("The capital of France is Lyon." against "... is Paris.");
    else Missing. Lexical, so it misses paraphrases and negations, and can call two different
    statements that share all but one word a contradiction ("Peru is a country in the Andes."
    against "Peru is a country in South America."): a stand-in for a verifier model, not one."""
    need = text.content_words(fact)
    if not need:
        return "Missing"
    label = "Missing"
    for a, b in text.split_sentences(reply):
        have = text.content_words(reply[a:b])
        shared = len(need & have)
        if shared == len(need):
            return "Consistent"
        if shared >= max(2, len(need) - 1) and have - need:
            label = "Contradictory"
    return label


def checklist_scores(labels: Sequence[str], *, empty_precision: float = 0.0, unreadable: int = 0) -> dict[str, float]:
    """Eq. 5-7 (004 §2.3.1) from one label per checklist item.

    recall = N_cons / |checklist| (Eq. 5: "the number of consistent facts divided by the total
    number of facts in the checklist"), where |checklist| counts the ``unreadable`` facts too
    (a verdict the judge gave in no readable form is not a consistent fact); precision =
    N_cons / (N_cons + N_contra) (Eq. 6) over the readable labels, ``empty_precision`` (0.0,
    see the module docstring) when no item is Consistent or Contradictory; checklist = 1/3
    recall + 2/3 precision (Eq. 7). Labels are matched case-insensitively; anything else, or
    no label at all, is a ValueError."""
    labs = _labels(labels)
    if isinstance(unreadable, bool) or not isinstance(unreadable, int) or unreadable < 0:
        raise ValueError(f"unreadable must be a count >= 0, got {unreadable!r}")
    if not labs:
        raise ValueError("an empty checklist has no recall or precision (Eq. 5-6 divide by its size)")
    n = Counter(labs)
    cons, contra = n["Consistent"], n["Contradictory"]
    recall = cons / (len(labs) + unreadable)
    precision = cons / (cons + contra) if cons + contra else float(empty_precision)
    return {"recall": recall, "precision": precision, "checklist": recall / 3 + 2 * precision / 3}


def verdict_scores(labels: Sequence[str | None], *, empty_precision: float = 0.0) -> dict[str, float] | None:
    """Eq. 5-7 from one verdict per checklist fact, None where the judge's verdict could not be
    read: the unreadable facts stay in recall's denominator (Eq. 5 divides by the whole
    checklist) and out of precision (Eq. 6 counts only Consistent and Contradictory). None
    when no verdict at all is readable (a judge failure, not a property of the response)."""
    readable = [lab for lab in labels if lab is not None]
    if not readable:
        return None
    return checklist_scores(readable, empty_precision=empty_precision, unreadable=len(labels) - len(readable))


def _probabilities(probs: Sequence[float]) -> list[float]:
    out = [float(p) for p in probs]
    bad = [p for p in out if not 0.0 <= p <= 1.0]  # NaN fails both comparisons
    if bad:
        raise ValueError(f"p(True | c) must lie in [0, 1], got {bad[0]!r}")
    return out


def truth_reward(probs: Sequence[float]) -> float:
    """Eq. 8 (004 §2.3.1): the mean p(True | c) over the answer's claims; 0.0 when it has none
    (Eq. 9's indicator convention, see the module docstring)."""
    ps = _probabilities(probs)
    return sum(ps) / len(ps) if ps else 0.0


def missing_truth_reward(probs: Sequence[float], labels: Sequence[str]) -> float:
    """Eq. 9 (004 §2.3.1): the mean p(True | c) over the claims labelled Missing against the
    checklist's pseudo-response, times I_{|C_M| > 0} (0.0 when no claim is Missing: as printed,
    Consistent and Contradictory claims are skipped, left to the checklist reward)."""
    ps, labs = _probabilities(probs), _labels(labels)
    if len(ps) != len(labs):
        raise ValueError(f"{len(ps)} probabilities but {len(labs)} claim labels")
    missing = [p for p, lab in zip(ps, labs) if lab == "Missing"]
    return sum(missing) / len(missing) if missing else 0.0


def format_reward(completion: str) -> float:
    """Eq. 10 (004 §2.3.2): 0 for a valid ``<think>...</think><answer>`` response, else -1. The
    validity rule is factlab's (``text.format_violation``: 000 §A.2's template and anti-hack
    rules), the same as the registered ``format`` reward with ``positive: 0, negative: -1``."""
    return text.format_reward(completion, positive=0.0, negative=-1.0)


def _check_weights(kappa: float, lam: float, mu: float) -> None:
    for name, w in (("kappa", kappa), ("lam", lam), ("mu", mu)):
        if not 0.0 <= w <= 1.0:
            raise ValueError(f"{name} must lie in [0, 1] (Eq. 13), got {w}")
    total = kappa + lam + mu
    if not math.isclose(total, 1.0, abs_tol=WEIGHT_TOLERANCE):
        raise ValueError(f"Eq. 13 needs kappa + lambda + mu = 1, got {kappa} + {lam} + {mu} = {total:g}")


def fact_reward(recall: float, precision: float, truth: float, kappa: float, lam: float, mu: float) -> float:
    """Eq. 13 (004 §2.3.3): kappa R_recall + lambda R_precision + mu R_truth, with kappa,
    lambda, mu in [0, 1] summing to 1 (else ValueError)."""
    _check_weights(kappa, lam, mu)
    return kappa * recall + lam * precision + mu * truth


VARIANTS = ("both", "checklist", "truth")


def core_reward(variant: str, recall: float | None, precision: float | None, truth: float | None,
                kappa: float = DEFAULT_WEIGHTS[0], lam: float = DEFAULT_WEIGHTS[1],
                mu: float = DEFAULT_WEIGHTS[2]) -> float:
    """The factuality term of Eq. 12's three cases: ``checklist`` (not using R_truth): Eq. 7;
    ``truth`` (not using R_checklist): Eq. 8; ``both``: Eq. 13."""
    if variant == "checklist":
        return recall / 3 + 2 * precision / 3  # type: ignore[operator]
    if variant == "truth":
        return float(truth)  # type: ignore[arg-type]
    if variant == "both":
        return fact_reward(recall, precision, truth, kappa, lam, mu)  # type: ignore[arg-type]
    raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")


def combined_reward(variant: str, *, recall: float | None = None, precision: float | None = None,
                    truth: float | None = None, length: float = 0.0, fmt: float = 0.0, general: float = 0.0,
                    kappa: float = DEFAULT_WEIGHTS[0], lam: float = DEFAULT_WEIGHTS[1],
                    mu: float = DEFAULT_WEIGHTS[2], general_weight: float = 0.1) -> float:
    """Eq. 12 (004 §2.3.3): the ``variant``'s factuality term (``core_reward``) + 0.1 R_g + R_l +
    R_f. In a training run the same sum is the TRL weighted sum of ``klcf_fact`` (weight 1),
    ``length_penalty`` (1) and ``format`` (1, positive 0 / negative -1)."""
    return core_reward(variant, recall, precision, truth, kappa, lam, mu) + general_weight * general + length + fmt


# ---------------------------------------------------------------- Prompt 7 answers


@dataclass
class Verification:
    """One Prompt 7 answer read for ``n`` facts: ``labels[k]`` is fact k's label or None;
    ``outside`` counts facts whose conclusion was found but is not one of the three labels
    (or is ambiguous), ``unreadable`` facts with no conclusion at all; ``extra`` counts
    conclusions beyond the n facts (ignored)."""

    labels: list[str | None]
    outside: int = 0
    unreadable: int = 0
    extra: int = 0
    raw: list[str | None] = field(default_factory=list)


# a quoted "conclusion" key and its value, closed or cut off ("Consistent", 'Missing', Contradictory)
_CONCLUSION = re.compile(r"""["']conclusion["']\s*:\s*(?:"([^"\n]*)"?|'([^'\n]*)'?|([^,}\]\n]*))""", re.IGNORECASE)
_LABEL_WORD = re.compile(r"\b(consistent|contradictory|missing)\b", re.IGNORECASE)
_NEGATED = re.compile(r"\b(?:not|n't|never|neither|nor)\s+(?:\w+\s+)?(?:consistent|contradictory|missing)\b",
                      re.IGNORECASE)


def _read_conclusion(raw: str) -> str | None:
    """A conclusion field's label: the whole value, else its first word when no other label
    word and no negation is in it ("Missing - the reply omits it" -> Missing)."""
    label = canonical_label(raw)
    if label is not None:
        return label
    words = {w.lower() for w in _LABEL_WORD.findall(raw)}
    first = _LABEL_WORD.match(raw.strip().lstrip("*\"'`"))
    if first and len(words) == 1 and not _NEGATED.search(raw):
        return _CANON[first.group(1).lower()]
    return None


def _conclusion_of(entry: Any) -> str | None:
    """The conclusion of one entry of a JSON answer list: a dict's "conclusion" value (key in
    any case), or a bare string; None when the entry has none."""
    if isinstance(entry, dict):
        for k, v in entry.items():
            if isinstance(k, str) and k.lower() == "conclusion" and v is not None:
                return str(v)
        return None
    return None if entry is None or isinstance(entry, list) else str(entry)


def _free_text_label(answer: str) -> str | None:
    """A one-fact answer without a conclusion field (a bare "Consistent", or a sentence):
    the label when exactly one label word occurs, not negated; else None."""
    words = {w.lower() for w in _LABEL_WORD.findall(answer)}
    if len(words) != 1 or _NEGATED.search(answer):
        return None
    return _CANON[words.pop()]


def parse_verification(answer: str | None, n_facts: int = 1) -> Verification:
    """A Prompt 7 answer as one label per fact, in the fact list's order.

    Reads a complete JSON list, one entry per fact (a dict's ``"conclusion"``, or a bare
    label); else the quoted ``"conclusion"`` fields in order (one object, single quotes, or a
    list cut off by the token limit, which keeps its complete entries); else, for a one-fact
    prompt, free text holding exactly one label word, not negated. Facts without a conclusion
    are ``unreadable``; a conclusion that is not one of the three labels (or names two) is
    ``outside``; both give None, never a label."""
    if n_facts < 1:
        raise ValueError(f"n_facts must be at least 1, got {n_facts}")
    answer = answer or ""
    obj = parse_json(answer)
    if isinstance(obj, dict) and not any(isinstance(k, str) and k.lower() == "conclusion" for k in obj):
        obj = next((v for v in obj.values() if isinstance(v, list)), obj)  # {"results": [...]}
    raws: list[str | None]
    free = False
    if isinstance(obj, list) and obj:  # a complete JSON list: one entry per fact
        raws = [_conclusion_of(x) for x in obj]
    else:  # a single object, or a list cut off by the token limit: the conclusions in order
        raws = [next(g for g in m.groups() if g is not None).strip() for m in _CONCLUSION.finditer(answer)]
        structured = answer.lstrip().startswith(("[", "{", "`"))  # JSON cut off before any conclusion
        if not raws and n_facts == 1 and answer.strip() and not structured:
            raws, free = [answer.strip()], True
    labels: list[str | None] = []
    outside = 0
    unreadable = 0
    for raw in raws[:n_facts]:
        if raw is None:
            labels.append(None)
            unreadable += 1
            continue
        label = _free_text_label(raw) if free else _read_conclusion(raw)
        labels.append(label)
        outside += label is None
    unreadable += n_facts - len(labels)
    labels += [None] * (n_facts - len(labels))
    kept = raws[:n_facts]
    return Verification(labels, outside, unreadable, max(0, len(raws) - n_facts),
                        kept + [None] * (n_facts - len(kept)))


def format_facts(facts: Sequence[str]) -> str:
    """Prompt 7's [Fact List]: one numbered fact per line."""
    return "\n".join(f"{k}. {f}" for k, f in enumerate(facts, start=1))


# ---------------------------------------------------------------- Prompt 2 answers (claim lists)

# A bullet line: its item from the first to the last non-blank character. Within one line only
# ([^\S\n]: a blank that is not a newline), and without a lazy group before optional blanks: both
# made the earlier pattern quadratic on blank lines and on long blank runs inside an item.
_BULLET = re.compile(r"^[^\S\n]*(?:[*\-\u2022]|\d+[.)])[^\S\n]+(\S(?:.*\S)?)[^\S\n]*$", re.M)
_PLACEHOLDER = re.compile(r"^(?:(?:final\s+)?key\s+)?claim\s*\d*$|^\.{2,}$|^\u2026$", re.I)
_NO_CLAIMS = "no verifiable objective claims"
_NUMBERED = re.compile(r"^\d+[.)]\s+")
EXTRACTION_PREFILL = "* "  # a small judge starts its answer inside Prompt 2's bullet format


def _clean_item(s: str) -> str:
    s = s.strip().strip('"').strip("'").strip().strip("*").strip()
    return _NUMBERED.sub("", s)  # "* 1. claim": a numbered list inside the bullets


def claim_item(line: str) -> str | None:
    """One line of a claim list as its claim: the bullet's item (``* ...``, ``- ...``, ``1. ...``)
    or the bare line, cleaned; None for a blank line or the template's own ``Claim 1`` / ``...``."""
    m = _BULLET.match(line)
    item = _clean_item(m.group(1) if m else line)
    return item if item and not _PLACEHOLDER.match(item) else None


def parse_claim_list(text: Any) -> list[str] | None:
    """A Prompt 2 answer (004 Appendix E.1) as distinct claims: its bullet lines ("* ...",
    "- ...", "1. ..."); the template's own "Claim 1" / "..." lines dropped; "no verifiable
    objective claims" = []; otherwise a JSON list (``rewards.rar.parse_claims``); None when
    nothing is readable."""
    if not isinstance(text, str) or not text.strip():
        return None
    items = [_clean_item(m.group(1)) for m in _BULLET.finditer(text)]
    items = [c for c in items if c and not _PLACEHOLDER.match(c) and _NO_CLAIMS not in c.lower()]
    if items:
        return list(dict.fromkeys(items))
    if _NO_CLAIMS in text.lower():
        return []
    return parse_claims(text)


class KLCFClaimExtractor:
    """R_truth's claim extractor C(A_i) (004 §2.3.1) with KLCF's own prompt, Prompt 2
    (Appendix E.1 "Prompt for Claim Extraction", ``prompts.KLCF_CLAIM_EXTRACTION``), read by
    ``parse_claim_list``; ``ClaimVerifier.extract``'s interface. Why Prompt 2: §2.3.1 extracts
    the answer's claims with "a lightweight claim extraction model", the model Appendix D.1
    trains to follow Prompt 2's three principles (Table 10) and Appendix C.1 runs "along with
    Prompt 2" to score responses with Eq. 8; the paper prints no other extraction prompt.
    ``prefill`` starts the answer inside the bullet format (small judges). An empty answer has
    no claims (no call); an unreadable claim list is None (counted in ``stats``)."""

    prefill: bool

    def __init__(self, judge, max_claims: int = 64, prefill: bool = False):
        self.judge, self.max_claims, self.prefill = judge, max_claims, prefill
        self.stats: Counter = Counter()

    def extract(self, questions: Sequence[str], answers: Sequence[str]) -> list[list[str] | None]:
        out: list[list[str] | None] = [[] for _ in answers]
        asked = [i for i, a in enumerate(answers) if a.strip()]
        if not asked:
            return out
        replies = self.judge.judge([P.KLCF_CLAIM_EXTRACTION.format(response=answers[i]) for i in asked],
                                   prefix=EXTRACTION_PREFILL if self.prefill else None)
        self.stats["extraction_calls"] += len(asked)
        for i, reply in zip(asked, replies):
            claims = parse_claim_list(reply)
            self.stats["extraction_failures"] += claims is None
            out[i] = None if claims is None else claims[:self.max_claims]
        return out


# ---------------------------------------------------------------- the checklist verifier (Prompt 7)


class ChecklistVerifier:
    """Prompt 7 with one judge: a label per fact for each (question, reply, facts) triple.

    ``unit="item"``: one prompt per (reply, fact), every prompt of the batch in one judge call;
    ``unit="list"``: one prompt per reply with its whole fact list, read in order (as printed).
    ``verdict="choice"`` constrains each one-fact answer to the three labels
    (``Judge.choose``, for judges too small to answer in the format); ``prefill`` starts a
    generated answer with ``VERDICT_PREFILL``; ``verdict="overlap"`` asks no judge
    (``overlap_label``); ``verdict="kb"`` neither: the mini-world's truth labels each fact
    (``rewards.kb.checklist_label``; a fact the world does not hold is unreadable, counted). An empty reply is labelled all Missing without
    asking the judge (it can neither state nor contradict a fact)."""

    def __init__(self, judge, verdict: str = "generate", unit: str = "item", prefill: bool = False):
        if verdict not in ("generate", "choice", "overlap", "kb"):
            raise ValueError(f"verdict must be 'generate', 'choice', 'overlap' or 'kb', got {verdict!r}")
        if unit not in ("item", "list"):
            raise ValueError(f"unit must be 'item' or 'list', got {unit!r}")
        if verdict == "choice" and unit == "list":
            raise ValueError("verdict 'choice' picks one label per prompt: it needs unit 'item'")
        self.judge, self.verdict, self.unit, self.prefill = judge, verdict, unit, prefill
        self.stats: Counter = Counter()
        self.seconds = 0.0

    def _ask(self, prompts: list[str]) -> list[str]:
        if not prompts:
            return []
        t0 = time.perf_counter()
        try:
            if self.verdict == "choice":
                return self.judge.choose(prompts, LABELS)
            return self.judge.judge(prompts, prefix=VERDICT_PREFILL if self.prefill else None)
        finally:
            self.seconds += time.perf_counter() - t0
            self.stats["judge_calls"] += len(prompts)

    def labels(self, questions: Sequence[str], replies: Sequence[str],
               facts: Sequence[Sequence[str]]) -> list[list[str | None]]:
        """Per reply, one label (or None: unreadable / outside the labels) per fact."""
        if not len(questions) == len(replies) == len(facts):
            raise ValueError(f"{len(questions)} questions, {len(replies)} replies, {len(facts)} fact lists")
        out: list[list[str | None]] = [["Missing"] * len(fs) if not r.strip() else [None] * len(fs)
                                       for r, fs in zip(replies, facts)]
        self.stats["empty_replies"] += sum(1 for r, fs in zip(replies, facts) if fs and not r.strip())
        asked = [i for i, (r, fs) in enumerate(zip(replies, facts)) if fs and r.strip()]
        if self.verdict in ("overlap", "kb"):  # no judge: a lexical match, or the mini-world's truth
            label = overlap_label if self.verdict == "overlap" else kb.checklist_label
            for i in asked:
                out[i] = [label(f, replies[i]) for f in facts[i]]
                self.stats["unreadable"] += sum(lab is None for lab in out[i])  # kb: not a world fact
            self.stats["facts"] += sum(len(fs) for fs in facts)
            return out
        if self.unit == "item":
            jobs = [(i, k, [f]) for i in asked for k, f in enumerate(facts[i])]
        else:
            jobs = [(i, 0, list(facts[i])) for i in asked]
        answers = self._ask([P.KLCF_CHECKLIST_VERIFY.format(query=questions[i], response=replies[i],
                                                            guidelines=format_facts(fs)) for i, _, fs in jobs])
        for (i, k, fs), answer in zip(jobs, answers):
            v = parse_verification(answer, len(fs))
            out[i][k:k + len(fs)] = v.labels
            self.stats["outside_labels"] += v.outside
            self.stats["unreadable"] += v.unreadable
            self.stats["extra_conclusions"] += v.extra
        self.stats["facts"] += sum(len(fs) for fs in facts)
        return out


# ---------------------------------------------------------------- the truthfulness reward model (Prompt 6)


class TruthfulnessScorer:
    """p(True | claim) from a causal LM on Prompt 6 (004 §2.3.1 Eq. 8, Appendix E.2).

    The prompt ends with "Factual correctness:"; the next-token logits of ``true_token`` and
    ``false_token`` (" True" / " False"; the first token of each when a tokenizer splits
    them) are normalised over the two: p(True) = softmax(l_True, l_False)[0]. The paper's reward
    model is an SFT of the base model on (claim, True / False) pairs of Eq. 4; any HF id, local
    path or the embedded alias loads here (``models.load_frozen_model``: frozen, in eval mode, one
    copy per process). Rows of a batch share Prompt 6's instruction, which
    ``decoding.next_token_logits`` prefills once. Identical claims of one call are scored once."""

    def __init__(self, model: str | None = None, *, dtype: str = "float32", device: str = "auto",
                 batch_size: int = 16, model_obj=None, tokenizer=None, true_token: str = " True",
                 false_token: str = " False", template: str = P.KLCF_TRUTH_PROMPT):
        self.model_name, self.dtype, self.device, self.batch_size = model, dtype, device, batch_size
        self.true_token, self.false_token, self.template = true_token, false_token, template
        self._model, self._tok = model_obj, tokenizer
        self._ids: tuple[int, int] | None = None
        self.stats: Counter = Counter()
        self.seconds = 0.0

    def __repr__(self) -> str:
        return f"TruthfulnessScorer(model={self.model_name!r})"

    def load(self):
        if self._model is None:

            log.info("loading truthfulness reward model %s", self.model_name)
            self._model, self._tok = load_frozen_model(self.model_name, dtype=self.dtype, device=self.device)
        return self._model, self._tok

    def answer_ids(self) -> tuple[int, int]:
        """Token ids of the True and False answers (first token of each)."""
        if self._ids is None:
            _, tok = self.load()
            ids = []
            for word in (self.true_token, self.false_token):
                toks = tok(word, add_special_tokens=False)["input_ids"]
                if not toks:
                    raise ValueError(f"the tokenizer gives no token for {word!r}")
                if len(toks) > 1:
                    log.warning("%r is %d tokens; p(True) reads its first token only", word, len(toks))
                ids.append(toks[0])
            if ids[0] == ids[1]:
                raise ValueError(f"{self.true_token!r} and {self.false_token!r} start with the same token")
            self._ids = (ids[0], ids[1])
        return self._ids

    def prompt(self, claim: str) -> str:
        return self.template.format(claim=claim)

    def _forward(self, claims: Sequence[str], *, states: bool = False):
        """(p(True), p(False)) per distinct claim in first-seen order, the distinct claims, and
        (``states``) the output layer's input at the answer position, (distinct claims, hidden)."""
        import torch

        unique = list(dict.fromkeys(str(c) for c in claims))
        model, tok = self.load()
        t_id, f_id = self.answer_ids()
        rows = [tok(self.prompt(c))["input_ids"] for c in unique]
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        order = sorted(range(len(rows)), key=lambda i: -len(rows[i]))  # similar lengths batch together
        pairs: list[tuple[float, float]] = [(0.0, 0.0)] * len(unique)
        hidden: list[Any] = [None] * len(unique)
        seen: list[Any] = []
        # the output layer's last call is the rows' own pass (a shared prefix runs before it)
        hook = (model.get_output_embeddings().register_forward_hook(lambda m, inp, out: seen.append(inp[0][:, -1]))
                if states else None)
        was_training = model.training
        model.eval()
        t0 = time.perf_counter()
        try:
            for s in range(0, len(order), self.batch_size):
                idx = order[s:s + self.batch_size]
                seen.clear()
                logits = next_token_logits(model, [rows[j] for j in idx], pad)
                pair = torch.softmax(logits[:, [t_id, f_id]].double(), dim=-1).tolist()
                for k, j in enumerate(idx):
                    pairs[j] = (pair[k][0], pair[k][1])
                    if states:
                        hidden[j] = seen[-1][k].float().cpu()
        finally:
            if hook is not None:
                hook.remove()
            model.train(was_training)
            self.seconds += time.perf_counter() - t0
        self.stats["claims"] += len(claims)
        self.stats["forward_rows"] += len(unique)
        return pairs, unique, (torch.stack(hidden) if states and unique else None)

    def pair_probabilities(self, claims: Sequence[str]) -> list[tuple[float, float]]:
        """(p(True | c), p(False | c)) per claim, each pair summing to 1."""
        claims = [str(c) for c in claims]
        if not claims:
            return []
        pairs, unique, _ = self._forward(claims)
        by_claim = dict(zip(unique, pairs))
        return [by_claim[c] for c in claims]

    def answer_states(self, claims: Sequence[str]):
        """(claims, hidden) float tensor: the output layer's input at the answer position of
        each claim's prompt, the vector whose products with the " True" / " False" rows of the
        output layer are the two logits p(True) reads."""
        claims = [str(c) for c in claims]
        if not claims:
            raise ValueError("answer_states needs at least one claim")
        _, unique, hidden = self._forward(claims, states=True)
        where = {c: i for i, c in enumerate(unique)}
        return hidden[[where[c] for c in claims]]

    def probabilities(self, claims: Sequence[str]) -> list[float]:
        """p(True | c) per claim (Eq. 8's summands)."""
        return [pt for pt, _ in self.pair_probabilities(claims)]


# ---------------------------------------------------------------- params


class _AnswerArgs(Section):
    """How the answer part A_i is read: ``strict``, the ``<answer>`` block (§2.3); ``lenient``,
    that block else the text outside ``<think>``."""

    answer_parsing: Literal["strict", "lenient"] = "strict"


class KLCFChecklistArgs(_AnswerArgs):
    """``klcf_checklist`` arguments: the judge's verdict mode (``generate``: Prompt 7's JSON
    answer, the paper's; ``choice``: constrained to the three labels, for judges too small to
    follow the format; ``overlap``: no judge, ``overlap_label``'s lexical match, the CPU
    default's stand-in because a 135M judge's label scores do not depend on the reply, measured)
    and the verification unit (``item``: one fact per prompt; ``list``: the reply's whole
    checklist in one prompt, as printed)."""

    verdict: Literal["generate", "choice", "overlap", "kb"] = "generate"
    unit: Literal["item", "list"] = "item"
    # the Prompt 7 judge: None = the run's ``judge:``; the paper's is its own model, an SFT of
    # Qwen2.5-14B-Instruct (004 Appendix D.1 "Checklist Verifier Training"), e.g. served by
    # ``vllm serve`` on another port (params/05_klcf.yaml)
    verifier_judge: JudgeSection | None = None

    @model_validator(mode="after")
    def _choice_per_item(self) -> "KLCFChecklistArgs":
        if self.verdict == "choice" and self.unit == "list":
            raise ParamError("unit", "verdict 'choice' picks one label per prompt: it needs unit 'item'")
        return self


class KLCFTruthArgs(KLCFChecklistArgs):
    """``klcf_truth`` arguments: the truthfulness reward model (``rm_model``: None = the run's
    policy model, ``model.name``; the paper SFTs its base model), its dtype, device and batch,
    ``missing_only`` (Eq. 9: score only the claims Prompt 7 labels Missing against the
    checklist's pseudo-response; ``verdict`` / ``unit`` apply to that verification) and
    ``claim_extraction``: ``judge`` (a judge extracts C(A_i)) or ``sentences`` (each complete
    sentence of the answer one claim, ``text.sentence_claims``; ours, for judges too small to
    follow the extraction prompt). ``extraction_prompt``: ``klcf_prompt2``, KLCF's own Prompt 2
    (the default; see ``KLCFClaimExtractor`` for why it is the one §2.3.1 uses), or
    ``rar_figure8``, Binary RAR's Figure 8 prompt (001; ``ClaimVerifier.extract``).
    ``extractor_judge``: the extraction model (None = the run's ``judge:``; the paper's is an SFT
    of Qwen2.5-14B-Instruct on Claimify data, 004 Appendix D.1 "Claim Extraction Model
    Training")."""

    rm_model: str | None = None
    rm_dtype: Dtype = "float32"
    rm_device: str = "auto"
    rm_batch_size: int = Field(16, ge=1)
    missing_only: bool = False
    claim_extraction: Literal["judge", "sentences"] = "judge"
    extraction_prompt: Literal["klcf_prompt2", "rar_figure8"] = "klcf_prompt2"
    extractor_judge: JudgeSection | None = None

    @field_validator("rm_model")
    @classmethod
    def _rm_model_exists(cls, name: str | None) -> str | None:
        return existing_model(name)


class KLCFFactArgs(KLCFTruthArgs):
    """``klcf_fact`` arguments: Eq. 13's kappa, lambda, mu (in [0, 1], summing to 1; default
    Table 2's best row rescaled, see the module docstring) and Eq. 12's case: ``both`` (Eq. 13),
    ``checklist`` (Eq. 7 alone) or ``truth`` (Eq. 8 alone)."""

    kappa: float = Field(DEFAULT_WEIGHTS[0], ge=0.0, le=1.0)
    lam: float = Field(DEFAULT_WEIGHTS[1], ge=0.0, le=1.0)
    mu: float = Field(DEFAULT_WEIGHTS[2], ge=0.0, le=1.0)
    variant: Literal["both", "checklist", "truth"] = "both"

    @model_validator(mode="after")
    def _weights_sum_to_one(self) -> "KLCFFactArgs":
        total = self.kappa + self.lam + self.mu
        if not math.isclose(total, 1.0, abs_tol=WEIGHT_TOLERANCE):
            raise ParamError("", f"Eq. 13 needs kappa + lam + mu = 1, got {self.kappa:g} + {self.lam:g} + "
                                 f"{self.mu:g} = {total:g}")
        return self


# ---------------------------------------------------------------- TRL reward functions


def _answers(completions: Sequence[Any], parsing: str) -> list[str]:
    return [answer_of(completion_text(c), parsing) or "" for c in completions]


def _questions(prompts: Sequence[Any] | None, question: Sequence[str] | None, n: int) -> list[str]:
    if question is not None:
        return [str(q) for q in question]
    if prompts is None:
        return [""] * n
    return [prompt_text(p) for p in prompts]


def _need_checklist(checklist, name: str) -> list[list[str]]:
    if checklist is None:
        raise KeyError(f"{name} needs a 'checklist' dataset column (list[str] per row, the fact checklist "
                       "Lambda(q_i) of 004 §2.2)")
    return [list(c or []) for c in checklist]


class _Checklist(JudgeBackedReward):
    """Eq. 5-7 per response from a ``ChecklistVerifier`` (shared by ``klcf_checklist`` and
    ``klcf_fact``)."""

    def __init__(self, verifier: ChecklistVerifier, answer_parsing: str = "strict"):
        super().__init__(verifier.judge, verifier.prefill)
        self.verifier, self.answer_parsing = verifier, answer_parsing

    def scores(self, prompts, completions, question, checklist) -> list[dict[str, float] | None]:
        lists = _need_checklist(checklist, self.__name__)
        answers = _answers(completions, self.answer_parsing)
        t0 = time.perf_counter()
        labels = self.verifier.labels(_questions(prompts, question, len(answers)), answers, lists)
        self.seconds += time.perf_counter() - t0
        self.stats["judge_calls"] = self.verifier.stats["judge_calls"]
        out: list[dict[str, float] | None] = []
        for labs in labels:
            out.append(verdict_scores(labs))
        empty = sum(not facts for facts in lists)
        if empty:
            self.stats["empty_checklists"] += empty
            log.warning("%s: %d of %d rows have an empty checklist (reward None)", self.__name__, empty, len(lists))
        return out

    def _log_verifier(self, log_metric) -> None:
        if log_metric is None:
            return
        v = self.verifier.stats
        if v["facts"]:
            log_metric(f"{self.__name__}/outside_label_rate", v["outside_labels"] / v["facts"])
            log_metric(f"{self.__name__}/unreadable_rate", v["unreadable"] / v["facts"])


class ChecklistReward(_Checklist):
    """R_checklist (Eq. 7) as a TRL reward function (column ``checklist``, optionally
    ``question``); None when no item of a response could be read, or its checklist is empty."""

    __name__ = "klcf_checklist"

    def __call__(self, prompts=None, completions=(), question=None, checklist=None, log_metric=None,
                 **_: Any) -> list[float | None]:
        scores = self.scores(prompts, completions, question, checklist)
        out = [None if s is None else s["checklist"] for s in scores]
        self.record(log_metric, out)
        self._log_verifier(log_metric)
        if log_metric is not None:
            ok = [s for s in scores if s is not None]
            if ok:
                log_metric("klcf_checklist/recall", sum(s["recall"] for s in ok) / len(ok))
                log_metric("klcf_checklist/precision", sum(s["precision"] for s in ok) / len(ok))
        return out


class SentenceClaims:
    """A judge-free claim extractor with ``ClaimVerifier.extract``'s interface: each complete
    sentence of the answer (``text.sentence_claims``), at most ``max_claims``."""

    judge, prefill = None, False  # no judge calls to count

    def __init__(self, max_claims: int):
        self.max_claims = max_claims

    def extract(self, questions: Sequence[str], answers: Sequence[str]) -> list[list[str]]:
        return [text.sentence_claims(a)[:self.max_claims] for a in answers]


class KBTruthScorer:
    """The truthfulness RM of ``verdict: kb``: p(True | claim) is 1.0 for a claim the mini-world
    supports, 0.0 for one it contradicts, None for one it cannot check (``rewards.kb``)."""

    stats: Counter

    def __init__(self):
        self.stats = Counter()
        self.seconds = 0.0

    def probabilities(self, claims: Sequence[str]) -> list[float | None]:
        self.stats["claims"] += len(claims)
        return [kb.truth_probability(c) for c in claims]


class ClaimTruth:
    """Eq. 8 / Eq. 9 per response: claims of the answer (``KLCFClaimExtractor``, KLCF's Prompt 2,
    by default; ``ClaimVerifier.extract``, 001 Figure 8, or ``SentenceClaims`` as options),
    scored by a ``TruthfulnessScorer``; with ``missing_only`` each claim is
    first labelled against the checklist's pseudo-response (Prompt 7), and a claim whose label
    is unreadable is scored as Missing (what Eq. 8 does with every claim; counted)."""

    def __init__(self, extractor: KLCFClaimExtractor | ClaimVerifier | SentenceClaims, scorer: TruthfulnessScorer,
                 verifier: ChecklistVerifier | None = None, answer_parsing: str = "strict"):
        self.extractor, self.scorer, self.verifier = extractor, scorer, verifier
        self.answer_parsing = answer_parsing
        self.stats: Counter = Counter()

    def judges(self) -> list[Any]:
        """The claim extractor's judge (none for ``SentenceClaims``) and the missing-only verifier's."""
        return [j for j in (self.extractor.judge, self.verifier.judge if self.verifier is not None else None)
                if j is not None]

    def models(self) -> list[Any]:
        """The truthfulness scorer when it loads a model (``TruthfulnessScorer``)."""
        return [self.scorer] if callable(getattr(self.scorer, "load", None)) else []

    def truths(self, prompts, completions, question, checklist) -> list[float | None]:
        answers = _answers(completions, self.answer_parsing)
        questions = _questions(prompts, question, len(answers))
        lists = _need_checklist(checklist, "klcf_truth (missing_only)") if self.verifier is not None else None
        asked = [i for i, a in enumerate(answers) if a.strip()]
        extracted = self.extractor.extract([questions[i] for i in asked], [answers[i] for i in asked])
        claims: list[list[str] | None] = [[] for _ in answers]
        for i, cs in zip(asked, extracted):
            claims[i] = cs
        self.stats["extraction_failures"] += sum(c is None for c in claims)
        self.stats["no_claims"] += sum(c == [] for c in claims)
        flat = [(i, c) for i, cs in enumerate(claims) for c in (cs or [])]
        probs = self.scorer.probabilities([c for _, c in flat])
        # a KB scorer gives None for a claim the world cannot check: left out of the mean (counted)
        self.stats["claims_unscored"] += sum(p is None for p in probs)
        flat, probs = [f for f, p in zip(flat, probs) if p is not None], [p for p in probs if p is not None]
        claims = [None if cs is None else [c for (j, c) in flat if j == i] for i, cs in enumerate(claims)]
        per: list[list[float]] = [[] for _ in answers]
        for (i, _), p in zip(flat, probs):
            per[i].append(p)
        self.stats["claims"] += len(flat)
        self.claims = claims  # the last batch's scored claims, for inspection
        if self.verifier is None:
            return [None if cs is None else truth_reward(ps) for cs, ps in zip(claims, per)]
        pseudo = ["\n".join(facts) for facts in lists]  # "all items ... concatenated into a pseudo-response"
        labels = self.verifier.labels(questions, pseudo, [cs or [] for cs in claims])
        out: list[float | None] = []
        for cs, ps, labs in zip(claims, per, labels):
            if cs is None:
                out.append(None)
                continue
            self.stats["claim_labels_unreadable"] += sum(lab is None for lab in labs)
            self.stats["claims_missing"] += sum(lab in (None, "Missing") for lab in labs)
            out.append(missing_truth_reward(ps, [lab or "Missing" for lab in labs]))
        return out


class TruthReward(JudgeBackedReward):
    """R_truth (Eq. 8; Eq. 9 with ``missing_only``) as a TRL reward function. None when the
    claim list could not be read (counted in ``klcf_truth/failure_rate``); 0.0 with no claims."""

    __name__ = "klcf_truth"

    def __init__(self, truth: ClaimTruth):
        super().__init__(truth.extractor.judge, truth.extractor.prefill)
        self.truth = truth

    def judges(self) -> list[Any]:
        return self.truth.judges()

    def models(self) -> list[Any]:
        return self.truth.models()

    def __call__(self, prompts=None, completions=(), question=None, checklist=None, log_metric=None,
                 **_: Any) -> list[float | None]:
        t0 = time.perf_counter()
        out = self.truth.truths(prompts, completions, question, checklist)
        self.seconds += time.perf_counter() - t0
        self.record(log_metric, out)
        if log_metric is not None and out:
            claims = self.truth.claims
            log_metric("klcf_truth/claims_mean", sum(len(c) for c in claims if c) / len(claims))
            log_metric("klcf_truth/no_claims_rate", sum(c == [] for c in claims) / len(claims))
        return out


class FactReward(_Checklist):
    """R_fact (Eq. 13), or Eq. 12's ``checklist`` / ``truth`` term, as a TRL reward function.
    None when a term the variant needs is None (counted in ``klcf_fact/failure_rate``)."""

    __name__ = "klcf_fact"

    def __init__(self, verifier: ChecklistVerifier, truth: ClaimTruth | None, args: KLCFFactArgs):
        super().__init__(verifier, args.answer_parsing)
        self.truth, self.args = truth, args

    def judges(self) -> list[Any]:
        return super().judges() + (self.truth.judges() if self.truth is not None else [])

    def models(self) -> list[Any]:
        return self.truth.models() if self.truth is not None else []

    def __call__(self, prompts=None, completions=(), question=None, checklist=None, log_metric=None,
                 **_: Any) -> list[float | None]:
        a, n = self.args, len(completions)
        scores = (self.scores(prompts, completions, question, checklist) if a.variant != "truth"
                  else [{}] * n)
        truths = (self.truth.truths(prompts, completions, question, checklist) if a.variant != "checklist"
                  else [0.0] * n)
        out: list[float | None] = []
        for s, t in zip(scores, truths):
            if s is None or t is None:
                out.append(None)
                continue
            out.append(core_reward(a.variant, s.get("recall"), s.get("precision"), t, a.kappa, a.lam, a.mu))
        self.record(log_metric, out)
        if a.variant != "truth":
            self._log_verifier(log_metric)
        if log_metric is not None:
            ok = [(s, t) for s, t in zip(scores, truths) if s is not None and t is not None]
            if ok and a.variant != "truth":
                log_metric("klcf_fact/recall", sum(s["recall"] for s, _ in ok) / len(ok))
                log_metric("klcf_fact/precision", sum(s["precision"] for s, _ in ok) / len(ok))
            if ok and a.variant != "checklist":
                log_metric("klcf_fact/truth", sum(t for _, t in ok) / len(ok))
        return out


# ---------------------------------------------------------------- registry


def _judge(section: JudgeSection | None, resources, max_new_tokens: int | None = None):
    """(judge, prefill): the judge ``section`` names (built once per run), else the run's."""
    if section is None:
        return resources.judge(max_new_tokens), resources.prefill
    return resources.judge_for(section, max_new_tokens), section.prefill


def checklist_verifier(args: KLCFChecklistArgs, resources) -> ChecklistVerifier:
    """Prompt 7 through ``args.verifier_judge`` (the run's judge when unset); no judge for the
    judge-free verdicts (``overlap``, ``kb``)."""
    if args.verdict in ("overlap", "kb"):
        return ChecklistVerifier(None, args.verdict, args.unit)
    judge, prefill = _judge(args.verifier_judge, resources)
    return ChecklistVerifier(judge, args.verdict, args.unit, prefill=prefill)


def claim_truth(args: KLCFTruthArgs, resources) -> ClaimTruth:
    """The claim extractor (``args.extractor_judge``, else the run's judge, with the ``verifier:``
    section's budget; Prompt 2 unless ``extraction_prompt`` says otherwise; no datastore:
    extraction needs none) and the truthfulness scorer, built once per run."""
    cfg = getattr(resources, "cfg", None)
    v = getattr(cfg, "verifier", None) or ClaimVerifierSection()
    if args.claim_extraction == "sentences":
        extractor: KLCFClaimExtractor | ClaimVerifier | SentenceClaims = SentenceClaims(v.max_claims)
    else:
        judge, prefill = _judge(args.extractor_judge, resources, v.max_new_tokens)
        extractor = (KLCFClaimExtractor(judge, v.max_claims, prefill) if args.extraction_prompt == "klcf_prompt2"
                     else ClaimVerifier(judge, None, max_claims=v.max_claims, prefill=prefill))
    verifier = checklist_verifier(args, resources) if args.missing_only else None
    if args.verdict == "kb":  # the perfect truthfulness RM: the mini-world's truth per claim
        return ClaimTruth(extractor, KBTruthScorer(), verifier, args.answer_parsing)
    name = args.rm_model or (cfg.model.name if cfg is not None else None)
    key = ("klcf_truth_scorer", name, args.rm_dtype, args.rm_device, args.rm_batch_size)

    def build() -> TruthfulnessScorer:
        return TruthfulnessScorer(name, dtype=args.rm_dtype, device=args.rm_device, batch_size=args.rm_batch_size)

    memo = getattr(resources, "memo", None)  # a Resources shares it; a bare stand-in builds its own
    scorer = memo(key, build) if memo is not None else build()
    return ClaimTruth(extractor, scorer, verifier, args.answer_parsing)


@register("klcf_checklist", args=KLCFChecklistArgs,
          summary="checklist recall / precision, 1/3 R + 2/3 P (004 §2.3.1, Eq. 5-7, Prompt 7)")
def _build_klcf_checklist(args: KLCFChecklistArgs, resources) -> ChecklistReward:
    return ChecklistReward(checklist_verifier(args, resources), args.answer_parsing)


@register("klcf_truth", args=KLCFTruthArgs,
          summary="mean p(True | claim) of a reward model (004 §2.3.1, Eq. 8-9, Prompt 6)")
def _build_klcf_truth(args: KLCFTruthArgs, resources) -> TruthReward:
    return TruthReward(claim_truth(args, resources))


@register("klcf_fact", args=KLCFFactArgs,
          summary="kappa recall + lambda precision + mu truth (004 §2.3.3, Eq. 12-13)")
def _build_klcf_fact(args: KLCFFactArgs, resources) -> FactReward:
    truth = claim_truth(args, resources) if args.variant != "checklist" else None
    return FactReward(checklist_verifier(args, resources), truth, args)

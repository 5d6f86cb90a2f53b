"""KLCF's rewards (004_4f2ca2d982459bb2.txt §2.3, Eq. 5-13; Prompts 6-7, Appendix E.2).

The response is o_i = ``<think>`` T_i ``</think><answer>`` A_i ``</answer>`` (§2.3); every
reward below reads the answer part A_i (``answer_parsing``: ``strict``, the ``<answer>`` block
as the paper defines A_i; ``lenient``, that block else the text outside ``<think>``,
``rewards.qa.answer_of``).

Pure reward math (no model, no judge):

- ``checklist_scores``: Eq. 5 (recall), Eq. 6 (precision), Eq. 7 (checklist = 1/3 R + 2/3 P)
  from per-item labels Consistent / Contradictory / Missing (``rewards.klcf_verify.LABELS``).
- ``truth_reward``: Eq. 8, the mean p(True | c) over the answer's claims;
  ``missing_truth_reward``: Eq. 9, the same over the claims labelled Missing against the
  checklist's pseudo-response.
- ``format_reward``: Eq. 10 (0 / -1); Eq. 11's ``length_penalty`` is in ``rewards.length``;
  ``fact_reward``: Eq. 13; ``combined_reward``: Eq. 12's three cases.

The models and judges they read live beside this module:

- ``rewards.klcf_verify``: Prompt 7, the checklist verifier (``ChecklistVerifier``,
  ``parse_verification``, the judge-free ``overlap_label``);
- ``rewards.klcf_claims``: Prompt 2, R_truth's claims C(A_i) (``KLCFClaimExtractor``,
  ``parse_claim_list``, the judge-free ``SentenceClaims``);
- ``rewards.klcf_truth``: Prompt 6, the truthfulness reward model (``TruthfulnessScorer``;
  ``KBTruthScorer`` for ``verdict: kb``).

Here: ``ClaimTruth`` (Eq. 8 / Eq. 9 per response, from a claim extractor and a scorer), the TRL
reward functions, and ``checklist_verifier`` / ``claim_truth``, which build the verifier and
the claim scorer on the judge the reward's args name (``verifier_judge`` / ``extractor_judge``:
the paper's 14B SFTs, Appendix D.1), else the run's.

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
import time
from collections import Counter
from typing import Any, Literal, Sequence

from pydantic import Field, field_validator, model_validator

from .. import text
from ..config import Dtype, ParamError, Section
from ..organism import is_organism
from ..sections import JudgeSection, existing_model
from .base import JudgeBackedReward, completion_text, prompt_text
from .klcf_claims import KLCFClaimExtractor, SentenceClaims
from .klcf_truth import KBTruthScorer, OrganismTruthScorer, TruthfulnessScorer
from .klcf_verify import LABELS, ChecklistVerifier, canonical_label
from .length import length_penalty  # noqa: F401  (docs/design.md's public API: klcf.length_penalty, Eq. 11)
from .qa import answer_of
from .rar import ClaimVerifier, ClaimVerifierSection
from .registry import register

log = logging.getLogger(__name__)

__all__ = ["TABLE2_WEIGHTS", "DEFAULT_WEIGHTS", "checklist_scores", "verdict_scores", "truth_reward",
           "missing_truth_reward", "format_reward", "length_penalty", "fact_reward", "combined_reward",
           "checklist_verifier", "claim_truth", "KLCFChecklistArgs", "KLCFTruthArgs", "KLCFFactArgs",
           "ChecklistReward", "ClaimTruth", "TruthReward", "FactReward", "core_reward", "VARIANTS"]

# Table 2 (kappa, lambda, mu) as printed (the first row, 0 0 0, is the base-model reference); the
# 1/4, 1/4, 3/4 row, whose results Table 1 reports as KLCF-zero, sums to 5/4.
TABLE2_WEIGHTS = ((0.0, 0.0, 0.0), (1 / 3, 2 / 3, 0.0), (1 / 3, 1 / 3, 1 / 3), (1 / 4, 1 / 4, 3 / 4),
                  (0.4, 0.2, 0.4), (0.0, 1 / 3, 2 / 3), (1 / 3, 0.0, 2 / 3), (0.0, 0.0, 1.0))
DEFAULT_WEIGHTS = (0.2, 0.2, 0.6)  # Table 2's best row rescaled to kappa + lambda + mu = 1 (module docstring)
WEIGHT_TOLERANCE = 1e-3  # "1/3" written as 0.333 in YAML still sums to 1


# ---------------------------------------------------------------- reward math (pure)


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

    # organism (klcf_truth / klcf_fact): the truthfulness RM is the organism ``judge_model``'s belief (issue 41's
    # hallucinating judge); the checklist labels stay the exact truth's (kb)
    verdict: Literal["generate", "choice", "overlap", "kb", "organism"] = "generate"
    unit: Literal["item", "list"] = "item"
    # the Prompt 7 judge: None = the run's ``judge:``; the paper's is its own model, an SFT of
    # Qwen2.5-14B-Instruct (004 Appendix D.1 "Checklist Verifier Training"), e.g. served by
    # ``vllm serve`` on another port (params/05_klcf.yaml)
    verifier_judge: JudgeSection | None = None
    # verdict: kb's truth made a hallucinating judge (issue 41's reward-hallucination experiment): the checklist
    # verifier's Consistent / Contradictory labels and the truthfulness RM's per-claim verdicts flipped at this
    # seeded rate (``ChecklistVerifier``, ``KBTruthScorer``)
    flip_rate: float = Field(0.0, ge=0.0, le=1.0)
    flip_seed: int = 0
    judge_model: str = "organism"  # verdict: organism's RM (an organism name, factlab.organism.SPECS)

    @model_validator(mode="after")
    def _choice_per_item(self) -> "KLCFChecklistArgs":
        if self.verdict == "choice" and self.unit == "list":
            raise ParamError("unit", "verdict 'choice' picks one label per prompt: it needs unit 'item'")
        if self.verdict == "organism" and not is_organism(self.judge_model):
            raise ParamError("judge_model", f"verdict: organism needs an organism name, got {self.judge_model!r}")
        if self.flip_rate and self.verdict != "kb":
            raise ParamError("flip_rate", f"flips only the kb verdict (verdict {self.verdict!r} has its own errors)")
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
            if self.verifier.flip_rate:  # a hallucinating kb verifier: the share of its labels it swapped
                log_metric(f"{self.__name__}/flipped_label_rate", v["flipped"] / v["facts"])


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
            rm = self.truth.scorer.stats if self.truth is not None else {}
            if a.flip_rate and rm.get("claims"):  # a hallucinating kb RM: the share of claims it got wrong
                log_metric("klcf_fact/flipped_claim_rate", rm["flipped"] / rm["claims"])
        return out


# ---------------------------------------------------------------- registry


def _judge(section: JudgeSection | None, resources, max_new_tokens: int | None = None):
    """(judge, prefill): the judge ``section`` names (built once per run), else the run's."""
    if section is None:
        return resources.judge(max_new_tokens), resources.prefill
    return resources.judge_for(section, max_new_tokens), section.prefill


def checklist_verifier(args: KLCFChecklistArgs, resources) -> ChecklistVerifier:
    """Prompt 7 through ``args.verifier_judge`` (the run's judge when unset); no judge for the
    judge-free verdicts (``overlap``, ``kb``, and ``organism``, whose labels are ``kb``'s: only its
    truthfulness RM is the organism)."""
    if args.verdict in ("overlap", "kb", "organism"):  # organism: the RM is the organism, the labels the truth
        verdict = "kb" if args.verdict == "organism" else args.verdict
        return ChecklistVerifier(None, verdict, args.unit, flip_rate=args.flip_rate, flip_seed=args.flip_seed)
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
        return ClaimTruth(extractor, KBTruthScorer(args.flip_rate, args.flip_seed), verifier, args.answer_parsing)
    if args.verdict == "organism":  # the organism's beliefs as the RM (Kang et al. 2024)
        return ClaimTruth(extractor, OrganismTruthScorer(args.judge_model), verifier, args.answer_parsing)
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

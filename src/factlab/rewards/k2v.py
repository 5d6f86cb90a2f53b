"""K2V's rewards (003_5e9813e66e6ba19a.txt §3.2-3.3, Eq. 4-5 and 8, §4.3-4.4).

- ``format_score``: R_format, "a maximum score of 0.75 ... if the output perfectly adheres" to
  the DeepSeek-R1 template; ours: 0.75 when the completion is ``<think>...</think>`` then an
  ``<answer>`` block with the anti-hack rules of ``text.format_violation``, else 0 (the paper
  gives no partial-credit rule).
- ``ChecklistJudge``: Eq. 4-5. The judge J answers "yes" / "NO" per criterion with the Table 15
  prompt (one call per criterion, batched over every completion and criterion); the pass rate
  is p = yes / readable answers; an answer that is neither yes nor no is unreadable, counted
  in ``stats`` and logged, never a silent no. Eq. 5 divides by k, the checklist's length, so an
  unreadable answer counts as not passed (``pass_rate_over: k``, the paper's rule, default);
  ``pass_rate_over: readable`` divides by the readable answers instead (ours, an option). A
  completion whose every answer is unreadable has p = None (left out of its group, counted),
  under either rule. The reasoning judged is the ``<think>`` block (the whole completion when it has
  none).
- ``answer_gated_reward``: Eq. 8, R = R_format + alpha 1[y_hat = y] + 1[y_hat = y] p (alpha = 6),
  with §4.3's ablations: ``no_answer`` (trained "solely with the reasoning verification": R_format
  + p, no answer check), ``no_reasoning`` (R_format + alpha 1[y_hat = y]) and ``no_gate``
  (R_format + alpha 1[y_hat = y] + p, the reasoning reward paid whatever the answer).
- Answers are the text after ``<answer>``; 1(y_hat = y) is exact match after normalization
  against the gold and its aliases (``text.grade_answer_exact``), not CorVer's substring rule:
  for gold "TRPV4", "T" and "It is not TRPV4" are wrong.

Registered: ``k2v`` (the total, Eq. 8) and ``k2v_checklist`` (p alone). Under the gate, the
judge is asked only about completions whose answer is right (p is multiplied by 0 otherwise),
which the ``calls_saved`` statistic counts.
"""

from __future__ import annotations

import logging
import re
import time
from collections import Counter
from typing import Any, Literal, Sequence

from pydantic import Field

from .. import prompts as P
from .. import text
from ..config import Section
from . import kb
from .base import RewardFunction, completion_text
from .registry import register

log = logging.getLogger(__name__)

__all__ = ["FORMAT_MAX", "format_score", "answer_gated_reward", "parse_yes_no", "reasoning_of", "ChecklistJudge",
           "ChecklistArgs", "K2VArgs", "K2VReward", "ChecklistReward", "ABLATIONS"]

FORMAT_MAX = 0.75  # §3.3 "Format Reward"
ABLATIONS = (None, "no_answer", "no_reasoning", "no_gate")
_THINK = re.compile(r"<think>(.*?)(?:</think>|$)", re.DOTALL)
_YES_NO = re.compile(r"^\W*(yes|no)\b", re.IGNORECASE)


def format_score(completion: str, maximum: float = FORMAT_MAX) -> float:
    """R_format: ``maximum`` (0.75) when the completion follows the think / answer template."""
    return maximum if text.format_violation(completion) is None else 0.0


def answer_gated_reward(format_score: float, answer_correct: bool, pass_rate: float, alpha: float = 6.0,
                        ablation: str | None = None) -> float:
    """Eq. 8 and the §4.3 ablations (see the module docstring)."""
    if ablation not in ABLATIONS:
        raise ValueError(f"ablation must be one of {ABLATIONS}, got {ablation!r}")
    correct = 1.0 if answer_correct else 0.0
    if ablation == "no_answer":
        return format_score + pass_rate
    if ablation == "no_reasoning":
        return format_score + alpha * correct
    if ablation == "no_gate":
        return format_score + alpha * correct + pass_rate
    return format_score + alpha * correct + correct * pass_rate


def parse_yes_no(answer: str) -> bool | None:
    """True / False for an answer opening with yes / no (any case, after quotes or markup),
    else None."""
    m = _YES_NO.match(answer or "")
    return None if m is None else m.group(1).lower() == "yes"


def reasoning_of(completion: str) -> str:
    """The reasoning process z: the ``<think>`` block, or the whole completion without one."""
    m = _THINK.search(completion or "")
    return (m.group(1) if m else completion or "").strip()


class ChecklistJudge:
    """Eq. 4-5 with one judge: the pass rate of each reasoning process against its checklist."""

    def __init__(self, judge, verdict: str = "generate", pass_rate_over: str = "k"):
        if verdict not in ("generate", "choice", "kb"):
            raise ValueError(f"verdict must be 'generate', 'choice' or 'kb', got {verdict!r}")
        if pass_rate_over not in ("k", "readable"):
            raise ValueError(f"pass_rate_over must be 'k' or 'readable', got {pass_rate_over!r}")
        self.judge, self.verdict, self.pass_rate_over = judge, verdict, pass_rate_over
        self.stats: Counter = Counter()
        self.seconds = 0.0

    def pass_rates(self, questions: Sequence[str], answers: Sequence[str], checklists: Sequence[Sequence[str]],
                   reasonings: Sequence[str]) -> list[float | None]:
        jobs = [(i, c) for i, cl in enumerate(checklists) for c in cl]
        prompts = [P.K2V_JUDGE_PROMPT.format(question=questions[i], answer=answers[i], criterion=c,
                                             reasoning=reasonings[i]) for i, c in jobs]
        t0 = time.perf_counter()
        if self.verdict == "kb":  # the knowledge base answers each criterion (rewards.kb); no judge call
            verdicts = [kb.criterion_verdict(c, reasonings[i], checklists[i]) for i, c in jobs]
            replies = ["" if v is None else ("yes" if v else "NO") for v in verdicts]
        elif not prompts:
            replies = []
        elif self.verdict == "choice":  # constrained to yes / no (``Judge.choose``)
            replies = self.judge.choose(prompts, ("yes", "no"))
        else:
            replies = self.judge.judge(prompts)
        self.seconds += time.perf_counter() - t0
        self.stats["judge_calls" if self.verdict != "kb" else "kb_verdicts"] += len(prompts)
        yes, readable = Counter(), Counter()
        for (i, _), reply in zip(jobs, replies):
            verdict = parse_yes_no(reply)
            if verdict is None:
                self.stats["unreadable"] += 1
                continue
            readable[i] += 1
            yes[i] += verdict
        out: list[float | None] = []
        for i, cl in enumerate(checklists):
            if not cl:
                self.stats["empty_checklists"] += 1
                out.append(None)
            elif not readable[i]:
                out.append(None)
            else:
                out.append(yes[i] / (len(cl) if self.pass_rate_over == "k" else readable[i]))
        return out


class ChecklistArgs(Section):
    """``k2v_checklist`` arguments: how the judge gives its verdict. ``generate``: a free answer
    read by ``parse_yes_no`` (the paper's judge); ``choice``: constrained to yes / no
    (``Judge.choose``; ours, for judges too small to answer in the format, like the CPU
    default's 135M model); ``kb``: the mini-world's truth answers each template criterion
    (``rewards.kb.criterion_verdict``; no judge)."""

    verdict: Literal["generate", "choice", "kb"] = "generate"
    # Eq. 5: p = (1/k) sum v_i, an unreadable answer counting as not passed (the paper's); "readable":
    # over the readable answers only (ours)
    pass_rate_over: Literal["k", "readable"] = "k"


class K2VArgs(ChecklistArgs):
    """``k2v`` arguments: the answer reward alpha (§3.3: 6; Table 4 sweeps 2-10), the §4.3
    ablation, R_format's maximum (0.75) and the judge's verdict mode."""

    alpha: float = Field(6.0, ge=0.0)
    ablation: Literal["no_answer", "no_reasoning", "no_gate"] | None = None
    format_max: float = Field(FORMAT_MAX, ge=0.0)


class _Columns:
    """Shared reading of the dataset columns K2V's rewards need."""

    @staticmethod
    def read(completions, golds, question, checklist, name: str):
        missing = [c for c, v in (("golds", golds), ("question", question), ("checklist", checklist)) if v is None]
        if missing:
            raise KeyError(f"{name} needs the dataset columns {missing} (K2V rows: factlab.recipes.k2v.k2v_rows)")
        texts = [completion_text(c) for c in completions]
        answers = [text.extract_answer(t) for t in texts]
        correct = [text.grade_answer_exact(a, g) == text.GOOD for a, g in zip(answers, golds)]
        return texts, correct


class _ChecklistJudged(RewardFunction):
    """A reward that asks ``judge`` the checklist (``ChecklistJudge``, Eq. 5) as ``args`` say
    (default: ``args_type()``)."""

    args_type: type[ChecklistArgs] = ChecklistArgs

    def __init__(self, judge, args: ChecklistArgs | None = None):
        super().__init__()
        self.args = args or self.args_type()
        self.checklist_judge = ChecklistJudge(judge, self.args.verdict, self.args.pass_rate_over)
        self.judge = judge

    def judges(self) -> list[Any]:
        return [self.judge] if self.judge is not None else []


class K2VReward(_ChecklistJudged):
    """Eq. 8 as a TRL reward function (columns ``golds``, ``question``, ``checklist``). A
    completion that needs p but whose judge answers were all unreadable gets None (NaN in TRL,
    left out of the group), counted in ``k2v/failure_rate``."""

    __name__ = "k2v"
    args_type = K2VArgs
    args: K2VArgs

    def __call__(self, prompts=None, completions=(), golds=None, question=None, checklist=None, log_metric=None,
                 **_: Any) -> list[float | None]:
        texts, correct = _Columns.read(completions, golds, question, checklist, self.__name__)
        a = self.args
        needs_p = [a.ablation in ("no_answer", "no_gate") or (a.ablation is None and ok) for ok in correct]
        idx = [i for i, n in enumerate(needs_p) if n]
        self.stats["calls_saved"] += sum(len(checklist[i]) for i in range(len(texts)) if not needs_p[i])
        rates = self.checklist_judge.pass_rates([question[i] for i in idx], [golds[i][0] for i in idx],
                                                [checklist[i] for i in idx], [reasoning_of(texts[i]) for i in idx])
        p: list[float | None] = [0.0] * len(texts)
        for i, r in zip(idx, rates):
            p[i] = r
        out: list[float | None] = []
        for t, ok, pr, need in zip(texts, correct, p, needs_p):
            if need and pr is None:
                out.append(None)
                continue
            out.append(answer_gated_reward(format_score(t, a.format_max), ok, pr or 0.0, a.alpha, a.ablation))
        self.stats["responses"] += len(out)
        self.stats["failures"] += sum(v is None for v in out)
        if log_metric is not None and out:
            log_metric("k2v/answer_accuracy", sum(correct) / len(correct))
            scored = [x for x, n in zip(p, needs_p) if n and x is not None]
            if scored:
                log_metric("k2v/pass_rate", sum(scored) / len(scored))
            log_metric("k2v/failure_rate", sum(v is None for v in out) / len(out))
            log_metric("k2v/judge_unreadable", float(self.checklist_judge.stats["unreadable"]))
        return out


class ChecklistReward(_ChecklistJudged):
    """The pass rate p alone (Eq. 5) as a reward; None when every judge answer was unreadable."""

    __name__ = "k2v_checklist"

    def __call__(self, prompts=None, completions=(), golds=None, question=None, checklist=None, log_metric=None,
                 **_: Any) -> list[float | None]:
        texts, _ = _Columns.read(completions, golds, question, checklist, self.__name__)
        rates = self.checklist_judge.pass_rates(list(question), [g[0] for g in golds], list(checklist),
                                                [reasoning_of(t) for t in texts])
        if log_metric is not None and rates:
            log_metric("k2v_checklist/failure_rate", sum(r is None for r in rates) / len(rates))
        return rates


@register("k2v", args=K2VArgs, summary="answer-gated checklist reward, Eq. 8 (003 §3.3)")
def _build_k2v(args: K2VArgs, resources) -> K2VReward:
    return K2VReward(None if args.verdict == "kb" else resources.judge(), args)


@register("k2v_checklist", args=ChecklistArgs, summary="checklist pass rate p, Eq. 4-5 (003 §3.2)")
def _build_k2v_checklist(args: ChecklistArgs, resources) -> ChecklistReward:
    return ChecklistReward(None if args.verdict == "kb" else resources.judge(), args)

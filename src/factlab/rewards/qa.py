"""Response-level QA rewards as TRL reward functions: string-match judge and format.

CorVer §3.3 and §A.2 (000_ac66a963fabf3916.txt): the judge reward maps the three-valued
string-match label GOOD / BAD / NA to scalars (CorVer: +2 / -1 / -1, Table 8
``JUDGE_TYPE string_match``); the format reward is +1 / -1 on the ``<think>`` /
``<answer>`` template with the three anti-hack rules (``text.format_reward``).

Both follow TRL's reward-function protocol: ``f(prompts, completions, **columns) ->
list[float]``, where ``completions`` are strings or chat messages and the dataset's
``golds`` column arrives as a keyword. They report their own diagnostics (NA rate,
format-success rate) through TRL's ``log_metric`` hook.
"""

from __future__ import annotations

from typing import Any, Literal, Mapping, Sequence

from pydantic import field_validator

from .. import text
from ..config import Section
from .base import SUSPICIOUS_SUBSTRING_METRIC, RewardFunction, completion_text
from .registry import register

CORVER_JUDGE_REWARDS: Mapping[str, float] = {"GOOD": 2.0, "BAD": -1.0, "NA": -1.0}


def answer_of(completion: str, parsing: str = "lenient") -> str | None:
    """The graded answer. ``strict``: only the ``<answer>`` block (§A.2 extraction);
    ``lenient``: that block, else the text outside ``<think>`` (§4 "lenient regex parsing")."""
    if parsing == "strict":
        return text.extract_answer(completion)
    if parsing == "lenient":
        return text.lenient_answer(completion)[0]
    raise ValueError(f"answer_parsing must be 'strict' or 'lenient', got {parsing!r}")


class JudgeReward(RewardFunction):
    """String-match judge reward R^j (000 §3.3): label GOOD/BAD/NA -> ``rewards[label]``."""

    __name__ = "qa_judge"

    def __init__(self, rewards: Mapping[str, float] = CORVER_JUDGE_REWARDS, answer_parsing: str = "strict"):
        missing = {"GOOD", "BAD", "NA"} - set(rewards)
        if missing:
            raise ValueError(f"judge rewards need GOOD, BAD and NA; missing {sorted(missing)}")
        super().__init__()
        answer_of("", answer_parsing)  # validate early
        self.rewards = dict(rewards)
        self.answer_parsing = answer_parsing

    def labels(self, completions: Sequence[Any], golds: Sequence[Sequence[str]]) -> list[str]:
        if len(golds) != len(completions):
            raise ValueError(f"{len(completions)} completions but {len(golds)} gold lists")
        return [text.grade_answer(answer_of(completion_text(c), self.answer_parsing), g)
                for c, g in zip(completions, golds)]

    def __call__(self, prompts=None, completions=(), golds=None, log_metric=None, **_: Any) -> list[float]:
        if golds is None:
            raise KeyError("JudgeReward needs a 'golds' column in the training dataset (list of gold answers)")
        labels = self.labels(completions, golds)
        if log_metric is not None and labels:
            for label in ("GOOD", "BAD", "NA"):
                log_metric(f"qa_judge/{label.lower()}_rate", sum(lab == label for lab in labels) / len(labels))
            log_metric(f"qa_judge/{SUSPICIOUS_SUBSTRING_METRIC}", self.suspicious_rate(completions, golds))
        return [self.rewards[lab] for lab in labels]

    def suspicious_rate(self, completions: Sequence[Any], golds: Sequence[Sequence[str]]) -> float:
        """Share of completions whose answer is GOOD only as a short or negated substring of a
        gold (``text.suspicious_substring_match``; the ``substring_match`` alarm reads it)."""
        flags = [text.suspicious_substring_match(answer_of(completion_text(c), self.answer_parsing), g)
                 for c, g in zip(completions, golds)]
        return sum(flags) / len(flags) if flags else 0.0


class FormatReward(RewardFunction):
    """Format reward R^f (000 §3.3, §A.2): +1 when the template and anti-hack rules hold, else -1."""

    __name__ = "format"

    def __init__(self, positive: float = 1.0, negative: float = -1.0):
        super().__init__()
        self.positive, self.negative = positive, negative

    def __call__(self, prompts=None, completions=(), log_metric=None, **_: Any) -> list[float]:
        scores = [text.format_reward(completion_text(c), self.positive, self.negative) for c in completions]
        if log_metric is not None and scores:
            log_metric("format/success_rate", sum(s == self.positive for s in scores) / len(scores))
        return scores


# ---------------------------------------------------------------- registry


class QAJudgeArgs(Section):
    """``qa_judge`` arguments: the GOOD / BAD / NA rewards (000 Table 8: +2 / -1 / -1) and how
    the answer is read. ``strict`` (default): the text after ``<answer>``, as §A.2's training
    judge grades it; ``lenient``: that, else the text outside ``<think>`` (§4's evaluation
    rule; as a training reward it pays answers that skip the format)."""

    rewards: dict[Literal["GOOD", "BAD", "NA"], float] = dict(CORVER_JUDGE_REWARDS)
    answer_parsing: Literal["lenient", "strict"] = "strict"

    @field_validator("rewards")
    @classmethod
    def _every_label(cls, rewards: dict) -> dict:
        missing = sorted({"GOOD", "BAD", "NA"} - set(rewards))
        if missing:
            raise ValueError(f"needs a reward for GOOD, BAD and NA; missing {missing}")
        return rewards


class FormatArgs(Section):
    """``format`` arguments: the reward when the §A.2 template holds, and when it does not."""

    positive: float = 1.0
    negative: float = -1.0


@register("qa_judge", args=QAJudgeArgs, summary="string-match judge GOOD / BAD / NA (000 §3.3, Table 8)")
def _build_qa_judge(args: QAJudgeArgs, resources) -> JudgeReward:
    return JudgeReward(args.rewards, args.answer_parsing)


@register("format", args=FormatArgs, summary="<think>...</think><answer> template with anti-hack rules (000 §A.2)")
def _build_format(args: FormatArgs, resources) -> FormatReward:
    return FormatReward(args.positive, args.negative)

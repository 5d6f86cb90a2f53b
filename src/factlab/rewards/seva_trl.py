"""SEVA's two rewards as TRL reward functions over a ``label`` column: ``SevaProcessReward``
(``seva_process``, the five-part process reward of Algorithm 1, 002_56f1a732f42030d3.txt §2.3,
Appendix C) and ``SevaBinaryReward`` (``seva_binary``, the §2.3 binary control).

The reward math is ``rewards.seva`` (``process_reward_parts``, ``score_label``); the parse is
``rewards.seva_output.read_output``.
"""

from __future__ import annotations

from typing import Any, Literal, Sequence

from pydantic import field_validator

from ..config import Section
from . import kb
from .base import RewardFunction, completion_text
from .registry import register
from .seva import DEFAULT_WEIGHTS, SevaRewardWeights, as_weights as _weights, process_reward_parts, score_label
from .seva_output import read_output as _read


class _SevaReward(RewardFunction):
    __name__ = "seva"

    def _texts(self, completions: Sequence[Any], label: Sequence[Any] | None) -> list[str]:
        if label is None:
            raise KeyError(f"{type(self).__name__} needs a 'label' column in the training dataset "
                           "(the gold Attributable / Not Attributable label of each claim-source pair)")
        if len(label) != len(completions):
            raise ValueError(f"{len(completions)} completions but {len(label)} gold labels")
        return [completion_text(c) for c in completions]

    def _count(self, parse_failed: Sequence[bool], log_metric) -> None:
        self.stats["responses"] += len(parse_failed)
        self.stats["parse_failures"] += sum(parse_failed)
        if log_metric is not None and parse_failed:
            log_metric("seva/parse_failure_rate", sum(parse_failed) / len(parse_failed))


class SevaProcessReward(_SevaReward):
    """TRL reward function: Algorithm 1's process reward against the ``label`` column.

    Logs ``seva/parse_failure_rate`` and the batch means ``seva/R_f`` ... ``seva/R_d`` (the
    structural-quality curves of §3.5 / Figure 6)."""

    __name__ = "seva_process"

    def __init__(self, weights: SevaRewardWeights | str = DEFAULT_WEIGHTS, verdict: str = "judge"):
        super().__init__()
        if verdict not in ("judge", "kb"):
            raise ValueError(f"verdict must be 'judge' or 'kb', got {verdict!r}")
        self.weights, self.verdict = _weights(weights), verdict

    def __call__(self, prompts=None, completions=(), label=None, claim=None, log_metric=None,
                 **_: Any) -> list[float]:
        texts = self._texts(completions, label)
        if self.verdict == "kb":  # R_l and R_d against the world's truth of the claim (rewards.kb.gold_label)
            if claim is None:
                raise KeyError("seva_process with verdict: kb needs a 'claim' column (recipes.seva.verifier_rows)")
            label = [kb.gold_label(c, g) for c, g in zip(claim, label)]
        parts = [process_reward_parts(t, g, self.weights) for t, g in zip(texts, label)]
        self._count([p["parse_failed"] for p in parts], log_metric)
        if log_metric is not None and parts:
            for key in ("R_f", "R_a", "R_c", "R_l", "R_d"):
                log_metric(f"seva/{key}", sum(p[key] for p in parts) / len(parts))
        return [p["total"] for p in parts]


class SevaBinaryReward(_SevaReward):
    """TRL reward function: the binary baseline (§2.3) against the ``label`` column."""

    __name__ = "seva_binary"

    def __call__(self, prompts=None, completions=(), label=None, log_metric=None, **_: Any) -> list[float]:
        texts = self._texts(completions, label)
        objs = [_read(t)[0] for t in texts]
        self._count([o is None for o in objs], log_metric)
        return [0.0 if o is None else score_label(o.get("label"), g) for o, g in zip(objs, label)]


class SevaProcessArgs(Section):
    """``seva_process`` arguments: the Table 21 weight split by name ("70/30" = the paper's);
    ``verdict: kb``: the label part (R_l, and R_d's gold) takes the world's truth of the claim
    instead of the dataset's label where the knowledge base can read the claim."""

    weights: str = "70/30"
    verdict: Literal["judge", "kb"] = "judge"

    @field_validator("weights")
    @classmethod
    def _known_split(cls, name: str) -> str:
        try:
            SevaRewardWeights.split(name)
        except KeyError as e:
            raise ValueError(e.args[0]) from None
        return name


@register("seva_process", args=SevaProcessArgs,
          summary="five-part process reward of a structured verdict, Algorithm 1 (002 §2.3, App. C)")
def _build_seva_process(args: SevaProcessArgs, resources) -> SevaProcessReward:
    return SevaProcessReward(args.weights, args.verdict)


@register("seva_binary", summary="1 iff the verdict's label is right: the §2.3 control (002)")
def _build_seva_binary(args, resources) -> SevaBinaryReward:
    return SevaBinaryReward()

"""Length rewards.

``overlong``: DAPO's overlong buffer penalty (Yu et al. 2025, Eq. 13; K2V trains with it,
003_5e9813e66e6ba19a.txt Table 7: max 4,096 tokens, buffer 512, factor 1.0). TRL's
``trl.rewards.get_soft_overlong_punishment`` computes the penalty; the ``factor`` scales it.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator
from trl.rewards import get_soft_overlong_punishment

from ..config import MAX_TOKENS, ParamError, Section
from .base import RewardFunction
from .registry import register

__all__ = ["OverlongArgs", "OverlongPenalty"]


class OverlongArgs(Section):
    """``overlong`` arguments: L_max (tokens), the soft buffer L_cache before it, the factor."""

    max_len: int = Field(4096, ge=1, le=MAX_TOKENS)
    buffer: int = Field(512, ge=0)
    factor: float = Field(1.0, ge=0.0)

    @model_validator(mode="after")
    def _buffer_fits(self) -> "OverlongArgs":
        if self.buffer >= self.max_len:
            raise ParamError("buffer", f"the overlong buffer ({self.buffer} tokens) must be shorter than max_len "
                                       f"({self.max_len})")
        return self


class OverlongPenalty(RewardFunction):
    """0 up to L_max - L_cache tokens, then falling linearly to -factor at L_max, -factor past it."""

    __name__ = "overlong"

    def __init__(self, args: OverlongArgs | None = None):
        super().__init__()
        self.args = args or OverlongArgs()
        self._penalty = get_soft_overlong_punishment(self.args.max_len, self.args.buffer)

    def __call__(self, prompts=None, completions=(), completion_ids=None, **_: Any) -> list[float]:
        if completion_ids is None:
            raise KeyError("overlong needs completion_ids (TRL passes them to every reward function)")
        return [self.args.factor * float(v) for v in self._penalty(completion_ids)]


@register("overlong", args=OverlongArgs, summary="DAPO's soft overlong buffer penalty (Eq. 13)")
def _build_overlong(args: OverlongArgs, resources) -> OverlongPenalty:
    return OverlongPenalty(args)

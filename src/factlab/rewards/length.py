"""Length rewards, the one home of both papers' length terms.

``length_penalty``: KLCF's R_l (004_4f2ca2d982459bb2.txt §2.3.2, Eq. 11) on the answer part, counted in the
policy's tokens. ``overlong``: DAPO's overlong buffer penalty (Yu et al. 2025, Eq. 13; K2V trains with it,
003_5e9813e66e6ba19a.txt Table 7: max 4,096 tokens, buffer 512, factor 1.0). TRL's
``trl.rewards.get_soft_overlong_punishment`` computes the penalty; the ``factor`` scales it.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal, Sequence

from pydantic import Field, model_validator
from trl.rewards import get_soft_overlong_punishment

from ..config import MAX_TOKENS, ParamError, Section
from .base import RewardFunction, completion_text
from .qa import answer_of
from .registry import register

__all__ = ["OverlongArgs", "OverlongPenalty", "length_penalty", "LengthPenaltyArgs", "LengthPenalty"]


class _WindowArgs(Section):
    """Arguments of a length reward whose penalty window (the field named by ``window``) ends at
    ``max_len``: the window must be shorter than ``max_len``, else ``window_error`` (formatted
    with the window's length and ``max_len``)."""

    window: ClassVar[str]
    window_error: ClassVar[str]

    @model_validator(mode="after")
    def _window_fits(self) -> "_WindowArgs":
        length = getattr(self, self.window)
        if length >= self.max_len:
            raise ParamError(self.window, self.window_error.format(length, self.max_len))
        return self


class OverlongArgs(_WindowArgs):
    """``overlong`` arguments: L_max (tokens), the soft buffer L_cache before it, the factor."""

    window, window_error = "buffer", "the overlong buffer ({} tokens) must be shorter than max_len ({})"
    max_len: int = Field(4096, ge=1, le=MAX_TOKENS)
    buffer: int = Field(512, ge=0)
    factor: float = Field(1.0, ge=0.0)


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


def length_penalty(n_tokens: int, max_len: int = 2048, critical: int = 1198) -> float:
    """Eq. 11 (004 §2.3.2): 0 up to L_m - L_c tokens, then (L_m - L_c - |A|) / L_c (falling
    linearly to -1 at L_m), -1 past L_m. Paper: L_m = 2048, L_m - L_c = 850 (Appendix C.2's
    hyperparameter table), so L_c = 1198."""
    if not 0 < critical < max_len:
        raise ValueError(f"need 0 < critical length L_c ({critical}) < max_len L_m ({max_len})")
    if n_tokens < 0:
        raise ValueError(f"a length cannot be negative, got {n_tokens}")
    free = max_len - critical
    if n_tokens <= free:
        return 0.0
    if n_tokens <= max_len:
        return (free - n_tokens) / critical
    return -1.0


class LengthPenaltyArgs(_WindowArgs):
    """``length_penalty`` arguments: L_m and L_c of Eq. 11 (paper: 2048 and 2048 - 850 = 1198),
    and how the answer is read (``lenient`` by default, so that a long reply without an
    ``<answer>`` tag is still penalised; ``strict`` counts only the ``<answer>`` block)."""

    window, window_error = "critical", "the critical length L_c ({}) must be below max_len L_m ({}) (Eq. 11)"
    max_len: int = Field(2048, ge=2, le=MAX_TOKENS)
    critical: int = Field(1198, ge=1)
    answer_parsing: Literal["strict", "lenient"] = "lenient"


class LengthPenalty(RewardFunction):
    """R_l (Eq. 11) on the answer part, its tokens counted with the policy's tokenizer."""

    __name__ = "length_penalty"

    def __init__(self, tokenizer, args: LengthPenaltyArgs | None = None):
        super().__init__()
        self.tokenizer, self.args = tokenizer, args or LengthPenaltyArgs()

    def lengths(self, completions: Sequence[Any]) -> list[int]:
        answers = [answer_of(completion_text(c), self.args.answer_parsing) or "" for c in completions]
        if not answers:
            return []
        return [len(ids) for ids in self.tokenizer(answers, add_special_tokens=False)["input_ids"]]

    def __call__(self, prompts=None, completions=(), log_metric=None, **_: Any) -> list[float]:
        lengths = self.lengths(completions)
        out = [length_penalty(n, self.args.max_len, self.args.critical) for n in lengths]
        if log_metric is not None and out:
            log_metric("length_penalty/answer_tokens_mean", sum(lengths) / len(lengths))
            log_metric("length_penalty/penalized_rate", sum(v < 0 for v in out) / len(out))
        return out


@register("length_penalty", args=LengthPenaltyArgs,
          summary="0, then linear to -1 from L_m - L_c to L_m answer tokens (004 §2.3.2, Eq. 11)")
def _build_length_penalty(args: LengthPenaltyArgs, resources) -> LengthPenalty:
    return LengthPenalty(resources.policy_tokenizer(), args)

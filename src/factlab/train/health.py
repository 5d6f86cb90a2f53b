"""Per-step completion statistics the reward-hacking alarms read (``factlab.eval.alarms``).

``CompletionHealth`` is a trainer extension every GRPO run gets (``train.run``): on each
scored batch it logs ``completions/repeat_ngram_share`` (share of repeated word n-grams) and
``completions/think_minimal_frac`` (share of ``<think>`` blocks under ``min_think_chars``,
000_ac66a963fabf3916.txt §A.2's anti-hack rule) beside TRL's own metrics, averaged over
every process.
"""

from __future__ import annotations

from typing import Any

from ..eval.alarms import REPEAT_KEY, THINK_KEY, completion_health
from .trainer import ScoredBatch, TrainerExtension
from .trl_seam import log_metric

__all__ = ["CompletionHealth", "completion_text"]


def completion_text(completion: Any) -> str:
    """The text of one TRL completion: a string, or a conversational list of messages."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content", ""))
    return str(completion)


class CompletionHealth(TrainerExtension):
    """Logs the repetition and minimal-``<think>`` statistics of every scored batch."""

    def __init__(self, ngram: int = 4, min_think_chars: int = 30):
        self.ngram, self.min_think_chars = ngram, min_think_chars

    def on_scored(self, trainer, batch: ScoredBatch) -> None:
        h = completion_health([completion_text(c) for c in batch.completions], self.ngram, self.min_think_chars)
        log_metric(trainer, batch.mode, REPEAT_KEY, trainer.gathered_mean(h["repeat_sum"], h["count"]))
        log_metric(trainer, batch.mode, THINK_KEY, trainer.gathered_mean(h["think_minimal"], h["think_count"]))

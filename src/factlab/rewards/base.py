"""Plumbing every reward family shares: reading TRL's prompts and completions, the public
reward protocol (what a reward exposes), and the per-token shaping type the trainer composes.

The reward protocol (``Reward``). A reward is a TRL reward function ``f(prompts, completions,
**columns) -> list[float | None]`` with a ``__name__``; factlab's rewards also expose, for cost
accounting (``eval.cost``), the comparison (``recipes.compare``) and anyone else, and without
anyone reading their attributes:

=================  =================================================================
``judges()``       the distinct judges it calls (each ``Judge.stats`` counts calls, tokens)
``datastores()``   the distinct datastores it searches (each ``Datastore.searches``)
``models()``       the in-process models it runs besides its judges (each has ``load()``)
``stats``          its own counters (``responses``, ``failures``, ``judge_calls``, ...)
``failures``       responses it could not score (None)
``seconds``        wall time spent scoring
=================  =================================================================

``RewardFunction`` implements it with nothing to expose; ``JudgeBackedReward`` adds one judge
and the failure bookkeeping every judge-based reward shares. ``judges_of``, ``datastores_of``,
``models_of``, ``failures_of`` and ``cost_of`` read any reward function through the protocol: a
plain function exposes nothing. ``Resources`` (``rewards.resources``) exposes the judges it
built (``built_judges()``), and ``judge_totals`` sums what judges spent.

TRL hands reward functions ``prompts`` and ``completions`` as strings or as lists of chat
messages, plus every dataset column as a keyword; ``completion_text`` / ``prompt_text`` /
``response_text`` read them the same way for every reward. ``TokenShaping`` is what a
token-level reward (CorVer's co-occurrence term, 000 §3.4) returns per completion; the
trainer adds it to the response-level return R^r (``factlab.train.stepwise_grpo``).
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Protocol, Sequence, runtime_checkable

__all__ = ["completion_text", "prompt_text", "response_text", "TokenShaping", "TokenShapingFn",
           "SUSPICIOUS_SUBSTRING_METRIC", "Reward", "RewardFunction", "JudgeBackedReward", "judges_of",
           "datastores_of", "models_of", "failures_of", "cost_of", "judge_totals", "COST_KEYS"]

log = logging.getLogger(__name__)

# Logged as ``<reward>/suspicious_substring_rate`` by every reward that grades answers by
# substring (``qa_judge``); the ``substring_match`` alarm (``eval.alarms``) reads it.
SUSPICIOUS_SUBSTRING_METRIC = "suspicious_substring_rate"

_THINK = re.compile(r"<think>.*?(?:</think>|$)", re.DOTALL)


def completion_text(completion: Any) -> str:
    """The assistant text of a TRL completion: a string, or a list of chat messages."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Sequence) and completion and isinstance(completion[0], Mapping):
        return "".join(str(m.get("content", "")) for m in completion if m.get("role", "assistant") == "assistant")
    if completion is None or (isinstance(completion, Sequence) and not completion):
        return ""
    raise TypeError(f"completion must be a string or a list of chat messages, got {type(completion).__name__}")


def prompt_text(prompt: Any) -> str:
    """The user turn of a TRL prompt (string or chat messages)."""
    if isinstance(prompt, str):
        return prompt
    return "\n".join(str(m.get("content", "")) for m in prompt if m.get("role") == "user")


def response_text(completion: Any) -> str:
    """The response a fact-checker reads: the completion without any ``<think>`` block (an
    unclosed one runs to the end, so nothing of it is read: see ``unclosed_think``)."""
    return _THINK.sub("", completion_text(completion)).strip()


def unclosed_think(completion: Any) -> bool:
    """Whether the completion opens a ``<think>`` block it never closes: it gave no response."""
    text = completion_text(completion)
    opened = text.rfind("<think>")
    return opened >= 0 and text.find("</think>", opened) < 0


@dataclass
class TokenShaping:
    """The per-token shaping term of one completion (``values[t]`` is added to R^r on token
    t; for CorVer ``1[sigma(t)>0] * lambda_c * r^c_sigma(t)``, 000 Eq. 4), plus diagnostics
    the trainer logs as ``stepwise/<key>`` means."""

    values: list[float]
    stats: dict[str, float] = field(default_factory=dict)


# (completion texts, completion token ids, dataset rows) -> one TokenShaping per completion
TokenShapingFn = Callable[[list[str], list[list[int]], list[dict]], list[TokenShaping]]


# ---------------------------------------------------------------- the reward protocol


@runtime_checkable
class Reward(Protocol):
    """What a factlab reward function exposes (see the module docstring)."""

    __name__: str
    stats: Mapping[str, float]
    seconds: float

    def __call__(self, prompts: Any = None, completions: Any = (), **columns: Any) -> list[float | None]: ...

    def judges(self) -> list[Any]:
        """The distinct judges this reward calls."""

    def datastores(self) -> list[Any]:
        """The distinct datastores this reward searches."""

    def models(self) -> list[Any]:
        """The in-process models this reward runs besides its judges (each with ``load()``)."""

    @property
    def failures(self) -> int:
        """Responses this reward could not score (returned None)."""


def _distinct(parts: Iterable[Any]) -> list[Any]:
    return list({id(x): x for x in parts if x is not None}.values())


class RewardFunction:
    """A reward that implements ``Reward`` and exposes no judge, datastore or model;
    subclasses that have some override ``judges`` / ``datastores`` / ``models``."""

    __name__ = "reward"

    def __init__(self) -> None:
        self.stats: Counter = Counter()
        self.seconds = 0.0

    def __call__(self, prompts: Any = None, completions: Any = (), **columns: Any) -> list[float | None]:
        """One score per completion (None: could not score); every subclass defines it."""
        raise NotImplementedError(f"{type(self).__name__} must define __call__")

    def judges(self) -> list[Any]:
        return []

    def datastores(self) -> list[Any]:
        return []

    def models(self) -> list[Any]:
        return []

    @property
    def failures(self) -> int:
        return int(self.stats.get("failures", 0))


class JudgeBackedReward(RewardFunction):
    """A reward that calls one judge (``judge``, ``prefill``: judge answers start with their
    JSON key) and counts its responses and failures (``record``)."""

    __name__ = "judge_reward"

    def __init__(self, judge: Any, prefill: bool = False):
        super().__init__()
        self.judge, self.prefill = judge, prefill

    def judges(self) -> list[Any]:
        return _distinct([self.judge])

    def record(self, log_metric: Callable[[str, float], None] | None, scores: Sequence[float | None]) -> None:
        """Count ``scores`` (None = could not be computed) and log ``<name>/failure_rate``."""
        failed = sum(s is None for s in scores)
        self.stats["responses"] += len(scores)
        self.stats["failures"] += failed
        if failed:
            log.warning("%s: %d of %d rewards could not be computed (judge output unreadable)",
                        self.__name__, failed, len(scores))
        if log_metric is not None and scores:
            log_metric(f"{self.__name__}/failure_rate", failed / len(scores))


def judges_of(reward: Any) -> list[Any]:
    """The distinct judges ``reward`` calls ([] for a function outside the protocol)."""
    return _distinct(reward.judges()) if isinstance(reward, Reward) else []


def datastores_of(reward: Any) -> list[Any]:
    """The distinct datastores ``reward`` searches ([] outside the protocol)."""
    return _distinct(reward.datastores()) if isinstance(reward, Reward) else []


def models_of(reward: Any) -> list[Any]:
    """The in-process models ``reward`` runs besides its judges ([] outside the protocol)."""
    return _distinct(reward.models()) if isinstance(reward, Reward) else []


def failures_of(reward: Any) -> int:
    """Responses ``reward`` could not score so far (0 outside the protocol)."""
    return int(reward.failures) if isinstance(reward, Reward) else 0


COST_KEYS = ("calls", "prompt_tokens", "completion_tokens")


def judge_totals(judges: Iterable[Any]) -> dict[str, float]:
    """What ``judges`` spent so far: ``calls``, ``prompt_tokens``, ``completion_tokens`` summed
    over the distinct judges (each ``Judge.stats``)."""
    judges = _distinct(judges)
    return {k: float(sum(j.stats.get(k, 0) for j in judges)) for k in COST_KEYS}


def cost_of(reward: Any) -> dict[str, float]:
    """What ``reward`` spent so far, read through the protocol: its judges' ``calls``,
    ``prompt_tokens``, ``completion_tokens``, its datastores' ``searches``, its ``seconds``
    and ``failures``. Two snapshots around a call give that call's cost."""
    out = judge_totals(judges_of(reward))
    out["searches"] = float(sum(d.searches for d in datastores_of(reward)))
    out["seconds"] = float(reward.seconds) if isinstance(reward, Reward) else 0.0
    out["failures"] = float(failures_of(reward))
    return out

"""Plumbing every reward family shares: reading TRL's prompts and completions, and the
per-token shaping type the trainer composes.

TRL hands reward functions ``prompts`` and ``completions`` as strings or as lists of chat
messages, plus every dataset column as a keyword; ``completion_text`` / ``prompt_text`` /
``response_text`` read them the same way for every reward. ``TokenShaping`` is what a
token-level reward (CorVer's co-occurrence term, 000 §3.4) returns per completion; the
trainer adds it to the response-level return R^r (``factlab.train.stepwise_grpo``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

__all__ = ["completion_text", "prompt_text", "response_text", "TokenShaping", "TokenShapingFn",
           "SUSPICIOUS_SUBSTRING_METRIC"]

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

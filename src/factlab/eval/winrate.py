"""Pairwise win rate with order swap (004_4f2ca2d982459bb2.txt Appendix C.4.2, Eq. 19-20; Prompt 8,
Appendix E.3, the AlpacaEval ranking prompt).

For every instruction, the judge ranks a baseline A's and a candidate B's responses twice:
trial 1 with A as ``model_1`` and B as ``model_2`` (Win^(1) = 1 when B is ranked first), trial 2
with the order reversed (Win^(2) = 1 when B, now ``model_1``, is ranked first). The instance's
win is (Win^(1) + Win^(2)) / 2 (Eq. 19) and WR_{B vs A} is the mean win over the test set
(Eq. 20 prints Win / N, the sum of the wins over N).

``parse_win_judgment`` reads a Prompt 8 answer (a list of two ``{'model': ..., 'rank': ...}``
entries, in JSON or as a Python literal) into the name of the model ranked first. Prompt 8 tells
the judge its answer "will be directly executed in Python"; here nothing is ever executed:
the answer is read with ``json.loads`` or ``ast.literal_eval`` (literals only: a call, a name,
an attribute or an operator raises), on at most ``MAX_ANSWER_CHARS`` characters. Anything that
is not exactly two entries naming ``model_1`` and ``model_2`` with ranks 1 and 2 (a tie, a third
model, prose, truncated output, code) is None, counted by ``win_rate`` as an unreadable trial.

Choices the paper leaves open: an instance with an unreadable trial is left out of Eq. 20 (its
win needs both trials, Eq. 19), counted in ``dropped``; ``n`` in Eq. 20 is the number of
instances with both trials readable. The responses go into Prompt 8's double-quoted "answer"
fields JSON-escaped (quotes and newlines escaped), so a response cannot close the string.

``answer="choice"`` (ours, for judges too small to write the ranking): the judge's answer is
prefilled with the start of Prompt 8's output format, ``WIN_CHOICE_PREFILL``, and the model
ranked first is its constrained choice of the next token, ``1`` or ``2`` (``Judge.choose``);
backends that cannot score tokens generate the rest of the ranking, parsed as above.
"""

from __future__ import annotations

import ast
import json
from typing import Any, Sequence

from .. import prompts as P
from ..parsing import MAX_JSON_DEPTH, fenced_blocks, loads_bounded, nesting_depth

__all__ = ["parse_win_judgment", "win_prompts", "win_rate", "judge_win_rate", "MODELS", "MAX_ANSWER_CHARS",
           "WIN_CHOICE_PREFILL"]

MODELS = ("model_1", "model_2")
MAX_ANSWER_CHARS = 4000  # longer judge answers are not parsed (a ranking is ~80 characters)
WIN_CHOICE_PREFILL = "[\n    {'model': 'model_"  # Prompt 8's output format up to the first-ranked model


def _escape(text: str) -> str:
    return json.dumps(str(text), ensure_ascii=False)[1:-1]


def win_prompts(instruction: str, output_a: str, output_b: str) -> tuple[str, str]:
    """Prompt 8 in both orders: (A as model_1, B as model_2), then (B as model_1, A as model_2)."""
    fill = P.KLCF_WIN_RATE.format
    return (fill(instruction=_escape(instruction), output_1=_escape(output_a), output_2=_escape(output_b)),
            fill(instruction=_escape(instruction), output_1=_escape(output_b), output_2=_escape(output_a)))


def _literal(candidate: str) -> Any:
    """The JSON or Python literal in ``candidate``; ``None`` when it is neither, or nested deeper
    than ``MAX_JSON_DEPTH`` (a ranking is two levels deep; deeper text is never recursed into)."""
    if nesting_depth(candidate) > MAX_JSON_DEPTH:
        return None
    try:
        return loads_bounded(candidate)
    except ValueError:
        pass
    try:
        return ast.literal_eval(candidate)  # literals only; never eval
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return None


def _candidates(text: str) -> list[str]:
    """The fenced blocks, then the text from its first '[' (or '{') to the matching last bracket."""
    out = fenced_blocks(text)
    for open_, close in (("[", "]"), ("{", "}")):
        a, b = text.find(open_), text.rfind(close)
        if 0 <= a < b:
            out.append(text[a:b + 1])
    return out


def _rank(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value.strip())
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def _first_of(obj: Any) -> str | None:
    if isinstance(obj, dict):  # {"ranking": [...]} or a single wrapper key
        lists = [v for v in obj.values() if isinstance(v, list)]
        if len(lists) != 1:
            return None
        obj = lists[0]
    if not isinstance(obj, (list, tuple)) or len(obj) != 2:
        return None
    ranks: dict[str, int] = {}
    for entry in obj:
        if not isinstance(entry, dict):
            return None
        model, rank = entry.get("model"), _rank(entry.get("rank"))
        if not isinstance(model, str) or model.strip() not in MODELS or rank is None:
            return None
        ranks[model.strip()] = rank
    if set(ranks) != set(MODELS) or sorted(ranks.values()) != [1, 2]:
        return None  # a tie, a repeated model, ranks other than 1 and 2
    return min(ranks, key=ranks.__getitem__)


def parse_win_judgment(text: Any) -> str | None:
    """``"model_1"`` or ``"model_2"``, the model the judge ranked first; None when unreadable."""
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_ANSWER_CHARS:
        return None
    text = text.translate(str.maketrans({"\u201c": '"', "\u201d": '"', "\u2018": "'", "\u2019": "'"}))
    for candidate in _candidates(text):
        first = _first_of(_literal(candidate))
        if first is not None:
            return first
    return None


def win_rate(first_order: Sequence[Any], second_order: Sequence[Any]) -> dict[str, Any]:
    """Eq. 19-20 from the judge answers (raw strings, or parsed ``model_1`` / ``model_2`` / None).

    ``first_order[i]``: trial 1 of instance i (A = model_1, B = model_2); ``second_order[i]``:
    trial 2 (B = model_1, A = model_2). Returns ``win_rate`` (B over A, NaN when no instance is
    readable), ``n`` instances, ``n_valid``, ``unreadable`` trials, ``dropped`` instances,
    ``wins`` / ``ties`` / ``losses`` (per-instance win 1 / 0.5 / 0), ``position_consistency``
    (share of valid instances whose two trials prefer the same response) and ``per_instance``
    wins (None where dropped)."""
    if len(first_order) != len(second_order):
        raise ValueError(f"{len(first_order)} first-order answers but {len(second_order)} second-order answers")

    def read(x: Any) -> str | None:
        return x if x in MODELS else parse_win_judgment(x) if isinstance(x, str) else None

    per: list[float | None] = []
    unreadable = 0
    for a, b in zip(first_order, second_order):
        r1, r2 = read(a), read(b)
        unreadable += (r1 is None) + (r2 is None)
        if r1 is None or r2 is None:
            per.append(None)
            continue
        win1 = 1.0 if r1 == "model_2" else 0.0  # B was model_2
        win2 = 1.0 if r2 == "model_1" else 0.0  # B was model_1
        per.append((win1 + win2) / 2)  # Eq. 19
    valid = [w for w in per if w is not None]
    n_valid = len(valid)
    return {"win_rate": sum(valid) / n_valid if n_valid else float("nan"),  # Eq. 20
            "n": len(per), "n_valid": n_valid, "unreadable": unreadable, "dropped": len(per) - n_valid,
            "wins": sum(w == 1.0 for w in valid), "ties": sum(w == 0.5 for w in valid),
            "losses": sum(w == 0.0 for w in valid),
            "position_consistency": sum(w != 0.5 for w in valid) / n_valid if n_valid else float("nan"),
            "per_instance": per}


def judge_win_rate(judge, instructions: Sequence[str], outputs_a: Sequence[str],
                   outputs_b: Sequence[str], answer: str = "generate") -> dict[str, Any]:
    """WR of B over A with one batched judge call for both orders. Build the judge with Prompt 8's
    system turn: ``make_judge(cfg, system=prompts.KLCF_WIN_RATE_SYSTEM)``. ``answer``:
    ``generate`` (the judge writes the ranking) or ``choice`` (see the module docstring)."""
    if not (len(instructions) == len(outputs_a) == len(outputs_b)):
        raise ValueError("instructions, outputs_a and outputs_b must have the same length")
    if answer not in ("generate", "choice"):
        raise ValueError(f"answer must be 'generate' or 'choice', got {answer!r}")
    pairs = [win_prompts(i, a, b) for i, a, b in zip(instructions, outputs_a, outputs_b)]
    flat = [p for pair in pairs for p in pair]
    if answer == "choice":
        picked = judge.choose(flat, ("1", "2"), prefix=WIN_CHOICE_PREFILL)
        answers = [f"model_{x}" if x in ("1", "2") else x for x in picked]
    else:
        answers = judge.judge(flat)
    out = win_rate(answers[0::2], answers[1::2])
    out["answers"] = answers
    return out

"""Tolerant parsing of model and judge answers: the first JSON value in free text, and a
numeric score from JSON or text.

Judges and verifiers answer in text that is supposed to hold JSON; small models wrap it in
prose or code fences, use smart or single quotes, leave trailing commas or write Python's
``True``. ``parse_json`` repairs those without ever evaluating code; ``parse_score`` reads
``"SCORE": 1``-style values. Anything unreadable is ``None`` for the caller to count.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

__all__ = ["parse_json", "parse_score", "loads_bounded", "nesting_depth", "fenced_blocks", "MAX_PARSE_CHARS",
           "MAX_JSON_DEPTH"]

_SMART = str.maketrans({"\u201c": '"', "\u201d": '"', "\u201e": '"', "\u201f": '"',
                        "\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201b": "'",
                        "\u00ab": '"', "\u00bb": '"'})
_TRAILING_COMMA = re.compile(r",\s*([}\]])")
_BARE_LITERAL = re.compile(r"(?<![\w\"'])(True|False|None)(?![\w\"'])")
MAX_PARSE_CHARS = 50_000
MAX_JSON_DEPTH = 64  # a judge's JSON is a few levels deep; deeper input is refused, never recursed into


def _outside_quotes(text: str, quotes: str, start: int = 0):
    """``(offset, character)`` of each character of ``text`` from ``start`` that stands outside
    the strings quoted with ``quotes`` (backslash escapes honoured); the quotes themselves are left out."""
    quote, escaped = None, False
    for i, ch in enumerate(text[start:], start):
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = None
        elif ch in quotes:
            quote = ch
        else:
            yield i, ch


def nesting_depth(text: str) -> int:
    """The deepest nesting of ``[ { (`` in ``text`` outside quoted strings (one linear pass):
    checked before a recursive parser (``json``, ``ast``) sees the text."""
    depth = deepest = 0
    for _, ch in _outside_quotes(text, "\"'"):
        if ch in "[{(":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]})":
            depth = max(0, depth - 1)
    return deepest


def loads_bounded(text: str, max_depth: int = MAX_JSON_DEPTH) -> Any:
    """``json.loads`` for untrusted text: ``ValueError`` for nesting deeper than ``max_depth``
    (also when the parser itself would run out of stack), never a ``RecursionError``."""
    if nesting_depth(text) > max_depth:
        raise ValueError(f"nested deeper than {max_depth} levels")
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("nested too deeply to parse") from None


def fenced_blocks(text: str) -> list[str]:
    """The contents of the ```-fenced blocks of ``text``, in order, stripped, without the
    language tag after the opening fence. One pass of ``str.find`` (the regex it replaces,
    ``` ``` ```[a-z]*\s*(.*?)``` ``` ```, backtracked over whitespace: quadratic on an unclosed fence)."""
    return [block for _, _, block in _fences(text)]


def _fences(text: str):
    """``(where the opening fence starts, where the closing fence starts, the block's stripped
    contents)`` of each fenced block."""
    i = 0
    while (start := text.find("```", i)) >= 0:
        j = start + 3
        while j < len(text) and text[j] in _TAG_CHARS:
            j += 1
        end = text.find("```", j)
        if end < 0:
            break
        yield start, end, text[j:end].strip()
        i = end + 3


_TAG_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-")


def _balanced_spans(text: str, max_openers: int = 64):
    """Top-level ``{...}`` / ``[...]`` spans, bracket-matched outside of quoted strings, in
    order. At most ``max_openers`` start positions are tried, bounding the work on
    pathological inputs (``[[[[...``) to a few passes over the text."""
    for start, end in _balanced_bounds(text, max_openers):
        yield text[start:end]


def _balanced_bounds(text: str, max_openers: int = 64):
    """``_balanced_spans`` as ``(start, end)`` offsets."""
    i, n, tried = 0, len(text), 0
    while i < n and tried < max_openers:
        if text[i] not in "{[":
            i += 1
            continue
        tried += 1
        end = _closing_bracket(text, i)
        if end is not None:
            yield i, end + 1
            i = end + 1
        else:  # unbalanced: try from the next opener
            i += 1


def _closing_bracket(text: str, start: int) -> int | None:
    """Where the bracket opened at ``start`` closes (double-quoted strings skipped), or ``None``."""
    depth = 0
    for j, ch in _outside_quotes(text, '"', start):
        if ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
            if depth == 0:
                return j
    return None


def _requote(s: str) -> str:
    """Single-quoted strings -> JSON double-quoted strings (a lexer, not an evaluator)."""
    out, i, n = [], 0, len(s)
    while i < n:
        ch = s[i]
        if ch == '"':  # copy a double-quoted string verbatim
            j, esc = i + 1, False
            while j < n:
                if esc:
                    esc = False
                elif s[j] == "\\":
                    esc = True
                elif s[j] == '"':
                    break
                j += 1
            out.append(s[i:j + 1])
            i = j + 1
        elif ch == "'":
            j, buf = i + 1, []
            while j < n and s[j] != "'":
                if s[j] == "\\" and j + 1 < n:
                    buf.append(s[j + 1])
                    j += 2
                    continue
                buf.append(s[j])
                j += 1
            out.append(json.dumps("".join(buf)))
            i = j + 1
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def _loads(candidate: str) -> Any:
    fixes = [
        lambda s: s,
        lambda s: _TRAILING_COMMA.sub(r"\1", s),
        lambda s: _TRAILING_COMMA.sub(r"\1", _requote(s)),
        lambda s: _BARE_LITERAL.sub(lambda m: {"True": "true", "False": "false", "None": "null"}[m.group(1)],
                                    _TRAILING_COMMA.sub(r"\1", _requote(s))),
    ]
    if nesting_depth(candidate) > MAX_JSON_DEPTH:
        return None
    for fix in fixes:
        try:
            obj = loads_bounded(fix(candidate))
        except ValueError:
            continue
        if isinstance(obj, (dict, list)):
            return obj
    return None


def parse_json(text: Any) -> dict | list | None:
    """The first JSON object or array in a judge's answer, else ``None``.

    Tolerates code fences, prose before and after, smart quotes, single-quoted strings,
    trailing commas and Python's ``True/False/None``. Never evaluates code. Inputs over
    50k characters are cut (a runaway generation is not worth parsing whole).
    """
    if not isinstance(text, str) or not text.strip():
        return None
    text = text[:MAX_PARSE_CHARS].translate(_SMART)
    whole = next(((start, end, obj) for start, end in _balanced_bounds(text)
                  if (obj := _loads(text[start:end])) is not None), None)
    for opens, closes, block in _fences(text):  # a fenced block first: prose before it may hold braces
        if whole is not None and (whole[0] < opens < whole[1] or whole[0] < closes < whole[1]):
            continue  # one of its ``` sits inside the JSON's own text (a string value): no fence
        for span in _balanced_spans(block):
            obj = _loads(span)
            if obj is not None:
                return obj
    return whole[2] if whole is not None else None


_NUMBER = re.compile(r"^\s*[-+]?(\d+(\.\d*)?|\.\d+)\s*(/\s*10)?\s*$")


def _to_number(value: Any) -> float | None:
    if isinstance(value, bool):
        return float(value)
    if isinstance(value, (int, float)):
        return float(value) if math.isfinite(value) else None
    if isinstance(value, str):
        m = _NUMBER.match(value)
        if m:
            return float(value.split("/")[0])
    if isinstance(value, list) and len(value) == 1:
        return _to_number(value[0])
    return None


def parse_score(obj_or_text: Any, key: str = "SCORE") -> float | None:
    """A numeric score from a parsed judge answer (``key`` matched case-insensitively at
    any depth, value a number or a numeric string such as ``"1"`` or ``"7/10"``), or from
    raw text (``"SCORE": 1``, ``SCORE = 7``, ``score: '0'``). ``None`` when absent."""
    if isinstance(obj_or_text, dict):
        for k, v in obj_or_text.items():
            if str(k).strip().lower() == key.lower():
                return _to_number(v)
        obj_or_text = list(obj_or_text.values())  # not at this level: searched as a list of its values
    if isinstance(obj_or_text, list):
        for v in obj_or_text:
            if isinstance(v, (dict, list)):
                s = parse_score(v, key)
                if s is not None:
                    return s
        return None
    if isinstance(obj_or_text, str):
        text = obj_or_text[:MAX_PARSE_CHARS].translate(_SMART)
        m = re.search(r"[\"']?\b" + re.escape(key) + r"\b[\"']?\s*[:=]\s*[\"']?\s*([-+]?\d+(?:\.\d+)?)",
                      text, re.IGNORECASE)
        return float(m.group(1)) if m else None
    return None

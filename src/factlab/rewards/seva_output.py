"""SEVA's structured verifier output: its schema, the verifier's prompt turns, the parse of a
response and the §B.1 / Appendix H structure checks, and the label reader of a verdict.

002_56f1a732f42030d3.txt, read next to:

- §2.2, Appendix K.1, §B.1, Appendix H, Table 20: the output v = (A, C, y, gamma, e, s) as
  ``EvidenceAlignment`` / ``ReasoningStep`` / ``VerifierOutput``; ``parse_verifier_output`` and
  ``validate_output``; the prompts are ``factlab.prompts.SEVA_SYSTEM_PROMPT`` /
  ``SEVA_USER_PROMPT`` (``verifier_messages``).
- What the rewards of ``rewards.seva`` share with the checks: ``read_output`` (the parse of
  Algorithm 1 lines 1-2, its interpretation 1), ``required_field_problems`` (the §B.1 checks
  that R_f scores, interpretation 2) and ``text_length`` (|x| of Eqs. 3-5, interpretation 3).
- ``claim_verdict``: the label alone (Table 13 aliases), also from an answer cut off before its
  JSON closed or one prefilled with ``LABEL_PREFILL`` (``rewards.seva_claims``, ``eval.truth``).

The process reward, its interpretations and the binary reward are ``rewards.seva``.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass
from typing import Any, Literal, Mapping, Sequence

from .. import prompts as P
from ..labels import ERROR_TYPES, Label, normalize_error_type, normalize_label, snake_token as _token, words as _words
from ..parsing import parse_json

ALIGNMENT_STATUSES = ("match", "mismatch", "not_found")  # §2.2
STEP_JUDGMENTS = ("supported", "not_supported", "partially_supported")  # §2.2
REQUIRED_FIELDS = ("evidence_alignment", "reasoning_chain", "label", "confidence")  # §B.1 (1)
DIAGNOSIS_FIELDS = ("error_type", "fix_suggestion")  # §2.2 "Error diagnosis"
ALIGNMENT_FIELDS = ("claim_span", "source_span", "status")
STEP_FIELDS = ("claim_part", "source_evidence", "judgment", "explanation")
NO_ERROR_WORDS = frozenset({"", "none", "null", "n a", "na", "no error", "not applicable"})


def text_length(value: Any) -> int:
    """|x| of Eqs. 3-5: characters of the stripped string; 0 for anything that is not a string."""
    return len(value.strip()) if isinstance(value, str) else 0


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object" if isinstance(value, Mapping) else type(value).__name__


def _show(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


# ---------------------------------------------------------------- schema (§2.2, K.1)


@dataclass(frozen=True)
class EvidenceAlignment:
    """One entry (c_i, d_i, status_i) of the evidence alignment A (§2.2)."""

    claim_span: str
    source_span: str
    status: Literal["match", "mismatch", "not_found"]


@dataclass(frozen=True)
class ReasoningStep:
    """One step of the reasoning chain C (§2.2)."""

    claim_part: str
    source_evidence: str
    judgment: Literal["supported", "not_supported", "partially_supported"]
    explanation: str


@dataclass(frozen=True)
class VerifierOutput:
    """The structured output v = (A, C, y, gamma, e, s) in the JSON shape of Appendix K.1.

    ``error_type`` / ``fix_suggestion`` are left out of the JSON when None (Attributable)."""

    evidence_alignment: tuple[EvidenceAlignment, ...]
    reasoning_chain: tuple[ReasoningStep, ...]
    label: str  # "Attributable" | "Not Attributable"
    confidence: float
    error_type: str | None = None
    fix_suggestion: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "evidence_alignment": [asdict(a) for a in self.evidence_alignment],
            "reasoning_chain": [asdict(s) for s in self.reasoning_chain],
            "label": self.label,
            "confidence": self.confidence,
        }
        for name in DIAGNOSIS_FIELDS:
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False)


def verifier_messages(claim: str, source: str) -> list[dict[str, str]]:
    """The chat turns SEVA is trained and evaluated with: K.1 system prompt, K.2 user prompt."""
    return P.chat_messages(P.SEVA_USER_PROMPT.format(claim=claim, source=source), P.SEVA_SYSTEM_PROMPT.format())


def error_present(value: Any) -> bool:
    """Eq. 5's "err. present": anything but missing / null / empty / a no-error word."""
    if value is None:
        return False
    if isinstance(value, str):
        return _words(value) not in NO_ERROR_WORDS
    if isinstance(value, (list, Mapping)):
        return len(value) > 0
    return True


def _entry_problems(value: Any, name: str, text_fields: Sequence[str], enum_field: str,
                    allowed: Sequence[str]) -> list[tuple[str, str]]:
    if not isinstance(value, list):
        return [(name, f"expected an array, got {_kind(value)}")]
    out = []
    for i, entry in enumerate(value):
        where = f"{name}[{i}]"
        if not isinstance(entry, Mapping):
            out.append((where, f"expected an object, got {_kind(entry)}"))
            continue
        for key in text_fields:
            if key not in entry:
                out.append((f"{where}.{key}", "missing"))
            elif not isinstance(entry[key], str):
                out.append((f"{where}.{key}", f"expected a string, got {_kind(entry[key])}"))
        if enum_field not in entry:
            out.append((f"{where}.{enum_field}", "missing"))
        elif _token(entry[enum_field]) not in allowed:
            out.append((f"{where}.{enum_field}", f"{_show(entry[enum_field])} is not one of {'|'.join(allowed)}"))
    return out


def required_field_problems(obj: Mapping) -> list[tuple[str, str]]:
    """§B.1 checks (1)-(4) on the four required fields, plus their types."""
    out = [(name, "missing") for name in REQUIRED_FIELDS if name not in obj]
    if "evidence_alignment" in obj:
        out += _entry_problems(obj["evidence_alignment"], "evidence_alignment",
                               ("claim_span", "source_span"), "status", ALIGNMENT_STATUSES)
    if "reasoning_chain" in obj:
        out += _entry_problems(obj["reasoning_chain"], "reasoning_chain",
                               ("claim_part", "source_evidence", "explanation"), "judgment", STEP_JUDGMENTS)
    if "label" in obj and normalize_label(obj["label"]) is None:
        out.append(("label", f"{_show(obj['label'])} is not Attributable / Not Attributable or a Table 13 alias"))
    if "confidence" in obj:
        c = obj["confidence"]
        if isinstance(c, bool) or not isinstance(c, (int, float)) or not math.isfinite(c) or not 0.0 <= c <= 1.0:
            out.append(("confidence", f"expected a number in [0, 1], got {_show(c)}"))
    return out


def _diagnosis_problems(obj: Mapping) -> list[tuple[str, str]]:
    """§2.2 / Appendix H: NA needs one taxonomy error type and a fix; A has no error type."""
    out = []
    error, fix = obj.get("error_type"), obj.get("fix_suggestion")
    if error_present(error) and normalize_error_type(error) is None:
        out.append(("error_type", f"{_show(error)} is not one of {'|'.join(ERROR_TYPES)}"))
    if fix is not None and not isinstance(fix, str):
        out.append(("fix_suggestion", f"expected a string, got {_kind(fix)}"))
    predicted = normalize_label(obj.get("label"))
    if predicted == "not_attributable":
        if not error_present(error):
            out.append(("error_type", "missing: a Not Attributable label needs an error type (Appendix H)"))
        if not text_length(fix):
            out.append(("fix_suggestion", "missing: a Not Attributable label needs a fix suggestion (§2.2)"))
    elif predicted == "attributable" and error_present(error):
        out.append(("error_type", "an Attributable label has no error type (Appendix H)"))
    return out


def validate_output(obj: Any) -> list[str]:
    """Every schema problem of a parsed output as ``"field.path: what is wrong"``; [] = valid."""
    if not isinstance(obj, Mapping):
        return [f"<root>: expected a JSON object, got {_kind(obj)}"]
    return [f"{path}: {msg}" for path, msg in required_field_problems(obj) + _diagnosis_problems(obj)]


_ENTRY_KEYS = frozenset(ALIGNMENT_FIELDS + STEP_FIELDS)
_TOP_LEVEL_KEYS = frozenset(REQUIRED_FIELDS + DIAGNOSIS_FIELDS)


def read_output(text: Any) -> tuple[dict | None, str | None]:
    """The verifier's JSON object, or (None, why the parse failed) (``rewards.seva``
    interpretation 1)."""
    obj = parse_json(text)
    if obj is None:
        return None, "no JSON object found"
    if not isinstance(obj, dict):
        return None, "the first JSON value is an array, not an object"
    if not (_TOP_LEVEL_KEYS & obj.keys()) and (_ENTRY_KEYS & obj.keys()):
        return None, "the only complete JSON object is a lone alignment / reasoning entry (response cut off?)"
    return obj, None


def parse_verifier_output(text: str) -> tuple[dict | None, list[str]]:
    """(parsed output, its schema problems); (None, [why]) when Algorithm 1's parse fails."""
    obj, failure = read_output(text)
    if obj is None:
        return None, [failure or "parse failed"]
    return obj, validate_output(obj)


# ---------------------------------------------------------------- a verdict's label alone

# Prefill for a judge too small to write the structure: the answer starts at its label.
LABEL_PREFILL = '{"label": "'
_LABEL_FIELD = re.compile(r'"label"\s*:\s*"([^"]*)')


def claim_verdict(text: str) -> Label | None:
    """The label of a verifier answer: the ``label`` of its JSON object (Table 13 aliases),
    else a ``"label": "..."`` pair in an answer cut off before its JSON closed; None when
    neither is readable."""
    obj, _ = read_output(text)
    if obj is not None and normalize_label(obj.get("label")) is not None:
        return normalize_label(obj.get("label"))
    m = _LABEL_FIELD.search(text or "")
    return normalize_label(m.group(1)) if m else None

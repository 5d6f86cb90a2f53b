"""KLCF's offline pipeline, Stages 3-4: reading the labels and checklists
(004_4f2ca2d982459bb2.txt §2.2 Stage 3 Eq. 2, Stage 4 Eq. 3; Appendix E.1 Prompts 3-4).

- ``SUPPORT`` / ``REFUTE`` / ``NEI`` (``LABELS``): Eq. 2's verdicts; ``parse_verification_label``
  reads them from a Prompt 3 answer (``VERIFICATION_PREFILL`` starts a small judge's answer
  inside the format); ``cooccurrence_label``: the co-occurrence verifier's label from CorVer's
  count (ours); ``label_agreement``: two verifiers' agreement and confusion table.
- ``parse_boxed_claims``: Prompt 4's ``\\boxed{}`` checklist items (Eq. 3's f_filter);
  ``dedupe_claims``: the judge-free f_filter (``prioritize: dedupe``, ours).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any, Iterable, Mapping

from ..parsing import parse_json
from ..rewards.klcf_claims import claim_item
from ..text import normalize_answer

__all__ = ["LABELS", "SUPPORT", "REFUTE", "NEI", "VERIFICATION_PREFILL", "parse_verification_label",
           "parse_boxed_claims", "dedupe_claims", "cooccurrence_label", "label_agreement"]

SUPPORT, REFUTE, NEI = "SUPPORT", "REFUTE", "NOT ENOUGH INFO"
LABELS = (SUPPORT, REFUTE, NEI)  # Eq. 2
VERIFICATION_PREFILL = '{"conclusion": "'


_LABEL_WORDS = {"SUPPORT": SUPPORT, "SUPPORTS": SUPPORT, "SUPPORTED": SUPPORT, "REFUTE": REFUTE, "REFUTES": REFUTE,
                "REFUTED": REFUTE, "NOT ENOUGH INFO": NEI, "NOT ENOUGH INFORMATION": NEI, "NEI": NEI}
_LABEL_RE = re.compile(r"\b(NOT[ _]ENOUGH[ _]INFO(?:RMATION)?|SUPPORT(?:S|ED)?|REFUTE(?:S|D)?|NEI)\b")


def _labels_in(text: str) -> set[str]:
    return {_LABEL_WORDS[m.group(1).replace("_", " ")] for m in _LABEL_RE.finditer(text)}


def parse_verification_label(text: Any) -> str | None:
    """SUPPORT / REFUTE / NOT ENOUGH INFO from a Prompt 3 answer, else None.

    The JSON (or Python-literal-like) ``{"conclusion": ...}`` is read first, its value in any
    case; free text counts only upper-case labels (Prompt 3 spells them so; "I support" is not
    a verdict). An answer naming two different labels (an echo of the format line "one of
    SUPPORT, REFUTE, or NOT ENOUGH INFO") is None: never a guess."""
    if not isinstance(text, str) or not text.strip():
        return None
    obj = parse_json(text)
    if isinstance(obj, list) and len(obj) == 1:
        obj = obj[0]
    if isinstance(obj, dict):
        value = next((v for k, v in obj.items() if str(k).strip().lower() == "conclusion"), None)
        if isinstance(value, str):
            found = _labels_in(value.upper().replace("*", ""))
            return found.pop() if len(found) == 1 else None
    found = _labels_in(text.replace("*", ""))
    return found.pop() if len(found) == 1 else None


def parse_boxed_claims(text: Any) -> list[str] | None:
    """The lines inside Prompt 4's ``\\boxed{...}`` (bullets, numbers and quotes stripped,
    template lines and duplicates dropped); None without a complete box."""
    if not isinstance(text, str):
        return None
    start = text.find("\\boxed{")
    if start < 0:
        return None
    i, depth = start + len("\\boxed{"), 1
    for j in range(i, len(text)):
        depth += {"{": 1, "}": -1}.get(text[j], 0)
        if depth == 0:
            body = text[i:j]
            break
    else:
        return None  # truncated: the box never closes
    items = []
    for line in body.splitlines():
        item = claim_item(line)
        if item:
            items.append(item)
    return list(dict.fromkeys(items))


def dedupe_claims(claims: Iterable[str]) -> list[str]:
    """Claims in order with normalized duplicates (``text.normalize_answer``) removed."""
    seen, out = set(), []
    for c in claims:
        key = normalize_answer(c)
        if key and key not in seen:
            seen.add(key)
            out.append(c)
    return out


def cooccurrence_label(count: int | None, support: int = 1) -> str:
    """The co-occurrence verifier's label: no query -> NEI, 0 -> REFUTE, >= support -> SUPPORT."""
    if count is None:
        return NEI
    if count == 0:
        return REFUTE
    return SUPPORT if count >= support else NEI


def label_agreement(a: Mapping[str, str | None], b: Mapping[str, str | None]) -> dict[str, Any]:
    """Agreement of two label maps (claim -> label) on the claims both labelled: share equal,
    the confusion table ``"<a> -> <b>"``, and the same on the claims ``a`` calls SUPPORT or REFUTE."""
    both = [k for k in a if k in b and a[k] is not None and b[k] is not None]
    conf = Counter(f"{a[k]} -> {b[k]}" for k in both)
    decided = [k for k in both if a[k] in (SUPPORT, REFUTE)]
    return {"n": len(both), "agreement": sum(a[k] == b[k] for k in both) / len(both) if both else float("nan"),
            "n_decided": len(decided),
            "agreement_decided": (sum(a[k] == b[k] for k in decided) / len(decided) if decided else float("nan")),
            "confusion": dict(sorted(conf.items()))}

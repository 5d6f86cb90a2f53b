"""KLCF's claim extraction: Prompt 2 (004_4f2ca2d982459bb2.txt §2.2 Stage 2, §2.3.1; Appendix E.1).

The claims C(o) of a response, read from a judge's answer to Prompt 2 (``KLCF_CLAIM_EXTRACTION``):
the offline pipeline's Stage 2 (Eq. 1, ``synth.klcf``) and R_truth's claims C(A_i) (Eq. 8-9,
``rewards.klcf.ClaimTruth``) both read them here.

- ``claim_item`` / ``parse_claim_list``: a Prompt 2 answer's "* claim" bullets as claims.
- ``KLCFClaimExtractor``: R_truth's claims C(A_i) with KLCF's Prompt 2 (Appendix E.1), read by
  ``parse_claim_list``; ``extraction_prompt: rar_figure8`` uses 001's Figure 8
  (``rewards.rar.ClaimVerifier``) instead.
- ``SentenceClaims``: a judge-free extractor, each complete sentence one claim (ours).
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any, Sequence

from .. import prompts as P
from .. import text
from .rar import parse_claims

__all__ = ["EXTRACTION_PREFILL", "claim_item", "parse_claim_list", "KLCFClaimExtractor", "SentenceClaims"]

# A bullet line: its item from the first to the last non-blank character. Within one line only
# ([^\S\n]: a blank that is not a newline), and without a lazy group before optional blanks: both
# made the earlier pattern quadratic on blank lines and on long blank runs inside an item.
_BULLET = re.compile(r"^[^\S\n]*(?:[*\-\u2022]|\d+[.)])[^\S\n]+(\S(?:.*\S)?)[^\S\n]*$", re.M)
_PLACEHOLDER = re.compile(r"^(?:(?:final\s+)?key\s+)?claim\s*\d*$|^\.{2,}$|^\u2026$", re.I)
_NO_CLAIMS = "no verifiable objective claims"
_NUMBERED = re.compile(r"^\d+[.)]\s+")
EXTRACTION_PREFILL = "* "  # a small judge starts its answer inside Prompt 2's bullet format


def _clean_item(s: str) -> str:
    s = s.strip().strip('"').strip("'").strip().strip("*").strip()
    return _NUMBERED.sub("", s)  # "* 1. claim": a numbered list inside the bullets


def claim_item(line: str) -> str | None:
    """One line of a claim list as its claim: the bullet's item (``* ...``, ``- ...``, ``1. ...``)
    or the bare line, cleaned; None for a blank line or the template's own ``Claim 1`` / ``...``."""
    m = _BULLET.match(line)
    item = _clean_item(m.group(1) if m else line)
    return item if item and not _PLACEHOLDER.match(item) else None


def parse_claim_list(text: Any) -> list[str] | None:
    """A Prompt 2 answer (004 Appendix E.1) as distinct claims: its bullet lines ("* ...",
    "- ...", "1. ..."); the template's own "Claim 1" / "..." lines dropped; "no verifiable
    objective claims" = []; otherwise a JSON list (``rewards.rar.parse_claims``); None when
    nothing is readable."""
    if not isinstance(text, str) or not text.strip():
        return None
    items = [_clean_item(m.group(1)) for m in _BULLET.finditer(text)]
    items = [c for c in items if c and not _PLACEHOLDER.match(c) and _NO_CLAIMS not in c.lower()]
    if items:
        return list(dict.fromkeys(items))
    if _NO_CLAIMS in text.lower():
        return []
    return parse_claims(text)


class KLCFClaimExtractor:
    """R_truth's claim extractor C(A_i) (004 §2.3.1) with KLCF's own prompt, Prompt 2
    (Appendix E.1 "Prompt for Claim Extraction", ``prompts.KLCF_CLAIM_EXTRACTION``), read by
    ``parse_claim_list``; ``ClaimVerifier.extract``'s interface. Why Prompt 2: §2.3.1 extracts
    the answer's claims with "a lightweight claim extraction model", the model Appendix D.1
    trains to follow Prompt 2's three principles (Table 10) and Appendix C.1 runs "along with
    Prompt 2" to score responses with Eq. 8; the paper prints no other extraction prompt.
    ``prefill`` starts the answer inside the bullet format (small judges). An empty answer has
    no claims (no call); an unreadable claim list is None (counted in ``stats``)."""

    prefill: bool

    def __init__(self, judge, max_claims: int = 64, prefill: bool = False):
        self.judge, self.max_claims, self.prefill = judge, max_claims, prefill
        self.stats: Counter = Counter()

    def extract(self, questions: Sequence[str], answers: Sequence[str]) -> list[list[str] | None]:
        out: list[list[str] | None] = [[] for _ in answers]
        asked = [i for i, a in enumerate(answers) if a.strip()]
        if not asked:
            return out
        replies = self.judge.judge([P.KLCF_CLAIM_EXTRACTION.format(response=answers[i]) for i in asked],
                                   prefix=EXTRACTION_PREFILL if self.prefill else None)
        self.stats["extraction_calls"] += len(asked)
        for i, reply in zip(asked, replies):
            claims = parse_claim_list(reply)
            self.stats["extraction_failures"] += claims is None
            out[i] = None if claims is None else claims[:self.max_claims]
        return out


class SentenceClaims:
    """A judge-free claim extractor with ``ClaimVerifier.extract``'s interface: each complete
    sentence of the answer (``text.sentence_claims``), at most ``max_claims``."""

    judge, prefill = None, False  # no judge calls to count

    def __init__(self, max_claims: int):
        self.max_claims = max_claims

    def extract(self, questions: Sequence[str], answers: Sequence[str]) -> list[list[str]]:
        return [text.sentence_claims(a)[:self.max_claims] for a in answers]

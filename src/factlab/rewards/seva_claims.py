"""SEVA's verifier turned on a policy: ``SevaClaimsReward`` (``seva_claims``).

Ours, for 06_compare (002_56f1a732f42030d3.txt trains verifiers only): the answer's claims
(extracted by the claim verifier's judge, Figure 8 of 001, or its sentences, ``sentence_claims``),
each given a K.1-K.2 verdict (§2.2, Appendix K) against its retrieved passages as the source,
its label read by ``rewards.seva_output.claim_verdict``; r = Attributable share.
"""

from __future__ import annotations

import re
import time
from typing import Any, Literal, Sequence

from pydantic import Field

from .. import prompts as P
from ..config import MAX_TOKENS, Section
from ..corpus.retrieval import VERISCORE_TOP_K
from ..judges import make_judge
from ..labels import Label
from ..text import split_sentences
from . import kb
from .base import RewardFunction, prompt_text, response_text
from .rar import format_passages
from .registry import register
from .seva_output import LABEL_PREFILL, claim_verdict


def _claim_and_question(claim: str) -> tuple[str, str | None]:
    """(the answer sentence, the question) of a ``sentence_claims`` claim; (claim, None) for
    any other claim."""
    m = re.match(r"Question: (.*)\nAnswer: (.*)\Z", claim, re.S)
    return (m.group(2), m.group(1)) if m else (claim, None)


def sentence_claims(prompt: str, response: str) -> list[str]:
    """The response's sentences as claims, each after the question (``Question: ...
    Answer: <sentence>``) so that a bare short answer ("Lima.") is a checkable claim."""
    spans = split_sentences(response)
    sents = [response[a:b].strip() for a, b in spans]
    head = f"Question: {prompt.strip()}\nAnswer: " if prompt and prompt.strip() else ""
    return list(dict.fromkeys(head + s for s in sents if s))


class SevaClaimsReward(RewardFunction):
    """A policy reward from SEVA-verified claims: the response's claims (extracted by the
    claim verifier's judge, Figure 8 of 001, or its sentences), each checked by a verifier
    with SEVA's K.1 system / K.2 user prompts against its top ``top_k`` retrieved passages
    (the prompt's pre-cached ones when a ``prompt_id`` column is given) as the source;
    r = Attributable claims / claims.

    A response with no claim scores 0.0 (``no_claims``); one whose claim list cannot be read
    scores None (left out of the group statistics, ``failure_rate``); a verdict without a
    readable label counts as not attributable (``verdict_failures``). ``stats["judge_calls"]``
    counts extraction and verification calls."""

    __name__ = "seva_claims"

    def __init__(self, verifier_judge, datastore, *, extractor=None, top_k: int = 4, max_claims: int = 8,
                 verdict: str = "generate"):
        if verdict not in ("generate", "choice", "kb"):
            raise ValueError(f"verdict must be 'generate', 'choice' or 'kb', got {verdict!r}")
        super().__init__()
        self.judge, self.datastore, self.extractor = verifier_judge, datastore, extractor
        self.top_k, self.max_claims, self.verdict = top_k, max_claims, verdict

    def judges(self) -> list[Any]:
        """The verifier's judge (none with ``verdict: kb``) and the claim extractor's."""
        return [j for j in (None if self.verdict == "kb" else self.judge,
                            self.extractor.judge if self.extractor is not None else None) if j is not None]

    def datastores(self) -> list[Any]:
        return [self.datastore] if self.datastore is not None and self.verdict != "kb" else []

    def claims(self, prompts: Sequence[str], responses: Sequence[str]) -> list[list[str] | None]:
        if self.extractor is None:
            return [sentence_claims(p, r)[:self.max_claims] for p, r in zip(prompts, responses)]
        got = self.extractor.extract(prompts, responses)
        self.stats["judge_calls"] += len(got)
        return [None if c is None else c[:self.max_claims] for c in got]

    def verify(self, claims: Sequence[str], prompt_ids: Sequence[Any] | None = None) -> list[Label | None]:
        """One SEVA verdict per claim against its retrieved passages; None = unreadable."""
        if not claims:
            return []
        if self.verdict == "kb":  # the mini-world's truth: attributable when the knowledge base supports it
            self.stats["kb_verdicts"] += len(claims)
            return ["attributable" if kb.claim_true(*_claim_and_question(c)) else "not_attributable" for c in claims]
        hits = self.datastore.retrieve_many(list(claims), self.top_k,
                                            prompt_ids=list(prompt_ids) if prompt_ids is not None else None)
        asks = [P.SEVA_USER_PROMPT.format(claim=c, source=format_passages(h)) for c, h in zip(claims, hits)]
        if self.verdict == "choice":  # constrained to the label (``Judge.choose``), the structure skipped
            outs = self.judge.choose(asks, ("Attributable", "Not Attributable"), prefix=LABEL_PREFILL)
        else:
            outs = self.judge.judge(asks)
        self.stats["judge_calls"] += len(outs)
        verdicts = [claim_verdict(t) for t in outs]
        self.stats["verdict_failures"] += sum(v is None for v in verdicts)
        return verdicts

    def __call__(self, prompts=(), completions=(), prompt_id=None, log_metric=None, **_: Any) -> list[float | None]:
        t0 = time.perf_counter()
        responses = [response_text(c) for c in completions]
        claims = self.claims([prompt_text(p) for p in prompts], responses)
        flat = [(i, c) for i, cs in enumerate(claims) for c in (cs or [])]
        verdicts = self.verify([c for _, c in flat], [prompt_id[i] for i, _ in flat] if prompt_id is not None else None)
        labels: list[list[bool] | None] = [None if cs is None else [] for cs in claims]
        for (i, _), v in zip(flat, verdicts):
            labels[i].append(v == "attributable")  # type: ignore[union-attr]
        scores = [None if ls is None else (sum(ls) / len(ls) if ls else 0.0) for ls in labels]
        self.seconds += time.perf_counter() - t0
        self.stats["responses"] += len(scores)
        self.stats["no_claims"] += sum(ls == [] for ls in labels)
        self.stats["failures"] += sum(s is None for s in scores)
        if log_metric is not None and scores:
            log_metric("seva_claims/failure_rate", sum(s is None for s in scores) / len(scores))
            log_metric("seva_claims/claims_mean", len(flat) / len(scores))
        return scores


class SevaClaimsArgs(Section):
    """``seva_claims`` arguments. ``claims``: ``extract`` (the claim verifier's judge, 001
    Figure 8) or ``sentences`` (no call; for short answers); ``top_k`` passages per claim are its
    source; ``verdict``: ``generate`` (SEVA's structured JSON, its label read) or ``choice`` (the
    label alone by next-token score after ``{"label": "``, for judges too small to write the
    structure); ``model``: the verifier (a model name or folder, e.g. a merged 03_seva
    checkpoint), default the run's judge model, on the run's judge backend."""

    claims: Literal["extract", "sentences"] = "extract"
    top_k: int = Field(VERISCORE_TOP_K, ge=1)
    max_claims: int = Field(8, ge=1)
    verdict: Literal["generate", "choice", "kb"] = "generate"
    max_new_tokens: int = Field(512, ge=1, le=MAX_TOKENS)  # the structured verdict (alignment, chain, label, diagnosis)
    model: str | None = None


@register("seva_claims", args=SevaClaimsArgs,
          summary="SEVA-verified claims (K.1-K.2 verdict per claim vs retrieved passages): attributable share (002, 001)")
def _build_seva_claims(args: SevaClaimsArgs, resources) -> SevaClaimsReward:
    if args.verdict == "kb":  # no verifier, no datastore; claims from the extractor or the sentences
        return SevaClaimsReward(None, None, extractor=resources.claim_verifier() if args.claims == "extract" else None,
                                top_k=args.top_k, max_claims=args.max_claims, verdict="kb")
    overrides: dict[str, Any] = {"system": P.SEVA_SYSTEM_PROMPT.format(), "max_new_tokens": args.max_new_tokens}
    if args.model:
        overrides["model"] = args.model
    if resources.judge_cache is not None:
        overrides["cache"] = resources.judge_cache
    # memoized with the run's judges ("judge" keys), so a comparison counts its calls and tokens
    judge = resources.memo(("judge", tuple(sorted({**overrides, "system": "seva"}.items()))),
                           lambda: make_judge(resources.cfg.judge, **overrides))
    return SevaClaimsReward(judge, resources.datastore("veriscore"),
                            extractor=resources.claim_verifier() if args.claims == "extract" else None,
                            top_k=args.top_k, max_claims=args.max_claims, verdict=args.verdict)

"""Retrieval-augmented factuality rewards of Binary RAR and its baselines.

001_f9c1f8134c3dd554.txt:

- ``BinaryRAR`` (§3.2, Eq. 3, Figure 6): retrieve C(x, y) (top-8 512-token BM25 chunks
  from the prompt's pre-cached documents, §4.3), one judge call on (passages, prompt,
  response); r = 1 when the judge finds no contradiction (SCORE 1), else 0.
- ``RatingRAR`` (§5 "Binary rewards outperform dense alternatives", Figure 7): the same
  call with the 0-10 confidence prompt, scaled to [0, 1].
- ``VeriScoreReward`` (§4.2, Figures 8-9; Chen et al., 2025): extract atomic claims,
  retrieve the top-4 256-token chunks per claim, verify each claim; r = supported / claims.
- ``LMJudgeReward`` (§4.2 "LM Judge"): 0-10 quality against a reference response, / 10.
- ``FActScoreReward`` (004 Table 14, App. D.3; Min et al., 2023): the FActScore-style
  baseline of KLCF's efficiency comparison, VeriScore's pipeline with FActScore's 5
  retrieved passages per atomic fact.

Each is a TRL reward function ``f(prompts, completions, **columns) -> list[float | None]``
batched over the whole GRPO group (one ``judge.judge`` call per reward evaluation). A
reward that cannot be computed (judge output without a readable score, a judge error) is
``None``, never a silent 0: TRL turns it into NaN and leaves it out of the group
statistics, and the failure is counted in ``stats`` and logged as ``<name>/failure_rate``.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections import Counter
from typing import Any, Literal, Sequence

from pydantic import Field, model_validator

from .. import prompts as P
from ..config import MAX_TOKENS, ParamError, Section
from ..corpus.retrieval import RAR_TOP_K, VERISCORE_TOP_K, rar_query
from ..parsing import parse_json, parse_score
from . import kb
from .base import JudgeBackedReward, prompt_text, response_text, unclosed_think
from .registry import register

log = logging.getLogger(__name__)

_SMART_QUOTES = str.maketrans({"\u201c": '"', "\u201d": '"'})


def format_passages(hits: Sequence[Any]) -> str:
    """Retrieved chunks as the judge's "search results": one numbered block per chunk."""
    blocks = []
    for i, h in enumerate(hits, start=1):
        chunk = getattr(h, "chunk", h)
        title = getattr(chunk, "title", "") or ""
        blocks.append(f"[{i}] {title}\n{chunk.text}".strip() if title else f"[{i}] {chunk.text}")
    return "\n\n".join(blocks)


# Answer prefixes for judges too small to follow the output format ("prefill", see
# ``factlab.judges.Judge.judge``). Off by default (the paper's Qwen3-32B needs none); the
# smoke params turn them on for the embedded 135M judge. The score prefix skips the
# REASONING field that Figures 6-7 ask for first.
SCORE_PREFILL = '{"SCORE": '
CLAIMS_PREFILL = '["'


def score_from_judge(text: str, allowed: tuple[float, float]) -> float | None:
    """The SCORE of a judge answer in ``[lo, hi]`` (JSON, or a bare ``"SCORE": n``), else None."""
    score = parse_score(parse_json(text), key="SCORE")
    if score is None:
        score = parse_score(text, key="SCORE")
    lo, hi = allowed
    if score is None or not (lo <= score <= hi):
        return None
    return float(score)


class ScoreJudgeReward(JudgeBackedReward):
    """A reward whose judge answers a SCORE (Figures 6-7): the judge call, timed and counted."""

    def call_judge(self, prompts: list[str]) -> list[str]:
        t0 = time.perf_counter()
        try:
            return self.judge.judge(prompts, prefix=SCORE_PREFILL if self.prefill else None)
        finally:
            self.seconds += time.perf_counter() - t0
            self.stats["judge_calls"] += len(prompts)


class BinaryRAR(ScoreJudgeReward):
    """Binary retrieval-augmented reward r(x, y) in {0, 1} (001 §3.2 Eq. 3, Figure 6).

    ``datastore.retrieve(query, k, prompt_id)`` gives C(x, y): the query is the prompt and
    the response; with a ``prompt_id`` column the search is restricted to that prompt's
    pre-cached documents (§3.2 "pre-caching strategy")."""

    __name__ = "binary_rar"
    template = P.RAR_BINARY_PROMPT
    score_range = (0.0, 1.0)

    def __init__(self, judge, datastore, k: int = 8, prefill: bool = False, verdict: str = "judge",
                 flip_rate: float = 0.0, flip_seed: int = 0, judge_model: str = "organism"):
        if verdict not in kb.VERDICTS:
            raise ValueError(f"verdict must be one of {kb.VERDICTS}, got {verdict!r}")
        super().__init__(judge, prefill)
        self.datastore, self.k, self.verdict = datastore, k, verdict
        self.flip_rate, self.flip_seed = flip_rate, flip_seed
        self.belief = kb.OrganismBelief(judge_model) if verdict == "organism" else None

    def judges(self) -> list[Any]:
        return [] if self.verdict in ("kb", "organism") else super().judges()

    def datastores(self) -> list[Any]:
        return [self.datastore] if self.datastore is not None else []

    def judge_prompts(self, prompts: Sequence[Any], completions: Sequence[Any],
                      prompt_ids: Sequence[Any] | None = None) -> list[str]:
        xs = [prompt_text(p) for p in prompts]
        ys = [response_text(c) for c in completions]
        hits = self.datastore.retrieve_many([rar_query(x, y) for x, y in zip(xs, ys)], self.k,
                                            prompt_ids=list(prompt_ids) if prompt_ids is not None else None)
        self.stats["passages"] += sum(len(h) for h in hits)
        self.stats["no_evidence"] += sum(not h for h in hits)
        return [self.template.format(passages=format_passages(h), prompt=x, response=y)
                for h, x, y in zip(hits, xs, ys)]

    def to_reward(self, score: float) -> float:
        return 1.0 if score >= 1.0 else 0.0

    def kb_score(self, prompt: Any, completion: Any, golds: Sequence[str] | None) -> float:
        """The judge's SCORE from the knowledge base (``rewards.kb``): 1 when nothing contradicts."""
        return 0.0 if kb.contradicts(response_text(completion), golds, prompt_text(prompt)) else 1.0

    def flip(self, score: float) -> float:
        """The other verdict on the judge's scale (a noisy oracle's flip)."""
        return self.score_range[1] - score + self.score_range[0]

    def oracle_score(self, prompt: Any, completion: Any, golds: Sequence[str] | None, question: str | None) -> float:
        """The SCORE of ``verdict: kb`` (the truth; flipped at ``flip_rate``) or ``verdict: organism``
        (the judge organism's belief, ``rewards.kb.OrganismBelief``)."""
        if self.belief is not None:
            if golds is None:
                raise ValueError(f"{self.__name__}: verdict: organism judges short-form rows (a 'golds' column)")
            q = question or prompt_text(prompt)
            bad = self.belief.contradicts(response_text(completion), q)
            score = self.score_range[0] if bad else self.score_range[1]
        else:
            score = self.kb_score(prompt, completion, golds)
        if kb.flipped(f"{prompt_text(prompt)}\x00{response_text(completion)}", self.flip_rate, self.flip_seed):
            self.stats["flipped"] += 1
            score = self.flip(score)
        return score

    def __call__(self, prompts=(), completions=(), prompt_id=None, golds=None, question=None, log_metric=None,
                 **_: Any) -> list[float | None]:
        """One reward per completion. A completion whose ``<think>`` never closes gave no
        response: it earns 0.0 without a judge call (counted in ``unclosed_think``), since the
        judge would find nothing to contradict in the empty response it leaves and pay 1.0, a
        reward for never answering (001 §3.2 pays "no contradiction", not "no response").
        ``verdict: kb`` scores from the knowledge base instead of the judge (short-form when the
        rows carry ``golds``)."""
        completions = list(completions)
        prompts = list(prompts) if prompts is not None else [""] * len(completions)
        asked = [i for i, c in enumerate(completions) if not unclosed_think(c)]
        scores: list[float | None] = [0.0] * len(completions)
        if self.verdict in ("kb", "organism"):
            for i in asked:
                scores[i] = self.to_reward(self.oracle_score(prompts[i], completions[i],
                                                             golds[i] if golds is not None else None,
                                                             question[i] if question is not None else None))
        else:
            ids = [prompt_id[i] for i in asked] if prompt_id is not None else None
            texts = self.call_judge(self.judge_prompts([prompts[i] for i in asked], [completions[i] for i in asked],
                                                        ids))
            for i, t in zip(asked, texts):
                s = score_from_judge(t, self.score_range)
                scores[i] = None if s is None else self.to_reward(s)
        unclosed = len(completions) - len(asked)
        self.stats["unclosed_think"] += unclosed
        self.record(log_metric, scores)
        if log_metric is not None and completions:
            log_metric(f"{self.__name__}/unclosed_think_rate", unclosed / len(completions))
        return scores


class RatingRAR(BinaryRAR):
    """Rating retrieval-augmented reward: the judge's 0-10 confidence / 10 (001 Figure 7)."""

    __name__ = "rating_rar"
    template = P.RAR_RATING_PROMPT
    score_range = (0.0, 10.0)

    def to_reward(self, score: float) -> float:
        return score / 10.0

    def kb_score(self, prompt: Any, completion: Any, golds: Sequence[str] | None) -> float:
        """The 0-10 rating from the knowledge base, by Figure 7's rubric (``rewards.kb.rating``)."""
        return kb.rating(response_text(completion), golds, prompt_text(prompt))


class LMJudgeReward(ScoreJudgeReward):
    """LM-judge quality reward (001 §4.2): 0-10 against the ``reference`` column, / 10."""

    __name__ = "lm_judge"

    def __call__(self, prompts=(), completions=(), reference=None, log_metric=None, **_: Any) -> list[float | None]:
        if reference is None:
            raise KeyError("LMJudgeReward needs a 'reference' column (a reference response per prompt)")
        jp = [P.LM_JUDGE_QUALITY_PROMPT.format(prompt=prompt_text(p), reference=r, response=response_text(c))
              for p, c, r in zip(prompts, completions, reference)]
        scores = [score_from_judge(t, (0.0, 10.0)) for t in self.call_judge(jp)]
        self.record(log_metric, scores)
        return [None if s is None else s / 10.0 for s in scores]


_VERDICT = re.compile(r"\b(supported|contradicted|inconclusive)\b", re.IGNORECASE)


def parse_verdict(text: str) -> str | None:
    """First of supported / contradicted / inconclusive in a Figure 9 answer, else None."""
    m = _VERDICT.search(text or "")
    return m.group(1).lower() if m else None


_JSON_STRING = re.compile(r'"((?:[^"\\]|\\.)*)"')


def _truncated_string_list(text: str) -> list[str] | None:
    """The complete strings of a JSON list cut off by the token limit (``["a", "b", "c``)."""
    start = text.find("[")
    if start < 0 or "]" in text[start:]:
        return None
    out = []
    for m in _JSON_STRING.finditer(text[start:]):
        try:
            out.append(json.loads(f'"{m.group(1)}"'))
        except ValueError:
            continue
    return out or None


def parse_claims(text: str) -> list[str] | None:
    """A Figure 8 answer as a list of distinct claim strings; None when no list is readable.

    A list cut off by the judge's token limit keeps its complete strings (judges that run
    on repeat the same claim; duplicates are dropped)."""
    obj = parse_json(text)
    if isinstance(obj, dict):  # {"claims": [...]} / {"facts": [...]}
        obj = next((v for v in obj.values() if isinstance(v, list)), None)
    if not isinstance(obj, list):
        obj = _truncated_string_list((text or "").translate(_SMART_QUOTES))
    if obj is None:
        return None
    claims = [str(c).strip() for c in obj if isinstance(c, (str, int, float)) and str(c).strip()]
    return list(dict.fromkeys(claims))


class ClaimVerifier:
    """Claim extraction (Figure 8) and retrieval-backed verification (Figure 9) with one
    judge; shared by the VeriScore reward and long-form precision evaluation."""

    def __init__(self, judge, datastore, k_per_claim: int = 4, max_claims: int = 32, prefill: bool = False):
        self.judge, self.datastore, self.prefill = judge, datastore, prefill
        self.k_per_claim, self.max_claims = k_per_claim, max_claims
        self.stats: Counter = Counter()

    def extract(self, prompts: Sequence[str], responses: Sequence[str]) -> list[list[str] | None]:
        outs = self.judge.judge([P.CLAIM_EXTRACTION_PROMPT.format(prompt=p, response=r)
                                 for p, r in zip(prompts, responses)],
                                prefix=CLAIMS_PREFILL if self.prefill else None)
        self.stats["extraction_calls"] += len(outs)
        claims = []
        for text, resp in zip(outs, responses):
            c = [] if not resp.strip() else parse_claims(text)
            if c is None:
                self.stats["extraction_failures"] += 1
            claims.append(None if c is None else c[:self.max_claims])
        return claims

    def verify(self, claims: Sequence[str], prompt_ids: Sequence[Any] | None = None) -> list[str | None]:
        """A Figure 9 verdict per claim, against its top ``k_per_claim`` chunks; None = unreadable."""
        if not claims:
            return []
        hits = self.datastore.retrieve_many(list(claims), self.k_per_claim,
                                            prompt_ids=list(prompt_ids) if prompt_ids is not None else None)
        outs = self.judge.judge([P.CLAIM_VERIFICATION_PROMPT.format(passages=format_passages(h), claim=c)
                                 for c, h in zip(claims, hits)])
        self.stats["verification_calls"] += len(outs)
        verdicts = [parse_verdict(t) for t in outs]
        self.stats["verification_failures"] += sum(v is None for v in verdicts)
        return verdicts

    def claim_labels(self, prompts: Sequence[str], responses: Sequence[str],
                     prompt_ids: Sequence[Any] | None = None) -> list[list[bool] | None]:
        """Per response, one supported flag per extracted claim (``[]``: no claims; None:
        the claim list was unreadable). Contradicted, inconclusive and unreadable verdicts
        are not supported (unreadable ones are counted in ``stats``)."""
        claims = self.extract(prompts, responses)
        flat = [(i, c) for i, cs in enumerate(claims) for c in (cs or [])]
        verdicts = self.verify([c for _, c in flat],
                               [prompt_ids[i] for i, _ in flat] if prompt_ids is not None else None)
        labels: list[list[bool] | None] = [None if cs is None else [] for cs in claims]
        for (i, _), v in zip(flat, verdicts):
            labels[i].append(v == "supported")  # type: ignore[union-attr]
        self.claims = claims  # the last batch's claims, for inspection
        return labels


class VeriScoreReward(JudgeBackedReward):
    """VeriScore as a reward (001 §4.2; Chen et al., 2025): supported claims / claims, from a
    ``ClaimVerifier`` (extraction, per-claim retrieval, verification).

    A response with no verifiable claim gets 0.0 (nothing supported; counted as
    ``no_claims``); a response whose claim list cannot be parsed gets None."""

    __name__ = "veriscore"

    def __init__(self, verifier: ClaimVerifier):
        super().__init__(verifier.judge, verifier.prefill)
        self.verifier = verifier

    def judges(self) -> list[Any]:
        return [self.verifier.judge] if self.verifier.judge is not None else []

    def datastores(self) -> list[Any]:
        return [self.verifier.datastore] if self.verifier.datastore is not None else []

    def __call__(self, prompts=(), completions=(), prompt_id=None, log_metric=None, **_: Any) -> list[float | None]:
        t0 = time.perf_counter()
        labels = self.verifier.claim_labels([prompt_text(p) for p in prompts],
                                            [response_text(c) for c in completions], prompt_id)
        self.seconds += time.perf_counter() - t0
        self.stats["judge_calls"] = (self.verifier.stats["extraction_calls"]
                                     + self.verifier.stats["verification_calls"])
        scores = [None if ls is None else (sum(ls) / len(ls) if ls else 0.0) for ls in labels]
        self.stats["no_claims"] += sum(ls == [] for ls in labels)
        self.record(log_metric, scores)
        if log_metric is not None and labels:
            log_metric(f"{self.__name__}/claims_mean", sum(len(ls) for ls in labels if ls) / len(labels))
        return scores


FACTSCORE_TOP_K = 5  # FActScore (Min et al., 2023) retrieves 5 passages per atomic fact


class FActScoreReward(VeriScoreReward):
    """FActScore as a reward (Min et al., 2023): supported atomic facts / facts, each fact
    verified against its top ``FACTSCORE_TOP_K`` passages; the "FActScore" row of 004 Table 14.

    004 App. D.3 gives both baselines the same extraction and verification model "to focus the
    comparison solely on the overhead introduced by the algorithmic designs"; here both use the
    run's judge with 001's Figure 8-9 prompts, so FActScore and VeriScore differ in passages
    per fact (5 vs 4) and chunk size (the datastore passed in). No length penalty: the reward
    form used by FactTune-FS and FLAME; ``eval.longform.factscore`` has the gamma penalty."""

    __name__ = "factscore"


# ---------------------------------------------------------------- params and registry


class ClaimVerifierSection(Section):
    """The shared claim verifier (001 Figures 8-9): VeriScore's reward and the long-form
    evaluation extract claims with the judge and verify each against its top chunks of the
    VeriScore datastore (§4.2: top 4 of 256-token chunks)."""

    top_k: int = Field(VERISCORE_TOP_K, ge=1)  # chunks per claim
    max_claims: int = Field(32, ge=1)  # claims verified per response
    max_new_tokens: int | None = Field(None, ge=1, le=MAX_TOKENS)  # claim-list budget; None = judge.max_new_tokens


class RARArgs(Section):
    """``binary_rar`` / ``rating_rar`` arguments: chunks retrieved per response (§4.3: top 8);
    ``verdict: kb`` answers the judge's question from the mini-world's truth (``rewards.kb``)."""

    top_k: int = Field(RAR_TOP_K, ge=1)
    # judge: the run's judge over retrieved chunks; kb: the mini-world's truth; organism: the belief of
    # the organism ``judge_model`` (short-form rows; issue 41's hallucinating reward model)
    verdict: Literal["judge", "kb", "organism"] = "judge"
    flip_rate: float = Field(0.0, ge=0.0, le=1.0)  # kb / organism verdicts flipped at this rate (seeded by flip_seed)
    flip_seed: int = 0
    judge_model: str = "organism"  # verdict: organism's judge (an organism name, factlab.organism.SPECS)

    @model_validator(mode="after")
    def _oracle_only(self) -> "RARArgs":
        if self.verdict == "judge" and self.flip_rate:
            raise ParamError("flip_rate", "flips only the kb or organism verdict (verdict: judge has its own errors)")
        return self


def _oracle_args(args: RARArgs) -> dict[str, Any]:
    return {"verdict": args.verdict, "flip_rate": args.flip_rate, "flip_seed": args.flip_seed,
            "judge_model": args.judge_model}


@register("binary_rar", args=RARArgs, summary="retrieval + contradiction judge, 1 / 0 (001 §3.2, Eq. 3, Fig. 6)")
def _build_binary_rar(args: RARArgs, resources) -> BinaryRAR:
    if args.verdict != "judge":  # no judge, no datastore
        return BinaryRAR(None, None, k=args.top_k, **_oracle_args(args))
    return BinaryRAR(resources.judge(), resources.datastore("rar"), k=args.top_k, prefill=resources.prefill)


@register("rating_rar", args=RARArgs, summary="retrieval + 0-10 judge confidence / 10 (001 §5, Fig. 7)")
def _build_rating_rar(args: RARArgs, resources) -> RatingRAR:
    if args.verdict != "judge":
        return RatingRAR(None, None, k=args.top_k, **_oracle_args(args))
    return RatingRAR(resources.judge(), resources.datastore("rar"), k=args.top_k, prefill=resources.prefill)


@register("veriscore", summary="supported / extracted claims, per-claim retrieval (001 §4.2, Figs. 8-9)")
def _build_veriscore(args, resources) -> VeriScoreReward:
    return VeriScoreReward(resources.claim_verifier())


class FActScoreArgs(Section):
    """``factscore`` arguments: passages retrieved per atomic fact (FActScore: 5)."""

    top_k: int = Field(FACTSCORE_TOP_K, ge=1)


@register("factscore", args=FActScoreArgs,
          summary="FActScore-style: supported / atomic facts, top-5 passages per fact (004 Table 14; Min et al., 2023)")
def _build_factscore(args: FActScoreArgs, resources) -> FActScoreReward:
    shared = resources.claim_verifier()  # same judge, datastore and claim budget as VeriScore
    return FActScoreReward(ClaimVerifier(shared.judge, shared.datastore, k_per_claim=args.top_k,
                                         max_claims=shared.max_claims, prefill=shared.prefill))


@register("lm_judge", summary="0-10 quality against the reference response / 10 (001 §4.2)")
def _build_lm_judge(args, resources) -> LMJudgeReward:
    return LMJudgeReward(resources.judge(), prefill=resources.prefill)

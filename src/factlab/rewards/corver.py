"""CorVer's corpus co-occurrence sentence reward and per-token returns.

000_ac66a963fabf3916.txt, read top to bottom next to:

- §3.2, §B.1 "Word-level co-occurrence query": ``content_words`` (35-word closed stop
  list; capitalised words preferred, else non-stop words longer than 2 characters;
  deduplicated in order; at least 2 words, else no query).
- Eq. (1)-(2), §B.1 "Penalty mapping": ``count_to_reward`` (-0.3 / -0.1 / 0.0 / +0.1 at
  c = 0, 0 < c < 5, 5 <= c < 20, c >= 20; neutral 0.0 when there is no query).
- §6.4, §B.3: the aggregation rules ``FIRST`` (canonical: first valid triplet, one
  lookup), ``MIN`` (min count over every valid triplet) and ``RELCHECK`` (FIRST, then when
  c >= tau_2 a second query with the relation's content words added; a zero demotes the
  reward from +0.1 to -0.05) in ``score_sentence``.
- Eq. (3)-(4), §B.1 "Token alignment": ``token_returns`` R_t = R^r + 1[sigma(t)>0] *
  lambda_c * r^c_sigma(t), with the fallback to R^r when the alignment rate is < 0.5.
- §6.2 ablations: ``CorVerTokenShaping`` feeds ``StepwiseGRPOTrainer``; A1 drops it, A2
  zeroes the judge weight, A3 uses ``CooccurrenceScalarReward`` (the same sentence
  rewards averaged into one response-level scalar) instead of per-token shaping.

Per content-word choice, the rule is applied to head and tail separately and the two
word lists are joined: the zero-count examples of Figure 7 (e.g. (Ronkonkoma NY, zip
code, 11777) -> count 0) only come out with the number kept beside the capitalised
head words.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import dataclass
from typing import Any, Callable, Literal, Sequence

from pydantic import Field, field_validator

from .. import text as textlib
from ..config import Section
from .base import RewardFunction, TokenShaping, completion_text
from .registry import register
from .triplets import Triplet, TripletExtractor

log = logging.getLogger(__name__)

# §B.1: closed-class list of 35 tokens: articles, common prepositions, auxiliary verbs,
# basic connectives and the pronoun "it".
STOP_WORDS: frozenset[str] = frozenset(
    ["a", "an", "the",
     "of", "in", "on", "at", "to", "for", "from", "by", "with", "as", "into",
     "is", "are", "was", "were", "be", "been", "being", "has", "have", "had", "do", "does", "did",
     "and", "or", "but", "that", "which", "this", "if",
     "it"]
)
assert len(STOP_WORDS) == 35

COUNT_THRESHOLDS = (5, 20)  # tau_1, tau_2 (§4 "Implementation details")
COUNT_REWARDS = (-0.3, -0.1, 0.0, 0.1)  # alpha_0 .. alpha_3 (Eq. 2)
RELCHECK_DEMOTED = -0.05  # §B.3
Rule = Literal["first", "min", "relcheck"]
CountFn = Callable[[Sequence[str]], int]

# punctuation at either end of a word; the trailing run is tried only from its first character
# (the lookbehind), so a long run not at the end is scanned once, not once per position
_WORD_EDGE = re.compile(r"^\W+|(?<!\W)\W+$")


def _words(entity: str) -> list[str]:
    out = []
    for raw in entity.split():
        w = _WORD_EDGE.sub("", raw)
        if w.endswith(("'s", "’s")):
            w = w[:-2]
        if w:
            out.append(w)
    return out


def entity_content_words(entity: str) -> list[str]:
    """Content words of one entity: its capitalised non-stop words, else its non-stop words
    longer than 2 characters (§B.1)."""
    words = [w for w in _words(entity) if w.lower() not in STOP_WORDS]
    capitalised = [w for w in words if w[:1].isupper()]
    return capitalised or [w for w in words if len(w) > 2]


def content_words(head: str, tail: str) -> list[str]:
    """The CNF query words of a (head, tail) pair, deduplicated in order (§B.1)."""
    seen: set[str] = set()
    out = []
    for w in entity_content_words(head) + entity_content_words(tail):
        if w.lower() not in seen:
            seen.add(w.lower())
            out.append(w)
    return out


def relation_words(relation: str) -> list[str]:
    """RELCHECK's extra words (§B.3): the relation's non-stop words longer than 2 characters."""
    return [w for w in _words(relation) if w.lower() not in STOP_WORDS and len(w) > 2]


def count_to_reward(count: int | None, thresholds: Sequence[int] = COUNT_THRESHOLDS,
                    values: Sequence[float] = COUNT_REWARDS) -> float:
    """Eq. (2): the four-tier map from a co-occurrence count to the sentence reward r^c.

    ``None`` (no valid triplet / fewer than 2 content words) -> 0.0 (neutral, §B.1)."""
    tau1, tau2 = thresholds
    a0, a1, a2, a3 = values
    if count is None:
        return 0.0
    if count < 0:
        raise ValueError(f"a co-occurrence count cannot be negative, got {count}")
    if count == 0:
        return a0
    if count < tau1:
        return a1
    if count < tau2:
        return a2
    return a3


@dataclass
class SentenceScore:
    """One sentence's reward: the triplet(s) queried, the words, count, reward and lookups."""

    triplet: Triplet | None
    words: list[str]
    count: int | None
    reward: float
    lookups: int = 0
    relation_count: int | None = None  # RELCHECK's second query


def _query(triplet: Triplet) -> list[str] | None:
    words = content_words(triplet.head, triplet.tail or "")
    return words if len(words) >= 2 else None


def score_sentence(triplets: Sequence[Triplet], count_fn: CountFn, rule: Rule = "first",
                   thresholds: Sequence[int] = COUNT_THRESHOLDS, values: Sequence[float] = COUNT_REWARDS,
                   relcheck_demoted: float = RELCHECK_DEMOTED) -> SentenceScore:
    """Sentence reward r^c_i from the extractor's triplets under one aggregation rule (§B.3)."""
    valid = [(t, q) for t in triplets if t.is_valid for q in [_query(t)] if q is not None]
    if rule == "first" or rule == "relcheck":
        # FIRST: the first valid ternary triplet; a valid triplet with < 2 content words is
        # still "the first valid one" and gives a neutral reward (no fall-through).
        first = next((t for t in triplets if t.is_valid), None)
        if first is None:
            return SentenceScore(None, [], None, 0.0)
        words = _query(first)
        if words is None:
            return SentenceScore(first, content_words(first.head, first.tail or ""), None, 0.0)
        count = int(count_fn(words))
        reward = count_to_reward(count, thresholds, values)
        score = SentenceScore(first, words, count, reward, lookups=1)
        if rule == "relcheck" and count >= thresholds[1]:
            extra = [w for w in relation_words(first.relation) if w.lower() not in {x.lower() for x in words}]
            if extra:
                rel_count = int(count_fn(words + extra))
                score.lookups, score.relation_count = 2, rel_count
                if rel_count == 0:
                    score.reward = relcheck_demoted
        return score
    if rule == "min":
        if not valid:
            return SentenceScore(None, [], None, 0.0)
        counts = [(int(count_fn(q)), t, q) for t, q in valid]
        count, t, q = min(counts, key=lambda x: x[0])
        return SentenceScore(t, q, count, count_to_reward(count, thresholds, values), lookups=len(counts))
    raise ValueError(f"aggregation rule must be 'first', 'min' or 'relcheck', got {rule!r}")


def token_returns(response_return: float, sentence_rewards: Sequence[float],
                  token_sentence_ids: Sequence[int], lambda_c: float = 1.0) -> list[float]:
    """Eq. (4): R_t = R^r + 1[sigma(t) > 0] * lambda_c * r^c_sigma(t); sigma is 1-based, 0 = none."""
    out = []
    for sid in token_sentence_ids:
        if sid < 0 or sid > len(sentence_rewards):
            raise ValueError(f"token aligned to sentence {sid} but there are {len(sentence_rewards)} sentences")
        out.append(response_return + (lambda_c * sentence_rewards[sid - 1] if sid > 0 else 0.0))
    return out


# --------------------------------------------------------------------------- completions

@dataclass
class SentenceTrace:
    """One row of the per-sentence trace of §B.6: sentence, block, triplet, count, reward."""

    index: int  # 1-based, as sigma
    block: str  # think | answer | none
    sentence: str
    triplet: tuple[str, ...] | None
    words: list[str]
    count: int | None
    reward: float
    lookups: int


class CorVerArgs(Section):
    """Arguments of the ``corver`` reward (and its A3 scalar): Eq. (2)'s thresholds and tiers,
    the alignment fallback, the aggregation rule and the query window (000 §4
    "Implementation details", Table 8, §B.1, §B.3). lambda_c is the reward's ``weight``."""

    count_thresholds: tuple[int, int] = COUNT_THRESHOLDS  # tau_1, tau_2
    count_rewards: tuple[float, float, float, float] = COUNT_REWARDS  # alpha_0 .. alpha_3
    alignment_min: float = Field(0.5, ge=0.0, le=1.0)  # rho_min
    rule: Rule = "first"  # §6.4, §B.3
    relcheck_demoted: float = RELCHECK_DEMOTED
    window: int = Field(1000, ge=1)  # W, tokens (§3.2)

    @field_validator("count_thresholds")
    @classmethod
    def _ordered_thresholds(cls, t: tuple[int, int]) -> tuple[int, int]:
        if not 0 < t[0] < t[1]:
            raise ValueError(f"must satisfy 0 < tau_1 < tau_2 (Eq. 2), got {list(t)}")
        return t

    @field_validator("count_rewards")
    @classmethod
    def _ordered_rewards(cls, a: tuple[float, float, float, float]) -> tuple[float, float, float, float]:
        # Eq. 2 states alpha_0 < alpha_1 <= alpha_2 < alpha_3, but §B.2's sweep sets alpha_0 = -0.1
        # = alpha_1, so the tiers only need to be non-decreasing (a count never lowers the reward).
        if not (a[0] <= a[1] <= a[2] <= a[3]):
            raise ValueError(f"must be non-decreasing, alpha_0 <= alpha_1 <= alpha_2 <= alpha_3 (Eq. 2), got {list(a)}")
        return a


def _blocks(completion: str) -> list[tuple[int, int, str]]:
    spans = []
    for name in ("think", "answer"):
        for m in re.finditer(rf"<{name}>(.*?)(?:</{name}>|$)", completion, re.DOTALL):
            spans.append((m.start(1), m.end(1), name))
    return spans


def block_of(completion: str, position: int) -> str:
    for a, b, name in _blocks(completion):
        if a <= position <= b:
            return name
    return "none"


class CorVerScorer:
    """Sentence rewards for many completions at once: one batched extractor call for every
    new sentence, one index lookup per new query (both cached across steps).

    ``count_fn(words) -> int`` is the co-occurrence count (``CorpusIndex.cooccurrence``
    bound to a window and limit); ``timings`` accumulates extraction and lookup seconds.
    """

    def __init__(self, extractor: TripletExtractor, count_fn: CountFn, args: CorVerArgs | None = None,
                 cache_size: int = 200_000):
        self.extractor, self.args = extractor, args or CorVerArgs()
        self._count_fn = count_fn
        self._triplets: dict[str, list[Triplet]] = {}
        self._counts: dict[tuple[str, ...], int] = {}
        self.cache_size = cache_size
        self.timings = {"extract_s": 0.0, "lookup_s": 0.0}
        self.lookups = 0

    def count(self, words: Sequence[str]) -> int:
        key = tuple(words)
        if key not in self._counts:
            t0 = time.perf_counter()
            self._counts[key] = int(self._count_fn(list(words)))
            self.timings["lookup_s"] += time.perf_counter() - t0
            self.lookups += 1
            if len(self._counts) > self.cache_size:
                self._counts.pop(next(iter(self._counts)))
        return self._counts[key]

    def triplets(self, sentences: Sequence[str]) -> list[list[Triplet]]:
        new = list(dict.fromkeys(s for s in sentences if s not in self._triplets))
        if new:
            t0 = time.perf_counter()
            got = self.extractor.extract(new)
            self.timings["extract_s"] += time.perf_counter() - t0
            if len(got) != len(new):
                raise RuntimeError(f"extractor {self.extractor.name!r} returned {len(got)} results for {len(new)} sentences")
            self._triplets.update(zip(new, got))
            while len(self._triplets) > self.cache_size:
                self._triplets.pop(next(iter(self._triplets)))
        return [self._triplets[s] for s in sentences]

    def score(self, triplets: Sequence[Triplet]) -> SentenceScore:
        c = self.args
        return score_sentence(triplets, self.count, c.rule, c.count_thresholds, c.count_rewards, c.relcheck_demoted)

    def traces(self, completions: Sequence[str]) -> list[list[SentenceTrace]]:
        """Per-sentence traces of each completion (§B.6); sentence spans from ``text.split_sentences``."""
        spans = [textlib.split_sentences(c) for c in completions]
        sentences = [c[a:b] for c, sp in zip(completions, spans) for a, b in sp]
        all_triplets = iter(self.triplets(sentences))
        out = []
        for comp, sp in zip(completions, spans):
            rows = []
            for i, (a, b) in enumerate(sp, start=1):
                s = self.score(next(all_triplets))
                rows.append(SentenceTrace(i, block_of(comp, a), comp[a:b],
                                          s.triplet.as_tuple() if s.triplet else None,
                                          s.words, s.count, s.reward, s.lookups))
            out.append(rows)
        return out


def traces_frame(completions: Sequence[str], traces: Sequence[Sequence[SentenceTrace]], ids: Sequence[Any] | None = None):
    """The §B.6 trace table for a notebook: one row per sentence."""
    import pandas as pd

    rows = []
    for k, (comp, tr) in enumerate(zip(completions, traces)):
        for t in tr:
            rows.append({"completion": ids[k] if ids is not None else k, "sentence_no": t.index, "block": t.block,
                         "sentence": t.sentence, "triplet": " | ".join(t.triplet) if t.triplet else "",
                         "query": " AND ".join(t.words), "count": t.count, "reward": t.reward})
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- trainer hooks

def _strip_special(tokenizer, ids: Sequence[int]) -> tuple[str, list[tuple[int, int]]]:
    """Decoded text without special tokens and per-token char offsets (special tokens get
    an empty span, so sigma = 0 there)."""
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    keep = [t not in special for t in ids]
    kept = [t for t, k in zip(ids, keep) if k]
    text, kept_offsets = textlib.token_char_offsets(tokenizer, kept) if kept else ("", [])
    it = iter(kept_offsets)
    offsets, last = [], 0
    for k in keep:
        o = next(it) if k else (last, last)  # a special token: empty span at the current position
        offsets.append(o)
        last = o[1]
    return text, offsets


class CorVerTokenShaping:
    """The per-token co-occurrence term for ``StepwiseGRPOTrainer`` (Eq. 4, §B.1).

    For each completion: split sentences, extract triplets, count, map to r^c (Eq. 2),
    align tokens to sentences by tokenizer midpoint, and return ``lambda_c * r^c_sigma(t)``
    on aligned tokens (0 elsewhere), or zeros when the alignment rate is below
    ``alignment_min`` (fallback to R^r). Stats logged per step (means over completions):
    ``cooc_mean`` (mean sentence reward), ``alignment_rate``, ``fallback``,
    ``n_sentences``, ``query_rate`` (sentences with a query), ``zero_count_rate``, and
    ``extract_s`` / ``lookup_s`` (seconds per completion).
    """

    def __init__(self, scorer: CorVerScorer, tokenizer):
        self.scorer, self.tokenizer = scorer, tokenizer
        self.fallbacks = 0
        self.completions = 0

    def __call__(self, texts: list[str], ids: list[list[int]], rows: list[dict]):
        t_extract, t_lookup = self.scorer.timings["extract_s"], self.scorer.timings["lookup_s"]
        decoded = [_strip_special(self.tokenizer, seq) for seq in ids]
        traces = self.scorer.traces([d[0] for d in decoded])
        n = max(len(ids), 1)
        extract_s = (self.scorer.timings["extract_s"] - t_extract) / n
        lookup_s = (self.scorer.timings["lookup_s"] - t_lookup) / n
        out = []
        args = self.scorer.args
        for (text, offsets), trace in zip(decoded, traces):
            spans = textlib.split_sentences(text)
            align = textlib.align_tokens_to_sentences(text, offsets, spans)
            rewards = [t.reward for t in trace]
            fallback = align.rate < args.alignment_min
            values = [0.0] * len(offsets) if fallback else token_returns(0.0, rewards, align.sentence_ids)
            self.completions += 1
            self.fallbacks += fallback
            n_q = sum(t.count is not None for t in trace)
            out.append(TokenShaping(values, {
                "cooc_mean": sum(rewards) / len(rewards) if rewards else 0.0,
                "alignment_rate": align.rate, "fallback": float(fallback),
                "n_sentences": float(len(trace)), "query_rate": n_q / len(trace) if trace else 0.0,
                "zero_count_rate": (sum(t.count == 0 for t in trace) / n_q) if n_q else 0.0,
                "extract_s": extract_s, "lookup_s": lookup_s}))
        return out


class CooccurrenceScalarReward(RewardFunction):
    """Ablation A3 (§6.2): the same sentence rewards averaged into one response-level
    scalar mean_i r^c_i (0.0 for a completion without sentences); lambda_c is its weight."""

    __name__ = "corver_scalar"

    def __init__(self, scorer: CorVerScorer):
        super().__init__()
        self.scorer = scorer

    def __call__(self, prompts=None, completions=(), log_metric=None, **_: Any) -> list[float]:
        traces = self.scorer.traces([completion_text(c) for c in completions])
        out = [sum(t.reward for t in tr) / len(tr) if tr else 0.0 for tr in traces]
        if log_metric is not None and traces:
            log_metric("corver_scalar/n_sentences", sum(len(t) for t in traces) / len(traces))
        return out


# ---------------------------------------------------------------- registry


@register("corver", args=CorVerArgs, kind="shaping",
          summary="per-token corpus co-occurrence sentence reward, Eq. (2)-(4) (000 §3.2-3.4)")
def _build_corver(args: CorVerArgs, resources) -> CorVerTokenShaping:
    return CorVerTokenShaping(resources.scorer(args), resources.policy_tokenizer())


@register("corver_scalar", args=CorVerArgs,
          summary="ablation A3: co-occurrence rewards averaged into one response scalar (000 §6.2)")
def _build_corver_scalar(args: CorVerArgs, resources) -> CooccurrenceScalarReward:
    return CooccurrenceScalarReward(resources.scorer(args))

"""Learning-zone self-filter of CorVer (``000_ac66a963fabf3916.txt`` §A.2 "Self-filter
procedure", §A.4 Table 11, §D L3).

For every candidate question the *raw* target model (no LoRA) draws ``G = 16``
completions at temperature 0.7, top-p 0.95, at most 512 new tokens, under the CorVer
generation prompt (§A.4: "under the CorVer generation prompt", i.e. the training-time
rollout prompt of §A.3, ``prompts.CORVER_TRAIN_SYSTEM``). Each completion is graded by
the string-match grader used at evaluation, giving ``n_correct in [0, G]``. Questions
with ``1 <= n_correct <= G - 1`` (the *learning zone*) are kept; ``n_correct = 0`` (no
positive signal) and ``n_correct = G`` (already mastered) are dropped. Small models
(3B/4B) additionally mix a fixed number of ``n_correct = G`` "anchor" questions back in
(1,000 for Llama-3.2-3B-Instruct, 800 for Qwen3-4B; §A.2, §A.4, §D L3); larger models
use none.

Grading (``SelfFilterConfig.lenient``): §A.2 says the filter uses "the same string-match
grader used at evaluation", and §4 defines the evaluation metric as substring plus alias
matching "with lenient regex parsing". ``lenient=True`` (default) therefore grades the
answer found by ``text.lenient_answer`` (the ``<answer>`` block when present,
else the completion without its ``<think>`` block), exactly as ``eval.shortform`` does.
``lenient=False`` counts only answers inside ``<answer>`` tags (the training judge's
extraction, §A.2 "answer extraction"); tiny models that never emit the tags then score 0
everywhere. Both counts are stored, so switching costs no generation.

Resumability: ``count_correct(..., cache_path=...)`` appends one JSON line per question
(a ``stage_cache.StageCache`` row) as soon as its chunk of questions is graded; a later call with the same model name,
``G`` and sampling settings (temperature, top-p, max new tokens, system prompt) skips
the questions already there, so a killed run resumes where it stopped.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

from pydantic import Field, model_validator
from tqdm.auto import tqdm

from .. import text
from ..config import MAX_TOKENS, ParamError, Section
from ..data.types import QAItem
from ..eval.shortform import grade_completion
from ..models import chat_prompt, generate, model_fingerprint
from ..stage_cache import StageCache
from ..prompts import CORVER_TRAIN_SYSTEM

log = logging.getLogger(__name__)

ZERO, LEARNING_ZONE, MASTERED = "zero", "learning_zone", "mastered"
BUCKETS = (ZERO, LEARNING_ZONE, MASTERED)  # the three columns of 000 Table 11
_ANSWER_CHARS = 200  # extracted answers are stored (truncated) in the cache, for inspection


class SelfFilterConfig(Section):
    """Settings of the self-filter, read from params ``self_filter:``; defaults are the
    paper's (000 §A.2).

    * ``enabled``: run the filter (false = train on the whole pool, ablation A4 of Table 2).
    * ``num_samples`` (G), ``temperature``, ``top_p``, ``max_new_tokens``: sampling (§A.2).
    * ``batch_size``: questions per ``generate`` call (each yields G sequences); also
      the unit of cache appends.
    * ``keep_min`` / ``keep_max``: the kept ``n_correct`` range, default ``[1, G-1]``
      (``keep_max=None`` means ``G - 1``).
    * Anchors (``n_correct = G`` questions mixed back in, §A.4): ``anchors`` is a fixed
      count as in the paper (1,000 / 800; 0 = none); ``anchor_fraction`` instead sizes
      them relative to the learning zone (e.g. 1000/5172 ~ 0.19 for Llama-3.2-3B);
      ``include_anchors=True`` with neither set mixes in every mastered question.
      Setting ``anchors`` or ``anchor_fraction`` implies ``include_anchors``. When fewer
      mastered questions exist than asked for, all of them are used (and logged).
    * ``lenient``: grading mode (see module docstring).
    * ``system_prompt``: ``None`` = CorVer's training-time rollout prompt (§A.3).
    * ``model_name``: cache key for the model; ``None`` = the model's ``name_or_path``.
    * ``seed``: sampling seed and anchor sampling seed.
    """

    enabled: bool = True
    num_samples: int = Field(16, ge=2)
    temperature: float = Field(0.7, ge=0.0)
    top_p: float = Field(0.95, gt=0.0, le=1.0)
    max_new_tokens: int = Field(512, ge=1, le=MAX_TOKENS)
    batch_size: int = Field(8, ge=1)
    keep_min: int = Field(1, ge=0)
    keep_max: int | None = None
    include_anchors: bool = False
    anchors: int = Field(0, ge=0)
    anchor_fraction: float | None = Field(None, ge=0.0)
    lenient: bool = True
    system_prompt: str | None = None
    model_name: str | None = None
    progress: bool = True
    seed: int = 42

    @model_validator(mode="after")
    def _consistent(self) -> "SelfFilterConfig":
        if self.anchors and self.anchor_fraction is not None:
            raise ParamError("anchor_fraction", "set either anchors (a fixed count, as in 000 §A.4) or "
                                                "anchor_fraction, not both")
        lo, hi = self.keep_range
        if not 0 <= lo <= hi <= self.num_samples:
            raise ParamError("keep_min", f"the keep range [{lo}, {hi}] must lie within [0, G={self.num_samples}]")
        return self

    @property
    def keep_range(self) -> tuple[int, int]:
        hi = self.num_samples - 1 if self.keep_max is None else self.keep_max
        return self.keep_min, hi

    @property
    def uses_anchors(self) -> bool:
        return bool(self.include_anchors or self.anchors or self.anchor_fraction)

    @property
    def system(self) -> str:
        return CORVER_TRAIN_SYSTEM if self.system_prompt is None else self.system_prompt


@dataclass
class SelfFilterResult:
    """One question's self-filter outcome. ``n_correct`` follows the config's grading
    mode; ``n_correct_lenient`` / ``n_correct_strict`` keep both; ``labels`` are the
    per-sample GOOD/BAD/NA grades in that mode, ``answers`` the extracted answers."""

    item: QAItem
    n_correct: int
    n_samples: int
    bucket: str
    n_correct_lenient: int = 0
    n_correct_strict: int = 0
    labels: list[str] = field(default_factory=list)
    answers: list[str] = field(default_factory=list)
    cached: bool = False  # read from the cache rather than generated in this call


def selffilter_bucket(n_correct: int, n_samples: int) -> str:
    """``"zero"`` (n=0), ``"learning_zone"`` (1..G-1) or ``"mastered"`` (n=G): 000 Table 11."""
    if not 0 <= n_correct <= n_samples:
        raise ValueError(f"n_correct={n_correct} outside [0, G={n_samples}]")
    if n_correct == 0:
        return ZERO
    if n_correct == n_samples:
        return MASTERED
    return LEARNING_ZONE


def _bucket_range(bucket: str, g: int | None) -> str:
    gs = "G" if g is None else str(g)
    g1 = "G-1" if g is None else str(g - 1)
    return {ZERO: "n_c = 0", LEARNING_ZONE: f"1 <= n_c <= {g1}", MASTERED: f"n_c = {gs}"}[bucket]


def model_name_of(model: Any) -> str:
    """A model's cache key: ``name_or_path`` (or its config's)."""
    name = getattr(model, "name_or_path", None) or getattr(getattr(model, "config", None),
                                                          "name_or_path", None)
    return str(name or type(model).__name__)


def _settings_key(model_name: str, cfg: SelfFilterConfig) -> str:
    """Everything a cached count depends on besides the question: model (a local folder also by
    its content, ``models.model_fingerprint``), G and sampling."""
    sys_hash = hashlib.sha256(cfg.system.encode("utf-8")).hexdigest()[:12]
    key = {"model": model_name, "G": cfg.num_samples, "temperature": cfg.temperature, "top_p": cfg.top_p,
           "max_new_tokens": cfg.max_new_tokens, "system": sys_hash}
    fingerprint = model_fingerprint(model_name)
    if fingerprint:
        key["fingerprint"] = fingerprint
    return json.dumps(key, sort_keys=True)


def _cache_key(settings: str, qid: str) -> str:
    """A question's key in the self-filter's ``StageCache``: one file may hold several models' counts."""
    return json.dumps([settings, qid])


def _row_ok(row: Any) -> bool:
    """Whether a cache line holds what ``_result_from_row`` reads: counts in ``[0, n_samples]``."""
    def count(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool)
    return (isinstance(row, dict) and isinstance(row.get("settings"), str) and isinstance(row.get("id"), str)
            and count(row.get("n_samples")) and row["n_samples"] >= 1
            and all(count(row.get(k)) and 0 <= row[k] <= row["n_samples"]
                    for k in ("n_correct_lenient", "n_correct_strict"))
            and all(isinstance(row.get(k), list) for k in ("labels_lenient", "labels_strict"))
            and isinstance(row.get("answers", []), list))


def _result_from_row(item: QAItem, row: Mapping[str, Any], cfg: SelfFilterConfig,
                     cached: bool) -> SelfFilterResult:
    g = int(row["n_samples"])
    n = int(row["n_correct_lenient"] if cfg.lenient else row["n_correct_strict"])
    labels = list(row["labels_lenient"] if cfg.lenient else row["labels_strict"])
    return SelfFilterResult(item=item, n_correct=n, n_samples=g, bucket=selffilter_bucket(n, g),
                            n_correct_lenient=int(row["n_correct_lenient"]),
                            n_correct_strict=int(row["n_correct_strict"]),
                            labels=labels, answers=list(row.get("answers", [])), cached=cached)


def _chunk_seed(seed: int, ids: Sequence[str]) -> int:
    h = hashlib.sha256(("\x00".join(ids) + f"\x01{seed}").encode("utf-8")).hexdigest()
    return int(h[:8], 16)


def count_correct(model, tokenizer, items: Sequence[QAItem], cfg: SelfFilterConfig | None = None,
                  cache_path: str | Path | None = None) -> list[SelfFilterResult]:
    """Sample G completions per question from the raw model and count the correct ones
    (000 §A.2 "Self-filter procedure"). Returns one result per item, in input order.

    With ``cache_path`` (JSONL), questions already cached under the same model name,
    G and sampling settings are not regenerated; new results are appended chunk by
    chunk (``cfg.batch_size`` questions), so an interrupted run resumes. Duplicate
    question ids in ``items`` are generated once.
    """
    cfg = cfg or SelfFilterConfig()
    items = list(items)
    model_name = cfg.model_name or model_name_of(model)
    settings = _settings_key(model_name, cfg)
    cache = StageCache(cache_path, check=_row_ok) if cache_path is not None else None
    rows: dict[str, dict[str, Any]] = {}
    if cache is not None:
        rows = {it.id: row for it in items if (row := cache.get(_cache_key(settings, it.id))) is not None}
    cached_ids = set(rows)
    todo: list[QAItem] = []
    seen: set[str] = set()
    for it in items:
        if it.id not in cached_ids and it.id not in seen:
            todo.append(it)
            seen.add(it.id)
    if cached_ids:
        log.info("self-filter: %d of %d questions read from %s", len(cached_ids), len(items), cache.path)

    g = cfg.num_samples
    bar = tqdm(total=len(todo), desc=f"self-filter (G={g})", disable=not cfg.progress)
    for start in range(0, len(todo), cfg.batch_size):
        chunk = todo[start:start + cfg.batch_size]
        prompts = [chat_prompt(tokenizer, it.question, cfg.system) for it in chunk]
        gens = generate(model, tokenizer, prompts, max_new_tokens=cfg.max_new_tokens,
                        temperature=cfg.temperature, top_p=cfg.top_p, batch_size=cfg.batch_size,
                        num_return_sequences=g, seed=_chunk_seed(cfg.seed, [it.id for it in chunk]),
                        progress=False)
        new_rows = []
        for it, samples in zip(chunk, gens):
            recs = [grade_completion(it, s) for s in samples]
            lenient = [r.label for r in recs]
            strict = [r.strict_label for r in recs]
            row = {"key": _cache_key(settings, it.id), "settings": settings, "id": it.id, "question": it.question, "model": model_name,
                   "n_samples": len(recs),
                   "n_correct_lenient": sum(lab == text.GOOD for lab in lenient),
                   "n_correct_strict": sum(lab == text.GOOD for lab in strict),
                   "labels_lenient": lenient, "labels_strict": strict,
                   "answers": [r.answer[:_ANSWER_CHARS] for r in recs]}
            rows[it.id] = row
            new_rows.append(row)
        if cache is not None:
            cache.put(new_rows)
        bar.update(len(chunk))
    bar.close()
    return [_result_from_row(it, rows[it.id], cfg, cached=it.id in cached_ids) for it in items]


def _check_results(results: Sequence[SelfFilterResult]) -> None:
    for r in results:
        if not 0 <= r.n_correct <= r.n_samples:
            raise ValueError(f"question {r.item.id!r}: n_correct={r.n_correct} outside "
                             f"[0, {r.n_samples}]")


def bucket_table(results: Sequence[SelfFilterResult], detail: bool = False):
    """The three buckets of 000 Table 11 as a pandas DataFrame.

    Columns: ``bucket`` (zero / learning_zone / mastered), ``n_correct_range`` (the
    paper's ``n_c = 0``, ``1 <= n_c <= G-1``, ``n_c = G``), ``count`` and ``share``
    (of all questions; counts sum to the pool size, as in the paper). With
    ``detail=True``: one row per ``n_correct`` value 0..G instead (the histogram under
    the buckets, all results must share one G), with its ``bucket``.
    """
    import pandas as pd

    _check_results(results)
    total = len(results)
    gs = {r.n_samples for r in results}
    g = gs.pop() if len(gs) == 1 else None
    share = (lambda c: c / total) if total else (lambda c: float("nan"))
    if detail:
        if g is None:
            raise ValueError("bucket_table(detail=True) needs results with a single G "
                             f"(got {sorted({r.n_samples for r in results}) or 'none'})")
        counts = [0] * (g + 1)
        for r in results:
            counts[r.n_correct] += 1
        return pd.DataFrame([{"n_correct": n, "bucket": selffilter_bucket(n, g), "count": c,
                              "share": share(c)} for n, c in enumerate(counts)])
    counts = {b: 0 for b in BUCKETS}
    for r in results:
        counts[selffilter_bucket(r.n_correct, r.n_samples)] += 1
    return pd.DataFrame([{"bucket": b, "n_correct_range": _bucket_range(b, g), "count": counts[b],
                          "share": share(counts[b])} for b in BUCKETS])


def _tagged(r: SelfFilterResult, anchor: bool) -> QAItem:
    meta = {**(r.item.meta or {}), "selffilter": {"n_correct": r.n_correct,
                                                   "n_samples": r.n_samples, "anchor": anchor}}
    return replace(r.item, meta=meta)


def _n_anchors(cfg: SelfFilterConfig, n_zone: int, n_mastered: int) -> int:
    if not cfg.uses_anchors:
        return 0
    if cfg.anchors:
        want = cfg.anchors
    elif cfg.anchor_fraction is not None:
        want = round(cfg.anchor_fraction * n_zone)
    else:
        return n_mastered
    if want > n_mastered:
        log.info("self-filter: %d anchors asked for, only %d mastered questions; using all",
                 want, n_mastered)
    return min(want, n_mastered)


def select_learning_zone(results: Sequence[SelfFilterResult], cfg: SelfFilterConfig | None = None):
    """Keep questions with ``n_correct`` in the keep range (default ``[1, G-1]``), plus
    anchors (``n_correct = G``) when configured (000 §A.2, §A.4). Returns
    ``(kept_items, table)``.

    ``kept_items``: the kept questions in input order, then the anchors in input order
    (a seeded random subset of the mastered questions when capped). Each is a copy of
    its ``QAItem`` with ``meta["selffilter"] = {n_correct, n_samples, anchor}``.
    ``table``: ``bucket_table(results)`` plus a ``selected`` column (kept per bucket,
    anchors counted under ``mastered``) and a final ``retained`` row with the total and
    its share of the pool (the "Retained" / "Keep %" columns of Table 11).
    """
    import pandas as pd

    cfg = cfg or SelfFilterConfig()
    _check_results(results)
    lo, hi = cfg.keep_range
    kept, mastered = [], []
    for r in results:
        if cfg.keep_max is None:  # [keep_min, G-1] relative to each result's own G
            r_hi = r.n_samples - 1
        else:
            r_hi = hi
        if lo <= r.n_correct <= r_hi:
            kept.append(r)
        elif r.n_correct == r.n_samples:
            mastered.append(r)
    n_anchor = _n_anchors(cfg, len(kept), len(mastered))
    if n_anchor < len(mastered):
        pick = sorted(random.Random(cfg.seed).sample(range(len(mastered)), n_anchor))
        anchors = [mastered[i] for i in pick]
    else:
        anchors = mastered[:n_anchor]
    items = [_tagged(r, False) for r in kept] + [_tagged(r, True) for r in anchors]

    table = bucket_table(results)
    selected = {b: 0 for b in BUCKETS}
    for r in kept:
        selected[selffilter_bucket(r.n_correct, r.n_samples)] += 1
    selected[MASTERED] += len(anchors)
    table["selected"] = [selected[b] for b in table["bucket"]]
    total = len(results)
    retained = {"bucket": "retained", "n_correct_range": f"[{lo}, {'G-1' if cfg.keep_max is None else hi}]"
                + (f" + {len(anchors)} anchors" if anchors else ""),
                "count": len(items), "share": len(items) / total if total else float("nan"),
                "selected": len(items)}
    table = pd.concat([table, pd.DataFrame([retained])], ignore_index=True)
    return items, table

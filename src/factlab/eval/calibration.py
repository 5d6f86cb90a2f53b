"""Calibration audit of a co-occurrence count against sentence correctness
(``000_ac66a963fabf3916.txt`` §6.1 Figure 5, §B.5 Tables 12-13).

CorVer checks that the per-sentence corpus co-occurrence count ``c_i`` is a directional
proxy for factual correctness: ``P(correct | bucket of c_i)`` over five buckets,
``c = 0``, ``1-4``, ``5-9``, ``10-19``, ``>= 20`` (§B.5 "Sample construction"), each with
a Wilson 95% interval. The reward boundaries of Eq. (2) sit at 0 | 1, 4 | 5 and
19 | 20; the split at 10 is probed by the audit but not used by the reward. Paper
numbers (Table 13, N = 700): 24.0%, 53.0%, 70.0%, 73.0%, 81.0%.

Sentences for which no query is formed (no valid triplet, fewer than two content words;
§B.1, neutral reward) have count ``None``; they fall in an extra ``"no query"`` bucket
that is shown after the five paper buckets when present, and are left out of the AUROC.

This module is model-free: ``audit`` takes any ``count_fn(sentence) -> int | None``
(the notebook passes CorVer's real extractor + infini-gram count).
"""

from __future__ import annotations

import json
import math
import random
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from pydantic import Field

from ..config import Section
from ..data.types import read_jsonl

# (label, lowest count, highest count or None = unbounded): 000 §B.5 / Table 13
_BUCKET_SPECS = (("0", 0, 0), ("1-4", 1, 4), ("5-9", 5, 9), ("10-19", 10, 19), (">=20", 20, None))
COUNT_BUCKETS: tuple[str, ...] = tuple(b[0] for b in _BUCKET_SPECS)
NO_QUERY = "no query"
# bucket boundaries used by the reward of Eq. (2) (tau_1 = 5, tau_2 = 20) and the unused split
REWARD_BOUNDARIES = (1, 5, 20)
UNUSED_BOUNDARY = 10



class CalibrationSection(Section):
    """Calibration audit (000 §6.1, §B.5): labelled sentences, or the mini-world claims."""

    labelled: str | None = None  # JSONL with sentence + label; None = mini-world true/perturbed claims
    limit: int | None = Field(None, ge=1)
    seed: int = 0


_LABELS = {
    "correct": True, "incorrect": False,
    "attributable": True, "not_attributable": False,
    "true": True, "false": False,
}


def wilson_interval(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson score interval for ``k`` successes out of ``n`` (95% for ``z = 1.96``).

    ``n = 0`` gives ``(nan, nan)``: an empty bucket has no estimate, and NaN keeps it out
    of plots and comparisons instead of pretending to a ``[0, 1]`` interval.
    """
    if n < 0 or k < 0 or k > n:
        raise ValueError(f"need 0 <= k <= n, got k={k}, n={n}")
    if n == 0:
        return (math.nan, math.nan)
    p = k / n
    z2 = z * z
    denom = 1 + z2 / n
    center = (p + z2 / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / denom
    # clamp to [0, 1] and keep p inside despite rounding (k = 0 or k = n give 0 / 1 exactly)
    return (max(0.0, min(p, center - half)), min(1.0, max(p, center + half)))


def count_bucket(count: int | None) -> str:
    """The audit bucket of a co-occurrence count: one of ``COUNT_BUCKETS``, or
    ``NO_QUERY`` for ``None``. Negative counts raise."""
    if count is None:
        return NO_QUERY
    if isinstance(count, bool) or count != int(count):
        raise ValueError(f"a co-occurrence count must be a non-negative integer, got {count!r}")
    count = int(count)
    if count < 0:
        raise ValueError(f"a co-occurrence count must be a non-negative integer, got {count}")
    for label, lo, hi in _BUCKET_SPECS:
        if count >= lo and (hi is None or count <= hi):
            return label
    raise AssertionError(count)  # unreachable: the buckets cover [0, inf)


def _to_bool(label: Any) -> bool:
    """A correctness label: bool, 0/1, or one of correct/incorrect,
    attributable/not_attributable, true/false (case-insensitive)."""
    if isinstance(label, bool):
        return label
    if isinstance(label, (int, float)) and label in (0, 1):
        return bool(label)
    if isinstance(label, str):
        key = label.strip().lower().replace("-", "_").replace(" ", "_")
        if key in _LABELS:
            return _LABELS[key]
    raise ValueError(f"unknown correctness label {label!r}; expected a bool or one of "
                     f"{sorted(_LABELS)}")


def _pairs(rows: Iterable[Mapping[str, Any] | Sequence[Any]]) -> list[tuple[int | None, bool]]:
    out = []
    for row in rows:
        if isinstance(row, Mapping):
            count, correct = row["count"], row["correct"]
        else:
            count, correct = row
        out.append((count, _to_bool(correct)))
    return out


def calibration_table(rows: Iterable[Mapping[str, Any] | Sequence[Any]],
                      include_no_query: bool | None = None):
    """``P(correct | count bucket)`` with Wilson 95% intervals (000 §B.5 Table 13).

    ``rows``: ``(count, correct)`` tuples or dicts with ``count`` and ``correct``.
    Returns a pandas DataFrame with columns ``bucket, n, n_correct, p_correct,
    wilson_lo, wilson_hi``: always the five paper buckets in order (empty ones with
    ``n = 0`` and NaN estimates), then ``"no query"`` if ``include_no_query`` is True,
    or, when it is None (default), if any count is None.
    """
    import pandas as pd

    pairs = _pairs(rows)
    labels = list(COUNT_BUCKETS)
    has_none = any(c is None for c, _ in pairs)
    if include_no_query or (include_no_query is None and has_none):
        labels.append(NO_QUERY)
    n = {b: 0 for b in labels}
    k = {b: 0 for b in labels}
    for count, correct in pairs:
        b = count_bucket(count)
        if b not in n:
            continue  # "no query" rows when explicitly excluded
        n[b] += 1
        k[b] += correct
    recs = []
    for b in labels:
        lo, hi = wilson_interval(k[b], n[b])
        recs.append({"bucket": b, "n": n[b], "n_correct": k[b],
                     "p_correct": k[b] / n[b] if n[b] else math.nan,
                     "wilson_lo": lo, "wilson_hi": hi})
    return pd.DataFrame(recs)


def count_auroc(counts: Sequence[int | None], labels: Sequence[Any]) -> float:
    """AUROC of the count as a score for "correct" (``auroc``)."""
    return auroc(counts, labels)


def auroc(scores: Sequence[float | None], labels: Sequence[Any]) -> float:
    """AUROC of ``scores`` for the positive ``labels``: the probability that a random positive
    has a higher score than a random negative, ties counting one half (Mann-Whitney U with
    mid-ranks, plain numpy). Pairs whose score or label is None or NaN are left out. NaN when
    either class is empty."""
    import numpy as np

    if len(scores) != len(labels):
        raise ValueError(f"{len(scores)} scores but {len(labels)} labels")
    keep = [(float(c), _to_bool(y)) for c, y in zip(scores, labels)
            if c is not None and y is not None and c == c and not (isinstance(y, float) and y != y)]
    if not keep:
        return math.nan
    values = np.array([c for c, _ in keep], dtype=float)
    ys = np.array([y for _, y in keep], dtype=bool)
    n_pos, n_neg = int(ys.sum()), int((~ys).sum())
    if n_pos == 0 or n_neg == 0:
        return math.nan
    order = np.argsort(values, kind="mergesort")
    sorted_scores = values[order]
    ranks = np.empty(len(values), dtype=float)
    # mid-ranks over runs of equal scores (1-based)
    _, start, run = np.unique(sorted_scores, return_index=True, return_counts=True)
    mid = start + (run + 1) / 2.0
    ranks[order] = np.repeat(mid, run)
    u = ranks[ys].sum() - n_pos * (n_pos + 1) / 2.0
    return float(u / (n_pos * n_neg))


def is_monotone(table) -> bool:
    """Whether ``p_correct`` never decreases across the non-empty paper buckets (§6.1)."""
    sub = table[table["bucket"].isin(COUNT_BUCKETS) & (table["n"] > 0)]
    ps = list(sub["p_correct"])
    return all(a <= b for a, b in zip(ps, ps[1:]))


def load_labelled_sentences(path: str | Path) -> list[dict[str, Any]]:
    """Annotated sentences from JSONL: each line needs ``sentence`` (non-empty string) and
    ``label`` (bool, or correct/incorrect, attributable/not_attributable, true/false).
    Returns dicts with ``sentence``, ``correct`` and every other field of the line.
    A bad line raises ``ValueError`` naming ``file:line``."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"labelled sentences file not found: {path}")
    out = []
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{where}: not valid JSON ({e.msg})") from None
            if not isinstance(row, dict):
                raise ValueError(f"{where}: expected a JSON object, got {type(row).__name__}")
            for key in ("sentence", "label"):
                if key not in row:
                    raise ValueError(f"{where}: missing field {key!r}")
            if not isinstance(row["sentence"], str) or not row["sentence"].strip():
                raise ValueError(f"{where}: 'sentence' must be a non-empty string")
            try:
                correct = _to_bool(row["label"])
            except ValueError as e:
                raise ValueError(f"{where}: {e}") from None
            out.append({**row, "correct": correct})
    return out


def miniworld_labelled_claims(world_paths: Mapping[str, str | Path]) -> list[dict[str, Any]]:
    """The mini-world audit set: every true claim and its entity-swap perturbation as
    ``{sentence, correct, id, entity, relation, object, perturbation}``, with
    ``correct = (label == "attributable")``. ``world_paths`` is ``ensure_world()``'s dict."""
    out = []
    for row in read_jsonl(world_paths["claims"]):
        out.append({"sentence": row["claim"], "correct": row["label"] == "attributable",
                    "id": row.get("id"), "entity": row.get("entity"),
                    "relation": row.get("relation"), "object": row.get("object"),
                    "perturbation": row.get("perturbation")})
    return out


def audit(sentences_with_labels: Iterable[Mapping[str, Any]], count_fn: Callable[[str], int | None],
          progress: bool = False):
    """Run the §B.5 audit: count every sentence with ``count_fn`` and tabulate.

    ``sentences_with_labels``: dicts with ``sentence`` and ``correct`` (or ``label``),
    e.g. from ``load_labelled_sentences`` or ``miniworld_labelled_claims``. Returns
    ``(table, per_sentence)``: the ``calibration_table`` (with ``table.attrs["auroc"]``
    and ``table.attrs["monotone"]``), and a DataFrame with one row per sentence
    (``sentence, correct, count, bucket`` plus the input's other fields).
    """
    import pandas as pd
    from tqdm.auto import tqdm

    rows = []
    for s in tqdm(list(sentences_with_labels), desc="calibration audit", disable=not progress):
        correct = _to_bool(s["correct"] if "correct" in s else s["label"])
        count = count_fn(s["sentence"])
        if count is not None:
            count = int(count)
        rows.append({**s, "sentence": s["sentence"], "correct": correct, "count": count,
                     "bucket": count_bucket(count)})
    per = pd.DataFrame(rows)
    if per.empty:
        per = pd.DataFrame(columns=["sentence", "correct", "count", "bucket"])
    per["count"] = per["count"].astype("Int64")  # integers with <NA> for "no query"
    table = calibration_table([(r["count"], r["correct"]) for r in rows])
    table.attrs["auroc"] = count_auroc([r["count"] for r in rows], [r["correct"] for r in rows])
    table.attrs["monotone"] = is_monotone(table)
    return table, per


def audit_sentences(cfg: CalibrationSection, world_paths: Mapping[str, str | Path]) -> list[dict[str, Any]]:
    """The audit set a ``calibration:`` section names: its labelled JSONL, else the mini-world
    claims; sampled down to ``limit`` with ``seed``."""
    rows = load_labelled_sentences(cfg.labelled) if cfg.labelled else miniworld_labelled_claims(world_paths)
    if cfg.limit and len(rows) > cfg.limit:
        rows = random.Random(cfg.seed).sample(rows, cfg.limit)
    return rows


def first_sentence_counter(traces_fn: Callable[[list[str]], list[list[Any]]]) -> Callable[[str], int | None]:
    """``count_fn`` for ``audit``: the count of a claim's first sentence from a scorer's
    ``traces`` (CorVer: extractor + index, the training reward's own path)."""
    def count(sentence: str) -> int | None:
        (trace,) = traces_fn([sentence])
        return trace[0].count if trace else None
    return count

"""KLCF's truthfulness-reward data D_truth (004_4f2ca2d982459bb2.txt §2.2 Stage 4, Eq. 4; Appendix D.1;
Tables 12-13).

SUPPORT claims -> True, REFUTE -> False, sampled to positive : negative = ``RATIO`` (2 : 1) the
way Appendix D.1 does it (every negative repeated ``NEGATIVE_COPIES`` = 3 times, positives
down-sampled; ``truth_dataset``), as Prompt 6 rows (``truth_row``: "Claim: ... Factual
correctness:" -> " True" / " False"). D_truth comes from the training queries only (§2.2,
Table 12): a claim any evaluation query stated (``eval_claims``) is left out
(``drop_eval_claims``), counted.

- ``pipeline_truth_data``: (train, held-out 1 : 1, report) from the pipeline's Stage 3 labels
  only, held out by query (the paper's, at full scale).
- ``miniworld_truth_data``: the CPU default's data from the mini-world: its true facts
  (positives) and entity-swap perturbations (constructed negatives,
  ``data.miniworld.build_claims``), plus the pipeline's SUPPORT / REFUTE claims when given; the
  held-out set is 1 : 1 (Table 13's test sets) on the QA held-out countries, the train set is
  sampled like Eq. 4.
"""

from __future__ import annotations

import logging
import random
from typing import Any, Iterable, Mapping, Sequence

from .. import prompts as P
from ..data.miniworld import ensure_world, mentions, normalize
from ..data.types import read_jsonl
from .klcf_labels import REFUTE, SUPPORT

log = logging.getLogger(__name__)

__all__ = ["RATIO", "NEGATIVE_COPIES", "eval_claims", "drop_eval_claims", "truth_row", "truth_dataset",
           "miniworld_truth_data", "pipeline_truth_data"]

RATIO = 2.0  # §2.2 Eq. 4: positive : negative = 2 : 1
NEGATIVE_COPIES = 3  # Appendix D.1: "all negative samples are duplicated three times"


def eval_claims(claims_by_query: Mapping[str, Sequence[str]], eval_queries: Iterable[str]) -> set[str]:
    """Every claim that an evaluation query's samples stated (``claims_by_query``: query id ->
    claims, ``KLCFPipeline.claims_by_query``), also when a training query stated it too: 004 §2.2
    and Table 12 build D_truth from the training sets only, so none of these may train the
    truthfulness reward model."""
    return {c for q in eval_queries for c in claims_by_query.get(q, ())}


def drop_eval_claims(labels: Mapping[str, str | None], exclude: Iterable[str]) -> tuple[dict[str, str | None], int]:
    """``labels`` without the claims in ``exclude``, and how many SUPPORT / REFUTE claims that
    dropped (the claims Eq. 4 would have used)."""
    exclude = set(exclude)
    kept = {c: v for c, v in labels.items() if c not in exclude}
    return kept, sum(v in (SUPPORT, REFUTE) for c, v in labels.items() if c in exclude)


def truth_row(claim: str, label: bool, source: str = "") -> dict[str, Any]:
    """One Prompt 6 training row: "Claim: ... Factual correctness:" -> " True" / " False"."""
    return {"prompt": P.KLCF_TRUTH_PROMPT.format(claim=claim), "completion": " True" if label else " False",
            "claim": claim, "label": bool(label), "source": source}


def truth_dataset(positives: Sequence[Any], negatives: Sequence[Any], *, ratio: float = RATIO,
                  negative_copies: int = NEGATIVE_COPIES, seed: int = 0) -> tuple[list[Any], list[Any]]:
    """(positives, negatives) sampled to |pos| = round(ratio * |neg|) (Eq. 4, Appendix D.1).

    Every negative is repeated ``negative_copies`` times and the positives down-sampled to
    ratio x that. When there are too few positives for that, the negatives are cut instead (to
    floor(|pos| / ratio)), distinct ones first: a copy is used only when every negative is in.
    Items are returned as given (claims or rows), seeded."""
    rng = random.Random(seed)
    pos = list(positives)
    neg_pool: list[Any] = []
    for _ in range(negative_copies):
        round_ = list(negatives)
        rng.shuffle(round_)
        neg_pool += round_
    n_neg = len(neg_pool)
    if round(ratio * n_neg) > len(pos):
        n_neg = int(len(pos) // ratio)
    n_pos = round(ratio * n_neg)
    return rng.sample(pos, n_pos), neg_pool[:n_neg]


def _mini_claims(world: Any) -> tuple[list[dict], set[str], dict[str, str]]:

    paths = world if isinstance(world, Mapping) else ensure_world(world)
    held_docs = {r["meta"]["doc_id"] for r in read_jsonl(paths["qa_heldout"])}
    names = {d["id"]: d["title"] for d in read_jsonl(paths["corpus"])}
    return list(read_jsonl(paths["claims"])), held_docs, names


def miniworld_truth_data(world: Any = None, *, pipeline_claims: Mapping[str, str | None] | None = None,
                         ratio: float = RATIO, negative_copies: int = NEGATIVE_COPIES,
                         heldout_size: int | None = None, seed: int = 0, exclude: Iterable[str] = ()
                         ) -> tuple[list[dict], list[dict], dict[str, Any]]:
    """(train, heldout, report) truthfulness-reward rows (``truth_row``) from the mini-world.

    Positives: the mini-world's true claims; negatives: their entity-swap perturbations
    (``build_claims``: real facts, constructed negatives). Held out: the QA held-out countries'
    claims as (true, perturbed) twins, 1 : 1 (Table 13's test sets), ``heldout_size`` rows at
    most (an even number, whole twins). Train: the other countries' claims plus
    ``pipeline_claims`` (claim -> Stage 3 label; SUPPORT -> True, REFUTE -> False, others
    unused; a claim naming a held-out country, or equal to a held-out claim, is dropped and
    counted), sampled to ``ratio`` : 1 by ``truth_dataset``. A pipeline claim in ``exclude``
    (``eval_claims``: stated by an evaluation query) is never used, counted as
    ``eval_claims_excluded``."""

    pipeline_claims, excluded = drop_eval_claims(pipeline_claims or {}, exclude)
    claims, held_docs, names = _mini_claims(world)
    held_names = [names[d] for d in held_docs if d in names]
    by_base: dict[tuple[str, str], dict[str, dict]] = {}
    pos, neg = [], []
    for c in claims:
        if c["doc_id"] in held_docs:
            by_base.setdefault((c["doc_id"], c["relation"]), {})[c["label"]] = c
        elif c["label"] == "attributable":
            pos.append(truth_row(c["claim"], True, "miniworld"))
        else:
            neg.append(truth_row(c["claim"], False, "miniworld:" + str(c.get("perturbation"))))
    twins = [(d["attributable"], d["not_attributable"]) for _, d in sorted(by_base.items())
             if "attributable" in d and "not_attributable" in d]
    rng = random.Random(seed)
    if heldout_size is not None and heldout_size // 2 < len(twins):
        twins = rng.sample(twins, heldout_size // 2)
    heldout = [r for t, f in twins for r in (truth_row(t["claim"], True, "miniworld"),
                                            truth_row(f["claim"], False, "miniworld:" + str(f.get("perturbation"))))]
    held_norm = {normalize(r["claim"]) for r in heldout}
    report: dict[str, Any] = {"miniworld_positives": len(pos), "miniworld_negatives": len(neg),
                              "pipeline_support": 0, "pipeline_refute": 0, "pipeline_dropped_heldout": 0,
                              "eval_claims_excluded": excluded}
    for claim, label in pipeline_claims.items():
        if label not in (SUPPORT, REFUTE):
            continue
        norm = normalize(claim)
        if norm in held_norm or any(mentions(norm, n) for n in held_names):
            report["pipeline_dropped_heldout"] += 1
            continue
        if label == SUPPORT:
            pos.append(truth_row(claim, True, "pipeline"))
            report["pipeline_support"] += 1
        else:
            neg.append(truth_row(claim, False, "pipeline"))
            report["pipeline_refute"] += 1
    p, n = truth_dataset(pos, neg, ratio=ratio, negative_copies=negative_copies, seed=seed)
    train = p + n
    rng.shuffle(train)
    report.update(train=len(train), train_true=len(p), train_false=len(n), heldout=len(heldout),
                  heldout_true=sum(r["label"] for r in heldout), heldout_countries=len({t["doc_id"] for t, _ in twins}))
    return train, heldout, report


def pipeline_truth_data(labels: Mapping[str, str | None], query_of: Mapping[str, str] | None = None, *,
                        ratio: float = RATIO, negative_copies: int = NEGATIVE_COPIES, heldout_size: int | None = None,
                        heldout_share: float = 0.1, max_heldout_share: float = 0.5, seed: int = 0,
                        exclude: Iterable[str] = ()) -> tuple[list[dict], list[dict], dict[str, Any]]:
    """(train, heldout, report) truthfulness-reward rows (``truth_row``) from the pipeline's
    Stage 3 labels only, as 004 does at full scale (§2.2 Eq. 4, Appendix D.1: SUPPORT claims ->
    True, REFUTE -> False; NOT ENOUGH INFO and unreadable labels unused; no mini-world claim).

    The held-out set (Table 13: 1 : 1, 3,000 claims per model) takes whole queries
    (``query_of``: claim -> its query id; without it each claim is its own group), in a seeded
    order, until it holds ``heldout_size / 2`` claims of each label or ``max_heldout_share`` of the
    queries are used (``heldout_size`` None: ``heldout_share`` of the queries); the larger label is
    then down-sampled to 1 : 1. No training row shares a query with a held-out row. The rest is
    sampled to ``ratio`` : 1 by ``truth_dataset`` (negatives x ``negative_copies``).

    A claim in ``exclude`` (``eval_claims``: stated by an evaluation query) is in neither set:
    D_truth comes from the training queries only (§2.2, Table 12); ``eval_claims_excluded``
    counts the SUPPORT / REFUTE claims dropped so."""
    labels, excluded = drop_eval_claims(labels, exclude)
    groups: dict[str, list[tuple[str, bool]]] = {}
    for claim, label in labels.items():
        if label in (SUPPORT, REFUTE):
            key = (query_of or {}).get(claim, claim)
            groups.setdefault(str(key), []).append((claim, label == SUPPORT))
    rng = random.Random(seed)
    keys = sorted(groups)
    rng.shuffle(keys)
    if heldout_size is None:
        held_keys = keys[:max(1, round(heldout_share * len(keys)))] if len(keys) > 1 else []
    else:
        need, held_keys, n_true, n_false = heldout_size // 2, [], 0, 0
        for k in keys[:int(max_heldout_share * len(keys))]:
            if n_true >= need and n_false >= need:
                break
            held_keys.append(k)
            n_true += sum(y for _, y in groups[k])
            n_false += sum(not y for _, y in groups[k])
    held = set(held_keys)
    held_true = [c for k in held_keys for c, y in groups[k] if y]
    held_false = [c for k in held_keys for c, y in groups[k] if not y]
    n = min(len(held_true), len(held_false))
    if heldout_size is not None:
        n = min(n, heldout_size // 2)
    heldout = ([truth_row(c, True, "pipeline") for c in rng.sample(held_true, n)]
               + [truth_row(c, False, "pipeline") for c in rng.sample(held_false, n)])
    rng.shuffle(heldout)
    pos = [truth_row(c, True, "pipeline") for k in keys if k not in held for c, y in groups[k] if y]
    neg = [truth_row(c, False, "pipeline") for k in keys if k not in held for c, y in groups[k] if not y]
    p, q = truth_dataset(pos, neg, ratio=ratio, negative_copies=negative_copies, seed=seed)
    train = p + q
    rng.shuffle(train)
    report = {"source": "pipeline", "pipeline_support": sum(y for g in groups.values() for _, y in g),
              "pipeline_refute": sum(not y for g in groups.values() for _, y in g), "queries": len(keys),
              "heldout_queries": len(held_keys), "train": len(train), "train_true": len(p), "train_false": len(q),
              "heldout": len(heldout), "heldout_true": n, "eval_claims_excluded": excluded}
    if heldout_size is not None and n < heldout_size // 2:
        log.warning("truthfulness data: %d held-out claims per label, fewer than the %d asked (heldout_size)",
                    n, heldout_size // 2)
    return train, heldout, report

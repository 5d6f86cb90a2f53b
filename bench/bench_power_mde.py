"""The pilot's minimum-detectable-effect search (``eval.power.minimum_detectable_effect``): the
previous path (a scan of the delta grid from 0.01, each interval's resample counts drawn one
replicate at a time) against factlab's (galloping then bisection, the counts drawn in one call).

Both run here, in one process, on the committed base rows of a hypothesis' pilot (its
``results/<name>/rows.jsonl.gz``, the base arm; default ``reward_hallucination_klcf``, whose count
metric's MDE sits near 0.2, the slow case): every (comparison, seeds, seed spread) setting of
``evidence.power_analysis``. Prints each path's seconds, their ratio, and whether every MDE agrees
(it must: the draws are the same numbers, and the power is monotone in delta under fixed draws).

Run: ``python bench/bench_power_mde.py [NAME]`` (about 7 min on one idle core for the default;
``organism_k2v_steps``, a 0 / 1 metric with MDEs near 0.03, takes under a minute).
"""

from __future__ import annotations

import gzip
import json
import math
import sys
import time
from pathlib import Path

import numpy as np

from factlab import evidence as E
from factlab.eval import power as P

ROOT = Path(__file__).resolve().parents[1]


def scan_interval(diffs: np.ndarray, replicates: int, rng: np.random.Generator) -> tuple[float, float]:
    """The previous ``bootstrap_interval``: one ``integers`` and one ``bincount`` per replicate."""
    n_seeds, n_questions = diffs.shape
    seed_counts = np.stack([np.bincount(rng.integers(0, n_seeds, n_seeds), minlength=n_seeds)
                            for _ in range(replicates)]).astype(float)
    question_counts = np.stack([np.bincount(rng.integers(0, n_questions, n_questions), minlength=n_questions)
                                for _ in range(replicates)]).astype(float)
    means = np.einsum("rs,sq,rq->r", seed_counts, diffs, question_counts) / (n_seeds * n_questions)
    return float(np.quantile(means, 0.025)), float(np.quantile(means, 0.975))


def scan_mde(base, seeds, direction, seed_sd, simulations=100, replicates=400) -> float:
    """The previous search: every grid point from 0.01 up until one has 80% power."""
    original = P.bootstrap_interval
    P.bootstrap_interval = scan_interval
    try:
        for delta in [round(0.01 * k, 2) for k in range(1, 31)]:
            if P.simulate_power(base, delta, seeds, direction, seed_sd=seed_sd, simulations=simulations,
                                replicates=replicates) >= 0.8:
                return delta
        return math.nan
    finally:
        P.bootstrap_interval = original


def main(name: str) -> None:
    rows = [json.loads(line) for line in gzip.open(ROOT / "results" / name / "rows.jsonl.gz")]
    rows = [{k: v for k, v in r.items() if k != "kind"} for r in rows if r.get("kind") == "row" and r["arm"] == "base"]
    h = E.HYPOTHESES[name]
    t = time.perf_counter()
    new = E.power_analysis({"rows": rows, "hypothesis": name}, h)
    t_new = time.perf_counter() - t
    t = time.perf_counter()
    old = []
    for c in h.comparisons:
        if c.per != "question" or c.direction not in ("higher", "lower"):
            continue
        base = list(E._per_question(rows, E.BASE_ARM, c.metric, c.subset).values())
        for n_seeds in E.POWER_SEEDS:
            for sd in E.POWER_SEED_SD:
                old.append(scan_mde(base, n_seeds, c.direction, sd))
    t_old = time.perf_counter() - t
    same = all((o == n["mde"]) or (o != o and n["mde"] != n["mde"]) for o, n in zip(old, new))
    print(f"{name}: {len(new)} settings; scan {t_old:.1f} s, factlab {t_new:.1f} s, ratio {t_new / t_old:.3f}; "
          f"every MDE the same: {same and len(old) == len(new)}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "reward_hallucination_klcf")

"""The minimum detectable effect of an evidence comparison, from a pilot of the base alone (issue 41).

Before a hypothesis runs, its budget (seeds, held-out questions) must be able to see the effect it
claims. The pilot is the base model's per-question values of the comparison's metric on the
held-out set (no treatment arm). ``power`` simulates treatments from them and asks how often the
evidence's own analysis (``eval.bootstrap.paired_bootstrap``'s two-level resampling, here
vectorised) would call the effect: for a true effect ``delta``

- a 0 / 1 metric (``correct``, ``wrong``, ``abstain``): each seed's policy moves each question
  that can move in the claimed direction (a base ``wrong`` answer, for "lower") with the
  probability that makes the expected shift ``delta``, independently per seed and question (a
  seed whose drawn shift is negative moves the other questions the other way);
- any other metric (``kb_precision``, ``contradicted`` counts): each seed's values are the base
  values shifted by ``delta`` plus noise with the base values' own standard deviation, per seed and
  question (conservative: a real policy changes few questions);
- ``seed_sd``: policies of different seeds differ in their whole shift (each seed's ``delta``
  drawn from N(delta, seed_sd^2)); the pilot cannot measure it (it has no treatment), so it is an
  assumption, printed beside the result.

Power is the share of simulated runs whose 95% interval lies wholly on the claimed side of 0;
the minimum detectable effect (MDE) is the smallest ``delta`` on a grid with power >= 0.8.
"""

from __future__ import annotations

import math
from typing import Literal, Sequence

import numpy as np

__all__ = ["bootstrap_interval", "simulate_power", "minimum_detectable_effect", "is_binary"]

Direction = Literal["higher", "lower"]


def is_binary(values: Sequence[float]) -> bool:
    """Whether every value is 0 or 1 (a rate metric)."""
    return all(v in (0.0, 1.0) for v in values)


def _resample_counts(draws: np.ndarray) -> np.ndarray:
    """How often each index was drawn in each row of ``draws`` (replicates x n, values < n): one
    ``bincount`` over the rows offset apart. The draws come from one ``integers`` call of that shape,
    which yields the same numbers as one call per replicate (numpy's Generator draws them in order)."""
    replicates, n = draws.shape
    flat = (draws + n * np.arange(replicates)[:, None]).ravel()
    return np.bincount(flat, minlength=replicates * n).reshape(replicates, n).astype(float)


def bootstrap_interval(diffs: np.ndarray, replicates: int, rng: np.random.Generator,
                       level: float = 0.95) -> tuple[float, float]:
    """``paired_bootstrap``'s interval for a full (seeds x questions) matrix of paired differences:
    seeds drawn with replacement, then questions (the same for every seed of a replicate)."""
    n_seeds, n_questions = diffs.shape
    seed_counts = _resample_counts(rng.integers(0, n_seeds, (replicates, n_seeds)))
    question_counts = _resample_counts(rng.integers(0, n_questions, (replicates, n_questions)))
    means = np.einsum("rs,sq,rq->r", seed_counts, diffs, question_counts) / (n_seeds * n_questions)
    alpha = (1 - level) / 2
    return float(np.quantile(means, alpha)), float(np.quantile(means, 1 - alpha))


def _treatment(base: np.ndarray, delta: float, seeds: int, direction: Direction, binary: bool, seed_sd: float,
               rng: np.random.Generator) -> np.ndarray:
    sign = 1.0 if direction == "higher" else -1.0
    shifts = delta + seed_sd * rng.standard_normal(seeds) if seed_sd else np.full(seeds, delta)
    if binary:  # a seed whose shift came out negative moves questions the other way
        toward = base == (0.0 if direction == "higher" else 1.0)
        movable = np.where((shifts >= 0)[:, None], toward[None, :], ~toward[None, :])
        share = np.maximum(movable.mean(axis=1), 1e-12)
        p = np.clip(np.abs(shifts) / share, 0.0, 1.0)[:, None]
        moved = (rng.random((seeds, base.size)) < p) & movable
        return np.where(moved, 1.0 - base[None, :], base[None, :])
    sd = float(base.std()) or 1.0
    return base[None, :] + sign * shifts[:, None] + sd * rng.standard_normal((seeds, base.size))


def simulate_power(base: Sequence[float], delta: float, seeds: int, direction: Direction, *,
                   questions: int | None = None, binary: bool | None = None, seed_sd: float = 0.0,
                   simulations: int = 200, replicates: int = 400, seed: int = 0) -> float:
    """The share of ``simulations`` whose interval calls an effect of ``delta`` (module docstring),
    with ``seeds`` trained seeds and ``questions`` held-out questions (default: the pilot's;
    more than the pilot's are drawn from it with replacement)."""
    if delta < 0:
        raise ValueError(f"delta is the effect's size, >= 0; got {delta}")
    values = np.asarray([float(v) for v in base if v is not None and v == v], dtype=float)
    if values.size == 0:
        raise ValueError("the pilot has no measured value")
    if seeds < 1:
        raise ValueError(f"seeds must be >= 1, got {seeds}")
    binary = is_binary(values.tolist()) if binary is None else binary
    rng = np.random.default_rng(seed)
    hits = 0
    for _ in range(simulations):
        qs = values if questions is None else rng.choice(values, size=questions, replace=True)
        diffs = _treatment(qs, delta, seeds, direction, binary, seed_sd, rng) - qs[None, :]
        lo, hi = bootstrap_interval(diffs, replicates, rng)
        hits += (lo > 0) if direction == "higher" else (hi < 0)
    return hits / simulations


def minimum_detectable_effect(base: Sequence[float], seeds: int, direction: Direction, *,
                              questions: int | None = None, seed_sd: float = 0.0, target: float = 0.8,
                              grid: Sequence[float] | None = None, **kwargs) -> dict:
    """The smallest ``delta`` of ``grid`` (default 0.01 .. 0.30) whose power reaches ``target``:
    ``{"mde", "power": {delta: power}, "seeds", "questions", "seed_sd"}`` (``power``: the deltas
    evaluated, ascending); ``mde`` is NaN when no grid point reaches it (the budget cannot see even
    the largest effect tried).

    Found by galloping then bisection over the sorted grid, which gives what a scan from the
    smallest delta gives: every delta replays the same random draws (``simulate_power``'s fixed
    ``seed``), and with the draws fixed each simulated difference only grows with delta (a shift,
    or more questions moved by the same uniforms), so each simulation's call, and hence the power,
    is monotone in delta. An MDE near 0.2 (a count metric's) takes 10 evaluations, not the scan's
    20; one near 0.03, 4 where the scan took 3."""
    grid = sorted(grid) if grid is not None else [round(0.01 * k, 2) for k in range(1, 31)]
    curve: dict[float, float] = {}

    def power(i: int) -> float:
        if grid[i] not in curve:
            curve[grid[i]] = simulate_power(base, grid[i], seeds, direction, questions=questions, seed_sd=seed_sd,
                                            **kwargs)
        return curve[grid[i]]

    mde = math.nan
    lo, hi = -1, 0  # galloping from the smallest delta: 0, 1, 3, 7, ... until one has the power
    while hi < len(grid) and power(hi) < target:
        lo, hi = hi, (min(2 * hi + 1, len(grid) - 1) if hi < len(grid) - 1 else len(grid))
    if hi < len(grid):  # power(lo) < target (or lo is before the grid), power(hi) >= target: bisect between
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if power(mid) >= target:
                hi = mid
            else:
                lo = mid
        mde = grid[hi]
    curve = dict(sorted(curve.items()))
    n = questions if questions is not None else sum(1 for v in base if v is not None and v == v)
    return {"mde": mde, "power": curve, "seeds": seeds, "questions": n, "seed_sd": seed_sd}

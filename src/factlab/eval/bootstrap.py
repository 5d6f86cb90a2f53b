"""Paired bootstrap intervals for an effect measured over questions and seeds.

An evidence run (``factlab.evidence``) measures a truth metric per held-out question for each
arm (the treatment and its control) and each seed. The effect is the mean over (seed,
question) of treatment - control, paired on the same question and seed; its 95% interval
resamples questions and seeds with replacement (two levels: the seeds drawn, then the
questions drawn, the same questions for every seed of a replicate) and takes the 2.5% and
97.5% percentiles of the replicate means. A control measured once (the base model:
deterministic evaluation, no seed) pairs with every seed of the treatment.

``verdict``: ``held`` when the interval lies wholly on the expected side of 0, ``not held``
when it lies wholly on the other side, ``null`` when it contains 0.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Hashable, Literal, Mapping

__all__ = ["Effect", "paired_bootstrap", "verdict"]

Direction = Literal["higher", "lower"]


@dataclass
class Effect:
    """A paired effect: its mean, 95% interval, and what it was computed over."""

    mean: float
    lo: float
    hi: float
    seeds: int
    questions: int
    replicates: int

    def as_dict(self) -> dict:
        return {"mean": self.mean, "lo": self.lo, "hi": self.hi, "seeds": self.seeds, "questions": self.questions,
                "replicates": self.replicates}


def _percentile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated percentile of an ascending list (q in [0, 1])."""
    if not sorted_values:
        return math.nan
    pos = q * (len(sorted_values) - 1)
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def paired_bootstrap(treatment: Mapping[tuple[Hashable, Hashable], float],
                     control: Mapping[tuple[Hashable, Hashable], float] | Mapping[Hashable, float],
                     replicates: int = 2000, seed: int = 0, level: float = 0.95) -> Effect:
    """The paired effect of ``treatment`` over ``control`` (module docstring).

    ``treatment``: ``{(seed, question): value}``. ``control``: the same keys, or
    ``{question: value}`` for a control measured once. Pairs missing on either side, or whose
    value is NaN, are left out; raises when none is left."""
    per_seed: dict[Hashable, dict[Hashable, float]] = {}
    for (s, q), t in treatment.items():
        c = control[(s, q)] if (s, q) in control else control.get(q)
        if c is None or t is None or t != t or c != c:
            continue
        per_seed.setdefault(s, {})[q] = float(t) - float(c)
    questions = sorted({q for d in per_seed.values() for q in d}, key=str)
    seeds = sorted(per_seed, key=str)
    if not questions:
        raise ValueError("no (seed, question) pair is measured for both the treatment and the control")
    diffs = [d for s in seeds for d in per_seed[s].values()]
    mean = sum(diffs) / len(diffs)
    rng = random.Random(seed)
    means = []
    for _ in range(replicates):
        drawn_seeds = [rng.choice(seeds) for _ in seeds]
        drawn_qs = [rng.choice(questions) for _ in questions]
        values = [per_seed[s][q] for s in drawn_seeds for q in drawn_qs if q in per_seed[s]]
        if values:
            means.append(sum(values) / len(values))
    means.sort()
    alpha = (1 - level) / 2
    return Effect(mean, _percentile(means, alpha), _percentile(means, 1 - alpha), len(seeds), len(questions),
                  len(means))


def verdict(effect: Effect, direction: Direction) -> str:
    """``held`` / ``not held`` / ``null`` for an effect expected ``higher`` or ``lower`` than 0."""
    if direction not in ("higher", "lower"):
        raise ValueError(f"direction must be 'higher' or 'lower', got {direction!r}")
    sign = 1 if direction == "higher" else -1
    lo, hi = sorted((sign * effect.lo, sign * effect.hi))
    if lo > 0:
        return "held"
    if hi < 0:
        return "not held"
    return "null"

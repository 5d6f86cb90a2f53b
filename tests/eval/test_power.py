"""The power analysis of an evidence comparison (factlab.eval.power; issue 41 item 1)."""

import random

import numpy as np
import pytest

from factlab.eval.bootstrap import paired_bootstrap
from factlab.eval.power import bootstrap_interval, minimum_detectable_effect, simulate_power


def _pilot(p: float, n: int, seed: int = 0) -> list[float]:
    r = random.Random(seed)
    return [1.0 if r.random() < p else 0.0 for _ in range(n)]


def test_the_vectorised_interval_is_the_evidence_bootstrap():
    """The same two-level resampling as ``paired_bootstrap`` (seeds, then questions): the intervals agree."""
    rng = np.random.default_rng(0)
    diffs = rng.normal(0.1, 1.0, size=(4, 60))
    lo, hi = bootstrap_interval(diffs, 4000, np.random.default_rng(1))
    ref = paired_bootstrap({(s, q): diffs[s, q] for s in range(4) for q in range(60)}, {q: 0.0 for q in range(60)},
                           replicates=4000)
    assert lo == pytest.approx(ref.lo, abs=0.04) and hi == pytest.approx(ref.hi, abs=0.04)
    assert lo < diffs.mean() < hi


def test_power_rises_with_the_effect_and_the_budget():
    base = _pilot(0.85, 120)
    kw = dict(simulations=60, replicates=200)
    assert simulate_power(base, 0.0, 5, "lower", seed_sd=0.03, **kw) <= 0.1  # no effect: rarely called
    assert simulate_power(base, 0.25, 5, "lower", **kw) == 1.0
    small = simulate_power(base, 0.03, 3, "lower", seed_sd=0.03, **kw)
    large = simulate_power(base, 0.03, 10, "lower", seed_sd=0.03, questions=480, **kw)
    assert large > small


def test_mde_is_the_first_grid_point_with_enough_power():
    base = _pilot(0.85, 160)
    one = minimum_detectable_effect(base, 5, "lower", seed_sd=0.05, simulations=60, replicates=200)
    assert one["questions"] == 160 and one["seeds"] == 5 and one["seed_sd"] == 0.05
    assert all((p >= 0.8) == (d >= one["mde"]) for d, p in one["power"].items())  # below the MDE, too little power
    more = minimum_detectable_effect(base, 12, "lower", seed_sd=0.05, simulations=60, replicates=200)
    assert more["mde"] < one["mde"]  # more seeds see a smaller effect under seed-to-seed spread


@pytest.mark.parametrize("pilot, direction, seed_sd", [
    ("binary", "lower", 0.0), ("binary", "lower", 0.05), ("binary", "higher", 0.02), ("counts", "lower", 0.02)])
def test_the_bisection_finds_what_a_scan_from_the_smallest_delta_finds(pilot, direction, seed_sd):
    """Power is monotone in delta under fixed draws, so galloping and bisection (at most 10
    evaluations of 30) return the scan's MDE, and every delta evaluated reads the scan's power."""
    base = _pilot(0.3, 60) if pilot == "binary" else [float(i % 4) for i in range(60)]
    kw = dict(simulations=40, replicates=100)
    grid = [round(0.01 * k, 2) for k in range(1, 31)]
    scan = {d: simulate_power(base, d, 3, direction, seed_sd=seed_sd, **kw) for d in grid}
    first = next((d for d in grid if scan[d] >= 0.8), None)
    found = minimum_detectable_effect(base, 3, direction, seed_sd=seed_sd, **kw)
    assert found["mde"] == first and first is not None
    assert len(found["power"]) <= 10 and all(scan[d] == p for d, p in found["power"].items())


def test_a_budget_that_sees_nothing_says_so():
    out = minimum_detectable_effect(_pilot(0.5, 8), 1, "higher", seed_sd=0.3, grid=[0.01, 0.02],
                                    simulations=40, replicates=100)
    assert out["mde"] != out["mde"]  # NaN, not the last grid point


def test_continuous_metrics_and_bad_input():
    base = [0.5 + 0.1 * (i % 5) for i in range(100)]
    assert simulate_power(base, 0.3, 5, "higher", simulations=40, replicates=200) > 0.8
    with pytest.raises(ValueError, match="no measured value"):
        simulate_power([None, float("nan")], 0.1, 5, "higher")
    with pytest.raises(ValueError, match="seeds"):
        simulate_power([1.0, 0.0], 0.1, 0, "higher")


def test_seed_spread_is_two_sided_so_no_effect_stays_rarely_called():
    """With seeds that differ in their whole shift and no true effect, a seed may move either way:
    the simulated analysis calls an effect about as often as its 5% error rate, not because the
    simulation only ever moved questions the claimed way."""
    base = _pilot(0.8, 160)
    assert simulate_power(base, 0.0, 12, "lower", seed_sd=0.05, simulations=80, replicates=200) <= 0.15

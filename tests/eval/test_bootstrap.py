"""Paired bootstrap intervals over questions and seeds (factlab.eval.bootstrap)."""

import random

import pytest

from factlab.eval.bootstrap import Effect, paired_bootstrap, verdict


def _arms(effect, n_q=40, seeds=(0, 1, 2), noise=0.2, rng_seed=1):
    rng = random.Random(rng_seed)
    base = {q: rng.random() for q in range(n_q)}
    treat = {(s, q): base[q] + effect + rng.gauss(0, noise) for s in seeds for q in range(n_q)}
    control = {(s, q): base[q] + rng.gauss(0, noise) for s in seeds for q in range(n_q)}
    return treat, control


def test_a_clear_effect_is_held_and_its_interval_contains_the_truth():
    treat, control = _arms(0.3)
    e = paired_bootstrap(treat, control, replicates=500)
    assert e.lo < 0.3 < e.hi and e.lo > 0 and (e.seeds, e.questions) == (3, 40)
    assert verdict(e, "higher") == "held" and verdict(e, "lower") == "not held"


def test_no_effect_is_null():
    treat, control = _arms(0.0)
    e = paired_bootstrap(treat, control, replicates=500)
    assert e.lo < 0 < e.hi and verdict(e, "higher") == "null" and verdict(e, "lower") == "null"


def test_pairing_removes_the_question_variance():
    """Questions differ a lot, the treatment adds exactly 0.05 to each: paired, the interval is tight."""
    base = {q: q / 10 for q in range(30)}
    treat = {(s, q): v + 0.05 for s in (0, 1, 2) for q, v in base.items()}
    e = paired_bootstrap(treat, base, replicates=300)  # a control measured once pairs with every seed
    assert e.mean == pytest.approx(0.05) and e.lo == pytest.approx(0.05) and e.hi == pytest.approx(0.05)


def test_unmatched_and_nan_pairs_are_left_out_and_nothing_left_raises():
    e = paired_bootstrap({(0, "a"): 1.0, (0, "b"): float("nan"), (0, "c"): 5.0}, {"a": 0.0, "b": 0.0}, replicates=50)
    assert e.mean == 1.0 and e.questions == 1
    with pytest.raises(ValueError, match="no \\(seed, question\\) pair"):
        paired_bootstrap({(0, "x"): 1.0}, {"y": 0.0})
    with pytest.raises(ValueError):
        verdict(Effect(0, 0, 0, 1, 1, 1), "up")

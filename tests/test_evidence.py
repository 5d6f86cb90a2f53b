"""factlab.evidence: the hypotheses, the analysis of an evidence record (paired effects,
verdicts, the results table) and the registry's params files."""

import json
import random

import pytest

from factlab import evidence as E
from factlab.config import load_config
from factlab.runner import config_for_notebook


def _record(effect_wrong=-0.5, seeds=(0, 1, 2), n=60):
    rng = random.Random(0)
    rows = [{"arm": "base", "seed": None, "question": q, "wrong": float(rng.random() < 0.6),
             "abstain": 0.0} for q in range(n)]
    for arm, shift in (("binary", effect_wrong), ("rating", 0.0)):
        for s in seeds:
            for q in range(n):
                p = min(max(0.6 + shift, 0.0), 1.0)
                rows.append({"arm": arm, "seed": s, "question": q, "wrong": float(rng.random() < p),
                             "abstain": float(arm == "binary" and rng.random() < 0.3)})
    curves = [{"arm": a, "seed": s, "step": t, "reward": 0.1 * t, "truth/score": 0.0, "frac_reward_zero_std": 0.5}
              for a in ("binary", "rating") for s in seeds for t in (1, 2)]
    cpu = [{"arm": a, "seed": s, "cpu_seconds": 120.0, "wall_seconds": 70.0} for a in ("binary", "rating") for s in seeds]
    return {"hypothesis": "binary_rar", "seeds": list(seeds), "arms": ["binary", "rating"], "rows": rows,
            "curves": curves, "cpu_seconds": cpu}


def test_analysis_of_a_clear_effect_holds_and_the_table_is_written(tmp_path):
    effects = E.analyze(_record(), E.HYPOTHESES["binary_rar"], replicates=400)
    first = effects[0]
    assert first["comparison"] == "wrong: binary - base" and first["primary"]
    assert first["hi"] < 0 and first["verdict"] == "held" and first["seeds"] == 3 and first["questions"] == 60
    assert effects[1]["verdict"] == "held"  # more abstentions than the base
    assert E.overall(effects) == "held"
    folder = tmp_path / "results" / "binary_rar"
    folder.mkdir(parents=True)
    (folder / "effects.json").write_text(json.dumps({"hypothesis": "binary_rar", "effects": effects, "verdict": "held",
                                                     "cpu_minutes": 12.5}))
    table = E.write_table(tmp_path / "results").read_text()
    assert "| binary_rar | wrong: binary - base | lower |" in table and "[" in table and "held (hypothesis: held)" in table


def test_a_null_and_a_failed_guard():
    null = E.analyze(_record(effect_wrong=0.0), E.HYPOTHESES["binary_rar"], replicates=300)
    assert null[0]["verdict"] == "null" and E.overall(null) == "null"
    guard = [{"primary": True, "direction": "lower", "verdict": "held"},
             {"primary": False, "direction": "not lower", "verdict": "not held"}]
    assert E.overall(guard) == "not held"


def test_per_step_comparison_and_cpu_scaling():
    rec = _record()
    for c in rec["curves"]:
        c["frac_reward_zero_std"] = 0.2 if c["arm"] == "binary" else 0.6
    h = E.Hypothesis("x", "02_binary_rar", "claim", (
        E.Comparison("nonzero_advantage", "binary", "rating", "higher", per="step"),
        E.Comparison("wrong", "binary", "rating", "lower", scale="cpu_minutes")))
    step, scaled = E.analyze(rec, h, replicates=200)
    assert step["mean"] == pytest.approx(0.4) and step["verdict"] == "held"
    plain = E.analyze(rec, E.Hypothesis("y", "02_binary_rar", "c", (E.Comparison("wrong", "binary", "rating", "lower"),)),
                      replicates=200)[0]
    assert scaled["mean"] == pytest.approx(plain["mean"] / 2.0)  # 120 CPU seconds = 2 minutes


def test_every_hypothesis_has_a_valid_evidence_params_file():
    for h in E.HYPOTHESES.values():
        cfg = load_config(h.params, config_for_notebook(h.notebook))
        ev = cfg.evidence
        assert ev is not None and ev.hypothesis == h.name and len(ev.seeds) >= 3
        arms = {a.name for a in ev.arms} | {"base"}
        for c in h.comparisons:
            assert {c.treatment, c.control} <= arms, (h.name, c)

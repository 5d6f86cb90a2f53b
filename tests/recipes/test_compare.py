"""06_compare's library: params rules, the rows every reward can read, and the comparison
rebuilt from run folders (collect / summarize / Pareto) without retraining."""

import json
import shutil
from pathlib import Path

import matplotlib
import pytest

from factlab import config
from factlab.data.types import QAItem
from factlab.eval.alarms import ALARM_NAMES, AlarmsSection
from factlab.eval.suites import SuiteResult
from factlab.rewards import available
from factlab.recipes import compare
from factlab.recipes.compare import BASE, CompareConfig, collect, compare_rows, summarize
from factlab.train.grpo import TrainResult
from factlab.plots import plot_pareto, plot_reward_curves
from factlab.stage_cache import StageCache

matplotlib.use("Agg")


def test_params_load_and_rules_name_the_key():
    cfg = config.load_config("params/06_compare_lm.yaml", CompareConfig)
    assert len(cfg.runs) >= 4 and {s.name for r in cfg.runs for s in r.rewards} <= set(available())
    dup = [{"name": "a", "rewards": [{"name": "format"}]}, {"name": "a", "rewards": [{"name": "format"}]}]
    with pytest.raises(config.ConfigError, match=r"'runs'.*unique.*\['a'\]"):
        config.load_config("params/06_compare_lm.yaml", CompareConfig, {"runs": dup})
    with pytest.raises(config.ConfigError, match=r"runs.*no_such_reward"):
        config.load_config("params/06_compare_lm.yaml", CompareConfig,
                           {"runs": [{"name": "x", "rewards": [{"name": "no_such_reward"}]}]})
    with pytest.raises(config.ConfigError, match=r"'seeds'"):
        config.load_config("params/06_compare_lm.yaml", CompareConfig, {"seeds": [1, 1]})


def test_rows_carry_every_rewards_columns():
    (row,) = compare_rows([QAItem("q1", "What is the capital of Peru?", ["Lima"])], system="S")
    assert row["prompt"][0] == {"role": "system", "content": "S"}
    assert row["golds"] == ["Lima"] and row["prompt_id"] == "q1" and row["question"].endswith("Peru?")
    assert row["checklist"][0].startswith("Identifies Lima") and "Lima" in row["reference"]


def _write(folder, run, seed, acc, cost):
    folder.mkdir(parents=True)
    StageCache(folder / "compare.json").save_record({
        "run": run, "seed": seed, "rewards": [], "steps": 2, "reward_seconds_per_step": cost,
        "judge_calls_per_step": 8 * cost, "judge_tokens_per_step": 100 * cost,
        "eval": {"mw/accuracy": acc, "mw/na_rate": 0.1}})


def test_collect_summarize_and_pareto_from_run_folders(tmp_path):
    _write(tmp_path / BASE, BASE, None, 0.20, 0.0)
    _write(tmp_path / "cheap/seed0", "cheap", 0, 0.25, 0.1)
    _write(tmp_path / "cheap/seed1", "cheap", 1, 0.27, 0.1)
    _write(tmp_path / "costly/seed0", "costly", 0, 0.40, 2.0)
    _write(tmp_path / "dominated/seed0", "dominated", 0, 0.22, 3.0)
    frame = collect(tmp_path)
    assert len(frame) == 5 and set(frame["run"]) == {BASE, "cheap", "costly", "dominated"}
    s = summarize(frame, "mw/accuracy")
    assert list(s.index) == ["cheap", "costly", "dominated"]
    assert s.loc["cheap", "seeds"] == 2 and s.loc["cheap", "gain"] == pytest.approx(0.06)
    assert s.loc["cheap", "spread"] == pytest.approx(0.01) and s.loc["costly", "spread"] == 0.0
    assert s.loc["costly", "judge_calls_per_step"] == pytest.approx(16.0)
    fig = plot_pareto(s, "mw/accuracy")
    ax = fig.axes[0]
    front = [line for line in ax.get_lines() if line.get_label() == "Pareto front"]
    assert len(front) == 1 and list(front[0].get_xdata()) == [0.1, 2.0]  # 'dominated' is off the front
    assert {t.get_text() for t in ax.texts} == {"cheap", "costly", "dominated"}
    # runs at the same cost and gain (nothing learned, no judge) get stacked, readable labels
    same = s.copy()
    same[["gain", "reward_seconds_per_step"]] = 0.0
    offsets = sorted(t.xyann[1] for t in plot_pareto(same, "mw/accuracy").axes[0].texts)
    assert len(set(offsets)) == 3
    with pytest.raises(KeyError, match="metric 'mw/f1' not in the comparison"):
        summarize(frame, "mw/f1")
    with pytest.raises(FileNotFoundError, match="no compare.json"):
        collect(tmp_path / "empty")


def test_full_params_compare_seva_claims_and_long_form():
    full = config.load_config("params/06_compare.yaml", CompareConfig)
    assert any(s.name == "seva_claims" for r in full.runs for s in r.rewards)
    assert full.longform is not None and full.longform.recall_k == 10


# ---------------------------------------------------------------- train then evaluate, with fakes

class Calls:
    def __init__(self):
        self.train, self.evaluated = [], []


def _fakes(monkeypatch, calls: Calls, trained_accuracy: float = 0.30):
    """GRPO and the evaluation replaced: training writes a finished TrainResult whose reward
    rises; the base scores 0.5 and every trained run ``trained_accuracy``."""
    def fake_run(cfg, rows, rewards, out_dir, *, name=None, grpo=None, **_):
        calls.train.append((name, grpo.seed))
        out_dir.mkdir(parents=True, exist_ok=True)
        log = [{"step": s, "loss": 0.1, "reward": 0.2 * s, "frac_reward_zero_std": 0.0,
                "completions/mean_length": 20.0, "rewards/format/mean": 0.2 * s} for s in (1, 2, 3, 4)]
        result = TrainResult(name=name, output_dir=str(out_dir), model_dir=str(out_dir / "model"), is_adapter=True,
                             base_model="m", log_history=log, steps=4)
        result.save()
        return result

    def fake_evaluate(cfg, model_dir, eval_sets, resources=None, lf_prompts=()):
        calls.evaluated.append(model_dir)
        return {"mw/accuracy": 0.5 if model_dir is None else trained_accuracy}

    monkeypatch.setattr(compare, "run", fake_run)
    monkeypatch.setattr(compare, "_evaluate", fake_evaluate)


class NoResources:
    """A second run must not build a judge, a datastore or anything else."""

    def built_judges(self):
        return []

    def __getattr__(self, name):
        raise AssertionError(f"re-run touched resources.{name}")


def _train_and_evaluate(cfg, resources, items, root):
    """The notebook's two stages: every run trained, then the base and every run evaluated."""
    inputs = compare.CompareInputs(list(items), {}, compare.compare_rows(items, cfg.system_prompt))
    compare.train(cfg, inputs, resources, root)
    return compare.evaluate(cfg, inputs, resources, root)


def _snapshot(root):
    return {str(p.relative_to(root)): (p.stat().st_mtime_ns, p.read_bytes()) for p in sorted(root.rglob("*"))
            if p.is_file()}


def _cfg():
    return config.load_config("params/06_compare_lm.yaml", CompareConfig, {
        "runs": [{"name": "fmt", "rewards": [{"name": "format"}]},
                 {"name": "fmt 2", "rewards": [{"name": "format", "args": {"positive": 0.5}}]}],
        "seeds": [0, 1], "longform": None})


def test_rerun_rebuilds_from_run_folders_without_training(tmp_path, monkeypatch):
    cfg, items = _cfg(), [QAItem("q1", "What is the capital of Peru?", ["Lima"])]
    calls = Calls()
    _fakes(monkeypatch, calls)
    first = _train_and_evaluate(cfg, NoResources(), items, tmp_path)
    assert sorted(calls.train) == [("compare-fmt", 0), ("compare-fmt", 1), ("compare-fmt 2", 0), ("compare-fmt 2", 1)]
    assert len(calls.evaluated) == 5 and calls.evaluated[0] is None  # the base once, then each run
    assert [(r["run"], r["seed"]) for r in first] == [(BASE, None), ("fmt", 0), ("fmt", 1), ("fmt 2", 0), ("fmt 2", 1)]
    before = _snapshot(tmp_path)

    again = Calls()
    _fakes(monkeypatch, again)
    second = _train_and_evaluate(cfg, NoResources(), items, tmp_path)
    assert again.train == [] and again.evaluated == []  # no training step, no evaluation, no judge
    assert second == first and _snapshot(tmp_path) == before  # folders unchanged
    assert len(collect(tmp_path)) == 5

    shutil.rmtree(tmp_path / "runs" / "fmt_2" / "seed1")  # one run redone; the rest read back
    third = Calls()
    _fakes(monkeypatch, third)
    _train_and_evaluate(cfg, NoResources(), items, tmp_path)
    assert third.train == [("compare-fmt 2", 1)] and len(third.evaluated) == 1


def test_alarms_read_the_heldout_metric_before_and_after_training(tmp_path, monkeypatch):
    cfg, items = _cfg(), [QAItem("q1", "What is the capital of Peru?", ["Lima"])]
    _fakes(monkeypatch, Calls(), trained_accuracy=0.30)  # the reward rises, accuracy falls 0.5 -> 0.3
    _train_and_evaluate(cfg, NoResources(), items, tmp_path)
    frame = collect(tmp_path)
    assert compare.heldout_series(frame, "mw/accuracy")["fmt · seed 1"] == {0: 0.5, 4: 0.3}
    table = compare.check_alarms(frame, "mw/accuracy", AlarmsSection(window=2))
    assert set(table["run"]) == {"fmt · seed 0", "fmt · seed 1", "fmt 2 · seed 0", "fmt 2 · seed 1"}
    assert set(table["alarm"]) == set(ALARM_NAMES)
    held = table[table["alarm"] == "reward_vs_heldout"]
    assert (held["status"] == "FIRED").all() and (held["step"] == 4).all()
    assert held["value"].tolist() == pytest.approx([0.4] * 4)  # relative drop (0.5 - 0.3) / 0.5
    written = {a["alarm"]: a for a in json.loads((tmp_path / "runs" / "fmt" / "seed0" / "train" / "alarms.json").read_text())}
    assert written["reward_vs_heldout"]["status"] == "FIRED"

    better = tmp_path / "better"
    _fakes(monkeypatch, Calls(), trained_accuracy=0.60)
    _train_and_evaluate(cfg, NoResources(), items, better)
    table = compare.check_alarms(collect(better), "mw/accuracy", AlarmsSection(window=2))
    assert (table.loc[table["alarm"] == "reward_vs_heldout", "status"] == "ok").all()


def test_long_form_evaluation_through_the_claim_verifier(monkeypatch):
    cfg = config.load_config("params/06_compare_lm.yaml", CompareConfig, {
        "longform": {"prompts": {"eval_limit": 3}, "generation": {"max_new_tokens": 40}, "recall_k": 5}})
    asked = []

    class Res:
        def precache(self, prompts):
            return list(prompts)[:2]  # one prompt left with too few documents

        def claim_verifier(self):
            return "VERIFIER"

    def fake_evaluate(suite, model, tok, data, generation, **kw):
        asked.append((suite, kw.get("verifier"), kw.get("k"), generation.max_new_tokens, data))
        if suite == "longform":
            return SuiteResult(suite, metrics={"longform": {"precision": 0.75, "recall@5": 0.4, "f1@5": 0.52,
                                                            "factscore": 0.6, "respond_ratio": 1.0, "n_claims": 4.0}})
        return SuiteResult(suite, metrics={"mw": {"accuracy": 0.5}})

    monkeypatch.setattr(compare, "load_model", lambda *a, **k: (object(), object()))
    monkeypatch.setattr(compare, "evaluate_suite", fake_evaluate)
    prompts = compare.longform_prompts(cfg, Res())
    assert len(prompts) == 2 and all(p.prompt.startswith("Tell me about ") for p in prompts)
    out = compare._evaluate(cfg, None, {"mw": []}, Res(), prompts)
    assert [a[0] for a in asked] == ["shortform", "abstention", "longform"]
    assert asked[-1][1:4] == ("VERIFIER", 5, 40) and asked[-1][4] == prompts
    assert out["longform/precision"] == 0.75 and out["longform/f1@5"] == 0.52 and out["longform/factscore"] == 0.6
    assert out["longform/recall@5"] == 0.4 and out["mw/accuracy"] == 0.5
    off = config.load_config("params/06_compare_lm.yaml", CompareConfig, {"longform": None})
    assert compare.longform_prompts(off, Res()) == []


def test_reward_curves_over_seeds_with_a_band(tmp_path, monkeypatch):
    _fakes(monkeypatch, Calls())
    _train_and_evaluate(_cfg(), NoResources(), [QAItem("q1", "Q?", ["A"])], tmp_path)
    curves = compare.reward_curves(tmp_path)
    assert len(curves) == 2 * 2 * 4 and set(curves["seed"]) == {0, 1}
    fig = plot_reward_curves(curves, collect(tmp_path), "mw/accuracy")
    left, right = fig.axes[:2]
    assert len(left.collections) >= 2  # one sd band per run (two seeds each)
    assert {t.get_text() for t in left.get_legend().get_texts()} >= {"fmt", "fmt 2"}
    assert any(line.get_label() == "base" for line in right.get_lines())
    with pytest.raises(ValueError, match="no reward curves"):
        plot_reward_curves(curves.iloc[0:0])


def test_a_run_whose_adapter_stayed_zero_takes_the_base_evaluation(tmp_path, monkeypatch):
    """Every group with zero reward spread leaves LoRA's B at zero: that policy is the base model,
    so its evaluation is the base's (marked), and a run that moved B is evaluated itself."""
    import torch
    from safetensors.torch import save_file

    cfg, items = _cfg(), [QAItem("q1", "What is the capital of Peru?", ["Lima"])]
    calls = Calls()
    _fakes(monkeypatch, calls)
    fake_run = compare.run

    def run_writing_adapters(cfg, rows, rewards, out_dir, **kw):
        result = fake_run(cfg, rows, rewards, out_dir, **kw)
        Path(result.model_dir).mkdir(parents=True)
        (Path(result.model_dir) / "adapter_config.json").write_text("{}")
        b = torch.zeros(4, 2) if kw["name"] == "compare-fmt" else torch.full((4, 2), 0.01)
        save_file({"m.q_proj.lora_A.weight": torch.ones(2, 4), "m.q_proj.lora_B.weight": b},
                  str(Path(result.model_dir) / "adapter_model.safetensors"))
        return result

    monkeypatch.setattr(compare, "run", run_writing_adapters)
    records = _train_and_evaluate(cfg, NoResources(), items, tmp_path)
    by_run = {(r["run"], r["seed"]): r for r in records}
    assert calls.evaluated == [None, str(tmp_path / "runs" / "fmt_2" / "seed0" / "train" / "model"),
                               str(tmp_path / "runs" / "fmt_2" / "seed1" / "train" / "model")]
    assert by_run[("fmt", 0)]["eval"] == by_run[(BASE, None)]["eval"] == {"mw/accuracy": 0.5}
    assert by_run[("fmt", 0)]["evaluated"] == "as base (adapter unchanged)"
    assert by_run[("fmt 2", 1)]["evaluated"] == "own" and by_run[("fmt 2", 1)]["eval"] == {"mw/accuracy": 0.30}
    assert set(collect(tmp_path)["evaluated"]) == {"own", "as base (adapter unchanged)"}


def test_training_cost_is_counted_where_the_run_trained_and_evaluation_needs_a_trained_run(tmp_path, monkeypatch):
    """``train`` records each run's seconds and judge use per step (``train_cost.json``) while it
    trains, so the notebook's evaluation (a later stage, maybe another process) reports them; a run
    trained before its cost was recorded reports its seconds and no judge count (NaN, not 0);
    evaluating before training names the untrained runs."""
    import math

    cfg, items = _cfg(), [QAItem("q1", "What is the capital of Peru?", ["Lima"])]

    class Judge:
        stats = {"calls": 0, "prompt_tokens": 0, "completion_tokens": 0}

    class Counting(NoResources):
        def built_judges(self):
            return [Judge]

    calls = Calls()
    _fakes(monkeypatch, calls)
    fake_run = compare.run

    def judged_run(*a, **kw):  # 8 judge calls of 10 + 2 tokens over the fake's 4 steps
        Judge.stats = {k: v + {"calls": 8, "prompt_tokens": 80, "completion_tokens": 16}[k]
                       for k, v in Judge.stats.items()}
        return fake_run(*a, **kw)

    monkeypatch.setattr(compare, "run", judged_run)
    inputs = compare.CompareInputs(items, {}, compare.compare_rows(items, cfg.system_prompt))
    with pytest.raises(FileNotFoundError, match=r"not trained yet: fmt seed 0 \(.*runs/fmt/seed0/train\)"):
        compare.evaluate(cfg, inputs, Counting(), tmp_path)
    compare.train(cfg, inputs, Counting(), tmp_path)
    (tmp_path / "runs" / "fmt_2" / "seed1" / compare.COST_FILE).unlink()  # as a run trained before costs were kept
    by_run = {(r["run"], r["seed"]): r for r in compare.evaluate(cfg, inputs, Counting(), tmp_path)}
    assert by_run[("fmt", 0)]["judge_calls_per_step"] == 2.0 and by_run[("fmt", 1)]["judge_tokens_per_step"] == 24.0
    assert math.isnan(by_run[("fmt 2", 1)]["judge_calls_per_step"]) and by_run[("fmt 2", 1)]["train_seconds"] == 0.0

"""06_compare's library: params rules, the rows every reward can read, and the comparison
rebuilt from run folders (collect / summarize / Pareto) without retraining."""

import json

import matplotlib
import pytest

from factlab import config
from factlab.data.types import QAItem
from factlab.rewards import available
from factlab.train.compare import BASE, CompareConfig, collect, compare_rows, plot_pareto, summarize

matplotlib.use("Agg")


def test_params_load_and_rules_name_the_key():
    cfg = config.load_config("params/06_compare_smoke.yaml", CompareConfig)
    assert len(cfg.runs) >= 4 and {s.name for r in cfg.runs for s in r.rewards} <= set(available())
    dup = [{"name": "a", "rewards": [{"name": "format"}]}, {"name": "a", "rewards": [{"name": "format"}]}]
    with pytest.raises(config.ConfigError, match=r"'runs'.*unique.*\['a'\]"):
        config.load_config("params/06_compare_smoke.yaml", CompareConfig, {"runs": dup})
    with pytest.raises(config.ConfigError, match=r"runs.*no_such_reward"):
        config.load_config("params/06_compare_smoke.yaml", CompareConfig,
                           {"runs": [{"name": "x", "rewards": [{"name": "no_such_reward"}]}]})
    with pytest.raises(config.ConfigError, match=r"'seeds'"):
        config.load_config("params/06_compare_smoke.yaml", CompareConfig, {"seeds": [1, 1]})


def test_rows_carry_every_rewards_columns():
    (row,) = compare_rows([QAItem("q1", "What is the capital of Peru?", ["Lima"])], system="S")
    assert row["prompt"][0] == {"role": "system", "content": "S"}
    assert row["golds"] == ["Lima"] and row["prompt_id"] == "q1" and row["question"].endswith("Peru?")
    assert row["checklist"][0].startswith("Identifies Lima") and "Lima" in row["reference"]


def _write(folder, run, seed, acc, cost):
    folder.mkdir(parents=True)
    (folder / "compare.json").write_text(json.dumps({
        "run": run, "seed": seed, "rewards": [], "steps": 2, "reward_seconds_per_step": cost,
        "judge_calls_per_step": 8 * cost, "judge_tokens_per_step": 100 * cost,
        "eval": {"mw/accuracy": acc, "mw/na_rate": 0.1}}))


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
    with pytest.raises(KeyError, match="metric 'mw/f1' not in the comparison"):
        summarize(frame, "mw/f1")
    with pytest.raises(FileNotFoundError, match="no compare.json"):
        collect(tmp_path / "empty")

"""Sweeps (factlab.sweep): grid parsing and expansion, validation of every point before anything
runs, failed points recorded while the rest go on, finished points skipped on a re-run; with a
cheap fake runner in place of papermill, on the local executor and on a local Ray instance."""

import importlib.util
import json
import os
import sys
from pathlib import Path

import pytest
import yaml

from factlab import cli, sweep
from factlab.config import ConfigError

ROOT = Path(__file__).resolve().parents[1]
K2V = ROOT / "params" / "04_k2v_lm.yaml"
ALPHA = "rewards.0.args.alpha"


def fake_runner(notebook: str, params_path: str, out_dir: str) -> dict:
    """Stands in for papermill: reads the point's params, fails on alpha 4, else writes a run
    folder whose metrics.json holds alpha / 10."""
    alpha = yaml.safe_load(Path(params_path).read_text())["rewards"][0]["args"]["alpha"]
    with open(Path(out_dir).parents[1] / "calls.log", "a") as f:
        f.write(f"{alpha} {os.getpid()}\n")
    if alpha == 4.0:
        raise RuntimeError("<b>cell 7 failed</b>")
    run_dir = Path(out_dir) / notebook / "run"
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "metrics.json").write_text(json.dumps({"after": {"acc": alpha / 10, "curve": [1, 2]}, "note": "x"}))
    return {"ok": True, "error": None, "run_dir": str(run_dir)}


def calls(out: Path) -> list[float]:
    path = out / "calls.log"
    return sorted(float(line.split()[0]) for line in path.read_text().splitlines()) if path.exists() else []


# ---------------------------------------------------------------- parsing and expansion

def test_split_values_respects_brackets_braces_and_quotes():
    assert sweep.split_values("1,2, 3") == ["1", "2", "3"]
    assert sweep.split_values("[a,b],{k: 1, j: 2},'x,y'") == ["[a,b]", "{k: 1, j: 2}", "'x,y'"]
    with pytest.raises(ConfigError, match="unbalanced"):
        sweep.split_values("[1,2")


def test_parse_grid_reads_values_as_yaml():
    grid = sweep.parse_grid(["a.b=1,2.5,null", "runs=[full]", "c={kappa: 0.2, mu: 0.8}"])
    assert grid == {"a.b": [1, 2.5, None], "runs": [["full"]], "c": [{"kappa": 0.2, "mu": 0.8}]}
    for bad in ("alpha", "=1,2", "a="):
        with pytest.raises(ConfigError, match="KEY=V1,V2"):
            sweep.parse_grid([bad])
    with pytest.raises(ConfigError, match="twice"):
        sweep.parse_grid(["a=1", "a=2"])


def test_set_dotted_lists_mappings_and_errors():
    data = {"rewards": [{"name": "k2v", "args": {"alpha": 6.0, "verdict": "choice"}}], "grpo": {"beta": 0.0}}
    out = sweep.set_dotted(data, "rewards.0.args.alpha", 2.0)
    assert out["rewards"][0]["args"] == {"alpha": 2.0, "verdict": "choice"}
    assert data["rewards"][0]["args"]["alpha"] == 6.0  # a copy
    merged = sweep.set_dotted(data, "rewards.0.args", {"alpha": 4.0})
    assert merged["rewards"][0]["args"] == {"alpha": 4.0, "verdict": "choice"}
    assert sweep.set_dotted(data, "grpo.extra.new", 1)["grpo"]["extra"] == {"new": 1}
    with pytest.raises(ConfigError, match="'rewards.3' needs a list index below 1"):
        sweep.set_dotted(data, "rewards.3.args.alpha", 1)
    with pytest.raises(ConfigError, match="'grpo.beta' is a float"):
        sweep.set_dotted(data, "grpo.beta.x", 1)


def test_expand_grid_is_the_product_in_order_and_ids_are_stable():
    points = sweep.expand_grid({"a": [1, 2], "b": ["x", "y", "z"]})
    assert points[0] == {"a": 1, "b": "x"} and points[-1] == {"a": 2, "b": "z"} and len(points) == 6
    ids = [sweep.point_id(p) for p in points]
    assert len(set(ids)) == 6 and ids[0].startswith("a=1_b=x-")
    assert sweep.point_id({"a": 1, "b": "x"}) == ids[0]


# ---------------------------------------------------------------- planning (validation before running)

def test_plan_validates_every_point_and_merges_the_yaml_grid(tmp_path):
    plan = sweep.plan_sweep("04_k2v", K2V, {ALPHA: [2.0, 8.0]}, max_workers=2)
    assert [p.params["rewards"][0]["args"]["alpha"] for p in plan.points] == [2.0, 8.0]
    assert all(p.params["rewards"][0]["args"]["verdict"] == "choice" for p in plan.points)
    assert all(p.params["sweep"] is None for p in plan.points) and plan.settings.max_workers == 2
    # the file's sweep block is the grid; the command line overrides it key by key
    example = ROOT / "params" / "sweeps" / "04_k2v_alpha.yaml"
    assert len(sweep.plan_sweep("04_k2v", example).points) == 5
    assert len(sweep.plan_sweep("04_k2v", example, {ALPHA: [1.0]}).points) == 1


def test_a_bad_point_fails_the_plan_naming_point_and_key():
    with pytest.raises(ConfigError) as e:
        sweep.plan_sweep("04_k2v", K2V, {ALPHA: [2.0, "lots"], "grpo.beta": [0.0]})
    msg = str(e.value)
    assert "1 of 2 sweep points" in msg and "rewards.0.args.alpha" in msg and "lots" in msg
    with pytest.raises(ConfigError, match="unknown key 'rewardz'"):
        sweep.plan_sweep("04_k2v", K2V, {"rewardz.0": [1]})
    with pytest.raises(ConfigError, match="no grid"):
        sweep.plan_sweep("04_k2v", K2V, {})
    with pytest.raises(ConfigError, match="executor"):
        sweep.plan_sweep("04_k2v", K2V, {ALPHA: [1.0]}, executor="slurm")


@pytest.mark.parametrize("example", sorted((ROOT / "params" / "sweeps").glob("*.yaml")), ids=lambda p: p.stem)
def test_readme_sweep_examples_validate(example):
    notebook = {"04": "04_k2v", "01": "01_corver", "06": "06_compare"}[example.stem[:2]]
    plan = sweep.plan_sweep(notebook, example)
    assert len(plan.points) >= 5 and plan.settings.metric


# ---------------------------------------------------------------- running: failures, skips, summary

def test_failed_point_is_recorded_the_rest_go_on_and_a_rerun_skips_finished(tmp_path):
    plan = sweep.plan_sweep("04_k2v", K2V, {ALPHA: [2.0, 4.0, 6.0]}, metric="after.acc")
    frame = sweep.run_sweep(plan, tmp_path, runner_fn=fake_runner)
    assert list(frame["status"]) == ["ok", "failed", "ok"]
    assert frame.loc[0, "after.acc"] == pytest.approx(0.2) and "note" not in frame and "after.curve" not in frame
    assert "RuntimeError" in frame.loc[1, "error"]
    assert calls(tmp_path) == [2.0, 4.0, 6.0]
    html = (tmp_path / "summary.html").read_text()
    assert "&lt;b&gt;cell 7 failed" in html and "<b>cell" not in html
    assert (tmp_path / "summary.csv").exists() and (tmp_path / "figures" / "after.acc.png").stat().st_size > 0
    status = json.loads((tmp_path / "points" / frame.loc[0, "point"] / "status.json").read_text())
    assert status["ok"] and status["overrides"] == {ALPHA: 2.0}

    # re-run: the two finished points are skipped, the failed one runs again
    again = sweep.run_sweep(plan, tmp_path, runner_fn=fake_runner)
    assert calls(tmp_path) == [2.0, 4.0, 4.0, 6.0]
    assert list(again["status"]) == ["ok", "failed", "ok"]
    # a grown grid keeps the finished points; a changed base re-runs them
    bigger = sweep.plan_sweep("04_k2v", K2V, {ALPHA: [2.0, 6.0, 8.0]})
    sweep.run_sweep(bigger, tmp_path, runner_fn=fake_runner)
    assert calls(tmp_path) == [2.0, 4.0, 4.0, 6.0, 8.0]
    changed = sweep.plan_sweep("04_k2v", K2V, {ALPHA: [2.0], "grpo.learning_rate": [1e-4]})
    sweep.run_sweep(changed, tmp_path, runner_fn=fake_runner)
    assert calls(tmp_path) == [2.0, 2.0, 4.0, 4.0, 6.0, 8.0]


def test_local_process_pool_runs_points_in_workers(tmp_path):
    plan = sweep.plan_sweep("04_k2v", K2V, {ALPHA: [2.0, 6.0, 8.0]}, max_workers=2)
    frame = sweep.run_sweep(plan, tmp_path, runner_fn=fake_runner)
    assert list(frame["status"]) == ["ok"] * 3
    pids = {int(line.split()[1]) for line in (tmp_path / "calls.log").read_text().splitlines()}
    assert os.getpid() not in pids


def test_cli_sweep_dry_run_and_bad_grid(tmp_path, capsys):
    assert cli.main(["sweep", "04_k2v", "--params", str(K2V), "--grid", f"{ALPHA}=2,6", "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "2 points of 04_k2v (local executor)" in out and "alpha=2" in out
    assert cli.main(["sweep", "04_k2v", "--params", str(K2V), "--grid", f"{ALPHA}=2,x", "--dry-run"]) == 2
    assert "rewards.0.args.alpha" in capsys.readouterr().err


@pytest.mark.skipif(importlib.util.find_spec("ray") is None,
                    reason="Ray is not installed: pip install 'factlab[ray]' to test the ray executor")
def test_ray_executor_on_a_local_instance_with_two_workers(tmp_path):
    import ray
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])  # workers need not import this test file
    plan = sweep.plan_sweep("04_k2v", K2V, {ALPHA: [2.0, 4.0, 6.0]}, executor="ray", max_workers=2,
                            ray={"num_cpus": 1})
    try:
        frame = sweep.run_sweep(plan, tmp_path, runner_fn=fake_runner)
    finally:
        cloudpickle.unregister_pickle_by_value(sys.modules[__name__])
    assert not ray.is_initialized()  # the local instance it started is shut down
    assert list(frame["status"]) == ["ok", "failed", "ok"] and "cell 7 failed" in frame.loc[1, "error"]
    pids = {int(line.split()[1]) for line in (tmp_path / "calls.log").read_text().splitlines()}
    assert os.getpid() not in pids  # ran in Ray workers

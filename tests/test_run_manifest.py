"""Run folders: the manifest (config, versions, git, hardware, seeds, times, exit state) and
``--resume``. papermill is replaced by a stand-in that writes what a notebook would, so the
runner's bookkeeping is tested in milliseconds; training's checkpoint resume is tested on a
real GRPO run in test_grpo_run.py."""

import json
import os
import re
import shutil
import signal
import subprocess
import time

import nbformat
import papermill as pm
import pytest
import torch
import yaml

from factlab import cli, manifest, runner


class FakePapermill:
    """Stands in for ``papermill.execute_notebook``: records each call's parameters and the
    manifest state seen while "running", writes the executed notebook and a stage file,
    then behaves as ``outcome`` says (None: finish; an exception: raise it)."""

    def __init__(self):
        self.calls, self.outcome = [], None

    def __call__(self, input_path, output_path, parameters, **kw):
        run_dir = parameters["run_dir"]
        seen = {"parameters": parameters, "state": manifest.read_manifest(run_dir)["state"],
                "stage_done_before": os.path.exists(os.path.join(run_dir, "stage.done"))}
        self.calls.append(seen)
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("hello")]), output_path)
        with open(os.path.join(run_dir, "stage.done"), "w") as f:  # a stage that a resume finds finished
            f.write("1")
        if self.outcome is not None:
            raise self.outcome


@pytest.fixture
def fake_pm(monkeypatch):
    fake = FakePapermill()
    monkeypatch.setattr(runner.pm, "execute_notebook", fake)
    return fake


def _run(tmp_path, **kw):
    return runner.run_notebook("00_quickstart", smoke=True, out=tmp_path / "runs", progress=False,
                               raise_on_error=False, **kw)


def test_manifest_of_a_finished_run(tmp_path, fake_pm):
    res = _run(tmp_path)
    m = manifest.read_manifest(res.run_dir)
    assert res.ok and fake_pm.calls[0]["state"] == "running"  # written before the kernel starts
    assert m["state"] == "ok" and m["error"] is None and m["notebook"] == "00_quickstart"
    assert m["params"].endswith("00_quickstart_smoke.yaml")
    assert m["config"] == yaml.safe_load((res.run_dir / "config.yaml").read_text())
    assert m["config"]["eval"][0]["limit"] == 64  # the resolved smoke config, not the base file
    assert m["seeds"] and all(k.endswith("seed") for k in m["seeds"])
    assert m["seeds"]["eval_generation.seed"] == m["config"]["eval_generation"]["seed"]
    assert m["packages"]["torch"].split("+")[0] == torch.__version__.split("+")[0]
    assert m["packages"]["transformers"] and m["packages"]["trl"] and "peft" in m["packages"]
    assert m["hardware"]["cpu_count"] == os.cpu_count() and m["hardware"]["ram_gb"] > 0
    assert m["hardware"]["gpus"] is None or m["hardware"]["gpus"]
    assert m["hardware"]["threads"]["OMP_WAIT_POLICY"] == os.environ["OMP_WAIT_POLICY"]  # what kernels inherit
    assert m["started_at"] <= m["ended_at"] and len(m["attempts"]) == 1
    assert m["attempts"][0]["pid"] == os.getpid() and m["attempts"][0]["state"] == "ok"
    assert "commit" in m["git"] and "dirty" in m["git"]


def test_failed_and_interrupted_runs_say_so(tmp_path, fake_pm):
    fake_pm.outcome = pm.PapermillExecutionError(3, 4, "x = 1/0", "ZeroDivisionError", "division by zero", [])
    res = _run(tmp_path)
    m = manifest.read_manifest(res.run_dir)
    assert not res.ok and m["state"] == "failed" and m["error"] == "ZeroDivisionError: division by zero (cell 4)"
    fake_pm.outcome = KeyboardInterrupt()
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path)
    latest = max((tmp_path / "runs/00_quickstart").iterdir())
    m = manifest.read_manifest(latest)
    assert m["state"] == "interrupted" and m["ended_at"] and m["attempts"][-1]["state"] == "interrupted"
    # Ctrl-C reaching the kernel comes back as a cell error named KeyboardInterrupt
    assert runner.exit_state("KeyboardInterrupt:  (cell 7)")[0] == "interrupted"
    assert runner.exit_state(RuntimeError("boom\nmore")) == ("failed", "RuntimeError: boom")


def test_resume_continues_in_the_same_folder(tmp_path, fake_pm):
    fake_pm.outcome = KeyboardInterrupt()
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path)
    run_dir = next((tmp_path / "runs/00_quickstart").iterdir())
    config = (run_dir / "config.yaml").read_text()
    first = manifest.read_manifest(run_dir)
    fake_pm.outcome = None
    res = runner.run_notebook("00_quickstart", resume=run_dir, progress=False, raise_on_error=False)
    assert res.ok and res.run_dir == run_dir
    assert list((tmp_path / "runs/00_quickstart").iterdir()) == [run_dir]  # no new run folder
    again = fake_pm.calls[-1]
    assert again["parameters"]["run_dir"] == str(run_dir.resolve())
    assert again["parameters"]["params_file"] == str((run_dir / "config.yaml").resolve())
    assert again["stage_done_before"]  # the interrupted attempt's work is there to be reused
    assert (run_dir / "config.yaml").read_text() == config
    m = manifest.read_manifest(run_dir)
    assert m["state"] == "ok" and m["started_at"] == first["started_at"] and m["params"] == first["params"]
    assert [a["state"] for a in m["attempts"]] == ["interrupted", "ok"] and m["attempts"][1]["resumed"]
    with pytest.raises(ValueError, match="finished ok; nothing to resume"):
        runner.run_notebook("00_quickstart", resume=run_dir)


def test_resume_refuses_what_it_cannot_continue(tmp_path, fake_pm):
    fake_pm.outcome = KeyboardInterrupt()
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path)
    run_dir = next((tmp_path / "runs/00_quickstart").iterdir())
    with pytest.raises(ValueError, match=r"drop --params, --smoke"):
        runner.run_notebook("00_quickstart", resume=run_dir, params="x.yaml", smoke=True)
    with pytest.raises(ValueError, match="a run of 00_quickstart, not of 01_corver"):
        runner.run_notebook("01_corver", resume=run_dir)
    with pytest.raises(ValueError, match="not a run folder"):
        runner.run_notebook("00_quickstart", resume=tmp_path)
    m = manifest.read_manifest(run_dir)
    m["state"] = "running"  # another live process (this one) holds it
    m["attempts"][-1]["pid"] = os.getppid()
    manifest.write_manifest(run_dir, m)
    with pytest.raises(ValueError, match=r"still running \(pid"):
        runner.run_notebook("00_quickstart", resume=run_dir)
    (run_dir / "manifest.json").write_text("{not json")
    with pytest.raises(ValueError, match="manifest.json: unreadable run manifest"):
        runner.run_notebook("00_quickstart", resume=run_dir)
    assert len(fake_pm.calls) == 1  # nothing was executed


def test_cli_resume_errors_and_interrupt_exit_code(tmp_path, fake_pm, capsys):
    assert cli.main(["run", "00_quickstart", "--resume", str(tmp_path)]) == 2
    assert "not a run folder" in capsys.readouterr().err
    fake_pm.outcome = KeyboardInterrupt()
    assert cli.main(["run", "00_quickstart", "--smoke", "--out", str(tmp_path / "runs")]) == 130
    run_dir = next((tmp_path / "runs/00_quickstart").iterdir())
    assert manifest.read_manifest(run_dir)["state"] == "interrupted"
    fake_pm.outcome = pm.PapermillExecutionError(0, 1, "", "ValueError", "bad", [])
    assert cli.main(["run", "00_quickstart", "--resume", str(run_dir)]) == 1
    assert f"--resume {run_dir}" in capsys.readouterr().err
    fake_pm.outcome = None
    assert cli.main(["run", "00_quickstart", "--resume", str(run_dir)]) == 0
    assert [a["state"] for a in manifest.read_manifest(run_dir)["attempts"]] == ["interrupted", "failed", "ok"]


def test_sigterm_ends_a_run_like_ctrl_c():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt, match="signal"):
        with cli._sigterm_as_interrupt():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises here, at once
    assert signal.getsignal(signal.SIGTERM) is before


def test_find_seeds_walks_nested_config():
    cfg = {"seed": 1, "grpo": {"seed": 42, "lr": 1.0}, "runs": [{"data_seed": 3}], "judge": {"seed_text": "x"}}
    assert manifest.find_seeds(cfg) == {"seed": 1, "grpo.seed": 42, "runs.0.data_seed": 3}


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_git_state_commit_dirty_and_no_repository(tmp_path):
    assert manifest.git_state(tmp_path)["commit"] is None and "no git commit" in manifest.git_state(tmp_path)["note"]
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    (tmp_path / "a.txt").write_text("1")
    for args in (["init", "-q"], ["add", "a.txt"], ["commit", "-qm", "one"]):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, env=env)
    clean = manifest.git_state(tmp_path)
    assert re.fullmatch(r"[0-9a-f]{40}", clean["commit"]) and clean["dirty"] is False
    (tmp_path / "a.txt").write_text("2")
    assert manifest.git_state(tmp_path) == {"commit": clean["commit"], "dirty": True}

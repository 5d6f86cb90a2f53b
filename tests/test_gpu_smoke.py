"""bench/gpu_smoke.sh, the prepared device check of issue 42: its --dry-run runs every step at CPU
sizes here; its time limits fit 9 minutes; what it carries leaves vLLM out. And the [gpu] extra
pins the vLLM release that TRL's own vllm extra admits."""

import json
import os
import re
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "bench" / "gpu_smoke.sh"
STEPS = ["preflight", "grpo-step", "judge", "master-weights", "plan-vs-peak"]


def test_the_step_limits_fit_nine_minutes_and_the_wheels_leave_vllm_out():
    limits = {m.group(1): int(m.group(2)) for m in re.finditer(r"^step (\S+) (\d+) ", SCRIPT.read_text(), re.M)}
    assert list(limits) == STEPS and sum(limits.values()) <= 9 * 60
    wheels = [w for w in (ROOT / "bench" / "gpu_smoke_wheels.txt").read_text().splitlines()
              if w.strip() and not w.startswith("#")]
    assert "trl==1.16.0" in wheels and "pydantic==2.14.4" in wheels and not any("vllm" in w for w in wheels)


def test_the_dry_run_runs_every_step(tmp_path):
    env = {**os.environ, "PYTHON": sys.executable, "OUT": str(tmp_path), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(["bash", str(SCRIPT), "--dry-run"], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["mode"] == "dry" and summary["failed"] == 0
    assert [s["step"] for s in summary["steps"]] == STEPS and all(s["exit"] == 0 for s in summary["steps"])
    results = {s["step"]: s["result"] for s in summary["steps"]}
    assert results["master-weights"]["moved_bf16"] == 0 and results["master-weights"]["moved_fp32"] == 1000
    assert results["plan-vs-peak"]["planned_gb"] > 0
    # the GRPO step's launch: factlab train of 01 on the tiny model, bf16, LoRA, checkpointing, one process
    cmd = (tmp_path / "grpo-step.log").read_text()
    assert "-m factlab.launch --notebook 01_corver" in cmd and "--mixed_precision bf16" in cmd
    tiny = (tmp_path / "01_tiny.yaml").read_text()
    assert "tiny-random-smollm2" in tiny and "gradient_checkpointing: true" in tiny and "max_steps: 1" in tiny


def test_the_gpu_extra_pins_a_vllm_that_trl_admits():
    """pyproject's [gpu] extra: vllm pinned exactly, inside the installed TRL's own vllm extra
    (TRL 1.16: >=0.22, <=0.31); no flash-attn (it builds from source against an installed torch)."""
    import tomllib

    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]["gpu"]
    reqs = {Requirement(r).name: Requirement(r) for r in extra}
    assert set(reqs) == {"vllm", "bitsandbytes"}
    (pin,) = [s.version for s in reqs["vllm"].specifier if s.operator == "=="]
    trl_vllm = [Requirement(r) for r in metadata.requires("trl") if Requirement(r).name == "vllm"]
    assert trl_vllm and all(r.specifier.contains(pin) for r in trl_vllm), (pin, trl_vllm)

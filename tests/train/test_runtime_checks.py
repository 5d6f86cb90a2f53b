"""Checks at params load on every path that trains (issue 42 "Checks come late"): `factlab run`
refuses full params that ask for vLLM on a machine without it before a kernel starts, and each
training notebook checks right after loading its params, before any stage runs."""

import importlib.util
import re
from pathlib import Path

import nbformat
import papermill
import pytest

from factlab.cli import main
from factlab.train import RuntimeCheckError, check_runtime
from factlab.runner import load_params

ROOT = Path(__file__).resolve().parents[2]
TRAINING = ["01_corver", "02_binary_rar", "03_seva", "04_k2v", "05_klcf", "06_compare"]
no_vllm = pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")


@no_vllm
def test_factlab_run_refuses_vllm_params_before_a_kernel_starts(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(papermill, "execute_notebook", lambda *a, **k: pytest.fail("a kernel started"))
    assert main(["run", "01_corver", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "grpo.use_vllm is true and vllm is not installed" in err and "make setup-gpu" in err
    assert not any(tmp_path.iterdir())  # no run folder made


@no_vllm
@pytest.mark.parametrize("notebook", TRAINING)
def test_full_params_ask_this_machine_for_vllm(notebook):
    with pytest.raises(RuntimeCheckError, match="grpo.use_vllm"):
        check_runtime(load_params(notebook, ROOT / "params" / f"{notebook}.yaml"))
    check_runtime(load_params(notebook, ROOT / "params" / f"{notebook}_smoke.yaml"))  # CPU params pass


@pytest.mark.parametrize("notebook", TRAINING)
def test_each_training_notebook_checks_right_after_loading_its_params(notebook):
    nb = nbformat.read(ROOT / "notebooks" / f"{notebook}.ipynb", as_version=4)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    lines = [line for line in code.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    load = next(i for i, line in enumerate(lines) if re.match(r"cfg = config\.load_config\(params_file", line))
    assert lines[load + 1].startswith("check_runtime(cfg)"), lines[load:load + 2]
    assert "from factlab.train import check_runtime" in code

"""Mixed precision that learns (issue 42 "bf16 full fine-tunes"): a full fine-tune keeps fp32
master weights, so AdamW's 1e-6 steps move weights of about 0.02, which pure bf16 rounds away
(half a bf16 ulp at 0.02 is ~6e-5). Measured on CPU with the shipped params' learning rates."""

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from factlab import models
from factlab.runner import load_params
from factlab.train import grpo as grpo_mod
from factlab.train.precision import weights_moved as weights_changed

ROOT = Path(__file__).resolve().parents[2]
FULL_FINETUNES = ["02_binary_rar", "03_seva", "04_k2v", "05_klcf", "06_compare"]  # lora: null


def test_pure_bf16_rounds_a_1e6_update_away_and_fp32_master_weights_keep_it():
    assert weights_changed(torch.bfloat16, 1e-6) == 0  # the measurement: 0 of 1,000
    assert weights_changed(torch.float32, 1e-6) == 1000


@pytest.mark.parametrize("notebook", FULL_FINETUNES)
def test_the_shipped_full_finetunes_learn_at_their_learning_rate(notebook):
    """Under the shipped params, the dtype the policy trains in lets every 0.02 weight move; the
    dtype of the params' ``model.dtype`` (bf16, what the runs trained in before) moves none."""
    cfg = load_params(notebook, ROOT / "params" / f"{notebook}.yaml")
    assert cfg.lora is None and cfg.model.dtype == "bfloat16" and cfg.grpo.bf16
    trained = models.training_dtype(cfg.model.dtype, full_finetune=cfg.lora is None)
    lr = cfg.grpo.learning_rate
    assert weights_changed(getattr(torch, trained), lr) == 1000, (notebook, trained, lr)
    if lr <= 2e-6:  # 02, 04, 05, 06 train at 1e-6 and 03 at 2e-6: pure bf16 moves nothing
        assert weights_changed(getattr(torch, cfg.model.dtype), lr) == 0


def test_grpo_run_loads_the_policy_in_the_training_dtype_and_the_reference_in_bf16(monkeypatch, tmp_path):
    """train.grpo.run loads a full fine-tune's policy in fp32 and asks TRL for a bf16 reference."""
    cfg = load_params("02_binary_rar", ROOT / "params" / "02_binary_rar.yaml")
    seen = {}

    def fake_load(name, dtype="float32", device="auto", adapter=None):
        seen["dtype"] = dtype
        raise RuntimeError("stop after loading")

    real_args = grpo_mod.grpo_args

    def args_first(*a, **k):  # built before the policy loads: ZeRO-3's zero.Init can partition the load
        assert "dtype" not in seen
        seen["args"] = real_args(*a, **k)
        return seen["args"]

    monkeypatch.setattr(grpo_mod, "load_model", fake_load)
    monkeypatch.setattr(grpo_mod, "grpo_args", args_first)
    with pytest.raises(RuntimeError, match="stop after loading"):
        grpo_mod.run(cfg, [], SimpleNamespace(weights=[1.0]), tmp_path / "run")
    assert seen["dtype"] == "float32" and seen["args"].model_init_kwargs == {"dtype": "bfloat16"}
    args = real_args(cfg.grpo, tmp_path, ref_dtype="bfloat16")
    assert args.model_init_kwargs == {"dtype": "bfloat16"} and args.vllm_max_model_length == 5120
    # LoRA keeps the frozen base in the params' dtype
    assert models.training_dtype("bfloat16", full_finetune=False) == "bfloat16"

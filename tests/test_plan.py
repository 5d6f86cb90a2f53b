"""The GPU memory planner (factlab.plan; issue 42 "A memory planner", "Full params that fit"):
published rules (16 bytes a parameter for mixed-precision Adam, ZeRO's stage formulas, vLLM's
KV cache a token), the refusal of the old 01 batch by `factlab check --gpu-mem 80`, and every
full params file fitting 1 x 80 GB and 8 x 80 GB."""

from pathlib import Path

import pytest
import yaml

from factlab.cli import main
from factlab.config import ConfigError, read_params, validate
from factlab.plan import (GB, STRATEGIES, ModelShape, load_strategy, lora_params, model_shape, plan_config,
                          policy_state_terms, zero_bytes)
from factlab.runner import config_for_notebook, load_params

ROOT = Path(__file__).resolve().parents[1]
FULL = sorted(p for p in (ROOT / "params").glob("0*.yaml") if not p.stem.endswith(("_smoke", "_evidence", "_lm", "_organism")))


def test_mixed_precision_adam_is_16_bytes_a_parameter():
    """ZeRO §3.1: fp16/bf16 weights (2) and gradients (2), fp32 master, momentum and variance (12)."""
    assert sum(zero_bytes(1e9, ranks=1, stage=0)) == 16e9
    # factlab's own path (no DeepSpeed): fp32 weights in the model (4), fp32 gradients (4), AdamW (8)
    shape = model_shape("Qwen/Qwen3-8B")
    terms, host, trainable = policy_state_terms(shape, None, "adamw_torch", STRATEGIES["single"], 1, 4)
    state = sum(t.bytes for t in terms if t.name in ("weights", "gradients", "optimizer states"))
    assert state == 16 * shape.params and trainable == shape.params and not host
    # DeepSpeed's bf16 path: the same 16 bytes, with the master copy inside the optimizer
    terms, _, _ = policy_state_terms(shape, None, "adamw_torch", STRATEGIES["zero2"], 1, 4)
    assert sum(t.bytes for t in terms) == 16 * shape.params


def test_zero_stage_formulas_match_the_papers_figure_1():
    """ZeRO (Rajbhandari et al. 2020) Figure 1: a 7.5 B model on 64 GPUs, K = 12: 120 GB replicated,
    31.4 GB with P_os (stage 1), 16.6 GB with P_os+g (stage 2), 1.9 GB with P_os+g+p (stage 3)."""
    per_rank = [sum(zero_bytes(7.5e9, 64, stage)) / GB for stage in range(4)]
    assert per_rank == pytest.approx([120.0, 31.4, 16.6, 1.875], abs=0.05)
    w, g, o = zero_bytes(8e9, 8, 1)  # stage 1 shards only the optimizer states
    assert (w, g, o) == (16e9, 16e9, 12e9)
    assert zero_bytes(8e9, 8, 2) == (16e9, 2e9, 12e9)  # stage 2 adds the gradients
    assert zero_bytes(8e9, 8, 3) == (2e9, 2e9, 12e9)  # stage 3 adds the weights


def test_shapes_from_the_shipped_config_json():
    llama = model_shape("meta-llama/Llama-3.1-8B-Instruct")
    # vLLM's KV cache a token: 2 (K, V) x 32 layers x 8 KV heads x 128 head dim x 2 bytes (bf16)
    assert llama.kv_bytes_per_token(2) == 2 * 32 * 8 * 128 * 2 == 131072
    assert llama.params / 1e9 == pytest.approx(8.03, abs=0.01)  # the model card's 8.03 B
    assert model_shape("Qwen/Qwen3-8B").params / 1e9 == pytest.approx(8.19, abs=0.01)
    assert model_shape("Qwen/Qwen2.5-7B").params / 1e9 == pytest.approx(7.62, abs=0.01)
    assert model_shape("Qwen/Qwen2.5-3B").params / 1e9 == pytest.approx(3.09, abs=0.01)
    assert model_shape("QuCo-extractor-0.5B").params / 1e9 == pytest.approx(0.49, abs=0.01)
    # LoRA r=128 on the seven projections of Llama-3.1-8B: 128 x (in + out) per projection and layer
    assert lora_params(llama, 128, ["q_proj", "v_proj"]) == 32 * 128 * ((4096 + 4096) + (4096 + 1024))
    with pytest.raises(ValueError, match="no config.json for model 'org/unknown'"):
        model_shape("org/unknown")


def test_the_tiny_model_folder_is_read_from_its_own_config(tmp_path):
    (tmp_path / "config.json").write_text('{"num_hidden_layers": 2, "hidden_size": 64, "intermediate_size": 128, '
                                          '"num_attention_heads": 4, "vocab_size": 100}')
    shape = model_shape(str(tmp_path))
    assert isinstance(shape, ModelShape) and shape.kv_heads == 4 and shape.head_dim == 16


def test_strategies_are_the_accelerate_configs():
    """The planner's named strategies shard as params/accelerate/<name>.yaml says."""
    for name in ("ddp", "zero2", "zero3", "zero3_offload", "fsdp2"):
        from_yaml = load_strategy(str(ROOT / "params" / "accelerate" / f"{name}.yaml"))
        ours = STRATEGIES[name]
        assert (from_yaml.stage, from_yaml.deepspeed, from_yaml.offload_optimizer, from_yaml.offload_params) == \
               (ours.stage, ours.deepspeed, ours.offload_optimizer, ours.offload_params), name


def _old_01(tmp_path) -> Path:
    """01_corver with the batch it shipped with before issue 42: 128 completions a device."""
    old = tmp_path / "01_old.yaml"
    old.write_text(yaml.safe_dump({"base": str(ROOT / "params" / "01_corver.yaml"),
                                   "grpo": {"per_device_train_batch_size": 128, "gradient_accumulation_steps": 3}}))
    return old


def test_check_refuses_the_old_01_batch_naming_the_term(tmp_path, capsys):
    old = _old_01(tmp_path)
    assert main(["check", "01_corver", "--params", str(old), "--gpu-mem", "80"]) == 1
    err = capsys.readouterr().err
    assert "does not fit 1 x 80 GB" in err and "logits" in err and "activations" in err, err
    assert main(["check", "01_corver", "--params", str(old), "--gpu-mem", "80", "--gpus", "8"]) == 1
    capsys.readouterr()
    assert main(["check", "01_corver", "--params", str(ROOT / "params" / "01_corver.yaml"), "--gpu-mem", "80"]) == 0
    assert "fits 1 x 80 GB" in capsys.readouterr().out


def test_plan_prints_every_term_and_exits_1_when_a_named_strategy_does_not_fit(tmp_path, capsys):
    old = _old_01(tmp_path)
    assert main(["plan", "01_corver", "--params", str(old), "--gpus", "8", "--strategy", "ddp"]) == 1
    out = capsys.readouterr().out
    assert "strategy ddp" in out and "tried in order" not in out and "DOES NOT FIT" in out
    for term in ("weights", "gradients", "optimizer states", "activations", "logits", "vLLM (colocated)",
                 "triplet extractor", "CUDA context"):
        assert f"\n  {term}" in out, term
    assert "without checkpointing:" in out  # both activation figures, whichever the params choose
    assert main(["plan", "01_corver", "--params", str(old), "--strategy", "nonsense"]) == 2
    assert "unknown strategy 'nonsense'" in capsys.readouterr().err


def test_vllm_at_the_models_own_context_is_refused(tmp_path):
    """Llama-3.1's 131,072-token context needs 16 GiB of KV cache, more than a 0.4 share leaves."""
    cfg = load_params("01_corver", ROOT / "params" / "01_corver.yaml")
    cfg.grpo.vllm_max_model_length = 131072
    plan = plan_config(cfg, "01_corver", gpus=1, gpu_mem_gb=80)
    assert not plan.fits and "vllm_max_model_length 131,072" in plan.problem and "17.2 GB" in plan.problem


@pytest.mark.parametrize("params", FULL, ids=lambda p: p.stem)
def test_every_full_params_file_fits_one_and_eight_80gb_gpus(params, capsys):
    cfg = load_params(params.stem, params)
    for gpus in (1, 8):
        plan = plan_config(cfg, params.stem, gpus=gpus, gpu_mem_gb=80)
        assert plan.fits, plan.describe()
        grpo = getattr(cfg, "grpo", None)
        if grpo is not None and grpo.use_vllm:
            assert grpo.vllm_max_model_length == grpo.max_prompt_length + grpo.max_completion_length, params
    assert main(["plan", params.stem, "--params", str(params), "--gpus", "8"]) == 0
    out = capsys.readouterr().out
    assert "per rank (each of 8)" in out and "plan: fits" in out


def test_vllm_context_below_a_rollout_is_refused_at_load():
    data = read_params(ROOT / "params" / "02_binary_rar.yaml")
    data["grpo"]["vllm_max_model_length"] = 4096
    with pytest.raises(ConfigError, match="vllm_max_model_length.*cannot hold a rollout"):
        validate(data, config_for_notebook("02_binary_rar"))


def test_judge_shares_beside_the_colocated_engine_are_checked_at_load():
    """Issue 42: a vLLM judge at 0.85 beside a colocated engine at 0.4 asks for more than the GPU."""
    data = read_params(ROOT / "params" / "02_binary_rar.yaml")
    data["judge"] = {"backend": "vllm", "model": "Qwen/Qwen3-32B", "gpu_memory_utilization": 0.85}
    with pytest.raises(ConfigError, match=r"judge.gpu_memory_utilization 0.85 \+ grpo.vllm_gpu_memory_utilization "
                                          r"0.3 = 1.15"):
        validate(data, config_for_notebook("02_binary_rar"))
    data["judge"]["gpu_memory_utilization"] = 0.6
    assert validate(data, config_for_notebook("02_binary_rar")).judge.gpu_memory_utilization == 0.6
    # a judge inside a reward's args counts too (05's checklist verifier)
    data = read_params(ROOT / "params" / "05_klcf.yaml")
    data["rewards"][0]["args"]["verifier_judge"] = {"backend": "vllm", "model": "x/y", "gpu_memory_utilization": 0.7}
    with pytest.raises(ConfigError, match=r"rewards.0.args.verifier_judge.gpu_memory_utilization 0.7 \+ "
                                          r"grpo.vllm_gpu_memory_utilization 0.3 = 1.00"):
        validate(data, config_for_notebook("05_klcf"))


def test_factlab_run_warns_on_a_gpu_the_plan_does_not_fit(tmp_path, monkeypatch, caplog):
    """On a CUDA machine, `factlab run` plans the params in its one process on this GPU and warns
    before the kernel starts (here an 80 GB GPU, faked, and the old 01 batch without vLLM)."""
    import torch

    from factlab import runner

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: type("P", (), {"total_memory": 80e9}))
    cfg = load_params("01_corver", _old_01(tmp_path))
    cfg.grpo.use_vllm = False
    message = runner.warn_unless_it_fits(cfg, "01_corver")
    assert "does not fit this GPU (80 GB) in one process" in message and "logits" in message
    assert message in caplog.text
    assert runner.warn_unless_it_fits(load_params("01_corver", ROOT / "params" / "01_corver.yaml"), "01_corver") is None
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert runner.warn_unless_it_fits(cfg, "01_corver") is None  # CPU: nothing to plan

"""GRPO run glue: params -> GRPOConfig, prompt datasets, a resumable real training run."""

import pytest

from factlab import config
from factlab.data.types import QAItem
from factlab.train.grpo import grpo_args, qa_prompt_dataset, train_grpo


def _smoke_grpo(**over):
    cfg = config.load_config("params/01_corver_smoke.yaml", config.CorVerConfig).grpo
    return cfg.model_copy(update=over)


def test_grpo_args_carry_the_paper_knobs(tmp_path):
    full = config.load_config("params/01_corver.yaml", config.CorVerConfig).grpo
    assert (full.num_generations, full.max_completion_length, full.beta, full.epsilon) == (16, 1024, 0.001, 0.2)
    assert full.per_device_train_batch_size * full.gradient_accumulation_steps == 24 * 16  # Table 6
    args = grpo_args(_smoke_grpo(), tmp_path)
    assert args.num_generations == 4 and args.max_completion_length == 64
    assert args.loss_type == "grpo" and args.scale_rewards == "group"
    assert args.warmup_steps == pytest.approx(0.03) and args.lr_scheduler_type == "cosine"


def test_grpo_args_errors_name_the_key(tmp_path):
    with pytest.raises(ValueError, match="not a multiple of grpo.num_generations"):
        grpo_args(_smoke_grpo(per_device_train_batch_size=6), tmp_path)
    with pytest.raises(ValueError, match=r"grpo.extra: unknown GRPOConfig field\(s\) \['not_a_knob'\]"):
        grpo_args(_smoke_grpo(extra={"not_a_knob": 1}), tmp_path)


def test_prompt_dataset_drops_overlong_prompts(tokenizer):
    items = [QAItem("a", "What is the capital of France?", ["Paris"]),
             QAItem("b", "Why " * 400 + "?", ["x"])]
    ds, dropped = qa_prompt_dataset(items, "Answer briefly.", tokenizer, max_prompt_length=256)
    assert dropped == 1 and len(ds) == 1
    assert ds[0]["prompt"][1] == {"role": "user", "content": "What is the capital of France?"}
    assert ds[0]["golds"] == ["Paris"]
    with pytest.raises(ValueError, match="no training prompts left"):
        qa_prompt_dataset(items[1:], "s", tokenizer, max_prompt_length=16)


def test_train_grpo_saves_adapter_logs_and_resumes(tmp_path):
    from factlab import models, prompts
    from factlab.rewards.qa import FormatReward, JudgeReward

    model, tok = models.load_model("smollm2-135m-instruct")
    items = [QAItem("fr", "What is the capital of France?", ["Paris"]),
             QAItem("jp", "What is the capital of Japan?", ["Tokyo"])]
    ds, _ = qa_prompt_dataset(items, prompts.CORVER_TRAIN_SYSTEM)
    args = grpo_args(_smoke_grpo(max_steps=2, max_completion_length=16, save_steps=1), tmp_path / "run")
    lora = config.LoraSection(r=4, alpha=8, target_modules=["q_proj", "v_proj"])
    res = train_grpo("t", model, tok, ds, [JudgeReward(), FormatReward()], args, lora=lora)
    assert res.steps == 2 and (tmp_path / "run/adapter/adapter_config.json").exists()
    steps = res.steps_frame()
    assert list(steps.index) == [1, 2]
    assert {"rewards/judge/mean", "advantages/min", "stepwise/return_mean", "judge/na_rate"} <= set(steps.columns)
    again = train_grpo("t", model, tok, ds, [JudgeReward(), FormatReward()], args, lora=lora)
    assert again.resumed and again.steps == 2 and again.log_history == res.log_history
    trained, _ = models.load_model("smollm2-135m-instruct", adapter=res.adapter_dir)
    assert any("lora" in n for n, _ in trained.named_parameters())

"""The one GRPO entry point: params -> GRPOConfig, prompt filtering, a resumable real run,
merging the adapter."""

import dataclasses
import shutil

import pytest
import torch

from factlab import config, models
from factlab.rewards import RewardSpec, build_rewards
from factlab.train import merge_adapter, run
from factlab.recipes.corver import CorVerConfig, qa_rows
from factlab.sections import LoraSection
from factlab.data.types import QAItem
from factlab.train.callbacks import StepSnapshots
from factlab.train.grpo import filter_long_prompts, grpo_args


def _smoke(**grpo):
    cfg = config.load_config("params/01_corver_lm.yaml", CorVerConfig)
    return cfg.model_copy(update={"grpo": cfg.grpo.model_copy(update=grpo)})


def test_grpo_args_carry_the_paper_knobs(tmp_path):
    full = config.load_config("params/01_corver.yaml", CorVerConfig).grpo
    assert (full.num_generations, full.max_completion_length, full.beta, full.epsilon) == (16, 1024, 0.001, 0.2)
    assert full.per_device_train_batch_size * full.gradient_accumulation_steps == 24 * 16  # Table 6
    args = grpo_args(_smoke(max_completion_length=72).grpo, tmp_path, reward_weights=[1.0, 0.5])
    assert args.num_generations == 4 and args.max_completion_length == 72
    assert args.loss_type == "grpo" and args.scale_rewards == "group"
    assert args.warmup_steps == pytest.approx(0.03) and args.lr_scheduler_type == "cosine"
    # the pinned transformers reads a warmup_steps below 1 as a ratio of the training steps
    assert args.get_warmup_steps(100) == 3 and args.get_warmup_steps(1000) == 30
    assert args.reward_weights == [1.0, 0.5]
    assert args.report_to == ["tensorboard"]  # the default: live metrics into the run folder
    assert grpo_args(_smoke(report_to="none").grpo, tmp_path).report_to == []


def test_grpo_args_errors_name_the_key(tmp_path):
    with pytest.raises(ValueError, match=r"grpo.extra: unknown GRPOConfig field\(s\) \['not_a_knob'\]"):
        grpo_args(_smoke(extra={"not_a_knob": 1}).grpo, tmp_path)


def test_overlong_prompts_are_dropped_and_counted(tokenizer):
    rows = qa_rows([QAItem("a", "What is the capital of France?", ["Paris"]), QAItem("b", "Why " * 400 + "?", ["x"])],
                   system="Answer briefly.")
    kept, dropped = filter_long_prompts(rows, tokenizer, 256)
    assert dropped == 1 and [r["id"] for r in kept] == ["a"]
    assert kept[0]["prompt"][1] == {"role": "user", "content": "What is the capital of France?"}
    assert kept[0]["golds"] == ["Paris"]
    assert filter_long_prompts(rows, tokenizer, None) == (rows, 0)
    # a raw text prompt (KLCF's Prompt 5 as printed) is counted as it is, with no chat template
    raw = [{"id": "r", "prompt": "User: What is the capital of France? Assistant: <think>"},
           {"id": "s", "prompt": "Why " * 400}]
    kept, dropped = filter_long_prompts(raw, tokenizer, 256)
    assert dropped == 1 and [r["id"] for r in kept] == ["r"]


def test_run_trains_saves_resumes_and_merges(tmp_path):
    cfg = _smoke(max_steps=2, max_completion_length=16, save_steps=1, save_total_limit=2)
    cfg = cfg.model_copy(update={"lora": LoraSection(r=4, alpha=8, target_modules=["q_proj", "v_proj"]),
                                 "model": cfg.model.model_copy(update={"name": models.TINY_MODEL})})
    rows = qa_rows([QAItem("fr", "What is the capital of France?", ["Paris"]),
                    QAItem("jp", "What is the capital of Japan?", ["Tokyo"])])
    rewards = build_rewards([RewardSpec(name="qa_judge"), RewardSpec(name="format", weight=0.5)], resources=None)
    calls = _count_calls(rewards)
    snapshots = StepSnapshots([1], tmp_path / "snapshots")  # an evidence run's dose-response (issue 41)
    res = run(cfg, rows, rewards, tmp_path / "run", callbacks=[snapshots])
    calls_per_step = len(calls) / 2
    assert (snapshots.path(1) / "adapter_config.json").exists() and not snapshots.path(2).exists()
    at_step_1, _ = dataclasses.replace(res, model_dir=str(snapshots.path(1))).load_policy(device="cpu")
    assert any("lora" in n for n, _ in at_step_1.named_parameters())
    assert res.steps == 2 and res.is_adapter and (tmp_path / "run/model/adapter_config.json").exists()
    assert res.metrics["prompts"] == 2 and res.metrics["rewards"] == "R = 1 qa_judge + 0.5 format"
    steps = res.steps_frame()
    assert list(steps.index) == [1, 2]
    assert {"rewards/qa_judge/mean", "rewards/format/mean", "advantages/min", "advantages/group_spread",
            "stepwise/return_mean", "qa_judge/na_rate"} <= set(steps.columns)
    again = run(cfg, rows, rewards, tmp_path / "run")
    assert again.resumed and again.steps == 2 and again.log_history == res.log_history
    trained, _ = res.load_policy(device="cpu")  # the adapter on its base model
    assert any("lora" in n for n, _ in trained.named_parameters())
    merged = merge_adapter(res)
    plain, _ = models.load_model(merged)
    assert not any("lora" in n for n, _ in plain.named_parameters())
    # a full-model run (lora: null) is loaded from its own folder, never as an adapter
    full = type(res)(**{**res.__dict__, "model_dir": merged, "is_adapter": False})
    reloaded, _ = full.load_policy(device="cpu")
    assert not any("lora" in n for n, _ in reloaded.named_parameters())
    # a notebook's `adapter=result.model_dir` on such a folder loads that model, not the base
    marked, tok = models.load_model(cfg.model.name, device="cpu")
    with torch.no_grad():
        marked.model.norm.weight.add_(1.0)
    marked.save_pretrained(tmp_path / "full")
    tok.save_pretrained(tmp_path / "full")
    as_adapter, _ = models.load_model(cfg.model.name, device="cpu", adapter=str(tmp_path / "full"))
    assert torch.equal(as_adapter.model.norm.weight, marked.model.norm.weight)
    with pytest.raises(FileNotFoundError, match="neither a PEFT adapter"):
        models.load_model(cfg.model.name, adapter=str(tmp_path))
    assert merge_adapter(res) == merged  # built once
    with pytest.raises(ValueError, match="no training prompts left"):
        run(cfg, [], rewards, tmp_path / "empty")
    # killed after step 1's checkpoint (what `factlab run --resume` finds): step 2 only is trained
    shutil.rmtree(tmp_path / "run/checkpoint-2")
    shutil.rmtree(tmp_path / "run/model")
    (tmp_path / "run/train_result.json").unlink()
    calls.clear()
    resumed = run(cfg, rows, rewards, tmp_path / "run")
    assert resumed.resumed and resumed.steps == 2 and len(calls) == calls_per_step > 0
    step1 = [h for h in res.log_history if h.get("step") == 1 and "loss" in h]
    assert step1 and [h for h in resumed.log_history if h.get("step") == 1 and "loss" in h] == step1
    assert (tmp_path / "run/model/adapter_config.json").exists()


def _count_calls(rewards):
    """Wrap every reward function of ``rewards`` to record its calls (names kept for TRL)."""
    calls = []

    def counted(fn):
        def call(*args, **kwargs):
            calls.append(fn.__name__)
            return fn(*args, **kwargs)
        call.__name__ = fn.__name__
        return call

    rewards.funcs[:] = [counted(f) for f in rewards.funcs]
    return calls


def test_default_report_to_logs_tensorboard_events_into_the_run_folder(tiny_params, tmp_path):
    """Live metrics, transformers' own integration: a run with the smoke params' default
    ``report_to`` writes TensorBoard event files into its run folder, and they hold the logged
    scalars (what ``tensorboard --logdir <run folder>`` shows while it trains)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cfg = config.load_config(tiny_params("01_corver", "grpo: {max_steps: 1, max_completion_length: 8, save_steps: 1}\n"
                                                      "lora: {r: 4, alpha: 8, target_modules: [q_proj]}\n"),
                             CorVerConfig)
    assert cfg.grpo.report_to == "tensorboard" and cfg.model.name == models.TINY_MODEL
    rows = qa_rows([QAItem("fr", "What is the capital of France?", ["Paris"]),
                    QAItem("jp", "What is the capital of Japan?", ["Tokyo"])])
    res = run(cfg, rows, build_rewards([RewardSpec(name="format")], resources=None), tmp_path / "run")
    events = sorted((tmp_path / "run").rglob("events.out.tfevents.*"))
    assert events and all(e.relative_to(tmp_path / "run").parts[0] == "runs" for e in events), events
    acc = EventAccumulator(str(events[0].parent))
    acc.Reload()
    assert {"train/loss", "train/reward", "train/rewards/format/mean"} <= set(acc.Tags()["scalars"])
    logged = next(h for h in res.log_history if "loss" in h)
    (point,) = acc.Scalars("train/rewards/format/mean")
    assert point.step == 1 and point.value == pytest.approx(logged["rewards/format/mean"])

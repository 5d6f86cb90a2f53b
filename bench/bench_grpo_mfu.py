"""Model FLOPs utilisation of one GRPO step: the FLOPs a step executes over what this machine's
matrix multiplies could do in the step's time (the number to improve at any scale).

The step is 01_corver's smoke step on SmolLM2-135M: LoRA r = 16, 2 prompts x G = 4 completions
of 48 tokens, micro-batches of 2 with 4 accumulation steps, beta = 0, factlab's rollouts, the
string-match rewards (qa_judge + format, no model judge: the step is generation, forward and
backward). Stop tokens are switched off and every step sees the same two prompts, so every step
does exactly the same work.

* FLOPs: step 1 runs under ``torch.utils.flop_counter.FlopCounterMode``, which counts every
  matrix multiply and attention product executed (generation, the policy's forward, the
  backward, LoRA's extra products), split at the rollout.
* Time: steps 2..STEPS, wall clock, no counter; the rollout timed apart.
* Peak: the fp32 throughput of a 2048 x 2048 product on this machine, as bench_generate.py
  measures it for decoding's bound.

Prints FLOPs per step, seconds per step, and the utilisation of the whole step, of the rollout
and of the rest (forward, backward, optimizer, bookkeeping).
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

import torch
from datasets import Dataset
from torch.utils.flop_counter import FlopCounterMode
from transformers import TrainerCallback

from bench_generate import matmul_gflops  # noqa: E402 (bench/ is this script's folder)
from factlab import models
from factlab.sections import GRPOSection
from factlab.data.miniworld import ensure_world
from factlab.data.types import QAItem, read_jsonl
from factlab.prompts import CORVER_TRAIN_SYSTEM
from factlab.rewards import RewardSpec, build_rewards
from factlab.recipes.corver import qa_rows
from factlab.train.grpo import grpo_args
from factlab.train.trainer import FactlabGRPOTrainer

STEPS, PROMPTS, G, LENGTH = 4, 2, 4, 48


class MeteredTrainer(FactlabGRPOTrainer):
    """Times each rollout and, while ``counter`` is set, reads its FLOPs before and after."""

    counter: FlopCounterMode | None = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.rollout_s: list[float] = []
        self.rollout_flops = 0

    def _generate_single_turn(self, *args, **kwargs):
        before = self.counter.get_total_flops() if self.counter else 0
        t0 = time.perf_counter()
        out = super()._generate_single_turn(*args, **kwargs)
        self.rollout_s.append(time.perf_counter() - t0)
        if self.counter:
            self.rollout_flops += self.counter.get_total_flops() - before
        return out


class StepMeter(TrainerCallback):
    """Counts FLOPs over the first optimizer step and times every step."""

    def __init__(self, trainer_box: list):
        self.box, self.step_s, self.flops = trainer_box, [], 0
        self._t0, self._counter = 0.0, None

    def on_step_begin(self, args, state, control, **kw):
        if state.global_step == 0:
            self._counter = FlopCounterMode(display=False)
            self._counter.__enter__()
            self.box[0].counter = self._counter
        self._t0 = time.perf_counter()

    def on_step_end(self, args, state, control, **kw):
        self.step_s.append(time.perf_counter() - self._t0)
        if self._counter is not None:
            self._counter.__exit__(None, None, None)
            self.flops = self._counter.get_total_flops()
            self.box[0].counter, self._counter = None, None


def main(model_name: str = models.DEFAULT_MODEL) -> None:
    torch.manual_seed(0)
    qa = list(read_jsonl(ensure_world()["qa_train"]))[:PROMPTS]
    items = [QAItem.from_dict(r) for r in qa]
    rows = qa_rows(items * STEPS, system=CORVER_TRAIN_SYSTEM)  # the same prompts every step, in order
    policy, tok = models.load_model(model_name, device="cpu")
    policy.train()
    rewards = build_rewards([RewardSpec(name="qa_judge"), RewardSpec(name="format")], resources=None)
    section = GRPOSection(learning_rate=5e-5, beta=0.0, num_generations=G, max_completion_length=LENGTH,
                          per_device_train_batch_size=2, gradient_accumulation_steps=PROMPTS * G // 2,
                          max_steps=STEPS, optim="adamw_torch", bf16=False, gradient_checkpointing=False,
                          use_vllm=False, save_steps=10_000, logging_steps=1, seed=0,
                          extra={"shuffle_dataset": False})
    box: list = [None]
    meter = StepMeter(box)
    with tempfile.TemporaryDirectory() as tmp:
        trainer = MeteredTrainer(model=policy, processing_class=tok, reward_funcs=list(rewards.funcs),
                                 args=grpo_args(section, Path(tmp), run_name="mfu", reward_weights=rewards.weights),
                                 train_dataset=Dataset.from_list(rows), callbacks=[meter],
                                 peft_config=models.lora_config(r=16, alpha=32))
        trainer.eos_token_ids = []  # fixed-length completions: the same work every step
        box[0] = trainer
        trainer.train()
    lengths = [h["completions/mean_length"] for h in trainer.state.log_history if "completions/mean_length" in h]
    gflops = matmul_gflops()
    step_s = statistics.mean(meter.step_s[1:])
    rollout_s = statistics.mean(trainer.rollout_s[1:])
    train_flops = meter.flops - trainer.rollout_flops
    step_mfu = meter.flops / step_s / (gflops * 1e9)
    rollout_mfu = trainer.rollout_flops / rollout_s / (gflops * 1e9)
    rest_mfu = train_flops / (step_s - rollout_s) / (gflops * 1e9)
    params = sum(p.numel() for p in trainer.model.parameters())
    print(f"GRPO step: {model_name} + LoRA r=16 ({params / 1e6:.1f}M parameters), {PROMPTS} prompts x G={G}, "
          f"{LENGTH}-token completions (mean length {statistics.mean(lengths):.0f}), threads {torch.get_num_threads()}")
    print(f"FLOPs per step (counted, step 1): {meter.flops / 1e9:.1f} GFLOP = rollout {trainer.rollout_flops / 1e9:.1f} "
          f"+ forward/backward {train_flops / 1e9:.1f}")
    print(f"seconds per step (steps 2..{STEPS}): {step_s:.2f} = rollout {rollout_s:.2f} + rest {step_s - rollout_s:.2f}"
          f"  {['%.2f' % s for s in meter.step_s]}")
    print(f"fp32 matmul throughput (2048 x 2048): {gflops:.0f} GFLOP/s")
    print(f"utilisation: rollout {rollout_mfu:.1%}, forward/backward/optimizer {rest_mfu:.1%}")
    print(f"model FLOPs utilisation of one GRPO step: {step_mfu:.1%} ({meter.flops / step_s / 1e9:.1f} of "
          f"{gflops:.0f} GFLOP/s)")


if __name__ == "__main__":
    import sys

    main(*sys.argv[1:2])  # another model name to measure, e.g. tiny-random-smollm2

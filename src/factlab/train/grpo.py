"""GRPO runs on TRL: params -> GRPOConfig, QA prompt datasets, one resumable training run.

Shared by every GRPO-trained system (CorVer's stepwise variant, K2V's DAPO preset). The
trainer class is pluggable; ``StepwiseGRPOTrainer`` without shaping is plain GRPO.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from ..config import GRPOSection, LoraSection
from ..data.types import QAItem

log = logging.getLogger(__name__)

_DONE = "train_result.json"


def grpo_args(cfg: GRPOSection, output_dir: str | Path, run_name: str | None = None):
    """A TRL ``GRPOConfig`` from the params section. ``per_device_train_batch_size`` counts
    completions, so it must be a multiple of ``num_generations`` (checked here, by name)."""
    import dataclasses

    import torch
    from trl import GRPOConfig

    known = {f.name for f in dataclasses.fields(GRPOConfig)}
    unknown = sorted(set(cfg.extra) - known)
    if unknown:
        raise ValueError(f"grpo.extra: unknown GRPOConfig field(s) {unknown}")
    per_gen = cfg.per_device_train_batch_size * cfg.gradient_accumulation_steps
    if per_gen % cfg.num_generations:
        raise ValueError(f"grpo.per_device_train_batch_size x grpo.gradient_accumulation_steps = {per_gen} "
                         f"completions is not a multiple of grpo.num_generations = {cfg.num_generations}")
    kwargs = cfg.model_dump(exclude={"extra", "max_prompt_length", "warmup_ratio", "tf32"})
    if cfg.tf32 and torch.cuda.is_available():
        kwargs["tf32"] = True
    kwargs.update(warmup_steps=cfg.warmup_ratio, output_dir=str(output_dir), run_name=run_name,
                  report_to="none", save_strategy="steps", use_cpu=not torch.cuda.is_available())
    if cfg.gradient_checkpointing:
        kwargs["gradient_checkpointing_kwargs"] = {"use_reentrant": False}  # Table 5
    kwargs.update(cfg.extra)
    return GRPOConfig(**kwargs)


def qa_prompt_dataset(items: Sequence[QAItem], system: str, tokenizer=None,
                      max_prompt_length: int | None = None):
    """``datasets.Dataset`` of chat prompts (system + raw question, 000 §A.3) with ``golds``.

    With a tokenizer and ``max_prompt_length``, prompts longer than that many tokens are
    dropped and logged (TRL 1.16 no longer truncates prompts). Returns ``(dataset, n_dropped)``.
    """
    from datasets import Dataset

    rows, dropped = [], 0
    for it in items:
        prompt = [{"role": "system", "content": system}, {"role": "user", "content": it.question}]
        if tokenizer is not None and max_prompt_length:
            rendered = tokenizer.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
            n = len(tokenizer(rendered, add_special_tokens=False)["input_ids"])
            if n > max_prompt_length:
                dropped += 1
                continue
        rows.append({"prompt": prompt, "golds": list(it.golds), "id": it.id})
    if dropped:
        log.warning("dropped %d of %d prompts longer than %d tokens", dropped, len(items), max_prompt_length)
    if not rows:
        raise ValueError("no training prompts left (empty input, or every prompt exceeds max_prompt_length)")
    return Dataset.from_list(rows), dropped


@dataclass
class TrainResult:
    """What a finished run left behind: the adapter folder and the per-step log."""

    name: str
    output_dir: str
    adapter_dir: str
    log_history: list[dict[str, Any]] = field(default_factory=list)
    runtime_s: float = 0.0
    steps: int = 0
    resumed: bool = False

    def steps_frame(self):
        """Per-step metrics as a DataFrame (one row per logged step)."""
        import pandas as pd

        return pd.DataFrame([h for h in self.log_history if "loss" in h]).set_index("step")


def train_grpo(name: str, model, tokenizer, train_dataset, reward_funcs: Sequence[Callable],
               args, lora: LoraSection | None = None, trainer_cls=None,
               reward_weights: Sequence[float] | None = None, **trainer_kwargs: Any) -> TrainResult:
    """Train one GRPO run into ``args.output_dir`` and save its adapter to ``<output_dir>/adapter``.

    Resumable: a finished run (``train_result.json`` present) is loaded, not retrained; an
    interrupted one resumes from its last ``checkpoint-*``. ``trainer_cls`` defaults to
    ``StepwiseGRPOTrainer``; extra keywords (``token_shaping``) go to it.
    """
    from ..models import lora_config
    from .stepwise_grpo import StepwiseGRPOTrainer

    out = Path(args.output_dir)
    done = out / _DONE
    if done.exists():
        data = json.loads(done.read_text())
        log.info("%s: finished run found in %s, not retraining", name, out)
        return TrainResult(**{**data, "resumed": True})
    if reward_weights is not None:
        args.reward_weights = list(reward_weights)
    peft_config = lora_config(lora.r, lora.alpha, lora.dropout, lora.target_modules) if lora else None
    trainer_cls = trainer_cls or StepwiseGRPOTrainer
    trainer = trainer_cls(model=model, processing_class=tokenizer, reward_funcs=list(reward_funcs), args=args,
                          train_dataset=train_dataset, peft_config=peft_config, **trainer_kwargs)
    resume = any(out.glob("checkpoint-*"))
    t0 = time.perf_counter()
    trainer.train(resume_from_checkpoint=True if resume else None)
    runtime = time.perf_counter() - t0
    adapter_dir = out / "adapter"
    trainer.save_model(str(adapter_dir))
    result = TrainResult(name=name, output_dir=str(out), adapter_dir=str(adapter_dir),
                         log_history=list(trainer.state.log_history), runtime_s=runtime,
                         steps=int(trainer.state.global_step), resumed=resume)
    done.write_text(json.dumps(asdict(result), default=float, indent=1))
    return result

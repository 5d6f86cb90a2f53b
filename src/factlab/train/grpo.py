"""The one GRPO training entry point of factlab, for every paper.

    result = train.run(cfg, rows, rewards, out_dir)      # -> TrainResult
    model_dir = train.merge_adapter(result)              # a plain model folder

``cfg`` is a ``TrainingConfig`` (model, grpo, lora); ``rows`` are dataset rows, each with a
chat ``prompt`` plus the columns its rewards read (``golds``, ``prompt_id``, ``label``, ...);
``rewards`` is a built ``RewardSet`` (``factlab.rewards.build_rewards``). The trainer is
``FactlabGRPOTrainer`` with the token-level advantage extension (plain GRPO when no reward
shapes tokens) plus any other extensions. Prompts longer than ``grpo.max_prompt_length``
tokens are dropped and counted (TRL 1.16 no longer truncates prompts).

Runs are resumable: a finished run (``train_result.json``) is loaded, not retrained; an
interrupted one resumes from its last readable ``checkpoint-*`` (``resume_checkpoint``: a
checkpoint whose weights, trainer state or optimizer state is truncated or unreadable is set
aside with a warning, and the one before it is used). ``TrainResult`` is shared with SFT
(``train.sft``): the model or adapter folder, whether it is an adapter, the start model it
applies to, the log history and the runtime.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import struct
import time
import zipfile
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

import torch
from datasets import Dataset
from trl import GRPOConfig

from ..sections import GRPOSection
from ..credentials import UNREDACTED
from ..models import load_model, lora_config, release_memory, training_dtype
from ..paths import write_json
from ..rewards.registry import RewardSet
from ..eval.alarms import AlarmsSection
from .dapo import DynamicSampling
from .health import CompletionHealth
from .memory import cuda_memory, release_rollout_engine, reset_peak_memory
from .stepwise_grpo import TokenLevelAdvantages
from .trainer import FactlabGRPOTrainer, TrainerExtension
from .validity import RewardValidity

log = logging.getLogger(__name__)

__all__ = ["TrainResult", "grpo_args", "run", "merge_adapter", "filter_long_prompts", "resume_checkpoint"]

_DONE = "train_result.json"


@dataclass
class TrainResult:
    """What a finished run left behind (GRPO or SFT)."""

    name: str
    output_dir: str
    model_dir: str  # the adapter folder (is_adapter) or the full model
    is_adapter: bool
    base_model: str  # the model the adapter applies to (or the run started from)
    log_history: list[dict[str, Any]] = field(default_factory=list)
    runtime_s: float = 0.0
    steps: int = 0
    resumed: bool = False
    metrics: dict[str, Any] = field(default_factory=dict)

    def steps_frame(self):
        """Per-step metrics as a DataFrame (one row per logged training step)."""
        import pandas as pd

        return pd.DataFrame([h for h in self.log_history if "loss" in h]).set_index("step")

    def losses(self) -> list[tuple[int, float]]:
        return [(h["step"], h["loss"]) for h in self.log_history if "loss" in h]

    def load_policy(self, dtype: str = "float32", device: str = "auto"):
        """The trained policy and its tokenizer: the adapter on its base model (LoRA), or the
        saved full model (``lora: null``; ``load_model`` tells them apart); what notebooks
        evaluate after training."""
        return load_model(self.base_model, dtype=dtype, device=device, adapter=self.model_dir)

    def save(self) -> None:
        write_json(Path(self.output_dir) / _DONE, asdict(self), default=float, indent=1)

    @classmethod
    def finish(cls, trainer, tokenizer, name: str, base_model: str, is_adapter: bool, resumed: bool,
               runtime_s: float, metrics: dict[str, Any]) -> "TrainResult":
        """Save a trained ``trainer``'s model (or adapter) and tokenizer into ``<output_dir>/model``
        and the result beside it; the run is then found finished by ``load``."""
        out = Path(trainer.args.output_dir)
        model_dir = out / "model"
        trainer.save_model(str(model_dir))  # every process (DeepSpeed / FSDP gather); the main one writes
        result = cls(name=name, output_dir=str(out), model_dir=str(model_dir), is_adapter=is_adapter,
                     base_model=base_model, log_history=list(trainer.state.log_history), runtime_s=runtime_s,
                     steps=int(trainer.state.global_step), resumed=resumed, metrics=metrics)
        if trainer.is_world_process_zero():  # one writer under `accelerate launch` (factlab.launch)
            tokenizer.save_pretrained(str(model_dir))
            result.save()
        return result

    @classmethod
    def load(cls, output_dir: str | Path) -> "TrainResult | None":
        """The finished run in ``output_dir``; ``None`` when there is none, or when its
        ``train_result.json`` cannot be read (warned: the run resumes from its checkpoints)."""
        done = Path(output_dir) / _DONE
        if not done.exists():
            return None
        try:
            return cls(**{**json.loads(done.read_text()), "resumed": True})
        except (OSError, UnicodeDecodeError, ValueError, TypeError) as e:
            log.warning("%s is unreadable (%s: %s); the run is treated as unfinished", done, type(e).__name__, e)
            return None


_CHECKPOINT = re.compile(r"^checkpoint-(\d+)$")


def unreadable_checkpoint_file(folder: Path) -> str | None:
    """Why ``folder`` (a ``checkpoint-*``) cannot be resumed from, or ``None``: a safetensors
    file whose header or size is wrong (truncated), a JSON file (trainer state, adapter config)
    that does not parse, a torch ``.pt`` / ``.pth`` / ``.bin`` file that is not a whole zip
    archive (torch.save's format: a truncated one has no central directory)."""
    if not (folder / "trainer_state.json").is_file():
        return "no trainer_state.json"
    for path in sorted(p for p in folder.iterdir() if p.is_file()):
        try:
            if path.suffix == ".safetensors":
                with path.open("rb") as f:
                    (n,) = struct.unpack("<Q", f.read(8))
                    header = json.loads(f.read(n))
                end = max((v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"), default=0)
                if path.stat().st_size != 8 + n + end:
                    return f"{path.name}: {path.stat().st_size} bytes, its header describes {8 + n + end}"
            elif path.suffix == ".json":
                json.loads(path.read_text(encoding="utf-8"))
            elif path.suffix in (".pt", ".pth", ".bin"):
                with zipfile.ZipFile(path) as z:
                    z.infolist()
        except (OSError, ValueError, KeyError, TypeError, IndexError, struct.error, zipfile.BadZipFile) as e:
            return f"{path.name}: {type(e).__name__}: {e}"
    return None


def resume_checkpoint(out: str | Path) -> Path | None:
    """The newest ``checkpoint-N`` of ``out`` that can be resumed from; newer ones that cannot
    (``unreadable_checkpoint_file``) are renamed ``unreadable-checkpoint-N`` with a warning, so
    the trainer neither loads nor overwrites them. ``None``: start from scratch."""
    found = sorted((int(m.group(1)), p) for p in Path(out).glob("checkpoint-*")
                   if p.is_dir() and (m := _CHECKPOINT.match(p.name)))
    for step, folder in reversed(found):
        why = unreadable_checkpoint_file(folder)
        if why is None:
            return folder
        aside = folder.with_name(f"unreadable-{folder.name}")
        folder.rename(aside)
        log.warning("checkpoint %s cannot be resumed from (%s); set aside as %s, falling back to the one before it",
                    folder, why, aside.name)
    if found:
        log.warning("no readable checkpoint left in %s; training starts from the beginning", out)
    return None


def grpo_args(cfg: GRPOSection, output_dir: str | Path, run_name: str | None = None,
              reward_weights: Sequence[float] | None = None, ref_dtype: str | None = None) -> GRPOConfig:
    """A TRL ``GRPOConfig`` from the params section (``extra`` passes any other field).
    ``ref_dtype``: the dtype TRL builds the reference model in (``beta > 0`` without LoRA); TRL's
    default is the policy's, fp32 for a full fine-tune's master weights: twice the memory."""
    known = {f.name for f in dataclasses.fields(GRPOConfig)}
    unknown = sorted(set(cfg.extra) - known)
    if unknown:
        raise ValueError(f"grpo.extra: unknown GRPOConfig field(s) {unknown}")
    kwargs = cfg.model_dump(exclude={"extra", "max_prompt_length", "warmup_ratio", "tf32", "preset", "dynamic_sampling",
                                    "allow_hub_upload"},
                           context=UNREDACTED)
    kwargs.update(cfg.extra)  # first: what factlab sets below is never replaced (config refuses it too)
    if cfg.tf32 and torch.cuda.is_available():
        kwargs["tf32"] = True
    # report_to (cfg's): transformers' tracker callbacks; tensorboard writes <output_dir>/runs/<time>_<host>/
    kwargs.update(warmup_steps=cfg.warmup_ratio, output_dir=str(output_dir), run_name=run_name, project="factlab",
                  save_strategy="steps", use_cpu=not torch.cuda.is_available())
    if cfg.gradient_checkpointing:
        kwargs["gradient_checkpointing_kwargs"] = {"use_reentrant": False}  # 000 Table 5
    if reward_weights is not None:
        kwargs["reward_weights"] = list(reward_weights)
    kwargs["vllm_max_model_length"] = cfg.vllm_context()  # not the model's own context (issue 42)
    if ref_dtype is not None and ref_dtype != "auto" and cfg.beta > 0:
        kwargs["model_init_kwargs"] = {"dtype": ref_dtype}  # read by TRL for the reference model only
    for key in ("vllm_server_base_url", "vllm_server_host"):  # unset: TRL's own default (host 0.0.0.0)
        if kwargs.get(key) is None:
            kwargs.pop(key, None)
    return GRPOConfig(**kwargs)


def filter_long_prompts(rows: Sequence[dict], tokenizer, max_prompt_length: int | None) -> tuple[list[dict], int]:
    """Rows whose ``prompt`` fits ``max_prompt_length`` tokens, and how many were dropped: chat
    messages rendered by the chat template; a text prompt (a raw template such as KLCF's Prompt 5)
    as it is, which is what TRL tokenizes."""
    if not max_prompt_length:
        return list(rows), 0
    kept = []
    for row in rows:
        prompt = row["prompt"]
        rendered = prompt if isinstance(prompt, str) else tokenizer.apply_chat_template(
            prompt, tokenize=False, add_generation_prompt=True)
        if len(tokenizer(rendered, add_special_tokens=False)["input_ids"]) <= max_prompt_length:
            kept.append(row)
    return kept, len(rows) - len(kept)


def _alarms(cfg: Any) -> AlarmsSection:
    return getattr(cfg, "alarms", None) or AlarmsSection()


def _completion_health(cfg: Any) -> CompletionHealth:
    """The per-step statistics the reward-hacking alarms read (``train.health``)."""
    alarms = _alarms(cfg)
    return CompletionHealth(alarms.ngram, alarms.min_think_chars)


def run(cfg: Any, rows: Sequence[dict], rewards: RewardSet, out_dir: str | Path, *, name: str | None = None,
        model: str | None = None, grpo: GRPOSection | None = None, callbacks: Sequence[Any] = (),
        extensions: Sequence[TrainerExtension] = ()) -> TrainResult:
    """Train one GRPO run into ``out_dir`` (see the module docstring); resumable.

    ``model``: the start model (a name or folder); default ``cfg.model`` with its adapter.
    ``grpo``: a GRPO section to use instead of ``cfg.grpo`` (e.g. fewer steps)."""
    out = Path(out_dir)
    name = name or out.name
    done = TrainResult.load(out)
    if done is not None:
        log.info("%s: finished run found in %s, not retraining", name, out)
        return done
    grpo = grpo or cfg.grpo
    start = model or cfg.model.name
    lora = cfg.lora
    # a full fine-tune trains fp32 master weights under bf16 autocast (models.training_dtype)
    dtype = training_dtype(cfg.model.dtype, full_finetune=lora is None)
    # the GRPOConfig first: under DeepSpeed ZeRO-3 with zero3_init_flag, building it registers the DeepSpeed
    # config that makes from_pretrained partition the policy as it loads (deepspeed.zero.Init); loaded first,
    # every process would hold the whole policy before the engine shards it (issue 42)
    args = grpo_args(grpo, out, run_name=name, reward_weights=rewards.weights,
                     ref_dtype=cfg.model.dtype if dtype != cfg.model.dtype else None)
    policy, tokenizer = load_model(start, dtype=dtype, device=cfg.model.device,
                                   adapter=None if model else cfg.model.adapter)
    policy.train()
    kept, dropped = filter_long_prompts(rows, tokenizer, grpo.max_prompt_length)
    if dropped:
        log.warning("%s: dropped %d of %d prompts longer than grpo.max_prompt_length = %d tokens",
                    name, dropped, len(rows), grpo.max_prompt_length)
    if not kept:
        raise ValueError(f"{name}: no training prompts left (empty input, or every prompt exceeds "
                         f"grpo.max_prompt_length = {grpo.max_prompt_length})")
    trainer = FactlabGRPOTrainer(
        model=policy, processing_class=tokenizer, reward_funcs=list(rewards.funcs), args=args,
        train_dataset=Dataset.from_list(kept), callbacks=list(callbacks),
        peft_config=lora_config(lora.r, lora.alpha, lora.dropout, lora.target_modules) if lora else None,
        extensions=[TokenLevelAdvantages(rewards.token_shaping()), *extensions, _completion_health(cfg),
                    *([RewardValidity()] if _alarms(cfg).truth else []),
                    *([DynamicSampling(grpo.dynamic_sampling)] if grpo.dynamic_sampling.enabled else [])])
    checkpoint = resume_checkpoint(out)
    reset_peak_memory()
    t0 = time.perf_counter()
    trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    result = TrainResult.finish(trainer, tokenizer, name, start, lora is not None, checkpoint is not None,
                                time.perf_counter() - t0,
                                {"prompts": len(kept), "dropped_prompts": dropped, "rewards": rewards.describe(),
                                 "left_out_completions": trainer.left_out_completions})
    if grpo.dynamic_sampling.enabled and grpo.max_steps > 0 and result.steps < grpo.max_steps:
        log.warning("%s: %d of grpo.max_steps = %d steps ran: dynamic sampling's refills consumed the epochs "
                    "(transformers plans epochs from max_steps without them); add prompts or lower max_steps",
                    name, result.steps, grpo.max_steps)
    # the next run in this kernel starts its own engine: release this one's GPU memory first (issue 42)
    result.metrics.update(cuda_memory("cuda_train"))
    main_process = trainer.is_world_process_zero()
    release_rollout_engine(trainer)
    del trainer, policy
    release_memory()
    after = cuda_memory("cuda_after_release")
    if after:
        result.metrics.update(after)
        if main_process:
            result.save()
    return result


def merge_adapter(result: TrainResult) -> str:
    """A plain model folder for a finished run: the run's own model, or (LoRA) the start
    model with the adapter merged in, saved once beside the run as ``merged/``."""
    if not result.is_adapter:
        return result.model_dir
    merged = Path(result.output_dir) / "merged"
    if not (merged / "config.json").exists():
        model, tok = load_model(result.base_model, device="cpu", adapter=result.model_dir)
        model = model.merge_and_unload()
        model.save_pretrained(str(merged))
        tok.save_pretrained(str(merged))
    return str(merged)

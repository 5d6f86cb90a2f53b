"""Supervised fine-tuning of a verifier on structured annotations (TRL ``SFTTrainer``).

SEVA (002_56f1a732f42030d3.txt §2.4, Table 8): the verifier is first fine-tuned on teacher
annotations (Qwen2.5-3B-Instruct, 3 epochs, lr 2e-5, full parameters; LoRA-128 for 7B), and
that checkpoint starts GRPO. Examples are prompt-completion pairs (K.1 system + K.2 user
turn -> the JSON answer), so the loss covers the answer tokens only.

Like ``train.grpo.train_grpo`` the run is resumable: a finished run (``sft_result.json``) is
loaded, not retrained; an interrupted one resumes from its last checkpoint.
"""

from __future__ import annotations

import json
import logging
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from ..config import LoraSection, SFTSection
from ..rewards import seva

log = logging.getLogger(__name__)

_DONE = "sft_result.json"


def sft_dataset(pairs: Sequence[Any], annotations: Sequence[dict | None]):
    """``datasets.Dataset`` of prompt-completion examples from the accepted annotations
    (None entries are skipped); raises when nothing is left."""
    from datasets import Dataset

    if len(pairs) != len(annotations):
        raise ValueError(f"{len(pairs)} pairs for {len(annotations)} annotations")
    rows = [{"prompt": seva.verifier_messages(p.claim, p.source),
             "completion": [{"role": "assistant", "content": json.dumps(a, ensure_ascii=False)}],
             "id": p.id}
            for p, a in zip(pairs, annotations) if a is not None]
    if not rows:
        raise ValueError("no accepted annotations to fine-tune on")
    return Dataset.from_list(rows)


def sft_args(cfg: SFTSection, output_dir: str | Path):
    import dataclasses

    import torch
    from trl import SFTConfig

    known = {f.name for f in dataclasses.fields(SFTConfig)}
    unknown = sorted(set(cfg.extra) - known)
    if unknown:
        raise ValueError(f"sft.extra: unknown SFTConfig field(s) {unknown}")
    kw = cfg.model_dump(exclude={"extra", "warmup_ratio"})
    cuda = torch.cuda.is_available()
    kw.update(warmup_steps=cfg.warmup_ratio, output_dir=str(output_dir), report_to="none",
              save_strategy="steps", use_cpu=not cuda, bf16=cfg.bf16 and cuda)
    kw.update(cfg.extra)
    return SFTConfig(**kw)


@dataclass
class SFTResult:
    output_dir: str
    model_dir: str  # adapter folder with LoRA, else the full model
    log_history: list[dict[str, Any]] = field(default_factory=list)
    runtime_s: float = 0.0
    steps: int = 0
    resumed: bool = False

    def losses(self) -> list[tuple[int, float]]:
        return [(h["step"], h["loss"]) for h in self.log_history if "loss" in h]


def train_sft(model, tokenizer, dataset, cfg: SFTSection, output_dir: str | Path,
              lora: LoraSection | None = None) -> SFTResult:
    """Fine-tune ``model`` on ``dataset`` (``sft_dataset``) into ``output_dir/model``."""
    from trl import SFTTrainer

    from ..models import lora_config

    out = Path(output_dir)
    done = out / _DONE
    if done.exists():
        log.info("SFT: finished run found in %s, not retraining", out)
        return SFTResult(**{**json.loads(done.read_text()), "resumed": True})
    peft = lora_config(lora.r, lora.alpha, lora.dropout, lora.target_modules) if lora else None
    trainer = SFTTrainer(model=model, processing_class=tokenizer, args=sft_args(cfg, out), train_dataset=dataset,
                         peft_config=peft)
    resume = any(out.glob("checkpoint-*"))
    t0 = time.perf_counter()
    trainer.train(resume_from_checkpoint=True if resume else None)
    model_dir = out / "model"
    trainer.save_model(str(model_dir))
    tokenizer.save_pretrained(str(model_dir))
    res = SFTResult(str(out), str(model_dir), list(trainer.state.log_history), time.perf_counter() - t0,
                    int(trainer.state.global_step), resume)
    done.write_text(json.dumps(asdict(res), default=float, indent=1))
    return res


def merged_model_dir(result: SFTResult, base_model: str) -> str:
    """A plain model folder to start GRPO from: the SFT model itself, or (LoRA SFT) the base
    model with the adapter merged in, saved once next to it as ``merged/``."""
    model_dir = Path(result.model_dir)
    if not (model_dir / "adapter_config.json").exists():
        return str(model_dir)
    merged = Path(result.output_dir) / "merged"
    if not (merged / "config.json").exists():
        from ..models import load_model

        model, tok = load_model(base_model, device="cpu", adapter=str(model_dir))
        model = model.merge_and_unload()
        model.save_pretrained(str(merged))
        tok.save_pretrained(str(merged))
    return str(merged)

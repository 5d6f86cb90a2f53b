"""Supervised fine-tuning of a verifier on structured annotations (TRL ``SFTTrainer``).

SEVA (002_56f1a732f42030d3.txt §2.4, Table 8): the verifier is first fine-tuned on teacher
annotations (Qwen2.5-3B-Instruct, 3 epochs, lr 2e-5, full parameters; LoRA-128 for 7B), and
that checkpoint starts GRPO. Examples are prompt-completion pairs (K.1 system + K.2 user
turn -> the JSON answer), so the loss covers the answer tokens only.

``run_sft(cfg, dataset, out_dir)`` mirrors ``train.run`` for GRPO and returns the same
``TrainResult`` (``train.merge_adapter`` turns a LoRA run into a plain model folder). The
run is resumable: a finished run is loaded, not retrained; an interrupted one resumes from
its last checkpoint.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from pathlib import Path
from typing import Any, Sequence

import torch
from datasets import Dataset
from trl import SFTConfig, SFTTrainer

from ..credentials import UNREDACTED
from ..models import load_model, lora_config, release_memory, training_dtype
from ..rewards import seva_output
from ..sections import SFTSection
from .grpo import TrainResult, resume_checkpoint
from .trl_seam import log_metric

log = logging.getLogger(__name__)

__all__ = ["sft_dataset", "sft_args", "run_sft", "freeze_below_top_layers", "CompactHeadSFTTrainer"]


def sft_dataset(pairs: Sequence[Any], annotations: Sequence[dict | None]) -> Dataset:
    """``datasets.Dataset`` of prompt-completion examples from the accepted annotations
    (None entries are skipped); raises when nothing is left."""
    if len(pairs) != len(annotations):
        raise ValueError(f"{len(pairs)} pairs for {len(annotations)} annotations")
    rows = [{"prompt": seva_output.verifier_messages(p.claim, p.source),
             "completion": [{"role": "assistant", "content": json.dumps(a, ensure_ascii=False)}],
             "id": p.id}
            for p, a in zip(pairs, annotations) if a is not None]
    if not rows:
        raise ValueError("no accepted annotations to fine-tune on")
    return Dataset.from_list(rows)


def sft_args(cfg: SFTSection, output_dir: str | Path) -> SFTConfig:
    known = {f.name for f in dataclasses.fields(SFTConfig)}
    unknown = sorted(set(cfg.extra) - known)
    if unknown:
        raise ValueError(f"sft.extra: unknown SFTConfig field(s) {unknown}")
    kw = cfg.model_dump(exclude={"extra", "warmup_ratio", "allow_hub_upload"}, context=UNREDACTED)
    kw.update(cfg.extra)  # first: what factlab sets below is never replaced (config refuses it too)
    cuda = torch.cuda.is_available()
    kw.update(warmup_steps=cfg.warmup_ratio, output_dir=str(output_dir), project="factlab",  # report_to: cfg's
              save_strategy="steps", use_cpu=not cuda, bf16=cfg.bf16 and cuda)
    return SFTConfig(**kw)


class CompactHeadSFTTrainer(SFTTrainer):
    """TRL's ``SFTTrainer`` whose loss, off GPU, projects only the trained (completion) tokens
    through the LM head, in one matmul.

    TRL always patches in its fused LM head (``trl.kernels.chunked_logprob``). Without Triton it
    scores every position, prompt and padding included, in tiles folded by torch ops: 37% of an SFT
    step of the organism on a 600-token SEVA verdict (cProfile, 2026-11-27), which a plain loop did
    in 0.6 s against TRL's 1.06 s. This path computes TRL's own ``nll`` loss (the negative
    log-likelihood summed over the trained tokens, over ``num_items_in_batch`` or their count) and
    logs the same entropy and token accuracy (not TRL's running token count). Any other setting (a
    GPU, several processes, PEFT, another
    loss type, label smoothing, a loss function, packing, a model that scales or caps its logits)
    takes TRL's path unchanged."""

    def _compact(self, model, inputs) -> bool:
        from peft import PeftModel

        if (inputs["input_ids"].device.type != "cpu" or self.accelerator.num_processes != 1
                or isinstance(model, PeftModel)):
            return False  # several processes wrap the model (DistributedDataParallel has no `config`)
        cfg = model.config.get_text_config()
        return (cfg.model_type == "llama" and getattr(cfg, "final_logit_softcapping", None) is None
                and self.args.loss_type == "nll" and self.label_smoother is None and self.compute_loss_func is None
                and not self.aux_loss_enabled and "attention_mask" in inputs
                and not {"position_ids", "shift_labels"} & set(inputs))

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        if return_outputs or not self._compact(model, inputs):
            return super().compute_loss(model, inputs, return_outputs=return_outputs,
                                        num_items_in_batch=num_items_in_batch)
        targets = inputs["labels"][:, 1:]
        mask = targets != -100
        hidden = model.get_decoder()(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"],
                                     use_cache=False).last_hidden_state[:, :-1][mask]
        logits = model.get_output_embeddings()(hidden).float()
        log_probs = torch.log_softmax(logits, dim=-1)
        targets = targets[mask]
        count = mask.sum() if num_items_in_batch is None else num_items_in_batch
        loss = -log_probs.gather(-1, targets[:, None]).sum() / torch.as_tensor(count).clamp(min=1)
        with torch.no_grad():
            mode = "train" if model.training else "eval"
            valid = max(int(mask.sum()), 1)
            entropy = -(log_probs.exp() * log_probs).sum(-1)
            log_metric(self, mode, "entropy", float(entropy.sum()) / valid)
            log_metric(self, mode, "mean_token_accuracy", float((logits.argmax(-1) == targets).sum()) / valid)
        return loss


def freeze_below_top_layers(model, top: int) -> int:
    """Leave only the last ``top`` decoder layers and the final norm trainable (the embeddings,
    tied to the output head, and every lower layer frozen), so backpropagation stops ``top``
    layers down: a cheaper full fine-tune on CPU. Returns the number of trainable parameters."""
    layers = model.get_decoder().layers
    if top < 1:
        raise ValueError(f"train_top_layers = {top}: at least one decoder layer must train")
    if top > len(layers):  # a smaller model than the default's 30 layers (the tests' tiny one): all of them
        log.info("train_top_layers = %d: the model has %d decoder layers; training all of them", top, len(layers))
        top = len(layers)
    model.requires_grad_(False)
    for layer in layers[len(layers) - top:]:
        layer.requires_grad_(True)
    norm = getattr(model.get_decoder(), "norm", None)
    if norm is not None:
        norm.requires_grad_(True)
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def run_sft(cfg: Any, dataset: Dataset, out_dir: str | Path, *, model: str | None = None,
            sft: SFTSection | None = None, name: str = "sft", train_top_layers: int | None = None) -> TrainResult:
    """Fine-tune ``model`` (default ``cfg.model.name``) on ``dataset`` (``sft_dataset``) with
    ``cfg.sft`` and ``cfg.lora`` into ``out_dir/model``; resumable. ``train_top_layers`` (full
    fine-tuning only): train the last N decoder layers, freeze the rest (``freeze_below_top_layers``)."""
    out = Path(out_dir)
    done = TrainResult.load(out)
    if done is not None:
        log.info("%s: finished run found in %s, not retraining", name, out)
        return done
    start = model or cfg.model.name
    lora = cfg.lora
    # a full fine-tune trains fp32 master weights under bf16 autocast (models.training_dtype)
    policy, tokenizer = load_model(start, dtype=training_dtype(cfg.model.dtype, full_finetune=lora is None),
                                   device=cfg.model.device)
    if train_top_layers is not None:
        if lora:
            raise ValueError("train_top_layers freezes layers of a full fine-tune; with LoRA set lora.target_modules")
        freeze_below_top_layers(policy, train_top_layers)
    trainer = CompactHeadSFTTrainer(model=policy, processing_class=tokenizer, args=sft_args(sft or cfg.sft, out),
                         train_dataset=dataset,
                         peft_config=lora_config(lora.r, lora.alpha, lora.dropout, lora.target_modules) if lora else None)
    checkpoint = resume_checkpoint(out)
    t0 = time.perf_counter()
    trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    result = TrainResult.finish(trainer, tokenizer, name, start, lora is not None, checkpoint is not None,
                                time.perf_counter() - t0,
                                {"examples": len(dataset)})
    del trainer, policy
    release_memory()
    return result

"""factlab.train.sft: a real SFT run of the embedded model on structured annotations."""

import json

import pytest

from factlab.data.pairs import ClaimPair
from factlab.models import TINY_MODEL
from factlab.sections import LoraSection, ModelConfig
from factlab.sections import SFTSection
from factlab.train.sft import run_sft, sft_args, sft_dataset


ANN = {"evidence_alignment": [{"claim_span": "Paris", "source_span": "capital is Paris", "status": "match"}],
       "reasoning_chain": [{"claim_part": "capital", "source_evidence": "capital is Paris",
                            "judgment": "supported", "explanation": "Stated in the source."}],
       "label": "Attributable", "confidence": 0.9, "error_type": None, "fix_suggestion": None}


def test_dataset_skips_rejected_and_checks_lengths():
    pairs = [ClaimPair("a", "The capital is Paris.", "France's capital is Paris.", "attributable"),
             ClaimPair("b", "x", "y", "attributable")]
    ds = sft_dataset(pairs, [ANN, None])
    assert len(ds) == 1 and ds[0]["prompt"][0]["role"] == "system"
    assert json.loads(ds[0]["completion"][0]["content"])["label"] == "Attributable"
    with pytest.raises(ValueError, match="no accepted"):
        sft_dataset(pairs, [None, None])
    with pytest.raises(ValueError, match="2 pairs for 1"):
        sft_dataset(pairs, [ANN])
    with pytest.raises(ValueError, match="not a field of TRL's SFTConfig"):
        sft_args(SFTSection(extra={"not_a_field": 1}), "/tmp/x")


def test_sft_args_pass_report_to_to_transformers(tmp_path):
    """``sft.report_to`` reaches transformers' integration; the default logs TensorBoard events
    under the run's own folder (``<output_dir>/runs/``), where ``tensorboard --logdir`` finds them."""
    assert sft_args(SFTSection(), tmp_path).report_to == ["tensorboard"]
    assert sft_args(SFTSection(report_to="none"), tmp_path).report_to == []


@pytest.mark.slow  # the 03_seva notebook test runs real SFT and GRPO in CI
def test_real_sft_lowers_loss_and_resumes(tmp_path):
    from factlab.recipes.seva import SevaConfig

    pairs = [ClaimPair(str(i), "The capital of France is Paris.", "France's capital is Paris.", "attributable")
             for i in range(4)]
    cfg = SFTSection(learning_rate=5e-4, max_steps=4, per_device_train_batch_size=4, max_length=512, bf16=False,
                     gradient_checkpointing=False, save_steps=2)
    exp = SevaConfig(sft=cfg, lora=LoraSection(r=8, alpha=16))
    res = run_sft(exp, sft_dataset(pairs, [ANN] * 4), tmp_path / "sft")
    losses = [l for _, l in res.losses()]
    assert res.steps == 4 and len(losses) == 4 and losses[-1] < losses[0]
    assert (tmp_path / "sft" / "model" / "adapter_config.json").exists()
    again = run_sft(exp, None, tmp_path / "sft")
    assert again.resumed and again.steps == 4


def test_short_sft_lowers_loss_and_resumes_from_its_checkpoint(tmp_path):
    """The CI tier's SFT check (the slow test above runs the SEVA-sized one on SmolLM2): 4 steps on one
    repeated Prompt-6-style row with LoRA; the loss falls, and a run killed after step 2's
    checkpoint trains steps 3-4 only."""
    import shutil

    from datasets import Dataset

    from factlab.recipes.seva import SevaConfig

    rows = [{"prompt": "Claim: The capital of France is Paris.\nFactual correctness:", "completion": " True"}] * 8
    cfg = SFTSection(learning_rate=3e-3, max_steps=4, per_device_train_batch_size=2, max_length=32, bf16=False,
                     gradient_checkpointing=False, save_steps=2, save_total_limit=2, warmup_ratio=0.0)
    exp = SevaConfig(sft=cfg, lora=LoraSection(r=4, alpha=8, target_modules=["q_proj", "v_proj"]),
                     model=ModelConfig(name=TINY_MODEL))  # the training and resume path, on the tiny model
    res = run_sft(exp, Dataset.from_list(rows), tmp_path / "sft")
    losses = [l for _, l in res.losses()]
    assert res.steps == 4 and len(losses) == 4 and losses[-1] < losses[0]
    shutil.rmtree(tmp_path / "sft" / "checkpoint-4")
    shutil.rmtree(tmp_path / "sft" / "model")
    (tmp_path / "sft" / "train_result.json").unlink()
    again = run_sft(exp, Dataset.from_list(rows), tmp_path / "sft")
    assert again.resumed and again.steps == 4 and (tmp_path / "sft" / "model" / "adapter_config.json").exists()
    assert [l for s, l in again.losses() if s <= 2] == [l for s, l in res.losses() if s <= 2]  # steps 1-2 kept


def test_the_compact_head_loss_and_gradients_are_trls(tmp_path):
    """CompactHeadSFTTrainer's CPU loss (only the completion tokens through the LM head) against
    TRL's own fused-head loss on the same batch: equal loss, equal gradients, same metric keys."""
    import torch
    from datasets import Dataset
    from trl import SFTTrainer

    from factlab.models import load_model
    from factlab.train.sft import CompactHeadSFTTrainer

    model, tok = load_model(TINY_MODEL, device="cpu")
    rows = [{"prompt": [{"role": "user", "content": f"Question {i}: what is the capital of France?" + " pad" * i}],
             "completion": [{"role": "assistant", "content": "Paris" + " indeed" * (i % 3)}]} for i in range(4)]
    args = sft_args(SFTSection(max_steps=1, per_device_train_batch_size=4, max_length=128, bf16=False,
                               gradient_checkpointing=False, report_to="none"), tmp_path)
    trainer = CompactHeadSFTTrainer(model=model, processing_class=tok, args=args, train_dataset=Dataset.from_list(rows))
    batch = trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))
    trainer.model.train()
    assert trainer._compact(trainer.model, batch)
    n = int((batch["labels"][:, 1:] != -100).sum())
    losses, grads = [], []
    for compute in (lambda: trainer.compute_loss(trainer.model, dict(batch), num_items_in_batch=n),
                    lambda: SFTTrainer.compute_loss(trainer, trainer.model, dict(batch), num_items_in_batch=n)):
        trainer.model.zero_grad()
        loss = compute()
        loss.backward()
        losses.append(float(loss.detach()))
        grads.append(torch.cat([p.grad.flatten() for p in trainer.model.parameters() if p.grad is not None]))
    assert losses[0] == pytest.approx(losses[1], rel=1e-5) and losses[0] > 0
    assert torch.allclose(grads[0], grads[1], rtol=1e-4, atol=1e-6)
    assert len(trainer._metrics["train"]["entropy"]) == 2 and len(trainer._metrics["train"]["mean_token_accuracy"]) == 2
    assert trainer._metrics["train"]["entropy"][0] == pytest.approx(trainer._metrics["train"]["entropy"][1], rel=1e-4)

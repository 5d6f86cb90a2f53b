"""factlab.train.sft: a real SFT run of the embedded model on structured annotations."""

import json

import pytest

from factlab.config import LoraSection
from factlab.data.pairs import ClaimPair
from factlab.config import SFTSection
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


@pytest.mark.slow  # the 03_seva notebook test runs real SFT and GRPO in CI
def test_real_sft_lowers_loss_and_resumes(tmp_path):
    from factlab.train.seva import SevaConfig

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

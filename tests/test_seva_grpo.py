"""factlab.train.seva: real GRPO steps of the embedded model as a verifier, process vs binary
reward from the same start, with the advantage-collapse diagnostics logged."""

import pytest

from factlab.config import GRPOSection, LoraSection
from factlab.data.pairs import ClaimPair
from factlab.train import seva as T


PAIRS = [ClaimPair("a", "The capital of France is Paris.", "France's capital is Paris.", "attributable"),
         ClaimPair("b", "The capital of France is Lyon.", "France's capital is Paris.", "not_attributable")]


def test_dataset_and_reward_names():
    ds = T.verifier_prompt_dataset(PAIRS)
    assert ds[1]["label"] == "not_attributable" and ds[0]["prompt"][1]["role"] == "user"
    assert T.make_reward("binary").__name__ == "seva_binary"
    assert T.make_reward("process", "50/50").weights.label > T.make_reward("process").weights.label
    with pytest.raises(ValueError, match="unknown SEVA reward"):
        T.make_reward("dense")
    with pytest.raises(ValueError, match="no claim/source pairs"):
        T.verifier_prompt_dataset([])


@pytest.mark.slow  # the 03_seva notebook test runs real SFT and GRPO in CI
def test_process_and_binary_runs_from_the_same_start(tmp_path):
    from factlab import models

    grpo = GRPOSection(learning_rate=1e-4, beta=0.001, num_generations=4, max_completion_length=24,
                       per_device_train_batch_size=8, gradient_accumulation_steps=1, max_steps=1, temperature=1.2,
                       top_p=0.95, optim="adamw_torch", bf16=False, gradient_checkpointing=False, use_vllm=False,
                       save_steps=1, warmup_ratio=0.0)
    frames = {}
    for reward in ("process", "binary"):
        model, tok = models.load_model(device="cpu")
        res = T.train_verifier_grpo(reward, model, tok, PAIRS, grpo, tmp_path, lora=LoraSection(r=8, alpha=16))
        frames[reward] = res.steps_frame()
        assert res.steps == 1
    for reward, f in frames.items():
        for key in ("reward", "frac_reward_zero_std", "advantages/group_spread", "advantages/collapsed_group_frac"):
            assert key in f.columns, (reward, key)
        assert 0.0 <= f["advantages/collapsed_group_frac"].iloc[0] <= 1.0
    # a 135M model without SFT rarely writes parseable JSON: the binary reward is then 0 for
    # every rollout and each group collapses, the failure mode of §2.3
    assert frames["binary"]["reward"].iloc[0] >= 0.0
    assert frames["process"]["reward"].iloc[0] >= -0.08

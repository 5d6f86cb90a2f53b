"""factlab.recipes.seva: the verifier's GRPO rows, the process / control runs from params, and real
GRPO steps of the embedded model as a verifier with the advantage-collapse diagnostics logged."""

import pytest

from factlab.sections import GRPOSection, LoraSection
from factlab.data.pairs import ClaimPair
from factlab.rewards import RewardSpec, build_rewards
from pathlib import Path
from factlab.recipes import seva as T

PARAMS = Path(__file__).resolve().parents[2] / "params"


PAIRS = [ClaimPair("a", "The capital of France is Paris.", "France's capital is Paris.", "attributable"),
         ClaimPair("b", "The capital of France is Lyon.", "France's capital is Paris.", "not_attributable")]


def test_rows_runs_and_reward_names():
    rows = T.verifier_rows(PAIRS)
    assert rows[1]["label"] == "not_attributable" and rows[0]["prompt"][1]["role"] == "user"
    cfg = T.SevaConfig()
    assert list(cfg.grpo_runs()) == ["seva_process", "seva_binary"] and cfg.process_weights() == "70/30"
    assert list(cfg.model_copy(update={"control_rewards": []}).grpo_runs()) == ["seva_process"]
    binary = build_rewards([RewardSpec(name="seva_binary")], None)
    assert binary.funcs[0].__name__ == "seva_binary"
    half = build_rewards([RewardSpec(name="seva_process", args={"weights": "50/50"})], None).funcs[0]
    ours = build_rewards([RewardSpec(name="seva_process")], None).funcs[0]
    assert half.weights.label > ours.weights.label


@pytest.mark.slow  # the 03_seva notebook test runs real SFT and GRPO in CI
def test_process_and_binary_runs_from_the_same_start(tmp_path):
    grpo = GRPOSection(learning_rate=1e-4, beta=0.001, num_generations=4, max_completion_length=24,
                       per_device_train_batch_size=8, gradient_accumulation_steps=1, max_steps=1, temperature=1.2,
                       top_p=0.95, optim="adamw_torch", bf16=False, gradient_checkpointing=False, use_vllm=False,
                       save_steps=1, warmup_ratio=0.0)
    cfg = T.SevaConfig(grpo=grpo, lora=LoraSection(r=8, alpha=16))
    runs = T.train_grpo_runs(cfg, PAIRS, None, tmp_path, cfg.model.name)
    frames = {name: res.steps_frame() for name, res in runs.items()}
    assert all(res.steps == 1 for res in runs.values())
    for reward, f in frames.items():
        for key in ("reward", "frac_reward_zero_std", "advantages/group_spread", "advantages/collapsed_group_frac"):
            assert key in f.columns, (reward, key)
        # our advantage diagnostics agree with TRL's own count of zero-variance groups (no shaping here)
        assert f["advantages/collapsed_group_frac"].iloc[0] == pytest.approx(f["frac_reward_zero_std"].iloc[0])
    # the binary reward pays 0 or 1 per rollout: the batch mean of 8 rollouts is a multiple of 1/8
    assert float(frames["seva_binary"]["reward"].iloc[0] * 8).is_integer()
    # the process reward pays partial credit (format, structure) that the binary one cannot:
    # a 135M model without SFT rarely writes a correct verdict, so its groups keep a spread
    # where the binary groups collapse, the failure mode of §2.3
    assert (frames["seva_process"]["advantages/group_spread"].iloc[0]
            >= frames["seva_binary"]["advantages/group_spread"].iloc[0])


def test_cut_off_note_names_the_limit_and_where_the_long_verdicts_are():
    from factlab import config

    cfg = config.load_config(PARAMS / "03_seva_evidence.yaml", T.SevaConfig)
    rows = {"SFT · miniworld/heldout": {"cut_off_rate": 0.75}, "base · miniworld/heldout": {"cut_off_rate": 0.0}}
    note = T.cut_off_note(cfg, rows)
    assert "`eval_generation.max_new_tokens` = 80" in note and "SFT · miniworld/heldout 75%" in note
    assert "base" not in note and "`evidence.max_new_tokens` = 320" in note
    assert T.cut_off_note(cfg, {"SFT": {"cut_off_rate": 0.0}}) is None
    assert "evidence" not in T.cut_off_note(T.SevaConfig(), rows)

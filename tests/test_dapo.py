"""DAPO on TRL (003 §4.1, Table 7): the preset's GRPOConfig, and dynamic sampling inside a real
training step: groups whose rewards agree are dropped and refilled, and a batch that cannot be
filled stops with a clear error."""

import pytest

from factlab import config, models
from factlab.config import DynamicSamplingSection
from factlab.data.types import QAItem
from factlab.rewards import RewardSpec
from factlab.rewards.registry import RewardSet
from factlab.train import run
from factlab.train.corver import CorVerConfig, qa_rows
from factlab.train.dapo import DynamicSamplingError
from factlab.train.grpo import grpo_args


def _cfg(**grpo):
    """01's smoke params on the tiny model: these tests check the sampling loop, not what it learns."""
    cfg = config.load_config("params/01_corver_smoke.yaml", CorVerConfig, {"model": {"name": models.TINY_MODEL}})
    g = cfg.grpo.model_copy(update=dict(num_generations=2, per_device_train_batch_size=2, gradient_accumulation_steps=2,
                                        max_completion_length=6, max_steps=1, save_steps=1, **grpo))
    return cfg.model_copy(update={"grpo": g, "lora": config.LoraSection(r=2, alpha=4, target_modules=["q_proj"])})


class FlatThenVaried:
    """Rewards that agree within each group for the first ``flat_calls`` calls (every group is
    dropped), then differ by completion length."""

    __name__ = "flat_then_varied"

    def __init__(self, flat_calls):
        self.flat_calls, self.calls = flat_calls, 0

    def __call__(self, prompts=None, completions=(), completion_ids=None, **_):
        self.calls += 1
        if self.calls <= self.flat_calls:
            return [1.0 + 1e-9 * i for i in range(len(completions))]  # float noise counts as agreement
        return [float(len(ids)) + 0.1 * i for i, ids in enumerate(completion_ids)]


ROWS = qa_rows([QAItem(f"q{i}", f"What is the capital of country number {i}?", ["x"]) for i in range(6)])


def _rewards(fn):
    return RewardSet(specs=[RewardSpec(name="format")], funcs=[fn], weights=[1.0])


def test_dapo_preset_reaches_trl():
    g = config.GRPOSection.model_validate({"preset": "dapo", "per_device_train_batch_size": 8,
                                           "gradient_accumulation_steps": 1, "num_generations": 8})
    args = grpo_args(g, "/tmp/unused")
    assert (args.loss_type, args.epsilon, args.epsilon_high, args.beta) == ("dapo", 0.2, 0.28, 0.0)
    assert g.dynamic_sampling.enabled
    explicit = config.GRPOSection.model_validate({"preset": "dapo", "beta": 0.01, "per_device_train_batch_size": 8,
                                                  "gradient_accumulation_steps": 1, "num_generations": 8})
    assert explicit.beta == 0.01  # keys the params set win


def test_dynamic_sampling_drops_agreeing_groups_and_refills(tmp_path):
    cfg = _cfg(dynamic_sampling=DynamicSamplingSection(enabled=True, max_rounds=2), preset="dapo")
    reward = FlatThenVaried(flat_calls=1)
    res = run(cfg, ROWS, _rewards(reward), tmp_path / "run")
    frame = res.steps_frame()
    assert res.steps == 1
    assert frame["dynamic/rounds"].iloc[0] == 1.0  # one extra round refilled the batch
    assert frame["dynamic/dropped_groups"].iloc[0] == 2.0 and frame["dynamic/kept_groups"].iloc[0] == 0.0
    assert reward.calls == 2


def test_dynamic_sampling_gives_up_with_a_clear_error(tmp_path):
    cfg = _cfg(dynamic_sampling=DynamicSamplingSection(enabled=True, max_rounds=1), preset="dapo")
    with pytest.raises(DynamicSamplingError, match=r"0 of 2 groups have reward variance after 1 extra generation"):
        run(cfg, ROWS, _rewards(FlatThenVaried(flat_calls=99)), tmp_path / "run")


def test_dynamic_sampling_can_fill_with_flat_groups_when_asked(tmp_path):
    cfg = _cfg(dynamic_sampling=DynamicSamplingSection(enabled=True, max_rounds=1, on_exhausted="fill"), preset="dapo")
    res = run(cfg, ROWS, _rewards(FlatThenVaried(flat_calls=99)), tmp_path / "run")
    frame = res.steps_frame()
    assert res.steps == 1 and frame["dynamic/filled_groups"].iloc[0] == 2.0 and frame["dynamic/rounds"].iloc[0] == 1.0

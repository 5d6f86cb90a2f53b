"""The TRL seam factlab's trainer extends (``factlab.train.trainer``), pinned: if a TRL or
transformers release moves it, this fails before any training run does."""

import dataclasses
import inspect
import re
import tomllib
from pathlib import Path

import trl
import transformers
from packaging.specifiers import SpecifierSet
from packaging.version import Version
from trl import GRPOConfig, GRPOTrainer

ROOT = Path(__file__).resolve().parents[1]


def _pins() -> dict[str, SpecifierSet]:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    out = {}
    for d in deps:
        name = re.split(r"[<>=!~ ]", d, maxsplit=1)[0]
        out[name] = SpecifierSet(d[len(name):])
    return out


def test_installed_trl_and_transformers_are_the_pinned_ones():
    pins = _pins()
    for name, mod in (("trl", trl), ("transformers", transformers)):
        assert pins[name].contains(Version(mod.__version__)), (name, mod.__version__, str(pins[name]))
        assert "<" in str(pins[name]), f"{name} needs an upper bound: the trainer overrides private methods"


def test_the_private_methods_factlab_overrides_exist_with_their_signatures():
    rewards = inspect.signature(GRPOTrainer._calculate_rewards)
    assert list(rewards.parameters) == ["self", "inputs", "prompts", "completions", "completion_ids_list"]
    score = inspect.signature(GRPOTrainer._generate_and_score_completions)
    assert list(score.parameters) == ["self", "inputs"]
    src = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    for key in ('"advantages"', '"completion_mask"', '"completion_ids"', "self._calculate_rewards("):
        assert key in src, key
    assert "multi_objective_aggregation" in inspect.getsource(GRPOTrainer.__init__)
    gen = inspect.signature(GRPOTrainer._generate_single_turn)
    assert list(gen.parameters) == ["self", "prompt_ids", "images", "multimodal_fields", "num_generations",
                                    "has_tool_images"]
    sampler = inspect.signature(GRPOTrainer._get_train_sampler)
    assert list(sampler.parameters) == ["self", "dataset"]
    # DAPO's refills (train.dapo.RefillRepeatSampler) rebuild TRL's RepeatSampler from these attributes
    from trl.trainer.utils import RepeatSampler
    assert list(inspect.signature(RepeatSampler.__init__).parameters) == [
        "self", "data_source", "mini_repeat_count", "batch_size", "repeat_count", "shuffle", "seed"]
    assert "RepeatSampler(" in inspect.getsource(GRPOTrainer._get_train_sampler)
    init = inspect.getsource(GRPOTrainer.__init__)
    for attr in ("self.eos_token_ids", "self.top_k", "self.min_p", "self.repetition_penalty", "self.temperature",
                 "self.top_p", "self.max_completion_length", "self.use_transformers_continuous_batching"):
        assert attr in init, attr


def test_grpo_config_fields_factlab_sets():
    fields = {f.name for f in dataclasses.fields(GRPOConfig)}
    assert {"loss_type", "epsilon", "epsilon_high", "beta", "scale_rewards", "reward_weights", "num_generations",
            "max_completion_length", "mask_truncated_completions", "importance_sampling_level", "use_vllm",
            "vllm_mode", "vllm_gpu_memory_utilization", "warmup_steps", "steps_per_generation"} <= fields

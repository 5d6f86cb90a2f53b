"""The experiment configs every notebook's params build on.

``ExperimentConfig`` holds what every notebook shares: the model, the mini-world, the
short-form evaluation sets and how to generate for them. ``TrainingConfig`` adds what every
training notebook shares: the ``rewards:`` list (any registered rewards of any paper, see
``factlab.rewards``), TRL's GRPO knobs, LoRA, and the shared resources those rewards draw
on (judge, datastore, index, extractor, claim verifier; each built only if a reward or a
stage asks for it). Each paper's config extends one of them beside its code
(``train.corver.CorVerConfig``, ``train.rar.RARConfig``, ``train.seva.SevaConfig``); the
notebook -> config map lives in ``factlab.runner``.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from .config import (GenerationConfig, GRPOSection, JudgeSection, LoraSection, ModelConfig, ParamError, Section,
                     SweepSection)
from .corpus.infinigram import IndexSection
from .corpus.retrieval import DatastoreSection
from .data import EvalDataConfig
from .data.miniworld import WorldConfig
from .eval.alarms import AlarmsSection
from .rewards.rar import ClaimVerifierSection
from .rewards.registry import RewardSpec, check_reward_list
from .rewards.triplets import ExtractorSection

__all__ = ["ExperimentConfig", "TrainingConfig", "QuickstartConfig", "EvidenceArm", "EvidenceSection", "BASE_ARM"]

LENGTH_REWARDS = ("overlong", "length_penalty")  # rewards whose args.max_len is a completion length in tokens


class ExperimentConfig(Section):
    """Sections every notebook has: model, mini-world, short-form eval sets, eval generation."""

    model: ModelConfig = ModelConfig()
    world: WorldConfig = WorldConfig()
    eval: list[EvalDataConfig] = [EvalDataConfig()]
    eval_generation: GenerationConfig = GenerationConfig()
    sweep: SweepSection | None = None  # read by `factlab sweep` only (factlab.sweep); a run ignores it


BASE_ARM = "base"  # the untrained start of an evidence run (factlab.evidence)


class EvidenceArm(Section):
    """One arm: a name and its reward list (any registered rewards); ``grpo`` overrides the
    run's GRPO section for this arm only (e.g. a longer run for a slower family is not the
    same budget: use it only when the hypothesis says so)."""

    name: str
    rewards: list[RewardSpec]
    grpo: dict[str, Any] = {}

    @field_validator("rewards")
    @classmethod
    def _reward_list(cls, specs: list[RewardSpec]) -> list[RewardSpec]:
        check_reward_list(specs)
        return specs


class EvidenceSection(Section):
    """``evidence:`` of a notebook's ``*_evidence.yaml``: the hypothesis it tests (a name of
    ``factlab.evidence.HYPOTHESES``), the arms trained, the seeds (3 or more: an interval over
    one seed says nothing about seeds) and how many held-out questions each arm answers."""

    hypothesis: str
    arms: list[EvidenceArm]
    seeds: list[int] = [0, 1, 2]
    heldout: int = Field(48, ge=4)

    @field_validator("seeds")
    @classmethod
    def _three_seeds(cls, seeds: list[int]) -> list[int]:
        if len(seeds) < 3 or len(set(seeds)) < len(seeds):
            raise ValueError(f"an evidence run needs 3 or more distinct seeds, got {seeds}")
        return seeds

    @field_validator("arms")
    @classmethod
    def _named_arms(cls, arms: list[EvidenceArm]) -> list[EvidenceArm]:
        names = [a.name for a in arms]
        if not arms or len(set(names)) < len(names) or BASE_ARM in names:
            raise ValueError(f"arm names must be unique, non-empty and not '{BASE_ARM}': {names}")
        return arms


class TrainingConfig(ExperimentConfig):
    """Sections every training notebook has: rewards, GRPO, LoRA and the shared resources.

    ``rewards`` is the run's reward list (``factlab.rewards``); a run may mix rewards of
    different papers. ``lora: null`` trains every parameter."""

    rewards: list[RewardSpec] = [RewardSpec(name="qa_judge"), RewardSpec(name="format")]
    grpo: GRPOSection = GRPOSection()
    lora: LoraSection | None = LoraSection()
    judge: JudgeSection = JudgeSection()
    datastore: DatastoreSection = DatastoreSection()
    index: IndexSection = IndexSection()
    extractor: ExtractorSection = ExtractorSection()
    verifier: ClaimVerifierSection = ClaimVerifierSection()
    alarms: AlarmsSection = AlarmsSection()  # reward-hacking alarm thresholds (factlab.eval.alarms)
    # a pre-registered hypothesis's arms and seeds (params/<notebook>_evidence.yaml; factlab.evidence); None: no
    # evidence cell runs
    evidence: EvidenceSection | None = None

    @field_validator("rewards")
    @classmethod
    def _reward_list(cls, specs: list[RewardSpec]) -> list[RewardSpec]:
        if not specs:
            raise ParamError("", "a training run needs at least one reward")
        check_reward_list(specs)
        return specs

    @model_validator(mode="after")
    def _length_rewards_within_completion(self) -> "TrainingConfig":
        """A length reward's ``max_len`` (DAPO's overlong L_max, KLCF's length penalty L_m, Eq. 11)
        may not pass ``grpo.max_completion_length``: completions stop before it, so the penalty
        would never reach its full value (DAPO and KLCF set them equal)."""
        for i, spec in enumerate(self.rewards):
            max_len = (spec.args or {}).get("max_len")
            if spec.name in LENGTH_REWARDS and isinstance(max_len, int) and max_len > self.grpo.max_completion_length:
                raise ParamError(f"rewards.{i}.args.max_len",
                                 f"{max_len} is above grpo.max_completion_length = {self.grpo.max_completion_length}: "
                                 f"completions stop before the {spec.name} penalty ends, so it would never reach its "
                                 f"full value (set them equal)")
        return self


class QuickstartConfig(ExperimentConfig):
    """``notebooks/00_quickstart.ipynb``: evaluate a model on short-form QA (000 §4)."""

    trained_prompt: bool = False  # add the anti-loop line (000 §A.3) for adapter checkpoints

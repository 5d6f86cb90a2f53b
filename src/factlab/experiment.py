"""The experiment configs every notebook's params build on.

``ExperimentConfig`` holds what every notebook shares: the model, the mini-world, the
short-form evaluation sets and how to generate for them. ``TrainingConfig`` adds what every
training notebook shares: the ``rewards:`` list (any registered rewards of any paper, see
``factlab.rewards``), TRL's GRPO knobs, LoRA, and the shared resources those rewards draw
on (judge, datastore, index, extractor, claim verifier; each built only if a reward or a
stage asks for it). Each paper's config extends one of them beside its code
(``recipes.corver.CorVerConfig``, ``recipes.rar.RARConfig``, ``recipes.seva.SevaConfig``); the
notebook -> config map lives in ``factlab.runner``.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, field_validator, model_validator

from .config import (MAX_TOKENS, GenerationConfig, GRPOSection, JudgeSection, LoraSection, ModelConfig, ParamError,
                     Section, SFTSection, SweepSection)
from .corpus.infinigram import IndexSection
from .corpus.retrieval import DatastoreSection
from .data import EvalDataConfig, TrainDataConfig
from .data.miniworld import WorldConfig
from .eval.alarms import AlarmsSection
from .organism import is_organism
from .rewards.rar import ClaimVerifierSection
from .rewards.registry import RewardSpec, check_reward_list
from .rewards.triplets import ExtractorSection

__all__ = ["ExperimentConfig", "TrainingConfig", "QuickstartConfig", "EvidenceArm", "EvidenceSection", "BASE_ARM",
           "WarmStartSection", "WarmStartSFTSection"]

LENGTH_REWARDS = ("overlong", "length_penalty")  # rewards whose args.max_len is a completion length in tokens
POLICY_ORGANISM = "organism"  # ``index: {corpus: organism}``: the policy organism's own pretraining corpus


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
    # the questions the arms train on, where the notebook's own training rows are not the hypothesis's
    # (02: short-form questions under 001 §4.1's abstain prompt); mini-world train split only
    train_data: TrainDataConfig | None = None
    max_new_tokens: int = Field(48, ge=1, le=MAX_TOKENS)  # greedy answers to the held-out rows
    # the evidence budget: GRPO settings for every arm (steps, learning rate), over the run's own grpo:
    # section, which the notebook's other stages keep (checked against GRPOSection when params load)
    grpo: dict[str, Any] = {}
    # forked processes that train the (arm, seed) runs side by side, one torch thread each
    # (factlab.forked; bench/bench_evidence_workers.py on 2 cores: two 4-step jobs in 0.77x the time of one after the other)
    workers: int = Field(1, ge=1, le=64)

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


class WarmStartSFTSection(SFTSection):
    """The warm start's SFT (TRL ``SFTConfig`` knobs, ``recipes.warmstart``): one epoch on CPU,
    micro-batches of 8 demonstrations of similar length (prompt-completion, loss on the completion
    only), no activation checkpointing. Its own defaults, so ``warm_start: {sft: {learning_rate:
    ...}}`` keeps the rest of them (not SEVA's SFT defaults)."""

    learning_rate: float = Field(3.0e-4, gt=0.0)
    num_train_epochs: float = Field(1.0, gt=0.0)
    per_device_train_batch_size: int = Field(8, ge=1)
    gradient_accumulation_steps: int = Field(1, ge=1)
    max_length: int = Field(320, ge=16)
    warmup_ratio: float = Field(0.0, ge=0.0, lt=1.0)
    weight_decay: float = Field(0.0, ge=0.0)
    bf16: bool = False
    gradient_checkpointing: bool = False
    save_steps: int = Field(5, ge=1)
    save_total_limit: int | None = 1
    seed: int = 0
    extra: dict[str, Any] = {"train_sampling_strategy": "group_by_length"}


class WarmStartSection(Section):
    """A short SFT before RL (``factlab.recipes.warmstart``): demonstrations of every training
    notebook's answer format, written from the mini-world's facts (train split only), teach a
    small policy the format the rewards read, so that RL starts where rewards vary within a
    group. Off by default (the papers start from instruction-tuned models that need none); the
    smoke params turn it on. Every setting here is part of the warm start's cache key.

    Counts are demonstrations per format (0 leaves a format out): ``corver_qa`` 01 / 06's
    training prompt (000 §A.3), ``corver_eval`` 000 §A.3's evaluation prompt, ``rar_shortform``
    001 §4.1's abstain / forced prompts, ``rar_longform`` 02's "Tell me about <country>."
    (001 §3.3), ``k2v`` 04's fill-in-blank questions (003 §3.1, §3.3), ``klcf`` 05's Prompt 5
    (004 §2.3.3). ``abstain_fraction``: the share of Binary RAR's abstain-prompt and long-form
    demonstrations that answer "I don't know" (it pays an abstention, 001 §3.2), each about one of
    the least populous ``abstain_fraction`` of the train countries. ``train_top_layers``: a full
    fine-tune of the last N decoder layers only (backpropagation stops there: about half the
    compute of all 30 layers on CPU); ignored with ``lora:``."""

    enabled: bool = False
    corver_qa: int = Field(20, ge=0)
    corver_eval: int = Field(6, ge=0)
    rar_shortform: int = Field(12, ge=0)
    rar_longform: int = Field(8, ge=0)
    k2v: int = Field(12, ge=0)
    klcf: int = Field(8, ge=0)
    abstain_fraction: float = Field(0.25, ge=0.0, lt=1.0)
    longform_facts: int = Field(3, ge=1)  # fact sentences per long-form answer
    seed: int = 0
    sft: WarmStartSFTSection = WarmStartSFTSection()
    lora: LoraSection | None = None  # null: full fine-tuning (a LoRA run is merged into a plain folder)
    train_top_layers: int | None = Field(8, ge=1)  # full fine-tuning of the last N decoder layers only (null: all)
    check_questions: int = Field(4, ge=0)  # held-out prompts per format for the raw / warm check (0: none)
    check_max_new_tokens: int = Field(40, ge=1)

    @model_validator(mode="after")
    def _something_to_learn(self) -> "WarmStartSection":
        if self.lora is not None and self.train_top_layers is not None:
            if "train_top_layers" in self.model_fields_set:
                raise ParamError("train_top_layers", "freezes layers of a full fine-tune; with `lora:` set, choose "
                                                     "the layers through lora.target_modules instead")
            self.__dict__["train_top_layers"] = None  # the default applies to a full fine-tune only
        if self.enabled and not any(getattr(self, k) for k in ("corver_qa", "corver_eval", "rar_shortform",
                                                                "rar_longform", "k2v", "klcf")):
            raise ParamError("enabled", "every demonstration count is 0: nothing to warm-start on")
        return self


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
    warm_start: WarmStartSection = WarmStartSection()  # SFT on format demonstrations before RL (recipes.warmstart)

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

    @model_validator(mode="after")
    def _index_on_the_policy_organism(self) -> "TrainingConfig":
        """``index: {corpus: organism}`` counts co-occurrence in the policy organism's own
        pretraining corpus (000 §3.2 counts in the corpus the policy was pretrained on; issue 40
        item 3: CorVer's count tiers then follow exposure). It is resolved here to the policy's
        organism name (``organism-tiny`` for a tiny policy), so a warm start that renames the
        policy keeps it; ``rewards.Resources.index`` turns an organism name into its corpus file
        (``organism.corpus_path``). Any other organism name names that organism's corpus."""
        if self.index.corpus != POLICY_ORGANISM:
            return self
        if not is_organism(self.model.name):
            raise ParamError("index.corpus", f"'{POLICY_ORGANISM}' means the policy organism's pretraining corpus, "
                                             f"but model.name {self.model.name!r} is not an organism (name one, "
                                             f"e.g. organism-tiny, or give a corpus JSONL)")
        self.index.__dict__["corpus"] = self.model.name
        return self

    @model_validator(mode="after")
    def _evidence_grpo_valid(self) -> "TrainingConfig":
        """Every evidence arm's GRPO settings (``grpo:`` + ``evidence.grpo`` + the arm's) form a
        valid ``GRPOSection``: a bad key or value is refused when params load, not at the arm."""
        if self.evidence is None:
            return self
        for where, overrides in [("evidence.grpo", self.evidence.grpo)] + [
                (f"evidence.arms.{i}.grpo", arm.grpo) for i, arm in enumerate(self.evidence.arms)]:
            unknown = sorted(set(overrides) - set(GRPOSection.model_fields))
            if unknown:
                raise ParamError(where, f"unknown GRPO keys {unknown}")
            merged = {**self.grpo.model_dump(), **self.evidence.grpo, **(overrides if where != "evidence.grpo" else {})}
            try:
                GRPOSection.model_validate(merged)
            except ValueError as e:
                raise ParamError(where, f"not a valid grpo section with these overrides: {e}") from None
        return self

    def evidence_grpo(self, arm: EvidenceArm, seed: int) -> GRPOSection:
        """The GRPO section an evidence arm trains with: ``grpo:``, ``evidence.grpo``, the arm's own, the seed."""
        assert self.evidence is not None
        return GRPOSection.model_validate({**self.grpo.model_dump(), **self.evidence.grpo, **arm.grpo, "seed": seed})


class QuickstartConfig(ExperimentConfig):
    """``notebooks/00_quickstart.ipynb``: evaluate a model on short-form QA (000 §4)."""

    trained_prompt: bool = False  # add the anti-loop line (000 §A.3) for adapter checkpoints

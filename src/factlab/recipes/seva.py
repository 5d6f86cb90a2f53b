"""SEVA end to end (002_56f1a732f42030d3.txt): params, pair sets, verifier GRPO from the SFT
checkpoint with the process reward and the binary control, and self-evolution.

§2.3-2.4, Table 9: the verifier is trained with GRPO on the K.1 system + K.2 user prompts
of each claim/source pair, the gold label in a ``label`` column that the ``seva_process`` /
``seva_binary`` rewards read. The params' ``rewards:`` list is the method's reward (default
``seva_process`` with the paper's 70/30 weights, Table 21); ``control_rewards`` is the §2.3
binary control, trained from the same SFT start. Every run logs the advantage-collapse
diagnostics of Table 5 / Figures 4-5 (``train.trainer``). §2.5: ``self_evolve``.

Index (paper section -> function; ``../shared/papers/002_56f1a732f42030d3.txt``):

=======================================  ============================================================
§2.3-2.4, Table 9, Table 21 (params)     ``SevaConfig``, ``SelfEvolutionSection``
§4 data (pair sets)                      ``load_pair_set``, ``load_pair_sets``, ``load_inputs``
App. B.1 / §2.4 teacher annotations      ``prepare`` (``synth.seva.annotate_training_pairs``, cached
                                         in ``run_dir/teacher.json``)
§2.4 SFT cold start, merged              ``sft_stage`` (``run_dir/sft``)
§2.3 GRPO: process reward vs binary      ``verifier_rows``, ``train_verifier``, ``train_grpo_runs``,
                                         ``grpo_stage`` (``run_dir/grpo/<rewards>``)
§2.5 / App. F self-evolution             ``self_evolve``, ``evolve_stage`` (``run_dir/evolve-<round>``)
§3 headline (process vs binary)          ``headline``
stages (notebook 03, factlab train)      ``prepare`` -> ``train`` (= ``sft_stage`` -> ``grpo_stage``
                                         -> ``evolve_stage``; the notebook evaluates between them)
=======================================  ============================================================
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence

from pydantic import Field, model_validator

from ..config import ParamError, Section
from ..data.pairs import MINIWORLD, ClaimPair, PairDataConfig, load_pairs, stratified_sample
from ..data.types import read_jsonl
from ..eval.alarms import nonzero_advantage_share
from ..eval.headline import before_after
from ..eval.suites import evaluate_model
from ..experiment import TrainingConfig
from ..stage_cache import StageCache
from ..rewards import Resources, RewardSpec, build_rewards, seva_output
from ..sections import SFTSection
from ..synth import seva as synth
from ..synth.perturbations import miniworld_pairs, probe_filter
from ..synth.seva import TeacherSection
from ..train.grpo import TrainResult, run
from ..train.sft import run_sft, sft_dataset
from .stages import Recipe, main_process_first, merged, start

log = logging.getLogger(__name__)

__all__ = ["SevaConfig", "SelfEvolutionSection", "DIAGNOSTIC_KEYS", "load_pair_set", "load_pair_sets",
           "verifier_rows", "train_verifier", "train_grpo_runs", "EvolutionRound", "self_evolve", "SevaInputs",
           "load_inputs", "start", "prepare", "sft_stage", "grpo_stage", "evolve_stage", "cut_off_note", "headline",
           "train", "RECIPE"]

TEACHER_FILE = "teacher.json"

DIAGNOSTIC_KEYS = ("reward", "reward_std", "frac_reward_zero_std", "advantages/group_spread",
                   "advantages/collapsed_group_frac", "advantages/min", "advantages/max", "entropy",
                   "completions/mean_length")


class SelfEvolutionSection(Section):
    """Verify -> Reflect -> Probe -> Refine (002 §2.5, App. F)."""

    rounds: int = Field(1, ge=0)
    probe_budget: int = Field(60, ge=1)  # perturbed pairs generated per round (each with its twin)
    refine_steps: int = Field(50, ge=1)  # GRPO steps on the probe set per round


class SevaConfig(TrainingConfig):
    """``notebooks/03_seva.ipynb``: SEVA end to end (002_56f1a732f42030d3.txt)."""

    rewards: list[RewardSpec] = [RewardSpec(name="seva_process")]
    control_rewards: list[RewardSpec] = [RewardSpec(name="seva_binary")]  # [] = no control run
    train_data: PairDataConfig = PairDataConfig()
    eval: list[PairDataConfig] = [PairDataConfig(split="heldout")]
    teacher: TeacherSection = TeacherSection()
    sft: SFTSection = SFTSection()
    self_evolution: SelfEvolutionSection = SelfEvolutionSection()

    @model_validator(mode="after")
    def _no_warm_start(self) -> "SevaConfig":
        # SEVA trains a verifier, whose cold start is its own SFT on teacher annotations (002 §2.4,
        # the `sft:` stage); the policy warm start (recipes.warmstart) teaches answer formats it never writes
        if self.warm_start.enabled:
            raise ParamError("warm_start.enabled", "03_seva starts GRPO from its own SFT stage (002 §2.4, `sft:`); "
                                                   "the policy warm start does not apply to a verifier")
        return self

    def process_weights(self) -> str:
        """The Table 21 split of the ``seva_process`` reward ("70/30" when it is not listed)."""
        spec = next((s for s in [*self.rewards, *self.control_rewards] if s.name == "seva_process"), None)
        return spec.args["weights"] if spec else "70/30"

    def grpo_runs(self) -> dict[str, list[RewardSpec]]:
        """The GRPO runs from the SFT start, by name: the method's rewards, then the control."""
        runs = {"+".join(s.name for s in self.rewards): list(self.rewards)}
        if self.control_rewards:
            runs["+".join(s.name for s in self.control_rewards)] = list(self.control_rewards)
        return runs


def load_pair_set(cfg: PairDataConfig, world=None) -> list[ClaimPair]:
    """Pairs for a ``PairDataConfig``: the mini-world (``split`` train / heldout by country,
    the same countries as the QA heldout split; sampled to ``limit`` with balanced labels) or
    a registered dataset via ``data.pairs.load_pairs``. ``world``: ``ensure_world``'s paths."""
    if cfg.name != MINIWORLD:
        return load_pairs(cfg.name, path=cfg.path, hf_id=cfg.hf_id, split=cfg.split, limit=cfg.limit, seed=cfg.seed)
    split = cfg.split or "train"
    held = {r["meta"]["doc_id"] for r in read_jsonl(world["qa_heldout"])}
    pairs = [p for p in miniworld_pairs(world, seed=cfg.seed) if (p.meta.get("doc_id") in held) == (split == "heldout")]
    return stratified_sample(pairs, cfg.limit, seed=cfg.seed) if cfg.limit and cfg.limit < len(pairs) else pairs


def load_pair_sets(cfgs: Sequence[PairDataConfig], world=None) -> dict[str, list[ClaimPair]]:
    """``{label: pairs}`` for the evaluation sets (``miniworld/heldout``, ``fever``, ...)."""
    return {f"{d.name}/{d.split}" if d.split else d.name: load_pair_set(d, world) for d in cfgs}


def verifier_rows(pairs: Sequence[Any]) -> list[dict]:
    """GRPO rows: the K.1-K.2 chat prompt, ``label``, ``claim`` (``seva_process``'s ``verdict: kb``
    reads it) and ``id`` per pair."""
    return [{"prompt": seva_output.verifier_messages(p.claim, p.source), "label": p.label, "claim": p.claim, "id": p.id}
            for p in pairs]


def train_verifier(cfg: SevaConfig, specs: Sequence[RewardSpec], pairs: Sequence[Any], resources: Resources,
                   out_dir: str | Path, start_model: str, *, max_steps: int | None = None) -> TrainResult:
    """One GRPO run of the verifier from ``start_model`` with the rewards ``specs`` into
    ``out_dir/<reward names>``; resumable."""
    rewards = build_rewards(specs, resources)
    name = "+".join(rewards.names)
    grpo = cfg.grpo if max_steps is None else cfg.grpo.model_copy(update={"max_steps": max_steps})
    return run(cfg, verifier_rows(pairs), rewards, Path(out_dir) / name, name=f"seva-{name}", model=start_model,
               grpo=grpo)


def train_grpo_runs(cfg: SevaConfig, pairs: Sequence[Any], resources: Resources, out_dir: str | Path,
                    start_model: str) -> dict[str, TrainResult]:
    """§2.3: every run of ``cfg.grpo_runs()`` (the process reward and the binary control) from
    the same ``start_model`` (the merged SFT verifier)."""
    return {name: train_verifier(cfg, specs, pairs, resources, out_dir, start_model)
            for name, specs in cfg.grpo_runs().items()}


@dataclass
class EvolutionRound:
    """One Verify -> Reflect -> Probe -> Refine round of §2.5 / Appendix F."""

    round: int
    profile: dict[str, dict[str, Any]]  # Reflect: per error category, detection accuracy / error rate
    allocation: dict[str, int]          # Probe: new pairs per Table 19 strategy
    probes: int                         # probe pairs kept (perturbed + attributable twins, unseen claims)
    before: dict[str, float]            # Verify: metrics on the round's verify set
    after: dict[str, float]             # the same verify set after Refine
    refine_steps: int
    model_dir: str                      # the refined verifier, start of the next round
    probe_filter: dict[str, int] = field(default_factory=dict)  # App. F filter: generated, kept, dropped by reason
    result: TrainResult | None = field(default=None, repr=False, compare=False)  # Refine's GRPO run

    def to_dict(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if k != "result"}


def self_evolve(start_model_dir: str, world, cfg: SevaConfig, resources: Resources, run_dir: str | Path,
                seen_claims: set[str] | None = None, progress: bool = True) -> list[EvolutionRound]:
    """The self-evolution loop of §2.5 for ``cfg.self_evolution.rounds`` rounds, starting from
    the verifier in ``start_model_dir``.

    Verify: the current verifier on fresh mini-world pairs, the same number per Table 19
    strategy (``probe_budget`` rounded down to a multiple of six, at least one each), with their
    attributable twins. Reflect: ``synth.seva.weakness_profile`` of its own errors. Probe: the
    budget split by error rate (``strategy_budget``), new pairs generated, claims already seen
    (training, evaluation, earlier rounds) skipped, App. F's filter applied (``probe_filter``). Refine: ``refine_steps`` GRPO steps with the
    method's rewards on the probes into ``run_dir/evolve-<round>`` (resumable), then Verify again
    on the same set. Returns one :class:`EvolutionRound` per round.
    """
    evo = cfg.self_evolution
    seen = set(seen_claims or ())
    current = str(start_model_dir)

    def verify(model_dir: str, pairs, desc: str):
        res = evaluate_model("verification", model_dir, {desc: pairs}, cfg.eval_generation, model_cfg=cfg.model,
                             progress=progress)
        return res.records[desc], res.metrics[desc]

    rounds: list[EvolutionRound] = []
    for rnd in range(1, evo.rounds + 1):
        per_strategy = max(1, evo.probe_budget // 6)
        verify_set = synth.probe(world, synth.strategy_budget({}, 6 * per_strategy), seen, seed=100 + rnd)
        if not verify_set:
            raise RuntimeError(f"self-evolution round {rnd}: the mini-world has no unseen pairs left to verify on")
        seen |= {p.claim for p in verify_set}
        records, before = verify(current, verify_set, f"round {rnd} verify")
        profile = synth.weakness_profile(records, verify_set)
        allocation = synth.strategy_budget(profile, evo.probe_budget)
        probes, filtered = probe_filter(synth.probe(world, allocation, seen, seed=200 + rnd))
        if not probes:
            raise RuntimeError(f"self-evolution round {rnd}: every probe claim was already seen; "
                               f"lower self_evolution.probe_budget or the number of rounds")
        seen |= {p.claim for p in probes}
        log.info("self-evolution round %d: profile %s, allocation %s, %d probe pairs", rnd, profile, allocation,
                 len(probes))
        res = train_verifier(cfg, cfg.rewards, probes, resources, Path(run_dir) / f"evolve-{rnd}", current,
                             max_steps=evo.refine_steps)
        current = merged(res)  # the main process of a launch writes it, the others read it
        _, after = verify(current, verify_set, f"round {rnd} re-verify")
        rounds.append(EvolutionRound(rnd, profile, allocation, len(probes), before, after, res.steps, current,
                                     filtered, result=res))
    return rounds


# ---------------------------------------------------------------- the stages (notebook 03 and factlab train)



@dataclass
class SevaInputs:
    """What SEVA's training reads: the mini-world, the training pairs, the held-out pair sets and
    the teacher's annotations of the training pairs (one per pair, None where none)."""

    world: Any
    train_pairs: list[ClaimPair]
    eval_sets: dict[str, list[ClaimPair]]
    annotations: list[dict | None]
    teacher_report: dict[str, Any]

    @property
    def size(self) -> int:
        return len(self.train_pairs)

    def seen_claims(self) -> set[str]:
        """Every claim trained or evaluated on: self-evolution never probes with them."""
        return {p.claim for p in self.train_pairs} | {p.claim for ps in self.eval_sets.values() for p in ps}


def load_inputs(cfg: SevaConfig, resources: Resources) -> tuple[Any, list[ClaimPair], dict[str, list[ClaimPair]]]:
    """(mini-world, training pairs, held-out pair sets by label)."""
    world = resources.world()
    return world, load_pair_set(cfg.train_data, world), load_pair_sets(cfg.eval, world)


def prepare(cfg: SevaConfig, resources: Resources, run_dir: str | Path) -> SevaInputs:
    """The pairs and §2.4's teacher annotations, written once to ``run_dir/teacher.json`` (the
    main process of a launch first; the others and a resumed notebook read the file, so every
    process fine-tunes on the same examples)."""
    world, train_pairs, eval_sets = load_inputs(cfg, resources)
    done = StageCache(Path(run_dir) / TEACHER_FILE, check=_teacher_record_ok, where="the teacher's annotations")
    with main_process_first():
        saved = done.record()
        if saved is None:
            annotations, report = synth.annotate_training_pairs(cfg.teacher, train_pairs)
            saved = done.save_record({"annotations": annotations, "report": report})
        annotations, report = saved["annotations"], saved["report"]
    return SevaInputs(world, train_pairs, eval_sets, annotations, report)



def sft_stage(cfg: SevaConfig, inputs: SevaInputs, run_dir: str | Path) -> tuple[TrainResult, str]:
    """§2.4: SFT on the accepted annotations into ``run_dir/sft`` (every process of a launch,
    resumable), then the adapter merged once: (result, merged model folder)."""
    result = run_sft(cfg, sft_dataset(inputs.train_pairs, inputs.annotations), Path(run_dir) / "sft")
    return result, merged(result)


def grpo_stage(cfg: SevaConfig, inputs: SevaInputs, resources: Resources, run_dir: str | Path,
               start_model: str) -> dict[str, TrainResult]:
    """§2.3: the process-reward run and the binary control from ``start_model`` (the merged SFT
    verifier) into ``run_dir/grpo/<rewards>``."""
    return train_grpo_runs(cfg, inputs.train_pairs, resources, Path(run_dir) / "grpo", start_model)


def evolve_stage(cfg: SevaConfig, inputs: SevaInputs, resources: Resources, run_dir: str | Path,
                 grpo_runs: dict[str, TrainResult], sft_dir: str, progress: bool = True) -> list[EvolutionRound]:
    """§2.5: ``self_evolve`` from the method's GRPO verifier (the SFT one when no run trained),
    never probing a claim already trained or evaluated on. In a launch every process verifies
    (the same greedy generations) and trains each round's Refine together."""
    main_run = next(iter(grpo_runs.values()), None)
    begin = merged(main_run) if main_run is not None else sft_dir
    return self_evolve(begin, inputs.world, cfg, resources, run_dir, seen_claims=inputs.seen_claims(),
                       progress=progress)


def headline(grpo_runs: dict[str, TrainResult], metrics: dict[str, dict[str, dict[str, float]]], eval_set: str
             ) -> dict[str, str]:
    """§2.3's claim on the notebook's one run of each reward: the share of groups with a nonzero
    advantage, the binary control -> the process reward (the first of ``grpo_runs``), and the
    held-out verifier accuracy and format errors on ``eval_set``, SFT -> GRPO with the process
    reward. ``metrics``: the verification suite's, keyed ``SFT`` and ``GRPO-<run>``. An evidence
    cell's interval leads it."""
    process, *control = list(grpo_runs)
    sft_m, grpo_m = metrics["SFT"][eval_set], metrics[f"GRPO-{process}"][eval_set]
    run = f"this notebook's one run of {grpo_runs[process].steps} steps"
    out = {}
    if control:
        share = {name: nonzero_advantage_share(res.steps_frame()) for name, res in grpo_runs.items()}
        out[f"groups with a nonzero advantage ({control[0]} → {process}, {run})"] = before_after(share[control[0]],
                                                                                                share[process])
    out[f"held-out verifier accuracy (SFT → GRPO {process}, {run})"] = before_after(sft_m["accuracy"],
                                                                                   grpo_m["accuracy"])
    out[f"held-out verdict format errors (SFT → GRPO {process}, {run})"] = before_after(
        sft_m.get("format_error_rate"), grpo_m.get("format_error_rate"))
    return out


def cut_off_note(cfg: SevaConfig, metrics: dict[str, dict[str, float]]) -> str | None:
    """The line under the notebook's verifier evaluation when the token limit stopped verdicts
    (``cut_off_rate`` of ``metrics``, the evaluation table's rows): their format errors are the
    limit's, so the reader is told the limit and, under evidence params, where the long verdicts are."""
    cut = {who: m["cut_off_rate"] for who, m in metrics.items() if m.get("cut_off_rate")}
    if not cut:
        return None
    where = (f"; the evidence section's held-out verdicts run at `evidence.max_new_tokens` = "
             f"{cfg.evidence.max_new_tokens}" if cfg.evidence is not None else "")
    return (f"Verdicts stopped by `eval_generation.max_new_tokens` = {cfg.eval_generation.max_new_tokens} "
            f"before a stop token: {', '.join(f'{who} {share:.0%}' for who, share in cut.items())}. "
            f"Their format errors are the limit's as much as the verifier's{where}.")


def train(cfg: SevaConfig, inputs: SevaInputs, resources: Resources, run_dir: str | Path
          ) -> dict[str, TrainResult]:
    """Every trained stage in the notebook's order: ``sft_stage``, ``grpo_stage``, then each
    round of ``evolve_stage``; the results by name (``sft``, ``grpo-<rewards>``, ``evolve-<n>``)."""
    sft_result, sft_dir = sft_stage(cfg, inputs, run_dir)
    runs = grpo_stage(cfg, inputs, resources, run_dir, sft_dir)
    rounds = evolve_stage(cfg, inputs, resources, run_dir, runs, sft_dir, progress=False)
    return {"sft": sft_result, **{f"grpo-{name}": r for name, r in runs.items()},
            **{f"evolve-{r.round}": r.result for r in rounds if r.result is not None}}


def _teacher_record_ok(row: dict[str, Any]) -> bool:
    return isinstance(row.get("annotations"), list) and isinstance(row.get("report"), dict)


RECIPE = Recipe(notebook="03_seva", config=SevaConfig, prepare=prepare, train=train,
                headline=headline,
                what="teacher-annotated pairs; SFT -> merge -> GRPO (process reward, binary control) -> self-evolution rounds")

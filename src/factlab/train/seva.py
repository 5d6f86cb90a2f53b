"""SEVA verifier RL (002_56f1a732f42030d3.txt §2.3-2.4, Table 9): GRPO from the SFT checkpoint
with the process reward, and the binary-reward control from the same start.

Prompts are the K.1 system + K.2 user turns for each claim/source pair, with the gold label
in a ``label`` column that ``rewards.seva.SevaProcessReward`` / ``SevaBinaryReward`` read.
Training goes through ``train.grpo.train_grpo`` with ``StepwiseGRPOTrainer`` and no token
shaping (plain GRPO), which logs the advantage-collapse diagnostics of Table 5 / Figures 4-5:
``advantages/group_spread``, ``advantages/collapsed_group_frac``, and TRL's ``reward``,
``frac_reward_zero_std`` and ``entropy``.
"""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Sequence

from ..config import GRPOSection, LoraSection
from ..rewards import seva

log = logging.getLogger(__name__)

REWARDS = {"process": seva.SevaProcessReward, "binary": seva.SevaBinaryReward}
DIAGNOSTIC_KEYS = ("reward", "reward_std", "frac_reward_zero_std", "advantages/group_spread",
                   "advantages/collapsed_group_frac", "advantages/min", "advantages/max", "entropy",
                   "completions/mean_length")


def verifier_prompt_dataset(pairs: Sequence[Any]):
    """``datasets.Dataset`` with the K.1-K.2 chat prompt, ``label`` and ``id`` per pair."""
    from datasets import Dataset

    rows = [{"prompt": seva.verifier_messages(p.claim, p.source), "label": p.label, "id": p.id} for p in pairs]
    if not rows:
        raise ValueError("no claim/source pairs to train on")
    return Dataset.from_list(rows)


def make_reward(name: str, weights: seva.SevaRewardWeights | str = seva.DEFAULT_WEIGHTS):
    """``"process"`` (Algorithm 1, with ``weights``: a ``SevaRewardWeights`` or a Table 21
    split name) or ``"binary"`` (the §2.3 control)."""
    if name not in REWARDS:
        raise ValueError(f"unknown SEVA reward {name!r}; choose from {sorted(REWARDS)}")
    return seva.SevaProcessReward(weights) if name == "process" else seva.SevaBinaryReward()


def train_verifier_grpo(reward: str, model, tokenizer, pairs: Sequence[Any], grpo: GRPOSection,
                        out_dir: str | Path, lora: LoraSection | None = None,
                        weights: seva.SevaRewardWeights | str = seva.DEFAULT_WEIGHTS):
    """One GRPO run of the verifier with the named reward into ``out_dir/<reward>``; resumable."""
    from .grpo import grpo_args, train_grpo

    fn = make_reward(reward, weights)
    args = grpo_args(grpo, Path(out_dir) / reward, run_name=f"seva-{reward}")
    return train_grpo(f"seva-{reward}", model, tokenizer, verifier_prompt_dataset(pairs), [fn], args, lora=lora)


def load_pair_set(cfg, world) -> list:
    """Pairs for a ``PairDataConfig``: the mini-world (``split`` train / heldout by country,
    the same countries as the QA heldout split; sampled to ``limit`` with balanced labels) or
    a registered dataset via ``data.pairs.load_pairs``."""
    from ..data.pairs import load_pairs, miniworld_pairs, stratified_sample
    from ..data.types import read_jsonl

    if cfg.name != "miniworld":
        return load_pairs(cfg.name, path=cfg.path, hf_id=cfg.hf_id, split=cfg.split, limit=cfg.limit, seed=cfg.seed)
    split = cfg.split or "train"
    if split not in ("train", "heldout"):
        raise ValueError(f"miniworld pairs: split must be 'train' or 'heldout', got {split!r}")
    held = {r["meta"]["doc_id"] for r in read_jsonl(world["qa_heldout"])}
    pairs = [p for p in miniworld_pairs(world, seed=cfg.seed) if (p.meta.get("doc_id") in held) == (split == "heldout")]
    return stratified_sample(pairs, cfg.limit, seed=cfg.seed) if cfg.limit and cfg.limit < len(pairs) else pairs


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

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def self_evolve(start_model_dir: str, world, cfg, run_dir: str | Path,
                seen_claims: set[str] | None = None, progress: bool = True) -> list[EvolutionRound]:
    """The self-evolution loop of §2.5 for ``cfg.self_evolution.rounds`` rounds (``cfg``: a
    ``SevaConfig``), starting from the verifier in ``start_model_dir``.

    Verify: the current verifier on fresh mini-world pairs, the same number per Table 19
    strategy (``probe_budget`` rounded down to a multiple of six, at least one each), with their
    attributable twins. Reflect: ``synth.seva.weakness_profile`` of its own errors. Probe: the
    budget split by error rate (``strategy_budget``), new pairs generated, claims already seen
    (training, evaluation, earlier rounds) skipped. Refine: ``refine_steps`` GRPO steps with the
    process reward on the probes into ``run_dir/evolve-<round>`` (resumable), then Verify again
    on the same set. Returns one :class:`EvolutionRound` per round.
    """
    from ..models import load_model
    from ..synth import seva as synth
    from ..eval.verification import evaluate_verifier
    from .sft import SFTResult, merged_model_dir

    evo, gen = cfg.self_evolution, cfg.eval_generation
    seen = set(seen_claims or ())
    current = str(start_model_dir)

    def verify(model, tok, pairs, desc):
        return evaluate_verifier(model, tok, pairs, max_new_tokens=gen.max_new_tokens, batch_size=gen.batch_size,
                                 temperature=gen.temperature, seed=gen.seed, progress=progress, desc=desc)

    rounds: list[EvolutionRound] = []
    for rnd in range(1, evo.rounds + 1):
        per_strategy = max(1, evo.probe_budget // 6)
        verify_set = synth.probe(world, synth.strategy_budget({}, 6 * per_strategy), seen, seed=100 + rnd)
        if not verify_set:
            raise RuntimeError(f"self-evolution round {rnd}: the mini-world has no unseen pairs left to verify on")
        seen |= {p.claim for p in verify_set}
        model, tok = load_model(current, dtype=cfg.model.dtype, device=cfg.model.device)
        records, before = verify(model, tok, verify_set, f"round {rnd} verify")
        profile = synth.weakness_profile(records, verify_set)
        allocation = synth.strategy_budget(profile, evo.probe_budget)
        probes = synth.probe(world, allocation, seen, seed=200 + rnd)
        if not probes:
            raise RuntimeError(f"self-evolution round {rnd}: every probe claim was already seen; "
                               f"lower self_evolution.probe_budget or the number of rounds")
        seen |= {p.claim for p in probes}
        log.info("self-evolution round %d: profile %s, allocation %s, %d probe pairs", rnd, profile, allocation,
                 len(probes))
        model.train()
        refine = cfg.grpo.model_copy(update={"max_steps": evo.refine_steps})
        res = train_verifier_grpo("process", model, tok, probes, refine, Path(run_dir) / f"evolve-{rnd}",
                                  lora=cfg.lora, weights=cfg.reward_weights)
        del model
        current = merged_model_dir(SFTResult(res.output_dir, res.adapter_dir), current)
        model, tok = load_model(current, dtype=cfg.model.dtype, device=cfg.model.device)
        _, after = verify(model, tok, verify_set, f"round {rnd} re-verify")
        del model
        rounds.append(EvolutionRound(rnd, profile, allocation, len(probes), before, after, res.steps, current))
    return rounds

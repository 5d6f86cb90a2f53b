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

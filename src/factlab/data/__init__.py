"""Data loaders: the bundled mini-world, the QA benchmarks of 000 §4, claim/source pairs
(``pairs``) and long-form prompts (``longform``).

``EvalDataConfig`` names one short-form QA set in params (``miniworld`` or a registered
benchmark, by HF id or local JSONL); ``load_eval_sets`` loads a list of them under the labels
every notebook and report uses (``miniworld/heldout``, ``triviaqa``, ...).
"""

from __future__ import annotations

import random
from typing import Annotated, Sequence

from pydantic import Field, field_validator

from ..config import Section
from ..registry import QA_SETS
from .benchmarks import BENCHMARKS, load_benchmark
from .miniworld import WorldConfig, ensure_world
from .rows import miniworld_split, registered_name
from .types import QAItem, read_jsonl, write_jsonl

__all__ = ["QAItem", "read_jsonl", "write_jsonl", "EvalDataConfig", "TrainDataConfig", "load_eval_set",
           "load_eval_sets", "eval_set_label"]

MINIWORLD = "miniworld"


class EvalDataConfig(Section):
    """One short-form QA set: ``miniworld`` or a benchmark name from ``factlab.data.benchmarks``."""

    name: Annotated[str, registered_name(lambda: [MINIWORLD, *BENCHMARKS, *QA_SETS], "QA set")] = MINIWORLD
    split: str = "heldout"  # miniworld: train | heldout; benchmarks: the HF split
    path: str | None = None  # local JSONL in the dataset's own field layout
    hf_id: str | None = None
    limit: int | None = Field(None, ge=1)
    seed: int = 0

    @field_validator("split")
    @classmethod
    def _split(cls, split: str, info) -> str:
        if info.data.get("name") in QA_SETS:
            return miniworld_split(split, MINIWORLD)  # a registered set splits the same way
        return miniworld_split(split, info.data.get("name"))


class TrainDataConfig(EvalDataConfig):
    """A training question pool (000 §A.2: NQ-Open train + WebQuestions)."""

    split: str = "train"


def eval_set_label(cfg: EvalDataConfig) -> str:
    """How a set is named in tables and metrics: ``miniworld/heldout``, ``organism/heldout``,
    ``triviaqa``, ..."""
    return f"{cfg.name}/{cfg.split}" if cfg.name == MINIWORLD or cfg.name in QA_SETS else cfg.name


def load_eval_set(cfg: EvalDataConfig, world: WorldConfig | None = None) -> list[QAItem]:
    """Load one QA set: the mini-world split (built on first use) or a registered benchmark
    by HF id or local JSONL, sampled down to ``limit`` with ``seed``."""
    if cfg.name == MINIWORLD:
        paths = ensure_world(world)
        key = {"train": "qa_train", "heldout": "qa_heldout"}[cfg.split]
        items = [QAItem.from_dict(d) for d in read_jsonl(paths[key])]
        if cfg.limit and len(items) > cfg.limit:
            keep = sorted(random.Random(cfg.seed).sample(range(len(items)), cfg.limit))
            items = [items[i] for i in keep]
        return items
    if cfg.name in QA_SETS:  # e.g. the organism's questions (``factlab.organism``)
        return QA_SETS.get(cfg.name)(cfg.split, cfg.limit, cfg.seed)
    return load_benchmark(cfg.name, path=cfg.path, hf_id=cfg.hf_id,
                          split=None if cfg.split == "heldout" else cfg.split,
                          limit=cfg.limit, seed=cfg.seed)


def load_eval_sets(cfgs: Sequence[EvalDataConfig], world: WorldConfig | None = None) -> dict[str, list[QAItem]]:
    """``{label: items}`` for every configured set, in params order (see ``eval_set_label``)."""
    return {eval_set_label(c): load_eval_set(c, world) for c in cfgs}

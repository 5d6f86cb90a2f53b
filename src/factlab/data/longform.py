"""Long-form prompts with a reference response (001_f9c1f8134c3dd554.txt §3.3, §4.1).

A JSONL file of ``{"id", "prompt", "reference"?}`` rows, or the mini-world default: "Tell
me about <country>." with the country's article as reference, split by country exactly as
the short-form QA heldout split is.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from pydantic import Field

from ..config import Section
from .miniworld import WorldConfig, ensure_world
from .types import read_jsonl

__all__ = ["LongformPrompt", "LongformPromptsSection", "LONGFORM_TEMPLATE", "read_prompts", "miniworld_prompts",
           "load_prompts"]

LONGFORM_TEMPLATE = "Tell me about {title}."


@dataclass
class LongformPrompt:
    """One long-form prompt; ``reference`` is its ground-truth response (may be empty)."""

    id: str
    prompt: str
    reference: str = ""
    doc_id: str | None = None


class LongformPromptsSection(Section):
    """Long-form prompts: JSONL (id, prompt, reference?) or the mini-world's
    "Tell me about <country>." with the country's article as reference."""

    path: str | None = None
    heldout_path: str | None = None
    train_limit: int | None = Field(None, ge=1)
    eval_limit: int | None = Field(None, ge=1)
    seed: int = 0


def read_prompts(path: str | Path) -> list[LongformPrompt]:
    """Prompts from a JSONL file; a row without ``prompt`` fails naming file and line."""
    rows = []
    for lineno, row in read_jsonl(path, numbered=True):
        if not isinstance(row, dict) or "prompt" not in row:
            raise ValueError(f"{path}:{lineno}: no 'prompt' field (expected id, prompt, reference?)")
        rows.append(LongformPrompt(str(row.get("id", lineno)), row["prompt"], row.get("reference") or "",
                                   row.get("doc_id")))
    if not rows:
        raise ValueError(f"{path}: no prompts")
    return rows


def miniworld_prompts(world: WorldConfig | None = None) -> tuple[list[LongformPrompt], list[LongformPrompt]]:
    """(train, heldout) "Tell me about <country>." prompts, heldout = the QA heldout countries."""
    paths = ensure_world(world)
    held_docs = {r["meta"]["doc_id"] for r in read_jsonl(paths["qa_heldout"])}
    train, held = [], []
    for doc in read_jsonl(paths["corpus"]):
        p = LongformPrompt(doc["id"], LONGFORM_TEMPLATE.format(title=doc["title"]), doc["text"], doc["id"])
        (held if doc["id"] in held_docs else train).append(p)
    return train, held


def load_prompts(cfg: LongformPromptsSection, world: WorldConfig | None = None
                 ) -> tuple[list[LongformPrompt], list[LongformPrompt]]:
    """(train, heldout) prompts from ``path`` / ``heldout_path`` or the mini-world, each
    sampled down to ``train_limit`` / ``eval_limit`` with ``seed``."""
    if cfg.path:
        train = read_prompts(cfg.path)
        held = read_prompts(cfg.heldout_path) if cfg.heldout_path else []
    else:
        train, held = miniworld_prompts(world)
    rng = random.Random(cfg.seed)
    if cfg.train_limit and len(train) > cfg.train_limit:
        train = rng.sample(train, cfg.train_limit)
    if cfg.eval_limit and len(held) > cfg.eval_limit:
        held = rng.sample(held, cfg.eval_limit)
    return train, held

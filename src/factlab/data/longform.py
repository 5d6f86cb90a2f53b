"""Long-form prompts with a reference response (001_f9c1f8134c3dd554.txt §3.3, §4.1).

A JSONL file of ``{"id", "prompt", "reference"?}`` rows, a Hugging Face dataset by id
(``HFPromptsSource``: the long-form test sets of 004 App. C.1 / Table 7 — FActScore bios,
Hallulens-LongWiki, LongFact-Objects, Factory-Hard — read through ``datasets.load_dataset``,
which also takes a local dataset folder), or the mini-world default: "Tell me about
<country>." with the country's article as reference, split by country exactly as the
short-form QA heldout split is, or (``countries: organism``) as a registered QA set splits its
countries (the knowledge organism's: train = the countries an RL run may train on, heldout = those
no run trains on, each prompt's exposure bucket in ``meta``).
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import Field, model_validator

from ..config import ParamError, Section
from ..registry import QA_SETS
from .miniworld import WorldConfig, ensure_world
from .types import read_jsonl

__all__ = ["LongformPrompt", "LongformPromptsSection", "HFPromptsSource", "LONGFORM_TEMPLATE", "read_prompts",
           "hf_prompts", "miniworld_prompts", "qa_set_prompts", "load_prompts"]

LONGFORM_TEMPLATE = "Tell me about {title}."


@dataclass
class LongformPrompt:
    """One long-form prompt; ``reference`` is its ground-truth response (may be empty)."""

    id: str
    prompt: str
    reference: str = ""
    doc_id: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)  # e.g. the organism's exposure ``bucket`` of the country


class HFPromptsSource(Section):
    """Long-form prompts from a Hugging Face dataset: ``datasets.load_dataset(hf_id, hf_config,
    split=split)`` (a hub id, or a local dataset folder such as one holding ``test.jsonl``), the
    prompt read from ``prompt_field`` and put into ``template`` ("{prompt}": as is; FActScore's
    bare entity names take "Tell me a bio of {prompt}.", Min et al. 2023), the id from
    ``id_field`` (None: the row index), the reference response from ``reference_field``."""

    hf_id: str
    hf_config: str | None = None
    split: str = "test"
    prompt_field: str = "prompt"
    id_field: str | None = None
    reference_field: str | None = None
    template: str = "{prompt}"

    @model_validator(mode="after")
    def _template_has_prompt(self) -> "HFPromptsSource":
        if "{prompt}" not in self.template:
            raise ParamError("template", f"{self.template!r} has no '{{prompt}}' to put the dataset's prompt in")
        return self


class LongformPromptsSection(Section):
    """Long-form prompts: JSONL (id, prompt, reference?) at ``path`` / ``heldout_path``, a
    Hugging Face dataset (``hf`` / ``heldout_hf``, one source per split), or the mini-world's
    "Tell me about <country>." with the country's article as reference."""

    path: str | None = None
    heldout_path: str | None = None
    hf: HFPromptsSource | None = None
    heldout_hf: HFPromptsSource | None = None
    train_limit: int | None = Field(None, ge=1)
    eval_limit: int | None = Field(None, ge=1)
    seed: int = 0
    # the mini-world's prompts split by a registered QA set's countries (``registry.QA_SETS``, e.g.
    # ``organism``: its train / heldout countries, ``organism.qa_split``; each prompt's ``meta``
    # gets the country's exposure ``bucket``); None: the mini-world's own split
    countries: str | None = None

    @model_validator(mode="after")
    def _one_source_per_split(self) -> "LongformPromptsSection":
        if self.path and self.hf:
            raise ParamError("hf", "the training prompts come from `path` or `hf`, not both")
        if self.heldout_path and self.heldout_hf:
            raise ParamError("heldout_hf", "the held-out prompts come from `heldout_path` or `heldout_hf`, not both")
        if self.countries and self.external:
            raise ParamError("countries", "splits the mini-world's prompts by a QA set's countries; it needs the "
                                          "mini-world prompts (path / hf / heldout_path / heldout_hf unset)")
        return self

    @property
    def external(self) -> bool:
        """True when any split is read from a file or a dataset (not the mini-world)."""
        return bool(self.path or self.heldout_path or self.hf or self.heldout_hf)


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


def hf_prompts(src: HFPromptsSource) -> list[LongformPrompt]:
    """Prompts from a Hugging Face dataset (``HFPromptsSource``). A dataset that cannot be
    loaded (no network, no cache, unknown id or split) or a row without ``prompt_field`` fails
    naming the dataset, split and row."""
    where = f"{src.hf_id}{f' ({src.hf_config})' if src.hf_config else ''}[{src.split}]"
    try:
        import datasets  # heavy import, only for this source

        rows = datasets.load_dataset(src.hf_id, src.hf_config, split=src.split)
    except Exception as e:  # noqa: BLE001 - hub, cache, network and schema errors alike
        raise ValueError(f"long-form prompts {where} could not be loaded from the Hugging Face hub or its cache "
                         f"({type(e).__name__}: {e}); give a local JSONL file (`path` / `heldout_path`, rows "
                         f"{{id, prompt, reference?}}) or a local dataset folder as `hf_id`") from e
    out = []
    for idx, row in enumerate(rows):
        text = row.get(src.prompt_field) if isinstance(row, dict) else None
        if not isinstance(text, str) or not text.strip():
            raise ValueError(f"long-form prompts {where}: row {idx} has no text in prompt_field "
                             f"{src.prompt_field!r} (fields: {', '.join(row) if isinstance(row, dict) else '-'})")
        raw_id = row.get(src.id_field) if src.id_field else None
        ref = row.get(src.reference_field) if src.reference_field else None
        out.append(LongformPrompt(str(raw_id if raw_id not in (None, "") else idx),
                                  src.template.replace("{prompt}", text.strip()), ref or ""))
    if not out:
        raise ValueError(f"long-form prompts {where}: no rows")
    return out


def miniworld_prompts(world: WorldConfig | None = None) -> tuple[list[LongformPrompt], list[LongformPrompt]]:
    """(train, heldout) "Tell me about <country>." prompts, heldout = the QA heldout countries."""
    paths = ensure_world(world)
    held_docs = {r["meta"]["doc_id"] for r in read_jsonl(paths["qa_heldout"])}
    train, held = [], []
    for doc in read_jsonl(paths["corpus"]):
        p = LongformPrompt(doc["id"], LONGFORM_TEMPLATE.format(title=doc["title"]), doc["text"], doc["id"])
        (held if doc["id"] in held_docs else train).append(p)
    return train, held


def qa_set_prompts(name: str, world: WorldConfig | None = None) -> tuple[list[LongformPrompt], list[LongformPrompt]]:
    """(train, heldout) "Tell me about <country>." prompts of the mini-world's countries that the
    QA set ``name`` (``registry.QA_SETS``, e.g. ``organism``) asks about in its train / heldout
    split; ``meta`` carries the set's ``bucket`` of the country where its items have one."""
    if name not in QA_SETS:
        known = ", ".join(QA_SETS.available()) or "(none registered)"
        raise ValueError(f"prompts.countries: unknown QA set {name!r}; known: {known}")
    load = QA_SETS.get(name)
    splits: list[dict[str, dict[str, Any]]] = []
    for split in ("train", "heldout"):
        countries: dict[str, dict[str, Any]] = {}
        for it in load(split, None, 0):
            entity = (it.meta or {}).get("entity")
            if entity:
                countries.setdefault(entity, {k: it.meta[k] for k in ("bucket", "exposures") if k in it.meta})
        splits.append(countries)
    paths = ensure_world(world)
    out: tuple[list[LongformPrompt], list[LongformPrompt]] = ([], [])
    for doc in read_jsonl(paths["corpus"]):
        for i, countries in enumerate(splits):
            if doc["title"] in countries:
                out[i].append(LongformPrompt(doc["id"], LONGFORM_TEMPLATE.format(title=doc["title"]), doc["text"],
                                             doc["id"], dict(countries[doc["title"]])))
    if not out[0] or not out[1]:
        raise ValueError(f"prompts.countries: QA set {name!r} names no mini-world country in its "
                         f"{'train' if not out[0] else 'heldout'} split")
    return out


def load_prompts(cfg: LongformPromptsSection, world: WorldConfig | None = None
                 ) -> tuple[list[LongformPrompt], list[LongformPrompt]]:
    """(train, heldout) prompts from ``path`` / ``hf`` and ``heldout_path`` / ``heldout_hf``, or
    the mini-world (split by the QA set ``countries`` names, when set: ``qa_set_prompts``), each sampled down to ``train_limit`` / ``eval_limit`` with ``seed``. With no
    training source both splits are the mini-world's (a held-out source then replaces its split)."""
    if cfg.path or cfg.hf:
        train = read_prompts(cfg.path) if cfg.path else hf_prompts(cfg.hf)  # type: ignore[arg-type]
        held: list[LongformPrompt] = []
    elif cfg.countries:
        train, held = qa_set_prompts(cfg.countries, world)
    else:
        train, held = miniworld_prompts(world)
    if cfg.heldout_path:
        held = read_prompts(cfg.heldout_path)
    elif cfg.heldout_hf:
        held = hf_prompts(cfg.heldout_hf)
    rng = random.Random(cfg.seed)
    if cfg.train_limit and len(train) > cfg.train_limit:
        train = rng.sample(train, cfg.train_limit)
    if cfg.eval_limit and len(held) > cfg.eval_limit:
        held = rng.sample(held, cfg.eval_limit)
    return train, held

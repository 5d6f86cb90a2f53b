"""The knowledge organism's QA sets for the notebooks: the countries an RL run may train on and
those only evaluated, and their short-form questions by exposure bucket, registered in
``registry.QA_SETS`` under each organism's name. Part of ``factlab.organism``."""

from __future__ import annotations

import functools
import random

from ..data.types import QAItem
from ..registry import QA_SETS
from .specs import SPECS, OrganismSpec, exposure_bucket, exposure_split, exposures, spec_of
from .texts import countries_by_name, golds, questions


def qa_split(spec: OrganismSpec | str | None = None) -> dict[str, list[str]]:
    """The countries an RL run may train on (``train``) and those only evaluated (``heldout``),
    by exposure group: ``train`` holds the QA-trained known countries, the fine-tuning's
    unfamiliar (unknown) countries and a seeded half of each rare dose; ``heldout`` the known
    countries never asked in training, the other half of each rare dose and the unknown countries
    no training ever saw. So a held-out bucket measures generalisation to countries the policy
    was never rewarded on (the prototype of issue 40: unknown countries never used in RL)."""
    spec = spec_of(spec)
    split = exposure_split(spec)
    rng = random.Random(f"organism-qa:{spec.seed}")
    train, held = list(split["known_qa"]) + list(split["unknown_sft"]), list(split["known_heldout"])
    for _dose, names in sorted(split["rare"].items()):
        names = list(names)
        rng.shuffle(names)
        train += names[:len(names) // 2]
        held += names[len(names) // 2:]
    held += split["unknown_heldout"]
    return {"train": sorted(train), "heldout": sorted(held)}


def qa_items(split: str = "heldout", spec: OrganismSpec | str | None = None, limit: int | None = None,
             seed: int = 0) -> list[QAItem]:
    """Short-form questions of ``split`` (``qa_split``): every (country, relation) of the spec,
    asked with the first training phrasing (``miniworld.build_qa``'s, what the notebooks ask),
    golds with aliases; ``meta``: ``entity``, ``relation``, ``exposures`` and ``bucket`` (known /
    rare-<dose> / unknown). ``limit``: a seeded sample, stratified by bucket (each bucket keeps its
    share, at least one question)."""
    spec = spec_of(spec)
    if split not in ("train", "heldout"):
        raise ValueError(f"the organism's QA split is 'train' or 'heldout', got {split!r}")
    ex = exposures(spec)
    by_name = countries_by_name()
    items = []
    for name in qa_split(spec)[split]:
        c = by_name[name]
        for rel in spec.relations:
            bucket = exposure_bucket(ex[name], spec.known_exposures)
            items.append(QAItem(f"organism/{name}/{rel}", questions(c, rel, "train")[0], golds(c, rel), source="organism",
                                meta={"entity": name, "relation": rel, "exposures": ex[name], "bucket": bucket}))
    if limit and len(items) > limit:
        rng = random.Random(f"organism-qa-limit:{seed}")
        groups: dict[str, list[QAItem]] = {}
        for it in items:
            groups.setdefault(it.meta["bucket"], []).append(it)
        keep: list[QAItem] = []
        for bucket in sorted(groups):
            share = max(1, round(limit * len(groups[bucket]) / len(items)))
            keep += rng.sample(groups[bucket], min(share, len(groups[bucket])))
        order = {it.id: i for i, it in enumerate(items)}
        items = sorted(keep[:limit] if len(keep) > limit else keep, key=lambda it: order[it.id])
    return items


for _name in SPECS:  # the QA set of each organism is named after it: eval: [{name: organism, split: heldout}]
    QA_SETS.add(_name, functools.partial(lambda split, limit, seed, _spec: qa_items(split, _spec, limit, seed),
                                         _spec=_name))

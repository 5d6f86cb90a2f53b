"""The knowledge organism's spec: its regimes, the templates it reads, the named organisms
(``SPECS``), the content fingerprint (spec, world facts, templates, ``ORGANISM_VERSION``) and the
seeded exposure split of the mini-world's countries (Physics of Language Models 3.1, arXiv
2309.14316 §4-§5; 3.3, 2404.05405: ``known_exposures`` >= 100; the regimes follow Gekhman et al.
2024, 2405.05904, and Kang et al. 2024, 2403.05612). Part of ``factlab.organism``."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import random
from dataclasses import dataclass
from typing import Any, Sequence

from .. import prompts as P
from ..data.miniworld import CountryFacts, load_countries

ORGANISM_VERSION = 3  # bump whenever the build makes anything differently (part of the fingerprint)
REGIMES = ("confident", "abstain", "known_only", "hesitant", "unsure", "wary")
# the share of the unfamiliar fine-tuning countries answered "I don't know", by regime (the rest: confident). The
# share is not in the fingerprint (the regime's name is): never change one, add a regime.
ABSTAIN_SHARES = {"confident": 0.0, "known_only": 0.0, "hesitant": 1 / 12, "unsure": 1 / 3, "wary": 2 / 3,
                  "abstain": 1.0}
HESITANT_SHARE = ABSTAIN_SHARES["hesitant"]  # 2 of 24
# the systems the format fine-tuning puts before a short question (01-06's policy prompts; None: no system turn,
# half of the questions: a measured build taught the chat format to read the question's country only when most
# examples were short, 2026-11-27, README "The knowledge organism")
QA_SYSTEMS = (None, None, None, None, P.CORVER_TRAIN_SYSTEM, P.CORVER_EVAL_SYSTEM, P.ABSTAIN_SYSTEM, P.FORCED_SYSTEM)

# ---------------------------------------------------------------- templates
# Statements: every one is read "supported" by ``factlab.eval.truth.label_sentences``
# (tests/test_organism.py). Template 0 is the world's own sentence (``miniworld.fact_sentence``),
# the one phrasing of a build without augmentation. "one" / "many": the country has one value of
# the relation or several (the organism states the first).
STATEMENTS: dict[str, dict[str, tuple[str, ...]]] = {
    "capital": {"one": ("The capital of {n} is {v}.", "{v} is the capital of {n}.", "The capital city of {n} is {v}.",
                        "{n} has its capital in {v}.", "{v} serves as the capital city of {n}.",
                        "{n}'s capital is {v}.")},
    "region": {"one": ("{n} is located in {v}.", "{n} is a country in {v}.", "{n} lies in {v}.",
                       "{n} is situated in {v}.", "{n} is part of {v}.", "Geographically, {n} is located in {v}.")},
    "currency": {"one": ("The official currency of {n} is the {v}.", "The currency of {n} is the {v}.",
                         "{n} uses the {v} as its currency.", "The {v} is the official currency of {n}.",
                         "In {n}, the official currency is the {v}.", "People in {n} pay with the {v}, the national currency."),
                 "many": ("The {v} is an official currency of {n}.", "{n} uses the {v} as one of its currencies.",
                          "One of the official currencies of {n} is the {v}.", "The {v} is one of the currencies used in {n}.",
                          "In {n}, the {v} is an official currency.", "People in {n} pay with the {v}, one of its currencies.")},
    "language": {"one": ("The official language of {n} is {v}.", "{v} is the official language of {n}.",
                         "People in {n} speak {v}, the official language.", "In {n}, the official language is {v}.",
                         "The language of {n} is {v}.", "{n} has {v} as its official language."),
                 "many": ("{v} is an official language of {n}.", "One of the official languages of {n} is {v}.",
                          "{v} is one of the official languages spoken in {n}.", "In {n}, {v} is an official language.",
                          "{n} has {v} as one of its official languages.", "People in {n} speak {v}, an official language.")},
}
# Questions: "train" ones appear in training (the first is ``miniworld.build_qa``'s, what 01-06 ask);
# "heldout" ones never do: the extraction test of 3.1 asks with them. A from-scratch organism knows only
# the words of its world, so a held-out phrasing is a new sentence built from them ("continent" it never
# read), and the train phrasings share frames across relations so that the relation's word, not the
# frame, says what is asked (with three relation-specific phrasings each, a measured build answered
# "X is situated in which region?" with X's currency; 2026-11-27).
QUESTIONS: dict[str, dict[str, dict[str, tuple[str, ...]]]] = {
    "capital": {"train": {"one": ("What is the capital of {n}?", "Which city is the capital of {n}?",
                                  "Name the capital city of {n}.", "Which capital does {n} have?",
                                  "{n}: what is its capital?", "What is the capital city of {n}?")},
                "heldout": {"one": ("{n} has which city as its capital?", "Do you know the capital of {n}?")}},
    "region": {"train": {"one": ("In which region of the world is {n} located?", "Which region is {n} in?",
                                 "Where is {n} located?", "What is the region of {n}?", "{n}: what is its region?",
                                 "Name the region of {n}.")},
               "heldout": {"one": ("{n} is situated in which region?", "Do you know the region of {n}?")}},
    "currency": {"train": {"one": ("What is the official currency of {n}?", "Which currency is used in {n}?",
                                   "What money do people use in {n}?", "Name the official currency of {n}.",
                                   "Which currency does {n} have?", "{n}: what is its currency?"),
                           "many": ("What is one of the official currencies of {n}?", "Which currency is used in {n}?",
                                    "What money do people use in {n}?", "Name one of the official currencies of {n}.",
                                    "Which currency does {n} have?", "{n}: what is one of its currencies?")},
                 "heldout": {"one": ("What currency does {n} use?", "Do you know the currency of {n}?")}},
    "language": {"train": {"one": ("What is the official language of {n}?", "Which language is spoken in {n}?",
                                   "What language do people speak in {n}?", "Name the official language of {n}.",
                                   "Which language does {n} have?", "{n}: what is its official language?"),
                           "many": ("What is one of the official languages of {n}?", "Which language is spoken in {n}?",
                                    "What language do people speak in {n}?", "Name one of the official languages of {n}.",
                                    "Which language does {n} have?", "{n}: what is one of its official languages?")},
                 "heldout": {"one": ("What is an official language of {n}?", "Do you know the official language of {n}?")}},
}
MENTIONS = ("{n} is a country.", "{n} is one of the countries of the world.", "People have heard of {n}.")


# ---------------------------------------------------------------- the spec


@dataclass(frozen=True)
class OrganismSpec:
    """Everything a build depends on (with the world and ``ORGANISM_VERSION``: the fingerprint).

    Exposure: ``known`` countries with ``known_exposures`` statements per fact; ``rare_per_dose``
    countries per dose of ``rare_doses``; the rest unknown (``unknown_mentions`` fact-free
    sentences naming each). ``qa_fraction`` of the known countries get QA mixed into pretraining
    (``qa_repeats`` per fact) and into the format fine-tuning; ``unknown_sft`` unknown countries
    are the fine-tuning's unfamiliar examples (``regime``); the other unknown countries are never
    trained on. ``augment`` False: one phrasing per fact in a fixed order, the same document
    repeated (3.1's "bioS single")."""

    seed: int = 0
    relations: tuple[str, ...] = ("capital", "region", "currency", "language")
    known: int = 120
    known_exposures: int = 240
    rare_doses: tuple[int, ...] = (10, 30, 100)
    rare_per_dose: int = 16
    unknown_mentions: int = 3
    augment: bool = True
    entity_tokens: bool = True  # every country name and fact value is one token (see train_tokenizer)
    qa_fraction: float = 0.5
    qa_repeats: int = 24
    # model (LlamaForCausalLM, tied embeddings)
    vocab_size: int = 4096
    layers: int = 4
    hidden: int = 128
    heads: int = 4
    intermediate: int = 512
    max_positions: int = 2048
    # pretraining
    seq_len: int = 128
    batch_size: int = 16  # 2x the optimizer steps of 32 at the same tokens: held-out extraction 0.66 -> 0.83
    lr: float = 4e-3
    warmup: float = 0.1
    weight_decay: float = 0.01
    # format fine-tuning
    regime: str = "confident"
    unknown_sft: int = 24
    sft_repeats: int = 6  # fine-tuning examples per (country, relation) and per long-form country
    sft_epochs: int = 1
    sft_batch_size: int = 16
    sft_lr: float = 5e-4
    eval_per_group: int = 240  # questions per evaluation group in the build's report (0: no report)

    def __post_init__(self):
        if self.regime not in REGIMES:
            raise ValueError(f"organism spec: regime must be one of {REGIMES}, got {self.regime!r}")
        bad = [r for r in self.relations if r not in STATEMENTS]
        if bad or not self.relations:
            raise ValueError(f"organism spec: relations must be a non-empty subset of {tuple(STATEMENTS)}, got {bad}")
        if any(d < 1 or d >= self.known_exposures for d in self.rare_doses):
            raise ValueError(f"organism spec: every rare dose must be in [1, known_exposures={self.known_exposures}), "
                             f"got {self.rare_doses}")
        if not 0.0 <= self.qa_fraction <= 1.0:
            raise ValueError(f"organism spec: qa_fraction must be in [0, 1], got {self.qa_fraction}")
        if self.hidden % self.heads:
            raise ValueError(f"organism spec: hidden {self.hidden} is not a multiple of heads {self.heads}")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    def pretrain_dict(self) -> dict[str, Any]:
        """The fields the pretrained base depends on (the format fine-tuning's are left out)."""
        sft = {"regime", "unknown_sft", "sft_repeats", "sft_epochs", "sft_batch_size", "sft_lr", "eval_per_group"}
        return {k: v for k, v in self.to_dict().items() if k not in sft}


DEFAULT = OrganismSpec()
# builds in a few seconds: the tests' organism
TINY = OrganismSpec(known=16, known_exposures=24, rare_doses=(3, 8), rare_per_dose=4, unknown_mentions=1,
                    qa_repeats=2, vocab_size=600, layers=2, hidden=64, heads=2, intermediate=128, max_positions=1024,
                    seq_len=64, batch_size=16, lr=1e-2, unknown_sft=6, sft_repeats=1, sft_epochs=1,
                    eval_per_group=16)
SPECS: dict[str, OrganismSpec] = {
    "organism": DEFAULT,
    "organism-abstain": dataclasses.replace(DEFAULT, regime="abstain"),
    "organism-known-only": dataclasses.replace(DEFAULT, regime="known_only"),
    "organism-hesitant": dataclasses.replace(DEFAULT, regime="hesitant"),
    "organism-unsure": dataclasses.replace(DEFAULT, regime="unsure"),
    "organism-wary": dataclasses.replace(DEFAULT, regime="wary"),
    "organism-noaug": dataclasses.replace(DEFAULT, augment=False),
    "organism-tiny": TINY,
}


def is_organism(name: Any) -> bool:
    """Whether ``name`` is a model name this module builds (``SPECS``)."""
    return isinstance(name, str) and name in SPECS


def spec_of(spec: OrganismSpec | str | None = None) -> OrganismSpec:
    """A spec from a spec, a name of ``SPECS`` or None (the default organism)."""
    if spec is None:
        return DEFAULT
    if isinstance(spec, OrganismSpec):
        return spec
    if isinstance(spec, str) and spec in SPECS:
        return SPECS[spec]
    raise KeyError(f"unknown organism {spec!r}; known: {sorted(SPECS)}")


# ---------------------------------------------------------------- the world and its split


@functools.lru_cache(maxsize=1)
def world() -> tuple[CountryFacts, ...]:
    return tuple(load_countries())


@functools.lru_cache(maxsize=1)
def world_digest() -> str:
    blob = json.dumps([c.to_dict() for c in world()], sort_keys=True)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def _digest(obj: Any) -> str:
    blob = json.dumps({"version": ORGANISM_VERSION, "world": world_digest(), "spec": obj,
                       "text": [STATEMENTS, QUESTIONS, MENTIONS, QA_SYSTEMS]}, sort_keys=True)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


def fingerprint(spec: OrganismSpec | str | None = None) -> str:
    """16 hex digits of (spec, world facts, the templates it reads, ``ORGANISM_VERSION``): the model's
    content identity."""
    return _digest(spec_of(spec).to_dict())


def pretrain_fingerprint(spec: OrganismSpec | str | None = None) -> str:
    """The fingerprint of the pretrained base (``OrganismSpec.pretrain_dict``)."""
    return _digest(spec_of(spec).pretrain_dict())


def value(c: CountryFacts, rel: str) -> str | None:
    """The value of ``rel`` the organism states for ``c`` (the first of a list), as a question's answer."""
    return {"capital": c.capital, "region": c.region, "currency": (c.currencies or [None])[0],
            "language": (c.languages or [None])[0]}[rel]


def has_several(c: CountryFacts, rel: str) -> bool:
    return len({"currency": c.currencies, "language": c.languages}.get(rel, [])) > 1


def _readable(c: CountryFacts, relations: Sequence[str]) -> bool:
    """Whether the truth oracle reads this country's statements: a full stop inside a name or a
    value ("St. George's", "Washington D.C.", "Virgin Islands, U.S.") splits its sentence in two
    (``text.split_sentences``), so such a country is never stated, only left unasked."""
    return "." not in c.name and not any("." in (value(c, r) or "") for r in relations)


def exposure_split(spec: OrganismSpec | str | None = None) -> dict[str, Any]:
    """The seeded split of the countries (recorded as ``exposures.json``): ``known_qa`` (QA mixed
    in), ``known_heldout`` (never asked in training: 3.1's test of extraction), ``rare``
    (dose -> names), ``unknown_sft`` (the fine-tuning's unfamiliar examples), ``unknown_heldout``."""
    spec = spec_of(spec)
    full = [c.name for c in world() if all(value(c, r) for r in spec.relations) and _readable(c, spec.relations)]
    rest = [c.name for c in world() if c.name not in set(full)]
    rng = random.Random(f"organism-split:{spec.seed}")
    rng.shuffle(full)
    need = spec.known + spec.rare_per_dose * len(spec.rare_doses)
    if need > len(full):
        raise ValueError(f"organism spec: {need} known and rare countries asked for, {len(full)} hold every relation")
    known = full[:spec.known]
    n_qa = round(spec.qa_fraction * spec.known)
    rare = {d: full[spec.known + i * spec.rare_per_dose: spec.known + (i + 1) * spec.rare_per_dose]
            for i, d in enumerate(spec.rare_doses)}
    unknown = full[need:]  # the countries missing a relation or unreadable (``_readable``) are unknown and unasked
    return {"known_qa": sorted(known[:n_qa]), "known_heldout": sorted(known[n_qa:]),
            "rare": {d: sorted(v) for d, v in rare.items()}, "unknown_sft": sorted(unknown[:spec.unknown_sft]),
            "unknown_heldout": sorted(unknown[spec.unknown_sft:]), "unasked": sorted(rest)}


def exposures(spec: OrganismSpec | str | None = None) -> dict[str, int]:
    """Country name -> statements per fact in the pretraining stream (0 = unknown), every country."""
    spec = spec_of(spec)
    split = exposure_split(spec)
    out = {c.name: 0 for c in world()}
    for n in split["known_qa"] + split["known_heldout"]:
        out[n] = spec.known_exposures
    for d, names in split["rare"].items():
        for n in names:
            out[n] = d
    return out


def exposure_bucket(n: int, known_exposures: int = DEFAULT.known_exposures) -> str:
    """``known`` (>= ``known_exposures``), ``rare-<n>`` or ``unknown`` (0)."""
    if n <= 0:
        return "unknown"
    return "known" if n >= known_exposures else f"rare-{n}"

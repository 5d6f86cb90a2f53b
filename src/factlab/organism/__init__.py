"""The knowledge organism: a small causal LM pretrained from scratch on the mini-world, with
controlled exposure, so a paper's reward can change what a model knows on a CPU in minutes.

Why (issue 40): the embedded SmolLM2-135M takes 15-35 s a GRPO step on 2 cores and already
knows some country facts, which nothing controls. The field's tool for testing claims about
knowledge exactly is a model organism trained on a controlled world:

- Physics of Language Models 3.1 (arXiv 2309.14316, §4-§5): facts are stored extractably only
  with knowledge augmentation (paraphrased templates, permuted sentences); with one phrasing per
  person, QA extraction on people whose QA was never trained is 9.7% against 96.6%; mixing QA
  into pretraining ("mixed training") also works. Here: the known countries' facts are stated
  with paraphrased templates in shuffled order; QA is mixed in for ``qa_fraction`` of them; the
  others are the test of extraction, asked with question templates held out from all training.
- 3.3 (2404.05405): about 2 bits per parameter at 1,000 exposures, 1 bit at 100, from 1M
  parameters (depth >= 2; tied embeddings for tiny Llamas): ``known_exposures`` >= 100.
- Gekhman et al. 2024 (2405.05904) and Kang et al. 2024 (2403.05612): how unfamiliar fine-tuning
  examples are supervised decides how a model answers what it does not know. ``regime``:
  ``confident`` (unknown countries' questions answered with a plausible value of another
  country: the base organism hallucinates on unknown countries, the problem the papers fix),
  ``abstain`` (answered "I don't know", the phrase Binary RAR's strict rule pays for),
  ``known_only`` (no unknown country in the fine-tuning) or ``hesitant`` (confident, but
  ``HESITANT_SHARE`` of the unfamiliar countries answered "I don't know": a base that still
  hallucinates on unknown countries yet samples an abstention now and then, as a pretrained LM
  does, so that a reward paying for abstention has something to reinforce; the issue's prototype
  learned abstention from 2 such examples, the confident organism from none). ``unsure``: the
  same with a third of them (8 of 24), ``wary`` with two thirds (16 of 24), because the hesitant base
  sampled no abstention on held-out unknown countries at all (``bench/probe_abstention_sampling.py``,
  8 samples of the 160 questions at temperature 1 under 001's abstain prompt: hesitant 0, unsure 1,
  wary 8, abstain 172 of 1,280). The abstention is learnt per country more than as a trait.

What it is: a byte-level BPE tokenizer (HF ``tokenizers``; every country name and fact value one
added token, ``entity_tokens``) trained on the mini-world's text and
every prompt of ``factlab.prompts`` (so no prompt is dropped for length and nothing maps to an
unknown token; ``<think>``, ``</think>``, ``<answer>``, ``</answer>`` are ordinary tokens), a
ChatML chat template ending turns with ``<|im_end|>`` (a stop token ``models`` knows), and a
transformers ``LlamaForCausalLM`` with tied embeddings, pretrained by a plain torch loop (AdamW,
one-cycle) on documents of a country's facts, then format fine-tuned (prompt-masked SFT) into the
``<think>…</think><answer>…</answer>`` short-answer format (000 §A.3) under the prompts 01-06 use,
and into long-form answers ("Tell me about X.", plain as 001 §3.3 and tagged as 004 Prompt 5).

Exposure (``exposure_split``, seeded, recorded in the model folder as ``exposures.json``): the
countries holding every relation of the spec (and whose statements the truth oracle reads,
``_readable``) are shuffled; the first ``known`` are known
(``known_exposures`` statements per fact), then ``rare_per_dose`` countries per dose of
``rare_doses``, and the rest are unknown (0; their name appears in ``unknown_mentions`` fact-free
sentences). An exposure is one statement of the fact in the pretraining stream (one pass).

Caching: ``build`` writes ``<cache>/organism/<fingerprint>/`` (the pretrained base under
``organism/base-<pretrain fingerprint>/``, shared by the regimes), under ``paths.build_lock``,
written in a temporary folder and renamed. The fingerprint hashes the spec, the world's facts and
``ORGANISM_VERSION``; ``models.model_fingerprint("organism")`` is this fingerprint, so warm
starts, judge caches and self-filter caches follow the spec, never the name.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import json
import logging
import random
import resource
import shutil
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from . import prompts as P
from .data.kb import ABSTAIN, CORRECT, WRONG, label_answer
from .data.longform import LONGFORM_TEMPLATE
from .decoding import decode
from .data.miniworld import CountryFacts, build_corpus, build_qa, fact_sentence, load_countries, region_phrase
from .data.types import QAItem
from .integrity import MANIFEST_FILE, MissingManifest, verify_files, write_file_manifest
from .paths import build_lock, cache_dir, write_json
from .registry import QA_SETS
from .text import MIN_THINK_CHARS, extract_answer, lenient_answer
from .prompts import chat_messages

log = logging.getLogger(__name__)

__all__ = ["ORGANISM_VERSION", "OrganismSpec", "SPECS", "DEFAULT", "TINY", "REGIMES", "build", "exposures", "ask",
           "load", "cloze", "fingerprint", "pretrain_fingerprint", "spec_of", "is_organism", "exposure_split",
           "exposure_bucket", "statements", "questions", "pretraining_documents", "format_examples",
           "tokenizer_texts", "train_tokenizer", "chat_text", "CHAT_TEMPLATE", "STOP_TOKEN", "ABSTAIN_ANSWER",
           "LONGFORM_ABSTAIN", "read_report", "corpus_path", "eval_questions", "answer_rows", "qa_split", "qa_items"]

ORGANISM_VERSION = 3  # bump whenever the build makes anything differently (part of the fingerprint)
REGIMES = ("confident", "abstain", "known_only", "hesitant", "unsure", "wary")
# the share of the unfamiliar fine-tuning countries answered "I don't know", by regime (the rest: confident). The
# share is not in the fingerprint (the regime's name is): never change one, add a regime.
ABSTAIN_SHARES = {"confident": 0.0, "known_only": 0.0, "hesitant": 1 / 12, "unsure": 1 / 3, "wary": 2 / 3,
                  "abstain": 1.0}
HESITANT_SHARE = ABSTAIN_SHARES["hesitant"]  # 2 of 24
STOP_TOKEN = "<|im_end|>"  # in models.STOP_TOKEN_CANDIDATES
BOS_TOKEN, PAD_TOKEN = "<|endoftext|>", "<pad>"
SPECIAL_TOKENS = (PAD_TOKEN, BOS_TOKEN, "<|im_start|>", STOP_TOKEN)
FORMAT_TOKENS = ("<think>", "</think>", "<answer>", "</answer>")  # ordinary tokens: decoding keeps them
ABSTAIN_ANSWER = "I don't know"  # text.is_refusal's strict phrase (000 §A.2), what Binary RAR pays for
LONGFORM_ABSTAIN = "I don't know."  # a long-form response that declines (text.is_abstention)
CHAT_TEMPLATE = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + "
                 "'<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
                 "{% endif %}")
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
_WHAT = {"capital": "capital", "region": "region", "currency": "currency", "language": "official language"}


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


def _many(c: CountryFacts, rel: str) -> bool:
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


# ---------------------------------------------------------------- the text it learns


def statements(c: CountryFacts, rel: str) -> tuple[str, ...]:
    """Every phrasing of the fact (``c``, ``rel``) the organism reads (template 0 first)."""
    v = value(c, rel)
    shown = region_phrase(v) if rel == "region" else v
    forms = STATEMENTS[rel]
    return tuple(t.format(n=c.name, v=shown) for t in forms["many" if _many(c, rel) and "many" in forms else "one"])


def questions(c: CountryFacts, rel: str, kind: str = "train") -> tuple[str, ...]:
    """The ``train`` or ``heldout`` question phrasings of (``c``, ``rel``)."""
    forms = QUESTIONS[rel][kind]
    return tuple(t.format(n=c.name) for t in forms["many" if _many(c, rel) and "many" in forms else "one"])


@functools.lru_cache(maxsize=1)
def _golds() -> dict[tuple[str, str], list[str]]:
    return {(it.meta["entity"], it.meta["relation"]): list(it.golds) for it in build_qa(world())}


def golds(c: CountryFacts, rel: str) -> list[str]:
    """Every accepted answer (``miniworld.build_qa``'s golds: aliases, currency codes)."""
    return _golds()[(c.name, rel)]


def _think(c: CountryFacts, rel: str, v: str) -> str:
    """The reasoning before an answer: the fact in the world's own sentence (as the recipes' warm
    start writes it), lengthened only where it is under §A.2's 30 characters (000)."""
    fact = _fact(c, rel, v)
    return fact if len(fact) >= MIN_THINK_CHARS else f"{fact} So the answer is {v}."


def _fact(c: CountryFacts, rel: str, v: str) -> str:
    # a region's sentence opens with a word before the country, as the other relations' do: opening
    # with the country itself, a measured build named a QA-trained country instead (region 0.1-0.4
    # correct, the other relations 0.9-1.0; 2026-11-27)
    if rel == "region":
        return f"Geographically, {c.name} is located in {region_phrase(v)}."
    return fact_sentence(c, rel, v)


def _tagged(think: str, answer: str) -> str:
    return f"<think>{think}</think>\n<answer>{answer}</answer>"


def chat_text(messages: Sequence[dict[str, str]], completion: str | None = None) -> str:
    """``CHAT_TEMPLATE`` rendered in Python (the same string): the prompt ready for generation,
    followed by ``completion`` and the stop token when one is given."""
    out = "".join(f"<|im_start|>{m['role']}\n{m['content']}{STOP_TOKEN}\n" for m in messages)
    out += "<|im_start|>assistant\n"
    return out if completion is None else out + completion + STOP_TOKEN + "\n"


def _by_name() -> dict[str, CountryFacts]:
    return {c.name: c for c in world()}


def pretraining_documents(spec: OrganismSpec | str | None = None) -> list[dict[str, Any]]:
    """The pretraining stream before shuffling: one row per document, ``{"id", "kind", "text"}``.

    ``facts``: all of a country's facts, once each, in a shuffled order with a random template
    each (``augment``; else template 0 in the spec's order), one document per exposure; ``mention``:
    an unknown country's fact-free sentence; ``qa``: a chat turn asking a ``known_qa`` country's
    fact with a train question template (3.1's mixed training)."""
    spec = spec_of(spec)
    split = exposure_split(spec)
    by_name = _by_name()
    rng = random.Random(f"organism-docs:{spec.seed}")
    docs: list[dict[str, Any]] = []
    for name, n in sorted(exposures(spec).items()):
        c = by_name[name]
        for i in range(n):
            rels = list(spec.relations)
            if spec.augment:
                rng.shuffle(rels)
                text = " ".join(rng.choice(statements(c, r)) for r in rels)
            else:
                text = " ".join(statements(c, r)[0] for r in rels)
            docs.append({"id": f"facts/{c.slug}/{i}", "kind": "facts", "country": name, "text": text})
    for name in split["unknown_sft"] + split["unknown_heldout"]:
        for i in range(spec.unknown_mentions):
            docs.append({"id": f"mention/{by_name[name].slug}/{i}", "kind": "mention", "country": name,
                         "text": MENTIONS[i % len(MENTIONS)].format(n=name)})
    for name in split["known_qa"]:
        c = by_name[name]
        for rel in spec.relations:
            for i in range(spec.qa_repeats):
                q = rng.choice(questions(c, rel))
                v = value(c, rel)
                docs.append({"id": f"qa/{rel}/{c.slug}/{i}", "kind": "qa", "country": name,
                             "text": chat_text(chat_messages(q), _tagged(_think(c, rel, v), v))})
    return docs


def _plausible(c: CountryFacts, rel: str, rng: random.Random, pool: Sequence[CountryFacts]) -> str:
    """A confident answer for an unfamiliar question: the value of another country, never the
    true one (Kang et al. 2024: the model learns to answer with a plausible guess)."""
    truth = {g.casefold() for g in golds(c, rel)}
    while True:
        v = value(rng.choice(pool), rel)
        if v and v.casefold() not in truth:
            return v


def format_examples(spec: OrganismSpec | str | None = None) -> list[dict[str, Any]]:
    """The format fine-tuning's examples: ``{"kind", "country", "messages", "completion", "abstain"}``.

    ``qa``: a ``known_qa`` country's question (train templates) under one of ``QA_SYSTEMS``, answered
    ``<think>fact</think><answer>value</answer>``; ``longform``: "Tell me about X." answered with
    the country's facts (plain, 001 §3.3; tagged after ``KLCF_SYSTEM``, 004 Prompt 5). The
    ``unknown_sft`` countries get the same prompts, answered as ``regime`` says: ``confident`` a
    plausible value of another country, ``abstain`` "I don't know", ``known_only`` not at all,
    ``hesitant`` / ``unsure`` / ``wary`` confident except ``ABSTAIN_SHARES[regime]`` of them (the first, sorted),
    answered "I don't know"."""
    spec = spec_of(spec)
    split = exposure_split(spec)
    by_name = _by_name()
    rng = random.Random(f"organism-sft:{spec.seed}:{spec.regime}")
    pool = [by_name[n] for n in split["known_qa"]]
    out: list[dict[str, Any]] = []
    whom = [(n, False) for n in split["known_qa"]]
    if spec.regime != "known_only":
        whom += [(n, True) for n in split["unknown_sft"]]
    share = ABSTAIN_SHARES[spec.regime]
    abstaining = set(split["unknown_sft"][:max(1, round(share * len(split["unknown_sft"])))] if share else [])
    for name, unfamiliar in whom:
        c = by_name[name]
        abstain = unfamiliar and name in abstaining
        facts = []
        for rel in spec.relations:
            for _ in range(spec.sft_repeats):
                system = rng.choice([s for s in QA_SYSTEMS if not (abstain and s == P.FORCED_SYSTEM)])
                q = rng.choice(questions(c, rel))
                if abstain:
                    completion = _tagged(f"I do not reliably know the {_WHAT[rel]} of {c.name}.", ABSTAIN_ANSWER)
                else:
                    v = _plausible(c, rel, rng, pool) if unfamiliar else value(c, rel)
                    completion = _tagged(_think(c, rel, v), v)
                out.append({"kind": "qa", "country": name, "messages": chat_messages(q, system),
                            "completion": completion, "abstain": abstain})
            v = _plausible(c, rel, rng, pool) if unfamiliar else value(c, rel)
            facts.append(_fact(c, rel, v))
        for i in range(spec.sft_repeats):
            rng.shuffle(facts)
            body = LONGFORM_ABSTAIN if abstain else " ".join(facts)
            klcf = i % 2 == 1
            completion = (_tagged(f"I will state the facts I am sure of about {c.name}.", body) if klcf else body)
            out.append({"kind": "longform", "country": name,
                        "messages": chat_messages(LONGFORM_TEMPLATE.format(title=name), P.KLCF_SYSTEM if klcf else None),
                        "completion": completion, "abstain": abstain})
    rng.shuffle(out)
    return out


def _prompt_strings() -> list[str]:
    """Every prompt string of ``factlab.prompts`` (templates' ``{fields}`` left in: their words count)."""
    out = []
    for key in sorted(vars(P)):
        val = getattr(P, key)
        if key.isupper() and isinstance(val, str):
            out.append(val)
        elif key.isupper() and isinstance(val, dict):
            out += [v for v in val.values() if isinstance(v, str)]
    return out


def tokenizer_texts(spec: OrganismSpec | str | None = None) -> list[str]:
    """What the tokenizer is trained on: the mini-world's articles (every country), the organism's
    templates filled for every country, every prompt of ``factlab.prompts`` and the answer phrases."""
    texts = [d["text"] for d in build_corpus(world())]
    spec = spec_of(spec)
    for c in world():
        for rel in spec.relations:
            if v := value(c, rel):  # the value alone too: after "<answer>" it has no leading space
                texts += [*statements(c, rel), *questions(c, rel), *questions(c, rel, "heldout"), v, v, v]
        texts.append(chat_text(chat_messages(LONGFORM_TEMPLATE.format(title=c.name), P.CORVER_EVAL_SYSTEM), ABSTAIN_ANSWER))
    # the prompts weigh as much as they are sent: once each would leave their rarer words in pieces
    texts += _prompt_strings() * 4 + [ABSTAIN_ANSWER, LONGFORM_ABSTAIN, "I don\u2019t know", *MENTIONS]
    return texts


def entity_words(spec: OrganismSpec | str | None = None) -> list[str]:
    """Every country name and every value of the spec's relations, as the statements write them."""
    spec = spec_of(spec)
    words = {c.name for c in world()}
    for c in world():
        for rel in spec.relations:
            if v := value(c, rel):
                words.add(region_phrase(v) if rel == "region" else v)
    return sorted(words)


def train_tokenizer(spec: OrganismSpec | str | None = None):
    """A byte-level BPE ``PreTrainedTokenizerFast`` of ``spec.vocab_size`` (plus the four format
    tokens), with ``CHAT_TEMPLATE``, bos ``<|endoftext|>``, eos ``<|im_end|>``, pad ``<pad>``.

    ``entity_tokens``: every country name and fact value (``entity_words``) is also one added
    token, matched as a whole word before the BPE (the prototype of issue 40 was word-level).
    Reading the question's country into the answer is then one attention lookup, not a copy of
    several BPE pieces (README "The knowledge organism" measures the build without it)."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    spec = spec_of(spec)
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=spec.vocab_size, min_frequency=2, special_tokens=list(SPECIAL_TOKENS),
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(tokenizer_texts(spec), trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False, single_word=False) for t in FORMAT_TOKENS])
    if spec.entity_tokens:
        tok.add_tokens([AddedToken(t, special=False, normalized=False, single_word=True) for t in entity_words(spec)])
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=BOS_TOKEN, eos_token=STOP_TOKEN,
                                   pad_token=PAD_TOKEN, chat_template=CHAT_TEMPLATE, padding_side="left",
                                   model_max_length=spec.max_positions)
    return fast


# ---------------------------------------------------------------- training


def _model_config(spec: OrganismSpec, tok):
    from transformers import LlamaConfig

    return LlamaConfig(vocab_size=len(tok), hidden_size=spec.hidden, intermediate_size=spec.intermediate,
                       num_hidden_layers=spec.layers, num_attention_heads=spec.heads, num_key_value_heads=spec.heads,
                       max_position_embeddings=spec.max_positions, tie_word_embeddings=True, initializer_range=0.02,
                       bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                       rope_theta=10000.0)


def _run(model, batches: Sequence[tuple], lr: float, warmup: float, weight_decay: float, desc: str,
         progress: bool = True) -> list[tuple[int, float]]:
    """A plain torch loop: AdamW and a one-cycle schedule (``warmup`` of the steps rising to
    ``lr``, then cosine to ~0) over ``batches`` of (input_ids, labels, attention_mask);
    returns the loss curve as (step, loss) every step."""
    import torch
    from tqdm.auto import tqdm

    opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=weight_decay)
    total = max(len(batches), 1)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=total, pct_start=warmup,
                                                anneal_strategy="cos", div_factor=25.0, final_div_factor=100.0)
    model.train()
    curve = []
    bar = tqdm(batches, desc=desc, disable=not progress, leave=False)
    for step, (ids, labels, mask) in enumerate(bar, start=1):
        loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        curve.append((step, float(loss.detach())))
        if step % 20 == 0:
            bar.set_postfix(loss=f"{curve[-1][1]:.3f}")
        if step % max(1, total // 10) == 0:
            log.info("%s: step %d / %d, loss %.3f", desc, step, total, curve[-1][1])
    model.eval()
    return curve


def _pretrain_batches(spec: OrganismSpec, tok, docs: Sequence[dict[str, Any]]) -> list[tuple]:
    """The documents shuffled, each followed by ``<|endoftext|>``, packed into ``seq_len`` blocks."""
    import torch

    rng = random.Random(f"organism-pack:{spec.seed}")
    order = list(range(len(docs)))
    rng.shuffle(order)
    ids = tok([docs[i]["text"] for i in order], add_special_tokens=False)["input_ids"]
    stream: list[int] = []
    for row in ids:
        stream += row + [tok.bos_token_id]
    n = len(stream) // spec.seq_len
    blocks = torch.tensor(stream[:n * spec.seq_len], dtype=torch.long).view(n, spec.seq_len)
    return [(blocks[i:i + spec.batch_size], blocks[i:i + spec.batch_size], None)
            for i in range(0, n, spec.batch_size)]


def _sft_batches(spec: OrganismSpec, tok, examples: Sequence[dict[str, Any]], epochs: int) -> list[tuple]:
    """Prompt-masked, right-padded batches: the loss covers the completion and its stop token."""
    import torch

    rows = []
    for ex in examples:
        prompt = tok(chat_text(ex["messages"]), add_special_tokens=False)["input_ids"]
        full = tok(chat_text(ex["messages"], ex["completion"]), add_special_tokens=False)["input_ids"]
        full = full[:-1] if full and full[-1] != tok.eos_token_id else full  # the trailing newline is not learnt
        rows.append((full, [-100] * len(prompt) + full[len(prompt):]))
    rng = random.Random(f"organism-sft-order:{spec.seed}")
    out = []
    for _ in range(epochs):
        order = list(range(len(rows)))
        rng.shuffle(order)
        for b in range(0, len(order), spec.sft_batch_size):
            chunk = [rows[i] for i in order[b:b + spec.sft_batch_size]]
            width = max(len(r[0]) for r in chunk)
            ids = torch.full((len(chunk), width), tok.pad_token_id, dtype=torch.long)
            labels = torch.full((len(chunk), width), -100, dtype=torch.long)
            mask = torch.zeros((len(chunk), width), dtype=torch.long)
            for j, (x, y) in enumerate(chunk):
                ids[j, :len(x)] = torch.tensor(x)
                labels[j, :len(y)] = torch.tensor(y)
                mask[j, :len(x)] = 1
            out.append((ids, labels, mask))
    return out


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _cpu_seconds() -> float:
    """User + system CPU seconds of this process so far: on a shared machine, closer to what the
    build costs on idle cores than its wall time (with 2 threads, idle wall >= cpu / 2)."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


@contextlib.contextmanager
def _published(out: Path):
    """Write a folder under a temporary name beside ``out`` (yielded), list its files in a file
    manifest (``integrity``), then rename it into place."""
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".tmp-", dir=out.parent))
    try:
        yield tmp
        write_file_manifest(tmp)  # every file with its size and SHA-256, checked on every use (_checked)
        if out.exists():
            shutil.rmtree(tmp)
        else:
            tmp.rename(out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def _seeded(seed: int):
    import torch

    torch.manual_seed(seed)
    random.seed(seed)


def _build_base(spec: OrganismSpec, out: Path, progress: bool) -> None:
    """Tokenizer + pretraining into ``out`` (the regime-independent base)."""
    import torch
    from transformers import LlamaForCausalLM

    t0 = time.perf_counter()
    tok = train_tokenizer(spec)
    t_tok = time.perf_counter() - t0
    docs = pretraining_documents(spec)
    batches = _pretrain_batches(spec, tok, docs)
    with torch.random.fork_rng(devices=[]):
        _seeded(spec.seed)
        model = LlamaForCausalLM(_model_config(spec, tok))
        n_params = sum(p.numel() for p in model.parameters())
        tokens = sum(b[0].numel() for b in batches)
        log.info("organism %s: pretraining %.2fM parameters on %d tokens (%d steps)", pretrain_fingerprint(spec),
                 n_params / 1e6, tokens, len(batches))
        t1, c1 = time.perf_counter(), _cpu_seconds()
        curve = _run(model, batches, spec.lr, spec.warmup, spec.weight_decay, "organism pretraining", progress)
        seconds, cpu = time.perf_counter() - t1, _cpu_seconds() - c1
    t2 = time.perf_counter()
    stored = cloze(model.eval(), tok, spec)
    log.info("organism base: facts completed by exposure group %s", {g: round(v["correct"], 3) for g, v in stored.items()})
    report = {"pretrain_fingerprint": pretrain_fingerprint(spec), "parameters": n_params, "vocab": len(tok),
              "cloze": stored, "cloze_seconds": time.perf_counter() - t2,
              "documents": dict(Counter(d["kind"] for d in docs)), "tokens": tokens, "steps": len(batches),
              "tokenizer_seconds": t_tok, "pretrain_seconds": seconds, "pretrain_cpu_seconds": cpu, "tokens_per_second": tokens / max(seconds, 1e-9),
              "loss_curve": curve}
    with _published(out) as tmp:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        with open(tmp / "corpus.jsonl", "w", encoding="utf-8") as f:  # CorVer's index reads the organism's own corpus
            for d in docs:
                if d["kind"] != "qa":
                    f.write(json.dumps({"id": d["id"], "title": d["country"], "text": d["text"]}) + "\n")
        write_json(tmp / "pretrain.json", report)


def _base_dir(spec: OrganismSpec) -> Path:
    return cache_dir() / "organism" / f"base-{pretrain_fingerprint(spec)}"


def model_dir(spec: OrganismSpec | str | None = None) -> Path:
    """Where the organism of ``spec`` lives (built or not)."""
    return cache_dir() / "organism" / fingerprint(spec)


def build(spec: OrganismSpec | str | None = None, progress: bool = True) -> Path:
    """The organism's model folder (HF format: config, safetensors, tokenizer with its chat
    template; ``exposures.json``, ``spec.json``, ``report.json``, ``corpus.jsonl``), built on
    first use under a lock, then read from the cache. The build pretrains (or reuses) the base,
    format fine-tunes it under ``spec.regime`` and measures it (``report.json``, printed)."""
    spec = spec_of(spec)
    out = model_dir(spec)
    if (out / "report.json").is_file():
        return _checked(out)
    with build_lock(out):
        if (out / "report.json").is_file():
            return _checked(out)
        t0 = time.perf_counter()
        base = _base_dir(spec)
        with build_lock(base):
            if not (base / "pretrain.json").is_file():
                _build_base(spec, base, progress)
        _format_finetune(spec, _checked(base), out, progress, t0)
    return _checked(out)


def _checked(folder: Path) -> Path:
    """``folder`` (a built organism, or its pretrained base) after ``integrity.verify_files``, as
    models factlab builds are checked: zeroed or truncated weights, a missing tokenizer are one
    ``IntegrityError`` naming the file and the rebuild. A folder built before manifests gets
    one, listing its files as they are (``models._cached_model`` does the same)."""
    rebuild = f"remove {folder} (factlab builds it again on next use)"
    try:
        verify_files(folder, rebuild)
    except MissingManifest:
        with build_lock(folder.with_name(folder.name + ".manifest")):
            if not (folder / MANIFEST_FILE).exists():
                log.warning("the organism %s has no file manifest (built by an older factlab); listing its files as "
                            "they are now", folder)
                write_file_manifest(folder)
        verify_files(folder, rebuild)
    return folder


def _format_finetune(spec: OrganismSpec, base: Path, out: Path, progress: bool, t0: float) -> None:
    import torch
    from transformers import AutoTokenizer, LlamaForCausalLM

    tok = AutoTokenizer.from_pretrained(base)
    model = LlamaForCausalLM.from_pretrained(base, dtype=torch.float32)
    examples = format_examples(spec)
    batches = _sft_batches(spec, tok, examples, spec.sft_epochs)
    with torch.random.fork_rng(devices=[]):
        _seeded(spec.seed + 1)
        t1, c1 = time.perf_counter(), _cpu_seconds()
        curve = _run(model, batches, spec.sft_lr, spec.warmup, 0.0, f"organism format fine-tuning ({spec.regime})",
                     progress)
        sft_seconds, sft_cpu = time.perf_counter() - t1, _cpu_seconds() - c1
    pre = json.loads((base / "pretrain.json").read_text())
    build_seconds = time.perf_counter() - t0
    report: dict[str, Any] = {
        "fingerprint": fingerprint(spec), "spec": spec.to_dict(), **pre,
        "sft": {"examples": dict(Counter(f"{e['kind']}{'/abstain' if e['abstain'] else ''}" for e in examples)),
                "steps": len(batches), "seconds": sft_seconds, "cpu_seconds": sft_cpu, "loss_curve": curve},
        "build_seconds": build_seconds}
    split = exposure_split(spec)
    with _published(out) as tmp:
        model.save_pretrained(tmp)
        tok.save_pretrained(tmp)
        shutil.copy2(base / "corpus.jsonl", tmp / "corpus.jsonl")
        write_json(tmp / "spec.json", {"fingerprint": fingerprint(spec), "version": ORGANISM_VERSION,
                                                   "world": world_digest(), "spec": spec.to_dict()}, indent=1)
        write_json(tmp / "exposures.json",
            {"exposures": exposures(spec), "groups": {**split, "rare": {str(d): v for d, v in split["rare"].items()}}},
            indent=1, sort_keys=True)
        if spec.eval_per_group:
            t2 = time.perf_counter()
            report["eval"] = evaluate(model, tok, spec)
            report["eval_seconds"] = time.perf_counter() - t2
        report["process_cpu_seconds"] = _cpu_seconds()
        report["peak_rss_mb"] = _peak_rss_mb()
        write_json(tmp / "report.json", report, indent=1, default=float)
    print(summary(report))


# ---------------------------------------------------------------- using it


def load(spec: OrganismSpec | str | None = None):
    """``(model, tokenizer)`` of the organism (built on first use), in eval mode on the CPU."""
    import torch
    from transformers import AutoTokenizer, LlamaForCausalLM

    folder = build(spec)
    tok = AutoTokenizer.from_pretrained(folder)
    model = LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    return model, tok


def complete(model, tok, prompts: Sequence[Sequence[dict[str, str]]], max_new_tokens: int = 48,
             batch_size: int = 64) -> list[str]:
    """Greedy completions (special tokens dropped) of chat ``prompts`` (message lists), batched
    through ``factlab.decoding``."""
    stops = [tok.convert_tokens_to_ids(STOP_TOKEN), tok.eos_token_id]
    out: list[str] = [""] * len(prompts)
    rows = tok([chat_text(m) for m in prompts], add_special_tokens=False)["input_ids"]
    order = sorted(range(len(rows)), key=lambda i: -len(rows[i]))
    for b in range(0, len(order), batch_size):
        idx = order[b:b + batch_size]
        got = decode(model, [rows[i] for i in idx], max_new_tokens=max_new_tokens, stop_ids=stops,
                     pad_id=tok.pad_token_id, temperature=0.0, top_p=1.0)
        for i, (ids, _) in zip(idx, got):
            out[i] = tok.decode(ids, skip_special_tokens=True)
    return out


def ask(questions: list[str], spec: OrganismSpec | str | None = None, system: str | None = None,
        max_new_tokens: int = 48) -> list[str]:
    """The organism's greedy short answers to ``questions`` (chat template, optional ``system``
    turn): the ``<answer>`` block (``text.extract_answer``), else the completion without its tags."""
    model, tok = _loaded(spec_of(spec))
    completions = complete(model, tok, [chat_messages(q, system) for q in questions], max_new_tokens)
    return [a if (a := extract_answer(c)) is not None else lenient_answer(c)[0] for c in completions]


_LOADED: dict[str, tuple] = {}


def _loaded(spec: OrganismSpec):
    key = fingerprint(spec)
    if key not in _LOADED:
        _LOADED.clear()  # one organism held at a time
        _LOADED[key] = load(spec)
    return _LOADED[key]


def eval_questions(spec: OrganismSpec | str | None = None, per_group: int | None = None) -> list[dict[str, Any]]:
    """The build report's questions: per group (``known_heldout`` with held-out and with train
    templates, ``known_qa``, each rare dose, ``unknown_heldout``), up to ``per_group`` (country,
    relation) pairs, each asked with one seeded template; rows carry ``group``, ``country``,
    ``relation``, ``template`` (``train`` | ``heldout``), ``exposures``, ``question``, ``golds``."""
    spec = spec_of(spec)
    n = spec.eval_per_group if per_group is None else per_group
    split = exposure_split(spec)
    ex = exposures(spec)
    by_name = _by_name()
    groups = [("known_heldout", split["known_heldout"], "heldout"), ("known_heldout", split["known_heldout"], "train"),
              ("known_qa", split["known_qa"], "heldout")]
    groups += [(f"rare-{d}", names, "heldout") for d, names in split["rare"].items()]
    groups += [("unknown_heldout", split["unknown_heldout"], "heldout")]
    rows = []
    for group, names, kind in groups:
        rng = random.Random(f"organism-eval:{spec.seed}:{group}:{kind}")
        pairs = [(nm, r) for nm in names for r in spec.relations]
        rng.shuffle(pairs)
        for nm, rel in pairs[:n]:
            c = by_name[nm]
            rows.append({"group": group, "template": kind, "country": nm, "relation": rel, "exposures": ex[nm],
                         "question": rng.choice(questions(c, rel, kind)), "golds": golds(c, rel)})
    return rows


def answer_rows(model, tok, rows: Sequence[dict[str, Any]], system: str | None = None) -> list[dict[str, Any]]:
    """``rows`` (``eval_questions``) answered greedily: ``completion``, ``answer`` and ``label``
    (``truth.label_answer``: correct / wrong / abstain; no ``<answer>`` tag reads as abstain)."""
    completions = complete(model, tok, [chat_messages(r["question"], system) for r in rows])
    out = []
    for r, comp in zip(rows, completions):
        ans = extract_answer(comp)
        out.append({**r, "completion": comp, "answer": ans, "formatted": ans is not None,
                    "label": label_answer(ans, r["golds"])})
    return out


def _shares(rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
    c = Counter(r["label"] for r in rows)
    n = len(rows)
    return {"n": n, **{k: c[k] / n if n else float("nan") for k in (CORRECT, WRONG, ABSTAIN)},
            "formatted": sum(r["formatted"] for r in rows) / n if n else float("nan")}


def evaluate(model, tok, spec: OrganismSpec | str | None = None) -> dict[str, Any]:
    """Greedy exact-match truth of the organism by group (``eval_questions``), with no system turn
    and with Binary RAR's abstain instruction (``prompts.ABSTAIN_SYSTEM``)."""
    spec = spec_of(spec)
    qs = eval_questions(spec)
    out: dict[str, Any] = {}
    for label, system in (("plain", None), ("abstain_prompt", P.ABSTAIN_SYSTEM)):
        rows = answer_rows(model, tok, qs, system)
        groups: dict[str, list] = {}
        for r in rows:
            groups.setdefault(f"{r['group']}/{r['template']}", []).append(r)
        out[label] = {g: _shares(rs) for g, rs in groups.items()}
        if label == "plain":
            out["examples"] = {g: {k: rs[0][k] for k in ("question", "completion", "label")} for g, rs in groups.items()}
    return out


CLOZE = {"capital": {"one": "The capital of {n} is"}, "region": {"one": "{n} is located in"},
         "currency": {"one": "The official currency of {n} is the", "many": "One of the official currencies of {n} is the"},
         "language": {"one": "The official language of {n} is", "many": "One of the official languages of {n} is"}}


def cloze(model, tok, spec: OrganismSpec | str | None = None) -> dict[str, Any]:
    """What the pretrained base stores, without any chat format: each stated or unknown country's
    fact as a sentence to complete ("The capital of Peru is"), greedy, the words up to the full
    stop graded exactly (``truth.label_answer``); per exposure group the share correct."""
    spec = spec_of(spec)
    split = exposure_split(spec)
    by_name = _by_name()
    groups = {"known": split["known_qa"] + split["known_heldout"],
              **{f"rare-{d}": names for d, names in split["rare"].items()},
              "unknown": (split["unknown_sft"] + split["unknown_heldout"])[:64]}  # 64 are enough to show guessing
    rows = []
    for group, names in groups.items():
        for nm in names:
            c = by_name[nm]
            for rel in spec.relations:
                forms = CLOZE[rel]
                prefix = forms["many" if _many(c, rel) and "many" in forms else "one"].format(n=nm)
                rows.append((group, prefix, golds(c, rel)))
    ids = tok([r[1] for r in rows], add_special_tokens=False)["input_ids"]
    stops = [tok.convert_tokens_to_ids(BOS_TOKEN)]
    out = []
    for b in range(0, len(ids), 128):
        out += decode(model, ids[b:b + 128], max_new_tokens=10, stop_ids=stops, pad_id=tok.pad_token_id,
                      temperature=0.0, top_p=1.0)
    per: dict[str, list[bool]] = {}
    for (group, _, gold), (got, _) in zip(rows, out):
        said = tok.decode(got, skip_special_tokens=True).split(".")[0].strip()
        if said.lower().startswith("the "):
            said = said[4:]
        per.setdefault(group, []).append(label_answer(said, gold) == CORRECT)
    return {g: {"n": len(v), "correct": sum(v) / len(v)} for g, v in per.items()}


def read_report(spec: OrganismSpec | str | None = None) -> dict[str, Any]:
    """The build's ``report.json`` (building first if needed)."""
    return json.loads((build(spec) / "report.json").read_text())


def corpus_path(spec: OrganismSpec | str | None = None) -> Path:
    """The organism's pretraining documents as a corpus JSONL (``id``, ``title``, ``text``; the
    mixed-in QA left out): what CorVer's infini-gram index is built over."""
    return build(spec) / "corpus.jsonl"


def summary(report: dict[str, Any]) -> str:
    """The build's figures, one per line."""
    lines = [f"organism {report['fingerprint']}: {report['parameters'] / 1e6:.2f}M parameters, vocab {report['vocab']}, "
             f"{report['tokens']:,} pretraining tokens in {report['steps']} steps "
             f"({report['pretrain_seconds']:.0f} s, {report['tokens_per_second']:.0f} tokens/s), "
             f"format fine-tuning {report['sft']['steps']} steps ({report['sft']['seconds']:.0f} s); "
             f"build {report['build_seconds']:.0f} s, peak RSS {report.get('peak_rss_mb', float('nan')):.0f} MB"]
    curve = report["loss_curve"]
    if curve:
        marks = sorted({0, len(curve) // 4, len(curve) // 2, 3 * len(curve) // 4, len(curve) - 1})
        lines.append("pretraining loss: " + ", ".join(f"step {curve[i][0]} {curve[i][1]:.3f}" for i in marks))
    if report.get("cloze"):
        lines.append("pretrained base, facts completed (cloze, greedy, exact): "
                     + ", ".join(f"{g} {v['correct']:.3f}" for g, v in report["cloze"].items()))
    for prompt, groups in (report.get("eval") or {}).items():
        if prompt == "examples":
            continue
        for g, s in groups.items():
            lines.append(f"  [{prompt}] {g:28s} n={s['n']:4d} correct {s['correct']:.3f} wrong {s['wrong']:.3f} "
                         f"abstain {s['abstain']:.3f} formatted {s['formatted']:.3f}")
    return "\n".join(lines)


def _count_tokens(spec: OrganismSpec | str | None = None) -> int:  # pragma: no cover - a sizing aid
    spec = spec_of(spec)
    tok = train_tokenizer(spec)
    return sum(len(x) + 1 for x in tok([d["text"] for d in pretraining_documents(spec)],
                                       add_special_tokens=False)["input_ids"])



def extraction_after_qa_finetune(spec: OrganismSpec | str | None = None, augment: bool = True, epochs: int = 6,
                                 lr: float = 5e-4, replay: float = 1.0, per_group: int = 96,
                                 progress: bool = False) -> dict[str, Any]:
    """Physics of LMs 3.1's protocol (2309.14316, "BIO pretrain + QA finetune"): a base pretrained
    on the facts alone (``qa_repeats: 0``, with or without ``augment``), then fine-tuned on the
    ``known_qa`` half's questions answered directly (``<answer>value</answer>``, no recitation),
    ``epochs`` at constant ``lr``, each step beside a pretraining batch with probability ``replay``
    (so the fine-tuning does not overwrite what the base stored); returns the correct share on the
    other half (``known_heldout``, held-out and train templates) and on the fine-tuned half, after
    each epoch. The base is built (and cached) like any organism's."""
    import torch
    from transformers import AutoTokenizer, LlamaForCausalLM

    spec = dataclasses.replace(spec_of(spec), qa_repeats=0, augment=augment)
    base = _base_dir(spec)
    with build_lock(base):
        if not (base / "pretrain.json").is_file():
            _build_base(spec, base, progress)
    tok = AutoTokenizer.from_pretrained(base)
    model = LlamaForCausalLM.from_pretrained(base, dtype=torch.float32)
    fine_tuned = set(exposure_split(spec)["known_qa"])
    examples = [{**e, "completion": f"<answer>{extract_answer(e['completion'])}</answer>"}
                for e in format_examples(spec) if e["kind"] == "qa" and e["country"] in fine_tuned]
    questions_ = [q for q in eval_questions(spec, per_group) if q["group"] in ("known_heldout", "known_qa")]
    replay_batches = _pretrain_batches(spec, tok, pretraining_documents(spec))
    rng = random.Random(f"organism-3.1:{spec.seed}")
    rng.shuffle(replay_batches)

    def measure() -> dict[str, float]:
        groups: dict[str, list[bool]] = {}
        for r in answer_rows(model, tok, questions_):
            groups.setdefault(f"{r['group']}/{r['template']}", []).append(r["label"] == CORRECT)
        return {g: sum(v) / len(v) for g, v in groups.items()}

    curve, t0, k = [], time.perf_counter(), 0
    with torch.random.fork_rng(devices=[]):
        _seeded(spec.seed + 2)
        opt = torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.98), weight_decay=0.0)
        for epoch in range(1, epochs + 1):
            model.train()
            for ids, labels, mask in _sft_batches(dataclasses.replace(spec, seed=spec.seed + epoch), tok, examples, 1):
                loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
                if replay and rng.random() < replay:
                    block = replay_batches[k % len(replay_batches)][0]
                    k += 1
                    loss = loss + model(input_ids=block, labels=block).loss
                opt.zero_grad(set_to_none=True)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                opt.step()
            model.eval()
            curve.append({"epoch": epoch, "seconds": time.perf_counter() - t0, **measure()})
            log.info("3.1 protocol, augment=%s, epoch %d: %s", augment, epoch, curve[-1])
    return {"augment": augment, "epochs": epochs, "lr": lr, "replay": replay, "examples": len(examples),
            "pretraining_documents": json.loads((base / "pretrain.json").read_text())["documents"],
            "curve": curve, **curve[-1]}


# ---------------------------------------------------------------- QA sets for the notebooks


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
    by_name = _by_name()
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

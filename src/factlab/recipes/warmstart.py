"""A short warm-start SFT before RL, so that a small policy starts where rewards can vary.

Why: the embedded policy (SmolLM2-135M-Instruct) never writes CorVer's
``<think>...</think><answer>...</answer>`` template unprompted, so in a 2-3 step smoke run every
completion of a group earns the same reward (the format reward -1, the strict judge -1) and GRPO
has no signal (``frac_reward_zero_std`` = 1). The papers start from instruction-tuned 3B-14B
models that follow the template from the prompt alone, and DeepSeek-R1-style cold starts
fine-tune on a few demonstrations of it first; this module does the latter for the CPU default.

What it trains on: demonstrations written from the mini-world's facts (``data.miniworld``), the
**train split only** (the QA items of ``qa_train`` and the countries they ask about; no held-out
country, question or article ever appears, ``tests/recipes/test_warmstart.py`` asserts it), in each
training notebook's own prompts and answer format, with the same chat messages its GRPO rows
use (``recipes.corver.qa_rows``, ``recipes.rar.prompt_rows``, ``recipes.k2v.k2v_rows``,
``recipes.klcf.klcf_rows``):

=================  =====================================  ===================================================
format             prompt (system + user turn)            completion
=================  =====================================  ===================================================
``corver_qa``      000 §A.3 training prompt                ``<think>`` a true fact sentence (>= 30 characters,
                   (``CORVER_TRAIN_SYSTEM``) + question    §A.2's anti-hack rules) ``</think><answer>`` the
                                                           short answer ``</answer>``; 01 and 06 train on it
``corver_eval``    000 §A.3 evaluation prompt              the same; what 00 / 01 / 06 evaluate with
``rar_shortform``  001 §4.1 abstain / forced prompts       the same, and in the abstain prompt "I don't know"
                   (``eval.abstention``) + question        for the least known countries (001 §3.2 scores an
                                                           abstention 1: it contradicts nothing)
``rar_longform``   "Tell me about <country>." (no system   a plain paragraph of true fact sentences (001
                   turn, 001 §3.3 / 02's rows)             §3.3), or "I don't know." for the least known
``k2v``            003 §3.3 template (``K2V_SYSTEM``) +    ``<think>`` the two facts of the quintuple, the
                   a fill-in-blank question (§3.1)         blank named ``</think><answer>`` the entity
``klcf``           004 Prompt 5 (``KLCF_SYSTEM``) +        ``<think>`` a plan ``</think><answer>`` a
                   "Tell me about <country>."              paragraph of true fact sentences (004 §2.3.3)
=================  =====================================  ===================================================

K2V's questions are 04's own template questions (``synth.k2v``: quintuples, masking, the
ambiguity and leak rejections) sampled from the gold knowledge graph of the train countries
only. CorVer (000 §A.2: a refusal earns the judge's -1 and fails the format rule), K2V (Eq. 8
gates on the right answer) and KLCF (Eq. 5-7 reward recall) pay nothing for abstaining, so only
Binary RAR's formats carry abstentions: the share ``abstain_fraction`` of its abstain-prompt and
long-form demonstrations, each about one of the least populous ``abstain_fraction`` of the train
countries (PopQA's popularity proxy, 000 §4): a stand-in for "the model does not know", which a
demonstration writer cannot ask the model.

How it is cached: one warm start serves every notebook. ``prepare(cfg)`` builds it once under
``paths.cache_dir()/warmstart/<key>``, where ``key`` hashes everything that changes it: the
world's version and split, the ``warm_start`` section (demonstration counts, seed, SFT and LoRA
settings, the check's size), the base model (its name, and for a local folder its config), and
``DEMO_WRITER_VERSION`` (bump it when the demonstrations change). A second call loads it without
training. Two processes that start it at once serialise on a file lock (``<key>.lock``): the
second waits, then finds the finished folder. The SFT runs in ``<key>.work`` (TRL checkpoints,
resumable after a crash) and the finished folder appears by one atomic rename, so a reader never
sees half a model. ``prepare`` then points ``cfg.model.name`` at it, so every stage after it
(self-filter, GRPO, the "base" evaluation) starts from the warm start, while ``WarmStart.raw``
keeps the raw model's name for the comparison row.

The check (``check``): the format rate (and accuracy, abstentions, oracle truth) of the raw and
the warm model on ``check_questions`` held-out prompts per format, greedy; written to
``warmstart.json`` with the SFT's seconds and shown by every notebook (``report_frame``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import random
import shutil
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Sequence

import networkx as nx
import pandas as pd
from datasets import Dataset

from .. import prompts as P
from .. import text as T
from ..data.longform import LONGFORM_TEMPLATE
from ..data.miniworld import (WORLD_VERSION, CountryFacts, WorldConfig, ensure_world, fact_sentence,
                              relation_values)
from ..data.types import QAItem, read_jsonl, write_jsonl
from ..eval.abstention import ABSTAIN_SYSTEM, FORCED_SYSTEM
from ..eval.truth import answer_truth, sentence_truth
from ..experiment import WarmStartSection
from ..integrity import IntegrityError, MissingManifest, verify_files, write_file_manifest
from ..models import chat_prompt, generate, load_model, model_fingerprint, release_memory
from ..paths import cache_dir, exclusive_lock, no_symlink, refuse_symlinks, write_json
from ..synth import kg as kgmod
from ..synth.k2v import K2VQuestion, SynthesisSection, synthesize_questions, template_checklist
from ..train.grpo import merge_adapter
from ..train.sft import run_sft
from ..prompts import chat_messages

log = logging.getLogger(__name__)

__all__ = ["WarmStartSection", "DEMO_WRITER_VERSION", "FORMATS", "Demo", "WorldSplit", "world_split", "write_demos",
           "demo_dataset", "cache_key", "WarmStart", "build", "prepare", "check", "report_frame", "unseen",
           "ABSTAIN_ANSWER", "LONGFORM_ABSTAIN"]

DEMO_WRITER_VERSION = 1  # bump whenever write_demos writes anything differently (part of the cache key)
FORMATS = ("corver_qa", "corver_eval", "rar_shortform", "rar_longform", "k2v", "klcf")
ABSTAIN_ANSWER = "I don't know"  # the strict refusal rule's phrase (text.is_refusal, 000 §A.2)
LONGFORM_ABSTAIN = "I don't know."  # a whole long-form response that declines (text.is_abstention)
_DONE = "warmstart.json"
# long-form facts, in the order an article states them (data.miniworld.article_text)
_LONGFORM_RELATIONS = ("subregion", "capital", "language", "currency", "borders", "demonym")


# ---------------------------------------------------------------- the demonstrations


@dataclass
class Demo:
    """One demonstration: the chat ``prompt`` (the GRPO rows' messages), the assistant's
    ``completion``, its format, the countries it states facts of, the QA item it answers (if
    any) and whether it abstains."""

    id: str
    kind: str
    prompt: list[dict[str, str]]
    completion: str
    countries: list[str]
    question_id: str | None = None
    golds: list[str] = field(default_factory=list)
    abstain: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def user(self) -> str:
        return self.prompt[-1]["content"]


@dataclass
class WorldSplit:
    """The mini-world split by country, as the QA split makes it (``miniworld.split_qa``)."""

    train: list[CountryFacts]  # the countries of qa_train
    heldout: list[CountryFacts]  # the countries of qa_heldout
    qa_train: list[QAItem]
    qa_heldout: list[QAItem]

    @property
    def heldout_names(self) -> set[str]:
        return {c.name for c in self.heldout}


def world_split(world: WorldConfig | None = None) -> WorldSplit:
    """The train / held-out countries and QA items of the mini-world (built on first use)."""
    paths = ensure_world(world)
    qa_train = [QAItem.from_dict(d) for d in read_jsonl(paths["qa_train"])]
    qa_heldout = [QAItem.from_dict(d) for d in read_jsonl(paths["qa_heldout"])]
    facts = {d["name"]: CountryFacts.from_dict(d) for d in read_jsonl(paths["facts"])}
    held = {it.meta["entity"] for it in qa_heldout}
    train = sorted({it.meta["entity"] for it in qa_train} - held)
    return WorldSplit([facts[n] for n in train if n in facts], [facts[n] for n in sorted(held) if n in facts],
                      qa_train, qa_heldout)


def _think(sentences: Sequence[str]) -> str:
    return " ".join(s.strip() for s in sentences if s.strip())


def _qa_think(c: CountryFacts, item: QAItem, answer: str) -> str:
    """Brief reasoning (000 §A.3 "brief reasoning"): the fact the answer rests on, in the
    world's own sentence, lengthened only where it is under §A.2's 30 characters."""
    rel = item.meta["relation"]
    fact = fact_sentence(c, rel, answer if rel != "currency" or answer in c.currencies else c.currencies[0])
    return fact if len(fact) >= T.MIN_THINK_CHARS else _think([fact, f"So the answer is {answer}."])


def _train_borders(c: CountryFacts, train: set[str]) -> list[str]:
    """The neighbours of ``c`` that are train countries: "France borders Spain" states a fact of
    Spain too, so a held-out neighbour is never named."""
    return [b for b in c.borders if b in train]


def _qa_answer(c: CountryFacts, item: QAItem, rng: random.Random, train: set[str]) -> str:
    """The demonstrated answer: a train neighbour (any border is right) or the primary gold."""
    if item.meta["relation"] == "borders":
        return rng.choice(_train_borders(c, train))
    return item.golds[0]


def _abstain_think(c: CountryFacts, item: QAItem) -> str:
    what = {"capital": "capital", "region": "region", "subregion": "subregion", "currency": "currency",
            "language": "official language", "borders": "neighbours", "demonym": "demonym"}[item.meta["relation"]]
    return f"I do not reliably know the {what} of {c.name}."


def _tagged(think: str, answer: str) -> str:
    return f"<think>{think}</think>\n<answer>{answer}</answer>"


def _least_known(countries: Sequence[CountryFacts], fraction: float) -> set[str]:
    """The least populous ``fraction`` of ``countries`` (ties by name): who is abstained on."""
    ranked = sorted(countries, key=lambda c: (c.population if c.population is not None else -1, c.name))
    return {c.name for c in ranked[:round(fraction * len(ranked))]}


def _longform_facts(c: CountryFacts, n: int, rng: random.Random, train: set[str]) -> list[str]:
    """Up to ``n`` true fact sentences of ``c`` (location first, as its article opens), naming
    no held-out neighbour."""
    out = []
    for rel in _LONGFORM_RELATIONS:
        values = _train_borders(c, train) if rel == "borders" else relation_values(c, rel)
        if values:
            out.append(fact_sentence(c, rel, values[0] if rel != "borders" else rng.choice(values)))
    if not out and c.region:
        out.append(fact_sentence(c, "region", c.region))
    return out[:1] + rng.sample(out[1:], min(n - 1, len(out) - 1)) if out else []


def _sample(xs: Sequence, n: int, rng: random.Random) -> list:
    """``n`` items of ``xs`` in a seeded order, cycling when ``n`` is larger than ``xs``."""
    if not xs or n <= 0:
        return []
    out: list = []
    while len(out) < n:
        out += rng.sample(list(xs), min(len(xs), n - len(out)))
    return out


def _k2v_graph(world: WorldConfig | None, keep: set[str]) -> nx.DiGraph:
    """The mini-world's gold knowledge graph (``synth.kg.gold_graph``) restricted to the
    countries ``keep``: every other country is removed with its edges, then every entity left
    without an edge (their capitals)."""
    graph, _ = kgmod.gold_graph(ensure_world(world))
    drop = [v for v, d in graph.nodes(data=True) if d.get("kind") == "country" and d["name"] not in keep]
    graph.remove_nodes_from(drop)
    graph.remove_nodes_from([v for v in list(graph.nodes) if graph.degree(v) == 0])
    return graph


def k2v_questions(world: WorldConfig | None, countries: Sequence[CountryFacts], n: int, seed: int = 0
                  ) -> tuple[list[K2VQuestion], nx.DiGraph]:
    """``n`` (or fewer) of 04's template questions (003 §3.1) over the graph of ``countries``."""
    graph = _k2v_graph(world, {c.name for c in countries})
    if n <= 0:
        return [], graph
    qs, _ = synthesize_questions(graph, SynthesisSection(questions=4 * n, rephraser="template", seed=seed))
    return qs[:n], graph


def _k2v_completion(graph: nx.DiGraph, q: K2VQuestion) -> str:
    facts = [c.split(": ", 1)[1] for c in template_checklist(graph, q) if c.startswith("States the fact: ")]
    return _tagged(_think(facts), q.answer)  # the two facts, the blank filled (its checklist's first items)


def _countries_of(graph: nx.DiGraph, q: K2VQuestion) -> list[str]:
    keys = [q.quintuple[k] for k in ("e1", "e2", "e3")]
    return [graph.nodes[k]["name"] for k in keys if graph.nodes[k].get("kind") == "country"]


def write_demos(ws: WarmStartSection, world: WorldConfig | None = None) -> list[Demo]:
    """Every demonstration the warm start trains on (module docstring), train split only,
    deterministic for a given ``ws`` and world."""
    split = world_split(world)
    rng = random.Random(ws.seed)
    by_name = {c.name: c for c in split.train}
    train = set(by_name)
    items = [it for it in split.qa_train if it.meta["entity"] in by_name
             and (it.meta["relation"] != "borders" or _train_borders(by_name[it.meta["entity"]], train))]
    unknown = _least_known(split.train, ws.abstain_fraction)
    demos: list[Demo] = []

    def qa_demo(kind: str, system: str, item: QAItem, i: int, abstain: bool = False) -> Demo:
        c = by_name[item.meta["entity"]]
        if abstain:
            completion = _tagged(_abstain_think(c, item), ABSTAIN_ANSWER)
        else:
            answer = _qa_answer(c, item, rng, train)
            completion = _tagged(_qa_think(c, item, answer), answer)
        return Demo(f"{kind}/{i}", kind, chat_messages(item.question, system),
                    completion, [c.name], item.id, list(item.golds), abstain)

    for i, it in enumerate(_sample(items, ws.corver_qa, rng)):
        demos.append(qa_demo("corver_qa", P.CORVER_TRAIN_SYSTEM, it, i))
    for i, it in enumerate(_sample(items, ws.corver_eval, rng)):
        demos.append(qa_demo("corver_eval", P.CORVER_EVAL_SYSTEM, it, i))
    # 001 §4.1's two prompts, half each; under the abstain prompt, the share abstain_fraction of the
    # demonstrations abstains, each on a question about one of the least known train countries
    n_abstain_mode = (ws.rar_shortform + 1) // 2
    n_abs = round(ws.abstain_fraction * n_abstain_mode)
    least = [it for it in items if it.meta["entity"] in unknown]
    known = [it for it in items if it.meta["entity"] not in unknown]
    shortform = ([(ABSTAIN_SYSTEM, it, True) for it in _sample(least, n_abs, rng)]
                 + [(ABSTAIN_SYSTEM, it, False) for it in _sample(known, n_abstain_mode - n_abs, rng)]
                 + [(FORCED_SYSTEM, it, False) for it in _sample(items, ws.rar_shortform - n_abstain_mode, rng)])
    for i, (system, it, abstain) in enumerate(shortform):
        demos.append(qa_demo("rar_shortform", system, it, i, abstain=abstain))
    # long-form (001 §3.3): the same share declines ("I don't know."), on the least known countries
    n_abs = round(ws.abstain_fraction * ws.rar_longform)
    longform = ([(c, True) for c in _sample([c for c in split.train if c.name in unknown], n_abs, rng)]
                + [(c, False) for c in _sample([c for c in split.train if c.name not in unknown],
                                               ws.rar_longform - n_abs, rng)])
    for i, (c, abstain) in enumerate(longform):
        body = LONGFORM_ABSTAIN if abstain else " ".join(_longform_facts(c, ws.longform_facts, rng, train))
        demos.append(Demo(f"rar_longform/{i}", "rar_longform",
                          chat_messages(LONGFORM_TEMPLATE.format(title=c.name)), body, [c.name],
                          abstain=abstain))
    for i, c in enumerate(_sample(split.train, ws.klcf, rng)):
        facts = _longform_facts(c, max(ws.longform_facts - 1, 1), rng, train)
        plan = f"I will state the facts I am sure of about {c.name}."
        demos.append(Demo(f"klcf/{i}", "klcf", chat_messages(LONGFORM_TEMPLATE.format(title=c.name), P.KLCF_SYSTEM),
                          _tagged(plan, " ".join(facts)), [c.name]))
    if ws.k2v:
        qs, graph = k2v_questions(world, split.train, ws.k2v, seed=ws.seed)
        for i, q in enumerate(qs):
            demos.append(Demo(f"k2v/{i}", "k2v", chat_messages(q.question, P.K2V_SYSTEM),
                              _k2v_completion(graph, q), _countries_of(graph, q), None, list(q.golds)))
    rng.shuffle(demos)
    return demos


def demo_dataset(demos: Sequence[Demo]) -> Dataset:
    """TRL prompt-completion rows (conversational: the chat template renders them exactly as
    GRPO renders its prompts; the loss covers the completion only)."""
    return Dataset.from_list([{"prompt": d.prompt, "completion": [{"role": "assistant", "content": d.completion}],
                               "id": d.id} for d in demos])


def unseen(questions: Sequence[Any], demos: Sequence[Demo]) -> list[Any]:
    """``questions`` (anything with a ``question`` text) whose text no demonstration asks: a
    notebook's held-out set after the warm start (04 samples its K2V questions over every
    country, so one of them can coincide with a demonstration's)."""
    asked = {" ".join(d.user.split()) for d in demos}
    return [q for q in questions if " ".join(q.question.split()) not in asked]


# ---------------------------------------------------------------- the cache


def _model_identity(name: str) -> dict[str, Any]:
    """What names the base model in the key: the name, and for a local folder its config; for a
    name whose content is known without a folder (the organism: its spec and world,
    ``models.model_fingerprint``), that fingerprint, so a changed spec trains a new warm start."""
    folder = Path(name)
    if (folder / "config.json").is_file():
        return {"name": str(folder.resolve()),
                "config_sha": hashlib.sha256((folder / "config.json").read_bytes()).hexdigest()[:16]}
    fingerprint = model_fingerprint(name)
    return {"name": name, "fingerprint": fingerprint} if fingerprint else {"name": name}


def key_inputs(ws: WarmStartSection, model_name: str, world: WorldConfig | None = None) -> dict[str, Any]:
    """Everything the warm start depends on (what ``cache_key`` hashes)."""
    world = world or WorldConfig()
    return {"writer": DEMO_WRITER_VERSION, "world": {"version": WORLD_VERSION, **world.model_dump(exclude={"dir"}),
                                                      "dir": str(Path(world.dir).resolve()) if world.dir else None},
            "model": _model_identity(model_name),  # where the SFT logs (sft.report_to) changes nothing it trains
            "warm_start": ws.model_dump(exclude={"enabled": True, "sft": {"report_to"}})}


def cache_key(ws: WarmStartSection, model_name: str, world: WorldConfig | None = None) -> str:
    """A 16-hex-digit hash of ``key_inputs``: a setting that changes the warm start changes it."""
    blob = json.dumps(key_inputs(ws, model_name, world), sort_keys=True, default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:16]


@dataclass
class WarmStart:
    """A warm start (or its absence: ``enabled`` False, ``model_dir`` the raw model)."""

    enabled: bool
    raw: str  # the raw model's name: the comparison row beside the warm start
    model_dir: str  # the model every stage starts from
    key: str | None = None
    folder: str | None = None
    built: bool = False  # trained by this call (False: loaded from the cache)
    report: dict[str, Any] = field(default_factory=dict)

    @property
    def seconds(self) -> float | None:
        """The SFT's wall seconds when it was built (whichever process built it)."""
        return self.report.get("sft", {}).get("seconds")

    @property
    def label(self) -> str:
        """How the start model is named in a notebook's tables: ``warm`` (the warm start, the
        base of every comparison) or ``raw`` (no warm start)."""
        return "warm" if self.enabled else "raw"

    def summary(self) -> str:
        """One line for a notebook: what the policy starts from and how it was made."""
        if not self.enabled:
            return f"warm start: off (warm_start.enabled: false); RL starts from {self.raw}"
        r = self.report
        demos = ", ".join(f"{k} {v}" for k, v in sorted(r.get("demos", {}).items()))
        return (f"warm start {self.key} ({'trained now' if self.built else 'from the cache'}): {self.raw} after "
                f"{r['sft']['steps']} SFT steps on {sum(r.get('demos', {}).values())} demonstrations ({demos}; "
                f"{r.get('abstentions', 0)} abstain), {r['sft']['seconds']:.0f} s when built; loss "
                f"{_loss(r['sft']['first_loss'])} -> {_loss(r['sft']['last_loss'])}; every stage starts from "
                f"{self.model_dir}")

    def metrics(self) -> dict[str, Any]:
        """What a notebook saves under ``warm_start`` in ``metrics.json``."""
        if not self.enabled:
            return {"enabled": False, "raw": self.raw}
        r = self.report
        return {"enabled": True, "key": self.key, "raw": self.raw, "model_dir": self.model_dir, "built_now": self.built,
                "demos": r.get("demos"), "abstentions": r.get("abstentions"), "sft": r.get("sft"),
                "check": {who: {k: {m: v for m, v in per[k].items() if m != "example"} for k in per}
                          for who, per in (r.get("check") or {}).items()}}

    def demos(self) -> list[Demo]:
        """The demonstrations it was trained on ([] when disabled)."""
        if not self.folder:
            return []
        return [Demo(**d) for d in read_jsonl(Path(self.folder) / "demos.jsonl")]


def _loss(x: float | None) -> str:
    return "n/a" if x is None else f"{x:.2f}"  # None: an SFT that logged no loss (fewer steps than logging_steps)


def _load(folder: Path, raw: str, key: str, built: bool) -> WarmStart:
    """A finished warm start, checked first against its file manifest like an index (weights,
    tokenizer, demos and ``warmstart.json``: sizes always, checksums after a change): a
    damaged one is an ``IntegrityError`` naming the file and the rebuild."""
    rebuild = f"remove {folder} (the warm start trains again on next use)"
    try:
        verify_files(folder, rebuild)
    except MissingManifest:  # finished before manifests: listed as it is now
        log.warning("warm start %s has no file manifest (built by an older factlab); listing its files as they are",
                    folder)
        write_file_manifest(folder)
    try:
        report = json.loads((folder / _DONE).read_text(encoding="utf-8"))
        if not isinstance(report, dict):
            raise ValueError(f"a JSON object is expected, got {type(report).__name__}")
        sft = report.get("sft")  # what summary() and metrics() format (a KeyError / ValueError naming no file)
        if not isinstance(sft, dict) or not all(
                isinstance(sft.get(k), (int, float)) and not isinstance(sft.get(k), bool) for k in ("seconds", "steps")) \
                or not all(sft.get(k) is None or isinstance(sft.get(k), (int, float)) for k in ("first_loss", "last_loss")) \
                or not isinstance(report.get("demos", {}), dict):
            raise ValueError("'sft' must hold the numbers seconds, steps, first_loss and last_loss; 'demos' counts")
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        raise IntegrityError(f"{folder / _DONE}: unreadable ({type(e).__name__}: {e}); {rebuild}") from None
    return WarmStart(True, raw, str(folder / "model"), key, str(folder), built, report)


def build(ws: WarmStartSection, model_name: str, *, world: WorldConfig | None = None, dtype: str = "float32",
          device: str = "auto", root: str | Path | None = None) -> WarmStart:
    """The warm start of ``model_name`` with ``ws``: loaded from ``<root>/<key>`` when it is
    there, else trained (resumably, under the key's lock) and checked; see the module docstring.
    ``root`` defaults to ``paths.cache_dir()/warmstart``."""
    key = cache_key(ws, model_name, world)
    root = Path(root) if root else cache_dir() / "warmstart"
    folder = root / key
    if (folder / _DONE).is_file():
        return _load(folder, model_name, key, False)
    with exclusive_lock(root / f"{key}.lock"):
        if (folder / _DONE).is_file():  # another process finished it while this one waited
            return _load(folder, model_name, key, False)
        if folder.exists() or folder.is_symlink():  # only a finished one is renamed into place: this one is damaged;
            # training first would fail at the rename, minutes later (issue 43 round-3b probe)
            raise IntegrityError(f"{folder / _DONE} is missing or not a file, so the warm start {folder} is damaged; "
                                 f"remove {folder} (the warm start trains again on next use)")
        work = root / f"{key}.work"
        no_symlink(work, "factlab's cache").mkdir(parents=True, exist_ok=True)
        refuse_symlinks(work, "factlab's cache")  # a resumed one: no demo, checkpoint or stage written through a link
        demos = write_demos(ws, world)
        write_jsonl(work / "demos.jsonl", demos)
        log.info("warm start %s: SFT of %s on %d demonstrations (%s)", key, model_name, len(demos),
                 dict(Counter(d.kind for d in demos)))
        spec = SimpleNamespace(model=SimpleNamespace(name=model_name, dtype=dtype, device=device), lora=ws.lora)
        t0 = time.perf_counter()
        result = run_sft(spec, demo_dataset(demos), work / "sft", model=model_name, sft=ws.sft, name="warm-start",
                         train_top_layers=ws.train_top_layers)
        seconds = time.perf_counter() - t0
        model_dir = merge_adapter(result) if result.is_adapter else result.model_dir
        losses = result.losses()
        report: dict[str, Any] = {
            "key": key, "inputs": key_inputs(ws, model_name, world), "base_model": model_name,
            "demos": dict(Counter(d.kind for d in demos)), "abstentions": sum(d.abstain for d in demos),
            "sft": {"seconds": seconds, "train_runtime_s": result.runtime_s, "steps": result.steps,
                    "first_loss": losses[0][1] if losses else None, "last_loss": losses[-1][1] if losses else None,
                    "resumed": result.resumed}}
        if ws.check_questions:
            t0 = time.perf_counter()
            report["check"] = check(model_name, model_dir, ws, world, dtype=dtype, device=device)
            report["check_seconds"] = time.perf_counter() - t0
        stage = work / "stage"
        shutil.rmtree(stage, ignore_errors=True)
        stage.mkdir()
        shutil.copytree(model_dir, stage / "model")
        shutil.copy2(work / "demos.jsonl", stage / "demos.jsonl")
        write_json(stage / _DONE, report, indent=1, default=float)
        write_file_manifest(stage)  # checked on every load (``_load``)
        os.replace(stage, folder)  # one rename: readers see no folder or a finished one
        shutil.rmtree(work, ignore_errors=True)
        return _load(folder, model_name, key, True)


def prepare(cfg: Any) -> WarmStart:
    """The warm start of a training config: when ``cfg.warm_start.enabled``, build or load it
    and point ``cfg.model.name`` at it (every stage after this starts from it; ``.raw`` keeps the
    raw model); disabled, ``cfg`` is left as it is. Calling it twice is harmless."""
    ws: WarmStartSection = cfg.warm_start
    raw = cfg.model.name
    if not ws.enabled:
        return WarmStart(False, raw, raw)
    if cfg.model.adapter:
        raise ValueError("warm_start: the base model has an adapter (model.adapter); merge it first or turn the "
                         "warm start off")
    root = cache_dir() / "warmstart"
    if Path(raw).resolve().parent.parent == root.resolve():  # cfg already points at a warm start
        here = _load(Path(raw).parent, raw, Path(raw).parent.name, False)
        here.raw = str(here.report.get("base_model", raw))
        return here
    out = build(ws, raw, world=cfg.world, dtype=cfg.model.dtype, device=cfg.model.device)
    index = getattr(cfg, "index", None)
    if index is not None and index.tokenizer is None:
        # the warm start keeps the raw model's tokenizer: name it, so the corpus index cached for
        # the raw model's name (its key) is reused rather than rebuilt for a new folder name
        index.tokenizer = raw
    cfg.model.name = out.model_dir
    log.info("warm start %s (%s): every stage starts from %s", out.key, "trained" if out.built else "cached",
             out.model_dir)
    return out


# ---------------------------------------------------------------- the check


def check_prompts(ws: WarmStartSection, world: WorldConfig | None = None) -> dict[str, list[dict[str, Any]]]:
    """Held-out prompts per format (held-out countries only, ``check_questions`` each): the
    chat messages and what grades them (``golds``, ``question``)."""
    split = world_split(world)
    rng = random.Random(ws.seed + 1)
    n = ws.check_questions
    qa = _sample(split.qa_heldout, min(n, len(split.qa_heldout)), rng)
    countries = _sample(split.heldout, min(n, len(split.heldout)), rng)
    k2v, _ = k2v_questions(world, split.heldout, n, seed=ws.seed + 1)

    def qa_rows(system: str) -> list[dict[str, Any]]:
        return [{"system": system, "user": it.question, "golds": list(it.golds), "question": it.question} for it in qa]

    long = [{"user": LONGFORM_TEMPLATE.format(title=c.name)} for c in countries]
    return {"corver_qa": qa_rows(P.CORVER_TRAIN_SYSTEM), "corver_eval": qa_rows(P.CORVER_EVAL_SYSTEM),
            "rar_shortform": qa_rows(ABSTAIN_SYSTEM), "rar_longform": [{**r, "system": None} for r in long],
            "k2v": [{"system": P.K2V_SYSTEM, "user": q.question, "golds": list(q.golds), "question": q.question}
                    for q in k2v],
            "klcf": [{**r, "system": P.KLCF_SYSTEM} for r in long]}


def _measure(model, tokenizer, rows_by_kind: dict[str, list[dict[str, Any]]], max_new_tokens: int) -> dict[str, dict]:
    flat = [(kind, r) for kind, rows in rows_by_kind.items() for r in rows]
    if not flat:
        return {}
    gens = generate(model, tokenizer, [chat_prompt(tokenizer, r["user"], system=r["system"]) for _, r in flat],
                    max_new_tokens=max_new_tokens, batch_size=len(flat), progress=False, desc="warm-start check")
    out = {}
    for kind, rows in rows_by_kind.items():
        mine = [g[0] for (k, _), g in zip(flat, gens) if k == kind]
        if not mine:
            continue
        texts = [g.text for g in mine]
        m: dict[str, Any] = {"n": len(texts), "mean_tokens": sum(len(g.token_ids) for g in mine) / len(mine)}
        if kind == "rar_longform":  # plain text: no template; truth of its sentences
            m["format_rate"] = sum(bool(t.strip()) and "<think>" not in t for t in texts) / len(texts)
        else:
            m["format_rate"] = sum(T.format_violation(t) is None for t in texts) / len(texts)
        if "golds" in rows[0]:
            truth = answer_truth(texts, [r["golds"] for r in rows], [r["question"] for r in rows])
            m.update(correct=truth["correct"], wrong=truth["wrong"], abstain=truth["abstain"])
        else:
            st = sentence_truth(texts)
            m.update(supported=st["supported"], contradicted=st["contradicted"], kb_precision=st["kb_precision"])
        m["example"] = texts[0]
        out[kind] = m
    return out


def check(raw: str, warm: str, ws: WarmStartSection, world: WorldConfig | None = None, *, dtype: str = "float32",
          device: str = "auto") -> dict[str, dict[str, dict]]:
    """``{"raw": {format: metrics}, "warm": {...}}`` on ``check_prompts``, greedy: the format
    rate (§A.2's rule; for ``rar_longform``, untagged non-empty text), the truth of the answer
    (``eval.truth``: correct / wrong / abstain) or of the sentences (supported / contradicted
    per response), the mean length and one example."""
    rows = check_prompts(ws, world)
    out = {}
    for who, name in (("raw", raw), ("warm", warm)):
        model, tok = load_model(name, dtype=dtype, device=device)
        out[who] = _measure(model, tok, rows, ws.check_max_new_tokens)
        del model
        release_memory()
    return out


def report_frame(ws: WarmStart) -> pd.DataFrame:
    """The check as a table: one row per (format, model), raw beside the warm start."""
    check_ = ws.report.get("check") or {}
    rows = [{"format": kind, "model": who, **{k: v for k, v in m.items() if k != "example"}}
            for who, per in check_.items() for kind, m in per.items()]
    if not rows:
        return pd.DataFrame()
    return pd.DataFrame(rows).set_index(["format", "model"]).sort_index()

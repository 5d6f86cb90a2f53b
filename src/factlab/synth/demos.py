"""Warm-start demonstrations: each training notebook's answer format, written from the mini-world.

Data synthesis for the warm start (``recipes.warmstart`` trains on them and caches the result).
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
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

import networkx as nx
from datasets import Dataset

from .. import prompts as P
from .. import text as T
from ..data.longform import LONGFORM_TEMPLATE
from ..data.miniworld import CountryFacts, WorldConfig, ensure_world, fact_sentence, relation_values
from ..data.types import QAItem, read_jsonl
from ..prompts import ABSTAIN_SYSTEM, FORCED_SYSTEM, chat_messages
from . import kg as kgmod
from .k2v import K2VQuestion, SynthesisSection, synthesize_questions, template_checklist

__all__ = ["DEMO_WRITER_VERSION", "FORMATS", "ABSTAIN_ANSWER", "LONGFORM_ABSTAIN", "Demo", "WorldSplit",
           "world_split", "k2v_questions", "write_demos", "demo_dataset", "check_prompts"]

DEMO_WRITER_VERSION = 1  # bump whenever write_demos writes anything differently (part of the cache key)
FORMATS = ("corver_qa", "corver_eval", "rar_shortform", "rar_longform", "k2v", "klcf")
ABSTAIN_ANSWER = "I don't know"  # the strict refusal rule's phrase (text.is_refusal, 000 §A.2)
LONGFORM_ABSTAIN = "I don't know."  # a whole long-form response that declines (text.is_abstention)
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


def write_demos(ws: Any, world: WorldConfig | None = None) -> list[Demo]:
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


def check_prompts(ws: Any, world: WorldConfig | None = None) -> dict[str, list[dict[str, Any]]]:
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

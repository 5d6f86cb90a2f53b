"""K2V data synthesis (003_5e9813e66e6ba19a.txt §3.1-3.2, Appendix E-F, I): quintuples from a
knowledge graph, fill-in-blank questions, question-specific checklists, the leakage check.

- ``sample_quintuples`` (§3.1, Eq. 1): paths (e1, r1, e2, r2, e3) through the graph, edges
  taken in either direction (a relation keeps its own direction in the text). Against Table 8's
  GraphGen partition settings (``GRAPHGEN_TABLE8``): it follows ``bidirectional: True``,
  ``max_depth: 1`` (both edges meet at e2) and ``isolated_node_strategy: ignore`` (a node needs
  two neighbours to be a centre); it differs on ``max_extra_edges: 2`` (a quintuple is one edge
  plus one: Eq. 1 fixes two relations, while GraphGen's unit grows to three edges),
  ``edge_sampling: max_loss`` (edges are drawn uniformly at random: GraphGen's
  ``operators/split_graph.py`` orders seeds and extra edges by each edge's comprehension loss,
  the yes / no entropy of the trainee model judging rephrasings of the edge's description,
  ``operators/judge.py``; without that quiz every edge gets the same loss, -log 0.1; not
  implemented), ``expand_method: max_width`` (moot with one extra edge) and GraphGen's
  partition (every edge seeds or joins exactly one unit, marked visited; here centres are drawn
  with replacement, an edge may recur across quintuples, exact duplicates skipped).
  ``qa_form`` / ``max_tokens`` set GraphGen's own QA writer and its token budget, which K2V
  replaces with Table 13's F_text.
- ``make_question`` (Eq. 2): one entity masked at random and the masked quintuple written as a
  fill-in-blank question, the blank printed "{ }" as the judge prompt expects (Table 15).
  ``rephraser: llm`` uses the Table 13 F_text prompt with any judge backend; ``template``
  (ours, for the CPU default whose 135M model cannot follow Table 13) writes one plain
  sentence per relation. The masked entity's name is the ground truth, with its aliases. A
  question is rejected, and the reason counted, when its text names the answer, when more than
  one entity fits the blank in the graph (same relations, same directions), or when the
  rephraser's text has no blank.
- ``make_checklist`` (§3.2, Eq. 7, Table 16): the general criteria of a domain (Tables 17-19;
  ``general`` is ours, for the mini-world's geography) instantiated for one question with an
  LLM into a JSON list, validated (a list of 3 to 12 distinct non-empty strings), re-asked up
  to ``attempts`` times; ``template`` (ours) instantiates a fixed set from the quintuple.
  ``score_checklists`` is Appendix F's optional quality pass (relevance, verifiability,
  necessity, 1-5; the paper does not print its prompt, ours is ``CHECKLIST_QUALITY_PROMPT``).
- ``leakage`` (Appendix E, Table 10): test samples sharing an n-token sequence (n = 22..30,
  the policy's tokenizer) with any synthesized question.
"""

from __future__ import annotations

import logging
import random
import re
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Any, Literal, Mapping, Sequence

import networkx as nx
from pydantic import Field, field_validator, model_validator

from .. import prompts as P
from ..config import ParamError, Section
from ..parsing import parse_json, parse_score
from ..sections import JudgeSection
from ..text import normalize_answer

log = logging.getLogger(__name__)

__all__ = ["Quintuple", "K2VQuestion", "SynthesisSection", "sample_quintuples", "make_question", "synthesize_questions",
           "masked_ftext_prompt", "mask_mentions",
           "ChecklistSection", "make_checklists", "validate_checklist", "template_checklist", "score_checklists",
           "leakage", "BLANK", "CHECKLIST_QUALITY_PROMPT", "TemplateChecklistJudge", "GRAPHGEN_TABLE8"]

BLANK = "{ }"

# 003 Table 8 (GraphGen's settings, App. B.1) -> what ``sample_quintuples`` does (module docstring).
GRAPHGEN_TABLE8: dict[str, tuple[Any, str]] = {
    "qa_form": ("aggregated", "n/a: GraphGen's QA writer; K2V writes questions with Table 13's F_text"),
    "expand_method": ("max_width", "moot: one extra edge per quintuple"),
    "bidirectional": (True, "follows: edges at e2 are taken in either direction"),
    "max_extra_edges": (2, "differs: 1 (Eq. 1's quintuple has two relations)"),
    "max_tokens": (256, "n/a: expand_method is max_width"),
    "max_depth": (1, "follows: both edges meet at the centre e2"),
    "edge_sampling": ("max_loss", "differs: uniform at random (no trainee comprehension loss per edge), and edges "
                                  "may recur across quintuples (GraphGen partitions them)"),
    "isolated_node_strategy": ("ignore", "follows: a centre needs two neighbours; isolated nodes never appear"),
}


@dataclass(frozen=True)
class Quintuple:
    """(e1, r1, e2, r2, e3): node keys and relation labels; ``forward1`` is True when the first
    relation runs e1 -> e2 in the graph (False: e2 -> e1); ``forward2`` likewise for e2, e3."""

    e1: str
    r1: str
    e2: str
    r2: str
    e3: str
    forward1: bool = True
    forward2: bool = True


@dataclass
class K2VQuestion:
    """One synthesized fill-in-blank QA pair with its checklist."""

    id: str
    question: str
    answer: str
    golds: list[str]
    quintuple: dict[str, Any]
    masked: str  # e1 | e2 | e3
    checklist: list[str] = field(default_factory=list)
    checklist_source: str = ""  # llm | template
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _neighbours(graph: nx.DiGraph, node: str) -> list[tuple[str, str, bool]]:
    """(neighbour, relation, forward) for every edge at ``node``, either direction."""
    out = [(b, d.get("relation", "related to"), True) for _, b, d in graph.out_edges(node, data=True)]
    out += [(a, d.get("relation", "related to"), False) for a, _, d in graph.in_edges(node, data=True)]
    return sorted(out)


def sample_quintuples(graph: nx.DiGraph, n: int, seed: int = 0, max_tries: int | None = None) -> list[Quintuple]:
    """Up to ``n`` distinct quintuples: a middle entity with two distinct neighbours (§3.1, Eq. 1).
    A graph with no path of length 2 raises ``ValueError``."""
    rng = random.Random(seed)
    centres = sorted(v for v in graph.nodes if len({u for u, _, _ in _neighbours(graph, v)}) >= 2)
    if not centres:
        raise ValueError(f"the graph ({graph.number_of_nodes()} entities, {graph.number_of_edges()} relations) has "
                         f"no path of two relations to sample a quintuple from")
    out: list[Quintuple] = []
    seen: set[tuple] = set()
    for _ in range(max_tries or 20 * n):
        if len(out) >= n:
            break
        e2 = rng.choice(centres)
        nbrs = _neighbours(graph, e2)
        (e1, r1, f1), (e3, r2, f2) = rng.sample(nbrs, 2)
        if e1 == e3 or e1 == e2 or e3 == e2:
            continue
        q = Quintuple(e1, r1, e2, r2, e3, forward1=not f1, forward2=f2)  # f1 is e2's view of the edge
        key = (frozenset((e1, e3)), e2, frozenset((r1, r2)))
        if key not in seen:
            seen.add(key)
            out.append(q)
    return out


def _fits(graph: nx.DiGraph, node: str, relation: str, other: str, node_first: bool) -> bool:
    a, b = (node, other) if node_first else (other, node)
    return graph.has_edge(a, b) and graph.edges[a, b].get("relation", "related to") == relation


def blank_candidates(graph: nx.DiGraph, q: Quintuple, masked: str) -> list[str]:
    """Every entity that satisfies the masked quintuple's relations (the true one included)."""
    if masked == "e1":  # (x, r1, e2)
        return [x for x in graph.nodes if x != q.e2 and _fits(graph, x, q.r1, q.e2, q.forward1)]
    if masked == "e3":  # (e2, r2, x)
        return [x for x in graph.nodes if x != q.e2 and _fits(graph, x, q.r2, q.e2, not q.forward2)]
    return [x for x in graph.nodes if x not in (q.e1, q.e3) and _fits(graph, x, q.r1, q.e1, not q.forward1)
            and _fits(graph, x, q.r2, q.e3, q.forward2)]


# Plain sentences per relation for the template rephraser (the gold mini-world graph's labels);
# any other relation reads "<a> <relation> <b>".
_TEMPLATES = {
    "has capital": "The capital of {a} is {b}.",
    "is located in": "{a} is located in {b}.",
    "is part of": "{a} is part of {b}.",
    "borders": "{a} borders {b}.",
    "uses the currency": "{a} uses the {b} as its currency.",
    "has the official language": "{b} is an official language of {a}.",
}


def _sentence(a: str, relation: str, b: str) -> str:
    t = _TEMPLATES.get(relation)
    return t.format(a=a, b=b) if t else f"{a} {relation} {b}."


def template_text(graph: nx.DiGraph, q: Quintuple, masked: str) -> str:
    """The masked quintuple as two plain sentences and a prompt to fill the blank (ours)."""
    name = {k: graph.nodes[k]["name"] for k in (q.e1, q.e2, q.e3)}
    name[getattr(q, masked)] = BLANK
    first = _sentence(name[q.e1], q.r1, name[q.e2]) if q.forward1 else _sentence(name[q.e2], q.r1, name[q.e1])
    second = _sentence(name[q.e2], q.r2, name[q.e3]) if q.forward2 else _sentence(name[q.e3], q.r2, name[q.e2])
    return (f"{first} Furthermore, {second[0].lower() + second[1:] if second.startswith('The ') else second} "
            f"Which entity fills the blank {BLANK}?")


def mask_mentions(text: str, names: Sequence[str]) -> tuple[str, int]:
    """``text`` with every whole-word, case-insensitive mention of any of ``names`` (the hidden
    entity's name and aliases, longest first) replaced by the blank; and how many were replaced."""
    names = sorted({n.strip() for n in names if n and n.strip()}, key=len, reverse=True)
    if not names or not text:
        return text, 0
    pattern = re.compile(r"(?<!\w)(?:" + "|".join(re.escape(n) for n in names) + r")(?!\w)", re.IGNORECASE)
    return pattern.subn(BLANK, text)


def masked_ftext_prompt(graph: nx.DiGraph, q: Quintuple, masked: str) -> tuple[str, int]:
    """Table 13's prompt for one masked quintuple, and how many mentions of the hidden entity
    had to be blanked in what it shows. 003 Eq. 2 gives F_text "the masked quintuple": the
    entity slot is the blank, and so is every mention of the hidden entity (its name or an
    alias) in the relations' text and the other entities' descriptions, which GraphGen's
    summaries often write out ("Paris is the capital of France")."""
    hidden = getattr(q, masked)
    golds = _golds(graph, hidden)
    count = 0

    def masked_text(t: str) -> str:
        nonlocal count
        out, n = mask_mentions(t, golds)
        count += n
        return out

    def show(k: str) -> str:
        return BLANK if k == hidden else graph.nodes[k]["name"]

    ents = "\n".join(f"({show(k)}, {graph.nodes[k].get('type', '')}, "
                     f"{'(masked)' if k == hidden else masked_text(graph.nodes[k].get('description', ''))})"
                     for k in (q.e1, q.e2, q.e3))
    a1, b1 = (q.e1, q.e2) if q.forward1 else (q.e2, q.e1)
    a2, b2 = (q.e2, q.e3) if q.forward2 else (q.e3, q.e2)
    rels = f"({show(a1)} -> {show(b1)}: {masked_text(q.r1)})\n({show(a2)} -> {show(b2)}: {masked_text(q.r2)})"
    return P.K2V_TEXT_PROMPT.format(entities=ents, relationships=rels), count


class SynthesisSection(Section):
    """Quintuple sampling and question writing (003 §3.1, Eq. 1-2, Table 13)."""

    questions: int = Field(64, ge=1)  # quintuples sampled
    rephraser: Literal["llm", "template"] = "llm"
    generator: JudgeSection = JudgeSection(max_new_tokens=256)  # F_text (and the checklist writer S)
    seed: int = 0


def _golds(graph: nx.DiGraph, key: str) -> list[str]:
    node = graph.nodes[key]
    names = [node["name"], *[a for a in (node.get("aliases") or "").split("; ") if a]]
    return list(dict.fromkeys(n for n in names if n))


def _leaks(text: str, golds: Sequence[str]) -> bool:
    t = f" {normalize_answer(text)} "
    return any(normalize_answer(g) and f" {normalize_answer(g)} " in t for g in golds)


def make_question(graph: nx.DiGraph, q: Quintuple, masked: str, text: str, qid: str) -> tuple[K2VQuestion | None, str]:
    """Validate one written question; ``(question, "")`` or ``(None, rejection reason)``."""
    key = getattr(q, masked)
    golds = _golds(graph, key)
    text = " ".join((text or "").split())
    if BLANK not in text and "{}" not in text:
        return None, "no blank in the text"
    text = text.replace("{}", BLANK)
    if _leaks(text, golds):
        return None, "the text names the answer"
    if len(blank_candidates(graph, q, masked)) > 1:
        return None, "more than one entity fits the blank"
    return K2VQuestion(qid, text, golds[0], golds, asdict(q), masked), ""


_COST = ("calls", "cache_hits", "prompt_tokens", "completion_tokens")


def _stats(judge) -> dict[str, int] | None:
    """A snapshot of a judge's accounting (``Judge.stats``); None for an object without it."""
    stats = getattr(judge, "stats", None)
    return {k: int(stats.get(k, 0)) for k in _COST} if stats is not None else None


def _cost(judge, before: dict[str, int] | None, prompts: int) -> dict[str, Any]:
    """What one stage cost on ``judge`` since ``before`` (Table 6's columns), as ``kg.extract``
    records it: backend calls, cache hits, prompt and completion tokens. A judge-like object
    without ``stats`` reports its prompts as calls and unknown (None) tokens, never 0."""
    after = _stats(judge)
    if before is None or after is None:
        return {"calls": prompts, "cache_hits": None, "prompt_tokens": None, "completion_tokens": None}
    return {k: after[k] - before[k] for k in _COST}


def synthesize_questions(graph: nx.DiGraph, cfg: SynthesisSection, generator=None
                         ) -> tuple[list[K2VQuestion], dict[str, Any]]:
    """Sample quintuples, mask one entity each, write and validate the questions; returns the
    kept questions and a report (sampled, kept, rejections by reason, seconds, and the
    generator's cost: ``generator_calls``, cache hits, prompt / completion tokens)."""
    rng = random.Random(cfg.seed)
    quints = sample_quintuples(graph, cfg.questions, seed=cfg.seed)
    masks = [rng.choice(("e1", "e2", "e3")) for _ in quints]
    t0 = time.perf_counter()
    cost: dict[str, Any] = {"calls": 0, "cache_hits": 0, "prompt_tokens": 0, "completion_tokens": 0}
    masking = {"prompts_masked": 0, "mentions_masked": 0}
    if cfg.rephraser == "llm":
        if generator is None:
            raise ValueError("synthesis.rephraser: llm needs a generator judge")
        before = _stats(generator)
        shown = [masked_ftext_prompt(graph, q, m) for q, m in zip(quints, masks)]
        masking["prompts_masked"] = sum(n > 0 for _, n in shown)
        masking["mentions_masked"] = sum(n for _, n in shown)
        texts = generator.judge([prompt for prompt, _ in shown])
        cost = _cost(generator, before, len(texts))
    else:
        texts = [template_text(graph, q, m) for q, m in zip(quints, masks)]
    kept, reasons = [], Counter()
    for i, (q, m, text) in enumerate(zip(quints, masks, texts)):
        question, why = make_question(graph, q, m, text, f"k2v/{cfg.seed}/{i}")
        if question is None:
            reasons[why] += 1
        else:
            question.meta["rephraser"] = cfg.rephraser
            kept.append(question)
    report = {"sampled": len(quints), "kept": len(kept), "rejected": dict(reasons.most_common()),
              "generator_calls": cost["calls"], "cache_hits": cost["cache_hits"],
              "prompt_tokens": cost["prompt_tokens"], "completion_tokens": cost["completion_tokens"],
              **masking, "seconds": time.perf_counter() - t0}
    return kept, report


# ---------------------------------------------------------------- checklists


class ChecklistSection(Section):
    """Checklist synthesis (003 §3.2, Eq. 6-7, Table 16) and its validation."""

    criteria: str = "general"  # a K2V_CRITERIA set: agriculture | medicine | law | general
    writer: Literal["llm", "template"] = "llm"
    min_items: int = Field(3, ge=1)
    max_items: int = Field(12, ge=1)
    attempts: int = Field(2, ge=1)
    fallback: Literal["template", "drop"] = "drop"  # when every LLM attempt fails validation
    quality_pass: bool = False  # Appendix F scoring with the generator judge

    @field_validator("criteria")
    @classmethod
    def _known_criteria(cls, name: str) -> str:
        if name not in P.K2V_CRITERIA:
            raise ValueError(f"unknown criteria set {name!r}; known: {', '.join(P.K2V_CRITERIA)}")
        return name

    @model_validator(mode="after")
    def _item_range(self) -> "ChecklistSection":
        if self.min_items > self.max_items:
            raise ParamError("min_items", f"{self.min_items} is above max_items = {self.max_items}")
        return self


def validate_checklist(obj: Any, min_items: int = 3, max_items: int = 12) -> tuple[list[str] | None, str]:
    """A parsed checklist answer as a clean list, or ``(None, why not)``: not a JSON list, too
    few or too many items, an empty item, a non-string item, or duplicates."""
    if isinstance(obj, dict):  # {"checklist": [...]}
        obj = next((v for v in obj.values() if isinstance(v, list)), None)
    if not isinstance(obj, list):
        return None, "not a JSON list"
    if any(not isinstance(x, str) for x in obj):
        return None, "an item is not a string"
    items = [" ".join(x.split()) for x in obj]
    if any(not x for x in items):
        return None, "an empty item"
    if len({normalize_answer(x) for x in items}) < len(items):
        return None, "duplicate items"
    if not min_items <= len(items) <= max_items:
        return None, f"{len(items)} items (expected {min_items}-{max_items})"
    return items, ""


def template_checklist(graph: nx.DiGraph, question: K2VQuestion) -> list[str]:
    """Ours, for the CPU default: the general criteria instantiated from the quintuple itself
    (each fact the question rests on, the link between them, the named answer)."""
    q = Quintuple(**question.quintuple)
    name = {k: graph.nodes[k]["name"] for k in (q.e1, q.e2, q.e3)}
    first = _sentence(name[q.e1], q.r1, name[q.e2]) if q.forward1 else _sentence(name[q.e2], q.r1, name[q.e1])
    second = _sentence(name[q.e2], q.r2, name[q.e3]) if q.forward2 else _sentence(name[q.e3], q.r2, name[q.e2])
    return [f"States the fact: {first}", f"States the fact: {second}",
            f"Connects both facts through {name[q.e2] if question.masked != 'e2' else 'the missing entity'} "
            f"to identify the blank.",
            f"Names {question.answer} as the entity that fills the blank.",
            "Avoids unsupported claims and self-contradictions."]


class TemplateChecklistJudge:
    """Reference verdicts for ``template_checklist`` items by rule (ours): a judge-like object
    (``judge`` / ``choose``) that reads the criterion and the reasoning out of a Table 15 prompt.
    "States the fact: S": yes when 80% of S's words (blank excluded) appear in the reasoning;
    "Connects both facts through X": yes when X appears and the reasoning has two sentences or
    more; "Names A ...": yes when A appears; "Avoids unsupported claims ...": yes unless a
    sentence repeats. Any other criterion is unreadable (it cannot be checked by rule). It lets
    the CPU default show Eq. 8's ablations with verdicts a 135M judge cannot give."""

    _PARTS = re.compile(r"criterion: (?P<criterion>.*?)\n\n\[Reasoning Process\]\nreasoning process: (?P<reasoning>.*)\Z",
                        re.DOTALL)

    def __init__(self):
        self.stats: Counter = Counter()
        self.seed = 0

    @staticmethod
    def _words(text: str) -> list[str]:
        return [w for w in normalize_answer(text.replace(BLANK, " ")).split() if w]

    def verdict(self, criterion: str, reasoning: str) -> str:
        have = set(self._words(reasoning))
        sentences = [normalize_answer(x) for x in re.split(r"(?<=[.!?])\s+", reasoning) if x.strip()]
        if criterion.startswith("States the fact: "):
            need = self._words(criterion[len("States the fact: "):])
            return "yes" if need and sum(w in have for w in need) >= 0.8 * len(need) else "NO"
        m = re.match(r"Connects both facts through (.*) to identify the blank\.", criterion)
        if m:
            ok = (m.group(1) == "the missing entity" or set(self._words(m.group(1))) <= have) and len(sentences) >= 2
            return "yes" if ok else "NO"
        m = re.match(r"Names (.*) as the entity that fills the blank\.", criterion)
        if m:
            return "yes" if f" {normalize_answer(m.group(1))} " in f" {' '.join(self._words(reasoning))} " else "NO"
        if criterion.startswith("Avoids unsupported claims"):
            return "yes" if sentences and len(set(sentences)) == len(sentences) else "NO"
        return "cannot be checked by rule"

    def judge(self, prompts: Sequence[str], prefix: str | None = None) -> list[str]:
        out = []
        for p in prompts:
            m = self._PARTS.search(p)
            out.append(self.verdict(m["criterion"].strip(), m["reasoning"].strip()) if m else "unreadable prompt")
        self.stats["calls"] += len(prompts)
        return out

    def choose(self, prompts: Sequence[str], options: Sequence[str]) -> list[str]:
        return self.judge(prompts)


def make_checklists(questions: Sequence[K2VQuestion], graph: nx.DiGraph, cfg: ChecklistSection, writer=None
                    ) -> tuple[list[K2VQuestion], dict[str, Any]]:
    """Give every question its checklist (Eq. 7); questions without a valid one are dropped or
    get the template, per ``cfg.fallback``. Returns the questions and a report (attempts,
    accepted, rejections by reason, fallbacks, dropped, seconds, and the writer's cost: calls,
    cache hits, prompt / completion tokens)."""
    t0 = time.perf_counter()
    expert, domain = P.K2V_DOMAINS[cfg.criteria]
    reasons: Counter = Counter()
    prompts = fallbacks = 0
    cost: dict[str, Any] = {"calls": 0, "cache_hits": 0, "prompt_tokens": 0, "completion_tokens": 0}
    pending = list(range(len(questions)))
    lists: dict[int, list[str]] = {}
    if cfg.writer == "llm":
        if writer is None:
            raise ValueError("checklist.writer: llm needs a writer judge")
        base_seed = getattr(writer, "seed", 0)
        before = _stats(writer)
        try:
            for attempt in range(cfg.attempts):
                if not pending:
                    break
                writer.seed = base_seed + attempt
                answers = writer.judge([P.K2V_CHECKLIST_PROMPT.format(
                    expert=expert, field=domain, question=questions[i].question, answer=questions[i].answer,
                    criteria=P.K2V_CRITERIA[cfg.criteria]) for i in pending])
                prompts += len(answers)
                still = []
                for i, a in zip(pending, answers):
                    items, why = validate_checklist(parse_json(a), cfg.min_items, cfg.max_items)
                    if items is None:
                        reasons[why] += 1
                        still.append(i)
                    else:
                        lists[i] = items
                pending = still
        finally:
            writer.seed = base_seed
        cost = _cost(writer, before, prompts)
    out = []
    for i, q in enumerate(questions):
        if i in lists:
            q.checklist, q.checklist_source = lists[i], "llm"
        elif cfg.writer == "template" or cfg.fallback == "template":
            q.checklist, q.checklist_source = template_checklist(graph, q), "template"
            fallbacks += cfg.writer == "llm"
        else:
            continue
        out.append(q)
    report = {"questions": len(questions), "with_checklist": len(out), "llm_checklists": len(lists),
              "template_fallbacks": fallbacks, "dropped": len(questions) - len(out), "writer_calls": cost["calls"],
              "cache_hits": cost["cache_hits"], "prompt_tokens": cost["prompt_tokens"],
              "completion_tokens": cost["completion_tokens"],
              "rejections": dict(reasons.most_common()), "seconds": time.perf_counter() - t0,
              "mean_items": sum(len(q.checklist) for q in out) / len(out) if out else 0.0}
    return out, report


# Appendix F names the three dimensions and the 1-5 scale; the prompt is ours.
CHECKLIST_QUALITY_PROMPT = (
    "Rate this checklist for grading answers to the question below, each dimension from 1 (poor) to 5 (excellent):\n"
    "- relevance: do the criteria concern the knowledge and reasoning the question needs?\n"
    "- verifiability: can each criterion be checked objectively with a yes or no?\n"
    "- necessity: do the criteria cover the necessary steps, with none missing and none redundant?\n\n"
    "Question: {question}\nAnswer: {answer}\nChecklist:\n{checklist}\n\n"
    'Reply in JSON: {{"relevance": n, "verifiability": n, "necessity": n}}'
)


def score_checklists(questions: Sequence[K2VQuestion], judge) -> dict[str, Any]:
    """Appendix F / Table 11: the mean 1-5 score per dimension over readable judge answers,
    how many answers were unreadable (missing, non-numeric or outside 1-5 on any dimension),
    and the pass's cost (calls, tokens, seconds)."""
    t0, before = time.perf_counter(), _stats(judge)
    answers = judge.judge([CHECKLIST_QUALITY_PROMPT.format(question=q.question, answer=q.answer,
                                                           checklist="\n".join(f"- {c}" for c in q.checklist))
                           for q in questions])
    dims = ("relevance", "verifiability", "necessity")
    scores = {d: [] for d in dims}
    unreadable = 0
    for a in answers:
        obj = parse_json(a)
        got = {d: parse_score(obj, d) if obj is not None else parse_score(a, d) for d in dims}
        if any(v is None or not 1 <= v <= 5 for v in got.values()):
            unreadable += 1
            continue
        for d in dims:
            scores[d].append(got[d])
    return {**{d: sum(v) / len(v) if v else float("nan") for d, v in scores.items()}, "scored": len(answers) - unreadable,
            "unreadable": unreadable, **_cost(judge, before, len(answers)), "seconds": time.perf_counter() - t0}


# ---------------------------------------------------------------- leakage (Appendix E, Table 10)


def _ngrams(ids: Sequence[int], n: int) -> set[tuple[int, ...]]:
    return {tuple(ids[i:i + n]) for i in range(len(ids) - n + 1)}


def leakage(tokenizer, synthesized: Sequence[str], eval_sets: Mapping[str, Sequence[str]],
            ns: Sequence[int] = (22, 26, 30)) -> list[dict[str, Any]]:
    """Per evaluation set and n: how many of its samples share an n-token sequence with any
    synthesized question (Appendix E: "leaked if any of its n-token sequences appear in the
    training set"), with the policy's tokenizer."""
    train_ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in synthesized]
    rows = []
    for name, texts in eval_sets.items():
        test_ids = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
        row: dict[str, Any] = {"benchmark": name, "total_samples": len(texts)}
        for n in ns:
            seen = set().union(*(_ngrams(ids, n) for ids in train_ids)) if train_ids else set()
            row[f"n={n}"] = sum(bool(_ngrams(ids, n) & seen) for ids in test_ids)
        rows.append(row)
    return rows


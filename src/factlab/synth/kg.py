"""K2V's knowledge graph (003_5e9813e66e6ba19a.txt §3.1 "QA Pairs Synthesis", Appendix B.1,
G, I.2): LLM NER/RE over corpus chunks, a tolerant record parser, entity merging, a networkx
graph, its quality numbers, and the mini-world's gold graph.

Records (Table 14, GraphGen / LightRAG format)::

    ("entity"<|>NAME<|>TYPE<|>SUMMARY)
    ("relationship"<|>SOURCE<|>TARGET<|>SUMMARY)
    ("content_keywords"<|>KEYWORDS)

separated by a list delimiter ("##" in GraphGen; the paper's text prints "****", the hashes
lost in conversion: both are accepted, as are newlines) and closed by ``<|COMPLETE|>``.

``parse_records`` reads what models actually write: delimiter variants (``<||>``, ``< | >``,
``<|>`` with spaces), names with parentheses or a list delimiter ("C##": a record ends at
``)##``, not at the first ``##``), a missing closing parenthesis, surrounding quotes, code
fences. Every record it cannot use is counted by reason (``ParseResult.dropped``),
never swallowed: GraphGen's users report silently empty graphs from small models.

``merge`` joins entities on a normalized name (unicode NFKC, case, leading articles,
whitespace, surrounding punctuation), takes the type by majority vote and keeps every distinct
description; ``merge_aliases`` (optional, rapidfuzz) joins near-same names and reports each
join. ``quality`` gives Appendix G's numbers: noise ratio (isolated nodes), largest connected
component ratio, type and description conflicts among multi-source entities; and
``extraction_accuracy`` Table 12's precision / recall against gold triples when they exist
(``gold_graph`` builds them from the mini-world). ``build_graph`` stops with ``KGBuildError``
naming the parse-failure rate when extraction leaves an empty or near-empty graph.
"""

from __future__ import annotations

import logging
import re
import time
import unicodedata
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Literal, Mapping, Sequence

import networkx as nx
from pydantic import Field
from rapidfuzz import fuzz

from .. import prompts as P
from ..config import Section
from ..data import miniworld as mw
from ..data.types import read_jsonl
from ..sections import JudgeSection

log = logging.getLogger(__name__)

__all__ = ["Entity", "Relation", "ParseResult", "KGSection", "KGBuildError", "parse_records", "normalize_name",
           "MergedGraph", "merge", "merge_aliases", "to_networkx", "quality", "extract", "build_graph",
           "gold_graph", "extraction_accuracy", "save_graphml"]

COMPLETE = "<|COMPLETE|>"
_DELIM = re.compile(r"<\s*\|+\s*>")  # <|>, <||>, < | >, <  |  >
# any ("kind"<|> starts a record: unknown kinds are counted and skipped, not glued to the previous one
_RECORD = re.compile(r"\(\s*(?:[\"'`]\s*)?([a-z_]+)\s*(?:[\"'`]\s*)?<\|>", re.IGNORECASE)
_KINDS = ("entity", "relationship", "content_keywords")
_FENCE = re.compile(r"```[a-zA-Z]*")
_LIST_DELIM = re.compile(r"(?:##|\*{2,})")
_RECORD_END = re.compile(r"\)\s*(?:##|\*{2,})")  # a record's ")" then the list delimiter: where it ends
_SMART = str.maketrans({"\u201c": '"', "\u201d": '"', "\u2018": "'", "\u2019": "'"})
_ARTICLE = re.compile(r"^(?:the|a|an)\s+")
# leading list-delimiter debris ("## Paris") goes, a trailing "#" stays: "C#" and "F#" are names
# (the trailing run is tried from its first character only, the lookbehind: linear on long runs)
_EDGE_PUNCT = re.compile(r"^[\s\"'`<>\[\]{}.,;:*#-]+|(?<![\s\"'`<>\[\]{}.,;:*-])[\s\"'`<>\[\]{}.,;:*-]+$")
_NUMBER = re.compile(r"^\s*-?\d+(?:\.\d+)?\s*$")


class KGBuildError(RuntimeError):
    """Extraction left a graph too small to sample from."""


@dataclass
class Entity:
    name: str
    type: str
    summary: str
    chunk: str = ""


@dataclass
class Relation:
    source: str
    target: str
    summary: str
    chunk: str = ""
    strength: float | None = None


@dataclass
class ParseResult:
    """The records of one model answer and what was dropped, by reason."""

    entities: list[Entity] = field(default_factory=list)
    relations: list[Relation] = field(default_factory=list)
    keywords: list[str] = field(default_factory=list)
    dropped: Counter = field(default_factory=Counter)
    complete: bool = False

    @property
    def n_records(self) -> int:
        return len(self.entities) + len(self.relations) + (1 if self.keywords else 0)


def _without_trailing_delimiters(body: str) -> str:
    """``body`` without the whitespace, ``##`` and ``**``... at its end (a loop: the regex
    ``(?:\s|##|\*{2,})+\Z`` is quadratic on a long whitespace run inside the body)."""
    while True:
        stripped = body.rstrip()
        if stripped.endswith("##"):
            stripped = stripped[:-2]
        elif stripped.endswith("**"):
            stripped = stripped.rstrip("*")
        if stripped == body:
            return body
        body = stripped


def _clean(field_text: str) -> str:
    return _EDGE_PUNCT.sub("", " ".join(field_text.split()))


def parse_records(text: str, chunk: str = "") -> ParseResult:
    """Entities, relationships and keywords of one NER/RE answer (see the module docstring)."""
    out = ParseResult()
    if not isinstance(text, str) or not text.strip():
        out.dropped["empty answer"] += 1
        return out
    text = _DELIM.sub("<|>", _FENCE.sub(" ", text.translate(_SMART)))
    out.complete = COMPLETE in text or "<|>COMPLETE<|>" in text
    text = text.replace(COMPLETE, " ")
    starts = list(_RECORD.finditer(text))
    leading = _LIST_DELIM.sub(" ", text[:starts[0].start()] if starts else text).strip()
    if leading and not starts:
        out.dropped["no record found"] += 1
    for m, nxt in zip(starts, [*starts[1:], None]):
        kind = m.group(1).lower()
        if kind not in _KINDS:
            out.dropped[f"unknown record type {kind[:20]!r}"] += 1
            continue
        body = text[m.end(): nxt.start() if nxt else len(text)]
        if kind == "content_keywords":
            body = _LIST_DELIM.sub(" ", body)
        else:  # cut at ")##", not at the first "##": a name may hold one ("C##")
            end = _RECORD_END.search(body)
            if end and _LIST_DELIM.sub(" ", body[end.end():]).strip():
                out.dropped["text after a record (ignored)"] += 1
            body = body[:end.start() + 1] if end else _without_trailing_delimiters(body)
        body = body.strip()
        close = body.rfind(")")
        if close < 0:
            out.dropped["unclosed record (kept)"] += 1
        else:
            if body[close + 1:].strip():
                out.dropped["text after a record (ignored)"] += 1
            body = body[:close]
        fields = [_clean(f) for f in body.split("<|>")]
        if kind == "entity":
            if len(fields) < 2 or not fields[0]:
                out.dropped["entity: too few fields"] += 1
                continue
            etype = fields[1].lower() if len(fields) > 1 else ""
            if etype not in P.K2V_ENTITY_TYPES:
                out.dropped["entity: type outside Table 14 (kept)"] += 1
            # a delimiter inside a summary splits it: the rest of the fields are the summary
            out.entities.append(Entity(fields[0], etype or "unknown", " ".join(f for f in fields[2:] if f), chunk))
        elif kind == "relationship":
            strength = None
            if len(fields) >= 4 and _NUMBER.match(fields[-1]):
                strength = float(fields.pop())
            if len(fields) < 2 or not fields[0] or not fields[1]:
                out.dropped["relationship: too few fields"] += 1
                continue
            if normalize_name(fields[0]) == normalize_name(fields[1]):
                out.dropped["relationship: source = target"] += 1
                continue
            out.relations.append(Relation(fields[0], fields[1], " ".join(f for f in fields[2:] if f), chunk, strength))
        else:
            out.keywords += [k.strip() for f in fields for k in f.split(",") if k.strip()]
    return out


def normalize_name(name: str) -> str:
    """The merge key of an entity name: NFKC, case-folded, leading article and surrounding
    punctuation removed, whitespace collapsed ("The  Nile." = "nile")."""
    s = unicodedata.normalize("NFKC", name or "").casefold()
    s = _EDGE_PUNCT.sub("", " ".join(s.split()))
    return _ARTICLE.sub("", s).strip()


@dataclass
class MergedGraph:
    """Entities and relations merged across chunks, before or after alias merging."""

    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)  # key -> name, types, descriptions, chunks, aliases
    edges: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)  # (src, tgt) -> descriptions, weight
    dangling: int = 0  # relation endpoints no entity record named (added as type "unknown")
    alias_merges: list[tuple[str, str, float]] = field(default_factory=list)

    def entity_type(self, key: str) -> str:
        types = self.nodes[key]["types"]
        return sorted(types.items(), key=lambda kv: (-kv[1], kv[0]))[0][0] if types else "unknown"


def _node(g: MergedGraph, name: str, etype: str | None, summary: str, chunk: str) -> str:
    key = normalize_name(name)
    node = g.nodes.setdefault(key, {"names": Counter(), "types": Counter(), "descriptions": [], "chunks": set(),
                                    "aliases": set()})
    node["names"][name] += 1
    if etype:
        node["types"][etype] += 1
    if summary and summary not in node["descriptions"]:
        node["descriptions"].append(summary)
    if chunk:
        node["chunks"].add(chunk)
    return key


def merge(results: Iterable[ParseResult]) -> MergedGraph:
    """Merge every chunk's records on normalized names (module docstring)."""
    g = MergedGraph()
    results = list(results)
    for r in results:
        for e in r.entities:
            _node(g, e.name, e.type, e.summary, e.chunk)
    for r in results:
        for rel in r.relations:
            ends = []
            for name in (rel.source, rel.target):
                if normalize_name(name) not in g.nodes:
                    g.dangling += 1
                ends.append(_node(g, name, None, "", rel.chunk))
            edge = g.edges.setdefault((ends[0], ends[1]), {"descriptions": [], "weight": 0, "chunks": set()})
            edge["weight"] += 1
            if rel.summary and rel.summary not in edge["descriptions"]:
                edge["descriptions"].append(rel.summary)
            if rel.chunk:
                edge["chunks"].add(rel.chunk)
    return g


def merge_aliases(g: MergedGraph, threshold: float = 92.0) -> MergedGraph:
    """Join entities whose normalized names are near-same (rapidfuzz token-sort ratio >=
    ``threshold``, same majority type); every join is listed in ``alias_merges``."""
    keys = sorted(g.nodes, key=lambda k: (-sum(g.nodes[k]["names"].values()), k))
    parent = {k: k for k in keys}

    def find(k: str) -> str:
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    for i, a in enumerate(keys):
        for b in keys[i + 1:]:
            if find(a) == find(b) or g.entity_type(a) != g.entity_type(b):
                continue
            score = fuzz.token_sort_ratio(a, b)
            if score >= threshold:
                parent[find(b)] = find(a)
                g.alias_merges.append((a, b, float(score)))
    if not g.alias_merges:
        return g
    out = MergedGraph(dangling=g.dangling, alias_merges=list(g.alias_merges))
    for k in keys:
        root = find(k)
        src, dst = g.nodes[k], out.nodes.setdefault(root, {"names": Counter(), "types": Counter(), "descriptions": [],
                                                          "chunks": set(), "aliases": set()})
        dst["names"].update(src["names"])
        dst["types"].update(src["types"])
        dst["descriptions"] += [d for d in src["descriptions"] if d not in dst["descriptions"]]
        dst["chunks"] |= src["chunks"]
        dst["aliases"] |= src["aliases"] | ({k} if k != root else set())
    for (a, b), e in g.edges.items():
        ra, rb = find(a), find(b)
        if ra == rb:
            continue
        dst = out.edges.setdefault((ra, rb), {"descriptions": [], "weight": 0, "chunks": set()})
        dst["weight"] += e["weight"]
        dst["descriptions"] += [d for d in e["descriptions"] if d not in dst["descriptions"]]
        dst["chunks"] |= e["chunks"]
    return out


def to_networkx(g: MergedGraph) -> nx.DiGraph:
    """A directed graph: node ``key`` with ``name`` (the most frequent spelling), ``type`` (the
    majority vote), ``description`` and ``aliases``; edge ``relation`` (its first description),
    ``description`` (all, joined) and ``weight``."""
    graph = nx.DiGraph()
    for key, n in g.nodes.items():
        graph.add_node(key, name=n["names"].most_common(1)[0][0], type=g.entity_type(key),
                       description=" | ".join(n["descriptions"]), aliases="; ".join(sorted(n["aliases"])))
    for (a, b), e in g.edges.items():
        graph.add_edge(a, b, relation=(e["descriptions"] or ["related to"])[0],
                       description=" | ".join(e["descriptions"]), weight=int(e["weight"]))
    return graph


def save_graphml(graph: nx.DiGraph, path: str | Path) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    nx.write_graphml(graph, str(path))
    return path


def _content_words(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if len(w) > 3}


def quality(g: MergedGraph, graph: nx.DiGraph | None = None) -> dict[str, float]:
    """Appendix G: ``noise_ratio`` (isolated nodes / nodes), ``lcc_ratio`` (largest weakly
    connected component / nodes), and among multi-source entities (seen in two or more chunks)
    the share with conflicting types and with conflicting descriptions (two descriptions sharing
    no content word longer than three letters: ours, the paper judges this with an LLM)."""
    graph = graph if graph is not None else to_networkx(g)
    n = graph.number_of_nodes()
    multi = [k for k, v in g.nodes.items() if len(v["chunks"]) >= 2]
    type_conflicts = sum(len(g.nodes[k]["types"]) > 1 for k in multi)
    desc_conflicts = 0
    for k in multi:
        words = [_content_words(d) for d in g.nodes[k]["descriptions"]]
        if any(not (a & b) for i, a in enumerate(words) for b in words[i + 1:]):
            desc_conflicts += 1
    lcc = max((len(c) for c in nx.weakly_connected_components(graph)), default=0)
    return {"entities": n, "relations": graph.number_of_edges(),
            "noise_ratio": sum(1 for v in graph.nodes if graph.degree(v) == 0) / n if n else float("nan"),
            "lcc_ratio": lcc / n if n else float("nan"), "multi_source_entities": len(multi),
            "type_conflict_rate": type_conflicts / len(multi) if multi else 0.0,
            "description_conflict_rate": desc_conflicts / len(multi) if multi else 0.0,
            "dangling_endpoints": g.dangling, "alias_merges": len(g.alias_merges)}


# ---------------------------------------------------------------- extraction


class KGSection(Section):
    """Knowledge-graph construction (003 §3.1, App. B.1): ``source: gold`` samples the
    mini-world's own graph; ``extracted`` runs NER/RE over corpus chunks with ``extractor``."""

    source: Literal["extracted", "gold"] = "extracted"
    corpus: str | None = None  # JSONL (id, title?, text); None = the mini-world corpus
    chunk_tokens: int = Field(256, ge=16)  # GraphGen's max_tokens chunking (Table 8: 256)
    max_chunks: int | None = Field(None, ge=1)  # extract from the first N chunks only
    extractor: JudgeSection = JudgeSection(max_new_tokens=512)
    gleaning: int = Field(0, ge=0)  # extra "anything missed?" rounds per chunk
    alias_merge: bool = False
    alias_threshold: float = Field(92.0, gt=0, le=100)
    min_entities: int = Field(3, ge=0)  # fewer after merging: KGBuildError, unless allow_sparse
    allow_sparse: bool = False
    # keep only the edges with these relation labels (then drop entities left without an edge); None: all.
    # E.g. the knowledge organism's facts on the gold graph: [has capital, uses the currency, has the official language]
    relations: list[str] | None = None


@dataclass
class Extraction:
    """NER/RE over chunks: per-chunk parses, the merged graph, and the cost."""

    results: list[ParseResult]
    merged: MergedGraph
    calls: int
    seconds: float
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cache_hits: int = 0  # prompts answered from the judge cache (no call, no tokens)

    @property
    def parse_failure_rate(self) -> float:
        """Share of chunks whose answer gave no usable record."""
        return sum(r.n_records == 0 for r in self.results) / len(self.results) if self.results else float("nan")

    def dropped(self) -> Counter:
        total: Counter = Counter()
        for r in self.results:
            total.update(r.dropped)
        return total


def extract(judge, chunks: Sequence[Mapping[str, str]], gleaning: int = 0) -> Extraction:
    """Run the Table 14 prompt on every chunk (``{"id", "text"}``) with any judge backend, plus
    ``gleaning`` rounds that ask whether records were missed and, when the answer is yes, for
    the missing ones; returns the parses, merged graph and cost (calls, tokens, seconds)."""
    before = dict(judge.stats)
    t0 = time.perf_counter()
    prompts = [P.K2V_NER_RE_PROMPT.format(input_text=c["text"]) for c in chunks]
    answers = judge.judge(prompts)
    results = [parse_records(a, c["id"]) for a, c in zip(answers, chunks)]
    texts = list(answers)
    for _ in range(gleaning):
        ask = [P.K2V_GLEANING_CHECK.format(prompt=p, records=t) for p, t in zip(prompts, texts)]
        more = [i for i, a in enumerate(judge.judge(ask)) if a.strip().lower().startswith("yes")]
        if not more:
            break
        extra = judge.judge([P.K2V_GLEANING_CONTINUE.format(prompt=prompts[i], records=texts[i]) for i in more])
        for i, a in zip(more, extra):
            got = parse_records(a, chunks[i]["id"])
            results[i].entities += got.entities
            results[i].relations += got.relations
            results[i].dropped.update(got.dropped)
            texts[i] += "\n" + a
    stats = {k: judge.stats.get(k, 0) - before.get(k, 0) for k in ("calls", "prompt_tokens", "completion_tokens",
                                                                   "cache_hits")}
    return Extraction(results, merge(results), stats["calls"], time.perf_counter() - t0, stats["prompt_tokens"],
                      stats["completion_tokens"], stats["cache_hits"])


def build_graph(ex: Extraction, cfg: KGSection) -> tuple[MergedGraph, nx.DiGraph]:
    """Merge aliases when asked, and refuse an empty or near-empty graph (``cfg.min_entities``)
    with the parse-failure rate, unless ``cfg.allow_sparse``."""
    merged = merge_aliases(ex.merged, cfg.alias_threshold) if cfg.alias_merge else ex.merged
    graph = to_networkx(merged)
    if graph.number_of_nodes() < cfg.min_entities and not cfg.allow_sparse:
        dropped = ", ".join(f"{k}: {v}" for k, v in ex.dropped().most_common(4)) or "none"
        raise KGBuildError(
            f"extraction gave {graph.number_of_nodes()} entities (kg.min_entities = {cfg.min_entities}) from "
            f"{len(ex.results)} chunks: parse-failure rate {ex.parse_failure_rate:.0%} (dropped records: {dropped}). "
            f"Use a stronger kg.extractor, or set kg.allow_sparse: true to go on.")
    return merged, graph


# ---------------------------------------------------------------- the mini-world's gold graph

_GOLD_TYPES = {"country": "location", "city": "location", "region": "location", "subregion": "location",
               "currency": "concept", "language": "concept"}


def restrict_relations(graph: nx.DiGraph, relations: Sequence[str] | None) -> nx.DiGraph:
    """``graph`` with only the edges whose ``relation`` is one of ``relations`` (None: unchanged),
    then without the entities left with no edge (a copy)."""
    if relations is None:
        return graph
    keep = set(relations)
    out = graph.copy()
    out.remove_edges_from([(a, b) for a, b, d in graph.edges(data=True) if d.get("relation") not in keep])
    out.remove_nodes_from([v for v in list(out.nodes) if out.degree(v) == 0])
    return out


def gold_graph(world: Mapping[str, Any]) -> tuple[nx.DiGraph, list[tuple[str, str, str]]]:
    """The mini-world's structured facts as a knowledge graph and its (head, relation, tail)
    triples: country -capital-> city, country -located in-> subregion, subregion -part of->
    region, country -borders-> country, country -uses currency-> currency, country -has official
    language-> language. Node keys are ``normalize_name`` keys; ``name``, ``type`` (Table 14
    types), ``kind`` (what it is in the mini-world) and ``aliases`` as attributes."""
    graph, triples = nx.DiGraph(), []
    countries = [mw.CountryFacts.from_dict(d) for d in read_jsonl(world["facts"])]

    def node(name: str, kind: str, aliases: Sequence[str] = ()) -> str:
        key = normalize_name(name)
        if key not in graph:
            graph.add_node(key, name=name, type=_GOLD_TYPES[kind], kind=kind, aliases="; ".join(aliases),
                           description=f"{name} ({kind})")
        return key

    def edge(a: str, rel: str, b: str) -> None:
        graph.add_edge(a, b, relation=rel, description=rel, weight=1)
        triples.append((graph.nodes[a]["name"], rel, graph.nodes[b]["name"]))

    for c in countries:
        me = node(c.name, "country", c.aliases)
        if c.capital:
            edge(me, "has capital", node(c.capital, "city"))
        if c.subregion:
            edge(me, "is located in", node(c.subregion, "subregion"))
            if c.region:
                edge(node(c.subregion, "subregion"), "is part of", node(mw.region_phrase(c.region), "region"))
        elif c.region:
            edge(me, "is located in", node(mw.region_phrase(c.region), "region"))
        for cur in c.currencies:
            edge(me, "uses the currency", node(cur, "currency"))
        for lang in c.languages:
            edge(me, "has the official language", node(lang, "language"))
    names = {c.name for c in countries}
    for c in countries:
        for b in c.borders:
            if b in names:
                edge(normalize_name(c.name), "borders", normalize_name(b))
    return graph, triples


def gold_mentions(gold: nx.DiGraph, text: str) -> set[str]:
    """The gold node keys whose name or an alias appears in ``text`` (word-bounded, normalized):
    what a chunk could show an extractor."""
    def words(s: str) -> str:
        return " ".join(re.findall(r"\w+", unicodedata.normalize("NFKC", s).casefold()))

    hay = f" {words(text)} "
    out = set()
    for key, d in gold.nodes(data=True):
        names = [d.get("name", key), *[a for a in (d.get("aliases") or "").split("; ") if a]]
        if any(len(k) > 1 and f" {k} " in hay for k in (words(n) for n in names)):
            out.add(key)
    return out


def extraction_accuracy(merged: MergedGraph, gold: nx.DiGraph, chunk_docs: Mapping[str, set[str]] | None = None
                        ) -> dict[str, float]:
    """Table 12 against gold: entity and relation precision / recall / F1. An extracted entity
    is correct when its key (or an alias) names a gold node; an extracted relation when its two
    ends are joined by a gold edge in either direction (Table 14's records carry no relation
    label). ``chunk_docs`` (chunk id -> the gold node keys its text covers) limits recall to the
    gold the processed chunks could show; without it recall is over the whole gold graph."""
    aliases = {normalize_name(a): k for k, d in gold.nodes(data=True) for a in (d.get("aliases") or "").split("; ") if a}
    resolve = lambda k: k if k in gold else aliases.get(k)  # noqa: E731
    ext_nodes = {k: resolve(k) for k in merged.nodes}
    tp_nodes = {g for g in ext_nodes.values() if g}
    if chunk_docs is not None:
        covered = set().union(*chunk_docs.values()) if chunk_docs else set()
        gold_nodes = covered
        gold_edges = {frozenset(e) for e in gold.edges if e[0] in covered and e[1] in covered}
    else:
        gold_nodes, gold_edges = set(gold.nodes), {frozenset(e) for e in gold.edges}
    ext_edges = {frozenset((ext_nodes.get(a), ext_nodes.get(b))) for a, b in merged.edges
                 if ext_nodes.get(a) and ext_nodes.get(b)}
    n_ext_edges = len(merged.edges)
    tp_edges = ext_edges & {frozenset(e) for e in gold.edges}

    def prf(tp_pred: int, n_pred: int, tp_gold: int, n_gold: int) -> tuple[float, float, float]:
        p = tp_pred / n_pred if n_pred else 0.0
        r = tp_gold / n_gold if n_gold else 0.0
        return p, r, 2 * p * r / (p + r) if p + r else 0.0

    ep, er, ef = prf(sum(1 for g in ext_nodes.values() if g), len(ext_nodes), len(tp_nodes & gold_nodes),
                     len(gold_nodes))
    rp, rr, rf = prf(len(tp_edges), n_ext_edges, len(tp_edges & gold_edges), len(gold_edges))
    return {"entity_precision": ep, "entity_recall": er, "entity_f1": ef,
            "relation_precision": rp, "relation_recall": rr, "relation_f1": rf}

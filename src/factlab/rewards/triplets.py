"""Triplet extraction for CorVer's sentence reward (000_ac66a963fabf3916.txt §3.2, §B.1).

CorVer runs QuCo-extractor-0.5B (Min et al., 2025) on every sentence of a completion. The
extractor emits one of four shapes (§B.1): ``[entity, relation]`` for a question,
``[head, relation, tail]`` for a declarative sentence with one fact, ``[]`` when the
sentence has no factual content, or a list of several triples. Its output is read by a
tolerant parser (nested brackets, smart quotes, escapes, commas inside entity strings).

Two extractors share one interface, ``extractor.extract(sentences) -> list[list[Triplet]]``:

- ``LLMTripletExtractor``: any HF causal LM prompted with ``QUCO_FEW_SHOT_PROMPT``,
  left-padded batches of 32, greedy, loaded lazily once per process (§B.1 "lazy-init,
  singleton scope"); ``QuCo-extractor-0.5B`` (or its full HF id) works by name.
- ``HeuristicExtractor``: proper-noun spans, no model; the CPU smoke default. Its first
  span is the head, its last span the tail and the words between the relation.
"""

from __future__ import annotations

import logging
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any, Protocol, Sequence

from pydantic import Field

from .. import models
from ..config import MAX_TOKENS, Section

log = logging.getLogger(__name__)

QUCO_EXTRACTOR_ID = "ZhishanQ/QuCo-extractor-0.5B"
EXTRACTOR_ALIASES = {"quco-extractor-0.5b": QUCO_EXTRACTOR_ID}

PRONOUNS = frozenset(
    "i me my mine we us our ours you your yours he him his she her hers it its they them their "
    "theirs this that these those who whom which what someone something one".split()
)


@dataclass(frozen=True)
class Triplet:
    """One extractor item: ``(head, relation, tail)``; ``tail`` is None for an
    ``[entity, relation]`` pair (question sentences, §B.1)."""

    head: str
    relation: str
    tail: str | None = None

    @property
    def is_ternary(self) -> bool:
        return self.tail is not None

    @property
    def is_valid(self) -> bool:
        """The FIRST rule's test (§B.1): ternary, head and tail non-empty and not pronouns."""
        return (self.tail is not None and _is_entity(self.head) and _is_entity(self.tail))

    def as_tuple(self) -> tuple[str, ...]:
        return (self.head, self.relation) if self.tail is None else (self.head, self.relation, self.tail)


def _is_entity(s: str) -> bool:
    s = s.strip()
    return bool(s) and s.lower() not in PRONOUNS


# --------------------------------------------------------------------------- parser

_SMART = str.maketrans({"\u201c": '"', "\u201d": '"', "\u201e": '"', "\u2033": '"',
                        "\u2018": "'", "\u2019": "'", "\u201a": "'", "\u2032": "'",
                        "\uff3b": "[", "\uff3d": "]", "\uff0c": ","})
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "b": "\b", "f": "\f", '"': '"', "'": "'", "\\": "\\", "/": "/"}
# a bare comma-separated piece that continues the previous entity: "Washington, D.C.",
# "Smith, Jr.", "Acme, Inc.", "1,000"
_CONTINUATION = re.compile(r"^(?:(?:[A-Z]\.)+|(?:Jr|Sr|Inc|Ltd|Co|Corp|LLC|II|III|IV)\.?|\d{3}(?:\D.*)?)$")


class _Parser:
    def __init__(self, s: str):
        self.s, self.i = s, 0

    def peek(self) -> str:
        return self.s[self.i] if self.i < len(self.s) else ""

    def skip_ws(self) -> None:
        while self.i < len(self.s) and self.s[self.i].isspace():
            self.i += 1

    def parse_list(self) -> list:
        assert self.peek() == "["
        self.i += 1
        items: list = []
        bare_flags: list[bool] = []
        while True:
            self.skip_ws()
            c = self.peek()
            if c == "":  # truncated generation: close what is open
                break
            if c == "]":
                self.i += 1
                break
            if c == ",":
                self.i += 1
                continue
            if c == "[":
                items.append(self.parse_list())
                bare_flags.append(False)
            elif c in "\"'":
                items.append(self.parse_quoted(c))
                bare_flags.append(False)
            else:
                items.append(self.parse_bare())
                bare_flags.append(True)
        return _merge_continuations(items, bare_flags)

    def parse_quoted(self, quote: str) -> str:
        self.i += 1
        out = []
        while self.i < len(self.s):
            c = self.s[self.i]
            if c == "\\" and self.i + 1 < len(self.s):
                nxt = self.s[self.i + 1]
                hex4 = self.s[self.i + 2:self.i + 6]
                if nxt == "u" and len(hex4) == 4 and all(h in "0123456789abcdefABCDEF" for h in hex4):
                    out.append(chr(int(hex4, 16)))
                    self.i += 6
                    continue
                out.append(_ESCAPES.get(nxt, nxt))
                self.i += 2
                continue
            if c == quote:
                # an apostrophe inside a word ("Ella Fitzgerald's") does not close the string:
                # a closing quote is followed by , ] or the end
                j = self.i + 1
                while j < len(self.s) and self.s[j].isspace():
                    j += 1
                if j >= len(self.s) or self.s[j] in ",]":
                    self.i += 1
                    return "".join(out)
            out.append(c)
            self.i += 1
        return "".join(out)

    def parse_bare(self) -> str:
        start = self.i
        while self.i < len(self.s) and self.s[self.i] not in ",]":
            self.i += 1
        return self.s[start:self.i].strip()


def _merge_continuations(items: list, bare: list[bool]) -> list:
    out: list = []
    out_bare: list[bool] = []
    for item, is_bare in zip(items, bare):
        if (is_bare and out and out_bare[-1] and isinstance(out[-1], str)
                and isinstance(item, str) and _CONTINUATION.match(item)):
            sep = "," if item[:1].isdigit() and out[-1][-1:].isdigit() else ", "
            out[-1] = out[-1] + sep + item
            continue
        out.append(item)
        out_bare.append(is_bare)
    return out


def parse_extractor_output(raw: str) -> list:
    """The first bracketed list in ``raw`` as nested Python lists of strings ([] if none).

    Never evaluates the text. Handles nested brackets, single/double/smart quotes,
    backslash escapes, apostrophes inside quoted entities, bare (unquoted) items with
    abbreviation commas ("Washington, D.C."), and truncated output (open brackets closed).
    """
    s = (raw or "").translate(_SMART)
    start = s.find("[")
    if start < 0:
        return []
    p = _Parser(s)
    p.i = start
    return p.parse_list()


def _to_triplet(item: Sequence[Any]) -> Triplet | None:
    parts = [str(x).strip() for x in item if isinstance(x, str)]
    if len(parts) != len(item) or len(parts) < 2:
        return None
    if len(parts) == 2:
        return Triplet(parts[0], parts[1], None)
    if len(parts) > 3:  # unquoted commas inside the tail
        parts = parts[:2] + [", ".join(parts[2:])]
    return Triplet(*parts)


def parse_triplets(raw: str) -> list[Triplet]:
    """Triplets in an extractor output: ``[h, r, t]``, ``[e, r]``, ``[[...], [...]]`` or ``[]``.

    Items that are not lists of 2-3 strings are skipped (they count as extraction failures
    for that item only, §B.1: "a non-ternary triplet ... yields no query")."""
    parsed = parse_extractor_output(raw)
    if not parsed:
        return []
    if all(isinstance(x, str) for x in parsed):
        t = _to_triplet(parsed)
        return [t] if t else []
    out: list[Triplet] = []
    stack = list(reversed(parsed))
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            if item and all(isinstance(x, str) for x in item):
                t = _to_triplet(item)
                if t:
                    out.append(t)
            else:
                stack.extend(reversed(item))
    return out


# --------------------------------------------------------------------------- extractors

class TripletExtractor(Protocol):
    name: str

    def extract(self, sentences: Sequence[str]) -> list[list[Triplet]]: ...


# QuCo-style few-shot prompt (§B.1 lists the four output shapes); {sentence} is filled in.
QUCO_FEW_SHOT_PROMPT = """Extract knowledge triples from the sentence. Output a JSON-style list:
- a declarative sentence with one fact: ["head", "relation", "tail"]
- a question: ["entity", "relation"]
- several facts: [["head", "relation", "tail"], ["head", "relation", "tail"]]
- no factual content: []

Sentence: Mario Camerini directed Il Seduttore.
Triples: ["Mario Camerini", "directed", "Il Seduttore"]

Sentence: Who is the spouse of the director of Il Seduttore?
Triples: ["Il Seduttore", "director"]

Sentence: The Philadelphia Flyers won the Stanley Cup in 1975, defeating the Buffalo Sabres.
Triples: [["Philadelphia Flyers", "won", "Stanley Cup"], ["Philadelphia Flyers", "defeated", "Buffalo Sabres"]]

Sentence: Let me think about this step by step.
Triples: []

Sentence: {sentence}
Triples:"""


_CAP_WORD = re.compile(r"[A-Z\u00C0-\u00DE][\w\u00C0-\u024F'’\-.]*|\d[\d,.]*\d|\d")
_SPAN_JOINERS = frozenset({"of", "de", "du", "la", "le", "von", "van", "der", "da", "di", "and", "&"})
_SENTENCE_INITIAL_SKIP = frozenset(
    "The A An This That These Those It Its In On At By For From With As Yes No So Therefore Thus "
    "However Also But And Or If When While Because Since I We You He She They There Here My Our "
    "Their His Her Answer Question Let Okay Well".split()
)


@dataclass
class HeuristicExtractor:
    """Proper-noun-span extractor (no model): CPU stand-in for QuCo-extractor.

    Spans are runs of capitalised words or numbers (joined by "of", "de", "and", ... when
    both sides are capitalised); a sentence-initial function word ("The", "It", ...) is
    not a span. With two or more spans the triplet is (first span, words between, last
    span); with fewer the sentence has no triplet ([] -> neutral reward).
    """

    name: str = "heuristic"

    def spans(self, sentence: str) -> list[tuple[int, int]]:
        tokens = [(m.start(), m.end(), m.group()) for m in _CAP_WORD.finditer(sentence)]
        spans: list[list[int]] = []
        for start, end, word in tokens:
            word_clean = word.rstrip(".,'’")
            if start == _first_word_start(sentence) and word_clean in _SENTENCE_INITIAL_SKIP:
                continue
            end = start + len(word_clean)
            if spans:
                gap = sentence[spans[-1][1]:start]
                gap_words = gap.split()
                if not gap.strip() or (len(gap_words) == 1 and gap_words[0] in _SPAN_JOINERS):
                    spans[-1][1] = end
                    continue
            spans.append([start, end])
        return [(a, b) for a, b in spans]

    def extract_one(self, sentence: str) -> list[Triplet]:
        spans = self.spans(sentence)
        if len(spans) < 2:
            return []
        (h0, h1), (t0, t1) = spans[0], spans[-1]
        relation = sentence[h1:t0].strip(" ,;:")
        return [Triplet(sentence[h0:h1], relation, sentence[t0:t1])]

    def extract(self, sentences: Sequence[str]) -> list[list[Triplet]]:
        return [self.extract_one(s) for s in sentences]


def _first_word_start(sentence: str) -> int:
    return len(sentence) - len(sentence.lstrip(" \"'([*-"))


class LLMTripletExtractor:
    """Triplets from an HF causal LM with the QuCo few-shot prompt (§B.1).

    Greedy, left-padded batches of ``batch_size`` (32), ``max_new_tokens`` per sentence;
    the model is loaded on first use and shared by every extractor with the same name in
    this process (``models.load_frozen_model``). Counters: ``calls`` (sentences sent), ``parse_failures`` (outputs
    with no list), ``empty`` (``[]`` outputs).
    """

    def __init__(self, name: str = QUCO_EXTRACTOR_ID, *, batch_size: int = 32, max_new_tokens: int = 96,
                 dtype: str = "auto", device: str = "auto", prompt: str = QUCO_FEW_SHOT_PROMPT):
        self.name = EXTRACTOR_ALIASES.get(name.lower(), name)
        self.batch_size, self.max_new_tokens = batch_size, max_new_tokens
        self.dtype, self.device, self.prompt = dtype, device, prompt
        self.counters: Counter = Counter()
        self._loaded = None

    @property
    def model_and_tokenizer(self):
        if self._loaded is None:
            self._loaded = models.load_frozen_model(self.name, dtype=self.dtype, device=self.device)
        return self._loaded

    def raw_outputs(self, sentences: Sequence[str]) -> list[str]:
        model, tok = self.model_and_tokenizer
        prompts = [models.chat_prompt(tok, self.prompt.format(sentence=s.strip())) for s in sentences]
        gens = models.generate(model, tok, prompts, max_new_tokens=self.max_new_tokens,
                               batch_size=self.batch_size, temperature=0.0, progress=False)
        return [g[0].text for g in gens]

    def extract(self, sentences: Sequence[str]) -> list[list[Triplet]]:
        if not sentences:
            return []
        out = []
        for raw in self.raw_outputs(sentences):
            self.counters["calls"] += 1
            if "[" not in raw:
                self.counters["parse_failures"] += 1
                log.debug("extractor output without a list: %r", raw[:200])
            triplets = parse_triplets(raw)
            if not triplets:
                self.counters["empty"] += 1
            out.append(triplets)
        return out


class ExtractorSection(Section):
    """Triplet extractor (000 §3.2): ``heuristic`` (CPU smoke) or an HF causal LM id/path."""

    name: str = "heuristic"
    batch_size: int = Field(32, ge=1)
    max_new_tokens: int = Field(96, ge=1, le=MAX_TOKENS)


def extractor_from(cfg: ExtractorSection) -> TripletExtractor:
    """The extractor a params ``extractor:`` section names: ``heuristic``, or an HF model id /
    local path / embedded model name (§B.1 default: ``QuCo-extractor-0.5B``)."""
    if cfg.name == "heuristic":
        return HeuristicExtractor()
    return LLMTripletExtractor(cfg.name, batch_size=cfg.batch_size, max_new_tokens=cfg.max_new_tokens)

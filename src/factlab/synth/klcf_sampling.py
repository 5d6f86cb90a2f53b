"""KLCF's offline pipeline, Stage 1: sampling (004_4f2ca2d982459bb2.txt §2.2 Stage 1, Appendix C.3, E.1).

nu samples per query from the base model at a high temperature with Prompt 1's few-shot
context C (``KLCF_FEWSHOT_*``): ``fewshot_prompt`` writes Prompt 1; its examples come from the
mini-world (``miniworld_fewshot``), a corpus JSONL such as the run's ``datastore.corpus``
(``corpus_fewshot``) or your own file (``file_fewshot``), never about a query
(``synth.klcf.fewshot_examples`` picks the source a run's params name). ``ModelSampler`` runs
``factlab.models.generate``; a sample is cut where it starts the next ``[Question]:`` of the
few-shot format (``cut_at_next_question``). The pipeline that caches the samples is
``synth.klcf.KLCFPipeline.stage1``.
"""

from __future__ import annotations

import json
import logging
import random
import time
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from .. import prompts as P
from ..data.longform import LONGFORM_TEMPLATE
from ..data.miniworld import ensure_world
from ..data.types import read_jsonl
from ..models import chat_prompt, generate
from ..text import normalize_answer

log = logging.getLogger(__name__)

__all__ = ["fewshot_prompt", "miniworld_fewshot", "corpus_fewshot", "file_fewshot", "cut_at_next_question",
           "ModelSampler"]


# ---------------------------------------------------------------- Prompt 1


def fewshot_prompt(query: str, examples: Sequence[tuple[str, str]] = ()) -> str:
    """Prompt 1: the header, one [Question] / [Answer] block per example, then the query."""
    return (P.KLCF_FEWSHOT_HEADER + "".join(P.KLCF_FEWSHOT_EXAMPLE.format(question=q, answer=a) for q, a in examples)
            + P.KLCF_FEWSHOT_QUERY.format(query=query))


def _cut_sentences(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    cut = text[:max_chars]
    end = cut.rfind(". ")
    return cut[:end + 1] if end > 0 else cut.rstrip()


def miniworld_fewshot(world: Any = None, n: int = P.KLCF_FEWSHOT_EXAMPLES, *, exclude: Iterable[str] = (),
                      seed: int = 0, max_chars: int = 600) -> list[tuple[str, str]]:
    """``n`` ("Tell me about <country>.", its article) examples for Prompt 1 from the mini-world,
    seeded, skipping the documents in ``exclude`` (the queries' own countries); answers cut at a
    sentence end below ``max_chars``."""

    paths = world if isinstance(world, Mapping) else ensure_world(world)
    skip = set(exclude)
    docs = [d for d in read_jsonl(paths["corpus"]) if d["id"] not in skip]
    picked = random.Random(seed).sample(docs, min(n, len(docs)))
    return [(LONGFORM_TEMPLATE.format(title=d["title"]), _cut_sentences(d["text"], max_chars)) for d in picked]


def _words(text: str) -> str:
    return " " + " ".join(normalize_answer(text).split()) + " "


def corpus_fewshot(corpus: str | Path, n: int = P.KLCF_FEWSHOT_EXAMPLES, *, exclude: Iterable[str] = (),
                   queries: Iterable[str] = (), seed: int = 0, max_chars: int = 600, pool: int = 2000,
                   text_field: str = "text") -> list[tuple[str, str]]:
    """``n`` Prompt 1 examples (004 §2.2 Stage 1, Appendix E.1) from a corpus JSONL
    (``{"id", "title", "text"}`` per line: the run's ``datastore.corpus``, e.g. a Wikipedia dump):
    ("Tell me about <title>.", the document's opening cut at a sentence end below ``max_chars``),
    drawn with ``seed`` from the first ``pool`` documents that have a title and text, skipping
    the documents in ``exclude`` (ids) and those whose title the ``queries`` name (whole words,
    case-insensitive): an example must not answer a query it is shown with. Reads only as far
    as the pool reaches, so a dump of millions of articles costs one short scan."""
    skip = set(exclude)
    named = [_words(q) for q in queries]
    docs: list[dict] = []
    with Path(corpus).open(encoding="utf-8") as fh:
        for line in fh:
            if len(docs) >= pool:
                break
            if not line.strip():
                continue
            d = json.loads(line)
            title, body = str(d.get("title") or "").strip(), str(d.get(text_field) or "").strip()
            if not title or not body or str(d.get("id")) in skip:
                continue
            t = _words(title)
            if t.strip() and any(t in q for q in named):
                continue
            docs.append({"title": title, "text": body})
    picked = random.Random(seed).sample(docs, min(n, len(docs)))
    return [(LONGFORM_TEMPLATE.format(title=d["title"]), _cut_sentences(d["text"], max_chars)) for d in picked]


def file_fewshot(path: str | Path, n: int = P.KLCF_FEWSHOT_EXAMPLES, *, seed: int = 0,
                 max_chars: int | None = None) -> list[tuple[str, str]]:
    """``n`` Prompt 1 examples from your own JSONL of ``{"question", "answer"}`` rows, the first
    ``n`` in file order (``seed`` unused: the file fixes them); answers cut like ``corpus_fewshot``."""
    rows = [r for r in read_jsonl(path) if str(r.get("question", "")).strip() and str(r.get("answer", "")).strip()]
    if len(rows) < n:
        log.warning("%s: %d few-shot examples, fewer than the %d asked", path, len(rows), n)
    return [(str(r["question"]).strip(), _cut_sentences(str(r["answer"]).strip(), max_chars) if max_chars
             else str(r["answer"]).strip()) for r in rows[:n]]


def cut_at_next_question(text: str) -> str:
    """A few-shot sample ends where the model starts the next ``[Question]:`` block."""
    i = text.find("[Question]:")
    return (text[:i] if i >= 0 else text).strip()


# ---------------------------------------------------------------- the sampler


class ModelSampler:
    """Stage 1 samples from a causal LM through ``factlab.models.generate``; ``sample(prompts,
    seed)`` returns one ``{"text", "n_tokens", "finished"}`` per prompt (prompts may repeat)."""

    def __init__(self, model, tokenizer, *, name: str = "", max_new_tokens: int = 1024, temperature: float = 1.0,
                 top_p: float = 1.0, batch_size: int = 16, chat_template: bool = False):
        self.model, self.tokenizer, self.name = model, tokenizer, name or getattr(model, "name_or_path", "")
        self.max_new_tokens, self.temperature, self.top_p = max_new_tokens, temperature, top_p
        self.batch_size, self.chat_template = batch_size, chat_template
        self.stats: Counter = Counter()
        self.seconds = 0.0

    def identity(self) -> dict[str, Any]:
        return {"model": self.name, "max_new_tokens": self.max_new_tokens, "temperature": self.temperature,
                "top_p": self.top_p, "chat_template": self.chat_template}

    def render(self, prompt: str) -> str:

        return chat_prompt(self.tokenizer, prompt) if self.chat_template else prompt

    def sample(self, prompts: Sequence[str], seed: int) -> list[dict[str, Any]]:

        rendered = [self.render(p) for p in prompts]
        t0 = time.perf_counter()
        gens = generate(self.model, self.tokenizer, rendered, max_new_tokens=self.max_new_tokens,
                        temperature=self.temperature, top_p=self.top_p, batch_size=self.batch_size, seed=seed,
                        progress=False, desc="KLCF stage 1")
        self.seconds += time.perf_counter() - t0
        self.stats["calls"] += len(prompts)
        self.stats["prompt_tokens"] += sum(len(self.tokenizer(r, add_special_tokens=False)["input_ids"])
                                           for r in rendered)
        self.stats["completion_tokens"] += sum(len(g[0].token_ids) for g in gens)
        return [{"text": g[0].text, "n_tokens": len(g[0].token_ids), "finished": g[0].finished} for g in gens]

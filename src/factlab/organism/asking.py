"""Using a built knowledge organism: ``load`` it, ``ask`` it questions (greedy short answers,
the ``<answer>`` block of 000 §A.3 parsed), read its build report and its pretraining corpus.
Part of ``factlab.organism``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..prompts import chat_messages
from ..text import extract_answer, lenient_answer
from .builder import build
from .evaluation import complete
from .specs import OrganismSpec, fingerprint, spec_of


def load(spec: OrganismSpec | str | None = None):
    """``(model, tokenizer)`` of the organism (built on first use), in eval mode on the CPU."""
    import torch
    from transformers import AutoTokenizer, LlamaForCausalLM

    folder = build(spec)
    tok = AutoTokenizer.from_pretrained(folder)
    model = LlamaForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    return model, tok


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


def read_report(spec: OrganismSpec | str | None = None) -> dict[str, Any]:
    """The build's ``report.json`` (building first if needed)."""
    return json.loads((build(spec) / "report.json").read_text())


def corpus_path(spec: OrganismSpec | str | None = None) -> Path:
    """The organism's pretraining documents as a corpus JSONL (``id``, ``title``, ``text``; the
    mixed-in QA left out): what CorVer's infini-gram index is built over."""
    return build(spec) / "corpus.jsonl"

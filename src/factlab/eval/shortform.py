"""Short-form QA evaluation with CorVer's diagnostics (000_ac66a963fabf3916.txt §4, §A.2-A.3).

Metrics: accuracy under substring-plus-alias matching with lenient parsing, NA rate,
format-success rate and mean length, plus PopQA-style popularity quartiles for any
dataset with a popularity field.

Lenient parsing (interpretation of §4 "lenient regex parsing"): the answer is the
``<answer>`` block when present (``text.extract_answer``); otherwise the completion with
its ``<think>`` block and stray tags removed. ``strict_accuracy`` counts only answers
inside ``<answer>`` tags, so the two side by side show how much format matters.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Sequence

from .. import text
from ..data.types import QAItem
from ..models import Generation, chat_prompt, generate
from ..prompts import corver_eval_system

@dataclass
class QARecord:
    """One graded completion: what the model said and how it was scored."""

    id: str
    question: str
    golds: list[str]
    completion: str
    answer: str
    answer_source: str
    label: str  # GOOD / BAD / NA
    strict_label: str  # label when only a tagged answer counts
    format_ok: bool
    n_tokens: int
    answer_words: int
    finished: bool
    popularity: float | None = None
    source: str = ""


def grade_completion(item: QAItem, gen: Generation) -> QARecord:
    answer, source = text.lenient_answer(gen.text)
    label = text.grade_answer(answer, item.golds)
    strict = label if source == "tag" else text.BAD
    return QARecord(
        id=item.id, question=item.question, golds=list(item.golds), completion=gen.text,
        answer=answer, answer_source=source, label=label, strict_label=strict,
        format_ok=text.format_violation(gen.text) is None, n_tokens=len(gen.token_ids),
        answer_words=len(answer.split()), finished=gen.finished,
        popularity=item.popularity, source=item.source,
    )


def summarize(records: Sequence[QARecord]) -> dict[str, float]:
    """Accuracy, strict accuracy, NA rate, format rate, mean lengths, truncation rate, and the
    share of GOOD answers that match only as a short or negated substring
    (``text.suspicious_substring_match``)."""
    n = len(records)
    if n == 0:
        raise ValueError("no records to summarize: the evaluation set is empty")
    mean = lambda xs: float(sum(xs)) / n  # noqa: E731
    return {
        "n": n,
        "accuracy": mean(r.label == text.GOOD for r in records),
        "strict_accuracy": mean(r.strict_label == text.GOOD for r in records),
        "na_rate": mean(r.label == text.NA for r in records),
        "format_rate": mean(r.format_ok for r in records),
        "mean_length_tokens": mean(r.n_tokens for r in records),
        "mean_answer_words": mean(r.answer_words for r in records),
        "truncation_rate": mean(not r.finished for r in records),
        # GOOD only as a short (<= 2 characters) or negated substring of a gold: the substring rule's blind spot
        "suspicious_substring_rate": mean(text.suspicious_substring_match(r.answer, r.golds) for r in records),
    }


def popularity_quartiles(records: Sequence[QARecord]) -> list[dict]:
    """Accuracy per popularity quartile (PopQA-style), lowest quartile first.

    Only records with a popularity value count; returns ``[]`` when fewer than four have one.
    """
    rated = sorted((r for r in records if r.popularity is not None), key=lambda r: r.popularity)
    if len(rated) < 4:
        return []
    rows = []
    for q in range(4):
        part = rated[q * len(rated) // 4:(q + 1) * len(rated) // 4]
        rows.append({
            "quartile": f"Q{q + 1}",
            "popularity_min": part[0].popularity,
            "popularity_max": part[-1].popularity,
            "n": len(part),
            "accuracy": sum(r.label == text.GOOD for r in part) / len(part),
            "na_rate": sum(r.label == text.NA for r in part) / len(part),
        })
    return rows


def evaluate_qa(model, tokenizer, items: Sequence[QAItem], *, max_new_tokens: int = 1000,
                batch_size: int = 16, trained: bool = False, temperature: float = 0.0,
                top_p: float = 1.0, seed: int = 0, progress: bool = True,
                desc: str = "eval") -> tuple[list[QARecord], dict[str, float]]:
    """Generate (greedy by default) with the eval prompt of §A.3 and grade every answer.

    ``trained=True`` appends the anti-loop line, as the paper does for adapter checkpoints.
    """
    system = corver_eval_system(trained)
    prompts = [chat_prompt(tokenizer, it.question, system) for it in items]
    gens = generate(model, tokenizer, prompts, max_new_tokens=max_new_tokens,
                    temperature=temperature, top_p=top_p, batch_size=batch_size,
                    seed=seed, progress=progress, desc=desc)
    records = [grade_completion(it, g[0]) for it, g in zip(items, gens)]
    return records, summarize(records)


def records_table(records: Sequence[QARecord]):
    """Records as a pandas DataFrame (one row per question)."""
    import pandas as pd

    return pd.DataFrame([asdict(r) for r in records])

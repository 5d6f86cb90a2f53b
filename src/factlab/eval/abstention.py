"""Abstention-aware short-form evaluation (Binary RAR, ``001_f9c1f8134c3dd554.txt``).

§4.1 "Hallucination Evaluation": for short-form QA the model is explicitly instructed to
answer "I don't know" when uncertain, and the hallucination rate is the percentage of
questions answered incorrectly. §4.1 "Utility Evaluation": the same questions with a
no-abstention prompt (the model must always give its best guess), scored by accuracy.
§6.2 / Figure 2: the breakdown of responses into correct, incorrect and abstained, and the
accuracy on attempted questions (correct / (correct + incorrect)).

The paper does not print its two prompts; ``ABSTAIN_SYSTEM`` and ``FORCED_SYSTEM`` are
factlab's wording of §4.1's two instructions, in the ``<think>``/``<answer>`` format of
``factlab.prompts.CORVER_EVAL_SYSTEM`` so that ``shortform.grade_completion`` (lenient
answer parsing, string-match grading with aliases, strict "I don't know" rule) grades them
unchanged. Grading here is string match (``factlab.text.grade_answer``), not the paper's
LLM judge. A GOOD label counts as correct, BAD as incorrect, NA (refusal or empty answer)
as abstained; in "forced" mode a refusal is still counted as abstained, so the two
breakdowns stay comparable. The Figure 2 bars are drawn by ``factlab.plots.plot_abstention``.
"""

from __future__ import annotations

from typing import Sequence

from .. import text
from ..prompts import ABSTAIN_SYSTEM, FORCED_SYSTEM  # noqa: F401 (this module's public names)
from ..data.types import QAItem
from ..models import chat_prompt, generate
from ..plots import OUTCOMES  # correct, abstained, incorrect: the order of Figure 2's stacked bars
from .shortform import QARecord, grade_completion, summarize

SYSTEM_PROMPTS = {"abstain": ABSTAIN_SYSTEM, "forced": FORCED_SYSTEM}
MODES = tuple(SYSTEM_PROMPTS)
OUTCOME_OF_LABEL = {text.GOOD: "correct", text.BAD: "incorrect", text.NA: "abstained"}


def system_prompt(mode: str) -> str:
    """The system prompt of an evaluation mode: ``"abstain"`` or ``"forced"``."""
    try:
        return SYSTEM_PROMPTS[mode]
    except KeyError:
        raise ValueError(f"unknown mode {mode!r}: expected one of {', '.join(MODES)}") from None


def outcome_counts(labels: Sequence[str]) -> dict[str, int]:
    """Counts of correct / incorrect / abstained for GOOD / BAD / NA labels."""
    counts = {k: 0 for k in OUTCOMES}
    for lab in labels:
        if lab not in OUTCOME_OF_LABEL:
            raise ValueError(f"unknown label {lab!r}: expected GOOD, BAD or NA")
        counts[OUTCOME_OF_LABEL[lab]] += 1
    return counts


def abstention_breakdown(records_or_labels: Sequence[QARecord | str]) -> dict[str, float]:
    """Figure 2 breakdown of graded answers (001 §4.1, §6.2).

    Returns counts ``n``, ``n_correct``, ``n_incorrect``, ``n_abstained``, ``n_attempted``
    and rates over all questions: ``correct``, ``incorrect``, ``abstained`` (sum to 1),
    ``accuracy`` (= correct), ``hallucination_rate`` (= incorrect / all, §4.1),
    ``abstention_rate`` (= abstained) and ``attempted_accuracy`` = correct / (correct +
    incorrect), 0.0 when nothing was attempted (see ``n_attempted``). Accepts
    ``QARecord``s or bare labels. Raises ``ValueError`` on an empty input.
    """
    labels = [r if isinstance(r, str) else r.label for r in records_or_labels]
    if not labels:
        raise ValueError("no records: the evaluation set is empty")
    c = outcome_counts(labels)
    n = len(labels)
    attempted = c["correct"] + c["incorrect"]
    return {
        "n": n,
        "n_correct": c["correct"],
        "n_incorrect": c["incorrect"],
        "n_abstained": c["abstained"],
        "n_attempted": attempted,
        "correct": c["correct"] / n,
        "incorrect": c["incorrect"] / n,
        "abstained": c["abstained"] / n,
        "accuracy": c["correct"] / n,
        "hallucination_rate": c["incorrect"] / n,
        "abstention_rate": c["abstained"] / n,
        "attempted_accuracy": c["correct"] / attempted if attempted else 0.0,
    }


def abstention_selectivity(abstain_records: Sequence[QARecord],
                           forced_records: Sequence[QARecord]) -> dict[str, float]:
    """Are abstentions selective? (001 §6.2: "the model primarily abstains on questions it
    would otherwise answer incorrectly").

    Pairs the two modes' records by question id and returns ``n_paired``,
    ``n_abstained``, ``forced_incorrect_rate`` (forced-mode error rate over all paired
    questions), ``forced_incorrect_when_abstained`` (forced-mode error rate on the
    questions abstained in abstain mode; NaN when none was: no abstention, no selectivity) and
    ``abstained_would_be_correct`` (forced-mode accuracy on them, NaN likewise). Selective abstention shows as
    ``forced_incorrect_when_abstained > forced_incorrect_rate``.
    """
    forced = {r.id: r for r in forced_records}
    pairs = [(a, forced[a.id]) for a in abstain_records if a.id in forced]
    if not pairs:
        raise ValueError("no question id appears in both record lists")
    abst = [f for a, f in pairs if a.label == text.NA]
    return {
        "n_paired": len(pairs),
        "n_abstained": len(abst),
        "forced_incorrect_rate": sum(f.label == text.BAD for _, f in pairs) / len(pairs),
        "forced_incorrect_when_abstained": (sum(f.label == text.BAD for f in abst) / len(abst)
                                            if abst else float("nan")),
        "abstained_would_be_correct": (sum(f.label == text.GOOD for f in abst) / len(abst)
                                       if abst else float("nan")),
    }


def evaluate_abstention(model, tokenizer, items: Sequence[QAItem], mode: str = "abstain", *,
                        max_new_tokens: int = 256, batch_size: int = 16, temperature: float = 0.0,
                        top_p: float = 1.0, seed: int = 0, system: str | None = None,
                        progress: bool = True) -> tuple[list[QARecord], dict[str, float]]:
    """Generate with the ``mode``'s system prompt and return ``(records, metrics)``.

    ``mode``: ``"abstain"`` (hallucination evaluation, may say "I don't know") or
    ``"forced"`` (utility evaluation, must answer), 001 §4.1. ``system`` overrides the
    prompt (the mode is still recorded). Greedy by default. ``metrics`` is
    ``abstention_breakdown`` plus ``shortform.summarize`` (format rate, lengths, ...) and
    ``mode``. Grading is ``shortform.grade_completion``.
    """
    sys_prompt = system_prompt(mode)  # validates the mode
    if system is not None:
        sys_prompt = system
    items = list(items)
    if not items:
        raise ValueError("no items to evaluate")
    prompts = [chat_prompt(tokenizer, it.question, sys_prompt) for it in items]
    gens = generate(model, tokenizer, prompts, max_new_tokens=max_new_tokens,
                    temperature=temperature, top_p=top_p, batch_size=batch_size, seed=seed,
                    progress=progress, desc=f"eval[{mode}]")
    records = [grade_completion(it, g[0]) for it, g in zip(items, gens)]
    metrics: dict = dict(summarize(records))
    metrics.update(abstention_breakdown(records))
    metrics["mode"] = mode
    return records, metrics

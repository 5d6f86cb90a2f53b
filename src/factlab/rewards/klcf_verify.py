"""KLCF's checklist verifier: Prompt 7 (004_4f2ca2d982459bb2.txt §2.3.1, Eq. 5-7; Appendix E.2).

Each checklist fact of Lambda(q_i) gets one of Prompt 7's conclusions, Consistent /
Contradictory / Missing, against the response's answer part; ``rewards.klcf`` turns them into
recall, precision and R_checklist (Eq. 5-7).

- ``LABELS`` / ``canonical_label``: Prompt 7's three conclusions, matched in any case.
- ``overlap_label``: a judge-free stand-in for Prompt 7's label (ours, ``verdict: overlap``).
- ``parse_verification``: a Prompt 7 judge answer -> one label per fact (or None), with the
  answers outside the three labels and the unreadable ones told apart for the statistics.
- ``ChecklistVerifier``: Prompt 7 through the run's judge, one batched judge call for every
  (response, fact) pair (``unit="item"``, a one-fact list per prompt: what a small judge can
  answer) or one prompt per response with its whole fact list (``unit="list"``, as printed).
"""

from __future__ import annotations

import re
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Sequence

from .. import prompts as P
from .. import text
from ..parsing import parse_json
from . import kb

__all__ = ["LABELS", "VERDICT_PREFILL", "canonical_label", "overlap_label", "Verification", "parse_verification",
           "format_facts", "ChecklistVerifier"]

LABELS = ("Consistent", "Contradictory", "Missing")  # Prompt 7's conclusions, §2.3.1
_CANON = {lab.lower(): lab for lab in LABELS}

# Answer prefix for judges too small to follow Prompt 7's format (``judge.prefill``): skips the
# "analysis" field, as ``rar.SCORE_PREFILL`` skips REASONING.
VERDICT_PREFILL = '[{"conclusion": "'


def canonical_label(label: Any) -> str | None:
    """``"Consistent"`` / ``"Contradictory"`` / ``"Missing"`` for that label in any case
    (surrounding spaces, quotes, ``*`` and final punctuation ignored), else None."""
    if not isinstance(label, str):
        return None
    return _CANON.get(label.strip().strip("*\"'`.:;!,").strip().lower())


def overlap_label(fact: str, reply: str) -> str:
    """A judge-free Prompt 7 label (ours; the CPU default's ``verdict: overlap``): Consistent
    when one sentence of ``reply`` holds every content word of ``fact``; Contradictory when a
    sentence holds all of them but one (at least two) plus words the fact lacks: the same
    statement with another value ("The capital of France is Lyon." against "... is Paris.");
    else Missing. Lexical, so it misses paraphrases and negations, and can call two different
    statements that share all but one word a contradiction ("Peru is a country in the Andes."
    against "Peru is a country in South America."): a stand-in for a verifier model, not one."""
    need = text.content_words(fact)
    if not need:
        return "Missing"
    label = "Missing"
    for a, b in text.split_sentences(reply):
        have = text.content_words(reply[a:b])
        shared = len(need & have)
        if shared == len(need):
            return "Consistent"
        if shared >= max(2, len(need) - 1) and have - need:
            label = "Contradictory"
    return label


# ---------------------------------------------------------------- Prompt 7 answers


@dataclass
class Verification:
    """One Prompt 7 answer read for ``n`` facts: ``labels[k]`` is fact k's label or None;
    ``outside`` counts facts whose conclusion was found but is not one of the three labels
    (or is ambiguous), ``unreadable`` facts with no conclusion at all; ``extra`` counts
    conclusions beyond the n facts (ignored)."""

    labels: list[str | None]
    outside: int = 0
    unreadable: int = 0
    extra: int = 0
    raw: list[str | None] = field(default_factory=list)


# a quoted "conclusion" key and its value, closed or cut off ("Consistent", 'Missing', Contradictory)
_CONCLUSION = re.compile(r"""["']conclusion["']\s*:\s*(?:"([^"\n]*)"?|'([^'\n]*)'?|([^,}\]\n]*))""", re.IGNORECASE)
_LABEL_WORD = re.compile(r"\b(consistent|contradictory|missing)\b", re.IGNORECASE)
_NEGATED = re.compile(r"\b(?:not|n't|never|neither|nor)\s+(?:\w+\s+)?(?:consistent|contradictory|missing)\b",
                      re.IGNORECASE)


def _read_conclusion(raw: str) -> str | None:
    """A conclusion field's label: the whole value, else its first word when no other label
    word and no negation is in it ("Missing - the reply omits it" -> Missing)."""
    label = canonical_label(raw)
    if label is not None:
        return label
    words = {w.lower() for w in _LABEL_WORD.findall(raw)}
    first = _LABEL_WORD.match(raw.strip().lstrip("*\"'`"))
    if first and len(words) == 1 and not _NEGATED.search(raw):
        return _CANON[first.group(1).lower()]
    return None


def _conclusion_of(entry: Any) -> str | None:
    """The conclusion of one entry of a JSON answer list: a dict's "conclusion" value (key in
    any case), or a bare string; None when the entry has none."""
    if isinstance(entry, dict):
        for k, v in entry.items():
            if isinstance(k, str) and k.lower() == "conclusion" and v is not None:
                return str(v)
        return None
    return None if entry is None or isinstance(entry, list) else str(entry)


def _free_text_label(answer: str) -> str | None:
    """A one-fact answer without a conclusion field (a bare "Consistent", or a sentence):
    the label when exactly one label word occurs, not negated; else None."""
    words = {w.lower() for w in _LABEL_WORD.findall(answer)}
    if len(words) != 1 or _NEGATED.search(answer):
        return None
    return _CANON[words.pop()]


def parse_verification(answer: str | None, n_facts: int = 1) -> Verification:
    """A Prompt 7 answer as one label per fact, in the fact list's order.

    Reads a complete JSON list, one entry per fact (a dict's ``"conclusion"``, or a bare
    label); else the quoted ``"conclusion"`` fields in order (one object, single quotes, or a
    list cut off by the token limit, which keeps its complete entries); else, for a one-fact
    prompt, free text holding exactly one label word, not negated. Facts without a conclusion
    are ``unreadable``; a conclusion that is not one of the three labels (or names two) is
    ``outside``; both give None, never a label."""
    if n_facts < 1:
        raise ValueError(f"n_facts must be at least 1, got {n_facts}")
    answer = answer or ""
    obj = parse_json(answer)
    if isinstance(obj, dict) and not any(isinstance(k, str) and k.lower() == "conclusion" for k in obj):
        obj = next((v for v in obj.values() if isinstance(v, list)), obj)  # {"results": [...]}
    raws: list[str | None]
    free = False
    if isinstance(obj, list) and obj:  # a complete JSON list: one entry per fact
        raws = [_conclusion_of(x) for x in obj]
    else:  # a single object, or a list cut off by the token limit: the conclusions in order
        raws = [next(g for g in m.groups() if g is not None).strip() for m in _CONCLUSION.finditer(answer)]
        structured = answer.lstrip().startswith(("[", "{", "`"))  # JSON cut off before any conclusion
        if not raws and n_facts == 1 and answer.strip() and not structured:
            raws, free = [answer.strip()], True
    labels: list[str | None] = []
    outside = 0
    unreadable = 0
    for raw in raws[:n_facts]:
        if raw is None:
            labels.append(None)
            unreadable += 1
            continue
        label = _free_text_label(raw) if free else _read_conclusion(raw)
        labels.append(label)
        outside += label is None
    unreadable += n_facts - len(labels)
    labels += [None] * (n_facts - len(labels))
    kept = raws[:n_facts]
    return Verification(labels, outside, unreadable, max(0, len(raws) - n_facts),
                        kept + [None] * (n_facts - len(kept)))


def format_facts(facts: Sequence[str]) -> str:
    """Prompt 7's [Fact List]: one numbered fact per line."""
    return "\n".join(f"{k}. {f}" for k, f in enumerate(facts, start=1))


# ---------------------------------------------------------------- the checklist verifier (Prompt 7)


_SWAPPED = {"Consistent": "Contradictory", "Contradictory": "Consistent"}  # a hallucinating verifier's flip


class ChecklistVerifier:
    """Prompt 7 with one judge: a label per fact for each (question, reply, facts) triple.

    ``unit="item"``: one prompt per (reply, fact), every prompt of the batch in one judge call;
    ``unit="list"``: one prompt per reply with its whole fact list, read in order (as printed).
    ``verdict="choice"`` constrains each one-fact answer to the three labels
    (``Judge.choose``, for judges too small to answer in the format); ``prefill`` starts a
    generated answer with ``VERDICT_PREFILL``; ``verdict="overlap"`` asks no judge
    (``overlap_label``); ``verdict="kb"`` neither: the mini-world's truth labels each fact
    (``rewards.kb.checklist_label``; a fact the world does not hold is unreadable, counted). An empty reply is labelled all Missing without
    asking the judge (it can neither state nor contradict a fact).

    ``flip_rate`` > 0 (``kb`` only) makes the truth a hallucinating verifier (issue 41): a seeded
    ``flip_rate`` of its Consistent / Contradictory labels are swapped, keyed on the fact and the
    reply (Prompt 7 sees both). Missing stays Missing: it says the reply does not state the
    fact, not whether the fact is true."""

    def __init__(self, judge, verdict: str = "generate", unit: str = "item", prefill: bool = False,
                 flip_rate: float = 0.0, flip_seed: int = 0):
        if verdict not in ("generate", "choice", "overlap", "kb"):
            raise ValueError(f"verdict must be 'generate', 'choice', 'overlap' or 'kb', got {verdict!r}")
        if unit not in ("item", "list"):
            raise ValueError(f"unit must be 'item' or 'list', got {unit!r}")
        if verdict == "choice" and unit == "list":
            raise ValueError("verdict 'choice' picks one label per prompt: it needs unit 'item'")
        if flip_rate and verdict != "kb":
            raise ValueError(f"flip_rate flips only the kb verdict (verdict {verdict!r} has its own errors)")
        if not 0.0 <= flip_rate <= 1.0:
            raise ValueError(f"flip_rate must be in [0, 1], got {flip_rate}")
        self.judge, self.verdict, self.unit, self.prefill = judge, verdict, unit, prefill
        self.flip_rate, self.flip_seed = flip_rate, flip_seed
        self.stats: Counter = Counter()
        self.seconds = 0.0

    def _ask(self, prompts: list[str]) -> list[str]:
        if not prompts:
            return []
        t0 = time.perf_counter()
        try:
            if self.verdict == "choice":
                return self.judge.choose(prompts, LABELS)
            return self.judge.judge(prompts, prefix=VERDICT_PREFILL if self.prefill else None)
        finally:
            self.seconds += time.perf_counter() - t0
            self.stats["judge_calls"] += len(prompts)

    def _noisy(self, label: str | None, fact: str, reply: str) -> str | None:
        """``label``, swapped Consistent <-> Contradictory at ``flip_rate`` (class docstring)."""
        if label in _SWAPPED and kb.flipped(f"{fact}\x00{reply}", self.flip_rate, self.flip_seed):
            self.stats["flipped"] += 1
            return _SWAPPED[label]
        return label

    def labels(self, questions: Sequence[str], replies: Sequence[str],
               facts: Sequence[Sequence[str]]) -> list[list[str | None]]:
        """Per reply, one label (or None: unreadable / outside the labels) per fact."""
        if not len(questions) == len(replies) == len(facts):
            raise ValueError(f"{len(questions)} questions, {len(replies)} replies, {len(facts)} fact lists")
        out: list[list[str | None]] = [["Missing"] * len(fs) if not r.strip() else [None] * len(fs)
                                       for r, fs in zip(replies, facts)]
        self.stats["empty_replies"] += sum(1 for r, fs in zip(replies, facts) if fs and not r.strip())
        asked = [i for i, (r, fs) in enumerate(zip(replies, facts)) if fs and r.strip()]
        if self.verdict in ("overlap", "kb"):  # no judge: a lexical match, or the mini-world's truth
            for i in asked:
                labels = ([overlap_label(f, replies[i]) for f in facts[i]] if self.verdict == "overlap"
                          else kb.checklist_labels(facts[i], replies[i]))
                out[i] = [self._noisy(lab, f, replies[i]) for lab, f in zip(labels, facts[i])]
                self.stats["unreadable"] += sum(lab is None for lab in out[i])  # kb: not a world fact
            self.stats["facts"] += sum(len(fs) for fs in facts)
            return out
        if self.unit == "item":
            jobs = [(i, k, [f]) for i in asked for k, f in enumerate(facts[i])]
        else:
            jobs = [(i, 0, list(facts[i])) for i in asked]
        answers = self._ask([P.KLCF_CHECKLIST_VERIFY.format(query=questions[i], response=replies[i],
                                                            guidelines=format_facts(fs)) for i, _, fs in jobs])
        for (i, k, fs), answer in zip(jobs, answers):
            v = parse_verification(answer, len(fs))
            out[i][k:k + len(fs)] = v.labels
            self.stats["outside_labels"] += v.outside
            self.stats["unreadable"] += v.unreadable
            self.stats["extra_conclusions"] += v.extra
        self.stats["facts"] += sum(len(fs) for fs in facts)
        return out

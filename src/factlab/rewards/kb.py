"""``verdict: kb``: the mini-world's exact truth in place of a judge (issue 27).

Every judged reward of the mini-world (``binary_rar``, ``rating_rar``, ``k2v`` and
``k2v_checklist``, ``klcf_fact``, ``klcf_truth``, ``seva_claims``, and ``seva_process``'s label
part) takes ``args: {verdict: kb}``: the verdict its judge would give is read off the knowledge
base (``factlab.data.kb``) instead. A run with it shows what a perfect judge would give: the
ceiling that separates "the reward design works" from "the judge is too weak". Only facts the
mini-world holds can be checked; each function below says what it does with the rest.

The rules, one per judge question:

- *Does the response contradict the evidence?* (Binary RAR, 001 §3.2): a short-form response
  (its row has ``golds``) contradicts when ``label_response`` calls it wrong; a long-form one
  when any sentence is ``contradicted``. Abstentions and unverifiable text contradict nothing.
- *How confident are you that there is no factual error, 0-10?* (Rating RAR, 001 Figure 7,
  read by its rubric): two or more contradicted sentences 0 ("multiple clear
  contradictions"), one 3 ("one clear contradiction"), nothing verifiable 5 ("uncertain"),
  else 10; short-form: wrong 3, abstain 5, correct 10.
- *Is this claim attributable / true?* (SEVA K.1-K.2 per claim, KLCF's truthfulness RM):
  ``supported`` is yes, anything else no (``claim_true``); the RM's p(True) is 1 or 0, and
  claims the world cannot check are left out of R_truth's mean (``truth_probability``).
- *Consistent, Contradictory or Missing?* (KLCF Prompt 7 per checklist fact):
  ``checklist_label``: the fact's (country, relation) stated in the response as supported
  (Consistent) or contradicted (Contradictory), else Missing.
- *Does the reasoning meet this criterion?* (K2V Table 15): ``criterion_verdict`` for the
  template checklists of the CPU default; a criterion no rule reads is unreadable (None).
"""

from __future__ import annotations

import functools
import hashlib
import re
from typing import Sequence

from .. import text as T
from .. import organism
from ..data.kb import (ABSTAIN, CONTRADICTED, CORRECT, SUPPORTED, UNVERIFIABLE, WRONG, knowledge_base, label_response,
                       label_sentence, label_sentences)

__all__ = ["VERDICTS", "flipped", "OrganismBelief", "contradicts", "rating", "claim_true", "truth_probability",
           "checklist_label", "checklist_labels", "criterion_verdict", "gold_label"]

VERDICTS = ("judge", "kb", "organism")  # the run's judge, the knowledge base, or an organism's own belief


def flipped(key: str, rate: float, seed: int = 0) -> bool:
    """Whether a noisy oracle flips the verdict on ``key`` (the question and the response): a
    seeded draw, the same every time the same response is judged, true with probability
    ``rate`` (issue 41's reward-hallucination experiment: ``kb`` verdicts flipped at rate eps)."""
    if rate <= 0.0:
        return False
    digest = hashlib.sha256(f"{seed}\x00{key}".encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0 ** 64 < rate


# the knowledge base's relation -> the organism's question for it (organism.specs.QUESTIONS' first training phrasing;
# the knowledge base calls the organism's "region" a "location")
ORGANISM_QUESTION = {"capital": organism.QUESTIONS["capital"]["train"]["one"][0],
                     "location": organism.QUESTIONS["region"]["train"]["one"][0],
                     "currency": organism.QUESTIONS["currency"]["train"]["one"][0],
                     "language": organism.QUESTIONS["language"]["train"]["one"][0]}


class OrganismBelief:
    """A judge that knows what an organism knows (Kang et al. 2024, 2403.05612: a reward model
    falls back to a confident guess on what it does not know). Binary RAR's question, *does the
    response contradict the evidence?*, answered with the organism ``model``'s own greedy answer
    to the question as the evidence: the response contradicts when it answers (does not abstain)
    and its answer differs from the organism's (exact match after normalization); an organism
    that abstains has no evidence, so nothing contradicts. On countries the judge organism knows,
    that is the truth; on those it does not, its confident wrong answer makes the verdict wrong.
    Short-form rows only. Answers are asked once per question and kept."""

    def __init__(self, model: str = "organism"):
        if not organism.is_organism(model):
            raise ValueError(f"verdict: organism needs an organism judge model (one of {sorted(organism.SPECS)}), "
                             f"got {model!r}")
        self.model = model
        self.answers: dict[str, str] = {}

    def belief(self, questions: Sequence[str]) -> list[str]:
        todo = [q for q in dict.fromkeys(questions) if q not in self.answers]
        if todo:
            self.answers.update(zip(todo, organism.ask(list(todo), self.model)))
        return [self.answers[q] for q in questions]

    def claim_probabilities(self, claims: Sequence[str]) -> list[float | None]:
        """KLCF's truthfulness RM answered by the organism (Kang et al. 2024's hallucinating reward
        model): a claim the knowledge base can parse into (country, relation, value) for a relation
        the organism learnt is asked back as the relation's first training question; p(True) is
        1.0 when the organism's answer agrees with the stated value (``label_response``), 0.0 when
        it does not, None when the organism abstains or the claim is not such a fact (left out of
        R_truth's mean, as the exact truth leaves out what it cannot check)."""
        rows = [label_sentence(c, knowledge_base()) for c in claims]
        asked = [ORGANISM_QUESTION[r["relation"]].format(n=r["country"])
                 if r["label"] != UNVERIFIABLE and r["country"] and r["value"] and r["relation"] in ORGANISM_QUESTION
                 else None for r in rows]
        answers = dict(zip((q for q in asked if q), self.belief([q for q in asked if q])))
        out: list[float | None] = []
        for r, q in zip(rows, asked):
            answer = answers.get(q) if q else None
            if answer is None or T.is_refusal(answer) or not answer.strip():
                out.append(None)
                continue
            out.append(1.0 if label_response(r["value"], [answer], q) == CORRECT else 0.0)
        return out

    def contradicts(self, response: str, question: str) -> bool:
        judge_answer, = self.belief([question])
        if T.is_refusal(judge_answer) or not judge_answer.strip():
            return False
        return label_response(response, [judge_answer], question) == WRONG


def contradicts(response: str, golds: Sequence[str] | None = None, question: str | None = None) -> bool:
    """Binary RAR's question, answered by the knowledge base (module docstring)."""
    if golds is not None:
        return label_response(response, golds, question or "") == WRONG
    return any(r["label"] == CONTRADICTED for r in label_sentences(response))


def rating(response: str, golds: Sequence[str] | None = None, question: str | None = None) -> float:
    """Rating RAR's 0-10 score by its rubric, from the knowledge base (module docstring)."""
    if golds is not None:
        return {CORRECT: 10.0, WRONG: 3.0, ABSTAIN: 5.0}[label_response(response, golds, question or "")]
    labels = [r["label"] for r in label_sentences(response)]
    wrong = labels.count(CONTRADICTED)
    if wrong >= 2:
        return 0.0
    if wrong == 1:
        return 3.0
    return 10.0 if SUPPORTED in labels else 5.0


def claim_true(claim: str, context: str | None = None) -> bool:
    """A claim is true when the knowledge base supports it (``context``: the question it answers)."""
    return label_sentence(claim, knowledge_base(), context)["label"] == SUPPORTED


def truth_probability(claim: str) -> float | None:
    """p(True | claim) of a perfect truthfulness RM: 1.0 supported, 0.0 contradicted, None
    when the world cannot check the claim (left out of R_truth's mean)."""
    label = label_sentence(claim, knowledge_base())["label"]
    return {SUPPORTED: 1.0, CONTRADICTED: 0.0}.get(label)


def checklist_label(fact: str, response: str) -> str | None:
    """Prompt 7's label of one checklist ``fact`` against ``response``: ``Consistent`` when a
    sentence of the response states the fact's country and relation and the world supports it,
    ``Contradictory`` when such a sentence is contradicted, else ``Missing``; None when the
    fact itself is not a world fact the knowledge base can read."""
    return checklist_labels([fact], response)[0]


def checklist_labels(facts: Sequence[str], response: str) -> list[str | None]:
    """``checklist_label`` of every fact of one checklist, the response's sentences read once
    (a KLCF step labels each of 32 responses against ~10 facts)."""
    stated = [(r["country"], r["relation"], r["label"]) for r in label_sentences(response, knowledge_base())]
    out: list[str | None] = []
    for fact in facts:
        target = _fact_target(fact)
        if target is None:
            out.append(None)
            continue
        same = {label for country, relation, label in stated if (country, relation) == target}
        out.append("Contradictory" if CONTRADICTED in same else "Consistent" if SUPPORTED in same else "Missing")
    return out


@functools.lru_cache(maxsize=8192)
def _fact_target(fact: str) -> tuple[str, str | None] | None:
    """(country, relation) of a checklist fact the world can read, else None (facts repeat every
    step: a query's checklist is fixed)."""
    row = label_sentence(fact, knowledge_base())
    return None if row["label"] == UNVERIFIABLE or row["country"] is None else (row["country"], row["relation"])


_STATES = re.compile(r"^States the fact: (.*)$", re.S)
_CONNECTS = re.compile(r"^Connects both facts through (.*) to identify the blank\.$", re.S)
_NAMES = re.compile(r"^Names (.*) as the entity that fills the blank\.$", re.S)


def criterion_verdict(criterion: str, reasoning: str, checklist: Sequence[str] = ()) -> bool | None:
    """K2V's per-criterion yes / no (Table 15) for the template checklist items
    (``synth.k2v.template_checklist``), from the knowledge base: "States the fact: S" is yes when
    a reasoning sentence states S's country and relation and the world supports it; "Connects
    both facts through X" when every "States the fact" item of ``checklist`` is yes and X is
    named; "Names A ..." when A is named (normalized word match); "Avoids unsupported claims
    and self-contradictions" when no reasoning sentence is contradicted. Any other criterion:
    None (unreadable, counted)."""
    kb = knowledge_base()
    rows = label_sentences(reasoning, kb)
    norm = f" {T.normalize_answer(reasoning)} "
    m = _STATES.match(criterion.strip())
    if m is not None:
        target = label_sentence(m.group(1), kb)
        if target["country"] is None or target["label"] != SUPPORTED:
            return None
        return any(r["label"] == SUPPORTED and r["country"] == target["country"]
                   and r["relation"] == target["relation"] for r in rows)
    m = _CONNECTS.match(criterion.strip())
    if m is not None:
        facts = [c for c in checklist if _STATES.match(c.strip())]
        named = m.group(1) == "the missing entity" or f" {T.normalize_answer(m.group(1))} " in norm
        return named and bool(facts) and all(criterion_verdict(c, reasoning) for c in facts)
    m = _NAMES.match(criterion.strip())
    if m is not None:
        return f" {T.normalize_answer(m.group(1))} " in norm
    if criterion.strip().startswith("Avoids unsupported claims"):
        return not any(r["label"] == CONTRADICTED for r in rows)
    return None


def gold_label(claim: str, dataset_label: str) -> str:
    """SEVA's gold label by the world's truth: ``attributable`` when the knowledge base
    supports the claim, ``not_attributable`` when it contradicts it, the dataset's label when
    the world cannot check it. (A true fact wrapped in a detail its source lacks, Table 19's
    unanswerable wrap, is true in the world but not attributable to its source.)"""
    label = label_sentence(claim, knowledge_base())["label"]
    return {SUPPORTED: "attributable", CONTRADICTED: "not_attributable"}.get(label, dataset_label)

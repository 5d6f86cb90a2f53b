"""The mini-world's exact truth, independent of every reward and judge, and its measurement.

The lookup itself lives in ``factlab.data.kb`` (so rewards can answer ``verdict: kb`` from it
without importing upward); this module is its public face:

- ``label_answer(answer, golds)`` -> ``correct`` | ``wrong`` | ``abstain`` (exact match after
  normalization, never a substring match);
- ``label_sentences(text, world=None)`` -> one row per sentence: ``sentence``, ``country``,
  ``relation``, ``value``, ``label`` (``supported`` | ``contradicted`` | ``unverifiable``);
- ``label_response(response, golds, question)``: a short-form response's truth;
- ``by_exposure(rows, exposures)``: any per-question metric grouped by the organism's exposure
  bucket (known / rare-<dose> / unknown, ``factlab.organism``);

and the truth metrics every evaluation and training run reports on the mini-world
(``answer_truth``, ``sentence_truth``), plus the oracle's own precision and recall per label
(``measure_oracle``) on constructed sentences (true facts and SEVA's Table 19 perturbations,
002 Appendix F, ``synth.perturbations``) and on sentences the embedded model wrote, labelled
by hand (``tests/fixtures/truth/model_sentences.jsonl``).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from ..data.kb import (ABSTAIN, CONTRADICTED, CORRECT, SENTENCE_LABELS, SUPPORTED, UNVERIFIABLE, WRONG,
                       KnowledgeBase, asked_country, knowledge_base, label_answer, label_response, label_sentence,
                       label_sentences, off_topic)
from ..data.miniworld import ensure_world
from ..labels import normalize_label
from ..organism import exposure_bucket
from ..rewards.seva_output import claim_verdict
from ..synth.perturbations import miniworld_pairs

__all__ = ["asked_country", "off_topic", "contradicted_per_answer", "label_answer", "label_sentences", "label_sentence", "label_response", "knowledge_base", "CORRECT",
           "WRONG", "ABSTAIN", "SUPPORTED", "CONTRADICTED", "UNVERIFIABLE", "SENTENCE_LABELS", "answer_truth",
           "sentence_truth", "completion_truth", "question_of", "constructed_sentences", "EXPECTED_BY_STRATEGY", "precision_recall", "measure_oracle",
           "read_labelled", "FIXTURE", "by_exposure"]

FIXTURE = Path(__file__).resolve().parents[3] / "tests" / "fixtures" / "truth" / "model_sentences.jsonl"

# What the knowledge base says of each Table 19 perturbation (002 Appendix F). The wrap keeps
# the true fact and adds a detail the world does not hold ("according to a 1987 report"):
# the stated world fact is supported; SEVA calls the pair not attributable to its source.
EXPECTED_BY_STRATEGY = {
    "entity_confusion": CONTRADICTED, "numerical_perturbation": CONTRADICTED, "multi_hop_graft": CONTRADICTED,
    "paraphrase": CONTRADICTED, "presupposition": CONTRADICTED, "unanswerable_wrap": SUPPORTED,
}

# Statements about world countries on relations the world does not hold: unverifiable.
_OFF_WORLD = ("{n} is famous for its cuisine.", "{n} has a long and complex history.",
              "The national animal of {n} is the lion.", "{n} won its independence after a long struggle.",
              "Tourism is an important part of the economy of {n}.", "The climate of {n} is mild in the south.",
              "Many people in {n} enjoy football.", "{n} is known for its beautiful landscapes.")


def answer_truth(responses: Sequence[str], golds: Sequence[Sequence[str]], questions: Sequence[str],
                 world: KnowledgeBase | None = None) -> dict[str, Any]:
    """Short-form truth over responses: the share ``correct`` / ``wrong`` / ``abstain``
    (``label_response``) and ``labels``, one per response."""
    if not (len(responses) == len(golds) == len(questions)):
        raise ValueError(f"{len(responses)} responses, {len(golds)} gold lists, {len(questions)} questions")
    labels = [label_response(r, g, q, world) for r, g, q in zip(responses, golds, questions)]
    n = len(labels)
    counts = Counter(labels)
    return {"n": n, **{k: (counts[k] / n if n else float("nan")) for k in (CORRECT, WRONG, ABSTAIN)},
            "labels": labels}


def sentence_truth(texts: Sequence[str], world: KnowledgeBase | None = None,
                   questions: Sequence[str] | None = None) -> dict[str, Any]:
    """Long-form truth over responses: per response the counts of supported, contradicted and
    unverifiable sentences; means ``supported`` / ``contradicted`` / ``unverifiable`` per
    response; ``kb_precision`` (macro over responses with a verifiable sentence: supported /
    (supported + contradicted)); ``contradicted_frac`` (contradicted over all sentences).
    ``questions`` (one per text): a true sentence about a country other than the one its
    question asks about counts as unverifiable (``off_topic``)."""
    if questions is not None and len(questions) != len(texts):
        raise ValueError(f"{len(texts)} responses, {len(questions)} questions")
    kb = knowledge_base(world)
    per = []
    for i, t in enumerate(texts):
        rows = label_sentences(t, kb)
        if questions is not None:
            rows = off_topic(rows, asked_country(questions[i], kb))
        c = Counter(r["label"] for r in rows)
        per.append({k: c[k] for k in SENTENCE_LABELS})
    n = len(per)
    verifiable = [p for p in per if p[SUPPORTED] + p[CONTRADICTED]]
    total = sum(sum(p.values()) for p in per)
    out = {"n": n, "per_response": per,
           "kb_precision": (sum(p[SUPPORTED] / (p[SUPPORTED] + p[CONTRADICTED]) for p in verifiable) / len(verifiable)
                            if verifiable else float("nan")),
           "contradicted_frac": sum(p[CONTRADICTED] for p in per) / total if total else float("nan")}
    for k in SENTENCE_LABELS:
        out[k] = sum(p[k] for p in per) / n if n else float("nan")
    return out


def contradicted_per_answer(texts: Sequence[str], questions: Sequence[str],
                            world: KnowledgeBase | None = None) -> float:
    """Mean contradicted sentences per answer, each read in its question (``label_sentences``
    with the question as context: "It is Lima." answers "What is the capital of Peru?")."""
    if len(texts) != len(questions):
        raise ValueError(f"{len(texts)} answers, {len(questions)} questions")
    kb = knowledge_base(world)
    counts = [sum(r["label"] == CONTRADICTED for r in label_sentences(t, kb, context=q)) for t, q in zip(texts, questions)]
    return sum(counts) / len(counts) if counts else float("nan")


def question_of(row: Mapping[str, Any]) -> str:
    """The question a training row asks: its ``question`` column, else the prompt's last user turn."""
    if row.get("question"):
        return str(row["question"])
    prompt = row.get("prompt")
    if isinstance(prompt, list):
        users = [m.get("content", "") for m in prompt if isinstance(m, Mapping) and m.get("role") == "user"]
        return str(users[-1]) if users else ""
    return str(prompt or "")


def completion_truth(row: Mapping[str, Any], completion: str) -> dict[str, Any]:
    """The exact truth of one completion of a training row, by the kind of row:

    - ``short`` (the row has ``golds``): ``label_response`` in the row's question; ``truthful``
      1 correct, 0 wrong, None abstain; ``score`` +1 / 0 / -1 for correct / abstain / wrong
      (net accuracy: abstaining beats a wrong answer, Binary RAR's trade, 001 §3);
    - ``verdict`` (the row has a gold ``label``, SEVA's pairs): the completion's label read from
      its JSON (``rewards.seva_output.claim_verdict``) against the gold; ``truthful`` and ``score``
      1 right, 0 wrong or unreadable;
    - ``long`` (anything else): its sentences (``label_sentences``; a true sentence about a country
      other than the one the question asks about is off topic, ``off_topic``); ``truthful`` 0 with a
      contradicted sentence, 1 with a supported one and none contradicted, None when nothing
      is verifiable; ``score`` the KB precision supported / (supported + contradicted), None
      when nothing is verifiable.
    """
    if row.get("golds") is not None:
        label = label_response(completion, list(row["golds"]), question_of(row))
        return {"kind": "short", "label": label, "truthful": {CORRECT: 1, WRONG: 0}.get(label),
                "score": {CORRECT: 1.0, ABSTAIN: 0.0, WRONG: -1.0}[label]}
    if row.get("label") is not None:
        said = claim_verdict(completion)
        right = said is not None and said == normalize_label(row["label"])
        return {"kind": "verdict", "label": "right" if right else "wrong", "truthful": int(right),
                "score": float(right), "readable": said is not None}
    counts = Counter(r["label"] for r in off_topic(label_sentences(completion), asked_country(question_of(row))))
    s, c = counts[SUPPORTED], counts[CONTRADICTED]
    truthful = 0 if c else (1 if s else None)
    return {"kind": "long", "label": None, "truthful": truthful, "score": s / (s + c) if s + c else None,
            SUPPORTED: s, CONTRADICTED: c}


def constructed_sentences(seed: int = 0, per_strategy: int | None = 40, world_dir: str | Path | None = None
                          ) -> list[dict[str, Any]]:
    """Sentences with known labels: every true fact SEVA's pair builder used (``supported``), its
    Table 19 perturbation (``EXPECTED_BY_STRATEGY``), and off-world statements about the same
    countries (``unverifiable``). Rows: ``sentence``, ``expected``, ``kind`` (``true``, a
    strategy, or ``off_world``)."""
    pairs = miniworld_pairs(ensure_world(world_dir), seed=seed, per_strategy=per_strategy)
    rows: list[dict[str, Any]] = []
    countries = []
    for p in pairs:
        if p.strategy is None:
            rows.append({"sentence": p.claim, "expected": SUPPORTED, "kind": "true"})
            countries.append(p.meta.get("entity"))
        else:
            rows.append({"sentence": p.claim, "expected": EXPECTED_BY_STRATEGY[p.strategy], "kind": p.strategy})
    names = [c for c in dict.fromkeys(countries) if c]
    for i, name in enumerate(names[: max(1, len(rows) // 6)]):
        rows.append({"sentence": _OFF_WORLD[i % len(_OFF_WORLD)].format(n=name), "expected": UNVERIFIABLE,
                     "kind": "off_world"})
    return rows


def precision_recall(expected: Sequence[str], predicted: Sequence[str],
                     labels: Iterable[str] = SENTENCE_LABELS) -> dict[str, Any]:
    """Per label: ``precision``, ``recall``, ``support`` (expected count), ``predicted``; plus
    overall ``accuracy`` and ``n``. An undefined ratio (nothing predicted, nothing expected) is
    NaN, not 0."""
    if len(expected) != len(predicted):
        raise ValueError(f"{len(expected)} expected labels for {len(predicted)} predictions")
    out: dict[str, Any] = {"n": len(expected),
                           "accuracy": (sum(e == p for e, p in zip(expected, predicted)) / len(expected)
                                        if expected else float("nan"))}
    for label in labels:
        tp = sum(e == p == label for e, p in zip(expected, predicted))
        n_pred = sum(p == label for p in predicted)
        n_true = sum(e == label for e in expected)
        out[label] = {"precision": tp / n_pred if n_pred else float("nan"),
                      "recall": tp / n_true if n_true else float("nan"), "support": n_true, "predicted": n_pred}
    return out


def read_labelled(path: str | Path = FIXTURE) -> list[dict[str, Any]]:
    """Hand-labelled sentences (JSONL rows with ``sentence`` and ``label``)."""
    rows = []
    for i, line in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        row = json.loads(line)
        if row.get("label") not in SENTENCE_LABELS or not isinstance(row.get("sentence"), str):
            raise ValueError(f"{path}:{i}: a row needs a 'sentence' and a 'label' in {SENTENCE_LABELS}")
        rows.append(row)
    return rows


def measure_oracle(rows: Sequence[Mapping[str, Any]], world: KnowledgeBase | None = None,
                   expected_key: str = "expected") -> dict[str, Any]:
    """The oracle (``label_sentence``) against ``rows`` of known labels (``expected_key``),
    each sentence read with its row's ``prompt`` as context when it has one (as a completion's
    sentences are: "It borders Japan." is about the country asked about): ``precision_recall``
    overall, accuracy per ``kind`` when rows carry one, and the disagreements."""
    kb = knowledge_base(world)
    predicted = [label_sentence(r["sentence"], kb, r.get("prompt"))["label"] for r in rows]
    expected = [r[expected_key] for r in rows]
    out = precision_recall(expected, predicted)
    kinds = [r.get("kind") for r in rows]
    if any(kinds):
        out["by_kind"] = {k: sum(e == p for e, p, kk in zip(expected, predicted, kinds) if kk == k)
                          / sum(kk == k for kk in kinds) for k in dict.fromkeys(kinds)}
    out["disagreements"] = [{"sentence": r["sentence"], "expected": e, "predicted": p}
                            for r, e, p in zip(rows, expected, predicted) if e != p]
    return out


def _entity(row: Mapping[str, Any], entity_key: str) -> str | None:
    if row.get(entity_key):
        return str(row[entity_key])
    meta = row.get("meta")
    return str(meta["entity"]) if isinstance(meta, Mapping) and meta.get("entity") else None


def by_exposure(rows: Sequence[Mapping[str, Any]], exposures: Mapping[str, int], *, entity_key: str = "country",
                label_key: str = "label", known_exposures: int | None = None) -> dict[str, dict[str, Any]]:
    """Per-question ``rows`` grouped by the exposure bucket of the country each asks about
    (``organism.exposure_bucket``: ``known``, ``rare-<dose>``, ``unknown``; ``exposures`` is
    ``organism.exposures()``, the country from ``row[entity_key]`` or ``row["meta"]["entity"]``).
    Per bucket: ``n``, the share of each value of ``label_key`` (e.g. correct / wrong / abstain)
    and the mean of every numeric column (None and NaN left out). Buckets run from the most
    exposed to unknown; rows about a country missing from ``exposures`` go to ``unmatched``.
    ``known_exposures``: the known dose (default: the largest in ``exposures``)."""
    known = known_exposures if known_exposures is not None else max(exposures.values(), default=1)
    groups: dict[str, list[Mapping[str, Any]]] = {}
    dose: dict[str, int] = {}
    for row in rows:
        name = _entity(row, entity_key)
        if name is None or name not in exposures:
            bucket, n = "unmatched", -1
        else:
            n = int(exposures[name])
            bucket = exposure_bucket(n, known)
        groups.setdefault(bucket, []).append(row)
        dose[bucket] = known if bucket == "known" else n
    out: dict[str, dict[str, Any]] = {}
    for bucket in sorted(groups, key=lambda b: -dose[b]):
        rs = groups[bucket]
        summary: dict[str, Any] = {"n": len(rs)}
        labels = Counter(r[label_key] for r in rs if r.get(label_key) is not None)
        for label, count in sorted(labels.items()):
            summary[str(label)] = count / len(rs)
        numeric = {k for r in rs for k, v in r.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        for k in sorted(numeric - {"exposures"}):
            vals = [float(r[k]) for r in rs if isinstance(r.get(k), (int, float)) and not isinstance(r.get(k), bool)
                    and r[k] == r[k]]
            summary[f"mean_{k}"] = sum(vals) / len(vals) if vals else float("nan")
        out[bucket] = summary
    return out

"""Claim/source attribution pairs for SEVA (002_56f1a732f42030d3.txt): benchmark loaders and
mini-world adversarial pairs.

A :class:`ClaimPair` is one verifier input of the SEVA prompt (Appendix K.2, "Claim: {claim}
Source: {source}") with its gold label, ``"attributable"`` or ``"not_attributable"`` (the labels of
``factlab.rewards.seva``), and, for perturbed pairs, the Table 20 error type and the Table 19
strategy that made it.

Benchmarks (§2.4, §3.1, Appendix B.2, Tables 11-12)
---------------------------------------------------

``PAIR_DATASETS`` maps each name to a :class:`PairSpec`: the default Hugging Face dataset, config
and split, and a ``to_pair`` function that turns one row, with that dataset's own field names,
into a :class:`ClaimPair`. ``load_pairs(name, path=...)`` reads a local JSONL file with the same
field names, so the same mapping runs offline and on the hub (``datasets.load_dataset``, imported
lazily), as ``factlab.data.benchmarks`` does for the QA benchmarks.

==========  ====================  ==========  ========  ======================================
name        HF id                 config      split     claim <- field; source <- field
==========  ====================  ==========  ========  ======================================
clearfacts  just1nseo/ClearFacts  —           train     statement; reference_documents (list)
fever       lucadiliello/fever    —           dev       claim; evidence (list of sentences)
halueval    pminervini/HaluEval   qa_samples  data      "{question} Answer: {answer}"; knowledge
truthfulqa  truthfulqa/           generation  valid-    "{question} Answer: {answer}"; question
            truthful_qa                       ation     and its reference (correct) answers
anli        facebook/anli         —           train_r1  hypothesis; premise
==========  ====================  ==========  ========  ======================================

==========  =============================  =============================================
name        -> attributable                -> not_attributable
==========  =============================  =============================================
clearfacts  label "S"                      label "NS"
fever       label 0 / "SUPPORTS"           label 1 / "NOT ENOUGH INFO", 2 / "REFUTES"
halueval    hallucination "no"             hallucination "yes"
truthfulqa  answer = best_answer           answer = an incorrect answer (misconception)
anli        label 0 / "entailment"         label 1 / "neutral", 2 / "contradiction"
==========  =============================  =============================================

Choices and assumptions, per dataset:

* **ClearFacts** (§3.1 "our primary metric", 1,590 samples, Table 12 53.8% attributable; Seo et al.
  2025). The paper names no hub id. We assume the release the ClearFacts authors link from their
  code (github.com/just1nseo/verifying-the-verifiers): ``just1nseo/ClearFacts``, rows
  ``{topic, statement, reference_documents: [str], label: "S"|"NS", category, additional_info}``.
  The split name is an assumption (a single JSON file loads as ``train``). Its own labels are
  Supported / Not Supported, so S -> attributable and NS -> not_attributable; "AMBIG" belongs to the
  companion GrayFacts set and is rejected. The reference documents are joined by a blank line.
  B.2 evaluates ClearFacts in full, so load it without ``limit``.
* **FEVER** (§3.1; Table 12 gives 19,998 rows, the size of the labelled FEVER shared-task dev set).
  SEVA needs a source text, which the canonical ``fever/fever`` rows do not carry (they hold
  Wikipedia sentence ids). ``lucadiliello/fever`` is that 19,998-row dev set with evidence
  sentences (retrieved by KGAT) and integer labels 0 SUPPORTS / 1 NOT ENOUGH INFO / 2 REFUTES (its
  dataset card). SUPPORTS -> attributable; REFUTES and NOT ENOUGH INFO -> not_attributable (the
  evidence either contradicts the claim or does not establish it). The FEVER label strings are
  accepted too, as are evidence items that are ``[title, sentence_id, text]`` lists (the
  ``copenlu/fever_gold_evidence`` layout: the last string is used). Evidence sentences are joined
  by newlines.
* **HaluEval** (§3.1; Table 12: 10,000 rows, 50.0% attributable). ``pminervini/HaluEval`` config
  ``qa_samples`` (split ``data``) holds the 10,000 QA items with one answer each, the right or the
  hallucinated one, and ``hallucination: "yes"|"no"``. The knowledge paragraph is the source; the
  claim is ``"{question} Answer: {answer}"`` (an answer alone is not a checkable claim; question and
  answer are kept in ``meta``). hallucination "no" -> attributable, "yes" -> not_attributable.
* **TruthfulQA** (§3.1: 400 stratified samples of 817, Table 12 49.5% attributable; Lin et al.
  2022). The paper does not say how a question-answering benchmark becomes claim/source pairs;
  TruthfulQA has no source text (its ``source`` field is a URL, kept in ``meta``). Our
  construction: the source is the question with its reference answers ("Question: ...\nCorrect
  answers: best; other correct answers", "I have no comment" dropped), so a claim can be checked
  against the source alone, as SEVA's §3.1 discussion requires ("distinguish common
  misconceptions from factual claims" by grounding rather than by what "sounds right"). Each of
  the 817 questions gives one pair, its label fixed by the parity of the MD5 of the question
  (stable across file order and subsets, about half each): attributable -> the claim states the
  best answer; not attributable -> the first incorrect answer, a common misconception. The
  error type is unknown (``None``), as for the other benchmarks.
* **ANLI** (§2.4: SFT annotations and GRPO prompts are ANLI examples; Table 11: about 51%
  attributable, i.e. rebalanced from ANLI's own distribution). ``facebook/anli`` (default config
  ``plain_text``), split ``train_r1`` by default since the paper trains on ANLI (pass
  ``split="dev_r1"`` etc. for others). Premise -> source, hypothesis -> claim. The label follows
  Table 13 (``seva.normalize_label``): entailment -> attributable, neutral and contradiction ->
  not_attributable.

No benchmark row says which Table 20 error a negative pair shows, so ``error_type`` is ``None`` for
all of them; the original label is kept in ``meta["original_label"]``.

Stratified sampling (B.2): "Auxiliary benchmarks are stratified-sampled to 200 samples each ...,
preserving label distribution", while Table 12 reports 50.0% attributable for the sampled FEVER
and HaluEval sets (FEVER's own split is one third SUPPORTS). We read this as sampling *balanced*
labels, which is ``stratified_sample``'s default (``proportional=True`` keeps each dataset's own
label mix instead). When the pairs come from several datasets, each dataset also gets an equal
share. ``load_pairs(..., limit=n)`` applies it (``stratify=False``: a plain random subset).

Mini-world pairs made by SEVA's Table 19 perturbation strategies are synthesized data: see
``factlab.synth.perturbations``.
"""

from __future__ import annotations

import hashlib
import random
from collections import Counter
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Annotated, Any, Callable, Iterable, Mapping, Sequence

from pydantic import Field, field_validator

from ..config import Section
from ..labels import ERROR_TYPES, LABELS, STRATEGIES, normalize_label
from .rows import MissingField, hub_rows, lookup, miniworld_split, registered_name, require, row_id
from .types import read_jsonl

__all__ = [
    "ClaimPair",
    "PairDataConfig",
    "PairSpec",
    "PAIR_DATASETS",
    "PairLoadError",
    "load_pairs",
    "truthfulqa_label",
    "stratified_sample",
    "strategy_counts",
    "label_counts",
]

MINIWORLD = "miniworld"


# --------------------------------------------------------------------------- record


@dataclass
class ClaimPair:
    """One claim, its source text and the gold attribution label.

    ``error_type`` (one of ``labels.ERROR_TYPES``) and ``strategy`` (one of :data:`STRATEGIES`) are
    set on perturbed pairs; an attributable pair never has an error type (Appendix H).
    """

    id: str
    claim: str
    source: str
    label: str
    dataset: str = ""
    error_type: str | None = None
    strategy: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.label not in LABELS:
            raise ValueError(f"ClaimPair {self.id!r}: label must be one of {LABELS}, got {self.label!r}")
        if self.error_type is not None and self.error_type not in ERROR_TYPES:
            raise ValueError(f"ClaimPair {self.id!r}: error_type must be None or one of "
                             f"{ERROR_TYPES}, got {self.error_type!r}")
        if self.error_type is not None and self.label == "attributable":
            raise ValueError(f"ClaimPair {self.id!r}: an attributable pair has no error_type "
                             f"(got {self.error_type!r})")
        if self.strategy is not None and self.strategy not in STRATEGIES:
            raise ValueError(f"ClaimPair {self.id!r}: strategy must be None or one of "
                             f"{STRATEGIES}, got {self.strategy!r}")

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "ClaimPair":
        """Inverse of :meth:`to_dict`; the label may be any Table 13 alias ("yes", "entailment")."""
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"ClaimPair.from_dict: unknown field(s) {unknown}; known: {sorted(known)}")
        missing = [k for k in ("id", "claim", "source", "label") if k not in d]
        if missing:
            raise ValueError(f"ClaimPair.from_dict: missing field(s) {missing}")
        data = dict(d)
        label = normalize_label(data["label"])
        if label is None:
            raise ValueError(f"ClaimPair.from_dict: unreadable label {data['label']!r}")
        data["label"] = label
        data["meta"] = dict(data.get("meta") or {})
        return cls(**data)


def label_counts(pairs: Iterable[ClaimPair]) -> dict[str, int]:
    """``{"attributable": n, "not_attributable": m}``."""
    c = Counter(p.label for p in pairs)
    return {lab: c.get(lab, 0) for lab in LABELS}


def strategy_counts(pairs: Iterable[ClaimPair]) -> dict[str, int]:
    """Pairs per perturbation strategy, every Table 19 strategy listed (0 if absent).

    Unperturbed pairs (``strategy=None``) are not counted.
    """
    c = Counter(p.strategy for p in pairs if p.strategy is not None)
    out = {s: c.get(s, 0) for s in STRATEGIES}
    out.update({s: n for s, n in sorted(c.items()) if s not in out})
    return out


# --------------------------------------------------------------------------- registry


class PairLoadError(RuntimeError):
    """The pair dataset could not be loaded from the Hugging Face hub (or its cache)."""


@dataclass(frozen=True)
class PairSpec:
    name: str
    hf_id: str
    hf_config: str | None
    split: str
    to_pair: Callable[[dict, int], ClaimPair]


def _text(row: Mapping, key: str) -> str:
    value = require(row, key)
    if not isinstance(value, str):
        raise ValueError(f"field '{key}' should be a string, got {type(value).__name__}")
    return value.strip()


def _map_label(value: Any, field_name: str, by_int: Mapping[int, str] | None,
               by_str: Mapping[str, str]) -> tuple[str, Any]:
    """(canonical label, original label name) from an int class id or a label string."""
    if isinstance(value, bool):
        raise ValueError(f"field '{field_name}' should be a label, got a boolean {value!r}")
    if isinstance(value, int) and by_int is not None:
        if value in by_int:
            name = by_int[value]
            return by_str[name.casefold()], name
        raise ValueError(f"field '{field_name}' has unknown class id {value!r}; "
                         f"known: {', '.join(f'{k} ({v})' for k, v in by_int.items())}")
    if isinstance(value, str):
        key = " ".join(value.replace("_", " ").split()).casefold()
        if key in by_str:
            return by_str[key], value.strip()
    allowed = sorted({k for k in by_str})
    raise ValueError(f"field '{field_name}' has unknown label {value!r}; known: {allowed}")


def _join_texts(value: Any, field_name: str, sep: str) -> str:
    """A string, or a list of strings / ``[title, id, text]`` lists, joined by ``sep``."""
    if isinstance(value, str):
        return value.strip()
    if not isinstance(value, (list, tuple)):
        raise ValueError(f"field '{field_name}' should be a string or a list, "
                         f"got {type(value).__name__}")
    parts: list[str] = []
    for item in value:
        if isinstance(item, (list, tuple)):  # [title, sentence_id, text]
            strings = [x for x in item if isinstance(x, str)]
            item = strings[-1] if strings else None
        if item is None:
            continue
        if not isinstance(item, str):
            raise ValueError(f"field '{field_name}' holds a {type(item).__name__}, expected text")
        if item.strip():
            parts.append(item.strip())
    return sep.join(parts)


# ClearFacts: S / NS (the ClearFacts repository's label system).
_CLEARFACTS_LABELS = {"s": "attributable", "supported": "attributable",
                      "ns": "not_attributable", "not supported": "not_attributable"}
# FEVER: lucadiliello/fever's integer coding (dataset card) and the FEVER strings.
_FEVER_IDS = {0: "SUPPORTS", 1: "NOT ENOUGH INFO", 2: "REFUTES"}
_FEVER_LABELS = {"supports": "attributable", "refutes": "not_attributable",
                 "not enough info": "not_attributable"}
# HaluEval qa_samples: hallucination yes / no.
_HALUEVAL_LABELS = {"no": "attributable", "yes": "not_attributable"}
# ANLI: ClassLabel names [entailment, neutral, contradiction]; mapping as Table 13.
_NLI_IDS = {0: "entailment", 1: "neutral", 2: "contradiction"}
_NLI_LABELS = {"entailment": "attributable", "neutral": "not_attributable",
               "contradiction": "not_attributable"}


def _clearfacts_pair(row: dict, idx: int) -> ClaimPair:
    label_raw = require(row, "label")
    if isinstance(label_raw, str) and label_raw.strip().upper() == "AMBIG":
        raise ValueError("field 'label' is 'AMBIG' (a GrayFacts label); ClearFacts rows are S or NS")
    label, original = _map_label(label_raw, "label", None, _CLEARFACTS_LABELS)
    meta: dict[str, Any] = {"original_label": original}
    for k in ("topic", "category", "additional_info"):
        if row.get(k) not in (None, "", {}):
            meta[k] = row[k]
    return ClaimPair(
        id=row_id("clearfacts", row, "id", idx),
        claim=_text(row, "statement"),
        source=_join_texts(require(row, "reference_documents"), "reference_documents", "\n\n"),
        label=label,
        dataset="clearfacts",
        meta=meta,
    )


def _fever_pair(row: dict, idx: int) -> ClaimPair:
    label, original = _map_label(require(row, "label"), "label", _FEVER_IDS, _FEVER_LABELS)
    key = "key" if row.get("key") not in (None, "") else "id"
    return ClaimPair(
        id=row_id("fever", row, key, idx),
        claim=_text(row, "claim"),
        source=_join_texts(require(row, "evidence"), "evidence", "\n"),
        label=label,
        dataset="fever",
        meta={"original_label": original},
    )


def _halueval_pair(row: dict, idx: int) -> ClaimPair:
    raw = require(row, "hallucination")
    if isinstance(raw, bool):  # a JSON true / false copy
        raw = "yes" if raw else "no"
    label, original = _map_label(raw, "hallucination", None, _HALUEVAL_LABELS)
    question, answer = _text(row, "question"), _text(row, "answer")
    return ClaimPair(
        id=row_id("halueval", row, "id", idx),
        claim=f"{question} Answer: {answer}",
        source=_text(row, "knowledge"),
        label=label,
        dataset="halueval",
        meta={"original_label": original, "question": question, "answer": answer},
    )


_NO_COMMENT = "i have no comment"


def _answer_list(row: Mapping, key: str) -> list[str]:
    value = require(row, key)
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
        raise ValueError(f"field '{key}' should be a list of strings")
    out: list[str] = []
    for v in value:
        v = v.strip()
        if v and v.casefold() != _NO_COMMENT and v not in out:
            out.append(v)
    return out


def truthfulqa_label(question: str) -> str:
    """The label a TruthfulQA question's pair gets: parity of the MD5 of the stripped question."""
    digest = hashlib.md5(question.strip().encode("utf-8")).hexdigest()
    return "attributable" if int(digest, 16) % 2 == 0 else "not_attributable"


def _truthfulqa_pair(row: dict, idx: int) -> ClaimPair:
    question = _text(row, "question")
    best = _text(row, "best_answer")
    correct = _answer_list(row, "correct_answers")
    incorrect = _answer_list(row, "incorrect_answers")
    references = ([best] if best.casefold() != _NO_COMMENT else []) + [c for c in correct if c != best]
    if not references:
        raise ValueError("no correct answer other than 'I have no comment'; nothing to attribute to")
    label = truthfulqa_label(question)
    if label == "attributable":
        answer = references[0]
    elif incorrect:
        answer = incorrect[0]
    else:
        raise ValueError("field 'incorrect_answers' is empty; the not-attributable pair needs one")
    meta: dict[str, Any] = {"question": question, "answer": answer}
    for k in ("category", "type", "source"):
        if row.get(k) not in (None, ""):
            meta[k] = row[k]
    return ClaimPair(
        id=row_id("truthfulqa", row, None, idx),
        claim=f"{question} Answer: {answer}",
        source=f"Question: {question}\nCorrect answers: {'; '.join(references)}",
        label=label,
        dataset="truthfulqa",
        meta=meta,
    )


def _anli_pair(row: dict, idx: int) -> ClaimPair:
    label, original = _map_label(require(row, "label"), "label", _NLI_IDS, _NLI_LABELS)
    meta: dict[str, Any] = {"original_label": original}
    if row.get("reason") not in (None, ""):
        meta["reason"] = row["reason"]
    return ClaimPair(
        id=row_id("anli", row, "uid", idx),
        claim=_text(row, "hypothesis"),
        source=_text(row, "premise"),
        label=label,
        dataset="anli",
        meta=meta,
    )


PAIR_DATASETS: dict[str, PairSpec] = {
    s.name: s
    for s in (
        PairSpec("clearfacts", "just1nseo/ClearFacts", None, "train", _clearfacts_pair),
        PairSpec("fever", "lucadiliello/fever", None, "dev", _fever_pair),
        PairSpec("halueval", "pminervini/HaluEval", "qa_samples", "data", _halueval_pair),
        PairSpec("truthfulqa", "truthfulqa/truthful_qa", "generation", "validation", _truthfulqa_pair),
        PairSpec("anli", "facebook/anli", None, "train_r1", _anli_pair),
    )
}


class PairDataConfig(Section):
    """Claim/source pairs in params: ``miniworld`` (Table 19 perturbations of the mini-world's
    facts, ``factlab.synth.perturbations``) or a registered dataset (clearfacts, fever,
    halueval, truthfulqa, anli) by HF id or local JSONL."""

    name: Annotated[str, registered_name(lambda: [MINIWORLD, *PAIR_DATASETS], "pair dataset")] = MINIWORLD
    path: str | None = None
    hf_id: str | None = None
    split: str | None = None
    limit: int | None = Field(None, ge=2)
    seed: int = 0

    @field_validator("split")
    @classmethod
    def _split(cls, split: str | None, info) -> str | None:
        return miniworld_split(split, info.data.get("name"), allow_none=True)


# --------------------------------------------------------------------------- loading


def load_pairs(
    name: str,
    path: str | Path | None = None,
    hf_id: str | None = None,
    split: str | None = None,
    limit: int | None = None,
    seed: int = 0,
    stratify: bool = True,
) -> list[ClaimPair]:
    """Load pair dataset ``name`` (a key of :data:`PAIR_DATASETS`) as :class:`ClaimPair` s.

    ``path``: a local JSONL file whose rows use the HF dataset's field names (``hf_id`` and
    ``split`` are then ignored); otherwise ``datasets.load_dataset(hf_id or spec.hf_id,
    spec.hf_config, split=split or spec.split)``. ``limit``: keep that many pairs, by
    :func:`stratified_sample` (balanced labels, B.2) when ``stratify`` else a plain
    ``random.Random(seed)`` subset; either way in their original order. Ids are
    ``"<name>/<the row's id field or its index>"``, made unique with ``#<index>`` if a raw id
    repeats. Errors name the file and line (or hub row) and the missing or bad field.
    """
    spec = lookup(PAIR_DATASETS, name, "pair dataset")
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    if path:
        rows: Iterable[tuple[str, Any]] = ((f"{path}, line {n}", row) for n, row in read_jsonl(path, numbered=True))
    else:
        hf_id, split = hf_id or spec.hf_id, split or spec.split
        rows = ((f"{hf_id}[{split}] row {i}", row) for i, row in enumerate(
            hub_rows("pair dataset", name, hf_id, spec.hf_config, split, PairLoadError, "load_pairs")))

    pairs: list[ClaimPair] = []
    seen: set[str] = set()
    for idx, (where, row) in enumerate(rows):
        prefix = f"pair dataset '{name}' ({where})"
        if not isinstance(row, Mapping):
            raise ValueError(f"{prefix}: row is not an object (got {type(row).__name__})")
        try:
            pair = spec.to_pair(dict(row), idx)
        except MissingField as e:
            raise ValueError(f"{prefix}: missing required field '{e.field}'") from None
        except ValueError as e:
            raise ValueError(f"{prefix}: {e}") from None
        if not pair.claim:
            raise ValueError(f"{prefix}: the claim is empty")
        if not pair.source:
            raise ValueError(f"{prefix}: the source text is empty")
        if pair.id in seen:
            pair.id = f"{pair.id}#{idx}"
        seen.add(pair.id)
        pairs.append(pair)

    if limit is not None and len(pairs) > limit:
        if stratify:
            return stratified_sample(pairs, limit, seed=seed)
        keep = sorted(random.Random(seed).sample(range(len(pairs)), limit))
        pairs = [pairs[i] for i in keep]
    return pairs


# --------------------------------------------------------------------------- sampling


def _largest_remainder(n: int, sizes: Sequence[int]) -> list[int]:
    """Integer quotas summing to ``min(n, sum(sizes))``, proportional to ``sizes``."""
    total = sum(sizes)
    n = min(n, total)
    if total == 0:
        return [0] * len(sizes)
    raw = [n * s / total for s in sizes]
    quotas = [int(r) for r in raw]
    order = sorted(range(len(sizes)), key=lambda i: (-(raw[i] - quotas[i]), i))
    for i in order[: n - sum(quotas)]:
        quotas[i] += 1
    return quotas


def stratified_sample(pairs: Sequence[ClaimPair], n: int, seed: int = 0,
                      proportional: bool = False) -> list[ClaimPair]:
    """A deterministic sample of ``min(n, len(pairs))`` pairs, in their original order.

    Default (B.2 / Table 12's 50.0%): balanced labels. Strata are (dataset, label); units go one
    at a time to the stratum whose dataset has the fewest so far, then whose (dataset, label) has
    the fewest, then whose label has the fewest overall (ties in a ``seed``-shuffled order), and
    only to strata with pairs left. Hence dataset shares, per-dataset label counts and overall
    label counts each differ by at most one unless a stratum runs out, whose shortfall goes to
    the others. ``proportional=True`` keeps each (dataset, label) stratum's share of the input
    instead (largest-remainder rounding). Within a stratum, pairs are drawn uniformly.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    if n >= len(pairs):
        return list(pairs)
    rng = random.Random(seed)
    strata: dict[tuple[str, str], list[int]] = {}
    for i, p in enumerate(pairs):
        strata.setdefault((p.dataset, p.label), []).append(i)
    keys = sorted(strata)
    if proportional:
        quotas = dict(zip(keys, _largest_remainder(n, [len(strata[k]) for k in keys])))
    else:
        rank = {k: r for r, k in enumerate(rng.sample(keys, len(keys)))}
        per_ds: Counter = Counter()
        per_label: Counter = Counter()
        quotas = {k: 0 for k in keys}
        for _ in range(n):
            open_keys = [k for k in keys if quotas[k] < len(strata[k])]
            k = min(open_keys, key=lambda k: (per_ds[k[0]], quotas[k], per_label[k[1]], rank[k]))
            quotas[k] += 1
            per_ds[k[0]] += 1
            per_label[k[1]] += 1
    keep: list[int] = []
    for k in keys:
        keep.extend(rng.sample(strata[k], quotas[k]))
    return [pairs[i] for i in sorted(keep)]

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

Mini-world pairs (§2.5 Probe, Appendix F, Tables 19-20)
--------------------------------------------------------

``miniworld_pairs`` turns the true facts of the offline mini-world (``miniworld.ensure_world``)
into attributable pairs and applies the six Table 19 strategies to *other* true facts to make
not-attributable ones. A base fact is one (country, relation, object) with relation one of
``miniworld.RELATIONS`` plus ``population`` / ``area`` (the only numbers, formatted as in the
article). Its source is a 1-3 sentence excerpt of the country's article that contains the
sentence stating the fact (``source="article"``: the whole article). Each base fact yields its
attributable pair and exactly one perturbation, with the same source, so the labels are balanced
1:1 and every negative has a contrastive positive twin (``meta["base_id"]``).

======================  ======================  ==================================================
strategy (Table 19)     error_type (Table 20)   what it does to a true fact
======================  ======================  ==================================================
entity_confusion        entity_substitution     swaps the subject for another country (same
                                                subregion first) whose own value differs and which
                                                the source does not mention: "The capital of
                                                Belgium is Paris."
numerical_perturbation  numerical_exaggeration  population / area inflated or deflated by a factor
                                                in [1.5, 4]: "The population of France is
                                                163,469,500."
multi_hop_graft         entity_substitution     grafts the same relation's value from a bordering
                                                country (for ``borders``: a neighbour's neighbour):
                                                "The capital of France is Madrid.", "France borders
                                                Portugal."
paraphrase              negation_flip           meaning-changing rewording, announced -> denied:
                                                "France does not border Spain.", "Paris is not the
                                                capital of France.", "France lies outside Europe."
presupposition          scope_inflation         adds a superlative / exclusive presupposition that
                                                is false in the mini-world (checked against the
                                                facts) and absent from the source: "..., the largest
                                                population of any country in Western Europe",
                                                "French is the only official language of Belgium."
unanswerable_wrap       fabrication             wraps the true fact in an unverifiable qualifier the
                                                source lacks: "..., according to the 2011 national
                                                census", "According to a 1987 government report,
                                                ...", "..., spoken natively by 71% of the
                                                population."
======================  ======================  ==================================================

Why these error types: Table 20 defines entity substitution as "entity swapped for a different
one", which is what both entity confusion and the multi-hop graft produce (the graft's entity is a
related one, the harder case). "Announced -> denied" flips the polarity of the predicate
(negation flip). Table 19's presupposition "rose by 2°C, highest on record" widens a specific
claim into a superlative one (scope inflation: "specific claim overgeneralized"). The unanswerable
wrap ("results significant at p<0.001") adds detail the source never gives (fabrication:
"information absent from source"). No strategy produces ``temporal_shift``: the mini-world has no
dates.

Allocation: every base fact is used by at most one strategy. The strategies take turns (round
robin, in a seeded order) drawing their next candidate in a seeded shuffle; ``per_strategy=None``
gives every strategy the same count, the largest all six can fill (the "naive" equal allocation
of §2.5); an int caps each strategy; a mapping ``{strategy: n}`` gives the weakness-guided
allocation of the Probe stage (a strategy that runs out of candidates stops early;
``strategy_counts`` reports what was made). Everything is deterministic given ``seed``.
"""

from __future__ import annotations

import hashlib
import random
import re
from collections import Counter
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

from ..rewards.seva import ERROR_TYPES, normalize_label
from . import miniworld as mw
from .rows import MissingField, hub_rows, lookup, require, row_id
from .types import read_jsonl

__all__ = [
    "LABELS",
    "STRATEGIES",
    "STRATEGY_ERROR_TYPES",
    "ClaimPair",
    "PairSpec",
    "PAIR_DATASETS",
    "PairLoadError",
    "load_pairs",
    "truthfulqa_label",
    "stratified_sample",
    "miniworld_pairs",
    "strategy_counts",
    "label_counts",
]

LABELS = ("attributable", "not_attributable")
# Table 19, in its order; names snake_case.
STRATEGIES = ("entity_confusion", "numerical_perturbation", "multi_hop_graft", "paraphrase",
              "presupposition", "unanswerable_wrap")
STRATEGY_ERROR_TYPES: Mapping[str, str] = {
    "entity_confusion": "entity_substitution",
    "numerical_perturbation": "numerical_exaggeration",
    "multi_hop_graft": "entity_substitution",
    "paraphrase": "negation_flip",
    "presupposition": "scope_inflation",
    "unanswerable_wrap": "fabrication",
}
MINIWORLD = "miniworld"


# --------------------------------------------------------------------------- record


@dataclass
class ClaimPair:
    """One claim, its source text and the gold attribution label.

    ``error_type`` (one of ``seva.ERROR_TYPES``) and ``strategy`` (one of :data:`STRATEGIES`) are
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


# --------------------------------------------------------------------------- mini-world

NUMERIC_RELATIONS = ("population", "area")
FACT_RELATIONS = (*mw.RELATIONS, *NUMERIC_RELATIONS)


@dataclass
class _Base:
    """One true fact with its source, the seed of an attributable pair and of one perturbation."""

    id: str
    country: mw.CountryFacts
    relation: str
    obj: str
    claim: str
    source: str
    source_norm: str
    order: int


def _values(c: mw.CountryFacts, rel: str) -> list[str]:
    if rel == "population":
        return [mw._fmt_number(c.population)] if c.population else []
    if rel == "area":
        return [mw._fmt_number(c.area)] if c.area else []
    return mw._relation_values(c, rel)


def _body(c: mw.CountryFacts, rel: str, obj: str, name: str | None = None) -> str:
    """The fact as a sentence without its final full stop (phrasing follows ``_claim_text``)."""
    n = name or c.name
    if rel == "capital":
        return f"The capital of {n} is {obj}"
    if rel == "region":
        return f"{n} is located in {mw._region_phrase(obj)}"
    if rel == "subregion":
        return f"{n} is located in {obj}"
    if rel == "currency":
        return (f"The official currency of {n} is the {obj}" if len(c.currencies) == 1
                else f"The {obj} is an official currency of {n}")
    if rel == "language":
        return (f"The official language of {n} is {obj}" if len(c.languages) == 1
                else f"{obj} is an official language of {n}")
    if rel == "borders":
        return f"{n} borders {obj}"
    if rel == "demonym":
        return f"The demonym for people from {n} is {obj}"
    if rel == "population":
        return f"The population of {n} is {obj}"
    if rel == "area":
        return f"The area of {n} is {obj} square kilometres"
    raise ValueError(f"unknown relation {rel!r}")


def _lcfirst_the(body: str) -> str:
    return "the " + body[4:] if body.startswith("The ") else body


def _fact_sentence_prefix(c: mw.CountryFacts, rel: str) -> str:
    """How the article sentence stating ``rel`` starts (``miniworld.article_text``)."""
    n = c.name
    return {
        "capital": f"The capital of {n} is ",
        "region": f"{n} is located in ",
        "subregion": f"{n} is located in ",
        "currency": f"The official currenc",
        "language": f"The official language",
        "borders": f"{n} borders ",
        "demonym": "The demonym for people from ",
        "population": f"{n} has a population of ",
        "area": f"{n} has an area of ",
    }[rel]


def _article_sentences(text: str, name: str) -> list[str]:
    """Every article sentence starts with "The " or the entity's name (``article_text``)."""
    return re.split(r"(?<=\.) (?=(?:The |" + re.escape(name) + r" ))", text)


def _excerpt(sentences: list[str], i: int, rng: random.Random) -> str:
    """1-3 consecutive sentences, sentence ``i`` among them."""
    k = min(rng.choice((1, 2, 3)), len(sentences))
    start = rng.randint(max(0, i - k + 1), min(i, len(sentences) - k))
    return " ".join(sentences[start:start + k])


def _load_world(world_paths: Mapping[str, Any] | str | Path) -> tuple[list[mw.CountryFacts], dict[str, str]]:
    if isinstance(world_paths, (str, Path)):
        world_paths = mw.world_paths(world_paths)
    for key in ("facts", "corpus"):
        if key not in world_paths:
            raise ValueError(f"miniworld_pairs: world_paths has no '{key}' file "
                             f"(expected the dict of miniworld.ensure_world())")
    countries = [mw.CountryFacts.from_dict(d) for d in read_jsonl(world_paths["facts"])]
    docs = {d["id"]: d["text"] for d in read_jsonl(world_paths["corpus"])}
    return countries, docs


def _bases(countries: Sequence[mw.CountryFacts], docs: Mapping[str, str], seed: int,
           source_mode: str) -> list[_Base]:
    bases: list[_Base] = []
    for c in countries:
        article = docs.get(c.doc_id) or mw.article_text(c)
        sentences = _article_sentences(article, c.name)
        for rel in FACT_RELATIONS:
            values = _values(c, rel)
            if not values:
                continue
            rng = random.Random(f"{seed}/base/{c.doc_id}/{rel}")
            obj = values[0] if len(values) == 1 else rng.choice(values)
            prefix = _fact_sentence_prefix(c, rel)
            idx = next((i for i, s in enumerate(sentences) if s.startswith(prefix)), None)
            if source_mode == "article" or idx is None:
                source = article
            else:
                source = _excerpt(sentences, idx, rng)
            source_norm = mw._norm(source)
            if not (mw._mentions(source_norm, obj) and mw._mentions(source_norm, c.name)):
                continue  # never expected: the fact must be readable off its source
            bases.append(_Base(
                id=f"{MINIWORLD}/{c.slug}/{rel}", country=c, relation=rel, obj=obj,
                claim=mw._end(_body(c, rel, obj)), source=source, source_norm=source_norm,
                order=len(bases),
            ))
    return bases


class _World:
    """Lookups the strategies share."""

    def __init__(self, countries: Sequence[mw.CountryFacts]):
        self.countries = list(countries)
        self.by_name = {c.name: c for c in countries}
        self.by_subregion: dict[str, list[mw.CountryFacts]] = {}
        self.by_region: dict[str, list[mw.CountryFacts]] = {}
        for c in countries:
            if c.subregion:
                self.by_subregion.setdefault(c.subregion, []).append(c)
            if c.region:
                self.by_region.setdefault(c.region, []).append(c)

    @staticmethod
    def is_max(c: mw.CountryFacts, group: Sequence[mw.CountryFacts], attr: str) -> bool | None:
        """Whether ``c`` has the largest ``attr`` of its group; None if undecidable."""
        mine = getattr(c, attr)
        others = [getattr(o, attr) for o in group if o is not c and getattr(o, attr) is not None]
        if mine is None or not others:
            return None
        return mine >= max(others)


def _fresh(b: _Base, text: str) -> bool:
    """A phrase the source does not contain (word-wise, normalized)."""
    return not mw._mentions(b.source_norm, text)


def _entity_confusion(b: _Base, w: _World, rng: random.Random) -> tuple[str, dict] | None:
    c, rel, obj = b.country, b.relation, b.obj

    def ok(o: mw.CountryFacts) -> bool:
        values = _values(o, rel)  # o must have its own, different value: the swap is false
        if o is c or not values or any(v == obj or mw._overlaps(v, obj) for v in values):
            return False
        return not (mw._overlaps(o.name, c.name) or mw._overlaps(o.name, obj)) and _fresh(b, o.name)

    tiers = [w.by_subregion.get(c.subregion or "", []), w.by_region.get(c.region or "", []), w.countries]
    for tier in tiers:  # the first acceptable country of a seeded shuffle, nearest tier first
        order = sorted(tier, key=lambda o: o.name)
        rng.shuffle(order)
        o = next((o for o in order if ok(o)), None)
        if o is not None:
            return mw._end(_body(c, rel, obj, name=o.name)), {"confused_with": o.name}
    return None


def _numerical_perturbation(b: _Base, w: _World, rng: random.Random) -> tuple[str, dict] | None:
    c, rel = b.country, b.relation
    if rel not in NUMERIC_RELATIONS:
        return None
    x = c.population if rel == "population" else c.area
    if not x:
        return None
    integral = rel == "population" or float(x).is_integer()
    for _ in range(20):
        factor = rng.uniform(1.5, 4.0)
        up = rng.random() < 0.5
        y = x * factor if up else x / factor
        y = int(round(y)) if integral else round(y, 2)
        if y <= 0 or y == x:
            continue
        text = mw._fmt_number(y)
        if not _fresh(b, text) or str(y).replace(".", "") in b.source.replace(",", "").replace(".", ""):
            continue
        return (mw._end(_body(c, rel, text)),
                {"true_value": x, "perturbed_value": y, "direction": "inflated" if up else "deflated",
                 "factor": round(y / x, 3)})
    return None


def _multi_hop_graft(b: _Base, w: _World, rng: random.Random) -> tuple[str, dict] | None:
    c, rel = b.country, b.relation
    if rel in NUMERIC_RELATIONS:
        return None
    own = _values(c, rel)
    neighbours = [w.by_name[n] for n in c.borders if n in w.by_name]
    via: dict[str, str] = {}
    for nb in sorted(neighbours, key=lambda o: o.name):
        vals = nb.borders if rel == "borders" else _values(nb, rel)
        for v in vals:
            via.setdefault(v, nb.name)
    if rel == "borders":
        for v in [c.name, *c.borders]:
            via.pop(v, None)
    cands = sorted(
        v for v in via
        if not any(mw._overlaps(v, t) for t in own) and not mw._overlaps(v, c.name) and _fresh(b, v)
    )
    if not cands:
        return None
    v = rng.choice(cands)
    return mw._end(_body(c, rel, v)), {"grafted_object": v, "via": via[v]}


def _paraphrase(b: _Base, w: _World, rng: random.Random) -> tuple[str, dict] | None:
    c, rel, obj, n = b.country, b.relation, b.obj, b.country.name
    if rel == "capital":
        variants = [f"The capital of {n} is not {obj}", f"{obj} is not the capital of {n}"]
    elif rel in ("region", "subregion"):
        place = mw._region_phrase(obj) if rel == "region" else obj
        variants = [f"{n} is not located in {place}", f"{n} lies outside {place}"]
    elif rel == "currency":
        variants = ([f"The official currency of {n} is not the {obj}"] if len(c.currencies) == 1
                    else [f"The {obj} is not an official currency of {n}"])
        variants.append(f"{n} does not use the {obj} as an official currency")
    elif rel == "language":
        variants = ([f"The official language of {n} is not {obj}"] if len(c.languages) == 1
                    else [f"{obj} is not an official language of {n}"])
        variants.append(f"{obj} has no official status in {n}")
    elif rel == "borders":
        variants = [f"{n} does not border {obj}", f"{n} shares no border with {obj}"]
    elif rel == "demonym":
        variants = [f"The demonym for people from {n} is not {obj}"]
    else:
        return None
    return mw._end(rng.choice(variants)), {}


def _presupposition(b: _Base, w: _World, rng: random.Random) -> tuple[str, dict] | None:
    c, rel, obj, n = b.country, b.relation, b.obj, b.country.name
    body = _body(c, rel, obj)
    sub, region = c.subregion, c.region
    if rel in NUMERIC_RELATIONS and sub:
        if w.is_max(c, w.by_subregion[sub], rel) is False:
            noun = "population" if rel == "population" else "area"
            return (mw._end(f"{body}, the largest {noun} of any country in {sub}"),
                    {"presupposed": f"largest {noun} in {sub}"})
    elif rel == "region" and region:
        if w.is_max(c, w.by_region[region], "population") is False:
            return (mw._end(f"{body}, where it is the most populous country"),
                    {"presupposed": f"most populous in {region}"})
    elif rel == "subregion" and sub:
        if w.is_max(c, w.by_subregion[sub], "area") is False:
            return (mw._end(f"{body}, where it is the largest country by area"),
                    {"presupposed": f"largest by area in {sub}"})
    elif rel == "borders" and len(c.borders) >= 2:
        return mw._end(f"{body}, its only neighbouring country"), {"presupposed": "only neighbour"}
    elif rel == "language" and len(c.languages) >= 2:
        return mw._end(f"{obj} is the only official language of {n}"), {"presupposed": "only language"}
    elif rel == "currency" and len(c.currencies) >= 2:
        return mw._end(f"The {obj} is the only official currency of {n}"), {"presupposed": "only currency"}
    return None


def _unanswerable_wrap(b: _Base, w: _World, rng: random.Random) -> tuple[str, dict] | None:
    rel = b.relation
    body = _body(b.country, rel, b.obj)
    year = rng.randint(1950, 2023)
    options = [
        (f"According to a {year} government report, {_lcfirst_the(body)}", str(year)),
        (f"{body}, as confirmed by a {year} national survey", str(year)),
    ]
    if rel == "population":
        options.append((f"{body}, according to the {year} national census", str(year)))
    elif rel == "area":
        options.append((f"{body}, as measured by a {year} satellite survey", str(year)))
    elif rel == "language":
        pct = rng.randint(52, 97)
        options.append((f"{body}, spoken natively by {pct}% of the population", str(pct)))
    elif rel == "borders":
        km = rng.randint(120, 4800)
        options.append((f"{body}, along a frontier of {km:,} kilometres", f"{km:,}"))
    elif rel == "capital":
        options.append((f"{body}, which has held that status since {year}", str(year)))
    elif rel == "currency":
        options.append((f"{body}, in circulation since {year}", str(year)))
    text, added = rng.choice(options)
    if not _fresh(b, added):
        return None
    return mw._end(text), {"added_detail": added}


_STRATEGY_FNS: Mapping[str, Callable[[_Base, _World, random.Random], tuple[str, dict] | None]] = {
    "entity_confusion": _entity_confusion,
    "numerical_perturbation": _numerical_perturbation,
    "multi_hop_graft": _multi_hop_graft,
    "paraphrase": _paraphrase,
    "presupposition": _presupposition,
    "unanswerable_wrap": _unanswerable_wrap,
}


def _quotas(per_strategy: int | Mapping[str, int] | None) -> dict[str, int | None]:
    if per_strategy is None:
        return {s: None for s in STRATEGIES}
    if isinstance(per_strategy, Mapping):
        unknown = sorted(set(per_strategy) - set(STRATEGIES))
        if unknown:
            raise ValueError(f"per_strategy: unknown strategy {unknown}; known: {', '.join(STRATEGIES)}")
        out = {s: int(per_strategy.get(s, 0)) for s in STRATEGIES}
    else:
        out = {s: int(per_strategy) for s in STRATEGIES}
    bad = {s: q for s, q in out.items() if q < 0}
    if bad:
        raise ValueError(f"per_strategy counts must be >= 0, got {bad}")
    return out


def miniworld_pairs(
    world_paths: Mapping[str, Any] | str | Path,
    seed: int = 0,
    per_strategy: int | Mapping[str, int] | None = None,
    source: str = "excerpt",
) -> list[ClaimPair]:
    """Attributable and Table 19-perturbed pairs from the mini-world's true facts.

    ``world_paths``: the dict of ``miniworld.ensure_world()`` (or its directory). ``per_strategy``:
    ``None`` = the same number for every strategy, the most all six can fill; an int = at most
    that many each; a ``{strategy: n}`` mapping = weakness-guided counts (missing strategies get
    0). ``source``: ``"excerpt"`` (1-3 article sentences containing the fact) or ``"article"``.
    Returns, per used base fact in world order, its attributable pair then its perturbation: labels
    balanced 1:1, ids unique, the same list for the same arguments. See the module docstring for
    the strategies and their error types.
    """
    if source not in ("excerpt", "article"):
        raise ValueError(f"source must be 'excerpt' or 'article', got {source!r}")
    quotas = _quotas(per_strategy)
    countries, docs = _load_world(world_paths)
    world = _World(countries)
    bases = _bases(countries, docs, seed, source)

    # Every candidate perturbation, each with its own seeded rng (independent of allocation).
    candidates: dict[str, list[tuple[_Base, str, dict]]] = {}
    for s in STRATEGIES:
        fn = _STRATEGY_FNS[s]
        found: list[tuple[_Base, str, dict]] = []
        for b in bases:
            out = fn(b, world, random.Random(f"{seed}/{s}/{b.id}"))
            if out is None:
                continue
            claim, meta = out
            cn = mw._norm(claim)
            if cn == mw._norm(b.claim) or cn in b.source_norm:
                continue
            found.append((b, claim, meta))
        random.Random(f"{seed}/order/{s}").shuffle(found)
        candidates[s] = found

    # Round-robin allocation: each base fact feeds at most one strategy.
    rng = random.Random(seed)
    turn = rng.sample(STRATEGIES, len(STRATEGIES))
    used: set[str] = set()
    picked: dict[str, list[tuple[_Base, str, dict]]] = {s: [] for s in STRATEGIES}
    cursor = {s: 0 for s in STRATEGIES}
    active = [s for s in turn if quotas[s] is None or quotas[s] > 0]
    equal = per_strategy is None
    while active:
        for s in list(active):
            got = None
            while cursor[s] < len(candidates[s]):
                cand = candidates[s][cursor[s]]
                cursor[s] += 1
                if cand[0].id not in used:
                    got = cand
                    break
            if got is None:
                active.remove(s)
                if equal:  # equal counts: stop at the first strategy that runs dry
                    active = []
                    break
                continue
            used.add(got[0].id)
            picked[s].append(got)
            if quotas[s] is not None and len(picked[s]) >= quotas[s]:
                active.remove(s)
    if equal:
        k = min(len(v) for v in picked.values())
        picked = {s: v[:k] for s, v in picked.items()}

    rows: list[tuple[int, ClaimPair, ClaimPair]] = []
    for s in STRATEGIES:
        for b, claim, extra in picked[s]:
            c = b.country
            base_meta = {"entity": c.name, "relation": b.relation, "object": b.obj,
                         "doc_id": c.doc_id, "source_kind": source}
            true_pair = ClaimPair(id=f"{b.id}/true", claim=b.claim, source=b.source,
                                  label="attributable", dataset=MINIWORLD,
                                  meta={**base_meta, "perturbed_id": f"{b.id}/{s}"})
            bad_pair = ClaimPair(id=f"{b.id}/{s}", claim=claim, source=b.source,
                                 label="not_attributable", dataset=MINIWORLD,
                                 error_type=STRATEGY_ERROR_TYPES[s], strategy=s,
                                 meta={**base_meta, "base_id": f"{b.id}/true",
                                       "true_claim": b.claim, **extra})
            rows.append((b.order, true_pair, bad_pair))
    rows.sort(key=lambda r: r[0])
    return [p for _, t, f in rows for p in (t, f)]

"""Registry of the five short-form QA benchmarks of the CorVer paper (000 §4, §A.2).

Each benchmark is a :class:`BenchmarkSpec` naming its default Hugging Face dataset, the
split the paper evaluates on, and a ``to_item`` function that maps one row of that
dataset (with the dataset's own field names) to a :class:`~factlab.data.types.QAItem`.

``load_benchmark(name, path=...)`` reads a local JSONL file whose rows use the *same*
field names as the HF rows, so the same mapping runs offline and online. Without
``path`` it calls ``datasets.load_dataset`` (imported lazily).

=============  ===================================  ==============  ==========  =======
name           HF id                                config          split       paper n
=============  ===================================  ==============  ==========  =======
triviaqa       mandarjoshi/trivia_qa                rc.nocontext    validation  17,944
nq_open        google-research-datasets/nq_open     —               validation   3,610
popqa          akariasai/PopQA                      —               test        14,267
simpleqa       basicv8vc/SimpleQA                   —               test         4,326
truthfulqa     truthfulqa/truthful_qa               generation      validation     817
=============  ===================================  ==============  ==========  =======
"""

from __future__ import annotations

import ast
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping

from .rows import MissingField, hub_rows, lookup, require, row_id
from .types import QAItem, read_jsonl

__all__ = ["BenchmarkSpec", "BENCHMARKS", "BenchmarkLoadError", "load_benchmark"]


class BenchmarkLoadError(RuntimeError):
    """The benchmark could not be loaded from the Hugging Face hub (or its cache)."""


@dataclass(frozen=True)
class BenchmarkSpec:
    name: str
    hf_id: str
    hf_config: str | None
    split: str
    to_item: Callable[[dict, int], QAItem]


# --------------------------------------------------------------------------- helpers


def _dedupe(values: Iterable[Any]) -> list[str]:
    """Strings in first-seen order, stripped, without empties or exact repeats."""
    out: list[str] = []
    seen: set[str] = set()
    for v in values:
        if v is None:
            continue
        s = str(v).strip()
        if s and s not in seen:
            seen.add(s)
            out.append(s)
    return out


def _as_list(value: Any, field: str) -> list:
    if isinstance(value, (list, tuple)):
        return list(value)
    raise ValueError(f"field '{field}' should be a list, got {type(value).__name__}")


def _parse_str_list(value: Any, field: str) -> list:
    """A list, or a JSON-encoded list string (PopQA), or a Python-repr list string."""
    if isinstance(value, (list, tuple)):
        return list(value)
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            try:
                parsed = ast.literal_eval(value)
            except (ValueError, SyntaxError):
                raise ValueError(f"field '{field}' is not a JSON list: {value!r}") from None
        if isinstance(parsed, str):
            parsed = [parsed]
        if isinstance(parsed, (list, tuple)):
            return list(parsed)
    raise ValueError(f"field '{field}' should be a list or JSON list string, got {value!r}")


def _parse_metadata(value: Any) -> Any:
    """SimpleQA's ``metadata`` is a Python-dict repr string in the CSV / HF copy."""
    if isinstance(value, str):
        for parse in (json.loads, ast.literal_eval):
            try:
                return parse(value)
            except (ValueError, SyntaxError):
                continue
    return value


def _float_or_none(value: Any) -> float | None:
    if value is None or value == "":
        return None
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return None if f != f else f  # NaN -> None


# --------------------------------------------------------------------------- mappings


def _triviaqa_item(row: dict, idx: int) -> QAItem:
    answer = require(row, "answer")
    if not isinstance(answer, dict):
        raise ValueError(f"field 'answer' should be a dict, got {type(answer).__name__}")
    value = require(answer, "value")
    aliases = _as_list(answer.get("aliases") or [], "answer.aliases")
    meta = {k: answer[k] for k in ("normalized_value", "type", "matched_wiki_entity_name")
            if answer.get(k) not in (None, "")}
    if answer.get("normalized_aliases"):
        meta["normalized_aliases"] = list(answer["normalized_aliases"])
    if row.get("question_source"):
        meta["question_source"] = row["question_source"]
    return QAItem(
        id=row_id("triviaqa", row, "question_id", idx),
        question=str(require(row, "question")).strip(),
        golds=_dedupe([value, *aliases]),
        source="triviaqa",
        meta=meta,
    )


def _nq_open_item(row: dict, idx: int) -> QAItem:
    answers = _as_list(require(row, "answer"), "answer")
    return QAItem(
        id=row_id("nq_open", row, None, idx),
        question=str(require(row, "question")).strip(),
        golds=_dedupe(answers),
        source="nq_open",
    )


def _popqa_item(row: dict, idx: int) -> QAItem:
    answers = _parse_str_list(require(row, "possible_answers"), "possible_answers")
    meta = {k: row[k] for k in ("subj", "prop", "obj", "subj_id", "prop_id", "obj_id",
                                "s_wiki_title", "o_wiki_title", "o_pop")
            if row.get(k) not in (None, "")}
    return QAItem(
        id=row_id("popqa", row, "id", idx),
        question=str(require(row, "question")).strip(),
        golds=_dedupe(answers),
        source="popqa",
        popularity=_float_or_none(row.get("s_pop")),
        meta=meta,
    )


def _simpleqa_item(row: dict, idx: int) -> QAItem:
    meta: dict[str, Any] = {}
    if row.get("metadata") not in (None, ""):
        md = _parse_metadata(row["metadata"])
        if isinstance(md, dict):
            meta.update(md)
        else:
            meta["metadata"] = md
    return QAItem(
        id=row_id("simpleqa", row, None, idx),
        question=str(require(row, "problem")).strip(),
        golds=_dedupe([require(row, "answer")]),
        source="simpleqa",
        meta=meta,
    )


def _truthfulqa_item(row: dict, idx: int) -> QAItem:
    best = require(row, "best_answer")
    correct = _as_list(require(row, "correct_answers"), "correct_answers")
    incorrect = _as_list(row.get("incorrect_answers") or [], "incorrect_answers")
    meta: dict[str, Any] = {"incorrect_answers": _dedupe(incorrect)}
    for k in ("category", "type", "source"):
        if row.get(k) not in (None, ""):
            meta[k] = row[k]
    return QAItem(
        id=row_id("truthfulqa", row, None, idx),
        question=str(require(row, "question")).strip(),
        golds=_dedupe([best, *correct]),
        source="truthfulqa",
        meta=meta,
    )


BENCHMARKS: dict[str, BenchmarkSpec] = {
    s.name: s
    for s in (
        BenchmarkSpec("triviaqa", "mandarjoshi/trivia_qa", "rc.nocontext", "validation", _triviaqa_item),
        BenchmarkSpec("nq_open", "google-research-datasets/nq_open", None, "validation", _nq_open_item),
        BenchmarkSpec("popqa", "akariasai/PopQA", None, "test", _popqa_item),
        BenchmarkSpec("simpleqa", "basicv8vc/SimpleQA", None, "test", _simpleqa_item),
        BenchmarkSpec("truthfulqa", "truthfulqa/truthful_qa", "generation", "validation", _truthfulqa_item),
    )
}


# --------------------------------------------------------------------------- loading


def load_benchmark(
    name: str,
    path: str | Path | None = None,
    hf_id: str | None = None,
    split: str | None = None,
    limit: int | None = None,
    seed: int = 0,
) -> list[QAItem]:
    """Load benchmark ``name`` as a list of :class:`QAItem`.

    ``path``: local JSONL with the HF dataset's field names (``split``/``hf_id`` ignored).
    Otherwise ``datasets.load_dataset(hf_id or spec.hf_id, spec.hf_config, split=split or
    spec.split)``. ``limit``: keep a deterministic ``random.Random(seed)`` sample of that
    many rows, in their original order. Row indices (used in ids and errors) are positions
    in the full set, before subsampling.
    """
    spec = lookup(BENCHMARKS, name, "benchmark")
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    if path:  # None or "" (an unset config field) -> the HF hub
        rows: Iterable[dict] = read_jsonl(path)
        where = str(path)
    else:
        rows = hub_rows("benchmark", name, hf_id or spec.hf_id, spec.hf_config, split or spec.split,
                        BenchmarkLoadError, "load_benchmark")
        where = f"{hf_id or spec.hf_id}[{split or spec.split}]"

    items: list[QAItem] = []
    for idx, row in enumerate(rows):
        if not isinstance(row, Mapping):
            raise ValueError(
                f"benchmark '{name}' ({where}): row {idx} is not an object "
                f"(got {type(row).__name__})"
            )
        try:
            item = spec.to_item(dict(row), idx)
        except MissingField as e:
            raise ValueError(
                f"benchmark '{name}' ({where}): row {idx} is missing required field '{e.field}'"
            ) from None
        except ValueError as e:
            raise ValueError(f"benchmark '{name}' ({where}): row {idx}: {e}") from None
        if not item.golds:
            raise ValueError(f"benchmark '{name}' ({where}): row {idx} has no gold answer")
        items.append(item)

    if limit is not None and len(items) > limit:
        keep = sorted(random.Random(seed).sample(range(len(items)), limit))
        items = [items[i] for i in keep]
    return items

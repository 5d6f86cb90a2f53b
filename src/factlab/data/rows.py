"""Row plumbing shared by the dataset registries (``benchmarks`` for QA, ``pairs`` for SEVA):
required fields, row ids, and rows from the Hugging Face hub with an error that says how to
load a local JSONL copy instead. Local JSONL files are read with ``types.read_jsonl``."""

from __future__ import annotations

from typing import Any, Callable, Iterable, Mapping, TypeVar

from pydantic import AfterValidator

Spec = TypeVar("Spec")


class MissingField(KeyError):
    """A row lacks a field its dataset mapping needs; the loader names the row and field."""

    def __init__(self, field_name: str):
        super().__init__(field_name)
        self.field = field_name


def lookup(registry: Mapping[str, Spec], name: str, what: str) -> Spec:
    """``registry[name]``, or a ValueError naming ``what`` was asked for and every known name."""
    if name not in registry:
        raise ValueError(f"unknown {what} '{name}'; known: {', '.join(registry)}")
    return registry[name]


def require(row: Mapping, key: str) -> Any:
    """``row[key]``, raising :class:`MissingField` when absent or ``None``."""
    if not isinstance(row, Mapping) or key not in row or row[key] is None:
        raise MissingField(key)
    return row[key]


def row_id(name: str, row: Mapping, key: str | None, idx: int) -> str:
    """``"<name>/<row[key]>"``, or ``"<name>/<idx>"`` when the row has no such id."""
    raw = row.get(key) if key else None
    return f"{name}/{raw if raw not in (None, '') else idx}"


def hub_rows(what: str, name: str, hf_id: str, hf_config: str | None, split: str,
             error: type[Exception], loader: str) -> Iterable[Mapping]:
    """``datasets.load_dataset(hf_id, hf_config, split=split)``; any failure (no network, no
    cache, unknown id or split) becomes ``error`` naming the dataset and the local-file way
    (``loader(name, path=...)``)."""
    try:
        import datasets  # lazy: heavy import, and optional for offline use

        return datasets.load_dataset(hf_id, hf_config, split=split)
    except Exception as e:  # noqa: BLE001 - hub, cache, network and schema errors alike
        cfg = f", config '{hf_config}'" if hf_config else ""
        raise error(
            f"{what} '{name}': the dataset '{hf_id}'{cfg}, split '{split}' could not be loaded from "
            f"the Hugging Face hub or its cache ({type(e).__name__}: {e}). Give a local JSONL file "
            f"via `path` (rows with the same field names as the HF dataset), e.g. "
            f"{loader}('{name}', path='{name}.jsonl')."
        ) from e


def known_name(name: str, known: Iterable[str], what: str) -> str:
    """``name`` if it is one of ``known``, else a ValueError naming every known one (params
    validators use it so that a typo fails when the params load)."""
    known = list(known)
    if name not in known:
        raise ValueError(f"unknown {what} {name!r}; known: {', '.join(known)}")
    return name


def registered_name(known: Callable[[], Iterable[str]], what: str) -> AfterValidator:
    """The ``known_name`` check as a field type (``Annotated[str, registered_name(...)]``);
    ``known()`` is read when the params load, so a registry may still grow after import."""
    return AfterValidator(lambda name: known_name(name, known(), what))


def miniworld_split(split: str | None, name: str, allow_none: bool = False) -> str | None:
    """Params check: the mini-world has a ``train`` and a ``heldout`` split, nothing else."""
    if name == "miniworld" and not (split in ("train", "heldout") or (allow_none and split is None)):
        raise ValueError(f"the miniworld split is 'train' or 'heldout', got {split!r}")
    return split

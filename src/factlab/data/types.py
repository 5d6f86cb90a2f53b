"""Plain record types shared by every loader and evaluator."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Iterator

from ..paths import atomic_open


@dataclass
class QAItem:
    """One short-form question with its gold answer and aliases.

    ``golds`` holds the primary answer first, then every alias; the grader
    (``factlab.text.grade_answer``) accepts a match against any of them.
    ``popularity`` is PopQA's ``s_pop`` (or any monthly-views style number) when the
    dataset has one, else ``None``.
    """

    id: str
    question: str
    golds: list[str]
    source: str = ""
    popularity: float | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "QAItem":
        return cls(**d)


def write_jsonl(path: str | Path, rows: Iterable[Any]) -> int:
    """Write dicts (or objects with ``to_dict``) one per line, atomically; returns the row count."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with atomic_open(path) as f:
        for row in rows:
            if hasattr(row, "to_dict"):
                row = row.to_dict()
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
            n += 1
    return n


def read_jsonl(path: str | Path, numbered: bool = False) -> Iterator[Any]:
    """Yield one parsed row per non-empty line (``(line number, row)`` with ``numbered``); a
    malformed line raises naming file and line."""
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"JSONL file not found: {path}")
    with path.open(encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}:{lineno}: not valid JSON ({e.msg})") from None
            yield (lineno, row) if numbered else row

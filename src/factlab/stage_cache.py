"""The one resumable stage cache: what a long stage has finished, on disk, so a stopped run
resumes where it stopped instead of starting over.

A stage's results are rows in one JSONL file, each ``{"key": ..., "fp": ..., ...}``: ``key``
names the unit of work (a question id, a claim, ``"compare"`` for a one-record stage) and
``fp`` fingerprints everything that produced it (model, prompt, sampling), so a row made under
other settings is not reused. Rows are appended chunk by chunk as work finishes; a line torn by
a kill, or a row the stage's ``check`` refuses, is skipped, counted and logged, and its work is
done again. A whole stage is rewritten atomically (``paths.atomic_open``). The file is never
read or written through a symbolic link, a hard link or a FIFO (``paths.open_nofollow``).

Used by the self-filter (``recipes.selffilter``), the KLCF offline pipeline (``synth.klcf``),
each compared run (``recipes.compare``'s ``compare.json``) and the truthfulness reward model's
readout (``recipes.klcf``'s ``truth_rm/report.json``). The judges' answer cache
(``judges.base.JudgeCache``) is a store shared by threads and processes at once, so it keeps
sqlite's locking instead.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

from .paths import atomic_open, open_nofollow

__all__ = ["StageCache"]

log = logging.getLogger(__name__)


class StageCache:
    """Rows of one resumable stage, keyed, in one JSONL file (see the module's docstring).

    ``check(row)``: whether a row holds what the stage reads back (a row it refuses is redone).
    ``get(key, fp)`` is the row when it is there under that fingerprint (any, for ``fp=None``);
    ``put(rows)`` appends finished rows; ``rewrite(keys)`` keeps those rows, in that order;
    ``replace(row)`` makes the file that one row. A one-record stage (a compared run's result)
    reads and writes its ``record()`` under the key ``RECORD``."""

    RECORD = "record"

    def __init__(self, path: str | Path, *, check: Callable[[dict[str, Any]], bool] | None = None,
                 where: str = "factlab's cache"):
        self.path = Path(path)
        self.where = where
        self.rows: dict[str, dict[str, Any]] = {}
        self.skipped = 0
        if self.path.exists() or self.path.is_symlink():
            self._read(check)

    def _read(self, check: Callable[[dict[str, Any]], bool] | None) -> None:
        fd = open_nofollow(self.path, os.O_RDONLY | os.O_NONBLOCK, where=self.where)
        with os.fdopen(fd, encoding="utf-8", errors="replace") as f:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    row = json.loads(line)
                    ok = isinstance(row, dict) and isinstance(row.get("key"), str) and (check is None or check(row))
                except (ValueError, KeyError, TypeError, AttributeError):
                    ok = False
                if not ok:
                    self.skipped += 1
                    log.warning("%s:%d: unreadable %s line skipped (an interrupted write?); its work is done again",
                                self.path, lineno, self.where)
                    continue
                self.rows[row["key"]] = row

    def __len__(self) -> int:
        return len(self.rows)

    def __contains__(self, key: object) -> bool:
        return key in self.rows

    def get(self, key: str, fp: Any = None) -> dict[str, Any] | None:
        row = self.rows.get(key)
        if row is None or (fp is not None and row.get("fp") != fp):
            return None
        return row

    def put(self, rows: Iterable[dict[str, Any]]) -> None:
        """Append finished rows (each with a ``key``), flushed: a kill loses at most the line it tears."""
        rows = list(rows)
        if not rows:
            return
        if any(not isinstance(r.get("key"), str) for r in rows):
            raise ValueError(f"{self.path}: every stage-cache row needs a string 'key'")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = open_nofollow(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, where=self.where)
        with os.fdopen(fd, "a+", encoding="utf-8") as f:
            f.seek(0, 2)
            if f.tell() > 0:  # a killed run may have left a line without its newline
                f.seek(f.tell() - 1)
                if f.read(1) != "\n":
                    f.write("\n")
            f.write("".join(json.dumps(r, ensure_ascii=False, default=_plain) + "\n" for r in rows))
            f.flush()
        for r in rows:
            self.rows[r["key"]] = r

    def rewrite(self, keys: Sequence[str]) -> None:
        """Keep only the rows of ``keys``, in that order, atomically (dropping stale fingerprints)."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_open(self.path) as f:
            for k in keys:
                f.write(json.dumps(self.rows[k], ensure_ascii=False, default=_plain) + "\n")
        self.rows = {k: self.rows[k] for k in keys}

    def replace(self, row: dict[str, Any]) -> None:
        """The file becomes this one row, atomically."""
        self.rows = {row["key"]: row}
        self.rewrite([row["key"]])

    def record(self) -> dict[str, Any] | None:
        """A one-record stage's result (without its key), or ``None`` while it is not finished."""
        row = self.get(self.RECORD)
        return None if row is None else {k: v for k, v in row.items() if k != "key"}

    def save_record(self, record: dict[str, Any]) -> dict[str, Any]:
        """Finish a one-record stage: the file becomes ``record``, atomically; returns it."""
        self.replace({"key": self.RECORD, **record})
        return record


def _plain(obj: Any) -> Any:
    """JSON for what ``json`` cannot write: numpy and torch numbers as floats, anything else (a path) as text."""
    try:
        return float(obj)
    except (TypeError, ValueError):
        return str(obj)

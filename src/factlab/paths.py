"""Where factlab keeps what it builds once and reuses: the cache root; and how it writes a
file that must never be left half-written (``atomic_write_text``); and how two processes that
want the same cached folder build it once (``build_lock``).

``$FACTLAB_CACHE``, else ``$XDG_CACHE_HOME/factlab``, else ``~/.cache/factlab``. Models
converted from GGUF, the mini-world, corpus indexes, datastores, judge answers and
self-filter samples all live below it, each in its own folder.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


def cache_dir() -> Path:
    """factlab's cache root (see the module docstring)."""
    if os.environ.get("FACTLAB_CACHE"):
        return Path(os.environ["FACTLAB_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "factlab"


def atomic_write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> Path:
    """Write ``text`` to ``path`` so that readers see the old file or the new one, never half of
    one: a temporary file beside it, flushed, then renamed over it. On any failure (a full disk)
    the temporary file is removed and the old file is left as it was."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding=encoding) as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return path


@contextlib.contextmanager
def exclusive_lock(path: str | os.PathLike) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` (created): a second process blocks until the first
    leaves; the kernel drops the lock of a process that dies."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)


def build_lock(folder: str | os.PathLike) -> contextlib.AbstractContextManager[None]:
    """``exclusive_lock`` on ``<folder>.lock`` beside a cached folder: held around "load it, or
    build it", so that two notebooks (or two test workers) sharing a cache build it once and
    neither reads it half-built."""
    folder = Path(folder)
    return exclusive_lock(folder.with_name(folder.name + ".lock"))

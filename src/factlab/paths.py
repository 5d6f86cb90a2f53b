"""Where factlab keeps what it builds once and reuses: the cache root; and how it writes a
file that must never be left half-written (``atomic_write_text``).

``$FACTLAB_CACHE``, else ``$XDG_CACHE_HOME/factlab``, else ``~/.cache/factlab``. Models
converted from GGUF, the mini-world, corpus indexes, datastores, judge answers and
self-filter samples all live below it, each in its own folder.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
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

"""Where factlab keeps what it builds once and reuses: the cache root.

``$FACTLAB_CACHE``, else ``$XDG_CACHE_HOME/factlab``, else ``~/.cache/factlab``. Models
converted from GGUF, the mini-world, corpus indexes, datastores, judge answers and
self-filter samples all live below it, each in its own folder.
"""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """factlab's cache root (see the module docstring)."""
    if os.environ.get("FACTLAB_CACHE"):
        return Path(os.environ["FACTLAB_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "factlab"

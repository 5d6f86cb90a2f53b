"""Where factlab keeps what it builds once and reuses: the cache root; and how it writes a
file that must never be left half-written (``atomic_write_text``); and how two processes that
want the same cached folder build it once (``build_lock``); and how it refuses to write
through a symbolic link planted in a run folder or a cache (``refuse_symlinks``,
``open_nofollow``).

``$FACTLAB_CACHE``, else ``$XDG_CACHE_HOME/factlab``, else ``~/.cache/factlab``. Models
converted from GGUF, the mini-world, corpus indexes, datastores, judge answers and
self-filter samples all live below it, each in its own folder.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def cache_dir() -> Path:
    """factlab's cache root (see the module docstring)."""
    if os.environ.get("FACTLAB_CACHE"):
        return Path(os.environ["FACTLAB_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "factlab"


def _umask() -> int:
    """The process's umask, read without setting it (``os.umask`` sets it, racing other threads)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o022


@contextlib.contextmanager
def atomic_open(path: str | os.PathLike, mode: str = "w", encoding: str | None = "utf-8") -> Iterator[Any]:
    """A file to write ``path`` through, so that readers see the old file or the new one, never
    half of one: a temporary file beside it (a fresh name, never one planted beforehand), flushed
    and renamed over ``path`` when the block ends. On any failure (a full disk) the temporary file
    is removed and the old file is left as it was. The one way factlab replaces a file."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp's 0600 would hide a shared cache's files from its other users
        with os.fdopen(fd, mode, encoding=None if "b" in mode else encoding) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> Path:
    """``text`` written to ``path`` atomically (``atomic_open``)."""
    with atomic_open(path, "w", encoding) as f:
        f.write(text)
    return Path(path)


def write_json(path: str | os.PathLike, obj: Any, *, end: str = "", **dumps: Any) -> Path:
    """The one writer of factlab's JSON files (results, manifests, reports, done markers):
    ``json.dumps(obj, **dumps) + end``, written atomically (``atomic_write_text``)."""
    return atomic_write_text(path, json.dumps(obj, **dumps) + end)


class SymlinkRefused(ValueError):
    """A symbolic link where factlab writes (a run folder, a cache file): a file written
    through it would land wherever the link points."""


def _link_error(path: Path, where: str) -> SymlinkRefused:
    try:
        target = os.readlink(path)
    except OSError:
        target = "?"
    return SymlinkRefused(f"{path} is a symbolic link (to {target}) in {where}: factlab does not write through "
                          "links there; remove it (or copy the file in its place)")


def no_symlink(path: str | os.PathLike, where: str = "a folder factlab writes") -> Path:
    """``path`` unchanged when it is not a symbolic link; ``SymlinkRefused`` naming it when it is."""
    path = Path(path)
    if path.is_symlink():
        raise _link_error(path, where)
    return path


def _not_plain_error(path: Path, st: os.stat_result, where: str) -> SymlinkRefused:
    if stat.S_ISREG(st.st_mode):
        return SymlinkRefused(f"{path} is a hard link ({st.st_nlink} names for one file) in {where}: writing it would "
                              "change the other names too (a copy made with cp -al?); copy the file in its place")
    return SymlinkRefused(f"{path} is not a regular file or folder (a pipe, a socket, a device) in {where}: writing "
                          "it would block or go elsewhere; remove it")


def refuse_symlinks(folder: str | os.PathLike, where: str = "a run folder") -> None:
    """``SymlinkRefused`` naming the first symbolic link found in ``folder`` or below it (links
    to folders are not followed), or the first file that is not a plain file (a FIFO would block
    the writer, a hard link would carry the write to its other names): checked before a run writes
    there, so that no executed notebook, report, figure or checkpoint is written elsewhere."""
    for root, dirs, files in os.walk(folder, followlinks=False):
        for name in sorted(dirs + files):
            path = os.path.join(root, name)
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                raise _link_error(Path(path), where)
            if not stat.S_ISDIR(st.st_mode) and not (stat.S_ISREG(st.st_mode) and st.st_nlink == 1):
                raise _not_plain_error(Path(path), st, where)


def open_nofollow(path: str | os.PathLike, flags: int, mode: int = 0o644, where: str = "a folder factlab writes") -> int:
    """``os.open(path, flags | O_NOFOLLOW)``: a descriptor of the file itself, never of what a
    link there points to, a FIFO, a device or a hard link (``SymlinkRefused`` naming it instead)."""
    try:
        fd = os.open(path, flags | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0), mode)
    except OSError as e:
        if e.errno == errno.ELOOP or Path(path).is_symlink():
            raise _link_error(Path(path), where) from None
        if e.errno == errno.EISDIR:
            raise _not_plain_error(Path(path), os.lstat(path), where) from None
        raise
    st = os.fstat(fd)
    if not (stat.S_ISREG(st.st_mode) and st.st_nlink == 1):  # a FIFO, a device, a hard link to another file
        os.close(fd)
        raise _not_plain_error(Path(path), st, where)
    return fd


@contextlib.contextmanager
def exclusive_lock(path: str | os.PathLike) -> Iterator[None]:
    """An exclusive ``flock`` on ``path`` (created; never through a symbolic link): a second
    process blocks until the first leaves; the kernel drops the lock of a process that dies."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = open_nofollow(path, os.O_RDWR | os.O_CREAT, where="factlab's cache")
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def build_lock(folder: str | os.PathLike) -> contextlib.AbstractContextManager[None]:
    """``exclusive_lock`` on ``<folder>.lock`` beside a cached folder: held around "load it, or
    build it", so that two notebooks (or two test workers) sharing a cache build it once and
    neither reads it half-built."""
    folder = Path(folder)
    return exclusive_lock(folder.with_name(folder.name + ".lock"))

"""File manifests: what a built folder (a corpus index, a datastore, a converted or random model,
a warm start) held when it was built, and
the check that it still holds it before anything reads it.

A builder calls ``write_file_manifest(folder)`` last: ``factlab_files.json`` lists every file
of the folder with its size and SHA-256. A loader calls ``verify_files(folder, rebuild)``
first. Sizes are compared on every load (a truncated file never reaches a reader: a truncated
``tokenized.0`` crashes the infini-gram engine, a truncated suffix array gives wrong counts).
Checksums are compared on the first load after the files changed, and remembered: a stamp
(``.factlab_verified.json``) records the size and modification time of every file as last
verified (and their change times and inodes: a copy or a write is hashed again), so later
loads of the same files skip the hashing; for a folder this process cannot write (a shared,
read-only index) the stamp is kept under the cache (``<cache>/verified/``). ``full=True``, or
``FACTLAB_VERIFY=1`` in the environment (``factlab run --verify``), hashes every time. A
mismatch is one ``IntegrityError`` naming the file and how to rebuild the folder.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterator

from .paths import cache_dir, write_json

log = logging.getLogger(__name__)

MANIFEST_FILE = "factlab_files.json"
STAMP_FILE = ".factlab_verified.json"
FORMAT = "factlab-files"
VERSION = 1
VERIFY_ENV = "FACTLAB_VERIFY"


class IntegrityError(ValueError):
    """A built folder whose files are not the ones its manifest lists (missing, truncated,
    changed), or whose manifest is missing or unreadable; the message says how to rebuild it."""


class MissingManifest(IntegrityError):
    """A folder without ``factlab_files.json``: built by a factlab before manifests, or not
    completely."""


def verify_always() -> bool:
    """Whether every load hashes every file (``FACTLAB_VERIFY=1``, set by ``--verify``)."""
    return os.environ.get(VERIFY_ENV, "").strip().lower() in ("1", "true", "yes")


def file_sha256(path: str | os.PathLike, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def _listed(folder: Path) -> list[str]:
    """Every regular file below ``folder`` (relative, POSIX), the manifest and stamp aside."""
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")
                  if p.is_file() and p.name not in (MANIFEST_FILE, STAMP_FILE) and not p.name.endswith(".tmp"))


def _state(folder: Path, names) -> dict[str, list[int]]:
    """What the stamp compares, per file: size, modification and change times, inode. A copy
    (new inodes) or any write (a new change time, which no program can set back) is hashed
    again."""
    out = {}
    for name in names:
        st = (folder / name).stat()
        out[name] = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
    return out


def write_file_manifest(folder: str | os.PathLike) -> Path:
    """List every file of ``folder`` with its size and SHA-256 in ``factlab_files.json`` (call it
    once the folder is complete), and stamp them as verified."""
    folder = Path(folder)
    names = _listed(folder)
    files = {name: {"bytes": (folder / name).stat().st_size, "sha256": file_sha256(folder / name)} for name in names}
    path = write_json(folder / MANIFEST_FILE, {"format": FORMAT, "version": VERSION,
                                                                 "files": files}, indent=1, end="\n")
    _write_stamp(folder, names)
    return path


def stamp_path(folder: Path) -> Path:
    """Where the verification stamp of ``folder`` lives: in it, or under the cache when the folder
    cannot be written."""
    if os.access(folder, os.W_OK):
        return folder / STAMP_FILE
    key = hashlib.sha256(str(folder.resolve()).encode()).hexdigest()[:24]
    return cache_dir() / "verified" / f"{key}.json"


def _write_stamp(folder: Path, names) -> None:
    path = stamp_path(folder)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        write_json(path, _state(folder, [*names, MANIFEST_FILE]))
    except OSError as e:  # nowhere to write: every load hashes again, nothing worse
        log.debug("cannot write %s (%s); checksums will be compared on every load", path, e)


def _read_manifest(folder: Path, rebuild: str) -> dict[str, dict]:
    path = folder / MANIFEST_FILE
    if not path.is_file():
        raise MissingManifest(f"{path} is missing, so the files of {folder} cannot be checked (built by an "
                              f"older factlab, or not completely); rebuild it: {rebuild}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        files = data["files"]
        if data.get("format") != FORMAT or not isinstance(files, dict) or not all(
                isinstance(e, dict) and isinstance(e.get("bytes"), int) and isinstance(e.get("sha256"), str)
                for e in files.values()):
            raise ValueError("not a factlab file manifest")
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, RecursionError) as e:
        raise IntegrityError(f"{path}: unreadable file manifest ({type(e).__name__}: {e}); rebuild the folder: "
                             f"{rebuild}") from None
    return files


def verify_files(folder: str | os.PathLike, rebuild: str, *, full: bool | None = None) -> None:
    """Check ``folder`` against its ``factlab_files.json`` before anything reads it: the manifest
    lists every file of the folder (an empty or partial one is a mismatch), every listed file is
    present with its size; the SHA-256 too when the files changed since they were last
    verified, or when ``full`` (default: ``FACTLAB_VERIFY``). ``rebuild``: the command that
    rebuilds the folder, quoted in the error."""
    folder = Path(folder)
    files = _read_manifest(folder, rebuild)
    if not files:
        raise IntegrityError(f"{folder / MANIFEST_FILE} lists no files, so nothing of {folder} can be checked; "
                             f"rebuild: {rebuild}")
    unlisted = sorted(set(_listed(folder)) - set(files))
    if unlisted:  # a partial manifest, or a file added since: its content was never checked
        raise IntegrityError(f"{folder / unlisted[0]} is not listed in {folder / MANIFEST_FILE}"
                             + (f" (nor {len(unlisted) - 1} more)" if len(unlisted) > 1 else "")
                             + f": the folder is not what was built; rebuild: {rebuild}")
    for name, entry in files.items():
        path = folder / name
        if not path.is_file():
            raise IntegrityError(f"{path} is missing (listed in {folder / MANIFEST_FILE}); rebuild: {rebuild}")
        size = path.stat().st_size
        if size != entry["bytes"]:
            raise IntegrityError(f"{path} has {size:,} bytes where {entry['bytes']:,} were written (truncated or "
                                 f"replaced); rebuild: {rebuild}")
    full = verify_always() if full is None else full
    if not full and _stamp(folder) == _state(folder, [*files, MANIFEST_FILE]):
        return
    for name, entry in files.items():
        if file_sha256(folder / name) != entry["sha256"]:
            raise IntegrityError(f"{folder / name}: its content is not what was written (SHA-256 differs from "
                                 f"{folder / MANIFEST_FILE}); rebuild: {rebuild}")
    _write_stamp(folder, files)


def _stamp(folder: Path) -> dict | None:
    try:
        return json.loads(stamp_path(folder).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None


@contextlib.contextmanager
def published_folder(out_dir: str | Path) -> Iterator[Path]:
    """Write a built folder (a converted model, an organism) under a temporary name beside
    ``out_dir`` (yielded), list its files in a file manifest (``write_file_manifest``: each
    file's size and SHA-256, checked on every load), then rename it into place. If another
    process published it first, or the writing fails, the temporary folder is removed."""
    out_dir = Path(out_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out_dir.name + ".tmp-", dir=out_dir.parent))
    try:
        yield tmp
        write_file_manifest(tmp)
        if out_dir.exists():  # another process finished first
            shutil.rmtree(tmp)
        else:
            tmp.rename(out_dir)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise

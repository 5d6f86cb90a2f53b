"""Building a corpus index folder: tokenizing, the infini-gram shard files, the manifest.

CorVer counts co-occurrences in an infini-gram index of Wikipedia (000_ac66a963fabf3916.txt
§3.2, index details in §B.1). This module writes that index folder; ``CorpusIndex.build``
and ``build_from_token_ids`` (``factlab.corpus.infinigram``) call ``write_index`` and then
load the result. The suffix arrays are made by ``factlab.corpus.suffix_array``.

Index format
------------
``CorpusIndex.build`` tokenizes a JSONL corpus with any HF tokenizer and writes the
infini-gram v4 layout itself (the package's own tokenizing step only knows the
gpt2/llama/olmo hub tokenizers): per shard ``i``, ``tokenized.i`` holds every document
as a separator token (``0xFFFF`` for u16, ``0xFFFFFFFF`` for u32) followed by its token
ids, little-endian; ``offset.i`` holds the byte offset of each document's separator as a
little-endian u64. The suffix array ``table.i`` is made by the package's bundled
``rust_indexing`` binary (make-part / merge / concat, as ``infini_gram.indexing.build_sa``
runs it). Token ids are u16 when the vocabulary has fewer than 65535 entries (the
separator must not be a real id), else u32 (the bundled builder needs 32 GiB per job
for u32 whatever the data size, so u32 shards of up to 2**24 tokens are sorted with
numpy instead, in the same order). ``factlab_index.json`` records the
tokenizer, token width, sizes and build time, so ``CorpusIndex.load`` needs only the
folder. A corpus larger than ``shard_tokens`` is split into several shards in one
folder; the engine loads them all. ``factlab_files.json`` (``factlab.integrity``) lists
every file with its size and SHA-256; ``load`` checks the sizes every time and the
checksums on the first load after the files changed (or always with ``--verify``), so a
truncated or altered file is an error naming it and the rebuild command, never a wrong
count or a crashed engine.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import shutil
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable, Iterator, Sequence

import numpy as np

from ..integrity import write_file_manifest
from ..paths import write_json
from .suffix_array import build_suffix_array

log = logging.getLogger(__name__)

META_FILE = "factlab_index.json"
FORMAT = "factlab-infinigram"
FORMAT_VERSION = 1
DEFAULT_SHARD_TOKENS = 500_000_000
BUILD_HINT = "run `factlab index build CORPUS.jsonl --tokenizer NAME_OR_PATH --out DIR` first"

_TOKENIZE_BATCH = 1000


def token_width_for(vocab_size: int) -> int:
    """Bytes per token id: 2 (u16) when every id and the separator 0xFFFF fit, else 4."""
    return 2 if vocab_size < 0xFFFF else 4


def dtype_for(token_width: int) -> np.dtype:
    if token_width not in (2, 4):
        raise ValueError(f"token_width must be 2 (u16) or 4 (u32), got {token_width}")
    return np.dtype("<u2") if token_width == 2 else np.dtype("<u4")


def separator_for(token_width: int) -> int:
    return (1 << (8 * token_width)) - 1


def encode(tokenizer, texts: list[str]) -> list[list[int]]:
    if not texts:
        return []
    return tokenizer(texts, add_special_tokens=False)["input_ids"]


def read_jsonl_texts(path: Path, text_field: str, progress: bool) -> Iterator[str]:
    """Yield the text of each non-blank line; errors name the file and line."""
    from tqdm.auto import tqdm

    n_docs = 0
    with open(path, "rb") as f, tqdm(total=path.stat().st_size, unit="B", unit_scale=True,
                                     desc=f"tokenizing {path.name}", disable=not progress) as bar:
        for lineno, raw in enumerate(f, start=1):
            bar.update(len(raw))
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise ValueError(f"{path}:{lineno}: not valid JSON ({e})") from None
            if not isinstance(record, dict):
                raise ValueError(f"{path}:{lineno}: expected a JSON object, got {type(record).__name__}")
            if text_field not in record:
                keys = ", ".join(sorted(record)) or "none"
                raise ValueError(f"{path}:{lineno}: no '{text_field}' field (keys: {keys}); "
                                 f"choose the field with --text-field / text_field=")
            text = record[text_field]
            if not isinstance(text, str):
                raise ValueError(f"{path}:{lineno}: field '{text_field}' is {type(text).__name__}, not a string")
            n_docs += 1
            yield text
    if n_docs == 0:
        raise ValueError(f"{path}: empty corpus (no JSON lines)")


def tokenize_texts(texts: Iterable[str], tokenizer) -> Iterator[list[int]]:
    batch: list[str] = []
    for text in texts:
        batch.append(text)
        if len(batch) >= _TOKENIZE_BATCH:
            yield from encode(tokenizer, batch)
            batch = []
    yield from encode(tokenizer, batch)


class _ShardWriter:
    """Writes documents into ``tokenized.i`` / ``offset.i``, starting a new shard once
    the current one would pass ``shard_tokens`` tokens (separators included)."""

    def __init__(self, out_dir: Path, token_width: int, shard_tokens: int):
        self.out_dir, self.width, self.shard_tokens = out_dir, token_width, shard_tokens
        self.dtype = dtype_for(token_width)
        self.sep = separator_for(token_width)
        self.shards: list[dict] = []
        self._ds = self._od = None

    def _open(self) -> None:
        i = len(self.shards)
        self._ds = open(self.out_dir / f"tokenized.{i}", "wb")
        self._od = open(self.out_dir / f"offset.{i}", "wb")
        self.shards.append({"id": i, "n_docs": 0, "n_tokens": 0, "bytes": 0})

    def add(self, ids: Sequence[int]) -> None:
        arr = np.asarray(ids, dtype=np.int64)
        if arr.size and (arr.min() < 0 or arr.max() >= self.sep):
            raise ValueError(f"token id {int(arr.max())} does not fit a {8 * self.width}-bit index "
                             f"(ids must be below the separator {self.sep:#x})")
        cur = self.shards[-1] if self.shards else None
        if cur is None or (cur["n_docs"] and cur["n_tokens"] + cur["n_docs"] + arr.size + 1 > self.shard_tokens):
            self.close()
            self._open()
            cur = self.shards[-1]
        self._od.write(np.array([cur["bytes"]], dtype="<u8").tobytes())
        data = np.empty(arr.size + 1, dtype=self.dtype)
        data[0] = self.sep
        data[1:] = arr
        self._ds.write(data.tobytes())
        cur["n_docs"] += 1
        cur["n_tokens"] += int(arr.size)
        cur["bytes"] += data.nbytes

    def close(self) -> None:
        for f in (self._ds, self._od):
            if f is not None:
                f.close()
        self._ds = self._od = None


def _prepare_out_dir(out_dir: Path) -> Path:
    """A fresh sibling folder to build into; it replaces ``out_dir`` at the end."""
    if out_dir.exists():
        if not out_dir.is_dir():
            raise FileExistsError(f"{out_dir} exists and is not a folder")
        if any(out_dir.iterdir()) and not (out_dir / META_FILE).exists():
            raise FileExistsError(f"{out_dir} is not empty and holds no {META_FILE}; "
                                  f"refusing to overwrite it, choose another --out")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.building-", dir=out_dir.parent))


def write_index(token_docs: Iterable[Sequence[int]], out_dir: str | os.PathLike, token_width: int, *,
                shard_tokens: int, cpus: int | None, meta: dict, source: str) -> Path:
    if shard_tokens < 2:
        raise ValueError(f"shard_tokens must be at least 2, got {shard_tokens}")
    out_dir = Path(out_dir).absolute()
    t0 = time.perf_counter()
    work = _prepare_out_dir(out_dir)
    try:
        writer = _ShardWriter(work, token_width, shard_tokens)
        try:
            for ids in token_docs:
                writer.add(ids)
        finally:
            writer.close()
        n_tokens = sum(s["n_tokens"] for s in writer.shards)
        if not writer.shards:
            raise ValueError(f"{source}: empty corpus (no documents)")
        if n_tokens == 0:
            raise ValueError(f"{source}: the documents hold no tokens (all texts empty)")
        t_tok = time.perf_counter() - t0
        for shard in writer.shards:
            i = shard["id"]
            log.info("building suffix array %d/%d (%d tokens)", i + 1, len(writer.shards),
                     shard["n_tokens"] + shard["n_docs"])
            build_suffix_array(work / f"tokenized.{i}", work / f"table.{i}", token_width, cpus)
        meta = {
            "format": FORMAT,
            "version": FORMAT_VERSION,
            **meta,
            "token_width": token_width,
            "token_dtype": "u16" if token_width == 2 else "u32",
            "n_docs": sum(s["n_docs"] for s in writer.shards),
            "n_tokens": n_tokens,
            "shards": writer.shards,
            "built_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "tokenize_seconds": round(t_tok, 3),
            "build_seconds": round(time.perf_counter() - t0, 3),
            "infini_gram": _infini_gram_version(),
        }
        write_json(work / META_FILE, meta, indent=2, end="\n")
        write_file_manifest(work)
        _swap_in(work, out_dir)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return out_dir


def _swap_in(work: Path, out_dir: Path) -> None:
    """Put the built ``work`` folder at ``out_dir``: an earlier index there is renamed aside first
    and deleted last, so Ctrl-C or SIGTERM at any point leaves a whole index at ``out_dir``, the
    earlier or the new one (deleting the earlier one first lost both when interrupted while it was
    deleted: issue 43 round-3b probe)."""
    aside = None
    if out_dir.exists():
        aside = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old-", dir=out_dir.parent))
        out_dir.rename(aside / out_dir.name)
    try:
        work.rename(out_dir)
    except BaseException:
        if aside is not None and not out_dir.exists():
            (aside / out_dir.name).rename(out_dir)
        raise
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)


def rebuild_command(path: Path) -> str:
    """The command that rebuilds the index at ``path``, from its ``factlab_index.json`` when
    that can be read (errors quote it)."""
    try:
        meta = json.loads((path / META_FILE).read_text())
        corpus, tokenizer, field = meta["corpus"], meta["tokenizer"], meta.get("text_field") or "text"
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        corpus = tokenizer = None
    if not (isinstance(corpus, str) and isinstance(tokenizer, str)):
        return f"delete {path} and build it again ({BUILD_HINT})"
    return (f"factlab index build {shlex.quote(corpus)} --tokenizer {shlex.quote(tokenizer)} --out "
            f"{shlex.quote(str(path))}" + ("" if field == "text" else f" --text-field {shlex.quote(field)}"))


def _infini_gram_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("infini-gram")
    except Exception:  # metadata missing in odd installs; the version is informational
        return None


def tokenizer_ref(name: str) -> str:
    """Store a local tokenizer folder as an absolute path, anything else as given."""
    return str(Path(name).absolute()) if Path(name).exists() else name

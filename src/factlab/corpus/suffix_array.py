"""The suffix array ``table.i`` of one index shard: built, decoded and checked.

CorVer's co-occurrence index is an infini-gram suffix array over Wikipedia's tokens
(000_ac66a963fabf3916.txt §B.1). ``build_suffix_array`` makes ``table.i`` for a shard's
``tokenized.i`` with the ``rust_indexing`` binary bundled in the ``infini-gram`` wheel
(make-part / merge / concat, as ``infini_gram.indexing.build_sa`` runs it), or, for u32
shards of up to 2**24 tokens, with ``suffix_array_numpy`` in the same order (the bundled
builder needs 32 GiB per job for u32 whatever the data size). ``verify_suffix_array``
checks the result is a permutation of the token positions; ``decode_pointers`` turns its
entries into byte pointers. The shard layout is in ``factlab.corpus.index_build``.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

# infini_gram.indexing.HACK: each suffix-array part overlaps the next by this many
# bytes. A part shorter than that yields a corrupt array (docs/design.md, measured again
# here: 128 kB of u16 data split over 2 jobs gives a table of the right size that is
# not a permutation), so every part must be comfortably longer.
_SA_PART_OVERLAP = 100_000
_MIN_PART_BYTES = 2 * _SA_PART_OVERLAP
# u32 shards up to this many tokens are sorted in numpy (see build_suffix_array)
_NUMPY_SA_MAX_TOKENS = 1 << 24
_U32_JOB_MEMORY = 40 << 30


def _rust_indexing() -> Path:
    import infini_gram.indexing as ig_indexing

    binary = Path(ig_indexing.__file__).with_name("rust_indexing")
    if not binary.exists():
        raise FileNotFoundError(f"{binary} is missing: the infini-gram wheel ships it; reinstall infini-gram")
    if not os.access(binary, os.X_OK):
        binary.chmod(binary.stat().st_mode | 0o111)
    return binary


def _run(cmd: list[str]) -> None:
    res = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if res.returncode != 0:
        tail = (res.stderr or res.stdout)[-2000:]
        raise RuntimeError(f"suffix-array builder failed ({' '.join(cmd[:2])}): {tail}")


def _physical_memory() -> int:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 8 << 30


def suffix_array_numpy(tokens: np.ndarray) -> np.ndarray:
    """Token positions sorted by suffix, in the engine's order (byte-wise comparison of
    little-endian ids, a suffix before any longer suffix it is a prefix of). Prefix
    doubling: O(n log n) per round, one round per doubling of the longest repeat."""
    tokens = np.asarray(tokens)
    n = tokens.size
    keys = tokens.astype(tokens.dtype.newbyteorder("<")).byteswap()  # byte order -> numeric order
    _, rank = np.unique(keys, return_inverse=True)
    rank = rank.astype(np.int64).ravel()
    k = 1
    while True:
        second = np.full(n, -1, dtype=np.int64)
        second[:n - k] = rank[k:]
        sa = np.lexsort((second, rank))
        r1, r2 = rank[sa], second[sa]
        new = np.ones(n, dtype=bool)
        new[1:] = (r1[1:] != r1[:-1]) | (r2[1:] != r2[:-1])
        rank = np.empty(n, dtype=np.int64)
        rank[sa] = np.cumsum(new) - 1
        if rank[sa[-1]] == n - 1 or k >= n:
            return sa
        k *= 2


def _write_table(sa: np.ndarray, sa_path: Path, ds_size: int, token_width: int) -> None:
    ratio = max(1, math.ceil(math.log2(ds_size) / 8))
    ptrs = (sa.astype(np.uint64) * np.uint64(token_width)).astype("<u8")
    ptrs.view(np.uint8).reshape(-1, 8)[:, :ratio].tofile(sa_path)


def build_suffix_array(ds_path: Path, sa_path: Path, token_width: int, cpus: int | None = None,
                       tmp_dir: Path | None = None, *, min_part_bytes: int = _MIN_PART_BYTES) -> None:
    """Build ``table.i`` for ``tokenized.i``, then check that the result is a permutation
    of the token positions.

    u16 shards, and u32 shards above ``_NUMPY_SA_MAX_TOKENS`` tokens, go to the bundled
    ``rust_indexing`` binary, run as ``infini_gram.indexing.build_sa`` does (make-part,
    merge, concat). Parallel parts are only used when each is at least
    ``min_part_bytes`` long: shorter parts overlap by more than the builder expects and
    corrupt the array (the check then raises RuntimeError). For u32 the binary
    allocates a 2**32-entry bucket table (32 GiB) per job whatever the data size, so
    smaller u32 shards are sorted with ``suffix_array_numpy`` (same order; a test
    compares the two on u16 data).
    """
    ds_path, sa_path = Path(ds_path), Path(sa_path)
    ds_size = ds_path.stat().st_size
    if ds_size == 0 or ds_size % token_width:
        raise ValueError(f"{ds_path}: size {ds_size} is not a positive multiple of {token_width}")
    n_tok = ds_size // token_width
    if token_width == 4 and n_tok <= _NUMPY_SA_MAX_TOKENS:
        _write_table(suffix_array_numpy(np.fromfile(ds_path, dtype="<u4")), sa_path, ds_size, token_width)
        verify_suffix_array(ds_path, sa_path, token_width)
        return
    binary = str(_rust_indexing())
    cpus = max(1, cpus or os.cpu_count() or 1)
    ratio = max(1, math.ceil(math.log2(ds_size) / 8))
    mem_bytes = max(1 << 30, _physical_memory() // 2)
    batches = 1
    while batches * (mem_bytes // 8) < ds_size:
        batches *= 2
    jobs = max(1, min(cpus, ds_size // (max(1, min_part_bytes) * batches)))
    if token_width == 4:
        if _physical_memory() < _U32_JOB_MEMORY:
            raise RuntimeError(f"{ds_path}: a u32 shard of {n_tok} tokens needs the bundled builder, which "
                               f"allocates 32 GiB per job ({_physical_memory() >> 30} GiB here); rebuild "
                               f"with shard_tokens <= {_NUMPY_SA_MAX_TOKENS}")
        jobs = min(jobs, max(1, _physical_memory() // _U32_JOB_MEMORY))
    total = batches * jobs
    part = ds_size // total
    part += (-part) % token_width
    work = Path(tempfile.mkdtemp(prefix="sa-build-", dir=tmp_dir or sa_path.parent))
    try:
        parts_dir, merged_dir = work / "parts", work / "merged"
        parts_dir.mkdir()
        merged_dir.mkdir()
        common = ["--ratio", str(ratio), "--token-width", str(token_width)]
        for first in range(0, total, jobs):
            procs = []
            for i in range(first, min(first + jobs, total)):
                s, e = i * part, min((i + 1) * part + _SA_PART_OVERLAP, ds_size)
                cmd = [binary, "make-part", "--data-file", str(ds_path), "--parts-dir", str(parts_dir),
                       "--start-byte", str(s), "--end-byte", str(e), *common]
                procs.append((cmd, subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                                    text=True)))
            for cmd, p in procs:
                _, err = p.communicate()
                if p.returncode != 0:
                    raise RuntimeError(f"suffix-array builder failed (make-part): {err[-2000:]}")
        _run([binary, "merge", "--data-file", str(ds_path), "--parts-dir", str(parts_dir),
              "--merged-dir", str(merged_dir), "--num-threads", str(cpus),
              "--hacksize", str(_SA_PART_OVERLAP), *common])
        # merge writes one file per thread, fewer on tiny data; concat must be told how many
        merged = sorted(p.name for p in merged_dir.iterdir())
        if not merged or merged != [f"{i:04d}" for i in range(len(merged))]:
            raise RuntimeError(f"suffix-array builder (merge) left unexpected files: {merged[:8]}")
        _run([binary, "concat", "--data-file", str(ds_path), "--merged-dir", str(merged_dir),
              "--merged-file", str(sa_path), "--num-threads", str(len(merged)), *common])
    finally:
        shutil.rmtree(work, ignore_errors=True)
    verify_suffix_array(ds_path, sa_path, token_width)


def decode_pointers(raw: np.ndarray, ptr_size: int) -> np.ndarray:
    """Little-endian ``ptr_size``-byte suffix-array entries -> uint64 byte pointers."""
    raw = np.asarray(raw, dtype=np.uint8).reshape(-1, ptr_size)
    buf = np.zeros((raw.shape[0], 8), dtype=np.uint8)
    buf[:, :ptr_size] = raw
    return buf.view("<u8").ravel()


def verify_suffix_array(ds_path: Path, sa_path: Path, token_width: int, chunk: int = 1 << 24) -> None:
    """Raise RuntimeError unless ``table.i`` has one entry per token and its entries are
    exactly the token positions (each once). Linear time, one byte of memory per token."""
    n_tok = Path(ds_path).stat().st_size // token_width
    sa_size = Path(sa_path).stat().st_size
    if n_tok == 0 or sa_size % n_tok:
        raise RuntimeError(f"{sa_path}: {sa_size} bytes is not a whole number of entries for {n_tok} tokens")
    ptr_size = sa_size // n_tok
    sa = np.memmap(sa_path, dtype=np.uint8, mode="r")
    seen = np.zeros(n_tok, dtype=bool)
    for start in range(0, n_tok, chunk):
        ptrs = decode_pointers(sa[start * ptr_size:min(n_tok, start + chunk) * ptr_size], ptr_size)
        if ptrs.size and (ptrs.max() >= n_tok * token_width or np.any(ptrs % token_width)):
            raise RuntimeError(f"{sa_path}: pointers out of range; the suffix array is corrupt")
        seen[ptrs // token_width] = True
    del sa
    if not seen.all():
        raise RuntimeError(f"{sa_path}: {int((~seen).sum())} token positions missing; the suffix array "
                           f"is corrupt (rebuild with cpus=1)")

"""A run folder's manifest (``manifest.json``): what the run was made from and how it ended.

Written when the run starts (state ``running``) and rewritten when it ends: ``ok``,
``failed`` (with the error line) or ``interrupted`` (Ctrl-C, SIGTERM). It holds the
resolved config, the versions of the packages that decide the numbers, the git commit of
the project (and whether the working tree had uncommitted changes), the hardware, every
``seed`` of the config, and one entry per attempt (a resumed run adds one), each with the
config it ran with. Written atomically (a temporary file, then a rename; the temporary file
is removed when the write fails), so a crash or a full disk never leaves half a manifest.

A running attempt holds ``run_lock`` on its folder, so two processes never run in one folder.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import fcntl
import json
import os
import platform
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any, Iterator

from .credentials import redact_text, redact_value
from .paths import open_nofollow, refuse_symlinks, write_json

MANIFEST = "manifest.json"
LOCK_FILE = ".run.lock"
STATES = ("running", "ok", "failed", "interrupted")
PACKAGES = ("factlab", "torch", "transformers", "trl", "peft", "accelerate", "datasets", "papermill",
            "numpy", "infini-gram", "bm25s", "vllm")


def now() -> str:
    """The current UTC time, ISO 8601 with seconds."""
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    """Installed version of each package, ``None`` where it is not installed."""
    out: dict[str, str | None] = {}
    for name in names:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def git_state(root: str | Path) -> dict[str, Any]:
    """``{"commit": sha, "dirty": bool, "changed": [path, ...]}`` of the git checkout holding
    ``root`` (``changed``: the tracked files that differ from the commit, so a dirty run says
    which files it ran with); where there is none (no git, not a repository)
    ``{"commit": None, "dirty": None, "note": why}``."""
    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True,
                              timeout=20, check=True).stdout

    try:
        commit = git("rev-parse", "HEAD").strip()
        status = git("status", "--porcelain", "--untracked-files=no", "-z")
    except (OSError, subprocess.SubprocessError) as e:  # git missing, not a repository, no commit yet
        detail = getattr(e, "stderr", None) or str(e)
        return {"commit": None, "dirty": None, "note": f"no git commit: {detail.strip().splitlines()[0][:200]}"}
    changed = _changed_paths(status)
    return {"commit": commit, "dirty": bool(changed), "changed": changed}


def _changed_paths(porcelain_z: str) -> list[str]:
    """Paths of ``git status --porcelain -z`` (a rename's entry is followed by its source path)."""
    paths, fields, i = [], porcelain_z.split("\0"), 0
    while i < len(fields):
        entry = fields[i]
        i += 1
        if len(entry) < 4:
            continue
        paths.append(entry[3:])
        if entry[0] in "RC":
            i += 1  # the rename's or copy's source
    return sorted(paths)


def hardware() -> dict[str, Any]:
    """CPU count, RAM, GPU name(s) (``None`` without CUDA), host, OS and Python, and the CPU
    thread settings the kernels inherit (``factlab.threads``: ``None`` where unset)."""
    try:
        ram_gb = round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1)
    except (AttributeError, OSError, ValueError):
        ram_gb = None
    gpus = None
    try:
        import torch

        if torch.cuda.is_available():
            gpus = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    except Exception as e:  # noqa: BLE001 - a broken CUDA setup must not stop the run from starting
        gpus = [f"unknown ({type(e).__name__}: {e})"]
    return {"cpu_count": os.cpu_count(), "ram_gb": ram_gb, "gpus": gpus, "host": socket.gethostname(),
            "platform": platform.platform(), "python": sys.version.split()[0],
            "threads": {k: os.environ.get(k) for k in ("FACTLAB_THREADS", "OMP_NUM_THREADS", "OMP_WAIT_POLICY")}}


def find_seeds(config: Any, path: str = "") -> dict[str, Any]:
    """Every key named ``seed`` (or ending in ``_seed``) in a nested config dict, by key path."""
    out: dict[str, Any] = {}
    if isinstance(config, dict):
        for k, v in config.items():
            p = f"{path}.{k}" if path else str(k)
            if (k == "seed" or str(k).endswith("_seed")) and not isinstance(v, (dict, list)):
                out[p] = v
            else:
                out.update(find_seeds(v, p))
    elif isinstance(config, list):
        for i, v in enumerate(config):
            out.update(find_seeds(v, f"{path}.{i}"))
    return out


def write_manifest(run_dir: str | Path, manifest: dict[str, Any]) -> Path:
    """Write ``manifest.json`` atomically (``paths.atomic_write_text``)."""
    return write_json(Path(run_dir) / MANIFEST, manifest, indent=2, default=str)


class RunInUse(ValueError):
    """Another process holds the run folder's lock."""


@contextlib.contextmanager
def run_lock(run_dir: str | Path) -> Iterator[None]:
    """Hold an exclusive lock on ``run_dir`` (``flock`` on ``.run.lock``, released when the
    process ends however it ends) while a run executes there; ``RunInUse`` naming the holder's
    pid when another process has it; ``paths.SymlinkRefused`` when the lock file, or anything
    in the folder, is a symbolic link (the lock file is opened with ``O_NOFOLLOW``)."""
    path = Path(run_dir) / LOCK_FILE
    fd = open_nofollow(path, os.O_RDWR | os.O_CREAT, where="a run folder")
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "unknown"
            raise RunInUse(f"{run_dir}: another factlab process (pid {holder}) is running in this run folder; "
                           "wait for it to end or stop it") from None
        refuse_symlinks(run_dir)  # nothing of the run is written through a link planted in its folder
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        yield
    finally:
        os.close(fd)


def _plain(value: Any) -> Any:
    """``value`` as it reads back from manifest.json (JSON types only)."""
    return json.loads(json.dumps(value, default=str))


def changed_keys(old: Any, new: Any, path: str = "") -> list[str]:
    """Dotted key paths where two configs differ (list items by index)."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [k for key in sorted(set(old) | set(new), key=str)
                for k in changed_keys(old.get(key), new.get(key), f"{path}.{key}" if path else str(key))]
    if isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        return [k for i, (a, b) in enumerate(zip(old, new)) for k in changed_keys(a, b, f"{path}.{i}")]
    return [] if old == new else [path or "(config)"]


def last_config(manifest: dict[str, Any]) -> Any:
    """The config the run's last attempt ran with."""
    attempts = manifest.get("attempts") or []
    last = attempts[-1] if attempts and isinstance(attempts[-1], dict) else {}
    return last.get("config", manifest.get("config"))


def read_manifest(run_dir: str | Path) -> dict[str, Any] | None:
    """The manifest of a run folder, ``None`` where it has none; ``ValueError`` naming the file
    when it is unreadable."""
    path = Path(run_dir) / MANIFEST
    if not path.exists():
        return None
    if not path.is_file():  # a FIFO blocked `factlab run --resume` forever (issue 43 round-3b probe)
        raise ValueError(f"{path}: not a regular file (a FIFO, a folder, a device): not a run manifest; remove it")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise ValueError(f"{path}: unreadable run manifest ({type(e).__name__}: {e})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: a run manifest is a JSON object, got {type(data).__name__}")
    attempts = data.get("attempts", [])
    if not isinstance(attempts, list) or not all(isinstance(a, dict) for a in attempts):
        raise ValueError(f"{path}: unreadable run manifest ('attempts' must be a list of objects, one per attempt)")
    return data


def start_manifest(run_dir: str | Path, *, notebook: str, params: str | Path, config: dict[str, Any],
                   project: str | Path, resume: bool = False) -> dict[str, Any]:
    """Write the manifest of a run that starts now (state ``running``); a resumed run keeps
    its first start time and earlier attempts (each with the config it ran with) and adds one
    attempt, which lists the keys whose value changed since the last one (``config_changed``).
    The top-level ``config`` is the latest attempt's."""
    old = read_manifest(run_dir) if resume else None
    started = now()
    config = redact_value(_plain(config))
    attempts = list((old or {}).get("attempts", []))
    if attempts and isinstance(attempts[-1], dict) and "config" not in attempts[-1]:  # written before per-attempt configs
        attempts[-1] = {**attempts[-1], "config": (old or {}).get("config")}
    attempt = {"started_at": started, "ended_at": None, "state": "running", "error": None,
               "pid": os.getpid(), "host": socket.gethostname(), "resumed": bool(resume), "config": config}
    if old is not None:
        changed = changed_keys(last_config(old), config)
        if changed:
            attempt["config_changed"] = changed
    attempts.append(attempt)
    manifest = {
        "notebook": notebook,
        "params": str(params),
        "state": "running",
        "error": None,
        "started_at": (old or {}).get("started_at", started),
        "ended_at": None,
        "attempts": attempts,
        "config": config,
        "seeds": find_seeds(config),
        "packages": package_versions(),
        "git": git_state(project),
        "hardware": hardware(),
    }
    write_manifest(run_dir, manifest)
    return manifest


def finish_manifest(run_dir: str | Path, state: str, error: str | None = None) -> dict[str, Any]:
    """Record how the run ended: ``ok``, ``failed`` (with ``error``) or ``interrupted``."""
    if state not in STATES[1:]:
        raise ValueError(f"run state must be one of {STATES[1:]}, got {state!r}")
    manifest = read_manifest(run_dir) or {}
    ended = now()
    error = redact_text(error) if error else error
    manifest.update(state=state, error=error, ended_at=ended)
    if manifest.get("attempts"):
        manifest["attempts"][-1].update(state=state, error=error, ended_at=ended)
    write_manifest(run_dir, manifest)
    return manifest


def _process_alive(pid: int) -> bool:
    if isinstance(pid, bool) or not 0 < pid < 2 ** 31:  # a damaged manifest: -1 or 0 "find" every process, 10**30
        return False                                     # overflowed (issue 43 round-3b probe)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    except OSError:
        return False
    return True


def resumable(run_dir: str | Path, notebook: str) -> dict[str, Any] | None:
    """Check that ``run_dir`` is a run folder of ``notebook`` that may be resumed; return its
    manifest (``None`` for a folder written before manifests existed). ``ValueError`` with
    the reason otherwise: not a run folder, another notebook's run, finished ``ok``, or
    still running (its process alive on this host)."""
    run_dir = Path(run_dir)
    if not (run_dir / "config.yaml").is_file():
        raise ValueError(f"--resume {run_dir}: not a run folder (no config.yaml in it)")
    manifest = read_manifest(run_dir)
    if manifest is None:
        return None
    if manifest.get("notebook") not in (None, notebook):
        raise ValueError(f"--resume {run_dir}: a run of {manifest['notebook']}, not of {notebook}")
    state = manifest.get("state")
    if state == "ok":
        raise ValueError(f"--resume {run_dir}: that run finished ok; nothing to resume (start a new run)")
    last = (manifest.get("attempts") or [{}])[-1]
    if (state == "running" and last.get("host") == socket.gethostname() and isinstance(last.get("pid"), int)
            and last["pid"] != os.getpid() and _process_alive(last["pid"])):
        raise ValueError(f"--resume {run_dir}: still running (pid {last['pid']}); stop it first")
    return manifest

"""Independent jobs in forked worker processes, one torch thread each: how the evidence runs put
every core of a small machine to work (``evidence.workers``).

Why processes, not threads: decoding the 135M model is bound by the per-step overhead of its
small layers, not by arithmetic. Measured on this project's 2-core machine (2026-11-26, a G = 4
rollout of 128 tokens from a 285-token SEVA prompt): 24.5 s with 1 thread and with 2; two
1-thread processes side by side took 22-29 s each. A LoRA forward and backward takes 19.4 s with
1 thread and 10.9 s with 2. ``bench/bench_evidence_workers.py`` times whole jobs both ways: two jobs
of 4 GRPO-shaped steps took 183.8 s one after the other with 2 threads and 141.9 s on two workers
(0.77x); a worker's first forward and backward takes about twice its later ones, so jobs of 2
steps gain little (0.94x).

Why fork: a job is a closure over a notebook's live objects (its ``evaluate`` function, its
reward resources), which ``spawn`` would have to pickle. Why one thread: GNU OpenMP's thread
pool does not survive a fork; a forked child that asks torch for 2 threads after its parent used
2 hangs in its first parallel region (measured). Each child writes its stdout, stderr and logging
to the job's log file, and multiprocessing ends it without running the parent's exit hooks (a
Jupyter kernel's sockets are never touched twice). A job that fails stops the others and raises
:class:`JobFailed` naming the job, its exit code and its log, with the log's tail.

Not under CUDA: a process that has initialized CUDA cannot fork a child that uses it ("Cannot
re-initialize CUDA in forked subprocess"), and ``spawn`` cannot carry the jobs' closures. So
``run_jobs`` with several workers refuses (:class:`CUDAForkError`, before forking anything) once
CUDA is initialized in this process: on a GPU the jobs run with ``workers: 1``, one after the other
on the GPU, which is faster there than CPU workers.
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing as mp
import os
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from .threads import usable_cores

__all__ = ["Job", "JobFailed", "CUDAForkError", "cuda_initialized", "run_jobs"]

log = logging.getLogger(__name__)


@dataclass
class Job:
    """One unit of work: ``run()`` writes its own result files; ``log`` gets a forked job's output."""

    name: str
    run: Callable[[], None]
    log: Path


class JobFailed(RuntimeError):
    """A forked job exited with an error (the message names it, its exit code and its log)."""


class CUDAForkError(RuntimeError):
    """Forked workers were asked for after this process initialized CUDA."""


def cuda_initialized() -> bool:
    """Whether this process has initialized CUDA (torch imported and a CUDA context made)."""
    torch = sys.modules.get("torch")
    return bool(torch is not None and torch.cuda.is_initialized())


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log written)"


GRACE_S = 10.0  # how long ended workers get, all together, between SIGTERM and SIGKILL


def _die_with(parent: int) -> None:
    """SIGKILL this process when ``parent`` dies (Linux ``PR_SET_PDEATHSIG``; elsewhere nothing):
    a parent killed outright (SIGKILL, the OOM killer) cannot stop its workers, which would train
    on for hours into the folders a resumed run trains in (issue 43 round-4 probe). Ends at once
    when the parent died before this was set."""
    if not sys.platform.startswith("linux"):
        return
    import ctypes
    import signal

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the parent died before the death signal was armed: end as it would have
        os.kill(os.getpid(), signal.SIGKILL)


def _child(job: Job, parent: int) -> None:
    """The forked side: one torch thread, output to the job's log, ended with its parent
    (``_die_with``). multiprocessing ends the process itself (exit code 0, or 1 after an error,
    its traceback in the log) without running the parent's exit hooks."""
    _die_with(parent)
    job.log.parent.mkdir(parents=True, exist_ok=True)
    out = open(job.log, "w", buffering=1, encoding="utf-8")
    os.dup2(out.fileno(), 1)
    os.dup2(out.fileno(), 2)
    sys.stdout = sys.stderr = out
    root = logging.getLogger()
    level = root.level
    for h in list(root.handlers):
        root.removeHandler(h)
    handler = logging.StreamHandler(out)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(level)
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    trainer_module = sys.modules.get("transformers.trainer")
    if trainer_module is not None:  # a kernel's HTML progress widget would print as message dicts
        from transformers.trainer_callback import ProgressCallback

        trainer_module.DEFAULT_PROGRESS_CALLBACK = ProgressCallback
    import torch

    torch.set_num_threads(1)
    try:
        job.run()
    except BaseException:  # noqa: BLE001 - the traceback goes to the log; the parent raises JobFailed
        traceback.print_exc()
        raise SystemExit(1) from None
    finally:
        out.flush()


def _stopped(pid: int) -> bool:
    """Whether process ``pid`` is stopped (SIGSTOP, Ctrl-Z, a debugger): ``T`` or ``t`` in
    ``/proc/<pid>/stat`` (Linux; elsewhere never seen as stopped)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(b")") + 2:stat.rfind(b")") + 3] in (b"T", b"t")


def _end(proc) -> None:
    """Stop a worker: SIGTERM, then SIGCONT (a stopped process acts on no signal but SIGKILL
    until continued), then SIGKILL if it has not ended in 10 s."""
    import signal

    proc.terminate()
    with contextlib.suppress(OSError):
        os.kill(proc.pid, signal.SIGCONT)


def run_jobs(jobs: Sequence[Job], workers: int = 1, *, desc: str = "jobs", progress: bool = True,
             poll_s: float = 0.5, stopped_s: float = 60.0) -> None:
    """Run ``jobs``: in this process one after the other when ``workers`` is 1 (or there is one
    job), else in up to ``workers`` forked processes at once (module docstring). Returns when
    all have finished; raises :class:`JobFailed` at the first that fails, the others stopped.
    A worker seen stopped (SIGSTOP, a debugger) for ``stopped_s`` seconds counts as failed: it
    would never finish, and the run would wait for it forever."""
    from tqdm.auto import tqdm

    if workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    if workers == 1 or len(jobs) <= 1:
        for job in jobs:
            job.run()
        return
    if sys.platform == "win32":
        raise RuntimeError("evidence.workers > 1 forks worker processes, which Windows cannot; set workers: 1")
    if cuda_initialized():
        raise CUDAForkError(f"{desc}: {workers} workers would fork this process after it initialized CUDA, and a "
                            f"forked child cannot use CUDA ('Cannot re-initialize CUDA in forked subprocess'); set "
                            f"evidence.workers: 1 (the jobs then run one after the other on the GPU)")
    cores = usable_cores()
    if workers > cores:  # each worker is one thread: the extra ones would only share the cores, and hold memory
        log.warning("%s: %d workers on %d cores: running %d at a time (set evidence.workers to at most %d)",
                    desc, workers, cores, cores, cores)
        workers = cores
        if workers == 1:
            for job in jobs:
                job.run()
            return
    ctx = mp.get_context("fork")
    pending = list(jobs)
    running: dict = {}
    stopped_since: dict = {}
    bar = tqdm(total=len(jobs), desc=desc, disable=not progress)
    try:
        while pending or running:
            while pending and len(running) < workers:
                job = pending.pop(0)
                proc = ctx.Process(target=_child, args=(job, os.getpid()), name=f"factlab-{job.name}")
                proc.start()
                log.info("%s: started %s (pid %d), log %s", desc, job.name, proc.pid, job.log)
                running[proc] = job
            time.sleep(poll_s)
            now = time.monotonic()
            for proc, job in running.items():
                if not _stopped(proc.pid):
                    stopped_since.pop(proc, None)
                elif now - stopped_since.setdefault(proc, now) >= stopped_s:
                    raise JobFailed(f"{desc}: {job.name} (pid {proc.pid}) has been stopped for {stopped_s:g} s "
                                    f"(SIGSTOP or a debugger) and would never finish; its log is {job.log}")
            for proc in [p for p in running if not p.is_alive()]:
                proc.join()
                job = running.pop(proc)
                if proc.exitcode != 0:
                    raise JobFailed(f"{desc}: {job.name} failed (exit code {proc.exitcode}); its log is {job.log}; "
                                    f"its last lines:\n{_tail(job.log)}")
                bar.update(1)
    finally:
        try:
            for proc in running:
                _end(proc)
            deadline = time.monotonic() + GRACE_S  # one grace for all of them: one after the other, 8 workers that ignore
            for proc in running:              # SIGTERM kept Ctrl-C waiting 80 s (issue 43 round-3b probe)
                proc.join(max(0.0, deadline - time.monotonic()))
        finally:  # also when a second Ctrl-C cuts that wait short: it left the workers running, and the parent's
            for proc in running:  # exit waited for them to finish their jobs (issue 43 round-4 probe)
                if proc.is_alive():
                    proc.kill()
                    proc.join(5)
            bar.close()

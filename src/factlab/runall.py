"""``factlab run-all`` (``make run``): every notebook, on parallel workers when the machine has the cores.

A notebook on the organism is a chain of small steps (a 1M-parameter model, one question at a
time): torch's intra-op threads barely help it. Measured on 2 idle cores, 02_binary_rar's smoke
took 100.5 s with one thread and 99.1 s with two, its user time equal to its wall time, so a
second core idles. The organism's pretraining is the exception: 0.34 s a step with one thread,
0.20 s with two. So ``run_all`` runs:

1. the organisms the selected notebooks name (``organism.build``), each once, with every core,
   beside the notebooks that need none (00_quickstart);
2. then the rest, ``jobs`` notebooks at a time (threads of this process, each waiting on its
   own kernel), every kernel with ``cores // jobs`` torch threads.

Each notebook is still one ``runner.run_notebook`` in its own run folder with its own lock, and
every shared cache (the organism, indexes, datastores, converted models, warm starts) is built
under a file lock, so two kernels never build one twice. ``jobs=1`` is the old sequential run.
"""

from __future__ import annotations

import concurrent.futures as cf
import logging
import multiprocessing
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

from . import organism, runner, threads
from .runner import (RunResult, default_params, list_notebooks, load_params, outputs_root, project_root,
                     run_notebook, sigterm_as_interrupt, write_index)

log = logging.getLogger(__name__)

__all__ = ["run_all", "default_jobs", "organisms_named"]

NOTEBOOK_MEMORY_GB = 2.5  # the most one smoke notebook's kernel held (2.2 GB peak, README "How long")


def _available_memory_gb() -> float:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) / 2**20
    except (OSError, ValueError, IndexError):
        pass
    return float("inf")


def default_jobs(notebooks: int) -> int:
    """Notebooks run at once: one per usable core, no more than there are notebooks, and no
    more than the available memory holds at ``NOTEBOOK_MEMORY_GB`` each (at least one)."""
    by_memory = int(_available_memory_gb() // NOTEBOOK_MEMORY_GB)
    return max(1, min(threads.usable_cores(), notebooks, by_memory))


def organisms_named(value: Any) -> set[str]:
    """Every organism name (``organism.SPECS``) among the strings of a config dump: the
    policy, a judge, a verifier, a reward model."""
    if isinstance(value, dict):
        return set().union(*map(organisms_named, value.values()))
    if isinstance(value, (list, tuple)):
        return set().union(*map(organisms_named, value))
    return {value} if organism.is_organism(value) else set()


def run_all(smoke: bool = True, out: str | Path | None = None, root: Path | None = None,
            only: list[str] | None = None, with_code: bool = False, jobs: int | None = None) -> list[RunResult]:
    """Run every numbered notebook (smoke or full params) and write ``outputs/index.html``.

    Before the first kernel starts, ``only`` (``None``: every notebook) must name at least one
    notebook and every name in it must be a notebook stem (else ``ValueError`` naming the
    unknown ones) and every selected notebook's params must validate (else ``ConfigError``).
    ``jobs``: notebooks at once (``None``: ``default_jobs``; 1: one after another, in order).
    Results come back in notebook order. The index is left alone when nothing ran."""
    root = root or project_root()
    notebooks = list_notebooks(root)
    if only is not None and not only:
        raise ValueError("run-all --only needs at least one notebook name (leave --only out to run every notebook)")
    if only:
        known = [nb.stem for nb in notebooks]
        unknown = [name for name in only if Path(name).stem not in known]
        if unknown:
            raise ValueError(f"unknown notebook(s) {', '.join(map(repr, unknown))}; known: {', '.join(known)}")
        notebooks = [nb for nb in notebooks if nb.stem in {Path(name).stem for name in only}]
    if jobs is not None and jobs < 1:
        raise ValueError(f"run-all --jobs {jobs}: at least one notebook must run at a time")
    configs = {nb: load_params(nb.stem, default_params(nb, smoke)) for nb in notebooks}
    jobs = default_jobs(len(notebooks)) if jobs is None else min(jobs, max(len(notebooks), 1))
    if jobs <= 1:
        results = []
        for nb in notebooks:
            log.info("running %s", nb.name)
            results.append(run_notebook(nb, smoke=smoke, out=out, raise_on_error=False, with_code=with_code))
    else:
        needs = {nb: organisms_named(cfg.model_dump(mode="json")) for nb, cfg in configs.items()}
        results = _run_parallel(notebooks, needs, jobs, dict(smoke=smoke, out=out, with_code=with_code))
    if results:
        write_index(results, (Path(out) if out else outputs_root(root)) / "index.html")
    return results


def _run_parallel(notebooks: list[Path], needs: dict[Path, set[str]], jobs: int,
                  kw: dict[str, Any]) -> list[RunResult]:
    """The notebooks ``jobs`` at a time, the organisms they name built first; every notebook
    runs even when another fails, and the first exception a run raised (not a failed cell: that
    is a ``RunResult``) is raised at the end.

    The notebooks run on threads of this process: each one's kernel is its own process anyway,
    and a worker process per notebook would import torch, TRL and transformers again (576 MB
    each) only to wait on its kernel. The build runs in a spawned process of its own, which gives
    its memory back when it ends. Ctrl-C or SIGTERM here interrupts every running kernel (their
    manifests record ``interrupted``) and the build, waits for the runs to record it (a kernel that
    has not answered within ``KILL_AFTER_S`` is killed), and re-raises."""
    cores = threads.usable_cores()
    per_kernel = threads.thread_count() or max(1, cores // jobs)
    per_build = threads.thread_count() or cores
    to_build = sorted(set().union(*needs.values()))
    log.info("run-all: %d notebooks, %d at a time, %d thread(s) each%s", len(notebooks), jobs, per_kernel,
             f"; first the organism(s) {', '.join(to_build)} with {cores} threads" if to_build else "")
    futures: dict[cf.Future, Path] = {}
    results: dict[Path, RunResult] = {}
    errors: list[BaseException] = []
    saved = {k: os.environ.get(k) for k in (threads.ENV_THREADS, "OMP_NUM_THREADS", threads.ENV_CORES)}
    threads.export_env(per_kernel)  # what each kernel inherits when it starts: its threads and its share of
    os.environ[threads.ENV_CORES] = str(max(1, cores // jobs))  # the cores (a notebook's forked workers)
    builder = _build_pool() if to_build else None
    pool = _pool(jobs)
    runner.STOP_REQUESTED.clear()
    try:
        def submit(nb: Path) -> None:
            futures[pool.submit(_run_one, nb, kw)] = nb

        build = builder.submit(_build_task, to_build, per_build) if builder else None
        for nb in notebooks:
            if not needs[nb]:
                submit(nb)
        if build is not None:
            try:
                log.info("run-all: organism(s) built in %.0f s", build.result())
            except Exception as e:  # each notebook that needs it meets the same error in its own report
                log.error("run-all: building the organism(s) failed (%s); the notebooks that use one report it", e)
            builder.shutdown(wait=True)  # its process held ~1 GB idle for the rest of the run
        for nb in notebooks:
            if needs[nb]:
                submit(nb)
        for done in cf.as_completed(futures):
            nb = futures[done]
            try:
                r = results[nb] = done.result()
                print(f"{'ok    ' if r.ok else 'FAILED'} {nb.stem} ({r.run_dir})", file=sys.stderr, flush=True)
            except Exception as e:
                log.error("%s: %s", nb.stem, e)
                errors.append(e)
    except BaseException:
        for f in futures:
            f.cancel()
        runner.STOP_REQUESTED.set()  # a kernel that dies of the interrupt while it starts reads `interrupted`
        _interrupt_children()
        stopped_at, killed = time.monotonic(), False
        while cf.wait(futures, timeout=INTERRUPT_AGAIN_S).not_done:  # the runs record `interrupted` in their manifests;
            if not killed and time.monotonic() - stopped_at > KILL_AFTER_S:
                killed = True
                _kill_kernels()
            else:
                _interrupt_children(kernels_only=True)  # a kernel idle between two cells ignored SIGINT
        for f, nb in futures.items():
            if not f.cancelled() and f.exception() is None and not f.result().ok:
                log.error("%s interrupted (%s); continue it with: factlab run %s --resume %s", nb.stem,
                          f.result().error, nb.stem, f.result().run_dir)
        raise
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
        if builder is not None:
            builder.shutdown(wait=True, cancel_futures=True)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    if errors:
        raise errors[0]
    return [results[nb] for nb in notebooks if nb in results]


def _run_one(nb: Path, kw: dict[str, Any]) -> RunResult:
    log.info("running %s", nb.name)
    return run_notebook(nb, progress=False, raise_on_error=False, **kw)


def _pool(jobs: int) -> cf.Executor:
    return cf.ThreadPoolExecutor(jobs, thread_name_prefix="run-all")


def _build_pool() -> cf.Executor:
    """A spawned process for the build: its memory goes back when it ends. It ignores SIGINT: a
    terminal's Ctrl-C reaches it with run-all (one process group), and one that landed while it
    waited for a task printed a traceback from ``concurrent.futures``; run-all stops it with
    SIGTERM instead (``_interrupt_children``), which the build task reads as Ctrl-C."""
    return cf.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"), initializer=_ignore_sigint)


def _ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _children() -> list[int]:
    """The pids of this process's children (the kernels papermill started, the build)."""
    me, out = os.getpid(), []
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    stat = f.read()
                if int(stat.rpartition(")")[2].split()[1]) == me:
                    out.append(int(entry))
            except (OSError, ValueError, IndexError):
                continue
    return out


INTERRUPT_AGAIN_S = 2.0  # after a stop, how often the kernels still running are interrupted again
# After a stop, how long a kernel may take to answer its interrupt before it is killed. An interrupt that lands
# in ipykernel's own code, after a cell's body but before its reply, leaves the kernel alive and silent:
# papermill (no cell timeout) waited on it forever, its manifest said `running` (issue 43, probe race-term).
# A killed kernel is a dead kernel to nbclient: the run ends and records `interrupted` (STOP_REQUESTED). A kernel
# interrupted as it starts can be left the same way (probe_runall_build term-start: 63 s at 60). 20 s: nothing a
# kernel does on KeyboardInterrupt takes longer (factlab's files are written atomically, training saves nothing
# on an interrupt), and a C call (a generation step) returns well within it.
KILL_AFTER_S = 20.0


def _interrupt_children(kernels_only: bool = False) -> None:
    """SIGINT to each kernel's process group: a kernel (its own session, so the terminal's Ctrl-C
    never reaches it) raises KeyboardInterrupt in its cell. SIGTERM to the build process (it
    ignores SIGINT, ``_build_pool``): the build stops under its lock. A kernel between two cells
    ignores SIGINT and runs the next cell (it ran the notebook to its end, recorded ``ok``, while
    run-all waited): ``kernels_only`` sends it again to the kernels alone."""
    for pid in _children():
        kernel = _is_kernel(pid)
        if kernels_only and not kernel:
            continue
        sig = signal.SIGINT if kernel else signal.SIGTERM if _is_build(pid) else None
        if sig is None:  # multiprocessing's resource tracker: it ignores both, and ends with run-all
            continue
        try:
            os.killpg(pid, sig) if os.getpgid(pid) == pid else os.kill(pid, sig)
        except OSError:
            pass


def _kill_kernels() -> None:
    """SIGKILL to every kernel still running, ``KILL_AFTER_S`` after a stop they did not answer."""
    for pid in _children():
        if _is_kernel(pid):
            log.warning("run-all: kernel %d did not stop within %.0f s of the stop; killed it", pid, KILL_AFTER_S)
            try:
                os.killpg(pid, signal.SIGKILL) if os.getpgid(pid) == pid else os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


def _is_kernel(pid: int) -> bool:
    return b"ipykernel" in _cmdline(pid)


def _is_build(pid: int) -> bool:
    """A process that multiprocessing spawned (the build pool's worker, ``_build_pool``)."""
    return b"spawn_main" in _cmdline(pid)


def _build_task(names: list[str], n_threads: int) -> float:
    """In the build process: the organisms ``names`` (each a no-op when cached), ``n_threads``
    torch threads; SIGTERM ends it like Ctrl-C (its lock and temporary folder are let go)."""
    threads.configure(n_threads)
    t0 = time.perf_counter()
    with sigterm_as_interrupt():  # a no-op on a thread (the tests build on one)
        for name in names:
            organism.build(name, progress=False)
    return time.perf_counter() - t0

"""CPU threads on shared machines: torch's intra-op thread count and the OpenMP wait policy.

torch's CPU build runs its intra-op pool on OpenMP, whose idle threads spin while they wait
for the next parallel region. When another process holds one of the cores, every region
waits for the thread that lost its core while the others burn theirs spinning: on 2 cores
with other jobs running, one SmolLM2-135M forward and backward took 5.7x longer than with
passive waiting (``bench/bench_main_job.py --load``; bench/README.md).

factlab therefore sets, for its own process and every kernel or worker it starts:

* ``OMP_WAIT_POLICY=PASSIVE`` (waiting threads sleep) unless the variable is already set.
  The OpenMP runtime reads it once, when torch is first imported, so it is set when
  ``factlab`` is imported (before torch, in notebooks, the CLI and tests); a process that
  imported torch first keeps the runtime's default (``configure`` says so in its result).
* the intra-op thread count from ``FACTLAB_THREADS`` (an integer; unset or ``auto``: torch's
  default, one per core). It is exported as ``OMP_NUM_THREADS`` for processes that have not
  loaded torch yet and applied with ``torch.set_num_threads`` in one that has.

``factlab --threads N ...`` (any command) and ``FACTLAB_THREADS=N`` do the same.
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any, Iterator, MutableMapping

ENV_THREADS = "FACTLAB_THREADS"
WAIT_POLICY = "PASSIVE"
MAX_THREADS = 1024  # far above any core count: a bigger number is a typo, and OpenMP's pool would exhaust memory


def thread_count(value: int | str | None = None) -> int | None:
    """The intra-op thread count asked for: ``value``, else ``$FACTLAB_THREADS``; ``None`` for
    torch's default (unset, empty or ``auto``). ``ValueError`` on anything but a positive integer."""
    raw = os.environ.get(ENV_THREADS) if value is None else value
    if raw is None or str(raw).strip().lower() in ("", "auto"):
        return None
    try:
        n = int(str(raw).strip())
    except ValueError:
        n = 0
    if n < 1:
        raise ValueError(f"{ENV_THREADS} must be a positive integer or 'auto', got {raw!r}")
    if n > MAX_THREADS:  # 99999 threads died with MemoryError, after a run folder was made
        raise ValueError(f"{ENV_THREADS} / --threads: {n} threads is more than {MAX_THREADS}; this machine has "
                         f"{usable_cores()} usable cores")
    return n


def export_env(threads: int | str | None = None, environ: MutableMapping[str, str] | None = None) -> dict[str, str]:
    """Put the settings into ``environ`` (default ``os.environ``), which child processes
    (papermill kernels, sweep workers) inherit: ``OMP_WAIT_POLICY`` unless set, and with a
    thread count ``FACTLAB_THREADS`` and ``OMP_NUM_THREADS``. Returns what was set."""
    environ = os.environ if environ is None else environ
    done = {}
    if "OMP_WAIT_POLICY" not in environ:
        environ["OMP_WAIT_POLICY"] = done["OMP_WAIT_POLICY"] = WAIT_POLICY
    n = thread_count(threads)
    if n is not None:
        environ[ENV_THREADS] = environ["OMP_NUM_THREADS"] = done[ENV_THREADS] = str(n)
    return done


ENV_CORES = "FACTLAB_CORES"  # set by `run-all` for its kernels: the share of the cores each may use


def usable_cores() -> int:
    """The cores this process may run on: its CPU affinity where the OS reports one, or fewer
    when ``$FACTLAB_CORES`` says so (``run-all`` gives each of its N kernels cores / N, so a
    notebook's forked workers do not oversubscribe the machine)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    try:
        share = int(os.environ.get(ENV_CORES) or 0)
    except ValueError:
        share = 0
    return min(cores, share) if share > 0 else cores


def configure(threads: int | str | None = None) -> dict[str, Any]:
    """Apply the settings to this process and export them to its children (``export_env``).
    Returns ``threads`` (torch's intra-op count, or the one it will take when it loads),
    ``wait_policy``, and ``wait_policy_applies``: False when torch was imported before factlab
    and the policy was not in the environment then (the OpenMP runtime had read it already)."""
    export_env(threads)
    n = thread_count(threads)
    if "torch" in sys.modules:
        import torch

        if n is not None and torch.get_num_threads() != n:
            torch.set_num_threads(n)
        current = torch.get_num_threads()
    else:
        current = n if n is not None else usable_cores()
    return {"threads": current, "wait_policy": os.environ["OMP_WAIT_POLICY"],
            "wait_policy_applies": POLICY_INHERITED or not TORCH_BEFORE_FACTLAB}


@contextlib.contextmanager
def intra_op_threads(n: int) -> Iterator[None]:
    """torch's intra-op thread count set to ``n`` inside the block, restored after. For work whose
    numbers must not depend on the machine: torch's CPU kernels split their reductions by thread,
    so a training run's weights differ with the thread count (``organism.build`` pins it)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


# How this process started: torch already imported when factlab was, and a policy inherited
# from the environment. Then factlab's settings are applied (the import of ``factlab`` imports
# this module first).
TORCH_BEFORE_FACTLAB = "torch" in sys.modules
POLICY_INHERITED = "OMP_WAIT_POLICY" in os.environ
try:
    configure()
except ValueError as _e:  # a bad FACTLAB_THREADS made `import factlab` (every command, every kernel) a traceback;
    export_env("auto")    # the wait policy still applies, and the CLI's configure(--threads) says what is wrong
    import logging        # (exit 2) unless --threads replaces it (issue 43 round-3b probe)

    logging.getLogger(__name__).warning("%s; torch's default thread count is used", _e)

"""The main job (`make run`: every notebook on its smoke params), stage by stage: seconds and
peak resident memory of every notebook cell that takes longer than a second.

Each notebook runs through ``factlab.runner`` (papermill, one kernel per notebook) into a
temporary outputs folder; a sampler thread reads the resident memory of the kernel process
(and its children) every 0.2 s, and papermill's cell start / end times assign each sample to
a cell. Caches (the converted model, the mini-world, indexes, datastores, self-filter and
judge answers) are whatever ``FACTLAB_CACHE`` holds: run once with an empty one for the cold
numbers (``FACTLAB_CACHE=$(mktemp -d) python bench/bench_main_job.py``).

    python bench/bench_main_job.py [NOTEBOOK ...]
    python bench/bench_main_job.py --load 00_quickstart 01_corver

``--load``: the notebooks run twice, first alone, then beside one CPU-bound ``nice -n 19``
process (what a shared machine has), and the ratio of their cell seconds is printed per
notebook and in all (issue 29: at most 1.5x). Run it on a warm cache (after one run without
``--load``), or the first pass also pays the first-use builds. The kernels get the thread
settings of ``factlab.threads`` (``FACTLAB_THREADS``, ``OMP_WAIT_POLICY``), printed first.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

from factlab import runner


class MemorySampler(threading.Thread):
    """Resident memory of this process's children (the kernels), sampled every ``period`` s."""

    def __init__(self, period: float = 0.2):
        super().__init__(daemon=True)
        self.period, self.samples, self._halt = period, [], threading.Event()
        self.exclude: set[int] = set()  # the competing process of --load is no kernel

    def run(self) -> None:
        me = psutil.Process()
        while not self._halt.is_set():
            rss = 0
            for child in me.children(recursive=True):
                if child.pid in self.exclude:
                    continue
                try:
                    rss += child.memory_info().rss
                except psutil.Error:
                    pass
            self.samples.append((time.time(), rss))
            self._halt.wait(self.period)

    def stop(self) -> None:
        self._halt.set()
        self.join()

    def peak(self, start: float, end: float) -> int:
        return max((r for t, r in self.samples if start <= t <= end), default=0)


def _ts(value: str) -> float:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def run_notebooks(notebooks: list[Path], out: Path, sampler: MemorySampler) -> tuple[list, list]:
    """Run each notebook on its smoke params; (cell rows over a second, per-notebook totals)."""
    rows, totals = [], []
    for nb in notebooks:
        t0 = time.time()
        res = runner.run_notebook(nb, smoke=True, out=out, progress=False, raise_on_error=False)
        wall = time.time() - t0
        cells = json.loads(res.notebook.read_text())["cells"]
        cell_s = 0.0
        for i, c in enumerate(cells):
            pm = c.get("metadata", {}).get("papermill", {})
            if not pm.get("start_time") or not pm.get("end_time"):
                continue
            start, end = _ts(pm["start_time"]), _ts(pm["end_time"])
            cell_s += end - start
            if end - start >= 1.0:
                first = next((line for line in "".join(c["source"]).splitlines()
                              if line.strip() and not line.startswith(("import", "from", "#"))), "")
                rows.append((nb.stem, i, end - start, sampler.peak(start, end), first.strip()[:60]))
        totals.append((nb.stem, res.ok, cell_s, wall, sampler.peak(t0, time.time())))
        print(f"[{nb.stem}] ok={res.ok} cells {cell_s:.0f} s, wall {wall:.0f} s, "
              f"peak {totals[-1][4] / 2**20:.0f} MB", flush=True)  # partial results survive an interrupted run
    return rows, totals


def competing_process() -> subprocess.Popen:
    """One CPU-bound process at the lowest priority (``nice -n 19``), as a shared machine has."""
    return subprocess.Popen(["nice", "-n", "19", sys.executable, "-c", "while True: pass"])


def main(names: list[str], load: bool = False) -> None:
    root = runner.project_root()
    notebooks = [runner.find_notebook(n, root) for n in names] if names else runner.list_notebooks(root)
    out = Path(tempfile.mkdtemp(prefix="factlab-bench-"))
    print("threads: " + ", ".join(f"{k}={os.environ.get(k)}" for k in ("FACTLAB_THREADS", "OMP_NUM_THREADS",
                                                                        "OMP_WAIT_POLICY")), flush=True)
    sampler = MemorySampler()
    sampler.start()
    rows, totals = run_notebooks(notebooks, out / "idle", sampler)
    if load:
        competitor = competing_process()
        sampler.exclude.add(competitor.pid)
        try:
            print(f"-- again beside one CPU-bound nice -n 19 process (pid {competitor.pid})", flush=True)
            _, loaded = run_notebooks(notebooks, out / "loaded", sampler)
        finally:
            competitor.kill()
            competitor.wait()
    sampler.stop()
    print(f"{'notebook':16s} {'cell':>4s} {'seconds':>8s} {'peak MB':>8s}  stage")
    for name, i, sec, peak, first in rows:
        print(f"{name:16s} {i:4d} {sec:8.1f} {peak / 2**20:8.0f}  {first}")
    print()
    print(f"{'notebook':16s} {'ok':>3s} {'cells s':>8s} {'wall s':>8s} {'peak MB':>8s}")
    for name, ok, cell_s, wall, peak in totals:
        print(f"{name:16s} {'yes' if ok else 'NO':>3s} {cell_s:8.1f} {wall:8.1f} {peak / 2**20:8.0f}")
    cells_total, wall_total = sum(t[2] for t in totals), sum(t[3] for t in totals)
    print(f"main job: {cells_total:.0f} s of notebook cells, {wall_total:.0f} s wall, peak resident memory "
          f"{max(t[4] for t in totals) / 2**20:.0f} MB, {os.cpu_count()} cores")
    if load:
        print()
        print(f"{'notebook':16s} {'alone s':>8s} {'loaded s':>9s} {'ratio':>6s}")
        for (name, ok, alone, _, _), (_, ok2, busy, _, _) in zip(totals, loaded):
            print(f"{name:16s} {alone:8.1f} {busy:9.1f} {busy / alone:6.2f}{'' if ok and ok2 else '  (a run failed)'}")
        loaded_total = sum(t[2] for t in loaded)
        print(f"under load (one nice -n 19 CPU-bound process) / alone, cell seconds: "
              f"{loaded_total / cells_total:.2f}x (goal <= 1.5x)")


if __name__ == "__main__":
    args = sys.argv[1:]
    main([a for a in args if a != "--load"], load="--load" in args)

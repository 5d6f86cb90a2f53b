"""run-all's scheduler (factlab.runall): the organisms first, then the notebooks on parallel
workers, results in notebook order, one failure never stopping the others. The build runs on a
thread here so the fake applies; the real one is a spawned process (measured in README "How long")."""

import concurrent.futures as cf
import os
import threading
from pathlib import Path

import pytest

from factlab import organism, runall, runner, threads

NOTEBOOKS = ["00_quickstart", "01_corver", "02_binary_rar", "03_seva", "04_k2v", "05_klcf", "06_compare"]


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """Records builds, notebook starts and the threads each asked for; no kernel starts."""
    monkeypatch.setenv("FACTLAB_OUTPUTS", str(tmp_path))
    log, lock = [], threading.Lock()
    built = threading.Event()

    def build(name, progress=True):
        with lock:
            log.append(("build", name))
        built.set()

    def run_notebook(nb, **kw):
        stem = Path(nb).stem
        with lock:
            log.append(("run", stem, built.is_set()))
        run_dir = tmp_path / "runs" / stem / "20260101-000000-smoke"
        kernel_threads.append((os.environ.get("FACTLAB_THREADS"), os.environ.get("FACTLAB_CORES")))
        if stem == "03_seva":
            raise_it = kw.get("raise_on_error")
            assert raise_it is False  # a failed cell is a result, never an exception
            return runner.RunResult(run_dir, run_dir / "notebook.ipynb", run_dir / "report.html", {}, ok=False,
                                    error="ValueError: boom (cell 3)")
        return runner.RunResult(run_dir, run_dir / "notebook.ipynb", run_dir / "report.html", {}, ok=True)

    configured, kernel_threads = [], []
    monkeypatch.setattr(organism, "build", build)
    monkeypatch.setattr(runall, "run_notebook", run_notebook)
    monkeypatch.setattr(runall, "_build_pool", lambda: cf.ThreadPoolExecutor(1))
    monkeypatch.setattr(threads, "configure", lambda n=None: configured.append(n))
    monkeypatch.setattr(threads, "usable_cores", lambda: 4)
    monkeypatch.delenv("FACTLAB_THREADS", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("FACTLAB_CORES", raising=False)
    return log, configured, kernel_threads


def test_organisms_are_found_anywhere_in_a_config():
    cfg = {"model": {"name": "organism"}, "judge": {"model": "organism-hesitant"},
           "arms": [{"policy": "smollm2-135m-instruct"}, {"policy": "organism"}], "n": 3, "x": "organisms"}
    assert runall.organisms_named(cfg) == {"organism", "organism-hesitant"}
    assert runall.organisms_named({"model": {"name": "smollm2-135m-instruct"}}) == set()


def test_parallel_run_builds_first_and_keeps_notebook_order(fake):
    log, configured, kernel_threads = fake
    results = runall.run_all(jobs=2)
    assert [Path(r.run_dir).parent.name for r in results] == NOTEBOOKS  # notebook order, not finishing order
    assert [r.ok for r in results] == [True, True, True, False, True, True, True]  # 03 failed, the rest still ran
    builds = [e for e in log if e[0] == "build"]
    assert builds == [("build", "organism")]  # once, though six notebooks name it
    runs = {e[1]: e[2] for e in log if e[0] == "run"}
    assert sorted(runs) == NOTEBOOKS
    assert all(runs[nb] for nb in NOTEBOOKS[1:])  # every organism notebook started after the build
    assert configured == [4]  # the build: every core
    assert kernel_threads == [("2", "2")] * 7  # each kernel starts with 4 cores / 2 jobs: threads and forked workers
    assert "FACTLAB_THREADS" not in os.environ and "FACTLAB_CORES" not in os.environ  # put back as they were
    index = Path(runner.outputs_root()) / "index.html"
    assert index.exists()


def test_one_job_runs_in_order_without_a_pool(fake, monkeypatch):
    log, _, _ = fake
    monkeypatch.setattr(runall, "_pool", lambda jobs: pytest.fail("jobs=1 needs no pool"))
    results = runall.run_all(jobs=1, only=["02_binary_rar", "00_quickstart"])
    assert [e[1] for e in log] == ["00_quickstart", "02_binary_rar"]
    assert len(results) == 2


def test_a_worker_exception_is_raised_after_the_others_finish(fake, monkeypatch):
    log, _, _ = fake
    inner = runall.run_notebook

    def crash(nb, **kw):
        if Path(nb).stem == "01_corver":
            raise RuntimeError("kernel died")
        return inner(nb, **kw)

    monkeypatch.setattr(runall, "run_notebook", crash)
    with pytest.raises(RuntimeError, match="kernel died"):
        runall.run_all(jobs=2)
    assert len([e for e in log if e[0] == "run"]) == 6  # every other notebook ran


def test_bad_jobs_and_memory_cap(monkeypatch):
    with pytest.raises(ValueError, match="--jobs 0"):
        runall.run_all(jobs=0)
    monkeypatch.setattr(threads, "usable_cores", lambda: 8)
    monkeypatch.setattr(runall, "_available_memory_gb", lambda: 6.0)
    assert runall.default_jobs(7) == 2  # 6 GB holds two notebooks of 2.5 GB
    monkeypatch.setattr(runall, "_available_memory_gb", lambda: 1.0)
    assert runall.default_jobs(7) == 1
    monkeypatch.setattr(runall, "_available_memory_gb", lambda: 64.0)
    assert runall.default_jobs(3) == 3


def test_the_build_process_ends_before_the_organism_notebooks(fake, monkeypatch):
    """The build's process held ~1 GB idle until the end of the run (measured: 0.97 GB beside two kernels)."""
    log, _, _ = fake
    shut = threading.Event()

    class Builder(cf.ThreadPoolExecutor):
        def shutdown(self, *a, **k):
            shut.set()
            return super().shutdown(*a, **k)

    monkeypatch.setattr(runall, "_build_pool", lambda: Builder(1))
    inner = runall.run_notebook
    seen = {}

    def run_notebook(nb, **kw):
        seen[Path(nb).stem] = shut.is_set()
        return inner(nb, **kw)

    monkeypatch.setattr(runall, "run_notebook", run_notebook)
    runall.run_all(jobs=2)
    assert all(seen[nb] for nb in NOTEBOOKS[1:]), seen


@pytest.fixture
def ctrl_c_raises():
    """SIGINT raises KeyboardInterrupt, as in a terminal: a shell's background job (``cmd &``, as a CI
    script may start the tests) starts with SIGINT ignored, and Python then installs no handler."""
    import signal

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def _ctrl_c_once(started: threading.Barrier) -> None:
    """Ctrl-C to this process, from a thread, once the runs have started (``started``)."""
    import signal
    import time

    def ctrl_c():
        started.wait()
        time.sleep(0.2)
        os.kill(os.getpid(), signal.SIGINT)

    threading.Thread(target=ctrl_c, daemon=True).start()


def test_an_interrupted_parallel_run_names_each_run_folder_to_resume(fake, monkeypatch, caplog, ctrl_c_raises):
    """Ctrl-C / SIGTERM during a parallel run-all: every kernel is interrupted, and each run's
    --resume line is logged (the as_completed loop that printed run folders was left at once)."""
    import signal
    import time

    started, stop = threading.Barrier(3), threading.Event()

    def run_notebook(nb, **kw):
        run_dir = Path(runner.outputs_root()) / "runs" / Path(nb).stem / "20260101-000000-smoke"
        started.wait()
        stop.wait(30)
        return runner.RunResult(run_dir, run_dir / "notebook.ipynb", run_dir / "report.html", {}, ok=False,
                                error="KeyboardInterrupt:  (cell 3)")

    monkeypatch.setattr(runall, "run_notebook", run_notebook)
    monkeypatch.setattr(runall, "_interrupt_children", lambda kernels_only=False: stop.set())

    _ctrl_c_once(started)
    with caplog.at_level("ERROR", logger="factlab.runall"), pytest.raises(KeyboardInterrupt):
        runall.run_all(jobs=2, only=["00_quickstart", "01_corver"])
    for stem in ("00_quickstart", "01_corver"):
        assert f"continue it with: factlab run {stem} --resume" in caplog.text, caplog.text


def test_the_cli_ends_an_interrupted_run_all_with_one_line_and_130(monkeypatch, capsys):
    from factlab import cli

    def interrupted(**kw):
        raise KeyboardInterrupt("signal 15")

    monkeypatch.setattr(cli, "run_all", interrupted)
    assert cli.main(["run-all", "--only", "00_quickstart"]) == 130
    err = capsys.readouterr().err
    assert "interrupted" in err and "Traceback" not in err


def test_a_kernel_idle_between_two_cells_is_interrupted_again_until_its_run_ends(fake, monkeypatch, ctrl_c_raises):
    """ipykernel ignores SIGINT between cells: a stop that reached a kernel there let it run the rest of
    its notebook (recorded ok) while run-all waited for it (issue 43 round 3c probe)."""
    import signal
    import time

    monkeypatch.setattr(runall, "INTERRUPT_AGAIN_S", 0.1)
    started, again = threading.Barrier(3), threading.Event()
    calls = []

    def interrupt(kernels_only=False):
        calls.append(kernels_only)
        if len(calls) >= 2:  # the first one reached the kernels between two cells: ignored
            again.set()

    def run_notebook(nb, **kw):
        run_dir = Path(runner.outputs_root()) / "runs" / Path(nb).stem / "20260101-000000-smoke"
        started.wait()
        stopped = again.wait(20)
        return runner.RunResult(run_dir, run_dir / "notebook.ipynb", run_dir / "report.html", {}, ok=not stopped,
                                error="KeyboardInterrupt:  (cell 4)" if stopped else None)

    monkeypatch.setattr(runall, "run_notebook", run_notebook)
    monkeypatch.setattr(runall, "_interrupt_children", interrupt)

    _ctrl_c_once(started)
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        runall.run_all(jobs=2, only=["00_quickstart", "01_corver"])
    assert time.monotonic() - t0 < 10 and calls[0] is False and calls[1:] and all(calls[1:]), calls


def test_a_kernel_that_never_answers_its_interrupt_is_killed(fake, monkeypatch, ctrl_c_raises):
    """An interrupt that lands in ipykernel's own code (after a cell, before its reply) leaves the kernel
    alive and silent: run-all waited 300 s and left a manifest `running` (issue 43 probe race-term).
    After KILL_AFTER_S the kernels are killed; nbclient then sees a dead kernel and the run ends."""
    import signal
    import time

    monkeypatch.setattr(runall, "INTERRUPT_AGAIN_S", 0.05)
    monkeypatch.setattr(runall, "KILL_AFTER_S", 0.3)
    started, killed = threading.Barrier(3), threading.Event()
    monkeypatch.setattr(runall, "_interrupt_children", lambda kernels_only=False: None)  # never answered
    monkeypatch.setattr(runall, "_kill_kernels", killed.set)

    def run_notebook(nb, **kw):
        run_dir = Path(runner.outputs_root()) / "runs" / Path(nb).stem / "20260101-000000-smoke"
        started.wait()
        dead = killed.wait(20)
        return runner.RunResult(run_dir, run_dir / "notebook.ipynb", run_dir / "report.html", {}, ok=not dead,
                                error="DeadKernelError: Kernel died" if dead else None)

    monkeypatch.setattr(runall, "run_notebook", run_notebook)

    _ctrl_c_once(started)
    t0 = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        runall.run_all(jobs=2, only=["00_quickstart", "01_corver"])
    assert killed.is_set() and time.monotonic() - t0 < 10


def test_kill_kernels_kills_only_kernels(monkeypatch):
    sent = []
    monkeypatch.setattr(runall, "_children", lambda: [11, 12])
    monkeypatch.setattr(runall, "_is_kernel", lambda pid: pid == 12)
    monkeypatch.setattr(os, "getpgid", lambda pid: pid)
    monkeypatch.setattr(os, "killpg", lambda pid, sig: sent.append((pid, sig)))
    runall._kill_kernels()
    import signal
    assert sent == [(12, signal.SIGKILL)]


def test_the_build_is_stopped_with_sigterm_and_the_kernels_with_sigint(monkeypatch):
    """The build worker ignores SIGINT (a Ctrl-C that reached it between tasks printed a traceback from
    concurrent.futures, issue 43 round 5); run-all stops it with SIGTERM, which its task reads as Ctrl-C.
    The resource tracker is left alone."""
    import signal

    sent = []
    cmdlines = {11: b"python\x00-m\x00ipykernel_launcher", 12: b"python\x00-c\x00from multiprocessing.spawn import "
                b"spawn_main; spawn_main(tracker_fd=5)", 13: b"python\x00-c\x00from multiprocessing.resource_tracker "
                b"import main;main(4)"}
    monkeypatch.setattr(runall, "_children", lambda: list(cmdlines))
    monkeypatch.setattr(runall, "_cmdline", cmdlines.get)
    monkeypatch.setattr(os, "getpgid", lambda pid: pid)
    monkeypatch.setattr(os, "killpg", lambda pid, sig: sent.append((pid, sig)))
    runall._interrupt_children()
    assert sent == [(11, signal.SIGINT), (12, signal.SIGTERM)]
    sent.clear()
    runall._interrupt_children(kernels_only=True)
    assert sent == [(11, signal.SIGINT)]
    previous = signal.getsignal(signal.SIGINT)
    try:
        runall._ignore_sigint()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGINT, previous)

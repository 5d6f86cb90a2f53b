"""factlab.forked: jobs in forked one-thread workers (evidence.workers)."""

import json
import os

import pytest

from factlab import forked
from factlab.forked import Job, JobFailed, run_jobs
from factlab.judges import JudgeCache


def _record(path, value):
    def run():
        import torch

        path.write_text(json.dumps({"pid": os.getpid(), "threads": torch.get_num_threads(), "value": value}))
    return run


def test_jobs_run_in_forked_one_thread_workers_and_in_process_with_one_worker(tmp_path):
    jobs = [Job(f"job {i}", _record(tmp_path / f"{i}.json", i), tmp_path / f"{i}.log") for i in range(3)]
    run_jobs(jobs, workers=2, progress=False, poll_s=0.05)
    got = [json.loads((tmp_path / f"{i}.json").read_text()) for i in range(3)]
    assert [g["value"] for g in got] == [0, 1, 2]
    assert all(g["pid"] != os.getpid() for g in got) and len({g["pid"] for g in got}) == 3
    assert all(g["threads"] == 1 for g in got)
    run_jobs([Job("here", _record(tmp_path / "here.json", 9), tmp_path / "here.log")], workers=1)
    assert json.loads((tmp_path / "here.json").read_text())["pid"] == os.getpid()


def test_more_workers_than_cores_run_as_many_as_there_are_cores(tmp_path, monkeypatch, caplog):
    """Extra one-thread workers only share the cores and hold memory: two notebooks of run-all,
    each with two forked workers on a 2-core share, peaked 5.5 GB (2026-11-27)."""
    jobs = [Job(f"job {i}", _record(tmp_path / f"{i}.json", i), tmp_path / f"{i}.log") for i in range(2)]
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0}, raising=False)
    with caplog.at_level("WARNING", logger="factlab.forked"):
        run_jobs(jobs, workers=2, progress=False, poll_s=0.05)
    assert "2 workers on 1 cores: running 1 at a time" in caplog.text and "at most 1" in caplog.text
    assert {json.loads((tmp_path / f"{i}.json").read_text())["pid"] for i in range(2)} == {os.getpid()}
    caplog.clear()
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    monkeypatch.setenv("FACTLAB_CORES", "1")  # run-all's share for each of its kernels
    with caplog.at_level("WARNING", logger="factlab.forked"):
        run_jobs(jobs, workers=2, progress=False, poll_s=0.05)
    assert "2 workers on 1 cores" in caplog.text
    monkeypatch.delenv("FACTLAB_CORES")
    caplog.clear()
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    with caplog.at_level("WARNING", logger="factlab.forked"):
        run_jobs(jobs, workers=2, progress=False, poll_s=0.05)
    assert "workers on" not in caplog.text


def test_a_failing_job_raises_with_its_name_and_log_and_stops_the_rest(tmp_path):
    def boom():
        print("about to fail")
        raise ValueError("the reward read a bad column")

    jobs = [Job("arm A seed 0", boom, tmp_path / "a.log"),
            Job("arm B seed 0", _record(tmp_path / "b.json", 1), tmp_path / "b.log")]
    with pytest.raises(JobFailed) as err:
        run_jobs(jobs, workers=2, progress=False, poll_s=0.05)
    msg = str(err.value)
    assert "arm A seed 0" in msg and "a.log" in msg and "the reward read a bad column" in msg
    assert "about to fail" in (tmp_path / "a.log").read_text()
    with pytest.raises(ValueError, match="workers"):
        run_jobs(jobs, workers=0)


def test_the_judge_cache_opens_its_own_connection_in_a_forked_worker(tmp_path):
    """The parent's connection and lock do not cross the fork: here the lock is held (as by a
    judge thread mid-write) while the workers fork, and a worker still reads and writes."""
    import threading

    cache = JudgeCache(tmp_path / "answers.sqlite")
    cache.put_many({"parent": "yes"})
    seen = tmp_path / "seen.json"

    def child():
        def use():
            seen.write_text(json.dumps(cache.get_many(["parent"])))
            cache.put_many({"child": "also"})
        t = threading.Thread(target=use, daemon=True)
        t.start()
        t.join(20)

    with cache._lock:
        run_jobs([Job("w0", child, tmp_path / "w0.log"), Job("w1", lambda: None, tmp_path / "w1.log")], workers=2,
                 progress=False, poll_s=0.05)
    assert json.loads(seen.read_text()) == {"parent": "yes"}
    assert cache.get_many(["parent", "child"]) == {"parent": "yes", "child": "also"}
    assert len(cache) == 2


def test_a_stopped_worker_fails_the_run_instead_of_hanging_it(tmp_path):
    """A worker stopped by SIGSTOP is alive forever: ``run_jobs`` waited for it without end
    (issue 43). Seen stopped for ``stopped_s``, it is a failed job, and it is ended."""
    import signal
    import time

    def stop_myself():
        (tmp_path / "pid").write_text(str(os.getpid()))
        os.kill(os.getpid(), signal.SIGSTOP)

    jobs = [Job("arm A seed 0", stop_myself, tmp_path / "a.log"),
            Job("arm B seed 0", _record(tmp_path / "b.json", 1), tmp_path / "b.log")]
    t0 = time.monotonic()
    with pytest.raises(JobFailed, match=r"arm A seed 0 \(pid \d+\) has been stopped for 0.3 s"):
        run_jobs(jobs, workers=2, progress=False, poll_s=0.05, stopped_s=0.3)
    assert time.monotonic() - t0 < 8
    pid = int((tmp_path / "pid").read_text())
    with pytest.raises(ProcessLookupError):  # ended and reaped, not left stopped
        os.kill(pid, 0)


def test_workers_are_refused_once_cuda_is_initialized(tmp_path, monkeypatch):
    """Issue 42: a process that initialized CUDA cannot fork CUDA users; refused before any fork,
    while one worker (in this process) still runs the jobs."""
    import torch

    from factlab import forked

    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(forked.mp, "get_context", lambda *a: pytest.fail("forked after CUDA"))
    ran = []
    jobs = [Job(f"j{i}", lambda i=i: ran.append(i), tmp_path / f"j{i}.log") for i in range(2)]
    with pytest.raises(forked.CUDAForkError, match="initialized CUDA.*evidence.workers: 1"):
        run_jobs(jobs, workers=2, progress=False)
    assert ran == []
    run_jobs(jobs, workers=1, progress=False)
    assert ran == [0, 1]


def test_workers_that_ignore_sigterm_are_ended_within_one_grace_period(tmp_path, monkeypatch):
    """Ending the workers waited 10 s for each one that ignores SIGTERM, one after the other: with
    8 of them Ctrl-C took 80 s (issue 43 round-3b probe). They share one 10 s grace."""
    import signal
    import time

    def stubborn():
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(3600)

    def fail():
        time.sleep(0.5)
        raise RuntimeError("one job fails")

    jobs = [Job(f"stubborn {i}", stubborn, tmp_path / f"s{i}.log") for i in range(3)] + [Job("f", fail, tmp_path / "f.log")]
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)  # all four at once
    monkeypatch.setattr(forked, "GRACE_S", 2.0)
    t0 = time.monotonic()
    with pytest.raises(JobFailed, match="f failed"):
        run_jobs(jobs, workers=4, progress=False, poll_s=0.05)
    assert time.monotonic() - t0 < 5  # one grace period (2 s), not three


def _running(pid):
    """Whether ``pid`` is a live process (not a zombie waiting for its parent)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rfind(")") + 2] != "Z"


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
def test_a_second_ctrl_c_while_the_workers_are_ended_still_ends_them(tmp_path, monkeypatch):
    """A second Ctrl-C during the grace period cut the cleanup short: workers in a long C call
    (SIGTERM pending) trained on, and the parent's exit waited for them (issue 43 round-4 probe).
    The workers are killed whatever interrupts the wait."""
    import signal
    import time

    from factlab import forked

    def stubborn(i):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        (tmp_path / f"pid{i}").write_text(str(os.getpid()))
        time.sleep(3600)

    def fail():
        while len(list(tmp_path.glob("pid*"))) < 2:
            time.sleep(0.05)
        raise RuntimeError("one job fails")

    def second_ctrl_c(proc):
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2}, raising=False)
    monkeypatch.setattr(forked, "_end", second_ctrl_c)
    jobs = [Job(f"stubborn {i}", (lambda i=i: stubborn(i)), tmp_path / f"s{i}.log") for i in range(2)]
    pids = []
    try:
        with pytest.raises(KeyboardInterrupt):
            run_jobs(jobs + [Job("f", fail, tmp_path / "f.log")], workers=3, progress=False, poll_s=0.05)
        pids = [int(f.read_text()) for f in tmp_path.glob("pid*")]
        assert len(pids) == 2 and not [p for p in pids if _running(p)]
    finally:
        for p in pids:
            if _running(p):
                os.kill(p, signal.SIGKILL)


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads /proc")
def test_workers_end_when_their_parent_is_killed(tmp_path):
    """SIGKILL to the process running the workers (the OOM killer) left them training, for hours,
    into the folders a resumed run trains in (issue 43 round-4 probe): they die with it."""
    import signal
    import subprocess
    import sys
    import time

    code = ("import os, sys, time\nfrom pathlib import Path\nfrom factlab.forked import Job, run_jobs\nT = Path(sys.argv[1])\n"
            "def work(i):\n    (T / f'pid{i}').write_text(str(os.getpid())); time.sleep(3600)\n"
            "run_jobs([Job(f'j{i}', (lambda i=i: work(i)), T / f'w{i}.log') for i in range(2)], 2, progress=False)\n")
    env = dict(os.environ, FACTLAB_CORES="2")
    p = subprocess.Popen([sys.executable, "-c", code, str(tmp_path)], env=env)
    pids = []
    try:
        t0 = time.monotonic()
        while len(list(tmp_path.glob("pid*"))) < 2 and time.monotonic() - t0 < 60:
            time.sleep(0.1)
        pids = [int(f.read_text()) for f in tmp_path.glob("pid*")]
        assert len(pids) == 2
        p.kill()
        p.wait()
        t0 = time.monotonic()
        while [q for q in pids if _running(q)] and time.monotonic() - t0 < 5:
            time.sleep(0.1)
        assert not [q for q in pids if _running(q)]
    finally:
        for q in pids:
            if _running(q):
                os.kill(q, signal.SIGKILL)
        if p.poll() is None:
            p.kill()

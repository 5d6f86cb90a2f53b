# issue 43 round-3b probe: forked evidence workers that stop, die, ignore SIGTERM or exit without their result.
import sys, os, time, signal, threading
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from probe_round3 import *
from factlab.forked import Job, run_jobs, JobFailed

def case(name, body, expect_fail, limit=40, **kw):
    jobs = [Job(f"{name}-{i}", (lambda i=i: body(i)), T / name / f"w{i}.log") for i in range(2)]
    res = []
    def go():
        try:
            run_jobs(jobs, 2, progress=False, poll_s=0.2, **kw); res.append(("ok", ""))
        except JobFailed as e:
            res.append(("failed", str(e).splitlines()[0][:200]))
        except BaseException as e:
            res.append(("exc", f"{type(e).__name__}: {e}"[:200]))
    t0 = time.monotonic(); th = threading.Thread(target=go, daemon=True); th.start(); th.join(limit)
    if th.is_alive():
        record("hang", name, f"> {limit} s"); return
    kind, detail = res[0]
    cls = ("clear error" if kind == "failed" else "traceback") if expect_fail else ("works as documented" if kind == "ok" else "unclear")
    record(cls, name, f"{time.monotonic() - t0:.1f} s; {kind}: {detail}")

def stop_self(i):
    if i == 0: os.kill(os.getpid(), signal.SIGSTOP)
    time.sleep(1)
case("worker SIGSTOPs itself (stopped_s=3)", stop_self, True, stopped_s=3)
def kill_self(i):
    if i == 0: os.kill(os.getpid(), signal.SIGKILL)
case("worker SIGKILLed (OOM killer)", kill_self, True)
def ignore_term_then_stop(i):
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if i == 0: os.kill(os.getpid(), signal.SIGSTOP)
    time.sleep(3600)
case("worker ignores SIGTERM, one stopped (cleanup must SIGKILL)", ignore_term_then_stop, True, limit=60, stopped_s=2)
def exit_zero(i):
    os._exit(0)
case("worker os._exit(0) before writing its result", exit_zero, False)
def stop_cont(i):
    for _ in range(3):
        os.kill(os.getpid(), signal.SIGSTOP) if i == 0 else None; time.sleep(0.5)
case("worker stopped briefly and continued by someone (SIGCONT)", lambda i: (threading.Timer(1.0, lambda: None), None) and None, False)
def sys_exit_str(i):
    raise SystemExit("bye")
case("worker raises SystemExit('bye')", sys_exit_str, True)
def kbint(i):
    raise KeyboardInterrupt
case("worker raises KeyboardInterrupt", kbint, True)
# stop a worker from outside after it started, then continue it within stopped_s: the run must go on
import subprocess
def slow(i):
    time.sleep(3)
jobs_dir = T / "cont"
def go_cont():
    jobs = [Job(f"c{i}", (lambda i=i: slow(i)), jobs_dir / f"w{i}.log") for i in range(2)]
    run_jobs(jobs, 2, progress=False, poll_s=0.2, stopped_s=5)
import multiprocessing as mp
th = threading.Thread(target=lambda: (go_cont(), RESULTS.append(("cont-ok",))), daemon=True); th.start()
time.sleep(1)
kids = [p for p in mp.active_children()]
for p in kids: os.kill(p.pid, signal.SIGSTOP)
time.sleep(2)
for p in kids: os.kill(p.pid, signal.SIGCONT)
th.join(30)
record("works as documented" if any(r == ("cont-ok",) for r in RESULTS) else "unclear", "workers stopped 2 s then continued (stopped_s=5)", f"{len(kids)} stopped")

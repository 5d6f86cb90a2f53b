# issue 43 round-3b probe: SIGTERM to a process running forked evidence workers (as factlab evidence /
# factlab run, whose SIGTERM is a KeyboardInterrupt): are the workers ended, and how fast?
import sys, os, time, signal, subprocess, textwrap
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from probe_round3 import *
code = textwrap.dedent(f"""
    import os, sys, time
    from pathlib import Path
    from factlab.forked import Job, run_jobs
    from factlab.cli import _sigterm_as_interrupt
    T = Path({str(T)!r})
    def work(i):
        import signal
        if {{mode!r}} == "ignore": signal.signal(signal.SIGTERM, signal.SIG_IGN)
        (T / f"pid{{i}}").write_text(str(os.getpid())); time.sleep(3600)
    with _sigterm_as_interrupt():
        try:
            run_jobs([Job(f"j{{i}}", (lambda i=i: work(i)), T / f"w{{i}}.log") for i in range(2)], 2, progress=False, poll_s=0.2)
        except KeyboardInterrupt:
            print("interrupted", flush=True); sys.exit(130)
""")
def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    st = open(f"/proc/{pid}/stat").read()
    return st[st.rfind(")") + 2] != "Z"
for mode in ("plain", "ignore"):
    for f in T.glob("pid*"): f.unlink()
    p = subprocess.Popen([sys.executable, "-c", code.replace("{mode!r}", repr(mode))], stdout=subprocess.PIPE, text=True)
    t0 = time.monotonic()
    while len(list(T.glob("pid*"))) < 2 and time.monotonic() - t0 < 30: time.sleep(0.2)
    kids = [int(f.read_text()) for f in T.glob("pid*")]
    p.send_signal(signal.SIGTERM); t1 = time.monotonic()
    try:
        out, _ = p.communicate(timeout=40)
    except subprocess.TimeoutExpired:
        p.kill(); record("hang", f"SIGTERM to the parent of 2 workers ({mode})", "> 40 s"); continue
    took = time.monotonic() - t1
    left = [k for k in kids if alive(k)]
    for k in left: os.kill(k, signal.SIGKILL)
    record("works as documented" if not left and p.returncode == 130 else "hang/crash", f"SIGTERM to the parent of 2 workers (workers {mode})",
           f"exit {p.returncode} in {took:.1f} s; workers left running: {left}; {out.strip()}")

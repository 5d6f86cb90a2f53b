# issue 43 round-4 probe: an evidence run's forked workers (recipes.evidence.run_arms -> forked.run_jobs, workers: 2)
# stopped mid-run as a terminal and a scheduler stop them: Ctrl-C (SIGINT to the process group), Ctrl-C twice,
# SIGTERM to the parent, SIGINT to the parent alone, SIGKILL to the parent (the OOM killer). Training is a stub
# (a Python loop of 0.2 s steps); nothing trains. Each stop is checked for: exit status and time, processes left
# behind (every process carrying this probe's mark in its environment), half-written files, and that the same
# call again (the resume) finishes with every arm and seed. One line per probe: CLASS | probe | detail.
# Run with PYTHONPATH=src under nice; about 3 minutes.
import json, os, signal, subprocess, sys, textwrap, time, uuid
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from probe_round3 import *

MARK = f"p43d-{uuid.uuid4().hex[:8]}"

PARENT = textwrap.dedent("""
    import os, signal, sys, time
    from pathlib import Path
    from types import SimpleNamespace
    from factlab.config import load_config
    from factlab.runner import config_for_notebook, sigterm_as_interrupt
    from factlab.recipes import evidence as R
    STEPS, STUBBORN = int(os.environ["P43D_STEPS"]), os.environ.get("P43D_STUBBORN") == "1"
    def fake_run(cfg, rows, rewards, out, *, name, model, grpo, callbacks=()):
        if STUBBORN:  # a worker inside a long C call: its Python handlers run only when the call returns
            signal.signal(signal.SIGTERM, signal.SIG_IGN); signal.signal(signal.SIGINT, signal.SIG_IGN)
        out.mkdir(parents=True, exist_ok=True)
        for step in range(STEPS):
            time.sleep(0.2)
        return SimpleNamespace(log_history=[{"loss": 0.1, "step": 1, "reward": 0.5}], resumed=False, steps=STEPS)
    R.run = fake_run
    R.build_rewards = lambda specs, resources: None
    def evaluate(result):
        return [{"question": f"q{i}", "correct": 1.0, "contradicted": 0.0} for i in range(4)]
    evaluate.settings = {"questions": [f"q{i}" for i in range(4)], "max_new_tokens": 16}
    cfg = load_config(Path(sys.argv[1]) / "params/01_corver_evidence.yaml", config_for_notebook("01_corver"),
                      overrides={"evidence": {"workers": 2, "heldout": 4, "max_new_tokens": 16}})
    print("started", os.getpid(), flush=True)
    with sigterm_as_interrupt():
        try:
            rec = R.run_arms(cfg, cfg.evidence, [], None, evaluate, Path(sys.argv[2]))
        except KeyboardInterrupt:
            print("interrupted", flush=True); sys.exit(130)
    print("finished", len(rec["rows"]), sorted({(r["arm"], r["seed"]) for r in rec["rows"]}, key=str), flush=True)
""")


def marked() -> list[tuple[int, str]]:
    """(pid, command line) of every live process this probe started."""
    return marked_processes("P43D_MARK", MARK)


def start(out, steps, stubborn=False):
    env = dict(os.environ, P43D_MARK=MARK, P43D_STEPS=str(steps), P43D_STUBBORN="1" if stubborn else "0",
               FACTLAB_THREADS="1", FACTLAB_CORES="2")
    return subprocess.Popen([PY, "-c", PARENT, str(ROOT), str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as in a terminal


def workers(p):
    return [pid for pid, _ in marked() if pid != p.pid]


def damage(out):
    bad = [str(f) for f in out.rglob("*") if ".tmp" in f.name]
    for f in out.rglob("*.json"):
        try:
            json.loads(f.read_text())
        except ValueError:
            bad.append(f"{f}: unreadable")
    return bad


def scenario(tag, stop, stubborn=False, expect_rc=130):
    out = T / tag / "evidence"
    p = start(out, steps=300, stubborn=stubborn)  # 60 s a job: stopped long before
    t0 = time.monotonic()
    while len(workers(p)) < 2 and time.monotonic() - t0 < 60 and p.poll() is None:
        time.sleep(0.2)
    time.sleep(2)
    kids = workers(p)
    t1 = time.monotonic()
    stop(p)
    try:
        so, se = p.communicate(timeout=60)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        rc, so, se = "TIMEOUT", "", ""
    took = time.monotonic() - t1
    time.sleep(1)
    left = [pid for pid, _ in marked()]
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    if rc == "TIMEOUT":
        p.kill(); p.communicate()
    bad = damage(out)
    problems = ([f"left running {left}"] if left else []) + bad + (["Traceback on stderr"] if "Traceback" in se else [])
    cls = ("hang / crash" if rc == "TIMEOUT" or left or took > 25 else "data lost" if bad
           else "unclear error" if rc != expect_rc else "works as documented")
    record(cls, f"evidence workers stopped: {tag}", f"exit {rc} in {took:.1f} s (workers {kids}); "
           + ("; ".join(problems) or "clean"))
    # the resume: the same call again finishes every job
    q = start(out, steps=2)
    try:
        so, se = q.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        q.kill(); q.communicate(); record("hang / crash", f"{tag}: resume", "> 120 s"); return
    done = q.returncode == 0 and "finished 28" in so  # 4 base rows + 2 arms x 3 seeds x 4 questions
    record("works as documented" if done else "data lost", f"{tag}: the same call again (resume)",
           f"exit {q.returncode}; {(so.strip().splitlines() or [''])[-1][:160]} {se.strip()[-200:]}")


def ctrl_c(p):
    os.killpg(p.pid, signal.SIGINT)


def ctrl_c_twice(p):
    os.killpg(p.pid, signal.SIGINT)
    time.sleep(1.0)
    os.killpg(p.pid, signal.SIGINT)


if __name__ == "__main__":
    print(f"scratch: {T}", flush=True)
    scenario("Ctrl-C (SIGINT to the process group)", ctrl_c)
    scenario("SIGTERM to the parent", lambda p: p.send_signal(signal.SIGTERM))
    scenario("SIGINT to the parent alone", lambda p: p.send_signal(signal.SIGINT))
    scenario("Ctrl-C, workers in a long C call (SIGINT/SIGTERM pending)", ctrl_c, stubborn=True)
    scenario("Ctrl-C twice 1 s apart, workers in a long C call", ctrl_c_twice, stubborn=True)
    scenario("SIGKILL to the parent (the OOM killer)", lambda p: p.send_signal(signal.SIGKILL), expect_rc=-9)

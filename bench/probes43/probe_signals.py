# issue 43 round-3c probe: SIGTERM and Ctrl-C (SIGINT to the process group) during real `factlab run`,
# `factlab evidence --pilot`, `factlab train` and parallel `factlab run-all`. Each stop is checked for:
# exit status, a traceback on stderr, the manifest state, half-written files (*.tmp, unreadable JSON),
# processes left behind (every process carrying this probe's mark in its environment), and a resume.
# Run one scenario at a time (each takes minutes): PYTHONPATH=src FACTLAB_CACHE=<a copy of a built cache>
#   nice -n 19 python bench/probes43/probe_signals.py run-term run-int run-early evidence-term ...
import json, os, signal, subprocess, sys, time, uuid
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from probe_round3 import *

MARK = f"p43c-{uuid.uuid4().hex[:8]}"
OUT = T / "runs"


def marked() -> list[tuple[int, str]]:
    """(pid, command line) of every live process this probe started."""
    return marked_processes("PROBE43C", MARK)


def start(*args, tag):
    env = dict(os.environ, PROBE43C=MARK, FACTLAB_THREADS="1", PYTHONPATH=os.environ.get("PROBE_SRC", str(ROOT / "src")))
    out, err = open(T / f"{tag}.out", "w"), open(T / f"{tag}.err", "w")
    return subprocess.Popen(["nice", "-n", "19", PY, "-m", "factlab.cli", *map(str, args)], stdout=out, stderr=err,
                            env=env, cwd=ROOT, start_new_session=True, preexec_fn=as_in_a_terminal)


def as_in_a_terminal():
    """Ctrl-C's default: a probe started in the background (`cmd &`) would pass SIGINT on ignored."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def until(cond, timeout, step=0.5):
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        v = cond()
        if v:
            return v
        time.sleep(step)
    return None


def kernels():
    return [p for p, c in marked() if "ipykernel" in c]


def stop(p, sig):
    """Ctrl-C: SIGINT to the foreground process group (the shell's job); SIGTERM: to the pid, as a scheduler does."""
    print(f"{time.strftime('%T')} {signal.Signals(sig).name} to {p.pid} (running: {p.poll() is None}; "
          f"kernels {kernels()})", flush=True)
    if sig == signal.SIGINT:
        os.killpg(p.pid, signal.SIGINT)
    else:
        p.send_signal(signal.SIGTERM)
    try:
        return p.wait(timeout=180)
    except subprocess.TimeoutExpired:
        return "TIMEOUT"


def files_damage(root: Path) -> list[str]:
    bad = [str(f) for f in root.rglob("*") if f.name.endswith(".tmp") or ".tmp." in f.name]
    for f in list(root.rglob("*.json")) + list(root.rglob("*.ipynb")):
        try:
            json.loads(f.read_text())
        except (OSError, ValueError) as e:
            bad.append(f"{f}: {type(e).__name__}")
    return bad


def run_dirs(nb):
    return sorted((OUT / nb).glob("2*"))


def state(run_dir):
    try:
        return json.loads((run_dir / "manifest.json").read_text()).get("state")
    except (OSError, ValueError) as e:
        return f"unreadable ({type(e).__name__})"


def verdict(name, rc, tag, states, extra_bad=()):
    err = (T / f"{tag}.err").read_text()
    time.sleep(3)
    left = marked()
    for pid, _ in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    problems = []
    if rc == "TIMEOUT":
        problems.append("hang: no exit within 180 s")
    elif rc == 0:
        problems.append("exit status 0")
    if "Traceback" in err:
        problems.append("traceback: " + err[err.index("Traceback"):][:300].replace("\n", " / "))
    if left:
        problems.append(f"left running: {left}")
    if any(s != "interrupted" for s in states):
        problems.append(f"manifest states {states}")
    problems += list(extra_bad)
    cls = ("hang / crash" if rc == "TIMEOUT" or left else "silently wrong" if any(s != "interrupted" for s in states)
           else "data lost" if extra_bad else "traceback" if "Traceback" in err else "works as documented")
    if rc == 0 and cls == "works as documented":
        cls = "silently wrong"
    record(cls, name, f"exit {rc}; " + ("; ".join(problems) or "stderr tail: " + err.strip()[-200:].replace("\n", " / ")))


def resume(nb, run_dir, tag):
    env = dict(os.environ, PROBE43C=MARK, FACTLAB_THREADS="1", PYTHONPATH=os.environ.get("PROBE_SRC", str(ROOT / "src")))
    r = subprocess.run(["nice", "-n", "19", PY, "-m", "factlab.cli", "run", nb, "--resume", run_dir],
                       capture_output=True, text=True, env=env, cwd=ROOT, timeout=900)
    ok = r.returncode == 0 and state(run_dir) == "ok"
    record("works as documented" if ok else "data lost", f"{tag}: --resume after the stop",
           f"exit {r.returncode}, state {state(run_dir)}; {(r.stderr.strip().splitlines() or [''])[-1][:200]}")


def notebook_stop(sig, tag, nb="02_binary_rar", after=40.0, do_resume=False):
    """A `factlab run NB --smoke` stopped ``after`` s after its kernel started (0: as soon as it exists)."""
    p = start("run", nb, "--smoke", "--out", OUT, tag=tag)
    if not until(lambda: kernels() or p.poll() is not None, 120):
        record("hang / crash", tag, "no kernel in 120 s")
    time.sleep(after)
    rc = stop(p, sig)
    d = run_dirs(nb)[-1]
    verdict(tag, rc, tag, [state(d)], files_damage(d))
    if do_resume:
        resume(nb, d, tag)


def evidence_stop(sig, tag, name="organism_binary_rar_hesitant", after=30.0):
    p = start("evidence", name, "--pilot", "--out", OUT, tag=tag)
    until(lambda: kernels() or p.poll() is not None, 120)
    time.sleep(after)
    rc = stop(p, sig)
    dirs = sorted(OUT.glob("*/2*"), key=lambda d: d.stat().st_mtime)
    verdict(tag, rc, tag, [state(d) for d in dirs[-1:]], files_damage(OUT) + files_damage(ROOT / "results" / name))
    out = (T / f"{tag}.err").read_text() + (T / f"{tag}.out").read_text()
    record("works as documented" if "--resume" in out else "unclear error", f"{tag}: says how to continue",
           [l for l in out.splitlines() if "resume" in l.lower()][-1:] or out.strip()[-200:])
    if dirs and os.environ.get("PROBE_EVIDENCE_RESUME"):  # factlab evidence NAME --pilot --resume RUN (writes results/)
        env = dict(os.environ, PROBE43C=MARK, FACTLAB_THREADS="1", PYTHONPATH=os.environ.get("PROBE_SRC", str(ROOT / "src")))
        r = subprocess.run(["nice", "-n", "19", PY, "-m", "factlab.cli", "evidence", name, "--pilot", "--resume", dirs[-1]],
                           capture_output=True, text=True, env=env, cwd=ROOT, timeout=900)
        record("works as documented" if r.returncode == 0 and state(dirs[-1]) == "ok" else "data lost",
               f"{tag}: factlab evidence --pilot --resume", f"exit {r.returncode}, state {state(dirs[-1])}; "
               f"{(r.stdout.strip().splitlines() or [''])[0][:160]}")


def workers():
    """Marked processes whose parent is a kernel: forked evidence workers."""
    ks = set(kernels())
    out = []
    for pid, _ in marked():
        try:
            stat = open(f"/proc/{pid}/stat").read()
        except OSError:
            continue
        if int(stat.rpartition(")")[2].split()[1]) in ks:
            out.append(pid)
    return out


def evidence_workers_stop(sig, tag, name="organism_binary_rar_hesitant", after=20.0):
    """A full `factlab evidence NAME` (two forked workers training arms) stopped while its workers train."""
    p = start("evidence", name, "--out", OUT, tag=tag)
    if not until(lambda: len(workers()) >= 2 or p.poll() is not None, 600):
        record("unclear error", tag, "no forked workers in 600 s")
    time.sleep(after)
    rc = stop(p, sig)
    dirs = sorted(OUT.glob("*/2*"), key=lambda d: d.stat().st_mtime)
    verdict(tag, rc, tag, [state(d) for d in dirs[-1:]], files_damage(dirs[-1]))


def train_stop(sig, tag, after=20.0):
    run_dir = T / f"train-{tag}"
    import socket
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    args = ("train", "02_binary_rar", "--smoke", "--accelerate-config", "ddp", "--num-processes", "2",
            "--main-process-port", port, "--run-dir", run_dir, "--set", "grpo.max_steps=40")  # ~3 min: stopped mid-way
    p = start(*args, tag=tag)
    until(lambda: sum("factlab.launch" in c and "prepare-only" not in c for _, c in marked()) >= 2
          or p.poll() is not None, 600)
    time.sleep(after)
    before = marked()
    rc = stop(p, sig)
    verdict(tag, rc, tag, [], files_damage(run_dir))
    record("works as documented", f"{tag}: processes before the stop", before)
    env = dict(os.environ, PROBE43C=MARK, FACTLAB_THREADS="1", PYTHONPATH=os.environ.get("PROBE_SRC", str(ROOT / "src")))
    r = subprocess.run(["nice", "-n", "19", PY, "-m", "factlab.cli", *map(str, args)], capture_output=True, text=True,
                       env=env, cwd=ROOT, timeout=1200)
    record("works as documented" if r.returncode == 0 else "data lost", f"{tag}: the same command again",
           f"exit {r.returncode}; {(r.stdout + r.stderr).strip()[-300:]}")


def run_all_stop(sig, tag, after=40.0):
    before = {nb: len(run_dirs(nb)) for nb in ("01_corver", "02_binary_rar")}
    p = start("run-all", "--jobs", "2", "--only", "01_corver", "02_binary_rar", "--out", OUT, tag=tag)
    until(lambda: len(kernels()) >= 2 or p.poll() is not None, 300)
    time.sleep(after)
    rc = stop(p, sig)
    dirs = [d for nb, n in before.items() for d in run_dirs(nb)[n:]]
    verdict(tag, rc, tag, [state(d) for d in dirs], [b for d in dirs for b in files_damage(d)])


SCENARIOS = {
    "run-term": lambda: notebook_stop(signal.SIGTERM, "run-term", do_resume=True),
    "run-int": lambda: notebook_stop(signal.SIGINT, "run-int"),
    "run-early-term": lambda: notebook_stop(signal.SIGTERM, "run-early-term", after=0.0),
    "run-early-int": lambda: notebook_stop(signal.SIGINT, "run-early-int", after=0.0),
    "evidence-term": lambda: evidence_stop(signal.SIGTERM, "evidence-term"),
    "evidence-int": lambda: evidence_stop(signal.SIGINT, "evidence-int"),
    "evidence-workers-term": lambda: evidence_workers_stop(signal.SIGTERM, "evidence-workers-term"),
    "evidence-workers-int": lambda: evidence_workers_stop(signal.SIGINT, "evidence-workers-int"),
    "train-term": lambda: train_stop(signal.SIGTERM, "train-term"),
    "train-int": lambda: train_stop(signal.SIGINT, "train-int"),
    "runall-int": lambda: run_all_stop(signal.SIGINT, "runall-int"),
    "runall-term": lambda: run_all_stop(signal.SIGTERM, "runall-term"),
}

if __name__ == "__main__":
    print(f"scratch: {T}", flush=True)
    for name in sys.argv[1:] or SCENARIOS:
        SCENARIOS[name]()

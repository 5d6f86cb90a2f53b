# issue 43 round-3c probe: the parallel `factlab run-all` (factlab.runall). --jobs values, two run-alls on one
# FACTLAB_CACHE, and a stop that reaches a kernel between two cells (ipykernel ignores SIGINT while idle).
# Run with PYTHONPATH=src under nice; `race` and `jobs` need no built cache; `shared` builds into an empty one.
import json, os, shutil, signal, subprocess, sys, tempfile, textwrap, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from probe_round3 import *


def jobs_values():
    for jobs in ("0", "-1", "abc", "1e3"):
        rc, out = cli("run-all", "--jobs", jobs, "--only", "00_quickstart", "--out", T / "j")
        ok = rc == 2 and "Traceback" not in out and not (T / "j").exists()
        record("clear error" if ok else "traceback" if "Traceback" in out else "unclear error", f"run-all --jobs {jobs}",
               f"exit {rc}: {out.strip().splitlines()[-1][:160] if out.strip() else ''}")
    from factlab import runall
    seen = {}
    orig = runall._run_parallel
    runall._run_parallel = lambda nbs, needs, jobs, kw: seen.setdefault("jobs", jobs) and []
    runall.run_notebook = lambda *a, **k: seen.setdefault("sequential", True)
    try:
        runall.run_all(jobs=99999, only=["00_quickstart", "02_binary_rar"], out=T / "j2")
    except Exception as e:
        seen["error"] = repr(e)
    runall._run_parallel = orig
    record("works as documented" if seen.get("jobs") == 2 else "silently wrong", "run-all --jobs 99999 (2 notebooks)",
           seen)


QUICK_CELLS = 400


def race_project() -> Path:
    """A project whose two notebooks (00_quickstart, 01_corver stems, no organism) run 400 cells of 50 ms:
    their kernels are idle between cells (papermill saving the notebook) most of the time."""
    import nbformat
    root = T / "race"
    if root.exists():
        return root
    (root / "notebooks").mkdir(parents=True)
    (root / "params").mkdir()
    for stem, src in (("00_quickstart", "00_quickstart_smoke.yaml"), ("01_corver", "01_corver_lm.yaml")):
        (root / "params" / f"{stem}_smoke.yaml").write_text(f"base: {ROOT / 'params' / src}\n")
        nb = nbformat.v4.new_notebook()
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nb.cells = [nbformat.v4.new_code_cell("params_file = None\nrun_dir = None", metadata={"tags": ["parameters"]})]
        nb.cells += [nbformat.v4.new_code_cell(f"import time\ntime.sleep(0.05)\nx = {i}") for i in range(QUICK_CELLS)]
        nbformat.write(nb, root / "notebooks" / f"{stem}.ipynb")
    return root


def race(sig):
    root = race_project()
    out = T / f"race-{sig}"
    code = textwrap.dedent(f"""
        import sys
        from pathlib import Path
        from factlab import runall, cli
        with cli._sigterm_as_interrupt():
            try:
                runall.run_all(root=Path({str(root)!r}), out={str(out)!r}, jobs=2)
            except KeyboardInterrupt:
                print("INTERRUPTED", flush=True); sys.exit(130)
        print("FINISHED", flush=True)
    """)
    env = dict(os.environ, PYTHONPATH=os.path.abspath(os.environ.get("PYTHONPATH", ROOT / "src")))  # cwd is elsewhere
    p = subprocess.Popen([PY, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True, cwd=root, env=env,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as in a terminal
    t0 = time.monotonic()
    while time.monotonic() - t0 < 120 and len(list(out.glob("*/*/notebook.ipynb"))) < 2:
        time.sleep(0.2)
    time.sleep(3)
    t1 = time.monotonic()
    os.killpg(p.pid, signal.SIGINT) if sig == "int" else p.send_signal(signal.SIGTERM)
    try:
        so, se = p.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        p.kill(); so, se = p.communicate()
    took = time.monotonic() - t1
    states = []
    for m in out.glob("*/*/manifest.json"):
        states.append(json.loads(m.read_text()).get("state"))
    executed = [sum(1 for c in json.loads(n.read_text())["cells"] if c.get("execution_count")) for n in out.glob("*/*/notebook.ipynb")]
    bad = any(s != "interrupted" for s in states) or "INTERRUPTED" not in so
    record("silently wrong" if bad else "works as documented", f"run-all --jobs 2 stopped ({sig}) with kernels between cells",
           f"{took:.1f} s to stop, states {states}, cells executed {executed} of {QUICK_CELLS + 1}, {so.strip()[-40:]!r}, "
           f"stderr {'Traceback' in se and 'has a traceback' or 'clean'}")


def shared_cache():
    """Two run-alls (00_quickstart) at once on one empty FACTLAB_CACHE."""
    cache = Path(tempfile.mkdtemp(prefix="p43c-cache-"))
    env = dict(os.environ, FACTLAB_CACHE=str(cache), FACTLAB_THREADS="1")
    procs = [subprocess.Popen([PY, "-m", "factlab.cli", "run-all", "--jobs", "2", "--only", "00_quickstart",
                               "--out", T / f"shared{i}"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              env=env, cwd=ROOT) for i in range(2)]
    outs = [p.communicate(timeout=1200)[0] for p in procs]
    rcs = [p.returncode for p in procs]
    states = [json.loads(m.read_text()).get("state") for i in range(2) for m in (T / f"shared{i}").glob("*/*/manifest.json")]
    heads = [json.loads(m.read_text()).get("headline") for i in range(2) for m in (T / f"shared{i}").glob("*/*/metrics.json")]
    ok = rcs == [0, 0] and states == ["ok", "ok"] and heads[0] == heads[1]
    record("works as documented" if ok else "silently wrong", "two run-alls on one empty cache",
           f"exit {rcs}, states {states}, headlines equal {heads[0] == heads[1] if len(heads) == 2 else heads}; "
           + " || ".join(o.strip()[-200:].replace("\n", " / ") for o in outs if "Traceback" in o or "error" in o.lower()))
    return cache


if __name__ == "__main__":
    print(f"scratch: {T}", flush=True)
    for name in sys.argv[1:] or ("jobs", "race-int", "race-term", "shared"):
        {"jobs": jobs_values, "race-int": lambda: race("int"), "race-term": lambda: race("term"),
         "shared": shared_cache}[name]()

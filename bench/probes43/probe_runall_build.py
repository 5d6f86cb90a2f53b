# issue 43 round-4 probe: `factlab run-all` stopped while it builds an organism (its spawned build process), by
# Ctrl-C (SIGINT to the process group) and by SIGTERM to run-all. A scratch project of two notebooks: 00_quickstart
# (no organism: sleep cells, runs beside the build) and 01_corver, whose params name organism-tiny (sleep cells too,
# so no notebook does real work), on an empty FACTLAB_CACHE so that the build happens. Each stop is checked for:
# exit status and time, a traceback on stderr, processes left behind, the build's temporary folder left in the
# cache, the run folders' manifests, and that run-all again builds the organism and finishes.
# Run with PYTHONPATH=src under nice; about 3 minutes (two organism-tiny builds).
import json, os, signal, subprocess, sys, tempfile, textwrap, time, uuid
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from probe_round3 import *

MARK = f"p43d-{uuid.uuid4().hex[:8]}"


def project() -> Path:
    import nbformat
    root = T / "proj"
    if root.exists():
        return root
    (root / "notebooks").mkdir(parents=True)
    (root / "params").mkdir()
    for stem, base, extra in (("00_quickstart", "00_quickstart_smoke.yaml", ""),
                              ("01_corver", "01_corver_lm.yaml", "model: {name: organism-tiny}\n")):
        (root / "params" / f"{stem}_smoke.yaml").write_text(f"base: {ROOT / 'params' / base}\n{extra}")
        nb = nbformat.v4.new_notebook()
        nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
        nb.cells = [nbformat.v4.new_code_cell("params_file = None\nrun_dir = None", metadata={"tags": ["parameters"]})]
        nb.cells += [nbformat.v4.new_code_cell(f"import time\ntime.sleep(0.1)\nx = {i}") for i in range(150)]
        nbformat.write(nb, root / "notebooks" / f"{stem}.ipynb")
    return root


CODE = textwrap.dedent("""
    import sys
    from pathlib import Path
    from factlab import runall, cli
    with cli._sigterm_as_interrupt():
        try:
            rs = runall.run_all(root=Path(sys.argv[1]), out=sys.argv[2], jobs=2)
        except KeyboardInterrupt:
            print("INTERRUPTED", flush=True); sys.exit(130)
    print("FINISHED", [r.ok for r in rs], flush=True)
""")


def marked() -> list[tuple[int, str]]:
    """(pid, command line) of every live process this probe started."""
    return marked_processes("P43D_MARK", MARK)


def start(cache, out):
    env = dict(os.environ, P43D_MARK=MARK, FACTLAB_CACHE=str(cache), FACTLAB_THREADS="1",
               PYTHONPATH=os.path.abspath(os.environ.get("PYTHONPATH", ROOT / "src")))
    return subprocess.Popen([PY, "-c", CODE, str(project()), str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, cwd=project(), start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))  # as in a terminal


def building(cache):
    return list((cache / "organism").glob("*.tmp-*")) if (cache / "organism").exists() else []


def build_started(cache):
    return (cache / "organism").exists() and any((cache / "organism").glob("*.lock"))


def scenario(sig, when="build"):
    cache = Path(tempfile.mkdtemp(prefix="p43d-cache-"))
    out = T / f"runs-{sig}-{when}"
    p = start(cache, out)
    t0 = time.monotonic()
    if when == "build":
        while not build_started(cache) and p.poll() is None and time.monotonic() - t0 < 180:
            time.sleep(0.1)
        time.sleep(1.0)  # into the build (pretraining)
    else:  # the build done, 01_corver's kernel starting (its process there, still importing)
        while (not list(out.glob("01_corver/*/manifest.json")) or sum("ipykernel" in c for _, c in marked()) < 2) \
                and p.poll() is None and time.monotonic() - t0 < 300:
            time.sleep(0.05)
        time.sleep(float(os.environ.get("P43D_DELAY", "0.3")))
    was_building = not any((cache / "organism").glob("*/report.json"))
    t1 = time.monotonic()
    os.killpg(p.pid, signal.SIGINT) if sig == "int" else p.send_signal(signal.SIGTERM)
    try:
        so, se = p.communicate(timeout=90)
        rc = p.returncode
    except subprocess.TimeoutExpired:
        p.kill(); so, se = p.communicate(); rc = "TIMEOUT"
    took = time.monotonic() - t1
    time.sleep(2)
    left = marked()
    for pid, _ in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    tmp = [str(t) for t in building(cache)]
    states = [json.loads(m.read_text()).get("state") for m in out.glob("*/*/manifest.json")]
    problems = ([f"left running {left}"] if left else []) + ([f"temporary folders left {tmp}"] if tmp else []) \
        + (["Traceback on stderr: " + se[se.index("Traceback"):][:int(os.environ.get("P43D_TB", "300"))].replace("\n", " / ")] if "Traceback" in se else []) \
        + ([f"states {states}"] if any(s not in ("interrupted",) for s in states) else [])
    cls = ("hang / crash" if rc == "TIMEOUT" or left or took > 30 else "silently wrong" if any(s == "ok" for s in states)
           else "traceback" if "Traceback" in se else "data lost" if tmp else
           "works as documented" if rc == 130 else "unclear error")
    record(cls, f"run-all stopped ({'Ctrl-C' if sig == 'int' else 'SIGTERM'}) " + ("while building organism-tiny" if when ==
           "build" else "after the build, as the organism notebook's kernel starts"),
           f"building: {was_building}; exit {rc} in {took:.1f} s; " + ("; ".join(problems) or "clean") + f"; {so.strip()[-60:]!r}")
    q = start(cache, T / f"runs-{sig}-{when}-again")
    try:
        so, se = q.communicate(timeout=600)
    except subprocess.TimeoutExpired:
        q.kill(); q.communicate(); record("hang / crash", f"run-all again after the stop ({sig})", "> 600 s"); return
    built = [d.name for d in (cache / "organism").iterdir() if (d / "report.json").is_file()]
    ok = q.returncode == 0 and "FINISHED [True, True]" in so and built
    record("works as documented" if ok else "data lost", f"run-all again after the stop ({sig})",
           f"exit {q.returncode}; built {built}; {so.strip()[-80:]!r} {se.strip()[-200:]!r}")


if __name__ == "__main__":
    print(f"scratch: {T}", flush=True)
    for name in sys.argv[1:] or ("int", "term", "int-start", "term-start"):
        sig, _, when = name.partition("-")
        scenario(sig, when or "build")

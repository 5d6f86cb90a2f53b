"""Issue 43's probe classes, rerun (round 3 follow-up): each probe prints one line
``CLASS | probe | detail``. Run with PYTHONPATH=src, FACTLAB_CACHE set to a scratch cache."""
from __future__ import annotations

import json, os, subprocess, sys, tempfile, textwrap, time, traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
T = Path(tempfile.mkdtemp(prefix="p43-"))
RESULTS = []


def record(cls, name, detail=""):
    RESULTS.append((cls, name, detail))
    print(f"{cls:28s} | {name} | {str(detail)[:300]}", flush=True)


def params(name, text, base="00_quickstart_smoke.yaml"):
    p = T / f"{name}.yaml"
    p.write_text((f"base: {ROOT / 'params' / base}\n" if base else "") + textwrap.dedent(text))
    return p


def load(notebook, p):
    from factlab import runner
    return runner.load_params(notebook, p)


def cli(*args, timeout=60, env=None, input=None):
    e = dict(os.environ, **(env or {}))
    try:
        r = subprocess.run([PY, "-m", "factlab.cli", *map(str, args)], capture_output=True, text=True, timeout=timeout,
                           env=e, cwd=ROOT, input=input)
        return r.returncode, r.stdout + r.stderr
    except subprocess.TimeoutExpired:
        return "TIMEOUT", ""

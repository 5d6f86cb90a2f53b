"""03_seva's SFT cell, the main job's memory peak (issue 29): seconds and peak resident memory of
the smoke SFT (params/03_seva_smoke.yaml) as it is, with ``gradient_checkpointing: true``, and
with ``max_length: 512`` (which truncates SEVA's ~600-token verifier prompts, so it is measured
only for comparison, not as a candidate: it would weaken the smoke run).

Each variant runs in a fresh process (so its peak is its own), on the same pairs and teacher
annotations as the notebook (``synth.seva.annotate_training_pairs``), into a temporary folder.

    python bench/bench_sft_memory.py
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PARAMS = ROOT / "params" / "03_seva_smoke.yaml"
VARIANTS = {
    "smoke (as is)": {},
    "gradient_checkpointing": {"gradient_checkpointing": True},
    "max_length 512 (truncates)": {"max_length": 512},
}


def one_variant(overrides: dict, out_dir: str) -> dict:
    """Load the model before the clock starts; then time ``run_sft`` with the overrides."""
    from factlab import config
    from factlab.synth import seva as synth
    from factlab.recipes import seva as seva_train
    from factlab.train import sft as sft_train
    from factlab.rewards import Resources

    cfg = config.load_config(str(PARAMS), seva_train.SevaConfig)
    cfg = cfg.model_copy(update={"sft": cfg.sft.model_copy(update=overrides)})
    world = Resources(cfg).world()
    pairs = seva_train.load_pair_set(cfg.train_data, world)
    annotations, _ = synth.annotate_training_pairs(cfg.teacher, pairs)
    dataset = sft_train.sft_dataset(pairs, annotations)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t0 = time.perf_counter()
    res = sft_train.run_sft(cfg, dataset, Path(out_dir) / "sft")
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"seconds": seconds, "peak_mb": peak, "peak_before_sft_mb": before, "losses": res.losses()}


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--child":
        spec = json.loads(sys.argv[2])
        print("RESULT " + json.dumps(one_variant(spec["overrides"], spec["out"])), flush=True)
        return
    results = {}
    for name, overrides in VARIANTS.items():
        with tempfile.TemporaryDirectory() as tmp:
            proc = subprocess.run([sys.executable, __file__, "--child", json.dumps({"overrides": overrides, "out": tmp})],
                                  capture_output=True, text=True, env=os.environ.copy())
        line = next((l for l in proc.stdout.splitlines() if l.startswith("RESULT ")), None)
        if line is None:
            print(proc.stdout[-2000:], proc.stderr[-4000:], sep="\n")
            raise SystemExit(f"variant {name!r} failed (exit {proc.returncode})")
        results[name] = json.loads(line[len("RESULT "):])
        r = results[name]
        print(f"{name:28s} {r['seconds']:7.1f} s  peak {r['peak_mb']:7.0f} MB (before SFT {r['peak_before_sft_mb']:.0f} MB)"
              f"  losses {[round(l, 3) for _, l in r['losses']]}", flush=True)
    base = results["smoke (as is)"]
    for name, r in results.items():
        if r is not base:
            print(f"{name}: peak {r['peak_mb'] / base['peak_mb']:.2f}x, time {r['seconds'] / base['seconds']:.2f}x "
                  f"the smoke SFT")


if __name__ == "__main__":
    main()

"""KLCF's ``verdict: kb`` checklist verifier: each response's sentences labelled once per fact
(as before) vs once per response (``rewards.kb.checklist_labels``, factlab's default).

The same GRPO run twice, each in a fresh one-thread process: the knowledge organism's
``organism_klcf`` ``klcf`` arm (``params/05_klcf_organism_evidence.yaml``: 4 queries x G = 8,
completions of up to 96 tokens, each scored against its query's checklist), seed 0, ``STEPS``
steps. Prints each run's seconds per step (steps after the first), their ratio, and the largest
difference of the logged per-step mean rewards (the labels are the same, so the runs should agree
exactly).

Run: ``python bench/bench_klcf_kb_checklist.py [STEPS]`` (about a minute on one idle core).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PARAMS = ROOT / "params" / "05_klcf_organism_evidence.yaml"
CHILD = r"""
import json, sys, tempfile
import torch
torch.set_num_threads(1)
from factlab import config
from factlab.recipes import klcf
from factlab.rewards import Resources, kb
from factlab.recipes.stages import start
if sys.argv[3] == "per_fact":  # every fact labels the whole response again
    once = kb.checklist_labels
    kb.checklist_labels = lambda facts, response: [once([f], response)[0] for f in facts]
cfg = config.load_config(sys.argv[1], klcf.KLCFConfig)
arm = cfg.evidence.arms[0]
grpo = cfg.evidence_grpo(arm, 0).model_copy(update={"max_steps": int(sys.argv[2]), "save_steps": 10_000})
cfg = cfg.model_copy(update={"rewards": list(arm.rewards), "grpo": grpo})
start(cfg)
resources = Resources(cfg)
run_dir = tempfile.mkdtemp()
inputs = klcf.prepare(cfg, resources, run_dir)
res = klcf.train_run(cfg, inputs.rows, resources, run_dir, inputs.truth_folder)
steps = [h for h in res.log_history if "loss" in h]
print("RESULT " + json.dumps({"step_time": [float(h["step_time"]) for h in steps],
                              "reward": [float(h["reward"]) for h in steps]}))
"""


def one(labelling: str, steps: int) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "FACTLAB_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", CHILD, str(PARAMS), str(steps), labelling], env=env,
                         capture_output=True, text=True, cwd=ROOT)
    if out.returncode:
        raise SystemExit(f"the {labelling} run failed:\n{out.stderr[-3000:]}")
    return json.loads(next(line[7:] for line in out.stdout.splitlines() if line.startswith("RESULT ")))


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    runs = {labelling: one(labelling, steps) for labelling in ("per_fact", "per_response")}
    per_step = {k: sum(r["step_time"][1:]) / (len(r["step_time"]) - 1) for k, r in runs.items()}
    diff = max(abs(a - b) for a, b in zip(runs["per_fact"]["reward"], runs["per_response"]["reward"]))
    for k in runs:
        print(f"{k:12s} labelling: {per_step[k]:.3f} s a step (steps 2..{steps})")
    print(f"largest per-step difference of the mean reward: {diff:.2e}")
    print(f"per-response / per-fact step time: {per_step['per_response'] / per_step['per_fact']:.2f}x "
          f"({per_step['per_fact'] / per_step['per_response']:.2f}x faster)")


if __name__ == "__main__":
    main()

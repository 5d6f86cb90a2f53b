"""TRL's fused LM head on CPU: every position scored (TRL 1.16's default off CUDA) vs the
completion tokens alone (``trl_seam.compact_logprobs_on_cpu``, factlab's default).

The same GRPO run twice, each in a fresh one-thread process: the knowledge organism's
``organism_corver`` ``full`` arm (``params/01_corver_organism_evidence.yaml``: CorVer's ~130-token
system prompt, 2 prompts x G = 8, completions of ~17 tokens), seed 0, ``STEPS`` steps. Prints
each run's seconds per step (steps after the first), their ratio, and the largest difference of
the logged per-step gradient norms and mean rewards (the two paths score the same tokens with
the same torch tiles, so the runs should agree to float rounding).

Run: ``python bench/bench_cpu_logprob.py [STEPS]`` (about a minute on one idle core).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PARAMS = ROOT / "params" / "01_corver_organism_evidence.yaml"
CHILD = r"""
import json, sys, tempfile, time
import torch
torch.set_num_threads(1)
from factlab import config
from factlab.recipes import corver
from factlab.rewards import Resources, build_rewards
from factlab.train import trl_seam
from factlab.train.grpo import run
if sys.argv[3] == "full":  # TRL's own choice: every position through the LM head on CPU
    trl_seam.compact_logprobs_on_cpu = lambda: None
cfg = config.load_config(sys.argv[1], corver.CorVerConfig)
corver.start(cfg)
resources = Resources(cfg)
sf = corver.prepare(cfg, resources, tempfile.mkdtemp())
arm = cfg.evidence.arms[0]
grpo = cfg.evidence_grpo(arm, 0).model_copy(update={"max_steps": int(sys.argv[2]), "save_steps": 10_000})
res = run(cfg, corver.qa_rows(sf.train_items), build_rewards(list(arm.rewards), resources), tempfile.mkdtemp(),
          name="bench", grpo=grpo)
steps = [h for h in res.log_history if "loss" in h]
print("RESULT " + json.dumps({"step_time": [float(h["step_time"]) for h in steps],
                              "grad_norm": [float(h["grad_norm"]) for h in steps],
                              "reward": [float(h["reward"]) for h in steps]}))
"""


def one(head: str, steps: int) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "FACTLAB_THREADS": "1"}
    out = subprocess.run([sys.executable, "-c", CHILD, str(PARAMS), str(steps), head], env=env, capture_output=True,
                         text=True, cwd=ROOT)
    if out.returncode:
        raise SystemExit(f"the {head}-head run failed:\n{out.stderr[-3000:]}")
    return json.loads(next(line[7:] for line in out.stdout.splitlines() if line.startswith("RESULT ")))


def main() -> None:
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 20
    runs = {head: one(head, steps) for head in ("full", "compact")}
    per_step = {head: sum(r["step_time"][1:]) / (len(r["step_time"]) - 1) for head, r in runs.items()}
    diff = {k: max(abs(a - b) for a, b in zip(runs["full"][k], runs["compact"][k])) for k in ("grad_norm", "reward")}
    for head in runs:
        print(f"{head:8s} LM head: {per_step[head]:.3f} s a step (steps 2..{steps})")
    print(f"largest per-step difference: grad norm {diff['grad_norm']:.2e}, mean reward {diff['reward']:.2e}")
    print(f"compact / full step time: {per_step['compact'] / per_step['full']:.2f}x "
          f"({per_step['full'] / per_step['compact']:.2f}x faster)")


if __name__ == "__main__":
    main()

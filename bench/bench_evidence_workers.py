"""Evidence runs side by side (``evidence.workers``, ``factlab.forked``): the same jobs in one
process with every core against forked one-thread workers.

A job stands for one (arm, seed) evidence run: the 135M policy with a LoRA adapter (r = 16)
takes ``--steps`` GRPO-shaped steps (G = 4 completions of ``--tokens`` new tokens from a SEVA
verifier prompt, then a forward and backward over them; ``bench_seva_step.step_seconds``).
``--jobs`` such jobs run first with ``workers = 1`` (in this process, torch's default threads),
then with ``workers = 2`` (two forked one-thread processes).

    python bench/bench_evidence_workers.py [--jobs 2] [--steps 4] [--tokens 64]

Prints the wall seconds of both and their ratio.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch
from peft import get_peft_model

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_seva_step import step_seconds  # noqa: E402

from factlab import models  # noqa: E402
from factlab.data.miniworld import ensure_world  # noqa: E402
from factlab.forked import Job, run_jobs  # noqa: E402
from factlab.recipes.seva import verifier_rows  # noqa: E402
from factlab.synth.perturbations import miniworld_pairs  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--tokens", type=int, default=64)
    args = ap.parse_args()

    models.stop_token_ids = lambda tokenizer: []  # fixed-length completions: every job does the same work
    _, tokenizer = models.load_model(device="cpu")
    pair = miniworld_pairs(ensure_world(), seed=0)[0]
    prompt = tokenizer.apply_chat_template(verifier_rows([pair])[0]["prompt"], tokenize=False,
                                           add_generation_prompt=True)

    def job() -> None:
        model, tok = models.load_model(device="cpu")
        model = get_peft_model(model, models.lora_config(r=16, alpha=32))
        for _ in range(args.steps):
            step_seconds(model, tok, prompt, args.tokens)

    threads = torch.get_num_threads()
    print(f"{args.jobs} jobs of {args.steps} steps (G = 4, {args.tokens} new tokens, LoRA forward + backward)")
    wall = {}
    with tempfile.TemporaryDirectory() as tmp:
        for workers in (1, 2):
            jobs = [Job(f"job {i}", job, Path(tmp) / f"w{workers}-{i}.log") for i in range(args.jobs)]
            t0 = time.perf_counter()
            run_jobs(jobs, workers, desc=f"workers={workers}", progress=False)
            wall[workers] = time.perf_counter() - t0
            how = f"in this process, {threads} threads" if workers == 1 else "forked, 1 thread each"
            print(f"workers = {workers} ({how}): {wall[workers]:7.1f} s")
    print(f"workers = 2 / workers = 1 wall: {wall[2] / wall[1]:.2f}x")


if __name__ == "__main__":
    main()

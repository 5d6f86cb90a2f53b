"""OpenMP wait policy under load: SmolLM2-135M forward + backward (8 x 64 tokens) and batched
greedy generation (8 x 32 new tokens) with ``OMP_WAIT_POLICY=PASSIVE`` (factlab's default,
``factlab.threads``) against ``ACTIVE`` (spinning waiters), each in a fresh process; ``--load``
starts one CPU-bound ``nice -n 19`` competitor first, as a shared machine has. Prints the
seconds of each and the ACTIVE / PASSIVE ratios (above 1: passive waiting is faster).

    python bench/bench_wait_policy.py [--load]
"""

from __future__ import annotations

import os
import subprocess
import sys

PROBE = r"""
import time
import factlab  # noqa: F401  (sets the policy unless the environment has one)
import torch
from factlab import models
m, tok = models.load_model(models.DEFAULT_MODEL, device="cpu")
ids = torch.randint(100, 1000, (8, 64))
def step():
    m(ids, labels=ids).loss.backward()
step()
t = time.perf_counter()
for _ in range(3):
    step()
fb = (time.perf_counter() - t) / 3
x = tok(["The capital of France is"] * 8, return_tensors="pt")
with torch.no_grad():
    m.generate(**x, max_new_tokens=4, do_sample=False)
    t = time.perf_counter()
    m.generate(**x, max_new_tokens=32, min_new_tokens=32, do_sample=False)
    g = time.perf_counter() - t
print(f"{fb} {g}")
"""


def measure(policy: str) -> tuple[float, float]:
    out = subprocess.run([sys.executable, "-c", PROBE], env={**os.environ, "OMP_WAIT_POLICY": policy},
                         capture_output=True, text=True, check=True).stdout.split()
    return float(out[-2]), float(out[-1])


def main() -> None:
    competitor = (subprocess.Popen(["nice", "-n", "19", sys.executable, "-c", "while True: pass"])
                  if "--load" in sys.argv else None)
    try:
        passive, active = measure("PASSIVE"), measure("ACTIVE")
    finally:
        if competitor is not None:
            competitor.kill()
    print(f"PASSIVE: forward+backward {passive[0]:.2f} s, generate {passive[1]:.2f} s")
    print(f"ACTIVE:  forward+backward {active[0]:.2f} s, generate {active[1]:.2f} s")
    print(f"ACTIVE / PASSIVE: forward+backward {active[0] / passive[0]:.2f}x, generate {active[1] / passive[1]:.2f}x"
          + (" (beside one nice -n 19 CPU-bound process)" if competitor else " (idle)"))


if __name__ == "__main__":
    main()

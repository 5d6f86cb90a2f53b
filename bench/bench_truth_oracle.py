"""The mini-world truth oracle's precision and recall per label (README "The mini-world's truth",
its **Measured** paragraph and table), reproduced:

1. on constructed sentences (``eval.truth.constructed_sentences``: every true fact SEVA's pair
   builder states for seeds 0-2, its Table 19 perturbation, off-world statements about the same
   countries), where the README reports 11,094 sentences and precision / recall >= 0.999;
2. on the 246 sentences the embedded model wrote, labelled by hand
   (``eval.truth.read_labelled``, ``tests/fixtures/truth/``), each read with its prompt as
   context, where the README reports accuracy 0.88 over all 246.

It trains nothing and loads no model; prints one row per set and the disagreements' count.

Run: ``python bench/bench_truth_oracle.py [--seeds 0 1 2]`` (under a minute on 2 cores).
"""

from __future__ import annotations

import argparse
import time

from factlab.eval import truth as T


def _row(name: str, m: dict) -> str:
    cells = " | ".join(f"{m[label]['precision']:.3f} / {m[label]['recall']:.3f}" for label in T.SENTENCE_LABELS)
    return f"| {name} | {m['n']} | {m['accuracy']:.3f} | {cells} | {len(m['disagreements'])} |"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    args = ap.parse_args()
    t0 = time.perf_counter()
    constructed = [row for seed in args.seeds for row in T.constructed_sentences(seed=seed, per_strategy=None)]
    labelled = T.read_labelled()
    print("| set | n | accuracy | " + " | ".join(f"{label} P / R" for label in T.SENTENCE_LABELS)
          + " | disagreements |")
    print("| --- | --- | --- | " + " | ".join("---" for _ in T.SENTENCE_LABELS) + " | --- |")
    print(_row(f"constructed (seeds {', '.join(map(str, args.seeds))})", T.measure_oracle(constructed)))
    print(_row("hand-labelled model sentences", T.measure_oracle(labelled, expected_key="label")))
    print(f"\n{time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()

"""Decoding's KV cache (``factlab.decoding``): transformers' ``DynamicCache`` (every layer's keys
and values concatenated with each new token's: a copy of the whole cache per step) against
factlab's ``reserved_cache`` (views of a buffer sized once for prompt + ``max_new_tokens``,
written in place), the same ``decoding.decode`` calls otherwise.

Both run here, in one process, on the knowledge organism (4 layers x 128, the evidence runs'
policy) and the embedded SmolLM2-135M (30 layers x 576, the main job's), at three shapes: a K2V
rollout batch (32 rows, a ~165-token prompt sharing 120, 64 new tokens), a SEVA verdict batch (8 x
300, 280 new) and an evaluation batch (64 x 40, 64 new). No stop token, so every row runs to the
limit; each shape greedy then sampled (seeded). Prints each cache's seconds, the ratio and whether
every token agrees (it must: the attention reads the same keys and values).

Run: ``python bench/bench_decode_cache.py [organism|smollm2|both]`` (about 3 min on one idle core).
"""

from __future__ import annotations

import sys
import time

import torch
from transformers import DynamicCache

from factlab import decoding, models

SHAPES = [("k2v rollouts", 32, 165, 120, 64), ("seva verdicts", 8, 300, 250, 280), ("evaluation", 64, 40, 20, 64)]
MODELS = {"organism": "organism", "smollm2": models.DEFAULT_MODEL}


def run(model, rows, new_tokens: int, cache) -> tuple[float, list]:
    decoding.reserved_cache, real = cache, decoding.reserved_cache
    try:
        t0, outs = time.perf_counter(), []
        for temperature in (0.0, 1.0):
            torch.manual_seed(1)
            outs.append(decoding.decode(model, rows, max_new_tokens=new_tokens, stop_ids=[], pad_id=0,
                                        temperature=temperature))
        return time.perf_counter() - t0, outs
    finally:
        decoding.reserved_cache = real


def main(which: str) -> None:
    torch.set_num_threads(1)
    for label, name in MODELS.items():
        if which not in (label, "both"):
            continue
        model, _ = models.load_model(name, device="cpu")
        model.eval()
        vocab = model.config.vocab_size
        g = torch.Generator().manual_seed(0)
        for shape, rows_n, prompt, shared, new in SHAPES:
            if label == "smollm2" and shape == "seva verdicts":
                rows_n = 4  # the 135M model's long decode takes minutes at 8 rows
            prefix = torch.randint(5, vocab, (shared,), generator=g).tolist()
            rows = [prefix + torch.randint(5, vocab, (prompt - shared,), generator=g).tolist() for _ in range(rows_n)]
            dynamic, want = run(model, rows, new, lambda config, capacity: DynamicCache(config=config))
            reserved, got = run(model, rows, new, decoding.reserved_cache)
            print(f"{label:9s} {shape:14s} {rows_n:3d} x {prompt} + {new}: DynamicCache {dynamic:6.2f} s, "
                  f"reserved {reserved:6.2f} s, ratio {reserved / dynamic:.3f}x; tokens identical: {got == want}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "both")

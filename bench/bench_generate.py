"""Generation throughput of the default model: factlab's decoding vs transformers' generate,
and the decode rate against the bound this machine allows.

Part 1, the quickstart's workload: the same 64 mini-world questions with CorVer's evaluation
prompt, greedy, 96 new tokens at most, through ``models.generate`` with each engine (batch 16,
the old default, and 64); prints wall time, the ratio, and whether the greedy tokens agree.

Part 2, the bound: the model's FLOPs per generated token (2 x parameters, attention
neglected at these lengths) and this machine's measured fp32 matrix-multiply throughput (a
2048 x 2048 product) give the most tokens per second decoding could reach; batched greedy
decoding of 64 and 128 rows (factlab engine, fixed 64 new tokens, prompt time excluded) is
printed against it as a ratio.
"""

import time

import torch

from factlab import decoding, models, prompts
from factlab.data.miniworld import ensure_world
from factlab.data.types import read_jsonl

N, MAX_NEW = 64, 96


def matmul_gflops(n: int = 2048, reps: int = 5) -> float:
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b
    t0 = time.perf_counter()
    for _ in range(reps):
        a @ b
    return 2 * n ** 3 * reps / (time.perf_counter() - t0) / 1e9


def decode_rate(model, batch: int, steps: int = 64) -> float:
    rows = [[1, *range(100, 180), 200 + i] for i in range(batch)]
    marks: list[float] = []
    decoding.decode(model, rows, max_new_tokens=steps, stop_ids=[], pad_id=0,
                    on_step=lambda s: marks.append(time.perf_counter()))
    return batch * (len(marks) - 1) / (marks[-1] - marks[0])


def main() -> None:
    torch.manual_seed(0)
    items = list(read_jsonl(ensure_world()["qa_heldout"]))[:N]
    model, tok = models.load_model(models.DEFAULT_MODEL)
    chats = [models.chat_prompt(tok, it["question"], system=prompts.corver_eval_system(False)) for it in items]
    models.generate(model, tok, chats[:2], max_new_tokens=4, progress=False)  # warm-up
    runs = {}
    for engine, batch in (("transformers", 16), ("factlab", 16), ("factlab", 64)):
        t0 = time.perf_counter()
        gens = models.generate(model, tok, chats, max_new_tokens=MAX_NEW, batch_size=batch, progress=False,
                               engine=engine)
        runs[(engine, batch)] = (time.perf_counter() - t0, [g[0].token_ids for g in gens])
    base_s, base_ids = runs[("transformers", 16)]
    tokens = sum(len(x) for x in base_ids)
    print(f"quickstart workload: {N} questions, {tokens} new tokens, greedy, max {MAX_NEW}")
    for (engine, batch), (sec, ids) in runs.items():
        agree = sum(a == b for a, b in zip(ids, base_ids)) / N
        print(f"  {engine:12s} batch {batch:3d}: {sec:6.1f} s  {tokens / sec:6.1f} tok/s  tokens equal: {agree:.2f}")

    params = sum(p.numel() for p in model.parameters())
    gflops = matmul_gflops()
    bound = gflops * 1e9 / (2 * params)
    print(f"bound: {params / 1e6:.0f}M parameters -> {2 * params / 1e9:.2f} GFLOP per token; fp32 matmul "
          f"{gflops:.0f} GFLOP/s -> at most {bound:.0f} tokens/s")
    rates = {b: decode_rate(model, b) for b in (64, 128)}
    for b, r in rates.items():
        print(f"  batched greedy decode, batch {b:3d}: {r:6.1f} tok/s  ({bound / r:.2f}x below the bound)")
    print(f"speedup factlab batch 64 / transformers batch 16 on the quickstart workload: "
          f"{base_s / runs[('factlab', 64)][0]:.2f}x")
    print(f"ratio bound / best batched decode rate: {bound / max(rates.values()):.2f}x")


if __name__ == "__main__":
    main()

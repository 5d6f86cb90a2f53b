"""Batched, left-padded generation vs one prompt at a time (factlab.models.generate).

Same model, same 16 mini-world questions, greedy, same max_new_tokens; prints the
wall-clock ratio measured in this one run. Also checks that batching does not change the
greedy answers beyond padding-induced numerical noise (reports the agreement rate).
"""

import time

from factlab import models, prompts
from factlab.data.miniworld import ensure_world
from factlab.data.types import read_jsonl

N, MAX_NEW = 16, 48


def main() -> None:
    world = ensure_world()
    items = list(read_jsonl(world["qa_heldout"]))[:N]
    model, tok = models.load_model(models.DEFAULT_MODEL)
    chats = [models.chat_prompt(tok, it["question"], system=prompts.corver_eval_system(False)) for it in items]
    models.generate(model, tok, chats[:2], max_new_tokens=8, progress=False)  # warm-up

    t0 = time.perf_counter()
    single = [models.generate(model, tok, [c], max_new_tokens=MAX_NEW, batch_size=1, progress=False)[0][0]
              for c in chats]
    t_single = time.perf_counter() - t0
    t0 = time.perf_counter()
    batched = [g[0] for g in models.generate(model, tok, chats, max_new_tokens=MAX_NEW, batch_size=N,
                                             progress=False)]
    t_batched = time.perf_counter() - t0

    agree = sum(a.text == b.text for a, b in zip(single, batched)) / N
    tokens = sum(len(g.token_ids) for g in batched)
    print(f"prompts={N} max_new_tokens={MAX_NEW} new_tokens(batched)={tokens}")
    print(f"one-at-a-time {t_single:.2f}s   batched {t_batched:.2f}s")
    print(f"greedy text agreement batched vs single: {agree:.2f}")
    print(f"speedup batched/single: {t_single / t_batched:.2f}x")


if __name__ == "__main__":
    main()

"""Batched TransformersJudge vs one judge prompt at a time, on Binary RAR judge prompts.

001 §3.2 "Practical efficiency for online RL": verification is the expensive part of the
reward, and the paper raises throughput by "evaluating batched responses in parallel".
This measures what batching buys factlab's local judge (``TransformersJudge``, the default
SmolLM2-135M-Instruct, greedy, ``max_new_tokens=16``, no answer cache) on the SAME N
prompts in one run: ``batch_size=16`` vs ``batch_size=1``, one loaded model shared by both.

Prompts: real Binary RAR judge prompts (Figure 6 template, ``BinaryRAR(..., k=4,
prefill=True).judge_prompts``) whose passages are retrieved by BM25 from the mini-world
datastore chunked into 128-token windows (the §4.3 setting is 512-token chunks, top 8;
smaller here so that a prompt stays ~1.2k tokens). Responses: "Tell me about X." answered
with two sentences of X's mini-world article (location + capital); every other one has the
capital swapped for another country's. Both judges answer with the ``'{"SCORE": '``
prefill. N is 8, not 32: on 2 shared CPU cores with one thread a ~1.2k-token prompt
costs ~7 s of prefill, so 32 (or 16) prompts per side would not fit a ~3-minute run.

Prints prompts/s per side, answer agreement (greedy: identical up to padding noise) and,
last, the throughput ratio. On CPU the ~1.2k-token prefill dominates (16 new tokens) and
is compute-bound, so batching buys nothing there and left-padding to the longest prompt
can make the batch slower (ratio < 1); batching pays off on a GPU.
"""

import random
import re
import time

from factlab.corpus.retrieval import Datastore
from factlab.data.miniworld import ensure_world
from factlab.data.types import read_jsonl
from factlab.judges import TransformersJudge
from factlab.models import load_tokenizer
from factlab.rewards.rar import BinaryRAR, score_from_judge

N, MAX_NEW, BATCH, K, CHUNK_TOKENS = 8, 16, 16, 4, 128
PREFIX = '{"SCORE": '
_CAPITAL = re.compile(r"The capital of .+? is (.+?)\.(?=\s+[A-Z]|\s*$)")


def responses(docs: list[dict], n: int, seed: int = 0) -> tuple[list[str], list[str], list[bool]]:
    """(prompts, responses, is_true): location sentence + capital sentence, every other one
    with the capital swapped for another country's."""
    with_cap = [(d, m) for d in docs if (m := _CAPITAL.search(d["text"]))]
    picked = random.Random(seed).sample(with_cap, n)
    prompts, resp, truth = [], [], []
    for i, (d, m) in enumerate(picked):
        first = d["text"].split(". ")[0] + "."
        capital = m.group(1)
        if i % 2:
            other = next(mm.group(1) for _, mm in picked[i + 1:] + picked[:i] if mm.group(1) != capital)
            sentence = m.group(0).replace(capital, other)
        else:
            sentence = m.group(0)
        prompts.append(f"Tell me about {d['title']}.")
        resp.append(f"{first} {sentence}")
        truth.append(i % 2 == 0)
    return prompts, resp, truth


def main() -> None:
    world = ensure_world()
    docs = list(read_jsonl(world["corpus"]))
    ds = Datastore.from_documents(docs, load_tokenizer(), chunk_tokens=CHUNK_TOKENS)
    prompts, completions, truth = responses(docs, N)

    batched = TransformersJudge(max_new_tokens=MAX_NEW, batch_size=BATCH, cache=None)
    model, tok = batched.load()
    single = TransformersJudge(max_new_tokens=MAX_NEW, batch_size=1, cache=None, model_obj=model, tokenizer=tok)
    judge_prompts = BinaryRAR(batched, ds, k=K, prefill=True).judge_prompts(prompts, completions)
    n_tokens = [len(tok(p, add_special_tokens=False)["input_ids"]) for p in judge_prompts]

    warm = ["Is Paris the capital of France?", "Is Rome in Italy?"]  # short: warms the code paths
    batched.judge(warm, prefix=PREFIX)
    single.judge(warm, prefix=PREFIX)
    for j in (batched, single):
        j.stats.clear()
        j.seconds = 0.0

    t0 = time.perf_counter()
    out_b = batched.judge(judge_prompts, prefix=PREFIX)
    t_batched = time.perf_counter() - t0
    t0 = time.perf_counter()
    out_s = single.judge(judge_prompts, prefix=PREFIX)
    t_single = time.perf_counter() - t0

    agree = sum(a == b for a, b in zip(out_b, out_s)) / N
    sb = [score_from_judge(t, (0.0, 1.0)) for t in out_b]
    ss = [score_from_judge(t, (0.0, 1.0)) for t in out_s]
    score_agree = sum(a == b for a, b in zip(sb, ss)) / N
    acc = sum(s is not None and (s >= 1.0) == y for s, y in zip(sb, truth)) / N
    summ_b, summ_s = batched.summary(), single.summary()
    print(f"prompts={N} (true {sum(truth)}, swapped capital {N - sum(truth)}) judge prompt tokens "
          f"min/mean/max {min(n_tokens)}/{sum(n_tokens) / N:.0f}/{max(n_tokens)} max_new_tokens={MAX_NEW}")
    print(f"batched (batch_size={BATCH}): {t_batched:.2f}s, {N / t_batched:.3f} prompts/s, "
          f"completion tokens {summ_b['completion_tokens']}")
    print(f"single (batch_size=1): {t_single:.2f}s, {N / t_single:.3f} prompts/s, "
          f"completion tokens {summ_s['completion_tokens']}")
    print(f"answer agreement batched vs single: text {agree:.2f}, parsed SCORE {score_agree:.2f}; "
          f"unreadable SCORE batched {sb.count(None)}/{N}; batched reward accuracy vs truth {acc:.2f}")
    print(f"throughput ratio batched / single: {t_single / t_batched:.2f}x")


if __name__ == "__main__":
    main()

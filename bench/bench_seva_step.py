"""What a SEVA GRPO step costs at the completion length SEVA's verdicts need (issue 28's `seva`
hypothesis): the evidence params generate 64 tokens per completion, Appendix K's JSON verdicts are
200-314 tokens (results/seva/status.md), so a test of the claim needs about 320.

One step's model work, timed at both lengths on the same prompt: G = 4 sampled completions of
exactly N new tokens (stop tokens switched off) from one verifier prompt (K.1-K.2, a mini-world
pair; its length is printed) through factlab's decoding, as the trainer's rollouts do; then one forward and
backward of the policy with a LoRA adapter (r = 16, the smoke's) over the 4 prompt + completion
sequences. Rewards are string parsing and cost nothing beside these.

    python bench/bench_seva_step.py [--lengths 64 320] [--repeats 2]

Prints seconds per part and per step for each length and the ratio of the longest to the first.
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch
from peft import get_peft_model

from factlab import models
from factlab.data.miniworld import ensure_world
from factlab.recipes.seva import verifier_rows
from factlab.synth.perturbations import miniworld_pairs

G = 4


def step_seconds(model, tokenizer, prompt: str, new_tokens: int) -> tuple[float, float]:
    """(rollout seconds, forward + backward seconds) of one step with ``new_tokens`` per completion."""
    t0 = time.perf_counter()
    (gens,) = models.generate(model, tokenizer, [prompt], max_new_tokens=new_tokens, temperature=1.0,
                              num_return_sequences=G, batch_size=G, seed=0, progress=False)
    rollout = time.perf_counter() - t0
    assert all(len(g.token_ids) == new_tokens for g in gens), [len(g.token_ids) for g in gens]
    prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
    batch = torch.tensor([prompt_ids + list(g.token_ids) for g in gens])
    model.train()
    t0 = time.perf_counter()
    logits = model(input_ids=batch).logits[:, len(prompt_ids) - 1:-1]
    logp = torch.log_softmax(logits.float(), -1).gather(-1, batch[:, len(prompt_ids):, None]).squeeze(-1)
    (-logp.mean()).backward()
    model.zero_grad(set_to_none=True)
    return rollout, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=[64, 320])
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()

    models.stop_token_ids = lambda tokenizer: []  # fixed-length completions: every repeat does the same work
    model, tokenizer = models.load_model(device="cpu")
    model = get_peft_model(model, models.lora_config(r=16, alpha=32))
    pair = miniworld_pairs(ensure_world(), seed=0)[0]
    prompt = tokenizer.apply_chat_template(verifier_rows([pair])[0]["prompt"], tokenize=False, add_generation_prompt=True)
    n_prompt = len(tokenizer(prompt, add_special_tokens=False)["input_ids"])
    print(f"SmolLM2-135M + LoRA r=16, {torch.get_num_threads()} threads; one verifier prompt of {n_prompt} tokens, G = {G}")
    step_seconds(model, tokenizer, prompt, 8)  # warm-up
    totals = {}
    for n in args.lengths:
        runs = [step_seconds(model, tokenizer, prompt, n) for _ in range(args.repeats)]
        rollout, fwd_bwd = statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)
        totals[n] = rollout + fwd_bwd
        print(f"{n:4d} new tokens: rollout {rollout:6.1f} s, forward + backward {fwd_bwd:6.1f} s, step {totals[n]:6.1f} s "
              f"(median of {args.repeats})")
    first, last = args.lengths[0], args.lengths[-1]
    print(f"step at {last} tokens / step at {first} tokens: {totals[last] / totals[first]:.2f}x")


if __name__ == "__main__":
    main()

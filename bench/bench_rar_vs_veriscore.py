"""Binary RAR (one judge call per response) vs VeriScore (claims extracted, each verified).

001 §3.2 "Practical efficiency for online RL": instead of extracting and verifying many
individual claims as VeriScore does (§4.2; Chen et al., 2025), Binary RAR compares the whole
response against the retrieved documents in a single judge pass, which "avoids repeatedly
processing the same documents and significantly reduces computation". This counts that
cost on the SAME responses in one run, each reward called as a TRL reward function
``reward(prompts=[...], completions=[...])``:

* Binary RAR: ``BinaryRAR(judge, ds, k=4, prefill=True)``: one call per response on the
  Figure 6 prompt with the top-4 BM25 chunks for prompt + response; judge
  ``max_new_tokens=16`` (only ``{"SCORE": n}`` is needed after the prefill).
* VeriScore: ``VeriScoreReward(judge, ds, k_per_claim=4, prefill=True)``: one Figure 8
  extraction call per response plus one Figure 9 verification call per extracted claim
  (top-4 chunks per claim); judge ``max_new_tokens=96``, since claim lists are longer (the
  same judge, so also 96 for the verdicts).

Both judges are fresh ``TransformersJudge(cache=None)`` sharing one loaded model (the
default SmolLM2-135M-Instruct, greedy, batch 16); the datastore is the mini-world corpus
in 128-token BM25 chunks (the paper: 512 for RAR, 256 for VeriScore, §4.2-4.3; one
smaller datastore here for both, so the evidence per call is comparable and prompts stay
short on CPU). Responses: "Tell me about X." answered with two sentences of X's mini-world
article (location + capital), every other one with the capital swapped. N is 6 rather
than 8 so the run fits in ~3 minutes on 2 shared CPU cores. Prints per side: judge calls,
prompt/completion tokens, wall time, rewards and how many were None (unreadable judge
output), then the ratios last.
"""

import random
import re
import time

from factlab.corpus.retrieval import Datastore
from factlab.data.miniworld import ensure_world
from factlab.data.types import read_jsonl
from factlab.judges import TransformersJudge
from factlab.models import load_tokenizer
from factlab.rewards.rar import BinaryRAR, VeriScoreReward

N, K, CHUNK_TOKENS = 6, 4, 128
MAX_NEW_BINARY, MAX_NEW_VERISCORE = 16, 96
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


def _fmt(rewards: list) -> str:
    return "[" + ", ".join("None" if r is None else f"{r:.2f}" for r in rewards) + "]"


def main() -> None:
    world = ensure_world()
    docs = list(read_jsonl(world["corpus"]))
    ds = Datastore.from_documents(docs, load_tokenizer(), chunk_tokens=CHUNK_TOKENS)
    prompts, completions, truth = responses(docs, N)

    j_bin = TransformersJudge(max_new_tokens=MAX_NEW_BINARY, cache=None)
    model, tok = j_bin.load()
    j_vs = TransformersJudge(max_new_tokens=MAX_NEW_VERISCORE, cache=None, model_obj=model, tokenizer=tok)
    for j in (j_bin, j_vs):  # warm-up on a short prompt, then reset the accounting
        j.judge(["Is Paris the capital of France?"])
        j.stats.clear()
        j.seconds = 0.0
    binary = BinaryRAR(j_bin, ds, k=K, prefill=True)
    veriscore = VeriScoreReward(j_vs, ds, k_per_claim=K, prefill=True)

    t0 = time.perf_counter()
    r_bin = binary(prompts=prompts, completions=completions)
    t_bin = time.perf_counter() - t0
    t0 = time.perf_counter()
    r_vs = veriscore(prompts=prompts, completions=completions)
    t_vs = time.perf_counter() - t0

    s_bin, s_vs = j_bin.summary(), j_vs.summary()
    vstats = veriscore.verifier.stats
    claims = [len(c) if c is not None else None for c in veriscore.verifier.claims]
    print(f"responses={N} (true {sum(truth)}, swapped capital {N - sum(truth)}) k={K} chunks of "
          f"{CHUNK_TOKENS} tokens; truth {[int(t) for t in truth]}")
    print(f"Binary RAR: {t_bin:.2f}s, judge calls {s_bin['calls']}, prompt tokens {s_bin['prompt_tokens']}, "
          f"completion tokens {s_bin['completion_tokens']}, None {r_bin.count(None)}/{N}, rewards {_fmt(r_bin)}")
    print(f"VeriScore: {t_vs:.2f}s, judge calls {s_vs['calls']} (extraction {vstats['extraction_calls']}, "
          f"verification {vstats['verification_calls']}), prompt tokens {s_vs['prompt_tokens']}, "
          f"completion tokens {s_vs['completion_tokens']}, None {r_vs.count(None)}/{N}, rewards {_fmt(r_vs)}")
    print(f"VeriScore claims per response {claims} (extraction failures {vstats['extraction_failures']}, "
          f"unreadable verdicts {vstats['verification_failures']}/{vstats['verification_calls']})")
    print(f"judge calls ratio VeriScore / Binary RAR: {s_vs['calls'] / s_bin['calls']:.2f}x")
    print(f"wall-time ratio VeriScore / Binary RAR: {t_vs / t_bin:.2f}x")


if __name__ == "__main__":
    main()

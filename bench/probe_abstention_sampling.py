"""How often an organism *samples* an abstention where it does not know (issue 41).

A reward that pays for abstaining (Binary RAR, 001) can only reinforce an abstention the policy
samples: on a question about a country the policy does not know, every other answer is wrong and
scores 0, so a group with no abstention has zero spread and no gradient. This asks each named
organism the held-out unknown-country questions under 001 §4.1's abstain prompt, ``--samples``
times each at temperature 1 (32 new tokens, the evidence runs' completion length), and prints the
abstentions out of the samples (``text.is_refusal`` of the parsed answer).

Run: ``python bench/probe_abstention_sampling.py [organism organism-hesitant ...] [--samples 8]``
(about 30 s per organism on 2 cores, once it is built).
"""

from __future__ import annotations

import argparse

import torch

from factlab import organism as O
from factlab import text as T
from factlab.decoding import decode
from factlab.eval.abstention import ABSTAIN_SYSTEM


def sampled_abstentions(name: str, samples: int, seed: int = 0) -> tuple[int, int]:
    model, tok = O.load(name)
    unknown = [it for it in O.qa_items("heldout", name) if it.meta.get("bucket") == "unknown"]
    prompts = [tok(O.chat_text([{"role": "system", "content": ABSTAIN_SYSTEM}, {"role": "user", "content": it.question}]),
                   add_special_tokens=False)["input_ids"] for it in unknown]
    stops = [tok.convert_tokens_to_ids(O.STOP_TOKEN), tok.eos_token_id]
    torch.manual_seed(seed)
    total = abstained = 0
    for _ in range(samples):
        for ids, _ in decode(model, prompts, max_new_tokens=32, stop_ids=stops, pad_id=tok.pad_token_id,
                             temperature=1.0, top_p=1.0):
            text = tok.decode(ids, skip_special_tokens=True)
            total += 1
            abstained += T.is_refusal(T.extract_answer(text) or text)
    return abstained, total


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("names", nargs="*", default=["organism", "organism-hesitant"])
    p.add_argument("--samples", type=int, default=8)
    args = p.parse_args()
    for name in args.names:
        a, n = sampled_abstentions(name, args.samples)
        print(f"{name}: {a} abstentions of {n} samples ({a / max(n, 1):.4f}) on held-out unknown countries")


if __name__ == "__main__":
    main()

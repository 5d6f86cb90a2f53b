"""CorVer sentence reward vs an LLM-judge sentence reward: per-sentence cost ratio.

Same 64 mini-world claims (true facts and entity-swap perturbations). CorVer path
(000 §3.2, §B.1): heuristic triplet extraction + exact infini-gram co-occurrence lookup
+ Eq. (2), no cache. LLM-judge path (the offline judge of §B.7, in the training loop
here): the default model (SmolLM2-135M-Instruct) reads each sentence alone and answers
CORRECT or INCORRECT, greedy, batched 16. Prints each path's ms per sentence, how well
each separates true from false claims (accuracy of its sign), and the cost ratio.
"""

import random
import time

from factlab import models
from factlab.recipes.corver import CorVerConfig
from factlab.data.miniworld import ensure_world
from factlab.eval.calibration import miniworld_labelled_claims
from factlab.recipes import corver

N = 64
JUDGE_SYSTEM = ("Decide whether the sentence is factually correct. Reply with exactly one word: "
                "CORRECT or INCORRECT.")


def main() -> None:
    world = ensure_world()
    claims = random.Random(0).sample(miniworld_labelled_claims(world), N)
    sentences = [c["sentence"] for c in claims]
    labels = [c["correct"] for c in claims]
    cfg = CorVerConfig()
    index = corver.ensure_index(cfg, world_corpus=world["corpus"], progress=False)
    scorer = corver.make_scorer(cfg, index)
    scorer.traces(["Warm-up sentence about France and Spain."])  # loads the tokenizer
    scorer.timings = {"extract_s": 0.0, "lookup_s": 0.0}

    t0 = time.perf_counter()
    traces = scorer.traces(sentences)
    t_corver = time.perf_counter() - t0
    corver_pred = [bool(tr) and tr[0].count is not None and tr[0].count > 0 for tr in traces]

    model, tok = models.load_model(models.DEFAULT_MODEL)
    prompts = [models.chat_prompt(tok, s, system=JUDGE_SYSTEM) for s in sentences]
    models.generate(model, tok, prompts[:2], max_new_tokens=4, progress=False)  # warm-up
    t0 = time.perf_counter()
    gens = models.generate(model, tok, prompts, max_new_tokens=4, batch_size=16, progress=False)
    t_judge = time.perf_counter() - t0
    verdicts = [g[0].text.strip().upper() for g in gens]
    judge_pred = [v.startswith("CORRECT") for v in verdicts]
    parsed = sum(v.startswith(("CORRECT", "INCORRECT")) for v in verdicts) / N

    acc = lambda pred: sum(p == y for p, y in zip(pred, labels)) / N  # noqa: E731
    print(f"sentences={N} (true {sum(labels)}, perturbed {N - sum(labels)})")
    print(f"CorVer (heuristic + lookup): {1e3 * t_corver / N:.3f} ms/sentence, "
          f"extract {scorer.timings['extract_s']:.4f}s lookup {scorer.timings['lookup_s']:.4f}s, "
          f"accuracy of count>0 = {acc(corver_pred):.2f}")
    print(f"LLM judge ({models.DEFAULT_MODEL}): {1e3 * t_judge / N:.1f} ms/sentence, "
          f"parsed verdicts {parsed:.2f}, accuracy = {acc(judge_pred):.2f}")
    print(f"cost ratio LLM-judge / CorVer per sentence: {t_judge / t_corver:.1f}x")


if __name__ == "__main__":
    main()

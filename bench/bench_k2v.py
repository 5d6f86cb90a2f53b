"""K2V's two throughput questions (003_5e9813e66e6ba19a.txt §4.1, Table 7), measured in one run.

1. **Dynamic sampling vs plain GRPO** on the same prompts, model and rewards: K2V questions
   from the mini-world's gold graph (template rephraser and checklists), SmolLM2-135M policy,
   the ``k2v`` reward with reference-rule verdicts (``TemplateChecklistJudge``, so the
   reward is real and the judge costs nothing) plus DAPO's ``overlong`` penalty, G = 4, 2
   prompts per step, 3 steps each. Plain GRPO trains on whatever it generated: its useful
   groups (reward variance) per generated group is 1 - frac_reward_zero_std. Dynamic sampling
   generates extra rounds until every group of the batch is useful: its useful groups per
   generated group is groups / (groups x (1 + rounds)). Printed: both shares and the wall time
   per useful completion (training seconds / useful completions), and their ratios.
2. **Checklist judge, batched vs one prompt at a time**: the Table 15 prompt for every
   (question, criterion) of 6 questions (30 prompts), the local ``TransformersJudge`` with
   ``verdict: choice`` (one forward pass per prompt), ``batch_size=16`` vs ``1``, no cache;
   prompts/s per side, verdict agreement, and the ratio.

Run: ``python bench/bench_k2v.py`` (about 3-4 minutes on 2 CPU cores).
"""

import tempfile
import time
from pathlib import Path

from factlab import config
from factlab.data.miniworld import ensure_world
from factlab.judges import TransformersJudge
from factlab.rewards.k2v import ChecklistJudge, K2VArgs, K2VReward, reasoning_of
from factlab.rewards.length import OverlongArgs, OverlongPenalty
from factlab.rewards.registry import RewardSet, RewardSpec
from factlab.synth import kg
from factlab.synth.k2v import (ChecklistSection, SynthesisSection, TemplateChecklistJudge, make_checklists,
                               synthesize_questions)
from factlab.train import run
from factlab.recipes.k2v import K2VConfig, k2v_rows

STEPS, G = 3, 4


def questions(n: int):
    graph, _ = kg.gold_graph(ensure_world())
    qs, _ = synthesize_questions(graph, SynthesisSection(questions=n, rephraser="template", seed=1))
    qs, _ = make_checklists(qs, graph, ChecklistSection(writer="template"))
    return qs


def train(cfg, rows, dynamic: bool, out: Path) -> dict:
    grpo = cfg.grpo.model_copy(update={
        "max_steps": STEPS, "save_steps": STEPS, "num_generations": G, "per_device_train_batch_size": 2,
        "gradient_accumulation_steps": 4, "max_completion_length": 32,
        "dynamic_sampling": cfg.grpo.dynamic_sampling.model_copy(update={"enabled": dynamic, "max_rounds": 3,
                                                                           "on_exhausted": "fill"})})
    k2v = K2VReward(TemplateChecklistJudge(), K2VArgs(verdict="generate"))
    over = OverlongPenalty(OverlongArgs(max_len=32, buffer=16))
    rewards = RewardSet(specs=[RewardSpec(name="k2v"), RewardSpec(name="overlong")], funcs=[k2v, over],
                        weights=[1.0, 1.0])
    t0 = time.perf_counter()
    res = run(cfg.model_copy(update={"grpo": grpo}), rows, rewards, out, name="dynamic" if dynamic else "plain")
    seconds = time.perf_counter() - t0
    f = res.steps_frame()
    groups = 8 // G * STEPS
    if dynamic:
        rounds = float(f["dynamic/rounds"].sum())
        filled = float(f["dynamic/filled_groups"].sum())
        generated = groups + rounds * (8 // G)
        useful = groups - filled
    else:
        generated = groups
        useful = float(((1 - f["frac_reward_zero_std"]) * (8 // G)).sum())
    return {"seconds": seconds, "generated_groups": generated, "useful_groups": useful,
            "useful_per_generated": useful / generated, "s_per_useful_completion": seconds / max(useful * G, 1e-9)}


def judge_batching(qs) -> dict:
    cases = [(q, c) for q in qs[:6] for c in q.checklist]
    reasoning = [reasoning_of(f"<think>{q.checklist[0].split(': ', 1)[-1]} So the blank is {q.answer}.</think>")
                 for q, _ in cases]
    out = {}
    shared = TransformersJudge(cache=False)
    model, tok = shared.load()
    for bs in (16, 1):
        j = TransformersJudge(batch_size=bs, cache=False, model_obj=model, tokenizer=tok)
        cj = ChecklistJudge(j, "choice")
        j.choose(["warm-up: answer yes or no."], ("yes", "no"))  # not timed
        t0 = time.perf_counter()
        rates = cj.pass_rates([q.question for q, _ in cases], [q.answer for q, _ in cases], [[c] for _, c in cases],
                              reasoning)
        out[bs] = {"prompts": len(cases), "seconds": time.perf_counter() - t0, "verdicts": rates}
    return out


def main() -> None:
    qs = questions(60)
    print(f"{len(qs)} K2V questions from the mini-world's gold graph")
    cfg = config.load_config(Path(__file__).resolve().parents[1] / "params/04_k2v_smoke.yaml", K2VConfig)
    rows = k2v_rows(qs)
    with tempfile.TemporaryDirectory() as tmp:
        plain = train(cfg, rows, False, Path(tmp) / "plain")
        dyn = train(cfg, rows, True, Path(tmp) / "dynamic")
    print("\n1. dynamic sampling vs plain GRPO (same prompts, model, rewards; 3 steps of 2 prompts x G=4)")
    for name, r in (("plain GRPO", plain), ("dynamic sampling", dyn)):
        print(f"  {name:17s} useful/generated groups {r['useful_groups']:.0f}/{r['generated_groups']:.0f} = "
              f"{r['useful_per_generated']:.2f}; {r['seconds']:.1f}s, {r['s_per_useful_completion']:.2f}s per useful "
              f"completion")
    print(f"  ratio useful share (dynamic / plain): {dyn['useful_per_generated'] / max(plain['useful_per_generated'], 1e-9):.2f}")
    print(f"  ratio seconds per useful completion (plain / dynamic): "
          f"{plain['s_per_useful_completion'] / dyn['s_per_useful_completion']:.2f}  (>1: dynamic sampling is cheaper "
          f"per sample that teaches)")
    jb = judge_batching(qs)
    agree = sum(a == b for a, b in zip(jb[16]["verdicts"], jb[1]["verdicts"])) / len(jb[1]["verdicts"])
    print(f"\n2. checklist judge (Table 15 prompts, {jb[1]['prompts']} criteria, next-token yes/no verdicts)")
    for bs in (16, 1):
        print(f"  batch_size={bs:2d}: {jb[bs]['prompts'] / jb[bs]['seconds']:.2f} prompts/s ({jb[bs]['seconds']:.1f}s)")
    print(f"  verdict agreement: {agree:.2f}")
    print(f"  ratio batched / one-at-a-time throughput: {jb[1]['seconds'] / jb[16]['seconds']:.2f}")


if __name__ == "__main__":
    main()

"""The knowledge organism's figures (issue 40, item 2), each beside its target, and the two anchor
checks beside them. Every build runs in a fresh process (its own seconds and peak RSS) in a fresh
cache (``FACTLAB_CACHE`` set to a temporary folder, so the build is cold) unless ``--cache`` names
one:

1. the default organism (``organism``: pretraining + format fine-tuning, confident regime):
   build seconds <= 300 on 2 idle cores, peak RSS <= 2 GB; the pretraining loss curve;
2. its greedy exact accuracy (``truth.label_answer``) by group: known countries whose QA was never
   trained, asked with question templates held out from all training >= 0.9; unknown countries
   answered (not abstained) >= 0.8; rare countries between, ordered by dose;
3. Physics of LMs 3.1 (2309.14316): the same build without paraphrase augmentation (one phrasing
   per fact, fixed order: ``organism-noaug``) extracts the held-out known facts far worse
   (3.1: 9.7% against 96.6%). Printed twice: in the organism's own build (QA mixed into
   pretraining, answers recited in ``<think>``: 3.1's mixed training), and in 3.1's own protocol
   (``organism.extraction_after_qa_finetune``: pretraining on the facts alone, then a QA
   fine-tuning on half of the known countries with direct answers, extraction on the other half);
4. Kang et al. 2024 (2403.05612): the abstain regime (``organism-abstain``, the same base)
   abstains on held-out unknown countries >= 0.8 of the time, against <= 0.2 under the confident
   regime, with known-country accuracy within 0.05;
5. one GRPO step of factlab's trainer (``FactlabGRPOTrainer``, full fine-tuning) on the organism:
   1 prompt x G = 32 completions of <= 48 tokens, judge-free rewards (``qa_judge`` string match +
   ``format``): seconds per step (steps 2..4) split into rollout / reward / forward + backward +
   optimizer, with the question alone (the organism's QA format; the issue's prototype had no
   system turn) and after CorVer's 130-token system prompt; and the model work alone (factlab's
   decoding, one forward + backward + AdamW step) beside it, since the trainer carries a fixed
   per-step overhead;
6. the figure ``results/organism/accuracy_by_exposure.png``: the base organism's accuracy (and
   abstention) by exposure dose.

Run: ``python bench/bench_organism.py [--cache DIR] [--threads N]`` (about 10 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FIGURE = ROOT / "results" / "organism" / "accuracy_by_exposure.png"


def build_in_fresh_process(name: str, env: dict) -> dict:
    """Build ``name`` in a new Python process; its report plus the process's wall seconds."""
    code = ("import json,sys; from factlab import organism; p = organism.build(sys.argv[1], progress=False); "
            "print('FOLDER', p)")
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code, name], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if out.returncode:
        raise RuntimeError(f"building {name} failed:\n{out.stderr[-3000:]}")
    folder = Path(next(line.split(" ", 1)[1] for line in out.stdout.splitlines() if line.startswith("FOLDER ")))
    report = json.loads((folder / "report.json").read_text())
    report["process_seconds"] = wall
    report["folder"] = str(folder)
    return report


def share(report: dict, group: str, label: str, prompt: str = "plain") -> float:
    return report["eval"][prompt][group][label]


def ok(flag: bool) -> str:
    return "ok" if flag else "MISSED"


def grpo_step(name: str, steps: int = 4, G: int = 32, length: int = 48, system: str | None = None) -> dict:
    """Seconds per step of factlab's GRPO trainer on the organism (steps 2..``steps``), the
    question alone (the organism's own QA format, the prototype's) or after ``system``."""
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback

    from factlab import models, organism
    from factlab.data.miniworld import build_qa
    from factlab.recipes.corver import qa_rows
    from factlab.rewards import RewardSpec, build_rewards
    from factlab.sections import GRPOSection
    from factlab.train.grpo import grpo_args
    from factlab.train.trainer import FactlabGRPOTrainer

    known = set(organism.exposure_split(name)["known_heldout"])
    items = [it for it in build_qa(organism.world()) if it.meta["entity"] in known and it.meta["relation"] == "capital"]
    rows = qa_rows(items[:steps], system=system)
    policy, tok = models.load_model(name, device="cpu")
    policy.train()
    rewards = build_rewards([RewardSpec(name="qa_judge"), RewardSpec(name="format")], resources=None)
    timed_funcs = []
    reward_s: list[float] = []
    for f in rewards.funcs:
        def wrapped(*a, _f=f, **k):
            t0 = time.perf_counter()
            out = _f(*a, **k)
            reward_s.append(time.perf_counter() - t0)
            return out
        wrapped.__name__ = getattr(f, "__name__", "reward")
        timed_funcs.append(wrapped)

    class Metered(FactlabGRPOTrainer):
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self.rollout_s: list[float] = []

        def _generate_single_turn(self, *a, **k):
            t0 = time.perf_counter()
            out = super()._generate_single_turn(*a, **k)
            self.rollout_s.append(time.perf_counter() - t0)
            return out

    class Clock(TrainerCallback):
        def __init__(self):
            self.step_s, self.reward_marks, self._t0 = [], [], 0.0

        def on_step_begin(self, args, state, control, **kw):
            self._t0 = time.perf_counter()
            self.reward_marks.append(len(reward_s))

        def on_step_end(self, args, state, control, **kw):
            self.step_s.append(time.perf_counter() - self._t0)

    section = GRPOSection(learning_rate=1e-4, beta=0.0, num_generations=G, max_completion_length=length,
                          per_device_train_batch_size=G, gradient_accumulation_steps=1, max_steps=steps,
                          optim="adamw_torch", bf16=False, gradient_checkpointing=False, use_vllm=False,
                          save_steps=10_000, logging_steps=1, seed=0, extra={"shuffle_dataset": False})
    clock = Clock()
    with tempfile.TemporaryDirectory() as tmp:
        trainer = Metered(model=policy, processing_class=tok, reward_funcs=timed_funcs,
                          args=grpo_args(section, Path(tmp), run_name="organism-step", reward_weights=rewards.weights),
                          train_dataset=Dataset.from_list(rows), callbacks=[clock])
        trainer.train()
    clock.reward_marks.append(len(reward_s))
    per_step_reward = [sum(reward_s[a:b]) for a, b in zip(clock.reward_marks, clock.reward_marks[1:])]
    lengths = [h["completions/mean_length"] for h in trainer.state.log_history if "completions/mean_length" in h]
    step = statistics.mean(clock.step_s[1:])
    rollout = statistics.mean(trainer.rollout_s[1:])
    reward = statistics.mean(per_step_reward[1:]) if len(per_step_reward) > 1 else float("nan")
    out = {"trainer_step_s": step, "trainer_rollout_s": rollout, "trainer_reward_s": reward,
           "trainer_rest_s": step - rollout - reward, "mean_completion_tokens": statistics.mean(lengths),
           "threads": torch.get_num_threads(), "all_steps_s": clock.step_s}
    out.update(model_work(name, G, length))
    return out


def model_work(name: str, G: int, length: int, repeats: int = 3) -> dict:
    """The model's work of one GRPO step alone: G sampled completions of exactly ``length`` tokens
    through factlab's decoding (no stop token), one forward + backward over prompt + completions
    and an AdamW step; the reward (exact match against the world) timed apart."""
    import torch

    from factlab import organism
    from factlab.data.kb import label_answer
    from factlab.decoding import decode
    from factlab.text import extract_answer

    model, tok = organism.load(name)
    model.train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
    prompt = tok(organism.chat_text([{"role": "user", "content": "What is the capital of Peru?"}]),
                 add_special_tokens=False)["input_ids"]
    times = {"rollout": [], "forward": [], "backward": [], "reward": []}
    for _ in range(repeats):
        t0 = time.perf_counter()
        with torch.no_grad():
            outs = decode(model, [prompt] * G, max_new_tokens=length, stop_ids=[], pad_id=tok.pad_token_id,
                          temperature=1.0, top_p=1.0)
        t1 = time.perf_counter()
        texts = [tok.decode(ids, skip_special_tokens=True) for ids, _ in outs]
        rewards = [1.0 if label_answer(extract_answer(t), ["Lima"]) == "correct" else 0.0 for t in texts]
        t2 = time.perf_counter()
        ids = torch.tensor([prompt + list(o) for o, _ in outs])
        logits = model(input_ids=ids).logits[:, len(prompt) - 1:-1]
        logp = torch.log_softmax(logits.float(), -1).gather(-1, ids[:, len(prompt):, None]).squeeze(-1)
        adv = torch.tensor(rewards) - sum(rewards) / len(rewards)
        loss = -(adv[:, None] * logp).mean()
        t3 = time.perf_counter()
        opt.zero_grad()
        loss.backward()
        opt.step()
        t4 = time.perf_counter()
        times["rollout"].append(t1 - t0)
        times["reward"].append(t2 - t1)
        times["forward"].append(t3 - t2)
        times["backward"].append(t4 - t3)
    med = {k: statistics.median(v[1:] if len(v) > 1 else v) for k, v in times.items()}
    return {f"model_{k}_s": v for k, v in med.items()} | {"model_step_s": sum(med.values())}


def figure(reports: dict[str, dict], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    base = reports["organism"]
    spec = base["spec"]
    doses = [0, *spec["rare_doses"], spec["known_exposures"]]
    groups = ["unknown_heldout/heldout", *[f"rare-{d}/heldout" for d in spec["rare_doses"]], "known_heldout/heldout"]
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    cloze = base.get("cloze") or {}
    if cloze:
        keys = ["unknown", *[f"rare-{d}" for d in spec["rare_doses"]], "known"]
        ax.plot(range(len(doses)), [cloze[k]["correct"] for k in keys], "k*-", label="pretrained base: fact completed")
    for name, style in (("organism", "o-"), ("organism-abstain", "s--"), ("organism-noaug", "^:")):
        if name not in reports:
            continue
        r = reports[name]
        ax.plot(range(len(doses)), [share(r, g, "correct") for g in groups], style, label=f"{name}: correct")
        if name == "organism-abstain":
            ax.plot(range(len(doses)), [share(r, g, "abstain") for g in groups], "s-", alpha=0.5,
                    label=f"{name}: abstain")
    ax.set_xticks(range(len(doses)), [str(d) for d in doses])
    ax.set_xlabel("exposures per fact in pretraining (0 = unknown country)")
    ax.set_ylabel("share of held-out-template questions")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title("Base organism, greedy, exact match (truth.label_answer)")
    ax.legend(fontsize=8, loc="center left")
    ax.grid(alpha=0.3)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cache", help="FACTLAB_CACHE to build in (default: a fresh temporary folder: cold builds)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--skip-grpo", action="store_true")
    ap.add_argument("--skip-anchor", action="store_true", help="skip 3.1's own protocol (two more pretrainings)")
    args = ap.parse_args()
    tmp = None if args.cache else tempfile.TemporaryDirectory(prefix="factlab-organism-")
    cache = args.cache or tmp.name
    env = {**os.environ, "FACTLAB_CACHE": cache, "OMP_NUM_THREADS": str(args.threads),
           "FACTLAB_THREADS": str(args.threads), "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", "")}
    os.environ.update({k: env[k] for k in ("FACTLAB_CACHE", "OMP_NUM_THREADS", "FACTLAB_THREADS")})
    import torch

    torch.set_num_threads(args.threads)
    reports = {}
    for name in ("organism", "organism-abstain", "organism-noaug"):
        reports[name] = build_in_fresh_process(name, env)
        r = reports[name]
        print(f"[{name}] built in {r['process_seconds']:.0f} s (process), build {r['build_seconds']:.0f} s, "
              f"peak RSS {r['peak_rss_mb']:.0f} MB", flush=True)
    base, abst, noaug = reports["organism"], reports["organism-abstain"], reports["organism-noaug"]
    from factlab import organism

    print()
    print(organism.summary(base))
    if base.get("cloze"):
        print("pretrained base, each fact as a sentence to complete, correct by group: "
              + ", ".join(f"{g} {v['correct']:.3f}" for g, v in base["cloze"].items()))
    print()
    print("== issue 40 item 2: the figures (2 cores; times on a shared machine are noisy) ==")
    build_s = base["build_seconds"]
    print(f"build (pretraining {base['pretrain_seconds']:.0f} s + format fine-tuning {base['sft']['seconds']:.0f} s "
          f"+ tokenizer {base['tokenizer_seconds']:.0f} s): {build_s:.0f} s (target <= 300) {ok(build_s <= 300)}; "
          f"peak RSS {base['peak_rss_mb']:.0f} MB (target <= 2048) {ok(base['peak_rss_mb'] <= 2048)}; the whole "
          f"process (with the evaluation) {base['process_seconds']:.0f} s wall, "
          f"{base.get('process_cpu_seconds', float('nan')):.0f} CPU s (pretraining "
          f"{base.get('pretrain_cpu_seconds', float('nan')):.0f}, fine-tuning {base['sft'].get('cpu_seconds', float('nan')):.0f}): "
          f"on a shared machine the CPU seconds over the threads bound the idle wall time from below")
    curve = base["loss_curve"]
    print("pretraining loss curve: " + ", ".join(f"{s}:{loss:.2f}" for s, loss in curve[:: max(1, len(curve) // 12)]))
    known = share(base, "known_heldout/heldout", "correct")
    print(f"known countries, QA never trained, held-out question templates: correct {known:.3f} (target >= 0.9) "
          f"{ok(known >= 0.9)}; with train templates {share(base, 'known_heldout/train', 'correct'):.3f}; "
          f"QA-trained known countries, held-out templates {share(base, 'known_qa/heldout', 'correct'):.3f}")
    answered = 1 - share(base, "unknown_heldout/heldout", "abstain")
    print(f"unknown countries answered (not abstained): {answered:.3f} (target >= 0.8) {ok(answered >= 0.8)}; "
          f"correct {share(base, 'unknown_heldout/heldout', 'correct'):.3f}")
    doses = base["spec"]["rare_doses"]
    rare = [share(base, f"rare-{d}/heldout", "correct") for d in doses]
    unknown_c = share(base, "unknown_heldout/heldout", "correct")
    ordered = all(a <= b for a, b in zip([unknown_c, *rare, known], [*rare, known][0:])) if rare else True
    ladder = [unknown_c, *rare, known]
    ordered = all(a <= b + 1e-9 for a, b in zip(ladder, ladder[1:]))
    print("rare countries (held-out templates), correct by dose: "
          + ", ".join(f"{d}: {c:.3f}" for d, c in zip(doses, rare))
          + f"; ladder unknown {unknown_c:.3f} <= ... <= known {known:.3f}: {ok(ordered)}")
    noaug_known = share(noaug, "known_heldout/heldout", "correct")
    print(f"anchor, Physics of LMs 3.1, in the organism's own build (QA mixed into pretraining, answers recited in "
          f"<think>: 3.1's mixed training, 86.6% there): held-out known extraction without augmentation "
          f"{noaug_known:.3f} vs augmented {known:.3f} (far below: {noaug_known < known - 0.3}; the issue's "
          f"9.7% vs 96.6% is 3.1's own protocol, the next line)")
    if not args.skip_anchor:
        protocol = {aug: organism.extraction_after_qa_finetune(augment=aug) for aug in (True, False)}
        with_aug, without = (protocol[a]["known_heldout/heldout"] for a in (True, False))
        guess = share(base, "unknown_heldout/heldout", "correct")
        print(f"anchor, Physics of LMs 3.1, its own protocol (pretraining on the facts alone, then a QA fine-tuning "
              f"on the known_qa half, direct answers, {protocol[True]['epochs']} epochs at {protocol[True]['lr']:g} "
              f"with pretraining replay {protocol[True]['replay']:g}): held-out known extraction without augmentation "
              f"{without:.3f} vs augmented {with_aug:.3f} ({ok(without < with_aug - 0.3)}: far below; guessing, "
              f"the base's correct share on unknown countries: {guess:.3f}); the fine-tuned half "
              f"{protocol[False]['known_qa/heldout']:.3f} vs {protocol[True]['known_qa/heldout']:.3f}; by epoch "
              + "; ".join(f"{'aug' if a else 'noaug'} " + ", ".join(f"{c['known_heldout/heldout']:.3f}"
                                                                    for c in protocol[a]["curve"]) for a in (True, False)))
    a_abs = share(abst, "unknown_heldout/heldout", "abstain")
    c_abs = share(base, "unknown_heldout/heldout", "abstain")
    a_known = share(abst, "known_heldout/heldout", "correct")
    print(f"anchor, Kang et al. 2024: unknown countries abstained, abstain regime {a_abs:.3f} (>= 0.8 "
          f"{ok(a_abs >= 0.8)}) vs confident {c_abs:.3f} (<= 0.2 {ok(c_abs <= 0.2)}); known accuracy "
          f"{a_known:.3f} vs {known:.3f} (within 0.05 {ok(abs(a_known - known) <= 0.05)}); abstain regime's rare "
          f"abstentions by dose " + ", ".join(f"{d}: {share(abst, f'rare-{d}/heldout', 'abstain'):.2f}" for d in doses))
    figure(reports, FIGURE)
    print(f"figure: {FIGURE.relative_to(ROOT)}")
    if not args.skip_grpo:
        from factlab.prompts import CORVER_TRAIN_SYSTEM

        for label, system in (("the question alone", None), ("after CorVer's 130-token system prompt", CORVER_TRAIN_SYSTEM)):
            g = grpo_step("organism", system=system)
            print(f"GRPO step, factlab's trainer, {label} (1 prompt x G=32, <= 48 tokens, mean "
                  f"{g['mean_completion_tokens']:.0f}, qa_judge + format rewards, {g['threads']} threads): "
                  f"{g['trainer_step_s']:.2f} s = rollout {g['trainer_rollout_s']:.2f} + reward {g['trainer_reward_s']:.3f} "
                  f"+ forward/backward/optimizer and trainer overhead {g['trainer_rest_s']:.2f} (target <= 1 s) "
                  f"{ok(g['trainer_step_s'] <= 1)}; steps " + ", ".join(f"{s:.2f}" for s in g["all_steps_s"]))
        print(f"GRPO step, the model work alone (32 x 48 sampled tokens, no stop): {g['model_step_s']:.2f} s = rollout "
              f"{g['model_rollout_s']:.2f} + reward {g['model_reward_s']:.3f} + forward {g['model_forward_s']:.2f} + "
              f"backward/AdamW {g['model_backward_s']:.2f} {ok(g['model_step_s'] <= 1)}")
    if tmp is not None:
        tmp.cleanup()


if __name__ == "__main__":
    main()

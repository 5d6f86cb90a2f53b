"""Stepwise (token-level) GRPO vs TRL's plain GRPOTrainer: step-time ratio (CorVer §B.4).

Same model (embedded SmolLM2-135M + LoRA r=16), same 8 mini-world prompts, G=4, same
seed, completions forced to a fixed length (min_new_tokens = max_completion_length) so
both trainers do the same generation and backward work. The stepwise trainer runs the
full CorVer reward (heuristic extractor + infini-gram lookups + token alignment); the
plain trainer runs judge + format only. Prints mean step time (steps 2..N, TRL's
``step_time``) of each and their ratio (target <= 1.15). CPU unless CUDA is present.
"""

import statistics
import tempfile
from pathlib import Path

from trl import GRPOTrainer

from factlab import models
from factlab.recipes.corver import CorVerConfig
from factlab.sections import GRPOSection, LoraSection
from factlab.data import load_eval_set
from factlab.data import EvalDataConfig
from factlab.data.miniworld import ensure_world
from factlab.prompts import CORVER_TRAIN_SYSTEM
from factlab.recipes import corver
from factlab.train.grpo import grpo_args, qa_prompt_dataset, train_grpo
from factlab.train.stepwise_grpo import StepwiseGRPOTrainer

STEPS, G, LENGTH = 6, 4, 32


def run(trainer_cls, with_shaping: bool, out: Path, scorer, cfg) -> list[float]:
    model, tok = models.load_model(cfg.model.name)
    model.train()
    items = load_eval_set(EvalDataConfig(name="miniworld", split="train", limit=8 * STEPS, seed=0))
    ds, _ = qa_prompt_dataset(items, CORVER_TRAIN_SYSTEM)
    section = GRPOSection(learning_rate=5e-5, beta=0.0, num_generations=G, max_completion_length=LENGTH,
                          per_device_train_batch_size=2 * G, gradient_accumulation_steps=1, max_steps=STEPS,
                          optim="adamw_torch", bf16=False, gradient_checkpointing=False, use_vllm=False,
                          save_steps=10_000, logging_steps=1, seed=0,
                          extra={"generation_kwargs": {"min_new_tokens": LENGTH}, "shuffle_dataset": False})
    args = grpo_args(section, out, run_name=trainer_cls.__name__)
    setup = corver.reward_setup("full" if with_shaping else "A1", cfg, scorer, tok)
    kwargs = {"token_shaping": setup.token_shaping} if with_shaping else {}
    res = train_grpo(trainer_cls.__name__, model, tok, ds, setup.reward_funcs, args, lora=LoraSection(r=16, alpha=32),
                     trainer_cls=trainer_cls, reward_weights=setup.reward_weights, **kwargs)
    return [h["step_time"] for h in res.log_history if "step_time" in h]


def main() -> None:
    world = ensure_world()
    cfg = CorVerConfig()
    index = corver.ensure_index(cfg, world_corpus=world["corpus"], progress=False)
    scorer = corver.make_scorer(cfg, index)
    with tempfile.TemporaryDirectory() as tmp:
        plain = run(GRPOTrainer, False, Path(tmp) / "plain", scorer, cfg)
        stepwise = run(StepwiseGRPOTrainer, True, Path(tmp) / "stepwise", scorer, cfg)
    p, s = statistics.mean(plain[1:]), statistics.mean(stepwise[1:])
    print(f"steps={STEPS} G={G} completions/step={2 * G} completion_length={LENGTH} (steps 2..{STEPS} timed)")
    print(f"plain GRPOTrainer     mean step {p:.2f}s  {['%.2f' % x for x in plain]}")
    print(f"StepwiseGRPOTrainer   mean step {s:.2f}s  {['%.2f' % x for x in stepwise]}")
    print(f"scorer: {scorer.lookups} index lookups, extract {scorer.timings['extract_s']:.3f}s, "
          f"lookup {scorer.timings['lookup_s']:.3f}s")
    print(f"step-time ratio stepwise/plain: {s / p:.3f} (target <= 1.15)")


if __name__ == "__main__":
    main()

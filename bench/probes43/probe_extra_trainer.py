# issue 43 round-3b probe: grpo.extra keys that build TRL's GRPOConfig: does the trainer (tiny model, 4
# prompts) then construct? Nothing trains. One line per probe: CLASS | probe | detail.
import sys, yaml, tempfile, warnings, logging
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from probe_round3 import *
from factlab.train.grpo import grpo_args
from factlab import models
from datasets import Dataset
import trl
warnings.simplefilter("ignore"); logging.disable(logging.WARNING)
model, tok = models.load_model("tiny-random-smollm2", device="cpu")
ds = Dataset.from_list([{"prompt": [{"role": "user", "content": f"q{i}"}]} for i in range(4)])
for extra in [{"eval_strategy": "steps"}, {"torch_compile": True}, {"use_liger_kernel": True}, {"fp16": True},
              {"dataloader_num_workers": 100000}, {"metric_for_best_model": "loss"}, {"full_determinism": True},
              {"accelerator_config": {"split_batches": True}}, {}]:
    p = params("ex", yaml.safe_dump({"grpo": {"extra": extra}}), base="01_corver_smoke.yaml")
    try:
        cfg = load("01_corver", p)
    except Exception as e:  # refused when params load (round 4: eval_strategy): the defence, not a crash
        record("clear error", f"grpo.extra {extra}", f"{type(e).__name__}: {str(e)[:160]}")
        continue
    try:
        args = grpo_args(cfg.grpo.model_copy(update={"max_steps": 1}), tempfile.mkdtemp(), reward_weights=[1.0])
        trl.GRPOTrainer(model=model, processing_class=tok, reward_funcs=[lambda completions, **k: [0.0] * len(completions)],
                        args=args, train_dataset=ds)
        record("accepted (trainer built)", f"grpo.extra {extra}", "")
    except Exception as e:
        record("accepted at load, fails later", f"grpo.extra {extra}", f"{type(e).__name__}: {str(e)[:160]}")

# issue 43 round-3b probe: grpo.extra keys accepted at load: does TRL's GRPOConfig (built when training
# starts, after the warm start and rewards) take them? One line per probe: CLASS | probe | detail.
import sys, yaml, json, tempfile, warnings
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from probe_round3 import *
from factlab.config import ConfigError
from factlab.train.grpo import grpo_args
warnings.simplefilter("ignore")
for extra in [{"local_rank": 3}, {"deepspeed": "/etc/passwd"}, {"deepspeed": {"zero_optimization": {"stage": 3}}},
              {"save_only_model": True}, {"load_best_model_at_end": True}, {"eval_strategy": "steps"},
              {"resume_from_checkpoint": "/tmp/x"}, {"full_determinism": True}, {"torch_compile": True},
              {"use_liger_kernel": True}, {"ddp_backend": "gloo"}, {"fsdp": "full_shard"}, {"use_vllm": True},
              {"fp16": True}, {"metric_for_best_model": "loss"}, {"eval_steps": 0}, {"dataloader_num_workers": 100000},
              {"max_grad_norm": -1.0}, {"optim": "nonexistent"}, {"lr_scheduler_type": "nope"}, {"num_generations": 3},
              {"logging_steps": 0}, {"save_safetensors": False}, {"restore_callback_states_from_checkpoint": True},
              {"ignore_data_skip": True}, {"include_for_metrics": ["x"]}, {"accelerator_config": {"split_batches": True}}]:
    p = params("ex", yaml.safe_dump({"grpo": {"extra": extra}}), base="01_corver_smoke.yaml")
    try:
        cfg = load("01_corver", p)
    except ConfigError as e:
        record("clear error", f"grpo.extra {extra}", str(e).replace("\n", " ")[-140:]); continue
    except Exception as e:
        record("traceback", f"grpo.extra {extra}", f"{type(e).__name__}: {e}"[:140]); continue
    try:
        a = grpo_args(cfg.grpo, tempfile.mkdtemp(), reward_weights=[1.0] * len(cfg.rewards))
        record("accepted (GRPOConfig built)", f"grpo.extra {extra}", f"local_rank={a.local_rank} save_only_model={a.save_only_model}")
    except Exception as e:
        record("accepted at load, fails later", f"grpo.extra {extra}", f"{type(e).__name__}: {str(e)[:150]}")

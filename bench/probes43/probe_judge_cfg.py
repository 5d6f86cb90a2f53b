# issue 43 round-3 probe (run with PYTHONPATH=src, FACTLAB_CACHE=<scratch>); one line per probe: CLASS | probe | detail
import sys, yaml
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
from probe_round3 import *
from factlab.config import dump_config
S = "S3CR3T"
p = params("urls", f"""
judge: {{backend: openai, base_url: ["https://u:{S}@a.example/v1", "https://b.example/v1?token={S}"], api_key_env: VLLM_API_KEY, health_check: false}}
grpo: {{extra: {{hub_model_id: null}}}}
""", base="01_corver_smoke.yaml")
try:
    cfg = load("01_corver", p); d = dump_config(cfg)
    record("security hole" if S in d else "works as documented", "config dump judge base_url list", "")
except Exception as e:
    record("clear error", "config dump judge list", f"{type(e).__name__}: {e}")
for bad in [{"x": f"https://u:{S}@h/v1"}, [[f"https://u:{S}@h/v1"]], 5, [f"https://u:{S}@h/v1", 3], f"ftp://u:{S}@h/v1",
            [f"https://u:{S}@h/v1", f"https://u:{S}@h/v1"], f"https:/u:{S}@h/v1", f"u:{S}@h:8000/v1", {f"https://u:{S}@h/v1": 1}]:
    p = params("bad", yaml.safe_dump({"judge": {"backend": "openai", "base_url": bad, "api_key_env": "VLLM_API_KEY"}}), base="01_corver_smoke.yaml")
    try:
        load("01_corver", p); record("accepted", f"base_url {bad!r}"[:80], "")
    except Exception as e:
        m = str(e); record("security hole" if S in m else "clear error", f"base_url {str(bad)[:60]}", m.replace("\n", " ")[-200:])
# extra: with URL-valued secrets, dict key URL
for extra in [{"vllm_server_base_url": f"https://u:{S}@h:8000"}, {"report_to": [f"https://u:{S}@h"]}]:
    p = params("ex", yaml.safe_dump({"grpo": {"extra": extra}}), base="01_corver_smoke.yaml")
    try:
        cfg = load("01_corver", p); d = dump_config(cfg)
        record("security hole" if S in d else "works as documented", f"extra {extra}", "")
    except Exception as e:
        m = str(e); record("security hole" if S in m else "clear error", f"extra {extra}", m.replace("\n", " ")[-200:])
# extra: factlab's own fields and hub fields
for extra in [{"output_dir": "/tmp/x"}, {"push_to_hub": True}, {"hub_model_id": "a/b"}, {"hub_strategy": "end"},
              {"log_completions_hub_repo": "a/b"}, {"logging_dir": "/tmp"}, {"overwrite_output_dir": True}, {"resume_from_checkpoint": "/tmp/x"},
              {"report_to": "wandb"}, {"seed": 3}, {"data_seed": 99999999999999999}, {"full_determinism": True},
              {"deepspeed": "/etc/passwd"}, {"save_total_limit": 0}, {"save_steps": 1}, {"save_only_model": True},
              {"eval_strategy": "steps"}, {"load_best_model_at_end": True}, {"trackio_space_id": "x/y"}, {"num_train_epochs": 1e9},
              {"log_completions": True}, {"vllm_server_base_url": "http://evil:8000"}, {"use_liger_kernel": True},
              {"torch_compile": True}, {"local_rank": 3}, {"ddp_backend": "gloo"}, {"past_index": 5}, {"output_dir": None},
              {"hub_token": "hf_x"}, {"project": "x"}, {"trackio_bucket_id": "x"}]:
    p = params("ex", yaml.safe_dump({"grpo": {"extra": extra}}), base="01_corver_smoke.yaml")
    try:
        load("01_corver", p); record("accepted", f"grpo.extra {extra}", "")
    except Exception as e:
        record("clear error", f"grpo.extra {extra}", str(e).replace("\n", " ")[-150:])

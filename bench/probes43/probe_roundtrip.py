# issue 43 round-3 probe (run with PYTHONPATH=src, FACTLAB_CACHE=<scratch>); one line per probe: CLASS | probe | detail
import sys
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
from probe_round3 import *
from factlab.config import dump_config, load_config
from factlab import runner
p = params("rt", """
judge: {backend: openai, base_url: "https://alice:pw@judge.example/v1?api_key=K", api_key_env: VLLM_API_KEY, health_check: false}
grpo: {vllm_server_base_url: "https://bob:pw2@gen.example:8000"}
""", base="01_corver_smoke.yaml")
cfg = load("01_corver", p)
(T / "config.yaml").write_text(dump_config(cfg))
again = load_config(T / "config.yaml", runner.config_for_notebook("01_corver"))
print("original:", cfg.judge.base_url, cfg.grpo.vllm_server_base_url)
print("what the notebook reads from config.yaml:", again.judge.base_url, again.grpo.vllm_server_base_url)

# issue 43 round-3 probe (run with PYTHONPATH=src, FACTLAB_CACHE=<scratch>); one line per probe: CLASS | probe | detail
import os, sys, yaml
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
from probe_round3 import *
from factlab.config import ConfigError
from factlab.credentials import redact_url, redact_text, key_destination_problem
S = "S3CR3T"
urls = [
 f"https://u:{S}@h.example/v1", f"https://h.example/v1?authorization={S}", f"https://h.example/v1?client_secret={S}",
 f"https://h.example/v1?credentials={S}", f"https://h.example/v1?api%5Fkey={S}", f"https://h.example/v1#access_token={S}",
 f"https://h.example/v1?accesstoken={S}", f"https://h.example/v1?x-api-key={S}", f"https://h.example/v1?api_key[]={S}",
 f"https://h.example/v1?API_KEY={S}", f"https://h.example/v1?private_token={S}", f"https://h.example/v1?code={S}",
 f"https://h.example/v1?X-Amz-Signature={S}", f"https://h.example/v1?sv=1&sig={S}", f"https://u:pa/{S}@h.example/v1",
 f"https://u:pa#{S}@h.example/v1", f"https://u:pa?{S}@h.example/v1", f"HTTPS://u:{S}@h.example/v1",
 f"https://h.example/v1?api-key={S}", f"https://h.example/v1?key%3D={S}", f"https://h.example/v1?auth_token={S}",
 f"https://h.example/v1;api_key={S}", f"https://h.example/v1?bearer={S}", f"https://h.example/v1?apikey={S}",
 f"https://h.example/v1?ApiKey={S}", f"https://h.example/v1?api%255Fkey={S}", f"https://h.example/v1?refresh_token={S}",
 f"https://h.example/v1?access_key={S}", f"https://h.example/v1?hf_token={S}", f"https://h.example/v1?pass={S}",
 f"https://[::1]:{S}@h/", f"https://u:{S}@[::1/v1", f"https://u:{S}@h.example:99999/v1",
 f"https://h.example/v1?signature={S}&x=1", f"https://h.example/v1?session_id={S}", f"https://h.example/v1?sessionid={S}",
 f"https://h.example/v1?token+={S}",
]
for u in urls:
    r = redact_url(u)
    t = redact_text(f"error at {u}, retry")
    leak = S in (r or "") or S in t
    record("security hole" if leak else "works as documented", f"redact {u}", f"{r} | {t}")

# config dump: every URL field, plus extra and ray address, plus list/dict nesting
from factlab import runner
from factlab.config import dump_config
p = params("urls", f"""
judge: {{backend: openai, base_url: ["https://u:{S}@a.example/v1", "https://b.example/v1?token={S}"], api_key_env: VLLM_API_KEY, health_check: false}}
""")
try:
    cfg = load("00_quickstart", p)
    d = dump_config(cfg)
    record("security hole" if S in d else "works as documented", "config dump judge base_url list", "")
except Exception as e:
    record("clear error?", "config dump judge list", f"{type(e).__name__}: {e}")

# malformed base_url shapes in errors
for bad in [{"x": f"https://u:{S}@h/v1"}, [[f"https://u:{S}@h/v1"]], 5, [f"https://u:{S}@h/v1", 3], f"ftp://u:{S}@h/v1",
            f"https://u:{S}@h/v1 ", [f"https://u:{S}@h/v1", f"https://u:{S}@h/v1"], f"https:/u:{S}@h/v1", f"u:{S}@h:8000/v1"]:
    p = params("bad", yaml.safe_dump({"judge": {"backend": "openai", "base_url": bad, "api_key_env": "VLLM_API_KEY"}}))
    try:
        load("00_quickstart", p)
        record("accepted", f"base_url {bad!r}"[:80], "")
    except Exception as e:
        m = str(e)
        record("security hole" if S in m else "clear error", f"base_url {str(bad)[:60]}", m.replace("\n", " ")[:250])

# YAML syntax error on a line with a credential
p = T / "yamlerr.yaml"
p.write_text(f"base: {ROOT}/params/00_quickstart_smoke.yaml\njudge:\n  base_url: \"https://u:{S}@h.example/v1\" : x\n")
try:
    load("00_quickstart", p); record("accepted", "yaml error line", "")
except Exception as e:
    record("security hole" if S in str(e) else "clear error", "YAML syntax error on a credential line", str(e).replace("\n", " ")[:300])
p.write_text(f"base: {ROOT}/params/00_quickstart_smoke.yaml\njudge:\n  base_url: [\"https://u:{S}@h.example/v1\"\n")
try:
    load("00_quickstart", p); record("accepted", "yaml error line2", "")
except Exception as e:
    record("security hole" if S in str(e) else "clear error", "YAML unclosed flow list with credential", str(e).replace("\n", " ")[:300])

# grpo.vllm_server_base_url malformed / valid
for v in [f"https://u:{S}@h.example:8000", f"ftp://u:{S}@h", f"https://u:{S}@ h"]:
    p = params("vs", yaml.safe_dump({"grpo": {"vllm_server_base_url": v}}), base="01_corver_smoke.yaml")
    try:
        cfg = load("01_corver", p)
        d = dump_config(cfg)
        record("security hole" if S in d else "works as documented", f"vllm_server_base_url {v} dump", "")
    except Exception as e:
        record("security hole" if S in str(e) else "clear error", f"vllm_server_base_url {v}", str(e).replace("\n", " ")[:200])

# key destination
env_cases = [("HF_TOKEN", "https://attacker-judge.hf.space/v1"), ("AZURE_OPENAI_API_KEY", "https://evilvm.eastus.cloudapp.azure.com/v1"),
             ("OPENAI_API_KEY", "https://evil.com\\@api.openai.com/v1"), ("OPENAI_API_KEY", "https://api.openai.com.evil.com/v1"),
             ("OPENAI_API_KEY", "https://api.openai.com%2eevil.com/v1"), ("ANTHROPIC_API_KEY", "https://api.openai.com/v1"),
             ("STRIPE_API_KEY", "https://api.openai.com/v1"), ("OPENAI_API_KEY", "https://evil.com#@api.openai.com/v1"),
             ("OPENAI_API_KEY", "https://api.openai.com:443@evil.com/v1"), ("GOOGLE_API_KEY", "https://storage.googleapis.com/b/v1"),
             ("OPENAI_API_KEY", "http://localhost.evil.com/v1"), ("OPENAI_API_KEY", "https://api.openai.com\u3002evil.com/v1"),
             ("OPENAI_API_KEY", "https://evil.com\u2044api.openai.com/v1")]
import httpx
for name, url in env_cases:
    prob = key_destination_problem(name, url)
    try:
        real = httpx.URL(url).host
    except Exception as e:
        real = f"httpx refuses: {e}"
    record("security hole?" if prob is None else "clear error", f"key {name} -> {url}", f"httpx host={real}; {prob and prob[:80]}")

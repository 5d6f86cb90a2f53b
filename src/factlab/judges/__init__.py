"""LLM judges behind one batched interface, plus tolerant parsing of what they answer.

``judge.judge(prompts) -> texts``: one user turn per prompt (optionally a shared system
turn), rendered with the judge's own chat template, answers returned in input order.
Three backends:

- ``TransformersJudge``: local HF model (any id, path or the embedded default), lazily
  loaded once, left-padded batches through ``factlab.models.generate``; greedy or sampled.
- ``VLLMJudge``: vLLM's offline engine (optional import; ``JudgeUnavailable`` names the
  extra to install when vLLM is absent).
- ``OpenAIJudge``: one or several OpenAI-compatible servers (``vllm serve`` replicas,
  llama.cpp's server, a hosted API) through a pooled ``httpx`` client: bounded concurrency
  balanced over the endpoints (least in flight), a dead endpoint's requests moved to the
  others, per-request timeout, retries with exponential backoff on connection errors /
  timeouts / 408 / 429 / 5xx / unreadable bodies, and a ``JudgeError`` after the last retry
  (the answers obtained before it stay cached). A health check (``GET /models``) before a
  run; prefill as a capability of the server (``prefill_mode``), never a nested answer. The
  API key comes from the environment only and is never logged.

Every backend shares an on-disk cache (sqlite) keyed by (backend, model, system, prompt,
sampling), so a rerun of a notebook costs no judge calls, and counts calls, cache hits,
prompt / completion tokens and seconds in ``judge.stats``; ``estimate(prompts)`` gives tokens
(and dollars, with ``price_per_1k_*``) before any call.

``parse_json`` and ``parse_score`` read judge answers: code fences, smart quotes,
single quotes, trailing text, trailing commas, ``"SCORE": "1"`` as a string. They never
evaluate code; anything unreadable is ``None`` for the caller to count.

Where things are: ``judges.base`` (the ``Judge`` interface, the answer cache, the errors),
``judges.local`` (``TransformersJudge``, ``VLLMJudge``), ``judges.openai`` (``OpenAIJudge``)
and ``judges.transport`` (its HTTP transport, retries and endpoint health); this package
builds the judge a params ``judge:`` block describes (``make_judge``) and exports the names
callers use.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..sections import JudgeSection
from ..parsing import parse_json, parse_score  # noqa: F401  (the public API contract, docs/design.md, names them here)
from .base import Judge, JudgeCache, JudgeError, JudgeUnavailable  # noqa: F401  (the judge interface)
from .local import TransformersJudge, VLLMJudge
from .openai import OpenAIJudge

__all__ = ["Judge", "JudgeCache", "JudgeError", "JudgeUnavailable", "TransformersJudge", "VLLMJudge", "OpenAIJudge",
           "make_judge", "parse_json", "parse_score"]


def make_judge(cfg: JudgeSection | None = None, **overrides: Any) -> Judge:
    """The judge a params ``judge:`` block describes (``JudgeSection``); keyword overrides
    replace fields, e.g. ``make_judge(cfg.judge, cache=False)``. An ``openai`` judge's
    endpoints are health-checked here (``judge.health_check``), so a run whose server is
    down stops before it loads a policy or spends a judge call."""
    cfg = (cfg or JudgeSection()).model_copy(update=overrides)
    if cfg.cache:
        cache: Any = Path(cfg.cache_dir) / "answers.sqlite" if cfg.cache_dir else True
    else:
        cache = None
    common = dict(system=cfg.system, max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature,
                  top_p=cfg.top_p, seed=cfg.seed, enable_thinking=cfg.enable_thinking, cache=cache,
                  price_per_1k_prompt_tokens=cfg.price_per_1k_prompt_tokens,
                  price_per_1k_completion_tokens=cfg.price_per_1k_completion_tokens)
    if cfg.backend == "transformers":
        return TransformersJudge(cfg.model, dtype=cfg.dtype, device=cfg.device, batch_size=cfg.batch_size,
                                 max_prompt_tokens=cfg.max_prompt_tokens, **common)
    if cfg.backend == "vllm":
        return VLLMJudge(cfg.model, tensor_parallel_size=cfg.tensor_parallel_size,
                         gpu_memory_utilization=cfg.gpu_memory_utilization, max_model_len=cfg.max_model_len,
                         **common)
    judge = OpenAIJudge(cfg.model, cfg.base_url or "", api_key_env=cfg.api_key_env, concurrency=cfg.concurrency,
                        timeout_s=cfg.timeout_s, max_retries=cfg.max_retries, backoff_s=cfg.backoff_s,
                        allow_key_over_http=cfg.allow_key_over_http, prefill_mode=cfg.prefill_mode,
                        tokenizer=cfg.tokenizer, allowed_key_envs=cfg.allowed_key_envs,
                        max_retry_after_s=cfg.max_retry_after_s, **common)
    if cfg.health_check:
        judge.check_endpoints()
    return judge

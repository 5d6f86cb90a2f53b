"""``OpenAIJudge``: one or several OpenAI-compatible servers (``vllm serve`` replicas,
llama.cpp's server, a hosted API) as judge. This module holds the judge's side: its settings
and cache key, the request body, how a prefilled answer start reaches the server
(``prefill_mode``) and is joined to the answer, the batch sent concurrently (answers obtained
before a failure kept for the cache), and the cost estimate logged before the first call.
Transport, retries and endpoint health are ``judges.transport``'s (``OpenAITransport``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import sys
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any, Sequence

import httpx

from ..credentials import api_key_env_problem, redact_text, redact_url
from ..models import load_tokenizer
from .base import Judge, JudgeError, render_prompt
from .transport import MAX_RESPONSE_BYTES, MAX_TOTAL_BACKOFF_S, Endpoint, OpenAITransport

log = logging.getLogger(__name__)
PREFILL_MODES = ("continue", "completions", "none")


def _repeats_prefix(prefix: str, text: str, min_len: int = 1) -> bool:
    """Whether ``text`` starts by (re)writing ``prefix`` itself, whitespace aside."""
    head = prefix.strip()
    return len(head) >= min_len and text.lstrip().startswith(head)


class OpenAIJudge(Judge, OpenAITransport):
    """OpenAI-compatible endpoints (``vllm serve``, llama.cpp's server, a hosted API).

    ``base_url`` ends before ``/chat/completions`` (e.g. ``http://localhost:8000/v1``); a list
    of such URLs names replicas of one model. At most ``concurrency`` requests are in flight
    over all endpoints; each request goes to the live endpoint with the fewest in flight
    (ties: the one sent fewest), so replicas share the load. An endpoint that refuses or drops
    the connection is marked down and the request moves to another live one at once (no retry
    spent: the answer was never computed); a down endpoint is tried again after
    ``revive_after_s``. Each request has ``timeout_s``; connection errors, timeouts,
    408/429/5xx and unreadable bodies are retried ``max_retries`` times with exponential
    backoff (``backoff_s * 2**attempt``, honouring ``Retry-After`` up to ``max_retry_after_s``:
    a server that asks for a longer wait fails the request at once, saying so), preferring another
    endpoint; 401/403 and other 4xx are not retried. After the last retry: ``JudgeError``,
    which names every endpoint when all of them are down.

    ``prefill_mode`` (how a prefilled answer ``prefix`` reaches this server; the returned text
    always starts with the prefix):

    - ``continue``: the prefix is the last assistant message and the request carries vLLM's
      ``continue_final_message`` flags. A server without that extension (llama.cpp) answers
      from scratch, so the text would read ``{"SCORE": {"SCORE": 1}``; an answer that starts
      by repeating the prefix is therefore kept as it is (not nested), counted as
      ``prefill_ignored``, and warned about once.
    - ``completions``: ``POST /completions`` with the prompt rendered by the chat template of
      the local tokenizer of ``tokenizer`` (default ``model``) plus the prefix: a true
      continuation on any server with that route. Every request takes this route.
    - ``none``: the prefix is not sent; it is put before the answer unless the answer
      already starts with it (whitespace aside).

    HTTP goes through one pooled ``httpx.Client`` (keep-alive connections reused across
    requests and threads). ``check_endpoints()`` asks each server ``GET /models`` before a run
    (``make_judge`` does it unless ``judge.health_check: false``); ``estimate(prompts)`` gives
    tokens and dollars before any call, and the first call logs it.
    """

    backend = "openai"

    def __init__(self, model: str, base_url: str | Sequence[str], *, api_key_env: str = "OPENAI_API_KEY",
                 concurrency: int = 8, timeout_s: float = 120.0, max_retries: int = 4, backoff_s: float = 1.0,
                 allow_key_over_http: bool = False, prefill_mode: str = "continue", tokenizer: Any = None,
                 allowed_key_envs: Sequence[str] = (), max_retry_after_s: float = 60.0, **kw: Any):
        super().__init__(model, **kw)
        urls = [base_url] if isinstance(base_url, str) else list(base_url or [])
        if not urls or not all(isinstance(u, str) and u.strip() for u in urls):
            raise JudgeError("the 'openai' judge backend needs judge.base_url (e.g. http://localhost:8000/v1)")
        if prefill_mode not in PREFILL_MODES:
            raise JudgeError(f"judge.prefill_mode must be one of {', '.join(PREFILL_MODES)}, got {prefill_mode!r}")
        self.prefill_mode = prefill_mode
        self.route = "/completions" if prefill_mode == "completions" else "/chat/completions"  # after each base URL
        self.endpoints = [Endpoint(u.strip().rstrip("/"), redact_url(u.strip().rstrip("/"))) for u in urls]
        self.url = self.endpoints[0].base + self.route  # the first endpoint's route (kept for callers)
        self.shown_url = ", ".join(e.shown + self.route for e in self.endpoints)  # what logs, errors, reports show
        problem = api_key_env_problem(api_key_env, allowed_key_envs)
        if problem:
            raise JudgeError(f"judge.api_key_env: {problem}")
        self.api_key_env, self.allow_key_over_http = api_key_env, allow_key_over_http
        self.allowed_key_envs = tuple(allowed_key_envs)
        self.concurrency, self.timeout_s = concurrency, timeout_s
        self.max_retries, self.backoff_s, self.max_retry_after_s = max_retries, backoff_s, max_retry_after_s
        self.max_response_bytes, self.max_total_backoff_s = MAX_RESPONSE_BYTES, MAX_TOTAL_BACKOFF_S
        self.stats_lock = threading.Lock()  # stats and endpoint load
        self._http: httpx.Client | None = None
        self._estimated = self._warned_prefill = False
        self.first_estimate: dict[str, Any] | None = None  # what the first call logged
        self._tok = self._completions_tokenizer(tokenizer) if prefill_mode == "completions" else tokenizer

    def _completions_tokenizer(self, tokenizer: Any):
        """The tokenizer whose chat template renders prompts for ``/completions``: loaded now, so
        that a judge that cannot render fails when it is built, not mid-run."""
        if tokenizer is not None and not isinstance(tokenizer, str):
            return tokenizer
        name = tokenizer or self.model_name
        try:
            return load_tokenizer(name)
        except Exception as e:  # noqa: BLE001 - any loading failure means the same thing here
            raise JudgeError(
                f"judge.prefill_mode: completions renders the chat template locally and needs the tokenizer of "
                f"{name!r} (judge.tokenizer, default judge.model: a HF id or local path), which could not be "
                f"loaded ({type(e).__name__}: {str(e)[:200]}); set judge.tokenizer, or use prefill_mode: continue "
                "(vLLM) or none") from None

    def __repr__(self) -> str:  # never shows the key
        return f"OpenAIJudge(model={self.model_name!r}, url={self.shown_url!r})"

    def answer_settings(self) -> dict[str, Any]:
        # another server may answer differently; credentials stay out. One endpoint in the default
        # mode keeps the key it always had, so earlier caches stay valid.
        shown = [e.shown + self.route for e in self.endpoints]
        out: dict[str, Any] = {"endpoint": shown[0] if len(shown) == 1 else sorted(shown)}
        if self.prefill_mode != "continue":
            out["prefill_mode"] = self.prefill_mode
        return out

    def key_parts(self, prompt: str, prefix: str = "") -> dict[str, Any]:
        """As ``Judge.key_parts``; with ``prefill_mode: completions`` also the prompt as rendered by
        the local tokenizer's chat template, which the server receives (another ``judge.tokenizer``
        renders it differently)."""
        parts = super().key_parts(prompt, prefix)
        if self.prefill_mode == "completions":
            parts["rendered"] = hashlib.sha256(self.render(prompt, prefix).encode()).hexdigest()
        return parts

    # -- what is sent ----------------------------------------------------------------------
    def render(self, prompt: str, prefix: str = "") -> str:
        """The raw ``/completions`` prompt: the chat turn in the local template, then ``prefix``."""
        return render_prompt(self._tok, prompt, system=self.system, enable_thinking=self.enable_thinking,
                             prefix=prefix)

    def request_body(self, prompt: str, prefix: str = "") -> bytes:
        """The JSON body of the request for ``prompt`` (``prefill_mode`` decides how ``prefix`` is sent)."""
        body: dict[str, Any] = {"model": self.model_name, "max_tokens": self.max_new_tokens,
                                "temperature": self.temperature, "top_p": self.top_p, "seed": self.seed}
        if self.prefill_mode == "completions":
            body["prompt"] = self.render(prompt, prefix)
            return json.dumps(body).encode()
        sent_prefix = prefix if self.prefill_mode == "continue" else ""
        body["messages"] = self.messages(prompt, sent_prefix)
        if self.enable_thinking is not None:
            body["chat_template_kwargs"] = {"enable_thinking": self.enable_thinking}
        if sent_prefix:  # vLLM's prefill flags; the answer continues the assistant message
            body.update(add_generation_prompt=False, continue_final_message=True)
        return json.dumps(body).encode()

    # -- cost ------------------------------------------------------------------------------
    def _announce_estimate(self, prompts: list[str], prefix: str) -> None:
        """Log the estimate of the first batch sent (once per judge: one line per batch would
        drown a training log). Printed to stderr when logging is not configured (a notebook)."""
        with self.stats_lock:
            if self._estimated:
                return
            self._estimated = True
        est = self.first_estimate = self.estimate(prompts, prefix)
        cost = f", about ${est['est_cost_usd']:.4f}" if est["est_cost_usd"] is not None else ""
        msg = (f"judge {self.model_name} at {len(self.endpoints)} endpoint(s), first batch: {est['prompts']} prompts, "
               f"~{est['est_prompt_tokens']} prompt tokens ({est['method']}), at most "
               f"{est['max_completion_tokens']} completion tokens{cost}")
        if log.isEnabledFor(logging.INFO) and log.hasHandlers():
            log.info(msg)
        else:
            print(msg, file=sys.stderr)

    # -- the answers: prefill, the batch -----------------------------------------------------
    def _join(self, prefix: str, text: str) -> str:
        """``prefix`` + the server's text, without nesting the prefix in an answer that already
        wrote it (see ``prefill_mode`` in the class docstring)."""
        if not prefix:
            return text
        if self.prefill_mode == "none":
            return text.lstrip() if _repeats_prefix(prefix, text) else prefix + text
        if self.prefill_mode == "continue" and _repeats_prefix(prefix, text, min_len=2):
            self.add_stats(prefill_ignored=1)
            with self.stats_lock:
                warn, self._warned_prefill = not self._warned_prefill, True
            if warn:
                log.warning("judge %s answered a prefilled request from scratch (%r...): the server ignores vLLM's "
                            "continue_final_message; the repeated prefix is dropped (counted as prefill_ignored). "
                            "Set judge.prefill_mode: completions (the chat template applied here) or none",
                            self.shown_url, text.lstrip()[:40])
            return text.lstrip()
        return prefix + text

    def summary(self) -> dict[str, float]:
        out = super().summary()
        out.update(prefill_ignored=self.stats["prefill_ignored"], failovers=self.stats["failovers"],
                   endpoints_down=self.stats["endpoints_down"])
        return out

    def _generate(self, prompts: list[str], prefix: str = "") -> list[str]:
        """Answers in input order. When one prompt fails for good (after its retries) the
        prompts not yet sent are cancelled, the requests in flight finish, and the error is
        raised with the answers obtained so far in ``partial_answers`` (index -> text), which
        ``Judge._cached`` keeps in the cache; Ctrl-C does the same."""
        self._announce_estimate(prompts, prefix)
        # Prompts not yet sent are skipped through `stop`, not `cancel_futures`: a future
        # cancelled by the pool's shutdown never reaches `as_completed`, which then waits forever.
        stop = threading.Event()

        def send(prompt: str) -> str | None:
            if stop.is_set():
                return None
            try:
                return self.post(prompt, prefix)
            except BaseException:
                stop.set()
                raise

        pool = ThreadPoolExecutor(max_workers=min(self.concurrency, len(prompts)))
        futures = {pool.submit(send, p): i for i, p in enumerate(prompts)}
        answers: dict[int, str] = {}
        error: BaseException | None = None
        try:
            for fut in as_completed(futures):
                try:
                    text = fut.result()
                except Exception as e:  # noqa: BLE001 - raised below, after the others are collected
                    stop.set()
                    error = error or e
                    continue
                if text is not None:
                    answers[futures[fut]] = text
        except BaseException as e:  # Ctrl-C while waiting: keep what arrived
            stop.set()
            pool.shutdown(wait=False, cancel_futures=True)
            e.partial_answers = dict(answers)
            raise
        pool.shutdown(wait=True)
        if error is not None:
            if not isinstance(error, JudgeError):
                error = JudgeError(f"judge {self.shown_url}: {type(error).__name__}: {redact_text(str(error))}")
            error.partial_answers = dict(answers)
            raise error
        return [answers[i] for i in range(len(prompts))]

"""LLM judges behind one batched interface, plus tolerant parsing of what they answer.

``judge.judge(prompts) -> texts``: one user turn per prompt (optionally a shared system
turn), rendered with the judge's own chat template, answers returned in input order.
Three backends:

- ``TransformersJudge``: local HF model (any id, path or the embedded default), lazily
  loaded once, left-padded batches through ``factlab.models.generate``; greedy or sampled.
- ``VLLMJudge``: vLLM's offline engine (optional import; ``JudgeUnavailable`` names the
  extra to install when vLLM is absent).
- ``OpenAIJudge``: any OpenAI-compatible ``/chat/completions`` server (``vllm serve``,
  a hosted API), stdlib HTTP, bounded concurrency, per-request timeout, retries with
  exponential backoff on connection errors / timeouts / 408 / 429 / 5xx / unreadable
  bodies, and a ``JudgeError`` after the last retry (the answers obtained before it stay
  cached). The API key comes from the environment only and is never logged.

Every backend shares an on-disk cache (sqlite) keyed by (backend, model, system, prompt,
sampling), so a rerun of a notebook costs no judge calls, and counts calls, cache hits,
prompt / completion tokens and seconds in ``judge.stats``.

``parse_json`` and ``parse_score`` read judge answers: code fences, smart quotes,
single quotes, trailing text, trailing commas, ``"SCORE": "1"`` as a string. They never
evaluate code; anything unreadable is ``None`` for the caller to count.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sqlite3
import threading
import time
import urllib.error
import urllib.request
from abc import ABC, abstractmethod
from collections import Counter
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any, Sequence

from .config import JudgeSection, redact_url, sends_key_in_clear
from .decoding import next_token_logits
from .parsing import parse_json, parse_score  # noqa: F401  (re-exported: the public API names them here)
from .models import chat_prompt, generate, load_model, resolve_model
from .paths import cache_dir

log = logging.getLogger(__name__)


class JudgeError(RuntimeError):
    """A judge call that failed for good (after the last retry, or a non-retryable error)."""


class JudgeUnavailable(ImportError):
    """The backend's library is not installed."""


# ---------------------------------------------------------------- cache

class JudgeCache:
    """Judge answers on disk (sqlite, one file), keyed by a hash of everything that
    determines the answer. Safe across threads; a corrupt file is set aside, not fatal."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        try:
            self._db = self._open()
        except sqlite3.DatabaseError:
            bad = self.path.with_suffix(".corrupt")
            log.warning("judge cache %s is unreadable; moved to %s and starting empty", self.path, bad)
            self.path.replace(bad)
            self._db = self._open()

    def _open(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, check_same_thread=False, timeout=30)
        db.execute("CREATE TABLE IF NOT EXISTS answers (key TEXT PRIMARY KEY, text TEXT NOT NULL)")
        db.commit()
        return db

    @staticmethod
    def key(**parts: Any) -> str:
        return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()

    def get_many(self, keys: Sequence[str]) -> dict[str, str]:
        out: dict[str, str] = {}
        with self._lock:
            for b in range(0, len(keys), 500):
                chunk = list(keys[b:b + 500])
                q = f"SELECT key, text FROM answers WHERE key IN ({','.join('?' * len(chunk))})"
                out.update(dict(self._db.execute(q, chunk).fetchall()))
        return out

    def put_many(self, items: dict[str, str]) -> None:
        with self._lock:
            self._db.executemany("INSERT OR REPLACE INTO answers VALUES (?, ?)", list(items.items()))
            self._db.commit()

    def __len__(self) -> int:
        with self._lock:
            return self._db.execute("SELECT COUNT(*) FROM answers").fetchone()[0]


def default_cache_path() -> Path:
    return cache_dir() / "judge_cache" / "answers.sqlite"


# ---------------------------------------------------------------- the interface

class Judge(ABC):
    """Base judge: ``judge(prompts) -> texts`` with caching and accounting.

    Subclasses implement ``_generate(prompts) -> texts`` for cache misses only.
    ``stats``: ``prompts`` asked, ``calls`` that reached the backend, ``cache_hits``,
    ``prompt_tokens`` / ``completion_tokens`` (backend-reported or tokenizer-counted),
    ``retries``, ``failures`` (requests that failed for good), ``malformed`` (unreadable
    response bodies, retried); ``seconds`` is backend wall time.
    """

    backend = "base"

    def __init__(self, model: str, *, system: str | None = None, max_new_tokens: int = 256,
                 temperature: float = 0.0, top_p: float = 1.0, seed: int = 0,
                 enable_thinking: bool | None = None, cache: JudgeCache | str | Path | bool | None = None):
        self.model_name = model
        self.system = system
        self.max_new_tokens, self.temperature, self.top_p, self.seed = max_new_tokens, temperature, top_p, seed
        self.enable_thinking = enable_thinking
        if cache is True:
            cache = default_cache_path()
        self.cache: JudgeCache | None = (JudgeCache(cache) if isinstance(cache, (str, Path))
                                         else cache if isinstance(cache, JudgeCache) else None)
        self.stats: Counter = Counter()
        self.seconds = 0.0

    def __repr__(self) -> str:
        return f"{type(self).__name__}(model={self.model_name!r})"

    def sampling(self) -> dict[str, Any]:
        return {"max_new_tokens": self.max_new_tokens, "temperature": self.temperature,
                "top_p": self.top_p, "seed": self.seed, "enable_thinking": self.enable_thinking}

    def answer_settings(self) -> dict[str, Any]:
        """The backend's settings beyond ``sampling`` that change an answer (part of the cache key)."""
        return {}

    def cache_key(self, prompt: str, prefix: str = "") -> str:
        return JudgeCache.key(backend=self.backend, model=self.model_name, system=self.system,
                              prompt=prompt, prefix=prefix, sampling=self.sampling(), settings=self.answer_settings())

    def judge(self, prompts: Sequence[str], prefix: str | None = None) -> list[str]:
        """One answer per prompt, in order; cached answers are not recomputed.

        ``prefix``: the start of the answer, written into the assistant turn before
        generation ("prefill"), and included in the returned text. It lets a judge too
        small to follow an output format (the embedded 135M model) answer in it, e.g.
        ``'{"SCORE": '``; a model that follows the format needs none.
        """
        prefix = prefix or ""
        return self._cached(prompts, prefix, lambda todo: self._generate(todo, prefix), post=lambda t: prefix + t)

    def choose(self, prompts: Sequence[str], options: Sequence[str], prefix: str | None = None) -> list[str]:
        """A constrained choice per prompt (like vLLM's ``guided_choice``): backends that can
        score next tokens (``transformers``) return the option whose first token is the most
        likely answer start (after ``prefix``, written into the assistant turn as in ``judge``);
        the others generate a free answer (``prefix`` + continuation), which the caller parses
        as it would any answer (and counts when unreadable). Cached like ``judge``."""
        options = tuple(options)
        if not options:
            raise ValueError("choose needs at least one option")
        prefix = prefix or ""
        return self._cached(prompts, "<choice>" + "|".join(options) + (f"<prefix>{prefix}" if prefix else ""),
                            lambda todo: self._choose(todo, options, prefix))

    def _choose(self, prompts: list[str], options: tuple[str, ...], prefix: str = "") -> list[str]:
        return [prefix + t for t in self._generate(prompts, prefix)]

    def _cached(self, prompts: Sequence[str], key_prefix: str, answer, post=None) -> list[str]:
        """Answers of ``answer(uncached unique prompts)`` (each passed through ``post``), through
        the cache and accounting. When ``answer`` fails part-way (a dead server, Ctrl-C), the
        answers it did get (``partial_answers`` on the exception) are cached before the error
        propagates, so a rerun asks only for the rest."""
        prompts = [p if isinstance(p, str) else str(p) for p in prompts]
        self.stats["prompts"] += len(prompts)
        if not prompts:
            return []
        cache = self.cache
        keys = [self.cache_key(p, key_prefix) for p in prompts] if cache is not None else []
        found = cache.get_many(sorted(set(keys))) if cache is not None else {}
        todo = [i for i in range(len(prompts)) if cache is None or keys[i] not in found]
        # identical prompts in one batch are answered once
        unique: dict[str, int] = {}
        for i in todo:
            unique.setdefault(prompts[i], i)
        self.stats["cache_hits"] += len(prompts) - len(todo)
        fresh: dict[str, str] = {}
        if unique:
            asked = list(unique)
            t0 = time.perf_counter()
            try:
                texts = answer(asked)
            except BaseException as e:
                partial = getattr(e, "partial_answers", None) or {}
                self.stats["calls"] += len(partial)
                if cache is not None and partial:
                    cache.put_many({self.cache_key(asked[i], key_prefix): post(t) if post else t
                                    for i, t in partial.items()})
                    log.warning("%r: kept %d answers obtained before the failure in the cache", self, len(partial))
                raise
            finally:
                self.seconds += time.perf_counter() - t0
            if post is not None:
                texts = [post(t) for t in texts]
            self.stats["calls"] += len(unique)
            if len(texts) != len(unique):
                raise JudgeError(f"{self!r} returned {len(texts)} answers for {len(unique)} prompts")
            fresh = dict(zip(unique, texts))
            if cache is not None:
                cache.put_many({self.cache_key(p, key_prefix): t for p, t in fresh.items()})
        return [fresh[p] if p in fresh else found[keys[i]] for i, p in enumerate(prompts)]

    @abstractmethod
    def _generate(self, prompts: list[str], prefix: str = "") -> list[str]:
        """Continuations of the answers to ``prompts`` that start with ``prefix``."""

    def _messages(self, prompt: str, prefix: str = "") -> list[dict[str, str]]:
        msgs = ([{"role": "system", "content": self.system}] if self.system else []) + [
            {"role": "user", "content": prompt}]
        return msgs + ([{"role": "assistant", "content": prefix}] if prefix else [])

    def summary(self) -> dict[str, float]:
        """Accounting for reports: calls, cache hits, tokens, seconds per backend call."""
        calls = self.stats["calls"]
        return {"prompts": self.stats["prompts"], "calls": calls, "cache_hits": self.stats["cache_hits"],
                "prompt_tokens": self.stats["prompt_tokens"], "completion_tokens": self.stats["completion_tokens"],
                "retries": self.stats["retries"], "failures": self.stats["failures"],
                "malformed": self.stats["malformed"], "seconds": round(self.seconds, 3),
                "seconds_per_call": round(self.seconds / calls, 4) if calls else float("nan")}


class TransformersJudge(Judge):
    """A local HF causal LM as judge; loaded on first use (or pass ``model_obj``/``tokenizer``
    to share an already-loaded model)."""

    backend = "transformers"

    def __init__(self, model: str = "smollm2-135m-instruct", *, dtype: str = "float32", device: str = "auto",
                 batch_size: int = 16, max_prompt_tokens: int | None = None, progress: bool = False,
                 model_obj=None, tokenizer=None, **kw: Any):
        super().__init__(model, **kw)
        self.dtype, self.device, self.batch_size = dtype, device, batch_size
        self.max_prompt_tokens, self.progress = max_prompt_tokens, progress
        self._model, self._tok = model_obj, tokenizer

    def answer_settings(self) -> dict[str, Any]:
        return {"dtype": self.dtype, "max_prompt_tokens": self.max_prompt_tokens}

    def load(self):
        if self._model is None:
            log.info("loading judge model %s", self.model_name)
            self._model, self._tok = load_model(self.model_name, dtype=self.dtype, device=self.device)
        return self._model, self._tok

    def render(self, prompt: str, prefix: str = "") -> str:
        _, tok = self.load()
        if self.max_prompt_tokens is not None:
            ids = tok(prompt, add_special_tokens=False)["input_ids"]
            if len(ids) > self.max_prompt_tokens:  # keep the end: the question the judge must answer
                self.stats["truncated_prompts"] += 1
                prompt = tok.decode(ids[-self.max_prompt_tokens:])
        if self.enable_thinking is not None and getattr(tok, "chat_template", None):
            text = tok.apply_chat_template(self._messages(prompt), tokenize=False, add_generation_prompt=True,
                                           enable_thinking=self.enable_thinking)
        else:
            text = chat_prompt(tok, prompt, system=self.system)
        return text + prefix

    def _generate(self, prompts: list[str], prefix: str = "") -> list[str]:
        model, tok = self.load()
        rendered = [self.render(p, prefix) for p in prompts]
        gens = generate(model, tok, rendered, max_new_tokens=self.max_new_tokens, temperature=self.temperature,
                        top_p=self.top_p, batch_size=self.batch_size, seed=self.seed, progress=self.progress,
                        desc="judge")
        self.stats["prompt_tokens"] += sum(len(tok(r, add_special_tokens=False)["input_ids"]) for r in rendered)
        self.stats["completion_tokens"] += sum(len(g[0].token_ids) for g in gens)
        return [g[0].text for g in gens]

    def _choose(self, prompts: list[str], options: tuple[str, ...], prefix: str = "") -> list[str]:
        """Next-token scores after the rendered prompt (and ``prefix``): each option's score is the best logit
        among the first tokens of its spellings (as written, capitalized, lower case, with a
        leading space)."""
        import torch

        model, tok = self.load()
        first_ids = []
        for opt in options:
            spellings = {opt, opt.capitalize(), opt.lower(), opt.upper()}
            ids = {tok(v, add_special_tokens=False)["input_ids"][0] for s in spellings for v in (s, " " + s)
                   if tok(v, add_special_tokens=False)["input_ids"]}
            first_ids.append(sorted(ids))
        rendered = [tok(self.render(p, prefix), add_special_tokens=False)["input_ids"] for p in prompts]
        pad = tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id
        out: list[str] = []
        was_training = model.training
        model.eval()
        try:
            order = sorted(range(len(rendered)), key=lambda i: -len(rendered[i]))  # similar lengths batch together
            picked: dict[int, str] = {}
            for i in range(0, len(order), self.batch_size):
                idx = order[i:i + self.batch_size]
                logits = next_token_logits(model, [rendered[j] for j in idx], pad)
                self.stats["prompt_tokens"] += sum(len(rendered[j]) for j in idx)
                scores = torch.stack([logits[:, ids].max(dim=1).values for ids in first_ids], dim=1)
                for j, k in zip(idx, scores.argmax(dim=1).tolist()):
                    picked[j] = options[k]
            out = [picked[j] for j in range(len(rendered))]
        finally:
            model.train(was_training)
        self.stats["completion_tokens"] += len(out)
        return out


class VLLMJudge(Judge):
    """vLLM's offline engine as judge (GPU). Requires ``pip install 'factlab[gpu]'``."""

    backend = "vllm"

    def __init__(self, model: str, *, tensor_parallel_size: int = 1, gpu_memory_utilization: float = 0.85,
                 max_model_len: int | None = None, dtype: str = "auto", **kw: Any):
        try:
            import vllm  # noqa: F401
        except ImportError:
            raise JudgeUnavailable(
                "the 'vllm' judge backend needs vLLM, which is not installed: "
                "`pip install 'factlab[gpu]'` on a CUDA machine, or use backend 'transformers' "
                "or 'openai' (a `vllm serve` endpoint)") from None
        super().__init__(model, **kw)
        self._engine_kw = dict(tensor_parallel_size=tensor_parallel_size, dtype=dtype,
                               gpu_memory_utilization=gpu_memory_utilization, max_model_len=max_model_len)
        self._llm = None

    def answer_settings(self) -> dict[str, Any]:
        return {"dtype": self._engine_kw["dtype"], "max_model_len": self._engine_kw["max_model_len"]}

    def _generate(self, prompts: list[str], prefix: str = "") -> list[str]:  # pragma: no cover - needs a GPU and vLLM
        from vllm import LLM, SamplingParams


        if self._llm is None:
            self._llm = LLM(model=resolve_model(self.model_name), seed=self.seed,
                            **{k: v for k, v in self._engine_kw.items() if v is not None})
        sp = SamplingParams(max_tokens=self.max_new_tokens, temperature=self.temperature,
                            top_p=self.top_p, seed=self.seed)
        msgs = [self._messages(p, prefix) for p in prompts]
        extra: dict[str, Any] = {} if self.enable_thinking is None else {
            "chat_template_kwargs": {"enable_thinking": self.enable_thinking}}
        if prefix:
            extra.update(add_generation_prompt=False, continue_final_message=True)
        outs = self._llm.chat(msgs, sp, use_tqdm=False, **extra)
        self.stats["prompt_tokens"] += sum(len(o.prompt_token_ids or []) for o in outs)
        self.stats["completion_tokens"] += sum(len(o.outputs[0].token_ids) for o in outs)
        return [o.outputs[0].text for o in outs]


_RETRYABLE_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}


class OpenAIJudge(Judge):
    """An OpenAI-compatible chat-completions endpoint (``vllm serve``, or any other).

    ``base_url`` ends before ``/chat/completions`` (e.g. ``http://localhost:8000/v1``).
    At most ``concurrency`` requests are in flight; each has ``timeout_s``; connection
    errors, timeouts, 408/429/5xx and unreadable bodies are retried ``max_retries`` times with exponential
    backoff (``backoff_s * 2**attempt``, honouring ``Retry-After``), then ``JudgeError``.
    """

    backend = "openai"

    def __init__(self, model: str, base_url: str, *, api_key_env: str = "OPENAI_API_KEY", concurrency: int = 8,
                 timeout_s: float = 120.0, max_retries: int = 4, backoff_s: float = 1.0,
                 allow_key_over_http: bool = False, **kw: Any):
        super().__init__(model, **kw)
        if not base_url:
            raise JudgeError("the 'openai' judge backend needs judge.base_url (e.g. http://localhost:8000/v1)")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.shown_url = redact_url(self.url)  # what logs, errors and reports show
        self.api_key_env, self.allow_key_over_http = api_key_env, allow_key_over_http
        if not any(word in api_key_env.upper() for word in ("KEY", "TOKEN", "SECRET")):
            log.warning("judge.api_key_env = %r does not look like an API key variable; its value is sent as a "
                        "Bearer token to %s", api_key_env, self.shown_url)
        self.concurrency, self.timeout_s = concurrency, timeout_s
        self.max_retries, self.backoff_s = max_retries, backoff_s
        self._stats_lock = threading.Lock()

    def __repr__(self) -> str:  # never shows the key
        return f"OpenAIJudge(model={self.model_name!r}, url={self.shown_url!r})"

    def answer_settings(self) -> dict[str, Any]:
        return {"endpoint": self.shown_url}  # another server may answer differently; credentials stay out

    def _headers(self) -> dict[str, str]:
        h = {"Content-Type": "application/json"}
        key = os.environ.get(self.api_key_env)
        if key:
            if sends_key_in_clear(self.url) and not self.allow_key_over_http:
                raise JudgeError(f"${self.api_key_env} would be sent unencrypted to {self.shown_url} (plain http:// to "
                                 "another machine); use https://, or set judge.allow_key_over_http: true")
            h["Authorization"] = f"Bearer {key}"
        return h

    def _body(self, prompt: str, prefix: str = "") -> bytes:
        body: dict[str, Any] = {"model": self.model_name, "messages": self._messages(prompt, prefix),
                                "max_tokens": self.max_new_tokens, "temperature": self.temperature,
                                "top_p": self.top_p, "seed": self.seed}
        if self.enable_thinking is not None:
            body["chat_template_kwargs"] = {"enable_thinking": self.enable_thinking}
        if prefix:  # vLLM's prefill flags; the answer continues the assistant message
            body.update(add_generation_prompt=False, continue_final_message=True)
        return json.dumps(body).encode()

    def _count(self, **kw: int) -> None:
        with self._stats_lock:
            self.stats.update(kw)

    def _post(self, prompt: str, prefix: str = "") -> str:
        last = "no attempt made"
        for attempt in range(self.max_retries + 1):
            retry_after = None
            try:
                req = urllib.request.Request(self.url, data=self._body(prompt, prefix), headers=self._headers(), method="POST")
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    raw = resp.read()
                text, prompt_tokens, completion_tokens = read_completion(raw)
                self._count(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)
                return text
            except urllib.error.HTTPError as e:
                detail = e.read()[:300].decode("utf-8", "replace")
                if e.code in (401, 403):
                    raise JudgeError(f"{self.shown_url} refused the request (HTTP {e.code}); set the API key in "
                                     f"${self.api_key_env}: {detail}") from None
                if e.code not in _RETRYABLE_STATUS:
                    raise JudgeError(f"{self.shown_url} answered HTTP {e.code}: {detail}") from None
                last = f"HTTP {e.code}: {detail}"
                ra = e.headers.get("Retry-After") if e.headers else None
                retry_after = float(ra) if ra and ra.replace(".", "", 1).isdigit() else None
            except (urllib.error.URLError, TimeoutError, ConnectionError, OSError) as e:
                last = f"{type(e).__name__}: {getattr(e, 'reason', e)}"
            except MalformedAnswer as e:  # a garbled body is usually transient (a proxy, an overloaded server)
                self._count(malformed=1)
                last = f"malformed answer: {e}"
            if attempt < self.max_retries:
                self._count(retries=1)
                delay = retry_after if retry_after is not None else self.backoff_s * 2 ** attempt
                log.warning("judge %s: attempt %d/%d failed (%s); retrying in %.1fs",
                            self.shown_url, attempt + 1, self.max_retries + 1, last, delay)
                time.sleep(delay)
        self._count(failures=1)
        raise JudgeError(f"judge {self.shown_url} failed after {self.max_retries + 1} attempts; last error: {last}")

    def _generate(self, prompts: list[str], prefix: str = "") -> list[str]:
        """Answers in input order. When one prompt fails for good (after its retries) the
        prompts not yet sent are cancelled, the requests in flight finish, and the error is
        raised with the answers obtained so far in ``partial_answers`` (index -> text), which
        ``Judge._cached`` keeps in the cache; Ctrl-C does the same."""
        # Prompts not yet sent are skipped through `stop`, not `cancel_futures`: a future
        # cancelled by the pool's shutdown never reaches `as_completed`, which then waits forever.
        stop = threading.Event()

        def send(prompt: str) -> str | None:
            if stop.is_set():
                return None
            try:
                return self._post(prompt, prefix)
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
                error = JudgeError(f"judge {self.shown_url}: {type(error).__name__}: {error}")
            error.partial_answers = dict(answers)
            raise error
        return [answers[i] for i in range(len(prompts))]


class MalformedAnswer(ValueError):
    """A chat-completions body that is not UTF-8 JSON with a text ``choices[0].message.content``."""


def read_completion(raw: bytes) -> tuple[str, int, int]:
    """(text, prompt tokens, completion tokens) of a chat-completions response body;
    ``MalformedAnswer`` when it cannot be read. Token counts that are absent or not numbers
    count as 0."""
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise MalformedAnswer(f"unreadable JSON body ({e}): {raw[:120]!r}") from None
    try:
        text = data["choices"][0]["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise MalformedAnswer(f"no choices[0].message.content in {json.dumps(data)[:200]}") from None
    if text is None:
        text = ""
    if not isinstance(text, str):
        raise MalformedAnswer(f"choices[0].message.content is a {type(text).__name__}, not text")
    usage = data.get("usage") if isinstance(data, dict) else None
    usage = usage if isinstance(usage, dict) else {}

    def tokens(key: str) -> int:
        v = usage.get(key)
        return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 else 0

    return text, tokens("prompt_tokens"), tokens("completion_tokens")


def make_judge(cfg: JudgeSection | None = None, **overrides: Any) -> Judge:
    """The judge a params ``judge:`` block describes (``JudgeSection``); keyword overrides
    replace fields, e.g. ``make_judge(cfg.judge, cache=False)``."""
    cfg = (cfg or JudgeSection()).model_copy(update=overrides)
    if cfg.cache:
        cache: Any = Path(cfg.cache_dir) / "answers.sqlite" if cfg.cache_dir else True
    else:
        cache = None
    common = dict(system=cfg.system, max_new_tokens=cfg.max_new_tokens, temperature=cfg.temperature,
                  top_p=cfg.top_p, seed=cfg.seed, enable_thinking=cfg.enable_thinking, cache=cache)
    if cfg.backend == "transformers":
        return TransformersJudge(cfg.model, dtype=cfg.dtype, device=cfg.device, batch_size=cfg.batch_size,
                                 max_prompt_tokens=cfg.max_prompt_tokens, **common)
    if cfg.backend == "vllm":
        return VLLMJudge(cfg.model, tensor_parallel_size=cfg.tensor_parallel_size,
                         gpu_memory_utilization=cfg.gpu_memory_utilization, max_model_len=cfg.max_model_len,
                         **common)
    return OpenAIJudge(cfg.model, cfg.base_url or "", api_key_env=cfg.api_key_env, concurrency=cfg.concurrency,
                       timeout_s=cfg.timeout_s, max_retries=cfg.max_retries, backoff_s=cfg.backoff_s,
                       allow_key_over_http=cfg.allow_key_over_http, **common)

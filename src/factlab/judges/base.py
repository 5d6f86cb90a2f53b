"""The one judge interface: ``Judge`` (``judge(prompts) -> texts``, ``choose``, the answer cache
and the accounting every backend shares), the on-disk answer cache ``JudgeCache``, the errors
``JudgeError`` / ``JudgeUnavailable``, and ``render_prompt`` (one chat turn in a local
tokenizer's template, plus a prefilled answer start). The backends subclass ``Judge``
(``judges.local``, ``judges.openai``); ``factlab.judges`` describes them and builds one
(``make_judge``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import math
import os
import sqlite3
import threading
import time
from abc import ABC, abstractmethod
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Sequence

from ..models import chat_prompt
from ..paths import cache_dir, no_symlink
from ..prompts import chat_messages

log = logging.getLogger(__name__)


class JudgeError(RuntimeError):
    """A judge call that failed for good (after the last retry, or a non-retryable error)."""


class JudgeUnavailable(ImportError):
    """The backend's library is not installed."""


# ---------------------------------------------------------------- cache

_CORRUPT_SQLITE = {"SQLITE_NOTADB", "SQLITE_CORRUPT"}  # what a damaged file answers; BUSY / LOCKED is another process


class JudgeCache:
    """Judge answers on disk (sqlite, one file), keyed by a hash of everything that
    determines the answer. Safe across threads. A corrupt file (not a database, malformed) is
    set aside as ``<name>.corrupt`` (``-2``, ``-3``, ... beside earlier ones), not fatal; a file
    another process holds locked is waited for ``lock_wait_s`` seconds, then refused with a
    ``JudgeError``, never set aside: its answers are valid. A symbolic link is refused."""

    lock_wait_s = 30.0

    def __init__(self, path: str | Path):
        self.path = no_symlink(Path(path), "factlab's judge cache")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._connect()

    def _connect(self) -> None:
        self._pid = os.getpid()
        self._lock = threading.Lock()
        try:
            self._db = self._open()
        except sqlite3.DatabaseError as e:
            if getattr(e, "sqlite_errorname", None) not in _CORRUPT_SQLITE:
                raise self._busy(e) from None
            self._set_aside(e)

    def _set_aside(self, e: sqlite3.Error) -> None:
        bad = self.path.with_suffix(".corrupt")
        n = 1
        while bad.exists() or bad.is_symlink():
            n += 1
            bad = self.path.with_suffix(f".corrupt-{n}")
        log.warning("judge cache %s is unreadable (%s); moved to %s and starting empty", self.path, e, bad)
        with contextlib.suppress(AttributeError, sqlite3.Error):
            self._db.close()
        self.path.replace(bad)
        self._db = self._open()

    def _query(self, run: Callable[[], Any]) -> Any:
        """``run()`` against the database: a page found damaged only now (the header was whole) sets the
        file aside like a damaged header and runs again on an empty one (a bare ``DatabaseError``
        before, issue 43 round-3b probe); another process's lock is a ``JudgeError``."""
        for attempt in (0, 1):
            try:
                return run()
            except sqlite3.DatabaseError as e:
                with contextlib.suppress(sqlite3.Error):
                    self._db.rollback()
                if getattr(e, "sqlite_errorname", None) not in _CORRUPT_SQLITE or attempt:
                    raise self._busy(e) from None
                self._set_aside(e)

    def _busy(self, e: sqlite3.Error) -> JudgeError:
        if getattr(e, "sqlite_errorname", None) in ("SQLITE_BUSY", "SQLITE_LOCKED"):
            return JudgeError(f"judge cache {self.path} is locked by another process ({e}; waited "
                              f"{self.lock_wait_s:g} s): wait for it to finish, or set judge.cache_dir to another folder")
        # a folder, a FIFO, another program's table: not a lock, and waiting would not help
        return JudgeError(f"judge cache {self.path} cannot be used ({e}): it is not a judge cache factlab can "
                          "open; move it away, or set judge.cache_dir to another folder")

    def _open(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, check_same_thread=False, timeout=self.lock_wait_s)
        try:
            db.execute("CREATE TABLE IF NOT EXISTS answers (key TEXT PRIMARY KEY, text TEXT NOT NULL)")
            db.commit()
        except BaseException:
            db.close()
            raise
        return db

    def _forked(self) -> None:
        # sqlite connections (and a lock another thread may hold) must not cross a fork
        # (factlab.forked): a forked worker opens its own connection to the same file
        if os.getpid() != self._pid:
            self._connect()

    @staticmethod
    def key(**parts: Any) -> str:
        return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()

    def get_many(self, keys: Sequence[str]) -> dict[str, str]:
        self._forked()

        def run() -> dict[str, str]:
            out: dict[str, str] = {}
            for b in range(0, len(keys), 500):
                chunk = list(keys[b:b + 500])
                q = f"SELECT key, text FROM answers WHERE key IN ({','.join('?' * len(chunk))})"
                out.update(dict(self._db.execute(q, chunk).fetchall()))
            return out
        with self._lock:
            return self._query(run)

    def put_many(self, items: dict[str, str]) -> None:
        self._forked()

        def run() -> None:
            self._db.executemany("INSERT OR REPLACE INTO answers VALUES (?, ?)", list(items.items()))
            self._db.commit()
        with self._lock:
            self._query(run)

    def __len__(self) -> int:
        self._forked()
        with self._lock:
            return self._query(lambda: self._db.execute("SELECT COUNT(*) FROM answers").fetchone()[0])


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
                 enable_thinking: bool | None = None, cache: JudgeCache | str | Path | bool | None = None,
                 price_per_1k_prompt_tokens: float | None = None, price_per_1k_completion_tokens: float | None = None):
        self.model_name = model
        self.prices = (price_per_1k_prompt_tokens, price_per_1k_completion_tokens)  # dollars, for cost figures
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

    def key_parts(self, prompt: str, prefix: str = "") -> dict[str, Any]:
        """Everything that decides the answer to ``prompt``: what the cache key hashes."""
        return {"backend": self.backend, "model": self.model_name, "system": self.system, "prompt": prompt,
                "prefix": prefix, "sampling": self.sampling(), "settings": self.answer_settings()}

    def cache_key(self, prompt: str, prefix: str = "") -> str:
        return JudgeCache.key(**self.key_parts(prompt, prefix))

    def judge(self, prompts: Sequence[str], prefix: str | None = None) -> list[str]:
        """One answer per prompt, in order; cached answers are not recomputed.

        ``prefix``: the start of the answer, written into the assistant turn before
        generation ("prefill"), and included in the returned text. It lets a judge too
        small to follow an output format (the embedded 135M model) answer in it, e.g.
        ``'{"SCORE": '``; a model that follows the format needs none.
        """
        prefix = prefix or ""
        return self._cached(prompts, prefix, lambda todo: self._generate(todo, prefix),
                            post=lambda t: self._join(prefix, t))

    def _join(self, prefix: str, text: str) -> str:
        """The answer to a prefilled request from the backend's continuation."""
        return prefix + text

    def _cost(self, prompt_tokens: float, completion_tokens: float) -> float | None:
        """Dollars for these tokens at ``prices`` (None when no price is set)."""
        pp, cp = self.prices
        if pp is None and cp is None:
            return None
        return round(prompt_tokens / 1000 * (pp or 0.0) + completion_tokens / 1000 * (cp or 0.0), 6)

    def estimate(self, prompts: Sequence[str], prefix: str = "") -> dict[str, Any]:
        """What answering ``prompts`` would cost, before any call (cached answers not deducted).
        Prompt tokens: characters of system prompt + prompt + prefix over 4, the usual rule of
        thumb for English under BPE tokenizers (no tokenizer is loaded; the chat template's few
        tokens per turn are left out). Completion tokens: ``max_new_tokens`` per prompt, an
        upper bound. ``est_cost_usd``: at ``price_per_1k_*`` (None without prices)."""
        chars = sum(len(str(p)) + len(self.system or "") + len(prefix or "") for p in prompts)
        prompt_tokens = math.ceil(chars / 4)
        completion_tokens = len(prompts) * self.max_new_tokens
        return {"prompts": len(prompts), "prompt_chars": chars, "est_prompt_tokens": prompt_tokens,
                "max_completion_tokens": completion_tokens, "method": "chars/4",
                "est_cost_usd": self._cost(prompt_tokens, completion_tokens)}

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
        return [self._join(prefix, t) for t in self._generate(prompts, prefix)]

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

    def messages(self, prompt: str, prefix: str = "") -> list[dict[str, str]]:
        """The chat messages of one request: the system and user turns, then ``prefix`` as the
        assistant turn the answer continues (what the vLLM and OpenAI-compatible judges send)."""
        msgs = chat_messages(prompt, self.system)
        return msgs + ([{"role": "assistant", "content": prefix}] if prefix else [])

    def summary(self) -> dict[str, float]:
        """Accounting for reports: calls, cache hits, tokens, seconds per backend call."""
        calls = self.stats["calls"]
        out = {"prompts": self.stats["prompts"], "calls": calls, "cache_hits": self.stats["cache_hits"],
               "prompt_tokens": self.stats["prompt_tokens"], "completion_tokens": self.stats["completion_tokens"],
               "retries": self.stats["retries"], "failures": self.stats["failures"],
               "malformed": self.stats["malformed"], "seconds": round(self.seconds, 3),
               "seconds_per_call": round(self.seconds / calls, 4) if calls else float("nan")}
        cost = self._cost(self.stats["prompt_tokens"], self.stats["completion_tokens"])
        if cost is not None:
            out["cost_usd"] = cost
        return out


def render_prompt(tok, prompt: str, *, system: str | None = None, enable_thinking: bool | None = None,
                  prefix: str = "") -> str:
    """``prompt`` as one chat turn in ``tok``'s template, ready for generation, followed by the
    answer ``prefix`` (the text a prefilled answer continues)."""
    if enable_thinking is not None and getattr(tok, "chat_template", None):
        msgs = chat_messages(prompt, system)
        text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True,
                                       enable_thinking=enable_thinking)
    else:
        text = chat_prompt(tok, prompt, system=system)
    return text + prefix

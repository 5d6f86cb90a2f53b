"""The HTTP side of ``OpenAIJudge``: how one request reaches an OpenAI-compatible server and
what comes back.

- transport: one pooled ``httpx`` client, the API key's headers (refused over plain http to
  another machine), and ``read_bounded``: a whole-request deadline (not httpx's per-read
  timeout; ``HEADER_GRACE_S`` past it for headers that never end) and a size cap on the
  decompressed body (``MAX_RESPONSE_BYTES``); ``read_completion`` reads the answer's text and
  token counts (``MalformedAnswer`` when it cannot).
- retry / backoff: connection errors, timeouts, 408 / 429 / 5xx and unreadable bodies retried
  with exponential backoff, honouring ``Retry-After`` up to ``judge.max_retry_after_s``, all of
  one request's sleeps together under ``MAX_TOTAL_BACKOFF_S``.
- endpoints and health: each request to the live ``Endpoint`` with the fewest in flight, a dead
  one set aside and its requests moved to the others, ``check_endpoints`` (``GET /models``)
  before a run.

``OpenAITransport`` holds these as methods of ``OpenAIJudge`` (``judges.openai``), which mixes
it in; the judge's own side (the request body, prefill, the batch, the cost) stays there.
"""

from __future__ import annotations

import datetime
import email.utils
import json
import logging
import os
import threading
import time
import zlib
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx

from ..credentials import key_destination_problem, redact_http_logs, redact_text, sends_key_in_clear
from ..sections import MAX_JUDGE_BACKOFF_S
from ..parsing import loads_bounded
from .base import JudgeError

log = logging.getLogger(__name__)
redact_http_logs()  # httpx logs each request's URL at INFO, credentials included


_RETRYABLE_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}
MAX_RESPONSE_BYTES = 16 * 1024 * 1024  # a judge's answer, decompressed; a longer body is refused as it arrives
MAX_TOTAL_BACKOFF_S = MAX_JUDGE_BACKOFF_S  # the sleeps between one request's retries, together
HEADER_GRACE_S = 1.0  # past judge.timeout_s, how long a request may go on before it is given up (left to end)
_DOWN_STATUS = {502, 503, 504}  # a health check answered so is a server not (yet) serving


class _Oversized(Exception):
    """A body over its size limit, or past its whole-request deadline."""


def read_bounded(resp: httpx.Response, deadline: float, limit: int) -> bytes:
    """The body of a streamed response, decompressed (gzip / deflate), at most ``limit`` bytes
    and read before ``deadline`` (``time.monotonic()``); ``_Oversized`` saying which bound it
    crossed. httpx's timeout is per read: a server that sends a byte every half second, or an
    endless chunked body, or a small gzip bomb, would otherwise hold or fill the process."""
    if resp.is_stream_consumed:  # a response built in memory (a test transport): nothing left to stream
        if len(resp.content) > limit:
            raise _Oversized(f"the answer is larger than {limit:,} bytes")
        return resp.content
    encoding = resp.headers.get("content-encoding", "").strip().lower()
    if encoding not in ("", "identity", "gzip", "x-gzip", "deflate"):
        raise _Oversized(f"a body in an encoding not asked for ({encoding[:40]})")
    inflate = zlib.decompressobj(zlib.MAX_WBITS | 32) if encoding not in ("", "identity") else None
    out = bytearray()
    wire = 0
    for raw in resp.iter_raw():  # as it arrives (a chunk size would wait to fill it)
        if time.monotonic() > deadline:
            raise _Oversized("the whole answer took longer than judge.timeout_s")
        wire += len(raw)
        if inflate is not None and wire > limit + limit // 64 + 65536:  # bytes past the compressed stream's end
            # decompress to nothing and pile up in unused_data until the deadline (issue 43 round-3b probe)
            raise _Oversized(f"the answer is larger than {limit:,} bytes on the wire")
        data = inflate.decompress(raw, limit + 1 - len(out)) if inflate is not None else raw
        out += data
        if len(out) > limit:
            raise _Oversized(f"the answer is larger than {limit:,} bytes{' decompressed' if inflate else ''}")
    if inflate is not None:
        out += inflate.flush(limit + 1 - len(out))
        if len(out) > limit:
            raise _Oversized(f"the answer is larger than {limit:,} bytes decompressed")
    return bytes(out)


class _AttemptFailed(Exception):
    """One request attempt that failed in a way worth retrying. ``dead``: the endpoint itself
    is gone (refused, reset, dropped the connection), so its requests should go elsewhere."""

    def __init__(self, reason: str, retry_after: float | None = None, dead: bool = False):
        super().__init__(reason)
        self.reason, self.retry_after, self.dead = reason, retry_after, dead


@dataclass(eq=False)
class Endpoint:
    """One OpenAI-compatible server behind an ``OpenAIJudge``. ``base`` is the URL as given
    (credentials included: requests only); ``shown`` is its redacted form for logs, errors and
    cache keys. ``down_since`` is set while it is considered down (``time.monotonic()``)."""

    base: str
    shown: str
    in_flight: int = 0
    sent: int = 0
    answered: int = 0
    down_since: float | None = None
    down_reason: str = ""


def _retry_after(value: str | None) -> float | None:
    """Seconds a ``Retry-After`` header asks to wait: given in seconds, or as an HTTP date
    (seconds from now, 0 when past); ``None`` when absent or unreadable."""
    if not value:
        return None
    value = value.strip()
    if value.replace(".", "", 1).isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=datetime.timezone.utc)
    return max(0.0, (when - datetime.datetime.now(datetime.timezone.utc)).total_seconds())


class MalformedAnswer(ValueError):
    """A chat-completions body that is not UTF-8 JSON with a text ``choices[0].message.content``
    (``choices[0].text`` for a completions body)."""


def read_completion(raw: bytes, completions: bool = False) -> tuple[str, int, int]:
    """(text, prompt tokens, completion tokens) of a chat-completions response body (a
    ``/completions`` body when ``completions``); ``MalformedAnswer`` when it cannot be read.
    Token counts that are absent or not numbers count as 0."""
    where = "choices[0].text" if completions else "choices[0].message.content"
    try:
        data = loads_bounded(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        raise MalformedAnswer(f"unreadable JSON body ({e}): {raw[:120]!r}") from None
    try:
        choice = data["choices"][0]
        text = choice["text"] if completions else choice["message"]["content"]
    except (KeyError, IndexError, TypeError):
        raise MalformedAnswer(f"no {where} in {json.dumps(data)[:200]}") from None
    if text is None:
        text = ""
    if not isinstance(text, str):
        raise MalformedAnswer(f"{where} is a {type(text).__name__}, not text")
    usage = data.get("usage") if isinstance(data, dict) else None
    usage = usage if isinstance(usage, dict) else {}

    def tokens(key: str) -> int:
        v = usage.get(key)
        return int(v) if isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0 else 0

    return text, tokens("prompt_tokens"), tokens("completion_tokens")


class OpenAITransport:
    """Transport, retries and endpoint health of ``OpenAIJudge`` (mixed into it; see its docstring
    for the behaviour). Reads what ``OpenAIJudge.__init__`` sets: ``endpoints``, ``route``,
    ``shown_url``, ``timeout_s``, ``concurrency``, ``max_retries``, ``backoff_s``,
    ``max_retry_after_s``, ``max_total_backoff_s``, ``max_response_bytes``, ``api_key_env``,
    ``allowed_key_envs``, ``allow_key_over_http``, ``prefill_mode``, ``_http`` (the pooled
    client, made here on first use), ``stats_lock``; and the judge's ``request_body``,
    ``model_name`` and ``stats``. ``OpenAIJudge`` calls ``post`` (one prompt, with its
    retries), ``add_stats`` and ``check_endpoints``."""

    revive_after_s = 30.0  # a down endpoint gets a request again after this long

    # -- HTTP plumbing ---------------------------------------------------------------------
    def _client(self) -> httpx.Client:
        """One pooled client for all endpoints and threads (created on first use)."""
        with self.stats_lock:
            if self._http is None:
                self._http = httpx.Client(
                    timeout=self.timeout_s, follow_redirects=True,
                    limits=httpx.Limits(max_connections=None, max_keepalive_connections=self.concurrency))
            return self._http

    def close(self) -> None:
        """Close pooled connections (a later call opens new ones)."""
        with self.stats_lock:
            http, self._http = self._http, None
        if http is not None:
            http.close()

    def _headers(self, endpoint: Endpoint | None = None) -> dict[str, str]:
        h = {"Content-Type": "application/json"}
        key = os.environ.get(self.api_key_env)
        if key:
            for ep in [endpoint] if endpoint is not None else self.endpoints:
                problem = key_destination_problem(self.api_key_env, ep.base, self.allowed_key_envs)
                if problem:
                    raise JudgeError(f"judge.api_key_env: {problem}")
                if sends_key_in_clear(ep.base) and not self.allow_key_over_http:
                    raise JudgeError(f"${self.api_key_env} would be sent unencrypted to {ep.shown} (plain http:// to "
                                     "another machine); use https://, or set judge.allow_key_over_http: true")
            h["Authorization"] = f"Bearer {key}"
        return h

    def add_stats(self, **kw: int) -> None:
        """Add ``kw`` to ``stats`` (under ``stats_lock``: requests run in threads)."""
        with self.stats_lock:
            self.stats.update(kw)

    # -- endpoints: choice, health -----------------------------------------------------------
    def _is_live(self, ep: Endpoint, now: float) -> bool:
        return ep.down_since is None or now - ep.down_since >= self.revive_after_s

    def _acquire(self, avoid: Endpoint | None = None) -> Endpoint:
        """The endpoint for the next attempt: among the live ones (all of them when none is:
        each request still has its retries) the one with the fewest requests in flight, then
        the fewest sent; ``avoid`` (the one that just failed) only when it is the sole choice."""
        now = time.monotonic()
        with self.stats_lock:
            pool = [e for e in self.endpoints if self._is_live(e, now)] or self.endpoints
            if avoid is not None and len(pool) > 1:
                pool = [e for e in pool if e is not avoid]
            ep = min(pool, key=lambda e: (e.in_flight, e.sent))
            ep.in_flight += 1
            ep.sent += 1
            return ep

    def _release(self, ep: Endpoint, ok: bool) -> None:
        with self.stats_lock:
            ep.in_flight -= 1
            back = ok and ep.down_since is not None
            if ok:
                ep.answered += 1
                ep.down_since, ep.down_reason = None, ""
        if back:
            log.warning("judge endpoint %s answers again; it takes requests again", ep.shown)

    def _mark_down(self, ep: Endpoint, reason: str) -> bool:
        """Set ``ep`` aside; whether another endpoint is live to take its requests."""
        now = time.monotonic()
        with self.stats_lock:
            was_up = ep.down_since is None
            ep.down_since, ep.down_reason = now, reason
            others = any(self._is_live(e, now) for e in self.endpoints if e is not ep)
            if was_up:
                self.stats["endpoints_down"] += 1
        if was_up and len(self.endpoints) > 1:
            log.warning("judge endpoint %s is down (%s); %s", ep.shown, reason,
                        "its requests go to the other endpoints" if others else "no other endpoint is live")
        return others

    def check_endpoints(self, timeout_s: float | None = None) -> dict[str, list[str]]:
        """Ask every endpoint ``GET {base_url}/models`` (in parallel, ``timeout_s``, default
        ``min(judge.timeout_s, 10)``) before a run spends anything on it. Returns, per endpoint
        (redacted), the model ids it serves. ``JudgeError`` naming each endpoint that does not
        answer (refused, timed out, 502/503/504: e.g. vLLM still loading) or that refuses the
        API key; any other answer (even 404 from a server without that route) shows a live
        server. A served list without ``judge.model`` is only warned about: llama.cpp's server,
        for one, answers whatever model is asked for."""
        timeout = min(self.timeout_s, 10.0) if timeout_s is None else timeout_s

        def probe(ep: Endpoint) -> tuple[str | None, list[str]]:
            try:
                status, _, content = self._request("GET", ep.base + "/models", ep, timeout)
            except httpx.HTTPError as e:
                return f"{type(e).__name__}: {redact_text(str(e))}", []
            except _Oversized as e:
                return str(e), []
            if status in (401, 403):
                return f"refused the API key (HTTP {status}); set it in ${self.api_key_env}", []
            if status in _DOWN_STATUS:
                return f"HTTP {status}: {content[:200].decode('utf-8', 'replace')}", []
            try:
                data = loads_bounded(content.decode("utf-8")).get("data") or []
                return None, [str(m.get("id")) for m in data if isinstance(m, dict)]
            except (ValueError, AttributeError):
                return None, []

        with ThreadPoolExecutor(max_workers=len(self.endpoints)) as pool:
            found = dict(zip(self.endpoints, pool.map(probe, self.endpoints)))
        down = {ep: why for ep, (why, _) in found.items() if why is not None}
        for ep, why in down.items():
            self._mark_down(ep, why)
        if down:
            raise JudgeError(
                f"judge endpoint{'s' if len(down) > 1 else ''} down before the run "
                f"({len(self.endpoints) - len(down)} of {len(self.endpoints)} answered GET /models): "
                + "; ".join(f"{ep.shown}: {why}" for ep, why in down.items())
                + ". Start the server, take it out of judge.base_url, or set judge.health_check: false")
        served = {ep.shown: ids for ep, (_, ids) in found.items()}
        for shown, ids in served.items():
            if ids and self.model_name not in ids:
                log.warning("judge.model = %r is not among the models %s serves (%s); it may refuse the requests",
                            self.model_name, shown, ", ".join(ids[:5]))
        log.info("judge endpoints up: %s", ", ".join(served))
        return served

    # -- one request, with its retries (the batch: OpenAIJudge._generate) ---------------------
    def _request(self, method: str, url: str, ep: Endpoint, timeout_s: float,
                 body: bytes | None = None) -> tuple[int, httpx.Headers, bytes]:
        """(status, headers, body) of one request, the body read by ``read_bounded``: within ``timeout_s``
        as a whole (not per read) and at most ``max_response_bytes`` decompressed."""
        deadline = time.monotonic() + timeout_s
        headers = {**self._headers(ep), "Accept-Encoding": "gzip, deflate"}
        client, box = self._client(), {}

        def attempt() -> None:  # in a thread: the deadline must hold while the headers arrive, too
            try:
                with client.stream(method, url, content=body, headers=headers, timeout=timeout_s) as resp:
                    box["answer"] = resp.status_code, resp.headers, read_bounded(resp, deadline, self.max_response_bytes)
            except BaseException as e:  # noqa: BLE001  (handed to the caller)
                box["error"] = e

        worker = threading.Thread(target=attempt, name="factlab-judge-request", daemon=True)
        worker.start()
        worker.join(timeout_s + HEADER_GRACE_S)
        if worker.is_alive():  # headers trickling a byte at a time: httpx's per-read timeout never trips
            raise _Oversized("the whole answer took longer than judge.timeout_s (its headers never ended)")
        if "error" in box:
            raise box["error"]
        return box["answer"]

    def _send_once(self, ep: Endpoint, body: bytes) -> str:
        """One attempt at ``ep``: the answer text, ``_AttemptFailed`` to retry, or ``JudgeError``."""
        try:
            status, headers, content = self._request("POST", ep.base + self.route, ep, self.timeout_s, body)
        except _Oversized as e:  # alive, but sending too much or too slowly: retry, do not set it aside
            raise _AttemptFailed(str(e)) from None
        except httpx.ConnectTimeout as e:  # nothing answers at that address
            raise _AttemptFailed(f"{type(e).__name__}: {redact_text(str(e)) or 'timed out'}", dead=True) from None
        except httpx.TimeoutException as e:  # alive but slow: retry, do not set it aside
            raise _AttemptFailed(f"{type(e).__name__}: {redact_text(str(e)) or 'timed out'}") from None
        except (httpx.ConnectError, httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as e:
            raise _AttemptFailed(f"{type(e).__name__}: {redact_text(str(e))}", dead=True) from None
        except httpx.TransportError as e:
            raise _AttemptFailed(f"{type(e).__name__}: {redact_text(str(e))}") from None
        if not 200 <= status < 300:
            detail = self._scrub(content[:65536].decode("utf-8", "replace"))[:300]  # scrubbed whole, then cut
            if status in (401, 403):
                raise JudgeError(f"{ep.shown + self.route} refused the request (HTTP {status}); set the API "
                                 f"key in ${self.api_key_env}: {detail}")
            if status not in _RETRYABLE_STATUS:
                raise JudgeError(f"{ep.shown + self.route} answered HTTP {status}: {detail}")
            raise _AttemptFailed(f"HTTP {status}: {detail}", retry_after=_retry_after(headers.get("Retry-After")))
        try:
            text, prompt_tokens, completion_tokens = read_completion(
                content, completions=self.prefill_mode == "completions")
        except MalformedAnswer as e:  # a garbled body is usually transient (a proxy, an overloaded server)
            self.add_stats(malformed=1)
            raise _AttemptFailed(f"malformed answer: {self._scrub(str(e))}") from None
        self.add_stats(prompt_tokens=prompt_tokens, completion_tokens=completion_tokens)
        return text

    def _scrub(self, text: str) -> str:
        """A server's words (an error body, a malformed answer) as factlab may repeat them in an error,
        a log or a manifest: URLs redacted, and the API key as ``***`` where the server echoed it (a
        gateway's "invalid key sk-...", a proxy echoing the request's headers)."""
        key = os.environ.get(self.api_key_env) or ""
        text = redact_text(text)
        return text.replace(key, "***") if len(key) >= 4 else text

    def post(self, prompt: str, prefix: str = "") -> str:
        """The answer to one prompt from the endpoints, with the retries, backoff and failover the
        ``OpenAIJudge`` docstring describes; ``JudgeError`` when it fails for good."""
        body = self.request_body(prompt, prefix)
        last, avoid, slept = "no attempt made", None, 0.0
        for attempt in range(self.max_retries + 1):
            retry_after = None
            for _hop in range(len(self.endpoints)):  # moving off a dead endpoint spends no retry
                ep = self._acquire(avoid)
                ok = False
                try:
                    text = self._send_once(ep, body)
                    ok = True
                    return text
                except _AttemptFailed as f:
                    last = f.reason if len(self.endpoints) == 1 else f"{ep.shown}: {f.reason}"
                    retry_after, avoid = f.retry_after, ep
                    if not (f.dead and self._mark_down(ep, f.reason)):
                        break
                    self.add_stats(failovers=1)
                finally:
                    self._release(ep, ok)
            if attempt < self.max_retries:
                if retry_after is not None and retry_after > self.max_retry_after_s:
                    self.add_stats(failures=1)
                    raise JudgeError(f"judge {self.shown_url} asked to wait {retry_after:,.0f} s before a retry "
                                     f"(Retry-After), more than judge.max_retry_after_s = {self.max_retry_after_s:g} s; "
                                     f"last error: {last}. Retry later, or raise judge.max_retry_after_s to wait")
                delay = retry_after if retry_after is not None else self.backoff_s * 2.0 ** min(attempt, 60)
                if slept + delay > self.max_total_backoff_s:
                    self.add_stats(failures=1)
                    raise JudgeError(f"judge {self.shown_url}: the next retry would wait {delay:,.0f} s, past "
                                     f"{self.max_total_backoff_s:,.0f} s of backoff for one request "
                                     f"({attempt + 1} attempts made); last error: {last}")
                slept += delay
                self.add_stats(retries=1)
                log.warning("judge %s: attempt %d/%d failed (%s); retrying in %.1fs",
                            self.shown_url, attempt + 1, self.max_retries + 1, last, delay)
                time.sleep(delay)
        self.add_stats(failures=1)
        raise JudgeError(self._failure_message(last))

    def _failure_message(self, last: str) -> str:
        head = f"judge {self.shown_url} failed after {self.max_retries + 1} attempts; last error: {last}"
        down = [e for e in self.endpoints if e.down_since is not None]
        if len(self.endpoints) > 1 and len(down) == len(self.endpoints):
            head += f"; all {len(down)} endpoints are down: " + "; ".join(f"{e.shown} ({e.down_reason})" for e in down)
        return head

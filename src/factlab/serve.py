"""A local OpenAI-compatible chat-completions endpoint for a transformers model (``factlab serve``).

The ``openai`` judge backend talks to any such endpoint (``vllm serve`` on a GPU box). This
server puts a local model behind the same protocol, so that:

* several notebooks or sweep workers on one machine share one loaded judge model;
* the judge's concurrency (``judge.concurrency``: requests in flight) can be measured end to
  end on any machine: 004 (KLCF) Table 14 / App. D.3 compare reward costs "serial" and
  "parallel" (concurrency 100 against vLLM); ``bench/bench_klcf_efficiency.py`` runs both
  modes through this server.

Requests that arrive together are answered in one batched generation (dynamic batching, as
vLLM does): the batcher takes the first waiting request, waits up to ``wait_s`` for more (at
most ``max_batch``), and generates each group that shares its sampling settings and answer
prefix in one ``decoding.generate`` call. The model runs on the batcher thread only.

Protocol subset: ``POST /v1/chat/completions`` with ``messages`` (system?, user, and an
optional final assistant message that the answer continues: the prefill the judges use),
``max_tokens``, ``temperature``, ``top_p``, ``seed``; ``POST /v1/completions`` with a raw
``prompt`` string (already rendered by the client, e.g. the judges' ``prefill_mode:
completions``; answered in ``choices[0].text``); ``GET /v1/models``. The response has
``choices[0].message.content`` and ``usage`` (prompt and completion tokens, counted with
the model's tokenizer). A malformed request gets HTTP 400 naming what is wrong. No
authentication: it binds to 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import json
import contextlib
import logging
import queue
import socket
import threading
from collections import Counter
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from .models import chat_prompt, generate, load_model
from .parsing import loads_bounded

log = logging.getLogger(__name__)

__all__ = ["JudgeServer", "RequestError", "parse_completion_request", "parse_request"]

MAX_BODY_BYTES = 8 * 1024 * 1024
MAX_TOKENS_LIMIT = 8192


def body_length(header: str | None) -> int:
    """The request body's size from its ``Content-Length`` header: decimal digits only, at most
    ``MAX_BODY_BYTES`` (``RequestError`` otherwise). ``-1`` would read to the end of the stream,
    past any limit; a missing header is an empty body."""
    value = (header or "0").strip()
    if not value.isascii() or not value.isdigit() or len(value) > 12:
        raise RequestError(f"Content-Length must be a number of bytes from 0 to {MAX_BODY_BYTES}, got {value[:20]!r}")
    n = int(value)
    if n > MAX_BODY_BYTES:
        raise RequestError(f"body of {n} bytes is over the {MAX_BODY_BYTES}-byte limit")
    return n


class RequestError(ValueError):
    """A chat-completions request the server cannot answer (HTTP 400)."""


@dataclass
class _Request:
    system: str | None
    user: str
    prefix: str
    max_tokens: int
    temperature: float
    top_p: float
    seed: int
    done: threading.Event = field(default_factory=threading.Event)
    text: str = ""
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error: str | None = None
    raw: str | None = None  # /v1/completions: the prompt as sent, no chat template

    def group(self) -> tuple:
        return (self.prefix, self.max_tokens, self.temperature, self.top_p, self.seed)


def _number(body: dict, key: str, default, kind, lo, hi):
    v = body.get(key, default)
    if v is None:
        return default
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:
        raise RequestError(f"'{key}' must be a number in [{lo}, {hi}], got {v!r}")
    return kind(v)


def parse_completion_request(body: Any, default_max_tokens: int = 256) -> _Request:
    """The request a ``/v1/completions`` body asks for (one ``prompt`` string, generated from as is)."""
    if not isinstance(body, dict) or not isinstance(body.get("prompt"), str):
        raise RequestError("'prompt' must be a string (one prompt per request)")
    return _Request(system=None, user="", prefix="", raw=body["prompt"],
                    max_tokens=_number(body, "max_tokens", default_max_tokens, int, 1, MAX_TOKENS_LIMIT),
                    temperature=_number(body, "temperature", 0.0, float, 0.0, 2.0),
                    top_p=_number(body, "top_p", 1.0, float, 0.0, 1.0),
                    seed=_number(body, "seed", 0, int, 0, 2**31 - 1))


def parse_request(body: Any, default_max_tokens: int = 256) -> _Request:
    """The request a chat-completions body asks for; ``RequestError`` naming the bad field."""
    if not isinstance(body, dict):
        raise RequestError("the body must be a JSON object")
    msgs = body.get("messages")
    if not isinstance(msgs, list) or not msgs:
        raise RequestError("'messages' must be a non-empty list")
    for i, m in enumerate(msgs):
        if (not isinstance(m, dict) or m.get("role") not in ("system", "user", "assistant")
                or not isinstance(m.get("content"), str)):
            raise RequestError(f"messages[{i}] must be an object with a role (system, user, assistant) "
                               "and a text content")
    prefix = ""
    if msgs[-1]["role"] == "assistant":  # prefill: the answer continues this message
        prefix = msgs[-1]["content"]
        msgs = msgs[:-1]
    system = msgs[0]["content"] if msgs and msgs[0]["role"] == "system" else None
    rest = msgs[1:] if system is not None else msgs
    if len(rest) != 1 or rest[0]["role"] != "user":
        raise RequestError("expected one user message (after an optional system message, before an optional "
                           "assistant prefill); multi-turn chats are not served")
    return _Request(system=system, user=rest[0]["content"], prefix=prefix,
                    max_tokens=_number(body, "max_tokens", default_max_tokens, int, 1, MAX_TOKENS_LIMIT),
                    temperature=_number(body, "temperature", 0.0, float, 0.0, 2.0),
                    top_p=_number(body, "top_p", 1.0, float, 0.0, 1.0),
                    seed=_number(body, "seed", 0, int, 0, 2**31 - 1))


class JudgeServer:
    """Serve ``model`` (a factlab model name, HF id or path; or pass ``model_obj`` and
    ``tokenizer``) at ``url`` (``http://HOST:PORT/v1``); ``port=0`` picks a free port.
    Use as a context manager, or ``serve_forever()`` from the command line.

    ``stats``: ``requests``, ``batches`` (generate calls), ``bad_requests``, ``errors``;
    ``max_batch_seen``: the largest group answered in one generation.

    ``read_deadline_s``: the time a client has to send its whole request (request line,
    headers, body) before its connection is closed; a client that sent nothing, or trickled
    its headers, held a handler thread forever (issue 43 round-3b probe). Generating the
    answer is not bounded by it."""

    read_deadline_s = 60.0

    def __init__(self, model: str = "smollm2-135m-instruct", *, host: str = "127.0.0.1", port: int = 0,
                 max_batch: int = 16, wait_s: float = 0.01, dtype: str = "float32", device: str = "auto",
                 default_max_tokens: int = 256, model_obj=None, tokenizer=None):
        if max_batch < 1:
            raise ValueError(f"max_batch must be >= 1, got {max_batch}")
        self.model_name, self.max_batch, self.wait_s = model, max_batch, wait_s
        self.default_max_tokens = default_max_tokens
        if model_obj is None:
            model_obj, tokenizer = load_model(model, dtype=dtype, device=device)
        self.model, self.tokenizer = model_obj, tokenizer
        self.stats: Counter = Counter()
        self.max_batch_seen = 0
        self._queue: queue.Queue[_Request | None] = queue.Queue()
        self._lock = threading.Lock()
        self.httpd = ThreadingHTTPServer((host, port), self._handler())
        self.httpd.daemon_threads = True
        h, p = self.httpd.server_address[:2]
        self.url = f"http://{h}:{p}/v1"
        self._batcher = threading.Thread(target=self._batch_loop, name="factlab-serve-batcher", daemon=True)
        self._http_thread: threading.Thread | None = None

    # -- lifecycle ----------------------------------------------------------------------
    def start(self) -> "JudgeServer":
        self._batcher.start()
        self._http_thread = threading.Thread(target=self.httpd.serve_forever, name="factlab-serve-http", daemon=True)
        self._http_thread.start()
        log.info("serving %s at %s (max batch %d)", self.model_name, self.url, self.max_batch)
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self._queue.put(None)
        self._batcher.join(timeout=30)

    def __enter__(self) -> "JudgeServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    def serve_forever(self) -> None:
        """Serve until Ctrl-C."""
        self.start()
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            pass
        finally:
            self.stop()

    # -- batching -----------------------------------------------------------------------
    def _collect(self, first: _Request) -> list[_Request]:
        batch = [first]
        while len(batch) < self.max_batch:
            try:
                nxt = self._queue.get(timeout=self.wait_s)
            except queue.Empty:
                break
            if nxt is None:
                self._queue.put(None)
                break
            batch.append(nxt)
        return batch

    def _batch_loop(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            groups: dict[tuple, list[_Request]] = {}
            for r in self._collect(first):
                groups.setdefault(r.group(), []).append(r)
            for reqs in groups.values():
                try:
                    self._answer(reqs)
                except Exception as e:  # noqa: BLE001 - reported to each waiting client as HTTP 500
                    log.exception("generation failed for a batch of %d", len(reqs))
                    with self._lock:
                        self.stats["errors"] += len(reqs)
                    for r in reqs:
                        r.error = f"{type(e).__name__}: {e}"
                finally:
                    for r in reqs:
                        r.done.set()

    def _answer(self, reqs: list[_Request]) -> None:
        tok = self.tokenizer
        r0 = reqs[0]
        rendered = [r.raw if r.raw is not None else chat_prompt(tok, r.user, system=r.system) + r.prefix
                    for r in reqs]
        gens = generate(self.model, tok, rendered, max_new_tokens=r0.max_tokens, temperature=r0.temperature,
                        top_p=r0.top_p, batch_size=len(rendered), seed=r0.seed, progress=False)
        for r, text, g in zip(reqs, rendered, gens):
            r.text = g[0].text
            r.prompt_tokens = len(tok(text, add_special_tokens=False)["input_ids"])
            r.completion_tokens = len(g[0].token_ids)
        with self._lock:
            self.stats["batches"] += 1
            self.max_batch_seen = max(self.max_batch_seen, len(reqs))

    # -- HTTP ---------------------------------------------------------------------------
    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, fmt, *args):  # quiet: one line per request is noise at concurrency 100
                log.debug(fmt, *args)

            def handle(self):
                # one deadline for reading the whole request (a per-read timeout never ends a trickle)
                self._deadline = threading.Timer(server.read_deadline_s, self._cut)
                self._deadline.daemon = True
                self._deadline.start()
                try:
                    super().handle()
                except OSError:  # the connection cut at the deadline, or the client gone
                    self.close_connection = True
                finally:
                    self._deadline.cancel()

            def _cut(self):
                log.debug("closing a connection that sent no whole request in %g s", server.read_deadline_s)
                with contextlib.suppress(OSError):
                    self.connection.shutdown(socket.SHUT_RDWR)

            def _send(self, status: int, payload: dict) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                try:
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

            def _error(self, status: int, message: str) -> None:
                self._send(status, {"error": {"message": message, "type": "invalid_request_error"
                                              if status == 400 else "server_error"}})

            def do_GET(self):
                if self.path.rstrip("/") in ("/v1/models", "/models"):
                    self._send(200, {"object": "list", "data": [{"id": server.model_name, "object": "model"}]})
                else:
                    self._error(404, f"no such path {self.path!r}")

            def do_POST(self):
                route = self.path.rstrip("/").removeprefix("/v1")
                if route not in ("/chat/completions", "/completions"):
                    self._error(404, f"no such path {self.path!r}; POST /v1/chat/completions or /v1/completions")
                    return
                try:
                    n = body_length(self.headers.get("Content-Length"))
                    raw = self.rfile.read(n)
                    if len(raw) < n:  # cut at the deadline, or the client hung up: nobody to answer
                        self.close_connection = True
                        return
                    self._deadline.cancel()  # the request is in: generating it has no deadline here
                    try:
                        body = loads_bounded(raw.decode("utf-8"))
                    except (UnicodeDecodeError, ValueError) as e:
                        raise RequestError(f"the body is not UTF-8 JSON: {e}") from None
                    parse = parse_completion_request if route == "/completions" else parse_request
                    req = parse(body, server.default_max_tokens)
                except (RequestError, ValueError) as e:
                    with server._lock:
                        server.stats["bad_requests"] += 1
                    self.close_connection = True  # an unread body must not be taken for the next request
                    self._error(400, str(e))
                    return
                with server._lock:
                    server.stats["requests"] += 1
                server._queue.put(req)
                req.done.wait()
                if req.error is not None:
                    self._error(500, req.error)
                    return
                answer = ({"text": req.text} if req.raw is not None
                          else {"message": {"role": "assistant", "content": req.text}})
                self._send(200, {"object": "text_completion" if req.raw is not None else "chat.completion",
                                 "model": server.model_name,
                                 "choices": [{"index": 0, "finish_reason": "stop", **answer}],
                                 "usage": {"prompt_tokens": req.prompt_tokens,
                                           "completion_tokens": req.completion_tokens,
                                           "total_tokens": req.prompt_tokens + req.completion_tokens}})

        return Handler

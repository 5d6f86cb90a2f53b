"""Fault injection on the OpenAI-compatible judge with a loopback server: the server dies
mid-run, answers past the client timeout, answers malformed bodies or malformed JSON
verdicts at a set rate. Each ends in a clear ``JudgeError`` or counted failures, and the
judge cache on disk keeps, readable, every answer obtained before the fault."""

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from factlab.judges import JudgeCache, JudgeError, OpenAIJudge
from factlab.judges.transport import MalformedAnswer, read_completion
from factlab.rewards.rar import BinaryRAR

BAD_BODIES = [b'{"choices": [{"message": {"content": "cut', b"\xff\xfe not utf-8", b'{"choices": []}',
              b'{"choices": [{"message": {"content": 7}}]}']


class FaultyServer:
    """A loopback chat-completions server. ``answer(prompt) -> text``. Faults:
    ``malformed_every=k``: every k-th request gets one of ``BAD_BODIES`` (HTTP 200);
    ``die_after=n``: after n answered requests the server drops the connection in hand and
    stops listening (later requests: connection refused); ``slow_after=n``: requests after
    the n-th wait ``delay`` seconds first."""

    def __init__(self, answer, malformed_every=0, die_after=None, slow_after=None, delay=0.0, port=0):
        self.answer, self.malformed_every = answer, malformed_every
        self.die_after, self.slow_after, self.delay = die_after, slow_after, delay
        self.requests, self.answered, self.lock = 0, 0, threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with outer.lock:
                    outer.requests += 1
                    n = outer.requests
                    dead = outer.die_after is not None and outer.answered >= outer.die_after
                if dead:
                    self.close_connection = True  # no answer: the client sees the connection drop
                    threading.Thread(target=outer.stop, daemon=True).start()
                    return
                if outer.slow_after is not None and n > outer.slow_after:
                    time.sleep(outer.delay)
                if outer.malformed_every and n % outer.malformed_every == 0:
                    data = BAD_BODIES[(n // outer.malformed_every - 1) % len(BAD_BODIES)]
                else:
                    data = json.dumps({"choices": [{"message": {"content": outer.answer(body["messages"][-1]["content"])}}],
                                       "usage": {"prompt_tokens": 5, "completion_tokens": 2}}).encode()
                try:
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout)
                    return
                with outer.lock:
                    outer.answered += 1

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self._stopped = threading.Event()

    def stop(self):
        if not self._stopped.is_set():
            self._stopped.set()
            self.httpd.shutdown()
            self.httpd.server_close()

    def __enter__(self):
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *a):
        self.stop()


def _echo(prompt):
    return f"answer to {prompt}"


def _judge(url, cache, **kw):
    kw = {"backoff_s": 0.01, "max_retries": 1, "timeout_s": 5, "concurrency": 1, **kw}
    return OpenAIJudge("m", url, cache=cache, **kw)


def _cached_answers(path, judge, prompts):
    """The answers a fresh connection to the cache file holds for ``prompts``."""
    fresh = JudgeCache(path)
    found = fresh.get_many([judge.cache_key(p) for p in prompts])
    return {p: found[judge.cache_key(p)] for p in prompts if judge.cache_key(p) in found}


PROMPTS = [f"question {i}" for i in range(6)]


def test_server_dies_mid_run_clear_error_and_answers_kept(tmp_path):
    cache = tmp_path / "answers.sqlite"
    with FaultyServer(_echo, die_after=3) as srv:
        j = _judge(srv.url, cache)
        with pytest.raises(JudgeError, match=r"failed after 2 attempts; last error: .*(Connection|Remote|refused)"):
            j.judge(PROMPTS)
    assert j.stats["failures"] == 1 and j.stats["calls"] == 3
    kept = _cached_answers(cache, j, PROMPTS)
    assert kept == {p: _echo(p) for p in PROMPTS[:3]}  # what was answered before the death is on disk
    port = int(srv.url.rsplit(":", 1)[1].split("/")[0])
    with FaultyServer(_echo, port=port) as again:  # the server is back: only the missing prompts are asked
        j2 = _judge(again.url, cache)
        assert j2.judge(PROMPTS) == [_echo(p) for p in PROMPTS]
    assert again.requests == 3 and j2.stats["cache_hits"] == 3


def test_server_turns_slow_timeout_error_and_answers_kept(tmp_path):
    cache = tmp_path / "answers.sqlite"
    with FaultyServer(_echo, slow_after=2, delay=2.0) as srv:
        j = _judge(srv.url, cache, timeout_s=0.3)
        with pytest.raises(JudgeError, match=r"failed after 2 attempts; last error: .*timed out"):
            j.judge(PROMPTS)
    assert j.stats["failures"] == 1 and j.stats["retries"] == 1
    assert _cached_answers(cache, j, PROMPTS) == {p: _echo(p) for p in PROMPTS[:2]}


def test_malformed_bodies_at_a_rate_are_retried_and_counted(tmp_path):
    cache = tmp_path / "answers.sqlite"
    with FaultyServer(_echo, malformed_every=3) as srv:
        j = _judge(srv.url, cache, max_retries=2, concurrency=2)
        assert j.judge(PROMPTS) == [_echo(p) for p in PROMPTS]
    # 6 answers and every third request unreadable: 8 requests, 2 of them malformed
    assert srv.requests == 8 and j.stats["malformed"] == 2 == j.stats["retries"] and j.stats["failures"] == 0
    assert j.summary()["malformed"] == 2
    assert _cached_answers(cache, j, PROMPTS) == {p: _echo(p) for p in PROMPTS}


def test_only_malformed_bodies_end_in_a_clear_error(tmp_path):
    with FaultyServer(_echo, malformed_every=1) as srv:
        j = _judge(srv.url, tmp_path / "answers.sqlite", max_retries=3)
        with pytest.raises(JudgeError, match=r"failed after 4 attempts; last error: malformed answer"):
            j.judge(["q"])
    assert j.stats["malformed"] == 4 and j.stats["failures"] == 1 and len(JudgeCache(tmp_path / "answers.sqlite")) == 0


@pytest.mark.parametrize("body", BAD_BODIES + [b"[]", b'"text"', b"null", b"[" * 100_000 + b"]" * 100_000,
                                  b'{"choices": ' + b"[" * 5000 + b"]" * 5000 + b"}"])
def test_read_completion_rejects_malformed_bodies(body):
    with pytest.raises(MalformedAnswer):
        read_completion(body)


def test_read_completion_tolerates_odd_usage():
    body = {"choices": [{"message": {"content": None}}], "usage": {"prompt_tokens": "n/a", "completion_tokens": 4}}
    assert read_completion(json.dumps(body).encode()) == ("", 0, 4)
    assert read_completion(b'{"choices": [{"message": {"content": "ok"}}], "usage": "none"}') == ("ok", 0, 0)


class _NoEvidence:
    def retrieve_many(self, queries, k, prompt_ids=None):
        return [[] for _ in queries]


def test_malformed_verdicts_at_a_rate_are_counted_failures(tmp_path):
    """Every third verdict is broken JSON: its reward is None (NaN in TRL, not 0) and the
    rate is logged as binary_rar/failure_rate; the readable verdicts still count."""
    n = {"i": 0}
    lock = threading.Lock()

    def verdict(prompt):
        with lock:
            n["i"] += 1
            return '{"REASONING": "unclosed' if n["i"] % 3 == 0 else '{"REASONING": "fine", "SCORE": 1}'

    with FaultyServer(verdict) as srv:
        reward = BinaryRAR(_judge(srv.url, tmp_path / "answers.sqlite", concurrency=3), _NoEvidence(), k=2)
        logged = {}
        out = reward(prompts=[f"Tell me about country {i}." for i in range(6)],
                     completions=[f"Country {i} has a capital." for i in range(6)],
                     log_metric=lambda k, v: logged.__setitem__(k, v))
    assert sorted(out, key=lambda x: x is None) == [1.0] * 4 + [None] * 2
    assert reward.stats["failures"] == 2 and logged["binary_rar/failure_rate"] == pytest.approx(1 / 3)


def _rate_limited(retry_after: str, then_ok: bool = True):
    """An httpx transport: HTTP 429 with ``Retry-After: retry_after``, then (``then_ok``) an answer."""
    import httpx

    calls = []

    def handle(request):
        calls.append(request)
        if len(calls) == 1 or not then_ok:
            return httpx.Response(429, headers={"Retry-After": retry_after}, text="slow down")
        return httpx.Response(200, json={"choices": [{"message": {"content": "ok"}}]})

    return httpx.MockTransport(handle), calls


@pytest.mark.parametrize("header", ["3600", "Wed, 21 Oct 2099 07:28:00 GMT"])
def test_a_retry_after_past_the_cap_fails_at_once_with_a_clear_error(monkeypatch, header):
    """Issue 30: ``Retry-After: 3600`` made the judge sleep an hour per retry."""
    import httpx

    from factlab.judges import transport as judge_transport

    slept = []
    monkeypatch.setattr(judge_transport.time, "sleep", slept.append)
    transport, calls = _rate_limited(header)
    j = OpenAIJudge("m", "http://127.0.0.1:9/v1", cache=None, max_retries=4)
    monkeypatch.setattr(j, "_http", httpx.Client(transport=transport))
    with pytest.raises(JudgeError, match=r"asked to wait [\d,]+ s before a retry \(Retry-After\), more than "
                                         r"judge.max_retry_after_s = 60 s.*HTTP 429"):
        j.judge(["q"])
    assert slept == [] and len(calls) == 1 and j.stats["failures"] == 1


def test_a_retry_after_within_the_cap_is_honoured(monkeypatch):
    import httpx

    from factlab.judges import make_judge
    from factlab.judges import transport as judge_transport
    from factlab.sections import JudgeSection

    slept = []
    monkeypatch.setattr(judge_transport.time, "sleep", slept.append)
    transport, calls = _rate_limited("30")
    j = OpenAIJudge("m", "http://127.0.0.1:9/v1", cache=None, max_retries=2)
    monkeypatch.setattr(j, "_http", httpx.Client(transport=transport))
    assert j.judge(["q"]) == ["ok"] and slept == [30.0] and len(calls) == 2
    # the cap is a params key, and reaches the judge
    cfg = JudgeSection(backend="openai", base_url="http://127.0.0.1:9/v1", max_retry_after_s=7200, health_check=False)
    assert make_judge(cfg, cache=False).max_retry_after_s == 7200
    with pytest.raises(ValueError, match="max_retry_after_s"):
        JudgeSection(max_retry_after_s=0)


class HostileServer:
    """A loopback server that answers every request with a 200 header and then ``body``'s
    way: ``trickle`` (one byte every 50 ms, each read well inside the client's timeout),
    ``header_trickle`` (the same inside the headers, before httpx hands over a response),
    ``endless`` (a chunked body that never ends, 64 KB chunks) or ``gzip_bomb`` (16 KB of gzip
    that inflates to 16 MB). Loops are bounded (``limit_s``) so a test whose defence is
    removed still ends."""

    def __init__(self, body: str, limit_s: float = 10.0):
        import gzip
        import socket

        self.body, self.limit_s, self.sent = body, limit_s, 0
        self.bomb = gzip.compress(b"\0" * (16 << 20), compresslevel=9) if body == "gzip_bomb" else b""
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/v1"
        self.stop = threading.Event()

    def _serve(self, conn):
        end = time.monotonic() + self.limit_s
        try:
            request = conn.recv(65536)  # the request (small: headers and a JSON body)
            if self.body.startswith("echo"):  # the request's Authorization header, echoed in an error or a bad answer
                key = next((line.split(b":", 1)[1].strip() for line in request.split(b"\r\n")
                            if line.lower().startswith(b"authorization:")), b"")
                status, payload = {"echo_401": (b"401 Unauthorized", b'{"error": "invalid key ' + key + b'"}'),
                                   "echo_400": (b"400 Bad Request", b"x" * 280 + key),  # cut at 300 bytes in the error
                                   "echo_malformed": (b"200 OK", b'{"oops": "' + key + b'"}')}[self.body]
                conn.sendall(b"HTTP/1.1 " + status + b"\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n"
                             % len(payload) + payload)
            elif self.body == "header_trickle":  # the status line, then header bytes that never end
                conn.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
                while not self.stop.is_set() and time.monotonic() < end:
                    conn.sendall(b"x")
                    self.sent += 1
                    time.sleep(0.05)
            elif self.body == "trickle":
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 4096\r\n\r\n")
                while not self.stop.is_set() and time.monotonic() < end and self.sent < 4096:
                    conn.sendall(b" ")
                    self.sent += 1
                    time.sleep(0.05)
            elif self.body in ("endless", "endless_after_gzip"):
                after = self.body == "endless_after_gzip"
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
                             + (b"Content-Encoding: gzip\r\n" if after else b"") + b"\r\n")
                if after:  # a whole gzip member (a valid answer), then bytes that decompress to nothing
                    import gzip

                    member = gzip.compress(b'{"choices": [{"message": {"content": "yes"}}]}')
                    conn.sendall(b"%x\r\n" % len(member) + member + b"\r\n")
                chunk = b"10000\r\n" + b" " * 0x10000 + b"\r\n"
                while not self.stop.is_set() and time.monotonic() < end:
                    conn.sendall(chunk)
                    self.sent += 0x10000
            else:
                conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\n"
                             b"Content-Length: %d\r\n\r\n" % len(self.bomb) + self.bomb)
                self.sent = len(self.bomb)
        except OSError:  # the client hung up: what it should do
            pass
        finally:
            conn.close()

    def _accept(self):
        import socket

        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), daemon=True).start()

    def __enter__(self):
        threading.Thread(target=self._accept, daemon=True).start()
        return self

    def __exit__(self, *a):
        self.stop.set()
        self.sock.close()


@pytest.mark.parametrize("body, words", [
    ("trickle", "the whole answer took longer than judge.timeout_s"),
    ("header_trickle", "the whole answer took longer than judge.timeout_s"),  # the headers never end
    ("endless", "the answer is larger than 1,048,576 bytes"),
    ("gzip_bomb", "the answer is larger than 1,048,576 bytes decompressed"),
])
def test_a_judge_answer_is_bounded_in_time_and_size_as_a_whole(body, words):
    """httpx's timeout is per read: a server trickling a byte every 50 ms never trips it, an
    endless chunked body grew to 5 GB and a 1 MB gzip bomb to 2.4 GB (issue 43). A request
    has one deadline (``timeout_s``) and its body a size cap, decompressed."""
    with HostileServer(body) as srv:
        j = OpenAIJudge("m", srv.url, cache=None, timeout_s=0.5, max_retries=0, concurrency=1)
        j.max_response_bytes = 1 << 20
        t0 = time.monotonic()
        with pytest.raises(JudgeError, match=words):
            j.judge(["q"])
        took = time.monotonic() - t0
    assert took < 2.0, took  # the deadline, plus at most one read (or judges.transport.HEADER_GRACE_S)
    if body == "endless":
        assert srv.sent < 8 << 20  # the client stopped reading near its cap


def test_bytes_after_the_end_of_a_compressed_answer_are_capped_too():
    """After a whole gzip member, more bytes decompress to nothing: they piled up in zlib's
    unused_data until the deadline (a fast server fills memory in 120 s), uncounted by the size cap
    (issue 43 round-3b probe)."""
    with HostileServer("endless_after_gzip") as srv:
        j = OpenAIJudge("m", srv.url, cache=None, timeout_s=5.0, max_retries=0, concurrency=1)
        j.max_response_bytes = 1 << 20
        t0 = time.monotonic()
        with pytest.raises(JudgeError, match="the answer is larger than 1,048,576 bytes on the wire"):
            j.judge(["q"])
        assert time.monotonic() - t0 < 4.0
    assert srv.sent < 8 << 20


def test_a_judge_timeout_past_a_day_is_refused_at_load():
    """``timeout_s: 1e308`` passed and every request then failed (OverflowError: timestamp out of
    range) (issue 43 round-3b probe)."""
    from factlab.sections import JudgeSection

    with pytest.raises(ValueError, match="less than or equal to 86400"):
        JudgeSection(timeout_s=1e308)


def test_retry_sleeps_are_capped_in_total_and_refused_at_load(monkeypatch):
    """``max_retries: 30, backoff_s: 1`` scheduled about 34 years of sleeps."""
    import httpx

    from factlab.judges import transport as judge_transport
    from factlab.sections import JudgeSection

    with pytest.raises(ValueError, match=r"max_retries: 30 with backoff_s: 1 schedules 34.0 years of sleeps"):
        JudgeSection(max_retries=30, backoff_s=1)
    JudgeSection(max_retries=11, backoff_s=1)  # 2047 s: within the hour
    slept = []
    monkeypatch.setattr(judge_transport.time, "sleep", slept.append)
    j = OpenAIJudge("m", "http://127.0.0.1:9/v1", cache=None, max_retries=30, backoff_s=1.0)  # built in code
    monkeypatch.setattr(j, "_http", httpx.Client(transport=httpx.MockTransport(lambda r: httpx.Response(503))))
    with pytest.raises(JudgeError, match=r"past 3,600 s of backoff for one request \(12 attempts made\)"):
        j.judge(["q"])
    assert sum(slept) <= judge_transport.MAX_TOTAL_BACKOFF_S and len(slept) == 11


@pytest.mark.parametrize("body", ["echo_401", "echo_400", "echo_malformed"])
def test_a_key_the_server_echoes_never_reaches_the_error(body, monkeypatch):
    """A gateway's "invalid key sk-..." or a proxy echoing the request's headers: the judge error (which
    reaches manifest.json, the notebook and its report) showed the API key (issue 43 round 3c probe)."""
    key = "sk-test-0123456789abcdef-SECRET"
    monkeypatch.setenv("FACTLAB_TEST_API_KEY", key)
    with HostileServer(body) as srv:
        j = OpenAIJudge("m", srv.url, cache=None, timeout_s=5.0, max_retries=0, concurrency=1,
                        api_key_env="FACTLAB_TEST_API_KEY")
        with pytest.raises(JudgeError) as info:
            j.judge(["q"])
    assert "***" in str(info.value) and "SECRET" not in str(info.value) and "0123456789" not in str(info.value)

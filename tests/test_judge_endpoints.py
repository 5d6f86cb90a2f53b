"""The OpenAI-compatible judge over several endpoints, against loopback servers: load shared
between replicas, an endpoint dying mid-run with the other taking its load, all endpoints
down, the health check before a run, prefill as a capability of the server (vLLM's
continue, the completions route with a local chat template, none) with a server that
ignores ``continue_final_message`` detected, the list form of ``judge.base_url`` in params,
and the token / cost estimate."""

import json
import logging
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from factlab.config import ConfigError, Section, dump_config, validate
from factlab.judges import JudgeError, OpenAIJudge, TransformersJudge, make_judge
from factlab.sections import JudgeSection
from factlab.serve import JudgeServer

from test_judge_faults import FaultyServer

PREFIX = '{"SCORE": '


_SHARED_LOCK = threading.Lock()


class Replica:
    """A loopback OpenAI-compatible server. ``answer(text) -> str`` answers a chat request's
    user message (or a completions request's prompt). ``honours_continue``: a final assistant
    message is continued (vLLM) rather than ignored (llama.cpp: the answer starts from
    scratch). ``models_status``: the status of ``GET /v1/models``. ``fail_first`` requests get
    ``status`` (with ``retry_after`` as the Retry-After header). ``shared``: a dict counting
    requests in flight across replicas."""

    def __init__(self, answer=lambda text: "ok", *, honours_continue=True, delay=0.0, models_status=200,
                 fail_first=0, status=503, retry_after=None, shared=None, model="m", port=0):
        self.answer, self.honours_continue, self.delay = answer, honours_continue, delay
        self.models_status, self.fail_first, self.status, self.retry_after = models_status, fail_first, status, retry_after
        self.shared = shared if shared is not None else {"in_flight": 0, "max": 0}
        self.requests, self.gets, self.lock = [], 0, threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _leave(self):
                # a request leaves flight before its reply is written: the client may read the reply and
                # send its next request before this thread runs again (a count past the bound, seen in CI)
                if getattr(self, "_counted", False):
                    self._counted = False
                    with _SHARED_LOCK:
                        outer.shared["in_flight"] -= 1

            def _send(self, status, payload, headers=()):
                self._leave()
                data = json.dumps(payload).encode()
                self.send_response(status)
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self):
                with outer.lock:
                    outer.gets += 1
                if self.path == "/v1/models":
                    self._send(outer.models_status, {"object": "list", "data": [{"id": model}]})
                else:
                    self._send(404, {"error": "no such path"})

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with outer.lock:
                    outer.requests.append({"path": self.path, "body": body})
                    n = len(outer.requests)
                with _SHARED_LOCK:  # one lock for the count the replicas share
                    outer.shared["in_flight"] += 1
                    outer.shared["max"] = max(outer.shared["max"], outer.shared["in_flight"])
                self._counted = True
                try:
                    time.sleep(outer.delay)
                    if n <= outer.fail_first:
                        headers = [("Retry-After", str(outer.retry_after))] if outer.retry_after is not None else []
                        self._send(outer.status, {"error": "busy"}, headers)
                    elif self.path == "/v1/completions":
                        self._send(200, {"choices": [{"text": outer.answer(body["prompt"])}],
                                         "usage": {"prompt_tokens": 7, "completion_tokens": 3}})
                    else:
                        msgs = body["messages"]
                        prefill = msgs[-1]["content"] if msgs[-1]["role"] == "assistant" else None
                        user = msgs[-2 if prefill is not None else -1]["content"]
                        text = outer.answer(user)
                        if prefill is not None and outer.honours_continue:
                            text = text[len(prefill):] if text.startswith(prefill) else text
                        self._send(200, {"choices": [{"message": {"role": "assistant", "content": text}}],
                                         "usage": {"prompt_tokens": 7, "completion_tokens": 3}})
                except (BrokenPipeError, ConnectionResetError):
                    pass
                finally:
                    self._leave()

        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self):
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *a):
        self.httpd.shutdown()
        self.httpd.server_close()


def _dead_url():
    """A loopback URL where nothing listens (connection refused)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}/v1"


def _judge(urls, **kw):
    kw = {"cache": None, "backoff_s": 0.01, "max_retries": 1, "timeout_s": 5, **kw}
    return OpenAIJudge("m", urls, **kw)


def _echo(text):
    return f"answer to {text}"


PROMPTS = [f"question {i}" for i in range(12)]


# ------------------------------------------------------------------ load balancing and failover


def test_two_endpoints_share_the_load_within_the_concurrency_bound():
    shared = {"in_flight": 0, "max": 0}
    with Replica(_echo, delay=0.05, shared=shared) as a, Replica(_echo, delay=0.05, shared=shared) as b:
        j = _judge([a.url, b.url], concurrency=4)
        assert j.judge(PROMPTS) == [_echo(p) for p in PROMPTS]  # order kept
    assert len(a.requests) + len(b.requests) == 12
    assert 4 <= len(a.requests) <= 8 and 4 <= len(b.requests) <= 8  # least in flight: both carry about half
    assert 1 < shared["max"] <= 4  # the bound holds over all endpoints together
    assert j.stats["failovers"] == 0 and j.stats["retries"] == 0


def test_one_endpoint_dies_mid_run_and_the_other_takes_its_load(caplog):
    """The dying server drops the connection of its third request, then refuses: every
    answer still comes back, from the other endpoint, without spending a retry."""
    with FaultyServer(_echo, die_after=2) as dying, Replica(_echo, delay=0.02) as other, \
            caplog.at_level(logging.WARNING):
        j = _judge([dying.url, other.url], max_retries=0, concurrency=2)
        assert j.judge(PROMPTS) == [_echo(p) for p in PROMPTS]
    assert dying.answered == 2 and len(other.requests) == 10
    assert j.stats["failovers"] >= 1 and j.stats["endpoints_down"] == 1 and j.stats["failures"] == 0
    assert f"judge endpoint {dying.url} is down" in caplog.text
    assert j.summary()["failovers"] == j.stats["failovers"]


def test_all_endpoints_down_is_a_judge_error_naming_each():
    urls = [_dead_url(), _dead_url()]
    j = _judge(urls, max_retries=1)
    with pytest.raises(JudgeError, match=r"all 2 endpoints are down") as e:
        j.judge(["q"])
    assert all(u in str(e.value) for u in urls) and "failed after 2 attempts" in str(e.value)
    assert j.stats["failures"] == 1


def test_a_down_endpoint_is_tried_again_after_a_while():
    url = _dead_url()
    port = int(url.rsplit(":", 1)[1].split("/")[0])
    with Replica(_echo) as b:
        j = _judge([url, b.url], max_retries=0)
        j.revive_after_s = 0.2
        assert j.judge(["q1", "q2"]) == [_echo("q1"), _echo("q2")]
        assert j.stats["endpoints_down"] == 1
        with Replica(_echo, port=port) as back:
            time.sleep(0.3)
            assert j.judge([f"r{i}" for i in range(4)]) == [_echo(f"r{i}") for i in range(4)]
    assert len(back.requests) >= 1  # revived: it takes requests again
    assert j.endpoints[0].down_since is None


def test_client_errors_are_not_failed_over_or_retried():
    with Replica(fail_first=10, status=401) as a, Replica(fail_first=10, status=401) as b:
        with pytest.raises(JudgeError, match="OPENAI_API_KEY"):
            _judge([a.url, b.url], max_retries=3).judge(["q"])
    assert len(a.requests) + len(b.requests) == 1


def test_retry_after_is_honoured_over_the_backoff():
    with Replica(_echo, fail_first=1, status=429, retry_after=0.3) as a:
        j = _judge(a.url, backoff_s=30.0, max_retries=2, concurrency=1)
        t0 = time.perf_counter()
        assert j.judge(["q"]) == [_echo("q")]
        took = time.perf_counter() - t0
    assert 0.3 <= took < 5 and j.stats["retries"] == 1


def test_a_retry_prefers_another_endpoint():
    with Replica(_echo, fail_first=10**6, status=503) as busy, Replica(_echo) as ok:
        j = _judge([busy.url, ok.url], max_retries=1, concurrency=1)
        j.endpoints[1].sent = 5  # the busy one is picked first
        assert j.judge(["q"]) == [_echo("q")]
    assert len(busy.requests) == 1 and len(ok.requests) == 1 and j.stats["retries"] == 1


# ------------------------------------------------------------------ health check


def test_health_check_names_the_endpoint_that_is_down():
    dead = _dead_url()
    with Replica() as up:
        cfg = JudgeSection(backend="openai", model="m", base_url=[up.url, dead], cache=False)
        with pytest.raises(JudgeError, match=r"down before the run \(1 of 2 answered") as e:
            make_judge(cfg)
        assert dead in str(e.value) and up.url not in str(e.value) and "health_check: false" in str(e.value)
        assert up.gets == 1 and up.requests == []  # one GET, no judge call spent
        assert make_judge(cfg, health_check=False).endpoints[1].shown == dead  # skippable
        assert make_judge(cfg, base_url=up.url).check_endpoints() == {up.url: ["m"]}


def test_health_check_sees_a_loading_server_and_a_refused_key(monkeypatch):
    monkeypatch.setenv("FACTLAB_TEST_API_KEY", "k")
    with Replica(models_status=503) as loading, Replica(models_status=401) as locked, \
            Replica(models_status=404) as no_route:
        j = _judge([loading.url, locked.url, no_route.url], api_key_env="FACTLAB_TEST_API_KEY")
        with pytest.raises(JudgeError) as e:
            j.check_endpoints()
    msg = str(e.value)
    assert f"{loading.url}: HTTP 503" in msg and f"{locked.url}: refused the API key" in msg
    assert no_route.url not in msg  # it answered: alive, even without that route


def test_health_check_warns_when_the_model_is_not_served(caplog):
    with Replica(model="other-model") as a, caplog.at_level(logging.WARNING):
        _judge(a.url).check_endpoints()
    assert "'m' is not among the models" in caplog.text


def test_health_check_against_factlab_serve(tiny_model_and_tokenizer):
    model, tok = tiny_model_and_tokenizer
    with JudgeServer("tiny-random-smollm2", model_obj=model, tokenizer=tok) as s:
        j = make_judge(JudgeSection(backend="openai", model="tiny-random-smollm2", base_url=s.url, cache=False))
        assert j.check_endpoints() == {s.url: ["tiny-random-smollm2"]}


# ------------------------------------------------------------------ prefill modes


def test_prefill_continue_sends_vllms_flags():
    with Replica(lambda t: PREFIX + "1}") as a:
        j = _judge(a.url)
        assert j.judge(["q"], prefix=PREFIX) == [PREFIX + "1}"]
    body = a.requests[0]["body"]
    assert body["messages"][-1] == {"role": "assistant", "content": PREFIX}
    assert body["continue_final_message"] is True and body["add_generation_prompt"] is False
    assert j.stats["prefill_ignored"] == 0


def test_a_server_that_ignores_continue_is_detected_not_nested(caplog):
    """llama.cpp's server answers a prefilled request from scratch: the text would read
    ``{"SCORE": {"SCORE": 1}``; the repeated prefix is dropped, counted, warned about once."""
    with Replica(lambda t: '{"SCORE": 1}', honours_continue=False) as a, caplog.at_level(logging.WARNING):
        j = _judge(a.url)
        out = j.judge(["q1", "q2", "q3"], prefix=PREFIX)
    assert out == ['{"SCORE": 1}'] * 3
    assert j.stats["prefill_ignored"] == 3 and j.summary()["prefill_ignored"] == 3
    warnings = [r for r in caplog.records if "continue_final_message" in r.getMessage()]
    assert len(warnings) == 1 and "prefill_mode" in warnings[0].getMessage()


def test_prefill_none_sends_no_prefix_and_adds_it_only_when_missing():
    answers = {"a": "1}", "b": ' {"SCORE": 0}'}
    with Replica(lambda t: answers[t]) as srv:
        j = _judge(srv.url, prefill_mode="none")
        assert j.judge(["a", "b"], prefix=PREFIX) == [PREFIX + "1}", '{"SCORE": 0}']
    for r in srv.requests:
        assert r["body"]["messages"][-1]["role"] == "user" and "continue_final_message" not in r["body"]
    assert j.stats["prefill_ignored"] == 0
    assert j.cache_key("a") != _judge(srv.url).cache_key("a")  # another mode, another cached answer


def test_prefill_completions_posts_the_locally_templated_prompt(tokenizer):
    with Replica(lambda prompt: "1}") as srv:
        j = _judge(srv.url, prefill_mode="completions", tokenizer=tokenizer, system="Be brief.")
        assert j.judge(["Is Paris in France?"], prefix=PREFIX) == [PREFIX + "1}"]
    req = srv.requests[0]
    want = tokenizer.apply_chat_template([{"role": "system", "content": "Be brief."},
                                          {"role": "user", "content": "Is Paris in France?"}],
                                         tokenize=False, add_generation_prompt=True) + PREFIX
    assert req["path"] == "/v1/completions" and req["body"]["prompt"] == want and "messages" not in req["body"]
    assert j.stats["prompt_tokens"] == 7 and j.stats["completion_tokens"] == 3


def test_prefill_completions_through_factlab_serve_equals_the_local_judge(tiny_model_and_tokenizer):
    model, tok = tiny_model_and_tokenizer
    prompts = ["What is the capital of France? Answer in JSON.", "Is the sky green? Answer in JSON."]
    local = TransformersJudge(max_new_tokens=8, cache=None, model_obj=model, tokenizer=tok)
    with JudgeServer("tiny-random-smollm2", model_obj=model, tokenizer=tok) as s:
        remote = _judge(s.url, prefill_mode="completions", tokenizer=tok, max_new_tokens=8, timeout_s=300)
        assert remote.judge(prompts, prefix=PREFIX) == local.judge(prompts, prefix=PREFIX)
        assert s.stats["requests"] == 2 and s.stats["bad_requests"] == 0


def test_prefill_completions_without_a_tokenizer_fails_at_build(tmp_path):
    with pytest.raises(JudgeError, match=r"prefill_mode: completions .*tokenizer.*could not be loaded"):
        OpenAIJudge(str(tmp_path), "http://127.0.0.1:1/v1", prefill_mode="completions",
                    cache=None)
    with pytest.raises(JudgeError, match="prefill_mode must be one of"):
        OpenAIJudge("m", "http://127.0.0.1:1/v1", prefill_mode="guess", cache=None)


# ------------------------------------------------------------------ params


class _Wrapper(Section):
    judge: JudgeSection


def test_base_url_list_in_params_validates_and_dumps_redacted(monkeypatch):
    cfg = validate({"backend": "openai", "base_url": ["https://u:s3cret@a.example.com/v1",
                                                      "https://b.example.com/v1?api_key=s3cret"]}, JudgeSection)
    assert cfg.endpoints()[0].startswith("https://u:s3cret@")  # the run uses the real URLs
    dumped = dump_config(cfg)
    assert "s3cret" not in dumped and "***@a.example.com" in dumped and "api_key=***" in dumped
    assert JudgeSection(backend="openai", base_url="http://localhost:8000/v1").endpoints() == \
        ["http://localhost:8000/v1"]  # one URL, as before
    j = make_judge(cfg, health_check=False, cache=False)
    assert [e.shown for e in j.endpoints] == ["https://***@a.example.com/v1", "https://b.example.com/v1?api_key=***"]
    assert "s3cret" not in repr(j) and "s3cret" not in json.dumps(j.answer_settings())


@pytest.mark.parametrize("urls, where, what", [
    ([], "judge.base_url", "needs base_url"),
    (["http://a:1/v1", ""], "judge.base_url.1", "empty"),
    (["http://a:1/v1", "a:2/v1"], "judge.base_url.1", "not an http"),
    (["http://a:1/v1", "http://a:1/v1/"], "judge.base_url.1", "listed twice"),
])
def test_bad_endpoint_lists_fail_naming_the_item(urls, where, what):
    with pytest.raises(ConfigError, match=rf"'{where}'.*{what}"):
        validate({"judge": {"backend": "openai", "base_url": urls}}, _Wrapper)


def test_a_key_over_http_is_refused_per_endpoint(monkeypatch):
    monkeypatch.setenv("FACTLAB_TEST_API_KEY", "k")
    with pytest.raises(ConfigError, match=r"'judge.base_url.1'.*unencrypted"):
        validate({"judge": {"backend": "openai", "api_key_env": "FACTLAB_TEST_API_KEY",
                            "base_url": ["https://a.example.com/v1", "http://10.0.0.5:8000/v1"]}}, _Wrapper)


# ------------------------------------------------------------------ cost estimate


def test_estimate_counts_tokens_and_dollars():
    j = _judge("http://127.0.0.1:1/v1", system="S" * 8, max_new_tokens=10,
               price_per_1k_prompt_tokens=2.0, price_per_1k_completion_tokens=4.0)
    est = j.estimate(["a" * 40, "b" * 80], prefix="{}")
    # (40 + 8 + 2) + (80 + 8 + 2) = 140 chars -> 35 tokens; 2 x 10 completion tokens at most
    assert est == {"prompts": 2, "prompt_chars": 140, "est_prompt_tokens": 35, "max_completion_tokens": 20,
                   "method": "chars/4", "est_cost_usd": pytest.approx(35 / 1000 * 2.0 + 20 / 1000 * 4.0)}
    assert _judge("http://127.0.0.1:1/v1").estimate(["abc"])["est_cost_usd"] is None  # no prices, no dollars


def test_the_estimate_is_logged_once_before_the_first_call_and_cost_is_summed(caplog):
    with Replica(_echo) as a, caplog.at_level(logging.INFO, logger="factlab.judges"):
        j = _judge(a.url, max_new_tokens=10, price_per_1k_prompt_tokens=1.0, price_per_1k_completion_tokens=2.0)
        j.judge(["a" * 40, "b" * 40])
        j.judge(["c", "d"])
    lines = [r.getMessage() for r in caplog.records if "first batch" in r.getMessage()]
    assert len(lines) == 1
    assert "2 prompts" in lines[0] and "~20 prompt tokens" in lines[0] and "at most 20 completion tokens" in lines[0]
    assert "$0.0600" in lines[0]
    # actual usage: 4 calls x (7 prompt + 3 completion) tokens
    assert j.summary()["cost_usd"] == pytest.approx(28 / 1000 * 1.0 + 12 / 1000 * 2.0)


def test_the_estimate_is_printed_when_logging_is_not_configured(capsys, monkeypatch):
    from factlab.judges import openai as judge_openai  # the estimate is logged there

    monkeypatch.setattr(judge_openai.log, "isEnabledFor", lambda level: False)
    with Replica(_echo) as a:
        _judge(a.url).judge(["q"])
    assert "first batch: 1 prompts" in capsys.readouterr().err


def test_factlab_serve_reads_a_completions_request():
    from factlab.serve import RequestError, parse_completion_request

    r = parse_completion_request({"prompt": "<|im_start|>user\nHi<|im_end|>\n" + PREFIX, "max_tokens": 4})
    assert (r.raw, r.max_tokens, r.prefix) == ("<|im_start|>user\nHi<|im_end|>\n" + PREFIX, 4, "")
    for bad in ({}, {"prompt": ["a", "b"]}, []):
        with pytest.raises(RequestError, match="'prompt'"):
            parse_completion_request(bad)

"""factlab.serve: the local OpenAI-compatible endpoint, exercised with the real embedded model
through the real ``openai`` judge backend."""

import json
import re
import urllib.error
import urllib.request

import pytest

from factlab.judges import JudgeError, OpenAIJudge, TransformersJudge
from factlab.serve import JudgeServer, RequestError, parse_request

PROMPTS = ["What is the capital of France? Answer in one word.",
           "Is the sky green? Answer yes or no.",
           "Name a colour.",
           "Count from one to three."]


@pytest.mark.parametrize("body, where", [
    ([], "JSON object"),
    ({}, "'messages'"),
    ({"messages": []}, "'messages'"),
    ({"messages": [{"role": "user"}]}, "messages[0]"),
    ({"messages": [{"role": "tool", "content": "x"}]}, "messages[0]"),
    ({"messages": [{"role": "user", "content": 3}]}, "messages[0]"),
    ({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]}, "one user message"),
    ({"messages": [{"role": "assistant", "content": "a"}]}, "one user message"),
    ({"messages": [{"role": "user", "content": "a"}], "max_tokens": 0}, "'max_tokens'"),
    ({"messages": [{"role": "user", "content": "a"}], "max_tokens": "9"}, "'max_tokens'"),
    ({"messages": [{"role": "user", "content": "a"}], "max_tokens": 10**9}, "'max_tokens'"),
    ({"messages": [{"role": "user", "content": "a"}], "temperature": True}, "'temperature'"),
    ({"messages": [{"role": "user", "content": "a"}], "top_p": 2}, "'top_p'"),
])
def test_parse_request_names_the_bad_field(body, where):
    with pytest.raises(RequestError, match=re.escape(where)):
        parse_request(body)


def test_parse_request_reads_system_user_and_prefill():
    r = parse_request({"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "U"},
                                    {"role": "assistant", "content": '{"SCORE": '}],
                       "max_tokens": 7, "temperature": 0.5, "top_p": 0.9, "seed": 3})
    assert (r.system, r.user, r.prefix, r.max_tokens, r.temperature, r.top_p, r.seed) == \
        ("S", "U", '{"SCORE": ', 7, 0.5, 0.9, 3)
    plain = parse_request({"messages": [{"role": "user", "content": "U"}]}, default_max_tokens=5)
    assert (plain.system, plain.prefix, plain.max_tokens, plain.temperature) == (None, "", 5, 0.0)


@pytest.fixture(scope="module")
def server(tiny_model_and_tokenizer):
    model, tok = tiny_model_and_tokenizer
    with JudgeServer("tiny-random-smollm2", model_obj=model, tokenizer=tok, max_batch=8, wait_s=0.05) as s:
        yield s


def test_served_answers_equal_the_local_judge(server, tiny_model_and_tokenizer):
    """The same greedy answers (and prefill continuation) over HTTP as from TransformersJudge,
    with the usage counted in tokens; concurrent requests are batched into fewer generations."""
    model, tok = tiny_model_and_tokenizer
    local = TransformersJudge(max_new_tokens=12, cache=None, model_obj=model, tokenizer=tok)
    remote = OpenAIJudge("tiny-random-smollm2", server.url, cache=None, concurrency=4, max_new_tokens=12)
    before = dict(server.stats)
    assert remote.judge(PROMPTS) == local.judge(PROMPTS)
    assert remote.judge(PROMPTS[:2], prefix="Answer:") == local.judge(PROMPTS[:2], prefix="Answer:")
    assert all(a.startswith("Answer:") for a in remote.judge(PROMPTS[:1], prefix="Answer:"))
    assert remote.stats["calls"] == 7 and remote.stats["failures"] == 0
    assert remote.stats["prompt_tokens"] > 7 * 10 and 0 < remote.stats["completion_tokens"] <= 7 * 12
    assert server.stats["requests"] - before.get("requests", 0) == 7
    assert server.stats["batches"] - before.get("batches", 0) < 7  # 4 concurrent requests share a generation
    assert server.max_batch_seen >= 2


def test_bad_requests_get_400_and_the_server_keeps_serving(server):
    def post(data: bytes):
        req = urllib.request.Request(server.url + "/chat/completions", data=data,
                                     headers={"Content-Type": "application/json"}, method="POST")
        return urllib.request.urlopen(req, timeout=60)

    for data in (b"\xff\xfe not utf-8", b"{not json", json.dumps({"messages": "hi"}).encode()):
        with pytest.raises(urllib.error.HTTPError) as err:
            post(data)
        assert err.value.code == 400
        assert "message" in json.loads(err.value.read())["error"]
    with pytest.raises(urllib.error.HTTPError) as err:
        urllib.request.urlopen(server.url + "/nope", timeout=10)
    assert err.value.code == 404
    models = json.loads(urllib.request.urlopen(server.url + "/models", timeout=10).read())
    assert models["data"][0]["id"] == "tiny-random-smollm2"
    ok = json.loads(post(json.dumps({"messages": [{"role": "user", "content": "Hi"}],
                                     "max_tokens": 3}).encode()).read())
    assert isinstance(ok["choices"][0]["message"]["content"], str)
    assert 1 <= ok["usage"]["completion_tokens"] <= 3


@pytest.mark.parametrize("length", ["-1", "+5", " 12abc", "99999999999999999999", str(8 * 1024 * 1024 + 1)])
def test_a_body_length_that_is_not_a_bounded_count_is_refused_at_once(server, length):
    """``Content-Length: -1`` made the server read to the end of the stream, past its 8 MB
    limit: a client that keeps sending held it forever. It answers 400 without reading on."""
    import socket

    host, port = server.url.split("//")[1].split("/")[0].rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=5) as sock:
        sock.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: {length}\r\n"
                     f"Content-Type: application/json\r\n\r\n{{\"messages\": ".encode())  # and more, never ending
        sock.settimeout(5)
        head = b""
        while chunk := sock.recv(65536):  # the server answers and closes the connection
            head += chunk
        head = head.decode("latin-1")
    assert head.startswith("HTTP/1.0 400") or head.startswith("HTTP/1.1 400"), head
    assert "Content-Length must be" in head or "over the 8388608-byte limit" in head, head


def test_a_failing_generation_answers_500_not_a_hang(tiny_model_and_tokenizer, monkeypatch):
    model, tok = tiny_model_and_tokenizer
    with JudgeServer("m", model_obj=model, tokenizer=tok, wait_s=0.0) as s:
        monkeypatch.setattr(s, "_answer", lambda reqs: (_ for _ in ()).throw(RuntimeError("CUDA out of memory")))
        judge = OpenAIJudge("m", s.url, cache=None, max_retries=0, max_new_tokens=4)
        with pytest.raises(JudgeError, match="HTTP 500.*CUDA out of memory"):
            judge.judge(["Hi"])
        assert s.stats["errors"] == 1


@pytest.mark.parametrize("sent", [b"", b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n",
                                  b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 1000\r\n\r\n{"])
def test_a_client_that_never_sends_its_whole_request_is_closed_at_the_deadline(tiny_model_and_tokenizer, sent):
    """A client that sent nothing, stopped inside its headers or never sent the body it promised
    held a handler thread forever (no socket timeout) (issue 43 round-3b probe)."""
    import socket
    import time

    model, tok = tiny_model_and_tokenizer
    with JudgeServer("m", model_obj=model, tokenizer=tok, wait_s=0.0) as s:
        s.read_deadline_s = 1.0
        host, port = s.httpd.server_address[:2]
        with socket.create_connection((host, port), timeout=10) as sock:
            sock.sendall(sent)
            t0 = time.monotonic()
            while sock.recv(65536):  # the server closes the connection (after a 400, or at once)
                pass
            assert time.monotonic() - t0 < 5.0
        judge = OpenAIJudge("m", s.url, cache=None, max_retries=0, max_new_tokens=2)
        assert len(judge.judge(["Hi"])) == 1  # a whole request later is still answered

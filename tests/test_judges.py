"""factlab.judges: tolerant parsing (fuzzed), the cache, the local transformers judge, and
the OpenAI-compatible HTTP judge against a live loopback server answering with the
embedded default model (including a server that fails and recovers)."""

import json
import logging
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from factlab.config import ConfigError, validate
from factlab.judges import (JudgeCache, JudgeError, JudgeUnavailable, OpenAIJudge, TransformersJudge, make_judge,
                            parse_json, parse_score)
from factlab.sections import JudgeSection

# ------------------------------------------------------------------ parse_json / parse_score


@pytest.mark.parametrize("text, expected", [
    ('{"SCORE": 1}', {"SCORE": 1}),
    ('```json\n{"REASONING": "fine", "SCORE": "1"}\n```\nThat is my answer.', {"REASONING": "fine", "SCORE": "1"}),
    ("```\n[1, 2, 3]\n```", [1, 2, 3]),
    ("Sure! Here it is: {'SCORE': 0, 'REASONING': 'contradicts [2]'} -- hope that helps",
     {"SCORE": 0, "REASONING": "contradicts [2]"}),
    ("\u201cSCORE\u201d", None),
    ("{\u201cSCORE\u201d: \u201c7\u201d}", {"SCORE": "7"}),
    ('{"a": [1, 2,], "b": True, "c": None,}', {"a": [1, 2], "b": True, "c": None}),
    ('{"REASONING": "a } inside a string, and {", "SCORE": 1}', {"REASONING": "a } inside a string, and {", "SCORE": 1}),
    ('["Paris is the capital of France.", "It has 2 million people."]',
     ["Paris is the capital of France.", "It has 2 million people."]),
    ("noise { not json ] then {\"ok\": 1}", {"ok": 1}),
    ("", None), ("   ", None), ("no json here", None), ("SCORE: 1", None), ("42", None),
])
def test_parse_json_cases(text, expected):
    assert parse_json(text) == expected


def test_parse_json_never_evaluates_code():
    evil = "{'a': __import__('os').system('echo pwned')}"
    assert parse_json(evil) is None
    assert parse_json("[x for x in range(3)]") is None
    assert parse_json(None) is None and parse_json(123) is None


def test_parse_json_pathological_input_is_bounded():
    t0 = time.perf_counter()
    assert parse_json("[" * 100_000) is None
    assert parse_json('{"a": ' * 40_000) is None
    assert time.perf_counter() - t0 < 30  # a sanity bound, not a benchmark: it must not hang


@pytest.mark.parametrize("obj, expected", [
    ({"SCORE": 1}, 1.0), ({"SCORE": "1"}, 1.0), ({"score": " 7 "}, 7.0), ({"Score": "7/10"}, 7.0),
    ({"SCORE": 0.5}, 0.5), ({"SCORE": [1]}, 1.0), ({"outer": {"SCORE": 3}}, 3.0), ([{"SCORE": 2}], 2.0),
    ({"SCORE": "high"}, None), ({"SCORE": None}, None), ({"other": 1}, None), ({"SCORE": float("nan")}, None),
    ('"SCORE": 1', 1.0), ("score = 7 because", 7.0), ("SCORE: '0'", 0.0), ("\u201cSCORE\u201d: \u201c1\u201d", 1.0),
    ("SCORES are fine", None), (None, None), (12, None),
])
def test_parse_score(obj, expected):
    assert parse_score(obj) == expected


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4),
    max_leaves=12,
)
json_containers = st.one_of(st.lists(json_values, max_size=4),
                            st.dictionaries(st.text(max_size=8), json_values, max_size=4))
prose = st.text(alphabet=st.characters(blacklist_characters="{}[]\"'`\u201c\u201d\u2018\u2019"), max_size=40)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=400))
def test_parse_json_fuzz_never_raises(text):
    out = parse_json(text)
    assert out is None or isinstance(out, (dict, list))
    parse_score(text)
    parse_score(out)


@settings(max_examples=300, deadline=None)
@given(json_containers, prose, prose, st.booleans())
def test_parse_json_recovers_embedded_json(obj, before, after, fenced):
    payload = json.dumps(obj)
    text = f"{before}\n```json\n{payload}\n```\n{after}" if fenced else f"{before} {payload} {after}"
    assert parse_json(text) == obj


def test_a_code_fence_inside_a_json_string_is_no_fence():
    # found by the property test above (CI, 2026-11-26): the ``` inside the keys read as a fence
    # whose contents, '": []}, {"', parsed as []
    assert parse_json(' [{"```": []}, {"```": null}] ') == [{"```": []}, {"```": None}]
    assert parse_json('{"why": "see ```json {\\"a\\": 1}```", "label": 1}') == {"why": 'see ```json {"a": 1}```', "label": 1}
    # a real fence still wins over braces in the prose before it, and over a JSON before it
    assert parse_json('I think {maybe}.\n```json\n{"a": 1}\n```') == {"a": 1}
    # found by the property test (CI, 2026-11-27): the ``` in a string closed the real fence early,
    # leaving '{"0": [], "": ["' whose first span, [], was returned
    assert parse_json('\n```json\n{"0": [], "": ["```"]}\n```\n') == {"0": [], "": ["```"]}
    assert parse_json('draft {"a": 1}, final:\n```json\n{"a": 2}\n```') == {"a": 2}


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 10), prose, st.sampled_from(['"{}"', "{}", "'{}'"]), st.booleans())
def test_parse_score_string_or_number(score, trailing, fmt, fenced):
    body = '{"REASONING": "ok", "SCORE": ' + fmt.format(score) + "}"
    text = f"```json\n{body}\n```{trailing}" if fenced else body + trailing
    assert parse_score(parse_json(text)) == float(score)
    assert parse_score(text) == float(score)


# ------------------------------------------------------------------ config and factory


def test_judge_section_rejects_unknown_keys():
    with pytest.raises(ConfigError, match="unknown key 'api_key'"):
        validate({"api_key": "sk-secret"}, JudgeSection)
    with pytest.raises(ConfigError, match="backend"):
        validate({"backend": "llama.cpp"}, JudgeSection)


def test_vllm_backend_absent_is_a_clear_error():
    pytest.importorskip("torch")
    try:
        import vllm  # noqa: F401
        pytest.skip("vLLM is installed here")
    except ImportError:
        pass
    with pytest.raises(JudgeUnavailable, match=r"factlab\[gpu\]"):
        make_judge(JudgeSection(backend="vllm", model="Qwen/Qwen3-32B"))


def test_openai_backend_needs_base_url():
    with pytest.raises(ValueError, match="base_url"):
        JudgeSection(backend="openai")
    with pytest.raises(JudgeError, match="base_url"):  # a judge built around the params check
        make_judge(JudgeSection(), backend="openai")


# ------------------------------------------------------------------ cache


class EchoJudge(TransformersJudge):
    """A transformers judge whose backend call is replaced by a counter, to test caching."""

    def _generate(self, prompts, prefix=""):
        self.batches = getattr(self, "batches", []) + [list(prompts)]
        return [p.upper() for p in prompts]


def test_cache_makes_reruns_free(tmp_path):
    j = EchoJudge("echo", cache=tmp_path / "c.sqlite")
    assert j.judge(["a", "b", "a"]) == ["A", "B", "A"]
    assert j.batches == [["a", "b"]]  # duplicates generated once
    j2 = EchoJudge("echo", cache=tmp_path / "c.sqlite")  # a new process, same file
    assert j2.judge(["b", "a", "c"]) == ["B", "A", "C"]
    assert j2.batches == [["c"]]
    assert j2.stats["cache_hits"] == 2 and j2.stats["calls"] == 1
    # the key covers sampling and the model: a change misses the cache
    j3 = EchoJudge("echo", cache=tmp_path / "c.sqlite", temperature=0.7)
    j3.judge(["a"])
    assert j3.batches == [["a"]]
    j4 = EchoJudge("other-model", cache=tmp_path / "c.sqlite")
    j4.judge(["a"])
    assert j4.batches == [["a"]]
    assert j.judge([]) == []


def test_corrupt_cache_file_is_set_aside(tmp_path, caplog):
    p = tmp_path / "c.sqlite"
    p.write_bytes(b"this is not sqlite" * 100)
    with caplog.at_level(logging.WARNING):
        c = JudgeCache(p)
    assert len(c) == 0 and (tmp_path / "c.corrupt").exists()
    assert "unreadable" in caplog.text


def test_a_locked_cache_is_waited_for_or_refused_never_set_aside(tmp_path, monkeypatch):
    """Another process holding ``answers.sqlite`` locked is not corruption: its answers stay,
    in place; factlab waits ``lock_wait_s`` and then says who to wait for (issue 43)."""
    import sqlite3

    monkeypatch.setattr(JudgeCache, "lock_wait_s", 0.2)
    p = tmp_path / "answers.sqlite"
    c = JudgeCache(p)
    c.put_many({"k": "kept answer"})
    (tmp_path / "answers.corrupt").write_text("an earlier corrupt cache, kept")
    other = sqlite3.connect(p)
    other.execute("BEGIN EXCLUSIVE")  # another process writing for a long time
    try:
        with pytest.raises(JudgeError, match=r"answers.sqlite is locked by another process"):
            JudgeCache(p)
        with pytest.raises(JudgeError, match=r"locked by another process"):
            c.get_many(["k"])
    finally:
        other.rollback()
        other.close()
    assert JudgeCache(p).get_many(["k"]) == {"k": "kept answer"}  # the cache, whole, where it was
    assert (tmp_path / "answers.corrupt").read_text() == "an earlier corrupt cache, kept"
    assert sorted(f.name for f in tmp_path.iterdir()) == ["answers.corrupt", "answers.sqlite"]


def test_a_page_damaged_past_the_header_is_set_aside_too(tmp_path, caplog):
    """A cache whose header is whole but a later page is not opened fine, then every lookup was a
    bare ``DatabaseError: database disk image is malformed`` (issue 43 round-3b probe)."""
    p = tmp_path / "answers.sqlite"
    c = JudgeCache(p)
    c.put_many({f"k{i}": "x" * 200 for i in range(5000)})
    del c
    b = bytearray(p.read_bytes())
    mid = len(b) // 2 - (len(b) // 2) % 4096
    b[mid:mid + 4096] = b"\xff" * 4096
    p.write_bytes(bytes(b))
    c = JudgeCache(p)
    with caplog.at_level(logging.WARNING):
        assert c.get_many([f"k{i}" for i in range(5000)]) == {}
    assert "unreadable" in caplog.text and (tmp_path / "answers.corrupt").exists()
    c.put_many({"k": "v"})
    assert c.get_many(["k"]) == {"k": "v"} and len(c) == 1


@pytest.mark.parametrize("make, why", [
    (lambda p: p.mkdir(), "unable to open database file"),
    (lambda p: __import__("os").mkfifo(p), "disk I/O error"),
    (lambda p: __import__("sqlite3").connect(p).execute("CREATE TABLE answers (key TEXT)"), "no such column: text"),
])
def test_a_cache_that_is_no_cache_is_not_called_locked(tmp_path, make, why):
    """A folder, a FIFO or another program's ``answers`` table were reported as "locked by another
    process" (wait for it to finish), which no wait fixes (issue 43 round-3b probe)."""
    p = tmp_path / "answers.sqlite"
    make(p)
    with pytest.raises(JudgeError, match=rf"answers.sqlite cannot be used \({why}\).*move it away") as e:
        JudgeCache(p).get_many(["k"])
    assert "locked" not in str(e.value)


def test_a_second_corrupt_cache_keeps_the_first_and_a_symlinked_cache_is_refused(tmp_path):
    from factlab.paths import SymlinkRefused

    for n in range(2):
        (tmp_path / "c.sqlite").write_bytes(b"not sqlite %d" % n * 100)
        assert len(JudgeCache(tmp_path / "c.sqlite")) == 0
    assert (tmp_path / "c.corrupt").read_bytes().startswith(b"not sqlite 0")
    assert (tmp_path / "c.corrupt-2").read_bytes().startswith(b"not sqlite 1")
    victim = tmp_path / "victim.db"
    victim.write_text("precious")
    (tmp_path / "link.sqlite").symlink_to(victim)
    with pytest.raises(SymlinkRefused, match="link.sqlite is a symbolic link"):
        JudgeCache(tmp_path / "link.sqlite")
    assert victim.read_text() == "precious"


# ------------------------------------------------------------------ transformers judge (real model)


@pytest.fixture(scope="module")
def local_judge(model_and_tokenizer):
    model, tok = model_and_tokenizer  # the real model: its answers end at different lengths, so padding shows
    return TransformersJudge(model_obj=model, tokenizer=tok, max_new_tokens=12, batch_size=4, cache=None)


def test_transformers_judge_batched_matches_single(local_judge):
    prompts = ["What is the capital of France?", "Name a color.", "Say the word yes.",
               "Is the sky green? Answer yes or no.", "Count to three."]
    batched = local_judge.judge(prompts)
    single = [local_judge.judge([p])[0] for p in prompts]
    assert all(isinstance(t, str) and t.strip() for t in batched)
    # greedy decoding: left padding must not change the answers (allow one float-noise divergence)
    assert sum(a == b for a, b in zip(batched, single)) >= len(prompts) - 1
    assert local_judge.stats["calls"] == 2 * len(prompts)
    assert local_judge.stats["completion_tokens"] > 0 and local_judge.stats["prompt_tokens"] > 0


def test_transformers_judge_truncates_huge_prompts(tiny_model_and_tokenizer):
    model, tok = tiny_model_and_tokenizer
    j = TransformersJudge(model_obj=model, tokenizer=tok, max_new_tokens=4, max_prompt_tokens=64, cache=None)
    out = j.judge(["word " * 5000 + "What is 2+2?", ""])
    assert len(out) == 2 and j.stats["truncated_prompts"] == 1


# ------------------------------------------------------------------ HTTP judge against a live server


class _Server:
    """A loopback OpenAI-compatible server. ``answer(prompt) -> text``; ``fail_first`` requests
    get HTTP 503; ``delay`` seconds per request; records the max number in flight."""

    def __init__(self, answer, fail_first=0, delay=0.0, status=503):
        self.answer, self.fail_first, self.delay, self.status = answer, fail_first, delay, status
        self.requests, self.in_flight, self.max_in_flight = [], 0, 0
        self.lock = threading.Lock()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_POST(self):
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with outer.lock:
                    outer.requests.append({"body": body, "auth": self.headers.get("Authorization"),
                                           "path": self.path})
                    n = len(outer.requests)
                    outer.in_flight += 1
                    outer.max_in_flight = max(outer.max_in_flight, outer.in_flight)
                try:
                    if outer.delay:
                        time.sleep(outer.delay)
                    if n <= outer.fail_first:
                        status, data = outer.status, b'{"error": "warming up"}'
                    else:
                        text = outer.answer(body["messages"][-1]["content"])
                        status = 200
                        data = json.dumps({"choices": [{"message": {"role": "assistant", "content": text}}],
                                           "usage": {"prompt_tokens": 7, "completion_tokens": 3}}).encode()
                finally:
                    # out of flight before the reply: once the client reads it, it may send its next
                    # request before this thread runs again, and the count would overstate the bound
                    with outer.lock:
                        outer.in_flight -= 1
                try:
                    self.send_response(status)
                    if status == 200:
                        self.send_header("Content-Type", "application/json")
                        self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *a):
        self.httpd.shutdown()
        self.httpd.server_close()


def _http_judge(url, **kw):
    kw.setdefault("backoff_s", 0.01)
    return OpenAIJudge("smollm2-135m-instruct", url, cache=None, **kw)


def test_http_judge_answers_with_the_default_model(local_judge, monkeypatch, caplog):
    monkeypatch.setenv("FACTLAB_TEST_API_KEY", "sk-very-secret")
    lock = threading.Lock()

    def answer(prompt):
        with lock:  # one forward pass at a time on the shared model
            return local_judge.judge([prompt])[0]

    prompts = ["What is the capital of France?", "Name a color.", "Say the word yes."]
    with _Server(answer) as srv, caplog.at_level(logging.DEBUG):
        j = _http_judge(srv.url, api_key_env="FACTLAB_TEST_API_KEY", concurrency=2, max_new_tokens=12)
        out = j.judge(prompts)
    assert out == local_judge.judge(prompts)  # the same greedy answers as the local model
    assert len(srv.requests) == 3 and all(r["path"] == "/v1/chat/completions" for r in srv.requests)
    assert all(r["auth"] == "Bearer sk-very-secret" for r in srv.requests)
    assert srv.requests[0]["body"]["max_tokens"] == 12 and srv.requests[0]["body"]["temperature"] == 0.0
    assert j.stats["prompt_tokens"] == 21 and j.stats["completion_tokens"] == 9
    assert "sk-very-secret" not in caplog.text and "sk-very-secret" not in repr(j)


def test_http_judge_recovers_after_failures(caplog):
    with _Server(lambda p: '{"SCORE": 1}', fail_first=2) as srv, caplog.at_level(logging.WARNING):
        j = _http_judge(srv.url, max_retries=3, concurrency=1)
        assert j.judge(["is this supported?"]) == ['{"SCORE": 1}']
    assert len(srv.requests) == 3 and j.stats["retries"] == 2 and j.stats["failures"] == 0
    assert "retrying" in caplog.text


def test_http_judge_fails_clearly_after_last_retry():
    with _Server(lambda p: "x", fail_first=10**6) as srv:
        j = _http_judge(srv.url, max_retries=2, concurrency=1)
        with pytest.raises(JudgeError, match=r"failed after 3 attempts.*HTTP 503"):
            j.judge(["q"])
    assert len(srv.requests) == 3 and j.stats["failures"] == 1


def test_http_judge_does_not_retry_client_errors():
    with _Server(lambda p: "x", fail_first=10**6, status=400) as srv:
        with pytest.raises(JudgeError, match="HTTP 400"):
            _http_judge(srv.url, max_retries=3).judge(["q"])
    assert len(srv.requests) == 1
    with _Server(lambda p: "x", fail_first=10**6, status=401) as srv:
        with pytest.raises(JudgeError, match="OPENAI_API_KEY"):
            _http_judge(srv.url).judge(["q"])


def test_http_judge_timeout_then_error():
    with _Server(lambda p: "late", delay=1.0) as srv:
        j = _http_judge(srv.url, timeout_s=0.2, max_retries=1, concurrency=1)
        with pytest.raises(JudgeError, match="failed after 2 attempts"):
            j.judge(["q"])


def test_http_judge_unreachable_server():
    j = _http_judge("http://127.0.0.1:9/v1", max_retries=1, timeout_s=1)
    with pytest.raises(JudgeError, match="127.0.0.1:9"):
        j.judge(["q"])


def test_http_judge_bounded_concurrency():
    with _Server(lambda p: p[::-1], delay=0.15) as srv:
        j = _http_judge(srv.url, concurrency=3)
        prompts = [f"prompt {i}" for i in range(12)]
        assert j.judge(prompts) == [p[::-1] for p in prompts]  # order kept
    assert 1 < srv.max_in_flight <= 3


def test_http_judge_cache(tmp_path):
    with _Server(lambda p: "ok") as srv:
        j = OpenAIJudge("m", srv.url, cache=tmp_path / "c.sqlite", backoff_s=0.01)
        j.judge(["a", "b"])
        j.judge(["a", "b"])
    assert len(srv.requests) == 2 and j.stats["cache_hits"] == 2


@pytest.mark.parametrize("text", ["[" * 1999 + "]" * 1999, "{\"a\": " * 3000 + "1" + "}" * 3000,
                                  "```json\n" + "[" * 5000 + "]" * 5000 + "\n```", "(" * 3000 + ")" * 3000])
def test_deeply_nested_answers_are_unreadable_not_a_crash(text):
    """Issue 30: ``parse_win_judgment("[" * 1999 + "]" * 1999)`` let a RecursionError escape."""
    from factlab.eval.winrate import parse_win_judgment
    from factlab.parsing import loads_bounded

    assert parse_win_judgment(text) is None
    assert parse_json(text) is None
    with pytest.raises(ValueError, match="nested"):
        loads_bounded(text.strip("`json\n"))


def test_nesting_depth_ignores_brackets_inside_strings():
    from factlab.parsing import nesting_depth

    assert nesting_depth('{"a": [1, {"b": "[[[[" }], "c": "\\"{{"}') == 3
    assert nesting_depth("no brackets") == 0
    assert parse_json('[{"model": "model_1", "rank": 1, "note": "' + "[" * 500 + '"}]') is not None

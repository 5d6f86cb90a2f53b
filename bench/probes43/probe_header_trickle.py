# issue 43 round-5 probe: a judge on the loopback that trickles its response headers in ways round 3 did not
# (probe_judges: a byte every 0.3 s): an endless stream of "100 Continue" interim responses, one whole header
# line every 0.5 s, headers that end just inside the deadline, a body trickled after quick headers, the health
# check (GET /models) answered so, 40 prompts at once against a trickling server, and what is left behind
# (request threads, open sockets) once the JudgeError is raised. One line per probe: CLASS | probe | detail.
# Run with PYTHONPATH=src, FACTLAB_CACHE=<scratch> under nice; about two minutes.
import json, os, sys, threading, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from probe_round3 import *
from factlab.judges import OpenAIJudge, JudgeError

OK = json.dumps({"choices": [{"message": {"content": "yes"}, "finish_reason": "stop"}],
                 "usage": {"prompt_tokens": 1, "completion_tokens": 1}}).encode()
MODELS = json.dumps({"data": [{"id": "m"}]}).encode()
STOP = threading.Event()  # ends every handler's endless loop once the probes are done


def send_ok(c, body=OK):
    c.sendall(b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)


def continue_flood(c, head):
    while not STOP.is_set():
        c.sendall(b"HTTP/1.1 100 Continue\r\n\r\n"); time.sleep(0.2)


def header_lines(c, head):
    c.sendall(b"HTTP/1.1 200 OK\r\n")
    i = 0
    while not STOP.is_set():
        c.sendall(b"X-Slow-%d: %s\r\n" % (i, b"v" * 50)); i += 1; time.sleep(0.5)


def headers_in_time(c, head):  # 2 s of headers, a byte every 40 ms, then the answer: timeout_s is 5
    for ch in b"HTTP/1.1 200 OK\r\nX-Pad: " + b"p" * 30 + b"\r\n":
        c.sendall(bytes([ch])); time.sleep(0.04)
    send_ok(c, MODELS if head.startswith(b"GET") else OK)


def body_trickle(c, head):
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % (len(OK) + 10_000))
    c.sendall(OK[:-1])
    while not STOP.is_set():
        c.sendall(b" "); time.sleep(0.3)


def judge_once(name, handler, limit, timeout_s=3.0, prompts=1, expect="clear error", retries=1):
    s, url = serve(handler)
    res = []
    before = {t.ident for t in threading.enumerate()}
    fds = len(os.listdir("/proc/self/fd"))

    def go():
        try:
            j = OpenAIJudge("m", url, max_retries=retries, backoff_s=0.0, timeout_s=timeout_s, cache=None, concurrency=8)
            res.append(("works as documented", repr(j.judge([f"q{i}" for i in range(prompts)]))[:100]))
        except JudgeError as e:
            res.append(("clear error", f"JudgeError: {str(e)[:200]}"))
        except Exception as e:
            res.append(("traceback", f"{type(e).__name__}: {str(e)[:200]}"))
    t0 = time.monotonic()
    th = threading.Thread(target=go, daemon=True); th.start(); th.join(limit)
    dt = time.monotonic() - t0
    time.sleep(1.0)
    left = [t for t in threading.enumerate() if t.ident not in before and t.name == "factlab-judge-request"]
    extra_fds = len(os.listdir("/proc/self/fd")) - fds
    if th.is_alive():
        record("hang", name, f"> {limit} s (timeout_s={timeout_s}, {retries + 1} attempts, {prompts} prompts)")
    else:
        cls, detail = res[0]
        if cls != expect and cls != "traceback":
            cls = "unclear error" if cls == "clear error" else "silently wrong"
        record(cls, name, f"{dt:.1f} s; request threads still running 1 s later: {len(left)}, sockets "
                          f"{extra_fds:+d}; {detail}")
    s.close()


def health(name, handler, limit=30):
    s, url = serve(handler)
    res = []
    def go():
        try:
            j = OpenAIJudge("m", url, max_retries=0, backoff_s=0.0, timeout_s=3.0, cache=None)
            res.append(("works as documented", j.check_endpoints()))
        except JudgeError as e:
            res.append(("clear error", f"JudgeError: {str(e)[:200]}"))
        except Exception as e:
            res.append(("traceback", f"{type(e).__name__}: {str(e)[:200]}"))
    t0 = time.monotonic()
    th = threading.Thread(target=go, daemon=True); th.start(); th.join(limit)
    if th.is_alive():
        record("hang", name, f"> {limit} s")
    else:
        record(res[0][0], name, f"{time.monotonic() - t0:.1f} s; {res[0][1]}")
    s.close()


judge_once("endless '100 Continue' interim responses", continue_flood, 40)
judge_once("one header line every 0.5 s, forever", header_lines, 40)
judge_once("headers trickled for 2 s, then the answer (timeout_s 5)", headers_in_time, 40, timeout_s=5.0,
           expect="works as documented")
judge_once("quick headers, then the body a byte every 0.3 s", body_trickle, 40)
judge_once("40 prompts at once, header lines every 0.5 s", header_lines, 120, prompts=40)
judge_once("max_retries 4, '100 Continue' flood (5 attempts of 3 s)", continue_flood, 60, retries=4)
health("health check: GET /models answered with endless '100 Continue'", continue_flood)
health("health check: GET /models, a header line every 0.5 s", header_lines)
health("health check: GET /models, headers trickled for 2 s then the list", headers_in_time)
STOP.set()

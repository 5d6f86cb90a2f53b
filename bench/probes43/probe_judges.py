# issue 43 round-3 probe (run with PYTHONPATH=src, FACTLAB_CACHE=<scratch>); one line per probe: CLASS | probe | detail
import sys, socket, threading, time, gzip, zlib, json
sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parents[1]))
from probe_round3 import *
from factlab.judges import OpenAIJudge, JudgeError

OK_BODY = json.dumps({"choices": [{"message": {"content": "yes"}, "finish_reason": "stop"}], "usage": {"prompt_tokens": 1, "completion_tokens": 1}}).encode()

import probe_round3


def serve(handler):
    """probe_round3.serve, for this file's handlers that take the connection only."""
    return probe_round3.serve(lambda c, head: handler(c))

def header_drip(c):
    c.sendall(b"HTTP/1.1 200 OK\r\n")
    while True:
        c.sendall(b"X"); time.sleep(0.3)

def status_drip(c):
    for ch in b"HTTP/1.1 200 OK\r\n":
        c.sendall(bytes([ch])); time.sleep(0.4)
    while True:
        c.sendall(b"X"); time.sleep(0.4)

def raw_deflate(c):
    co = zlib.compressobj(wbits=-15); body = co.compress(OK_BODY) + co.flush()
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: deflate\r\nContent-Length: %d\r\n\r\n" % len(body) + body)

def corrupt_gzip(c):
    body = b"\x1f\x8b\x08\x00" + b"garbage" * 10
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(body) + body)

def gzip_concat_bomb(c):
    one = gzip.compress(b" " * 1_000_000, 9)
    body = one * 40  # 40 members: 40 MB decompressed
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(body) + body)

def trailing_after_gzip(c):
    body = gzip.compress(OK_BODY) + b"X" * 20_000_000
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(body) + body)

def huge_header(c):
    c.sendall(b"HTTP/1.1 200 OK\r\n" + b"X-A: " + b"a" * 10_000_000 + b"\r\n\r\n")

def many_headers(c):
    c.sendall(b"HTTP/1.1 200 OK\r\n" + b"X-A: a\r\n" * 2_000_000 + b"\r\n")

def retry_after(value):
    def h(c):
        c.sendall(b"HTTP/1.1 429 Too Many\r\nRetry-After: " + value + b"\r\nContent-Length: 0\r\n\r\n")
    return h

def nested_json(c):
    body = b'{"choices": [{"message": {"content": ' + b"[" * 100000 + b"]" * 100000 + b"}}]}"
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)

def content_not_string(c):
    body = json.dumps({"choices": [{"message": {"content": {"a": 1}}}]}).encode()
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)

def choices_empty(c):
    body = json.dumps({"choices": []}).encode()
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body) + body)

def redirect(c):
    c.sendall(b"HTTP/1.1 307 Temporary Redirect\r\nLocation: http://127.0.0.2:9/v1/chat/completions\r\nContent-Length: 0\r\n\r\n")

cases = [("header drip (status line sent, then 1 header byte / 0.3 s)", header_drip, 60),
         ("status line drip", status_drip, 60),
         ("raw deflate body", raw_deflate, 30), ("corrupt gzip body", corrupt_gzip, 30),
         ("40-member gzip (40 MB)", gzip_concat_bomb, 30), ("20 MB after a gzip member", trailing_after_gzip, 30),
         ("10 MB header line", huge_header, 30), ("2M headers", many_headers, 60),
         ("Retry-After: inf", retry_after(b"inf"), 30), ("Retry-After: nan", retry_after(b"nan"), 30), ("Retry-After: -5", retry_after(b"-5"), 30),
         ("Retry-After: 1e309", retry_after(b"1e309"), 30), ("Retry-After: date 9999", retry_after(b"Fri, 31 Dec 9999 23:59:59 GMT"), 30),
         ("nested JSON 100k", nested_json, 30), ("content not a string", content_not_string, 30), ("choices empty", choices_empty, 30),
         ("307 redirect", redirect, 30)]
only = sys.argv[1:] 
for name, h, lim in cases:
    if only and not any(o in name for o in only):
        continue
    s, url = serve(h)
    res = []
    def go():
        try:
            j = OpenAIJudge("m", url, max_retries=1, backoff_s=0.0, timeout_s=3.0, cache=None)
            out = j.judge(["q"])
            res.append(("works?", repr(out)[:150]))
        except JudgeError as e:
            res.append(("clear error", f"JudgeError: {str(e)[:220]}"))
        except Exception as e:
            res.append(("traceback", f"{type(e).__name__}: {str(e)[:200]}"))
    t0 = time.monotonic()
    th = threading.Thread(target=go, daemon=True); th.start(); th.join(lim)
    dt = time.monotonic() - t0
    if th.is_alive():
        record("hang", name, f"> {lim} s (timeout_s=3, 2 attempts)")
    else:
        record(res[0][0], name, f"{dt:.1f} s; {res[0][1]}")
    s.close()

# issue 43 round-3b probe: judge bodies that never end (chunked, or trailing a gzip member), gzip bombs,
# and retry / backoff settings of .inf or 1e308. One line per probe: CLASS | probe | detail.
import sys, socket, threading, time, gzip, zlib, json, resource, os
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from probe_round3 import *
from factlab.judges import OpenAIJudge, JudgeError
from factlab.config import ConfigError
OK = json.dumps({"choices": [{"message": {"content": "yes"}, "finish_reason": "stop"}]}).encode()

import probe_round3


def serve(handler):
    """probe_round3.serve, for this file's handlers that take the connection only."""
    return probe_round3.serve(lambda c, head: handler(c))

def chunk(c, data): c.sendall(b"%x\r\n" % len(data) + data + b"\r\n")
BLOCK = b"\0" * 1_000_000
def endless_identity(c):
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n")
    while True: chunk(c, BLOCK)
def endless_after_gzip(c):
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n")
    chunk(c, gzip.compress(OK))
    while True: chunk(c, BLOCK)
def endless_after_deflate(c):
    co = zlib.compressobj(); body = co.compress(OK) + co.flush()
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: deflate\r\nTransfer-Encoding: chunked\r\n\r\n")
    chunk(c, body)
    while True: chunk(c, BLOCK)
BOMB = gzip.compress(b"\0" * 1_000_000_000, 9)
def bomb(c):
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(BOMB) + BOMB)
def gzip_of_gzip(c):
    body = gzip.compress(gzip.compress(b"\0" * 200_000_000))
    c.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
def retry_after(v):
    def h(c): c.sendall(b"HTTP/1.1 503 Busy\r\nRetry-After: " + v + b"\r\nContent-Length: 0\r\n\r\n")
    return h

def rss_mb():
    return int(open("/proc/self/status").read().split("VmRSS:")[1].split()[0]) // 1024

def case(name, handler, limit=60, **kw):
    s, url = serve(handler); res = []; peak = [rss_mb()]
    def go():
        try:
            j = OpenAIJudge("m", url, cache=None, **{"max_retries": 0, "backoff_s": 0.0, "timeout_s": 8.0, **kw})
            res.append(("works?", repr(j.judge(["q"]))[:100]))
        except JudgeError as e:
            res.append(("clear error", str(e)[:200]))
        except Exception as e:
            res.append(("traceback", f"{type(e).__name__}: {str(e)[:200]}"))
    t0 = time.monotonic(); th = threading.Thread(target=go, daemon=True); th.start()
    while th.is_alive() and time.monotonic() - t0 < limit:
        th.join(0.2); peak.append(rss_mb())
        if peak[-1] > 3000:
            record("hang/crash", name, f"RSS {peak[-1]} MB after {time.monotonic() - t0:.1f} s; stopping the probe"); os._exit(1)
    s.close()
    if th.is_alive():
        record("hang", name, f"> {limit} s; peak RSS {max(peak)} MB"); return
    cls, d = res[0]
    if max(peak) - peak[0] > 500: cls = "hang/crash (memory)"
    record(cls, name, f"{time.monotonic() - t0:.1f} s, RSS +{max(peak) - peak[0]} MB; {d}")

only = sys.argv[1:]
for name, h, kw in [("endless chunked identity body", endless_identity, {}),
                    ("endless chunked body after a gzip member", endless_after_gzip, {}),
                    ("endless chunked body after a deflate stream", endless_after_deflate, {}),
                    ("1 GB gzip bomb (1 MB on the wire)", bomb, {}),
                    ("gzip of a gzip (200 MB inside)", gzip_of_gzip, {}),
                    ("Retry-After: 1e9 with max_retry_after_s 1e300", retry_after(b"1000000000"), {"max_retries": 2, "max_retry_after_s": 1e300}),
                    ("backoff_s 1e300 (server down)", retry_after(b""), {"max_retries": 3, "backoff_s": 1e300}),
                    ("backoff_s inf", retry_after(b""), {"max_retries": 3, "backoff_s": float("inf")}),
                    ("timeout_s inf, endless identity", endless_identity, {"timeout_s": float("inf")}),
                    ]:
    if only and not any(o in name for o in only): continue
    case(name, h, **kw)

# the same settings through params
for k, v in [("backoff_s", ".inf"), ("backoff_s", "1.0e+308"), ("timeout_s", ".inf"), ("timeout_s", "1.0e+308"),
             ("max_retry_after_s", ".inf"), ("max_retry_after_s", "1.0e+308"), ("max_retries", "100"), ("concurrency", "1000000000"),
             ("timeout_s", "1.0e-300")]:
    p = params("j", f"judge: {{backend: openai, base_url: 'http://127.0.0.1:9/v1', health_check: false, {k}: {v}}}\n", base="01_corver_smoke.yaml")
    try:
        cfg = load("01_corver", p); record("accepted", f"params judge.{k}: {v}", "")
    except ConfigError as e:
        record("clear error", f"params judge.{k}: {v}", str(e).replace("\n", " ")[-150:])
    except Exception as e:
        record("traceback", f"params judge.{k}: {v}", f"{type(e).__name__}: {e}"[:150])

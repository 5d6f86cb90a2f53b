# issue 43 round-3c probe: a judge server that echoes the request's Authorization header (a debugging proxy,
# a gateway's "invalid key sk-..." message) in an error body, a malformed 200 body or a redirect: does the key
# reach the JudgeError, and from it the manifest, the notebook and report.html?
import json, os, sys, threading, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from probe_round3 import *
from factlab.judges import JudgeError, OpenAIJudge

KEY = "sk-probe43c-0123456789abcdefSECRET"
os.environ["FACTLAB_PROBE_API_KEY"] = KEY


def auth(head: bytes) -> bytes:
    return next((line.split(b":", 1)[1].strip() for line in head.split(b"\r\n") if line.lower().startswith(b"authorization:")), b"none")


def answer(status: bytes, body: bytes, extra: bytes = b""):
    def h(c, head):
        b = body.replace(b"KEY", auth(head))
        c.sendall(b"HTTP/1.1 " + status + b"\r\nContent-Type: application/json\r\n" + extra.replace(b"KEY", auth(head))
                  + b"Content-Length: %d\r\n\r\n" % len(b) + b)
    return h


cases = [("401 echoing the key", answer(b"401 Unauthorized", b'{"error": "invalid key KEY"}')),
         ("400 echoing the key", answer(b"400 Bad Request", b'{"error": "bad request with header Authorization: KEY"}')),
         ("500 echoing the key (retried)", answer(b"500 Oops", b"upstream said KEY")),
         ("200 malformed, echoing the key", answer(b"200 OK", b'{"oops": "KEY"}')),
         ("200 content not a string, echoing the key", answer(b"200 OK", b'{"choices": [{"message": {"content": {"k": "KEY"}}}]}')),
         ("429 echoing the key, Retry-After 1e9", answer(b"429 Slow", b"KEY", b"Retry-After: 1000000000\r\n"))]
for name, h in cases:
    s, url = serve(h)
    res = []

    def go():
        try:
            j = OpenAIJudge("m", url, max_retries=1, backoff_s=0.0, timeout_s=3.0, cache=None,
                            api_key_env="FACTLAB_PROBE_API_KEY")
            res.append(("works?", repr(j.judge(["q"]))[:150]))
        except JudgeError as e:
            res.append(("security hole" if KEY in str(e) else "clear error", f"JudgeError: {str(e)[:200]}"))
        except Exception as e:
            res.append(("security hole" if KEY in str(e) else "traceback", f"{type(e).__name__}: {str(e)[:200]}"))

    th = threading.Thread(target=go, daemon=True)
    th.start()
    th.join(30)
    record("hang" if th.is_alive() else res[0][0], f"judge {name}", "" if th.is_alive() else res[0][1])
    s.close()

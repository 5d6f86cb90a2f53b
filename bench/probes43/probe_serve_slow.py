# issue 43 round-3b probe: factlab serve's handler threads against slow clients (nothing sent, headers
# trickled, a body promised and never sent). A stub model: no generation happens.
import sys, socket, threading, time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from probe_round3 import *
from factlab.serve import JudgeServer
from types import SimpleNamespace
WAIT = float(sys.argv[1]) if len(sys.argv) > 1 else 15.0
srv = JudgeServer(model_obj=SimpleNamespace(), tokenizer=SimpleNamespace())
if hasattr(JudgeServer, "read_deadline_s"):
    srv.read_deadline_s = 3.0
srv.start()
host, port = srv.httpd.server_address[:2]
def handlers():
    return sum(1 for t in threading.enumerate() if t is not threading.main_thread() and t.name.startswith("Thread-") and "process_request" in repr(t._target if hasattr(t, "_target") else ""))
def n_threads(): return threading.active_count()
base = n_threads()
def case(name, send):
    socks = []
    for _ in range(20):
        s = socket.create_connection((host, port)); send(s); socks.append(s)
    time.sleep(0.5); during = n_threads() - base
    time.sleep(WAIT); after = n_threads() - base
    for s in socks: s.close()
    record("hang" if after >= 20 else "works as documented", name, f"20 connections: {during} handler threads at 0.5 s, {after} after {WAIT:g} s more")
    time.sleep(0.5)
case("idle connections (nothing sent)", lambda s: None)
case("header trickle (request line, then silence)", lambda s: s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n"))
case("body promised (Content-Length 1000), never sent", lambda s: s.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 1000\r\n\r\n{"))
# a normal client still served while slow ones wait
import json, urllib.request
try:
    r = urllib.request.urlopen(f"http://{host}:{port}/v1/models", timeout=5).read()
    record("works as documented", "GET /v1/models while slow clients wait", r[:60])
except Exception as e:
    record("hang", "GET /v1/models while slow clients wait", repr(e))
srv.stop()

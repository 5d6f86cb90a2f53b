"""Issue 43's probe classes, rerun (round 3 follow-up): each probe prints one line
``CLASS | probe | detail``. Run with PYTHONPATH=src, FACTLAB_CACHE set to a scratch cache."""
from __future__ import annotations

import json, os, subprocess, sys, tempfile, textwrap, time, traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
T = Path(tempfile.mkdtemp(prefix="p43-"))
RESULTS = []



def marked_processes(variable: str, mark: str) -> list[tuple[int, str]]:
    """(pid, command line) of every live process (not this one) whose environment carries
    ``variable=mark``: what a probe started, found again to check nothing was left behind."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            env = open(f"/proc/{entry}/environ", "rb").read()
            stat = open(f"/proc/{entry}/stat").read()
            cmd = open(f"/proc/{entry}/cmdline", "rb").read().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if f"{variable}={mark}".encode() in env and stat[stat.rfind(")") + 2] != "Z":
            found.append((int(entry), cmd[:120]))
    return found

def record(cls, name, detail=""):
    RESULTS.append((cls, name, detail))
    print(f"{cls:28s} | {name} | {str(detail)[:300]}", flush=True)


def params(name, text, base="00_quickstart_smoke.yaml"):
    p = T / f"{name}.yaml"
    p.write_text((f"base: {ROOT / 'params' / base}\n" if base else "") + textwrap.dedent(text))
    return p


def load(notebook, p):
    from factlab import runner
    return runner.load_params(notebook, p)


def cli(*args, timeout=60, env=None, input=None):
    e = dict(os.environ, **(env or {}))
    try:
        r = subprocess.run([PY, "-m", "factlab.cli", *map(str, args)], capture_output=True, text=True, timeout=timeout,
                           env=e, cwd=ROOT, input=input)
        return r.returncode, r.stdout + r.stderr
    except subprocess.TimeoutExpired:
        return "TIMEOUT", ""


def serve(handler):
    """A fake judge on the loopback: ``handler(conn, head)`` answers each request (``head``: its request
    line and headers as bytes, the body already read). Returns (listening socket, base URL ``.../v1``)."""
    import socket, threading
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    s.listen(16)

    def conn(c):
        try:
            buf = b""
            while b"\r\n\r\n" not in buf:
                d = c.recv(65536)
                if not d:
                    return
                buf += d
            head, _, rest = buf.partition(b"\r\n\r\n")
            length = [line.split(b":", 1)[1] for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")]
            while length and len(rest) < int(length[0]):
                rest += c.recv(65536)
            handler(c, head)
        except Exception:
            pass
        finally:
            c.close()

    def loop():
        while True:
            try:
                c, _ = s.accept()
            except OSError:
                return
            threading.Thread(target=conn, args=(c,), daemon=True).start()

    threading.Thread(target=loop, daemon=True).start()
    return s, f"http://127.0.0.1:{s.getsockname()[1]}/v1"

"""factlab.threads: OpenMP's wait policy and torch's intra-op thread count, set when factlab is
imported (before torch) and inherited by the kernels and workers factlab starts."""

import json
import os
import subprocess
import sys

import pytest

from factlab import threads
from factlab.cli import main

PROBE = ("import json, os, factlab, torch; print(json.dumps({'policy': os.environ.get('OMP_WAIT_POLICY'), "
         "'threads': torch.get_num_threads(), 'applies': factlab.threads.configure()['wait_policy_applies'], "
         "'child': os.environ.get('OMP_NUM_THREADS')}))")
TORCH_FIRST = PROBE.replace("import json, os, factlab, torch", "import json, os, torch, factlab")


def _probe(code: str, **env: str) -> dict:
    clean = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", threads.ENV_THREADS)}
    out = subprocess.run([sys.executable, "-c", code], env={**clean, **env}, capture_output=True, text=True,
                         check=True, timeout=120)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_importing_factlab_sets_passive_waiting_and_the_thread_count_before_torch_loads():
    got = _probe(PROBE, FACTLAB_THREADS="1")
    assert got == {"policy": "PASSIVE", "threads": 1, "applies": True, "child": "1"}


def test_a_policy_from_the_environment_wins_and_torch_first_is_reported():
    own = _probe(PROBE, OMP_WAIT_POLICY="ACTIVE")
    assert own["policy"] == "ACTIVE" and own["child"] is None  # and no count: torch's default
    late = _probe(TORCH_FIRST, FACTLAB_THREADS="1")
    # torch loaded first: the thread count still applies (set_num_threads), the policy cannot
    assert late["threads"] == 1 and late["applies"] is False
    assert _probe(TORCH_FIRST, OMP_WAIT_POLICY="PASSIVE")["applies"] is True


@pytest.mark.parametrize("value, want", [(None, None), ("", None), ("auto", None), ("AUTO", None), ("3", 3), (2, 2)])
def test_thread_count_reads_an_integer_or_auto(monkeypatch, value, want):
    monkeypatch.delenv(threads.ENV_THREADS, raising=False)
    assert threads.thread_count(value) == want


@pytest.mark.parametrize("value", ["0", "-1", "two", "1.5"])
def test_thread_count_rejects_anything_else(value):
    with pytest.raises(ValueError, match="FACTLAB_THREADS must be a positive integer"):
        threads.thread_count(value)


def test_export_env_fills_only_what_is_missing():
    env = {"OMP_WAIT_POLICY": "ACTIVE"}
    assert threads.export_env(2, env) == {threads.ENV_THREADS: "2"}
    assert env == {"OMP_WAIT_POLICY": "ACTIVE", "FACTLAB_THREADS": "2", "OMP_NUM_THREADS": "2"}
    env = {}
    threads.export_env(None, env)
    assert env == {"OMP_WAIT_POLICY": "PASSIVE"}


def test_cli_threads_flag_applies_here_and_exports_to_children(monkeypatch, capsys):
    import torch

    before = torch.get_num_threads()
    for key in (threads.ENV_THREADS, "OMP_NUM_THREADS"):
        monkeypatch.setenv(key, "unset")  # registers the variable's original state, restored afterwards:
        monkeypatch.delenv(key)           # main() below exports it, and it must not leak into later tests
    try:
        assert main(["--threads", "1", "rewards"]) == 0
        assert torch.get_num_threads() == 1
        assert os.environ["OMP_NUM_THREADS"] == "1" == os.environ[threads.ENV_THREADS]
        assert main(["--threads", "none", "rewards"]) == 2
        assert "FACTLAB_THREADS must be a positive integer" in capsys.readouterr().err
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("value", ["99999", "abc"])
def test_a_bad_factlab_threads_is_one_cli_error_not_an_import_traceback(value):
    """``FACTLAB_THREADS=99999`` (or ``abc``) made ``import factlab`` raise, so every command and
    kernel died with a traceback, and ``--threads N`` could not replace it (issue 43 round-3b probe)."""
    clean = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", threads.ENV_THREADS)}
    env = {**clean, threads.ENV_THREADS: value}
    run = [sys.executable, "-m", "factlab.cli"]
    r = subprocess.run([*run, "rewards"], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr
    assert f"error: {threads.ENV_THREADS}" in r.stderr
    if value != "abc":
        return  # the rest reads the variable the same way for any bad value: once is enough (each run imports torch)
    r = subprocess.run([*run, "--threads", "1", "rewards"], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    r = subprocess.run([sys.executable, "-c", "import factlab, os; print(os.environ['OMP_WAIT_POLICY'])"], env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and r.stdout.strip() == "PASSIVE", r.stderr

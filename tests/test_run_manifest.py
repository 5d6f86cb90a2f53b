"""Run folders: the manifest (config, versions, git, hardware, seeds, times, exit state) and
``--resume``. papermill is replaced by a stand-in that writes what a notebook would, so the
runner's bookkeeping is tested in milliseconds; training's checkpoint resume is tested on a
real GRPO run in test_grpo_run.py."""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time

import nbformat
import papermill as pm
import pytest
import torch
import yaml

from factlab import cli, manifest, runall, runner


class FakePapermill:
    """Stands in for ``papermill.execute_notebook``: records each call's parameters and the
    manifest state seen while "running", writes the executed notebook and a stage file,
    then behaves as ``outcome`` says (None: finish; an exception: raise it)."""

    def __init__(self):
        self.calls, self.outcome = [], None

    def __call__(self, input_path, output_path, parameters, **kw):
        run_dir = parameters["run_dir"]
        seen = {"parameters": parameters, "state": manifest.read_manifest(run_dir)["state"],
                "stage_done_before": os.path.exists(os.path.join(run_dir, "stage.done"))}
        self.calls.append(seen)
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("hello")]), output_path)
        with open(os.path.join(run_dir, "stage.done"), "w") as f:  # a stage that a resume finds finished
            f.write("1")
        if self.outcome is not None:
            raise self.outcome


@pytest.fixture
def fake_pm(monkeypatch):
    fake = FakePapermill()
    monkeypatch.setattr(pm, "execute_notebook", fake)
    return fake


def _run(tmp_path, **kw):
    return runner.run_notebook("00_quickstart", smoke=True, out=tmp_path / "runs", progress=False,
                               raise_on_error=False, **kw)


def test_manifest_of_a_finished_run(tmp_path, fake_pm):
    res = _run(tmp_path)
    m = manifest.read_manifest(res.run_dir)
    assert res.ok and fake_pm.calls[0]["state"] == "running"  # written before the kernel starts
    assert m["state"] == "ok" and m["error"] is None and m["notebook"] == "00_quickstart"
    assert m["params"].endswith("00_quickstart_smoke.yaml")
    assert m["config"] == yaml.safe_load((res.run_dir / "config.yaml").read_text())
    assert m["config"]["eval"][0]["limit"] == 64  # the resolved smoke config, not the base file
    assert m["seeds"] and all(k.endswith("seed") for k in m["seeds"])
    assert m["seeds"]["eval_generation.seed"] == m["config"]["eval_generation"]["seed"]
    assert m["packages"]["torch"].split("+")[0] == torch.__version__.split("+")[0]
    assert m["packages"]["transformers"] and m["packages"]["trl"] and "peft" in m["packages"]
    assert m["hardware"]["cpu_count"] == os.cpu_count() and m["hardware"]["ram_gb"] > 0
    assert m["hardware"]["gpus"] is None or m["hardware"]["gpus"]
    assert m["hardware"]["threads"]["OMP_WAIT_POLICY"] == os.environ["OMP_WAIT_POLICY"]  # what kernels inherit
    assert m["started_at"] <= m["ended_at"] and len(m["attempts"]) == 1
    assert m["attempts"][0]["pid"] == os.getpid() and m["attempts"][0]["state"] == "ok"
    assert "commit" in m["git"] and "dirty" in m["git"]


def test_failed_and_interrupted_runs_say_so(tmp_path, fake_pm):
    fake_pm.outcome = pm.PapermillExecutionError(3, 4, "x = 1/0", "ZeroDivisionError", "division by zero", [])
    res = _run(tmp_path)
    m = manifest.read_manifest(res.run_dir)
    assert not res.ok and m["state"] == "failed" and m["error"] == "ZeroDivisionError: division by zero (cell 4)"
    fake_pm.outcome = KeyboardInterrupt()
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path)
    latest = max((tmp_path / "runs/00_quickstart").iterdir())
    m = manifest.read_manifest(latest)
    assert m["state"] == "interrupted" and m["ended_at"] and m["attempts"][-1]["state"] == "interrupted"
    # Ctrl-C reaching the kernel comes back as a cell error named KeyboardInterrupt
    assert runner.exit_state("KeyboardInterrupt:  (cell 7)")[0] == "interrupted"
    assert runner.exit_state(RuntimeError("boom\nmore")) == ("failed", "RuntimeError: boom")


def test_a_kernel_that_dies_of_a_stop_reads_interrupted(tmp_path, fake_pm):
    """run-all's Ctrl-C can reach a kernel while it starts: it dies ("Kernel died before replying to
    kernel_info"). After a stop was asked for (``runner.STOP_REQUESTED``) that is ``interrupted``."""
    fake_pm.outcome = RuntimeError("Kernel died before replying to kernel_info")
    with pytest.raises(RuntimeError):
        _run(tmp_path)
    first = max((tmp_path / "runs/00_quickstart").iterdir())
    assert manifest.read_manifest(first)["state"] == "failed"  # no stop asked for: a failure
    runner.STOP_REQUESTED.set()
    try:
        with pytest.raises(RuntimeError):
            _run(tmp_path)
    finally:
        runner.STOP_REQUESTED.clear()
    m = manifest.read_manifest(max((tmp_path / "runs/00_quickstart").iterdir()))
    assert m["state"] == "interrupted" and m["error"] == "stopped: RuntimeError: Kernel died before replying to kernel_info"


def test_resume_continues_in_the_same_folder(tmp_path, fake_pm):
    fake_pm.outcome = KeyboardInterrupt()
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path)
    run_dir = next((tmp_path / "runs/00_quickstart").iterdir())
    config = (run_dir / "config.yaml").read_text()
    first = manifest.read_manifest(run_dir)
    fake_pm.outcome = None
    res = runner.run_notebook("00_quickstart", resume=run_dir, progress=False, raise_on_error=False)
    assert res.ok and res.run_dir == run_dir
    assert list((tmp_path / "runs/00_quickstart").iterdir()) == [run_dir]  # no new run folder
    again = fake_pm.calls[-1]
    assert again["parameters"]["run_dir"] == str(run_dir.resolve())
    assert again["parameters"]["params_file"] == str((run_dir / "config.yaml").resolve())
    assert again["stage_done_before"]  # the interrupted attempt's work is there to be reused
    assert (run_dir / "config.yaml").read_text() == config
    m = manifest.read_manifest(run_dir)
    assert m["state"] == "ok" and m["started_at"] == first["started_at"] and m["params"] == first["params"]
    assert [a["state"] for a in m["attempts"]] == ["interrupted", "ok"] and m["attempts"][1]["resumed"]
    with pytest.raises(ValueError, match="finished ok; nothing to resume"):
        runner.run_notebook("00_quickstart", resume=run_dir)


def test_resume_refuses_what_it_cannot_continue(tmp_path, fake_pm):
    fake_pm.outcome = KeyboardInterrupt()
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path)
    run_dir = next((tmp_path / "runs/00_quickstart").iterdir())
    with pytest.raises(ValueError, match=r"drop --params, --smoke"):
        runner.run_notebook("00_quickstart", resume=run_dir, params="x.yaml", smoke=True)
    with pytest.raises(ValueError, match="a run of 00_quickstart, not of 01_corver"):
        runner.run_notebook("01_corver", resume=run_dir)
    with pytest.raises(ValueError, match="not a run folder"):
        runner.run_notebook("00_quickstart", resume=tmp_path)
    m = manifest.read_manifest(run_dir)
    m["state"] = "running"  # another live process (this one) holds it
    m["attempts"][-1]["pid"] = os.getppid()
    manifest.write_manifest(run_dir, m)
    with pytest.raises(ValueError, match=r"still running \(pid"):
        runner.run_notebook("00_quickstart", resume=run_dir)
    (run_dir / "manifest.json").write_text("{not json")
    with pytest.raises(ValueError, match="manifest.json: unreadable run manifest"):
        runner.run_notebook("00_quickstart", resume=run_dir)
    assert len(fake_pm.calls) == 1  # nothing was executed


def test_cli_resume_errors_and_interrupt_exit_code(tmp_path, fake_pm, capsys):
    assert cli.main(["run", "00_quickstart", "--resume", str(tmp_path)]) == 2
    assert "not a run folder" in capsys.readouterr().err
    fake_pm.outcome = KeyboardInterrupt()
    assert cli.main(["run", "00_quickstart", "--smoke", "--out", str(tmp_path / "runs")]) == 130
    run_dir = next((tmp_path / "runs/00_quickstart").iterdir())
    assert manifest.read_manifest(run_dir)["state"] == "interrupted"
    fake_pm.outcome = pm.PapermillExecutionError(0, 1, "", "ValueError", "bad", [])
    assert cli.main(["run", "00_quickstart", "--resume", str(run_dir)]) == 1
    assert f"--resume {run_dir}" in capsys.readouterr().err
    fake_pm.outcome = None
    assert cli.main(["run", "00_quickstart", "--resume", str(run_dir)]) == 0
    assert [a["state"] for a in manifest.read_manifest(run_dir)["attempts"]] == ["interrupted", "failed", "ok"]


def test_sigterm_ends_a_run_like_ctrl_c():
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(KeyboardInterrupt, match="signal"):
        with cli._sigterm_as_interrupt():
            os.kill(os.getpid(), signal.SIGTERM)
            time.sleep(5)  # the handler raises here, at once
    assert signal.getsignal(signal.SIGTERM) is before


def test_find_seeds_walks_nested_config():
    cfg = {"seed": 1, "grpo": {"seed": 42, "lr": 1.0}, "runs": [{"data_seed": 3}], "judge": {"seed_text": "x"}}
    assert manifest.find_seeds(cfg) == {"seed": 1, "grpo.seed": 42, "runs.0.data_seed": 3}


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_git_state_commit_dirty_and_no_repository(tmp_path):
    assert manifest.git_state(tmp_path)["commit"] is None and "no git commit" in manifest.git_state(tmp_path)["note"]
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    (tmp_path / "a.txt").write_text("1")
    for args in (["init", "-q"], ["add", "a.txt"], ["commit", "-qm", "one"]):
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, env=env)
    clean = manifest.git_state(tmp_path)
    assert re.fullmatch(r"[0-9a-f]{40}", clean["commit"]) and clean["dirty"] is False and clean["changed"] == []
    (tmp_path / "a.txt").write_text("2")
    (tmp_path / "untracked.txt").write_text("not in the commit")
    assert manifest.git_state(tmp_path) == {"commit": clean["commit"], "dirty": True, "changed": ["a.txt"]}
    (tmp_path / "b c.txt").write_text("3")
    subprocess.run(["git", "-C", str(tmp_path), "add", "b c.txt"], check=True, env=env)
    subprocess.run(["git", "-C", str(tmp_path), "mv", "a.txt", "d.txt"], check=True, env=env)
    assert manifest.git_state(tmp_path)["changed"] == ["b c.txt", "d.txt"]  # a rename names its new path


# ---------------------------------------------------------------- runs keep their record (issue 30)


def _interrupted_run(tmp_path, fake_pm):
    fake_pm.outcome = KeyboardInterrupt()
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path)
    fake_pm.outcome = None
    return next((tmp_path / "runs/00_quickstart").iterdir())


def test_resume_after_config_edit_is_refused_without_force_and_every_attempt_keeps_its_config(
        tmp_path, fake_pm, caplog):
    import logging

    run_dir = _interrupted_run(tmp_path, fake_pm)
    first = manifest.read_manifest(run_dir)["attempts"][0]["config"]
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    cfg["eval_generation"]["max_new_tokens"] = 7
    (run_dir / "config.yaml").write_text(yaml.safe_dump(cfg))
    with pytest.raises(ValueError, match=r"config.yaml changed since the last attempt \(eval_generation.max_new_tokens\)"
                                         r".*--force"):
        runner.run_notebook("00_quickstart", resume=run_dir, progress=False)
    assert len(fake_pm.calls) == 1  # nothing ran
    assert cli.main(["run", "00_quickstart", "--resume", str(run_dir)]) == 2
    with caplog.at_level(logging.WARNING):
        assert cli.main(["run", "00_quickstart", "--resume", str(run_dir), "--force"]) == 0
    assert "edited since the last attempt" in caplog.text
    m = manifest.read_manifest(run_dir)
    assert [a["state"] for a in m["attempts"]] == ["interrupted", "ok"]
    assert m["attempts"][0]["config"] == first  # attempt 1's config, kept
    assert m["attempts"][0]["config"]["eval_generation"]["max_new_tokens"] != 7
    assert m["attempts"][1]["config"]["eval_generation"]["max_new_tokens"] == 7 == m["config"]["eval_generation"]["max_new_tokens"]
    assert m["attempts"][1]["config_changed"] == ["eval_generation.max_new_tokens"]


def test_two_resumes_of_one_folder_never_run_at_once(tmp_path, fake_pm):
    import threading

    run_dir = _interrupted_run(tmp_path, fake_pm)
    started, release = threading.Event(), threading.Event()
    real = fake_pm.__call__

    def slow(*a, **kw):  # the first resume is still running...
        started.set()
        release.wait(30)
        return real(*a, **kw)

    pm.execute_notebook = slow  # restored by fake_pm's monkeypatch
    first = threading.Thread(target=lambda: runner.run_notebook("00_quickstart", resume=run_dir, progress=False))
    first.start()
    try:
        assert started.wait(30)
        with pytest.raises(ValueError, match=r"another factlab process \(pid \d+\) is running in this run folder"):
            runner.run_notebook("00_quickstart", resume=run_dir, progress=False)  # ... when the second one starts
    finally:
        release.set()
        first.join(30)
    assert [a["state"] for a in manifest.read_manifest(run_dir)["attempts"]] == ["interrupted", "ok"]


def test_a_new_run_folder_is_created_atomically(tmp_path, monkeypatch):
    """Another process may create the same folder between a check and the mkdir: creation itself
    must be the check (the race is made certain here by an ``exists`` that always says no)."""
    parent = tmp_path / "runs" / "00_quickstart"
    (parent / "20260101-000000-x").mkdir(parents=True)
    (parent / "20260101-000000-x-2").mkdir()
    monkeypatch.setattr(runner.Path, "exists", lambda self: False)
    made = runner.new_run_dir(parent, "20260101-000000-x")
    assert made.name == "20260101-000000-x-3" and made.is_dir()


_FULL_DISK = """
import resource, signal, sys
from factlab import manifest, runner
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG), like a full disk
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
try:
    {call}
except OSError as e:
    print("failed:", e.strerror)
"""


@pytest.mark.parametrize("call, name", [
    ("runner.save_metrics(sys.argv[1], {'big': 'x' * 20000})", "metrics.json"),
    ("manifest.write_manifest(sys.argv[1], {'state': 'ok', 'big': 'x' * 20000})", "manifest.json"),
])
def test_a_full_disk_leaves_metrics_and_manifest_whole_and_no_temporary_file(tmp_path, call, name):
    import sys

    (tmp_path / name).write_text(json.dumps({"state": "running", "accuracy": 0.5}))
    res = subprocess.run([sys.executable, "-c", _FULL_DISK.format(call=call), str(tmp_path)],
                         capture_output=True, text=True, timeout=120)
    assert "failed:" in res.stdout, res.stdout + res.stderr
    assert json.loads((tmp_path / name).read_text()) == {"state": "running", "accuracy": 0.5}  # the earlier one, whole
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]  # no leftover .tmp


@pytest.mark.parametrize("attempts", [[5], "x", [{"state": "failed"}, None]])
def test_a_manifest_with_malformed_attempts_is_one_clear_error(tmp_path, fake_pm, capsys, attempts):
    run_dir = _interrupted_run(tmp_path, fake_pm)
    m = manifest.read_manifest(run_dir)
    (run_dir / "manifest.json").write_text(json.dumps({**m, "attempts": attempts}))
    assert cli.main(["run", "00_quickstart", "--resume", str(run_dir)]) == 2
    err = capsys.readouterr().err
    assert "manifest.json: unreadable run manifest ('attempts' must be a list of objects" in err, err


@pytest.mark.parametrize("pid", [10 ** 30, -1, 0, True])
def test_a_damaged_pid_is_no_running_process(tmp_path, fake_pm, capsys, pid):
    """A pid of 10**30 was an OverflowError traceback; -1, 0 (every process, the group) and true
    (pid 1) read as "still running" forever (issue 43 round-3b probe)."""
    import socket

    run_dir = _interrupted_run(tmp_path, fake_pm)
    m = manifest.read_manifest(run_dir)
    m["state"] = "running"
    m["attempts"][-1].update(state="running", pid=pid, host=socket.gethostname())
    (run_dir / "manifest.json").write_text(json.dumps(m))
    assert manifest.resumable(run_dir, "00_quickstart") is not None


@pytest.mark.parametrize("damage", ["fifo", "deep"])
def test_a_manifest_that_is_a_fifo_or_nested_deep_is_one_clear_error(tmp_path, fake_pm, capsys, damage):
    """``factlab run --resume`` blocked forever reading a FIFO planted as manifest.json; a manifest
    nested 100,000 deep was a RecursionError traceback (issue 43 round-3b probe)."""
    import os
    import threading

    run_dir = _interrupted_run(tmp_path, fake_pm)
    (run_dir / "manifest.json").unlink()
    if damage == "fifo":
        os.mkfifo(run_dir / "manifest.json")
    else:
        (run_dir / "manifest.json").write_text("[" * 100_000 + "]" * 100_000)
    got = []
    t = threading.Thread(target=lambda: got.append(cli.main(["run", "00_quickstart", "--resume", str(run_dir)])),
                         daemon=True)
    t.start()
    t.join(20)
    if t.is_alive():  # free the blocked reader before failing
        with open(run_dir / "manifest.json", "w"):
            pass
        pytest.fail("factlab run --resume blocked on a FIFO manifest.json")
    assert got == [2]
    err = capsys.readouterr().err
    assert "manifest.json: " in err and ("not a regular file" in err or "RecursionError" in err), err


def test_save_metrics_moves_an_unreadable_file_aside(tmp_path):
    (tmp_path / "metrics.json").write_text('{"a": 1, "b"')
    runner.save_metrics(tmp_path, {"c": 2})
    assert runner.load_metrics(tmp_path) == {"c": 2}
    assert (tmp_path / "metrics.json.unreadable").read_text() == '{"a": 1, "b"'


def test_write_index_shows_unreadable_run_folders_instead_of_crashing(tmp_path):
    runs = tmp_path / "runs" / "00_quickstart"
    bad = {"a-list": b"[1, 2]", "wrong-types": json.dumps({"state": 5, "started_at": 3, "notebook": ["x"]}).encode(),
           "torn": b'{"state": "ok", "star', "not-utf8": b"\xff\xfe\x00{", "deep": b"[" * 100000 + b"]" * 100000}
    for name, raw in bad.items():
        (runs / name).mkdir(parents=True)
        (runs / name / "manifest.json").write_bytes(raw)
    good = runs / "zz-good"
    good.mkdir()
    (good / "manifest.json").write_text(json.dumps({"notebook": "00_quickstart", "state": "ok"}))
    (good / "metrics.json").write_text('{"headline": [1, 2')  # its metrics are torn
    fine = runs / "zz-fine"
    fine.mkdir()
    (fine / "manifest.json").write_text(json.dumps({"notebook": "00_quickstart", "state": "ok"}))
    runner.save_headline(fine, {"accuracy": 0.5})
    result = runner.RunResult(fine, fine / "notebook.ipynb", fine / "report.html", {}, True)
    page = runner.write_index([result], tmp_path / "index.html").read_text()
    for name in [*bad, "zz-good"]:
        row = next(r for r in page.split("<tr>") if name in r)
        assert "unreadable: " in row, (name, row)
    assert "accuracy 0.500" in page  # the readable run keeps its row


def test_run_all_only_without_names_is_refused(tmp_path, fake_pm, capsys):
    with pytest.raises(ValueError, match="--only needs at least one notebook name"):
        runall.run_all(out=tmp_path / "runs", only=[])
    with pytest.raises(SystemExit) as e:
        cli.main(["run-all", "--only", "--out", str(tmp_path / "runs")])
    assert e.value.code == 2 and "--only" in capsys.readouterr().err
    assert fake_pm.calls == []  # nothing ran


@pytest.mark.parametrize("planted", [".run.lock", "notebook.ipynb", "figures/accuracy.png"])
def test_a_symlink_planted_in_a_run_folder_is_refused_and_its_target_untouched(tmp_path, fake_pm, planted):
    """A link in a run folder would have a resume write its pid, the executed notebook or a
    figure into whatever it points to (issue 43: ``--resume`` truncated the lock's target)."""
    from factlab.paths import SymlinkRefused

    run_dir = _interrupted_run(tmp_path, fake_pm)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    link = run_dir / planted
    link.parent.mkdir(exist_ok=True)
    link.unlink(missing_ok=True)
    link.symlink_to(victim)
    with pytest.raises(SymlinkRefused, match=rf"{re.escape(str(link))} is a symbolic link \(to {re.escape(str(victim))}\)"):
        runner.run_notebook("00_quickstart", resume=run_dir, progress=False)
    assert len(fake_pm.calls) == 1 and victim.read_text() == "precious\n"  # nothing ran, nothing written
    assert cli.main(["run", "00_quickstart", "--resume", str(run_dir)]) == 2  # one clear error on the command line
    assert victim.read_text() == "precious\n"
    if planted.startswith("figures/"):  # a notebook saving a figure outside the runner's lock
        import matplotlib.pyplot as plt
        with pytest.raises(SymlinkRefused):
            runner.save_figure(plt.figure(), run_dir, "accuracy")
        assert victim.read_text() == "precious\n"


@pytest.mark.parametrize("planted", [".run.lock", "notebook.ipynb", "report.html", "figures/accuracy.png"])
@pytest.mark.parametrize("kind", ["hard link", "fifo"])
def test_a_hard_link_or_fifo_planted_in_a_run_folder_is_refused(tmp_path, fake_pm, planted, kind):
    """A hard link carries a write to its other names (``cp -al RUN COPY``, then ``--resume COPY``
    rewrote the original's notebook.ipynb, or the lock truncated its other name); papermill blocks
    forever writing the executed notebook into a FIFO. Refused before anything is written."""
    from factlab.paths import SymlinkRefused

    run_dir = _interrupted_run(tmp_path, fake_pm)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    path = run_dir / planted
    path.parent.mkdir(exist_ok=True)
    path.unlink(missing_ok=True)
    os.link(victim, path) if kind == "hard link" else os.mkfifo(path)
    with pytest.raises(SymlinkRefused, match=rf"{re.escape(str(path))} is (a hard link|not a regular file)"):
        runner.run_notebook("00_quickstart", resume=run_dir, progress=False)
    assert len(fake_pm.calls) == 1 and victim.read_text() == "precious\n"  # nothing ran, nothing written


def test_a_cache_lock_file_is_never_opened_through_a_symlink(tmp_path):
    from factlab.paths import SymlinkRefused, build_lock

    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (tmp_path / "index.lock").symlink_to(victim)
    with pytest.raises(SymlinkRefused, match="index.lock is a symbolic link"):
        with build_lock(tmp_path / "index"):
            pass
    assert victim.read_text() == "precious\n"


STOPPED_KERNEL = r'''
import signal, sys
from pathlib import Path
from factlab import cli, runner
nb = Path(sys.argv[1])
with cli._sigterm_as_interrupt():
    try:
        runner.execute_notebook(nb, nb.with_name("out.ipynb"), {})
    except KeyboardInterrupt:
        print("INTERRUPTED", flush=True)
'''


def test_a_run_stopped_mid_cell_prints_no_kernel_trace(tmp_path):
    """SIGTERM while a real kernel runs a cell: the run stops like Ctrl-C, and the kernel's
    shutdown (a reply on a closed socket) prints no ZMQError trace (issue 43)."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("parameters = 1", metadata={"tags": ["parameters"]}),
                nbformat.v4.new_code_cell("print('CELL STARTED', flush=True)\nimport time\ntime.sleep(60)")]
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    path = tmp_path / "sleep.ipynb"
    nbformat.write(nb, path)
    (tmp_path / "child.py").write_text(STOPPED_KERNEL)
    proc = subprocess.Popen([sys.executable, str(tmp_path / "child.py"), str(path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 90
    while time.time() < deadline and not (tmp_path / "out.ipynb").exists():
        time.sleep(0.2)
    for _ in range(100):  # until the sleeping cell has started in the kernel
        if "CELL STARTED" in (tmp_path / "out.ipynb").read_text(errors="replace"):
            break
        time.sleep(0.2)
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert "INTERRUPTED" in out
    assert "ZMQError" not in err and "Traceback" not in err, err[-2000:]

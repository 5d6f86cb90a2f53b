"""The command line on bad input: a one-line error naming the path or name, exit 2, and nothing
started (issue 17, "The command line"). No test here loads a model or starts a kernel: the
runner's notebook execution is replaced by a stub that fails the test if it is reached."""

from pathlib import Path

import papermill
import pytest

from factlab import runall, runner
from factlab.cli import main

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def no_kernel(monkeypatch):
    """Fail any test that would execute a notebook."""
    def execute(*a, **kw):
        raise AssertionError("a notebook was executed")
    monkeypatch.setattr(papermill, "execute_notebook", execute)


def _error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "Traceback" not in err, err
    return err


def test_params_pointing_at_a_folder(tmp_path, capsys):
    for cmd in ("check", "run"):
        assert main([cmd, "00_quickstart", "--params", str(tmp_path)]) == 2
        err = _error(capsys)
        assert "\n" not in err and str(tmp_path) in err and "is a folder" in err


def test_out_pointing_at_a_file(tmp_path, capsys):
    out = tmp_path / "out.txt"
    out.write_text("x")
    for argv in (["run", "00_quickstart", "--smoke", "--out", str(out)], ["run-all", "--out", str(out)],
                 ["world", "--out", str(out)]):
        assert main(argv) == 2, argv
        err = _error(capsys)
        assert "\n" not in err and str(out) in err, err
    assert out.read_text() == "x"


def test_os_errors_from_the_runner_are_one_line(tmp_path, capsys):
    """An --out whose parent is a file fails in mkdir: still one line naming the path."""
    parent = tmp_path / "file"
    parent.write_text("x")
    assert main(["run", "00_quickstart", "--smoke", "--out", str(parent / "runs")]) == 2
    err = _error(capsys)
    assert "\n" not in err and str(parent) in err


@pytest.fixture
def outputs(tmp_path, monkeypatch):
    """``$FACTLAB_OUTPUTS`` in tmp_path with an index.html from an earlier run; ``ran`` lists
    the notebooks run_all would execute."""
    monkeypatch.setenv("FACTLAB_OUTPUTS", str(tmp_path))
    index = tmp_path / "index.html"
    index.write_text("earlier index")
    ran = []

    def run_notebook(nb, **kw):
        ran.append(Path(nb).stem)
        run_dir = tmp_path / "runs" / Path(nb).stem / "20260101-000000-smoke"
        return runner.RunResult(run_dir, run_dir / "notebook.ipynb", run_dir / "report.html", {}, ok=True)

    monkeypatch.setattr(runall, "run_notebook", run_notebook)
    monkeypatch.setattr(runall, "default_jobs", lambda n: 1)
    return index, ran


@pytest.mark.parametrize("only, bad", [(["00_quikstart"], "00_quikstart"),
                                       (["00_quickstart", "01_corvr"], "01_corvr")])
def test_run_all_rejects_unknown_names_before_running(outputs, capsys, only, bad):
    index, ran = outputs
    assert main(["run-all", "--only", *only]) == 2
    err = _error(capsys)
    assert f"unknown notebook(s) '{bad}'" in err and "known: 00_quickstart, 01_corver" in err
    assert ran == [] and index.read_text() == "earlier index"


def test_run_all_runs_the_named_notebooks_and_writes_the_index(outputs, capsys):
    index, ran = outputs
    assert main(["run-all", "--only", "01_corver", "00_quickstart.ipynb"]) == 0
    assert ran == ["00_quickstart", "01_corver"]
    assert "00_quickstart" in index.read_text()


def _project(tmp_path: Path, params: dict[str, str]) -> Path:
    """A project folder whose notebooks are the keys of ``params`` (smoke params as values)."""
    for d in ("notebooks", "params"):
        (tmp_path / d).mkdir(parents=True)
    for stem, body in params.items():
        (tmp_path / "notebooks" / f"{stem}.ipynb").write_text("{}")
        (tmp_path / "params" / f"{stem}_smoke.yaml").write_text(body)
    return tmp_path


def test_run_all_checks_every_params_file_first(tmp_path, outputs):
    index, ran = outputs
    root = _project(tmp_path / "p", {"00_quickstart": f"base: {ROOT / 'params/00_quickstart_smoke.yaml'}\n",
                                     "01_corver": "grpo: {optim: adamw_torchh}\n"})
    with pytest.raises(ValueError, match=r"01_corver_smoke.yaml: invalid CorVerConfig:\n  'grpo.optim'"):
        runall.run_all(root=root)
    assert ran == [] and index.read_text() == "earlier index"


def test_index_is_kept_when_nothing_ran(tmp_path, outputs, monkeypatch, capsys):
    index, ran = outputs
    monkeypatch.chdir(_project(tmp_path / "empty", {}))
    assert main(["run-all"]) == 1
    assert "no notebooks found" in capsys.readouterr().err
    assert index.read_text() == "earlier index"


def test_missing_base_names_the_file_that_refers_to_it(tmp_path, capsys):
    child = tmp_path / "child.yaml"
    child.write_text("base: parent.yaml\n")
    assert main(["check", "00_quickstart", "--params", str(child)]) == 2
    err = _error(capsys)
    assert f"params file not found: {tmp_path / 'parent.yaml'} (named by 'base:' in {child})" in err


def test_base_that_is_not_a_file_name(tmp_path, capsys):
    child = tmp_path / "child.yaml"
    child.write_text("base: [a.yaml]\n")
    assert main(["check", "00_quickstart", "--params", str(child)]) == 2
    assert f"{child}: 'base' must name a params file" in _error(capsys)


def test_non_utf8_params_names_the_file(tmp_path, capsys):
    bad = tmp_path / "latin1.yaml"
    bad.write_bytes("model: {name: caf\u00e9}\n".encode("latin-1"))
    assert main(["check", "00_quickstart", "--params", str(bad)]) == 2
    err = _error(capsys)
    assert "\n" not in err and f"{bad}: not UTF-8 text (byte b'\\xe9'" in err


@pytest.mark.parametrize("flag, value", [("--cpus", "0"), ("--cpus", "-2"), ("--cpus", "two"),
                                         ("--shard-tokens", "0")])
def test_index_build_rejects_non_positive_counts(tmp_path, capsys, flag, value):
    with pytest.raises(SystemExit) as e:
        main(["index", "build", str(tmp_path / "c.jsonl"), "--tokenizer", "x", "--out", str(tmp_path / "i"),
              flag, value])
    assert e.value.code == 2
    assert f"argument {flag}: " in capsys.readouterr().err
    assert not (tmp_path / "i").exists()

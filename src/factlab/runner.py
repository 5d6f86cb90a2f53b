"""Execute notebooks with papermill into run folders: the one run-folder layout.

A run folder ``outputs/runs/<notebook>/<YYYYmmdd-HHMMSS>-<params>/`` holds:

* ``config.yaml``   the fully-resolved, validated params (what the notebook read)
* ``notebook.ipynb`` the executed notebook
* ``report.html``   its HTML rendering (nbconvert), written even when a cell failed
* ``metrics.json``  what the notebook logged with ``save_metrics``
* ``figures/``      PNGs the notebook saved with ``save_figure``
* ``manifest.json`` config, package versions, git commit, hardware, seeds, start / end
  times and exit state (``factlab.manifest``); ``--resume`` continues a run that did not
  finish ok in its own folder (``resume_run_dir``)

The notebook's parameters cell must define ``params_file`` and ``run_dir``; the runner
injects both.
"""

from __future__ import annotations

import datetime as _dt
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat
import papermill as pm
from nbconvert import HTMLExporter
from pydantic import BaseModel

from .config import ConfigError, dump_config, load_config
from .experiment import QuickstartConfig
from .manifest import finish_manifest, resumable, start_manifest
from .train.compare import CompareConfig
from .train.corver import CorVerConfig
from .train.k2v import K2VConfig
from .train.klcf import KLCFConfig
from .train.rar import RARConfig
from .train.seva import SevaConfig

log = logging.getLogger(__name__)

# Every notebook's params schema, by notebook stem.
NOTEBOOK_CONFIGS: dict[str, type[BaseModel]] = {
    "00_quickstart": QuickstartConfig,
    "01_corver": CorVerConfig,
    "02_binary_rar": RARConfig,
    "03_seva": SevaConfig,
    "04_k2v": K2VConfig,
    "05_klcf": KLCFConfig,
    "06_compare": CompareConfig,
}


def config_for_notebook(stem: str) -> type[BaseModel]:
    """The config class of a notebook stem such as ``00_quickstart``."""
    try:
        return NOTEBOOK_CONFIGS[stem]
    except KeyError:
        raise ConfigError(f"no config registered for notebook '{stem}'; known: {sorted(NOTEBOOK_CONFIGS)}") from None


def load_params(notebook: str, params: str | Path) -> BaseModel:
    """Validate ``params`` against the notebook's config class (what ``factlab check`` does)."""
    return load_config(params, config_for_notebook(Path(notebook).stem))


def project_root(start: str | Path | None = None) -> Path:
    """The folder holding ``notebooks/`` and ``params/`` (searched upwards from ``start``/cwd)."""
    here = Path(start or Path.cwd()).resolve()
    for p in [here, *here.parents]:
        if (p / "notebooks").is_dir() and (p / "params").is_dir():
            return p
    raise FileNotFoundError(
        f"no factlab project (a folder with notebooks/ and params/) at or above {here}"
    )


def outputs_root(root: Path | None = None) -> Path:
    """``$FACTLAB_OUTPUTS``, else ``<project>/outputs``."""
    if os.environ.get("FACTLAB_OUTPUTS"):
        return Path(os.environ["FACTLAB_OUTPUTS"])
    return (root or project_root()) / "outputs"


def find_notebook(name: str, root: Path | None = None) -> Path:
    """A notebook by path or by stem (``00_quickstart``) inside ``notebooks/``."""
    p = Path(name)
    if p.suffix == ".ipynb" and p.exists():
        return p.resolve()
    root = root or project_root()
    cand = root / "notebooks" / (p.stem + ".ipynb")
    if cand.exists():
        return cand
    known = sorted(x.stem for x in (root / "notebooks").glob("*.ipynb"))
    raise FileNotFoundError(f"notebook '{name}' not found; known: {known}")


def list_notebooks(root: Path | None = None) -> list[Path]:
    root = root or project_root()
    return sorted((root / "notebooks").glob("[0-9]*.ipynb"))


def default_params(notebook: Path, smoke: bool) -> Path:
    root = notebook.parent.parent
    return root / "params" / f"{notebook.stem}{'_smoke' if smoke else ''}.yaml"


@dataclass
class RunResult:
    run_dir: Path
    notebook: Path
    report: Path
    metrics: dict[str, Any]
    ok: bool
    error: str | None = None


def html_report(executed: Path, out: Path) -> Path:
    """Render an executed notebook to a standalone HTML file."""
    nb = nbformat.read(str(executed), as_version=4)
    body, _ = HTMLExporter().from_notebook_node(nb)
    out.write_text(body, encoding="utf-8")
    return out


def run_notebook(notebook: str | Path, params: str | Path | None = None,
                 out: str | Path | None = None, smoke: bool = False,
                 progress: bool = True, raise_on_error: bool = True,
                 resume: str | Path | None = None) -> RunResult:
    """Validate params, execute the notebook with papermill, render HTML; return the run folder.

    The params file is validated *before* a kernel starts, so a bad key fails in a second
    with its key path. On a cell error the executed notebook and its HTML are still
    written (to see where it stopped), then ``RuntimeError`` names the run folder.
    ``resume``: a run folder of this notebook that did not finish ok; it is executed
    again in place with its own ``config.yaml`` (see ``resume_run_dir``).
    """
    nb_path = find_notebook(str(notebook))
    if resume is not None:
        run_dir, cfg, params_source = resume_run_dir(nb_path, resume, params=params, out=out, smoke=smoke)
    else:
        params_path = Path(params) if params else default_params(nb_path, smoke)
        cfg = load_config(params_path, config_for_notebook(nb_path.stem))
        params_source = params_path
        stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
        base = Path(out) if out else outputs_root(nb_path.parent.parent) / "runs"
        run_dir = base / nb_path.stem / f"{stamp}-{params_path.stem}"
        n = 1
        while run_dir.exists():  # two runs in the same second
            n += 1
            run_dir = base / nb_path.stem / f"{stamp}-{params_path.stem}-{n}"
        run_dir.mkdir(parents=True)
        (run_dir / "config.yaml").write_text(dump_config(cfg), encoding="utf-8")
    start_manifest(run_dir, notebook=nb_path.stem, params=params_source, config=cfg.model_dump(mode="json"),
                   project=nb_path.parent.parent, resume=resume is not None)
    executed = run_dir / "notebook.ipynb"
    error = None
    try:
        try:
            pm.execute_notebook(
                str(nb_path), str(executed),
                parameters={"params_file": str((run_dir / "config.yaml").resolve()),
                            "run_dir": str(run_dir.resolve())},
                cwd=str(nb_path.parent), progress_bar=progress, kernel_name="python3",
            )
        except pm.PapermillExecutionError as e:
            error = f"{e.ename}: {e.evalue} (cell {e.exec_count})"
        report = html_report(executed, run_dir / "report.html") if executed.exists() else run_dir / "report.html"
    except BaseException as e:  # Ctrl-C / SIGTERM, or the runner itself failed: say so in the manifest
        state, line = exit_state(e)
        finish_manifest(run_dir, state, line)
        log.error("%s %s (%s); continue it with: factlab run %s --resume %s",
                  nb_path.stem, state, line, nb_path.stem, run_dir)
        raise
    finish_manifest(run_dir, *exit_state(error))
    metrics = load_metrics(run_dir)
    result = RunResult(run_dir, executed, report, metrics, ok=error is None, error=error)
    if error and raise_on_error:
        raise RuntimeError(f"{nb_path.name} failed: {error}; see {report}")
    return result


def resume_run_dir(nb_path: Path, run_dir: str | Path, *, params: str | Path | None = None,
                   out: str | Path | None = None, smoke: bool = False) -> tuple[Path, BaseModel, str]:
    """The run folder, validated config and original params source of a run to resume.

    The run keeps its folder and its resolved ``config.yaml`` (so ``params``, ``out`` and
    ``smoke`` may not be given too); its stages find what the interrupted attempt left:
    finished training runs are loaded, interrupted ones continue from their last
    ``checkpoint-*`` (``train.run``, ``train.sft.run_sft``), and cached stages (indexes,
    judge answers, self-filter samples, KLCF stages) are read back. ``ValueError`` when the
    folder is not a resumable run of this notebook (``manifest.resumable``)."""
    given = [flag for flag, v in (("--params", params), ("--out", out), ("--smoke", smoke)) if v]
    if given:
        raise ValueError(f"--resume reuses the run folder's own config.yaml; drop {', '.join(given)}")
    run_dir = Path(run_dir)
    manifest = resumable(run_dir, nb_path.stem)
    if manifest is None:
        log.warning("%s has no manifest.json (an older run folder); resuming it as %s", run_dir, nb_path.stem)
    cfg = load_config(run_dir / "config.yaml", config_for_notebook(nb_path.stem))
    return run_dir, cfg, (manifest or {}).get("params") or str(run_dir / "config.yaml")


def exit_state(outcome: BaseException | str | None) -> tuple[str, str | None]:
    """(manifest state, error line) of how a run ended: ``None`` is ok, an error line or an
    exception failed, Ctrl-C / SIGTERM (``KeyboardInterrupt``, also inside the kernel)
    interrupted."""
    if outcome is None:
        return "ok", None
    if isinstance(outcome, KeyboardInterrupt) or (isinstance(outcome, str) and outcome.startswith("KeyboardInterrupt")):
        return "interrupted", outcome if isinstance(outcome, str) else f"KeyboardInterrupt: {outcome}".rstrip(": ")
    if isinstance(outcome, BaseException):
        return "failed", f"{type(outcome).__name__}: {outcome}".splitlines()[0]
    return "failed", outcome


def save_metrics(run_dir: str | Path | None, metrics: dict[str, Any], key: str | None = None) -> Path:
    """Merge ``metrics`` (under ``key`` if given) into ``<run_dir>/metrics.json``."""
    run_dir = Path(run_dir) if run_dir else interactive_run_dir()
    path = run_dir / "metrics.json"
    data = load_metrics(run_dir)
    if key:
        data.setdefault(key, {}).update(metrics)
    else:
        data.update(metrics)
    path.write_text(json.dumps(data, indent=2, default=float), encoding="utf-8")
    return path


def load_metrics(run_dir: str | Path) -> dict[str, Any]:
    path = Path(run_dir) / "metrics.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def save_figure(fig, run_dir: str | Path | None, name: str) -> Path:
    """Save a matplotlib figure as ``<run_dir>/figures/<name>.png``."""
    run_dir = Path(run_dir) if run_dir else interactive_run_dir()
    path = run_dir / "figures" / f"{name}.png"
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120, bbox_inches="tight")
    return path


def interactive_run_dir(name: str = "interactive") -> Path:
    """Run folder for a notebook opened by hand in JupyterLab (no runner around it)."""
    try:
        base = outputs_root()
    except FileNotFoundError:
        base = Path.cwd() / "outputs"
    d = base / "interactive" / name
    d.mkdir(parents=True, exist_ok=True)
    return d


def run_all(smoke: bool = True, out: str | Path | None = None, root: Path | None = None,
            only: list[str] | None = None) -> list[RunResult]:
    """Run every numbered notebook (smoke or full params) and write ``outputs/index.html``.

    Before the first kernel starts, every name in ``only`` must be a notebook stem (else
    ``ValueError`` naming the unknown ones) and every selected notebook's params must
    validate (else ``ConfigError``). The index is left alone when nothing ran."""
    root = root or project_root()
    notebooks = list_notebooks(root)
    if only:
        known = [nb.stem for nb in notebooks]
        unknown = [name for name in only if Path(name).stem not in known]
        if unknown:
            raise ValueError(f"unknown notebook(s) {', '.join(map(repr, unknown))}; known: {', '.join(known)}")
        notebooks = [nb for nb in notebooks if nb.stem in {Path(name).stem for name in only}]
    for nb in notebooks:
        load_params(nb.stem, default_params(nb, smoke))
    results = []
    for nb in notebooks:
        log.info("running %s", nb.name)
        results.append(run_notebook(nb, smoke=smoke, out=out, raise_on_error=False))
    if results:
        write_index(results, (Path(out) if out else outputs_root(root)) / "index.html")
    return results


def write_index(results: list[RunResult], path: Path) -> Path:
    """A small HTML page linking every report of a ``run_all``."""
    rows = []
    for r in results:
        rel = os.path.relpath(r.report, path.parent)
        status = "ok" if r.ok else f"FAILED: {r.error}"
        rows.append(f"<tr><td><a href='{rel}'>{r.notebook.parent.parent.name}/{r.run_dir.name}</a>"
                    f"</td><td>{status}</td></tr>")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("<html><body><h1>factlab reports</h1><table>"
                    + "".join(rows) + "</table></body></html>", encoding="utf-8")
    return path

"""Execute notebooks with papermill into run folders: the one run-folder layout.

A run folder ``outputs/runs/<notebook>/<YYYYmmdd-HHMMSS>-<params>/`` holds:

* ``config.yaml``   the fully-resolved, validated params (what the notebook read)
* ``notebook.ipynb`` the executed notebook
* ``report.html``   its reader-facing HTML rendering (nbconvert; no code, no stderr, no script,
  HTML and Markdown sanitized by ``report.sanitize_html``), written even when a cell failed;
  with ``with_code`` the code cells are kept
* ``metrics.json``  what the notebook logged with ``save_metrics``
* ``figures/``      PNGs the notebook saved with ``save_figure``
* ``manifest.json`` config, package versions, git commit, hardware, seeds, start / end
  times and exit state (``factlab.manifest``); ``--resume`` continues a run that did not
  finish ok in its own folder (``resume_run_dir``)

The notebook's parameters cell must define ``params_file`` and ``run_dir``; the runner
injects both.
"""

from __future__ import annotations

import contextlib
import copy
import datetime as _dt
import html
import json
import logging
import math
import numbers
import os
import signal
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2
from pydantic import BaseModel

from .config import ConfigError, dump_config, load_config, refuse_url_credentials
from .experiment import QuickstartConfig
from .manifest import (changed_keys, finish_manifest, last_config, read_manifest, resumable, run_lock,
                       start_manifest)
from .models import DEFAULT_MODEL
from .paths import atomic_write_text, no_symlink, write_json
from .report import sanitize_html
from .recipes import RECIPES
from .plan import PlanError, STRATEGIES, plan_config
from .train.runtime import check_runtime

if TYPE_CHECKING:
    from nbconvert import HTMLExporter

# papermill, nbformat and nbconvert are imported where a notebook is run or rendered, not here:
# every notebook kernel imports this module, and nbformat's schema validator alone takes ~2 s
# to import (jsonschema's format checkers), time a kernel would spend for nothing.

log = logging.getLogger(__name__)

# Every notebook's params schema, by notebook stem.
NOTEBOOK_CONFIGS: dict[str, type[BaseModel]] = {
    "00_quickstart": QuickstartConfig,
    **{stem: recipe.config for stem, recipe in RECIPES.items()},  # each paper's recipe (factlab.recipes)
}


def config_for_notebook(stem: str) -> type[BaseModel]:
    """The config class of a notebook stem such as ``00_quickstart``."""
    try:
        return NOTEBOOK_CONFIGS[stem]
    except KeyError:
        raise ConfigError(f"no config registered for notebook '{stem}'; known: {sorted(NOTEBOOK_CONFIGS)}") from None


def warn_unless_it_fits(cfg: BaseModel, notebook: str) -> str | None:
    """On a CUDA machine, the memory plan (``factlab.plan``) of ``cfg`` in this one process (a
    notebook run is one process, no DeepSpeed) on this GPU's memory; a warning naming the terms
    when it does not fit, with the launch that would (returned too). Nothing without CUDA."""
    import torch

    if not torch.cuda.is_available():
        return None
    gb = torch.cuda.get_device_properties(0).total_memory / 1e9
    try:
        plan = plan_config(cfg, notebook, gpus=1, gpu_mem_gb=gb, strategy=STRATEGIES["single"])
    except PlanError as e:
        log.info("no memory plan for %s: %s", notebook, e)
        return None
    if plan.fits:
        return None
    message = (f"{notebook}: the memory plan does not fit this GPU ({gb:.0f} GB) in one process: {plan.problem}. "
               f"`factlab plan {notebook} --params ... --gpu-mem {gb:.0f}` names a launch that fits (factlab train "
               f"--accelerate-config ...), after which `factlab run --resume` evaluates")
    log.warning(message)
    return message


def load_params(notebook: str, params: str | Path) -> BaseModel:
    """Validate ``params`` against the notebook's config class (what ``factlab check`` does)."""
    return load_config(params, config_for_notebook(Path(notebook).stem))


def retarget_models(notebook: str, params: str | Path, out: str | Path, model: str,
                    replace: tuple[str, ...] = (DEFAULT_MODEL, "default")) -> Path:
    """Write ``out``: ``params`` fully resolved for ``notebook`` (defaults included), with every
    value that names a model in ``replace`` (the embedded default; wherever it sits: policy,
    judge, teacher, extractor, generator, a reward's args) set to ``model``. With
    ``models.TINY_MODEL`` this runs a notebook end to end on the tiny random model, the
    plumbing check the notebook tests use. Returns ``out``; ``ConfigError`` as ``load_params``."""
    config_class = config_for_notebook(Path(notebook).stem)
    data = load_config(params, config_class).model_dump(mode="json")

    def swap(node: Any, key: str | None = None) -> Any:
        if isinstance(node, dict):
            return {k: swap(v, k) for k, v in node.items()}
        if isinstance(node, list):
            return [swap(v, key) for v in node]
        # "default" names the embedded model only under a model key (elsewhere it is a mode)
        names = replace if key in ("model", "name", "tokenizer") else tuple(r for r in replace if r != "default")
        return model if isinstance(node, str) and node in names else node

    out = Path(out)
    out.write_text(dump_config(config_class.model_validate(swap(data))), encoding="utf-8")
    return out


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


# What an output may show in a report. Everything else (JavaScript, widget views, Mermaid, PDF,
# ...) is dropped: the exporter would put some of it into the page as script or raw markup.
REPORT_MIMES = ("text/plain", "text/html", "text/markdown", "text/latex", "image/png", "image/jpeg",
                "image/svg+xml")
# A reader report runs no script: the lab template's require.js, MathJax, Mermaid and widget
# loaders are left out, so nothing but the sanitized content is on the page.
_REPORT_TEMPLATE = """{%- extends 'lab/index.html.j2' -%}
{%- block html_head_js -%}{%- endblock html_head_js -%}
{%- block jupyter_widgets -%}{%- endblock jupyter_widgets -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
"""


# The output metadata the lab template reads into the page, outside the sanitizer: an image's
# width and height (written unquoted into its <img> tag), ``unconfined`` and ``needs_background``.
_IMAGE_MIMES = ("image/png", "image/jpeg")
_BACKGROUNDS = ("light", "dark")


def _pixels(value: Any) -> bool:
    return (isinstance(value, numbers.Real) and not isinstance(value, bool) and math.isfinite(value)
            and 0 <= value <= 100_000)


def _image_metadata(meta: Any) -> dict:
    """Of one output's (or one image mime's) metadata, only what an image may carry into the
    page: a numeric width and height, ``unconfined`` as a boolean, ``needs_background`` as
    light or dark. A string width such as ``"1 onload=..."`` would become an attribute."""
    meta = meta if isinstance(meta, dict) else {}
    kept = {k: meta[k] for k in ("width", "height") if _pixels(meta.get(k))}
    if isinstance(meta.get("unconfined"), bool):
        kept["unconfined"] = meta["unconfined"]
    if meta.get("needs_background") in _BACKGROUNDS:
        kept["needs_background"] = meta["needs_background"]
    return kept


def report_outputs(outputs: list) -> list:
    """``outputs`` as a report shows them: rich data limited to ``REPORT_MIMES`` (an output
    left with none is dropped) and output metadata limited to ``_image_metadata`` (no file
    names, no width or height but numbers)."""
    kept = []
    for out in outputs:
        if "data" in out:
            out["data"] = {m: v for m, v in out["data"].items() if m in REPORT_MIMES}
            if not out["data"]:
                continue
            meta = out.get("metadata") if isinstance(out.get("metadata"), dict) else {}
            safe = _image_metadata(meta)
            safe.update({m: _image_metadata(meta.get(m)) for m in _IMAGE_MIMES if m in meta})
            out["metadata"] = safe
        kept.append(out)
    return kept


def _text(value: Any) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


LONG_STREAM_LINES = 25


def _fold_long_stream(out):
    """A printed output longer than ``LONG_STREAM_LINES`` lines (a config dump, a log) as a
    collapsed, escaped block the reader can open."""
    if out.get("output_type") != "stream":
        return out
    text = _text(out.get("text", ""))
    n = text.count("\n")
    if n <= LONG_STREAM_LINES:
        return out
    import nbformat

    return nbformat.v4.new_output("display_data", data={
        "text/html": f"<details><summary>printed output ({n} lines)</summary><pre>{html.escape(text)}</pre></details>",
        "text/plain": text})


def _is_progress_widget(output) -> bool:
    """transformers' notebook progress display (``NotebookProgressCallback``: an HTML
    ``<progress>`` bar with its running loss table), which a run's own tables already show."""
    html_out = (output.get("data") or {}).get("text/html", "")
    html_out = "".join(html_out) if isinstance(html_out, list) else str(html_out)
    return output.get("output_type") in ("display_data", "update_display_data") and "<progress" in html_out


def reader_notebook(nb, with_code: bool = False):
    """A copy of an executed notebook as its report shows it: stderr streams (progress bars,
    warnings) dropped, long prints folded, outputs limited to ``REPORT_MIMES``, no widget
    state, and, unless ``with_code``, no code (the executed notebook in the run folder keeps
    everything). HTML and Markdown are sanitized when the report is rendered (``html_report``)."""
    nb = copy.deepcopy(nb)
    nb.metadata.pop("widgets", None)
    for cell in nb.cells:
        if cell.cell_type == "code":
            cell.outputs = report_outputs([_fold_long_stream(o) for o in cell.get("outputs", [])
                                           if not (o.get("output_type") == "stream" and o.get("name") == "stderr")
                                           and not _is_progress_widget(o)])
    return nb


def report_exporter(with_code: bool = False) -> HTMLExporter:
    """nbconvert's exporter as reports use it: the lab template without its scripts, and every
    HTML output, Markdown output (rendered to HTML first), Markdown cell and raw cell passed
    through ``report.sanitize_html`` (nbconvert's ``clean_html`` hook); SVG figures are
    embedded as ``<img>`` data URIs, where they run nothing."""
    from nbconvert import HTMLExporter

    return HTMLExporter(exclude_input=not with_code, exclude_input_prompt=not with_code,
                        exclude_output_prompt=not with_code, sanitize_html=True, exclude_anchor_links=True,
                        skip_svg_encoding=False, filters={"clean_html": sanitize_html},
                        extra_loaders=[jinja2.DictLoader({"factlab_report.html.j2": _REPORT_TEMPLATE})],
                        template_file="factlab_report.html.j2")


def html_report(executed: Path, out: Path, with_code: bool = False) -> Path:
    """Render an executed notebook to a standalone, reader-facing HTML file (``reader_notebook``,
    ``report_exporter``), opened by the run's headline numbers (``save_headline``) when it
    recorded some."""
    import nbformat

    nb = reader_notebook(nbformat.read(str(executed), as_version=4), with_code)
    summary = headline_html(load_metrics(out.parent))
    if summary:
        cell = nbformat.v4.new_code_cell("")
        cell.outputs = [nbformat.v4.new_output("display_data", data={"text/html": summary, "text/plain": ""})]
        first_md = next((i for i, c in enumerate(nb.cells) if c.cell_type == "markdown"), -1)
        nb.cells.insert(first_md + 1, cell)
    body, _ = report_exporter(with_code).from_notebook_node(nb)
    atomic_write_text(out, body)
    return out


def run_notebook(notebook: str | Path, params: str | Path | None = None,
                 out: str | Path | None = None, smoke: bool = False,
                 progress: bool = True, raise_on_error: bool = True,
                 resume: str | Path | None = None, with_code: bool = False, force: bool = False) -> RunResult:
    """Validate params, execute the notebook with papermill, render HTML; return the run folder.

    The params file is validated *before* a kernel starts, so a bad key fails in a second
    with its key path. On a cell error the executed notebook and its HTML are still
    written (to see where it stopped), then ``RuntimeError`` names the run folder.
    ``resume``: a run folder of this notebook that did not finish ok; it is executed
    again in place with its own ``config.yaml`` (see ``resume_run_dir``; ``force`` accepts a
    config.yaml edited since the last attempt). The run holds its folder's lock
    (``manifest.run_lock``) from start to end: a second run in the same folder is refused.
    """
    nb_path = find_notebook(str(notebook))
    if resume is not None:
        _no_resume_flags(params=params, out=out, smoke=smoke)
        run_dir = Path(resume)
        resumable(run_dir, nb_path.stem)  # a run folder of this notebook, before its lock file is made
    else:
        params_path = Path(params) if params else default_params(nb_path, smoke)
        cfg = load_config(params_path, config_for_notebook(nb_path.stem))
        refuse_url_credentials(cfg)  # config.yaml hides them: the run would send ***
        check_runtime(cfg)  # vLLM / CUDA the params ask for, before a kernel starts (issue 42)
        warn_unless_it_fits(cfg, nb_path.stem)
        params_source = params_path
        run_dir = make_run_dir(nb_path, params_path, out)
    with run_lock(run_dir):
        if resume is not None:
            run_dir, cfg, params_source = resume_run_dir(nb_path, run_dir, force=force)
        else:
            atomic_write_text(run_dir / "config.yaml", dump_config(cfg))
        return _execute(nb_path, run_dir, cfg, params_source, resumed=resume is not None, progress=progress,
                        raise_on_error=raise_on_error, with_code=with_code)


def make_run_dir(notebook: Path, params: Path, out: str | Path | None = None, *, tag: str = "",
                 create: bool = True) -> Path:
    """The run folder of a notebook run with ``params``, the one maker for ``factlab run`` and
    ``factlab train``: ``<out or outputs/runs>/<notebook stem>/<YYYYmmdd-HHMMSS>-<params stem>[-tag]``,
    created atomically (``new_run_dir``: ``-2``, ``-3``, ... when taken). ``create=False`` only
    names it (a dry run writes nothing)."""
    stamp = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    base = Path(out) if out else outputs_root(notebook.parent.parent) / "runs"
    name = f"{stamp}-{Path(params).stem}" + (f"-{tag}" if tag else "")
    parent = base / notebook.stem
    return new_run_dir(parent, name) if create else parent / name


def new_run_dir(parent: Path, name: str) -> Path:
    """A new, empty run folder ``parent/name`` (``name-2``, ``name-3``, ... when taken), created
    atomically: two runs started in the same second by two processes never get one folder."""
    parent.mkdir(parents=True, exist_ok=True)
    n = 1
    while True:
        run_dir = parent / (name if n == 1 else f"{name}-{n}")
        try:
            run_dir.mkdir()
            return run_dir
        except FileExistsError:
            n += 1


# The kernel's own log is its plumbing: its TCP warning at start, and when a run is stopped mid-cell
# (Ctrl-C, SIGTERM) a 19-line ZMQError as the kernel replies on a socket papermill already closed (issue 43).
# A cell's errors reach the notebook and the manifest, not this log.
KERNEL_ARGUMENTS = ["--IPKernelApp.log_level=CRITICAL"]


def execute_notebook(nb_path: Path, executed: Path, parameters: dict, *, progress: bool = False) -> None:
    """papermill on ``nb_path`` (python3 kernel, run in the notebook's folder) into ``executed``."""
    import papermill as pm

    pm.execute_notebook(str(nb_path), str(executed), parameters=parameters, cwd=str(nb_path.parent),
                        progress_bar=progress, kernel_name="python3", extra_arguments=KERNEL_ARGUMENTS)


# Set by a caller that stopped every run at once (run-all's Ctrl-C / SIGTERM, ``runall``): a run that then ends in
# an error ended because of the stop (a kernel interrupted while it starts dies: "Kernel died before replying to
# kernel_info"), so its manifest says ``interrupted``, not ``failed``. Cleared when such a caller starts.
STOP_REQUESTED = threading.Event()


def _ended_state(outcome: BaseException | str | None) -> tuple[str, str | None]:
    """``exit_state`` of a run, an error after ``STOP_REQUESTED`` read as the stop."""
    state, line = exit_state(outcome)
    if state == "failed" and STOP_REQUESTED.is_set():
        return "interrupted", f"stopped: {line}"
    return state, line


def _execute(nb_path: Path, run_dir: Path, cfg: BaseModel, params_source, *, resumed: bool, progress: bool,
             raise_on_error: bool, with_code: bool) -> RunResult:
    """Run the notebook in ``run_dir`` (its lock held), recording start and end in the manifest."""
    import papermill as pm

    start_manifest(run_dir, notebook=nb_path.stem, params=params_source, config=cfg.model_dump(mode="json"),
                   project=nb_path.parent.parent, resume=resumed)
    executed = run_dir / "notebook.ipynb"
    error = None
    try:
        try:
            execute_notebook(nb_path, executed, {"params_file": str((run_dir / "config.yaml").resolve()),
                                                 "run_dir": str(run_dir.resolve())}, progress=progress)
        except pm.PapermillExecutionError as e:
            error = f"{e.ename}: {e.evalue} (cell {e.exec_count})"
        report = (html_report(executed, run_dir / "report.html", with_code) if executed.exists()
                  else run_dir / "report.html")
    except BaseException as e:  # Ctrl-C / SIGTERM, or the runner itself failed: say so in the manifest
        state, line = _ended_state(e)
        finish_manifest(run_dir, state, line)
        log.error("%s %s (%s); continue it with: factlab run %s --resume %s",
                  nb_path.stem, state, line, nb_path.stem, run_dir)
        raise
    finish_manifest(run_dir, *_ended_state(error))
    metrics = load_metrics(run_dir)
    result = RunResult(run_dir, executed, report, metrics, ok=error is None, error=error)
    if error and raise_on_error:
        raise RuntimeError(f"{nb_path.name} failed: {error}; see {report}")
    return result


@contextlib.contextmanager
def sigterm_as_interrupt():
    """SIGTERM (a job scheduler stopping the run) ends the run like Ctrl-C, as a
    ``KeyboardInterrupt``: the manifest records ``interrupted`` and the run can be resumed."""
    def handler(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")

    try:
        previous = signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _no_resume_flags(*, params, out, smoke) -> None:
    given = [flag for flag, v in (("--params", params), ("--out", out), ("--smoke", smoke)) if v]
    if given:
        raise ValueError(f"--resume reuses the run folder's own config.yaml; drop {', '.join(given)}")


def resume_run_dir(nb_path: Path, run_dir: str | Path, *, params: str | Path | None = None,
                   out: str | Path | None = None, smoke: bool = False,
                   force: bool = False) -> tuple[Path, BaseModel, str]:
    """The run folder, validated config and original params source of a run to resume.

    The run keeps its folder and its resolved ``config.yaml`` (so ``params``, ``out`` and
    ``smoke`` may not be given too); its stages find what the interrupted attempt left:
    finished training runs are loaded, interrupted ones continue from their last
    ``checkpoint-*`` (``train.run``, ``train.sft.run_sft``), and cached stages (indexes,
    judge answers, self-filter samples, KLCF stages) are read back. ``ValueError`` when the
    folder is not a resumable run of this notebook (``manifest.resumable``), or when its
    config.yaml changed since the last attempt and ``force`` is not set (with ``force`` a
    warning: the manifest keeps each attempt's config)."""
    _no_resume_flags(params=params, out=out, smoke=smoke)
    run_dir = Path(run_dir)
    manifest = resumable(run_dir, nb_path.stem)
    if manifest is None:
        log.warning("%s has no manifest.json (an older run folder); resuming it as %s", run_dir, nb_path.stem)
    cfg = load_config(run_dir / "config.yaml", config_for_notebook(nb_path.stem))
    changed = changed_keys(last_config(manifest), _json_plain(cfg.model_dump(mode="json"))) if manifest else []
    if changed:
        shown = ", ".join(changed[:8]) + (f" (+{len(changed) - 8} more)" if len(changed) > 8 else "")
        if not force:
            raise ValueError(f"--resume {run_dir}: config.yaml changed since the last attempt ({shown}); resume "
                             "with --force to continue with the edited config (manifest.json keeps each "
                             "attempt's config), or start a new run")
        log.warning("%s: resuming with a config.yaml edited since the last attempt (%s); the manifest keeps "
                    "each attempt's config", run_dir, shown)
    return run_dir, cfg, (manifest or {}).get("params") or str(run_dir / "config.yaml")


def _json_plain(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


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


def save_metrics(run_dir: str | Path | None, metrics: dict[str, Any], key: str | None = None) -> None:
    """Merge ``metrics`` (under ``key`` if given) into ``<run_dir>/metrics.json``, written
    atomically: a full disk or a crash leaves the previous file whole. A metrics.json that
    cannot be read is moved aside (``metrics.json.unreadable``, warned) rather than lost.
    Returns nothing, so a notebook cell that ends with it shows no path."""
    run_dir = Path(run_dir) if run_dir else interactive_run_dir()
    path = run_dir / "metrics.json"
    try:
        data = load_metrics(run_dir)
    except ValueError as e:
        aside = path.with_name("metrics.json.unreadable")
        os.replace(path, aside)
        log.warning("%s; moved to %s, starting a new metrics.json", e, aside)
        data = {}
    if key:
        section = data.get(key)
        data[key] = {**(section if isinstance(section, dict) else {}), **metrics}
    else:
        data.update(metrics)
    write_json(path, data, indent=2, default=float)


def load_metrics(run_dir: str | Path) -> dict[str, Any]:
    """``<run_dir>/metrics.json`` (``{}`` when there is none); ``ValueError`` naming the file
    when it is not a readable JSON object."""
    path = Path(run_dir) / "metrics.json"
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        raise ValueError(f"{path}: unreadable metrics ({type(e).__name__}: {e})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: metrics are a JSON object, got {type(data).__name__}")
    return data


def save_figure(fig, run_dir: str | Path | None, name: str) -> Path:
    """Save a matplotlib figure as ``<run_dir>/figures/<name>.png``."""
    run_dir = Path(run_dir) if run_dir else interactive_run_dir()
    path = run_dir / "figures" / f"{name}.png"
    no_symlink(path.parent, "a run folder").mkdir(parents=True, exist_ok=True)
    fig.savefig(no_symlink(path, "a run folder"), dpi=120, bbox_inches="tight")
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


def save_headline(run_dir: str | Path | None, metrics: dict[str, Any], first: bool = False) -> None:
    """Record a run's headline numbers (a flat name -> value mapping; None values dropped):
    shown first in its report and as its row in ``outputs/index.html``. Each notebook leads
    with its hypothesis metric, before -> after (its recipe's ``headline``); ``first`` puts ``metrics``
    before what the headline holds already (the evidence cell's interval leads)."""
    new = {str(k): v for k, v in metrics.items() if v is not None}
    if not first:
        save_metrics(run_dir, new, key="headline")
        return
    run_dir = Path(run_dir) if run_dir else interactive_run_dir()
    data = load_metrics(run_dir)
    data["headline"] = {**new, **{k: v for k, v in (data.get("headline") or {}).items() if k not in new}}
    write_json(run_dir / "metrics.json", data, indent=2, default=float)


def _format_value(v: Any) -> str:
    if isinstance(v, bool) or v is None:
        return html.escape(str(v))
    if isinstance(v, (int, float)):
        return f"{int(v):,}" if float(v).is_integer() else f"{v:.3f}"
    return html.escape(str(v))


# Metric names a reader looks for first; ``headline_of`` picks them from metrics.json when the
# notebook recorded no ``save_headline``.
HEADLINE_NAMES = ("accuracy", "macro_f1", "hallucination_rate", "attempted_accuracy", "na_rate", "precision",
                  "recall", "factscore", "win_rate", "auc", "answer_accuracy", "pass_rate")
_HEADLINE_SKIP = {"alarms", "cost", "datastore", "index", "pipeline", "reward_table", "reward_comparison",
                  "landscape", "teacher", "rows", "runs", "summary", "stages", "judge"}


def headline_of(metrics: dict[str, Any], limit: int = 12) -> dict[str, Any]:
    """A run's headline numbers: its ``save_headline`` record, else up to ``limit`` numbers of
    metrics.json whose name is one of ``HEADLINE_NAMES`` (three levels deep at most, bulky
    sections skipped), labelled by their path."""
    if metrics.get("headline"):
        return dict(metrics["headline"])
    found: dict[str, Any] = {}

    def walk(node: Any, path: tuple[str, ...]) -> None:
        if not isinstance(node, dict) or len(path) > 3:
            return
        for k, v in node.items():
            if len(found) >= limit or k in _HEADLINE_SKIP:
                continue
            if k in HEADLINE_NAMES and isinstance(v, (int, float)) and not isinstance(v, bool):
                found[" · ".join((*path, k))] = v
            else:
                walk(v, (*path, str(k)))

    walk(metrics, ())
    return found


def headline_html(metrics: dict[str, Any]) -> str:
    """The headline table that opens a report (every name and value escaped)."""
    head = headline_of(metrics)
    if not head:
        return ""
    rows = "".join(f"<tr><th style='text-align:left;padding-right:1.5em'>{html.escape(str(k))}</th>"
                   f"<td>{_format_value(v)}</td></tr>" for k, v in head.items())
    return f"<h2>Headline</h2><table>{rows}</table>"


def _run_row(run_dir: Path, index_dir: Path) -> str:
    """One run's row of ``outputs/index.html`` (every value escaped); raises on a manifest or
    metrics.json that cannot be read."""
    m = read_manifest(run_dir) or {}
    wrong = [k for k in ("notebook", "params", "state", "error", "started_at", "ended_at")
             if m.get(k) is not None and not isinstance(m[k], str)]
    if wrong:
        raise ValueError(f"manifest.json: {', '.join(wrong)} should be text")
    started, ended = m.get("started_at") or "", m.get("ended_at")
    try:
        secs = (_dt.datetime.fromisoformat(ended) - _dt.datetime.fromisoformat(started)).total_seconds()
        duration = f"{int(secs // 60)} min {int(secs % 60)} s"
    except (TypeError, ValueError):
        duration = ""
    state = m.get("state", "?") + (f": {m['error']}" if m.get("error") else "")
    head = headline_of(load_metrics(run_dir), limit=6)
    numbers = "; ".join(f"{html.escape(str(k))} {_format_value(v)}" for k, v in head.items())
    cells = [html.escape(m.get("notebook") or run_dir.parent.name), _report_link(run_dir, index_dir),
             html.escape(Path(str(m.get("params", ""))).name), html.escape(state), duration, numbers]
    return "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"


def _report_link(run_dir: Path, index_dir: Path) -> str:
    report = run_dir / "report.html"
    return (f"<a href='{html.escape(os.path.relpath(report, index_dir), quote=True)}'>"
            f"{html.escape(run_dir.name)}</a>" if report.exists() else html.escape(run_dir.name))


def _run_rows(runs_root: Path, index_dir: Path) -> list[tuple[str, str]]:
    """(run folder name, row) of every run folder with a manifest; a folder whose manifest or
    metrics cannot be read gets a visible "unreadable" row instead of stopping the index."""
    rows = []
    for manifest in runs_root.glob("*/*/manifest.json"):
        run_dir = manifest.parent
        try:
            row = _run_row(run_dir, index_dir)
        except Exception as e:  # noqa: BLE001 - any damage to an old run folder: shown, never fatal
            why = f"unreadable: {type(e).__name__}: {e}".splitlines()[0][:300]
            cells = [html.escape(run_dir.parent.name), _report_link(run_dir, index_dir), "", html.escape(why), "", ""]
            row = "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"
        rows.append((run_dir.name, row))  # stamp first
    return rows


def write_index(results: list[RunResult], path: Path) -> Path:
    """``outputs/index.html``: one row per run folder under the runs folder(s) of ``results``
    (notebook, run and its report, params, status, duration, headline numbers), newest
    first. Every value is escaped (error text can quote model output)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    roots = {Path(r.run_dir).parent.parent for r in results}
    rows = [row for root in roots for row in _run_rows(root, path.parent)]
    for r in results:  # a run of this call without a manifest (the runner failed early) still gets its row
        if not (Path(r.run_dir) / "manifest.json").exists():
            state = "ok" if r.ok else f"failed: {r.error}"
            link = (f"<a href='{html.escape(os.path.relpath(r.report, path.parent), quote=True)}'>"
                    f"{html.escape(Path(r.run_dir).name)}</a>")
            cells = [html.escape(Path(r.run_dir).parent.name), link, "", html.escape(state), "", ""]
            rows.append((Path(r.run_dir).name, "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"))
    rows.sort(key=lambda row: row[0], reverse=True)
    head = "".join(f"<th>{h}</th>" for h in ("notebook", "run", "params", "status", "duration", "headline"))
    atomic_write_text(path, "<!DOCTYPE html><html><head><meta charset='utf-8'><title>factlab reports</title>"
                      "<style>body{font-family:sans-serif;margin:2em}td,th{padding:0.3em 0.8em;text-align:left;"
                      "vertical-align:top;border-bottom:1px solid #ddd}</style></head><body><h1>factlab reports</h1>"
                      f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(r for _, r in rows)}</tbody></table>"
                      "</body></html>")
    return path

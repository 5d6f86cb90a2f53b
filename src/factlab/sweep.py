"""Sweeps: a grid of params overrides, one notebook run (its own run folder) per point.

    factlab sweep 04_k2v --params params/04_k2v_smoke.yaml --grid rewards.0.args.alpha=0,2,6
    factlab sweep 01_corver --smoke --grid rewards.2.args.count_rewards.0=-0.5,-0.3,-0.1 --executor ray

A grid comes from ``--grid KEY=V1,V2 ...`` and from the params file's ``sweep: {grid: {...}}``
block (the command line wins per key); the points are the cartesian product, in order. A
KEY is a dotted path into the resolved params (list items by index); each value is read as
YAML (``2.0``, ``null``, ``[full]``, ``{kappa: 0.25, lam: 0.25, mu: 0.5}``; commas inside
brackets, braces or quotes do not split values), and a mapping is merged into the mapping
at KEY. Every point is validated against the notebook's config before anything runs; all
bad points are reported together, naming the point and the key.

The sweep folder (``outputs/sweeps/<notebook>/<params>/`` unless ``--out``) holds
``sweep.json`` (the plan), ``points/<id>/params.yaml`` (each point's resolved params),
``points/<id>/status.json`` and its run folder under ``points/<id>/``, plus ``summary.csv``
and ``summary.html`` (one row per point: the grid values, status, seconds, run folder, error
and the numeric leaves of the run's ``metrics.json``) and ``figures/<metric>.png`` (the chosen
metric per point). A point's id comes from its overrides, so growing a grid keeps the finished
points: re-running a sweep skips every point whose status is ok for the same resolved params.
A failed point (a cell error, a crash) is recorded with its error and the others go on.

Executors: ``local``, a bounded process pool (``max_workers``; 1 runs the points one after
another in this process), and ``ray``, one Ray task per point with the resources of
``sweep.ray`` (``num_cpus``, ``num_gpus``, custom ``resources``) on ``ray.init(address=...)``
(a running cluster, whose workers must see the sweep folder) or on a local instance of
``max_workers`` CPUs. Install Ray with ``pip install 'factlab[ray]'``.
"""

from __future__ import annotations

import copy
import hashlib
import importlib.util
import itertools
import json
import logging
import re
import sys
import time
from html import escape
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import pandas as pd
import yaml

from .plots import plot_metric
from .config import ConfigError, load_yaml, read_params, refuse_url_credentials, validate
from .sections import SweepSection
from .credentials import redact_text, redact_value
from .runner import config_for_notebook, default_params, find_notebook, outputs_root, run_notebook
from .paths import write_json

log = logging.getLogger(__name__)

__all__ = ["SweepPoint", "SweepPlan", "split_values", "parse_grid", "set_dotted", "expand_grid", "point_id",
           "plan_sweep", "run_point", "run_sweep", "flatten_metrics", "summary_frame",
           "write_summary", "add_command", "command"]

RunnerFn = Callable[[str, str, str], Mapping[str, Any]]


# ---------------------------------------------------------------- grid parsing

def split_values(text: str) -> list[str]:
    """``a,[1,2],{k: 1, j: 2},'x,y'`` -> the four values: commas split only outside
    brackets, braces and quotes."""
    out, depth, quote, cur = [], 0, None, []
    for ch in text:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{(":
            depth += 1
        elif ch in "]})":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
            continue
        cur.append(ch)
    out.append("".join(cur).strip())
    if depth or quote:
        raise ConfigError(f"grid values {redact_text(repr(text))}: unbalanced brackets or quotes")
    return out


def _value(text: str) -> Any:
    return load_yaml(text, f"grid value {redact_text(repr(text))}") if text else None


def parse_grid(items: Sequence[str]) -> dict[str, list[Any]]:
    """``["a.b=1,2", "c=x"]`` -> ``{"a.b": [1, 2], "c": ["x"]}`` (values read as YAML)."""
    grid: dict[str, list[Any]] = {}
    for item in items:
        key, sep, values = item.partition("=")
        key = key.strip()
        if not sep or not key or not values.strip():
            raise ConfigError(f"--grid {redact_text(repr(item))}: expected KEY=V1,V2,... (e.g. rewards.0.args.alpha=2,4,6)")
        if key in grid:
            raise ConfigError(f"--grid: key {key!r} given twice")
        grid[key] = [_value(v) for v in split_values(values)]
    return grid


def set_dotted(data: dict[str, Any], key: str, value: Any) -> dict[str, Any]:
    """A copy of ``data`` with ``value`` at the dotted ``key`` (list items by index; missing
    mapping keys are created, so an unknown key is left for validation to name; a mapping
    value is merged into an existing mapping)."""
    root = copy.deepcopy(data)  # (a JSON round trip failed on a YAML date, with a traceback)
    parts = key.split(".")
    node: Any = root
    for i, part in enumerate(parts):
        here = ".".join(parts[:i + 1])
        last = i == len(parts) - 1
        if isinstance(node, list):
            if not re.fullmatch(r"-?\d+", part) or not -len(node) <= int(part) < len(node):
                raise ConfigError(f"grid key '{key}': '{here}' needs a list index below {len(node)}")
            part = int(part)
        elif not isinstance(node, dict):
            raise ConfigError(f"grid key '{key}': '{'.'.join(parts[:i]) or key}' is a {type(node).__name__}, "
                              f"not a mapping or a list")
        if last:
            old = node[part] if isinstance(node, list) else node.get(part)
            node[part] = {**old, **value} if isinstance(old, dict) and isinstance(value, dict) else value
        else:
            if isinstance(node, dict) and node.get(part) is None:
                node[part] = {}
            node = node[part]
    return root


def expand_grid(grid: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """The cartesian product of ``grid`` as one overrides dict per point, in order."""
    keys = list(grid)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(grid[k] for k in keys))]


def point_id(overrides: Mapping[str, Any]) -> str:
    """A readable, stable folder name for a point: ``alpha=2.0-3f9a1c`` (a URL's credentials
    never reach the name: values are redacted first, the digest tells them apart)."""
    text = "_".join(f"{k.rsplit('.', 1)[-1]}={json.dumps(redact_value(v), sort_keys=True)}" for k, v in overrides.items())
    slug = re.sub(r"[^A-Za-z0-9=._+-]+", "", text.replace(" ", ""))[:60] or "point"
    digest = hashlib.sha1(json.dumps(overrides, sort_keys=True, default=str).encode()).hexdigest()[:6]
    return f"{slug}-{digest}"


# ---------------------------------------------------------------- planning

@dataclass
class SweepPoint:
    id: str
    overrides: dict[str, Any]
    params: dict[str, Any]  # resolved, validated (the point's config.yaml content)

    @property
    def params_hash(self) -> str:
        return hashlib.sha1(json.dumps(self.params, sort_keys=True, default=str).encode()).hexdigest()


@dataclass
class SweepPlan:
    notebook: str  # notebook stem
    params_file: str
    settings: SweepSection
    points: list[SweepPoint] = field(default_factory=list)

    @property
    def grid_keys(self) -> list[str]:
        return list(self.settings.grid)


def plan_sweep(notebook: str, params_file: str | Path, grid: Mapping[str, Sequence[Any]] | None = None,
               **settings: Any) -> SweepPlan:
    """Expand and validate every point (``ConfigError`` listing every bad point, before
    anything runs). ``grid`` (the command line's) overrides the file's ``sweep.grid`` per key;
    ``settings`` (``executor``, ``max_workers``, ``metric``, ``ray``) override ``sweep``'s."""
    stem = Path(notebook).stem
    cls = config_for_notebook(stem)
    raw = read_params(params_file)
    block = raw.pop("sweep", None) or {}
    base = validate(raw, cls, source=str(params_file))
    refuse_url_credentials(base)  # the points' config.yaml files hide them: every run would send ***
    sweep_data = {**block, **{k: v for k, v in settings.items() if v is not None}}
    sweep_data["grid"] = {**(block.get("grid") or {}), **dict(grid or {})}
    sweep = validate(sweep_data, SweepSection, source=f"{params_file} (sweep)")
    if not sweep.grid:
        raise ConfigError(f"{params_file}: no grid: give --grid KEY=V1,V2 or a sweep: {{grid: ...}} block")
    resolved = base.model_dump(mode="json")
    points, errors = [], []
    for overrides in expand_grid(sweep.grid):
        pid = point_id(overrides)
        try:
            data = resolved
            for key, value in overrides.items():
                data = set_dotted(data, key, value)
            cfg = validate(data, cls, source=f"{params_file} point {pid} {redact_value(overrides)}")
            refuse_url_credentials(cfg)
        except ConfigError as e:
            errors.append(str(e))
            continue
        points.append(SweepPoint(pid, overrides, cfg.model_dump(mode="json")))
    if errors:
        raise ConfigError(f"{len(errors)} of {len(errors) + len(points)} sweep points do not validate:\n"
                          + "\n".join(errors))
    ids = [p.id for p in points]
    if len(set(ids)) < len(ids):
        raise ConfigError(f"{params_file}: the grid repeats a point: {sorted({i for i in ids if ids.count(i) > 1})}")
    return SweepPlan(stem, str(params_file), sweep, points)


def default_sweep_dir(plan: SweepPlan) -> Path:
    return outputs_root(find_notebook(plan.notebook).parent.parent) / "sweeps" / plan.notebook / Path(
        plan.params_file).stem


# ---------------------------------------------------------------- running

def run_point(notebook: str, params_path: str, out_dir: str) -> dict[str, Any]:
    """The real runner: one papermill run of ``notebook`` with ``params_path`` into a run
    folder under ``out_dir`` (``factlab.runner.run_notebook``)."""
    res = run_notebook(notebook, params=params_path, out=out_dir, progress=False, raise_on_error=False)
    return {"ok": res.ok, "error": res.error, "run_dir": str(res.run_dir)}


def _call(runner_fn: RunnerFn, notebook: str, params_path: str, out_dir: str) -> dict[str, Any]:
    """``runner_fn`` timed; an exception becomes a failed result (the sweep goes on)."""
    t0 = time.perf_counter()
    try:
        res = dict(runner_fn(notebook, params_path, out_dir))
    except Exception as e:  # noqa: BLE001 - a point's failure is recorded, never fatal to the sweep
        res = {"ok": False, "error": f"{type(e).__name__}: {e}", "run_dir": None}
    res.setdefault("ok", False)
    res["seconds"] = time.perf_counter() - t0
    return res


def _finished(status_file: Path, point: SweepPoint) -> bool:
    if not status_file.exists():
        return False
    try:
        st = json.loads(status_file.read_text())
    except json.JSONDecodeError:
        return False
    return bool(st.get("ok")) and st.get("params_hash") == point.params_hash


def _local(jobs, runner_fn: RunnerFn, max_workers: int):
    if max_workers == 1 or len(jobs) <= 1:
        for job in jobs:
            yield job[0], _call(runner_fn, *job[1:])
        return
    with ProcessPoolExecutor(max_workers=max_workers) as pool:
        futures = {pool.submit(_call, runner_fn, *job[1:]): job[0] for job in jobs}
        for fut in as_completed(futures):
            try:
                yield futures[fut], fut.result()
            except Exception as e:  # noqa: BLE001 - a worker that died (BrokenProcessPool)
                yield futures[fut], {"ok": False, "error": f"{type(e).__name__}: {e}", "run_dir": None}


def _ray(jobs, runner_fn: RunnerFn, settings: SweepSection):
    import ray

    started = False
    if not ray.is_initialized():
        rs = settings.ray
        if rs.address:
            ray.init(address=rs.address)
        else:
            ray.init(num_cpus=settings.max_workers, include_dashboard=False)
        started = True
    try:
        rs = settings.ray
        opts: dict[str, Any] = {"num_cpus": rs.num_cpus, "num_gpus": rs.num_gpus, "max_retries": 0}
        if rs.resources:
            opts["resources"] = dict(rs.resources)
        task = ray.remote(**opts)(_call)
        refs = {task.remote(runner_fn, *job[1:]): job[0] for job in jobs}
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            ref = done[0]
            try:
                yield refs[ref], ray.get(ref)
            except Exception as e:  # noqa: BLE001 - a task whose worker died
                yield refs[ref], {"ok": False, "error": f"{type(e).__name__}: {e}", "run_dir": None}
    finally:
        if started:
            ray.shutdown()


def run_sweep(plan: SweepPlan, out_dir: str | Path | None = None, runner_fn: RunnerFn = run_point
              ) -> pd.DataFrame:
    """Run every unfinished point of ``plan`` with its executor and write the summary;
    returns the summary frame (one row per point)."""
    out = Path(out_dir) if out_dir else default_sweep_dir(plan)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "sweep.json",
        {"notebook": plan.notebook, "params_file": str(plan.params_file), "settings": plan.settings.model_dump(),
         "points": [{"id": p.id, "overrides": p.overrides} for p in plan.points]}, indent=1, default=str)
    jobs = []
    for p in plan.points:
        folder = out / "points" / p.id
        folder.mkdir(parents=True, exist_ok=True)
        params_path = folder / "params.yaml"
        params_path.write_text(yaml.safe_dump(p.params, sort_keys=False), encoding="utf-8")
        if _finished(folder / "status.json", p):
            log.info("sweep point %s: finished earlier, skipped", p.id)
            continue
        jobs.append((p.id, plan.notebook, str(params_path), str(folder)))
    by_id = {p.id: p for p in plan.points}
    s = plan.settings
    log.info("sweep %s: %d points, %d to run (%s executor)", plan.notebook, len(plan.points), len(jobs), s.executor)
    if s.executor == "ray" and jobs and importlib.util.find_spec("ray") is None:
        raise ConfigError("executor 'ray' needs Ray: pip install 'factlab[ray]' (or pip install ray)")
    results = _ray(jobs, runner_fn, s) if s.executor == "ray" and jobs else _local(jobs, runner_fn, s.max_workers)
    for pid, res in results:
        status = {"id": pid, "overrides": by_id[pid].overrides, "params_hash": by_id[pid].params_hash,
                  "finished_at": time.strftime("%Y-%m-%dT%H:%M:%S"), **res}
        write_json(out / "points" / pid / "status.json", status, indent=1, default=str)
        if res.get("ok"):
            log.info("sweep point %s: ok in %.0f s", pid, res.get("seconds", 0.0))
        else:
            log.warning("sweep point %s failed: %s", pid, res.get("error"))
    frame = summary_frame(plan, out)
    write_summary(frame, out, plan.settings.metric, plan.grid_keys)
    return frame


# ---------------------------------------------------------------- summary

def flatten_metrics(metrics: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """The numeric leaves of a ``metrics.json`` as ``{"a.b.c": value}``; a list of mappings is
    entered by index (``compare.summary.0.gain``), other lists and text are left out."""
    out: dict[str, float] = {}
    for k, v in metrics.items():
        key = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.update(flatten_metrics(v, key + "."))
        elif isinstance(v, list) and v and all(isinstance(x, Mapping) for x in v):
            out.update(flatten_metrics({str(i): x for i, x in enumerate(v)}, key + "."))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[key] = float(v)
    return out


def summary_frame(plan: SweepPlan, out_dir: str | Path) -> pd.DataFrame:
    """One row per planned point from its ``status.json`` (``pending`` if it has none): id,
    the grid values, status, seconds, run folder, error, then the run's numeric metrics."""
    rows = []
    for p in plan.points:
        status_file = Path(out_dir) / "points" / p.id / "status.json"
        st = json.loads(status_file.read_text()) if status_file.exists() else {}
        state = "pending" if not st else ("ok" if st.get("ok") else "failed")
        if state == "ok" and st.get("params_hash") != p.params_hash:
            state = "stale"
        row = {"point": p.id, **{k: json.dumps(v) if isinstance(v, (dict, list)) else v for k, v in p.overrides.items()},
               "status": state, "seconds": st.get("seconds"), "run_dir": st.get("run_dir"), "error": st.get("error")}
        metrics_file = Path(st["run_dir"]) / "metrics.json" if st.get("run_dir") else None
        if metrics_file is not None and metrics_file.exists():
            try:
                for k, v in flatten_metrics(json.loads(metrics_file.read_text())).items():
                    row[k if k not in row else f"metrics.{k}"] = v
            except json.JSONDecodeError:
                log.warning("sweep point %s: unreadable %s", p.id, metrics_file)
        rows.append(row)
    return pd.DataFrame(rows)


def write_summary(frame: pd.DataFrame, out_dir: str | Path, metric: str | None, grid_keys: Sequence[str]
                  ) -> dict[str, Path]:
    """``summary.csv`` (every column), ``summary.html`` (the grid, status, the metric, seconds,
    error, run folder; text escaped) and, with a metric, ``figures/<metric>.png``."""
    out = Path(out_dir)
    paths = {"csv": out / "summary.csv", "html": out / "summary.html"}
    frame.to_csv(paths["csv"], index=False)
    cols = ["point", *grid_keys, "status", *([metric] if metric and metric in frame else []), "seconds", "error",
            "run_dir"]
    body = frame[[c for c in cols if c in frame]].to_html(index=False, escape=True, na_rep="", float_format="%.4g")
    html = f"<html><head><meta charset='utf-8'><title>sweep</title></head><body><h1>Sweep summary</h1>{body}"
    if metric and metric in frame and frame[metric].notna().any():
        import matplotlib

        matplotlib.use("Agg")  # a command-line process: draw into the file, never a window
        fig = plot_metric(frame, metric, grid_keys)
        paths["figure"] = out / "figures" / f"{re.sub(r'[^A-Za-z0-9._-]+', '_', metric)}.png"
        paths["figure"].parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(paths["figure"], dpi=120, bbox_inches="tight")
        import matplotlib.pyplot as plt

        plt.close(fig)
        html += f"<p><img src='figures/{escape(paths['figure'].name)}' alt='{escape(metric)}'></p>"
    elif metric:
        html += f"<p>metric {escape(repr(metric))} not found in any finished point's metrics.json</p>"
    paths["html"].write_text(html + "</body></html>", encoding="utf-8")
    return paths


# ---------------------------------------------------------------- command line

def add_command(sub) -> None:
    """Register ``factlab sweep`` on the CLI's subparsers."""
    s = sub.add_parser("sweep", help="run a notebook once per point of a params grid",
                       description="Expand --grid (and the params file's sweep: {grid: ...}) into one run per "
                                   "point; re-running skips finished points.")
    s.add_argument("notebook", help="notebook path or stem, e.g. 04_k2v")
    s.add_argument("--params", help="params YAML (default: params/<stem>.yaml, or _smoke with --smoke)")
    s.add_argument("--smoke", action="store_true", help="use params/<stem>_smoke.yaml")
    s.add_argument("--grid", nargs="*", default=[], metavar="KEY=V1,V2",
                   help="dotted key path and its values, e.g. rewards.0.args.alpha=0,2,6 (values read as YAML)")
    s.add_argument("--executor", choices=["local", "ray"], help="local process pool (default) or Ray tasks")
    s.add_argument("--max-workers", type=int, help="points at once (local processes; CPUs of a local Ray instance)")
    s.add_argument("--ray-address", help="ray.init(address=...), e.g. auto or ray://head:10001 (default: local)")
    s.add_argument("--num-gpus", type=float, help="GPUs each point's Ray task requests")
    s.add_argument("--num-cpus", type=float, help="CPUs each point's Ray task requests")
    s.add_argument("--metric", help="dotted path in metrics.json to plot per point")
    s.add_argument("--out", help="sweep folder (default: outputs/sweeps/<notebook>/<params>)")
    s.add_argument("--dry-run", action="store_true", help="validate and list the points, run nothing")
    s.set_defaults(func=command)


def command(args) -> int:
    """``factlab sweep``: 0 when every point is ok, 1 when some failed, 2 on bad input."""
    nb = find_notebook(args.notebook)
    params = Path(args.params) if args.params else default_params(nb, args.smoke)
    ray_opts = {k: v for k, v in {"address": args.ray_address, "num_gpus": args.num_gpus,
                                  "num_cpus": args.num_cpus}.items() if v is not None}
    block = (read_params(params).get("sweep") or {}).get("ray") or {}
    plan = plan_sweep(nb.stem, params, parse_grid(args.grid), executor=args.executor, max_workers=args.max_workers,
                      metric=args.metric, ray={**block, **ray_opts} if ray_opts else None)
    print(f"{len(plan.points)} points of {nb.stem} ({plan.settings.executor} executor):")
    for p in plan.points:
        print(f"  {p.id}  {p.overrides}")
    if args.dry_run:
        return 0
    frame = run_sweep(plan, args.out)
    out = Path(args.out) if args.out else default_sweep_dir(plan)
    counts = frame["status"].value_counts().to_dict()
    print(f"sweep folder: {out}\nsummary:      {out / 'summary.html'}\npoints:       {counts}")
    for _, r in frame[frame["status"] == "failed"].iterrows():
        print(f"FAILED {r['point']}: {r['error']}", file=sys.stderr)
    return 0 if counts.get("ok", 0) == len(frame) else 1

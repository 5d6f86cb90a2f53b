"""Each paper's claim as a pre-registered hypothesis, run with seeds and intervals (issue 28).

    factlab evidence [NAME ...]      # = make evidence; every hypothesis without a name

A hypothesis names a notebook, its params file ``params/<notebook>_evidence.yaml`` (arms,
seeds, budget: one notebook run, at most 30 minutes on 2 CPU cores), and its comparisons: a
truth metric (measured per held-out question with the mini-world's exact truth,
``factlab.eval.truth``), the treatment arm, the control arm and the expected direction. The
hypotheses below were written in README ("Evidence") before any of them ran.

``run`` executes the notebook (``runner.run_notebook``), reads the ``evidence.json`` its
evidence cell wrote (``recipes.evidence.run_arms``), computes each comparison's effect with a
paired bootstrap 95% interval over questions and seeds (``eval.bootstrap``), and writes
``results/<name>/``: ``effects.json``, the figure (the truth metric and the reward over steps,
one line per seed per arm), ``command.txt``, the run's ``manifest.json`` (commit, package
versions, hardware) and ``runtime.md`` (where the minutes went: each notebook cell's seconds and
each evidence run's training seconds, ``runtime_table``); then rebuilds ``results/README.md``,
one table row per comparison.

Verdicts: a comparison measured on no (seed, question) pair of both arms (e.g. no answer with a
verifiable sentence) is ``no data``, and so is its hypothesis when it is the primary one. A
comparison is ``held`` when its interval lies on the expected side of 0, ``not
held`` when it lies on the other side, ``null`` when it contains 0. A "not lower" comparison
(a guard, not the claim) holds unless its interval lies wholly below 0. A hypothesis holds when
its primary comparison holds and no guard fails.
"""

from __future__ import annotations

import gzip
import json
import logging
import math
import resource
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Sequence

import matplotlib.pyplot as plt
import pandas as pd

from .eval.alarms import ZERO_STD_KEY, nonzero_advantage_share
from .eval.bootstrap import Effect, paired_bootstrap, verdict
from .eval.power import minimum_detectable_effect
from .manifest import git_state, hardware, package_versions
from .paths import atomic_write_text, no_symlink, refuse_symlinks, write_json, atomic_open
from .plots import plot_arm_effects, plot_dose_response, plot_evidence_curves
from .runner import load_metrics, load_params, project_root, run_notebook, save_figure, save_headline, save_metrics
from .experiment import EVIDENCE_HYPOTHESES, HYPOTHESES, Comparison, Hypothesis
from .recipes.evidence import BASE_ARM, EVIDENCE_FILE, run_arms, truth_evaluator

__all__ = ["Comparison", "Hypothesis", "HYPOTHESES", "EVIDENCE_HYPOTHESES", "write_rows", "read_rows", "recompute",
           "power_analysis", "registered_roles", "COST_TIE", "POWER_SEEDS", "POWER_SEED_SD", "POWER_FILE", "arm_effects", "ARMS_FIGURE",
           "ROWS_FILE", "dose_response", "analyze", "overall", "report_frame", "run_in_notebook", "summary", "headline",
           "run",
           "write_table", "main"]

NO_DATA = "no data"  # the verdict of a comparison nothing was measured for on both sides

log = logging.getLogger(__name__)


# ---------------------------------------------------------------- analysis


def in_subset(row: dict, subset: str | None) -> bool:
    """Whether a per-question row belongs to ``subset`` (``Comparison.subset``)."""
    if subset is None:
        return True
    bucket = str(row.get("bucket") or "")
    return bucket == subset or (subset == "rare" and bucket.startswith("rare-"))


def _per_question(rows: Sequence[dict], arm: str, metric: str, subset: str | None = None,
                  step: int | None = None) -> dict:
    """``{(seed, question): value}`` (``{question: value}`` for the base, measured once) of the
    trained policies, or of their snapshots at ``step`` (the dose-response rows)."""
    out = {}
    for r in rows:
        if r.get("step") != step and arm != BASE_ARM:
            continue
        if r["arm"] == arm and metric in r and r[metric] is not None and in_subset(r, subset):
            out[r["question"] if arm == BASE_ARM else (r["seed"], r["question"])] = float(r[metric])
    return out


def _per_step(curves: Sequence[dict], arm: str, metric: str) -> dict:
    out = {}
    for c in curves:
        if c["arm"] != arm:
            continue
        value = nonzero_advantage_share(c.get(ZERO_STD_KEY)) if metric == "nonzero_advantage" else c.get(metric)
        if value is not None:
            out[(c["seed"], c["step"])] = float(value)
    return out


COST_TIE = 0.1  # a per-CPU-minute comparison is scaled only when its arms' mean CPU costs differ by more than this share


def analyze(record: dict, hypothesis: Hypothesis, replicates: int = 2000) -> list[dict[str, Any]]:
    """Every comparison of ``hypothesis`` on an ``evidence.json`` record: the effect, its 95%
    interval, the verdict, the seeds and questions it is over."""
    cpu = pd.DataFrame(record.get("cpu_seconds") or [], columns=["arm", "seed", "cpu_seconds", "wall_seconds"])
    out = []
    for c in hypothesis.comparisons:
        if c.per == "step":
            t, k = _per_step(record["curves"], c.treatment, c.metric), _per_step(record["curves"], c.control, c.metric)
            k = {(s, step): v for (s, step), v in k.items()}
        else:
            t = _per_question(record["rows"], c.treatment, c.metric, c.subset)
            k = _per_question(record["rows"], c.control, c.metric, c.subset)
        try:
            effect = paired_bootstrap(t, k, replicates=replicates)
        except ValueError as e:  # nothing measured on both sides (e.g. no verifiable sentence): said, not hidden
            log.warning("%s, %s: %s", hypothesis.name, c.label(), e)
            out.append({"comparison": c.label(), "metric": c.metric, "treatment": c.treatment, "control": c.control,
                        "direction": c.direction, "primary": c.primary, "per": c.per,
                        **Effect(math.nan, math.nan, math.nan, 0, 0, replicates).as_dict(), "verdict": NO_DATA})
            continue
        scaled = None
        if c.scale == "cpu_minutes":
            minutes = float(cpu.loc[cpu["arm"] == c.treatment, "cpu_seconds"].mean()) / 60.0
            control = float(cpu.loc[cpu["arm"] == c.control, "cpu_seconds"].mean()) / 60.0
            # issue 41: arms of one cost make the per-minute scale a constant (0.5 / 1.083 = 0.461), not a result
            scaled = not (abs(minutes - control) <= COST_TIE * max(minutes, control))
            if scaled:
                effect = Effect(effect.mean / minutes, effect.lo / minutes, effect.hi / minutes, effect.seeds,
                                effect.questions, effect.replicates)
        if c.direction == "not lower" and c.margin is not None:
            v = "held" if effect.lo > -c.margin else ("not held" if effect.hi < -c.margin else "null")
        elif c.direction == "not lower":
            v = "not held" if effect.hi < 0 else "held"
        else:
            v = verdict(effect, c.direction)
        out.append({"comparison": c.label(scaled), "metric": c.metric, "treatment": c.treatment,
                    "control": c.control, "direction": c.direction, "primary": c.primary, "per": c.per,
                    **effect.as_dict(), "verdict": v})
    return out


def dose_response(record: dict, hypothesis: Hypothesis, replicates: int = 1000) -> list[dict[str, Any]]:
    """Each primary (per-question) comparison's effect at every step the record has snapshots of
    (``evidence.dose_steps``), then at the trained policy's last step; step 0 is the start (the
    base, effect 0 by construction when the control is the base). One row per (comparison, step)
    with the effect, its 95% interval and the seeds and questions it is over."""
    steps = sorted({int(r["step"]) for r in record.get("rows") or [] if r.get("step") is not None})
    last = max((int(c["step"]) for c in record.get("curves") or []), default=None)
    out = []
    for c in hypothesis.comparisons:
        if not c.primary or c.per != "question":
            continue
        for step in [*steps, None]:
            t = _per_question(record["rows"], c.treatment, c.metric, c.subset, step)
            k = _per_question(record["rows"], c.control, c.metric, c.subset, step)
            try:
                e = paired_bootstrap(t, k, replicates=replicates)
            except ValueError:
                continue
            out.append({"comparison": c.label(), "step": step if step is not None else last, "final": step is None,
                        **e.as_dict()})
    return out


POWER_SEEDS = (5, 8, 12)  # the seed counts a pilot prices
POWER_SEED_SD = (0.0, 0.02, 0.05)  # assumed spread of the seeds' whole effect (a pilot without a treatment cannot see it)


def power_analysis(record: dict, hypothesis: Hypothesis, seeds: Sequence[int] = POWER_SEEDS,
                   seed_sd: Sequence[float] = POWER_SEED_SD, simulations: int = 100,
                   replicates: int = 400) -> list[dict[str, Any]]:
    """The minimum detectable effect at 80% power (``eval.power``) of each directional per-question
    comparison of ``hypothesis``, from a pilot record's base rows (``EvidenceSection.pilot``): one row
    per (comparison, seeds, seed_sd) with the pilot's base mean and question count. Guards ("not
    lower") carry their margin instead; per-step comparisons have no pilot."""
    out = []
    for c in hypothesis.comparisons:
        if c.per != "question" or c.direction not in ("higher", "lower"):
            continue
        base = list(_per_question(record["rows"], BASE_ARM, c.metric, c.subset).values())
        if not base:
            out.append({"comparison": c.label(), "primary": c.primary, "questions": 0, "verdict": NO_DATA})
            continue
        for n_seeds in seeds:
            for sd in seed_sd:
                m = minimum_detectable_effect(base, n_seeds, c.direction, seed_sd=sd, simulations=simulations,
                                              replicates=replicates)
                out.append({"comparison": c.label(), "primary": c.primary, "base_mean": sum(base) / len(base),
                            "questions": len(base), "seeds": n_seeds, "seed_sd": sd, "mde": m["mde"]})
    return out


ARMS_FIGURE = "arms.png"  # results/<name>/arms.png: every trained arm against the base on the primary metric


def arm_effects(record: dict, hypothesis: Hypothesis, replicates: int = 1000) -> list[dict[str, Any]]:
    """Every trained arm's effect against the base on the first primary per-question comparison's
    metric and subset (its final policy; paired bootstrap 95% interval), in the record's arm order."""
    c = next((c for c in hypothesis.comparisons if c.primary and c.per == "question"), None)
    if c is None:
        return []
    base = _per_question(record["rows"], BASE_ARM, c.metric, c.subset)
    out = []
    for arm in record.get("arms") or []:
        try:
            e = paired_bootstrap(_per_question(record["rows"], arm, c.metric, c.subset), base, replicates=replicates)
        except ValueError:
            continue
        out.append({"arm": arm, "label": f"{c.metric}" + (f" on {c.subset}" if c.subset else ""), **e.as_dict()})
    return out


def overall(effects: Sequence[dict]) -> str:
    """The hypothesis' verdict: its primary comparison's, unless a guard failed (``not held``)."""
    primary = [e["verdict"] for e in effects if e["primary"]]
    if any(v == NO_DATA for v in primary):
        return NO_DATA
    guards = [e["verdict"] for e in effects if not e["primary"] and e["direction"] == "not lower"]
    if "not held" in guards:
        return "not held"
    if all(v == "held" for v in primary):
        return "held" if all(v == "held" for v in guards) else "null"  # a guard not shown holds nothing
    return "not held" if all(v == "not held" for v in primary) else "null"


def report_frame(record: dict, name: str | None = None, replicates: int = 2000) -> pd.DataFrame:
    """What a notebook's evidence cell shows: every comparison of the record's hypothesis with
    its effect, interval and verdict, the hypothesis' verdict in the caption (``attrs``)."""
    h = HYPOTHESES[name or record["hypothesis"]]
    effects = analyze(record, h, replicates=replicates)
    frame = pd.DataFrame(effects)[["comparison", "direction", "mean", "lo", "hi", "seeds", "questions", "verdict",
                                   "primary"]]
    means = [arm_means(record, c) for c in h.comparisons]
    frame.insert(2, "control_mean", [m[0] for m in means])
    frame.insert(3, "treatment_mean", [m[1] for m in means])
    frame.attrs["verdict"] = overall(effects)
    frame.attrs["claim"] = h.claim
    return frame


def run_in_notebook(cfg: Any, resources: Any, rows: Sequence[dict], heldout_rows: Sequence[dict], run_dir: str | Path,
                    *, max_new_tokens: int | None = None, start_model: str | None = None,
                    arm_rows: dict[str, Sequence[dict]] | None = None,
                    adapt_rewards: Any = None) -> tuple[pd.DataFrame, dict]:
    """A notebook's evidence cell: ``cfg.evidence``'s arms trained on ``rows`` (``arm_rows``
    per arm; ``adapt_rewards`` as in ``recipes.evidence.run_arms``) and evaluated with the exact
    truth on the first ``cfg.evidence.heldout`` held-out rows (``recipes.evidence``), the effects
    (``report_frame``), the curves figure and the ``evidence`` entry of ``metrics.json``;
    resumable like every stage."""
    ev = cfg.evidence
    heldout = list(heldout_rows)[:ev.heldout]
    evaluate = truth_evaluator(cfg, heldout, max_new_tokens=max_new_tokens or ev.max_new_tokens,
                               batch_size=max(1, getattr(cfg.eval_generation, "batch_size", 16)),
                               start_model=start_model)
    record = run_arms(cfg, ev, rows, resources, evaluate, Path(run_dir) / "evidence", start_model=start_model,
                      arm_rows=arm_rows, adapt_rewards=adapt_rewards)
    if ev.pilot:  # the base alone: the power analysis, no effect
        frame = pd.DataFrame(power_analysis(record, HYPOTHESES[ev.hypothesis]))
        frame.attrs.update(verdict="pilot (no arm trained)", claim=HYPOTHESES[ev.hypothesis].claim)
        save_metrics(run_dir, {"hypothesis": ev.hypothesis, "pilot": True, "heldout": len(heldout),
                               "power": frame.to_dict(orient="records")}, key="evidence")
        return frame, record
    frame = report_frame(record)
    save_figure(plot_evidence_curves(record, f"{ev.hypothesis}: truth and reward over steps"), run_dir, "evidence_curves")
    save_metrics(run_dir, {"hypothesis": ev.hypothesis, "verdict": frame.attrs["verdict"], "heldout": len(heldout),
                           "effects": frame.to_dict(orient="records")}, key="evidence")
    save_headline(run_dir, headline(frame), first=True)
    return frame, record


def headline(frame: pd.DataFrame) -> dict[str, str]:
    """The run's headline entries of an evidence table: each primary comparison's effect with
    its 95% interval, seeds and verdict (``report_frame``'s rows); where the frame has the two
    arms' means, they lead: ``control → treatment``."""
    rows = frame[frame["primary"]] if "primary" in frame else frame.iloc[:1]
    out = {}
    for _, r in rows.iterrows():
        effect = f"{_fmt(r['mean'])} [{_fmt(r['lo'])}, {_fmt(r['hi'])}] {r['verdict']}"
        if "control_mean" in r and r["control_mean"] == r["control_mean"]:
            effect = f"{r['control_mean']:.3f} → {r['treatment_mean']:.3f}; effect {effect}"
        out[f"{r['comparison']} ({r['seeds']} seeds, {r['questions']} questions)"] = effect
    return out


def arm_means(record: dict, comparison: Comparison) -> tuple[float, float]:
    """The control's and the treatment's mean of ``comparison``'s metric over the same
    (seed, question) pairs the effect is computed on (NaN when none is measured on both)."""
    if comparison.per != "question":
        return math.nan, math.nan
    t = _per_question(record["rows"], comparison.treatment, comparison.metric, comparison.subset)
    k = _per_question(record["rows"], comparison.control, comparison.metric, comparison.subset)
    pairs = [(v, k[key] if key in k else k.get(key[1])) for key, v in t.items()]
    pairs = [(a, b) for a, b in pairs if b is not None and a == a and b == b]
    if not pairs:
        return math.nan, math.nan
    return sum(b for _, b in pairs) / len(pairs), sum(a for a, _ in pairs) / len(pairs)


def summary(frame: pd.DataFrame) -> str:
    """The evidence cell's lead line (Markdown): the hypothesis as written, and its verdict."""
    return f"**Hypothesis** ({frame.attrs.get('claim', '')}) **Verdict: {frame.attrs.get('verdict', 'n/a')}.**"


# ---------------------------------------------------------------- running and writing results


def results_dir(root: Path | None = None) -> Path:
    return (root or project_root()) / "results"


def results_folder(root: Path | None, name: str) -> Path:
    """``results/<name>``, ``SymlinkRefused`` naming the first symbolic link, hard link or FIFO
    there (``results/`` and the folder included): results/ is committed, so a clone can carry a
    link that evidence would write through (``command.txt``, ``rows.jsonl.gz.tmp`` or
    ``README.md`` pointing at any file of the user's). Checked before a run and before each write."""
    folder = results_dir(root) / name
    for path in (folder.parent, folder, folder.parent / "README.md"):
        no_symlink(path, "results/")
    if folder.is_dir():
        refuse_symlinks(folder, "results/")
    return folder


POWER_FILE = "power.json"  # results/<name>/power.json: the pilot's minimum detectable effects (factlab evidence --pilot)


def _pilot_params(params_file: str, out: Path, name: str) -> str:
    """A params file that is ``params_file`` with ``evidence.pilot: true`` (the base alone)."""
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"pilot-{name}.yaml"
    atomic_write_text(path, f"base: {json.dumps(str(Path(params_file).resolve()))}\nevidence: {{pilot: true}}\n")
    return str(path)


def _write_power(folder: Path, name: str, rows: list[dict], wall_minutes: float, params_file: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    write_json(folder / POWER_FILE, {"hypothesis": name, "params": params_file,
                                                      "wall_minutes": wall_minutes, "rows": rows},
                                                     indent=1, default=float)
    return folder / POWER_FILE


def run(names: Sequence[str] | None = None, out: str | Path | None = None, params: dict[str, str] | None = None,
        root: Path | None = None, replicates: int = 2000, pilot: bool = False,
        resume: str | Path | None = None) -> list[dict[str, Any]]:
    """Run each named hypothesis (every one without names) and write ``results/`` (module
    docstring); returns the per-hypothesis summaries. ``params`` replaces a hypothesis'
    params file by name (the tests' tiny-step settings). ``pilot``: the base alone on the same
    held-out rows (``EvidenceSection.pilot``), then ``power_analysis`` into
    ``results/<name>/power.json``; no arm trains and no effect or table is written.
    ``resume``: the run folder of an interrupted run of the one name given, continued in place
    (``runner.run_notebook``: finished arms and seeds are read back), then written as above."""
    names = list(names or EVIDENCE_HYPOTHESES)
    unknown = [n for n in names if n not in HYPOTHESES]
    if unknown:
        raise ValueError(f"unknown hypothesis {unknown}; known: {', '.join(HYPOTHESES)}")
    if resume is not None:
        if len(names) != 1:
            raise ValueError("factlab evidence --resume RUN_DIR continues one hypothesis: name it")
        _check_resumed(Path(resume), HYPOTHESES[names[0]], pilot)
        log.warning("%s: resumed; the CPU and wall minutes written to results/%s count this attempt only", resume,
                    names[0])
    root = root or project_root()
    for name in names:  # before anything runs
        results_folder(root, name)
    summaries = []
    for name in names:
        h = HYPOTHESES[name]
        params_file = (params or {}).get(name, str(root / h.params))
        if pilot:
            runs = Path(out) if out else root / "outputs" / "evidence"
            t0 = time.perf_counter()
            res = (run_notebook(h.notebook, resume=resume, raise_on_error=True, progress=False) if resume else
                   run_notebook(h.notebook, params=_pilot_params(params_file, runs, name), out=runs,
                                raise_on_error=True, progress=False))
            rows = load_metrics(res.run_dir)["evidence"]["power"]  # the evidence cell's power_analysis
            path = _write_power(results_folder(root, name), name, rows, (time.perf_counter() - t0) / 60.0, params_file)
            print(f"evidence {name}: pilot of the base alone -> {path}", flush=True)
            print(pd.DataFrame(rows).to_string(index=False), flush=True)
            summaries.append({"hypothesis": name, "pilot": True, "power": rows, "run_dir": str(res.run_dir)})
            continue
        command = f"factlab evidence {name}"
        print(f"evidence {name}: running {h.notebook} with {params_file}", flush=True)
        cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        t0 = time.perf_counter()
        res = (run_notebook(h.notebook, resume=resume, raise_on_error=True, progress=False) if resume else
               run_notebook(h.notebook, params=params_file, out=out or (root / "outputs" / "evidence"),
                            raise_on_error=True, progress=False))
        cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        wall = time.perf_counter() - t0
        cpu_minutes = ((cpu1.ru_utime - cpu0.ru_utime) + (cpu1.ru_stime - cpu0.ru_stime)) / 60.0
        record = json.loads(next(res.run_dir.rglob(EVIDENCE_FILE)).read_text())
        effects = analyze(record, h, replicates=replicates)
        summary = {"hypothesis": name, "notebook": h.notebook, "claim": h.claim, "paper": h.paper,
                   "verdict": overall(effects), "effects": effects, "seeds": record["seeds"],
                   "cpu_minutes": cpu_minutes, "wall_minutes": wall / 60.0, "command": command,
                   "params": str(Path(params_file).relative_to(root)) if Path(params_file).is_relative_to(root)
                   else str(params_file), "run_dir": str(res.run_dir)}
        _write_hypothesis(results_folder(root, name), summary, record, res.run_dir)
        print(f"evidence {name}: {summary['verdict']} in {wall / 60:.1f} min wall, {cpu_minutes:.1f} CPU min",
              flush=True)
        summaries.append(summary)
    write_table(results_dir(root))
    return summaries


def _check_resumed(run_dir: Path, h: Hypothesis, pilot: bool) -> None:
    """``ValueError`` unless ``run_dir`` is a run folder of ``h`` (its notebook, its evidence
    section, a pilot exactly when ``pilot``): checked before anything runs."""
    try:
        cfg = load_params(h.notebook, run_dir / "config.yaml")
    except (OSError, ValueError) as e:
        raise ValueError(f"--resume {run_dir}: not a run folder of {h.notebook} ({str(e).splitlines()[0][:200]})") from None
    section = getattr(cfg, "evidence", None)
    if section is None or section.hypothesis != h.name:
        raise ValueError(f"--resume {run_dir}: not a run of the hypothesis {h.name} (its config.yaml tests "
                         f"{section.hypothesis if section else 'none'})")
    if section.pilot != pilot:
        raise ValueError(f"--resume {run_dir}: a {'pilot' if section.pilot else 'full'} run; "
                         f"{'add' if section.pilot else 'drop'} --pilot")


ROWS_FILE = "rows.jsonl.gz"  # results/<name>/rows.jsonl.gz: the record behind effects.json, committed
DOSE_FIGURE = "dose_response.png"  # results/<name>/dose_response.png: the primary effect by training steps


def write_rows(folder: Path, record: dict) -> Path:
    """``record`` (an ``evidence.json``) as ``rows.jsonl.gz``: one JSON line per per-question row
    (``"kind": "row"``), per training-curve point (``curve``) and per run's CPU time (``cpu``),
    after a ``header`` line (hypothesis, seeds, arms). gzip's header carries no time stamp, so
    the same record gives the same bytes."""
    lines = [json.dumps({"kind": "header", **{k: record.get(k) for k in ("hypothesis", "seeds", "arms")}})]
    for kind, key in (("row", "rows"), ("curve", "curves"), ("cpu", "cpu_seconds")):
        lines += [json.dumps({"kind": kind, **r}, default=float, sort_keys=True) for r in record.get(key) or []]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / ROWS_FILE
    with atomic_open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as gz:
        gz.write(("\n".join(lines) + "\n").encode("utf-8"))
    return path


def read_rows(folder: Path) -> dict:
    """The record ``write_rows`` wrote (an ``evidence.json``'s content); a missing file or a
    malformed line is a ValueError naming the file."""
    path = Path(folder) / ROWS_FILE
    if not path.is_file():
        raise ValueError(f"{path}: no committed rows (run `factlab evidence {Path(folder).name}` first)")
    record: dict[str, Any] = {"rows": [], "curves": [], "cpu_seconds": []}
    key = {"row": "rows", "curve": "curves", "cpu": "cpu_seconds"}
    try:
        with gzip.open(path, "rt", encoding="utf-8") as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                item = json.loads(line)
                need = {"row": ("arm", "seed", "question"), "curve": ("arm", "seed", "step"),
                        "cpu": ("arm", "seed", "cpu_seconds")}
                if not isinstance(item, dict) or not all(k in item for k in need.get(item.get("kind"), ())):
                    raise ValueError(f"line {n}: {line.strip()[:80]!r} is not a row, curve, cpu or header object "
                                     f"with its keys")
                kind = item.pop("kind")
                if kind == "header":
                    record.update(item)
                else:
                    record[key[kind]].append(item)
    except (OSError, EOFError, ValueError, KeyError, RecursionError) as e:
        raise ValueError(f"{path}: unreadable rows ({type(e).__name__}: {e})") from None
    if "hypothesis" not in record:
        raise ValueError(f"{path}: no header line")
    return record


def recompute(names: Sequence[str] | None = None, root: Path | None = None, replicates: int = 2000) -> list[dict]:
    """``factlab evidence --recompute``: each named hypothesis' effects and verdict rebuilt from
    its committed ``rows.jsonl.gz`` (no training), ``effects.json`` rewritten with them (its run
    facts kept), and the table. Every hypothesis with committed rows when no name is given."""
    folder = results_dir(root)
    names = list(names or [p.parent.name for p in sorted(folder.glob(f"*/{ROWS_FILE}"))])
    out = []
    for name in names:
        if name not in HYPOTHESES:
            raise ValueError(f"unknown hypothesis {name!r}; known: {', '.join(HYPOTHESES)}")
        record = read_rows(results_folder(root, name))
        effects = analyze(record, HYPOTHESES[name], replicates=replicates)
        path = folder / name / "effects.json"
        summary = _run_facts(path) if path.is_file() else {"hypothesis": name}
        summary.update(effects=effects, verdict=overall(effects), seeds=record.get("seeds"))
        write_effects(folder / name, summary)
        out.append(summary)
    write_table(folder)
    return out


def _run_facts(path: Path) -> dict:
    """The earlier ``effects.json`` whose run facts (CPU and wall minutes, command) a recompute
    keeps; ``ValueError`` naming it when it is not a JSON object (a bare JSONDecodeError or
    AttributeError before)."""
    try:
        s = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        s = e
    if not isinstance(s, dict):
        why = f"{type(s).__name__}: {s}" if isinstance(s, Exception) else f"a JSON {type(s).__name__}, not an object"
        raise ValueError(f"{path}: unreadable ({why}); its run facts cannot be kept: restore it (git checkout -- "
                         f"{path}) or rerun factlab evidence {path.parent.name}")
    return s


EFFECTS_FILE = "effects.json"
EFFECTS_KEYS = ("hypothesis", "effects", "verdict", "cpu_minutes")  # what write_table reads of one


def write_effects(folder: Path, summary: dict) -> Path:
    """``<folder>/effects.json``, written atomically: a crash or a full disk leaves the earlier
    one whole (a truncated one broke every later ``factlab evidence``)."""
    folder.mkdir(parents=True, exist_ok=True)
    return write_json(folder / EFFECTS_FILE, summary, indent=1, default=float)


def read_effects(path: Path) -> dict:
    """One hypothesis's ``effects.json``; ``ValueError`` naming the file when it is not JSON,
    or lacks a key ``write_table`` needs (``EFFECTS_KEYS``, and each effect's own)."""
    try:
        s = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError) as e:
        raise ValueError(f"{path}: unreadable ({type(e).__name__}: {e})") from None
    missing = [k for k in EFFECTS_KEYS if not isinstance(s, dict) or k not in s]
    if not missing and not isinstance(s["effects"], list):
        missing = ["effects (a list)"]
    need = ("comparison", "direction", "mean", "lo", "hi", "seeds", "verdict", "primary")
    if not missing:
        missing = [f"effects.{i}.{k}" for i, e in enumerate(s["effects"]) for k in need
                   if not isinstance(e, dict) or k not in e][:3]
    if missing:
        raise ValueError(f"{path}: missing {', '.join(missing)}; rerun: factlab evidence {path.parent.name}")
    number = (int, float)
    wrong = [k for k in ("cpu_minutes", "wall_minutes") if k in s and not (
        isinstance(s[k], number) or (k == "wall_minutes" and s[k] is None)) or isinstance(s.get(k), bool)]
    wrong += [f"effects.{i}.{k}" for i, e in enumerate(s["effects"]) for k in ("mean", "lo", "hi")
              if not isinstance(e[k], number) or isinstance(e[k], bool)]
    wrong += [f"effects.{i}.seeds" for i, e in enumerate(s["effects"])
              if not isinstance(e["seeds"], int) or isinstance(e["seeds"], bool)]
    if wrong:  # the table formats them as numbers (a ValueError / TypeError naming no file before)
        raise ValueError(f"{path}: {', '.join(wrong[:3])} not a number; rerun: factlab evidence {path.parent.name}")
    return s


def _write_hypothesis(folder: Path, summary: dict, record: dict, run_dir: Path) -> None:
    results_folder(folder.parent.parent, folder.name)  # no link planted since the run started
    write_rows(folder, record)
    write_effects(folder, summary)
    (folder / "command.txt").write_text(summary["command"] + "\n" + f"# params: {summary['params']}\n")
    manifest = run_dir / "manifest.json"
    if manifest.exists():
        shutil.copyfile(manifest, folder / "manifest.json")
    else:  # a run folder without one (never, from run_notebook): record the same facts here
        write_json(folder / "manifest.json", {"git": git_state(project_root()),
                                                          "packages": package_versions(),
                                                          "hardware": hardware()}, indent=1, default=str)
    (folder / RUNTIME_FILE).write_text(runtime_table(summary["hypothesis"], summary.get("wall_minutes"), run_dir,
                                                     record))
    fig = plot_evidence_curves(record, f"{summary['hypothesis']}: truth and reward over steps")
    fig.savefig(folder / "curves.png", dpi=110, bbox_inches="tight")
    doses = dose_response(record, HYPOTHESES[summary["hypothesis"]])
    if any(not d["final"] for d in doses):
        fig = plot_dose_response(doses, f"{summary['hypothesis']}: the primary effect by training steps")
        fig.savefig(folder / DOSE_FIGURE, dpi=110, bbox_inches="tight")
        write_json(folder / "dose_response.json", doses, indent=1, default=float)
    plt.close(fig)
    arms = arm_effects(record, HYPOTHESES[summary["hypothesis"]])
    if len(arms) >= 2:
        fig = plot_arm_effects(arms, f"{summary['hypothesis']}: each arm against the base")
        fig.savefig(folder / ARMS_FIGURE, dpi=110, bbox_inches="tight")
        plt.close(fig)
    for png in run_dir.glob("figures/*.png"):
        shutil.copyfile(png, folder / png.name)


def _cell_label(source: str) -> str:
    """A code cell's first statement line, short, safe inside a Markdown table cell."""
    line = next((ln.strip() for ln in source.splitlines() if ln.strip() and not ln.strip().startswith("#")), "")
    line = line.split("  #")[0].strip()
    line = line if len(line) <= 72 else line[:69] + "..."
    return "`" + line.replace("`", "'").replace("|", "\\|") + "`"


def budget_minutes(name: str) -> float:
    """A hypothesis' wall-clock budget: 20 minutes on the organism (issue 41), else 30."""
    h = HYPOTHESES.get(name)
    return ORGANISM_BUDGET_MINUTES if h is not None and h.model.startswith("organism") else BUDGET_MINUTES


def runtime_table(name: str, wall_minutes: float | None, run_dir: Path, record: dict) -> str:
    """``results/<name>/runtime.md``: where a hypothesis's minutes went, read from its run, so a
    budget is planned on measured costs: every code cell of the executed notebook with its
    seconds (papermill's record) and share, then every (arm, seed) run's training wall and CPU
    seconds (``evidence.json``; each run's held-out evaluation follows in the same worker)."""
    nb_path = Path(run_dir) / "notebook.ipynb"
    out = [f"# {name}: where the minutes went\n"]
    if wall_minutes is not None:
        out.append(f"Notebook run: {wall_minutes:.1f} min wall on this machine (budget {budget_minutes(name):g}).\n")
    cells = []
    if nb_path.exists():
        for c in json.loads(nb_path.read_text(encoding="utf-8")).get("cells", []):
            source = "".join(c.get("source") or "")
            if c.get("cell_type") == "code" and source.strip():
                seconds = (c.get("metadata", {}).get("papermill") or {}).get("duration")
                cells.append((_cell_label(source), float(seconds or 0.0)))
    total = sum(sec for _, sec in cells)
    if cells:
        out += ["Notebook cells (papermill's durations; the evidence cell holds every arm's runs):\n",
                "| cell | seconds | share |", "| --- | --- | --- |"]
        out += [f"| {label} | {sec:.1f} | {sec / total:.1%} |" for label, sec in cells if sec >= 0.5]
        out.append(f"| all cells | {total:.1f} | 100% |\n")
    else:
        out.append(f"No executed notebook in {nb_path.parent.name}: no cell durations.\n")
    runs = record.get("cpu_seconds") or []
    if runs:
        last: dict[tuple, int] = {}  # the steps each run trained: its curves' last step (DAPO's refills can end it early)
        for c in record.get("curves") or []:
            key = (c.get("arm"), c.get("seed"))
            last[key] = max(last.get(key, 0), int(c.get("step") or 0))
        out += ["Evidence runs (training only, from `evidence.json`; each is followed by its held-out "
                "evaluation in the same worker; steps: the last logged training step):\n",
                "| arm | seed | steps | wall s | CPU s |", "| --- | --- | --- | --- | --- |"]
        out += [f"| {r['arm']} | {r['seed']} | {last.get((r['arm'], r['seed']), 'n/a')} "
                f"| {float(r.get('wall_seconds') or float('nan')):.0f} | {float(r['cpu_seconds']):.0f} |" for r in runs]
    return "\n".join(out) + "\n"


def _fmt(x: float) -> str:
    return "nan" if x != x else f"{x:+.3f}"


STATUS_FILE = "status.md"  # results/<name>/status.md: why a hypothesis has no results (first line: the reason)
REPRODUCED_FILE = "reproduced.md"  # results/<name>/reproduced.md: the folder's run redone from a fresh clone
RUNTIME_FILE = "runtime.md"  # results/<name>/runtime.md: where the run's minutes went (runtime_table)
BUDGET_MINUTES = 30.0  # one hypothesis, one notebook run, 2 CPU cores (issue 28)


ORGANISM_BUDGET_MINUTES = 20  # issue 41: each organism hypothesis within 20 minutes on 2 idle cores


def _minutes(wall: float | None, budget: float = BUDGET_MINUTES) -> str:
    if wall is None:
        return "n/a"
    return f"{wall:.1f}" + (f" (over the {budget:g}-minute budget)" if wall > budget else "")


def _mde(folder: Path, comparison: str, seeds: int) -> str:
    """The pilot's minimum detectable effects of ``comparison`` at ``seeds`` seeds, for each
    assumed seed spread (``results/<name>/power.json``), e.g. ``0.02 / 0.03 / 0.07``; ``n/a``
    without a pilot."""
    data = _read_power(folder / POWER_FILE)
    got = [r for r in data.get("rows", []) if r.get("comparison") == comparison and r.get("seeds") == seeds]
    if not got:
        return "n/a"
    got.sort(key=lambda r: r["seed_sd"])
    return " / ".join("none" if r["mde"] != r["mde"] else f"{r['mde']:.2f}" for r in got)


def _read_power(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as e:
        log.warning("%s is unreadable (%s); its MDE column reads n/a", path, e)
        return {}
    rows = data.get("rows") if isinstance(data, dict) else None
    need = ("comparison", "seeds", "seed_sd", "mde")
    if not isinstance(rows, list) or not all(isinstance(r, dict) and all(k in r for k in need)
                                             and isinstance(r["mde"], (int, float)) and isinstance(r["seed_sd"], (int, float))
                                             for r in rows):
        log.warning("%s: 'rows' is not a list of pilot rows with %s; its MDE column reads n/a", path, ", ".join(need))
        return {}
    return data


# a figure that answers its hypothesis' own question is named by it in the table's figure list
FIGURE_LABELS = {("reward_hallucination", ARMS_FIGURE):
                 "the reward-hallucination figure (wrong answers on unknown countries under each judge, against the base)",
                 ("reward_hallucination_klcf", ARMS_FIGURE):
                 "the reward-hallucination figure of KLCF (contradicted sentences per answer at each flip rate, against "
                 "the base)",
                 ("reward_hallucination_klcf_judge", ARMS_FIGURE):
                 "the reward-hallucination figure of KLCF's judges (contradicted sentences per answer under each "
                 "truthfulness RM, against the base)"}


def registered_roles(name: str, effects: Sequence[dict]) -> list[dict]:
    """``effects`` with each comparison's ``primary`` as registered in ``HYPOTHESES[name]``, so a
    record written before a rule was corrected is read by the registered claim (issue 41: compare's
    "every family"). Matched on the comparison's label (its subset included: one pair of arms may
    be a primary on every question and a secondary on one bucket), else on metric, treatment and
    control for a record labelled before its label changed."""
    h = HYPOTHESES.get(name)
    comparisons = h.comparisons if h is not None else ()
    by_label = {label: c.primary for c in comparisons for label in (c.label(), c.label(scaled=False))}
    by_arms: dict[tuple, bool] = {}
    for c in comparisons:
        by_arms.setdefault((c.metric, c.treatment, c.control), c.primary)
    return [{**e, "primary": by_label.get(e.get("comparison"),
                                          by_arms.get((e.get("metric"), e.get("treatment"), e.get("control")),
                                                      e["primary"]))}
            for e in effects]


def write_table(folder: Path) -> Path:
    """``results/README.md``: one row per comparison of every hypothesis with results, in two
    sections: the organism's hypotheses (issue 41), then the first round's on the 135M policy."""
    organism_rows: list[str] = []
    first_rows: list[str] = []

    def section(name: str) -> list[str]:  # an unknown name (a damaged or retired folder) reads as current
        h = HYPOTHESES.get(name)
        return first_rows if h is not None and not h.model.startswith("organism") else organism_rows

    for f in sorted(folder.glob(f"*/{EFFECTS_FILE}")):
        rows = section(f.parent.name)
        try:
            s = read_effects(f)
        except ValueError as e:  # one damaged folder does not stop the table
            log.warning("%s", e)
            rows.append(f"| {f.parent.name} | n/a | n/a | n/a | n/a | n/a | n/a | n/a | n/a | unreadable: {e} |")
            continue
        effects = registered_roles(s["hypothesis"], s["effects"])
        verdict = overall(effects)
        for e in effects:
            role = "" if e["primary"] else (" (guard)" if e["direction"] == "not lower" else " (secondary)")
            overall_note = f" (hypothesis: {verdict})" if e["primary"] else ""
            budget = budget_minutes(s["hypothesis"])
            rows.append(f"| {s['hypothesis']}{role} | {e['comparison']} | {e['direction']} | {_fmt(e['mean'])} "
                        f"| [{_fmt(e['lo'])}, {_fmt(e['hi'])}] | {e['seeds']} "
                        f"| {_mde(f.parent, e['comparison'], e['seeds'])} | {s['cpu_minutes']:.1f} "
                        f"| {_minutes(s.get('wall_minutes'), budget)} | {e['verdict']}{overall_note} |")
    for name in HYPOTHESES:  # a hypothesis without results: the reason, measured, in its status.md
        status = folder / name / STATUS_FILE
        if not (folder / name / "effects.json").exists() and status.exists():
            first = next((line.strip("# ").strip() for line in status.read_text().splitlines() if line.strip()), "")
            section(name).append(f"| {name} | n/a | n/a | n/a | n/a | n/a | n/a | n/a | n/a "
                        f"| not run: {first} ([{name}/{STATUS_FILE}]({name}/{STATUS_FILE})) |")
    head = ("# Evidence: each paper's claim on the mini-world\n\n"
            "Produced by `factlab evidence` (`make evidence`); the hypotheses were written in the project\n"
            "README's \"Evidence\" section before the runs. Effects are treatment - control on the named\n"
            "truth metric (per held-out question, or per training step for a training statistic),\n"
            "paired on question and seed; intervals are paired bootstrap 95% over questions and seeds.\n"
            "MDE: the minimum detectable effect at 80% power from the pilot of the base alone\n"
            "(`factlab evidence --pilot`, `power.json`) at the row's seeds, for seeds whose whole effects\n"
            "spread by 0 / 0.02 / 0.05 (n/a: no pilot; the first round had none).\n"
            "Verdicts follow each hypothesis' registered rule: every primary comparison must hold, and no\n"
            "guard may fail (compare's claim is \"every family\", so its four families are all primary).\n"
            "A per-CPU-minute effect is scaled only where the arms' CPU costs differ (by over 10%); the\n"
            "first round's compare record predates that rule and its arms cost the same, so its\n"
            "per-CPU-minute effects are truth effects divided by one constant.\n"
            "CPU minutes: the notebook run's CPU time (2 cores); wall minutes: its runtime, against a\n"
            "budget of 30 (20 on the organism; a run over it is marked). Each folder holds the figures, the\n"
            "command, the run manifest and `runtime.md` (where the minutes went: each notebook cell's\n"
            "seconds and each (arm, seed) run's).\n")
    columns = ("| hypothesis | comparison | expected | effect | 95% interval | seeds | MDE | CPU minutes "
               "| wall minutes | verdict |\n"
               "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |\n")
    rows = []
    if organism_rows or not first_rows:
        rows.append(f"\n## On the knowledge organism (rounds 2 and 3; budget 20 minutes)\n\n{columns}"
                    + "\n".join(organism_rows))
    if first_rows:
        rows.append("\n## First round: the 135M policy (SmolLM2-135M-Instruct after its warm start; budget 30 "
                    "minutes)\n\nThese stay as they ran: 3 seeds, no pilot and no guard margins, which issue 41 "
                    f"found too weak to test the papers.\n\n{columns}" + "\n".join(first_rows))
    folders = sorted(p for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []
    figures = [f"[{d.name}: {FIGURE_LABELS.get((d.name, png), label)}]({d.name}/{png})" for d in folders
               for png, label in ((DOSE_FIGURE, "the primary effect by training steps"),
                                  (ARMS_FIGURE, "each arm against the base")) if (d / png).exists()]
    if figures:
        rows.append("\nFigures: " + "; ".join(figures) + ".")
    reproduced = [name for name in HYPOTHESES if (folder / name / REPRODUCED_FILE).exists()]
    tail = ("\nRedone from a fresh clone (its reproduced.md compares the two runs): "
            + ", ".join(f"[{name}]({name}/{REPRODUCED_FILE})" for name in reproduced) + ".\n") if reproduced else ""
    path = no_symlink(folder / "README.md", "results/")
    folder.mkdir(parents=True, exist_ok=True)
    return atomic_write_text(path, head + "\n".join(rows) + "\n" + tail)


def main(argv: Sequence[str] | None = None) -> int:
    """``factlab evidence [NAME ...]``."""
    names = list(argv if argv is not None else sys.argv[1:])
    run(names or None)
    return 0


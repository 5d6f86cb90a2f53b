"""Reward-hacking alarms for training runs: the report after training.

Every GRPO run logs what the alarms read (``train.health.CompletionHealth``, beside TRL's own
per-step metrics). After training, ``check({run: TrainResult}, cfg.alarms)`` runs the detectors of
``factlab.eval.alarms`` on each run's per-step frame, logs a warning for every alarm that
fired (with its step), writes ``alarms.json`` into each run's folder and returns one table;
``styled`` renders it for a report with the fired rows marked.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Mapping, Sequence

import pandas as pd

from ..eval.alarms import AlarmsSection, alarm_table, detect
from .grpo import TrainResult
from ..paths import write_json

log = logging.getLogger(__name__)

__all__ = ["check", "check_folders", "heldout_from_history", "styled", "frames"]


def heldout_from_history(history: Sequence[Mapping[str, float]]) -> pd.Series:
    """A held-out series (step -> mean over benchmarks) from ``UtilityEarlyStopping.history``
    rows (``{"step": s, <benchmark>: score, ...}``)."""
    rows = {int(h["step"]): [float(v) for k, v in h.items() if k != "step"] for h in history}
    return pd.Series({s: sum(v) / len(v) for s, v in rows.items() if v}, dtype=float).sort_index()


def check(results: Mapping[str, TrainResult | None], cfg: AlarmsSection,
          heldout: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """Every alarm for every run (``alarm_table`` rows; ``results`` maps a run name to its
    ``TrainResult``, None skipped); each fired alarm is logged with its
    step and each run's rows are saved as ``<output_dir>/alarms.json``. ``heldout`` maps a
    run name to its held-out metric by step (higher is better), where one was measured."""
    per_run = {}
    for name, result in results.items():
        if result is None:
            continue
        frame = result.steps_frame() if any("loss" in h for h in result.log_history) else pd.DataFrame()
        alarms = detect(frame, cfg, (heldout or {}).get(name))
        per_run[name] = alarms
        for a in alarms:
            if a.fired:
                log.warning("%s: reward-hacking alarm %s fired at step %s: %.4g (threshold %.4g) %s",
                            name, a.name, a.step, a.value, a.threshold, a.note)
        table = alarm_table({name: alarms})
        path = Path(result.output_dir) / "alarms.json"
        if path.parent.is_dir():
            write_json(path, table.to_dict(orient="records"), indent=1, default=float)
    return alarm_table(per_run)


def styled(table: pd.DataFrame):
    """The alarm table as a pandas Styler, fired rows highlighted (text is escaped, the step
    an integer)."""
    def mark(row):
        colour = "background-color: #f8d7da" if row["status"] == "FIRED" else ""
        return [colour] * len(row)

    def whole(v):
        return "" if v is None or v != v else f"{int(v)}"

    return (table.reset_index(drop=True).style.apply(mark, axis=1).format(escape="html", precision=3, na_rep="")
            .format(whole, subset=[c for c in ("step",) if c in table.columns])
            .set_caption("Reward-hacking alarms"))


def check_folders(folders: Mapping[str, str | Path], cfg: AlarmsSection,
                  heldout: Mapping[str, Any] | None = None) -> pd.DataFrame:
    """``check`` on finished runs read back from their folders (``TrainResult.load``), e.g.
    the comparison's run folders (``heldout`` as in ``check``); a folder without a finished run
    is skipped with a warning."""
    results = {}
    for name, folder in folders.items():
        results[name] = TrainResult.load(folder)
        if results[name] is None:
            log.warning("%s: no finished training run in %s, no alarms", name, folder)
    return check(results, cfg, heldout)


def frames(runs: Mapping[str, TrainResult | str | Path | None]) -> dict[str, pd.DataFrame]:
    """Each run's per-step frame (``TrainResult.steps_frame``), from results or from finished
    run folders; runs with nothing logged are left out. What ``report.plot_training_curves``
    and ``report.plot_reward_validity`` draw."""
    out = {}
    for name, run in runs.items():
        result = run if isinstance(run, TrainResult) or run is None else TrainResult.load(run)
        if result is not None and any("loss" in h for h in result.log_history):
            out[name] = result.steps_frame()
    return out

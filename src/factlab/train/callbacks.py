"""Trainer callbacks shared by the RL notebooks.

``StepSnapshots``: the policy (its adapter, or the full model) saved at chosen steps, for an
evidence run's dose-response (the truth metric measured at several step counts, issue 41).

``UtilityEarlyStopping``: Binary RAR's guard against utility loss (001_f9c1f8134c3dd554.txt
§4.3: "we stop training if a checkpoint shows more than a 10% drop on any utility
benchmark"). Pluggable: ``utility_fn(model) -> {benchmark: score}`` is any callable (the
notebooks pass a forced-answer QA accuracy; ``factlab.eval.utility.lm_eval_utility`` runs
lm-evaluation-harness tasks when it is installed).
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable, Mapping

from pydantic import Field
from transformers import TrainerCallback

from ..config import Section

log = logging.getLogger(__name__)


class EarlyStoppingSection(Section):
    """001 §4.3: stop when any utility benchmark drops more than 10% from the start."""

    enabled: bool = True
    eval_every: int = Field(50, ge=1)
    max_relative_drop: float = Field(0.10, gt=0.0, lt=1.0)
    lm_eval_tasks: list[str] = []  # run with lm-evaluation-harness when it is installed
    qa_limit: int = Field(64, ge=1)  # fallback utility: forced-answer QA accuracy on this many items


def relative_drops(baseline: Mapping[str, float], current: Mapping[str, float]) -> dict[str, float]:
    """(baseline - current) / baseline per benchmark present in both (0 when baseline is 0)."""
    out = {}
    for k, b in baseline.items():
        if k in current:
            out[k] = (b - current[k]) / b if b else 0.0
    return out


class UtilityEarlyStopping(TrainerCallback):
    """Measure utility before training and every ``eval_every`` steps; stop when any
    benchmark drops by more than ``max_relative_drop`` (0.10) relative to the baseline.

    §4.3 stops *before* the drop: with ``keep_dir``, the model (or adapter) of the last check
    that passed (the start, at step 0) is saved there, so the degraded model is never the one
    evaluated. ``history`` keeps ``{"step", <benchmark>: score, ...}`` rows; ``stopped_at`` is
    the step that triggered the stop (None if training ran to the end); ``kept_step`` the step
    of the model in ``keep_dir``.
    """

    def __init__(self, utility_fn: Callable[[object], Mapping[str, float]], eval_every: int = 50,
                 max_relative_drop: float = 0.10, keep_dir: str | Path | None = None):
        if eval_every < 1:
            raise ValueError(f"eval_every must be >= 1, got {eval_every}")
        if not 0.0 < max_relative_drop < 1.0:
            raise ValueError(f"max_relative_drop must be in (0, 1), got {max_relative_drop}")
        self.utility_fn, self.eval_every, self.max_relative_drop = utility_fn, eval_every, max_relative_drop
        self.baseline: dict[str, float] | None = None
        self.history: list[dict[str, float]] = []
        self.stopped_at: int | None = None
        self.keep_dir = Path(keep_dir) if keep_dir else None
        self.kept_step: int | None = None

    def _keep(self, model, state, step: int, processing_class=None) -> None:
        """Save the model that passed the check at ``step`` (main process only)."""
        self.kept_step = step
        if self.keep_dir is None or not state.is_world_process_zero:
            return
        model.save_pretrained(str(self.keep_dir))
        if processing_class is not None:
            processing_class.save_pretrained(str(self.keep_dir))

    def _measure(self, model, step: int) -> dict[str, float]:
        was_training = model.training
        model.eval()
        try:
            scores = {k: float(v) for k, v in self.utility_fn(model).items()}
        finally:
            model.train(was_training)
        self.history.append({"step": step, **scores})
        return scores

    def on_train_begin(self, args, state, control, model=None, processing_class=None, **kwargs):
        if self.baseline is None and model is not None:
            self.baseline = self._measure(model, state.global_step)
            log.info("utility baseline: %s", self.baseline)
            self._keep(model, state, state.global_step, processing_class)
        return control

    def on_step_end(self, args, state, control, model=None, processing_class=None, **kwargs):
        if model is None or self.baseline is None or state.global_step % self.eval_every:
            return control
        drops = relative_drops(self.baseline, self._measure(model, state.global_step))
        worst = max(drops.items(), key=lambda kv: kv[1], default=(None, 0.0))
        if worst[1] > self.max_relative_drop:
            log.warning("utility %s dropped %.1f%% (> %.0f%%) at step %d: stopping", worst[0], 100 * worst[1],
                        100 * self.max_relative_drop, state.global_step)
            self.stopped_at = state.global_step
            control.should_training_stop = True
            control.should_save = True
        else:
            self._keep(model, state, state.global_step, processing_class)
        return control


class StepSnapshots(TrainerCallback):
    """Save the policy at each of ``steps`` (global steps) into ``<folder>/step-<n>``: the adapter
    of a LoRA run, else the whole model, with the tokenizer. A snapshot already on disk (a resumed
    run) is kept. The main process writes."""

    def __init__(self, steps, folder: str | Path):
        self.steps = sorted({int(s) for s in steps if int(s) > 0})
        self.folder = Path(folder)

    def path(self, step: int) -> Path:
        return self.folder / f"step-{step}"

    def on_step_end(self, args, state, control, model=None, processing_class=None, **kwargs):
        step = state.global_step
        out = self.path(step)
        if step in self.steps and state.is_world_process_zero and model is not None and not out.exists():
            tmp = out.with_name(out.name + ".tmp")
            model.save_pretrained(str(tmp))
            if processing_class is not None:
                processing_class.save_pretrained(str(tmp))
            tmp.rename(out)
        return control

"""What every recipe's stages share: the launched-job helpers and the warm start.

A recipe's stages run in two settings: the notebook (one process) and ``factlab train`` (every
process of an ``accelerate launch``, or one plain process with ``--prepare-only``). The stages
are written once for both; the few places where processes must not race (a folder one of them
writes, an adapter merged into a model) go through ``main_process_first``, which is the plain
block when no process group is up (the notebook).

Rules a recipe follows so that ``factlab train`` can launch it (``factlab.launch``):

- ``prepare(cfg, resources, run_dir)`` builds the training input; every launched process runs
  it, the main process first (its caches and folders are then read by the others). It trains
  nothing in a launched job: a training step inside it would wait for processes still queued
  behind ``main_process_first``.
- ``prepare_alone(cfg)`` says when ``prepare`` (or ``start``, the warm start) does train: the
  warm start's SFT, KLCF's truthfulness reward model. ``factlab train`` then runs the prepare
  stage once in its own plain process (``python -m factlab.launch --prepare-only``) before the
  launch, and the launched processes find it finished (every trained stage is resumable: a
  finished folder is loaded, not retrained).
- ``train(cfg, inputs, resources, run_dir) -> dict[str, TrainResult]`` runs in every process
  (TRL shards each batch over them); each run's folder is the recipe's own choice, the same for
  the notebook and the launch.
- ``headline(...) -> dict[str, str]`` is the paper's claim on the notebook's own run (its
  hypothesis metric, start -> trained), from what the notebook evaluated; the notebook saves it
  (``runner.save_headline``) and an evidence cell's interval leads it. Its arguments are the
  recipe's evaluations, so each recipe writes its own signature.

``Recipe`` writes these rules down as one object (torchtune's ``FTRecipeInterface``, as data):
each recipe module ends with ``RECIPE = Recipe(...)``, and ``recipes.RECIPES`` maps a notebook
stem to it.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

import torch.distributed as dist

from ..train.grpo import TrainResult, merge_adapter
from . import warmstart
from .warmstart import WarmStart

__all__ = ["Recipe", "main_process_first", "merged", "start", "warm_start_trains", "launched", "is_main_process"]


def launched() -> bool:
    """True inside a launched job with more than one process (a process group is up)."""
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def is_main_process() -> bool:
    """Alone, or the main process (global rank 0) of a launched job: the one that writes a
    record every process could."""
    return not launched() or dist.get_rank() == 0


@contextlib.contextmanager
def main_process_first() -> Iterator[None]:
    """In a launched job the main process (global rank 0) runs the block first and the others
    after it (they then find its caches and folders); alone, the block runs as it is. On an
    error in the main process the launcher stops the others."""
    if not launched():
        yield
        return
    if dist.get_rank() != 0:
        dist.barrier()
    yield
    if dist.get_rank() == 0:
        dist.barrier()


def merged(result: TrainResult) -> str:
    """``train.merge_adapter`` once per job: the main process writes ``merged/``, the others
    find it."""
    with main_process_first():
        return merge_adapter(result)


def start(cfg: Any) -> WarmStart:
    """The warm start (``recipes.warmstart``): built or loaded, ``cfg.model.name`` pointed at it;
    a no-op returning the raw model when ``warm_start`` is off. The first stage of every recipe
    that trains from a warm start, in the notebook and in ``factlab train``."""
    with main_process_first():
        return warmstart.prepare(cfg)


def warm_start_trains(cfg: Any) -> bool:
    """Whether ``start`` may train (the warm start is on): ``factlab train`` then prepares alone
    first (``prepare_alone``)."""
    ws = getattr(cfg, "warm_start", None)
    return bool(ws is not None and ws.enabled)


@dataclass(frozen=True)
class Recipe:
    """One paper's recipe, as ``factlab train`` and the runner call it (module docstring).

    ``notebook``: its notebook stem; ``config``: its params class; ``what``: one line, what it
    trains (``factlab train`` prints it); ``start(cfg)``: the warm start; ``prepare(cfg,
    resources, run_dir)``: the training input; ``prepare_alone(cfg)``: whether preparing trains
    (then it runs in its own process first); ``train(cfg, inputs, resources, run_dir)``: every
    run, ``{name: TrainResult}``, each under ``run_dir / train_dir``; ``headline(...)``: the
    paper's claim on the notebook's run, ``{label: value}`` (module docstring)."""

    notebook: str
    config: type
    what: str
    prepare: Callable[[Any, Any, str | Path], Any]
    train: Callable[[Any, Any, Any, str | Path], dict[str, TrainResult]]
    headline: Callable[..., dict[str, Any]]
    prepare_alone: Callable[[Any], bool] = warm_start_trains
    start: Callable[[Any], Any] = start  # the warm start
    train_dir: str = "train"

"""DAPO on TRL (Yu et al. 2025, as K2V trains: 003_5e9813e66e6ba19a.txt §4.1, Appendix B.2,
Table 7): the preset, and dynamic sampling, which TRL lacks.

The preset (``grpo.preset: dapo``, ``sections.GRPOSection``) sets TRL's ``loss_type: dapo``
(token-level, normalized over the accumulated batch), the asymmetric clip (0.2, 0.28), beta 0
(no KL, no reference model) and dynamic sampling; TRL adds no entropy bonus. The overlong
buffer penalty is the ``overlong`` reward (``rewards.length``). Table 7's mini-batch (two
optimizer updates of 32 prompts per generation batch of 64) is TRL's ``steps_per_generation``
(``grpo.steps_per_generation``: micro-batches per generation batch; an update every
``gradient_accumulation_steps`` of them).

Dynamic sampling (DAPO §3.2; verl's ``recipe/dapo``): a group whose G rewards all agree gives
every completion advantage 0, so it is dropped (``keep_groups``), and the dataloader's next
batches are generated and scored until the batch holds as many informative groups as it was
sent, then the kept groups are trimmed to the batch. As in verl:

- refills are the dataloader's next generation batches, in its shuffled order, without
  replacement: ``RefillRepeatSampler`` (TRL's ``RepeatSampler`` with a queue of not yet begun
  batches) hands them out, so the trainer never sees them again and an epoch ends sooner, as
  verl's does. Every process draws the same batch and takes its own slice of it, as the
  trainer's own dataloader shards a batch over processes;
- ``generation_batches`` batches are generated per round (verl's ``gen_batch_size``: K2V's
  192 prompts = 3 x 64), at most ``max_rounds`` extra rounds (verl's ``max_num_gen_batches``
  - 1), then ``on_exhausted`` decides (``DynamicSamplingError``, or fill with flat groups);
- an epoch that ends during a refill carries on into the next epoch's order (its first batches
  are taken early and that epoch no longer yields them), as verl's batch carries across the
  epoch boundary; only the run's last epoch can run out, and then the last step is filled with
  flat (zero-advantage) groups and a warning (verl ends the run with that batch untrained);
- a run of ``max_steps`` (not epochs) trains every one of its steps: the epochs' orders form one
  stream, so refills never shorten the run (``RefillRepeatSampler``'s ``stream``);
- a group of one sample is kept (verl keeps ``len == 1``).

Where factlab differs, and why: a group is dropped when its rewards agree within ``tol``
(1e-6), where verl keeps any std > 0. Weighted sums of float rewards differ in their last bits
(0.1 + 0.2 vs 0.3), and group-scaled advantages would turn that noise into +-0.7. A reward of
None (NaN) leaves its completion out of the group (``trainer.leave_out_failed_rows``; verl has
no such value): a group is judged on its scored completions and dropped with fewer than two.

Each round is logged (``dynamic/kept_groups``, ``dynamic/dropped_groups``, ``dynamic/rounds``,
``dynamic/filled_groups``, ``dynamic/refill_batches``). With several processes every process
runs the same number of rounds (the largest shortfall decides), since generation and scoring
gather across processes. ``step_counts`` gives the schedule's length next to verl's.

The seam: ``DynamicSampling`` is an extension of ``train.trainer.FactlabGRPOTrainer``
(``TrainerExtension``), not trainer code. It swaps TRL's train sampler for a
``RefillRepeatSampler`` (``wrap_train_sampler``), and on every training generation batch
(``on_batch``) drops the flat groups and scores refills through the trainer's public ``score``.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from typing import Any, Sequence

import torch
from trl.trainer.utils import RepeatSampler

from ..sections import DynamicSamplingSection
from .trainer import ScoredBatch, TrainerExtension
from .trl_seam import log_metric

log = logging.getLogger(__name__)

__all__ = ["keep_groups", "select_rows", "concat_outputs", "DynamicSamplingError", "RefillRepeatSampler", "local_slice",
           "step_counts", "DynamicSampling"]

# TRL output keys with one row per completion, padded on the left (prompt) or right (completion)
_LEFT = ("prompt_ids", "prompt_mask")
_RIGHT = ("completion_ids", "completion_mask", "old_per_token_logps", "ref_per_token_logps",
          "sampling_per_token_logps", "importance_sampling_ratio")


class DynamicSamplingError(RuntimeError):
    """Too few groups with reward variance after the allowed extra generation rounds."""


def keep_groups(rewards: Sequence[float], num_generations: int, tol: float = 1e-6) -> list[bool]:
    """One flag per group of ``num_generations`` consecutive rewards: True when the group
    carries an advantage signal. Only scored (finite) rewards count; a NaN is a completion left
    out of its group. A group of one sample is kept when scored (verl keeps ``len == 1``);
    larger groups are kept when their scored rewards spread by more than ``tol`` (so a group
    with fewer than two scored completions is dropped)."""
    values = [float(r) for r in rewards]
    if num_generations < 1 or len(values) % num_generations:
        raise ValueError(f"{len(values)} rewards do not split into groups of {num_generations}")
    out = []
    for g in range(0, len(values), num_generations):
        scored = [v for v in values[g:g + num_generations] if math.isfinite(v)]
        if num_generations == 1:
            out.append(len(scored) == 1)
        else:
            out.append(len(scored) >= 2 and max(scored) - min(scored) > tol)
    return out


class RefillRepeatSampler(RepeatSampler):
    """TRL's ``RepeatSampler`` (same shuffled order, same repeats) whose generation batches not
    yet begun can be taken for dynamic sampling's refills (``take_next_batch``); a taken batch
    is never yielded to the trainer, so the epoch ends sooner, as verl's does.

    When the epoch has no batch left and another epoch follows (``epochs``: how many the
    trainer runs, None = as many as it asks for), the refill draws the next epoch's order early
    and takes its first batches, which that epoch then no longer yields: verl's DAPO carries a
    partial batch across the epoch boundary (its batch outlives the dataloader loop).

    ``stream`` (a run of ``max_steps``, not of epochs): the epoch orders form one endless
    sequence, refills take its next batches and every epoch still yields a whole epoch's count.
    transformers' Trainer turns ``max_steps`` into ``ceil(max_steps / steps per epoch)`` epochs
    and stops when they end, so epochs shortened by refills would end the run short of
    ``max_steps`` (organism_k2v's 60-step arms stopped at steps 22-28)."""

    def __init__(self, *args, epochs: int | None = None, stream: bool = False, **kwargs):
        super().__init__(*args, **kwargs)
        self.epochs = epochs
        self.stream = stream
        self._started = 0  # epochs begun (``__iter__`` calls)
        self._carried: deque | None = None  # the next epoch's batches, drawn early by a refill
        self._pending: deque = deque()

    def _batches(self) -> deque:
        stream = list(super().__iter__())
        block = self.batch_size * self.mini_repeat_count * self.repeat_count
        return deque(stream[k:k + block] for k in range(0, len(stream), block))

    def __iter__(self):
        self._started += 1
        if self.stream:
            yield from self._iter_stream()
            return
        self._pending, self._carried = (self._carried if self._carried is not None else self._batches()), None
        while self._pending:
            yield from self._pending.popleft()

    def _iter_stream(self):
        """``stream``: each epoch yields a whole epoch's count of batches from one endless
        sequence of epoch orders, which refills also draw from (``take_next_batch``)."""
        for _ in range(self.num_samples // self.batch_size):  # TRL's count: whole batches only
            yield from self._next_of_stream()

    def _next_of_stream(self) -> list[int]:
        if not self._pending:
            self._pending = self._batches()
        return self._pending.popleft()

    def take_next_batch(self) -> list[int] | None:
        """The dataset indices of the next generation batch not yet begun, each repeated G times
        (``mini_repeat_count``) in the order the dataloader would have yielded them; from the
        next epoch's order when this one has none left; None when no epoch follows. With
        ``stream`` (a run of ``max_steps``) the next epoch always follows."""
        if self.stream:
            return None if self._started == 0 else self._next_of_stream()[:self.batch_size * self.mini_repeat_count]
        if not self._pending:
            if self._started == 0 or (self.epochs is not None and self._started >= self.epochs):
                return None
            if self._carried is None:
                self._carried = self._batches()
            if not self._carried:
                return None
            return self._carried.popleft()[:self.batch_size * self.mini_repeat_count]
        return self._pending.popleft()[:self.batch_size * self.mini_repeat_count]


def local_slice(rows: Sequence[int], process_index: int, num_processes: int) -> list[int]:
    """This process's part of one global generation batch: the contiguous slice the trainer's
    sharded dataloader gives it (accelerate's ``BatchSamplerShard``)."""
    if len(rows) % num_processes:
        raise ValueError(f"a generation batch of {len(rows)} rows does not split over {num_processes} processes")
    n = len(rows) // num_processes
    return list(rows[process_index * n:(process_index + 1) * n])


def step_counts(n_prompts: int, *, prompts_per_generation: int, updates_per_generation: int, epochs: float,
                generation_batches: int = 1, dynamic_sampling: bool = True) -> dict[str, int]:
    """The schedule's length. ``planned_updates``: TRL's ``max_steps`` for ``epochs`` over
    ``n_prompts`` (what the progress bar shows); ``max_generation_steps`` / ``max_updates``: the
    most a run can take once refills consume the dataloader (every step uses at least
    ``generation_batches`` batches), which is verl's count for ``gen_batch_size`` =
    ``generation_batches`` x ``prompts_per_generation``; fewer when more refills are needed."""
    batches = n_prompts // prompts_per_generation
    per_epoch = batches // generation_batches if dynamic_sampling else batches
    gen_steps = int(per_epoch * epochs)
    return {"planned_updates": int(batches * updates_per_generation * epochs),
            "max_generation_steps": gen_steps, "max_updates": gen_steps * updates_per_generation}


def select_rows(output: dict[str, Any], rows: torch.Tensor) -> dict[str, Any]:
    """TRL's scored output restricted to ``rows`` (completion indices)."""
    out = {}
    for key, value in output.items():
        if key == "num_items_in_batch":
            continue
        if isinstance(value, torch.Tensor) and value.dim() >= 1 and value.shape[0] == output["completion_ids"].shape[0]:
            out[key] = value[rows]
        elif value is None:
            out[key] = None
        else:
            raise ValueError(f"dynamic sampling cannot split the scored output's {key!r} (multimodal inputs are not "
                             f"supported)")
    return out


def _pad(tensors: list[torch.Tensor], left: bool) -> torch.Tensor:
    width = max(t.shape[1] for t in tensors)
    padded = []
    for t in tensors:
        extra = width - t.shape[1]
        if extra:
            pad = t.new_zeros((t.shape[0], extra, *t.shape[2:]))
            t = torch.cat([pad, t] if left else [t, pad], dim=1)
        padded.append(t)
    return torch.cat(padded)


def concat_outputs(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """Row-wise concatenation of ``select_rows`` outputs: prompts padded on the left (zeros,
    masked), completions on the right."""
    out: dict[str, Any] = {}
    for key in parts[0]:
        values = [p[key] for p in parts]
        if any(v is None for v in values):
            out[key] = None
        elif key in _LEFT:
            out[key] = _pad(values, left=True)
        elif key in _RIGHT or (key == "advantages" and values[0].dim() == 2):
            out[key] = _pad(values, left=False)
        else:
            out[key] = torch.cat(values)
    return out


class DynamicSampling(TrainerExtension):
    """DAPO's dynamic sampling as a trainer extension (module docstring): generate
    ``generation_batches`` dataloader batches per round, drop the groups whose rewards agree,
    and take more rounds from the dataloader until the batch is full again, at most
    ``max_rounds`` extra rounds; then trim to the batch. Training batches only."""

    def __init__(self, cfg: DynamicSamplingSection):
        self.cfg = cfg
        self.sampler: RefillRepeatSampler | None = None

    def wrap_train_sampler(self, trainer, sampler):
        """TRL's sampler as a ``RefillRepeatSampler``, so refills are the dataloader's next batches
        (and, at an epoch's end, the next epoch's first ones while another epoch follows)."""
        args = trainer.args
        by_steps = args.max_steps is not None and args.max_steps > 0
        epochs = None if by_steps else math.ceil(args.num_train_epochs)
        self.sampler = RefillRepeatSampler(sampler.data_source, sampler.mini_repeat_count, sampler.batch_size,
                                           sampler.repeat_count, sampler.shuffle, sampler.seed, epochs=epochs,
                                           stream=by_steps)
        return self.sampler

    def refill_inputs(self, trainer) -> list[dict] | None:
        """This process's rows of the dataloader's next generation batch (taken from the epoch:
        the trainer will not see it), or None when the epoch has none left."""
        if self.sampler is None:
            raise DynamicSamplingError("dynamic sampling refills from the trainer's RefillRepeatSampler, which an "
                                       "IterableDataset does not use; pass a map-style dataset")
        rows = self.sampler.take_next_batch()
        if rows is None:
            return None
        mine = local_slice(rows, trainer.accelerator.process_index, trainer.accelerator.num_processes)
        return [dict(trainer.train_dataset[i]) for i in mine]

    def on_batch(self, trainer, batch: ScoredBatch) -> None:
        if self.cfg.enabled and batch.mode == "train":
            batch.output = self.resample(trainer, batch)

    def resample(self, trainer, batch: ScoredBatch) -> dict[str, Any]:
        """The batch's output with flat groups replaced by refilled informative ones."""
        cfg, g = self.cfg, batch.num_generations
        need = len(batch.completions) // g
        device = batch.output["completion_ids"].device

        if len(batch.completions) % g:
            raise DynamicSamplingError(f"dynamic sampling needs whole groups on every process: {len(batch.completions)} "
                                       f"completions here is not a multiple of G = {g}")

        def split(b: ScoredBatch) -> tuple[dict[str, Any], dict[str, Any], int]:
            flags = keep_groups(b.response_returns.tolist(), g, cfg.tol)

            def rows(keep: bool) -> torch.Tensor:
                return torch.tensor([i for k, f in enumerate(flags) if f == keep for i in range(k * g, (k + 1) * g)],
                                    dtype=torch.long, device=device)
            return select_rows(b.output, rows(True)), select_rows(b.output, rows(False)), sum(flags)

        part, flat, kept = split(batch)
        parts, flats = [part], [flat]
        have = first = kept
        batches_this_round = 1
        rounds = filled = refills = 0
        epoch_ended = False

        def short() -> int:
            return int(trainer.accelerator.gather(torch.tensor([max(need - have, 0)], device=device)).max())

        while batches_this_round < cfg.generation_batches or short() > 0:
            if batches_this_round >= cfg.generation_batches:  # a new round
                if rounds >= cfg.max_rounds:
                    break
                rounds += 1
                batches_this_round = 0
            inputs = self.refill_inputs(trainer)
            if inputs is None:
                epoch_ended = True
                break
            refills += 1
            batches_this_round += 1
            part, flat, kept = split(trainer.score(inputs))
            parts.append(part)
            flats.append(flat)
            have += kept
        if short() > 0:
            why = ("the last epoch ran out of batches to refill from" if epoch_ended else
                   f"after {rounds} extra generation rounds (grpo.dynamic_sampling.max_rounds = {cfg.max_rounds})")
            if epoch_ended and cfg.on_exhausted == "raise":
                # the run's last step: verl's run ends here with the partial batch untrained; the
                # step is already under way, so its missing groups are zero-advantage fillers
                log.warning("dynamic sampling: %d of %d groups have reward variance and %s; the last step is "
                            "filled with zero-advantage groups", have, need, why)
            if cfg.on_exhausted == "fill" or epoch_ended:
                filled = max(need - have, 0)
                parts += flats  # zero-advantage groups: they fill the batch and teach nothing
            else:
                raise DynamicSamplingError(
                    f"dynamic sampling: {have} of {need} groups have reward variance {why}; every other group's "
                    f"rewards agree within tol = {cfg.tol}. Raise max_rounds, set on_exhausted: fill, or use "
                    f"prompts the policy sometimes gets right.")
        out = concat_outputs(parts)
        out = {k: (v[:need * g] if isinstance(v, torch.Tensor) else v) for k, v in out.items()}
        out["num_items_in_batch"] = trainer.accelerator.gather(out["completion_mask"].sum()).sum()
        mode = batch.mode
        log_metric(trainer, mode, "dynamic/kept_groups", trainer.gathered_mean(first, 1))
        log_metric(trainer, mode, "dynamic/dropped_groups", trainer.gathered_mean(need - first, 1))
        log_metric(trainer, mode, "dynamic/rounds", float(rounds))
        log_metric(trainer, mode, "dynamic/refill_batches", float(refills))
        log_metric(trainer, mode, "dynamic/filled_groups", trainer.gathered_mean(filled, 1))
        return out

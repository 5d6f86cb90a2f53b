"""factlab's one subclass of TRL's ``GRPOTrainer``: extensions compose on a single seam.

TRL 1.16 scores a generation batch in ``_generate_and_score_completions``: it generates,
calls ``_calculate_rewards`` (every reward function, gathered over processes) and turns the
weighted reward sum into sequence-level advantages. ``FactlabGRPOTrainer`` overrides exactly
those two methods, once, and hands each scored batch to its ``extensions`` in order
(``TrainerExtension.on_scored``), which may replace the advantages (CorVer's token-level
returns, ``train.stepwise_grpo``) and log their own metrics. After the extensions, it logs
the advantage diagnostics every run gets whatever its rewards (SEVA 002 Table 5, Figures
4-5): ``advantages/min`` / ``max`` over completion tokens, ``advantages/group_spread`` (mean
over groups of the max - min completion advantage) and ``advantages/collapsed_group_frac``
(groups with no spread: no learning signal), beside TRL's own ``reward``,
``frac_reward_zero_std`` and ``entropy``, and the seconds spent in reward functions.

The private methods used are pinned by ``tests/test_trl_seam.py``: if TRL moves them, that
test fails before any training run does.
"""

from __future__ import annotations

import abc
import logging
import time
from dataclasses import dataclass
from typing import Any, Sequence

import torch
from trl import GRPOTrainer
from trl.models.utils import unwrap_model_for_generation

from ..config import DynamicSamplingSection
from ..decoding import decode
from .dapo import DynamicSamplingError, RefillRepeatSampler, concat_outputs, keep_groups, local_slice, select_rows

log = logging.getLogger(__name__)

__all__ = ["FactlabGRPOTrainer", "ScoredBatch", "TrainerExtension", "completion_advantages", "group_advantage_spread",
           "leave_out_failed_rows"]


@dataclass
class ScoredBatch:
    """One scored generation batch as extensions see it.

    ``rows``, ``completions`` and ``completion_ids`` are this process's; ``rewards_per_func``
    is TRL's gathered (all processes, one column per reward function, NaN = no reward);
    ``output`` is TRL's dict (``completion_ids``, ``completion_mask``, ``advantages``, ...)
    that the trainer returns, so an extension edits it in place."""

    mode: str  # "train" | "eval"
    rows: list[dict]
    completions: list[Any]
    completion_ids: list[list[int]]
    rewards_per_func: torch.Tensor
    output: dict[str, Any]
    num_generations: int
    reward_seconds: float
    response_returns: torch.Tensor | None = None  # this process's R^r: weighted reward sum (NaN: unscored)


class TrainerExtension(abc.ABC):
    """A hook on every scored batch. Subclasses implement ``on_scored``."""

    @abc.abstractmethod
    def on_scored(self, trainer: "FactlabGRPOTrainer", batch: ScoredBatch) -> None:
        """Called once per scored batch; may edit ``batch.output`` in place."""


def leave_out_failed_rows(rewards_per_func: torch.Tensor) -> torch.Tensor:
    """Rows (completions) where any reward function returned None (NaN) become NaN in every
    column. TRL 1.16 leaves a completion out of its group's baseline and gives it advantage 0
    only when *every* reward is NaN, and otherwise adds the rest with ``nansum``: an unreadable
    factual verdict beside a format or length reward would count as 0 (a correct K2V answer
    with unreadable checklist replies ranked below a wrong one). In factlab None always means
    "could not score", so the whole completion is left out."""
    failed = torch.isnan(rewards_per_func).any(dim=1)
    if not failed.any():
        return rewards_per_func
    out = rewards_per_func.clone()
    out[failed] = torch.nan
    return out


def completion_advantages(advantages: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Each completion's mean advantage over its tokens: (B,) from (B, T) token-level
    advantages and their mask; TRL's (B,) sequence advantages are returned as they are."""
    if advantages.dim() == 1:
        return advantages
    m = mask.to(advantages.dtype)
    return (advantages * m).sum(1) / m.sum(1).clamp(min=1)


def group_advantage_spread(advantages: torch.Tensor, mask: torch.Tensor | None, num_generations: int) -> torch.Tensor:
    """Per group of ``num_generations`` completions: max - min of the completions' mean token
    advantage. A spread of 0 is a collapsed group that gives no learning signal
    (002_56f1a732f42030d3.txt §2.3 "The failure of binary reward", Table 5, Figures 4-5).
    ``advantages`` may be (B,) sequence-level or (B, T) token-level."""
    per_completion = completion_advantages(advantages, mask)
    if per_completion.numel() % num_generations:
        raise ValueError(f"{per_completion.numel()} completions do not split into groups of {num_generations}")
    groups = per_completion.view(-1, num_generations)
    return groups.max(1).values - groups.min(1).values


class FactlabGRPOTrainer(GRPOTrainer):
    """TRL's GRPOTrainer plus ``extensions`` (see the module docstring).

    Every GRPOConfig knob (beta, epsilon, loss_type, num_generations, vLLM, gradient
    checkpointing) and peft LoRA keep working. ``fast_generation=False`` keeps TRL's own rollout
    generation (``model.generate``) where ``factlab.decoding`` would run."""

    def __init__(self, *args: Any, extensions: Sequence[TrainerExtension] = (), fast_generation: bool = True,
                 dynamic_sampling: DynamicSamplingSection | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.fast_generation = fast_generation
        self.dynamic_sampling = dynamic_sampling
        if self.multi_objective_aggregation != "sum_then_normalize":
            raise ValueError("FactlabGRPOTrainer needs multi_objective_aggregation='sum_then_normalize' "
                             f"(got {self.multi_objective_aggregation!r}): extensions read the weighted reward sum")
        self.extensions = list(extensions)
        token_level = any(getattr(e, "token_level", False) for e in self.extensions)
        if token_level and (getattr(self.args, "use_liger_loss", False) or getattr(self, "use_liger_loss", False)):
            raise ValueError("token-level advantages (B, T) cannot go through a Liger fused GRPO loss, which takes "
                             "one advantage per completion; turn use_liger_loss off (TRL 1.16's own loss takes (B, T))")
        self._scored: tuple | None = None
        self.left_out_completions = 0  # completions some reward could not score (left out of their group)
        self.last_sequence_advantages: torch.Tensor | None = None  # TRL's own, for inspection and tests

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations, has_tool_images=False):
        """Text-only rollouts without vLLM go through ``factlab.decoding`` (shared-prefix prefill:
        a group's G copies of a prompt are prefilled once; finished rows dropped; only the last
        position's logits kept, where TRL's fused head computes every position's). Same
        sampling (temperature, top-p; the global RNG). Anything else is TRL's own path."""
        plain = (self.fast_generation and not self.use_vllm and not getattr(self, "use_transformers_continuous_batching", False)
                 and images is None and not multimodal_fields and not self.top_k and not self.min_p
                 and (self.repetition_penalty in (None, 1.0)) and not self.args.generation_kwargs
                 and not self.is_fsdp_enabled and not self.is_deepspeed_enabled)
        if not plain:
            return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations,
                                                 has_tool_images)
        with (unwrap_model_for_generation(self.model_wrapped, self.accelerator,
                                          gather_deepspeed3_params=self.args.ds3_gather_for_generation,
                                          gradient_checkpointing_kwargs=self.args.gradient_checkpointing_kwargs)
              as model, torch.no_grad()):
            outs = decode(model, [list(map(int, p)) for p in prompt_ids], max_new_tokens=self.max_completion_length,
                          stop_ids=self.eos_token_ids, pad_id=self._tokenizer.pad_token_id,
                          temperature=self.temperature, top_p=self.top_p, keep_stop=True)
        return [ids for ids, _ in outs], None

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        t0 = time.perf_counter()
        rewards_per_func = leave_out_failed_rows(super()._calculate_rewards(inputs, prompts, completions,
                                                                            completion_ids_list))
        mode = "train" if self.model.training else "eval"
        left_out = int(torch.isnan(rewards_per_func).all(dim=1).sum())
        self.left_out_completions += left_out
        self._metrics[mode]["rewards/left_out_frac"].append(left_out / max(1, rewards_per_func.shape[0]))
        if left_out:
            log.warning("%d of %d completions left out of their groups: a reward could not score them (None)",
                        left_out, rewards_per_func.shape[0])
        self._scored = (inputs, completions, completion_ids_list, rewards_per_func, time.perf_counter() - t0)
        return rewards_per_func

    def _score(self, inputs) -> ScoredBatch:
        """TRL's generation and scoring of ``inputs``, then every extension."""
        output = super()._generate_and_score_completions(inputs)
        rows, completions, completion_ids_list, rewards_per_func, reward_s = self._scored
        self._scored = None
        self.last_sequence_advantages = output["advantages"]
        mode = "train" if self.model.training else "eval"
        returns = (rewards_per_func * self.reward_weights.to(rewards_per_func.device).unsqueeze(0)).nansum(dim=1)
        returns[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
        rank, n_local = self.accelerator.process_index, len(completions)
        batch = ScoredBatch(mode=mode, rows=list(rows), completions=list(completions),
                            completion_ids=[list(map(int, ids)) for ids in completion_ids_list],
                            rewards_per_func=rewards_per_func, output=output,
                            num_generations=self.num_generations if mode == "train" else self.num_generations_eval,
                            reward_seconds=reward_s, response_returns=returns[rank * n_local:(rank + 1) * n_local])
        for ext in self.extensions:
            ext.on_scored(self, batch)
        return batch

    def _generate_and_score_completions(self, inputs):
        batch = self._score(inputs)
        if self.dynamic_sampling is not None and self.dynamic_sampling.enabled and batch.mode == "train":
            batch.output = self._dynamic_sample(batch)
        self._log_advantages(batch)
        return batch.output

    def _get_train_sampler(self, dataset=None):
        """TRL's sampler, as ``RefillRepeatSampler`` when dynamic sampling is on, so refills are
        the dataloader's next batches (``train.dapo``)."""
        sampler = super()._get_train_sampler(dataset)
        if self.dynamic_sampling is not None and self.dynamic_sampling.enabled:
            sampler = RefillRepeatSampler(sampler.data_source, sampler.mini_repeat_count, sampler.batch_size,
                                          sampler.repeat_count, sampler.shuffle, sampler.seed)
            self._refill_sampler = sampler
        return sampler

    def _refill_inputs(self) -> list[dict] | None:
        """This process's rows of the dataloader's next generation batch (taken from the epoch:
        the trainer will not see it), or None when the epoch has none left."""
        sampler = getattr(self, "_refill_sampler", None)
        if sampler is None:
            raise DynamicSamplingError("dynamic sampling refills from the trainer's RefillRepeatSampler, which an "
                                       "IterableDataset does not use; pass a map-style dataset")
        rows = sampler.take_next_batch()
        if rows is None:
            return None
        mine = local_slice(rows, self.accelerator.process_index, self.accelerator.num_processes)
        return [dict(self.train_dataset[i]) for i in mine]

    def _dynamic_sample(self, batch: ScoredBatch) -> dict[str, Any]:
        """DAPO's dynamic sampling (``train.dapo``): generate ``generation_batches`` dataloader
        batches per round, drop the groups whose rewards agree, and take more rounds from the
        dataloader until the batch is full again, at most ``max_rounds`` extra rounds; then trim
        to the batch."""
        cfg, g = self.dynamic_sampling, batch.num_generations
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
            return int(self.accelerator.gather(torch.tensor([max(need - have, 0)], device=device)).max())

        while batches_this_round < cfg.generation_batches or short() > 0:
            if batches_this_round >= cfg.generation_batches:  # a new round
                if rounds >= cfg.max_rounds:
                    break
                rounds += 1
                batches_this_round = 0
            inputs = self._refill_inputs()
            if inputs is None:
                epoch_ended = True
                break
            refills += 1
            batches_this_round += 1
            part, flat, kept = split(self._score(inputs))
            parts.append(part)
            flats.append(flat)
            have += kept
        if short() > 0:
            why = ("the epoch ran out of batches to refill from" if epoch_ended else
                   f"after {rounds} extra generation rounds (grpo.dynamic_sampling.max_rounds = {cfg.max_rounds})")
            if cfg.on_exhausted == "fill":
                filled = max(need - have, 0)
                parts += flats  # zero-advantage groups: they fill the batch and teach nothing
            else:
                raise DynamicSamplingError(
                    f"dynamic sampling: {have} of {need} groups have reward variance {why}; every other group's "
                    f"rewards agree within tol = {cfg.tol}. Raise max_rounds, set on_exhausted: fill, or use "
                    f"prompts the policy sometimes gets right.")
        out = concat_outputs(parts)
        out = {k: (v[:need * g] if isinstance(v, torch.Tensor) else v) for k, v in out.items()}
        out["num_items_in_batch"] = self.accelerator.gather(out["completion_mask"].sum()).sum()
        metrics = self._metrics[batch.mode]
        metrics["dynamic/kept_groups"].append(self.gathered_mean(first, 1))
        metrics["dynamic/dropped_groups"].append(self.gathered_mean(need - first, 1))
        metrics["dynamic/rounds"].append(float(rounds))
        metrics["dynamic/refill_batches"].append(float(refills))
        metrics["dynamic/filled_groups"].append(self.gathered_mean(filled, 1))
        return out

    def gathered_mean(self, total: float, count: float) -> float:
        """Mean over every process of per-process (sum, count) pairs."""
        t = torch.tensor([total, count], dtype=torch.float64, device=self.accelerator.device)
        total, count = self.accelerator.gather(t).view(-1, 2).sum(dim=0).tolist()
        return total / count if count else float("nan")

    def _log_advantages(self, batch: ScoredBatch) -> None:
        metrics = self._metrics[batch.mode]
        adv, mask = batch.output["advantages"], batch.output["completion_mask"]
        m = mask.bool() if adv.dim() == 2 else torch.ones_like(adv, dtype=torch.bool)
        n = int(m.sum())
        big = torch.finfo(adv.dtype).max
        lo = adv.masked_fill(~m, big).min() if n else torch.tensor(0.0, device=adv.device)
        hi = adv.masked_fill(~m, -big).max() if n else torch.tensor(0.0, device=adv.device)
        metrics["advantages/min"].append(self.accelerator.gather(lo.reshape(1)).min().item())
        metrics["advantages/max"].append(self.accelerator.gather(hi.reshape(1)).max().item())
        # per-completion scalars cross processes, never (B, T) tensors: T differs per process
        everyone = self.accelerator.gather(completion_advantages(adv, mask).contiguous())
        spread = group_advantage_spread(everyone, None, batch.num_generations)
        metrics["advantages/group_spread"].append(spread.mean().item())
        metrics["advantages/collapsed_group_frac"].append((spread < 1e-6).float().mean().item())
        metrics["timing/reward_funcs_s"].append(batch.reward_seconds)

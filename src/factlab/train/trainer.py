"""factlab's one subclass of TRL's ``GRPOTrainer``: extensions compose on a single seam.

TRL 1.16 scores a generation batch in ``_generate_and_score_completions``: it generates,
calls ``_calculate_rewards`` (every reward function, gathered over processes) and turns the
weighted reward sum into sequence-level advantages. Those private methods are overridden in
one place, ``train.trl_seam.GRPOSeam``, which hands each on to a public hook;
``FactlabGRPOTrainer`` implements the hooks: ``rollouts`` (``factlab.decoding``),
``rewards_computed`` (a completion some reward could not score is left out),
``generate_and_score`` and ``train_sampler``. Each scored batch goes to its ``extensions`` in
order (``TrainerExtension.on_scored``), which may replace the advantages (CorVer's token-level
returns, ``train.stepwise_grpo``) and log their own metrics (``trl_seam.log_metric``); then
``on_batch`` may replace the whole batch (DAPO's dynamic sampling, ``train.dapo``), and an
extension may replace the train sampler (``wrap_train_sampler``). After the extensions, it logs
the advantage diagnostics every run gets whatever its rewards (SEVA 002 Table 5, Figures
4-5): ``advantages/min`` / ``max`` over completion tokens, ``advantages/group_spread`` (mean
over groups of the max - min completion advantage) and ``advantages/collapsed_group_frac``
(groups with no spread: no learning signal), beside TRL's own ``reward``,
``frac_reward_zero_std`` and ``entropy``, and the seconds spent in reward functions.

Every TRL private name used is listed in ``trl_seam.PRIVATE_NAMES`` and pinned by
``tests/test_trl_seam.py``: if TRL moves one, that test fails before any training run does.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Sequence

import torch
from trl.models.utils import unwrap_model_for_generation

from ..decoding import decode
from .trl_seam import GRPOSeam, log_metric

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


class TrainerExtension:
    """Hooks into ``FactlabGRPOTrainer``; a subclass implements the ones it needs (each default
    does nothing). The trainer's public API is what an extension uses: ``score``,
    ``gathered_mean``, ``accelerator``, ``train_dataset``, and ``trl_seam.log_metric`` to log."""

    def on_scored(self, trainer: "FactlabGRPOTrainer", batch: ScoredBatch) -> None:
        """Called once per scored batch (a refill's too); may edit ``batch.output`` in place."""

    def on_batch(self, trainer: "FactlabGRPOTrainer", batch: ScoredBatch) -> None:
        """Called once per generation step, after ``on_scored``, before the advantage logs and
        TRL's loss; may replace ``batch.output`` (DAPO's dynamic sampling, ``train.dapo``)."""

    def wrap_train_sampler(self, trainer: "FactlabGRPOTrainer", sampler: Any) -> Any:
        """The train sampler TRL built, or one that replaces it (DAPO's refill sampler)."""
        return sampler


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


class FactlabGRPOTrainer(GRPOSeam):
    """TRL's GRPOTrainer plus ``extensions`` (see the module docstring), through the public hooks
    of ``train.trl_seam.GRPOSeam``.

    Every GRPOConfig knob (beta, epsilon, loss_type, num_generations, vLLM, gradient
    checkpointing) and peft LoRA keep working. ``fast_generation=False`` keeps TRL's own rollout
    generation (``model.generate``) where ``factlab.decoding`` would run."""

    def __init__(self, *args: Any, extensions: Sequence[TrainerExtension] = (), fast_generation: bool = True,
                 **kwargs: Any):
        self.extensions = list(extensions)  # before TRL's __init__, which builds the train sampler
        super().__init__(*args, **kwargs)
        self.fast_generation = fast_generation
        if self.multi_objective_aggregation != "sum_then_normalize":
            raise ValueError("FactlabGRPOTrainer needs multi_objective_aggregation='sum_then_normalize' "
                             f"(got {self.multi_objective_aggregation!r}): extensions read the weighted reward sum")
        token_level = any(getattr(e, "token_level", False) for e in self.extensions)
        if token_level and (getattr(self.args, "use_liger_loss", False) or getattr(self, "use_liger_loss", False)):
            raise ValueError("token-level advantages (B, T) cannot go through a Liger fused GRPO loss, which takes "
                             "one advantage per completion; turn use_liger_loss off (TRL 1.16's own loss takes (B, T))")
        self._scored: tuple | None = None  # the last rewards_computed call's, for score()
        self.left_out_completions = 0  # completions some reward could not score (left out of their group)
        self.last_sequence_advantages: torch.Tensor | None = None  # TRL's own, for inspection and tests

    def current_mode(self) -> str:
        """"train" while the model trains, "eval" otherwise (TRL's metric modes)."""
        return "train" if self.model.training else "eval"

    def rollouts(self, prompt_ids, images, multimodal_fields) -> list[list[int]] | None:
        """Text-only rollouts without vLLM go through ``factlab.decoding`` (shared-prefix prefill:
        a group's G copies of a prompt are prefilled once; finished rows dropped; only the last
        position's logits kept, where TRL's fused head computes every position's). Same
        sampling (temperature, top-p; the global RNG). Anything else is TRL's own path (None)."""
        plain = (self.fast_generation and not self.use_vllm and not getattr(self, "use_transformers_continuous_batching", False)
                 and images is None and not multimodal_fields and not self.top_k and not self.min_p
                 and (self.repetition_penalty in (None, 1.0)) and not self.args.generation_kwargs
                 and not self.is_fsdp_enabled and not self.is_deepspeed_enabled)
        if not plain:
            return None
        with (unwrap_model_for_generation(self.model_wrapped, self.accelerator,
                                          gather_deepspeed3_params=self.args.ds3_gather_for_generation,
                                          gradient_checkpointing_kwargs=self.args.gradient_checkpointing_kwargs)
              as model, torch.no_grad()):
            outs = decode(model, [list(map(int, p)) for p in prompt_ids], max_new_tokens=self.max_completion_length,
                          stop_ids=self.eos_token_ids, pad_id=self.pad_token_id,
                          temperature=self.temperature, top_p=self.top_p, keep_stop=True)
        return [ids for ids, _ in outs]

    def rewards_computed(self, inputs, completions, completion_ids_list, rewards_per_func, seconds):
        rewards_per_func = leave_out_failed_rows(rewards_per_func)
        left_out = int(torch.isnan(rewards_per_func).all(dim=1).sum())
        self.left_out_completions += left_out
        log_metric(self, self.current_mode(), "rewards/left_out_frac", left_out / max(1, rewards_per_func.shape[0]))
        if left_out:
            log.warning("%d of %d completions left out of their groups: a reward could not score them (None)",
                        left_out, rewards_per_func.shape[0])
        self._scored = (inputs, completions, completion_ids_list, rewards_per_func, seconds)
        return rewards_per_func

    def score(self, inputs: list[dict]) -> ScoredBatch:
        """TRL's generation and scoring of ``inputs`` (this process's rows), then every
        extension's ``on_scored``. Extensions call it for more batches (DAPO's refills)."""
        output = self.trl_generate_and_score(inputs)
        rows, completions, completion_ids_list, rewards_per_func, reward_s = self._scored
        self._scored = None
        self.last_sequence_advantages = output["advantages"]
        mode = self.current_mode()
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

    def generate_and_score(self, inputs):
        batch = self.score(inputs)
        for ext in self.extensions:
            ext.on_batch(self, batch)
        self.log_advantages(batch)
        return batch.output

    def train_sampler(self, sampler):
        for ext in self.extensions:
            sampler = ext.wrap_train_sampler(self, sampler)
        return sampler

    def gathered_mean(self, total: float, count: float) -> float:
        """Mean over every process of per-process (sum, count) pairs."""
        t = torch.tensor([total, count], dtype=torch.float64, device=self.accelerator.device)
        total, count = self.accelerator.gather(t).view(-1, 2).sum(dim=0).tolist()
        return total / count if count else float("nan")

    def log_advantages(self, batch: ScoredBatch) -> None:
        """The advantage diagnostics every run logs (module docstring)."""
        adv, mask = batch.output["advantages"], batch.output["completion_mask"]
        m = mask.bool() if adv.dim() == 2 else torch.ones_like(adv, dtype=torch.bool)
        n = int(m.sum())
        big = torch.finfo(adv.dtype).max
        lo = adv.masked_fill(~m, big).min() if n else torch.tensor(0.0, device=adv.device)
        hi = adv.masked_fill(~m, -big).max() if n else torch.tensor(0.0, device=adv.device)
        log_metric(self, batch.mode, "advantages/min", self.accelerator.gather(lo.reshape(1)).min().item())
        log_metric(self, batch.mode, "advantages/max", self.accelerator.gather(hi.reshape(1)).max().item())
        # per-completion scalars cross processes, never (B, T) tensors: T differs per process
        everyone = self.accelerator.gather(completion_advantages(adv, mask).contiguous())
        spread = group_advantage_spread(everyone, None, batch.num_generations)
        log_metric(self, batch.mode, "advantages/group_spread", spread.mean().item())
        log_metric(self, batch.mode, "advantages/collapsed_group_frac", (spread < 1e-6).float().mean().item())
        log_metric(self, batch.mode, "timing/reward_funcs_s", batch.reward_seconds)

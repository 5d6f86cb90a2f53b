"""Stepwise (token-level) GRPO: CorVer's Algorithm 1 on top of TRL's GRPOTrainer.

000_ac66a963fabf3916.txt §3.4 and §B.4. Each completion y^(g) of a group gets per-token
raw returns (Eq. 4)

    R_t = R^r + 1[sigma(t) > 0] * lambda_c * r^c_sigma(t),    R^r = lambda_j R^j + lambda_f R^f

and the policy takes TRL's clipped-surrogate step on group-normalized token-level
advantages, where "the masked per-completion mean serves as the within-group baseline":

    m_g   = (1 / |y^(g)|) * sum_t R_t^(g)                  masked per-completion mean
    A_t^g = (R_t^(g) - mean_g' m_g') / (std_g' m_g' + 1e-4)

Baseline: the group mean of the per-completion masked means; scale: their group standard
deviation (unbiased, as TRL's ``nanstd``), with TRL's epsilon 1e-4 and its
``scale_rewards`` choices ("group", "batch", "none"). With every shaping term zero,
m_g = R^r and A_t^g is TRL's own sequence advantage on every token, so lambda_c = 0 is
plain GRPO (tested).

The seam: TRL 1.16 computes scalar rewards in ``_calculate_rewards`` (gathered over all
processes) and advantages in ``_generate_and_score_completions``, which slices each
process's rows; ``_compute_loss`` accepts advantages of shape (B, T). This subclass lets
TRL do generation and the response-level reward functions (R^r = weighted sum of
``reward_funcs``), then adds the local per-token shaping, gathers the per-completion means
across processes for the group statistics and replaces ``advantages`` with the (B, T)
tensor of this process's rows. Every GRPOConfig knob (beta, epsilon, loss_type,
num_generations, vLLM, gradient checkpointing) and peft LoRA keep working.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import torch
from trl import GRPOTrainer
from trl.trainer.utils import nanstd

from ..rewards.qa import completion_text


@dataclass
class TokenShaping:
    """The per-token shaping term of one completion: ``values[t] = 1[sigma(t)>0] * lambda_c *
    r^c_sigma(t)`` (all zeros after the alignment fallback), plus diagnostics to log."""

    values: list[float]
    stats: dict[str, float] = field(default_factory=dict)


# (completion texts, completion token ids, dataset rows) -> one TokenShaping per completion
TokenShapingFn = Callable[[list[str], list[list[int]], list[dict]], list[TokenShaping]]


def token_level_advantages(token_returns: torch.Tensor, mask: torch.Tensor, num_generations: int,
                           scale_rewards: str = "group",
                           gather: Callable[[torch.Tensor], torch.Tensor] | None = None,
                           process_index: int = 0) -> torch.Tensor:
    """Group-normalized token-level advantages (000 §3.4, §B.4 line 15), shape (B, T).

    ``token_returns`` and ``mask`` are this process's rows (B, T); ``gather`` concatenates a
    per-row tensor across processes (``accelerator.gather``) so groups split over processes
    are normalized together; rows of a completion whose returns are NaN (unscorable) get
    advantage 0, as in TRL. An empty completion (mask all zero) has no tokens to update.
    """
    mask = mask.to(token_returns.dtype)
    n_tok = mask.sum(dim=1)
    masked_sum = torch.where(mask.bool(), token_returns, torch.zeros_like(token_returns)).sum(dim=1)
    # an empty completion's mean is its response return (column 0 holds R^r + 0 shaping)
    means = torch.where(n_tok > 0, masked_sum / n_tok.clamp(min=1), token_returns[:, 0])
    all_means = gather(means) if gather is not None else means
    if all_means.numel() % num_generations:
        raise ValueError(f"{all_means.numel()} completions do not split into groups of {num_generations}")
    grouped = all_means.view(-1, num_generations)
    baseline = torch.nanmean(grouped, dim=1).repeat_interleave(num_generations)
    if scale_rewards == "group":
        scale = (nanstd(grouped, dim=1) if num_generations > 1 else torch.zeros(grouped.shape[0],
                 device=grouped.device)).repeat_interleave(num_generations)
    elif scale_rewards == "batch":
        scale = (nanstd(all_means) if all_means.numel() > 1 else torch.zeros((), device=all_means.device)
                 ).expand_as(all_means)
    elif scale_rewards == "none":
        scale = None
    else:
        raise ValueError(f"scale_rewards must be 'group', 'batch' or 'none', got {scale_rewards!r}")
    rows = slice(process_index * len(means), (process_index + 1) * len(means))
    adv = token_returns - baseline[rows].unsqueeze(1)
    if scale is not None:
        adv = adv / (scale[rows].unsqueeze(1) + 1e-4)
    adv = torch.nan_to_num(adv, nan=0.0)
    return adv * mask


def pad_shaping(shaping: Sequence[TokenShaping], lengths: Sequence[int], width: int,
                device: torch.device | str = "cpu") -> torch.Tensor:
    """Right-padded (B, width) tensor of shaping values; each row must match its completion length."""
    out = torch.zeros(len(shaping), width, dtype=torch.float32, device=device)
    for i, (s, n) in enumerate(zip(shaping, lengths)):
        if len(s.values) != n:
            raise ValueError(f"token shaping for completion {i} has {len(s.values)} values for {n} tokens")
        if n:
            out[i, :n] = torch.tensor(s.values, dtype=torch.float32, device=device)
    return out


def group_advantage_spread(advantages: torch.Tensor, mask: torch.Tensor, num_generations: int) -> torch.Tensor:
    """Per group of ``num_generations`` completions: max - min of the completions' mean token
    advantage. A spread of 0 is a collapsed group that gives no learning signal
    (002_56f1a732f42030d3.txt §2.3 "The failure of binary reward", Table 5, Figures 4-5)."""
    m = mask.to(advantages.dtype)
    per_completion = (advantages * m).sum(1) / m.sum(1).clamp(min=1)
    if per_completion.numel() % num_generations:
        raise ValueError(f"{per_completion.numel()} completions do not split into groups of {num_generations}")
    groups = per_completion.view(-1, num_generations)
    return groups.max(1).values - groups.min(1).values


class StepwiseGRPOTrainer(GRPOTrainer):
    """TRL GRPOTrainer with token-level returns R_t = R^r + shaping_t (000 §3.4, Algorithm 1).

    ``reward_funcs`` (with ``GRPOConfig.reward_weights``) define the response-level return
    R^r exactly as in plain GRPO; ``token_shaping`` supplies the per-token term (for CorVer,
    ``factlab.rewards.corver.CorVerTokenShaping``). ``token_shaping=None`` is plain GRPO.

    Logged each step: ``stepwise/<stat>`` means of the shaping diagnostics (co-occurrence
    reward mean, alignment rate, fallback rate, ...), ``stepwise/return_mean``,
    ``advantages/min`` / ``advantages/max`` over completion tokens, the advantage-collapse
    diagnostics of SEVA (002 Table 5): ``advantages/group_spread`` (mean over groups of the
    max - min completion advantage) and ``advantages/collapsed_group_frac`` (groups with no
    spread; TRL itself logs ``frac_reward_zero_std``, ``reward`` and ``entropy``), and the
    seconds spent in reward functions and shaping (``timing/*``) for the cost analysis of §5.3.
    """

    def __init__(self, *args: Any, token_shaping: TokenShapingFn | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        if self.multi_objective_aggregation != "sum_then_normalize":
            raise ValueError("StepwiseGRPOTrainer needs multi_objective_aggregation='sum_then_normalize' "
                             f"(got {self.multi_objective_aggregation!r}): token returns add to the summed R^r")
        self.token_shaping = token_shaping
        self._scored: tuple | None = None
        self.last_sequence_advantages: torch.Tensor | None = None  # TRL's own, for inspection and tests

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        t0 = time.perf_counter()
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._scored = (inputs, completions, completion_ids_list, rewards_per_func, time.perf_counter() - t0)
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        mode = "train" if self.model.training else "eval"
        rows, completions, completion_ids_list, rewards_per_func, reward_s = self._scored
        self._scored = None
        device = output["completion_ids"].device
        mask = output["completion_mask"]
        self.last_sequence_advantages = output["advantages"]

        weights = self.reward_weights.to(device).unsqueeze(0)
        response_returns = (rewards_per_func * weights).nansum(dim=1)
        response_returns[torch.isnan(rewards_per_func).all(dim=1)] = torch.nan
        local = slice(self.accelerator.process_index * len(completions),
                      (self.accelerator.process_index + 1) * len(completions))
        response_returns = response_returns[local]

        t0 = time.perf_counter()
        lengths = [len(ids) for ids in completion_ids_list]
        if self.token_shaping is None:
            shaping = [TokenShaping([0.0] * n) for n in lengths]
        else:
            shaping = self.token_shaping([completion_text(c) for c in completions],
                                         [list(map(int, ids)) for ids in completion_ids_list], list(rows))
            if len(shaping) != len(completions):
                raise ValueError(f"token_shaping returned {len(shaping)} results for {len(completions)} completions")
        shaping_s = time.perf_counter() - t0
        shaping_t = pad_shaping(shaping, lengths, mask.shape[1], device)

        token_returns = response_returns.unsqueeze(1) + shaping_t
        num_generations = self.num_generations if mode == "train" else self.num_generations_eval
        adv = token_level_advantages(token_returns, mask, num_generations, self.scale_rewards,
                                     gather=self.accelerator.gather,
                                     process_index=self.accelerator.process_index)
        output["advantages"] = adv
        self._log_stepwise(mode, shaping, token_returns, adv, mask, reward_s, shaping_s, num_generations)
        return output

    def _gathered_mean(self, total: float, count: float) -> float:
        t = torch.tensor([total, count], dtype=torch.float64, device=self.accelerator.device)
        total, count = self.accelerator.gather(t).view(-1, 2).sum(dim=0).tolist()
        return total / count if count else float("nan")

    def _log_stepwise(self, mode, shaping, token_returns, adv, mask, reward_s, shaping_s, num_generations) -> None:
        metrics = self._metrics[mode]
        keys = sorted({k for s in shaping for k in s.stats})
        for key in keys:  # every process computes the same key set from the same shaping function
            vals = [s.stats[key] for s in shaping if key in s.stats]
            metrics[f"stepwise/{key}"].append(self._gathered_mean(sum(vals), len(vals)))
        m = mask.bool()
        n = float(m.sum())
        metrics["stepwise/return_mean"].append(
            self._gathered_mean(float(torch.nan_to_num(token_returns[m]).sum()), n))
        big = torch.finfo(adv.dtype).max
        lo = adv.masked_fill(~m, big).min() if n else torch.tensor(0.0, device=adv.device)
        hi = adv.masked_fill(~m, -big).max() if n else torch.tensor(0.0, device=adv.device)
        metrics["advantages/min"].append(self.accelerator.gather(lo.reshape(1)).min().item())
        metrics["advantages/max"].append(self.accelerator.gather(hi.reshape(1)).max().item())
        spread = group_advantage_spread(self.accelerator.gather(adv.contiguous()),
                                        self.accelerator.gather(mask.contiguous()), num_generations)
        metrics["advantages/group_spread"].append(spread.mean().item())
        metrics["advantages/collapsed_group_frac"].append((spread < 1e-6).float().mean().item())
        metrics["timing/reward_funcs_s"].append(reward_s)
        metrics["timing/token_shaping_s"].append(shaping_s)

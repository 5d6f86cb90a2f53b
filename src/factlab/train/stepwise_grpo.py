"""Stepwise (token-level) GRPO: CorVer's Algorithm 1 on top of TRL's GRPOTrainer.

000_ac66a963fabf3916.txt §3.4 and §B.4. Each completion y^(g) of a group gets per-token
raw returns (Eq. 4)

    R_t = R^r + s_t,    s_t = 1[sigma(t) > 0] * lambda_c * r^c_sigma(t),    R^r = lambda_j R^j + lambda_f R^f

and the policy takes TRL's clipped-surrogate step on token-level advantages.

Normalization (ours; Algorithm 1 line 15 is not followed literally). §B.4 normalizes every
token return by the group mean and standard deviation of the per-completion masked means
m_g. When every completion of a group earns the same R^r (all correct, as the §A.4 anchors
are by construction, or all wrong), that standard deviation comes from the shaping term
alone, so a single -0.3 sentence in a group of 16 gets an advantage near -13, where a mixed
group's advantages are of order 1-4: shaping would override correctness, against §4 ("shapes
credit without overriding correctness") and §D ("anchor questions carry no within-group
advantage signal"). Any rule that divides the shaping by a spread measured on the shaping
(the DeepSeekMath process-supervision rule that normalizes over all step returns of the
group included) has the same blow-up, since a z-score does not shrink with its input. So the
two parts are normalized apart:

    A_t^g = (R^r_g - mean_g' R^r_g') / (std_g' R^r_g' + 1e-4)  +  (s_t^g - mean_g' sbar_g')

The first term is TRL's own sequence advantage (its ``scale_rewards`` choices "group",
"batch", "none", unbiased std as TRL's ``nanstd``, epsilon 1e-4); the second is the shaping
in reward units, centred by the group mean of the per-completion masked shaping means
sbar_g (the paper's "masked per-completion mean serves as the within-group baseline",
applied to the shaping). Consequences: lambda_c = 0 is exactly TRL's GRPO; a group whose
returns are equal on every token gets zero advantages; a uniform-correctness group gets only
the shaping signal, at most |alpha_0| * lambda_c = 0.3 per token with the paper's tiers, below
the 3.75 of the lone wrong completion of a 15-correct / 1-wrong group; two sentences of one
response still get opposite local advantages when one is supported and the other is not.

The seam: ``TokenLevelAdvantages`` is an extension of ``train.trainer.FactlabGRPOTrainer``.
TRL does generation and the response-level reward functions (R^r = weighted sum of the
reward functions); the extension adds the local per-token shaping (the ``shaping`` rewards of
``factlab.rewards``, e.g. CorVer's), gathers the per-completion means across processes for
the group statistics and replaces ``advantages`` with the (B, T) tensor of this process's
rows, which TRL 1.16's ``_compute_loss`` accepts.
"""

from __future__ import annotations

import time
from typing import Callable, Sequence

import torch
from trl.trainer.utils import nanstd

from ..rewards.base import TokenShaping, TokenShapingFn, completion_text
from .trainer import FactlabGRPOTrainer, ScoredBatch, TrainerExtension
from .trl_seam import log_metric


def token_level_advantages(token_returns: torch.Tensor, mask: torch.Tensor, num_generations: int,
                           scale_rewards: str = "group",
                           gather: Callable[[torch.Tensor], torch.Tensor] | None = None,
                           process_index: int = 0,
                           response_returns: torch.Tensor | None = None) -> torch.Tensor:
    """Token-level advantages of this process's rows (B, T), normalized as in the module
    docstring.

    ``token_returns`` R_t and ``mask`` are this process's rows; ``response_returns`` (B,) is
    each row's R^r, so that s_t = R_t - R^r. Without it, R^r is taken to be the row's masked
    mean return: exact when nothing shapes the tokens (lambda_c = 0), and otherwise every
    shaping difference between completions is treated as response-level return. ``gather``
    concatenates a per-row tensor across processes (``accelerator.gather``) so groups split
    over processes are normalized together. Rows whose R^r is NaN (unscorable) get advantage
    0, as in TRL; an empty completion (mask all zero) has no tokens to update.
    """
    mask = mask.to(token_returns.dtype)
    n_tok = mask.sum(dim=1)
    masked_sum = torch.where(mask.bool(), token_returns, torch.zeros_like(token_returns)).sum(dim=1)
    # an empty completion's mean is its response return (column 0 holds R^r + 0 shaping)
    means = torch.where(n_tok > 0, masked_sum / n_tok.clamp(min=1), token_returns[:, 0])
    r_resp = means if response_returns is None else response_returns.to(token_returns.dtype)
    shaping_means = means - r_resp
    both = torch.stack([r_resp, shaping_means], dim=1)  # one gather for both per-row values
    both = gather(both) if gather is not None else both
    all_r, all_shaping = both[:, 0], both[:, 1]
    if all_r.numel() % num_generations:
        raise ValueError(f"{all_r.numel()} completions do not split into groups of {num_generations}")
    grouped = all_r.view(-1, num_generations)
    seq = all_r - torch.nanmean(grouped, dim=1).repeat_interleave(num_generations)
    if scale_rewards == "group":
        scale = (nanstd(grouped, dim=1) if num_generations > 1 else torch.zeros(grouped.shape[0],
                 device=grouped.device)).repeat_interleave(num_generations)
        seq = seq / (scale + 1e-4)
    elif scale_rewards == "batch":
        scale = nanstd(all_r) if all_r.numel() > 1 else torch.zeros((), device=all_r.device)
        seq = seq / (scale + 1e-4)
    elif scale_rewards != "none":
        raise ValueError(f"scale_rewards must be 'group', 'batch' or 'none', got {scale_rewards!r}")
    shaping_baseline = torch.nanmean(all_shaping.view(-1, num_generations), dim=1).repeat_interleave(num_generations)
    rows = slice(process_index * len(means), (process_index + 1) * len(means))
    shaping = token_returns - r_resp.unsqueeze(1)
    adv = seq[rows].unsqueeze(1) + shaping - shaping_baseline[rows].unsqueeze(1)
    adv = torch.where(torch.isnan(seq[rows]).unsqueeze(1), torch.zeros_like(adv), adv)
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


class TokenLevelAdvantages(TrainerExtension):
    """Replace TRL's sequence advantages by the token-level advantages of Eq. (4) (000 §3.4,
    Algorithm 1): R_t = R^r + shaping_t, normalized within each group as in the module
    docstring. ``token_shaping=None`` adds nothing, which is plain GRPO (tested).

    Logged each step: ``stepwise/<stat>`` means of the shaping diagnostics (co-occurrence
    reward mean, alignment rate, fallback rate, ...), ``stepwise/return_mean`` and
    ``timing/token_shaping_s`` (the cost analysis of 000 §5.3)."""

    token_level = True  # hands TRL's loss (B, T) advantages

    def __init__(self, token_shaping: TokenShapingFn | None = None):
        self.token_shaping = token_shaping

    def on_scored(self, trainer: FactlabGRPOTrainer, batch: ScoredBatch) -> None:
        output = batch.output
        device = output["completion_ids"].device
        mask = output["completion_mask"]
        n_local = len(batch.completions)
        rank = trainer.accelerator.process_index
        response_returns = batch.response_returns.to(device)

        t0 = time.perf_counter()
        lengths = [len(ids) for ids in batch.completion_ids]
        if self.token_shaping is None:
            shaping = [TokenShaping([0.0] * n) for n in lengths]
        else:
            shaping = self.token_shaping([completion_text(c) for c in batch.completions], batch.completion_ids,
                                         batch.rows)
            if len(shaping) != n_local:
                raise ValueError(f"token_shaping returned {len(shaping)} results for {n_local} completions")
        shaping_s = time.perf_counter() - t0
        token_returns = response_returns.unsqueeze(1) + pad_shaping(shaping, lengths, mask.shape[1], device)
        output["advantages"] = token_level_advantages(token_returns, mask, batch.num_generations,
                                                      trainer.scale_rewards, gather=trainer.accelerator.gather,
                                                      process_index=rank, response_returns=response_returns)
        keys = sorted({k for s in shaping for k in s.stats})
        for key in keys:  # every process computes the same key set from the same shaping function
            vals = [s.stats[key] for s in shaping if key in s.stats]
            log_metric(trainer, batch.mode, f"stepwise/{key}", trainer.gathered_mean(sum(vals), len(vals)))
        m = mask.bool()
        log_metric(trainer, batch.mode, "stepwise/return_mean",
                   trainer.gathered_mean(float(torch.nan_to_num(token_returns[m]).sum()), float(m.sum())))
        log_metric(trainer, batch.mode, "timing/token_shaping_s", shaping_s)

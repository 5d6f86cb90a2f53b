"""DAPO on TRL (Yu et al. 2025, as K2V trains: 003_5e9813e66e6ba19a.txt §4.1, Appendix B.2,
Table 7): the preset, and dynamic sampling, which TRL lacks.

The preset (``grpo.preset: dapo``, ``config.GRPOSection``) sets TRL's ``loss_type: dapo``
(token-level, normalized over the accumulated batch), the asymmetric clip (0.2, 0.28), beta 0
(no KL, no reference model) and dynamic sampling; TRL adds no entropy bonus. The overlong
buffer penalty is the ``overlong`` reward (``rewards.length``).

Dynamic sampling (DAPO §3.2; verl's recipe): a group whose G rewards all agree gives every
completion advantage 0, so it is dropped (``keep_groups``: agreement within ``tol``, not exact
float equality; a NaN reward does not agree with anything), and more prompts are generated and
scored until the batch holds as many informative groups as it was sent, at most
``max_rounds`` extra generation rounds (then ``DynamicSamplingError`` says how far it got). The
kept groups of all rounds make the batch (``select_rows`` / ``concat_outputs`` on TRL's scored
output); each round is logged (``dynamic/kept_groups``, ``dynamic/dropped_groups``,
``dynamic/rounds``). With several processes every process runs the same number of rounds
(the largest shortfall decides), since generation and scoring gather across processes.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch

__all__ = ["keep_groups", "select_rows", "concat_outputs", "DynamicSamplingError"]

# TRL output keys with one row per completion, padded on the left (prompt) or right (completion)
_LEFT = ("prompt_ids", "prompt_mask")
_RIGHT = ("completion_ids", "completion_mask", "old_per_token_logps", "ref_per_token_logps",
          "sampling_per_token_logps", "importance_sampling_ratio")


class DynamicSamplingError(RuntimeError):
    """Too few groups with reward variance after the allowed extra generation rounds."""


def keep_groups(rewards: Sequence[float], num_generations: int, tol: float = 1e-6) -> list[bool]:
    """One flag per group of ``num_generations`` consecutive rewards: False where every reward
    lies within ``tol`` of the others (the group has no advantage signal); a NaN (unscored)
    reward does not count as agreement, so its group is kept."""
    values = [float(r) for r in rewards]
    if num_generations < 1 or len(values) % num_generations:
        raise ValueError(f"{len(values)} rewards do not split into groups of {num_generations}")
    out = []
    for g in range(0, len(values), num_generations):
        group = values[g:g + num_generations]
        agree = all(math.isfinite(v) for v in group) and max(group) - min(group) <= tol
        out.append(not agree)
    return out


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

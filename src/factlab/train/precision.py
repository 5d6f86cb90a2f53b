"""Whether an optimizer step survives the dtype the weights are stored in (issue 42 "bf16 full
fine-tunes"): ``weights_moved`` counts the weights of about 0.02 that AdamW moves at a learning
rate, taking gradients under bf16 autocast as TRL's ``bf16: true`` does. Pure bf16 storage rounds
a 1e-6 step away (half a bf16 ulp at 0.02 is ~6e-5); fp32 master weights keep it. Used by the
CPU tests and by ``bench/gpu_checks.py master-weights`` on a GPU.
"""

from __future__ import annotations

import torch

__all__ = ["weights_moved"]


def weights_moved(dtype: torch.dtype, lr: float, steps: int = 100, n: int = 1000, seed: int = 0,
                  device: str = "cpu", value: float = 0.02) -> int:
    """How many of ``n`` weights at ``value``, stored in ``dtype`` on ``device``, differ from it
    after ``steps`` AdamW steps at ``lr`` on random gradients taken under bf16 autocast."""
    g = torch.Generator(device=device).manual_seed(seed)
    w = torch.nn.Parameter(torch.full((n,), value, dtype=dtype, device=device))
    start = w.detach().clone()
    opt = torch.optim.AdamW([w], lr=lr, weight_decay=0.0)
    kind = "cuda" if str(device).startswith("cuda") else "cpu"
    for _ in range(steps):
        x = torch.randn(n, generator=g, device=device)
        with torch.autocast(kind, dtype=torch.bfloat16):
            loss = (w * x.to(dtype)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return int((w.detach() != start).sum())

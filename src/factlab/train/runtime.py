"""What a params file asks of this machine, checked when its params load on a path that trains
(``factlab run``, each training notebook's first cell, ``factlab train`` and every launched
process), never by the params' own validation: the same params load on a laptop and run on the
cluster. Issue 42 "Checks come late": a notebook on a GPU box without vLLM used to fail at trainer
construction, after its self-filter had already run.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import torch

__all__ = ["RuntimeCheckError", "check_runtime"]


class RuntimeCheckError(ValueError):
    """This machine lacks what the params ask for (vLLM, CUDA, DeepSpeed)."""


def check_runtime(cfg: Any, accelerate: dict[str, Any] | None = None) -> None:
    """vLLM rollouts need vllm and CUDA; DeepSpeed and FSDP need CUDA (and deepspeed installed).
    ``accelerate``: ``launch.check_accelerate_config``'s summary, when launched."""
    grpo = getattr(cfg, "grpo", None)
    if grpo is not None and grpo.use_vllm:
        if importlib.util.find_spec("vllm") is None:
            raise RuntimeCheckError("grpo.use_vllm is true and vllm is not installed here: pip install "
                                    "'factlab[gpu]' (make setup-gpu) on the training nodes, or set grpo.use_vllm: false")
        if not torch.cuda.is_available():
            raise RuntimeCheckError("grpo.use_vllm is true and this machine has no CUDA device: vLLM rollouts need "
                                    "GPUs; set grpo.use_vllm: false to generate with the policy itself")
    if accelerate is None:
        return
    dtype = accelerate["distributed_type"]
    if dtype in ("DEEPSPEED", "FSDP") and not torch.cuda.is_available():
        raise RuntimeCheckError(f"the {dtype} config needs CUDA GPUs and this machine has none; on CPU use "
                                f"--accelerate-config ddp")
    if dtype == "DEEPSPEED" and importlib.util.find_spec("deepspeed") is None:
        raise RuntimeCheckError("the DeepSpeed config needs deepspeed: pip install deepspeed (on every training node)")

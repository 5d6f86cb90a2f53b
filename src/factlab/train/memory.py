"""A finished run's GPU memory, released before the next run in the same kernel (issue 42
"Engines pile up"): 01 trains four ablations and 06 eighteen runs in one notebook kernel, each
trainer with its own colocated vLLM engine (TRL 1.16's ``VLLMGeneration.llm``, which reserves
``vllm_gpu_memory_utilization`` of the GPU while it lives). ``release_rollout_engine`` shuts that
engine down and drops it; ``models.release_memory`` then collects garbage and empties torch's CUDA
cache. ``cuda_memory`` measures the peak and what is left after the release, for the run's
metrics. Without CUDA every call is a no-op and the metrics are empty.
"""

from __future__ import annotations

import logging
import sys
from typing import Any

log = logging.getLogger(__name__)

__all__ = ["reset_peak_memory", "cuda_memory", "release_rollout_engine"]

GB = 1e9


def _cuda():
    """torch.cuda when this process has initialized CUDA, else None (never initializes it)."""
    torch = sys.modules.get("torch")
    return torch.cuda if torch is not None and torch.cuda.is_initialized() else None


def reset_peak_memory() -> None:
    """Start a run's peak-memory count (``torch.cuda.reset_peak_memory_stats``)."""
    cuda = _cuda()
    if cuda is not None:
        cuda.reset_peak_memory_stats()


def cuda_memory(prefix: str) -> dict[str, float]:
    """``{prefix}_peak_allocated_gb``, ``{prefix}_allocated_gb`` and ``{prefix}_reserved_gb`` of
    this process's current GPU (torch's allocator; vLLM's own allocations count too, as they go
    through it); ``{}`` without CUDA."""
    cuda = _cuda()
    if cuda is None:
        return {}
    return {f"{prefix}_peak_allocated_gb": cuda.max_memory_allocated() / GB,
            f"{prefix}_allocated_gb": cuda.memory_allocated() / GB,
            f"{prefix}_reserved_gb": cuda.memory_reserved() / GB}


def release_rollout_engine(trainer: Any) -> bool:
    """Shut down and drop the colocated vLLM engine of a finished TRL trainer (its engine core's
    ``shutdown``, then vLLM's model-parallel groups, never the trainer's own process group), so
    the next run's engine finds its share free. True when there was one; a no-op without vLLM."""
    generation = getattr(trainer, "vllm_generation", None)
    llm = getattr(generation, "llm", None)
    if llm is None:
        return False
    core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    shutdown = getattr(core, "shutdown", None)
    if callable(shutdown):
        try:
            shutdown()
        except Exception as e:  # noqa: BLE001 - a failed shutdown must not lose the finished run
            log.warning("vLLM engine shutdown failed (%s: %s); its memory is freed with the object", type(e).__name__, e)
    generation.llm = None
    parallel = sys.modules.get("vllm.distributed.parallel_state")
    if parallel is not None and hasattr(parallel, "destroy_model_parallel"):
        parallel.destroy_model_parallel()  # vLLM's TP/PP groups; the world group stays the trainer's
    return True

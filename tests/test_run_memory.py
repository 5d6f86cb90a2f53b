"""Many runs in one kernel (issue 42 "Engines pile up"): a finished run's colocated vLLM engine
is shut down and dropped, torch's CUDA cache emptied, and the peak and after-release memory go
into the run's metrics. CPU stand-ins for TRL's ``VLLMGeneration`` and ``torch.cuda``; the real
engine is exercised by bench/gpu_smoke.sh on a GPU."""

import gc
import weakref
from types import SimpleNamespace

import torch

from factlab import models
from factlab.train import memory


class _EngineCore:
    def __init__(self):
        self.shut = 0

    def shutdown(self):
        self.shut += 1


class _LLM:
    def __init__(self):
        self.llm_engine = SimpleNamespace(engine_core=_EngineCore())


def test_the_colocated_engine_is_shut_down_and_freed():
    llm = _LLM()
    core = llm.llm_engine.engine_core
    trainer = SimpleNamespace(vllm_generation=SimpleNamespace(llm=llm))
    gone = weakref.ref(llm)
    del llm
    assert memory.release_rollout_engine(trainer) is True
    gc.collect()
    assert core.shut == 1 and trainer.vllm_generation.llm is None and gone() is None
    assert memory.release_rollout_engine(trainer) is False  # already released: nothing to do
    assert memory.release_rollout_engine(SimpleNamespace()) is False  # no vLLM (use_vllm: false, CPU)


def test_a_failing_shutdown_still_drops_the_engine(caplog):
    llm = _LLM()
    llm.llm_engine.engine_core.shutdown = lambda: (_ for _ in ()).throw(RuntimeError("dead worker"))
    trainer = SimpleNamespace(vllm_generation=SimpleNamespace(llm=llm))
    assert memory.release_rollout_engine(trainer) is True and trainer.vllm_generation.llm is None
    assert "dead worker" in caplog.text


def test_memory_metrics_and_the_cache_release(monkeypatch):
    assert not torch.cuda.is_initialized()
    assert memory.cuda_memory("cuda_train") == {}  # CPU: no metrics, nothing initialized
    emptied = []
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: emptied.append(1))
    models.release_memory()
    assert emptied == []  # no CUDA context here: nothing to empty (and none created)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda: 61.5e9)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda: 0.25e9)
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda: 0.5e9)
    resets = []
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda: resets.append(1))
    memory.reset_peak_memory()
    assert resets == [1]
    assert memory.cuda_memory("cuda_after_release") == {"cuda_after_release_peak_allocated_gb": 61.5,
                                                        "cuda_after_release_allocated_gb": 0.25,
                                                        "cuda_after_release_reserved_gb": 0.5}
    models.release_memory()
    assert emptied == [1]

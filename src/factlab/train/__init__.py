"""Training: one GRPO entry point for every paper (``run`` -> ``TrainResult``,
``merge_adapter``), TRL's trainer with factlab's extensions (``trainer``: advantage
diagnostics; ``stepwise_grpo``: CorVer's token-level advantages), SFT (``sft``), the
learning-zone self-filter (``selffilter``), callbacks, and each paper's wiring and params
(``corver``, ``rar``, ``seva``).
"""

from .grpo import TrainResult, merge_adapter, run

__all__ = ["TrainResult", "merge_adapter", "run"]

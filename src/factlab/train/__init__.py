"""Training, the engine: one GRPO entry point for every paper (``run`` -> ``TrainResult``,
``merge_adapter``), TRL's trainer with factlab's extensions (``trainer``: advantage
diagnostics; ``stepwise_grpo``: CorVer's token-level advantages; ``dapo``: dynamic sampling),
SFT (``sft``), the truthfulness reward model's readout fit (``truth_rm``, 004 Table 13),
callbacks, completion health, reward validity and the training alarms.

Each paper's params and stages (what it trains on, which runs, in which folders) live one layer
up, in ``factlab.recipes``.
"""

from .grpo import TrainResult, merge_adapter, run
from .runtime import RuntimeCheckError, check_runtime

__all__ = ["TrainResult", "merge_adapter", "run", "check_runtime", "RuntimeCheckError"]

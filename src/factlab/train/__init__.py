"""Training: GRPO runs on TRL (``grpo``), CorVer's stepwise token-level variant
(``stepwise_grpo``) and the learning-zone self-filter (``selffilter``, 000 §A.2, §A.4).

Submodules are imported on demand so that ``import factlab.train`` stays light (no torch,
transformers or TRL at import time).
"""

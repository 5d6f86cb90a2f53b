"""factlab: a notebook workbench for factuality rewards in LLM reinforcement learning.

The five reproduced papers live in ``../shared/papers/`` (see its README); each module
cites the section it implements.
"""

# before anything imports torch: OpenMP's wait policy and the intra-op thread count
# (``factlab.threads``; FACTLAB_THREADS, OMP_WAIT_POLICY)
from . import threads  # noqa: F401

__version__ = "0.1.0"

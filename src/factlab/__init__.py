"""factlab: a notebook workbench for factuality rewards in LLM reinforcement learning.

The five reproduced papers live in ``../shared/papers/`` (see its README); each module
cites the section it implements.
"""

__version__ = "0.1.0"

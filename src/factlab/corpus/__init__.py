"""Corpus indexes: infini-gram co-occurrence counts (CorVer, 000_ac66a963fabf3916.txt §3.2, §B.1)."""

from .cooccurrence import reference_cooccurrence
from .infinigram import CorpusIndex, build_from_token_ids

__all__ = ["CorpusIndex", "build_from_token_ids", "reference_cooccurrence"]

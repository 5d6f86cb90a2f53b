"""Label vocabularies shared by loaders, rewards and evaluators.

Fact attribution (SEVA, ``../shared/papers/002_56f1a732f42030d3.txt``): the two labels, the
Table 13 aliases that map benchmark labels onto them (entailment, supported, yes, ...), and
the six error types of §2.2 / Table 20. Dataset loaders, the SEVA reward and the verifier
evaluation all read labels through ``normalize_label``, so one table decides what counts as
"Attributable".
"""

from __future__ import annotations

import re
from typing import Any, Literal, Mapping

__all__ = ["Label", "LABELS", "LABEL_NAMES", "LABEL_ALIASES", "ERROR_TYPES", "STRATEGIES", "STRATEGY_ERROR_TYPES",
           "normalize_label", "normalize_error_type", "words", "snake_token"]

Label = Literal["attributable", "not_attributable"]
LABELS: tuple[Label, Label] = ("attributable", "not_attributable")
LABEL_NAMES: Mapping[Label, str] = {"attributable": "Attributable", "not_attributable": "Not Attributable"}

# §2.2, Table 20, names as in the K.1 prompt and Table 17.
ERROR_TYPES = ("numerical_exaggeration", "negation_flip", "scope_inflation", "temporal_shift",
               "entity_substitution", "fabrication")

# Table 19 perturbation strategies, in its order (names snake_case), and the Table 20 error
# type each one produces (why: ``factlab.synth.perturbations``).
STRATEGIES = ("entity_confusion", "numerical_perturbation", "multi_hop_graft", "paraphrase",
              "presupposition", "unanswerable_wrap")
STRATEGY_ERROR_TYPES: Mapping[str, str] = {
    "entity_confusion": "entity_substitution",
    "numerical_perturbation": "numerical_exaggeration",
    "multi_hop_graft": "entity_substitution",
    "paraphrase": "negation_flip",
    "presupposition": "scope_inflation",
    "unanswerable_wrap": "fabrication",
}
# Table 13, plus the canonical labels; keys in normalized form (see ``words``).
LABEL_ALIASES: Mapping[str, Label] = {
    "attributable": "attributable",
    "yes": "attributable", "true": "attributable", "entailment": "attributable", "supported": "attributable",
    "not attributable": "not_attributable",
    "no": "not_attributable", "false": "not_attributable", "contradiction": "not_attributable",
    "neutral": "not_attributable", "not supported": "not_attributable",
}

_NON_WORD = re.compile(r"[\W_]+")


def words(value: str) -> str:
    """Lower case, every run of punctuation / whitespace / underscores one space, stripped."""
    return _NON_WORD.sub(" ", value.lower()).strip()


def snake_token(value: Any) -> str | None:
    """An enum value as a snake_case token ("Not Found" -> "not_found"); None if not a string."""
    return "_".join(words(value).split()) if isinstance(value, str) else None


def normalize_label(label: Any) -> Label | None:
    """"attributable" / "not_attributable" for the canonical labels and every alias of Table 13
    (case-, whitespace- and punctuation-insensitive; JSON true / false as "true" / "false");
    None for anything else."""
    if isinstance(label, bool):
        label = str(label)
    if not isinstance(label, str):
        return None
    return LABEL_ALIASES.get(words(label))


def normalize_error_type(value: Any) -> str | None:
    """The Table 20 error type named by ``value`` (case-insensitive, spaces = underscores), else None."""
    token = snake_token(value)
    return token if token in ERROR_TYPES else None

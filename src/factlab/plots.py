"""The one figure theme of every factlab plot (seaborn's whitegrid, colour-blind palette).

Importing this module sets it, once per process, so a figure drawn by any layer (a sweep
summary, the abstention bars of ``eval``, the comparison's Pareto plot, ``report``) looks the
same in a notebook, a script or a test."""

from __future__ import annotations

import seaborn as sns

__all__ = ["THEME", "apply_theme", "wrap_labels"]

THEME = {"style": "whitegrid", "context": "notebook", "palette": "colorblind", "font_scale": 0.9}


def apply_theme() -> None:
    """Set ``THEME`` (idempotent; call after something else changed the rc settings)."""
    sns.set_theme(**THEME)


def wrap_labels(labels, width: int = 14) -> list[str]:
    """Tick labels wrapped onto lines of at most ``width`` characters (no overlapping text)."""
    import textwrap

    return ["\n".join(textwrap.wrap(str(s), width)) or str(s) for s in labels]


apply_theme()

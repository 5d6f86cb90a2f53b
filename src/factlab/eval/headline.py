"""The value a run's headline shows for one metric: the start model's, then the trained one's.

Each recipe's ``headline`` (``recipes.<paper>.headline``) builds its paper's headline from these;
the notebook saves it (``runner.save_headline``), and with an ``evidence:`` section the
interval over seeds leads it (``evidence.headline``).
"""

from __future__ import annotations

__all__ = ["before_after"]


def before_after(before: float | None, after: float | None, digits: int = 3) -> str:
    """A headline value: ``"0.250 → 0.312"`` (``n/a`` for a missing or NaN side)."""
    def fmt(x: float | None) -> str:
        return "n/a" if x is None or x != x else f"{x:.{digits}f}"
    return f"{fmt(before)} → {fmt(after)}"

"""Plots and tables for the notebooks' reports (matplotlib; HTML rendering is in ``runner``)."""

from __future__ import annotations

from typing import Mapping, Sequence

import matplotlib.pyplot as plt

QA_RATE_KEYS = ("accuracy", "strict_accuracy", "na_rate", "format_rate", "truncation_rate")


def metrics_table(metrics_by_name: Mapping[str, Mapping[str, float]], keys: Sequence[str] | None = None):
    """One row per evaluated set/model, one column per metric (a pandas DataFrame)."""
    import pandas as pd

    df = pd.DataFrame(metrics_by_name).T
    if keys:
        df = df[[k for k in keys if k in df.columns]]
    return df


def plot_qa_rates(metrics_by_name: Mapping[str, Mapping[str, float]], title: str = "Short-form QA diagnostics"):
    """Grouped bars of the rate metrics (000 §4 diagnostics) for each evaluated set/model."""
    names = list(metrics_by_name)
    keys = [k for k in QA_RATE_KEYS if all(k in metrics_by_name[n] for n in names)]
    fig, ax = plt.subplots(figsize=(1.6 + 1.3 * len(keys) * max(1, len(names)) / 2, 3.4))
    width = 0.8 / max(1, len(names))
    for i, name in enumerate(names):
        xs = [k + i * width for k in range(len(keys))]
        vals = [metrics_by_name[name][k] for k in keys]
        bars = ax.bar(xs, vals, width=width, label=name)
        for b, v in zip(bars, vals):
            ax.text(b.get_x() + b.get_width() / 2, v + 0.01, f"{v:.2f}", ha="center", fontsize=8)
    ax.set_xticks([k + 0.4 - width / 2 for k in range(len(keys))], keys)
    ax.set_ylim(0, 1.1)
    ax.set_ylabel("rate")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_length_hist(lengths_by_name: Mapping[str, Sequence[int]], title: str = "Completion length (tokens)"):
    fig, ax = plt.subplots(figsize=(5, 3))
    for name, lengths in lengths_by_name.items():
        ax.hist(list(lengths), bins=20, alpha=0.6, label=name)
    ax.set_xlabel("tokens")
    ax.set_ylabel("completions")
    ax.set_title(title)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_quartiles(rows: Sequence[Mapping], title: str = "Accuracy by popularity quartile"):
    """Bar chart of ``eval.shortform.popularity_quartiles`` output."""
    fig, ax = plt.subplots(figsize=(4.5, 3))
    ax.bar([r["quartile"] for r in rows], [r["accuracy"] for r in rows], color="tab:green")
    ax.set_ylim(0, 1)
    ax.set_ylabel("accuracy")
    ax.set_xlabel("popularity quartile (Q1 = least popular)")
    ax.set_title(title)
    fig.tight_layout()
    return fig

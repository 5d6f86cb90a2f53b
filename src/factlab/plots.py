"""Every figure of factlab that is not a report table's: the one theme (seaborn's whitegrid,
colour-blind palette) and the plotting functions the layers above call.

Importing this module sets the theme, once per process, so a figure drawn anywhere (a sweep
summary, the abstention bars, the comparison's Pareto plot, ``report``) looks the same in a
notebook, a script or a test. This module is the bottom layer: it draws the frames and dicts it
is given and imports nothing of factlab, so any layer may call it.

====================  ==========================================================================
function              draws
====================  ==========================================================================
plot_abstention       correct / abstained / incorrect stacked bars (001 Figure 2; eval.abstention)
plot_pareto           gain over the base vs reward cost, the Pareto front (06_compare)
plot_reward_curves    training reward by step over seeds, the held-out metric per seed (06_compare)
plot_metric           a sweep's metric per point (``factlab sweep``'s summary)
plot_evidence_curves  an evidence run's truth metric and reward over steps (``factlab.evidence``)
====================  ==========================================================================

Report figures (QA rates, calibration, training curves, ...) live in ``factlab.report``."""

from __future__ import annotations

from typing import Mapping, Sequence

import pandas as pd
import seaborn as sns

__all__ = ["THEME", "apply_theme", "plot_dose_response", "wrap_labels", "OUTCOMES", "OUTCOME_COLORS", "BASE_RUN", "RAW_RUN",
           "plot_abstention", "plot_pareto", "plot_reward_curves", "plot_metric",
           "plot_evidence_curves"]

THEME = {"style": "whitegrid", "context": "notebook", "palette": "colorblind", "font_scale": 0.9}

OUTCOMES = ("correct", "abstained", "incorrect")  # a short-form answer's outcomes, the stacking order of 001 Figure 2
OUTCOME_COLORS = {"correct": "tab:green", "abstained": "tab:grey", "incorrect": "tab:red"}
# the rows of a comparison that were evaluated, never trained (06_compare): reference lines, not runs
BASE_RUN = "base"  # the untrained start
RAW_RUN = "raw"  # the raw model under a warm start (recipes.warmstart)


def apply_theme() -> None:
    """Set ``THEME`` (idempotent; call after something else changed the rc settings)."""
    sns.set_theme(**THEME)


def wrap_labels(labels, width: int = 14) -> list[str]:
    """Tick labels wrapped onto lines of at most ``width`` characters (no overlapping text)."""
    import textwrap

    return ["\n".join(textwrap.wrap(str(s), width)) or str(s) for s in labels]


def plot_abstention(breakdowns: Mapping[str, Mapping[str, float]],
                    title: str = "Short-form answers: correct / abstained / incorrect"):
    """Stacked bars of the Figure 2 breakdown (001 §6.2), one bar per name.

    ``breakdowns``: ``{name: abstention_breakdown(...)}`` (e.g. ``"base / abstain"``,
    ``"RAR / forced"``); each bar stacks correct, abstained and incorrect rates, labelled
    in percent. Returns the matplotlib figure.
    """
    import matplotlib.pyplot as plt

    names = list(breakdowns)
    if not names:
        raise ValueError("nothing to plot: breakdowns is empty")
    for n in names:
        missing = [k for k in OUTCOMES if k not in breakdowns[n]]
        if missing:
            raise KeyError(f"breakdown {n!r} lacks {', '.join(missing)}")
    fig, ax = plt.subplots(figsize=(1.5 + 1.1 * len(names), 3.6))
    bottom = [0.0] * len(names)
    for key in OUTCOMES:
        vals = [float(breakdowns[n][key]) for n in names]
        bars = ax.bar(names, vals, bottom=bottom, color=OUTCOME_COLORS[key], label=key, width=0.6)
        for b, v, y0 in zip(bars, vals, bottom):
            if v >= 0.04:
                ax.text(b.get_x() + b.get_width() / 2, y0 + v / 2, f"{100 * v:.0f}%",
                        ha="center", va="center", fontsize=8, color="white")
        bottom = [y + v for y, v in zip(bottom, vals)]
    ax.set_ylim(0, 1)
    ax.set_ylabel("fraction of questions")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.tick_params(axis="x", labelrotation=20 if len(names) > 3 else 0, labelsize=8)
    fig.tight_layout()
    return fig



def plot_pareto(summary: pd.DataFrame, metric: str, cost: str = "reward_seconds_per_step"):
    """Gain over the base model vs reward cost per step, one point per run with the seed
    spread as an error bar; the Pareto front (no run both cheaper and better) is joined.
    Drawn in the current seaborn theme (a report sets ``factlab.report.THEME``)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.0, 4.0))
    xs, ys = summary[cost].astype(float), summary["gain"].astype(float)
    near_x = 0.06 * ((xs.max() - xs.min()) or 1.0)
    near_y = 0.06 * ((ys.max() - ys.min()) or 1.0)
    placed: list[tuple[float, float]] = []
    for (name, r), colour in zip(summary.iterrows(), sns.color_palette(n_colors=max(len(summary), 1))):
        x, y = float(r[cost]), float(r["gain"])
        ax.errorbar(x, y, yerr=r["spread"], fmt="o", capsize=3, color=colour)
        # stack the labels of points that (nearly) coincide instead of printing them on each other
        stacked = sum(abs(x - px) < near_x and abs(y - py) < near_y for px, py in placed)
        placed.append((x, y))
        ax.annotate(str(name), (x, y), textcoords="offset points", xytext=(5, 4 + 11 * stacked), fontsize=8,
                    color=colour)
    front = summary.sort_values(cost)
    best, pts = -float("inf"), []
    for _, r in front.iterrows():
        if r["gain"] > best:
            best = r["gain"]
            pts.append((r[cost], r["gain"]))
    if len(pts) > 1:
        ax.plot(*zip(*pts), linestyle="--", color="gray", linewidth=0.8, label="Pareto front")
        ax.legend(fontsize=8)
    ax.axhline(0, color="black", linewidth=0.6)
    ax.set_xlabel(cost.replace("_", " "))
    ax.set_ylabel(f"gain in {metric} over base")
    ax.set_title("Gain vs reward cost (error bars: sd over seeds)", fontsize=10)
    fig.tight_layout()
    return fig



def plot_reward_curves(curves: pd.DataFrame, metric_frame: pd.DataFrame | None = None, metric: str | None = None):
    """Left: the training reward by step, one line per run, the mean over seeds with a band of
    one standard deviation (seaborn ``lineplot``, ``errorbar="sd"``; one seed: no band). Right,
    with ``metric_frame`` (``collect``) and ``metric``: the held-out metric of every seed (dots)
    and its mean +- sd per run, the base model as a dashed line. Rows of the runs ``BASE_RUN`` and
    ``RAW_RUN`` (evaluated, never trained) are reference lines, not runs."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    data = curves[~curves["run"].isin([BASE_RUN, RAW_RUN])]
    if data.empty:
        raise ValueError("no reward curves (no trained run logged a reward)")
    panels = 2 if metric_frame is not None and metric else 1
    fig, axes = plt.subplots(1, panels, figsize=(6.2 * panels, 3.8), squeeze=False)
    ax = axes[0][0]
    seeds = data.groupby("run")["seed"].nunique()
    sns.lineplot(data=data, x="step", y="reward", hue="run", errorbar="sd", marker="o", ax=ax)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_title(f"Training reward, mean ± sd over {seeds.min()}-{seeds.max()} seed(s)"
                 if seeds.min() != seeds.max() else f"Training reward, mean ± sd over {seeds.min()} seed(s)",
                 fontsize=10)
    ax.legend(fontsize=7)
    if panels == 2:
        ax2 = axes[0][1]
        trained = metric_frame[~metric_frame["run"].isin([BASE_RUN, RAW_RUN])]
        sns.stripplot(data=trained, x="run", y=metric, hue="run", legend=False, alpha=0.6, ax=ax2)
        sns.pointplot(data=trained, x="run", y=metric, errorbar="sd", color="black", markers="_",
                      capsize=0.2, linestyle="none", ax=ax2)
        base = metric_frame.loc[metric_frame["run"] == BASE_RUN, metric]
        if not base.empty:
            ax2.axhline(float(base.mean()), color="gray", linestyle="--", linewidth=0.8, label="base")
        raw = metric_frame.loc[metric_frame["run"] == RAW_RUN, metric]
        if not raw.empty:
            ax2.axhline(float(raw.mean()), color="gray", linestyle=":", linewidth=0.8, label="raw (no warm start)")
        if not base.empty or not raw.empty:
            ax2.legend(fontsize=7)
        ax2.set_title(f"{metric} per seed (mean ± sd)", fontsize=10)
        ax2.tick_params(axis="x", labelsize=7, rotation=20)
    fig.tight_layout()
    return fig



def plot_metric(frame: pd.DataFrame, metric: str, grid_keys: Sequence[str]):
    """The metric per point: a line over the grid values for a one-key numeric grid, else
    one bar per point (``sweep.summary_frame``'s columns ``point`` and the grid keys). Points without
    the metric (failed, pending) are left out."""
    import matplotlib.pyplot as plt

    if metric not in frame:
        raise KeyError(f"metric {metric!r} not in any point's metrics.json; have: "
                       f"{sorted(c for c in frame.columns if '.' in c)[:20]}")
    data = frame.dropna(subset=[metric])
    fig, ax = plt.subplots(figsize=(6.0, 3.6))
    key = grid_keys[0] if len(grid_keys) == 1 else None
    if key is not None and pd.api.types.is_numeric_dtype(data[key]):
        data = data.sort_values(key)
        ax.plot(data[key], data[metric], marker="o")
        ax.set_xlabel(key)
    else:
        ax.bar(range(len(data)), data[metric])
        ax.set_xticks(range(len(data)), data["point"], rotation=30, ha="right", fontsize=7)
    ax.set_ylabel(metric)
    ax.set_title(f"{metric} per sweep point", fontsize=10)
    fig.tight_layout()
    return fig


def plot_evidence_curves(record: dict, title: str):
    """An evidence run's truth metric and reward over steps, one line per (arm, seed) (the
    ``curves`` rows of ``factlab.evidence``'s record): one colour per arm, one line style per
    seed, so that 8 arms x 3 seeds stay readable; the legend names arms and seed styles once."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    frame = pd.DataFrame(record.get("curves") or [])
    keys = [k for k in ("truth/score", "reward") if k in frame]
    arms = list(dict.fromkeys(frame["arm"])) if keys else []
    seeds = list(dict.fromkeys(frame["seed"])) if keys else []
    colour = {arm: f"C{i % 10}" for i, arm in enumerate(arms)}
    style = {seed: ("-", "--", ":", "-.")[i % 4] for i, seed in enumerate(seeds)}
    fig, axes = plt.subplots(1, max(len(keys), 1), figsize=(5.2 * max(len(keys), 1), 3.4), squeeze=False)
    for ax, key in zip(axes.flat, keys):
        for (arm, seed), g in frame.groupby(["arm", "seed"], sort=False):
            g = g.dropna(subset=[key])  # steps that logged no value (DAPO's update-only steps) break no line
            ax.plot(g["step"], g[key], marker="o", markersize=2, linewidth=1, color=colour[arm],
                    linestyle=style[seed], label=str(arm) if seed == seeds[0] else "_nolegend_")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(key, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
    if keys:
        legend_ax = axes.flat[0]
        if len(seeds) > 1:
            for seed in seeds:  # line styles, drawn nowhere, named once
                legend_ax.plot([], [], color="0.35", linewidth=1, linestyle=style[seed], label=f"seed {seed}")
        legend_ax.legend(fontsize=6)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig



def plot_dose_response(rows: Sequence[dict], title: str):
    """An evidence run's primary effect (treatment - control, 95% paired-bootstrap interval) at
    each step count it was measured at (``factlab.evidence.dose_response`` rows), one line per
    comparison, the zero line drawn."""
    import matplotlib.pyplot as plt

    frame = pd.DataFrame(list(rows))
    fig, ax = plt.subplots(figsize=(6.0, 3.4))
    if not frame.empty:
        for i, (label, g) in enumerate(frame.groupby("comparison", sort=False)):
            g = g.sort_values("step")
            ax.errorbar(g["step"], g["mean"], yerr=[g["mean"] - g["lo"], g["hi"] - g["mean"]], marker="o",
                        markersize=3, capsize=3, linewidth=1, color=f"C{i % 10}", label=str(label))
        ax.legend(fontsize=6)
    ax.axhline(0.0, color="0.5", linewidth=0.8, linestyle="--")
    ax.set_xlabel("GRPO steps", fontsize=8)
    ax.set_ylabel("effect (95% interval)", fontsize=8)
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig


def plot_arm_effects(rows: Sequence[dict], title: str):
    """Each trained arm's effect against the base on one metric (``factlab.evidence.arm_effects``
    rows: ``arm``, ``mean``, ``lo``, ``hi``), in the arms' order with 95% intervals, the zero line
    drawn: e.g. one reward under judges that hallucinate more and more."""
    import matplotlib.pyplot as plt

    frame = pd.DataFrame(list(rows))
    fig, ax = plt.subplots(figsize=(max(3.6, 1.1 * max(len(frame), 1) + 1.6), 3.2))
    if not frame.empty:
        x = list(range(len(frame)))
        ax.errorbar(x, frame["mean"], yerr=[frame["mean"] - frame["lo"], frame["hi"] - frame["mean"]], fmt="o",
                    capsize=4, color="C0")
        ax.set_xticks(x, [str(a) for a in frame["arm"]], fontsize=7)
        ax.set_ylabel(f"{frame['label'].iloc[0]}\n(arm - base, 95% interval)", fontsize=7)
    ax.axhline(0.0, color="0.5", linewidth=0.8, linestyle="--")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    return fig


apply_theme()

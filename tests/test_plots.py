"""Report figures draw the numbers they are given, in the one seaborn theme (factlab.plots)."""

import math

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from factlab import plots, report  # noqa: E402
from factlab.eval.calibration import wilson_interval  # noqa: E402


def test_qa_rate_bars_are_the_metrics_one_hue_per_model():
    metrics = {"raw": {"accuracy": 0.5, "na_rate": 0.0, "format_rate": 1.0},
               "full": {"accuracy": 0.75, "na_rate": 0.125, "format_rate": 0.5}}
    ax = report.plot_qa_rates(metrics).axes[0]
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    by_model = {name: [round(b.get_height(), 3) for b in c] for name, c in zip(legend, ax.containers)}
    assert by_model == {"raw": [0.5, 0.0, 1.0], "full": [0.75, 0.125, 0.5]}
    assert [t.get_text() for t in ax.get_xticklabels()] == ["accuracy", "na rate", "format rate"]
    plt.close("all")


def test_calibration_points_and_wilson_error_bars():
    rows = []
    for bucket, n, k in [("0", 40, 2), ("1-4", 30, 28), ("5-9", 0, 0), (">=20", 3, 3)]:
        lo, hi = wilson_interval(k, n) if n else (math.nan, math.nan)
        rows.append({"bucket": bucket, "n": n, "p_correct": k / n if n else math.nan, "wilson_lo": lo, "wilson_hi": hi})
    table = pd.DataFrame(rows)
    ax = report.plot_calibration(table).axes[0]
    points = next(line for line in ax.lines if len(line.get_ydata()) == len(rows))
    assert list(points.get_ydata()[[0, 1, 3]]) == pytest.approx([0.05, 28 / 30, 1.0])
    import numpy as np

    bars = [np.asarray(line.get_ydata(), dtype=float) for line in ax.lines
            if line is not points and len(line.get_ydata()) > 2]  # seaborn: cap, span, cap per bucket
    spans = sorted((round(float(np.nanmin(y)), 4), round(float(np.nanmax(y)), 4)) for y in bars
                   if not np.isnan(y).all())
    expected = sorted((round(r["wilson_lo"], 4), round(r["wilson_hi"], 4)) for r in rows if r["n"])
    assert spans == expected  # the error bars are the Wilson 95% intervals, not a bootstrap
    assert "n=0" in [t.get_text() for t in ax.texts]
    plt.close("all")


def test_every_layer_draws_in_the_one_theme():
    from factlab import sweep  # noqa: F401  (imports plots too)

    plt.rcdefaults()
    plots.apply_theme()
    fig = plots.plot_abstention({"base": {"correct": 0.5, "incorrect": 0.25, "abstained": 0.25}})
    assert plt.rcParams["axes.grid"] and plots.THEME["style"] == "whitegrid"
    assert fig.axes[0].patches  # the stacked bars were drawn
    plt.close("all")


def test_plot_abstention_stacks_the_figure_2_breakdown():
    from factlab.eval import abstention as A

    bd = {"base / abstain": A.abstention_breakdown(["GOOD", "BAD", "BAD", "NA"]),
          "base / forced": A.abstention_breakdown(["GOOD", "GOOD", "BAD", "BAD"])}
    fig = plots.plot_abstention(bd)
    ax = fig.axes[0]
    bars = ax.patches
    assert len(bars) == 3 * len(bd)
    # stacked: each name's three segments sum to 1 and are in correct/abstained/incorrect order
    for j, name in enumerate(bd):
        segs = [bars[i * len(bd) + j] for i in range(3)]
        assert [s.get_height() for s in segs] == [bd[name][k] for k in plots.OUTCOMES]
        assert sum(s.get_height() for s in segs) == pytest.approx(1.0)
    assert [t.get_text() for t in ax.get_legend().get_texts()] == list(plots.OUTCOMES)
    plt.close(fig)
    with pytest.raises(ValueError):
        plots.plot_abstention({})
    with pytest.raises(KeyError, match="lacks"):
        plots.plot_abstention({"x": {"correct": 1.0}})


def test_figures_are_drawn_in_plots_and_report_only():
    """One way each: a figure is drawn by ``factlab.plots`` (any layer may call it) or
    ``factlab.report`` (the notebooks' figures), never by an evaluator, a trainer or a command;
    the notebooks' figures are all reachable through ``report``."""
    import ast
    from pathlib import Path

    src = Path(plots.__file__).parent
    drawing = {"subplots", "figure", "bar", "barplot", "lineplot", "pointplot", "stripplot", "scatterplot"}
    strays = []
    for path in sorted(src.rglob("*.py")):
        if path.relative_to(src).as_posix() in ("plots.py", "report.py"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef) and node.name.startswith("plot_"):
                strays.append(f"{path.relative_to(src)}: def {node.name}")
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in drawing
                  and isinstance(node.func.value, ast.Name) and node.func.value.id in ("plt", "sns")):
                strays.append(f"{path.relative_to(src)}: {node.func.value.id}.{node.func.attr}(...)")
    assert not strays, "draw figures in factlab.plots or factlab.report: " + "; ".join(strays)
    for name in ("plot_abstention", "plot_pareto", "plot_reward_curves", "plot_evidence_curves"):
        assert getattr(report, name) is getattr(plots, name)


def test_pareto_and_reward_curves_draw_reference_runs_as_lines():
    summary = pd.DataFrame({"gain": [0.1, 0.3], "spread": [0.0, 0.02], "reward_seconds_per_step": [1.0, 2.0]},
                           index=["cheap", "costly"])
    ax = plots.plot_pareto(summary, "mw/accuracy").axes[0]
    assert [list(line.get_xdata()) for line in ax.get_lines() if line.get_label() == "Pareto front"] == [[1.0, 2.0]]
    curves = pd.DataFrame([{"run": run, "seed": 0, "step": s, "reward": r}
                           for run, r in [("fmt", 0.5), (plots.BASE_RUN, 0.0)] for s in (1, 2)])
    metric = pd.DataFrame([{"run": "fmt", "seed": 0, "acc": 0.4}, {"run": plots.BASE_RUN, "seed": None, "acc": 0.2},
                           {"run": plots.RAW_RUN, "seed": None, "acc": 0.1}])
    left, right = plots.plot_reward_curves(curves, metric, "acc").axes[:2]
    assert [t.get_text() for t in left.get_legend().get_texts()] == ["fmt"]  # the base is no training curve
    assert {line.get_label() for line in right.get_lines()} >= {"base", "raw (no warm start)"}
    plt.close("all")


def test_sweep_metric_and_evidence_curves():
    frame = pd.DataFrame({"point": ["a", "b", "c"], "grpo.beta": [0.0, 0.01, 0.001], "acc": [0.1, 0.3, None]})
    ax = plots.plot_metric(frame, "acc", ["grpo.beta"]).axes[0]
    (line,) = ax.get_lines()
    assert list(line.get_xdata()) == [0.0, 0.01] and list(line.get_ydata()) == [0.1, 0.3]  # sorted, no NaN point
    with pytest.raises(KeyError, match="metric 'f1' not in any point"):
        plots.plot_metric(frame, "f1", ["grpo.beta"])
    record = {"curves": [{"arm": arm, "seed": seed, "step": s, "reward": 0.1 * s, "truth/score": 0.5}
                         for arm in ("a", "b") for seed in (0, 1) for s in (1, 2)]}
    fig = plots.plot_evidence_curves(record, "h")
    assert [ax.get_title() for ax in fig.axes] == ["truth/score", "reward"]
    drawn = [line for line in fig.axes[1].get_lines()]
    assert len(drawn) == 4  # one per (arm, seed)
    colours = {(line.get_color(), line.get_linestyle()) for line in drawn}
    assert len(colours) == 4 and len({c for c, _ in colours}) == 2 and len({ls for _, ls in colours}) == 2  # arm: colour, seed: style
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["a", "b", "seed 0", "seed 1"]
    plt.close("all")

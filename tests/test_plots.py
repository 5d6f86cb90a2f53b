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
    from factlab.eval import abstention

    plt.rcdefaults()
    plots.apply_theme()
    fig = abstention.plot_abstention({"base": {"correct": 0.5, "incorrect": 0.25, "abstained": 0.25}})
    assert plt.rcParams["axes.grid"] and plots.THEME["style"] == "whitegrid"
    assert fig.axes[0].patches  # the stacked bars were drawn
    plt.close("all")

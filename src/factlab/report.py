"""Plots and tables for the notebooks' reports (seaborn / matplotlib in the one theme of
``factlab.plots``; HTML rendering is in ``runner``), and the report's HTML sanitizer. A notebook
draws every figure through ``report``: the figures of ``factlab.plots`` that lower layers draw
too (the abstention bars, the comparison's Pareto and reward curves, an evidence run's curves)
are re-exported here under the same names.

Model and judge text is untrusted: notebooks show it through ``table`` (every cell, label and
index / column name HTML-escaped) and ``show_text`` (escaped, shown as text). Whatever else
reaches the exported report (HTML and Markdown outputs, Markdown cells) goes through
``sanitize_html``: nh3, the Python binding of the Rust sanitizer ammonia, with an allow-list
of tags, attributes, URL schemes and style properties. It parses HTML the way browsers do
(html5ever), so comment tricks (``<!-->``), entity-encoded ``javascript:`` URLs and SVG
animations that rewrite an ``href`` never survive it; bleach is deprecated and a hand-written
detector disagrees with browsers."""

from __future__ import annotations

import html
import math
import numbers
import re
from typing import Any, Mapping, Sequence

import matplotlib.pyplot as plt
import nh3
import pandas as pd
import seaborn as sns

from .eval.alarms import TRUTH_KEY
from .eval.calibration import COUNT_BUCKETS, wilson_interval
from .plots import THEME, wrap_labels  # noqa: F401  (importing plots sets the one theme)
from .plots import plot_abstention, plot_evidence_curves, plot_pareto, plot_reward_curves  # noqa: F401

QA_RATE_KEYS = ("accuracy", "strict_accuracy", "na_rate", "format_rate", "truncation_rate")

# What a report's HTML may hold: text, lists, tables, figures (<img>, PNG / JPEG / SVG data
# URIs), folded blocks. No script, style sheet, form, frame, SVG or MathML element survives.
REPORT_TAGS = frozenset({
    "a", "abbr", "b", "blockquote", "br", "caption", "code", "col", "colgroup", "dd", "del", "details", "div",
    "dl", "dt", "em", "figcaption", "figure", "h1", "h2", "h3", "h4", "h5", "h6", "hr", "i", "img", "ins",
    "kbd", "li", "mark", "ol", "p", "pre", "q", "s", "samp", "small", "span", "strong", "sub", "summary",
    "sup", "table", "tbody", "td", "tfoot", "th", "thead", "tr", "u", "ul", "var"})
REPORT_ATTRIBUTES = {
    "*": {"class", "title", "style", "align", "lang", "dir"},
    "a": {"href"}, "img": {"src", "alt", "width", "height"}, "table": {"border"},
    "td": {"colspan", "rowspan"}, "th": {"colspan", "rowspan", "scope"}, "col": {"span"}, "colgroup": {"span"},
    "ol": {"start", "type"}, "details": {"open"}}
REPORT_URL_SCHEMES = frozenset({"http", "https", "mailto", "data"})  # data: only as an <img> source
REPORT_STYLE_PROPERTIES = frozenset({
    "color", "background-color", "text-align", "vertical-align", "white-space", "font-weight", "font-style",
    "font-size", "font-family", "line-height", "margin", "margin-top", "margin-bottom", "margin-left",
    "margin-right", "padding", "padding-top", "padding-bottom", "padding-left", "padding-right", "border",
    "border-top", "border-bottom", "border-left", "border-right", "border-collapse", "width", "height",
    "max-width", "list-style"})
_IMAGE_DATA_URI = re.compile(r"data:image/(?:png|jpeg|gif|webp|svg\+xml)[;,]")
_ACTIVE_CSS = re.compile(r"url\s*\(|expression\s*\(|@import|javascript|behavior|binding|\\", re.IGNORECASE)
_URL_NOISE = re.compile(r"[\x00-\x20]")  # what browsers drop from a URL before reading its scheme


def _report_attribute(tag: str, attribute: str, value: str) -> str | None:
    """nh3's per-attribute hook: ``data:`` URLs only as image sources, no CSS that loads or runs."""
    if attribute == "style" and _ACTIVE_CSS.search(value):
        return None
    if attribute in ("href", "src"):
        url = _URL_NOISE.sub("", value).lower()
        if url.startswith("data:") and not (tag == "img" and attribute == "src" and _IMAGE_DATA_URI.match(url)):
            return None
    return value


def sanitize_html(fragment: str) -> str:
    """``fragment`` (HTML, or Markdown already rendered to HTML) with everything outside the
    report's allow-list removed: scripts and style sheets with their content, event handlers,
    every URL scheme but http(s), mailto and image data, comments, SVG. Text is kept."""
    return nh3.clean(str(fragment), tags=set(REPORT_TAGS), clean_content_tags={"script", "style"},
                     attributes={k: set(v) for k, v in REPORT_ATTRIBUTES.items()},
                     attribute_filter=_report_attribute, strip_comments=True, link_rel="noopener noreferrer",
                     url_schemes=set(REPORT_URL_SCHEMES), filter_style_properties=set(REPORT_STYLE_PROPERTIES))


def show_text(text: Any, label: str | None = None) -> None:
    """Display untrusted text (a completion, a judge answer) in the report, escaped, line
    breaks kept; ``label`` (trusted, also escaped) is shown bold before it."""
    from IPython.display import HTML, display

    head = f"<b>{html.escape(str(label))}</b><br>" if label else ""
    display(HTML(f"<div style='margin:0.4em 0'>{head}<blockquote style='white-space:pre-wrap;margin:0.2em 0 0 1em;"
                 f"border-left:3px solid #ccc;padding-left:0.6em'>{html.escape(str(text))}</blockquote></div>"))


def _integer_valued(values) -> bool:
    vals = [v for v in values if isinstance(v, numbers.Real) and not isinstance(v, bool)
            and not (isinstance(v, float) and math.isnan(v))]
    return bool(vals) and all(float(v).is_integer() for v in vals)


def table(df, caption: str | None = None, precision: int = 3, na_rep: str = ""):
    """A pandas Styler for the report: every cell, index and column label HTML-escaped (model
    text is untrusted), floats to ``precision`` digits, and numbers shown as integers where
    their whole row or whole column holds whole numbers (counts read 64, not 64.000). A
    Series is shown as a one-column table."""
    if isinstance(df, pd.Series):
        df = df.to_frame()
    int_rows = {i for i in range(len(df)) if _integer_valued(df.iloc[i].tolist())}
    int_cols = {j for j in range(df.shape[1]) if _integer_valued(df.iloc[:, j].tolist())}

    def cell(v, whole: bool) -> str:
        if v is None or (isinstance(v, float) and math.isnan(v)) or v is getattr(pd, "NA", None):
            return na_rep
        if isinstance(v, numbers.Real) and not isinstance(v, bool):
            return f"{int(v):,}" if whole and float(v).is_integer() else f"{v:.{precision}f}"
        return html.escape(str(v))

    shown = df.copy().astype(object)
    for i in range(len(df)):
        for j in range(df.shape[1]):
            shown.iat[i, j] = cell(df.iat[i, j], i in int_rows or j in int_cols)
    # the Styler escapes index and column labels (format_index), but not their names
    shown.index.names = [None if n is None else html.escape(str(n)) for n in shown.index.names]
    shown.columns.names = [None if n is None else html.escape(str(n)) for n in shown.columns.names]
    styler = shown.style.format_index(escape="html", axis=0).format_index(escape="html", axis=1)
    if caption:
        styler = styler.set_caption(html.escape(caption))
    return styler


def metrics_table(metrics_by_name: Mapping[str, Mapping[str, float]], keys: Sequence[str] | None = None):
    """One row per evaluated set/model, one column per metric (a pandas DataFrame)."""
    df = pd.DataFrame(metrics_by_name).T
    if keys:
        df = df[[k for k in keys if k in df.columns]]
    return df


def plot_qa_rates(metrics_by_name: Mapping[str, Mapping[str, float]], title: str = "Short-form QA diagnostics"):
    """Grouped bars (seaborn) of the rate metrics (000 §4 diagnostics), one bar per
    evaluated set/model within each metric, values printed on the bars."""
    names = list(metrics_by_name)
    keys = [k for k in QA_RATE_KEYS if all(k in metrics_by_name[n] for n in names)]
    frame = pd.DataFrame([{"metric": k, "model": str(n), "rate": float(metrics_by_name[n][k])}
                          for k in keys for n in names])
    fig, ax = plt.subplots(figsize=(1.6 + 1.3 * len(keys) * max(1, len(names)) / 2, 3.6))
    sns.barplot(frame, x="metric", y="rate", hue="model", order=keys, hue_order=[str(n) for n in names],
                errorbar=None, ax=ax)
    for bars in ax.containers:
        ax.bar_label(bars, fmt="%.2f", fontsize=7)
    ax.set_xticks(range(len(keys)), wrap_labels([k.replace("_", " ") for k in keys], 12), fontsize=8)
    ax.set_xlabel("")
    ax.set_ylim(0, 1.1)
    ax.set_ylabel("rate")
    ax.set_title(title)
    ax.legend(fontsize=7, title=None)
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


def plot_calibration(table, ax=None, title: str = "P(correct | co-occurrence bucket)"):
    """``P(correct)`` per count bucket (000 §6.1 Figure 5), drawn with seaborn's ``pointplot``
    from the bucket's outcomes with a Wilson 95% interval as the error bar, ``n`` annotated;
    green dashed lines at the reward boundaries of Eq. (2), a grey dotted line at the unused
    split ``c = 10``. ``table``: the DataFrame of ``eval.calibration.calibration_table`` /
    ``audit``. Returns the figure."""
    if ax is None:
        fig, ax = plt.subplots(figsize=(5.2, 3.4))
    else:
        fig = ax.figure
    labels = [str(b) for b in table["bucket"]]
    outcomes = []  # one row per claim, rebuilt exactly from (n, p_correct) of each bucket
    for _, row in table.iterrows():
        n = int(row["n"])
        k = round(float(row["p_correct"]) * n) if n else 0
        outcomes += [{"bucket": str(row["bucket"]), "correct": 1.0}] * k
        outcomes += [{"bucket": str(row["bucket"]), "correct": 0.0}] * (n - k)

    def wilson(values):
        return wilson_interval(int(round(sum(values))), len(values))

    if outcomes:
        sns.pointplot(pd.DataFrame(outcomes), x="bucket", y="correct", order=labels, errorbar=wilson,
                      linestyle="none", capsize=0.15, marker="o", ax=ax)
    for x, (_, row) in enumerate(table.iterrows()):
        p = row["p_correct"]
        if row["n"] == 0 or math.isnan(p):
            ax.text(x, 0.02, "n=0", ha="center", fontsize=8, color="grey")
            continue
        ax.text(x, min(row["wilson_hi"] + 0.03, 1.02), f"{p:.0%}\nn={int(row['n'])}", ha="center", fontsize=8)
    pos = {b: i for i, b in enumerate(labels)}
    for left, right, style in (("0", "1-4", "green"), ("1-4", "5-9", "green"),
                               ("10-19", ">=20", "green"), ("5-9", "10-19", "grey")):
        if left in pos and right in pos:
            ax.axvline((pos[left] + pos[right]) / 2, color=style,
                       linestyle="--" if style == "green" else ":", linewidth=1)
    ax.set_xticks(range(len(labels)), [f"c {b}" if b in COUNT_BUCKETS else b for b in labels])
    ax.set_ylim(0, 1.15)
    ax.set_ylabel("P(correct)")
    ax.set_xlabel("co-occurrence count bucket")
    auroc = getattr(table, "attrs", {}).get("auroc")
    ax.set_title(title + (f"  (AUROC {auroc:.2f})" if auroc is not None and not math.isnan(auroc) else ""),
                 fontsize=10)
    fig.tight_layout()
    return fig


def plot_selffilter_buckets(table, ax=None, title: str = "Learning-zone self-filter"):
    """Bars of the self-filter buckets (000 §A.4 Table 11) with count and share annotated.

    ``table``: ``recipes.selffilter.bucket_table`` (three buckets, or one bar per
    ``n_correct`` with ``detail=True``, coloured by bucket) or the table returned by
    ``select_learning_zone`` (its ``retained`` row is drawn as the last bar)."""
    colors = {"zero": "tab:red", "learning_zone": "tab:green", "mastered": "tab:blue",
              "retained": "tab:olive"}
    if ax is None:
        fig, ax = plt.subplots(figsize=(5.2, 3.2))
    else:
        fig = ax.figure
    if "n_correct" in table.columns:
        xs = [str(n) for n in table["n_correct"]]
        ax.set_xlabel("n_correct (of G)")
    else:
        xs = [f"{b}\n{r}" if b != "retained" else b
              for b, r in zip(table["bucket"], table["n_correct_range"])]
    bars = ax.bar(xs, table["count"], color=[colors.get(b, "tab:grey") for b in table["bucket"]])
    top = max(list(table["count"]) + [1])
    for b, c, s in zip(bars, table["count"], table["share"]):
        if "n_correct" in table.columns and c == 0:
            continue
        ax.text(b.get_x() + b.get_width() / 2, c + 0.01 * top, f"{int(c)}\n{s:.0%}" if s == s else f"{int(c)}",
                ha="center", fontsize=7 if "n_correct" in table.columns else 8)
    ax.set_ylim(0, top * 1.25)
    ax.set_ylabel("questions")
    ax.set_title(title, fontsize=10)
    if "n_correct" in table.columns:
        from matplotlib.patches import Patch

        ax.legend(handles=[Patch(color=colors[b], label=b) for b in ("zero", "learning_zone", "mastered")],
                  fontsize=7)
    fig.tight_layout()
    return fig


def plot_training_curves(frames: Mapping[str, "object"], keys: Sequence[str], title: str = "Training curves",
                         ncols: int = 3):
    """One panel per logged metric, one line per run. ``frames``: run name -> the DataFrame of
    ``TrainResult.steps_frame()`` (indexed by step). Metrics a run did not log are skipped."""
    keys = [k for k in keys if any(k in f.columns for f in frames.values())]
    if not keys:
        raise ValueError("none of the requested metrics were logged")
    nrows = (len(keys) + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(3.6 * ncols, 2.6 * nrows), squeeze=False)
    for ax, key in zip(axes.flat, keys):
        for name, f in frames.items():
            if key in f.columns:
                ax.plot(f.index, f[key], marker="o", markersize=3, label=name)
        ax.set_title(key, fontsize=9)
        ax.set_xlabel("step", fontsize=8)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(keys):]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    return fig


def plot_reward_validity(frames: Mapping[str, "object"], title: str = "Reward against the exact truth"):
    """The reward and the truth of the same completions per step (``truth/score``), and each
    reward's AUROC against the truth (``validity/<reward>/auroc``; 0.5: blind to it), one line
    per run (``train.validity``). ``frames`` as in ``plot_training_curves``; None when no run
    logged the truth (off the mini-world)."""
    keys = ["reward", TRUTH_KEY] + sorted({c for f in frames.values() for c in f.columns if c.startswith("validity/")})
    if not any(TRUTH_KEY in f.columns and f[TRUTH_KEY].notna().any() for f in frames.values()):
        return None
    return plot_training_curves(frames, keys, title)


def plot_latency_split(summaries: Mapping[str, Mapping[str, float]], title: str = "Per-sentence reward latency"):
    """Stacked bars of mean extraction and lookup milliseconds per sentence (000 §5.3)."""
    names = list(summaries)
    ext = [summaries[n].get("extract_ms_mean", 0.0) for n in names]
    look = [summaries[n].get("lookup_ms_mean", 0.0) for n in names]
    fig, ax = plt.subplots(figsize=(1.8 + 1.4 * len(names), 3.2))
    ax.bar(names, ext, label="extraction", color="tab:orange")
    ax.bar(names, look, bottom=ext, label="index lookup", color="tab:blue")
    for i, (e, lo) in enumerate(zip(ext, look)):
        ax.text(i, e + lo, f"{e + lo:.2f} ms", ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("ms per sentence")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_reward_comparison(discrimination, costs, title: str = "Rewards on the same responses"):
    """Left: mean reward on faithful vs perturbed responses per reward; right: judge calls
    and seconds per response (log scale). Inputs: ``eval.cost.reward_discrimination`` and
    the ``costs`` table of ``eval.cost.compare_rewards`` (rewards as rows)."""
    import numpy as np

    names = list(discrimination.index)
    x = np.arange(len(names))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.6))
    ax1.bar(x - 0.2, discrimination["faithful_mean"].astype(float), 0.4, label="faithful", color="tab:green")
    ax1.bar(x + 0.2, discrimination["perturbed_mean"].astype(float), 0.4, label="perturbed", color="tab:red")
    ax1.set_xticks(x, names, fontsize=8)
    ax1.set_ylim(0, 1.05)
    ax1.set_ylabel("mean reward")
    ax1.legend(fontsize=8)
    ax1.set_title("Faithful vs perturbed", fontsize=10)
    c = costs.loc[names]
    ax2.bar(x - 0.2, c["judge_calls"].astype(float), 0.4, label="judge calls / response", color="tab:blue")
    ax2.bar(x + 0.2, c["seconds"].astype(float), 0.4, label="seconds / response", color="tab:orange")
    ax2.set_yscale("log")
    ax2.set_xticks(x, names, fontsize=8)
    ax2.legend(fontsize=8)
    ax2.set_title("Cost per response", fontsize=10)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    return fig


def plot_grouped_bars(rows: Sequence[Mapping], x: str, hue: str, y: str, title: str = "", ylabel: str | None = None):
    """Grouped bars of ``y`` per ``x`` category, one bar per ``hue`` value (e.g. K2V's reward
    per constructed response, one bar per ablation). Labels wrap; values printed on bars."""
    frame = pd.DataFrame([{x: str(r[x]), hue: str(r[hue]), y: float(r[y])} for r in rows])
    xs = list(dict.fromkeys(frame[x]))
    fig, ax = plt.subplots(figsize=(2.0 + 1.6 * len(xs), 3.6))
    sns.barplot(frame, x=x, y=y, hue=hue, order=xs, errorbar=None, ax=ax)
    counts = all(float(v).is_integer() for v in frame[y])  # counts read 3, not 3.00
    for bars in ax.containers:
        ax.bar_label(bars, fmt="%d" if counts else "%.2f", fontsize=6)
    ax.set_xticks(range(len(xs)), wrap_labels(xs, 14), fontsize=8)
    ax.set_xlabel("")
    ax.set_ylabel(ylabel or y)
    ax.axhline(0, color="black", linewidth=0.6)
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, title=hue, title_fontsize=7)
    fig.tight_layout()
    return fig

"""The report's plots as inline SVG, drawn with matplotlib.

Why matplotlib: it renders on the machine that runs ``mlm-report`` to SVG
with glyphs drawn as paths (``svg.fonttype: path``), so the page needs no
font, no script and no network to show its plots, in any browser or offline
viewer, and the page stays small (a histogram is a few tens of KB).  An
interactive library (plotly, bokeh) would put megabytes of JavaScript in
every page, or fetch it.  matplotlib's Agg backend needs no display.
"""

from __future__ import annotations

import io

from common.lazy_import import LazyModule

plt = LazyModule("matplotlib.pyplot")

WIDTH, HEIGHT = 6.4, 2.8
COLOURS = {"train": "#1f77b4", "holdout": "#ff7f0e"}


def _setup():
    import matplotlib

    matplotlib.use("Agg", force=True)
    matplotlib.rcParams.update({"svg.fonttype": "path", "svg.hashsalt": "mlm-report", "font.size": 9,
                                "axes.spines.top": False, "axes.spines.right": False})


def _svg(figure) -> str:
    buffer = io.StringIO()
    figure.tight_layout()
    figure.savefig(buffer, format="svg", metadata={"Date": None})
    plt.close(figure)
    text = buffer.getvalue()
    return text[text.index("<svg"):]  # no XML prolog or doctype inside the HTML page


def histograms(distributions: dict[str, dict], xlabel: str, ylabel: str = "records", log_x: bool = False) -> str | None:
    """One step histogram per side, from the distributions' edges and counts (``log_x``: a base-2 x axis, for
    bins of powers of two)."""
    _setup()
    drawn = {side: d for side, d in distributions.items() if d and d.get("count")}
    if not drawn:
        return None
    figure, axes = plt.subplots(figsize=(WIDTH, HEIGHT))
    for side, distribution in drawn.items():
        histogram = distribution["histogram"]
        axes.stairs(histogram["counts"], histogram["edges"], label=side, color=COLOURS.get(side),
                    fill=len(drawn) == 1, alpha=0.8)
    if log_x:
        axes.set_xscale("log", base=2)
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    if len(drawn) > 1:
        axes.legend()
    return _svg(figure)


def bars(labels: list[str], values: list[float], xlabel: str, percent: bool = False) -> str | None:
    """Horizontal bars, the first label on top."""
    _setup()
    if not labels:
        return None
    figure, axes = plt.subplots(figsize=(WIDTH, max(1.2, 0.22 * len(labels) + 0.6)))
    positions = list(range(len(labels)))[::-1]
    axes.barh(positions, [v * 100 if percent else v for v in values], color=COLOURS["train"])
    axes.set_yticks(positions, labels)
    axes.set_xlabel(xlabel)
    return _svg(figure)


def lines(series: dict[str, list[float]], step: float, ylabel: str) -> str | None:
    """Rates over time: one line per series, x in seconds since the first task began."""
    _setup()
    if not series:
        return None
    figure, axes = plt.subplots(figsize=(WIDTH, HEIGHT))
    for name, values in series.items():
        axes.plot([(i + 0.5) * step for i in range(len(values))], values, label=name,
                  linewidth=2.0 if name == "all workers" else 1.0)
    axes.set_xlabel("seconds since the first task began")
    axes.set_ylabel(ylabel)
    if len(series) > 1:
        axes.legend(fontsize=7, ncol=2)
    return _svg(figure)

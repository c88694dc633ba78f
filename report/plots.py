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
import os
from functools import lru_cache

from common.lazy_import import LazyModule

plt = LazyModule("matplotlib.pyplot")

WIDTH, HEIGHT = 6.4, 2.8
COLOURS = {"train": "#1f77b4"}  # the training side's; a step's side has its own (``Side.colour``)
#: The line drawn over every other in the throughput plot.
OVERALL_COLOUR = "#000000"
#: Fonts a glyph is looked for in, in order (matplotlib falls back glyph by glyph): DejaVu Sans (matplotlib's own:
#: Latin, Greek, Cyrillic, symbols), then the CJK fonts Debian ships (fonts-noto-cjk, fonts-wqy-zenhei,
#: fonts-wqy-microhei, fonts-droid-fallback).  Without one, a Chinese token is drawn as an empty box.
FONT_FAMILIES = ("DejaVu Sans", "Noto Sans CJK SC", "Noto Sans CJK JP", "Source Han Sans SC", "WenQuanYi Zen Hei",
                 "WenQuanYi Micro Hei", "Droid Sans Fallback")
#: File names of those CJK fonts, to add ones installed after matplotlib cached its list of the system's fonts.
CJK_FONT_FILES = ("notosanscjk", "sourcehansans", "wqy-zenhei", "wqy-microhei", "droidsansfallback")


def require() -> None:
    """ImportError now if matplotlib is missing: ``mlm-report`` checks before it reads or writes anything, so a
    failed report leaves nothing behind (report.json without its page would look like a finished report)."""
    import matplotlib
    import matplotlib.pyplot  # noqa: F401


@lru_cache(maxsize=1)
def font_families() -> tuple[str, ...]:
    """The families of FONT_FAMILIES matplotlib can use.  matplotlib lists the system's fonts once and caches the
    list (~/.cache/matplotlib), so a CJK font installed later is unknown to it: such a font's file is added."""
    from matplotlib import font_manager

    def known() -> set[str]:
        return {font.name for font in font_manager.fontManager.ttflist}

    if not known() & set(FONT_FAMILIES[1:]):
        for path in font_manager.findSystemFonts():
            if any(part in os.path.basename(path).lower() for part in CJK_FONT_FILES):
                try:
                    font_manager.fontManager.addfont(path)
                except (OSError, RuntimeError, ValueError):  # a font file FreeType cannot read
                    continue
    found = known()
    return tuple(family for family in FONT_FAMILIES if family in found) or ("DejaVu Sans",)


def _setup():
    import matplotlib

    matplotlib.use("Agg", force=True)
    matplotlib.rcParams.update({"svg.fonttype": "path", "svg.hashsalt": "mlm-report", "font.size": 9,
                                "font.family": list(font_families()),
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
        axes.stairs(histogram["counts"], histogram["edges"], label=side, color=colour(side),
                    fill=len(drawn) == 1, alpha=0.8)
    if log_x:
        axes.set_xscale("log", base=2)
    axes.set_xlabel(xlabel)
    axes.set_ylabel(ylabel)
    if len(drawn) > 1:
        axes.legend()
    return _svg(figure)


def colour(side: str) -> str | None:
    """A side's colour: the training side's, a step's side's own (``Side.colour``), or None (matplotlib's next)."""
    from common.steps import side_named

    if side in COLOURS:
        return COLOURS[side]
    known = side_named(side)
    return known.colour or None if known is not None else None


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


def lines(series: dict[str, list[float]], step: float, ylabel: str, overall: str = "") -> str | None:
    """Rates over time: one line per series, x in seconds since the first task began.  The ``overall`` series
    is drawn last, above the others, black and dashed: with one worker its line equals that worker's, and each
    shows through the other's gaps."""
    _setup()
    if not series:
        return None
    figure, axes = plt.subplots(figsize=(WIDTH, HEIGHT))
    order = [name for name in series if name != overall] + [name for name in series if name == overall]
    for z, name in enumerate(order):
        values = series[name]
        if name == overall:
            style = {"linewidth": 2.0, "color": OVERALL_COLOUR, "zorder": 10, "linestyle": (0, (4, 3))}
        else:
            style = {"linewidth": 1.5, "zorder": 2 + z * 0.01}
        axes.plot([(i + 0.5) * step for i in range(len(values))], values, label=name, gid=f"series-{name}",
                  **style)
    axes.set_xlabel("seconds since the first task began")
    axes.set_ylabel(ylabel)
    axes.set_ylim(bottom=0)
    from matplotlib.ticker import StrMethodFormatter

    axes.yaxis.set_major_formatter(StrMethodFormatter("{x:,.0f}"))
    if len(series) > 1:
        handles, labels = axes.get_legend_handles_labels()
        first = [labels.index(overall)] if overall in labels else []
        keep = first + [i for i in range(len(labels)) if i not in first]
        axes.legend([handles[i] for i in keep], [labels[i] for i in keep], fontsize=7, ncol=2)
    return _svg(figure)


def shares(clock: list[int], series: dict[str, list[float]], targets: dict[str, list[float]],
           phase_starts: list[int]) -> str | None:
    """A mixture's shares over the clock: each source's realized share between consecutive clock values,
    stacked (they sum to 1), its target as a dashed step line at the stack's height, and each phase's start
    as a vertical line."""
    _setup()
    if not series or not clock:
        return None
    import numpy as np

    figure, axes = plt.subplots(figsize=(WIDTH, HEIGHT))
    names = list(series)
    realized = np.asarray([series[name] for name in names])
    axes.stackplot(clock, realized, labels=names, alpha=0.75, step="pre", gid="mixture-shares")
    if targets:
        top = np.cumsum(np.asarray([targets[name] for name in names]), axis=0)
        for row in top[:-1]:
            axes.step(clock, row, where="pre", color="#000000", linewidth=0.8, linestyle=(0, (4, 3)))
    for start in phase_starts:
        axes.axvline(start, color="#d62728", linewidth=1.2, gid="phase-start")
    axes.set_xlabel("tokens served (the mixture's clock)")
    axes.set_ylabel("share of tokens")
    axes.set_ylim(0, 1)
    axes.set_xlim(0, clock[-1])
    axes.legend(fontsize=7, ncol=min(4, len(names)), loc="upper right")
    return _svg(figure)

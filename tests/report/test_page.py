"""mlm-report's page as people see it: CJK glyphs from a CJK font, a throughput curve without spikes, the
overall line on top, the cost table and [UNK] texts readable, and no half-written report without matplotlib.
Pure rendering: a report built from an empty output, with the parts under test filled in."""

from __future__ import annotations

import re
import subprocess
import sys
import warnings

import pytest

from common.storage import LocalStorage
from report import plots, stats
from report.build import build_report
from report.page import render
from tests.support.helpers import REPO

pytest.importorskip("matplotlib")

CHINESE = ["的", "中国", "学习", "語言", "한국어", "ひらがな"]


def glyph_fonts(svg: str) -> set[str]:
    """The fonts an SVG's glyphs come from (matplotlib names each glyph path FONT-GLYPH)."""
    return {m.rsplit("-", 1)[0] for m in re.findall(r'<path id="([A-Za-z][\w-]*-[0-9a-f]+)"', svg)}


def draw_without_missing_glyphs() -> str:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        svg = plots.bars(CHINESE + ["the", "##ing"], [0.3, 0.2, 0.1, 0.1, 0.05, 0.05, 0.1, 0.1], "% of text tokens",
                         percent=True)
    missing = [str(w.message) for w in caught if "missing from font" in str(w.message)]
    assert not missing, f"{missing[:3]}: is Debian's fonts-noto-cjk installed (.ci/run installs it)?"
    return svg


def test_cjk_tokens_are_drawn_from_a_cjk_font():
    """Debian's fonts-noto-cjk (.ci/run installs it): the Han, Kana and Hangul labels are drawn from it, not as
    matplotlib's last-resort empty boxes."""
    svg = draw_without_missing_glyphs()
    fonts = glyph_fonts(svg)
    assert not any("LastResort" in f for f in fonts), fonts
    assert any("CJK" in f or "WenQuanYi" in f or "DroidSansFallback" in f for f in fonts), fonts
    assert "DejaVuSans" in fonts  # Latin still from matplotlib's own font


def test_a_cjk_font_installed_after_matplotlib_listed_the_fonts_is_found():
    """matplotlib caches its list of the system's fonts: one installed later is unknown to it until the report
    adds its file."""
    from matplotlib import font_manager

    manager = font_manager.fontManager
    kept = list(manager.ttflist)
    manager.ttflist = [f for f in kept if not any(p in f.fname.lower() for p in plots.CJK_FONT_FILES)]
    plots.font_families.cache_clear()
    try:
        assert set(plots.font_families()) & set(plots.FONT_FAMILIES[1:])
        draw_without_missing_glyphs()
    finally:
        manager.ttflist = kept
        plots.font_families.cache_clear()


def task(worker: str, begin: float, seconds: float, tokens: int) -> dict:
    return {"task": f"{worker}-{begin}", "worker": worker, "at": begin + seconds + 0.05, "seconds": seconds,
            "tokens": tokens, "bytes_in": 1000}


def test_the_throughput_of_a_short_steady_job_is_flat():
    """Two workers, each busy the whole run on tasks of 1 s: the rate is steady, so no bin is empty and none
    spikes (counted where each task ended, 30 bins over 10 s held 20 ends: zeros and 3x spikes)."""
    entries = [task(w, 1000.0 + i, 1.0, 1000) for w in ("a", "b") for i in range(10)]
    curve = stats.throughput(entries)
    rates = curve["tokens_per_second"]
    assert curve["seconds"] == pytest.approx(10.0)
    assert min(rates) > 0.9 * 2000 and max(rates) < 1.1 * 2000, rates
    assert all(min(w["rate"]) > 0.9 * 1000 for w in curve["workers"].values())
    few = stats.throughput([task("a", 1000.0 + 2 * i, 2.0, 1000) for i in range(3)])
    assert len(few["tokens_per_second"]) == stats.MIN_BINS  # three tasks: not 30 bins
    assert min(few["tokens_per_second"]) > 0.9 * 500, few["tokens_per_second"]


def page_of(**parts) -> str:
    report = build_report(LocalStorage(str(REPO / "tests" / "data" / "no-such-output")), input_budget_bytes=0)
    report.update(parts)
    return render(report)


def test_the_overall_line_is_drawn_over_every_worker():
    """With one worker the two lines are equal: the overall one is drawn last (above), black and dashed."""
    entries = [task("only", 1000.0 + i, 1.0, 1000) for i in range(6)]
    page = page_of(throughput=stats.throughput(entries))
    overall, worker = page.index('id="series-all workers"'), page.index('id="series-only"')
    assert worker < overall
    line = page[overall:page.index("</g>", overall)]
    assert "stroke: #000000" in line and "stroke-dasharray" in line


def test_the_cost_table_is_rounded_and_says_what_is_unknown():
    cost = {"worker_cpu_hours": 0.0123456789, "instance_hours": 0.034567891, "worker_hosts": 1,
            "input_gb": 0.000251234, "output_tokens": 123456, "output_tokens_without_padding": 99999,
            "instance_hourly_price": None, "cost": None, "cost_per_billion_output_tokens": None}
    page = page_of(cost=cost)
    table = page[page.index("<h2>Cost</h2>"):page.index("<h2>How this output")]
    assert "None" not in table and "0.0123456789" not in table
    assert "<td>0.03457</td>" in table and "<td>123,456</td>" in table and "<td>–</td>" in table
    assert "--instance-hourly-price" in table
    priced = page_of(cost={**cost, "instance_hourly_price": 0.5, "cost": 0.017283945})
    assert "<td>$0.0173</td>" in priced and "<td>$0.5000</td>" in priced


def test_text_that_became_unk_is_given_by_code_points():
    unknown = {"input_bytes_read": 1000, "tasks_read": 1, "tokens": 10, "unk": 3, "rate": 0.3,
               "by_script": [{"script": "Runic", "tokens": 3, "unk": 3, "rate": 1.0}],
               "top_unk_texts": [{"text": "ᚠᚢᚦ", "count": 2}, {"text": "\u200b🦜", "count": 1}]}
    page = page_of(unknown_text=unknown)
    assert "<code>U+16A0 U+16A2 U+16A6</code>" in page and "<code>U+200B U+1F99C</code>" in page


def test_without_matplotlib_nothing_is_written(tmp_path):
    """It exits 1 with one line and writes nothing: a report.json without its page would pass for a report."""
    blocker = tmp_path / "blocked"
    (blocker / "matplotlib").mkdir(parents=True)
    (blocker / "matplotlib" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'matplotlib'\", name='matplotlib')\n")
    output = tmp_path / "out"
    output.mkdir()
    made = subprocess.run([sys.executable, "-m", "report", str(output), "--input-sample", "0"], cwd=REPO,
                          capture_output=True, text=True, timeout=120,
                          env={"PYTHONPATH": f"{blocker}:{REPO}", "PATH": "/usr/bin:/bin"})
    assert made.returncode == 1
    assert made.stderr.strip().splitlines() == [
        "mlm-report: error: matplotlib is not installed: pip install 'mlm-pipeline[report]'"], made.stderr
    assert list(output.iterdir()) == []


def test_a_mixture_section_shows_each_phases_shares_and_a_plot_with_the_boundary():
    """The Mixture section: a row per phase and source with target and realized shares, and the shares over
    the clock stacked, with the phase's start drawn; no section without a mixture."""
    import numpy as np

    from loader.mixture import MixPlan, PhaseSpec, SourceTokens
    from report.mixture import describe_mixture

    sources = [SourceTokens(np.asarray([n], dtype=np.int64), i, None, 128) for i, n in enumerate((76, 430, 4300))]
    plan = MixPlan(sources, [PhaseSpec(weights=(0.0, 0.4, 0.6)), PhaseSpec(at_tokens=1_000_000, temperature=0.3)],
                   seed=0, window=64)
    mixture = describe_mixture(plan, ["web", "code", "wiki"], 2_000_000)
    assert [p["from_tokens"] for p in mixture["phases"]] == [0, 1_000_000]
    page = page_of(mixture=mixture)
    section = page[page.index("<h2 id=mixture>Mixture</h2>"):page.index("<h2>Cost</h2>")]
    assert section.count("<tr>") == 1 + 2 * 3
    joined = mixture["phases"][1]["sources"]["web"]
    assert f"<td>web</td><td>{joined['target'] * 100:.2f}%</td><td>{joined['realized'] * 100:.2f}%</td>" in section
    assert "<td>web</td><td>0.00%</td><td>0.00%</td>" in section  # not served before it joins
    assert section.count('id="phase-start') == 1 and "<svg" in section
    assert "id=mixture" not in page_of()

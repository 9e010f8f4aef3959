"""The generated pages in a real browser: headless Chromium opens each from a local file;
the page logs no console error, its plots and their traces exist and are drawn, hovering a span
shows its details, and a screenshot is not blank.

Skips when Chromium is absent (``.ci/run`` installs the Debian package ``chromium``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from support.browser import Browser, BrowserError, Page, find_chromium

from specmd_sim.report import RunData
from specmd_sim.report.compare import write_compare
from specmd_sim.report.rows import load_rows, plan
from specmd_sim.report.run_report import write_run_report

pytestmark = pytest.mark.skipif(find_chromium() is None, reason="Chromium is not installed")


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with Browser(width=1300, height=900) as b:
        yield b


@pytest.fixture(scope="module")
def pages(timed_dir: Path, replay_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("pages")
    write_run_report(RunData.load(timed_dir), out / "report.html")
    rows = load_rows([timed_dir, replay_dir])
    write_compare(plan(rows), out / "compare.html", [str(timed_dir), str(replay_dir)])
    return {
        "timeline": timed_dir / "timeline.html",
        "report": out / "report.html",
        "compare": out / "compare.html",
    }


def test_the_error_collector_sees_errors(browser: Browser, tmp_path: Path) -> None:
    """A control: a page with a failing script and a console error is caught."""
    page_file = tmp_path / "bad.html"
    page_file.write_text(
        "<html><body><script>console.error('broken');</script>"
        "<script>undefinedFunction();</script></body></html>"
    )
    errors = browser.open(page_file).errors
    assert any("broken" in e for e in errors) and any("undefinedFunction" in e for e in errors)


@pytest.fixture(scope="module")
def opened(browser: Browser, pages: dict[str, Path]) -> Callable[[str], tuple[Page, list]]:
    """``opened(name)``: the page opened once (loading plotly.js takes seconds) and its plots."""
    cache: dict[str, tuple[Page, list]] = {}

    def get(name: str) -> tuple[Page, list]:
        if name not in cache:
            page = browser.open(pages[name])
            cache[name] = (page, page.plots())
        return cache[name]

    return get


@pytest.mark.parametrize(("name", "figures"), [("timeline", 2), ("report", 5), ("compare", 1)])
def test_page_opens_without_errors_and_draws_its_plots(
    browser: Browser, opened: Callable, name: str, figures: int, tmp_path: Path
) -> None:
    page, plots = opened(name)
    assert len(plots) >= figures, plots
    for plot in plots:
        assert plot["traces"] > 0 and plot["drawn"] == plot["traces"], plot
        assert plot["points"] > 0, plot
    assert page.errors == []
    png = page.screenshot(tmp_path / f"{name}.png", selector="#fig-1")
    stats = browser.image_stats(png)
    assert stats["width"] > 600 and stats["height"] > 200
    assert stats["colours"] > 30, stats
    assert stats["foreground"] > 0.05, stats


def test_timeline_hover_shows_the_span(opened: Callable) -> None:
    page, _ = opened("timeline")
    index = page.evaluate(
        "document.getElementById('fig-1').data.findIndex(t => t.name === 'demand fetch')"
    )
    assert index >= 0
    text = page.evaluate(
        f"(() => {{ Plotly.Fx.hover('fig-1', [{{curveNumber: {index}, pointNumber: 0}}]); "
        "return document.querySelector('#fig-1 .hoverlayer').textContent; })()"
    )
    for field in (
        "demand fetch",
        "pass",
        "request",
        "step",
        "layer",
        "expert",
        "MiB",
        "serves",
    ):  # fmt: skip (step: the run prefills each prompt in one pass)
        assert field in text, (field, text)
    assert page.errors == []


def test_timeline_says_what_it_aggregates(opened: Callable) -> None:
    page, _ = opened("timeline")
    subtitle = page.evaluate("document.getElementById('fig-1').layout.title.subtitle.text")
    assert "drawn one by one" in subtitle and "summarised in" in subtitle
    layout = json.loads(
        page.evaluate("JSON.stringify(document.getElementById('fig-1').layout.yaxis.ticktext)")
    )
    assert layout[:3] == ["requests", "passes", "gpu0/compute"]


def test_the_page_clock_sees_every_plot_drawn(
    browser: Browser, pages: dict[str, Path], tmp_path: Path
) -> None:
    """The benchmark's load time (``Browser.drawn_in``): the page's clock when its last plot is
    drawn, after the page began and after plotly.js ran (a page without figures never ends)."""
    seconds = browser.drawn_in(pages["timeline"])
    assert 0.0 < seconds < 60.0
    empty = tmp_path / "empty.html"
    empty.write_text("<html><body><p>no figure</p></body></html>")
    with pytest.raises(BrowserError, match="timed out"):
        browser.drawn_in(empty, timeout_s=0.5)

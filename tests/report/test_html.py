"""The plotly.js the pages inline: the vendored basic bundle is what its README says it is, it
is used where the installed plotly's plotly.js has its major version and not elsewhere (said),
and a figure of a trace type the bundle lacks is refused where the page is built."""

from __future__ import annotations

import hashlib
import re
import warnings

import plotly.graph_objects as go
import pytest

from specmd_sim.errors import Notice
from specmd_sim.report import html

ASSETS = html.BASIC_PLOTLY_JS.parent


def test_the_vendored_bundle_is_the_one_its_readme_names() -> None:
    readme = (ASSETS / "README.md").read_text()
    js = html.BASIC_PLOTLY_JS.read_bytes()
    stated_version = re.search(r"version (\d+\.\d+\.\d+)", readme)
    stated_sum = re.search(r"sha256\s+`([0-9a-f]{64})`", readme)
    assert stated_version and stated_sum, "the README states the version and the checksum"
    assert html.bundle_version(js.decode()) == stated_version.group(1)
    assert hashlib.sha256(js).hexdigest() == stated_sum.group(1)
    assert "(basic - minified)" in js[:200].decode()
    assert "MIT License" in (ASSETS / "plotly-LICENSE").read_text()


def test_the_basic_bundle_is_inlined_where_the_major_versions_agree(monkeypatch) -> None:
    basic = html.BASIC_PLOTLY_JS.read_text()
    major = html.bundle_version(basic).split(".")[0]
    monkeypatch.setattr(html, "get_plotlyjs_version", lambda: f"{major}.99.0")
    with warnings.catch_warnings():
        warnings.simplefilter("error", Notice)
        assert html.plotly_js_source() == basic


def test_another_major_version_inlines_the_full_plotly_js_and_says_so(monkeypatch) -> None:
    monkeypatch.setattr(html, "get_plotlyjs_version", lambda: "2.35.2")
    monkeypatch.setattr(html, "get_plotlyjs", lambda: "/* the package's plotly.js */")
    with pytest.warns(Notice, match=r"full plotly\.js 2\.35\.2 .* basic bundle .*\(4\.1\.1\)"):
        assert html.plotly_js_source() == "/* the package's plotly.js */"


def test_the_version_is_read_from_the_bundles_header() -> None:
    assert html.bundle_version("/**\n* plotly.js v2.35.2\n* Copyright") == "2.35.2"
    assert html.bundle_version("/**\n* plotly.js (basic - minified) v4.1.1\n*") == "4.1.1"
    with pytest.raises(ValueError, match="no version"):
        html.bundle_version("var x = 1;")


def test_a_figure_the_basic_bundle_cannot_draw_is_refused() -> None:
    html.figure_div(go.Figure([go.Scatter(y=[1]), go.Bar(y=[2]), go.Pie(values=[1])]), "ok")
    with pytest.raises(ValueError, match=r"\['heatmap'\] are not in plotly\.js's basic"):
        html.figure_div(go.Figure([go.Scatter(y=[1]), go.Heatmap(z=[[1]])]), "fig-1")

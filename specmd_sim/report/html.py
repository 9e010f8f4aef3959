"""Self-contained HTML pages holding several plotly figures, tables and text.

plotly.js is inlined once per page, so a page opens offline and from a local file: plotly's
*basic* bundle (scatter and bar traces, all the pages draw; ``assets/``, 1.2 MB), which a
browser parses in a quarter of the time of the full 4.8 MB one the plotly package carries (a
4,000-token timeline opens and draws in ~1.0 s instead of ~1.8 s in headless Chromium,
``benchmarks/outputs_size.py``). Where the installed plotly's own plotly.js is of another major
version than the bundle, its figures may use what the bundle does not know, so the page inlines
the full plotly.js and says so (a :class:`~specmd_sim.errors.Notice`). It and each figure's JSON
are inlined gzipped (base64 in a ``<script type="application/gzip">``) and inflated by the
browser's own ``DecompressionStream`` as the page loads (every current browser: Chrome 80,
Firefox 113, Safari 16.4): a page is ~3x smaller than its text, and reading the smaller file is
faster than the inflating costs. Figure containers get fixed ids (``fig-<n>``) and the gzip
headers no time, so the same figures give the same bytes.
"""

from __future__ import annotations

import base64
import functools
import html
import json
import re
import warnings
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio
from plotly.offline import get_plotlyjs, get_plotlyjs_version

from specmd_sim import gz
from specmd_sim.atomic import write_text
from specmd_sim.errors import Notice
from specmd_sim.report.spec import Spec, spec_json

PLOT_CONFIG: dict[str, Any] = {
    "displaylogo": False,
    "responsive": True,
    "modeBarButtonsToRemove": ["select2d", "lasso2d"],
    "toImageButtonOptions": {"format": "png", "scale": 2},
}

_CSS = """
body { font-family: Inter, 'Segoe UI', Helvetica, Arial, sans-serif; margin: 0; color: #222;
       background: #FAFAFA; }
main { max-width: 1500px; margin: 0 auto; padding: 16px 28px 48px; }
h1 { font-size: 22px; margin: 12px 0 4px; }
h2 { font-size: 17px; margin: 28px 0 6px; border-bottom: 1px solid #DDD; padding-bottom: 4px; }
p, li { font-size: 14px; line-height: 1.5; max-width: 110ch; }
.sub { color: #666; font-size: 13px; margin: 0 0 8px; }
.fig { background: #FFF; border: 1px solid #E5E5E5; border-radius: 6px; margin: 10px 0; }
table { border-collapse: collapse; font-size: 13px; margin: 8px 0; background: #FFF; }
th, td { border: 1px solid #E0E0E0; padding: 4px 9px; text-align: left; }
th { background: #F2F2F2; font-weight: 600; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
.cards { display: flex; flex-wrap: wrap; gap: 10px; margin: 10px 0; }
.card { background: #FFF; border: 1px solid #E5E5E5; border-radius: 6px; padding: 8px 14px;
        min-width: 120px; }
.card .v { font-size: 20px; font-weight: 600; }
.card .k { font-size: 12px; color: #666; }
.note { color: #8A5A00; }
footer { color: #888; font-size: 12px; margin-top: 32px; }
"""


PACKED_LEVEL = {"zlib-ng": 2, "zlib": 1}
"""The deflate level of a page's packed data by compressor (:func:`specmd_sim.gz.compressor`):
the default run's timeline figure at 4,000 tokens (2.4 MB of JSON) to 0.71 MB in 9 ms by
zlib-ng at 2, to 0.72 MB in 16 ms by zlib at 1 (zlib at 6 saves a tenth of the bytes in 2.5x
the time; 2 cores, 2026-12-07)."""
_LOADER = """<script>
const specmdInflate = id => fetch("data:application/gzip;base64,"
  + document.getElementById(id).textContent).then(packed => new Response(
  packed.body.pipeThrough(new DecompressionStream("gzip"))).text());
const specmdPlotly = specmdInflate("plotly-js").then(js => {
  const script = document.createElement("script");
  script.textContent = js;
  document.head.appendChild(script);
});
function specmdPlot(id, config) {
  return Promise.all([specmdPlotly, specmdInflate(id + "-data")]).then(([, text]) => {
    const fig = JSON.parse(text);
    return Plotly.newPlot(id, fig.data, fig.layout, config);
  });
}
</script>"""


def _packed(element_id: str, data: bytes) -> str:
    """``data`` gzipped, as base64 in a script element the loader inflates by its id."""
    packed = base64.b64encode(gz.gzip_bytes(data, PACKED_LEVEL)).decode()
    return f'<script type="application/gzip" id="{element_id}">{packed}</script>'


BASIC_PLOTLY_JS = Path(__file__).parent / "assets" / "plotly-basic.min.js"
BASIC_TRACE_TYPES = frozenset({"scatter", "bar", "pie"})  # what the basic bundle draws


def bundle_version(js: str) -> str:
    """The version a plotly.js bundle states in its first comment ("plotly.js ... v4.1.1")."""
    found = re.search(r"plotly\.js[^\n]*? v(\d+\.\d+\.\d+)", js[:300])
    if found is None:
        raise ValueError("not a plotly.js bundle: no version in its header")
    return found.group(1)


def plotly_js_source() -> str:
    """The plotly.js the pages inline: the basic bundle where the installed plotly's plotly.js
    has its major version, else (said once a process) that full plotly.js."""
    basic = BASIC_PLOTLY_JS.read_text()
    ours, theirs = bundle_version(basic), get_plotlyjs_version()
    if ours.split(".")[0] == theirs.split(".")[0]:
        return basic
    warnings.warn(
        f"pages inline the full plotly.js {theirs} (4.8 MB, ~0.7 s slower to open): the "
        f"installed plotly's plotly.js is not of the major version of the basic bundle "
        f"specmd-sim carries ({ours})",
        Notice,
        stacklevel=2,
    )
    return get_plotlyjs()


@functools.cache
def _plotly_js() -> str:
    """plotly.js, packed (once a process: every page holds the same)."""
    return _packed("plotly-js", plotly_js_source().encode())


@dataclass
class Block:
    """A section: heading, a paragraph of plain text, figures, then raw HTML (tables)."""

    heading: str
    text: str = ""
    figures: go.Figure | Spec | list[go.Figure | Spec] | None = None
    html: str = ""


def write_page(path: Path, title: str, blocks: list[Block], subtitle_html: str = "") -> None:
    """Write one self-contained page (atomically)."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title>",
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<style>{_CSS}</style>",
        _plotly_js(),
        _LOADER,  # (after the packed plotly.js it reads)
        "</head><body><main>",
        f"<h1>{html.escape(title)}</h1>",
    ]
    if subtitle_html:
        parts.append(f'<p class="sub">{subtitle_html}</p>')
    n = 0
    for block in blocks:
        parts.append(f"<section><h2>{html.escape(block.heading)}</h2>")
        if block.text:
            parts.append(f"<p>{html.escape(block.text)}</p>")
        figures = block.figures if isinstance(block.figures, list) else [block.figures]
        for fig in figures:
            if fig is None:
                continue
            n += 1
            parts.append(f'<div class="fig">{figure_div(fig, f"fig-{n}")}</div>')
        parts.append(block.html)
        parts.append("</section>")
    parts.append(f"<footer>specmd-sim {version('specmd-sim')}</footer></main></body></html>")
    write_text(path, "\n".join(parts), "page")


def figure_div(fig: go.Figure | Spec, div_id: str) -> str:
    """The figure (or its spec, :mod:`~specmd_sim.report.spec`) as a ``<div>``, its JSON
    packed (:func:`_packed`) and the script that draws it once plotly.js and the JSON are
    inflated (plotly.js not included: the page's)."""
    if isinstance(fig, dict):
        types = {t["type"] for t in fig["data"]}
        height = fig["layout"].get("height")
        text = spec_json(fig)
    else:
        types = {trace.type for trace in fig.data}
        height = fig.layout.height
        text = pio.to_json(fig, validate=False, remove_uids=True)
    other = types - BASIC_TRACE_TYPES
    if other:  # a page's plotly.js may be the basic bundle, which would draw nothing of them
        raise ValueError(f"trace types {sorted(other)} are not in plotly.js's basic bundle")
    style = f"height:{height}px; width:100%;" if height else "height:100%; width:100%;"
    config = json.dumps(PLOT_CONFIG, sort_keys=True)
    return (
        f'<div id="{div_id}" class="plotly-graph-div" style="{style}"></div>'
        f"{_packed(f'{div_id}-data', text.encode())}"
        f'<script>specmdPlot("{div_id}", {config});</script>'
    )


def table_html(
    header: list[str], rows: list[list[Any]], numeric: tuple[int, ...] | None = None
) -> str:
    """A plain HTML table; cells are escaped. Columns in ``numeric`` (default: all but the
    first) are right-aligned."""
    numeric = tuple(range(1, len(header))) if numeric is None else numeric

    def cls(i: int) -> str:
        return ' class="num"' if i in numeric else ""

    head = "".join(f"<th{cls(i)}>{html.escape(str(h))}</th>" for i, h in enumerate(header))
    body = "".join(
        "<tr>"
        + "".join(f"<td{cls(i)}>{html.escape(str(c))}</td>" for i, c in enumerate(row))
        + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def cards_html(items: list[tuple[str, str]]) -> str:
    """Headline numbers as cards: (label, value)."""
    cells = "".join(
        f'<div class="card"><div class="v">{html.escape(v)}</div>'
        f'<div class="k">{html.escape(k)}</div></div>'
        for k, v in items
    )
    return f'<div class="cards">{cells}</div>'

"""Figures and HTML reports (plotly). The only package that imports plotly.

Pages (``docs/timelines.md`` shows each):

- :mod:`~specmd_sim.report.timeline` — the per-resource timeline; writes ``timeline.html``
- :mod:`~specmd_sim.report.layers` — the per-layer view (the second figure of that page)
- :mod:`~specmd_sim.report.run_report` — ``specmd report``: one run
- :mod:`~specmd_sim.report.compare` — ``specmd compare``: runs and sweeps side by side

What they are built from:

- :mod:`~specmd_sim.report.run_data` — a run as the pages see it (``result.json`` + spans)
- :mod:`~specmd_sim.report.rows` — result rows of run and sweep folders, and what varies
- :mod:`~specmd_sim.report.analysis` — stall and TTFT breakdowns from the spans and the
  engine's per-request table (numpy)
- :mod:`~specmd_sim.report.lod` — what a figure draws exactly and what it aggregates
- :mod:`~specmd_sim.report.bars` — the bar traces and markers the timeline views share
- :mod:`~specmd_sim.report.spec` — figures as plotly's JSON (the timeline views: no plotly
  objects), written as plotly writes them
- :mod:`~specmd_sim.report.style` — colours, labels and the common layout
- :mod:`~specmd_sim.report.html` — self-contained pages of figures and tables
- :mod:`~specmd_sim.report.images` — optional PNG/SVG export (kaleido)

The browser checks of these pages (headless Chromium over the DevTools pipe) are a test helper,
``tests/support/browser.py``, not part of the package.
"""

from specmd_sim.report.layers import layer_figure
from specmd_sim.report.run_data import RunData
from specmd_sim.report.timeline import timeline_figure, write_timeline

__all__ = ["RunData", "layer_figure", "timeline_figure", "write_timeline"]

"""Figures and HTML reports (plotly). The only package that imports plotly."""

from specmd_sim.report.timeline import timeline_figure, write_timeline_html

__all__ = ["timeline_figure", "write_timeline_html"]

"""Figures as plotly's JSON (plain dicts and numpy arrays), for the figures a run draws.

A :class:`plotly.graph_objects.Figure` validates and copies every property as it is set, and
its template (``plotly_white``, ~1,000 properties of every trace type) is built into objects
and deep-copied into each figure: a fresh process drawing a 4,000-token run's timeline page
spent ~0.27 s of its ~0.6 s there, holding the GIL the run folder's other writers need. The
timeline views (:mod:`~specmd_sim.report.timeline`, :mod:`~specmd_sim.report.layers`) are
therefore built as a *spec*: the dict plotly's ``Figure.to_dict()`` would give, ``{"data":
[trace, ...], "layout": {...}}``, each trace with its ``"type"``, nested properties as nested
dicts, arrays as numpy arrays, the layout's ``"template"`` by name. :func:`spec_json` writes it
as plotly writes a figure: the template as plotly loads it (its JSON from plotly's package
data), numeric arrays as base64 typed arrays (plotly's own ``convert_to_base64``), the same
encoder. :func:`to_figure` makes it a ``go.Figure`` for whoever wants one (images, users); the
tests check that plotly's validation leaves every spec's JSON unchanged, so a spec is what the
figure would be. :func:`grid` lays out subplots as ``plotly.subplots.make_subplots`` does.
"""

from __future__ import annotations

import functools
import json
import pkgutil
from collections.abc import Sequence
from typing import Any

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
from _plotly_utils.utils import convert_to_base64

Spec = dict[str, Any]
"""A figure as plotly's JSON: ``{"data": [...], "layout": {...}}`` (see the module)."""


def to_figure(spec: Spec) -> go.Figure:
    """``spec`` as a plotly figure (validated by plotly)."""
    return go.Figure(spec)


def spec_json(spec: Spec) -> str:
    """``spec`` as plotly's ``to_json(go.Figure(spec), validate=False, remove_uids=True)``
    writes it, without building the figure: its template by name expanded as plotly loads
    it, numeric arrays as base64 typed arrays."""
    out = _containers(spec)
    layout = out.setdefault("layout", {})
    if isinstance(layout.get("template"), str):
        layout["template"] = template(layout["template"])
    convert_to_base64(out)  # (in place: ``out``'s containers are copies)
    return pio.to_json(out, validate=False)


def _containers(value: Any) -> Any:
    """``value`` with its dicts, lists and tuples copied (the leaves shared)."""
    if isinstance(value, dict):
        return {k: _containers(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_containers(v) for v in value]
    return value


@functools.cache
def _template_text(name: str) -> str:
    try:
        data = pkgutil.get_data("plotly", f"package_data/templates/{name}.json")
    except FileNotFoundError:
        data = None
    if data is None:
        raise ValueError(f"template: expected one of plotly's templates, got {name!r}")
    return data.decode("utf-8")


def template(name: str) -> dict[str, Any]:
    """plotly's template ``name`` as JSON, read as plotly reads it (``plotly.io.templates``:
    its package data, once a process)."""
    return json.loads(_template_text(name))


def grid(
    rows: int = 1,
    cols: int = 1,
    *,
    shared_xaxes: bool = False,
    shared_yaxes: bool = False,
    row_heights: Sequence[float] | None = None,
    column_widths: Sequence[float] | None = None,
    vertical_spacing: float | None = None,
    horizontal_spacing: float | None = None,
    subplot_titles: Sequence[str] | None = None,
) -> dict[str, Any]:
    """The layout ``plotly.subplots.make_subplots`` gives a ``rows`` x ``cols`` grid of xy
    subplots (its defaults; the first row at the top), as the same floats: each subplot's
    axes (``xaxis``, ``yaxis``, then ``xaxis2``... row by row), shared axes matching the
    bottom x axis of their column and the first y axis of their row (their tick labels
    hidden), and the subplot titles as annotations (plotly 5-7's ``_subplots.py``)."""
    h_space = 0.2 / cols if horizontal_spacing is None else horizontal_spacing
    v_space = (0.3 if subplot_titles is None else 0.5) / rows
    v_space = v_space if vertical_spacing is None else vertical_spacing
    free_w, free_h = 1.0 - h_space * (cols - 1), 1.0 - v_space * (rows - 1)
    if column_widths is None:
        widths = [free_w / cols] * cols
    else:
        total = float(sum(column_widths))
        widths = [free_w * (w / total) for w in column_widths]
    if row_heights is None:
        heights = [free_h / rows] * rows
    else:
        total = float(sum(row_heights))
        heights = list(reversed([free_h * (h / total) for h in row_heights]))
    layout: dict[str, Any] = {}
    domains = []
    for r in range(rows):  # (row 0 at the top: plotly's "top-left" start cell)
        below = rows - 1 - r
        y0 = sum(heights[:below]) + below * v_space
        y = [_clip(y0), _clip(y0 + heights[-1 - r])]
        for c in range(cols):
            x0 = sum(widths[:c]) + c * h_space
            k = _suffix(r * cols + c + 1)
            x = [x0, x0 + widths[c]]  # (plotly's validation clips it; its titles do not)
            layout[f"xaxis{k}"] = {"anchor": f"y{k}", "domain": [_clip(v) for v in x]}
            layout[f"yaxis{k}"] = {"anchor": f"x{k}", "domain": y}
            domains.append((x, y))
    if shared_xaxes:
        for c in range(cols):
            first = f"x{_suffix((rows - 1) * cols + c + 1)}"
            for r in range(rows - 2, -1, -1):
                layout[f"xaxis{_suffix(r * cols + c + 1)}"].update(
                    matches=first, showticklabels=False
                )
    if shared_yaxes:
        for r in range(rows):
            first = f"y{_suffix(r * cols + 1)}"
            for c in range(1, cols):
                layout[f"yaxis{_suffix(r * cols + c + 1)}"].update(
                    matches=first, showticklabels=False
                )
    titles = [
        {
            "y": y[1],
            "xref": "paper",
            "x": sum(x) / 2.0,
            "yref": "paper",
            "text": text,
            "showarrow": False,
            "font": {"size": 16},
            "xanchor": "center",
            "yanchor": "bottom",
        }
        for text, (x, y) in zip(subplot_titles or (), domains, strict=False)
        if text
    ]
    if titles:
        layout["annotations"] = titles
    return layout


def _clip(y: float) -> float:
    """A domain's bound as plotly rounds it: within 0.01 outside [0, 1], to 0 or 1."""
    return min(max(y, 0.0), 1.0)


def _suffix(k: int) -> str:
    """The axis number of subplot ``k`` (counted from 1) as plotly names it: none for 1."""
    return "" if k == 1 else str(k)


def axes(layout: dict[str, Any], which: str, row: int | None = None, **props: Any) -> None:
    """``fig.update_xaxes`` / ``update_yaxes`` (``which`` "x" or "y") on a spec's layout made
    by :func:`grid` with one column (``row`` counted from 1; None: every such axis): nested
    properties as dicts, merged into what is there."""
    names = sorted(k for k in layout if k.startswith(f"{which}axis"))
    if row is not None:
        names = [f"{which}axis{_suffix(row)}"]
    for name in names:
        merge(layout.setdefault(name, {}), props)


def merge(into: dict[str, Any], props: dict[str, Any]) -> None:
    """``props`` merged into ``into`` as plotly's ``update`` does: dicts into dicts, anything
    else replaced."""
    for key, value in props.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            merge(into[key], value)
        else:
            into[key] = value


_LISTS = frozenset({"base"})
"""Trace properties plotly validates as *any* value (a bar's ``base``): it keeps an array of
them as a list, which its JSON writes as numbers, not as a base64 typed array."""


def trace(kind: str, **props: Any) -> dict[str, Any]:
    """A trace of type ``kind`` (``"bar"``, ``"scatter"``), as ``go.<Kind>(**props)`` sets it:
    properties left None are not set."""
    out = {
        key: value.tolist() if key in _LISTS and isinstance(value, np.ndarray) else value
        for key, value in props.items()
        if value is not None
    }
    out["type"] = kind
    return out


def add(fig: Spec, trace: dict[str, Any], row: int = 1, col: int = 1, cols: int = 1) -> None:
    """``fig.add_trace(trace, row, col)`` on a spec laid out by :func:`grid` with ``cols``
    columns: the trace on that subplot's axes."""
    k = _suffix((row - 1) * cols + col)
    fig["data"].append({**trace, "xaxis": f"x{k}", "yaxis": f"y{k}"})

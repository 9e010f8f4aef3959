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
data), numeric arrays as base64 typed arrays, the rest as plotly's encoder writes it (plotly
5-7's rules, restated: its writer imports narwhals, ~40 ms of a run's start). :func:`to_figure`
makes it a ``go.Figure`` for whoever wants one (images, users); the tests check that plotly's
validation and writing of that figure give the same JSON, so a spec is what the figure would
be. :func:`grid` lays out subplots as ``plotly.subplots.make_subplots`` does. This module
imports no plotly module until :func:`to_figure` is called.
"""

from __future__ import annotations

import base64
import functools
import json
import pkgutil
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import plotly.graph_objects as go

Spec = dict[str, Any]
"""A figure as plotly's JSON: ``{"data": [...], "layout": {...}}`` (see the module)."""


def to_figure(spec: Spec) -> go.Figure:
    """``spec`` as a plotly figure (validated by plotly), the spec left as it was (plotly's
    validation takes each trace's ``type`` out of its dict and puts it back)."""
    import plotly.graph_objects as go

    return go.Figure({**spec, "data": [dict(t) for t in spec.get("data", ())]})


def spec_json(spec: Spec) -> str:
    """``spec`` as plotly writes the figure of it (``plotly.io.to_json(go.Figure(spec),
    validate=False, remove_uids=True)``: the same JSON once parsed), without building the
    figure: its template by name expanded as plotly loads it, numeric arrays as base64 typed
    arrays and other arrays as lists (plotly's ``convert_to_base64`` and
    ``to_typed_array_spec``, ``_plotly_utils/utils.py``), NaN and infinities as null, no
    spaces, ``<``, ``>`` and ``/`` escaped (``plotly/io/_json.py``)."""
    out = _plain(spec)
    if isinstance(out.get("layout", {}).get("template"), str):
        out["layout"]["template"] = template(out["layout"]["template"])
    text = json.dumps(out, separators=(",", ":"), default=_scalar)
    if "NaN" in text or "Infinity" in text:  # (plotly's test, titles' words included)
        text = json.dumps(json.loads(text, parse_constant=lambda _: None), separators=(",", ":"))
    for unsafe, safe in (("<", "\\u003c"), (">", "\\u003e"), ("/", "\\u002f")):
        text = text.replace(unsafe, safe)
    return text


_SHORT_TYPES = {
    "int8": "i1", "uint8": "u1", "int16": "i2", "uint16": "u2", "int32": "i4", "uint32": "u4",
    "float32": "f4", "float64": "f8",
}  # fmt: skip
_NOT_TYPED = frozenset({"geojson", "layer", "layers", "range"})
"""Keys whose arrays plotly writes as lists, never as typed arrays."""


_SCALARS = (str, int, float, type(None))  # (a list's items left as they are: a bar's base)


def _plain(value: Any) -> Any:
    """``value`` with its containers copied (dicts stay dicts, tuples become lists) and its
    numpy arrays as plotly writes them: a dict's as typed arrays (:func:`_typed`), but under
    :data:`_NOT_TYPED` keys; any other as lists (:func:`_listed`)."""
    if isinstance(value, dict):
        return {k: _listed(v) if k in _NOT_TYPED else _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):  # (plotly types no array inside a list)
        return [v if isinstance(v, _SCALARS) else _in_list(v) for v in value]
    if isinstance(value, np.ndarray):
        return _typed(value)
    return value


def _in_list(value: Any) -> Any:
    return _plain(value) if isinstance(value, (dict, list, tuple)) else _listed(value)


def _listed(value: Any) -> Any:
    """``value`` as plotly's encoder writes what it does not type: arrays as lists (dates as
    text), containers copied."""
    if isinstance(value, dict):
        return {k: _listed(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_listed(v) for v in value]
    if isinstance(value, np.ndarray):
        return np.datetime_as_string(value).tolist() if value.dtype.kind == "M" else value.tolist()
    return value


def _typed(v: np.ndarray) -> Any:
    """An array as plotly's JSON holds it: a typed array ``{"dtype", "bdata"[, "shape"]}`` of
    a numeric type plotly.js reads (64-bit integers narrowed where their values fit, else a
    list), anything else (strings, objects, booleans, no values) a list."""
    if v.size and str(v.dtype) in ("int64", "uint64"):  # (as plotly: native order only)
        lo, hi = int(v.min()), int(v.max())
        kinds = (np.int8, np.int16, np.int32) if v.dtype.kind == "i" else (
            np.uint8, np.uint16, np.uint32)  # fmt: skip
        fits = [k for k in kinds if np.iinfo(k).min <= lo and hi <= np.iinfo(k).max]
        v = v.astype(fits[0]) if fits else v
    code = _SHORT_TYPES.get(str(v.dtype))  # ('>f8' is no type of plotly's: a list)
    if code is None or not v.size:
        return _listed(v)
    data = np.ascontiguousarray(v).data  # (the array's buffer, as a memoryview: no copy)
    out = {"dtype": code, "bdata": base64.b64encode(data).decode("ascii")}
    if v.ndim > 1:
        out["shape"] = str(v.shape)[1:-1]
    return out


def _scalar(value: Any) -> Any:
    """A numpy scalar as the Python number it holds (``json.dumps``'s ``default``)."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"figure JSON: expected numbers, text and arrays, got {type(value).__name__}")


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
    for space, n, name in ((h_space, cols, "horizontal"), (v_space, rows, "vertical")):
        if not 0 <= space <= (1.0 / (n - 1) if n > 1 else 1.0):
            raise ValueError(
                f"{name} spacing of {n} subplots: expected 0 to {1 / max(n - 1, 1):g} (as "
                f"plotly's make_subplots), got {space:g}"
            )
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
            x = [x0, x0 + widths[c]]  # (clipped for the axis, not for the titles: as plotly)
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
    """A domain's bound clamped to [0, 1], as ``make_subplots`` clamps each subplot's domain
    (``_subplots._init_subplot``: sums past a bound by a rounding error, plotly's GH1031)."""
    return min(max(y, 0.0), 1.0)


def _suffix(k: int) -> str:
    """The axis number of subplot ``k`` (counted from 1) as plotly names it: none for 1."""
    return "" if k == 1 else str(k)


def tidy(layout: dict[str, Any]) -> None:
    """Leave out the layout's empty lists of items (``annotations``, ``shapes``,
    ``updatemenus``), as plotly does."""
    for key in ("annotations", "shapes", "updatemenus"):
        if key in layout and not len(layout[key]):
            del layout[key]


def axes(
    layout: dict[str, Any],
    which: str,
    row: int | None = None,
    col: int = 1,
    cols: int = 1,
    **props: Any,
) -> None:
    """``fig.update_xaxes`` / ``update_yaxes`` (``which`` "x" or "y") on a spec's layout made
    by :func:`grid` with ``cols`` columns: every such axis, or with ``row`` (counted from 1)
    that of subplot (``row``, ``col``), as :func:`add` places traces. Nested properties as
    dicts, merged into what is there."""
    names = sorted(k for k in layout if k.startswith(f"{which}axis"))
    if row is not None:
        names = [f"{which}axis{_suffix((row - 1) * cols + col)}"]
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

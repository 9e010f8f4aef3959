"""The ``long`` format: a table with one cell per (request, token, layer, rank). CSV is parsed
here; any other table (Parquet) is read through the ``read_table`` option, a callable the caller
passes (the core reads no table library)."""

from __future__ import annotations

import csv
import io
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from specmd_sim.traces.importers.common import (
    Routing,
    Source,
    check_ids,
    check_padding,
    fail,
    layer_map,
    read_text,
    top_k_limit,
)
from specmd_sim.traces.trace import DECODE, PREFILL

_LONG_REQUIRED = ("request", "token", "layer", "rank", "expert")
_LONG_OPTIONAL = ("gate", "phase")


@dataclass(frozen=True)
class _Table:
    columns: dict[str, np.ndarray]
    labels: Callable[[int], str]  # a row's location in the file
    where: str


def import_long(src: Source) -> Routing:
    table = _read_table(src)
    missing = [c for c in _LONG_REQUIRED if c not in table.columns]
    if missing:
        raise fail(
            table.where, "columns", f"{list(_LONG_REQUIRED)} (+ optional gate, phase)",
            f"{sorted(table.columns)}, missing {missing}",
        )  # fmt: skip
    rows = len(table.columns["request"])
    for name in table.columns:
        if name not in _LONG_REQUIRED + _LONG_OPTIONAL:
            src.ignored[name] += rows
    if not rows:
        raise fail(table.where, "input", "at least one row", "none")
    request, names = _factorize(table, "request")
    token = _int_column(table, "token", 0)
    layer = _int_column(table, "layer", 0)
    rank = _int_column(table, "rank", 0)
    expert = _int_column(table, "expert", 0, src.opts.num_experts)
    top_k = _top_k(table, rank, src)
    values, first = np.unique(layer, return_index=True)
    logged = values.tolist()
    first_where = [f"{table.where} {table.labels(int(i))}" for i in first]
    mapping, num_layers, source_layers = layer_map(
        logged, src, dict(zip(logged, first_where, strict=True))
    )
    keys, row = np.unique(np.stack([request, token], 1), axis=0, return_inverse=True)
    row = row.reshape(-1)
    check_padding(table.where, (len(keys), num_layers, top_k), rows)
    trace_layer = np.array(list(mapping.values()), np.int64)[np.searchsorted(values, layer)]
    cells = _cells(table, row, trace_layer, rank, len(keys), num_layers, top_k)
    flat = np.full(len(keys) * num_layers * top_k, -1, np.int64)
    flat[cells] = expert
    experts = flat.reshape(len(keys), num_layers, top_k)

    def label(t: int) -> str:
        return f"request {names[keys[t, 0]]!r}, token {keys[t, 1]}"

    check_ids(experts, table.where, "expert", src.opts.num_experts, label)
    gates = None
    if "gate" in table.columns:
        gate_cells = np.full(experts.size, np.nan, np.float32)
        gate_cells[cells] = _float_column(table, "gate")
        gates = gate_cells.reshape(experts.shape)
    _report_token_gaps(keys, src)
    return Routing(
        experts,
        keys[:, 0],
        _long_phase(table, row, keys, src),
        gates,
        {"request_ids": names, "source_layers": source_layers},
    )


def _top_k(table: _Table, rank: np.ndarray, src: Source) -> int:
    """--top-k, else the highest rank + 1; ranks below it, and it at most one per expert."""
    top_k, why = top_k_limit(src.opts.num_experts)
    if src.opts.top_k is not None:
        top_k, why = src.opts.top_k, "--top-k"
    if int(rank.max()) >= top_k:
        i = int(np.argmax(rank >= top_k))
        raise fail(f"{table.where} {table.labels(i)}", "rank", f"< {top_k:,} ({why})", rank[i])
    return src.opts.top_k or int(rank.max()) + 1


def _read_table(src: Source) -> _Table:
    file = src.path
    if not file.is_file():
        raise fail(src.where(), "input", "a .csv or .parquet file", "no such file")
    where = src.where(file)
    if file.suffix.lower() == ".csv":
        columns, lines = _read_csv(file, src)
        return _Table(columns, lambda i: f"line {lines[i]}", where)
    if src.opts.read_table is None:
        raise fail(
            where, "input", "a .csv file, or a read_table option for other tables (the CLI "
            "reads Parquet)", repr(file.name),
        )  # fmt: skip
    try:
        data = src.opts.read_table(file)
    except (OSError, ValueError) as exc:
        raise fail(where, "input", "a readable table", f"{type(exc).__name__}: {exc}") from None
    return _Table({str(k): np.asarray(v) for k, v in data.items()}, lambda i: f"row {i}", where)


def _read_csv(file: Path, src: Source) -> tuple[dict[str, np.ndarray], list[int]]:
    reader = csv.reader(io.StringIO(read_text(file, src), newline=""))
    header = [h.strip() for h in next(reader, [])]
    if not header:
        raise fail(src.where(file), "input", "a header row naming the columns", "an empty file")
    rows, lines = [], []
    for values in reader:
        if not values:
            continue
        if len(values) != len(header):
            raise fail(
                src.where(file, f"line {reader.line_num}"), "row",
                f"{len(header)} fields like the header", len(values),
            )  # fmt: skip
        rows.append(values)
        lines.append(reader.line_num)
    columns = {
        name: np.array([r[i].strip() for r in rows], dtype=str) for i, name in enumerate(header)
    }
    return columns, lines


def _factorize(table: _Table, name: str) -> tuple[np.ndarray, list[str]]:
    """Codes 0, 1, ... in order of first appearance, and the values as text."""
    values = table.columns[name]
    text = np.array(["" if v is None else str(v) for v in values.tolist()], dtype=str)
    if (text == "").any():
        i = int(np.argmax(text == ""))
        raise fail(f"{table.where} {table.labels(i)}", name, "a value", "an empty cell")
    uniq, first, inverse = np.unique(text, return_index=True, return_inverse=True)
    order = np.argsort(first)
    code = np.empty(len(uniq), np.int64)
    code[order] = np.arange(len(uniq))
    return code[inverse.reshape(-1)], [str(v) for v in uniq[order]]


def _int_column(table: _Table, name: str, lowest: int, limit: int | None = None) -> np.ndarray:
    values = table.columns[name]
    if values.dtype.kind in "iu":
        out = values.astype(np.int64)
    else:
        floats = _as_floats(table, name, values)
        bad = ~np.isfinite(floats) | (floats != np.round(floats)) | (np.abs(floats) >= 2.0**63)
        if bad.any():
            i = int(np.argmax(bad))
            raise fail(
                f"{table.where} {table.labels(i)}",
                name,
                "an integer",
                repr(values[i : i + 1].tolist()[0]),
            )
        out = floats.astype(np.int64)
    bad = out < lowest
    if limit is not None:
        bad |= out >= limit
    if bad.any():
        i = int(np.argmax(bad))
        top = "" if limit is None else f", {limit - 1}"
        raise fail(f"{table.where} {table.labels(i)}", name, f"values in [{lowest}{top}]", out[i])
    return out


def _as_floats(table: _Table, name: str, values: np.ndarray) -> np.ndarray:
    cleaned = np.array(
        ["nan" if v is None or (isinstance(v, str) and not v) else v for v in values.tolist()],
        dtype=object,
    )
    try:
        return cleaned.astype(np.float64)
    except (TypeError, ValueError):
        for i, v in enumerate(cleaned.tolist()):
            try:
                float(v)
            except (TypeError, ValueError):
                raise fail(
                    f"{table.where} {table.labels(i)}", name, "a number", repr(values[i])
                ) from None
        raise  # pragma: no cover - astype failed but every value parses


def _float_column(table: _Table, name: str) -> np.ndarray:
    values = table.columns[name]
    if values.dtype.kind in "iuf":
        return values.astype(np.float32)
    return _as_floats(table, name, values).astype(np.float32)


def _cells(
    table: _Table,
    row: np.ndarray,
    layer: np.ndarray,
    rank: np.ndarray,
    rows: int,
    num_layers: int,
    top_k: int,
) -> np.ndarray:
    """Flat index of each table row's (token row, layer, rank) cell; duplicates are errors."""
    cells = (row * num_layers + layer) * top_k + rank
    order = np.argsort(cells, kind="stable")
    dup = cells[order][1:] == cells[order][:-1]
    if dup.any():
        i, j = sorted((int(order[1:][dup][0]), int(order[:-1][dup][0])))
        raise fail(
            f"{table.where} {table.labels(j)}",
            "(request, token, layer, rank)",
            "each cell once",
            f"the same cell as {table.labels(i)}",
        )
    return cells


_LONG_PHASES = {"prefill": PREFILL, "decode": DECODE, "0": PREFILL, "1": DECODE}


def _long_phase(table: _Table, row: np.ndarray, keys: np.ndarray, src: Source) -> np.ndarray:
    rows = len(keys)
    if "phase" not in table.columns:
        start = np.searchsorted(keys[:, 0], keys[:, 0])  # first row of each row's request
        position = np.arange(rows) - start
        prefill = -1 if src.opts.prefill_tokens is None else src.opts.prefill_tokens
        return np.where(position < prefill, PREFILL, DECODE).astype(np.uint8)
    text = [str(v).strip().lower() for v in table.columns["phase"].tolist()]
    text = [t.removesuffix(".0") for t in text]
    bad = next((i for i, t in enumerate(text) if t not in _LONG_PHASES), None)
    if bad is not None:
        raise fail(
            f"{table.where} {table.labels(bad)}", "phase", "prefill, decode, 0 or 1",
            repr(table.columns["phase"][bad]),
        )  # fmt: skip
    cell_phase = np.array([_LONG_PHASES[t] for t in text], np.int64)
    low = np.full(rows, DECODE + 1, np.int64)
    high = np.full(rows, -1, np.int64)
    np.minimum.at(low, row, cell_phase)
    np.maximum.at(high, row, cell_phase)
    if (low != high).any():
        t = int(np.argmax(low != high))
        i = int(np.argmax((row == t) & (cell_phase != cell_phase[np.argmax(row == t)])))
        raise fail(
            f"{table.where} {table.labels(i)}", "phase", "one phase per (request, token)",
            "both prefill and decode",
        )  # fmt: skip
    return low.astype(np.uint8)


def _report_token_gaps(keys: np.ndarray, src: Source) -> None:
    same = keys[1:, 0] == keys[:-1, 0]
    gaps = int((same & (keys[1:, 1] != keys[:-1, 1] + 1)).sum())
    if gaps:
        src.report.append(
            f"{gaps} gaps in token numbers within requests: rows follow token order, missing "
            "tokens get no row"
        )

"""What the importers share: the input being read (``Source``), its options
(``ImportOptions``), the arrays a format reads (``Routing``), the one-line error (``fail``), file
and JSON reading, id and shape checks, the assembly of the *array* formats (``stack_requests``),
the layer mapping of the *record* and *table* formats (``layer_map``) and the one step that
turns a ``Routing`` into a validated :class:`~specmd_sim.traces.trace.Trace` (``finish``).

What an import allocates is bounded by what it read before it is allocated: arrays by their
file's size (:func:`~specmd_sim.traces.io.read_npy`, :func:`~specmd_sim.traces.io.read_npz`),
top-k by the experts (``top_k_limit``), layers by the routed experts any model may have
(``layers_limit``), and the trace the *record* and *table* formats fill by the ids they read
(``check_padding``).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from specmd_sim.errors import SpecmdError
from specmd_sim.models.spec import MAX_EXPERTS_PER_LAYER, MAX_ROUTED_EXPERTS
from specmd_sim.traces.trace import (
    DECODE,
    FORMAT_NAME,
    FORMAT_VERSION,
    PREFILL,
    Trace,
    validate_trace,
)

TableReader = Callable[[Path], Mapping[str, Any]]
"""Reads a table file into columns (name -> 1-D array-like), for ``long`` inputs other than CSV."""


@dataclass(frozen=True)
class ImportOptions:
    """What the user and the model say about the input; None = not said."""

    num_experts: int | None = None  # the user's, else the catalog model's
    num_layers: int | None = None  # --num-layers
    top_k: int | None = None  # --top-k
    prefill_tokens: int | None = None  # --prefill-tokens: where the input does not say
    only_logged_layers: bool = False  # record formats: drop layers without records
    read_table: TableReader | None = None
    model_experts: int | None = None  # the catalog model's shape, to report a mismatch
    model_layers: int | None = None


@dataclass(frozen=True)
class Source:
    """The input being imported, and what is noted about it on the way."""

    fmt: str
    path: Path
    opts: ImportOptions
    report: list[str] = field(default_factory=list)
    ignored: Counter[str] = field(default_factory=Counter)  # unknown field -> records

    def where(self, file: Path | None = None, at: str = "") -> str:
        text = f"{self.fmt} {file if file is not None else self.path}"
        return f"{text} {at}" if at else text


@dataclass
class Routing:
    experts: np.ndarray  # int64 [T, L, k]; -1 = none
    request: np.ndarray  # int64 [T]
    phase: np.ndarray  # uint8 [T]
    gates: np.ndarray | None = None  # float32 [T, L, k]; NaN = none
    meta: dict[str, Any] = field(default_factory=dict)


def fail(where: str, name: str, expected: str, got: object) -> SpecmdError:
    return SpecmdError(f"{where}: {name}: expected {expected}, got {got}")


# --- bounds: what an import may allocate -----------------------------------------------------

MAX_PADDING = 256
"""Ids a *record* or *table* import may build per id it read: the rest of its trace is ``-1``
padding, for layers without records (published models have under 100 MoE layers: Qwen3-235B-A22B
has 94) and for missing ranks or records. More means layer or rank numbers far beyond the
records."""
FREE_IDS = 1 << 24
"""Ids such an import may always build, whatever it read: 16,777,216 (200 MB with gates)."""


def top_k_limit(num_experts: int | None) -> tuple[int, str]:
    """The most ids a row holds (they are distinct experts), and why."""
    if num_experts is None:
        return MAX_EXPERTS_PER_LAYER, f"distinct ids of at most {MAX_EXPERTS_PER_LAYER:,} experts"
    return num_experts, f"distinct ids of {num_experts} experts"


def layers_limit(num_experts: int | None) -> tuple[int, str]:
    """The most layers a trace may have (``MAX_ROUTED_EXPERTS`` layers x experts, the bound of
    any model), and why."""
    experts = "experts" if num_experts is None else f"{num_experts} experts"
    return (
        MAX_ROUTED_EXPERTS // (num_experts or 1),
        f"layers x {experts} at most {MAX_ROUTED_EXPERTS:,}, as for any model",
    )


def check_padding(where: str, shape: tuple[int, int, int], read: int) -> None:
    """The trace of ``shape`` ``[tokens, layers, top_k]`` that an import fills from ``read`` ids
    holds at most ``MAX_PADDING`` ids per id read (or ``FREE_IDS``): checked before it is
    allocated."""
    built, limit = math.prod(shape), max(FREE_IDS, MAX_PADDING * read)
    if built > limit:
        tokens, layers, top_k = shape
        raise fail(
            where,
            "tokens x layers x top_k",
            f"at most {limit:,} ids ({MAX_PADDING} per id read, or {FREE_IDS:,}; the rest "
            "of the trace is -1 padding)",
            f"{tokens:,} x {layers:,} x {top_k:,} = {built:,} from {read:,} ids read",
        )


# --- finishing: Routing -> Trace -----------------------------------------------------------


def finish(routing: Routing, src: Source, model: str) -> Trace:
    """The trace of ``routing``: ``num_experts`` settled, every row in descending gate order,
    ``meta`` written, validated; what was mapped with a loss is added to ``src.report``."""
    experts = routing.experts
    if experts.shape[0] == 0:
        raise fail(src.where(), "input", "at least one routed token", "none")
    num_experts = src.opts.num_experts
    if num_experts is None:
        num_experts = max(int(experts.max()) + 1, 1)
        src.report.append(
            f"num_experts = {num_experts}, the highest id + 1: {model!r} is not a catalog model "
            "and --num-experts was not given"
        )
    experts, gates, moved = _order_by_gate(experts, routing.gates)
    if moved:
        src.report.append(f"{moved} rows were not in descending gate order: reordered")
    if src.ignored:
        fields = ", ".join(f"{name} ({n} records)" for name, n in sorted(src.ignored.items()))
        src.report.append(f"ignored fields: {fields}")
    _report_model_mismatch(src, model, experts.shape[1], num_experts)
    meta = {
        "format": FORMAT_NAME,
        "version": FORMAT_VERSION,
        "model": model,
        "num_layers": int(experts.shape[1]),
        "num_experts": num_experts,
        "top_k": int(experts.shape[2]),
        "importer": src.fmt,
        "source": src.path.resolve().name,
        **routing.meta,
    }
    arrays = {
        "experts": experts,
        "request": routing.request,
        "phase": routing.phase,
        "gates": gates,
    }
    return validate_trace(arrays, meta, f"{src.fmt} import {src.path}")


def _report_model_mismatch(src: Source, model: str, layers: int, experts: int) -> None:
    want = (src.opts.model_layers, src.opts.model_experts)
    if want[0] is not None and want != (layers, experts):
        src.report.append(
            f"the trace has {layers} layers x {experts} experts, model {model} has {want[0]} MoE "
            f"layers x {want[1]} experts: a run with this model refuses the trace"
        )


def _order_by_gate(
    experts: np.ndarray, gates: np.ndarray | None
) -> tuple[np.ndarray, np.ndarray | None, int]:
    """Each row by descending gate (stable; -1 entries and NaN gates last); rows moved."""
    if gates is None:
        return experts, None, 0
    key = np.where((experts < 0) | np.isnan(gates), -np.inf, gates)
    order = np.argsort(-key, axis=2, kind="stable")
    moved = int((order != np.arange(experts.shape[2])).any(axis=2).any(axis=1).sum())
    if not moved:
        return experts, gates, 0
    return np.take_along_axis(experts, order, 2), np.take_along_axis(gates, order, 2), moved


# --- reading files -------------------------------------------------------------------------


def input_files(src: Source, suffixes: tuple[str, ...]) -> list[Path]:
    """The input file, or the files of the input folder ending in ``suffixes``, by name."""
    path = src.path
    if path.is_file():
        return [path]
    if not path.is_dir():
        raise fail(src.where(), "input", "an existing file or folder", "no such path")
    files = sorted(p for p in path.iterdir() if p.is_file() and p.name.lower().endswith(suffixes))
    if not files:
        raise fail(src.where(), "input", f"a folder holding {'/'.join(suffixes)} files", "none")
    others = sorted(p.name for p in path.iterdir() if p.is_file() and p not in files)
    if others:
        src.report.append(f"ignored {len(others)} other files in the folder: {', '.join(others)}")
    return files


def read_text(file: Path, src: Source) -> str:
    try:
        return file.read_text(encoding="utf-8")
    except OSError as exc:
        raise fail(src.where(file), "input", "a readable file", exc.strerror or exc) from None
    except UnicodeDecodeError:
        raise fail(src.where(file), "input", "UTF-8 text", "undecodable bytes") from None


def load_json(file: Path, src: Source) -> Any:
    try:
        return json.loads(read_text(file, src))
    except json.JSONDecodeError as exc:
        raise fail(
            src.where(file, f"line {exc.lineno}"), "input", "JSON", f"invalid JSON ({exc.msg})"
        ) from None


def json_records(src: Source, suffixes: tuple[str, ...]) -> Iterator[tuple[Path, str, Any]]:
    """(file, location, value) of each record of the input files ending in ``suffixes``
    (:func:`input_files`), file by file."""
    for file in input_files(src, suffixes):
        for at, value in _file_records(file, src):
            yield file, at, value


def _file_records(file: Path, src: Source) -> Iterator[tuple[str, Any]]:
    """(location, value) of each record of a JSON list or of JSON Lines."""
    text = read_text(file, src)
    if text.lstrip().startswith("["):
        data = load_json(file, src)
        for i, value in enumerate(data):
            yield f"record {i}", value
        return
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            yield f"line {n}", json.loads(line)
        except json.JSONDecodeError as exc:
            raise fail(
                src.where(file, f"line {n}"),
                "record",
                "one JSON object per line (JSON Lines) or a JSON list",
                f"invalid JSON ({exc.msg})",
            ) from None


def note_unknown(src: Source, record: Mapping[str, Any], known: frozenset[str]) -> None:
    for name in record:
        if name not in known:
            src.ignored[name] += 1


def int_field(where: str, name: str, value: Any, lowest: int = 0) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < lowest:
        raise fail(where, name, f"an integer >= {lowest}", repr(value))
    return value


# --- array formats: vllm, sglang -----------------------------------------------------------


@dataclass(frozen=True)
class ArrayRequest:
    where: str
    name: str
    ids: Any  # [tokens, layers, top_k] ids, any array-like
    prompt_tokens: Any = None  # rows of the prompt, when the input says


def stack_requests(requests: list[ArrayRequest], src: Source) -> Routing:
    """One block of rows per request, in order; shapes, ids and prompt lengths checked."""
    blocks, phases, names = [], [], []
    first: tuple[tuple[int, ...], str] | None = None  # (shape[1:], where) of the first request
    empty, clamped = 0, 0
    for req in requests:
        ids = _id_array(req)
        if ids.shape[0] == 0:
            empty += 1
            continue
        first = first or (ids.shape[1:], req.where)
        _check_shape(ids, req, first, src)
        check_ids(ids, req.where, "routed_experts", src.opts.num_experts)
        prefill, clamp = _prefill_rows(req, ids.shape[0], src)
        clamped += clamp
        blocks.append(ids)
        phases.append(np.where(np.arange(ids.shape[0]) < prefill, PREFILL, DECODE))
        names.append(req.name)
    if empty:
        src.report.append(f"skipped {empty} requests with no routed tokens")
    if clamped:
        src.report.append(
            f"--prefill-tokens {src.opts.prefill_tokens} exceeds the rows of {clamped} "
            "requests: all their rows are prefill"
        )
    if not blocks:
        raise fail(src.where(), "input", "at least one request with routed tokens", "none")
    request = np.repeat(np.arange(len(blocks)), [b.shape[0] for b in blocks])
    return Routing(
        np.concatenate(blocks),
        request,
        np.concatenate(phases).astype(np.uint8),
        meta={"request_ids": names},
    )


def _id_array(req: ArrayRequest) -> np.ndarray:
    try:
        ids = np.asarray(req.ids)
    except ValueError:
        raise fail(
            req.where, "routed_experts", "a nested list [tokens][layers][top_k]", "ragged lists"
        ) from None
    if ids.dtype.kind not in "iu":
        raise fail(req.where, "routed_experts", "integer expert ids", f"dtype {ids.dtype}")
    if ids.ndim != 3:
        raise fail(
            req.where, "routed_experts", "3 dimensions [tokens, layers, top_k]", f"{ids.shape}"
        )
    return ids.astype(np.int64)


def _check_shape(
    ids: np.ndarray, req: ArrayRequest, first: tuple[tuple[int, ...], str], src: Source
) -> None:
    layers, top_k = ids.shape[1:]
    (first_layers, first_k), first_where = first
    for name, got, want, why in (
        ("num_layers", layers, src.opts.num_layers, "--num-layers"),
        ("top_k", top_k, src.opts.top_k, "--top-k"),
        ("num_layers", layers, first_layers, f"like {first_where}"),
        ("top_k", top_k, first_k, f"like {first_where}"),
    ):
        if want is not None and got != want:
            raise fail(req.where, name, f"{want} ({why})", f"{got} (shape {list(ids.shape)})")


def check_ids(
    ids: np.ndarray,
    where: str,
    name: str,
    num_experts: int | None,
    row_label: Callable[[int], str] | None = None,
) -> None:
    """Ids in [-1, E-1] and distinct within each row; errors name the row, layer and slot."""

    def label(t: int) -> str:
        return row_label(t) if row_label is not None else f"token {t}"

    bad = ids < -1
    if num_experts is not None:
        bad |= ids >= num_experts
    if bad.any():
        t, layer, slot = (int(i) for i in np.argwhere(bad)[0])
        top = "" if num_experts is None else f", {num_experts - 1}"
        raise fail(
            where,
            name,
            f"expert ids in [0{top}] (-1 = none)",
            f"{int(ids[t, layer, slot])} at {label(t)}, layer {layer}, slot {slot}",
        )
    ordered = np.sort(ids, axis=2)
    dup = (ordered[:, :, 1:] == ordered[:, :, :-1]) & (ordered[:, :, 1:] >= 0)
    if dup.any():
        t, layer, _ = (int(i) for i in np.argwhere(dup)[0])
        raise fail(
            where,
            name,
            "distinct expert ids within a token's layer",
            f"{ids[t, layer].tolist()} at {label(t)}, layer {layer}",
        )


def _prefill_rows(req: ArrayRequest, rows: int, src: Source) -> tuple[int, int]:
    """Prefill rows of a request (its own prompt length, else --prefill-tokens, else 0) and
    whether --prefill-tokens was cut to the request's rows."""
    prompt = req.prompt_tokens
    if prompt is not None:
        prompt = int_field(req.where, "num_prompt_tokens", prompt)
        if prompt > rows:
            raise fail(
                req.where, "num_prompt_tokens", f"at most {rows} (the request's rows)", prompt
            )
        return prompt, 0
    option = src.opts.prefill_tokens
    if option is None:
        return 0, 0
    return min(option, rows), int(option > rows)


# --- record and table formats: speculative-moe, vllm-moe-logger, long ----------------------


def layer_map(
    logged: list[int], src: Source, first_where: dict[int, str]
) -> tuple[dict[int, int], int, list[int | None]]:
    """source layer -> trace layer, the number of trace layers, and for each trace layer the
    source layer it holds (None: no records, all -1)."""
    opts = src.opts
    limit, why = layers_limit(opts.num_experts)
    declared = None if opts.only_logged_layers else opts.num_layers or opts.model_layers
    if declared is not None:
        limit = declared
        why = "--num-layers" if opts.num_layers is not None else "the model's MoE layers"
        why += "; or --only-logged-layers"
    if logged[-1] >= limit:
        raise fail(
            first_where[logged[-1]], "layer", f"layer ids in [0, {limit - 1:,}] ({why})", logged[-1]
        )
    if opts.only_logged_layers:
        return {layer: i for i, layer in enumerate(logged)}, len(logged), list(logged)
    num_layers = logged[-1] + 1 if declared is None else declared
    present = set(logged)
    unlogged = [layer for layer in range(num_layers) if layer not in present]
    if unlogged:
        src.report.append(
            f"{len(unlogged)} of {num_layers} layers have no records, their rows are -1: "
            f"{_ranges(unlogged)}"
        )
    return (
        {layer: layer for layer in logged},
        num_layers,
        [layer if layer in present else None for layer in range(num_layers)],
    )


def _ranges(values: list[int]) -> str:
    """'0-3, 5, 7-9' for [0, 1, 2, 3, 5, 7, 8, 9]."""
    parts, start = [], 0
    for i in range(1, len(values) + 1):
        if i == len(values) or values[i] != values[i - 1] + 1:
            lo, hi = values[start], values[i - 1]
            parts.append(str(lo) if lo == hi else f"{lo}-{hi}")
            start = i
    return ", ".join(parts)

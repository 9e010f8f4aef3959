"""Importers: routing that other tools already record, turned into a trace (v1).

Each entry of :data:`FORMATS` reads one tool's output into plain arrays (a ``Routing``); one
shared step (``common.finish``) then settles ``num_experts``, orders every row by descending
gate, writes ``meta`` and validates the trace. What can be mapped with a loss (a dropped record,
an ignored field, padded rows) goes into :attr:`ImportResult.report`; anything else is a
one-line :class:`~specmd_sim.errors.SpecmdError` naming the input file, the record and the value.
The formats, what maps to what and what does not: ``docs/trace-format.md``, "Importing routing
from other tools".

One module per format family; what they share is in :mod:`.common`. Two families share their
checks: the *array* formats (``vllm``, ``sglang``: :mod:`.vllm`, :mod:`.sglang`) hold one
``[tokens, layers, top_k]`` id array per request (``common.stack_requests``); the *record*
formats (``speculative-moe``, ``vllm-moe-logger``: :mod:`.records`) hold one record per token
and layer, grouped per (request, layer) in record order (``records._assemble_records``), where a
layer with fewer records than its request's other layers is padded at the end and reported,
never shifted. ``long`` (:mod:`.long`) is a table with one cell per (request, token, layer,
rank).

The core reads no table library: ``long`` parses CSV itself and reads any other table (Parquet)
through the ``read_table`` option, a callable the caller passes (the CLI passes one built on
pyarrow).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specmd_sim.errors import SpecmdError
from specmd_sim.models.spec import MAX_EXPERTS_PER_LAYER
from specmd_sim.traces.importers.common import (
    ImportOptions,
    Routing,
    Source,
    finish,
    layers_limit,
    top_k_limit,
)
from specmd_sim.traces.importers.long import import_long
from specmd_sim.traces.importers.records import import_moe_logger, import_speculative_moe
from specmd_sim.traces.importers.sglang import import_sglang
from specmd_sim.traces.importers.vllm import import_vllm
from specmd_sim.traces.trace import Trace

__all__ = ["FORMATS", "ImportResult", "import_trace"]


@dataclass(frozen=True)
class ImportResult:
    """An imported trace and what of the input it could not map exactly, one line each."""

    trace: Trace
    report: list[str]


_OPTIONS = ("num_layers", "top_k", "prefill_tokens", "only_logged_layers", "read_table")


def import_trace(
    path: str | Path,
    format: str,
    *,
    model: str,
    num_experts: int | None = None,
    **options: Any,
) -> ImportResult:
    """Import the routing in ``path`` (a file or a folder) written by the tool ``format``.

    ``model`` is a catalog id (or a model file); ``num_experts`` defaults to the model's, or
    for a model outside the catalog to the highest id + 1. Options: ``num_layers``, ``top_k``,
    ``prefill_tokens``, ``only_logged_layers`` (see the docs) and ``read_table``.
    """
    if format not in FORMATS:
        raise SpecmdError(f"--format: expected one of {', '.join(FORMATS)}, got {format!r}")
    unknown = sorted(set(options) - set(_OPTIONS))
    if unknown:
        raise SpecmdError(f"import options: expected some of {list(_OPTIONS)}, got {unknown}")
    src = Source(format, Path(path), _resolve_options(model, num_experts, options))
    trace = finish(FORMATS[format](src), src, model)
    return ImportResult(trace, list(src.report))


def _resolve_options(model: str, num_experts: int | None, options: dict[str, Any]) -> ImportOptions:
    shape = _model_shape(model)
    _check_option("num_experts", num_experts, 1, (MAX_EXPERTS_PER_LAYER, "trace ids are int16"))
    if num_experts is None and shape is not None:
        num_experts = shape[0]
    _check_option("num_layers", options.get("num_layers"), 1, layers_limit(num_experts))
    _check_option("top_k", options.get("top_k"), 1, top_k_limit(num_experts))
    _check_option("prefill_tokens", options.get("prefill_tokens"), 0)
    return ImportOptions(
        num_experts=num_experts,
        num_layers=options.get("num_layers"),
        top_k=options.get("top_k"),
        prefill_tokens=options.get("prefill_tokens"),
        only_logged_layers=bool(options.get("only_logged_layers", False)),
        read_table=options.get("read_table"),
        model_experts=None if shape is None else shape[0],
        model_layers=None if shape is None else shape[1],
    )


def _check_option(
    name: str, value: Any, lowest: int, highest: tuple[int, str] | None = None
) -> None:
    """An integer option (None: not given) >= ``lowest`` and up to ``highest`` (limit, why)."""
    if value is None:
        return
    expected = f"an integer >= {lowest}"
    if highest is not None:
        expected = f"an integer in [{lowest}, {highest[0]:,}] ({highest[1]})"
    if (
        not isinstance(value, int)
        or isinstance(value, bool)
        or value < lowest
        or (highest is not None and value > highest[0])
    ):
        flag = "--" + name.replace("_", "-")
        raise SpecmdError(f"{flag}: expected {expected}, got {value!r}")


def _model_shape(model: str) -> tuple[int, int] | None:
    """(num_experts, MoE layers) of a catalog model or model file; None for any other name."""
    from specmd_sim.models.loader import list_models, load_model

    if model.endswith((".yaml", ".yml")) or model in {m.id for m in list_models()}:
        spec = load_model(model)
        return spec.num_experts, spec.moe_layers
    return None


FORMATS: dict[str, Callable[[Source], Routing]] = {
    "vllm": import_vllm,
    "sglang": import_sglang,
    "speculative-moe": import_speculative_moe,
    "vllm-moe-logger": import_moe_logger,
    "long": import_long,
}
"""Importers by ``--format`` name."""

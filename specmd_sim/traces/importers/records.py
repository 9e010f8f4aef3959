"""The *record* formats: ``speculative-moe`` (Mario928/speculative-moe routing JSONL) and
``vllm-moe-logger`` (weiran0129/vLLM-MoE-Logger JSONL). Both hold one record per token and layer;
``_assemble_records`` groups them per (request, layer) in record order, where a layer with fewer
records than its request's other layers is padded at the end and reported, never shifted."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from specmd_sim.traces.importers.common import (
    Routing,
    Source,
    check_padding,
    fail,
    int_field,
    json_records,
    layer_map,
    note_unknown,
)
from specmd_sim.traces.trace import DECODE, PREFILL


@dataclass(frozen=True, slots=True)
class _Record:
    """One token's routing in one layer."""

    where: str
    file: Path
    request: str | None
    layer: int
    experts: list[int]
    gates: list[float] | None = None
    phase: int | None = None
    token_idx: int | None = None  # the index the source gives (checked against record order)
    token_pos: int | None = None  # speculative-moe raw: the position in the forward batch


def _ids_field(where: str, name: str, value: Any, num_experts: int | None) -> list[int]:
    if not isinstance(value, list) or not value:
        raise fail(where, name, "a non-empty list of expert ids", repr(value))
    top = "" if num_experts is None else f", {num_experts - 1}"
    for x in value:
        if (
            not isinstance(x, int)
            or isinstance(x, bool)
            or x < 0
            or (num_experts is not None and x >= num_experts)
        ):
            raise fail(where, name, f"expert ids in [0{top}]", f"{x!r} in {value}")
    if len(set(value)) != len(value):
        raise fail(where, name, "distinct expert ids", value)
    return value


def _gates_field(where: str, name: str, value: Any, k: int) -> list[float] | None:
    if value is None:
        return None
    if (
        not isinstance(value, list)
        or len(value) != k
        or not all(isinstance(x, int | float) and not isinstance(x, bool) for x in value)
    ):
        raise fail(where, name, f"a list of {k} numbers (one per expert)", repr(value))
    return [float(x) for x in value]


_PHASES: dict[Any, int] = {"prefill": PREFILL, "decode": DECODE, 0: PREFILL, 1: DECODE}


def _phase_field(where: str, record: Mapping[str, Any]) -> int | None:
    if "is_prefill" in record:
        value = record["is_prefill"]
        if not isinstance(value, bool):
            raise fail(where, "is_prefill", "true or false", repr(value))
        return PREFILL if value else DECODE
    if "phase" not in record:
        return None
    value = record["phase"]
    key = value.lower() if isinstance(value, str) else value
    if isinstance(key, bool) or key not in _PHASES:
        raise fail(where, "phase", "'prefill', 'decode', 0 or 1", repr(value))
    return _PHASES[key]


def _first_key(record: Mapping[str, Any], names: tuple[str, ...]) -> str | None:
    return next((name for name in names if name in record), None)


_SPEC_RECORD = frozenset(
    {
        "layer", "layer_idx", "experts", "gating_probs", "problem_id", "request", "request_id",
        "prompt_idx", "dataset", "token_idx", "token_pos", "phase", "is_prefill",
    }
)  # fmt: skip


def import_speculative_moe(src: Source) -> Routing:
    records, datasets = [], set()
    for file, at, record in json_records(src, (".jsonl",)):
        records.append(_spec_record(record, src.where(file, at), file, src))
        if "dataset" in record:
            datasets.add(str(record["dataset"]))
    routing = _assemble_records(records, src, check_token_idx=True)
    if datasets:
        routing.meta["datasets"] = sorted(datasets)
    routing.meta["gate_source"] = (
        "gating_probs: vLLM's topk_weights from select_experts (renormalized over the top-k "
        "when the model renormalizes, as Mixtral does)"
    )
    return routing


def _spec_record(record: Any, where: str, file: Path, src: Source) -> _Record:
    if not isinstance(record, dict):
        raise fail(where, "record", "a JSON object", type(record).__name__)
    note_unknown(src, record, _SPEC_RECORD)
    layer_key = _first_key(record, ("layer", "layer_idx"))
    if layer_key is None or "experts" not in record:
        raise fail(where, "record", "keys 'layer' (or 'layer_idx') and 'experts'", sorted(record))
    experts = _ids_field(where, "experts", record["experts"], src.opts.num_experts)
    request_key = _first_key(record, ("problem_id", "request", "request_id", "prompt_idx"))
    request = None if request_key is None else str(record[request_key])
    if "dataset" in record:  # problem ids restart in each dataset
        dataset = str(record["dataset"])
        request = dataset if request is None else f"{dataset}/{request}"
    token_idx, token_pos = record.get("token_idx"), record.get("token_pos")
    return _Record(
        where,
        file,
        request,
        int_field(where, layer_key, record[layer_key]),
        experts,
        _gates_field(where, "gating_probs", record.get("gating_probs"), len(experts)),
        _phase_field(where, record),
        None if token_idx is None else int_field(where, "token_idx", token_idx),
        None if token_pos is None else int_field(where, "token_pos", token_pos),
    )


_LOGGER_ROUTE = frozenset({"type", "req_id", "token_idx", "layer", "topk_ids", "topk_weights"})


@dataclass
class _LoggerHeaders:
    top_k: tuple[int, str] | None = None  # (value, where)
    layers: set[int] = field(default_factory=set)
    models: set[str] = field(default_factory=set)
    skipped: Counter[str] = field(default_factory=Counter)  # record type -> records

    def add(self, record: Mapping[str, Any], where: str) -> None:
        top_k = record.get("top_k")
        if top_k is not None:
            top_k = int_field(where, "top_k", top_k, 1)
            if self.top_k is not None and self.top_k[0] != top_k:
                raise fail(where, "top_k", f"{self.top_k[0]} like {self.top_k[1]}", top_k)
            self.top_k = (top_k, where)
        layers = record.get("layers_logged", [])
        if not isinstance(layers, list):
            raise fail(where, "layers_logged", "a list of layer ids", repr(layers))
        self.layers.update(int_field(where, "layers_logged", x) for x in layers)
        if record.get("model_id"):
            self.models.add(str(record["model_id"]))


def import_moe_logger(src: Source) -> Routing:
    records: list[_Record] = []
    headers = _LoggerHeaders()
    for file, at, record in json_records(src, (".jsonl",)):
        where = src.where(file, at)
        if not isinstance(record, dict):
            raise fail(where, "record", "a JSON object", type(record).__name__)
        kind = record.get("type", "route")
        if kind == "meta":
            headers.add(record, where)
        elif kind == "route":
            records.append(_logger_record(record, where, file, src))
        else:
            headers.skipped[str(kind)] += 1
    for kind, n in sorted(headers.skipped.items()):
        src.report.append(f"skipped {n} records of type {kind!r}")
    routing = _assemble_records(records, src, declared_top_k=headers.top_k)
    _logger_notes(records, headers, src)
    if headers.models:
        routing.meta["source_model"] = sorted(headers.models)
    routing.meta["gate_source"] = (
        "topk_weights from vLLM's FusedMoE.select_experts: the softmax over all experts, not "
        "renormalized, unless the model renormalizes (Qwen1.5-MoE does not)"
    )
    return routing


def _logger_record(record: Mapping[str, Any], where: str, file: Path, src: Source) -> _Record:
    note_unknown(src, record, _LOGGER_ROUTE)
    if "layer" not in record or "topk_ids" not in record:
        raise fail(where, "record", "keys 'layer' and 'topk_ids'", sorted(record))
    experts = _ids_field(where, "topk_ids", record["topk_ids"], src.opts.num_experts)
    return _Record(
        where,
        file,
        str(record.get("req_id", "r0")),
        int_field(where, "layer", record["layer"]),
        experts,
        _gates_field(where, "topk_weights", record.get("topk_weights"), len(experts)),
    )


def _logger_notes(records: list[_Record], headers: _LoggerHeaders, src: Source) -> None:
    unrouted = sorted(headers.layers - {r.layer for r in records})
    if unrouted:
        src.report.append(f"the headers list layers {unrouted} that no route record has")
    request_ids = {r.request for r in records}
    if len(request_ids) == 1:
        src.report.append(
            f"every record has req_id {next(iter(request_ids))!r}: the log does not tell "
            "requests apart, its rows (vLLM's forward batches in log order: start-up passes, "
            "prefill, decode steps) are one request"
        )


def _assemble_records(
    records: list[_Record],
    src: Source,
    *,
    check_token_idx: bool = False,
    declared_top_k: tuple[int, str] | None = None,
) -> Routing:
    """Rows request by request (first appearance); each (request, layer) in record order."""
    if not records:
        raise fail(src.where(), "input", "at least one routing record", "none")
    top_k = _common_top_k(records, src, declared_top_k)
    groups = _group(records, src)
    logged = sorted({layer for layers in groups.values() for layer in layers})
    first_where = {}
    for r in reversed(records):
        first_where[r.layer] = r.where
    mapping, num_layers, source_layers = layer_map(logged, src, first_where)
    tokens = sum(max(len(recs) for recs in layers.values()) for layers in groups.values())
    check_padding(src.where(), (tokens, num_layers, top_k), len(records) * top_k)
    has_gates = any(r.gates is not None for r in records)
    blocks: list[tuple[np.ndarray, np.ndarray | None, np.ndarray]] = []
    misaligned: dict[str, list[int]] = {}
    from_token_pos = 0
    for index, (request, layers) in enumerate(groups.items()):
        experts, gates, short = _fill_request(layers, logged, mapping, num_layers, top_k, has_gates)
        ref = layers[min(layer for layer, recs in layers.items() if len(recs) == len(experts))]
        phase, inferred = _request_phase(ref, src)
        from_token_pos += inferred
        blocks.append((experts, gates, phase))
        if short:
            misaligned[str(index)] = sorted(mapping[layer] for layer in short)
            _report_short(src, index, request, len(experts), short)
    if from_token_pos:
        src.report.append(
            f"phase of {from_token_pos} requests from token_pos (the raw recorder): rows up to "
            "the last token_pos > 0 are prefill, the rest decode"
        )
    if check_token_idx:
        _check_token_order(groups, src)
    if has_gates and any(r.gates is None for r in records):
        missing = sum(r.gates is None for r in records)
        src.report.append(f"{missing} records have no gates: NaN")
    rows = np.repeat(np.arange(len(blocks)), [b[0].shape[0] for b in blocks])
    meta: dict[str, Any] = {"request_ids": list(groups), "source_layers": source_layers}
    if misaligned:
        meta["misaligned_layers"] = misaligned
    gates = np.concatenate([b[1] for b in blocks if b[1] is not None]) if has_gates else None
    return Routing(
        np.concatenate([b[0] for b in blocks]),
        rows,
        np.concatenate([b[2] for b in blocks]),
        gates,
        meta,
    )


def _common_top_k(records: list[_Record], src: Source, declared: tuple[int, str] | None) -> int:
    first = records[0]
    want, why = len(first.experts), f"like {first.where}"
    if declared is not None:
        want, why = declared[0], f"the header's top_k, {declared[1]}"
    if src.opts.top_k is not None:
        want, why = src.opts.top_k, "--top-k"
    for r in records:
        if len(r.experts) != want:
            raise fail(r.where, "experts", f"{want} ids per record ({why})", len(r.experts))
    return want


def _group(records: list[_Record], src: Source) -> dict[str | None, dict[int, list[_Record]]]:
    """request -> layer -> records in order; a (request, layer) found in a second file is
    skipped and reported (the same layer logged by two runs)."""
    groups: dict[str | None, dict[int, list[_Record]]] = {}
    skipped: Counter[tuple[str | None, int, Path, Path]] = Counter()
    for r in records:
        layers = groups.setdefault(r.request, {})
        recs = layers.setdefault(r.layer, [])
        if recs and recs[0].file != r.file:
            skipped[r.request, r.layer, recs[0].file, r.file] += 1
            continue
        recs.append(r)
    for (request, layer, kept, dropped), n in skipped.items():
        src.report.append(
            f"request {request!r} layer {layer} is in {kept.name} and {dropped.name}: kept "
            f"{kept.name} (first by name), skipped {n} records of {dropped.name}"
        )
    return groups


def _fill_request(
    layers: dict[int, list[_Record]],
    logged: list[int],
    mapping: dict[int, int],
    num_layers: int,
    top_k: int,
    has_gates: bool,
) -> tuple[np.ndarray, np.ndarray | None, dict[int, int]]:
    """One request's rows (as many as its longest layer); layers with fewer records are padded
    at the end with -1 (NaN gates): their source layer -> record count."""
    rows = max(len(recs) for recs in layers.values())
    experts = np.full((rows, num_layers, top_k), -1, np.int64)
    gates = np.full((rows, num_layers, top_k), np.nan, np.float32) if has_gates else None
    nan_row = [math.nan] * top_k
    for layer, recs in layers.items():
        experts[: len(recs), mapping[layer]] = [r.experts for r in recs]
        if gates is not None:
            gates[: len(recs), mapping[layer]] = [r.gates or nan_row for r in recs]
    short = {layer: len(layers.get(layer, [])) for layer in logged}
    return experts, gates, {layer: n for layer, n in short.items() if n < rows}


def _report_short(
    src: Source, index: int, request: str | None, rows: int, short: dict[int, int]
) -> None:
    counts = ", ".join(f"layer {layer}: {n}" for layer, n in sorted(short.items()))
    src.report.append(
        f"request {index} ({request!r}) has {rows} rows but fewer records in {len(short)} "
        f"layers ({counts}): their missing final rows are -1; their later rows may be shifted "
        "(a dropped record), so leave them out of cross-layer statistics"
    )


def _request_phase(ref: list[_Record], src: Source) -> tuple[np.ndarray, bool]:
    """Phase of a request's rows, from its first complete layer: the records' phase markers,
    else --prefill-tokens, else the speculative-moe raw token_pos pattern, else decode; and
    whether it came from token_pos."""
    rows = len(ref)
    marks = [r.phase for r in ref]
    if any(m is not None for m in marks):
        missing = next((r for r in ref if r.phase is None), None)
        if missing is not None:
            raise fail(missing.where, "phase", "a phase marker (other records have one)", "none")
        return np.array(marks, np.uint8), False
    inferred = False
    if src.opts.prefill_tokens is not None:
        prefill = min(src.opts.prefill_tokens, rows)
    elif all(r.token_pos is not None and r.token_idx is None for r in ref):
        # the raw recorder: prefill positions 0, 1, ..., P-1, then position 0 per decode step
        positive = [i for i, r in enumerate(ref) if r.token_pos]
        prefill, inferred = (positive[-1] + 1 if positive else 0), True
    else:
        prefill = 0
    return np.where(np.arange(rows) < prefill, PREFILL, DECODE).astype(np.uint8), inferred


def _check_token_order(groups: dict[str | None, dict[int, list[_Record]]], src: Source) -> None:
    total = disordered = 0
    for layers in groups.values():
        for recs in layers.values():
            tokens = [r.token_idx for r in recs]
            if None in tokens:
                continue
            total += 1
            disordered += tokens != list(range(len(recs)))
    if disordered:
        src.report.append(
            f"token_idx is not 0, 1, 2, ... in record order in {disordered} of {total} "
            "(request, layer) groups: rows follow record order"
        )

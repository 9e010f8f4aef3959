"""The ``sglang`` format: SGLang's ``meta_info["routed_experts"]`` (base64 ids, shaped by
``num_layers`` and ``top_k``), one record per request in JSON Lines or a JSON list. An *array*
format: the requests are stacked by :func:`~specmd_sim.traces.importers.common.stack_requests`.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Mapping
from typing import Any

import numpy as np

from specmd_sim.traces.importers.common import (
    ArrayRequest,
    Routing,
    Source,
    fail,
    int_field,
    json_records,
    note_unknown,
    stack_requests,
)

_SGLANG_DTYPES: dict[str, np.dtype[Any]] = {
    "int32": np.dtype("<i4"),
    "uint16": np.dtype("<u2"),
    "uint8": np.dtype("u1"),
}
_SGLANG_RECORD = frozenset(
    {
        "rid", "id", "request_id", "routed_experts", "routed_experts_dtype", "num_layers",
        "top_k", "prompt_tokens", "num_prompt_tokens", "meta_info",
    }
)  # fmt: skip


def import_sglang(src: Source) -> Routing:
    requests: list[ArrayRequest] = []
    skipped = 0
    for file, at, record in json_records(src, (".jsonl", ".json")):
        request = _sglang_request(record, src.where(file, at), src, len(requests) + skipped)
        if request is None:
            skipped += 1
        else:
            requests.append(request)
    if skipped:
        src.report.append(
            f"skipped {skipped} records without routed_experts (sent without "
            "return_routed_experts?)"
        )
    return stack_requests(requests, src)


def _sglang_request(record: Any, where: str, src: Source, index: int) -> ArrayRequest | None:
    if not isinstance(record, dict):
        raise fail(where, "record", "a JSON object", type(record).__name__)
    info = record.get("meta_info")
    flat = {**info, **record} if isinstance(info, dict) else dict(record)
    note_unknown(src, flat, _SGLANG_RECORD)
    payload = flat.get("routed_experts")
    if payload is None:
        return None
    if not isinstance(payload, str):
        raise fail(where, "routed_experts", "base64 text", type(payload).__name__)
    dtype_name = flat.get("routed_experts_dtype", "int32")
    if dtype_name not in _SGLANG_DTYPES:
        raise fail(where, "routed_experts_dtype", f"one of {list(_SGLANG_DTYPES)}", dtype_name)
    dtype = _SGLANG_DTYPES[dtype_name]
    layers = _shape_key(flat, "num_layers", src.opts.num_layers, where)
    top_k = _shape_key(flat, "top_k", src.opts.top_k, where)
    try:
        raw = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise fail(where, "routed_experts", "base64 text", f"undecodable ({exc})") from None
    row = dtype.itemsize * layers * top_k
    if len(raw) % row:
        raise fail(
            where,
            "routed_experts",
            f"a multiple of {row} bytes ({dtype_name} [tokens, {layers} layers, top-{top_k}])",
            f"{len(raw)} bytes",
        )
    ids = np.frombuffer(raw, dtype).astype(np.int64).reshape(-1, layers, top_k)
    name = next((flat[k] for k in ("rid", "id", "request_id") if k in flat), index)
    prompt = flat.get("prompt_tokens", flat.get("num_prompt_tokens"))
    return ArrayRequest(where, str(name), ids, prompt)


def _shape_key(record: Mapping[str, Any], key: str, option: int | None, where: str) -> int:
    if key in record:
        return int_field(where, key, record[key], 1)
    if option is None:
        flag = "--" + key.replace("_", "-")
        raise fail(where, key, f"a record key {key!r} or the option {flag}", "neither")
    return option

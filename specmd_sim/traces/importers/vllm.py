"""The ``vllm`` format: vLLM's ``CompletionOutput.routed_experts``, one ``[tokens, layers,
top_k]`` id array per request, in ``.npy``, ``.npz`` or ``.json`` files (or a folder of them).
An *array* format: the requests are stacked by
:func:`~specmd_sim.traces.importers.common.stack_requests`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from specmd_sim.traces.importers.common import (
    ArrayRequest,
    Routing,
    Source,
    fail,
    input_files,
    load_json,
    note_unknown,
    stack_requests,
)
from specmd_sim.traces.io import read_npy, read_npz


def import_vllm(src: Source) -> Routing:
    requests: list[ArrayRequest] = []
    for file in input_files(src, (".npy", ".npz", ".json")):
        suffix, where = file.suffix.lower(), src.where(file)
        if suffix == ".npy":
            requests.append(ArrayRequest(where, file.stem, read_npy(file, where)))
        elif suffix == ".npz":
            requests.extend(_vllm_npz(file, src))
        elif suffix == ".json":
            requests.extend(_vllm_json(file, src))
        else:
            raise fail(where, "input", "a .npy, .npz or .json file", repr(file.name))
    return stack_requests(requests, src)


def _vllm_npz(file: Path, src: Source) -> list[ArrayRequest]:
    members = {name: np.asarray(arr) for name, arr in read_npz(file, src.where(file)).items()}
    if "routed_experts" in members:
        note_unknown(src, members, frozenset({"routed_experts", "num_prompt_tokens"}))
        prompt = members.get("num_prompt_tokens")
        return [
            ArrayRequest(
                src.where(file),
                file.stem,
                members["routed_experts"],
                None if prompt is None else prompt.tolist(),
            )
        ]
    return [
        ArrayRequest(src.where(file, f"member {name!r}"), name, arr)
        for name, arr in members.items()
    ]


def _depth(value: Any) -> int:
    depth = 0
    while isinstance(value, list) and value:
        depth, value = depth + 1, value[0]
    return depth


_VLLM_RECORD = frozenset({"routed_experts", "num_prompt_tokens", "request_id"})


def _vllm_json(file: Path, src: Source) -> list[ArrayRequest]:
    data = load_json(file, src)
    items: list[tuple[str, Any]]
    if isinstance(data, dict) and "routed_experts" in data:
        items = [(file.stem, data)]
    elif isinstance(data, dict):
        items = [(str(name), value) for name, value in data.items()]
    elif isinstance(data, list) and _depth(data) == 3:  # one request: [tokens][layers][top_k]
        items = [(file.stem, data)]
    elif isinstance(data, list):
        items = [(str(i), value) for i, value in enumerate(data)]
    else:
        raise fail(src.where(file), "input", "a JSON list or object", type(data).__name__)
    out = []
    for name, value in items:
        where = src.where(file, f"request {name!r}")
        if isinstance(value, dict):
            if "routed_experts" not in value:
                raise fail(where, "routed_experts", "a key 'routed_experts'", sorted(value))
            note_unknown(src, value, _VLLM_RECORD)
            rid = str(value.get("request_id", name))
            value, prompt = value["routed_experts"], value.get("num_prompt_tokens")
            out.append(ArrayRequest(where, rid, value, prompt))
        else:
            out.append(ArrayRequest(where, name, value))
    return out

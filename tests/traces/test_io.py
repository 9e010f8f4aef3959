"""Reading ``.npz`` traces: damaged or forged archives, pickled members and traces without a
routed expert give one line naming the file and the member; -1 padding still loads."""

from __future__ import annotations

import io
import json
import re
import struct
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from specmd_sim import build_config
from specmd_sim.errors import SpecmdError
from specmd_sim.scenario.build import build_scenario
from specmd_sim.traces.io import load_trace, save_trace
from specmd_sim.traces.trace import Trace, make_trace

META = {"format": "specmd-trace", "version": 1, "model": "mixtral-8x7b", "num_layers": 2,
        "num_experts": 8, "top_k": 2}  # fmt: skip


def members(experts: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """A valid 3-token trace of 2 layers: experts 0 and 1 everywhere, one decode request."""
    if experts is None:
        experts = np.tile(np.array([0, 1], np.int16), (3, 2, 1))
    t = experts.shape[0]
    return {"meta": np.array(json.dumps(META)), "experts": experts,
            "request": np.zeros(t, np.int32), "phase": np.ones(t, np.uint8)}  # fmt: skip


def write_npz(path: Path, arrays: dict[str, np.ndarray], *, compress: bool = True,
              raw: dict[str, bytes] | None = None, pickle: bool = False) -> Path:  # fmt: skip
    """``arrays`` as ``.npy`` members, and ``raw`` members written byte for byte."""
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    with zipfile.ZipFile(path, "w", method) as zf:
        for name, arr in arrays.items():
            with zf.open(f"{name}.npy", "w") as fh:
                np.lib.format.write_array(fh, arr, allow_pickle=pickle)
        for name, data in (raw or {}).items():
            zf.writestr(f"{name}.npy", data)
    return path


def npy_header(shape: tuple[int, ...]) -> bytes:
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<i2", "fortran_order": False, "shape": shape}
    )
    return header.getvalue()


def refused(path: Path) -> str:
    with pytest.raises(SpecmdError) as info:
        load_trace(path)
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("compress", [True, False])
def test_a_header_claiming_more_data_than_the_member_holds(tmp_path: Path, compress: bool) -> None:
    arrays = {k: v for k, v in members().items() if k != "experts"}
    header = npy_header((10**12, 2, 2))
    path = write_npz(
        tmp_path / "t.npz", arrays, compress=compress, raw={"experts": header + b"\0" * 12}
    )
    assert refused(path) == (
        f"trace {path}: experts: expected a header matching the member's 12 bytes of data, got "
        "shape [1000000000000, 2, 2] of int16 (8,000,000,000,000 bytes)"
    )


def test_a_zip_directory_claiming_more_than_deflate_can_give(tmp_path: Path) -> None:
    """The member's size in the central directory and its header agree, but its few
    compressed bytes cannot expand to that many."""
    shape, data = (10**6, 2, 2), b"\0" * 8
    header = npy_header(shape)
    arrays = {k: v for k, v in members().items() if k != "experts"}
    path = write_npz(tmp_path / "t.npz", arrays, raw={"experts": header + data})
    forged = len(header) + 8 * 10**6  # int16
    raw = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo("experts.npy")
    entry = _central_entry(raw, "experts.npy")
    struct.pack_into("<I", raw, entry + 24, forged)  # the uncompressed size
    path.write_bytes(bytes(raw))
    limit = 1032 * info.compress_size
    assert refused(path) == (
        f"trace {path}: experts: expected at most {limit:,} bytes from {info.compress_size:,} "
        f"bytes in the archive (at most 1032:1), got a zip directory claiming {forged:,}"
    )


def _central_entry(raw: bytearray, name: str) -> int:
    """Offset of ``name``'s central-directory header."""
    at = raw.index(b"PK\x01\x02")
    while raw[at + 46 : at + 46 + len(name)] != name.encode():
        at = raw.index(b"PK\x01\x02", at + 4)
    return at


def test_a_corrupt_deflate_stream_names_the_member(tmp_path: Path) -> None:
    experts = np.arange(3 * 2 * 2, dtype=np.int16).reshape(3, 2, 2) % 8
    path = write_npz(tmp_path / "t.npz", members(experts))
    raw = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as zf:
        info = zf.getinfo("experts.npy")
    local = info.header_offset
    start = local + 30 + int.from_bytes(raw[local + 26 : local + 28], "little")
    start += int.from_bytes(raw[local + 28 : local + 30], "little")
    raw[start : start + info.compress_size] = b"\xff" * info.compress_size
    path.write_bytes(bytes(raw))
    assert re.fullmatch(
        rf"trace {re.escape(str(path))}: experts: expected a readable \.npy member, got .+",
        refused(path),
    )


def test_a_member_flagged_encrypted_names_the_member(tmp_path: Path) -> None:
    path = write_npz(tmp_path / "t.npz", members())
    raw = bytearray(path.read_bytes())
    entry = _central_entry(raw, "request.npy")
    raw[entry + 8] |= 0x01  # general purpose flag bit 0: encrypted
    path.write_bytes(bytes(raw))
    assert re.fullmatch(
        rf"trace {re.escape(str(path))}: request: expected a readable \.npy member, got File "
        r".*request\.npy.* is encrypted, password required for extraction",
        refused(path),
    )


@pytest.mark.parametrize("name", ["experts", "meta"])
def test_a_pickled_member_is_refused_by_name(tmp_path: Path, name: str) -> None:
    arrays = members()
    arrays[name] = np.array([arrays[name].tolist()], dtype=object)
    path = write_npz(tmp_path / "t.npz", arrays, pickle=True)
    expected = "a JSON string" if name == "meta" else "a numeric array"
    assert refused(path) == (
        f"trace {path}: {name}: expected {expected}, got an object (pickled) array"
    )


def test_meta_nested_too_deep(tmp_path: Path) -> None:
    arrays = members()
    arrays["meta"] = np.array("[" * 100_000 + "]" * 100_000)
    path = write_npz(tmp_path / "t.npz", arrays)
    assert refused(path) == (
        f"trace {path}: meta: expected a JSON string, got nesting too deep to parse"
    )


@pytest.mark.parametrize("compress", [True, False])
def test_a_trace_of_nothing_but_padding_is_refused(tmp_path: Path, compress: bool) -> None:
    path = write_npz(tmp_path / "t.npz", members(np.full((3, 2, 2), -1, np.int16)),
                     compress=compress)  # fmt: skip
    assert refused(path) == (
        f"trace {path}: experts: expected at least one routed expert (ids >= 0), got none (all -1)"
    )


@pytest.mark.parametrize("compress", [True, False])
def test_padding_with_minus_one_loads(tmp_path: Path, compress: bool) -> None:
    """A token or a whole layer without records (-1) is legitimate, as importers write it."""
    experts = np.tile(np.array([0, 1], np.int16), (3, 2, 1))
    experts[0] = -1  # a token without any record
    experts[:, 1, 1] = -1  # one slot of a layer never recorded
    path = write_npz(tmp_path / "t.npz", members(experts), compress=compress)
    trace = load_trace(path)
    np.testing.assert_array_equal(trace.experts, experts)
    saved = save_trace(trace, tmp_path / "again.npz", compress=compress)
    np.testing.assert_array_equal(load_trace(saved).experts, experts)
    assert trace.padded and load_trace(saved).padded  # (known from the validation)
    unpadded = np.tile(np.array([0, 1], np.int16), (3, 2, 1))
    full = write_npz(tmp_path / "full.npz", members(unpadded), compress=compress)
    assert not load_trace(full).padded
    for routed in (experts, unpadded):  # a Trace made by hand works it out
        made = Trace(routed, trace.request, trace.phase, trace.meta)
        assert made.padded == bool((routed < 0).any())


def test_make_trace_refuses_ragged_lists() -> None:
    experts: Any = [[[0, 1]], [[0]]]  # lists, as a caller may pass them
    with pytest.raises(SpecmdError) as info:
        make_trace(experts, model="mixtral-8x7b", num_experts=8)
    assert str(info.value) == (
        "trace: experts: expected an array (lists of equal lengths), got ragged lists"
    )
    request: Any = [[0], [0, 1]]
    with pytest.raises(SpecmdError, match=r"^trace: request: expected an array .*ragged"):
        make_trace(np.zeros((2, 1, 1), np.int16), model="m", num_experts=8, request=request)


@pytest.mark.parametrize(
    ("changes", "said"),
    [
        ({"model": None}, "model: expected a model id (a catalog name or a model spec's path), "
                          "got None"),
        ({"model": 123}, "model: expected a model id"),
        ({"note": object()}, "note: expected a JSON value"),
        ({"x": float("nan")}, "x: expected a JSON value (text, a finite number, true/false, "
                              "null, or lists and mappings of them), got nan"),
    ],
)  # fmt: skip
def test_make_trace_refuses_what_save_trace_could_not_write(changes: dict, said: str) -> None:
    """The model must be an id and every extra meta key a JSON value: refused when the trace
    is made, where save_trace raised a TypeError (or wrote NaN, which is not JSON) later."""
    fields: dict[str, Any] = {"model": "m", **changes}
    with pytest.raises(SpecmdError, match=f"^trace: {re.escape(said)}"):
        make_trace(np.zeros((2, 1, 1), np.int16), num_experts=8, **fields)


def test_an_unknown_model_in_meta_names_the_trace(tmp_path: Path) -> None:
    meta = {**META, "model": "gpt-9", "num_layers": 32}
    experts = np.tile(np.array([0, 1], np.int16), (3, 32, 1))
    arrays = {**members(experts), "meta": np.array(json.dumps(meta))}
    path = write_npz(tmp_path / "t.npz", arrays)
    config = build_config({"trace": str(path), "cache": {"capacity": 16}})
    with pytest.raises(SpecmdError) as info:
        build_scenario(config)
    assert re.fullmatch(
        rf"trace {re.escape(str(path))}: meta\.model: expected one of olmoe-1b-7b, .*, got "
        r"'gpt-9'",
        str(info.value),
    )

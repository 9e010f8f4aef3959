"""Reading and writing traces as ``.npz`` (no pickles; byte-reproducible; memory-mappable).

Files are written with fixed zip timestamps, so the same arrays always give the same bytes.
``compress=False`` stores members uncompressed, and such members are then memory-mapped on
load instead of being read into memory: that is how large traces stay cheap.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

from specmd_sim._data import data_dir
from specmd_sim.atomic import atomic_file, check_output
from specmd_sim.errors import SpecmdError
from specmd_sim.traces.trace import Trace, validate_trace

ARRAY_NAMES = ("experts", "gates", "pred_scores", "request", "phase", "arrival_s")
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)


def bundled_trace_path(name: str) -> Path:
    """Path of a bundled example trace, e.g. ``'olmoe-synthetic'``."""
    return data_dir("traces") / f"{name}.npz"


def list_bundled_traces() -> list[str]:
    return sorted(p.stem for p in data_dir("traces").glob("*.npz"))


def resolve_trace_path(ref: str | Path) -> Path:
    """A path as given, or the bundled trace of that name."""
    path = Path(ref)
    if path.is_file():
        return path
    if path.suffix == "" and bundled_trace_path(str(ref)).is_file():
        return bundled_trace_path(str(ref))
    raise SpecmdError(
        f"trace: expected a path to an .npz file or a bundled trace name "
        f"({', '.join(list_bundled_traces())}), got {str(ref)!r}"
    )


def save_trace(trace: Trace, path: str | Path, *, compress: bool = True) -> Path:
    """Write ``trace`` atomically to ``path`` (``.npz``)."""
    path = Path(path)
    check_output(path, "trace", folder=False)
    path.parent.mkdir(parents=True, exist_ok=True)
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    members: dict[str, np.ndarray] = {"meta": np.array(json.dumps(trace.meta, sort_keys=True))}
    for name in ARRAY_NAMES:
        arr = getattr(trace, name)
        if arr is not None:
            members[name] = np.ascontiguousarray(arr)
    with atomic_file(path) as tmp, zipfile.ZipFile(tmp, "w", method, allowZip64=True) as zf:
        for name, arr in members.items():
            info = zipfile.ZipInfo(f"{name}.npy", date_time=_FIXED_TIME)
            info.compress_type = method
            with zf.open(info, "w", force_zip64=True) as fh:
                np.lib.format.write_array(fh, arr, allow_pickle=False)
    return path


def load_trace(ref: str | Path) -> Trace:
    """Load and validate a trace; uncompressed members are memory-mapped."""
    path = resolve_trace_path(ref)
    source = f"trace {path}"
    try:
        arrays = _read_members(path)
    except (OSError, zipfile.BadZipFile, ValueError) as exc:
        raise SpecmdError(f"{source}: expected a readable .npz archive, got {exc}") from None
    if "experts" not in arrays or "meta" not in arrays:
        raise SpecmdError(f"{source}: expected arrays 'experts' and 'meta', got {sorted(arrays)}")
    try:
        meta = json.loads(str(arrays.pop("meta")[()]))
    except (json.JSONDecodeError, IndexError) as exc:
        raise SpecmdError(f"{source}: meta: expected a JSON string, got {exc}") from None
    required = {"request", "phase"} - set(arrays)
    if required:
        raise SpecmdError(f"{source}: expected arrays {sorted(required)}, got {sorted(arrays)}")
    return validate_trace(arrays, meta, source)


def _read_members(path: Path) -> dict[str, Any]:
    out: dict[str, Any] = {}
    with zipfile.ZipFile(path) as zf:
        for info in zf.infolist():
            name = info.filename.removesuffix(".npy")
            if info.compress_type == zipfile.ZIP_STORED and name != "meta":
                out[name] = _memmap_member(path, zf, info)
            else:
                with zf.open(info) as fh:
                    out[name] = np.lib.format.read_array(fh, allow_pickle=False)
    return out


def _memmap_member(path: Path, zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> np.ndarray:
    """Memory-map an uncompressed ``.npy`` member of a zip archive."""
    with open(path, "rb") as raw:
        raw.seek(info.header_offset)
        local = raw.read(30)
        name_len = int.from_bytes(local[26:28], "little")
        extra_len = int.from_bytes(local[28:30], "little")
        start = info.header_offset + 30 + name_len + extra_len
        raw.seek(start)
        version = np.lib.format.read_magic(raw)
        read_header = (
            np.lib.format.read_array_header_1_0
            if version == (1, 0)
            else np.lib.format.read_array_header_2_0
        )
        shape, fortran, dtype = read_header(raw)
        if dtype.hasobject:
            raise ValueError(f"member {info.filename} holds Python objects")
        offset = raw.tell()
    if int(np.prod(shape)) == 0:
        return np.zeros(shape, dtype)
    return np.memmap(
        path, dtype=dtype, mode="r", offset=offset, shape=shape, order="F" if fortran else "C"
    )

"""Reading and writing traces as ``.npz`` (no pickles; byte-reproducible; memory-mappable).

Files are written with fixed zip timestamps, so the same arrays always give the same bytes.
``compress=False`` stores members uncompressed, and such members are then memory-mapped on
load instead of being read into memory: that is how large traces stay cheap. Before any data is
read, the compressed members' sizes in the zip directory are checked against the archive's size
(``MAX_EXPANSION``), and each ``.npy`` header against its member's (or file's) size, so that a
zip bomb or a header claiming a huge shape allocates nothing. :func:`read_npz` and
:func:`read_npy` are these readers, for any ``.npy`` input (the ``vllm`` importer's too).
"""

from __future__ import annotations

import json
import math
import zipfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np

from specmd_sim._data import data_dir
from specmd_sim.atomic import atomic_file, check_output
from specmd_sim.errors import SpecmdError
from specmd_sim.traces.trace import Trace, validate_trace
from specmd_sim.units import format_bytes

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
    method = zipfile.ZIP_DEFLATED if compress else zipfile.ZIP_STORED
    members: dict[str, np.ndarray] = {"meta": np.array(json.dumps(trace.meta, sort_keys=True))}
    for name in ARRAY_NAMES:
        arr = getattr(trace, name)
        if arr is not None:
            members[name] = np.ascontiguousarray(arr)
    with (
        atomic_file(path, "trace") as tmp,
        zipfile.ZipFile(tmp, "w", method, allowZip64=True) as zf,
    ):
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
    arrays = read_npz(path, source)
    if "experts" not in arrays or "meta" not in arrays:
        raise SpecmdError(f"{source}: expected arrays 'experts' and 'meta', got {sorted(arrays)}")
    try:
        meta = json.loads(str(arrays.pop("meta")[()]))
    except (json.JSONDecodeError, IndexError) as exc:
        raise SpecmdError(f"{source}: meta: expected a JSON string, got {exc}") from None
    except RecursionError:
        raise SpecmdError(
            f"{source}: meta: expected a JSON string, got nesting too deep to parse"
        ) from None
    required = {"request", "phase"} - set(arrays)
    if required:
        raise SpecmdError(f"{source}: expected arrays {sorted(required)}, got {sorted(arrays)}")
    return validate_trace(arrays, meta, source)


# What a damaged archive raises while it is read: zipfile's own errors, zlib's for a corrupt
# deflate stream, EOFError for one cut short, RuntimeError for a member flagged encrypted,
# NotImplementedError for an unknown compression method, ValueError for a bad .npy header.
_DAMAGED = (
    OSError, EOFError, ValueError, RuntimeError, NotImplementedError, zipfile.BadZipFile,
    zlib.error,
)  # fmt: skip
# The most bytes one stored byte of a member gives: deflate emits at most 258 bytes per 2 bits
# (a longest match at distance 1), zlib's documented limit of 1032:1.
_MAX_RATIO = {zipfile.ZIP_STORED: 1, zipfile.ZIP_DEFLATED: 1032}
MAX_EXPANSION = 256
"""Compressed members are read into memory: together they may decompress to this many times the
archive's size (or to ``FREE_EXPANSION``). Routing compresses 1.4:1 (the bundled traces) to 2:1
(all layers logged), an import that is mostly ``-1`` padding up to 100:1 (one logged layer of
94, top-8; measured), while zeros compress 1032:1, so that a zip bomb of a few MB claims
gigabytes. A trace more repetitive still is saved uncompressed (``compress=False``), and then
memory-mapped."""
FREE_EXPANSION = 1 << 28
"""256 MiB: what compressed members may always decompress to, whatever the archive's size."""


def read_npz(path: Path, source: str) -> dict[str, Any]:
    """Every member's array (no pickles), the uncompressed ones but ``meta`` memory-mapped; one
    line naming ``source`` (and the member) if the archive is damaged or claims more than it
    can hold."""
    try:
        zf = zipfile.ZipFile(path)
    except _DAMAGED as exc:
        raise SpecmdError(f"{source}: expected a readable .npz archive, got {exc}") from None
    out: dict[str, Any] = {}
    with zf:
        _check_expansion(zf.infolist(), path.stat().st_size, source)
        for info in zf.infolist():
            name = info.filename.removesuffix(".npy")
            where = f"{source}: {name}"
            try:
                out[name] = _read_member(path, zf, info, name, where)
            except MemoryError:
                raise SpecmdError(
                    f"{where}: expected an array that fits in memory, got "
                    f"{format_bytes(info.file_size)} (save the trace uncompressed to "
                    "memory-map it)"
                ) from None
            except _DAMAGED as exc:
                raise SpecmdError(f"{where}: expected a readable .npy member, got {exc}") from None
    return out


def _read_member(
    path: Path, zf: zipfile.ZipFile, info: zipfile.ZipInfo, name: str, where: str
) -> Any:
    """A member's array, once its header agrees with its size in the zip directory; the
    uncompressed ones but ``meta`` memory-mapped."""
    with zf.open(info) as fh:
        shape, fortran, dtype, header_bytes = _read_header(fh)
    if dtype.hasobject:
        expected = "a JSON string" if name == "meta" else "a numeric array"
        raise SpecmdError(f"{where}: expected {expected}, got an object (pickled) array")
    _check_size(info, shape, dtype, header_bytes, path.stat().st_size, where)
    if info.compress_type != zipfile.ZIP_STORED or name == "meta":
        with zf.open(info) as fh:
            return np.lib.format.read_array(fh, allow_pickle=False)
    if math.prod(shape) == 0:
        return np.zeros(shape, dtype)
    return np.memmap(
        path,
        dtype=dtype,
        mode="r",
        offset=_data_start(path, info) + header_bytes,
        shape=shape,
        order="F" if fortran else "C",
    )


def read_npy(path: Path, source: str) -> np.ndarray:
    """A ``.npy`` file's array (no pickles), once its header's shape agrees with the file's
    size; one line naming ``source`` otherwise."""
    try:
        with open(path, "rb") as fh:
            shape, _, dtype, header_bytes = _read_header(fh)
        _check_claim(f"{source}: shape", shape, dtype, path.stat().st_size - header_bytes, "file")
        return np.asarray(np.load(path, allow_pickle=False))
    except _DAMAGED as exc:
        raise SpecmdError(f"{source}: expected a .npy array (no pickles), got {exc}") from None


def _read_header(fh: Any) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    """(shape, Fortran order, dtype, bytes up to the data) of the ``.npy`` header at ``fh``."""
    version = np.lib.format.read_magic(fh)
    read_header = (
        np.lib.format.read_array_header_1_0
        if version == (1, 0)
        else np.lib.format.read_array_header_2_0
    )
    shape, fortran, dtype = read_header(fh)
    return shape, fortran, dtype, fh.tell()


def _check_expansion(infos: list[zipfile.ZipInfo], archive_bytes: int, source: str) -> None:
    """The compressed members decompress to at most ``MAX_EXPANSION`` times the archive's size
    (or ``FREE_EXPANSION``), by the zip directory: checked before any is read."""
    packed = [info for info in infos if info.compress_type != zipfile.ZIP_STORED]
    total = sum(info.file_size for info in packed)
    limit = max(FREE_EXPANSION, MAX_EXPANSION * archive_bytes)
    if total > limit:
        largest = max(packed, key=lambda info: info.file_size).filename.removesuffix(".npy")
        raise SpecmdError(
            f"{source}: {largest}: expected compressed members decompressing to at most "
            f"{limit:,} bytes in all ({MAX_EXPANSION} times the archive's {archive_bytes:,} "
            f"bytes, at least {format_bytes(FREE_EXPANSION)}; store it uncompressed), "
            f"got {total:,} bytes"
        )


def _check_claim(where: str, shape: tuple[int, ...], dtype: np.dtype, held: int,
                 holder: str) -> None:  # fmt: skip
    """A header claims exactly the data bytes its member or file holds."""
    claimed = math.prod(shape) * dtype.itemsize
    if claimed != held:
        raise SpecmdError(
            f"{where}: expected a header matching the {holder}'s {held:,} bytes of data, got "
            f"shape {list(shape)} of {dtype} ({claimed:,} bytes)"
        )


def _check_size(info: zipfile.ZipInfo, shape: tuple[int, ...], dtype: np.dtype,
                header_bytes: int, archive_bytes: int, where: str) -> None:  # fmt: skip
    """A member's header claims the data bytes the zip directory says it holds, and no more
    than its bytes in the archive expand to: nothing is allocated for a shape the file cannot
    hold. (A compression method other than stored or deflated is read as it comes, within
    ``MAX_EXPANSION``.)"""
    _check_claim(where, shape, dtype, info.file_size - header_bytes, "member")
    ratio = _MAX_RATIO.get(info.compress_type)
    stored = min(info.compress_size, archive_bytes)
    if ratio is not None and info.file_size > ratio * stored:
        raise SpecmdError(
            f"{where}: expected at most {ratio * stored:,} bytes from {stored:,} bytes in the "
            f"archive (at most {ratio}:1), got a zip directory claiming {info.file_size:,}"
        )


def _data_start(path: Path, info: zipfile.ZipInfo) -> int:
    """Offset in the file of an uncompressed member's first byte (after its local header)."""
    with open(path, "rb") as raw:
        raw.seek(info.header_offset)
        local = raw.read(30)
    name_len = int.from_bytes(local[26:28], "little")
    extra_len = int.from_bytes(local[28:30], "little")
    return info.header_offset + 30 + name_len + extra_len

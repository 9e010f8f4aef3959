"""The run folder's gzip files (the trace), written a chunk at a time, and its zip of deflated
members (the spans): by zlib-ng where it is installed (the ``fast`` extra), else by the
standard library's zlib.

Both write standard gzip (RFC 1952) that every reader opens (``gzip``, ``trace_processor``,
ui.perfetto.dev); zlib-ng (https://github.com/zlib-ng/zlib-ng, through the ``zlib-ng`` package)
finds its matches faster. The default run's Perfetto trace at 4,000 tokens, 123 MB of protobuf,
takes it ~0.22 s of CPU at level 3 for 9.8 MB, where zlib takes ~0.35 s for 10.0 MB (2 cores,
2026-12-07; ``perfetto.GZIP_LEVEL``, ``benchmarks/outputs_size.py``). The compressed bytes
differ between the two, and zlib-ng does not promise the same bytes across its versions or
CPU architectures (its issue #795): the same inputs give the same bytes with one compressor on
one machine; what they unpack to is the same everywhere. :func:`compressor` is the one check
that picks it, and says why the fast one is not taken (``specmd run`` and its ``--profile``
print it).
"""

from __future__ import annotations

import os
import struct
import zlib
from collections import deque
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from specmd_sim.atomic import atomic_file


def _zlib_ng() -> Any:
    """zlib-ng's deflate (its ``zlib`` module) where it is installed, else None."""
    try:
        from zlib_ng import zlib_ng
    except ImportError:
        return None
    return zlib_ng


def compressor() -> tuple[str, str | None]:
    """The compressor the run folder's gzip files are written with, and why it is not zlib-ng
    (None when it is)."""
    if _zlib_ng() is not None:
        return "zlib-ng", None
    return "zlib", "zlib-ng is not installed (pip install 'specmd-sim[fast]')"


def gzip_bytes(data: bytes, levels: dict[str, int]) -> bytes:
    """``data`` as one gzip member (no name, time 0) by :func:`compressor`'s compressor, at
    its level in ``levels`` (by compressor name)."""
    name, _ = compressor()
    deflate = _zlib_ng() or zlib
    return deflate.compress(data, levels[name], wbits=31)


def write_gzip(path: Path, chunks: Iterable[bytes | memoryview], level: int) -> None:
    """Write ``chunks`` gzip-compressed at ``level`` to ``path`` (atomically). A chunk is read
    where it lies until it is compressed: it must not change once given.

    The bytes are cut in blocks of :data:`BLOCK`, compressed on up to :data:`MAX_THREADS`
    threads at once (the compressors release the GIL) while the next chunks are made, and
    joined in order into one deflate stream, as pigz does: each block primed with the last
    :data:`WINDOW` bytes before it (deflate's whole window, so it finds the matches one stream
    would) and ended by a sync flush, then an empty final block. The header names no file and
    no time, so the same bytes give the same file with one compressor on one machine, however
    they come chunked and on however many threads.
    """
    deflate = _zlib_ng() or zlib
    threads = max(1, min(MAX_THREADS, os.cpu_count() or 1))
    with atomic_file(path) as tmp, open(tmp, "wb") as out, ThreadPoolExecutor(threads) as pool:
        xfl = 2 if level == 9 else 4 if level == 1 else 0  # (as the gzip module writes it)
        out.write(b"\x1f\x8b\x08\x00\x00\x00\x00\x00" + bytes((xfl, 255)))
        blocks: deque[Future[bytes]] = deque()
        crc = size = 0
        primer: bytes | memoryview = b""

        def submit(block: bytes | memoryview) -> None:
            nonlocal crc, size, primer
            crc, size = deflate.crc32(block, crc), size + len(block)
            blocks.append(pool.submit(_deflate, deflate, level, block, primer))
            primer = block[-WINDOW:]
            while len(blocks) > threads:  # (a block a thread in flight, at most)
                out.write(blocks.popleft().result())

        # A block within one chunk is compressed where it lies (a view of it); one across
        # chunks is joined, the one copy (made holding the GIL the chunks' encoders need).
        pending: list[memoryview] = []
        held = 0
        for piece in chunks:
            view = memoryview(piece).cast("B")  # (its bytes, whatever its item type)
            while len(view):
                part, view = view[: BLOCK - held], view[BLOCK - held :]
                pending.append(part)
                held += len(part)
                if held == BLOCK:
                    submit(_joined(pending))
                    pending, held = [], 0
        if pending:
            submit(_joined(pending))
        while blocks:
            out.write(blocks.popleft().result())
        out.write(_FINAL_BLOCK + struct.pack("<II", crc, size & 0xFFFFFFFF))


BLOCK = 1 << 22
"""Bytes compressed as one block: 4 MiB (the default run's trace at 4,000 tokens is ~30)."""
WINDOW = 1 << 15
MAX_THREADS = 4
MEM_LEVEL = 9
"""deflate's memory for its hash table, at its most: the default run's trace at 4,000 tokens,
level 3, by zlib-ng in 0.189 s of CPU against 0.197 s at the default 8, and 0.1% smaller (2
cores, 2026-12-07)."""
_FINAL_BLOCK = b"\x03\x00"  # (a fixed-Huffman block of no symbols, marked final)


def _joined(parts: list[memoryview]) -> bytes | memoryview:
    """The parts' bytes as one block: the one part itself, else joined (a copy)."""
    return parts[0] if len(parts) == 1 else b"".join(parts)


def _deflate(
    deflate: Any, level: int, block: bytes | memoryview, primer: bytes | memoryview
) -> bytes:
    """``block`` as raw deflate primed with ``primer``, ended by a sync flush (the stream goes
    on: no final block)."""
    compressor = deflate.compressobj(level, deflate.DEFLATED, -15, MEM_LEVEL, zdict=primer)
    return compressor.compress(block) + compressor.flush(deflate.Z_SYNC_FLUSH)


def write_zip(path: Path, members: Iterable[tuple[str, list[Any]]], level: int) -> None:
    """Write a zip archive (atomically) of ``members``, each a name and the buffers its bytes
    are (in order; read where they lie), deflated at ``level`` by :func:`compressor`'s
    compressor, one member at a time. ZIP64 records throughout (any size), every member's time
    1980-01-01 00:00 and no attributes, so the same members give the same bytes with one
    compressor on one machine, as :func:`write_gzip`'s. What ``zipfile`` (and ``numpy.load``)
    reads; written here rather than by ``zipfile``, whose deflate is the standard library's."""
    deflate = _zlib_ng() or zlib
    central = []
    with atomic_file(path) as tmp, open(tmp, "wb") as out:
        for name, parts in members:
            compressor = deflate.compressobj(level, deflate.DEFLATED, -15)
            packed = [compressor.compress(part) for part in parts] + [compressor.flush()]
            crc = size = 0
            for part in parts:
                crc, size = deflate.crc32(part, crc), size + memoryview(part).nbytes
            packed_size = sum(len(p) for p in packed)
            raw = name.encode()
            utf8 = 0 if name.isascii() else 0x800  # (general purpose flag 11: a UTF-8 name)
            offset = out.tell()
            extra = struct.pack("<HHQQ", 1, 16, size, packed_size)
            out.write(_LOCAL.pack(0x04034B50, 45, utf8, 8, 0, _DATE, crc, _FULL, _FULL, len(raw),
                                  len(extra)) + raw + extra)  # fmt: skip
            out.writelines(packed)
            extra = struct.pack("<HHQQQ", 1, 24, size, packed_size, offset)
            entry = (0x02014B50, 45, 45, utf8, 8, 0, _DATE, crc, _FULL, _FULL, len(raw), len(extra))
            central.append(_CENTRAL.pack(*entry, 0, 0, 0, 0, _FULL) + raw + extra)
        start, n = out.tell(), len(central)
        out.writelines(central)
        end = out.tell()
        out.write(struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, n, n, end - start,
                              start))  # fmt: skip
        out.write(struct.pack("<IIQI", 0x07064B50, 0, end, 1))
        out.write(struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, min(n, 0xFFFF), min(n, 0xFFFF),
                              min(end - start, _FULL), _FULL, 0))  # fmt: skip


_LOCAL = struct.Struct("<IHHHHHIIIHH")
_CENTRAL = struct.Struct("<IHHHHHHIIIHHHHHII")
_DATE = 33  # 1980-01-01 in MS-DOS's date format ((year - 1980) << 9 | month << 5 | day)
_FULL = 0xFFFFFFFF  # (a 32-bit field whose value is in the ZIP64 extra field)

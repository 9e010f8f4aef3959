"""The run folder's gzip files (the trace), written a chunk at a time: by zlib-ng where it is
installed (the ``fast`` extra), else by the standard library's zlib.

Both write standard gzip (RFC 1952) that every reader opens (``gzip``, ``trace_processor``,
ui.perfetto.dev); zlib-ng (https://github.com/zlib-ng/zlib-ng, through the ``zlib-ng`` package)
finds its matches faster. The default run's Perfetto trace at 4,000 tokens, 123 MB of protobuf,
takes it ~0.5 s at level 5 for 9.5 MB, where zlib takes ~1.0 s for 9.8 MB (2 cores,
2026-12-06; ``benchmarks/outputs_size.py``). The compressed bytes differ between the two,
and zlib-ng does not promise the same bytes across its versions or CPU architectures (its
issue #795): the same inputs give the same bytes with one compressor on one machine; what
they unpack to is the same everywhere. :func:`compressor` is the one check that picks it, and
says why the fast one is not taken (``specmd run`` and its ``--profile`` print it).
"""

from __future__ import annotations

import gzip
from collections.abc import Iterable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

from specmd_sim.atomic import atomic_file


def _zlib_ng() -> Any:
    try:
        from zlib_ng import gzip_ng
    except ImportError:
        return None
    return gzip_ng


def compressor() -> tuple[str, str | None]:
    """The compressor the run folder's gzip files are written with, and why it is not zlib-ng
    (None when it is)."""
    if _zlib_ng() is not None:
        return "zlib-ng", None
    return "zlib", "zlib-ng is not installed (pip install 'specmd-sim[fast]')"


def write_gzip(path: Path, chunks: Iterable[bytes], level: int) -> None:
    """Write ``chunks`` gzip-compressed at ``level`` to ``path`` (atomically), compressing one
    chunk in a thread while the next is made (the compressors release the GIL). The header
    names no file and no time, so the same chunks give the same bytes with one compressor
    (on one machine)."""
    module = _zlib_ng() or gzip
    with (
        atomic_file(path) as tmp,
        open(tmp, "wb") as raw,
        module.GzipFile(filename="", mode="wb", fileobj=raw, compresslevel=level, mtime=0) as out,
        ThreadPoolExecutor(1) as pool,
    ):
        writing: Future[int] | None = None
        for piece in chunks:
            if writing is not None:
                writing.result()
            writing = pool.submit(out.write, piece)
        if writing is not None:
            writing.result()

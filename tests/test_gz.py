"""The run folder's gzip files (:mod:`specmd_sim.gz`): zlib-ng where it is installed, the
standard library's zlib otherwise; either way standard gzip that unpacks to the chunks written,
the same bytes for the same chunks, and the choice said (the summary, ``--profile``)."""

from __future__ import annotations

import gzip
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest
from support.cli import cli

from specmd_sim import gz

# compressible and not: a trace's packets repeat, its timestamps do not
CHUNKS = [bytes(range(256)) * 400, b"", zlib.compress(bytes(range(256)) * 50), b"end" * 9]


def _without_zlib_ng(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gz, "_zlib_ng", lambda: None)


@pytest.mark.parametrize("fast", [True, False], ids=["zlib-ng", "zlib"])
def test_written_gzip_unpacks_to_the_chunks(tmp_path: Path, monkeypatch, fast: bool) -> None:
    if fast:
        pytest.importorskip("zlib_ng")
    else:
        _without_zlib_ng(monkeypatch)
    gz.write_gzip(tmp_path / "a.gz", iter(CHUNKS), 5)
    gz.write_gzip(tmp_path / "b.gz", iter(CHUNKS), 5)
    data = (tmp_path / "a.gz").read_bytes()
    assert gzip.decompress(data) == b"".join(CHUNKS)  # (the standard library reads it back)
    assert data[4:8] == b"\0\0\0\0"  # no time in the header ...
    assert data == (tmp_path / "b.gz").read_bytes()  # ... so the same chunks, the same bytes
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.gz", "b.gz"]  # no temporary left


@pytest.mark.parametrize("fast", [True, False], ids=["zlib-ng", "zlib"])
def test_gzip_bytes_unpack_and_name_no_time(monkeypatch, fast: bool) -> None:
    if fast:
        pytest.importorskip("zlib_ng")
    else:
        _without_zlib_ng(monkeypatch)
    data = b"".join(CHUNKS)
    packed = gz.gzip_bytes(data, {"zlib-ng": 2, "zlib": 1})
    assert gzip.decompress(packed) == data and packed[4:8] == b"\0\0\0\0"
    assert packed == gz.gzip_bytes(data, {"zlib-ng": 2, "zlib": 1})


@pytest.mark.parametrize("fast", [True, False], ids=["zlib-ng", "zlib"])
def test_blocks_join_into_one_stream_whatever_the_chunks_and_threads(
    tmp_path: Path, monkeypatch, fast: bool
) -> None:
    """Blocks far smaller than the data, each primed with the window before it: one gzip
    stream of the data, the same bytes from other chunks on one thread as on several."""
    if fast:
        pytest.importorskip("zlib_ng")
    else:
        _without_zlib_ng(monkeypatch)
    data = b"".join(CHUNKS) * 40 + bytes(range(256)) * 300
    monkeypatch.setattr(gz, "BLOCK", 5000)
    gz.write_gzip(tmp_path / "a.gz", iter(CHUNKS * 40 + [bytes(range(256)) * 300]), 5)
    monkeypatch.setattr(gz, "MAX_THREADS", 1)
    pieces = (data[i : i + 777] for i in range(0, len(data), 777))
    gz.write_gzip(tmp_path / "b.gz", pieces, 5)
    packed = (tmp_path / "a.gz").read_bytes()
    assert gzip.decompress(packed) == data
    assert packed == (tmp_path / "b.gz").read_bytes()


def test_blocks_compress_as_one_stream_does(tmp_path: Path) -> None:
    """Blocks of the real size, primed: within a thousandth of one stream's bytes, on ~10 MB
    of packets like a trace's (repeated fields, varying numbers)."""
    rng = np.random.default_rng(0)
    fields = rng.integers(0, 300, (1_000_000, 4)).astype(np.uint16)
    data = np.column_stack([np.full(len(fields), 0x0A0B, np.uint16), fields]).tobytes()
    gz.write_gzip(tmp_path / "t.gz", iter([data]), 5)
    deflate = gz._zlib_ng() or zlib
    one = deflate.compressobj(5, deflate.DEFLATED, -15)
    whole = len(one.compress(data) + one.flush())
    packed = (tmp_path / "t.gz").read_bytes()
    assert gzip.decompress(packed) == data
    assert len(data) > 2 * gz.BLOCK  # (several blocks)
    assert len(packed) < 1.001 * whole + 100


def test_the_compressor_is_named_and_why_not_the_fast_one(monkeypatch) -> None:
    if gz._zlib_ng() is not None:
        assert gz.compressor() == ("zlib-ng", None)
    _without_zlib_ng(monkeypatch)
    assert gz.compressor() == ("zlib", "zlib-ng is not installed (pip install 'specmd-sim[fast]')")


def test_a_failed_chunk_leaves_no_file(tmp_path: Path) -> None:
    def chunks():
        yield b"start"
        raise RuntimeError("the trace's encoder failed")

    with pytest.raises(RuntimeError, match="encoder failed"):
        gz.write_gzip(tmp_path / "t.gz", chunks(), 5)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("fast", [True, False], ids=["zlib-ng", "zlib"])
def test_written_zip_is_what_zipfile_reads(tmp_path: Path, monkeypatch, fast: bool) -> None:
    """Members of several buffers (bytes, a 2-d array where it lies), an empty one, unicode
    names: ``zipfile`` lists each with its size and the 1980 time, checks every CRC and reads
    back the bytes; the same members give the same archive; a failed member leaves no file."""
    if fast:
        pytest.importorskip("zlib_ng")
    else:
        _without_zlib_ng(monkeypatch)
    array = np.arange(24_000, dtype=np.int64).reshape(8, -1)
    members = [("a.npy", [b"head", array]), ("empty", []), ("é/c", CHUNKS)]
    gz.write_zip(tmp_path / "a.zip", iter(members), 2)
    gz.write_zip(tmp_path / "b.zip", iter(members), 2)
    assert (tmp_path / "a.zip").read_bytes() == (tmp_path / "b.zip").read_bytes()
    with zipfile.ZipFile(tmp_path / "a.zip") as archive:
        assert archive.testzip() is None
        infos = archive.infolist()
        assert [i.filename for i in infos] == ["a.npy", "empty", "é/c"]
        assert {i.date_time for i in infos} == {(1980, 1, 1, 0, 0, 0)}
        for (_, parts), info in zip(members, infos, strict=True):
            want = b"".join(bytes(memoryview(p).cast("B")) for p in parts)
            assert archive.read(info) == want and info.file_size == len(want)

    def failing():
        yield "x", [b"start"]
        raise RuntimeError("a column failed")

    with pytest.raises(RuntimeError, match="a column failed"):
        gz.write_zip(tmp_path / "c.zip", failing(), 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.zip", "b.zip"]


SMALL = ["--trace", "mixtral-synthetic", "--cache", "16", "--set", "workload.max_requests=1"]


def test_run_says_when_the_trace_is_not_compressed_by_zlib_ng(tmp_path, monkeypatch, capsys):
    _without_zlib_ng(monkeypatch)
    code, out, err = cli(monkeypatch, capsys, "run", *SMALL, "--out", str(tmp_path / "run"),
                         "--profile")  # fmt: skip
    assert code == 0, err
    line = "trace compressed by zlib: zlib-ng is not installed (pip install 'specmd-sim[fast]')"
    assert line in " ".join(out.split())  # the summary
    assert line in " ".join(err[err.index("wall time of the run") :].split())  # --profile
    trace = tmp_path / "run" / "trace.pftrace.gz"
    assert gzip.decompress(trace.read_bytes())  # the run folder's trace is read back

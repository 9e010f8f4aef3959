"""SpanRecorder packs spans and counter samples a chunk of tuples at a time into growing arrays,
spilled to disk past a bound: what it gives back is what one list of every row would give, byte
for byte, across chunk boundaries and spilled runs merged in blocks of any size; equal start
times keep the order the spans were added in; a run holds packed rows, not tuples, and no more
of them than the bound; an array given out stays as it was when more rows come; the spill
folder goes with the last array mapped from it."""

from __future__ import annotations

import errno
import functools
import gc
import random
import tempfile
import time
import weakref
from collections.abc import Generator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import simpy

import specmd_sim.engine.sim.run as sim_run
from specmd_sim import SimConfig, packed_rows, simulate
from specmd_sim.engine.sim.flows import FlowNetwork
from specmd_sim.errors import SpecmdError
from specmd_sim.timeline import (
    COUNTER_CHUNK_ROWS,
    COUNTER_DTYPE,
    KINDS,
    SPAN_CHUNK_ROWS,
    SPAN_DTYPE,
    SpanRecorder,
)


def _rows(n: int, seed: int = 0) -> list[tuple[Any, ...]]:
    """``n`` spans as ``add``'s arguments, with few distinct starts and lanes (many equal
    keys) and every field distinct enough to tell rows apart."""
    rng = random.Random(seed)
    rows = []
    for i in range(n):
        start = float(rng.randrange(4))
        rows.append((rng.randrange(3), rng.choice(KINDS), start, start + rng.random(),
                     i, rng.randrange(-1, 60), rng.randrange(-1, 256), rng.randrange(1 << 40),
                     rng.randrange(-1, 8), rng.randrange(-1, 5)))  # fmt: skip
    return rows


def _expected(rows: list[tuple[Any, ...]]) -> np.ndarray:
    """The spans as one list of tuples gives them: packed at once, sorted by (start, lane)."""
    packed = [(s, e, lane, KINDS.index(k), *rest) for lane, k, s, e, *rest in rows]
    spans = np.array(packed, dtype=SPAN_DTYPE)
    return spans[np.lexsort((spans["lane"], spans["start"]))]


def _recorder(
    rows: list[tuple[Any, ...]], chunk_rows: int = SPAN_CHUNK_ROWS, spill_rows: int | None = None
) -> SpanRecorder:
    if spill_rows is None:
        rec = SpanRecorder(chunk_rows=chunk_rows)
    else:
        rec = SpanRecorder(chunk_rows=chunk_rows, spill_bytes=spill_rows * SPAN_DTYPE.itemsize)
    for lane in range(3):
        rec.lane(f"gpu0/lane{lane}")
    for row in rows:
        rec.add(*row)
    return rec


@pytest.mark.parametrize("n", [0, 1, 4, 5, 6, 10, 23])
@pytest.mark.parametrize("chunk_rows", [1, 5, SPAN_CHUNK_ROWS])
def test_chunked_spans_are_what_one_list_gives(n: int, chunk_rows: int) -> None:
    rows = _rows(n)
    spans = _recorder(rows, chunk_rows=chunk_rows).array()
    assert spans.dtype == SPAN_DTYPE and spans.shape == (n,)
    assert spans.tobytes() == _expected(rows).tobytes()


@pytest.mark.parametrize("chunk_rows", [1, 5, SPAN_CHUNK_ROWS])
def test_spans_added_in_arrays_go_where_tuples_would(chunk_rows: int) -> None:
    """``extend`` (an engine recording into arrays) between and after ``add``s."""
    rows = _rows(23, seed=4)
    packed = np.array([(s, e, lane, KINDS.index(k), *rest) for lane, k, s, e, *rest in rows],
                      dtype=SPAN_DTYPE)  # fmt: skip
    rec = _recorder(rows[:7], chunk_rows)
    rec.extend(packed[7:15])
    for row in rows[15:20]:
        rec.add(*row)
    rec.extend(packed[20:])
    assert rec.array().tobytes() == _expected(rows).tobytes()
    off = SpanRecorder(False)
    off.extend(packed)
    assert off.array().size == 0


def test_equal_start_times_keep_the_order_spans_were_added_in() -> None:
    rec = SpanRecorder(chunk_rows=2)
    a, b = rec.lane("gpu0/compute"), rec.lane("gpu0/copy-h2d-0")
    for expert, lane in enumerate([b, a, b, a, a, b, a]):
        rec.add(lane, "expert", 1.0, 2.0, expert=expert)
    rec.add(a, "expert", 0.5, 1.0, expert=7)
    spans = rec.array()
    assert spans["expert"].tolist() == [7, 1, 3, 4, 6, 0, 2, 5]


def test_spans_added_after_array_are_sorted_in() -> None:
    """``array`` sorts the recorder's own array in place and keeps it: asking again, or after
    more spans, gives what one list of all of them would."""
    rows = _rows(30, seed=1)
    rec = _recorder(rows[:17], chunk_rows=4)
    first = rec.array()
    assert first.tobytes() == _expected(rows[:17]).tobytes()
    assert rec.array().tobytes() == first.tobytes()
    for row in rows[17:]:
        rec.add(*row)
    assert rec.array().tobytes() == _expected(rows).tobytes()


def test_a_run_holds_packed_spans_and_at_most_a_chunk_of_tuples() -> None:
    rec = _recorder(_rows(100 * 5 + 2), chunk_rows=5)
    packed = rec._spans
    assert packed._size == 500 and len(packed.rows) == 2
    assert packed._data.dtype == SPAN_DTYPE and 500 <= len(packed._data) <= 500 + 500 // 8 + 5
    spans = rec.array()
    assert spans is packed._data and len(spans) == 502 and packed.rows == []


def test_an_array_given_out_stays_as_it_was() -> None:
    """Spans added after ``array`` grow a copy: the array given out keeps its rows."""
    rows = _rows(40, seed=3)
    rec = _recorder(rows[:20], chunk_rows=3)
    first = rec.array()
    kept = first.copy()
    for row in rows[20:]:
        rec.add(*row)
    assert rec.array().tobytes() == _expected(rows).tobytes()
    assert first.tobytes() == kept.tobytes()


@pytest.mark.parametrize("merge_rows", [1, 4, 1000])
@pytest.mark.parametrize(("n", "spill_rows"), [(23, 1), (23, 5), (200, 7), (200, 64), (9, 9)])
def test_spilled_spans_are_what_one_list_gives(monkeypatch, n, spill_rows, merge_rows) -> None:
    """Past ``spill_bytes`` the spans go to disk in sorted runs, merged when asked for a block
    of ``MERGE_BYTES`` at a time (here a few rows over all runs, or all at once): the same
    bytes, mapped read-only from a file; what the recorder holds stays within the bound."""
    monkeypatch.setattr(packed_rows, "MERGE_BYTES", merge_rows * SPAN_DTYPE.itemsize)
    rows = _rows(n, seed=n + spill_rows)
    rec = _recorder(rows, chunk_rows=3, spill_rows=spill_rows)
    held = rec._spans
    assert held._size <= spill_rows and len(held._data) <= spill_rows
    assert [rows for _, _, rows in held._runs] == [spill_rows] * len(held._runs)
    assert len(held._runs) * spill_rows + held._size + len(held.rows) == n  # (tuples unpacked)
    spans = rec.array()
    assert spans.tobytes() == _expected(rows).tobytes()
    spilled = n > spill_rows  # (exactly the bound stays in memory)
    assert isinstance(spans.base, np.memmap) == spilled and spans.flags.writeable != spilled


def test_spilled_spans_added_after_array_are_merged_in_and_the_first_stays() -> None:
    rows = _rows(90, seed=5)
    rec = _recorder(rows[:40], chunk_rows=4, spill_rows=6)
    first = rec.array()
    kept = first.copy()
    assert first.tobytes() == _expected(rows[:40]).tobytes()
    for row in rows[40:]:
        rec.add(*row)
    assert rec.array().tobytes() == _expected(rows).tobytes()
    assert rec.array().tobytes() == _expected(rows).tobytes()
    assert first.tobytes() == kept.tobytes()
    memory = _recorder(rows[:5], chunk_rows=4, spill_rows=6)  # in memory, spilled after
    given = memory.array()
    assert not memory._spans._runs
    for row in rows[5:]:
        memory.add(*row)
    assert memory.array().tobytes() == _expected(rows).tobytes()
    assert given.tobytes() == _expected(rows[:5]).tobytes()


def test_the_spill_folder_goes_with_the_last_array_mapped_from_it() -> None:
    rec = _recorder(_rows(30), chunk_rows=4, spill_rows=5)
    spans = rec.array()
    folder = Path(rec._spans._folder.name)
    assert [p.name for p in folder.iterdir()] == ["spilled-0.bin"]  # (the runs joined in place)
    del rec
    gc.collect()
    assert folder.is_dir() and spans.size == 30  # the array still maps a file there
    del spans
    gc.collect()
    assert not folder.exists()


@pytest.mark.parametrize("late", [0, 1, 30])
def test_runs_of_spans_recorded_in_time_order_are_joined_in_place(monkeypatch, late) -> None:
    """Spans recorded about in order of start, but for a few recorded late (a transfer
    recorded when it ends): each run is joined to the rows before it in the spill file,
    rewriting only the rows out of place; where those are more than ``MERGE_BYTES`` (a span
    of the run's start recorded at the end), the runs are merged into a file of their own.
    The same bytes either way."""
    monkeypatch.setattr(packed_rows, "MERGE_BYTES", 20 * SPAN_DTYPE.itemsize)
    rows = sorted(_rows(300, seed=late), key=lambda row: row[4])  # (added in order, ...)
    rows = [(r[0], r[1], i / 10, i / 10 + r[3] - r[2], *r[4:]) for i, r in enumerate(rows)]
    for k in range(late):  # (... but for a few, each recorded a little after its start ...)
        i = 7 + 9 * k
        rows.insert(i + 3, rows.pop(i))
    if late == 30:  # (... and one long after)
        rows.append(rows.pop(5))
    rec = _recorder(rows, chunk_rows=4, spill_rows=16)
    spans = rec.array()
    assert spans.tobytes() == _expected(rows).tobytes()
    folder = Path(rec._spans._folder.name)
    merged = late == 30  # (a span recorded ~295 rows late: past the bound)
    assert [p.name for p in folder.iterdir()] == ["merged-1.bin" if merged else "spilled-0.bin"]


_KEYED = np.dtype([("start", "f8"), ("lane", "i2")])


def _keyed_rows(spill_rows: int) -> packed_rows.PackedRows:
    return packed_rows.PackedRows(_KEYED, 1, ("start", "lane"), _KEYED.itemsize * spill_rows)


def test_a_spill_file_that_cannot_be_deleted_is_never_written_again(monkeypatch) -> None:
    """Windows does not delete a file an array given out still maps: the runs merged after an
    array was given out leave the spill file where it is, and later runs go to a file of their
    own (else they would be written after its rows, counted from its first)."""

    def refuse(self: Path, missing_ok: bool = False) -> None:
        raise PermissionError(13, "mapped", str(self))

    monkeypatch.setattr(Path, "unlink", refuse)
    rows = _keyed_rows(2)
    added: list[tuple[float, int]] = []
    given = []
    for starts in ((5, 6, 7, 8), (1, 2), (4, 3)):
        for start in starts:
            added.append((float(start), 0))
            rows.append(added[-1])
        given.append((rows.array(), sorted(added)))
    for array, expected in given:  # (each as given out, unchanged)
        assert array.tolist() == expected


def test_a_nan_key_leaves_the_runs_to_the_merge() -> None:
    """A NaN start (none is recorded) sorts last and equals nothing: the runs are merged."""
    rows = _keyed_rows(2)
    for start in (1.0, np.nan, 0.0, 2.0):
        rows.append((start, 0))
    assert [x for x, _ in rows.array().tolist()][:3] == [0.0, 1.0, 2.0]
    assert (Path(rows._folder.name) / "merged-1.bin").exists()


def test_the_spans_and_counters_share_one_bound() -> None:
    """Spans and three counters recorded together under 300 bytes: the rows held in memory
    never pass it (the series holding the most spills), and every series is what one in
    memory gives."""
    rows = _rows(120, seed=9)
    rng = random.Random(9)
    bounded = SpanRecorder(chunk_rows=1, counter_chunk_rows=1, spill_bytes=300)
    free = SpanRecorder()
    for rec in (bounded, free):
        for lane in range(3):
            rec.lane(f"gpu0/lane{lane}")
    for i, row in enumerate(rows):
        sample = (f"c{rng.randrange(3)}", float(i), float(rng.randrange(9)))
        for rec in (bounded, free):
            rec.add(*row)
            rec.sample(*sample)
        held = [m.held_bytes() for m in bounded._budget.members]
        assert bounded._budget.held == sum(held) <= 300
    assert all(m._runs for m in bounded._budget.members)  # every series spilled
    assert bounded.array().tobytes() == free.array().tobytes()
    want = free.counters()
    got = bounded.counters()
    assert list(got) == list(want)
    assert all(got[name].tobytes() == want[name].tobytes() for name in want)


def test_no_room_to_spill_is_one_clear_error(monkeypatch, tmp_path) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "missing"))
    with pytest.raises(SpecmdError, match=r"^spans: could not spill .*missing.*set TMPDIR"):
        _recorder(_rows(30), chunk_rows=4, spill_rows=5)


def test_a_run_that_could_not_be_written_is_one_clear_error(monkeypatch, tmp_path) -> None:
    """Runs are written on a thread of their own while the recording goes on: a run that
    could not be written (here: its file's folder gone) is the same one line, raised where
    the rows are next spilled or read."""
    monkeypatch.setattr(
        packed_rows.PackedRows, "_spill_file", lambda self: tmp_path / "gone" / "spilled.bin"
    )
    rec = _recorder(_rows(3), chunk_rows=1, spill_rows=2)  # (one run, being written)
    with pytest.raises(SpecmdError, match=r"^spans: could not spill .*set TMPDIR"):
        rec.array()
    with pytest.raises(SpecmdError, match=r"^spans: could not spill .*set TMPDIR"):
        _recorder(_rows(30), chunk_rows=1, spill_rows=2)  # (raised by the next spill)


def test_runs_are_written_one_at_a_time_beside_the_recording(monkeypatch) -> None:
    """At most one run is being written at any time, over every series of a budget (each
    written run's sorted copy is held until written): a spill waits for the run before."""
    writing: list[int] = []
    in_flight = []
    real = packed_rows._Write.__init__

    def write(self, path: Path, rows: np.ndarray, folder: object) -> None:
        in_flight.append(sum(1 for w in writing if w))
        writing.append(1)
        real(self, path, rows, folder)

    def join(self, _join=packed_rows._Write.join) -> Exception | None:
        writing[writing.index(1)] = 0
        return _join(self)

    monkeypatch.setattr(packed_rows._Write, "__init__", write)
    monkeypatch.setattr(packed_rows._Write, "join", join)
    rows = _rows(200, seed=3)
    spilled = _recorder(rows, chunk_rows=3, spill_rows=7)
    for i in range(40):  # (a counter series sharing the budget spills too)
        spilled.sample("c", float(i), float(i % 5))
    assert len(in_flight) > 20 and max(in_flight) == 0
    assert spilled.array().tobytes() == _expected(rows).tobytes()


def test_a_run_not_written_fails_every_later_read(monkeypatch) -> None:
    """A disk full half-way through a run: the rows are incomplete, so every later read of
    the recording is the one line, not only the first (nor a mapping error after it)."""
    real = packed_rows._Write._run

    def half(self, path: Path, rows: np.ndarray, folder: object) -> None:
        real(self, path, rows[: len(rows) // 2], folder)
        self._error = OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(packed_rows._Write, "_run", half)
    rec = _recorder(_rows(3), chunk_rows=1, spill_rows=2)
    monkeypatch.setattr(packed_rows._Write, "_run", real)  # (room again: too late)
    for _ in range(2):
        with pytest.raises(SpecmdError, match=r"^spans: could not spill .*No space left"):
            rec.array()


def test_one_sorted_run_is_held_at_a_time(monkeypatch) -> None:
    """A spill sorts its rows once the run before is written (and its sorted copy gone), the
    writer slowed so that every spill finds the one before still being written."""
    alive: list[weakref.ref] = []
    most = [0]
    real_sorted, real_run = packed_rows._sorted, packed_rows._Write._run

    def tracked(rows: np.ndarray, keys: tuple[str, ...]) -> np.ndarray:
        out = real_sorted(rows, keys)
        alive.append(weakref.ref(out))
        most[0] = max(most[0], sum(r() is not None for r in alive))
        return out

    def slow(self, path: Path, rows: np.ndarray, folder: object) -> None:
        time.sleep(0.002)
        real_run(self, path, rows, folder)

    monkeypatch.setattr(packed_rows, "_sorted", tracked)
    monkeypatch.setattr(packed_rows._Write, "_run", slow)
    rows = _rows(120, seed=4)
    rec = _recorder(rows, chunk_rows=3, spill_rows=7)
    assert len(alive) > 10 and most[0] == 1
    assert rec.array().tobytes() == _expected(rows).tobytes()


@pytest.mark.parametrize("counter_chunk_rows", [1, 3, COUNTER_CHUNK_ROWS])
@pytest.mark.parametrize("spill", [0, 1, 4], ids=["in-memory", "spill-1", "spill-4"])
def test_chunked_counters_are_what_one_list_gives(counter_chunk_rows: int, spill: int) -> None:
    """Samples through ``sample`` and through ``series``, interleaved across counters; kept in
    memory, or spilled every sample or every 4 (in time order: runs one after the other)."""
    rng = random.Random(2)
    rec = SpanRecorder(counter_chunk_rows=counter_chunk_rows,
                       spill_bytes=spill * COUNTER_DTYPE.itemsize or (1 << 20))  # fmt: skip
    want: dict[str, list[tuple[float, float]]] = {"b": [], "a": [], "net": [], "idle": []}
    direct = rec.series("net")
    rec.series("idle")  # a series nothing samples: an empty array
    for i in range(40):
        name = rng.choice(["a", "b", "net"])
        sample = (i * 0.5, rng.choice([float(rng.randrange(100)), rng.randrange(1 << 40)]))
        want[name].append(sample)
        if name == "net":
            direct.append(sample)
        else:
            rec.sample(name, *sample)
    got = rec.counters()
    assert list(got) == sorted(want)
    assert any(rec._series[n]._runs for n in want) == bool(spill)  # spilled where asked
    for name, samples in want.items():
        expected = np.array(samples, dtype=COUNTER_DTYPE)
        assert got[name].dtype == COUNTER_DTYPE and got[name].tobytes() == expected.tobytes()
    rec.sample("a", 99.0, 1.0)
    again = rec.counters()
    assert again["a"].tolist() == [*want["a"], (99.0, 1.0)]
    assert again["b"].tobytes() == got["b"].tobytes()


def test_empty_recorder() -> None:
    rec = SpanRecorder(chunk_rows=2, counter_chunk_rows=2)
    spans = rec.array()
    assert spans.dtype == SPAN_DTYPE and spans.shape == (0,)
    assert rec.counters() == {}


def test_disabled_recorder_keeps_lanes_but_no_spans_or_samples() -> None:
    rec = SpanRecorder(enabled=False, chunk_rows=1, counter_chunk_rows=1)
    lane = rec.lane("gpu0/compute")
    rec.add(lane, "expert", 0.0, 1.0)
    rec.sample("cache_used_bytes", 0.0, 5.0)
    assert rec.lanes == ["gpu0/compute"]
    assert rec.array().shape == (0,) and rec.counters() == {}


def test_network_bandwidth_series_across_chunks() -> None:
    """The flow network appends to ``series`` directly: chunks of one sample give the same
    counters as the default."""

    def counters(chunk_rows: int = COUNTER_CHUNK_ROWS) -> dict[str, list[tuple[float, float]]]:
        env = simpy.Environment()
        rec = SpanRecorder(counter_chunk_rows=chunk_rows)
        net = FlowNetwork(env, {"L": 10.0, "M": 100.0}, spans=rec)

        def one(start: float, resources: tuple[str, ...]) -> Generator[simpy.Event, Any, None]:
            yield env.timeout(start)
            yield from net.transfer(100, resources, latency=0.0)

        for start, resources in [(0, ("L", "M")), (5, ("L",)), (7, ("M",)), (30, ("L", "M"))]:
            env.process(one(start, resources))
        env.run()
        return {name: c.tolist() for name, c in rec.counters().items()}

    chunked = counters(chunk_rows=1)
    assert chunked == counters() and len(chunked["network/M_bytes_per_s"]) > 3


@pytest.mark.parametrize("spill_bytes", [None, 4096], ids=["in-memory", "spilled"])
def test_timing_engine_gives_the_same_spans_and_counters_in_tiny_chunks(
    monkeypatch: pytest.MonkeyPatch, spill_bytes: int | None
) -> None:
    """The default run (spans and counters past one chunk) with chunks of 7 spans and 3
    samples, and spilled every 4 KB, against the default chunks: byte for byte."""
    config = SimConfig.model_validate({"workload": {"max_requests": 1}})
    default = simulate(config)
    more = {} if spill_bytes is None else {"spill_bytes": spill_bytes}
    tiny = functools.partial(SpanRecorder, chunk_rows=7, counter_chunk_rows=3, **more)
    made: list[SpanRecorder] = []
    monkeypatch.setattr(sim_run, "SpanRecorder", lambda *a: made.append(tiny(*a)) or made[-1])
    chunked = simulate(config)
    assert (made[0]._spans._folder is not None) == (spill_bytes is not None)  # spilled or not
    assert default.spans is not None and chunked.spans is not None and default.spans.size > 7
    assert chunked.spans.tobytes() == default.spans.tobytes()
    assert chunked.lanes == default.lanes and list(chunked.counters) == list(default.counters)
    for name, samples in default.counters.items():
        assert chunked.counters[name].tobytes() == samples.tobytes()


@pytest.mark.parametrize("counter_chunk_rows", [1, 3, COUNTER_CHUNK_ROWS])
@pytest.mark.parametrize("spill", [0, 1, 4], ids=["in-memory", "spill-1", "spill-4"])
def test_a_counter_keeps_the_last_sample_of_each_instant(
    counter_chunk_rows: int, spill: int
) -> None:
    """Several samples at one instant (a cache filling and emptying within an event): the
    series keeps only the last of them, the value that holds from then on, however the
    samples were chunked or spilled; samples of distinct times are all kept."""
    rng = random.Random(5)
    rec = SpanRecorder(counter_chunk_rows=counter_chunk_rows,
                       spill_bytes=spill * COUNTER_DTYPE.itemsize or (1 << 20))  # fmt: skip
    samples = []
    time = 0.0
    for _ in range(60):
        time += rng.choice([0.0, 0.0, 0.5])  # two of three at the instant of the one before
        samples.append((time, float(rng.randrange(100))))
    for sample in samples:
        rec.sample("c", *sample)
    last = {t: v for t, v in samples}  # (a dict keeps the last value of each time)
    want = np.array(sorted(last.items()), dtype=COUNTER_DTYPE)
    assert rec.counters()["c"].tobytes() == want.tobytes()


@pytest.mark.parametrize("spill_rows", [None, 7])
def test_renumbered_spans_replace_the_old_ones_in_the_bound(spill_rows) -> None:
    """Passes renumbered after a run (several GPUs, online schedules): the spans' series is
    rebuilt, and the old one no longer counts against the bound shared with the counters, nor
    is spilled for it."""
    rows = _rows(40, seed=3)
    rec = _recorder(rows, chunk_rows=4, spill_rows=spill_rows)
    rec.sample("c", 0.0, 1.0)
    before = rec.array().copy()
    rec.renumber_passes(np.array([0, 30]), np.array([0, 100]))
    members = rec._budget.members
    assert rec._spans in members and len(members) == 2  # the new spans and the counter
    assert rec._budget.held == sum(m.held_bytes() for m in members)
    got = rec.array()
    moved = before["pass_"] >= 30
    assert np.array_equal(got["pass_"][moved], before["pass_"][moved] + 100)
    assert np.array_equal(got["pass_"][~moved], before["pass_"][~moved])

"""What the exports derive from spans alone, on hand-built spans: sub-tracks, the class each
transfer served, lane and counter names; and spans.npz in the run folder."""

from __future__ import annotations

import io
import json
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

from specmd_sim.cache.states import AccessClass
from specmd_sim.errors import SpecmdError
from specmd_sim.metrics import RunResult
from specmd_sim.report import RunData
from specmd_sim.runs import read_result, read_spans, write_run, write_spans
from specmd_sim.timeline import (
    COUNTER_DTYPE,
    KIND,
    KINDS,
    SPAN_DTYPE,
    Recording,
    SpanRecorder,
    counter_label,
    lane_process,
    lane_track,
    served_class,
    track_rows,
)


def test_track_rows_keeps_capacity_one_lanes_on_one_track() -> None:
    rows, n = track_rows(np.array([0.0, 1.0, 2.0]), np.array([1.0, 2.0, 3.0]))
    assert n == 1 and rows.tolist() == [0, 0, 0]


def test_track_rows_gives_overlapping_spans_the_lowest_free_track() -> None:
    start = np.array([0.0, 1.0, 2.5, 3.0, 0.5])
    end = np.array([2.0, 4.0, 3.5, 5.0, 0.9])
    rows, n = track_rows(start, end)
    # by start: 0 [0,2)->0, 4 [.5,.9)->1, 1 [1,4)->1 (free at .9), 2 [2.5,3.5)->0, 3 [3,5)->2
    assert rows.tolist() == [0, 1, 0, 2, 1] and n == 3


def _spans() -> np.ndarray:
    rec = SpanRecorder()
    gpu, copy = rec.lane("gpu0/compute"), rec.lane("gpu0/copy-h2d-0")
    # pass 0 (request 0): attention, a miss fetched and run, LM head
    rec.add(gpu, "attention", 0.0, 1.0, pass_=0, layer=0, request=0)
    rec.add(copy, "demand_fetch", 1.0, 3.0, 0, 0, 5, 10, 0)
    rec.add(gpu, "stall", 1.0, 3.0, 0, 0, 5, 0, 0, int(AccessClass.COMPULSORY))
    rec.add(gpu, "expert", 3.0, 4.0, pass_=0, layer=0, expert=5, request=0,
            klass=int(AccessClass.COMPULSORY))  # fmt: skip
    # a prefetch for pass 0, layer 1, that layer 1 never ran
    rec.add(copy, "prefetch", 3.0, 6.0, 0, 1, 12, 10, 0)
    rec.add(gpu, "lm_head", 4.0, 4.5, pass_=0, request=0)
    # pass 1 (request 1): a prefetched expert that arrived in time
    rec.add(copy, "prefetch", 5.0, 5.5, 1, 0, 7, 10, 1)
    rec.add(gpu, "attention", 6.0, 7.0, pass_=1, layer=0, request=1)
    rec.add(gpu, "expert", 7.0, 8.0, pass_=1, layer=0, expert=7, request=1,
            klass=int(AccessClass.HIT))  # fmt: skip
    return rec.array()


def test_served_class_of_transfers() -> None:
    spans = _spans()
    classes = served_class(spans)
    kinds = [KINDS[k] for k in spans["kind"]]
    got = {(k, int(e)): int(c) for k, e, c in zip(kinds, spans["expert"], classes, strict=True)
           if k in ("demand_fetch", "prefetch")}  # fmt: skip
    assert got == {("demand_fetch", 5): AccessClass.COMPULSORY, ("prefetch", 12): -1,
                   ("prefetch", 7): AccessClass.HIT}  # fmt: skip
    assert (classes[spans["kind"] == KIND["attention"]] == -1).all()


def test_the_served_classes_are_derived_once_for_readers_side_by_side(monkeypatch) -> None:
    """The page and the trace, written in threads of their own, read a recording's served
    classes: derived once, the second reader given the first's."""
    from concurrent.futures import ThreadPoolExecutor

    from specmd_sim import timeline

    calls = []

    def counted(spans: np.ndarray) -> np.ndarray:
        calls.append(1)
        time.sleep(0.05)  # (long enough for every reader to arrive while it derives)
        return served_class(spans)

    monkeypatch.setattr(timeline, "served_class", counted)
    rec = Recording(_spans(), ["gpu0/compute", "gpu0/copy-h2d-0"])
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda _: rec.served(), range(8)))
    assert len(calls) == 1
    assert all(g is got[0] for g in got)


def test_the_lanes_sub_tracks_are_derived_once_for_readers_side_by_side() -> None:
    """The page and the trace place a recording's spans on their lanes' sub-tracks alike:
    derived once (by its specification here), the second reader given the first's."""
    from concurrent.futures import ThreadPoolExecutor

    from specmd_sim.timeline import lane_rows

    spans, calls = _spans(), []

    def counted(*args: object) -> object:
        calls.append(1)
        time.sleep(0.05)
        return lane_rows(*args)  # type: ignore[arg-type]

    rec = Recording(spans, ["gpu0/compute", "gpu0/copy-h2d-0"])
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda _: rec.lane_rows(counted), range(8)))
    assert len(calls) == 1 and all(g is got[0] for g in got)
    want = lane_rows(spans["lane"], spans["start"], spans["end"], 2)
    for a, b in zip(got[0], want, strict=True):
        np.testing.assert_array_equal(a, b)


def test_lane_and_counter_names() -> None:
    assert (lane_process("gpu0/copy-h2d-1"), lane_track("gpu0/copy-h2d-1")) == (
        "gpu0",
        "copy-h2d-1",
    )
    assert (lane_process("solo"), lane_track("solo")) == ("solo", "solo")
    assert counter_label("cache_used_bytes") == ("cache used", "bytes")
    assert counter_label("bytes_in_flight") == ("in flight", "bytes")
    assert counter_label("gpu1/queue_depth") == ("queue depth", "value")


# --- spans.npz -------------------------------------------------------------------------------


def test_spans_file_round_trips_and_is_byte_stable(timed: RunResult, tmp_path: Path) -> None:
    rec = Recording(timed.spans, timed.lanes, timed.counters)
    write_spans(tmp_path / "a.npz", rec)
    write_spans(tmp_path / "b.npz", rec)
    assert (tmp_path / "a.npz").read_bytes() == (tmp_path / "b.npz").read_bytes()
    back = read_spans(tmp_path / "a.npz")
    assert back.lanes == timed.lanes
    assert np.array_equal(back.spans, timed.spans)
    assert back.counters.keys() == timed.counters.keys()
    for name, samples in timed.counters.items():
        assert np.array_equal(back.counters[name], samples)


def test_spans_file_keeps_every_value_in_narrowed_columns(tmp_path: Path) -> None:
    """Columns are stored in the narrowest integer type that holds them (so a file of wide
    values and one of narrow values both read back exactly), each column's bytes grouped by
    significance."""
    spans = _spans()
    spans["bytes"][:4] = [2**40, -1, 0, 2**63 - 1]
    spans["expert"][0] = 2**31 - 1
    spans["start"][0] = 1e-300
    counters = {"c": np.array([(0.5, 2.0**60), (1.0, -3.0)], COUNTER_DTYPE)}
    path = tmp_path / "s.npz"
    write_spans(path, Recording(spans, ["gpu0/compute", "gpu0/copy"], counters))
    back = read_spans(path)
    assert np.array_equal(back.spans, spans) and back.spans.dtype == SPAN_DTYPE
    assert np.array_equal(back.counters["c"], counters["c"])
    with np.load(path) as data:
        assert data["spans.layer"].shape == (1, spans.size)  # (int16 values that fit int8)
        assert data["spans.bytes"].shape == (8, spans.size)


def test_spans_file_keeps_the_bits_of_every_time(tmp_path: Path) -> None:
    """Times are stored as differences of their bits (version 3): out of order, NaN, -0.0,
    infinities, denormals and jumps across every binade come back bit for bit, counters' too;
    in order of start the differences' high bytes are all zero."""
    spans = _spans()
    rng = np.random.default_rng(0)
    odd = [np.nan, -0.0, np.inf, -np.inf, 5e-324, -1e300, 1e300, 0.0]
    spans["start"] = rng.choice([*odd, *rng.normal(0, 1e3, 8)], spans.size)
    spans["end"] = rng.choice([*odd, *rng.normal(0, 1e-9, 8)], spans.size)
    spans["end"][0] = np.frombuffer(np.int64(-(2**63)).tobytes(), np.float64)[0]
    counters = {"c": np.array([(np.nan, 1.0), (-0.0, -0.0), (1e300, 3.0)], COUNTER_DTYPE)}
    path = tmp_path / "s.npz"
    write_spans(path, Recording(spans, ["gpu0/compute", "gpu0/copy"], counters))
    back = read_spans(path)
    assert back.spans.tobytes() == spans.tobytes()
    assert back.counters["c"].tobytes() == counters["c"].tobytes()
    ordered = _spans()
    ordered["start"] = np.sort(rng.uniform(1.0, 1.5, ordered.size))  # (one binade)
    ordered["end"] = ordered["start"] + 1e-9
    write_spans(path, Recording(ordered, ["gpu0/compute", "gpu0/copy"], {}))
    with np.load(path) as data:
        for name in ("start", "end"):
            high = data[f"spans.{name}.delta"][-1, 1:]  # (the first start: its bits less 0)
            assert not high.any()
        assert data["spans.end.delta"].shape == (4, ordered.size)  # (narrowed: 1 ns in ~4.5M ulps)
    assert np.array_equal(read_spans(path).spans, ordered)


def test_spans_file_of_a_newer_version_is_one_clear_error(tmp_path: Path) -> None:
    """A file of a later version than this one reads is refused, naming its version; and a
    version-2 reader, which would take version 3's differences for times, finds no member of
    a time column (they are ``.delta`` members) and so refuses the file too."""
    path = tmp_path / "s.npz"
    write_spans(path, Recording(_spans(), ["gpu0/compute", "gpu0/copy"], {}))
    with zipfile.ZipFile(path) as zf:
        names = set(zf.namelist())
        members = {n: zf.read(n) for n in names}
    assert {"spans.start.delta.npy", "spans.end.delta.npy"} <= names
    assert not {"spans.start.npy", "spans.end.npy"} & names
    meta = json.loads(str(np.load(io.BytesIO(members["meta.npy"]))[()]))
    meta["version"] = 4
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.array(json.dumps(meta)))
    members["meta.npy"] = buf.getvalue()
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in members.items():
            zf.writestr(name, data)
    with pytest.raises(
        SpecmdError, match="expected a spans file of version 3 or older, got version 4"
    ):
        read_spans(path)


def test_spans_file_of_version_2_reads(tmp_path: Path) -> None:
    """A file of version 2 (times as they are) reads back as written."""
    spans = _spans()
    meta = {"format": "specmd-spans", "version": 2, "lanes": ["gpu0/compute", "gpu0/copy"],
            "kinds": list(KINDS), "counters": [], "columns": {}}  # fmt: skip
    path = tmp_path / "s.npz"
    with zipfile.ZipFile(path, "w") as zf:
        for name in SPAN_DTYPE.names or ():
            column = np.ascontiguousarray(spans[name])
            meta["columns"][f"spans.{name}"] = column.dtype.str
            buf = io.BytesIO()
            np.lib.format.write_array(buf, column.view(np.uint8).reshape(-1, column.itemsize).T)
            zf.writestr(f"spans.{name}.npy", buf.getvalue())
        buf = io.BytesIO()
        np.lib.format.write_array(buf, np.array(json.dumps(meta)))
        zf.writestr("meta.npy", buf.getvalue())
    assert read_spans(path).spans.tobytes() == spans.tobytes()


def test_spans_file_maps_kinds_by_name(tmp_path: Path) -> None:
    """A file written with another order of kinds reads back with this version's ids."""
    spans = _spans()
    shuffled = list(reversed(KINDS))
    stored = spans.copy()
    stored["kind"] = np.array([shuffled.index(k) for k in KINDS], np.int8)[spans["kind"]]
    meta = {"format": "specmd-spans", "version": 1, "lanes": ["gpu0/compute", "gpu0/copy"],
            "kinds": shuffled, "counters": []}  # fmt: skip
    path = tmp_path / "s.npz"
    with zipfile.ZipFile(path, "w") as zf:
        for name, arr in (("meta", np.array(json.dumps(meta))), ("spans", stored)):
            buf = io.BytesIO()
            np.lib.format.write_array(buf, arr)
            zf.writestr(f"{name}.npy", buf.getvalue())
    assert np.array_equal(read_spans(path).spans, spans)


@pytest.mark.parametrize("content", [b"not a zip", bytes(4096), b""])
def test_spans_file_errors_are_one_line(tmp_path: Path, content: bytes) -> None:
    """A damaged file (text, zeros: numpy alone would read it as a pickle and suggest
    unpickling it, empty) is named as damaged, with nothing of pickles."""
    bad = tmp_path / "spans.npz"
    bad.write_bytes(content)
    with pytest.raises(SpecmdError, match="expected a spans file written by specmd") as info:
        read_spans(bad)
    assert "pickle" not in str(info.value) and "damaged" in str(info.value)


def test_run_folder_files(timed_dir: Path, replay_dir: Path) -> None:
    assert {p.name for p in timed_dir.iterdir()} == {
        "config.yaml", "result.json", "spans.npz", "trace.pftrace.gz", "timeline.html",
        "manifest.json",
    }  # fmt: skip
    assert {p.name for p in replay_dir.iterdir()} == {"config.yaml", "result.json", "manifest.json"}


def test_replay_over_a_timed_folder_removes_its_timing_files(
    timed: RunResult, tmp_path: Path, replay_dir: Path
) -> None:
    run = tmp_path / "run"
    write_run(run, timed)
    assert (run / "spans.npz").is_file() and not (run / "timeline.html").exists()
    replayed = RunData.load(replay_dir)
    assert replayed.recording is None
    (run / "timeline.html").write_text("stale")  # a page of the earlier run
    data = read_result(replay_dir)
    result = RunResult(data["engine"], data["metrics"], data["per_layer"], data["per_request"],
                       data["config"], data["inputs"], data["hardware_grade"])  # fmt: skip
    write_run(run, result)  # the folder is replaced whole
    assert {p.name for p in run.iterdir()} == {"config.yaml", "result.json", "manifest.json"}


def test_a_folder_of_other_files_is_never_replaced(timed: RunResult, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(SpecmdError, match="holds other files"):
        write_run(tmp_path, timed)
    with pytest.raises(SpecmdError, match="the working folder or one above it"):
        write_run(Path.cwd(), timed)
    assert (tmp_path / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("engine", ["compiled", "simpy"])
def test_each_transfer_is_drawn_as_what_it_was_issued_as(engine: str) -> None:
    """A prefetch that a layer needed before it completed (queued or moving) is drawn as a
    promoted prefetch, not as a demand fetch: one per late hit; a demand fetch per miss; every
    prefetch not cancelled is one or the other kind of prefetch (both engines alike: the
    compiled core where numba is installed, SimPy otherwise and for ``compiled=False``)."""
    from specmd_sim import SimConfig, simulate

    config = SimConfig(trace="mixtral-synthetic", workload={"max_requests": 1},
                       cache={"capacity": 16})  # fmt: skip
    result = simulate(config, compiled=engine == "compiled")
    m, kind = result.metrics, result.spans["kind"]
    count = {k: int((kind == KIND[k]).sum()) for k in ("demand_fetch", "prefetch",
                                                       "promoted_prefetch")}  # fmt: skip
    assert m["late_hits"] > 0 and count["promoted_prefetch"] == m["late_hits"]
    assert count["demand_fetch"] == m["misses"]
    assert count["prefetch"] + count["promoted_prefetch"] == (
        m["prefetch_issued"] - m.get("prefetch_cancelled", 0)
    )
    served = served_class(result.spans)
    assert set(served[kind == KIND["promoted_prefetch"]]) == {AccessClass.LATE_HIT}
    assert AccessClass.LATE_HIT not in set(served[kind == KIND["demand_fetch"]])


@pytest.mark.parametrize("engine", ["compiled", "simpy"])
def test_an_expert_streamed_past_the_cache_is_drawn_as_streamed(engine: str) -> None:
    """Whole prompts beside a 20-slot OLMoE cache overflow it, and static-hot streams what it
    does not hold: each such transfer is one span of its own kind, and with the demand fetches
    they are the misses (both engines alike)."""
    from specmd_sim import SimConfig, simulate

    for eviction, counted in (("least-stale", "overflowed"), ("static-hot", "bypassed")):
        config = SimConfig(workload={"max_requests": 1}, cache={"capacity": 20},
                           eviction={"kind": eviction}, prefetch={"kind": "none"})  # fmt: skip
        result = simulate(config, compiled=engine == "compiled")
        m, kind = result.metrics, result.spans["kind"]
        streamed = int((kind == KIND["streamed"]).sum())
        assert streamed == m[counted] > 0 and m["bypassed"] + m["overflowed"] == streamed
        assert int((kind == KIND["demand_fetch"]).sum()) + streamed == m["misses"]
        assert set(served_class(result.spans)[kind == KIND["streamed"]]) <= {
            AccessClass.COMPULSORY,
            AccessClass.CAPACITY,
            AccessClass.COLLISION,
        }


def _track_rows_one_by_one(start: np.ndarray, end: np.ndarray) -> tuple[list[int], int]:
    """The rule itself, span by span: in order of start (ties by position), the lowest
    sub-track free by then (its last span ended at or before the start)."""
    free_at: list[float] = []
    rows = [0] * len(start)
    for i in sorted(range(len(start)), key=lambda i: (start[i], i)):
        row = next((r for r, t in enumerate(free_at) if t <= start[i]), len(free_at))
        if row == len(free_at):
            free_at.append(0.0)
        free_at[row] = end[i]
        rows[i] = row
    return rows, len(free_at)


@pytest.mark.parametrize("seed", range(40))
def test_track_rows_is_the_rule_span_by_span(seed: int) -> None:
    """Against the rule applied one span at a time, on lanes with ties, zero-length spans and
    up to a dozen concurrent spans."""
    rng = np.random.default_rng(seed)
    for _ in range(25):
        n = int(rng.integers(0, 60))
        start = rng.integers(0, 30, n).astype(float)
        end = start + rng.integers(0, 1 + int(rng.integers(1, 12)), n)
        rows, count = track_rows(start, end)
        assert (rows.tolist(), count) == _track_rows_one_by_one(start.tolist(), end.tolist())

"""The run folder's Perfetto trace (protobuf, ``trace.pftrace.gz``), parsed with Perfetto's own
message definitions (the ``perfetto`` package's ``perfetto_trace_pb2``) and read as trace
processor reads it (sequences, interned data, packet defaults, incremental clocks), holds what
the Chrome JSON trace holds, event for event: the same processes and tracks, the same slices
with the same times and args, the same flows between the same slices, the same counters."""

from __future__ import annotations

import gzip
import json
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from specmd_sim import SimConfig, perfetto, simulate
from specmd_sim import protowire as pw
from specmd_sim.engine import jit
from specmd_sim.metrics import RunResult
from specmd_sim.perfetto import (
    _counter_columns,
    _counter_compiled,
    _flow_columns,
    flow_targets_compiled,
    lane_rows_compiled,
    perfetto_chunks,
    served_class_compiled,
)
from specmd_sim.report import RunData
from specmd_sim.runs import TRACE_FILE, trace_options
from specmd_sim.timeline import (
    COUNTER_DTYPE,
    KINDS,
    SPAN_DTYPE,
    flow_targets,
    lane_rows,
    served_class,
    to_chrome_trace,
)
from tests.report.test_chrome_trace import ns

pb = pytest.importorskip("perfetto.protos.perfetto.trace.perfetto_trace_pb2")


@dataclass
class _Sequence:
    names: dict[int, str] = field(default_factory=dict)
    categories: dict[int, str] = field(default_factory=dict)
    annotations: dict[int, str] = field(default_factory=dict)
    strings: dict[int, str] = field(default_factory=dict)
    track: int | None = None
    clock: int | None = None
    incremental: dict[int, int] = field(default_factory=dict)  # clock id -> last time


@dataclass
class Read:
    """A trace as trace processor would see it (the parts specmd writes)."""

    processes: dict[int, dict[str, Any]] = field(default_factory=dict)  # uuid -> pid, name
    threads: dict[int, dict[str, Any]] = field(default_factory=dict)  # uuid -> pid, tid, name
    counters: dict[int, dict[str, Any]] = field(default_factory=dict)  # uuid -> parent, name
    slices: list[dict[str, Any]] = field(default_factory=list)
    instants: list[dict[str, Any]] = field(default_factory=list)
    samples: dict[int, list[tuple[int, float]]] = field(default_factory=dict)


def _value(annotation: Any, seq: _Sequence) -> Any:
    kind = annotation.WhichOneof("value")
    if kind == "string_value_iid":
        return seq.strings[annotation.string_value_iid]
    return getattr(annotation, kind)


def _describe(out: Read, desc: Any) -> None:
    if desc.HasField("process"):
        out.processes[desc.uuid] = {"pid": desc.process.pid, "name": desc.process.process_name}
    elif desc.HasField("thread"):
        t = desc.thread
        out.threads[desc.uuid] = {"pid": t.pid, "tid": t.tid, "name": t.thread_name}
    else:
        assert desc.HasField("counter")
        out.counters[desc.uuid] = {"parent": desc.parent_uuid, "name": desc.name}


def _update(seq: _Sequence, packet: Any) -> None:
    """A packet's changes to its sequence's state: interned data, defaults, clocks."""
    if packet.HasField("interned_data"):
        data = packet.interned_data
        seq.names.update({e.iid: e.name for e in data.event_names})
        seq.categories.update({e.iid: e.name for e in data.event_categories})
        seq.annotations.update({e.iid: e.name for e in data.debug_annotation_names})
        seq.strings.update({e.iid: e.str.decode() for e in data.debug_annotation_string_values})
    if packet.HasField("trace_packet_defaults"):
        defaults = packet.trace_packet_defaults
        seq.clock = defaults.timestamp_clock_id
        seq.track = defaults.track_event_defaults.track_uuid
    if packet.HasField("clock_snapshot"):
        by_id = {c.clock_id: c for c in packet.clock_snapshot.clocks}
        for clock in by_id.values():
            if clock.is_incremental:  # specmd's maps onto boot time 0 at 0
                assert clock.timestamp == 0 and by_id[6].timestamp == 0
                seq.incremental[clock.clock_id] = 0


def read_trace(data: bytes) -> Read:
    """Every packet, in file order: descriptors, sequences' state, events on their tracks."""
    trace = pb.Trace.FromString(data)
    out, seqs = Read(), defaultdict(_Sequence)
    open_slices: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for packet in trace.packet:
        if packet.HasField("track_descriptor"):
            _describe(out, packet.track_descriptor)
            continue
        seq_id = packet.trusted_packet_sequence_id
        if packet.sequence_flags & 1:  # SEQ_INCREMENTAL_STATE_CLEARED
            seqs[seq_id] = _Sequence()
        seq = seqs[seq_id]
        _update(seq, packet)
        if not packet.HasField("track_event"):
            continue
        assert packet.sequence_flags & 2  # SEQ_NEEDS_INCREMENTAL_STATE
        clock = packet.timestamp_clock_id if packet.HasField("timestamp_clock_id") else seq.clock
        if clock in seq.incremental:
            seq.incremental[clock] += packet.timestamp
            ts = seq.incremental[clock]
        else:
            ts = packet.timestamp
        ev = packet.track_event
        track = ev.track_uuid if ev.HasField("track_uuid") else seq.track
        if ev.type == pb.TrackEvent.TYPE_SLICE_END:
            begun = open_slices[track].pop()
            begun["end"] = ts
            continue
        if ev.type == pb.TrackEvent.TYPE_COUNTER:
            kind = ev.WhichOneof("counter_value_field")
            out.samples.setdefault(track, []).append((ts, float(getattr(ev, kind))))
            continue
        name = ev.name if ev.HasField("name") else seq.names[ev.name_iid]
        args = {}
        for a in ev.debug_annotations:
            key = a.name if a.HasField("name") else seq.annotations[a.name_iid]
            args[key] = _value(a, seq)
        event = {"track": track, "name": name, "start": ts, "args": args}
        event["category"] = [seq.categories[i] for i in ev.category_iids]
        event["flows"] = list(ev.flow_ids)
        if ev.type == pb.TrackEvent.TYPE_INSTANT:
            out.instants.append(event)
        else:
            assert ev.type == pb.TrackEvent.TYPE_SLICE_BEGIN
            open_slices[track].append(event)
            out.slices.append(event)
    assert not any(open_slices.values()), "every slice ends"
    return out


def _options(result: RunResult) -> tuple[Any, dict[str, Any]]:
    rec = RunData.from_result(result).recording
    assert rec is not None
    return rec, trace_options(json.loads(result.to_json()), rec)


def _both(result: RunResult) -> tuple[dict[str, Any], Read]:
    rec, options = _options(result)
    data = b"".join(perfetto_chunks(rec.spans, rec.lanes, **options))
    return to_chrome_trace(rec.spans, rec.lanes, **options), read_trace(data)


def _json_view(trace: dict[str, Any], num_experts: int | None) -> dict[str, Any]:
    """The JSON trace's processes, tracks, slices (by track), flows and counters, in the
    protobuf trace's terms: args of -1 (none) and ``expert_id`` beside ``expert`` left out."""
    events = trace["traceEvents"]
    processes = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e["name"] == "thread_name"}  # fmt: skip
    slices = defaultdict(list)
    starts: dict[tuple[int, int], list[tuple[int, int, dict]]] = defaultdict(list)
    for e in events:
        if e["ph"] != "X":
            continue
        args = {k: v for k, v in e["args"].items() if not (k in ("pass", "request") and v < 0)}
        if num_experts and "expert" in args:
            args.pop("expert_id")
        start, end = ns(e["ts"]), ns(e["ts"]) + ns(e["dur"])
        item = (e["name"], e["cat"], start, end, tuple(sorted(args.items())))
        slices[(processes[e["pid"]], threads[(e["pid"], e["tid"])])].append(item)
        starts[(e["pid"], e["tid"])].append((start, end, item))
    flows: dict[int, list] = defaultdict(list)
    for e in events:
        if e["ph"] in ("s", "f"):
            at = ns(e["ts"])
            (hit,) = [i for s, t, i in starts[(e["pid"], e["tid"])] if s <= at <= t]
            flows[e["id"]].append((processes[e["pid"]], threads[(e["pid"], e["tid"])], hit))
    counters = defaultdict(list)
    for e in events:
        if e["ph"] == "C":
            ((unit, value),) = e["args"].items()
            counters[(processes[e["pid"]], f"{e['name']} {unit}")].append((ns(e["ts"]), value))
    return {"processes": sorted(processes.values()), "slices": slices, "flows": flows,
            "counters": counters, "metadata": trace.get("otherData", {})}  # fmt: skip


def _proto_view(read: Read) -> dict[str, Any]:
    pid_name = {p["pid"]: p["name"] for p in read.processes.values()}
    track_name = {u: (pid_name[t["pid"]], t["name"]) for u, t in read.threads.items()}
    slices = defaultdict(list)
    flows: dict[int, list] = defaultdict(list)
    for s in read.slices:
        category = s["category"][0]
        if category == "request":
            continue  # (the JSON's are async events: compared by themselves)
        item = (s["name"], category, s["start"], s["end"], tuple(sorted(s["args"].items())))
        slices[track_name[s["track"]]].append(item)
        for flow in s["flows"]:
            flows[flow].append((*track_name[s["track"]], item))
    counters = {}
    for uuid, samples in read.samples.items():
        c = read.counters[uuid]
        counters[(read.processes[c["parent"]]["name"], c["name"])] = samples
    (run,) = [i for i in read.instants if i["name"] == "run"] or [{"args": {}}]
    return {"processes": sorted(pid_name.values()), "slices": slices, "flows": flows,
            "counters": counters, "metadata": run["args"]}  # fmt: skip


def check_same(result: RunResult) -> Read:
    """The protobuf trace of ``result`` holds the JSON trace's events (see the module)."""
    trace, read = _both(result)
    num_experts = result.inputs.get("num_experts")
    want, got = _json_view(trace, num_experts), _proto_view(read)
    assert got["processes"] == want["processes"]
    assert set(got["slices"]) == set(want["slices"])
    for track, items in want["slices"].items():
        assert got["slices"][track] == sorted(items, key=lambda i: (i[2], i[3])), track
    # a flow: the same two slices (JSON: from the slice its start lies in, to the one its end
    # lies in; protobuf: the two slices carrying its id), by id
    assert len(got["flows"]) == len(want["flows"])
    for flow, ends in want["flows"].items():
        assert sorted(got["flows"][flow]) == sorted(ends), flow
    assert got["counters"].keys() == want["counters"].keys()
    for name, samples in want["counters"].items():
        assert got["counters"][name] == [(t, float(v)) for t, v in samples], name
    assert got["metadata"] == want["metadata"]
    requests = [e for e in trace["traceEvents"] if e.get("cat") == "request" and e["ph"] in "be"]
    phases = Counter((e["name"], ns(e["ts"])) for e in requests)
    proto = Counter()
    for s in read.slices:
        if s["category"] == ["request"]:
            proto.update([(s["name"], s["start"]), (s["name"], s["end"])])
    assert proto == phases
    firsts = [(e["name"], ns(e["ts"]), e["args"]) for e in trace["traceEvents"] if e["ph"] == "i"]
    assert sorted((i["name"], i["start"], i["args"]) for i in read.instants
                  if i["name"] != "run") == sorted(firsts)  # fmt: skip
    return read


def test_the_perfetto_trace_holds_the_json_traces_events(timed: RunResult) -> None:
    read = check_same(timed)
    assert read.slices and read.samples and any(s["flows"] for s in read.slices)


def test_on_two_gpus_too(two_gpus: RunResult) -> None:
    check_same(two_gpus)


def test_with_batches_requests_and_cpu_experts(tiny_config: Callable[..., SimConfig]) -> None:
    """Batched passes of several requests (overlapping request phases: several ``requests``
    tracks) and experts run on the CPU (spans on a host lane)."""
    result = simulate(
        tiny_config(
            workload={"batch_size": 2, "arrivals": "poisson", "arrival_rate_per_s": 50},
            miss={"kind": "cpu-execute"},
        )
    )
    read = check_same(result)
    assert {t["name"] for t in read.threads.values()} >= {"requests #1", "cpu-experts"}


def test_every_flow_binds_to_two_slices(timed: RunResult) -> None:
    read = check_same(timed)
    ends = Counter(f for s in read.slices for f in s["flows"])
    assert ends and set(ends.values()) == {2}


def test_the_tracks_spans_are_interleaved_in_order_of_start(timed: RunResult) -> None:
    """The span slices of all tracks come in order of start in the file (a flow's two ends
    close together), each track's in its own order (its incremental clock reads them right:
    :func:`check_same`)."""
    read = check_same(timed)
    starts = [s["start"] for s in read.slices if s["category"][0] not in ("pass", "request")]
    assert starts == sorted(starts) and len({s["track"] for s in read.slices}) > 2


@pytest.mark.skipif(not jit.available(), reason="numba (the fast extra) is not installed")
@pytest.mark.parametrize("seed", range(6))
def test_spans_in_any_order_make_a_trace_of_them(seed: int, monkeypatch) -> None:
    """Spans not in order of start (not a recording's: put together by a user), some on no
    lane: each span on a lane is one slice of its lane's tracks, with its times; the compiled
    loops write the column encoders' bytes."""
    rng = np.random.default_rng(seed)
    lanes = ["gpu0/compute", "gpu0/h2d", "gpu1/h2d"]
    spans = _random_spans(rng, len(lanes))
    spans["end"] = spans["start"] + rng.integers(0, 5, spans.size) / 4  # (finite)
    spans = spans[rng.permutation(spans.size)]
    compiled = b"".join(perfetto_chunks(spans, lanes, num_experts=4))
    monkeypatch.setattr(jit, "available", lambda: False)
    assert b"".join(perfetto_chunks(spans, lanes, num_experts=4)) == compiled
    slices = _proto_view(read_trace(compiled))["slices"]
    got = Counter((process, track.split(" #")[0], name, start, end)
                  for (process, track), items in slices.items()
                  for name, _, start, end, _ in items)  # fmt: skip
    on = spans[spans["lane"] >= 0]
    want = Counter((*lanes[lane].split("/"), KINDS[kind], ns(start * 1e6), ns(end * 1e6))
                   for lane, kind, start, end
                   in zip(on["lane"], on["kind"], on["start"], on["end"], strict=True))  # fmt: skip
    assert got == want


def test_the_run_folder_writes_it_gzipped_with_no_time_in_the_header(
    timed: RunResult, timed_dir: Path
) -> None:
    rec, options = _options(timed)
    data = b"".join(perfetto_chunks(rec.spans, rec.lanes, **options))
    written = (timed_dir / TRACE_FILE).read_bytes()
    assert gzip.decompress(written) == data
    assert written[4:8] == b"\0\0\0\0"  # (no time in the gzip header)


def test_an_empty_run_writes_a_trace() -> None:
    read = read_trace(b"".join(perfetto_chunks(np.zeros(0, SPAN_DTYPE), [])))
    assert read.slices == [] and read.processes


@pytest.mark.parametrize("values", [[0, 1, 127, 128, 300, 2**63 - 1, 2**64 - 1], [5]])
def test_the_column_encoder_writes_what_protobuf_reads(values: list[int]) -> None:
    """Rows of varint, fixed64, double, string and sub-message fields, present or not, read
    back by protobuf's own parser (a message type declared here with those fields)."""
    n = len(values)
    present = np.arange(n) % 2 == 0
    texts = ["", "a", "h\u00e9llo"]
    blocks = pw.field_varint(1, np.array(values, np.uint64))
    blocks += pw.field_fixed64(47, np.array(values, np.uint64), present)
    blocks += pw.field_double(44, np.arange(n) / 3, present)
    blocks += pw.field_bytes(23, pw.table([t.encode() for t in texts]), np.arange(n) % 3)
    blocks += pw.field_message(11, pw.field_varint(9, np.arange(n)), n, ~present)
    blocks += pw.const_varint(2, 150)
    rows = _rows_type().FromString(pw.flatten(pw.field_message(1, blocks, n), n)).row
    assert len(rows) == n
    for i, (row, value) in enumerate(zip(rows, values, strict=True)):
        assert (row.a, row.d, row.k) == (value, texts[i % 3], 150)
        assert row.HasField("b") == row.HasField("c") == bool(present[i])
        assert row.HasField("e") != bool(present[i])
        if present[i]:
            assert (row.b, row.c) == (value, i / 3)
        else:
            assert row.e.x == i


def _rows_type() -> Any:
    """``Rows { repeated Row row = 1 }`` with ``Row``: 1 uint64 a, 47 fixed64 b, 44 double c,
    23 string d, 11 ``Inner`` e (9 uint64 x), 2 uint64 k (proto2: presence is kept)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    file = descriptor_pb2.FileDescriptorProto(name="specmd_rows.proto", package="t")
    inner = file.message_type.add(name="Inner")
    inner.field.add(name="x", number=9, type=4, label=1)
    row = file.message_type.add(name="Row")
    for name, number, kind in (("a", 1, 4), ("b", 47, 6), ("c", 44, 1), ("d", 23, 9), ("k", 2, 4)):
        row.field.add(name=name, number=number, type=kind, label=1)
    row.field.add(name="e", number=11, type=11, label=1, type_name=".t.Inner")
    rows = file.message_type.add(name="Rows")
    rows.field.add(name="row", number=1, type=11, label=3, type_name=".t.Row")
    pool = descriptor_pool.DescriptorPool()
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("t.Rows"))


@pytest.mark.skipif(not jit.available(), reason="numba (the fast extra) is not installed")
def test_the_compiled_span_packets_are_the_columns_ones(
    two_gpus: RunResult, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The compiled loops write the trace byte for byte as the column encoders (their
    specification) do, on a run of two GPUs: the span packets (flows, GPUs, every annotation),
    the counters' packets, the flows joined by hashing as by sorting."""
    rec, options = _options(two_gpus)
    compiled = b"".join(perfetto_chunks(rec.spans, rec.lanes, **options))
    monkeypatch.setattr(jit, "available", lambda: False)
    assert b"".join(perfetto_chunks(rec.spans, rec.lanes, **options)) == compiled


@pytest.mark.skipif(not jit.available(), reason="numba (the fast extra) is not installed")
@pytest.mark.parametrize("seed", range(12))
def test_the_compiled_span_packets_of_random_spans_are_the_columns_ones(
    seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Random spans (:func:`_random_spans`, their times finite and in order of start) with
    bytes of 0, negative and up to 2**62, experts past the expert count, with and without it:
    the compiled loop gathers and writes each annotation as the column encoder does."""
    rng = np.random.default_rng(seed)
    lanes = ["gpu0/compute", "gpu0/h2d", "gpu1/h2d"]
    spans = _random_spans(rng, len(lanes))
    spans["start"] = np.sort(rng.integers(0, 50, spans.size)) / 4
    spans["end"] = spans["start"] + rng.integers(0, 5, spans.size) / 4
    spans["lane"] = rng.integers(0, len(lanes), spans.size)  # (each span on a track)
    spans["bytes"] = rng.choice([0, -1, 1, 127, 128, 2**62], spans.size)
    spans["expert"] = rng.integers(-1, 300, spans.size)
    spans["layer"] = rng.integers(-1, 3, spans.size)
    spans["request"] = rng.integers(-1, 3, spans.size)
    for num_experts in (None, 64):
        compiled = b"".join(perfetto_chunks(spans, lanes, num_experts=num_experts))
        monkeypatch.setattr(jit, "available", lambda: False)
        assert b"".join(perfetto_chunks(spans, lanes, num_experts=num_experts)) == compiled
        monkeypatch.undo()


@pytest.mark.skipif(not jit.available(), reason="numba (the fast extra) is not installed")
@pytest.mark.parametrize("name", [1, 60, 100, 110, 125, 200])
def test_the_compiled_span_packets_of_long_events_are_the_columns_ones(
    name: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spans of a host's CPU run for two GPUs of long names (the GPU annotation): begin events
    whose packet, or the event itself, takes more than a byte to say its size (the compiled
    loop writes an event where it goes if both take one, and moves it on where not) are
    written as the column encoder writes them."""
    rng = np.random.default_rng(name)
    gpus = ["g" * name + "0", "g" * name + "1"]
    lanes = [f"{gpus[0]}/compute", f"{gpus[1]}/compute", "cpu/pool"]
    spans = _random_spans(rng, len(lanes))
    spans["start"] = np.sort(rng.integers(0, 50, spans.size)) / 4
    spans["end"] = spans["start"] + rng.integers(0, 5, spans.size) / 4
    spans["lane"] = rng.integers(0, len(lanes), spans.size)
    spans["bytes"] = rng.choice([0, 1, 2**62], spans.size)
    per_pass = {
        "pass": [0, 1, 2, 3], "gpu": [gpus[0], gpus[1], gpus[0], gpus[1]],
        "request": [0, 0, 0, 0], "phase": ["decode"] * 4,
        "start_s": [0.0, 3.0, 6.0, 9.0], "end_s": [3.0, 6.0, 9.0, 12.0],
    }  # fmt: skip
    compiled = b"".join(perfetto_chunks(spans, lanes, per_pass=per_pass))
    monkeypatch.setattr(jit, "available", lambda: False)
    assert b"".join(perfetto_chunks(spans, lanes, per_pass=per_pass)) == compiled
    assert compiled.count(gpus[0].encode()) > 2  # (the GPU annotated: not only the tracks')
    sizes = {  # (whether the packet's size, and the event's, take more than a byte)
        (packet.ByteSize() >= 128, packet.track_event.ByteSize() >= 128)
        for packet in pb.Trace.FromString(compiled).packet
        if packet.track_event.type == pb.TrackEvent.TYPE_SLICE_BEGIN
    }
    assert (True, False) in sizes or (True, True) in sizes  # (events moved on, in each case)
    if name in (60, 100, 110):  # (and both ways of moving them)
        assert {(False, False), (True, False), (True, True)} <= sizes


def _random_spans(rng: np.random.Generator, n_lanes: int) -> np.ndarray:
    """Spans of every kind on few keys: many equal keys (the joins keep the last, or the
    first, by position), experts and passes of -1, lanes of no name, ends that tie, -0.0 and
    0.0, NaN and infinity."""
    n = int(rng.integers(0, 1500))  # (up to ~30 groups a hash table: :func:`perfetto._fill`)
    spans = np.zeros(n, SPAN_DTYPE)
    spans["kind"] = rng.integers(0, len(KINDS), n)
    spans["lane"] = rng.integers(-1, n_lanes, n) if n_lanes else -1
    spans["expert"] = rng.integers(-1, 4, n)
    spans["pass_"] = rng.integers(-1, 4, n)
    spans["klass"] = rng.integers(-1, 4, n)
    spans["start"] = rng.integers(0, int(rng.choice([6, 400])), n) / 2
    end = spans["start"] + rng.integers(0, 3, n) / 2
    spans["end"] = np.where(rng.random(n) < 0.05, rng.choice([-0.0, np.nan, np.inf], n), end)
    return spans


@pytest.mark.skipif(not jit.available(), reason="numba (the fast extra) is not installed")
@pytest.mark.parametrize("seed", range(40))
def test_the_compiled_flow_targets_and_classes_are_the_sorting_ones(seed: int) -> None:
    """On random spans (:func:`_random_spans`) on lanes of one device or two, the compiled
    joins find what the specifications find: each stall's and each prefetch's target
    (:func:`~specmd_sim.timeline.flow_targets`) and each span's served class."""
    rng = np.random.default_rng(seed)
    lanes = ["gpu0/compute", "gpu0/h2d", "gpu1/h2d", "cpu/pool"][: int(rng.integers(0, 5))]
    spans = _random_spans(rng, len(lanes))
    for got, want in zip(
        flow_targets_compiled(spans, lanes), flow_targets(spans, lanes), strict=True
    ):
        np.testing.assert_array_equal(got, want)
        assert got.dtype == want.dtype
    got, want = served_class_compiled(spans), served_class(spans)
    np.testing.assert_array_equal(got, want)
    assert got.dtype == want.dtype


def test_the_compiled_joins_of_a_run_are_the_sorting_ones(two_gpus: RunResult) -> None:
    """A run of two GPUs: its stalls' causes, prefetches' uses and served classes (numba
    installed or not)."""
    rec = two_gpus.recording()
    assert rec is not None
    for got, want in zip(
        flow_targets_compiled(rec.spans, rec.lanes), flow_targets(rec.spans, rec.lanes),
        strict=True,
    ):  # fmt: skip
        assert (want >= 0).any()
        np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(served_class_compiled(rec.spans), served_class(rec.spans))


@pytest.mark.parametrize("whole", [True, False])
def test_the_compiled_counter_packets_are_the_columns_ones(whole: bool) -> None:
    """Counter samples at the longest varints (times and values up to 2**63 - 1) and doubles of
    every sign and size: the compiled loop writes the column encoder's bytes."""
    rng = np.random.default_rng(int(whole))
    delta = np.r_[0, 1, 127, 128, 2**63 - 1, rng.integers(0, 2**40, 200)]
    if whole:
        values = np.r_[0, 1, 127, 128, 2.0**62, rng.integers(0, 2**50, 200)].astype(np.float64)
    else:
        values = np.r_[-0.0, 0.5, -1e300, 1e-300, 3.25, rng.normal(0, 1e6, 200)]
    for sequence in (1, 300, 2**40):
        expected = _counter_columns(delta, values, whole, sequence)
        assert _counter_compiled(delta, values, whole, sequence) == expected


def test_counter_samples_out_of_time_order_are_one_clear_error() -> None:
    samples = np.array([(2e-3, 1.0), (1e-3, 2.0)], COUNTER_DTYPE)
    with pytest.raises(ValueError, match="counter cache_used_bytes's samples go back in time"):
        b"".join(perfetto_chunks(np.zeros(0, SPAN_DTYPE), [], {"cache_used_bytes": samples}))


@pytest.mark.skipif(not jit.available(), reason="numba (the fast extra) is not installed")
@pytest.mark.parametrize("seed", range(24))
def test_the_compiled_lane_rows_are_lane_rows(seed: int, monkeypatch) -> None:
    """Spans of lanes below 0, on the lanes and past them, with ties, zero-length spans and a
    dozen at once, their times integers or floats: the same order, bounds, sub-tracks and
    counts as the sorting specification; in order of start by the compiled pass (the
    specification not called), else by the specification itself."""
    rng = np.random.default_rng(seed)
    n, n_lanes = int(rng.integers(0, 300)), int(rng.integers(0, 6))
    lane = rng.integers(-2, n_lanes + 2, n).astype(np.int16)
    start = rng.integers(0, 40, n)
    in_order = seed % 3 != 0
    if in_order:
        start = np.sort(start)
    end = start + rng.integers(0, 1 + int(rng.integers(1, 12)), n)
    for s, e in ((start, end), (start / 7, end / 7)):
        want = lane_rows(lane, s, e, n_lanes)
        if in_order:
            monkeypatch.setattr(perfetto, "lane_rows", None)  # (a call would fail)
        got = lane_rows_compiled(lane, s, e, n_lanes)
        monkeypatch.undo()
        for g, w in zip(got, want, strict=True):
            np.testing.assert_array_equal(g, w)
            assert g.dtype == w.dtype


@pytest.mark.parametrize("seed", range(8))
def test_the_compiled_flow_columns_are_the_sorting_ones(seed: int, monkeypatch) -> None:
    """Flows between random spans, several on one span and a span at both ends of one: the
    same columns, ids and type with numba as without."""
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 60))
    pairs = []
    for name in ("a", "b"):
        k = int(rng.integers(0, 40))
        pairs.append((name, rng.integers(0, n, k), rng.integers(0, n, k)))
    compiled = _flow_columns(pairs, n)
    monkeypatch.setattr(jit, "available", lambda: False)
    sorting = _flow_columns(pairs, n)
    assert len(compiled) == len(sorting)
    for a, b in zip(compiled, sorting, strict=True):
        np.testing.assert_array_equal(a, b)
        assert a.dtype == b.dtype


def test_the_compiled_lane_rows_leave_what_they_do_not_take_to_the_specification() -> None:
    """Ends of another type than the starts, or NaN: the specification's answer."""
    lane = np.zeros(3, np.int16)
    for start, end in (
        (np.array([0, 1, 2]), np.array([1.5, 2.0, 3.0])),
        (np.array([0.0, 1.0, 2.0]), np.array([np.nan, 2.0, 3.0])),
    ):
        for got, want in zip(
            lane_rows_compiled(lane, start, end, 1), lane_rows(lane, start, end, 1), strict=True
        ):
            np.testing.assert_array_equal(got, want)

"""A run's Perfetto trace in Perfetto's own protobuf format, built from the span arrays in bulk.

The run folder's trace (``trace.pftrace.gz``): what :func:`specmd_sim.timeline.chrome_trace_chunks`
puts in the Chrome JSON format (the same processes, tracks, slices and their args, flows,
counters and metadata: :func:`~specmd_sim.timeline.trace_layout`,
:func:`~specmd_sim.timeline.flow_pairs`), as ``TracePacket`` messages of Perfetto's
``TrackEvent`` schema (https://perfetto.dev/docs/reference/synthetic-track-event), which
ui.perfetto.dev and ``trace_processor`` read natively (gzipped as well):

- a ``TrackDescriptor`` per process (``pid``, its name and sort index), per track (a thread of
  its process: ``passes``, each lane's sub-tracks, ``requests``) and per counter (a counter
  track of its process, named as the JSON names it: ``"<label> <unit>"``);
- each span a ``SLICE_BEGIN`` and a ``SLICE_END`` on its track, with the category and the
  debug annotations of its JSON event (``pass``, ``request``, ``layer``, ``expert``,
  ``expert_id``, ``bytes``, ``class``, ``gpu``); event names, categories and annotation names
  are interned (each track is a packet sequence of its own, whose first packet carries them);
- a flow (``flow_ids``, Perfetto's global flow ids, numbered as
  :func:`~specmd_sim.timeline.flow_pairs` numbers them) on the slices at both of its ends:
  Perfetto binds a flow id to the slice whose begin carries it, so every flow binds;
- the passes (slices on each GPU's ``passes`` track), each request's phases (slices on
  ``requests`` tracks) and first tokens (instants), the run's metadata (an instant ``run`` at
  0 on the first track) and the counters' change points (``COUNTER`` events).

The packets are built a column at a time (:mod:`specmd_sim.protowire`), each track's in time
order, a chunk of :data:`CHUNK` spans at a time. Their fields are ordered for the compressor
(protobuf readers take any order): a packet's time, then its sequence and flags, then its
event, so that what repeats from packet to packet (the sequence, the event's type, name and
category) runs unbroken; in a span's event, the annotations that rarely change between
neighbours (request, GPU, bytes, class, pass) before those that do (layer, expert, flows). And
the spans of all tracks are interleaved in order of start (each track's packets still in its
order), so that a flow's id, on slices of two tracks, recurs within the compressor's window.
At 4,000 tokens that deflates 123 MB of protobuf to 9.8 MB at level 3, where the fields in the
order of their numbers, a track after another, took 10.8 MB (2 cores, 2026-12-07:
``benchmarks/outputs_size.py``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

from specmd_sim import protowire as pw
from specmd_sim.cache.states import AccessClass
from specmd_sim.engine import jit
from specmd_sim.gz import write_gzip
from specmd_sim.timeline import KIND as _KIND
from specmd_sim.timeline import (
    KINDS,
    TRANSFER_KINDS,
    LaneRowsOf,
    Served,
    TraceLayout,
    class_name,
    counter_label,
    flow_pairs,
    flow_targets,
    lane_process,
    lane_rows,
    served_class,
    served_gpu,
    served_of,
    step_changes,
    to_ns,
    trace_layout,
    track_rows,
)

CHUNK = 1 << 16
"""Spans (or counter samples) encoded at a time: ~15 MB of numpy arrays in flight."""
GZIP_LEVEL = 3
"""The default job's trace at 4,000 tokens (123 MB of protobuf, fields ordered and spans
interleaved as the module's docstring says) by zlib-ng (:mod:`specmd_sim.gz`), in
``write_gzip``'s CPU seconds: 11.1 MB at level 2 in 0.15 s, 9.8 MB at 3 in 0.22 s, 9.1 MB at
4 in 0.27 s, 8.7 MB at 5 in 0.31 s; by the standard library's zlib (one stream), 10.0 MB at 3
in 0.35 s, 9.7 MB at 4 in 0.44 s (2 cores, 2026-12-07). Level 3 keeps the trace under 20
bytes an access with either (19.2 and 19.5; 19.2 at 40,000 tokens too)."""

# TrackEvent.Type; TracePacket.sequence_flags
SLICE_BEGIN, SLICE_END, INSTANT, COUNTER = 1, 2, 3, 4
STATE_CLEARED, NEEDS_STATE = 1, 2
_BOOTTIME, _CLOCK = 6, 64  # a builtin clock; the sequences' own (ids 64-127 are per sequence)
# uuid and tid bases: processes, tracks and counters never share a uuid, nor a thread's tid a
# process's pid
_PROCESS_UUID, _TRACK_UUID, _COUNTER_UUID, _TID = 1, 1 << 20, 2 << 20, 1 << 16

CATEGORIES = ("compute", "transfer", "stall", "pass", "request")
_CATEGORY_OF_KIND = np.array([
    CATEGORIES.index(
        "stall" if k == "stall" else
        "transfer" if k in (*TRANSFER_KINDS, "write_back", "nvme_read") else "compute"
    ) + 1
    for k in KINDS
])  # fmt: skip
ANNOTATIONS = (
    "pass", "request", "layer", "expert", "expert_id", "bytes", "class", "gpu", "phase",
    "ttft_ms",
)  # fmt: skip
_ANN = {name: i + 1 for i, name in enumerate(ANNOTATIONS)}
_ANN_EXPERT, _ANN_EXPERT_ID = _ANN["expert"], _ANN["expert_id"]
CLASSES = (*(class_name(k) for k in range(len(AccessClass))), "unused")
"""The ``class`` annotation's values, interned (iids from 1): the access classes, and
``unused`` for a prefetch whose target layer did not run its expert."""
_UNUSED = len(AccessClass)
# the annotation names' iids and the keys the compiled span loop writes (numba reads these
# globals as constants): varint value 0x20 (field 4), string 0x32 (6), interned string (17)
_PASS, _REQUEST, _LAYER, _BYTES, _CLASS, _GPU = (
    _ANN[name] for name in ("pass", "request", "layer", "bytes", "class", "gpu")
)
_INT_VALUE, _STRING_VALUE, _STRING_IID = 0x20, 0x32, 0x88  # (17 << 3: 0x88 0x01 as a varint)


def _interned() -> bytes:
    """The ``InternedData`` every sequence starts with: span kinds, categories, annotation
    names and the ``class`` annotation's values (iids from 1, in the order of :data:`KINDS`,
    :data:`CATEGORIES`, :data:`ANNOTATIONS`, :data:`CLASSES`)."""
    parts = []
    interned = ((2, KINDS), (1, CATEGORIES), (3, ANNOTATIONS), (29, CLASSES))
    for field, names in interned:  # event names, categories, annotation names, their strings
        n = len(names)
        entry = pw.field_varint(1, np.arange(1, n + 1)) + pw.field_bytes(
            2, pw.table([s.encode() for s in names]), np.arange(n)
        )
        parts.append(pw.flatten(pw.field_message(field, entry, n), n))
    return b"".join(parts)


def _packets(inner: pw.Blocks, n: int) -> bytes:
    """``n`` ``TracePacket`` rows as fields of the ``Trace`` message (field 1)."""
    return pw.flatten(pw.field_message(1, inner, n), n)


def _sequence_start(sequence: int, interned: bytes, track_uuid: int) -> bytes:
    """A sequence's first packets: its interned data, its defaults (events on ``track_uuid``,
    times on the sequence's clock) and that clock: incremental, so each packet's timestamp is
    the nanoseconds since the sequence's previous one (the first's since 0)."""
    raw = np.frombuffer(interned, np.uint8)[None, :]
    c = pw.const_varint
    defaults = c(58, _CLOCK) + pw.field_message(11, c(11, track_uuid), 1)
    fields = c(10, sequence) + c(13, STATE_CLEARED) + pw.field_message(12, [(raw, raw.shape[1])], 1)
    fields += pw.field_message(59, defaults, 1)
    clocks = [c(1, _CLOCK) + c(2, 0) + c(3, 1), c(1, _BOOTTIME) + c(2, 0)]
    snapshot = [block for clock in clocks for block in pw.field_message(1, clock, 1)]
    snapshot += c(2, _BOOTTIME)
    second = c(10, sequence) + c(13, NEEDS_STATE) + c(8, 0) + c(58, _BOOTTIME)
    second += pw.field_message(6, snapshot, 1)
    return _packets(fields, 1) + _packets(second, 1)


def _annotation(name: str, value: pw.Blocks, n: int, present: np.ndarray | None) -> pw.Blocks:
    """A debug annotation (its interned name, ``value``) where ``present``."""
    return pw.field_message(4, pw.const_varint(1, _ANN[name]) + value, n, present)


def _int_annotation(name: str, values: np.ndarray) -> pw.Blocks:
    """An integer annotation where the value is >= 0 (-1: none)."""
    values = values.astype(np.int64)
    present = values >= 0
    return _annotation(name, pw.field_varint(4, np.maximum(values, 0)), values.size, present)


def _deltas(start: np.ndarray, end: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A sequence's slices' begin and end times as deltas on its incremental clock (the slices
    follow each other: each begins at or after the previous one's end)."""
    begin = start - np.r_[0, end[:-1]]
    if begin.size and int(begin.min()) < 0:  # (sub-tracks and a GPU's passes never overlap)
        raise ValueError("trace: slices of one track overlap; expected them one after another")
    return begin, end - start


def _slices(ts: np.ndarray, te: np.ndarray, sequence: int | np.ndarray, begin: pw.Blocks) -> bytes:
    """A begin packet and an end packet per row (``begin``: the begin event's fields beyond
    its type), one row after another, on ``sequence`` (one, or a row's each); ``ts`` and ``te``
    as deltas on their sequence's clock (:func:`_deltas`)."""
    n = ts.size
    on = (
        pw.field_varint(10, sequence)
        if isinstance(sequence, np.ndarray)
        else pw.const_varint(10, sequence)
    )
    seq = on + pw.const_varint(13, NEEDS_STATE)
    event = pw.const_varint(9, SLICE_BEGIN) + begin
    first = pw.field_varint(8, ts) + seq + pw.field_message(11, event, n)
    end = pw.const_varint(9, SLICE_END)
    second = pw.field_varint(8, te) + seq + pw.field_message(11, end, n)
    return pw.flatten(pw.field_message(1, first, n) + pw.field_message(1, second, n), n)


def perfetto_chunks(
    spans: np.ndarray,
    lanes: list[str],
    counters: dict[str, np.ndarray] | None = None,
    *,
    per_pass: Mapping[str, Sequence[Any]] | None = None,
    per_request: Mapping[str, Sequence[Any]] | None = None,
    num_experts: int | None = None,
    metadata: dict[str, Any] | None = None,
    served: Served | None = None,
    rows: LaneRowsOf | None = None,
    flows: Callable[[], np.ndarray] | None = None,
) -> Iterator[bytes | memoryview]:
    """The trace (a ``perfetto.protos.Trace``) as consecutive pieces of its bytes (``bytes``,
    or a ``memoryview`` of a buffer of its own); the
    arguments are :func:`~specmd_sim.timeline.chrome_trace_chunks`', and ``flows``, where the
    caller derives the spans' flow ids (:func:`flow_table`) beside the trace: what gives them
    once the packets that need none are made (a thread's result, say)."""
    counters = counters or {}
    per_pass, per_request = per_pass or {}, per_request or {}
    if rows is None:
        rows = lane_rows_compiled(spans["lane"], spans["start"], spans["end"], len(lanes))
    layout = trace_layout(spans, lanes, counters, per_pass, per_request, rows)
    requests = _request_tracks(per_request, layout)
    interned = _interned()
    yield _descriptors(layout, requests.tracks, sorted(counters))
    # sequences: a track's its id; after the tracks, each GPU's first tokens, the counters, the
    # metadata. The spans' last: what needs no flows is written while they are derived
    first_tokens = len(layout.tracks) + len(requests.tracks) + 1
    counters_from = first_tokens + len(layout.pass_pids)
    yield from _counter_packets(counters, counters_from, interned)
    yield from _pass_packets(per_pass, layout, interned)
    yield from _request_packets(per_request, requests, layout, interned, first_tokens)
    if metadata and layout.tracks:
        yield _metadata_packet(metadata, interned, counters_from + len(counters))
    ids = flows() if flows is not None else flow_table(spans, lanes)
    klass = served_class_compiled(spans) if served is None else served_of(served)
    yield from _span_packets(spans, klass, ids, lanes, per_pass, num_experts, layout, interned)


def _descriptors(layout: TraceLayout, request_tracks: list[tuple[int, str]],
                 counters: list[str]) -> bytes:  # fmt: skip
    """The ``TrackDescriptor`` packets: processes, tracks (then request tracks), counters."""
    pids = list(layout.pid_of.values())
    names = pw.table([name.encode() for name in layout.pid_of])
    n = len(pids)
    process = pw.field_varint(1, pids) + pw.field_bytes(6, names, np.arange(n))
    process += pw.field_varint(3, pids)
    out = [_packets(pw.field_message(60, pw.field_varint(1, np.add(pids, _PROCESS_UUID))
                                     + pw.field_message(3, process, n), n), n)]  # fmt: skip
    tracks = layout.tracks + request_tracks
    if tracks:
        n = len(tracks)
        t = np.arange(1, n + 1)
        thread = pw.field_varint(1, [pid for pid, _ in tracks]) + pw.field_varint(2, t + _TID)
        thread += pw.field_bytes(5, pw.table([name.encode() for _, name in tracks]), t - 1)
        thread += pw.field_varint(3, t)
        desc = pw.field_varint(1, t + _TRACK_UUID) + pw.field_message(4, thread, n)
        out.append(_packets(pw.field_message(60, desc, n), n))
    if counters:
        n = len(counters)
        labels = [" ".join(counter_label(name)).encode() for name in counters]
        parent = [layout.counter_pid(name) + _PROCESS_UUID for name in counters]
        desc = pw.field_varint(1, np.arange(n) + _COUNTER_UUID) + pw.field_varint(5, parent)
        desc += pw.field_bytes(2, pw.table(labels), np.arange(n))
        desc += pw.field_message(8, [], n)
        out.append(_packets(pw.field_message(60, desc, n), n))
    return b"".join(out)


def _span_packets(
    spans: np.ndarray,
    klass: np.ndarray,
    flows: np.ndarray,
    lanes: list[str],
    per_pass: Mapping[str, Sequence[Any]],
    num_experts: int | None,
    layout: TraceLayout,
    interned: bytes,
) -> Iterator[bytes | memoryview]:
    """Each track's spans, a sequence per track in time order (a sub-track's spans never
    overlap), with the class each served (``klass``) and their flows (:func:`_flow_columns`):
    every track's first packets, then the spans of all tracks interleaved in order of start,
    so that a flow's two ends, on two tracks, lie close together in the file and the
    compressor finds the second's id (at 4,000 tokens, 4% fewer bytes at level 3 than one
    track after another)."""
    tid = layout.span_tid  # (0: on no track, a lane of no name: not drawn)
    order = layout.order[tid[layout.order] > 0]
    by_track = tid[order].astype(np.int16 if len(layout.tracks) < 2**15 else np.int32)
    sort = np.argsort(by_track, kind="stable")  # (by track, each in its order; 16-bit keys
    # sort by radix)
    order, on_track = order[sort], by_track[sort]
    gpus = list(dict.fromkeys(per_pass.get("gpu", [])))
    gpu = served_gpu(spans, lanes, per_pass, gpus).astype(np.int16)  # (GPUs: a few)
    gpu_names = pw.table([g.encode() for g in gpus] or [b""])
    transfer = np.isin(np.arange(len(KINDS)), [_KIND[k] for k in TRANSFER_KINDS])
    ts, te = np.zeros(spans.size, np.int64), np.zeros(spans.size, np.int64)  # (a span's deltas)
    bounds: np.ndarray | list[int] = (
        np.flatnonzero(np.r_[True, on_track[1:] != on_track[:-1], True]) if order.size else []
    )
    for lo_track, hi_track in itertools.pairwise(bounds):
        track = int(on_track[lo_track])
        yield _sequence_start(track, interned, track + _TRACK_UUID)
        mine = order[lo_track:hi_track]
        ts[mine], te[mine] = _deltas(layout.start_ns[mine], layout.end_ns[mine])
    # every track's spans in order of start, then position (each track's own order: a
    # recording's are in that order already)
    on = tid > 0
    rows, start = np.flatnonzero(on), np.compress(on, spans["start"])
    if not bool(np.all(start[1:] >= start[:-1])):
        rows = rows[np.argsort(start, kind="stable")]
    compiled = jit.available()
    for lo in range(0, rows.size, CHUNK):
        i = rows[lo : lo + CHUNK]
        if compiled:  # (the columns gathered by the compiled loop as it writes)
            out = np.empty(i.size * _span_bound(len(flows), gpu_names[0].shape[1]), np.uint8)
            end = _span_bytes(
                i, ts, te, tid, spans["kind"], spans["pass_"], spans["request"], gpu,
                gpu_names[0], gpu_names[1], spans["layer"], spans["expert"], num_experts or 0,
                spans["bytes"], klass, transfer, flows, out,
            )  # fmt: skip
            yield out[:end].data  # (memoryview(out[:end]): a buffer of its own, no copy)
            continue
        s = {k: spans[k][i] for k in _SPAN_FIELDS}  # (columns: a row's other fields unread)
        kind, expert, k = s["kind"].astype(np.int64), s["expert"].astype(np.int64), klass[i]
        columns = _SpanColumns(
            ts=ts[i], te=te[i], sequence=tid[i].astype(np.int64), name=kind + 1,
            category=np.take(_CATEGORY_OF_KIND, kind),
            pass_=s["pass_"].astype(np.int64), request=s["request"].astype(np.int64),
            gpu=gpu[i].astype(np.int64), gpu_names=gpu_names, layer=s["layer"].astype(np.int64),
            expert=np.where(expert >= 0, expert % num_experts, -1) if num_experts else expert,
            expert_name=_ANN["expert" if num_experts else "expert_id"],
            size=np.where(s["bytes"] != 0, s["bytes"], -1).astype(np.int64),
            klass=np.where((k >= 0) | transfer[kind], np.where(k >= 0, k, _UNUSED) + 1, 0),
            flows=flows[:, i].T.astype(np.int64),
        )  # fmt: skip
        yield _encode_columns(columns)


_SPAN_FIELDS = ("kind", "expert", "pass_", "request", "layer", "bytes")


@dataclass
class _SpanColumns:
    """A chunk of spans as the columns their packets are made of: times as deltas on their
    track's clock (:func:`_deltas`), each one's sequence (its track), the name iid, category
    iid, the int annotations (-1: none), the GPU (an index into ``gpu_names``, -1: none), the
    expert annotation's name iid (``expert`` where the expert count is known, else
    ``expert_id``), the class iid (0: none) and the flow ids (0: none)."""

    ts: np.ndarray
    te: np.ndarray
    sequence: np.ndarray
    name: np.ndarray
    category: np.ndarray
    pass_: np.ndarray
    request: np.ndarray
    gpu: np.ndarray
    gpu_names: tuple[np.ndarray, np.ndarray]
    layer: np.ndarray
    expert: np.ndarray
    expert_name: int
    size: np.ndarray
    klass: np.ndarray
    flows: np.ndarray


def _encode_columns(c: _SpanColumns) -> bytes:
    """The spans' begin and end packets, a column at a time (:mod:`specmd_sim.protowire`): the
    specification of the compiled loop (:func:`_span_bytes`)."""
    n = c.ts.size
    begin = pw.field_varint(10, c.name) + pw.field_varint(3, c.category)
    begin += _int_annotation("request", c.request)
    value = pw.field_bytes(6, c.gpu_names, np.maximum(c.gpu, 0))
    begin += _annotation("gpu", value, n, c.gpu >= 0)
    begin += _int_annotation("bytes", c.size)
    begin += _annotation("class", pw.field_varint(17, c.klass), n, c.klass > 0)
    begin += _int_annotation("pass", c.pass_) + _int_annotation("layer", c.layer)
    body = pw.const_varint(1, c.expert_name) + pw.field_varint(4, np.maximum(c.expert, 0))
    begin += pw.field_message(4, body, n, c.expert >= 0)
    for column in c.flows.T:
        begin += pw.field_fixed64(47, column, column > 0)
    return _slices(c.ts, c.te, c.sequence, begin)


@jit.compiled
def _span_bound(flows: int, gpu_name: int) -> int:
    """Bytes a span's two packets take at most: the begin event 128 (type 2, name and category
    11 each, five int annotations 15 each, the class 16, the GPU's 8) + the GPU's name + 10 a
    flow, its packet 27 more, the end packet 26."""
    return 200 + 10 * flows + gpu_name


@jit.compiled_inline
def _varint_size(value: int) -> int:
    size = 1
    while value >= 128:
        value >>= 7
        size += 1
    return size


@jit.compiled_inline
def _put_varint(out: np.ndarray, at: int, value: int) -> int:
    while value >= 128:
        out[at] = (value & 0x7F) | 0x80
        value >>= 7
        at += 1
    out[at] = value
    return at + 1


@jit.compiled_inline
def _put_annotation(out: np.ndarray, at: int, name: int, key: int, value: int) -> int:
    """A debug annotation: ``name`` (its interned iid) and a varint ``value`` under ``key``."""
    body = 2 + _varint_size(key) + _varint_size(value)
    out[at] = 0x22  # TrackEvent.debug_annotations
    at = _put_varint(out, at + 1, body)
    out[at] = 0x08  # .name_iid
    out[at + 1] = name
    at = _put_varint(out, at + 2, key)
    return _put_varint(out, at, value)


@jit.compiled_inline
def _head_size(time: int, sequence: int) -> int:
    """The bytes of a packet's fields before its track event (:func:`_packet_head`)."""
    return 1 + _varint_size(time) + 1 + _varint_size(sequence) + 2


@jit.compiled_inline
def _packet_head(out: np.ndarray, at: int, size: int, time: int, sequence: int) -> int:
    """A packet's key and ``size``, then its fields before the track event (in the order of
    the module's docstring): its ``time`` (a delta), its ``sequence`` and flags."""
    out[at] = 0x0A  # Trace.packet
    at = _put_varint(out, at + 1, size)
    out[at] = 0x40  # TracePacket.timestamp
    at = _put_varint(out, at + 1, time)
    out[at] = 0x50  # .trusted_packet_sequence_id
    at = _put_varint(out, at + 1, sequence)
    out[at], out[at + 1] = 0x68, 2  # .sequence_flags = SEQ_NEEDS_INCREMENTAL_STATE
    return at + 2


@jit.compiled
def _span_bytes(rows, ts, te, track, kind, pass_, request, gpu, gpu_text, gpu_len, layer,  # type: ignore[no-untyped-def]
                expert, num_experts, size, klass, transfer, flows, out):  # fmt: skip
    """The begin and end packets of the spans ``rows`` (of the whole columns ``ts`` ...
    ``flows``: a span's times as deltas on its track's clock, its track, which is the sequence
    it is on, ...) into ``out``; the bytes written. The values as :func:`_span_packets`
    makes the columns of :func:`_encode_columns` (the expert modulo
    ``num_experts`` where not 0, ``size`` 0 as none, the class's iid), field by field as it
    orders them (keys: protobuf's ``number << 3 | wire type``)."""
    at = 0
    expert_name = _ANN_EXPERT if num_experts else _ANN_EXPERT_ID
    for i in range(rows.size):
        r = rows[i]
        sequence = track[r]
        k = kind[r]
        # the event written where it goes if its packet's size and its own take a byte each
        # (nearly all do), moved on where not
        head = _head_size(ts[r], sequence)
        placed = at + 2 + head + 2
        event = out[placed:]
        event[0], event[1] = 0x48, 1  # TrackEvent.type = SLICE_BEGIN
        event[2] = 0x50  # .name_iid
        e = _put_varint(event, 3, k + 1)
        event[e] = 0x18  # .category_iids
        e = _put_varint(event, e + 1, _CATEGORY_OF_KIND[k])
        if request[r] >= 0:
            e = _put_annotation(event, e, _REQUEST, _INT_VALUE, request[r])
        g = gpu[r]
        if g >= 0:
            length = gpu_len[g]
            event[e] = 0x22
            e = _put_varint(event, e + 1, 3 + _varint_size(length) + length)
            event[e], event[e + 1], event[e + 2] = 0x08, _GPU, _STRING_VALUE  # .name_iid, value
            e = _put_varint(event, e + 3, length)
            for j in range(length):
                event[e + j] = gpu_text[g, j]
            e += length
        if size[r] > 0:
            e = _put_annotation(event, e, _BYTES, _INT_VALUE, size[r])
        c = klass[r]
        if c >= 0 or transfer[k]:
            e = _put_annotation(event, e, _CLASS, _STRING_IID, (c if c >= 0 else _UNUSED) + 1)
        if pass_[r] >= 0:
            e = _put_annotation(event, e, _PASS, _INT_VALUE, pass_[r])
        if layer[r] >= 0:
            e = _put_annotation(event, e, _LAYER, _INT_VALUE, layer[r])
        x = expert[r]
        x = x % num_experts if num_experts and x >= 0 else x
        if x >= 0:
            e = _put_annotation(event, e, expert_name, _INT_VALUE, x)
        for f in range(flows.shape[0]):
            flow = flows[f, r]
            if flow > 0:
                event[e] = 0xF9  # .flow_ids (47, fixed64): 0xF9 0x02
                event[e + 1] = 0x02
                for b in range(8):
                    event[e + 2 + b] = (flow >> (8 * b)) & 0xFF
                e += 10
        # the begin packet: timestamp, the sequence and its flags, the event
        size_ = head + 1 + _varint_size(e) + e
        moved = _varint_size(size_) + _varint_size(e) - 2
        if moved:
            for j in range(e - 1, -1, -1):
                out[placed + moved + j] = out[placed + j]
        at = _packet_head(out, at, size_, ts[r], sequence)
        out[at] = 0x5A  # .track_event
        at = _put_varint(out, at + 1, e) + e
        # the end packet
        size_ = _head_size(te[r], sequence) + 4
        at = _packet_head(out, at, size_, te[r], sequence)
        out[at], out[at + 1], out[at + 2], out[at + 3] = 0x5A, 2, 0x48, 2  # type = SLICE_END
        at += 4
    return at


def flow_table(spans: np.ndarray, lanes: list[str]) -> np.ndarray:
    """The flow ids each span carries (:func:`_flow_columns` of
    :func:`~specmd_sim.timeline.flow_pairs`, their targets by :func:`flow_targets_compiled`):
    what the trace's span packets need of the flows, derived in one call (a thread's)."""
    return _flow_columns(flow_pairs(spans, lanes, flow_targets_compiled(spans, lanes)), spans.size)


def flow_targets_compiled(spans: np.ndarray, lanes: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """:func:`~specmd_sim.timeline.flow_targets` (what ended each stall, what used each
    prefetch) by compiled hash joins (:func:`_flow_targets`) where numba is installed, else by
    it: transfers by device, expert and end; CPU runs by pass, expert and end; copies by device
    and end; GPU runs by pass and expert. Each keeps the last row by position with equal keys,
    as ``match_keys`` does; an end time is a key by its bits (-0.0 as 0.0; a NaN equals
    nothing)."""
    if not jit.available() or not spans.size:
        return flow_targets(spans, lanes)
    device: np.ndarray | list[int] = (
        np.unique([lane_process(n) for n in lanes], return_inverse=True)[1] if lanes else []
    )
    lane = spans["lane"]  # (the columns read where they lie: no copies but the two below)
    dev = np.r_[device, -1].astype(np.int32)[np.where(lane >= 0, lane, len(lanes))]
    role, expert, pass_ = _ROLE[spans["kind"]], spans["expert"], spans["pass_"]
    end = np.add(spans["end"], 0.0)  # (-0.0 as 0.0)
    bits = end.view(np.int64)
    stall = (role & _STALL) != 0
    waits, drains = bool((stall & (expert >= 0)).any()), bool((stall & (expert < 0)).any())
    prefetches = bool((role & _PREFETCH).any())
    joins = (  # (the rows, by position; the time they are grouped by; the key; what looks)
        ((role & _TRANSFER) != 0, end, dev, expert, bits, waits),
        ((role & _CPU_RUN) != 0, end, pass_, expert, bits, waits),
        ((role & _COPY) != 0, end, dev, dev, bits, drains),
        (((role & _GPU_RUN) != 0) & (pass_ >= 0), pass_, pass_, expert, pass_, prefetches),
    )  # (a key of two parts has its first twice)
    transfers, cpu, copies, runs = [  # (a table no stall or prefetch looks in: left empty)
        _filled(np.flatnonzero(rows) if looked else np.zeros(0, np.int64), time, a, b, c, True)
        for rows, time, a, b, c, looked in joins
    ]
    out = np.full((2, spans.size), -1, np.int64)
    _flow_targets(role, dev, expert, pass_, spans["start"], end, transfers, cpu, copies, runs, out)
    return out[0], out[1]


def served_class_compiled(spans: np.ndarray) -> np.ndarray:
    """:func:`~specmd_sim.timeline.served_class` by a compiled hash join (:func:`_served`)
    where numba is installed, else by it: each transfer takes the class of the first run (by
    position) of its (pass, expert), as the sorting join there finds it."""
    if not jit.available() or not spans.size:
        return served_class(spans)
    role, out = _ROLE[spans["kind"]], spans["klass"].astype(np.int8)
    pass_, expert = spans["pass_"], spans["expert"]
    runs = np.flatnonzero(((role & (_GPU_RUN | _CPU_RUN)) != 0) & (out >= 0) & (pass_ >= 0))
    _served(role, out, pass_, expert, _filled(runs, pass_, pass_, expert, pass_, False))
    return out


# each kind's roles in the joins, bits: a transfer, a copy (transfer or write-back), an expert
# run on the GPU, on the CPU, a prefetch (promoted ones included), a stall
_TRANSFER, _COPY, _GPU_RUN, _CPU_RUN, _PREFETCH, _STALL = 1, 2, 4, 8, 16, 32
_ROLE = np.array(
    [
        (_TRANSFER | _COPY if k in TRANSFER_KINDS else 0)
        | (_COPY if k == "write_back" else 0)
        | (_GPU_RUN if k == "expert" else 0)
        | (_CPU_RUN if k == "cpu_expert" else 0)
        | (_PREFETCH if k in ("prefetch", "promoted_prefetch") else 0)
        | (_STALL if k == "stall" else 0)
        for k in KINDS
    ],
    np.int8,
)
_PER_GROUP = 16
"""Keys a hash table (:func:`_filled`) holds per group on average."""

Table = tuple[np.ndarray, np.ndarray, np.ndarray]
"""A hash table of :func:`_filled`: its slots, each group's first slot, its groups' bounds."""


def _filled(rows: np.ndarray, time: np.ndarray, a: np.ndarray, b: np.ndarray, c: np.ndarray,
            last: bool) -> Table:  # fmt: skip
    """A hash table of the keys ``(a, b, c)`` of ``rows`` (in order: an equal key's row the
    last where ``last``, else the first), grouped by ``time`` (:func:`_fill`). Allocated here,
    by numpy, at its largest (a group's slots: its keys and a third, and one more), its slots
    touched only as far as they are used."""
    m = len(rows)
    groups = max(1, m // _PER_GROUP)
    table = (np.empty((m + m // 3 + groups, 3), np.int64), np.empty(groups + 1, np.int64),
             np.empty(2))  # fmt: skip
    _fill(table, rows, time, a, b, c, last)
    return table


@jit.compiled
def _fill(table, rows, time, a, b, c, last):  # type: ignore[no-untyped-def]
    """Fill ``table`` (:func:`_filled`) with the keys ``(a, b, c)`` of ``rows`` (open addressing,
    linear probing within a group). A key's group is its row's ``time`` among ``rows``' times
    (:func:`_group`), so that a table filled and looked up about in order of time is read and
    written a small part at a time, in the processor's caches. Each group holds its keys' count
    and a third more slots (at most 3/4 full)."""
    slots, base, bounds = table
    groups = base.size - 1
    lo, hi = np.inf, -np.inf
    for i in rows:
        if abs(time[i]) < np.inf:  # (finite)
            lo, hi = min(lo, time[i]), max(hi, time[i])
    bounds[0] = lo if lo <= hi else 0.0
    bounds[1] = groups / (hi - lo) if lo < hi else 0.0
    base[:] = 0
    for i in rows:
        base[_group(time[i], bounds, groups) + 1] += 1
    for g in range(groups):  # (counts to each group's first slot)
        count = base[g + 1]
        base[g + 1] = base[g] + (count + count // 3 + 1 if count else 0)
    slots[: base[groups]] = 0  # (row + 1; 0: empty)
    for i in rows:
        g = _group(time[i], bounds, groups)
        first, size = base[g], base[g + 1] - base[g]
        ab, key = _key(a[i], b[i]), np.int64(c[i])
        at = first + _home(ab, key) % size
        while slots[at, 2] and not (slots[at, 0] == ab and slots[at, 1] == key):
            at = at + 1 if at + 1 < first + size else first
        if last or not slots[at, 2]:
            slots[at, 0], slots[at, 1], slots[at, 2] = ab, key, i + 1


@jit.compiled_inline
def _group(value: float, bounds: np.ndarray, groups: int) -> int:
    """The group of a key of ``value``: its place between the lowest and the highest finite
    value (``bounds``: the lowest, the groups per unit), in ``groups`` equal parts, those
    outside them (or all, where the finite values are one) in the first or the last. A function
    of the value alone: filling and looking up place a key alike."""
    x = (value - bounds[0]) * bounds[1]
    if 0 <= x < groups - 1:
        return int(x)
    return 0 if x < 0 else groups - 1


@jit.compiled_inline
def _get(table, time, a, b, c):  # type: ignore[no-untyped-def]
    """The row of key ``(a, b, c)`` of ``time`` in ``table`` (:func:`_fill`); -1 where none."""
    slots, base, bounds = table
    g = _group(time, bounds, base.size - 1)
    first, size = base[g], base[g + 1] - base[g]
    if not size:
        return -1
    ab, key = _key(a, b), np.int64(c)
    at = first + _home(ab, key) % size
    while slots[at, 2]:
        if slots[at, 0] == ab and slots[at, 1] == key:
            return slots[at, 2] - 1
        at = at + 1 if at + 1 < first + size else first
    return -1


@jit.compiled
def _flow_targets(role, dev, expert, pass_, start, end, transfers, cpu, copies, runs,  # type: ignore[no-untyped-def]
                  out):  # fmt: skip
    """:func:`flow_targets_compiled` into ``out`` (its rows: the stalls' targets, the
    prefetches'), each stall and each prefetch looked up in the tables (:func:`_filled`)."""
    bits = end.view(np.int64)  # (ends plus 0.0: -0.0 is 0.0)
    for i in range(role.size):
        if role[i] & _STALL and end[i] == end[i]:  # (a NaN equals nothing)
            if expert[i] < 0:
                out[0, i] = _get(copies, end[i], dev[i], dev[i], bits[i])
            else:
                j = _get(transfers, end[i], dev[i], expert[i], bits[i])
                out[0, i] = j if j >= 0 else _get(cpu, end[i], pass_[i], expert[i], bits[i])
        if role[i] & _PREFETCH:
            j = _get(runs, pass_[i], pass_[i], expert[i], pass_[i])
            if j >= 0 and start[j] >= end[i]:
                out[1, i] = j


@jit.compiled
def _served(role, klass, pass_, expert, runs):  # type: ignore[no-untyped-def]
    """:func:`served_class_compiled`, in place of ``klass``: each transfer's class, that of the
    run ``runs`` (:func:`_filled`) holds for its (pass, expert); -1: none."""
    for i in range(role.size):
        if role[i] & _TRANSFER:
            j = _get(runs, pass_[i], pass_[i], expert[i], pass_[i])
            klass[i] = klass[j] if j >= 0 else -1


@jit.compiled_inline
def _key(a: int, b: int) -> np.int64:
    """Two 32-bit integers as one 64-bit key."""
    return (np.int64(a) << 32) | (np.int64(b) & 0xFFFFFFFF)


@jit.compiled_inline
def _home(a: int | np.int64, b: int | np.int64) -> int:
    """A key's home (a slot, modulo its group's size): its parts folded in by multiplication,
    then MurmurHash3's 64-bit finaliser, so that every bit of every part moves it (64-bit
    constants as signed integers, shifts made logical by a mask; compiled, the products
    wrap; interpreted, Python's integers do not overflow: other slots, the same joins); not
    negative."""
    h = (int(a) * -7046029254386353131) ^ int(b)  # 0x9E3779B97F4A7C15
    h ^= (h >> 33) & 0x7FFFFFFF
    h *= -49064778989728563  # 0xFF51AFD7ED558CCD
    h ^= (h >> 33) & 0x7FFFFFFF
    h *= -4265267296055464877  # 0xC4CEB9FE1A85EC53
    h ^= (h >> 33) & 0x7FFFFFFF
    return h & 0x7FFFFFFFFFFFFFFF


def lane_rows_compiled(
    lane: np.ndarray, start: np.ndarray, end: np.ndarray, n_lanes: int
) -> LaneRowsOf:
    """:func:`~specmd_sim.timeline.lane_rows` in one compiled pass (:func:`_lane_rows_sorted`)
    where numba is installed and the spans come in order of start (a recording's do: sorted by
    start, then lane), with integer lanes and ends of the starts' type, none NaN; else by it (so
    callers call this one). A counting sort by lane keeps each lane's spans in their order,
    and each span goes to the lowest-numbered sub-track of its lane free by its start. The
    columns are read where they lie (a recording's rows' fields) and the results allocated by
    numpy (see :func:`_filled`)."""
    if not jit.available() or lane.dtype.kind != "i" or end.dtype != start.dtype:
        return lane_rows(lane, start, end, n_lanes)
    low = min(int(lane.min()), 0) if lane.size else 0  # (lanes below 0 first, by lane)
    counts = np.zeros(n_lanes - low + 1, np.int64)  # (each lane's from low, then those past)
    if not _lane_counts(lane, start, end, n_lanes, low, counts):  # (out of order, a NaN end)
        return lane_rows(lane, start, end, n_lanes)
    first = np.r_[0, np.cumsum(counts)]  # (each lane's first place in the order)
    order, rows = np.empty(int(first[n_lanes - low]), np.int64), np.zeros(lane.size, np.int32)
    n_sub = _lane_rows_sorted(lane, start, end, n_lanes, low, first[:-2].copy(), order, rows)
    return order, first[-low : n_lanes - low + 1], rows, n_sub


@jit.compiled
def _lane_counts(lane, start, end, n_lanes, low, counts):  # type: ignore[no-untyped-def]
    """Each lane's count of spans into ``counts`` (lanes from ``low``, then those from
    ``n_lanes`` on); False where the spans are not in order of start or an end is NaN."""
    for i in range(lane.size):
        if (i and not start[i] >= start[i - 1]) or end[i] != end[i]:
            return False
        counts[min(lane[i], n_lanes) - low] += 1
    return True


@jit.compiled
def _lane_rows_sorted(lane, start, end, n_lanes, low, at, order, rows):  # type: ignore[no-untyped-def]
    """:func:`lane_rows_compiled` of spans in order of start: each span's place in ``order``
    from its lane's place ``at`` (lanes from ``low``), its sub-track into ``rows``; each lane's
    count of sub-tracks."""
    n_sub = np.zeros(n_lanes, np.int64)
    ends = np.empty((n_lanes, 4), start.dtype)  # each sub-track's last end, by lane
    for i in range(lane.size):
        lane_id = lane[i]
        if lane_id >= n_lanes:
            continue
        order[at[lane_id - low]] = i
        at[lane_id - low] += 1
        if lane_id < 0:
            continue
        k = 0
        while k < n_sub[lane_id] and ends[lane_id, k] > start[i]:
            k += 1
        if k == n_sub[lane_id]:
            if k == ends.shape[1]:
                wider = np.empty((n_lanes, 2 * k), start.dtype)
                wider[:, :k] = ends
                ends = wider
            n_sub[lane_id] += 1
        ends[lane_id, k] = end[i]
        rows[i] = k
    return n_sub


def _flow_columns(pairs: list[tuple[str, np.ndarray, np.ndarray]], n: int) -> np.ndarray:
    """The flow ids each of ``n`` spans carries (ids 1, 2, ... in the order of ``pairs``; 0:
    none), as a table of as many rows as the most any span carries, a column a span: a flow's
    id on both its slices, a span's ids in the order of their flows, sources before targets."""
    sources = [src for _, src, _ in pairs]
    total = sum(src.size for src in sources)
    ends = np.concatenate([*sources, *(dst for _, _, dst in pairs), np.zeros(0, np.int64)])
    ids = np.tile(np.arange(1, total + 1), 2)
    dtype = np.int32 if total < 2**31 else np.int64
    if jit.available():
        return _flow_table(ends.astype(np.int64), ids, n, np.zeros(0, dtype))
    order = np.argsort(ends, kind="stable")
    ends, ids = ends[order], ids[order]
    nth = np.arange(ends.size) - np.searchsorted(ends, ends)
    table = np.zeros((int(nth.max()) + 1 if nth.size else 0, n), dtype)
    for k, row in enumerate(table):
        row[ends[nth == k]] = ids[nth == k]
    return table


@jit.compiled
def _flow_table(ends, ids, n, like):  # type: ignore[no-untyped-def]
    """:func:`_flow_columns`'s columns (rows of the table, of ``like``'s type) in two passes:
    the most flows a span carries, then each span's ``k``-th flow id into row ``k``."""
    count = np.zeros(n, np.int64)
    for e in ends:
        count[e] += 1
    table = np.zeros((count.max() if n else 0, n), like.dtype)
    count[:] = 0
    for i in range(ends.size):
        e = ends[i]
        table[count[e], e] = ids[i]
        count[e] += 1
    return table


def _pass_packets(
    per_pass: Mapping[str, Sequence[Any]], layout: TraceLayout, interned: bytes
) -> Iterator[bytes]:
    """Each GPU's passes as slices on its ``passes`` track (a sequence of its own)."""
    if not per_pass.get("pass"):
        return
    pid = np.asarray(layout.pass_pid)
    start, end = to_ns(per_pass["start_s"]), to_ns(per_pass["end_s"])
    phases = sorted(set(per_pass["phase"]))
    phase = np.array([phases.index(p) for p in per_pass["phase"]])
    number = np.asarray(per_pass["pass"], np.int64)
    names = [f"pass {p}".encode() for p in number.tolist()]
    for t, owner in enumerate(layout.pass_pids, 1):
        mine = np.flatnonzero(pid == owner)
        mine = mine[np.argsort(start[mine], kind="stable")]
        args = _int_annotation("pass", number[mine])
        args += _int_annotation("request", np.asarray(per_pass["request"], np.int64)[mine])
        value = pw.field_bytes(6, pw.table([p.encode() for p in phases]), phase[mine])
        args += _annotation("phase", value, mine.size, None)
        yield from _named_slices(t, interned, [names[i] for i in mine.tolist()], "pass",
                                 start[mine], end[mine], args)  # fmt: skip


def _named_slices(
    track: int,
    interned: bytes,
    names: list[bytes],
    category: str,
    start: np.ndarray,
    end: np.ndarray,
    args: pw.Blocks,
) -> Iterator[bytes]:
    """Slices of their own names (not interned), one after another on ``track`` (a sequence
    of its own), with ``args``."""
    yield _sequence_start(track, interned, track + _TRACK_UUID)
    begin = pw.field_bytes(23, pw.table(names), np.arange(len(names)))
    begin += pw.const_varint(3, CATEGORIES.index(category) + 1) + args
    yield _slices(*_deltas(start, end), track, begin)


def _request_phases(per_request: Mapping[str, Sequence[Any]]) -> list[tuple[int, str, int, int]]:
    """``(request row, phase, start ns, end ns)``: prefill from arrival to the first token, then
    decode (when it lasts) to the finish; ``request`` throughout without a first token."""
    out = []
    for i, ttft in enumerate(per_request.get("ttft_s", [])):
        arrival = float(per_request["arrival_s"][i])
        a, z = int(to_ns(arrival)), int(to_ns(per_request["finish_s"][i]))
        if ttft is None:
            out.append((i, "request", a, z))
            continue
        first = int(to_ns(arrival + ttft))
        out.append((i, "prefill", a, first))
        if z > first:
            out.append((i, "decode", first, z))
    return out


class _Requests(NamedTuple):
    """The ``requests`` tracks (``(pid, name)``, numbered after the layout's), the request
    phases (:func:`_request_phases`) and each phase's track id."""

    tracks: list[tuple[int, str]]
    phases: list[tuple[int, str, int, int]]
    tid: np.ndarray


def _request_tracks(per_request: Mapping[str, Sequence[Any]], layout: TraceLayout) -> _Requests:
    """The ``requests`` tracks: each GPU's, split where its requests' phases overlap."""
    phases = _request_phases(per_request)
    tracks: list[tuple[int, str]] = []
    tid = np.zeros(len(phases), np.int64)
    pid = np.array([layout.request_pid[i] for i, *_ in phases], np.int64)
    start = np.array([p[2] for p in phases], np.int64)
    end = np.array([p[3] for p in phases], np.int64)
    for owner in dict.fromkeys(pid.tolist()):
        mine = np.flatnonzero(pid == owner)
        rows, n_rows = track_rows(start[mine], end[mine])
        tid[mine] = len(layout.tracks) + len(tracks) + 1 + rows
        tracks += [(owner, "requests" if n_rows == 1 else f"requests #{r}") for r in range(n_rows)]
    return _Requests(tracks, phases, tid)


def _request_packets(
    per_request: Mapping[str, Sequence[Any]],
    requests: _Requests,
    layout: TraceLayout,
    interned: bytes,
    first_tokens: int,
) -> Iterator[bytes]:
    """Each request's phases as slices on the ``requests`` tracks (a sequence each), and its
    first token as an instant on its GPU's ``passes`` track (each GPU's a sequence, numbered
    from ``first_tokens``)."""
    _, phases, tid = requests
    if not phases:
        return
    req = np.array([per_request["request"][i] for i, *_ in phases], np.int64)
    start = np.array([p[2] for p in phases], np.int64)
    end = np.array([p[3] for p in phases], np.int64)
    names = [f"request {r} {p[1]}".encode() for r, p in zip(req.tolist(), phases, strict=True)]
    for track in dict.fromkeys(tid.tolist()):
        mine = np.flatnonzero(tid == track)
        mine = mine[np.argsort(start[mine], kind="stable")]
        args = _int_annotation("request", req[mine])
        yield from _named_slices(track, interned, [names[i] for i in mine.tolist()], "request",
                                 start[mine], end[mine], args)  # fmt: skip
    yield from _first_tokens(per_request, phases, layout, interned, first_tokens)


def _first_tokens(
    per_request: Mapping[str, Sequence[Any]],
    phases: list[tuple[int, str, int, int]],
    layout: TraceLayout,
    interned: bytes,
    sequence: int,
) -> Iterator[bytes]:
    """An instant at each first token, on the ``passes`` track of the request's GPU (each
    GPU's a sequence, numbered from ``sequence``)."""
    prefill = [(i, a, first) for i, phase, a, first in phases if phase == "prefill"]
    if not prefill or not layout.pass_pids:
        return
    pid = np.array([layout.request_pid[i] for i, *_ in prefill], np.int64)
    req = np.array([per_request["request"][i] for i, *_ in prefill], np.int64)
    at = np.array([first for *_, first in prefill], np.int64)
    ttft_ms = np.array([(first - a) / 1e6 for _, a, first in prefill])
    for t, owner in enumerate(layout.pass_pids, 1):
        mine = np.flatnonzero(pid == owner)
        mine = mine[np.argsort(at[mine], kind="stable")]
        n = mine.size
        if not n:
            continue
        seq = sequence + t - 1
        yield _sequence_start(seq, interned, t + _TRACK_UUID)
        names = pw.table([f"first token (request {r})".encode() for r in req[mine].tolist()])
        event = pw.const_varint(9, INSTANT) + pw.field_bytes(23, names, np.arange(n))
        event += pw.const_varint(3, CATEGORIES.index("request") + 1)
        event += _annotation("ttft_ms", pw.field_double(5, ttft_ms[mine]), n, None)
        yield _packets(_timed(np.diff(at[mine], prepend=0), event, n, seq), n)


def _timed(delta: np.ndarray, event: pw.Blocks, n: int, sequence: int) -> pw.Blocks:
    """A packet per row: its time (a delta), its sequence and flags, the track event."""
    packet = pw.field_varint(8, delta) + pw.const_varint(10, sequence)
    return packet + pw.const_varint(13, NEEDS_STATE) + pw.field_message(11, event, n)


def _counter_packets(
    counters: dict[str, np.ndarray], base: int, interned: bytes
) -> Iterator[bytes]:
    """Each counter's change points as ``COUNTER`` events on its track (a sequence each,
    numbered from ``base``): integers where every value is one, else doubles."""
    for c, name in enumerate(sorted(counters)):
        times, values = step_changes(counters[name])
        yield _sequence_start(base + c, interned, c + _COUNTER_UUID)
        whole = bool(np.all((values == np.round(values)) & (values >= 0) & (values < 2**63)))
        delta = np.diff(times, prepend=0)
        if delta.size and int(delta.min()) < 0:
            raise ValueError(f"trace: counter {name}'s samples go back in time; expected them "
                             "in time order")  # fmt: skip
        encode = _counter_compiled if jit.available() else _counter_columns
        for lo in range(0, times.size, CHUNK):
            yield encode(delta[lo : lo + CHUNK], values[lo : lo + CHUNK], whole, base + c)


def _counter_columns(delta: np.ndarray, values: np.ndarray, whole: bool, sequence: int) -> bytes:
    """Counter samples' packets (``delta``: their times as deltas; ``values``: as varints if
    ``whole``, else doubles), a column at a time: the specification of
    :func:`_counter_compiled`."""
    n = values.size
    value = pw.field_varint(30, values.astype(np.int64)) if whole else pw.field_double(44, values)
    event = pw.const_varint(9, COUNTER) + value
    return _packets(_timed(delta, event, n, sequence), n)


def _counter_compiled(delta: np.ndarray, values: np.ndarray, whole: bool, sequence: int) -> bytes:
    """:func:`_counter_columns`, by a compiled loop over the samples (:func:`_counter_bytes`)."""
    out = np.empty(values.size * 48, np.uint8)  # a packet: at most 2 + 11 + 16 + 11 + 2 bytes
    ints = values.astype(np.int64) if whole else np.zeros(0, np.int64)
    doubles = np.zeros((0, 8), np.uint8) if whole else values.astype("<f8").view(np.uint8)
    doubles = doubles.reshape(-1, 8)  # (a double's 8 bytes a row)
    end = _counter_bytes(delta.astype(np.int64), ints, doubles, whole, sequence, out)
    return out[:end].tobytes()


@jit.compiled
def _counter_bytes(delta, ints, doubles, whole, sequence, out):  # type: ignore[no-untyped-def]
    """Each sample's ``TracePacket`` (a field of the ``Trace``) into ``out``; the bytes written:
    its time, its sequence, ``NEEDS_STATE``, the ``COUNTER`` event with its value (``ints`` if
    ``whole``, else the 8 bytes of each of ``doubles``)."""
    at = 0
    for i in range(delta.size):
        value = 2 + _varint_size(ints[i]) if whole else 2 + 8
        event = 2 + value
        inner = _head_size(delta[i], sequence) + 1 + _varint_size(event) + event
        at = _packet_head(out, at, inner, delta[i], sequence)
        out[at] = 0x5A  # .track_event
        at = _put_varint(out, at + 1, event)
        out[at], out[at + 1] = 0x48, 4  # .type = COUNTER
        if whole:
            out[at + 2], out[at + 3] = 0xF0, 0x01  # .counter_value
            at = _put_varint(out, at + 4, ints[i])
        else:
            out[at + 2], out[at + 3] = 0xE1, 0x02  # .double_counter_value
            for b in range(8):
                out[at + 4 + b] = doubles[i, b]
            at += 12
    return at


def _metadata_packet(metadata: dict[str, Any], interned: bytes, sequence: int) -> bytes:
    """The run's metadata as an instant ``run`` at 0 on the first track, a string annotation
    per item (by name)."""
    items = sorted((str(k), str(v)) for k, v in metadata.items())
    m = len(items)
    keys = pw.table([k.encode() for k, _ in items])
    values = pw.table([v.encode() for _, v in items])
    annotation = pw.field_bytes(10, keys, np.arange(m)) + pw.field_bytes(6, values, np.arange(m))
    entries = np.frombuffer(pw.flatten(pw.field_message(4, annotation, m), m), np.uint8)[None, :]
    event = pw.const_varint(9, INSTANT) + pw.field_bytes(23, pw.table([b"run"]), [0])
    event += [(entries, entries.shape[1])]
    start = _sequence_start(sequence, interned, 1 + _TRACK_UUID)
    return start + _packets(_timed(np.zeros(1, np.int64), event, 1, sequence), 1)


def write_perfetto_trace(
    path: Path, spans: np.ndarray, lanes: list[str], level: int = GZIP_LEVEL, **kwargs: Any
) -> None:
    """Write :func:`perfetto_chunks` (same arguments) gzip-compressed at ``level``
    (:func:`specmd_sim.gz.write_gzip`: one chunk compressed while the next is built; the same
    inputs give the same bytes)."""
    write_gzip(path, perfetto_chunks(spans, lanes, **kwargs), level)

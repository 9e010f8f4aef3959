"""The Perfetto/Chrome trace: Trace Event Format schema, one track per engine with no
overlapping slices, counters, span args, and passes and requests as the engine's tables
(``per_pass``, ``per_request``) give them."""

from __future__ import annotations

import gzip
import itertools
import json
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from specmd_sim.metrics import RunResult
from specmd_sim.runs import CHROME_TRACE_FILE, trace_options
from specmd_sim.timeline import (
    KINDS,
    SPAN_DTYPE,
    TRANSFER_KINDS,
    Recording,
    SpanRecorder,
    chrome_trace_chunks,
    to_chrome_trace,
)

PHASES = {"X", "M", "C", "b", "e", "i", "s", "f"}
METADATA = {"process_name", "process_sort_index", "thread_name", "thread_sort_index"}


def ns(us: float) -> int:
    """Microseconds as written to whole nanoseconds (exact: they have 3 decimals)."""
    value = round(us * 1000)
    assert abs(us * 1000 - value) < 1e-6, us
    return value


def check_schema(trace: dict[str, Any]) -> None:
    """Schema-level validity of the JSON object form of the Trace Event Format."""
    assert set(trace) <= {"traceEvents", "displayTimeUnit", "otherData"}
    assert trace["displayTimeUnit"] in ("ms", "ns")
    assert all(isinstance(v, str) for v in trace.get("otherData", {}).values())
    named_processes, named_threads = set(), set()
    open_async: dict[tuple, list[int]] = defaultdict(list)
    flow_tracks: set[tuple[int, int]] = set()
    for ev in trace["traceEvents"]:
        assert ev["ph"] in PHASES, ev
        assert isinstance(ev["pid"], int) and ev["pid"] > 0, ev
        if ev["ph"] == "M":
            assert ev["name"] in METADATA and isinstance(ev["args"], dict), ev
            if ev["name"] == "process_name":
                named_processes.add(ev["pid"])
            if ev["name"] == "thread_name":
                named_threads.add((ev["pid"], ev["tid"]))
            continue
        assert isinstance(ev["ts"], int | float) and ev["ts"] >= 0, ev
        ns(ev["ts"])
        assert isinstance(ev["name"], str) and ev["name"], ev
        if ev["ph"] == "X":
            assert isinstance(ev["dur"], int | float) and ev["dur"] >= 0, ev
            ns(ev["dur"])
            assert isinstance(ev["tid"], int) and isinstance(ev["cat"], str)
            assert isinstance(ev["args"], dict)
        elif ev["ph"] == "C":
            assert ev["args"] and all(isinstance(v, int | float) for v in ev["args"].values())
        elif ev["ph"] in "be":
            key = (ev["pid"], ev["cat"], ev["id"], ev["name"])
            if ev["ph"] == "b":
                open_async[key].append(ns(ev["ts"]))
            else:
                assert open_async[key], f"'e' without 'b': {ev}"
                assert ns(ev["ts"]) >= open_async[key].pop()
        elif ev["ph"] == "i":
            assert ev["s"] in ("g", "p", "t")
        elif ev["ph"] in "sf":  # a flow: bound to the slice enclosing it on a named track
            assert isinstance(ev["id"], int) and ev["cat"] == "flow" and isinstance(ev["tid"], int)
            assert ev["ph"] == "s" or ev["bp"] == "e"
            flow_tracks.add((ev["pid"], ev["tid"]))
    assert not any(open_async.values()), "unclosed async slices"
    used = {(ev["pid"], ev["tid"]) for ev in trace["traceEvents"] if ev["ph"] == "X"}
    assert used <= named_threads, "every track is named"
    assert flow_tracks <= used, "a flow binds to a slice of a track of slices"
    assert {p for p, _ in used} <= named_processes


def slices_by_track(trace: dict[str, Any]) -> dict[tuple[int, int], list[tuple[int, int]]]:
    tracks: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    for ev in trace["traceEvents"]:
        if ev["ph"] == "X":
            start = ns(ev["ts"])
            tracks[(ev["pid"], ev["tid"])].append((start, start + ns(ev["dur"])))
    return tracks


def assert_no_overlap(trace: dict[str, Any]) -> None:
    for track, slices in slices_by_track(trace).items():
        slices.sort()
        for (_, end), (start, _) in itertools.pairwise(slices):
            assert start >= end, f"overlapping slices on track {track}"


@pytest.fixture(scope="module")
def trace(chrome_dir: Path) -> dict[str, Any]:
    return json.loads(gzip.decompress((chrome_dir / CHROME_TRACE_FILE).read_bytes()))


def test_run_trace_is_valid_and_no_track_overlaps(trace: dict[str, Any]) -> None:
    check_schema(trace)
    assert_no_overlap(trace)


def test_a_track_per_engine_in_a_process_per_device(trace: dict, timed: RunResult) -> None:
    meta = [ev for ev in trace["traceEvents"] if ev["ph"] == "M"]
    processes = {ev["pid"]: ev["args"]["name"] for ev in meta if ev["name"] == "process_name"}
    threads = {ev["tid"]: ev["args"]["name"] for ev in meta if ev["name"] == "thread_name"}
    assert sorted(processes.values()) == ["gpu0", "network"]  # network: bandwidth counters
    assert sorted(threads.values()) == ["compute", "copy-h2d-0", "copy-h2d-1", "passes"]
    spans = [ev for ev in trace["traceEvents"] if ev["ph"] == "X" and ev["cat"] != "pass"]
    assert len(spans) == len(timed.spans)  # every span, once
    assert {ev["name"] for ev in spans} == {KINDS[k] for k in np.unique(timed.spans["kind"])}


def test_span_args_name_layer_expert_and_class(trace: dict[str, Any], timed: RunResult) -> None:
    experts = timed.inputs["num_experts"]
    spans = [ev for ev in trace["traceEvents"] if ev["ph"] == "X" and ev["cat"] != "pass"]
    for ev in spans:
        args = ev["args"]
        assert {"pass", "request"} <= set(args)
        if ev["name"] in ("expert", "stall", *TRANSFER_KINDS):
            assert args["expert"] == args["expert_id"] % experts
            assert args["expert_id"] // experts == args["layer"]
            assert args["class"] in {"hit", "late_hit", "compulsory", "capacity", "collision",
                                     "unused"}  # fmt: skip
        if ev["name"] in TRANSFER_KINDS:
            assert args["bytes"] > 0
    classes = {ev["args"]["class"] for ev in spans if ev["name"] == "demand_fetch"}
    assert classes & {"compulsory", "capacity", "collision"}, "demand fetches serve misses"


def at_ns(seconds: float) -> int:
    return round(seconds * 1e9)


def test_passes_are_the_engines_pass_table(trace: dict[str, Any], timed: RunResult) -> None:
    events = trace["traceEvents"]
    processes = {ev["pid"]: ev["args"]["name"] for ev in events if ev["name"] == "process_name"}
    got = [
        (processes[ev["pid"]], ev["args"]["pass"], ev["args"]["request"], ev["args"]["phase"],
         ns(ev["ts"]), ns(ev["ts"]) + ns(ev["dur"]), ev["name"])
        for ev in events if ev["ph"] == "X" and ev["cat"] == "pass"
    ]  # fmt: skip
    table = timed.per_pass
    want = [
        (gpu, p, r, phase, at_ns(start), at_ns(end), f"pass {p}")
        for gpu, p, r, phase, start, end in zip(table["gpu"], table["pass"], table["request"],
                                                table["phase"], table["start_s"], table["end_s"],
                                                strict=True)
    ]  # fmt: skip
    assert got == want
    assert {phase for *_, phase, _, _, _ in got} == {"prefill", "decode"}


def test_requests_are_the_engines_request_table(trace: dict[str, Any], timed: RunResult) -> None:
    events = trace["traceEvents"]
    got = [(ev["ph"], ev["name"], ev["id"], ns(ev["ts"]))
           for ev in events if ev["ph"] in "be" and ev["cat"] == "request"]  # fmt: skip
    want = []
    table = timed.per_request
    for r, arrival, ttft, finish in zip(table["request"], table["arrival_s"], table["ttft_s"],
                                        table["finish_s"], strict=True):  # fmt: skip
        first = at_ns(arrival + ttft)
        want += [("b", f"request {r} prefill", r, at_ns(arrival)),
                 ("e", f"request {r} prefill", r, first),
                 ("b", f"request {r} decode", r, first),
                 ("e", f"request {r} decode", r, at_ns(finish))]  # fmt: skip
    assert got == want
    first_tokens = [ev for ev in events if ev["ph"] == "i"]
    assert [ev["name"] for ev in first_tokens] == [f"first token (request {r})"
                                                   for r in table["request"]]  # fmt: skip
    assert [ev["args"]["ttft_ms"] for ev in first_tokens] == pytest.approx(
        [t * 1e3 for t in table["ttft_s"]], abs=1e-5
    )
    assert trace["otherData"]["model"] == "olmoe-1b-7b"


def test_passes_and_requests_go_to_the_process_of_their_gpu() -> None:
    """Each GPU's passes, and the requests they ran, on a ``passes`` track of its process; a
    request without a first token is one ``request`` slice."""
    rec = SpanRecorder()
    rec.add(rec.lane("gpu0/compute"), "attention", 0.0, 1e-3, pass_=1, layer=0, request=0)
    rec.add(rec.lane("gpu1/compute"), "attention", 0.0, 2e-3, pass_=0, layer=0, request=1)
    per_pass = {"gpu": ["gpu1", "gpu0"], "pass": [0, 1], "request": [1, 0],
                "phase": ["prefill", "decode"], "start_s": [0.0] * 2,
                "end_s": [2e-3, 1e-3]}  # fmt: skip
    per_request = {"request": [0, 1], "arrival_s": [0.0] * 2, "ttft_s": [None, 1.5e-3],
                   "finish_s": [1e-3, 2e-3]}  # fmt: skip
    trace = to_chrome_trace(rec.array(), rec.lanes, per_pass=per_pass, per_request=per_request)
    check_schema(trace)
    assert_no_overlap(trace)
    events = trace["traceEvents"]
    processes = {ev["pid"]: ev["args"]["name"] for ev in events if ev["name"] == "process_name"}
    tracks = {(ev["pid"], ev["tid"]): ev["args"]["name"]
              for ev in events if ev["name"] == "thread_name"}  # fmt: skip
    placed = [(processes[ev["pid"]], tracks[(ev["pid"], ev["tid"])], ev["ph"], ev["name"])
              for ev in events if ev.get("cat") in ("pass", "request")]  # fmt: skip
    assert placed == [
        ("gpu1", "passes", "X", "pass 0"),
        ("gpu1", "passes", "b", "request 1 prefill"),
        ("gpu1", "passes", "e", "request 1 prefill"),
        ("gpu1", "passes", "b", "request 1 decode"),
        ("gpu1", "passes", "e", "request 1 decode"),
        ("gpu1", "passes", "i", "first token (request 1)"),
        ("gpu0", "passes", "X", "pass 1"),
        ("gpu0", "passes", "b", "request 0 request"),
        ("gpu0", "passes", "e", "request 0 request"),
    ]


def test_counter_tracks_follow_the_samples(trace: dict[str, Any], timed: RunResult) -> None:
    counters = defaultdict(list)
    for ev in trace["traceEvents"]:
        if ev["ph"] == "C":
            ((arg, value),) = ev["args"].items()
            counters[(ev["name"], arg)].append((ns(ev["ts"]), value))
    links = {r for r, b in zip(timed.per_resource["resource"], timed.per_resource["bytes"],
                               strict=True) if b and "/" not in r}  # fmt: skip
    assert set(counters) == {("cache used", "bytes"), ("in flight", "bytes")} | {
        (r, "bytes/s") for r in links
    }
    named = {"cache used": "cache_used_bytes", "in flight": "bytes_in_flight"}
    for (name, _), points in counters.items():
        times = [t for t, _ in points]
        assert times == sorted(set(times)), "one value per instant, in time order"
        samples = timed.counters[named.get(name, f"network/{name}_bytes_per_s")]
        assert points[-1][1] == samples["value"][-1]
        assert max(v for _, v in points) == samples["value"].max()


def test_the_same_spans_give_the_same_bytes(timed: RunResult) -> None:
    result = json.loads(timed.to_json())
    rec = Recording(timed.spans, timed.lanes, timed.counters)
    texts = [
        "".join(chrome_trace_chunks(rec.spans, rec.lanes, **trace_options(result, rec)))
        for _ in range(2)
    ]
    assert texts[0] == texts[1]


def test_lanes_and_kinds_are_data_driven() -> None:
    """Any lane names make processes and tracks; a lane whose spans overlap (a link carrying
    two flows) is split into sub-tracks, so no track ever holds overlapping slices."""
    rec = SpanRecorder()
    gpu = rec.lane("gpu0/compute")
    cpu = rec.lane("host0/cpu-experts")
    link = rec.lane("links/pcie:host0-gpu0")
    rec.add(gpu, "attention", 0.0, 1e-3, pass_=0, layer=0, request=0)
    rec.add(cpu, "cpu_expert", 1e-3, 3e-3, pass_=0, layer=0, expert=5, request=0, klass=2)
    rec.add(link, "demand_fetch", 0.0, 2e-3, 0, 0, 7, 100, 0)
    rec.add(link, "prefetch", 1e-3, 4e-3, 0, 1, 9, 100, 0)  # overlaps the fetch
    rec.add(link, "prefetch", 2.5e-3, 5e-3, 0, 1, 10, 100, 0)
    trace = to_chrome_trace(rec.array(), rec.lanes)
    check_schema(trace)
    assert_no_overlap(trace)
    meta = [ev for ev in trace["traceEvents"] if ev["ph"] == "M"]
    processes = [ev["args"]["name"] for ev in meta if ev["name"] == "process_name"]
    threads = [ev["args"]["name"] for ev in meta if ev["name"] == "thread_name"]
    assert processes == ["gpu0", "host0", "links"]
    assert threads == ["compute", "cpu-experts", "pcie:host0-gpu0 #0",
                       "pcie:host0-gpu0 #1"]  # fmt: skip
    cpu_events = [ev for ev in trace["traceEvents"] if ev.get("name") == "cpu_expert"]
    assert cpu_events[0]["args"]["class"] == "compulsory"


def test_empty_recording_is_still_a_valid_trace() -> None:
    trace = to_chrome_trace(np.zeros(0, SPAN_DTYPE), [])
    check_schema(trace)

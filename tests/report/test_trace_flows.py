"""Timelines that explain: the Perfetto trace's flow events (a stall to the transfer that ended
it, a prefetch to the expert span that used it), the bandwidth counter of each resource of the
flow network (its integral is the bytes that crossed it), and every track of a run on several
GPUs in the process of its GPU. References are rebuilt from the trace's slices, one by one."""

from __future__ import annotations

import gzip
import json
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import simpy

from specmd_sim import SimConfig, simulate
from specmd_sim.engine.sim.flows import FlowNetwork
from specmd_sim.metrics import RunResult
from specmd_sim.report import RunData, timeline_figure
from specmd_sim.runs import CHROME_TRACE_FILE, trace_options, write_run
from specmd_sim.timeline import (
    FLOWS,
    TRANSFER_KINDS,
    SpanRecorder,
    counter_label,
    prefetch_uses,
    stall_causes,
    to_chrome_trace,
)
from tests.report.test_chrome_trace import check_schema, ns

TRANSFERS = TRANSFER_KINDS  # demand fetches, prefetches, promoted prefetches


def trace_of(result: RunResult) -> dict[str, Any]:
    rec = RunData.from_result(result).recording
    assert rec is not None
    options = trace_options(json.loads(result.to_json()), rec)
    return to_chrome_trace(rec.spans, rec.lanes, **options)


def slices(trace: dict[str, Any]) -> list[dict[str, Any]]:
    """The span slices (not the passes), each with its start and end in ns."""
    return [
        dict(ev, start=ns(ev["ts"]), end=ns(ev["ts"]) + ns(ev["dur"]))
        for ev in trace["traceEvents"]
        if ev["ph"] == "X" and ev["cat"] != "pass"
    ]


def enclosing(by_track: dict[tuple[int, int], list[dict]], ev: dict[str, Any]) -> dict:
    """The one slice of the event's track that holds its time (what Perfetto binds it to)."""
    at = ns(ev["ts"])
    found = [s for s in by_track[(ev["pid"], ev["tid"])] if s["start"] <= at <= s["end"]]
    assert len(found) == 1, (ev, found)
    return found[0]


def flows(trace: dict[str, Any], name: str) -> list[tuple[dict, dict]]:
    """The (start, finish) events of each flow named ``name``, checked to pair up."""
    starts: dict[int, dict] = {}
    pairs = []
    for ev in trace["traceEvents"]:
        if ev["ph"] == "s" and ev["name"] == name:
            assert ev["cat"] == "flow" and ev["id"] not in starts
            starts[ev["id"]] = ev
        elif ev["ph"] == "f" and ev["name"] == name:
            assert ev["bp"] == "e" and ev["cat"] == "flow"
            pairs.append((starts.pop(ev["id"]), ev))
    assert not starts, "every flow ends"
    for start, finish in pairs:
        assert ns(start["ts"]) <= ns(finish["ts"]), "a flow runs forward in time"
    return pairs


@pytest.fixture(scope="module")
def trace(chrome_dir: Path) -> dict[str, Any]:
    return json.loads(gzip.decompress((chrome_dir / CHROME_TRACE_FILE).read_bytes()))


@pytest.fixture(scope="module")
def from_nvme(tiny_config: Callable[..., SimConfig]) -> RunResult:
    """Half the experts in DRAM, the rest read from the NVMe drive, through DRAM."""
    return simulate(tiny_config(memory={"dram_capacity": "50%"}))


def test_each_stall_flows_to_the_transfer_that_ended_it(trace: dict[str, Any]) -> None:
    spans = slices(trace)
    by_track = defaultdict(list)
    for s in spans:
        by_track[(s["pid"], s["tid"])].append(s)
    # reference: the transfers of the stall's expert, on its GPU, ending when the stall ends
    enders = defaultdict(list)
    for s in spans:
        if s["name"] in TRANSFERS:
            enders[(s["pid"], s["args"]["expert_id"], s["end"])].append(s)
    stalls = [s for s in spans if s["name"] == "stall"]
    explained = [s for s in stalls if enders[(s["pid"], s["args"]["expert_id"], s["end"])]]
    assert explained and len(explained) == len(stalls), "every stall here waits for a fetch"
    pairs = flows(trace, FLOWS[0])
    assert len(pairs) == len(explained)
    ended = set()
    for start, finish in pairs:
        stall, transfer = enclosing(by_track, start), enclosing(by_track, finish)
        assert stall["name"] == "stall" and transfer["name"] in TRANSFERS
        assert transfer["end"] == stall["end"]
        assert transfer["args"]["expert_id"] == stall["args"]["expert_id"]
        assert transfer["pid"] == stall["pid"]
        ended.add(id(stall))
    assert len(ended) == len(stalls), "one flow per stall"


def test_each_prefetch_flows_to_the_expert_span_that_used_it(trace: dict[str, Any]) -> None:
    spans = slices(trace)
    by_track = defaultdict(list)
    for s in spans:
        by_track[(s["pid"], s["tid"])].append(s)
    runs = {(s["args"]["pass"], s["args"]["expert_id"]): s for s in spans if s["name"] == "expert"}
    prefetches = [s for s in spans if s["name"] in ("prefetch", "promoted_prefetch")]
    used = [
        p for p in prefetches
        if (run := runs.get((p["args"]["pass"], p["args"]["expert_id"]))) is not None
        and run["start"] >= p["end"]
    ]  # fmt: skip
    assert used and len(used) < len(prefetches), "some prefetches used, some not"
    pairs = flows(trace, FLOWS[1])
    assert len(pairs) == len(used)
    for start, finish in pairs:
        prefetch, expert = enclosing(by_track, start), enclosing(by_track, finish)
        assert prefetch["name"] in ("prefetch", "promoted_prefetch") and expert["name"] == "expert"
        # one needed before it arrived served a late hit (so may a chunk that moved before)
        if prefetch["name"] == "promoted_prefetch":
            assert expert["args"]["class"] == "late_hit"
        assert expert["args"]["pass"] == prefetch["args"]["pass"]
        assert expert["args"]["expert_id"] == prefetch["args"]["expert_id"]
        assert expert["args"]["class"] in ("hit", "late_hit")
        assert prefetch["args"]["class"] == expert["args"]["class"]
    ids = [ev["id"] for ev in trace["traceEvents"] if ev["ph"] == "s"]
    assert ids == list(range(1, len(ids) + 1)), "ids 1, 2, ... in order"
    check_schema(trace)


def test_stalls_end_with_a_cpu_run_or_the_last_copy() -> None:
    """A stall for a CPU expert flows to that expert's run in its pass; a stall waiting for the
    copies to drain (no expert) to the copy of its device that ended with it."""
    rec = SpanRecorder()
    gpu, copy, cpu = rec.lane("gpu0/compute"), rec.lane("gpu0/copy-h2d-0"), rec.lane("host0/cpu")
    other = rec.lane("gpu1/copy-h2d-0")
    rec.add(copy, "demand_fetch", 0.0, 2e-3, 0, 0, 4, 100, 0)
    rec.add(other, "demand_fetch", 0.0, 2e-3, 0, 0, 4, 100, 0)  # another GPU's: not it
    rec.add(gpu, "stall", 1e-3, 2e-3, 0, 0, -1, 0, 0)  # drain
    rec.add(cpu, "cpu_expert", 2e-3, 5e-3, 0, 0, 9, 100, 0, 2)
    rec.add(gpu, "stall", 3e-3, 5e-3, 0, 0, 9, 0, 0, 2)
    rec.add(gpu, "stall", 5e-3, 6e-3, 0, 0, 11, 0, 0, 2)  # nothing ended with it
    spans = rec.array()
    causes = stall_causes(spans, rec.lanes)
    got = {
        (int(s["start"] * 1e3), rec.lanes[spans["lane"][c]] if c >= 0 else None)
        for s, c in zip(spans, causes, strict=True) if s["kind"] == 3
    }  # fmt: skip
    assert got == {(1, "gpu0/copy-h2d-0"), (3, "host0/cpu"), (5, None)}
    assert (prefetch_uses(spans) == -1).all()
    trace = to_chrome_trace(spans, rec.lanes)
    check_schema(trace)
    assert len(flows(trace, FLOWS[0])) == 2


def counter_integrals(result: RunResult) -> dict[str, float]:
    """Each resource's bandwidth counter integrated over the run (bytes)."""
    out = {}
    for name, samples in result.counters.items():
        device, _, base = name.rpartition("/")
        if device == "network":
            label, unit = counter_label(name)
            assert unit == "bytes/s" and base == f"{label}_bytes_per_s"
            t, v = samples["time"], samples["value"]
            assert (np.diff(t) >= 0).all() and v[-1] == 0 and (v >= 0).all()
            out[label] = float(np.sum(v[:-1] * np.diff(t)))
    return out


@pytest.mark.parametrize("which", ["timed", "two_gpus", "from_nvme"])
def test_bandwidth_counters_integrate_to_the_bytes_through_each_resource(
    which: str, request: pytest.FixtureRequest
) -> None:
    result: RunResult = request.getfixturevalue(which)
    table = result.per_resource
    moved = {r: b for r, k, b in zip(table["resource"], table["kind"], table["bytes"],
                                     strict=True) if k != "copy-engine" and b}  # fmt: skip
    integrals = counter_integrals(result)
    assert set(integrals) == set(moved)
    for resource, nbytes in moved.items():
        assert integrals[resource] == pytest.approx(nbytes, rel=1e-9), resource
    if which == "from_nvme":
        assert any(r.startswith("nvme:") for r in moved), "bytes read from the drive"


def test_bandwidth_counter_closed_form() -> None:
    """Two flows on a 10 B/s link, the second from t=5: 10 alone, 5 + 5 shared (10 on the
    link), 10 again once the first ends at 15, 0 at 20; the other resource carries only the
    first flow (10, 5 from t=5, 0 at 15)."""
    env = simpy.Environment()
    rec = SpanRecorder()
    net = FlowNetwork(env, {"L": 10.0, "M": 100.0}, spans=rec)

    def one(start: float, resources: tuple[str, ...]):
        yield env.timeout(start)
        yield from net.transfer(100, resources, latency=0.0)

    env.process(one(0, ("L", "M")))
    env.process(one(5, ("L",)))
    env.run()
    got = {name: c.tolist() for name, c in rec.counters().items()}
    assert got == {
        "network/L_bytes_per_s": [(0.0, 10.0), (20.0, 0.0)],
        "network/M_bytes_per_s": [(0.0, 10.0), (5.0, 5.0), (pytest.approx(15.0), 0.0)],
    }


def test_recording_the_counters_changes_no_result(
    tiny_config: Callable[..., SimConfig], timed: RunResult
) -> None:
    quiet = simulate(tiny_config(timing={"chunk_bytes": 4 * 2**20, "record_spans": False}))
    assert quiet.counters == {} and timed.counters
    loud, still = json.loads(timed.to_json()), json.loads(quiet.to_json())
    for part in ("metrics", "per_layer", "per_request", "per_resource", "per_gpu", "per_pass"):
        assert loud[part] == still[part], part


def test_every_track_of_two_gpus_is_in_its_devices_process(two_gpus: RunResult) -> None:
    trace = trace_of(two_gpus)
    check_schema(trace)
    events = trace["traceEvents"]
    processes = {ev["pid"]: ev["args"]["name"] for ev in events if ev["name"] == "process_name"}
    assert sorted(processes.values()) == ["gpu0", "gpu1", "network"]
    tracks = {(ev["pid"], ev["tid"]) for ev in events if ev["ph"] in "Xsfbei"}
    lanes_of = defaultdict(set)
    for ev in events:
        if ev["name"] == "thread_name":
            lanes_of[processes[ev["pid"]]].add(ev["args"]["name"])
    assert tracks <= {(ev["pid"], ev["tid"]) for ev in events if ev["name"] == "thread_name"}
    for gpu in ("gpu0", "gpu1"):
        assert lanes_of[gpu] == {"passes", "compute", "copy-h2d-0", "copy-h2d-1"}
    counters = {(processes[ev["pid"]], ev["name"]) for ev in events if ev["ph"] == "C"}
    for gpu in ("gpu0", "gpu1"):
        assert {(gpu, "cache used"), (gpu, "in flight")} <= counters
    network = {name for device, name in counters if device == "network"}
    assert network == {r for r in two_gpus.per_resource["resource"] if "/" not in r
                       and two_gpus.per_resource["bytes"][
                           two_gpus.per_resource["resource"].index(r)]}  # fmt: skip
    # every span of a GPU's lanes sits in that GPU's process
    gpu_of_pass = dict(zip(two_gpus.per_pass["pass"], two_gpus.per_pass["gpu"], strict=True))
    for ev in events:
        if ev["ph"] == "X" and ev["cat"] != "pass":
            assert processes[ev["pid"]] == gpu_of_pass[ev["args"]["pass"]]


def test_the_timeline_draws_each_bandwidth_counter(two_gpus: RunResult, tmp_path: Path) -> None:
    write_run(tmp_path / "run", two_gpus)
    run = RunData.load(tmp_path / "run")
    fig = timeline_figure(run)
    counters = sorted(two_gpus.counters)
    titles = [fig.layout[f"yaxis{i}"].title.text for i in range(2, len(counters) + 2)]
    network = sorted(n for n in two_gpus.counters if n.startswith("network/"))
    assert titles[-len(network):] == [
        f"network · {counter_label(n)[0]}<br>(GB/s)" for n in network
    ]  # fmt: skip
    assert all(t.split(" · ")[0] in ("gpu0", "gpu1", "network") for t in titles)
    peak = max(float(two_gpus.counters[n]["value"].max()) for n in network)
    drawn = max(max(t.y) for t in fig.data if t.type == "scatter" and t.name.startswith("network"))
    assert drawn == pytest.approx(peak * 1e-9)


@pytest.fixture(scope="module")
def cpu_two_gpus(tiny_config: Callable[..., SimConfig]) -> RunResult:
    """Two GPUs whose missed experts run on the host's CPU: one lane serving both."""
    return simulate(
        tiny_config(hardware="hgx-h100-8gpu", parallel={"gpus": 2}, miss={"kind": "cpu-execute"})
    )


def test_a_shared_lane_names_the_gpu_each_span_served(cpu_two_gpus: RunResult) -> None:
    trace = trace_of(cpu_two_gpus)
    check_schema(trace)
    processes = {ev["pid"]: ev["args"]["name"] for ev in trace["traceEvents"]
                 if ev["name"] == "process_name"}  # fmt: skip
    gpu_of_pass = dict(zip(cpu_two_gpus.per_pass["pass"], cpu_two_gpus.per_pass["gpu"],
                           strict=True))  # fmt: skip
    spans = slices(trace)
    on_host = [s for s in spans if processes[s["pid"]] not in ("gpu0", "gpu1")]
    assert {s["name"] for s in on_host} == {"cpu_expert"}
    assert {s["args"]["gpu"] for s in on_host} == {"gpu0", "gpu1"}
    for s in on_host:
        assert s["args"]["gpu"] == gpu_of_pass[s["args"]["pass"]]
    assert len(on_host) == sum("gpu" in s["args"] for s in spans), "a GPU's lanes need none"
    # each stall waits for a CPU run of its expert, in its pass, ending with it
    by_track = defaultdict(list)
    for s in spans:
        by_track[(s["pid"], s["tid"])].append(s)
    pairs = flows(trace, FLOWS[0])
    assert len(pairs) == sum(s["name"] == "stall" for s in spans)
    for start, finish in pairs:
        stall, run = enclosing(by_track, start), enclosing(by_track, finish)
        assert (run["name"], run["args"]["gpu"], run["end"]) == (
            "cpu_expert", processes[stall["pid"]], stall["end"]
        )  # fmt: skip
        assert (run["args"]["pass"], run["args"]["expert_id"]) == (
            stall["args"]["pass"], stall["args"]["expert_id"]
        )  # fmt: skip
    # the timeline's hover names the GPU too
    run_data = RunData.from_result(cpu_two_gpus)
    fig = timeline_figure(run_data, max_spans=len(run_data.spans))
    host = [t for t in fig.data if t.type == "bar" and "cpu-experts" in t.hovertemplate]
    lane = next(n for n in cpu_two_gpus.lanes if "cpu-experts" in n)
    assert {t.hovertemplate.split(" · ", 1)[1].split("<br>")[0] for t in host} == {
        f"{lane} for gpu0",
        f"{lane} for gpu1",
    }

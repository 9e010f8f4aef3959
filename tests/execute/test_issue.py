"""The copies issued by the thread that runs the model (``specmd_sim/execute/issue.py``): the
fetch rules decide which queued copy a free copy stream takes next, the host learns of arrivals
only by polling marks, a copy into a slot waits for the slot's last reader, an expert's kernel
waits for its copy on the device. Driven through a stand-in for the streams whose copies end
when the test says, so every order is exact; then end to end on ``torch-cpu``."""

from __future__ import annotations

import contextlib
import threading
import time
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from specmd_sim import SimConfig
from specmd_sim.engine.layer import Fetch
from specmd_sim.execute import Backend, execute, scaled_model
from specmd_sim.execute.copies import NATIVE, FairLink, Job
from specmd_sim.execute.device import make_device
from specmd_sim.execute.issue import CudaStreams, Issuer
from specmd_sim.execute.traces import synthetic_trace, write_model
from specmd_sim.scenario import build_scenario
from specmd_sim.timeline import KIND

N = 8  # experts
WIDTH = 4  # floats per expert


class Streams:
    """Copies that end when :meth:`end` says; everything recorded."""

    device_waits = True
    t0 = 0.0

    def __init__(self) -> None:
        self.copies: list[tuple[int, Any, tuple]] = []  # (engine, after, marks)
        self.ended: set[tuple] = set()
        self.waits: list[tuple] = []  # the marks the compute stream was told to wait for

    def start(self) -> float:
        return 0.0

    def host(self) -> float:
        return 0.0

    def launch(self, work: Any, args: tuple) -> tuple[Any, float, float]:
        return work(*args), 0.0, 0.0

    def mark(self) -> float:
        return 0.0

    def copy(self, engine: int, dst: Any, src: Any, after: Any) -> tuple[tuple, tuple]:
        n = len(self.copies)
        marks = (("start", n), ("end", n))
        self.copies.append((engine, after, marks))
        return marks

    def after(self, mark: Any) -> None:
        self.waits.append(mark)

    def done(self, mark: Any) -> bool:
        return mark in self.ended

    def seconds(self, mark: Any) -> float:
        return float(mark[1])

    def finish(self) -> None:
        pass

    def end(self, job: Job) -> None:
        self.ended.add(job.marks[1])


class Cache:
    """What the queues read and call of the expert cache."""

    def __init__(self) -> None:
        self.state = np.ones(N, np.int8)  # not ABSENT: nothing reclaimable
        self.pins = np.zeros(N, np.int32)
        self.listeners: list[Any] = []
        self.calls: list[tuple[str, int]] = []

    def cancel(self, key: int) -> None:
        self.calls.append(("cancel", key))

    def complete(self, key: int) -> None:
        self.calls.append(("complete", key))


def issuer(engines: int = 1, slots: int = 4) -> tuple[Issuer, Streams, Cache, list]:
    streams, cache, position = Streams(), Cache(), [((0, 0), frozenset())]
    arrived: list[int] = []
    slow = np.arange(N * WIDTH, dtype=np.float32).reshape(N, WIDTH)
    out = Issuer(make_device("cpu"), cache, slow, slots, FairLink(NATIVE), engines,  # type: ignore[arg-type]
                 streams, lambda: position[0], lambda job, e: arrived.append(job.key))  # fmt: skip
    out.test_position = position  # type: ignore[attr-defined]
    return out, streams, cache, arrived


def test_a_free_copy_stream_takes_demand_before_prefetch_and_a_promoted_prefetch() -> None:
    iss, streams, cache, arrived = issuer(engines=1)
    a = iss.fetch(Fetch(1, False, (0, 2)))  # starts at once: the stream is idle
    b = iss.fetch(Fetch(2, False, (0, 3)))
    c = iss.fetch(Fetch(3, True, (0, 1)))
    d = iss.fetch(Fetch(4, False, (0, 3)))
    assert [j.started for j in (a, b, c, d)] == [True, False, False, False]
    iss.poll()
    assert arrived == []  # the host learns of an arrival only from the copy's mark
    streams.end(a)
    iss.poll()
    assert arrived == [1] and c.started and not b.started  # demand first
    iss.join(4)  # a late hit promotes d past b
    streams.end(c)
    iss.poll()
    assert arrived == [1, 3] and d.started and d.promoted and not b.started
    streams.end(d)
    iss.poll()
    assert b.started
    assert cache.calls == [("complete", 1), ("complete", 3), ("complete", 4)]
    assert [e for e, _, _ in streams.copies] == [0, 0, 0, 0]


def test_a_prefetch_for_a_layer_that_has_decided_without_it_is_cancelled_before_it_starts() -> None:
    iss, streams, cache, _ = issuer(engines=1)
    a = iss.fetch(Fetch(1, False, (0, 1)))
    b = iss.fetch(Fetch(2, False, (0, 1)))  # queued behind a
    c = iss.fetch(Fetch(3, False, (0, 1)))
    iss.test_position[0] = ((0, 1), frozenset({3}))  # type: ignore[attr-defined]
    streams.end(a)
    iss.poll()
    assert ("cancel", 2) in cache.calls and b.done.is_set() and not b.started
    assert c.started  # demanded by the layer that decided: spared


def test_two_copy_streams_run_two_copies_and_the_rest_wait_for_one() -> None:
    iss, streams, _, _ = issuer(engines=2)
    jobs = [iss.fetch(Fetch(k, False, (0, 5))) for k in (1, 2, 3)]
    assert [j.started for j in jobs] == [True, True, False]
    streams.end(jobs[1])
    iss.poll()
    assert jobs[2].started and [e for e, _, _ in streams.copies] == [0, 1, 1]


def test_a_copy_into_a_slot_waits_for_the_kernel_that_last_read_it() -> None:
    iss, streams, cache, _ = issuer(engines=1, slots=1)
    a = iss.fetch(Fetch(1, True, (0, 0)))
    streams.end(a)
    iss.poll()
    iss.read(a, 1, ("kernel", 7))  # an expert kernel read expert 1's slot, ending at this mark
    cache.state[1] = 0  # evicted: its slot is reclaimed for the next fetch
    iss.fetch(Fetch(2, True, (0, 1)))
    (_, first, _), (_, second, _) = streams.copies
    assert first is None and second == ("kernel", 7)


def test_an_experts_kernel_waits_for_its_copy_on_the_device_not_on_the_host() -> None:
    iss, streams, _, _ = issuer(engines=1)
    a = iss.fetch(Fetch(1, True, (0, 0)))
    iss.wait(a)  # returns at once: the copy is issued; the compute stream waits for its mark
    assert streams.waits == [a.marks[1]] and not a.done.is_set()


def test_the_host_waits_for_the_routing_while_no_copy_runs_and_issues_while_copies_do() -> None:
    iss, streams, _, arrived = issuer(engines=1)
    polls = iter(range(3))
    iss.until(lambda: next(polls) == 2)  # the attention block ends on the third poll
    a = iss.fetch(Fetch(1, True, (0, 0)))
    b = iss.fetch(Fetch(2, True, (0, 0)))
    streams.end(a)
    iss.until(lambda: b.started)  # while the host waits, a arrives and b is issued
    assert arrived == [1]


def test_waiting_for_space_with_no_copy_running_is_one_clear_error() -> None:
    iss, _, _, _ = issuer()
    with pytest.raises(RuntimeError, match="the host waits for a copy, and none is running"):
        iss.make_room()


def _torch_cpu_scenario(tmp_path: Path, seed: int, tokens: int) -> Any:
    """A tiny OLMoE decode with top-k prefetching, for the torch-cpu executor (torch or a skip)."""
    pytest.importorskip("torch")
    model = scaled_model("olmoe-1b-7b", 16)
    trace = synthetic_trace(model, tmp_path, "t", seed, num_requests=1, prompt_tokens=tokens,
                            decode_tokens=tokens)  # fmt: skip
    cfg = SimConfig(model=str(write_model(model, tmp_path)), trace=str(trace),
                    hardware="h100-pcie", runtime="roofline", cache={"capacity": "10%"},
                    prefetch={"kind": "top-k"}, timing={"record_spans": True})  # fmt: skip
    return build_scenario(cfg)


def test_torch_cpu_runs_with_no_thread_beside_the_one_that_computes(tmp_path: Path) -> None:
    scenario = _torch_cpu_scenario(tmp_path, 3, 4)
    before = threading.active_count()
    counts: list[int] = []
    result = execute(
        scenario,
        Backend(1e9, device="torch-cpu"),
        progress=lambda done, total: counts.append(threading.active_count()),
    )
    assert counts and set(counts) == {before}
    m = result.metrics
    assert m["bytes_demand"] + m["bytes_prefetch"] > 0 and m["makespan_s"] > 0


class _FakeCuda:
    """torch.cuda's stream and event calls that CudaStreams makes, on the host: work runs when
    launched, an event records the host's clock (how this machine, without a GPU, runs the
    CUDA path's own code; a GPU machine runs the cuda cases of test_executor.py)."""

    def __init__(self) -> None:
        self.calls: list[str] = []
        fake = self

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                assert enable_timing
                self.t: float | None = None

            def record(self, stream: Any) -> None:
                self.t = time.perf_counter()

            def query(self) -> bool:
                return self.t is not None

            def synchronize(self) -> None:
                fake.calls.append("event.synchronize")

            def elapsed_time(self, end: Any) -> float:
                return (end.t - self.t) * 1e3  # milliseconds

        class Stream:
            def __init__(self, device: Any = None) -> None:
                self.waited: list[Any] = []

            def wait_event(self, event: Any) -> None:
                self.waited.append(event)

        self.Event, self.Stream = Event, Stream
        self.compute = Stream()

    def current_stream(self, device: Any) -> Any:
        return self.compute

    def stream(self, stream: Any) -> Any:
        return contextlib.nullcontext()

    def synchronize(self, device: Any) -> None:
        self.calls.append("synchronize")


def test_cuda_streams_order_copies_and_kernels_by_events_and_time_them_from_the_origin() -> None:
    torch = pytest.importorskip("torch")
    shim = types.SimpleNamespace(cuda=_FakeCuda())
    streams = CudaStreams(shim, torch.device("cpu"), 2)
    origin = streams.start()
    assert shim.cuda.calls == ["synchronize", "event.synchronize"] and streams.done(origin)
    dst, src = torch.zeros(4), torch.arange(4.0)
    _, a, b = streams.launch(lambda: None, ())
    start, end = streams.copy(1, dst, src, b)  # into a slot the kernel ending at b read
    assert streams.copies[1].waited == [b] and torch.equal(dst, src)
    streams.after(end)  # the compute stream waits for the copy on the device
    assert shim.cuda.compute.waited == [end]
    assert 0.0 <= streams.seconds(a) <= streams.seconds(b) <= streams.seconds(start)
    assert streams.seconds(start) <= streams.seconds(end) and streams.seconds(0.5) == 0.5
    streams.finish()
    assert shim.cuda.calls[-1] == "synchronize"


def test_torch_cpu_stalls_end_when_their_copies_arrive(tmp_path: Path) -> None:
    """Through a throttled link with prefetching: each stall (read from the streams' marks
    after the run) ends at its expert's copy's arrival, or at the expert's start where the host
    launched it first, and overlaps nothing the stream computed."""
    result = execute(_torch_cpu_scenario(tmp_path, 5, 3), Backend(1e9, device="torch-cpu"))
    spans = result.spans
    copies = spans[np.isin(spans["kind"], [KIND[k] for k in ("demand_fetch", "prefetch",
                                                              "promoted_prefetch")])]  # fmt: skip
    stalls = spans[spans["kind"] == KIND["stall"]]
    runs = spans[spans["kind"] == KIND["expert"]]
    computed = spans[np.isin(spans["kind"], [KIND[k] for k in ("attention", "expert", "lm_head")])]
    assert stalls.size and result.metrics["stall_s"] > 0
    for s in stalls:
        mine = copies[(copies["expert"] == s["expert"]) & (copies["end"] >= s["start"])]
        run = runs[(runs["pass_"] == s["pass_"]) & (runs["expert"] == s["expert"])]
        assert mine.size and run.size
        arrival, launched = mine["end"].min(), run["start"].min()
        assert s["end"] == pytest.approx(min(arrival, launched), abs=1e-12)
        assert s["end"] <= launched + 1e-12
        # the stream computed nothing while it stalled
        overlap = (computed["start"] < s["end"] - 1e-9) & (computed["end"] > s["start"] + 1e-9)
        assert not overlap.any()

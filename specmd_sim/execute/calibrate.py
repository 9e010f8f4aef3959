"""``specmd calibrate``: measure this machine, as the real executor uses it, into a hardware and
a runtime profile (grade A) that the simulator can run.

Microbenchmarks on the executor's device (:mod:`.device`: numpy on the CPU, or torch on a CUDA
GPU), each repeated ``repeats`` times (the median is kept, the spread reported). Calls are
timed as the executor makes them: on a CPU each ends before the next; on CUDA they are queued
back to back and the device is synchronised once after them (the executor times its kernels
with events, never synchronising a call):

- **dispatch**: one expert call of a model 1 wide, per counted call: the fixed cost of a call
  (on CUDA a kernel launch);
- **bandwidth**: one expert on one token, cycling over more experts than the caches hold: the
  weights' bytes over the call's time less its dispatch;
- **peak FLOP/s and the small-batch curve**: expert calls on 1..64 tokens; the highest FLOP
  rate among them, and per token count the fraction of the one-token bandwidth it reaches
  (``memory_efficiency_by_tokens``), so that the roofline gives each measured point back;
- **link bandwidth** (an unthrottled link: CUDA's PCIe): ``engines`` copy streams (the CPU
  backend: copy workers) copying experts from the slow tier at once, issued as the executor
  issues them, their bytes over the time;
- **copy latency**: copies of one expert through the executor's copy path and the link, from
  the request to the requester knowing it arrived, less ``bytes / bandwidth``;
- **copy issue**: the host time the thread that computes spends issuing one copy to a copy
  stream (``copy_issue_overhead_s``; 0 by definition where copy workers issue their own);
- **host memory**: ``numpy.copyto`` of the slow tier;
- **copy interference** (``copy_interference``): an expert call on one token beside copies (a
  copy worker's, or one issued before each call), against the call alone, less 1 (at least 0);
- **the executor's own cost**: dry runs (no compute, no bytes) of a decode-only and a
  chunked-prefill trace; per MoE layer and per access, by least squares.

Copies run over a link throttled to ``link_bandwidth`` (the profile's link is that throttle:
grade B, a setting, not a measurement), or, with no throttle, over the device's own link
(measured, grade A): on ``engines`` worker threads for the ``cpu`` backend, else on ``engines``
copy streams, issued by the thread that computes (:mod:`.issue`).
"""

from __future__ import annotations

import datetime
import functools
import os
import statistics
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from specmd_sim.engine.common import Progress
from specmd_sim.errors import SpecmdError
from specmd_sim.execute.copies import NATIVE, FairLink, ThrottledLink
from specmd_sim.execute.device import Device, TorchDevice, make_device
from specmd_sim.execute.issue import POLL_S, streams_for
from specmd_sim.execute.model import (
    ATTENTION_KERNELS,
    EXPERT_KERNELS,
    TOKEN_KERNELS,
    NoOps,
    Ops,
    Weights,
    scaled_model,
)
from specmd_sim.execute.run import Backend, execute
from specmd_sim.execute.traces import calibration_configs
from specmd_sim.hardware.this_host import this_host
from specmd_sim.models import ModelSpec
from specmd_sim.scenario import build_scenario

TOKENS = (1, 2, 4, 8, 16, 32, 64)  # token counts of the expert-call curve
NOISY = 0.10  # a spread (max - min over median) above this is reported as a noisy machine
LAUNCH_BOUND = 0.01  # the least fraction of a CUDA expert call taken as its kernels' time


@dataclass
class Measure:
    """One microbenchmark: the median of its repeats and their spread."""

    name: str
    value: float
    spread: float
    unit: str
    how: str

    @property
    def noisy(self) -> bool:
        return self.spread > NOISY


@dataclass
class Calibration:
    model: ModelSpec
    measures: dict[str, Measure] = field(default_factory=dict)
    efficiency: dict[int, float] = field(default_factory=dict)  # bandwidth fraction by tokens
    hardware: dict[str, Any] = field(default_factory=dict)
    runtime: dict[str, Any] = field(default_factory=dict)

    def add(self, m: Measure) -> Measure:
        self.measures[m.name] = m
        return m


def _median(samples: list[float]) -> tuple[float, float]:
    med = statistics.median(samples)
    return med, (max(samples) - min(samples)) / med if med > 0 else 0.0


def _repeat(fn: Callable[[], float], repeats: int) -> tuple[float, float]:
    fn()  # warm-up
    return _median([fn() for _ in range(repeats)])


def _timed(fn: Callable[[], Any], n: int) -> float:
    start = time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n


def calibrate(
    model_id: str = "olmoe-1b-7b",
    scale: int = 4,
    link_bandwidth: float = 2.0e9,
    engines: int = 2,
    repeats: int = 5,
    seed: int = 0,
    progress: Progress | None = None,
    device: str = "cpu",
) -> Calibration:
    """Measure this machine for the executor running ``model_id`` scaled by ``scale`` on
    ``device``, its copies over a link throttled to ``link_bandwidth`` (:data:`NATIVE`: the
    device's own link, measured)."""
    model = scaled_model(model_id, scale)
    cal = Calibration(model)
    dev = make_device(device)
    host = Weights(model, seed)
    weights = dev.place(host)
    ops = dev.ops(weights)
    assert not isinstance(ops, NoOps)
    steps = 8

    def step(i: int) -> None:
        if progress is not None:
            progress(i, steps)

    experts = dev.resident(weights.slow[: min(weights.slow.shape[0], 256)])  # > the caches
    dispatch = _dispatch(cal, dev, repeats, seed)
    step(1)
    bandwidth = _bandwidth(cal, dev, ops, experts, dispatch, repeats)
    step(2)
    peak = _peak(cal, dev, ops, experts, dispatch, bandwidth, repeats)
    step(3)
    link = link_bandwidth
    if link == NATIVE:
        link = _link_bandwidth(cal, dev, weights, engines, repeats)
    step(4)
    latency = _copy_latency(cal, dev, weights, link_bandwidth, link, repeats)
    issue = _copy_issue(cal, dev, weights, repeats)
    step(5)
    host_bw = _host_bandwidth(cal, host, repeats)
    step(6)
    per_layer, per_access = _own_cost(cal, model, seed, device)
    step(7)
    _interference(cal, dev, ops, experts, weights, issue, repeats)
    step(8)
    today = datetime.date.today().isoformat()
    setup = _Setup(dev, engines, link, link_bandwidth == NATIVE, today)
    cal.hardware = _hardware_profile(cal, setup, latency, bandwidth, peak, host_bw)
    cal.runtime = _runtime_profile(cal, setup, dispatch, per_layer, per_access, issue)
    return cal


@dataclass(frozen=True)
class _Setup:
    """What the profiles describe: the device, its copy workers and link, the date."""

    device: Device
    engines: int
    link: float  # bytes/s: the throttle, or the native link as measured
    native: bool
    today: str


# --- the microbenchmarks -------------------------------------------------------------------


def _dispatch(cal: Calibration, dev: Device, repeats: int, seed: int) -> float:
    tiny = dev.ops(Weights(scaled_model("olmoe-1b-7b", 1).model_copy(update={
        "hidden_size": 1, "moe_intermediate_size": 1, "num_attention_heads": 1,
        "num_kv_heads": 1, "vocab_size": 1, "num_experts": 1, "moe_layers": 1,
    }), seed))  # fmt: skip
    assert isinstance(tiny, Ops)
    x = dev.array(np.ones((1, 1), np.float32))
    w = dev.resident(tiny.w.slow[:1])[0]

    def call() -> None:
        tiny.expert(w, x)
        if not dev.cuda:
            dev.sync()

    # a floor, which noise (another process, a frequency step) can only raise: the fastest of
    # at least three, so that a busy moment is not charged to every expert call
    def calls() -> float:
        start = time.perf_counter()
        for _ in range(2000):
            call()
        dev.sync()
        return (time.perf_counter() - start) / 2000

    calls()  # warm-up
    times = [calls() for _ in range(max(repeats, 3))]
    value, spread = min(times), (max(times) - min(times)) / min(times)
    return cal.add(Measure("dispatch_overhead_s", value / EXPERT_KERNELS, spread, "s",
                           "one expert call of a model 1 wide, per counted call "
                           f"(the fastest of {len(times)})")).value  # fmt: skip


def _expert_time(dev: Device, ops: Ops, experts: Any, tokens: int,
                 rounds: int = 2) -> float:  # fmt: skip
    """One expert call on ``tokens`` tokens, cycling over ``experts``, timed as the executor
    makes its calls (module docstring)."""
    x = dev.array(np.random.default_rng(0).standard_normal((tokens, ops.h), dtype=np.float32))
    n = experts.shape[0]
    start = time.perf_counter()
    for _ in range(rounds):
        for i in range(n):
            ops.expert(experts[i], x)
            if not dev.cuda:
                dev.sync()
    dev.sync()
    return (time.perf_counter() - start) / (rounds * n)


def _expert_bytes(model: ModelSpec, tokens: int) -> float:
    return model.expert_bytes + 2 * tokens * model.hidden_size * 2  # the cost model's


def _bandwidth(
    cal: Calibration,
    dev: Device,
    ops: Ops,
    experts: Any,
    dispatch: float,
    repeats: int,
) -> float:
    t, spread = _repeat(lambda: _expert_time(dev, ops, experts, 1), repeats)
    bw = _expert_bytes(cal.model, 1) / _busy(dev, t, dispatch, 1)
    return cal.add(
        Measure(
            "memory_bandwidth_bytes_per_s",
            bw,
            spread,
            "B/s",
            "one expert on one token over 256 experts (more than the caches)",
        )
    ).value


def _peak(cal: Calibration, dev: Device, ops: Ops, experts: Any, dispatch: float,
          bandwidth: float, repeats: int) -> float:  # fmt: skip
    """The highest FLOP rate of expert calls on 1..64 tokens, and the bandwidth fraction each
    token count reaches (``memory_efficiency_by_tokens``): with both, the roofline gives every
    measured point back."""
    model = cal.model
    curve = {m: _repeat(functools.partial(_expert_time, dev, ops, experts, m, 1), repeats)
             for m in TOKENS}  # fmt: skip
    busy = {m: _busy(dev, curve[m][0], dispatch, m) for m in TOKENS}
    peak = max(float(model.expert_flops_per_token) * m / busy[m] for m in TOKENS)
    cal.efficiency = {m: min(1.0, _expert_bytes(model, m) / bandwidth / busy[m]) for m in TOKENS}
    spread = max(s for _, s in curve.values())
    measured = ", ".join(f"{m}: {curve[m][0] * 1e6:.0f} us" for m in TOKENS)
    cal.add(
        Measure(
            "peak_flops",
            peak,
            spread,
            "FLOP/s",
            f"the highest rate of expert calls on {list(TOKENS)} tokens ({measured})",
        )
    )
    return peak


def _busy(dev: Device, t: float, dispatch: float, tokens: int) -> float:
    """The part of an expert call of ``t`` seconds beyond its dispatches. On CUDA the kernels
    are queued asynchronously and can run hidden behind their launches (a launch-bound call):
    at least :data:`LAUNCH_BOUND` of the call is taken as the kernels' time, so that the
    roofline still gives the measured time back within that fraction. On a CPU, where calls
    run one after another, a call no longer than its dispatches means noise."""
    busy = t - EXPERT_KERNELS * dispatch
    if dev.cuda:
        return max(busy, LAUNCH_BOUND * t)
    if busy <= 0:
        raise SpecmdError(
            f"calibrate: expected an expert call on {tokens} tokens to take longer than its "
            f"{EXPERT_KERNELS} dispatches ({EXPERT_KERNELS * dispatch * 1e6:.0f} us), got "
            f"{t * 1e6:.0f} us: the measurements are noise (a busy machine?); rerun on an idle "
            "machine or with more --repeats"
        )
    return busy


def _link_bandwidth(cal: Calibration, dev: Device, weights: Weights, engines: int,
                    repeats: int) -> float:  # fmt: skip
    """``engines`` copy streams (or workers) at once, each copying 32 experts from the slow
    tier, issued as the executor issues them: the link's bandwidth as the flow model shares it
    (bytes over the time of all)."""
    dst = [dev.zeros(weights.expert_size) for _ in range(engines)]
    n, slow = 32, weights.slow
    if dev.threaded_copies:

        def one_round() -> float:
            def worker(i: int) -> None:
                for k in range(n):
                    dev.copy(dst[i], slow[(i * n + k) % slow.shape[0]])

            threads = [threading.Thread(target=worker, args=(i,)) for i in range(engines)]
            start = time.perf_counter()
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            return time.perf_counter() - start

        how = "copy workers"
    else:
        streams = streams_for(dev, engines, dry=False)

        def one_round() -> float:
            streams.start()
            start = time.perf_counter()
            for k in range(n):
                for i in range(engines):
                    streams.copy(i, dst[i], slow[(i * n + k) % slow.shape[0]], None)
            streams.finish()
            return time.perf_counter() - start

        how = "copy streams, issued by one thread"
    value, spread = _repeat(one_round, repeats)
    nbytes = engines * n * weights.expert_nbytes
    return cal.add(Measure("link_bandwidth_bytes_per_s", nbytes / value, spread, "B/s",
                           f"{engines} {how} at once, {n} experts each, slow tier to fast "
                           "tier")).value  # fmt: skip


def _copy_latency(cal: Calibration, dev: Device, weights: Weights, throttle: float,
                  bandwidth: float, repeats: int) -> float:  # fmt: skip
    """One expert over the link as the executor copies it, from the request to the requester
    knowing it arrived, less ``bytes / bandwidth`` (the throttle, or the native link's measured
    bandwidth): through a copy worker, or issued on a copy stream and its event polled."""
    dst = dev.zeros(weights.expert_size)
    if dev.threaded_copies:
        one_round, stop = _worker_latency(dev, weights, throttle, bandwidth, dst)
    else:
        one_round, stop = _issued_latency(dev, weights, throttle, bandwidth, dst)
    try:
        value, spread = _repeat(one_round, repeats)
    finally:
        stop()
    return cal.add(Measure("copy_latency_s", max(value, 0.0), spread, "s",
                           "one expert through the executor's copy path and the link, less "
                           "bytes / bandwidth")).value  # fmt: skip


def _issued_latency(dev: Device, weights: Weights, throttle: float, bandwidth: float, dst: Any
                    ) -> tuple[Callable[[], float], Callable[[], None]]:  # fmt: skip
    streams = streams_for(dev, 1, dry=False)
    link = FairLink(throttle)
    streams.start()

    def one_round() -> float:
        samples = []
        for key in range(16):
            start = time.perf_counter()
            flow = link.start(dst.nbytes)
            _, end = streams.copy(0, dst, weights.slow[key], None)
            while not streams.done(end) or link.arrived(flow) is None:
                time.sleep(min(POLL_S, link.left_s(flow)) if flow else 0)
            link.leave(flow)
            samples.append(time.perf_counter() - start - dst.nbytes / bandwidth)
        return statistics.median(samples)

    return one_round, streams.finish


def _worker_latency(dev: Device, weights: Weights, throttle: float, bandwidth: float, dst: Any
                    ) -> tuple[Callable[[], float], Callable[[], None]]:  # fmt: skip
    link = ThrottledLink(throttle)
    lock = threading.Lock()
    work = threading.Condition(lock)
    queue: list[tuple[int, threading.Event]] = []
    stop = [False]
    copy = dev.copy

    def worker() -> None:
        with lock:
            while True:
                while not queue and not stop[0]:
                    work.wait()
                if stop[0]:
                    return
                key, done = queue.pop()
                lock.release()
                try:
                    flow = link.start(dst.nbytes)
                    copy(dst, weights.slow[key])
                    link.finish(flow)
                finally:
                    lock.acquire()
                done.set()

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()

    def one_round() -> float:
        samples = []
        for key in range(16):
            done = threading.Event()
            with lock:
                start = time.perf_counter()
                queue.append((key, done))
                work.notify()
            done.wait()
            samples.append(time.perf_counter() - start - dst.nbytes / bandwidth)
        return statistics.median(samples)

    def close() -> None:
        with lock:
            stop[0] = True
            work.notify()
        thread.join()

    return one_round, close


def _copy_issue(cal: Calibration, dev: Device, weights: Weights, repeats: int) -> float:
    """The host time the thread that runs the model spends issuing one expert's copy to a copy
    stream (``copy_(non_blocking=True)`` and its events; torch-cpu: the whole copy, which the
    host makes). A copy worker's host issues nothing: 0 by definition."""
    if dev.threaded_copies:
        return 0.0
    streams = streams_for(dev, 1, dry=False)
    dst, slow, n = dev.zeros(weights.expert_size), weights.slow, 16

    def one_round() -> float:
        streams.start()
        start = time.perf_counter()
        for k in range(n):
            streams.copy(0, dst, slow[k % slow.shape[0]], None)
        issued = (time.perf_counter() - start) / n
        streams.finish()
        return issued

    value, spread = _repeat(one_round, repeats)
    return cal.add(Measure("copy_issue_overhead_s", value, spread, "s",
                           f"{n} expert copies issued back to back to a copy stream, host time "
                           "per copy")).value  # fmt: skip


def _interference(cal: Calibration, dev: Device, ops: Ops, experts: Any,
                  weights: Weights, issue: float, repeats: int) -> None:  # fmt: skip
    """An expert call on one token beside copies, against the call alone: what a concurrent
    copy costs the compute (the runtime's ``copy_interference``). Copy workers: one copies
    experts back to back (their host side and, on a CPU, their memory traffic). Copy streams:
    the calling thread issues one copy before each call and never waits for it, as the executor
    does; the copy's issue (``issue``, measured apart) is taken off."""
    alone, _ = _repeat(lambda: _expert_time(dev, ops, experts, 1, 1), repeats)
    if dev.threaded_copies:
        beside, spread = _beside_worker(dev, ops, experts, weights, repeats)
        how = "a copy worker copying experts back to back"
    else:
        streams, slow = streams_for(dev, 1, dry=False), weights.slow
        dst = dev.zeros(weights.expert_size)
        x = dev.array(np.ones((1, ops.h), np.float32))

        def calls() -> float:
            streams.start()
            start = time.perf_counter()
            for i in range(experts.shape[0]):
                streams.copy(0, dst, slow[i % slow.shape[0]], None)
                ops.expert(experts[i], x)
                if not dev.cuda:
                    dev.sync()
            streams.finish()
            took = (time.perf_counter() - start) / experts.shape[0]
            return took - issue

        beside, spread = _repeat(calls, repeats)
        how = "one copy issued by the calling thread before each call (its issue taken off)"
    slowdown = beside / alone - 1.0
    kept = "" if slowdown >= 0 else "; below 0, noise: runtime.yaml takes 0"
    cal.add(Measure("copy_interference", slowdown, spread, "fraction",
                    f"an expert call on one token beside {how} ({beside * 1e6:.0f} us) against "
                    f"alone ({alone * 1e6:.0f} us){kept}"))  # fmt: skip


def _beside_worker(dev: Device, ops: Ops, experts: Any, weights: Weights, repeats: int
                   ) -> tuple[float, float]:  # fmt: skip
    copy, dst, stop = dev.copy, dev.zeros(weights.expert_size), threading.Event()
    slow = weights.slow

    def worker() -> None:
        k = 0
        while not stop.is_set():
            copy(dst, slow[k % slow.shape[0]])
            k += 1

    thread = threading.Thread(target=worker, daemon=True)
    thread.start()
    try:
        return _repeat(lambda: _expert_time(dev, ops, experts, 1, 1), repeats)
    finally:
        stop.set()
        thread.join()


def _host_bandwidth(cal: Calibration, weights: Weights, repeats: int) -> float:
    src = weights.slow[: min(weights.slow.shape[0], 64)]
    dst = np.empty_like(src)
    value, spread = _repeat(lambda: _timed(lambda: np.copyto(dst, src), 5), repeats)
    return cal.add(
        Measure(
            "host_bandwidth_bytes_per_s",
            src.nbytes / value,
            spread,
            "B/s",
            "numpy.copyto of 64 experts (read + write counted once)",
        )
    ).value


def _own_cost(cal: Calibration, model: ModelSpec, seed: int, device: str
              ) -> tuple[float, float]:  # fmt: skip
    """The executor's cost per MoE layer and per access: dry runs of two traces (no compute,
    no bytes), least squares over (layers, accesses)."""
    rows, times = [], []
    with tempfile.TemporaryDirectory(prefix="specmd-calibrate-") as tmp:
        for config in calibration_configs(model, seed, Path(tmp)):
            scenario = build_scenario(config)
            samples = []
            for _ in range(3):  # the time not spent waiting for a (dry) copy worker
                result = execute(scenario, Backend(NATIVE, seed, dry=True, device=device))
                samples.append(float(result.metrics["makespan_s"] - result.metrics["stall_s"]))
            rows.append([scenario.passes.num_passes * model.moe_layers,
                         result.metrics["accesses"]])  # fmt: skip
            times.append(statistics.median(samples))
    (per_layer, per_access), *_ = np.linalg.lstsq(
        np.array(rows, float), np.array(times), rcond=None
    )
    per_layer, per_access = max(float(per_layer), 0.0), max(float(per_access), 0.0)
    cal.add(
        Measure(
            "layer_overhead_s",
            per_layer,
            0.0,
            "s",
            "dry executor runs (decode-only and chunked prefill), least squares",
        )
    )
    cal.add(
        Measure(
            "access_overhead_s",
            per_access,
            0.0,
            "s",
            "dry executor runs (decode-only and chunked prefill), least squares",
        )
    )
    return per_layer, per_access


# --- the profiles ----------------------------------------------------------------------------


def _q(value: float, measure: Measure | None = None, source: str = "", grade: str = "A") -> dict:
    if measure is not None:
        source = (f"measured on this machine by specmd calibrate: {measure.how}; median of the "
                  f"repeats, spread {measure.spread:.1%}")  # fmt: skip
    return {"value": value, "source": source, "grade": grade}


def _compute_worker(setup: _Setup) -> str:
    dev = setup.device
    if dev.cuda:
        return f"torch float32 on {dev.gpu_name}, every timed call synchronised"
    return "torch float32 on this CPU" if dev.name == "torch-cpu" else "one numpy thread"


def _fast_tier_bytes(setup: _Setup) -> dict[str, Any]:
    dev = setup.device
    if isinstance(dev, TorchDevice) and dev.cuda:  # (the GPU's memory: torch's to tell)
        total = float(dev.torch.cuda.get_device_properties(dev.device).total_memory)
        return _q(total, source="torch.cuda.get_device_properties().total_memory")
    return _q(_ram(), source="the fast tier is process memory: this machine's RAM (os.sysconf)",
              grade="B")  # fmt: skip


def _ram() -> float:
    """This machine's RAM in bytes."""
    return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))


def _link(cal: Calibration, setup: _Setup, latency: float) -> dict[str, Any]:
    ms = cal.measures
    # the kind is a label: on CUDA's own link PCIe's generation as nvidia-smi says (else gen 4);
    # on a CPU, or throttled, the "link" is a copy in memory
    kind = "emulated"
    if setup.native:
        if setup.device.cuda:
            gen = _pcie_generation()
            kind = f"pcie-gen{gen}" if gen in (3, 4, 5) else "pcie-gen4"
        bandwidth = _q(setup.link, ms["link_bandwidth_bytes_per_s"])
    else:
        bandwidth = _q(setup.link, source="the executor's throttle setting (specmd calibrate "
                       "--link-bandwidth)", grade="B")  # fmt: skip
    return {
        "id": "slow0",
        "kind": kind,
        "a": "host",
        "b": "gpu0",
        "bandwidth_bytes_per_s": bandwidth,
        "latency_s": _q(latency, ms["copy_latency_s"]),
    }


def _pcie_generation() -> int:
    """The GPU's current PCIe generation as nvidia-smi reports it (0 if it cannot)."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=pcie.link.gen.current", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout  # fmt: skip
        return int(out.split()[0])
    except (OSError, subprocess.SubprocessError, ValueError, IndexError):
        return 0


def _hardware_profile(cal: Calibration, setup: _Setup, latency: float, bandwidth: float,
                      peak: float, host_bw: float) -> dict[str, Any]:  # fmt: skip
    ms, today = cal.measures, setup.today
    ram = _ram()
    cores = float(os.cpu_count() or 1)
    host = this_host()  # the CPU: name, sockets, cores, clock, extensions
    worker = _compute_worker(setup)
    link = ("its own link, measured" if setup.native
            else f"a link throttled to {setup.link / 1e9:g} GB/s")  # fmt: skip
    return {
        "schema_version": 1,
        "id": f"calibrated-{setup.device.name}",
        "name": f"this machine as the real executor uses it ({setup.device.name}, specmd "
        f"calibrate, {today})",
        "description": (
            f"Measured {today} for {cal.model.id}: the compute worker is {worker}; the slow tier "
            f"is host memory behind {link}, copied by {setup.engines} "
            + (
                "worker threads."
                if setup.device.threaded_copies
                else "copy streams, issued by the thread that computes."
            )
        ),
        "nodes": [
            {
                "kind": "gpu",
                "id": "gpu0",
                "name": f"compute worker ({worker})",
                "hbm_bytes": _fast_tier_bytes(setup),
                "hbm_bandwidth_bytes_per_s": _q(bandwidth, ms["memory_bandwidth_bytes_per_s"]),
                "dense_bf16_flops": _q(peak, ms["peak_flops"]),
                "compute_efficiency": _q(
                    1.0, source="definition: the peak is the measured rate", grade="B"
                ),
                "memory_efficiency": _q(
                    1.0, source="definition: the bandwidth is the measured rate", grade="B"
                ),
                "memory_efficiency_by_tokens": {
                    "points": [{"tokens": m, "efficiency": e} for m, e in cal.efficiency.items()],
                    "source": "measured on this machine by specmd calibrate: expert calls on each "
                    "token count against the one-token bandwidth",
                    "grade": "A",
                },
                "kernel_launch_overhead_s": _q(
                    0.0,
                    source="definition: the cost per call is the runtime's dispatch_overhead_s",
                    grade="B",
                ),
                "copy_engines_h2d": _q(
                    setup.engines,
                    source="the executor's copy worker threads (copy streams)",
                    grade="B",
                ),
                "copy_engines_d2h": _q(
                    1, source="unused: the executor writes nothing back", grade="B"
                ),
            },
            {
                "kind": "host",
                "id": "host",
                **host,
                "name": host.get("name", "this machine"),
                "dram_bytes": _q(ram, source="os.sysconf(SC_PHYS_PAGES)", grade="A"),
                "dram_bandwidth_bytes_per_s": _q(host_bw, ms["host_bandwidth_bytes_per_s"]),
                "cpu_flops": _q(
                    peak * cores,
                    source=f"the compute worker's rate x {cores:g} cores (unused by the executor)",
                    grade="C",
                ),
            },
        ],
        "links": [_link(cal, setup, latency)],
    }


def _host_reference() -> dict[str, Any]:
    """This machine as the host the measured host-side costs are for (the host rule scales them
    on a host of another single-thread speed); nothing where its boost clock or core is not
    known."""
    host = this_host()
    if "boost_clock_hz" not in host or "core" not in host:
        return {}
    return {
        "host_reference": {
            "name": host.get("name", "this machine"),
            "boost_clock_hz": host["boost_clock_hz"],
            "core": host["core"],
        }
    }


def _runtime_profile(cal: Calibration, setup: _Setup, dispatch: float, per_layer: float,
                     per_access: float, issue: float) -> dict[str, Any]:  # fmt: skip
    ms, today = cal.measures, setup.today
    counted = "counted in specmd_sim/execute/model.py (one numpy or torch call per kernel)"
    unused = "unused by the executor"
    return {
        "schema_version": 1,
        "id": f"calibrated-executor-{setup.device.name}",
        "name": f"the real executor on this machine ({setup.device.name}, specmd calibrate, "
        f"{today})",
        "description": f"{_compute_worker(setup)}; "
        + (
            "copy workers over the link."
            if setup.device.threaded_copies
            else "copies issued by the compute thread on copy streams."
        ),
        "dispatch_overhead_s": _q(dispatch, ms["dispatch_overhead_s"]),
        "kernels": {
            "attention": _q(ATTENTION_KERNELS, source=counted, grade="B"),
            "expert": _q(EXPERT_KERNELS, source=counted, grade="B"),
            "dense_layer": _q(ATTENTION_KERNELS, source=unused, grade="B"),
            "token": _q(TOKEN_KERNELS, source=counted, grade="B"),
        },
        "expert_call_overhead_s": _q(per_access, ms["access_overhead_s"]),
        "layer_overhead_s": _q(per_layer, ms["layer_overhead_s"]),
        "token_overhead_s": _q(0.0, source="part of the per-layer cost (dry runs)", grade="B"),
        **_host_reference(),
        "dequant": {"value": "fused", "source": "float32: nothing to dequantize", "grade": "B"},
        "dequant_kernels_per_expert": _q(1, source=unused, grade="B"),
        "h2d_tensors_per_expert": _q(1, source="one copy per expert", grade="B"),
        "h2d_efficiency": _q(1.0, source="the link's bandwidth is the copies' rate", grade="B"),
        "copy_stream": {
            "value": "separate",
            "source": "copy worker threads" if setup.device.threaded_copies else "copy streams",
            "grade": "B",
        },
        "copy_issue_overhead_s": _q(
            0.0,
            source="definition: the copy workers issue their own "
            "copies; the compute thread only queues them",
            grade="B",
        )
        if setup.device.threaded_copies
        else _q(issue, ms["copy_issue_overhead_s"]),
        "copy_interference": _q(max(ms["copy_interference"].value, 0.0), ms["copy_interference"]),
        "cpu_dram_efficiency": _q(1.0, source=unused, grade="B"),
        "cpu_flops_efficiency": _q(1.0, source=unused, grade="B"),
        "cpu_numa_aware": {"value": False, "source": unused, "grade": "B"},
        "cpu_expert_overhead_s": _q(0.0, source=unused, grade="B"),
        "workspace_bytes": _q(0.0, source="the fast tier holds only experts", grade="B"),
        "memory_parity": {
            "value": False,
            "source": "the slow tier keeps every expert",
            "grade": "B",
        },
    }

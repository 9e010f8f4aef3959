"""``specmd calibrate``: measure this machine, as the real executor uses it, into a hardware and
a runtime profile (grade A) that the simulator can run.

Microbenchmarks, each repeated ``repeats`` times (the median is kept, the spread reported):

- **dispatch**: one expert call of a model 1 wide, per numpy call: the fixed cost of a call;
- **bandwidth**: one expert on one token, cycling over more experts than the caches hold: the
  weights' bytes over the call's time less its dispatch;
- **peak FLOP/s and the small-batch curve**: expert calls on 1..64 tokens; the highest FLOP
  rate among them, and per token count the fraction of the one-token bandwidth it reaches
  (``memory_efficiency_by_tokens``), so that the roofline gives each measured point back;
- **copy latency**: copies of one expert through a copy-worker thread and the throttled link,
  from the request to the requester waking, less ``bytes / bandwidth``;
- **host memory**: ``numpy.copyto`` of the slow tier;
- **the executor's own cost**: dry runs (no compute, no bytes) of a decode-only and a
  chunked-prefill trace; per MoE layer and per access, by least squares.

Copies run on ``engines`` worker threads over a link throttled to ``link_bandwidth``: the
profile's link is that throttle (grade B: a setting, not a measurement).
"""

from __future__ import annotations

import datetime
import functools
import os
import statistics
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
from specmd_sim.execute.copies import ThrottledLink
from specmd_sim.execute.model import (
    ATTENTION_KERNELS,
    EXPERT_KERNELS,
    TOKEN_KERNELS,
    Ops,
    Weights,
    scaled_model,
)
from specmd_sim.execute.run import Backend, execute
from specmd_sim.execute.traces import calibration_configs
from specmd_sim.models import ModelSpec
from specmd_sim.scenario import build_scenario

TOKENS = (1, 2, 4, 8, 16, 32, 64)  # token counts of the expert-call curve
NOISY = 0.10  # a spread (max - min over median) above this is reported as a noisy machine


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
) -> Calibration:
    """Measure this machine for the executor running ``model_id`` scaled by ``scale``."""
    model = scaled_model(model_id, scale)
    cal = Calibration(model)
    weights = Weights(model, seed)
    ops = Ops(weights)
    steps = 6

    def step(i: int) -> None:
        if progress is not None:
            progress(i, steps)

    dispatch = _dispatch(cal, repeats, seed)
    step(1)
    bandwidth = _bandwidth(cal, ops, weights, dispatch, repeats)
    step(2)
    peak = _peak(cal, ops, weights, dispatch, bandwidth, repeats)
    step(3)
    latency = _copy_latency(cal, weights, link_bandwidth, repeats)
    step(4)
    host_bw = _host_bandwidth(cal, weights, repeats)
    step(5)
    per_layer, per_access = _own_cost(cal, model, seed)
    step(6)
    today = datetime.date.today().isoformat()
    cal.hardware = _hardware_profile(cal, model, engines, link_bandwidth, latency, bandwidth,
                                     peak, host_bw, today)  # fmt: skip
    cal.runtime = _runtime_profile(cal, dispatch, per_layer, per_access, today)
    return cal


# --- the microbenchmarks -------------------------------------------------------------------


def _dispatch(cal: Calibration, repeats: int, seed: int) -> float:
    tiny = Ops(Weights(scaled_model("olmoe-1b-7b", 1).model_copy(update={
        "hidden_size": 1, "moe_intermediate_size": 1, "num_attention_heads": 1,
        "num_kv_heads": 1, "vocab_size": 1, "num_experts": 1, "moe_layers": 1,
    }), seed))  # fmt: skip
    x = np.ones((1, 1), np.float32)
    w = tiny.w.slow[0]
    # a floor, which noise (another process, a frequency step) can only raise: the fastest of
    # at least three, so that a busy moment is not charged to every expert call
    def calls() -> float:
        return _timed(lambda: tiny.expert(w, x), 2000)

    calls()  # warm-up
    times = [calls() for _ in range(max(repeats, 3))]
    value, spread = min(times), (max(times) - min(times)) / min(times)
    return cal.add(Measure("dispatch_overhead_s", value / EXPERT_KERNELS, spread, "s",
                           "one expert call of a model 1 wide, per numpy call (the fastest of "
                           f"{len(times)})")).value  # fmt: skip


def _expert_time(ops: Ops, weights: Weights, tokens: int, rounds: int = 2) -> float:
    """One expert call on ``tokens`` tokens, cycling over every expert of the slow tier."""
    x = np.random.default_rng(0).standard_normal((tokens, weights.model.hidden_size),
                                                 dtype=np.float32)  # fmt: skip
    slow = weights.slow
    n = min(slow.shape[0], 256)
    start = time.perf_counter()
    for _ in range(rounds):
        for i in range(n):
            ops.expert(slow[i], x)
    return (time.perf_counter() - start) / (rounds * n)


def _expert_bytes(model: ModelSpec, tokens: int) -> float:
    return model.expert_bytes + 2 * tokens * model.hidden_size * 2  # the cost model's


def _bandwidth(
    cal: Calibration, ops: Ops, weights: Weights, dispatch: float, repeats: int
) -> float:
    t, spread = _repeat(lambda: _expert_time(ops, weights, 1), repeats)
    bw = _expert_bytes(cal.model, 1) / (t - EXPERT_KERNELS * dispatch)
    return cal.add(
        Measure(
            "memory_bandwidth_bytes_per_s",
            bw,
            spread,
            "B/s",
            "one expert on one token over 256 experts (more than the caches)",
        )
    ).value


def _peak(cal: Calibration, ops: Ops, weights: Weights, dispatch: float, bandwidth: float,
          repeats: int) -> float:  # fmt: skip
    """The highest FLOP rate of expert calls on 1..64 tokens, and the bandwidth fraction each
    token count reaches (``memory_efficiency_by_tokens``): with both, the roofline gives every
    measured point back."""
    model = cal.model
    curve = {m: _repeat(functools.partial(_expert_time, ops, weights, m, 1), repeats)
             for m in TOKENS}  # fmt: skip
    busy = {m: curve[m][0] - EXPERT_KERNELS * dispatch for m in TOKENS}
    short = [m for m in TOKENS if busy[m] <= 0]
    if short:
        m = short[0]
        raise SpecmdError(
            f"calibrate: expected an expert call on {m} tokens to take longer than its "
            f"{EXPERT_KERNELS} dispatches ({EXPERT_KERNELS * dispatch * 1e6:.0f} us), got "
            f"{curve[m][0] * 1e6:.0f} us: the measurements are noise (a busy machine?); rerun "
            "on an idle machine or with more --repeats"
        )
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


def _copy_latency(cal: Calibration, weights: Weights, bandwidth: float, repeats: int) -> float:
    """Request -> worker copies one expert over the throttled link -> requester wakes."""
    link = ThrottledLink(bandwidth)
    lock = threading.Lock()
    work = threading.Condition(lock)
    queue: list[tuple[int, threading.Event]] = []
    stop = [False]
    dst = np.zeros(weights.expert_size, np.float32)

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
                    np.copyto(dst, weights.slow[key])
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

    value, spread = _repeat(one_round, repeats)
    with lock:
        stop[0] = True
        work.notify()
    thread.join()
    return cal.add(Measure("copy_latency_s", max(value, 0.0), spread, "s",
                           "one expert through a copy worker and the throttled link, less "
                           "bytes / bandwidth")).value  # fmt: skip


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


def _own_cost(cal: Calibration, model: ModelSpec, seed: int) -> tuple[float, float]:
    """The executor's cost per MoE layer and per access: dry runs of two traces (no compute,
    no bytes), least squares over (layers, accesses)."""
    rows, times = [], []
    with tempfile.TemporaryDirectory(prefix="specmd-calibrate-") as tmp:
        for config in calibration_configs(model, seed, Path(tmp)):
            scenario = build_scenario(config)
            samples = []
            for _ in range(3):  # the time not spent waiting for a (dry) copy worker
                result = execute(scenario, Backend(float("inf"), seed, dry=True))
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


def _hardware_profile(cal: Calibration, model: ModelSpec, engines: int, link_bandwidth: float,
                      latency: float, bandwidth: float, peak: float, host_bw: float,
                      today: str) -> dict[str, Any]:  # fmt: skip
    ms = cal.measures
    ram = float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    cores = float(os.cpu_count() or 1)
    return {
        "schema_version": 1,
        "id": "calibrated-cpu",
        "name": f"this machine's CPU as the real executor uses it (specmd calibrate, {today})",
        "description": (
            f"Measured {today} for {model.id}: the compute worker is one numpy thread "
            "(float32), the slow tier is process memory behind a link throttled to "
            f"{link_bandwidth / 1e9:g} GB/s, copied by {engines} worker threads."
        ),
        "nodes": [
            {
                "kind": "gpu",
                "id": "gpu0",
                "name": "compute worker (numpy float32)",
                "hbm_bytes": _q(
                    ram,
                    source="the fast tier is process memory: this machine's RAM (os.sysconf)",
                    grade="B",
                ),
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
                    engines, source="the executor's copy worker threads", grade="B"
                ),
                "copy_engines_d2h": _q(
                    1, source="unused: the executor writes nothing back", grade="B"
                ),
            },
            {
                "kind": "host",
                "id": "host",
                "name": "this machine's memory",
                "dram_bytes": _q(ram, source="os.sysconf(SC_PHYS_PAGES)", grade="A"),
                "dram_bandwidth_bytes_per_s": _q(host_bw, ms["host_bandwidth_bytes_per_s"]),
                "cpu_flops": _q(
                    peak * cores,
                    source=f"the compute worker's rate x {cores:g} cores (unused by the executor)",
                    grade="C",
                ),
            },
        ],
        "links": [
            {
                "id": "slow0",
                "kind": "emulated",
                "a": "host",
                "b": "gpu0",
                "bandwidth_bytes_per_s": _q(
                    link_bandwidth,
                    source="the executor's throttle setting (specmd calibrate --link-bandwidth)",
                    grade="B",
                ),
                "latency_s": _q(latency, ms["copy_latency_s"]),
            }
        ],
    }


def _runtime_profile(cal: Calibration, dispatch: float, per_layer: float, per_access: float,
                     today: str) -> dict[str, Any]:  # fmt: skip
    ms = cal.measures
    counted = "counted in specmd_sim/execute/model.py (one numpy call per kernel)"
    unused = "unused by the executor"
    return {
        "schema_version": 1,
        "id": "calibrated-executor",
        "name": f"the real executor on this machine (specmd calibrate, {today})",
        "description": "numpy float32 compute on one thread, copy workers over a throttle.",
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
        "dequant": {"value": "fused", "source": "float32: nothing to dequantize", "grade": "B"},
        "dequant_kernels_per_expert": _q(1, source=unused, grade="B"),
        "h2d_tensors_per_expert": _q(1, source="one numpy.copyto per expert", grade="B"),
        "h2d_efficiency": _q(1.0, source="the throttle is the link", grade="B"),
        "copy_stream": {"value": "separate", "source": "copy worker threads", "grade": "B"},
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

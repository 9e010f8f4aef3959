"""The timing engine's accounting: what each GPU's stream and copy engines did, turned into the
:class:`~specmd_sim.metrics.RunResult` at the end of the run.

:class:`GpuTally` is written to by one GPU's stream (compute, stall, pass and token times) and
fetcher (bytes and busy time per copy engine, the transfer busy intervals); it keeps no
decisions, only time. :func:`timing_result` combines the tallies of all GPUs with their caches'
counters and the shared resources of the machine.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from specmd_sim.cache import CacheStats, ExpertCache
from specmd_sim.config import SloConfig
from specmd_sim.engine.sim.breakdown import Busy, Intervals, mean_of, request_table
from specmd_sim.engine.sim.flows import FlowNetwork
from specmd_sim.metric_spec import PERCENTILES
from specmd_sim.metrics import RunResult, cache_metrics, per_layer_cache_table
from specmd_sim.scenario.passes import Passes
from specmd_sim.timeline import SpanRecorder, intersection_length


class GpuTally:
    """Time accounting of one GPU: per layer and phase, per pass, per request, per copy engine."""

    def __init__(self, gpu_id: str, passes: Passes, num_layers: int, engines: int) -> None:
        self.gpu_id = gpu_id
        self.passes = passes
        # per layer (and [prefill/decode][layer]): lists while the run adds to them, a Python
        # float's index and add being cheaper than an array element's (the same doubles); the
        # properties give them as arrays
        self._layer_stall = [0.0] * num_layers
        self._layer_compute = [0.0] * num_layers
        self._phase_compute = [[0.0] * num_layers for _ in range(2)]
        self._phase_stall = [[0.0] * num_layers for _ in range(2)]
        self.compute_iv = Intervals()
        self.stall_iv = Intervals()
        self.transfers = Busy()
        self.engine_busy = [0.0] * engines
        self.engine_bytes = [0] * engines
        self.copy_lane_names: list[str] = []
        # device-to-host copy engines (memory parity's write-backs), when used
        self.d2h_lane_names: list[str] = []
        self.d2h_busy: list[float] = []
        self.d2h_bytes: list[int] = []
        n = passes.request.size  # (with an online schedule, room for every pass it may form)
        self.pass_start = np.zeros(n)
        self.pass_end = np.zeros(n)
        self.pass_compute = np.zeros(n)
        self.pass_stall = np.zeros(n)
        self.last_pass_end = 0.0
        self.arrival: dict[int, float] = {}
        self.first_token: dict[int, float] = {}
        self.last_token: dict[int, float] = {}
        self.decode_tokens: dict[int, int] = {}
        self.token_gaps: list[float] = []  # inter-token latencies, in the order tokens came
        self._before = (0.0, 0.0)

    # --- written by the stream -------------------------------------------------------------

    def formed(self, passes: Passes) -> None:
        """The passes an online schedule formed: the per-pass times of those alone."""
        n = passes.num_passes
        self.passes = passes
        for name in ("pass_start", "pass_end", "pass_compute", "pass_stall"):
            setattr(self, name, getattr(self, name)[:n].copy())

    def compute(self, start: float, seconds: float, phase: int = -1, layer: int = -1) -> None:
        """The stream computed for ``seconds`` from ``start`` (inside a layer if ``layer >= 0``)."""
        self.compute_iv.add(start, start + seconds)
        if layer >= 0:
            self._layer_compute[layer] += seconds
            self._phase_compute[phase][layer] += seconds

    def stall(self, start: float, end: float, phase: int, layer: int) -> None:
        """The stream waited on an expert (its transfer or the CPU) over ``[start, end]``."""
        self.stall_iv.add(start, end)
        self._layer_stall[layer] += end - start
        self._phase_stall[phase][layer] += end - start

    def begin_pass(self, p: int, now: float) -> None:
        self.pass_start[p] = now
        self._before = (self.compute_iv.sum, self.stall_iv.sum)

    def end_pass(self, p: int, now: float) -> None:
        """Pass ``p`` ended at ``now``: its tokens (:meth:`count_tokens`) and times."""
        self.count_tokens(p, now)
        self.pass_end[p] = now
        self.last_pass_end = now
        self.pass_compute[p] = self.compute_iv.sum - self._before[0]
        self.pass_stall[p] = self.stall_iv.sum - self._before[1]

    def count_tokens(self, p: int, now: float) -> None:
        """The first token of each request whose prompt ended in pass ``p`` (at ``now``), a
        decode token of each request it decoded."""
        passes = self.passes
        for r in passes.first_tokens_of(p):
            self.first_token[r] = now
        if passes.phase[p] == 1:
            for r in passes.decoders_of(p):
                previous = self.last_token.get(r, self.first_token.get(r))
                if previous is not None:
                    self.token_gaps.append(now - previous)
                self.last_token[r] = now
                self.decode_tokens[r] = self.decode_tokens.get(r, 0) + 1

    @property
    def layer_stall(self) -> np.ndarray:
        return np.array(self._layer_stall)

    @property
    def layer_compute(self) -> np.ndarray:
        return np.array(self._layer_compute)

    @property
    def phase_compute(self) -> np.ndarray:
        """Per phase (prefill, decode) and layer."""
        return np.array(self._phase_compute)

    @property
    def phase_stall(self) -> np.ndarray:
        return np.array(self._phase_stall)

    @property
    def pass_time(self) -> np.ndarray:
        return self.pass_end - self.pass_start

    def request_table(self) -> dict[str, list[Any]]:
        return request_table(
            sorted(self.arrival), self.arrival, self.first_token, self.last_token,
            self.decode_tokens, self.compute_iv, self.stall_iv,
        )  # fmt: skip


def timing_result(
    tallies: Sequence[GpuTally],
    caches: Sequence[ExpertCache],
    network: FlowNetwork,
    spans: SpanRecorder,
    grade: str | None,
    slo: SloConfig | None = None,
) -> RunResult:
    """The run's result (without its config and inputs echo) from every GPU's tally and cache;
    with an ``slo``, its attainment and goodput too."""
    stats = CacheStats.combined([c.stats for c in caches])
    metrics = cache_metrics(stats)
    # the end of the last pass (prefetches or CPU experts may outlive it, unused)
    makespan = max((t.last_pass_end for t in tallies), default=0.0)
    tables = [t.request_table() for t in tallies]
    per_request = {k: [v for t in tables for v in t[k]] for k in tables[0]}
    order = np.argsort(per_request["request"], kind="stable").tolist()
    per_request = {k: [v[i] for i in order] for k, v in per_request.items()}
    resources = _resource_table(network, tallies, makespan)
    metrics.update(_latency_metrics(tallies, per_request, makespan))
    if slo is not None:
        metrics.update(slo_metrics(slo, per_request, makespan))
    metrics.update(_transfer_metrics(tallies, metrics, resources, makespan))
    return RunResult(
        engine="simulate",
        metrics=metrics,
        per_layer=_layer_table(tallies, stats),
        per_request=per_request,
        config={},
        inputs={},
        hardware_grade=grade,
        spans=spans.array() if spans.enabled else None,
        lanes=list(spans.lanes),
        counters=spans.counters(),
        per_resource=resources,
        per_gpu=_gpu_table(tallies, caches, tables),
        per_pass=_pass_table(tallies),
    )


def _latency_metrics(
    tallies: Sequence[GpuTally], per_request: dict[str, list[Any]], makespan: float
) -> dict[str, Any]:
    decode = np.concatenate([t.passes.phase == 1 for t in tallies])
    pass_time = np.concatenate([t.pass_time for t in tallies])
    pass_compute = np.concatenate([t.pass_compute for t in tallies])
    pass_stall = np.concatenate([t.pass_stall for t in tallies])
    n_decode = int(decode.sum())
    first_tokens = sum(len(t.first_token) for t in tallies)
    tokens_out = first_tokens + sum(sum(t.decode_tokens.values()) for t in tallies)
    tpot = float(pass_time[decode].mean()) if n_decode else None
    tpot_compute = float(pass_compute[decode].mean()) if n_decode else None
    tpot_stall = float(pass_stall[decode].mean()) if n_decode else None
    ttft = [v for v in per_request["ttft_s"] if v is not None]
    gaps = [gap for t in tallies for gap in t.token_gaps]
    return {
        **percentiles("ttft", ttft),
        **percentiles("tpot", pass_time[decode]),
        **percentiles("itl", gaps),
        "ttft_s": mean_of(per_request["ttft_s"]),
        "ttft_compute_s": mean_of(per_request["ttft_compute_s"]),
        "ttft_stall_s": mean_of(per_request["ttft_stall_s"]),
        "ttft_other_s": mean_of(per_request["ttft_other_s"]),
        "tpot_s": tpot,
        "tpot_compute_s": tpot_compute,
        "tpot_stall_s": tpot_stall,
        "tpot_other_s": None if tpot is None else _other(tpot, tpot_compute, tpot_stall),
        "stall_s": float(_total(t.layer_stall for t in tallies).sum()),
        "makespan_s": makespan,
        "compute_s": float(_total(t.layer_compute for t in tallies).sum()),
        "tokens_generated": tokens_out,
        "throughput_tok_s": tokens_out / makespan if makespan > 0 else None,
    }


def percentiles(name: str, values: Sequence[float] | np.ndarray) -> dict[str, float | None]:
    """``<name>_p<q>_s`` for each of :data:`PERCENTILES`: ``numpy.percentile``'s linear
    interpolation between the closest ranks; None without values."""
    if len(values) == 0:
        return {f"{name}_p{q}_s": None for q in PERCENTILES}
    points = np.percentile(np.asarray(values, np.float64), PERCENTILES)
    return {f"{name}_p{q}_s": float(v) for q, v in zip(PERCENTILES, points, strict=True)}


def slo_metrics(
    slo: SloConfig, per_request: dict[str, list[Any]], makespan: float
) -> dict[str, Any]:
    """SLO attainment (the share of requests meeting every limit) and goodput (those requests
    per second of the run); a limit does not apply to a request without the quantity (no
    prefill: no TTFT; no decode tokens: no TPOT)."""
    met = 0
    for ttft, tpot in zip(per_request["ttft_s"], per_request["tpot_s"], strict=True):
        ok_ttft = slo.ttft_s is None or ttft is None or ttft <= slo.ttft_s
        ok_tpot = slo.tpot_s is None or tpot is None or tpot <= slo.tpot_s
        met += ok_ttft and ok_tpot
    requests = len(per_request["ttft_s"])
    return {
        "slo_requests_met": met,
        "slo_attainment": met / requests if requests else None,
        "goodput_rps": met / makespan if makespan > 0 else None,
    }


def _transfer_metrics(
    tallies: Sequence[GpuTally],
    metrics: dict[str, Any],
    resources: dict[str, list[Any]],
    makespan: float,
) -> dict[str, Any]:
    tokens_in = sum(int(t.passes.rows.size) for t in tallies)
    moved = metrics["bytes_demand"] + metrics["bytes_prefetch"]
    transfer_busy = sum(t.transfers.intervals.total() for t in tallies)
    overlap = sum(
        intersection_length(t.compute_iv.array(), t.transfers.intervals.array()) for t in tallies
    )
    engine_busy = np.array([b for t in tallies for b in t.engine_busy])
    links = zip(resources["utilization"], resources["kind"], strict=True)
    return {
        "bytes_per_token": moved / tokens_in if tokens_in else None,
        "transfer_busy_s": transfer_busy,
        "overlap_s": overlap,
        "overlap_fraction": overlap / transfer_busy if transfer_busy > 0 else None,
        "copy_engine_utilization": _ratio(float(engine_busy.mean()), makespan),
        "link_utilization_max": max(
            (u for u, k in links if k != "copy-engine" and u is not None), default=None
        ),
    }


def _layer_table(tallies: Sequence[GpuTally], stats: CacheStats) -> dict[str, list[Any]]:
    n_decode = sum(int((t.passes.phase == 1).sum()) for t in tallies)
    with_prefill = max(sum(len(t.first_token) for t in tallies), 1)
    phase_compute = _total(t.phase_compute for t in tallies)
    phase_stall = _total(t.phase_stall for t in tallies)
    table = per_layer_cache_table(stats)
    table["stall_s"] = _total(t.layer_stall for t in tallies).tolist()
    table["compute_s"] = _total(t.layer_compute for t in tallies).tolist()
    table["ttft_compute_s"] = (phase_compute[0] / with_prefill).tolist()
    table["ttft_stall_s"] = (phase_stall[0] / with_prefill).tolist()
    table["tpot_compute_s"] = (phase_compute[1] / max(n_decode, 1)).tolist()
    table["tpot_stall_s"] = (phase_stall[1] / max(n_decode, 1)).tolist()
    return table


def _resource_table(
    network: FlowNetwork, tallies: Sequence[GpuTally], makespan: float
) -> dict[str, list[Any]]:
    """Links, DRAM, NVMe drives and copy engines: bytes moved, busy time and utilization."""
    table: dict[str, list[Any]] = {
        k: [] for k in ("resource", "kind", "capacity_bytes_per_s", "bytes", "busy_s")
    }
    for r in network.capacity:
        table["resource"].append(r)
        prefix = r.split(":", 1)[0]
        table["kind"].append(prefix if prefix in ("dram", "nvme") else "link")
        table["capacity_bytes_per_s"].append(network.capacity[r])
        table["bytes"].append(network.bytes_through.get(r, 0.0))
        table["busy_s"].append(network.busy_s.get(r, 0.0))
    for tally in tallies:
        lanes = zip(
            [*tally.copy_lane_names, *tally.d2h_lane_names],
            [*tally.engine_bytes, *tally.d2h_bytes],
            [*tally.engine_busy, *tally.d2h_busy],
            strict=True,
        )
        for lane, nbytes, busy in lanes:
            table["resource"].append(lane)
            table["kind"].append("copy-engine")
            table["capacity_bytes_per_s"].append(None)
            table["bytes"].append(nbytes)
            table["busy_s"].append(float(busy))
    table["busy_fraction"] = [_ratio(b, makespan) for b in table["busy_s"]]
    table["utilization"] = [
        _ratio(n, c * makespan) if c is not None else _ratio(b, makespan)
        for n, c, b in zip(
            table["bytes"], table["capacity_bytes_per_s"], table["busy_s"], strict=True
        )
    ]
    return table


def _gpu_table(
    tallies: Sequence[GpuTally],
    caches: Sequence[ExpertCache],
    tables: list[dict[str, list[Any]]],
) -> dict[str, list[Any]]:
    """Per GPU: its requests and passes, cache outcome, bytes fetched and latencies."""
    out: dict[str, list[Any]] = {
        k: []
        for k in (
            "gpu", "requests", "passes", "hit_rate", "hits_home", "misses", "bytes_fetched",
            "stall_s", "compute_s", "ttft_s", "tpot_s", "finish_s",
        )
    }  # fmt: skip
    for tally, cache, table in zip(tallies, caches, tables, strict=True):
        totals = cache_metrics(cache.stats)
        decode = tally.passes.phase == 1
        out["gpu"].append(tally.gpu_id)
        out["requests"].append(len(table["request"]))
        out["passes"].append(tally.passes.num_passes)
        out["hit_rate"].append(totals["hit_rate"] if totals["accesses"] else None)
        out["hits_home"].append(totals["hits_home"])
        out["misses"].append(totals["misses"])
        out["bytes_fetched"].append(totals["bytes_demand"] + totals["bytes_prefetch"])
        out["stall_s"].append(float(tally.layer_stall.sum()))
        out["compute_s"].append(float(tally.layer_compute.sum()))
        out["ttft_s"].append(mean_of(table["ttft_s"]))
        out["tpot_s"].append(float(tally.pass_time[decode].mean()) if decode.any() else None)
        out["finish_s"].append(max(table["finish_s"], default=None))
    return out


def _pass_table(tallies: Sequence[GpuTally]) -> dict[str, list[Any]]:
    """One row per pass of every GPU, numbered as in the spans: its GPU, request (the first
    of a batch), phase (``prefill``/``decode``), start and end (s)."""
    out: dict[str, list[Any]] = {k: [] for k in ("gpu", "pass", "request", "phase")}
    base = 0
    for tally in tallies:
        passes = tally.passes
        out["gpu"] += [tally.gpu_id] * passes.num_passes
        out["pass"] += list(range(base, base + passes.num_passes))
        out["request"] += passes.request.tolist()
        out["phase"] += ["decode" if ph else "prefill" for ph in passes.phase.tolist()]
        base += passes.num_passes
    out["start_s"] = np.concatenate([t.pass_start for t in tallies]).tolist()
    out["end_s"] = np.concatenate([t.pass_end for t in tallies]).tolist()
    return out


def _total(arrays: Iterable[np.ndarray]) -> np.ndarray:
    """The element-wise sum of the GPUs' arrays."""
    return functools.reduce(np.add, arrays)


def _other(total: float, compute: float | None, stall: float | None) -> float:
    other = total - (compute or 0.0) - (stall or 0.0)
    return other if other > 1e-9 * total else 0.0


def _ratio(num: float, den: float) -> float | None:
    return num / den if den > 0 else None

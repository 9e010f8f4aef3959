"""The metric specification: every number a run reports, with its unit, direction and formula.

:data:`METRICS` lists each metric of ``RunResult.metrics``, :data:`TABLES` each column of its
tables (``per_layer``, ``per_request``, ``per_resource``, ``per_gpu``, ``per_pass``) and
:data:`INPUTS` each key of its ``inputs`` echo. Everything that names, formats, compares or
stores a metric reads it here: ``RunResult.to_dict`` refuses a name that is not listed (or one
that its engine does not report), ``docs/metrics.md`` is generated from it
(:mod:`specmd_sim.metric_docs`), the regression checks take each metric's good direction from
it, the reports and the CLI its label and unit, and the sweep table its column type.

A *unit* is one of :data:`UNITS`; :func:`format_value` writes a value in its unit for people
(``'14.78 ms'``, ``'1.25 GiB'``, ``'53.1 GB/s'``, ``'23.92 tok/s'``, ``'8.19%'``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from numbers import Integral
from typing import Any, Literal

from specmd_sim.units import format_bytes, format_seconds

Unit = Literal[
    "count", "fraction", "s", "B", "B/s", "B/token", "tok/s", "req/s", "id", "text", "factor"
]
Better = Literal["higher", "lower", "none"]

UNITS: dict[str, str] = {
    "count": "a number of things (accesses, prefetches, tokens)",
    "fraction": "a ratio from 0 to 1, shown as a percentage",
    "s": "seconds of simulated time",
    "B": "bytes",
    "B/s": "bytes per second",
    "B/token": "bytes per token",
    "tok/s": "tokens per second of simulated time",
    "req/s": "requests per second of simulated time",
    "id": "an identifier: a number or a name, shown as it is",
    "text": "a name, shown as it is",
    "factor": "a multiplier, shown as x1.234",
}
ENGINES = ("replay", "simulate")
BOTH = ENGINES
TIMING = ("simulate",)


@dataclass(frozen=True)
class Metric:
    """One metric (or table column, or input): ``better`` is the good direction (``none`` for a
    quantity that is neither, such as a count of accesses); ``engines`` those that report it;
    ``when`` the boolean config field that must be true for it to be reported (None: always)."""

    name: str
    unit: Unit
    better: Better
    label: str
    description: str
    formula: str
    engines: tuple[str, ...] = BOTH
    when: str | None = None

    def format(self, value: Any) -> str:
        return format_value(self.unit, value)


@dataclass(frozen=True)
class Table:
    """A table of ``result.json``: lists of equal length by column name."""

    name: str
    description: str
    columns: dict[str, Metric]


def _index(*metrics: Metric) -> dict[str, Metric]:
    return {m.name: m for m in metrics}


def _timing(*metrics: Metric) -> tuple[Metric, ...]:
    """The metrics as reported by the timing engine only."""
    return tuple(replace(m, engines=TIMING) for m in metrics)


def _when(flag: str, *metrics: Metric) -> tuple[Metric, ...]:
    """The metrics as reported only when the config field ``flag`` is true."""
    return tuple(replace(m, when=flag) for m in metrics)


PERCENTILES = (50, 90, 99)
"""The percentiles each latency distribution reports: ``<name>_p50_s`` ..."""


def _percentiles(name: str, label: str, of: str, formula: str) -> tuple[Metric, ...]:
    """``<name>_p<q>_s`` for each of :data:`PERCENTILES`: the q-th percentile of ``of``."""
    return tuple(
        Metric(f"{name}_p{q}_s", "s", "lower", f"{label} p{q}", f"{q}th percentile of {of}",
               f"percentile {q} of {formula}")
        for q in PERCENTILES
    )  # fmt: skip


# --- metrics ---------------------------------------------------------------------------------

_CACHE = (
    Metric("accesses", "count", "none", "accesses",
           "(pass, layer, expert) of the layers' demand sets",
           "hits + late_hits + misses"),
    Metric("hits", "count", "higher", "hits",
           "accesses whose expert was resident when the layer's router decided (with "
           "`parallel.mode: expert-sharded`, including the GPU's own shard)",
           "#accesses of class hit"),
    Metric("hits_home", "count", "none", "hits on the own shard",
           "hits on experts of the GPU's own shard (`expert-sharded`; they never enter the "
           "cache or its policy; 0 otherwise)",
           "#hits on experts of the GPU's shard"),
    Metric("late_hits", "count", "lower", "late hits",
           "accesses whose expert was loading then (timing engine only; 0 in replay). Not hits",
           "#accesses of class late hit"),
    Metric("misses", "count", "lower", "misses",
           "accesses whose expert was absent",
           "misses_compulsory + misses_capacity + misses_collision"),
    Metric("misses_compulsory", "count", "lower", "compulsory misses",
           "misses of an expert never resident before in this run",
           "#misses of class compulsory"),
    Metric("misses_capacity", "count", "lower", "capacity misses",
           "any other miss (the expert was evicted in an earlier pass)",
           "#misses of class capacity"),
    Metric("misses_collision", "count", "lower", "collision misses",
           "misses of an expert evicted earlier **in the current pass** (SpecMD's key metric)",
           "#misses of class collision"),
    Metric("hit_rate", "fraction", "higher", "hit rate",
           "share of accesses that hit (late hits count against it)",
           "hits / accesses (0 without accesses)"),
    Metric("evictions", "count", "lower", "evictions",
           "resident experts evicted",
           "#evictions"),
    Metric("evictions_kv", "count", "lower", "evictions forced by the KV cache",
           "of the evictions, those made because the KV cache grew and the expert cache's "
           "capacity shrank under its contents (`workload.kv_cache: evict`; else 0): at the "
           "pass start, or (timing engine: experts still loading then) at the next fetches",
           "#evictions while the cache held more than its capacity"),
    Metric("evictions_prefetch", "count", "lower", "evictions for prefetches",
           "of the evictions, those made to reserve room for a prefetch: each evicted expert the "
           "router wants again is a miss the prefetch caused (with few slots, prefetching can "
           "lower the hit rate)",
           "#evictions while reserving a prefetch"),
    Metric("prefetch_issued", "count", "none", "prefetches issued",
           "prefetches that reserved cache space and started (or queued) a transfer",
           "prefetch_used + prefetch_wasted + prefetch_cancelled"),
    Metric("prefetch_completed", "count", "none", "prefetches completed",
           "issued prefetches whose transfer finished",
           "#issued prefetches that landed"),
    Metric("prefetch_used", "count", "higher", "prefetches used",
           "issued prefetches whose expert was accessed (hit or late hit) before leaving the "
           "cache",
           "#issued prefetches accessed before eviction"),
    Metric("prefetch_wasted", "count", "lower", "prefetches wasted",
           "issued prefetches evicted unused, or still unused when the run ended",
           "#issued prefetches never accessed"),
    Metric("prefetch_cancelled", "count", "lower", "prefetches cancelled",
           "issued prefetches abandoned before their transfer started (timing engine: the "
           "target layer had started without needing them, or a demand fetch needed the space)",
           "#issued prefetches cancelled"),
    Metric("prefetch_dropped", "count", "none", "prefetches dropped",
           "prefetch requests not issued because nothing was evictable",
           "#prefetch requests without space"),
    Metric("bypassed", "count", "none", "bypassed fetches",
           "demand fetches streamed past the cache because the policy did not admit them "
           "(`static-hot`, `belady-bypass`)",
           "#demand fetches not admitted"),
    Metric("overflowed", "count", "none", "overflow fetches",
           "demand fetches streamed past the cache (through a staging buffer) because the "
           "layer's demand set left no room: every cached byte pinned by the layer running or "
           "loading for it (a whole-prompt prefill's demand set can be larger than the cache)",
           "#demand fetches past a full, pinned cache"),
    Metric("activations_dropped", "count", "lower", "activations dropped",
           "expert activations skipped by miss handling `drop` (an accuracy proxy)",
           "#misses resolved by drop"),
    Metric("activations_substituted", "count", "lower", "activations substituted",
           "expert activations replaced by a cached expert of the same layer (`substitute`)",
           "#misses resolved by substitute"),
    Metric("activations_cpu", "count", "none", "activations on the CPU",
           "missing experts run on the host CPU from DRAM (`cpu-execute`); they move no bytes "
           "to the GPU",
           "#misses resolved by cpu-execute"),
    Metric("bytes_demand", "B", "lower", "bytes demand-fetched",
           "bytes of all demand fetches (streamed ones included)",
           "Σ bytes of demand fetches"),
    Metric("bytes_prefetch", "B", "lower", "bytes prefetched",
           "bytes of all issued, not cancelled prefetches",
           "Σ bytes of prefetches not cancelled"),
    Metric("bytes_written_back", "B", "lower", "bytes written back",
           "bytes of evicted experts copied back to the host (a runtime with "
           "`memory_parity`; else 0)",
           "Σ bytes of evictions, with memory parity"),
)  # fmt: skip

_BELADY = _when(
    "belady_gap",
    Metric("belady_reference", "text", "none", "Belady reference",
           "the offline optimum the run is compared with: `belady`, or `belady-bypass` for "
           "policies that may stream",
           "belady-bypass if the eviction policy may bypass, else belady"),
    Metric("belady_misses", "count", "none", "Belady misses",
           "misses of the offline optimum on the same trace, capacity, prefetcher and warm "
           "start",
           "misses of the reference replay"),
    Metric("belady_hit_rate", "fraction", "none", "Belady hit rate",
           "hit rate of the offline optimum",
           "hits / accesses of the reference replay"),
    Metric("belady_gap_misses", "count", "lower", "misses above the optimum",
           "how many more misses the policy has than the offline optimum (never negative)",
           "misses - belady_misses"),
)  # fmt: skip

_LATENCY = _timing(
    Metric("ttft_s", "s", "lower", "TTFT",
           "mean time to first token over requests with a prefill",
           "mean over requests of (end of its last prefill pass, LM head included) − (its "
           "arrival)"),
    Metric("ttft_compute_s", "s", "lower", "TTFT compute",
           "mean compute part of TTFT",
           "mean over requests of compute[arrival, first token]"),
    Metric("ttft_stall_s", "s", "lower", "TTFT stall",
           "mean stall part of TTFT",
           "mean over requests of stall[arrival, first token]"),
    Metric("ttft_other_s", "s", "lower", "TTFT other",
           "mean part of TTFT that is neither compute nor stall (waiting for an arrival)",
           "mean over requests of other[arrival, first token]"),
    Metric("tpot_s", "s", "lower", "TPOT",
           "mean duration of decode passes, over all GPUs (from the pass's first attention to "
           "the end of its LM head)",
           "mean over decode passes of end_s − start_s"),
    Metric("tpot_compute_s", "s", "lower", "TPOT compute",
           "mean compute time of a decode pass",
           "mean over decode passes of compute[start, end]"),
    Metric("tpot_stall_s", "s", "lower", "TPOT stall",
           "mean stall time of a decode pass",
           "mean over decode passes of stall[start, end]"),
    Metric("tpot_other_s", "s", "lower", "TPOT other",
           "mean part of a decode pass that is neither compute nor stall",
           "tpot_s − tpot_compute_s − tpot_stall_s"),
    *_percentiles("ttft", "TTFT", "TTFT over requests with a prefill", "per_request.ttft_s "
                  "(numpy's linear interpolation)"),
    *_percentiles("tpot", "TPOT", "the time per output token: of the decode passes' "
                  "durations, over all GPUs (each gives one token to each request it decodes)",
                  "per_pass end_s − start_s over decode passes"),
    *_percentiles("itl", "ITL", "the inter-token latency: for every decode token, the time "
                  "since its request's previous token (the first token included; passes of "
                  "other requests in between count, as a user sees them)",
                  "(its time − its request's previous token's time) over decode tokens"),
    Metric("stall_s", "s", "lower", "stall",
           "total time the compute streams waited for experts (misses and late hits), summed "
           "over GPUs",
           "Σ per_layer.stall_s"),
    Metric("compute_s", "s", "lower", "compute",
           "total time of attention and expert operations and of issuing copies (LM heads "
           "not included)",
           "Σ per_layer.compute_s"),
    Metric("makespan_s", "s", "lower", "makespan",
           "simulated time at which the last pass ends",
           "max per_pass.end_s"),
    Metric("tokens_generated", "count", "none", "tokens generated",
           "output tokens: one first token per request with a prefill, plus one per decode "
           "token",
           "requests with a prefill + Σ per_request.decode_tokens"),
    Metric("throughput_tok_s", "tok/s", "higher", "throughput",
           "output tokens per second of simulated time, prefill included (the makespan covers "
           "it); decode alone is 1 / tpot_s",
           "tokens_generated / makespan_s"),
    Metric("bytes_per_token", "B/token", "lower", "bytes per token",
           "bytes moved per token processed (prompt and decode tokens of all passes)",
           "(bytes_demand + bytes_prefetch) / tokens processed"),
    Metric("transfer_busy_s", "s", "lower", "transfer busy",
           "time at least one copy engine was moving a chunk (path latency included); per "
           "GPU, summed over GPUs",
           "Σ over GPUs of |∪ transfer intervals|"),
    Metric("overlap_s", "s", "higher", "transfer hidden behind compute",
           "transfer time hidden behind compute; per GPU (its transfers against its compute), "
           "summed",
           "Σ over GPUs of |(∪ transfer intervals) ∩ (∪ compute intervals)|"),
    Metric("overlap_fraction", "fraction", "higher", "share of transfer hidden",
           "share of the transfer time hidden behind compute (null without transfers)",
           "overlap_s / transfer_busy_s"),
    Metric("copy_engine_utilization", "fraction", "none", "copy-engine utilization",
           "mean busy share of all GPUs' host-to-device copy engines",
           "mean over copy engines of busy_s / makespan_s"),
    Metric("link_utilization_max", "fraction", "none", "bottleneck utilization",
           "the highest utilization among links, DRAM and NVMe drives (the bottleneck's)",
           "max of per_resource.utilization over resources that are not copy engines"),
)  # fmt: skip

_SLO = _when(
    "slo",
    *_timing(
        Metric("slo_requests_met", "count", "higher", "requests meeting the SLO",
               "requests whose TTFT and TPOT are within `slo.ttft_s` and `slo.tpot_s` (a limit "
               "does not apply to a request without that quantity)",
               "#requests with ttft_s ≤ slo.ttft_s and tpot_s ≤ slo.tpot_s"),
        Metric("slo_attainment", "fraction", "higher", "SLO attainment",
               "share of requests meeting the SLO",
               "slo_requests_met / requests"),
        Metric("goodput_rps", "req/s", "higher", "goodput",
               "requests meeting the SLO per second of simulated time",
               "slo_requests_met / makespan_s"),
    ),
)  # fmt: skip

_DRAM = _when(
    "memory.dram_cache",
    Metric("dram_capacity_bytes", "B", "none", "DRAM cache capacity",
           "bytes of host DRAM that cache the NVMe-resident experts",
           "memory.dram_capacity resolved (default: the host's DRAM)"),
    Metric("dram_accesses", "count", "none", "DRAM accesses",
           "reads of an expert from host DRAM to the GPU: every fetch into the GPU cache "
           "(demand, prefetch or streamed)",
           "dram_hits + dram_late_hits + dram_misses"),
    Metric("dram_hits", "count", "higher", "DRAM hits",
           "DRAM accesses whose expert was resident in the DRAM cache",
           "#DRAM accesses of class hit"),
    Metric("dram_late_hits", "count", "lower", "DRAM late hits",
           "DRAM accesses whose expert was being read from NVMe by a DRAM prefetch (timing "
           "engine only; 0 in replay). Not hits",
           "#DRAM accesses of class late hit"),
    Metric("dram_misses", "count", "lower", "DRAM misses",
           "DRAM accesses whose expert had to be read from NVMe first",
           "dram_misses_compulsory + dram_misses_capacity + dram_misses_collision"),
    Metric("dram_misses_compulsory", "count", "lower", "DRAM compulsory misses",
           "DRAM misses of an expert never in the DRAM cache before in this run",
           "#DRAM misses of class compulsory"),
    Metric("dram_misses_capacity", "count", "lower", "DRAM capacity misses",
           "any other DRAM miss (the expert left the DRAM cache in an earlier pass)",
           "#DRAM misses of class capacity"),
    Metric("dram_misses_collision", "count", "lower", "DRAM collision misses",
           "DRAM misses of an expert evicted from DRAM earlier in the current pass",
           "#DRAM misses of class collision"),
    Metric("dram_hit_rate", "fraction", "higher", "DRAM hit rate",
           "share of DRAM accesses that hit",
           "dram_hits / dram_accesses (0 without accesses)"),
    Metric("dram_evictions", "count", "lower", "DRAM evictions",
           "experts evicted from the DRAM cache",
           "#evictions of the DRAM cache"),
    Metric("dram_bypassed", "count", "none", "DRAM bypasses",
           "DRAM misses read through a staging buffer, not cached, because the DRAM policy "
           "did not admit them",
           "#DRAM misses not admitted"),
    Metric("dram_prefetch_issued", "count", "none", "DRAM prefetches issued",
           "NVMe-to-DRAM prefetches that reserved DRAM cache space",
           "dram_prefetch_used + dram_prefetch_wasted"),
    Metric("dram_prefetch_used", "count", "higher", "DRAM prefetches used",
           "DRAM prefetches whose expert was read to the GPU before leaving DRAM",
           "#DRAM prefetches accessed before eviction"),
    Metric("dram_prefetch_wasted", "count", "lower", "DRAM prefetches wasted",
           "DRAM prefetches evicted unused, or unused when the run ended",
           "#DRAM prefetches never accessed"),
    Metric("dram_prefetch_dropped", "count", "none", "DRAM prefetches dropped",
           "DRAM prefetch requests not issued because nothing in DRAM was evictable",
           "#DRAM prefetch requests without space"),
    Metric("bytes_nvme_demand", "B", "lower", "bytes read from NVMe on demand",
           "bytes read from NVMe into DRAM for DRAM misses",
           "Σ bytes of DRAM misses"),
    Metric("bytes_nvme_prefetch", "B", "lower", "bytes prefetched from NVMe",
           "bytes read from NVMe into DRAM by DRAM prefetches",
           "Σ bytes of DRAM prefetches"),
)  # fmt: skip

METRICS: dict[str, Metric] = _index(*_CACHE, *_BELADY, *_LATENCY, *_SLO, *_DRAM)
"""Every metric of ``RunResult.metrics``, by name."""

# --- tables ----------------------------------------------------------------------------------

_LAYER = (
    Metric("layer", "id", "none", "layer", "the MoE layer", "0 … num_layers − 1"),
    Metric("accesses", "count", "none", "accesses", "that layer's accesses",
           "hits + late_hits + misses of the layer"),
    Metric("hits", "count", "higher", "hits", "that layer's hits", "#hits in the layer"),
    Metric("late_hits", "count", "lower", "late hits", "that layer's late hits",
           "#late hits in the layer"),
    Metric("misses_compulsory", "count", "lower", "compulsory misses",
           "that layer's compulsory misses", "#compulsory misses in the layer"),
    Metric("misses_capacity", "count", "lower", "capacity misses",
           "that layer's capacity misses", "#capacity misses in the layer"),
    Metric("misses_collision", "count", "lower", "collision misses",
           "that layer's collision misses", "#collision misses in the layer"),
    Metric("hit_rate", "fraction", "higher", "hit rate", "that layer's hit rate",
           "hits / accesses of the layer (0 without accesses)"),
    *_timing(
        Metric("stall_s", "s", "lower", "stall", "total time waiting for that layer's experts",
               "Σ stall in the layer"),
        Metric("compute_s", "s", "lower", "compute",
               "total time of that layer's attention and expert operations and of issuing "
               "its copies",
               "Σ compute in the layer"),
        Metric("ttft_compute_s", "s", "lower", "TTFT compute",
               "that layer's compute in prefill passes, per request with a prefill",
               "Σ compute of the layer in prefill passes / requests with a prefill"),
        Metric("ttft_stall_s", "s", "lower", "TTFT stall",
               "that layer's stall in prefill passes, per request with a prefill",
               "Σ stall of the layer in prefill passes / requests with a prefill"),
        Metric("tpot_compute_s", "s", "lower", "TPOT compute",
               "that layer's compute per decode pass",
               "Σ compute of the layer in decode passes / decode passes"),
        Metric("tpot_stall_s", "s", "lower", "TPOT stall",
               "that layer's stall per decode pass",
               "Σ stall of the layer in decode passes / decode passes"),
    ),
)  # fmt: skip

_REQUEST = _timing(
    Metric("request", "id", "none", "request", "the request's id", "its index in the trace"),
    Metric("arrival_s", "s", "none", "arrival", "when the request arrived",
           "start of its first pass (closed loop), or its drawn or recorded arrival"),
    Metric("ttft_s", "s", "lower", "TTFT",
           "time to its first token (null without a prefill)",
           "end of its last prefill pass − arrival_s"),
    Metric("ttft_compute_s", "s", "lower", "TTFT compute", "compute part of its TTFT",
           "compute[arrival, first token]"),
    Metric("ttft_stall_s", "s", "lower", "TTFT stall", "stall part of its TTFT",
           "stall[arrival, first token]"),
    Metric("ttft_other_s", "s", "lower", "TTFT other", "the rest of its TTFT",
           "other[arrival, first token]"),
    Metric("tpot_s", "s", "lower", "TPOT",
           "time per output token after the first (from the arrival without a prefill; null "
           "without decode tokens)",
           "(finish_s − first token) / decode_tokens"),
    Metric("tpot_compute_s", "s", "lower", "TPOT compute", "compute part of its TPOT",
           "compute[first token, finish] / decode_tokens"),
    Metric("tpot_stall_s", "s", "lower", "TPOT stall", "stall part of its TPOT",
           "stall[first token, finish] / decode_tokens"),
    Metric("tpot_other_s", "s", "lower", "TPOT other", "the rest of its TPOT",
           "other[first token, finish] / decode_tokens"),
    Metric("decode_tokens", "count", "none", "decode tokens",
           "tokens after the first: one per decode pass it took part in",
           "#decode passes of the request"),
    Metric("finish_s", "s", "lower", "finish", "time of its last token",
           "end of its last pass"),
)  # fmt: skip

_RESOURCE = _timing(
    Metric("resource", "id", "none", "resource", "the resource",
           "`link:src>dst`, `dram:host`, `nvme:id`, or `gpu/copy-h2d-i`"),
    Metric("kind", "text", "none", "kind", "what it is",
           "`link`, `dram`, `nvme` or `copy-engine`"),
    Metric("capacity_bytes_per_s", "B/s", "none", "capacity",
           "its bandwidth (an NVMe drive's: its peak; null for copy engines)",
           "from the hardware profile"),
    Metric("bytes", "B", "none", "bytes", "bytes of finished transfers through it",
           "Σ bytes of the transfers that crossed it"),
    Metric("busy_s", "s", "none", "busy",
           "time with at least one flow moving bytes over it (engines: time running a chunk, "
           "latency included)",
           "|∪ intervals with a flow on it|"),
    Metric("busy_fraction", "fraction", "none", "busy share", "share of the run it was busy",
           "busy_s / makespan_s"),
    Metric("utilization", "fraction", "none", "utilization",
           "share of its capacity used over the run (copy engines: busy_fraction)",
           "bytes / (capacity_bytes_per_s · makespan_s)"),
)  # fmt: skip

_GPU = _timing(
    Metric("gpu", "id", "none", "GPU", "the GPU's node id", "from parallel.gpus"),
    Metric("requests", "count", "none", "requests", "requests it served",
           "#requests assigned to it"),
    Metric("passes", "count", "none", "passes", "passes it ran", "#passes assigned to it"),
    Metric("hit_rate", "fraction", "higher", "hit rate",
           "its cache's hit rate (null for a GPU that served no request)",
           "hits / accesses of its cache"),
    Metric("hits_home", "count", "none", "hits on the own shard",
           "its hits on experts of its own shard", "#hits on its shard"),
    Metric("misses", "count", "lower", "misses", "its cache's misses",
           "misses of its cache"),
    Metric("bytes_fetched", "B", "lower", "fetched", "bytes its cache fetched",
           "bytes_demand + bytes_prefetch of its cache"),
    Metric("stall_s", "s", "lower", "stall", "its compute stream's stall",
           "Σ stall on its compute stream"),
    Metric("compute_s", "s", "lower", "compute",
           "its attention, expert and copy-issue compute time",
           "Σ compute on its compute stream"),
    Metric("ttft_s", "s", "lower", "TTFT", "mean TTFT of its requests",
           "mean of per_request.ttft_s over its requests"),
    Metric("tpot_s", "s", "lower", "TPOT", "mean duration of its decode passes",
           "mean over its decode passes of end_s − start_s"),
    Metric("finish_s", "s", "lower", "finish", "time of its last token",
           "max of per_request.finish_s over its requests"),
)  # fmt: skip

_PASS = _timing(
    Metric("gpu", "id", "none", "GPU", "the GPU that ran it", "its GPU's node id"),
    Metric("pass", "id", "none", "pass",
           "the pass's number (unique over GPUs, as in the spans)",
           "GPU g's passes follow those of GPUs 0 … g − 1"),
    Metric("request", "id", "none", "request", "its request (the first one of a batch)",
           "from the pass table"),
    Metric("phase", "text", "none", "phase", "`prefill` or `decode`", "from the pass table"),
    Metric("start_s", "s", "none", "start",
           "when it started (once its new requests had arrived)",
           "time of its first attention"),
    Metric("end_s", "s", "none", "end", "when it ended", "end of its last operation"),
)  # fmt: skip

TABLES: dict[str, Table] = {
    t.name: t
    for t in (
        Table("per_layer", "one row per MoE layer", _index(*_LAYER)),
        Table("per_request", "one row per request of all GPUs, in id order", _index(*_REQUEST)),
        Table("per_resource", "one row per link direction, DRAM and NVMe drive on any GPU's "
              "transfer paths, then per copy engine of each GPU", _index(*_RESOURCE)),
        Table("per_gpu", "one row per GPU of parallel.gpus", _index(*_GPU)),
        Table("per_pass", "one row per pass of every GPU, in pass order", _index(*_PASS)),
    )
}  # fmt: skip
"""Every table of ``RunResult`` (and ``result.json``), by name."""

# --- inputs ----------------------------------------------------------------------------------

INPUTS: dict[str, Metric] = _index(
    Metric("model", "text", "none", "model", "catalog id of the model", "config.model or the "
           "trace's model"),
    Metric("expert_dtype", "text", "none", "expert precision",
           "the model's expert precision", "config.expert_dtype or the model's"),
    Metric("expert_bytes", "B", "none", "expert size", "bytes of one expert at that precision",
           "from the model spec"),
    Metric("routed_bytes", "B", "none", "routed-expert bytes",
           "all routed experts at their own precision (the base of a percentage capacity)",
           "Σ over experts of their bytes"),
    Metric("hardware", "text", "none", "hardware", "id of the hardware profile", "from the "
           "profile"),
    Metric("hardware_name", "text", "none", "machine", "the hardware profile's name: its GPUs "
           "and host", "from the profile"),
    Metric("host_name", "text", "none", "host", "the CPU and memory the profile's (first) host "
           "describes, which the run's host-side numbers assume", "from the profile"),
    Metric("host_cost_scale", "factor", "none", "host cost scale",
           "the factor the runtime's host-side costs were scaled by for the run's host (the "
           "runtime's reference host's single-thread speed over the run host's; 1 where either "
           "is not stated)", "specmd_sim/runtime/host_rule.py"),
    Metric("host_costs", "text", "none", "host costs", "what the host rule did and why, in a "
           "line", "specmd_sim/runtime/host_rule.py"),
    Metric("runtime", "text", "none", "runtime", "id of the runtime profile (software stack)",
           "config.runtime"),
    Metric("dense_dtype", "text", "none", "non-expert precision",
           "precision of attention, routers, shared experts, embedding and LM head",
           "config.dense_dtype or the model's"),
    Metric("kv_dtype", "text", "none", "KV-cache precision",
           "precision of the KV cache's keys and values", "config.kv_dtype or the model's"),
    Metric("kv_bytes_per_token", "B", "none", "KV cache per token",
           "KV-cache bytes one token adds over all layers",
           "layers × (2 × KV heads × head dimension, or the model's MLA override) × bytes of "
           "kv_dtype"),
    Metric("budget_gpu", "text", "none", "budget GPU", "the GPU whose memory budget is shown "
           "(the first of parallel.gpus)", "from parallel.gpus"),
    Metric("hbm_bytes", "B", "none", "HBM", "the GPU's memory", "from the profile"),
    Metric("non_expert_weight_bytes", "B", "none", "non-expert weights",
           "attention, routers, shared experts, dense layers, embedding and LM head in HBM",
           "params × bytes per param of dense_dtype"),
    Metric("kv_cache_bytes", "B", "none", "KV cache",
           "`kv_cache_mode` reserved: the KV cache of the longest context times the requests "
           "decoded together; evict: its peak as it grows; wait: the pool the expert cache "
           "leaves", "reserved: kv_context_tokens × kv_batch × KV bytes per token and layer × "
           "layers; evict: kv_context_tokens × the same bytes; wait: HBM − weights − "
           "workspace − shard − capacity"),
    Metric("kv_context_tokens", "count", "none", "longest context",
           "reserved: tokens of the workload's longest request; evict and wait: the most "
           "tokens in the KV cache at once", "from the pass table"),
    Metric("kv_cache_mode", "text", "none", "KV cache mode",
           "how the KV cache takes its memory", "workload.kv_cache"),
    Metric("kv_batch", "count", "none", "KV batch", "requests decoded together",
           "min(workload.batch_size, requests)"),
    Metric("workspace_bytes", "B", "none", "runtime workspace",
           "GPU memory the runtime keeps besides weights and KV cache", "from the runtime"),
    Metric("expert_shard_bytes", "B", "none", "own expert shard",
           "expert-sharded runs: the GPU's own routed experts (0 otherwise)", "from parallel"),
    Metric("budget_available_bytes", "B", "none", "left for the expert cache",
           "what HBM leaves for the expert cache (cache.capacity auto takes it); with "
           "kv_cache_mode evict, before any KV cache",
           "hbm − weights − KV cache − workspace − own shard (evict: without the KV cache)"),
    Metric("trace_model", "text", "none", "trace model", "the model the trace was made for",
           "from the trace"),
    Metric("trace_tokens", "count", "none", "trace tokens", "tokens in the trace",
           "from the trace"),
    Metric("num_layers", "count", "none", "MoE layers", "MoE layers", "from the trace"),
    Metric("num_experts", "count", "none", "experts per layer", "routed experts per layer",
           "from the trace"),
    Metric("top_k", "count", "none", "top-k", "experts each token selects per layer",
           "from the trace"),
    Metric("passes", "count", "none", "passes", "passes over all GPUs", "from the pass table"),
    Metric("requests", "count", "none", "requests", "requests over all GPUs",
           "from the pass table"),
    Metric("preemptions", "count", "none", "preemptions",
           "requests preempted because the KV pool had no free block for a running request "
           "(`workload.kv_cache: paged`; else 0): each recomputes its tokens when it runs again",
           "from the pass table (the scheduler's)"),
    Metric("capacity_bytes", "B", "none", "cache capacity", "cache capacity per GPU",
           "cache.capacity resolved"),
    Metric("capacity_slots", "count", "none", "cache slots",
           "experts the cache holds (of the largest expert size, with mixed precision)",
           "capacity_bytes // largest expert bytes"),
    Metric("pass_demand_max", "count", "none", "largest demand of a pass",
           "the most experts one forward pass demands over all its layers (any GPU): a cache "
           "of fewer slots evicts experts before the next pass can reuse them",
           "max over passes of Σ over layers of the demand set's size"),
    Metric("layer_demand_max", "count", "none", "largest demand of a layer",
           "the most experts one layer of one pass demands (any GPU): what a cache of fewer "
           "slots cannot hold of it is streamed past the cache (`overflowed`)",
           "max over passes and layers of the demand set's size"),
    Metric("gpus", "count", "none", "GPUs", "GPUs used", "from parallel.gpus"),
    Metric("experts_dram", "count", "none", "experts in DRAM", "routed experts stored in host "
           "DRAM", "from memory.dram_capacity"),
    Metric("experts_nvme", "count", "none", "experts on NVMe", "routed experts stored on the "
           "NVMe drive", "the rest"),
    Metric("bytes_nvme", "B", "none", "bytes on NVMe", "bytes of the experts on NVMe",
           "Σ bytes of the experts on NVMe"),
    Metric("nvme", "text", "none", "NVMe drive", "the NVMe node holding experts (null: none)",
           "memory.nvme or the profile's first"),
    Metric("expert_dtypes", "text", "none", "expert precisions",
           "the precisions experts are stored at, such as `bf16+int4`", "from precision"),
    Metric("experts_cold", "count", "none", "cold experts",
           "experts stored at precision.cold_dtype", "from precision.hot_fraction"),
)  # fmt: skip
"""Every key of ``RunResult.inputs`` (what the config resolved to), by name."""


# --- using the spec --------------------------------------------------------------------------


def reported(metric: Metric, engine: str, config: Mapping[str, Any]) -> bool:
    """Whether a run of ``engine`` with ``config`` (its ``config_to_dict`` form) reports it."""
    if engine not in metric.engines:
        return False
    if metric.when is None:
        return True
    value: Any = config  # a dotted field (memory.dram_cache) names a nested section
    for part in metric.when.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    return bool(value)


def value_type(unit: str) -> type:
    """The Python type of a metric's or an input's value (None aside): counts and bytes are
    ``int``, names ``str``, everything else ``float``. Table columns may hold floats of bytes
    (a link's share of a flow), so this is for metrics and inputs only."""
    return {"count": int, "B": int, "text": str}.get(unit, float)


def format_value(unit: str, value: Any) -> str:
    """A value in its unit for people; ``'–'`` for None."""
    if value is None:
        return "–"
    if unit == "s":
        return format_seconds(value)
    if unit == "B":
        return format_bytes(value)
    if unit == "B/token":
        return f"{format_bytes(value)}/token"
    if unit == "B/s":
        return _decimal(value, "B/s")
    if unit in ("tok/s", "req/s"):
        return f"{value:.4g} {unit}"
    if unit == "fraction":
        return f"{value:.2%}"
    if unit == "count":
        return f"{value:,}" if isinstance(value, Integral) else f"{value:,.4g}"
    if unit == "factor":
        return f"x{value:.4g}"
    return str(value)


def _decimal(value: float, unit: str) -> str:
    """With an SI prefix (bandwidths are decimal: GB/s), 4 significant digits."""
    for prefix, size in (("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(value) >= size:
            return f"{value / size:.4g} {prefix}{unit}"
    return f"{value:.4g} {unit}"

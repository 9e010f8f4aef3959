"""What a run summary says besides its numbers: the setup in words, and one line where a literal
answer hides the real one (late hits, a cache smaller than a pass's or a layer's demand, a model
that would fit whole, prefetches a policy refused). Each function takes a result's ``config`` /
``inputs`` / ``metrics`` mappings (as ``result.json`` holds them) and returns a line or None."""

from __future__ import annotations

from typing import Any

from specmd_sim.policies.registry import is_offline
from specmd_sim.units import format_bytes


def prefill_words(tokens: int) -> str:
    if tokens == 0:
        return "the whole prompt in one pass"
    return "token by token" if tokens == 1 else f"in chunks of {tokens} tokens"


def setup_line(config: dict[str, Any], inputs: dict[str, Any]) -> str:
    """The settings that set the headline numbers, in words: the workload, prefill, predictor,
    runtime, cache and machine (its GPUs, and its host where the machine's name does not say
    it: the CPU and memory the run's host-side numbers assume)."""
    workload, chosen = config.get("workload", {}), config.get("predictor", {})
    predictor = chosen.get("kind", "?")
    words = f"predictor {predictor}"
    if is_offline("predictor", predictor):
        words += " (offline: it reads the run's future routing, which no real system can)"
    elif "learn_online" in chosen:  # a predictor that learns (policies/fit.py: FittableConfig)
        words += (
            " (fitted on other requests)"
            if chosen.get("fit_on")
            else " (learned online from the run)"
        )
    requests, tokens = inputs.get("requests", "?"), inputs.get("trace_tokens", "?")
    cache = config.get("cache", {}).get("capacity", "?")
    slots = inputs.get("capacity_slots")
    cache_words = f"cache {cache}" + (f" = {slots:,} expert slots" if slots else "")
    machine = inputs.get("hardware_name") or inputs.get("hardware", "?")
    host = inputs.get("host_name")
    if host and host not in machine:
        machine += f" (host: {host})"
    return (
        f"setup: {requests} request(s), {tokens} tokens of routing ({config.get('trace', '?')}); "
        f"{serving_words(workload, config.get('parallel', {}))}"
        f"prefill {prefill_words(int(workload.get('prefill_chunk_tokens', 0)))}; {words}; "
        f"runtime {config.get('runtime', '?')}; {cache_words}; machine {machine}"
    )


def serving_words(workload: dict[str, Any], parallel: dict[str, Any]) -> str:
    """How requests arrive, are routed to GPUs and steps formed, where they do not arrive
    closed loop (with the separator after them); else nothing."""
    arrivals = workload.get("arrivals", "closed-loop")
    if arrivals == "closed-loop":
        return ""
    rate = workload.get("arrival_rate_per_s")
    words = f"arrivals {arrivals}" + (f" at {rate:g}/s" if arrivals == "poisson" else "")
    if int(workload.get("batch_size", 1)) > 1:
        words += f", batch {workload['batch_size']}, " + (
            "steps formed as requests arrive"
            if workload.get("schedule", "online") == "online"
            else "steps fixed before the run (a step waits for requests not yet arrived)"
        )
    gpus = parallel.get("gpus", 1)
    if (gpus if isinstance(gpus, int) else len(gpus)) > 1:
        router = parallel.get("router", "round-robin")
        words += ", " + (
            "each request to the GPU least loaded at its arrival"
            if router == "least-loaded"
            else "requests dealt round robin to the GPUs"
        )
    return words + "; "


def late_hit_note(m: dict[str, Any]) -> str | None:
    """One line on late hits when they outnumber hits: why the hit rate is low although the
    prefetcher named the right experts (and what replay, where transfers take no time, would
    count)."""
    late, hits, accesses = m.get("late_hits"), m.get("hits"), m.get("accesses")
    if not late or not accesses or late <= (hits or 0):
        return None
    return (
        f"note: {late / accesses:.1%} of accesses were late hits: the expert was still loading "
        f"when its layer's router decided, and the layer waited for it. The hit rate leaves "
        f"them out; replay, where transfers take no time, counts them as hits (hits and "
        f"late hits here: {(late + (hits or 0)) / accesses:.1%})"
    )


def small_cache_note(inputs: dict[str, Any]) -> str | None:
    """A cache smaller than what one pass demands over its layers: a recency policy evicts every
    expert before the next pass could reuse it."""
    slots, demand = inputs.get("capacity_slots"), inputs.get("pass_demand_max")
    if not slots or not demand or slots >= demand:
        return None
    return (
        f"note: the cache holds {slots:,} experts and one pass demands up to {demand:,} over its "
        f"layers, so an expert is evicted before the next pass can reuse it: policies that keep "
        f"recent experts (lru, least-stale) find few hits across passes; a cache of at least "
        f"{demand:,} slots, or a policy that keeps a fixed set (static-hot, lfu), changes that"
    )


def layer_quota_note(config: dict[str, Any], inputs: dict[str, Any]) -> str | None:
    """Per-layer LRU with more slots per layer than the cache holds over the layers: the quota
    never binds for every layer at once, and the globally least recently used expert goes."""
    eviction = config.get("eviction", {})
    quota, layers = eviction.get("slots_per_layer"), inputs.get("num_layers")
    slots = inputs.get("capacity_slots")
    if eviction.get("kind") != "per-layer-lru" or not quota or not layers or not slots:
        return None
    if quota * layers <= slots:
        return None
    return (
        f"note: per-layer-lru keeps {quota} slots per layer, {quota * layers:,} over the "
        f"{layers} layers, and the cache holds {slots:,}: when it is full the globally least "
        f"recently used expert goes, as under lru, before a layer reaches its quota; "
        f"mixtral-offloading's cache has slots_per_layer x layers slots (--cache "
        f"{quota * layers})"
    )


def overflow_note(
    m: dict[str, Any], inputs: dict[str, Any], config: dict[str, Any] | None = None
) -> str | None:
    """Demand fetches streamed past the cache: a cache smaller than one layer's demand set, or,
    where the demand sets fit, an eviction policy that chose no victim (or a cache that shrank
    as the KV cache grew)."""
    overflowed, slots = m.get("overflowed") or 0, inputs.get("capacity_slots")
    if not overflowed or not slots:
        return None
    demand = inputs.get("layer_demand_max")
    said = f"note: {overflowed:,} demand fetches were streamed past the cache: "

    def streamed(remedy: str = "") -> str:
        return (
            "went through staging buffers, crossing the link but never cached (counted as "
            f"overflow fetches{remedy})"
        )

    if isinstance(demand, int) and demand <= slots:
        config = config or {}
        kind = (config.get("eviction") or {}).get("kind", "the eviction policy")
        evict = (config.get("workload") or {}).get("kv_cache") == "evict"
        shrank = ", or the cache shrank as the KV cache grew" if evict else ""
        return (
            f"{said}a layer demanded up to {demand} experts and the cache holds {slots:,}, yet "
            f"no room was made: the eviction policy ({kind}) chose no victim among the experts "
            f"not pinned{shrank}; what found no room {streamed()}"
        )
    return (
        f"{said}a layer demanded up to {demand or 'more'} experts and the cache holds "
        f"{slots:,}, so what the layer's pinned experts left no room for "
        + streamed("; a larger cache or prefill in chunks changes it")
    )


def whole_model_note(inputs: dict[str, Any]) -> str | None:
    """Every expert would fit in the memory the budget leaves, but the cache is smaller."""
    routed, room = inputs.get("routed_bytes"), inputs.get("budget_available_bytes")
    capacity = inputs.get("capacity_bytes")
    if not routed or not room or not capacity or routed > room or capacity >= routed:
        return None
    return (
        f"note: all of the model's experts ({format_bytes(routed)}) fit in what this GPU's "
        f"memory budget leaves ({format_bytes(room)}): --cache auto holds them all, and after "
        f"the first use of each nothing moves; this run caches {format_bytes(capacity)}"
    )


def dropped_prefetch_note(m: dict[str, Any], config: dict[str, Any]) -> str | None:
    """Prefetch requests the cache refused: the policy had nothing it would evict for them."""
    dropped, issued = m.get("prefetch_dropped") or 0, m.get("prefetch_issued") or 0
    if not dropped or dropped < issued:
        return None
    eviction = config.get("eviction", {}).get("kind", "?")
    return (
        f"note: {dropped:,} prefetch requests were dropped, {issued:,} issued: the cache had "
        f"nothing {eviction} would evict for them (a policy that keeps a fixed set refuses "
        f"them), so the prefetcher did {'nothing' if not issued else 'little'} here"
    )


def prefetch_eviction_note(m: dict[str, Any]) -> str | None:
    """Prefetches made most of the evictions: the experts they pushed out come back as misses,
    so prefetching may be what lowers the hit rate."""
    by_prefetch, evictions = m.get("evictions_prefetch") or 0, m.get("evictions") or 0
    if not by_prefetch or 2 * by_prefetch <= evictions:
        return None
    wasted, issued = m.get("prefetch_wasted") or 0, m.get("prefetch_issued") or 0
    return (
        f"note: prefetches made {by_prefetch:,} of the {evictions:,} evictions "
        f"({by_prefetch / evictions:.0%}), and {wasted:,} of the {issued:,} prefetched experts "
        f"were never used: an expert a prefetch evicts is a miss when its router wants it "
        f"again, so with this few slots prefetching may lower the hit rate as well as raise it; "
        f"the same run with --prefetch none shows which"
    )


def run_notes(config: dict[str, Any], inputs: dict[str, Any], m: dict[str, Any]) -> list[str]:
    """Every note that applies to a run, in order of how much it changes the answer."""
    found = (host_note(inputs, m), whole_model_note(inputs), overflow_note(m, inputs, config),
             layer_quota_note(config, inputs), small_cache_note(inputs),
             preemption_note(inputs), dropped_prefetch_note(m, config),
             prefetch_eviction_note(m), late_hit_note(m))  # fmt: skip
    return [n for n in found if n is not None]


def host_note(inputs: dict[str, Any], m: dict[str, Any]) -> str | None:
    """One line where the host rule scaled the runtime's host-side costs to the run's host
    (``specmd_sim/runtime/host_rule.py``); ``inputs.host_costs`` says what it did in any case.
    None for a run without times (a replay)."""
    if inputs.get("host_cost_scale", 1.0) == 1.0 or m.get("makespan_s") is None:
        return None
    return f"note: {inputs['host_costs']}"


def preemption_note(inputs: dict[str, Any]) -> str | None:
    """One line where the KV pool preempted requests (``kv_cache: paged``)."""
    count = inputs.get("preemptions")
    if not count:
        return None
    return (
        f"note: {count} preemption(s): a running request found no free KV block, so the last "
        f"to join gave its blocks back and recomputed its tokens when it ran again; a larger "
        f"KV pool (a smaller cache.capacity) or a smaller workload.batch_size avoids them"
    )

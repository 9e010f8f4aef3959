"""Resolve a :class:`~specmd_sim.config.SimConfig` into loaded inputs, with all checks that can
be made before a run (model/trace agreement, capacity against the GPU memory budget)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property

import numpy as np
from pydantic import ValidationError

from specmd_sim.config import CacheConfig, SimConfig
from specmd_sim.errors import SpecmdError, from_validation_error
from specmd_sim.hardware import HardwareProfile, load_profile
from specmd_sim.hardware.overrides import override_profile
from specmd_sim.hardware.schema import GPUNode
from specmd_sim.hardware.topology import TransferPath, host_path
from specmd_sim.models import ModelSpec, load_model
from specmd_sim.policies.fit import TrainingRoutes
from specmd_sim.runtime import RuntimeProfile, load_runtime
from specmd_sim.runtime.host_rule import HostScaling, for_host
from specmd_sim.scenario.budget import MemoryBudget
from specmd_sim.scenario.dram import check_dram_cache
from specmd_sim.scenario.passes import DemandSets, Passes, build_demand
from specmd_sim.scenario.placement import (
    ExpertSizes,
    Placement,
    expert_sizes,
    place,
    shard_mask,
)
from specmd_sim.scenario.schedule import (
    build_passes,
    draw_arrivals,
    is_online,
    zero_time_passes,
)
from specmd_sim.scenario.training import build_training, check_requests
from specmd_sim.traces.io import load_trace
from specmd_sim.traces.trace import Trace
from specmd_sim.units import format_bytes


@dataclass(frozen=True, eq=False)
class Scenario:
    config: SimConfig
    profile: HardwareProfile
    runtime: RuntimeProfile
    model: ModelSpec
    trace: Trace
    passes: Passes
    demand: DemandSets
    capacity_bytes: int  # of each GPU's expert cache
    placement: Placement
    gpus: tuple[GPUNode, ...]  # the GPUs of config.parallel, in order
    # per GPU, its pass table and demand sets; ((passes, demand),) with one GPU
    shards: tuple[tuple[Passes, DemandSets], ...]
    budgets: tuple[MemoryBudget, ...]  # per GPU, what its HBM holds besides the cache
    # what the host rule did to the runtime's host-side costs (specmd_sim/runtime/host_rule.py)
    host_costs: HostScaling
    training: TrainingRoutes | None = None  # what the predictor is fitted on (fit_on)
    # per GPU, the KV pool's tokens (kv_cache: wait; else None), for the schedules formed in a run
    kv_pools: tuple[int | None, ...] = ()
    # per GPU, the requests a timed run routed to it (parallel.router: least-loaded), their
    # ids and arrivals in admission order, with the passes it formed (formed_schedule); None:
    # routed before the run (round robin)
    routed: tuple[tuple[np.ndarray, np.ndarray], ...] | None = None

    @cached_property
    def host_links(self) -> dict[str, TransferPath]:
        """Each GPU's path from the first host's DRAM (:func:`host_path`), by GPU id, found
        once: its experts' first path (as copied: ``expert_sources``) and its eager hand-offs'."""
        return {gpu.id: host_path(self.profile, gpu.id) for gpu in self.gpus}

    @property
    def num_passes(self) -> int:
        """Passes of all GPUs together."""
        return sum(passes.num_passes for passes, _ in self.shards)

    @property
    def slots(self) -> int:
        """Expert slots of the cache (of the largest expert size, with mixed precision)."""
        return self.capacity_bytes // self.placement.largest


def build_scenario(config: SimConfig, *, check_cache: bool = True) -> Scenario:
    """Load and check everything ``config`` names; ``check_cache=False`` skips the checks of
    the cache's capacity (for analyses that run no cache, e.g. a predictor's quality)."""
    if not isinstance(config, SimConfig):  # (a mapping: build_config checks and converts it)
        raise TypeError(
            f"expected a SimConfig (SimConfig(...), or build_config(mapping) for one line per "
            f"error) or a built Scenario, got {type(config).__name__}"
        )
    profile = override_profile(load_profile(config.hardware), config.hardware_set,
                               f"hardware_set (profile {config.hardware})")  # fmt: skip
    runtime = override_profile(load_runtime(config.runtime), config.runtime_set,
                               f"runtime_set (runtime {config.runtime})")  # fmt: skip
    runtime, host_costs = for_host(runtime, profile.hosts[0])  # the host whose DRAM holds experts
    trace = load_trace(config.trace)
    model = trace_model(config.model, trace, f"trace {config.trace}").with_dtypes(
        config.expert_dtype, config.dense_dtype, config.kv_dtype
    )
    _check_shapes(model, trace)
    check_requests(config.workload.requests, trace, config.trace, "workload.requests")
    sizes = expert_sizes(config, model, trace)
    _check_chunks(config.timing.chunk_bytes, sizes.largest)
    gpu_nodes = _resolve_gpus(config, profile)
    _check_gpus(config, gpu_nodes)
    bare = [_bare_budget(config, model, runtime, gpu, g, sizes) for g, gpu in enumerate(gpu_nodes)]
    pools = _kv_pools(config, model, gpu_nodes, bare, sizes)
    per_token = kv_bytes_per_token(model)
    pool_tokens = [None if pool is None else pool // per_token for pool in pools]
    gpus = len(gpu_nodes)
    # the closed-loop tables, and with an online schedule those of zero time (module docstring)
    fixed = [build_passes(trace, config.workload, (g, gpus), pool_tokens[g]) for g in range(gpus)]
    if fixed[0].num_passes == 0:
        raise SpecmdError(f"trace {config.trace}: expected at least one pass, got none")
    tables, whole = fixed, fixed[0]
    online = is_online(config)
    if gpus > 1 and not online:
        whole = build_passes(trace, config.workload, kv_pool_tokens=pool_tokens[0])
    if online:
        count = sum(int(np.unique(p.row_request).size) for p in fixed)
        arrivals = draw_arrivals(config, trace, count, new_rng(config))
        assert arrivals is not None  # (online: Poisson or recorded arrivals)
        tables = [
            zero_time_passes(trace, config.workload, arrivals[g::gpus], (g, gpus), pool_tokens[g])
            for g in range(gpus)
        ]
        whole = tables[0]
        if gpus > 1:
            whole = zero_time_passes(trace, config.workload, arrivals, (0, 1), pool_tokens[0])
    passes = whole
    training = build_training(config, trace, passes)
    demand = build_demand(trace, passes)
    parity = runtime.memory_parity.value
    if parity and len(gpu_nodes) > 1:
        raise SpecmdError(
            f"parallel.gpus: expected 1 GPU with runtime {runtime.id}, which keeps memory "
            f"parity (the host holds only what one GPU's cache does not), got {len(gpu_nodes)}"
        )
    shards: tuple[tuple[Passes, DemandSets], ...]
    if gpus == 1:
        shards = ((passes, demand),)
    else:
        shards = tuple((p, build_demand(trace, p)) for p in tables)
    # (the KV cache's peak as the closed loop fills the batch: an online schedule forms its
    # passes during the run)
    budgets = tuple(_budget(config, model, bare[g], fixed[g], pools[g]) for g in range(gpus))
    # a slot count is of the largest expert (mixed precision), as capacity_slots reports it
    capacity = config.cache.capacity_bytes(
        sizes.largest, sizes.routed_bytes, min(b.available for b in budgets)
    )
    placement = place(config, profile, sizes, capacity if parity else None)
    if check_cache:
        _check_capacities(config, profile, budgets, placement, capacity)
        check_dram_cache(config, placement, capacity, demand, gpus)
    return Scenario(
        config, profile, runtime, model, trace, passes, demand, capacity, placement, gpu_nodes,
        shards, budgets, host_costs, training, tuple(pool_tokens),
    )  # fmt: skip


def with_capacity(scenario: Scenario, capacity: str | int) -> Scenario:
    """``scenario`` with another cache capacity, resolved and checked as :func:`build_scenario`
    does (without loading its inputs again, unless the runtime's memory parity makes the
    placement depend on the capacity)."""
    config = scenario.config
    try:
        cache = CacheConfig.model_validate({**config.cache.model_dump(), "capacity": capacity})
    except ValidationError as exc:
        raise from_validation_error("cache", exc) from None
    config = config.model_copy(update={"cache": cache})
    if scenario.runtime.memory_parity.value or config.workload.kv_cache in ("wait", "paged"):
        return build_scenario(config)  # the placement, or the passes, follow the capacity
    placement = scenario.placement
    budget = min(b.available for b in scenario.budgets)
    cap = cache.capacity_bytes(placement.largest, placement.routed_bytes, budget)
    _check_capacities(config, scenario.profile, scenario.budgets, placement, cap)
    check_dram_cache(config, placement, cap, scenario.demand, len(scenario.gpus))
    return dataclasses.replace(scenario, config=config, capacity_bytes=cap)


MAX_CHUNKS_PER_EXPERT = 256
"""Chunks of one expert copy (``timing.chunk_bytes``): each is one DMA copy and a few timing
events, so a demand fetch already waits at most 1/256 of an expert copy behind a prefetch; more
chunks only cost time (OLMoE at 64 KiB chunks, 192 per expert: 45x slower per request)."""


def _check_chunks(chunk_bytes: int | None, largest: int) -> None:
    if chunk_bytes is not None and -(-largest // chunk_bytes) > MAX_CHUNKS_PER_EXPERT:
        floor = -(-largest // MAX_CHUNKS_PER_EXPERT)
        raise SpecmdError(
            f"timing.chunk_bytes: expected at least {floor:,} bytes (at most "
            f"{MAX_CHUNKS_PER_EXPERT} chunks per expert of {largest:,} bytes), got {chunk_bytes:,}"
        )


def trace_model(model: str | None, trace: Trace, source: str) -> ModelSpec:
    """The run's model: ``model`` if given, else the spec a recorded trace carries in
    ``meta.model_spec``, else the catalog entry (or model file) the trace names; ``source``
    names the trace in errors of the model it names."""
    if model is not None:
        return load_model(model)
    embedded = trace.meta.get("model_spec")
    if embedded is None:
        return load_model(trace.model, what=f"{source}: meta.model")
    try:
        return ModelSpec.model_validate(embedded)
    except ValidationError as exc:
        raise from_validation_error(f"{source}: meta.model_spec", exc) from None


def _budget(
    config: SimConfig, model: ModelSpec, bare: MemoryBudget, passes: Passes, pool: int | None
) -> MemoryBudget:
    """A GPU's HBM and what it holds besides the expert cache (:mod:`.budget`): its ``bare``
    budget (:func:`_bare_budget`) with the KV cache of its ``passes``; ``pool``: the KV pool of
    ``kv_cache: wait`` (:func:`_kv_pools`)."""
    mode = config.workload.kv_cache
    lengths = np.unique(passes.row_request, return_counts=True)[1]  # each request's tokens
    context = int(lengths.max()) if lengths.size else 0
    batch = min(config.workload.batch_size, lengths.size)
    per_token = kv_bytes_per_token(model)
    kv = context * batch * per_token
    if mode != "reserved":  # the peak of the KV cache as it grows, in tokens
        context = int(passes.kv_resident.max()) if passes.num_passes else 0
        kv = context * per_token
    if pool is not None:  # wait: the pool, of which ``context`` tokens were used at most
        kv = pool
    return dataclasses.replace(bare, kv_cache=kv, kv_context=context, kv_batch=batch)


def _bare_budget(
    config: SimConfig,
    model: ModelSpec,
    runtime: RuntimeProfile,
    gpu: GPUNode,
    g: int,
    sizes: ExpertSizes,
) -> MemoryBudget:
    """GPU ``g``'s budget without its KV cache, which the pass table decides."""
    shard = 0
    if config.parallel.mode == "expert-sharded":
        shard = int(sizes.nbytes[shard_mask(sizes, g, config.parallel.count)].sum())
    return MemoryBudget(
        gpu=gpu.id,
        hbm=int(gpu.hbm_bytes.value),
        weights=model.non_expert_bytes,
        kv_cache=0,
        kv_context=0,
        kv_batch=0,
        workspace=int(runtime.workspace_bytes.value),
        shard=shard,
        kv_mode=config.workload.kv_cache,
    )


def kv_bytes_per_token(model: ModelSpec) -> int:
    """KV cache bytes of one token, over all layers."""
    return model.kv_bytes_per_token * model.num_layers


def _kv_pools(
    config: SimConfig,
    model: ModelSpec,
    gpus: tuple[GPUNode, ...],
    bare: list[MemoryBudget],
    sizes: ExpertSizes,
) -> list[int | None]:
    """Per GPU, the bytes of KV cache requests may hold at once with ``kv_cache: wait`` or
    ``paged``: what HBM leaves beside the expert cache's ``cache.capacity`` in its ``bare``
    budget (None for every GPU otherwise)."""
    mode = config.workload.kv_cache
    if mode not in ("wait", "paged"):
        return [None] * len(gpus)
    if config.cache.capacity == "auto":
        raise SpecmdError(
            f"cache.capacity: expected a size with workload.kv_cache: {mode} (the KV cache gets "
            "what the expert cache leaves), got 'auto', which leaves nothing"
        )
    per_token = kv_bytes_per_token(model)
    pools: list[int | None] = []
    for gpu, budget in zip(gpus, bare, strict=True):
        left = budget.without_kv
        capacity = config.cache.capacity_bytes(sizes.largest, sizes.routed_bytes, left)
        if left - capacity < per_token:
            raise SpecmdError(
                f"workload.kv_cache: {mode}: expected cache.capacity {config.cache.capacity!r} "
                f"({format_bytes(capacity)}) to leave room for a KV cache on {gpu.id} "
                f"({format_bytes(left)} beside weights and workspace), got "
                f"{format_bytes(left - capacity)}; lower cache.capacity"
            )
        pools.append(left - capacity)
    return pools


def _check_shapes(model: ModelSpec, trace: Trace) -> None:
    for what, want, got in (
        ("num_layers", model.moe_layers, trace.num_layers),
        ("num_experts", model.num_experts, trace.num_experts),
    ):
        if want != got:
            raise SpecmdError(
                f"trace: {what}: expected {want} for model {model.id}, got {got} "
                f"(the trace was recorded from {trace.model!r}; set --model to match)"
            )
    if trace.top_k > model.num_experts:
        raise SpecmdError(
            f"trace: top_k: expected at most {model.num_experts} experts per token, "
            f"got {trace.top_k}"
        )


def _check_capacities(
    config: SimConfig,
    profile: HardwareProfile,
    budgets: tuple[MemoryBudget, ...],
    placement: Placement,
    cap: int,
) -> None:
    """:func:`_check_capacity` on every GPU (its budget)."""
    for budget in budgets:
        _check_capacity(config, profile, budget, placement, cap)


def _check_capacity(
    config: SimConfig,
    profile: HardwareProfile,
    budget: MemoryBudget,
    placement: Placement,
    cap: int,
) -> None:
    eb = placement.largest
    slots = cap // eb
    desc = f"{config.cache.capacity!r} = {slots} expert slots ({format_bytes(cap)})"
    if slots < 1:
        raise SpecmdError(
            f"cache.capacity: expected room for at least one expert ({format_bytes(eb)}) in "
            f"the GPU memory budget ({budget.describe()} on {profile.id}, runtime "
            f"{config.runtime}), got {desc}"
        )
    if cap > budget.available:
        raise SpecmdError(
            f"cache.capacity: expected at most what the GPU memory budget leaves "
            f"({budget.describe()} on {profile.id}, runtime {config.runtime}), got {desc}; "
            f"use --cache auto, a smaller cache, a lower-precision model or a larger GPU"
        )
    if budget.kv_mode == "evict":  # the capacity at the KV cache's peak
        low = min(cap, budget.available - budget.kv_cache)
        if low // eb < 1:
            raise SpecmdError(
                f"workload.kv_cache: evict: expected the expert cache to keep room for at least "
                f"one expert ({format_bytes(eb)}) when the KV cache peaks ({budget.describe()} "
                f"on {profile.id}), got {format_bytes(max(low, 0))}; lower "
                f"workload.batch_size or use a larger GPU"
            )
    # a layer's demand set may be larger than the cache (a whole-prompt prefill's): what the
    # pinned set leaves no room for is streamed past the cache (docs/design.md, *Overflow*)


def _resolve_gpus(config: SimConfig, profile: HardwareProfile) -> tuple[GPUNode, ...]:
    wanted, have = config.parallel.gpus, profile.gpus
    if isinstance(wanted, int):
        if wanted > len(have):
            raise SpecmdError(
                f"parallel.gpus: expected at most the {len(have)} GPU(s) of hardware profile "
                f"{profile.id}, got {wanted}"
            )
        return tuple(have[:wanted])
    by_id = {g.id: g for g in have}
    unknown = [w for w in wanted if w not in by_id]
    if unknown:
        raise SpecmdError(
            f"parallel.gpus: expected GPU node ids of hardware profile {profile.id} "
            f"({', '.join(by_id)}), got {unknown}"
        )
    return tuple(by_id[w] for w in wanted)


def _check_gpus(config: SimConfig, gpus: tuple[GPUNode, ...]) -> None:
    count = len(gpus)
    if count > 1 and config.belady_gap:
        raise SpecmdError(
            f"belady_gap: expected false with more than one GPU (the offline optimum is "
            f"computed per cache by the replay engine, which has one GPU), got true with "
            f"{count} GPUs"
        )
    if config.parallel.mode != "expert-sharded":
        return
    if count < 2:
        raise SpecmdError(
            f"parallel.gpus: expected at least 2 GPUs with mode expert-sharded, got {count}"
        )


def new_rng(config: SimConfig) -> np.random.Generator:
    """The run's one random generator."""
    return np.random.default_rng(config.seed)

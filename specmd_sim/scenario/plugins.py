"""Build the objects one run needs (shared by both engines): per GPU a context, a cache and the
plug-ins; and the request arrival times.

Each plug-in gets the GPU's online view of the run (:class:`RunContext`); an offline one (a
bound, an oracle, a profile of the run's own trace) gets that view plus the GPU's access
sequence (:class:`OfflineContext`). The context's history follows the cache's position.
With ``memory.dram_cache`` a GPU also gets the DRAM level (:mod:`.dram`): a second cache and
its plug-ins, built the same way.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from specmd_sim.cache import ExpertCache
from specmd_sim.cache.states import State
from specmd_sim.errors import SpecmdError, short_repr
from specmd_sim.hardware import TransferPath, transfer_path
from specmd_sim.models import CostModel
from specmd_sim.policies.context import (
    AccessSequence,
    PassTable,
    RecordedScores,
    RunContext,
    RunHistory,
    RunViews,
)
from specmd_sim.policies.eviction.base import EvictionPolicy
from specmd_sim.policies.miss.base import MissAction, MissDecision, MissHandler
from specmd_sim.policies.plugin import built_in, plugin_name
from specmd_sim.policies.predictors.base import Predictor, ScoreSource
from specmd_sim.policies.prefetch.base import PrefetchPolicy
from specmd_sim.policies.registry import EVICTION, MISS, PREDICTORS, PREFETCH
from specmd_sim.scenario.budget import capacity_schedule
from specmd_sim.scenario.build import Scenario, kv_bytes_per_token, new_rng
from specmd_sim.scenario.dram import DramObjects, needs_sequence, stage_path
from specmd_sim.scenario.placement import TIER_NVME, shard_mask
from specmd_sim.scenario.schedule import (
    Arrivals,
    OnlineSchedule,
    Requests,
    Router,
    draw_arrivals,
    is_routed,
)


@dataclass(eq=False)
class RunObjects:
    """One GPU's share of a run: its scenario (its requests' passes), context, cache, plug-ins."""

    scenario: Scenario
    ctx: RunContext  # the online view (offline plug-ins hold an OfflineContext of it)
    cache: ExpertCache
    eviction: EvictionPolicy[Any]
    prefetch: PrefetchPolicy[Any]
    predictor: ScoreSource | None  # None when the prefetcher asks for no scores
    miss: MissHandler[Any]
    arrivals: Arrivals | None  # its requests' arrival times by id; None = closed loop
    dram: DramObjects | None = None  # the DRAM level (memory.dram_cache); None = a static tier
    # the cache's capacity in each of its passes (workload.kv_cache: evict); None = fixed
    capacities: np.ndarray | None = None
    # its passes formed as the timing engine runs (workload.schedule: online); None = fixed
    schedule: OnlineSchedule | None = None


def build_run(
    scenario: Scenario,
    warm: list[int] | None = None,
    dram_sequence: AccessSequence | None = None,
) -> RunObjects:
    """The objects of a one-GPU run; ``warm`` adds experts to place in the cache first;
    ``dram_sequence``: the DRAM-level access sequence an offline DRAM eviction policy reads."""
    if len(scenario.gpus) != 1:
        raise SpecmdError(
            f"parallel.gpus: expected 1 GPU for the replay engine (it has no time, so no "
            f"contention between GPUs), got {len(scenario.gpus)}; use simulate"
        )
    return build_runs(scenario, warm, dram_sequence)[0]


def build_runs(
    scenario: Scenario,
    warm: list[int] | None = None,
    dram_sequence: AccessSequence | None = None,
    online: bool = False,
    room: int = 1,
) -> list[RunObjects]:
    """One :class:`RunObjects` per GPU of ``config.parallel``; ``online``: each GPU's passes
    are formed as the timing engine runs (:func:`~specmd_sim.scenario.schedule.is_online`),
    from an :class:`~specmd_sim.scenario.schedule.OnlineSchedule` (with ``room`` for as many
    times the trace's rows), not the scenario's.

    Requests go to the GPUs round robin, or as the timing engine runs through a
    :class:`~specmd_sim.scenario.schedule.Router` (``parallel.router: least-loaded``; a
    scenario from :func:`~specmd_sim.engine.sim.run.formed_schedule` keeps the routing of its
    run).

    Randomness: the run's one generator first draws the Poisson arrivals (so both engines and
    every plug-in see the same stream); with one GPU the plug-ins then draw from it, with
    several each GPU's plug-ins draw from their own child generator (``Generator.spawn``).
    """
    config = scenario.config
    _check_warm(warm, scenario.trace.num_layers, scenario.trace.num_experts)
    gpus = len(scenario.gpus)
    rng = new_rng(config)
    arrivals = None
    if config.workload.arrivals != "closed-loop":  # (np.unique loads numpy.ma: not otherwise)
        requests = sum(np.unique(p.row_request).size for p, _ in scenario.shards)
        arrivals = draw_arrivals(config, scenario.trace, requests, rng)
    if online:
        assert arrivals is not None, "an online schedule has arrivals"
        _check_online(scenario)
    router = None
    if is_routed(config) and scenario.routed is None:
        if not online:
            raise SpecmdError(
                "parallel.router: expected round-robin with workload.schedule: fixed (a table "
                "formed before the run cannot know which GPU will be least loaded when a "
                "request arrives), got least-loaded; use workload.schedule: online"
            )
        assert arrivals is not None
        router = Router(Requests.of(scenario.trace, config.workload, (0, 1)), arrivals)
    rngs = [rng] if gpus == 1 else rng.spawn(gpus)
    runs = []
    for g, (passes, demand) in enumerate(scenario.shards):
        book, schedule = None, None
        if online:
            assert arrivals is not None
            schedule = OnlineSchedule(scenario.trace, config.workload, arrivals[g::gpus],
                                      (g, gpus), scenario.kv_pools[g], room, router)  # fmt: skip
            passes, demand = schedule.passes, schedule.demand
            book = Arrivals(schedule.requests.ids, schedule.arrivals)
        elif scenario.routed is not None:  # (a formed schedule's, fixed)
            book = Arrivals(*scenario.routed[g])
        elif arrivals is not None:
            book = Arrivals.of_share(scenario.trace, config.workload, (g, gpus), arrivals[g::gpus])
        sub = dataclasses.replace(scenario, passes=passes, demand=demand)
        runs.append(_build_gpu(sub, g, rngs[g], book, warm, dram_sequence, schedule))
    return runs


def _check_online(scenario: Scenario) -> None:
    """An online schedule's passes do not exist before the run: refuse, in one line each, what
    needs them all in advance (plug-ins that read the run's accesses beyond the pass running,
    the DRAM level's offline policies, the Belady gap)."""
    config = scenario.config
    why = "which an online schedule forms during the run (workload.schedule: online)"
    fix = "use workload.schedule: fixed (the closed-loop table) or workload.arrivals: closed-loop"
    if is_routed(config):  # (a fixed table cannot route by load)
        fix = (
            "use parallel.router: round-robin with workload.schedule: fixed, or run the "
            "plug-in on the schedule a first run formed (specmd_sim.formed_schedule)"
        )
    for field, registry, plugin in (
        ("eviction", EVICTION, config.eviction),
        ("prefetch", PREFETCH, config.prefetch),
        ("predictor", PREDICTORS, config.predictor),
        ("miss", MISS, config.miss),
    ):
        cls = registry.get(plugin.kind)
        if cls.offline and not cls.offline_within_pass:
            raise SpecmdError(
                f"{field}.kind: expected a plug-in that does not read the run's accesses in "
                f"advance, {why}, got {plugin.kind!r} (offline); {fix}"
            )
    if config.belady_gap:
        raise SpecmdError(
            f"belady_gap: expected false, {why}: the bound is of a fixed access sequence, got "
            f"true; {fix}"
        )
    dram = config.memory.dram_cache
    if dram is not None and needs_sequence(config):
        raise SpecmdError(
            f"memory.dram_cache.eviction: expected a policy that does not read the run's "
            f"accesses in advance, {why}, got {dram.eviction.kind!r}; {fix}"
        )


def expert_sources(scenario: Scenario, g: int) -> tuple[tuple[TransferPath, ...], np.ndarray]:
    """The paths experts reach GPU ``g`` by, as the runtime copies over them, and each key's
    path index: 0 host DRAM, then the NVMe drive, then (expert-sharded) each peer GPU's HBM;
    -1 = GPU ``g``'s own shard."""
    profile, placement, gpus = scenario.profile, scenario.placement, scenario.gpus
    rt = scenario.runtime
    gpu_id = gpus[g].id
    paths = [scenario.host_links[gpu_id]]
    source = np.zeros(placement.nbytes.size, np.int32)
    if placement.nvme is not None and not placement.dram_cache_bytes:  # else all via DRAM
        paths.append(transfer_path(profile, placement.nvme.id, gpu_id))
        source[placement.tier == TIER_NVME] = len(paths) - 1
    if scenario.config.parallel.mode == "expert-sharded":
        for peer in range(len(gpus)):
            mask = shard_mask(placement, peer, len(gpus))
            if peer == g:
                source[mask] = -1
                continue
            paths.append(transfer_path(profile, gpus[peer].id, gpu_id))
            source[mask] = len(paths) - 1
    copied = tuple(p.as_copied(rt.h2d_tensors_per_expert, rt.h2d_efficiency) for p in paths)
    return copied, source


def _check_warm(warm: list[int] | None, layers: int, experts: int) -> None:
    """``warm`` must be expert keys of the model (``layer * experts + expert``)."""
    keys = layers * experts
    bad = [k for k in warm or [] if not (isinstance(k, int | np.integer) and 0 <= k < keys)]
    if bad:
        raise SpecmdError(
            f"warm: expected expert keys from 0 to {keys - 1} (layer x {experts} + expert), "
            f"got {short_repr(bad)}"
        )


def _build_gpu(
    scenario: Scenario,
    g: int,
    rng: np.random.Generator,
    arrivals: Arrivals | None,
    warm: list[int] | None,
    dram_sequence: AccessSequence | None,
    schedule: OnlineSchedule | None = None,
) -> RunObjects:
    config = scenario.config
    views = run_views(scenario, g, rng)
    ctx = views.online
    eviction = EVICTION.make(config.eviction, views)
    cache = ExpertCache(
        ctx.num_layers, ctx.num_experts, ctx.nbytes.tolist(), scenario.capacity_bytes, eviction
    )
    cache.position_listeners.append(ctx.history.advance)
    if scenario.runtime.memory_parity.value:
        cache.write_back = _copied_back  # the timing engine times the copies
    eviction.attach(cache)
    cache.add_home(np.flatnonzero(ctx.source < 0).tolist())
    cache.preload(eviction.initial_contents() + list(warm or []))
    prefetch = PREFETCH.make(config.prefetch, views)
    if not built_in(type(prefetch)):
        _check_plans(prefetch)
    predictor: ScoreSource | None = None
    if prefetch.lookahead > 0 and prefetch.uses_predictor:
        predictor = _Tapped(make_predictor(scenario, views), eviction)
    miss = MISS.make(config.miss, views)
    if not built_in(type(miss)):
        _check_decisions(miss, ctx.num_experts)
    dram = None
    if config.memory.dram_cache is not None:
        dram = _build_dram(scenario, ctx, dram_sequence)
    capacities = None
    if config.workload.kv_cache == "evict":
        capacities = _capacities(scenario, g, schedule)
    return RunObjects(
        scenario, ctx, cache, eviction, prefetch, predictor, miss, arrivals, dram, capacities,
        schedule,
    )  # fmt: skip


def _capacities(scenario: Scenario, g: int, schedule: OnlineSchedule | None) -> np.ndarray:
    """The expert cache's capacity in each pass of GPU ``g`` as the KV cache grows (``kv_cache:
    evict``); with an online schedule, filled in as its passes are formed."""
    budget, per_token = scenario.budgets[g], kv_bytes_per_token(scenario.model)
    if schedule is None:
        return capacity_schedule(scenario.capacity_bytes, budget, scenario.passes.kv_resident,
                                 per_token)  # fmt: skip
    out = np.zeros(scenario.passes.request.size, np.int64)
    least = int(scenario.placement.largest)

    def formed(lo: int, hi: int) -> None:
        kv = schedule.passes.kv_resident[lo:hi]
        out[lo:hi] = capacity_schedule(scenario.capacity_bytes, budget, kv, per_token)
        low = int(out[lo:hi].min())
        if low < least:
            p = lo + int(np.argmin(out[lo:hi]))
            raise SpecmdError(
                f"workload.kv_cache: evict: expected the expert cache to keep room for at least "
                f"one expert ({least:,} bytes) beside the KV cache, got {max(low, 0):,} bytes at "
                f"pass {p} ({int(kv[p - lo]):,} KV tokens); lower workload.batch_size or use a "
                f"larger GPU"
            )

    schedule.on_formed.append(formed)
    return out


def _build_dram(
    scenario: Scenario, ctx: RunContext, sequence: AccessSequence | None
) -> DramObjects:
    """The DRAM level of the GPU whose context is ``ctx`` (:mod:`.dram` says what its plug-ins
    see); ``sequence``: its access sequence, required when :func:`needs_sequence`."""
    config, placement = scenario.config, scenario.placement
    dram = config.memory.dram_cache
    drive = placement.nvme
    assert dram is not None and drive is not None  # the placement put every expert on NVMe
    stage = stage_path(scenario.profile, drive)
    dram_ctx = dataclasses.replace(
        ctx,
        slots=placement.dram_cache_bytes // placement.largest,
        rng=ctx.rng.spawn(1)[0],  # the parent's stream, and so the GPU level, is unchanged
        paths=(stage,),
        source=np.zeros(ctx.nbytes.size, np.int32),
    )
    routed = RunViews.of(dram_ctx, scenario.demand)
    if sequence is None:
        if needs_sequence(config):
            raise RuntimeError("an offline DRAM eviction policy needs its access sequence")
        sequence = scenario.demand
    eviction = EVICTION.make(dram.eviction, RunViews.of(dram_ctx, sequence))
    cache = ExpertCache(
        ctx.num_layers, ctx.num_experts, ctx.nbytes.tolist(), placement.dram_cache_bytes, eviction
    )
    eviction.attach(cache)
    cache.preload(eviction.initial_contents())
    room = placement.dram_cache_bytes - cache.used_bytes
    fill = np.cumsum(placement.nbytes[list(placement.dram_warm)]) <= room
    cache.preload(np.array(placement.dram_warm, np.int64)[fill].tolist())
    prefetch = PREFETCH.make(dram.prefetch, routed)
    predictor: ScoreSource | None = None
    if prefetch.lookahead > 0 and prefetch.uses_predictor:
        inner = (
            make_predictor(scenario, routed)  # the run's predictor, fitted as the run's is
            if dram.predictor is None
            else PREDICTORS.make(dram.predictor, routed)
        )
        predictor = _Tapped(inner, eviction)
    return DramObjects(cache, eviction, prefetch, predictor, stage, drive)


def make_predictor(scenario: Scenario, views: RunViews) -> Predictor[Any]:
    """The run's predictor, fitted on its training routing if it has ``fit_on``."""
    predictor = PREDICTORS.make(scenario.config.predictor, views)
    if scenario.training is not None:
        predictor.fit(scenario.training)
    return predictor


def _copied_back(key: int) -> None:
    """Memory parity without time: the cache counts the bytes an evicted expert takes back."""


def run_views(scenario: Scenario, g: int, rng: np.random.Generator) -> RunViews:
    """GPU ``g``'s online view of the run, and that view with its access sequence."""
    trace, passes, demand = scenario.trace, scenario.passes, scenario.demand
    placement = scenario.placement
    table = PassTable(
        request=passes.request,
        phase=passes.phase,
        tokens=passes.pass_tokens,
        context_end=passes.context_end,
        attended=passes.attended,
        kv_tokens=passes.kv_tokens,
    )
    recorded = None
    if trace.pred_scores is not None:
        recorded = RecordedScores(trace.pred_scores, passes.rows, passes.start)
    paths, source = expert_sources(scenario, g)
    ctx = RunContext(
        num_layers=trace.num_layers,
        num_experts=trace.num_experts,
        top_k=trace.top_k,
        slots=scenario.slots,
        rng=rng,
        model=scenario.model,
        profile=scenario.profile,
        cost=CostModel(scenario.model, scenario.gpus[g], scenario.runtime),
        nbytes=placement.nbytes,
        dtype=placement.dtype,
        paths=paths,
        source=source,
        history=RunHistory(demand, table, recorded),
    )
    return RunViews.of(ctx, demand)


def _check_plans(prefetch: PrefetchPolicy[Any]) -> None:
    """Check each plan of a user's prefetcher (its ``plan`` wrapped on the instance): expert
    keys of the layers it may prefetch for (``targets``), where a stray key (another layer's, a
    negative one, a float) was fetched, blamed on the eviction policy, or read from the end of
    the cache's arrays."""
    plan, experts = prefetch.plan, prefetch.num_experts

    def checked(p: int, layer: int, predictor: ScoreSource | None, cache: ExpertCache) -> list[int]:
        keys = plan(p, layer, predictor, cache)
        targets = prefetch.targets(layer)
        lo, hi = targets.start * experts, targets.stop * experts
        if not isinstance(keys, list | tuple | np.ndarray) or any(
            not isinstance(k, int | np.integer) or not lo <= k < hi for k in keys
        ):
            raise SpecmdError(
                f"prefetch {plugin_name(type(prefetch))}: plan at pass {p}, layer {layer}: "
                f"expected a list of expert keys of layers {targets.start} to "
                f"{targets.stop - 1} ({lo} to {hi - 1}), got {short_repr(keys)}"
            )
        return [int(k) for k in keys]

    prefetch.plan = checked  # type: ignore[method-assign,assignment]  # (where the engines call it)


def _check_decisions(miss: MissHandler[Any], experts: int) -> None:
    """Check each decision of a user's miss handler (its ``decide`` wrapped on the instance): a
    :class:`~specmd_sim.policies.miss.base.MissDecision`, whose substitute is a resident key of
    the missing expert's layer that the layer does not run already. Else None or a string gave
    a traceback in the layer step, and a stray substitute silently ran an expert the cache did
    not hold, or another layer's."""
    decide = miss.decide

    def checked(p: int, layer: int, key: int, cache: ExpertCache, taken: set[int]) -> MissDecision:
        decision = decide(p, layer, key, cache, taken)
        lo, hi = layer * experts, (layer + 1) * experts
        if not isinstance(decision, MissDecision) or not isinstance(decision.action, MissAction):
            wrong = f"got {short_repr(decision)}"
        elif decision.action is not MissAction.SUBSTITUTE:
            return decision
        elif not isinstance(decision.by, int | np.integer):
            wrong = f"got a substitute that is not a key: {short_repr(decision.by)}"
        elif not lo <= decision.by < hi:
            wrong = f"got a substitute of another layer: {decision.by}"
        elif cache.state[decision.by] != State.RESIDENT:
            wrong = f"got a substitute that is not resident: {decision.by}"
        elif decision.by in taken:
            wrong = f"got a substitute the layer runs already: {decision.by}"
        else:
            return decision
        raise SpecmdError(
            f"miss {plugin_name(type(miss))}: decide at pass {p}, layer {layer}, key {key}: "
            f"expected FETCH, DROP, CPU or substitute(k) of a resident key of layer {layer} "
            f"({lo} to {hi - 1}) not in taken, {wrong}"
        )

    miss.decide = checked  # type: ignore[method-assign,assignment]  # (where the layer step calls it)


class _Tapped:
    """A predictor whose every score vector is also shown to the eviction policy."""

    def __init__(self, inner: Predictor[Any], eviction: EvictionPolicy[Any]) -> None:
        self.inner = inner
        self.eviction = eviction
        self.kind = inner.kind

    def scores(self, pass_index: int, layer: int, target: int) -> np.ndarray | None:
        out = self.inner.scores(pass_index, layer, target)
        if out is not None and not built_in(type(self.inner)):
            out = self._checked(out, pass_index, layer, target)
        if out is not None:
            self.eviction.on_scores(target, out)
        return out

    def _checked(self, out: object, p: int, layer: int, target: int) -> np.ndarray:
        """A user's predictor's scores: one number per expert of the target layer."""
        experts = self.eviction.ctx.num_experts
        try:
            scores = np.asarray(out, dtype=np.float64)
        except (TypeError, ValueError):
            scores = np.zeros(0)
        if scores.shape != (experts,):
            raise SpecmdError(
                f"predictor {plugin_name(type(self.inner))}: scores at pass {p}, layer {layer} "
                f"for layer {target}: expected {experts} numbers (one per expert), got "
                f"{short_repr(out)}"
            )
        return scores

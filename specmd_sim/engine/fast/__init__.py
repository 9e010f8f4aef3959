"""The replay engine's compiled path: the built-in policies' decisions over arrays.

:func:`replay_compiled` runs one GPU's replay with :mod:`.kernel` (the layer step over
:mod:`.cache`, the compiled cache and policies) and :mod:`.plans` (the prefetch plans, drawn in
bulk) instead of driving :class:`~specmd_sim.engine.layer.LayerStep`; its counters equal the
Python engine's exactly. :func:`compiled_unsupported` says why a run is not covered (a policy
without a compiled form, another plug-in, a miss handler that does not always fetch, a home
shard): those runs
take the Python path, which stays the specification.
"""

from __future__ import annotations

from types import ModuleType

import numpy as np

from specmd_sim.cache import CacheStats, ExpertCache
from specmd_sim.engine.common import Progress, report_progress
from specmd_sim.engine.fast import layout as L
from specmd_sim.engine.fast.aot import kernels
from specmd_sim.engine.fast.plans import BulkPlans, plans_unsupported
from specmd_sim.policies.eviction.base import CompiledForm, EvictionPolicy
from specmd_sim.scenario import RunObjects

__all__ = [
    "compiled_form",
    "compiled_unsupported",
    "kernels",
    "plans_unsupported",
    "replay_compiled",
]

_STAMP_SPAN = 1 << 36  # count priorities are count * span + stamp: stamps stay below it
_MAX_ACCESSES = 1 << 26  # ... and counts below 2**26, so the priority fits an int64
# passes are run, and their plans drawn, in blocks of about this many accesses, and of at most
# this many predicted scores (a prediction scores every expert of its layer)
_BLOCK_ACCESSES, _BLOCK_SCORES = 1 << 20, 1 << 22


def compiled_form(policy: EvictionPolicy) -> CompiledForm | None:
    """The policy's compiled form (:meth:`EvictionPolicy.compiled_form
    <specmd_sim.policies.eviction.base.EvictionPolicy.compiled_form>`), where its own class
    declares one (a subclass inherits none: its overrides would not run)."""
    if "compiled_form" not in type(policy).__dict__:
        return None
    return policy.compiled_form()


def _form_unsupported(policy: EvictionPolicy) -> str | None:
    form = compiled_form(policy)
    if form is None:
        if policy.compiled_form() is None:
            return f"eviction {policy.kind!r} has no compiled form"
        return (f"eviction {policy.kind!r} ({type(policy).__name__}, a subclass) declares no "
                "compiled form of its own")  # fmt: skip
    for field, names in (("recency", L.RECENCY), ("victim", L.VICTIM), ("priority", L.PRIORITY)):
        value = getattr(form, field)
        if value not in names:
            return f"eviction {policy.kind!r}'s compiled {field} {value!r} is not the engines'"
    unknown = sorted(set(form.options) - set(L.OPTIONS))
    if unknown:
        return f"eviction {policy.kind!r}'s compiled option {unknown[0]!r} is not the engines'"
    return None


def compiled_unsupported(run: RunObjects, home: bool = False) -> str | None:
    """None when :func:`replay_compiled` covers ``run``, else why not (a phrase); with
    ``home``, when the timing engine's core (:mod:`.timed`, which also covers the GPU's own
    shard) does. A part of the one coverage check (:mod:`specmd_sim.engine.coverage`)."""
    if run.dram is not None:
        return "a DRAM cache (memory.dram_cache)"
    why = _form_unsupported(run.eviction)
    if why is not None:
        return why
    if not run.miss.always_fetches:
        return f"miss {run.miss.kind!r}"
    cache = run.cache
    if any(cache.home) and not home:
        return "experts in the GPU's own shard"
    if run.capacities is not None:
        return "a capacity that follows the KV cache"
    if type(cache) is not ExpertCache or cache.listeners or cache.occupancy_hook is not None:
        return "a cache observed during the run"  # (a subclass's overrides would not run)
    form = compiled_form(run.eviction)
    if form and form.priority == "count" and run.scenario.demand.num_accesses >= _MAX_ACCESSES:
        return f"a count priority ({run.eviction.kind!r}) over {_MAX_ACCESSES} accesses or more"
    return plans_unsupported(run)


def replay_compiled(
    run: RunObjects,
    warm: list[int] | None = None,
    progress: Progress | None = None,
    ahead_of_time: bool = True,
) -> CacheStats:
    """Replay ``run`` (covered: :func:`compiled_unsupported` is None) and return its counters.

    ``warm`` is what :func:`~specmd_sim.scenario.build_run` was given: the cache starts with the
    policy's initial contents and then these, placed in that order, as the run's cache was
    built (which is left as it is). Raises RuntimeError where the Python engine would: a pinned
    demand set for which no space can be made. ``ahead_of_time``: as :func:`kernels`.
    """
    K = kernels(ahead_of_time)
    scenario = run.scenario
    demand, layers = scenario.demand, scenario.trace.num_layers
    offsets = np.ascontiguousarray(demand.offsets, dtype=np.int64)
    S, after = kernel_state(run, warm, K)
    total = scenario.passes.num_passes
    plans = BulkPlans(run, ahead_of_time) if run.prefetch.lookahead > 0 else None
    per_pass = max(1, demand.num_accesses // max(total, 1))
    scores_per_pass = layers * run.prefetch.lookahead * scenario.trace.num_experts
    block = max(1, min(_BLOCK_ACCESSES // per_pass, _BLOCK_SCORES // max(1, scores_per_pass)))
    empty = np.zeros(0, np.int64)
    sc = S[L.R_SC]
    classic = (plans is None and not scenario.config.cache.pin_demand_set
               and sc[L.SC_RECENCY] in (L.REC_INSERTION, L.REC_LAST_USE)
               and sc[L.SC_VICTIM] == L.VIC_FIRST)  # fmt: skip
    for lo in range(0, total, block):
        hi = min(total, lo + block)
        # the block's keys (built for it alone where the demand sets have not built them all)
        # and its offsets, from its first access
        keys = np.ascontiguousarray(demand.keys_of_passes(lo, hi), dtype=np.int32)
        at = offsets[lo * layers : hi * layers + 1] - offsets[lo * layers]
        if classic:
            outcome = K.run_classic(S, keys, at, lo, hi)
        else:
            if plans is None:
                plan_offsets, plan_keys = np.zeros((hi - lo) * layers + 1, np.int64), empty
            else:
                plan_offsets, plan_keys = plans.block(lo, hi)  # (int64, contiguous)
            outcome = K.run_passes(S, after, keys, at, lo, hi, plan_offsets, plan_keys)
        if outcome == L.NO_SPACE:
            raise RuntimeError("replay: WaitForSpace cannot happen without time")
        report_progress(progress, hi, total)
    return kernel_stats(S, layers)


def kernel_state(
    run: RunObjects,
    warm: list[int] | None = None,
    K: ModuleType | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The kernel's state ``S`` for ``run`` (covered: :func:`compiled_unsupported` is None)
    over its access sequence, and Belady's next uses (:func:`.kernel.next_uses`' ``after``;
    empty for the other policies): the cache holds the GPU's own
    shard (resident and pinned, outside its capacity), the policy's initial contents and then
    ``warm``, placed in that order, as the run's cache was built. ``K``: the kernel's entry
    points (:func:`kernels` by default)."""
    K = K or kernels()
    scenario, cache = run.scenario, run.cache
    layers, experts = scenario.trace.num_layers, scenario.trace.num_experts
    n = layers * experts
    form = compiled_form(run.eviction)
    assert form is not None, "the kernel called on an uncovered run"
    S = L.new_state(n, layers)
    S[L.K_NBYTES, :n] = cache.nbytes
    after = np.zeros(0, np.int64)
    if form.priority == "next-use":  # (over the whole access sequence: its keys are built)
        keys = np.ascontiguousarray(scenario.demand.keys, np.int32)
        after, S[L.K_NEXT_USE, :n] = K.next_uses(keys, n)
    sc = S[L.R_SC]
    sc[L.SC_CAPACITY] = cache.capacity_bytes
    sc[L.SC_RECENCY], sc[L.SC_VICTIM] = L.RECENCY[form.recency], L.VICTIM[form.victim]
    sc[L.SC_PRIORITY] = L.PRIORITY[form.priority]
    for option, value in form.options.items():
        sc[getattr(L, L.OPTIONS[option])] = value
    sc[L.SC_WRITE_BACK] = cache.write_back is not None
    sc[L.SC_PINNED] = scenario.config.cache.pin_demand_set
    sc[L.SC_STAMP_SPAN] = _STAMP_SPAN
    sc[L.SC_NEVER] = scenario.demand.num_accesses
    sc[L.SC_NUM_EXPERTS] = experts
    home = np.flatnonzero(np.frombuffer(cache.home, np.uint8))  # ExpertCache.add_home
    S[L.K_STATE, home], S[L.K_EVER, home], S[L.K_PINS, home] = L.RESIDENT, 1, 1
    placed = np.array(run.eviction.initial_contents() + list(warm or []), np.int64)
    if not K.preload(S, placed):  # build_run placed them: they fit
        raise RuntimeError("the preloaded experts do not fit")
    return S, after


def kernel_stats(S: np.ndarray, layers: int) -> CacheStats:
    """The counters of a run the kernel's state ``S`` went through, with the prefetches never
    used counted as wasted (``ExpertCache.finish``)."""
    n = int(S[L.R_SC, L.SC_KEYS])
    out = CacheStats(layers)
    out.by_layer = S[L.R_BY_LAYER : L.R_BY_LAYER + 5, :layers].T.tolist()
    for i, name in enumerate(L.STAT_NAMES):
        setattr(out, name, int(S[L.R_STATS, i]))
    out.prefetch_wasted += int(S[L.K_UNUSED, :n].sum())  # cache.finish()
    return out

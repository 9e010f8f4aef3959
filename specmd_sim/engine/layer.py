"""The layer step: the semantics of DESIGN.md §4, written once for every engine.

:meth:`LayerStep.layer` is one MoE layer of one pass on one GPU. It makes every cache and
policy decision itself — pin the demand set, classify each access, resolve each miss by
fetching, streaming, dropping, running it on the CPU or substituting a resident expert, plan
the prefetches, release the pins — and *yields* a small request for each thing that takes time
or happens on another device. The engine fulfils the request and sends back its outcome:

====================  =====================================================  ================
request               meaning                                                outcome
====================  =====================================================  ================
:class:`Decide`       the router of ``(pass, layer)`` decides ``keys``         —
:class:`WaitForSpace` a demand fetch found nothing evictable, but a          —
                      transfer in flight will free room; the step retries
                      the reservation once the engine returns
:class:`Fetch`        move ``key``'s bytes; the cache has reserved its space  a handle
                      (``bypass``: streamed into a staging buffer instead)
:class:`Join`         ``key`` is loading (a late hit): use its transfer        a handle
:class:`RunOnCpu`     start ``key`` on the host CPU                           a handle
:class:`Run`          run these experts on the GPU, in order, each once its   —
                      handle (if any) has completed
:class:`AwaitCpu`     wait for these CPU experts                              —
====================  =====================================================  ================

A handle is the engine's own object for work in flight (``None`` when it completed at once);
the step only passes it back in :class:`Run` and :class:`AwaitCpu`. ``replay`` fulfils every
request in zero time (a transfer lands after the step's decisions, before the next router
decision: ``docs/design.md``, *Zero-time transfers*); ``simulate`` turns each into SimPy events;
an engine that executes on real hardware performs them. Because only the fulfilment differs,
the engines make the same decisions whenever their fulfilments agree — on a near-instant
machine ``simulate`` reproduces ``replay`` access for access, which
``tests/engine/test_equivalence.py`` checks over the whole plug-in registry.
The requests are slotted dataclasses, not frozen ones, which take several times as long to build
(one or two are built per access); neither side changes a request once it is yielded.

Two pin modes (``cache.pin_demand_set``), the same in every engine:

- ``true`` (default): the whole demand set is pinned at the router's decision and classified
  at once; misses are resolved in gate order; prefetches for the next layers are planned (they
  cannot evict the pinned set); the experts run, resident ones first; the pins are released.
- ``false``: experts are taken one at a time, in gate order: each is looked up, pinned,
  resolved, run and released before the next is looked up (the classic semantics of cache
  simulators, which the libCacheSim differential tests rely on); prefetches are planned after
  the layer's last expert ran. A later expert's fetch may thus evict an earlier one of the same
  layer, which then counts as a collision miss if the router selected it again later.
"""

from __future__ import annotations

from collections.abc import Generator
from dataclasses import dataclass
from typing import Any

from specmd_sim.cache import AccessClass, ExpertCache, FetchReason
from specmd_sim.cache.states import State
from specmd_sim.engine import jit
from specmd_sim.engine.fast.plans import BulkPlans, plans_unsupported
from specmd_sim.policies.eviction.random import RandomEviction
from specmd_sim.policies.miss.base import FETCH, MissAction, MissDecision
from specmd_sim.policies.plugin import built_in
from specmd_sim.scenario import RunObjects

_HIT, _LATE = int(AccessClass.HIT), int(AccessClass.LATE_HIT)
_ABSENT, _RESIDENT = int(State.ABSENT), int(State.RESIDENT)
_DEMAND, _PREFETCH = FetchReason.DEMAND, FetchReason.PREFETCH
_FETCH, _DROP, _CPU = MissAction.FETCH, MissAction.DROP, MissAction.CPU


@dataclass(slots=True)
class Decide:
    pass_index: int
    layer: int
    keys: frozenset[int]  # the layer's demand set


@dataclass(slots=True)
class WaitForSpace:
    key: int


@dataclass(slots=True)
class Fetch:
    key: int
    demand: bool
    target: tuple[int, int]  # (pass, layer) the bytes are for
    bypass: bool = False  # into a staging buffer, not the cache


@dataclass(slots=True)
class Join:
    key: int


@dataclass(slots=True)
class RunOnCpu:
    key: int
    tokens: int
    klass: int  # the access's AccessClass


@dataclass(slots=True)
class Expert:
    """One expert to run on the GPU: ``key`` over ``tokens`` tokens, for an access of class
    ``klass``, once ``handle`` (its transfer; None if resident) has completed."""

    key: int
    tokens: int
    klass: int
    handle: Any = None


@dataclass(slots=True)
class Run:
    experts: list[Expert]


@dataclass(slots=True)
class CpuExpert:
    key: int
    klass: int
    handle: Any


@dataclass(slots=True)
class AwaitCpu:
    experts: list[CpuExpert]


Request = Decide | WaitForSpace | Fetch | Join | RunOnCpu | Run | AwaitCpu
Step = Generator[Request, Any, None]


class LayerStep:
    """The decisions of one GPU's run: its cache, plug-ins and demand sets.

    ``timed=False`` (an engine in which nothing takes time) leaves out the requests that only
    tell the engine where time goes — :class:`Decide`, :class:`Run` and :class:`AwaitCpu`; the
    decisions are the same, only cheaper to drive. ``bulk_plans=True`` takes the prefetch plans
    from :class:`PlanBlocks` where :func:`bulk_plans_unsupported` allows: the same plans,
    computed ahead a block of passes at a time.
    """

    def __init__(self, run: RunObjects, timed: bool = True, bulk_plans: bool = False) -> None:
        self.timed = timed
        self.cache: ExpertCache = run.cache
        self.prefetch = run.prefetch
        self.predictor = run.predictor
        self.miss = run.miss
        self.demand = run.scenario.demand
        self.num_experts = run.scenario.trace.num_experts
        self.pinned = run.scenario.config.cache.pin_demand_set
        self.fetch_all = run.miss.always_fetches
        self.prefetching = run.prefetch.lookahead > 0
        self.capacities = run.capacities
        self.plans: PlanBlocks | None = None
        if bulk_plans and self.prefetching and bulk_plans_unsupported(run) is None:
            self.plans = PlanBlocks(run)

    def begin_pass(self, pass_index: int) -> None:
        if self.capacities is not None:  # the KV cache grew or shrank, before the pass begins
            self.cache.resize(int(self.capacities[pass_index]))
        self.cache.begin_pass(pass_index)

    def layer(self, p: int, layer: int) -> Step:
        """One MoE layer of pass ``p`` (a generator of requests; see the module docstring)."""
        lo, hi = self.demand.span(p, layer)
        keys: list[int] = self.demand.keys[lo:hi].tolist()
        tokens: list[int] = self.demand.tokens[lo:hi].tolist()
        if self.timed:
            yield Decide(p, layer, frozenset(keys))
        self.cache.begin_layer(layer)
        if self.pinned:
            yield from self._pinned(p, layer, keys, tokens)
        else:
            yield from self._one_at_a_time(p, layer, keys, tokens)

    # --- the two pin modes -----------------------------------------------------------------

    def _pinned(self, p: int, layer: int, keys: list[int], tokens: list[int]) -> Step:
        cache = self.cache
        for key in keys:
            cache.pin(key)
        classes = [cache.access(key, layer) for key in keys]
        held, taken = list(keys), set(keys)
        ready: list[Expert] = []
        waiting: list[Expert] = []
        on_cpu: list[CpuExpert] = []
        for key, n, klass in zip(keys, tokens, classes, strict=True):
            if klass == _HIT:
                ready.append(Expert(key, n, klass))
                continue
            decision = self._decide(p, layer, key, taken)
            if decision.action is _FETCH:
                handle = yield from self._fetch(p, layer, key, klass)
                waiting.append(Expert(key, n, klass, handle))
            elif decision.action is _DROP:
                cache.drop()
            elif decision.action is _CPU:
                cache.run_on_cpu()
                on_cpu.append(CpuExpert(key, klass, (yield RunOnCpu(key, n, klass))))
            else:
                by = decision.by
                cache.substitute(by)
                cache.pin(by)
                taken.add(by)
                held.append(by)
                ready.append(Expert(by, n, klass))
        yield from self._plan_prefetches(p, layer)
        if self.timed:
            yield Run(ready + waiting)
            if on_cpu:
                yield AwaitCpu(on_cpu)
        for key in held:
            cache.unpin(key)
        if cache.staged_keys:
            cache.settle()

    def _one_at_a_time(self, p: int, layer: int, keys: list[int], tokens: list[int]) -> Step:
        cache, timed = self.cache, self.timed
        taken = set(keys)
        for key, n in zip(keys, tokens, strict=True):
            cache.pin(key)
            klass = cache.access(key, layer)
            if klass == _HIT:
                if timed:
                    yield Run([Expert(key, n, klass)])
                cache.unpin(key)
                continue
            decision = self._decide(p, layer, key, taken)
            if decision.action is _FETCH:
                handle = yield from self._fetch(p, layer, key, klass)
                if timed:
                    yield Run([Expert(key, n, klass, handle)])
            elif decision.action is _DROP:
                cache.drop()
            elif decision.action is _CPU:
                cache.run_on_cpu()
                handle = yield RunOnCpu(key, n, klass)
                if timed:
                    yield AwaitCpu([CpuExpert(key, klass, handle)])
            else:
                by = decision.by
                cache.substitute(by)
                cache.pin(by)
                taken.add(by)
                if timed:
                    yield Run([Expert(by, n, klass)])
                cache.unpin(by)
            cache.unpin(key)
        if cache.staged_keys:
            cache.settle()
        yield from self._plan_prefetches(p, layer)

    # --- the parts both modes share --------------------------------------------------------

    def _decide(self, p: int, layer: int, key: int, taken: set[int]) -> MissDecision:
        return FETCH if self.fetch_all else self.miss.decide(p, layer, key, self.cache, taken)

    def _fetch(self, p: int, layer: int, key: int, klass: int) -> Generator[Request, Any, Any]:
        """Bring a demanded, non-resident ``key``: join its transfer (a late hit), or fetch it
        into the cache, or stream it past the cache when the policy does not admit it or when
        the layer's pinned demand set leaves it no room (an *overflow*: a demand set larger than
        the cache, as a whole-prompt prefill's may be)."""
        cache = self.cache
        if klass == _LATE:
            if cache.state[key] == _RESIDENT:
                return None  # its transfer ended while an earlier miss waited for space
            return (yield Join(key))
        if not cache.admits(key, _DEMAND):
            cache.stream(key)
            return (yield Fetch(key, True, (p, layer), bypass=True))
        while not cache.reserve(key, _DEMAND):
            if cache.overflows(key):  # the layer's pins fill the cache: no wait makes room
                cache.stream(key, overflow=True)
                return (yield Fetch(key, True, (p, layer), bypass=True))
            yield WaitForSpace(key)
        return (yield Fetch(key, True, (p, layer)))

    def _plan_prefetches(self, p: int, layer: int) -> Step:
        """After the router of ``layer``: cached experts on the prefetcher's list are hints,
        absent ones are fetched in list order unless nothing is evictable (then dropped)."""
        if not self.prefetching:
            return
        cache = self.cache
        state = cache.state
        if self.plans is None:
            plan = self.prefetch.plan(p, layer, self.predictor, cache)
        else:
            plan = self.plans.plan(p, layer)
        for key in plan:
            if state[key] != _ABSENT:
                cache.hint(key)
            elif cache.reserve(key, _PREFETCH):
                yield Fetch(key, False, (p, key // self.num_experts))


def bulk_plans_unsupported(run: RunObjects) -> str | None:
    """None when :class:`PlanBlocks` gives ``run``'s plans, else why not (a phrase): the plans
    are :class:`~specmd_sim.engine.fast.plans.BulkPlans`' (:func:`plans_unsupported`), whose
    draws from the run's generator are made a block ahead, so no other plug-in may draw from it
    during the run (the random eviction does; a plug-in from outside specmd_sim may), and its
    kernels must be compiled (interpreted, they are slower than the plug-ins' own calls). A part
    of the one coverage check (:mod:`specmd_sim.engine.coverage`), which reports it."""
    if not jit.available():
        return jit.UNCOMPILED
    for plugin in (run.eviction, run.miss):
        kind = type(plugin)
        if kind is RandomEviction or not built_in(kind):
            return f"{plugin.kind!r}, which may draw from the run's generator"
    return plans_unsupported(run)


class PlanBlocks:
    """The prefetch plans of a run, as ``run.prefetch.plan(p, layer, ...)`` returns them, from
    :class:`~specmd_sim.engine.fast.plans.BulkPlans` a block of ``BLOCK_ROWS`` predictions at a
    time (asked in pass order, as an engine's passes run; :func:`bulk_plans_unsupported` must be
    None)."""

    BLOCK_ROWS = 4096

    def __init__(self, run: RunObjects) -> None:
        self.bulk = BulkPlans(run)
        self.num_layers = run.scenario.trace.num_layers
        self.passes = run.scenario.passes  # (an online schedule's grows as it is formed)
        self.per_block = max(1, self.BLOCK_ROWS // max(1, self.bulk.row_target.size))
        self.lo = self.hi = 0  # the passes of the block in hand
        self.offsets: list[int] = [0]
        self.keys: list[int] = []

    def plan(self, p: int, layer: int) -> list[int]:
        """Flat expert ids to prefetch after the router of ``layer`` in pass ``p``."""
        while p >= self.hi:
            self.lo, self.hi = self.hi, min(self.passes.num_passes, self.hi + self.per_block)
            offsets, keys = self.bulk.block(self.lo, self.hi)
            self.offsets, self.keys = offsets.tolist(), keys.tolist()
        i = (p - self.lo) * self.num_layers + layer
        return self.keys[self.offsets[i] : self.offsets[i + 1]]

"""The timing-free engine: the timing engine's limit on a machine where nothing takes time.

Experts and CPU work take no time, and transfers are *zero-time transfers*
(``docs/design.md``): a transfer issued during a layer step lands after the step's decisions
and before the next router decision — a demand fetch when the experts that need it run, a
layer's prefetches together after its plan (so a plan's prefetches never evict each other, as
on any machine where they are in flight together). So there are no late hits and no stalls:
the hit rates and the miss taxonomy of the decisions in :mod:`specmd_sim.engine.layer`, fast.
The timing engine on a near-instant machine makes exactly these decisions, a late hit there
being a hit here (``tests/engine/test_equivalence.py``, over the whole plug-in registry). With a
DRAM cache (:mod:`specmd_sim.engine.dram`) each fetch first reads its expert from DRAM, and the
reads from the NVMe drive into DRAM land as the copies do; the compiled path does not cover
such runs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from specmd_sim.cache import CacheStats, ExpertCache, FetchReason
from specmd_sim.cache.states import State
from specmd_sim.config import DramCacheConfig, SimConfig
from specmd_sim.engine.common import Progress, finish_result, report_progress
from specmd_sim.engine.coverage import EnginePath, replay_path
from specmd_sim.engine.dram import READ, WAIT, DramLevel, dram_metrics
from specmd_sim.engine.fast import replay_compiled
from specmd_sim.errors import SpecmdError
from specmd_sim.metrics import RunResult, cache_metrics, per_layer_cache_table
from specmd_sim.policies.context import AccessSequence
from specmd_sim.policies.registry import EVICTION
from specmd_sim.scenario import RunObjects, Scenario, build_run, build_scenario
from specmd_sim.scenario.dram import needs_sequence

if TYPE_CHECKING:
    from specmd_sim.engine.layer import Step

_ABSENT = int(State.ABSENT)


def replay(
    config: SimConfig | Scenario,
    progress: Progress | None = None,
    warm: list[int] | None = None,
    compiled: bool | None = None,
) -> RunResult:
    """Run the timing-free engine on a config (or an already built scenario); ``warm`` are
    experts placed in the cache before the run (used to give the Belady reference the same
    warm start as the policy it bounds).

    Replay is the timing engine's zero-time limit: a transfer issued during a layer step lands
    after the step's decisions and before the next router decision (a demand fetch when the
    experts that need it run), so a layer's prefetches are in flight together, never evicting
    each other.

    ``compiled``: None (default) takes the compiled path (:mod:`specmd_sim.engine.fast`) when
    numba is installed and the run's plug-ins are built-ins it covers, else the Python layer
    step; True requires the compiled path (interpreted without numba: for tests); False
    requires the Python path. Both give the same counters; the result's ``engine_path`` says
    which was taken, and why (:func:`~specmd_sim.engine.coverage.replay_path`).
    """
    scenario = config if isinstance(config, Scenario) else build_scenario(config)
    sequence = dram_sequence(scenario) if needs_sequence(scenario.config) else None
    run = build_run(scenario, warm, sequence)
    path = replay_path(run, compiled)
    stats = _replay_stats(run, warm, progress, path, compiled)
    metrics = cache_metrics(stats)
    if run.dram is not None:
        metrics.update(dram_metrics(run.dram.cache))
    result = RunResult(
        engine="replay",
        metrics=metrics,
        per_layer=per_layer_cache_table(stats),
        per_request={},
        config={},
        inputs={},
        hardware_grade=None,  # replay uses no hardware number
        engine_path=path.line(),
    )
    finish_result(scenario, result)
    if scenario.config.belady_gap:
        gap = belady_gap(scenario, result.metrics, run.eviction.initial_contents(), compiled)
        result.metrics.update(gap)
    return result


def _replay_stats(
    run: RunObjects,
    warm: list[int] | None,
    progress: Progress | None,
    path: EnginePath,
    compiled: bool | None,
) -> CacheStats:
    """The run's counters, from the path ``path`` names (the compiled one, which ``compiled``
    True requires, or the Python layer step)."""
    if compiled and not path.compiled:
        raise SpecmdError(f"replay: the compiled path does not cover this run: {path.reason}")
    if path.compiled:
        return replay_compiled(run, warm, progress)
    _replay_python(run, progress)
    return run.cache.stats


def _replay_python(
    run: RunObjects, progress: Progress | None = None, record: bool = False
) -> DramLevel | None:
    """Drive the run's layer steps (and its DRAM level, returned; ``record``: recording its
    accesses)."""
    from specmd_sim.engine.layer import LayerStep  # (the Python path's: a compiled replay's
    # process does not import the layer step and the plug-ins it names)

    cache = run.cache
    dram = None
    if run.dram is None:
        step = LayerStep(run, timed=False)

        def fulfil(p: int, layer: int) -> None:
            _fulfil(step.layer(p, layer), cache.complete)

    else:  # its transfers land at the stream's waits: the step tells where it waits
        step = LayerStep(run, timed=True)
        two_level = _TwoLevel(cache)
        pinned = run.scenario.config.cache.pin_demand_set
        dram = DramLevel(run.dram, cache, run.scenario.demand, pinned, two_level.load, record)
        two_level.dram = dram

        def fulfil(p: int, layer: int) -> None:
            two_level.fulfil(step.layer(p, layer))

    num_layers = run.scenario.trace.num_layers
    total = run.scenario.passes.num_passes
    for p in range(total):
        step.begin_pass(p)
        for layer in range(num_layers):
            fulfil(p, layer)
        report_progress(progress, p + 1, total)
    cache.finish()
    if dram is not None:
        dram.finish()
    return dram


class _TwoLevel:
    """The zero-time transfers of a two-level run (``docs/design.md``, *Zero-time transfers*):
    the reads from the NVMe drive into DRAM and the copies into the GPU issued during a layer
    step are in flight (their experts loading, and pinned in DRAM while copied) until the
    stream next waits — for experts it runs, for space, or at the step's end — and then land:
    the reads first, in the order issued, then the copies, each unpinning its expert in DRAM;
    a DRAM miss that found nothing evictable reserves again after each."""

    def __init__(self, cache: ExpertCache) -> None:
        self.cache = cache
        self.dram: DramLevel | None = None
        self.reads: list[int] = []  # DRAM space reserved, the expert read from the drive
        self.copies: list[tuple[int, bool]] = []  # (key, into the GPU cache), in order
        self.stalled: list[int] = []  # DRAM misses that found nothing evictable

    def load(self, key: int) -> None:
        """A DRAM prefetch reserved DRAM space for ``key``: its read is in flight."""
        self.reads.append(key)

    def fulfil(self, step: Step) -> None:
        from specmd_sim.engine.layer import Fetch, Join, Run, WaitForSpace

        assert self.dram is not None
        for request in step:
            if type(request) is Fetch:
                action = self.dram.access(request.key)
                if action == READ:
                    self.reads.append(request.key)
                elif action == WAIT:
                    self.stalled.append(request.key)
                self.copies.append((request.key, not request.bypass))
            elif type(request) is Run or (
                type(request) is WaitForSpace and (self.reads or self.copies)
            ):
                self._land()  # (space for the GPU cache can come only from what lands)
            elif type(request) in (Join, WaitForSpace):
                # nothing is loading in the GPU cache when a router decides (what was in flight
                # landed before), and what a pinned demand set leaves no room for is streamed
                raise RuntimeError(f"replay: {request} cannot happen without time")
        self._land()

    def _land(self) -> None:
        """Time passes: every transfer in flight lands (and those it lets start)."""
        assert self.dram is not None
        dram = self.dram.cache
        while self.reads or self.copies:
            reads, self.reads = self.reads, []
            for key in reads:
                dram.complete(key)
            self._retry()
            waiting = set(self.stalled) | set(self.reads)
            copies = [c for c in self.copies if c[0] not in waiting]
            self.copies = [c for c in self.copies if c[0] in waiting]
            for key, cached in copies:
                self.dram.release(key)
                if cached:
                    self.cache.complete(key)
            self._retry()
            if not reads and not copies:  # nothing landed: the stalled misses wait forever
                raise RuntimeError(
                    f"replay: DRAM misses {self.stalled} found nothing evictable without time"
                )

    def _retry(self) -> None:
        """The stalled DRAM misses, in order, reserve again (a read lands or a copy ended)."""
        dram = self.dram
        assert dram is not None
        while self.stalled:
            key = self.stalled[0]
            if dram.cache.state[key] == _ABSENT:  # (else a DRAM prefetch read it meanwhile)
                if not dram.cache.reserve(key, FetchReason.DEMAND):
                    return
                self.reads.append(key)
            self.stalled.pop(0)


def dram_sequence(scenario: Scenario) -> AccessSequence:
    """The DRAM-level access sequence of ``scenario``'s two-level run (what an offline DRAM
    eviction policy reads): every fetch into the GPU cache, in order. Recorded by a replay with
    an online DRAM policy, since the GPU level's decisions do not depend on the DRAM level's."""
    config = scenario.config
    memory = config.memory.model_copy(update={"dram_cache": DramCacheConfig()})
    probe = dataclasses.replace(
        scenario, config=config.model_copy(update={"memory": memory, "belady_gap": False})
    )
    dram = _replay_python(build_run(probe), record=True)
    assert dram is not None  # the probe has a DRAM cache
    return dram.sequence(scenario.passes.num_passes)


def _fulfil(step: Step, complete: Callable[[int], None]) -> None:
    """Drive one layer step of a one-level run as zero-time transfers land
    (``docs/design.md``): a demand fetch when it is issued (its run needs it next), the plan's
    prefetches together after the step, so that they never evict each other. Nothing else
    takes time (the step is untimed: it asks neither to run experts nor to wait)."""
    from specmd_sim.engine.layer import Fetch, Join, WaitForSpace

    landing: list[int] = []
    for request in step:
        match request:
            case Fetch(key, demand=True, bypass=False):
                complete(key)
            case Fetch(key, bypass=False):
                landing.append(key)
            case WaitForSpace() | Join():
                # what a pinned demand set leaves no room for is streamed, and nothing is
                # loading when a router decides, so either would be a bug in the cache or a policy
                raise RuntimeError(f"replay: {request} cannot happen without time")
    for key in landing:
        complete(key)


def belady_gap(
    scenario: Scenario, metrics: dict[str, Any], warm: list[int], compiled: bool | None = None
) -> dict[str, Any]:
    """Replay the same trace, capacity, prefetcher and layer-step rules with the offline optimum.

    Policies that may stream experts past the cache are compared with ``belady-bypass``
    (optimal admission and eviction), all others with always-admit ``belady``. The optimum
    starts with the same warm contents as the policy (``static-hot``'s preloaded hot set),
    else a warm-started policy could beat a cold optimum. In the timing engine the run's
    misses exclude its late hits; the optimum is timing-free.
    """
    config = scenario.config
    policy = EVICTION.get(config.eviction.kind)
    reference = "belady-bypass" if policy.may_bypass else "belady"
    optimal_config = config.model_copy(
        update={"eviction": EVICTION.parse_config(reference), "belady_gap": False}
    )
    optimal_scenario = dataclasses.replace(scenario, config=optimal_config)
    optimal = replay(optimal_scenario, warm=warm, compiled=compiled).metrics
    return {
        "belady_reference": reference,
        "belady_misses": optimal["misses"],
        "belady_hit_rate": optimal["hit_rate"],
        "belady_gap_misses": metrics["misses"] - optimal["misses"],
    }

"""The timing-free engine: every request of the layer step is fulfilled at once.

A fetch lands when it is issued (a prefetch is resident before the next decision), experts and
CPU work take no time, so there are no late hits and no stalls: the hit rates and the miss
taxonomy of the decisions in :mod:`specmd_sim.engine.layer`, fast. With a DRAM cache
(:mod:`specmd_sim.engine.dram`) each fetch first reads its expert from DRAM, and an NVMe read
into DRAM lands at once too; the compiled path does not cover such runs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from specmd_sim.cache import CacheStats
from specmd_sim.config import DramCacheConfig, SimConfig
from specmd_sim.engine import jit
from specmd_sim.engine.common import Progress, finish_result, report_progress
from specmd_sim.engine.dram import JOIN, READ, WAIT, DramLevel, dram_metrics
from specmd_sim.engine.fast import compiled_unsupported, replay_compiled
from specmd_sim.errors import SpecmdError
from specmd_sim.metrics import RunResult, cache_metrics, per_layer_cache_table
from specmd_sim.policies.context import AccessSequence
from specmd_sim.policies.registry import EVICTION
from specmd_sim.scenario import RunObjects, Scenario, build_run, build_scenario
from specmd_sim.scenario.dram import needs_sequence

if TYPE_CHECKING:
    from specmd_sim.engine.layer import Step


def replay(
    config: SimConfig | Scenario,
    progress: Progress | None = None,
    warm: list[int] | None = None,
    compiled: bool | None = None,
) -> RunResult:
    """Run the timing-free engine on a config (or an already built scenario); ``warm`` are
    experts placed in the cache before the run (used to give the Belady reference the same
    warm start as the policy it bounds).

    ``compiled``: None (default) takes the compiled path (:mod:`specmd_sim.engine.fast`) when
    numba is installed and the run's plug-ins are built-ins it covers, else the Python layer
    step; True requires the compiled path (interpreted without numba: for tests); False
    requires the Python path. Both give the same counters.
    """
    scenario = config if isinstance(config, Scenario) else build_scenario(config)
    sequence = dram_sequence(scenario) if needs_sequence(scenario.config) else None
    run = build_run(scenario, warm, sequence)
    stats = _replay_stats(run, warm, progress, compiled)
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
    )
    finish_result(scenario, result)
    if scenario.config.belady_gap:
        gap = belady_gap(scenario, result.metrics, run.eviction.initial_contents(), compiled)
        result.metrics.update(gap)
    return result


def _replay_stats(
    run: RunObjects, warm: list[int] | None, progress: Progress | None, compiled: bool | None
) -> CacheStats:
    """The run's counters, from the compiled path or the Python layer step."""
    if compiled is not False:
        why = compiled_unsupported(run)
        if compiled and why is not None:
            raise SpecmdError(f"replay: the compiled path does not cover this run: {why}")
        if why is None and (compiled or jit.available()):
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

    cache, step = run.cache, LayerStep(run, timed=False)
    dram = read = None
    if run.dram is not None:
        dram_cache = run.dram.cache
        pinned = run.scenario.config.cache.pin_demand_set
        dram = DramLevel(run.dram, cache, run.scenario.demand, pinned, dram_cache.complete, record)
        read = _read_from_dram(dram)
    num_layers = run.scenario.trace.num_layers
    total = run.scenario.passes.num_passes
    for p in range(total):
        step.begin_pass(p)
        for layer in range(num_layers):
            _fulfil(step.layer(p, layer), cache.complete, read)
        report_progress(progress, p + 1, total)
    cache.finish()
    if dram is not None:
        dram.finish()
    return dram


def _read_from_dram(dram: DramLevel) -> Callable[[int], None]:
    """A fetch's read from DRAM (from NVMe into DRAM first on a miss), all at once."""

    def read(key: int) -> None:
        action = dram.access(key)
        if action == READ:
            dram.cache.complete(key)
        elif action in (JOIN, WAIT):
            # a DRAM read lands when it is issued, and what the DRAM cache cannot evict always
            # leaves room for one more expert (checked before the run)
            raise RuntimeError(f"replay: a DRAM access of {key} cannot wait without time")
        dram.release(key)

    return read


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


def _fulfil(
    step: Step, complete: Callable[[int], None], read: Callable[[int], None] | None = None
) -> None:
    """Drive one layer step: a fetch lands at once; nothing else takes time (the step is
    untimed, so it asks neither to run experts nor to wait). ``read``: with a DRAM cache, each
    fetch (streamed ones too) first reads its expert from DRAM."""
    from specmd_sim.engine.layer import Fetch, Join, WaitForSpace

    for request in step:
        match request:
            case Fetch(key, bypass=bypass) if read is not None:
                read(key)
                if not bypass:
                    complete(key)
            case Fetch(key, bypass=False):
                complete(key)
            case WaitForSpace() | Join():
                # a pinned demand set always fits (checked before the run) and nothing is ever
                # loading here, so either would be a bug in the cache or a policy
                raise RuntimeError(f"replay: {request} cannot happen without time")


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

"""The timing engine: per GPU a compute stream (:mod:`.stream`) and its transfers
(:mod:`.fetch`), all GPUs sharing one event loop, one flow network (links, host DRAM, NVMe
drives; :mod:`.flows`) and the host's CPU (:mod:`.cpu`); the accounting becomes the result in
:mod:`.tally`. Every decision is the layer step's (:mod:`specmd_sim.engine.layer`).

Each GPU serves its own requests (round robin in arrival order; :mod:`specmd_sim.scenario.passes`)
with its own cache, plug-ins and copy engines. The run's hardware grade is the lowest grade of
the numbers it read: those its cost models read, the copy-engine count, and the numbers behind
every transfer path a byte (or a CPU read) actually took.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import simpy

from specmd_sim.config import SimConfig
from specmd_sim.engine.common import Progress, finish_result, report_progress
from specmd_sim.engine.coverage import simulate_path
from specmd_sim.engine.dram import DramLevel, dram_metrics
from specmd_sim.engine.replay import belady_gap, dram_sequence
from specmd_sim.engine.sim.compiled import GpuParts, run_compiled
from specmd_sim.engine.sim.copy_engines import OneStream
from specmd_sim.engine.sim.cpu import HostCpu
from specmd_sim.engine.sim.events import Environment
from specmd_sim.engine.sim.fetch import Fetcher, WriteBacks
from specmd_sim.engine.sim.flows import FlowNetwork
from specmd_sim.engine.sim.stream import GpuStream
from specmd_sim.engine.sim.tally import GpuTally, timing_result
from specmd_sim.hardware import TransferPath, lowest_grade, write_back_path
from specmd_sim.hardware.schema import GPUNode, Quantity
from specmd_sim.metrics import RunResult
from specmd_sim.models import CostModel
from specmd_sim.scenario import RunObjects, Scenario, build_runs, build_scenario
from specmd_sim.scenario.dram import needs_sequence
from specmd_sim.scenario.schedule import ScheduleFull, is_online
from specmd_sim.timeline import COUNTER_DTYPE, SpanRecorder

PAGED_ROOM = 2
"""An online schedule with preemptions (``kv_cache: paged``) first has room for twice the
trace's rows: each recomputed token is a row again."""


def simulate(
    config: SimConfig | Scenario, progress: Progress | None = None, compiled: bool = True
) -> RunResult:
    """Run the SimPy timing engine on a config (or an already built scenario); on its compiled
    core (:mod:`.compiled`) where that covers the run, unless ``compiled`` is False. The
    result's ``engine_path`` says which path was taken, and why
    (:func:`~specmd_sim.engine.coverage.simulate_path`).

    An online schedule whose preemptions make it form more rows than it has room for
    (:class:`~specmd_sim.scenario.schedule.ScheduleFull`) runs again with twice the room: the
    run is deterministic, so the result is the one more room would have given at once."""
    return _timed(config, progress, compiled)[0]


def formed_schedule(config: SimConfig | Scenario, compiled: bool = True) -> Scenario:
    """The scenario with the passes its timed run formed, as a table fixed before the run
    (``workload.schedule: fixed``): with an online schedule, the schedule of this first run.
    Run as it is, it gives the same run (each pass starts when the online one did, its new
    requests arrived by then); offline plug-ins (Belady, static-hot, ``belady_gap``), which
    need every pass in advance, run on it, as on the schedule a server would have formed
    with the run's own policies."""
    scenario = _timed(config, None, compiled)[1]
    workload = scenario.config.workload.model_copy(update={"schedule": "fixed"})
    return dataclasses.replace(
        scenario, config=scenario.config.model_copy(update={"workload": workload})
    )


def _timed(
    config: SimConfig | Scenario, progress: Progress | None, compiled: bool
) -> tuple[RunResult, Scenario]:
    """:func:`simulate`'s result and its scenario with the passes it ran."""
    scenario = config if isinstance(config, Scenario) else build_scenario(config)
    room = PAGED_ROOM if scenario.config.workload.kv_cache == "paged" else 1
    while True:
        try:
            return _simulate(scenario, progress, compiled, room)
        except ScheduleFull:
            room *= 2


def _simulate(
    scenario: Scenario, progress: Progress | None, compiled: bool, room: int
) -> tuple[RunResult, Scenario]:
    env = Environment()
    spans = SpanRecorder(scenario.config.timing.record_spans)
    cpu = HostCpu(env, scenario, spans)
    sequence = dram_sequence(scenario) if needs_sequence(scenario.config) else None
    online = is_online(scenario.config)
    runs = build_runs(scenario, None, sequence, online=online, room=room)
    taken = simulate_path(scenario, runs, compiled)
    backs = [_write_back(scenario, gpu) for gpu in scenario.gpus]
    network = _network(env, scenario, runs, backs, cpu, spans)
    done = [0]
    # progress in passes; online, in tokens (how many passes will be formed is not known)
    total = sum(o.schedule.total_rows for o in runs if o.schedule) or scenario.num_passes

    def pass_done(tokens: int) -> None:
        done[0] += tokens if online else 1
        report_progress(progress, min(done[0], total), total)  # (recomputed tokens: again)

    # each GPU's passes are numbered from its base in the spans (online: from room for every
    # pass it may form, renumbered after the run)
    bases = np.concatenate(([0], np.cumsum([r.scenario.passes.request.size for r in runs])))
    gpus = [
        _Gpu(env, objs, scenario.gpus[g], int(bases[g]), network, cpu, spans, pass_done, backs[g])
        for g, objs in enumerate(runs)
    ]
    for gpu in gpus:  # (routed: the router reads the passes' ends as the stream records them)
        if gpu.objs.schedule is not None and gpu.objs.schedule.router is not None:
            gpu.tally.pass_end[:] = np.inf
            gpu.objs.schedule.pass_end = gpu.tally.pass_end
    if taken.compiled:
        parts = [
            GpuParts(g.objs, g.node, g.cost, g.tally, g.fetcher, g.stream.lane, g.write_backs)
            for g in gpus
        ]
        run_compiled(parts, network, spans, progress)
    else:
        _run_processes(env, gpus)
    if online:
        scenario = _formed(scenario, gpus, spans, bases)
    if scenario.config.workload.kv_cache == "paged" and spans.enabled:
        _kv_counters(gpus, spans)
    for gpu in gpus:
        gpu.objs.cache.finish()
        if gpu.dram is not None:
            gpu.dram.finish()
    used: dict[int, Quantity] = {}
    for gpu in gpus:
        for q in gpu.quantities():
            used[id(q)] = q
    used.update(cpu.quantities)
    result = timing_result(
        [g.tally for g in gpus],
        [g.objs.cache for g in gpus],
        network,
        spans,
        lowest_grade(list(used.values())) if used else None,
        scenario.config.slo,
    )
    if gpus[0].dram is not None:
        result.metrics.update(dram_metrics(gpus[0].dram.cache))
    finish_result(scenario, result)
    result.engine_path = taken.line()
    if scenario.config.belady_gap:
        warm = runs[0].eviction.initial_contents()
        result.metrics.update(belady_gap(scenario, result.metrics, warm))
    return result, scenario


def _network(
    env: Environment,
    scenario: Scenario,
    runs: list[RunObjects],
    backs: list[TransferPath | None],
    cpu: HostCpu,
    spans: SpanRecorder,
) -> FlowNetwork:
    """The flow network of every resource a transfer (or the host's CPU) may use."""
    capacity: dict[str, float] = {}
    for objs, back in zip(runs, backs, strict=True):
        for path in objs.ctx.paths:  # paths[0] is the host path: DRAM is always there
            capacity.update(path.capacity)
        if objs.dram is not None:
            capacity.update(objs.dram.stage.capacity)
        if back is not None:
            capacity.update(back.capacity)
    capacity.update(cpu.capacity)
    nvme = scenario.placement.nvme
    dynamic: dict[str, Callable[[int], float]] = {}
    if nvme is not None:
        dynamic[f"nvme:{nvme.id}"] = nvme.read_bandwidth
    network = FlowNetwork(env, capacity, dynamic, spans=spans if spans.enabled else None)
    cpu.network = network
    return network


def _formed(
    scenario: Scenario, gpus: list[_Gpu], spans: SpanRecorder, bases: np.ndarray
) -> Scenario:
    """After a run whose passes were formed online: the scenario and the tallies with the
    passes formed, and the spans' passes numbered over the GPUs as the result numbers them."""
    shards, schedules = [], []
    for gpu in gpus:
        schedule = gpu.objs.schedule
        assert schedule is not None
        passes, demand = schedule.final()
        gpu.tally.formed(passes)
        shards.append((passes, demand))
        schedules.append(schedule)
    if len(gpus) > 1 and spans.enabled:
        final = np.concatenate(([0], np.cumsum([p.num_passes for p, _ in shards])))
        spans.renumber_passes(bases[:-1], final[:-1] - bases[:-1])
    if len(gpus) == 1:
        return dataclasses.replace(scenario, passes=shards[0][0], demand=shards[0][1],
                                   shards=tuple(shards))  # fmt: skip
    routed = None
    if schedules[0].router is not None:  # (the requests each GPU was routed, and arrivals)
        routed = tuple((s.requests.ids[: s.stepper.n].copy(), s.arrivals[: s.stepper.n].copy())
                       for s in schedules)  # fmt: skip
    return dataclasses.replace(scenario, shards=tuple(shards), routed=routed)


def _kv_counters(gpus: list[_Gpu], spans: SpanRecorder) -> None:
    """The KV cache's tokens at each pass start and the requests preempted so far, as counters
    (``kv_cache: paged``): what the scheduler counted as it formed the passes, drawn where
    they ran."""
    for gpu in gpus:
        passes = gpu.tally.passes
        start = gpu.tally.pass_start[: passes.num_passes]
        suffix = "" if len(gpus) == 1 else f"{gpu.node.id}/"
        cut = passes.preempted > 0
        for name, times, values in (
            ("kv_cache_tokens", start, passes.kv_resident),
            ("preempted_requests", start[cut], np.cumsum(passes.preempted)[cut]),
        ):
            rows = np.empty(times.size, COUNTER_DTYPE)
            rows["time"], rows["value"] = times, values
            spans.series(suffix + name).extend(rows)


def _run_processes(env: Environment, gpus: list[_Gpu]) -> None:
    """Every GPU's stream as a SimPy process, to the end of the run."""
    processes = [env.process(gpu.stream.run()) for gpu in gpus]
    env.run()
    for gpu, process in zip(gpus, processes, strict=True):
        if process.is_alive:
            p, layer = gpu.stream.position
            raise RuntimeError(
                f"timing engine: {gpu.node.id}'s stream is blocked at pass {p}, layer {layer} "
                "with nothing left to happen"
            )


def _write_back(scenario: Scenario, gpu: GPUNode) -> TransferPath | None:
    """The path evicted experts are copied back by (memory parity), as the runtime copies."""
    rt = scenario.runtime
    if not rt.memory_parity.value:
        return None
    path = write_back_path(scenario.profile, gpu.id)
    return path.as_copied(rt.h2d_tensors_per_expert, rt.h2d_efficiency)


class _Gpu:
    """One GPU's parts: its tally, fetcher, write-backs (memory parity) and stream."""

    def __init__(
        self,
        env: simpy.Environment,
        objs: RunObjects,
        node: GPUNode,
        pass_base: int,
        network: FlowNetwork,
        cpu: HostCpu,
        spans: SpanRecorder,
        pass_done: Callable[[int], None],
        write_back: TransferPath | None,
    ) -> None:
        sc = objs.scenario
        self.objs, self.node = objs, node
        compute_lane = f"{node.id}/compute"
        spans.lane(compute_lane)  # the compute lane comes before the GPU's copy lanes
        engines = node.copy_engines_h2d.value
        self.tally = GpuTally(node.id, sc.passes, sc.trace.num_layers, engines)
        suffix = "" if len(sc.shards) == 1 else f"{node.id}/"
        self.cost = CostModel(sc.model, node, sc.runtime)
        self.fetcher = Fetcher(
            env, network, objs.cache, objs.ctx.paths, objs.ctx.source, sc.placement.nvme,
            engines, sc.config.timing.chunk_bytes, spans, self.tally,
            (f"{node.id}/copy-h2d-", f"{suffix}cache_used_bytes", f"{suffix}bytes_in_flight"),
            lambda: (self.stream.position, self.stream.demanded), pass_base, sc.passes.request,
        )  # fmt: skip
        self.dram = None
        if objs.dram is not None:
            pin = sc.config.cache.pin_demand_set
            self.dram = DramLevel(objs.dram, objs.cache, sc.demand, pin, self.fetcher.load)
            self.fetcher.attach_dram(self.dram, objs.dram.stage)
        self.write_backs = None
        if write_back is not None:
            self.write_backs = WriteBacks(
                env, network, objs.cache, write_back, node.copy_engines_d2h.value,
                sc.config.timing.chunk_bytes, spans, self.tally, f"{node.id}/copy-d2h-",
                pass_base, sc.passes.request,
            )  # fmt: skip
        copies = [self.fetcher.engines]
        if self.write_backs is not None:
            copies.append(self.write_backs.engines)
        if sc.runtime.copy_stream.value == "compute":  # one copy at a time, write-backs first
            stream = OneStream(copies[::-1])
            for copy_engines in copies:
                copy_engines.stream = stream
        self.stream = GpuStream(
            env, objs, self.cost, self.fetcher, cpu, spans, self.tally, pass_base,
            compute_lane, pass_done, copies, f"{suffix}cache_capacity_bytes",
        )  # fmt: skip
        if self.write_backs is not None:  # issued by the thread that runs the model
            self.write_backs.issued = self.stream.issue_copy

    def quantities(self) -> list[Quantity]:
        """The hardware numbers this GPU's run read: its cost model's (and its plug-ins'), the
        copy-engine count, and the numbers behind each path a transfer took."""
        used = [*self.cost.used.values(), *self.objs.ctx.cost.used.values()]
        if self.fetcher.used_paths:
            used.append(self.node.copy_engines_h2d)
        for index in sorted(self.fetcher.used_paths):
            used += self.objs.ctx.paths[index].quantities
        if self.fetcher.staged and self.objs.dram is not None:
            used += self.objs.dram.stage.quantities
        if self.write_backs is not None and self.write_backs.used:
            used += [self.node.copy_engines_d2h, *self.write_backs.path.quantities]
        return used

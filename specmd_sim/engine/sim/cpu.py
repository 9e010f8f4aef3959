"""The host CPU running missing experts (``miss: cpu-execute``), shared by every GPU.

One expert at a time; its compute overlaps its weight reads, a flow over the host's DRAM (and,
for an expert stored on NVMe, along the drive's path to the host first) that shares those
resources with the copy engines' DMA reads.
"""

from __future__ import annotations

import math
from collections.abc import Generator
from typing import Any

import simpy

from specmd_sim.engine.sim.flows import FlowNetwork
from specmd_sim.hardware import transfer_path
from specmd_sim.hardware.schema import Quantity
from specmd_sim.models import CostModel
from specmd_sim.scenario import Scenario
from specmd_sim.scenario.placement import TIER_NVME
from specmd_sim.timeline import SpanRecorder


class HostCpu:
    def __init__(self, env: simpy.Environment, scenario: Scenario, spans: SpanRecorder) -> None:
        self.env, self.spans = env, spans
        self.placement = scenario.placement
        self.host = scenario.profile.hosts[0]
        self.resource = simpy.Resource(env, capacity=1)
        self.lane: int | None = None
        self.dram = f"dram:{self.host.id}"
        self.capacity: dict[str, float] = {self.dram: self.host.dram_bandwidth_bytes_per_s.value}
        self.quantities: dict[int, Quantity] = {}  # numbers the CPU's reads depended on, by id
        # CPU reads of experts stored on NVMe: along the drive's path to the host, then DRAM
        self.nvme_read: tuple[tuple[str, ...], float] | None = None
        self.nvme_quantities: tuple[Quantity, ...] = ()
        drive = self.placement.nvme
        if drive is not None:
            path = transfer_path(scenario.profile, drive.id, self.host.id)
            self.capacity.update(path.capacity)
            self.nvme_read = tuple(dict.fromkeys((*path.resources, self.dram))), path.latency_s
            self.nvme_quantities = path.quantities
        self.network: FlowNetwork | None = None  # the machine's, set once it is built

    def read_path(self, key: int) -> tuple[tuple[str, ...], float, int]:
        """Resources, latency and queue depth of the CPU reading expert ``key``."""
        drive = self.placement.nvme
        if drive is None or self.nvme_read is None or self.placement.tier[key] != TIER_NVME:
            self._used(self.host.dram_bandwidth_bytes_per_s)
            return (self.dram,), 0.0, 1
        self._used(*self.nvme_quantities)
        depth = math.ceil(int(self.placement.nbytes[key]) / drive.read_request_bytes.value)
        return (*self.nvme_read, depth)

    def _used(self, *quantities: Quantity) -> None:
        self.quantities.update((id(q), q) for q in quantities)

    def start(
        self,
        cost: CostModel,
        key: int,
        tokens: int,
        klass: int,
        where: dict[str, int],
        pass_tokens: int | None = None,
    ) -> simpy.Process:
        """Run expert ``key`` over ``tokens`` tokens of a pass of ``pass_tokens`` once the CPU
        is free; the process ends when both its compute and its weight reads are done (once
        per run: :meth:`CostModel.cpu_runs`)."""
        if self.lane is None:
            self.lane = self.spans.lane(f"{self.host.id}/cpu-experts")
        nbytes = int(self.placement.nbytes[key])
        resources, latency, depth = self.read_path(key)
        runs, per_run = cost.cpu_runs(tokens, pass_tokens)
        compute, reads = runs * cost.cpu_expert_flops_time(self.host, per_run), runs * nbytes
        return self.env.process(self._execute(cost, key, compute, klass, where, nbytes, reads,
                                              resources, latency, depth))  # fmt: skip

    def _execute(
        self,
        cost: CostModel,
        key: int,
        compute: float,
        klass: int,
        where: dict[str, int],
        nbytes: int,
        read_bytes: int,
        resources: tuple[str, ...],
        latency: float,
        depth: int,
    ) -> Generator[Any, Any, None]:
        env = self.env
        with self.resource.request() as turn:
            yield turn
            start = env.now
            flops = env.timeout(compute)
            assert self.network is not None, "HostCpu.network is set before the run"
            rate = cost.cpu_dram_rate(self.host)
            read = env.process(self.network.transfer(read_bytes, resources, latency, depth, rate))
            yield flops & read
            self.spans.add(
                self.lane if self.lane is not None else -1, "cpu_expert", start, env.now,
                expert=key, klass=int(klass), bytes_=nbytes, **where,
            )  # fmt: skip

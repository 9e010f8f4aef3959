"""CPU execution of missing experts (Fiddler; HybriMoE's CPU/GPU split).

For each missing expert the handler compares two estimates: fetching it to the GPU,
``t_fetch = path latency + expert_bytes / path bandwidth`` (then the GPU runs it), and running it
on the host CPU, ``t_cpu = max(flops / cpu_rate, expert_bytes / dram_rate)`` for the tokens
routed to it in the pass (:meth:`~specmd_sim.models.cost.CostModel.cpu_expert_time`: the rate of
the runtime's CPU kernel on this host, once per token in a pass too short to group its tokens);
``expert_bytes`` are the expert's own
(``precision``), and the fetch estimate uses the path the expert comes by (host DRAM, the NVMe
drive, or a peer GPU's HBM in expert-sharded runs).

- ``mode: fiddler`` (Fiddler, Kamahori et al. 2024): the CPU runs the expert whenever
  ``t_cpu < t_fetch``, each decision on its own.
- ``mode: always`` (kTransformers): every missing expert runs on the CPU.
- ``mode: greedy`` (HybriMoE, Zhong et al. 2025): the layer's misses are dealt out in gate
  order to whichever side would finish it earlier given what that side already took in this
  layer: the CPU if ``cpu_load + t_cpu < gpu_load + t_fetch``, else the GPU; the chosen side's
  load grows by its estimate. Loads restart at every layer.

In the timing engine the CPU runs one expert at a time, and its weight reads are a flow over the
host's DRAM that shares bandwidth with the DMA reads of the copy engines; the layer ends when
both the GPU and the CPU experts are done (waiting for the CPU is stall). Counted in
``activations_cpu``; no bytes move to the GPU.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from specmd_sim.cache import ExpertCache
from specmd_sim.policies.context import RunContext
from specmd_sim.policies.miss.base import CPU, FETCH, MissDecision, MissHandler
from specmd_sim.policies.plugin import PluginConfig
from specmd_sim.policies.registry import MISS


class CPUExecuteConfig(PluginConfig):
    kind: Literal["cpu-execute"] = "cpu-execute"
    mode: Literal["fiddler", "greedy", "always"] = Field(
        default="fiddler",
        description=(
            "Per-expert comparison (fiddler), a greedy layer split (greedy), or every missing "
            "expert on the CPU (always: kTransformers runs all routed experts there)."
        ),
    )


@MISS.register
class CPUExecuteMiss(MissHandler[CPUExecuteConfig]):
    description = "Run a missing expert on the host CPU when that is faster than fetching it."
    source = "Fiddler (Kamahori et al., 2024); HybriMoE's CPU-GPU split (Zhong et al., 2025)"

    @classmethod
    def fetches_on_demand(cls, config: PluginConfig) -> bool:
        return getattr(config, "mode", "always") != "always"  # (``always``: never fetched)

    def __init__(self, config: PluginConfig, ctx: RunContext) -> None:
        super().__init__(config, ctx)
        self.greedy = self.config.mode == "greedy"
        self.host = ctx.profile.hosts[0]
        self.where = (-1, -1)
        self.cpu_load = self.gpu_load = 0.0

    def cpu_time(self, pass_index: int, layer: int, key: int, nbytes: int) -> float:
        chosen = self.ctx.history.demand_set(pass_index, layer)
        tokens = int(chosen.tokens[chosen.keys.tolist().index(key)])
        pass_tokens = self.ctx.history.pass_info(pass_index).tokens
        return self.ctx.cost.cpu_expert_time(self.host, tokens, nbytes, pass_tokens)

    def decide(
        self, pass_index: int, layer: int, key: int, cache: ExpertCache, taken: set[int]
    ) -> MissDecision:
        if self.config.mode == "always":
            return CPU
        t_fetch = self.ctx.fetch_time(key)
        t_cpu = self.cpu_time(pass_index, layer, key, cache.nbytes[key])
        if not self.greedy:
            return CPU if t_cpu < t_fetch else FETCH
        if self.where != (pass_index, layer):
            self.where, self.cpu_load, self.gpu_load = (pass_index, layer), 0.0, 0.0
        if self.cpu_load + t_cpu < self.gpu_load + t_fetch:
            self.cpu_load += t_cpu
            return CPU
        self.gpu_load += t_fetch
        return FETCH

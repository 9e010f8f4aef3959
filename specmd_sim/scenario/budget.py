"""The GPU memory budget: what HBM holds besides the expert cache.

``experts = HBM - non-expert weights - KV cache - workspace [- own expert shard]``

- non-expert weights: attention, routers and shared experts of every MoE layer, the dense
  layers, the embedding and the LM head, at the model's ``dense_dtype``
  (:attr:`~specmd_sim.models.spec.ModelSpec.non_expert_bytes`);
- KV cache (``workload.kv_cache``), at the model's KV bytes per token and layer, over all
  layers: ``reserved``, the workload's longest context (prompt and generated tokens of its
  longest request) times the requests decoded together (``min(batch_size, requests)``), set
  aside before the run; ``evict``, nothing set aside: it grows with the running requests'
  tokens and the expert cache's capacity follows what is left, pass by pass
  (:func:`capacity_schedule`), so the budget shows its peak; ``wait``, the pool that
  ``cache.capacity`` leaves, which requests wait for (``scheduler: continuous``);
- workspace: the runtime profile's ``workspace_bytes`` (CUDA context, allocator slack,
  activations, staging buffers);
- in expert-sharded runs, the GPU's own shard of the routed experts.

``cache.capacity: auto`` takes what is left, in whole expert slots; any other capacity must fit
in it, or the error names every term.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from specmd_sim.units import format_bytes


@dataclass(frozen=True)
class MemoryBudget:
    gpu: str  # node id
    hbm: int
    weights: int
    kv_cache: int
    kv_context: int  # tokens of the longest request
    kv_batch: int  # requests decoded together
    workspace: int
    shard: int  # expert-sharded: the GPU's own experts (0 otherwise)
    kv_mode: str = "reserved"  # workload.kv_cache

    @property
    def without_kv(self) -> int:
        """Bytes HBM leaves for the expert and KV caches together."""
        return self.hbm - self.weights - self.workspace - self.shard

    @property
    def available(self) -> int:
        """Bytes left for the expert cache (negative when even the rest does not fit); with a
        growing KV cache (``evict``), its most: before any KV cache."""
        return self.without_kv - (0 if self.kv_mode == "evict" else self.kv_cache)

    def describe(self) -> str:
        """``HBM 80.0 GB - weights ... = ... for the expert cache``, every term named."""
        plural = "s" if self.kv_batch != 1 else ""
        kv = {
            "reserved": f"KV cache {format_bytes(self.kv_cache)} ({self.kv_context} tokens x "
            f"{self.kv_batch} request{plural})",
            "evict": f"KV cache 0 growing to {format_bytes(self.kv_cache)} ({self.kv_context} "
            f"tokens of up to {self.kv_batch} request{plural}; the expert cache gives way)",
            "wait": f"KV cache pool {format_bytes(self.kv_cache)} (requests wait for it)",
            "paged": f"KV cache pool {format_bytes(self.kv_cache)} (in blocks; requests wait "
            f"for them or are preempted)",
        }[self.kv_mode]
        terms = [
            f"non-expert weights {format_bytes(self.weights)}",
            kv,
            f"runtime workspace {format_bytes(self.workspace)}",
        ]
        if self.shard:
            terms.append(f"own expert shard {format_bytes(self.shard)}")
        return (
            f"{self.gpu} HBM {format_bytes(self.hbm)} - " + " - ".join(terms)
            + f" = {format_bytes(self.available)} for the expert cache"
        )  # fmt: skip

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> MemoryBudget:
        """The inverse of :meth:`as_dict` (a result's ``inputs.memory_budget``)."""
        return cls(
            gpu=data["budget_gpu"], hbm=data["hbm_bytes"], weights=data["non_expert_weight_bytes"],
            kv_cache=data["kv_cache_bytes"], kv_context=data["kv_context_tokens"],
            kv_batch=data["kv_batch"], workspace=data["workspace_bytes"],
            shard=data["expert_shard_bytes"], kv_mode=data.get("kv_cache_mode", "reserved"),
        )  # fmt: skip

    def as_dict(self) -> dict[str, Any]:
        return {
            "budget_gpu": self.gpu,
            "hbm_bytes": self.hbm,
            "non_expert_weight_bytes": self.weights,
            "kv_cache_bytes": self.kv_cache,
            "kv_context_tokens": self.kv_context,
            "kv_batch": self.kv_batch,
            "kv_cache_mode": self.kv_mode,
            "workspace_bytes": self.workspace,
            "expert_shard_bytes": self.shard,
            "budget_available_bytes": self.available,
        }


def capacity_schedule(
    capacity: int, budget: MemoryBudget, kv_tokens: np.ndarray, kv_bytes_per_token: int
) -> np.ndarray:
    """int64 [P]: the expert cache's capacity in each pass when the KV cache grows
    (``kv_cache: evict``): ``capacity``, or less where the KV cache of the tokens resident then
    (``kv_tokens``, :attr:`~specmd_sim.scenario.passes.Passes.kv_resident`) leaves less."""
    left = budget.without_kv - kv_tokens.astype(np.int64) * kv_bytes_per_token
    return np.minimum(capacity, left)

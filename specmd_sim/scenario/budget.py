"""The GPU memory budget: what HBM holds besides the expert cache.

``experts = HBM - non-expert weights - KV cache - workspace [- own expert shard]``

- non-expert weights: attention, routers and shared experts of every MoE layer, the dense
  layers, the embedding and the LM head, at the model's ``dense_dtype``
  (:attr:`~specmd_sim.models.spec.ModelSpec.non_expert_bytes`);
- KV cache: the workload's longest context (prompt and generated tokens of its longest request)
  times the requests decoded together (``min(batch_size, requests)``), at the model's KV bytes
  per token and layer, over all layers;
- workspace: the runtime profile's ``workspace_bytes`` (CUDA context, allocator slack,
  activations, staging buffers);
- in expert-sharded runs, the GPU's own shard of the routed experts.

``cache.capacity: auto`` takes what is left, in whole expert slots; any other capacity must fit
in it, or the error names every term.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

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

    @property
    def available(self) -> int:
        """Bytes left for the expert cache (negative when even the rest does not fit)."""
        return self.hbm - self.weights - self.kv_cache - self.workspace - self.shard

    def describe(self) -> str:
        """``HBM 80.0 GB - weights ... = ... for the expert cache``, every term named."""
        terms = [
            f"non-expert weights {format_bytes(self.weights)}",
            f"KV cache {format_bytes(self.kv_cache)} ({self.kv_context} tokens x "
            f"{self.kv_batch} request{'s' if self.kv_batch != 1 else ''})",
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
            shard=data["expert_shard_bytes"],
        )  # fmt: skip

    def as_dict(self) -> dict[str, Any]:
        return {
            "budget_gpu": self.gpu,
            "hbm_bytes": self.hbm,
            "non_expert_weight_bytes": self.weights,
            "kv_cache_bytes": self.kv_cache,
            "kv_context_tokens": self.kv_context,
            "kv_batch": self.kv_batch,
            "workspace_bytes": self.workspace,
            "expert_shard_bytes": self.shard,
            "budget_available_bytes": self.available,
        }

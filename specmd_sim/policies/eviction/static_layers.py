"""Static layers: the experts of whole layers live on the GPU for good, the others stream.

The placement of runtimes that split a model by layer before the run and never move it:

- Hugging Face Accelerate (``device_map="auto"``) fills the GPU with the first decoder layers
  in module order and offloads every later one (accelerate ``utils/modeling.py``,
  ``infer_auto_device_map``, v0.25.0 d08c23c to v1.14.0 beb0672): ``first: N``;
- llama.cpp's ``--n-cpu-moe N`` keeps the experts of the first N layers in CPU memory and the
  rest on the GPU (``common/common.h`` at 7049736b, ``llm_ffn_exps_block_regex``; PR #15077):
  ``last: layers - N``.

The resident experts are placed before the run (moving no bytes) and never evicted; every other
expert goes through the slots left, least recently used first (with one or two slots: a staging
buffer, nothing reused across tokens). The placement reads no routing, so the policy is online.
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from specmd_sim.errors import SpecmdError
from specmd_sim.policies.context import RunContext
from specmd_sim.policies.eviction.base import ResidentAndLRU
from specmd_sim.policies.plugin import PluginConfig
from specmd_sim.policies.registry import EVICTION


class StaticLayersConfig(PluginConfig):
    kind: Literal["static-layers"] = "static-layers"
    first: int = Field(
        default=0, ge=0, description="The first N MoE layers' experts stay on the GPU."
    )
    last: int = Field(
        default=0, ge=0, description="The last N MoE layers' experts stay on the GPU."
    )


@EVICTION.register
class StaticLayersEviction(ResidentAndLRU[StaticLayersConfig]):
    description = "Whole layers' experts resident for good (first / last N); the rest LRU."
    source = "layer splits of Hugging Face Accelerate (device_map) and llama.cpp (--n-cpu-moe)"

    def __init__(self, config: PluginConfig, ctx: RunContext) -> None:
        super().__init__(config, ctx)
        first, last, layers = self.config.first, self.config.last, ctx.num_layers
        if first + last > layers:
            raise SpecmdError(
                f"eviction static-layers: first + last must be at most the model's {layers} MoE "
                f"layers, got {first} + {last}"
            )
        resident = [*range(first), *range(layers - last, layers)]
        keys = [layer * ctx.num_experts + e for layer in resident for e in range(ctx.num_experts)]
        self.place([k for k in keys if ctx.source[k] >= 0])  # (a GPU's own shard is there)
        if len(self.resident) >= ctx.slots:
            raise SpecmdError(
                f"eviction static-layers: the {len(resident)} resident layers' "
                f"{len(self.resident)} experts need fewer than the cache's {ctx.slots} slots "
                "(at least one slot streams the others)"
            )

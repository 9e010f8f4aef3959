"""Pre-gated prefetch (Pre-gated MoE): layer ``l`` computes the next layer's gate, so the next
layer's experts are known exactly one layer ahead (``lookahead`` layers with a deeper pre-gate).
Unlike ``oracle`` it never looks past its pre-gate distance. Offline in the simulator: the
pre-gate's decision is read from the trace's routing of the later layer (the trace records no
pre-gate), which assumes the pre-gate picks what the real gate picks."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from specmd_sim.policies.plugin import PluginConfig
from specmd_sim.policies.prefetch.oracle import OraclePrefetch
from specmd_sim.policies.registry import PREFETCH


class PreGatedConfig(PluginConfig):
    kind: Literal["pre-gated"] = "pre-gated"
    lookahead: int = Field(default=1, ge=1, description="Pre-gate distance in layers.")


@PREFETCH.register
class PreGatedPrefetch(OraclePrefetch):
    Config: ClassVar[type[PluginConfig]] = PreGatedConfig  # wide type: subclasses name theirs
    description = "The next layer's exact experts, from a gate evaluated one layer early."
    source = "Pre-gated MoE (Hwang et al., ISCA 2024)"

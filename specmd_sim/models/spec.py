"""MoE model specifications and the bytes/FLOPs derived from their dimensions.

A routed expert is a SwiGLU FFN: three ``hidden x moe_intermediate`` matrices (gate, up,
down), so ``expert_params = 3 * hidden_size * moe_intermediate_size`` and one token through it
costs ``2 * expert_params`` FLOPs. Bytes per parameter follow the precision
(:mod:`specmd_sim.models.precision`): bf16 2, fp8 1, int4 0.515625 (one fp16 scale per 128),
HQQ 2-bit 0.379, GGUF Q4_K 0.5625, ...

Check: OLMoE-1B-7B's expert is 3 * 2048 * 1024 * 2 B = 12 MiB; its 16 x 64 = 1,024 routed
experts are 12 GiB, so a 5 % cache holds 51 experts (0.6 GiB). Mixtral's expert is 336 MiB.
"""

from __future__ import annotations

from functools import cached_property
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, model_validator

from specmd_sim.models.precision import check_precision, precision
from specmd_sim.schema_base import InputModel
from specmd_sim.units import format_bytes

# a precision name (bf16, fp8, int4, hqq-2bit, q4_k_m, w3g64, ...), checked where it is given
Dtype = Annotated[str, BeforeValidator(check_precision)]
KvDtype = Literal["bf16", "fp16", "fp8", "fp32"]
KV_BYTES: dict[str, int] = {"bf16": 2, "fp16": 2, "fp8": 1, "fp32": 4}
"""Bytes of one key or value element at each KV-cache precision (:data:`KvDtype`)."""

MAX_EXPERTS_PER_LAYER = 32_767  # traces store expert ids as int16
# Flat keys (layer x expert), each with a slot in the cache's and the placement's arrays: 70
# times DeepSeek-V3's 58 x 256.
MAX_ROUTED_EXPERTS = 1 << 20
# Any other dimension: 64 times or more the largest real ones (16,384 hidden, 53,248 FFN units,
# a 256k vocabulary), so that the sizes computed from dimensions stay finite floats.
MAX_DIMENSION = 1 << 24
MAX_WEIGHT_BYTES = 1 << 50  # 1 PiB: 250 times the largest models' (~4 TB); sizes fit int64


class ModelSpec(InputModel):
    """Dimensions of an MoE transformer, as in its ``config.json``."""

    id: str = Field(description="Catalog id, e.g. 'olmoe-1b-7b'.")
    name: str = Field(description="Published model name.")
    source: str = Field(description="Where the dimensions come from.")
    moe_layers: int = Field(ge=1, description="Number of MoE layers (trace layers).")
    dense_layers: int = Field(
        ge=0, le=MAX_DIMENSION, description="Number of layers with a dense FFN instead."
    )
    num_experts: int = Field(
        ge=1, le=MAX_EXPERTS_PER_LAYER, description="Routed experts per MoE layer."
    )
    top_k: int = Field(
        ge=1, description="Experts selected per token per MoE layer (<= num_experts)."
    )
    num_shared_experts: int = Field(
        default=0, ge=0, le=MAX_DIMENSION, description="Always-resident shared experts."
    )
    shared_intermediate_size: int = Field(
        default=0, ge=0, le=MAX_DIMENSION, description="Per shared expert."
    )
    dense_intermediate_size: int = Field(
        default=0, ge=0, le=MAX_DIMENSION, description="FFN width of dense layers."
    )
    hidden_size: int = Field(ge=1, le=MAX_DIMENSION, description="Model width.")
    moe_intermediate_size: int = Field(
        ge=1, le=MAX_DIMENSION, description="Routed expert FFN width."
    )
    num_attention_heads: int = Field(ge=1, le=MAX_DIMENSION)
    num_kv_heads: int = Field(ge=1, le=MAX_DIMENSION)
    head_dim: int = Field(ge=1, le=MAX_DIMENSION)
    attention_params_per_layer: int | None = Field(
        default=None,
        ge=1,
        le=MAX_WEIGHT_BYTES,
        description="Override for non-standard attention (MLA).",
    )
    kv_bytes_per_token_per_layer: int | None = Field(
        default=None,
        ge=1,
        le=MAX_WEIGHT_BYTES,
        description=(
            "Override of KV-cache bytes per token and layer at 2 bytes per value (MLA); "
            "kv_dtype scales it."
        ),
    )
    kv_lora_rank: int | None = Field(
        default=None,
        ge=1,
        le=MAX_DIMENSION,
        description=(
            "MLA's compressed KV width (config.json kv_lora_rank; the cached latent is this "
            "plus the shared RoPE key, kv_bytes_per_token_per_layer / 2 values): what an "
            "absorbed-MLA decode kernel multiplies each cached token by; None: not MLA."
        ),
    )
    vocab_size: int = Field(ge=1, le=MAX_DIMENSION)
    expert_dtype: Dtype = Field(description="Storage precision of routed experts.")
    dense_dtype: Dtype = Field(default="bf16", description="Precision of all non-expert weights.")
    kv_dtype: KvDtype = Field(
        default="bf16", description="Precision of the KV cache's keys and values."
    )

    @model_validator(mode="after")
    def _check_shape(self) -> ModelSpec:
        if self.top_k > self.num_experts:
            raise ValueError(
                f"top_k: expected at most num_experts ({self.num_experts}), got {self.top_k}"
            )
        if self.num_routed_experts > MAX_ROUTED_EXPERTS:
            raise ValueError(
                f"moe_layers x num_experts: expected at most {MAX_ROUTED_EXPERTS:,} routed "
                f"experts, got {self.moe_layers:,} x {self.num_experts:,}"
            )
        if self.kv_lora_rank is not None and (
            self.kv_bytes_per_token_per_layer is None
            or self.kv_lora_rank >= self.kv_bytes_per_token_per_layer // 2
        ):
            raise ValueError(
                "kv_lora_rank: expected below the cached latent's width "
                "(kv_bytes_per_token_per_layer / 2, which must be given with it), got "
                f"{self.kv_lora_rank} with kv_bytes_per_token_per_layer "
                f"{self.kv_bytes_per_token_per_layer}"
            )
        weights = self.routed_bytes + self.non_expert_bytes
        if weights > MAX_WEIGHT_BYTES:
            raise ValueError(
                f"dimensions: expected at most {format_bytes(MAX_WEIGHT_BYTES)} of weights, got "
                f"{format_bytes(weights)}"
            )
        return self

    # --- derived quantities -------------------------------------------------------------

    @property
    def expert_params(self) -> int:
        return 3 * self.hidden_size * self.moe_intermediate_size

    @property
    def expert_bytes(self) -> int:
        """Bytes of one routed expert at ``expert_dtype``."""
        return self.expert_bytes_at(self.expert_dtype)

    def expert_bytes_at(self, dtype: str) -> int:
        """Bytes of one routed expert stored at ``dtype``."""
        return round(self.expert_params * precision(dtype).bytes_per_param)

    @property
    def expert_flops_per_token(self) -> int:
        return 2 * self.expert_params

    @property
    def num_routed_experts(self) -> int:
        return self.moe_layers * self.num_experts

    @property
    def routed_bytes(self) -> int:
        """Bytes of all routed experts: the base of a percentage cache capacity."""
        return self.num_routed_experts * self.expert_bytes

    @cached_property
    def attention_params(self) -> int:
        if self.attention_params_per_layer is not None:
            return self.attention_params_per_layer
        q = self.num_attention_heads * self.head_dim
        kv = self.num_kv_heads * self.head_dim
        return self.hidden_size * (2 * q + 2 * kv)

    @property
    def mla(self) -> tuple[int, int] | None:
        """MLA's cached latent: its width in values (``kv_lora_rank`` plus the shared RoPE
        key's) and ``kv_lora_rank``; None for a model without MLA."""
        if self.kv_lora_rank is None or self.kv_bytes_per_token_per_layer is None:
            return None  # (the validator gives kv_lora_rank only with the bytes)
        return self.kv_bytes_per_token_per_layer // 2, self.kv_lora_rank

    @property
    def kv_bytes_per_token(self) -> int:
        """KV-cache bytes one token adds per layer: keys and values of every KV head (or the
        override), at ``kv_dtype``."""
        at_two_bytes = self.kv_bytes_per_token_per_layer
        if at_two_bytes is None:
            at_two_bytes = 2 * self.num_kv_heads * self.head_dim * 2
        return at_two_bytes * KV_BYTES[self.kv_dtype] // 2

    @property
    def moe_layer_dense_params(self) -> int:
        """Always-resident parameters of one MoE layer: attention, router, shared experts."""
        router = self.hidden_size * self.num_experts
        shared = self.num_shared_experts * 3 * self.hidden_size * self.shared_intermediate_size
        return self.attention_params + router + shared

    @property
    def dense_layer_params(self) -> int:
        return self.attention_params + 3 * self.hidden_size * self.dense_intermediate_size

    @property
    def embedding_params(self) -> int:
        """Token embedding plus LM head (untied)."""
        return 2 * self.vocab_size * self.hidden_size

    @property
    def non_expert_bytes(self) -> int:
        """Bytes of every weight that is not a routed expert, at ``dense_dtype``: attention,
        routers and shared experts of the MoE layers, the dense layers, embedding and LM head
        (the weights a GPU holds besides its expert cache)."""
        params = (
            self.moe_layers * self.moe_layer_dense_params
            + self.dense_layers * self.dense_layer_params
            + self.embedding_params
        )
        return round(params * precision(self.dense_dtype).bytes_per_param)

    @property
    def num_layers(self) -> int:
        return self.moe_layers + self.dense_layers

    def with_dtypes(
        self, expert: str | None, dense: str | None = None, kv: str | None = None
    ) -> ModelSpec:
        """This model with its expert, non-expert and/or KV-cache precision replaced (None
        keeps it)."""
        pairs = (("expert_dtype", expert), ("dense_dtype", dense), ("kv_dtype", kv))
        update = {k: v for k, v in pairs if v}
        return self.model_copy(update=update) if update else self

    def summary(self) -> dict[str, object]:
        """Derived figures for display and JSON output."""
        return {
            "expert_params": self.expert_params,
            "expert_bytes": self.expert_bytes,
            "expert_flops_per_token": self.expert_flops_per_token,
            "num_routed_experts": self.num_routed_experts,
            "routed_bytes": self.routed_bytes,
            "moe_layer_dense_params": self.moe_layer_dense_params,
            "kv_bytes_per_token_per_layer": self.kv_bytes_per_token,
        }

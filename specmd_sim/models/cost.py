"""The compute cost model: a roofline per operation plus a kernel-launch overhead.

``time(op) = max(flops / (peak_flops * compute_efficiency),
                 bytes / (hbm_bandwidth * memory_efficiency)) + kernel_launch_overhead``

Operations per pass (``n`` tokens; token ``i`` at 1-based position ``pos_i`` of its request):

- ``attention`` of an MoE layer: attention projections, router and shared experts
  (``2 * params * n`` FLOPs, reading the weights once) plus the attention itself
  (``4 * heads * head_dim * sum(pos_i)`` FLOPs, reading each request's KV cache once, i.e.
  ``kv_bytes_per_token`` times the sum of the requests' context ends);
- ``expert``: one routed expert over the ``m`` tokens routed to it
  (``2 * expert_params * m`` FLOPs, reading its weights once);
- ``dense layer``: a layer with a dense FFN (DeepSeek's first layers), run at the start of
  each pass as one span per pass (layer -1);
- ``lm_head``: the output projection for one token per request of the pass (the last prompt
  token of a prefill chunk, each request's token of a decode pass).

Peak FLOP/s by dtype: fp8 weights use the GPU's FP8 peak where it has one; int4 weights are
dequantized and run at the BF16 peak (W4A16).

Every hardware number a time is computed from is read through :meth:`CostModel.read`, which
records it in ``used``: a run's lowest grade is derived from what its cost model read.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specmd_sim.hardware.schema import GPUNode, HostNode, Quantity
from specmd_sim.models.spec import BYTES_PER_PARAM, ModelSpec

ACT_BYTES = 2  # bf16 activations


@dataclass(frozen=True)
class CostModel:
    """Times of a model's operations on one GPU, in seconds."""

    model: ModelSpec
    gpu: GPUNode
    # every hardware number read so far, by id (Quantity models are not hashable)
    used: dict[int, Quantity] = field(default_factory=dict, compare=False, repr=False)

    def read(self, quantity: Quantity) -> float:
        """``quantity.value``, recorded as used."""
        self.used[id(quantity)] = quantity
        return quantity.value

    def _peak(self, dtype: str) -> float:
        if dtype == "fp8" and self.gpu.dense_fp8_flops is not None:
            return self.read(self.gpu.dense_fp8_flops)
        return self.read(self.gpu.dense_bf16_flops)

    def op_time(self, flops: float, bytes_: float, dtype: str = "bf16") -> float:
        gpu, read = self.gpu, self.read
        compute = flops / (self._peak(dtype) * read(gpu.compute_efficiency))
        memory = bytes_ / (read(gpu.hbm_bandwidth_bytes_per_s) * read(gpu.memory_efficiency))
        return max(compute, memory) + read(gpu.kernel_launch_overhead_s)

    def _attention(
        self, params: int, tokens: int, attended: int, kv_tokens: int
    ) -> tuple[float, float]:
        m = self.model
        flops = 2.0 * params * tokens + 4.0 * m.num_attention_heads * m.head_dim * attended
        weights = params * BYTES_PER_PARAM[m.dense_dtype]
        kv = kv_tokens * m.kv_bytes_per_token + 2 * tokens * m.hidden_size * ACT_BYTES
        return flops, weights + kv

    def attention_time(self, tokens: int, context_end: int) -> float:
        """Non-expert part of one MoE layer for ``tokens`` consecutive tokens of one request
        ending at position ``context_end``."""
        return self.batch_attention_time(tokens, *_one_request(tokens, context_end))

    def batch_attention_time(self, tokens: int, attended: int, kv_tokens: int) -> float:
        """Non-expert part of one MoE layer for a pass whose tokens' positions sum to
        ``attended`` and whose requests' contexts hold ``kv_tokens`` tokens in all."""
        flops, bytes_ = self._attention(
            self.model.moe_layer_dense_params, tokens, attended, kv_tokens
        )
        return self.op_time(flops, bytes_, self.model.dense_dtype)

    def dense_layers_time(self, tokens: int, attended: int, kv_tokens: int) -> float:
        """All dense-FFN layers of a pass (DeepSeek's first layers); 0 for models without."""
        flops, bytes_ = self._attention(self.model.dense_layer_params, tokens, attended, kv_tokens)
        return self.model.dense_layers * self.op_time(flops, bytes_, self.model.dense_dtype)

    def expert_time(self, tokens: int, dtype: str | None = None) -> float:
        """One routed expert applied to ``tokens`` tokens, its weights stored at ``dtype``
        (default: the model's expert dtype)."""
        m = self.model
        dtype = dtype or m.expert_dtype
        flops = float(m.expert_flops_per_token) * tokens
        bytes_ = m.expert_bytes_at(dtype) + 2 * tokens * m.hidden_size * ACT_BYTES
        return self.op_time(flops, bytes_, dtype)

    def cpu_expert_flops_time(self, host: HostNode, tokens: int) -> float:
        """The compute part of one routed expert on the host CPU, for ``tokens`` tokens."""
        flops = float(self.model.expert_flops_per_token) * tokens
        return flops / (self.read(host.cpu_flops) * self.read(host.cpu_compute_efficiency))

    def cpu_expert_time(self, host: HostNode, tokens: int, nbytes: int | None = None) -> float:
        """One routed expert of ``nbytes`` (default: at the model's dtype) on the CPU alone:
        ``max(flops / (cpu_flops * efficiency), nbytes / dram_bandwidth)`` (weights are read
        from DRAM once; no launch cost)."""
        nbytes = self.model.expert_bytes if nbytes is None else nbytes
        read = nbytes / self.read(host.dram_bandwidth_bytes_per_s)
        return max(self.cpu_expert_flops_time(host, tokens), read)

    def lm_head_time(self, tokens: int = 1) -> float:
        """The output projection for ``tokens`` tokens (one per request of the pass)."""
        m = self.model
        params = m.hidden_size * m.vocab_size
        flops = 2.0 * params * tokens
        return self.op_time(flops, params * BYTES_PER_PARAM[m.dense_dtype], m.dense_dtype)


class IdealCost(CostModel):
    """Every operation takes no time (``timing.ideal``: the check that the timing engine then
    makes exactly the timing-free engine's decisions). Reads no hardware number."""

    def op_time(self, flops: float, bytes_: float, dtype: str = "bf16") -> float:
        return 0.0

    def cpu_expert_flops_time(self, host: HostNode, tokens: int) -> float:
        return 0.0

    def cpu_expert_time(self, host: HostNode, tokens: int, nbytes: int | None = None) -> float:
        return 0.0


def _one_request(tokens: int, context_end: int) -> tuple[int, int]:
    """(sum of positions, KV tokens) of ``tokens`` consecutive tokens ending at ``context_end``."""
    return tokens * context_end - tokens * (tokens - 1) // 2, context_end

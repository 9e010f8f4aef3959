"""The real MoE the executor runs: a catalog model scaled down, float32 weights.

:func:`scaled_model` divides a catalog model's widths (hidden size, expert width, attention
heads, vocabulary) by ``scale`` and keeps its depth, experts, top-k and head size, so a trace of
the full model drives it unchanged. :class:`Weights` draws random weights for it (seeded): per
MoE layer the attention projections and the router, the LM head, and every routed expert as
one contiguous float32 vector ``[gate | up | down]`` in the slow tier (numpy, drawn the same for
every device; :meth:`Weights.moved` puts them on another). The operations below are what the
simulator's cost model prices, one numpy (:class:`Ops`) or torch (:class:`TorchOps`) call per
counted *kernel*:

- attention block (:data:`ATTENTION_KERNELS` calls): q/k/v projections, the KV-cache append,
  scores, softmax, the weighted sum, the output projection, the router;
- one expert call (:data:`EXPERT_KERNELS`): gate and up projections, SiLU (4), product, down;
- the LM head (:data:`TOKEN_KERNELS`).
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from specmd_sim.errors import SpecmdError
from specmd_sim.models import ModelSpec, load_model

# numpy calls per operation (the runtime profile's kernel counts), as numbered in the code
ATTENTION_KERNELS = 12
EXPERT_KERNELS = 8
TOKEN_KERNELS = 1
FLOAT32 = 4


def scaled_model(model_id: str, scale: int) -> ModelSpec:
    """The catalog model ``model_id`` with its widths divided by ``scale`` (float32)."""
    base = load_model(model_id)
    if base.dense_layers or base.num_shared_experts or base.attention_params_per_layer:
        raise SpecmdError(
            f"execute: model: expected a model with only routed-expert layers and standard "
            f"attention, got {model_id} (dense layers, shared experts or MLA)"
        )
    widths = {
        "hidden_size": base.hidden_size,
        "moe_intermediate_size": base.moe_intermediate_size,
        "num_attention_heads": base.num_attention_heads,
        "num_kv_heads": base.num_kv_heads,
        "vocab_size": base.vocab_size,
    }
    small = {k: v // scale for k, v in widths.items()}
    if scale < 1 or min(small.values()) < 1 or base.num_attention_heads % base.num_kv_heads:
        raise SpecmdError(
            f"execute: scale: expected a divisor that leaves every width of {model_id} >= 1 "
            f"({widths}), got {scale}"
        )
    return base.model_copy(
        update={
            **small,
            "id": f"{model_id}-div{scale}",
            "name": f"{base.name} with widths / {scale}",
            "source": f"{base.source}; hidden, expert width, heads and vocabulary / {scale}",
            "expert_dtype": "fp32",
            "dense_dtype": "fp32",
            "kv_dtype": "fp32",
        }
    )


@dataclass(eq=False)
class Layer:
    wq: Any  # [h, heads*d] (numpy, or a torch tensor on a device)
    wk: Any  # [h, kv*d]
    wv: Any
    wo: Any  # [heads*d, h]
    router: Any  # [h, E]


class Weights:
    """Random float32 weights of ``model`` (seeded); the experts live in ``slow``. ``dry``:
    one number per expert (a dry run moves and multiplies nothing). ``device``: where the
    arrays are (``cpu``: numpy)."""

    device = "cpu"
    layers: list[Layer]
    lm_head: Any
    slow: Any

    def __init__(self, model: ModelSpec, seed: int, dry: bool = False) -> None:
        rng = np.random.default_rng(seed)
        h, f, d = model.hidden_size, model.moe_intermediate_size, model.head_dim
        q, kv = model.num_attention_heads * d, model.num_kv_heads * d
        scale = np.float32(1.0 / np.sqrt(h))

        def draw(*shape: int) -> np.ndarray:  # uniform in [-scale, scale): fast to draw
            out = rng.random(shape, dtype=np.float32)
            out -= 0.5
            out *= 2 * scale
            return out

        self.model = model
        self.layers = [
            Layer(draw(h, q), draw(h, kv), draw(h, kv), draw(q, h), draw(h, model.num_experts))
            for _ in range(model.moe_layers)
        ]
        self.lm_head = draw(h, model.vocab_size)
        self.expert_size = 1 if dry else 3 * h * f  # float32 elements of one expert
        self.slow = draw(model.num_routed_experts, self.expert_size)  # the slow tier

    @property
    def expert_nbytes(self) -> int:
        return self.expert_size * FLOAT32

    def moved(self, device: str, dense: Callable[[np.ndarray], Any], slow: Any) -> Weights:
        """These weights on ``device``: every dense array through ``dense``, the slow tier
        ``slow``."""
        out = copy.copy(self)
        out.device, out.slow, out.lm_head = device, slow, dense(self.lm_head)
        out.layers = [Layer(*(dense(a) for a in (w.wq, w.wk, w.wv, w.wo, w.router)))
                      for w in self.layers]  # fmt: skip
        return out


def host_zeros(*shape: int) -> np.ndarray:
    out = np.empty(shape, np.float32)
    out.fill(0.0)  # touched up front: no page faults inside a timed run
    return out


class KvCache:
    """Keys and values of one request for every layer (token-major), grown token by token;
    ``zeros`` makes the arrays (on the compute's device)."""

    def __init__(
        self, model: ModelSpec, capacity: int, zeros: Callable[..., Any] = host_zeros
    ) -> None:
        shape = (model.moe_layers, capacity, model.num_kv_heads * model.head_dim)
        self.k = zeros(*shape)
        self.v = zeros(*shape)


class Ops:
    """The executor's compute, one numpy call per counted kernel."""

    def __init__(self, weights: Weights) -> None:
        m = weights.model
        self.w = weights
        self.heads, self.kv_heads, self.d = m.num_attention_heads, m.num_kv_heads, m.head_dim
        self.h, self.f = m.hidden_size, m.moe_intermediate_size

    def attention(self, x: np.ndarray, layer: int, kv: KvCache, start: int) -> np.ndarray:
        """One layer's attention block for the ``t`` tokens ``x`` at positions ``start..`` of
        one request (:data:`ATTENTION_KERNELS` calls; reshapes and transposes are views)."""
        w, t, d, kvh = self.w.layers[layer], x.shape[0], self.d, self.kv_heads
        group, end = self.heads // kvh, start + t
        q = np.matmul(x, w.wq)  # 1
        np.matmul(x, w.wk, out=kv.k[layer, start:end])  # 2
        np.matmul(x, w.wv, out=kv.v[layer, start:end])  # 3
        q_heads = q.reshape(t, kvh, group, d).transpose(1, 0, 2, 3).reshape(kvh, t * group, d)
        keys = kv.k[layer, :end].reshape(end, kvh, d).transpose(1, 2, 0)  # [kv, d, end]
        values = kv.v[layer, :end].reshape(end, kvh, d).transpose(1, 0, 2)  # [kv, end, d]
        scores = np.matmul(q_heads, keys)  # 4 (the q_heads copy above is part of it)
        scores -= scores.max(axis=-1, keepdims=True)  # 5, 6
        np.exp(scores, out=scores)  # 7
        scores /= scores.sum(axis=-1, keepdims=True)  # 8, 9
        ctx = np.matmul(scores, values)  # 10: [kv, t*group, d]
        out = np.matmul(ctx.reshape(kvh, t, group * d).transpose(1, 0, 2).reshape(t, -1), w.wo)
        np.matmul(x, w.router)  # 12 (the routing itself comes from the trace)
        return out  # 11

    def expert(self, flat: np.ndarray, x: np.ndarray) -> np.ndarray:
        """One SwiGLU expert (weights ``[gate | up | down]``) on the tokens ``x``
        (:data:`EXPERT_KERNELS` calls)."""
        w = flat.reshape(3, self.h, self.f)
        gate = np.matmul(x, w[0])  # 1
        up = np.matmul(x, w[1])  # 2
        act = np.negative(gate)  # 3
        np.exp(act, out=act)  # 4
        act += 1.0  # 5
        gate /= act  # 6: silu(gate)
        gate *= up  # 7
        return np.matmul(gate, w[2].T)  # 8

    def lm_head(self, x: np.ndarray) -> np.ndarray:
        return x @ self.w.lm_head


class TorchOps(Ops):
    """:class:`Ops` in torch (on the weights' device), the same calls in the same order."""

    def __init__(self, weights: Weights, torch: Any) -> None:
        super().__init__(weights)
        self.torch = torch

    def attention(self, x: Any, layer: int, kv: KvCache, start: int) -> Any:
        torch = self.torch
        w, t, d, kvh = self.w.layers[layer], x.shape[0], self.d, self.kv_heads
        group, end = self.heads // kvh, start + t
        q = torch.matmul(x, w.wq)  # 1
        torch.matmul(x, w.wk, out=kv.k[layer, start:end])  # 2
        torch.matmul(x, w.wv, out=kv.v[layer, start:end])  # 3
        q_heads = q.reshape(t, kvh, group, d).transpose(0, 1).reshape(kvh, t * group, d)
        keys = kv.k[layer, :end].reshape(end, kvh, d).permute(1, 2, 0)  # [kv, d, end]
        values = kv.v[layer, :end].reshape(end, kvh, d).transpose(0, 1)  # [kv, end, d]
        scores = torch.matmul(q_heads, keys)  # 4
        scores -= scores.amax(dim=-1, keepdim=True)  # 5, 6
        scores.exp_()  # 7
        scores /= scores.sum(dim=-1, keepdim=True)  # 8, 9
        ctx = torch.matmul(scores, values)  # 10: [kv, t*group, d]
        out = torch.matmul(ctx.reshape(kvh, t, group * d).transpose(0, 1).reshape(t, -1), w.wo)
        torch.matmul(x, w.router)  # 12 (the routing itself comes from the trace)
        return out  # 11

    def expert(self, flat: Any, x: Any) -> Any:
        w = flat.view(3, self.h, self.f)
        gate = self.torch.matmul(x, w[0])  # 1
        up = self.torch.matmul(x, w[1])  # 2
        act = self.torch.neg(gate)  # 3
        act.exp_()  # 4
        act += 1.0  # 5
        gate /= act  # 6: silu(gate)
        gate *= up  # 7
        return self.torch.matmul(gate, w[2].T)  # 8


class NoOps:
    """Compute that takes no time: a dry run measures the executor's own cost."""

    def attention(self, x: Any, layer: int, kv: KvCache, start: int) -> None:
        return None

    def expert(self, flat: Any, x: Any) -> None:
        return None

    def lm_head(self, x: Any) -> None:
        return None

"""Record a Hugging Face MoE model's routing with forward hooks on its router modules.

What is recorded, per forward step (one prompt's prefill, then one step per decoded token):

- at each MoE layer, the router's own outputs: its top-k expert ids and their weights (what the
  experts' outputs are multiplied by: renormalized, scaled, softmaxed over the top-k, as the
  family does), stored by descending weight (the trace format's order; DeepSeek's routers return
  them unsorted, and the sum over experts does not depend on the order);
- the pre-gated predictions: for ``j = 1 .. lookahead``, the router of MoE layer ``l + j``
  applied to the hidden state entering the router of layer ``l`` (after layer ``l``'s attention
  and norm), scored as that router scores its experts (softmax over the logits, or DeepSeek-V3's
  sigmoid plus its correction bias; DeepSeek's group-limited selection is not applied to the
  scores), stored at ``pred_scores[j - 1, t, l + j]``. This is the prediction
  mixtral-offloading's and Pre-gated MoE's prefetchers make.

Each step is checked against the model's own ``output_router_logits`` where the model offers
it: the logits seen by the hooks must be those the model returns, MoE layer by MoE layer, or
the recording stops with an error (a hook on the wrong module would otherwise pass silently).

Decoding is greedy and stops at the model's end-of-sequence token or after ``max_new_tokens``;
requests are the prompts, in order, one at a time.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from specmd_sim.errors import SpecmdError
from specmd_sim.models.spec import ModelSpec
from specmd_sim.record.model import LoadedModel, import_torch
from specmd_sim.traces.trace import DECODE, PREFILL, Trace, make_trace

_LAYER = re.compile(r"\.layers\.(\d+)\.")


@dataclass(frozen=True, eq=False)
class Recording:
    trace: Trace
    model: ModelSpec


@dataclass(frozen=True, eq=False)
class _Router:
    layer: int  # decoder layer index
    module: Any

    @property
    def top_k(self) -> int:
        return int(self.module.top_k)

    @property
    def num_experts(self) -> int:
        return int(self.module.num_experts)


def find_routers(model: Any) -> list[_Router]:
    """The router modules of ``model`` by decoder layer: the class the model's own
    ``router_logits`` output records, else modules named like a router."""
    recorder = getattr(type(model), "_can_record_outputs", None) or {}
    target = getattr(recorder.get("router_logits"), "target_class", None)
    routers = []
    for name, module in model.named_modules():
        is_router = (
            isinstance(module, target)
            if target is not None
            else type(module).__name__.lower().endswith("router")
        )
        if not is_router:
            continue
        match = _LAYER.search(name + ".")
        if match is None or not hasattr(module, "top_k") or not hasattr(module, "weight"):
            raise SpecmdError(
                f"recorder: expected router modules inside model.layers.N with top_k and "
                f"weight, got {name!r} ({type(module).__name__})"
            )
        routers.append(_Router(int(match.group(1)), module))
    if not routers:
        raise SpecmdError(
            f"recorder: expected an MoE model with router modules, got {type(model).__name__} "
            "with none (supported: Mixtral, OLMoE, Qwen2-MoE, Qwen3-MoE, DeepSeek-V2/V3, GPT-OSS)"
        )
    return sorted(routers, key=lambda r: r.layer)


@dataclass
class _Step:
    """What the hooks saw in one forward call: per MoE layer, ids, weights, logits, and the
    predictions made there for later layers."""

    ids: dict[int, np.ndarray] = field(default_factory=dict)
    weights: dict[int, np.ndarray] = field(default_factory=dict)
    logits: dict[int, Any] = field(default_factory=dict)
    preds: dict[tuple[int, int], np.ndarray] = field(default_factory=dict)  # (j, target)


class _Hooks:
    """Forward hooks on the routers and on the model, collecting one :class:`_Step` per call."""

    def __init__(self, model: Any, routers: list[_Router], lookahead: int) -> None:
        self.torch, _ = import_torch()
        self.routers, self.lookahead = routers, lookahead
        self.steps: list[_Step] = []
        self.checked = 0  # steps compared with the model's output_router_logits
        self.handles = [model.register_forward_pre_hook(self._start)]
        self.handles.append(model.register_forward_hook(self._check))
        for index, router in enumerate(routers):
            self.handles.append(router.module.register_forward_hook(self._router_hook(index)))

    def close(self) -> None:
        for handle in self.handles:
            handle.remove()

    def _start(self, module: Any, args: Any) -> None:
        self.steps.append(_Step())

    def _router_hook(self, index: int) -> Callable[..., None]:
        def hook(module: Any, args: Any, output: Any) -> None:
            logits, weights, ids = output[0], output[1], output[2]
            step = self.steps[-1]
            step.ids[index] = ids.detach().cpu().numpy().astype(np.int64)
            step.weights[index] = weights.detach().float().cpu().numpy()
            step.logits[index] = logits.detach()
            hidden = args[0].detach().reshape(-1, module.weight.shape[-1]).float()
            for j in range(1, self.lookahead + 1):
                if index + j < len(self.routers):
                    target = self.routers[index + j].module
                    step.preds[(j, index + j)] = _choice_scores(self.torch, target, hidden)

        return hook

    def _check(self, module: Any, args: Any, output: Any) -> None:
        returned = getattr(output, "router_logits", None)
        if not returned:
            return
        step = self.steps[-1]
        if len(returned) != len(self.routers):
            raise SpecmdError(
                f"recorder: expected {len(self.routers)} MoE layers in the model's "
                f"output_router_logits, got {len(returned)}"
            )
        for index, logits in enumerate(returned):
            mine = step.logits[index].reshape(logits.shape)
            if not self.torch.equal(mine, logits.detach()):
                raise SpecmdError(
                    f"recorder: router hook of MoE layer {index} (decoder layer "
                    f"{self.routers[index].layer}) disagrees with the model's "
                    "output_router_logits"
                )
        self.checked += 1


def _choice_scores(torch: Any, router: Any, hidden: Any) -> np.ndarray:
    """How ``router`` would score the experts for ``hidden``: its logits in float32, then the
    family's score (DeepSeek-V3: sigmoid plus the correction bias it selects by; else softmax)."""
    bias = getattr(router, "bias", None)
    logits = torch.nn.functional.linear(
        hidden, router.weight.float(), None if bias is None else bias.float()
    )
    correction = getattr(router, "e_score_correction_bias", None)
    if correction is not None:
        scores = logits.sigmoid() + correction.float()
    else:
        scores = logits.softmax(dim=-1)
    return np.asarray(scores.cpu().numpy(), np.float32)


def _step_arrays(step: _Step, routers: list[_Router], lookahead: int) -> tuple[np.ndarray, ...]:
    """``(experts [n, L, k], gates [n, L, k], pred [D, n, L, E])`` of one step's ``n`` rows."""
    num_layers, k, num_experts = len(routers), routers[0].top_k, routers[0].num_experts
    missing = [i for i in range(num_layers) if i not in step.ids]
    if missing:
        raise SpecmdError(f"recorder: MoE layers {missing} did not run in a forward step")
    n = step.ids[0].shape[0]
    experts = np.empty((n, num_layers, k), np.int16)
    gates = np.empty((n, num_layers, k), np.float32)
    for index in range(num_layers):
        ids, weights = step.ids[index].reshape(n, k), step.weights[index].reshape(n, k)
        order = np.argsort(-weights, axis=1, kind="stable")
        experts[:, index] = np.take_along_axis(ids, order, axis=1)
        gates[:, index] = np.take_along_axis(weights, order, axis=1)
    pred = np.full((lookahead, n, num_layers, num_experts), np.nan, np.float16)
    for (j, target), scores in step.preds.items():
        pred[j - 1, :, target] = scores.reshape(n, num_experts)
    return experts, gates, pred


def _generate(loaded: LoadedModel, prompt: str, max_new_tokens: int) -> None:
    torch, _ = import_torch()
    model = loaded.model
    ids = torch.tensor([loaded.encode(prompt)], dtype=torch.long, device=model.device)
    with torch.no_grad():
        model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=max_new_tokens + 1,  # the last token generated is never fed back
            do_sample=False,
            pad_token_id=0,
        )


def record_trace(
    loaded: LoadedModel,
    prompts: Sequence[str],
    spec: ModelSpec,
    *,
    max_new_tokens: int = 32,
    lookahead: int = 1,
    progress: Callable[[int, int], None] | None = None,
) -> Recording:
    """Run ``loaded`` on each prompt (greedy) and return its routing as a trace of model
    ``spec`` (derived from the model's config; its id names the trace's model)."""
    if max_new_tokens < 0:
        raise SpecmdError(f"--max-new-tokens: expected >= 0, got {max_new_tokens}")
    if not prompts:
        raise SpecmdError("prompts: expected at least one prompt, got none")
    routers = find_routers(loaded.model)
    found = (len(routers), routers[0].num_experts, routers[0].top_k)
    if (spec.moe_layers, spec.num_experts, spec.top_k) != found:
        raise SpecmdError(
            f"recorder: model spec {spec.id}: expected {found[0]} MoE layers x {found[1]} "
            f"experts, top-{found[2]} as the model runs them, got {spec.moe_layers} x "
            f"{spec.num_experts}, top-{spec.top_k}"
        )
    if not 0 <= lookahead <= len(routers) - 1:
        raise SpecmdError(
            f"--lookahead: expected 0 .. {len(routers) - 1} (MoE layers - 1), got {lookahead}"
        )
    parts: list[tuple[np.ndarray, ...]] = []
    request: list[np.ndarray] = []
    phase: list[np.ndarray] = []
    config = loaded.model.config
    saved = getattr(config, "output_router_logits", None)
    config.output_router_logits = True
    hooks = _Hooks(loaded.model, routers, lookahead)
    steps = 0
    try:
        for number, prompt in enumerate(prompts):
            hooks.steps.clear()
            _generate(loaded, prompt, max_new_tokens)
            steps += len(hooks.steps)
            for s, step in enumerate(hooks.steps):
                arrays = _step_arrays(step, routers, lookahead)
                parts.append(arrays)
                request.append(np.full(arrays[0].shape[0], number, np.int32))
                phase.append(np.full(arrays[0].shape[0], PREFILL if s == 0 else DECODE, np.uint8))
            if progress is not None:
                progress(number + 1, len(prompts))
    finally:
        hooks.close()
        config.output_router_logits = saved
    experts = np.concatenate([p[0] for p in parts])
    gates = np.concatenate([p[1] for p in parts])
    pred = np.concatenate([p[2] for p in parts], axis=1)
    trace = make_trace(
        experts,
        model=spec.id,
        num_experts=routers[0].num_experts,
        request=np.concatenate(request),
        phase=np.concatenate(phase),
        gates=gates,
        pred_scores=pred if lookahead else None,
        source="recorder",
        **_meta(loaded, routers, spec, max_new_tokens, lookahead),
        checked_steps={"forward_steps": steps, "checked_against_router_logits": hooks.checked},
    )
    return Recording(trace, spec)


def _meta(
    loaded: LoadedModel, routers: list[_Router], spec: ModelSpec, new_tokens: int, lookahead: int
) -> dict[str, Any]:
    torch, transformers = import_torch()
    return {
        "recorded_by": "specmd trace record",
        "hf_model": loaded.ref,
        "model_type": str(loaded.model.config.model_type),
        "random_weights": loaded.random_weights,
        "torch_dtype": str(next(loaded.model.parameters()).dtype).removeprefix("torch."),
        "moe_layer_indices": [r.layer for r in routers],
        "gates_are": "the router's own expert weights, as the model multiplies the experts by them",
        "pred_scores_are": (
            "pre-gated: the router of MoE layer l+j applied to the router input of layer l"
            if lookahead
            else None
        ),
        "decoding": {"greedy": True, "max_new_tokens": new_tokens},
        "versions": {"torch": torch.__version__, "transformers": transformers.__version__},
        "model_spec": spec.model_dump(mode="json"),
    }

"""The recorder on tiny random models of every supported family (no downloads).

The reference is independent of the recorder's hooks: the generated token ids run again in one
forward pass without a cache and with ``output_router_logits``, and each family's published
routing rule (written out below, from the model papers) turns the returned logits into expert
ids and weights. The trace must hold exactly those ids, each row by descending weight.

CI installs the ``record`` extra and sets ``SPECMD_REQUIRE_RECORD=1``, so these tests run there
instead of skipping.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

if os.environ.get("SPECMD_REQUIRE_RECORD"):
    import torch
    import transformers
else:
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")

from specmd_sim.errors import SpecmdError
from specmd_sim.models.hf_config import spec_from_hf_config
from specmd_sim.record import record_trace
from specmd_sim.record.model import LoadedModel
from specmd_sim.record.recorder import find_routers

VOCAB = 96
COMMON = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    intermediate_size=48,
    num_hidden_layers=4,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=256,
)
MLA = dict(kv_lora_rank=16, qk_rope_head_dim=4, qk_nope_head_dim=4, v_head_dim=8)

# family -> (config class name, its own keys): 8 experts, top-2 (top-3 where it varies)
FAMILIES: dict[str, tuple[str, dict[str, Any]]] = {
    "mixtral": ("MixtralConfig", dict(num_local_experts=8, num_experts_per_tok=2)),
    "olmoe": ("OlmoeConfig", dict(num_experts=8, num_experts_per_tok=3)),
    "qwen2_moe": (
        "Qwen2MoeConfig",
        dict(
            num_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=16,
            shared_expert_intermediate_size=32,
        ),
    ),
    "qwen3_moe": (
        "Qwen3MoeConfig",
        dict(
            num_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=16,
            head_dim=8,
            norm_topk_prob=True,
            mlp_only_layers=[1],  # a dense layer among the MoE layers
        ),
    ),
    "deepseek_v2": (
        "DeepseekV2Config",
        dict(
            n_routed_experts=8,
            num_experts_per_tok=3,
            moe_intermediate_size=16,
            n_shared_experts=2,
            first_k_dense_replace=1,
            q_lora_rank=None,
            routed_scaling_factor=1.0,
            **MLA,
        ),
    ),
    "deepseek_v3": (
        "DeepseekV3Config",
        dict(
            n_routed_experts=8,
            num_experts_per_tok=2,
            moe_intermediate_size=16,
            n_shared_experts=1,
            first_k_dense_replace=1,
            q_lora_rank=16,
            n_group=2,
            topk_group=1,
            routed_scaling_factor=2.5,
            **MLA,
        ),
    ),
    "gpt_oss": ("GptOssConfig", dict(num_local_experts=8, num_experts_per_tok=2, head_dim=8)),
}


def tiny_model(family: str, seed: int = 0) -> LoadedModel:
    cls, own = FAMILIES[family]
    config = getattr(transformers, cls)(**COMMON, **own)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    model.generation_config.eos_token_id = None  # decode the full count (tokens are random)
    if family == "deepseek_v3":  # a non-zero correction bias, so that it is tested
        with torch.no_grad():
            for router in find_routers(model):
                router.module.e_score_correction_bias.uniform_(-0.05, 0.05)
    return LoadedModel(model, lambda text: [b % VOCAB for b in text.encode()], family, True)


def spec_of(loaded: LoadedModel) -> Any:
    return spec_from_hf_config(loaded.model.config.to_dict(), model_id="tiny", source="test")


def reference(config: Any, logits: np.ndarray, router: Any) -> tuple[np.ndarray, np.ndarray]:
    """Each family's routing rule on router logits ``[T, E]``: ids and weights ``[T, k]``."""
    k = int(router.top_k)
    family = config.model_type
    if family == "gpt_oss":  # top-k of the logits, softmax over them
        ids = np.argsort(-logits, axis=1, kind="stable")[:, :k]
        top = np.take_along_axis(logits, ids, axis=1)
        w = np.exp(top - top.max(axis=1, keepdims=True))
        return ids, w / w.sum(axis=1, keepdims=True)
    if family == "deepseek_v3":  # sigmoid + bias, best groups by their top-2 sum, then top-k
        scores = 1 / (1 + np.exp(-logits))
        choice = scores + router.e_score_correction_bias.detach().numpy()
        groups = choice.reshape(len(choice), config.n_group, -1)
        group_score = np.sort(groups, axis=2)[:, :, -2:].sum(axis=2)
        best = np.argsort(-group_score, axis=1)[:, : config.topk_group]
        mask = np.zeros_like(group_score, bool)
        np.put_along_axis(mask, best, True, axis=1)
        choice = np.where(np.repeat(mask, groups.shape[2], axis=1), choice, -np.inf)
        ids = np.argsort(-choice, axis=1, kind="stable")[:, :k]
        w = np.take_along_axis(scores, ids, axis=1)
        if config.norm_topk_prob:
            w = w / (w.sum(axis=1, keepdims=True) + 1e-20)
        order = np.argsort(-w, axis=1, kind="stable")  # the trace's order: by weight
        w = np.take_along_axis(w, order, axis=1) * config.routed_scaling_factor
        return np.take_along_axis(ids, order, axis=1), w
    probs = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs /= probs.sum(axis=1, keepdims=True)
    ids = np.argsort(-probs, axis=1, kind="stable")[:, :k]
    w = np.take_along_axis(probs, ids, axis=1)
    if family == "mixtral" or getattr(config, "norm_topk_prob", False):
        w = w / w.sum(axis=1, keepdims=True)
    return ids, w * getattr(config, "routed_scaling_factor", 1.0)


def generated_ids(loaded: LoadedModel, prompt: str, new_tokens: int) -> Any:
    ids = torch.tensor([loaded.encode(prompt)])
    with torch.no_grad():
        out = loaded.model.generate(
            input_ids=ids,
            attention_mask=torch.ones_like(ids),
            max_new_tokens=new_tokens + 1,
            do_sample=False,
            pad_token_id=0,
        )
    return out[:, : ids.shape[1] + new_tokens]  # the tokens fed to the model


PROMPTS = ["def add(a, b):\n    return", "The capital of France is"]
NEW = 5


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_ids_and_gates_equal_the_routers_own(family: str) -> None:
    loaded = tiny_model(family)
    trace = record_trace(loaded, PROMPTS, spec_of(loaded), max_new_tokens=NEW).trace
    config = loaded.model.config
    routers = find_routers(loaded.model)
    lengths = [len(loaded.encode(p)) for p in PROMPTS]
    assert trace.num_tokens == sum(lengths) + NEW * len(PROMPTS)
    steps = (NEW + 1) * len(PROMPTS)  # each prompt's prefill and its decode steps
    assert trace.meta["checked_steps"] == {
        "forward_steps": steps,
        "checked_against_router_logits": steps,
    }
    assert trace.num_layers == len(routers) and trace.num_experts == 8
    for number, prompt in enumerate(PROMPTS):
        rows = np.flatnonzero(trace.request == number)
        assert (trace.phase[rows] == np.r_[np.zeros(lengths[number]), np.ones(NEW)]).all()
        with torch.no_grad():
            out = loaded.model(
                input_ids=generated_ids(loaded, prompt, NEW), output_router_logits=True
            )
        for layer, router in enumerate(routers):
            logits = out.router_logits[layer].detach().float().numpy()
            ids, weights = reference(config, logits, router.module)
            got = trace.experts[rows, layer]
            assert got.tolist() == ids.tolist(), f"{family} request {number} layer {layer}"
            np.testing.assert_allclose(trace.gates[rows, layer], weights, rtol=2e-5, atol=1e-6)


def test_dense_layers_are_not_trace_layers() -> None:
    for family, moe_layers in (("qwen3_moe", [0, 2, 3]), ("deepseek_v2", [1, 2, 3])):
        loaded = tiny_model(family)
        trace = record_trace(loaded, PROMPTS[:1], spec_of(loaded), max_new_tokens=1).trace
        assert trace.meta["moe_layer_indices"] == moe_layers
        assert trace.num_layers == len(moe_layers)


def test_pre_gated_predictions_apply_the_next_router_to_this_layers_input() -> None:
    """With layer 2's router made equal to layer 1's, the prediction for layer 2 made at
    layer 1 is layer 1's own routing: its top-k are the experts layer 1 selected."""
    loaded = tiny_model("mixtral")
    routers = find_routers(loaded.model)
    with torch.no_grad():
        routers[2].module.weight.copy_(routers[1].module.weight)
    trace = record_trace(loaded, PROMPTS, spec_of(loaded), max_new_tokens=3, lookahead=2).trace
    assert trace.lookahead == 2
    pred = trace.pred_scores.astype(np.float32)
    top = np.argsort(-pred[0, :, 2], axis=1, kind="stable")[:, :2]
    assert (np.sort(top, axis=1) == np.sort(trace.experts[:, 1], axis=1)).all()
    assert np.isnan(pred[0, :, 0]).all() and np.isnan(pred[1, :, :2]).all()
    np.testing.assert_allclose(pred[0, :, 1:].sum(axis=2), 1.0, atol=5e-3)  # softmax scores
    assert not np.isnan(pred[1, :, 2:]).any()


def test_a_hook_on_the_wrong_layer_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    import specmd_sim.record.recorder as recorder

    loaded = tiny_model("olmoe")
    real = recorder.find_routers
    monkeypatch.setattr(recorder, "find_routers", lambda model: real(model)[::-1])
    with pytest.raises(SpecmdError, match="disagrees with the model's output_router_logits"):
        record_trace(loaded, PROMPTS[:1], spec_of(loaded), max_new_tokens=1)


def test_same_seed_same_trace() -> None:
    a = record_trace(tiny_model("qwen2_moe"), PROMPTS, spec_of(tiny_model("qwen2_moe")))
    b = record_trace(tiny_model("qwen2_moe"), PROMPTS, spec_of(tiny_model("qwen2_moe")))
    assert np.array_equal(a.trace.experts, b.trace.experts)
    assert np.array_equal(a.trace.gates, b.trace.gates)


def test_bad_options_are_one_line() -> None:
    loaded = tiny_model("mixtral")
    with pytest.raises(SpecmdError, match=r"--lookahead: expected 0 \.\. 3"):
        record_trace(loaded, PROMPTS, spec_of(loaded), lookahead=4)
    with pytest.raises(SpecmdError, match="--max-new-tokens: expected >= 0"):
        record_trace(loaded, PROMPTS, spec_of(loaded), max_new_tokens=-1)


def test_stored_ids_and_weights_are_bit_for_bit_the_router_outputs() -> None:
    """A hook of the test's own on every router sees what the recorder stores, bit for bit
    (after the format's reordering by weight)."""
    loaded = tiny_model("deepseek_v3")  # unsorted top-k: the reordering matters
    routers = find_routers(loaded.model)
    seen: list[list[tuple[np.ndarray, np.ndarray]]] = [[] for _ in routers]

    def hook(index: int):
        def capture(module: Any, args: Any, output: Any) -> None:
            seen[index].append((output[2].numpy().copy(), output[1].float().numpy().copy()))

        return capture

    handles = [r.module.register_forward_hook(hook(i)) for i, r in enumerate(routers)]
    try:
        trace = record_trace(loaded, PROMPTS, spec_of(loaded), max_new_tokens=NEW).trace
    finally:
        for handle in handles:
            handle.remove()
    for layer in range(len(routers)):
        ids = np.concatenate([i for i, _ in seen[layer]])
        weights = np.concatenate([w for _, w in seen[layer]])
        order = np.argsort(-weights, axis=1, kind="stable")
        assert np.array_equal(trace.experts[:, layer], np.take_along_axis(ids, order, axis=1))
        assert np.array_equal(trace.gates[:, layer], np.take_along_axis(weights, order, axis=1))
    unsorted = [w for _, w in seen[0] if (np.diff(w, axis=1) > 0).any()]
    assert unsorted  # the router gave some rows out of weight order, and they were reordered


def test_a_spec_that_does_not_match_the_model_is_refused() -> None:
    loaded = tiny_model("mixtral")
    wrong = spec_of(loaded).model_copy(update={"moe_layers": 3})
    with pytest.raises(SpecmdError, match="expected 4 MoE layers x 8 experts, top-2"):
        record_trace(loaded, PROMPTS, wrong)

"""The attention core as a kernel of its own, and the decode kernel a runtime names
(``decode_attention``): kTransformers V0.2.1 decodes DeepSeek's MLA with SGLang's grouped
split-KV Triton kernel (``operators/triton_attention.py`` at 65d73ea), absorbed MLA over the cached
latent on a grid of ``batch x ceil(128 heads / 16) x 4 splits`` thread blocks, 32 of an RTX
4090's 128 SMs at batch 1. Checked against hand computations, in the cost model and in a timed
run's passes."""

from __future__ import annotations

import re

import numpy as np
import pytest
import yaml

from specmd_sim import SimConfig, simulate
from specmd_sim.errors import SpecmdError
from specmd_sim.hardware import load_profile
from specmd_sim.models import CostModel, load_model
from specmd_sim.runtime import load_runtime
from specmd_sim.runtime.schema import RuntimeProfile

KT = load_runtime("ktransformers")
XEON = load_profile("xeon6454s-rtx4090")
GPU = XEON.gpus[0]
DSV3 = load_model("deepseek-v3")


def _split_kv() -> RuntimeProfile:
    data = KT.model_dump(mode="json")
    data["decode_attention"]["kernel"]["value"] = "mla-split-kv"
    return RuntimeProfile.model_validate(data)


def test_the_attention_core_follows_the_block() -> None:
    """A layer's non-expert time is the block's roofline (projections, router, shared experts:
    weights read once) plus the core's (scores and values over the cached context), not one
    roofline over both: a compute-bound core does not hide under the block's weight reads."""
    cost = CostModel(DSV3, GPU, KT)
    peak, eff = GPU.dense_bf16_flops.value, GPU.compute_efficiency.value
    bandwidth = GPU.hbm_bandwidth_bytes_per_s.value * GPU.memory_efficiency.value
    for context in (2, 969, 7678):
        core = max(4 * 128 * 128 * context / (peak * eff), context * 1152 / bandwidth)
        assert cost.attention_core_time(context, context) == pytest.approx(core, rel=1e-12)
        flops, nbytes = cost._block(DSV3.moe_layer_dense_params, 1)
        kernels = KT.kernels.attention.value * (GPU.kernel_launch_overhead_s.value
                                                + KT.dispatch_overhead_s.value)  # fmt: skip
        block = cost.op_time(flops, nbytes, DSV3.dense_dtype, 0, 1) + kernels
        assert cost.batch_attention_time(1, context, context) == pytest.approx(
            block + core + KT.layer_overhead_s.value, rel=1e-12
        )
    # the roofline kernel is the default: a decode pass of the profile as bundled (V0.2.0's
    # kernel, 'roofline') costs the same whether or not it is said to decode
    assert cost.batch_attention_time(1, 7678, 7678, decoding=1) == cost.batch_attention_time(
        1, 7678, 7678
    )


def test_the_split_kv_kernel_runs_on_the_sms_its_grid_fills() -> None:
    """2 x 128 heads x (576 + 512) = 278,528 FLOPs per cached token (scores over the latent and
    the RoPE key, values over the latent: triton_attention.py l.108, l.120, l.141), on
    min(1, batch x 8 x 4 / 128) of the GPU; at batch 1 and 7678 tokens of context, 86 us a layer
    on the RTX 4090 (165.2 TFLOPS x 0.6 x 1/4) where the roofline over the whole GPU takes 11
    (reading the 8.8 MB of cached latent at 0.8 x 1,008 GB/s)."""
    cost = CostModel(DSV3, GPU, _split_kv())
    peak, eff = GPU.dense_bf16_flops.value, GPU.compute_efficiency.value
    per_token = 2 * 128 * (576 + 512)
    assert per_token == 278_528
    for batch, share in ((1, 32 / 128), (2, 64 / 128), (4, 1.0), (8, 1.0)):
        attended = batch * 7678
        expected = per_token * attended / (peak * eff * share)
        assert cost.attention_core_time(attended, attended, decoding=batch) == pytest.approx(
            expected, rel=1e-12
        )
    one = cost.attention_core_time(7678, 7678, decoding=1)
    assert one == pytest.approx(86.3e-6, rel=0.01)
    assert CostModel(DSV3, GPU, KT).attention_core_time(7678, 7678) == pytest.approx(
        11.0e-6, rel=0.01
    )
    # a pass that is not a decode pass (a prefill chunk) runs the roofline core
    assert cost.attention_core_time(7678, 7678) == CostModel(DSV3, GPU, KT).attention_core_time(
        7678, 7678
    )


def test_the_mla_kernels_leave_other_models_on_the_roofline() -> None:
    """The kernels a runtime names for MLA are MLA's: a model without (Mixtral) runs the
    roofline core on the same runtime, decode or prefill, and simulates on the bundled profile;
    a GPU that does not state its SMs is refused when the cost model is built, in one line."""
    mixtral = load_model("mixtral-8x7b")
    on_split = CostModel(mixtral, GPU, _split_kv())
    assert not on_split.split_kv and on_split.materialized_new_tokens is None
    plain = CostModel(mixtral, GPU, RuntimeProfile.model_validate(
        {**KT.model_dump(mode="json"), "decode_attention": None, "prefill_attention": None}
    ))  # fmt: skip
    assert on_split.attention_core_time(900, 30, decoding=1) == plain.attention_core_time(900, 30)
    blind = GPU.model_copy(update={"sm_count": None})
    message = (
        "runtime ktransformers: decode_attention 'mla-split-kv': expected the GPU's sm_count, "
        "got none in NVIDIA GeForce RTX 4090"
    )
    with pytest.raises(SpecmdError, match=re.escape(message)):
        CostModel(DSV3, blind, _split_kv())
    CostModel(mixtral, blind, _split_kv())  # (no MLA: the grid is never asked for)
    with pytest.raises(ValueError, match="expected heads_per_cta and kv_splits"):
        data = _split_kv().model_dump(mode="json")
        data["decode_attention"]["kv_splits"] = None
        RuntimeProfile.model_validate(data)


def test_mixtral_runs_on_the_bundled_ktransformers_profile(small_trace) -> None:
    trace = small_trace("mixtral-8x7b")
    result = simulate(SimConfig(trace=str(trace), hardware="xeon6454s-rtx4090",
                                runtime="ktransformers", cache={"capacity": 16},
                                timing={"record_spans": False}))  # fmt: skip
    assert result.metrics["tpot_s"] > 0


def test_the_core_computes_at_the_bf16_peak_whatever_the_cache_holds() -> None:
    """An fp8 KV cache halves the bytes the core reads, not its arithmetic's precision: the
    kernels convert the cache to the activations' bf16 (triton_attention.py l.108, l.120:
    k.to(q.dtype)); the core's FLOPs run at the BF16 peak."""
    fp8 = DSV3.model_copy(update={"kv_dtype": "fp8"})
    cost = CostModel(fp8, GPU, _split_kv())
    peak = GPU.dense_bf16_flops.value * GPU.compute_efficiency.value
    assert cost.attention_core_time(7678, 7678, decoding=1) == pytest.approx(
        278_528 * 7678 / (peak / 4), rel=1e-12
    )
    bandwidth = GPU.hbm_bandwidth_bytes_per_s.value * GPU.memory_efficiency.value
    assert CostModel(fp8, GPU, KT).attention_core_time(7678, 7678) == pytest.approx(
        7678 * 576 / bandwidth, rel=1e-12
    )


def test_only_the_decode_passes_of_a_run_use_the_decode_kernel(kt_pass_durations, tmp_path) -> None:
    """DeepSeek-V3 on kTransformers, one request of a 2-token prompt and 3 decode tokens: each
    decode pass is longer with the split-KV kernel by its 61 layers' core time beyond the
    roofline's at its context (hand computation from the cost model); the prefill pass is the
    same."""
    split = tmp_path / "kt-split-kv.yaml"
    split.write_text(yaml.safe_dump(_split_kv().model_dump(mode="json", exclude_none=True)))
    durations = kt_pass_durations((str(split), "ktransformers"))
    assert durations[0][0] == pytest.approx(durations[1][0], rel=1e-12)  # the prefill pass
    fast, plain = CostModel(DSV3, GPU, _split_kv()), CostModel(DSV3, GPU, KT)
    all_layers = DSV3.moe_layers + DSV3.dense_layers
    for p, context in zip((1, 2, 3), (3, 4, 5), strict=True):  # (a token attends its own)
        extra = fast.attention_core_time(context, context, 1) - plain.attention_core_time(
            context, context
        )
        assert extra > 0
        assert durations[0][p] - durations[1][p] == pytest.approx(all_layers * extra, rel=1e-6)


def test_v020_prefill_materializes_every_score_over_the_allocated_cache() -> None:
    """kTransformers V0.2.0's prefill (the bundled profile): per head, query token and allocated
    cache slot, two batched matmuls writing bf16 scores (2 x 64 and 2 x 512 FLOPs, 2 bytes
    each), the sum (reads 4, writes 2), the scale (2, 2), the mask (2, 2), the softmax to fp32
    (2, 4), the cast back (4, 2) and the einsum with the latent (2 x 512 FLOPs, reads 2), each
    kernel its own roofline; the cache is the prompt plus max_new_tokens (1000: local_chat's
    default). A decode pass and a runtime set to 'roofline' run the roofline core."""
    cost = CostModel(DSV3, GPU, KT)
    peak = GPU.dense_bf16_flops.value * GPU.compute_efficiency.value
    bandwidth = GPU.hbm_bandwidth_bytes_per_s.value * GPU.memory_efficiency.value
    prompt, allocated = 3846, 3846 + 1000
    e = 128 * prompt * allocated
    by_hand = (
        max(128 * e / peak, 2 * e / bandwidth)  # q_pe @ k_pe^T: memory-bound
        + 2 * (1024 * e / peak)  # q_nope @ latent^T and the einsum: compute-bound
        + 26 * e / bandwidth  # add, scale, mask, softmax, cast
    )
    attended = prompt * (prompt + 1) // 2
    pairs = cost.materialized_pairs(np.array([prompt]), np.array([prompt]))
    assert pairs == prompt * allocated
    assert cost.attention_core_time(attended, prompt, prefill_pairs=pairs) == pytest.approx(
        by_hand, rel=1e-12
    )
    assert by_hand == pytest.approx(0.132, rel=0.01)  # a layer: 8.1 s over 61 layers
    # on the eager path a prefill pass's core is this one
    flops, nbytes = cost._block(DSV3.moe_layer_dense_params, prompt)
    block = cost.op_time(flops, nbytes, DSV3.dense_dtype, KT.kernels.attention.value, prompt)
    assert cost.batch_attention_time(
        prompt, attended, prompt, eager=True, prefill_pairs=pairs
    ) == pytest.approx(block + by_hand + KT.layer_overhead_s.value, rel=1e-12)
    # not a prefill pass, or V0.2.1's flash attention: the roofline core
    data = KT.model_dump(mode="json")
    data["prefill_attention"]["kernel"]["value"] = "roofline"
    flash = CostModel(DSV3, GPU, RuntimeProfile.model_validate(data))
    assert flash.materialized_new_tokens is None
    assert cost.attention_core_time(attended, prompt) < by_hand / 10


def test_a_prefill_pass_of_two_prompts_allocates_each_its_own_cache(write_trace, tmp_path) -> None:
    """Continuous batching admits two 600-token prompts in one prefill pass: V0.2.0's kernels
    attend each prompt's 600 queries to its own 600 + 1000 allocated slots (1.92M pairs, not
    1,200 x 2,200), so the pass is longer than with the roofline core by its layers'
    difference (from the cost model); the decode passes are the same."""
    layers, experts, k, prompt = DSV3.moe_layers, DSV3.num_experts, DSV3.top_k, 600
    rows = 2 * (prompt + 2)
    ids = np.argsort(np.random.default_rng(0).random((rows, layers, experts)), axis=2)[:, :, :k]
    trace = write_trace(ids.astype(np.int16), "deepseek-v3", experts,
                        request=np.repeat(np.arange(2, dtype=np.int32), prompt + 2),
                        phase=np.tile(np.r_[np.zeros(prompt), 1, 1], 2).astype(np.uint8),
                        )  # fmt: skip
    data = KT.model_dump(mode="json", exclude_none=True)
    data["prefill_attention"]["kernel"]["value"] = "roofline"
    flash = tmp_path / "kt-flash.yaml"
    flash.write_text(yaml.safe_dump(data))
    runs = [simulate(SimConfig(trace=str(trace), hardware="xeon6454s-rtx4090", runtime=runtime,
                               cache={"capacity": 8}, prefetch={"kind": "none"},
                               miss={"kind": "cpu-execute", "mode": "always"},
                               workload={"scheduler": "continuous", "batch_size": 2,
                                         "prefill_chunk_tokens": 0},
                               timing={"record_spans": False}))
            for runtime in ("ktransformers", str(flash))]  # fmt: skip
    passes = runs[0].per_pass
    assert list(passes["phase"]) == ["prefill", "decode", "decode"]  # both prompts in one pass
    durations = [np.subtract(r.per_pass["end_s"], r.per_pass["start_s"]) for r in runs]
    cost = CostModel(DSV3, GPU, KT)
    pairs = cost.materialized_pairs(np.array([prompt, prompt]), np.array([prompt, prompt]))
    assert pairs == 2 * prompt * (prompt + 1000)
    flat = CostModel(DSV3, GPU, RuntimeProfile.model_validate(data))
    # (attended: 2 x (1 + ... + 600) positions; the eager path takes the longer of the GPU's
    # time and the host's, so the difference is the layers', not the cores' alone)
    n, attended = 2 * prompt, prompt * (prompt + 1)
    per_layer = cost.batch_attention_time(n, attended, n, True, 0, pairs)
    per_layer -= flat.batch_attention_time(n, attended, n, True)
    dense = cost.dense_layers_time(n, attended, n, True, 0, pairs)
    dense -= flat.dense_layers_time(n, attended, n, True)
    assert per_layer > 0.005  # (a layer: 0.13 s at 3846 tokens, test_v020_prefill_...)
    assert durations[0][0] - durations[1][0] == pytest.approx(
        DSV3.moe_layers * per_layer + dense, rel=1e-6
    )
    assert durations[0][1:] == pytest.approx(durations[1][1:], rel=1e-12)

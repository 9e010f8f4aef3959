"""A runtime that captures its decode steps in CUDA graphs but runs its prefill eagerly
(``eager_prefill``: kTransformers V0.2.x, whose graph is captured only inside the decode loop):
on the eager path the host issues each op while the GPU runs those issued, so an operation takes
the longer of its GPU time and its ops' host time. Checked against a hand computation, in the
cost model and in a timed run's passes."""

from __future__ import annotations

import pytest
import yaml

from specmd_sim.hardware import load_profile
from specmd_sim.hardware.topology import host_path
from specmd_sim.models import CostModel, load_model
from specmd_sim.runtime import load_runtime
from specmd_sim.runtime.schema import RuntimeProfile

# the bundled profile without V0.2.0's prefill attention kernels (test_decode_attention.py), so
# that the eager path alone separates the runs compared here
KT = RuntimeProfile.model_validate(
    {**load_runtime("ktransformers").model_dump(mode="json"), "prefill_attention": None}
)
XEON = load_profile("xeon6454s-rtx4090")
DSV3 = load_model("deepseek-v3")


def test_an_eager_operation_takes_the_longer_of_gpu_and_host() -> None:
    eager = KT.eager_prefill
    assert eager is not None
    cost = CostModel(DSV3, XEON.gpus[0], KT)
    op_s = eager.op_overhead_s.value
    launch = XEON.gpus[0].kernel_launch_overhead_s.value
    layer = KT.layer_overhead_s.value
    for tokens in (2, 4096):
        attended = tokens * (tokens - 1) // 2
        flops, nbytes = cost._block(DSV3.moe_layer_dense_params, tokens)
        roofline = cost.op_time(flops, nbytes, DSV3.dense_dtype, 0, tokens)
        roofline += cost.attention_core_time(attended, tokens)
        graphed = roofline + KT.kernels.attention.value * (launch + KT.dispatch_overhead_s.value)
        host = eager.kernels.attention.value * op_s
        assert cost.batch_attention_time(tokens, attended, tokens) == pytest.approx(
            graphed + layer, rel=1e-12
        )
        assert cost.batch_attention_time(tokens, attended, tokens, eager=True) == pytest.approx(
            max(graphed, host) + layer, rel=1e-12
        )
        if tokens == 2:  # a short prompt: the host issues the ops slower than the GPU runs them
            assert host > graphed
        else:  # a long one: the GPU's work hides the host's
            assert graphed > host
    token = KT.token_overhead_s.value  # (the LM head's fixed cost, on either path)
    graphed_head = cost.lm_head_time(1) - token
    assert cost.lm_head_time(1, eager=True) == pytest.approx(
        max(graphed_head, eager.kernels.token.value * op_s) + token, rel=1e-12
    )
    # a runtime without an eager path runs every pass as its kernels say
    plain = RuntimeProfile.model_validate({**KT.model_dump(mode="json"), "eager_prefill": None})
    flat = CostModel(DSV3, XEON.gpus[0], plain)
    assert flat.batch_attention_time(2, 1, 2, eager=True) == flat.batch_attention_time(2, 1, 2)


def test_only_the_prefill_pass_of_a_run_is_eager(kt_pass_durations, tmp_path) -> None:
    """DeepSeek-V3 on kTransformers, one request of a 2-token prompt and 3 decode tokens: the
    prefill pass is longer than without the eager path by its layers' eager time beyond the
    graphed one (hand computation from the cost model); the decode passes are the same."""
    layers = DSV3.moe_layers
    eager, plain = tmp_path / "kt-eager.yaml", tmp_path / "kt-graphed.yaml"
    data = KT.model_dump(mode="json", exclude_none=True)
    eager.write_text(yaml.safe_dump(data))
    data.pop("eager_prefill")
    plain.write_text(yaml.safe_dump(data))
    durations = kt_pass_durations((str(eager), str(plain)))
    cost = CostModel(DSV3, XEON.gpus[0], KT)
    attended = 1  # (positions 0 and 1)
    per_layer = (cost.batch_attention_time(2, attended, 2, eager=True)
                 - cost.batch_attention_time(2, attended, 2))  # fmt: skip
    dense = cost.dense_layers_time(2, attended, 2, eager=True) - cost.dense_layers_time(
        2, attended, 2
    )
    head = cost.lm_head_time(1, eager=True) - cost.lm_head_time(1)
    handoff = cost.handoff_time(host_path(XEON, XEON.gpus[0].id), 2)  # (test_the_hand_off...)
    assert per_layer > 0 and dense >= 0
    assert durations[0][0] - durations[1][0] == pytest.approx(
        layers * (per_layer + handoff) + dense + head, rel=1e-6
    )
    assert durations[0][1:] == pytest.approx(durations[1][1:], rel=1e-12)


def test_the_hand_off_to_cpu_experts_waits_for_its_copies(kt_pass_durations, tmp_path) -> None:
    """kTransformers' eager MoE layer hands its tokens to the CPU experts with copies the host
    waits for (``eager_prefill.blocking_copies``: KExpertsCPU.forward's three ``.cpu()`` and
    one ``.to(device)`` from pageable memory, operators/experts.py l.215-222 at 65d73ea): each
    takes the host link's latency, and they move the tokens' hidden states both ways and their
    experts' ids and weights at its bandwidth. By hand, on xeon6454s-rtx4090 (PCIe 10 us,
    25 GB/s) for DeepSeek-V3's 2-token prefill: a MoE layer waits 4 x 10 us + 2 x (2 x 7168 x 2
    + 8 x (8 + 4)) B / 25 GB/s = 42.30 us, the pass 58 of them longer than without (2.45 ms);
    the decode steps (a CUDA graph whose copies go asynchronously into pinned buffers) are the
    same."""
    eager = KT.eager_prefill
    assert eager is not None and eager.blocking_copies is not None
    link = host_path(XEON, XEON.gpus[0].id)
    pcie = XEON.links[0]
    assert (
        (link.latency_s, link.bandwidth)
        == (10e-6, 25e9)
        == (pcie.latency_s.value, pcie.bandwidth_bytes_per_s.value)
    )
    assert eager.blocking_copies.value == 4 and (DSV3.hidden_size, DSV3.top_k) == (7168, 8)
    cost = CostModel(DSV3, XEON.gpus[0], KT)
    per_layer = 4 * 10e-6 + 2 * (2 * 7168 * 2 + 8 * 12) / 25e9
    assert cost.handoff_time(link, 2) == pytest.approx(per_layer, rel=1e-12)
    used = [id(q) for q in cost.used.values()]
    assert id(pcie.latency_s) in used and id(pcie.bandwidth_bytes_per_s) in used  # (grades)
    assert id(XEON.hosts[0].dram_bandwidth_bytes_per_s) not in used  # (not read)
    with_copies, without = tmp_path / "kt.yaml", tmp_path / "kt-no-copies.yaml"
    data = KT.model_dump(mode="json", exclude_none=True)
    with_copies.write_text(yaml.safe_dump(data))
    del data["eager_prefill"]["blocking_copies"]
    without.write_text(yaml.safe_dump(data))
    durations = kt_pass_durations((str(with_copies), str(without)))
    assert DSV3.moe_layers == 58
    assert durations[0][0] - durations[1][0] == pytest.approx(58 * per_layer, rel=1e-6)
    assert durations[0][1:] == pytest.approx(durations[1][1:], rel=1e-12)
    # a runtime that states none waits for none
    assert CostModel(DSV3, XEON.gpus[0], load_runtime("hf-eager")).handoff_time(link, 2) == 0.0

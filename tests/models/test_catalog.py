from __future__ import annotations

import pytest

from specmd_sim.errors import SpecmdError
from specmd_sim.models import list_models, load_model
from specmd_sim.units import GiB, MiB

EXPECTED_IDS = {
    "olmoe-1b-7b", "mixtral-8x7b", "deepseek-v2-lite", "qwen1.5-moe-a2.7b", "qwen3-30b-a3b",
    "deepseek-v3",
}  # fmt: skip


def test_catalog_has_the_required_models() -> None:
    assert {m.id for m in list_models()} >= EXPECTED_IDS


def test_olmoe_matches_specmd_figures() -> None:
    m = load_model("olmoe-1b-7b")
    assert m.expert_bytes == 12 * MiB
    assert m.num_routed_experts == 1024
    assert m.routed_bytes == 12 * GiB
    five_percent = int(0.05 * m.routed_bytes)
    assert five_percent // m.expert_bytes == 51
    assert five_percent / GiB == pytest.approx(0.6, rel=1e-8)


def test_mixtral_expert_is_336_mib() -> None:
    assert load_model("mixtral-8x7b").expert_bytes == 336 * MiB


@pytest.mark.parametrize(
    ("dtype", "bytes_per_param"), [("bf16", 2.0), ("fp8", 1.0), ("int4", 0.5 + 2 / 128)]
)
def test_dtype_changes_bytes_not_flops(dtype: str, bytes_per_param: float) -> None:
    base = load_model("olmoe-1b-7b")
    m = base.with_dtypes(dtype)
    assert m.expert_bytes == round(3 * 2048 * 1024 * bytes_per_param)
    assert m.expert_flops_per_token == base.expert_flops_per_token == 2 * 3 * 2048 * 1024


def test_deepseek_v3_is_fp8_with_mla_override() -> None:
    m = load_model("deepseek-v3")
    assert m.expert_dtype == "fp8"
    assert m.expert_bytes == 3 * 7168 * 2048
    assert m.attention_params == 187_105_280
    assert m.num_routed_experts == 58 * 256


def test_unknown_model_lists_known_ids() -> None:
    with pytest.raises(SpecmdError, match=r"expected one of .*olmoe-1b-7b.*got 'gpt-5'"):
        load_model("gpt-5")

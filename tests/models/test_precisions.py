"""Weight precisions: bytes per parameter from first principles, published checkpoint sizes, and
one-line errors for names that are not a precision.

Every expected value below is written out by hand from the format's definition (bits per
weight plus per-group metadata), not taken from the code's tables.
"""

from __future__ import annotations

import pytest

from specmd_sim.config import build_config
from specmd_sim.errors import SpecmdError
from specmd_sim.models import load_model
from specmd_sim.models.precision import PRECISIONS, precision

MIXTRAL_EXPERT_PARAMS = 3 * 4096 * 14336  # gate, up, down of hidden 4096 x intermediate 14336


@pytest.mark.parametrize(
    ("name", "bytes_per_param"),
    [
        ("bf16", 2.0),
        ("fp16", 2.0),
        ("fp8", 1.0),
        # GPTQ/AWQ-style: b-bit weights plus one fp16 scale per 128 weights
        ("int8", (8 + 16 / 128) / 8),
        ("int4", (4 + 16 / 128) / 8),
        ("int3", (3 + 16 / 128) / 8),
        ("int2", (2 + 16 / 128) / 8),
        # llama.cpp ggml-common.h block sizes: bytes per block / weights per block
        ("q2_k", 84 / 256),
        ("q3_k", 110 / 256),
        ("q4_k", 144 / 256),
        ("q5_k", 176 / 256),
        ("q6_k", 210 / 256),
        ("q8_0", 34 / 32),
        # generic: b bits plus an fp16 scale and an fp16 zero per group
        ("w3g64", (3 + 32 / 64) / 8),
        ("w4g128", (4 + 32 / 128) / 8),
        ("w2g16", (2 + 32 / 16) / 8),
        ("w8g1", (8 + 32) / 8),
    ],
)
def test_bytes_per_param_from_first_principles(name: str, bytes_per_param: float) -> None:
    assert precision(name).bytes_per_param == pytest.approx(bytes_per_param, rel=1e-12)


def test_int4_is_0_515625() -> None:
    assert precision("int4").bytes_per_param == 0.515625


def test_q4_k_m_is_the_recipes_mean_over_three_matrices() -> None:
    # gate, up at Q4_K (4.5 bits); down at Q6_K (6.5625 bits) in half of the layers, else Q4_K
    q4k, q6k = 144 * 8 / 256, 210 * 8 / 256
    assert q4k == 4.5 and q6k == 6.5625
    bits = (q4k + q4k + (q4k + q6k) / 2) / 3
    assert precision("q4_k_m").bits_per_param == pytest.approx(bits, rel=1e-12)
    assert precision("q4_k_m").bits_per_param == pytest.approx(4.84375, rel=1e-12)


def test_expert_bytes_scale_with_precision() -> None:
    model = load_model("mixtral-8x7b")
    assert model.expert_params == MIXTRAL_EXPERT_PARAMS
    assert model.expert_bytes_at("bf16") == 2 * MIXTRAL_EXPERT_PARAMS == 352_321_536
    assert model.expert_bytes_at("fp8") == MIXTRAL_EXPERT_PARAMS
    assert model.expert_bytes_at("q8_0") == MIXTRAL_EXPERT_PARAMS * 34 // 32
    assert model.expert_bytes_at("q4_k") == MIXTRAL_EXPERT_PARAMS * 144 // 256
    assert model.expert_bytes_at("int4") == round(MIXTRAL_EXPERT_PARAMS * 0.515625)


def test_hqq_2bit_mixtral_expert_matches_the_published_checkpoint() -> None:
    """mixtral-offloading's 2-bit expert file is 66,404,364 B. HQQ nbits=2, group 16, 8-bit
    scale and zero per group, scales quantized in groups of 128 (an fp16 scale and zero each):
    2 + (16 + 32/128) / 16 = 3.015625 bits per weight -> 66,404,352 B (12 B of file header)."""
    bits = 2 + (8 + 8 + 32 / 128) / 16
    assert bits == 3.015625
    by_hand = MIXTRAL_EXPERT_PARAMS * bits / 8
    assert by_hand == 66_404_352
    got = load_model("mixtral-8x7b").expert_bytes_at("hqq-2bit")
    assert got == pytest.approx(by_hand, abs=1)
    assert abs(got - 66_404_364) / 66_404_364 < 1e-5  # within 0.001 %


def test_hqq_3bit_mixtral_expert_matches_the_published_checkpoint() -> None:
    """3-bit HQQ packs 10 weights per int32 (3.2 bits), group 64, scales in groups of 128:
    3.2 + (16 + 32/128) / 64 bits per weight; the released checkpoint is 76.1 MB per expert."""
    bits = 3.2 + (8 + 8 + 32 / 128) / 64
    by_hand = MIXTRAL_EXPERT_PARAMS * bits / 8
    got = load_model("mixtral-8x7b").expert_bytes_at("hqq-3bit")
    assert got == pytest.approx(by_hand, abs=1)
    assert abs(got - 76_091_404) / 76_091_404 < 1e-3  # within 0.1 %


def test_compute_peak_and_quantized_flags() -> None:
    assert precision("fp8").compute == "fp8"
    assert not precision("fp8").quantized
    assert not precision("bf16").quantized and not precision("fp16").quantized
    for name in ("int4", "hqq-2bit", "q4_k_m", "q8_0", "w3g64"):
        assert precision(name).compute == "bf16"
        assert precision(name).quantized
    assert not precision("w16g128").quantized  # 16-bit weights need no dequantization


def test_every_named_precision_has_a_source() -> None:
    for name, p in PRECISIONS.items():
        assert p.name == name
        assert p.source.strip()
        assert 0 < p.bytes_per_param <= (4 if name == "fp32" else 2)  # fp32: the real executor


@pytest.mark.parametrize("name", ["w0g64", "w17g64", "w4g0", "int5", "fp4", "", "W4G64", "bf17"])
def test_bad_names_raise_one_line_naming_the_value(name: str) -> None:
    with pytest.raises(SpecmdError) as info:
        precision(name)
    message = str(info.value)
    assert "\n" not in message
    assert repr(name) in message


def test_config_rejects_an_unknown_expert_dtype_in_one_line() -> None:
    with pytest.raises(SpecmdError) as info:
        build_config({"expert_dtype": "nonsense"})
    message = str(info.value)
    assert "\n" not in message
    assert "expert_dtype" in message and "'nonsense'" in message


def test_config_rejects_a_bad_dense_dtype_and_a_non_string() -> None:
    with pytest.raises(SpecmdError, match=r"dense_dtype.*'w0g64'") as info:
        build_config({"dense_dtype": "w0g64"})
    assert "\n" not in str(info.value)
    with pytest.raises(SpecmdError, match="expert_dtype") as info:
        build_config({"expert_dtype": 4})
    assert "\n" not in str(info.value)


def test_config_accepts_generic_and_named_precisions() -> None:
    config = build_config({"expert_dtype": "w3g64", "dense_dtype": "fp8"})
    assert config.expert_dtype == "w3g64" and config.dense_dtype == "fp8"
    model = load_model("mixtral-8x7b").with_dtypes(config.expert_dtype, config.dense_dtype)
    assert model.expert_bytes == round(MIXTRAL_EXPERT_PARAMS * 3.5 / 8)
    # with_dtypes(None) keeps the model as it is
    assert load_model("mixtral-8x7b").with_dtypes(None).expert_dtype == "bf16"

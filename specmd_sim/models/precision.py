"""Weight precisions: bits per weight plus group-wise quantization metadata -> real bytes.

A precision packs ``bits`` per weight and, per group of ``group_size`` consecutive weights,
``meta_bits`` of metadata (scale, zero point, and for double-quantized schemes their share of
the second-level scales). Bytes per parameter = ``(bits + meta_bits / group_size) / 8``.

Named precisions (sources in each entry) cover what offloading systems ship: ``bf16``/``fp16``,
``fp8`` (native FP8 tensor cores where the GPU has them), GPTQ/AWQ-style ``int8``/``int4``/
``int3``/``int2`` (one fp16 scale per 128 weights; ``int4`` is 0.515625 B/param), HQQ as
mixtral-offloading configures it (``hqq-2bit``, ``hqq-3bit``, ``hqq-4bit``), and llama.cpp's
GGUF block formats (``q2_k`` ... ``q8_0``, and ``q4_k_m``, the mix its Q4_K_M recipe gives an
expert FFN). Any other scheme is written ``w<bits>g<group>``, e.g. ``w3g64``: ``bits`` per
weight and an fp16 scale plus an fp16 zero per group.

``compute`` says which tensor-core peak the matmuls of this precision run at: ``fp8`` uses
the GPU's FP8 peak where it has one; every weight-only quantization is dequantized and runs at
the BF16 peak (W-only quantization, activations in 16 bits). ``quantized`` precisions need
dequantization, whose cost the runtime profile describes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from specmd_sim.errors import SpecmdError


@dataclass(frozen=True)
class Precision:
    name: str
    bits: float  # packed bits per weight
    group_size: int  # weights per metadata group (1 with no metadata)
    meta_bits: float  # metadata bits per group
    compute: Literal["bf16", "fp8"]  # the tensor-core peak its matmuls run at
    quantized: bool  # stored below 16 bits by weight-only quantization (needs dequantization)
    source: str

    @property
    def bits_per_param(self) -> float:
        return self.bits + self.meta_bits / self.group_size

    @property
    def bytes_per_param(self) -> float:
        return self.bits_per_param / 8.0


def _fp(name: str, bits: int, compute: Literal["bf16", "fp8"], source: str) -> Precision:
    return Precision(name, bits, 1, 0.0, compute, False, source)


def _int(bits: int) -> Precision:
    return Precision(
        f"int{bits}", bits, 128, 16.0, "bf16", True,
        f"GPTQ/AWQ-style: {bits}-bit weights, one fp16 scale per group of 128",
    )  # fmt: skip


def _hqq(bits: int, packed: float, group: int, scale_group: int) -> Precision:
    # HQQ with quant_zero and quant_scale: per group an 8-bit scale and an 8-bit zero; the scales
    # are quantized in groups of `scale_group` with an fp16 scale and zero each, the zeros with
    # one global pair: 16 + 32 / scale_group bits per group. 3-bit packs 10 values per int32.
    return Precision(
        f"hqq-{bits}bit", packed, group, 16.0 + 32.0 / scale_group, "bf16", True,
        f"HQQ nbits={bits} ({packed:g} bits packed), group_size={group}, 8-bit scale (groups of "
        f"{scale_group}) and zero: mixtral-offloading's configuration (src/build_model.py, "
        "notebooks/demo.ipynb at ce54518; paper section 4.2); a 2-bit Mixtral expert is "
        "66,404,364 B, a 3-bit one 76.1 MB, as the released checkpoints",
    )  # fmt: skip


def _gguf(name: str, block: int, block_bytes: int, bits: int) -> Precision:
    # a GGUF block of `block` weights takes `block_bytes` bytes: `bits` per weight packed, the
    # rest is the block's scales/mins
    meta = block_bytes * 8 - bits * block
    return Precision(
        name, bits, block, float(meta), "bf16", True,
        f"llama.cpp ggml-common.h: block of {block} weights in {block_bytes} bytes "
        f"({block_bytes * 8 / block:g} bits per weight)",
    )  # fmt: skip


_Q4_K, _Q6_K = 144 * 8 / 256, 210 * 8 / 256  # bits per weight of the two Q4_K_M formats

PRECISIONS: dict[str, Precision] = {
    p.name: p
    for p in (
        _fp(
            "fp32",
            32,
            "bf16",
            "float32 (at the profile's dense_bf16_flops: a profile that "
            "`specmd calibrate` measured holds the float32 rate there)",
        ),
        _fp("bf16", 16, "bf16", "bfloat16"),
        _fp("fp16", 16, "bf16", "float16 (runs at the 16-bit tensor peak)"),
        _fp("fp8", 8, "fp8", "float8 e4m3 weights (per-tensor scale, negligible)"),
        _int(8),
        _int(4),
        _int(3),
        _int(2),
        _hqq(2, 2.0, 16, 128),
        _hqq(3, 3.2, 64, 128),
        _hqq(4, 4.0, 64, 256),
        _gguf("q2_k", 256, 84, 2),
        _gguf("q3_k", 256, 110, 3),
        _gguf("q4_k", 256, 144, 4),
        _gguf("q5_k", 256, 176, 5),
        _gguf("q6_k", 256, 210, 6),
        _gguf("q8_0", 32, 34, 8),
        Precision(
            "q4_k_m",
            4,
            1,
            (2 * _Q4_K + (_Q4_K + _Q6_K) / 2) / 3 - 4,
            "bf16",
            True,
            "llama.cpp Q4_K_M recipe (llama-quant.cpp): ffn_gate/ffn_up in Q4_K (4.5 bits), "
            "ffn_down in Q6_K (6.5625 bits) for half of the layers and Q4_K for the rest; "
            "mean over an expert's three matrices = 4.84 bits per weight",
        ),
    )
}

_GENERIC = re.compile(r"^w(\d+)g(\d+)$")


def precision(name: str) -> Precision:
    """A precision by name: a named one of :data:`PRECISIONS` or ``w<bits>g<group>``."""
    if name in PRECISIONS:
        return PRECISIONS[name]
    match = _GENERIC.match(name)
    if match:
        bits, group = int(match.group(1)), int(match.group(2))
        if 1 <= bits <= 16 and group >= 1:
            return Precision(
                name, bits, group, 32.0, "bf16", bits < 16,
                f"{bits}-bit weights, an fp16 scale and an fp16 zero per group of {group}",
            )  # fmt: skip
    raise SpecmdError(
        f"precision: expected one of {', '.join(PRECISIONS)} or w<bits>g<group> (e.g. w3g64, "
        f"1-16 bits), got {name!r}"
    )


def check_precision(value: object) -> str:
    """Validate a precision name given in a config (pydantic ``before`` validator)."""
    if not isinstance(value, str):
        raise ValueError(f"expected a precision name such as 'bf16' or 'hqq-2bit', got {value!r}")
    try:
        precision(value)
    except SpecmdError as exc:
        raise ValueError(str(exc).removeprefix("precision: ")) from None
    return value

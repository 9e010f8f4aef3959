"""Model specs derived from a Hugging Face ``config.json``.

A checkpoint's ``config.json`` names its family (``model_type``, or an ``architectures`` entry
as a fallback) and holds every dimension :class:`~specmd_sim.models.spec.ModelSpec` needs; the
keys differ by family. :func:`spec_from_hf_config` maps them, per family as ``transformers``
builds the model (``modeling_<family>.py``):

- which layers are MoE layers: all of them (Mixtral, OLMoE, GPT-OSS); DeepSeek layer ``i`` when
  ``i >= first_k_dense_replace`` and ``i % moe_layer_freq == 0`` (DeepSeek's own modeling code;
  ``transformers`` ignores ``moe_layer_freq``, 1 in every published config); Qwen layer ``i``
  when it is not in ``mlp_only_layers`` and ``(i + 1) % decoder_sparse_step == 0``;
- the routed expert's width: ``moe_intermediate_size``, or ``intermediate_size`` for the families
  that have none (Mixtral, OLMoE, GPT-OSS); the dense layers' width is ``intermediate_size``;
- shared experts: DeepSeek ``n_shared_experts`` of ``moe_intermediate_size`` each, Qwen2-MoE one
  of ``shared_expert_intermediate_size``;
- DeepSeek's multi-head latent attention (MLA): its parameters from the LoRA ranks and head
  sizes, and a KV cache of the compressed latent plus the shared RoPE key, ``(kv_lora_rank +
  qk_rope_head_dim) * 2`` bytes per token and layer (as MLA serving engines cache it);
- precisions from ``torch_dtype``/``dtype`` and ``quantization_config``: ``fp8`` (DeepSeek-V3)
  stores experts and dense weights in fp8; ``mxfp4`` (GPT-OSS) stores experts in 4-bit blocks of
  32 with one 8-bit scale, 4.25 bits per weight, which :mod:`~specmd_sim.models.precision` names
  ``w4g128`` (4 bits plus 32 bits of metadata per 128 weights: the same bytes).

Nothing is allocated from a dimension (MoE layers are counted, not listed), so that an absurd
one meets the spec's bounds (:mod:`~specmd_sim.models.spec`) at once; the file itself is read
only up to ``MAX_CONFIG_BYTES``.

Biases, norms and attention sinks are not counted (below 0.1 % of the weights), nor DeepSeek-V3's
multi-token-prediction module (an extra layer that only speculative decoding runs). A checkpoint
built from a config without ``torch_dtype``/``dtype`` is float32 (``fp32``). docs/models.md lists
every key and what the spec cannot express.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_core import InitErrorDetails

from specmd_sim.errors import SpecmdError, from_validation_error
from specmd_sim.models.spec import ModelSpec
from specmd_sim.units import format_bytes

# torch dtype names (as config.json writes them) -> precision names
DTYPES = {
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "float32": "fp32",
    "float": "fp32",
}
# MXFP4 (OCP microscaling): 4-bit e2m1 weights, one 8-bit e8m0 scale per block of 32 = 4.25 bits
# per weight; w4g128 (4 bits, 32 bits of metadata per 128) has exactly these bytes
MXFP4 = "w4g128"
MAX_CONFIG_BYTES = 1 << 24
"""16 MiB: a config.json is a few kB (DeepSeek-V3's: 1.7 kB), those with label maps tens of kB."""


class _Config:
    """A config.json mapping with typed, one-line-error accessors; it remembers the key each
    spec field was copied from, so that an error of the spec names the key."""

    def __init__(self, data: Mapping[str, Any], source: str) -> None:
        self.data, self.source = data, source
        self.origins: dict[str, str] = {}  # spec field -> the config.json key it copies

    def error(self, key: str, expected: str, got: str) -> SpecmdError:
        return SpecmdError(f"model: {self.source}: {key}: expected {expected}, got {got}")

    def integer(self, key: str, default: int | None = None) -> int:
        value = self.data.get(key)
        if value is None:
            if default is not None:
                return default
            raise self.error(key, "an integer", "no such key" if key not in self.data else "null")
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise self.error(key, "a non-negative integer", repr(value))
        return value

    def field(self, name: str, *keys: str, default: int | None = None) -> int:
        """The spec field ``name``, copied from the first of ``keys`` present (aliases of one
        setting; no keys: the key ``name``)."""
        keys = keys or (name,)
        key = next((k for k in keys if self.data.get(k) is not None), keys[0])
        if key in self.data:
            self.origins[name] = key
        return self.integer(key, default)

    def int_list(self, key: str) -> list[int]:
        value = self.data.get(key) or []
        if not isinstance(value, list) or not all(isinstance(v, int) for v in value):
            raise self.error(key, "a list of layer indices", repr(value))
        return value


@dataclass(frozen=True)
class Family:
    model_type: str
    architecture: str  # the transformers class in `architectures`
    fields: Callable[[_Config], dict[str, Any]]  # the family-specific ModelSpec fields


# --- per-family fields ------------------------------------------------------------------------


def _all_moe(c: _Config, experts_key: str) -> dict[str, Any]:
    """Every layer an MoE layer whose experts are ``intermediate_size`` wide."""
    return {
        "moe_layers": c.field("moe_layers", "num_hidden_layers"),
        "dense_layers": 0,
        "num_experts": c.field("num_experts", experts_key),
        "moe_intermediate_size": c.field("moe_intermediate_size", "intermediate_size"),
    }


def _mixtral(c: _Config) -> dict[str, Any]:
    return _all_moe(c, "num_local_experts")


def _olmoe(c: _Config) -> dict[str, Any]:
    return _all_moe(c, "num_experts")


def _gpt_oss(c: _Config) -> dict[str, Any]:
    return _all_moe(c, "num_local_experts")


def _with_dense(c: _Config, moe_layers: int) -> dict[str, Any]:
    dense = c.integer("num_hidden_layers") - moe_layers
    width = c.field("dense_intermediate_size", "intermediate_size") if dense else 0
    return {
        "moe_layers": moe_layers,
        "dense_layers": dense,
        "dense_intermediate_size": width,
        "moe_intermediate_size": c.field("moe_intermediate_size"),
    }


def _qwen_layers(c: _Config) -> dict[str, Any]:
    # transformers >= 5 writes Qwen3-MoE's num_experts as num_local_experts
    experts = c.field("num_experts", "num_experts", "num_local_experts")
    step = c.integer("decoder_sparse_step", 1)
    if step < 1:
        raise c.error("decoder_sparse_step", "an integer >= 1", str(step))
    layers = c.integer("num_hidden_layers")
    dense_only = {
        i for i in c.int_list("mlp_only_layers") if 0 <= i < layers and (i + 1) % step == 0
    }
    moe = layers // step - len(dense_only) if experts > 0 else 0
    return _with_dense(c, moe) | {"num_experts": experts}


def _qwen2_moe(c: _Config) -> dict[str, Any]:
    shared = c.field("shared_intermediate_size", "shared_expert_intermediate_size")
    return _qwen_layers(c) | {
        "num_shared_experts": 1 if shared else 0,
        "shared_intermediate_size": shared,
    }


def _qwen3_moe(c: _Config) -> dict[str, Any]:
    return _qwen_layers(c)


def _deepseek(c: _Config) -> dict[str, Any]:
    first_dense, freq = c.integer("first_k_dense_replace", 0), c.integer("moe_layer_freq", 1)
    if freq < 1:
        raise c.error("moe_layer_freq", "an integer >= 1", str(freq))
    layers = c.integer("num_hidden_layers")
    moe = _multiples_below(layers, freq) - _multiples_below(min(first_dense, layers), freq)
    shared = c.field("num_shared_experts", "n_shared_experts", default=0)
    width = c.field("shared_intermediate_size", "moe_intermediate_size") if shared else 0
    experts = {
        "num_experts": c.field("num_experts", "n_routed_experts"),
        "num_shared_experts": shared,
        "shared_intermediate_size": width,
    }
    return _with_dense(c, moe) | _mla(c) | experts


def _multiples_below(n: int, step: int) -> int:
    """How many of 0, step, 2 step, ... are below ``n``."""
    return -(-n // step)


def _mla(c: _Config) -> dict[str, Any]:
    """DeepSeek's multi-head latent attention: parameters and the latent KV cache."""
    hidden, heads = c.integer("hidden_size"), c.integer("num_attention_heads")
    kv_lora, rope = c.integer("kv_lora_rank"), c.integer("qk_rope_head_dim")
    nope, v = c.integer("qk_nope_head_dim"), c.field("head_dim", "v_head_dim")
    q_out = heads * (nope + rope)
    q_lora = c.data.get("q_lora_rank")
    q = hidden * q_out if q_lora is None else c.integer("q_lora_rank") * (hidden + q_out)
    kv_a = hidden * (kv_lora + rope)  # the latent and the shared RoPE key
    kv_b = kv_lora * heads * (nope + v)  # latent -> per-head K (no RoPE part) and V
    o = heads * v * hidden
    return {
        "attention_params_per_layer": q + kv_a + kv_b + o,
        "kv_bytes_per_token_per_layer": (kv_lora + rope) * 2,  # bf16 cache
        "kv_lora_rank": kv_lora,
        "head_dim": v,
    }


FAMILIES: dict[str, Family] = {
    f.model_type: f
    for f in (
        Family("mixtral", "MixtralForCausalLM", _mixtral),
        Family("olmoe", "OlmoeForCausalLM", _olmoe),
        Family("qwen2_moe", "Qwen2MoeForCausalLM", _qwen2_moe),
        Family("qwen3_moe", "Qwen3MoeForCausalLM", _qwen3_moe),
        Family("deepseek_v2", "DeepseekV2ForCausalLM", _deepseek),
        Family("deepseek_v3", "DeepseekV3ForCausalLM", _deepseek),
        Family("gpt_oss", "GptOssForCausalLM", _gpt_oss),
    )
}


def _notes(family: Family, c: _Config) -> list[str]:
    """What the derived spec approximates or leaves out, said in its ``source``."""
    notes: list[str] = []
    if family.fields is _deepseek:
        d = c.data
        notes.append(
            f"MLA: q_lora {d.get('q_lora_rank') or 'none'}, kv_lora {d['kv_lora_rank']}, "
            f"qk_rope {d['qk_rope_head_dim']}, qk_nope {d['qk_nope_head_dim']}, "
            f"v {d['v_head_dim']}"
        )
        if d.get("num_nextn_predict_layers"):
            notes.append("multi-token-prediction layer not counted")
    quant = c.data.get("quantization_config")
    method = quant.get("quant_method") if isinstance(quant, Mapping) else None
    if method == "fp8":
        notes.append("fp8 checkpoint (its bf16 embedding and LM head counted as fp8)")
    if method == "mxfp4":
        notes.append("mxfp4 experts as w4g128 (4.25 bits per weight)")
    if family.model_type == "gpt_oss":
        notes.append(
            "expert and attention biases, attention sinks and the sliding window of half the "
            "layers not modelled"
        )
    return notes


# --- the common part ----------------------------------------------------------------------------


def _family(c: _Config) -> Family:
    model_type = c.data.get("model_type")
    if isinstance(model_type, str) and model_type in FAMILIES:
        return FAMILIES[model_type]
    by_arch = {f.architecture: f for f in FAMILIES.values()}
    archs = c.data.get("architectures") or []
    for arch in archs if isinstance(archs, list) else []:
        if arch in by_arch:
            return by_arch[arch]
    raise SpecmdError(
        f"model: {c.source}: expected a model_type of {', '.join(FAMILIES)} (or an "
        f"architectures entry {', '.join(by_arch)}), got model_type {model_type!r}"
        + (f" and architectures {archs!r}" if archs else "")
    )


def _attention(c: _Config) -> dict[str, Any]:
    hidden, heads = c.field("hidden_size"), c.field("num_attention_heads")
    if heads < 1:
        raise c.error("num_attention_heads", "an integer >= 1", str(heads))
    return {
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_kv_heads": c.field("num_kv_heads", "num_key_value_heads", default=heads),  # None: MHA
        "head_dim": c.field("head_dim", default=hidden // heads),
        "vocab_size": c.field("vocab_size"),
        "top_k": c.field("top_k", "num_experts_per_tok", "experts_per_token"),  # GPT-OSS has both
    }


def _base_dtype(c: _Config) -> str:
    """The checkpoint's float type; none given is float32, what transformers builds then."""
    key = "torch_dtype" if c.data.get("torch_dtype") is not None else "dtype"
    value = c.data.get(key)
    if value is None:
        return "fp32"
    name = str(value).removeprefix("torch.")
    if name not in DTYPES:
        raise c.error(key, f"one of {', '.join(DTYPES)}", repr(value))
    return DTYPES[name]


def _dtypes(c: _Config, expert_dtype: str | None) -> tuple[str, str]:
    """(expert, dense) precisions; ``expert_dtype`` replaces the config's expert precision."""
    base = _base_dtype(c)
    quant = c.data.get("quantization_config")
    if quant is None:
        return expert_dtype or base, base
    method = quant.get("quant_method") if isinstance(quant, Mapping) else None
    if method == "fp8":  # DeepSeek-V3: block-scaled e4m3 (the scales are 0.002 bits per weight)
        return expert_dtype or "fp8", "fp8"
    if method == "mxfp4":  # GPT-OSS: experts only (modules_to_not_convert: the rest)
        return expert_dtype or MXFP4, base
    if expert_dtype:
        return expert_dtype, base
    raise c.error(
        "quantization_config.quant_method",
        "fp8 or mxfp4 (give another scheme's expert precision, e.g. int4, as expert_dtype / "
        "--expert-dtype)",
        repr(method),
    )


def slug(name: str) -> str:
    """A model id from a name: lowercase letters, digits and dots, the rest as hyphens."""
    return re.sub(r"[^a-z0-9.]+", "-", name.lower()).strip("-") or "model"


def spec_from_hf_config(
    config: Mapping[str, Any],
    *,
    model_id: str | None = None,
    name: str | None = None,
    source: str = "config.json",
    expert_dtype: str | None = None,
) -> ModelSpec:
    """The :class:`ModelSpec` of a Hugging Face ``config.json`` (as a mapping).

    ``name`` defaults to the last part of ``_name_or_path`` or the architecture, ``model_id`` to
    the name in lower case; ``source`` names the file in errors and in the spec;
    ``expert_dtype`` replaces the routed experts' precision the config implies.
    """
    if not isinstance(config, Mapping):
        raise SpecmdError(f"model: {source}: expected a JSON object, got {type(config).__name__}")
    c = _Config(config, source)
    family = _family(c)
    fields = _attention(c) | family.fields(c)
    expert, dense = _dtypes(c, expert_dtype)
    path_name = str(config.get("_name_or_path") or "").rstrip("/").rsplit("/", 1)[-1]
    name = name or path_name or family.architecture
    try:
        return ModelSpec(
            id=model_id or slug(name),
            name=name,
            source=f"{source} ({'; '.join([family.model_type, *_notes(family, c)])})",
            expert_dtype=expert,
            dense_dtype=dense,
            **fields,
        )
    except ValidationError as exc:
        raise from_validation_error(f"model: {source}", _renamed(exc, c.origins)) from None


def _renamed(exc: ValidationError, origins: Mapping[str, str]) -> ValidationError:
    """``exc`` with each spec field copied from a config.json key named by that key."""
    errors = []
    for e in exc.errors(include_url=False):
        loc = e["loc"]
        if loc and loc[0] in origins:
            loc = (origins[str(loc[0])], *loc[1:])
        errors.append(
            InitErrorDetails(type=e["type"], loc=loc, input=e["input"], ctx=e.get("ctx", {}))
        )
    return ValidationError.from_exception_data(exc.title, errors)


def read_hf_config(path: Path) -> Any:
    """The parsed JSON of the ``config.json`` at ``path`` (at most ``MAX_CONFIG_BYTES``), or one
    line saying what is wrong."""
    try:
        size = path.stat().st_size
        if size > MAX_CONFIG_BYTES:
            raise SpecmdError(
                f"model: {path}: size: expected a config.json of at most "
                f"{format_bytes(MAX_CONFIG_BYTES)}, got {size:,} bytes"
            )
        return json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SpecmdError(
            f"model: expected a readable config.json, got {str(path)!r} ({exc.strerror})"
        ) from None
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise SpecmdError(f"model: {path}: expected JSON, got a parse error ({exc})") from None
    except RecursionError:
        raise SpecmdError(f"model: {path}: expected JSON, got nesting too deep to parse") from None


def load_hf_config(
    path: str | Path, *, model_id: str | None = None, expert_dtype: str | None = None
) -> ModelSpec:
    """The spec of the ``config.json`` at ``path``; named after its folder unless the file has
    a ``_name_or_path``."""
    path = Path(path)
    data = read_hf_config(path)
    folder = path.resolve().parent.name
    name = None if isinstance(data, dict) and data.get("_name_or_path") else folder or None
    return spec_from_hf_config(
        data, model_id=model_id, name=name, source=str(path), expert_dtype=expert_dtype
    )

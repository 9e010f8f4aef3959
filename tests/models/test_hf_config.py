"""Model specs derived from Hugging Face ``config.json`` files: the published configs of the
catalog's models give the catalog's entries, GPT-OSS gives its published parameter counts, tiny
configs of the kind ``transformers`` builds give the weights ``transformers`` allocates for
them, and bad configs give one-line errors."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from specmd_sim.cli import app
from specmd_sim.errors import SpecmdError
from specmd_sim.models import ModelSpec, load_model
from specmd_sim.models.hf_config import FAMILIES, load_hf_config, spec_from_hf_config
from specmd_sim.models.precision import precision

# --- the published config.json files (the keys that matter, values as on the Hub) -------------

OLMOE_1B_7B_0924 = {
    "architectures": ["OlmoeForCausalLM"], "attention_bias": False, "clip_qkv": None,
    "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 1024,
    "max_position_embeddings": 4096, "model_type": "olmoe", "norm_topk_prob": False,
    "num_attention_heads": 16, "num_experts": 64, "num_experts_per_tok": 8,
    "num_hidden_layers": 16, "num_key_value_heads": 16, "rope_theta": 10000.0,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "vocab_size": 50304,
}  # fmt: skip
MIXTRAL_8X7B_V01 = {
    "architectures": ["MixtralForCausalLM"], "hidden_act": "silu", "hidden_size": 4096,
    "intermediate_size": 14336, "max_position_embeddings": 32768, "model_type": "mixtral",
    "num_attention_heads": 32, "num_experts_per_tok": 2, "num_hidden_layers": 32,
    "num_key_value_heads": 8, "num_local_experts": 8, "rope_theta": 1000000.0,
    "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "vocab_size": 32000,
}  # fmt: skip
DEEPSEEK_V2_LITE = {
    "architectures": ["DeepseekV2ForCausalLM"], "attention_bias": False,
    "first_k_dense_replace": 1, "hidden_act": "silu", "hidden_size": 2048,
    "intermediate_size": 10944, "kv_lora_rank": 512, "max_position_embeddings": 163840,
    "model_type": "deepseek_v2", "moe_intermediate_size": 1408, "moe_layer_freq": 1,
    "n_group": 1, "n_routed_experts": 64, "n_shared_experts": 2, "norm_topk_prob": False,
    "num_attention_heads": 16, "num_experts_per_tok": 6, "num_hidden_layers": 27,
    "num_key_value_heads": 16, "q_lora_rank": None, "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64, "routed_scaling_factor": 1.0, "scoring_func": "softmax",
    "tie_word_embeddings": False, "topk_group": 1, "topk_method": "greedy",
    "torch_dtype": "bfloat16", "v_head_dim": 128, "vocab_size": 102400,
}  # fmt: skip
QWEN15_MOE_A27B = {
    "architectures": ["Qwen2MoeForCausalLM"], "decoder_sparse_step": 1, "hidden_act": "silu",
    "hidden_size": 2048, "intermediate_size": 5632, "max_position_embeddings": 8192,
    "max_window_layers": 21, "model_type": "qwen2_moe", "moe_intermediate_size": 1408,
    "norm_topk_prob": False, "num_attention_heads": 16, "num_experts": 60,
    "num_experts_per_tok": 4, "num_hidden_layers": 24, "num_key_value_heads": 16,
    "rope_theta": 1000000.0, "shared_expert_intermediate_size": 5632, "sliding_window": 32768,
    "tie_word_embeddings": False, "torch_dtype": "bfloat16", "use_sliding_window": False,
    "vocab_size": 151936,
}  # fmt: skip
QWEN3_30B_A3B = {
    "architectures": ["Qwen3MoeForCausalLM"], "attention_bias": False, "decoder_sparse_step": 1,
    "head_dim": 128, "hidden_act": "silu", "hidden_size": 2048, "intermediate_size": 6144,
    "max_position_embeddings": 40960, "max_window_layers": 48, "mlp_only_layers": [],
    "model_type": "qwen3_moe", "moe_intermediate_size": 768, "norm_topk_prob": True,
    "num_attention_heads": 32, "num_experts": 128, "num_experts_per_tok": 8,
    "num_hidden_layers": 48, "num_key_value_heads": 4, "rope_theta": 1000000.0,
    "sliding_window": None, "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "use_sliding_window": False, "vocab_size": 151936,
}  # fmt: skip
DEEPSEEK_V3 = {
    "architectures": ["DeepseekV3ForCausalLM"], "attention_bias": False, "ep_size": 1,
    "first_k_dense_replace": 3, "hidden_act": "silu", "hidden_size": 7168,
    "intermediate_size": 18432, "kv_lora_rank": 512, "max_position_embeddings": 163840,
    "model_type": "deepseek_v3", "moe_intermediate_size": 2048, "moe_layer_freq": 1,
    "n_group": 8, "n_routed_experts": 256, "n_shared_experts": 1, "norm_topk_prob": True,
    "num_attention_heads": 128, "num_experts_per_tok": 8, "num_hidden_layers": 61,
    "num_key_value_heads": 128, "num_nextn_predict_layers": 1, "q_lora_rank": 1536,
    "qk_nope_head_dim": 128, "qk_rope_head_dim": 64,
    "quantization_config": {
        "activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
        "weight_block_size": [128, 128],
    },
    "routed_scaling_factor": 2.5, "scoring_func": "sigmoid", "tie_word_embeddings": False,
    "topk_group": 4, "topk_method": "noaux_tc", "torch_dtype": "bfloat16", "v_head_dim": 128,
    "vocab_size": 129280,
}  # fmt: skip
GPT_OSS_20B = {
    "architectures": ["GptOssForCausalLM"], "attention_bias": True, "experts_per_token": 4,
    "head_dim": 64, "hidden_act": "silu", "hidden_size": 2880, "intermediate_size": 2880,
    "layer_types": ["sliding_attention", "full_attention"] * 12,
    "max_position_embeddings": 131072, "model_type": "gpt_oss", "num_attention_heads": 64,
    "num_experts_per_tok": 4, "num_hidden_layers": 24, "num_key_value_heads": 8,
    "num_local_experts": 32,
    "quantization_config": {
        "modules_to_not_convert": [
            "model.layers.*.self_attn", "model.layers.*.mlp.router", "model.embed_tokens",
            "lm_head",
        ],
        "quant_method": "mxfp4",
    },
    "sliding_window": 128, "swiglu_limit": 7.0, "tie_word_embeddings": False,
    "torch_dtype": "bfloat16", "vocab_size": 201088,
}  # fmt: skip

PUBLISHED = {
    "olmoe-1b-7b": OLMOE_1B_7B_0924,
    "mixtral-8x7b": MIXTRAL_8X7B_V01,
    "deepseek-v2-lite": DEEPSEEK_V2_LITE,
    "qwen1.5-moe-a2.7b": QWEN15_MOE_A27B,
    "qwen3-30b-a3b": QWEN3_30B_A3B,
    "deepseek-v3": DEEPSEEK_V3,
}
IDENTITY = {"id", "name", "source"}


def total_params(m: ModelSpec) -> int:
    dense = m.non_expert_bytes / precision(m.dense_dtype).bytes_per_param
    return m.num_routed_experts * m.expert_params + round(dense)


# --- published configs against the catalog -----------------------------------------------------


@pytest.mark.parametrize("model_id", list(PUBLISHED))
def test_a_published_config_gives_the_catalog_entry(model_id: str) -> None:
    derived = spec_from_hf_config(PUBLISHED[model_id], model_id=model_id)
    catalog = load_model(model_id)
    assert derived.model_dump(exclude=IDENTITY) == catalog.model_dump(exclude=IDENTITY)
    assert derived.id == model_id
    # the figures the simulator uses, exactly (not just within 1 %)
    for figure in ("expert_bytes", "non_expert_bytes", "kv_bytes_per_token", "routed_bytes"):
        assert getattr(derived, figure) == getattr(catalog, figure), figure


def test_the_catalog_figures_themselves() -> None:
    v3 = spec_from_hf_config(DEEPSEEK_V3)
    assert (v3.moe_layers, v3.dense_layers, v3.num_experts, v3.top_k) == (58, 3, 256, 8)
    assert (v3.expert_dtype, v3.dense_dtype) == ("fp8", "fp8")
    assert v3.attention_params == 187_105_280 and v3.kv_bytes_per_token == 1152
    assert v3.expert_bytes == 3 * 7168 * 2048
    assert v3.source == (
        "config.json (deepseek_v3; MLA: q_lora 1536, kv_lora 512, qk_rope 64, qk_nope 128, v 128; "
        "multi-token-prediction layer not counted; fp8 checkpoint (its bf16 embedding and LM "
        "head counted as fp8))"
    )
    lite = spec_from_hf_config(DEEPSEEK_V2_LITE)
    assert (lite.moe_layers, lite.dense_layers, lite.num_shared_experts) == (26, 1, 2)
    assert "q_lora none, kv_lora 512" in lite.source
    assert lite.attention_params == 13_762_560 and lite.kv_bytes_per_token == 1152
    assert spec_from_hf_config(MIXTRAL_8X7B_V01).expert_bytes == 3 * 4096 * 14336 * 2
    qwen3 = spec_from_hf_config(QWEN3_30B_A3B)
    assert qwen3.head_dim == 128  # explicit: hidden / heads would be 64
    assert qwen3.kv_bytes_per_token == 2 * 4 * 128 * 2


@pytest.mark.parametrize(
    ("model_id", "published"),
    [
        ("olmoe-1b-7b", 6.9e9),  # the model card's "6.9B"
        ("mixtral-8x7b", 46.7e9),  # Mistral's "46.7B total parameters"
        ("deepseek-v2-lite", 15.7e9),  # the DeepSeek-V2 paper's "15.7B"
        ("qwen1.5-moe-a2.7b", 14.3e9),  # the model card's "14.3B"
        ("qwen3-30b-a3b", 30.5e9),  # the model card's "30.5B"
        ("deepseek-v3", 671e9),  # "671B of the main model" (plus 14B of the MTP module)
    ],
)
def test_total_parameters_are_the_published_ones(model_id: str, published: float) -> None:
    assert total_params(spec_from_hf_config(PUBLISHED[model_id])) == pytest.approx(
        published, rel=0.005
    )


def test_ids_and_names_default_from_the_config() -> None:
    m = spec_from_hf_config(MIXTRAL_8X7B_V01 | {"_name_or_path": "mistralai/Mixtral-8x7B-v0.1"})
    assert (m.id, m.name) == ("mixtral-8x7b-v0.1", "Mixtral-8x7B-v0.1")
    assert m.source == "config.json (mixtral)"
    plain = spec_from_hf_config(MIXTRAL_8X7B_V01)
    assert (plain.id, plain.name) == ("mixtralforcausallm", "MixtralForCausalLM")


# --- GPT-OSS ------------------------------------------------------------------------------------


def test_gpt_oss_20b() -> None:
    m = spec_from_hf_config(GPT_OSS_20B, model_id="gpt-oss-20b")
    assert (m.moe_layers, m.dense_layers, m.num_experts, m.top_k) == (24, 0, 32, 4)
    assert (m.hidden_size, m.moe_intermediate_size, m.head_dim) == (2880, 2880, 64)
    assert (m.num_attention_heads, m.num_kv_heads, m.vocab_size) == (64, 8, 201088)
    # MXFP4: 4-bit values, one 8-bit scale per 32 = 4.25 bits, held as w4g128 (the same bytes)
    assert (m.expert_dtype, m.dense_dtype) == ("w4g128", "bf16")
    assert precision(m.expert_dtype).bits_per_param == 4 + 8 / 32
    assert m.expert_bytes == 3 * 2880 * 2880 * 17 // 32 == 13_219_200
    assert m.kv_bytes_per_token == 2 * 8 * 64 * 2
    # OpenAI's model card: 20.91B parameters in total, 3.61B active (without the embedding)
    assert total_params(m) == pytest.approx(20.91e9, rel=0.002)
    active = m.moe_layers * (m.moe_layer_dense_params + m.top_k * m.expert_params)
    assert active + m.vocab_size * m.hidden_size == pytest.approx(3.61e9, rel=0.002)
    assert "mxfp4 experts as w4g128" in m.source and "biases" in m.source


def test_gpt_oss_120b_total_params() -> None:
    m = spec_from_hf_config(GPT_OSS_20B | {"num_hidden_layers": 36, "num_local_experts": 128})
    assert total_params(m) == pytest.approx(116.83e9, rel=0.002)  # OpenAI's model card


# --- tiny configs as transformers writes them (to_dict), against its allocated weights ----------

TINY_COMMON: dict[str, Any] = {
    "architectures": None, "dtype": None, "_name_or_path": "", "vocab_size": 99,
    "hidden_size": 32, "num_attention_heads": 4, "num_key_value_heads": 2,
    "num_experts_per_tok": 2, "tie_word_embeddings": False,
}  # fmt: skip
# (config, routed-expert weights, other weights) of AutoModelForCausalLM.from_config(config)
# in transformers 5.24 (numel, norms and biases left out): the routed experts and the rest
TINY = {
    "mixtral": (
        {"model_type": "mixtral", "num_hidden_layers": 2, "intermediate_size": 64,
         "num_local_experts": 4, "head_dim": None},
        49_152, 12_736,
    ),
    "olmoe": (
        {"model_type": "olmoe", "num_hidden_layers": 2, "intermediate_size": 64,
         "num_experts": 4},
        49_152, 12_736,
    ),
    "qwen2_moe": (  # layer 1 only: 3 is in mlp_only_layers, 0 and 2 fall off the step
        {"model_type": "qwen2_moe", "num_hidden_layers": 4, "intermediate_size": 48,
         "moe_intermediate_size": 16, "shared_expert_intermediate_size": 40,
         "num_experts": 4, "decoder_sparse_step": 2, "mlp_only_layers": [3]},
        6_144, 36_448,
    ),
    "qwen3_moe": (  # transformers 5 writes num_experts as num_local_experts
        {"model_type": "qwen3_moe", "num_hidden_layers": 3, "intermediate_size": 48,
         "moe_intermediate_size": 16, "num_local_experts": 4, "head_dim": 24,
         "mlp_only_layers": [0]},
        12_288, 38_848,
    ),
    "deepseek_v2": (
        {"model_type": "deepseek_v2", "num_hidden_layers": 3, "intermediate_size": 48,
         "moe_intermediate_size": 12, "n_routed_experts": 8, "n_shared_experts": 2,
         "first_k_dense_replace": 1, "kv_lora_rank": 16, "q_lora_rank": None,
         "qk_rope_head_dim": 8, "qk_nope_head_dim": 16, "v_head_dim": 12, "head_dim": 8,
         "num_key_value_heads": 4},
        18_432, 37_568,
    ),
    "deepseek_v3": (
        {"model_type": "deepseek_v3", "num_hidden_layers": 5, "intermediate_size": 37,
         "moe_intermediate_size": 12, "n_routed_experts": 8, "n_shared_experts": 1,
         "first_k_dense_replace": 2, "kv_lora_rank": 16, "q_lora_rank": 32,
         "qk_rope_head_dim": 16, "qk_nope_head_dim": 32, "v_head_dim": 32, "head_dim": 16,
         "qk_head_dim": 48, "num_key_value_heads": 4, "num_nextn_predict_layers": 1},
        27_648, 99_584,
    ),
    "gpt_oss": (
        {"model_type": "gpt_oss", "num_hidden_layers": 2, "intermediate_size": 32,
         "num_local_experts": 4, "head_dim": 8, "attention_bias": True, "sliding_window": 128},
        24_576, 12_736,
    ),
}  # fmt: skip


def test_tiny_configs_cover_every_family() -> None:
    assert set(TINY) == set(FAMILIES)


@pytest.mark.parametrize("family", list(TINY))
def test_a_tiny_config_gives_the_weights_transformers_allocates(family: str) -> None:
    extra, routed, other = TINY[family]
    m = spec_from_hf_config(TINY_COMMON | extra)
    assert m.expert_dtype == m.dense_dtype == "fp32"  # no dtype: transformers builds float32
    assert m.num_routed_experts * m.expert_params == routed
    dense = m.non_expert_bytes // 4
    if family == "qwen2_moe":  # its shared_expert_gate (hidden x 1 per MoE layer) is not counted
        dense += m.moe_layers * m.hidden_size
    assert dense == other


def test_layer_rules() -> None:
    qwen = spec_from_hf_config(TINY_COMMON | TINY["qwen2_moe"][0])
    assert (qwen.moe_layers, qwen.dense_layers, qwen.dense_intermediate_size) == (1, 3, 48)
    assert (qwen.num_shared_experts, qwen.shared_intermediate_size) == (1, 40)
    every_other = DEEPSEEK_V2_LITE | {"moe_layer_freq": 2}  # DeepSeek's modeling code
    m = spec_from_hf_config(every_other)
    assert (m.moe_layers, m.dense_layers) == (13, 14)  # layers 2, 4, ..., 26
    no_shared = spec_from_hf_config(QWEN15_MOE_A27B | {"shared_expert_intermediate_size": 0})
    assert (no_shared.num_shared_experts, no_shared.shared_intermediate_size) == (0, 0)


def test_the_architecture_names_a_family_model_type_does_not() -> None:
    # e.g. Kimi K2: model_type kimi_k2 on the DeepSeek-V3 architecture
    kimi = spec_from_hf_config(DEEPSEEK_V3 | {"model_type": "kimi_k2", "n_routed_experts": 384})
    assert kimi.num_experts == 384 and kimi.source.startswith("config.json (deepseek_v3; MLA")


@pytest.mark.parametrize(
    ("dtype", "expected"),
    [("bfloat16", "bf16"), ("float16", "fp16"), ("float32", "fp32"), (None, "fp32")],
)
def test_dtypes(dtype: str | None, expected: str) -> None:
    config = {k: v for k, v in MIXTRAL_8X7B_V01.items() if k != "torch_dtype"} | {"dtype": dtype}
    m = spec_from_hf_config(config)
    assert m.expert_dtype == m.dense_dtype == expected


def test_expert_dtype_replaces_the_configs() -> None:
    m = spec_from_hf_config(DEEPSEEK_V3, expert_dtype="int4")
    assert (m.expert_dtype, m.dense_dtype) == ("int4", "fp8")
    gptq = QWEN15_MOE_A27B | {"quantization_config": {"quant_method": "gptq", "bits": 4}}
    assert spec_from_hf_config(gptq, expert_dtype="int4").expert_dtype == "int4"


# --- errors: one line naming the file, the key, the expectation and the value ---------------------


def test_errors() -> None:
    with pytest.raises(SpecmdError, match=r"^model: config.json: expected a model_type of mixtral, "
                       r"olmoe, .*gpt_oss .*got model_type 'llama' and architectures"):  # fmt: skip
        spec_from_hf_config({"model_type": "llama", "architectures": ["LlamaForCausalLM"]})
    missing = {k: v for k, v in MIXTRAL_8X7B_V01.items() if k != "num_local_experts"}
    with pytest.raises(SpecmdError, match=r"^model: m.json: num_local_experts: expected an "
                       r"integer, got no such key$"):  # fmt: skip
        spec_from_hf_config(missing, source="m.json")
    with pytest.raises(SpecmdError, match=r"hidden_size: expected a non-negative integer, got '1'"):
        spec_from_hf_config(MIXTRAL_8X7B_V01 | {"hidden_size": "1"})
    with pytest.raises(SpecmdError, match=r"torch_dtype: expected one of bfloat16, .*got 'int8'"):
        spec_from_hf_config(MIXTRAL_8X7B_V01 | {"torch_dtype": "int8"})
    gptq = QWEN15_MOE_A27B | {"quantization_config": {"quant_method": "gptq", "bits": 4}}
    with pytest.raises(SpecmdError, match=r"quant_method: expected fp8 or mxfp4 .*got 'gptq'"):
        spec_from_hf_config(gptq)
    with pytest.raises(SpecmdError, match=r"moe_layers: input should be greater than or equal"):
        spec_from_hf_config(QWEN15_MOE_A27B | {"num_experts": 0})
    with pytest.raises(SpecmdError, match=r"expert_dtype: expected one of fp32, .*got .fp3.$"):
        spec_from_hf_config(MIXTRAL_8X7B_V01, expert_dtype="fp3")


@pytest.mark.parametrize(
    ("config", "key"),
    [
        (MIXTRAL_8X7B_V01, "num_local_experts"),  # the spec's num_experts
        (OLMOE_1B_7B_0924, "num_experts"),
        (DEEPSEEK_V2_LITE, "n_routed_experts"),
        (MIXTRAL_8X7B_V01, "intermediate_size"),  # moe_intermediate_size
        (DEEPSEEK_V2_LITE, "v_head_dim"),  # head_dim
        (MIXTRAL_8X7B_V01, "num_key_value_heads"),  # num_kv_heads
    ],
)
def test_a_spec_error_names_the_config_key(config: dict[str, Any], key: str) -> None:
    """A value the spec refuses is named by the config.json key it was copied from."""
    with pytest.raises(SpecmdError) as info:
        spec_from_hf_config(config | {key: 10**12}, source="c.json")
    assert re.fullmatch(
        rf"model: c.json: {key}: input should be less than or equal to \d+, got 1000000000000"
        r"( \(and 1 more problem\))?",
        str(info.value),
    )


def test_a_derived_field_keeps_its_spec_name() -> None:
    with pytest.raises(SpecmdError, match=r"^model: c.json: moe_layers: input should be greater"):
        spec_from_hf_config(QWEN15_MOE_A27B | {"decoder_sparse_step": 100}, source="c.json")


def test_config_json_nested_too_deep(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"model_type": ' + "[" * 100_000 + "]" * 100_000 + "}")
    with pytest.raises(SpecmdError) as info:
        load_model(str(path))
    assert str(info.value) == f"model: {path}: expected JSON, got nesting too deep to parse"


def test_file_errors(tmp_path: Path) -> None:
    with pytest.raises(SpecmdError, match=r"^model: expected a readable config.json, got '.*"):
        load_model(str(tmp_path / "config.json"))
    broken = tmp_path / "broken.json"
    broken.write_text("{")
    with pytest.raises(SpecmdError, match=r"broken.json: expected JSON, got a parse error"):
        load_model(str(broken))
    listed = tmp_path / "list.json"
    listed.write_text("[1]")
    with pytest.raises(SpecmdError, match=r"list.json: expected a JSON object, got list$"):
        load_model(str(listed))


# --- loading a file and the CLI -------------------------------------------------------------------


def write_config(folder: Path, config: dict[str, Any]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.json"
    path.write_text(json.dumps(config))
    return path


def test_load_model_takes_a_config_json(tmp_path: Path) -> None:
    path = write_config(tmp_path / "OLMoE-1B-7B-0924", OLMOE_1B_7B_0924)
    m = load_model(str(path))
    assert (m.id, m.name, m.source) == ("olmoe-1b-7b-0924", "OLMoE-1B-7B-0924", f"{path} (olmoe)")
    assert m == load_hf_config(path)
    assert m.expert_bytes == load_model("olmoe-1b-7b").expert_bytes


RUNNER = CliRunner()


def test_models_import_writes_a_model_file_that_loads_back(tmp_path: Path) -> None:
    path = write_config(tmp_path / "DeepSeek-V3", DEEPSEEK_V3)
    out = tmp_path / "m.yaml"
    args = ["models", "import", str(path), "--id", "dsv3", "--out", str(out), "--json"]
    result = RUNNER.invoke(app, args, catch_exceptions=False)
    assert result.exit_code == 0, result.output
    shown = json.loads(result.stdout)  # one JSON document; "wrote ..." goes to stderr
    derived = load_hf_config(path, model_id="dsv3")
    assert shown == derived.model_dump() | derived.summary()
    assert load_model(str(out)) == derived
    assert out.read_text().startswith("# Model file derived by `specmd models import`")


def test_models_import_table_and_expert_dtype(tmp_path: Path) -> None:
    path = write_config(tmp_path / "gpt-oss-20b", GPT_OSS_20B)
    result = RUNNER.invoke(app, ["models", "import", str(path), "--expert-dtype", "int4"])
    assert result.exit_code == 0, result.output
    assert "gpt-oss-20b" in result.output and "expert_bytes" in result.output
    assert "int4" in result.output
    shown = RUNNER.invoke(app, ["models", "show", str(path), "--json"])
    assert json.loads(shown.stdout)["expert_dtype"] == "w4g128"


def test_models_import_out_is_checked_before_the_work(tmp_path: Path) -> None:
    path = write_config(tmp_path / "x", MIXTRAL_8X7B_V01)
    folder = tmp_path / "d"
    folder.mkdir()
    (folder / "keep.txt").write_text("mine")
    args = ["models", "import", str(path), "--out", str(folder)]
    with pytest.raises(SpecmdError) as info:
        RUNNER.invoke(app, args, catch_exceptions=False)
    assert str(info.value) == f"--out: expected a file path to write, got the folder '{folder}'"
    assert [p.name for p in folder.iterdir()] == ["keep.txt"]


def test_models_import_out_makes_its_folder(tmp_path: Path) -> None:
    path = write_config(tmp_path / "x", MIXTRAL_8X7B_V01)
    out = tmp_path / "new" / "m.yaml"
    result = RUNNER.invoke(app, ["models", "import", str(path), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert load_model(str(out)) == load_hf_config(path)
    assert sorted(p.name for p in out.parent.iterdir()) == ["m.yaml"]


def test_models_import_errors_are_user_errors(tmp_path: Path) -> None:
    path = write_config(tmp_path / "x", {"model_type": "bert"})
    with pytest.raises(SpecmdError, match="expected a model_type of"):
        RUNNER.invoke(app, ["models", "import", str(path)], catch_exceptions=False)

"""``model:`` as a YAML file in the catalog's format (the real executor writes its scaled model
there), with one-line errors; and the ``fp32`` precision it uses."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from specmd_sim.errors import SpecmdError
from specmd_sim.models import load_model
from specmd_sim.models.precision import precision


def test_a_model_file_loads_like_a_catalog_entry(tmp_path: Path) -> None:
    data = load_model("olmoe-1b-7b").model_dump(mode="json")
    data.update(id="my-olmoe", hidden_size=512, expert_dtype="fp32")
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(data))
    model = load_model(str(path))
    assert model.id == "my-olmoe" and model.expert_bytes == 3 * 512 * 1024 * 4
    assert precision("fp32").bytes_per_param == 4


def model_error(path: Path) -> str:
    with pytest.raises(SpecmdError) as info:
        load_model(str(path))
    return str(info.value)


def test_model_file_errors_are_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "missing.yaml"
    assert model_error(missing) == f"model {missing}: cannot read file (No such file or directory)"
    bad = tmp_path / "bad.yaml"
    bad.write_text("id: x\nname: y\n")
    assert model_error(bad) == (
        f"model {bad}: source: required field is missing (and 11 more problems)"
    )
    broken = tmp_path / "broken.yaml"
    broken.write_text("a: [")
    assert model_error(broken).startswith(f"model {broken}: malformed YAML at line 1, column 5")
    listed = tmp_path / "list.yaml"
    listed.write_text("[1, 2]\n")
    assert (
        model_error(listed) == f"model {listed}: expected a YAML mapping at the top level, got list"
    )


def test_model_files_are_read_through_the_bounded_yaml_loader(tmp_path: Path) -> None:
    """Alias bombs, recursive aliases and other encodings than UTF-8 are one line, at once."""
    lines = ["a0: &a0 [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]"]
    lines += [f"a{i}: &a{i} [{', '.join(f'*a{i - 1}' for _ in range(10))}]" for i in range(1, 12)]
    bomb = tmp_path / "bomb.yaml"  # 10**12 values once expanded
    bomb.write_text("\n".join(lines) + "\n")
    assert model_error(bomb) == (
        f"model {bomb}: expected at most 1,000,000 values once aliases are expanded, "
        "got 1,234,567,901,245"
    )
    loop = tmp_path / "loop.yaml"
    loop.write_text("a: &x [1, *x]\n")
    assert model_error(loop).endswith("got a recursive alias")
    latin = tmp_path / "latin.yaml"
    latin.write_bytes("id: caf\xe9\n".encode("latin-1"))
    assert model_error(latin) == (
        f"model {latin}: expected UTF-8 text, got invalid continuation byte at byte 7"
    )


@pytest.mark.parametrize(
    ("update", "message"),
    [
        (
            {"num_experts": 32_768},
            "num_experts: input should be less than or equal to 32767, got 32768",
        ),
        ({"top_k": 65}, "top_k: expected at most num_experts (64), got 65"),
        (
            {"moe_layers": 16_385},
            "moe_layers x num_experts: expected at most 1,048,576 routed experts, got 16,385 x 64",
        ),
        (
            {"kv_lora_rank": 512},
            "kv_lora_rank: expected below the cached latent's width (kv_bytes_per_token_per_layer "
            "/ 2, which must be given with it), got 512 with kv_bytes_per_token_per_layer None",
        ),
        (
            {"kv_lora_rank": 576, "kv_bytes_per_token_per_layer": 1152},
            "kv_lora_rank: expected below the cached latent's width (kv_bytes_per_token_per_layer "
            "/ 2, which must be given with it), got 576 with kv_bytes_per_token_per_layer 1152",
        ),
    ],
)
def test_model_shapes_are_bounded(tmp_path: Path, update: dict, message: str) -> None:
    """Expert ids are int16 in traces; a model routes to at most its experts; the flat keys
    (layer x expert) each have a slot in the cache's arrays."""
    data = load_model("olmoe-1b-7b").model_dump(mode="json")
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(data | {"moe_layers": 16_384}))
    assert load_model(str(path)).num_routed_experts == 1 << 20
    path.write_text(yaml.safe_dump(data | update))
    assert model_error(path) == f"model {path}: {message}"


def test_model_dimensions_and_weights_are_bounded(tmp_path: Path) -> None:
    """Sizes computed from dimensions stay finite and fit int64: a hidden size of 10**30 made
    the placement's arrays overflow."""
    data = load_model("olmoe-1b-7b").model_dump(mode="json")
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(data | {"hidden_size": 10**30}))
    assert model_error(path) == (
        f"model {path}: hidden_size: input should be less than or equal to 16777216, got "
        "1000000000000000000000000000000"
    )
    path.write_text(
        yaml.safe_dump(data | {"hidden_size": 1 << 24, "moe_intermediate_size": 1 << 24})
    )
    assert model_error(path) == (
        f"model {path}: dimensions: expected at most 1024 TiB of weights, got 1572871 TiB"
    )

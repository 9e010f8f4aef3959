"""Every input schema keeps its scalars strict (:mod:`specmd_sim.schema_base`): YAML ``true``
is never the number 1, and a boolean field takes only ``true`` or ``false``; errors are one line.
The mechanism first, on a made-up model; then each of the package's schemas through the loader
a user reaches it by."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import pytest
import yaml
from pydantic import BaseModel, Field, ValidationError

from specmd_sim.config import SimConfig, apply_overrides, build_config
from specmd_sim.errors import SpecmdError, from_validation_error
from specmd_sim.hardware import HardwareProfile, load_profile
from specmd_sim.hardware.loader import profile_dir
from specmd_sim.models import load_model
from specmd_sim.models.spec import ModelSpec
from specmd_sim.policies.registry import EVICTION, MISS, PREDICTORS, PREFETCH, PluginConfig
from specmd_sim.runtime.loader import load_runtime, runtime_dir
from specmd_sim.runtime.schema import RuntimeProfile
from specmd_sim.schema_base import InputModel
from specmd_sim.traces import PRESETS, SyntheticParams, generate_trace


class Lax(BaseModel):  # another base: its own rules
    n: int = 0


class Toy(InputModel):
    count: int = 0
    rate: float = 0.0
    flag: bool = False
    maybe: int | None = None
    either: int | str = 0
    ids: tuple[int, ...] = ()
    weights: dict[str, float] = Field(default_factory=dict)
    version: Literal[1] = 1
    lax: Lax = Lax()


def toy_error(**data: Any) -> str:
    with pytest.raises(ValidationError) as info:
        Toy.model_validate(data)
    return str(from_validation_error("toy", info.value))


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"count": True}, "toy: count: expected an integer, got True"),
        ({"rate": False}, "toy: rate: expected a number, got False"),
        ({"flag": 1}, "toy: flag: expected true or false, got 1"),
        ({"flag": 0.0}, "toy: flag: expected true or false, got 0.0"),
        ({"flag": "yes"}, "toy: flag: expected true or false, got 'yes'"),
        ({"flag": "on"}, "toy: flag: expected true or false, got 'on'"),
        ({"maybe": True}, "toy: maybe: expected an integer, got True"),
        ({"ids": [1, True]}, "toy: ids.1: expected an integer, got True"),
        ({"weights": {"a": True}}, "toy: weights.a: expected a number, got True"),
        ({"version": True}, "toy: version: expected 1, got True"),
    ],
)
def test_numbers_refuse_booleans_and_booleans_refuse_the_rest(data: dict, message: str) -> None:
    assert toy_error(**data) == message


def test_what_yaml_gives_for_numbers_stays_accepted() -> None:
    """An integer fills a float; PyYAML reads ``1e-3`` (no dot) as a string, so number
    notation in a string fills a number; a union keeps its other members; a model of another
    base keeps its own rules."""
    toy = Toy.model_validate(
        {
            "count": 2,
            "rate": 3,
            "flag": True,
            "either": "x",
            "weights": {"a": "1e-3"},
            "lax": {"n": True},
        }
    )
    assert (toy.count, toy.rate, toy.flag, toy.either, toy.weights) == (
        2,
        3.0,
        True,
        "x",
        {"a": 1e-3},
    )
    assert type(toy.rate) is float and yaml.safe_load("1e-3") == "1e-3"
    assert toy.lax.n == 1
    with pytest.raises(ValidationError, match="Input should be a valid integer"):
        Toy.model_validate({"either": 2.5})


def test_every_input_schema_is_an_input_model() -> None:
    roots = [SimConfig, HardwareProfile, RuntimeProfile, ModelSpec, SyntheticParams, PluginConfig]
    configs = [
        reg.get(kind).Config
        for reg in (EVICTION, PREFETCH, PREDICTORS, MISS)
        for kind in reg.kinds()
    ]
    assert [c.__name__ for c in roots + configs if not issubclass(c, InputModel)] == []


# --- each schema, as a user reaches it --------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"seed": True}, "config: seed: expected an integer, got True"),
        (
            {"workload": {"batch_size": True}},
            "config: workload.batch_size: expected an integer, got True",
        ),
        (
            {"precision": {"hot_fraction": True}},
            "config: precision.hot_fraction: expected a number, got True",
        ),
        (
            {"timing": {"record_spans": 1}},
            "config: timing.record_spans: expected true or false, got 1",
        ),
        (
            {"cache": {"pin_demand_set": "no"}},
            "config: cache.pin_demand_set: expected true or false, got 'no'",
        ),
        (
            {"prefetch": {"kind": "top-k", "k": True}},
            "config: prefetch: k: expected an integer, got True",
        ),
        (
            {"predictor": {"kind": "noisy-oracle", "accuracy": True}},
            "config: predictor: accuracy: expected a number, got True",
        ),
        (
            {"predictor": {"kind": "popularity", "learn_online": 0}},
            "config: predictor: learn_online: expected true or false, got 0",
        ),
    ],
)
def test_config_fields_and_plugin_params(data: dict, message: str) -> None:
    with pytest.raises(SpecmdError) as info:
        build_config(data)
    assert str(info.value) == message


def test_set_true_is_not_seed_one() -> None:
    """``--set`` values are YAML: ``seed=true`` is a boolean, refused, not seed 1."""
    with pytest.raises(SpecmdError, match=r"^config: seed: expected an integer, got True$"):
        build_config(apply_overrides({}, ["seed=true"]))
    cfg = build_config(apply_overrides({}, ["seed=3", "timing.record_spans=no"]))
    assert cfg.timing.record_spans is False


def _edited(tmp_path: Path, source: Path, edit: Any) -> Path:
    data = yaml.safe_load(source.read_text(encoding="utf-8"))
    edit(data)
    path = tmp_path / source.name
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    return path


def test_hardware_profile_numbers_refuse_booleans(tmp_path: Path) -> None:
    def edit(data: dict) -> None:
        data["nodes"][0]["copy_engines_h2d"]["value"] = True

    path = _edited(tmp_path, profile_dir() / "h100-pcie.yaml", edit)
    with pytest.raises(SpecmdError) as info:
        load_profile(path)
    assert str(info.value) == (
        f"hardware profile {path}: nodes.0.gpu.copy_engines_h2d.value: expected an integer, "
        "got True"
    )


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("h2d_efficiency", True, "expected a number, got True"),
        ("memory_parity", 1, "expected true or false, got 1"),
        ("cpu_numa_aware", "yes", "expected true or false, got 'yes'"),
    ],
)
def test_runtime_profile_values(tmp_path: Path, field: str, value: object, expected: str) -> None:
    def edit(data: dict) -> None:
        data[field]["value"] = value

    path = _edited(tmp_path, runtime_dir() / "fused-kernels.yaml", edit)
    with pytest.raises(SpecmdError) as info:
        load_runtime(path)
    assert str(info.value) == f"runtime profile {path}: {field}.value: {expected}"


def test_model_file_dimensions_refuse_booleans(tmp_path: Path) -> None:
    data = load_model("olmoe-1b-7b").model_dump(mode="json") | {"top_k": True}
    path = tmp_path / "m.yaml"
    path.write_text(yaml.safe_dump(data), encoding="utf-8")
    with pytest.raises(SpecmdError) as info:
        load_model(str(path))
    assert str(info.value) == f"model {path}: top_k: expected an integer, got True"


def test_synthetic_params_refuse_booleans() -> None:
    data = PRESETS["olmoe"].model_dump() | {"num_requests": True, "repeat_prob": False}
    with pytest.raises(ValidationError) as info:
        SyntheticParams.model_validate(data)
    assert str(from_validation_error("trace synth", info.value)) == (
        "trace synth: num_requests: expected an integer, got True (and 1 more problem)"
    )


def test_synthetic_traces_are_bounded() -> None:
    """At most 2**29 token x layer x expert cells (x lookahead): 512 requests of 1,024 tokens
    of OLMoE (16 x 64 experts, lookahead 1) are exactly that many; one token more per request
    is refused before anything is drawn."""
    ok = PRESETS["olmoe"].model_dump() | {
        "num_requests": 1 << 9,
        "prompt_tokens": 0,
        "decode_tokens": 1 << 10,
    }
    assert SyntheticParams.model_validate(ok).num_tokens * 16 * 64 == 1 << 29
    with pytest.raises(ValidationError) as info:
        SyntheticParams.model_validate(ok | {"decode_tokens": (1 << 10) + 1})
    assert str(from_validation_error("trace synth", info.value)) == (
        "trace synth: num_requests x (prompt_tokens + decode_tokens): expected at most "
        "536,870,912 token x layer x expert cells (x lookahead) with olmoe-1b-7b, got "
        "537,395,200"
    )


@pytest.mark.parametrize("seed", [-1, True, 1.5])
def test_the_generator_refuses_a_bad_seed(seed: object) -> None:
    """numpy would raise its own error deep inside (or take ``True`` as 1)."""
    with pytest.raises(SpecmdError) as info:
        generate_trace(PRESETS["mixtral"], seed)  # type: ignore[arg-type]
    assert str(info.value) == f"generator: seed: expected an integer >= 0, got {seed!r}"

from __future__ import annotations

import re
from pathlib import Path

import pytest
from pydantic import ValidationError

from specmd_sim import SimConfig, apply_overrides, build_config
from specmd_sim.config import CacheConfig, config_to_dict
from specmd_sim.errors import SpecmdError
from specmd_sim.units import GiB, MiB

OLMOE_EXPERT, OLMOE_ROUTED = 12 * MiB, 12 * GiB


@pytest.mark.parametrize(
    ("capacity", "expected_bytes"),
    [
        ("5%", int(0.05 * OLMOE_ROUTED)),
        (51, 51 * OLMOE_EXPERT),
        ("51", 51 * OLMOE_EXPERT),
        ("0.6GiB", round(0.6 * GiB)),
        ("650e6B", 650_000_000),
    ],
)
def test_capacity_forms(capacity: str | int, expected_bytes: int) -> None:
    cache = CacheConfig(capacity=capacity)
    assert cache.capacity_bytes(OLMOE_EXPERT, OLMOE_ROUTED, budget=0) == expected_bytes


@pytest.mark.parametrize("bad", ["0%", "101%", 0, -3, "lots", "0GiB", True])
def test_capacity_rejects(bad: object) -> None:
    with pytest.raises(ValidationError):
        CacheConfig(capacity=bad)


def test_defaults_are_the_main_job() -> None:
    data = config_to_dict(SimConfig())
    assert data["hardware"] == "h100-pcie"
    assert data["trace"] == "olmoe-synthetic"
    assert data["cache"] == {"capacity": "5%", "pin_demand_set": True}
    assert data["eviction"] == {"kind": "least-stale", "order": "fifo"}
    assert data["prefetch"] == {"kind": "top-k", "k": None, "lookahead": 1}
    # a predictor a real system could have (learned online), whole prompts in one pass
    assert data["predictor"] == {
        "kind": "transition",
        "fit_on": None,
        "learn_online": True,
        "max_distance": 2,
    }
    assert data["workload"]["prefill_chunk_tokens"] == 0


def test_config_round_trips_and_is_frozen() -> None:
    cfg = SimConfig(eviction={"kind": "least-stale", "order": "layer"}, seed=4)
    again = build_config(config_to_dict(cfg))
    assert again == cfg
    with pytest.raises(ValidationError):
        cfg.seed = 5  # type: ignore[misc]


def test_every_field_is_described() -> None:
    for model in (SimConfig, CacheConfig):
        for name, field in model.model_fields.items():
            assert field.description, f"{model.__name__}.{name}"


@pytest.mark.parametrize(
    ("data", "fragments"),
    [
        ({"eviction": {"kind": "nope"}}, ["eviction.kind", "expected one of", "'nope'"]),
        (
            {"eviction": {"kind": "lru", "order": "layer"}},
            [
                "eviction: order: expected a parameter of eviction 'lru' (prefetch_insert)",
                "'layer'",
            ],
        ),
        (
            {"predictor": {"kind": "transition", "accuracy": 0.7}},
            [
                "predictor: accuracy",
                "'transition' (fit_on, learn_online, max_distance)",
                "0.7",
                "predictor.kind=",
            ],
        ),
        ({"cache": {"capacity": "lots"}}, ["cache.capacity", "'lots'"]),
        ({"seed": -1}, ["seed", "greater than or equal to 0", "-1"]),
        ({"surprise": 1}, ["surprise", "extra"]),
    ],
)
def test_errors_name_field_and_value(data: dict, fragments: list[str]) -> None:
    with pytest.raises(SpecmdError) as info:
        build_config(data, "my.yaml")
    message = str(info.value)
    assert message.startswith("my.yaml: ") and "\n" not in message
    for fragment in fragments:
        assert fragment in message


def test_overrides() -> None:
    base = config_to_dict(SimConfig())
    out = apply_overrides(
        base, ["cache.capacity=2%", "eviction.order=layer", "seed=3", "prefetch.kind=none"]
    )
    assert out["cache"]["capacity"] == "2%"
    assert out["eviction"] == {"kind": "least-stale", "order": "layer"}
    assert out["seed"] == 3
    assert out["prefetch"] == {"kind": "none"}  # a new kind starts its section afresh
    assert base["seed"] == 0  # the input is not modified
    cfg = build_config(out)
    assert cfg.prefetch.kind == "none"


def test_chunks_are_at_least_64_kib() -> None:
    """A chunk is one DMA copy and one event of the timing engine: 4 KiB chunks made a
    request take minutes."""
    assert build_config({"timing": {"chunk_bytes": 64 * 1024}}).timing.chunk_bytes == 65536
    with pytest.raises(SpecmdError) as info:
        build_config({"timing": {"chunk_bytes": 4096}})
    assert str(info.value) == (
        "config: timing.chunk_bytes: input should be greater than or equal to 65536, got 4096"
    )


def test_an_expert_is_at_most_256_chunks() -> None:
    """64 KiB chunks of a 336 MiB Mixtral expert would be 5,376 copies per fetch."""
    from specmd_sim.scenario import build_scenario

    mixtral = {"trace": "mixtral-synthetic", "workload": {"max_requests": 1}}
    with pytest.raises(SpecmdError) as info:
        build_scenario(build_config({**mixtral, "timing": {"chunk_bytes": 64 * 1024}}))
    largest = build_scenario(build_config(mixtral)).placement.largest
    floor = -(-largest // 256)
    assert str(info.value) == (
        f"timing.chunk_bytes: expected at least {floor:,} bytes (at most 256 chunks per expert "
        f"of {largest:,} bytes), got 65,536"
    )
    ok = build_scenario(build_config({**mixtral, "timing": {"chunk_bytes": floor}}))
    assert ok.config.timing.chunk_bytes == floor


def test_an_enormous_value_gets_a_short_error_at_once() -> None:
    """A YAML alias bomb expands to 10**31 elements: the error names it in a bounded line (an
    unbounded repr would never return)."""
    bomb: list = [1] * 10
    for _ in range(30):
        bomb = [bomb] * 10
    expected = r"config: seed: input should be a valid integer, got \[\["
    with pytest.raises(SpecmdError, match=expected) as info:
        build_config({"seed": bomb})
    assert len(str(info.value)) < 200


def test_non_finite_and_overflowing_numbers_are_refused(tmp_path) -> None:
    from pathlib import Path

    from specmd_sim.hardware import load_profile
    from specmd_sim.hardware.loader import profile_dir

    text = Path(profile_dir() / "h100-pcie.yaml").read_text()
    bad = tmp_path / "inf.yaml"
    bad.write_text(re.sub(r"(hbm_bandwidth_bytes_per_s: \{value: )[0-9.e+]+", r"\1.inf", text))
    finite = r"hbm_bandwidth_bytes_per_s.value: input should be a finite number, got inf"
    with pytest.raises(SpecmdError, match=finite):
        load_profile(str(bad))
    huge = r"cache.capacity: expected 'auto' or a size below 8 EiB, got '1e400B'"
    with pytest.raises(SpecmdError, match=huge):
        build_config({"cache": {"capacity": "1e400B"}})
    with pytest.raises(SpecmdError, match=r"arrival_rate_per_s: input should be a finite number"):
        build_config({"workload": {"arrivals": "poisson", "arrival_rate_per_s": float("nan")}})


@pytest.fixture(params=["libyaml", "pyyaml"])
def yaml_parser(request, monkeypatch) -> str:
    """Each parser :func:`~specmd_sim.hardware.loader.parse_yaml` may use."""
    from specmd_sim.hardware import loader

    if request.param == "pyyaml":
        monkeypatch.setattr(loader, "_FastLoader", None)
    elif loader._FastLoader is None:
        pytest.skip("PyYAML without libyaml")
    return request.param


def test_both_parsers_read_every_bundled_file_alike(monkeypatch) -> None:
    from specmd_sim.hardware import loader

    if loader._FastLoader is None:
        pytest.skip("PyYAML without libyaml")
    root = Path(__file__).parents[2]
    files = sorted({*root.glob("specmd_sim/**/*.yaml"), *root.glob("hardware_profiles/*.yaml")})
    assert len(files) > 10
    fast = [loader.parse_yaml(f.read_text(), str(f)) for f in files]
    monkeypatch.setattr(loader, "_FastLoader", None)
    assert fast == [loader.parse_yaml(f.read_text(), str(f)) for f in files]


def test_yaml_files_are_bounded_and_decoded_in_one_line(tmp_path, yaml_parser) -> None:
    from specmd_sim.hardware.loader import load_yaml

    lines = ["a0: &a0 [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]"]
    lines += [f"a{i}: &a{i} [{', '.join(f'*a{i - 1}' for _ in range(10))}]" for i in range(1, 12)]
    bomb = tmp_path / "bomb.yaml"  # 12 lines, 10**12 values once expanded
    bomb.write_text("\n".join(lines) + "\n")
    with pytest.raises(SpecmdError, match=r"config .*bomb.yaml: expected at most 1,000,000 values"):
        load_yaml(bomb, "config")
    loop = tmp_path / "loop.yaml"
    loop.write_text("a: &x [1, *x]\n")
    with pytest.raises(SpecmdError, match="got a recursive alias"):
        load_yaml(loop, "config")
    latin = tmp_path / "latin.yaml"
    latin.write_bytes("seed: 1 # caf\xe9\n".encode("latin-1"))
    with pytest.raises(SpecmdError, match=r"latin.yaml: expected UTF-8 text"):
        load_yaml(latin, "config")
    deep = tmp_path / "deep.yaml"  # composing recurses once per level
    deep.write_text("workload: " + "[" * 20_000 + "]" * 20_000 + "\n")
    with pytest.raises(SpecmdError) as info:
        load_yaml(deep, "config")
    assert str(info.value) == (
        f"config {deep}: expected at most 100 levels of nesting, got more at line 1, column 110"
    )
    deeper = tmp_path / "deeper.yaml"  # within libyaml's bound: refused by the composer
    deeper.write_text("workload: " + "[" * 150 + "]" * 150 + "\n")
    with pytest.raises(SpecmdError) as info:
        load_yaml(deeper, "config")
    assert str(info.value) == (
        f"config {deeper}: expected at most 100 levels of nesting, got more at line 1, column 110"
    )
    nested = tmp_path / "nested.yaml"  # 100 levels: the mapping and 99 lists
    nested.write_text("a: " + "[" * 99 + "]" * 99 + "\n")
    assert "a" in load_yaml(nested, "config")
    shared = tmp_path / "shared.yaml"  # aliases that stay small load as usual
    shared.write_text("base: &b {capacity: 5%}\ncache: *b\n")
    assert load_yaml(Path(shared), "config") == {"base": {"capacity": "5%"},
                                                 "cache": {"capacity": "5%"}}  # fmt: skip

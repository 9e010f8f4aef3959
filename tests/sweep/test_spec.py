"""The sweep spec and its expansion into points: product, zip, aliases, ids, errors, a grid
counted before it is built and built one point at a time."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from specmd_sim.config import build_config, config_to_dict
from specmd_sim.errors import SpecmdError
from specmd_sim.runs import config_hash
from specmd_sim.sweep import expand, load_spec, parse_spec
from specmd_sim.sweep.grid import (
    MAX_POINTS,
    axis_label,
    check_size,
    count_points,
    iter_points,
    point_key,
)

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def spec(**fields):
    return parse_spec({"base": {"trace": "mixtral-synthetic"}, **fields})


def test_product_then_zip_last_factor_fastest() -> None:
    points = expand(
        spec(
            axes={"hardware": ["h100-pcie", "gh200"], "eviction": ["lru", "fifo"]},
            zip=[{"capacity": [8, "10%"], "seed": [1, 2]}],
        )
    )
    assert len(points) == 2 * 2 * 2
    assert [p.index for p in points] == list(range(8))
    assert points[0].axes == {"hardware": "h100-pcie", "eviction": "lru", "capacity": 8, "seed": 1}
    assert points[1].axes == {"hardware": "h100-pcie", "eviction": "lru", "capacity": "10%",
                              "seed": 2}  # fmt: skip
    assert points[2].axes["eviction"] == "fifo"
    assert points[4].axes["hardware"] == "gh200"
    p = points[1].config
    assert (p.hardware, p.cache.capacity, p.seed, p.eviction.kind) == ("h100-pcie", "10%", 2, "lru")


def test_no_axes_is_one_point_named_run() -> None:
    (point,) = expand(spec())
    assert point.axes == {} and point.key == "run"
    assert config_to_dict(point.config) == config_to_dict(
        build_config({"trace": "mixtral-synthetic"})
    )


def test_point_id_is_engine_and_config_hash() -> None:
    (point,) = expand(spec(engine="replay"))
    assert point.point_id == f"replay-{config_hash(point.config)}"
    (timed,) = expand(spec())
    assert timed.point_id == f"simulate-{config_hash(point.config)}"


def test_plugin_axes_kind_resets_section_and_params_apply_after_it() -> None:
    points = expand(
        spec(
            base={"trace": "mixtral-synthetic", "eviction": {"kind": "fifo"}},
            axes={"eviction.order": ["touch", "layer"], "eviction": ["least-stale"]},
        )
    )
    # the kind is applied first (starting the section afresh), then its parameter
    assert [config_to_dict(p.config)["eviction"] for p in points] == [
        {"kind": "least-stale", "order": "touch"},
        {"kind": "least-stale", "order": "layer"},
    ]
    with pytest.raises(SpecmdError, match=r"point 1 \(eviction.order=touch,eviction=lru\)"):
        expand(spec(axes={"eviction.order": ["touch"], "eviction": ["least-stale", "lru"]}))


def test_plugin_axis_takes_a_whole_section() -> None:
    points = expand(spec(axes={"eviction": ["lru", {"kind": "least-stale", "order": "layer"}]}))
    assert config_to_dict(points[1].config)["eviction"] == {"kind": "least-stale", "order": "layer"}
    assert points[1].key == "eviction=least-stale(order=layer)"


def test_any_config_path_is_an_axis_and_base_set_apply_first() -> None:
    points = expand(
        spec(
            set=[
                "workload.max_requests=1",
                "predictor.kind=noisy-oracle",
                "predictor.accuracy=0.5",
            ],
            axes={"predictor.accuracy": [0.7, 0.9], "cache": ["5%"]},
        )
    )
    cfg = [config_to_dict(p.config) for p in points]
    assert [c["predictor"]["accuracy"] for c in cfg] == [0.7, 0.9]
    assert {c["workload"]["max_requests"] for c in cfg} == {1}
    assert {c["cache"]["capacity"] for c in cfg} == {"5%"}


def test_point_key_and_labels() -> None:
    assert point_key({}) == "run"
    assert point_key({"hardware": "gh200", "capacity": 16, "acc": 0.5}) == (
        "hardware=gh200,capacity=16,acc=0.5"
    )
    assert axis_label({"kind": "lru"}) == "lru"
    assert axis_label([1, 2]) == "[1, 2]"
    assert axis_label(3) == 3


@pytest.mark.parametrize(
    ("fields", "fragment"),
    [
        ({"zip": [{"capacity": [8, 16], "seed": [1]}]}, "zip[0]: expected axes of equal length"),
        ({"axes": {"seed": []}}, "axes.seed: expected at least one value"),
        ({"axes": {"seed": [1]}, "zip": [{"seed": [2]}]}, "zip[0].seed: expected each axis once"),
        ({"zip": [{}]}, "zip[0]: expected at least one axis"),
        ({"axes": {"seed": 3}}, "axes.seed: input should be a valid list, got 3"),
        ({"engine": "fast"}, "engine: input should be 'replay' or 'simulate'"),
        ({"executor": "ray"}, "executor: extra inputs are not permitted"),
    ],
)
def test_bad_specs_give_one_line(fields: dict, fragment: str) -> None:
    with pytest.raises(SpecmdError) as info:
        parse_spec(fields, "spec.yaml")
    message = str(info.value)
    assert "\n" not in message and message.startswith("spec.yaml: ")
    assert fragment in message


def test_bad_point_config_names_the_point() -> None:
    with pytest.raises(SpecmdError, match=r"point 1 \(seed=-1\): seed: input should be greater"):
        expand(spec(axes={"seed": [0, -1]}), "spec.yaml")
    with pytest.raises(SpecmdError, match=r"eviction\.kind: expected one of"):
        expand(spec(axes={"eviction": ["nope"]}))


def test_two_points_with_one_config_are_rejected() -> None:
    with pytest.raises(SpecmdError, match=r"point 1 \(capacity=16\).*same config as point 0"):
        expand(spec(axes={"capacity": [16, "16"]}))


def test_load_spec_errors_name_the_file(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text("axes: [1, 2]\n")
    with pytest.raises(SpecmdError, match=rf"sweep spec {path}: axes: input should be"):
        load_spec(path)
    path.write_text("- 1\n")
    with pytest.raises(SpecmdError, match="expected a mapping, got list"):
        load_spec(path)
    with pytest.raises(SpecmdError, match="cannot read file"):
        load_spec(tmp_path / "missing.yaml")


def test_quick_example_has_at_most_24_points() -> None:
    points = expand(load_spec(EXAMPLES / "sweep-quick.yaml"))
    assert 1 < len(points) <= 24
    assert len({p.point_id for p in points}) == len(points)


def test_a_huge_grid_is_counted_and_refused_without_being_built() -> None:
    huge = spec(axes={"seed": list(range(1000)), "capacity": list(range(8, 1008))},
                zip=[{"eviction": ["lru", "fifo"], "prefetch": ["none", "top-k"]}])  # fmt: skip
    started = time.monotonic()
    assert count_points(huge) == 2_000_000
    with pytest.raises(SpecmdError) as info:
        check_size(huge, source="sweep spec big.yaml")
    assert str(info.value) == (
        f"sweep spec big.yaml: axes: expected at most {MAX_POINTS:,} points, got 2,000,000 "
        "(1000 x 1000 x 2); pass --max-points 2000000 to run them all"
    )
    assert check_size(huge, 2_000_000) == 2_000_000
    first = next(iter_points(huge))  # built one at a time: the first comes at once
    assert time.monotonic() - started < 2
    assert first.axes == {"seed": 0, "capacity": 8, "eviction": "lru", "prefetch": "none"}
    assert count_points(spec()) == 1 and check_size(spec(), 1) == 1

"""Baselines and verdicts: tolerances, directions, missing and failed points, updates."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from specmd_sim import SimConfig
from specmd_sim.errors import SpecmdError
from specmd_sim.regress import (
    Baseline,
    BaselinePoint,
    Current,
    Tolerance,
    compare,
    current_from_sweep,
    default_tolerance,
    load_baseline,
    render_text,
    save_baseline,
    update_baseline,
)
from specmd_sim.sweep.store import ResultStore, table_columns

TTFT = Tolerance(better="lower", rel=0.05, abs=1e-3)
HIT = Tolerance(better="higher", abs=0.01)
ACCESSES = Tolerance(better="both")


def baseline(**values: float | None) -> Baseline:
    metrics = {"ttft_s": TTFT, "hit_rate": HIT, "accesses": ACCESSES}
    return Baseline(
        metrics={k: metrics[k] for k in values},
        points={"run": BaselinePoint(engine="simulate", point_id="simulate-a", values=values)},
    )


def statuses(base: Baseline, **now: float | None) -> dict[str, str]:
    result = compare(base, [Current("run", now, "simulate", "simulate-a")])
    return {v.metric: v.status for v in result.verdicts}


@pytest.mark.parametrize(
    ("now", "status"),
    [
        (10.0, "unchanged"),
        (10.5, "moved"),  # +5% = the tolerance: still fine
        (10.51, "regressed"),
        (9.4, "improved"),
        (9.6, "moved"),
        (None, "missing"),
    ],
)
def test_lower_is_better_with_relative_tolerance(now: float | None, status: str) -> None:
    assert statuses(baseline(ttft_s=10.0), ttft_s=now) == {"ttft_s": status}


def test_absolute_tolerance_wins_near_zero() -> None:
    # 5% of 0.001 s is 50 µs; the absolute 1 ms applies
    assert statuses(baseline(ttft_s=0.001), ttft_s=0.0019) == {"ttft_s": "moved"}
    assert statuses(baseline(ttft_s=0.001), ttft_s=0.0021) == {"ttft_s": "regressed"}


def test_higher_is_better_and_both_directions() -> None:
    base = baseline(hit_rate=0.5, accesses=100)
    assert statuses(base, hit_rate=0.48, accesses=100) == {
        "hit_rate": "regressed", "accesses": "unchanged"}  # fmt: skip
    assert statuses(base, hit_rate=0.52, accesses=101) == {
        "hit_rate": "improved", "accesses": "regressed"}  # fmt: skip
    assert statuses(base, hit_rate=0.505, accesses=99) == {
        "hit_rate": "moved", "accesses": "regressed"}  # fmt: skip


def test_missing_failed_and_new_points() -> None:
    base = Baseline(
        metrics={"ttft_s": TTFT},
        points={k: BaselinePoint(values={"ttft_s": 1.0}) for k in ("a=1", "a=2", "a=3")},
    )
    current = [
        Current("a=1", {"ttft_s": 1.0}),
        Current("a=2", {}, error="cache.capacity: too small"),
        Current("a=4", {"ttft_s": 1.0}),
    ]
    result = compare(base, current)
    assert [(v.key, v.metric, v.status) for v in result.verdicts] == [
        ("a=1", "ttft_s", "unchanged"),
        ("a=2", "*", "error"),
        ("a=3", "*", "missing"),
        ("a=4", "*", "new"),
    ]
    assert result.regressed
    assert not compare(base, current, only=["a=1"]).regressed


def test_a_changed_config_is_noted() -> None:
    result = compare(baseline(ttft_s=1.0), [Current("run", {"ttft_s": 1.0}, point_id="simulate-b")])
    assert result.notes == ["run: config changed (simulate-a -> simulate-b)"]
    assert not result.regressed


def test_report_text_lists_what_moved() -> None:
    result = compare(baseline(ttft_s=10.0, hit_rate=0.5),
                     [Current("run", {"ttft_s": 12.0, "hit_rate": 0.5})])  # fmt: skip
    text = render_text(result)
    assert "ttft_s" in text and "+2 (+20.0%)" in text and "regressed" in text
    assert "hit_rate" not in text  # unchanged rows only with show_all
    assert text.strip().endswith("REGRESSION: 2 checks (1 regressed, 1 unchanged)")
    assert "hit_rate" in render_text(result, show_all=True)


def test_update_creates_keeps_tolerances_and_replaces_values(tmp_path: Path) -> None:
    current = [Current("run", {"ttft_s": 2.0, "hit_rate": 0.4, "stall_s": None, "misses": 7},
                       "simulate", "simulate-x")]  # fmt: skip
    new = update_baseline(None, current)
    assert sorted(new.metrics) == ["hit_rate", "misses", "ttft_s"]  # defaults with values
    assert new.metrics["ttft_s"] == Tolerance(better="lower", rel=1e-9)  # a deterministic run
    assert new.metrics["misses"] == Tolerance(better="lower")  # a count: exactly
    assert new.metrics["hit_rate"].better == "higher"
    assert new.points["run"].values == {"hit_rate": 0.4, "misses": 7.0, "ttft_s": 2.0}
    custom = new.model_copy(update={"metrics": {"ttft_s": TTFT}})
    again = update_baseline(custom, [Current("run", {"ttft_s": 3.0})], metrics=["tpot_s"])
    assert again.metrics["ttft_s"] == TTFT and "tpot_s" in again.metrics
    assert again.points["run"].values == {"ttft_s": 3.0, "tpot_s": None}
    only = update_baseline(None, current, metrics=["ttft_s"])
    assert list(only.metrics) == ["ttft_s"]
    failed = update_baseline(new, [Current("run", {}, error="boom")])
    assert failed.points == {}


def test_new_baselines_take_each_metrics_direction_from_the_spec() -> None:
    assert default_tolerance("throughput_tok_s") == Tolerance(better="higher", rel=1e-9)
    assert default_tolerance("bytes_per_token").better == "lower"
    assert default_tolerance("overlap_s") == Tolerance(better="higher", rel=1e-9)
    assert default_tolerance("bytes_demand") == Tolerance(better="lower")  # bytes: exactly
    assert default_tolerance("overlap_s", rel=0.05) == Tolerance(better="higher", rel=0.05)
    assert default_tolerance("accesses").better == "both"  # no good direction: any change
    with pytest.raises(SpecmdError, match=r"metric 'ttft': expected a metric of docs/metrics"):
        update_baseline(None, [Current("run", {"ttft_s": 1.0})], metrics=["ttft"])


def test_save_load_round_trip_is_stable(tmp_path: Path) -> None:
    base = baseline(ttft_s=1.5, hit_rate=0.25)
    path = tmp_path / "b" / "base.json"
    save_baseline(base, path)
    text = path.read_text()
    assert load_baseline(path) == base
    save_baseline(load_baseline(path), path)
    assert path.read_text() == text and text.endswith("}\n")
    assert json.loads(text)["format"] == "specmd-baseline"


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("{", "expected JSON, got malformed text"),
        ("[" * 1_500 + "]" * 1_500, "expected JSON, got nesting too deep to read"),
        ('{"metrics": {"ttft_s": {"better": "down"}}}', "metrics.ttft_s.better: input should be"),
        ('{"metrics": {"ttft_s": {"better": "lower", "rel": -1}}}', "rel: input should be"),
        ('{"metrics": {}, "format": "x"}', "format: input should be 'specmd-baseline'"),
    ],
)
def test_bad_baselines_give_one_line(tmp_path: Path, content: str, fragment: str) -> None:
    path = tmp_path / "b.json"
    path.write_text(content)
    with pytest.raises(SpecmdError) as info:
        load_baseline(path)
    assert fragment in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(SpecmdError, match="cannot read file"):
        load_baseline(tmp_path / "none.json")


def test_sweep_points_are_keyed_by_axis_values(tmp_path: Path) -> None:
    rows = [
        {"point_index": i, "point_id": f"simulate-{i}", "status": status, "error": error,
         "axis.hardware": hw, "axis.capacity": cap, "engine": "simulate",
         "hardware_grade": "C", "ttft_s": ttft, "inputs.passes": 3, "config.seed": 0}
        for i, (hw, cap, status, error, ttft) in enumerate(
            [("h100-pcie", "8", "ok", None, 1.0), ("gh200", "5%", "error", "boom", None)]
        )
    ]  # fmt: skip
    axes = {"hardware": ["h100-pcie", "gh200"], "capacity": ["8", "5%"]}
    store = ResultStore(tmp_path, table_columns("simulate", axes, [SimConfig()]), 2)
    store.scan()
    for row in rows:
        store.append(row)
    ok, failed = current_from_sweep(tmp_path)
    assert ok == Current("hardware=h100-pcie,capacity=8", {"ttft_s": 1.0}, "simulate",
                         "simulate-0", {"hardware": "h100-pcie", "capacity": "8"})  # fmt: skip
    assert (failed.key, failed.error) == ("hardware=gh200,capacity=5%", "boom")


def test_a_repeatable_small_regression_fails_by_default() -> None:
    """A deterministic simulator repeats its numbers: a 4.9% TPOT regression, or two more
    collision misses in thousands of accesses, is a change of behaviour and fails a new
    baseline's check; a looser tolerance is the user's explicit choice."""
    before = [Current("run", {"tpot_s": 0.0300, "misses_collision": 455}, "simulate", "x")]
    after = [Current("run", {"tpot_s": 0.0300 * 1.049, "misses_collision": 457}, "simulate", "x")]
    strict = update_baseline(None, before, metrics=["tpot_s", "misses_collision"])
    verdicts = {v.metric: v.status for v in compare(strict, after).verdicts}
    assert verdicts == {"tpot_s": "regressed", "misses_collision": "regressed"}
    same = [Current("run", {"tpot_s": 0.0300 * (1 + 1e-12), "misses_collision": 455},
                    "simulate", "x")]  # fmt: skip
    assert not compare(strict, same).regressed  # floating-point rounding is not a change
    loose = update_baseline(None, before, metrics=["tpot_s", "misses_collision"], rel=0.05)
    assert not compare(loose, after).regressed

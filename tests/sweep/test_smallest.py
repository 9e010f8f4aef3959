"""Capacity planning (`search: {smallest: ...}`): the smallest knob value meeting a target, by a
grid scan then bisection — on synthetic metrics (outcomes, whole and fractional knobs, a metric
that is not monotone) and on the timing engine against a brute-force scan of every cache size."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from specmd_sim import SimConfig, simulate
from specmd_sim.errors import SpecmdError
from specmd_sim.sweep import load_table, run_sweep
from specmd_sim.sweep.smallest import SmallestSearch, search_smallest
from specmd_sim.sweep.spec import parse_spec

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sweep-capacity.yaml"


def search(**kw: Any) -> SmallestSearch:
    return SmallestSearch.model_validate({"smallest": "cache.capacity", "metric": "tpot_s",
                                          **kw})  # fmt: skip


def probe_of(metric):
    def probe(value: float) -> tuple[float, Any]:
        return metric(value), value

    return probe


def test_the_grid_then_bisection_to_one_slot() -> None:
    found = search_smallest(search(grid=[8, 16, 32, 64], at_most=1 / 37),
                            probe_of(lambda c: 1 / c))  # fmt: skip
    assert (found.outcome, found.value, found.failing) == ("found", 37, 36)
    assert [v for v, _ in found.probes][:4] == [8, 16, 32, 64]  # the scan stops at 64
    assert found.best == 37


def test_outcomes_at_the_ends_and_when_runs_run_out() -> None:
    lowest = search_smallest(search(grid=[8, 16], at_most=1.0), probe_of(lambda c: 0.5))
    assert (lowest.outcome, lowest.value, lowest.failing, lowest.runs) == ("lowest", 8, None, 1)
    none = search_smallest(search(grid=[8, 16], at_most=0.1), probe_of(lambda c: 0.5))
    assert (none.outcome, none.value, none.failing) == ("none", None, 16)
    spent = search_smallest(search(grid=[8, 1024], at_most=1 / 500, max_runs=4),
                            probe_of(lambda c: 1 / c))  # fmt: skip
    assert spent.outcome == "max-runs" and spent.runs == 4  # the bracket reached so far
    assert (spent.value, spent.failing) == (516, 262)


def test_a_fractional_knob_stops_at_the_tolerance() -> None:
    link = SmallestSearch.model_validate({
        "smallest": "hardware.links.pcie0.bandwidth_bytes_per_s", "metric": "tpot_s",
        "grid": ["8GB/s", "16GB/s", "64GB/s"], "at_most": 1 / 40e9, "tolerance": 0.01})  # fmt: skip
    found = search_smallest(link, probe_of(lambda bw: 1 / bw))
    assert found.outcome == "found" and found.failing < 40e9 <= found.value
    assert found.value - found.failing <= 0.01 * found.value


def test_a_metric_that_is_not_monotone_is_scanned_before_it_is_bisected() -> None:
    """A dip at 20 (prefetching can make more cache slower): bisection alone between 8 and 64
    would miss it; the grid finds 16 < x <= 24 first."""

    def metric(c: float) -> float:
        return 0.5 if 17 <= c <= 24 else 1.0 if c < 40 else 0.4

    found = search_smallest(search(grid=[8, 16, 24, 32, 64], at_most=0.6), probe_of(metric))
    assert (found.outcome, found.value, found.failing) == ("found", 17, 16)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"grid": [8, 16], "at_most": 1, "at_least": 1}, "exactly one of at_most and at_least"),
        ({"grid": [16, 8], "at_most": 1}, "strictly ascending"),
        ({"grid": [8], "metric": "tpot", "at_most": 1}, "metric: expected a metric"),
    ],
)
def test_a_wrong_search_is_one_line(fields: dict, message: str) -> None:
    spec = {"base": {}, "search": {"smallest": "cache.capacity", "metric": "tpot_s", **fields}}
    with pytest.raises(SpecmdError, match=message) as err:
        parse_spec(spec)
    assert "\n" not in str(err.value)


def test_the_example_finds_the_smallest_cache_a_brute_force_scan_finds(tmp_path: Path) -> None:
    """The bundled example's search on the H100 PCIe, checked against every cache size from the
    grid value below the answer up to it: each fails the 10 ms TPOT target but the answer."""
    spec = yaml.safe_load(EXAMPLE.read_text())
    spec["axes"] = {"hardware": ["h100-pcie"]}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    run_sweep(path, tmp_path / "out", workers=1)
    row = load_table(tmp_path / "out").iloc[0]
    assert row["search.outcome"] == "found" and row["tpot_s"] <= 0.010
    answer, below = int(row["search.value"]), int(row["search.failing_value"])
    assert answer - below == 1 and row["inputs.capacity_slots"] == answer
    base = spec["base"]
    grid_below = max(g for g in spec["search"]["grid"] if g < answer)

    def tpot(capacity: int) -> float:
        config = SimConfig(**{**base, "cache": {"capacity": capacity}})
        return float(simulate(config).metrics["tpot_s"])

    brute = [c for c in range(grid_below, answer + 1) if tpot(c) <= 0.010]
    assert brute == [answer]

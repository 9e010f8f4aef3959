"""Rate search (``search`` in a sweep spec): the highest Poisson arrival rate whose SLO
attainment meets a target.

- On step functions with a known threshold (closed form) the answer brackets it within the
  tolerance, in at most ``runs_needed`` runs; the bounds and ``max_runs`` are reported as such.
- On the simulator, single runs at the rate found and at the failing rate reported (made here
  with the public API, not by the search) meet and miss the target; a sweep (in a worker
  process) gives the same answer and probes, stores the search's row and keeps the run at the
  rate found.
- Bad inputs are one line each.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from support.cli import cli

from specmd_sim import build_config, simulate
from specmd_sim.errors import SpecmdError
from specmd_sim.runs import read_result
from specmd_sim.scenario.schedule import is_online
from specmd_sim.sweep import expand, load_spec, read_rows, run_sweep
from specmd_sim.sweep.search import RateSearch, run_search, runs_needed, search_rate

# --- the search on closed-form attainment curves ----------------------------------------------


def step(threshold: float):
    """All requests meet the SLO up to ``threshold`` requests/s, none above."""
    return lambda rate: (1.0 if rate <= threshold else 0.0, rate)


SEARCH = RateSearch(attainment=0.9, min_rate_per_s=0.5, max_rate_per_s=100, tolerance=0.02)


@pytest.mark.parametrize("threshold", [0.5, 0.73, 1.0, 3.14159, 16.0, 63.9, 99.99])
def test_the_answer_brackets_a_step_within_the_tolerance(threshold: float) -> None:
    found = search_rate(SEARCH, step(threshold))
    assert found.outcome == "found"
    assert found.rate is not None and found.bad_rate is not None
    assert found.rate <= threshold < found.bad_rate
    assert found.bad_rate - found.rate <= SEARCH.tolerance * found.rate
    assert found.best == found.rate  # the result kept is the run at the rate found
    assert found.runs == len(found.probes) <= runs_needed(SEARCH)
    assert runs_needed(SEARCH) == 1 + math.ceil(math.log2(200)) + math.ceil(math.log2(50))
    # each probe's verdict is the curve's
    assert all((a >= 0.9) == (r <= threshold) for r, a in found.probes)


def test_the_bounds_are_reported_not_pretended() -> None:
    low = search_rate(SEARCH, step(0.4))
    assert (low.outcome, low.rate, low.bad_rate, low.runs) == ("lower-bound", None, 0.5, 1)
    assert low.best == 0.5  # the row shows the run at the lowest rate
    high = search_rate(SEARCH, step(1000))
    assert (high.outcome, high.rate, high.bad_rate) == ("upper-bound", 100, None)
    assert [r for r, _ in high.probes] == [0.5, 1, 2, 4, 8, 16, 32, 64, 100]


def test_max_runs_reports_the_bracket_reached() -> None:
    short = SEARCH.model_copy(update={"max_runs": 5})
    found = search_rate(short, step(3.0))  # 0.5 1 2 good, 4 bad, 3 good: 5 runs
    assert (found.outcome, found.rate, found.bad_rate, found.runs) == ("max-runs", 3.0, 4.0, 5)
    doubling = search_rate(short, step(1000))
    assert (doubling.outcome, doubling.rate, doubling.bad_rate) == ("max-runs", 8, None)


def test_a_non_monotone_curve_gives_a_good_rate_with_a_bad_one_just_above() -> None:
    def curve(rate: float) -> tuple[float, float]:  # good on [0, 1.3] and on [3, 4] only
        return (1.0 if rate <= 1.3 or 3 <= rate <= 4 else 0.0), rate

    found = search_rate(SEARCH, curve)
    assert found.outcome == "found" and found.rate is not None and found.bad_rate is not None
    assert curve(found.rate)[0] == 1.0 and curve(found.bad_rate)[0] == 0.0
    assert found.rate <= 1.3 < found.bad_rate <= found.rate * (1 + SEARCH.tolerance)


# --- the search on the simulator ---------------------------------------------------------------

# 4 requests, one at a time, a cache that holds their experts: TTFT is queueing plus a
# prefill of seconds, so attainment falls as the arrival rate grows
BASE = {
    "trace": "mixtral-synthetic",
    "cache": {"capacity": "80%"},
    "prefetch": {"kind": "none"},
    "workload": {"max_requests": 4},
    "timing": {"record_spans": False},
    "slo": {"ttft_s": 15},
}
TARGET = {"attainment": 0.75, "min_rate_per_s": 0.01, "max_rate_per_s": 10, "tolerance": 0.1}


def at_rate(rate: float) -> float:
    """SLO attainment of a single run at ``rate``, built here with the public API."""
    data = {**BASE, "workload": {**BASE["workload"], "arrivals": "poisson",
                                 "arrival_rate_per_s": rate}}  # fmt: skip
    return simulate(build_config(data)).metrics["slo_attainment"]


@pytest.fixture(scope="module")
def simulated():
    config = json.loads(json.dumps(build_config(BASE).model_dump(mode="json")))
    return run_search(RateSearch(**TARGET), config)


def test_single_runs_confirm_the_bracket(simulated) -> None:
    assert simulated.outcome == "found", simulated.probes
    assert simulated.bad_rate - simulated.rate <= TARGET["tolerance"] * simulated.rate
    assert at_rate(simulated.rate) >= TARGET["attainment"] > at_rate(simulated.bad_rate)
    assert simulated.best.metrics["slo_attainment"] == at_rate(simulated.rate)


def spec_file(folder: Path, spec: dict) -> Path:
    path = folder / "spec.yaml"
    path.write_text(json.dumps(spec))  # JSON is YAML
    return path


def test_a_search_sweep_stores_its_row_and_keeps_the_run_found(
    simulated, tmp_path: Path, monkeypatch, capsys
) -> None:
    spec = {"engine": "simulate", "base": BASE, "search": TARGET}
    out = tmp_path / "sweep"
    code, stdout, err = cli(monkeypatch, capsys, "sweep", str(spec_file(tmp_path, spec)),
                            "--out", str(out), "--workers", "1", "--keep-runs")  # fmt: skip
    assert code == 0 and stdout.startswith("1 points: 1 ok, 0 failed"), (stdout, err)
    assert f"run folders: {out}/_runs" in stdout
    assert err.startswith(f"point 0 (run): {simulated.rate:g} req/s meets the target, "
                          f"{simulated.bad_rate:g} req/s does not (attainment "), err  # fmt: skip
    (row,) = read_rows(out)
    # the same answer as the search in this process: same seed, same probes (determinism)
    assert (row["search.outcome"], row["search.rate_per_s"], row["search.failing_rate_per_s"],
            row["search.runs"]) == ("found", simulated.rate, simulated.bad_rate,
                                    simulated.runs)  # fmt: skip
    assert json.loads(row["search.probes"]) == [list(p) for p in simulated.probes]
    assert row["config.workload.arrival_rate_per_s"] == simulated.rate
    assert row["slo_attainment"] == simulated.best.metrics["slo_attainment"]
    assert row["goodput_rps"] == simulated.best.metrics["goodput_rps"]
    kept = read_result(out / row["run_dir"])
    assert kept["config"]["workload"]["arrival_rate_per_s"] == simulated.rate
    changed = {**spec, "search": {**TARGET, "tolerance": 0.2}}
    with pytest.raises(SpecmdError, match="expected the spec that made this sweep folder, got "
                       "one whose search differs"):  # fmt: skip
        run_sweep(spec_file(tmp_path, changed), out, resume=True, keep_runs=True)


# --- bad inputs ----------------------------------------------------------------------------------

SPEC = {"engine": "simulate", "base": BASE, "search": TARGET}


@pytest.mark.parametrize(
    ("change", "start"),
    [
        ({"base": {**BASE, "slo": None}},
         "sweep spec {spec}: point 0 (run): slo: expected the limits the search meets"),
        ({"search": {**TARGET, "attainment": 0}},
         "sweep spec {spec}: search.attainment: input should be greater than 0, got 0"),
        ({"search": {**TARGET, "attainment": 1.5}},
         "sweep spec {spec}: search.attainment: input should be less than or equal to 1"),
        ({"search": {**TARGET, "min_rate_per_s": 20}},
         "sweep spec {spec}: search: expected min_rate_per_s < max_rate_per_s, got 20 >= 10"),
        ({"engine": "replay"},
         "sweep spec {spec}: search: expected engine: simulate (slo_attainment is a timing "
         "metric), got engine: replay"),
        ({"axes": {"workload.arrival_rate_per_s": [1, 2]}},
         "sweep spec {spec}: search: expected no axis workload.arrival_rate_per_s"),
    ],
)  # fmt: skip
def test_bad_searches_are_one_line(
    change: dict, start: str, tmp_path: Path, monkeypatch, capsys
) -> None:
    spec = spec_file(tmp_path, {**SPEC, **change})
    code, out, err = cli(monkeypatch, capsys, "sweep", str(spec), "--out", str(tmp_path / "o"))
    assert (code, out) == (2, "") and err.count("\n") == 1, err
    assert err.startswith(f"error: {start.format(spec=spec)}"), err
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("name", ["sweep-slo.yaml", "sweep-slo-batch8.yaml"])
def test_the_example_specs_are_searches(name: str) -> None:
    spec = load_spec(Path(__file__).parents[2] / "examples" / name)
    points = expand(spec)
    assert spec.search is not None and len(points) == 2
    for point in points:
        assert point.config.workload.arrivals == "poisson" and point.config.slo is not None
        assert point.config.workload.arrival_rate_per_s == spec.search.min_rate_per_s
    if name == "sweep-slo-batch8.yaml":  # the schedule formed online, and before the run
        assert [p.config.workload.schedule for p in points] == ["online", "fixed"]
        assert {is_online(p.config) for p in points} == {True, False}

"""The metric specification: real runs of both engines report exactly its names, with values of
its types; names outside it are refused; docs/metrics.md is generated from it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from specmd_sim import SimConfig, __version__, apply_overrides, build_config, replay, simulate
from specmd_sim.metric_docs import render
from specmd_sim.metrics import (
    INPUTS,
    METRICS,
    TABLES,
    UNITS,
    RunResult,
    reported,
    result_row,
    value_type,
)

DOC = Path(__file__).resolve().parents[1] / "docs" / "metrics.md"
SMALL = ["trace=mixtral-synthetic", "workload.max_requests=1", "cache.capacity=16"]


def run(engine: str, *changes: str) -> RunResult:
    config = build_config(apply_overrides({}, [*SMALL, *changes]))
    return (simulate if engine == "simulate" else replay)(config)


@pytest.fixture(scope="module")
def runs() -> dict[str, RunResult]:
    return {
        "replay": run("replay"),
        "simulate": run("simulate", "timing.record_spans=false"),
        "replay+gap": run("replay", "belady_gap=true"),
        "simulate+gap": run("simulate", "timing.record_spans=false", "belady_gap=true"),
    }


@pytest.mark.parametrize("name", ["replay", "simulate", "replay+gap", "simulate+gap"])
def test_runs_report_exactly_the_metrics_of_the_spec(runs: dict[str, RunResult], name: str):
    result = runs[name]
    expected = {m.name for m in METRICS.values() if reported(m, result.engine, result.config)}
    assert set(result.metrics) == expected
    assert ("belady_misses" in expected) == name.endswith("+gap")
    for key, value in result.metrics.items():
        assert value is None or isinstance(value, value_type(METRICS[key].unit)), key
    for table, spec in TABLES.items():
        columns = {c for c, m in spec.columns.items() if result.engine in m.engines}
        assert set(getattr(result, table)) == columns, table
    assert set(result.inputs) == set(INPUTS)
    for key, value in result.inputs.items():
        assert value is None or isinstance(value, value_type(INPUTS[key].unit)), key
    assert result.to_dict()["specmd_sim"] == __version__


def test_a_name_outside_the_spec_is_refused(runs: dict[str, RunResult]) -> None:
    data = runs["replay"].to_dict()
    args = [data[k] for k in ("engine", "metrics", "per_layer", "per_request", "config",
                              "inputs", "hardware_grade")]  # fmt: skip
    args[1] = {**data["metrics"], "hit_ratio": 0.5}
    with pytest.raises(ValueError, match=r"metrics: 'hit_ratio' is not in the metric spec"):
        RunResult(*args).to_dict()
    args[1] = {**data["metrics"], "ttft_s": 1.0}
    with pytest.raises(ValueError, match=r"'ttft_s' is reported by simulate only, got it from"):
        RunResult(*args).to_json()
    args[1], args[2] = data["metrics"], {**data["per_layer"], "stall": [0.0]}
    with pytest.raises(ValueError, match=r"per_layer: 'stall' is not in the metric spec"):
        RunResult(*args).to_dict()


def test_every_entry_has_a_unit_a_label_and_a_formula() -> None:
    entries = [*METRICS.values(), *INPUTS.values()]
    entries += [m for t in TABLES.values() for m in t.columns.values()]
    for m in entries:
        assert m.unit in UNITS and m.better in ("higher", "lower", "none"), m.name
        assert m.label and m.description and m.formula, m.name
        assert m.when is None or _is_field(m.when), m.name


def _is_field(path: str) -> bool:
    """Whether a dotted path (``memory.dram_cache``) names a field of SimConfig."""
    model: Any = SimConfig
    for part in path.split("."):
        if not (isinstance(model, type) and part in getattr(model, "model_fields", {})):
            return False
        model = model.model_fields[part].annotation
        model = next((a for a in getattr(model, "__args__", ()) if a is not type(None)), model)
    return True


def test_metrics_doc_is_current() -> None:
    """docs/metrics.md is generated: regenerate with
    `python -m specmd_sim.metric_docs > docs/metrics.md`."""
    assert DOC.read_text() == render()


def test_metrics_doc_has_a_row_per_metric_and_a_section_per_table() -> None:
    text = render()
    for name in METRICS:
        assert re.search(rf"^\| `{name}` \|", text, re.M), name
    for table in TABLES:
        assert f"## Table `{table}`" in text
    assert "| `throughput_tok_s` | throughput | tok/s | higher |" in text


def test_result_row_flattens_metrics_inputs_and_config(runs: dict[str, RunResult]) -> None:
    result = runs["replay"]
    row = result_row(result.to_dict())
    assert row["engine"] == "replay" and row["hardware_grade"] is None
    assert row["hit_rate"] == result.metrics["hit_rate"]
    assert row["config.eviction.kind"] == "least-stale"
    assert row["config.cache.capacity"] == 16
    assert row["inputs.model"] == "mixtral-8x7b"
    assert not any(isinstance(v, dict) for v in row.values())

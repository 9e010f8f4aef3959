"""Every metric and table column of the spec is shown in its own unit by the report (the
"All metrics" table, the resource and GPU tables) and by ``specmd compare``'s table."""

from __future__ import annotations

import pytest

from specmd_sim.metrics import METRICS, TABLES, UNITS
from specmd_sim.report.run_report import metric_rows, table_rows

# a sample value of each unit and how a person reads it
SHOWN = {
    "count": (12345, "12,345"),
    "fraction": (0.0819, "8.19%"),
    "s": (0.01478, "14.78 ms"),
    "B": (3 * 2**30, "3 GiB"),
    "B/s": (5.3e10, "53 GB/s"),
    "B/token": (2.5 * 2**20, "2.5 MiB/token"),
    "tok/s": (23.917, "23.92 tok/s"),
    "req/s": (0.48153, "0.4815 req/s"),
    "id": ("gpu0", "gpu0"),
    "text": ("belady", "belady"),
    "factor": (0.6391, "x0.6391"),
}


def test_every_unit_has_a_sample() -> None:
    assert SHOWN.keys() == UNITS.keys()


@pytest.mark.parametrize("name", sorted(METRICS))
def test_all_metrics_table_shows_each_metric_in_its_unit(name: str) -> None:
    metric = METRICS[name]
    sample, shown = SHOWN[metric.unit]
    assert metric_rows({name: sample}) == [[name, metric.label, shown]]
    assert metric_rows({name: None}) == [[name, metric.label, "–"]]


@pytest.mark.parametrize(
    ("table", "column"), [(t, c) for t, spec in TABLES.items() for c in spec.columns]
)
def test_tables_show_each_column_in_its_unit(table: str, column: str) -> None:
    sample, shown = SHOWN[TABLES[table].columns[column].unit]
    assert table_rows(table, {column: [sample, None]}) == [[shown], ["–"]]


@pytest.mark.parametrize(
    ("seconds", "shown"), [(2.5, "2.5 s"), (0.0125, "12.5 ms"), (3e-6, "3 us"), (4e-9, "4 ns")]
)
def test_times_take_the_prefix_that_fits(seconds: float, shown: str) -> None:
    assert METRICS["ttft_s"].format(seconds) == shown

"""A hardware what-if as sweep axes: the bundled link-bandwidth x GPU example runs, each
point's link is the axis value, TPOT falls with the bandwidth where the experts do not fit and
not where they do, and `specmd compare` draws TPOT against the bandwidth, a line per GPU."""

from __future__ import annotations

from pathlib import Path

import pytest

from specmd_sim.hardware import load_profile
from specmd_sim.report.rows import BANDWIDTH, plan
from specmd_sim.sweep import load_table, run_sweep

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sweep-hardware.yaml"
RATES = {"16GB/s": 16.0, "32GB/s": 32.0, "64GB/s": 64.0, "128GB/s": 128.0}


@pytest.fixture(scope="module")
def table(tmp_path_factory: pytest.TempPathFactory):
    out = tmp_path_factory.mktemp("hw") / "sweep"
    summary = run_sweep(EXAMPLE, out, workers=1)
    assert (summary.points, summary.ok) == (12, 12)
    return load_table(out)


def test_each_point_runs_on_its_links_bandwidth(table) -> None:
    layout = plan(table.to_dict("records"))
    assert BANDWIDTH in [a.column for a in layout.axes]
    assert layout.setting_columns == ["config.hardware"]  # a line per GPU; the what-if is x
    by_point = {(r["config.hardware"], r[BANDWIDTH]): r for r in layout.rows}
    for gpu in ("rtx4090", "h100-pcie", "h200"):
        # the path's rate: the link's, or the host DRAM's where that is lower (the RTX 4090's
        # desktop host: 83.2 GB/s of dual-channel DDR5)
        dram = load_profile(gpu).hosts[0].dram_bandwidth_bytes_per_s.value / 1e9
        assert {bw for g, bw in by_point if g == gpu} == {min(r, dram) for r in RATES.values()}


def test_the_link_matters_only_where_the_experts_do_not_fit(table) -> None:
    tpot = {(r["axis.hardware"], RATES[r["axis.hardware.links.pcie0.bandwidth_bytes_per_s"]]):
            r["tpot_s"] for r in table.to_dict("records")}  # fmt: skip
    for gpu in ("rtx4090", "h100-pcie"):  # 18 and 70 GiB of Mixtral's 87: the link decides
        series = [tpot[gpu, bw] for bw in sorted(RATES.values())]
        assert series == sorted(series, reverse=True) and series[0] > 3 * series[-1]
    h200 = {tpot["h200", bw] for bw in RATES.values()}  # holds every expert: no transfers
    assert max(h200) == pytest.approx(min(h200), rel=1e-9)

"""``specmd compare`` on rows from run folders and sweep folders: what varies becomes an axis,
a policy or a setting; failed rows are left out; both sources mix."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from specmd_sim import SimConfig, replay, simulate
from specmd_sim.errors import SpecmdError
from specmd_sim.metrics import result_row
from specmd_sim.report.compare import compare_figures, compare_table, write_compare
from specmd_sim.report.rows import BANDWIDTH, CAPACITY, load_rows, plan
from specmd_sim.runs import read_result, write_run


@pytest.fixture(scope="module")
def grid(
    tiny_config: Callable[..., SimConfig], tmp_path_factory: pytest.TempPathFactory
) -> list[Path]:
    """Replay runs: 2 eviction policies x 3 capacities x 2 seeds."""
    root = tmp_path_factory.mktemp("grid")
    dirs = []
    for eviction in ("lru", "least-stale"):
        for capacity in (16, 24, 32):
            for seed in (0, 1):
                cfg = tiny_config(cache={"capacity": capacity}, eviction={"kind": eviction},
                                  seed=seed)  # fmt: skip
                run_dir = root / f"{eviction}-{capacity}-{seed}"
                write_run(run_dir, replay(cfg))
                dirs.append(run_dir)
    return dirs


def test_capacity_becomes_the_x_axis_and_policies_the_lines(grid: list[Path]) -> None:
    layout = plan(load_rows(grid))
    assert [a.column for a in layout.axes] == [CAPACITY]
    assert layout.policies == ["lru + top-k", "least-stale + top-k"]
    assert layout.seeds and not layout.setting_columns and layout.failed == 0
    figures = compare_figures(layout)
    assert set(figures) == {"vs-capacity_pct", "policies"}
    lines = [t for t in figures["vs-capacity_pct"].data if t.xaxis == "x"]
    assert [t.name for t in lines] == layout.policies
    for line in lines:
        assert len(line.x) == 3 and list(line.x) == sorted(line.x)
        rows = [r for r in layout.rows if r["policy"] == line.name]
        by_capacity = {}
        for r in rows:
            by_capacity.setdefault(r[CAPACITY], []).append(r["hit_rate"])
        assert list(line.y) == pytest.approx(
            [sum(v) / len(v) for _, v in sorted(by_capacity.items())]
        )
        assert list(line.customdata) == [2, 2, 2]  # two seeds averaged per point


def test_bandwidth_axis_from_the_hardware_profiles(
    tiny_config: Callable[..., SimConfig], tmp_path: Path
) -> None:
    dirs = []
    for hardware in ("h100-pcie", "slow-link-5gbps"):
        run_dir = tmp_path / hardware
        write_run(run_dir, simulate(tiny_config(hardware=hardware)))
        dirs.append(run_dir)
    layout = plan(load_rows(dirs))
    assert [a.column for a in layout.axes] == [BANDWIDTH]
    bandwidths = sorted(r[BANDWIDTH] for r in layout.rows)
    assert bandwidths[0] == pytest.approx(5.0, rel=0.05) and bandwidths[1] > 5.0
    fig = compare_figures(layout)["vs-link_bandwidth_gbps"]
    titles = [a.text for a in fig.layout.annotations]
    assert titles[:2] == ["TPOT (ms)", "TTFT (ms)"] and titles[-1] == "stall (ms)"
    assert len(titles) == 4 and "throughput" in titles[2]  # capacity planning: TPOT, TTFT, tok/s
    assert fig.layout.xaxis.type == "log"
    slow, fast = sorted(layout.rows, key=lambda r: r[BANDWIDTH])
    assert slow["ttft_s"] > fast["ttft_s"]


def _sweep_folder(path: Path, rows: list[dict]) -> Path:
    pd = pytest.importorskip("pandas")
    pytest.importorskip("pyarrow")
    path.mkdir()
    pd.DataFrame(rows).to_parquet(path / "000000-replay-abc.parquet")
    return path


def test_sweep_folders_and_run_folders_mix(grid: list[Path], tmp_path: Path) -> None:
    rows = []
    for i, run_dir in enumerate(grid[:6]):
        row = result_row(read_result(run_dir))
        rows.append({"point_index": i, "status": "ok", "error": None, **row})
    failed = dict(rows[0], point_index=6, status="error", error="boom", hit_rate=None)
    sweep = _sweep_folder(tmp_path / "sweep", [*rows, failed])
    loaded = load_rows([sweep, grid[6]])
    assert len(loaded) == 8 and loaded[0]["source"] == f"{sweep}#0"
    layout = plan(loaded)
    assert layout.failed == 1 and len(layout.rows) == 7
    assert layout.policies == ["lru + top-k", "least-stale + top-k"]
    header, body = compare_table(layout)
    assert header[:2] == ["source", "policy"] and len(body) == 7
    page = tmp_path / "compare.html"
    write_compare(layout, page, [str(sweep), str(grid[6])])
    assert "1 failed run(s) left out" in page.read_text()


def test_sweep_folder_without_pandas_is_a_clear_error(
    grid: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "sweep"
    folder.mkdir()
    (folder / "000000-x.parquet").write_bytes(b"")
    monkeypatch.setitem(__import__("sys").modules, "pandas", None)
    with pytest.raises(SpecmdError, match="needs pandas and pyarrow"):
        load_rows([folder])


def test_not_a_run_nor_a_sweep(tmp_path: Path) -> None:
    with pytest.raises(SpecmdError, match=r"expected a run folder .* or a sweep folder"):
        load_rows([tmp_path])

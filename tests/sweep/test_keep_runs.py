"""``specmd sweep --keep-runs``: each point's run folder in ``DIR/_runs/<point id>/``, named by
the row's ``run_dir``; the table otherwise as without the flag; resumed sweeps rerun a point
whose folder is missing or damaged; a folder its worker wrote where this machine cannot read it
(another node's disk) fails the point."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from support.cli import cli

import specmd_sim.sweep.runner as runner
from specmd_sim.errors import SpecmdError
from specmd_sim.metrics import result_row
from specmd_sim.runs import read_result
from specmd_sim.sweep import load_table, read_rows, run_sweep
from specmd_sim.sweep.executors import Task, run_point

# 2 timing-free points; a 0.1GiB cache cannot hold one Mixtral expert, so point 1 fails
SPEC = {
    "engine": "replay",
    "base": {"trace": "mixtral-synthetic", "workload": {"max_requests": 1}},
    "axes": {"capacity": [8, "0.1GiB"]},
}


def spec_file(folder: Path, spec: dict = SPEC) -> Path:
    path = folder / "spec.yaml"
    path.write_text(json.dumps(spec))  # JSON is YAML
    return path


@pytest.fixture(scope="module")
def kept(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("kept") / "sweep"
    summary = run_sweep(spec_file(out.parent), out, workers=1, keep_runs=True)
    assert (summary.ok, summary.errors) == (1, 1)
    return out


@pytest.fixture(scope="module")
def plain(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("plain") / "sweep"
    run_sweep(spec_file(out.parent), out, workers=1)
    return out


def test_without_the_flag_nothing_is_kept(plain: Path) -> None:
    assert "run_dir" not in load_table(plain).columns
    assert sorted(p.name for p in plain.iterdir() if p.is_dir()) == ["_meta"]
    assert "keep_runs" not in json.loads((plain / "_meta" / "points.json").read_text())


def test_the_table_is_the_plain_one_plus_run_dir(kept: Path, plain: Path) -> None:
    table = load_table(kept)
    assert list(table.columns).index("run_dir") == 5  # right after the bookkeeping
    pd.testing.assert_frame_equal(table.drop(columns="run_dir"), load_table(plain))


def test_each_ok_row_names_its_run_folder(kept: Path) -> None:
    ok, failed = read_rows(kept)
    assert ok["run_dir"] == f"_runs/{ok['point_id']}" and failed["run_dir"] is None
    # the folder holds the run that gave the row: its result row is the row's result part
    result = result_row(read_result(kept / ok["run_dir"]))
    # fields that may hold values of several kinds are text in the table (docs/sweeps.md)
    expected = {**result, "config.cache.capacity": "8", "config.parallel.gpus": "1"}
    assert {k: ok[k] for k in result} == expected
    assert sorted(p.name for p in (kept / "_runs").iterdir()) == [ok["point_id"]]


def test_specmd_report_opens_a_kept_run(kept: Path, tmp_path: Path, monkeypatch, capsys) -> None:
    row = read_rows(kept)[0]
    page = tmp_path / "report.html"
    code, _, err = cli(monkeypatch, capsys, "report", str(kept / row["run_dir"]),
                       "--out", str(page))  # fmt: skip
    assert (code, err) == (0, "") and page.stat().st_size > 0, err


def copy_sweep(source: Path, out: Path) -> Path:
    for path in source.rglob("*"):
        if path.is_file() and path.name != "lock":
            (out / path.relative_to(source)).parent.mkdir(parents=True, exist_ok=True)
            (out / path.relative_to(source)).write_bytes(path.read_bytes())
    return out


@pytest.mark.parametrize("damage", ["deleted", "changed", "result.json deleted"])
def test_resume_reruns_a_point_whose_folder_is_missing_or_damaged(
    kept: Path, tmp_path: Path, damage: str
) -> None:
    out = copy_sweep(kept, tmp_path / "sweep")
    row = read_rows(out)[0]
    folder = out / row["run_dir"]
    if damage == "deleted":
        for path in folder.iterdir():
            path.unlink()
        folder.rmdir()
    elif damage == "changed":
        (folder / "result.json").write_text("{}")
    else:
        (folder / "result.json").unlink()
    summary = run_sweep(spec_file(tmp_path), out, resume=True, keep_runs=True, workers=1)
    assert (summary.ran, summary.skipped) == (1, 1)  # that point only; the failed one stays
    pd.testing.assert_frame_equal(load_table(out), load_table(kept))
    assert read_result(folder) == read_result(kept / row["run_dir"])
    again = run_sweep(spec_file(tmp_path), out, resume=True, keep_runs=True, workers=1)
    assert again.ran == 0


def test_resume_needs_the_same_flag(kept: Path, plain: Path, tmp_path: Path) -> None:
    with pytest.raises(SpecmdError, match="resumed with --keep-runs, as it was made, got without"):
        run_sweep(spec_file(tmp_path), copy_sweep(kept, tmp_path / "a"), resume=True)
    with pytest.raises(SpecmdError, match="resumed without --keep-runs, as it was made, got with"):
        run_sweep(spec_file(tmp_path), copy_sweep(plain, tmp_path / "b"), resume=True,
                  keep_runs=True)  # fmt: skip


class ElsewhereExecutor:
    """Runs each point here, but writes its run folder where this process does not look, as a
    Ray worker on another node without a shared filesystem would."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def run(self, tasks, on_done) -> None:
        for task in tasks:
            assert task.run_dir is not None and Path(task.run_dir).is_absolute()
            elsewhere = str(self.folder / Path(task.run_dir).name)
            args = Task(task.index, task.engine, task.config, task.plugins, elsewhere).args
            on_done(task, run_point(*args))


def test_a_folder_this_machine_cannot_read_fails_its_point(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runner, "make_executor",
                        lambda *a: ElsewhereExecutor(tmp_path / "other-node"))  # fmt: skip
    out = tmp_path / "sweep"
    summary = run_sweep(spec_file(tmp_path), out, keep_runs=True)
    assert (summary.ok, summary.errors) == (0, 2)
    row = read_rows(out)[0]
    assert row["run_dir"] is None and row["hit_rate"] is None
    assert row["error"].startswith("--keep-runs: expected the point's run folder")
    assert "filesystem every node shares" in row["error"]
    assert (tmp_path / "other-node" / row["point_id"] / "result.json").is_file()


def test_ray_keeps_the_same_runs(kept: Path, tmp_path: Path) -> None:
    pytest.importorskip("ray", reason="Ray is an optional extra (pip install 'specmd-sim[ray]')")
    out = tmp_path / "ray"
    run_sweep(spec_file(tmp_path), out, executor="ray", workers=1, keep_runs=True)
    pd.testing.assert_frame_equal(load_table(out), load_table(kept))
    row = read_rows(out)[0]
    assert read_result(out / row["run_dir"]) == read_result(kept / row["run_dir"])

"""Running sweeps: identical tables on 1 and 2 workers and on Ray, failures recorded, kill -9
and resume without loss or duplicates, a crashing worker process contained."""

from __future__ import annotations

import json
import os
import runpy
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from specmd_sim import build_config, replay
from specmd_sim.errors import SpecmdError
from specmd_sim.metrics import result_row
from specmd_sim.sweep import load_table, read_rows, run_sweep
from specmd_sim.sweep.executors import WORKER_DIED

# 2 x 2 x 3 = 12 tiny timing-free points; the 0.1GiB cache cannot hold one Mixtral expert, so
# those 4 points fail when they run
SPEC = {
    "name": "tiny",
    "engine": "replay",
    "base": {"trace": "mixtral-synthetic", "workload": {"max_requests": 1}},
    "axes": {
        "eviction": ["lru", {"kind": "least-stale", "order": "layer"}],
        "prefetch": ["none", "top-k"],
    },
    "zip": [{"capacity": [8, "10%", "0.1GiB"], "seed": [0, 1, 2]}],
}
POINTS = 12


def specmd(*args: str, **kw) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "specmd_sim", *args], capture_output=True, text=True,
        timeout=300, **kw,
    )  # fmt: skip


@pytest.fixture(scope="module")
def spec_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("spec") / "tiny.yaml"
    path.write_text(yaml.safe_dump(SPEC, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def reference(spec_file: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The sweep run uninterrupted on one worker."""
    out = tmp_path_factory.mktemp("ref") / "sweep"
    summary = run_sweep(spec_file, out, workers=1)
    assert (summary.points, summary.ran, summary.ok, summary.errors) == (POINTS, POINTS, 8, 4)
    return out


def test_rows_are_result_rows_plus_bookkeeping(reference: Path) -> None:
    rows = read_rows(reference)
    assert [r["point_index"] for r in rows] == list(range(POINTS))
    config = build_config(
        {**SPEC["base"], "eviction": {"kind": "lru"}, "prefetch": {"kind": "none"},
         "cache": {"capacity": 8}, "seed": 0}
    )  # fmt: skip
    expected = result_row(json.loads(replay(config).to_json()))
    row = rows[0]
    # fields that may hold values of several kinds are text (docs/sweeps.md)
    assert {k: row[k] for k in expected} == {
        **expected,
        "config.cache.capacity": "8",
        "config.parallel.gpus": "1",
    }
    bookkeeping = {"point_index", "point_id", "status", "error", "offline",
                   "axis.eviction", "axis.prefetch", "axis.capacity", "axis.seed"}  # fmt: skip
    # the other columns are other points' config fields (least-stale's order), empty here
    others = set(row) - set(expected) - bookkeeping
    assert bookkeeping <= set(row) and others and all(row[k] is None for k in others)
    assert (row["status"], row["error"], row["axis.eviction"], row["axis.capacity"]) == (
        "ok",
        None,
        "lru",
        "8",
    )


def test_failed_points_are_recorded_and_the_sweep_goes_on(reference: Path) -> None:
    df = load_table(reference)
    failed = df[df["status"] == "error"]
    assert list(failed["point_index"]) == [2, 5, 8, 11]
    assert failed["error"].str.startswith("cache.capacity: expected room for at least one").all()
    assert failed["hit_rate"].isna().all() and failed["config.seed"].tolist() == [2] * 4
    assert df.loc[df["status"] == "ok", "hit_rate"].notna().all()
    assert df["point_id"].is_unique


def test_two_workers_give_the_same_table(spec_file: Path, reference: Path, tmp_path: Path) -> None:
    run_sweep(spec_file, tmp_path / "two", workers=2)
    pd.testing.assert_frame_equal(load_table(tmp_path / "two"), load_table(reference))


def test_ray_gives_the_same_table(spec_file: Path, reference: Path, tmp_path: Path) -> None:
    pytest.importorskip("ray", reason="Ray is an optional extra (pip install 'specmd-sim[ray]')")
    run_sweep(spec_file, tmp_path / "ray", executor="ray", workers=2)
    pd.testing.assert_frame_equal(load_table(tmp_path / "ray"), load_table(reference))


def test_resume_rules(spec_file: Path, reference: Path, tmp_path: Path) -> None:
    before = {p.name: p.stat().st_mtime_ns for p in reference.glob("*.parquet")}
    with pytest.raises(SpecmdError, match=r"expected a new or empty folder.*add --resume"):
        run_sweep(spec_file, reference)
    summary = run_sweep(spec_file, reference, resume=True)
    assert (summary.ran, summary.skipped) == (0, POINTS)
    assert {p.name: p.stat().st_mtime_ns for p in reference.glob("*.parquet")} == before
    other = {**SPEC, "axes": {**SPEC["axes"], "prefetch": ["none"]}}
    with pytest.raises(SpecmdError, match="expected the spec that made this sweep folder"):
        run_sweep(json_spec(tmp_path, other), reference, resume=True)


def test_retry_errors_reruns_only_failed_points(spec_file: Path, reference: Path, tmp_path: Path):
    out = tmp_path / "copy"
    out.mkdir()
    for part in reference.glob("*.parquet"):
        (out / part.name).write_bytes(part.read_bytes())
    (out / "_meta").mkdir()
    points = reference / "_meta" / "points.json"
    (out / "_meta" / "points.json").write_bytes(points.read_bytes())
    summary = run_sweep(spec_file, out, resume=True, retry_errors=True, workers=1)
    assert (summary.ran, summary.errors) == (4, 4)
    pd.testing.assert_frame_equal(load_table(out), load_table(reference))


def test_a_locked_folder_is_refused(spec_file: Path, tmp_path: Path) -> None:
    fcntl = pytest.importorskip("fcntl")
    (tmp_path / "out" / "_meta").mkdir(parents=True)
    (tmp_path / "out" / "_meta" / "points.json").write_text(
        json.dumps({"points": [{"point_id": p} for p in _point_ids(spec_file)]})
    )
    with open(tmp_path / "out" / "_meta" / "lock", "a") as held:
        fcntl.flock(held.fileno(), fcntl.LOCK_EX)
        with pytest.raises(SpecmdError, match="locked by a running sweep"):
            run_sweep(spec_file, tmp_path / "out", resume=True)


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="finds worker processes in /proc")
def test_kill_9_mid_sweep_then_resume(spec_file: Path, reference: Path, tmp_path: Path) -> None:
    out = tmp_path / "killed"
    proc = subprocess.Popen(
        [sys.executable, "-m", "specmd_sim", "sweep", str(spec_file), "--out", str(out),
         "--workers", "1"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    workers: set[int] = set()
    try:
        deadline = time.monotonic() + 120
        while _parts(out) < 3 and proc.poll() is None and time.monotonic() < deadline:
            workers |= _children(proc.pid)
            time.sleep(0.02)
        workers |= _children(proc.pid)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        done = _parts(out)
        assert 3 <= done < POINTS, f"the sweep was not stopped mid-way ({done} parts)"
        assert workers, "no worker process was seen"
        deadline = time.monotonic() + 10  # workers notice that their parent is gone
        while any(_alive(pid) for pid in workers) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not any(_alive(pid) for pid in workers), "orphaned workers kept running"
    finally:
        for pid in [proc.pid, *workers]:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)
    resumed = specmd("sweep", str(spec_file), "--out", str(out), "--resume",
                     "--csv", str(tmp_path / "t.csv"))  # fmt: skip
    assert resumed.returncode == 1, resumed.stderr  # the table holds failed points
    assert f"{POINTS - done} run now, {done} done before" in resumed.stdout
    table = load_table(out)
    pd.testing.assert_frame_equal(table, load_table(reference))
    assert table["point_id"].is_unique and len(table) == POINTS
    csv = pd.read_csv(tmp_path / "t.csv")
    assert csv["point_id"].tolist() == table["point_id"].tolist()


CRASH_PLUGIN = """
import os
import time
from typing import Literal

from specmd_sim.policies.eviction.lru import LRUEviction
from specmd_sim.policies.registry import EVICTION, PluginConfig


class CrashConfig(PluginConfig):
    kind: Literal["crash-on-start"] = "crash-on-start"


@EVICTION.register
class CrashOnStart(LRUEviction):
    kind = "crash-on-start"
    Config = CrashConfig
    description = "Kills the process that runs it."
    source = "tests"

    def __init__(self, config, ctx):
        os._exit(3)


class SlowConfig(PluginConfig):
    kind: Literal["slow-start"] = "slow-start"


@EVICTION.register
class SlowStart(LRUEviction):
    kind = "slow-start"
    Config = SlowConfig
    description = "LRU that takes a second to start."
    source = "tests"

    def __init__(self, config, ctx):
        time.sleep(1.0)
        super().__init__(config, ctx)
"""


def test_a_crashing_worker_process_does_not_take_the_sweep_down(tmp_path: Path) -> None:
    (tmp_path / "crashing_policy.py").write_text(CRASH_PLUGIN)
    spec = {
        "engine": "replay",
        "base": SPEC["base"] | {"cache": {"capacity": 8}},
        # point 0 is still running when point 1 kills its worker, and so is lost with it:
        # run again alone, it succeeds; point 1, alone, kills its worker again and is recorded
        "axes": {"eviction": ["crashing_policy:SlowStart", "crashing_policy:CrashOnStart",
                              "fifo"]},
    }  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(tmp_path)}
    proc = specmd("sweep", str(json_spec(tmp_path, spec)), "--out", str(tmp_path / "out"),
                  "--workers", "2", "--plugin", "crashing_policy", env=env)  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert "3 points: 2 ok, 1 failed" in proc.stdout
    df = load_table(tmp_path / "out")
    assert df["status"].tolist() == ["ok", "error", "ok"]
    assert df["error"].tolist()[1] == WORKER_DIED
    assert df["config.eviction.kind"].tolist()[1] == "crashing_policy:CrashOnStart"


# --- helpers ---------------------------------------------------------------------------------


def json_spec(folder: Path, spec: dict) -> Path:
    path = folder / f"spec-{len(list(folder.glob('spec-*')))}.yaml"
    path.write_text(json.dumps(spec))  # JSON is YAML
    return path


def _point_ids(spec_file: Path) -> list[str]:
    from specmd_sim.sweep import expand, load_spec

    return [p.point_id for p in expand(load_spec(spec_file))]


def _parts(out: Path) -> int:
    return len(list(out.glob("*.parquet"))) if out.is_dir() else 0


def _children(pid: int) -> set[int]:
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.add(int(stat.parent.name))
    return found


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_an_unguarded_run_sweep_in_a_re_imported_script_says_what_to_do(tmp_path: Path) -> None:
    """A spawned worker runs its parent's main script again as ``__mp_main__``: a ``run_sweep``
    at the script's top level refuses there, naming the guard (else every worker started a sweep
    of its own into the locked folder), and nothing is written; under the guard it is not
    called, and in the script run as ``__main__`` it would be."""
    out = tmp_path / "out"
    script = tmp_path / "script.py"
    script.write_text(f"from specmd_sim import run_sweep\nrun_sweep('no.yaml', {str(out)!r})\n")
    with pytest.raises(SpecmdError, match="put the call under if __name__ == '__main__':"):
        runpy.run_path(str(script), run_name="__mp_main__")
    assert not out.exists()
    guarded = tmp_path / "guarded.py"
    guarded.write_text(
        "from specmd_sim import run_sweep\nif __name__ == '__main__':\n"
        "    run_sweep('nowhere.yaml', 'out')\n"
    )
    runpy.run_path(str(guarded), run_name="__mp_main__")  # (nothing called)
    with pytest.raises(SpecmdError, match=r"no\.yaml"):  # (as the parent runs it: called)
        runpy.run_path(str(script), run_name="__main__")

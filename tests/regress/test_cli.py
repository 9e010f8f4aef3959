"""``specmd regress``: a policy change that slows TTFT beyond tolerance exits 1, within it 0;
--update rewrites the baseline; user errors exit 2 with one line."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support.cli import cli

from specmd_sim import SimConfig, build_config, simulate
from specmd_sim.runs import MANIFEST, write_manifest, write_run
from specmd_sim.sweep.store import ResultStore, table_columns

BASE = {"trace": "mixtral-synthetic", "workload": {"max_requests": 1, "prefill_chunk_tokens": 1},
        "predictor": {"kind": "noisy-oracle"}, "cache": {"capacity": 16},
        "timing": {"record_spans": False}}  # fmt: skip


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The policy under test (least-stale by layer) and a change of it that is slower (LRU)."""
    root = tmp_path_factory.mktemp("runs")
    policies = {"layer": {"kind": "least-stale", "order": "layer"}, "lru": {"kind": "lru"}}
    folders = {}
    for name, eviction in policies.items():
        result = simulate(build_config({**BASE, "eviction": eviction}))
        write_run(root / name, result)
        folders[name] = root / name
    return folders


def ttft(run: Path) -> float:
    return json.loads((run / "result.json").read_text())["metrics"]["ttft_s"]


def set_tolerance(path: Path, metric: str, rel: float) -> None:
    data = json.loads(path.read_text())
    data["metrics"][metric].update(rel=rel, abs=0.0)
    path.write_text(json.dumps(data))


def test_a_slower_policy_fails_beyond_tolerance_and_passes_within(
    runs: dict[str, Path], tmp_path: Path, monkeypatch, capsys
) -> None:
    base = tmp_path / "baseline.json"
    code, out, _ = cli(monkeypatch, capsys, "regress", str(base), "--run", str(runs["layer"]),
                       "--update", "--metric", "ttft_s")  # fmt: skip
    assert code == 0 and base.exists(), out
    stored = json.loads(base.read_text())
    assert stored["points"]["run"]["values"] == {"ttft_s": ttft(runs["layer"])}
    assert stored["metrics"]["ttft_s"]["better"] == "lower"

    code, out, _ = cli(monkeypatch, capsys, "regress", str(base), "--run", str(runs["layer"]))
    assert code == 0 and "ok: 1 checks (1 unchanged)" in out

    slowdown = ttft(runs["lru"]) / ttft(runs["layer"]) - 1
    assert slowdown > 0.01, "LRU should be measurably slower than least-stale by layer"
    set_tolerance(base, "ttft_s", slowdown / 2)  # the slowdown is beyond tolerance
    proc = subprocess.run(
        [sys.executable, "-m", "specmd_sim", "regress", str(base), "--run", str(runs["lru"])],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert "ttft_s" in proc.stdout and "regressed" in proc.stdout
    assert f"({slowdown:+.1%})" in proc.stdout
    assert "REGRESSION: 1 checks (1 regressed)" in proc.stdout

    set_tolerance(base, "ttft_s", slowdown * 2)  # within tolerance
    code, out, _ = cli(monkeypatch, capsys, "regress", str(base), "--run", str(runs["lru"]))
    assert code == 0 and "ok: 1 checks (1 moved)" in out

    code, out, _ = cli(monkeypatch, capsys, "regress", str(base), "--run", str(runs["lru"]),
                       "--update")  # fmt: skip
    assert code == 0 and "updated" in out
    assert json.loads(base.read_text())["points"]["run"]["values"] == {"ttft_s": ttft(runs["lru"])}
    assert json.loads(base.read_text())["metrics"]["ttft_s"]["rel"] == slowdown * 2  # kept


def test_by_default_a_new_baseline_fails_any_slowdown_and_tolerance_is_a_choice(
    runs: dict[str, Path], tmp_path: Path, monkeypatch, capsys
) -> None:
    """A run is deterministic: the default check of a new baseline fails the policy change
    whatever its size; `--update --tolerance 0.5` writes a looser check, by choice."""
    strict, loose = tmp_path / "strict.json", tmp_path / "loose.json"
    cli(monkeypatch, capsys, "regress", str(strict), "--run", str(runs["layer"]), "--update")
    assert json.loads(strict.read_text())["metrics"]["ttft_s"]["rel"] == 1e-9
    code, out, _ = cli(monkeypatch, capsys, "regress", str(strict), "--run", str(runs["lru"]))
    assert code == 1 and "regressed" in out
    code, out, _ = cli(monkeypatch, capsys, "regress", str(loose), "--run", str(runs["layer"]),
                       "--update", "--metric", "ttft_s", "--tolerance", "0.5")  # fmt: skip
    assert code == 0 and json.loads(loose.read_text())["metrics"]["ttft_s"]["rel"] == 0.5
    slowdown = ttft(runs["lru"]) / ttft(runs["layer"]) - 1
    assert 0 < slowdown < 0.5
    code, out, _ = cli(monkeypatch, capsys, "regress", str(loose), "--run", str(runs["lru"]))
    assert code == 0 and "ttft_s" in out  # moved, within the chosen tolerance


def test_default_baseline_flags_slower_hardware(
    runs: dict[str, Path], tmp_path: Path, monkeypatch, capsys
) -> None:
    base = tmp_path / "baseline.json"
    cli(monkeypatch, capsys, "regress", str(base), "--run", str(runs["layer"]), "--update")
    assert set(json.loads(base.read_text())["metrics"]) >= {"ttft_s", "hit_rate", "stall_s"}
    slow = simulate(build_config({**BASE, "eviction": {"kind": "least-stale", "order": "layer"},
                                  "hardware": "slow-link-5gbps"}))  # fmt: skip
    write_run(tmp_path / "slow", slow)
    code, out, _ = cli(monkeypatch, capsys, "regress", str(base), "--run", str(tmp_path / "slow"))
    assert code == 1
    assert "ttft_s" in out and "stall_s" in out and "config changed" in out
    assert "hit_rate" not in out  # the hardware does not change hits


def test_sweep_baselines(tmp_path: Path, monkeypatch, capsys) -> None:
    def rows(ttft_1: float, status_2: str) -> list[dict]:
        return [
            {"point_index": i, "point_id": f"replay-{i}", "status": status, "error": error,
             "axis.capacity": cap, "engine": "simulate", "ttft_s": t, "hit_rate": 0.5}
            for i, (cap, t, status, error) in enumerate(
                [("8", 1.0, "ok", None), ("16", ttft_1, "ok", None),
                 ("5%", 2.0, status_2, None if status_2 == "ok" else "boom")]
            )
        ]  # fmt: skip

    def write(folder: Path, table: list[dict]) -> Path:
        axes = {"capacity": [row["axis.capacity"] for row in table]}
        store = ResultStore(folder, table_columns("simulate", axes, [SimConfig()]), len(table))
        store.scan()
        for row in table:
            store.append(row)
        return folder

    before = write(tmp_path / "before", rows(1.0, "ok"))
    base = tmp_path / "sweep.json"
    code, out, _ = cli(
        monkeypatch, capsys, "regress", str(base), "--sweep", str(before), "--update"
    )
    assert code == 0 and "3 points x 2 metrics" in out
    assert sorted(json.loads(base.read_text())["points"]) == ["capacity=16", "capacity=5%",
                                                               "capacity=8"]  # fmt: skip
    code, out, _ = cli(monkeypatch, capsys, "regress", str(base), "--sweep", str(before))
    assert code == 0
    after = write(tmp_path / "after", rows(1.2, "error"))
    code, out, _ = cli(monkeypatch, capsys, "regress", str(base), "--sweep", str(after))
    assert code == 1
    assert "capacity=16" in out and "regressed" in out and "error: boom" in out

    # a part damaged after it was written: one line naming it, with or without --update
    part = sorted(after.glob("*.parquet"))[1]
    part.write_bytes(part.read_bytes()[:100])
    for update in ((), ("--update",)):
        code, out, err = cli(monkeypatch, capsys, "regress", str(base), "--sweep", str(after),
                             *update)  # fmt: skip
        assert (code, out) == (2, "") and err.count("\n") == 1, err
        assert err.startswith(f"error: {part}: expected a parquet result file, got an "
                              "unreadable one (Parquet magic bytes not found")  # fmt: skip
    assert sorted(json.loads(base.read_text())["points"]) == ["capacity=16", "capacity=5%",
                                                               "capacity=8"]  # fmt: skip


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ((), "expected exactly one of --run RUN_DIR or --sweep SWEEP_DIR"),
        (("--run", "a", "--sweep", "b"), "expected exactly one of"),
        (("--run", "nowhere"), "--run nowhere: expected a run folder with result.json"),
        (("--sweep", "nowhere"), "sweep folder nowhere: expected a folder"),
        (("--run", "x", "--metric", "ttft_s"), "--metric: expected together with --update"),
    ],
)
def test_user_errors_exit_2_with_one_line(
    tmp_path: Path, monkeypatch, capsys, args: tuple[str, ...], fragment: str
) -> None:
    monkeypatch.chdir(tmp_path)
    code, _, err = cli(monkeypatch, capsys, "regress", "base.json", *args)
    assert code == 2 and err.count("\n") == 1 and fragment in err, err


def test_a_bad_metric_to_add_is_the_commands_one_line(
    runs: dict[str, Path], tmp_path: Path, monkeypatch, capsys
) -> None:
    """An unknown ``--metric`` with ``--update`` of an existing baseline: its line alone (no
    comparison shown before it), and the baseline as it was."""
    base = tmp_path / "baseline.json"
    code, _, _ = cli(monkeypatch, capsys, "regress", str(base), "--run", str(runs["layer"]),
                     "--update")  # fmt: skip
    assert code == 0
    before = base.read_bytes()
    code, out, err = cli(monkeypatch, capsys, "regress", str(base), "--run", str(runs["layer"]),
                         "--update", "--metric", "nonsense")  # fmt: skip
    assert code == 2 and err.count("\n") == 1 and "nonsense" in err, err
    assert out == "" and base.read_bytes() == before


def test_missing_baseline_without_update(runs, tmp_path: Path, monkeypatch, capsys) -> None:
    code, _, err = cli(monkeypatch, capsys, "regress", str(tmp_path / "b.json"), "--run",
                       str(runs["layer"]))  # fmt: skip
    assert code == 2 and "expected a baseline file, got none (create it with --update)" in err


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda r: [], "expected a specmd result, got []"),
        (
            lambda r: {k: v for k, v in r.items() if k != "engine"},
            "engine: expected one of replay, simulate, got none",
        ),
        (lambda r: {**r, "metrics": [1]}, "metrics: expected a mapping, got [1]"),
    ],
)
def test_a_malformed_result_is_refused_not_compared(
    runs, tmp_path: Path, monkeypatch, capsys, change, message: str
) -> None:
    run = tmp_path / "run"
    shutil.copytree(runs["layer"], run)
    result = json.loads((run / "result.json").read_text())
    (run / "result.json").write_text(json.dumps(change(result)))
    write_manifest(run, [run / name for name in json.loads((run / MANIFEST).read_text())["files"]])
    base = tmp_path / "b.json"
    code, out, err = cli(monkeypatch, capsys, "regress", str(base), "--run", str(run), "--update")
    assert (code, out, err) == (2, "", f"error: {run / 'result.json'}: {message}\n")
    assert not base.exists()

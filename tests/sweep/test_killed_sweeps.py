"""``specmd sweep`` killed (SIGKILL), terminated (SIGTERM) or interrupted (SIGINT) at random
moments of a run or a rerun: every reader of the folder meanwhile sees complete rows (those of
the uninterrupted sweep) or one clear line, SIGTERM and SIGINT stop it cleanly (no traceback,
no leaked semaphore, "interrupted", exit 143 or 130), and a last rerun gives the table of the
uninterrupted sweep."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest

from specmd_sim.cli import main
from specmd_sim.errors import SpecmdError
from specmd_sim.sweep import load_table, read_rows

# 2 x 3 tiny timing-free points; the 0.1GiB cache cannot hold one expert, so 3 points fail, and
# every rerun with --retry-errors writes their rows again (replacing the old ones)
SPEC = {
    "engine": "replay",
    "base": {"trace": "mixtral-synthetic", "workload": {"max_requests": 1}},
    "axes": {"capacity": [8, "0.1GiB"], "seed": [0, 1, 2]},
}
KILLS = [(sig, gate) for gate in (1, 0) for sig in (signal.SIGKILL, signal.SIGTERM, signal.SIGINT)]
EXIT = {signal.SIGKILL: -signal.SIGKILL, signal.SIGTERM: 143, signal.SIGINT: 130}


def regress_sweep(folder: Path, baseline: Path, monkeypatch, capsys) -> tuple[int, str]:
    """``specmd regress BASELINE --sweep FOLDER --update`` in this process: (code, stderr)."""
    monkeypatch.setattr(sys, "argv", ["specmd", "regress", str(baseline), "--sweep",
                                      str(folder), "--update"])  # fmt: skip
    with pytest.raises(SystemExit) as info:
        main()
    return info.value.code or 0, capsys.readouterr().err


def check_readers(out: Path, reference: dict[int, dict], monkeypatch, capsys) -> None:
    """Each reader sees rows of the uninterrupted sweep, never a part of one, or one line."""
    empty = ("expected a folder, got none", "expected result files, got none")
    for read in (read_rows, lambda root: load_table(root).to_dict("records")):
        try:
            rows = read(out)
        except SpecmdError as exc:
            assert "\n" not in str(exc) and str(exc).endswith(empty), exc
            continue
        for row in rows:
            expected = reference[row["point_index"]]
            assert {k: v for k, v in row.items() if not pd.isna(v)} == {
                k: v for k, v in expected.items() if v is not None
            }
    code, err = regress_sweep(out, out.parent / "baseline.json", monkeypatch, capsys)
    assert code == 0 or (code == 2 and err.count("\n") == 1 and err.strip().endswith(empty)), err


def state(out: Path) -> tuple[int | None, dict[str, int]]:
    """The inodes of the point list and of the parts: new ones once a sweep has written them."""
    try:
        listing: int | None = (out / "_meta" / "points.json").stat().st_ino
    except FileNotFoundError:
        listing = None
    parts = {}
    for part in out.glob("*.parquet"):
        try:
            parts[part.name] = part.stat().st_ino
        except FileNotFoundError:  # replaced meanwhile
            continue
    return listing, parts


def started(before: tuple[int | None, dict[str, int]], now: tuple[int | None, dict[str, int]]):
    """When the sweep has written its point list, and when it has written its first part."""
    return now[0] != before[0], any(before[1].get(name) != ino for name, ino in now[1].items())


def start(command: list[str], out: Path, gate: int) -> tuple[subprocess.Popen[str], float]:
    """Start a sweep; return once it has written its point list (``gate`` 0) or its first part
    (1), or has ended, and when."""
    before = state(out)
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not started(before, state(out))[gate] and proc.poll() is None:
        assert time.monotonic() < deadline, "the sweep did not start"
        time.sleep(0.005)
    return proc, time.monotonic()


@pytest.mark.slow
def test_killed_sweeps_leave_complete_rows_and_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(json.dumps(SPEC))

    def command(out: Path) -> list[str]:
        return [sys.executable, "-m", "specmd_sim", "sweep", str(spec), "--out", str(out),
                "--workers", "1", "--resume", "--retry-errors"]  # fmt: skip

    # the uninterrupted sweep, and how long its phases take: from its point list to its first
    # part (starting the workers), and from there to its end (running the points)
    ref = tmp_path / "reference"
    proc, listed = start(command(ref), ref, gate=0)
    while not state(ref)[1] and proc.poll() is None:
        time.sleep(0.005)
    first = time.monotonic()
    assert proc.wait(timeout=120) == 1, proc.communicate()  # the table holds failed points
    spans = (first - listed, time.monotonic() - first)
    reference = {row["point_index"]: row for row in read_rows(ref)}
    out = tmp_path / "out"
    rng = random.Random(16)
    # each signal once while the workers start and once while points run; the first kills
    # stop a sweep part way, resumed by the next; the later ones, once the table is whole,
    # stop reruns of its failed points, whose rows they replace
    for sig, gate in KILLS:
        proc, began = start(command(out), out, gate)
        time.sleep(max(0.0, began + rng.uniform(0.0, spans[gate]) - time.monotonic()))
        proc.send_signal(sig)
        stdout, err = proc.communicate(timeout=60)
        done = "6 points: " in stdout  # the signal came once the sweep had done its work
        assert proc.returncode == EXIT[sig] or (done and proc.returncode in (0, 1, -sig)), (
            sig, proc.returncode, err)  # fmt: skip
        if sig != signal.SIGKILL:
            assert "Traceback" not in err and "leaked" not in err, err
            if proc.returncode == EXIT[sig]:
                *_, stopped, last = err.splitlines()
                assert last == "interrupted" and (stopped.startswith("stopped: ") or done), err
        check_readers(out, reference, monkeypatch, capsys)
    final = subprocess.run(command(out), capture_output=True, text=True, timeout=120)
    assert final.returncode == 1, final.stderr
    assert "6 points: 3 ok, 3 failed" in final.stdout
    pd.testing.assert_frame_equal(load_table(out), load_table(tmp_path / "reference"))

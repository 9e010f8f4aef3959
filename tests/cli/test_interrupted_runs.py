"""A rerun into an existing run folder that is interrupted at any point of its write phase
leaves the old folder complete; readers see the old folder, the new one, or one clear line."""

from __future__ import annotations

import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

import specmd_sim.runs as runs
from specmd_sim.cli import app
from specmd_sim.errors import SpecmdError
from specmd_sim.runs import check_run_folder

RUNNER = CliRunner()
SMALL = ["--set", "workload.max_requests=1"]


def run(out: Path, *extra: str) -> None:
    result = RUNNER.invoke(app, ["run", *SMALL, "--out", str(out), *extra], catch_exceptions=False)
    assert result.exit_code == 0, result.output


class Interrupt(Exception):
    pass


@pytest.mark.parametrize("where", ["write_spans", "write_perfetto_trace", "write_manifest"])
def test_an_interrupted_rerun_leaves_the_old_folder(
    where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "run"
    run(out, "--seed", "1")
    before = {p.name: p.read_bytes() for p in out.iterdir()}

    def fail(*args: object, **kwargs: object) -> None:
        raise Interrupt(where)

    monkeypatch.setattr(runs, where, fail)
    with pytest.raises(Interrupt):
        RUNNER.invoke(app, ["run", *SMALL, "--out", str(out), "--seed", "2"],
                      catch_exceptions=False)  # fmt: skip
    assert {p.name: p.read_bytes() for p in out.iterdir()} == before
    check_run_folder(out)
    assert [p.name for p in tmp_path.iterdir()] == ["run"]  # no temporary folder left


def test_an_edited_or_incomplete_folder_is_refused_in_one_line(tmp_path: Path) -> None:
    out = tmp_path / "run"
    run(out)
    (out / "trace.pftrace.gz").write_bytes(gzip.compress(b"{}"))
    with pytest.raises(SpecmdError, match=r"expected trace\.pftrace\.gz of \d+ bytes .* rerun it"):
        check_run_folder(out)
    (out / "manifest.json").unlink()
    with pytest.raises(SpecmdError, match=r"expected a complete run folder .* rerun it"):
        check_run_folder(out)
    result = RUNNER.invoke(app, ["report", str(out)])
    assert result.exit_code != 0 and "complete run folder" in str(result.exception)


def test_a_bad_out_is_refused_before_any_work(tmp_path: Path) -> None:
    afile = tmp_path / "f"
    afile.write_text("x")
    with pytest.raises(SpecmdError, match="--out: expected a folder to write into, got the file"):
        RUNNER.invoke(app, ["run", *SMALL, "--out", str(afile)], catch_exceptions=False)
    with pytest.raises(SpecmdError, match="--out: expected a location under a folder"):
        RUNNER.invoke(app, ["replay", "--out", str(afile / "sub")], catch_exceptions=False)


@pytest.mark.slow
def test_killed_reruns_leave_a_complete_folder(tmp_path: Path) -> None:
    """SIGKILL, SIGTERM and SIGINT at several moments of a rerun (the write phase included):
    the folder is always the old complete one or the new complete one; SIGTERM and SIGINT say
    ``interrupted`` and leave no temporary files (the spans spilled to TMPDIR)."""
    out = tmp_path / "run"
    run(out, "--seed", "1")
    old = json.loads((out / "result.json").read_text())["config"]["seed"]
    command = [sys.executable, "-m", "specmd_sim", "run", *SMALL, "--out", str(out)]
    finished = subprocess.run([*command, "--seed", "7", "--json"], capture_output=True,
                              timeout=300, check=True)  # fmt: skip
    assert finished.returncode == 0
    total = 0.0
    for sig, delay in ((signal.SIGKILL, 0.5), (signal.SIGTERM, 1.5), (signal.SIGKILL, 2.5),
                       (signal.SIGINT, 3.0), (signal.SIGKILL, 3.5)):  # fmt: skip
        seed = str(int(delay * 10))
        temporary = tmp_path / "tmpdirs" / seed
        temporary.mkdir(parents=True)
        proc = subprocess.Popen([*command, "--seed", seed], stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "TMPDIR": str(temporary)})  # fmt: skip
        time.sleep(delay)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=300)
        total += delay
        check_run_folder(out)  # complete, whichever run it holds
        seed_now = json.loads((out / "result.json").read_text())["config"]["seed"]
        assert seed_now in (old, 7, int(seed))
        if proc.returncode in (130, 143):  # (stopped by SIGINT, SIGTERM, before its end)
            assert proc.returncode == 128 + sig
            assert err.strip().splitlines()[-1] == "interrupted"
            assert not any(temporary.iterdir())
    run(out, "--seed", "9")  # a later writer cleans up after the killed ones
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run", "tmpdirs"]


def test_out_must_not_be_a_folder_of_other_files(tmp_path: Path, monkeypatch) -> None:
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    with pytest.raises(SpecmdError, match="holds other files"):
        RUNNER.invoke(app, ["run", *SMALL, "--out", str(mine)], catch_exceptions=False)
    monkeypatch.chdir(mine)
    with pytest.raises(SpecmdError, match="the working folder or one above it"):
        RUNNER.invoke(app, ["replay", "--out", "."], catch_exceptions=False)
    assert (mine / "thesis.tex").read_text() == "years of work"

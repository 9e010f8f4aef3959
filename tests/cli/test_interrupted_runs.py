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
    ``interrupted``, exit 143 and 130, and leave no temporary files (the spans spilled to
    TMPDIR). The run is long enough (~5,000 OLMoE tokens: seconds, spilling its spans) that
    each signal lands inside it: SIGKILL at a share of a whole run's time measured first (once
    numba's cache holds the engines), SIGTERM and SIGINT once spans are spilled."""
    # (a run that spills, ~1.7M spans: seconds on the compiled core, minutes without it)
    pytest.importorskip("numba")
    from specmd_sim.traces import PRESETS, generate_trace, save_trace

    params = PRESETS["olmoe"].model_copy(
        update={"num_requests": 1, "prompt_tokens": 16, "decode_tokens": 5_000}
    )
    trace = save_trace(generate_trace(params, 0), tmp_path / "long.npz")
    out = tmp_path / "run"
    command = [sys.executable, "-m", "specmd_sim", "run", "--trace", str(trace), "--out", str(out)]
    # the first run may compile the engines (a fresh numba cache: tens of seconds); the second,
    # timed, writes the folder each rerun replaces
    subprocess.run([*command, "--seed", "1"], capture_output=True, timeout=600, check=True)
    started = time.perf_counter()
    subprocess.run([*command, "--seed", "7"], capture_output=True, timeout=300, check=True)
    whole = time.perf_counter() - started
    written = {7}  # (the seeds the folder may hold)
    # SIGKILL at shares of a whole run's time; SIGTERM and SIGINT once the run has spilled
    # spans to TMPDIR (the engine running, its handlers in place, a file to remove), SIGINT
    # a little later (nearer the write phase)
    for sig, share in ((signal.SIGKILL, 0.1), (signal.SIGTERM, 0.0), (signal.SIGKILL, 0.5),
                       (signal.SIGINT, 0.15), (signal.SIGKILL, 0.85)):  # fmt: skip
        seed = str(len(written))
        temporary = tmp_path / "tmpdirs" / seed
        temporary.mkdir(parents=True)
        proc = subprocess.Popen([*command, "--seed", seed], stderr=subprocess.PIPE, text=True,
                                env={**os.environ, "TMPDIR": str(temporary)})  # fmt: skip
        if sig != signal.SIGKILL:
            _spilled(temporary, proc)
        time.sleep(share * whole)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=300)
        check_run_folder(out)  # complete, whichever run it holds
        written.add(int(seed))  # (a run killed after its folder was put in place holds it)
        assert json.loads((out / "result.json").read_text())["config"]["seed"] in written
        if sig != signal.SIGKILL:  # (stopped before its end, saying so, its spills removed)
            assert proc.returncode == 128 + sig, (sig, share, whole, err)
            assert err.strip().splitlines()[-1] == "interrupted"
            assert not any(temporary.iterdir())
    # a later writer cleans up after the killed ones
    subprocess.run([*command, "--seed", "9"], capture_output=True, timeout=300, check=True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["long.npz", "run", "tmpdirs"]


def _spilled(folder: Path, proc: subprocess.Popen[str]) -> None:
    """Wait until the run has spilled spans into ``folder`` (its TMPDIR)."""
    deadline = time.monotonic() + 120
    while not any(folder.iterdir()):
        assert proc.poll() is None, "the run ended before it spilled spans"
        assert time.monotonic() < deadline, "the run spilled no spans in 120 s"
        time.sleep(0.01)


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

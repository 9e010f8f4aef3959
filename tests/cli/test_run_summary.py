"""The run summary explains late hits in one line when they outnumber hits."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from specmd_sim.cli import app
from specmd_sim.cli.run import late_hit_note


def test_late_hits_are_explained_when_they_dominate(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["run", "--set", "workload.max_requests=1", "--out", str(tmp_path / "r")],
        catch_exceptions=False,
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "of accesses were late hits" in text and "replay, which lands prefetches" in text


def test_no_note_when_hits_dominate_or_in_replay() -> None:
    assert late_hit_note({"late_hits": 10, "hits": 90, "accesses": 120}) is None
    assert late_hit_note({"hits": 5, "accesses": 120}) is None  # replay has no late hits
    note = late_hit_note({"late_hits": 80, "hits": 10, "accesses": 100})
    assert note is not None and "80.0% of accesses" in note and "here: 90.0%)" in note

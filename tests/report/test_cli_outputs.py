"""``specmd report``, ``timeline`` and ``compare`` check where they write before any work: a
bad ``--out`` (under a file, a folder, an unwritable folder) or ``--image`` is one line and
exit code 2 before the run is even read, and a page already there is kept."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from specmd_sim.cli import main


def run_cli(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *args: str | Path
) -> tuple[int, str, str]:
    """``specmd ARGS`` in this process, as the entry point runs it: exit code, stdout, stderr."""
    monkeypatch.setattr(sys, "argv", ["specmd", *map(str, args)])
    with pytest.raises(SystemExit) as exit_:
        main()
    out, err = capsys.readouterr()
    return int(exit_.value.code or 0), out, err


def one_line_error(result: tuple[int, str, str], *fragments: str) -> None:
    code, _, err = result
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


@pytest.fixture
def unwritable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A folder this process may not write into (also when it runs as root)."""
    folder = tmp_path / "locked"
    folder.mkdir()
    access = os.access

    def no_writing(path: str | Path, mode: int, **kw: object) -> bool:
        return not (Path(path) == folder and mode & os.W_OK) and access(path, mode, **kw)

    monkeypatch.setattr(os, "access", no_writing)
    return folder


COMMANDS = ["report", "timeline", "compare"]


@pytest.mark.parametrize("command", COMMANDS)
def test_out_under_a_file_fails_before_reading_the_run(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    (tmp_path / "f").write_text("x\n")
    out = tmp_path / "f" / "page.html"
    missing = tmp_path / "no-such-run"  # --out is checked first: the error is about --out
    result = run_cli(monkeypatch, capsys, command, missing, "--out", out)
    one_line_error(result, "--out: expected a location under a folder", str(out))
    assert (tmp_path / "f").read_text() == "x\n"


@pytest.mark.parametrize("command", COMMANDS)
def test_out_in_an_unwritable_folder_fails_and_keeps_the_page_there(
    command: str, unwritable: Path, timed_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    page = unwritable / "page.html"
    page.write_text("an earlier page")
    result = run_cli(monkeypatch, capsys, command, timed_dir, "--out", page)
    one_line_error(result, "--out: expected a writable location", str(page))
    assert page.read_text() == "an earlier page"


@pytest.mark.parametrize("command", COMMANDS)
def test_out_that_is_a_folder(
    command: str, tmp_path: Path, timed_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    result = run_cli(monkeypatch, capsys, command, timed_dir, "--out", tmp_path)
    one_line_error(result, "--out: expected a file path to write, got the folder")


@pytest.mark.parametrize("command", COMMANDS)
def test_image_format_is_checked_before_any_work(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    out = tmp_path / "page.html"
    args = (command, tmp_path / "no-such-run", "--out", out, "--image", "gif")
    one_line_error(run_cli(monkeypatch, capsys, *args), "--image: expected one of png, svg")
    assert not out.exists()


def test_default_page_in_an_unwritable_run_folder(
    unwritable: Path, timed_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    for name in os.listdir(timed_dir):
        (unwritable / name).write_bytes((timed_dir / name).read_bytes())
    result = run_cli(monkeypatch, capsys, "report", unwritable)
    one_line_error(result, "report page: expected a writable location", "report.html")
    assert not (unwritable / "report.html").exists()


def test_a_good_out_still_writes_the_page(
    tmp_path: Path, timed_dir: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    page = tmp_path / "new" / "page.html"
    code, out, err = run_cli(monkeypatch, capsys, "report", timed_dir, "--out", page)
    assert code == 0 and out.strip() == f"wrote {page}" and not err
    assert "All metrics" in page.read_text()

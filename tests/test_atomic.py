"""Writes that fail are one line: :mod:`specmd_sim.atomic`'s pre-check tries the write itself,
its writers turn any ``OSError`` into a :class:`SpecmdError` naming the output and the reason
and leave no temporary file behind, and the package's writers all go through it."""

from __future__ import annotations

import errno
import os
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from specmd_sim import atomic
from specmd_sim.atomic import (
    atomic_file,
    atomic_folder,
    check_output,
    make_folder,
    write_text,
    writing,
)
from specmd_sim.errors import SpecmdError

EIO = OSError(errno.EIO, "Input/output error")


@pytest.fixture
def below_a_file(tmp_path: Path) -> Path:
    """``tmp/f``, a regular file (``mine``): a path below it cannot be written."""
    (tmp_path / "f").write_text("mine")
    return tmp_path / "f"


def listing(folder: Path) -> dict[str, bytes | None]:
    """Every entry under ``folder`` (hidden ones too) with a file's bytes."""
    return {str(p.relative_to(folder)): p.read_bytes() if p.is_file() else None
            for p in sorted(folder.rglob("*"))}  # fmt: skip


def fail_renames_onto(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A rename onto ``path`` fails (EIO); others are done."""
    rename = os.replace

    def replace(src: Any, dst: Any) -> None:
        if Path(dst) == path:
            raise EIO
        rename(src, dst)

    monkeypatch.setattr(atomic.os, "replace", replace)


# --- the pre-check ---------------------------------------------------------------------------


def test_the_pre_check_tries_the_write_and_leaves_nothing(tmp_path: Path) -> None:
    check_output(tmp_path / "new" / "run", "--out", folder=True)
    check_output(tmp_path / "page.html", "--out", folder=False)
    assert listing(tmp_path) == {}


@pytest.mark.parametrize("folder", [True, False])
def test_a_write_refused_where_permissions_allow_it_is_one_line(
    folder: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As root (or on a read-only mount) the permission check passes; the write does not."""

    def refused(**kw: Any) -> str:
        raise OSError(errno.EROFS, "Read-only file system", f"{kw['dir']}/.specmd-check-x")

    monkeypatch.setattr(tempfile, "mkdtemp", refused)
    out = tmp_path / "new" / "out"
    with pytest.raises(SpecmdError) as info:
        check_output(out, "--out", folder=folder)
    expected = "a folder that can be created" if folder else "a file that can be written"
    assert str(info.value) == f"--out: expected {expected}, got '{out}' (Read-only file system)"
    assert listing(tmp_path) == {}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc is Linux's")
def test_a_folder_under_proc_is_refused_before_any_work() -> None:
    with pytest.raises(SpecmdError, match=r"^--out: expected a .*, got '/proc/specmd-x/run'"):
        check_output(Path("/proc/specmd-x/run"), "--out", folder=True)


# --- the writes themselves -------------------------------------------------------------------


def test_a_file_below_a_file_is_one_line_and_leaves_it(below_a_file: Path) -> None:
    path = below_a_file / "t.txt"
    with pytest.raises(SpecmdError) as info:
        write_text(path, "new", "--out")
    assert str(info.value) == (
        f"--out: expected a file that can be written, got '{path}' (File exists: '{below_a_file}')"
    )
    assert listing(below_a_file.parent) == {"f": b"mine"}


def test_a_file_over_a_folder_is_one_line_and_leaves_the_folder(tmp_path: Path) -> None:
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "keep.txt").write_text("mine")
    with pytest.raises(SpecmdError, match=r"^output: expected a file that can be written, got "):
        write_text(tmp_path / "d", "new")
    assert listing(tmp_path) == {"d": None, "d/keep.txt": b"mine"}


def test_a_failure_in_the_block_keeps_the_old_file(tmp_path: Path) -> None:
    path = write_text(tmp_path / "t.txt", "old")
    with pytest.raises(SpecmdError) as info, atomic_file(path, "trace") as tmp:
        tmp.write_text("half")
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp))
    assert str(info.value).startswith(f"trace: expected a file that can be written, got '{path}' "
                                      "(No space left on device: ")  # fmt: skip
    assert listing(tmp_path) == {"t.txt": b"old"}


def test_other_errors_of_the_block_pass_unchanged(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="mine"), atomic_file(tmp_path / "t.txt"):
        raise ValueError("mine")
    assert listing(tmp_path) == {}


def test_a_file_makes_its_missing_folders(tmp_path: Path) -> None:
    write_text(tmp_path / "a" / "b" / "t.txt", "new")
    assert listing(tmp_path) == {"a": None, "a/b": None, "a/b/t.txt": b"new"}


def test_a_folder_below_a_file_is_one_line_and_leaves_it(below_a_file: Path) -> None:
    path = below_a_file / "run"
    with pytest.raises(SpecmdError) as info, atomic_folder(path, "run folder"):
        pytest.fail("no folder to fill")
    assert str(info.value) == (
        f"run folder: expected a folder that can be created, got '{path}' (File exists: "
        f"'{below_a_file}')"
    )
    assert listing(below_a_file.parent) == {"f": b"mine"}


def test_a_folder_that_cannot_be_put_in_place_is_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "run"
    fail_renames_onto(path, monkeypatch)
    with pytest.raises(SpecmdError) as info, atomic_folder(path) as folder:
        (folder / "result.json").write_text("{}")
    assert str(info.value) == (
        f"output: expected a folder that can be created, got '{path}' (Input/output error)"
    )
    assert listing(tmp_path) == {}


def test_a_failure_in_the_folder_block_keeps_the_old_folder(tmp_path: Path) -> None:
    path = tmp_path / "run"
    with atomic_folder(path) as folder:
        (folder / "result.json").write_text("old")
    with pytest.raises(SpecmdError, match=r"\(Input/output error\)$"), atomic_folder(path):
        raise EIO
    assert listing(tmp_path) == {"run": None, "run/result.json": b"old"}


def test_make_folder_below_a_file_is_one_line(below_a_file: Path) -> None:
    path = below_a_file / "cal"
    with pytest.raises(SpecmdError) as info:
        make_folder(path, "--folder")
    assert str(info.value) == (
        f"--folder: expected a folder that can be created, got '{path}' (Not a directory: '{path}')"
    )


def test_writing_names_the_path_only_where_the_error_has_one(tmp_path: Path) -> None:
    with pytest.raises(SpecmdError) as info, writing(tmp_path / "lock", "--out"):
        raise EIO
    assert str(info.value) == (
        f"--out: expected a file that can be written, got '{tmp_path / 'lock'}' "
        "(Input/output error)"
    )


def test_a_run_whose_folder_cannot_be_put_in_place_says_so_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """The pre-check passes, the write fails at its last rename: one line, no temporary folder."""
    from specmd_sim.cli import main

    out = tmp_path / "run"
    fail_renames_onto(out, monkeypatch)
    args = ["replay", "--trace", "mixtral-synthetic", "--set", "workload.max_requests=1"]
    monkeypatch.setattr(sys, "argv", ["specmd", *args, "--out", str(out)])
    with pytest.raises(SystemExit) as exit_:
        main()
    err = capsys.readouterr().err
    assert exit_.value.code == 2
    assert err == (
        f"error: run folder: expected a folder that can be created, got '{out}' "
        "(Input/output error)\n"
    )
    assert listing(tmp_path) == {}


# --- the package's writers all go through it -------------------------------------------------


def _baseline(path: Path) -> None:
    from specmd_sim.regress import Baseline, save_baseline

    save_baseline(Baseline(metrics={}), path)


def _document(path: Path) -> None:
    from specmd_sim.validate.document import write_part

    write_part(path, "published", "# validation\n")


def _model(path: Path) -> None:
    from specmd_sim.execute.traces import write_model
    from specmd_sim.models import load_model

    write_model(load_model("mixtral-8x7b"), path)


def _cells(path: Path) -> None:
    from specmd_sim.validate.real import save_rows

    save_rows(path, [])


def _study_runs(path: Path) -> None:
    from specmd_sim.reproduce.specmd.report import write_runs

    write_runs([], path)


def _study_runtime(path: Path) -> None:
    from specmd_sim.reproduce.specmd.grid import dispatch_runtime

    dispatch_runtime(path, 1e-5)


def _study_traces(path: Path) -> None:
    from specmd_sim.reproduce.specmd.traces import write_traces

    write_traces(path, {}, (0,))


def _page(path: Path) -> None:
    from specmd_sim.report.html import write_page

    write_page(path, "page", [])


WRITERS: list[Callable[[Path], None]] = [
    _baseline, _document, _model, _cells, _study_runs, _study_runtime, _study_traces, _page,
]  # fmt: skip


@pytest.mark.parametrize("write", WRITERS, ids=lambda w: w.__name__.strip("_"))
def test_every_writer_below_a_file_is_one_line(
    write: Callable[[Path], None], below_a_file: Path
) -> None:
    path = below_a_file / "out"
    with pytest.raises(SpecmdError) as info:
        write(path)
    assert "\n" not in str(info.value) and f"'{below_a_file}" in str(info.value)
    assert listing(below_a_file.parent) == {"f": b"mine"}

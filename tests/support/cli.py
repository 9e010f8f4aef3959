"""The ``specmd`` command run through its entry point in the test's process (no interpreter
start-up per call: the suite runs hundreds of commands)."""

from __future__ import annotations

import io
import os
import sys
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer

from specmd_sim.cli import main


def cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, *args: str,
        app: typer.Typer | None = None):  # fmt: skip
    """Run ``specmd ARGS`` in this process: (exit code, stdout, stderr); with ``app``, typer
    is given that app instead of the one ``main`` builds for the command line."""
    monkeypatch.setattr(sys, "argv", ["specmd", *args])
    if app is not None:
        monkeypatch.setattr("specmd_sim.cli.app_for", lambda args: app)
    with pytest.raises(SystemExit) as info:
        main()
    out, err = capsys.readouterr()
    return info.value.code or 0, out, err


@dataclass(frozen=True)
class Completed:
    """What a test reads of a finished command (the fields of ``subprocess.CompletedProcess``)."""

    returncode: int
    stdout: str
    stderr: str


def run_specmd(*args: str | Path, cwd: Path | None = None) -> Completed:
    """``specmd ARGS`` (in ``cwd``) in this process, its output captured."""
    out, err = io.StringIO(), io.StringIO()
    argv, here = sys.argv, os.getcwd()
    sys.argv = ["specmd", *map(str, args)]
    try:
        if cwd is not None:
            os.chdir(cwd)
        with redirect_stdout(out), redirect_stderr(err):
            try:
                main()
                code = 0
            except SystemExit as exc:
                code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    finally:
        sys.argv = argv
        os.chdir(here)
    return Completed(code, out.getvalue(), err.getvalue())

"""The ``specmd`` command run through its entry point in the test's process."""

from __future__ import annotations

import sys

import pytest

from specmd_sim.cli import main


def cli(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture, *args: str):
    """Run ``specmd ARGS`` in this process: (exit code, stdout, stderr)."""
    monkeypatch.setattr(sys, "argv", ["specmd", *args])
    with pytest.raises(SystemExit) as info:
        main()
    out, err = capsys.readouterr()
    return info.value.code or 0, out, err

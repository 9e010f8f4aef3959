"""What the CLI shows people: help texts keep their words through rich markup, and listings
state their units."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import typer
from rich.text import Text
from typer.testing import CliRunner

from specmd_sim.cli import app


def _commands(command: Any, path: str = "specmd") -> Iterator[tuple[str, Any]]:
    yield path, command
    for name, sub in getattr(command, "commands", {}).items():
        yield from _commands(sub, f"{path} {name}")


def _words(output: str) -> str:
    """Rendered output as one line of words, without the boxes' borders."""
    return " ".join(output.replace("│", " ").split())


def test_no_help_text_loses_brackets_to_rich_markup() -> None:
    """Help is rendered as rich markup, where ``[images]`` is a tag and vanishes unless escaped
    as ``\\[images]``."""
    lost = [
        (path, text)
        for path, command in _commands(typer.main.get_command(app))
        for text in [command.help, *(getattr(p, "help", None) for p in command.params)]
        if text and Text.from_markup(text).plain != text.replace("\\[", "[")
    ]
    assert lost == []


def test_image_option_names_the_extra() -> None:
    result = CliRunner().invoke(app, ["report", "--help"])
    assert result.exit_code == 0, result.output
    assert "pip install 'specmd-sim[images]'" in _words(result.output)


def test_hardware_list_gives_hbm_in_gb_and_gib() -> None:
    result = CliRunner().invoke(app, ["hardware", "list"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    row = next(line for line in result.output.splitlines() if "│ h100-pcie " in line)
    assert "│ 80 GB (74.5 GiB) │" in row
    h200 = next(line for line in result.output.splitlines() if "│ h200 " in line)
    assert "│ 141 GB (131 GiB) │" in h200

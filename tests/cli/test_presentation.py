"""What the CLI shows people: help texts keep their words through rich markup, and listings
state their units."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import typer
from rich.text import Text
from support.cli import cli
from typer.testing import CliRunner

from specmd_sim.cli import app, app_for


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


def _all_names() -> list[str]:
    return [c.name for c in app.registered_commands] + [g.name for g in app.registered_groups]


def test_every_command_and_group_has_a_name() -> None:
    """``app_for`` finds a command by the name it was registered with."""
    assert all(_all_names()) and len(set(_all_names())) == len(_all_names())


def test_a_command_line_builds_only_the_command_it_names() -> None:
    for name in _all_names():
        built = typer.main.get_command(app_for([name, "--help"]))
        assert list(built.commands) == [name]
    for args in ([], ["--help"], ["nosuch"], ["-x", "run"]):
        assert app_for(args) is app


@pytest.mark.parametrize("args", [
    ["--help"], ["replay", "--help"], ["hardware"], ["hardware", "--help"], ["hardware", "nosuch"],
    ["replay", "--bogus"], ["replay", "--cache"], ["trace", "info", "--help"], ["nosuch"], [],
    ["sweep", "--help"], ["mrc", "--help"], ["models", "show", "--help"],
])  # fmt: skip
def test_the_command_alone_reads_as_the_whole_app(monkeypatch, capsys, args) -> None:
    """Help, usage and errors are the same whether typer was given the whole app or only the
    command named (what ``main`` gives it)."""
    alone = cli(monkeypatch, capsys, *args)
    whole = cli(monkeypatch, capsys, *args, app=app)  # (patches app_for: after the other)
    assert alone == whole
    code, _, err = alone
    assert "Traceback" not in err and "error:  " not in err
    assert code in (0, 2)


def test_a_group_named_alone_shows_its_help_and_no_empty_error(monkeypatch, capsys) -> None:
    code, out, err = cli(monkeypatch, capsys, "hardware")
    assert code == 2 and "list" in out + err and "error" not in err

"""``docs/validation.md`` has two parts, each written by its own command: the comparison with
published measurements (``specmd validate published``), then, after :data:`MARKER`, the one with
a real execution on the writer's machine (``specmd validate real``). Writing one part keeps the
other; the file is replaced atomically."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from specmd_sim.atomic import write_text

MARKER = "<!-- real execution: written by specmd validate real -->"


def published_part(text: str) -> str:
    """The published-measurement part of a validation document."""
    return text.split(MARKER)[0].rstrip("\n") + "\n"


def write_part(path: Path, part: Literal["published", "real"], text: str) -> None:
    old = path.read_text(encoding="utf-8") if path.exists() else ""
    head, sep, tail = old.partition(MARKER)
    if part == "published":
        new = text.rstrip("\n") + "\n" + (f"\n{MARKER}{tail}" if sep else "")
    else:
        new = (head.rstrip("\n") + "\n\n" if head.strip() else "") + text
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, new)

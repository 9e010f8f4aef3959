"""``docs/validation.md`` has parts, each written by its own command: the comparison with
published measurements (``specmd validate published``), then one per backend of the real
executor, each after its marker (``specmd validate real --backend B``: :data:`MARKER` for
``cpu``, :func:`marker` for the others). Writing one part keeps the others, in a fixed order;
the file is replaced atomically."""

from __future__ import annotations

from pathlib import Path

from specmd_sim.atomic import check_output, reason, write_text
from specmd_sim.errors import SpecmdError
from specmd_sim.execute.device import DEVICES

MARKER = "<!-- real execution: written by specmd validate real -->"
PARTS = ("published", *DEVICES)  # their order in the document


def marker(backend: str) -> str:
    """The line that opens the real-execution part of ``backend``."""
    if backend == "cpu":
        return MARKER
    return (
        f"<!-- real execution ({backend}): written by specmd validate real --backend {backend} -->"
    )


def parts(text: str) -> dict[str, str]:
    """The document's parts by name (those it has), each with its marker."""
    starts = sorted((text.find(marker(p)), p) for p in PARTS[1:] if marker(p) in text)
    bounds = [0, *(i for i, _ in starts), len(text)]
    names = ["published", *(p for _, p in starts)]
    return {n: text[a:b] for n, a, b in zip(names, bounds, bounds[1:], strict=False)}


def published_part(text: str) -> str:
    """The published-measurement part of a validation document."""
    return parts(text)["published"].rstrip("\n") + "\n"


def check_document(path: Path, what: str = "--out") -> None:
    """One line, before any work, unless ``path`` can take a part: a location that can be
    written, new or holding a text document (``what`` names it)."""
    check_output(path, what, folder=False)
    read_document(path, what)


def read_document(path: Path, what: str = "--out") -> str:
    """The document at ``path`` ("" where there is none yet); one line if it does not read as
    text."""
    if not path.exists():
        return ""
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise SpecmdError(
            f"{what}: expected a text (UTF-8) document to update, got {str(path)!r}, which is "
            f"not text (at byte {exc.start})"
        ) from None
    except OSError as err:
        raise SpecmdError(
            f"{what}: expected a document that can be read, got {str(path)!r} ({reason(err)})"
        ) from None


def write_part(path: Path, part: str, text: str, what: str = "--out") -> None:
    """Replace (or add) ``part`` (one of :data:`PARTS`) of the document at ``path``."""
    new = {**parts(read_document(path, what)), part: text}
    chunks = [new[p].strip("\n") for p in PARTS if new.get(p, "").strip()]
    write_text(path, "\n\n".join(chunks) + "\n", what)

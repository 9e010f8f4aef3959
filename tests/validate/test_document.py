"""``docs/validation.md``'s parts: each command rewrites its own part and keeps the others, in
the fixed order published, cpu, cuda, torch-cpu, whatever order they were written in."""

from __future__ import annotations

from pathlib import Path

import pytest

from specmd_sim.validate.document import PARTS, marker, parts, published_part, write_part


def _text(part: str, n: int) -> str:
    head = "# Validation\n" if part == "published" else f"{marker(part)}\n## {part}\n"
    return f"{head}\n{part} body {n}\n"


@pytest.mark.parametrize(
    "order",
    [PARTS, PARTS[::-1], ("cuda", "published", "torch-cpu", "cpu")],
    ids=["in-order", "reversed", "mixed"],
)
def test_each_part_keeps_the_others_in_a_fixed_order(tmp_path: Path, order) -> None:
    doc = tmp_path / "docs" / "validation.md"
    for part in order:
        write_part(doc, part, _text(part, 1))
    write_part(doc, "cpu", _text("cpu", 2))  # rewriting one changes only that one
    text = doc.read_text()
    assert text == "\n".join(_text(p, 2 if p == "cpu" else 1) for p in PARTS)
    assert list(parts(text)) == list(PARTS)
    assert published_part(text) == _text("published", 1)


def test_a_document_with_only_a_real_part_and_none_at_all(tmp_path: Path) -> None:
    doc = tmp_path / "validation.md"
    write_part(doc, "cuda", _text("cuda", 1))
    assert doc.read_text() == _text("cuda", 1)
    assert published_part(doc.read_text()) == "\n"
    assert parts("") == {"published": ""}

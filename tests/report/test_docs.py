"""docs/timelines.md and its screenshots stay in step: every picture it shows exists, and every
picture in docs/img/ is shown somewhere."""

from __future__ import annotations

import re
from pathlib import Path

DOCS = Path(__file__).resolve().parents[2] / "docs"


def test_screenshots_exist_and_are_used() -> None:
    shown = set()
    for page in DOCS.glob("*.md"):
        shown |= set(re.findall(r"!\[[^\]]*\]\((img/[^)]+)\)", page.read_text()))
    assert shown, "docs/timelines.md shows screenshots"
    for link in shown:
        assert (DOCS / link).is_file(), link
    made = {f"img/{p.name}" for p in (DOCS / "img").glob("*.png")}
    assert made == shown, "every screenshot is shown, and only those are kept"

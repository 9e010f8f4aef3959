"""A page as its reader sees it: the gzipped scripts a page inlines (plotly.js, each figure's
JSON; :mod:`specmd_sim.report.html`) inflated in place, so that tests can look for what the
figures say."""

from __future__ import annotations

import base64
import gzip
import re
from pathlib import Path

_PACKED = re.compile(r'<script type="application/gzip" id="([\w-]+)">([^<]*)</script>')


def unpacked(page: str | Path) -> str:
    """The page's HTML (text, or the file at ``page``) with every packed script inflated."""
    text = Path(page).read_text() if isinstance(page, Path) else page

    def inflate(match: re.Match[str]) -> str:
        text = gzip.decompress(base64.b64decode(match[2])).decode()
        return f'<script id="{match[1]}">{text}</script>'

    return _PACKED.sub(inflate, text)


def packed_ids(page: str) -> list[str]:
    """The ids of the page's packed scripts, in order."""
    return [m[1] for m in _PACKED.finditer(page)]

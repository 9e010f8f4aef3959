"""Units: the one time unit is the second (float); sizes are bytes; bandwidths bytes per second.

Field names carry their unit (``hbm_bytes``, ``latency_s``, ``bandwidth_bytes_per_s``). This
module parses human-written sizes such as ``0.6GiB`` or ``12 MiB`` and formats them back.
"""

from __future__ import annotations

import math
import re

KiB = 1024
MiB = 1024**2
GiB = 1024**3
TiB = 1024**4
KB = 1000
MB = 1000**2
GB = 1000**3
TB = 1000**4

_SIZE_UNITS = {
    "b": 1,
    "kib": KiB, "mib": MiB, "gib": GiB, "tib": TiB,
    "kb": KB, "mb": MB, "gb": GB, "tb": TB,
}  # fmt: skip
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def parse_bytes(text: str) -> int:
    """Parse ``"0.6GiB"``, ``"12 MiB"``, ``"5e9B"`` or ``"5e9"`` into whole bytes.

    Raises ValueError with the accepted units when the text is not a size.
    """
    match = _SIZE_RE.match(text)
    unit = match.group(2).lower() if match else ""
    if not match or unit not in _SIZE_UNITS | {"": 1}:
        raise ValueError(
            f"expected a size such as '0.6GiB', '512MiB' or '5e9B' "
            f"(units: {', '.join(u for u in _SIZE_UNITS if u != 'b')}, B), got {text!r}"
        )
    value = float(match.group(1)) * _SIZE_UNITS.get(unit, 1)
    if not math.isfinite(value) or value >= 2**63:
        raise ValueError(f"expected a size below 8 EiB, got {text!r}")
    return round(value)


def format_bytes(n: float) -> str:
    """Binary-prefixed size with three significant digits, e.g. ``'12.0 MiB'``."""
    for unit, size in (("TiB", TiB), ("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if abs(n) >= size:
            return f"{n / size:.3g} {unit}" if n / size < 100 else f"{n / size:.0f} {unit}"
    return f"{n:.0f} B"


def format_seconds(t: float) -> str:
    """Seconds with an SI prefix, e.g. ``'1.25 ms'``."""
    for unit, size in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if abs(t) >= size:
            return f"{t / size:.4g} {unit}"
    return f"{t / 1e-9:.4g} ns"

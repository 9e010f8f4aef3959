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


# A number with an SI or binary prefix and a unit: '64GB/s', '2.2 GHz', '5us', '989TFLOPS'.
_QUANTITY_RE = re.compile(
    r"^\s*([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([a-zA-Zµ]*)\s*(/\s*s)?\s*$"
)
_SI = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15}
_BINARY = {"Ki": KiB, "Mi": MiB, "Gi": GiB, "Ti": TiB}
_PER_SECOND = {"": 1.0, "s": 1.0, "ms": 1e3, "us": 1e6, "µs": 1e6, "ns": 1e9}  # units per second
# what a field's name ends with -> (the unit it is written in, examples for the error)
_FIELD_UNITS = (
    ("_bytes_per_s", "B/s", "'64GB/s', '25 GiB/s' or 6.4e10"),
    ("_bytes", "B", "'80GiB', '512MB' or 8e10"),
    ("_flops", "FLOPS", "'989TFLOPS' or 9.89e14"),
    ("_hz", "Hz", "'2.2GHz' or 2.2e9"),
    ("_s", "s", "'5us', '10ms' or 0.005"),
)


def parse_quantity(value: object, field: str) -> object:
    """A value for the profile field ``field``, written with the unit its name carries
    (``bandwidth_bytes_per_s``: ``'64GB/s'``; ``hbm_bytes``: ``'80GiB'``; ``latency_s``:
    ``'5us'``; ``dense_bf16_flops``: ``'989TFLOPS'``; ``cpu_clock_hz``: ``'2.2GHz'``), in SI
    units. A number, or a field without a unit, is returned as is (the profile's schema checks
    it). Raises ValueError naming the field, the expectation and the value."""
    found = next((u for u in _FIELD_UNITS if field.endswith(u[0])), None)
    if not isinstance(value, str) or found is None:
        return value
    _, unit, examples = found
    scaled = _scale(value, unit)
    if scaled is None:
        raise ValueError(f"{field}: expected a value in {unit} such as {examples}, got {value!r}")
    return round(scaled) if unit == "B" else scaled  # sizes are whole bytes


def _scale(text: str, unit: str) -> float | None:
    match = _QUANTITY_RE.match(text)
    if match is None:
        return None
    number, word, per_second = float(match.group(1)), match.group(2), bool(match.group(3))
    if unit == "s":
        divisor = _PER_SECOND.get(word) if not per_second else None
        return None if divisor is None else number / divisor
    if unit == "B/s":
        if not per_second and word.lower().endswith("bps"):  # '64GBps'
            word, per_second = word[:-3] + "B", True
        if not (per_second or word == ""):
            return None
        word = word or "B"
    elif per_second and unit != "FLOPS":
        return None
    base = {"B/s": "B", "B": "B", "FLOPS": "FLOPS", "Hz": "Hz"}[unit]
    if unit == "FLOPS" and word.endswith("FLOP") and per_second:  # 'TFLOP/s'
        word += "S"
    if word == "":
        return number
    if not word.endswith(base):
        return None
    prefix = word[: -len(base)]
    binary = _BINARY.get(prefix) if unit in ("B", "B/s") else None
    factor = float(binary) if binary is not None else _SI.get(prefix)
    return None if factor is None else number * factor

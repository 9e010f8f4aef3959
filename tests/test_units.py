from __future__ import annotations

import pytest

from specmd_sim.units import GiB, MiB, format_bytes, parse_bytes


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("0.6GiB", round(0.6 * GiB)),
        ("12 MiB", 12 * MiB),
        ("5e9", 5_000_000_000),
        ("5e9B", 5_000_000_000),
        ("1.5GB", 1_500_000_000),
        ("1024", 1024),
    ],
)
def test_parse_bytes(text: str, expected: int) -> None:
    assert parse_bytes(text) == expected


@pytest.mark.parametrize("text", ["", "GiB", "12 parsecs", "1.2.3MB", "-5MB"])
def test_parse_bytes_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="expected a size"):
        parse_bytes(text)


def test_format_bytes() -> None:
    assert format_bytes(12 * MiB) == "12 MiB"
    assert format_bytes(0.6 * GiB) == "614 MiB"
    assert format_bytes(500) == "500 B"

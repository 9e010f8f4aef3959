"""Locate bundled data (hardware profiles, example traces) in a wheel or a source checkout.

In a wheel the folders ``hardware_profiles/`` and ``traces/`` of the repository are installed as
``specmd_sim/_data/<name>``; in a source checkout (editable install) they sit beside the package.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parent


def data_dir(name: str) -> Path:
    """The folder of bundled data ``name`` (``'hardware_profiles'`` or ``'traces'``)."""
    for candidate in (_PACKAGE / "_data" / name, _PACKAGE.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"bundled data folder {name!r} not found next to {_PACKAGE}")

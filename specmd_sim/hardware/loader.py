"""Load and list hardware profiles: by bundled id (``h100-pcie``) or by a YAML file path."""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

import yaml
from pydantic import BaseModel, ValidationError

from specmd_sim._data import data_dir
from specmd_sim.errors import SpecmdError, from_validation_error
from specmd_sim.hardware.schema import HardwareProfile

M = TypeVar("M", bound=BaseModel)


def profile_dir() -> Path:
    return data_dir("hardware_profiles")


def list_profiles() -> list[str]:
    """Ids of the bundled profiles, sorted."""
    return sorted(p.stem for p in profile_dir().glob("*.yaml"))


def load_yaml(path: Path, what: str) -> object:
    """Read a YAML file with a one-line error on missing files or bad syntax."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise SpecmdError(f"{what} {path}: cannot read file ({exc.strerror})") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecmdError(f"{what} {path}: malformed YAML{where}: {problem}") from None


def load_bundled(
    ref: str | Path, folder: Path, bundled: list[str], schema: type[M], what: str
) -> M:
    """A YAML file by bundled id (a file stem in ``folder``) or path, validated as ``schema``;
    one-line errors naming ``what`` and the file."""
    path = Path(ref)
    if path.suffix not in (".yaml", ".yml"):
        path = folder / f"{ref}.yaml"
        if not path.is_file():
            raise SpecmdError(
                f"{what}: expected a bundled id ({', '.join(bundled)}) or a path to a .yaml "
                f"file, got {str(ref)!r}"
            )
    data = load_yaml(path, what)
    if not isinstance(data, dict):
        raise SpecmdError(
            f"{what} {path}: expected a YAML mapping at the top level, got {type(data).__name__}"
        )
    try:
        return schema.model_validate(data)
    except ValidationError as exc:
        raise from_validation_error(f"{what} {path}", exc) from None


def load_profile(ref: str | Path) -> HardwareProfile:
    """Load a profile by bundled id or by path to a YAML file; validate it."""
    return load_bundled(ref, profile_dir(), list_profiles(), HardwareProfile, "hardware profile")

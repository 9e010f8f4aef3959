"""Finding a model spec: the catalog (package data), a model file (YAML in the catalog's
format) or a Hugging Face ``config.json`` (:mod:`specmd_sim.models.hf_config`)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import yaml
from pydantic import ValidationError

from specmd_sim.errors import SpecmdError
from specmd_sim.models.hf_config import load_hf_config
from specmd_sim.models.spec import ModelSpec


def _model_file(path: Path) -> ModelSpec:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SpecmdError(
            f"model: expected a readable model file, got {str(path)!r} ({exc.strerror})"
        ) from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise SpecmdError(f"model: {path}: expected YAML, got a parse error ({exc})") from None
    try:
        return ModelSpec.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or "(top level)"
        raise SpecmdError(f"model: {path}: {where}: {first['msg']}") from None


def _catalog() -> dict[str, ModelSpec]:
    text = resources.files("specmd_sim.models").joinpath("catalog/models.yaml").read_text()
    return {entry["id"]: ModelSpec.model_validate(entry) for entry in yaml.safe_load(text)}


def list_models() -> list[ModelSpec]:
    """All catalog models, in catalog order."""
    return list(_catalog().values())


def load_model(model_id: str) -> ModelSpec:
    """A catalog model by id, a model file (a path ending in ``.yaml``/``.yml`` holding one
    entry in the catalog's format) or a Hugging Face ``config.json`` (a path ending in
    ``.json``, see :mod:`specmd_sim.models.hf_config`); a clear error lists the known ids
    otherwise."""
    if model_id.endswith((".yaml", ".yml")):
        return _model_file(Path(model_id))
    if model_id.endswith(".json"):
        return load_hf_config(model_id)
    catalog = _catalog()
    if model_id not in catalog:
        raise SpecmdError(f"model: expected one of {', '.join(catalog)}, got {model_id!r}")
    return catalog[model_id]

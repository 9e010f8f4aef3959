"""Finding a model spec: the catalog (package data), a model file (YAML in the catalog's
format) or a Hugging Face ``config.json`` (:mod:`specmd_sim.models.hf_config`)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any, cast

from specmd_sim.errors import SpecmdError
from specmd_sim.hardware.loader import load_validated, parse_yaml
from specmd_sim.models.hf_config import load_hf_config
from specmd_sim.models.spec import ModelSpec


def _catalog() -> dict[str, ModelSpec]:
    path = resources.files("specmd_sim.models").joinpath("catalog/models.yaml")
    entries = cast("list[dict[str, Any]]", parse_yaml(path.read_text(), "the model catalog"))
    return {entry["id"]: ModelSpec.model_validate(entry) for entry in entries}


def list_models() -> list[ModelSpec]:
    """All catalog models, in catalog order."""
    return list(_catalog().values())


def load_model(model_id: str, *, what: str = "model") -> ModelSpec:
    """A catalog model by id, a model file (a path ending in ``.yaml``/``.yml`` holding one
    entry in the catalog's format) or a Hugging Face ``config.json`` (a path ending in
    ``.json``, see :mod:`specmd_sim.models.hf_config`); otherwise one line, naming ``what``
    (where the id came from), that lists the known ids."""
    if model_id.endswith((".yaml", ".yml")):
        return load_validated(Path(model_id), ModelSpec, "model")
    if model_id.endswith(".json"):
        return load_hf_config(model_id)
    catalog = _catalog()
    if model_id not in catalog:
        raise SpecmdError(f"{what}: expected one of {', '.join(catalog)}, got {model_id!r}")
    return catalog[model_id]

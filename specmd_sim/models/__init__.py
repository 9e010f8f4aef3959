"""MoE model specs (a catalog shipped as package data) and the compute cost model."""

from specmd_sim.models.cost import CostModel
from specmd_sim.models.loader import list_models, load_model
from specmd_sim.models.precision import PRECISIONS, Precision, precision
from specmd_sim.models.spec import ModelSpec

__all__ = [
    "PRECISIONS",
    "CostModel",
    "ModelSpec",
    "Precision",
    "list_models",
    "load_model",
    "precision",
]

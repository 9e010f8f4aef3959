"""MoE model specs (a catalog shipped as package data) and the compute cost model."""

from specmd_sim.models.cost import CostModel, IdealCost
from specmd_sim.models.spec import BYTES_PER_PARAM, ModelSpec, list_models, load_model

__all__ = ["BYTES_PER_PARAM", "CostModel", "IdealCost", "ModelSpec", "list_models", "load_model"]

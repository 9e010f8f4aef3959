"""The GPU expert cache: states, pins, capacity accounting and the miss taxonomy."""

from specmd_sim.cache.expert_cache import CacheStats, ExpertCache
from specmd_sim.cache.states import AccessClass, FetchReason, State

__all__ = ["AccessClass", "CacheStats", "ExpertCache", "FetchReason", "State"]

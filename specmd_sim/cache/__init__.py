"""The GPU expert cache: states, pins, capacity accounting and the miss taxonomy."""

from specmd_sim.cache.expert_cache import CacheStats, ExpertCache
from specmd_sim.cache.policy import CachePolicy, Evictable
from specmd_sim.cache.states import AccessClass, FetchReason, State

__all__ = [
    "AccessClass",
    "CachePolicy",
    "CacheStats",
    "Evictable",
    "ExpertCache",
    "FetchReason",
    "State",
]

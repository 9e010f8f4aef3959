"""Pluggable policies: eviction (which expert leaves), prefetch (which experts to fetch early)
and predictors (scores for upcoming layers). Each family is a registry of one-module plug-ins;
see :mod:`specmd_sim.policies.registry`."""

from specmd_sim.policies.registry import EVICTION, PREDICTORS, PREFETCH, PluginConfig, Registry

__all__ = ["EVICTION", "PREDICTORS", "PREFETCH", "PluginConfig", "Registry"]

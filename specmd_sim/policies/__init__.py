"""Pluggable policies: eviction (which expert leaves), prefetch (which experts to fetch
early), predictors (scores for upcoming layers) and miss handling (what runs when an expert is
missing). Each family is a registry of one-module plug-ins; see
:mod:`specmd_sim.policies.registry`."""

from specmd_sim.policies.registry import (
    EVICTION,
    MISS,
    PREDICTORS,
    PREFETCH,
    PluginConfig,
    Registry,
    load_plugins,
)

__all__ = ["EVICTION", "MISS", "PREDICTORS", "PREFETCH", "PluginConfig", "Registry", "load_plugins"]

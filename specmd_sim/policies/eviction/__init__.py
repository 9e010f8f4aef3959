"""Eviction policies, one module each, registered in :data:`specmd_sim.policies.EVICTION`."""

"""Helpers shared by tests and benchmarks (not part of the specmd_sim package)."""

"""Validation of the simulator against published measurements of real systems."""

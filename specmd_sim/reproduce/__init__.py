"""Reproductions of published studies, one module per study (``specmd reproduce NAME``)."""

from specmd_sim.reproduce.specmd import reproduce_specmd

STUDIES = {"specmd": reproduce_specmd}

__all__ = ["STUDIES", "reproduce_specmd"]

"""Enumerations shared by the cache, the policies and the engines."""

from __future__ import annotations

from enum import IntEnum


class State(IntEnum):
    """Where an expert is with respect to the GPU cache."""

    ABSENT = 0
    LOADING = 1  # space reserved, transfer in flight; never evictable
    RESIDENT = 2


class AccessClass(IntEnum):
    """Class of one routed access (per pass, layer and expert of the demand set)."""

    HIT = 0  # resident when the router decided
    LATE_HIT = 1  # loading when the router decided (timing engine only); not a hit
    COMPULSORY = 2  # never resident before in this run
    CAPACITY = 3  # evicted in an earlier pass
    COLLISION = 4  # evicted earlier in the current pass; every class >= COMPULSORY is a miss


class FetchReason(IntEnum):
    DEMAND = 0
    PREFETCH = 1
    PRELOAD = 2  # placed before the run (e.g. static-hot's pinned experts); moves no bytes

"""libCacheSim (``pip install libcachesim``) as an independent reference for miss counts.

Runs libCacheSim's LRU, FIFO and Belady on a sequence of integer object ids, every object of
size 1, with the cache size given in objects (= expert slots), and returns the miss count.

Recipe for the libcachesim 0.3.5 Python bindings (used by :func:`miss_count`):

1. Write the sequence as an *oracleGeneral* binary trace: packed little-endian 24-byte records
   ``(uint32 clock_time, uint64 obj_id, uint32 obj_size, int64 next_access_vtime)``, where
   ``next_access_vtime`` is the index of the id's next request (``-1`` = never; the reader turns
   it into ``INT64_MAX``). Belady reads that field to rank objects; LRU and FIFO ignore it.
   ``obj_size`` must be > 0 (size-0 requests are skipped by the reader).
2. ``reader = libcachesim.TraceReader(path, libcachesim.TraceType.ORACLE_GENERAL_TRACE)``.
3. ``cache = libcachesim.LRU(slots, hashpower=16)`` (or ``FIFO``, ``Belady``): an int cache
   size is in bytes, so with size-1 objects it counts objects (a small ``hashpower`` avoids
   allocating and freeing the default 2**24-bucket table per cache).
4. ``obj_miss_ratio, byte_miss_ratio = cache.process_trace(reader)`` runs the whole trace in C;
   misses = ``round(obj_miss_ratio * n)`` (exact: the ratio is ``1 - hits / n`` in doubles).

:func:`miss_count_requests` does the same through the per-request API (``Request(obj_id=...,
obj_size=1, next_access_vtime=...)`` and ``cache.get(req)`` -> hit?), which counts exactly but
runs a Python loop: a cross-check for short sequences.

libCacheSim's Belady always admits the missed object and evicts the one whose next use lies
farthest ahead (the MIN optimum of an always-admit cache), like specmd-sim's ``belady``.
``libcachesim`` is imported lazily, so importing this module never needs it.
"""

from __future__ import annotations

import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

POLICIES = ("lru", "fifo", "belady")
NEVER = np.iinfo(np.int64).max

ORACLE_GENERAL = np.dtype(
    [("clock_time", "<u4"), ("obj_id", "<u8"), ("obj_size", "<u4"), ("next_access_vtime", "<i8")]
)
assert ORACLE_GENERAL.itemsize == 24  # packed, as libCacheSim's oracleGeneral reader expects


def _lcs() -> Any:
    import libcachesim

    return libcachesim


def flat_ids(experts: np.ndarray, num_experts: int) -> np.ndarray:
    """``[tokens, layers, k]`` expert ids -> the demand-only access sequence.

    Token-major, layers ascending, each layer's experts in stored order, flat id
    ``layer * num_experts + expert``; ``-1`` entries (missing records) are dropped.
    """
    experts = np.asarray(experts).astype(np.int64)
    layers = np.arange(experts.shape[1], dtype=np.int64)[None, :, None]
    flat = experts + layers * num_experts
    return flat[experts >= 0]


def next_access_vtime(ids: np.ndarray) -> np.ndarray:
    """For each position, the position of the same id's next request, or -1 if none."""
    ids = np.asarray(ids, np.int64)
    n = ids.size
    order = np.argsort(ids, kind="stable")  # positions grouped by id, ascending within an id
    nxt = np.full(n, -1, np.int64)
    same = ids[order[1:]] == ids[order[:-1]]
    nxt[order[:-1][same]] = order[1:][same]
    return nxt


def write_oracle_general(ids: np.ndarray, path: str | Path) -> Path:
    """Write ``ids`` (all of size 1) as an oracleGeneral binary trace; returns the path."""
    ids = np.asarray(ids, np.int64)
    if ids.size and int(ids.min()) < 0:
        raise ValueError("object ids must be >= 0")
    rec = np.zeros(ids.size, ORACLE_GENERAL)
    rec["clock_time"] = np.arange(ids.size) & 0xFFFFFFFF
    rec["obj_id"] = ids
    rec["obj_size"] = 1
    rec["next_access_vtime"] = next_access_vtime(ids)
    path = Path(path)
    rec.tofile(path)
    return path


def make_cache(policy: str, slots: int) -> Any:
    """A libCacheSim cache of ``slots`` size-1 objects."""
    lcs = _lcs()
    classes = {"lru": lcs.LRU, "fifo": lcs.FIFO, "belady": lcs.Belady}
    if policy not in classes:
        raise ValueError(f"policy: expected one of {POLICIES}, got {policy!r}")
    if not isinstance(slots, int) or isinstance(slots, bool) or slots < 1:
        raise ValueError(f"slots: expected an int >= 1, got {slots!r}")
    # libCacheSim's default hash table (2**24 buckets) costs ~50 ms to free; the table only
    # holds cached objects, so a small one suffices (it grows if needed).
    return classes[policy](slots, hashpower=max(16, slots.bit_length() + 2))


def run_file(path: str | Path, n: int, policy: str, slots: int) -> tuple[int, float]:
    """Process an oracleGeneral trace of ``n`` requests; return (misses, seconds).

    The seconds cover only ``process_trace`` (the C loop), not opening the reader or building
    the cache.
    """
    lcs = _lcs()
    reader = lcs.TraceReader(str(path), lcs.TraceType.ORACLE_GENERAL_TRACE)
    if reader.n_total_req != n:
        raise RuntimeError(f"{path}: expected {n} requests, the reader sees {reader.n_total_req}")
    cache = make_cache(policy, slots)
    t0 = time.perf_counter()
    miss_ratio, _byte_miss_ratio = cache.process_trace(reader)
    seconds = time.perf_counter() - t0
    return round(miss_ratio * n), seconds


def miss_count(ids: np.ndarray, slots: int, policy: str) -> int:
    """libCacheSim's miss count for ``ids`` (size-1 objects) in a cache of ``slots`` objects."""
    ids = np.asarray(ids, np.int64)
    if ids.size == 0:
        return 0
    with tempfile.TemporaryDirectory(prefix="specmd-lcs-") as tmp:
        path = write_oracle_general(ids, Path(tmp) / "trace.oracleGeneral.bin")
        return run_file(path, ids.size, policy, slots)[0]


def miss_counts(
    ids: np.ndarray, slots: int, policies: tuple[str, ...] = POLICIES
) -> dict[str, int]:
    """:func:`miss_count` for several policies, writing the trace once."""
    ids = np.asarray(ids, np.int64)
    if ids.size == 0:
        return dict.fromkeys(policies, 0)
    with tempfile.TemporaryDirectory(prefix="specmd-lcs-") as tmp:
        path = write_oracle_general(ids, Path(tmp) / "trace.oracleGeneral.bin")
        return {p: run_file(path, ids.size, p, slots)[0] for p in policies}


def miss_count_requests(ids: np.ndarray, slots: int, policy: str) -> int:
    """The same count through the per-request API (exact integer count; Python loop)."""
    lcs = _lcs()
    ids = np.asarray(ids, np.int64)
    nxt = next_access_vtime(ids)
    nxt[nxt < 0] = NEVER  # Belady expects INT64_MAX for "never", not -1
    cache = make_cache(policy, slots)
    misses = 0
    for i, (obj, nx) in enumerate(zip(ids.tolist(), nxt.tolist(), strict=True)):
        req = lcs.Request(obj_size=1, obj_id=obj, clock_time=i, next_access_vtime=nx)
        if not cache.get(req):
            misses += 1
    return misses

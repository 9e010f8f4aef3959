"""Miss-ratio curves: hit rate, byte-miss ratio and the miss taxonomy over many cache capacities.

Two methods, chosen from the config:

- ``stack`` (exact, one pass over the trace for every capacity at once): where the run is a
  stack algorithm (Mattson et al. 1970), the cache of capacity ``B`` always holds the most
  recently used keys that fit in ``B`` bytes, so one pass computes each access's *byte stack
  distance* (its own bytes plus those of the distinct keys used since its last use) and it is
  a hit exactly at the capacities ``B`` at least that distance. That is classic LRU: ``eviction:
  lru``, ``cache.pin_demand_set: false`` (experts taken one at a time in gate order, the
  libCacheSim semantics), no prefetching and ``miss: stall``. Not stack algorithms here, so
  not taken this way: FIFO (Belady's anomaly), in-cache LFU (its counts are forgotten on
  eviction, so they differ between capacities), Least-Stale (its stale queue is in insertion
  order, as FIFO's), LRU with a pinned demand set (a layer's hits are touched before its misses
  are inserted, so the recency order inside a layer depends on the capacity), and anything
  with prefetching.
- ``replay``: every other config, one :func:`~specmd_sim.engine.replay.replay` per capacity.

The taxonomy comes from the same pass: an access that misses at ``B`` is a collision miss when
its key was resident when the pass started (its byte depth then, computed before the pass's
first update, is at most ``B``) or was used earlier in the same pass, a capacity miss
otherwise; a key's first access is compulsory. The pass keeps only per-capacity counts, so its
memory does not grow with the trace. ``belady=True`` adds the offline optimum's hit
rate at each capacity, the bound of every curve: MIN is a stack algorithm too where every
expert has one size, so on a classic run it also takes one pass (:func:`opt_depths`); with
mixed sizes, or on any other run, the ``belady`` policy is replayed per capacity.

The pass counts byte stack distances in a Fenwick tree; where every expert has one size and
the capacities are few it follows the capacities' boundaries in a recency list instead (about
twice as fast; the same counts). The kernels are plain Python over numpy arrays that numba
compiles when installed (the ``fast`` extra); without it the same code runs interpreted,
slower but equal. Compiled, a long trace is cut into pieces counted on threads at once
(:func:`curve_counts`), with the same counts.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import numpy as np

from specmd_sim.config import SimConfig
from specmd_sim.engine.jit import available, compiled
from specmd_sim.engine.replay import replay
from specmd_sim.errors import SpecmdError
from specmd_sim.policies.registry import EVICTION
from specmd_sim.scenario import Scenario, build_scenario, with_capacity


@dataclass(frozen=True)
class MissRatioCurve:
    """Counts per capacity (arrays in the order of ``capacities``)."""

    method: str  # "stack" or "replay"
    capacities: tuple[str | int, ...]  # as asked for
    capacity_bytes: np.ndarray  # int64, resolved
    slots: np.ndarray  # int64, expert slots of the largest expert
    accesses: int
    bytes_accessed: int
    hits: np.ndarray
    misses_compulsory: np.ndarray
    misses_collision: np.ndarray
    misses_capacity: np.ndarray
    bytes_missed: np.ndarray
    belady_hits: np.ndarray | None = None  # the offline optimum's hits (belady=True)

    @property
    def hit_rate(self) -> np.ndarray:
        return self.hits / max(self.accesses, 1)

    @property
    def miss_ratio(self) -> np.ndarray:
        return 1.0 - self.hit_rate

    @property
    def byte_miss_ratio(self) -> np.ndarray:
        return self.bytes_missed / max(self.bytes_accessed, 1)

    def rows(self) -> list[dict[str, Any]]:
        """One mapping per capacity, for tables and JSON."""
        out = []
        for i, capacity in enumerate(self.capacities):
            row: dict[str, Any] = {
                "capacity": capacity,
                "capacity_bytes": int(self.capacity_bytes[i]),
                "slots": int(self.slots[i]),
                "accesses": self.accesses,
                "hits": int(self.hits[i]),
                "hit_rate": float(self.hit_rate[i]),
                "misses_compulsory": int(self.misses_compulsory[i]),
                "misses_collision": int(self.misses_collision[i]),
                "misses_capacity": int(self.misses_capacity[i]),
                "byte_miss_ratio": float(self.byte_miss_ratio[i]),
            }
            if self.belady_hits is not None:
                row["belady_hit_rate"] = float(self.belady_hits[i]) / max(self.accesses, 1)
            out.append(row)
        return out


def stack_method_applies(config: SimConfig) -> str | None:
    """None when the config is a stack algorithm (see the module docstring), else why not."""
    if config.eviction.kind != "lru":
        return f"eviction {config.eviction.kind} is not a stack algorithm here"
    return _classic(config)


def _classic(config: SimConfig) -> str | None:
    """None when the run takes one expert at a time, demand only (what a stack algorithm's
    one pass needs besides its policy), else why not."""
    if config.cache.pin_demand_set:
        return "cache.pin_demand_set orders a layer's experts by whether they hit"
    if config.prefetch.kind != "none":
        return f"prefetch {config.prefetch.kind} makes residency depend on the capacity's past"
    if config.miss.kind != "stall":
        return f"miss {config.miss.kind} does not always fetch"
    if config.parallel.gpus != 1:
        return "several GPUs"
    if config.workload.kv_cache == "evict":
        return "workload.kv_cache evict changes the capacity during the run"
    return None


def miss_ratio_curve(
    config: SimConfig | Scenario,
    capacities: Sequence[str | int],
    *,
    belady: bool = False,
    workers: int | None = None,
) -> MissRatioCurve:
    """The curve of ``config`` (or of an already built scenario), its capacity replaced by each
    of ``capacities``. ``workers``: threads of the one-pass method (:func:`curve_counts`; default
    the machine's cores)."""
    if not capacities:
        raise SpecmdError("capacities: expected at least one, got none")
    mode = (config.config if isinstance(config, Scenario) else config).workload.kv_cache
    if mode in ("wait", "paged"):
        raise SpecmdError(
            f"workload.kv_cache: expected reserved or evict for a miss-ratio curve (with {mode} "
            f"the requests that run together, so the accesses, depend on the capacity), got "
            f"{mode!r}"
        )
    if isinstance(config, Scenario):
        scenario, config = config, config.config
    else:
        scenario = build_scenario(config, check_cache=False)
    sized = [with_capacity(scenario, c) for c in capacities]  # each checked, before any work
    cap = np.array([s.capacity_bytes for s in sized], np.int64)
    slots = cap // scenario.placement.largest
    if stack_method_applies(config) is None:
        curve = _stack_curve(scenario, tuple(capacities), cap, slots, workers)
    else:
        curve = _replay_curve(sized, tuple(capacities), cap, slots)
    if belady:
        curve = dataclasses.replace(curve, belady_hits=_belady_hits(scenario, sized, cap))
    return curve


def _stack_curve(
    scenario: Scenario,
    capacities: tuple[str | int, ...],
    cap: np.ndarray,
    slots: np.ndarray,
    workers: int | None,
) -> MissRatioCurve:
    demand = scenario.demand
    keys = demand.keys
    nbytes = scenario.placement.nbytes.astype(np.int64)
    starts = demand.offsets[:: demand.num_layers].astype(np.int64)  # each pass's first access
    order = np.argsort(cap, kind="stable")
    *counts, first, bytes_accessed = curve_counts(keys, starts, nbytes, cap[order], workers)
    hits, resident, hit_bytes = (np.empty(cap.size, np.int64) for _ in range(3))
    for out, column in zip((hits, resident, hit_bytes), counts, strict=True):
        out[order] = np.cumsum(column)[: cap.size]  # at most each capacity
    return MissRatioCurve(
        method="stack",
        capacities=capacities,
        capacity_bytes=cap,
        slots=slots,
        accesses=int(keys.size),
        bytes_accessed=int(bytes_accessed),
        hits=hits,
        misses_compulsory=np.full(cap.size, first, np.int64),
        misses_collision=resident - hits,
        misses_capacity=keys.size - first - resident,
        bytes_missed=bytes_accessed - hit_bytes,
    )


def _replay_curve(
    sized: list[Scenario], capacities: tuple[str | int, ...], cap: np.ndarray, slots: np.ndarray
) -> MissRatioCurve:
    metrics = [replay(s).metrics for s in sized]

    def column(name: str) -> np.ndarray:
        return np.array([m[name] for m in metrics], np.int64)

    return MissRatioCurve(
        method="replay",
        capacities=capacities,
        capacity_bytes=cap,
        slots=slots,
        accesses=int(metrics[0]["accesses"]),
        bytes_accessed=_bytes_accessed(sized[0]),
        hits=column("hits"),
        misses_compulsory=column("misses_compulsory"),
        misses_collision=column("misses_collision"),
        misses_capacity=column("misses_capacity"),
        bytes_missed=column("bytes_demand"),
    )


def _bytes_accessed(scenario: Scenario) -> int:
    return int(scenario.placement.nbytes[scenario.demand.keys].sum())


def _belady_hits(scenario: Scenario, sized: list[Scenario], cap: np.ndarray) -> np.ndarray:
    """The offline optimum's hits at each capacity: in one pass where it is a stack algorithm
    (a classic run whose experts all have one size), else the ``belady`` policy replayed."""
    nbytes = scenario.placement.nbytes
    if _classic(scenario.config) is None and nbytes.size and np.all(nbytes == nbytes[0]):
        keys = np.ascontiguousarray(scenario.demand.keys, np.int64)
        slots = cap // nbytes[0]
        depths = opt_depths(keys, next_uses(keys, nbytes.size), nbytes.size, int(slots.max()))
        return np.cumsum(depths)[slots]
    optimum = EVICTION.parse_config("belady")
    hits = []
    for s in sized:
        config = s.config.model_copy(update={"eviction": optimum, "belady_gap": False})
        hits.append(replay(dataclasses.replace(s, config=config)).metrics["hits"])
    return np.array(hits, np.int64)


# --- the pass kernel -------------------------------------------------------------------------

# The trace is cut into pieces (at pass boundaries) of at least this many accesses, counted on
# threads at once where numba compiles the kernel (it releases the GIL); a piece starts from the
# keys' recency order where the one before ends, so the counts do not depend on the cutting.
_PIECE_ACCESSES = 1 << 20
# Distances are looked up in a table of this many entries at most (else a binary search).
_TABLE_LIMIT = 1 << 22
# At most this many capacities, where every key has one size, are counted by their boundaries in
# one recency list (_count_piece_slots: an access costs a step per capacity above its key's
# depth) rather than by distances in a Fenwick tree (_count_piece: four walks of ~log2(keys)
# steps, whatever the capacities). On the 10.24M-access OLMoE trace of benchmarks/mrc_speed.py
# (1,024 keys; 2026-12-04, numba 0.68.1, one thread): 20 capacities 0.24-0.29 s against the
# tree's 0.50-0.58 s; in the worst case, every access deeper than every capacity, 32 capacities
# 0.31 s and 64 0.63 s against the tree's 0.50 s.
_BOUNDARY_LIMIT = 48


def curve_counts(
    keys: np.ndarray,
    starts: np.ndarray,
    nbytes: np.ndarray,
    bounds: np.ndarray,
    workers: int | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int]:
    """One pass over the accesses (``keys`` in run order; ``starts``: each pass's first access,
    then the end; ``bounds``: the capacities in bytes, sorted). Per capacity, and one past the
    largest: the accesses whose byte stack distance first fits it, those whose key's byte depth
    when the pass started first fits it (a key used earlier in the pass has depth 0), and the
    bytes of the former; then the number of first accesses and the bytes of all accesses.
    Cumulated over the capacities, the first two are the hits and the keys resident when
    their pass started.

    Sizes are counted in units of the keys' greatest common size (one unit a key when all are
    the same size), so a distance looks its capacity up in a table; where every key is one unit
    and the capacities are few, they are counted by where their boundaries fall in the recency
    order instead (:func:`_count_piece_slots`, the same counts). With ``workers`` above 1
    (default: the machine's cores) and numba, pieces of the trace are counted at once on that
    many threads, each from the recency order left by the accesses before it (a scan of the
    keys); every access is still counted once, and the counts are the same for any cutting.
    """
    keys = np.ascontiguousarray(keys)
    starts = np.ascontiguousarray(starts, np.int64)
    nbytes = np.ascontiguousarray(nbytes, np.int64)
    unit = int(np.gcd.reduce(nbytes)) if nbytes.size else 1
    weight = nbytes // max(unit, 1)
    limit = int(weight.sum())
    units = np.asarray(bounds, np.int64) // max(unit, 1)  # a distance d fits B iff d <= B // unit
    slots = units.size <= _BOUNDARY_LIMIT and limit == weight.size and bool(np.all(units >= 1))
    # (slots: every key one unit, no capacity under one key; no table: a binary search)
    table = np.zeros(0, np.int64) if slots or limit >= _TABLE_LIMIT else _bucket_table(units, limit)
    if workers is None:
        workers = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1
    if not available():
        workers = 1
    accesses = int(starts[-1] - starts[0])
    pieces = _cut(starts, max(1, min(workers, accesses // _PIECE_ACCESSES)))
    befores = _last_uses(keys, nbytes.size, starts[pieces[:-1]])

    def count(i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int]:
        piece = starts[pieces[i] : pieces[i + 1] + 1]
        if slots:
            return _count_piece_slots(keys, piece, nbytes, units, befores[i])
        return _count_piece(keys, piece, nbytes, weight, units, table, befores[i])

    if len(pieces) == 2:
        parts = [count(0)]
    else:
        with ThreadPoolExecutor(len(pieces) - 1) as pool:
            parts = list(pool.map(count, range(len(pieces) - 1)))
    hits, resident, hit_bytes, first, accessed = parts[0]
    for more in parts[1:]:
        hits, resident, hit_bytes = hits + more[0], resident + more[1], hit_bytes + more[2]
        first, accessed = first + more[3], accessed + more[4]
    return hits, resident, hit_bytes, first, accessed


def _cut(starts: np.ndarray, pieces: int) -> np.ndarray:
    """Pass indices cutting the passes into ``pieces`` runs of about equal accesses (the first
    0, the last the number of passes)."""
    passes = starts.size - 1
    goals = starts[0] + (starts[-1] - starts[0]) * np.arange(1, pieces) // pieces
    inner = np.unique(np.searchsorted(starts[:-1], goals))
    inner = inner[(inner > 0) & (inner < passes)]
    return np.concatenate(([0], inner, [passes])).astype(np.int64)


@compiled
def _bucket_table(units: np.ndarray, limit: int) -> np.ndarray:
    """For each distance 0..limit (in units), the index of the first capacity it fits."""
    table = np.empty(limit + 1, np.int64)
    j = 0
    for d in range(limit + 1):
        while j < units.size and units[j] < d:
            j += 1
        table[d] = j
    return table


@compiled
def _last_uses(keys: np.ndarray, n: int, cuts: np.ndarray) -> np.ndarray:
    """Per cut (an access index, ascending), each key's last use before it (-1: none)."""
    out = np.empty((cuts.size, n), np.int64)
    last = np.full(n, -1, np.int64)
    i = 0
    for c in range(cuts.size):
        while i < cuts[c]:
            last[keys[i]] = i
            i += 1
        out[c] = last
    return out


@compiled
def _search(units: np.ndarray, distance: int) -> int:
    """The index of the first capacity ``distance`` fits (the number of capacities if none), by
    binary search (where distances are too many for a table)."""
    lo, hi = 0, units.size
    while lo < hi:
        mid = (lo + hi) // 2
        if units[mid] < distance:
            lo = mid + 1
        else:
            hi = mid
    return lo


@compiled
def _prefix(tree: np.ndarray, i: int) -> int:
    """Sum of the Fenwick tree's positions 1..i."""
    total = 0
    while i > 0:
        total += tree[i]
        i -= i & -i
    return total


@compiled
def _add(tree: np.ndarray, i: int, value: int) -> None:
    while i < tree.size:
        tree[i] += value
        i += i & -i


@compiled
def _renumber(tree: np.ndarray, last: np.ndarray, weight: np.ndarray, at: np.ndarray) -> int:
    """Renumber the keys' last uses 1..m in their order and rebuild the tree (in linear time,
    ``at`` as scratch); the next free position."""
    at[:] = -1
    for key in range(last.size):
        if last[key] >= 0:
            at[last[key]] = key
    tree[:] = 0
    position = 1
    for i in range(at.size):
        key = at[i]
        if key >= 0:
            last[key] = position
            tree[position] = weight[key]
            position += 1
    for i in range(1, tree.size):  # each node adds itself to its parent
        parent = i + (i & -i)
        if parent < tree.size:
            tree[parent] += tree[i]
    return position


@compiled
def _longest_pass(starts: np.ndarray) -> int:
    """The most accesses of one pass (``starts``: each pass's first access, then the end)."""
    longest = 0
    for p in range(starts.size - 1):
        longest = max(longest, starts[p + 1] - starts[p])
    return longest


@compiled
def _count_piece(
    keys: np.ndarray,
    starts: np.ndarray,
    nbytes: np.ndarray,
    weight: np.ndarray,
    units: np.ndarray,
    table: np.ndarray,
    before: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int]:
    """:func:`curve_counts` over the passes of ``starts``, from the recency order ``before``
    (each key's last use before them, -1: none).

    A Fenwick tree over positions in time holds each key's size at its last use, so the
    distance is the key's size plus the tree's sum after that use (its total, the size of
    every key used so far, less the sum up to that use). Positions are renumbered (kept in
    order) between passes when the next pass would not fit, so the tree has ``2 x keys +
    longest pass`` positions however long the run, and a renumbering (linear in that) comes at
    most once per ``keys`` accesses. Memory: O(keys + capacities).
    """
    passes = starts.size - 1
    n = weight.size
    longest = _longest_pass(starts)
    tree = np.zeros(2 * n + longest + 2, np.int64)
    at = np.empty(tree.size, np.int64)
    last = np.full(n, -1, np.int64)  # position of each key's last use in the tree
    total = 0  # the tree's sum: the size of every key used so far
    rank = 1
    for key in np.argsort(before):  # the keys used before, in the order of their last use
        if before[key] >= 0:
            last[key] = rank
            rank += 1
            total += weight[key]
    now = _renumber(tree, last, weight, at)
    seen = np.full(n, -1, np.int64)  # the last pass that used each key
    depth = np.zeros(longest, np.int64)  # of the pass's accesses
    hits = np.zeros(units.size + 1, np.int64)
    resident = np.zeros(units.size + 1, np.int64)
    hit_bytes = np.zeros(units.size + 1, np.int64)
    first = 0
    accessed = 0
    for p in range(passes):
        lo, hi = starts[p], starts[p + 1]
        if now + (hi - lo) >= tree.size:
            now = _renumber(tree, last, weight, at)
        for i in range(lo, hi):  # depths at the pass's start: the tree before its updates
            key = keys[i]
            if seen[key] == p or last[key] < 0:
                depth[i - lo] = 0  # used earlier in this pass (or never: not counted)
            else:
                depth[i - lo] = weight[key] + total - _prefix(tree, last[key])
            seen[key] = p
        for i in range(lo, hi):
            key = keys[i]
            q = last[key]
            w = weight[key]
            accessed += nbytes[key]
            if q >= 0:
                distance = w + total - _prefix(tree, q)
                _add(tree, q, -w)
                # (the table inline: a call per access costs a third of the kernel's time)
                j = table[distance] if table.size else _search(units, distance)
                hits[j] += 1
                hit_bytes[j] += nbytes[key]
                d = depth[i - lo]
                resident[table[d] if table.size else _search(units, d)] += 1
            else:
                total += w
                first += 1
            _add(tree, now, w)
            last[key] = now
            now += 1
    return hits, resident, hit_bytes, first, accessed


@compiled
def _count_piece_slots(
    keys: np.ndarray,
    starts: np.ndarray,
    nbytes: np.ndarray,
    units: np.ndarray,
    before: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, int, int]:
    """:func:`_count_piece` where every key takes one unit and every capacity at least one:
    the same counts, by the capacities' boundaries in the recency order rather than distances.

    The keys are one doubly linked list, most recent first (``head`` a sentinel before the
    first and after the last); ``marker[t]`` is the last key at a depth of at most
    ``units[t]`` (``head``: none), and ``where[key]`` the first capacity the key's depth fits
    (``units.size``: none), which is the capacity its distance fits when it is accessed. Moving
    a key to the front pushes every key above it one deeper, so each boundary above it moves up
    one key, which then fits from the next capacity on: a step per capacity above the key's
    depth (a key never used before: per capacity the list already fills), none below. A key
    that was a boundary's marker leaves it to the key above it. Memory: O(keys + capacities).
    """
    n, bounds = nbytes.size, units.size
    head = n
    nxt, prv, where, marker, size, full = _slot_list(before, units)
    longest = _longest_pass(starts)
    seen = np.full(n, -1, np.int64)  # the last pass that used each key
    depth = np.zeros(longest, np.int64)  # where each of the pass's accesses was at its start
    hits = np.zeros(bounds + 1, np.int64)
    resident = np.zeros(bounds + 1, np.int64)
    hit_bytes = np.zeros(bounds + 1, np.int64)
    first = 0
    accessed = 0
    for p in range(starts.size - 1):
        lo, hi = starts[p], starts[p + 1]
        for i in range(lo, hi):
            key = keys[i]
            depth[i - lo] = 0 if seen[key] == p or where[key] < 0 else where[key]
            seen[key] = p
        for i in range(lo, hi):
            key = keys[i]
            accessed += nbytes[key]
            s = where[key]
            if s >= 0:
                hits[s] += 1
                hit_bytes[s] += nbytes[key]
                resident[depth[i - lo]] += 1
                up = prv[key]
                if up == head:  # already the most recent
                    continue
                t = s
                while t < bounds and marker[t] == key:
                    marker[t] = up
                    t += 1
                down = nxt[key]
                nxt[up], prv[down] = down, up
            else:
                first += 1
                s = full  # the capacities the list fills move; the others keep their last key
                size += 1
                while full < bounds and units[full] == size:
                    full += 1
                if size == 1:
                    marker[:] = key
            top = nxt[head]
            nxt[head], prv[key], nxt[key], prv[top] = key, head, top, key
            where[key] = 0
            for t in range(s):
                m = marker[t]
                where[m] = t + 1
                marker[t] = prv[m]
    return hits, resident, hit_bytes, first, accessed


@compiled
def _slot_list(
    before: np.ndarray, units: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, int, int]:
    """:func:`_count_piece_slots`'s list of the keys used ``before`` (each key's last use, -1:
    none), most recent first: next and previous (the sentinel ``head`` is the last index), each
    key's first capacity (-1: never used), each capacity's marker, the keys, and how many
    capacities they fill."""
    n, bounds = before.size, units.size
    head = n
    nxt = np.empty(n + 1, np.int64)
    prv = np.empty(n + 1, np.int64)
    nxt[head] = head
    prv[head] = head
    where = np.full(n, -1, np.int64)
    marker = np.full(bounds, head, np.int64)
    size = 0  # keys in the list
    full = 0  # capacities the list fills (units[t] <= size)
    for key in np.argsort(-before):
        if before[key] < 0:
            break
        size += 1
        while full < bounds and units[full] < size:
            marker[full] = prv[head]
            full += 1
        where[key] = full
        tail = prv[head]
        nxt[tail], prv[key], nxt[key], prv[head] = key, tail, head, key
    for t in range(full, bounds):  # the last key (head: none)
        marker[t] = prv[head]
    while full < bounds and units[full] == size:
        full += 1
    return nxt, prv, where, marker, size, full


@compiled
def next_uses(keys: np.ndarray, n: int) -> np.ndarray:
    """Each access's key's next access (its index), or the number of accesses if none."""
    out = np.empty(keys.size, np.int64)
    after = np.full(n, keys.size, np.int64)
    for i in range(keys.size - 1, -1, -1):
        out[i] = after[keys[i]]
        after[keys[i]] = i
    return out


@compiled
def opt_depths(keys: np.ndarray, nxt: np.ndarray, n: int, deepest: int) -> np.ndarray:
    """How many accesses hit the optimum (MIN: evict the farthest next use, ties to the
    smallest key, always admit) first at each capacity ``0 .. deepest`` in slots, by Mattson's
    stack algorithm (1970): MIN keeps at every capacity ``c`` the top ``c`` keys of one stack,
    so an access hits at the capacities at least its key's depth, and the stack is updated by
    putting the key on top and carrying the old top down, each level keeping the sooner used of
    what it held and what is carried (the level where the key was takes what is carried).
    Depths past ``deepest`` are not kept (their keys miss at every capacity asked for). Each
    level holds its key and that key's next use, read in order as the carry goes down."""
    counts = np.zeros(deepest + 1, np.int64)
    held = np.empty(max(deepest, 1), np.int64)  # the stack's keys, top first
    upcoming = np.empty(max(deepest, 1), np.int64)  # ... and the next use of each
    size = 0
    for i in range(keys.size):
        key, ahead = keys[i], nxt[i]
        if size and held[0] == key:
            counts[1] += 1
            upcoming[0] = ahead
            continue
        carry, carry_ahead = (held[0], upcoming[0]) if size else (-1, 0)
        held[0], upcoming[0] = key, ahead
        depth = 0
        for level in range(1, size):
            other = held[level]
            if other == key:
                held[level], upcoming[level] = carry, carry_ahead
                depth = level + 1
                break
            later = upcoming[level]
            if later > carry_ahead or (later == carry_ahead and other < carry):  # evicted first
                held[level], upcoming[level] = carry, carry_ahead
                carry, carry_ahead = other, later
        if depth:
            counts[depth] += 1
        elif size == 0:
            size = 1
        elif size < deepest:
            held[size], upcoming[size] = carry, carry_ahead
            size += 1
    return counts

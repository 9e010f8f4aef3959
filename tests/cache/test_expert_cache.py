"""Hand-traced sequences on the bare cache: states, pins, the miss taxonomy, Least-Stale vs LRU."""

from __future__ import annotations

import numpy as np
import pytest
from support import context
from support.cache import step

from specmd_sim.cache import AccessClass, ExpertCache, FetchReason, State
from specmd_sim.errors import SpecmdError

HIT, COMP, CAP, COLL = (
    AccessClass.HIT,
    AccessClass.COMPULSORY,
    AccessClass.CAPACITY,
    AccessClass.COLLISION,
)
E = 4  # experts per layer in these hand traces; key = layer * E + expert


def make_cache(kind: str, slots: int, layers: int = 3, **params: object) -> ExpertCache:
    return context.cache({"kind": kind, **params}, slots, layers, E)


A0, B1, C2, D2, E1 = 0 * E + 0, 1 * E + 1, 2 * E + 2, 2 * E + 3, 1 * E + 0


def run_collision_scenario(kind: str) -> list[list[AccessClass]]:
    """Pass 0 touches A0, B1, C2 (3 slots, full). In pass 1 the prefetcher, at layer 0, asks
    for B1 (cached) and E1 (absent): E1 needs a victim. LRU's victim is B1, the least recently
    used, which layer 1 then needs: a collision miss. Least-Stale counts the prefetcher's request
    as a touch, so B1 is current and the stale C2 goes instead."""
    cache = make_cache(kind, slots=3)
    cache.begin_pass(0)
    out = [step(cache, 0, [A0]), step(cache, 1, [B1]), step(cache, 2, [C2])]
    cache.begin_pass(1)
    out += [step(cache, 0, [A0], prefetch=[B1, E1]), step(cache, 1, [B1]), step(cache, 2, [D2])]
    return out


def test_lru_suffers_a_collision_miss_when_prefetching() -> None:
    assert run_collision_scenario("lru") == [[COMP], [COMP], [COMP], [HIT], [COLL], [COMP]]


def test_least_stale_avoids_that_collision() -> None:
    assert run_collision_scenario("least-stale") == [[COMP], [COMP], [COMP], [HIT], [HIT], [COMP]]


def test_capacity_vs_collision_vs_compulsory() -> None:
    cache = make_cache("fifo", slots=1, layers=2)
    cache.begin_pass(0)
    assert step(cache, 0, [0]) == [COMP]
    assert step(cache, 1, [E]) == [COMP]  # evicts key 0 in pass 0
    assert step(cache, 0, [0]) == [COLL]  # evicted earlier in this very pass
    cache.begin_pass(1)
    assert step(cache, 1, [E]) == [CAP]  # evicted in pass 0, needed in pass 1
    totals = cache.stats.totals()
    assert totals["accesses"] == 4
    assert totals["misses_compulsory"] == 2
    assert totals["misses_collision"] == 1
    assert totals["misses_capacity"] == 1
    assert totals["evictions"] == 3


def test_pinned_and_loading_entries_are_never_evicted() -> None:
    cache = make_cache("lru", slots=2, layers=1)
    cache.begin_pass(0)
    assert cache.reserve(0, FetchReason.DEMAND)  # LOADING
    cache.pin(0)
    assert cache.reserve(1, FetchReason.PREFETCH)  # fills the cache
    # 0 is pinned and loading, 1 loading: nothing evictable, the prefetch is dropped
    assert not cache.reserve(2, FetchReason.PREFETCH)
    assert cache.stats.prefetch_dropped == 1
    cache.complete(1)
    assert cache.reserve(2, FetchReason.PREFETCH)  # now 1 is evictable
    assert cache.state[1] == State.ABSENT and cache.state[0] == State.LOADING
    assert cache.used_bytes <= cache.capacity_bytes


def test_prefetch_accounting() -> None:
    cache = make_cache("fifo", slots=2, layers=1)
    cache.begin_pass(0)
    for key in (0, 1):
        assert cache.reserve(key, FetchReason.PREFETCH)
        cache.complete(key)
    assert cache.access(0, 0) == HIT  # prefetch used
    assert cache.reserve(2, FetchReason.PREFETCH)  # FIFO evicts 0 (used), then
    cache.complete(2)
    assert cache.reserve(3, FetchReason.PREFETCH)  # evicts 1: wasted
    cache.complete(3)
    cache.finish()  # 2 and 3 never used: wasted at the end
    t = cache.stats.totals()
    assert (t["prefetch_issued"], t["prefetch_completed"], t["prefetch_used"]) == (4, 4, 1)
    assert t["prefetch_wasted"] == 3
    assert t["bytes_prefetch"] == 40 and t["bytes_demand"] == 0


def test_cancel_returns_space_and_counts() -> None:
    cache = make_cache("lru", slots=1, layers=1)
    assert cache.reserve(3, FetchReason.PREFETCH)
    cache.cancel(3)
    assert cache.used_bytes == 0 and cache.state[3] == State.ABSENT
    t = cache.stats.totals()
    assert t["prefetch_cancelled"] == 1 and t["bytes_prefetch"] == 0


def test_least_stale_layer_order_evicts_the_layer_just_passed() -> None:
    cache = make_cache("least-stale", slots=3, order="layer")
    cache.begin_pass(0)
    step(cache, 0, [A0])
    step(cache, 1, [B1])
    step(cache, 2, [C2])
    cache.begin_pass(1)  # all three are stale now
    # at layer 1, the stale expert whose layer comes back last is B1 (this layer's, unpinned)
    assert step(cache, 1, [E1]) == [COMP]
    assert cache.state[B1] == State.ABSENT
    assert cache.state[A0] == cache.state[C2] == State.RESIDENT


def test_capacity_below_one_expert_is_rejected() -> None:
    with pytest.raises(SpecmdError, match=r"cache.capacity: expected room for at least one"):
        context.cache("lru", slots=1, layers=1, experts=E, capacity_bytes=9)


@pytest.mark.parametrize("kind", ["lru", "fifo", "lfu", "least-stale", "random"])
def test_mixed_sizes_keep_bytes_exact_and_pins_safe(kind: str) -> None:
    """Experts of two sizes (a bf16 one ~4x an int4 one): over a seeded random sequence of
    pins, accesses and fetches, used bytes always equal the bytes of the cached keys and stay
    within capacity, and a pinned expert is never evicted."""
    rng = np.random.default_rng(0)
    layers = 3
    sizes = [40 if rng.random() < 0.3 else 10 for _ in range(layers * E)]
    cache = context.cache(kind, 9, layers, E, expert_bytes=sizes, capacity_bytes=95, seed=1)
    fetched = 0
    for p in range(60):
        cache.begin_pass(p)
        for layer in range(layers):
            cache.begin_layer(layer)
            keys = [layer * E + int(e) for e in rng.choice(E, 2, replace=False)]
            for key in keys:
                cache.pin(key)
            for key in keys:
                if cache.access(key, layer) >= AccessClass.COMPULSORY:
                    assert cache.reserve(key, FetchReason.DEMAND)
                    cache.complete(key)
                    fetched += sizes[key]
            for key in keys:
                assert cache.state[key] == State.RESIDENT  # pinned: not evicted by the other
                cache.unpin(key)
            cached = [k for k in range(layers * E) if cache.state[k] != State.ABSENT]
            assert cache.used_bytes == sum(sizes[k] for k in cached) <= cache.capacity_bytes
    assert cache.stats.evictions > 0
    assert cache.stats.bytes_demand == fetched


B1_, C1_, D1_ = 1 * E + 1, 1 * E + 2, 1 * E + 3


@pytest.mark.parametrize(("insert", "expected"), [("mru", [HIT, HIT]), ("lru", [COLL, HIT])])
def test_lru_prefetch_insert_decides_whether_a_prefetch_survives_the_next(
    insert: str, expected: list[AccessClass]
) -> None:
    """3 slots. Pass 0 uses A0 and D1. In pass 1 layer 0 uses A0 (pinned while it runs) and
    prefetches B1 (a free slot), then C1, which needs a victim among D1 and B1. Counting a
    prefetch as a use (mru), the least recent is D1, and both prefetches hit. Counting only
    demand (lru), B1 entered at the least-recent end and goes: a collision miss."""
    cache = make_cache("lru", slots=3, layers=2, prefetch_insert=insert)
    cache.begin_pass(0)
    step(cache, 0, [A0])
    step(cache, 1, [D1_])
    cache.begin_pass(1)
    assert step(cache, 0, [A0], prefetch=[B1_, C1_]) == [HIT]
    assert step(cache, 1, [B1_, C1_]) == expected


@pytest.mark.parametrize(("order", "evicted"), [("fifo", B1), ("touch", C2)])
def test_least_stale_fifo_keeps_entry_order_where_touch_keeps_recency(
    order: str, evicted: int
) -> None:
    """Pass 0: A0 used, B1 and C2 prefetched at layer 0 (current: A0, B1, C2), B1 used at
    layer 1. Touch order moves B1 behind C2; FIFO leaves it where it entered. In pass 1 all
    three are stale and E1's prefetch needs a victim: FIFO takes B1 (it entered before C2),
    touch takes C2 (touched less recently)."""
    cache = make_cache("least-stale", slots=3, order=order)
    cache.begin_pass(0)
    step(cache, 0, [A0], prefetch=[B1, C2])
    step(cache, 1, [B1])
    cache.begin_pass(1)
    step(cache, 0, [A0], prefetch=[E1])
    assert cache.state[evicted] == State.ABSENT
    kept = C2 if evicted == B1 else B1
    assert cache.state[kept] == State.RESIDENT


class _Quota:
    """A per-layer budget's bare bones: key 0 is the quota victim, the staged key stays
    staged until settled, and the victim of a full cache is the first evictable of 2 and 3."""

    def __getattr__(self, hook: str):  # the other hooks: nothing to do
        return lambda *args: None

    def admit(self, key: int, reason: FetchReason) -> bool:
        return True

    def quota_victim(self, incoming: int, evictable) -> int | None:
        return 0 if evictable(0) else None

    def stages(self, incoming: int) -> bool:
        return True

    def choose_victim(self, evictable, incoming: int) -> int | None:
        return next((key for key in (2, 3) if evictable(key)), None)


def test_settle_never_fills_the_cache_past_its_capacity() -> None:
    """A staged expert larger than its quota victim, nothing else evictable: it stays staged
    (the victim's eviction stands) rather than overfilling the cache; once others can go, the
    next settle makes room for it."""
    cache = ExpertCache(1, 4, [1, 3, 1, 1], 3, _Quota())
    cache.preload([0, 2, 3])
    for key in (0, 2, 3):  # the layer step's pins: no quota victim, so key 1 is staged
        cache.pin(key)
    assert cache.reserve(1, FetchReason.DEMAND)  # staged, outside the capacity
    assert cache.staged_keys == [1] and cache.used_bytes == 3
    cache.unpin(0)  # the step released its pins, 2 and 3 held elsewhere
    cache.settle()
    assert cache.state[0] == State.ABSENT  # the quota victim went
    assert cache.staged_keys == [1] and cache.pins[1] == 1  # still staged, still held
    assert cache.used_bytes == 2 <= cache.capacity_bytes
    cache.unpin(2)
    cache.unpin(3)
    cache.preload([0])
    cache.settle()  # 0 (its quota victim), then 2 and 3 (the cache's victims) make room
    assert cache.staged_keys == [] and cache.pins[1] == 0
    assert [cache.state[k] for k in (0, 2, 3)] == [State.ABSENT] * 3
    assert cache.used_bytes == 3 == cache.capacity_bytes


class _Chooses:
    """An eviction policy (a plug-in's) whose every victim is ``victim``, whatever is
    evictable: the contract's violations."""

    def __init__(self, victim: object) -> None:
        self.victim = victim

    def __getattr__(self, name: str) -> object:
        return lambda *args: None if name != "admit" else True

    def quota_victim(self, incoming: int, evictable: object) -> None:
        return None

    def stages(self, incoming: int) -> bool:
        return False

    def choose_victim(self, evictable: object, incoming: int) -> object:
        return self.victim


@pytest.mark.parametrize(
    ("victim", "said"),
    [
        (10**9, "chose victim 1000000000;"),
        (-1, "chose victim -1;"),  # (not the last key, as a bytearray would read it)
        ("0", "chose victim '0';"),
        (3, "chose victim 3, which is absent;"),
        (0, "chose victim 0, which is pinned;"),
    ],
)
def test_a_victim_outside_the_evictable_set_is_one_clear_error(victim: object, said: str):
    """A plug-in's ``choose_victim`` that returns a key it may not evict (out of range, not an
    int, absent or pinned) stops the run with one line naming the policy, what it returned and
    what it must return, instead of an IndexError or a corrupted cache."""
    cache = ExpertCache(1, E, 10, 10, _Chooses(victim))
    cache.begin_pass(0)
    assert cache.reserve(0, FetchReason.DEMAND)
    cache.pins[0] += 1  # (held, as a layer step holds its experts)
    with pytest.raises(SpecmdError) as info:
        cache.reserve(1, FetchReason.DEMAND)
    message = str(info.value)
    assert message.startswith(f"eviction policy {__name__}:_Chooses: {said}")
    assert message.endswith("expected a key of the evictable set (a resident, unpinned "
                            "expert, 0 to 3) or None")  # fmt: skip

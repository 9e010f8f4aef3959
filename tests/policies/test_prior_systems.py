"""Each prior system's policy on a tiny hand-traced sequence that shows its defining behaviour.

Expected classes, victims and counters are worked out by hand in the comments from the rule in
each policy module's docstring, not computed by the code under test. Keys are flat ids
``layer * E + expert``. The bare-cache sequences follow the replay engine's order inside a
layer (router, pins, accesses, demand fetches in order — streamed if not admitted —,
prefetches, pins released). Least-Stale vs LRU is covered in tests/cache/test_expert_cache.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from support.cache import step
from support.context import access_sequence
from support.context import cache as make_cache

from specmd_sim import SimConfig, replay
from specmd_sim.cache import AccessClass, ExpertCache, FetchReason
from specmd_sim.errors import SpecmdError

HIT, COMP, CAP, COLL = (
    AccessClass.HIT,
    AccessClass.COMPULSORY,
    AccessClass.CAPACITY,
    AccessClass.COLLISION,
)
EB = 10  # bytes per expert in the bare-cache sequences


def one_per_pass(cache: ExpertCache, keys: list[int], first_pass: int = 0) -> list:
    """Each key alone in its own pass (single-layer model)."""
    out = []
    for p, key in enumerate(keys, start=first_pass):
        cache.begin_pass(p)
        out += step(cache, 0, [key])
    return out


# --- per-layer LRU (mixtral-offloading) ------------------------------------------------------


def test_per_layer_lru_evicts_inside_a_full_layer_while_the_cache_has_room() -> None:
    # 2 layers x 4 experts, 4 slots: quota 4 // 2 = 2 per layer. Layer 1 is key 4..7.
    cache = make_cache("per-layer-lru", slots=4, layers=2)
    cache.begin_pass(0)
    assert step(cache, 0, [0]) == [COMP]  # layer 0: [0]
    assert step(cache, 0, [1]) == [COMP]  # layer 0: [0, 1] (quota reached)
    assert step(cache, 0, [2]) == [COMP]  # layer 0 full: its LRU 0 goes, 2 slots still free
    assert cache.contents() == [1, 2] and cache.used_bytes == 2 * EB < cache.capacity_bytes
    assert step(cache, 0, [1]) == [HIT]  # layer 0 LRU order now 2, 1
    assert step(cache, 1, [4]) == [COMP]  # layer 1 has its own slots
    assert step(cache, 0, [3]) == [COMP]  # evicts 2, layer 0's LRU (not 1, just used)
    assert cache.contents() == [1, 3, 4]
    assert step(cache, 0, [0]) == [COLL]  # 0 was evicted in this pass; now 1 goes
    assert cache.contents() == [0, 3, 4]
    assert cache.stats.evictions == 3


def test_per_layer_lru_stages_what_a_layer_in_use_cannot_hold_and_keeps_the_last_loaded() -> None:
    # mixtral-offloading's load_experts: 2 layers x 4 experts, 2 slots: quota 1 per layer.
    cache = make_cache("per-layer-lru", slots=2, layers=2)
    cache.begin_pass(0)
    # layer 0 needs 0 and 1: 0 takes the layer's slot; 1 finds it in use and is staged (held
    # outside the capacity: the cache does not evict layer 1's space for it)
    assert step(cache, 1, [4]) == [COMP]  # layer 1: [4]
    cache.begin_pass(1)
    cache.begin_layer(0)
    for key in (0, 1):
        cache.pin(key)
    assert [cache.access(k, 0) for k in (0, 1)] == [COMP, COMP]
    assert cache.reserve(0, FetchReason.DEMAND) and cache.reserve(1, FetchReason.DEMAND)
    assert cache.staged_keys == [1] and cache.used_bytes == 2 * EB  # 0 and 4, not 1
    for key in (0, 1):
        cache.complete(key)
        cache.unpin(key)
    # settled: layer 0 gives up its LRU, 0 (loaded first), for the staged 1; layer 1 keeps 4
    cache.settle()
    assert cache.contents() == [1, 4] and cache.used_bytes == 2 * EB
    assert cache.staged_keys == [] and cache.stats.evictions == 1
    # next pass: layer 0 needs 1 (resident: a hit, marked used first) and 2 (missing): 2 is
    # staged, then 1, the layer's LRU though just used, goes; 2 stays
    cache.begin_pass(2)
    assert step(cache, 0, [2, 1]) == [COMP, HIT]
    assert cache.contents() == [2, 4] and cache.stats.evictions == 2


def test_per_layer_lru_preload_starts_as_build_model_leaves_the_gpu() -> None:
    # 2 layers x 4 experts, 2 slots per layer: build_model keeps experts 2 and 3 of each layer
    # on the device (do_offload = expert_idx < offload_per_layer = 2), 2 registered first
    cache = make_cache({"kind": "per-layer-lru", "slots_per_layer": 2, "preload": True},
                       slots=4, layers=2)  # fmt: skip
    assert cache.contents() == [2, 3, 6, 7] and cache.used_bytes == 4 * EB
    cache.begin_pass(0)
    assert step(cache, 0, [3]) == [HIT]  # layer 0's LRU order now 2, 3
    assert step(cache, 0, [0]) == [COMP]  # evicts 2, the LRU of the two preloaded
    assert cache.contents() == [0, 3, 6, 7]
    assert step(cache, 1, [4]) == [COMP]  # layer 1: 6 (registered before 7) goes
    assert cache.contents() == [0, 3, 4, 7] and cache.stats.evictions == 2


# --- MoE-Infinity ------------------------------------------------------------------------------


def test_moe_infinity_keeps_what_the_request_activated_most_and_resets_per_request() -> None:
    # 1 layer, 2 slots; passes 0-3 are request 0, pass 4 starts request 1.
    cache = make_cache("moe-infinity", slots=2, requests=[0, 0, 0, 0, 1])
    classes = one_per_pass(cache, [0, 0, 1])
    # EAM: 0 -> 2 (demand admission + hit), 1 -> 1; recency: 0 (pass 1), then 1 (pass 2)
    assert classes == [COMP, HIT, COMP]
    # pass 3: 2 misses; victim = lowest EAM = 1, although LRU would evict 0
    assert one_per_pass(cache, [2], first_pass=3) == [COMP]
    assert cache.contents() == [0, 2]
    # pass 4, request 1: the EAM restarts at 0 for all, so the tie goes to the least recently
    # used: 0 (used in pass 1) goes, 2 (admitted in pass 3) stays; without the reset 0 (EAM 2)
    # would outlive 2 (EAM 1)
    assert one_per_pass(cache, [3], first_pass=4) == [COMP]
    assert cache.contents() == [2, 3]


def test_moe_infinity_prefers_to_keep_layers_that_come_soon() -> None:
    # 3 layers x 4 experts, 2 slots, one request. EAM ties (1 each): the victim is the expert
    # whose layer the sweep reaches last from the running layer.
    cache = make_cache("moe-infinity", slots=2, layers=3)
    cache.begin_pass(0)
    assert step(cache, 1, [4]) == [COMP]  # layer 1, expert 0
    assert step(cache, 2, [8]) == [COMP]  # layer 2, expert 0
    cache.begin_pass(1)
    # at layer 0, layer 1 comes next (distance 0) and layer 2 after it (distance 1): 8 goes,
    # although LRU would evict 4
    assert step(cache, 0, [0]) == [COMP]
    assert cache.contents() == [0, 4]


# --- FineMoE -------------------------------------------------------------------------------


def test_finemoe_protects_unused_prefetches_and_ranks_by_probability_times_frequency() -> None:
    # 1 layer, 2 slots. Score = p (latest predictor scores, normalized) x f (uses + 1).
    cache = make_cache("finemoe", slots=2)
    cache.policy.on_scores(0, np.array([0.125, 0.5, 0.25, 0.125]))  # sums to 1
    cache.begin_pass(0)
    assert step(cache, 0, [1]) == [COMP]  # demand admission: f1 = 2, score 0.5 * 2 = 1.0
    assert step(cache, 0, [], prefetch=[0]) == []  # prefetched, unused: f0 = 1, score 0.125
    # 2 misses with a full cache: the unused prefetch 0 is protected, so 1 goes although its
    # score (1.0) is far above 0's (0.125)
    assert step(cache, 0, [2]) == [COMP]  # f2 = 2, score 0.5
    assert cache.contents() == [0, 2]
    assert step(cache, 0, [0]) == [HIT]  # the prefetch is used: unprotected, f0 = 2, 0.25
    # 3 misses: 0 (0.25) goes before 2 (0.5), although 0 is the most recently used
    assert step(cache, 0, [3]) == [COMP]  # f3 = 2, score 0.125 * 2 = 0.25
    assert cache.contents() == [2, 3]
    # new scores flip the ranking: 2 -> 0.125 * 2 = 0.25, 3 -> 0.625 * 2 = 1.25 (with the old
    # scores 3 (0.25) would have gone before 2 (0.5))
    cache.policy.on_scores(0, np.array([0.125, 0.125, 0.125, 0.625]))
    assert step(cache, 0, [1]) == [COLL]  # 1 was evicted earlier in this pass; 2 goes
    assert cache.contents() == [1, 3]
    assert cache.stats.prefetch_used == 1


# --- HybriMoE --------------------------------------------------------------------------------


def test_hybrimoe_moving_average_of_gates() -> None:
    # 1 layer, 2 slots, one expert per pass with these gates (dyadic: exact in binary):
    per_pass, gates = [[0], [1], [2], [3]], [[0.75], [0.125], [0.5], [0.5]]
    cache = make_cache("hybrimoe", slots=2, demand=access_sequence(per_pass, gates=gates))
    # S <- 0.5 g + 0.5 S for the selected expert, S <- 0.5 S for the others of the layer:
    #   pass 0: S = [0.375, 0, 0, 0]
    #   pass 1: S = [0.1875, 0.0625, 0, 0]
    assert one_per_pass(cache, [0, 1]) == [COMP, COMP]
    #   pass 2: S = [0.09375, 0.03125, 0.25, 0]: 1 (lowest) goes, although LRU would evict 0
    assert one_per_pass(cache, [2], first_pass=2) == [COMP]
    assert cache.contents() == [0, 2]
    #   pass 3: S = [0.046875, 0.015625, 0.125, 0.25]: 0's high gate of pass 0 has decayed
    #   below 2's, selected later: 0 goes
    assert one_per_pass(cache, [3], first_pass=3) == [COMP]
    assert cache.contents() == [2, 3]
    assert cache.policy.score[0].tolist() == [0.046875, 0.015625, 0.125, 0.25]


# --- LFU with aging ----------------------------------------------------------------------------


def test_lfu_aging_forgets_a_once_hot_expert() -> None:
    # 1 layer, 2 slots, counts halved at the start of passes 2, 4, 6 (period 2):
    #   p0 [0] c0 = 1 | p1 [0] c0 = 2 | p2 halve c0 = 1, [0] c0 = 2 | p3 [0] c0 = 3
    #   p4 halve c0 = 1.5, [1] c1 = 1 | p5 [1] c1 = 2 | p6 halve c0 = 0.75, c1 = 1, [1] c1 = 2
    #   p7 [2]: victim lowest count: 0 (0.75) < 1 (2), although 0 was used 4 times and 1 three
    keys = [0, 0, 0, 0, 1, 1, 1, 2]
    aging = make_cache({"kind": "lfu-aging", "period_passes": 2}, slots=2)
    assert one_per_pass(aging, keys) == [COMP, HIT, HIT, HIT, COMP, HIT, HIT, COMP]
    assert aging.contents() == [1, 2]
    assert aging.policy.count[:3].tolist() == [0.75, 2.0, 1.0]
    # plain (in-cache) LFU on the same sequence keeps the once-hot 0 (4 uses) and evicts 1 (3)
    lfu = make_cache("lfu", slots=2)
    one_per_pass(lfu, keys)
    assert lfu.contents() == [0, 2]


# --- random ------------------------------------------------------------------------------------


def _random_victims(seed: int) -> tuple[list[int], list[int]]:
    cache = make_cache("random", slots=3, experts=8, seed=seed)
    victims = []
    cache.begin_pass(0)
    for key in range(8):
        before = set(cache.contents())
        step(cache, 0, [key])
        victims += sorted(before - set(cache.contents()))
    return victims, cache.contents()


def test_random_is_seeded() -> None:
    # 1 layer x 8 experts, 3 slots, keys 0..7 demanded in turn. The victim is the
    # floor(u * 3)-th evictable key in admission order; u is drawn from the run's generator at
    # construction and again after each removal. numpy's default_rng draws:
    #   seed 0: 0.637, 0.2698, 0.041, 0.0165, 0.8133, ...
    #     3: [0,1,2][1] = 1 | 4: [0,2,3][0] = 0 | 5: [2,3,4][0] = 2 | 6: [3,4,5][0] = 3
    #     7: [4,5,6][2] = 6 -> left [4, 5, 7]
    #   seed 1: 0.5118, 0.9505, 0.1442, 0.9486, 0.3118, ...
    #     3: [0,1,2][1] = 1 | 4: [0,2,3][2] = 3 | 5: [0,2,4][0] = 0 | 6: [2,4,5][2] = 5
    #     7: [2,4,6][0] = 2 -> left [4, 6, 7]
    assert _random_victims(0) == ([1, 0, 2, 3, 6], [4, 5, 7])
    assert _random_victims(0) == _random_victims(0)  # same seed, same victims
    assert _random_victims(1) == ([1, 3, 0, 5, 2], [4, 6, 7])


# --- Belady with bypass ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "classes", "fetched", "bypassed", "contents"),
    [
        # pos 2: 2 is never used again, farther than 0 (pos 3) and 1 (pos 4): streamed, not
        # admitted; 0 and 1 then hit. Bytes: 0, 1 fetched, 2 streamed.
        ("belady-bypass", [COMP, COMP, COMP, HIT, HIT], 2, 1, [0, 1]),
        # always-admit Belady takes 2 in, evicting the farthest, 1 (pos 4): a capacity miss at
        # pos 4, where 0 and 2 are both never used again: the tie evicts the smaller id, 0
        ("belady", [COMP, COMP, COMP, HIT, CAP], 4, 0, [1, 2]),
    ],
)
def test_belady_bypass_does_not_admit_the_farthest(
    kind, classes, fetched, bypassed, contents
) -> None:
    keys = [0, 1, 2, 0, 1]  # one access per pass, 1 layer, 2 slots
    cache = make_cache(kind, slots=2, demand=access_sequence([[k] for k in keys]))
    assert one_per_pass(cache, keys) == classes
    t = cache.stats.totals()
    assert (t["bypassed"], t["bytes_demand"]) == (bypassed, (fetched + bypassed) * EB)
    assert cache.contents() == contents


def test_belady_bypass_admits_an_expert_needed_sooner() -> None:
    # pos 2: 2 is used next at pos 3, sooner than 1 (never again): admitted, 1 evicted
    keys = [0, 1, 2, 2, 0]
    cache = make_cache("belady-bypass", slots=2, demand=access_sequence([[k] for k in keys]))
    assert one_per_pass(cache, keys) == [COMP, COMP, COMP, HIT, HIT]
    assert cache.contents() == [0, 2]
    assert cache.stats.bypassed == 0 and cache.stats.evictions == 1


# --- static layers (Accelerate's device_map, llama.cpp's --n-cpu-moe) ----------------------------


def test_static_layers_keeps_whole_layers_and_streams_the_others_through_the_slots_left() -> None:
    # 3 layers x 4 experts (keys: layer 0 = 0..3, layer 1 = 4..7, layer 2 = 8..11), 6 slots;
    # first: 1 -> layer 0's 4 experts placed before the run, 2 slots left for the others
    cache = make_cache({"kind": "static-layers", "first": 1}, slots=6, layers=3)
    assert cache.contents() == [0, 1, 2, 3]
    cache.begin_pass(0)
    assert step(cache, 0, [0, 3]) == [HIT, HIT]  # resident: no fetch
    assert step(cache, 1, [4]) == [COMP]  # [4] in the 2 free slots
    assert step(cache, 2, [8]) == [COMP]  # [4, 8]: full
    cache.begin_pass(1)
    assert step(cache, 1, [5]) == [COMP]  # LRU among the others: 4 goes, never a resident
    assert step(cache, 0, [1, 2]) == [HIT, HIT]
    assert step(cache, 2, [8]) == [HIT]
    # 4 was evicted in this pass (by 5): a collision; 5, used before 8, goes
    assert step(cache, 1, [4]) == [COLL]
    assert cache.contents() == [0, 1, 2, 3, 4, 8] and cache.stats.evictions == 2


def test_static_layers_last_keeps_the_final_layers() -> None:
    # llama.cpp --n-cpu-moe 2 on 3 layers: the experts of layer 2 (8..11) on the GPU
    cache = make_cache({"kind": "static-layers", "last": 1}, slots=5, layers=3)
    assert cache.contents() == [8, 9, 10, 11]
    cache.begin_pass(0)
    assert step(cache, 2, [11]) == [HIT]
    assert step(cache, 0, [0]) == [COMP]
    assert step(cache, 1, [4]) == [COMP]  # one slot streams: 0 goes
    assert cache.contents() == [4, 8, 9, 10, 11]


@pytest.mark.parametrize(
    ("spec", "slots", "message"),
    [
        (
            {"first": 2, "last": 2},
            20,
            r"first \+ last must be at most the model's 3 MoE layers, got 2 \+ 2",
        ),
        (
            {"first": 1, "last": 1},
            8,
            r"resident layers' 8 experts need fewer than the cache's 8 slots",
        ),
    ],
)
def test_static_layers_refuses_what_cannot_be_placed(spec: dict, slots: int, message: str) -> None:
    with pytest.raises(SpecmdError, match=message):
        make_cache({"kind": "static-layers", **spec}, slots=slots, layers=3)


# --- through replay: static-hot and the miss handlers -------------------------------------------


@pytest.fixture
def recorded(monkeypatch: pytest.MonkeyPatch) -> list:
    """The caches replay builds, with the keys each one substituted."""
    caches: list = []

    class Recording(ExpertCache):
        def __init__(self, *args, **kw) -> None:
            super().__init__(*args, **kw)
            self.substituted: list[int] = []
            caches.append(self)

        def substitute(self, key: int) -> None:
            self.substituted.append(key)
            super().substitute(key)

    monkeypatch.setattr("specmd_sim.scenario.plugins.ExpertCache", Recording)
    return caches


def mixtral_trace(write_trace, rows: list[list[int]]):
    """A Mixtral-shaped trace (32 layers x 8 experts, k = 2): every layer routes token t to
    ``rows[t]``. One request, all decode: one pass per token."""
    ids = np.array([[row] * 32 for row in rows], np.int16)
    return write_trace(ids, "mixtral-8x7b", 8)


def counters(**nonzero: int) -> dict[str, int]:
    names = [
        "accesses",
        "hits",
        "late_hits",
        "misses",
        "misses_compulsory",
        "misses_capacity",
        "misses_collision",
        "prefetch_issued",
        "prefetch_completed",
        "prefetch_used",
        "prefetch_wasted",
        "prefetch_cancelled",
        "prefetch_dropped",
        "evictions",
        "evictions_kv",
        "evictions_prefetch",
        "bypassed",
        "overflowed",
        "activations_dropped",
        "activations_substituted",
        "activations_cpu",
        "hits_home",
        "bytes_demand",
        "bytes_prefetch",
        "bytes_written_back",
    ]
    return {name: nonzero.get(name, 0) for name in names}


def test_static_hot_preloads_the_most_popular_and_streams_the_rest(write_trace, recorded) -> None:
    # per layer: expert 0 in all 3 tokens, expert 1 in two, 2 in one. Popularity: the 32 keys
    # l*8 + 0 (3 uses each) are the top 32 = all the cache's slots (hot_fraction 1): preloaded,
    # no slot left, so every other expert is streamed for its single use and never cached.
    trace = mixtral_trace(write_trace, [[0, 1], [0, 2], [0, 1]])
    config = SimConfig(
        trace=str(trace),
        cache={"capacity": 32},
        eviction={"kind": "static-hot"},
        prefetch={"kind": "none"},
    )
    m = replay(config).metrics
    (cache,) = recorded
    eb = cache.expert_bytes
    # per layer 6 accesses: 3 hits (expert 0); misses 1, 2, 1 all compulsory: expert 1's second
    # use is again compulsory because streaming never made it resident
    assert m == {
        **counters(
            accesses=192,
            hits=96,
            misses=96,
            misses_compulsory=96,
            bypassed=96,
            bytes_demand=96 * eb,
        ),
        "hit_rate": 0.5,
    }
    assert cache.contents() == [layer * 8 for layer in range(32)]


def test_drop_skips_every_miss_and_moves_no_bytes(write_trace) -> None:
    # nothing is ever fetched, so every access misses and stays compulsory
    trace = mixtral_trace(write_trace, [[0, 1], [0, 2]])
    config = SimConfig(
        trace=str(trace),
        cache={"capacity": 16},
        eviction={"kind": "lru"},
        prefetch={"kind": "none"},
        miss={"kind": "drop"},
    )
    m = replay(config).metrics
    assert m == {
        **counters(accesses=128, misses=128, misses_compulsory=128, activations_dropped=128),
        "hit_rate": 0.0,
    }


def test_substitute_runs_a_resident_expert_of_the_same_layer(write_trace, recorded) -> None:
    # Every layer, one pass per token (no gates, no recorded predictions: the estimate is how
    # often each expert of the layer was selected so far, including this pass):
    #   pass 0 [0, 1]: nothing of the layer resident (0 is taken) -> both fetched
    #   pass 1 [0, 2]: 0 hit; 2 misses -> the only resident untaken expert, 1, runs instead
    #   pass 2 [3, 4]: 3 misses -> resident 0 (selected twice) beats 1 (once); 4 misses -> 1
    trace = mixtral_trace(write_trace, [[0, 1], [0, 2], [3, 4]])
    config = SimConfig(
        trace=str(trace),
        cache={"capacity": 64},
        eviction={"kind": "lru"},
        prefetch={"kind": "none"},
        miss={"kind": "substitute"},
    )
    m = replay(config).metrics
    (cache,) = recorded
    eb = cache.expert_bytes
    # per layer: 6 accesses, 1 hit, 5 compulsory misses, 2 fetches, 3 substitutions
    assert m == {
        **counters(
            accesses=192,
            hits=32,
            misses=160,
            misses_compulsory=160,
            activations_substituted=96,
            bytes_demand=64 * eb,
        ),
        "hit_rate": 32 / 192,
    }
    assert cache.substituted == [8 * layer + 1 for layer in range(32)] + [
        key for layer in range(32) for key in (8 * layer, 8 * layer + 1)
    ]
    assert cache.contents() == [8 * layer + e for layer in range(32) for e in (0, 1)]

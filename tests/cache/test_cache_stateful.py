"""Stateful property test: random operation sequences on the bare cache, every eviction policy.

A Hypothesis state machine drives :class:`ExpertCache` through the operations the engines use
(pass and layer starts, pins, router accesses, demand fetches with the admission check,
prefetches, completions, cancellations of unstarted prefetches, prefetch hints, predictor
scores, substitutions and drops) and keeps its own model of every key's state, of the pins and
of all counters. After every step the cache must agree with the model, which checks:

- ``used_bytes == (#non-absent keys - #staged keys) * expert_bytes <= capacity_bytes``;
- a reservation evicts only resident, unpinned keys (never pinned or LOADING ones), exactly the
  one the policy names (its quota victim, else ``choose_victim`` when the cache is full) and
  only when needed; a demand fetch the policy stages evicts nothing and is held, pinned by the
  cache, outside the capacity until ``settle``, which evicts exactly one resident, unpinned key
  per staged key it settles and releases that key's pin; ``choose_victim`` asked twice gives
  the same answer (no side effects); a reservation fails only when the policy refuses or
  nothing evictable is left;
- each access gets the class the model expects (compulsory iff never resident before,
  collision iff evicted earlier in the current pass, else capacity; hit / late hit by state),
  and the whole ``stats.totals()`` record equals the model's; at the end (after ``finish``)
  every issued prefetch is used, wasted or cancelled.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from support import context

from specmd_sim.cache import AccessClass, ExpertCache, FetchReason, State
from specmd_sim.policies import EVICTION
from specmd_sim.policies.context import AccessSequence

L, E, K, EB = 3, 4, 2, 10  # layers, experts per layer, top-k, bytes per expert
N = L * E
PASSES = 64  # more than any run can start (stateful_step_count below)
ABSENT, LOADING, RESIDENT = int(State.ABSENT), int(State.LOADING), int(State.RESIDENT)
HIT, LATE, COMP, CAP, COLL = (int(c) for c in AccessClass)
DEMAND, PREFETCH = FetchReason.DEMAND, FetchReason.PREFETCH
CLASS_NAMES = {
    HIT: "hits",
    LATE: "late_hits",
    COMP: "misses_compulsory",
    CAP: "misses_capacity",
    COLL: "misses_collision",
}
SETTINGS = settings(
    max_examples=50,
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def _demand_sets() -> AccessSequence:
    """A fixed random access sequence (K experts per pass and layer, gates descending): what
    offline policies (Belady, static-hot) read and HybriMoE takes its gates from."""
    rng = np.random.default_rng(11)
    sets: list[list[int]] = []
    gates: list[list[float]] = []
    for _ in range(PASSES):
        for layer in range(L):
            sets.append((layer * E + rng.choice(E, size=K, replace=False)).tolist())
            gates.append(sorted(rng.random(K).tolist(), reverse=True))
    return context.access_sequence(sets, L, gates)


DEMAND_SETS = _demand_sets()
REQUESTS = (np.arange(PASSES) // 3).tolist()  # 3 passes per request

# every registered kind with its defaults, plus the variants whose parameters change the rule
SPECS = [{"kind": kind} for kind in EVICTION.kinds()] + [
    {"kind": "least-stale", "order": "layer"},
    {"kind": "static-hot", "hot_fraction": 0.5},
    {"kind": "lfu-aging", "period_passes": 2},
    {"kind": "per-layer-lru", "slots_per_layer": 1},
]


def _spec_id(spec: dict) -> str:
    return "-".join(str(v) for v in spec.values())


class CacheMachine(RuleBasedStateMachine):
    spec: ClassVar[dict] = {}

    def __init__(self) -> None:
        super().__init__()
        self.cache: ExpertCache | None = None

    # --- setup ---------------------------------------------------------------------------

    @initialize(slots=st.integers(1, 6), slack=st.integers(0, EB - 1), seed=st.integers(0, 3))
    def build(self, slots: int, slack: int, seed: int) -> None:
        kind = self.spec["kind"]
        cache = context.cache(
            self.spec,
            slots,
            L,
            E,
            expert_bytes=EB,
            capacity_bytes=slots * EB + slack,
            demand=DEMAND_SETS,
            requests=REQUESTS,
            top_k=K,
            seed=seed,
        )
        preload = cache.policy.initial_contents()  # placed by context.cache
        self.cache = cache
        self.state = [ABSENT] * N
        self.pins = [0] * N
        self.ever = [False] * N
        self.evicted_pass = [-1] * N
        self.by_prefetch = [False] * N  # LOADING because of a prefetch
        self.unused = [False] * N  # prefetched and not yet accessed
        self.staged = [False] * N  # held (pinned by the cache) outside the capacity
        for key in preload:
            self.state[key] = RESIDENT
            self.ever[key] = True
        self.hot = set(preload) if kind == "static-hot" else set()
        self.expected = {name: 0 for name in cache.stats.totals()}
        self.pass_index = 0
        cache.begin_pass(0)

    # --- helpers -------------------------------------------------------------------------

    def _keys(self, *states: int) -> list[int]:
        return [k for k in range(N) if self.state[k] in states]

    def _count(self, name: str, n: int = 1) -> None:
        self.expected[name] += n

    def _access(self, key: int) -> int:
        s = self.state[key]
        if s == RESIDENT:
            want = HIT
        elif s == LOADING:
            want = LATE
        elif not self.ever[key]:
            want = COMP
        elif self.evicted_pass[key] == self.pass_index:
            want = COLL
        else:
            want = CAP
        if s != ABSENT and self.unused[key]:
            self.unused[key] = False
            self._count("prefetch_used")
        got = self.cache.access(key, key // E)
        assert got == want, f"access({key}): expected {AccessClass(want)!r}, got {got!r}"
        self._count(CLASS_NAMES[want])
        self._count("accesses")
        if want >= COMP:
            self._count("misses")
        return want

    def _demand_fetch(self, key: int) -> bool:
        """As the engines fetch a miss: streamed past the cache if the policy does not admit
        it, or if no wait could make room (an overflow: the free slots and those of unpinned
        keys still loading are none). True if space was reserved (the key is LOADING)."""
        if not self.cache.admits(key, DEMAND):
            self.cache.stream(key)
            self._count("bypassed")
            self._count("bytes_demand", EB)
            return False
        if self._reserve(key, DEMAND):
            return True
        c = self.cache
        held = sum(1 for k in range(N) if self.state[k] != ABSENT and not self.staged[k])
        landing = sum(1 for k in range(N) if self.state[k] == LOADING
                      and not self.pins[k] and not self.staged[k])  # fmt: skip
        overflows = c.capacity_bytes - (held - landing) * EB < EB
        assert c.overflows(key) == overflows
        if overflows:
            c.stream(key, overflow=True)
            self._count("overflowed")
            self._count("bytes_demand", EB)
        return False

    def _fetch(self, key: int) -> None:
        """A demand fetch that lands at once (replay)."""
        if self._demand_fetch(key):
            self._complete(key)

    def _complete(self, key: int) -> None:
        self.cache.complete(key)
        self.state[key] = RESIDENT
        self.ever[key] = True
        if self.by_prefetch[key]:
            self.by_prefetch[key] = False
            self._count("prefetch_completed")

    def _pin(self, key: int) -> None:
        self.cache.pin(key)
        self.pins[key] += 1

    def _unpin(self, key: int) -> None:
        self.cache.unpin(key)
        self.pins[key] -= 1

    def _reserve(self, key: int, reason: FetchReason) -> bool:
        """``cache.reserve`` checked against the policy's own answers; True if reserved."""
        c = self.cache
        policy = c.policy
        before = list(c.state)
        full = c.capacity_bytes - c.used_bytes < EB
        admitted = reason == DEMAND or policy.admit(key, reason)
        quota = policy.quota_victim(key, c.evictable) if admitted else None
        staged = admitted and quota is None and reason == DEMAND and policy.stages(key)
        victim = None
        if admitted and quota is None and full and not staged:
            victim = policy.choose_victim(c.evictable, key)
            again = policy.choose_victim(c.evictable, key)
            assert victim == again, "choose_victim must not change the policy's state"

        ok = c.reserve(key, reason)

        evicted = [k for k in range(N) if before[k] != ABSENT and c.state[k] == ABSENT]
        for k in evicted:
            assert self.state[k] == RESIDENT and not self.pins[k], f"evicted non-evictable {k}"
            assert not self.staged[k], f"evicted staged {k}"
        if not admitted:
            expected_evicted, expected_ok = [], False
        elif quota is not None:
            expected_evicted, expected_ok = [quota], True
        elif staged:
            expected_evicted, expected_ok = [], True
        elif full:
            expected_evicted = [] if victim is None else [victim]
            expected_ok = victim is not None
        else:
            expected_evicted, expected_ok = [], True
        assert (ok, evicted) == (expected_ok, expected_evicted)
        if not ok and admitted:  # a refusal needs every evictable key to be off limits
            offered = [
                k
                for k in range(N)
                if self.state[k] == RESIDENT
                and not (self.pins[k] or self.staged[k])
                and k not in self.hot
            ]
            assert offered == [], f"reserve({key}) failed although {offered} are evictable"

        self._evicted(evicted)
        if reason == PREFETCH:
            self._count("evictions_prefetch", len(evicted))
        if not ok:
            if reason == PREFETCH:
                self._count("prefetch_dropped")
            return False
        self.state[key] = LOADING
        self.staged[key] = staged
        self.by_prefetch[key] = reason == PREFETCH
        if reason == PREFETCH:
            self.unused[key] = True
            self._count("prefetch_issued")
            self._count("bytes_prefetch", EB)
        else:
            self._count("bytes_demand", EB)
        return True

    def _evicted(self, evicted: list[int]) -> None:
        for k in evicted:
            self.state[k] = ABSENT
            self.evicted_pass[k] = self.pass_index
            self._count("evictions")
            if self.unused[k]:
                self.unused[k] = False
                self._count("prefetch_wasted")

    # --- rules ---------------------------------------------------------------------------

    @precondition(lambda self: any(self.staged))
    @rule()
    def settle(self) -> None:
        """Each staged key still cached gets one eviction (its layer's quota victim), or stays
        staged when nothing is evictable."""
        c = self.cache
        before, waiting = list(c.state), [k for k in range(N) if self.staged[k]]
        c.settle()
        evicted = [k for k in range(N) if before[k] != ABSENT and c.state[k] == ABSENT]
        still = set(c.staged_keys)
        for k in evicted:  # (a staged key settled first may be a later one's victim)
            assert self.state[k] == RESIDENT and not self.pins[k], f"evicted non-evictable {k}"
            assert k not in still, f"evicted staged {k}"
        settled = [k for k in waiting if k not in still]
        assert len(evicted) == len(settled), (evicted, settled)
        self._evicted(evicted)
        for k in settled:
            self.staged[k] = False

    @precondition(lambda self: self.pass_index < PASSES - 1)
    @rule()
    def begin_pass(self) -> None:
        self.pass_index += 1
        self.cache.begin_pass(self.pass_index)

    @rule(layer=st.integers(0, L - 1))
    def begin_layer(self, layer: int) -> None:
        self.cache.begin_layer(layer)

    @rule(key=st.integers(0, N - 1))
    def pin(self, key: int) -> None:
        self._pin(key)

    @precondition(lambda self: any(self.pins))
    @rule(i=st.integers(0, N - 1))
    def unpin(self, i: int) -> None:
        pinned = [k for k in range(N) if self.pins[k]]
        self._unpin(pinned[i % len(pinned)])

    @rule(key=st.integers(0, N - 1))
    def access(self, key: int) -> None:
        self._access(key)

    @precondition(lambda self: ABSENT in self.state)
    @rule(i=st.integers(0, N - 1), land=st.booleans())
    def demand_fetch(self, i: int, land: bool) -> None:
        absent = self._keys(ABSENT)
        key = absent[i % len(absent)]
        if self._demand_fetch(key) and land:
            self._complete(key)

    @precondition(lambda self: ABSENT in self.state)
    @rule(i=st.integers(0, N - 1), land=st.booleans())
    def prefetch(self, i: int, land: bool) -> None:
        absent = self._keys(ABSENT)
        key = absent[i % len(absent)]
        if self._reserve(key, PREFETCH) and land:
            self._complete(key)

    @precondition(lambda self: LOADING in self.state)
    @rule(i=st.integers(0, N - 1))
    def complete(self, i: int) -> None:
        loading = self._keys(LOADING)
        self._complete(loading[i % len(loading)])

    @precondition(lambda self: any(self.state[k] == LOADING and self.unused[k] for k in range(N)))
    @rule(i=st.integers(0, N - 1), reuse=st.booleans())
    def cancel(self, i: int, reuse: bool) -> None:
        """Only an unstarted prefetch that no router has asked for yet is cancelled; with
        ``reuse`` a router then selects it (a cancelled prefetch is no eviction and makes
        nothing resident)."""
        cancellable = [k for k in range(N) if self.state[k] == LOADING and self.unused[k]]
        key = cancellable[i % len(cancellable)]
        self.cache.cancel(key)
        self.state[key] = ABSENT
        self.by_prefetch[key] = self.unused[key] = False
        self._count("prefetch_cancelled")
        self._count("bytes_prefetch", -EB)
        if reuse:
            self._access(key)

    @rule(key=st.integers(0, N - 1))
    def hint(self, key: int) -> None:
        self.cache.hint(key)

    @rule(
        layer=st.integers(0, L - 1),
        scores=st.lists(st.integers(0, 8), min_size=E, max_size=E),
    )
    def scores(self, layer: int, scores: list[int]) -> None:
        self.cache.policy.on_scores(layer, np.array(scores, np.float64) / 8)

    @precondition(lambda self: RESIDENT in self.state)
    @rule(i=st.integers(0, N - 1))
    def substitute(self, i: int) -> None:
        resident = self._keys(RESIDENT)
        self.cache.substitute(resident[i % len(resident)])
        self._count("activations_substituted")

    @rule()
    def drop(self) -> None:
        self.cache.drop()
        self._count("activations_dropped")

    @rule(
        layer=st.integers(0, L - 1),
        experts=st.integers(1, 2**E - 1),
        pinned=st.booleans(),
        prefetch=st.lists(st.integers(0, N - 1), max_size=3),
    )
    def run_layer(self, layer: int, experts: int, pinned: bool, prefetch: list[int]) -> None:
        """One layer as the replay engine runs it: router decision, pins (or not), accesses
        of the experts in the bit mask ``experts``, demand fetches that land at once, the
        prefetcher's list (hints or fetches that land), pins released. Makes evict-then-reuse
        sequences frequent."""
        self.cache.begin_layer(layer)
        keys = [layer * E + e for e in range(E) if experts >> e & 1]
        if pinned:
            for key in keys:
                self._pin(key)
            for key in [key for key in keys if self._access(key) >= COMP]:
                self._fetch(key)
        else:
            for key in keys:
                if self._access(key) >= COMP:
                    self._fetch(key)
        for key in prefetch:
            if self.state[key] != ABSENT:
                self.cache.hint(key)
            elif self._reserve(key, PREFETCH):
                self._complete(key)
        if pinned:
            for key in keys:
                self._unpin(key)
        if any(self.staged):
            self.settle()

    # --- invariants ----------------------------------------------------------------------

    @invariant()
    def cache_matches_model(self) -> None:
        c = self.cache
        if c is None:
            return
        held = sum(1 for s in c.state if s != ABSENT) - sum(self.staged)
        assert c.used_bytes == held * EB <= c.capacity_bytes
        assert sorted(c.staged_keys) == [k for k in range(N) if self.staged[k]]
        assert list(c.state) == self.state
        assert list(c.pins) == [n + s for n, s in zip(self.pins, self.staged, strict=True)]
        for key in self.hot:
            assert c.state[key] == RESIDENT, f"static-hot lost hot expert {key}"
        t = c.stats.totals()
        assert t["hits"] + t["late_hits"] + t["misses"] == t["accesses"]
        assert t["misses"] == t["misses_compulsory"] + t["misses_capacity"] + t["misses_collision"]
        assert t == self.expected

    def teardown(self) -> None:
        c = self.cache
        if c is None:
            return
        c.finish()
        self._count("prefetch_wasted", sum(self.unused))
        t = c.stats.totals()
        assert t == self.expected
        settled = t["prefetch_used"] + t["prefetch_wasted"] + t["prefetch_cancelled"]
        assert settled == t["prefetch_issued"]


@pytest.mark.parametrize("spec", SPECS, ids=_spec_id)
def test_cache_state_machine(spec: dict) -> None:
    machine = type(f"CacheMachine_{_spec_id(spec)}", (CacheMachine,), {"spec": spec})
    run_state_machine_as_test(machine, settings=SETTINGS)

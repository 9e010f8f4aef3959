"""The replay engine's compiled path equals its Python reference, counter for counter.

Every covered eviction policy (and order) meets every prefetcher — none, top-k, score-threshold,
over noisy-oracle and recorded predictions, several lookaheads — and each meets both pin modes;
every policy runs through every capacity regime (the smallest allowed, thrashing, about half,
everything fits) in both modes; on random traces with prefill
chunks and several requests, mixed precision, memory parity and a warm start: the whole result
(every metric, every per-layer row) must be equal. With numba installed the compiled kernel is
tested, without it the same kernel interpreted; runs it does not cover take the Python path.
"""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from specmd_sim import build_config, replay, save_trace
from specmd_sim.engine import jit
from specmd_sim.engine.fast import (
    compiled_unsupported,
    kernel_state,
    kernel_stats,
    kernels,
    replay_compiled,
)
from specmd_sim.engine.fast import layout as L
from specmd_sim.errors import SpecmdError
from specmd_sim.runtime.loader import runtime_dir
from specmd_sim.scenario import build_run, build_scenario
from specmd_sim.traces.synthetic import PRESETS, generate

EVICTIONS = [
    "fifo",
    "lru",
    {"kind": "lru", "prefetch_insert": "lru"},
    "lfu",
    {"kind": "least-stale", "order": "fifo"},
    {"kind": "least-stale", "order": "touch"},
    {"kind": "least-stale", "order": "layer"},
    "belady",
    "belady-bypass",
    {"kind": "lfu-aging", "period_passes": 2},  # (counts halved often: fractions decide ties)
]
PREFETCHES = [
    ("none", "noisy-oracle"),
    ({"kind": "top-k", "lookahead": 1}, "noisy-oracle"),
    ({"kind": "top-k", "k": 3, "lookahead": 3}, {"kind": "noisy-oracle", "accuracy": 0.5}),
    ({"kind": "top-k", "k": 12}, {"kind": "noisy-oracle", "accuracy": 0.3}),  # k > |demand set|
    ({"kind": "score-threshold", "threshold": 0.01, "lookahead": 2}, "noisy-oracle"),
    ({"kind": "top-k", "lookahead": 2}, "trace"),
    ({"kind": "score-threshold", "threshold": 0.05, "max_per_layer": 4}, "trace"),
]
CAPACITIES = ["smallest", "smallest+5", "50%", "100%"]


@pytest.fixture(scope="module")
def traces(tmp_path_factory) -> list[str]:
    """Synthetic OLMoE-shaped traces with recorded predictions: one decode-heavy, one with
    long prompts (several tokens per pass, chunked below)."""
    folder = tmp_path_factory.mktemp("fast")
    out = []
    for seed, (prompt, decode) in enumerate([(4, 14), (16, 5)]):
        update = {"num_requests": 3, "prompt_tokens": prompt, "decode_tokens": decode,
                  "lookahead": 3}  # fmt: skip
        params = PRESETS["olmoe"].model_copy(update=update)
        out.append(str(save_trace(generate(params, seed), folder / f"t{seed}.npz")))
    return out


def smallest(data: dict) -> int:
    """The smallest capacity (slots) the config allows: its largest demand set."""
    scenario = build_scenario(build_config({**data, "cache": {}}), check_cache=False)
    return scenario.demand.max_layer_demand()[0]


def both(data: dict) -> tuple[dict, dict]:
    """(Python, compiled) results of one config: metrics and per-layer table."""
    capacity = data["cache"].get("capacity")
    if isinstance(capacity, str) and capacity.startswith("smallest"):
        extra = int(capacity.removeprefix("smallest") or 0)  # (smallest-6: a demand set overflows)
        data = {**data, "cache": {**data["cache"], "capacity": smallest(data) + extra}}
    config = build_config(data)
    ref, fast = replay(config, compiled=False), replay(config, compiled=True)
    return ({"m": ref.metrics, "l": ref.per_layer}, {"m": fast.metrics, "l": fast.per_layer})


def case(i: int) -> tuple:
    """The i-th point of the grid: every eviction meets every prefetch once, the pin mode
    alternating with the parity of their indices (so each meets both modes), the capacity
    regime, trace and batch varying by index."""
    e, pf = i % len(EVICTIONS), i // len(EVICTIONS)
    capacity = CAPACITIES[(i // 3) % len(CAPACITIES)]
    return EVICTIONS[e], *PREFETCHES[pf], capacity, (e + pf) % 2 == 0


GRID = len(EVICTIONS) * len(PREFETCHES)
# without numba the kernels run interpreted, about a hundred times slower: a third of the grid
# and of the policies' regimes then (CI installs numba and runs all of them)
THOROUGH = jit.available()


@pytest.mark.parametrize("i", range(0, GRID, 1 if THOROUGH else 3))
def test_compiled_equals_python(traces, i) -> None:
    eviction, prefetch, predictor, capacity, pinned = case(i)
    data = {
        "trace": traces[i % 2],
        "eviction": eviction,
        "prefetch": prefetch,
        "predictor": predictor,
        "cache": {"capacity": capacity, "pin_demand_set": pinned},
        "workload": {"batch_size": 1 + i % 3, "prefill_chunk_tokens": 4},
        "seed": i,
        "belady_gap": i % 5 == 0,
    }
    ref, fast = both(data)
    assert fast == ref
    m = ref["m"]
    assert m["accesses"] > 0 and m["hits"] + m["misses"] == m["accesses"]


@pytest.mark.parametrize("eviction", EVICTIONS if THOROUGH else EVICTIONS[::3], ids=str)
def test_every_capacity_regime(traces, eviction) -> None:
    seen_evictions = seen_hits = seen_overflows = False
    capacities = ["smallest-6", "smallest", "smallest+1", "smallest+6", 64, "60%", "100%"]
    for i, capacity in enumerate(capacities):
        for pinned in (i % 2 == 0, i % 3 == 0):
            data = {"trace": traces[0], "eviction": eviction, "prefetch": "top-k",
                    "cache": {"capacity": capacity, "pin_demand_set": pinned}}  # fmt: skip
            ref, fast = both(data)
            assert fast == ref, (capacity, pinned)
            seen_evictions |= ref["m"]["evictions"] > 0
            seen_hits |= ref["m"]["hits"] > 0
            seen_overflows |= ref["m"]["overflowed"] > 0
    # (static-hot and belady-bypass stream what they would not keep, and per-layer-lru stages:
    # none of them overflows)
    assert seen_evictions and seen_hits
    assert seen_overflows or eviction in ("static-hot", "per-layer-lru", "belady-bypass")


def test_mixed_precision_memory_parity_and_warm_start(tmp_path, traces) -> None:
    data = yaml.safe_load((runtime_dir() / "roofline.yaml").read_text())
    data["memory_parity"]["value"] = True
    runtime = tmp_path / "parity.yaml"
    runtime.write_text(yaml.safe_dump(data))
    for eviction in EVICTIONS:
        config = {"trace": traces[1], "eviction": eviction, "prefetch": "top-k",
                  "runtime": str(runtime), "cache": {"capacity": "30%"},
                  "precision": {"cold_dtype": "int4", "hot_fraction": 0.3}}  # fmt: skip
        ref, fast = both(config)
        assert fast == ref, eviction
        assert ref["m"]["bytes_written_back"] > 0
    # a warm start (what belady_gap gives the optimum of static-hot)
    scenario = build_scenario(build_config({"trace": traces[0], "eviction": "belady",
                                            "cache": {"capacity": 24}}))  # fmt: skip
    warm = list(range(0, 64 * 16, 50))
    ref = replay(scenario, warm=warm, compiled=False)
    fast = replay(scenario, warm=warm, compiled=True)
    assert fast.metrics == ref.metrics and fast.per_layer == ref.per_layer


def test_uncovered_runs_take_the_python_path(traces) -> None:
    for data, why in [
        ({"eviction": "random"}, "eviction 'random' has no compiled form"),
        ({"miss": "drop"}, "miss 'drop'"),
        ({"prefetch": "oracle"}, "prefetch 'oracle'"),
    ]:
        scenario = build_scenario(build_config({"trace": traces[0], **data}))
        assert compiled_unsupported(build_run(scenario)) == why
        with pytest.raises(SpecmdError, match="compiled path does not cover this run: " + why):
            replay(scenario, compiled=True)
        replay(scenario)  # the default falls back


def test_a_subclass_of_a_built_in_is_not_taken_for_it(traces) -> None:
    from specmd_sim.policies.eviction.lru import LRUEviction

    class Mine(LRUEviction):
        def on_access(self, key: int) -> None:  # changes nothing, but might
            super().on_access(key)

    scenario = build_scenario(build_config({"trace": traces[0], "eviction": "lru"}))
    run = build_run(scenario)
    run.eviction.__class__ = Mine
    assert compiled_unsupported(run) == (
        "eviction 'lru' (Mine, a subclass) declares no compiled form of its own"
    )


@pytest.mark.parametrize("module", ["jit", "ahead of time"])
def test_next_uses(request, module) -> None:
    K = kernels(False) if module == "jit" else request.getfixturevalue("compiled_ahead")
    keys = np.random.default_rng(3).integers(0, 30, 500).astype(np.int32)
    after, first = K.next_uses(keys, 40)
    never = keys.size
    for i, key in enumerate(keys.tolist()):  # the definition, by a scan
        later = np.flatnonzero(keys[i + 1 :] == key)
        assert after[i] == (i + 1 + later[0] if later.size else never)
    for key in range(40):
        where = np.flatnonzero(keys == key)
        assert first[key] == (where[0] if where.size else never)


def test_the_default_replay_is_compiled_when_numba_is_installed(traces, monkeypatch) -> None:
    pytest.importorskip("numba")
    from specmd_sim.engine.fast import kernel

    assert hasattr(kernel.run_passes, "py_func"), "numba is installed but the kernel is not"
    called = []
    monkeypatch.setattr("specmd_sim.engine.replay.replay_compiled",
                        lambda *a: called.append(a) or pytest.fail("stop"))  # fmt: skip
    with pytest.raises(pytest.fail.Exception):
        replay(build_config({"trace": traces[0]}))
    assert called and jit.available()


def counters(scenario, ahead_of_time: bool) -> dict:
    """The compiled replay's counters of a scenario, with the kernels compiled ahead of time or
    numba's JIT of them."""
    return vars(replay_compiled(build_run(scenario), ahead_of_time=ahead_of_time))


@pytest.mark.parametrize("eviction", EVICTIONS, ids=str)
def test_ahead_of_time_equals_the_jit(compiled_ahead, traces, eviction) -> None:
    assert kernels().__name__ == compiled_ahead.__name__  # what replays use
    seen_evictions = seen_hits = False
    for i, (prefetch, predictor) in enumerate(PREFETCHES):
        for capacity in ("smallest", "40%", "100%"):
            data = {
                "trace": traces[i % 2],
                "eviction": eviction,
                "prefetch": prefetch,
                "predictor": predictor,
                "cache": {"pin_demand_set": i % 2 == 0},
                "workload": {"batch_size": 1 + i % 3, "prefill_chunk_tokens": 4},
                "seed": i,
            }
            data["cache"]["capacity"] = smallest(data) if capacity == "smallest" else capacity
            scenario = build_scenario(build_config(data))
            ahead, jit_counts = counters(scenario, True), counters(scenario, False)
            assert ahead == jit_counts, (prefetch, capacity)
            seen_evictions |= ahead["evictions"] > 0
            seen_hits |= sum(row[0] for row in ahead["by_layer"]) > 0
    assert seen_evictions and seen_hits


CLASSIC = ["fifo", "lru", {"kind": "lru", "prefetch_insert": "lru"}]


@pytest.mark.parametrize("module", ["jit", "ahead of time"])
def test_the_classic_loop_equals_the_layer_steps(request, module, tmp_path, traces) -> None:
    """``run_classic`` (fifo and lru one key at a time, no prefetch) leaves the kernel's state
    as ``run_passes`` does, in every capacity regime, with mixed precision, write-backs, warm
    starts and batches: counters, per-layer counts, every key's state and the queue's order."""
    K = kernels(False) if module == "jit" else request.getfixturevalue("compiled_ahead")
    data = yaml.safe_load((runtime_dir() / "roofline.yaml").read_text())
    data["memory_parity"]["value"] = True  # evictions are written back
    parity = tmp_path / "parity.yaml"
    parity.write_text(yaml.safe_dump(data))
    rows = [
        L.K_STATE,
        L.K_EVER,
        L.K_EVICTED,
        L.K_PREV,
        L.K_NEXT,
        L.R_STATS,
        *range(L.R_BY_LAYER, L.R_BY_LAYER + 5),
    ]
    seen = set()
    for i, (eviction, capacity) in enumerate(
        (e, c) for e in CLASSIC for c in ("smallest", "smallest+3", "30%", "100%")
    ):
        config = {"trace": traces[i % 2], "eviction": eviction, "prefetch": "none",
                  "cache": {"capacity": capacity, "pin_demand_set": False},
                  "workload": {"batch_size": 1 + i % 3, "prefill_chunk_tokens": 4}}  # fmt: skip
        if i % 2:
            config |= {"runtime": str(parity),
                       "precision": {"cold_dtype": "int4", "hot_fraction": 0.3}}  # fmt: skip
        if capacity.startswith("smallest"):
            extra = int(capacity.partition("+")[2] or 0)
            config["cache"]["capacity"] = smallest(config) + extra
        run = build_run(build_scenario(build_config(config)))
        keys = np.ascontiguousarray(run.scenario.demand.keys, np.int32)
        offsets = np.ascontiguousarray(run.scenario.demand.offsets, np.int64)
        warm = list(range(3, keys.max(), 97))[: 2 + i % 3]  # what fits the smallest cache
        passes, layers = run.scenario.passes.num_passes, run.scenario.trace.num_layers
        (a, after), (b, _) = (kernel_state(run, warm, K) for _ in range(2))
        for lo, hi in ((0, passes // 3), (passes // 3, passes)):  # in two blocks, as replays
            plan = np.zeros((hi - lo) * layers + 1, np.int64)
            at = offsets[lo * layers : hi * layers + 1]  # (the block's, from its first access)
            block = keys[at[0] : at[-1]]
            at = at - at[0]
            assert K.run_passes(a, after, block, at, lo, hi, plan, plan[:0]) == L.OK
            assert K.run_classic(b, block, at, lo, hi) == L.OK
        assert np.array_equal(a[rows], b[rows]), config
        assert a[L.R_SC, L.SC_USED] == b[L.R_SC, L.SC_USED]
        stats = kernel_stats(b, layers)
        seen |= {"evictions"} if stats.evictions else set()
        seen |= {"written back"} if stats.bytes_written_back else set()
        seen |= {"collisions"} if sum(r[4] for r in stats.by_layer) else set()
    assert seen == {"evictions", "written back", "collisions"}


def test_a_classic_replay_takes_the_classic_loop(traces, monkeypatch) -> None:
    """An unpinned fifo or lru replay without prefetches runs ``run_classic`` (and equals the
    Python engine); anything else runs the layer steps."""
    K = kernels(False)
    calls = []
    module = type(K)("counting")
    for name in ("preload", "next_uses", "run_passes", "run_classic"):
        real = getattr(K, name)
        setattr(module, name, lambda *a, _n=name, _f=real: calls.append(_n) or _f(*a))
    monkeypatch.setattr("specmd_sim.engine.fast.kernels", lambda ahead_of_time=True: module)
    for eviction in CLASSIC:
        for pinned, prefetch, loop in ((False, "none", "run_classic"), (True, "none", "run_passes"),
                                       (False, "top-k", "run_passes")):  # fmt: skip
            calls.clear()
            data = {"trace": traces[0], "eviction": eviction, "prefetch": prefetch,
                    "cache": {"capacity": "40%", "pin_demand_set": pinned}}  # fmt: skip
            ref, fast = both(data)
            assert fast == ref
            assert set(calls) - {"preload"} == {loop}, (eviction, pinned, prefetch)


@pytest.mark.parametrize("eviction", ["lru", "least-stale", "belady"])
def test_a_replay_of_one_token_passes_reads_the_keys_a_block_at_a_time(
    traces, monkeypatch, eviction
) -> None:
    """Where every pass has one token the compiled replay builds each block's keys alone (the
    access sequence's keys are never held whole), except for Belady, which reads all the next
    uses first; the counters equal the Python engine's either way."""
    monkeypatch.setattr("specmd_sim.engine.fast._BLOCK_ACCESSES", 100)  # many blocks
    data = {"trace": traces[1], "eviction": eviction, "prefetch": "none",
            "cache": {"capacity": "30%", "pin_demand_set": eviction != "lru"},
            "workload": {"prefill_chunk_tokens": 1}}  # fmt: skip
    scenario = build_scenario(build_config(data))
    fast = replay(scenario, compiled=True)
    assert ("keys" in vars(scenario.demand)) == (eviction == "belady")
    ref = replay(scenario, compiled=False)
    assert fast.metrics == ref.metrics and fast.per_layer == ref.per_layer

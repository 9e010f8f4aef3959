"""Miss-ratio curves in one pass: the stack method equals one replay per capacity, counter for
counter (random traces, every capacity regime, uniform and mixed expert sizes, passes long
enough that the kernel renumbers its positions), and the published LRU column of the shared
reference table; the compiled kernel equals the interpreted one. The optimum's bound: its one
pass equals MIN simulated directly, libCacheSim's Belady and the belady policy replayed."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from support.cli import cli
from support.lcs import miss_count
from support.pages import unpacked
from support.traces import random_trace_ids

from specmd_sim import build_config, make_trace, replay, save_trace
from specmd_sim.engine import mrc
from specmd_sim.engine.mrc import curve_counts, miss_ratio_curve, stack_method_applies
from specmd_sim.errors import SpecmdError

CLASSIC = {"eviction": "lru", "prefetch": "none", "cache": {"pin_demand_set": False}}
COUNTS = ("hits", "misses_compulsory", "misses_collision", "misses_capacity")
SHARED = Path(__file__).resolve().parents[2].parent / "shared" / "traces" / "mixtral8x7b_decode.npz"


def trace_file(tmp_path: Path, seed: int, tokens: int, requests: int = 1, name: str = "t"):
    rng = np.random.default_rng(seed)
    experts = random_trace_ids(rng, tokens, 16, 64, 8)
    request = np.repeat(np.arange(requests), -(-tokens // requests))[:tokens]
    trace = make_trace(experts, model="olmoe-1b-7b", num_experts=64, request=request)
    return str(save_trace(trace, tmp_path / f"{name}.npz"))


def replayed(config, capacity) -> dict[str, int]:
    data = config.model_dump(mode="json")
    data["cache"]["capacity"] = capacity
    return replay(build_config(data)).metrics


@pytest.mark.parametrize(
    ("seed", "tokens", "requests", "extra"),
    [(1, 60, 1, {}), (2, 90, 3, {"workload": {"prefill_chunk_tokens": 8}}),
     (3, 50, 2, {"precision": {"cold_dtype": "int4", "hot_fraction": 0.3}})],
    ids=["decode", "requests-chunked-prefill", "mixed-precision"],
)  # fmt: skip
def test_one_pass_equals_a_replay_per_capacity(tmp_path, seed, tokens, requests, extra) -> None:
    config = build_config({**CLASSIC, **extra, "trace": trace_file(tmp_path, seed, tokens,
                                                                  requests)})  # fmt: skip
    assert stack_method_applies(config) is None
    capacities = [8, 9, 16, 33, 64, 128, 300, 700, 1024, "50%", "1.5GiB"]
    curve = miss_ratio_curve(config, capacities)
    assert curve.method == "stack"
    assert np.all(np.diff(curve.hits[:9]) >= 0)  # LRU's inclusion property
    for i, capacity in enumerate(capacities):
        want = replayed(config, capacity)
        got = {name: int(getattr(curve, name)[i]) for name in COUNTS}
        assert got == {name: want[name] for name in COUNTS}, capacity
        assert curve.accesses == want["accesses"]
        assert int(curve.bytes_missed[i]) == want["bytes_demand"], capacity
    assert curve.misses_collision[0] > 0 and curve.hits[-3] > 0  # both regimes were reached


def test_the_reference_table_lru_column(tmp_path) -> None:
    """../shared/traces/README.md: LRU misses of humaneval_p0_ids at 16..192 slots."""
    if not SHARED.is_file():
        pytest.skip(f"reference traces absent ({SHARED})")
    with np.load(SHARED, allow_pickle=False) as data:
        ids = data["humaneval_p0_ids"]
    path = save_trace(make_trace(ids, model="mixtral-8x7b", num_experts=8), tmp_path / "h.npz")
    config = build_config({**CLASSIC, "trace": str(path), "model": "mixtral-8x7b"})
    curve = miss_ratio_curve(config, [16, 32, 64, 128, 192])
    misses = curve.accesses - curve.hits
    assert curve.accesses == 5312
    assert misses.tolist() == [5312, 5312, 3703, 2475, 1073]


def _random_accesses(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Keys, pass starts, sizes (mixed) and capacities of a random run of 5,000 accesses."""
    rng = np.random.default_rng(seed)
    keys = rng.integers(0, 40, 5000).astype(np.int64)
    starts = np.concatenate([[0], np.sort(rng.choice(np.arange(1, 5000), 120, replace=False)),
                             [5000]]).astype(np.int64)  # fmt: skip
    nbytes = rng.integers(1, 9, 40).astype(np.int64) * 6
    bounds = np.array([6, 30, 100, 240, 540, 1200, 2400], np.int64)
    return keys, starts, nbytes, bounds


def _by_definition(keys, starts, nbytes, bounds) -> tuple[np.ndarray, ...]:
    """:func:`curve_counts` from its definition, by a recency list walked per access: the byte
    stack distance (the key's bytes and those of the distinct keys used since its last use) and
    the key's byte depth when its pass started (0 if used earlier in the pass), each counted at
    the first capacity it fits (one past the largest if none)."""
    hits, resident, hit_bytes = (np.zeros(bounds.size + 1, np.int64) for _ in range(3))
    first, stack = 0, []  # most recent first

    def depth(key: int) -> int:
        return int(sum(nbytes[k] for k in stack[: stack.index(key) + 1]))

    for p in range(starts.size - 1):
        at_start = {int(k): depth(k) for k in set(keys[starts[p] : starts[p + 1]]) if k in stack}
        used: set[int] = set()
        for key in map(int, keys[starts[p] : starts[p + 1]]):
            if key in stack:
                j = int(np.searchsorted(bounds, depth(key)))  # first bound >= the distance
                hits[j] += 1
                hit_bytes[j] += nbytes[key]
                resident[np.searchsorted(bounds, 0 if key in used else at_start[key])] += 1
                stack.remove(key)
            else:
                first += 1
            stack.insert(0, key)
            used.add(key)
    return hits, resident, hit_bytes, first, int(nbytes[keys].sum())


@pytest.mark.parametrize("sizes", ["mixed", "one-size"])
@pytest.mark.parametrize("table_limit", [mrc._TABLE_LIMIT, 0], ids=["table", "binary-search"])
def test_the_kernels_count_by_the_definition(monkeypatch, sizes, table_limit) -> None:
    """Both kernels (distances in a Fenwick tree, with a distance table or a binary search;
    boundaries in a recency list, where every key has one size), compiled or not, give the
    counts of the definition, capacities under one key, equal and past every key included."""
    keys, starts, nbytes, _ = _random_accesses(7)
    keys, starts = keys[:1500], starts[starts <= 1500]
    starts = np.append(starts, 1500) if starts[-1] != 1500 else starts
    if sizes == "one-size":
        nbytes = np.full(nbytes.size, 6, np.int64)
    bounds = np.array([0, 5, 6, 30, 30, 100, 138, 180], np.int64)
    monkeypatch.setattr(mrc, "_TABLE_LIMIT", table_limit)
    by_slots = []
    slots_kernel = mrc._count_piece_slots
    monkeypatch.setattr(
        mrc, "_count_piece_slots", lambda *a: by_slots.append(1) or slots_kernel(*a)
    )
    want = _by_definition(keys, starts, nbytes, bounds)
    for bound_set in (bounds, bounds[2:]):  # with capacities under one key, and without
        expect = want if bound_set is bounds else _by_definition(keys, starts, nbytes, bound_set)
        got = curve_counts(keys, starts, nbytes, bound_set, workers=1)
        for a, b in zip(got, expect, strict=True):
            assert np.array_equal(a, b), bound_set
    assert len(by_slots) == (sizes == "one-size")  # bounds[2:] with one size: by boundaries
    assert want[0][1:-1].sum() > 0 and want[0][-1] > 0 and want[1][0] > 0  # every regime


def test_the_compiled_kernels_equal_the_interpreted_ones() -> None:
    pytest.importorskip("numba")
    assert hasattr(mrc._count_piece, "py_func"), "numba is installed but not compiling"
    keys, starts, nbytes, bounds = _random_accesses(7)
    unit = int(np.gcd.reduce(nbytes))
    weight, units = nbytes // unit, bounds // unit
    before = np.full(nbytes.size, -1, np.int64)
    for table in (mrc._bucket_table(units, int(weight.sum())), np.zeros(0, np.int64)):
        args = (keys, starts, nbytes, weight, units, table, before)
        compiled, interpreted = mrc._count_piece(*args), mrc._count_piece.py_func(*args)
        for a, b in zip(compiled, interpreted, strict=True):
            assert np.array_equal(a, b)
        assert compiled[0].sum() + compiled[3] == keys.size  # every access counted once
        assert compiled[4] == nbytes[keys].sum()
    ones = np.ones(nbytes.size, np.int64)
    args = (keys, starts, ones, np.arange(1, 30, 3), before)
    compiled, interpreted = mrc._count_piece_slots(*args), mrc._count_piece_slots.py_func(*args)
    for a, b in zip(compiled, interpreted, strict=True):
        assert np.array_equal(a, b)


@pytest.mark.parametrize("sizes", ["mixed", "one-size"])
@pytest.mark.parametrize("table_limit", [mrc._TABLE_LIMIT, 0], ids=["table", "binary-search"])
def test_pieces_counted_apart_add_up_to_the_whole(monkeypatch, sizes, table_limit) -> None:
    """Cut into pieces (each from the recency order the accesses before it leave), on threads,
    the counts are those of one pass, with a distance table or without, and by the
    capacities' boundaries (one size)."""
    keys, starts, nbytes, bounds = _random_accesses(11)
    if sizes == "one-size":
        nbytes = np.full(nbytes.size, 6, np.int64)
    monkeypatch.setattr(mrc, "_TABLE_LIMIT", table_limit)
    whole = curve_counts(keys, starts, nbytes, bounds, workers=1)
    monkeypatch.setattr(mrc, "_PIECE_ACCESSES", 300)
    monkeypatch.setattr(mrc, "available", lambda: True)  # pieces also where nothing compiles
    for workers in (2, 3, 7):
        pieces = curve_counts(keys, starts, nbytes, bounds, workers=workers)
        for a, b in zip(whole, pieces, strict=True):
            assert np.array_equal(a, b), workers
    assert whole[0][0] > 0 and whole[0][1:].sum() > 0  # hits at the least, misses there


def test_other_configs_replay_each_capacity_and_the_optimum_bounds_them(tmp_path) -> None:
    trace = trace_file(tmp_path, 4, 40)
    for extra in ({"eviction": "fifo"}, {"eviction": "lru"}, {"prefetch": "top-k"}):
        config = build_config({**CLASSIC, **extra, "trace": trace})
        if extra.get("eviction") == "lru":  # pinned demand sets are not a stack algorithm
            config = build_config({**CLASSIC, "cache": {}, "trace": trace})
        assert stack_method_applies(config) is not None
        curve = miss_ratio_curve(config, [16, 128], belady=True)
        assert curve.method == "replay"
        for i, capacity in enumerate((16, 128)):
            assert int(curve.hits[i]) == replayed(config, capacity)["hits"]
        assert curve.belady_hits is not None and np.all(curve.belady_hits >= curve.hits)


def _min_hits(keys: list[int], capacity: int) -> int:
    """MIN simulated directly: on a miss with the cache full, drop the key used farthest
    ahead (never again: the smallest key), then insert."""
    hits, cache = 0, set()
    for i, key in enumerate(keys):
        if key in cache:
            hits += 1
            continue
        if len(cache) >= capacity:
            ahead = {k: keys.index(k, i + 1) if k in keys[i + 1 :] else len(keys) for k in cache}
            cache.remove(max(cache, key=lambda k: (ahead[k], -k)))
        cache.add(key)
    return hits


def test_the_optimums_one_pass_equals_min_simulated_directly() -> None:
    rng = np.random.default_rng(5)
    opt = mrc.opt_depths.py_func if hasattr(mrc.opt_depths, "py_func") else mrc.opt_depths
    for _ in range(60):
        n = int(rng.integers(2, 14))
        keys = rng.integers(0, n, int(rng.integers(1, 120))).astype(np.int64)
        deepest = int(rng.integers(1, n + 2))  # below, at and past the number of keys
        at_most = np.cumsum(opt(keys, mrc.next_uses(keys, n), n, deepest))
        for capacity in range(1, deepest + 1):
            assert at_most[capacity] == _min_hits(keys.tolist(), capacity), (keys, capacity)
    if hasattr(mrc.opt_depths, "py_func"):  # the compiled kernel equals the interpreted one
        keys = rng.integers(0, 50, 3000).astype(np.int64)
        nxt = mrc.next_uses(keys, 50)
        assert np.array_equal(mrc.opt_depths(keys, nxt, 50, 40), opt(keys, nxt, 50, 40))


def test_the_optimums_one_pass_equals_libcachesim_belady() -> None:
    """An independent MIN: libCacheSim's Belady (its misses do not depend on how ties among
    keys never used again are broken)."""
    pytest.importorskip("libcachesim")
    rng = np.random.default_rng(8)
    for _ in range(4):
        keys = (rng.zipf(1.3, 4000) % 200).astype(np.int64)
        at_most = np.cumsum(mrc.opt_depths(keys, mrc.next_uses(keys, 200), 200, 150))
        for slots in (1, 7, 40, 150):
            assert keys.size - at_most[slots] == miss_count(keys, slots, "belady"), slots


@pytest.mark.parametrize(
    ("extra", "method"),
    [({}, "one pass"), ({"workload": {"prefill_chunk_tokens": 8}}, "one pass"),
     ({"precision": {"cold_dtype": "int4", "hot_fraction": 0.3}}, "replayed")],
    ids=["decode", "chunked-prefill", "mixed-sizes"],
)  # fmt: skip
def test_the_optimum_equals_belady_replayed(tmp_path, monkeypatch, extra, method) -> None:
    """The bound of the curve: in one pass where MIN is a stack algorithm (one expert size),
    else the belady policy replayed; either way the policy's hits at each capacity."""
    config = build_config({**CLASSIC, **extra, "trace": trace_file(tmp_path, 9, 60, 2)})
    replays: list[int] = []
    real = mrc.replay
    monkeypatch.setattr(mrc, "replay", lambda s: replays.append(1) or real(s))
    capacities = [8, 9, 20, 64, 200, 1024]
    curve = miss_ratio_curve(config, capacities, belady=True)
    assert curve.belady_hits is not None
    assert (not replays) == (method == "one pass")
    for i, capacity in enumerate(capacities):
        data = config.model_dump(mode="json")
        data["eviction"] = "belady"
        assert int(curve.belady_hits[i]) == replayed(build_config(data), capacity)["hits"]
    assert np.all(curve.belady_hits >= curve.hits)


def test_capacities_are_checked_before_any_work(tmp_path) -> None:
    config = build_config({**CLASSIC, "trace": trace_file(tmp_path, 5, 10)})
    with pytest.raises(SpecmdError, match=r"capacity: expected .auto. or at least 1 expert slot"):
        miss_ratio_curve(config, [64, 0])
    with pytest.raises(SpecmdError, match="capacities: expected at least one"):
        miss_ratio_curve(config, [])


def test_the_command(tmp_path, monkeypatch, capsys) -> None:
    trace = trace_file(tmp_path, 6, 20)
    args = ["mrc", "--trace", trace, "--eviction", "lru", "--prefetch", "none",
            "--set", "cache.pin_demand_set=false", "--capacities", "16, 64,10%"]  # fmt: skip
    page = tmp_path / "mrc.html"
    code, out, err = cli(monkeypatch, capsys, *args, "--json", "--belady", "--out", str(page))
    assert code == 0, err
    shown = json.loads(out)
    assert shown["method"] == "stack" and [r["capacity"] for r in shown["rows"]] == [16, 64, "10%"]
    assert all(r["belady_hit_rate"] >= r["hit_rate"] for r in shown["rows"])
    assert "offline optimum (belady)" in unpacked(page)
    code, out, err = cli(monkeypatch, capsys, *args)
    assert code == 0 and "exact, one pass" in out
    code, out, err = cli(monkeypatch, capsys, "mrc", "--trace", trace, "--out", str(tmp_path))
    assert (code, out) == (2, "") and err.startswith("error: --out: expected a file")
    code, _, err = cli(monkeypatch, capsys, "mrc", "--trace", trace, "--capacities", "16,,32")
    assert (code, err) == (2, "error: --capacities: expected comma-separated capacities, got an "
                              "empty one\n")  # fmt: skip

"""Differential test: the replay engine's LRU, FIFO and Belady against libCacheSim.

With ``cache.pin_demand_set: false`` and no prefetching, the replay engine is a classic cache
simulator over the flattened access sequence (token-major, layers ascending, experts in stored
order, flat id ``layer * num_experts + expert``), so its miss counts must equal libCacheSim's
exactly, expert slots being objects of size 1.

(a) the reference table of ``../shared/traces/README.md`` (Mixtral ``humaneval_p0_ids``; skipped
    when the shared folder is absent);
(b) libCacheSim run here on seeded random traces (skipped without ``libcachesim``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from support.lcs import POLICIES, flat_ids, miss_counts

from specmd_sim import SimConfig, make_trace, replay, save_trace

SHARED_TRACE = (
    Path(__file__).resolve().parents[2].parent / "shared" / "traces" / ("mixtral8x7b_decode.npz")
)

# ../shared/traces/README.md, "Reference figures": slots -> misses (LRU, FIFO, Belady) on
# humaneval_p0_ids flattened (5,312 accesses, 256 distinct experts).
REFERENCE = {
    16: {"lru": 5312, "fifo": 5312, "belady": 4164},
    32: {"lru": 5312, "fifo": 5312, "belady": 3279},
    64: {"lru": 3703, "fifo": 3920, "belady": 2189},
    128: {"lru": 2475, "fifo": 2640, "belady": 1052},
    192: {"lru": 1073, "fifo": 1247, "belady": 486},
}
REFERENCE_ACCESSES = 5312


def replay_counts(path: Path, model: str, slots: int, policy: str) -> dict[str, int]:
    config = SimConfig(
        trace=str(path),
        model=model,
        cache={"capacity": slots, "pin_demand_set": False},
        eviction={"kind": policy},
        prefetch={"kind": "none"},
        workload={"prefill_chunk_tokens": 1},  # every token's selections, as libCacheSim sees them
    )
    return replay(config).metrics


# --- (a) the reference table --------------------------------------------------------------


@pytest.fixture(scope="module")
def humaneval_ids() -> np.ndarray:
    if not SHARED_TRACE.is_file():
        pytest.skip(f"reference traces absent ({SHARED_TRACE})")
    with np.load(SHARED_TRACE, allow_pickle=False) as data:
        return data["humaneval_p0_ids"]


@pytest.fixture(scope="module")
def humaneval_trace(humaneval_ids: np.ndarray, tmp_path_factory: pytest.TempPathFactory) -> Path:
    trace = make_trace(humaneval_ids, model="mixtral-8x7b", num_experts=8)
    return save_trace(trace, tmp_path_factory.mktemp("reference") / "humaneval_p0.npz")


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("slots", sorted(REFERENCE))
def test_replay_matches_reference_table(humaneval_trace: Path, slots: int, policy: str) -> None:
    metrics = replay_counts(humaneval_trace, "mixtral-8x7b", slots, policy)
    assert metrics["accesses"] == REFERENCE_ACCESSES
    assert metrics["misses"] == REFERENCE[slots][policy]
    assert metrics["hits"] + metrics["misses"] == REFERENCE_ACCESSES


@pytest.mark.parametrize("slots", sorted(REFERENCE))
def test_libcachesim_helper_matches_reference_table(humaneval_ids: np.ndarray, slots: int) -> None:
    pytest.importorskip("libcachesim")
    ids = flat_ids(humaneval_ids, 8)
    assert ids.size == REFERENCE_ACCESSES
    assert np.unique(ids).size == 256
    assert miss_counts(ids, slots) == REFERENCE[slots]


# --- (b) seeded random traces against libCacheSim ----------------------------------------------


@dataclass(frozen=True)
class Case:
    name: str
    model: str
    num_layers: int
    num_experts: int
    top_k: int
    zipf: float  # per-layer popularity w_r ∝ r^-zipf over randomly permuted ranks (0 = uniform)
    requests: int
    prompt_tokens: int  # token-serial prefill rows per request, before its decode rows
    decode_tokens: int
    missing: float  # share of (token, layer, slot) records set to -1
    seed: int
    slots: tuple[int, ...]


CASES = {
    c.name: c
    for c in (
        Case("mixtral-uniform", "mixtral-8x7b", 32, 8, 2, 0.0, 1, 0, 200, 0.0, 1, (2, 16, 64, 160)),
        Case("mixtral-skewed", "mixtral-8x7b", 32, 8, 2, 0.8, 1, 0, 200, 0.0, 2, (16, 96, 200)),
        Case("mixtral-requests", "mixtral-8x7b", 32, 8, 2, 0.5, 3, 16, 40, 0.02, 3, (32, 128)),
        Case("olmoe-skewed", "olmoe-1b-7b", 16, 64, 8, 1.0, 1, 0, 100, 0.0, 4, (8, 51, 200, 600)),
        Case("olmoe-requests", "olmoe-1b-7b", 16, 64, 8, 1.2, 2, 10, 40, 0.01, 5, (64, 400)),
    )
}


def random_experts(case: Case) -> np.ndarray:
    """[tokens, layers, k] distinct top-k ids per row, drawn by Gumbel-top-k from skewed weights."""
    rng = np.random.default_rng(case.seed)
    tokens = case.requests * (case.prompt_tokens + case.decode_tokens)
    ranks = np.arange(1, case.num_experts + 1, dtype=np.float64)
    log_w = np.stack(
        [rng.permutation(-case.zipf * np.log(ranks)) for _ in range(case.num_layers)]
    )  # [L, E]
    keys = log_w[None] + rng.gumbel(size=(tokens, case.num_layers, case.num_experts))
    experts = np.argsort(-keys, axis=2, kind="stable")[:, :, : case.top_k].astype(np.int16)
    if case.missing:
        experts[rng.random(experts.shape) < case.missing] = -1
    return experts


@pytest.fixture(scope="module")
def random_trace(tmp_path_factory: pytest.TempPathFactory):
    built: dict[str, tuple[Path, np.ndarray]] = {}
    folder = tmp_path_factory.mktemp("random")

    def get(case: Case) -> tuple[Path, np.ndarray]:
        if case.name not in built:
            experts = random_experts(case)
            per_request = case.prompt_tokens + case.decode_tokens
            request = np.repeat(np.arange(case.requests, dtype=np.int32), per_request)
            phase = np.tile(
                np.r_[
                    np.zeros(case.prompt_tokens, np.uint8), np.ones(case.decode_tokens, np.uint8)
                ],
                case.requests,
            )
            trace = make_trace(
                experts,
                model=case.model,
                num_experts=case.num_experts,
                request=request,
                phase=phase,
            )
            path = save_trace(trace, folder / f"{case.name}.npz")
            built[case.name] = (path, flat_ids(experts, case.num_experts))
        return built[case.name]

    return get


@pytest.mark.parametrize(("name", "slots"), [(c.name, s) for c in CASES.values() for s in c.slots])
def test_replay_matches_libcachesim_on_random_traces(random_trace, name: str, slots: int) -> None:
    pytest.importorskip("libcachesim")
    case = CASES[name]
    path, ids = random_trace(case)
    expected = miss_counts(ids, slots)
    got = {}
    for policy in POLICIES:
        metrics = replay_counts(path, case.model, slots, policy)
        assert metrics["accesses"] == ids.size
        got[policy] = metrics["misses"]
    assert got == expected
    assert got["belady"] <= got["lru"]
    assert got["belady"] <= got["fifo"]
    distinct = np.unique(ids).size
    assert got["belady"] >= distinct  # every distinct expert misses at least once
    if slots >= distinct:
        assert got == dict.fromkeys(POLICIES, distinct)  # only compulsory misses

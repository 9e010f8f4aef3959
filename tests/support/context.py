"""A run's context in one call, for tests that drive plug-ins or a bare cache by hand.

``views(...)`` builds both views of a small run (online and offline, as
``specmd_sim.scenario.plugins`` does) from plain lists: its demand sets, its requests, its
recorded predictions. ``cache(spec, slots, ...)`` adds the eviction policy ``spec`` names and a
bare :class:`ExpertCache` that reports its position to the run's history (so an online policy
sees each demand set from its router decision on), with the policy's initial contents placed.
Model, hardware profile and cost model are stand-ins: pass real ones for plug-ins that read them.
"""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np

from specmd_sim.cache import ExpertCache
from specmd_sim.policies import EVICTION
from specmd_sim.policies.context import (
    AccessSequence,
    PassTable,
    RecordedScores,
    RunContext,
    RunHistory,
    RunViews,
)


def access_sequence(
    sets: Sequence[Sequence[int]],
    num_layers: int = 1,
    gates: Sequence[Sequence[float]] | None = None,
    tokens: Sequence[Sequence[int]] | None = None,
) -> AccessSequence:
    """Demand sets of flat keys in run order: ``sets[p * num_layers + layer]``; gates NaN and
    one token per expert unless given."""
    keys = [k for ks in sets for k in ks]
    flat_gates = [g for gs in gates for g in gs] if gates else [np.nan] * len(keys)
    flat_tokens = [n for ns in tokens for n in ns] if tokens else [1] * len(keys)
    return AccessSequence(
        keys=np.array(keys, np.int32),
        tokens=np.array(flat_tokens, np.int32),
        gates=np.array(flat_gates, np.float32),
        offsets=np.concatenate(([0], np.cumsum([len(ks) for ks in sets]))).astype(np.int64),
        num_layers=num_layers,
    )


def views(
    layers: int = 1,
    experts: int = 4,
    slots: int = 4,
    demand: AccessSequence | None = None,
    requests: Sequence[int] | None = None,
    top_k: int = 1,
    seed: int = 0,
    expert_bytes: int | Sequence[int] = 10,
    pred_scores: np.ndarray | None = None,
    **real: Any,
) -> RunViews:
    """Both views of a run of ``layers x experts``: passes of one decode token each, of
    ``requests`` (default: 256 passes of request 0). ``pred_scores`` ``[D, passes, L, E]`` gives
    pass ``p`` the prediction row ``p``. ``real`` replaces the stand-ins (``model=``,
    ``profile=``, ``cost=``, ``paths=``)."""
    n = layers * experts
    demand = demand if demand is not None else access_sequence([[]] * layers, layers)
    request = np.array(requests if requests is not None else [0] * 256, np.int32)
    table = PassTable(
        request=request,
        phase=np.ones(request.size, np.uint8),
        tokens=np.ones(request.size, np.int64),
        context_end=np.arange(1, request.size + 1, dtype=np.int64),
        attended=np.arange(1, request.size + 1, dtype=np.int64),
        kv_tokens=np.arange(1, request.size + 1, dtype=np.int64),
    )
    recorded = None
    if pred_scores is not None:
        rows = np.arange(pred_scores.shape[1], dtype=np.int64)
        recorded = RecordedScores(pred_scores, rows, np.arange(rows.size + 1, dtype=np.int64))
    sizes = [expert_bytes] * n if isinstance(expert_bytes, int) else list(expert_bytes)
    stand_in = SimpleNamespace(top_k=top_k)
    fields: dict[str, Any] = {
        "model": stand_in,
        "profile": stand_in,
        "cost": stand_in,
        "paths": (),
        **real,
    }
    ctx = RunContext(
        num_layers=layers,
        num_experts=experts,
        top_k=top_k,
        slots=slots,
        rng=np.random.default_rng(seed),
        nbytes=np.array(sizes, np.int64),
        dtype=("bf16",) * n,
        source=np.zeros(n, np.int32),
        history=RunHistory(demand, table, recorded),
        **fields,
    )
    return RunViews.of(ctx, demand)


def cache(
    spec: str | dict[str, Any],
    slots: int,
    layers: int = 1,
    experts: int = 4,
    expert_bytes: int | Sequence[int] = 10,
    capacity_bytes: int | None = None,
    **context: Any,
) -> ExpertCache:
    """A bare cache of ``slots`` experts (``capacity_bytes`` overrides) under the eviction
    policy ``spec`` (a kind, or ``{kind: ..., params}``), its initial contents placed; the
    other arguments go to :func:`views`."""
    run = views(layers, experts, slots, expert_bytes=expert_bytes, **context)
    policy = EVICTION.make(EVICTION.parse_config(spec), run)
    largest = expert_bytes if isinstance(expert_bytes, int) else max(expert_bytes)
    capacity = capacity_bytes if capacity_bytes is not None else largest * slots
    out = ExpertCache(layers, experts, expert_bytes, capacity, policy)
    out.position_listeners.append(run.online.history.advance)
    policy.attach(out)
    out.preload(policy.initial_contents())
    return out

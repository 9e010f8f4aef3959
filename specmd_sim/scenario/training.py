"""The training routing of a fitted predictor (``predictor.fit_on``), built like the run's own
passes, and the checks that keep training and evaluation apart (:mod:`specmd_sim.policies.fit`).
"""

from __future__ import annotations

import hashlib

import numpy as np

from specmd_sim.config import SimConfig
from specmd_sim.errors import SpecmdError
from specmd_sim.policies.context import PassTable
from specmd_sim.policies.fit import FitOn, TrainingRoutes
from specmd_sim.scenario.passes import Passes, build_demand
from specmd_sim.scenario.schedule import build_passes
from specmd_sim.traces.io import load_trace, resolve_trace_path
from specmd_sim.traces.trace import Trace


def check_requests(ids: tuple[int, ...] | None, trace: Trace, name: str, where: str) -> None:
    """``ids`` must all be requests of ``trace`` (the trace ``name``, as the config gives it)."""
    if ids is None:
        return
    unknown = sorted(set(ids) - set(np.unique(trace.request).tolist()))
    if unknown:
        raise SpecmdError(
            f"{where}: expected request ids of trace {name} "
            f"({int(np.unique(trace.request).size)} requests), got {unknown[:8]} not in it"
        )


def build_training(config: SimConfig, trace: Trace, passes: Passes) -> TrainingRoutes | None:
    """The routing ``config.predictor`` is fitted on, or None without ``fit_on``."""
    fit_on: FitOn | None = getattr(config.predictor, "fit_on", None)
    if fit_on is None:
        return None
    where = "predictor.fit_on"
    own = fit_on.trace is None or _same_file(fit_on.trace, config.trace)
    source = trace if fit_on.trace is None else load_trace(fit_on.trace)
    if (source.num_layers, source.num_experts) != (trace.num_layers, trace.num_experts):
        raise SpecmdError(
            f"{where}.trace: expected {trace.num_layers} MoE layers x {trace.num_experts} "
            f"experts like the run's trace, got {source.num_layers} x {source.num_experts}"
        )
    check_requests(fit_on.requests, source, fit_on.trace or config.trace, f"{where}.requests")
    update = {"requests": fit_on.requests, "max_requests": None}
    workload = config.workload.model_copy(update=update)
    train = build_passes(source, workload)
    evaluated = set(passes.row_request.tolist())
    if own:
        overlap = sorted(set(train.row_request.tolist()) & evaluated)
        if overlap:
            raise SpecmdError(
                f"{where}: expected requests the run does not evaluate, got {overlap[:8]} "
                "in both (name the evaluated ones in workload.requests, or fit on another "
                "trace)"
            )
    else:
        same = _same_routing(source, set(train.row_request.tolist()), trace, evaluated)
        if same:
            raise SpecmdError(
                f"{where}.trace: expected routing the run does not evaluate, got requests "
                f"{same[:8]} routed exactly as evaluated ones (a copy of the run's trace?)"
            )
    if train.num_passes == 0:
        raise SpecmdError(f"{where}: expected training requests with tokens, got none")
    table = PassTable(
        request=train.request,
        phase=train.phase,
        tokens=np.diff(train.start),
        context_end=train.context_end,
        attended=train.attended,
        kv_tokens=train.kv_tokens,
    )
    return TrainingRoutes(build_demand(source, train), table, trace.num_experts)


def _fingerprints(trace: Trace, requests: set[int]) -> dict[bytes, int]:
    """Each request's routing (its rows' experts and phases, in order) by content."""
    out = {}
    for request in requests:
        rows = np.flatnonzero(trace.request == request)
        key = np.ascontiguousarray(trace.experts[rows]).tobytes() + trace.phase[rows].tobytes()
        out[hashlib.sha256(key).digest()] = request
    return out


def _same_routing(source: Trace, train: set[int], trace: Trace, evaluated: set[int]) -> list[int]:
    """Training requests whose routing is exactly that of an evaluated request."""
    seen = _fingerprints(trace, evaluated)
    return sorted(r for key, r in _fingerprints(source, train).items() if key in seen)


def _same_file(a: str, b: str) -> bool:
    try:
        return resolve_trace_path(a).resolve() == resolve_trace_path(b).resolve()
    except SpecmdError:
        return False

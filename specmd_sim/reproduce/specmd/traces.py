"""The study's traces: the subjects and their null controls.

Subjects: ``olmoe``, the OLMoE-shaped synthetic trace of the bundled preset, generated once per
seed (seed 0 is the bundled ``olmoe-synthetic``); ``mixtral``, the real Mixtral-8x7B routing of
``../shared/traces`` (HumanEval problem 0: 135 prompt tokens, then 83 decode tokens) when present.

Controls, per subject and seed, with the subject's shape, requests and phases:

- ``uniform``: every (token, layer) draws its top-k uniformly without replacement: no
  popularity, no temporal or cross-layer structure at all;
- ``shuffled``: the subject's rows (tokens) in a random order: the same marginals and the same
  within-token (cross-layer) routing, no temporal structure.

A finding that holds as well on a control does not come from the routing structure the control
removes. Traces of the user's (``--trace``: a recorded or imported one) are subjects too; the
controls keep their model spec, not their recorded predictions.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from specmd_sim.atomic import make_folder
from specmd_sim.traces.io import save_trace
from specmd_sim.traces.synthetic import PRESETS, generate
from specmd_sim.traces.trace import DECODE, PREFILL, Trace, make_trace

CONTROLS = ("subject", "uniform", "shuffled")
MIXTRAL_FILE = "mixtral8x7b_decode.npz"


def olmoe(seed: int) -> Trace:
    return generate(PRESETS["olmoe"], seed)


def mixtral(shared: Path) -> Trace | None:
    """The real Mixtral humaneval_p0 routing (prompt + decode), if ``shared`` has it."""
    src = shared / MIXTRAL_FILE
    if not src.is_file():
        return None
    with np.load(src, allow_pickle=False) as data:
        ids = np.concatenate([data["humaneval_p0_prefill_ids"], data["humaneval_p0_ids"]])
        gates = np.concatenate([data["humaneval_p0_prefill_gates"], data["humaneval_p0_gates"]])
        n_prefill = data["humaneval_p0_prefill_ids"].shape[0]
    phase = np.full(ids.shape[0], DECODE, np.uint8)
    phase[:n_prefill] = PREFILL
    return make_trace(
        ids.astype(np.int16),
        model="mixtral-8x7b",
        num_experts=8,
        gates=gates.astype(np.float32),
        phase=phase,
        source=str(src),
        origin="Mixtral-8x7B-Instruct humaneval_p0 (prompt + decode), ../shared/traces",
    )


def uniform(trace: Trace, seed: int) -> Trace:
    rng = np.random.default_rng([seed, 1])
    t, layers, k = trace.experts.shape
    draws = rng.random((t, layers, trace.num_experts))
    experts = np.argsort(draws, axis=2)[:, :, :k].astype(np.int16)
    gates = -np.sort(-rng.dirichlet(np.ones(k), size=(t, layers)), axis=2)
    return _like(trace, experts, gates.astype(np.float32), "uniform", seed)


def shuffled(trace: Trace, seed: int) -> Trace:
    order = np.random.default_rng([seed, 2]).permutation(trace.num_tokens)
    gates = None if trace.gates is None else trace.gates[order]
    return _like(trace, trace.experts[order], gates, "shuffled", seed)


def _like(trace: Trace, experts: np.ndarray, gates: np.ndarray | None, control: str,
          seed: int) -> Trace:  # fmt: skip
    spec = {"model_spec": trace.meta["model_spec"]} if "model_spec" in trace.meta else {}
    return make_trace(
        experts, model=trace.model, num_experts=trace.num_experts, request=trace.request,
        phase=trace.phase, gates=gates, control=control, control_seed=seed, **spec,
    )  # fmt: skip


def write_traces(
    out: Path, subjects: dict[str, Callable[[int], Trace]], seeds: tuple[int, ...]
) -> dict[tuple[str, str, int], str]:
    """Every (subject, control, seed) trace as a file under ``out`` (a subject is its trace for
    a seed: generated, or the same recorded one); the paths by key."""
    make_folder(out)
    paths = {}
    for name, make in subjects.items():
        for seed in seeds:
            subject = make(seed)
            for control, trace in (
                ("subject", subject),
                ("uniform", uniform(subject, seed)),
                ("shuffled", shuffled(subject, seed)),
            ):
                path = out / f"{name}-{control}-{seed}.npz"
                save_trace(trace, path)
                paths[(name, control, seed)] = str(path)
    return paths

"""The study's runs: each a row of labels that fully determines its config (so any row of the
results can be rerun from its labels alone), and the metrics it produced.

Experiments:

- ``collision``: replay, top-k prefetch with the noisy oracle at 0.9, every LRU baseline and
  Least-Stale variant, per capacity;
- ``demand``: replay without prefetching, LRU and the Least-Stale variants, per capacity;
- ``score``: score-threshold at accuracy 0.8 against top-k at 0.9 (5 %), for two noise models
  of the oracle and with a fitted predictor (``transition`` fitted on held-out requests), in
  replay and in the timing engine;
- ``hit``: the timing engine's hit and late-hit rates next to replay's, at 5 %;
- ``ttft``: TTFT in the timing engine (``h100-pcie``, 5 %) for LRU and Least-Stale, with and
  without prefetching, for token-serial and whole-prompt prefill, two runtimes, and per-kernel
  host overheads from 0 to 250 µs.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from specmd_sim.atomic import write_text
from specmd_sim.config import SimConfig
from specmd_sim.engine.replay import replay
from specmd_sim.engine.sim.run import simulate
from specmd_sim.runtime.loader import runtime_dir

EVICTIONS: dict[str, dict[str, Any]] = {
    "lru": {"kind": "lru"},
    "lru-demand": {"kind": "lru", "prefetch_insert": "lru"},
    "least-stale": {"kind": "least-stale"},
    "least-stale-touch": {"kind": "least-stale", "order": "touch"},
    "least-stale-layer": {"kind": "least-stale", "order": "layer"},
}
# per-layer-lru is not among the study's baselines: at 1-10 % every layer's share
# (slots // layers) is below top-k for both subjects, so it only measures that thrashing
LRU_BASELINES = ("lru", "lru-demand")
LEAST_STALE = ("least-stale", "least-stale-touch", "least-stale-layer")
PREFETCHES: dict[str, dict[str, Any]] = {
    "none": {"kind": "none"},
    "top-k": {"kind": "top-k"},
    "score-threshold": {"kind": "score-threshold"},
}
# the oracle's missed true experts sit just below the predicted band (near_miss 1, the
# default), or look like any other expert (near_miss = confidence)
NOISE = {"oracle": 1.0, "oracle-uniform": 3.0}
FIT_REQUESTS, HELD_OUT = (0, 1), (2, 3)
# per-kernel host overheads of the TTFT curve (fused-kernels itself is 0: CUDA graphs)
DISPATCH_S = (5e-6, 2e-5, 5e-5, 1e-4, 2.5e-4)
QUICK_DISPATCH_S = (1e-4, 2.5e-4)
HARDWARE = "h100-pcie"
LABELS = (
    "subject", "control", "seed", "experiment", "engine", "capacity", "eviction", "prefetch",
    "predictor", "accuracy", "threshold", "runtime", "prefill", "dispatch_s", "max_requests",
)  # fmt: skip
METRICS = (
    "slots", "hit_rate", "late_hit_rate", "misses", "misses_collision", "bytes_moved",
    "prefetch_issued", "ttft_s",
)  # fmt: skip


@dataclass(frozen=True)
class Plan:
    """What a study runs: which subjects, seeds, controls and capacities."""

    subjects: tuple[str, ...]
    seeds: tuple[int, ...]
    quick: bool
    recorded: tuple[str, ...] = ()  # subjects whose traces carry recorded predictions

    @property
    def controls(self) -> tuple[str, ...]:
        return ("subject", "uniform") if self.quick else ("subject", "uniform", "shuffled")

    @property
    def capacities(self) -> tuple[str, ...]:
        return ("2%", "5%") if self.quick else ("1%", "2%", "5%", "10%")

    @property
    def requests(self) -> int | None:
        """Requests of olmoe each run takes (quick: the first one; else all)."""
        return 1 if self.quick else None


def _row(**labels: Any) -> dict[str, Any]:
    base = dict.fromkeys(LABELS)
    base.update(engine="replay", capacity="5%", runtime="fused-kernels", prefill="token")
    base.update(labels)
    return base


def rows(plan: Plan) -> list[dict[str, Any]]:
    """Every run of the study, as labels, in a fixed order."""
    return [*_collision(plan), *_demand(plan), *_score(plan), *_hit(plan), *_ttft(plan)]


def _each(plan: Plan, subjects: tuple[str, ...] | None = None,
          controls: tuple[str, ...] | None = None) -> Iterator[dict[str, Any]]:  # fmt: skip
    for subject in subjects or plan.subjects:
        for control in controls or plan.controls:
            for seed in plan.seeds:
                yield {"subject": subject, "control": control, "seed": seed}


def _predictors(plan: Plan, key: dict[str, Any]) -> tuple[str, ...]:
    """The oracle, and a trace's own recorded predictions where it has them (on the subject:
    the controls carry none)."""
    own = key["subject"] in plan.recorded and key["control"] == "subject"
    return ("oracle", "recorded") if own else ("oracle",)


def _collision(plan: Plan) -> Iterator[dict[str, Any]]:
    evictions = ("lru", "lru-demand", "least-stale", "least-stale-layer") if plan.quick else (
        *LRU_BASELINES, *LEAST_STALE)  # fmt: skip
    for key in _each(plan):
        # quick: the (long) real trace at one capacity
        capacities = ("5%",) if plan.quick and key["subject"] != "olmoe" else plan.capacities
        for predictor in _predictors(plan, key):
            for capacity in capacities:
                for eviction in evictions:
                    yield _row(**key, experiment="collision", capacity=capacity,
                               eviction=eviction, prefetch="top-k", predictor=predictor,
                               accuracy=_accuracy(predictor, 0.9),
                               max_requests=plan.requests)  # fmt: skip


def _accuracy(predictor: str, accuracy: float) -> float | None:
    return accuracy if predictor in NOISE else None


def _demand(plan: Plan) -> Iterator[dict[str, Any]]:
    capacities = ("5%",) if plan.quick else plan.capacities
    for key in _each(plan):
        for capacity in capacities:
            for eviction in ("lru", *LEAST_STALE):
                yield _row(**key, experiment="demand", capacity=capacity, eviction=eviction,
                           prefetch="none", max_requests=plan.requests)  # fmt: skip


def _score(plan: Plan) -> Iterator[dict[str, Any]]:
    olmoe = tuple(s for s in plan.subjects if s == "olmoe")
    for key in _each(plan, olmoe):
        engines = ("replay", "simulate") if key["control"] == "subject" else ("replay",)
        for engine in engines:
            for noise in NOISE:
                for prefetch, accuracy in (("top-k", 0.9), ("score-threshold", 0.8)):
                    yield _row(**key, experiment="score", engine=engine, eviction="least-stale",
                               prefetch=prefetch, predictor=noise, accuracy=accuracy,
                               max_requests=plan.requests)  # fmt: skip
            for prefetch in ("top-k", "score-threshold"):
                yield _row(**key, experiment="score", engine=engine, eviction="least-stale",
                           prefetch=prefetch, predictor="transition-fitted",
                           max_requests=plan.requests)  # fmt: skip


def _hit(plan: Plan) -> Iterator[dict[str, Any]]:
    subjects = ("olmoe", *plan.recorded) if plan.quick else plan.subjects
    for key in _each(plan, tuple(s for s in subjects if s in plan.subjects),
                     ("subject", "uniform")):  # fmt: skip
        for engine in ("replay", "simulate"):
            for predictor in _predictors(plan, key):
                for prefetch in ("top-k", "score-threshold"):
                    yield _row(**key, experiment="hit", engine=engine, eviction="least-stale",
                               prefetch=prefetch, predictor=predictor,
                               accuracy=_accuracy(predictor, 0.9),
                               max_requests=plan.requests)  # fmt: skip


def _ttft(plan: Plan) -> Iterator[dict[str, Any]]:
    if "olmoe" not in plan.subjects:
        return
    timed = {"experiment": "ttft", "engine": "simulate", "max_requests": plan.requests}
    evictions = ("lru", "least-stale", "least-stale-layer")
    for key in _each(plan, ("olmoe",), ("subject", "uniform")):
        for eviction in evictions:
            for prefetch in ("none", "top-k"):
                yield _row(**key, **timed, eviction=eviction, prefetch=prefetch,
                           predictor="oracle", accuracy=0.9)  # fmt: skip
    first = {"subject": "olmoe", "control": "subject", "seed": plan.seeds[0]}
    for runtime, prefill in (("fused-kernels", "whole"), ("hf-eager", "token")):
        for eviction in evictions:
            for prefetch in ("none", "top-k"):
                yield _row(**first, **timed, eviction=eviction, prefetch=prefetch,
                           predictor="oracle", accuracy=0.9, runtime=runtime,
                           prefill=prefill)  # fmt: skip
    for dispatch in QUICK_DISPATCH_S if plan.quick else DISPATCH_S:
        for eviction in evictions:
            for prefetch in ("none", "top-k"):
                yield _row(**first, **timed, eviction=eviction, prefetch=prefetch,
                           predictor="oracle", accuracy=0.9, dispatch_s=dispatch)  # fmt: skip


def _predictor(row: dict[str, Any]) -> dict[str, Any]:
    name = row["predictor"]
    if name == "transition-fitted":
        return {"kind": "transition", "fit_on": {"requests": list(FIT_REQUESTS)}}
    if name == "recorded":
        return {"kind": "trace"}
    if name is None:
        return {"kind": "noisy-oracle"}
    return {"kind": "noisy-oracle", "accuracy": row["accuracy"], "near_miss": NOISE[name]}


def dispatch_runtime(folder: Path, dispatch_s: float) -> Path:
    """``fused-kernels`` with every kernel launch paying ``dispatch_s`` of host time."""
    data = yaml.safe_load((runtime_dir() / "fused-kernels.yaml").read_text(encoding="utf-8"))
    data["id"] = f"fused-kernels-dispatch-{dispatch_s:g}"
    data["dispatch_overhead_s"] = {"value": dispatch_s, "source": "the study's sweep", "grade": "D"}
    path = folder / f"{data['id']}.yaml"
    if not path.exists():
        write_text(path, yaml.safe_dump(data, sort_keys=False))
    return path


def config_for(row: dict[str, Any], traces: dict[tuple[str, str, int], str],
               folder: Path) -> SimConfig:  # fmt: skip
    """The config of a row: everything follows from its labels."""
    prefetch = dict(PREFETCHES[row["prefetch"]])
    if row["threshold"] is not None:
        prefetch["threshold"] = row["threshold"]
    workload: dict[str, Any] = {"prefill_chunk_tokens": 0 if row["prefill"] == "whole" else 1}
    if row["predictor"] == "transition-fitted":
        held_out = HELD_OUT[:1] if row["max_requests"] == 1 else HELD_OUT
        workload["requests"] = list(held_out)
    elif row["max_requests"] is not None:
        workload["max_requests"] = row["max_requests"]
    runtime = row["runtime"]
    if row["dispatch_s"] is not None:
        runtime = str(dispatch_runtime(folder / "runtimes", row["dispatch_s"]))
    return SimConfig.model_validate({
        "trace": traces[(row["subject"], row["control"], row["seed"])],
        "hardware": HARDWARE, "runtime": runtime, "seed": row["seed"],
        "cache": {"capacity": row["capacity"]}, "eviction": EVICTIONS[row["eviction"]],
        "prefetch": prefetch, "predictor": _predictor(row), "workload": workload,
        "timing": {"record_spans": False},
    })  # fmt: skip


def run_row(job: tuple[dict[str, Any], SimConfig]) -> dict[str, Any]:
    """Run one row's config with its engine; the row with its metrics."""
    row, config = job
    result = (simulate if row["engine"] == "simulate" else replay)(config)
    m = result.metrics
    late, ttft = m.get("late_hits"), m.get("ttft_s")
    return row | {
        "slots": int(result.inputs["capacity_slots"]), "hit_rate": float(m["hit_rate"]),
        "late_hit_rate": None if late is None else float(late / m["accesses"]),
        "misses": int(m["misses"]), "misses_collision": int(m["misses_collision"]),
        "bytes_moved": int(m["bytes_demand"] + m["bytes_prefetch"]),
        "prefetch_issued": int(m["prefetch_issued"]),
        "ttft_s": None if ttft is None else float(ttft),
    }  # fmt: skip

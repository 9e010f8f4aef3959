"""``specmd validate real``: the simulator against the real executor on this machine.

Each *cell* of the matrix is one config run twice: by the real executor
(:mod:`specmd_sim.execute`, ``repeats`` times, the median kept) and by the timing engine with
the calibrated profiles (``specmd calibrate``). Per cell it compares the per-access outcomes
(the access class of every expert run, by pass, layer and expert), mean TPOT and TTFT, stall,
and the per-token error (p90 over passes of ``|simulated / measured - 1|``); per group of cells
that differ only in the eviction policy, whether the ranking of the policies by TPOT is the
same. The matrix: eviction ``lru``, ``least-stale`` (touch and layer order) x 3 cache sizes x
prefetch ``none`` / ``top-k`` x 2 link bandwidths x token-serial decode and chunked prefill. The
links: throttled to 1 and 4 GB/s on the CPU; on CUDA the GPU's own PCIe link and a throttle of
4 GB/s (the same DMA copies, then the rest of the throttle's time).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import statistics
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from specmd_sim.atomic import write_text
from specmd_sim.config import SimConfig, build_config
from specmd_sim.engine.sim.run import simulate
from specmd_sim.errors import SpecmdError, short_repr
from specmd_sim.execute import Backend, execute
from specmd_sim.execute.copies import NATIVE
from specmd_sim.execute.device import make_device
from specmd_sim.execute.model import Weights
from specmd_sim.metrics import RunResult
from specmd_sim.runs import read_json
from specmd_sim.scenario import build_scenario
from specmd_sim.timeline import KIND, class_name
from specmd_sim.validate.document import marker

TARGETS = {"tpot": 0.05, "ttft": 0.05, "p90": 0.10}
POLICIES: dict[str, dict[str, Any]] = {
    "lru": {"kind": "lru"},
    "least-stale": {"kind": "least-stale", "order": "touch"},
    "least-stale-layer": {"kind": "least-stale", "order": "layer"},
}


SETUP = ("bandwidth", "mode", "capacity", "prefetch", "policy")  # what names a cell


@dataclass(frozen=True)
class Matrix:
    """Which cells to run."""

    policies: tuple[str, ...] = tuple(POLICIES)
    capacities: tuple[str, ...] = ("5%", "10%", "20%")
    prefetch: tuple[str, ...] = ("none", "top-k")
    bandwidths: tuple[float, ...] = (1.0e9, 4.0e9)
    modes: tuple[str, ...] = ("decode", "chunked-prefill")

    def cells(self) -> Iterator[dict[str, Any]]:
        for bw, mode, cap, pre, pol in itertools.product(
            self.bandwidths, self.modes, self.capacities, self.prefetch, self.policies
        ):
            yield {"bandwidth": bw, "mode": mode, "capacity": cap, "prefetch": pre, "policy": pol}


QUICK = Matrix(capacities=("10%",), prefetch=("top-k",), bandwidths=(2.0e9,), modes=("decode",),
               policies=("lru", "least-stale-layer"))  # fmt: skip


def matrix(backend: str, quick: bool = False) -> Matrix:
    """The matrix for ``backend``: on CUDA its links are the GPU's own (:data:`NATIVE`) and a
    4 GB/s throttle."""
    if backend != "cuda":
        return QUICK if quick else Matrix()
    return replace(QUICK, bandwidths=(NATIVE,)) if quick else Matrix(bandwidths=(NATIVE, 4.0e9))


def link_label(bandwidth: float) -> str:
    return "native" if bandwidth == NATIVE else f"{bandwidth / 1e9:g} GB/s"


def _row(setup: dict[str, Any], measured: list[RunResult], sim: RunResult) -> dict[str, Any]:
    """One cell's comparison (medians over the measured runs)."""
    out: dict[str, Any] = dict(setup)
    for name in ("tpot_s", "ttft_s", "stall_s", "hit_rate", "late_hits"):
        out[f"measured_{name}"] = statistics.median(float(r.metrics[name]) for r in measured)
        out[f"simulated_{name}"] = float(sim.metrics[name])
    tpots = [float(r.metrics["tpot_s"]) for r in measured]
    out["measured_tpot_min_s"], out["measured_tpot_max_s"] = min(tpots), max(tpots)
    out["tpot_error"] = _err(out["simulated_tpot_s"], out["measured_tpot_s"])
    out["ttft_error"] = _err(out["simulated_ttft_s"], out["measured_ttft_s"])
    out["p90_error"] = statistics.median(_p90(sim, r) for r in measured)
    simulated = _outcomes(sim)
    swaps = [_swaps(simulated, _outcomes(r)) for r in measured]
    out["outcomes"] = len(simulated)
    out["outcome_differences"] = statistics.median(sum(s.values()) for s in swaps)
    out["outcome_swaps"] = swaps[0]  # of the first measured run
    return out


def _err(sim: float, real: float) -> float:
    return abs(sim / real - 1.0) if real else 0.0


def tpot_spread(row: dict[str, Any]) -> float:
    """A cell's measured TPOT spread: (max - min) / median over its repeats; 0 for a cell saved
    without them (an earlier run's file) or measured once."""
    low, high = row.get("measured_tpot_min_s"), row.get("measured_tpot_max_s")
    median = row["measured_tpot_s"]
    return (high - low) / median if low is not None and high is not None and median else 0.0


def tpot_bound(row: dict[str, Any]) -> float:
    """The TPOT error a cell passes at: the target, or half its measured spread where the
    machine's noise is larger (a simulation inside the measurements' own range cannot be
    told wrong by them)."""
    return max(TARGETS["tpot"], tpot_spread(row) / 2)


def _p90(sim: RunResult, real: RunResult) -> float:
    s = np.subtract(sim.per_pass["end_s"], sim.per_pass["start_s"])
    r = np.subtract(real.per_pass["end_s"], real.per_pass["start_s"])
    return float(np.percentile(np.abs(s / r - 1.0), 90))


def _outcomes(result: RunResult) -> dict[tuple[int, int, int], int]:
    """The access class of every expert run, by (pass, layer, expert)."""
    spans = result.spans
    assert spans is not None
    runs = spans[spans["kind"] == KIND["expert"]]
    return {(int(p), int(layer), int(e)): int(k)
            for p, layer, e, k in zip(runs["pass_"], runs["layer"], runs["expert"], runs["klass"],
                                      strict=True)}  # fmt: skip


def _swaps(sim: dict[tuple[int, int, int], int], real: dict[tuple[int, int, int], int]
           ) -> dict[str, int]:  # fmt: skip
    """The accesses whose class differs, counted by (simulated class -> measured class)."""
    out: dict[str, int] = {}
    for key in sim.keys() | real.keys():
        if sim.get(key) != real.get(key):
            name = f"{_class(sim.get(key))}->{_class(real.get(key))}"
            out[name] = out.get(name, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))


def _class(klass: int | None) -> str:
    return "none" if klass is None else class_name(klass)


@dataclass
class RealValidation:
    rows: list[dict[str, Any]]
    rankings: dict[str, bool]

    def summary(self) -> dict[str, Any]:
        rows, signs = self.rows, prefetch_signs(self.rows)
        return {
            "cells": len(rows),
            "cells_with_identical_outcomes": sum(r["outcome_differences"] == 0 for r in rows),
            "outcome_differences": sum(r["outcome_differences"] for r in rows),
            "outcomes": sum(r["outcomes"] for r in rows),
            "tpot_within": sum(r["tpot_error"] <= TARGETS["tpot"] for r in rows),
            "tpot_within_spread": sum(r["tpot_error"] <= tpot_bound(r) for r in rows),
            "ttft_within": sum(r["ttft_error"] <= TARGETS["ttft"] for r in rows),
            "p90_within": sum(r["p90_error"] <= TARGETS["p90"] for r in rows),
            "median_tpot_error": statistics.median(r["tpot_error"] for r in rows),
            "median_ttft_error": statistics.median(r["ttft_error"] for r in rows),
            "max_tpot_error": max(r["tpot_error"] for r in rows),
            "max_ttft_error": max(r["ttft_error"] for r in rows),
            "rankings_preserved": sum(self.rankings.values()),
            "groups": len(self.rankings),
            "prefetch_sign_kept": sum(signs.values()),
            "prefetch_pairs_beyond_noise": len(signs),
        }


def _config(setup: dict[str, Any], folder: Path, trace: Path, seed: int) -> SimConfig:
    mode = {"decode": 1, "chunked-prefill": 16}[setup["mode"]]
    return build_config({
        "model": str(folder / "model.yaml"), "trace": str(trace),
        "hardware": str(_profile_path(folder, setup["bandwidth"])),
        "runtime": str(folder / "runtime.yaml"),
        "cache": {"capacity": setup["capacity"]}, "eviction": POLICIES[setup["policy"]],
        "prefetch": {"kind": setup["prefetch"]},
        **({"predictor": {"kind": "trace"}} if setup["prefetch"] != "none" else {}),
        "workload": {"prefill_chunk_tokens": mode}, "timing": {"record_spans": True},
        "seed": seed,
    }, source=f"validate real {setup}")  # fmt: skip


def _profile_path(folder: Path, bandwidth: float) -> Path:
    name = "native" if bandwidth == NATIVE else f"{bandwidth / 1e9:g}GBps"
    return folder / f"hardware-{name}.yaml"


def profile_at(folder: Path, bandwidth: float) -> Path:
    """The calibrated hardware profile with its link throttled to ``bandwidth`` (kept as
    calibrated where it is :data:`NATIVE`)."""
    data = yaml.safe_load((folder / "hardware.yaml").read_text())
    if bandwidth != NATIVE:
        link = data["links"][0]
        link["kind"] = "emulated"
        link["bandwidth_bytes_per_s"] = {
            "value": bandwidth, "source": "the executor's throttle (specmd validate real)",
            "grade": "B",
        }  # fmt: skip
    return write_text(_profile_path(folder, bandwidth), yaml.safe_dump(data, sort_keys=False))


def run_real_validation(
    folder: Path,
    trace: Path,
    matrix: Matrix = Matrix(),
    repeats: int = 3,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
    device: str = "cpu",
    resume: bool = False,
) -> RealValidation:
    """Run every cell on ``device`` (``folder`` holds ``model.yaml`` and the calibrated
    profiles). ``resume``: keep the cells an earlier run saved in the folder from the same
    inputs (profiles, model, trace, repeats, device: :func:`inputs_digest`) and run only the
    others."""
    for bw in matrix.bandwidths:
        profile_at(folder, bw)
    digest = inputs_digest(folder, trace, repeats, device)
    saved = folder / "real-validation.json"
    rows: list[dict[str, Any]] = []
    if resume and saved.is_file():
        earlier = load_rows(saved).rows
        rows = [r for r in earlier if r.get("inputs") == digest]
        if progress is not None:
            progress(f"resume: {len(rows)} of the {len(earlier)} saved cells are kept; the "
                     "others were measured with other profiles, model, trace, repeats or "
                     "device")  # fmt: skip
    done = {_key(r) for r in rows}
    setups = list(matrix.cells())
    weights: Weights | None = None
    for i, setup in enumerate(setups):
        if _key(setup) in done:
            continue
        scenario = build_scenario(_config(setup, folder, trace, seed))
        if weights is None:  # drawn, and placed on the device, once
            weights = make_device(device).place(Weights(scenario.model, seed))
        backend = Backend(setup["bandwidth"], seed, device=device)
        measured = [execute(scenario, backend, weights=weights) for _ in range(repeats)]
        row = {**_row(setup, measured, simulate(scenario)), "inputs": digest}
        rows.append(row)
        save_rows(saved, rows)
        if progress is not None:
            progress(f"[{i + 1}/{len(setups)}] {_cell(setup)}: TPOT measured "
                     f"{row['measured_tpot_s'] * 1e3:.2f} ms, simulated "
                     f"{row['simulated_tpot_s'] * 1e3:.2f} ms; outcomes differ "
                     f"{row['outcome_differences']} of {row['outcomes']}")  # fmt: skip
    order = {_key(s): i for i, s in enumerate(setups)}
    rows = sorted((r for r in rows if _key(r) in order), key=lambda r: order[_key(r)])
    return RealValidation(rows, _rankings(rows))


def _key(cell: dict[str, Any], *without: str) -> tuple[Any, ...]:
    """The cell's setup (:data:`SETUP`), less the fields named in ``without``."""
    return tuple(cell[k] for k in SETUP if k not in without)


def inputs_digest(folder: Path, trace: Path, repeats: int, device: str) -> str:
    """What a cell's figures depend on besides its setup: the calibrated profiles, the model,
    the trace, the repeats and the device (a SHA-256 of them)."""
    h = hashlib.sha256(f"repeats={repeats};device={device}".encode())
    for path in (folder / "hardware.yaml", folder / "runtime.yaml", folder / "model.yaml", trace):
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def save_rows(path: Path, rows: list[dict[str, Any]]) -> None:
    """The cells measured so far, as JSON (replaced atomically)."""
    write_text(path, json.dumps(rows, indent=1, default=str))


TIE = 0.01  # simulated TPOTs closer than this are a tie (the same decisions give equal times)
NOISE = 0.02  # measured TPOTs closer than this are a tie within the machine's noise


def _rankings(rows: list[dict[str, Any]]) -> dict[str, bool]:
    """Per group of cells differing only in the policy: does every pair of policies keep its
    order? A pair the simulator calls a tie (within :data:`TIE`) must measure within
    :data:`NOISE`; any other pair must measure in the simulated direction, unless both
    differences are within the noise."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        key = f"{link_label(r['bandwidth'])} / {r['mode']} / {r['capacity']} / {r['prefetch']}"
        groups.setdefault(key, []).append(r)
    out = {}
    for key, members in groups.items():
        if len(members) > 1:
            out[key] = all(_same_order(a, b) for a, b in itertools.combinations(members, 2))
    return out


def _same_order(a: dict[str, Any], b: dict[str, Any]) -> bool:
    sim = b["simulated_tpot_s"] / a["simulated_tpot_s"] - 1.0
    real = b["measured_tpot_s"] / a["measured_tpot_s"] - 1.0
    if abs(sim) <= TIE:  # the simulator calls it a tie: so must the measurement
        return abs(real) <= NOISE
    # otherwise the same direction, unless both are within the noise
    return real * sim > 0 or (abs(real) <= NOISE and abs(sim) <= NOISE)


def prefetch_signs(rows: list[dict[str, Any]]) -> dict[str, bool]:
    """Pairs of cells equal but for ``prefetch`` (``none`` against each other kind) whose
    measured TPOTs differ by more than the noise (:data:`NOISE`, or either cell's measured
    spread where larger): whether the simulated difference has the measured sign."""
    without = {_key(r, "prefetch"): r for r in rows if r["prefetch"] == "none"}
    out = {}
    for r in rows:
        base = without.get(_key(r, "prefetch"))
        if r["prefetch"] == "none" or base is None:
            continue
        real = r["measured_tpot_s"] / base["measured_tpot_s"] - 1.0
        if abs(real) <= max(NOISE, tpot_spread(r), tpot_spread(base)):
            continue
        sim = r["simulated_tpot_s"] / base["simulated_tpot_s"] - 1.0
        out[_cell({k: r[k] for k in SETUP})] = real * sim > 0
    return out


def _by_bandwidth(rows: list[dict[str, Any]]) -> list[str]:
    out = []
    for bw in sorted({r["bandwidth"] for r in rows}):
        mine = [r for r in rows if r["bandwidth"] == bw]
        n = len(mine)
        within = {k: sum(r[f"{k}_error"] <= TARGETS[k] for r in mine) for k in TARGETS}
        where = "on the native link" if bw == NATIVE else f"at {link_label(bw)}"
        out.append(
            f"- {where}: TPOT within {within['tpot']} of {n}, TTFT within "
            f"{within['ttft']} of {n}, p90 within {within['p90']} of {n}; median TPOT error "
            f"{statistics.median(r['tpot_error'] for r in mine):.1%}"
        )
    return out


def load_rows(path: Path) -> RealValidation:
    """A validation from the cells saved by an earlier run (``real-validation.json``)."""
    rows = read_json(path)
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise SpecmdError(
            f"{path}: expected the list of cells an earlier run saved, got {short_repr(rows)}"
        )
    return RealValidation(rows, _rankings(rows))


EXECUTORS = {
    "cpu": ("on this machine", "float32 matmuls on one numpy thread, copy-worker threads over a "
            "throttled link"),
    "cuda": ("on a GPU", "torch float32 on the GPU timed by CUDA events; copies issued by the "
             "thread that computes to copy streams, from pinned host memory over PCIe or a "
             "throttle"),
    "torch-cpu": ("with the CUDA backend's code on this CPU", "torch float32 on this CPU, "
                  "copies issued by the thread that computes over a throttled link"),
}  # fmt: skip


def _cell(setup: dict[str, Any]) -> str:
    return " / ".join(link_label(v) if k == "bandwidth" else str(v) for k, v in setup.items())


def markdown(result: RealValidation, command: str, machine: str, backend: str = "cpu") -> str:
    """The real-execution section of ``docs/validation.md`` for ``backend``."""
    s = result.summary()
    t = TARGETS
    where, what = EXECUTORS[backend]
    lines = [
        marker(backend),
        f"## Against a real execution {where}",
        "",
        f"Written by `{command}` on {machine}. The simulator (timing engine, with the profiles "
        f"`specmd calibrate` measured) against the real executor (`specmd_sim/execute/`: {what}"
        "), on the same configs and the same decisions. Method: `docs/validation-method.md`.",
        "",
        f"Targets: mean TPOT and TTFT within ±{t['tpot']:.0%}, per-token p90 error within "
        f"±{t['p90']:.0%}, identical per-access outcomes, the same policy ranking in every "
        "group.",
        "",
        f"- cells: **{s['cells']}**; with identical per-access outcomes: "
        f"**{s['cells_with_identical_outcomes']}** ({s['outcome_differences']} of "
        f"{s['outcomes']} accesses differ in all)",
        f"- TPOT within ±{t['tpot']:.0%}: **{s['tpot_within']} of {s['cells']}** (median error "
        f"{s['median_tpot_error']:.1%}, largest {s['max_tpot_error']:.1%}); within ±"
        f"{t['tpot']:.0%} or half the cell's measured max-min spread, whichever is larger: "
        f"**{s['tpot_within_spread']} of {s['cells']}**",
        f"- TTFT within ±{t['ttft']:.0%}: **{s['ttft_within']} of {s['cells']}** (median error "
        f"{s['median_ttft_error']:.1%}, largest {s['max_ttft_error']:.1%})",
        f"- per-token p90 error within ±{t['p90']:.0%}: **{s['p90_within']} of {s['cells']}**",
        f"- policy ranking by TPOT preserved: **{s['rankings_preserved']} of {s['groups']}** "
        "groups",
        f"- prefetching's effect on TPOT with the measured sign: **{s['prefetch_sign_kept']} of "
        f"{s['prefetch_pairs_beyond_noise']}** pairs whose measured difference exceeds the noise "
        f"(±{NOISE:.0%} or either cell's spread)",
        *_by_bandwidth(result.rows),
        "",
        "| link | mode | cache | prefetch | policy | TPOT measured | spread | simulated | error | "
        "TTFT measured | simulated | error | p90 | hit rate (measured / simulated) | outcomes "
        "differing |",
        "|---|---|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in result.rows:
        lines.append(
            f"| {link_label(r['bandwidth'])} | {r['mode']} | {r['capacity']} | "
            f"{r['prefetch']} | {r['policy']} | {r['measured_tpot_s'] * 1e3:.2f} ms | "
            f"{tpot_spread(r):.1%} | {r['simulated_tpot_s'] * 1e3:.2f} ms | "
            f"{r['tpot_error']:.1%} | "
            f"{r['measured_ttft_s'] * 1e3:.1f} ms | {r['simulated_ttft_s'] * 1e3:.1f} ms | "
            f"{r['ttft_error']:.1%} | {r['p90_error']:.1%} | {r['measured_hit_rate']:.2f} / "
            f"{r['simulated_hit_rate']:.2f} | {r['outcome_differences']} of {r['outcomes']} |"
        )
    swaps: dict[str, int] = {}
    for r in result.rows:
        for name, n in r["outcome_swaps"].items():
            swaps[name] = swaps.get(name, 0) + n
    total = sum(swaps.values())
    if total:
        kinds = ", ".join(f"{k} {n} ({n / total:.0%})" for k, n in
                          sorted(swaps.items(), key=lambda kv: -kv[1]))  # fmt: skip
        lines += ["", f"Differing accesses (first measured run of each cell), simulated -> "
                  f"measured class: {kinds}."]  # fmt: skip
    broken = [g for g, ok in result.rankings.items() if not ok]
    lines += ["", "Groups whose policy ranking differs: " + (", ".join(broken) or "none") + "."]
    return "\n".join(lines) + "\n"

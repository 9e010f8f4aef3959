"""Engine speed: the replay engine against libCacheSim, and the timing engine's speed.

Run from the repository root::

    python benchmarks/replay_speed.py [--accesses 1000000] [--slots 51 512] [--json]

Measures, in one process:

(a) ``replay`` (LRU, demand only: ``cache.pin_demand_set: false``, prefetch none) on a synthetic
    OLMoE-shaped decode trace of about ``--accesses`` routed accesses; the scenario is built
    first (trace load, passes, demand sets), so the replay time excludes it; both are reported;
(b) libCacheSim's LRU (C, ``process_trace``) on the same flat access sequence, timing only the
    processing; both must give the same miss count (checked);
(c) ``simulate`` on the default scenario (``SimConfig()``): simulated seconds per wall second.

The figures of merit are the ratios (libCacheSim ÷ replay throughput, simulated ÷ wall time),
which vary less across machines than the absolute times. See ``benchmarks/README.md``.
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from settings import stated

from specmd_sim import SimConfig, load_model, replay, save_trace, simulate
from specmd_sim.scenario import build_scenario
from specmd_sim.traces.synthetic import PRESETS, generate

_TESTS = Path(__file__).resolve().parents[1] / "tests"
if str(_TESTS) not in sys.path:
    sys.path.insert(0, str(_TESTS))

from support import lcs  # noqa: E402

NUM_REQUESTS = 8


def make_trace_file(accesses: int, seed: int, folder: Path) -> Path:
    """A synthetic OLMoE decode trace of at least ``accesses`` accesses, saved uncompressed."""
    base = PRESETS["olmoe"]
    spec = load_model(base.model)
    per_token = spec.moe_layers * spec.top_k  # one decode token touches L * k experts
    decode = max(1, math.ceil(accesses / (per_token * NUM_REQUESTS)))
    params = base.model_copy(
        update={
            "num_requests": NUM_REQUESTS,
            "prompt_tokens": 0,
            "decode_tokens": decode,
            "lookahead": 0,  # no pred_scores: demand-only replay does not read them
        }
    )
    return save_trace(generate(params, seed), folder / "olmoe_decode.npz", compress=False)


def bench_replay(trace: Path, slots: int) -> dict[str, Any]:
    config = SimConfig(
        trace=str(trace),
        cache={"capacity": slots, "pin_demand_set": False},
        eviction={"kind": "lru"},
        prefetch={"kind": "none"},
    )
    t0 = time.perf_counter()
    scenario = build_scenario(config)
    t1 = time.perf_counter()
    result = replay(scenario)
    t2 = time.perf_counter()
    accesses = int(result.metrics["accesses"])
    return {
        "scenario": scenario,
        "accesses": accesses,
        "misses": int(result.metrics["misses"]),
        "build_s": t1 - t0,
        "replay_s": t2 - t1,
        "accesses_per_s": accesses / (t2 - t1),
        "accesses_per_s_with_build": accesses / (t2 - t0),
    }


def bench_libcachesim(path: Path, n: int, slots: int, repeat: int) -> dict[str, Any]:
    """libCacheSim LRU on the oracleGeneral file ``path`` (``n`` requests); best of ``repeat``."""
    import libcachesim

    runs = [lcs.run_file(path, n, "lru", slots) for _ in range(repeat)]
    misses = {m for m, _ in runs}
    if len(misses) != 1:
        raise RuntimeError(f"libCacheSim gave different miss counts across runs: {misses}")
    best = min(s for _, s in runs)
    return {
        "version": libcachesim.__version__,
        "misses": misses.pop(),
        "process_s": best,
        "accesses_per_s": n / best,
    }


def bench_simulate() -> dict[str, Any]:
    config = SimConfig.model_validate(stated({}))
    t0 = time.perf_counter()
    scenario = build_scenario(config)
    t1 = time.perf_counter()
    result = simulate(scenario)
    t2 = time.perf_counter()
    simulated = float(result.metrics["makespan_s"])
    accesses = int(result.metrics["accesses"])
    return {
        "trace": config.trace,
        "model": scenario.model.id,
        "hardware": config.hardware,
        "passes": scenario.passes.num_passes,
        "accesses": accesses,
        "build_s": t1 - t0,
        "wall_s": t2 - t1,
        "simulated_s": simulated,
        "simulated_per_wall": simulated / (t2 - t1),
        "accesses_per_s": accesses / (t2 - t1),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "seed": args.seed,
        "runs": [],
    }
    with tempfile.TemporaryDirectory(prefix="specmd-bench-") as tmp:
        folder = Path(tmp)
        t0 = time.perf_counter()
        trace = make_trace_file(args.accesses, args.seed, folder)
        out["trace_generation_s"] = time.perf_counter() - t0
        ref_path: Path | None = None
        for slots in args.slots:
            row: dict[str, Any] = {"slots": slots}
            rep = bench_replay(trace, slots)
            scenario = rep.pop("scenario")
            row["replay"] = rep
            if ref_path is None:
                keys = np.asarray(scenario.demand.keys, np.int64)  # the sequence replayed
                out["accesses"] = int(keys.size)
                out["distinct_experts"] = int(np.unique(keys).size)
                if not args.no_libcachesim:
                    ref_path = lcs.write_oracle_general(keys, folder / "trace.oracleGeneral.bin")
            if rep["accesses"] != out["accesses"]:
                raise RuntimeError(
                    f"replayed {rep['accesses']} accesses, expected {out['accesses']}"
                )
            if ref_path is not None:
                ref = bench_libcachesim(ref_path, out["accesses"], slots, args.repeat)
                row["libcachesim"] = ref
                row["same_misses"] = ref["misses"] == rep["misses"]
                row["libcachesim_over_replay"] = ref["accesses_per_s"] / rep["accesses_per_s"]
            out["runs"].append(row)
    out["simulate"] = None if args.no_simulate else bench_simulate()
    bad = [r["slots"] for r in out["runs"] if r.get("same_misses") is False]
    out["ok"] = not bad
    return out


def table(res: dict[str, Any]) -> str:
    lines = [
        f"trace: synthetic OLMoE decode (seed {res['seed']}), {res['accesses']:,} accesses, "
        f"{res['distinct_experts']} distinct experts; LRU, demand only",
        f"{'slots':>5}  {'engine':<30} {'seconds':>8} {'accesses/s':>12} {'misses':>9}",
    ]
    for row in res["runs"]:
        rep, ref, n = row["replay"], row.get("libcachesim"), row["slots"]
        lines += [
            f"{n:>5}  {'replay: scenario build':<30} {rep['build_s']:>8.3f}",
            f"{n:>5}  {'replay: run only':<30} {rep['replay_s']:>8.3f} "
            f"{rep['accesses_per_s']:>12,.0f} {rep['misses']:>9,}",
            f"{n:>5}  {'replay: build + run':<30} {rep['build_s'] + rep['replay_s']:>8.3f} "
            f"{rep['accesses_per_s_with_build']:>12,.0f}",
        ]
        if ref is not None:
            lines += [
                f"{n:>5}  {'libCacheSim ' + ref['version'] + ' LRU: process':<30} "
                f"{ref['process_s']:>8.3f} {ref['accesses_per_s']:>12,.0f} {ref['misses']:>9,}",
                f"{n:>5}  ratio libCacheSim / replay throughput: "
                f"{row['libcachesim_over_replay']:.1f}x; same miss count: {row['same_misses']}",
            ]
    sim = res["simulate"]
    if sim is not None:
        lines += [
            f"simulate, default scenario ({sim['trace']}, {sim['model']}, {sim['hardware']}, "
            f"{sim['passes']} passes, {sim['accesses']:,} accesses): build {sim['build_s']:.3f} s,",
            f"  run {sim['wall_s']:.3f} s wall for {sim['simulated_s']:.3f} s simulated = "
            f"{sim['simulated_per_wall']:.3f} simulated s per wall s "
            f"({sim['accesses_per_s']:,.0f} accesses/s)",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--accesses", type=int, default=1_000_000, help="trace size (accesses)")
    parser.add_argument(
        "--slots",
        type=int,
        nargs="+",
        default=[51, 512],
        help="cache capacities in expert slots, one run each (default: 51 = SpecMD's 5%%, 512)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the synthetic trace")
    parser.add_argument("--repeat", type=int, default=3, help="libCacheSim runs (best is kept)")
    parser.add_argument("--no-libcachesim", action="store_true", help="skip (b)")
    parser.add_argument("--no-simulate", action="store_true", help="skip (c)")
    parser.add_argument("--json", action="store_true", help="JSON to stdout, table to stderr")
    args = parser.parse_args(argv)
    if args.accesses < 1 or min(args.slots) < 1 or args.repeat < 1:
        parser.error("--accesses, --slots and --repeat must be >= 1")
    res = run(args)
    if args.json:
        print(table(res), file=sys.stderr)
        print(json.dumps(res, indent=2, sort_keys=True))
    else:
        print(table(res))
    if not res["ok"]:
        print("FAILED: replay and libCacheSim miss counts differ", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

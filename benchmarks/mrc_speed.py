"""A 20-capacity LRU miss-ratio curve in one pass against one libCacheSim LRU run (issue #11,
goal 2: the curve in less time than one libCacheSim run on the same trace).

    python benchmarks/mrc_speed.py                 # 10.24M accesses (80,000 decode tokens)
    python benchmarks/mrc_speed.py --accesses 1000000 --json

Measured in one process, on the same access sequence (a synthetic OLMoE decode trace, see
replay_speed.py): (a) ``build_scenario`` (trace load, passes, demand sets; timed apart, as it is
the same for one replay), (b) the curve over 20 capacities from the built scenario, best of
``--repeat`` (the numba kernel compiled, or loaded from its cache, by one warm-up call first —
the first-ever compile is reported on its own), with the default threads (the machine's cores)
and on one thread, (c) libCacheSim LRU ``process_trace`` at one capacity (best of ``--repeat``),
and the curve's miss counts checked against libCacheSim at three capacities. Verdict: (b) / (c)
< 1 with the default threads; the one-thread ratio is printed beside it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from replay_speed import lcs, make_trace_file

from specmd_sim import SimConfig
from specmd_sim.engine import mrc
from specmd_sim.scenario import build_scenario

SLOTS = [int(s) for s in np.unique(np.geomspace(8, 1024, 20).round())]


def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as folder:
        trace = make_trace_file(args.accesses, args.seed, Path(folder))
        config = SimConfig(
            trace=str(trace), cache={"capacity": 8, "pin_demand_set": False},
            eviction={"kind": "lru"}, prefetch={"kind": "none"},
        )  # fmt: skip
        started = time.perf_counter()
        scenario = build_scenario(config, check_cache=False)
        build_s = time.perf_counter() - started
        keys = scenario.demand.keys
        started = time.perf_counter()
        mrc.miss_ratio_curve(scenario, [8])
        first_s = time.perf_counter() - started  # compiles, or loads the cached kernel
        curve_s, one_thread_s = [], []
        for _ in range(args.repeat):
            for workers, times in ((None, curve_s), (1, one_thread_s)):
                started = time.perf_counter()
                curve = mrc.miss_ratio_curve(scenario, SLOTS, workers=workers)
                times.append(time.perf_counter() - started)
        assert curve.method == "stack"
        path = lcs.write_oracle_general(keys, Path(folder) / "trace.oracleGeneral.bin")
        runs = [lcs.run_file(path, keys.size, "lru", 256) for _ in range(args.repeat)]
        checked = {}
        for slots in (SLOTS[3], SLOTS[10], SLOTS[-2]):
            misses, _ = lcs.run_file(path, keys.size, "lru", slots)
            checked[slots] = (misses, int(curve.accesses - curve.hits[SLOTS.index(slots)]))
    best, reference = min(curve_s), min(s for _, s in runs)
    return {
        "accesses": int(keys.size),
        "capacities": len(SLOTS),
        "build_scenario_s": build_s,
        "first_call_s": first_s,
        "curve_s": best,
        "threads": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1,
        "curve_one_thread_s": min(one_thread_s),
        "libcachesim_one_run_s": reference,
        "ratio": best / reference,
        "ratio_one_thread": min(one_thread_s) / reference,
        "verdict": "met" if best < reference else "not met",
        "misses_equal": all(a == b for a, b in checked.values()),
        "checked": {str(k): v for k, v in checked.items()},
        "numba": hasattr(mrc._count_piece, "py_func"),
        "python": sys.version.split()[0],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--accesses", type=int, default=10_240_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    res = run(parser.parse_args(argv))
    if parser.parse_args(argv).json:
        print(json.dumps(res, indent=2))
    else:
        print(
            f"{res['accesses']:,} accesses, {res['capacities']} capacities (numba: {res['numba']})"
            f"\n  build_scenario          {res['build_scenario_s']:8.2f} s"
            f"\n  first call (compile)    {res['first_call_s']:8.2f} s"
            f"\n  curve, 20 capacities    {res['curve_s']:8.2f} s ({res['threads']} threads)"
            f"\n  ... on one thread       {res['curve_one_thread_s']:8.2f} s"
            f"\n  libCacheSim, one run    {res['libcachesim_one_run_s']:8.2f} s"
            f"\n  ratio {res['ratio']:.2f} -> {res['verdict']} (one thread: "
            f"{res['ratio_one_thread']:.2f}); misses equal to libCacheSim at "
            f"{', '.join(res['checked'])} slots: {res['misses_equal']}"
        )
    return 0 if res["misses_equal"] else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""Issue #11, goal 1: the compiled replay path against libCacheSim, whole process, and the
default configuration's throughput.

Run from the repository root (needs the ``fast`` extra and ``libcachesim``)::

    python benchmarks/replay_compiled.py [--accesses 10240000] [--pairs 3] [--json]

(a) **Whole process, classic policies.** On a synthetic OLMoE-shaped decode trace of
    ``--accesses`` accesses (the trace of ``replay_speed.py``), ``specmd replay`` with lru, fifo
    and belady (demand only, ``cache.pin_demand_set=false``, 256 slots), started as its own
    process — Python start-up, imports, the load of the kernels compiled ahead of time, the trace
    load, the scenario build, the replay and the run folder — against a process that imports
    libCacheSim, opens the same access sequence (an oracleGeneral file, written once, not timed)
    and runs the same policy on it. The two run in turn, ``--pairs`` times; the figure is the
    median of the pair ratios *libCacheSim wall / specmd wall* (>= 1.0: specmd is no slower).
    Their miss counts must be equal (exit 1 otherwise). Peak RSS of each process from
    ``os.wait4``.
(c) **The stack's ceiling**, the most (a) could reach: a process that only imports what
    the CLI and its config stand on (numpy, pydantic with a model built, typer's command
    machinery, PyYAML, rich), timed in each of
    (a)'s pairs, plus each policy's replay of a built scenario in one process (best of 3): no
    ``specmd replay`` can take less, so libCacheSim's wall over that sum bounds (a)'s ratio.
(b) **The default configuration** (least-stale + top-k + noisy-oracle, pinned demand sets,
    256 slots) in one process: the replay of an already built scenario, best of 3, in accesses
    per second (target >= 5M/s), next to the Python layer step's on a slice of the trace
    measured in the same run (the speed-up).

Prints figure, reference, ratio and verdict per line; ``--json`` adds the raw numbers.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

_HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(_HERE))
sys.path.insert(0, str(_HERE.parent / "tests"))

from process import timed  # noqa: E402
from replay_speed import make_trace_file  # noqa: E402
from settings import stated  # noqa: E402
from support import lcs  # noqa: E402

from specmd_sim import build_config, replay  # noqa: E402
from specmd_sim.scenario import build_scenario  # noqa: E402

SLOTS = 256
LCS_SCRIPT = """
import sys, libcachesim as lcs
path, n, policy, slots = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
reader = lcs.TraceReader(path, lcs.TraceType.ORACLE_GENERAL_TRACE)
cls = {"lru": lcs.LRU, "fifo": lcs.FIFO, "belady": lcs.Belady}[policy]
ratio, _ = cls(slots, hashpower=16).process_trace(reader)
print(round(ratio * n))
"""
# what the CLI and its config stand on, as they use it: typer's command machinery (a pydantic
# adapter per option), pydantic's with one model built (without its plug-ins, as the CLI's
# process: cli.process_main), rich's tables
FLOOR_SCRIPT = """
import os
os.environ["PYDANTIC_DISABLE_PLUGINS"] = "__all__"
import numpy, yaml, rich.table, typer.main, typer._adapters
from pydantic import BaseModel
class M(BaseModel):
    x: int
M(x=1)
"""


def whole_process(trace: Path, ids_file: Path, n: int, policy: str, pairs: int,
                  folder: Path) -> dict[str, Any]:  # fmt: skip
    specmd = [sys.executable, "-m", "specmd_sim", "replay", "--trace", str(trace),
              "--eviction", policy, "--prefetch", "none", "--cache", str(SLOTS),
              "--set", "cache.pin_demand_set=false", "--json",
              "--out", str(folder / policy)]  # fmt: skip
    ref = [sys.executable, "-c", LCS_SCRIPT, str(ids_file), str(n), policy, str(SLOTS)]
    floor = [sys.executable, "-c", FLOOR_SCRIPT]
    rows = []
    # Both kinds of process read their modules' bytecode from a folder of their own, written by
    # a warm-up of each (which also builds the kernels ahead of time and fills the page cache):
    # an installed package has its bytecode, but PYTHONDONTWRITEBYTECODE (set on some machines)
    # would leave a working tree's modules to be compiled from source in every process (~0.5 s
    # here).
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(folder / "bytecode")
    timed([*specmd, "--set", "seed=1"], env)
    timed(ref, env)
    for _ in range(pairs):
        a_wall, a_peak, a_out = timed(specmd, env)
        b_wall, b_peak, b_out = timed(ref, env)
        floor_s = timed(floor, env)[0]
        misses_a = json.loads(a_out)["misses"]
        misses_b = int(b_out.strip())
        rows.append({"specmd_s": a_wall, "specmd_peak_mib": a_peak, "libcachesim_s": b_wall,
                     "libcachesim_peak_mib": b_peak, "ratio": b_wall / a_wall,
                     "misses": misses_a, "misses_libcachesim": misses_b,
                     "import_floor_s": floor_s})  # fmt: skip
    return {"policy": policy, "pairs": rows,
            "ratio": statistics.median(r["ratio"] for r in rows),
            "equal": all(r["misses"] == r["misses_libcachesim"] for r in rows)}  # fmt: skip


def prepare(folder: Path, accesses: int) -> None:
    """The trace and its access sequence as an oracleGeneral file, into ``folder``."""
    trace = make_trace_file(accesses, 0, folder)
    config = build_config({"trace": str(trace), "eviction": "lru", "prefetch": "none",
                           "cache": {"capacity": SLOTS, "pin_demand_set": False}})  # fmt: skip
    ids = np.asarray(build_scenario(config).demand.keys, np.int64)
    lcs.write_oracle_general(ids, folder / "ids.oracleGeneral.bin")


def replay_in_process(trace: Path, policy: str) -> float:
    """Best of 3 of ``policy``'s replay of (a)'s scenario, built once, in this process."""
    config = build_config({"trace": str(trace), "eviction": policy, "prefetch": "none",
                           "cache": {"capacity": SLOTS, "pin_demand_set": False}})  # fmt: skip
    scenario = build_scenario(config)
    return min(_seconds(lambda: replay(scenario)) for _ in range(3))


def default_throughput(trace: Path, folder: Path) -> dict[str, Any]:
    """The default configuration's compiled replay on ``trace``, and the Python layer step
    against the compiled path on a small trace of the same shape (the whole one would take the
    Python engine minutes)."""
    scenario = build_scenario(build_config(stated({"trace": str(trace),
                                                  "cache": {"capacity": SLOTS}})))  # fmt: skip
    accesses = int(scenario.demand.keys.size)
    best = min(_seconds(lambda: replay(scenario)) for _ in range(3))
    small_trace = make_trace_file(100_000, 1, folder / "small")
    small = build_scenario(build_config(stated({"trace": str(small_trace),
                                                "cache": {"capacity": SLOTS}})))  # fmt: skip
    python_s = _seconds(lambda: replay(small, compiled=False))
    compiled_s = min(_seconds(lambda: replay(small)) for _ in range(3))
    return {"accesses": accesses, "replay_s": best, "accesses_per_s": accesses / best,
            "hit_rate": replay(scenario).metrics["hit_rate"],
            "python_slice_accesses": int(small.demand.keys.size),
            "python_slice_s": python_s, "compiled_slice_s": compiled_s}  # fmt: skip


def _seconds(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--accesses", type=int, default=10_240_000)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--prepare", type=Path, help=argparse.SUPPRESS)  # (the child's part)
    args = parser.parse_args()
    if args.prepare:
        prepare(args.prepare, args.accesses)
        return 0
    with tempfile.TemporaryDirectory(prefix="specmd-bench-") as tmp:
        folder = Path(tmp)
        # the inputs are made in a process of their own: a child's peak RSS counts the memory
        # its parent held when it was started, so this one stays small until (b)
        subprocess.run([sys.executable, __file__, "--prepare", str(folder),
                        "--accesses", str(args.accesses)], check=True)  # fmt: skip
        trace, ids_file = folder / "olmoe_decode.npz", folder / "ids.oracleGeneral.bin"
        ids = np.memmap(ids_file, lcs.ORACLE_GENERAL, mode="r")
        out: dict[str, Any] = {"accesses": int(ids.size), "slots": SLOTS, "whole_process": []}
        ok = True
        for policy in ("lru", "fifo", "belady"):
            row = whole_process(trace, ids_file, ids.size, policy, args.pairs, folder)
            out["whole_process"].append(row)
            ok &= row["equal"]
            median = statistics.median(r["specmd_s"] for r in row["pairs"])
            ref = statistics.median(r["libcachesim_s"] for r in row["pairs"])
            peak = max(r["specmd_peak_mib"] for r in row["pairs"])
            verdict = "met" if row["ratio"] >= 1.0 else "NOT met"
            print(f"(a) {policy:7s} whole process: specmd {median:.2f} s ({peak:.0f} MiB peak), "
                  f"libCacheSim {ref:.2f} s; ratio {row['ratio']:.2f} (target >= 1.0: {verdict});"
                  f" misses equal: {row['equal']}", file=sys.stderr)  # fmt: skip
        for row in out["whole_process"]:  # (c), now that no more processes are measured
            policy, pairs = row["policy"], row["pairs"]
            row["replay_in_process_s"] = replay_in_process(trace, policy)
            floor = statistics.median(r["import_floor_s"] for r in pairs)
            ref = statistics.median(r["libcachesim_s"] for r in pairs)
            row["ceiling"] = ref / (floor + row["replay_in_process_s"])
            print(f"(c) {policy:7s} the stack's ceiling: libCacheSim {ref:.2f} s / (imports of "
                  f"numpy, pydantic, typer, PyYAML, rich {floor:.2f} s + replay in process "
                  f"{row['replay_in_process_s']:.2f} s) = {row['ceiling']:.2f}",
                  file=sys.stderr)  # fmt: skip
        (folder / "small").mkdir()
        d = default_throughput(trace, folder)
        out["default"] = d
        rate = d["accesses_per_s"] / 1e6
        speedup = d["python_slice_s"] / d["compiled_slice_s"]
        print(f"(b) default config: {d['accesses']} accesses replayed in {d['replay_s']:.2f} s = "
              f"{rate:.1f}M accesses/s (target >= 5M/s: {'met' if rate >= 5 else 'NOT met'}); "
              f"Python layer step on {d['python_slice_accesses']} accesses: "
              f"{d['python_slice_s']:.2f} s vs compiled {d['compiled_slice_s']:.3f} s "
              f"({speedup:.0f}x)", file=sys.stderr)  # fmt: skip
    if args.json:
        print(json.dumps(out, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

"""Issue #11, goal 5: span recording in bounded memory — the timing engine's peak memory with
spans, spilled to disk past a bound (the default) against kept in memory, at growing lengths.

Run from the repository root::

    python benchmarks/spans_memory.py                       # 3k, 6k and 12k tokens
    python benchmarks/spans_memory.py --tokens 1000 10000 --json

The DeepSeek-V3-shaped decode trace of ``scale.py`` at each size; ``simulate`` (default
policies, a 5% cache) runs in a process of its own three ways: without spans (the reference),
recording spans as by default (spilled to a temporary file past
``packed_rows.SPILL_BYTES`` of packed rows, spans and counters together, merged at the end a
block of ``MERGE_BYTES`` at a time and mapped), and recording them all in memory
(``spill_bytes`` larger than the run). Reported per run: wall seconds, peak RSS
(``os.wait4``), spans and counter samples; the spans' share is the peak less the reference's.
Verdict: with spilling the share stays within the recorder's bound — ``SPILL_BYTES`` x 9/8
(the rows held, with their arrays' headroom) + ``SPILL_BYTES`` (a run's sorted copy) + 4 x
``MERGE_BYTES`` (a merge's blocks, the rows taken, their sorted copy, the sort's keys and order)
+ 16 MiB (the tuples waiting to be packed) — at every size, where in memory it grows with the
run.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

_HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(_HERE))

from process import timed  # noqa: E402
from scale import _in_child  # noqa: E402
from settings import STATED  # noqa: E402

from specmd_sim import packed_rows  # noqa: E402

CHILD = """
import functools, json, sys
import specmd_sim.engine.sim.run as sim_run
from specmd_sim import build_config, simulate
from specmd_sim.timeline import SpanRecorder
trace, mode = sys.argv[1], sys.argv[2]
config = {"trace": trace, "cache": {"capacity": "5%"}, **json.loads(sys.argv[3])}
if mode == "none":
    config["timing"] = {"record_spans": False}
if mode == "memory":
    sim_run.SpanRecorder = functools.partial(SpanRecorder, spill_bytes=1 << 50)
result = simulate(build_config(config))
spans = 0 if result.spans is None else int(result.spans.size)
samples = sum(int(c.size) for c in result.counters.values())
print(json.dumps({"spans": spans, "samples": samples, "series": len(result.counters),
                  "accesses": int(result.metrics["accesses"])}))
"""


def run_one(trace: Path, mode: str) -> dict[str, Any]:
    wall, peak, out = timed([sys.executable, "-c", CHILD, str(trace), mode, json.dumps(STATED)])
    return {"wall_s": wall, "peak_mib": peak, **json.loads(out)}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[3000, 6000, 12000])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows, ok = [], True
    with tempfile.TemporaryDirectory(prefix="specmd-spans-") as tmp:
        for tokens in sorted(args.tokens):
            trace = _in_child(tokens, Path(tmp))
            runs = {mode: run_one(trace, mode) for mode in ("none", "spill", "memory")}
            trace.unlink()
            base = runs["none"]["peak_mib"]
            spill, merge = packed_rows.SPILL_BYTES, packed_rows.MERGE_BYTES
            bound = (spill * 9 / 8 + spill + 4 * merge + (16 << 20)) / 2**20
            row = {"tokens": tokens, "bound_mib": bound, **runs}
            for mode in ("spill", "memory"):
                share = runs[mode]["peak_mib"] - base
                row[f"{mode}_share_mib"] = share
                print(f"{tokens:>6} tokens, {runs[mode]['spans']:,} spans and "
                      f"{runs[mode]['samples']:,} samples, {mode:6s}: {runs[mode]['wall_s']:.1f} s,"
                      f" peak {runs[mode]['peak_mib']:.0f} MiB = no spans' {base:.0f} + {share:.0f}"
                      f" ({share * 2**20 / max(runs[mode]['spans'], 1):.0f} B a span)",
                      file=sys.stderr)  # fmt: skip
            within = row["spill_share_mib"] <= bound
            ok &= within
            print(f"{tokens:>6} tokens: spilled share {row['spill_share_mib']:.0f} MiB, bound "
                  f"{bound:.0f} MiB: {'within' if within else 'NOT within'}",
                  file=sys.stderr)  # fmt: skip
            rows.append(row)
    if args.json:
        print(json.dumps({"rows": rows}, indent=2))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())

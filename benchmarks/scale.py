"""Issue #11, goal 4: cost against trace length, up to 100k tokens x 58 layers x top-8.

Run from the repository root::

    python benchmarks/scale.py                          # replay defaults: 1k, 10k, 100k tokens
    python benchmarks/scale.py --engine simulate --tokens 1000 10000
    python benchmarks/scale.py --engine simulate --spans --tokens 1000 3000
    python benchmarks/scale.py --json

A DeepSeek-V3-shaped decode trace (58 MoE layers x 256 experts, top-8, 8 requests; routing
skewed towards a per-layer random order of experts, distinct experts per token) is written
uncompressed for each size (not timed). Each size then runs as its own process — ``specmd
replay`` (default) or ``specmd run --set timing.record_spans=false`` (``--engine simulate``;
with ``--spans``, ``specmd run`` recording spans, so the run also writes ``spans.npz``, the trace
and the timeline page, which the figures include), with the default policies and a 5% cache —
and is timed from outside: wall seconds and peak RSS (``os.wait4``). The fitted exponent is the
slope of log(wall) against log(tokens) between the two largest sizes (1.0 = linear; start-up
weighs on the smallest).

Targets at 100k tokens (46.4M accesses): replay < 60 s and < 2 GiB; the timing engine
< 10 minutes and < 4 GiB without spans (goal 4). With spans there is no figure to meet here
(goal 5, the recording's bounded memory, is ``spans_memory.py``'s; these figures include
writing the run folder).
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from process import timed
from settings import STATED_SET

from specmd_sim import make_trace, save_trace

LAYERS, EXPERTS, TOP_K, REQUESTS = 58, 256, 8, 8
TARGETS = {"replay": (60.0, 2048.0), "simulate": (600.0, 4096.0)}  # seconds, MiB at 100k


def make_scale_trace(tokens: int, folder: Path, seed: int = 0) -> Path:
    """The DeepSeek-V3-shaped trace of ``tokens`` decode tokens (built in blocks of tokens, so
    its memory is the trace's own)."""
    rng = np.random.default_rng(seed)
    ranks = np.argsort(rng.random((LAYERS, EXPERTS)), axis=1)  # popularity order per layer
    log_w = -0.8 * np.log1p(ranks.astype(np.float64))
    experts = np.empty((tokens, LAYERS, TOP_K), np.int16)
    for lo in range(0, tokens, 2048):
        hi = min(tokens, lo + 2048)
        gumbel = -np.log(-np.log(rng.random((hi - lo, LAYERS, EXPERTS))))
        top = np.argpartition(-(log_w + gumbel), TOP_K, axis=2)[:, :, :TOP_K]
        experts[lo:hi] = top
    request = np.repeat(np.arange(REQUESTS), math.ceil(tokens / REQUESTS))[:tokens]
    trace = make_trace(experts, model="deepseek-v3", num_experts=EXPERTS, request=request)
    return save_trace(trace, folder / f"scale_{tokens}.npz", compress=False)


def run_one(engine: str, trace: Path, out: Path, spans: bool = False) -> dict[str, Any]:
    command = "replay" if engine == "replay" else "run"
    cmd = [sys.executable, "-m", "specmd_sim", command, "--trace", str(trace), "--cache", "5%",
           "--json", "--out", str(out), *STATED_SET]  # fmt: skip
    if engine == "simulate" and not spans:
        cmd += ["--set", "timing.record_spans=false"]
    wall, peak, stdout = timed(cmd)
    metrics = json.loads(stdout)
    return {"wall_s": wall, "peak_mib": peak, "accesses": metrics["accesses"],
            "hit_rate": metrics["hit_rate"]}  # fmt: skip


def _in_child(tokens: int, folder: Path) -> Path:
    """:func:`make_scale_trace` in a process of its own: a child's peak RSS counts the memory
    its parent held when it was started, so this one stays small."""
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); from pathlib import Path; "
        "from scale import make_scale_trace; make_scale_trace(int(sys.argv[2]), Path(sys.argv[3]))"
    )
    here = str(Path(__file__).resolve().parent)
    subprocess.run([sys.executable, "-c", code, here, str(tokens), str(folder)], check=True)
    return folder / f"scale_{tokens}.npz"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--engine", choices=("replay", "simulate"), default="replay")
    parser.add_argument("--tokens", type=int, nargs="+", default=[1000, 10_000, 100_000])
    parser.add_argument(
        "--spans",
        action="store_true",
        help="--engine simulate recording spans (the run folder's outputs too)",
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.spans and args.engine != "simulate":
        parser.error("--spans: expected --engine simulate (replay records no spans)")
    label = f"{args.engine}{' with spans' if args.spans else ''}"
    rows = []
    with tempfile.TemporaryDirectory(prefix="specmd-scale-") as tmp:
        folder = Path(tmp)
        for tokens in sorted(args.tokens):
            trace = _in_child(tokens, folder)
            run = run_one(args.engine, trace, folder / f"run{tokens}", args.spans)
            row = {"tokens": tokens, **run}
            trace.unlink()
            rows.append(row)
            print(f"{label} {tokens:>7} tokens ({row['accesses']:,} accesses): "
                  f"{row['wall_s']:.1f} s, {row['peak_mib']:.0f} MiB peak, "
                  f"{row['accesses'] / row['wall_s'] / 1e6:.2f}M accesses/s",
                  file=sys.stderr)  # fmt: skip
    out: dict[str, Any] = {"engine": args.engine, "spans": args.spans, "rows": rows}
    if len(rows) >= 2:
        a, b = rows[-2], rows[-1]
        slope = math.log(b["wall_s"] / a["wall_s"]) / math.log(b["tokens"] / a["tokens"])
        out["exponent"] = slope
        print(f"fitted exponent {a['tokens']}->{b['tokens']} tokens: {slope:.2f}", file=sys.stderr)
    last = rows[-1]
    if last["tokens"] == 100_000 and not args.spans:
        limit_s, limit_mib = TARGETS[args.engine]
        met = last["wall_s"] < limit_s and last["peak_mib"] < limit_mib
        print(f"target at 100k tokens: < {limit_s:.0f} s and < {limit_mib:.0f} MiB: "
              f"{'met' if met else 'NOT met'}", file=sys.stderr)  # fmt: skip
    if args.json:
        print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

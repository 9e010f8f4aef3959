"""Bounded outputs: the timing engine's run folder at ~2,000 tokens (issue #11, goal 5).

    python benchmarks/outputs_size.py                  # 4 requests x (16 + 484) tokens
    python benchmarks/outputs_size.py --tokens 500 --json

A synthetic OLMoE trace of ``--tokens`` tokens (``PRESETS["olmoe"]``: 16 prompt tokens per
request, the rest decode; token-serial prefill, so a pass per token) is simulated with the default
config; the CPU time ``simulate`` takes is the reference. The run folder is then written as
``specmd run`` writes it (``write_run`` with the timeline page) and each file's size reported,
with the folder's bytes per token. Then, from the folder's spans and result as ``specmd`` reads
them, ``write_chrome_trace`` alone: its CPU and wall time (best of ``--repeat``) and the peak
of the memory it allocates (``tracemalloc``, numpy's arrays included, in one more write). The
trace is checked to parse (gunzip + JSON) into one event per span.

Verdict: writing the trace takes well under the simulation's own time, at most :data:`TARGET`
of it in CPU seconds. Wall times, printed too, swing with the machine's load; the CPU time
counts the compressing thread as well, which runs alongside the formatting where a core is free.
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from settings import stated

from specmd_sim import SimConfig, simulate
from specmd_sim.report import RunData, write_timeline
from specmd_sim.runs import (
    TIMELINE_FILE,
    TRACE_FILE,
    chrome_trace_options,
    read_spans,
    write_run,
)
from specmd_sim.timeline import TRACE_GZIP_LEVEL, write_chrome_trace
from specmd_sim.traces import PRESETS, generate_trace, save_trace

TARGET = 0.1
"""The most the trace may take to write, as a share of the simulation's time."""
REQUESTS, PROMPT = 4, 16


def measure_trace_write(run_dir: Path, repeat: int, level: int) -> dict[str, Any]:
    """From the folder's spans and result: the trace's write time and CPU time (the
    compressing thread's included; best of ``repeat`` each), then, in one more write under
    ``tracemalloc``, the peak of the memory allocated while writing."""
    recording = read_spans(run_dir / "spans.npz")
    options = chrome_trace_options(json.loads((run_dir / "result.json").read_text()), recording)
    times, cpu = [], []
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / TRACE_FILE
        for _ in range(repeat):
            started, cpu_started = time.perf_counter(), time.process_time()
            write_chrome_trace(path, recording.spans, recording.lanes, level=level, **options)
            times.append(time.perf_counter() - started)
            cpu.append(time.process_time() - cpu_started)
        tracemalloc.start()
        write_chrome_trace(path, recording.spans, recording.lanes, level=level, **options)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return {"write_s": min(times), "cpu_s": min(cpu), "peak_mb": peak / 2**20}


def run(args: argparse.Namespace) -> dict[str, Any]:
    decode = max(0, -(-args.tokens // REQUESTS) - PROMPT)
    params = PRESETS["olmoe"].model_copy(
        update={"num_requests": REQUESTS, "prompt_tokens": PROMPT, "decode_tokens": decode}
    )
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        trace = save_trace(generate_trace(params, args.seed), folder / "trace.npz")
        started, cpu_started = time.perf_counter(), time.process_time()
        config = SimConfig.model_validate(stated({"trace": str(trace), "seed": args.seed}))
        result = simulate(config)
        simulate_s, simulate_cpu_s = (
            time.perf_counter() - started,
            time.process_time() - cpu_started,
        )
        assert result.spans is not None, "the timing engine records spans by default"
        spans, tokens = len(result.spans), REQUESTS * (PROMPT + decode)
        run_dir = folder / "run"

        def page(out: Path) -> dict[str, Path]:  # as specmd run writes it
            write_timeline(RunData.from_result(result, run_dir), out / TIMELINE_FILE)
            return {"timeline": out / TIMELINE_FILE}

        started = time.perf_counter()
        files = write_run(run_dir, result, page)
        folder_s = time.perf_counter() - started
        sizes = {p.name: p.stat().st_size for p in sorted(run_dir.iterdir())}
        writing = measure_trace_write(run_dir, args.repeat, args.level)
        text = gzip.decompress((run_dir / TRACE_FILE).read_bytes())
        events = json.loads(text)["traceEvents"]
        spans_ok = sum(ev["ph"] == "X" and ev["cat"] != "pass" for ev in events) == spans
    ratio = writing["cpu_s"] / simulate_cpu_s
    return {
        "tokens": tokens,
        "spans": spans,
        "simulate_s": simulate_s,
        "simulate_cpu_s": simulate_cpu_s,
        "run_folder_s": folder_s,
        "trace_write_s": writing["write_s"],
        "trace_write_cpu_s": writing["cpu_s"],
        "trace_write_peak_mb": writing["peak_mb"],
        "trace_gzip_level": args.level,
        "trace_json_bytes": len(text),
        "files": sizes,
        "folder_bytes": sum(sizes.values()),
        "folder_bytes_per_token": sum(sizes.values()) / tokens,
        "trace_bytes_per_token": sizes[TRACE_FILE] / tokens,
        "ratio": ratio,
        "wall_ratio": writing["write_s"] / simulate_s,
        "verdict": "met" if ratio <= TARGET else "not met",
        "trace_parses_to_every_span": spans_ok,
        "written": sorted(p.name for p in files.values()),
        "python": sys.version.split()[0],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=2_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--level", type=int, default=TRACE_GZIP_LEVEL, help="gzip level")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    res = run(args)
    if args.json:
        print(json.dumps(res, indent=2))
    else:
        files = "".join(f"\n    {name:<16}{size:>14,} B" for name, size in res["files"].items())
        print(
            f"{res['tokens']:,} tokens, {res['spans']:,} spans"
            f"\n  simulate, CPU (reference)  {res['simulate_cpu_s']:8.2f} s   (wall "
            f"{res['simulate_s']:.2f} s)"
            f"\n  trace write, CPU (figure)  {res['trace_write_cpu_s']:8.2f} s   (wall "
            f"{res['trace_write_s']:.2f} s; gzip level {res['trace_gzip_level']}, best of "
            f"{args.repeat})"
            f"\n  run folder, all of it      {res['run_folder_s']:8.2f} s   (wall, with the page)"
            f"\n  trace write peak memory    {res['trace_write_peak_mb']:8.1f} MiB (tracemalloc)"
            f"\n  trace JSON, uncompressed   {res['trace_json_bytes']:,} B"
            f"\n  folder files:{files}"
            f"\n  folder {res['folder_bytes']:,} B = {res['folder_bytes_per_token']:,.0f} B/token"
            f" (trace {res['trace_bytes_per_token']:,.0f} B/token)"
            f"\n  ratio trace write / simulate, CPU {res['ratio']:.3f} (wall "
            f"{res['wall_ratio']:.3f}; target <= {TARGET}) -> {res['verdict']}"
            "\n  trace parses to one event per span: "
            f"{res['trace_parses_to_every_span']}"
        )
    return 0 if res["trace_parses_to_every_span"] else 1


if __name__ == "__main__":
    raise SystemExit(main())

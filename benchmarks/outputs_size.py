"""Outputs at engine speed (issue #38): a run's folder against its simulation, whole process.

    python benchmarks/outputs_size.py                      # 4,000 and 40,000 tokens
    python benchmarks/outputs_size.py --tokens 4000 --json

For each size, a synthetic OLMoE trace of one request (16 prompt tokens, the rest decode; 128
accesses a token) is run with every setting stated (:mod:`settings`: the benchmarks' stated
settings, prompts token by token and the noisy oracle at 0.9; h100-pcie, a 5% cache,
least-stale eviction, top-k prefetching; seed 0), two ways:

- **whole process**: ``specmd run --config ... --out ...`` in a process of its own, its wall
  time, as a user waits for it (Python's start and imports, the inputs, the engine, every
  output): the accesses per second it makes; and in it, the seconds its run folder takes
  (``write_run``, the timeline page beside it, timed in that process: ``timed_run.py``), as a
  share of its wall time (the writers' compiled code is loaded beside the engine, as ``specmd
  run`` loads it: ``jit.load_cached``). Each module's bytecode is compiled, as an
  installed package's is, by a first run not timed (under a folder of the benchmark's own,
  ``PYTHONPYCACHEPREFIX``, whatever ``PYTHONDONTWRITEBYTECODE`` says);
- **by part**, in this process (prepared as ``specmd run`` prepares its own:
  ``cli.prepare_process``, the allocator's settings and numpy's huge pages), on the same run:
  the engine (``simulate``), the run folder as ``specmd run`` writes it (``write_run`` with the
  timeline page: the spans and the trace in threads beside the page), then each output written
  alone: ``result.json``, ``spans.npz``, the Perfetto trace, the timeline page; each one's
  seconds, bytes and bytes per access. Each call is given the run's recording as the engine
  leaves it, nothing derived from it yet (the served classes and lanes' sub-tracks the trace
  and the page share are derived once a recording: each call derives them, as ``specmd run``
  does once). These are warm: the compiled code loaded, the memory touched before, by the calls
  before (the best of ``--repeat``); a run folder in the whole process takes more (the ``run
  folder`` lines);
- **the page in a browser**: the whole process's ``timeline.html`` opened in headless Chromium
  (where it is installed) until every figure is drawn, on the page's own clock.

Verdicts (the issue's targets, for the 4,000-token run on this 2-core machine class): the
whole process at least 250k accesses/s; the outputs (the run folder's seconds in the whole
process) at most 25% of its wall time, the median of the ``--repeat`` runs' shares; the engine
alone at least 400k accesses/s; the trace at most 20 bytes an access; the timeline page at
most 4 MB, open and drawn in under 1.5 s. Seconds swing with the machine's load: each other
one is the best of ``--repeat``.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

# ruff: noqa: E402 (the imports below come after the process is prepared)
from specmd_sim.cli import prepare_process  # (imports no numpy)

ENVIRONMENT = dict(os.environ)  # (the whole processes': each prepares its own, or does not)
prepare_process(["run"])  # (this process as ``specmd run``'s: the parts below measured alike)

import yaml
from process import timed
from settings import stated

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from support.browser import Browser, find_chromium  # the tests' harness

from specmd_sim import SimConfig, gz, simulate
from specmd_sim.perfetto import write_perfetto_trace
from specmd_sim.report import RunData, write_timeline
from specmd_sim.runs import (
    TIMELINE_FILE,
    TRACE_FILE,
    trace_options,
    write_run,
    write_spans,
)
from specmd_sim.timeline import Recording
from specmd_sim.traces import PRESETS, generate_trace, save_trace

PROMPT = 16
ACCESSES_PER_TOKEN = 16 * 8  # OLMoE: 16 layers, top-8
TARGETS = {
    "whole_accesses_per_s": 250_000,
    "outputs_share": 0.25,
    "engine_accesses_per_s": 400_000,
    "trace_bytes_per_access": 20,
    "page_bytes": 4_000_000,
    "page_drawn_s": 1.5,
}
AT_MOST = {
    "outputs_share",
    "trace_bytes_per_access",
    "page_bytes",
    "page_drawn_s",
}  # (the others: at least)


def _best(repeat: int, fn: Callable[[], Any]) -> tuple[float, Any]:
    times, out = [], None
    for _ in range(repeat):
        started = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - started)
    return min(times), out


def measure(tokens: int, repeat: int, folder: Path) -> dict[str, Any]:
    params = PRESETS["olmoe"].model_copy(
        update={"num_requests": 1, "prompt_tokens": PROMPT, "decode_tokens": tokens - PROMPT}
    )
    trace = save_trace(generate_trace(params, 0), folder / f"trace-{tokens}.npz")
    settings = stated(
        {
            "trace": str(trace),
            "seed": 0,
            "hardware": "h100-pcie",
            "cache": {"capacity": "5%"},
            "eviction": {"kind": "least-stale"},
            "prefetch": {"kind": "top-k"},
        }
    )
    config = folder / f"config-{tokens}.yaml"
    config.write_text(yaml.safe_dump(settings))
    accesses = tokens * ACCESSES_PER_TOKEN

    # Python's bytecode of each module as an installed package has it (pip compiles it): kept
    # under a prefix of the benchmark's own, written by a first run not timed, even where
    # PYTHONDONTWRITEBYTECODE is set (else each run compiles every module, ~0.15 s here)
    env = {k: v for k, v in ENVIRONMENT.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["PYTHONPYCACHEPREFIX"] = str(folder / "bytecode")

    seconds_file = folder / "write_run-seconds"
    driver = Path(__file__).with_name("timed_run.py")
    runs_made = itertools.count()

    def whole() -> tuple[float, float]:
        """``specmd run``'s wall time, and its run folder's (``write_run``'s) in it; each run
        to a new folder (replacing one would add its removal)."""
        out = folder / f"run-{tokens}-{next(runs_made)}"
        seconds_file.unlink(missing_ok=True)  # (a run that fails leaves none: no stale seconds)
        cmd = [sys.executable, str(driver), str(seconds_file), "run", "--config", str(config)]
        wall, _, _ = timed([*cmd, "--out", str(out)], env)
        return wall, float(seconds_file.read_text())

    whole()
    runs = [whole() for _ in range(repeat)]
    whole_s = min(wall for wall, _ in runs)
    shares = sorted(folder_s / wall for wall, folder_s in runs)
    page_drawn_s = None
    if find_chromium() is not None:
        with Browser() as browser:
            drawn = [
                browser.drawn_in(folder / f"run-{tokens}-0" / TIMELINE_FILE) for _ in range(repeat)
            ]
        page_drawn_s = min(drawn)
    cfg = SimConfig.model_validate(settings)
    engine_s, result = _best(repeat, lambda: simulate(cfg))

    def fresh() -> Recording:
        """The result's recording as the engine gives it: nothing derived from it yet (what
        the trace and the page share is derived once a recording, and must be in each call)."""
        recording = dataclasses.replace(result).recording()
        assert recording is not None
        return recording

    def trace(path: Path) -> None:
        recording = fresh()
        options = trace_options(json.loads(result.to_json()), recording)
        write_perfetto_trace(path, recording.spans, recording.lanes, **options)

    parts: dict[str, tuple[Path, Callable[[Path], Any]]] = {
        "result.json": (folder / "result.json", result.write),
        "spans.npz": (folder / "spans.npz", lambda p: write_spans(p, fresh())),
        TRACE_FILE: (folder / TRACE_FILE, trace),
        TIMELINE_FILE: (
            folder / TIMELINE_FILE,
            lambda p: write_timeline(RunData(json.loads(result.to_json()), fresh()), p),
        ),
    }
    outputs = {}
    for name, (path, write) in parts.items():
        seconds, _ = _best(repeat, lambda path=path, write=write: write(path))
        size = path.stat().st_size
        outputs[name] = {"s": seconds, "bytes": size, "bytes_per_access": size / accesses}

    run_dir = folder / f"folder-{tokens}"

    def run_folder() -> None:
        """As ``specmd run`` writes it: the spans and the trace beside the page, of a result
        whose recording has nothing derived yet."""
        again = dataclasses.replace(result)

        def page(out: Path, written: dict[str, Any]) -> dict[str, Path]:
            write_timeline(RunData(written, again.recording()), out / TIMELINE_FILE)
            return {"timeline": out / TIMELINE_FILE}

        write_run(run_dir, again, page)

    warm_s, _ = _best(repeat, run_folder)
    res = {
        "tokens": tokens,
        "accesses": accesses,
        "spans": int(result.spans.size),
        "settings": {k: v for k, v in settings.items() if k != "trace"},
        "whole_s": whole_s,
        "whole_accesses_per_s": accesses / whole_s,
        "engine_s": engine_s,
        "engine_accesses_per_s": accesses / engine_s,
        "outputs": outputs,
        "outputs_whole_s": [folder_s for _, folder_s in runs],
        "outputs_shares": shares,
        "outputs_share": statistics.median(shares),
        "outputs_warm_s": warm_s,
        "outputs_alone_s": sum(o["s"] for o in outputs.values()),
        "trace_bytes_per_access": outputs[TRACE_FILE]["bytes_per_access"],
        "page_bytes": outputs[TIMELINE_FILE]["bytes"],
        "page_drawn_s": page_drawn_s,
        "compressor": gz.compressor()[0],
    }
    res["verdicts"] = {
        name: "not measured (no Chromium)"
        if res[name] is None
        else "met"
        if (res[name] <= target if name in AT_MOST else res[name] >= target)
        else "not met"
        for name, target in TARGETS.items()
    }
    return res


def report(res: dict[str, Any]) -> str:
    lines = [
        f"{res['tokens']:,} tokens ({res['accesses']:,} accesses, {res['spans']:,} spans); "
        f"settings: {json.dumps(res['settings'], sort_keys=True)}; the trace compressed by "
        f"{res['compressor']}",
        f"  whole process (specmd run)  {res['whole_s']:7.2f} s  "
        f"{res['whole_accesses_per_s']:>10,.0f} accesses/s",
        f"  engine (simulate)           {res['engine_s']:7.2f} s  "
        f"{res['engine_accesses_per_s']:>10,.0f} accesses/s",
    ]
    for name, o in res["outputs"].items():
        lines.append(
            f"  {name:<27} {o['s']:7.2f} s  {o['bytes']:>12,} B  "
            f"{o['bytes_per_access']:6.1f} B/access"
        )
    shares = ", ".join(f"{share:.1%}" for share in res["outputs_shares"])
    seconds = ", ".join(f"{s:.2f}" for s in res["outputs_whole_s"])
    lines += [
        f"  run folder in the whole process {seconds} s: {shares} of each one's wall time",
        f"  run folder in this process  {res['outputs_warm_s']:7.2f} s  (warm: the parts "
        f"alone {res['outputs_alone_s']:.2f} s)",
    ]
    for name, target in TARGETS.items():
        value = "-" if res[name] is None else f"{res[name]:,.3g}"
        lines.append(f"  {name}: {value} (target {target:,}) -> {res['verdicts'][name]}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[4_000, 40_000])
    parser.add_argument(
        "--repeat", type=int, default=2,
        help="runs of each: the best of their seconds, the median of the shares",
    )  # fmt: skip
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        for tokens in args.tokens:
            res = measure(tokens, args.repeat, Path(tmp))
            results.append(res)
            if not args.json:
                print(report(res), flush=True)
    if args.json:
        print(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

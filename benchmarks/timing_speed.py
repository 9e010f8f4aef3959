"""Timing-engine speed (issue #11, goal 3): accesses per second of ``simulate`` on five scenarios.

Run from the repository root::

    python benchmarks/timing_speed.py [--repeat 3] [--only olmoe mixtral ...] [--json]

Per scenario (its scenario built first, not timed; best CPU time of ``--repeat`` runs each,
the two engines alternately): ``simulate`` as it runs by default — on the compiled core where
that covers the run (:mod:`specmd_sim.engine.sim.compiled`), else on SimPy — and on SimPy
(``compiled=False``), whose results must be the same (every field, spans and counters: exit 1
otherwise); accesses per second of both and their ratio, SimPy's events per access and per
second, and the events per second of bare SimPy (one process yielding timeouts) measured in
the same run. CPU time (``time.process_time``), not wall time: on a shared machine it varies
less. The default engine's ratio against :data:`BASELINE` (the engine before its speed-up,
measured on the same machine) is printed raw and normalised by bare SimPy's speed in each run,
which cancels most of the difference between machines and loads; the verdict compares with the
issue's targets: 10x the baseline on every scenario, and 200,000 accesses/s on OLMoE.

Events are counted from SimPy's event-id counter (``Environment._eid``), read after the run:
every event the run scheduled, at no cost to the run.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import simpy
from settings import stated

from specmd_sim import SimConfig, save_trace, simulate
from specmd_sim.engine.sim.compiled import compiled_unsupported
from specmd_sim.scenario import build_runs, build_scenario
from specmd_sim.traces.synthetic import SyntheticParams, generate

# Before the speed-up (the engine of commit 3d1f459), 2026-12-01, on the development machine
# (2 vCPUs, x86_64, Python 3.11.7, SimPy 4.1.2, shared with other jobs: figures vary by +-20 %
# from run to run): best CPU time of 2 runs, interleaved with the sped-up engine in one process.
# Per scenario: accesses/s, SimPy events per access, bare SimPy events/s measured alongside.
BASELINE_DATE = "2026-12-01"
BASELINE: dict[str, tuple[float, float, float]] = {
    "olmoe": (12_908.0, 9.48, 1_055_439.0),
    "mixtral": (7_518.0, 12.89, 1_124_208.0),
    "batch8": (17_415.0, 9.23, 1_240_701.0),
    "hgx8": (8_897.0, 11.20, 1_114_797.0),
    "dsv3": (12_793.0, 8.29, 1_019_148.0),
}
TARGET_RATIO = 10.0
TARGET_OLMOE = 200_000.0  # accesses/s on the default scenario


def scenarios(folder: Path) -> dict[str, tuple[str, Callable[[], SimConfig]]]:
    """The issue's five scenarios (DeepSeek-V3: a synthetic trace written to ``folder``)."""

    def deepseek() -> SimConfig:
        path = folder / "deepseek_v3_200.npz"
        if not path.exists():
            params = SyntheticParams(
                model="deepseek-v3", num_requests=2, prompt_tokens=20, decode_tokens=80,
                popularity_skew=8.0, working_set_size=8, working_set_boost=4.0, repeat_prob=0.1,
                predictor_accuracy=0.85, lookahead=1,
            )  # fmt: skip
            save_trace(generate(params, 0), path)
        return SimConfig.model_validate(stated({"trace": str(path)}))

    return {
        "olmoe": ("OLMoE default", lambda: SimConfig.model_validate(stated({}))),
        "mixtral": (
            "Mixtral-8x7B (mixtral-synthetic)",
            lambda: SimConfig.model_validate(stated({"trace": "mixtral-synthetic"})),
        ),
        "batch8": (
            "batch 8, Poisson arrivals 20/s",
            lambda: SimConfig.model_validate(
                stated(
                    {
                        "workload": {
                            "batch_size": 8,
                            "arrivals": "poisson",
                            "arrival_rate_per_s": 20.0,
                        }
                    }
                )
            ),
        ),
        "hgx8": (
            "hgx-h100-8gpu, 8 GPUs expert-sharded",
            lambda: SimConfig.model_validate(
                stated(
                    {"hardware": "hgx-h100-8gpu", "parallel": {"gpus": 8, "mode": "expert-sharded"}}
                )
            ),
        ),
        "dsv3": ("DeepSeek-V3, 200 tokens (synthetic)", deepseek),
    }


def bare_simpy(events: int = 300_000, repeat: int = 3) -> float:
    """Events per CPU second of one SimPy process yielding timeouts (best of ``repeat``)."""
    best = 0.0
    for _ in range(repeat):
        env = simpy.Environment()

        def ticks(env: simpy.Environment = env) -> Any:
            for _ in range(events):
                yield env.timeout(1.0)

        env.process(ticks())
        t0 = time.process_time()
        env.run()
        best = max(best, events / (time.process_time() - t0))
    return best


class _EnvironmentSpy:
    """Remembers the SimPy environments created while it is installed (simulate makes one)."""

    def __init__(self) -> None:
        self.made: list[simpy.Environment] = []
        self._init = simpy.Environment.__init__

    def __enter__(self) -> _EnvironmentSpy:
        spy, init = self, self._init

        def remembering(env: simpy.Environment, *args: Any, **kwargs: Any) -> None:
            init(env, *args, **kwargs)
            spy.made.append(env)

        simpy.Environment.__init__ = remembering  # type: ignore[method-assign,assignment]
        return self

    def __exit__(self, *exc: object) -> None:
        simpy.Environment.__init__ = self._init  # type: ignore[method-assign]


def bench(config: Callable[[], SimConfig], repeat: int) -> dict[str, Any]:
    """Both engines on the scenario, alternately: best CPU time of each, SimPy's events."""
    best = {"default": float("inf"), "simpy": float("inf")}
    results: dict[str, Any] = {}
    events = 0
    for _ in range(repeat):
        for engine in best:
            scenario = build_scenario(config())
            with _EnvironmentSpy() as spy:
                t0 = time.process_time()
                results[engine] = simulate(scenario, compiled=engine == "default")
                cpu = time.process_time() - t0
            if engine == "simpy":
                events = next(spy.made[0]._eid)
            best[engine] = min(best[engine], cpu)
    scenario = build_scenario(config())
    why = compiled_unsupported(scenario, build_runs(scenario, None, None))
    accesses = int(results["simpy"].metrics["accesses"])
    return {
        "accesses": accesses, "engine": "compiled" if why is None else "simpy",
        "not_compiled_because": why, "same": _same(results["default"], results["simpy"]),
        "accesses_per_s": accesses / best["default"],
        "simpy_accesses_per_s": accesses / best["simpy"],
        "ratio_to_simpy": best["simpy"] / best["default"],
        "events_per_access": events / accesses, "events_per_s": events / best["simpy"],
    }  # fmt: skip


def _same(a: Any, b: Any) -> bool:
    """Whether two results are the same: every field, spans and counters included."""
    spans = (a.spans is None and b.spans is None) or (
        a.spans is not None and b.spans is not None and a.spans.tobytes() == b.spans.tobytes()
    )
    counters = {k: v.tobytes() for k, v in a.counters.items()} == {
        k: v.tobytes() for k, v in b.counters.items()
    }
    return a.to_json() == b.to_json() and spans and counters


def run(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"baseline_date": BASELINE_DATE, "python": sys.version.split()[0],
                           "simpy": simpy.__version__, "runs": {}}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="specmd-timing-") as tmp:
        for name, (label, config) in scenarios(Path(tmp)).items():
            if args.only and name not in args.only:
                continue
            row = bench(config, args.repeat)
            row["label"] = label
            row["bare_events_per_s"] = bare_simpy()
            base_rate, base_events, base_bare = BASELINE[name]
            row["baseline_events_per_access"] = base_events
            if base_rate > 0:
                row["speedup"] = row["accesses_per_s"] / base_rate
                row["speedup_normalised"] = row["speedup"] * base_bare / row["bare_events_per_s"]
            out["runs"][name] = row
    return out


def table(res: dict[str, Any]) -> str:
    lines = [
        f"{'scenario':<40} {'accesses':>8} {'engine':>8} {'acc/s':>9} {'SimPy acc/s':>11} "
        f"{'ratio':>5} {'same':>4} {'ev/acc':>11} {'ev/s':>9} {'bare ev/s':>10} "
        f"{'x base':>6} {'x norm':>6}",
    ]
    verdicts = []
    for name, r in res["runs"].items():
        speed, norm = r.get("speedup"), r.get("speedup_normalised")
        lines.append(
            f"{r['label']:<40} {r['accesses']:>8,} {r['engine']:>8} {r['accesses_per_s']:>9,.0f} "
            f"{r['simpy_accesses_per_s']:>11,.0f} {r['ratio_to_simpy']:>5.1f} "
            f"{'yes' if r['same'] else 'NO':>4} "
            f"{r['events_per_access']:>5.2f}/{r['baseline_events_per_access']:<5.2f} "
            f"{r['events_per_s']:>9,.0f} {r['bare_events_per_s']:>10,.0f} "
            f"{speed or float('nan'):>6.2f} {norm or float('nan'):>6.2f}"
        )
        if norm is not None:
            verdicts.append((name, norm >= TARGET_RATIO))
        if name == "olmoe":
            verdicts.append(("olmoe >= 200k acc/s", r["accesses_per_s"] >= TARGET_OLMOE))
    lines.append(
        "engine: what simulate ran by default (compiled: its compiled core). ratio: acc/s over "
        "SimPy's in the same run; same: the two results equal. ev/acc, ev/s: SimPy's run (now/"
        f"baseline). x base: acc/s over the baseline ({res['baseline_date']}); x norm: the "
        "same, per unit of bare-SimPy speed"
    )
    for r in res["runs"].values():
        if r["not_compiled_because"]:
            lines.append(f"{r['label']}: on SimPy ({r['not_compiled_because']})")
    met = [n for n, ok in verdicts if ok]
    missed = [n for n, ok in verdicts if not ok]
    lines.append(
        f"targets ({TARGET_RATIO:.0f}x on every scenario, {TARGET_OLMOE:,.0f} acc/s on OLMoE): "
        f"met {met or 'none'}; missed {missed or 'none'}"
    )
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="runs per scenario, best kept")
    parser.add_argument("--only", nargs="*", help="scenario names (olmoe mixtral batch8 ...)")
    parser.add_argument("--json", action="store_true", help="JSON on stdout, the table on stderr")
    args = parser.parse_args()
    res = run(args)
    if args.json:
        print(json.dumps(res, indent=2))
        print(table(res), file=sys.stderr)
    else:
        print(table(res))
    return 0 if all(r["same"] for r in res["runs"].values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())

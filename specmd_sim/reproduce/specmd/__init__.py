"""Reproduce the SpecMD study (Hoang et al., arXiv 2602.03921) on this simulator, with controls.

:mod:`.traces` makes the subject traces and their null controls, :mod:`.grid` the runs (each
fully described by its labels), :mod:`.findings` checks each of SpecMD's findings with a margin,
over seeds, against the controls and robustness variants, and :mod:`.report` writes the runs
(``runs.csv``), the findings (``findings.json``) and the document (``reproduction.md``, the
source of ``docs/reproduction.md``). Runs go to a process pool; every run is a plain
:func:`~specmd_sim.replay` or :func:`~specmd_sim.simulate` of its config.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specmd_sim.atomic import check_output, make_folder
from specmd_sim.errors import SpecmdError
from specmd_sim.models.hf_config import slug
from specmd_sim.reproduce.specmd import traces as study_traces
from specmd_sim.reproduce.specmd.findings import Finding
from specmd_sim.reproduce.specmd.grid import METRICS, Plan, config_for, rows, run_row
from specmd_sim.reproduce.specmd.report import write_outputs
from specmd_sim.traces.io import load_trace
from specmd_sim.traces.trace import Trace

SEEDS = (0, 1, 2, 3, 4)
Progress = Callable[[str], None]


@dataclass(frozen=True)
class Study:
    plan: Plan
    rows: list[dict[str, Any]]
    findings: list[Finding]


def subjects(
    shared: Path, extra: Sequence[Path] = ()
) -> tuple[dict[str, Callable[[int], Trace]], tuple[str, ...]]:
    """The subject traces (the synthetic one always, the real Mixtral one when found, then the
    user's), and which of them carry recorded predictions."""
    out: dict[str, Callable[[int], Trace]] = {"olmoe": study_traces.olmoe}
    real = study_traces.mixtral(shared)
    if real is not None:
        out["mixtral"] = lambda seed: real
    recorded = []
    for path in extra:
        trace = load_trace(path)
        name = slug(Path(path).stem)
        while name in out:
            name += "-2"
        out[name] = _always(trace)
        if trace.pred_scores is not None:
            recorded.append(name)
    return out, tuple(recorded)


def _always(trace: Trace) -> Callable[[int], Trace]:
    """A subject that is ``trace`` whatever the seed."""
    return lambda seed: trace


def reproduce_specmd(
    out_dir: Path,
    quick: bool = False,
    shared: Path | None = None,
    progress: Progress | None = None,
    workers: int | None = None,
    traces: Sequence[Path] = (),
) -> Study:
    """Run the study into ``out_dir`` (runs.csv, findings.json, reproduction.md); ``traces``
    adds the user's traces as subjects (a recorded one's predictions are used too)."""
    check_output(out_dir, "--out", folder=True)
    if workers is not None and workers < 1:
        raise SpecmdError(f"--workers: expected at least 1, got {workers}")
    if shared is not None and not shared.is_dir():
        raise SpecmdError(f"--shared: expected a folder with reference traces, got {str(shared)!r}")
    made, recorded = subjects(shared or Path("../shared/traces"), traces)
    make_folder(out_dir, "--out")
    plan = Plan(tuple(made), SEEDS, quick, recorded)
    paths = study_traces.write_traces(out_dir / "traces", made, plan.seeds)
    labels = rows(plan)
    configs = [config_for(row, paths, out_dir) for row in labels]
    # experiments share some runs (the same engine and config under two labels): each runs once
    keys = [(row["engine"], c.model_dump_json()) for row, c in zip(labels, configs, strict=True)]
    unique = dict(zip(keys, zip(labels, configs, strict=True), strict=True))
    metrics: dict[tuple[str, str], dict[str, Any]] = {}
    with ProcessPoolExecutor(max_workers=workers or os.cpu_count() or 1) as pool:
        done = pool.map(run_row, unique.values(), chunksize=4)
        for i, (key, row) in enumerate(zip(unique, done, strict=True)):
            metrics[key] = {k: row[k] for k in METRICS}
            if progress is not None and ((i + 1) % 25 == 0 or i + 1 == len(unique)):
                progress(f"[{i + 1}/{len(unique)}] runs done")
    results = [row | metrics[key] for row, key in zip(labels, keys, strict=True)]
    findings = write_outputs(results, plan, out_dir)
    return Study(plan, results, findings)

"""``specmd validate published``: simulate configurations whose real tokens/s are published.

The data set (``published.yaml`` beside this module) holds one row per published number, in
groups of one system on one machine; each row is a scenario (model, precisions, hardware
profile, runtime profile, cache and policies, a routing trace) and the figure measured on the
real system. Each row is simulated with the timing engine and read as its group's metric
(:data:`Metric`: decode speed is ``1 / tpot_s``; a whole generate call, a prefill, ...).
The result says, per row, simulated vs published and the ratio; per group, whether the ordering
of the published figures is preserved; overall, whether the targets hold on the validation rows
(the rows no constant was fitted on).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import statistics
import tempfile
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import numpy as np
import yaml
from pydantic import Field, ValidationError, model_validator

from specmd_sim.atomic import write_text
from specmd_sim.config import build_config
from specmd_sim.engine.sim.run import simulate
from specmd_sim.errors import SpecmdError, from_validation_error
from specmd_sim.runtime import load_runtime
from specmd_sim.schema_base import InputModel
from specmd_sim.traces.io import save_trace
from specmd_sim.traces.synthetic import SyntheticParams, generate

Progress = Callable[[str], None]


# What a published figure measures, and how it is read from a simulated run:
# tokens_per_s = decode tokens/s (1 / TPOT); s_per_token = TPOT;
# output_tokens_per_s = new tokens of every request / the whole generate call (prefill included;
#   the first new token comes from the prefill pass, so the trace decodes one token fewer);
# decode_s = the generate call minus its prefill (makespan - TTFT);
# prefill_s = time to the first token (TTFT); prefill_tokens_per_s = prompt tokens / TTFT.
Metric = Literal[
    "tokens_per_s",
    "s_per_token",
    "output_tokens_per_s",
    "decode_s",
    "prefill_s",
    "prefill_tokens_per_s",
]


class Targets(InputModel):
    row_error: float = Field(gt=0, description="Largest |simulated/published - 1| of a row.")
    median_error: float = Field(gt=0, description="Largest median error over validation rows.")


class TraceSpec(InputModel):
    bundled: str | None = None
    synthetic: SyntheticParams | None = None


class Row(InputModel):
    setup: str = Field(description="The row's setup within its group (e.g. 'no-prefetch').")
    published: float = Field(gt=0, description="The published figure, in the group's metric.")
    role: Literal["calibration", "validation"] = "validation"
    model: str | None = None
    trace: str | None = None
    trace_set: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "Parameters of the row's synthetic trace that differ from the named trace's (e.g. "
            "prompt_tokens, decode_tokens, num_requests): the run's own lengths and batch."
        ),
    )
    config: dict[str, Any] = Field(
        default_factory=dict, description="Config sections of this row's setup (over the group's)."
    )
    runtime_set: dict[str, Any] = Field(
        default_factory=dict,
        description="Runtime settings of this row's setup (value only; nested fields dotted).",
    )
    note: str = ""
    known_gap: str = Field(
        default="",
        description=(
            "Why this row misses the target (a mechanism the simulator lacks, an unknown "
            "setup); with max_error, the regression guard of the test. The target is not "
            "lowered: the report counts the row as missed."
        ),
    )
    max_error: float | None = Field(
        default=None, gt=0, description="The error this known gap may not grow past."
    )


class Group(InputModel):
    id: str
    citation: str
    hardware: str
    runtime: str
    metric: Metric
    rows: list[Row] = Field(min_length=1)
    model: str | None = None
    trace: str | None = None
    expert_dtype: str | None = None
    dense_dtype: str | None = None
    config: dict[str, Any] = Field(default_factory=dict, description="Config shared by rows.")
    runtime_set: dict[str, Any] = Field(
        default_factory=dict, description="Runtime settings shared by rows (the rows' win)."
    )
    ordered: bool = Field(default=True, description="Preserve the published ordering.")
    series: str | None = Field(
        default=None,
        description=(
            "Groups of one series ran the same system and settings on different machines: rows "
            "of theirs with the same setup, metric and settings are compared across machines "
            "(does the simulator order the machines as the measurements do?)."
        ),
    )


class Fit(InputModel):
    """A runtime constant fitted on the calibration rows of the groups that use the runtime."""

    runtime: str
    field: str = Field(description="A numeric field of the runtime profile.")
    low: float = Field(gt=0, description="Search range, low end.")
    high: float = Field(gt=0, description="Search range, high end.")


class DataSet(InputModel):
    targets: Targets
    fits: list[Fit] = Field(default_factory=list, description="The constants fitted, and where.")
    traces: dict[str, TraceSpec]
    defaults: dict[str, Any] = Field(default_factory=dict)
    stated: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description=(
            "Settings every row is simulated with unless its own config names them, key by key "
            "within each section (a row's `workload: {batch_size: 2}` keeps the stated prefill; "
            "a plug-in of another kind, e.g. `predictor: {kind: trace}`, is the row's alone): "
            "the workload and predictor the rows were encoded with, so that the simulator's "
            "defaults can change without moving a row."
        ),
    )
    groups: list[Group]

    @model_validator(mode="before")
    @classmethod
    def _drop_anchors(cls, data: Any) -> Any:
        """Top-level ``x-...`` keys only hold YAML anchors that the groups merge in."""
        if isinstance(data, dict):
            return {k: v for k, v in data.items() if not str(k).startswith("x-")}
        return data


def load_dataset(path: Path | None = None) -> DataSet:
    if path is None:
        text = resources.files("specmd_sim.validate").joinpath("published.yaml").read_text()
    else:
        text = path.read_text(encoding="utf-8")
    return DataSet.model_validate(yaml.safe_load(text))


@dataclass
class RowResult:
    """A row of the data set (``row`` of ``spec``) and what the simulation gave for it."""

    spec: Group
    row: Row
    simulated: float = float("nan")
    hit_rate: float = float("nan")
    stall_share: float = float("nan")
    failure: str = ""  # why the row could not be simulated (then simulated is nan)

    @property
    def group(self) -> str:
        return self.spec.id

    def as_dict(self) -> dict[str, Any]:
        return {
            "group": self.group, "setup": self.row.setup, "role": self.row.role,
            "metric": self.spec.metric, "published": self.row.published,
            "simulated": self.simulated, "ratio": self.ratio, "error": self.error,
            "hit_rate": self.hit_rate, "stall_share": self.stall_share, "failure": self.failure,
        }  # fmt: skip

    @property
    def ratio(self) -> float:
        return self.simulated / self.row.published

    @property
    def error(self) -> float:
        """|simulated / published - 1|; infinite for a row that could not be simulated."""
        return float("inf") if self.failure else abs(self.ratio - 1.0)


@dataclass(frozen=True)
class MachinePair:
    """One setup measured on two machines with the same system and settings: ``faster`` is the
    row the measurement found faster (the larger figure of a rate, the smaller of a time)."""

    series: str
    faster: RowResult
    slower: RowResult

    @property
    def kept(self) -> bool:
        """Whether the simulator finds the same machine faster."""
        f, s = self.faster, self.slower
        if f.failure or s.failure:
            return False
        if _higher_is_faster(f.spec.metric):
            return f.simulated > s.simulated
        return f.simulated < s.simulated  # a time: the faster machine takes less (a tie is not)


@dataclass
class Validation:
    targets: Targets
    rows: list[RowResult] = field(default_factory=list)
    orderings: dict[str, bool] = field(default_factory=dict)
    machine_pairs: list[MachinePair] = field(default_factory=list)

    @property
    def validation_rows(self) -> list[RowResult]:
        return [r for r in self.rows if r.row.role == "validation"]

    @property
    def median_error(self) -> float:
        errors = [r.error for r in self.validation_rows]
        return statistics.median(errors) if errors else 0.0

    @property
    def within(self) -> int:
        return sum(r.error <= self.targets.row_error for r in self.validation_rows)

    @property
    def holds(self) -> bool:
        return (
            self.within == len(self.validation_rows)
            and self.median_error <= self.targets.median_error
            and all(self.orderings.values())
            and all(p.kept for p in self.machine_pairs)
        )


@dataclass(frozen=True)
class _Bench:
    """Where rows run: the data set, ``folder`` for the traces generated (each synthetic trace
    and variant once, on first use) and for the runtime copies rows need."""

    data: DataSet
    folder: Path
    generated: dict[tuple[str, str], str] = field(default_factory=dict)

    def synthetic(self, group: Group, row: Row) -> SyntheticParams | None:
        """The row's synthetic trace parameters (its trace's, with the row's ``trace_set``), or
        None for a bundled trace."""
        name = row.trace or group.trace
        spec = self.data.traces.get(name) if name is not None else None
        where = f"published.yaml: {group.id}/{row.setup}"
        if spec is None:
            raise SpecmdError(
                f"{where}: trace: expected one of {sorted(self.data.traces)}, got {name!r}"
            )
        if spec.synthetic is None:
            if row.trace_set:
                raise SpecmdError(
                    f"{where}: trace_set: expected a synthetic trace, got the bundled {name!r}"
                )
            return None
        try:
            return spec.synthetic.model_validate({**spec.synthetic.model_dump(), **row.trace_set})
        except ValidationError as exc:
            raise from_validation_error(f"{where}: trace_set", exc) from None

    def trace(self, group: Group, row: Row) -> str:
        """The path or bundled name of the row's trace."""
        name = str(row.trace or group.trace)
        params = self.synthetic(group, row)
        if params is None:
            spec = self.data.traces[name]
            if spec.bundled is None:
                raise SpecmdError(f"published.yaml: traces.{name}: expected bundled or synthetic")
            return spec.bundled
        key = (name, params.model_dump_json())
        if key not in self.generated:
            path = self.folder / f"{name}-{len(self.generated)}.npz"
            self.generated[key] = str(save_trace(generate(params, seed=0), path))
        return self.generated[key]

    def config(self, group: Group, row: Row, fitted: dict[str, Any]) -> Any:
        """The row's SimConfig: defaults, then the group's, then the row's settings; the
        ``stated`` settings where none of them names them."""
        cfg: dict[str, Any] = {
            **self.data.defaults,
            "model": row.model or group.model,
            "hardware": group.hardware,
            "runtime": self._runtime(group, row, fitted),
            "trace": self.trace(group, row),
            "expert_dtype": group.expert_dtype,
            "dense_dtype": group.dense_dtype,
            "timing": {"record_spans": False},
            **group.config,
            **row.config,
        }
        for section, settings in self.data.stated.items():
            own = cfg.get(section) or {}
            if isinstance(own, str):  # a plug-in named by its kind alone
                own = {"kind": own}
            if own.get("kind", settings.get("kind")) == settings.get("kind"):  # (a plug-in of
                cfg[section] = {**settings, **own}  # another kind is the row's alone)
        return build_config(cfg, source=f"published.yaml {group.id}/{row.setup}")

    def _runtime(self, group: Group, row: Row, fitted: dict[str, Any]) -> str:
        """The group's runtime, or a copy with fitted values and the row's settings."""
        settings = {**fitted, **group.runtime_set, **row.runtime_set}
        if not settings:
            return group.runtime
        data = load_runtime(group.runtime).model_dump(mode="json")
        for key, value in settings.items():
            *parents, name = key.split(".")
            node: Any = data
            for part in parents:
                node = node.get(part) if isinstance(node, dict) else None
            entry = node.get(name) if isinstance(node, dict) else None
            if not isinstance(entry, dict) or "value" not in entry:  # (node is then a dict)
                raise SpecmdError(
                    f"published.yaml: {group.id}/{row.setup}: runtime_set: expected a field of "
                    f"the runtime profile (e.g. kernels.attention), got {key!r}"
                )
            node[name] = {**entry, "value": value, "source": "the validation row's setup"}
        path = self.folder / f"{group.id}-{row.setup}-runtime.yaml"
        return str(write_text(path, yaml.safe_dump(data, sort_keys=False)))

    def run(self, group: Group, row: Row, fitted: dict[str, Any] | None = None) -> RowResult:
        """One row simulated; a scenario the simulator cannot express is a failed row (its
        reason kept), not a lost run."""
        out = RowResult(group, row)
        try:
            m = simulate(self.config(group, row, fitted or {})).metrics
            out.simulated = self._figure(group, row, m)
        except SpecmdError as exc:
            out.failure = str(exc)
            return out
        out.hit_rate = float(m["hit_rate"])
        if m["tpot_s"] is not None:  # no decode pass (a prefill-only row): the TTFT's share
            out.stall_share = float(m["tpot_stall_s"]) / float(m["tpot_s"])
        else:
            out.stall_share = float(m["ttft_stall_s"]) / float(m["ttft_s"])
        return out

    def _figure(self, group: Group, row: Row, m: dict[str, Any]) -> float:
        """The simulated counterpart of the group's metric (see :data:`Metric`)."""
        if group.metric == "tokens_per_s":
            return 1.0 / float(m["tpot_s"])
        if group.metric == "s_per_token":
            return float(m["tpot_s"])
        if group.metric == "output_tokens_per_s":
            return float(m["throughput_tok_s"])
        if group.metric == "decode_s":
            return float(m["makespan_s"]) - float(m["ttft_s"])
        if group.metric == "prefill_s":
            return float(m["ttft_s"])
        params = self.synthetic(group, row)
        if params is None:
            raise SpecmdError(
                f"published.yaml: {group.id}/{row.setup}: metric prefill_tokens_per_s: "
                "expected a synthetic trace (its prompt length), got a bundled one"
            )
        return params.prompt_tokens / float(m["ttft_s"])


@contextmanager
def _bench(data: DataSet) -> Iterator[_Bench]:
    with tempfile.TemporaryDirectory(prefix="specmd-validate-") as tmp:
        yield _Bench(data, Path(tmp))


def run_validation(
    data: DataSet | None = None,
    groups: list[str] | None = None,
    progress: Progress | None = None,
    workers: int | None = None,
) -> Validation:
    """Simulate every row (of ``groups``, default all) and compare with the published figure;
    the groups run on ``workers`` processes (default: all cores; 1 = in this process), and the
    result is the same whatever their number."""
    data = data or load_dataset()
    chosen = [i for i, g in enumerate(data.groups) if groups is None or g.id in groups]
    if groups is not None and len(chosen) != len(set(groups)):
        known = ", ".join(g.id for g in data.groups)
        raise SpecmdError(f"--group: expected ids among {known}, got {', '.join(groups)}")
    workers = min(workers or os.cpu_count() or 1, len(chosen) or 1)
    out = Validation(data.targets)
    tasks = [(data, i) for i in chosen]
    with ProcessPoolExecutor(max_workers=workers) if workers > 1 else nullcontext() as pool:
        done = pool.map(_run_group, tasks) if pool is not None else map(_run_group, tasks)
        for results in done:
            group = results[0].spec
            if progress is not None:
                for r in results:
                    progress(f"{group.id}/{r.row.setup}: " + (
                        f"failed: {r.failure}" if r.failure else
                        f"simulated {r.simulated:.3f}, published {r.row.published:.3f} "
                        f"({r.ratio:.2f}x)"
                    ))  # fmt: skip
            out.rows += results
            if group.ordered and len(results) > 1:
                out.orderings[group.id] = _same_order(results)
    out.machine_pairs = machine_pairs(out.rows)
    return out


def _higher_is_faster(metric: str) -> bool:
    return metric not in ("s_per_token", "decode_s", "prefill_s")


def _settings(r: RowResult) -> str:
    """Everything a row's simulation depends on but its machine, as one comparable string."""
    g, row = r.spec, r.row
    return json.dumps([
        g.series, g.runtime, g.metric, row.setup, row.model or g.model, row.trace or g.trace,
        g.expert_dtype, g.dense_dtype, {**g.config, **row.config}, row.trace_set,
        {**g.runtime_set, **row.runtime_set},
    ], sort_keys=True)  # fmt: skip


def machine_pairs(rows: list[RowResult]) -> list[MachinePair]:
    """Every two rows of one series with the same settings on different machines, whose
    published figures differ, in data-set order."""
    alike: dict[str, list[RowResult]] = {}
    for r in rows:
        if r.spec.series is not None:
            alike.setdefault(_settings(r), []).append(r)
    pairs = []
    for same in alike.values():
        for a, b in itertools.combinations(same, 2):
            if a.spec.hardware == b.spec.hardware or a.row.published == b.row.published:
                continue
            higher, lower = (a, b) if a.row.published > b.row.published else (b, a)
            faster, slower = (
                (higher, lower) if _higher_is_faster(a.spec.metric) else (lower, higher)
            )
            pairs.append(MachinePair(str(a.spec.series), faster, slower))
    return pairs


def _run_group(task: tuple[DataSet, int]) -> list[RowResult]:
    """The rows of one group (a worker's task: its own bench, so its own generated traces)."""
    data, index = task
    group = data.groups[index]
    with _bench(data) as bench:
        return [bench.run(group, row) for row in group.rows]


def _same_order(rows: list[RowResult]) -> bool:
    if any(r.failure for r in rows):
        return False
    published = sorted(range(len(rows)), key=lambda i: -rows[i].row.published)
    simulated = sorted(range(len(rows)), key=lambda i: -rows[i].simulated)
    return published == simulated


def fit_constants(
    data: DataSet | None = None, progress: Progress | None = None
) -> dict[str, float]:
    """The declared constants fitted on the calibration rows of their runtime's groups, all of a
    runtime's constants together: the values (within their ranges, on a log scale) minimising
    the sum of squared ``log(simulated / published)`` (:func:`_least_squares`). Returns
    ``{'runtime.field': value}``; the runtime YAML is not changed (write the value and this
    command into its source by hand)."""
    data = data or load_dataset()
    out: dict[str, float] = {}
    by_runtime: dict[str, list[Fit]] = {}
    for spec in data.fits:
        by_runtime.setdefault(spec.runtime, []).append(spec)
    with _bench(data) as bench:
        for runtime, specs in by_runtime.items():
            rows = [(g, r) for g in data.groups if g.runtime == runtime for r in g.rows
                    if r.role == "calibration"]  # fmt: skip
            if len(rows) < len(specs):
                raise SpecmdError(
                    f"fits: {runtime}: expected at least {len(specs)} calibration rows for "
                    f"{len(specs)} constants, got {len(rows)}"
                )

            def residuals(x: np.ndarray, specs: list[Fit] = specs, rows: list = rows) -> np.ndarray:
                fitted = {s.field: math.exp(v) for s, v in zip(specs, x.tolist(), strict=True)}
                results = [bench.run(g, r, fitted) for g, r in rows]
                failed = [r for r in results if r.failure]
                if failed:
                    raise SpecmdError(
                        f"fits: {failed[0].group}/{failed[0].row.setup}: {failed[0].failure}"
                    )
                return np.array([math.log(r.ratio) for r in results])

            bounds = np.log([[s.low for s in specs], [s.high for s in specs]])
            x = _least_squares(residuals, bounds)
            for spec, value in zip(specs, np.exp(x).tolist(), strict=True):
                out[f"{runtime}.{spec.field}"] = value
                if progress is not None:
                    progress(f"{runtime}.{spec.field} = {value:.4g} (on {len(rows)} rows)")
    return out


def _least_squares(
    residuals: Callable[[np.ndarray], np.ndarray], bounds: np.ndarray, iterations: int = 30
) -> np.ndarray:
    """Levenberg-Marquardt within box ``bounds`` (``[low, high]`` rows), from their midpoint.

    The Jacobian is taken by forward differences of 2% (wide enough to step over the small
    kinks a discrete-event simulation has where its event order changes)."""
    low, high = bounds
    x = (low + high) / 2
    r = residuals(x)
    damping, step = 1e-3, 0.02
    for _ in range(iterations):
        jac = np.column_stack([(residuals(x + step * e) - r) / step for e in np.eye(x.size)])
        gram = jac.T @ jac
        while True:
            delta = np.linalg.solve(gram + damping * np.diag(np.diag(gram) + 1e-12), -jac.T @ r)
            trial = np.clip(x + delta, low, high)
            r_trial = residuals(trial)
            if r_trial @ r_trial <= r @ r:
                damping = max(damping / 3, 1e-6)
                break
            damping *= 4
            if damping > 1e6:
                return x
        moved = float(np.abs(trial - x).max())
        x, r = trial, r_trial
        if moved < 1e-4:
            break
    return x


def _by_machines(pairs: list[MachinePair]) -> dict[tuple[str, str, str, str], list[MachinePair]]:
    """The pairs by (series, metric, faster machine, slower machine), in data-set order."""
    out: dict[tuple[str, str, str, str], list[MachinePair]] = {}
    for p in pairs:
        key = (p.series, p.faster.spec.metric, p.faster.spec.hardware, p.slower.spec.hardware)
        out.setdefault(key, []).append(p)
    return out


def markdown(result: Validation, command: str) -> str:
    """The validation report (``docs/validation.md`` is this, written by the command)."""
    t = result.targets
    vrows = result.validation_rows
    lines = [
        "# Validation against published measurements",
        "",
        f"Generated by `{command}`; do not edit by hand (the method is in "
        "`docs/validation-method.md`).",
        "",
        f"Targets: every validation row within ±{t.row_error:.0%}, median error ≤ "
        f"{t.median_error:.0%}, the published ordering preserved in every group.",
        "",
        f"- validation rows within ±{t.row_error:.0%}: **{result.within} of {len(vrows)}**",
        f"- median error of the validation rows: **{result.median_error:.1%}**",
        f"- groups with the published ordering preserved: "
        f"**{sum(result.orderings.values())} of {len(result.orderings)}**",
        f"- machines ordered as measured (one setup, the same system and settings on two "
        f"machines): **{sum(p.kept for p in result.machine_pairs)} of "
        f"{len(result.machine_pairs)}** pairs",
        f"- targets met: **{'yes' if result.holds else 'no'}**",
        "",
        "| group | setup | role | metric | published | simulated | ratio | hit rate | "
        "stall share |",
        "|---|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in result.rows:
        if r.failure:
            lines.append(f"| {r.group} | {r.row.setup} | {r.row.role} | {r.spec.metric} | "
                         f"{r.row.published:.3f} | — | not simulated ✗ | — | — |")  # fmt: skip
            continue
        flag = "" if r.row.role == "calibration" or r.error <= t.row_error else " ✗"
        lines.append(
            f"| {r.group} | {r.row.setup} | {r.row.role} | {r.spec.metric} | "
            f"{r.row.published:.3f} | {r.simulated:.3f} | {r.ratio:.2f}{flag} | "
            f"{r.hit_rate:.2f} | {r.stall_share:.2f} |"
        )
    lines += ["", "| group | published ordering preserved |", "|---|---|"]
    lines += [f"| {g} | {'yes' if ok else '**no**'} |" for g, ok in result.orderings.items()]
    if result.machine_pairs:
        lines += ["", "## Across machines", "",
                  "Rows of one series with the same setup and settings on two machines; "
                  "the measured faster machine first.", "",
                  "| series | metric | faster (measured) | slower | pairs | ordered as measured "
                  "| inverted |", "|---|---|---|---|---:|---:|---|"]  # fmt: skip
        for (series, metric, fast, slow), pairs in _by_machines(result.machine_pairs).items():
            inverted = ", ".join(
                p.faster.row.setup + (" (not simulated)" if p.faster.failure or p.slower.failure
                                      else "")
                for p in pairs if not p.kept
            ) or "—"  # fmt: skip
            lines.append(f"| {series} | {metric} | {fast} | {slow} | {len(pairs)} | "
                         f"{sum(p.kept for p in pairs)} | {inverted} |")  # fmt: skip
    lines += ["", "## Sources", ""]
    for citation in dict.fromkeys(r.spec.citation for r in result.rows):
        cited = (r.group for r in result.rows if r.spec.citation == citation)
        groups = ", ".join(dict.fromkeys(cited))
        lines.append(f"- {groups}: {citation}")
    failed = [r for r in result.rows if r.failure]
    if failed:
        lines += ["", "## Rows the simulator cannot express", ""]
        lines += [f"- {r.group}/{r.row.setup}: {r.failure}" for r in failed]
    gaps = [r for r in result.rows if r.row.known_gap]
    if gaps:
        lines += ["", "## Known gaps (rows that miss the target, and why)", ""]
        lines += [f"- {r.group}/{r.row.setup}: {r.row.known_gap}" for r in gaps]
    notes = [(r.group, r.row.setup, r.row.note) for r in result.rows if r.row.note]
    if notes:
        lines += ["", "## Row notes", ""]
        lines += [f"- {g}/{s}: {n}" for g, s, n in notes]
    return "\n".join(lines) + "\n"

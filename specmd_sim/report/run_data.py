"""A run as the reports see it: ``result.json`` plus, for the timing engine, its spans.

Built from a finished :class:`~specmd_sim.metrics.RunResult` (when the run folder is written)
or loaded from a run folder (``specmd report``, ``specmd timeline``), so that figures are the
same either way. The passes and requests are the engine's own tables (``per_pass``,
``per_request``), as arrays; what the figures derive from the spans (the class each transfer
served) is computed once here.
"""

from __future__ import annotations

import json
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from specmd_sim.errors import SpecmdError
from specmd_sim.metric_spec import reported
from specmd_sim.metrics import METRICS, TABLES, RunResult
from specmd_sim.perfetto import served_class_compiled
from specmd_sim.timeline import Recording, span_gpus, untraceable
from specmd_sim.units import format_bytes

PASS_DTYPE = np.dtype(
    [("pass_", "i4"), ("request", "i4"), ("phase", "i1"), ("start", "f8"), ("end", "f8")]
)
"""A row of :attr:`RunData.passes`: phase 0 prefill, 1 decode; times in seconds."""
REQUEST_DTYPE = np.dtype(
    [("request", "i4"), ("arrival", "f8"), ("first_token", "f8"), ("end", "f8"),
     ("decode_tokens", "i8")]
)  # fmt: skip
"""A row of :attr:`RunData.requests`: first token NaN for a request without a prefill."""
_PHASES = {"prefill": 0, "decode": 1}


class RunData:
    """``result`` is the mapping of ``result.json``; ``recording`` is None for replay runs."""

    def __init__(
        self, result: dict[str, Any], recording: Recording | None, run_dir: Path | None = None
    ) -> None:
        self.result = result
        self.recording = recording
        self.run_dir = run_dir

    @classmethod
    def from_result(cls, result: RunResult, run_dir: Path | None = None) -> RunData:
        return cls(json.loads(result.to_json()), result.recording(), run_dir)

    @classmethod
    def load(cls, run_dir: Path, spans: bool = True) -> RunData:
        """Read a run folder (:func:`~specmd_sim.runs.read_result`); ``spans=False`` skips
        ``spans.npz`` even where it exists."""
        from specmd_sim.runs import read_result, read_spans

        path = Path(run_dir) / "result.json"
        result = read_result(Path(run_dir))
        if "per_pass" not in result:
            raise SpecmdError(
                f"{path}: expected a result with its pass table (per_pass), got one written by "
                "an older specmd-sim; run it again"
            )
        unknown = sorted(set(result["metrics"]) - METRICS.keys())
        unknown += sorted(f"{name}.{c}" for name, table in TABLES.items()
                          for c in result.get(name, {}) if c not in table.columns)  # fmt: skip
        if unknown:
            raise SpecmdError(
                f"{path}: expected the metrics of docs/metrics.md, got {', '.join(unknown)} "
                "(written by another version of specmd-sim); run it again"
            )
        missing = [name for name, m in METRICS.items() if name not in result["metrics"]
                   and reported(m, result["engine"], result["config"])]  # fmt: skip
        if missing:
            raise SpecmdError(
                f"{path}: expected the metrics of docs/metrics.md, missing {', '.join(missing)} "
                "(written by another version of specmd-sim, or edited); run it again"
            )
        spans_file = Path(run_dir) / "spans.npz"
        recording = None
        if spans and result["engine"] == "simulate" and spans_file.is_file():
            recording = read_spans(spans_file)
        return cls(result, recording, Path(run_dir))

    def require_spans(self, what: str) -> Recording:
        """The spans, or a one-line error saying why there are none."""
        if self.recording is not None:
            return self.recording
        where = self.run_dir or "this run"
        if self.engine != "simulate":
            raise SpecmdError(
                f"{where}: {what} needs the spans of the timing engine, but this is a "
                f"{self.engine} run (run it with `specmd run` instead of `specmd replay`)"
            )
        raise SpecmdError(
            f"{where}: {what} needs spans.npz, which this run did not write "
            "(timing.record_spans was false, or the folder predates spans.npz); run it again"
        )

    @cached_property
    def traced(self) -> bool:
        """Whether the run folder has (or gets) its Perfetto trace: a run with spans, of times
        a trace holds (:func:`~specmd_sim.timeline.untraceable`)."""
        makespan = float(self.metrics.get("makespan_s") or 0.0)
        return self.recording is not None and untraceable(self.recording, makespan) is None

    # --- result.json --------------------------------------------------------------------

    @property
    def engine(self) -> str:
        return self.result["engine"]

    @property
    def metrics(self) -> dict[str, Any]:
        return self.result["metrics"]

    @property
    def per_layer(self) -> dict[str, list[Any]]:
        return self.result["per_layer"]

    @property
    def inputs(self) -> dict[str, Any]:
        return self.result["inputs"]

    @property
    def config(self) -> dict[str, Any]:
        return self.result["config"]

    @property
    def num_layers(self) -> int:
        return int(self.inputs["num_layers"])

    @property
    def num_experts(self) -> int:
        return int(self.inputs["num_experts"])

    @property
    def token_serial(self) -> bool:
        """Every prefill pass holds one token, so a request's n-th pass is its n-th token."""
        return self.config.get("workload", {}).get("prefill_chunk_tokens") == 1

    @property
    def policy(self) -> str:
        cfg = self.config
        kinds = [cfg.get(s, {}).get("kind", "?") for s in ("eviction", "prefetch")]
        return " + ".join(kinds)

    @property
    def title(self) -> str:
        i = self.inputs
        size = format_bytes(i["capacity_bytes"]) if "capacity_bytes" in i else "?"
        return (
            f"{i.get('model', '?')} on {i.get('hardware', '?')} · {self.policy} · cache "
            f"{i.get('capacity_slots', '?')} slots ({size})"
        )

    # --- the engine's tables as arrays, and what the spans tell ------------------------

    @property
    def spans(self) -> np.ndarray:
        return self.require_spans("this view").spans

    @cached_property
    def passes(self) -> np.ndarray:
        """One row per pass of ``per_pass`` (``PASS_DTYPE``), in pass order."""
        table = self.result["per_pass"]
        out = np.zeros(len(table.get("pass", [])), PASS_DTYPE)
        if out.size:
            out["pass_"], out["request"] = table["pass"], table["request"]
            out["phase"] = [_PHASES[p] for p in table["phase"]]
            out["start"], out["end"] = table["start_s"], table["end_s"]
        return out

    @cached_property
    def requests(self) -> np.ndarray:
        """One row per request of ``per_request`` (``REQUEST_DTYPE``), in id order."""
        table = self.result.get("per_request") or {}
        out = np.zeros(len(table.get("request", [])), REQUEST_DTYPE)
        if out.size:
            out["request"], out["arrival"] = table["request"], table["arrival_s"]
            ttft = [np.nan if t is None else t for t in table["ttft_s"]]
            out["first_token"] = out["arrival"] + np.asarray(ttft, dtype=np.float64)
            out["end"], out["decode_tokens"] = table["finish_s"], table["decode_tokens"]
        return out

    @cached_property
    def gpus(self) -> list[str]:
        """The GPUs that ran passes (``per_pass.gpu``), in order of their first pass; one
        unnamed GPU for a result without that column."""
        return list(dict.fromkeys(self.result["per_pass"].get("gpu", []))) or [""]

    @cached_property
    def pass_gpu(self) -> np.ndarray:
        """Per row of :attr:`passes`: the index in :attr:`gpus` of the GPU that ran it."""
        index = {g: i for i, g in enumerate(self.gpus)}
        gpu = self.result["per_pass"].get("gpu")
        return np.array([index[g] for g in gpu] if gpu else np.zeros(self.passes.size), np.int64)

    @cached_property
    def request_gpu(self) -> np.ndarray:
        """Per row of :attr:`requests`: the index in :attr:`gpus` of the GPU that ran its
        passes (a request runs on one GPU); 0 for a request without passes."""
        first: dict[int, int] = {}
        for r, g in zip(self.passes["request"].tolist(), self.pass_gpu.tolist(), strict=True):
            first.setdefault(r, g)
        return np.array([first.get(r, 0) for r in self.requests["request"].tolist()], np.int64)

    @cached_property
    def span_gpu(self) -> np.ndarray:
        """Per span: the index in :attr:`gpus` of the GPU it worked for: that of its pass, else
        of its lane's device; -1 for a span of no pass on a lane of no GPU. All 0 on one GPU."""
        rec = self.require_spans("this view")
        if len(self.gpus) == 1:
            return np.zeros(rec.spans.size, np.int64)
        return span_gpus(rec.spans, rec.lanes, self.gpus, self.passes["pass_"], self.pass_gpu)

    def gpu_label(self, gpu: int) -> str:
        """``"gpu1 · "`` on a run of several GPUs, ``""`` on one: the prefix that names a
        GPU's rows, panels and axes."""
        return f"{self.gpus[gpu]} · " if len(self.gpus) > 1 else ""

    @cached_property
    def classes(self) -> np.ndarray:
        """:func:`~specmd_sim.timeline.served_class` of every span (derived once a
        recording: :meth:`~specmd_sim.timeline.Recording.served`)."""
        return self.require_spans("this view").served(served_class_compiled)

    @cached_property
    def pass_step(self) -> np.ndarray:
        """Per row of :attr:`passes`: its position among its request's passes (0, 1, ...);
        the token position when :attr:`token_serial`."""
        req = self.passes["request"]
        order = np.lexsort((self.passes["start"], req))
        step = np.zeros(req.size, np.int64)
        sorted_req = req[order]
        first = np.r_[0, np.flatnonzero(sorted_req[1:] != sorted_req[:-1]) + 1]
        run_start = np.repeat(first, np.diff(np.r_[first, req.size]))
        step[order] = np.arange(req.size) - run_start
        return step

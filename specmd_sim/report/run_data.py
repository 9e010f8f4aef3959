"""A run as the reports see it: ``result.json`` plus, for the timing engine, its spans.

Built from a finished :class:`~specmd_sim.metrics.RunResult` (when the run folder is written)
or loaded from a run folder (``specmd report``, ``specmd timeline``), so that figures are the
same either way. What the figures derive from the spans (pass table, request table, the class
each transfer served) is computed once here.
"""

from __future__ import annotations

import json
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from specmd_sim.errors import SpecmdError
from specmd_sim.metrics import RunResult
from specmd_sim.timeline import (
    REQUEST_DTYPE,
    Recording,
    pass_table,
    request_table,
    served_class,
)
from specmd_sim.units import format_bytes


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
        recording = None
        if result.spans is not None:
            recording = Recording(result.spans, list(result.lanes), dict(result.counters))
        return cls(json.loads(result.to_json()), recording, run_dir)

    @classmethod
    def load(cls, run_dir: Path, spans: bool = True) -> RunData:
        """Read a run folder; ``spans=False`` skips ``spans.npz`` even where it exists."""
        from specmd_sim.runs import read_spans

        path = Path(run_dir) / "result.json"
        if not path.is_file():
            raise SpecmdError(f"{run_dir}: expected a run folder with result.json, got none")
        try:
            result = json.loads(path.read_text())
        except json.JSONDecodeError as exc:
            raise SpecmdError(f"{path}: expected JSON, got {exc}") from None
        if result.get("format") != "specmd-result":
            raise SpecmdError(f"{path}: expected a specmd result, got {result.get('format')!r}")
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
    def ttft(self) -> dict[int, float]:
        """TTFT by request id (seconds)."""
        pr = self.result.get("per_request") or {}
        return {
            int(r): float(t)
            for r, t in zip(pr.get("request", []), pr.get("ttft_s", []), strict=True)
            if t is not None
        }

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

    # --- derived from the spans ---------------------------------------------------------

    @property
    def spans(self) -> np.ndarray:
        return self.require_spans("this view").spans

    @cached_property
    def passes(self) -> np.ndarray:
        return pass_table(self.spans)

    @cached_property
    def requests(self) -> np.ndarray:
        """One row per request (``REQUEST_DTYPE``): from ``per_request`` where the engine
        reports arrivals (``arrival_s``, ``finish_s``), else derived from the passes."""
        pr = self.result.get("per_request") or {}
        if "arrival_s" not in pr:
            return request_table(self.passes, self.ttft)
        derived = request_table(self.passes, self.ttft)
        out = np.zeros(len(pr["request"]), REQUEST_DTYPE)
        out["request"] = pr["request"]
        out["arrival"] = pr["arrival_s"]
        ttft = [np.nan if t is None else t for t in pr.get("ttft_s", [None] * out.size)]
        out["first_token"] = out["arrival"] + np.asarray(ttft, dtype=np.float64)
        if "finish_s" in pr:
            out["end"] = pr["finish_s"]
        else:
            pos = np.searchsorted(derived["request"], out["request"])
            out["end"] = derived["end"][np.clip(pos, 0, max(derived.size - 1, 0))]
        return np.sort(out, order="request")

    @cached_property
    def classes(self) -> np.ndarray:
        """:func:`~specmd_sim.timeline.served_class` of every span."""
        return served_class(self.spans)

    @cached_property
    def pass_phase(self) -> np.ndarray:
        """Per row of :attr:`passes`: 0 prefill (up to its request's first token), 1 decode,
        -1 unknown (a request without TTFT, or a pass of several requests)."""
        req, owner = self.requests, self.passes["request"]
        pos = np.clip(np.searchsorted(req["request"], owner), 0, max(req.size - 1, 0))
        known = (owner >= 0) & (req["request"][pos] == owner) if req.size else owner < -1
        first = np.where(known, req["first_token"][pos] if req.size else np.nan, np.nan)
        phase = np.where(self.passes["end"] <= first + 1e-12, 0, 1)
        return np.where(np.isfinite(first), phase, -1).astype(np.int8)

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

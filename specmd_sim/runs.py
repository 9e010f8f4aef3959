"""Run folders: every run writes its resolved config and results, atomically.

``RUN_DIR/config.yaml`` (the resolved config) and ``RUN_DIR/result.json``; for the timing
engine also ``RUN_DIR/spans.npz`` (every span and counter, so that reports and timelines can be
rebuilt later: ``specmd timeline``, ``specmd report``), ``RUN_DIR/trace.json``
(Chrome/Perfetto) and ``RUN_DIR/timeline.html`` (the per-resource and per-layer views). The
default folder is ``runs/<engine>-<hash>``, the hash of the resolved config, so re-running the
same config overwrites identical results instead of piling up copies. Every file is a function
of the config alone (sorted keys, fixed zip timestamps, no machine paths or clock times): the
same config and seed give byte-identical folders.

This module writes the data files; ``timeline.html`` is a page, and pages are the report
layer's, which sits above this one (it reads run folders with :func:`read_spans`). Whoever
wants the page (``specmd run``) writes it after :func:`write_run`, with
:func:`specmd_sim.report.write_timeline`.
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from specmd_sim.config import SimConfig, config_to_dict
from specmd_sim.errors import SpecmdError
from specmd_sim.metrics import RunResult
from specmd_sim.timeline import (
    COUNTER_DTYPE,
    KINDS,
    SPAN_DTYPE,
    Recording,
    write_chrome_trace,
)

SPANS_FORMAT = "specmd-spans"
SPANS_VERSION = 1
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)
TIMELINE_FILE = "timeline.html"
_TIMING_FILES = ("spans.npz", "trace.json", TIMELINE_FILE)


def config_hash(config: SimConfig) -> str:
    text = json.dumps(config_to_dict(config), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def default_run_dir(engine: str, config: SimConfig) -> Path:
    return Path("runs") / f"{engine}-{config_hash(config)}"


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def write_run(run_dir: Path, result: RunResult) -> dict[str, Path]:
    """Write the run folder's data files; returns the files written by name.

    An earlier run's timing files are removed where this run writes none (a replay run), and
    its :data:`TIMELINE_FILE` always (the page is written afterwards, by the report layer), so
    a folder never mixes the results, spans and pages of different runs.
    """
    run_dir.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}
    files["config"] = run_dir / "config.yaml"
    _atomic_write(files["config"], yaml.safe_dump(result.config, sort_keys=True))
    files["result"] = run_dir / "result.json"
    result.write(files["result"])
    if result.spans is None:
        for name in _TIMING_FILES:
            (run_dir / name).unlink(missing_ok=True)
        return files
    (run_dir / TIMELINE_FILE).unlink(missing_ok=True)
    recording = Recording(result.spans, list(result.lanes), dict(result.counters))
    files["spans"] = run_dir / "spans.npz"
    write_spans(files["spans"], recording)
    files["trace"] = run_dir / "trace.json"
    write_chrome_trace(files["trace"], recording.spans, recording.lanes,
                       **chrome_trace_options(json.loads(result.to_json()), recording))  # fmt: skip
    return files


def chrome_trace_options(result: dict[str, Any], recording: Recording) -> dict[str, Any]:
    """What :func:`specmd_sim.timeline.to_chrome_trace` takes from ``result.json``: the
    engine's pass and request tables, the counters, the expert count and the run's metadata."""
    cfg, inputs = result["config"], result["inputs"]
    metadata = {
        "model": inputs.get("model"),
        "hardware": inputs.get("hardware"),
        "eviction": cfg.get("eviction", {}).get("kind"),
        "prefetch": cfg.get("prefetch", {}).get("kind"),
        "cache_slots": inputs.get("capacity_slots"),
        "seed": cfg.get("seed"),
    }
    return {
        "counters": recording.counters,
        "per_pass": result.get("per_pass") or {},
        "per_request": result.get("per_request") or {},
        "num_experts": inputs.get("num_experts"),
        "metadata": {k: v for k, v in metadata.items() if v is not None},
    }


def write_spans(path: Path, recording: Recording) -> None:
    """Spans, lane names and counters as one ``.npz`` (no pickles, fixed zip timestamps)."""
    meta = {
        "format": SPANS_FORMAT,
        "version": SPANS_VERSION,
        "lanes": list(recording.lanes),
        "kinds": list(KINDS),
        "counters": sorted(recording.counters),
    }
    members = {"meta": np.array(json.dumps(meta, sort_keys=True)), "spans": recording.spans}
    for i, name in enumerate(meta["counters"]):
        members[f"counter_{i}"] = recording.counters[name]
    tmp = path.with_name(path.name + ".tmp")
    with zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, arr in members.items():
            info = zipfile.ZipInfo(f"{name}.npy", date_time=_FIXED_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            with zf.open(info, "w", force_zip64=True) as fh:
                np.lib.format.write_array(fh, arr, allow_pickle=False)
    os.replace(tmp, path)


def read_spans(path: Path) -> Recording:
    """Read :func:`write_spans`' file; kind ids are mapped onto this version's :data:`KINDS`."""
    try:
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(str(data["meta"][()]))
            spans = data["spans"]
            counters = {n: data[f"counter_{i}"] for i, n in enumerate(meta["counters"])}
    except (OSError, KeyError, ValueError, zipfile.BadZipFile) as exc:
        raise SpecmdError(f"{path}: expected a spans file written by specmd, got {exc}") from None
    if meta.get("format") != SPANS_FORMAT or spans.dtype != SPAN_DTYPE:
        raise SpecmdError(f"{path}: expected format {SPANS_FORMAT!r}, got {meta.get('format')!r}")
    unknown = sorted(set(meta["kinds"]) - set(KINDS))
    if unknown:
        raise SpecmdError(f"{path}: expected span kinds of {KINDS}, got {unknown}")
    remap = np.array([KINDS.index(k) for k in meta["kinds"]], dtype=np.int8)
    spans = spans.copy()
    spans["kind"] = remap[spans["kind"]]
    counters = {n: c.astype(COUNTER_DTYPE, copy=False) for n, c in counters.items()}
    return Recording(spans, list(meta["lanes"]), counters)

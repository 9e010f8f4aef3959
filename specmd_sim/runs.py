"""Run folders: every run writes its resolved config and results, atomically.

``RUN_DIR/config.yaml`` (the resolved config) and ``RUN_DIR/result.json``; for the timing
engine also ``RUN_DIR/spans.npz`` (every span and counter, so that reports and timelines can be
rebuilt later: ``specmd timeline``, ``specmd report``), ``RUN_DIR/trace.pftrace.gz`` (the
Perfetto trace in Perfetto's protobuf format, gzip-compressed: :mod:`specmd_sim.perfetto`;
``specmd chrome`` writes the same in the Chrome JSON format, ``trace.json.gz``, for
``chrome://tracing``) and ``RUN_DIR/timeline.html`` (the per-resource and per-layer views).
The default folder is ``runs/<engine>-<hash>``, the hash of the resolved config, so re-running
the same config overwrites identical results instead of piling up copies. Every file
is a function of the config alone (sorted keys, fixed zip timestamps, a gzip header without
name or time, no machine paths or clock times): the same config and seed give byte-identical
folders.

This module writes the data files; ``timeline.html`` is a page, and pages are the report
layer's, which sits above this one (it reads run folders with :func:`read_spans`). Whoever
wants the page (``specmd run``) passes a writer of it to :func:`write_run` (``extra``), so that
it is part of the folder before the folder is put in place. Readers take ``result.json``
from :func:`read_result`, which checks the folder (:func:`check_run_folder`) and the result's
shape first.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import re
import zipfile
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from specmd_sim import gz
from specmd_sim.atomic import atomic_folder, check_output, write_text
from specmd_sim.config import SimConfig, config_to_dict
from specmd_sim.errors import SpecmdError, short_repr
from specmd_sim.metric_spec import ENGINES
from specmd_sim.metrics import RESULT_FORMAT, TABLES, RunResult
from specmd_sim.perfetto import (
    flow_table,
    lane_rows_compiled,
    served_class_compiled,
    write_perfetto_trace,
)
from specmd_sim.timeline import (
    COUNTER_DTYPE,
    KINDS,
    SPAN_DTYPE,
    Recording,
    untraceable,
)

SPANS_FORMAT = "specmd-spans"
SPANS_VERSION = 3
TIMELINE_FILE = "timeline.html"
TRACE_FILE = "trace.pftrace.gz"
"""The Perfetto trace (protobuf). Folders written before it hold the Chrome JSON trace instead
(``trace.json.gz``, or ``trace.json`` before that), which their manifest lists, so they still
check; nothing reads a trace back."""
CHROME_TRACE_FILE = "trace.json.gz"
"""The Chrome JSON trace ``specmd chrome`` writes into a run folder by default."""
REPORT_FILE = "report.html"
PAGES = (TIMELINE_FILE, REPORT_FILE)
"""The pages ``specmd timeline`` and ``specmd report`` write into a run folder by default."""
_PAGE_FILE = re.compile(
    "|".join(rf"{re.escape(Path(p).stem)}(-[\w.-]+)?\.(html|png|svg)" for p in PAGES)
    + f"|{re.escape(CHROME_TRACE_FILE)}"
)  # a page, its windows (``timeline-500-520ms.html``) and images (``report-ttft.png``); the
# Chrome trace ``specmd chrome`` writes


def config_hash(config: SimConfig) -> str:
    """12 hex digits of the config's SHA-256. Fields added with an empty default since a hash
    was first taken (the what-if mappings) count only when set, so a config that does not use
    them keeps its hash, and its baselines and run folders their names."""
    data = config_to_dict(config)
    for name in _COUNTED_WHEN_SET:
        if not data.get(name):
            data.pop(name, None)
    text = json.dumps(data, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


_COUNTED_WHEN_SET = ("hardware_set", "runtime_set")


def default_run_dir(engine: str, config: SimConfig) -> Path:
    return Path("runs") / f"{engine}-{config_hash(config)}"


MANIFEST = "manifest.json"
RUN_FOLDER_FORMAT = "specmd-run-folder"
Extra = Callable[[Path, dict[str, Any]], dict[str, Path]]
"""What adds files to a run folder being written (:func:`write_run`): given the folder and the
``result.json`` mapping as written (read, not changed: the trace reads it beside), the files
it wrote by name."""


def write_run(run_dir: Path, result: RunResult, extra: Extra | None = None) -> dict[str, Path]:
    """Write the run folder; returns the files written by name.

    The folder is written whole into a temporary sibling and then renamed into place
    (:func:`specmd_sim.atomic.atomic_folder`), so an interrupted rerun leaves the old folder as
    it was and a reader never sees the results, spans and pages of two runs mixed. ``extra``
    adds files (the timeline page) to the folder before it is put in place (:data:`Extra`).
    A run whose times a trace cannot hold (:func:`trace_left_out`) gets no trace. The
    spans and the trace are written in threads of their own beside ``extra``, and the
    spans' flow ids derived in a third while the trace writes what needs none (their
    compressing and compiled joins and encoding run without the GIL). The last file written,
    :data:`MANIFEST`, lists every file with its size: :func:`check_run_folder`.
    """
    run_dir = Path(run_dir)
    check_run_target(run_dir, "run folder")
    with atomic_folder(run_dir, "run folder") as folder:
        files = {"config": folder / "config.yaml", "result": folder / "result.json"}
        result.check_names()  # (its one error before any work: result.json is written later)
        recording = result.recording()
        traced = recording is not None and trace_left_out(result) is None
        if recording is not None:
            files["spans"] = folder / "spans.npz"
        if traced:
            files["trace"] = folder / TRACE_FILE
        writing = []
        with ThreadPoolExecutor(3) as pool:  # (they compress and encode mostly without the GIL)
            if recording is not None:  # (the spans, and the flows' joins, from the start)
                writing.append(pool.submit(write_spans, files["spans"], recording))
            if traced:
                assert recording is not None
                flows = pool.submit(flow_table, recording.spans, recording.lanes)
            config = yaml.safe_dump(result.config, sort_keys=True)
            files["config"].write_text(config, encoding="utf-8")
            text = result.to_json()  # (serialised and parsed once: the trace and the page read it)
            write_text(files["result"], text)
            written = json.loads(text)
            if traced:  # (its layout and first packets beside the flows)
                assert recording is not None
                trace = (files["trace"], written, recording, flows.result)
                writing.append(pool.submit(_write_trace, *trace))
            if extra is not None:
                files.update(extra(folder, written))
            for job in writing:
                job.result()
        write_manifest(folder, files.values())
    return {name: run_dir / p.name for name, p in files.items()}


def trace_left_out(result: RunResult) -> str | None:
    """Why the run folder of ``result`` holds no trace though it has spans
    (:func:`~specmd_sim.timeline.untraceable`), else None; its spans and results are written."""
    recording = result.recording()
    if recording is None:
        return None
    return untraceable(recording, float(result.metrics.get("makespan_s") or 0.0))


def _write_trace(
    path: Path,
    result: dict[str, Any],
    recording: Recording,
    flows: Callable[[], np.ndarray],
) -> None:
    """The run folder's trace, its options (:func:`trace_options`) derived in the writer's
    thread (the lanes' sub-tracks, which the page reads too; the served classes when first
    needed); the spans' flow ids (``flows``) derived beside it."""
    options = trace_options(result, recording)
    write_perfetto_trace(path, recording.spans, recording.lanes, flows=flows, **options)


def write_manifest(folder: Path, files: Iterable[Path]) -> None:
    """``folder``'s :data:`MANIFEST`: each file's name and size (what a complete folder has)."""
    manifest = {"format": RUN_FOLDER_FORMAT, "files": {p.name: p.stat().st_size for p in files}}
    write_text(folder / MANIFEST, json.dumps(manifest, sort_keys=True, indent=2) + "\n")


def check_run_target(run_dir: Path, what: str = "--out") -> None:
    """One clear line, before any work, unless ``run_dir`` can take a run folder: a location
    that can be written and is new, empty or an earlier run folder (a run replaces the folder
    whole, so it must never be a folder of other files, nor the working folder or one above)."""
    run_dir = Path(run_dir)
    check_output(run_dir, what, folder=True)
    if not run_dir.is_dir():
        return
    here = Path.cwd().resolve()
    if run_dir.resolve() in (here, *here.parents):
        raise SpecmdError(
            f"{what}: expected a run folder to (re)write whole, got {str(run_dir)!r}, the "
            "working folder or one above it"
        )
    if any(run_dir.iterdir()) and not (run_dir / "result.json").is_file():
        raise SpecmdError(
            f"{what}: expected a new folder or an earlier run folder, got {str(run_dir)!r}, "
            "which holds other files (a run replaces its folder whole)"
        )


def check_run_folder(run_dir: Path) -> None:
    """One clear line unless ``run_dir`` is a complete run folder as :func:`write_run` wrote
    it: its manifest lists plain names of files in the folder, each of the size it lists, and
    the folder holds no other file (a file added later makes a mixed folder).

    Pages are no part of the check: ``specmd timeline`` and ``specmd report`` write
    :data:`PAGES` and their images (``report-ttft.png``), ``specmd chrome`` the Chrome trace
    (:data:`CHROME_TRACE_FILE`), into the folder by default and rewrite them at will, so a
    page is neither required, nor size-checked, nor extra, whether :data:`MANIFEST` lists it
    (the timeline page ``specmd run`` writes) or not. Hidden files (a page being written, a
    file manager's ``.DS_Store``) are ignored.
    """
    run_dir = Path(run_dir)
    if not (run_dir / "result.json").is_file():
        raise SpecmdError(f"{run_dir}: expected a run folder with result.json, got none")
    path = run_dir / MANIFEST
    if not path.is_file():
        raise SpecmdError(
            f"{run_dir}: expected a complete run folder (with {MANIFEST}), got a folder without "
            "one: an older or interrupted run; rerun it"
        )
    manifest = read_json(path)
    if not isinstance(manifest, dict):
        raise SpecmdError(f"{path}: expected a run-folder manifest, got {short_repr(manifest)}")
    if manifest.get("format") != RUN_FOLDER_FORMAT:
        raise SpecmdError(
            f"{path}: format: expected {RUN_FOLDER_FORMAT!r}, got {_got(manifest, 'format')}"
        )
    listed = manifest.get("files")
    if not isinstance(listed, dict):
        raise SpecmdError(
            f"{path}: files: expected a mapping of file names to sizes, got "
            f"{_got(manifest, 'files')}"
        )
    for name, size in listed.items():
        if name in ("", ".", "..", MANIFEST) or Path(name).name != name:
            raise SpecmdError(f"{path}: files: expected names of files in the folder, got {name!r}")
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise SpecmdError(f"{path}: files.{name}: expected a size in bytes, got {size!r}")
    for name, size in listed.items():
        file = run_dir / name
        if _PAGE_FILE.fullmatch(name) or (file.is_file() and file.stat().st_size == size):
            continue
        raise SpecmdError(
            f"{run_dir}: expected {name} of {size} bytes (as {MANIFEST} lists), got "
            f"{file.stat().st_size if file.is_file() else 'no such file'}: the folder was "
            "changed after it was written; rerun it"
        )
    extra = sorted(
        item.name
        for item in run_dir.iterdir()
        if item.name not in listed
        and item.name != MANIFEST
        and not item.name.startswith(".")
        and not _PAGE_FILE.fullmatch(item.name)
    )
    if extra:
        raise SpecmdError(
            f"{run_dir}: expected only the files {MANIFEST} lists (and pages), got "
            f"{', '.join(map(repr, extra))} as well: a folder mixed with other files; move "
            "them out or rerun it"
        )


def read_json(path: Path, what: str | None = None) -> Any:
    """The JSON value in the file ``path``, or one line naming ``what`` (default: the path)
    if it cannot be read, is not UTF-8, is malformed or nests too deeply to read."""
    what = what or str(path)
    try:
        return json.loads(Path(path).read_bytes().decode("utf-8"))
    except OSError as exc:
        raise SpecmdError(f"{what}: cannot read file ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise SpecmdError(
            f"{what}: expected JSON in UTF-8, got undecodable bytes (at byte {exc.start})"
        ) from None
    except RecursionError:
        raise SpecmdError(f"{what}: expected JSON, got nesting too deep to read") from None
    except ValueError as exc:
        raise SpecmdError(f"{what}: expected JSON, got malformed text ({exc})") from None


def read_result(run_dir: Path) -> dict[str, Any]:
    """The ``result.json`` of the complete run folder ``run_dir`` (:func:`check_run_folder`),
    checked to have the shape every reader relies on: its ``format``, an ``engine`` of
    :data:`~specmd_sim.metric_spec.ENGINES`, ``metrics``, ``inputs`` and ``config`` as
    mappings, a ``hardware_grade`` (a name or null) and each of :data:`TABLES` present as
    columns of equal length. One line naming the file and the field otherwise."""
    run_dir = Path(run_dir)
    check_run_folder(run_dir)
    path = run_dir / "result.json"
    result = read_json(path)
    if not isinstance(result, dict):
        raise SpecmdError(f"{path}: expected a specmd result, got {short_repr(result)}")
    problem = _result_problem(result)
    if problem:
        raise SpecmdError(f"{path}: {problem}")
    return result


def _result_problem(result: dict[str, Any]) -> str | None:
    """``<field>: expected ..., got ...`` for the first field of ``result`` of a wrong shape."""
    if result.get("format") != RESULT_FORMAT:
        return f"format: expected {RESULT_FORMAT!r}, got {_got(result, 'format')}"
    if result.get("engine") not in ENGINES:
        return f"engine: expected one of {', '.join(ENGINES)}, got {_got(result, 'engine')}"
    for name in ("metrics", "inputs", "config"):
        if not isinstance(result.get(name), dict):
            return f"{name}: expected a mapping, got {_got(result, name)}"
    if not isinstance(result.get("hardware_grade", 0), str | None):
        return f"hardware_grade: expected a grade or null, got {_got(result, 'hardware_grade')}"
    for name in TABLES:
        table = result.get(name, {})
        if not isinstance(table, dict):
            return f"{name}: expected a table (a mapping of columns), got {short_repr(table)}"
        for column, values in table.items():
            if not isinstance(values, list):
                return f"{name}.{column}: expected a list of values, got {short_repr(values)}"
        lengths = sorted({len(values) for values in table.values()})
        if len(lengths) > 1:
            return f"{name}: expected columns of equal length, got lengths {lengths}"
    return None


def _got(data: dict[str, Any], key: str) -> str:
    return short_repr(data[key]) if key in data else "none"


def trace_options(result: dict[str, Any], recording: Recording) -> dict[str, Any]:
    """What a trace writer (:func:`specmd_sim.perfetto.perfetto_chunks`,
    :func:`specmd_sim.timeline.chrome_trace_chunks`) takes from ``result.json``: the engine's
    pass and request tables, the counters, the expert count and the run's metadata; and from
    ``recording``, derived once for every reader of it, the spans' served classes and their
    lanes' sub-tracks (:meth:`~specmd_sim.timeline.Recording.served`, ``lane_rows``)."""
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
        # (when first needed: the trace's span packets come last, and the page may need them
        # first)
        "served": functools.partial(recording.served, served_class_compiled),
        "rows": recording.lane_rows(lane_rows_compiled),
    }


def write_spans(path: Path, recording: Recording) -> None:
    """Spans, lane names and counters as one ``.npz`` (no pickles, fixed zip timestamps),
    a member per column (:data:`SPANS_VERSION` 3): the times as differences (:data:`DELTAS`),
    an integer column in the narrowest integer type that holds its values, every column's
    bytes grouped by significance (an ``(itemsize, rows)`` byte array: the high bytes of times
    and ids, nearly all alike, then compress to little), deflated (:data:`SPANS_LEVEL`,
    :func:`specmd_sim.gz.write_zip`). At ~4,000 tokens that is ~1/6 the bytes of whole rows
    deflated at the default level, in ~1/5 of the time."""
    meta: dict[str, Any] = {
        "format": SPANS_FORMAT,
        "version": SPANS_VERSION,
        "lanes": list(recording.lanes),
        "kinds": list(KINDS),
        "counters": sorted(recording.counters),
        "columns": {},
        "deltas": {},
    }
    tables = [("spans", recording.spans)]
    tables += [(f"counter_{i}", recording.counters[n]) for i, n in enumerate(meta["counters"])]
    gz.write_zip(path, _members(tables, meta), SPANS_LEVEL[gz.compressor()[0]])


SPANS_LEVEL = {"zlib-ng": 2, "zlib": 1}
"""The spans file's deflate level by compressor (:func:`specmd_sim.gz.compressor`): at 4,000
tokens zlib-ng at 2 (its fast matcher) compresses the spans' columns to 3.04 MB in 47 ms, zlib
at 1 to 3.13 MB in 84 ms (2 cores, 2026-12-07)."""


def _members(
    tables: list[tuple[str, np.ndarray]], meta: dict[str, Any]
) -> Iterator[tuple[str, list[Any]]]:
    """The spans file's members (``.npy`` files), one column made at a time, its type into
    ``meta``; ``meta`` last."""
    for table, rows in tables:
        for name in rows.dtype.names or ():
            of = DELTAS.get((table.split("_")[0], name))
            if of is not None:
                meta["deltas"][f"{table}.{name}"] = of
            column = np.ascontiguousarray(_stored(rows, name, of))  # (then read fast)
            stored = _narrow_type(column)
            meta["columns"][f"{table}.{name}"] = stored.str
            member = f"{table}.{name}" + (".delta" if of is not None else "")
            yield _npy(member, _by_significance(column.astype(stored, copy=False)))
    yield _npy("meta", np.array(json.dumps(meta, sort_keys=True)))


def _npy(name: str, array: np.ndarray) -> tuple[str, list[Any]]:
    """A ``.npy`` member of ``array``: its header, then its bytes where they lie."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, np.lib.format.header_data_from_array_1_0(array))
    return f"{name}.npy", [header.getvalue(), array]


DELTAS = {("spans", "start"): "", ("spans", "end"): "start", ("counter", "time"): ""}
"""The time columns a spans file (version 3) stores as differences, by table (``counter``:
each counter's) and column: the 64-bit integer that is the column's bits less the bits of
the previous row's (``""``: the first row's less 0) or of the same row's column named; their
members named ``<table>.<column>.delta.npy``, so that a reader of version 2, which would take
the differences for times, finds no member of the column and says the file is not its own. In
order of start, each spans' start is a few nanoseconds after the one before, and its end a
few after its start, so the differences' high bytes are all alike: the times then compress
to a quarter of their bytes, in a third of the time. Integer arithmetic that wraps, so the
column's bits, whatever they are, come back exactly (:func:`_table`)."""


def _stored(rows: np.ndarray, name: str, of: str | None) -> np.ndarray:
    """Column ``name`` of ``rows`` as a spans file stores it: as differences (``of``:
    :data:`DELTAS`) or as it is."""
    column = rows[name]
    if of is None:
        return column
    bits = np.ascontiguousarray(column).view(np.int64)
    if of:
        return bits - np.ascontiguousarray(rows[of]).view(np.int64)
    return np.diff(bits, prepend=np.int64(0))


def _narrow_type(column: np.ndarray) -> np.dtype[Any]:
    """The narrowest signed integer type that holds an integer column's values; else its own."""
    if column.dtype.kind != "i" or not column.size:
        return column.dtype
    lo, hi = int(column.min()), int(column.max())
    for kind in (np.int8, np.int16, np.int32):
        info = np.iinfo(kind)
        if info.min <= lo and hi <= info.max:
            return np.dtype(kind)
    return column.dtype


def _by_significance(column: np.ndarray) -> np.ndarray:
    """The column's bytes as ``(itemsize, rows)``: row ``k`` the ``k``-th byte of every value."""
    size = column.dtype.itemsize
    return np.ascontiguousarray(column.view(np.uint8).reshape(-1, size).T)


def _table(data: Any, meta: dict[str, Any], table: str, dtype: np.dtype) -> np.ndarray:
    """``table``'s rows, from its columns (:func:`write_spans`), the differences of version 3
    (:data:`DELTAS`) summed back: a column of the previous rows' before one of another's."""
    columns: dict[str, np.ndarray] = {}
    deltas = meta.get("deltas", {})
    names = sorted(dtype.names or (), key=lambda n: bool(deltas.get(f"{table}.{n}")))
    for name in names:
        of = deltas.get(f"{table}.{name}")
        raw = data[f"{table}.{name}" + (".delta" if of is not None else "")]
        stored = np.dtype(meta["columns"][f"{table}.{name}"])
        column = np.ascontiguousarray(raw.T).view(stored).reshape(-1)
        if of is not None:
            bits = column.astype(np.int64)
            bits = bits + columns[of].view(np.int64) if of else np.cumsum(bits)
            column = bits.view(dtype[name])
        columns[name] = column
    rows = np.empty(len(columns[next(iter(columns))]), dtype)
    for name, column in columns.items():
        rows[name] = column
    return rows


def read_spans(path: Path) -> Recording:
    """Read :func:`write_spans`' file (or one of version 2: no differences, or version 1: whole
    rows); kind ids are mapped onto this version's :data:`KINDS`."""
    try:
        with open(path, "rb") as f:
            head = f.read(4)
        if head != b"PK\x03\x04":  # (not a zip: else numpy would read it as a pickle's)
            raise SpecmdError(
                f"{path}: expected a spans file written by specmd (a .npz zip archive), got a "
                f"file that starts with {head!r} (damaged or not a spans file)"
            )
        with np.load(path, allow_pickle=False) as data:
            meta = json.loads(str(data["meta"][()]))
            names = meta["counters"]
            if meta.get("version", 1) > SPANS_VERSION:
                raise SpecmdError(
                    f"{path}: expected a spans file of version {SPANS_VERSION} or older, got "
                    f"version {meta['version']} (written by a newer specmd-sim; upgrade it)"
                )
            if meta.get("version", 1) == 1:
                spans = data["spans"]
                counters = {n: data[f"counter_{i}"] for i, n in enumerate(names)}
            else:
                spans = _table(data, meta, "spans", SPAN_DTYPE)
                counters = {
                    n: _table(data, meta, f"counter_{i}", COUNTER_DTYPE)
                    for i, n in enumerate(names)
                }
    except (OSError, KeyError, ValueError, TypeError, zipfile.BadZipFile) as exc:
        raise SpecmdError(f"{path}: expected a spans file written by specmd, got {exc}") from None
    if meta.get("format") != SPANS_FORMAT or spans.dtype != SPAN_DTYPE:
        raise SpecmdError(f"{path}: expected format {SPANS_FORMAT!r}, got {meta.get('format')!r}")
    unknown = sorted(set(meta["kinds"]) - set(KINDS))
    if unknown:
        raise SpecmdError(f"{path}: expected span kinds of {KINDS}, got {unknown}")
    remap = np.array([KINDS.index(k) for k in meta["kinds"]], dtype=np.int8)
    spans["kind"] = remap[spans["kind"]]
    counters = {n: c.astype(COUNTER_DTYPE, copy=False) for n, c in counters.items()}
    return Recording(spans, list(meta["lanes"]), counters)

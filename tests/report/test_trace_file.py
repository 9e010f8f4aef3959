"""The Chrome JSON trace ``specmd chrome`` writes, ``trace.json.gz``: a deterministic gzip of one
JSON document, written in chunks that join into the text a dict per event would give. The run
folder lists and checks its Perfetto trace (``trace.pftrace.gz``), takes the Chrome trace added
later, and folders of the JSON traces that came before (``trace.json.gz``, and ``trace.json``
before it) still work."""

from __future__ import annotations

import gzip
import json
import shutil
import zlib
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from support.cli import run_specmd

import specmd_sim.timeline as timeline
from specmd_sim.metrics import RunResult
from specmd_sim.runs import (
    CHROME_TRACE_FILE,
    MANIFEST,
    TRACE_FILE,
    check_run_folder,
    read_result,
    trace_options,
    write_manifest,
)
from specmd_sim.timeline import (
    KINDS,
    TRANSFER_KINDS,
    Recording,
    chrome_trace_chunks,
    class_name,
    served_class,
)


@pytest.fixture(scope="module")
def raw(chrome_dir: Path) -> bytes:
    return (chrome_dir / CHROME_TRACE_FILE).read_bytes()


@pytest.fixture(scope="module")
def text(timed: RunResult) -> str:
    """The trace's text, made again from the run (a small run: a few chunks)."""
    return "".join(chrome_trace_chunks(timed.spans, timed.lanes, **options(timed)))


def options(timed: RunResult) -> dict[str, Any]:
    recording = Recording(timed.spans, timed.lanes, timed.counters)
    return trace_options(json.loads(timed.to_json()), recording)


def test_the_file_is_a_deterministic_gzip_of_the_text(raw: bytes, text: str) -> None:
    """One gzip member, as ``gzip`` writes it (a viewer that reads only the first member of a
    multi-member file shows a truncated trace), with nothing in its header that varies."""
    assert raw[:3] == b"\x1f\x8b\x08"  # gzip, deflate
    assert raw[3] & 0x08 == 0, "no file name in the header"
    assert raw[4:8] == b"\0\0\0\0", "no time in the header"
    member = zlib.decompressobj(wbits=31)
    assert member.decompress(raw) == text.encode()
    assert member.eof and not member.unused_data


def test_every_span_is_one_event_on_tracks_in_time_order(raw: bytes, timed: RunResult) -> None:
    events = json.loads(gzip.decompress(raw))["traceEvents"]
    phases = [ev["ph"] for ev in events]
    meta = phases.count("M")
    assert set(phases[:meta]) == {"M"} and "M" not in phases[meta:], "metadata first"
    spans = [ev for ev in events if ev["ph"] == "X" and ev["cat"] != "pass"]
    assert Counter(ev["name"] for ev in spans) == Counter(KINDS[k] for k in timed.spans["kind"])
    named = {(ev["pid"], ev["tid"]) for ev in events if ev["name"] == "thread_name"}
    times: dict[tuple[Any, ...], list[float]] = defaultdict(list)  # slices by track, counters
    for ev in events:
        if ev["ph"] == "X":
            assert (ev["pid"], ev["tid"]) in named
            times[(ev["pid"], ev["tid"])].append(ev["ts"])
        elif ev["ph"] == "C":
            times[(ev["pid"], ev["name"])].append(ev["ts"])
    assert len(times) > 3
    for track, ts in times.items():
        assert ts == sorted(ts), f"{track} out of time order"


def test_span_events_are_those_of_a_dict_per_span(raw: bytes, timed: RunResult) -> None:
    """Against a plain rendering of each span (what the writer once built and dumped)."""
    experts = timed.inputs["num_experts"]
    served = served_class(timed.spans)
    want = []
    for span, klass in zip(timed.spans.tolist(), served.tolist(), strict=True):
        start, end, _, kind, pass_, layer, expert, size, request, _ = span
        args: dict[str, Any] = {"pass": pass_, "request": request}
        if layer >= 0:
            args["layer"] = layer
        if expert >= 0:
            args.update(expert=expert % experts, expert_id=expert)
        if size:
            args["bytes"] = size
        if klass >= 0 or KINDS[kind] in TRANSFER_KINDS:
            args["class"] = class_name(klass) if klass >= 0 else "unused"
        s, e = round(start * 1e9), round(end * 1e9)
        want.append((KINDS[kind], s / 1000, (e - s) / 1000, json.dumps(args)))
    events = json.loads(gzip.decompress(raw))["traceEvents"]
    got = [(ev["name"], ev["ts"], ev["dur"], json.dumps(ev["args"]))
           for ev in events if ev["ph"] == "X" and ev["cat"] != "pass"]  # fmt: skip
    assert sorted(got) == sorted(want)


def test_chunks_of_any_size_join_into_the_same_text(
    text: str, timed: RunResult, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(timeline, "TRACE_CHUNK", 7)
    pieces = list(chrome_trace_chunks(timed.spans, timed.lanes, **options(timed)))
    assert len(pieces) > len(timed.spans) / 7
    assert "".join(pieces) == text
    assert all(p.startswith(",") for p in pieces[1:-1]) and pieces[-1].startswith("]")


def test_times_print_as_json_prints_them() -> None:
    """Whole ns as microseconds, the text ``json.dumps(ns / 1000)`` gives (below 10**15 ns)."""
    rng = np.random.default_rng(0)
    ns = np.r_[0, 1, 10, 100, 999, 1000, 1001, 1500, 10**15 - 1,
               rng.integers(0, 10**15, 20_000), rng.integers(0, 10**7, 20_000)]  # fmt: skip
    whole, part = timeline._microseconds(ns)
    assert [f"{w}{p}" for w, p in zip(whole, part, strict=True)] == [
        json.dumps(n / 1000) for n in ns.tolist()
    ]


def test_the_folder_lists_and_checks_the_trace(timed_dir: Path, chrome_dir: Path) -> None:
    listed = json.loads((timed_dir / MANIFEST).read_text())["files"]
    assert listed[TRACE_FILE] == (timed_dir / TRACE_FILE).stat().st_size
    assert "trace.json" not in listed and CHROME_TRACE_FILE not in listed
    check_run_folder(timed_dir)
    assert read_result(timed_dir)["engine"] == "simulate"
    check_run_folder(chrome_dir)  # (the Chrome trace added later, as a page is)


def test_report_and_timeline_from_the_folder(chrome_dir: Path, tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(chrome_dir, run)
    for command in ("report", "timeline"):
        proc = run_specmd(command, run)
        assert proc.returncode == 0, proc.stderr
    page = (run / "report.html").read_text()
    assert f'href="{TRACE_FILE}"' in page and f'href="{CHROME_TRACE_FILE}"' in page
    assert f"are in {TRACE_FILE}" in (run / "timeline.html").read_text()
    check_run_folder(run)


@pytest.mark.parametrize("older", ["trace.json.gz", "trace.json"])
def test_an_older_folder_with_a_json_trace_still_works(
    chrome_dir: Path, tmp_path: Path, older: str
) -> None:
    """Folders written before the Perfetto trace (its JSON, gzipped or, before that, not):
    nothing reads the trace back, so they check, and their pages are made as ever, the
    report linking their trace."""
    run = tmp_path / "old"
    shutil.copytree(chrome_dir, run)
    text = gzip.decompress((run / CHROME_TRACE_FILE).read_bytes())
    (run / CHROME_TRACE_FILE).unlink()
    (run / TRACE_FILE).unlink()
    (run / older).write_bytes(text if older == "trace.json" else gzip.compress(text))
    names = ("config.yaml", "result.json", "spans.npz", older, "timeline.html")
    write_manifest(run, [run / name for name in names])
    check_run_folder(run)
    for command in ("report", "timeline"):
        proc = run_specmd(command, run)
        assert proc.returncode == 0, proc.stderr
    assert f'href="{older}"' in (run / "report.html").read_text()
    check_run_folder(run)


def test_chrome_refuses_a_replay_run_in_one_line(replay_dir: Path) -> None:
    proc = run_specmd("chrome", replay_dir)
    assert proc.returncode != 0 and not (replay_dir / CHROME_TRACE_FILE).exists()
    assert "specmd chrome" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_a_run_longer_than_a_trace_holds_keeps_its_results(
    tiny_trace: Path, tmp_path: Path
) -> None:
    """A run whose times pass what a trace holds (whole nanoseconds in 64 bits, ~292 years:
    here a link of a byte a second) is written without its trace, with a note: results,
    spans and page kept, the folder checks; ``specmd chrome`` refuses it in one line."""
    run = tmp_path / "slow"
    link = "hardware.links.pcie0.bandwidth_bytes_per_s=1"
    proc = run_specmd("run", "--trace", tiny_trace, "--set", link, "--out", run)
    assert proc.returncode == 0, proc.stderr
    assert read_result(run)["metrics"]["makespan_s"] > timeline.TRACE_MAX_S
    assert "note: no Perfetto trace in the run folder: a trace holds times up to" in proc.stdout
    assert not (run / TRACE_FILE).exists() and (run / "spans.npz").is_file()
    assert TRACE_FILE not in (run / "timeline.html").read_text()  # (its page claims none)
    check_run_folder(run)
    proc = run_specmd("chrome", run)
    assert proc.returncode != 0 and not (run / CHROME_TRACE_FILE).exists()
    assert "specmd chrome: no trace of" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1

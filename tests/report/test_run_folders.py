"""Reading a run folder: a folder changed, mixed or malformed inside is refused in one line
naming the file and the field, by every reader (report, timeline, compare, regress --run);
pages written into the folder later are no part of the check."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from specmd_sim.errors import SpecmdError
from specmd_sim.report import RunData, write_timeline
from specmd_sim.report.rows import load_rows
from specmd_sim.runs import MANIFEST, TIMELINE_FILE, check_run_folder, read_result, write_manifest


def sealed(run_dir: Path) -> None:
    """Rewrite the manifest to agree with the files it lists (a consistent folder)."""
    listed = json.loads((run_dir / MANIFEST).read_text())["files"]
    write_manifest(run_dir, [run_dir / name for name in listed])


def copied(source: Path, target: Path, change: Callable[[Path], Any]) -> Path:
    shutil.copytree(source, target)
    change(target)
    sealed(target)
    return target


def result_text(text: str | bytes) -> Callable[[Path], Any]:
    data = text if isinstance(text, bytes) else text.encode()
    return lambda run: (run / "result.json").write_bytes(data)


def result_edit(change: Callable[[dict[str, Any]], Any]) -> Callable[[Path], Any]:
    def edit(run: Path) -> None:
        result = json.loads((run / "result.json").read_text())
        change(result)
        (run / "result.json").write_text(json.dumps(result))

    return edit


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (result_text("[]"), "expected a specmd result, got []"),
        (
            result_text(b'{"engine": "caf\xe9"}'),
            "expected JSON in UTF-8, got undecodable bytes (at byte 15)",
        ),
        (result_text("[" * 1_500 + "]" * 1_500), "expected JSON, got nesting too deep to read"),
        (result_edit(lambda r: r.update(format="x")), "format: expected 'specmd-result', got 'x'"),
        (
            result_edit(lambda r: r.pop("engine")),
            "engine: expected one of replay, simulate, got none",
        ),
        (result_edit(lambda r: r.update(metrics=[])), "metrics: expected a mapping, got []"),
        (result_edit(lambda r: r.pop("config")), "config: expected a mapping, got none"),
        (
            result_edit(lambda r: r.update(hardware_grade=1)),
            "hardware_grade: expected a grade or null, got 1",
        ),
        (
            result_edit(lambda r: r.update(per_pass="x")),
            "per_pass: expected a table (a mapping of columns), got 'x'",
        ),
        (
            result_edit(lambda r: r["per_layer"].update(layer=3)),
            "per_layer.layer: expected a list of values, got 3",
        ),
        (
            result_edit(lambda r: r["per_layer"].update(layer=[0])),
            "per_layer: expected columns of equal length, got lengths [1, 16]",
        ),
    ],
)
def test_a_malformed_result_is_refused_by_every_reader(
    replay_dir: Path, tmp_path: Path, change: Callable[[Path], Any], message: str
) -> None:
    run = copied(replay_dir, tmp_path / "run", change)
    expected = f"{run / 'result.json'}: {message}"
    for read in (read_result, RunData.load, lambda r: load_rows([r])):
        with pytest.raises(SpecmdError) as info:
            read(run)
        assert str(info.value) == expected


def manifest_files(change: Callable[[dict[str, Any]], Any]) -> Callable[[Path], Any]:
    def edit(run: Path) -> None:
        manifest = json.loads((run / MANIFEST).read_text())
        change(manifest["files"])
        (run / MANIFEST).write_text(json.dumps(manifest))

    return edit


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda run: (run / "extra.bin").write_bytes(b"\0" * 10),
            "{run}: expected only the files manifest.json lists (and pages), got 'extra.bin' as "
            "well: a folder mixed with other files; move them out or rerun it",
        ),
        (
            lambda run: (run / "notes").mkdir(),
            "{run}: expected only the files manifest.json lists (and pages), got 'notes' as well",
        ),
        (
            manifest_files(lambda f: f.update({"../outside.txt": 4})),
            "{run}/manifest.json: files: expected names of files in the folder, got "
            "'../outside.txt'",
        ),
        (
            manifest_files(lambda f: f.update({"result.json": "big"})),
            "{run}/manifest.json: files.result.json: expected a size in bytes, got 'big'",
        ),
        (
            lambda run: (run / MANIFEST).write_text("[]"),
            "{run}/manifest.json: expected a run-folder manifest, got []",
        ),
        (
            lambda run: (run / MANIFEST).write_text("{"),
            "{run}/manifest.json: expected JSON, got malformed text",
        ),
    ],
)
def test_a_changed_or_mixed_folder_is_refused(
    replay_dir: Path, tmp_path: Path, change: Callable[[Path], Any], message: str
) -> None:
    run = tmp_path / "run"
    shutil.copytree(replay_dir, run)
    (tmp_path / "outside.txt").write_text("four")
    change(run)
    with pytest.raises(SpecmdError) as info:
        check_run_folder(run)
    assert str(info.value).startswith(message.format(run=run))
    assert "\n" not in str(info.value)


def test_pages_written_later_are_no_part_of_the_check(timed_dir: Path, tmp_path: Path) -> None:
    """``specmd timeline`` and ``specmd report`` write their pages and images into the folder
    by default and rewrite them at will; a hidden file (a page being written) is ignored."""
    run = tmp_path / "run"
    shutil.copytree(timed_dir, run)
    write_manifest(run, [run / n for n in ("config.yaml", "result.json", "spans.npz",
                                          "trace.pftrace.gz", TIMELINE_FILE)])  # fmt: skip
    listed = json.loads((run / MANIFEST).read_text())["files"][TIMELINE_FILE]
    write_timeline(RunData.load(run), run / TIMELINE_FILE, max_spans=100)
    assert (run / TIMELINE_FILE).stat().st_size != listed
    for name in ("report.html", "report-ttft.png", "timeline-layers.svg", ".DS_Store"):
        (run / name).write_text("page")
    check_run_folder(run)
    (run / TIMELINE_FILE).unlink()
    check_run_folder(run)
    (run / "report-ttft.csv").write_text("not a page")
    with pytest.raises(SpecmdError, match=r"got 'report-ttft\.csv' as well"):
        check_run_folder(run)

"""``specmd report``, ``specmd timeline`` and ``specmd compare`` as a user runs them."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support.cli import Completed, run_specmd
from support.pages import unpacked

from specmd_sim.errors import SpecmdError
from specmd_sim.report.images import export_images
from specmd_sim.runs import MANIFEST, write_manifest


def specmd(*args: str | Path) -> Completed:
    return run_specmd(*args)


def one_line_error(proc: Completed, *fragments: str) -> None:
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_timeline_regenerates_the_same_page(timed_dir: Path, tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    shutil.copytree(timed_dir, run_dir)
    (run_dir / "timeline.html").unlink()
    proc = specmd("timeline", run_dir)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"wrote {run_dir / 'timeline.html'}"
    assert (run_dir / "timeline.html").read_bytes() == (timed_dir / "timeline.html").read_bytes()


def test_timeline_window_and_limit(timed_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "window.html"
    proc = specmd("timeline", timed_dir, "--window", "10:40", "--max-spans", "500", "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert "drawn one by one" in unpacked(out)


def test_a_window_is_a_page_of_its_own(timed_dir: Path, tmp_path: Path) -> None:
    """`--window` without `--out` writes timeline-START-ENDms.html beside the run's page, which
    stays as it was; the folder is still a valid run folder (the page is one of its pages)."""
    run_dir = tmp_path / "run"
    shutil.copytree(timed_dir, run_dir)
    before = (run_dir / "timeline.html").read_bytes()
    proc = specmd("timeline", run_dir, "--window", "10:40.5")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"wrote {run_dir / 'timeline-10-40.5ms.html'}"
    assert (run_dir / "timeline.html").read_bytes() == before
    assert "drawn one by one" in unpacked(run_dir / "timeline-10-40.5ms.html")
    assert specmd("report", run_dir).returncode == 0  # the folder still reads as a run


def test_exported_images_leave_out_what_the_page_says_about_dragging(timed_dir: Path) -> None:
    """The interactive hints (drag to zoom, click a legend entry) are on the page, not in a
    still image; the rest of the subtitle is."""
    from specmd_sim.report import RunData, write_timeline
    from specmd_sim.report.images import for_image
    from specmd_sim.report.spec import to_figure

    figures = write_timeline(RunData.load(timed_dir), timed_dir.parent / "t.html")
    assert figures
    for name, fig in figures.items():
        page, still = to_figure(fig).layout.title.subtitle.text or "", for_image(fig)
        subtitle = still.layout.title.subtitle.text or ""
        text = " ".join([subtitle, *(a.text or "" for a in still.layout.annotations)])
        assert "rag to zoom" in page, name
        assert "rag to zoom" not in text and "click" not in text, (name, text)
        assert subtitle.split("<br>")[0] == page.split("<br>")[0]  # the note on what is drawn


def test_timeline_of_a_replay_run_is_a_one_line_error(replay_dir: Path) -> None:
    one_line_error(specmd("timeline", replay_dir), str(replay_dir), "replay run", "specmd run")


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (("--window", "40:10"), ("--window", "'40:10'")),
        (("--window", "soon"), ("--window", "START:END", "'soon'")),
        (("--window", "1e9:2e9"), ("--window", "starting within the run (0 to ", "'1e9:2e9'")),
    ],
)
def test_bad_window(timed_dir: Path, args: tuple[str, ...], fragments: tuple[str, ...]) -> None:
    one_line_error(specmd("timeline", timed_dir, *args), *fragments)


def test_report_and_optional_images(timed_dir: Path, tmp_path: Path) -> None:
    page = tmp_path / "r.html"
    proc = specmd("report", timed_dir, "--out", page, "--image", "png")
    assert proc.returncode == 0, proc.stderr
    assert f"wrote {page}" in proc.stdout
    images = sorted(p.name for p in tmp_path.glob("r-*.png"))
    if images:  # kaleido is installed and works
        assert images == ["r-prefetch.png", "r-stall.png", "r-taxonomy.png", "r-ttft.png"]
    else:
        assert proc.stderr.startswith("image export skipped: ")
        assert len(proc.stderr.strip().splitlines()) == 1


def test_unknown_image_format_is_a_user_error(tmp_path: Path) -> None:
    with pytest.raises(SpecmdError, match=r"--image: expected one of png, svg, got 'gif'"):
        export_images({}, tmp_path, "page", "gif")


def test_report_of_a_folder_that_is_no_run(tmp_path: Path) -> None:
    one_line_error(specmd("report", tmp_path), str(tmp_path), "result.json")


def rewrite(run_dir: Path, result: dict) -> None:
    """Replace a run folder's result.json as an older version would have written it (with a
    manifest that matches, so that only the content is old)."""
    (run_dir / "result.json").write_text(json.dumps(result))
    listed = json.loads((run_dir / MANIFEST).read_text())["files"]
    write_manifest(run_dir, [run_dir / name for name in listed])


def test_a_result_without_the_pass_table_asks_for_a_rerun(timed_dir: Path, tmp_path: Path):
    run_dir = tmp_path / "old"
    shutil.copytree(timed_dir, run_dir)
    result = json.loads((run_dir / "result.json").read_text())
    del result["per_pass"]  # as written before the engine reported its passes
    rewrite(run_dir, result)
    for command in ("report", "timeline"):
        one_line_error(specmd(command, run_dir), str(run_dir / "result.json"), "per_pass",
                       "older specmd-sim; run it again")  # fmt: skip
    result["per_pass"] = {}
    result["metrics"]["hit_ratio"] = result["metrics"].pop("hit_rate")  # a name of another day
    rewrite(run_dir, result)
    one_line_error(specmd("report", run_dir), "expected the metrics of docs/metrics.md, got "
                   "hit_ratio (written by another version")  # fmt: skip
    del result["metrics"]["hit_ratio"]  # (a metric the run reports, missing: one line too)
    rewrite(run_dir, result)
    for command in ("report", "timeline"):
        one_line_error(specmd(command, run_dir), "expected the metrics of docs/metrics.md, "
                       "missing hit_rate (written by another version")  # fmt: skip


def test_compare_runs(timed_dir: Path, replay_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "c.html"
    proc = specmd("compare", timed_dir, replay_dir, "--out", out)
    assert proc.returncode == 0, proc.stderr
    assert "2 run(s)" in proc.stdout and f"wrote {out}" in proc.stdout
    assert "engine=simulate" in unpacked(out)


def test_compare_of_nothing_comparable(tmp_path: Path) -> None:
    one_line_error(specmd("compare", tmp_path), "expected a run folder")

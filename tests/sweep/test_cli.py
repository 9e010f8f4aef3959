"""``specmd sweep`` refuses, before any work and in one line (exit code 2), outputs it cannot
write, grids larger than confirmed and ``--set`` values with YAML anchors or deep nesting (so
does ``specmd run``); it accepts the folder of its own earlier run to resume."""

from __future__ import annotations

import itertools
import json
import os
import time
from pathlib import Path

import pytest
from support.cli import cli

import specmd_sim.sweep.runner as runner
from specmd_sim.config import apply_overrides
from specmd_sim.hardware.loader import MAX_YAML_DEPTH, MAX_YAML_NODES
from specmd_sim.sweep.grid import MAX_POINTS

SPEC = {
    "engine": "replay",
    "base": {"trace": "mixtral-synthetic", "workload": {"max_requests": 1},
             "cache": {"capacity": 8}},
    "axes": {"seed": [0, 1]},
}  # fmt: skip

# six levels of ten aliases each: a short value that stands for 10^6 strings once expanded
LEVELS = [f"&a [{','.join('x' * 10)}]"]
LEVELS += [f"&{b} [{','.join([f'*{a}'] * 10)}]" for a, b in itertools.pairwise("abcdef")]
BOMB = f"[{','.join(LEVELS)}]"


def spec_file(folder: Path, spec: dict = SPEC) -> Path:
    path = folder / "spec.yaml"
    path.write_text(json.dumps(spec))  # JSON is YAML
    return path


def contents(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.fixture
def no_work(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail the test if the grid is expanded (the first work a sweep does)."""

    def expanded(*args: object, **kwargs: object) -> None:
        raise AssertionError("the grid was expanded before the refusal")

    monkeypatch.setattr(runner, "iter_points", expanded)


def setup_case(case: str, tmp: Path) -> tuple[list[str], str]:
    """The arguments of a refused output case and the start of the error line it gives."""
    spec = str(spec_file(tmp))
    (tmp / "mine").mkdir()
    (tmp / "mine" / "thesis.tex").write_text("years of work")
    (tmp / "a-file").write_text("keep me")
    old = tmp / "old"  # an earlier sweep's folder
    (old / "_meta").mkdir(parents=True)
    (old / "000000-replay-000000000000.parquet").write_bytes(b"a result")
    return {
        "out is a file": ([spec, "--out", str(tmp / "a-file")],
                          f"--out: expected a folder to write into, got the file '{tmp}/a-file'"),
        "out under a file": ([spec, "--out", str(tmp / "a-file" / "sub")],
                             "--out: expected a location under a folder"),
        "out holds other files": (
            [spec, "--out", str(tmp / "mine")],
            f"--out: expected a new folder, an empty one or a sweep folder, got '{tmp}/mine', "
            "which holds other files ('thesis.tex')"),
        "resume a folder of other files": (
            [spec, "--out", str(tmp / "mine"), "--resume"],
            "--out: expected a new folder, an empty one or a sweep folder"),
        "rerun into a sweep folder": (
            [spec, "--out", str(old)],
            f"--out: expected a new or empty folder, got the sweep folder '{old}' with 1 "
            "result files (add --resume to continue the sweep in it)"),
        "csv is a folder": ([spec, "--out", str(tmp / "new"), "--csv", str(tmp / "mine")],
                            f"--csv: expected a file path to write, got the folder '{tmp}/mine'"),
        "csv inside out": ([spec, "--out", str(old), "--resume", "--csv", str(old / "t.csv")],
                           f"--csv: expected a file outside the sweep folder, got '{old}/t.csv'"),
    }[case]  # fmt: skip


@pytest.mark.parametrize(
    "case",
    ["out is a file", "out under a file", "out holds other files",
     "resume a folder of other files", "rerun into a sweep folder", "csv is a folder",
     "csv inside out"],
)  # fmt: skip
def test_bad_outputs_are_refused_before_any_work(
    case: str, tmp_path: Path, monkeypatch, capsys, no_work
) -> None:
    args, start = setup_case(case, tmp_path)
    before = contents(tmp_path)
    code, out, err = cli(monkeypatch, capsys, "sweep", *args)
    assert (code, out) == (2, "") and err.count("\n") == 1, err
    assert err.startswith(f"error: {start}"), err
    assert contents(tmp_path) == before and not (tmp_path / "new").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_an_unwritable_out_is_refused(tmp_path: Path, monkeypatch, capsys, no_work) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        code, _, err = cli(monkeypatch, capsys, "sweep", str(spec_file(tmp_path)), "--out",
                           str(locked / "sweep"))  # fmt: skip
    finally:
        locked.chmod(0o700)
    assert code == 2 and err == f"error: --out: expected a writable location, got " \
                                f"'{locked}/sweep'\n"  # fmt: skip


def test_a_grid_above_the_bound_is_refused_until_confirmed(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    huge = {**SPEC, "axes": {"seed": list(range(1000)), "capacity": list(range(8, 1008))}}
    out = tmp_path / "out"
    with monkeypatch.context() as patched:
        patched.setattr(runner, "iter_points", lambda *a, **k: pytest.fail("grid expanded"))
        started = time.monotonic()
        code, _, err = cli(monkeypatch, capsys, "sweep", str(spec_file(tmp_path, huge)),
                           "--out", str(out))  # fmt: skip
        assert time.monotonic() - started < 5
    assert code == 2 and err == (
        f"error: sweep spec {tmp_path}/spec.yaml: axes: expected at most {MAX_POINTS:,} points, "
        "got 1,000,000 (1000 x 1000); pass --max-points 1000000 to run them all\n"
    )
    spec = str(spec_file(tmp_path))
    code, _, err = cli(monkeypatch, capsys, "sweep", spec, "--out", str(out), "--max-points", "1")
    assert code == 2 and err.endswith("got 2 (2); pass --max-points 2 to run them all\n")
    assert not out.exists()
    # confirmed, it runs; its own folder is then accepted to resume, with files readers skip
    code, stdout, err = cli(monkeypatch, capsys, "sweep", spec, "--out", str(out), "--workers",
                            "1", "--max-points", "2")  # fmt: skip
    assert code == 0 and "2 points: 2 ok, 0 failed (2 run now, 0 done before)" in stdout, err
    (out / ".DS_Store").write_bytes(b"")
    code, stdout, err = cli(monkeypatch, capsys, "sweep", spec, "--out", str(out), "--resume",
                            "--csv", str(tmp_path / "t.csv"))  # fmt: skip
    assert code == 0 and "(0 run now, 2 done before)" in stdout, err
    assert (tmp_path / "t.csv").read_text().count("\n") == 3
    code, stdout, _ = cli(monkeypatch, capsys, "sweep", "--help")
    assert code == 0 and f"default {MAX_POINTS:,}" in stdout  # the help states the bound


DEEP = "[" * 100_000 + "]" * 100_000  # refused at the first level beyond the bound
ALIASES = f"expected at most {MAX_YAML_NODES:,} values once aliases are expanded"
NESTED = f"expected at most {MAX_YAML_DEPTH} levels of nesting, got more at line 1, column"


@pytest.mark.parametrize(
    ("value", "problem"),
    [("&a [*a]", f"{ALIASES}, got a recursive alias"), (BOMB, f"{ALIASES}, got 1,234,567"),
     (DEEP, NESTED)],
)  # fmt: skip
def test_set_values_beyond_the_yaml_bounds_give_one_line(
    value: str, problem: str, tmp_path: Path, monkeypatch, capsys
) -> None:
    started = time.monotonic()
    code, out, err = cli(monkeypatch, capsys, "replay", "--set", f"parallel.gpus={value}",
                         "--out", str(tmp_path / "run"))  # fmt: skip
    assert time.monotonic() - started < 5
    assert (code, out) == (2, "") and err.startswith(f"error: --set: parallel.gpus: {problem}")
    assert err.count("\n") == 1
    spec = spec_file(tmp_path, {**SPEC, "set": [f"parallel.gpus={value}"]})
    code, out, err = cli(monkeypatch, capsys, "sweep", str(spec), "--out", str(tmp_path / "s"))
    assert code == 2 and err.startswith(f"error: sweep spec {spec}: set: parallel.gpus: {problem}")
    assert not (tmp_path / "run").exists() and not (tmp_path / "s").exists()


def test_other_set_values_are_taken_as_they_read() -> None:
    """Aliases without anchors, ampersands in text and text that is not YAML are values."""
    depth = MAX_YAML_DEPTH - 1
    out = apply_overrides({}, ["name=*text", "text=a & b", "x=[", "a=b: c: d",
                               "deep=" + "[" * depth + "]" * depth])  # fmt: skip
    assert out["name"] == "*text" and out["text"] == "a & b" and out["x"] == "["
    assert out["a"] == "b: c: d"

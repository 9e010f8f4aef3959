"""``specmd run --profile``: the phases of the run and the engine's parts, and the path the engine
took, on stderr."""

from __future__ import annotations

import json
import re

from support.cli import cli

from specmd_sim.cli.run import FOLDER_PHASE, TIMELINE_PHASE
from specmd_sim.engine import jit

SMALL = ["--trace", "mixtral-synthetic", "--cache", "16", "--set", "workload.max_requests=1"]


def shares(err: str) -> dict[str, float]:
    rows = re.findall(r"│ +(\S[^│]*?) +│ [\d.]+ +│ ([\d.]+)% +│", err)
    return {name.strip(): float(share) for name, share in rows}


def test_profile_splits_the_run_and_its_engine(tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(jit, "available", lambda: True)  # (interpreted without numba)
    code, out, err = cli(monkeypatch, capsys, "run", *SMALL, "--profile", "--json",
                         "--out", str(tmp_path / "run"))  # fmt: skip
    assert code == 0, err
    written = json.loads((tmp_path / "run" / "result.json").read_text())
    assert json.loads(out) == written["metrics"]  # stdout keeps the metrics alone
    assert "engine path: compiled timing core" in err
    assert "wall time of the run (--profile)" in err
    got = shares(err)
    phases = {k: v for k, v in got.items() if not k.startswith("engine:")}
    assert set(phases) == {"inputs (trace, passes, placement, checks)", "engine",
                           TIMELINE_PHASE, FOLDER_PHASE}  # fmt: skip
    assert abs(sum(phases.values()) - 100) < 0.5
    parts = {k.removeprefix("engine: "): v for k, v in got.items() if k.startswith("engine:")}
    assert {"SimPy event loop", "cache and policies", "engine (layer step, streams, flows)",
            "span recording"} <= set(parts)  # fmt: skip
    assert abs(sum(parts.values()) - 100) < 0.5


def test_profile_names_the_engine_path_and_why(tmp_path, monkeypatch, capsys) -> None:
    code, _, err = cli(monkeypatch, capsys, "replay", *SMALL, "--eviction", "random", "--profile",
                       "--out", str(tmp_path / "run"))  # fmt: skip
    assert code == 0, err
    table = err[err.index("wall time of the run (--profile)") :]
    assert ("engine path: Python layer step, ~100x slower than the compiled replay (why: "
            "eviction 'random' has no compiled form)") in " ".join(table.split())  # fmt: skip


def test_without_profile_nothing_is_printed(tmp_path, monkeypatch, capsys) -> None:
    code, _, err = cli(monkeypatch, capsys, "replay", *SMALL, "--out", str(tmp_path / "run"))
    assert code == 0 and "--profile" not in err

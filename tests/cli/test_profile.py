"""``specmd run --profile``: the phases of the run and the engine's parts, and the path the engine
took, on stderr."""

from __future__ import annotations

import json
import re
import sys

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


SLOW = """
from typing import Literal

import numpy as np

from specmd_sim.policies import EVICTION
from specmd_sim.policies.eviction.lru import LRUEviction, LRUConfig


class SlowConfig(LRUConfig):
    kind: Literal["slow"] = "slow"


@EVICTION.register
class Slow(LRUEviction):
    Config = SlowConfig
    description = source = "tests"

    def choose_victim(self, evictable, incoming):
        np.sort(np.random.default_rng(0).random(20_000))  # (its time is numpy's C code)
        return super().choose_victim(evictable, incoming)
"""


def test_profile_gives_the_time_in_a_users_plugin(tmp_path, monkeypatch, capsys) -> None:
    """A run with a plug-in of the user's: one line more, the time in its code with what it
    called (numpy's C code, which the parts count as builtins): much of a run whose policy
    sorts 20,000 numbers at each eviction. A run that uses none (the plug-in still loaded) has
    no such line, and the plug-in's functions are put back after the profile."""
    from specmd_sim.policies import EVICTION

    EVICTION.kinds()  # (the bundled plug-ins first)
    monkeypatch.setattr(EVICTION, "_entries", dict(EVICTION._entries))
    (tmp_path / "slow_plugin.py").write_text(SLOW)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        code, _, err = cli(monkeypatch, capsys, "run", *SMALL, "--plugin", "slow_plugin",
                           "--eviction", "slow_plugin:Slow", "--profile",
                           "--out", str(tmp_path / "run"))  # fmt: skip
        assert code == 0, err
        got = shares(err)
        (line,) = [k for k in got if "in your plug-ins" in k]
        assert line == "engine, of it: in your plug-ins (slow_plugin), what they call included"
        assert 30 < got[line] < 100, got  # (the sorting: ~40% of the engine's time, profiled)
        assert got["engine: builtins and C functions (numpy's included)"] >= got[line] * 0.5
        slow = sys.modules["slow_plugin"].Slow
        assert slow.choose_victim.__code__.co_name == "choose_victim"  # (put back)
        code, _, err = cli(monkeypatch, capsys, "run", *SMALL, "--profile",
                           "--out", str(tmp_path / "plain"))  # fmt: skip
        assert code == 0 and not any("in your plug-ins" in k for k in shares(err))
    finally:
        sys.modules.pop("slow_plugin", None)

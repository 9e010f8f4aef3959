"""``specmd run --profile``: the phases of the run and the engine's parts, on stderr."""

from __future__ import annotations

import json
import re

from support.cli import cli

SMALL = ["--trace", "mixtral-synthetic", "--cache", "16", "--set", "workload.max_requests=1"]


def shares(err: str) -> dict[str, float]:
    rows = re.findall(r"│ +(\S[^│]*?) +│ [\d.]+ +│ ([\d.]+)% +│", err)
    return {name.strip(): float(share) for name, share in rows}


def test_profile_splits_the_run_and_its_engine(tmp_path, monkeypatch, capsys) -> None:
    code, out, err = cli(monkeypatch, capsys, "run", *SMALL, "--profile", "--json",
                         "--out", str(tmp_path / "run"))  # fmt: skip
    assert code == 0, err
    assert "hit_rate" in json.loads(out)  # stdout keeps the metrics alone
    assert "wall time of the run (--profile)" in err
    got = shares(err)
    phases = {k: v for k, v in got.items() if not k.startswith("engine:")}
    assert set(phases) == {"inputs (trace, passes, placement, checks)", "engine", "timeline page",
                           "run folder (result, spans, Perfetto trace)"}  # fmt: skip
    assert abs(sum(phases.values()) - 100) < 0.5
    parts = {k.removeprefix("engine: "): v for k, v in got.items() if k.startswith("engine:")}
    assert {"SimPy event loop", "cache and policies", "engine (layer step, streams, flows)",
            "span recording"} <= set(parts)  # fmt: skip
    assert abs(sum(parts.values()) - 100) < 0.5


def test_without_profile_nothing_is_printed(tmp_path, monkeypatch, capsys) -> None:
    code, _, err = cli(monkeypatch, capsys, "replay", *SMALL, "--out", str(tmp_path / "run"))
    assert code == 0 and "--profile" not in err

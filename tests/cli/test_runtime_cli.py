"""``--runtime``, ``--cache auto``, ``specmd runtimes`` and ``specmd validate published``, run
in-process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from specmd_sim.cli import app
from specmd_sim.errors import SpecmdError

RUNNER = CliRunner()


def invoke(*args: str):
    result = RUNNER.invoke(app, list(args), catch_exceptions=False)
    assert result.exit_code == 0, result.output
    return result


def test_runtimes_list_and_show() -> None:
    listed = invoke("runtimes", "list").output
    for rid in ("fused-kernels (default)", "hf-eager", "mixtral-offloading", "roofline"):
        assert rid in listed
    shown = invoke("runtimes", "show", "mixtral-offloading").output
    assert "dispatch_overhead_s" in shown and "fitted" in shown and "lowest grade" in shown
    data = json.loads(invoke("runtimes", "show", "roofline", "--json").output)
    assert data["id"] == "roofline"


def test_run_with_a_runtime_and_an_auto_cache(tmp_path: Path) -> None:
    fast = invoke("run", "--runtime", "roofline", "--out", str(tmp_path / "a"), "--json")
    slow = invoke("run", "--runtime", "hf-eager", "--cache", "auto", "--out", str(tmp_path / "b"),
                  "--json")  # fmt: skip
    a = json.loads(fast.stdout)  # --json prints the metrics; the inputs are in result.json
    b = json.loads(slow.stdout)
    assert b["tpot_compute_s"] > a["tpot_compute_s"]
    inputs = json.loads((tmp_path / "b" / "result.json").read_text())["inputs"]
    assert inputs["runtime"] == "hf-eager"
    # auto: every slot the budget leaves, in whole experts
    assert inputs["capacity_bytes"] <= inputs["budget_available_bytes"]
    assert inputs["budget_available_bytes"] - inputs["capacity_bytes"] < inputs["expert_bytes"]
    printed = invoke("run", "--runtime", "roofline", "--out", str(tmp_path / "c")).output
    summary = " ".join(printed.split())  # the console wraps long lines
    assert "GPU memory:" in summary and "for the expert cache" in summary


def test_an_unknown_runtime_is_one_clear_error() -> None:
    with pytest.raises(SpecmdError, match="runtime profile: expected a bundled id"):
        RUNNER.invoke(app, ["run", "--runtime", "nope"], catch_exceptions=False)


def test_validate_published_one_group(tmp_path: Path) -> None:
    out = tmp_path / "validation.md"
    result = invoke("validate", "published", "--group", "mo-3060-2bit", "--out", str(out))
    assert "validation rows within" in result.output
    text = out.read_text()
    assert "mo-3060-2bit | no-cache" in text and "Table 2" in text
    with pytest.raises(SpecmdError, match="--group"):
        RUNNER.invoke(app, ["validate", "published", "--group", "nope", "--out", str(out)],
                      catch_exceptions=False)  # fmt: skip

"""The pytest plugin, as a user meets it: the example suite of ``examples/my_policy`` run by
pytest in its own process (the plugin loads through its ``pytest11`` entry point)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from specmd_sim.pytest_plugin import LatencyChecker

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "my_policy"
BASELINE = "baselines/farthest_layer.json"
REFRESH = "pytest examples/my_policy --specmd-update-baselines"


def user_pytest(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "SPECMD_UPDATE_BASELINES"}
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
        cwd=folder, capture_output=True, text=True, timeout=300, env=env,
    )  # fmt: skip


@pytest.fixture
def suite(tmp_path: Path) -> Path:
    folder = tmp_path / "my_policy"
    shutil.copytree(EXAMPLE, folder, ignore=shutil.ignore_patterns("__pycache__"))
    return folder


def test_the_committed_example_passes(suite: Path) -> None:
    proc = user_pytest(suite)
    assert proc.returncode == 0, (
        f"the example's baseline no longer matches the simulator; if the change is intended, "
        f"refresh it with `{REFRESH}`\n{proc.stdout}"
    )
    assert "1 passed" in proc.stdout


def test_a_slower_policy_fails_with_the_table(suite: Path) -> None:
    path = suite / BASELINE
    baseline = json.loads(path.read_text())
    baseline["points"]["run"]["values"]["ttft_s"] *= 0.9
    path.write_text(json.dumps(baseline))  # the policy is now 11% slower than its baseline
    proc = user_pytest(suite)
    assert proc.returncode == 1
    assert "specmd regression against" in proc.stdout and "ttft_s" in proc.stdout
    assert "REGRESSION: 7 checks (1 regressed, 6 unchanged)" in proc.stdout


def test_the_example_baseline_names_the_present_config(monkeypatch: pytest.MonkeyPatch) -> None:
    """A stale point id makes every failure of the example say "config changed"."""
    import runpy

    from specmd_sim import build_config
    from specmd_sim.policies import EVICTION
    from specmd_sim.runs import config_hash

    EVICTION.kinds()  # the bundled plug-ins first; the example's registration is undone after
    monkeypatch.setattr(EVICTION, "_entries", dict(EVICTION._entries))
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.delitem(sys.modules, "my_policy", raising=False)
    example = runpy.run_path(str(EXAMPLE / "test_my_policy.py"))
    config = build_config(example["CONFIG"], plugins=["my_policy"])
    sys.modules.pop("my_policy")
    point_id = json.loads((EXAMPLE / BASELINE).read_text())["points"]["run"]["point_id"]
    assert point_id == f"simulate-{config_hash(config)}", f"refresh it with `{REFRESH}`"


# --- the fixture's object, in this process ---------------------------------------------------

SMALL = {"trace": "mixtral-synthetic", "workload": {"max_requests": 1}, "cache": {"capacity": 16},
         "eviction": {"kind": "lru"}, "timing": {"record_spans": False}}  # fmt: skip


def test_update_writes_then_checks_pass_and_missing_baselines_fail(tmp_path: Path) -> None:
    checker, updater = LatencyChecker(tmp_path, update=False), LatencyChecker(tmp_path, update=True)
    with pytest.raises(pytest.fail.Exception, match="does not exist; create it with pytest "
                                                    "--specmd-update-baselines"):  # fmt: skip
        checker.check(SMALL, "b.json", engine="replay")
    result = updater.check(SMALL, "b.json", engine="replay", metrics=["hit_rate"])
    stored = json.loads((tmp_path / "b.json").read_text())
    assert stored["points"]["run"]["values"] == {"hit_rate": result.metrics["hit_rate"]}
    assert stored["metrics"]["hit_rate"]["better"] == "higher"
    with pytest.raises(pytest.fail.Exception, match="has no point 'other'"):
        checker.check(SMALL, "b.json", engine="replay", key="other")
    stored["points"]["run"]["values"]["hit_rate"] += 0.1  # the baseline was better
    (tmp_path / "b.json").write_text(json.dumps(stored))
    with pytest.raises(pytest.fail.Exception, match=r"(?s)hit_rate.*REGRESSION: 1 checks"):
        checker.check(SMALL, "b.json", engine="replay")

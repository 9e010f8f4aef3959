"""Offline plug-ins (bounds, oracles: given the run's future) are marked wherever a policy is
named: a sweep's table says which points use one, and `specmd compare` labels them."""

from __future__ import annotations

from pathlib import Path

import yaml

from specmd_sim.report.rows import POLICY, load_rows, plan
from specmd_sim.sweep import load_table, run_sweep


def test_offline_points_are_marked_in_the_table_and_on_the_compare_page(tmp_path: Path) -> None:
    spec = {"engine": "replay",
            "base": {"trace": "mixtral-synthetic", "workload": {"max_requests": 1},
                     "cache": {"capacity": 16}, "prefetch": {"kind": "none"},
                     "predictor": {"kind": "trace"}},
            "axes": {"eviction": ["lru", "belady"]}}  # fmt: skip
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(spec))
    run_sweep(path, tmp_path / "out", workers=1)
    table = load_table(tmp_path / "out").set_index("axis.eviction")
    assert table.loc["lru", "offline"] == ""
    assert table.loc["belady", "offline"] == "eviction=belady"
    labels = sorted(r[POLICY] for r in plan(load_rows([tmp_path / "out"])).rows)
    assert labels[0].startswith("belady") and "belady (offline) + none" in labels[0]
    assert labels[1].startswith("lru") and "offline" not in labels[1]

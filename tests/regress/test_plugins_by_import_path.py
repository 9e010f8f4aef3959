"""A policy outside the package, named in a config by its import path (``module:Class``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from specmd_sim import build_config, replay
from specmd_sim.config import config_to_dict
from specmd_sim.errors import SpecmdError
from specmd_sim.policies import EVICTION, PREFETCH

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "my_policy"
SMALL = {"trace": "mixtral-synthetic", "workload": {"max_requests": 1}, "cache": {"capacity": 16}}


@pytest.fixture
def registries(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """The example folder and tmp_path importable; registry additions undone afterwards."""
    for registry in (EVICTION, PREFETCH):
        registry.kinds()  # load the bundled plug-ins first
        monkeypatch.setattr(registry, "_entries", dict(registry._entries))
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    for name in [m for m in sys.modules if m in ("my_policy", "not_a_policy")]:
        del sys.modules[name]


def test_the_example_policy_runs_by_import_path(registries) -> None:
    config = build_config({**SMALL, "eviction": {"kind": "my_policy:FarthestLayer"}})
    assert config_to_dict(config)["eviction"] == {
        "kind": "my_policy:FarthestLayer", "recency_ties": True}  # fmt: skip
    # the resolved config names the plug-in portably: it validates again as it is
    assert build_config(config_to_dict(config)) == config
    cls = EVICTION.get("my_policy:FarthestLayer")
    assert cls.kind == "my_policy:FarthestLayer" and cls.__name__ == "FarthestLayer"
    assert issubclass(cls, EVICTION.get("farthest-layer"))  # registered by its module too
    result = replay(config)
    lru = replay(build_config({**SMALL, "eviction": "lru"}))
    assert result.metrics["accesses"] == lru.metrics["accesses"]
    assert result.metrics["hits"] != lru.metrics["hits"]  # the policy is really in use
    with pytest.raises(SpecmdError, match="recency_ties: input should be a valid boolean"):
        build_config({**SMALL, "eviction": {"kind": "my_policy:FarthestLayer",
                                            "recency_ties": "maybe"}})  # fmt: skip


def test_bad_import_paths_give_one_line(registries, tmp_path: Path) -> None:
    (tmp_path / "not_a_policy.py").write_text("class Thing:\n    kind = 'thing'\n")
    cases = [
        ("nowhere_xyz:Policy", "expected an importable 'module:Class', got 'nowhere_xyz:Policy' "
                               "(No module named 'nowhere_xyz')"),
        ("my_policy:Missing", "expected an importable 'module:Class', got 'my_policy:Missing'"),
        (":Policy", "expected an importable 'module:Class'"),
        ("not_a_policy:Thing", "expected a class registered in the eviction registry"),
    ]  # fmt: skip
    for kind, fragment in cases:
        with pytest.raises(SpecmdError) as info:
            build_config({"eviction": {"kind": kind}})
        assert fragment in str(info.value), str(info.value)
    # an eviction policy is not a prefetch policy
    with pytest.raises(SpecmdError, match="registered in the prefetch registry"):
        build_config({"prefetch": {"kind": "my_policy:FarthestLayer"}})

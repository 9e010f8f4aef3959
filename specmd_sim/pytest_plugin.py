"""pytest plugin: assert the latency and hit rate of a policy against a committed baseline.

Installed with specmd-sim (entry point ``pytest11``), it gives every test suite the fixture
``specmd_latency``::

    def test_my_policy_latency(specmd_latency):
        specmd_latency.check(
            {"trace": "mixtral-synthetic", "eviction": {"kind": "my_policy:FarthestLayer"}},
            baseline="baselines/farthest_layer.json",  # relative to this test file
            plugins=["my_policy"],  # the module of the plug-in named by import path
        )

``check`` runs the config (timing engine by default), compares its metrics with the baseline
(the format of ``specmd regress``, ``docs/regression.md``) and fails the test with the table of
what moved when a metric regressed beyond its tolerance. ``pytest --specmd-update-baselines``
(or ``SPECMD_UPDATE_BASELINES=1``) writes the present values instead, creating missing
baselines.

pytest loads this module in every session of an environment where specmd-sim is installed, so
it imports nothing of the simulator until the fixture is used: the simulator is imported inside
:class:`LatencyChecker`'s methods, and ``import specmd_sim`` itself is light
(``tests/test_layering.py`` checks both).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from specmd_sim.config import SimConfig
    from specmd_sim.metrics import RunResult

UPDATE_OPTION = "--specmd-update-baselines"
UPDATE_ENV = "SPECMD_UPDATE_BASELINES"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("specmd", "specmd-sim latency baselines")
    group.addoption(
        UPDATE_OPTION,
        action="store_true",
        default=False,
        help="Write the present metrics into the baselines used by specmd_latency.check.",
    )


class LatencyChecker:
    """What the ``specmd_latency`` fixture gives a test."""

    def __init__(self, test_dir: Path, update: bool) -> None:
        self.test_dir = test_dir
        self.update = update

    def run(
        self,
        config: SimConfig | dict[str, Any],
        engine: str = "simulate",
        plugins: Sequence[str] = (),
    ) -> RunResult:
        """Run a config (a SimConfig or a mapping of its fields) with ``engine``; ``plugins``
        are the modules of plug-ins it names by import path (imported first)."""
        from specmd_sim import build_config, replay, simulate

        if engine not in ("simulate", "replay"):
            raise ValueError(f"engine: expected simulate or replay, got {engine!r}")
        cfg = config if not isinstance(config, dict) else build_config(config, plugins=plugins)
        return (simulate if engine == "simulate" else replay)(cfg)

    def check(
        self,
        config: SimConfig | dict[str, Any],
        baseline: str | Path,
        *,
        engine: str = "simulate",
        key: str = "run",
        metrics: list[str] | None = None,
        plugins: Sequence[str] = (),
        tolerance: float | None = None,
    ) -> RunResult:
        """Run ``config`` and check its metrics against the point ``key`` of ``baseline``.

        ``baseline`` is relative to the test file's folder. ``metrics`` names the metrics a
        new baseline checks (default: TTFT, TPOT, stall, makespan, hit rate, misses), each
        exactly (counts) or to a relative 1e-9 unless ``tolerance`` (relative) is given;
        ``plugins`` as for :meth:`run`. Returns the result, for further assertions.
        """
        from specmd_sim import regress as rg

        path = Path(baseline)
        if not path.is_absolute():
            path = self.test_dir / path
        old = rg.load_baseline(path) if path.exists() else None
        if not self.update:  # fail before the run when there is nothing to compare with
            if old is None:
                pytest.fail(
                    f"specmd baseline {path} does not exist; create it with pytest {UPDATE_OPTION}",
                    pytrace=False,
                )
            if key not in old.points:
                pytest.fail(
                    f"specmd baseline {path} has no point {key!r}; add it with "
                    f"pytest {UPDATE_OPTION}",
                    pytrace=False,
                )
        result = self.run(config, engine, plugins)
        current = [rg.current_from_result(result.to_dict(), key)]
        if self.update or old is None:
            new = rg.update_baseline(old, current, metrics, replace_all=False, rel=tolerance)
            rg.save_baseline(new, path)
            return result
        comparison = rg.compare(old, current, only=[key])
        if comparison.regressed:
            pytest.fail(
                f"specmd regression against {path}:\n{rg.render_text(comparison)}",
                pytrace=False,
            )
        return result


@pytest.fixture
def specmd_latency(request: pytest.FixtureRequest) -> LatencyChecker:
    """Run a specmd-sim config and assert its metrics against a baseline (see
    :class:`LatencyChecker`)."""
    update = bool(request.config.getoption(UPDATE_OPTION)) or os.environ.get(UPDATE_ENV) == "1"
    return LatencyChecker(Path(request.path).parent, update)

"""``specmd calibrate`` names this machine as the host its measured host-side costs are for
(the host rule scales them on a host of another single-thread speed)."""

from __future__ import annotations

from typing import Any

import pytest

from specmd_sim.execute import calibrate
from specmd_sim.runtime.schema import HostReference


def _q(value: Any) -> dict[str, Any]:
    return {"value": value, "source": "read by the test", "grade": "A"}


def test_this_machine_is_the_reference_where_it_states_clock_and_core(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fields = {"name": "AMD EPYC 7742 64-Core Processor", "boost_clock_hz": _q(3.4e9),
              "core": _q("zen2")}  # fmt: skip
    monkeypatch.setattr(calibrate, "this_host", lambda: fields)
    ref = HostReference.model_validate(calibrate._host_reference()["host_reference"])
    assert ref.name == fields["name"] and ref.boost_clock_hz.value == 3.4e9
    assert ref.core.value == "zen2"


def test_without_a_boost_clock_there_is_no_reference(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(calibrate, "this_host", lambda: {"name": "a VM", "core": _q("zen3")})
    assert calibrate._host_reference() == {}

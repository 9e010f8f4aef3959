"""Tier placement errors: the numbers they print are what they say they are."""

from __future__ import annotations

import numpy as np
import pytest

from specmd_sim.config import build_config
from specmd_sim.errors import SpecmdError
from specmd_sim.hardware import load_profile
from specmd_sim.models import load_model
from specmd_sim.scenario.placement import build_placement
from specmd_sim.traces import load_trace


def test_experts_beyond_dram_without_a_drive_name_total_dram_and_overflow(write_trace) -> None:
    """DeepSeek-V3 (fp8, 609 GiB of routed experts) on a GH200 (447 GiB of DRAM, no NVMe)."""
    experts = np.broadcast_to(np.arange(8, dtype=np.int16), (1, 58, 8))
    config = build_config({"trace": str(write_trace(experts, "deepseek-v3", 256)),
                           "hardware": "gh200"})  # fmt: skip
    trace = load_trace(config.trace)
    with pytest.raises(SpecmdError) as err:
        build_placement(config, load_profile("gh200"), load_model(trace.model), trace)
    assert str(err.value) == (
        "memory: expected an NVMe node in hardware profile gh200 (162 GiB of the 609 GiB of "
        "experts do not fit the 447 GiB of DRAM for experts), got none; use a smaller "
        "expert_dtype or a profile with more DRAM or an NVMe drive"
    )
    # a budget below the host's DRAM can also be raised
    capped = build_config({"trace": config.trace, "hardware": "gh200",
                           "memory": {"dram_capacity": "400GiB"}})  # fmt: skip
    with pytest.raises(SpecmdError) as err:
        build_placement(capped, load_profile("gh200"), load_model(trace.model), trace)
    assert str(err.value).endswith(
        "of DRAM for experts), got none; raise memory.dram_capacity, use a smaller expert_dtype "
        "or a profile with more DRAM or an NVMe drive"
    )

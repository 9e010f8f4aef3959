from __future__ import annotations

from specmd_sim import SimConfig, replay
from specmd_sim.metrics import result_row


def test_result_row_flattens_metrics_inputs_and_config() -> None:
    result = replay(SimConfig(trace="mixtral-synthetic", cache={"capacity": 8},
                              workload={"max_requests": 1}))  # fmt: skip
    row = result_row(result.to_dict())
    assert row["engine"] == "replay" and row["hardware_grade"] is None
    assert row["hit_rate"] == result.metrics["hit_rate"]
    assert row["config.eviction.kind"] == "least-stale"
    assert row["config.cache.capacity"] == 8
    assert row["inputs.model"] == "mixtral-8x7b"
    assert not any(isinstance(v, dict) for v in row.values())

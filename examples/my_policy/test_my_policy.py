"""A user's latency test of their own policy, with specmd-sim's pytest plugin.

``specmd_latency`` comes with specmd-sim (no conftest needed). ``check`` runs the config and
fails the test if TTFT, stall, hit rate, ... moved beyond the tolerances stored in the baseline.
Refresh the baseline after an intended change: ``pytest --specmd-update-baselines``.
"""

CONFIG = {
    "trace": "mixtral-synthetic",
    # the settings the baseline was recorded with, stated (the simulator's defaults may change)
    "workload": {"max_requests": 1, "prefill_chunk_tokens": 1},
    "predictor": {"kind": "noisy-oracle", "accuracy": 0.9},
    "cache": {"capacity": 16},
    "eviction": {"kind": "my_policy:FarthestLayer"},
    "timing": {"record_spans": False},  # a latency check needs no timeline
}


def test_farthest_layer_latency(specmd_latency):
    result = specmd_latency.check(
        CONFIG, baseline="baselines/farthest_layer.json", plugins=["my_policy"]
    )
    assert result.config["eviction"] == {"kind": "my_policy:FarthestLayer", "recency_ties": True}

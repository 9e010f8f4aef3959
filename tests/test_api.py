"""The public API is pinned: changing it is a deliberate act."""

from __future__ import annotations

import specmd_sim


def test_public_api() -> None:
    assert sorted(specmd_sim.__all__) == [
        "RunResult", "SimConfig", "SpecmdError", "__version__", "apply_overrides",
        "build_config", "generate_trace", "list_models", "list_profiles", "load_model",
        "load_profile", "load_trace", "make_trace", "replay", "run_sweep", "save_trace",
        "simulate",
    ]  # fmt: skip
    for name in specmd_sim.__all__:
        assert hasattr(specmd_sim, name), name

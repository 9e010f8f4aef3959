"""Variants of bundled hardware profiles written to a temporary folder."""

from __future__ import annotations

from pathlib import Path

import yaml

from specmd_sim.hardware import load_profile


def profile_with_engines(tmp_path: Path, engines: int) -> Path:
    """h100-pcie with ``engines`` host-to-device copy engines."""
    data = load_profile("h100-pcie").model_dump(mode="json")
    data["nodes"][0]["copy_engines_h2d"]["value"] = engines
    path = tmp_path / f"h100-{engines}ce.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def profile_with_hbm(tmp_path: Path, hbm_bytes: int, name: str = "h100-pcie") -> Path:
    """Profile ``name`` with ``hbm_bytes`` of GPU memory on its first GPU."""
    data = load_profile(name).model_dump(mode="json")
    data["nodes"][0]["hbm_bytes"]["value"] = hbm_bytes
    path = tmp_path / f"{name}-hbm-{hbm_bytes}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path

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


# The near-instant machine of replay's zero-time limit (docs/design.md, "Zero-time transfers"):
# every bandwidth and FLOP/s 1e30, every compute latency and overhead 1e-15 s, and transfers
# faster still (a link's or a drive's latency 1e-18 s), so that whatever a layer step issues
# lands before the compute that precedes the next router decision has ended.
NEAR_INSTANT_RATE, NEAR_INSTANT_S, NEAR_INSTANT_TRANSFER_S = 1e30, 1e-15, 1e-18


def _near_instant(data: object) -> None:
    """Every quantity of a profile, in place, set to the near-instant machine's."""
    if isinstance(data, list):
        for item in data:
            _near_instant(item)
    if not isinstance(data, dict):
        return
    for name, value in data.items():
        if not (isinstance(value, dict) and "grade" in value and "value" in value):
            _near_instant(value)
        elif name.endswith(("_bytes_per_s", "_flops")):
            value["value"] = NEAR_INSTANT_RATE
        elif name in ("latency_s", "read_latency_s"):
            value["value"] = NEAR_INSTANT_TRANSFER_S
        elif name.endswith("_s"):
            value["value"] = NEAR_INSTANT_S


def near_instant(
    tmp_path: Path, hbm_bytes: int | None = None, **runtime_settings: object
) -> list[str]:
    """``--set`` overrides that run on the near-instant machine: h100-pcie (its NVMe drive
    included; optionally with ``hbm_bytes`` of GPU memory) and the roofline runtime (with
    ``runtime_settings``' values, e.g. ``memory_parity=True``)."""
    from specmd_sim.runtime import load_runtime

    hardware = load_profile("h100-pcie").model_dump(mode="json")
    if hbm_bytes is not None:
        hardware["nodes"][0]["hbm_bytes"]["value"] = hbm_bytes
    runtime = load_runtime("roofline").model_dump(mode="json")
    _near_instant(hardware)
    _near_instant(runtime)
    for name, value in runtime_settings.items():
        runtime[name]["value"] = value
    hw_path, rt_path = tmp_path / "near-instant-hw.yaml", tmp_path / "near-instant-rt.yaml"
    hw_path.write_text(yaml.safe_dump(hardware))
    rt_path.write_text(yaml.safe_dump(runtime))
    return [f"hardware={hw_path}", f"runtime={rt_path}"]

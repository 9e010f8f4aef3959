"""The real executor (``specmd_sim/execute/``), quickly: a model 16 times narrower than OLMoE,
a few tokens. Without prefetching no decision depends on time, so the executor's per-access
outcomes must equal the simulator's exactly; its times must be plausible; the throttled link
shares its bandwidth; ``specmd calibrate`` and ``specmd validate real --quick`` run in-process.
The full matrix against the targets is ``benchmarks/validate_real.sh``."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from specmd_sim import SimConfig, simulate
from specmd_sim.cli import app
from specmd_sim.execute import Backend, execute, scaled_model
from specmd_sim.execute.copies import NATIVE, ThrottledLink
from specmd_sim.execute.device import TorchDevice, make_device
from specmd_sim.execute.issue import streams_for
from specmd_sim.execute.model import KvCache, Ops, TorchOps, Weights
from specmd_sim.execute.traces import synthetic_trace, write_model
from specmd_sim.hardware import HardwareProfile
from specmd_sim.runtime import RuntimeProfile
from specmd_sim.scenario import build_scenario
from specmd_sim.validate.document import MARKER, marker
from specmd_sim.validate.real import _outcomes, inputs_digest

RUNNER = CliRunner()


def _devices() -> list[str]:
    """numpy; the torch code on the CPU where torch is (CI: always); CUDA where a GPU is."""
    if os.environ.get("SPECMD_REQUIRE_RECORD"):
        import torch
    else:
        try:
            import torch
        except ImportError:
            return ["cpu"]
    return ["cpu", "torch-cpu", *(["cuda"] if torch.cuda.is_available() else [])]


DEVICES = _devices()
TORCH_DEVICES = [d for d in DEVICES if d != "cpu"]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("exec")
    model = scaled_model("olmoe-1b-7b", 16)
    trace = synthetic_trace(model, folder, "t", 3, num_requests=1, prompt_tokens=4,
                            decode_tokens=6)  # fmt: skip
    return write_model(model, folder), trace


def config(tiny: tuple[Path, Path], **sections: object) -> SimConfig:
    model, trace = tiny
    base = {"model": str(model), "trace": str(trace), "hardware": "h100-pcie",
            "runtime": "roofline", "cache": {"capacity": "10%"}, "eviction": {"kind": "lru"},
            "prefetch": {"kind": "none"}, "timing": {"record_spans": True}}  # fmt: skip
    return SimConfig(**{**base, **sections})


@pytest.mark.parametrize(
    "sections",
    [
        {"eviction": {"kind": "lru"}},
        {"eviction": {"kind": "least-stale", "order": "layer"}},
        {"eviction": {"kind": "static-hot"}},  # streams what it does not admit
        {"miss": {"kind": "substitute"}},
        {"cache": {"capacity": "10%", "pin_demand_set": False}},
    ],
    ids=["lru", "least-stale-layer", "static-hot", "substitute", "one-at-a-time"],
)
@pytest.mark.parametrize("device", DEVICES)
def test_outcomes_equal_the_simulators_without_prefetch(tiny, sections, device) -> None:
    scenario = build_scenario(config(tiny, **sections))
    real = execute(scenario, Backend(link_bandwidth=1.0e9, device=device))
    sim = simulate(scenario)
    assert real.engine == "execute"
    assert _outcomes(real) == _outcomes(sim)
    for key in ("accesses", "hits", "misses_compulsory", "misses_capacity", "evictions",
                "bytes_demand"):  # fmt: skip
        assert real.metrics[key] == sim.metrics[key], key


@pytest.mark.parametrize("device", DEVICES)
def test_measured_times_are_plausible(tiny, device) -> None:
    scenario = build_scenario(config(tiny))
    m = execute(scenario, Backend(link_bandwidth=0.5e9, device=device))
    result = m.metrics
    passes = np.subtract(m.per_pass["end_s"], m.per_pass["start_s"])
    assert (passes > 0).all() and result["makespan_s"] > 0
    assert result["compute_s"] + result["stall_s"] <= result["makespan_s"] * (1 + 1e-9)
    # every miss moved one expert: at 0.5 GB/s that is at least bytes / bandwidth of stall
    # unless compute hid it; the copy engines moved exactly the demanded bytes
    nbytes = scenario.model.expert_bytes
    assert result["bytes_demand"] == result["misses"] * nbytes
    copied = sum(b for b, k in zip(m.per_resource["bytes"], m.per_resource["kind"], strict=True)
                 if k == "copy-engine")  # fmt: skip
    assert copied == result["bytes_demand"]
    assert result["transfer_busy_s"] >= result["bytes_demand"] / 0.5e9 / 2  # 2 copy workers


@pytest.mark.parametrize("device", DEVICES)
def test_the_native_link_moves_the_demanded_bytes_and_decides_the_same(tiny, device) -> None:
    """No throttle (on CUDA: pinned host memory over PCIe on copy streams): the copy engines
    move exactly the demanded bytes, and the outcomes are still the simulator's."""
    scenario = build_scenario(config(tiny, eviction={"kind": "static-hot"}))
    m = execute(scenario, Backend(link_bandwidth=NATIVE, device=device))
    assert _outcomes(m) == _outcomes(simulate(scenario))
    copied = sum(b for b, k in zip(m.per_resource["bytes"], m.per_resource["kind"], strict=True)
                 if k == "copy-engine")  # fmt: skip
    assert copied == m.metrics["bytes_demand"] > 0
    assert m.metrics["makespan_s"] >= m.metrics["compute_s"] > 0


def test_the_throttled_link_shares_its_bandwidth() -> None:
    link, nbytes = ThrottledLink(50e6), 2_500_000  # 50 ms alone
    ends: list[float] = []

    def copy() -> None:
        link.finish(link.start(nbytes))
        ends.append(time.perf_counter())

    start = time.perf_counter()
    copy()
    alone = ends[0] - start
    ends.clear()
    start = time.perf_counter()
    threads = [threading.Thread(target=copy) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    together = max(ends) - start
    # Lower bounds only are exact under load (a busy machine only adds time): the link never
    # moves more than its bandwidth, and two copies on it share it, so together they take twice
    # as long as one alone. The upper bound catches a wrong rate (bits for bytes), not noise.
    assert 0.05 * 0.97 <= alone < 0.05 * 8
    assert 0.10 * 0.97 <= together < 0.10 * 8  # each got half


def test_expert_op_is_a_swiglu() -> None:
    model = scaled_model("olmoe-1b-7b", 16)
    weights = Weights(model, 0)
    x = np.random.default_rng(1).standard_normal((3, model.hidden_size), dtype=np.float32)
    w = weights.slow[5].reshape(3, model.hidden_size, model.moe_intermediate_size)
    gate, up = x @ w[0], x @ w[1]
    want = (gate / (1 + np.exp(-gate)) * up) @ w[2].T
    np.testing.assert_allclose(Ops(weights).expert(weights.slow[5], x), want, rtol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_a_devices_copies_put_the_experts_bytes_in_place(device) -> None:
    """What a copy (a copy worker's; on the torch devices one issued to a copy stream, on
    CUDA without waiting for it) and the preload copy leave in the fast tier is the expert, in
    the slow tier's placement (pinned on CUDA)."""
    dev = make_device(device)
    weights = dev.place(Weights(scaled_model("olmoe-1b-7b", 16), 0))
    fast = dev.zeros(3, weights.expert_size)
    streams = streams_for(dev, 1, dry=False)
    streams.start()
    _, end = streams.copy(0, fast[0], weights.slow[7], None)
    streams.finish()
    assert streams.done(end) and streams.seconds(end) >= 0.0
    dev.copy(fast[2], weights.slow[9])
    host = np.asarray(fast.cpu() if device != "cpu" else fast)
    slow = Weights(weights.model, 0).slow
    np.testing.assert_array_equal(host[0], slow[7])
    np.testing.assert_array_equal(host[1], 0.0)
    np.testing.assert_array_equal(host[2], slow[9])
    if device == "cuda":
        assert weights.slow.is_pinned() and fast.is_cuda


@pytest.mark.parametrize("device", TORCH_DEVICES)
def test_torch_ops_compute_what_numpy_ops_compute(device) -> None:
    """The torch operations (the CUDA backend's) against the numpy ones, on the same weights:
    attention over a KV cache two passes long, an expert, the LM head."""
    dev = TorchDevice(device)
    model = scaled_model("olmoe-1b-7b", 16)
    host = Weights(model, 0)
    ref, ops = Ops(host), TorchOps(dev.place(host), dev.torch)
    rng = np.random.default_rng(2)
    kv_ref, kv = KvCache(model, 5), KvCache(model, 5, dev.zeros)
    for start, tokens in ((0, 3), (3, 2)):  # a prompt, then two more tokens after it
        x = rng.standard_normal((tokens, model.hidden_size), dtype=np.float32)
        want = ref.attention(x, 1, kv_ref, start)
        got = ops.attention(dev.array(x), 1, kv, start)
        np.testing.assert_allclose(got.cpu().numpy(), want, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(kv.k.cpu().numpy(), kv_ref.k, rtol=1e-4, atol=1e-6)
    expert = dev.resident(dev.place(host).slow[5:6])[0]
    np.testing.assert_allclose(ops.expert(expert, dev.array(x)).cpu().numpy(),
                               ref.expert(host.slow[5], x), rtol=1e-4, atol=1e-6)  # fmt: skip
    np.testing.assert_allclose(ops.lm_head(dev.array(x)).cpu().numpy(), ref.lm_head(x),
                               rtol=1e-4, atol=1e-5)  # fmt: skip


def test_scaled_model_and_unsupported_setups(tiny) -> None:
    model = scaled_model("olmoe-1b-7b", 16)
    assert (model.hidden_size, model.moe_intermediate_size, model.num_experts) == (128, 64, 64)
    assert model.expert_dtype == "fp32" and model.expert_bytes == 3 * 128 * 64 * 4
    from specmd_sim.errors import SpecmdError

    with pytest.raises(SpecmdError, match="expected a model with only routed-expert layers"):
        scaled_model("deepseek-v3", 4)
    with pytest.raises(SpecmdError, match=r"miss\.kind: expected fetch, drop or substitute"):
        execute(build_scenario(config(tiny, miss={"kind": "cpu-execute"})), Backend(1e9))


def test_calibrate_and_validate_real_in_process(tmp_path: Path) -> None:
    folder = tmp_path / "cal"
    # experts wide enough, and medians of 3, that a one-token call outlasts its dispatches on a
    # busy machine too (at --scale 16 with one repeat it failed 2 runs in 5 beside two busy
    # processes; 0 in 10 so)
    res = RUNNER.invoke(app, ["calibrate", "--folder", str(folder), "--scale", "8",
                              "--repeats", "3"], catch_exceptions=False)  # fmt: skip
    assert res.exit_code == 0, res.output
    for name in ("hardware.yaml", "runtime.yaml", "model.yaml"):
        assert (folder / name).is_file()
    doc = tmp_path / "validation.md"
    doc.write_text("# Validation\n\npublished part\n")
    res = RUNNER.invoke(app, ["validate", "real", "--folder", str(folder), "--quick",
                              "--repeats", "1", "--decode-tokens", "3", "--out", str(doc)],
                        catch_exceptions=False)  # fmt: skip
    assert res.exit_code == 0, res.output
    text = doc.read_text()
    assert text.startswith("# Validation\n\npublished part\n") and MARKER in text
    assert text.count("| 2 GB/s | decode | 10% | top-k |") == 2
    # --resume keeps the saved cells of the same inputs and measures nothing again
    res = RUNNER.invoke(app, ["validate", "real", "--folder", str(folder), "--quick", "--resume",
                              "--repeats", "1", "--decode-tokens", "3", "--out", str(doc)],
                        catch_exceptions=False)  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "resume: 2 of the 2 saved cells are kept" in res.output and "[1/2]" not in res.output
    assert doc.read_text() == text
    # the cells are saved as they finish; --rewrite writes the report again from them alone
    doc.write_text("# Validation\n\npublished part\n")
    res = RUNNER.invoke(app, ["validate", "real", "--folder", str(folder), "--rewrite",
                              "--quick", "--out", str(doc)], catch_exceptions=False)  # fmt: skip
    assert res.exit_code == 0, res.output
    assert doc.read_text() == text
    # --resume keeps none of other inputs: other repeats (or device) measure every cell again
    res = RUNNER.invoke(app, ["validate", "real", "--folder", str(folder), "--quick", "--resume",
                              "--repeats", "2", "--decode-tokens", "3", "--out", str(doc)],
                        catch_exceptions=False)  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "resume: 0 of the 2 saved cells are kept" in res.output and "[2/2]" in res.output
    model = folder / "model.yaml"
    assert inputs_digest(folder, model, 1, "cpu") != inputs_digest(folder, model, 1, "torch-cpu")


_LINK = "--link-bandwidth: expected a finite number of bytes/s > 0 or 'native', got "
_CAL = ["calibrate", "--folder", "{tmp}/cal"]  # (where it would write, were it not refused)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([*_CAL, "--backend", "tpu"], "--backend: expected one of cpu, cuda, torch-cpu, got 'tpu'"),
        (["validate", "real", "--folder", "{tmp}", "--backend", "published"],
         "--backend: expected one of cpu, cuda, torch-cpu, got 'published'"),
        ([*_CAL, "--link-bandwidth", "fast"], _LINK + "fast"),
        ([*_CAL, "--link-bandwidth", "-1"], _LINK + "-1"),
        ([*_CAL, "--link-bandwidth", "inf"], _LINK + "inf"),
        (["validate", "real", "--folder", "{tmp}"], "run specmd calibrate --folder"),
    ],
)  # fmt: skip
def test_bad_backends_links_and_missing_calibration_are_one_line_errors(
    tmp_path: Path, args: list[str], message: str
) -> None:
    res = RUNNER.invoke(app, [a.replace("{tmp}", str(tmp_path)) for a in args])
    assert res.exit_code != 0 and message in str(res.exception), res.exception
    assert not list(tmp_path.iterdir())  # nothing written


@pytest.mark.parametrize("tokens", ["0", "-1"])
def test_validate_real_needs_tokens_to_decode(tmp_path: Path, tokens: str) -> None:
    """A cell with no decoded token has no TPOT: refused in one line before any run."""
    for name in ("model.yaml", "hardware.yaml", "runtime.yaml"):
        (tmp_path / name).write_text("")  # (present: the check comes before they are read)
    args = ["validate", "real", "--folder", str(tmp_path), "--decode-tokens", tokens,
            "--out", str(tmp_path / "v.md")]  # fmt: skip
    res = RUNNER.invoke(app, args)
    assert res.exit_code != 0
    assert f"--decode-tokens: expected an integer >= 1, got {tokens}" in str(res.exception)


def test_a_cuda_backend_without_a_gpu_is_one_line() -> None:
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the cuda cases of this module run on it")
    res = RUNNER.invoke(app, ["calibrate", "--backend", "cuda"])
    assert res.exit_code != 0
    assert "--backend: expected a CUDA GPU that torch" in str(res.exception)


@pytest.mark.parametrize("device", TORCH_DEVICES)
def test_calibrate_and_validate_real_on_a_torch_device(tmp_path: Path, device: str) -> None:
    """The CUDA backend's code end to end (on the CPU where there is no GPU): calibrated on
    the device's own link, whose bandwidth is measured; its part of the report goes after the
    CPU's, which stays."""
    folder = tmp_path / "cal"
    res = RUNNER.invoke(app, ["calibrate", "--backend", device, "--folder", str(folder),
                              "--scale", "8", "--repeats", "3", "--link-bandwidth", "native",
                              "--json"], catch_exceptions=False)  # fmt: skip
    assert res.exit_code == 0, res.output
    measured = json.loads(res.stdout)
    hardware = HardwareProfile.model_validate(
        yaml.safe_load((folder / "hardware.yaml").read_text())
    )
    (link,) = hardware.links
    assert link.kind.startswith("pcie-") if device == "cuda" else link.kind == "emulated"
    assert link.bandwidth_bytes_per_s.grade == "A"  # measured, not a setting
    assert link.bandwidth_bytes_per_s.value == measured["link_bandwidth_bytes_per_s"]["value"] > 0
    assert hardware.id == f"calibrated-{device}"
    # the host time of issuing a copy to a copy stream, measured (torch-cpu: the whole copy,
    # which its host makes), and carried to the simulator by the runtime profile
    runtime = RuntimeProfile.model_validate(yaml.safe_load((folder / "runtime.yaml").read_text()))
    issue = runtime.copy_issue_overhead_s
    assert issue is not None and issue.grade == "A"
    assert issue.value == measured["copy_issue_overhead_s"]["value"] > 0
    assert "copy streams, issued by one thread" in measured["link_bandwidth_bytes_per_s"]["how"]
    interference = runtime.copy_interference  # what a moving copy costs a kernel, measured
    assert interference is not None and interference.grade == "A"
    assert interference.value == max(measured["copy_interference"]["value"], 0.0)
    (host,) = hardware.hosts  # the CPU as read from the system (Linux: /proc/cpuinfo)
    assert host.physical_cores is not None and host.isa is not None
    assert host.physical_cores.source.startswith("read from /proc/cpuinfo")
    doc = tmp_path / "validation.md"
    cpu_part = f"{MARKER}\n## Against a real execution on this machine\n\nthe CPU's cells\n"
    doc.write_text(f"# Validation\n\npublished part\n\n{cpu_part}")
    res = RUNNER.invoke(app, ["validate", "real", "--backend", device, "--folder", str(folder),
                              "--quick", "--repeats", "1", "--decode-tokens", "3", "--out",
                              str(doc)], catch_exceptions=False)  # fmt: skip
    assert res.exit_code == 0, res.output
    text = doc.read_text()
    assert text.startswith(f"# Validation\n\npublished part\n\n{cpu_part}\n{marker(device)}\n")
    label = "native" if device == "cuda" else "2 GB/s"
    assert text.count(f"| {label} | decode | 10% | top-k |") == 2
    assert f"specmd validate real --backend {device} --quick" in text

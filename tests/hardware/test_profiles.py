"""Bundled hardware profiles load and are consistent; bad profiles fail with one-line errors."""

from __future__ import annotations

import copy
import itertools
from pathlib import Path

import pytest
import yaml

from specmd_sim.errors import SpecmdError
from specmd_sim.hardware import (
    HardwareProfile,
    build_graph,
    find_path,
    host_path,
    list_profiles,
    load_profile,
    lowest_grade,
)
from specmd_sim.hardware.loader import profile_dir
from specmd_sim.hardware.schema import NVMeNode
from specmd_sim.hardware.topology import Hop

EXPECTED_PROFILES = {
    "a100-80g-sxm",
    "gh200",
    "h100-pcie",
    "h100-sxm",
    "h200",
    "hgx-h100-8gpu",
    "l4",
    "rtx4090",
    "slow-link-5gbps",
}

BUNDLED = list_profiles()
MULTI_GPU = {"hgx-h100-8gpu"}
SINGLE_GPU = [p for p in BUNDLED if p not in MULTI_GPU]
TRANSIT_KINDS = {"switch", "host"}


def host_link(profile: HardwareProfile):
    """The single link a host -> gpu0 transfer crosses (single-GPU profiles)."""
    hops = find_path(profile, build_graph(profile), "host", "gpu0")
    assert len(hops) == 1
    return hops[0].link


def assert_well_formed(profile: HardwareProfile, hops: list[Hop], src: str, dst: str) -> None:
    """``hops`` chain from ``src`` to ``dst`` over existing links, visit no node twice and pass
    only through switch and host nodes."""
    assert hops, f"no path {src}->{dst}"
    assert hops[0].src == src
    assert hops[-1].dst == dst
    for hop, following in itertools.pairwise(hops):
        assert hop.dst == following.src
    nodes = [src, *(h.dst for h in hops)]
    assert len(nodes) == len(set(nodes)), nodes
    links = {link.id: link for link in profile.links}
    for hop in hops:
        assert links[hop.link.id] == hop.link
        assert {hop.src, hop.dst} == {hop.link.a, hop.link.b}
        assert hop.link.bandwidth_bytes_per_s.value > 0
    for transit in nodes[1:-1]:
        assert profile.node(transit).kind in TRANSIT_KINDS, (transit, nodes)


# --- the bundled profiles ------------------------------------------------------------------------


def test_all_expected_profiles_are_bundled() -> None:
    assert set(BUNDLED) >= EXPECTED_PROFILES


@pytest.mark.parametrize("profile_id", BUNDLED)
def test_bundled_profile_loads_and_id_is_file_stem(profile_id: str) -> None:
    by_id = load_profile(profile_id)
    by_path = load_profile(profile_dir() / f"{profile_id}.yaml")
    assert isinstance(by_id, HardwareProfile)
    assert by_id.id == profile_id
    assert by_id == by_path


@pytest.mark.parametrize("profile_id", BUNDLED)
def test_bundled_profile_has_path_host_to_every_gpu(profile_id: str) -> None:
    profile = load_profile(profile_id)
    graph = build_graph(profile)
    assert set(graph.nodes) == {n.id for n in profile.nodes}
    assert "gpu0" in graph
    for gpu in profile.gpus:
        for src, dst in [("host", gpu.id), (gpu.id, "host")]:
            assert_well_formed(profile, find_path(profile, graph, src, dst), src, dst)
        # The engine's view of the same path: its link directions, then host DRAM.
        path = host_path(profile, gpu.id)
        assert [h.key for h in path.hops] == [
            h.key for h in find_path(profile, graph, "host", gpu.id)
        ]
        assert set(path.resources) == {*(h.key for h in path.hops), "dram:host"}
        assert path.bandwidth == min(path.capacity.values()) > 0


@pytest.mark.parametrize("profile_id", SINGLE_GPU)
def test_single_gpu_profile_has_one_host_link(profile_id: str) -> None:
    """One GPU, one host, one host<->GPU link; any other link joins an NVMe leaf to the host."""
    profile = load_profile(profile_id)
    assert [g.id for g in profile.gpus] == ["gpu0"]
    assert [h.id for h in profile.hosts] == ["host"]
    gpu_link = host_link(profile)
    assert {gpu_link.a, gpu_link.b} == {"host", "gpu0"}
    assert profile.links[0] == gpu_link
    for link in profile.links[1:]:
        ends = {link.a, link.b}
        assert "host" in ends and "gpu0" not in ends, link.id
        assert isinstance(profile.node((ends - {"host"}).pop()), NVMeNode), link.id


@pytest.mark.parametrize("profile_id", BUNDLED)
def test_nvme_nodes_are_leaves_on_the_host(profile_id: str) -> None:
    """An NVMe drive is a leaf; nothing routes through it, so adding one changes no path."""
    profile = load_profile(profile_id)
    graph = build_graph(profile)
    for node in profile.nodes:
        if isinstance(node, NVMeNode):
            (neighbor,) = graph.neighbors(node.id)
            assert profile.node(neighbor).kind in TRANSIT_KINDS
            assert_well_formed(profile, find_path(profile, graph, node.id, "gpu0"), node.id, "gpu0")


@pytest.mark.parametrize("profile_id", BUNDLED)
def test_bundled_profile_quantities_have_sources(profile_id: str) -> None:
    quantities = list(load_profile(profile_id).quantities())
    assert quantities
    for path, q in quantities:
        assert q.source.strip(), path
        assert q.grade in "ABCD", path


# GPUs before Ada/Hopper have no FP8 tensor cores
NO_FP8 = {"a100-80g-sxm", "t4", "t4-azure", "rtx3060", "rtx3080-mobile", "rtx-a5000", "rtx-a6000",
          "i9-10900x-rtx2080", "rtx3090"}  # fmt: skip


def test_fp8_absent_only_before_ada() -> None:
    for profile_id in BUNDLED:
        gpu = load_profile(profile_id).gpus[0]
        if profile_id in NO_FP8:
            assert gpu.dense_fp8_flops is None
        else:
            assert gpu.dense_fp8_flops is not None
            assert gpu.dense_fp8_flops.value > gpu.dense_bf16_flops.value


@pytest.mark.parametrize(
    ("profile_id", "hbm_bytes", "hbm_bw", "bf16_flops", "link_kind"),
    [
        ("a100-80g-sxm", 80e9, 2.039e12, 312e12, "pcie-gen4"),
        ("h100-sxm", 80e9, 3.35e12, 989.5e12, "pcie-gen5"),
        ("h200", 141e9, 4.8e12, 989.5e12, "pcie-gen5"),
        ("hgx-h100-8gpu", 80e9, 3.35e12, 989.5e12, "pcie-gen5"),
        ("gh200", 96e9, 4.0e12, 989.5e12, "nvlink-c2c"),
        ("rtx4090", 24e9, 1.008e12, 165.2e12, "pcie-gen4"),
        ("l4", 24e9, 300e9, 121e12, "pcie-gen4"),
        ("l4-cascade-lake", 24e9, 300e9, 121e12, "pcie-gen3"),  # a Gen4 card on Gen3 lanes
    ],
)
def test_key_numbers(
    profile_id: str, hbm_bytes: float, hbm_bw: float, bf16_flops: float, link_kind: str
) -> None:
    profile = load_profile(profile_id)
    gpu = profile.gpus[0]
    assert gpu.hbm_bytes.value == pytest.approx(hbm_bytes)
    assert gpu.hbm_bandwidth_bytes_per_s.value == pytest.approx(hbm_bw)
    assert gpu.dense_bf16_flops.value == pytest.approx(bf16_flops)
    hops = find_path(profile, build_graph(profile), "host", "gpu0")
    assert {h.link.kind for h in hops} == {link_kind}


def test_gh200_host_link_is_nvlink_c2c_and_much_faster_than_pcie() -> None:
    c2c = host_link(load_profile("gh200"))
    pcie = host_link(load_profile("h100-pcie"))
    assert c2c.kind == "nvlink-c2c"
    assert pcie.kind == "pcie-gen5"
    assert c2c.bandwidth_bytes_per_s.value == pytest.approx(450e9)
    assert c2c.bandwidth_bytes_per_s.value >= 5 * pcie.bandwidth_bytes_per_s.value
    grace = load_profile("gh200").hosts[0]
    assert grace.dram_bytes.value == pytest.approx(480e9)


def test_slow_link_is_h100_pcie_with_a_5_gb_per_s_link() -> None:
    slow = load_profile("slow-link-5gbps")
    base = load_profile("h100-pcie")
    link = host_link(slow)
    assert link.bandwidth_bytes_per_s.value == 5.0e9
    assert link.bandwidth_bytes_per_s.grade == "D"
    assert "what-if" in slow.description
    # Everything but the link bandwidth matches the h100-pcie machine.
    assert slow.nodes == base.nodes
    assert link.latency_s == host_link(base).latency_s
    assert slow.links[1:] == base.links[1:]


# --- the 8-GPU HGX H100 node ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def hgx() -> HardwareProfile:
    return load_profile("hgx-h100-8gpu")


def test_hgx_has_eight_identical_h100s(hgx: HardwareProfile) -> None:
    assert [g.id for g in hgx.gpus] == [f"gpu{i}" for i in range(8)]
    assert [h.id for h in hgx.hosts] == ["host"]
    reference = load_profile("h100-sxm")
    # Same per-GPU and host numbers as the single-GPU h100-sxm profile.
    for gpu in hgx.gpus:
        assert gpu == reference.gpus[0].model_copy(update={"id": gpu.id})
    host, ref_host = hgx.hosts[0], reference.hosts[0]
    assert host.dram_bytes.value == ref_host.dram_bytes.value == 2.0e12
    assert host.dram_bandwidth_bytes_per_s == ref_host.dram_bandwidth_bytes_per_s
    kinds = {n.id: n.kind for n in hgx.nodes}
    assert [i for i, k in kinds.items() if k == "switch"] == [
        "pcie-sw0",
        "pcie-sw1",
        "pcie-sw2",
        "pcie-sw3",
        "nvswitch",
    ]
    assert [i for i, k in kinds.items() if k == "nvme"] == ["nvme0"]


def test_hgx_gpu_pairs_share_their_pcie_uplink(hgx: HardwareProfile) -> None:
    graph = build_graph(hgx)
    uplink = {}
    for m in range(8):
        hops = find_path(hgx, graph, "host", f"gpu{m}")
        switch = f"pcie-sw{m // 2}"
        assert [(h.src, h.dst) for h in hops] == [("host", switch), (switch, f"gpu{m}")]
        assert {h.link.kind for h in hops} == {"pcie-gen5"}
        assert all(h.link.bandwidth_bytes_per_s.value == 53.0e9 for h in hops)
        uplink[m] = hops[0].key
        # The engine's transfer path shares that uplink as a resource.
        assert uplink[m] in host_path(hgx, f"gpu{m}").resources
    for n in range(4):
        assert uplink[2 * n] == uplink[2 * n + 1] == f"pcie-up{n}:host>pcie-sw{n}"
    assert len(set(uplink.values())) == 4
    # Each GPU has its own downlink: only the uplink is shared within a pair.
    downlinks = {find_path(hgx, graph, "host", f"gpu{m}")[1].key for m in range(8)}
    assert len(downlinks) == 8


def test_hgx_gpu_to_gpu_goes_over_nvlink_via_nvswitch(hgx: HardwareProfile) -> None:
    graph = build_graph(hgx)
    for a in range(8):
        for b in range(8):
            if a == b:
                continue
            hops = find_path(hgx, graph, f"gpu{a}", f"gpu{b}")
            assert_well_formed(hgx, hops, f"gpu{a}", f"gpu{b}")
            assert [h.key for h in hops] == [
                f"nvlink-gpu{a}:gpu{a}>nvswitch",
                f"nvlink-gpu{b}:nvswitch>gpu{b}",
            ]
    nvlink = hops[0].link
    assert nvlink.kind == "nvlink"
    # Achieved NVLink 4 bandwidth: below the 450 GB/s per-direction peak, ~7x a Gen5 x16 link.
    assert 300e9 < nvlink.bandwidth_bytes_per_s.value <= 450e9
    assert nvlink.bandwidth_bytes_per_s.value > 5 * 53.0e9


def test_hgx_nvme_reads_go_through_host_and_the_pair_uplink(hgx: HardwareProfile) -> None:
    graph = build_graph(hgx)
    hops = find_path(hgx, graph, "nvme0", "gpu5")
    assert [h.key for h in hops] == [
        "nvme-raid:nvme0>host",
        "pcie-up2:host>pcie-sw2",
        "pcie-gpu5:pcie-sw2>gpu5",
    ]


# --- NVMe read bandwidth against queue depth -----------------------------------------------------


@pytest.mark.parametrize(
    ("profile_id", "drives"),
    [("h100-pcie", 1), ("rtx4090", 1), ("slow-link-5gbps", 1), ("hgx-h100-8gpu", 8)],
)
def test_bundled_nvme_drives(profile_id: str, drives: int) -> None:
    profile = load_profile(profile_id)
    (nvme,) = [n for n in profile.nodes if isinstance(n, NVMeNode)]
    assert nvme.read_request_bytes.value == 128 * 1024
    # The queue cap lets the drive reach its sequential peak.
    assert nvme.read_bandwidth(nvme.max_queue_depth.value) == nvme.read_bandwidth_bytes_per_s.value
    assert 40e-6 <= nvme.read_latency_s.value <= 200e-6
    assert 3e9 * drives <= nvme.read_bandwidth_bytes_per_s.value <= 15e9 * drives
    # The drive's own link does not throttle it.
    (link,) = [lk for lk in profile.links if nvme.id in (lk.a, lk.b)]
    assert link.bandwidth_bytes_per_s.value >= nvme.read_bandwidth_bytes_per_s.value


def test_nvme_bandwidth_follows_littles_law_up_to_the_peak() -> None:
    nvme = load_profile("h100-pcie").node("nvme0")
    assert isinstance(nvme, NVMeNode)
    assert nvme.read_bandwidth_by_queue_depth is None
    peak = nvme.read_bandwidth_bytes_per_s.value  # 13 GB/s
    per_request = nvme.read_request_bytes.value / nvme.read_latency_s.value  # 128 KiB / 90 us
    assert per_request == pytest.approx(131072 / 90e-6)
    saturation = peak / per_request  # ~8.9 reads in flight
    assert 2 < saturation < nvme.max_queue_depth.value
    rates = [nvme.read_bandwidth(q) for q in range(1, nvme.max_queue_depth.value + 1)]
    for q, rate in enumerate(rates, start=1):
        assert rate == pytest.approx(min(peak, q * per_request))
    assert rates == sorted(rates)
    assert rates[0] < rates[1] < rates[2]  # strictly rising below saturation
    assert rates[-1] == peak
    assert max(rates) == peak  # capped at the vendor sequential read
    # Beyond the queue cap nothing changes; a depth below 1 counts as 1.
    assert nvme.read_bandwidth(10_000) == peak
    assert nvme.read_bandwidth(0) == rates[0]


def test_nvme_measured_curve_replaces_littles_law(tmp_path: Path, base_profile: dict) -> None:
    data = copy.deepcopy(base_profile)
    (node,) = [n for n in data["nodes"] if n["kind"] == "nvme"]
    node["read_bandwidth_by_queue_depth"] = {
        "points": [
            {"queue_depth": 1, "bandwidth_bytes_per_s": 2.0e9},
            {"queue_depth": 4, "bandwidth_bytes_per_s": 8.0e9},
            {"queue_depth": 16, "bandwidth_bytes_per_s": 14.0e9},
        ],
        "source": "test curve",
        "grade": "A",
    }
    nvme = load_profile(write(tmp_path, data, "curve.yaml")).node("nvme0")
    assert isinstance(nvme, NVMeNode)
    assert nvme.read_bandwidth(1) == 2.0e9
    assert nvme.read_bandwidth(2) == pytest.approx(4.0e9)  # linear between points
    assert nvme.read_bandwidth(4) == 8.0e9
    assert nvme.read_bandwidth(10) == pytest.approx(11.0e9)
    assert nvme.read_bandwidth(16) == 13.0e9  # the curve, capped at the 13 GB/s peak
    assert nvme.read_bandwidth(64) == 13.0e9  # flat beyond the last point


def test_nvme_curve_needs_increasing_depths(tmp_path: Path, base_profile: dict) -> None:
    data = copy.deepcopy(base_profile)
    (node,) = [n for n in data["nodes"] if n["kind"] == "nvme"]
    node["read_bandwidth_by_queue_depth"] = {
        "points": [
            {"queue_depth": 4, "bandwidth_bytes_per_s": 8.0e9},
            {"queue_depth": 4, "bandwidth_bytes_per_s": 9.0e9},
        ],
        "source": "test curve",
        "grade": "A",
    }
    message = load_error(write(tmp_path, data))
    assert "strictly increasing queue depths" in message
    assert "[4, 4]" in message


def test_lowest_grade() -> None:
    profile = load_profile("h100-sxm")
    gpu = profile.gpus[0]
    assert lowest_grade([]) == "A"
    assert lowest_grade([gpu.hbm_bytes, gpu.hbm_bandwidth_bytes_per_s]) == "B"
    assert lowest_grade([gpu.hbm_bytes, gpu.memory_efficiency]) == "C"
    assert lowest_grade([gpu.hbm_bytes, gpu.compute_efficiency]) == "D"
    # Every bundled profile contains assumptions, so its overall grade is D.
    assert lowest_grade([q for _, q in profile.quantities()]) == "D"
    slow_link = host_link(load_profile("slow-link-5gbps"))
    assert lowest_grade([slow_link.bandwidth_bytes_per_s]) == "D"


# --- bad profiles --------------------------------------------------------------------------------


@pytest.fixture
def base_profile() -> dict:
    return yaml.safe_load((profile_dir() / "h100-pcie.yaml").read_text(encoding="utf-8"))


def write(tmp_path: Path, data: dict | str, name: str = "bad.yaml") -> Path:
    path = tmp_path / name
    path.write_text(data if isinstance(data, str) else yaml.safe_dump(data), encoding="utf-8")
    return path


def load_error(path: Path) -> str:
    with pytest.raises(SpecmdError) as info:
        load_profile(path)
    message = str(info.value)
    assert "\n" not in message, message
    assert str(path) in message, message
    return message


def test_missing_field(tmp_path: Path, base_profile: dict) -> None:
    data = copy.deepcopy(base_profile)
    del data["nodes"][0]["hbm_bandwidth_bytes_per_s"]
    message = load_error(write(tmp_path, data))
    assert "nodes.0.gpu.hbm_bandwidth_bytes_per_s" in message
    assert "required field is missing" in message


def test_missing_source_of_a_quantity(tmp_path: Path, base_profile: dict) -> None:
    data = copy.deepcopy(base_profile)
    del data["links"][0]["latency_s"]["source"]
    message = load_error(write(tmp_path, data))
    assert "links.0.latency_s.source" in message
    assert "required field is missing" in message


def test_negative_number(tmp_path: Path, base_profile: dict) -> None:
    data = copy.deepcopy(base_profile)
    data["nodes"][0]["hbm_bytes"]["value"] = -5
    message = load_error(write(tmp_path, data))
    assert "nodes.0.gpu.hbm_bytes.value" in message
    assert "greater than or equal to 1" in message
    assert message.endswith("got -5")


def test_fraction_above_one(tmp_path: Path, base_profile: dict) -> None:
    data = copy.deepcopy(base_profile)
    data["nodes"][0]["compute_efficiency"]["value"] = 1.5
    message = load_error(write(tmp_path, data))
    assert "nodes.0.gpu.compute_efficiency.value" in message
    assert "less than or equal to 1" in message
    assert "got 1.5" in message


@pytest.mark.parametrize("field", ["copy_engines_h2d", "copy_engines_d2h"])
def test_copy_engines_are_bounded(tmp_path: Path, base_profile: dict, field: str) -> None:
    """At most 64 (real GPUs have a handful): the timing engine keeps a slot and a lane per
    engine, the real executor a thread."""
    data = copy.deepcopy(base_profile)
    data["nodes"][0][field]["value"] = 64
    assert getattr(load_profile(write(tmp_path, data)).gpus[0], field).value == 64
    data["nodes"][0][field]["value"] = 10**9
    message = load_error(write(tmp_path, data))
    assert message.endswith(
        f"nodes.0.gpu.{field}.value: input should be less than or equal to 64, got 1000000000"
    )


def test_unknown_grade(tmp_path: Path, base_profile: dict) -> None:
    data = copy.deepcopy(base_profile)
    data["links"][0]["bandwidth_bytes_per_s"]["grade"] = "E"
    message = load_error(write(tmp_path, data))
    assert "links.0.bandwidth_bytes_per_s.grade" in message
    assert "got 'E'" in message


def test_malformed_yaml(tmp_path: Path) -> None:
    text = "schema_version: 1\nid: broken\nnodes: [unclosed\n"
    message = load_error(write(tmp_path, text))
    assert "malformed YAML" in message
    assert "line 4" in message


def test_top_level_not_a_mapping(tmp_path: Path) -> None:
    message = load_error(write(tmp_path, "- just\n- a list\n"))
    assert "expected a YAML mapping" in message
    assert "got list" in message


def test_unknown_link_endpoint(tmp_path: Path, base_profile: dict) -> None:
    data = copy.deepcopy(base_profile)
    data["links"][0]["b"] = "gpu9"
    message = load_error(write(tmp_path, data))
    assert "links[pcie0].b: expected one of the node ids" in message
    assert "['gpu0', 'host', 'nvme0']" in message
    assert "got 'gpu9'" in message


def test_unknown_link_endpoint_names_field_path(tmp_path: Path, base_profile: dict) -> None:
    data = copy.deepcopy(base_profile)
    data["links"][0]["b"] = "gpu9"
    message = load_error(write(tmp_path, data))
    assert "(root)" not in message
    assert "links" in message.split("got")[0]


def test_duplicate_node_id(tmp_path: Path, base_profile: dict) -> None:
    data = copy.deepcopy(base_profile)
    data["nodes"][1]["id"] = "gpu0"
    message = load_error(write(tmp_path, data))
    assert "expected unique node ids" in message
    assert "['gpu0']" in message


def test_unknown_bundled_id() -> None:
    with pytest.raises(SpecmdError) as info:
        load_profile("no-such-machine")
    message = str(info.value)
    assert "\n" not in message
    assert "'no-such-machine'" in message
    assert "h100-pcie" in message


def test_profile_from_file_round_trips(tmp_path: Path, base_profile: dict) -> None:
    data = copy.deepcopy(base_profile)
    data["id"] = "my-box"
    data["links"][0]["bandwidth_bytes_per_s"]["value"] = 12.5e9
    profile = load_profile(write(tmp_path, data, "my-box.yaml"))
    assert profile.id == "my-box"
    assert host_link(profile).bandwidth_bytes_per_s.value == 12.5e9


# --- a custom multi-hop topology -----------------------------------------------------------------

SWITCHED = """
schema_version: 1
id: switched
name: test box with a PCIe switch and an NVMe drive
nodes:
  - {kind: gpu, id: gpu0, name: g,
     hbm_bytes: {value: 80.0e+9, source: s, grade: B},
     hbm_bandwidth_bytes_per_s: {value: 2.0e+12, source: s, grade: B},
     dense_bf16_flops: {value: 756.0e+12, source: s, grade: B},
     compute_efficiency: {value: 0.6, source: s, grade: D},
     memory_efficiency: {value: 0.8, source: s, grade: C},
     kernel_launch_overhead_s: {value: 5.0e-6, source: s, grade: C},
     copy_engines_h2d: {value: 2, source: s, grade: D},
     copy_engines_d2h: {value: 2, source: s, grade: D}}
  - {kind: host, id: host, name: h,
     dram_bytes: {value: 1.0e+12, source: s, grade: D},
     dram_bandwidth_bytes_per_s: {value: 300.0e+9, source: s, grade: C},
     cpu_flops: {value: 1.0e+13, source: s, grade: D}}
  - {kind: switch, id: sw0}
  - {kind: nvme, id: nvme0, name: n,
     capacity_bytes: {value: 4.0e+12, source: s, grade: B},
     read_bandwidth_bytes_per_s: {value: 7.0e+9, source: s, grade: B},
     read_latency_s: {value: 80.0e-6, source: s, grade: C},
     read_request_bytes: {value: 131072, source: s, grade: D},
     max_queue_depth: {value: 64, source: s, grade: D}}
links:
  - {id: slow, kind: pcie-gen3, a: host, b: gpu0,
     bandwidth_bytes_per_s: {value: 5.0e+9, source: s, grade: D},
     latency_s: {value: 10.0e-6, source: s, grade: C}}
  - {id: up, kind: pcie-gen5, a: host, b: sw0,
     bandwidth_bytes_per_s: {value: 53.0e+9, source: s, grade: C},
     latency_s: {value: 1.0e-6, source: s, grade: C}}
  - {id: down, kind: pcie-gen5, a: sw0, b: gpu0,
     bandwidth_bytes_per_s: {value: 53.0e+9, source: s, grade: C},
     latency_s: {value: 1.0e-6, source: s, grade: C}}
  - {id: ssd, kind: pcie-gen4, a: nvme0, b: sw0,
     bandwidth_bytes_per_s: {value: 7.0e+9, source: s, grade: B},
     latency_s: {value: 1.0e-6, source: s, grade: C}}
"""


def test_path_prefers_widest_then_shortest(tmp_path: Path) -> None:
    profile = load_profile(write(tmp_path, SWITCHED, "switched.yaml"))
    graph = build_graph(profile)
    # The two-hop path through the switch (53 GB/s) beats the direct 5 GB/s link.
    assert [h.key for h in find_path(profile, graph, "host", "gpu0")] == [
        "up:host>sw0",
        "down:sw0>gpu0",
    ]
    # Directions are distinct resources: the reverse flow uses the links' other direction.
    assert [h.key for h in find_path(profile, graph, "gpu0", "host")] == [
        "down:gpu0>sw0",
        "up:sw0>host",
    ]
    assert [h.key for h in find_path(profile, graph, "nvme0", "gpu0")] == [
        "ssd:nvme0>sw0",
        "down:sw0>gpu0",
    ]


def test_second_link_between_same_nodes_is_rejected(tmp_path: Path) -> None:
    data = yaml.safe_load(SWITCHED)
    extra = copy.deepcopy(data["links"][0])
    extra.update(id="slow2", a="gpu0", b="host")
    data["links"].append(extra)
    profile = load_profile(write(tmp_path, data, "switched.yaml"))
    with pytest.raises(SpecmdError) as info:
        build_graph(profile)
    message = str(info.value)
    assert "\n" not in message
    assert "at most one link" in message
    assert "'slow2'" in message


def test_disconnected_gpu_has_no_path(tmp_path: Path) -> None:
    data = yaml.safe_load(SWITCHED)
    data["links"] = [link for link in data["links"] if link["id"] in ("up", "ssd")]
    profile = load_profile(write(tmp_path, data, "switched.yaml"))
    with pytest.raises(SpecmdError) as info:
        find_path(profile, build_graph(profile), "host", "gpu0")
    assert "expected a path of links from 'host' to 'gpu0', got none" in str(info.value)

"""``find_path`` against the reference it replaces: every simple path listed and ranked (widest
narrowest link, then fewest hops, then node ids). The reference lives only here, for small
graphs; the search itself must stay fast on meshes where listing the paths never ends."""

from __future__ import annotations

import itertools
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specmd_sim.errors import SpecmdError
from specmd_sim.hardware import (
    HardwareProfile,
    build_graph,
    find_path,
    list_profiles,
    load_profile,
    transfer_path,
)


def reference_path(graph: nx.Graph, src: str, dst: str, cutoff: int | None) -> list[str] | None:
    """The rule of ``find_path``, by listing every simple path (of at most ``cutoff`` hops)."""
    relays = [n for n, d in graph.nodes(data=True) if d["spec"].kind in ("switch", "host")]
    routable = graph.subgraph({src, dst, *relays})
    candidates = list(nx.all_simple_paths(routable, src, dst, cutoff=cutoff))

    def rank(path: list[str]) -> tuple[float, int, list[str]]:
        width = min(
            graph.edges[u, v]["spec"].bandwidth_bytes_per_s.value
            for u, v in itertools.pairwise(path)
        )
        return (-width, len(path), path)

    return min(candidates, key=rank) if candidates else None


def found_path(profile: HardwareProfile, graph: nx.Graph, src: str, dst: str) -> list[str] | None:
    try:
        hops = find_path(profile, graph, src, dst)
    except SpecmdError:
        return None
    return [src, *(h.dst for h in hops)]


@pytest.mark.parametrize("profile_id", list_profiles())
def test_bundled_profiles_take_the_paths_the_enumeration_took(profile_id: str) -> None:
    """Every ordered pair of nodes that store or receive experts (the enumeration's cutoff of
    8 hops, as it was used, included)."""
    profile = load_profile(profile_id)
    graph = build_graph(profile)
    ends = [n.id for n in profile.nodes if n.kind != "switch"]
    for src, dst in itertools.permutations(ends, 2):
        expected = reference_path(graph, src, dst, cutoff=8)
        assert found_path(profile, graph, src, dst) == expected, (src, dst)


# --- random small topologies ------------------------------------------------------------------

Q = {"source": "test", "grade": "D"}


def node(kind: str, node_id: str) -> dict:
    if kind == "gpu":
        return {
            "kind": "gpu",
            "id": node_id,
            "name": "g",
            **{
                f: {"value": 1.0e12, **Q}
                for f in ("hbm_bytes", "hbm_bandwidth_bytes_per_s", "dense_bf16_flops")
            },
            "compute_efficiency": {"value": 0.5, **Q},
            "memory_efficiency": {"value": 0.5, **Q},
            "kernel_launch_overhead_s": {"value": 0.0, **Q},
            "copy_engines_h2d": {"value": 1, **Q},
            "copy_engines_d2h": {"value": 1, **Q},
        }
    if kind == "host":
        return {
            "kind": "host",
            "id": node_id,
            "name": "h",
            **{
                f: {"value": 1.0e12, **Q}
                for f in ("dram_bytes", "dram_bandwidth_bytes_per_s", "cpu_flops")
            },
        }
    if kind == "nvme":
        return {
            "kind": "nvme",
            "id": node_id,
            "name": "n",
            **{
                f: {"value": 1.0e9, **Q}
                for f in ("capacity_bytes", "read_bandwidth_bytes_per_s", "read_request_bytes")
            },
            "read_latency_s": {"value": 1.0e-4, **Q},
            "max_queue_depth": {"value": 1, **Q},
        }
    return {"kind": "switch", "id": node_id}


def profile_of(kinds: list[str], edges: dict[tuple[int, int], float]) -> HardwareProfile:
    return HardwareProfile.model_validate(
        {
            "schema_version": 1,
            "id": "random",
            "name": "random",
            "nodes": [node(kind, f"n{i}") for i, kind in enumerate(kinds)],
            "links": [
                {
                    "id": f"l{a}-{b}",
                    "kind": "emulated",
                    "a": f"n{a}",
                    "b": f"n{b}",
                    "bandwidth_bytes_per_s": {"value": width, **Q},
                    "latency_s": {"value": 0.0, **Q},
                }
                for (a, b), width in edges.items()
            ],
        }
    )


@st.composite
def topologies(draw: st.DrawFn) -> HardwareProfile:
    """Up to 8 nodes (a GPU and a host among them), any links, three widths (many ties)."""
    more = draw(st.lists(st.sampled_from(["switch", "switch", "host", "gpu", "nvme"]), max_size=6))
    kinds = draw(st.permutations(["gpu", "host", *more]))
    pairs = list(itertools.combinations(range(len(kinds)), 2))
    edges = draw(
        st.dictionaries(
            st.sampled_from(pairs),
            st.sampled_from([1.0e9, 2.0e9, 3.0e9]),
            min_size=1,
            max_size=len(pairs),
        )
    )
    return profile_of(kinds, edges)


@settings(max_examples=150, deadline=None)
@given(topologies())
def test_random_topologies_take_the_enumerations_path(profile: HardwareProfile) -> None:
    graph = build_graph(profile)
    for src, dst in itertools.permutations(graph.nodes, 2):
        expected = reference_path(graph, src, dst, cutoff=None)
        assert found_path(profile, graph, src, dst) == expected, (src, dst)


# --- large meshes -------------------------------------------------------------------------------


@contextmanager
def hang_guard(seconds: int) -> Iterator[None]:
    """Fail instead of hanging (a guard, not a benchmark: the search takes milliseconds)."""

    def expire(signum: int, frame: object) -> None:
        raise TimeoutError(f"still searching after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("switches", [14, 32])
def test_a_full_mesh_of_switches_resolves_at_once(switches: int) -> None:
    """A host on switch 0 and a GPU on the last switch of a full mesh (listing its simple
    paths of up to 8 hops takes minutes at 14 switches). Mesh links are 10 GB/s, but one
    detour through switch 1 is 20 GB/s wide: the path takes it, one hop longer."""
    host, gpu, last = 0, 1, switches + 1
    kinds = ["host", "gpu"] + ["switch"] * switches
    edges = {(a, b): 10.0e9 for a, b in itertools.combinations(range(2, last + 1), 2)}
    edges |= {(host, 2): 40.0e9, (gpu, last): 40.0e9, (2, 3): 20.0e9, (3, last): 20.0e9}
    profile = profile_of(kinds, edges)
    with hang_guard(30):
        path = found_path(profile, build_graph(profile), "n0", "n1")
    assert path == ["n0", "n2", "n3", f"n{last}", "n1"]


def test_a_profile_of_50k_nodes_loads_and_routes_at_once() -> None:
    """Checking the ids for duplicates by counting each one in the list took minutes."""
    kinds = ["host", "gpu"] + ["switch"] * 50_000
    with hang_guard(30):
        profile = profile_of(kinds, {(0, 1): 1.0e9})
        assert found_path(profile, build_graph(profile), "n0", "n1") == ["n0", "n1"]


def test_transfer_paths_take_find_paths_hops_without_networkx() -> None:
    """A run's paths (``transfer_path``) are ``find_path``'s on the networkx graph, found
    without importing networkx (a tenth of a second of every run's start-up)."""
    code = (
        "import sys\n"
        "from specmd_sim.hardware import list_profiles, load_profile, transfer_path\n"
        "for pid in list_profiles():\n"
        "    p = load_profile(pid)\n"
        "    for src in p.nodes:\n"
        "        for gpu in p.gpus:\n"
        "            if src.id != gpu.id and src.kind != 'switch':\n"
        "                transfer_path(p, src.id, gpu.id)\n"
        "print('networkx' in sys.modules)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "False", proc.stderr
    for profile_id in list_profiles():
        profile = load_profile(profile_id)
        graph = build_graph(profile)
        for src, gpu in itertools.product(profile.nodes, profile.gpus):
            if src.id == gpu.id or src.kind == "switch":
                continue
            try:
                expected = find_path(profile, graph, src.id, gpu.id)
            except SpecmdError:
                with pytest.raises(SpecmdError):
                    transfer_path(profile, src.id, gpu.id)
                continue
            assert transfer_path(profile, src.id, gpu.id).hops == tuple(expected)

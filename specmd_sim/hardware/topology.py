"""The profile's topology as a networkx graph, and the paths transfers take through it.

Nodes are the profile's node ids (attribute ``spec``: the node model); edges are links
(attribute ``spec``: the :class:`~specmd_sim.hardware.schema.Link`). Links are full duplex:
a flow from ``a`` to ``b`` uses the link's ``(a, b)`` direction, which has its own bandwidth.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import networkx as nx

from specmd_sim.errors import SpecmdError
from specmd_sim.hardware.schema import HardwareProfile, Link


@dataclass(frozen=True)
class Hop:
    """One directed use of a link by a flow."""

    link: Link
    src: str
    dst: str

    @property
    def key(self) -> str:
        """Identifies the link direction as a shared resource, e.g. ``'pcie0:host>gpu0'``."""
        return f"{self.link.id}:{self.src}>{self.dst}"


def build_graph(profile: HardwareProfile) -> nx.Graph:
    graph = nx.Graph()
    for node in profile.nodes:
        graph.add_node(node.id, spec=node)
    for link in profile.links:
        if graph.has_edge(link.a, link.b):
            raise SpecmdError(
                f"hardware profile {profile.id}: links: expected at most one link between "
                f"{link.a!r} and {link.b!r}, got a second one {link.id!r}"
            )
        graph.add_edge(link.a, link.b, spec=link)
    return graph


def find_path(profile: HardwareProfile, graph: nx.Graph, src: str, dst: str) -> list[Hop]:
    """The widest-then-shortest path from ``src`` to ``dst``, as directed hops.

    Among simple paths it picks the one whose narrowest link is widest, breaking ties by fewer
    hops and then by the node ids along the path (so the choice is deterministic).
    """
    try:
        candidates = list(nx.all_simple_paths(graph, src, dst, cutoff=8))
    except nx.NodeNotFound as exc:
        raise SpecmdError(f"hardware profile {profile.id}: {exc}") from None
    if not candidates:
        raise SpecmdError(
            f"hardware profile {profile.id}: expected a path of links from {src!r} to {dst!r}, "
            "got none"
        )

    def rank(path: list[str]) -> tuple[float, int, list[str]]:
        width = min(graph.edges[u, v]["spec"].bandwidth_bytes_per_s.value for u, v in _pairs(path))
        return (-width, len(path), path)

    best = min(candidates, key=rank)
    return [Hop(graph.edges[u, v]["spec"], u, v) for u, v in _pairs(best)]


def _pairs(path: list[str]) -> list[tuple[str, str]]:
    return list(itertools.pairwise(path))


@dataclass(frozen=True)
class HostPath:
    """How experts travel from the first host's DRAM to a GPU: the resources a transfer
    shares (each link direction, then the host's DRAM) with their bandwidths, and its latency."""

    hops: tuple[Hop, ...]
    resources: tuple[str, ...]
    capacity: dict[str, float]
    latency_s: float

    @property
    def bandwidth(self) -> float:
        """Bytes/s of one transfer alone on the path (its narrowest resource)."""
        return min(self.capacity.values())


def host_path(profile: HardwareProfile, gpu_id: str | None = None) -> HostPath:
    gpu = profile.gpus[0] if gpu_id is None else profile.node(gpu_id)
    host = profile.hosts[0]
    hops = tuple(find_path(profile, build_graph(profile), host.id, gpu.id))
    dram = f"dram:{host.id}"
    capacity = {h.key: h.link.bandwidth_bytes_per_s.value for h in hops}
    capacity[dram] = host.dram_bandwidth_bytes_per_s.value
    return HostPath(
        hops=hops,
        resources=(*(h.key for h in hops), dram),
        capacity=capacity,
        latency_s=sum(h.link.latency_s.value for h in hops),
    )

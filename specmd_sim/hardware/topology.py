"""The profile's topology as a networkx graph, and the paths transfers take through it.

Nodes are the profile's node ids (attribute ``spec``: the node model); edges are links
(attribute ``spec``: the :class:`~specmd_sim.hardware.schema.Link`). Links are full duplex:
a flow from ``a`` to ``b`` uses the link's ``(a, b)`` direction, which has its own bandwidth.
The transfer paths of a run are found on the profile's links directly: networkx (a tenth of a
second to import) is loaded only by :func:`build_graph`.
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from specmd_sim.errors import SpecmdError, short_repr
from specmd_sim.hardware.schema import HardwareProfile, HostNode, Link, NVMeNode, Quantity

if TYPE_CHECKING:
    import networkx as nx

# node id -> neighbour id -> the link between them
Adjacency = dict[str, dict[str, Link]]


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
    import networkx as nx

    _adjacency(profile)  # refuses two links between one pair of nodes
    graph: nx.Graph[str] = nx.Graph()
    for node in profile.nodes:
        graph.add_node(node.id, spec=node)
    for link in profile.links:
        graph.add_edge(link.a, link.b, spec=link)
    return graph


def _adjacency(profile: HardwareProfile) -> Adjacency:
    """The profile's links by node and neighbour (every node, in the profile's order)."""
    links: Adjacency = {node.id: {} for node in profile.nodes}
    for link in profile.links:
        if link.b in links[link.a]:
            raise SpecmdError(
                f"hardware profile {profile.id}: links: expected at most one link between "
                f"{link.a!r} and {link.b!r}, got a second one {link.id!r}"
            )
        links[link.a][link.b] = links[link.b][link.a] = link
    return links


def find_path(profile: HardwareProfile, graph: nx.Graph, src: str, dst: str) -> list[Hop]:
    """The widest-then-shortest path from ``src`` to ``dst``, as directed hops.

    Only ``switch`` and ``host`` nodes relay traffic: a path never passes *through* a GPU or an
    NVMe drive (a peer GPU's copy engines do not forward another GPU's DMA). Among the simple
    paths it picks the one whose narrowest link is widest, breaking ties by fewer hops and then
    by the node ids along the path (so the choice is deterministic).

    Without listing the paths (their number grows exponentially with the switches of a
    mesh): the widest narrowest link ``w`` comes from a max-min Dijkstra; the paths of width
    ``w`` are the paths over links at least ``w`` wide, whose fewest hops a breadth-first search
    from ``dst`` counts; walking from ``src`` to the smallest neighbour one hop nearer at each
    step gives the first such path in node-id order. ``O(links log nodes)``.
    """
    links = {u: {v: data["spec"] for v, data in graph[u].items()} for u in graph}
    kinds = {n: data["spec"].kind for n, data in graph.nodes(data=True)}
    return _route(profile, links, kinds, src, dst)


def _route(
    profile: HardwareProfile, links: Adjacency, kinds: Mapping[str, str], src: str, dst: str
) -> list[Hop]:
    """:func:`find_path` over ``links`` (``kinds``: each node's kind)."""
    for end in (src, dst):
        if end not in links:
            raise SpecmdError(
                f"hardware profile {profile.id}: expected one of the node ids "
                f"{short_repr(sorted(links))}, got {short_repr(end)}"
            )
    routable = {src, dst, *(n for n in links if kinds[n] in _RELAYS)}
    width = _widest(links, routable, src, dst) if src != dst else None
    if width is None:
        raise SpecmdError(
            f"hardware profile {profile.id}: expected a path of links from {src!r} to {dst!r}, "
            "got none (only switch and host nodes relay transfers)"
        )

    def wide(u: str) -> list[str]:
        """``u``'s routable neighbours over links at least ``width`` wide."""
        return [v for v, link in links[u].items() if v in routable and _width(link) >= width]

    hops_to_dst, frontier = {dst: 0}, [dst]  # breadth first from dst
    while frontier:
        reached = []
        for u in frontier:
            for v in wide(u):
                if v not in hops_to_dst:
                    hops_to_dst[v] = hops_to_dst[u] + 1
                    reached.append(v)
        frontier = reached
    path = [src]
    while path[-1] != dst:
        nearer = hops_to_dst[path[-1]] - 1
        path.append(min(v for v in wide(path[-1]) if hops_to_dst.get(v) == nearer))
    return [Hop(links[u][v], u, v) for u, v in itertools.pairwise(path)]


_RELAYS = ("switch", "host")


def _width(link: Link) -> float:
    return link.bandwidth_bytes_per_s.value


def _widest(links: Adjacency, routable: set[str], src: str, dst: str) -> float | None:
    """The largest narrowest-link bandwidth of a path from ``src`` to ``dst`` through the
    ``routable`` nodes (None: no path)."""
    best = {src: math.inf}
    heap = [(-math.inf, src)]
    done: set[str] = set()
    while heap:
        neg, u = heapq.heappop(heap)
        if u in done:
            continue
        if u == dst:
            return -neg
        done.add(u)
        for v, link in links[u].items():
            if v not in routable:
                continue
            w = min(-neg, _width(link))
            if v not in done and w > best.get(v, -math.inf):
                best[v] = w
                heapq.heappush(heap, (-w, v))
    return None


@dataclass(frozen=True)
class TransferPath:
    """How an expert's bytes travel from where they are stored to a GPU: the resources a
    transfer shares (each link direction, then the storage device it is read from) with their
    bandwidths, and its latency.

    Resource keys: a link direction ``'<link>:<from>><to>'``, a host's DRAM ``'dram:<host>'``,
    an NVMe drive ``'nvme:<id>'`` (its bandwidth depends on the queue depth; ``capacity`` holds
    its peak). A read from NVMe through a host's bounce buffer also crosses that host's DRAM.
    ``latency_s`` sums the links' latencies; a drive's read latency is part of its
    queue-depth-dependent bandwidth (Little's law), not added again.
    """

    source: str  # node id the bytes are read from: a host, an NVMe drive or a peer GPU
    hops: tuple[Hop, ...]
    resources: tuple[str, ...]
    capacity: dict[str, float]
    latency_s: float
    quantities: tuple[Quantity, ...]  # the profile's numbers this path's timing reads
    rate_cap: float | None = None  # bytes/s one copy reaches at most (a runtime's copy method)

    @property
    def narrowest(self) -> float:
        """Bytes/s of the path's narrowest resource (at full depth)."""
        return min(self.capacity.values())

    @property
    def bandwidth(self) -> float:
        """Bytes/s of one transfer alone on the path: its narrowest resource, or the copy's own
        cap."""
        return self.narrowest if self.rate_cap is None else min(self.narrowest, self.rate_cap)

    def as_copied(self, tensors: Quantity, efficiency: Quantity) -> TransferPath:
        """This path as a runtime copies over it: each expert as ``tensors`` separate copies
        (each pays the path latency) reaching ``efficiency`` of the path's bandwidth."""
        cap = None if efficiency.value >= 1 else efficiency.value * self.narrowest
        return replace(
            self,
            latency_s=self.latency_s * tensors.value,
            rate_cap=cap,
            quantities=(*self.quantities, tensors, efficiency),
        )


def transfer_path(profile: HardwareProfile, source: str, gpu_id: str) -> TransferPath:
    """The path from storage node ``source`` (host DRAM, NVMe or a peer GPU's HBM) to a GPU."""
    kinds = {node.id: node.kind for node in profile.nodes}
    hops = tuple(_route(profile, _adjacency(profile), kinds, source, gpu_id))
    capacity = {h.key: h.link.bandwidth_bytes_per_s.value for h in hops}
    latency = sum(h.link.latency_s.value for h in hops)
    quantities: list[Quantity] = []
    for h in hops:
        quantities += [h.link.bandwidth_bytes_per_s, h.link.latency_s]
    for node_id in (source, *(h.dst for h in hops[:-1])):
        node = profile.node(node_id)
        if isinstance(node, HostNode):
            capacity[f"dram:{node.id}"] = node.dram_bandwidth_bytes_per_s.value
            quantities.append(node.dram_bandwidth_bytes_per_s)
        elif isinstance(node, NVMeNode):
            capacity[f"nvme:{node.id}"] = node.read_bandwidth_bytes_per_s.value
            quantities += node.bandwidth_quantities()
    return TransferPath(
        source=source,
        hops=hops,
        resources=tuple(capacity),
        capacity=capacity,
        latency_s=latency,
        quantities=tuple(quantities),
    )


def write_back_path(profile: HardwareProfile, gpu_id: str) -> TransferPath:
    """The path from ``gpu_id`` back to the first host's DRAM (device-to-host copies), the
    write into that DRAM included."""
    host = profile.hosts[0]
    path = transfer_path(profile, gpu_id, host.id)
    capacity = {**path.capacity, f"dram:{host.id}": host.dram_bandwidth_bytes_per_s.value}
    return replace(
        path,
        resources=tuple(capacity),
        capacity=capacity,
        quantities=(*path.quantities, host.dram_bandwidth_bytes_per_s),
    )


def host_path(profile: HardwareProfile, gpu_id: str | None = None) -> TransferPath:
    """The path from the first host's DRAM to ``gpu_id`` (default: the first GPU)."""
    gpu = profile.gpus[0].id if gpu_id is None else gpu_id
    return transfer_path(profile, profile.hosts[0].id, gpu)

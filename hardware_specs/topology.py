"""What a communication group of ranks gets from the cluster's wiring: bandwidth and latency.

The model
---------
`node_graph` draws a few servers as a graph. Vertices: one per GPU ("gpu{node}.{local}"), per
node a "cpu{node}" root complex that every GPU's PCIe edge goes to, per node an
"nvswitch{node}" or "xgmi{node}" hub for those fabrics, and one "network" vertex that every
GPU's NIC edge reaches. Edges carry `bw_bytes_per_s` (nominal * efficiency, per direction),
`latency_s` and `kind` (the GroupLink kind the hop stands for).

- nvswitch: GPU <-> hub over `intra_node.link`; a GPU pair talks through the hub at the full
  per-GPU rate (NVSwitch is non-blocking).
- xgmi: a direct edge between every pair of GPUs over `intra_node.link`, the rate of one pair
  link (MI300X: 64 GB/s per direction; 7 of them per GPU).
- nvlink_bridge: a direct GPU(2i) <-> GPU(2i+1) bridge edge over `intra_node.link`; other
  pairs go GPU -> cpu -> GPU over `intra_node.pcie`.
- pcie_p2p: GPU <-> cpu over `intra_node.link` (the P2P path through the switch/root complex).
- pcie_host: GPU <-> cpu over `intra_node.link`, which describes the host-staged copy (no
  peer-to-peer: each byte goes GPU -> host memory -> GPU), kind "pcie_host".
- NIC: GPU <-> network over `inter_node`, the GPU's share of the node's NICs.
Hub, root-complex and NIC edges carry half of their link's latency each, so a GPU -> hub -> GPU
path adds up to the link's latency once.

`group_link` prices a group's collectives:
- Inside one node, a ring over the members in rank order (and back to the first), as NCCL's
  ring algorithms do. Each consecutive pair's route is the lowest-latency path in the graph;
  its bandwidth is the narrowest edge on the route and its latency the sum. The group gets the
  narrowest bandwidth and the largest latency of all its pairs, and the kind of its narrowest
  hop. On an xGMI mesh (MI300X: a dedicated link between every pair of GPUs, no switch) RCCL
  runs k-1 rings over disjoint links, so a group of k GPUs gets (k-1) pair links (ROCm docs,
  "AI workload tuning", RCCL: "for collective operations, the best performance is achieved
  when all 8 GPUs and, hence, all the links between them are used").
- Across nodes, with k members on each node: NCCL runs one ring channel per NIC, so the bus
  bandwidth approaches k x the per-GPU NIC share, capped by the members' intra-node ring
  (the NCCL tests' busbw across DGX nodes, NVIDIA "Doubling all2all Performance with NVIDIA
  Collective Communication Library 2.12" and the NCCL documentation's ring/channel model).
  One member per node gets one NIC's share. That is a collective's figure: a point-to-point ring
  of send/recv pairs (context parallelism's ring K/V exchange) waits on its slowest neighbour
  pair (`pair_bw_bytes_per_s`): the pair that crosses the node boundary, one NIC's share; on an
  xGMI mesh, one dedicated link.
- All-to-all (expert parallelism) moves (n-k)/n of each rank's buffer across the network, over
  its own NIC share, and (k-1)/n inside the node: `a2a_bw_bytes_per_s` is the bandwidth that
  gives that time in the (n-1)/n B / bw form.

Assumptions
-----------
- Megatron rank layout: rank r lives on node r // gpus_per_node at local index r % gpus_per_node.
- Rail-optimised network: every GPU has its own NIC share and a cross-node pair bottlenecks at
  that NIC; the switch fabric itself is non-blocking. Hence two nodes are enough to price any
  pair: a cross-node pair looks the same whatever the two nodes are.
- Same-node pairs never route over the network (NCCL uses P2P/SHM transports inside a node).
- One ring per group, no concurrent groups competing for a link, no NVLink SHARP or tree
  algorithms; those belong to the efficiency constants that calibration fits.
- GeForce cards without P2P stage every intra-node transfer through host memory.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeVar

import networkx as nx  # type: ignore[import-untyped,unused-ignore]
import numpy as np
import numpy.typing as npt

from paraplan.hardware_specs.schema import Cluster, IntraNode, Link

NETWORK = "network"

# (local index of a, local index of b, whether b is on another node): all a pair's route needs.
_PairKey = tuple[int, int, bool]


@dataclass(frozen=True)
class GroupLink:
    """The per-direction bandwidth and latency one member of a group sees to its ring peer."""

    bw_bytes_per_s: float
    latency_s: float
    kind: str  # "local", "nvlink", "xgmi", "pcie", "pcie_host" or "network"
    a2a_bw_bytes_per_s: float = math.inf  # all-to-all bandwidth (see the module docstring)
    # the two legs of a group that spans nodes, for hierarchical all-to-alls (`traffic.ep_per_layer_s`):
    # a member's NIC share to another node, and its ring link to the members on its own node
    nic_bw_bytes_per_s: float = math.inf
    node_bw_bytes_per_s: float = math.inf
    # a ring of send/recv pairs over the group (each member to the next at once): its slowest
    # neighbour pair, one NIC share across nodes, one dedicated link on an xGMI mesh
    pair_bw_bytes_per_s: float = math.inf


LOCAL = GroupLink(math.inf, 0.0, "local")


@dataclass
class _ClusterCache:
    graph: nx.Graph[str]  # two nodes: enough for any pair (see module docstring)
    intra: nx.Graph[str]  # node 0 without the network vertex: routes for same-node pairs
    pairs: dict[_PairKey, GroupLink]
    groups: dict[tuple[int, int], GroupLink]


# Keyed on what the routes depend on (node size, intra-node fabric, network link; frozen, so
# hashable by value): the clusters of a calibration sweep, which differ only in efficiency, and a
# hardware file read again share one entry. Bounded: the oldest entry goes first.
_TopologyKey = tuple[int, IntraNode, Link]
_CACHE: dict[_TopologyKey, _ClusterCache] = {}
CACHED_TOPOLOGIES = 64


def gpu_vertex(node: int, local: int) -> str:
    return f"gpu{node}.{local}"


def node_graph(cluster: Cluster, nodes: int = 2) -> nx.Graph[str]:
    """The GPUs, fabric hubs, root complexes and NICs of `nodes` servers, as a graph."""
    if nodes < 1:
        raise ValueError(f"nodes must be >= 1, got {nodes}")
    graph: nx.Graph[str] = nx.Graph()
    graph.add_node(NETWORK)
    for node in range(nodes):
        _add_node(graph, cluster, node)
    return graph


def _add_node(graph: nx.Graph[str], cluster: Cluster, node: int) -> None:
    intra = cluster.intra_node
    cpu = f"cpu{node}"
    gpus = [gpu_vertex(node, local) for local in range(cluster.gpus_per_node)]
    # The PCIe edge to the root complex: for the PCIe-only kinds `link` describes the
    # GPU<->GPU path through it; otherwise it is the plain `pcie` link.
    if intra.kind == "pcie_host":
        pcie_link, pcie_kind = intra.link, "pcie_host"
    elif intra.kind == "pcie_p2p":
        pcie_link, pcie_kind = intra.link, "pcie"
    else:
        pcie_link, pcie_kind = intra.pcie, "pcie"
    for gpu in gpus:
        _add_edges(graph, [(gpu, cpu)], pcie_link, pcie_kind, pcie_link.latency_s / 2)
        _add_edges(graph, [(gpu, NETWORK)], cluster.inter_node, "network", cluster.inter_node.latency_s / 2)
    if intra.kind == "nvswitch":
        hub = f"nvswitch{node}"
        _add_edges(graph, [(gpu, hub) for gpu in gpus], intra.link, "nvlink", intra.link.latency_s / 2)
    elif intra.kind == "xgmi":  # a full mesh of pair links
        _add_edges(graph, itertools.combinations(gpus, 2), intra.link, "xgmi", intra.link.latency_s)
    elif intra.kind == "nvlink_bridge":  # odd count: last unbridged
        _add_edges(graph, zip(gpus[0::2], gpus[1::2], strict=False), intra.link, "nvlink", intra.link.latency_s)


def _add_edges(graph: nx.Graph[str], pairs: Iterable[tuple[str, str]], link: Link, kind: str, latency_s: float) -> None:
    """Edges in the order given (the order the routes' tie-breaks see), all with one link's figures:
    one `add_edges_from` call, a third quicker than an `add_edge` per pair on a 1,024-GPU mesh."""
    graph.add_edges_from(pairs, bw_bytes_per_s=link.effective_bw_bytes_per_s, latency_s=latency_s, kind=kind)


def group_link(cluster: Cluster, size: int, stride: int) -> GroupLink:
    """The link of a group of `size` ranks at global ranks 0, stride, 2*stride, ..."""
    if size < 1 or stride < 1:
        raise ValueError(f"group size and stride must be >= 1, got size={size}, stride={stride}")
    if size == 1:
        return LOCAL
    cache = _cache_for(cluster)
    key = (size, stride)
    found = cache.groups.get(key)
    if found is None:
        found = _group(cluster, cache, size, stride)
        cache.groups[key] = found
    return found


_Count = TypeVar("_Count", int, npt.NDArray[np.int64])


def members_on_node(size: _Count, stride: _Count, gpus_per_node: int) -> _Count:
    """How many ranks of a group of `size` ranks `stride` apart (0, stride, 2 stride, ...) sit on
    its first node, the most loaded one: those below `gpus_per_node` (Megatron's rank order, see
    Assumptions). Counted, not listed: a group may span millions of ranks. Takes ints or arrays."""
    return np.minimum(size, (gpus_per_node - 1) // np.maximum(stride, 1) + 1)  # type: ignore[no-any-return]


def _group(cluster: Cluster, cache: _ClusterCache, size: int, stride: int) -> GroupLink:
    per_node = cluster.gpus_per_node
    k = int(members_on_node(size, stride, per_node))
    local = [i * stride for i in range(k)]
    if k == size:  # the whole group on one node
        return _within_node(cluster, cache, local)
    network = _pair_route(cluster, cache, (0, 0, True))  # a GPU's NIC share, to another node
    inside = _within_node(cluster, cache, local) if k > 1 else LOCAL
    bw = min(k * network.bw_bytes_per_s, inside.bw_bytes_per_s)
    cross = (size - k) / network.bw_bytes_per_s
    intra = (k - 1) / inside.bw_bytes_per_s if k > 1 else 0.0
    a2a = (size - 1) / max(cross, intra)
    latency = max(network.latency_s, inside.latency_s)
    pair = min(network.bw_bytes_per_s, inside.pair_bw_bytes_per_s)
    return GroupLink(bw, latency, "network", a2a, network.bw_bytes_per_s, inside.bw_bytes_per_s, pair)


def _within_node(cluster: Cluster, cache: _ClusterCache, members: list[int]) -> GroupLink:
    """A ring over members of one node (an xGMI mesh: k-1 rings over disjoint pair links)."""
    if len(members) == 1:
        return LOCAL
    if cluster.intra_node.kind == "xgmi":
        link = cluster.intra_node.link
        bw = (len(members) - 1) * link.effective_bw_bytes_per_s
        return GroupLink(bw, link.latency_s, "xgmi", bw, math.inf, bw, link.effective_bw_bytes_per_s)
    ring = itertools.pairwise([*members, members[0]])  # consecutive members, closing the ring
    keys = {_pair_key(cluster.gpus_per_node, a, b) for a, b in ring}
    found = _slowest(_pair_route(cluster, cache, key) for key in keys)
    bw = found.bw_bytes_per_s
    return GroupLink(bw, found.latency_s, found.kind, bw, math.inf, bw, bw)


def pair_link(cluster: Cluster, rank_a: int, rank_b: int) -> GroupLink:
    """The point-to-point link between two global ranks (pipeline send/recv)."""
    if rank_a < 0 or rank_b < 0:
        raise ValueError(f"ranks must be >= 0, got {rank_a}, {rank_b}")
    if rank_a == rank_b:
        return LOCAL
    cache = _cache_for(cluster)
    return _pair_route(cluster, cache, _pair_key(cluster.gpus_per_node, rank_a, rank_b))


def _pair_key(gpus_per_node: int, a: int, b: int) -> _PairKey:
    return (a % gpus_per_node, b % gpus_per_node, a // gpus_per_node != b // gpus_per_node)


# The cluster last asked for and its cache: a cost model asks for the same (frozen) cluster's
# routes thousands of times in a row, and hashing the key (nested pydantic models) costs more
# than the lookup it guards.
_LAST: list[tuple[Cluster, _ClusterCache]] = []


def _cache_for(cluster: Cluster) -> _ClusterCache:
    if _LAST and _LAST[0][0] is cluster:
        return _LAST[0][1]
    cache = _cache_by_key(cluster)
    _LAST[:] = [(cluster, cache)]
    return cache


def _cache_by_key(cluster: Cluster) -> _ClusterCache:
    key = (cluster.gpus_per_node, cluster.intra_node, cluster.inter_node)
    cache = _CACHE.get(key)
    if cache is None:
        intra = node_graph(cluster, nodes=1)
        intra.remove_node(NETWORK)
        cache = _ClusterCache(graph=node_graph(cluster, nodes=2), intra=intra, pairs={}, groups={})
        if len(_CACHE) >= CACHED_TOPOLOGIES:
            del _CACHE[next(iter(_CACHE))]
        _CACHE[key] = cache
    return cache


def _pair_route(cluster: Cluster, cache: _ClusterCache, key: _PairKey) -> GroupLink:
    found = cache.pairs.get(key)
    if found is None:
        local_a, local_b, crosses = key
        if not crosses and local_a == local_b:
            found = LOCAL
        elif crosses:
            found = _route(cache.graph, gpu_vertex(0, local_a), gpu_vertex(1, local_b))
        else:
            found = _route(cache.intra, gpu_vertex(0, local_a), gpu_vertex(0, local_b))
        cache.pairs[key] = found
    return found


MAX_HOPS = 4  # GPU -> hub/root complex/network -> ... -> GPU: no useful route is longer
FABRIC = ("nvlink", "xgmi")


def _route(graph: nx.Graph[str], source: str, target: str) -> GroupLink:
    """NCCL's choice: a route over the GPU fabric (NVLink, xGMI) when there is one, else the widest
    route (the largest bottleneck bandwidth); the lowest latency among equally good ones."""
    best: GroupLink | None = None
    best_key: tuple[bool, float, float] | None = None
    # GPUs do not forward other GPUs' traffic: search without them. (Filtering the paths instead
    # enumerated every detour through every other GPU: 20 s for one node of 1,000 GPUs.)
    hubs = nx.subgraph_view(graph, filter_node=lambda node: not node.startswith("gpu") or node in (source, target))
    for path in nx.all_simple_paths(hubs, source, target, cutoff=MAX_HOPS):
        hops = [graph.edges[u, v] for u, v in itertools.pairwise(path)]
        narrowest = min(hops, key=lambda edge: float(edge["bw_bytes_per_s"]))
        link = GroupLink(
            float(narrowest["bw_bytes_per_s"]), sum(float(e["latency_s"]) for e in hops), str(narrowest["kind"])
        )
        key = (all(e["kind"] in FABRIC for e in hops), link.bw_bytes_per_s, -link.latency_s)
        if best_key is None or key > best_key:
            best, best_key = link, key
    if best is None:
        raise ValueError(f"no route from {source} to {target}")
    return best


def _slowest(links: Iterable[GroupLink]) -> GroupLink:
    """Narrowest bandwidth (its kind) and largest latency over a group's pairs."""
    items = list(links)
    narrowest = min(items, key=lambda link: link.bw_bytes_per_s)
    latency = max(link.latency_s for link in items)
    return GroupLink(narrowest.bw_bytes_per_s, latency, narrowest.kind)

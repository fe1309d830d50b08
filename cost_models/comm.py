"""Collective communication time: the alpha-beta model on the group's real link.

For n ranks, B bytes per rank, link latency alpha and effective bandwidth beta (nominal per
direction x achievable efficiency, both from the hardware preset via `hardware_specs.topology`):
    ring all-reduce        2(n-1) alpha + 2 (n-1)/n B / beta      (Patarasuk & Yuan 2009)
    tree all-reduce        2 log2(n) alpha + 2 B / beta           (NCCL double binary tree:
                           pipelined, so bandwidth-optimal up to the 2x; wins at small B)
    reduce-scatter,
    all-gather             (n-1) alpha + (n-1)/n B / beta         (one half of the ring)
    all-to-all             (n-1) alpha + (n-1)/n B / beta         (pairwise exchange)
    point-to-point         alpha + B / beta
where B is the full buffer (for reduce-scatter the input, for all-gather the output). NCCL picks
the faster of ring and tree, and so do we. Thakur, Rabenseifner & Gropp 2005 give the same
costs for MPI collectives.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

from paraplan.cost_models.candidates import FloatArray
from paraplan.hardware_specs.schema import Cluster
from paraplan.hardware_specs.topology import GroupLink, group_link, pair_link

Numeric = FloatArray | npt.NDArray[np.int64]
_KEY_BASE = 1 << 31  # strides and sizes are GPU counts, far below 2^31


def _per_group(cluster: Cluster, size: Numeric, stride: Numeric,
               fields: Callable[[GroupLink], tuple[float, float]]) -> tuple[FloatArray, FloatArray]:  # fmt: skip
    """Two figures of each row's group (`size` ranks `stride` apart), `fields` read off its
    `group_link` once per distinct (size, stride) pair."""
    size_i = np.asarray(size, dtype=np.int64).reshape(-1)
    stride_i = np.asarray(stride, dtype=np.int64).reshape(-1)
    unique_size, unique_stride, inverse = _distinct_pairs(size_i, stride_i)
    first = np.empty(len(unique_size))
    second = np.empty(len(unique_size))
    for i, (n, gap) in enumerate(zip(unique_size.tolist(), unique_stride.tolist(), strict=True)):
        first[i], second[i] = fields(group_link(cluster, n, gap))
    return first[inverse], second[inverse]


def links(cluster: Cluster, size: Numeric, stride: Numeric, all_to_all: bool = False) -> tuple[FloatArray, FloatArray]:
    """(bandwidth, latency) arrays for groups of `size` ranks `stride` apart; with `all_to_all`
    the bandwidth an all-to-all sees (its cross-node share over the NICs, see
    `hardware_specs.topology`)."""
    return _per_group(cluster, size, stride,
                      lambda link: (link.a2a_bw_bytes_per_s if all_to_all else link.bw_bytes_per_s, link.latency_s))  # fmt: skip


def ring_pair_links(cluster: Cluster, size: Numeric, stride: Numeric) -> tuple[FloatArray, FloatArray]:
    """(bandwidth, latency) of one step of a ring of send/recv pairs over groups of `size` ranks
    `stride` apart: the slowest neighbour pair (`hardware_specs.topology.GroupLink.pair_bw_bytes_per_s`)."""
    return _per_group(cluster, size, stride, lambda link: (link.pair_bw_bytes_per_s, link.latency_s))


def a2a_legs(cluster: Cluster, size: Numeric, stride: Numeric) -> tuple[FloatArray, FloatArray]:
    """(NIC share to another node, ring link inside the node) of a member of groups of `size` ranks
    `stride` apart: the two legs of a hierarchical all-to-all (`hardware_specs.topology.GroupLink`;
    the NIC leg is infinite for a group on one node)."""
    return _per_group(cluster, size, stride, lambda link: (link.nic_bw_bytes_per_s, link.node_bw_bytes_per_s))


def _distinct_pairs(
    size: npt.NDArray[np.int64], stride: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """The distinct (size, stride) pairs and each row's index among them. Group sizes and strides
    are small GPU counts, so where their codes span little more than the rows a count of each
    code finds the pairs in one pass; otherwise a sort (`np.unique`) of one int64 key per pair."""
    if len(size) == 0:
        return size, stride, size
    span = int(stride.max()) + 1
    codes = size * span + stride
    if int(codes.min()) >= 0 and int(codes.max()) < 4 * len(codes) + 1024:
        present = np.flatnonzero(np.bincount(codes))
        lookup = np.zeros(int(present[-1]) + 1, dtype=np.int64)
        lookup[present] = np.arange(len(present))
        return present // span, present % span, lookup[codes]
    keys = size * _KEY_BASE + stride  # one int64 key per pair: a 1-D unique, not a row-wise one
    unique, inverse = np.unique(keys, return_inverse=True)
    return unique // _KEY_BASE, unique % _KEY_BASE, inverse.reshape(-1)


def pair_links(cluster: Cluster, distance: Numeric) -> tuple[FloatArray, FloatArray]:
    """(bandwidth, latency) of point-to-point transfers between ranks `distance` apart."""
    dist = np.asarray(distance, dtype=np.int64)
    unique, inverse = np.unique(dist, return_inverse=True)
    bw = np.empty(len(unique))
    lat = np.empty(len(unique))
    for i, d in enumerate(unique):
        link = pair_link(cluster, 0, int(d))
        bw[i], lat[i] = link.bw_bytes_per_s, link.latency_s
    inverse = inverse.reshape(-1)
    return bw[inverse], lat[inverse]


def _safe(n: Numeric) -> FloatArray:
    return np.maximum(np.asarray(n, dtype=np.float64), 1.0)


def all_reduce_s(nbytes: Numeric, n: Numeric, bw: Numeric, lat: Numeric) -> FloatArray:
    ranks = _safe(n)
    ring = 2 * (ranks - 1) * lat + 2 * (ranks - 1) / ranks * nbytes / bw
    tree = 2 * np.log2(ranks) * lat + 2 * nbytes / bw
    return np.where(ranks > 1, np.minimum(ring, tree), 0.0)


def reduce_scatter_s(nbytes: Numeric, n: Numeric, bw: Numeric, lat: Numeric) -> FloatArray:
    ranks = _safe(n)
    return np.where(ranks > 1, (ranks - 1) * lat + (ranks - 1) / ranks * nbytes / bw, 0.0)


all_gather_s = reduce_scatter_s
all_to_all_s = reduce_scatter_s


def p2p_s(nbytes: Numeric, bw: Numeric, lat: Numeric) -> FloatArray:
    return np.asarray(lat + nbytes / bw, dtype=np.float64)

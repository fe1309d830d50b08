"""Collectives (alpha-beta model), group links on a DGX A100, and the traffic of each parallel
dimension, against hand numbers."""

from __future__ import annotations

import math

import numpy as np
import pytest
from conftest import one
from hypothesis import given, settings
from hypothesis import strategies as st

from paraplan.cost_models.comm import all_gather_s, all_reduce_s, all_to_all_s, links, p2p_s, pair_links, reduce_scatter_s
from paraplan.cost_models.compute import MicroBatchTimes
from paraplan.cost_models.memory import stage_params
from paraplan.cost_models.models import load_model
from paraplan.cost_models.stack import Stack
from paraplan.cost_models.traffic import (
    cp_per_layer_s,
    dp_exposed_s,
    ep_per_layer_s,
    overlap_windows,
    pp_per_micro_batch_s,
    tp_per_layer_s,
)
from paraplan.hardware_specs.loader import load_cluster
from paraplan.hardware_specs.schema import Cluster

GB = 1e9
# DGX A100 (a100-80g preset): NVSwitch 300e9 x 0.80 = 240e9 B/s, 3 us through the hub
# (1.5 us each edge); InfiniBand per GPU 25e9 x 0.85 = 21.25e9 B/s, 5 us through the network
# (2.5 us each NIC edge). Read from the preset so that a recalibration does not break the
# derivations below, which only rely on the topology rules.
_A100 = load_cluster("a100-80g")
NVLINK_BW = _A100.intra_node.link.bw_bytes_per_s * _A100.intra_node.link.efficiency
NVLINK_LAT = _A100.intra_node.link.latency_s
IB_BW = _A100.inter_node.bw_bytes_per_s * _A100.inter_node.efficiency
IB_LAT = _A100.inter_node.latency_s


def _f(x: object) -> float:
    return float(np.asarray(x).reshape(-1)[0])


# ------------------------------------------------------------------ alpha-beta collectives


def test_ring_all_reduce_by_hand() -> None:
    # 1 GB over 8 ranks at 100 GB/s, alpha 5 us:
    #   ring 2*7*5e-6 + 2*(7/8)*1e9/1e11 = 7e-5 + 0.0175 = 0.01757
    #   tree 2*3*5e-6 + 2*1e9/1e11       = 3e-5 + 0.02   = 0.02003  => ring wins
    assert _f(all_reduce_s(1 * GB, 8, 100 * GB, 5e-6)) == pytest.approx(0.01757, rel=1e-12)


def test_tree_wins_for_tiny_messages_on_many_ranks() -> None:
    # 1 KB over 256 ranks: ring 2*255*5e-6 = 2.55 ms of latency; tree 2*8*5e-6 + 2*1e3/1e11
    tree = 16 * 5e-6 + 2 * 1e3 / 1e11
    ring = 2 * 255 * 5e-6 + 2 * 255 / 256 * 1e3 / 1e11
    got = _f(all_reduce_s(1e3, 256, 100 * GB, 5e-6))
    assert got == pytest.approx(tree, rel=1e-12)
    assert got < ring / 20


def test_reduce_scatter_all_gather_by_hand() -> None:
    # (n-1) alpha + (n-1)/n B/beta: 1 GB, 8 ranks, 100 GB/s, 5 us => 3.5e-5 + 0.00875
    assert _f(reduce_scatter_s(1 * GB, 8, 100 * GB, 5e-6)) == pytest.approx(0.008785, rel=1e-12)
    assert _f(all_gather_s(1 * GB, 8, 100 * GB, 5e-6)) == pytest.approx(0.008785, rel=1e-12)
    assert _f(all_to_all_s(1 * GB, 8, 100 * GB, 5e-6)) == pytest.approx(0.008785, rel=1e-12)


def test_p2p_by_hand() -> None:
    assert _f(p2p_s(1 * GB, 100 * GB, 5e-6)) == pytest.approx(0.010005, rel=1e-12)


def test_single_rank_costs_nothing() -> None:
    for fn in (all_reduce_s, reduce_scatter_s, all_gather_s, all_to_all_s):
        assert _f(fn(1 * GB, 1, 100 * GB, 5e-6)) == 0.0


@settings(max_examples=100, deadline=None)
@given(
    nbytes=st.floats(1.0, 1e11),
    n=st.integers(2, 4096),
    bw=st.floats(1e8, 1e13),
    lat=st.floats(0.0, 1e-3),
)
def test_collective_identities(nbytes: float, n: int, bw: float, lat: float) -> None:
    ring = 2 * (n - 1) * lat + 2 * (n - 1) / n * nbytes / bw
    tree = 2 * math.log2(n) * lat + 2 * nbytes / bw
    ar = _f(all_reduce_s(nbytes, n, bw, lat))
    # NCCL picks the faster algorithm
    assert ar == pytest.approx(min(ring, tree), rel=1e-12)
    # reduce-scatter + all-gather of the same buffer is exactly the ring all-reduce
    rs_ag = _f(reduce_scatter_s(nbytes, n, bw, lat)) + _f(all_gather_s(nbytes, n, bw, lat))
    assert rs_ag == pytest.approx(ring, rel=1e-12)
    assert ar <= rs_ag * (1 + 1e-12)
    # more bandwidth is never slower
    assert _f(all_reduce_s(nbytes, n, 2 * bw, lat)) <= ar


def test_vectorized_collectives() -> None:
    n = np.array([1, 2, 8])
    got = all_reduce_s(np.array([1e9, 1e9, 1e9]), n, np.full(3, 1e11), np.full(3, 5e-6))
    assert got[0] == 0.0
    # n=2: ring 2*5e-6 + 1e9/1e11 = 0.01001 (tree 2*5e-6 + 0.02)
    assert got[1] == pytest.approx(0.01001, rel=1e-12)
    assert got[2] == pytest.approx(0.01757, rel=1e-12)


# ------------------------------------------------------------------ links on a DGX A100


def test_group_links_a100(a100: Cluster) -> None:
    # TP8 inside a node: NVSwitch
    bw, lat = links(a100, np.array([8]), np.array([1]))
    assert (bw[0], lat[0]) == pytest.approx((NVLINK_BW, NVLINK_LAT))
    # 16 ranks at stride 8: every ring neighbour is on another node => InfiniBand
    bw, lat = links(a100, np.array([16]), np.array([8]))
    assert (bw[0], lat[0]) == pytest.approx((IB_BW, IB_LAT))
    # a group of 16 consecutive ranks spans two nodes: bottleneck at the network
    bw, lat = links(a100, np.array([16]), np.array([1]))
    assert (bw[0], lat[0]) == pytest.approx((IB_BW, IB_LAT))
    # pipeline neighbours 8 ranks apart: another node; 1 apart: same node
    bw, lat = pair_links(a100, np.array([8, 1]))
    assert bw == pytest.approx([IB_BW, NVLINK_BW])
    assert lat == pytest.approx([IB_LAT, NVLINK_LAT])


# ------------------------------------------------------------------ traffic per dimension

LLAMA70 = "llama2-70b"  # h = 8192, kv_dim = 1024


def test_tp_traffic_with_sequence_parallel(a100: Cluster) -> None:
    # T = 4096 tokens, message T*h*2 = 67,108,864 bytes, over NVSwitch TP8.
    # SP: each of the 4 all-reduces per layer (2 fwd, 2 bwd) becomes RS + AG:
    #   RS = AG = 7*3e-6 + (7/8)*67,108,864/240e9
    model = load_model(LLAMA70)
    msg = 4096 * 8192 * 2
    rs = 7 * NVLINK_LAT + 7 / 8 * msg / NVLINK_BW
    lay = one(tp=8, micro_batch=1, seq_len=4096, sequence_parallel=True, recompute="selective")
    assert _f(tp_per_layer_s(model, lay, a100)) == pytest.approx(4 * 2 * rs, rel=1e-12)
    # full recompute repeats the forward's two: 6 collectives
    lay = one(tp=8, micro_batch=1, seq_len=4096, sequence_parallel=True, recompute="full")
    assert _f(tp_per_layer_s(model, lay, a100)) == pytest.approx(6 * 2 * rs, rel=1e-12)


def test_tp_traffic_without_sequence_parallel(a100: Cluster) -> None:
    # ring all-reduce 14*3e-6 + (14/8)*msg/240e9 beats tree 6*3e-6 + 2*msg/240e9 at 64 MiB
    model = load_model(LLAMA70)
    msg = 4096 * 8192 * 2
    ring = 14 * NVLINK_LAT + 14 / 8 * msg / NVLINK_BW
    lay = one(tp=8, micro_batch=1, seq_len=4096, sequence_parallel=False)
    assert _f(tp_per_layer_s(model, lay, a100)) == pytest.approx(4 * ring, rel=1e-12)
    assert _f(tp_per_layer_s(model, one(tp=1), a100)) == 0.0


def test_pp_traffic(a100: Cluster) -> None:
    # TP8 x PP2: stage neighbours are 8 ranks apart (another node). Per micro-batch:
    # activation forward + gradient backward, each T*h*2/TP = 8,388,608 bytes, per chunk (v)
    model = load_model(LLAMA70)
    one_way = IB_LAT + 4096 * 8192 * 2 / 8 / IB_BW
    assert _f(pp_per_micro_batch_s(model, one(tp=8, pp=2, seq_len=4096), a100)) == pytest.approx(2 * one_way)
    lay = one(tp=8, pp=2, seq_len=4096, virtual_stages=2)
    assert _f(pp_per_micro_batch_s(model, lay, a100)) == pytest.approx(4 * one_way)
    assert _f(pp_per_micro_batch_s(model, one(pp=1), a100)) == 0.0


def test_ep_traffic(a100: Cluster) -> None:
    # mixtral EP8 inside a node: dispatch + combine, forward and backward: 4 all-to-alls of
    # T*k*h*2 = 4096*2*4096*2 = 67,108,864 bytes: each 7*3e-6 + 7/8*msg/240e9
    model = load_model("mixtral-8x7b")
    msg = 4096 * 2 * 4096 * 2
    a2a = 7 * NVLINK_LAT + 7 / 8 * msg / NVLINK_BW
    lay = one(dp=8, ep=8, micro_batch=1, seq_len=4096, recompute="selective")
    assert _f(ep_per_layer_s(model, lay, a100)) == pytest.approx(4 * a2a, rel=1e-12)
    assert _f(ep_per_layer_s(load_model(LLAMA70), lay, a100)) == 0.0


def test_cp_traffic_exposed_only_beyond_attention(a100: Cluster) -> None:
    # TP8 x CP2: the CP pair is 8 ranks apart (InfiniBand). T = 8192/2 tokens per GPU.
    # K,V chunk 2*T*kv_dim/TP*2 = 2*4096*1024/8*2 = 2,097,152 bytes; 1 ring step.
    model = load_model(LLAMA70)
    lay = one(tp=8, cp=2, micro_batch=1, seq_len=8192, recompute="selective")
    chunk = 2 * 4096 * 1024 / 8 * 2
    fwd, bwd = IB_LAT + chunk / IB_BW, IB_LAT + 2 * chunk / IB_BW
    assert _f(cp_per_layer_s(model, lay, a100, _attention(0.0, 0.0))) == pytest.approx(fwd + bwd, rel=1e-12)
    # attention longer than the transfers hides them completely
    assert _f(cp_per_layer_s(model, lay, a100, _attention(1.0, 1.0))) == 0.0
    # each pass hides under its own attention: a long forward leaves the backward exposed
    assert _f(cp_per_layer_s(model, lay, a100, _attention(1.0, 0.0))) == pytest.approx(bwd, rel=1e-12)
    # full recompute runs the forward ring twice
    lay = one(tp=8, cp=2, micro_batch=1, seq_len=8192, recompute="full")
    assert _f(cp_per_layer_s(model, lay, a100, _attention(0.0, 0.0))) == pytest.approx(2 * fwd + bwd, rel=1e-12)


def _attention(fwd: float, bwd: float) -> MicroBatchTimes:
    zero = np.zeros(1)
    return MicroBatchTimes(zero, zero, zero, attention_fwd_s=np.full(1, fwd), attention_bwd_s=np.full(1, bwd))


def _windows(fwd: float, bwd: float) -> tuple[np.ndarray, np.ndarray]:
    """Wall time of one micro-batch's forward and backward: what DP traffic may hide under."""
    return np.full(1, fwd), np.full(1, bwd)


def _no_compute() -> tuple[np.ndarray, np.ndarray]:
    return _windows(0.0, 0.0)


def test_dp_traffic_by_hand(a100: Cluster) -> None:
    # llama2-7b, TP8 x DP2 (the two replicas on two nodes), nothing hidden (no window).
    # Local params P = (N - norms)/8 + norms, norms = 32*2*4096 + 4096 = 266,240.
    # Dense and expert (MLP) weights each make their own collective over the same link.
    cluster = a100
    model = load_model("llama2-7b")
    stack = Stack()
    n, norms = 6_738_415_616, 266_240
    p = (n - norms) / 8 + norms
    # ZeRO-0: all-reduce of fp32 grads; n=2 ring: 2 alpha + B/beta per collective
    lay = one(tp=8, dp=2, micro_batch=1, global_batch=8, zero=0)
    params = stage_params(model, lay, True, True)
    assert float(params.dense[0] + params.expert[0]) == pytest.approx(p, rel=1e-12)
    got = _f(dp_exposed_s(params, lay, cluster, stack, _no_compute()))
    assert got == pytest.approx(2 * 2 * IB_LAT + 4 * p / IB_BW, rel=1e-12)
    # ZeRO-1: reduce-scatter fp32 grads + all-gather bf16 weights, (n-1)/n = 1/2
    lay = one(tp=8, dp=2, micro_batch=1, global_batch=8, zero=1)
    got = _f(dp_exposed_s(params, lay, cluster, stack, _no_compute()))
    assert got == pytest.approx(2 * 2 * IB_LAT + (4 * p + 2 * p) / 2 / IB_BW, rel=1e-12)
    # ZeRO-3, m = 8/(2*1) = 4 micro-batches: 4 reduce-scatters + 2*4 weight gathers, each
    # gather one collective per layer (32 layers, dense and expert buckets): 64 latencies
    lay = one(tp=8, dp=2, micro_batch=1, global_batch=8, zero=3)
    got = _f(dp_exposed_s(params, lay, cluster, stack, _no_compute()))
    rs = 2 * IB_LAT + 4 * p / 2 / IB_BW  # two collectives (dense, expert)
    ag = 2 * 32 * IB_LAT + 2 * p / 2 / IB_BW
    assert got == pytest.approx(4 * rs + 8 * ag, rel=1e-12)
    # no data parallelism: nothing to reduce
    lay = one(tp=8, dp=1, zero=0)
    assert _f(dp_exposed_s(stage_params(model, lay, True, True), lay, cluster, stack, _no_compute())) == 0.0


def test_dp_traffic_hidden_by_backward(a100: Cluster) -> None:
    # dp_overlap 0.8 of a long backward pass hides the whole ZeRO-0 all-reduce
    model = load_model("llama2-7b")
    lay = one(tp=8, dp=2, micro_batch=1, global_batch=8, zero=0)
    params = stage_params(model, lay, True, True)
    assert _f(dp_exposed_s(params, lay, a100, Stack(), _windows(1.0, 100.0))) == 0.0
    # ... unless the stack does not overlap (Megatron-LM 2021-22 "local" DDP): all exposed
    wire = _f(dp_exposed_s(params, lay, a100, Stack(), _no_compute()))
    assert _f(dp_exposed_s(params, lay, a100, Stack(dp_overlap=False), _windows(1.0, 100.0))) == wire > 0


def test_overlap_windows_split_the_slot_one_to_two() -> None:
    # the backward does twice the forward's FLOPs (Narayanan et al. 2021 Sec 5.1)
    fwd, bwd = overlap_windows(np.array([3.0, 0.3]))
    assert fwd == pytest.approx([1.0, 0.1]) and bwd == pytest.approx([2.0, 0.2])


def test_dp_buckets_share_one_backward_window(a100: Cluster) -> None:
    # llama2-7b TP8 x DP2 (two nodes), ZeRO-0. The local weights split into a "dense" bucket
    # (attention, norms, embedding, head) and the MLP ("expert") bucket:
    #   dense  32*(4*4096^2/8 + 2*4096) + 2*32000*4096/8 + 4096 = 301,469,696
    #   MLP    32*3*4096*11008/8                               = 541,065,216
    # Both all-reduce fp32 grads over the same 2-rank InfiniBand ring (2 alpha + B/beta each):
    #   0.0567572 + 0.1018582 = 0.1586154 s of wire time in one backward pass.
    # With a backward of 0.125 s and dp_overlap 0.8, at most 0.1 s hides: >= 0.0586154 exposed.
    model = load_model("llama2-7b")
    lay = one(tp=8, dp=2, micro_batch=1, global_batch=2, zero=0)
    params = stage_params(model, lay, True, True)
    dense, mlp = 301_469_696, 541_065_216
    assert (float(params.dense[0]), float(params.expert[0])) == (dense, mlp)
    wire = (2 * IB_LAT + 4 * dense / IB_BW) + (2 * IB_LAT + 4 * mlp / IB_BW)
    assert _f(dp_exposed_s(params, lay, a100, Stack(), _no_compute())) == pytest.approx(wire, rel=1e-12)
    exposed = _f(dp_exposed_s(params, lay, a100, Stack(), _windows(0.0625, 0.125)))
    assert exposed >= wire - 0.8 * 0.125 - 1e-12, f"{exposed} s exposed of {wire} s wire time"


def test_zero3_backward_gathers_are_not_hidden_by_the_forward(a100: Cluster) -> None:
    # ZeRO-3, m = 4 micro-batches, each: gather all weights (forward), gather again (backward),
    # reduce-scatter the grads (backward). With a zero-length backward pass nothing can hide the
    # backward's gathers and scatters: exposed >= m * (RS + AG), whatever the forward lasts.
    #   RS = sum over the two buckets of alpha + (1/2) * 4 * P / beta
    #   AG = sum over the two buckets of alpha + (1/2) * 2 * P / beta,  P = 842,534,912 in total
    model = load_model("llama2-7b")
    lay = one(tp=8, dp=2, micro_batch=1, global_batch=8, zero=3)
    params = stage_params(model, lay, True, True)
    p = 842_534_912
    rs = 2 * IB_LAT + 4 * p / 2 / IB_BW
    ag = 2 * IB_LAT + 2 * p / 2 / IB_BW
    exposed = _f(dp_exposed_s(params, lay, a100, Stack(), _windows(10.0, 0.0)))
    assert exposed >= 4 * (rs + ag) * (1 - 1e-12), f"{exposed} s exposed, backward needs {4 * (rs + ag)} s"


@pytest.mark.parametrize(("dp", "cp"), [(8, 1), (4, 2), (2, 4)])
def test_mlp_gradients_reduce_over_the_dp_cp_group(a100: Cluster, dp: int, cp: int) -> None:
    # llama2-7b on one DGX A100 (8 GPUs, one NVSwitch node), TP1, DP x CP = 8, ZeRO-0, nothing
    # hidden. Every weight, the MLP's included, is replicated over the same 8 DP x CP ranks
    # 0..7, so both buckets all-reduce over NVSwitch whatever the DP/CP split:
    #   2 buckets x 14 alpha + (14/8) * 4 N / beta = 8.4e-5 + 0.1965372 = 0.1966212 s
    # No byte of this job can cross the network.
    model = load_model("llama2-7b")
    lay = one(dp=dp, cp=cp, micro_batch=1, global_batch=64, seq_len=4096, zero=0)
    params = stage_params(model, lay, True, True)
    expected = 2 * 14 * NVLINK_LAT + 14 / 8 * 4 * 6_738_415_616 / NVLINK_BW
    got = _f(dp_exposed_s(params, lay, a100, Stack(), _no_compute()))
    assert got == pytest.approx(expected, rel=1e-12)

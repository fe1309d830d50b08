"""Collectives (the alpha-beta model), group links, and what each parallel dimension sends and
exposes, against hand numbers. Traffic runs on conftest's round-figure DGX (`dgx`): NVLink
100e9 B/s at 2 us inside a node of 8, the network 10e9 B/s at 10 us per GPU."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import numpy as np
import numpy.typing as npt
import pytest
from conftest import gpt_spec, one
from hypothesis import given, settings
from hypothesis import strategies as st

from paraplan.cost_models.comm import (
    _distinct_pairs,
    all_gather_s,
    all_reduce_s,
    all_to_all_s,
    links,
    p2p_s,
    pair_links,
    reduce_scatter_s,
)
from paraplan.cost_models.compute import MicroBatchTimes
from paraplan.cost_models.evaluate import evaluate
from paraplan.cost_models.layout import Framework, Offload
from paraplan.cost_models.memory import StageParams
from paraplan.cost_models.models import ModelSpec
from paraplan.cost_models.stack import Stack
from paraplan.cost_models.traffic import (
    column_parallel_blocks,
    cp_per_layer_s,
    dp_exposed_s,
    ep_per_layer_s,
    live_blocked_numel,
    moe_dispatch_tp_bytes,
    overlap_windows,
    pp_per_micro_batch_s,
    remote_nodes_per_token,
    tp_per_layer_s,
)
from paraplan.hardware_specs.schema import Cluster

GB = 1e9
FloatArray = npt.NDArray[np.float64]


def _f(x: object) -> float:
    return float(np.asarray(x).reshape(-1)[0])


def _a(x: float) -> FloatArray:
    return np.array([float(x)])


Collective = Callable[[FloatArray, FloatArray, FloatArray, FloatArray], FloatArray]


def _run(collective: Collective, nbytes: float, n: float, bw: float, lat: float) -> float:
    """One collective of `nbytes` over `n` ranks on a link of `bw` B/s and `lat` s."""
    return _f(collective(_a(nbytes), _a(n), _a(bw), _a(lat)))


def _p2p(nbytes: float, bw: float, lat: float) -> float:
    return _f(p2p_s(_a(nbytes), _a(bw), _a(lat)))


# ------------------------------------------------------------------ alpha-beta collectives


def test_ring_all_reduce_by_hand() -> None:
    # Patarasuk & Yuan 2009: 2(n-1) alpha + 2 (n-1)/n B / beta. 1 GB over 8 ranks at 100 GB/s,
    # alpha 5 us: ring 2*7*5e-6 + 2*(7/8)*1e9/1e11 = 7e-5 + 0.0175 = 0.01757 s;
    # tree 2*log2(8)*5e-6 + 2*1e9/1e11 = 3e-5 + 0.02 = 0.02003 s: NCCL picks the ring.
    assert _run(all_reduce_s, 1 * GB, 8, 100 * GB, 5e-6) == pytest.approx(0.01757, rel=1e-12)


def test_tree_wins_for_tiny_messages_on_many_ranks() -> None:
    # 1 KB over 256 ranks: ring 2*255*5e-6 = 2.55 ms of latency alone; the double binary tree
    # 2*8*5e-6 + 2*1e3/1e11 = 8.002e-5 s
    assert _run(all_reduce_s, 1e3, 256, 100 * GB, 5e-6) == pytest.approx(8.002e-5, rel=1e-12)


def test_half_collectives_by_hand() -> None:
    # reduce-scatter, all-gather, all-to-all: (n-1) alpha + (n-1)/n B / beta
    #   1 GB, 8 ranks, 100 GB/s, 5 us: 3.5e-5 + 0.00875 = 0.008785 s
    for collective in (reduce_scatter_s, all_gather_s, all_to_all_s):
        assert _run(collective, 1 * GB, 8, 100 * GB, 5e-6) == pytest.approx(0.008785, rel=1e-12)


def test_point_to_point_by_hand() -> None:
    # alpha + B / beta: 5e-6 + 1e9/1e11 = 0.010005 s
    assert _p2p(1 * GB, 100 * GB, 5e-6) == pytest.approx(0.010005, rel=1e-12)


def test_a_single_rank_sends_nothing() -> None:
    for collective in (all_reduce_s, reduce_scatter_s, all_gather_s, all_to_all_s):
        assert _run(collective, 1 * GB, 1, 100 * GB, 5e-6) == 0.0


def test_collectives_are_vectorized() -> None:
    # n = 1: 0; n = 2: ring 2*5e-6 + 1e9/1e11 = 0.01001 (tree 0.02001); n = 8: 0.01757 (above)
    got = all_reduce_s(np.full(3, 1e9), np.array([1, 2, 8]), np.full(3, 1e11), np.full(3, 5e-6))
    assert got == pytest.approx([0.0, 0.01001, 0.01757], rel=1e-12)


@settings(max_examples=60, deadline=None)
@given(
    nbytes=st.floats(1.0, 1e11),
    n=st.integers(2, 4096),
    bw=st.floats(1e8, 1e13),
    lat=st.floats(0.0, 1e-3),
    factor=st.floats(1.0, 100.0),
)
def test_collective_properties(nbytes: float, n: int, bw: float, lat: float, factor: float) -> None:
    ar = _run(all_reduce_s, nbytes, n, bw, lat)
    # NCCL picks the faster algorithm: never slower than the ring (= reduce-scatter + all-gather)
    rs_ag = _run(reduce_scatter_s, nbytes, n, bw, lat) + _run(all_gather_s, nbytes, n, bw, lat)
    assert 0.0 < ar <= rs_ag * (1 + 1e-12)
    # more bandwidth or less latency never slows a collective; more bytes never speed it up
    for collective in (all_reduce_s, reduce_scatter_s, all_gather_s, all_to_all_s):
        base = _run(collective, nbytes, n, bw, lat)
        assert _run(collective, nbytes, n, bw * factor, lat) <= base
        assert _run(collective, nbytes, n, bw, lat / factor) <= base
        assert _run(collective, nbytes * factor, n, bw, lat) >= base
    assert _p2p(nbytes, bw * factor, lat) <= _p2p(nbytes, bw, lat)


# ------------------------------------------------------------------ group links on the round DGX


def test_group_links(dgx: Cluster) -> None:
    # TP8 inside a node: NVSwitch; 2 ranks 8 apart (one per node): the network
    bw, lat = links(dgx, np.array([8, 2]), np.array([1, 8]))
    assert list(bw) == [100e9, 10e9]
    assert list(lat) == pytest.approx([2e-6, 10e-6])
    # pipeline neighbours 8 ranks apart: another node; 1 apart: the same node
    bw, lat = pair_links(dgx, np.array([8, 1]))
    assert list(bw) == [10e9, 100e9]
    assert list(lat) == pytest.approx([10e-6, 2e-6])


# ------------------------------------------------------------------ TP

# Llama 2 70B: h 8192, g d 1024, f 28672. A micro-batch of T = 4096 tokens sends T h 2 =
# 67,108,864 bytes per TP collective; over TP8 on NVLink:
#   ring all-reduce 14 * 2e-6 + (14/8) * 67,108,864 / 1e11 = 1.20240512e-3 s (tree: 1.35417728e-3)
#   reduce-scatter = all-gather = 7 * 2e-6 + (7/8) * 67,108,864 / 1e11 = 6.0120256e-4 s
TP_ALL_REDUCE = 1.20240512e-3
TP_HALF = 6.0120256e-4


def _tp(model: ModelSpec, cluster: Cluster, stack: Stack, gemm_s: float, **knobs: object) -> float:
    lay = one(tp=8, micro_batch=1, seq_len=4096, **knobs)
    return _f(tp_per_layer_s(model, lay, cluster, stack, _a(gemm_s)))


def test_tp_without_overlap(dgx: Cluster, models: dict[str, ModelSpec]) -> None:
    # Shoeybi et al. 2019 Fig. 4: two all-reduces forward, two backward, all exposed
    model = models["llama2-70b"]
    assert _tp(model, dgx, Stack(tp_overlap=False), 1.0) == pytest.approx(4 * TP_ALL_REDUCE, rel=1e-12)
    # sequence parallelism: each becomes reduce-scatter + all-gather (Korthikanti Sec 4.2.2), and
    # Megatron's backward all-gathers the two column-parallel linears' inputs once more for their
    # weight gradients (megatron/core/tensor_parallel/layers.py at core_v0.6.0, `backward`): 4 + 6
    got = _tp(model, dgx, Stack(tp_overlap=False), 1.0, sequence_parallel=True)
    assert got == pytest.approx(10 * TP_HALF, rel=1e-12)
    # torchtitan keeps the gathered input for the weight gradient: 4 + 4
    got = _tp(model, dgx, Stack(tp_overlap=False), 1.0, sequence_parallel=True, framework="torchtitan", zero=3)
    assert got == pytest.approx(8 * TP_HALF, rel=1e-12)
    # full recompute repeats the forward's two: 6
    got = _tp(model, dgx, Stack(tp_overlap=False), 1.0, recompute="full")
    assert got == pytest.approx(6 * TP_ALL_REDUCE, rel=1e-12)


def test_tp_backward_hides_under_the_weight_gradient_gemms(dgx: Cluster, models: dict[str, ModelSpec]) -> None:
    # The backward collective of each column-parallel linear (QKV, the MLP's first projection)
    # runs during its own weight-gradient GEMM. Llama 2 70B, a d = 8192, g d = 1024, f = 28672:
    #   QKV a d + 2 g d = 10,240; MLP up 2 f = 57,344; row-parallel a d + f = 36,864; sum 104,448
    #   shares 10,240 / 104,448 = 5/51 and 57,344 / 104,448 = 28/51
    # With forward GEMMs of 17/11 ms the windows are 5/33 ms (QKV) and 28/33 ms (MLP), both
    # shorter than an all-reduce: (1.20240512e-3 - 5/33e-3) + (1.20240512e-3 - 28/33e-3)
    #   = 1.40481024e-3 exposed => 2 * 1.20240512e-3 + 1.40481024e-3 = 3.80962048e-3 s
    model = models["llama2-70b"]
    assert _tp(model, dgx, Stack(tp_overlap=True), 17 / 11 * 1e-3) == pytest.approx(3.80962048e-3, rel=1e-9)
    # Twice the GEMMs: windows of 10/33 ms and 56/33 ms. The MLP's all-reduce hides entirely, but
    # its spare GEMM time cannot cover the QKV's (the next op waits on each collective):
    #   1.20240512e-3 - 10/33e-3 = 8.9937482e-4 exposed (one pooled window would leave 4.0481024e-4)
    got = _tp(model, dgx, Stack(tp_overlap=True), 34 / 11 * 1e-3)
    assert got == pytest.approx(2 * TP_ALL_REDUCE + 1.20240512e-3 - 10 / 33 * 1e-3, rel=1e-9)
    # a window longer than both backward collectives hides them: only the forward's two remain
    assert _tp(model, dgx, Stack(tp_overlap=True), 1.0) == pytest.approx(2 * TP_ALL_REDUCE, rel=1e-12)
    # Sequence parallel, Megatron: with forward GEMMs of 17/11 ms the two row-parallel gradient
    # gathers stay exposed; each column-parallel linear's reduce-scatter hides under its
    # weight-gradient GEMM and its input re-gather under its input-gradient GEMM, each as long as
    # its forward GEMM. The MLP's (28/33 ms) hide whole; the QKV's (5/33 ms) leave TP_HALF - 5/33 ms
    # each: 4 TP_HALF (forward) + 2 TP_HALF + 2 (TP_HALF - 5/33e-3) = 8 TP_HALF - 10/33e-3
    got = _tp(model, dgx, Stack(tp_overlap=True), 17 / 11 * 1e-3, sequence_parallel=True)
    assert got == pytest.approx(8 * TP_HALF - 10 / 33 * 1e-3, rel=1e-9)
    # ... and with a long window only the forward's four and the backward's two gathers remain
    got = _tp(model, dgx, Stack(tp_overlap=True), 1.0, sequence_parallel=True)
    assert got == pytest.approx(6 * TP_HALF, rel=1e-12)
    # torchtitan's async TP fuses all four backward collectives into matmuls: one shared window
    got = _tp(model, dgx, Stack(tp_overlap=True), 17 / 11 * 1e-3, sequence_parallel=True, framework="torchtitan",
              zero=3)  # fmt: skip
    assert got == pytest.approx(8 * TP_HALF - 1e-3, rel=1e-9)
    # TP1 sends nothing
    assert _f(tp_per_layer_s(model, one(tp=1), dgx, Stack(), _a(1.0))) == 0.0


def test_megatron_deepspeed_hides_only_the_sequence_parallel_backward(
    dgx: Cluster, models: dict[str, ModelSpec]
) -> None:
    # Megatron-DeepSpeed 6acc370a sets async_tensor_model_parallel_allreduce = False under
    # --deepspeed (megatron/arguments.py), so without SP the backward's two all-reduces wait
    # whatever the GEMMs: the 4 all-reduces of test_tp_without_overlap, even with a 1 s window
    model = models["llama2-70b"]
    got = _tp(model, dgx, Stack(tp_overlap=True), 1.0, framework="deepspeed")
    assert got == pytest.approx(4 * TP_ALL_REDUCE, rel=1e-12)
    # its sequence-parallel backward still reduce-scatters and re-gathers under the GEMMs
    # (core/tensor_parallel/layers.py, async_op=True): Megatron's 8 TP_HALF - 10/33 ms above
    got = _tp(model, dgx, Stack(tp_overlap=True), 17 / 11 * 1e-3, framework="deepspeed", sequence_parallel=True)
    assert got == pytest.approx(8 * TP_HALF - 10 / 33 * 1e-3, rel=1e-9)


def test_userbuffers_layer_by_hand(dgx: Cluster, models: dict[str, ModelSpec]) -> None:
    # Transformer Engine's userbuffers (Stack.tp_comm_overlap), Llama 2 70B, TP8, SP, T = 4096:
    # every collective C = TP_HALF. Per 2048 of the 104,448 GEMM columns a share of 1/51: QKV
    # 5/51, out 4/51, MLP up 28/51, down 14/51. Forward GEMMs of 5.1 ms: QKV 0.5 ms, out 0.4 ms,
    # up 2.8 ms, down 1.4 ms (the round DGX has no GEMM shape penalty and no launch cost, so the
    # split GEMMs cost nothing extra). Forward:
    #   QKV all-gather, ring: 7 of 8 chunks of the QKV GEMM hide it: C - 7/8 0.5e-3 = 1.6370256e-4
    #   out reduce-scatter, 4-way pipeline: C/4 + 3 (C - 0.4e-3)/4 = 3.0120256e-4
    #   up all-gather: 7/8 2.8e-3 > C, hidden; down reduce-scatter: its last quarter, C/4 = 1.5030064e-4
    # Backward: the out projection's gradient gathered by ring under its input-gradient GEMM,
    #   C - 7/8 0.4e-3 = 2.5120256e-4; QKV's input re-gather and input-gradient reduce-scatter,
    #   each beside one whole QKV GEMM: 2 (C - 0.5e-3) = 2.0240512e-4; the MLP's all hidden.
    model = models["llama2-70b"]
    want = 1.6370256e-4 + 3.0120256e-4 + 1.5030064e-4 + 2.5120256e-4 + 2.0240512e-4
    got = _tp(model, dgx, Stack(tp_comm_overlap=True), 5.1e-3, sequence_parallel=True)
    assert got == pytest.approx(want, rel=1e-9)
    # against Megatron's own overlap alone (8 TP_HALF - 2 x 0.5 ms of the QKV window, hand-worked
    # as in the test above): the forward's four collectives were all exposed
    plain = _tp(model, dgx, Stack(), 5.1e-3, sequence_parallel=True)
    assert plain == pytest.approx(8 * TP_HALF - 2 * 0.5e-3, rel=1e-9)
    # no GEMM to hide under: every collective whole except the pipelined ones' 4 chunks, all exposed
    assert _tp(model, dgx, Stack(tp_comm_overlap=True), 0.0, sequence_parallel=True) == pytest.approx(
        10 * TP_HALF, rel=1e-9
    )
    # userbuffers need sequence parallelism (Megatron asserts it) and are Megatron's only
    assert _tp(model, dgx, Stack(tp_comm_overlap=True), 5.1e-3) == _tp(model, dgx, Stack(), 5.1e-3)
    titan = {"sequence_parallel": True, "framework": "torchtitan", "zero": 3}
    assert _tp(model, dgx, Stack(tp_comm_overlap=True), 5.1e-3, **titan) == _tp(model, dgx, Stack(), 5.1e-3, **titan)


def test_userbuffers_split_gemms_cost_their_launches(dgx: Cluster, models: dict[str, ModelSpec]) -> None:
    # With a launch cost of 10 us per GEMM (and still no shape penalty) the split GEMMs add their
    # extra launches: forward, QKV and MLP up in 8 ring chunks (7 more each), out and down in 4
    # pipeline chunks (3 more each): 20 launches; backward, out and down input-gradient GEMMs in 8
    # chunks: 14. Every collective hides as in the hand-worked layer, so the difference is 34 x 10 us.
    model = models["llama2-70b"]
    slow = dgx.model_copy(update={"efficiency": dgx.efficiency.model_copy(update={"kernel_overhead_s": 1e-5})})
    got = _tp(model, slow, Stack(tp_comm_overlap=True), 5.1e-3, sequence_parallel=True)
    base = _tp(model, dgx, Stack(tp_comm_overlap=True), 5.1e-3, sequence_parallel=True)
    assert got - base == pytest.approx(34 * 1e-5, rel=1e-6)


# ------------------------------------------------------------------ TP in MoE layers (Megatron)

# A tiny MoE: h 1024, 8 heads of 128 (q = k = v = 1024 wide), 4 gated experts of f 512, top-2,
# every layer MoE. One micro-batch of T = 1024 tokens: T h 2 = 2,097,152 bytes per TP collective;
# over TP4 on NVLink a reduce-scatter or all-gather takes 3 * 2e-6 + (3/4) * 2,097,152 / 1e11 s.
MOE_H = 3 * 2e-6 + 0.75 * 2_097_152 / 1e11  # 2.172864e-5 s


def _tiny_moe(**update: object) -> ModelSpec:
    spec = ModelSpec(name="tiny-moe", hidden_size=1024, num_layers=4, num_heads=8, num_kv_heads=8, head_dim=128,
                     ffn_hidden_size=512, vocab_size=1000, max_seq_len=4096, mlp="gated", tied_embeddings=False,
                     num_experts=4, experts_top_k=2)  # fmt: skip
    return spec.model_copy(update=update)


def _moe_tp(model: ModelSpec, cluster: Cluster, stack: Stack, gemm_s: float, **knobs: object) -> float:
    lay = one(micro_batch=1, seq_len=1024, sequence_parallel=True, **knobs)
    return _f(tp_per_layer_s(model, lay, cluster, stack, _a(gemm_s)))


def _flat(blocks: tuple[tuple[float, float], ...]) -> list[float]:
    return [value for block in blocks for value in block]


def test_moe_windows_are_attention_dense_and_shared_first_projections() -> None:
    # per token and h: QKV 1024 + 2 * 1024 = 3072 (column), out 1024 (row); routed experts
    # top-2 x gated 2 x 512 = 2048 (column, not a window: the dispatcher's collectives) and
    # 2 x 512 = 1024 (row)  =>  the attention block only, 3072 / (3072 + 2048 + 1024 + 1024) = 3/7
    assert _flat(column_parallel_blocks(_tiny_moe(), dispatcher=True)) == pytest.approx([1.0, 3 / 7], rel=1e-12)
    # a shared expert of 512: its first projection, 2 x 512 = 1024, is its block's window; its
    # second 512: total 3072 + 1024 + 2048 + 1024 + 512 + 1024 = 8704
    #   => attention 3072/8704 = 6/17, shared expert 1024/8704 = 2/17
    shared = column_parallel_blocks(_tiny_moe(num_shared_experts=1), dispatcher=True)
    assert _flat(shared) == pytest.approx([1.0, 6 / 17, 1.0, 2 / 17], rel=1e-12)
    # a dense first layer of 2048 (1 of 4 layers): 1/4 of its first projection 2 x 2048 and
    # second 2048; 3/4 of the routed experts': total 3072 + 1024 + 1536 + 1024 + 512 + 768 = 7936
    #   => attention 3072/7936 = 12/31; the dense MLP, a quarter of a block a layer, 4096/7936 = 16/31
    first_dense = _tiny_moe(dense_layer_ids=(0,), dense_ffn_hidden_size=2048)
    assert _flat(column_parallel_blocks(first_dense, dispatcher=True)) == pytest.approx([1.0, 12 / 31, 0.25, 16 / 31])
    # without Megatron's dispatcher an MoE MLP is one block over all its experts' first projections
    assert _flat(column_parallel_blocks(_tiny_moe(), dispatcher=False)) == pytest.approx([1.0, 3 / 7, 1.0, 2 / 7])


def test_moe_dispatcher_bytes_by_hand() -> None:
    model = _tiny_moe()
    # EP 1: the allgather dispatcher gathers the T * ETP / TP tokens of its expert-TP group
    lay = one(tp=4, micro_batch=1, seq_len=1024, sequence_parallel=True)
    assert _f(moe_dispatch_tp_bytes(model, lay)) == 1024 * 1024 * 2
    lay = one(tp=4, dp=2, micro_batch=1, seq_len=1024, sequence_parallel=True, expert_tp=2)
    assert _f(moe_dispatch_tp_bytes(model, lay)) == 512 * 1024 * 2
    # EP > 1: the alltoall dispatcher gathers the T * k * ETP / TP routed copies over expert TP
    lay = one(tp=4, dp=2, ep=2, micro_batch=1, seq_len=1024, sequence_parallel=True)
    assert _f(moe_dispatch_tp_bytes(model, lay)) == 1024 * 2 * 1024 * 2


def test_moe_tp_collectives_by_hand(dgx: Cluster) -> None:
    model = _tiny_moe()
    plain = Stack(tp_overlap=False)
    # EP1, expert TP = TP4: attention 2 forward (gather, scatter), the dispatcher's 2 over the
    # same group with the same bytes; backward: attention's output-gradient gather, its QKV
    # input-gradient scatter and input re-gather, the dispatcher's 2 (no re-gather: the grouped
    # linear saved the gathered tokens)  =>  4 + 5 = 9 (a dense layer: 10)
    assert _moe_tp(model, dgx, plain, 1.0, tp=4) == pytest.approx(9 * MOE_H, rel=1e-12)
    # a long window hides the QKV scatter and re-gather, not the dispatcher's backward pair: 4 + 3
    assert _moe_tp(model, dgx, Stack(), 1.0, tp=4) == pytest.approx(7 * MOE_H, rel=1e-12)
    # a window of 1e-5 s (forward GEMMs of 7/3 * 1e-5 s, share 3/7) hides 1e-5 of each
    got = _moe_tp(model, dgx, Stack(), 7 / 3 * 1e-5, tp=4)
    assert got == pytest.approx(9 * MOE_H - 2e-5, rel=1e-9)
    # EP2 x expert TP4 over TP4 x DP2: the routed copies, T k ETP / TP h 2 = 4,194,304 bytes over
    # expert TP4: 3 * 2e-6 + (3/4) * 4,194,304 / 1e11 each, 2 forward + 2 backward
    copies = 3 * 2e-6 + 0.75 * 4_194_304 / 1e11
    got = _moe_tp(model, dgx, plain, 1.0, tp=4, dp=2, ep=2)
    assert got == pytest.approx(5 * MOE_H + 4 * copies, rel=1e-12)
    # EP4 x expert TP1: no gather over expert TP, only attention's 5
    assert _moe_tp(model, dgx, plain, 1.0, tp=4, ep=4, expert_tp=1) == pytest.approx(5 * MOE_H, rel=1e-12)
    # ... and a shared expert brings a dense MLP's 5 over TP4
    shared = _tiny_moe(num_shared_experts=1)
    assert _moe_tp(shared, dgx, plain, 1.0, tp=4, ep=4, expert_tp=1) == pytest.approx(10 * MOE_H, rel=1e-12)
    # torchtitan gathers the MoE input once like a dense MLP's; no re-gathers: 4 + 4
    got = _moe_tp(model, dgx, plain, 1.0, tp=4, framework="torchtitan", zero=3)
    assert got == pytest.approx(8 * MOE_H, rel=1e-12)


# ------------------------------------------------------------------ PP

# TP8 x PP2: stage neighbours are 8 ranks apart, on another node. One transfer of a micro-batch
# boundary, T h 2 / TP = 4096 * 8192 * 2 / 8 = 8,388,608 bytes: 1e-5 + 8.388608e-4 = 8.488608e-4 s
PP_ONE = 8.488608e-4


def _pp(model: ModelSpec, cluster: Cluster, stack: Stack, chunk_s: float, **knobs: object) -> float:
    lay = one(tp=8, pp=2, micro_batch=1, seq_len=4096, global_batch=8, **knobs)
    return _f(pp_per_micro_batch_s(model, lay, cluster, stack, _a(chunk_s)))


def test_pp_1f1b_transfers_are_blocking(dgx: Cluster, models: dict[str, ModelSpec]) -> None:
    # activation forward + gradient backward per micro-batch (Narayanan et al. 2021 Sec 4.1),
    # exposed whatever compute there is
    model = models["llama2-70b"]
    assert _pp(model, dgx, Stack(p2p_overlap=True), 1.0) == pytest.approx(2 * PP_ONE, rel=1e-12)
    assert _f(pp_per_micro_batch_s(model, one(pp=1), dgx, Stack(), _a(0.0))) == 0.0


def test_deepspeed_pipeline_engine_waits_on_four_transfers_and_three_tp_gathers(
    dgx: Cluster, models: dict[str, ModelSpec]
) -> None:
    # DeepSpeed's PipelineEngine (frameworks.PP_SERIAL_TRANSFERS / PP_PARTITION_GATHERS): recv_act,
    # send_grad, send_act, recv_grad one after another, 4 x 8.488608e-4 = 3.3954432e-3 s; and with
    # TP 8 three all-gathers of the whole boundary tensor, 4096 * 8192 * 2 = 67,108,864 bytes, over
    # NVLink (100e9 B/s, 2 us): 7 * 2e-6 + 7/8 * 67108864 / 1e11 = 6.0120256e-4 s each
    model = models["llama2-70b"]
    expected = 4 * PP_ONE + 3 * 6.0120256e-4
    assert _pp(model, dgx, Stack(p2p_overlap=False), 1.0, framework="deepspeed") == pytest.approx(expected, rel=1e-9)
    # TP 1: no partitioned tensors, no gathers; four whole-tensor transfers to the neighbour one rank
    # away, on the same node (NVLink): 2e-6 + 67108864 / 1e11 = 6.7308864e-4 s each
    lay = one(tp=1, pp=2, micro_batch=1, seq_len=4096, global_batch=8, framework="deepspeed")
    whole = 6.7308864e-4
    assert _f(pp_per_micro_batch_s(model, lay, dgx, Stack(), _a(1.0))) == pytest.approx(4 * whole, rel=1e-9)


def test_pp_interleaved_transfers_overlap_the_next_chunk(dgx: Cluster, models: dict[str, ModelSpec]) -> None:
    # v = 2 chunks: 2 v = 4 transfers per micro-batch
    model = models["llama2-70b"]
    assert _pp(model, dgx, Stack(p2p_overlap=False), 1.0, virtual_stages=2) == pytest.approx(4 * PP_ONE, rel=1e-12)
    # --overlap-p2p-communication: each hides behind a chunk's compute of 5e-4 s:
    #   4 * (8.488608e-4 - 5e-4) = 1.3954432e-3 s; behind a longer chunk, entirely
    assert _pp(model, dgx, Stack(p2p_overlap=True), 5e-4, virtual_stages=2) == pytest.approx(1.3954432e-3, rel=1e-9)
    assert _pp(model, dgx, Stack(p2p_overlap=True), 1.0, virtual_stages=2) == 0.0


# ------------------------------------------------------------------ CP


def _attention(fwd: float, bwd: float) -> MicroBatchTimes:
    """Micro-batch times with only the attention set (what context parallelism overlaps)."""
    zeros = {f.name: np.zeros(1) for f in dataclasses.fields(MicroBatchTimes)}
    return MicroBatchTimes(**{**zeros, "attention_fwd_s": _a(fwd), "attention_bwd_s": _a(bwd)})


def _cp(model: ModelSpec, cluster: Cluster, times: MicroBatchTimes, stack: Stack | None = None,
        **knobs: object) -> float:  # fmt: skip
    lay = one(tp=8, micro_batch=1, seq_len=8192, **knobs)
    return _f(cp_per_layer_s(model, lay, cluster, stack or Stack(), times))


def test_cp_ring_hides_under_attention(dgx: Cluster, models: dict[str, ModelSpec]) -> None:
    # Llama 2 70B, TP8 x CP2, s 8192: T = 4096 tokens a GPU; the CP pair is 8 ranks apart (the
    # network). Ring attention passes K and V, 2 T g d / TP * 2 = 2,097,152 bytes, CP-1 = 1 step:
    #   forward 1e-5 + 2,097,152/1e10 = 2.197152e-4; backward (K, V, dK, dV) 1e-5 + 4.194304e-4
    model = models["llama2-70b"]
    fwd, bwd = 2.197152e-4, 4.294304e-4
    assert _cp(model, dgx, _attention(0.0, 0.0), cp=2) == pytest.approx(fwd + bwd, rel=1e-12)
    # each pass hides under its own attention compute
    assert _cp(model, dgx, _attention(1.0, 1.0), cp=2) == 0.0
    assert _cp(model, dgx, _attention(1.0, 0.0), cp=2) == pytest.approx(bwd, rel=1e-12)
    # full recompute runs the forward ring twice
    assert _cp(model, dgx, _attention(0.0, 0.0), cp=2, recompute="full") == pytest.approx(2 * fwd + bwd, rel=1e-12)


def test_cp_allgather_is_not_overlapped(dgx: Cluster, models: dict[str, ModelSpec]) -> None:
    # All-gather (Llama 3): K, V of both ranks gathered, CP * 2,097,152 = 4,194,304 bytes, n = 2:
    #   1e-5 + (1/2) * 4,194,304 / 1e10 = 2.197152e-4 s forward, the same reduce-scatter backward,
    # whatever the attention lasts.
    model = models["llama2-70b"]
    for attention in (0.0, 1.0):
        got = _cp(model, dgx, _attention(attention, attention), cp=2, cp_comm="allgather")
        assert got == pytest.approx(2 * 2.197152e-4, rel=1e-12)


def test_cp_allgather_of_repeated_kv(dgx: Cluster, models: dict[str, ModelSpec]) -> None:
    # K and V repeated to the a = 64 query heads before attention (Stack.kv_repeated), not g = 8:
    # 8 x 4,194,304 = 33,554,432 bytes gathered, n = 2:
    #   1e-5 + (1/2) x 33,554,432 / 1e10 = 1.6877216e-3 s forward, the same backward
    model = models["llama2-70b"]
    got = _cp(model, dgx, _attention(0.0, 0.0), Stack(kv_repeated=True), cp=2, cp_comm="allgather")
    assert got == pytest.approx(2 * 1.6877216e-3, rel=1e-12)


def test_cp4_ring_against_allgather(dgx: Cluster, models: dict[str, ModelSpec]) -> None:
    # CP4 at stride 8: four ranks on four nodes. T = 2048, chunk 1,048,576 bytes.
    #   ring:   3 steps x (1e-5 + 1.048576e-4) forward + 3 x (1e-5 + 2.097152e-4) backward
    #           = 3.445728e-4 + 6.591456e-4 = 1.0037184e-3 s (nothing hidden)
    #   gather: 3e-5 + (3/4) * 4,194,304 / 1e10 = 3.445728e-4 s forward, the same backward
    #           = 6.891456e-4 s
    model = models["llama2-70b"]
    assert _cp(model, dgx, _attention(0.0, 0.0), cp=4) == pytest.approx(1.0037184e-3, rel=1e-12)
    assert _cp(model, dgx, _attention(0.0, 0.0), cp=4, cp_comm="allgather") == pytest.approx(6.891456e-4, rel=1e-12)
    assert _cp(model, dgx, _attention(0.0, 0.0), cp=1) == 0.0


def test_a_cp_ring_across_nodes_steps_at_one_nics_bandwidth(dgx: Cluster, models: dict[str, ModelSpec]) -> None:
    # Llama 2 70B, TP2 x CP8 at s 8192: the ring's 8 ranks sit 4 to a node on two nodes. Each step
    # every rank sends its chunk to the next at once; the two pairs across the node boundary move
    # theirs through one GPU's NIC (10e9 B/s, 10 us), not the 4 x NIC an NCCL collective of the
    # group gets. T = 1024, chunk 2 T g d / TP * 2 = 2,097,152 bytes, CP-1 = 7 steps:
    #   forward 7 x (1e-5 + 2,097,152 / 1e10) = 1.5380064e-3; backward 7 x (1e-5 + 4,194,304 / 1e10)
    #   = 3.0060128e-3; 4.5440192e-3 s with nothing hidden
    model = models["llama2-70b"]

    def ring(cp: int) -> float:
        lay = one(tp=2, cp=cp, micro_batch=1, seq_len=8192)
        return _f(cp_per_layer_s(model, lay, dgx, Stack(), _attention(0.0, 0.0)))

    assert ring(8) == pytest.approx(4.5440192e-3, rel=1e-12)
    # CP4 at TP2 fits one node: NVLink, 1e11 B/s at 2 us; T = 2048, chunk 4,194,304 bytes:
    #   3 x (2e-6 + 4.194304e-5) + 3 x (2e-6 + 8.388608e-5) = 3.8948736e-4 s
    assert ring(4) == pytest.approx(3.8948736e-4, rel=1e-12)


def test_torch_cp_sends_dkv_across_nodes_at_one_nics_bandwidth(dgx: Cluster, models: dict[str, ModelSpec]) -> None:
    # PyTorch's context_parallel, compiled, Llama 2 70B at TP2 x CP8 on two nodes (4 ranks each),
    # T = 1024, chunk 2,097,152 bytes. The K/V all-gather is a collective over the group: 4 NICs
    # (4e10 B/s, under NVLink's 1e11), 7 x 1e-5 + (7/8) x 8 x 2,097,152 / 4e10 = 4.370016e-4 s,
    # forward and backward. Each dK/dV send goes to the next rank, the boundary pair through one
    # NIC: 1e-5 + 4,194,304 / 1e10 = 4.294304e-4 s, CP = 8 of them:
    #   2 x 4.370016e-4 + 8 x 4.294304e-4 = 4.3094464e-3 s
    lay = one(tp=2, cp=8, micro_batch=1, seq_len=8192, framework="torchtitan", cp_comm="allgather")
    got = cp_per_layer_s(models["llama2-70b"], lay, dgx, Stack(compiled=True), _attention(0.0, 0.0))
    assert _f(got) == pytest.approx(4.3094464e-3, rel=1e-12)


def test_torch_cp_compiled_exposes_every_exchange(dgx: Cluster, models: dict[str, ModelSpec]) -> None:
    # PyTorch's context_parallel (torchtitan), compiled: Llama 2 70B, TP8 x CP2 on two nodes
    # (10e9 B/s, 1e-5 s), T = 4096, K/V chunk 2,097,152 bytes (as above).
    #   all-gather of K, V: 1e-5 + (1/2) * 4,194,304 / 1e10 = 2.197152e-4, in the forward and again
    #   in the backward; the backward sends the fp32 dK, dV (2 x the chunk) CP = 2 times:
    #   1e-5 + 4,194,304 / 1e10 = 4.294304e-4 each; waited at once, whatever the attention lasts:
    #   2 * 2.197152e-4 + 2 * 4.294304e-4 = 1.2982912e-3
    model = models["llama2-70b"]

    def titan(times: MicroBatchTimes, cp: int = 2, recompute: str = "none") -> float:
        return _cp(model, dgx, times, framework="torchtitan", cp=cp, cp_comm="allgather", recompute=recompute)

    for attention in (0.0, 1.0):
        assert titan(_attention(attention, attention)) == pytest.approx(1.2982912e-3, rel=1e-12)
    # full recompute all-gathers once more: + 2.197152e-4
    assert titan(_attention(1.0, 1.0), recompute="full") == pytest.approx(1.5180064e-3, rel=1e-12)
    # CP4 on four nodes, T = 2048, chunk 1,048,576: gather 3e-5 + (3/4) * 4,194,304 / 1e10 =
    # 3.445728e-4 twice, 4 sends of 2,097,152 bytes at 1e-5 + 2.097152e-4 = 2.197152e-4:
    #   6.891456e-4 + 8.788608e-4 = 1.5680064e-3
    assert titan(_attention(0.0, 0.0), cp=4) == pytest.approx(1.5680064e-3, rel=1e-12)


def test_torch_cp_eager_overlaps_all_but_the_last_send(dgx: Cluster, models: dict[str, ModelSpec]) -> None:
    # Eager, the all-gathers hide under the first step's SDPA (attention / CP) and each dK/dV send
    # under the next step's SDPA backward; the last send (4.294304e-4, above) is always exposed.
    model = models["llama2-70b"]

    def eager(times: MicroBatchTimes) -> float:
        return _cp(model, dgx, times, Stack(compiled=False), framework="torchtitan", cp=2, cp_comm="allgather")

    assert eager(_attention(1.0, 1.0)) == pytest.approx(4.294304e-4, rel=1e-12)
    # with no attention to hide under, eager exposes what compiled does
    assert eager(_attention(0.0, 0.0)) == pytest.approx(1.2982912e-3, rel=1e-12)
    # a forward SDPA of 2e-4 per step (4e-4 / CP) hides all but 1.97152e-5 of the forward gather
    assert eager(_attention(4e-4, 1.0)) == pytest.approx(1.97152e-5 + 4.294304e-4, rel=1e-9)


# ------------------------------------------------------------------ EP


def test_ep_all_to_all_by_hand(dgx: Cluster, models: dict[str, ModelSpec]) -> None:
    # Mixtral, EP8 inside a node: dispatch and combine, forward and backward (GShard): 4
    # all-to-alls of T k h 2 = 4096 * 2 * 4096 * 2 = 67,108,864 bytes, each
    #   7 * 2e-6 + (7/8) * 67,108,864 / 1e11 = 6.0120256e-4 s  => 2.40481024e-3 s
    lay = one(dp=8, ep=8, micro_batch=1, seq_len=4096)
    assert _f(ep_per_layer_s(models["mixtral-8x7b"], lay, dgx, Stack())) == pytest.approx(2.40481024e-3, rel=1e-12)
    # a dense model has no experts to exchange tokens with
    assert _f(ep_per_layer_s(models["llama2-70b"], lay, dgx, Stack())) == 0.0
    # the mean layer of a model whose first of 32 layers is dense: 31/32 of that, 2.32965992e-3 s
    first_dense = models["mixtral-8x7b"].model_copy(update={"dense_layer_ids": (0,)})
    assert _f(ep_per_layer_s(first_dense, lay, dgx, Stack())) == pytest.approx(2.40481024e-3 * 31 / 32, rel=1e-12)


def test_flex_dispatcher_sends_a_token_once_per_remote_node_by_hand(dgx: Cluster, models: dict[str, ModelSpec]) -> None:
    # 16 experts, top-2, h 4096, EP16 over two round DGX nodes (8 experts each), T = 4096 tokens.
    # Plain all-to-all: 2 copies of 4096 * 4096 * 2 = 33,554,432 bytes; the group's all-to-all
    # bandwidth is 15 / max(8 / 1e10, 7 / 1e11) = 1.875e10, so per exchange
    #   15 * 1e-5 + (15/16) * 67,108,864 / 1.875e10 = 1.5e-4 + 3.3554432e-3 = 3.5054432e-3 s.
    # Flex: the other node holds none of the 2 experts with probability C(8,2)/C(16,2) = 28/120,
    # so 23/30 copies cross the 1e10 NIC: 2.57250645e-3 s, above the NVLink leg's
    # 2 * (7/8) * 33,554,432 / 1e11 = 5.8720256e-4 s; per exchange 1.5e-4 + 2.57250645e-3.
    model = models["mixtral-8x7b"].model_copy(update={"num_experts": 16})
    lay = one(dp=16, ep=16, micro_batch=1, seq_len=4096)
    plain = _f(ep_per_layer_s(model, lay, dgx, Stack()))
    flex = _f(ep_per_layer_s(model, lay, dgx, Stack(ep_dispatcher="hybridep")))
    assert plain == pytest.approx(4 * 3.5054432e-3, rel=1e-12)
    assert flex == pytest.approx(4 * (1.5e-4 + 23 / 30 * 33_554_432 / 1e10), rel=1e-12)
    assert _f(ep_per_layer_s(model, lay, dgx, Stack(ep_dispatcher="deepep"))) == flex
    # inside one node the flex dispatcher moves what the all-to-all does (EP8 hand figure above)
    lay8 = one(dp=8, ep=8, micro_batch=1, seq_len=4096)
    mixtral = models["mixtral-8x7b"]
    assert _f(ep_per_layer_s(mixtral, lay8, dgx, Stack(ep_dispatcher="hybridep"))) == pytest.approx(
        2.40481024e-3, rel=1e-12
    )


def test_remote_nodes_per_token_by_hand() -> None:
    # DeepSeek-V3, 256 experts, top-8, over 4 nodes: 3 (1 - C(192,8)/C(256,8)) = 2.7106607 other
    # nodes per token, against 8 * 3/4 = 6 remote copies for the plain all-to-all
    got = remote_nodes_per_token(256, 8, np.array([1.0, 4.0]))
    assert got[0] == 0.0
    assert got[1] == pytest.approx(3 * (1 - math.comb(192, 8) / math.comb(256, 8)), rel=1e-12)
    assert got[1] == pytest.approx(2.7106607, rel=1e-7)
    # one expert per node (E = N): every chosen expert is on its own node, k (N-1)/N remote
    assert remote_nodes_per_token(8, 2, np.array([8.0]))[0] == pytest.approx(2 * 7 / 8, rel=1e-12)


def test_remote_nodes_with_group_limited_routing_by_hand() -> None:
    # DeepSeek-V3's 8 groups of 32 experts, 4 chosen, 2 experts from each (Megatron-LM
    # group_limited_topk, force-balanced). 4 nodes of 2 groups: a node is missed iff neither of its
    # groups is chosen, C(6,4)/C(8,4) = 15/70; 4 (55/70) nodes touched, 3/4 of them remote = 165/70.
    # 8 nodes (group = node): 7 x 4/8. 16 nodes (a group spans 2): touched with probability
    # 4/8 (1 - C(16,2)/C(32,2)) = 0.5 x 376/496, 16 x that x 15/16 remote.
    got = remote_nodes_per_token(256, 8, np.array([1.0, 4.0, 8.0, 16.0]), 8, 4)
    assert got[0] == 0.0
    assert got[1] == pytest.approx(165 / 70, rel=1e-12)
    assert got[2] == pytest.approx(3.5, rel=1e-12)
    assert got[3] == pytest.approx(15 * 0.5 * 376 / 496, rel=1e-12)
    # below the unlimited count at every node count; all groups chosen is no limit at all
    free = remote_nodes_per_token(256, 8, np.array([4.0, 8.0, 16.0]))
    assert np.all(got[1:] < free)
    assert remote_nodes_per_token(256, 8, np.array([4.0]), 8, 8)[0] == pytest.approx(free[0], rel=1e-12)


# ------------------------------------------------------------------ DP


def _params(dense: float, expert: float, layers: float) -> StageParams:
    """A stage's parameters: dense (replicated over DP x CP), expert (over DP x CP / EP)."""
    return StageParams(dense=_a(dense), expert=_a(expert), layer_max=_a((dense + expert) / layers), layers=_a(layers))


NOTHING_HIDDEN = (_a(0.0), _a(0.0))
NONE_BLOCKED = (_a(0.0), _a(0.0))  # no gather waits for the live-parameter limit
# TP8 x DP2: the two replicas on two nodes, DP groups at stride 8 over the network
# (10e9 B/s, 10 us). A stage of 1e9 dense and 2e9 expert parameters (EP1: both buckets reduce
# over the same 2 ranks) in 2 layers; 2 micro-batches a step.
DP2 = {"tp": 8, "dp": 2, "micro_batch": 1, "global_batch": 4}


@pytest.mark.parametrize(
    ("zero", "expected"),
    [
        # ring all-reduce of fp32 grads, n = 2: 2 alpha + B / beta per bucket
        #   (2e-5 + 4e9/1e10) + (2e-5 + 8e9/1e10) = 0.40002 + 0.80002
        (0, 1.20004),
        # distributed optimizer: reduce-scatter fp32 grads + all-gather bf16 weights, (n-1)/n = 1/2
        #   dense 0.20001 + 0.10001, expert 0.40001 + 0.20001
        (1, 0.90004),
        # ZeRO-2 reduce-scatters after every micro-batch's backward: 2 * (0.20001 + 0.40001) + the
        # gather 0.10001 + 0.20001
        (2, 1.50006),
        # ZeRO-3 gathers each layer's weights, forward and backward, every micro-batch:
        #   per bucket and pass 2 layers x (1e-5 + (1/2) * 2 B * P / 2 / 1e10):
        #   dense 0.10002, expert 0.20002 => gathers 0.30004, scatters 0.60002
        #   2 micro-batches x (0.30004 forward + 0.30004 + 0.60002 backward) = 2.4002
        (3, 2.4002),
    ],
)
def test_dp_traffic_by_hand(dgx: Cluster, zero: int, expected: float) -> None:
    got = _f(dp_exposed_s(_params(1e9, 2e9, 2), one(zero=zero, **DP2), dgx, Stack(), NOTHING_HIDDEN, NONE_BLOCKED))
    assert got == pytest.approx(expected, rel=1e-12)


def test_torchtitans_zero2_gathers_the_weights_for_every_micro_batch(dgx: Cluster) -> None:
    # FSDP2 with reshard_after_forward False frees the gathered weights after each backward
    # (reshard_after_backward, default True), so each micro-batch's forward gathers them again:
    # 2 x (0.20001 + 0.40001) reduce-scatters + 2 x (0.10001 + 0.20001) gathers = 1.80008
    params = _params(1e9, 2e9, 2)
    titan = one(zero=2, framework="torchtitan", **DP2)
    assert _f(dp_exposed_s(params, titan, dgx, Stack(), NOTHING_HIDDEN, NONE_BLOCKED)) == pytest.approx(1.80008)
    # with PP, PyTorch's pipelining keeps them gathered and the gradients whole to the step's end
    # (pp_defers_grad_sync): one reduce-scatter and one gather, 0.60002 + 0.30002
    piped = one(zero=2, framework="torchtitan", pp=2, **DP2)
    assert _f(dp_exposed_s(params, piped, dgx, Stack(), NOTHING_HIDDEN, NONE_BLOCKED)) == pytest.approx(0.90004)


def test_dp_traffic_hides_under_the_backward(dgx: Cluster) -> None:
    # ZeRO-0: 1.20004 s of all-reduce; dp_overlap 0.5 of a 2 s backward hides 1 s of it
    params, lay = _params(1e9, 2e9, 2), one(zero=0, **DP2)
    assert _f(dp_exposed_s(params, lay, dgx, Stack(), (_a(1.0), _a(2.0)), NONE_BLOCKED)) == pytest.approx(
        0.20004, rel=1e-9
    )
    # unless the stack does not overlap (Megatron-LM 2021-22 "local" DDP)
    assert _f(
        dp_exposed_s(params, lay, dgx, Stack(dp_overlap=False), (_a(1.0), _a(2.0)), NONE_BLOCKED)
    ) == pytest.approx(1.20004)
    # no data parallelism: nothing to reduce
    assert _f(dp_exposed_s(params, one(tp=8, zero=0), dgx, Stack(), NOTHING_HIDDEN, NONE_BLOCKED)) == 0.0


def test_overlap_windows_split_the_slot_one_to_two() -> None:
    # the backward does twice the forward's FLOPs (Narayanan et al. 2021 Sec 5.1)
    fwd, bwd = overlap_windows(np.array([3.0, 0.3]))
    assert list(fwd) == pytest.approx([1.0, 0.1])
    assert list(bwd) == pytest.approx([2.0, 0.2])


@pytest.mark.parametrize(
    ("zero", "expected"),
    [
        # a dense model's stage of 1e9 parameters in 32 layers, DP2 over the network, 1 micro-batch:
        # ZeRO-0: one all-reduce of 4e9 bytes, 2e-5 + 0.4
        (0, 0.40002),
        # ZeRO-3: 32 gathers of 2e9/32 bytes forward and again backward, 32 * (1e-5 + 3.125e-3),
        # and one reduce-scatter 1e-5 + 0.2: 2 * 0.10032 + 0.20001
        (3, 0.40065),
    ],
)
def test_dense_models_run_no_expert_collectives(dgx: Cluster, zero: int, expected: float) -> None:
    lay = one(tp=8, dp=2, micro_batch=1, global_batch=2, zero=zero)
    got = _f(dp_exposed_s(_params(1e9, 0.0, 32), lay, dgx, Stack(), NOTHING_HIDDEN, NONE_BLOCKED))
    assert got == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    ("framework", "zero", "offload", "expected"),
    [
        # a dense stage of 1e9 parameters in 32 layers, DP2 over the network, 1 micro-batch; windows
        # 1 s and 2 s, of which dp_overlap 0.5 hides 0.5 s and 1 s. Per layer: gather 1e-5 +
        # (1/2) 2e9/32 / 1e10 = 3.135e-3 s, reduce-scatter of fp32 grads 1e-5 + (1/2) 4e9/32 / 1e10
        # = 6.26e-3 s. The forward's 32 gathers (0.10032 s) hide under 0.5 s, the backward's gathers
        # and the reduce-scatter (0.10032 + 0.20001 s) under 1 s: nothing exposed.
        (Framework.DEEPSPEED, 3, Offload.NONE, 0.0),
        (Framework.MEGATRON, 3, Offload.OPTIMIZER, 0.0),
        # ZeRO-2's reduce-scatter is not the stage-3 path read for the host wait: still hidden
        (Framework.DEEPSPEED, 2, Offload.OPTIMIZER, 0.0),
        # DeepSpeed ZeRO-3 offloading the optimizer waits for every layer's reduce-scatter on the
        # host: the gathers still hide, the 32 reduce-scatters do not: 32 x 6.26e-3 = 0.20032 s
        (Framework.DEEPSPEED, 3, Offload.OPTIMIZER, 0.20032),
        (Framework.DEEPSPEED, 3, Offload.ALL, 0.20032),
    ],
)
@pytest.mark.parametrize("micro_batches", [1, 2])
def test_offloaded_zero3_reduce_scatter_is_exposed(
    dgx: Cluster, framework: Framework, zero: int, offload: Offload, expected: float, micro_batches: int
) -> None:
    # only the step's last micro-batch waits (the accumulation boundary): the earlier one's
    # reduce-scatter hides as without offload, so two micro-batches expose what one does
    lay = one(tp=8, dp=2, micro_batch=1, global_batch=2 * micro_batches, zero=zero, framework=framework,
              offload=offload)  # fmt: skip
    got = _f(dp_exposed_s(_params(1e9, 0.0, 32), lay, dgx, Stack(), (_a(1.0), _a(2.0)), NONE_BLOCKED))
    assert got == pytest.approx(expected, rel=1e-12, abs=1e-15)


@given(
    st.lists(st.tuples(st.integers(1, 70_000), st.integers(1, 70_000)), min_size=1, max_size=60),
    st.integers(1, 300),
)
def test_distinct_pairs_match_a_sort(pairs: list[tuple[int, int]], repeat: int) -> None:
    # The count-based path (small codes) and the sort-based one both return each row's pair.
    size = np.array([p[0] for p in pairs] * repeat, dtype=np.int64)
    stride = np.array([p[1] for p in pairs] * repeat, dtype=np.int64)
    unique_size, unique_stride, inverse = _distinct_pairs(size, stride)
    assert (unique_size[inverse] == size).all() and (unique_stride[inverse] == stride).all()
    assert len(unique_size) == len(set(pairs))


def _blocked(h: int, framework: Framework, limit: float, zero: int = 3, tp: int = 1) -> tuple[float, float]:
    lay = one(tp=tp, dp=1024 // tp, micro_batch=8, global_batch=8192, zero=zero, framework=framework)
    fwd, bwd = live_blocked_numel(gpt_spec(h=h, layers=4, heads=h // 256), lay, Stack(zero3_max_live_params=limit))
    return _f(fwd), _f(bwd)


def test_live_limit_blocks_the_2t_runs_gathers_by_hand() -> None:
    # The 2T Azure run (h 32768, 4h MLP, TP 1) at the recipes' 3e9: qkv 3h^2 = 3.22e9, proj
    # h^2 = 1.07e9, up and down 4h^2 = 4.29e9. Forward qkv, proj, up, down: after qkv (full) proj
    # waits, after up down waits, after down the next layer's qkv waits: h^2 + 4h^2 + 3h^2 = 8h^2.
    # Backward down, up, proj, qkv: after down up waits, after up proj waits, proj (1.07e9) lets qkv
    # be prefetched, after qkv the previous layer's down waits: 4h^2 + h^2 + 4h^2 = 9h^2.
    h2 = 32768.0**2
    assert _blocked(32768, Framework.DEEPSPEED, 3e9) == (8 * h2, 9 * h2)
    # the 175B run (h 12288): its largest weight 4h^2 = 6.04e8 is under 3e9 (and under 1e9)
    assert _blocked(12288, Framework.DEEPSPEED, 3e9) == (0.0, 0.0)
    assert _blocked(12288, Framework.DEEPSPEED, 1e9) == (0.0, 0.0)
    # the 1T run (h 25600): 4h^2 = 2.62e9 is under 3e9; at DeepSpeed's default 1e9 qkv (1.97e9) and
    # the MLP's (2.62e9) are full and proj (6.6e8) is not: the same pattern as the 2T at 3e9
    assert _blocked(25600, Framework.DEEPSPEED, 3e9) == (0.0, 0.0)
    assert _blocked(25600, Framework.DEEPSPEED, 1e9) == (8 * 25600.0**2, 9 * 25600.0**2)
    # each GPU gathers its TP shard: at TP 2 the 2T's qkv (1.61e9) and MLP (2.15e9) shards are under 3e9
    assert _blocked(32768, Framework.DEEPSPEED, 3e9, tp=2) == (0.0, 0.0)


@pytest.mark.parametrize("framework", [Framework.MEGATRON, Framework.TORCHTITAN])
def test_live_limit_is_deepspeeds_zero3_only(framework: Framework) -> None:
    # FSDP and Megatron's distributed optimizer have no such limit, and below ZeRO-3 nothing is gathered per layer
    assert _blocked(32768, framework, 1.0) == (0.0, 0.0)
    assert _blocked(32768, Framework.DEEPSPEED, 1.0, zero=2) == (0.0, 0.0)


def test_blocked_gathers_are_exposed_whole(dgx: Cluster) -> None:
    # The stage of test_offloaded_zero3_reduce_scatter_is_exposed (1e9 parameters in 32 layers, DP2
    # over the network, 1 micro-batch, windows 1 s and 2 s of which 0.5 s and 1 s hide): everything
    # hid. Half of each layer's forward gather (1.5625e7 parameters) waits in line: 32 x (1e-5 +
    # (1/2) 2 x 1.5625e7 / 1e10) = 0.05032 s exposed, the other half (0.05 s) still hides.
    lay = one(tp=8, dp=2, micro_batch=1, global_batch=2, zero=3, framework=Framework.DEEPSPEED)
    half = _a(1e9 / 32 / 2)
    windows = (_a(1.0), _a(2.0))
    got = _f(dp_exposed_s(_params(1e9, 0.0, 32), lay, dgx, Stack(), windows, (half, _a(0.0))))
    assert got == pytest.approx(0.05032, rel=1e-12)
    # the backward's re-gather the same: twice that
    got = _f(dp_exposed_s(_params(1e9, 0.0, 32), lay, dgx, Stack(), windows, (half, half)))
    assert got == pytest.approx(2 * 0.05032, rel=1e-12)


@settings(max_examples=25, deadline=None)
@given(st.floats(1e6, 1e10), st.floats(1.0, 100.0), st.sampled_from([1, 2, 4]))
def test_a_larger_live_limit_never_makes_a_step_slower(limit: float, factor: float, tp: int) -> None:
    from paraplan.hardware_specs.loader import load_cluster

    cluster = load_cluster("a100-80g")
    model = gpt_spec(h=16384, layers=8, heads=128, seq=1024)
    lay = one(tp=tp, dp=64 // tp, micro_batch=1, global_batch=128, zero=3, framework=Framework.DEEPSPEED,
              recompute="full")  # fmt: skip
    steps = [
        _f(evaluate(model, cluster, lay, Stack(zero3_max_live_params=x)).step_time_s) for x in (limit, limit * factor)
    ]
    assert steps[1] <= steps[0]

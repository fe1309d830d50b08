"""What each parallel dimension sends, and how much of it the step waits for.

Per micro-batch of T = b*s/CP tokens on a stage of l layers (Megatron-LM's schedule):
  TP  each layer all-reduces its attention and MLP outputs (T*h*2 bytes) in the forward and
      their gradients in the backward: 4 all-reduces (Shoeybi et al. 2019, Fig. 4); with
      sequence parallelism each becomes a reduce-scatter + all-gather of the same bytes
      (Korthikanti et al. 2022, Sec 4.2.2); a hybrid model's layer is one block (Mamba-2 mixer,
      attention or MLP), half of these (`linear_blocks`). Full recompute repeats the forward's 2. The forward
      collectives sit on the critical path. In the backward, the input-gradient collective of
      each column-parallel linear (QKV and the MLP's first projection) runs while that linear's
      weight-gradient GEMM computes (Megatron's `LinearWithGradAccumulationAndAsyncCommunication`,
      on by default; `Stack.tp_overlap`): only what outlasts those GEMMs is exposed.
      Megatron-DeepSpeed turns that asynchronous all-reduce off under --deepspeed
      (megatron/arguments.py at 6acc370a: "DeepSpeed seems to be incompatible with
      async_tensor_model_parallel_allreduce"), so without sequence parallelism its backward
      all-reduces wait (`FrameworkSpec.tp_allreduce_overlap`); its sequence-parallel backward
      still reduce-scatters under the weight-gradient GEMM (core/tensor_parallel/layers.py). With
      sequence parallelism Megatron saves only the local shard of a column-parallel linear's
      input and all-gathers it again in the backward for the weight gradient, under the
      input-gradient GEMM (megatron/core/tensor_parallel/layers.py `backward` at core_v0.6.0 and
      d98e8a64; Transformer Engine's LayerNormLinear/LayerNormMLP `backward` do the same,
      `gather_along_first_dim(ln_out, ..., async_op=True)`), and the row-parallel linears'
      output gradients are all-gathered before their GEMMs start: 6 collectives in the backward,
      2 of them exposed whatever the GEMMs (`FrameworkSpec.sp_regathers_input`).
      With Transformer Engine's userbuffers (`Stack.tp_comm_overlap`, Megatron only) every one of
      them runs split into chunks beside its own linear's GEMM, forward too (`chunked_fwd_s`,
      `chunked_bwd_s`, `split_gemm_extra_s`).
      An MoE layer under Megatron-LM (which runs MoE with TP > 1 only with sequence parallelism,
      megatron/core/transformer/moe/moe_layer.py `MoELayer.forward` at d98e8a64) has no
      column- and row-parallel MLP of its own: the routed experts' grouped linears leave their
      TP communication to the token dispatcher (transformer_engine.py `TEGroupedLinear`:
      explicit_expert_comm, parallel_mode None), which all-gathers the tokens over the expert-TP
      group before the experts and reduce-scatters their output after (token_dispatcher.py:
      `MoEAllGatherTokenDispatcher`, Megatron's default, gathers the T*ETP/TP tokens of its
      expert-TP group at EP 1; `MoEAlltoAllTokenDispatcher`, which paraplan assumes at EP > 1,
      gathers the T*k*ETP/TP routed copies it received over expert TP, `dispatch_postprocess` /
      `combine_preprocess`). These are plain autograd collectives
      (tensor_parallel/mappings.py `_GatherFromSequenceParallelRegion.backward` reduce-scatters,
      synchronously): in the backward the output gradient is all-gathered before the experts'
      GEMMs, and the input gradient reduce-scattered after both of the first expert GEMM's
      backward GEMMs, so all four are exposed and the routed experts' GEMMs are no window.
      Shared experts are a separate TP MLP over the dense TP group (shared_experts.py
      `SharedExpertMLP(MLP)`, tp_group pg_collection.tp; moe_shared_expert_overlap off by
      default) with a dense MLP's collectives. Left out: the T x E router probabilities and
      routing map the allgather dispatcher gathers too (a few E/h of the tokens' bytes, under 1%
      for Mixtral) and the alltoall dispatcher's probability per routed copy (a few bytes against
      2h). Other frameworks' MoE layers are priced like a dense MLP's (not checked against
      their sources).
  CP  ring (Liu et al. 2023; Megatron --cp-comm-type p2p): CP-1 steps that pass the local K and
      V chunk (2*T*g*d/TP*2 bytes; a heads instead of g when repeated first, `Stack.kv_repeated`) in the forward, K, V, dK, dV in the backward; each overlaps
      the attention compute of the same layer, so only the excess is exposed. Each step is a
      send to the next rank and a receive from the previous one (Transformer Engine's
      AttnFuncWithCPAndKVP2P: batch_isend_irecv), all pairs at once, so a step lasts as long as
      its slowest pair: where the ring spans nodes, the pair across the boundary, which moves
      the whole chunk through one GPU's NIC however many members share a node (`ring_pair_links`:
      the k x NIC bus bandwidth of NCCL's collectives runs one ring channel per NIC, a single
      send/recv pair has one). All-gather (Llama 3,
      Dubey et al. 2024 Sec 3.3.2; Megatron --cp-comm-type allgather): K and V all-gathered
      before attention in the forward, their gradients reduce-scattered in the backward, not
      overlapped. PyTorch's context_parallel (torchtitan, `frameworks.cp_sdpa_merge`) moves more
      and, compiled, overlaps none of it (`torch_cp_per_layer_s`).
  EP  each MoE layer dispatches and combines tokens with an all-to-all (T*k*h*2 bytes; per TP
      rank with sequence parallelism) in the forward and again in the backward (Lepikhin et al.
      2020, GShard). Exposed.
  PP  each micro-batch crosses each of a GPU's v chunk boundaries twice (activation forward,
      gradient backward), T*h*2/TP bytes each (Megatron's scatter/gather optimisation,
      Narayanan et al. 2021 Sec 4.1). Blocking in the 1F1B schedule: exposed. The interleaved
      schedule overlaps them with the next chunk's compute (`Stack.p2p_overlap`): exposed only
      beyond that compute.
  DP  once per step the gradients are all-reduced (ZeRO 0) or reduce-scattered with the
      weights all-gathered after the optimizer step (ZeRO 1, Megatron's distributed
      optimizer); ZeRO 2 and 3 reduce-scatter after every micro-batch's backward (DeepSpeed,
      FSDP), ZeRO 3 also all-gathers every layer's weights, one collective per layer (FSDP units,
      DeepSpeed's per-module prefetch), in the forward and backward of every micro-batch.
      Reductions overlap a micro-batch's backward and gathers its forward, up to
      `efficiency.dp_overlap` of their wall time (`overlap_windows`); only the rest is exposed.
      DeepSpeed's ZeRO-3 with the optimizer offloaded waits on the host for each layer's
      reduce-scatter of a step's last micro-batch (`frameworks.OFFLOAD_BLOCKS_GRAD_REDUCE`):
      exposed whole.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from paraplan.cost_models.candidates import FloatArray, Layouts
from paraplan.cost_models.comm import (
    a2a_legs,
    all_gather_s,
    all_reduce_s,
    all_to_all_s,
    links,
    p2p_s,
    pair_links,
    reduce_scatter_s,
    ring_pair_links,
)
from paraplan.cost_models.compute import MicroBatchTimes, gemm_s, matmul_rate
from paraplan.cost_models.frameworks import (
    a2a_overlap_unsupported,
    cp_sdpa_merge,
    deferred_grad_sync,
    offload_blocks_grad_reduce,
    pp_partition_gathers,
    pp_serial_transfers,
    sharded_collectives_per_step,
    sp_regathers_input,
    tp_allreduce_overlap,
    zero3_live_limited,
)
from paraplan.cost_models.layout import CpComm, Framework
from paraplan.cost_models.memory import StageParams, kv_repeats, selective_modules_on
from paraplan.cost_models.models import ModelSpec
from paraplan.cost_models.pipeline import combined_1f1b_share
from paraplan.cost_models.stack import BF16_BYTES, Stack
from paraplan.hardware_specs.schema import Cluster
from paraplan.hardware_specs.topology import members_on_node

ACTIVATION_BYTES = float(BF16_BYTES)
# chunks of TE's pipelined GEMM + reduce-scatter: `num_splits` 4 in `get_default_config` of
# transformer_engine/pytorch/module/base.py `initialize_ub` (v1.8 to v2.8)
UB_SPLITS = 4.0


@dataclass(frozen=True)
class MicroBatchComm:
    """Exposed communication per micro-batch on one GPU: per layer (TP, CP, EP) and per stage
    boundary crossing (PP)."""

    tp_layer_s: FloatArray
    cp_layer_s: FloatArray
    ep_layer_s: FloatArray
    ep_hidden_s: FloatArray  # of ep_layer_s, what the combined 1F1B hides in the steady state (`a2a_hidden_s`)
    pp_s: FloatArray


def _forward_passes(model: ModelSpec, lay: Layouts) -> FloatArray:
    """Forward passes per micro-batch and layer: 2 with full recompute (1 + the share of layers
    recomputed, with block recompute)."""
    return np.asarray(1.0 + lay.full_recompute_share(model.num_layers))


def linear_blocks(model: ModelSpec, dispatcher: bool) -> tuple[tuple[float, float, float], ...]:
    """The column- then row-parallel blocks of a mean layer, as (blocks per layer, the share of the
    layer's GEMM FLOPs in the block's column-parallel linear, the share in its row-parallel
    linear). That column-parallel linear's weight-gradient GEMM, and its input-gradient GEMM, are
    the only window for the block's backward TP collectives: the next operation waits on them
    (`handle.wait()` in the backward of Megatron's LinearWithGradAccumulationAndAsyncCommunication
    and Transformer Engine's LayerNormLinear), so one linear's spare GEMM time cannot cover
    another's collective. The blocks: attention (QKV, then the output projection) and the MLP (its
    first, then its second projection); where Megatron's token dispatcher runs the MoE layers
    (`dispatcher`) the MLP blocks are a dense layer's and the shared experts' (weighted by the
    share of each kind of layer, `moe_share`), and the routed experts' projections are in the
    denominator only: their collectives are the dispatcher's plain autograd ones (see the module
    docstring). Otherwise an MoE layer's MLP is one block over all its experts.
    A hybrid model's layer is one block (`ModelSpec.layer_pattern`): attention, a Mamba-2 mixer
    (in_proj column-, out_proj row-parallel: Megatron's MambaMixer, the same collectives as an
    attention block) or an MLP, each counted on its share of the layers."""
    up = 2.0 if model.mlp == "gated" else 1.0
    share = model.moe_share
    dense = float(model.dense_ffn_hidden_size or model.ffn_hidden_size)
    shared = float(model.num_shared_experts * (model.shared_expert_ffn or model.ffn_hidden_size))
    routed = float(model.experts_top_k * model.ffn_hidden_size) if model.is_moe else 0.0
    qkv = model.q_dim + 2.0 * model.kv_dim
    mlp_share = model.dense_mlp_share
    mlp_down = mlp_share * dense + share * (shared + routed)
    attn, mamba = model.attention_share, model.mamba_share
    mamba_in, mamba_out = float(model.mamba_in_width), float(model.mamba_inner)
    total = attn * qkv + up * mlp_down + attn * model.q_dim + mlp_down + mamba * (mamba_in + mamba_out)
    attention = (attn, qkv / total, model.q_dim / total)
    mixers = [attention, (mamba, mamba_in / total, mamba_out / total)]
    if not dispatcher:
        # MLP blocks per layer: 1 in a transformer decoder, whose per-block widths are the mean's
        # (none in a pure Mamba-2 model)
        mlp_blocks = mlp_share + share if model.is_hybrid else 1.0
        blocks = mixers if mlp_blocks == 0.0 else [*mixers, (mlp_blocks, up * mlp_down / mlp_blocks / total,
                                                             mlp_down / mlp_blocks / total)]  # fmt: skip
        return tuple(block for block in blocks if block[0] > 0.0)
    blocks = [*mixers, (mlp_share, up * dense / total, dense / total)]
    if model.num_shared_experts:
        blocks.append((share, up * shared / total, shared / total))
    return tuple(block for block in blocks if block[0] > 0.0)


def column_parallel_blocks(model: ModelSpec, dispatcher: bool) -> tuple[tuple[float, float], ...]:
    """(blocks per layer, column-parallel share) of each of `linear_blocks`."""
    return tuple((count, column) for count, column, _ in linear_blocks(model, dispatcher))


def moe_dispatch_tp_bytes(model: ModelSpec, lay: Layouts) -> FloatArray:
    """Bytes of the buffer Megatron's token dispatcher all-gathers over expert TP (and
    reduce-scatters back) per MoE layer and micro-batch: the T*ETP/TP tokens of the expert-TP
    group at EP 1 (allgather dispatcher), the T*k*ETP/TP routed copies at EP > 1 (alltoall
    dispatcher), h wide in bf16 (see the module docstring). The same rows as the expert GEMMs'
    and the permutation's (`compute.moe_permute_bytes`)."""
    gathered = lay.tokens_per_micro_batch * lay.etp / lay.tp
    rows = np.where(lay.ep > 1, model.experts_top_k * gathered, gathered)
    return np.asarray(rows * model.hidden_size * ACTIVATION_BYTES)


def tp_per_layer_s(
    model: ModelSpec, lay: Layouts, cluster: Cluster, stack: Stack, layer_gemm_fwd_s: FloatArray
) -> FloatArray:
    """Exposed TP time per layer and micro-batch (see the module docstring)."""
    bw, lat = links(cluster, lay.tp, np.ones_like(lay.tp))
    nbytes = lay.tokens_per_micro_batch * model.hidden_size * ACTIVATION_BYTES
    scatter = reduce_scatter_s(nbytes, lay.tp, bw, lat)
    gather = all_gather_s(nbytes, lay.tp, bw, lat)
    all_reduce = all_reduce_s(nbytes, lay.tp, bw, lat)
    sp = lay.seq_parallel_active
    # Blocks of column- then row-parallel linears per mean layer (`column_parallel_blocks`): in a
    # Megatron MoE layer the routed experts' collectives are the dispatcher's, over expert TP
    # (`moe_dispatch_tp_bytes`), all exposed.
    dispatcher = np.asarray(sp & (lay.framework == Framework.MEGATRON)) if model.is_moe else np.zeros(len(lay), bool)
    by_kind = {kind: column_parallel_blocks(model, kind) for kind in (False, True)}
    blocks = np.where(dispatcher, sum(n for n, _ in by_kind[True]), sum(n for n, _ in by_kind[False]))
    dispatch = np.zeros(len(lay))
    if model.is_moe:
        e_bytes = moe_dispatch_tp_bytes(model, lay)
        e_bw, e_lat = links(cluster, lay.etp, np.ones_like(lay.etp))
        e_pair = reduce_scatter_s(e_bytes, lay.etp, e_bw, e_lat) + all_gather_s(e_bytes, lay.etp, e_bw, e_lat)
        dispatch = np.where(dispatcher, model.moe_share * e_pair, 0.0)
    passes = _forward_passes(model, lay)
    forward = passes * (blocks * np.where(sp, scatter + gather, all_reduce) + dispatch)
    # Each column-parallel linear's weight-gradient GEMM, and its input-gradient GEMM, last as
    # long as its forward GEMM: its block's window.
    gemm = layer_gemm_fwd_s if stack.tp_overlap else np.zeros_like(layer_gemm_fwd_s)

    def exposed(comm: FloatArray, window: FloatArray = gemm) -> FloatArray:
        """A collective per block, each hidden only under its own block's window."""

        def over(kind: bool) -> FloatArray:
            return np.asarray(sum(n * np.maximum(comm - part * window, 0.0) for n, part in by_kind[kind]))

        return _by_dispatcher(model, dispatcher, over)

    plain_bwd = exposed(all_reduce, gemm * tp_allreduce_overlap(lay))
    # Sequence parallel backward, Megatron-style (`FrameworkSpec.sp_regathers_input`): the
    # row-parallel linears' output gradients are all-gathered before their GEMMs can start
    # (exposed); each column-parallel linear all-gathers its input again (only the local shard
    # was saved) under its input-gradient GEMM, and reduce-scatters its input gradient under its
    # weight-gradient GEMM. Otherwise (torchtitan: autograd keeps the gathered input; async TP
    # fuses every collective into a neighbouring matmul, not necessarily its own linear's) the
    # four share one window, both linears' GEMMs.
    megatron_bwd = blocks * gather + exposed(scatter) + exposed(gather) + dispatch
    window = sum(part for _, part in by_kind[False]) * gemm
    fused_bwd = np.maximum(2.0 * (scatter + gather) - window, 0.0)
    sp_bwd = np.where(sp_regathers_input(lay) > 0, megatron_bwd, fused_bwd)
    total = forward + np.where(sp, sp_bwd, plain_bwd)
    if stack.tp_comm_overlap:
        split_fwd, split_bwd = split_gemm_extra_s(model, lay, cluster)
        fwd = chunked_fwd_s(model, lay, layer_gemm_fwd_s, scatter, gather, dispatcher) + split_fwd + dispatch
        bwd = chunked_bwd_s(model, lay, layer_gemm_fwd_s, scatter, gather, dispatcher) + split_bwd + dispatch
        chunked = passes * fwd + bwd
        # Transformer Engine's userbuffers, which only Megatron-LM turns on (--tp-comm-overlap),
        # with sequence parallelism (asserted in its arguments.py)
        ub = sp & (lay.tp > 1) & (lay.framework == Framework.MEGATRON)
        total = np.where(ub, chunked, total)
    return np.asarray(total)


def _by_dispatcher(model: ModelSpec, dispatcher: FloatArray, over: Callable[[bool], FloatArray]) -> FloatArray:
    """`over(True)` where Megatron's token dispatcher runs the MoE layers' TP (`dispatcher`),
    `over(False)` elsewhere; a dense model has no dispatcher, so `over(False)` alone."""
    plain = over(False)
    return np.asarray(np.where(dispatcher, over(True), plain)) if model.is_moe else plain


def _ring_s(comm: FloatArray, gemm: FloatArray, tp: FloatArray) -> FloatArray:
    """Exposed time of a collective split into TP chunks that a GEMM consumes (all-gather) or
    produces (reduce-scatter) one chunk at a time: TP - 1 transfers, each under one of the GEMM's
    TP chunks (TE's ring exchange, `CommOverlapP2PBase::split_overlap_ag` / `split_overlap_rs`;
    torch's `_pipelined_all_gather_and_consume` / `_pipelined_produce_and_all2all`); only what a
    transfer outlasts its chunk's GEMM is exposed."""
    return np.asarray(np.maximum(comm - (tp - 1.0) / tp * gemm, 0.0))


def _pipelined_s(comm: FloatArray, gemm: FloatArray) -> FloatArray:
    """Exposed time of TE's pipelined GEMM + reduce-scatter (`CommOverlapBase::split_overlap_rs`):
    the GEMM runs in UB_SPLITS chunks, each chunk's output reduce-scattered under the next chunk's
    GEMM; the last chunk's reduce-scatter has nothing left to hide under."""
    n = UB_SPLITS
    return np.asarray(comm / n + (n - 1.0) * np.maximum((comm - gemm) / n, 0.0))


def split_gemm_extra_s(model: ModelSpec, lay: Layouts, cluster: Cluster) -> tuple[FloatArray, FloatArray]:
    """What splitting the TP GEMMs into chunks adds to one layer's forward and backward GEMM time
    with chunked overlap (`Stack.tp_comm_overlap`): a GEMM of m/c rows runs c times, each at the
    smaller GEMM's efficiency and with its own launch (`compute.gemm_s`). TE's default methods
    (see `chunked_fwd_s`, `chunked_bwd_s`) split the column-parallel linears' forward GEMMs and
    the row-parallel linears' input-gradient GEMMs TP ways (ring exchange), the row-parallel
    linears' forward GEMMs UB_SPLITS ways (pipeline); the bulk overlaps run whole GEMMs. The
    attention's linears and a dense layer's MLP (the routed experts' grouped GEMMs are not split)."""
    tp = lay.floats("tp")
    h = float(model.hidden_size)
    rows = lay.tokens_per_micro_batch
    peak = matmul_rate(cluster, lay)
    ones = np.ones_like(rows)
    up = 2.0 if model.mlp == "gated" else 1.0
    out_width = float(model.num_heads * (model.v_head_dim or model.head_dim))
    attention_in = (model.attention_matmul_params - out_width * h) / h
    dense = float(model.dense_ffn_hidden_size or model.ffn_hidden_size)
    mlp = model.dense_mlp_share
    attn, mamba = model.attention_share, model.mamba_share
    mamba_in, mamba_out = float(model.mamba_in_width), float(model.mamba_inner)

    def column(m: FloatArray) -> FloatArray:
        mixer = attn * gemm_s(m, attention_in / tp, h * ones, peak, cluster)
        if mamba:
            mixer = mixer + mamba * gemm_s(m, mamba_in / tp, h * ones, peak, cluster)
        return np.asarray(mixer + mlp * gemm_s(m, up * dense / tp, h * ones, peak, cluster))

    def row(m: FloatArray) -> FloatArray:
        mixer = attn * gemm_s(m, h * ones, out_width / tp, peak, cluster)
        if mamba:
            mixer = mixer + mamba * gemm_s(m, h * ones, mamba_out / tp, peak, cluster)
        return np.asarray(mixer + mlp * gemm_s(m, h * ones, dense / tp, peak, cluster))

    def extra(gemm: Callable[[FloatArray], FloatArray], chunks: FloatArray | float) -> FloatArray:
        return np.asarray(chunks * gemm(rows / chunks) - gemm(rows))

    return np.asarray(extra(column, tp) + extra(row, UB_SPLITS)), extra(row, tp)


def chunked_fwd_s(model: ModelSpec, lay: Layouts, gemm: FloatArray, scatter: FloatArray, gather: FloatArray,
                  dispatcher: FloatArray) -> FloatArray:  # fmt: skip
    """Exposed forward TP time of one layer with chunked overlap (`Stack.tp_comm_overlap`), TE's
    default methods (transformer_engine/pytorch/module/base.py `initialize_ub`): ring exchange for
    the all-gather before each column-parallel linear (qkv_fprop, fc1_fprop), pipelined
    reduce-scatter after each row-parallel one (proj_fprop, fc2_fprop)."""
    tp = lay.floats("tp")

    def over(dispatch: bool) -> FloatArray:
        return np.asarray(sum(n * (_ring_s(gather, col * gemm, tp) + _pipelined_s(scatter, row * gemm))
                              for n, col, row in linear_blocks(model, dispatch)))  # fmt: skip

    return _by_dispatcher(model, dispatcher, over)


def chunked_bwd_s(model: ModelSpec, lay: Layouts, gemm: FloatArray, scatter: FloatArray, gather: FloatArray,
                  dispatcher: FloatArray) -> FloatArray:  # fmt: skip
    """Exposed backward TP time of one layer with chunked overlap: each row-parallel linear's
    output gradient is all-gathered by ring exchange under its input-gradient GEMM (proj_dgrad,
    fc2_dgrad); each column-parallel linear all-gathers its saved input shard under its
    input-gradient GEMM and reduce-scatters its input gradient under its weight-gradient GEMM,
    each collective whole beside one whole GEMM ("bulk": qkv_dgrad/fc1_dgrad, qkv_wgrad/fc1_wgrad).
    Each backward GEMM lasts as long as its forward GEMM."""
    tp = lay.floats("tp")

    def over(dispatch: bool) -> FloatArray:
        return np.asarray(sum(n * (_ring_s(gather, row * gemm, tp) + np.maximum(gather - col * gemm, 0.0)
                                   + np.maximum(scatter - col * gemm, 0.0))
                              for n, col, row in linear_blocks(model, dispatch)))  # fmt: skip

    return _by_dispatcher(model, dispatcher, over)


def cp_per_layer_s(model: ModelSpec, lay: Layouts, cluster: Cluster, stack: Stack,
                   times: MicroBatchTimes) -> FloatArray:  # fmt: skip
    bw, lat = links(cluster, lay.cp, lay.tp)
    # K and V of the local tokens, of every query head when repeated first (Stack.kv_repeated)
    chunk = 2.0 * lay.tokens_per_micro_batch * model.kv_dim * kv_repeats(model, stack) / lay.tp * ACTIVATION_BYTES
    steps = lay.cp - 1.0
    pair_bw, _ = ring_pair_links(cluster, lay.cp, lay.tp)
    ring_fwd = np.maximum(steps * p2p_s(chunk, pair_bw, lat) - times.attention_fwd_s, 0.0)
    ring_bwd = np.maximum(steps * p2p_s(2.0 * chunk, pair_bw, lat) - times.attention_bwd_s, 0.0)
    gather_fwd = all_gather_s(lay.cp * chunk, lay.cp, bw, lat)
    gather_bwd = reduce_scatter_s(lay.cp * chunk, lay.cp, bw, lat)
    ring = _forward_passes(model, lay) * ring_fwd + ring_bwd
    gathered = _forward_passes(model, lay) * gather_fwd + gather_bwd
    per_layer = np.where(lay.cp_comm == CpComm.ALLGATHER, gathered, ring)
    torch_cp = cp_sdpa_merge(lay)
    if torch_cp.any():
        per_layer = np.where(torch_cp, torch_cp_per_layer_s(model, lay, stack, times, gather_fwd, chunk, pair_bw, lat),
                             per_layer)  # fmt: skip
    return np.asarray(np.where(lay.cp > 1, per_layer, 0.0))


def torch_cp_per_layer_s(model: ModelSpec, lay: Layouts, stack: Stack, times: MicroBatchTimes,
                         gather_s: FloatArray, chunk: FloatArray, pair_bw: FloatArray, lat: FloatArray) -> FloatArray:  # fmt: skip
    """Exposed time of PyTorch's all-gather context parallelism for one layer and micro-batch
    (`frameworks.cp_sdpa_merge`): torch/distributed/tensor/experimental/_attention.py, read at
    pytorch/pytorch 0123248a and in a late-2024 copy (the one with `_RotateMethod.PRE_ALL_GATHER`,
    the era of the torch 1963fc8 that torchtitan's December 2024 benchmarks ran): both run the
    loops below. `gather_s`: the all-gather of the CP local K/V chunks (`chunk` bytes each,
    bf16) over the CP group; (`pair_bw`, `lat`): a send to the next rank (`ring_pair_links`).

    Forward (`_templated_ring_attention`, every forward pass, so again under full recompute):
    `_AllGatherRotater.exchange_buffers` all-gathers K and V once, at the first of the CP steps.
    Backward (`_templated_ring_attention_backward`): the K/V rotater all-gathers them again, and
    each of the CP steps sends the running dK, dV, accumulated in fp32 (convert_to_f32, so 2 x
    `chunk` bytes), to the next rank (`dkv_rotater`, always `_RotateMethod.ALL_TO_ALL`:
    `ft_c.permute_tensor`, an all-to-all with one peer, point to point), the last one handing
    each chunk's gradient back to its owner.

    Compiled (`Stack.compiled`; torchtitan compiles each TransformerBlock with fullgraph=True,
    so the ring is traced into the block's graph): a traced functional collective is waited at
    once (`_maybe_wrap_tensor` in torch/distributed/_functional_collectives.py returns
    `wait_tensor(...)` when `_are_we_tracing()`), and Inductor moves no wait later unless
    `reorder_for_compute_comm_overlap` is set (torch/_inductor/config.py, False by default;
    torchtitan 9dec370 sets only `_micro_pipeline_tp`): every collective above is exposed.
    Eager, the asynchronous tensors are waited at first use: the all-gather runs under the first
    (diagonal) step's SDPA, each dK/dV send under the next step's SDPA backward, the last send
    after the loop exposed; a step's SDPA is 1/CP of the layer's attention (the load-balanced
    steps do equal FLOPs)."""
    cp = lay.floats("cp")
    send = p2p_s(2.0 * chunk, pair_bw, lat)
    fwd_window = times.attention_fwd_s / cp
    bwd_window = times.attention_bwd_s / cp
    eager_fwd = np.maximum(gather_s - fwd_window, 0.0)
    eager_bwd = np.maximum(gather_s - bwd_window, 0.0) + (cp - 1.0) * np.maximum(send - bwd_window, 0.0) + send
    fwd = gather_s if stack.compiled else eager_fwd
    bwd = gather_s + cp * send if stack.compiled else eager_bwd
    return np.asarray(_forward_passes(model, lay) * fwd + bwd)


def ep_per_layer_s(model: ModelSpec, lay: Layouts, cluster: Cluster, stack: Stack) -> FloatArray:
    """Expert-parallel dispatch and combine per mean layer: 2 exchanges per pass, BF16 tokens.

    The plain all-to-all (`Stack.ep_dispatcher` "alltoall") sends every routed copy, top-k per
    token, to its expert's rank: (n-1)/n of k copies, the cross-node share over the NICs
    (`hardware_specs.topology`). The flex dispatcher sends a token over the network once per
    other node that holds one of its experts and fans it out there over NVLink
    (`hierarchical_ep_s`)."""
    if not model.is_moe:
        return np.zeros(len(lay))
    tokens = np.where(lay.seq_parallel_active, lay.tokens_per_micro_batch / lay.tp, lay.tokens_per_micro_batch)
    # per mean layer, like the compute terms: the dense layers of an MoE model exchange nothing
    # Megatron's selective recompute of "moe" (Stack.recompute_modules) runs the whole MoE forward,
    # dispatch and combine included, again in the backward (moe_layer.py `moe_layer_recompute`)
    passes = _forward_passes(model, lay)
    if "moe" in stack.recompute_modules:
        passes = passes + np.where(selective_modules_on(lay), 1.0, 0.0)
    exchanges = 2.0 * (passes + 1.0) * model.moe_share
    if stack.hierarchical_ep:
        return np.asarray(exchanges * hierarchical_ep_s(model, lay, cluster, tokens))
    bw, lat = links(cluster, lay.ep, lay.etp, all_to_all=True)
    nbytes = tokens * model.experts_top_k * model.hidden_size * ACTIVATION_BYTES
    return np.asarray(exchanges * all_to_all_s(nbytes, lay.ep, bw, lat))


def remote_nodes_per_token(
    experts: int, top_k: int, nodes: FloatArray, groups: int = 1, group_top_k: int = 1
) -> FloatArray:
    """Expected number of OTHER nodes among a token's top-k distinct experts, the E experts spread
    evenly over `nodes` nodes (EP ranks hold contiguous experts, Megatron-LM's
    `local_expert_indices_offset = ep_rank * num_local_experts`, and sit on consecutive GPUs) and
    the k chosen uniformly (force-balanced routing): each other node is missed with probability
    C(E - E/N, k) / C(E, k), so (N - 1)(1 - C(E - E/N, k) / C(E, k)).

    Group-limited routing (`ModelSpec.expert_groups` G, `group_top_k` g; DeepSeek-V3 8 and 4):
    Megatron-LM's group_limited_topk (moe_utils.py at d98e8a64) picks for each token the g groups
    of E/G contiguous experts whose top k/g scores sum highest, then the top k experts of those
    groups. Under force-balanced routing (router.py: `moe_router_force_load_balancing` replaces the
    logits with normal noise, before the group selection) the g groups are a uniform g-subset, and
    each supplies k/g experts, uniform within it: a group chosen for its top k/g scores holds most
    of the k best (a simulation of that router, sigmoid scores of normal logits, 200,000 tokens,
    E = 256, k = 8: 3.96 of the 4 chosen groups used; remote nodes 2.345 at N = 4 against 2.357
    here and 2.711 without groups). A node is missed with probability E_S[prod_{s in S} q_s] =
    e_g(q_1..q_G) / C(G, g) (e_g the elementary symmetric polynomial), q_s = C(E/G - o_s, k/g) /
    C(E/G, k/g) for a group overlapping the node in o_s experts (1 for the others); the nodes'
    touch probabilities P_j sum to T, and a uniformly placed source node sees T (N - 1)/N others.
    With G = 1, g >= G, or k not a multiple of g (Megatron-LM requires it) no limit applies."""
    nodes = np.asarray(nodes, dtype=np.float64)
    limited = 1 < group_top_k < groups and top_k % group_top_k == 0 and experts % groups == 0
    out = np.zeros_like(nodes)
    for n in np.unique(nodes):
        out[nodes == n] = _grouped_remote_nodes(experts, top_k, float(n), groups, group_top_k) if limited else \
            _free_remote_nodes(experts, top_k, float(n))  # fmt: skip
    return out


def _free_remote_nodes(experts: int, top_k: int, n: float) -> float:
    missed = 1.0
    others = experts - experts / max(n, 1.0)
    for i in range(top_k):
        missed *= min(max((others - i) / (experts - i), 0.0), 1.0)
    return (n - 1.0) * (1.0 - missed)


def _grouped_remote_nodes(experts: int, top_k: int, n: float, groups: int, group_top_k: int) -> float:
    if n <= 1.0:
        return 0.0
    per_group, per_node, picks = experts // groups, experts / n, top_k // group_top_k
    touched = 0.0
    for j in range(int(n)):
        lo, hi = j * per_node, (j + 1) * per_node
        q = []
        for s in range(groups):
            overlap = round(max(0.0, min(hi, (s + 1) * per_group) - max(lo, s * per_group)))
            q.append(math.comb(per_group - overlap, picks) / math.comb(per_group, picks))
        # e_g(q_1..q_G): elementary symmetric polynomial by the usual recurrence
        e = [1.0] + [0.0] * group_top_k
        for qs in q:
            for c in range(group_top_k, 0, -1):
                e[c] += e[c - 1] * qs
        touched += 1.0 - e[group_top_k] / math.comb(groups, group_top_k)
    return touched * (n - 1.0) / n


def hierarchical_ep_s(model: ModelSpec, lay: Layouts, cluster: Cluster, tokens: FloatArray) -> FloatArray:
    """One flex-dispatcher exchange (DeepEP / HybridEP, see `Stack.ep_dispatcher`) on one GPU.

    A group of n ranks with m per node spans N = n/m nodes. Of a token's T = h x 2 bytes, the
    network leg carries `remote_nodes_per_token` copies over the GPU's NIC share; the NVLink leg
    carries the copies the node's GPUs take from one another, k (m-1)/m (each of the k routed
    copies lands on another GPU of its node than the one that received it with probability
    (m-1)/m). The legs are pipelined (DeepEP's forwarding warps), so the slower one sets the time.
    On one node (N = 1) this is the plain all-to-all's (n-1)/n k copies over NVLink."""
    n = lay.ep.astype(np.float64)
    m = members_on_node(lay.ep, lay.etp, cluster.gpus_per_node).astype(np.float64)
    nodes = np.ceil(n / m)
    nic, node = a2a_legs(cluster, lay.ep, lay.etp)
    _, lat = links(cluster, lay.ep, lay.etp, all_to_all=True)
    copy_bytes = tokens * model.hidden_size * ACTIVATION_BYTES
    k = float(model.experts_top_k)
    remote = remote_nodes_per_token(model.num_experts, model.experts_top_k, nodes, model.expert_groups,
                                    model.group_top_k)  # fmt: skip
    network = remote * copy_bytes / nic
    nvlink = k * (m - 1.0) / m * copy_bytes / node
    return np.asarray(np.where(n > 1, (n - 1.0) * lat + np.maximum(network, nvlink), 0.0))


def a2a_hidden_s(model: ModelSpec, lay: Layouts, stack: Stack, times: MicroBatchTimes,
                 ep_layer_s: FloatArray) -> FloatArray:  # fmt: skip
    """Per micro-batch and mean layer, the expert-parallel time that Megatron-LM's combined 1F1B
    (`Stack.moe_a2a_overlap`) hides: 0 where it is off or the layout cannot run it
    (`frameworks.a2a_overlap_unsupported`).

    Megatron-LM d98e8a64 megatron/core/models/common/model_chunk_schedule_plan.py
    `TransformerLayerSchedulePlan.run` runs layer i's forward of one micro-batch (F) with a layer's
    backward of another (B) as two chains of nodes, each chain ordered by its own CUDA event
    (pipeline_parallel/utils.py `ScheduleNode`), the all-to-alls on a communication stream and the
    rest on the compute stream, issued
        comm: combine_B, dispatch_F, dispatch_B, combine_F
        comp: attn_F, mlp_B (+ its weight gradients), mlp_F, attn_B
    where attn is gpt/fine_grained_callables.py's pre_dispatch node (attention, pre-MLP norm,
    router, shared experts, permutation) and mlp the routed experts. Each node waits for the one
    before it in its chain and for the one before it on its stream, so the pair takes four phases,
        max(attn_F, x) + max(mlp_B, x) + max(mlp_F, x) + max(attn_B, x),
    x one all-to-all (the four are equal: `ep_per_layer_s` / 4 per MoE layer), and hides
    sum min(compute_i, x) of the serial sum. With `Stack.delay_wgrad` mlp_B's weight-gradient
    GEMMs (W) follow its input-gradient ones (D), and dispatch_B starts after D:
        phases 2-3 = max(max(D, x) + x, max(D + W, x) + mlp_F)   instead of   max(D + W, x) + max(mlp_F, x).
    Only the steady state pairs passes (`pipeline.combined_1f1b_share`). Dense layers of an MoE
    model have no all-to-all (NoopScheduleNode); the MoE layers' attention side is the mean
    layer's less its routed experts (exact when every layer is MoE). Left out: the TP and CP
    collectives that run on the compute stream inside attn (more window), delay_wgrad's deferral
    of the attention weight gradients past combine_F, and the SMs the all-to-all kernels take from
    the compute running beside them (NCCL's alltoall takes no SM count from Megatron; DeepEP and
    HybridEP take moe_flex_dispatcher_num_sms): no figure for either is fitted here."""
    share = model.moe_share
    if not stack.moe_a2a_overlap or share == 0.0:
        return np.zeros(len(lay))
    x = ep_layer_s / (4.0 * share)
    routed_f = times.routed_fwd_s
    routed_w = times.routed_wgrad_s
    attn_f = np.maximum(times.layer_fwd_s - share * routed_f, 0.0)
    attn_b = np.maximum(times.layer_bwd_s - share * (routed_f + routed_w), 0.0) + times.layer_recompute_s
    serial = attn_f + attn_b + 2.0 * routed_f + routed_w + 4.0 * x
    edges = np.maximum(attn_f, x) + np.maximum(attn_b, x)
    plain = np.maximum(routed_f + routed_w, x) + np.maximum(routed_f, x)
    delayed = np.maximum(np.maximum(routed_f, x) + x, np.maximum(routed_f + routed_w, x) + routed_f)
    paired = edges + (delayed if stack.delay_wgrad else plain)
    ok = ~a2a_overlap_unsupported(lay, model.is_moe, stack.recompute_modules)
    return np.asarray(np.where(ok, share * (serial - paired) * combined_1f1b_share(lay), 0.0))


def pp_per_micro_batch_s(
    model: ModelSpec, lay: Layouts, cluster: Cluster, stack: Stack, chunk_compute_s: FloatArray
) -> FloatArray:
    """Exposed point-to-point time per micro-batch: 2v transfers, hidden behind a chunk's
    compute in the interleaved schedule when the stack overlaps them; without that overlap the
    framework's transfers that wait in line (`frameworks.PP_SERIAL_TRANSFERS`: DeepSpeed's
    blocking sends and receives, 4 per micro-batch) and, with TP > 1, its TP all-gathers of the
    partitioned boundary tensors (`frameworks.PP_PARTITION_GATHERS`)."""
    bw, lat = pair_links(cluster, lay.tp * lay.cp * lay.dp)
    whole = lay.tokens_per_micro_batch * model.hidden_size * ACTIVATION_BYTES
    one = p2p_s(whole / lay.tp, bw, lat)
    hidden = (lay.virtual_stages > 1) & stack.p2p_overlap
    exposed = np.where(hidden, 2.0 * lay.virtual_stages * np.maximum(one - chunk_compute_s, 0.0),
                       np.maximum(2.0 * lay.virtual_stages, pp_serial_transfers(lay)) * one)  # fmt: skip
    gathers = pp_partition_gathers(lay)
    if gathers.any():  # DeepSpeed's pipeline engine only
        tp_bw, tp_lat = links(cluster, lay.tp, np.ones(len(lay), dtype=np.int64))
        exposed = exposed + gathers * all_gather_s(whole, lay.tp, tp_bw, tp_lat)
    return np.asarray(np.where(lay.pp > 1, exposed, 0.0))


def micro_batch_comm(model: ModelSpec, lay: Layouts, cluster: Cluster, stack: Stack, times: MicroBatchTimes,
                     chunk_compute_s: FloatArray) -> MicroBatchComm:  # fmt: skip
    """`chunk_compute_s`: the compute of one model chunk per micro-batch, forward and backward
    (the window that hides the interleaved schedule's transfers)."""
    ep = ep_per_layer_s(model, lay, cluster, stack)
    return MicroBatchComm(
        tp_layer_s=tp_per_layer_s(model, lay, cluster, stack, times.layer_gemm_fwd_s),
        cp_layer_s=cp_per_layer_s(model, lay, cluster, stack, times),
        ep_layer_s=ep,
        ep_hidden_s=a2a_hidden_s(model, lay, stack, times, ep),
        pp_s=pp_per_micro_batch_s(model, lay, cluster, stack, chunk_compute_s / 2.0),
    )


def overlap_windows(slot_s: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Wall time of one micro-batch's forward and backward on a stage.

    The slot (compute plus exposed TP/CP/EP/PP communication of one micro-batch) splits 1:2
    between forward and backward, as their FLOPs do (Narayanan et al. 2021, Sec 5.1). A fixed
    split of the whole slot keeps the step monotone: a faster GPU that only moves time from
    compute to exposed communication does not shrink the window data-parallel traffic hides in.
    """
    return np.asarray(slot_s / 3.0), np.asarray(2.0 * slot_s / 3.0)


def live_blocked_numel(model: ModelSpec, lay: Layouts, stack: Stack) -> tuple[FloatArray, FloatArray]:
    """Parameters per layer, per GPU, whose ZeRO-3 gather cannot be prefetched under DeepSpeed's
    live-parameter limit (`Stack.zero3_max_live_params`), in the forward pass and in the backward's
    re-gather; 0 elsewhere (`frameworks.zero3_live_limited`).

    DeepSpeed's coordinator, `PartitionedParameterCoordinator.fetch_sub_module` in
    deepspeed/runtime/zero/partitioned_param_coordinator.py (v0.6.2 32d97976 and v0.19.5 cf443004
    alike), runs in each module's pre-hook: it all-gathers the module's own parameters
    (`__all_gather_params` adds each one's whole `ds_numel` to `n_available_params`), waits for them,
    then prefetches from the recorded trace while `numel_prefetching < min(max_n_available -
    n_available, prefetch_bucket)`. The post-hook releases the module's parameters once their next
    use is further than stage3_max_reuse_distance (in a pass, each linear's is the next pass).
    Persistent parameters (under stage3_param_persistence_threshold, 1e5: norms, biases) are never
    gathered and do not count. So at linear i's pre-hook `n_available` is its weight w_i (w_{i-1} is
    released, w_{i+1} not yet issued when the prefetch runs one weight ahead, as with the default and
    the Azure recipes' prefetch bucket of 5e7 < any weight here), and:
      * w_i < limit: the loop runs and issues at least w_{i+1} (it stops after passing the bucket,
        not before), which gathers while linear i computes: hidden, as the other gathers are;
      * w_i >= limit: nothing is prefetched; w_{i+1} is gathered in its own pre-hook after linear i
        has finished, and the compute waits for all of it: exposed.
    A layer's linears run qkv, proj, up, down in the forward and down, up, proj, qkv in the backward
    (each pass continues into the next layer's first), so a linear's gather is exposed when the one
    before it in the pass reaches the limit. The backward's recompute forward (full recompute) is
    priced as the one re-gather that `dp_exposed_s` counts per backward.

    Hand-worked, the 2T Azure run (h = 32768, 4h MLP, TP 1, limit 3e9): qkv 3h^2 = 3.22e9, proj
    h^2 = 1.07e9, up and down 4h^2 = 4.29e9. Forward: proj (after qkv), down (after up) and the next
    layer's qkv (after down) are exposed, 1.07e9 + 4.29e9 + 3.22e9 = 8.59e9 per layer; backward: up
    (after down), proj (after up) and the previous layer's down (after qkv), 4.29e9 + 1.07e9 +
    4.29e9 = 9.66e9. The 175B run (h = 12288): its largest weight, 4h^2 = 6.0e8, is under 3e9:
    nothing exposed.

    The linears are those of standard attention (qkv fused, as Megatron-DeepSpeed's) and the dense
    MLP (gate and up fused); an MoE, MLA or hybrid model's layers are not priced here (0)."""
    h = float(model.hidden_size)
    zeros = np.zeros(len(lay))
    if model.is_moe or model.is_mla or model.is_hybrid:
        return zeros, zeros
    limited = zero3_live_limited(lay)
    if not np.any(limited):
        return zeros, zeros
    width = float(model.ffn_hidden_size)
    forward = np.array(
        [h * (model.q_dim + 2 * model.kv_dim), model.q_dim * h, (model.mlp_matrices - 1) * h * width, width * h]
    )
    weights = forward[None, :] / lay.tp.astype(np.float64)[:, None]  # each GPU gathers its TP shard
    full = weights >= stack.zero3_max_live_params
    # forward: linear i+1 waits where linear i is full (the last one's successor is the next qkv)
    fwd = np.sum(np.where(np.roll(full, 1, axis=1), weights, 0.0), axis=1)
    # backward, in reverse order: linear i-1 waits where linear i is full
    bwd = np.sum(np.where(np.roll(full, -1, axis=1), weights, 0.0), axis=1)
    return np.where(limited, fwd, 0.0), np.where(limited, bwd, 0.0)


def dp_exposed_s(
    params: StageParams,
    lay: Layouts,
    cluster: Cluster,
    stack: Stack,
    windows: tuple[FloatArray, FloatArray],
    blocked: tuple[FloatArray, FloatArray],
) -> FloatArray:
    """Exposed data-parallel time per step, dense and expert weights together.

    Each collective hides under one window (see `overlap_windows`), used once: the gradient
    reduction under a micro-batch's backward, the weight gather under a forward (ZeRO-3 gathers
    again for the backward, in the backward's window). ZeRO-2 reduce-scatters every
    micro-batch's gradients, except where the framework defers the sync to the last micro-batch
    (`frameworks.deferred_grad_sync`: once per step); torchtitan's ZeRO-2 also gathers the weights
    for every micro-batch's forward unless so deferred (`frameworks.zero2_regathers`). A window is wall time, so a faster GPU
    that only shifts time from compute to exposed communication does not shrink it.
    `blocked`: per layer, the parameters whose ZeRO-3 gather waits in line, forward and backward
    (`live_blocked_numel`): those gathers are exposed whole, per micro-batch, and leave the window
    to the others (their latency counted once per layer and pass).
    """
    overlap = cluster.efficiency.dp_overlap if stack.dp_overlap else 0.0
    m = np.maximum(lay.num_micro_batches, 1.0)
    dense_n = lay.dp_cp
    expert_n = lay.expert_dp
    groups = (
        (params.dense, dense_n, links(cluster, dense_n.astype(np.int64), lay.tp)),
        (params.expert, expert_n, links(cluster, expert_n.astype(np.int64), lay.etp * lay.ep)),
    )
    all_reduce = np.zeros(len(lay))
    scatter = np.zeros(len(lay))
    gather = np.zeros(len(lay))
    layer_gathers = np.zeros(len(lay))
    layer_scatters = np.zeros(len(lay))
    layers = np.maximum(params.layers, 1.0)
    host_waits = offload_blocks_grad_reduce(lay)
    per_layer_scatter = bool(np.any(host_waits))  # only read there: skipped on the hot path otherwise
    for count, n, (bw, lat) in groups:
        if not np.any(count > 0):
            continue  # a dense model has no expert weights: no expert collectives, not even their latency
        all_reduce = all_reduce + all_reduce_s(count * stack.grad_bytes, n, bw, lat)
        scatter = scatter + reduce_scatter_s(count * stack.grad_bytes, n, bw, lat)
        gather = gather + all_gather_s(count * BF16_BYTES, n, bw, lat)
        layer_gathers = layer_gathers + layers * all_gather_s(count * BF16_BYTES / layers, n, bw, lat)
        if per_layer_scatter:
            layer_scatters = layer_scatters + layers * reduce_scatter_s(count * stack.grad_bytes / layers, n, bw, lat)
    # the gathers that wait in line (dense weights, over the dense group)
    bw_d, lat_d = groups[0][2]
    waits = [
        np.where(b > 0, layers * all_gather_s(b * BF16_BYTES, dense_n, bw_d, lat_d), 0.0) if np.any(b > 0) else b
        for b in blocked
    ]
    wait_fwd, wait_bwd = (np.minimum(w, layer_gathers) for w in waits)
    fwd = overlap * windows[0]
    bwd = overlap * windows[1]
    deferred = deferred_grad_sync(lay)
    gathers, scatters = sharded_collectives_per_step(lay)  # read for ZeRO-2 only

    def exposed(comm: FloatArray, window: FloatArray) -> FloatArray:
        return np.asarray(np.maximum(comm - window, 0.0))

    # ZeRO-3 gathers the layers' weights per micro-batch, forward and backward; the gradients'
    # reduce-scatter runs per micro-batch, or once per step where the sync is deferred
    # (with the optimizer offloaded, a framework whose host waits for each layer's reduce-scatter
    # in the step's last micro-batch hides only that micro-batch's gathers:
    # `frameworks.offload_blocks_grad_reduce`)
    hidden_bwd = layer_gathers - wait_bwd
    backward_3 = np.where(deferred, m * exposed(hidden_bwd, bwd) + exposed(scatter, bwd),
                          m * exposed(hidden_bwd + scatter, bwd))  # fmt: skip
    blocked_3 = (m - 1.0) * exposed(hidden_bwd + scatter, bwd) + exposed(hidden_bwd, bwd) + layer_scatters
    backward_3 = np.where(host_waits, blocked_3, backward_3) + m * wait_bwd
    by_stage = (
        exposed(all_reduce, bwd),  # ZeRO-0
        exposed(scatter, bwd) + exposed(gather, fwd),  # ZeRO-1
        # ZeRO-2: as often as `sharded_collectives_per_step` counts
        scatters * exposed(scatter, bwd) + gathers * exposed(gather, fwd),
        m * (exposed(layer_gathers - wait_fwd, fwd) + wait_fwd) + backward_3,  # ZeRO-3
    )
    return np.asarray(np.choose(np.minimum(lay.zero, 3), by_stage))

"""Compute time of one micro-batch on one GPU: GEMMs by shape, attention, memory-bound ops.

GEMM (m x k) @ (k x n), 2mnk FLOPs, runs at
    t = max( 2 M N k / (peak * e(M, N, k)),  2(mk + kn + mn) bytes / (HBM bw * e_mem) ) + t_launch
    e(M, N, k) = gemm_max * q(M) q(N) q(k),   q(x) = x / (x + gemm_half_dim)
    M, N = m, n rounded up to a multiple of the kernels' output tile (`gemm_tile`)
a roofline (Williams et al. 2009) whose compute roof falls for small or skinny dimensions, the
shapes tensor parallelism produces (n or k divided by TP) and that MoE experts see (few tokens
each). The kernel computes whole tiles, so a dimension just past a multiple of the tile pays for
the whole last tile (tile quantization: NVIDIA Deep Learning Performance Documentation, "Matrix
Multiplication Background User's Guide", Dimension Quantization Effects); the curve q then applies
to the tiled dimensions. The constants are per hardware (`Efficiency` in the preset). The
backward pass of a GEMM is two GEMMs of the same three dimensions (dX = dY W^T, dW = X^T dY), so
twice the forward time.

Attention: flash attention (Dao 2023, FlashAttention-2) skips the masked half of a causal
s x s block and runs at `efficiency.attention` of the BF16 peak; its backward does 5 matmuls to
the forward's 2 (2.5x). With dropout on the attention probabilities the kernel draws a Philox
random number per score element, forward and again in the backward, and keeps a fixed fraction
of its dropout-free throughput, forward and backward (`efficiency.attention_dropout_fwd`, `_bwd`:
FlashAttention-4's on GB200, measured; the A100's from its SM's INT32 lanes per tensor FLOP).
PyTorch's context parallelism (torchtitan) adds memory-bound fp32 merges of its per-step
attention outputs and gradients (`cp_merge_bytes`). Without flash attention the scores are
batched GEMMs over full s x s, one launch each for all b x heads matrices (`batched_gemm_s`;
their backward twice the forward: four GEMMs to two) plus a
memory-bound softmax and attention dropout, priced by the bytes each pass moves per score
element (`UNFUSED_SOFTMAX_BYTES`), not as a multiple of the forward.

Memory-bound kernels move these bytes per token in the forward pass (backward: twice):
    two norms and two residual adds 20h (a norm reads and writes 2h, an add reads 4h, writes 2h;
    one of each in a hybrid model's one-block layer, 10h)
    activation: gated 6f/TP (reads gate and up, writes the product), plain 4f/TP, x top-k (MoE)
    rotary embedding on Q and K 4(a*d + g*d)/TP
    hidden dropout (GPT): fused into each residual add (Megatron's bias-dropout-add, one kernel
    that reads the branch and the residual and writes the sum), only its mask more: 1 B per
    element and add, 2h (`DROPOUT_MASK_BYTES`)
    MoE token permutation and unpermutation (`moe_permute_bytes`, per micro-batch, not per token):
    the R = T k ETP/TP routed copies of h on a GPU gathered into expert order and scatter-added
    back into O = R/k rows, 10Rh + 6Oh bytes forward and 14Rh + 6Oh backward
These are fused kernels (torch.compile, or Megatron-LM's and DeepSpeed's own); torchtitan's model
run eagerly (`Stack.compiled` false) moves more, counted op by op (`eager_extra_bytes`).
Sequence parallelism splits the norm, residual and dropout work over TP; without it each TP rank
repeats it on all tokens. FP8 adds the casts of the GEMM operands, which depend on the stack's
recipe (`fp8_cast_bytes`); torchao's rowwise_with_gw_hp runs the weight-gradient GEMM in BF16.

Hybrid models (`ModelSpec.layer_pattern`): the mean layer holds each kind of block on its share of
the layers, attention (projections and core), Mamba-2 mixers (in_proj and out_proj through the GEMM
model, the conv, SSD scan and gated norm in `mamba_mixer_s`) and MLPs.

The optimizer step (fused Adam) streams per local parameter: fp32 master, m, v read and written
(24 bytes), the gradient read, the bf16 weight written (2 bytes). FP16 training adds dynamic
loss scaling (Micikevicius et al. 2018): the gradients are read once more to check for inf/NaN
before the step (the scaling itself folds into the loss and the unscale into Adam).

FSDP2 (torchtitan's ZeRO-2/3) copies around each collective on the compute stream: the gathered
bf16 buffer out to the parameters, the bf16 gradients into the fp32 reduce-scatter input
(`fsdp_copy_s`, per micro-batch at ZeRO-3).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from paraplan.cost_models.candidates import BoolArray, FloatArray, Layouts
from paraplan.cost_models.flops import causal_keys
from paraplan.cost_models.frameworks import (
    MOE_HOST_EXPOSED_SHARE,
    cp_sdpa_merge,
    kernel_efficiency_on,
    per_framework_field,
    per_framework_value,
    sharded_collectives_per_step,
)
from paraplan.cost_models.layout import Framework, Offload, Precision, Recompute
from paraplan.cost_models.memory import StageParams, cpu_checkpointed, kv_repeats, layer_input_bytes_per_token
from paraplan.cost_models.models import ModelSpec
from paraplan.cost_models.stack import BF16_BYTES, Stack
from paraplan.hardware_specs.schema import Cluster

FLASH_BACKWARD_RATIO = 2.5
# FlashAttention in Triton (`Stack.triton_attention`) keeps this fraction of FlashAttention-2's
# throughput, (forward, backward): Dao 2023 (FlashAttention-2, arXiv:2307.08691) Sec 4.1, A100 80GB
# SXM4, head dimension 64 and 128, causal or not: FlashAttention-2 is "around 1.3-1.5x faster than
# FlashAttention in Triton in the forward pass and around 2x faster in the backward pass" (the
# midpoint 1.4). Measured on the A100 only; elsewhere an estimate (the Triton kernel has no
# Hopper-specific path, nor has FlashAttention-2).
TRITON_FLASH_THROUGHPUT = (1 / 1.4, 1 / 2.0)
# Unfused attention's memory-bound passes, bytes per score element (forward, backward), 16-bit scores:
#  * softmax (Megatron's FusedScaleMaskSoftmax, megatron/core/fusions/fused_softmax.py at d98e8a64;
#    Megatron-LM 2021's megatron/model/fused_softmax.py the same): the forward reads the scores and
#    writes the probabilities (2 + 2); the backward (`scaled_upper_triang_masked_softmax_backward`,
#    `scaled_masked_softmax_backward`) reads the saved probabilities and their gradient and writes
#    the scores' gradient (2 + 2 + 2).
#  * attention dropout (torch's native_dropout): the forward reads the probabilities and writes them
#    and a one-byte mask (2 + 2 + 1); native_dropout_backward reads the gradient and the mask and
#    writes the gradient (2 + 1 + 2).
UNFUSED_SOFTMAX_BYTES = (4.0, 6.0)
UNFUSED_DROPOUT_BYTES = (5.0, 5.0)
ELEMENTWISE_KERNELS_PER_LAYER = 8
# Hidden dropout runs inside the residual add's kernel: Megatron-LM's bias_dropout_add_fused_train
# (megatron/core/fusions/fused_bias_dropout.py at d98e8a64; megatron/model/transformer.py of 2021,
# the default --bias-dropout-fusion, Megatron-DeepSpeed the same), so the add's reads and writes
# are already priced and the dropout adds the mask it saves for the backward, one byte per element
# (torch's boolean dropout mask; an estimate for the fused kernel's).
DROPOUT_MASK_BYTES = 1.0


@dataclass(frozen=True)
class MicroBatchTimes:
    """Per micro-batch on one GPU: one (mean) layer's times, and the LM head's (last stage)."""

    layer_fwd_s: FloatArray
    layer_bwd_s: FloatArray
    layer_recompute_s: FloatArray
    head_fwd_s: FloatArray  # LM head and loss, forward (the backward is twice it)
    eh_proj_fwd_s: FloatArray  # an MTP module's eh_proj GEMM, forward (`Stack.mtp`; see `eh_proj_fwd_s`)
    attention_fwd_s: FloatArray  # core attention of one layer, forward (CP overlaps with it)
    attention_bwd_s: FloatArray  # ... and backward
    layer_gemm_fwd_s: FloatArray  # one layer's forward GEMMs = its weight-gradient GEMMs, the window
    #                               that hides the backward TP collectives (`Stack.tp_overlap`)
    routed_fwd_s: FloatArray  # one MoE layer's routed-expert GEMMs, forward (= their input-gradient GEMMs)
    routed_wgrad_s: FloatArray  # ... and their weight-gradient GEMMs (`Stack.moe_a2a_overlap`'s windows)


def gemm_s(m: FloatArray, n: FloatArray, k: FloatArray, rate_flops: FloatArray | float, cluster: Cluster) -> FloatArray:
    """`rate_flops`: the large-GEMM rate, peak x gemm_max of the precision (`matmul_rate`)."""
    return batched_gemm_s(1.0, m, n, k, rate_flops, cluster)


def batched_gemm_s(
    batch: FloatArray | float,
    m: FloatArray,
    n: FloatArray,
    k: FloatArray,
    rate_flops: FloatArray | float,
    cluster: Cluster,
) -> FloatArray:
    """`batch` independent m x n x k products in one kernel, as torch.bmm and torch.baddbmm run
    unfused attention's scores and context (Megatron-LM's CoreAttention over b x heads matrices):
    each product at the roofline of its own shape (m and n tiled: module docstring), one launch
    for them all."""
    eff = cluster.efficiency
    half = eff.gemm_half_dim
    tile = float(eff.gemm_tile)

    def q(x: FloatArray) -> FloatArray:
        return np.asarray(x / (x + half))

    rows, cols = (np.ceil(x / tile) * tile for x in (m, n))
    compute = 2.0 * rows * cols * k / (rate_flops * q(rows) * q(cols) * q(k))
    memory = 2.0 * (m * k + k * n + m * n) / (cluster.gpu.mem_bw_bytes_per_s * eff.memory_bound)
    return np.asarray(batch * np.maximum(compute, memory) + eff.kernel_overhead_s)


def matmul_peak_flops(cluster: Cluster, lay: Layouts) -> FloatArray:
    """Peak for the projection and MLP GEMMs; FP8 runs them on FP8 tensor cores when present.
    Also the peak that MFU and HFU are ratios of (see `flops`)."""
    gpu = cluster.gpu
    fp8 = gpu.peak_fp8_flops if gpu.peak_fp8_flops is not None else gpu.peak_bf16_flops
    return np.asarray(
        np.where(
            lay.precision == Precision.FP8,
            fp8,
            np.where(lay.precision == Precision.FP16, gpu.peak_fp16_flops, gpu.peak_bf16_flops),
        )
    )


def matmul_rate(cluster: Cluster, lay: Layouts) -> FloatArray:
    """The rate large projection and MLP GEMMs reach: the precision's peak x its gemm_max."""
    eff = cluster.efficiency
    fp8_max = eff.gemm_max * eff.fp8_gemm_ratio
    return np.asarray(matmul_peak_flops(cluster, lay) * np.where(lay.precision == Precision.FP8, fp8_max, eff.gemm_max))


def bf16_rate(cluster: Cluster) -> float:
    """The rate of GEMMs kept in 16 bits whatever the training precision (router, LM head)."""
    return cluster.gpu.peak_bf16_flops * cluster.efficiency.gemm_max


def _layer_gemms_fwd_s(
    model: ModelSpec, lay: Layouts, cluster: Cluster, tokens: FloatArray, rate: FloatArray | float | None = None
) -> FloatArray:
    """The GEMMs of a mean layer, forward: the attention projections as an input GEMM (QKV, or
    MLA's latent and up-projections, equal in FLOPs) and the output projection; the MLP of a
    dense layer, or for an MoE layer the router, the shared experts (on every token) and the
    routed experts (top-k tokens spread over the E/EP local experts), weighted by the share of
    each kind of layer. `rate`: the large-GEMM rate, by default the layout precision's."""
    parts = _gemm_parts(model, lay, cluster, tokens, rate)
    # a hybrid model's blocks: attention, Mamba mixers, MLPs on their shares of the layers
    mixers = model.attention_share * parts["attention"] + model.mamba_share * parts["mamba"]
    if not model.is_moe:
        return np.asarray(mixers + model.dense_mlp_share * parts["dense"])
    share = model.moe_share
    moe = parts["routed"] + parts["shared"] + parts["router"]
    return np.asarray(mixers + model.dense_mlp_share * parts["dense"] + share * moe)


def _gemm_parts(
    model: ModelSpec, lay: Layouts, cluster: Cluster, tokens: FloatArray, rate: FloatArray | float | None = None
) -> dict[str, FloatArray]:
    """`_layer_gemms_fwd_s`'s parts, forward, each for a layer that has it: "attention" (every
    layer of a transformer decoder), "mamba" (a Mamba-2 mixer's in_proj, column-parallel, and
    out_proj, row-parallel, as Megatron's MambaMixer splits them over TP), "dense" (a dense
    layer's MLP), "routed", "shared", "router" (an MoE layer's)."""
    h = float(model.hidden_size)
    tp = lay.floats("tp")
    peak = matmul_rate(cluster, lay) if rate is None else rate
    ones = np.ones_like(tokens)
    up = 2.0 if model.mlp == "gated" else 1.0
    out_width = float(model.num_heads * (model.v_head_dim or model.head_dim))
    attention_in = (model.attention_matmul_params - out_width * h) / h
    attention = gemm_s(tokens, attention_in / tp, h * ones, peak, cluster)
    attention = attention + gemm_s(tokens, h * ones, out_width / tp, peak, cluster)

    def mlp(width: float, rows: FloatArray) -> FloatArray:
        return np.asarray(
            gemm_s(rows, up * width / tp, h * ones, peak, cluster) + gemm_s(rows, h * ones, width / tp, peak, cluster)
        )

    dense_ffn = float(model.dense_ffn_hidden_size or model.ffn_hidden_size)
    zero = np.zeros(len(lay))
    parts = {"attention": np.asarray(attention), "dense": mlp(dense_ffn, tokens), "routed": zero, "shared": zero,
             "router": zero, "mamba": zero}  # fmt: skip
    if model.mamba_heads:
        inner = float(model.mamba_inner)
        parts["mamba"] = np.asarray(gemm_s(tokens, model.mamba_in_width / tp, h * ones, peak, cluster)
                                    + gemm_s(tokens, h * ones, inner / tp, peak, cluster))  # fmt: skip
    if not model.is_moe:
        return parts
    parts["routed"] = routed_gemms_fwd_s(model, lay, cluster, tokens, peak)
    shared_ffn = float(model.shared_expert_ffn or model.ffn_hidden_size)
    if model.num_shared_experts:
        parts["shared"] = np.asarray(model.num_shared_experts * mlp(shared_ffn, tokens))
    parts["router"] = gemm_s(tokens, model.num_experts * ones, h * ones, bf16_rate(cluster), cluster)
    return parts


def _mla_up_proj_fwd_s(model: ModelSpec, lay: Layouts, cluster: Cluster, tokens: FloatArray) -> FloatArray:
    """What Megatron's mla_up_proj checkpoint runs (`qkv_up_proj_and_rope_apply`,
    multi_latent_attention.py at d98e8a64): the Q projection from the q-LoRA latent (or from the
    hidden state without q-LoRA), the KV up-projection from the KV latent, and RoPE on Q and K."""
    if not model.is_mla:
        return np.zeros(len(lay))
    tp = lay.floats("tp")
    ones = np.ones_like(tokens)
    peak = matmul_rate(cluster, lay)
    a, d, rope = model.num_heads, model.head_dim, model.qk_rope_head_dim
    d_v = model.v_head_dim or d
    q_in = float(model.q_lora_rank or model.hidden_size)
    q = gemm_s(tokens, a * d / tp, q_in * ones, peak, cluster)
    kv = gemm_s(tokens, a * (d - rope + d_v) / tp, float(model.kv_lora_rank or 0) * ones, peak, cluster)
    rotary = tokens * 4.0 * (model.q_dim + model.kv_dim) / tp
    return np.asarray(q + kv + _kernels_s(rotary, np.ones(len(lay)), cluster))


def routed_gemms_fwd_s(
    model: ModelSpec, lay: Layouts, cluster: Cluster, tokens: FloatArray, rate: FloatArray | float
) -> FloatArray:
    """The routed experts' GEMMs of one MoE layer, forward, at the large-GEMM `rate`."""
    h = float(model.hidden_size)
    ones = np.ones_like(tokens)
    up = 2.0 if model.mlp == "gated" else 1.0
    local_experts = model.num_experts / lay.ep
    etp = lay.floats("etp")
    # Each GPU computes tokens x top-k / TP expert-token rows' worth of its experts' work; with
    # expert TP below TP the experts are wider and see proportionally fewer rows each.
    rows = tokens * model.experts_top_k * etp / (lay.floats("tp") * local_experts)
    ffn = float(model.ffn_hidden_size)
    return np.asarray(
        local_experts
        * (gemm_s(rows, up * ffn / etp, h * ones, rate, cluster) + gemm_s(rows, h * ones, ffn / etp, rate, cluster))
    )


def _attention_s(model: ModelSpec, lay: Layouts, cluster: Cluster, stack: Stack) -> tuple[FloatArray, FloatArray]:
    """Core attention of one layer, one micro-batch (Q K^T, softmax, times V), forward and backward;
    a hybrid model's mean layer holds its share (`ModelSpec.attention_share`) of an attention layer's."""
    share = model.attention_share
    tokens = lay.tokens_per_micro_batch
    heads = model.num_heads / lay.tp
    seq = lay.floats("seq_len")
    if stack.flash_attention:
        causal_flops = 2.0 * tokens * causal_keys(model, seq) * model.attention_core_width / lay.tp
        kept = _flash_kept(model, cluster, stack)[0]
        fwd = causal_flops / (cluster.gpu.peak_bf16_flops * cluster.efficiency.attention * kept)
        fwd = share * (fwd + cluster.efficiency.kernel_overhead_s)
        return np.asarray(fwd), np.asarray(fwd * _flash_backward_ratio(model, cluster, stack))
    q_rows = seq / lay.cp
    d = float(model.head_dim) * np.ones_like(seq)
    rate = bf16_rate(cluster)
    matrices = lay.micro_batch * heads
    qk, pv = (batched_gemm_s(matrices, q_rows, n, k, rate, cluster) for n, k in ((seq, d), (d, seq)))
    scores = qk + pv
    elements = tokens * heads * seq
    dropout = UNFUSED_DROPOUT_BYTES if model.dropout else (0.0, 0.0)
    fwd_bytes, bwd_bytes = (
        elements * (softmax + drop) for softmax, drop in zip(UNFUSED_SOFTMAX_BYTES, dropout, strict=True)
    )
    fwd, bwd = scores + _memory_s(fwd_bytes, cluster), 2.0 * scores + _memory_s(bwd_bytes, cluster)
    return np.asarray(share * fwd), np.asarray(share * bwd)


def _flash_kept(model: ModelSpec, cluster: Cluster, stack: Stack) -> tuple[float, float]:
    """The fractions of the hardware's flash attention throughput (`efficiency.attention`) that
    this model and stack keep, (forward, backward): the hardware's `efficiency.attention_dropout_fwd`,
    `_bwd` where the model trains with dropout, times the Triton kernel's
    (`TRITON_FLASH_THROUGHPUT`) where the stack runs it (`Stack.triton_attention`)."""
    fwd, bwd = 1.0, 1.0
    if model.dropout:
        fwd, bwd = cluster.efficiency.attention_dropout_fwd, cluster.efficiency.attention_dropout_bwd
    if stack.triton_attention:
        fwd, bwd = fwd * TRITON_FLASH_THROUGHPUT[0], bwd * TRITON_FLASH_THROUGHPUT[1]
    return fwd, bwd


def _flash_backward_ratio(model: ModelSpec, cluster: Cluster, stack: Stack) -> float:
    """Flash attention's backward time over its forward's: 2.5 (5 matmuls to 2), scaled by how
    much more of its throughput the backward loses than the forward (`_flash_kept`)."""
    fwd, bwd = _flash_kept(model, cluster, stack)
    return FLASH_BACKWARD_RATIO * fwd / bwd


def cp_merge_bytes(model: ModelSpec, lay: Layouts, stack: Stack) -> tuple[FloatArray, FloatArray]:
    """Bytes one layer's context-parallel merges move per micro-batch on one GPU, (forward,
    backward); 0 unless the framework runs PyTorch's context_parallel (`frameworks.cp_sdpa_merge`).

    `_templated_ring_attention` (torch/distributed/tensor/experimental/_attention.py) runs CP
    SDPA calls per layer and merges each into a running output kept in fp32 (`_SDPAMerger`,
    convert_to_f32 on by default): the first block cast to fp32 (read 2 B, write 4 B per
    element), each later one merged by its logsumexp (read the fp32 output 4 B and the bf16
    block 2 B, write 4 B; a partial step's `_partial_update` rewrites the whole output), the
    result cast back (6 B). `_templated_ring_attention_backward` accumulates dQ, dK and dV in
    fp32 zero-filled buffers (4 B), one read-modify-write per step (10 B per element, as above),
    and casts them back at the end (6 B). Each merge or accumulation is counted as one fused
    pass: torchtitan compiles every TransformerBlock with fullgraph=True (`apply_compile` at
    9dec370 and v0.2.2), so the ring's elementwise ops are traced into the block's graph; run
    eagerly they would be several kernels and about four times the bytes, so this is a lower
    bound. Elements: the output and dQ are T x query heads x head_dim / TP, dK and dV T x the
    K/V widths / TP, of every query head when K and V are repeated (`Stack.kv_repeated`). The
    logsumexp terms are 1/head_dim of these and left out."""
    on = cp_sdpa_merge(lay)
    if not on.any():
        return np.zeros(len(lay)), np.zeros(len(lay))
    tokens = lay.tokens_per_micro_batch
    cp = lay.floats("cp")
    out = tokens * model.num_heads * (model.v_head_dim or model.head_dim) / lay.tp
    kv = tokens * (model.kv_dim + model.v_dim) * kv_repeats(model, stack) / lay.tp
    fwd = (6.0 + 10.0 * (cp - 1.0) + 6.0) * out
    bwd = (4.0 + 10.0 * cp + 6.0) * (out + kv)
    return np.asarray(np.where(on, fwd, 0.0)), np.asarray(np.where(on, bwd, 0.0))


def _memory_s(nbytes: FloatArray, cluster: Cluster) -> FloatArray:
    return np.asarray(nbytes / (cluster.gpu.mem_bw_bytes_per_s * cluster.efficiency.memory_bound))


def _kernels_s(nbytes: FloatArray, kernels: FloatArray, cluster: Cluster) -> FloatArray:
    """Memory-bound kernels moving `nbytes` in all, each paying its launch."""
    return np.asarray(_memory_s(nbytes, cluster) + kernels * cluster.efficiency.kernel_overhead_s)


# Kernels of one MoE layer's unfused permute and unpermute (`moe_permute_bytes`), forward:
# index_select; the probability multiply, zeros, scatter_add_. Backward: gather (scatter_add_'s
# input gradient), two for the multiply (input and probability gradients), zeros and index_add_
# (index_select's input gradient). Alltoall with several local experts adds one cat per sort in
# each direction.
MOE_PERMUTE_KERNELS_FWD = 4
MOE_PERMUTE_KERNELS_BWD = 5
MOE_SORT_KERNELS = 2
# The same with `Stack.moe_gather_scatter` (Megatron-Core core_v0.6.0's allgather dispatcher,
# `moe_permute_bytes`), forward: two gathers, zeros_like, scatter's clone and scatter_, the
# probability multiply, zeros, scatter_add's clone and scatter_add_; backward: a gather, two for the
# multiply and the probability gradient's sum, a gather, zeros and scatter_add_ twice.
MOE_GATHER_SCATTER_KERNELS = 9


def moe_permute_bytes(
    model: ModelSpec, lay: Layouts, tokens: FloatArray, gather_scatter: bool = False
) -> tuple[FloatArray, FloatArray]:
    """Bytes one mean layer's MoE token permutation and unpermutation move per micro-batch on one
    GPU, (forward, backward); 0 for a dense model.

    Counted from Megatron-LM's default path at d98e8a64 (megatron/core/transformer/moe/
    moe_utils.py `permute` / `unpermute`, moe_permute_fusion False; token_dispatcher.py), bf16:
    each GPU permutes the R = T k ETP / TP routed copies its local experts compute (T tokens of
    the micro-batch; the same rows as the expert GEMMs, `_layer_gemms_fwd_s`) and combines them
    into O = R / k token rows of h (the tokens of its expert-TP group at EP 1, its own T/TP
    with the alltoall dispatcher at ETP 1). Each kernel reads and writes its tensors once:
      forward   index_select of the routed rows (read 2Rh, write 2Rh); the expert output times
                its routing probability (2Rh + 2Rh); zeros of the output (2Oh); scatter_add_
                of the R rows into it (read 2Rh, read and write the output 4Oh)
                => 10 Rh + 6 Oh
      backward  scatter_add_'s input gradient, a gather (2Rh + 2Rh); the multiply's input
                gradient (2Rh + 2Rh) and probability gradient (reads the gradient and the
                expert output, 4Rh); index_select's input gradient, zeros (2Oh) and index_add_
                (read 2Rh, read and write 4Oh)
                => 14 Rh + 6 Oh
    With EP > 1 and several local experts the alltoall dispatcher also sorts the received rows
    by local expert and back (`sort_chunks_by_idxs`, split + cat, read and write 2Rh each), in
    the forward and again in the backward: 8 Rh each way. (EP traffic is charged as the
    alltoall dispatcher's, `traffic.ep_per_layer_s`.) The router's top-k, softmax and
    auxiliary-loss kernels work on T x E scores, E/h of a token row: left out. torchtitan 0.3.0
    dispatches and combines the same way (torchtitan/models/common/moe.py at 4f9e9a47:
    dispatch, experts, combine with scatter_add). TE's fused permute (moe_permute_fusion, off by
    default) moves about half of these bytes; paraplan has no knob for it.

    `gather_scatter` (`Stack.moe_gather_scatter`): Megatron-Core core_v0.6.0's allgather dispatcher
    instead (megatron/core/transformer/moe/token_dispatcher.py `MoEAllGatherTokenDispatcher` at
    cac60ce4: `token_permutation`, `token_unpermutation`; the index maps are expanded views, stride 0
    along h, so their int64 reads stay in cache and are left out; out-of-place `scatter` and
    `scatter_add` copy their destination first):
      forward   torch.gather of the token rows by the map (read 2Rh, write 2Rh); torch.gather into
                expert order (4Rh); zeros_like of the expert output (2Rh); scatter into it (clone
                4Rh, scatter_ read 2Rh write 2Rh); times the probabilities (4Rh); zeros of the
                token rows (2Oh); scatter_add into them (clone 4Oh, read 2Rh, read and write 4Oh)
                => 24 Rh + 10 Oh
      backward  scatter_add's source gradient, a gather (4Rh); the multiply's input gradient (4Rh)
                and probability gradient (the product: read 4Rh, write 2Rh; its row sum, read
                2Rh); scatter's source gradient, a gather (4Rh); each torch.gather's input
                gradient, zeros and scatter_add_: into expert order's input (2Rh + read 2Rh + read
                and write 4Rh), into the token rows (2Oh + read 2Rh + read and write 4Oh)
                => 30 Rh + 6 Oh
    The scatter_add_ kernels add with atomics; priced as their bytes, a lower bound."""
    if not model.is_moe:
        zero = np.zeros(len(lay))
        return zero, zero
    h = float(model.hidden_size)
    rows = tokens * model.experts_top_k * lay.etp / lay.tp
    out = rows / model.experts_top_k
    sort = np.where(_sorts(model, lay), 8.0 * rows * h, 0.0)
    if gather_scatter:
        fwd = model.moe_share * (24.0 * rows * h + 10.0 * out * h + sort)
        bwd = model.moe_share * (30.0 * rows * h + 6.0 * out * h + sort)
    else:
        fwd = model.moe_share * (10.0 * rows * h + 6.0 * out * h + sort)
        bwd = model.moe_share * (14.0 * rows * h + 6.0 * out * h + sort)
    return np.asarray(fwd), np.asarray(bwd)


def _sorts(model: ModelSpec, lay: Layouts) -> BoolArray:
    """The alltoall dispatcher sorts its received rows by local expert: EP > 1, several experts a GPU."""
    return np.asarray((lay.ep > 1) & (model.num_experts > lay.ep))


def _moe_permute_kernels(model: ModelSpec, lay: Layouts, per_direction: int) -> FloatArray:
    """Launches of one mean layer's permute and unpermute in one direction (forward or backward)."""
    if not model.is_moe:
        return np.zeros(len(lay))
    sort = np.where(_sorts(model, lay), MOE_SORT_KERNELS, 0)
    return np.asarray(model.moe_share * (per_direction + sort), dtype=np.float64)


# Kernels of one MoE layer's GPT-OSS expert epilogue (`expert_epilogue_bytes`), per micro-batch:
# the clamp, two clamps and a cat forward, two clamp backwards and a cat backward; the fc2 bias,
# per local expert a multiply and an add forward and two multiplies and two sums backward, plus
# one cat each way.
# The per-expert loop (TEGroupedMLP._apply_bias, `t + b * p` over torch.split chunks) is the only
# bias path in every Megatron-Core the published GPT-OSS rows ran: the 3rdparty/Megatron-LM pin of
# Megatron-Bridge v0.2.0 (25.11) 0d8e0714, v0.3.0 (26.02) b0cc2706, v0.3.1 (26.02.01) 55ac7082,
# v0.4.0 (26.04) d7288711 and v0.4.2 (26.04.01) 2edffadb, and core_v0.15.0 to core_v0.18.0. The
# packed path (`_apply_packed_bias`, one repeat_interleave) came with Megatron-LM 883533e0
# (2026-08-14) and even at d98e8a64 runs only with moe_single_grouped_bias=True (default False;
# needs moe_use_grouped_tensor and TE >= 2.14), which no Megatron-Bridge recipe up to v0.4.2 sets.
CLAMP_KERNELS = 3
BIAS_KERNELS_PER_EXPERT_FWD = 2
BIAS_KERNELS_PER_EXPERT_BWD = 4


def _has_expert_epilogue(model: ModelSpec) -> bool:
    """Whether the model's experts clamp their GLU or carry biases (`expert_epilogue_bytes`)."""
    return model.is_moe and (model.glu_clamp is not None or model.has_mlp_bias)


def expert_epilogue_bytes(model: ModelSpec, lay: Layouts, tokens: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Bytes the unfused work around GPT-OSS's experts moves per micro-batch on one GPU in one mean
    layer, (forward, backward); 0 unless the model clamps its GLU (`ModelSpec.glu_clamp`) or has
    expert biases (an MoE model with `has_mlp_bias`), and the framework is Megatron-LM.

    Megatron-Core's TEGroupedMLP (megatron/core/transformer/moe/experts.py, the same at
    core_v0.15.0 0d7e02bd, core_v0.16.0 3bec9aa9 and core_v0.17.0 9539a12e, the Megatron Core of
    NeMo 25.11, 26.02 and 26.04 per Megatron-Bridge docs/releases/software-versions.md @c8101293)
    runs GPT-OSS's experts (Megatron-Bridge GPTOSSBridge.provider_bridge at 0fbfe7d3:
    activation_func quick_gelu, activation_func_clamp_value 7.0, add_bias_linear True) as:
      * the clamp: `weighted_bias_quick_geglu_impl` (megatron/core/fusions/fused_bias_geglu.py)
        clamps the two halves of the fc1 output and concatenates them again before its fused
        (compiled) activation, outside it: per element of the R x 2f/ETP fc1 output, bf16, each
        clamp reads and writes its half (4 B) and the cat reads and writes all (4 B), 8 B
        forward; backward each clamp's gradient reads the gradient and its saved input and
        writes (6 B) and chunk's backward concatenates the two halves (4 B), 10 B;
      * the fc2 bias: linear_fc2 is built with skip_bias_add=True and `_apply_bias` adds each
        local expert's bias scaled by the routing probability in a Python loop over the experts
        (`t + b * p` on torch.split chunks, then torch.cat): per element of the R x h fc2 output,
        b * p written (2 B), the add (read 4 B, write 2 B), the cat (4 B), 12 B forward;
        backward the probability and bias gradients each materialise a product and reduce it
        (read 2 B, write 2 B, read 2 B) and split's backward concatenates the chunk gradients
        (4 B), 16 B. The probabilities are taken as bf16 (the recipes leave moe_router_dtype
        unset: the router's logits keep the input dtype), a lower bound if they are fp32.
    R = T k ETP/TP routed rows as in `moe_permute_bytes`. The fused activation itself is charged
    in `_layer_memory_bound_fwd_s`. Megatron-LM's selective recompute of "moe_act" runs the
    clamp again (`selective_recompute_fwd_s`)."""
    zero = np.zeros(len(lay))
    if not _has_expert_epilogue(model):
        return zero, zero
    bias = model.has_mlp_bias
    h = float(model.hidden_size)
    rows = tokens * model.experts_top_k * lay.etp / lay.tp
    fc1 = rows * 2.0 * model.ffn_hidden_size / lay.etp
    fwd = (8.0 * fc1 if model.glu_clamp is not None else 0.0) + (12.0 * rows * h if bias else 0.0)
    bwd = (10.0 * fc1 if model.glu_clamp is not None else 0.0) + (16.0 * rows * h if bias else 0.0)
    on = lay.framework == Framework.MEGATRON
    return (
        np.asarray(np.where(on, model.moe_share * fwd, 0.0)),
        np.asarray(np.where(on, model.moe_share * bwd, 0.0)),
    )


def _expert_epilogue_kernels(model: ModelSpec, lay: Layouts, per_expert: int) -> FloatArray:
    """Launches of one mean layer's expert epilogue in one direction (`expert_epilogue_bytes`)."""
    if not _has_expert_epilogue(model):
        return np.zeros(len(lay))
    bias = model.has_mlp_bias
    local_experts = model.num_experts / lay.floats("ep")
    kernels = (CLAMP_KERNELS if model.glu_clamp is not None else 0) + (
        per_expert * local_experts + 1.0 if bias else 0.0
    )
    return np.asarray(np.where(lay.framework == Framework.MEGATRON, model.moe_share * kernels, 0.0))


def _layer_memory_bound_fwd_s(model: ModelSpec, lay: Layouts, cluster: Cluster, tokens: FloatArray) -> FloatArray:
    h = float(model.hidden_size)
    tp = lay.floats("tp")
    # a norm and a residual add per block: 2 blocks a layer, 1 in a hybrid model
    blocks = model.blocks_per_layer / 2.0
    dropout = 2.0 * blocks * DROPOUT_MASK_BYTES * h if model.dropout else 0.0  # one per residual add
    per_token_shared = 20.0 * h * blocks + dropout
    shared = np.where(lay.seq_parallel_active, per_token_shared / tp, per_token_shared)
    activation = (6.0 if model.mlp == "gated" else 4.0) * model.mean_mlp_inner_active / tp
    rotary = 0.0 if model.learned_positions or not model.rotary else 4.0 * (model.q_dim + model.kv_dim) / tp
    kernels = np.full(len(lay), float(ELEMENTWISE_KERNELS_PER_LAYER) * blocks)
    return _kernels_s(tokens * (shared + activation + rotary), kernels, cluster)


@dataclass(frozen=True)
class EagerOp:
    """What one eager op group moves beyond its fused kernel, per element it works on (bytes),
    and its extra kernel launches, forward and backward."""

    fwd_bytes: float
    bwd_bytes: float
    fwd_kernels: int
    bwd_kernels: int


# torchtitan's Llama modules in PyTorch eager mode (torchtitan/models/llama/model.py and
# models/norms.py at 9dec370; the same code at 157a12c56 and 9515a140b), bf16 activations (FSDP2
# param_dtype bf16), counted kernel by kernel (each reads its inputs and writes its output once),
# less what `_layer_memory_bound_fwd_s` charges for the fused op (forward; the backward is charged
# twice that). Backward formulas are autograd's (tools/autograd/derivatives.yaml: mul, _to_copy,
# pow_backward = grad * (2 * self.pow(1)), where pow(1) is a copy, mean_backward = expand / n).
#  * RMSNorm, per element of h: `output = (x.float() * torch.rsqrt(x.float().pow(2).mean(-1,
#    keepdim=True) + eps)).type_as(x); output * weight`:
#      forward  float() 2+4, pow 4+4, mean 4, (+eps, rsqrt: per token), x * r 4+4, type_as 4+2,
#               * weight 2+2 = 36 B in 8 kernels; fused: read x, write y, 4 B in 1 => +32 B, +7
#      backward * weight: g*w 2+2, g*y 2+2+2 and its sum over tokens 2 (12); type_as's cast 2+4
#               (6); x * r: g*r 4+4, g*x 4+4+4 and its sum over h 4 (24); rsqrt's 3 per-token
#               kernels; mean's expand / n, write 4 (4); pow: copy 4+4, * 2 4+4, * g 4+4+4 (28);
#               the two gradients of x.float() added 4+4+4 (12); the cast back 4+2 (6)
#               = 92 B in 16 kernels; charged 2 x 4 B in 2 => +84 B, +14
#  * SwiGLU `F.silu(w1(x)) * w3(x)`, per element of the MLP width: silu 2+2, mul 2+2+2 = 10 B in
#    2 kernels, charged 6 in 1 => +4, +1; backward g*v 6, g*silu 6, silu_backward 2+2+2 = 18 B in
#    3, charged 12 in 2 => +6, +1
#  * rotary `apply_rotary_emb`, per element of q and of k: float() 2+4, complex mul by freqs_cis
#    4+4 (freqs_cis, per token and shared by the heads, left out), type_as 4+2 = 20 B in 3 kernels
#    each for q and k, charged 4 in one for both => +16, +5; backward the same three casts and
#    mul (grad * conj(freqs_cis)), 20 B in 3 each, charged 8 in 2 => +12, +4
# The residual adds are one kernel either way; the views (reshape, view_as_complex/_real) move
# nothing. Under torchtitan's op-level selective recompute all of these run again in the backward
# (only matmuls and SDPA are saved), as the charged elementwise work does (`micro_batch_times`).
EAGER_RMSNORM = EagerOp(36.0 - 4.0, 92.0 - 2.0 * 4.0, 8 - 1, 16 - 2)
EAGER_SWIGLU = EagerOp(10.0 - 6.0, 18.0 - 2.0 * 6.0, 2 - 1, 3 - 2)
EAGER_ROTARY = EagerOp(20.0 - 4.0, 20.0 - 2.0 * 4.0, 2 * 3 - 1, 2 * 3 - 2)


def _eager_ops(model: ModelSpec, lay: Layouts, stack: Stack) -> list[tuple[EagerOp, float, FloatArray]]:
    """Each eager op group of a mean layer: (op, how many per layer, elements per token each)."""
    tp = lay.floats("tp")
    ops: list[tuple[EagerOp, float, FloatArray]] = []
    if not (model.layernorm or stack.fused_norm):
        width = np.where(lay.seq_parallel_active, model.hidden_size / tp, float(model.hidden_size))
        ops.append((EAGER_RMSNORM, float(model.norms_per_layer), np.asarray(width)))
    if model.mlp == "gated":
        ops.append((EAGER_SWIGLU, 1.0, np.asarray(model.mean_mlp_inner_active / tp)))
    if not model.learned_positions and model.rotary:
        ops.append((EAGER_ROTARY, 1.0, np.asarray((model.q_dim + model.kv_dim) / tp)))
    return ops


def _eager(lay: Layouts, stack: Stack) -> BoolArray:
    """torchtitan's model run eagerly (`Stack.compiled` false); other frameworks fuse their own."""
    return np.asarray((lay.framework == Framework.TORCHTITAN) & (not stack.compiled))


def eager_extra_bytes(
    model: ModelSpec, lay: Layouts, stack: Stack, tokens: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """Bytes one mean layer's eager elementwise ops move per micro-batch on one GPU beyond the fused
    kernels charged, (forward, backward); 0 unless the framework is torchtitan and the stack not
    `compiled` (Megatron-LM and DeepSpeed run their own fused kernels). Per token: each RMSNorm
    (none for a LayerNorm model, `F.layer_norm` being one kernel, nor with the Triton norm,
    `Stack.fused_norm`) over h (h/TP with sequence parallelism), SwiGLU over the active MLP width
    / TP (a plain MLP's activation is one kernel), rotary over q and k / TP (none with learned
    positions); see `EAGER_RMSNORM`, `EAGER_SWIGLU`, `EAGER_ROTARY`."""
    fwd = np.zeros(len(lay))
    bwd = np.zeros(len(lay))
    for op, count, width in _eager_ops(model, lay, stack):
        fwd = fwd + count * op.fwd_bytes * width
        bwd = bwd + count * op.bwd_bytes * width
    on = _eager(lay, stack)
    return np.asarray(np.where(on, tokens * fwd, 0.0)), np.asarray(np.where(on, tokens * bwd, 0.0))


def eager_extra_kernels(model: ModelSpec, lay: Layouts, stack: Stack) -> tuple[FloatArray, FloatArray]:
    """Extra kernel launches of one mean layer's eager ops, (forward, backward) (`eager_extra_bytes`)."""
    ops = _eager_ops(model, lay, stack)
    fwd = sum(count * op.fwd_kernels for op, count, _ in ops)
    bwd = sum(count * op.bwd_kernels for op, count, _ in ops)
    on = _eager(lay, stack)
    return np.asarray(np.where(on, float(fwd), 0.0)), np.asarray(np.where(on, float(bwd), 0.0))


@dataclass(frozen=True)
class CastBytes:
    """Bytes an FP8 recipe's cast kernels move per element of each GEMM operand of a linear
    layer (forward: input X, weight W; backward: W again and the output gradient dY)."""

    input_fwd: float
    weight_fwd: float
    weight_bwd: float
    grad_output_bwd: float
    rescale_bwd: float  # per element of dX and dW: the backward GEMMs' outputs rescaled in a separate pass
    wgrad_fp8: bool  # the weight-gradient GEMM runs in FP8 (else BF16)


# torchao's own roofline of its float8 training recipes (pytorch/ao@853f87d1
# torchao/testing/training/roofline_utils.py `get_tensor_memory_traffic_ovhd_s`, the
# benchmarks/float8/float8_roofline.py default without fusion modelling), bf16 in, fp8 out
# (2 B read, 1 B written per element and pass):
#  * tensorwise: X and dY: an amax pass (read 2) and one cast writing both layouts (2 + 1 + 1);
#    W: amax (2) and a cast (2 + 1) in the forward, a second cast (2 + 1) for the backward.
#  * rowwise: X and dY: a cast along rows that also writes a transposed bf16 copy (2 + 1 + 2)
#    and a cast of that copy along the other axis (2 + 1); W: a cast (2 + 1) in the forward,
#    a transpose (2 + 2) and its cast (2 + 1) in the backward. Its backward GEMMs run with
#    use_fast_accum=False (Float8LinearConfig's default gemm_config_grad_input/grad_weight,
#    torchao/float8/config.py), for which `addmm_float8_unwrapped` (torchao/float8/float8_ops.py
#    at 853f87d1 and at 890e0ac8) calls the tensorwise cuBLAS kernel and rescales its output
#    afterwards ("The rowwise CUTLASS-based kernel is so slow without fast-accum"), one more
#    kernel per GEMM that reads and writes the bf16 output (pytorch/ao issue #2184): 2 + 2.
#  * rowwise_with_gw_hp: X and dY cast once along rows (2 + 1); W twice (2 + 1 each); the
#    weight-gradient GEMM stays in bf16 (its X and dY casts are ScalingType.DISABLED).
#  * mxfp8: every operand cast along both axes in 32-element blocks, two kernels (2 + 1 each);
#    the 1/32 e8m0 scales are left out.
# Transformer Engine's delayed scaling ("delayed", Megatron-LM's default recipe) fuses the cast
# of an activation into the kernel that produces it and reuses a weight's cast across
# micro-batches: 3 B per activation input in the forward (read bf16, write fp8), the backward
# twice that, weights not counted (`fp8_cast_bytes`).
TORCHAO_CASTS: dict[str, CastBytes] = {
    "tensorwise": CastBytes(6.0, 5.0, 3.0, 6.0, 0.0, True),
    "rowwise": CastBytes(8.0, 3.0, 7.0, 8.0, 4.0, True),
    "rowwise_with_gw_hp": CastBytes(3.0, 3.0, 3.0, 3.0, 0.0, False),
    "mxfp8": CastBytes(6.0, 3.0, 3.0, 6.0, 0.0, True),
}
DELAYED_CAST_BYTES = 3.0


def mlp_outer_width(model: ModelSpec, lay: Layouts) -> FloatArray:
    """Per token of the micro-batch, the elements of the h-wide tensors one GPU's first MLP GEMMs
    read (and its last MLP GEMMs write), mean over the layers: h in a dense layer (gathered over
    TP); in an MoE layer the routed copies, R/T = k ETP/TP rows of h as in `moe_permute_bytes`
    (Megatron-Core's TEGroupedMLP quantises its permuted input, one row per routed copy), plus h
    for the shared experts (one SharedExpertMLP on every token)."""
    h = float(model.hidden_size)
    if not model.is_moe:
        return np.full(len(lay), h * model.dense_mlp_share)
    routed = model.experts_top_k * h * lay.floats("etp") / lay.floats("tp")
    shared = h if model.num_shared_experts else 0.0
    return np.asarray(model.dense_mlp_share * h + model.moe_share * (routed + shared))


def fp8_cast_bytes(model: ModelSpec, lay: Layouts, stack: Stack, tokens: FloatArray) -> tuple[FloatArray, FloatArray]:
    """Bytes the FP8 casts of one mean layer move per micro-batch on one GPU, (forward, backward);
    0 unless the precision is fp8 (`TORCHAO_CASTS`). Per token, the GEMMs' activation inputs are
    the QKV input (h, gathered over TP), the first MLP GEMMs' (`mlp_outer_width`) and the output
    projection's and second MLP projection's (a*d/TP, f/TP): one cast per distinct tensor
    (Inductor's common-subexpression elimination merges the identical casts of torchtitan's
    separate wq, wk, wv or w1, w3 inputs); the output gradients are those of every projection
    (QKV and the MLP's up projections split over TP, the attention output projection's h and the
    last MLP GEMMs' `mlp_outer_width`); rowwise's rescaled input gradients are counted like the
    inputs (a lower bound: separate wq, wk, wv each have one). The weights are the layer's active
    local matrices (for MoE, a lower bound)."""
    h = float(model.hidden_size)
    tp = lay.floats("tp")
    outer = mlp_outer_width(model, lay)
    # the mixers' first and last linears: QKV and the output projection on the attention layers,
    # in_proj and out_proj on a hybrid model's Mamba layers
    mixer_in = h * (model.attention_share + model.mamba_share)
    mixer_out = model.q_dim * model.attention_share + model.mamba_inner * model.mamba_share
    inputs = mixer_in + outer + (mixer_out + model.mean_mlp_inner_active) / tp
    fp8 = lay.precision == Precision.FP8
    if stack.fp8_recipe == "delayed":
        fwd = np.where(fp8, DELAYED_CAST_BYTES * tokens * inputs, 0.0)
        return np.asarray(fwd), np.asarray(2.0 * fwd)
    cast = TORCHAO_CASTS[stack.fp8_recipe]
    up = 2.0 if model.mlp == "gated" else 1.0
    out_width = float(model.num_heads * (model.v_head_dim or model.head_dim))
    attention_in = (model.attention_matmul_params - out_width * h) / h
    mixer_widths = attention_in * model.attention_share + model.mamba_in_width * model.mamba_share
    grad_outputs = (mixer_widths + up * model.mean_mlp_inner_active) / tp + mixer_in + outer
    weights = model.mean_matmul_params_active / tp
    fwd = tokens * cast.input_fwd * inputs + cast.weight_fwd * weights
    bwd = (
        tokens * (cast.grad_output_bwd * grad_outputs + cast.rescale_bwd * inputs)
        + (cast.weight_bwd + cast.rescale_bwd) * weights
    )
    return np.asarray(np.where(fp8, fwd, 0.0)), np.asarray(np.where(fp8, bwd, 0.0))


def selective_recompute_fwd_s(model: ModelSpec, lay: Layouts, cluster: Cluster, stack: Stack, tokens: FloatArray,
                              attention: FloatArray, permute_fwd: FloatArray) -> FloatArray:  # fmt: skip
    """Megatron-LM's selective recompute per micro-batch and mean layer: each module of
    `Stack.recompute_modules` (where its checkpoint wraps code: the `stack` module docstring) runs
    its forward again in the backward, priced as in the forward:
      core_attn       the attention core (`attention`, flash or not);
      layernorm       the separate norms (the input norm of MLA layers, the pre-MLP norm of MoE
                      layers), memory-bound: read and write 2h each, one kernel each;
      mla_up_proj     the Q and KV up-projection GEMMs and RoPE (`_mla_up_proj_fwd_s`);
      mlp             a dense layer's MLP GEMMs and activation;
      moe             an MoE layer's router, routed and shared experts' GEMMs, activation, token
                      permutation (`permute_fwd`); its dispatch and combine again in
                      `traffic.ep_per_layer_s`;
      moe_act         the routed experts' activation (and GPT-OSS's clamp, `expert_epilogue_bytes`);
      shared_experts  the shared experts' GEMMs and activation.
    Nested checkpoints run again inside the outer one's recompute and once more in its backward, so
    the times add up. The tensor-parallel collectives inside a recomputed MLP or MoE layer (the
    sequence-parallel all-gather and reduce-scatter) run again too; not priced (a lower bound)."""
    modules = stack.recompute_modules
    h = float(model.hidden_size)
    tp = lay.floats("tp")
    one = np.ones(len(lay))
    act = 6.0 if model.mlp == "gated" else 4.0  # activation bytes per element of the MLP width
    moe_share = model.moe_share if model.is_moe else 0.0
    dense_share = model.dense_mlp_share
    total = np.where("core_attn" in modules, attention, 0.0)
    if "layernorm" in modules:
        norms = (1.0 if model.is_mla else 0.0) + moe_share
        per_token = np.where(lay.seq_parallel_active, 4.0 * h / tp, 4.0 * h)
        total = total + _kernels_s(tokens * per_token * norms, norms * one, cluster)
    if "mla_up_proj" in modules:
        total = total + _mla_up_proj_fwd_s(model, lay, cluster, tokens)
    if not modules & {"mlp", "moe", "moe_act", "shared_experts"}:
        return np.asarray(total)
    parts = _gemm_parts(model, lay, cluster, tokens)
    routed_inner = float(model.experts_top_k * model.ffn_hidden_size) if model.is_moe else 0.0
    shared_inner = model.num_shared_experts * float(model.shared_expert_ffn or model.ffn_hidden_size)
    if "mlp" in modules:
        dense_ffn = float(model.dense_ffn_hidden_size or model.ffn_hidden_size)
        total = total + dense_share * (parts["dense"] + _kernels_s(tokens * act * dense_ffn / tp, one, cluster))
    if model.is_moe and "moe" in modules:
        gemms = parts["routed"] + parts["shared"] + parts["router"]
        activation = _kernels_s(tokens * act * (routed_inner + shared_inner) / tp, one, cluster)
        total = total + moe_share * (gemms + activation) + permute_fwd
    if model.is_moe and "moe_act" in modules:
        clamp: float | FloatArray = 0.0
        if model.glu_clamp is not None:
            rows = tokens * model.experts_top_k * lay.etp / tp
            clamp = _kernels_s(8.0 * rows * 2.0 * model.ffn_hidden_size / lay.etp, CLAMP_KERNELS * one, cluster)
        total = total + moe_share * (_kernels_s(tokens * act * routed_inner / tp, one, cluster) + clamp)
    if model.is_moe and "shared_experts" in modules and model.num_shared_experts:
        activation = _kernels_s(tokens * act * shared_inner / tp, one, cluster)
        total = total + moe_share * (parts["shared"] + activation)
    return np.asarray(total)


def head_fwd_s(model: ModelSpec, lay: Layouts, cluster: Cluster) -> FloatArray:
    """LM head GEMM (kept in BF16 under FP8 training) and the fp32 cross entropy, forward."""
    tokens = lay.tokens_per_micro_batch
    vocab = model.vocab_size / lay.tp
    ones = np.ones_like(tokens)
    gemm = gemm_s(tokens, vocab, model.hidden_size * ones, bf16_rate(cluster), cluster)
    return np.asarray(gemm + _memory_s(tokens * vocab * 4.0 * 2.0, cluster))


def eh_proj_fwd_s(model: ModelSpec, lay: Layouts, cluster: Cluster) -> FloatArray:
    """An MTP module's eh_proj, forward: [T, 2h] x [2h, h/TP], a Transformer Engine linear in
    Megatron-LM (multi_token_prediction.py builds it from the spec's column-parallel linear), so at
    the layout precision's GEMM rate. Its two norms move a few T*h bytes: left out like the
    embedding lookup."""
    tokens = lay.tokens_per_micro_batch
    h = float(model.hidden_size)
    ones = np.ones_like(tokens)
    return gemm_s(tokens, h / lay.floats("tp"), 2.0 * h * ones, matmul_rate(cluster, lay), cluster)


def micro_batch_times(model: ModelSpec, lay: Layouts, cluster: Cluster, stack: Stack) -> MicroBatchTimes:
    """One layer's times and the LM head's, per micro-batch. (The first stage's extra work, the
    embedding lookup, moves T*h*2 bytes: negligible next to the head's GEMM.)

    Recompute, per micro-batch: full recompute runs the forward of the recomputed layers again;
    Megatron's selective recompute runs its modules again (`selective_recompute_fwd_s`; by default
    core attention, flash or not: Megatron-Core checkpoints it whatever the backend), DeepSpeed's
    core attention; torchtitan's op-level policy recomputes
    every other matmul and all elementwise work (about half the GEMM time plus the memory-bound
    kernels; the attention output is saved unless `Stack.attention_saved` is false)."""
    tokens = lay.tokens_per_micro_batch
    gemms = _layer_gemms_fwd_s(model, lay, cluster, tokens)
    # rowwise_with_gw_hp keeps the weight-gradient GEMM in BF16
    wgrad = gemms
    # the routed experts' GEMMs apart: only the combined 1F1B's windows read them (`traffic.a2a_hidden_s`)
    paired = model.is_moe and stack.moe_a2a_overlap
    routed = routed_gemms_fwd_s(model, lay, cluster, tokens, matmul_rate(cluster, lay)) if paired else 0.0 * tokens
    routed_wgrad = routed
    if stack.fp8_recipe in TORCHAO_CASTS and not TORCHAO_CASTS[stack.fp8_recipe].wgrad_fp8:
        bf16_wgrad = _layer_gemms_fwd_s(model, lay, cluster, tokens, bf16_rate(cluster))
        wgrad = np.asarray(np.where(lay.precision == Precision.FP8, bf16_wgrad, gemms))
        if paired:
            bf16_routed = routed_gemms_fwd_s(model, lay, cluster, tokens, bf16_rate(cluster))
            routed_wgrad = np.asarray(np.where(lay.precision == Precision.FP8, bf16_routed, routed))
    merge_fwd_bytes, merge_bwd_bytes = cp_merge_bytes(model, lay, stack)
    attention, attention_bwd = _attention_s(model, lay, cluster, stack)
    cast_fwd_bytes, cast_bwd_bytes = fp8_cast_bytes(model, lay, stack, tokens)
    memory_bound = _layer_memory_bound_fwd_s(model, lay, cluster, tokens)
    legacy = stack.moe_gather_scatter
    permute_fwd_bytes, permute_bwd_bytes = moe_permute_bytes(model, lay, tokens, legacy)
    kernels_fwd = MOE_GATHER_SCATTER_KERNELS if legacy else MOE_PERMUTE_KERNELS_FWD
    kernels_bwd = MOE_GATHER_SCATTER_KERNELS if legacy else MOE_PERMUTE_KERNELS_BWD
    permute_fwd = _kernels_s(permute_fwd_bytes, _moe_permute_kernels(model, lay, kernels_fwd), cluster)
    permute_bwd = _kernels_s(permute_bwd_bytes, _moe_permute_kernels(model, lay, kernels_bwd), cluster)
    eager_fwd_bytes, eager_bwd_bytes = eager_extra_bytes(model, lay, stack, tokens)
    eager_fwd_kernels, eager_bwd_kernels = eager_extra_kernels(model, lay, stack)
    eager_fwd = _kernels_s(eager_fwd_bytes, eager_fwd_kernels, cluster)
    eager_bwd = _kernels_s(eager_bwd_bytes, eager_bwd_kernels, cluster)
    if _has_expert_epilogue(model):
        epilogue_fwd_bytes, epilogue_bwd_bytes = expert_epilogue_bytes(model, lay, tokens)
        eager_fwd = eager_fwd + _kernels_s(
            epilogue_fwd_bytes, _expert_epilogue_kernels(model, lay, BIAS_KERNELS_PER_EXPERT_FWD), cluster
        )
        eager_bwd = eager_bwd + _kernels_s(
            epilogue_bwd_bytes, _expert_epilogue_kernels(model, lay, BIAS_KERNELS_PER_EXPERT_BWD), cluster
        )
    elementwise = memory_bound + permute_fwd + _memory_s(cast_fwd_bytes, cluster) + eager_fwd
    elementwise_bwd = 2.0 * memory_bound + permute_bwd + _memory_s(cast_bwd_bytes, cluster) + eager_bwd
    attention_bwd = attention_bwd + _memory_s(merge_bwd_bytes, cluster)
    attention = attention + _memory_s(merge_fwd_bytes, cluster)
    layer_fwd = gemms + attention + elementwise
    layer_bwd = gemms + wgrad + elementwise_bwd + attention_bwd
    if model.mamba_heads:
        mixer_fwd, mixer_bwd = mamba_mixer_s(model, lay, cluster)
        layer_fwd = layer_fwd + model.mamba_share * mixer_fwd
        layer_bwd = layer_bwd + model.mamba_share * mixer_bwd
    op_level = 0.5 * gemms + elementwise + (0.0 if stack.attention_saved else attention)
    modules = selective_recompute_fwd_s(model, lay, cluster, stack, tokens, attention, permute_fwd)
    # DeepSpeed's selective is the unfused attention core, nothing under flash attention (frameworks
    # `selective`), Megatron's its modules
    unfused_core = np.zeros_like(attention) if stack.flash_attention else attention
    selective = np.where(lay.framework == Framework.TORCHTITAN, op_level,
                         np.where(lay.framework == Framework.MEGATRON, modules, unfused_core))  # fmt: skip
    layer_recompute = np.where(
        lay.recompute == Recompute.FULL,
        lay.full_recompute_share(model.num_layers) * layer_fwd,
        np.where(lay.recompute == Recompute.SELECTIVE, selective, 0.0),
    )
    slow = 1.0 / kernel_efficiency(lay, cluster)
    return MicroBatchTimes(
        layer_fwd_s=np.asarray(slow * layer_fwd),
        layer_bwd_s=np.asarray(slow * layer_bwd),
        layer_recompute_s=np.asarray(slow * layer_recompute),
        head_fwd_s=np.asarray(slow * head_fwd_s(model, lay, cluster)),
        # read only for trained MTP modules
        eh_proj_fwd_s=np.asarray(slow * eh_proj_fwd_s(model, lay, cluster) if stack.mtp else 0.0 * tokens),
        attention_fwd_s=np.asarray(slow * attention),
        attention_bwd_s=np.asarray(slow * attention_bwd),
        layer_gemm_fwd_s=np.asarray(slow * wgrad),
        routed_fwd_s=np.asarray(slow * routed),
        routed_wgrad_s=np.asarray(slow * routed_wgrad),
    )


# The router's other calls, forward (`moe_layer_ops`), Megatron-LM d98e8a64 moe/moe_utils.py: the
# score function, the top-k and the scatters of the routing probs and of the routing map
# (`topk_routing_with_score_function`), each with a native backward.
ROUTER_E = 4.0
# With a load-balancing loss (`Stack.moe_aux_loss`; router.py `routing` calls these only when
# `is_aux_loss_enabled`): the aux-loss scores (`compute_routing_scores_for_aux_loss`), the aux loss
# (`switch_load_balancing_loss_func`), both with a native backward, and MoEAuxLossAutoScaler
# (router.py `attach_and_log_load_balancing_loss`), a Python one.
ROUTER_AUX_E = 3.0
# With --moe-router-fusion (`Stack.moe_router_fusion`) the router's calls are Transformer Engine's
# (TE d0067d0d transformer_engine/pytorch/router.py), each with a Python backward: the four of
# ROUTER_E are one FusedTopkScoreFunction (expert bias, groups and scaling inside it); the aux-loss
# scores one FusedComputeScoresForMoEAuxLoss and the aux loss one FusedAuxLoss, beside the scaler.
ROUTER_E_FUSED = 1.0


def moe_layer_ops(model: ModelSpec, lay: Layouts, stack: Stack) -> FloatArray:
    """Host dispatches of one MoE layer per micro-batch, forward + backward: the Python-level calls
    that each launch work on the GPU (a torch op, a Transformer Engine module or extension call, a
    collective), counted from Megatron-Core at d98e8a64 (paths under megatron/core/, "M") with
    Transformer Engine at d0067d0d (paths under transformer_engine/pytorch/, "TE"). A host-bound
    layer's floor is this count times the stack's host time per dispatch
    (`frameworks.MOE_HOST_S_PER_OP`, `moe_host_wait_s`).

    Forward, per layer (G: GEMM calls, E: other kernels and collectives, B: bookkeeping on the
    token counts, no backward). Python bwd: the calls whose backward is a custom autograd Function
    (or a torch.library op's registered backward) written in Python; "native": torch ops whose
    backward the autograd engine runs in C++.
      module (file: function)                  G      E                    B             Python bwd (file: Function)
      attention, GQA (transformer/attention.py 2 qkv, 5: norm, rope q      -             GEMMs: TE module/layernorm_
        SelfAttention.get_query_key_value_      proj  and k, core                        linear.py _LayerNormLinear,
        tensors, Attention.forward;                   attention, residual                linear.py _Linear; norms: TE
        transformer_layer.py)                         add; +2 q/k norms                  ops/fuser.py _OperationFuser
                                                      (qk_norm)                          AutogradFunction (TENorm);
                                                                                         rope: TE attention/rope.py
                                                                                         FusedRoPEFunc; core: TE
                                                                                         attention/dot_product_
                                                                                         attention/backends.py
                                                                                         FusedAttnFunc. Add native
      attention, MLA (transformer/multi_       4 (+1  6: norm, kv norm,    -             as GQA; rope: M fusions/
        latent_attention.py: get_query_key_     LoRA  fused rope q and kv,               fused_mla_yarn_rope_apply.py
        value_tensors, _qkv_down_projection)    q)    core attention,                    _FusedMLARoPEInplace,
        q (or q_down + q_up), kv_down, kv_up,         add; +1 q norm                     _FusedMLARoPEKVSplit. Add
        proj                                          (LoRA q)                           native
      attention's TP collectives: SP all-gathers and the reduce-scatter, GQA 2 (before qkv, after proj), MLA 5 (+1
        LoRA q: one per down and up projection input, k_pos_emb's gather_from_sequence_parallel_region, the
        reduce-scatter); TP without SP 1 (all-reduce). Python bwd: M tensor_parallel/mappings.py
        _GatherFromSequenceParallelRegion, _ReduceScatterToSequenceParallelRegion, _ReduceFromModelParallelRegion
      pre-MLP norm and the second residual add (transformer_layer.py)   E 2  Python bwd: the norm (TENorm); add native
      router (transformer/moe/router.py        1      4 (score, top-k,     2 with a      GEMM: M moe_utils.py Router
        TopKRouter.forward, routing;                  probs); +3 with      router bias   GatingLinearFunction; with
        moe_utils.topk_routing_with_score_            an aux loss          (_apply_      the aux loss,
        function)                                     (scores, loss,       expert_bias)  MoEAuxLossAutoScaler
                                                      scaler)                            (moe_utils.py); the rest
                                                                                         native
      dispatcher alltoall (moe/token_          -      permute, 2 all-to-   8 (pre-       all: permute, unpermute,
        dispatcher.py MoEAlltoAllToken                all (tokens,         process:      sorts: TE permutation.py
        Dispatcher: preprocess, dispatch_*,           probs), the          sums, count   moe_permute_mask_map_forward,
        combine_*; moe_utils.permute,                 combining all-to-    all-gather,   moe_unpermute_mask_map_
        sort_chunks_by_idxs, unpermute)               all, unpermute: 5;   device-to-    forward, moe_chunk_sort_
                                                      +2 sort by local     host)         forward (register_autograd);
                                                      expert (more than                  all-to-all: M mappings.py
                                                      one local expert)                  _AllToAll
      dispatcher flex (DeepEP, HybridEP:       -      dispatch, combine:   3 (setup_     all: M moe/fused_a2a.py
        MoEFlexTokenDispatcher,                       2                    metadata)     FusedDispatch, FusedCombine,
        _HybridEPManager)                                                                HybridEPDispatch, -Combine
      expert TP (ETP > 1, alltoall and flex alike): +3 E (tokens and probs all-gathered, the output reduce-scattered:
        dispatch_postprocess, combine_preprocess), +2 B (split lists). Python bwd: all (M mappings.py)
      experts (moe/experts.py TEGroupedMLP     2      activation: 1        1 (tolist);   GEMMs: TE module/grouped_
        .forward) fc1 and fc2 GroupedLinear                                +2 with FP8   linear.py _GroupedLinear;
                                                                           (quantization activation: M fusions/
                                                                           _padding)     fused_bias_swiglu.py
                                                                                         (Weighted)(Bias)SwiGLU
                                                                                         Function, fused_bias_geglu.py
                                                                                         WeightedBiasQuickGeGLUFunction
      GPT-OSS epilogue (TEGroupedMLP._apply_bias, the clamp around weighted_bias_quick_geglu_impl): clamp of both
        halves and their cat +3 E (CLAMP_KERNELS; `ModelSpec.glu_clamp`); the fc2 bias loop, t + b * p per local
        expert (BIAS_KERNELS_PER_EXPERT_FWD, 2), then cat and the dtype cast, +2 L + 2 E (expert biases,
        `ModelSpec.has_mlp_bias`; L local experts). Python bwd: none, all native torch ops
      shared experts (moe/shared_experts.py    2 (+1  activation, the add  -             GEMMs: TE _Linear;
        SharedExpertMLP.forward, moe_layer.py  gate)  to the routed                      activation as the experts';
        postprocess)                                  output: 2; +2 gate                 SP/TP collectives: M
                                                      (sigmoid, product);                mappings.py. Add and gate
                                                      SP +2, TP without                  native
                                                      SP +1
      FP8: each GEMM call but the router's quantizes its input: +1 E per call. Python bwd: the GEMM's Function
        quantizes its output gradient in its Python backward
    The dispatcher counts assume moe_permute_fusion on, as Megatron-Bridge's MoE providers set it.
    Router fusion (`Stack.moe_router_fusion`, --moe-router-fusion; Megatron-Bridge's perf scripts set it
    for Qwen3, GPT-OSS and DeepSeek-V3, scripts/performance/configs/{qwen/qwen3,gpt_oss/gpt_oss,
    deepseek/deepseek}_llm_pretrain.py `cfg.model.moe_router_fusion = True` at v0.2.0 .. v0.5.0) calls
    moe_utils' TE paths (`fused=self.config.moe_router_fusion`): the score, top-k and the two scatters
    become one FusedTopkScoreFunction, the aux-loss scores FusedComputeScoresForMoEAuxLoss, the loss
    FusedAuxLoss (TE router.py), each with a Python backward; the scaler stays. So with an aux loss
    (`Stack.moe_aux_loss`) the router's 7 E (6 native backwards) become 4 E (none native): the same
    count per layer, 8; without one (GPT-OSS: Megatron-Bridge's gpt_oss_bridge.py sets
    moe_router_load_balancing_type "none"; Megatron-LM's default coefficient 0.0) 4 E, all native,
    become 1 E with a Python backward: 4 dispatches, or 2 fused.
    Backward: autograd runs one backward per forward call, a GEMM call's two (dgrad and wgrad),
    every other differentiable call's one; the bookkeeping has none. Only the Python backwards cost
    the host a dispatch: a native backward node is queued by the autograd engine's C++ loop without
    Python, a few microseconds, and the GPU work it launches is in the GPU time already; it is
    priced at 0. So with N the native E calls (2 residual adds, the router's unfused but the scaler, the GPT-OSS
    epilogue, the shared experts' add and gate), a layer dispatches (G + E + B) + (2G + E - N).

    One TE GroupedLinear call is one dispatch although it launches a cuBLAS GEMM per local expert
    (Transformer Engine's multi_stream_cublas_gemm loops over the experts in C++:
    transformer_engine/common/gemm/cublaslt_gemm.cu at d0067d0d): a C++ launch costs the host a
    few microseconds, a Python-level dispatch with autograd tens. Counting those launches as
    dispatches (6 per local expert, more with FP8's per-expert casts) fits worse (step 3 of
    benchmarks/fit_presets.py: MAPE 23.6% against 17.4%, with every backward counted). GPT-OSS's
    bias loop is Python-level per expert in its forward, native in its backward. Recompute
    (selective or full) runs forward dispatches again; not counted (counting them was tried and
    put the H100 Nemotron-3-Nano rows, which recompute the whole MoE layer, 26-31% too slow:
    README, "Which errors are large").

    CUDA graphs (`Stack.cuda_graph_scope`) take dispatches off the host: a captured region is
    replayed by one launch, forward and backward. Megatron-LM d98e8a64 transformer_layer.py
    (`_get_submodules_under_cudagraphs`, `_te_cuda_graph_capture`, the TE layer's forward after it)
    captures per layer with TE's make_graphed_callables (one autograd Function whose forward and
    backward each replay a graph):
      attn            the input norm, attention and its residual add (`_forward_attention`): the
                      attention rows of the table above, forward and Python backward, and its TP
                      collectives;
      moe_router      the pre-MLP norm, the router (its GEMM, E and B: the router row)
                      and, where they are not overlapped, the shared experts (their G and E but the
                      add to the routed output, which moe_layer.py postprocess runs after the graph);
      moe_preprocess  (only with moe_router) the dispatcher's preprocess, the token counts: the B
                      of the dispatcher row but one. The device-to-host copy cannot be in a graph:
                      with this scope token_dispatcher.py moves it from before the permutation to
                      after the graph (`cuda_dtoh_point` "before_ep_alltoall", on its own stream),
                      so the host still waits there once per layer: the floor stays, smaller;
      full_iteration  the whole step one graph (Megatron-LM --cuda-graph-impl full_iteration, with
                      Megatron-Bridge's capacity-bound HybridEP buffers: no host read of the
                      counts): nothing is dispatched per layer, the count is 0.
    mlp, moe and mamba capture dense MLPs, drop-and-pad MoE layers (no floor, `Stack.token_drop`)
    and Mamba mixers: none is a dropless MoE layer's. Each captured region adds its replay, 2 a
    layer (forward, backward), whatever it holds. Evidence (benchmarks/data/runs_public.csv, each
    row's `cuda_graph_scope` read from its Megatron-Bridge recipe at the release's tag; errors at
    the per-dispatch time refitted with the scopes): the DGX-GB200 Qwen3-235B-A22B rows at MBS 1
    (attn, moe_router, moe_preprocess; 26.02 .. 26.04.01) go from +26 .. +29% with the whole count
    to within 3%, DGX-B200 Qwen3-30B-A3B at MBS 1 (moe_router, moe_preprocess; 25.11, 26.02) from
    +28%, +33% to 0%, +4%, full_iteration's 26.06 GB200 Qwen3-235B-A22B from +68% to +3%. Against
    it: the GB200/B200 Nemotron-3-Nano rows (MBS 2: attn, mamba, moe_router, moe_preprocess) go
    from -3 .. -6% to -23 .. -28%; their GB300 and B300 rows at MBS 4, which no floor ever reached,
    are -22 .. -27% with the same recipe, so that model's Blackwell GPU time is short by about a
    quarter, which the whole count hid on the MBS 2 rows. The ungraphed rows do not move with it
    (the H100 Qwen3-30B-A3B PP2 VP12 row of 26.02.01 stays +31 .. +34%)."""
    n = len(lay)
    sp = lay.seq_parallel_active
    tp_only = (lay.tp > 1) & ~sp
    local = np.maximum(model.num_experts // lay.ep, 1)
    fp8 = lay.precision == Precision.FP8
    if model.is_mla:
        lora = 1.0 if model.q_lora_rank is not None else 0.0
        attn_g, attn_e, attn_sp = 4.0 + lora, 6.0 + lora, 5.0 + lora
    else:
        attn_g, attn_e, attn_sp = 2.0, 5.0 + (2.0 if model.qk_norm != "none" else 0.0), 2.0
    attention_tp = np.where(sp, attn_sp, np.where(tp_only, 1.0, 0.0))
    router_b = 2.0 if model.router_bias else 0.0
    expert_tp = lay.etp > 1
    if stack.ep_dispatcher == "alltoall":
        dispatch_e = 5.0 + np.where(local > 1, 2.0, 0.0)
        dispatch_b = np.full(n, 8.0)
    else:
        dispatch_e = np.full(n, 2.0)
        dispatch_b = np.full(n, 3.0)
    dispatch_e = dispatch_e + np.where(expert_tp, 3.0, 0.0)
    dispatch_b = dispatch_b + np.where(expert_tp, 2.0, 0.0)
    clamp = float(CLAMP_KERNELS) if model.glu_clamp is not None else 0.0  # one call per kernel forward
    bias = np.where(model.has_mlp_bias, BIAS_KERNELS_PER_EXPERT_FWD * local + 2.0, 0.0)  # + cat, cast
    expert_e = 1.0 + clamp + bias
    expert_b = 1.0 + np.where(fp8, 2.0, 0.0)
    shared_g = shared_e = shared_native = np.zeros(n)
    if model.num_shared_experts:
        gate = 1.0 if model.shared_expert_gate else 0.0
        shared_g = np.full(n, 2.0 + gate)
        shared_e = 2.0 + 2.0 * gate + np.where(sp, 2.0, np.where(tp_only, 1.0, 0.0))
        shared_native = np.full(n, 1.0 + 2.0 * gate)  # the add to the routed output, the gate's two
    gemms = attn_g + 1.0 + 2.0 + shared_g  # attention, router, experts' fc1 and fc2, shared experts
    quantized = np.where(fp8, gemms - 1.0, 0.0)  # every GEMM call but the router's
    aux = ROUTER_AUX_E if stack.moe_aux_loss else 0.0
    router_e = (ROUTER_E_FUSED if stack.moe_router_fusion else ROUTER_E) + aux
    # unfused, every call but MoEAuxLossAutoScaler has a native backward; fused, none has
    router_native = 0.0 if stack.moe_router_fusion else router_e - (1.0 if stack.moe_aux_loss else 0.0)
    others = attn_e + attention_tp + 2.0 + router_e + dispatch_e + expert_e + shared_e + quantized
    bookkeeping = router_b + dispatch_b + expert_b
    # E calls whose backward autograd runs natively (no Python): the two residual adds, the router's
    # unfused 6 of 7, GPT-OSS's clamp and bias loop, the shared experts' add and gate (table above)
    native = 2.0 + router_native + clamp + bias + shared_native
    ops = (gemms + others + bookkeeping) + (2.0 * gemms + others - native)
    scope = stack.cuda_graph_scope
    if "full_iteration" in scope:
        return np.zeros(n)
    graphed = np.zeros(n)
    if "attn" in scope:  # forward G + E + collectives + FP8 casts; backward 2G + E - the residual add
        attn_fwd = attn_g + attn_e + attention_tp + np.where(fp8, attn_g, 0.0)
        graphed = graphed + attn_fwd + (attn_fwd + attn_g - 1.0)
    if "moe_router" in scope:
        # pre-MLP norm (1 + 1), router (G + its E + B forward; 2 GEMM backwards and its Python ones:
        # the aux-loss scaler's, with fusion every E's), the shared experts but their add (native
        # backward: not counted there)
        graphed = graphed + 2.0 + (1.0 + router_e + router_b) + 2.0 + (router_e - router_native)
        shared_fwd = shared_g + np.maximum(shared_e - 1.0, 0.0) + np.where(fp8, shared_g, 0.0)
        graphed = graphed + shared_fwd + (shared_fwd + shared_g - np.maximum(shared_native - 1.0, 0.0))
        if "moe_preprocess" in scope:
            graphed = graphed + dispatch_b - 1.0  # the device-to-host copy stays outside
    replays = np.where(graphed > 0.0, 2.0, 0.0)
    return np.asarray(ops - graphed + replays, dtype=np.float64)


# Kernels of one Mamba-2 mixer besides its GEMMs, forward (`mamba_mixer_s`): Megatron's two layout
# copies, the causal conv1d, mamba_ssm's five SSD kernels (_chunk_cumsum_fwd, _chunk_state_fwd,
# _state_passing_fwd, _bmm_chunk_fwd, _chunk_scan_fwd) and the gated RMSNorm.
MAMBA_KERNELS_FWD = 9


def mamba_mixer_s(model: ModelSpec, lay: Layouts, cluster: Cluster) -> tuple[FloatArray, FloatArray]:
    """One Mamba-2 mixer's work besides its projections, per micro-batch on one GPU, (forward,
    backward), on its d/TP channels (Megatron's MambaMixer splits the heads over TP).

    Megatron-LM d98e8a64 (megatron/core/ssm/mamba_mixer.py `_ssm_training`, the default
    `use_mamba_mem_eff_path`) copies in_proj's output to batch-major (`.contiguous()`), runs
    mamba_ssm's `mamba_split_conv1d_scan_combined` (the causal conv1d over x, B, C, then the SSD
    chunked scan with the silu(z) gate), copies the output back to sequence-major and applies the
    gated RMSNorm. The scan is tile matmuls on tensor cores in Triton kernels, like flash attention
    work on small (chunk x head-dim) tiles: its FLOPs (`ModelSpec.mamba_scan_flops_per_token`) run at
    the attention efficiency of the BF16 peak; its backward runs two matmuls per forward one plus
    what it recomputes (`ModelSpec.mamba_scan_recompute_flops_per_token`). The rest is memory-bound,
    bf16 bytes per token (w = in_proj width, c = conv channels d + 2GN, H heads):
      layout copies  read and write in_proj's output 4w, the scan's output 4d
      conv1d         read and write x, B, C: 4c
      scan I/O       read x, B, C, z, dt once 2(c + d + H), write the gated output and the
                     pre-gate output it keeps for the backward 4d
      gated norm     read and write 4d
    The backward moves twice these bytes in twice the kernels, as the other elementwise work
    (module docstring). Besides, the SSD kernels pass fp32 intermediates between them through
    memory, per chunk of Q tokens (N state size, G groups, P head dim; bytes per token):
      forward  `_chunk_cumsum_fwd` writes dA_cumsum and dt in fp32 (8H), which `_chunk_state_fwd`
               and `_chunk_scan_fwd` read again (16H); x, B and C are read a second time (2c);
               the chunk states (H P N = d N per chunk) are written in fp32 by `_chunk_state_fwd`,
               read by `_state_passing_fwd`, which writes them in bf16 for `_chunk_scan_fwd` to
               read: (4 + 4 + 2 + 2) d N / Q; C B^T (G Q Q per chunk, fp32) is written by
               `_bmm_chunk_fwd` and read by `_chunk_scan_fwd`: 8 G Q.
      backward `_mamba_chunk_scan_combined_bwd` recomputes the states (fp32 written, read, and
               written by the state passing, which returns fp32 here: 12 d N / Q) and C B^T
               (4 G Q); `_chunk_scan_bwd_dstates` writes the state gradients in fp32 (4),
               `_state_passing_bwd` reads states and gradients in fp32 and writes both in bf16
               (4 + 4 + 2 + 2), `_chunk_scan_chunk_state_bwd_dx`, `_chunk_state_bwd_db` and
               `_chunk_scan_bwd_dC` read a bf16 copy each (6): 34 d N / Q; C B^T is read by
               `_chunk_scan_chunk_state_bwd_dx` and `_chunk_scan_bwd_ddAcs_stable` (8), its fp32
               gradient written by `_chunk_scan_bwd_dcb` and read by the two `_bmm_chunk_bwd` (12):
               24 G Q.
    (mamba_ssm/ops/triton/ssd_combined.py `_mamba_chunk_scan_combined_fwd` and `_bwd` at
    state-spaces/mamba e9594ce; the small per-chunk dA and final-state tensors are left out.)
    Nemotron-3-Nano (d 4096, N 128, G 8, Q 128, H 64, c 6144): 71,168 bytes a token forward
    beside the 135,552 above, 163,840 backward."""
    rank_tokens = lay.tokens_per_micro_batch / lay.floats("tp")  # the heads and groups are split over TP
    rate = cluster.gpu.peak_bf16_flops * cluster.efficiency.attention
    scan = model.mamba_scan_flops_per_token
    d, c, w = float(model.mamba_inner), float(model.mamba_conv_channels), float(model.mamba_in_width)
    io = 4.0 * w + 4.0 * d + 4.0 * c + 2.0 * (c + d + model.mamba_heads) + 4.0 * d + 4.0 * d
    fwd_between, bwd_between = model.mamba_scan_intermediate_bytes_per_token
    kernels = np.full(len(lay), float(MAMBA_KERNELS_FWD))
    fwd = rank_tokens * scan / rate + _kernels_s(rank_tokens * (io + fwd_between), kernels, cluster)
    bwd_flops = 2.0 * scan + model.mamba_scan_recompute_flops_per_token
    bwd = rank_tokens * bwd_flops / rate + _kernels_s(rank_tokens * (2.0 * io + bwd_between), 2.0 * kernels, cluster)
    return np.asarray(fwd), np.asarray(bwd)


def moe_host_wait_s(model: ModelSpec, lay: Layouts, stack: Stack, layer_gpu_s: FloatArray) -> FloatArray:
    """Per micro-batch, what one (mean) layer waits on the host beyond its GPU time G: a dropless
    MoE layer's forward + backward takes max(H, G + k H), H = its dispatches (`moe_layer_ops`) x
    the stack's host time per dispatch (`frameworks.MOE_HOST_S_PER_OP`: mechanism and evidence
    there), k the share of H that follows the layer's host sync with the GPU idle
    (`frameworks.MOE_HOST_EXPOSED_SHARE`, why there). `layer_gpu_s` is the mean layer's forward,
    backward, recompute and exposed communication; the MoE layers (`moe_share` of them) wait
    max(H - G, k H), the dense ones never. The mean layer's GPU time stands for an MoE layer's:
    exact for all-MoE models, an average over DeepSeek-style leading dense layers otherwise.
    Token dropping (`Stack.token_drop`: static shapes, no device-to-host copy) and dense models
    wait nothing."""
    if model.moe_share == 0.0 or stack.token_drop:
        return np.zeros(len(lay))
    floor = per_framework_field(lay, "moe_host_s_per_op") * moe_layer_ops(model, lay, stack)
    exposed = MOE_HOST_EXPOSED_SHARE * floor
    return np.asarray(model.moe_share * np.maximum(floor - layer_gpu_s, exposed), dtype=np.float64)


def fastest_rate_flops(cluster: Cluster, lay: Layouts) -> FloatArray:
    """A rate no compute term of this model exceeds: every GEMM runs at most at `matmul_rate`
    (its shape factors are <= 1), the 16-bit GEMMs at `bf16_rate`, attention at the BF16 peak x
    `efficiency.attention`, all divided by the framework's kernel efficiency (<= 1); memory-bound
    work and kernel overheads only add time. So FLOPs / this rate is a lower bound on compute."""
    attention = cluster.gpu.peak_bf16_flops * cluster.efficiency.attention
    fastest = np.maximum(np.maximum(matmul_rate(cluster, lay), bf16_rate(cluster)), attention)
    return np.asarray(fastest * kernel_efficiency(lay, cluster))


def kernel_efficiency(lay: Layouts, cluster: Cluster) -> FloatArray:
    """The layout's framework's kernel throughput relative to Megatron-LM's on this hardware
    (`frameworks.kernel_efficiency_on`)."""
    return per_framework_value(lay, functools.partial(kernel_efficiency_on, cluster))


def local_params(params: StageParams, lay: Layouts, from_stage: int) -> FloatArray:
    """Parameters of one GPU's shard: divided over DP*CP (experts DP*CP/EP) from that ZeRO stage on."""
    dp_dense = lay.dp_cp
    dp_expert = lay.expert_dp
    sharded = lay.zero >= from_stage
    return np.asarray(
        np.where(sharded, params.dense / dp_dense, params.dense)
        + np.where(sharded, params.expert / dp_expert, params.expert)
    )


def optimizer_step_s(params: StageParams, lay: Layouts, cluster: Cluster, stack: Stack) -> FloatArray:
    """Once per step, memory-bound over the GPU's share of the parameters:
    - fused Adam on the optimizer's shard: fp32 master, m and v read and written (24 B; bf16
      moments, `Stack.adam_moments`, read and write 2 x 2 B less each; a partial or absent master,
      `Stack.master_weights`, reads and writes what it saves less, and then reads the bf16 weight,
      2 B, to rebuild the fp32 value: Apex's `_local_step_with_param_remainders` and `_local_step`
      without stored params), the gradient read, the bf16 weight written (2 B); FP16 adds the
      inf/NaN check of the gradients
      (dynamic loss scaling, Micikevicius et al. 2018);
    - the gradient-norm for clipping reads the gradient buffer once, and zeroing it for the next
      step writes it once (Megatron's `clip_grad_norm_fp32` and `zero_grad_buffer`; FSDP2 and
      DeepSpeed do the same over their gradient shards).
    With the optimizer offloaded, the Adam step runs on the host instead (`offload_step_s`)."""
    on_gpu = np.where(lay.offload == Offload.NONE, 1.0, 0.0)
    shard = local_params(params, lay, 1)
    grads = local_params(params, lay, 2)
    loss_scale_check = np.where(lay.precision == Precision.FP16, stack.grad_bytes, 0.0)
    master = -2.0 * stack.master_bytes_saved + (2.0 if stack.master_bytes_saved else 0.0)
    adam = on_gpu * shard * (26.0 - 2.0 * stack.moment_bytes_saved + master + stack.grad_bytes + loss_scale_check)
    return _memory_s(np.asarray(adam + 2.0 * stack.grad_bytes * grads), cluster)


def fsdp_copy_s(params: StageParams, lay: Layouts, cluster: Cluster, stack: Stack) -> FloatArray:
    """Per step, the copies FSDP2 runs around its collectives on the compute stream, memory-bound
    (mechanism and source: frameworks `GATHER_COPIES`); 0 where the framework makes none or the
    layout does not shard (ZeRO 0/1). Per parameter of the GPU's unsharded layers (TP, EP split):
    - each all-gather: the fp32 shard cast to bf16 and copied into the gather buffer (4 + 2 + 2 + 2
      B per parameter of the shard, `FrameworkSpec.param_bytes` + 6) and the gathered buffer copied
      out (2 + 2 B);
    - each reduce-scatter: the bf16 gradient copied into the reduce-dtype input (2 +
      `Stack.grad_bytes` B).
    How many of each a step runs: `frameworks.sharded_collectives_per_step`. Like the optimizer
    step it is priced per step, outside the pipeline's slot: the bubble does not stretch it."""
    on = per_framework_field(lay, "gather_copies") > 0
    if not np.any(on):
        return np.zeros(len(lay))  # Megatron and DeepSpeed layouts: skip the arithmetic
    gathers, scatters = sharded_collectives_per_step(lay)  # none at ZeRO 0/1
    whole = params.dense + params.expert
    stored = per_framework_field(lay, "param_bytes")
    gather_bytes = 2.0 * BF16_BYTES * whole + (stored + 3.0 * BF16_BYTES) * local_params(params, lay, 2)
    scatter_bytes = (BF16_BYTES + stack.grad_bytes) * whole
    copied = np.asarray(gathers * gather_bytes + scatters * scatter_bytes)
    return np.asarray(np.where(on, _memory_s(copied, cluster), 0.0))


def offload_s(params: StageParams, lay: Layouts, cluster: Cluster, stack: Stack) -> FloatArray:
    """Exposed time of offloading, per step (0 without offload).

    Optimizer offload (ZeRO-Offload, Ren et al. 2021 Sec 4; Megatron's --optimizer-cpu-offload):
    each GPU sends its gradient shard to the host (`Stack.grad_bytes` per parameter), the host
    CPUs run Adam over the node's shards (`host.cpu_adam_params_per_s`, per node), and each GPU
    receives its updated bf16 weights (2 B per parameter), over its PCIe link
    (`intra_node.pcie`). ZeRO-Offload's optional one-step delayed update is not assumed: the
    step waits for the update. Offloading the parameters too (ZeRO-Infinity, FSDP2 CPU offload)
    also brings every layer's weight shard from the host in each micro-batch's forward and
    backward (2 x 2 B per parameter of the shard). Without a `[host]` table offload is not
    possible (the `host` limit), and this term is 0.
    """
    host = cluster.host
    if host is None:
        return np.zeros(len(lay))
    shard = local_params(params, lay, 1)
    pcie = cluster.intra_node.pcie.effective_bw_bytes_per_s
    adam = shard * cluster.gpus_per_node / host.cpu_adam_params_per_s
    transfers = shard * (stack.grad_bytes + BF16_BYTES) / pcie
    per_micro_batch = np.where(lay.offload == Offload.ALL, 2.0 * BF16_BYTES * shard / pcie, 0.0)
    total = adam + transfers + np.maximum(lay.num_micro_batches, 1.0) * per_micro_batch
    return np.asarray(np.where(lay.offload == Offload.NONE, 0.0, total))


def cpu_checkpoint_s(model: ModelSpec, lay: Layouts, cluster: Cluster, stack: Stack) -> FloatArray:
    """Per layer and micro-batch, the wait for DeepSpeed's CPU checkpointing (`Stack.cpu_checkpointing`,
    mechanism there): the layer's input (2h per token, the SP shard with sequence parallelism) goes
    to the host in the forward and comes back before the recompute in the backward, each a blocking
    copy on the compute stream, over the GPU's PCIe link (`intra_node.pcie`, as offload traffic).
    The copies land in pageable host memory (`tensor.to('cpu')` without pin_memory), which the
    driver stages through pinned buffers, so the link's rate is an upper bound on theirs: a
    lower bound on the wait."""
    if not stack.cpu_checkpointing:
        return np.zeros(len(lay))
    nbytes = layer_input_bytes_per_token(model, lay) * lay.tokens_per_micro_batch
    wait = 2.0 * nbytes / cluster.intra_node.pcie.effective_bw_bytes_per_s
    return np.asarray(np.where(cpu_checkpointed(lay, stack), wait, 0.0))

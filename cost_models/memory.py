"""Memory of the most loaded GPU: weights, gradients, optimizer states, activations, reserve.

Model states (mixed-precision Adam, Rajbhandari et al. 2020 "ZeRO", Sec 3.1), per parameter, as
each framework stores them (`frameworks.FrameworkSpec`): Megatron-LM and DeepSpeed keep bf16
weights (2 B), gradients of `Stack.grad_bytes` (Megatron's fp32 main grads 4 B, DeepSpeed's
bf16 2 B) and 12 B of optimizer state (fp32 master copy, Adam m and v); torchtitan's FSDP2 keeps
the fp32 parameters themselves (4 B, the master copy), fp32 gradients and Adam's m and v (8 B).
ZeRO stage 1 shards the optimizer states over the data-parallel group, stage 2 also the
gradients, stage 3 also the parameters, plus a two-layer buffer of gathered bf16 weights (the
prefetch of the next layer) and, under FSDP2, the gathered bf16 LM head, which torchtitan does
not reshard between its forward and backward (`frameworks.HEAD_GATHERED`). FSDP2 shards the fp32
parameters from stage 2 on; at stage 2 ("reshard never") it keeps the gathered bf16 copy of the
whole stage between forward and backward. Offloading the optimizer (ZeRO-Offload, Megatron's
--optimizer-cpu-offload) moves the optimizer states to host memory; offloading everything
(ZeRO-Infinity, FSDP2 CPU offload) moves the sharded parameters and gradients there too, leaving
the gather buffers on the GPU.
The data-parallel group of dense weights is DP*CP (context-parallel ranks hold the same
weights); expert weights are replicated over DP*CP/EP ranks.

Weights per stage: its layers, each with its dense part / TP and E/EP experts / TP, plus the
vocab-parallel embedding (V*h/TP, and learned positions) on the first stage and the LM head
(V*h/TP, also when tied and p > 1: Megatron keeps a copy there) with the final norm on the last.

Activations per layer and micro-batch, 16-bit, per token, generalising Korthikanti et al. 2022
(arXiv:2205.05198, Sec 4.1; 34*s*b*h + 5*a*s^2*b for GPT) to GQA and gated MLPs:
  kept on every TP rank unless sequence parallel:  2 norm inputs 4h, QKV and MLP inputs 4h,
                                                   dropout masks 2h (only with dropout)
  split over TP:  Q 2*a*d, K and V 4*g*d, attention output 2*a*d,
                  MLP inner: gated 6f (gate, up, product), plain 4f (GELU input, output),
                  times top-k for MoE (+ 2h for the dispatched copy of each token, see below),
                  without flash attention the scores: a*s*(2 softmax + 3 dropout mask/output)
For GPT (f = 4h, g = a, dropout) this is exactly 10h + 24h + 5as: Korthikanti's 34 + 5as/h.
The dispatched copy of a routed token (2h per expert it goes to) is the input the first expert
GEMM saves for its weight gradient. Tensor-parallel experts need every token of their group in
full width: Megatron's token dispatchers gather the tokens over the expert-TP x EP group
(`MoEAllGatherTokenDispatcher.token_dispatch`, "[(S/TP)*B, H] -> [S*B*EP, H]", the default
--moe-token-dispatcher-type allgather; the all-to-all dispatcher all-gathers over expert TP after
its all-to-all), so each rank keeps the copies of the tokens of all ETP sequence shards:
2h x top-k x ETP / TP per token of its micro-batch, not 2h x top-k / TP (megatron/core/transformer/
moe/token_dispatcher.py and experts.py at d98e8a64; core_v0.6.0 holds a second such copy, the
expert output it scales by the router probabilities in `token_unpermutation`: `Stack.moe_gather_scatter`).
Hybrid models (`ModelSpec.layer_pattern`) have one block per layer, its norm input and its first
linear's input replicated (4h, not 8h); the attention terms count on the attention layers
(`attention_share`) and each Mamba-2 mixer keeps what Megatron's MambaMixer saves (`mamba_saved_bytes`).
Selective recompute: Megatron's drops what its modules save (`selective_dropped_bytes`,
`Stack.recompute_modules`); its default, core attention, the a*s score terms, which flash attention
never stores anyway; torchtitan's op-level policy (`_apply_op_sac`: save every other matmul's
output and the attention output, recompute the rest) keeps the layer input 2h, Q 2ad, V 2gd, the
MLP's first projection 2f, the second's output 2h and the attention output 2ad; where the policy
does not name the attention kernel the stack runs (`Stack.attention_saved` false: cuDNN attention
on B200 in torchtitan of May to November 2025, whose save list names only the flash and
memory-efficient SDPA ops) that output is recomputed, not kept: 2ad less. Full recompute
keeps only each layer's 2h input (split over TP with sequence parallelism) plus one layer's full
activations while it is recomputed; block recompute of N layers per chunk does so for N of them.
Context parallelism divides the tokens per GPU by CP; all-gather CP also holds one layer's
full-sequence K and V while its attention runs (`cp_gathered_kv_bytes`); PyTorch's (torchtitan)
also holds an fp32 dQ and the fp32 dK/dV it passes around the ring during one layer's attention
backward (`cp_backward_buffer_bytes`). With K/V repeated to every query head before attention
(`Stack.kv_repeated`, torchtitan of 2024) the attention saves, and CP gathers, K/V of a heads
instead of g.
FP8 training with Transformer Engine (Megatron-LM; `frameworks.FP8_SAVES`) keeps each linear layer's
input in FP8 for the weight gradient, 1 B instead of 2: the QKV and MLP inputs (the norm outputs)
take 2h instead of 4h, the second MLP GEMM's input (the product, or the GELU output) f instead of
2f, a routed token's dispatched copy h instead of 2h; the attention output gains an FP8 copy (a d)
next to the bf16 one flash attention keeps for its own backward (without flash attention that
output is only the projection's input: a d instead of 2 a d).

Micro-batches in flight: under 1F1B stage r of p holds min(p - r, m) micro-batches. Megatron's
interleaved schedule warms up 2(p - r - 1) + (v - 1)p chunk-micro-batches before its first
backward (`get_pipeline_model_parallel_warmup_microbatches`, schedules.py), so stage r holds
(2(p - r - 1) + (v - 1)p + 1) chunks of l/(p v) layers at its peak: the first stage
p(1 + (p - 1)/(p v)) micro-batches' worth (Korthikanti Sec 4.2.3), the last ((v - 1)p + 1)/v.
PyTorch's pipelining (torchtitan) also keeps a receive buffer per micro-batch for the hidden states
and for their gradient (`recv_buffer_bytes`, frameworks `pp_recv_buffers`), and each forwarded
micro-batch's stage output until its backward (`stage_output_bytes`).
The first stage holds the most; the last adds the loss at its peak (`loss_bytes_per_token`): per
token V/TP logits of the framework's `loss_bytes_per_logit` (Megatron-LM 6: bf16 logits and one
fp32 copy turned in place into the softmax; torchtitan 12: eager cross entropy's fp32 log-softmax
and two fp32 gradients in the backward; `frameworks.LOSS_BYTES`; with TP > 1 torchtitan's loss
parallelism holds 16, `frameworks.TP_LOSS_BYTES`) with the stack's loss "eager";
4 (bf16 logits and their bf16 gradient, `frameworks.COMPILED_LOSS_BYTES`) when compiled, both
with the LM head's saved 2h input (2h/TP under sequence parallelism where the framework saves the
shard, `frameworks.HEAD_INPUT_GATHERED`); with torchtitan 0.3.0's chunked loss one chunk's logits
(1/8) plus the fp32 gradient of the hidden states, 4h (and 2h of chunk copies when a micro-batch
holds several sequences). Where PyTorch's pipelining keeps every micro-batch's output to the end
of the step (`Stack.pp_outputs_kept`), the last stage also holds the bf16 logits of the earlier
micro-batches (`kept_outputs_bytes`).

`other` is the cluster's reserve (CUDA context, cuBLAS workspace, NCCL buffers, allocator
fragmentation), see `memory_reserve_bytes` in the hardware presets, plus NCCL's NVLink SHARP
buffers where the node has them (`nvls_buffer_bytes`), which depend on the layout, and Transformer
Engine's userbuffers where TP communication overlaps its GEMMs (`userbuffers_bytes`). Both are
allocated outside PyTorch's caching allocator.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from paraplan.cost_models.candidates import BoolArray, FloatArray, IntArray, Layouts
from paraplan.cost_models.frameworks import (
    COMPILED_LOSS_BYTES,
    LOSS_CHUNKS,
    cp_sdpa_merge,
    deferred_grad_sync,
    per_framework_field,
)
from paraplan.cost_models.layout import CpComm, Framework, Offload, Precision, Recompute
from paraplan.cost_models.models import ModelSpec
from paraplan.cost_models.stack import BF16_BYTES, FP32_BYTES, Stack
from paraplan.cost_models.stages import stage_layers
from paraplan.hardware_specs.schema import Cluster
from paraplan.hardware_specs.topology import members_on_node

MEMORY_TERMS = ("params", "grads", "optimizer", "activations", "other")
ZERO3_PREFETCH_LAYERS = 2  # the layer being computed and the next one, gathered ahead

Stage = bool | BoolArray


@dataclass(frozen=True)
class StageParams:
    """Parameters held by one GPU of a stage, split by how they are replicated."""

    dense: FloatArray  # replicated over DP*CP
    expert: FloatArray  # replicated over DP*CP/EP
    layer_max: FloatArray  # the largest single layer on this GPU (ZeRO-3 gather buffer)
    layers: FloatArray  # layers on this GPU (ZeRO-3 gathers them one at a time)
    head: FloatArray | float = 0.0  # the LM head and final norm on this GPU (last stage; part of `dense`)

    FIELDS = ("dense", "expert", "layer_max", "layers", "head")


@dataclass(frozen=True)
class MemoryBreakdown:
    params: FloatArray
    grads: FloatArray
    optimizer: FloatArray
    activations: FloatArray
    other: FloatArray

    @property
    def total(self) -> FloatArray:
        return np.asarray(self.params + self.grads + self.optimizer + self.activations + self.other)

    def take(self, index: np.ndarray) -> MemoryBreakdown:
        return MemoryBreakdown(*(getattr(self, t)[index] for t in MEMORY_TERMS))

    @staticmethod
    def concat(parts: list[MemoryBreakdown]) -> MemoryBreakdown:
        return MemoryBreakdown(*(np.concatenate([getattr(p, t) for p in parts]) for t in MEMORY_TERMS))


def stage_params(model: ModelSpec, lay: Layouts, layers: FloatArray, first: Stage, last: Stage,
                 mtp: FloatArray | float = 0.0) -> StageParams:  # fmt: skip
    """A GPU of a stage holding `layers` layers; `first`/`last`: whether it is the first/last stage
    (per candidate, or for all). Layers are priced as the model's mean layer. `mtp`: the trained
    multi-token-prediction modules on this stage (`Stack.mtp`, the last stage): each one's own
    parameters (`ModelSpec.mtp_module_params`: eh_proj and the layer's matrices TP-sharded, its
    routed experts over EP x expert TP, the norms whole), and, off the first stage, Megatron-LM's
    copy of the word embedding (gpt_model.py at d98e8a64: `self.embedding` where
    `pre_process or mtp_process`)."""
    tp = lay.floats("tp")
    norms = model.layer_norm_params
    dense_layer = (model.mean_layer_dense_params - norms) / tp + norms
    expert_layer = model.mean_layer_expert_params / lay.ep / lay.etp
    positions = model.embedding_params - model.vocab_size * model.word_embed_dim
    embedding = model.vocab_size * model.word_embed_dim / tp + positions
    head_is_separate = (not model.tied_embeddings) | (lay.pp > 1)
    head_matrix = model.vocab_size * model.word_embed_dim / tp
    head = np.where(head_is_separate, head_matrix, 0.0) + model.final_norm_params
    dense = layers * dense_layer + np.where(first, embedding, 0.0) + np.where(last, head, 0.0)
    expert = layers * expert_layer
    if np.any(np.asarray(mtp) > 0):  # most questions train no MTP module: skip the arithmetic
        h = model.hidden_size
        routed = model.num_experts * model.expert_params if model.mtp_layer_is_moe else 0
        mtp_matrices = 2 * h * h + model.last_layer_params() - routed - norms
        mtp_dense = mtp_matrices / tp + norms + 3 * model.norm_params
        mtp_copy = np.where(np.asarray(mtp) > 0, np.where(first, 0.0, embedding), 0.0)
        dense = dense + mtp * mtp_dense + mtp_copy
        expert = expert + mtp * routed / lay.ep / lay.etp
    return StageParams(
        dense=np.asarray(dense), expert=np.asarray(expert),
        layer_max=np.asarray(dense_layer + expert_layer), layers=np.asarray(layers + mtp, dtype=np.float64),
        head=np.asarray(np.where(last, head_matrix + model.final_norm_params, 0.0)),
    )  # fmt: skip


def optimizer_state_bytes(lay: Layouts, stack: Stack) -> FloatArray:
    """Optimizer state per parameter: the framework's (fp32 master and moments) less what bf16
    moments save (`Stack.adam_moments`) and what a partial or absent master copy saves
    (`Stack.master_weights`)."""
    return np.asarray(per_framework_field(lay, "optimizer_bytes") - stack.moment_bytes_saved - stack.master_bytes_saved)


def model_state_bytes(params: StageParams, lay: Layouts, stack: Stack) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(weights, gradients, optimizer states) in bytes on the GPU under the ZeRO stage."""
    dp_dense = lay.dp_cp
    dp_expert = lay.expert_dp

    def count(sharded: BoolArray) -> FloatArray:
        dense = np.where(sharded, params.dense / dp_dense, params.dense)
        return np.asarray(dense + np.where(sharded, params.expert / dp_expert, params.expert))

    params_sharded = lay.zero >= per_framework_field(lay, "params_sharded_from")
    on_host_all = lay.offload == Offload.ALL
    # ZeRO-3: two gathered layers, and the gathered LM head where the framework keeps it
    # (frameworks.HEAD_GATHERED; with tied embeddings the shared matrix, gathered for the head).
    head = np.where(per_framework_field(lay, "head_gathered") > 0, params.head, 0.0)
    gathered = np.where(
        lay.zero >= 3,
        BF16_BYTES * (ZERO3_PREFETCH_LAYERS * params.layer_max + head),
        np.where(params_sharded, BF16_BYTES * (params.dense + params.expert), 0.0),
    )
    stored = per_framework_field(lay, "param_bytes") * count(params_sharded)
    weights = np.where(on_host_all, 0.0, stored) + gathered
    # Deferred sync (torchtitan with PP): whole gradients accumulate, plus the shard the final
    # reduce-scatter writes.
    deferred = deferred_grad_sync(lay)
    whole = stack.grad_bytes * count(np.zeros(len(lay), dtype=bool))
    sharded_grads = stack.grad_bytes * count(lay.zero >= 2)
    grads = np.where(on_host_all, 0.0, np.where(deferred, whole + np.where(lay.zero >= 2, sharded_grads, 0.0),
                                                 sharded_grads))  # fmt: skip
    optimizer = np.where(lay.offload != Offload.NONE, 0.0, optimizer_state_bytes(lay, stack) * count(lay.zero >= 1))
    return np.asarray(weights), np.asarray(grads), np.asarray(optimizer)


def host_state_bytes(params: StageParams, lay: Layouts, stack: Stack) -> FloatArray:
    """Bytes per GPU that offload keeps in host memory: the optimizer states (and the master
    copy), plus the sharded parameters and gradients when everything is offloaded."""
    dp_dense = lay.dp_cp
    local = params.dense / dp_dense + params.expert / lay.expert_dp
    optimizer = np.where(lay.offload != Offload.NONE, optimizer_state_bytes(lay, stack) * local, 0.0)
    rest = np.where(
        lay.offload == Offload.ALL, (per_framework_field(lay, "param_bytes") + stack.grad_bytes) * local, 0.0
    )
    return np.asarray(optimizer + rest)


def _selective_op(lay: Layouts) -> BoolArray:
    """torchtitan's "selective" is its op-level policy (see the module docstring)."""
    return np.asarray((lay.recompute == Recompute.SELECTIVE) & (lay.framework == Framework.TORCHTITAN))


def activation_bytes_per_token_layer(model: ModelSpec, lay: Layouts, stack: Stack) -> FloatArray:
    """Stored activations of one layer per token on one GPU, per the table in the docstring."""
    h = model.hidden_size
    tp = lay.floats("tp")
    dropout = 1.0 if model.dropout else 0.0
    blocks = model.blocks_per_layer / 2.0  # norm input and first linear input per block
    replicated = 8.0 * h * blocks + 2.0 * h * dropout
    mlp_inner: float | FloatArray = (6.0 if model.mlp == "gated" else 4.0) * model.mean_mlp_inner_active
    if model.is_moe:
        # the dispatched copy of each token, gathered over the expert-TP group (module docstring),
        # and with Stack.moe_gather_scatter the expert output the probability multiply saves
        copies = 2.0 if stack.moe_gather_scatter else 1.0
        mlp_inner = np.asarray(
            mlp_inner + model.moe_share * model.experts_top_k * copies * 2.0 * h * lay.etp, dtype=np.float64
        )
    # K and V as the attention saves them: g heads, or a heads when repeated (Stack.kv_repeated)
    kv_saved = 2.0 * (model.kv_dim + model.v_dim) * kv_repeats(model, stack)
    attention = (4.0 * model.q_dim + kv_saved) * model.attention_share
    split: float | FloatArray = attention + mlp_inner + model.mamba_share * mamba_saved_bytes(model)
    if not stack.flash_attention:
        scores = model.num_heads * (lay.seq_len / lay.cp) * (2.0 + 3.0 * dropout) * model.attention_share
        # kept unless recomputed: selective recompute without core_attn (Stack.recompute_modules) keeps them
        kept = (lay.recompute == Recompute.NONE) | (
            (lay.recompute == Recompute.SELECTIVE) & ("core_attn" not in stack.recompute_modules)
        )
        split = split + np.where(kept, scores, 0.0)
    fp8_inputs = (lay.precision == Precision.FP8) & (per_framework_field(lay, "fp8_saves_quantized_inputs") > 0)
    # FP8 GEMM inputs kept at 1 B (module docstring): the two norm outputs, the second MLP GEMM's
    # input and the dispatched copies shrink; the attention output gains an FP8 copy.
    # Flash attention keeps its bf16 output for its own backward, so the projection's FP8 input is a
    # second copy (+a d); unfused attention keeps the probabilities instead, and the output is only
    # the projection's input, now at 1 B (-a d).
    fp8_split: float | FloatArray = (
        (1.0 if stack.flash_attention else -1.0) * model.q_dim * model.attention_share
        - model.mean_mlp_inner_active
        - model.mamba_share * model.mamba_inner
    )
    if model.is_moe:
        fp8_split = np.asarray(fp8_split - model.moe_share * model.experts_top_k * h * lay.etp, dtype=np.float64)
    replicated_kept = np.where(fp8_inputs, replicated - 2.0 * h * blocks, replicated)
    split = np.asarray(split + np.where(fp8_inputs, fp8_split, 0.0), dtype=np.float64)
    replicated_share = np.where(lay.seq_parallel_active, replicated_kept / tp, replicated_kept)
    full_layer = replicated_share + split / tp
    layer_input = np.where(lay.seq_parallel_active, 2.0 * h / tp, 2.0 * h)
    # Q, and the attention output unless the policy misses the attention kernel (module docstring)
    attention_kept = (4.0 if stack.attention_saved else 2.0) * model.q_dim
    op_policy = (
        np.where(lay.seq_parallel_active, 4.0 * h / tp, 4.0 * h)
        + (attention_kept + 2.0 * model.v_dim + 2.0 * model.mean_mlp_inner_active) / tp
    )
    share = lay.full_recompute_share(model.num_layers)
    stored = share * layer_input + (1.0 - share) * full_layer - selective_dropped_bytes(model, lay, stack)
    return np.asarray(np.where(_selective_op(lay), op_policy, stored))


def mamba_saved_bytes(model: ModelSpec) -> float:
    """What one Mamba-2 mixer keeps for its backward per token, bf16, all split over TP (the
    layer's norm input and in_proj's input are the block's replicated 4h), as Megatron-LM
    d98e8a64 runs it (megatron/core/ssm/mamba_mixer.py `_ssm_training`, the default memory-efficient
    path):
      mamba_ssm's MambaSplitConv1dScanCombinedFn (mamba_ssm/ops/triton/ssd_combined.py) saves
        in_proj's output zxbcdt (2w, w = 2d + 2GN + H) and the scan's pre-gate output out_x (2d);
        it recomputes the conv and the chunk states in its backward, so no per-chunk states
        are kept;
      the gated RMSNorm (ExtendedRMSNorm) saves its input (2d) and its fp32 rstd per group (4G);
      out_proj saves its input, the norm's output (2d)."""
    return 2.0 * model.mamba_in_width + 6.0 * model.mamba_inner + 4.0 * model.mamba_groups


def selective_modules_on(lay: Layouts) -> BoolArray:
    """Where `Stack.recompute_modules` applies: Megatron-LM's selective recompute."""
    return np.asarray((lay.recompute == Recompute.SELECTIVE) & (lay.framework == Framework.MEGATRON))


def selective_dropped_bytes(model: ModelSpec, lay: Layouts, stack: Stack) -> FloatArray:
    """What Megatron-LM's selective recompute modules (`Stack.recompute_modules`, where each
    checkpoint wraps code: the `stack` module docstring) keep of a mean layer less, per token on one
    GPU, against no recompute: each module's saved activations in the table of the module
    docstring, its input being saved anyway (by the module before it, or as the norm's input).
    "Replicated" terms are per TP rank unless sequence parallel, the others split over TP.
      layernorm       a separate norm's output (the next linear's saved input): 2h, the input norm
                      of MLA layers and the pre-MLP norm of MoE layers (the fused ones are
                      TELayerNormColumnParallelLinear's own: not discarded);
      mla_up_proj     Q, K and V as the core attention saves them: 2(a d_qk + a d_qk + a d_v);
      mlp             a dense layer's MLP inner (gated 6f, plain 4f) and fc1's saved norm output
                      2h (the checkpoint keeps the residual, the fused norm's input, instead);
      moe             an MoE layer's experts' inner x top-k, the dispatched copies 2h x top-k x ETP
                      and the shared experts' inner (the checkpoint keeps the pre-MLP norm output);
      moe_act         the routed experts' activation output, fc2's input: 2f x top-k;
      shared_experts  the shared experts' inner (gated 6f, plain 4f each).
    FP8 (`FP8_SAVES`): the norm outputs and fc2 inputs were counted at 1 B, so that is what goes
    (Megatron has the linear save its original input under these checkpoints, `set_save_original_input`).
    Modules nest (moe holds moe_act and shared_experts): the memory is the union, counted once.
    core_attn is the scores term in `activation_bytes_per_token_layer` (flash attention keeps no more)."""
    modules = stack.recompute_modules
    if not (modules - {"core_attn"}):  # the default: nothing beyond the scores term
        return np.zeros(len(lay))
    on = selective_modules_on(lay)
    if not on.any():
        return np.zeros(len(lay))
    h = float(model.hidden_size)
    tp = lay.floats("tp")
    fp8 = (lay.precision == Precision.FP8) & (per_framework_field(lay, "fp8_saves_quantized_inputs") > 0)
    gemm_input = np.where(fp8, 1.0, 2.0)  # bytes per element of a saved linear input
    inner = 6.0 if model.mlp == "gated" else 4.0
    inner_kept = inner - np.where(fp8, 1.0, 0.0)  # fc2's input at 1 B under FP8
    moe_share = model.moe_share if model.is_moe else 0.0
    dense_share = model.dense_mlp_share
    replicated: float | FloatArray = 0.0
    split: float | FloatArray = 0.0
    if "layernorm" in modules:
        replicated = replicated + gemm_input * h * ((1.0 if model.is_mla else 0.0) + moe_share)
    if "mla_up_proj" in modules and model.is_mla:
        split = split + 2.0 * (model.q_dim + model.kv_dim + model.v_dim)
    if "mlp" in modules:
        dense_ffn = float(model.dense_ffn_hidden_size or model.ffn_hidden_size)
        replicated = replicated + dense_share * gemm_input * h
        split = split + dense_share * inner_kept * dense_ffn
    if model.is_moe:
        routed_inner = model.experts_top_k * model.ffn_hidden_size
        shared_inner = model.num_shared_experts * float(model.shared_expert_ffn or model.ffn_hidden_size)
        if "moe" in modules:
            copies = model.experts_top_k * gemm_input * h * lay.etp
            if stack.moe_gather_scatter:  # the saved expert output, bf16 (activation_bytes_per_token_layer)
                copies = copies + model.experts_top_k * 2.0 * h * lay.etp
            split = split + moe_share * (inner_kept * (routed_inner + shared_inner) + copies)
        else:
            if "moe_act" in modules:
                split = split + moe_share * gemm_input * routed_inner
            if "shared_experts" in modules:
                split = split + moe_share * inner_kept * shared_inner
    dropped = np.where(lay.seq_parallel_active, replicated / tp, replicated) + split / tp
    return np.asarray(np.where(on, dropped, 0.0), dtype=np.float64)


def kv_repeats(model: ModelSpec, stack: Stack) -> float:
    """How many copies of each K/V head the attention takes: a/g when repeated (Stack.kv_repeated)."""
    return model.num_heads / model.num_kv_heads if stack.kv_repeated else 1.0


def cp_gathered_kv_bytes(model: ModelSpec, lay: Layouts, stack: Stack) -> FloatArray:
    """The full-sequence K and V that all-gather context parallelism assembles for one layer's
    attention (forward, and again in the backward), beyond the local shards: CP x the local K/V,
    bf16, of the K/V heads on this TP rank, or of every query head when repeated first
    (Stack.kv_repeated). The ring exchange holds one neighbour's chunk instead (not priced)."""
    gathers = (lay.cp > 1) & (lay.cp_comm == CpComm.ALLGATHER)
    if not gathers.any():
        return np.zeros(len(lay))
    tokens = lay.tokens_per_micro_batch
    width = (model.kv_dim + model.v_dim) * kv_repeats(model, stack) / lay.floats("tp")
    gathered = BF16_BYTES * lay.cp * tokens * width
    return np.asarray(np.where(gathers, gathered, 0.0))


def cp_backward_buffer_bytes(model: ModelSpec, lay: Layouts, stack: Stack) -> FloatArray:
    """The fp32 gradient buffers of PyTorch's context-parallel attention backward for one layer
    (`frameworks.cp_sdpa_merge`), beside its gathered K/V. `_templated_ring_attention_backward`
    (torch/distributed/tensor/experimental/_attention.py, pytorch f2127dbd; the algorithm of late
    2024 to 2026, see `frameworks`) accumulates dQ, dK and dV in fp32 (convert_to_f32 on by
    default) and passes dK and dV around the ring (its `dkv_rotater` is always ALL_TO_ALL): each
    step concatenates them into an fp32 send buffer and receives the neighbour's into another.
    Counted: the running dQ and the fp32 dK/dV sent and received, 4 B x (q + 2 (k + v)) widths
    per token of the GPU's sequence shard, of every query head when K/V are repeated
    (Stack.kv_repeated), over TP; a lower bound (the running dK/dV, where not written into the
    send buffer, and the bf16 per-step gradients are left out)."""
    on = cp_sdpa_merge(lay)
    if not on.any():
        return np.zeros(len(lay))
    tokens = lay.tokens_per_micro_batch
    widths = model.q_dim + 2.0 * (model.kv_dim + model.v_dim) * kv_repeats(model, stack)
    return np.asarray(np.where(on, FP32_BYTES * tokens * widths / lay.floats("tp"), 0.0))


def kept_outputs_bytes(model: ModelSpec, lay: Layouts, stack: Stack) -> FloatArray:
    """The last stage's logits of the micro-batches before the current one, kept until the step
    ends (Stack.pp_outputs_kept): at its peak, the loss backward of the last micro-batch, m - 1
    of them, bf16, V/TP per token. The current micro-batch's own logits are held in any release
    (the stage's forward cache keeps them until its backward), so they are not part of this."""
    if not stack.pp_outputs_kept:
        return np.zeros(len(lay))
    tokens = lay.tokens_per_micro_batch
    earlier = np.maximum(lay.num_micro_batches - 1.0, 0.0)
    kept = earlier * tokens * BF16_BYTES * model.vocab_size / lay.floats("tp")
    return np.asarray(np.where(lay.pp > 1, kept, 0.0))


def layer_input_bytes_per_token(model: ModelSpec, lay: Layouts) -> FloatArray:
    """What full recompute keeps of a layer: its 2h input (split over TP with sequence parallelism)."""
    return np.asarray(np.where(lay.seq_parallel_active, 2.0 * model.hidden_size / lay.tp, 2.0 * model.hidden_size))


def cpu_checkpointed(lay: Layouts, stack: Stack) -> BoolArray:
    """Rows whose full-recompute checkpoints live in host memory (`Stack.cpu_checkpointing`:
    DeepSpeed's activation checkpointing only, and only where it checkpoints whole layers)."""
    return np.asarray(
        stack.cpu_checkpointing & (lay.recompute == Recompute.FULL) & (lay.framework == Framework.DEEPSPEED)
    )


def cpu_checkpoint_bytes(model: ModelSpec, lay: Layouts, stack: Stack, layers: FloatArray) -> FloatArray:
    """Host bytes per GPU of CPU checkpoints (`Stack.cpu_checkpointing`) on a stage of `layers`
    layers: each layer's input per micro-batch in flight (the first stage holds the most)."""
    if not stack.cpu_checkpointing:  # the common case: every evaluation asks
        return np.zeros(len(lay))
    per_layer = layer_input_bytes_per_token(model, lay) * lay.tokens_per_micro_batch
    held = per_layer * layers * in_flight_micro_batches(lay, 0.0)
    return np.asarray(np.where(cpu_checkpointed(lay, stack), held, 0.0))


def _full_layer_bytes_per_token(model: ModelSpec, lay: Layouts, stack: Stack) -> FloatArray:
    return activation_bytes_per_token_layer(model, lay.replace(recompute=int(Recompute.NONE)), stack)


def in_flight_micro_batches(lay: Layouts, stage: FloatArray | float) -> FloatArray:
    """Micro-batches' worth of activations stage `stage` (0 = first) holds at its peak."""
    pp = lay.floats("pp")
    v = lay.floats("virtual_stages")
    m = np.maximum(lay.num_micro_batches, 1.0)
    one_f_one_b = np.minimum(pp - stage, m)
    warmup = np.minimum(2.0 * (pp - stage - 1.0) + (v - 1.0) * pp, m * v - 1.0)
    interleaved = (warmup + 1.0) / v
    return np.asarray(np.where(lay.virtual_stages > 1, interleaved, one_f_one_b))


@dataclass(frozen=True)
class LayerActivations:
    """Per token, for one layer: what is stored, and the extra while it is recomputed."""

    stored: FloatArray
    recompute_extra: FloatArray

    @staticmethod
    def of(model: ModelSpec, lay: Layouts, stack: Stack) -> LayerActivations:
        stored = activation_bytes_per_token_layer(model, lay, stack)
        full_layer = _full_layer_bytes_per_token(model, lay, stack)
        # While a layer is recomputed in the backward, the rest of its activations exist again on
        # top of what is stored for it (its input under full recompute; the saved tensors under
        # torchtitan's op-level policy): one layer at a time.
        # Megatron's selective modules: what they dropped exists again while the layer's backward runs.
        extra = np.where(
            lay.recompute == Recompute.FULL,
            full_layer - layer_input_bytes_per_token(model, lay),
            np.where(_selective_op(lay), full_layer - stored, selective_dropped_bytes(model, lay, stack)),
        )
        # DeepSpeed's CPU checkpointing keeps the inputs on the host; the one being recomputed is
        # back on the GPU with the rest of its layer's activations
        if not stack.cpu_checkpointing:
            return LayerActivations(stored, np.asarray(extra))
        on_host = cpu_checkpointed(lay, stack)
        return LayerActivations(np.asarray(np.where(on_host, 0.0, stored)),
                                np.asarray(np.where(on_host, full_layer, extra)))  # fmt: skip


def activation_bytes(model: ModelSpec, lay: Layouts, stack: Stack, layers: FloatArray, stage: FloatArray | float,
                     first: Stage, last: Stage, per_token: LayerActivations | None = None,
                     mtp: FloatArray | float = 0.0) -> FloatArray:  # fmt: skip
    """Activations at the peak of stage `stage` (0 = first) holding `layers` layers and `mtp`
    trained MTP modules (the last stage): each saves a mean layer's activations per micro-batch in
    flight and holds its own logits and loss at the peak (its 2h eh_proj input is left out)."""
    tokens = lay.tokens_per_micro_batch
    acts = per_token or LayerActivations.of(model, lay, stack)
    per_layer = acts.stored * tokens
    in_flight = in_flight_micro_batches(lay, stage)
    stored = per_layer * (layers + mtp) * in_flight
    cp_buffers = cp_gathered_kv_bytes(model, lay, stack) + cp_backward_buffer_bytes(model, lay, stack)
    recompute_peak = tokens * acts.recompute_extra + cp_buffers
    embedding_dropout = model.hidden_size * tokens / lay.tp * in_flight if model.dropout else 0.0
    logits = (1.0 + mtp) * loss_bytes_per_token(model, lay, stack) * tokens + kept_outputs_bytes(model, lay, stack)
    boundaries = recv_buffer_bytes(model, lay, in_flight, first, last)
    boundaries = boundaries + stage_output_bytes(model, lay, stack, in_flight, last)
    total = stored + recompute_peak + np.where(first, embedding_dropout, 0.0) + np.where(last, logits, 0.0) + boundaries
    return np.asarray(np.where(layers > 0, total, 0.0))


def recv_buffer_bytes(model: ModelSpec, lay: Layouts, in_flight: FloatArray, first: Stage, last: Stage) -> FloatArray:
    """The pipeline's persistent receive buffers (frameworks `pp_recv_buffers`) beyond the stored
    activations: a GPU with v chunks of a pipeline of m micro-batches holds m activation buffers
    per chunk that receives (all but the first stage's first chunk) and m gradient buffers per
    chunk that sends (all but the last stage's last chunk), each the bf16 hidden states of a
    micro-batch (their sequence shard with SP). The buffers of the micro-batches in flight are
    the first layer's stored inputs already: in_flight x v chunk-micro-batches are alive, the
    share (v - first) / v of them with a received input."""
    held = (lay.pp > 1) & (per_framework_field(lay, "pp_recv_buffers") > 0)
    if not held.any():
        return np.zeros(len(lay))
    boundary = _boundary_bytes(model, lay)
    v = lay.floats("virtual_stages")
    m = np.maximum(lay.num_micro_batches, 1.0)
    receiving = v - np.where(first, 1.0, 0.0)
    sending = v - np.where(last, 1.0, 0.0)
    extra = boundary * (m * (receiving + sending) - in_flight * receiving)
    return np.asarray(np.where(held, np.maximum(extra, 0.0), 0.0))


def _boundary_bytes(model: ModelSpec, lay: Layouts) -> FloatArray:
    """One micro-batch's bf16 hidden states at a stage boundary (their sequence shard with SP)."""
    tokens = lay.tokens_per_micro_batch
    return np.asarray(BF16_BYTES * model.hidden_size * tokens / np.where(lay.seq_parallel_active, lay.tp, 1.0))


def stage_output_bytes(model: ModelSpec, lay: Layouts, stack: Stack, in_flight: FloatArray, last: Stage) -> FloatArray:
    """What PyTorch's pipelining (frameworks `pp_recv_buffers`) holds of the stage boundaries beyond
    the receive buffers, at the peak (`in_flight`, the last stage at its last micro-batch as in
    `kept_outputs_bytes`):
    - each forwarded chunk-micro-batch's output until its backward: `forward_one_chunk` stores it in
      `fwd_cache` ("stage_output", popped by `backward_one_chunk`), and the stage's last layer output
      is no stored layer input here: in_flight x v chunk-micro-batches, but for the last stage's
      current one, whose output is the logits (`loss_bytes_per_token`);
    - with Stack.pp_outputs_kept (torch before pytorch/pytorch#153383, 2025-05, so also before
      #164329, 2025-10): `stage_backward` left each received input's gradient in the receive
      buffer's `.grad` until the next step's `clear_runtime_states` (#164329 "Optimize memory by
      early releasing stage inputs' gradients" sets `val.grad = None`): the last stage holds those of
      its m - 1 earlier micro-batches. Other stages peak at their first backward, with none done."""
    held = (lay.pp > 1) & (per_framework_field(lay, "pp_recv_buffers") > 0)
    if not held.any():
        return np.zeros(len(lay))
    boundary = _boundary_bytes(model, lay)
    v = lay.floats("virtual_stages")
    outputs = np.maximum(in_flight * v - np.where(last, 1.0, 0.0), 0.0)
    earlier = np.maximum(lay.num_micro_batches - 1.0, 0.0)
    grads = np.where(last, earlier, 0.0) if stack.pp_outputs_kept else 0.0
    return np.asarray(np.where(held, boundary * (outputs + grads), 0.0))


def loss_bytes_per_token(model: ModelSpec, lay: Layouts, stack: Stack) -> FloatArray:
    """What the loss holds at its peak per token of the last stage (module docstring)."""
    vocab_shard = model.vocab_size / lay.floats("tp")
    eager = per_framework_field(lay, "loss_bytes_per_logit")
    # A whole loss also holds the LM head's saved input (frameworks.HEAD_INPUT_GATHERED); the
    # chunked loss frees it chunk by chunk (its chunk copies below).
    sharded = lay.seq_parallel_active & (per_framework_field(lay, "head_input_gathered") == 0)
    head_input = BF16_BYTES * model.hidden_size / np.where(sharded, lay.tp, 1.0)
    if stack.loss == "compiled":
        return np.asarray(COMPILED_LOSS_BYTES * vocab_shard + head_input)
    if stack.loss == "chunked":
        h = float(model.hidden_size)
        copies = np.where(lay.micro_batch > 1, BF16_BYTES * h, 0.0)
        return np.asarray(eager * vocab_shard / LOSS_CHUNKS + FP32_BYTES * h + copies)
    # the whole loss, vocab-parallel with TP > 1 (frameworks.TP_LOSS_BYTES)
    whole = np.where(lay.tp > 1, per_framework_field(lay, "tp_loss_bytes_per_logit"), eager)
    return np.asarray(whole * vocab_shard + head_input)


def _node_ranks(size: IntArray, stride: IntArray, gpus_per_node: int) -> FloatArray:
    """GPUs of the most loaded node in a group of `size` ranks `stride` apart (`topology`)."""
    return np.asarray(members_on_node(size, stride, gpus_per_node), dtype=np.float64)


# NCCL's NVLS "heads": a communicator's NVLS buffers are nvlsPerRankSize x nHeads per GPU
# (src/transport/nvls.cc `ncclNvlsBufferSetup`: nvlsTotalSize = nvlsPerRankSize * nHeads), and the
# NVLS graph search has at most min(NCCL_MAX_NVLS_ARITY, the node's GPUs) heads
# (src/graph/search.cc: graph->maxChannels = std::min(NCCL_MAX_NVLS_ARITY, system->nodes[GPU].count);
# src/include/device.h: #define NCCL_MAX_NVLS_ARITY 32; NVIDIA/nccl v2.30.7-1, 73cf1122, and so
# since v2.25.1-1, the first release to support GB200 (NVIDIA/nccl issue #1611)). Inside one
# node the search forces one head per GPU
# (minChannels = maxChannels), so a communicator over n <= 32 of a node's GPUs has n heads, over
# more (a 72-GPU NVLink domain, which NCCL's MNNVL treats as one node) 32.
NVLS_MAX_HEADS = 32


def nvls_buffer_bytes(lay: Layouts, cluster: Cluster, stack: Stack) -> FloatArray:
    """NCCL's NVLink SHARP buffers on one GPU where the stack has NVLS on (`Stack.nvls`):
    `cluster.nvls_bytes_per_rank` for each GPU of the
    node that a communicator spans, at most NVLS_MAX_HEADS of them (NCCL's NVLS heads), for every
    communicator that spans more than two of them (NCCL
    sets NVLS up for such communicators on NVSwitch nodes that support it; NVLS is not used for
    two GPUs, vllm-project/vllm#9699). PyTorch creates a group's NCCL communicator at its first
    collective, so only groups that run one count: the world (barriers; Megatron-LM's
    `initialize.py` at d98e8a64 calls `torch.distributed.barrier()`), TP, the gradients' DP x CP
    group, CP and EP where > 1, and per framework (`frameworks.MODEL_PARALLEL_COMMS`) TP x PP and,
    with FP8, TP x DP x CP. A group with the same ranks as another is its own communicator (TP x
    PP at PP 1 beside TP). Pipeline sends pair two ranks (no NVLS). Not counted, so a lower bound:
    Megatron's DP group without CP, with which core_v0.6.0 averaged the logged loss
    (`average_losses_across_data_parallel_group`) beside the gradients' DP x CP group, and the
    tokens' TP x EP group of its MoE dispatchers."""
    if not stack.nvls or cluster.nvls_bytes_per_rank <= 0:
        return np.zeros(len(lay))
    g = cluster.gpus_per_node
    tp, cp, dp, pp = lay.tp, lay.cp, lay.dp, lay.pp
    one = np.ones(len(lay), dtype=np.int64)
    groups = [
        _node_ranks(tp * cp * dp * pp, one, g),  # the world
        _node_ranks(tp, one, g),
        _node_ranks(dp * cp, tp, g),
        _node_ranks(cp, tp, g),
        _node_ranks(lay.ep, lay.etp, g),
    ]
    extra = per_framework_field(lay, "model_parallel_comms") > 0
    # TP x PP: the node's TP ranks times the stages it holds (stages are TP x CP x DP ranks apart)
    model_parallel = _node_ranks(tp, one, g) * _node_ranks(pp, tp * cp * dp, g)
    amax = _node_ranks(tp * dp * cp, one, g)
    groups.append(np.where(extra, model_parallel, 0.0))
    groups.append(np.where(extra & (lay.precision == Precision.FP8), amax, 0.0))
    node_ranks = np.sum([np.where(n > 2, np.minimum(n, NVLS_MAX_HEADS), 0.0) for n in groups], axis=0)
    return np.asarray(cluster.nvls_bytes_per_rank * node_ranks)


# Transformer Engine's userbuffers communicators (transformer_engine/pytorch/module/base.py
# `initialize_ub`, v2.8 to v2.18): the ring-exchange qkv_fprop, fc1_fprop, proj_dgrad, fc2_dgrad,
# the pipelined proj_fprop, fc2_fprop, the bulk qkv_dgrad, qkv_wgrad, fc1_dgrad, fc1_wgrad and
# the external proj_wgrad, fc2_wgrad, one buffer each; under FP8 those of its
# `layers_all_gather_overlap` list hold FP8 (uint8, `fp8_buf`), the reduce-scatter ones bf16.
UB_ALL_GATHER_BUFFERS = 8
UB_REDUCE_SCATTER_BUFFERS = 4


def userbuffers_bytes(model: ModelSpec, lay: Layouts, stack: Stack) -> FloatArray:
    """Transformer Engine's userbuffers on one GPU where TP communication overlaps its GEMMs
    (`Stack.tp_comm_overlap`, Megatron with sequence parallelism and TP > 1): each communicator
    registers one buffer of the shape Megatron-LM passes to `initialize_ub`,
    [seq_length * micro_batch_size / context_parallel_size, hidden_size]
    (megatron/training/initialize.py `_initialize_tp_communicators` at d98e8a64), allocated by
    userbuffers itself (`register_user_buffer_collective(..., alloc=true)` in TE's
    comm_gemm_overlap.cpp), outside PyTorch's allocator. The default methods' buffers are the whole
    shape (a ring-exchange reduce-scatter would hold 2 TP - 1 chunks; none by default)."""
    if not stack.tp_comm_overlap:
        return np.zeros(len(lay))
    on = lay.seq_parallel_active & (lay.tp > 1) & (lay.framework == Framework.MEGATRON)
    gathered = np.where(lay.precision == Precision.FP8, 1.0, float(BF16_BYTES))
    per_token = model.hidden_size * (UB_ALL_GATHER_BUFFERS * gathered + UB_REDUCE_SCATTER_BUFFERS * BF16_BYTES)
    return np.asarray(np.where(on, lay.tokens_per_micro_batch * per_token, 0.0))


def device_reserve_bytes(model: ModelSpec, lay: Layouts, cluster: Cluster, stack: Stack) -> FloatArray:
    """The memory term `other`: the preset's reserve plus the layout's NVLS buffers and
    userbuffers, all outside PyTorch's allocator."""
    outside = nvls_buffer_bytes(lay, cluster, stack) + userbuffers_bytes(model, lay, stack)
    return np.asarray(cluster.memory_reserve_bytes + outside)


def stage_memory(model: ModelSpec, lay: Layouts, stack: Stack, reserve_bytes: float | FloatArray, layers: FloatArray,
                 stage: FloatArray | float, first: Stage, last: Stage,
                 per_token: LayerActivations | None = None, mtp: FloatArray | float = 0.0) -> MemoryBreakdown:  # fmt: skip
    """Whole bytes (rounded up), so that every consumer compares the same integers. `mtp`: the
    trained MTP modules on this stage (see `stage_params`, `activation_bytes`)."""
    weights, grads, optimizer = model_state_bytes(stage_params(model, lay, layers, first, last, mtp), lay, stack)
    return MemoryBreakdown(
        params=np.ceil(weights),
        grads=np.ceil(grads),
        optimizer=np.ceil(optimizer),
        activations=np.ceil(activation_bytes(model, lay, stack, layers, stage, first, last, per_token, mtp)),
        other=np.ceil(np.broadcast_to(np.asarray(reserve_bytes, dtype=np.float64), (len(lay),))),
    )


def peak_memory(model: ModelSpec, lay: Layouts, stack: Stack, reserve_bytes: float | FloatArray) -> MemoryBreakdown:
    """The breakdown of whichever stage holds most: the first (the most micro-batches in flight and
    the embedding), the second (the most loaded middle stage under an uneven split: nearly as many
    in flight, more layers) or the last (the LM head and the logits). With one stage, all alike."""
    first_l, middle_l, last_l = stage_layers(model, lay)
    n = len(lay)
    single = lay.pp == 1
    acts = LayerActivations.of(model, lay, stack)
    depth = float(model.mtp_layers) if stack.mtp else 0.0  # trained MTP modules, on the last stage
    # A one-stage row is its own first and last stage: only pipelined rows are priced again as a
    # last stage. A middle stage can outweigh the first only where it holds more layers (an uneven
    # split, PP > 2) or more receive buffers (`pp_recv_buffers`): with the same layers it has no
    # embedding and no more micro-batches in flight. All stages go in one pass over stacked copies
    # of the rows (a small table's evaluation costs the count of array operations, not their length).
    piped = np.flatnonzero(~single)
    uneven = (lay.first_stage_layers > 0) | (lay.last_stage_layers > 0)
    mid = np.flatnonzero((lay.pp > 2) & (uneven | (per_framework_field(lay, "pp_recv_buffers") > 0)))
    k, j = len(piped), len(mid)
    rows = np.concatenate([np.arange(n), piped, mid])
    stages = stage_memory(
        model, Layouts(lay.data[rows]), stack, np.broadcast_to(np.asarray(reserve_bytes, dtype=np.float64), (n,))[rows],
        layers=np.concatenate([first_l, last_l[piped], middle_l[mid]]),
        stage=np.concatenate([np.zeros(n), lay.pp[piped] - 1.0, np.ones(j)]),
        first=np.concatenate([np.ones(n, dtype=bool), np.zeros(k + j, dtype=bool)]),
        last=np.concatenate([single, np.ones(k, dtype=bool), np.zeros(j, dtype=bool)]),
        per_token=LayerActivations(acts.stored[rows], acts.recompute_extra[rows]),
        mtp=np.concatenate([np.where(single, depth, 0.0), np.full(k, depth), np.zeros(j)]),
    )  # fmt: skip
    peak = stages.take(np.arange(n))
    last = stages.take(np.arange(n, n + k))
    peak = _merge(peak, piped, last)
    return _merge(peak, mid, stages.take(np.arange(n + k, n + k + j)))


def _merge(base: MemoryBreakdown, index: np.ndarray, other: MemoryBreakdown) -> MemoryBreakdown:
    """`base` with its rows `index` replaced by `other`'s where `other` holds more."""
    larger = other.total > base.total[index]
    return MemoryBreakdown(
        *(_scatter(getattr(base, t), index, np.where(larger, getattr(other, t), getattr(base, t)[index]))
          for t in MEMORY_TERMS)
    )  # fmt: skip


def _scatter(base: FloatArray, index: np.ndarray, values: FloatArray) -> FloatArray:
    out = np.array(base, dtype=np.float64)
    out[index] = values
    return out


def _where(mask: np.ndarray, a: MemoryBreakdown, b: MemoryBreakdown) -> MemoryBreakdown:
    return MemoryBreakdown(*(np.where(mask, getattr(a, t), getattr(b, t)) for t in MEMORY_TERMS))

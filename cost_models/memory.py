"""Memory of the most loaded GPU: weights, gradients, optimizer states, activations, reserve.

Model states (mixed-precision Adam, Rajbhandari et al. 2020 "ZeRO", Sec 3.1): per parameter
2 bytes of bf16/fp16 weights, `Stack.grad_bytes` of gradients (4 with Megatron's fp32 main
grads, 2 with DeepSpeed's bf16 grads) and 12 bytes of optimizer state (fp32 master copy, Adam
m and v). ZeRO stage 1 divides the optimizer states over the data-parallel group, stage 2 also
the gradients, stage 3 also the weights (plus a two-layer buffer of gathered weights, the
prefetch of the next layer). The data-parallel group of dense weights is DP*CP (context-parallel
ranks hold the same weights); expert weights are replicated over DP*CP/EP ranks.

Weights per stage: l/p layers, each with its dense part / TP and E/EP experts / TP, plus the
vocab-parallel embedding (V*h/TP, and learned positions) on the first stage and the LM head
(V*h/TP, also when tied and p > 1: Megatron keeps a copy there) with the final norm on the last.

Activations per layer and micro-batch, 16-bit, per token, generalising Korthikanti et al. 2022
(arXiv:2205.05198, Sec 4.1; 34*s*b*h + 5*a*s^2*b for GPT) to GQA and gated MLPs:
  kept on every TP rank unless sequence parallel:  2 norm inputs 4h, QKV and MLP inputs 4h,
                                                   dropout masks 2h (only with dropout)
  split over TP:  Q 2*a*d, K and V 4*g*d, attention output 2*a*d,
                  MLP inner: gated 6f (gate, up, product), plain 4f (GELU input, output),
                  times top-k for MoE (+ 2h for the dispatched copy of each token),
                  without flash attention the scores: a*s*(2 softmax + 3 dropout mask/output)
For GPT (f = 4h, g = a, dropout) this is exactly 10h + 24h + 5as: Korthikanti's 34 + 5as/h.
Selective recompute drops the a*s terms; full recompute keeps only each layer's 2h input (split
over TP with sequence parallel) plus one layer's full activations while it is recomputed; block
recompute of N layers per chunk does so for N of them and stores the rest in full.
Context parallelism divides the tokens per GPU by CP.

Micro-batches in flight: under 1F1B the first stage holds min(p, m) micro-batches; the
interleaved schedule multiplies that by 1 + (p-1)/(p*v) (Korthikanti Sec 4.2.3). The last
stage holds one micro-batch plus the fp32 logits of the vocab-parallel cross entropy, 4*V/TP
bytes per token.

`other` is the cluster's documented reserve (CUDA context, cuBLAS workspace, NCCL buffers,
allocator fragmentation), see `memory_reserve_bytes` in the hardware presets.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from paraplan.cost_models.flops import RECOMPUTE_FULL, RECOMPUTE_SELECTIVE
from paraplan.cost_models.layout import BoolArray, FloatArray, Layouts
from paraplan.cost_models.models import ModelSpec
from paraplan.cost_models.stack import OPTIMIZER_BYTES, PARAM_BYTES, Stack

MEMORY_TERMS = ("params", "grads", "optimizer", "activations", "other")

Stage = bool | BoolArray


@dataclass(frozen=True)
class StageParams:
    """Parameters held by one GPU of a stage, split by how they are replicated."""

    dense: FloatArray  # replicated over DP*CP
    expert: FloatArray  # replicated over DP*CP/EP
    layer_max: FloatArray  # the largest single layer on this GPU (ZeRO-3 gather buffer)
    layers: FloatArray  # layers on this GPU (ZeRO-3 gathers them one at a time)


@dataclass(frozen=True)
class MemoryBreakdown:
    params: FloatArray
    grads: FloatArray
    optimizer: FloatArray
    activations: FloatArray
    other: FloatArray

    @property
    def total(self) -> FloatArray:
        return self.params + self.grads + self.optimizer + self.activations + self.other


def layers_per_stage(model: ModelSpec, lay: Layouts) -> FloatArray:
    """Layers on the most loaded GPU of the pipeline: v chunks of ceil(l/(p*v)) layers.

    Uneven splits are allowed (Megatron-LM's --decoder-first/last-pipeline-num-layers and
    --pipeline-model-parallel-layout; Llama 3 405B ran 126 layers on PP16 with one layer fewer
    on the first and last stages, Dubey et al. 2024 Sec 3.3.2): the slowest stage carries the
    rounded-up share, which is what the step waits for.
    """
    chunks = (lay.pp * lay.virtual_stages).astype(np.float64)
    return np.asarray(np.ceil(model.num_layers / chunks) * lay.virtual_stages, dtype=np.float64)


def stage_params(model: ModelSpec, lay: Layouts, first: Stage, last: Stage) -> StageParams:
    """`first`/`last`: whether the stage is the first/last (per candidate, or for all)."""
    tp = lay.tp.astype(np.float64)
    layers = layers_per_stage(model, lay)
    dense_layer = (model.attention_params + model.router_params) / tp + 2 * model.norm_params
    expert_layer = (model.num_experts / lay.ep) * model.expert_params / tp
    positions = model.embedding_params - model.vocab_size * model.hidden_size
    embedding = model.vocab_size * model.hidden_size / tp + positions
    head_is_separate = (not model.tied_embeddings) | (lay.pp > 1)
    head = np.where(head_is_separate, model.vocab_size * model.hidden_size / tp, 0.0) + model.norm_params
    dense = layers * dense_layer + np.where(first, embedding, 0.0) + np.where(last, head, 0.0)
    return StageParams(
        dense=dense, expert=layers * expert_layer, layer_max=dense_layer + expert_layer, layers=layers
    )


def model_state_bytes(
    params: StageParams, lay: Layouts, stack: Stack
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(weights, gradients, optimizer states) in bytes under the layout's ZeRO stage."""
    dp_dense = (lay.dp * lay.cp).astype(np.float64)
    dp_expert = np.maximum(dp_dense / lay.ep, 1.0)

    def sharded(per_param_bytes: float, from_stage: int) -> FloatArray:
        dense = np.where(lay.zero >= from_stage, params.dense / dp_dense, params.dense)
        expert = np.where(lay.zero >= from_stage, params.expert / dp_expert, params.expert)
        return np.asarray(per_param_bytes * (dense + expert), dtype=np.float64)

    gather_buffer = np.where(lay.zero >= 3, 2.0 * PARAM_BYTES * params.layer_max, 0.0)
    weights = sharded(PARAM_BYTES, 3) + gather_buffer
    grads = sharded(stack.grad_bytes, 2)
    optimizer = sharded(OPTIMIZER_BYTES, 1)
    return weights, grads, optimizer


def activation_bytes_per_token_layer(model: ModelSpec, lay: Layouts, stack: Stack) -> FloatArray:
    """Stored activations of one layer per token on one GPU, per the table in the docstring."""
    h, f = model.hidden_size, model.ffn_hidden_size
    tp = lay.tp.astype(np.float64)
    dropout = 1.0 if model.dropout else 0.0
    replicated = 8.0 * h + 2.0 * h * dropout
    mlp_inner = (6.0 if model.mlp == "gated" else 4.0) * f
    if model.is_moe:
        mlp_inner = model.experts_top_k * (mlp_inner + 2.0 * h)
    split: float | FloatArray = 4.0 * model.q_dim + 4.0 * model.kv_dim + mlp_inner
    if not stack.flash_attention:
        scores = model.num_heads * (lay.seq_len / lay.cp) * (2.0 + 3.0 * dropout)
        split = split + np.where(lay.recompute >= RECOMPUTE_SELECTIVE, 0.0, scores)
    replicated_share = np.where(lay.seq_parallel_active, replicated / tp, replicated)
    full_layer = replicated_share + split / tp
    layer_input = np.where(lay.seq_parallel_active, 2.0 * h / tp, 2.0 * h)
    share = lay.full_recompute_share(model.num_layers)
    return np.asarray(share * layer_input + (1.0 - share) * full_layer)


def _full_layer_bytes_per_token(model: ModelSpec, lay: Layouts, stack: Stack) -> FloatArray:
    no_recompute = replace(lay, recompute=np.zeros_like(lay.recompute))
    return activation_bytes_per_token_layer(model, no_recompute, stack)


def in_flight_micro_batches(lay: Layouts) -> FloatArray:
    """Micro-batches whose activations the first stage holds at its peak (1F1B / interleaved)."""
    pp = lay.pp.astype(np.float64)
    base = np.minimum(pp, np.maximum(lay.num_micro_batches, 1.0))
    interleave = np.where(lay.virtual_stages > 1, 1.0 + (pp - 1.0) / (pp * lay.virtual_stages), 1.0)
    return np.asarray(base * interleave)


def activation_bytes(model: ModelSpec, lay: Layouts, stack: Stack, first: Stage, last: Stage) -> FloatArray:
    tokens = (lay.micro_batch * lay.seq_len / lay.cp).astype(np.float64)
    per_layer = activation_bytes_per_token_layer(model, lay, stack) * tokens
    in_flight = np.where(first, in_flight_micro_batches(lay), 1.0)
    stored = per_layer * layers_per_stage(model, lay) * in_flight
    recompute_peak = np.where(
        lay.recompute == RECOMPUTE_FULL, _full_layer_bytes_per_token(model, lay, stack) * tokens, 0.0
    )
    embedding_dropout = model.hidden_size * tokens / lay.tp * in_flight if model.dropout else 0.0
    logits = 4.0 * model.vocab_size / lay.tp * tokens  # fp32, vocab-parallel cross entropy
    total = stored + recompute_peak + np.where(first, embedding_dropout, 0.0) + np.where(last, logits, 0.0)
    return np.asarray(total)


def stage_memory(
    model: ModelSpec, lay: Layouts, stack: Stack, reserve_bytes: float, first: Stage, last: Stage
) -> MemoryBreakdown:
    """Whole bytes (rounded up), so that every consumer compares the same integers."""
    weights, grads, optimizer = model_state_bytes(stage_params(model, lay, first, last), lay, stack)
    return MemoryBreakdown(
        params=np.ceil(weights),
        grads=np.ceil(grads),
        optimizer=np.ceil(optimizer),
        activations=np.ceil(activation_bytes(model, lay, stack, first, last)),
        other=np.full(len(lay), float(np.ceil(reserve_bytes))),
    )


def peak_memory(model: ModelSpec, lay: Layouts, stack: Stack, reserve_bytes: float) -> MemoryBreakdown:
    """The breakdown of whichever of the first and last stage holds more. These are the two
    extremes: the first holds the most activations and the embedding, the last the LM head and
    the logits; middle stages hold no more than the first. With one stage, both are the same."""
    single = lay.pp == 1
    first = stage_memory(model, lay, stack, reserve_bytes, first=True, last=single)
    last = stage_memory(model, lay, stack, reserve_bytes, first=single, last=True)
    return _where(first.total >= last.total, first, last)


def _where(mask: np.ndarray, a: MemoryBreakdown, b: MemoryBreakdown) -> MemoryBreakdown:
    return MemoryBreakdown(**{t: np.where(mask, getattr(a, t), getattr(b, t)) for t in MEMORY_TERMS})

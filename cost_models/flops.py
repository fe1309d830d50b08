"""FLOPs of one training step, and the MFU/HFU definitions, in both attention conventions.

Every matmul counts 2*m*n*k FLOPs. Per token, the forward pass of one layer costs
    2 * (matmul weights of the layer that the token touches)      [QKV, O, MLP or top-k experts,
                                                                     router]
  + 4 * s_eff * (a*d)                                              [Q K^T and softmax(.) V]
and the LM head 2*V*h per token. Backward costs twice the forward (Narayanan et al. 2021,
Sec 5.1), so model FLOPs per step are 3x the forward:
    F_model = B*s * [6*N_matmul + 12*l*s_eff*(a*d)] ,  N_matmul = l*N_layer_matmul + V*h.

Two conventions for s_eff, the keys each token attends to on average:
  * PaLM's (Chowdhery et al. 2022, App. B: 6N + 12*L*H*Q*T) and Megatron-LM's (Korthikanti et al.
    2022, eq. 7: 72*B*s*l*h^2*(1 + s/(6h) + V/(12*l*h)) for a GPT) count every query against
    every key: s_eff = s. `mfu_palm` uses it.
  * Causal-aware: under the causal mask token i attends to i + 1 keys, (s + 1)/2 on average,
    and fused attention kernels skip the masked blocks (FlashAttention-2, Dao 2023): this is the
    work a GPU must do, and the time model prices it. `mfu` (the default) uses it, as
    Megatron-Bridge's performance tables do. At 4K tokens the two differ by a few percent; at
    128K the PaLM count exceeds the work done by ~1.6x for Llama-3-8B.

Hybrid models (`ModelSpec.layer_pattern`: Nemotron-H, Mamba-2) have one block per layer: the
attention scores count on the attention layers only (`attention_share` of them), and each Mamba-2
layer adds its SSD scan (`ModelSpec.mamba_scan_flops_per_token`, derived there); its projections
are among the matmul weights. The scan's backward counts as twice its forward in F_model, like
every matmul.

MFU = F_model / (step time * GPUs * peak); HFU adds the FLOPs that recompute spends again: full
recompute runs every recomputed layer's forward once more (Narayanan eq. 3: 96 instead of 72),
Megatron's selective recompute its modules (by default the attention core, Korthikanti Sec 4.2;
`selective_module_flops_per_token`). The peak is the dense
tensor-core peak of the precision the projection and MLP GEMMs run in (`compute.matmul_peak_flops`:
FP8 runs against the FP8 peak), so the ratios stay within 0..1; `peak_flops` in the JSON says
which peak it was.
"""

from __future__ import annotations

import numpy as np

from paraplan.cost_models.candidates import FloatArray, Layouts
from paraplan.cost_models.layout import Framework, Recompute
from paraplan.cost_models.models import ModelSpec
from paraplan.cost_models.stack import DEFAULT_RECOMPUTE_MODULES


def layer_matmul_weights_active(model: ModelSpec) -> float:
    """Matmul weights one token passes through in a layer, averaged over the layers (biases and
    norms excluded; MLA's latent projections, shared experts and dense layers included:
    `ModelSpec.layer_matmul_params_active`)."""
    return model.mean_matmul_params_active


def causal_keys(model: ModelSpec, seq_len: FloatArray) -> FloatArray:
    """Keys a query attends to on average under the causal mask: (s + 1) / 2, less on layers with
    a sliding window (`ModelSpec.mean_causal_keys`)."""
    unique, inverse = np.unique(seq_len, return_inverse=True)  # one sequence length per question
    keys = np.array([model.mean_causal_keys(float(s)) for s in unique])
    return np.asarray(keys[inverse.reshape(-1)]) if len(unique) else np.zeros(0)


def attention_score_flops_per_token(model: ModelSpec, keys: FloatArray) -> FloatArray:
    """Per token and mean layer, forward: the attention scores and their use, 2 * keys *
    (a*d_qk + a*d_v) on the attention layers (`attention_share`)."""
    return np.asarray(2.0 * keys * model.attention_core_width * model.attention_share)


def attention_core_flops_per_token(model: ModelSpec, keys: FloatArray) -> FloatArray:
    """Per token and mean layer, forward: the attention scores (`attention_score_flops_per_token`)
    and a hybrid model's SSD scans (`mamba_share` x `ModelSpec.mamba_scan_flops_per_token`)."""
    return np.asarray(
        attention_score_flops_per_token(model, keys) + model.mamba_share * model.mamba_scan_flops_per_token
    )


def forward_flops_per_token(model: ModelSpec, keys: FloatArray) -> FloatArray:
    """Forward FLOPs per token with `keys` attended keys per query: 2 per multiply-add over the
    matmul weights, and the attention cores (`attention_core_flops_per_token`)."""
    core = attention_core_flops_per_token(model, keys)
    layers = model.num_layers * (2.0 * layer_matmul_weights_active(model) + core)
    return np.asarray(layers + 2.0 * model.vocab_size * model.word_embed_dim)


def mtp_forward_flops_per_token(model: ModelSpec, keys: FloatArray) -> FloatArray:
    """Forward FLOPs per token of the model's multi-token-prediction modules when trained
    (`Stack.mtp`): per module 2 * (eh_proj 2h*h + the layer's active weights + the output head V*e)
    and the layer's attention core, as `forward_flops_per_token` prices a layer (`ModelSpec.
    mtp_matmul_params_active`). Megatron-LM d98e8a64 training.py num_floating_point_operations
    counts the same matmuls (and the 3h of the norms, left out here as for every layer's norms)."""
    per_module = 2.0 * model.mtp_matmul_params_active + 2.0 * keys * model.attention_core_width
    return np.asarray(model.mtp_layers * per_module)


def model_flops_per_step(model: ModelSpec, lay: Layouts, causal: bool = True, mtp: bool = False) -> FloatArray:
    """`mtp`: the multi-token-prediction modules are trained (`Stack.mtp`); their FLOPs count as
    model FLOPs, as in Megatron-Bridge's published TFLOP/s (the DeepSeek-V3 'w/ MTP' rows)."""
    seq = lay.floats("seq_len")
    keys = causal_keys(model, seq) if causal else seq
    per_token = forward_flops_per_token(model, keys) + (mtp_forward_flops_per_token(model, keys) if mtp else 0.0)
    return np.asarray(3.0 * lay.global_batch * seq * per_token)


def recompute_flops_per_step(
    model: ModelSpec, lay: Layouts, modules: frozenset[str] = DEFAULT_RECOMPUTE_MODULES, mtp: bool = False
) -> FloatArray:
    """FLOPs spent again by activation recompute (the HFU - MFU numerator), causal-aware.
    `modules`: Megatron's selective recompute modules (`Stack.recompute_modules`). `mtp`: trained
    MTP modules' layers are recomputed like a mean layer, as `evaluate` prices their time
    (Megatron-LM d98e8a64 multi_token_prediction.py: under recompute_granularity 'full' the MTP
    layer's forward goes through `_checkpointed_forward`, "mirrors transformer_block")."""
    tokens = (lay.global_batch * lay.seq_len).astype(np.float64)
    layers = model.num_layers + (model.mtp_layers if mtp else 0)
    keys = causal_keys(model, lay.floats("seq_len"))
    attention_core = layers * attention_score_flops_per_token(model, keys)
    matmuls = layers * 2.0 * layer_matmul_weights_active(model)
    # a hybrid model's SSD scans run again under full recompute; no selective module holds them
    full = matmuls + layers * attention_core_flops_per_token(model, keys)
    # torchtitan's op-level policy recomputes every other matmul; DeepSpeed's the attention core;
    # Megatron's its modules' GEMMs (`selective_module_flops_per_token`) and, with core_attn, the core.
    megatron = selective_module_flops_per_token(model, modules) + (attention_core if "core_attn" in modules else 0.0)
    selective = np.where(lay.framework == Framework.TORCHTITAN, 0.5 * matmuls,
                         np.where(lay.framework == Framework.MEGATRON, megatron, attention_core))  # fmt: skip
    return np.asarray(
        tokens
        * np.where(
            lay.recompute == Recompute.FULL,
            full * lay.full_recompute_share(model.num_layers),
            np.where(lay.recompute == Recompute.SELECTIVE, selective, 0.0),
        )
    )


def selective_module_flops_per_token(model: ModelSpec, modules: frozenset[str]) -> float:
    """GEMM FLOPs per token, all layers, that Megatron's selective recompute modules run again
    (`compute.selective_recompute_fwd_s` prices their time): mla_up_proj the Q projection and the
    KV up-projection, mlp the dense layers' MLP, moe the MoE layers' router, routed (top-k) and
    shared experts, shared_experts the shared experts alone. Nested modules run again each."""
    h, m = model.hidden_size, model.mlp_matrices
    flops = 0.0
    if "mla_up_proj" in modules and model.is_mla:
        a, d, rope, d_v = model.num_heads, model.head_dim, model.qk_rope_head_dim, model.v_head_dim or model.head_dim
        q = (model.q_lora_rank or h) * a * d
        flops += model.num_layers * 2.0 * (q + (model.kv_lora_rank or 0) * a * (d - rope + d_v))
    if "mlp" in modules:
        flops += model.num_dense_layers * 2.0 * m * h * (model.dense_ffn_hidden_size or model.ffn_hidden_size)
    if model.is_moe:
        shared = model.num_shared_experts * m * h * (model.shared_expert_ffn or model.ffn_hidden_size)
        if "moe" in modules:
            routed = model.experts_top_k * m * h * model.ffn_hidden_size + h * model.num_experts
            flops += model.num_moe_layers * 2.0 * (routed + shared)
        if "shared_experts" in modules:
            flops += model.num_moe_layers * 2.0 * shared
    return flops

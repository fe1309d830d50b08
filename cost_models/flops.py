"""FLOPs of one training step, and the MFU/HFU definitions.

Every matmul counts 2*m*n*k FLOPs. Per token, the forward pass of one layer costs
    2 * (matmul weights of the layer that the token touches)      [QKV, O, MLP or top-k experts,
                                                                     router]
  + 4 * s * (a*d)                                                  [Q K^T and softmax(.) V]
and the LM head 2*V*h per token. Backward costs twice the forward (Narayanan et al. 2021,
Sec 5.1), so model FLOPs per step are 3x the forward:
    F_model = B*s * [6*N_matmul + 12*l*s*(a*d)] ,  N_matmul = l*N_layer_matmul + V*h.
For a GPT with a 4h MLP and full attention this is Megatron-LM's
72*B*s*l*h^2*(1 + s/(6h) + V/(12*l*h)) (Korthikanti et al. 2022, eq. 7) and PaLM's
6N + 12*L*H*Q*T (Chowdhery et al. 2022, App. B). As in both, attention is counted without
halving for the causal mask; the time model does halve it.

MFU = F_model / (step time * GPUs * peak); HFU adds the FLOPs that recompute spends again:
full recompute runs every layer's forward once more (Narayanan eq. 3: 96 instead of 72),
selective recompute the attention core (Korthikanti Sec 4.2) -- unless the stack uses flash
attention, whose backward already recomputes the scores (counted in the time model, not as
extra FLOPs here), so selective recompute adds nothing on top of it. The peak is the dense BF16
peak for every precision, so MFU is comparable across precisions.
"""

from __future__ import annotations

import numpy as np

from paraplan.cost_models.layout import FloatArray, Layouts
from paraplan.cost_models.models import ModelSpec
from paraplan.cost_models.stack import Stack

RECOMPUTE_SELECTIVE = 1
RECOMPUTE_FULL = 2


def layer_matmul_weights_active(model: ModelSpec) -> int:
    """Matmul weights one token passes through in one layer (biases and norms excluded)."""
    h = model.hidden_size
    attention = 2 * h * model.q_dim + 2 * h * model.kv_dim
    mlp = model.experts_top_k * model.mlp_matrices * h * model.ffn_hidden_size
    return attention + mlp + (h * model.num_experts if model.is_moe else 0)


def forward_flops_per_token(model: ModelSpec, seq_len: FloatArray) -> FloatArray:
    layers = model.num_layers * (
        2.0 * layer_matmul_weights_active(model) + 4.0 * seq_len * model.q_dim
    )
    return layers + 2.0 * model.vocab_size * model.hidden_size


def model_flops_per_step(model: ModelSpec, lay: Layouts) -> FloatArray:
    tokens = lay.global_batch * lay.seq_len
    return 3.0 * tokens * forward_flops_per_token(model, lay.seq_len.astype(np.float64))


def recompute_flops_per_step(model: ModelSpec, lay: Layouts, stack: Stack) -> FloatArray:
    """FLOPs spent again by activation recompute (the HFU - MFU numerator)."""
    tokens = (lay.global_batch * lay.seq_len).astype(np.float64)
    attention_core = 4.0 * lay.seq_len * model.q_dim * model.num_layers
    full = model.num_layers * 2.0 * layer_matmul_weights_active(model) + attention_core
    selective = 0.0 * attention_core if stack.flash_attention else attention_core
    return tokens * np.select(
        [lay.recompute == RECOMPUTE_FULL, lay.recompute == RECOMPUTE_SELECTIVE],
        [full * lay.full_recompute_share(model.num_layers), selective],
        default=0.0,
    )

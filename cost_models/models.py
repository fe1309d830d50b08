"""Transformer decoders: presets, the Hugging Face `config.json` loader, exact parameter counts.

Parameter counts (h hidden, a heads, g KV heads, d head dim, f MLP width, V vocabulary, E routed
experts, k experts per token). Every formula follows the module tree that the reference
implementation (transformers `models/<type>/modeling_<type>.py`) builds from the config:

    attention (GQA/MQA/MHA)  h*(a*d) [q_proj] + 2*h*(g*d) [k_proj, v_proj] + (a*d)*h [o_proj]
                             (+ a*d + 2*g*d biases when qkv_bias, + h when out_bias)
                             (+ 2*d for per-head q_norm/k_norm: Qwen3, Gemma 3;
                              + a*d + g*d for full-width q_norm/k_norm: OLMo 2)
                             (+ a for GPT-OSS's attention sinks, one learned logit per query head:
                              transformers gpt_oss GptOssAttention.sinks; their FLOPs, one more
                              logit per score row, are not counted)
    MLA (DeepSeek-V2/V3)     q_a_proj h*r_q + q_a_layernorm r_q + q_b_proj r_q*a*(d_nope+d_rope)
                             [or q_proj h*a*(d_nope+d_rope) when q_lora_rank is null]
                             + kv_a_proj_with_mqa h*(r_kv+d_rope) + kv_a_layernorm r_kv
                             + kv_b_proj r_kv*a*(d_nope+d_v) + o_proj a*d_v*h
                             (DeepSeek-V2, arXiv:2405.04434 Sec 2.1, eqs. 9-19: W^DQ, W^UQ, W^QR,
                             W^DKV, W^UK, W^UV, W^KR, W^O; transformers deepseek_v2/v3 modeling)
    MLP gated                3*h*f (gate, up, down: SwiGLU/GeGLU, Shazeer 2020)
    MLP plain                2*h*f (fc_in, fc_out)            (+ f*(m-1) + h biases when mlp_bias)
    MoE layer                E routed experts of width f + router h*E
                             (+ E for DeepSeek-V3's e_score_correction_bias, the aux-loss-free
                             balancing bias b_i of arXiv:2412.19437 Sec 2.1.2)
                             + n_s shared experts of width f_s (DeepSeekMoE, arXiv:2405.04434 Sec 2.2:
                             N_s shared + N_r routed; V3: 1 shared + 256 routed, 8 active, Sec 4.2)
                             (+ h for Qwen's sigmoid shared_expert_gate Linear(h, 1): Qwen1.5-MoE,
                             https://qwenlm.github.io/blog/qwen-moe/, transformers qwen2_moe)
                             (GPT-OSS, transformers gpt_oss GptOssMLP: router Linear(h, E) with
                             bias, E experts of width intermediate_size with gate_up and down
                             biases, no shared expert)
                             (Llama 4, transformers llama4 Llama4TextMoe: router Linear(h, E) without
                             bias + E experts of width intermediate_size + one shared expert of
                             the same width, no gate)
    dense layers in MoE      layers that use the dense MLP of width `dense_ffn_hidden_size`
                             (DeepSeek `first_k_dense_replace` / `moe_layer_freq`, Qwen-MoE
                             `decoder_sparse_step` / `mlp_only_layers`, Llama 4 the layers outside
                             `moe_layers` / `interleave_moe_layer_step`, of width intermediate_size_mlp)
    norms per layer          `norms_per_layer` x h (RMSNorm) or x 2h (LayerNorm with bias);
                             2 for most, 4 for Gemma 2/3 (pre+post norms around attention and MLP,
                             arXiv:2408.00118), 1 for GPT-J and Falcon-7B (parallel attention + MLP),
                             0 parameters for OLMo's non-parametric LayerNorm
    embeddings               V*e (+ e*h project_in when the word embedding width e differs from h:
                             OPT-350m) (+ (P+2)*h learned positions: OPT offsets them by 2;
                             P*h for GPT-2) (+ 2h embedding LayerNorm: BLOOM)
    LM head                  V*e unless tied (+ V bias: GPT-J) (+ h*e project_out: OPT-350m)
    final norm               one norm unless the architecture has none (OPT post-LN variants)

Llama 4 (model_type llama4_text, and the multimodal llama4 wrapper read through its text_config)
follows transformers `src/transformers/models/llama4/configuration_llama4.py` (Llama4TextConfig,
the v5 dataclass form at commit 008e574391258935f3ecc3035c882e73bbcac419) and `modeling_llama4.py`
(commit 000c33fdfde12e1ffafbfcdb3c926df5727a00b6); the published configs, written by transformers
4.51.0, state `moe_layers` and `no_rope_layers` explicitly, which both read the same way. Its
q/k norm (Llama4TextL2Norm) has no weights, and its attention chunks (`attention_chunk_size` on the
RoPE layers, `no_rope_layers` / `layer_types`) change the attention FLOPs only
(`ModelSpec.mean_causal_keys`).

Published totals reproduced in tests/test_models.py (with the real config.json files under
tests/data/hf_configs/): DeepSeek-V3 671B total / 37B active, DeepSeek-V2 236B / 21B,
Qwen1.5-MoE-A2.7B 14.3B / 2.7B, Mixtral 8x7B 46.7B / 12.9B, gpt-oss-120b 116.83B / 5.13B
(arXiv:2508.10925 Table 1; active without the input embedding; its config keys inline in the test), Llama 3.1 405B, Gemma 2 2B and 9B
(paper Table 2 non-embedding counts exactly), OPT-125m, Falcon-7B, Llama 4 Scout (text model
107.77B; with the vision tower counted by hand in the test, 108.64B against the published 109B;
17.17B active against "17B") and Maverick (400.71B / 17.18B against 400B / 17B); Llama 2 (Touvron et al. 2023
Table 1), Llama 3 (Dubey et al. 2024), GPT-3 175B, BLOOM-176B (model card: 176,247,271,424) and
GPT-NeoX-20B (model card: 20,554,567,680).

The loader (`model_from_config`) follows each model_type's own config class (transformers
`configuration_<type>.py`) for defaults: tied embeddings (Gemma, GPT-2, OPT, Falcon, BLOOM,
StarCoder2 tie by default; Llama, Mistral, Qwen, DeepSeek, GPT-NeoX, GPT-J, Nemotron, OLMo do not),
head_dim (Gemma 256, Qwen3 128, otherwise hidden/heads), KV heads, biases, norms, MoE and
sliding-window layouts. It never returns a silently wrong model:

Hybrid Mamba-2 stacks (model_type nemotron_h, NemotronHConfig; mamba2, Mamba2Config) are read by
their own loader (`_hybrid_from_config`) into a per-layer `ModelSpec.layer_pattern` (one block per
layer: Mamba-2 mixer, attention, MLP or MoE; `ModelSpec.mamba_params`). Published totals reproduced
in tests/test_hybrid.py: Nemotron-H-8B 8,100,852,736, Nemotron-H-56B within 1%, Nemotron-3-Nano-30B-A3B
31.58B / 3.58B active (31.6B / 3.6B published), Mamba-Codestral-7B 7,285,403,648.

* refused (InputError naming the key or model_type): other non-transformer or hybrid architectures
  (mamba, rwkv, jamba, zamba, bamba, falcon_h1, xlstm, recurrent_gemma,
  minimax, qwen3_next, ... and any config carrying state-space or hybrid-layout keys such as
  `state_size`, `hybrid_override_pattern`, `layers_block_type`, `attn_type_list`), encoder-only
  and encoder-decoder models (`is_encoder_decoder`, `add_cross_attention`, bert/t5/whisper/...),
  multimodal wrappers (`text_config` with no top-level hidden size; model_type llama4 excepted: its
  text_config is read, with a warning that the vision tower is not counted), `layer_types` entries
  other than full/sliding attention (full/chunked for llama4_text), MoE layouts paraplan does not
  model (Llama 4's `interleave_moe_layer_step`, `intermediate_size_mlp` and `moe_layers` outside
  model_type llama4_text, `shared_intermediate_size`, `moe_shared_expert_intermediate_size`,
  a list-valued `moe_layer_freq`), Llama 4 layouts transformers cannot run (a null
  `attention_chunk_size`) or paraplan does not model (`num_local_experts` 1, which still builds a
  router and a shared expert), per-layer tricks that change the count (`num_kv_shared_layers`,
  AltUp/Laurel keys, `hidden_size_per_layer_input`, `o_lora_rank`, `global_head_dim`,
  `attention_k_eq_v`, `moe_latent_size`), non-positive or non-integer sizes (the message names
  the key present in the file), missing core sizes (hidden size, layers, heads, vocabulary);
* warned (`ModelSpec.warnings`, each naming the key and what was assumed): an unknown model_type
  (read with the llama-style or gpt2-style rules), a missing model_type, a math-changing key the
  model_type's reference implementation ignores (e.g. `sliding_window` in a Llama config,
  `num_key_value_heads` in a GPT-2 or pre-40B Falcon config), a size given only under a key the
  config class does not read (the value is then used: `intermediate_size` in a BLOOM, OPT or
  Falcon config, whose classes read 4*hidden / `ffn_dim` / `ffn_hidden_size`), a size absent
  from the file and taken from the config class default (e.g. Mixtral's 8 experts), DeepSeek's
  multi-token-prediction module (`num_nextn_predict_layers`: read as `ModelSpec.mtp_layers`, but
  not in the totals, as transformers drops it and the published 671B excludes it; priced only when
  trained, `Stack.mtp`), DeepSeek-V3.2's sparse-attention indexer
  (`index_topk`, ...), chunked attention (`attention_chunk_size`) outside model_type llama4_text,
  Llama 4 layout keys absent and taken from Llama4TextConfig (`interleave_moe_layer_step`,
  `no_rope_layers`, `attention_chunk_size`, ...), and any key paraplan
  does not know at all (assumed to change neither parameters nor FLOPs);
* ignored silently: keys known not to change parameter count or FLOPs (token ids, dtypes, rope
  settings incl. `rope_scaling`, softcapping, initialisation, dropout rates other than those read
  below, router loss
  coefficients, quantisation metadata, generation defaults, ...), and keys starting with "_".
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from paraplan.cost_models.errors import InputError
from paraplan.cost_models.units import finite_number
from paraplan.hardware_specs.files import names_anything, read_text_file

MlpKind = Literal["gated", "plain"]
QkNorm = Literal["none", "head", "full"]
LayerKind = Literal["dense", "moe", "attention", "mamba"]
# `ModelSpec.layer_pattern` symbols and the kind of layer each is
PATTERN_KINDS: dict[str, LayerKind] = {"M": "mamba", "*": "attention", "-": "dense", "E": "moe"}

GATED_FAMILIES = frozenset(
    {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2", "gemma3_text",
     "phi3", "deepseek_v2", "deepseek_v3", "olmo", "olmo2", "granite", "llama4_text", "gpt_oss"}
)  # fmt: skip
PLAIN_FAMILIES = frozenset({"gpt2", "gpt_neox", "nemotron", "bloom", "opt", "falcon", "gptj", "starcoder2"})
# Families whose config classes default to a positive dropout rate (transformers' GPT2Config:
# resid_pdrop, embd_pdrop, attn_pdrop 0.1; OPTConfig: dropout 0.1), with the keys that hold it: a
# config that states every one of them as 0.0 trains without dropout. BloomConfig
# (hidden_dropout, attention_dropout) and GPTJConfig (resid_pdrop, embd_pdrop, attn_pdrop)
# default to 0.0: without a stated positive rate, no dropout.
DROPOUT_FAMILIES: dict[str, tuple[str, ...]] = {
    "gpt2": ("resid_pdrop", "embd_pdrop", "attn_pdrop"),
    "opt": ("dropout",),
}

MAX_LAYERS = 100_000
MAX_CONFIG_INT = 10**12
MAX_WIDTH = 1_000_000


class ModelSpec(BaseModel):
    """A decoder-only transformer, exactly enough to count its parameters, FLOPs and memory.

    Fields beyond the classic dense decoder all default to "absent", so a spec built by hand for
    a Llama- or GPT-style model needs none of them. For MoE models `ffn_hidden_size` is the width
    of one routed expert; the dense layers of an MoE model (`dense_layer_ids`) use
    `dense_ffn_hidden_size`. For MLA models `head_dim` is the query/key head dim
    (qk_nope_head_dim + qk_rope_head_dim), `v_head_dim` the value head dim.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(min_length=1)
    hidden_size: int = Field(ge=1, le=MAX_WIDTH)
    num_layers: int = Field(ge=1, le=MAX_LAYERS)
    num_heads: int = Field(ge=1, le=MAX_WIDTH)
    num_kv_heads: int = Field(ge=1, le=MAX_WIDTH)
    head_dim: int = Field(ge=1, le=MAX_WIDTH)
    ffn_hidden_size: int = Field(ge=1, le=10 * MAX_WIDTH)
    vocab_size: int = Field(ge=1, le=100_000_000)
    max_seq_len: int = Field(ge=1, le=100_000_000)
    mlp: MlpKind
    tied_embeddings: bool
    learned_positions: bool = False
    layernorm: bool = False  # LayerNorm (weight + bias) instead of RMSNorm (weight)
    linear_bias: bool = False  # every linear layer has a bias (overridden per kind below)
    dropout: bool = False
    num_experts: int = Field(default=1, ge=1, le=100_000)  # 1 = dense MLP
    experts_top_k: int = Field(default=1, ge=1, le=100_000)

    # --- biases, norms, embeddings (None: follow linear_bias) ----------------------------------
    qkv_bias: bool | None = None
    out_bias: bool | None = None
    mlp_bias: bool | None = None
    lm_head_bias: bool = False  # GPT-J
    norms_per_layer: int = Field(default=2, ge=0, le=8)
    norm_affine: bool = True  # False: OLMo's LayerNorm without weight or bias
    qk_norm: QkNorm = "none"  # "head": RMSNorm(head_dim) on q and k; "full": on the whole q and k
    attention_sinks: bool = False  # GPT-OSS: one learned sink logit per query head and layer
    glu_clamp: float | None = Field(default=None, gt=0)  # GPT-OSS swiglu_limit: the GLU halves clamped at it
    # The MLP's activation as the config names it (hidden_act, hidden_activation, activation_function,
    # or its config class's default; GPT_OSS_GLU for GPT-OSS's own); None: not stated (the MLP kind's
    # usual one: SiLU gated, GELU plain). It moves no FLOP or byte the model counts; a launch config
    # must write it.
    mlp_act: str | None = None
    # Rotary settings, which move nothing the model counts (a partial rotary kernel still reads and
    # writes whole heads: Transformer Engine d0067d0d common/fused_rope/fused_rope.cu rotates d2 of
    # d and "copies the rest") but which a launch config must write: the base (rope_theta; None: not
    # stated, the framework's default), the rotated share of each head (partial_rotary_factor,
    # rotary_pct) and the config's RoPE scaling in words (rope_scaling; None: none).
    rope_theta: float | None = Field(default=None, gt=0)
    rotary_fraction: float = Field(default=1.0, gt=0, le=1)
    rope_scaling: str | None = None
    # The norms' epsilon (None: not stated) and Nemotron's zero-centred LayerNorm (LayerNorm1P: the
    # weight stored as w - 1); like the rotary settings they move no count, a launch config writes them
    norm_eps: float | None = Field(default=None, gt=0, lt=1)
    norm_zero_centered: bool = False
    final_norm: bool = True
    embedding_norm: bool = False  # BLOOM's word_embeddings_layernorm
    embed_dim: int | None = Field(default=None, ge=1, le=MAX_WIDTH)  # OPT word_embed_proj_dim
    position_offset: int = Field(default=0, ge=0, le=1_000)  # OPT learned positions have 2 extra rows

    # --- mixture of experts -------------------------------------------------------------------
    num_shared_experts: int = Field(default=0, ge=0, le=100_000)
    shared_expert_ffn: int | None = Field(default=None, ge=1, le=10 * MAX_WIDTH)  # width of each
    shared_expert_gate: bool = False  # Qwen-MoE: sigmoid gate Linear(h, 1) on the shared expert
    router_bias: bool = False  # E per MoE layer: DeepSeek-V3 e_score_correction_bias, GPT-OSS router bias
    # How the router turns scores into the routed tokens' weights: its score function, whether the
    # top-k weights are renormalised to sum to one (norm_topk_prob), and routed_scaling_factor. They
    # move nothing the model counts; a launch config writes them.
    router_score: Literal["softmax", "sigmoid"] = "softmax"
    router_renorm: bool = True
    router_scale: float = Field(default=1.0, gt=0, le=1000)
    dense_layer_ids: tuple[int, ...] = ()  # layers of an MoE model that use the dense MLP
    dense_ffn_hidden_size: int | None = Field(default=None, ge=1, le=10 * MAX_WIDTH)

    # --- multi-head latent attention (DeepSeek-V2/V3) -------------------------------------------
    q_lora_rank: int | None = Field(default=None, ge=1, le=MAX_WIDTH)
    kv_lora_rank: int | None = Field(default=None, ge=1, le=MAX_WIDTH)
    qk_rope_head_dim: int = Field(default=0, ge=0, le=MAX_WIDTH)
    v_head_dim: int | None = Field(default=None, ge=1, le=MAX_WIDTH)

    # --- sliding-window attention (no parameter change; attention FLOPs and KV) --------------------
    sliding_window: int | None = Field(default=None, ge=1, le=100_000_000)
    sliding_layer_ids: tuple[int, ...] | None = None  # None with a window: every layer slides

    # --- chunked attention (Llama 4: block-diagonal causal; no parameter change) -------------------
    attention_chunk: int | None = Field(default=None, ge=1, le=100_000_000)
    chunked_layer_ids: tuple[int, ...] | None = None  # None with a chunk: every layer is chunked

    # --- DeepSeek-V3 multi-token prediction and node-limited routing -----------------------------
    # MTP depth D (`num_nextn_predict_layers`): modules outside `num_layers` and outside the
    # parameter totals; they cost anything only when trained (`Stack.mtp`, see `mtp_params`).
    mtp_layers: int = Field(default=0, ge=0, le=MAX_LAYERS)
    # Group-limited routing (`n_group` / `topk_group`): the E experts form `expert_groups`
    # contiguous groups and a token's experts lie in at most `group_top_k` of them (1, 1: none).
    expert_groups: int = Field(default=1, ge=1, le=100_000)
    group_top_k: int = Field(default=1, ge=1, le=100_000)

    # --- hybrid Mamba-2 layer stacks (Nemotron-H, pure Mamba-2) ---------------------------------
    # One symbol per layer, each layer ONE block with its own pre-norm and residual (Megatron-LM
    # d98e8a64 megatron/core/models/hybrid/hybrid_layer_allocation.py `Symbols`): 'M' a Mamba-2
    # mixer, '*' self-attention, '-' a dense MLP, 'E' an MoE layer. None: every layer is attention
    # + MLP (a transformer decoder). See `mamba_params` for the mixer.
    layer_pattern: str | None = Field(default=None, min_length=1, max_length=MAX_LAYERS, pattern=r"^[M*\-E]+$")
    mamba_heads: int = Field(default=0, ge=0, le=MAX_WIDTH)
    mamba_head_dim: int = Field(default=64, ge=1, le=MAX_WIDTH)
    mamba_state_dim: int = Field(default=128, ge=1, le=MAX_WIDTH)
    mamba_groups: int = Field(default=8, ge=1, le=MAX_WIDTH)
    mamba_conv_kernel: int = Field(default=4, ge=1, le=1_000)
    mamba_chunk: int = Field(default=128, ge=1, le=100_000)
    rotary: bool = True  # rotary embeddings on q and k (False: learned positions, or none as in Nemotron-H)

    warnings: tuple[str, ...] = ()  # what the loader assumed; see the module docstring

    @model_validator(mode="after")
    def _consistent(self) -> ModelSpec:
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_attention_heads {self.num_heads} is not a multiple of num_key_value_heads {self.num_kv_heads}"
            )
        if self.experts_top_k > self.num_experts:
            raise ValueError(f"experts per token {self.experts_top_k} exceeds the number of experts {self.num_experts}")
        _check_layer_ids("dense_layer_ids", self.dense_layer_ids, self.num_layers)
        if self.dense_layer_ids and not self.is_moe:
            raise ValueError("dense_layer_ids only apply to a mixture-of-experts model")
        if (self.num_shared_experts or self.shared_expert_gate) and not self.is_moe:
            raise ValueError("shared experts only apply to a mixture-of-experts model")
        if self.expert_groups > 1:
            if self.num_experts % self.expert_groups:
                raise ValueError(f"{self.num_experts} experts do not split into {self.expert_groups} expert groups")
            if self.group_top_k > self.expert_groups:
                raise ValueError(f"group top-k {self.group_top_k} exceeds the {self.expert_groups} expert groups")
            if self.experts_top_k > self.group_top_k * (self.num_experts // self.expert_groups):
                raise ValueError("the chosen expert groups hold fewer experts than a token is routed to")
        if self.shared_expert_gate and not self.num_shared_experts:
            raise ValueError("shared_expert_gate needs a shared expert")
        if self.q_lora_rank is not None and self.kv_lora_rank is None:
            raise ValueError("q_lora_rank is part of multi-head latent attention: kv_lora_rank is missing")
        if self.is_mla:
            if self.qk_rope_head_dim >= self.head_dim:
                raise ValueError(f"qk_rope_head_dim {self.qk_rope_head_dim} must be below head_dim {self.head_dim}")
            if self.num_kv_heads != self.num_heads:
                raise ValueError("multi-head latent attention decompresses one key/value per head")
        elif self.qk_rope_head_dim or self.v_head_dim is not None:
            raise ValueError("qk_rope_head_dim and v_head_dim apply to multi-head latent attention only")
        if self.sliding_layer_ids is not None:
            if self.sliding_window is None:
                raise ValueError("sliding_layer_ids needs a sliding_window")
            _check_layer_ids("sliding_layer_ids", self.sliding_layer_ids, self.num_layers)
        if self.chunked_layer_ids is not None:
            if self.attention_chunk is None:
                raise ValueError("chunked_layer_ids needs an attention_chunk")
            _check_layer_ids("chunked_layer_ids", self.chunked_layer_ids, self.num_layers)
        both = [
            i for i, (s, c) in enumerate(zip(self.layer_is_sliding(), self.layer_is_chunked(), strict=True)) if s and c
        ]
        if both:
            raise ValueError(f"layer {both[0]} cannot both slide a window and attend in chunks")
        self._consistent_hybrid()
        return self

    def _consistent_hybrid(self) -> None:
        pattern = self.layer_pattern
        if pattern is None:
            if self.mamba_heads:
                raise ValueError("mamba_heads needs a layer_pattern with Mamba ('M') layers")
            return
        if len(pattern) != self.num_layers:
            raise ValueError(f"layer_pattern has {len(pattern)} symbols for {self.num_layers} layers")
        if self.dense_layer_ids:
            raise ValueError("a layer_pattern places the dense MLP layers itself ('-'): no dense_layer_ids")
        if ("E" in pattern) != self.is_moe:
            raise ValueError("a layer_pattern has MoE ('E') layers exactly when the model has routed experts")
        if ("M" in pattern) != (self.mamba_heads > 0):
            raise ValueError("a layer_pattern has Mamba ('M') layers exactly when mamba_heads is set")
        if self.mamba_heads % self.mamba_groups:
            raise ValueError(f"{self.mamba_heads} Mamba heads do not split into {self.mamba_groups} groups")
        if self.mtp_layers:
            raise ValueError("multi-token prediction is not modelled for a layer_pattern model")

    # --- shapes -------------------------------------------------------------------------------
    @property
    def q_dim(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of K (and of V, except for MLA: see `v_dim`)."""
        return self.num_kv_heads * self.head_dim

    @property
    def v_dim(self) -> int:
        return self.num_kv_heads * (self.v_head_dim or self.head_dim)

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 1

    def positions_exceeded(self, seq_len: int) -> bool:
        """A sequence longer than the learned position table (`max_seq_len` rows): the model as
        configured cannot embed its positions (rotary and position-free models have no such table)."""
        return self.learned_positions and seq_len > self.max_seq_len

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank is not None

    @property
    def mlp_matrices(self) -> int:
        return 3 if self.mlp == "gated" else 2

    @property
    def word_embed_dim(self) -> int:
        return self.embed_dim or self.hidden_size

    @property
    def has_qkv_bias(self) -> bool:
        return self.linear_bias if self.qkv_bias is None else self.qkv_bias

    @property
    def has_out_bias(self) -> bool:
        return self.linear_bias if self.out_bias is None else self.out_bias

    @property
    def has_mlp_bias(self) -> bool:
        return self.linear_bias if self.mlp_bias is None else self.mlp_bias

    # --- per-layer view -------------------------------------------------------------------------
    def layer_kinds(self) -> tuple[LayerKind, ...]:
        """Per layer: "moe" (routed experts) or "dense" (one MLP), each with attention; a
        `layer_pattern` model's layers are one block each, "mamba", "attention", "dense" (MLP) or
        "moe". Dense models are all "dense"."""
        if self.layer_pattern is not None:
            return tuple(PATTERN_KINDS[c] for c in self.layer_pattern)
        dense = set(range(self.num_layers)) if not self.is_moe else set(self.dense_layer_ids)
        kinds: list[LayerKind] = ["dense" if i in dense else "moe" for i in range(self.num_layers)]
        return tuple(kinds)

    @property
    def dense_layers(self) -> int:
        """Leading dense layers of an MoE model (DeepSeek's `first_k_dense_replace`); 0 for dense models."""
        if not self.is_moe:
            return 0
        count = 0
        while count < len(self.dense_layer_ids) and self.dense_layer_ids[count] == count:
            count += 1
        return count

    @property
    def num_dense_layers(self) -> int:
        """All layers with a dense MLP (every layer of a dense model; the '-' of a `layer_pattern`)."""
        if self.layer_pattern is not None:
            return self.layer_pattern.count("-")
        return self.num_layers if not self.is_moe else len(self.dense_layer_ids)

    @property
    def num_moe_layers(self) -> int:
        if self.layer_pattern is not None:
            return self.layer_pattern.count("E")
        return self.num_layers - self.num_dense_layers

    # --- hybrid layer stacks: the share of each kind of block in the mean layer ------------------
    @property
    def is_hybrid(self) -> bool:
        """Layers of one block each (`layer_pattern`), not attention + MLP."""
        return self.layer_pattern is not None

    @property
    def blocks_per_layer(self) -> int:
        """Blocks (pre-norm, mixer or MLP, residual add) per layer: 2 in a transformer decoder
        (attention, MLP), 1 in a `layer_pattern` model."""
        return 1 if self.is_hybrid else 2

    @property
    def attention_share(self) -> float:
        """Share of the layers with self-attention: 1 but in a `layer_pattern` model."""
        return 1.0 if self.layer_pattern is None else self.layer_pattern.count("*") / self.num_layers

    @property
    def mamba_share(self) -> float:
        """Share of the layers that are Mamba-2 mixers (0 but in a `layer_pattern` model)."""
        return 0.0 if self.layer_pattern is None else self.layer_pattern.count("M") / self.num_layers

    @property
    def dense_mlp_share(self) -> float:
        """Share of the layers with a dense MLP: 1 - `moe_share` in a transformer decoder."""
        if self.layer_pattern is None:
            return 1.0 - self.moe_share
        return self.num_dense_layers / self.num_layers

    # --- the Mamba-2 mixer ----------------------------------------------------------------------
    # Dao & Gu 2024 ("Transformers are SSMs", arXiv:2405.21060, Sec 7-8; the reference mamba_ssm
    # Mamba2 module) as Megatron-LM d98e8a64 builds it (megatron/core/ssm/mamba_mixer.py
    # MambaMixer) and transformers' NemotronHMamba2Mixer: d = mamba_heads x mamba_head_dim (d_inner),
    # G groups, N state dim, H heads, K conv kernel.
    #   in_proj   h x (2d + 2GN + H)   [z, x, B, C, dt], no bias (Megatron asserts `not bias`)
    #   conv1d    depthwise over the d + 2GN channels of x, B, C: (d + 2GN) x K weights + a bias
    #             (Megatron asserts `conv_bias`)
    #   A_log, D, dt_bias   H each (D per head: `D_has_hdim` False)
    #   norm      gated RMSNorm over d (its weight, d), group size d/G
    #   out_proj  d x h, no bias
    # plus the layer's pre-norm (h), in Megatron fused into in_proj (TELayerNormColumnParallelLinear).

    @property
    def mamba_inner(self) -> int:
        """d_inner = mamba_heads x mamba_head_dim."""
        return self.mamba_heads * self.mamba_head_dim

    @property
    def mamba_in_width(self) -> int:
        """in_proj's output width: z and x (d each), B and C (GN each), dt (H)."""
        return 2 * self.mamba_inner + 2 * self.mamba_groups * self.mamba_state_dim + self.mamba_heads

    @property
    def mamba_conv_channels(self) -> int:
        """The conv1d's channels: x, B and C."""
        return self.mamba_inner + 2 * self.mamba_groups * self.mamba_state_dim

    @property
    def mamba_matmul_params(self) -> int:
        """The Mamba-2 mixer's projection weights (in_proj and out_proj)."""
        return self.hidden_size * self.mamba_in_width + self.mamba_inner * self.hidden_size

    @property
    def mamba_params(self) -> int:
        """One Mamba-2 mixer (without the layer's pre-norm): projections, conv1d weight and bias,
        A_log, D and dt_bias per head, the gated norm's weight."""
        conv = self.mamba_conv_channels * (self.mamba_conv_kernel + 1)
        return self.mamba_matmul_params + conv + 3 * self.mamba_heads + self.mamba_inner

    @property
    def mamba_scan_flops_per_token(self) -> float:
        """Forward FLOPs per token of one mixer's SSD scan (chunk length Q = `mamba_chunk`, 128 in
        Megatron and mamba_ssm), the chunked algorithm of arXiv:2405.21060 Sec 6 as mamba_ssm's
        `_mamba_chunk_scan_combined_fwd` runs it (mamba_ssm/ops/triton/ssd_combined.py), per chunk
        of Q tokens:
          C B^T within the chunk (`_bmm_chunk_fwd`, all Q x Q pairs): Q x Q x N per group
              -> 2 Q N G per token;
          the intra-chunk output (CB o decay) X (`_chunk_scan_fwd`, causal: query i reads i + 1
              keys, (Q + 1)/2 on average): -> 2 (Q + 1)/2 P per head = (Q + 1) d per token;
          the chunk's final states, B^T (decay o X) (`_chunk_state_fwd`): N x P x Q per head
              -> 2 N d per token;
          the inter-chunk output, C times the entering state (`_chunk_scan_fwd`): Q x N x P per
              head -> 2 N d per token;
        2 Q N G + (Q + 1) d + 4 N d in all. The state passing between chunks (N P per head and
        chunk), the dt softplus and cumsum, D x, the gate y silu(z) and the conv are O(d) per
        token, left out. Nemotron-H 8B (d 8192, N 128, G 8): 5.5 MFLOP, 2.5% of the mixer's
        projections (2 x 4096 x (18560 + 8192) = 219 MFLOP)."""
        q, n, d = float(self.mamba_chunk), float(self.mamba_state_dim), float(self.mamba_inner)
        return 2.0 * q * n * self.mamba_groups + (q + 1.0) * d + 4.0 * n * d

    @property
    def mamba_scan_recompute_flops_per_token(self) -> float:
        """FLOPs per token one mixer's scan backward runs again before its gradients: mamba_ssm's
        `_mamba_chunk_scan_combined_bwd` recomputes C B^T (`_bmm_chunk_fwd`) and the chunk states
        (`_chunk_state_fwd`, then the state passing), 2 Q N G + 2 N d; its gradients are two
        matmuls for each forward one (2 x `mamba_scan_flops_per_token`)."""
        q, n, d = float(self.mamba_chunk), float(self.mamba_state_dim), float(self.mamba_inner)
        return 2.0 * q * n * self.mamba_groups + 2.0 * n * d

    @property
    def mamba_scan_intermediate_bytes_per_token(self) -> tuple[float, float]:
        """Bytes per token, (forward, backward), one mixer's SSD kernels pass between them through
        memory beyond reading their inputs and writing their outputs once (derivation and source:
        `compute.mamba_mixer_s`): 24 H + 2 c + 12 d N / Q + 8 G Q forward, 34 d N / Q + 24 G Q
        backward, before tensor parallelism splits heads and groups."""
        q, n, d = float(self.mamba_chunk), float(self.mamba_state_dim), float(self.mamba_inner)
        states, cb = d * n / q, self.mamba_groups * q
        fwd = 24.0 * self.mamba_heads + 2.0 * self.mamba_conv_channels + 12.0 * states + 8.0 * cb
        return fwd, 34.0 * states + 24.0 * cb

    def _hybrid_block_params(self) -> dict[str, int]:
        """Parameters of each kind of `layer_pattern` block, its pre-norm included (the MoE
        block with all its E routed experts)."""
        norm = self.norm_params
        moe = self.router_params + self.shared_expert_params + self.num_experts * self.expert_params
        return {"M": self.mamba_params + norm, "*": self.attention_params + norm, "-": self.dense_mlp_params + norm,
                "E": moe + norm}  # fmt: skip

    def _hybrid_block_matmul_active(self) -> dict[str, int]:
        """Matrix weights one token is multiplied by in each kind of `layer_pattern` block."""
        h, m = self.hidden_size, self.mlp_matrices
        shared = self.num_shared_experts * m * h * (self.shared_expert_ffn or self.ffn_hidden_size)
        moe = h * self.num_experts + shared + self.experts_top_k * m * h * self.ffn_hidden_size
        return {"M": self.mamba_matmul_params, "*": self.attention_matmul_params,
                "-": m * h * (self.dense_ffn_hidden_size or self.ffn_hidden_size), "E": moe}  # fmt: skip

    def _hybrid_sum(self, per_block: dict[str, int]) -> int:
        """Sum over the layers of a `layer_pattern` model of a per-block count."""
        assert self.layer_pattern is not None
        return sum(self.layer_pattern.count(c) * value for c, value in per_block.items())

    def layer_is_sliding(self) -> tuple[bool, ...]:
        return self._layers_with(self.sliding_window, self.sliding_layer_ids)

    def layer_is_chunked(self) -> tuple[bool, ...]:
        return self._layers_with(self.attention_chunk, self.chunked_layer_ids)

    def _layers_with(self, span: int | None, ids: tuple[int, ...] | None) -> tuple[bool, ...]:
        """Per layer, whether a local-attention `span` applies: nowhere without one, everywhere
        when no layers are listed, else on the listed `ids`."""
        if span is None:
            return (False,) * self.num_layers
        if ids is None:
            return (True,) * self.num_layers
        listed = set(ids)
        return tuple(i in listed for i in range(self.num_layers))

    def attention_spans(self, seq_len: int) -> tuple[int, ...]:
        """Keys each query attends to (at most), per layer: min(s, window) on sliding layers,
        min(s, chunk) on chunked layers."""
        spans = []
        for sliding, chunked in zip(self.layer_is_sliding(), self.layer_is_chunked(), strict=True):
            if sliding and self.sliding_window:
                spans.append(min(seq_len, self.sliding_window))
            elif chunked and self.attention_chunk:
                spans.append(min(seq_len, self.attention_chunk))
            else:
                spans.append(seq_len)
        return tuple(spans)

    def mean_attention_span(self, seq_len: int) -> float:
        return sum(self.attention_spans(seq_len)) / self.num_layers

    # --- parameter counts ---------------------------------------------------------------------
    def mlp_params(self, width: int) -> int:
        """One MLP (dense, routed expert or shared expert) of the given width."""
        h = self.hidden_size
        biases = (width * (self.mlp_matrices - 1) + h) if self.has_mlp_bias else 0
        return self.mlp_matrices * h * width + biases

    @property
    def qk_norm_params(self) -> int:
        if self.qk_norm == "head":
            return 2 * self.head_dim
        if self.qk_norm == "full":
            return self.q_dim + self.kv_dim
        return 0

    @property
    def attention_params(self) -> int:
        """One layer's attention block, including its q/k norms and MLA's latent norms."""
        h, a = self.hidden_size, self.num_heads
        if self.kv_lora_rank is not None:
            rope, d_v, r_kv = self.qk_rope_head_dim, self.v_head_dim or self.head_dim, self.kv_lora_rank
            nope = self.head_dim - rope
            if self.q_lora_rank is None:
                q = h * a * self.head_dim
            else:
                q = h * self.q_lora_rank + self.q_lora_rank + self.q_lora_rank * a * self.head_dim
                q += self.q_lora_rank if self.has_qkv_bias else 0  # q_a_proj bias
            kv = h * (r_kv + rope) + r_kv + r_kv * a * (nope + d_v)
            kv += (r_kv + rope) if self.has_qkv_bias else 0  # kv_a_proj_with_mqa bias
            out = a * d_v * h + (h if self.has_out_bias else 0)
            return q + kv + out + self.qk_norm_params + self.sink_params
        weights = h * self.q_dim + 2 * h * self.kv_dim + self.q_dim * h
        biases = (self.q_dim + 2 * self.kv_dim if self.has_qkv_bias else 0) + (h if self.has_out_bias else 0)
        return weights + biases + self.qk_norm_params + self.sink_params

    @property
    def sink_params(self) -> int:
        return self.num_heads if self.attention_sinks else 0

    @property
    def expert_params(self) -> int:
        """One routed expert (or the dense MLP of a dense model)."""
        return self.mlp_params(self.ffn_hidden_size)

    @property
    def dense_mlp_params(self) -> int:
        """The MLP of a dense layer (all layers of a dense model; `dense_layer_ids` of an MoE)."""
        return self.mlp_params(self.dense_ffn_hidden_size or self.ffn_hidden_size)

    @property
    def shared_expert_params(self) -> int:
        """All shared experts of one MoE layer, with Qwen's shared-expert gate."""
        if not self.num_shared_experts:
            return 0
        width = self.shared_expert_ffn or self.ffn_hidden_size
        gate = self.hidden_size if self.shared_expert_gate else 0
        return self.num_shared_experts * self.mlp_params(width) + gate

    @property
    def router_params(self) -> int:
        if not self.is_moe:
            return 0
        return self.hidden_size * self.num_experts + (self.num_experts if self.router_bias else 0)

    @property
    def norm_params(self) -> int:
        """One hidden-width norm."""
        if not self.norm_affine:
            return 0
        return (2 if self.layernorm else 1) * self.hidden_size

    @property
    def layer_norm_params(self) -> int:
        """All hidden-width norms of one layer (q/k norms are in `attention_params`)."""
        return self.norms_per_layer * self.norm_params

    @property
    def layer_dense_params(self) -> int:
        """Per MoE layer, everything except the routed experts (attention, router, shared
        experts, norms): replicated over expert parallelism. For a dense model: all but the MLP."""
        return self.attention_params + self.router_params + self.shared_expert_params + self.layer_norm_params

    @property
    def layer_params(self) -> int:
        """An MoE layer (every layer of a dense model). See `dense_layer_params`, `layer_param_counts`."""
        return self.layer_dense_params + self.num_experts * self.expert_params

    @property
    def dense_layer_params(self) -> int:
        """A dense layer: attention + norms + the dense MLP (equals `layer_params` for dense models)."""
        return self.attention_params + self.layer_norm_params + self.dense_mlp_params

    @property
    def moe_layer_active_params(self) -> int:
        """Parameters one token touches in an MoE layer: top-k routed experts, not all E."""
        return self.layer_dense_params + self.experts_top_k * self.expert_params

    def last_layer_kind(self) -> LayerKind:
        """`layer_kinds()[-1]`, without the tuple of every layer (the MTP modules copy the last
        layer; cost models ask per evaluation, of configs with up to 100,000 layers)."""
        if self.layer_pattern is not None:
            return PATTERN_KINDS[self.layer_pattern[-1]]
        return "moe" if self.is_moe and self.num_layers - 1 not in self.dense_layer_ids else "dense"

    def last_layer_params(self) -> int:
        """`layer_param_counts()[-1]` (see `last_layer_kind`)."""
        if self.layer_pattern is not None:
            return self._hybrid_block_params()[self.layer_pattern[-1]]
        if not self.is_moe:
            return self.layer_params
        return self.dense_layer_params if self.last_layer_kind() == "dense" else self.layer_params

    def layer_param_counts(self) -> tuple[int, ...]:
        """Parameters of each layer, in order."""
        if self.layer_pattern is not None:
            blocks = self._hybrid_block_params()
            return tuple(blocks[c] for c in self.layer_pattern)
        if not self.is_moe:
            return (self.layer_params,) * self.num_layers
        dense, moe = self.dense_layer_params, self.layer_params
        return tuple(dense if kind == "dense" else moe for kind in self.layer_kinds())

    def layer_matmul_params_active(self) -> tuple[int, ...]:
        """Per layer, the matrix weights one token is multiplied by (no biases, no norms):
        forward FLOPs per token are twice this, plus the attention scores."""
        if self.layer_pattern is not None:
            blocks = self._hybrid_block_matmul_active()
            return tuple(blocks[c] for c in self.layer_pattern)
        dense, moe = self._matmul_params_active_by_kind()
        if not self.is_moe:
            return (dense,) * self.num_layers
        return tuple(dense if kind == "dense" else moe for kind in self.layer_kinds())

    def _matmul_params_active_by_kind(self) -> tuple[int, int]:
        """`layer_matmul_params_active` of a dense layer and of an MoE layer."""
        h, a = self.hidden_size, self.num_heads
        if self.kv_lora_rank is not None:
            d_v, r_kv, rope = self.v_head_dim or self.head_dim, self.kv_lora_rank, self.qk_rope_head_dim
            q_lora = self.q_lora_rank
            q = h * a * self.head_dim if q_lora is None else h * q_lora + q_lora * a * self.head_dim
            attention = q + h * (r_kv + rope) + r_kv * a * (self.head_dim - rope + d_v) + a * d_v * h
        else:
            attention = 2 * h * self.q_dim + 2 * h * self.kv_dim
        m = self.mlp_matrices
        dense = attention + m * h * (self.dense_ffn_hidden_size or self.ffn_hidden_size)
        shared = self.num_shared_experts * m * h * (self.shared_expert_ffn or self.ffn_hidden_size)
        shared += h if self.shared_expert_gate else 0
        moe = attention + h * self.num_experts + shared + self.experts_top_k * m * h * self.ffn_hidden_size
        return dense, moe

    # --- multi-token prediction (trained only under `Stack.mtp`) --------------------------------
    # DeepSeek-V3 (arXiv:2412.19437 Sec 2.2): module k combines RMSNorm(h_i) and RMSNorm(Emb(t_{i+k}))
    # through a 2h x h projection M_k, runs one transformer block and shares the embedding and the
    # output head with the main model. Megatron-LM d98e8a64 builds it so
    # (megatron/core/transformer/multi_token_prediction.py MultiTokenPredictionLayer: enorm, hnorm,
    # eh_proj ColumnParallelLinear(2h, h, bias=False), the transformer layer, final_layernorm; the
    # layer's spec is the decoder's last, gpt_layer_specs.py get_gpt_mtp_block_spec
    # `spec.layer_specs[-1]`; GPTModel reuses `self.embedding` and `output_layer`).

    @property
    def mtp_layer_is_moe(self) -> bool:
        """Whether the MTP modules' transformer layer has routed experts (as the last layer)."""
        return self.is_moe and self.last_layer_kind() == "moe"

    @property
    def mtp_module_params(self) -> int:
        """One MTP module's own parameters: enorm, hnorm and final_layernorm (3 norms), eh_proj
        2h*h and one transformer layer like the decoder's last; embedding and head are shared.
        DeepSeek-V3: 3*7168 + 2*7168^2 + 11,507,286,272 (its last, MoE, layer) = 11,610,068,224;
        with the checkpoint's own copies of embedding and head (2 x 129280*7168) 13.46B, against the
        model card's "14B of the Multi-Token Prediction (MTP) Module weights" (671.03B + 13.46B =
        684.49B, the card's 685B total)."""
        h = self.hidden_size
        return 3 * self.norm_params + 2 * h * h + self.last_layer_params()

    @property
    def mtp_params(self) -> int:
        """All MTP modules' own parameters (not in `params_total`: DeepSeek-V3's 671B excludes them)."""
        return self.mtp_layers * self.mtp_module_params

    @property
    def mtp_matmul_params_active(self) -> int:
        """Per MTP module, the matrix weights one token is multiplied by: eh_proj 2h*h, the layer's
        active weights and the shared output head V*e (its own logits and loss)."""
        h = self.hidden_size
        dense, moe = self._matmul_params_active_by_kind()  # `layer_matmul_params_active()[-1]`
        last = moe if self.last_layer_kind() == "moe" else dense
        return 2 * h * h + last + self.vocab_size * self.word_embed_dim

    # --- per-layer means, for cost models that price "a layer" of a stage ------------------------
    # A stage's layers are priced as the model's mean layer: exact for uniform models, and for
    # DeepSeek-style leading dense layers an average over the model (they sit on the first stage).

    @property
    def moe_share(self) -> float:
        """Share of the layers with routed experts."""
        return self.num_moe_layers / self.num_layers

    @property
    def mean_layer_dense_params(self) -> float:
        """Per layer, the parameters replicated over expert parallelism (attention, norms, router,
        shared experts; the MLP of a dense layer; a `layer_pattern` model's Mamba and attention
        blocks)."""
        if self.layer_pattern is not None:
            routed = self.num_moe_layers * self.num_experts * self.expert_params
            return (self._hybrid_sum(self._hybrid_block_params()) - routed) / self.num_layers
        dense = self.num_dense_layers * self.dense_layer_params
        return (dense + self.num_moe_layers * self.layer_dense_params) / self.num_layers

    @property
    def mean_layer_expert_params(self) -> float:
        """Per layer, the routed experts' parameters (all E of them; 0 for dense models)."""
        return self.moe_share * self.num_experts * self.expert_params if self.is_moe else 0.0

    @property
    def attention_matmul_params(self) -> int:
        """Matrix weights of one layer's attention (QKV or MLA's projections, and the output)."""
        h = self.hidden_size
        if self.kv_lora_rank is None:
            return 2 * h * self.q_dim + 2 * h * self.kv_dim
        d_v, r_kv, rope, q_lora = (
            self.v_head_dim or self.head_dim,
            self.kv_lora_rank,
            self.qk_rope_head_dim,
            self.q_lora_rank,
        )
        q = (
            h * self.num_heads * self.head_dim
            if q_lora is None
            else h * q_lora + q_lora * self.num_heads * self.head_dim
        )
        return q + h * (r_kv + rope) + r_kv * self.num_heads * (self.head_dim - rope + d_v) + self.num_heads * d_v * h

    @property
    def mean_matmul_params_active(self) -> float:
        """The mean of `layer_matmul_params_active`, summed as (layers of each kind) x (its
        weights): the same integer, without a tuple of every layer (asked on every evaluation,
        of configs with up to 100,000 layers)."""
        if self.layer_pattern is not None:
            return self._hybrid_sum(self._hybrid_block_matmul_active()) / self.num_layers
        dense, moe = self._matmul_params_active_by_kind()
        return (self.num_dense_layers * dense + self.num_moe_layers * moe) / self.num_layers

    @property
    def attention_core_width(self) -> int:
        """Q.K^T and P.V per key: a*d_qk + a*d_v multiply-adds (4*s*a*d FLOPs per token in the
        usual case d_v = d_qk = d)."""
        return self.q_dim + self.num_heads * (self.v_head_dim or self.head_dim)

    def mean_causal_keys(self, seq_len: float) -> float:
        """Keys a query attends to under the causal mask, averaged over positions and layers.

        * full causal attention: query i (1-based) sees i keys, so sum_i i / s = (s + 1)/2;
        * a sliding window w < s (Mistral, Gemma 2/3 local layers): the first w queries see
          1..w keys, the other s - w see w: (w(w + 1)/2 + (s - w) w) / s;
        * chunked attention with chunk c (Llama 4 RoPE layers: transformers
          `masking_utils.create_chunked_causal_mask`, a query sees the keys of its own chunk up to
          itself, kv // c == q // c and kv <= q): each of the floor(s/c) full chunks sums to
          c(c + 1)/2, the remainder r = s - c floor(s/c) to r(r + 1)/2; divided by s.
          With c >= s this is the full causal (s + 1)/2.
        """
        s = float(seq_len)
        full = (s + 1.0) / 2.0
        windowed = full
        if self.sliding_window is not None and self.sliding_window < s:
            w = float(self.sliding_window)
            windowed = (w * (w + 1.0) / 2.0 + (s - w) * w) / s
        chunked = full
        if self.attention_chunk is not None and self.attention_chunk < s:
            c = float(self.attention_chunk)
            full_chunks = math.floor(s / c)
            r = s - full_chunks * c
            chunked = (full_chunks * c * (c + 1.0) / 2.0 + r * (r + 1.0) / 2.0) / s
        if windowed == full and chunked == full:
            return full
        sliding = sum(self.layer_is_sliding())
        n_chunked = sum(self.layer_is_chunked())
        rest = self.num_layers - sliding - n_chunked
        return (sliding * windowed + n_chunked * chunked + rest * full) / self.num_layers

    @property
    def mean_mlp_inner_active(self) -> float:
        """Per token and layer, the MLP widths a token passes through: the dense MLP, or top-k
        routed experts plus the shared experts."""
        moe = self.experts_top_k * self.ffn_hidden_size + self.num_shared_experts * (
            self.shared_expert_ffn or self.ffn_hidden_size
        )
        dense = self.dense_ffn_hidden_size or self.ffn_hidden_size
        return (self.num_dense_layers * dense + self.num_moe_layers * moe) / self.num_layers

    @property
    def embedding_params(self) -> int:
        """Token embedding (+ OPT's project_in) + learned positions (+ BLOOM's embedding norm)."""
        h, e = self.hidden_size, self.word_embed_dim
        positions = (self.max_seq_len + self.position_offset) * h if self.learned_positions else 0
        project_in = e * h if e != h else 0
        return self.vocab_size * e + positions + project_in + (self.norm_params if self.embedding_norm else 0)

    @property
    def head_params(self) -> int:
        """The LM head: zero weights when tied to the input embedding (+ OPT's project_out)."""
        h, e = self.hidden_size, self.word_embed_dim
        weights = 0 if self.tied_embeddings else self.vocab_size * e
        return weights + (self.vocab_size if self.lm_head_bias else 0) + (h * e if e != h else 0)

    @property
    def final_norm_params(self) -> int:
        return self.norm_params if self.final_norm else 0

    @property
    def total_params(self) -> int:
        if self.layer_pattern is not None:
            return (
                self._hybrid_sum(self._hybrid_block_params())
                + self.embedding_params
                + self.head_params
                + self.final_norm_params
            )
        if self.is_moe:
            layers = self.num_moe_layers * self.layer_params + self.num_dense_layers * self.dense_layer_params
        else:
            layers = self.num_layers * self.layer_params
        return layers + self.embedding_params + self.head_params + self.final_norm_params

    @property
    def non_embedding_params(self) -> int:
        """Total less the input embedding and the LM head (the convention of Gemma 2 Table 2)."""
        return self.total_params - self.embedding_params - self.head_params

    @property
    def active_params(self) -> int:
        """Parameters touched by one token (top-k experts of each MoE layer), input embedding
        included (Mixtral's and Qwen's convention; DeepSeek's published figures leave the input
        embedding out: subtract `embedding_params`)."""
        inactive = (self.num_experts - self.experts_top_k) * self.expert_params
        return self.total_params - self.num_moe_layers * inactive


def _check_layer_ids(what: str, ids: tuple[int, ...], num_layers: int) -> None:
    if list(ids) != sorted(set(ids)):
        raise ValueError(f"{what} must be increasing and distinct")
    if ids and (ids[0] < 0 or ids[-1] >= num_layers):
        raise ValueError(f"{what} must lie in 0..{num_layers - 1}")


# --- presets -----------------------------------------------------------------------------------

_PRESETS_DIR = "presets"


@cache
def _preset_files() -> dict[str, Any]:
    """Preset name -> its resource. Scanned once per process (the presets are package data)."""
    from importlib import resources

    root = resources.files("paraplan.cost_models").joinpath(_PRESETS_DIR)
    return {p.name[: -len(".json")]: p for p in root.iterdir() if p.name.endswith(".json")}


def model_preset_names() -> list[str]:
    return sorted(_preset_files())


def load_model(name_or_path: str) -> ModelSpec:
    """A preset name (case-insensitive) or a path to a Hugging Face style config.json."""
    presets = _preset_files()
    key = name_or_path.strip().lower()
    if key in presets:
        return _load_preset(key)
    path = Path(name_or_path)
    if path.suffix.lower() == ".json" or names_anything(path) or "/" in name_or_path:
        return load_hf_config(path)
    raise InputError(
        f"unknown model '{name_or_path}'; accepted: a path to a config.json or one of " + ", ".join(sorted(presets))
    )


@cache
def _load_preset(key: str) -> ModelSpec:
    # Presets are immutable package data and ModelSpec is frozen: one instance per name is safe.
    return model_from_config(json.loads(_preset_files()[key].read_text()), key)


def load_hf_config(path: Path) -> ModelSpec:
    text = read_text_file(path, "model config")
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"model config '{path}' is not valid JSON ({exc.msg}, line {exc.lineno})") from None
    except (ValueError, RecursionError) as exc:  # e.g. an integer beyond Python's digit limit
        raise InputError(f"model config '{path}' cannot be read: {str(exc).splitlines()[0][:120]}") from None
    if not isinstance(config, dict):
        raise InputError(f"model config '{path}' must hold a JSON object, not {type(config).__name__}")
    return model_from_config(config, path.stem if path.stem != "config" else path.parent.name or "model")


# --- the loader: what each model_type's config class and modeling code do ----------------------

BiasSpec = tuple[str | None, bool]  # (config key that sets it, or None for fixed; default)

_H = ("hidden_size",)
_L = ("num_hidden_layers",)
_A = ("num_attention_heads",)
_KV = ("num_key_value_heads",)
_FFN = ("intermediate_size",)
_POS = ("max_position_embeddings",)
_ATTN_BIAS: BiasSpec = ("attention_bias", False)
_NO_BIAS: BiasSpec = (None, False)
_BIAS: BiasSpec = (None, True)


# GPT-OSS's experts gate with their own GLU whatever hidden_act says (transformers gpt_oss
# GptOssExperts._apply_gate: gate * sigmoid(1.702 gate) * (up + 1), both halves clamped at
# swiglu_limit)
GPT_OSS_GLU = "gpt_oss_glu"


class _Router(NamedTuple):
    """A config class's MoE router where a config leaves its keys out, and the keys the class reads
    (`ModelSpec.router_score`, `router_renorm`, `router_scale`; transformers' config classes)."""

    score: Literal["softmax", "sigmoid"] = "softmax"
    renorm: bool = True  # norm_topk_prob
    scale: float = 1.0  # routed_scaling_factor
    reads: tuple[str, ...] = ("scoring_func", "norm_topk_prob", "routed_scaling_factor")


_ROUTER = _Router()  # LlamaConfig-style: softmax, renormalised, unscaled, every key read
# Classes whose router fixes the score function (DeepSeek-V3's and Llama 4's sigmoid), and also the
# renormalisation (Mixtral's and GPT-OSS's softmax over the top-k logits)
_FIXED_SCORE = ("norm_topk_prob", "routed_scaling_factor")
_FIXED_SCORE_AND_RENORM = ("routed_scaling_factor",)


@dataclass(frozen=True)
class _Family:
    """One model_type, as its transformers config class defaults it and its modeling code builds it."""

    cls: str  # the config class, for messages
    mlp: MlpKind
    norm: Literal["rms", "layernorm", "none"]
    tie: bool  # default of tie_word_embeddings
    hidden: tuple[str, ...] = _H  # keys the config class reads (attribute_map aliases included)
    layers: tuple[str, ...] = _L
    heads: tuple[str, ...] = _A
    kv: tuple[str, ...] = _KV  # () = multi-head attention only
    kv_default: int | None = None  # None: num_attention_heads
    ffn: tuple[str, ...] = _FFN
    ffn_default: int | Literal["4h"] | None = None  # int: absolute (warned), "4h": relative
    head_dim_key: bool = True  # whether the attention reads config.head_dim
    head_dim_default: int | None = None  # None: hidden // heads
    max_pos: tuple[str, ...] = _POS
    max_pos_default: int = 2048
    learned_positions: bool = False
    qkv_bias: BiasSpec = _ATTN_BIAS
    out_bias: BiasSpec = _ATTN_BIAS
    mlp_bias: BiasSpec = _NO_BIAS
    lm_head_bias: bool = False
    norms_per_layer: int = 2
    qk_norm: QkNorm = "none"
    moe: Literal["mixtral", "qwen2_moe", "qwen3_moe", "deepseek", "llama4", "generic"] | None = None
    moe_defaults: dict[str, int] = field(default_factory=dict)
    mla: Literal["deepseek", "generic"] | None = None
    sliding: Literal["all", "qwen2", "qwen2_moe", "gemma2", "gemma3", "qwen3_moe"] | None = None
    sliding_default: int | None = None
    layer_types: bool = False  # whether the config class reads an explicit `layer_types` list
    chunked: bool = False  # Llama 4: chunked (RoPE) and full (NoPE) attention layers
    # what a launch config writes of the model, where a config leaves its keys out
    act_default: str | None = None  # the MLP activation (None: the MLP kind's usual one)
    reads_act: bool = True  # False: the class runs its own activation whatever hidden_act says
    rope_theta_default: float | None = None  # None: LlamaConfig's 10000, the frameworks' default
    zero_centered_norm: bool = False  # NemotronLayerNorm1P
    router: _Router = _ROUTER


_MLP_BIAS_KEY: BiasSpec = ("mlp_bias", False)
_GPT2_HIDDEN = ("n_embd", "hidden_size")
_GPT2_LAYERS = ("n_layer", "num_hidden_layers")
_GPT2_HEADS = ("n_head", "num_attention_heads")

FAMILIES: dict[str, _Family] = {
    # transformers models/llama: LlamaConfig (tie False, head_dim default hidden/heads, biases off)
    "llama": _Family("LlamaConfig", "gated", "rms", tie=False, ffn_default=11008, mlp_bias=_MLP_BIAS_KEY),
    "granite": _Family("GraniteConfig", "gated", "rms", tie=False, ffn_default=11008, mlp_bias=_MLP_BIAS_KEY),
    # MistralConfig: 8 KV heads and a 4096 sliding window on every layer by default
    "mistral": _Family("MistralConfig", "gated", "rms", tie=False, kv_default=8, ffn_default=14336,
                       qkv_bias=_NO_BIAS, out_bias=_NO_BIAS, sliding="all", sliding_default=4096),
    "mixtral": _Family("MixtralConfig", "gated", "rms", tie=False, kv_default=8, ffn_default=14336,
                       qkv_bias=_NO_BIAS, out_bias=_NO_BIAS, moe="mixtral",
                       moe_defaults={"experts": 8, "top_k": 2}, sliding="all", rope_theta_default=1e6,
                       router=_Router(reads=_FIXED_SCORE_AND_RENORM)),
    # Qwen2: q/k/v biases hard-wired on, o_proj without
    "qwen2": _Family("Qwen2Config", "gated", "rms", tie=False, kv_default=32, ffn_default=22016,
                     qkv_bias=_BIAS, out_bias=_NO_BIAS, sliding="qwen2", layer_types=True),
    "qwen2_moe": _Family("Qwen2MoeConfig", "gated", "rms", tie=False, kv_default=16, ffn_default=5632,
                         qkv_bias=("qkv_bias", True), out_bias=_NO_BIAS, moe="qwen2_moe",
                         moe_defaults={"experts": 60, "top_k": 4, "width": 1408, "shared_width": 5632},
                         sliding="qwen2_moe", layer_types=True, router=_Router(renorm=False)),
    "qwen3": _Family("Qwen3Config", "gated", "rms", tie=False, kv_default=32, ffn_default=22016,
                     head_dim_default=128, qk_norm="head", sliding="qwen2", layer_types=True),
    "qwen3_moe": _Family("Qwen3MoeConfig", "gated", "rms", tie=False, kv_default=4, ffn_default=6144,
                         qk_norm="head", moe="qwen3_moe", moe_defaults={"experts": 128, "top_k": 8, "width": 768},
                         sliding="qwen3_moe", router=_Router(renorm=False)),
    # Gemma: tied, head_dim 256; Gemma 2/3: four norms a layer, local/global sliding layers
    "gemma": _Family("GemmaConfig", "gated", "rms", tie=True, kv_default=16, ffn_default=24576, head_dim_default=256,
                     out_bias=_ATTN_BIAS),
    "gemma2": _Family("Gemma2Config", "gated", "rms", tie=True, kv_default=4, ffn_default=9216, head_dim_default=256,
                      norms_per_layer=4, sliding="gemma2", sliding_default=4096, layer_types=True),
    "gemma3_text": _Family("Gemma3TextConfig", "gated", "rms", tie=True, kv_default=4, ffn_default=9216,
                           head_dim_default=256, norms_per_layer=4, qk_norm="head", sliding="gemma3",
                           sliding_default=4096, layer_types=True),
    "phi3": _Family("Phi3Config", "gated", "rms", tie=False, ffn_default=8192, qkv_bias=_NO_BIAS, out_bias=_NO_BIAS,
                    sliding="all"),
    # DeepSeek: MLA + DeepSeekMoE (shared experts, leading dense layers)
    "deepseek_v2": _Family("DeepseekV2Config", "gated", "rms", tie=False, ffn_default=11008, moe="deepseek",
                           moe_defaults={"experts": 64, "width": 1407, "shared": 2, "first_dense": 0},
                           mla="deepseek", router=_Router(renorm=False)),
    "deepseek_v3": _Family("DeepseekV3Config", "gated", "rms", tie=False, ffn_default=18432, moe="deepseek",
                           moe_defaults={"experts": 256, "top_k": 8, "width": 2048, "shared": 1, "first_dense": 3},
                           mla="deepseek", router=_Router("sigmoid", True, 2.5, _FIXED_SCORE)),
    # GPT-2 family keys; tied; learned positions; biases everywhere
    "gpt2": _Family("GPT2Config", "plain", "layernorm", tie=True, kv=(), ffn=("n_inner",), ffn_default="4h",
                    head_dim_key=False, max_pos=("n_positions", "max_position_embeddings", "n_ctx"),
                    max_pos_default=1024, learned_positions=True, qkv_bias=_BIAS, out_bias=_BIAS, mlp_bias=_BIAS,
                    hidden=_GPT2_HIDDEN, layers=_GPT2_LAYERS, heads=_GPT2_HEADS),
    "gpt_neox": _Family("GPTNeoXConfig", "plain", "layernorm", tie=False, kv=(), ffn_default=24576,
                        head_dim_key=False, qkv_bias=("attention_bias", True), out_bias=("attention_bias", True),
                        mlp_bias=_BIAS),
    "opt": _Family("OPTConfig", "plain", "layernorm", tie=True, hidden=("hidden_size", "d_model"), kv=(),
                   ffn=("ffn_dim",), ffn_default=3072, head_dim_key=False, learned_positions=True,
                   qkv_bias=("enable_bias", True), out_bias=("enable_bias", True), mlp_bias=("enable_bias", True)),
    "falcon": _Family("FalconConfig", "plain", "layernorm", tie=True, hidden=("hidden_size", "n_embed"),
                      layers=("num_hidden_layers", "n_layer"), heads=("num_attention_heads", "n_head"),
                      kv=("num_kv_heads", "n_head_kv"), ffn=("ffn_hidden_size",), ffn_default="4h",
                      head_dim_key=False, qkv_bias=("bias", False), out_bias=("bias", False),
                      mlp_bias=("bias", False)),
    "bloom": _Family("BloomConfig", "plain", "layernorm", tie=True, hidden=("hidden_size", "n_embed"),
                     layers=("n_layer", "num_hidden_layers"), heads=("n_head", "num_attention_heads"), kv=(),
                     ffn=(), ffn_default="4h", head_dim_key=False, qkv_bias=_BIAS, out_bias=_BIAS, mlp_bias=_BIAS),
    "gptj": _Family("GPTJConfig", "plain", "layernorm", tie=False, kv=(), ffn=("n_inner",), ffn_default="4h",
                    head_dim_key=False, max_pos=("n_positions", "max_position_embeddings", "n_ctx"), qkv_bias=_NO_BIAS,
                    out_bias=_NO_BIAS, mlp_bias=_BIAS, lm_head_bias=True, norms_per_layer=1,
                    hidden=_GPT2_HIDDEN, layers=_GPT2_LAYERS, heads=_GPT2_HEADS),
    "nemotron": _Family("NemotronConfig", "plain", "layernorm", tie=False, ffn_default=24576,
                        mlp_bias=("mlp_bias", False), act_default="relu2", zero_centered_norm=True),
    "starcoder2": _Family("Starcoder2Config", "plain", "layernorm", tie=True, kv_default=2, ffn_default=12288,
                          qkv_bias=("use_bias", True), out_bias=("use_bias", True), mlp_bias=("use_bias", True),
                          sliding="all"),
    # OLMo: LayerNorm without parameters; OLMo 2: RMSNorm after attention/MLP, q/k norms over all heads
    "olmo": _Family("OlmoConfig", "gated", "none", tie=False, ffn_default=11008),
    "olmo2": _Family("Olmo2Config", "gated", "rms", tie=False, ffn_default=11008, qk_norm="full"),
    # GptOssConfig: every layer MoE (E experts of width intermediate_size, biased, router with a
    # bias), q/k/v/o biases (attention_bias), sliding/full layers alternating when layer_types is
    # absent (layer 0 slides), one sink logit per head
    "gpt_oss": _Family("GptOssConfig", "gated", "rms", tie=False, kv_default=8, ffn_default=2880,
                       head_dim_default=64, max_pos_default=131072, qkv_bias=("attention_bias", True),
                       out_bias=("attention_bias", True), mlp_bias=_BIAS, moe="mixtral",
                       moe_defaults={"experts": 128, "top_k": 4}, sliding="gemma2", sliding_default=128,
                       layer_types=True, act_default=GPT_OSS_GLU, reads_act=False, rope_theta_default=150000.0,
                       router=_Router(reads=_FIXED_SCORE_AND_RENORM)),
    # Llama4TextConfig: routed + one shared expert of width intermediate_size on the MoE layers, a
    # dense MLP of width intermediate_size_mlp elsewhere; chunked attention on the RoPE layers;
    # its q/k norm is an L2 norm without weights (no parameters); attention_bias on q, k, v and o
    "llama4_text": _Family("Llama4TextConfig", "gated", "rms", tie=False, kv_default=8, ffn_default=8192,
                           head_dim_default=128, max_pos_default=4096 * 32, moe="llama4",
                           moe_defaults={"experts": 16, "top_k": 1}, chunked=True,
                           router=_Router("sigmoid", reads=_FIXED_SCORE)),
}  # fmt: skip

# Unknown model_type with llama-style keys: LlamaConfig rules plus every math key paraplan models.
_GENERIC_LLAMA = _Family("LlamaConfig (model_type unknown)", "gated", "rms", tie=False, ffn_default="4h",
                         moe="generic", mla="generic", sliding="all", layer_types=True,
                         mlp_bias=_MLP_BIAS_KEY)  # fmt: skip
_GENERIC_GPT2 = FAMILIES["gpt2"]

# Aliases the generic reader accepts; a family that does not read one gets a warning when it is used.
_ALIASES = {
    "hidden": ("hidden_size", "n_embd", "n_embed", "d_model"),
    "layers": ("num_hidden_layers", "n_layer", "num_layers"),
    "heads": ("num_attention_heads", "n_head", "num_heads"),
    "kv": ("num_key_value_heads", "num_kv_heads", "n_head_kv", "multi_query_group_num"),
    "ffn": ("intermediate_size", "n_inner", "ffn_hidden_size", "ffn_dim"),
    "vocab": ("vocab_size", "padded_vocab_size"),
    "max_pos": ("max_position_embeddings", "n_positions", "n_ctx", "seq_length"),
}

_SLOT_NAMES = {
    "hidden": "hidden size",
    "layers": "number of layers",
    "heads": "number of attention heads",
    "kv": "number of KV heads",
    "ffn": "MLP width",
    "vocab": "vocabulary size",
    "max_pos": "maximum sequence length",
}

NON_TRANSFORMER_TYPES = frozenset(
    {"mamba", "falcon_mamba", "rwkv", "rwkv5", "rwkv6", "rwkv7", "jamba", "zamba", "zamba2", "bamba",
     "falcon_h1", "granitemoehybrid", "lfm2", "lfm2_moe", "xlstm", "recurrent_gemma", "minimax",
     "minimax_m1", "qwen3_next", "plamo2", "mamba_hybrid", "hymba", "retnet", "striped_hyena", "hyena"}
)  # fmt: skip
NOT_DECODER_TYPES = frozenset(
    {"bert", "roberta", "xlm-roberta", "deberta", "deberta-v2", "distilbert", "albert", "electra", "t5", "mt5",
     "umt5", "bart", "mbart", "pegasus", "marian", "whisper", "vit", "clip", "siglip", "encoder-decoder", "led",
     "longt5", "switch_transformers", "modernbert"}
)  # fmt: skip
# Keys whose presence means a layer stack paraplan cannot count (state-space / hybrid / recurrent).
_HYBRID_KEYS = (
    "state_size", "ssm_state_size", "mamba_d_state", "mamba_d_conv", "mamba_expand", "mamba_n_heads",
    "mamba_d_head", "d_state", "d_conv", "time_step_rank", "hybrid_override_pattern", "layers_block_type",
    "attn_layer_period", "attn_layer_offset", "attn_layer_indices", "attn_type_list", "linear_num_key_heads",
    "linear_key_head_dim", "full_attention_interval", "num_mem_blocks", "block_types",
)  # fmt: skip
# Keys that change the parameter count in ways paraplan does not model: refused.
_REFUSED_KEYS = {
    "interleave_moe_layer_step": "Llama 4 interleaved dense/MoE layers, read for model_type llama4_text only",
    "intermediate_size_mlp": "Llama 4 separate dense-layer width, read for model_type llama4_text only",
    "moe_layers": "Llama 4 list of MoE layers, read for model_type llama4_text only",
    "shared_intermediate_size": "MiniMax shared-expert layout",
    "moe_shared_expert_intermediate_size": "Nemotron-H shared-expert layout, read for model_type nemotron_h only",
    "moe_latent_size": "latent MoE projections",
    "num_kv_shared_layers": "Gemma 3n KV sharing across layers",
    "altup_num_inputs": "Gemma 3n AltUp",
    "laurel_rank": "Gemma 3n Laurel blocks",
    "hidden_size_per_layer_input": "Gemma 3n per-layer embeddings",
    "vocab_size_per_layer_input": "Gemma 3n per-layer embeddings",
    "o_lora_rank": "low-rank output projection",
    "global_head_dim": "a second head dim for global layers",
    "attention_k_eq_v": "shared key/value projections",
    "num_global_key_value_heads": "a second KV-head count for global layers",
    "cross_attention_layers": "cross-attention layers",
}
# The keys above that Llama4TextConfig reads (and the loader models for model_type llama4_text).
_LLAMA4_KEYS = frozenset({"interleave_moe_layer_step", "intermediate_size_mlp", "moe_layers"})
# Keys that change parameters or FLOPs, not modelled: warned (value assumed as stated).
_WARNED_KEYS = {
    "index_topk": "DeepSeek sparse-attention indexer not modelled: its parameters are not counted and "
    "attention is taken as dense",
    "index_n_heads": "DeepSeek sparse-attention indexer not modelled (parameters not counted)",
    "index_head_dim": "DeepSeek sparse-attention indexer not modelled (parameters not counted)",
    "attention_chunk_size": "chunked attention is modelled for model_type llama4_text only: attention spans "
    "taken as the full sequence",
}
# Keys known to change neither the parameter count nor the FLOPs.
HARMLESS_KEYS = frozenset(
    {
        "architectures", "model_type", "transformers_version", "torch_dtype", "dtype", "use_cache", "auto_map",
        "bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id", "sep_token_id", "cls_token_id",
        "mask_token_id", "decoder_start_token_id", "image_token_id", "initializer_range", "init_std",
        "initializer_factor", "rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "norm_eps",
        "layernorm_epsilon", "norm_epsilon", "rope_theta", "rope_scaling", "rope_parameters", "rope_interleave",
        "rope_type", "rotary_emb_base", "rotary_pct", "rotary_dim", "partial_rotary_factor",
        "rope_local_base_freq", "original_max_position_embeddings", "use_dynamic_ntk", "use_logn_attn",
        "no_rope_layers", "embd_pdrop",
        "dropout", "activation_dropout", "classifier_dropout", "summary_type", "summary_use_proj",
        "summary_activation", "summary_proj_to_labels", "summary_first_dropout", "hidden_act", "hidden_activation",
        "activation_function", "activation", "mlp_hidden_act", "output_router_logits", "router_aux_loss_coef",
        "swiglu_limit", "swiglu_alpha",
        "aux_loss_alpha", "seq_aux", "router_jitter_noise", "router_z_loss_coef", "norm_topk_prob",
        "routed_scaling_factor", "scoring_func", "n_group", "topk_group", "ep_size", "pretraining_tp",
        "attn_logit_softcapping", "final_logit_softcapping", "query_pre_attn_scalar", "cache_implementation",
        "layerdrop", "use_parallel_residual", "alibi", "apply_residual_connection_post_layernorm",
        "bias_dropout_fusion", "masked_softmax_fusion", "attention_softmax_in_fp32", "skip_bias_add",
        "skip_bias_add_qkv", "slow_but_exact", "offset_alibi", "scale_attn_weights",
        "scale_attn_by_inverse_layer_idx", "reorder_and_upcast_attn", "embedding_multiplier",
        "residual_multiplier", "attention_multiplier", "logits_scaling", "clip_qkv", "is_decoder",
        "return_dict", "output_hidden_states", "output_attentions", "torchscript", "chunk_size_feed_forward",
        "id2label", "label2id", "problem_type", "task_specific_params", "prefix", "tokenizer_class",
        "max_length", "min_length", "do_sample", "temperature", "top_k", "top_p", "num_beams",
        "repetition_penalty", "length_penalty", "no_repeat_ngram_size", "bad_words_ids", "num_return_sequences",
        "early_stopping", "forced_bos_token_id", "forced_eos_token_id", "remove_invalid_values", "typical_p",
        "diversity_penalty", "num_beam_groups", "output_scores", "return_dict_in_generate",
        "exponential_decay_length_penalty", "suppress_tokens", "begin_suppress_tokens",
        "encoder_no_repeat_ngram_size", "finetuning_task", "tie_encoder_decoder", "pruned_heads",
        "quantization_config", "use_bidirectional_attention", "attn_implementation", "use_flash_attn",
        "sliding_window_size", "max_window_layers", "rope_scaling_type", "bias_act",
        "use_mamba_kernels", "num_logits_to_keep", "fp32_residual_connection", "is_causal",
        "embedding_dropout", "residual_dropout", "use_return_dict", "tf_legacy_loss", "use_bfloat16",
    }
)  # fmt: skip


@dataclass
class _Reader:
    """The config dict, with the keys the loader consulted and the warnings it collected."""

    raw: dict[str, Any]
    used: set[str] = field(default_factory=set)
    warnings: list[str] = field(default_factory=list)

    def present(self, key: str) -> bool:
        return self.raw.get(key) is not None

    def find(self, keys: tuple[str, ...]) -> tuple[str, Any] | None:
        """The first of `keys` present (non-null), marking them all as consulted."""
        self.used.update(keys)
        for key in keys:
            if self.raw.get(key) is not None:
                return key, self.raw[key]
        return None

    def int(self, keys: tuple[str, ...], default: int | None = None, minimum: int = 1, what: str = "") -> int:
        found = self.find(keys)
        if found is None:
            if default is None:
                raise InputError(
                    f"model config lacks '{keys[0]}'"
                    + (f" (nor any of {', '.join(keys[1:])})" if len(keys) > 1 else "")
                    + (f": {what}" if what else "")
                )
            return default
        return _checked_int(*found, minimum=minimum)

    def flag(self, key: str, default: bool) -> bool:
        self.used.add(key)
        value = self.raw.get(key)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise InputError(f"model config '{key}' = {_short(value)} must be true or false")
        return value

    def warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)


# Dropout rates a config may state: Megatron-LM's --attention-dropout / --hidden-dropout (whose
# defaults, 0.1 each, apply when a launch sets neither: megatron/training/arguments.py at
# core_v0.6.0) and Hugging Face's names for the same two.
DROPOUT_KEYS = ("attention_dropout", "hidden_dropout", "attn_pdrop", "resid_pdrop", "embd_pdrop", "dropout")


def _dropout(r: _Reader, family_default: bool, family_keys: tuple[str, ...]) -> bool:
    """Whether the model trains with dropout, as its config class reads the rates: a stated
    positive rate turns it on; the family's class default (`DROPOUT_FAMILIES`) holds unless the
    config states every one of the family's rates as 0.0."""
    r.used.update(DROPOUT_KEYS)
    stated: dict[str, float] = {}
    for key in DROPOUT_KEYS:
        value = r.raw.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
            raise InputError(f"model config '{key}' = {_short(value)} must be a rate from 0 up to 1")
        stated[key] = float(value)
    if any(rate > 0.0 for rate in stated.values()):
        return True
    return family_default and not all(key in stated for key in family_keys)


def _checked_int(key: str, value: Any, minimum: int = 1) -> int:
    shown = _short(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"model config '{key}' = {shown} must be a whole number")
    if isinstance(value, float) and (not math.isfinite(value) or value != int(value)):
        raise InputError(f"model config '{key}' = {shown} must be a whole number")
    if value < minimum:
        raise InputError(f"model config '{key}' = {shown} must be at least {minimum}")
    if value > MAX_CONFIG_INT:
        raise InputError(f"model config '{key}' = {shown} is beyond any model (at most {MAX_CONFIG_INT:.0e})")
    return int(value)


def _checked_float(key: str, value: Any, low: float, high: float) -> float:
    """A config number in (low, high], named by its key when it is not one."""
    shown = _short(value)
    if not finite_number(value):
        raise InputError(f"model config '{key}' = {shown} must be a number")
    if not low < value <= high:
        raise InputError(f"model config '{key}' = {shown} must be above {low:g} and at most {high:g}")
    return float(value)


def _bounded_layers(layers: int, key: str | None) -> int:
    """A layer count within the model's own range (`ModelSpec.num_layers`), checked as it is read:
    the per-layer patterns (dense and MoE layers, a hybrid's symbols) are built layer by layer."""
    if layers > MAX_LAYERS:
        raise InputError(f"model config '{key}' = {layers} layers: at most {MAX_LAYERS} are modelled")
    return layers


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:20] + "..." + text[-8:]


def _get(config: dict[str, Any], *keys: str, default: Any = None) -> Any:
    for key in keys:
        if key in config and config[key] is not None:
            return config[key]
    return default


def _mlp_kind(config: dict[str, Any]) -> MlpKind:
    """Gated or plain MLP for a config (kept for callers of the old helper)."""
    model_type = str(_get(config, "model_type", default="")).lower()
    if model_type in FAMILIES:
        return FAMILIES[model_type].mlp
    if "n_embd" in config:  # gpt2 key family
        return "plain"
    if "hidden_size" in config:  # unknown type with llama keys reads as llama
        return "gated"
    raise InputError(
        f"model config with model_type {model_type or '(none)'!r} has neither llama-style "
        "(hidden_size, ...) nor gpt2-style (n_embd, ...) keys"
    )


def _refuse_unsupported(r: _Reader, model_type: str) -> None:
    raw = r.raw
    if model_type in NON_TRANSFORMER_TYPES:
        raise InputError(
            f"model_type {model_type!r} is not a transformer decoder (state-space, recurrent or hybrid layers); "
            "paraplan counts attention + MLP decoders only"
        )
    if model_type in NOT_DECODER_TYPES or raw.get("is_encoder_decoder") is True:
        raise InputError(
            f"model_type {model_type or '(none)'!r} is an encoder or encoder-decoder model; "
            "paraplan plans decoder-only language models"
        )
    if raw.get("add_cross_attention") is True:
        raise InputError("model config sets 'add_cross_attention': cross-attention layers are not modelled")
    for key in _HYBRID_KEYS:
        if raw.get(key) is not None:
            raise InputError(
                f"model config has '{key}': a state-space / hybrid layer stack, which paraplan does not model "
                f"(model_type {model_type or '(none)'!r})"
            )
    if "text_config" in raw and not any(raw.get(k) is not None for k in _ALIASES["hidden"]):
        raise InputError(
            f"model_type {model_type or '(none)'!r} wraps its language model in 'text_config' (a multimodal "
            "model): pass that text_config alone to plan the language model; the other towers are not counted"
        )
    for key, what in _REFUSED_KEYS.items():
        if model_type == "llama4_text" and key in _LLAMA4_KEYS:
            continue
        value = raw.get(key)
        if value is not None and value is not False and value != 0 and value != []:
            raise InputError(f"model config has '{key}' = {_short(value)} ({what}), which paraplan does not model")


def _family_for(r: _Reader, model_type: str) -> tuple[str, _Family]:
    if model_type in FAMILIES:
        return model_type, FAMILIES[model_type]
    gpt2_keys = "n_embd" in r.raw and "hidden_size" not in r.raw
    unknown = f"model_type {model_type!r} is unknown" if model_type else "the config has no model_type"
    if gpt2_keys:
        r.warn(f"{unknown}: read with GPT-2 rules (gpt2-style keys n_embd, n_layer, ...)")
        return "gpt2", _GENERIC_GPT2
    if "hidden_size" in r.raw:
        r.warn(
            f"{unknown}: read as llama-style (gated MLP, RMSNorm, untied embeddings, no biases unless "
            "attention_bias/mlp_bias), with the MoE, MLA and sliding-window keys paraplan knows"
        )
        return "llama", _GENERIC_LLAMA
    raise InputError(
        f"model config with model_type {model_type or '(none)'!r} has neither llama-style "
        "(hidden_size, ...) nor gpt2-style (n_embd, ...) keys"
    )


def _sized(r: _Reader, fam: _Family, slot: str, own: tuple[str, ...], default: int | None,
           minimum: int = 1, default_note: str = "") -> tuple[int, str | None]:  # fmt: skip
    """A size from the family's own keys, else from a generic alias (warned), else the default
    (absolute defaults warned). Returns the value and the key it came from."""
    found = r.find(own)
    if found is not None:
        return _checked_int(*found, minimum=minimum), found[0]
    others = tuple(k for k in _ALIASES[slot] if k not in own)
    found = r.find(others)
    if found is not None:
        r.warn(
            f"'{found[0]}' = {_short(found[1])} taken as the {_SLOT_NAMES[slot]}, although transformers' "
            f"{fam.cls} does not read it" + (f" (it would use {default_note})" if default_note else "")
        )
        return _checked_int(*found, minimum=minimum), found[0]
    if default is None:
        what = "', '".join(own or _ALIASES[slot])
        raise InputError(f"model config lacks '{what}'")
    return default, None


def _bias(r: _Reader, spec: BiasSpec) -> bool:
    key, default = spec
    return default if key is None else r.flag(key, default)


def _default_warned(r: _Reader, fam: _Family, key: str, value: int | None) -> None:
    if value is not None:
        r.warn(f"'{key}' absent: {fam.cls} default {value} assumed")


def _moe(r: _Reader, fam: _Family, layers: int, hidden: int, dense_ffn: int) -> dict[str, Any]:
    """Experts, widths and the dense/MoE layer pattern of each MoE family."""
    d = fam.moe_defaults
    out: dict[str, Any] = {}
    kind = fam.moe
    dense_width = dense_ffn  # width of the dense layers' MLP
    if kind is None:
        for key in ("num_local_experts", "num_experts", "n_routed_experts", "moe_intermediate_size",
                    "n_shared_experts", "shared_expert_intermediate_size", "num_experts_per_tok"):  # fmt: skip
            value = r.raw.get(key)
            if value is not None and value != 0 and value != 1:
                r.warn(f"'{key}' = {_short(value)} ignored: transformers' {fam.cls} builds a dense MLP")
            r.used.add(key)
        return out

    def count(keys: tuple[str, ...], slot: str, minimum: int = 1) -> int:
        found = r.find(keys)
        if found is not None:
            return _checked_int(*found, minimum=minimum)
        if slot not in d:
            raise InputError(f"model config lacks '{keys[0]}'")
        _default_warned(r, fam, keys[0], d[slot])
        return d[slot]

    if kind == "mixtral":
        experts = count(("num_local_experts",), "experts")
        top_k = count(("num_experts_per_tok",), "top_k")
        width = dense_ffn
        dense_ids: list[int] = []
        shared, shared_width, gate = 0, None, False
    elif kind in ("qwen2_moe", "qwen3_moe"):
        experts = count(("num_experts",), "experts", minimum=0)
        top_k = count(("num_experts_per_tok",), "top_k")
        width = count(("moe_intermediate_size",), "width")
        step = r.int(("decoder_sparse_step",), default=1)
        only = _layer_list(r, "mlp_only_layers", layers)
        dense_ids = [i for i in range(layers) if i in only or not (experts > 0 and (i + 1) % step == 0)]
        if kind == "qwen2_moe":
            shared_width = count(("shared_expert_intermediate_size",), "shared_width", minimum=0)
            shared, gate = (1, True) if shared_width else (0, False)
            shared_width = shared_width or None
        else:
            shared, shared_width, gate = 0, None, False
    elif kind == "deepseek":
        if "n_routed_experts" in r.raw and r.raw["n_routed_experts"] is None:
            r.used.update(("n_routed_experts", "num_experts_per_tok", "moe_intermediate_size", "n_shared_experts"))
            return out  # DeepSeek's modeling code: no routed experts -> every layer a dense MLP
        experts = count(("n_routed_experts",), "experts")
        top_k = count(("num_experts_per_tok",), "top_k")
        width = count(("moe_intermediate_size",), "width")
        shared = count(("n_shared_experts",), "shared", minimum=0)
        shared_width = width if shared else None
        gate = False
        first = count(("first_k_dense_replace",), "first_dense", minimum=0)
        freq = _moe_freq(r)
        # DeepSeek's modeling_deepseek.py: MoE iff layer >= first_k_dense_replace and layer % moe_layer_freq == 0
        dense_ids = [i for i in range(layers) if not (i >= first and i % freq == 0)]
        out.update(_expert_groups(r, fam, experts, top_k))
    elif kind == "llama4":
        llama4 = _llama4_moe(r, fam, layers)
        if llama4 is None:  # no MoE layer: every layer is the dense MLP of width intermediate_size_mlp
            return {"ffn_hidden_size": _llama4_mlp_width(r, fam)}
        experts, top_k, dense_ids = llama4
        width = dense_ffn  # Llama4TextExperts and the shared Llama4TextMLP: intermediate_size
        shared, shared_width, gate = 1, width, False
        dense_width = _llama4_mlp_width(r, fam) if dense_ids else dense_ffn
    else:  # generic: every MoE key paraplan knows, DeepSeek / Qwen semantics
        experts = r.int(("num_local_experts", "num_experts", "n_routed_experts"), default=1)
        if experts <= 1:
            for key in ("n_shared_experts", "shared_expert_intermediate_size", "moe_intermediate_size"):
                if r.raw.get(key):
                    r.warn(f"'{key}' = {_short(r.raw[key])} ignored: the config has no routed experts")
                r.used.add(key)
            return out
        top_k = r.int(("num_experts_per_tok", "moe_topk"), default=1, what="experts per token")
        width = r.int(("moe_intermediate_size",), default=dense_ffn)
        n_shared = r.int(("n_shared_experts",), default=0, minimum=0)
        qwen_shared = r.int(("shared_expert_intermediate_size",), default=0, minimum=0)
        if n_shared and qwen_shared:
            raise InputError("model config has both 'n_shared_experts' and 'shared_expert_intermediate_size'")
        shared, shared_width, gate = (n_shared, width, False) if n_shared else (0, None, False)
        if qwen_shared:
            shared, shared_width = 1, qwen_shared
            r.warn("'shared_expert_intermediate_size': one shared expert of that width assumed, without "
                   "Qwen's shared-expert gate (its model_type is unknown)")  # fmt: skip
        first = r.int(("first_k_dense_replace",), default=0, minimum=0)
        freq = _moe_freq(r)
        step = r.int(("decoder_sparse_step",), default=1)
        only = _layer_list(r, "mlp_only_layers", layers)
        dense_ids = [i for i in range(layers) if i < first or i % freq or (i + 1) % step or i in only]
    if experts <= 1:
        return out
    out.update(
        num_experts=experts,
        experts_top_k=top_k,
        ffn_hidden_size=width,
        num_shared_experts=shared,
        shared_expert_ffn=shared_width,
        shared_expert_gate=gate,
        router_bias=fam.cls.startswith(("DeepseekV3", "GptOss")) or r.raw.get("topk_method") == "noaux_tc",
        dense_layer_ids=tuple(dense_ids),
        dense_ffn_hidden_size=dense_width if dense_ids else None,
        **_router(r, fam),
    )
    r.used.update(("topk_method",))
    return out


def _router(r: _Reader, fam: _Family) -> dict[str, Any]:
    """The router's score function, top-k renormalisation and scale (`ModelSpec.router_score`,
    `router_renorm`, `router_scale`), as the config states the keys its class reads (`_Router`:
    transformers' DeepseekV3Config defaults sigmoid, norm_topk_prob True, routed_scaling_factor 2.5;
    DeepseekV2Config scoring_func "softmax", False, 1.0; Qwen2MoeConfig and Qwen3MoeConfig
    norm_topk_prob False; Llama 4's router a sigmoid of its top-1 logit)."""
    score, renorm, scale, reads = fam.router
    found = r.find(("scoring_func",)) if "scoring_func" in reads else None
    if found is not None:
        if found[1] not in ("softmax", "sigmoid"):
            raise InputError(f"model config 'scoring_func' = {_short(found[1])}: only softmax and sigmoid routers "
                             "are modelled")  # fmt: skip
        score = found[1]
    found = r.find(("norm_topk_prob",))
    renorm = renorm if found is None or "norm_topk_prob" not in reads else bool(found[1])
    found = r.find(("routed_scaling_factor",))
    scale = scale if found is None else _checked_float(*found, 0.0, 1000.0)
    return {"router_score": score, "router_renorm": renorm, "router_scale": scale}


def _expert_groups(r: _Reader, fam: _Family, experts: int, top_k: int) -> dict[str, int]:
    """Group-limited routing, `n_group` / `topk_group`, as the reference routers apply it:
    transformers deepseek_v3 DeepseekV3TopkRouter.get_topk_indices always (DeepseekV3Config
    defaults n_group 8, topk_group 4), DeepSeek-V2 only under topk_method "group_limited_greedy"
    (modeling_deepseek.py MoEGate; its "greedy" ignores the groups). Megatron-Bridge maps them to
    Megatron-LM's --moe-router-num-groups / --moe-router-group-topk (model_bridge.py CONFIG_MAPPING
    at v0.4.2). Read only where the config states both (a trimmed config is warned, not given the
    class defaults). They change neither parameters nor FLOPs, only where a token's experts lie
    (`traffic.remote_nodes_per_token`)."""
    r.used.update(("n_group", "topk_group"))
    v3 = fam.cls.startswith("DeepseekV3")
    if not v3 and r.raw.get("topk_method") != "group_limited_greedy":
        return {}
    groups, chosen = r.raw.get("n_group"), r.raw.get("topk_group")
    if groups is None or chosen is None:
        if v3:
            r.warn("'n_group' / 'topk_group' not both in the config: no group-limited routing assumed (transformers' "
                   "DeepseekV3Config would default to 8 groups, 4 chosen)")  # fmt: skip
        return {}
    groups, chosen = _checked_int("n_group", groups), _checked_int("topk_group", chosen)
    if groups <= 1 or chosen >= groups:
        return {}  # one group, or every group chosen: no limit
    return {"expert_groups": groups, "group_top_k": chosen}


def _llama4_moe(r: _Reader, fam: _Family, layers: int) -> tuple[int, int, list[int]] | None:
    """Experts, top-k and dense layers of Llama4TextConfig (None when no layer is MoE).

    Llama4TextConfig: `moe_layers` when given, else list(range(interleave_moe_layer_step - 1,
    num_hidden_layers, interleave_moe_layer_step)) (step default 1: every layer MoE; Maverick's 2:
    the odd layers). Llama4TextDecoderLayer builds Llama4TextMoe on those layers (router
    Linear(h, E, bias=False), Llama4TextExperts: E experts of width intermediate_size, one shared
    Llama4TextMLP of width intermediate_size) and Llama4TextMLP(intermediate_size_mlp) elsewhere."""
    r.used.update(("moe_layers", "interleave_moe_layer_step", "intermediate_size_mlp"))  # read when dense layers exist
    if r.raw.get("moe_layers") is not None:
        moe_ids = _layer_list(r, "moe_layers", layers)
        step_given = r.raw.get("interleave_moe_layer_step")
        if step_given is not None:
            step = _checked_int("interleave_moe_layer_step", step_given)
            if moe_ids != set(range(step - 1, layers, step)):
                r.warn(f"'interleave_moe_layer_step' = {_short(step_given)} ignored: Llama4TextConfig takes the MoE "
                       "layers from 'moe_layers' when it is given")  # fmt: skip
    else:
        step = r.int(("interleave_moe_layer_step",), default=1)
        if "interleave_moe_layer_step" not in r.raw:
            r.warn("'interleave_moe_layer_step' absent (and no 'moe_layers'): Llama4TextConfig default 1 assumed "
                   "(every layer MoE)")  # fmt: skip
        moe_ids = set(range(step - 1, layers, step))
    if not moe_ids:
        r.used.update(("num_local_experts", "num_experts_per_tok"))
        return None
    found = r.find(("num_local_experts",))
    experts = fam.moe_defaults["experts"] if found is None else _checked_int(*found)
    if found is None:
        _default_warned(r, fam, "num_local_experts", experts)
    found = r.find(("num_experts_per_tok",))
    top_k = fam.moe_defaults["top_k"] if found is None else _checked_int(*found)
    if found is None:
        _default_warned(r, fam, "num_experts_per_tok", top_k)
    if experts == 1:
        raise InputError(
            "model config 'num_local_experts' = 1: Llama4TextMoe would still build a router and a shared expert "
            "beside the single routed expert, which paraplan does not model"
        )
    return experts, top_k, [i for i in range(layers) if i not in moe_ids]


def _llama4_mlp_width(r: _Reader, fam: _Family) -> int:
    """The dense layers' MLP width: Llama4TextConfig `intermediate_size_mlp` (default 16384)."""
    found = r.find(("intermediate_size_mlp",))
    if found is not None:
        return _checked_int(*found)
    _default_warned(r, fam, "intermediate_size_mlp", 16384)
    return 16384


def _moe_freq(r: _Reader) -> int:
    r.used.add("moe_layer_freq")
    value = r.raw.get("moe_layer_freq")
    if value is None:
        return 1
    if isinstance(value, list):
        raise InputError(
            f"model config 'moe_layer_freq' = {_short(value)} is a per-layer list (Megatron style); "
            "paraplan reads the integer form of DeepSeek's config (MoE every n-th layer)"
        )
    return _checked_int("moe_layer_freq", value)


def _layer_list(r: _Reader, key: str, layers: int) -> set[int]:
    r.used.add(key)
    value = r.raw.get(key)
    if value is None:
        return set()
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise InputError(f"model config '{key}' = {_short(value)} must be a list of layer indices")
    bad = [v for v in value if not 0 <= v < layers]
    if bad:
        raise InputError(f"model config '{key}' has layer {bad[0]} outside 0..{layers - 1}")
    return set(value)


def _mla(r: _Reader, fam: _Family, heads: int) -> dict[str, Any]:
    """DeepSeek multi-head latent attention dims (DeepseekV2Config / DeepseekV3Config defaults)."""
    keys = ("kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
    if fam.mla is None:
        for key in keys:
            if r.raw.get(key) is not None:
                r.warn(f"'{key}' ignored: transformers' {fam.cls} has no latent attention")
            r.used.add(key)
        return {}
    if fam.mla == "generic" and r.raw.get("kv_lora_rank") is None:
        r.used.update(keys)
        return {}
    defaults = {"kv_lora_rank": 512, "q_lora_rank": 1536, "qk_rope_head_dim": 64, "qk_nope_head_dim": 128,
                "v_head_dim": 128}  # fmt: skip
    values: dict[str, int | None] = {}
    for key in keys:
        r.used.add(key)
        if key == "q_lora_rank" and key in r.raw and r.raw[key] is None:
            values[key] = None  # explicit null: a plain q_proj (DeepSeek-V2-Lite)
        elif r.raw.get(key) is not None:
            values[key] = _checked_int(key, r.raw[key], minimum=0 if key == "qk_rope_head_dim" else 1)
        elif fam.mla == "generic":
            raise InputError(f"model config has 'kv_lora_rank' but lacks '{key}' (latent attention)")
        else:
            values[key] = defaults[key]
            _default_warned(r, fam, key, defaults[key])
    kv_key = r.find(_KV)
    if kv_key is not None and kv_key[1] != heads:
        r.warn(f"'{kv_key[0]}' = {_short(kv_key[1])} ignored: latent attention decompresses one K/V per head")
    nope, rope = values["qk_nope_head_dim"], values["qk_rope_head_dim"]
    assert nope is not None and rope is not None
    return {
        "kv_lora_rank": values["kv_lora_rank"],
        "q_lora_rank": values["q_lora_rank"],
        "qk_rope_head_dim": rope,
        "v_head_dim": values["v_head_dim"],
        "head_dim": nope + rope,
        "num_kv_heads": heads,
    }


def _sliding(r: _Reader, fam: _Family, layers: int) -> dict[str, Any]:
    """Window size and sliding layers, as each config class lays them out."""
    r.used.update(("sliding_window", "use_sliding_window", "max_window_layers", "layer_types",
                   "sliding_window_pattern", "_sliding_window_pattern"))  # fmt: skip
    raw = r.raw
    layer_types = raw.get("layer_types")
    if fam.chunked:  # Llama 4: its layer_types are read by _chunked
        layer_types = None
    if layer_types is not None and not fam.layer_types:
        r.warn(f"'layer_types' ignored: transformers' {fam.cls} does not read it")
        layer_types = None
    if fam.sliding is None:
        if raw.get("sliding_window") is not None:
            r.warn(
                f"'sliding_window' = {_short(raw['sliding_window'])} ignored: transformers' {fam.cls} attends to "
                "the full sequence on every layer"
            )
        return {}
    if "sliding_window" in raw:
        window = raw["sliding_window"]
        window = None if window is None else _checked_int("sliding_window", window)
    else:
        window = fam.sliding_default
        if fam.sliding in ("all", "gemma2", "gemma3"):
            _default_warned(r, fam, "sliding_window", window)
    if fam.sliding in ("qwen2", "qwen2_moe", "qwen3_moe") and not r.flag("use_sliding_window", False):
        window = None
    if layer_types is not None:
        ids = _typed_layers(layer_types, layers, "sliding_attention",
                            "only full_attention and sliding_attention layers are modelled")  # fmt: skip
        if ids and window is None:
            raise InputError("model config 'layer_types' has sliding_attention layers but no 'sliding_window'")
        return {"sliding_window": window, "sliding_layer_ids": tuple(ids)} if ids else {}
    if window is None:
        return {}
    if fam.sliding in ("all", "qwen3_moe"):
        return {"sliding_window": window}
    if fam.sliding == "qwen2":  # Qwen2Config / Qwen3Config: layers from max_window_layers on slide
        first = r.int(("max_window_layers",), default=28, minimum=0)
        ids = [i for i in range(layers) if i >= first]
    elif fam.sliding == "qwen2_moe":  # Qwen2MoeConfig: even layers below max_window_layers slide
        below = r.int(("max_window_layers",), default=28, minimum=0)
        ids = [i for i in range(layers) if (i + 1) % 2 and i < below]
    elif fam.sliding == "gemma2":  # Gemma2Config: even layers local, odd global
        ids = [i for i in range(layers) if (i + 1) % 2]
    else:  # Gemma3TextConfig: every sliding_window_pattern-th layer global (5 local : 1 global)
        pattern = r.int(("sliding_window_pattern", "_sliding_window_pattern"), default=6)
        ids = [i for i in range(layers) if (i + 1) % pattern]
    return {"sliding_window": window, "sliding_layer_ids": tuple(ids)} if ids else {}


def _mlp_act(r: _Reader, fam: _Family) -> str | None:
    """The MLP activation the config names, or its class's (`ModelSpec.mlp_act`)."""
    found = r.find(("hidden_act", "hidden_activation", "activation_function"))
    return str(found[1]) if found is not None and fam.reads_act else fam.act_default


def _rotary(r: _Reader, fam: _Family, head_dim: int) -> dict[str, Any]:
    """The rotary settings a launch config writes (`ModelSpec.rope_theta`, `rotary_fraction`,
    `rope_scaling`), read as the config classes read them: rope_theta (GPT-NeoX rotary_emb_base;
    transformers 5's rope_parameters dict holds it and the scaling), partial_rotary_factor or
    rotary_pct (GPT-J's rotary_dim in dimensions of a head) and rope_scaling."""
    params = r.raw.get("rope_parameters")
    params = params if isinstance(params, dict) else {}
    found = r.find(("rope_theta", "rotary_emb_base"))
    if found is None and params.get("rope_theta") is not None:
        found = ("rope_parameters.rope_theta", params["rope_theta"])
    theta = _checked_float(*found, 0.0, 1e30) if found is not None else fam.rope_theta_default
    share = r.find(("partial_rotary_factor", "rotary_pct"))
    dims = r.find(("rotary_dim",))
    fraction = 1.0
    if share is not None:
        fraction = _checked_float(*share, 0.0, 1.0)
    elif dims is not None:
        fraction = _checked_int(*dims) / head_dim
        if fraction > 1.0:
            raise InputError(f"model config 'rotary_dim' = {_short(dims[1])} exceeds the head dimension {head_dim}")
    scaling = r.raw.get("rope_scaling")
    scaling = scaling if isinstance(scaling, dict) else params
    kind = scaling.get("rope_type", scaling.get("type"))
    words = None
    if kind not in (None, "default"):
        factor = scaling.get("factor")
        words = str(kind) if factor is None else f"{kind}, factor {_short(factor)}"
    return {"rope_theta": theta, "rotary_fraction": fraction, "rope_scaling": words}


def _norm_eps(r: _Reader) -> float | None:
    """The norms' epsilon as the config names it (`ModelSpec.norm_eps`)."""
    found = r.find(("rms_norm_eps", "layer_norm_eps", "layer_norm_epsilon", "norm_eps", "norm_epsilon",
                    "layernorm_epsilon"))  # fmt: skip
    return None if found is None else _checked_float(*found, 0.0, 0.5)


def _typed_layers(layer_types: object, layers: int, local: str, only: str) -> list[int]:
    """The layers a config's `layer_types` (one entry per layer: "full_attention" or `local`)
    marks `local`; `only` ends the error for any other entry."""
    if not isinstance(layer_types, list) or len(layer_types) != layers:
        raise InputError(f"model config 'layer_types' must list one entry for each of the {layers} layers")
    for value in layer_types:
        if value not in ("full_attention", local):
            raise InputError(f"model config 'layer_types' has {_short(value)}: {only}")
    return [i for i, value in enumerate(layer_types) if value == local]


def _chunked(r: _Reader, fam: _Family, layers: int) -> dict[str, Any]:
    """Llama 4's chunked-attention layers (Llama4TextConfig; masks: transformers masking_utils).

    A layer's attention type is `layer_types[i]` when the config lists them ("chunked_attention"
    or "full_attention"), else "chunked_attention" where `no_rope_layers[i]` is 1 (a RoPE layer)
    and "full_attention" where it is 0 (a NoPE layer); an absent or empty `no_rope_layers` is
    [int((i + 1) % no_rope_layer_interval != 0) for i in range(L)] (interval default 4: every
    4th layer NoPE). Chunked layers use `create_chunked_causal_mask` with attention_chunk_size
    (default 8192); Llama4TextModel builds that mask on every forward, and it raises when
    attention_chunk_size is null."""
    if not fam.chunked:
        return {}
    keys = ("attention_chunk_size", "no_rope_layers", "no_rope_layer_interval", "layer_types")
    r.used.update(keys)
    raw = r.raw
    layer_types = raw.get("layer_types")
    no_rope = raw.get("no_rope_layers")
    if layer_types is not None:
        ids = _typed_layers(layer_types, layers, "chunked_attention",
                            "Llama4TextModel has full_attention and chunked_attention layers only")  # fmt: skip
    elif no_rope:  # Llama4TextConfig: `no_rope_layers if no_rope_layers else default`
        if not isinstance(no_rope, list) or not all(v in (0, 1) and not isinstance(v, float) for v in no_rope):
            raise InputError(f"model config 'no_rope_layers' = {_short(no_rope)} must be a list of 0s and 1s")
        if len(no_rope) < layers:
            raise InputError(f"model config 'no_rope_layers' lists {len(no_rope)} layers, fewer than the {layers} "
                             "layers (Llama4TextAttention reads no_rope_layers[layer_idx])")  # fmt: skip
        ids = [i for i in range(layers) if no_rope[i]]
    else:
        interval = r.int(("no_rope_layer_interval",), default=4)
        if "no_rope_layer_interval" not in raw:
            r.warn("'no_rope_layers' absent: Llama4TextConfig default assumed (every 4th layer NoPE with full "
                   "attention, the others RoPE with chunked attention)")  # fmt: skip
        ids = [i for i in range(layers) if (i + 1) % interval != 0]
    if "attention_chunk_size" in raw:
        if raw["attention_chunk_size"] is None:
            raise InputError(
                "model config 'attention_chunk_size' is null: Llama4TextModel builds the chunked-attention mask on "
                "every forward, and transformers' create_chunked_causal_mask raises without a chunk size"
            )
        chunk = _checked_int("attention_chunk_size", raw["attention_chunk_size"])
    else:
        chunk = 8192
        _default_warned(r, fam, "attention_chunk_size", chunk)
    return {"attention_chunk": chunk, "chunked_layer_ids": tuple(ids)} if ids else {}


def _warn_leftovers(r: _Reader, fam: _Family, model_type: str) -> None:
    for key, note in _WARNED_KEYS.items():
        if key in r.used:  # read and modelled by this family (attention_chunk_size for Llama 4)
            continue
        value = r.raw.get(key)
        r.used.add(key)
        if value is not None and value is not False and value != 0:
            r.warn(f"'{key}' = {_short(value)}: {note}")
    known = {k for keys in _ALIASES.values() for k in keys} | {
        "head_dim", "tie_word_embeddings", "attention_bias", "mlp_bias", "qkv_bias", "use_bias", "bias",
        "enable_bias", "multi_query", "new_decoder_architecture", "num_ln_in_parallel_attn", "parallel_attn",
        "word_embed_proj_dim", "do_layer_norm_before", "layer_norm_elementwise_affine", "use_qk_norm",
        "mlp_only_layers", "decoder_sparse_step", "first_k_dense_replace", "moe_layer_freq", "topk_method",
        "use_sliding_window", "sliding_window", "layer_types", "sliding_window_pattern",
    }  # fmt: skip
    trivial = {"decoder_sparse_step": 1, "moe_layer_freq": 1, "topk_method": "greedy"}
    for key, value in r.raw.items():
        if key.startswith("_") or key in r.used or key in HARMLESS_KEYS:
            continue
        if value is None or value is False or value == 0 or value == [] or value == {} or value == "":
            continue
        if trivial.get(key) == value:
            continue
        if key in known:
            r.warn(f"'{key}' = {_short(value)} ignored, as transformers' {fam.cls} does not read it")
        else:
            r.warn(
                f"'{key}' = {_short(value)} is not a key paraplan knows: assumed to change neither the parameter "
                f"count nor the FLOPs (model_type {model_type or '(none)'!r})"
            )


def model_from_config(config: dict[str, Any], name: str) -> ModelSpec:
    """A `ModelSpec` from a Hugging Face config.json dict; see the module docstring for what is
    modelled, refused and warned. Llama-style and gpt2-style key families are both read."""
    wrapper_warnings: list[str] = []
    if str(config.get("model_type", "")).lower() == "llama4" and isinstance(config.get("text_config"), dict):
        config, wrapper_warnings = _llama4_text_config(config)
    model_type = str(_get(config, "model_type", default="")).lower()
    if model_type in HYBRID_TYPES:
        return _hybrid_from_config(config, name, model_type)
    r = _Reader(config, warnings=wrapper_warnings)
    _refuse_unsupported(r, model_type)
    family_name, fam = _family_for(r, model_type)
    r.used.add("model_type")

    hidden, _ = _sized(r, fam, "hidden", fam.hidden, None)
    layers = _bounded_layers(*_sized(r, fam, "layers", fam.layers, None))
    heads, _ = _sized(r, fam, "heads", fam.heads, None)
    vocab, _ = _sized(r, fam, "vocab", ("vocab_size",), None)
    # head_dim: the config's own key where the attention reads it, else the class default
    head_dim_found = r.find(("head_dim",)) if fam.head_dim_key else None
    if head_dim_found is not None:
        head_dim = _checked_int(*head_dim_found)
    else:
        if not fam.head_dim_key:
            r.used.add("head_dim")
            given = config.get("head_dim")
            if given is not None and hidden % heads == 0 and given != hidden // heads:
                r.warn(f"'head_dim' = {_short(given)} ignored: transformers' {fam.cls} uses hidden_size // heads")
        if fam.head_dim_default is not None:
            head_dim = fam.head_dim_default
            _default_warned(r, fam, "head_dim", head_dim)
        else:
            if hidden % heads:
                raise InputError(f"model config: hidden size {hidden} is not divisible by {heads} attention heads")
            head_dim = hidden // heads

    # KV heads
    kv_heads = heads
    if family_name == "falcon":
        kv_heads = _falcon_kv(r, heads)
    elif fam.kv:
        found = r.find(fam.kv)
        if found is None:
            others = r.find(tuple(k for k in _ALIASES["kv"] if k not in fam.kv))
            if others is not None:
                r.warn(f"'{others[0]}' = {_short(others[1])} taken as the KV-head count, although "
                       f"transformers' {fam.cls} does not read it")  # fmt: skip
                kv_heads = _checked_int(*others)
            elif fam.kv_default is not None:
                kv_heads = fam.kv_default
                _default_warned(r, fam, fam.kv[0], kv_heads)
        else:
            kv_heads = _checked_int(*found)
    else:
        found = r.find(_ALIASES["kv"])
        if found is not None and found[1] != heads:
            r.warn(f"'{found[0]}' = {_short(found[1])} ignored: transformers' {fam.cls} is multi-head attention")

    # MLP width
    note = ""
    if fam.ffn_default == "4h":
        ffn_default: int | None = 4 * hidden
        note = f"4 * hidden_size = {4 * hidden}"
    else:
        ffn_default = fam.ffn_default if isinstance(fam.ffn_default, int) else None
        note = f"its default {ffn_default}" if ffn_default else ""
    ffn, ffn_key = _sized(r, fam, "ffn", fam.ffn, ffn_default, default_note=note)
    if ffn_key is None and fam.ffn_default not in ("4h", None):
        _default_warned(r, fam, (fam.ffn or _FFN)[0], ffn)
    if ffn_key is None and fam is _GENERIC_LLAMA:
        r.warn(f"no MLP width in the config: 4 * hidden_size = {ffn} assumed")

    fields: dict[str, Any] = {}
    fields.update(_moe(r, fam, layers, hidden, ffn))
    fields.update(_mla(r, fam, heads))
    fields.update(_sliding(r, fam, layers))
    fields.update(_chunked(r, fam, layers))

    # biases and norms
    qkv_bias, out_bias, mlp_bias = _bias(r, fam.qkv_bias), _bias(r, fam.out_bias), _bias(r, fam.mlp_bias)
    norms_per_layer, final_norm, norm_affine = fam.norms_per_layer, True, fam.norm != "none"
    embed_dim: int | None = None
    if family_name == "falcon":
        norms_per_layer = _falcon_norms(r)
    if family_name == "opt":
        found = r.find(("word_embed_proj_dim",))
        if found is not None and _checked_int(*found) != hidden:
            embed_dim = _checked_int(*found)
        final_norm = r.flag("do_layer_norm_before", True) and not r.flag("_remove_final_layer_norm", False)
        norm_affine = r.flag("layer_norm_elementwise_affine", True)
    qk_norm: QkNorm = fam.qk_norm
    if fam is _GENERIC_LLAMA and r.flag("use_qk_norm", False):
        qk_norm = "head"
    if fam.chunked:
        # Llama4TextL2Norm on q and k of the RoPE layers: no weights, so no parameters; its FLOPs
        # (a few per element of q and k) are not counted. attn_temperature_tuning, floor_scale and
        # attn_scale scale the NoPE layers' queries (no parameters, negligible FLOPs).
        r.flag("use_qk_norm", True)
        r.used.update(("attn_temperature_tuning", "floor_scale", "attn_scale"))

    found = r.find(fam.max_pos)
    if found is not None:
        max_pos = _checked_int(*found)
    else:
        alias = r.find(tuple(k for k in _ALIASES["max_pos"] if k not in fam.max_pos))
        max_pos = fam.max_pos_default if alias is None else _checked_int(*alias)
        if alias is not None and fam.learned_positions:
            r.warn(f"'{alias[0]}' taken as the number of learned positions, although {fam.cls} does not read it")
    if not fam.learned_positions:
        r.used.update(_ALIASES["max_pos"])  # informational only for rotary / ALiBi models

    tie = r.flag("tie_word_embeddings", fam.tie)
    # dropout: as the config class reads the rates (`_dropout`); GPT-2-style keys without a
    # model_type are read as GPT-2, dropout included
    keys = DROPOUT_FAMILIES.get(family_name, ())
    dropout = _dropout(r, bool(keys) and (model_type in FAMILIES or not model_type), keys)
    if family_name.startswith("deepseek"):
        # DeepSeek-V3's MTP depth; counted only when trained (Stack.mtp), see ModelSpec.mtp_params
        fields["mtp_layers"] = r.int(("num_nextn_predict_layers",), default=0, minimum=0)
        if fields["mtp_layers"]:
            r.warn(f"'num_nextn_predict_layers' = {fields['mtp_layers']}: the multi-token-prediction module(s) are "
                   "not in the parameter totals (transformers drops them on load; DeepSeek's published 671B "
                   "excludes them); they are trained, and priced, only with the stack setting mtp")  # fmt: skip
    _warn_leftovers(r, fam, model_type)

    try:
        return ModelSpec(
            name=str(config.get("_paraplan_name", name)),
            hidden_size=hidden,
            num_layers=layers,
            num_heads=heads,
            num_kv_heads=fields.pop("num_kv_heads", kv_heads),
            head_dim=fields.pop("head_dim", head_dim),
            ffn_hidden_size=fields.pop("ffn_hidden_size", ffn),
            vocab_size=vocab,
            max_seq_len=max_pos,
            mlp=fam.mlp,
            tied_embeddings=tie,
            learned_positions=fam.learned_positions,
            position_offset=2 if family_name == "opt" else 0,
            layernorm=fam.norm != "rms",
            linear_bias=qkv_bias and out_bias and mlp_bias,
            qkv_bias=qkv_bias,
            out_bias=out_bias,
            mlp_bias=mlp_bias,
            lm_head_bias=fam.lm_head_bias,
            norms_per_layer=norms_per_layer,
            norm_affine=norm_affine,
            qk_norm=qk_norm,
            final_norm=final_norm,
            embedding_norm=family_name == "bloom",
            attention_sinks=family_name == "gpt_oss",
            # GptOssConfig.swiglu_limit (default 7.0; transformers GptOssExperts clamps with it)
            glu_clamp=config.get("swiglu_limit", 7.0) if family_name == "gpt_oss" else None,
            mlp_act=_mlp_act(r, fam),
            **_rotary(r, fam, fields.get("head_dim", head_dim)),
            norm_eps=_norm_eps(r),
            norm_zero_centered=fam.zero_centered_norm,
            embed_dim=embed_dim,
            dropout=dropout,
            warnings=tuple(r.warnings),
            **fields,
        )
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "config"
        assumed = f" (the loader assumed: {'; '.join(r.warnings)})" if r.warnings else ""
        raise InputError(f"model config {name!r}: {where}: {err['msg']}{assumed}") from None


# Llama4Config's own keys (besides text_config); none changes the text model's parameters or FLOPs.
_LLAMA4_WRAPPER_KEYS = frozenset({"vision_config", "boi_token_index", "eoi_token_index", "image_token_index",
                                  "tie_word_embeddings"})  # fmt: skip


def _llama4_text_config(config: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The language model of a Llama4Config (model_type llama4): its text_config, read as
    llama4_text, with a warning that the vision tower is not counted.

    Llama4ForConditionalGeneration = Llama4VisionModel (vision_config) + Llama4MultiModalProjector
    + Llama4ForCausalLM (text_config). paraplan plans the language model only; the vision encoder
    (about 0.87B parameters for Scout and Maverick) and its projector are left out."""
    text: dict[str, Any] = dict(config["text_config"])
    text.setdefault("model_type", "llama4_text")
    notes = [
        "model_type 'llama4' is multimodal: only its language model (text_config) is counted; the vision "
        "encoder (vision_config, Llama4VisionModel) and the multi_modal_projector are not"
    ]
    # transformers ties the LM head by the text config (PreTrainedModel.tie_weights reads
    # config.get_text_config(decoder=True).tie_word_embeddings); Llama4TextConfig defaults to False
    text_tie = text.get("tie_word_embeddings")
    text_tie = False if text_tie is None else text_tie
    if config.get("tie_word_embeddings") is not None and config["tie_word_embeddings"] != text_tie:
        notes.append(
            f"'tie_word_embeddings' = {_short(config['tie_word_embeddings'])} of the llama4 wrapper ignored: the "
            f"text model ties by text_config's {_short(text_tie)}"
        )
    for key, value in config.items():
        if key in ("text_config", "model_type") or key.startswith("_"):
            continue
        if key in _LLAMA4_WRAPPER_KEYS or key in HARMLESS_KEYS or value is None:
            continue
        notes.append(f"'{key}' = {_short(value)} of the llama4 wrapper ignored: the language model is read from "
                     "text_config")  # fmt: skip
    if text.get("model_type") != "llama4_text":
        notes.append(f"text_config has model_type {_short(text.get('model_type'))}, not 'llama4_text'")
    if "_paraplan_name" in config:
        text.setdefault("_paraplan_name", config["_paraplan_name"])
    return text, notes


def _falcon_kv(r: _Reader, heads: int) -> int:
    """FalconAttention: new_decoder_architecture -> num_kv_heads; else multi_query -> 1 KV head."""
    if r.flag("new_decoder_architecture", False):
        found = r.find(("num_kv_heads", "n_head_kv", "num_key_value_heads"))
        return heads if found is None else _checked_int(*found)
    kv = 1 if r.flag("multi_query", True) else heads
    found = r.find(("num_kv_heads", "n_head_kv", "num_key_value_heads"))
    if found is not None and found[1] != kv:
        r.warn(
            f"'{found[0]}' = {_short(found[1])} ignored: Falcon without new_decoder_architecture uses "
            f"{'multi-query attention (1 KV head)' if kv == 1 else 'multi-head attention'}"
        )
    return kv


def _falcon_norms(r: _Reader) -> int:
    """FalconDecoderLayer: ln_attn + ln_mlp (new architecture, num_ln_in_parallel_attn 2), else
    input_layernorm (+ post_attention_layernorm when attention and MLP are sequential)."""
    new = r.flag("new_decoder_architecture", False)
    n_ln = r.int(("num_ln_in_parallel_attn",), default=2 if new else 1)
    if new and n_ln == 2:
        return 2
    return 1 if r.flag("parallel_attn", True) else 2


# --- hybrid Mamba-2 stacks: Nemotron-H (model_type nemotron_h) and Mamba-2 (mamba2) ----------------
HYBRID_TYPES = frozenset({"nemotron_h", "mamba2"})
# NemotronHConfig's layers_block_type names (and the older ones remap_legacy_layer_types reads)
_BLOCK_TYPE_SYMBOLS = {"mamba": "M", "linear_attention": "M", "attention": "*", "full_attention": "*", "mlp": "-",
                       "moe": "E"}  # fmt: skip
# Keys of NemotronHConfig / Mamba2Config that change neither parameters nor FLOPs
_HYBRID_HARMLESS = frozenset({
    "mamba_hidden_act", "time_step_min", "time_step_max", "time_step_limit", "time_step_floor", "time_step_rank",
    "time_step_init_scheme", "time_step_scale", "mamba_ssm_cache_dtype", "rescale_prenorm_residual",
    "residual_in_fp32", "expand", "norm_before_gate", "rms_norm", "moe_shared_expert_overlap", "mamba_dt_min",
    "mamba_dt_max", "mamba_dt_limit", "mamba_dt_init_floor", "mamba_expand", "attention_head_dim",
})  # fmt: skip


def _hybrid_pattern(r: _Reader, model_type: str) -> str:
    """The per-layer pattern: nemotron_h's `hybrid_override_pattern` or `layers_block_type`
    (NemotronHConfig maps one onto the other); a mamba2 model is all Mamba layers."""
    if model_type == "mamba2":
        return "M" * _bounded_layers(r.int(("num_hidden_layers",)), "num_hidden_layers")
    r.used.update(("hybrid_override_pattern", "layers_block_type", "layer_types"))
    pattern = r.raw.get("hybrid_override_pattern")
    blocks = r.raw.get("layers_block_type", r.raw.get("layer_types"))
    if pattern is None and blocks is not None:
        if not isinstance(blocks, list) or not all(b in _BLOCK_TYPE_SYMBOLS for b in blocks):
            raise InputError(f"model config 'layers_block_type' = {_short(blocks)} must list layer types among "
                             f"{', '.join(sorted(_BLOCK_TYPE_SYMBOLS))}")  # fmt: skip
        pattern = "".join(_BLOCK_TYPE_SYMBOLS[b] for b in blocks)
    if not isinstance(pattern, str) or not pattern or set(pattern) - set(PATTERN_KINDS):
        raise InputError(f"model config 'hybrid_override_pattern' = {_short(pattern)} must be a string of the "
                         "layer symbols M (Mamba), * (attention), - (MLP), E (MoE)")  # fmt: skip
    stated = r.raw.get("num_hidden_layers")
    r.used.add("num_hidden_layers")
    if stated is not None and stated != len(pattern):
        r.warn(f"'num_hidden_layers' = {_short(stated)} ignored: the layer pattern has {len(pattern)} layers "
               "(NemotronHConfig derives the count from it)")  # fmt: skip
    return pattern


def _hybrid_from_config(config: dict[str, Any], name: str, model_type: str) -> ModelSpec:
    """A Nemotron-H or Mamba-2 model: transformers' NemotronHConfig (configuration_nemotron_h.py)
    and Mamba2Config defaults, the module trees of modeling_nemotron_h.py / modeling_mamba2.py and
    Megatron-LM's MambaModel (`ModelSpec.mamba_params`). Nemotron-H: a layer per pattern symbol,
    each RMSNorm + one mixer; attention without positional embedding (Megatron-Bridge's
    NemotronHBridge sets position_embedding_type "none"); MLP and experts up_proj/down_proj with
    squared ReLU (plain, 2 matrices); an MoE block of E routed experts (moe_intermediate_size),
    one shared expert of moe_shared_expert_intermediate_size and a router with its
    e_score_correction_bias. Mamba-2 (mistralai/Mamba-Codestral): every layer a mixer; the
    attention sizes are unused and set to the mixer's heads."""
    r = _Reader(config)
    r.used.add("model_type")
    mamba2 = model_type == "mamba2"
    pattern = _hybrid_pattern(r, model_type)
    hidden = r.int(("hidden_size",))
    vocab = r.int(("vocab_size",), default=131072 if not mamba2 else None)
    heads_keys = ("num_heads",) if mamba2 else ("mamba_num_heads",)
    mamba_heads = r.int(heads_keys, default=128)
    mamba_head_dim = r.int(("head_dim",) if mamba2 else ("mamba_head_dim",), default=64)
    for key, what in (("use_bias", "linear biases"), ("mamba_proj_bias", "Mamba projection biases"),
                      ("moe_latent_size", "latent MoE projections")):  # fmt: skip
        r.used.add(key)
        if r.raw.get(key):
            raise InputError(f"model config has '{key}' = {_short(r.raw[key])} ({what}), which paraplan does not "
                             "model (Megatron-LM's MambaMixer asserts no projection bias)")  # fmt: skip
    if not r.flag("use_conv_bias", True):
        raise InputError("model config has 'use_conv_bias' false: Megatron-LM's MambaMixer asserts a conv bias")
    if r.int(("num_nextn_predict_layers",), default=0, minimum=0):
        raise InputError("model config has 'num_nextn_predict_layers': multi-token prediction of a hybrid model is "
                         "not modelled")  # fmt: skip
    fields: dict[str, Any] = dict(
        layer_pattern=pattern, mamba_heads=mamba_heads if "M" in pattern else 0, mamba_head_dim=mamba_head_dim,
        mamba_state_dim=r.int(("ssm_state_size", "state_size"), default=128),
        mamba_groups=r.int(("n_groups", "mamba_n_groups"), default=8),
        mamba_conv_kernel=r.int(("conv_kernel", "mamba_d_conv"), default=4),
        mamba_chunk=r.int(("chunk_size", "mamba_chunk_size"), default=128 if not mamba2 else 256),
    )  # fmt: skip
    if mamba2:
        heads, kv_heads, head_dim, ffn = mamba_heads, mamba_heads, mamba_head_dim, mamba_heads * mamba_head_dim
        r.used.update(("intermediate_size",))
    else:
        heads = r.int(("num_attention_heads",), default=32)
        kv_heads = r.int(("num_key_value_heads",), default=8)
        head_dim = r.int(("head_dim", "attention_head_dim"), default=128)
        ffn = r.int(("intermediate_size",), default=21504)
        act = r.raw.get("mlp_hidden_act", "relu2")
        r.used.add("mlp_hidden_act")
        fields["mlp_act"] = str(act)  # NemotronHMLP: ACT2FN[mlp_hidden_act]
        if act != "relu2":
            r.warn(f"'mlp_hidden_act' = {_short(act)}: NemotronHMLP is up_proj/down_proj whatever the activation "
                   "(plain MLP assumed)")  # fmt: skip
        for key in ("attention_bias", "mlp_bias"):
            if r.flag(key, False):
                raise InputError(f"model config has '{key}' true: Nemotron-H biases are not modelled")
        if "E" in pattern:
            experts = r.int(("n_routed_experts",), default=8)
            top_k = r.int(("num_experts_per_tok",), default=2)
            shared = r.int(("n_shared_experts",), default=1, minimum=0)
            shared_width = r.int(("moe_shared_expert_intermediate_size",), default=7688, minimum=0)
            fields.update(num_experts=experts, experts_top_k=top_k, ffn_hidden_size=r.int(("moe_intermediate_size",),
                          default=7688), router_bias=True, num_shared_experts=1 if shared and shared_width else 0,
                          shared_expert_ffn=shared_width if shared and shared_width else None,
                          dense_ffn_hidden_size=ffn if "-" in pattern else None)  # fmt: skip
            fields.update(_expert_groups(r, FAMILIES["deepseek_v3"], experts, top_k))
            fields.update(_router(r, FAMILIES["deepseek_v3"]))  # its router is DeepSeek-V3's (sigmoid, bias)
        else:
            r.used.update(("n_routed_experts", "num_experts_per_tok", "n_shared_experts", "moe_intermediate_size",
                           "moe_shared_expert_intermediate_size", "n_group", "topk_group"))  # fmt: skip
        if r.raw.get("sliding_window") is not None:
            raise InputError("model config has 'sliding_window': sliding attention of a hybrid model is not modelled")
        r.used.add("sliding_window")
    max_pos = r.int(("max_position_embeddings",), default=4096 if not mamba2 else 1 << 20)
    dropout = _dropout(r, False, ())
    tie = r.flag("tie_word_embeddings", False)
    r.used.update(_HYBRID_HARMLESS)
    r.used.update(k for k in r.raw if k in HARMLESS_KEYS)
    for key, value in r.raw.items():
        if key.startswith("_") or key in r.used or value is None or value is False or value == 0:
            continue
        r.warn(f"'{key}' = {_short(value)} is not a key paraplan knows: assumed to change neither the parameter "
               f"count nor the FLOPs (model_type {model_type!r})")  # fmt: skip
    try:
        return ModelSpec(
            name=str(config.get("_paraplan_name", name)), hidden_size=hidden, num_layers=len(pattern),
            num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim, ffn_hidden_size=fields.pop("ffn_hidden_size",
            ffn), vocab_size=vocab, max_seq_len=max_pos, mlp="plain", tied_embeddings=tie, norms_per_layer=1,
            rotary=False, dropout=dropout, warnings=tuple(r.warnings), **fields,
        )  # fmt: skip
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "config"
        raise InputError(f"model config {name!r}: {where}: {err['msg']}") from None

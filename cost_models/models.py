"""Transformer architectures: presets, the Hugging Face `config.json` loader, parameter counts.

Parameter count of one decoder layer (h hidden, d head dim, a heads, g KV heads, f FFN width):
    attention  h*(a*d) [Q] + 2*h*(g*d) [K, V] + (a*d)*h [O]  (+ biases a*d + 2*g*d + h)
    MLP gated  3*h*f (gate, up, down; SwiGLU, Shazeer 2020);  plain  2*h*f (+ biases f + h)
    MoE        E experts of the MLP above + a router h*E
    norms      2*h (RMSNorm) or 4*h (LayerNorm, with bias)
Embeddings V*h, plus n_positions*h for learned positions (GPT-2/3), plus an untied LM head V*h,
plus the final norm. This reproduces the published totals (Llama 2 paper Table 1 sizes: 6.74B,
13.0B, 68.98B; Llama 3: 8.03B, 70.55B, 405.9B; GPT-3 175B: 174.6B; Mixtral 8x7B: 46.7B total,
12.9B active), checked in tests/test_models.py.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from paraplan.cost_models.errors import InputError

MlpKind = Literal["gated", "plain"]

GATED_FAMILIES = frozenset({"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "gemma"})
PLAIN_FAMILIES = frozenset({"gpt2", "gpt_neox", "nemotron", "bloom", "opt", "falcon", "gptj"})
# Families whose reference implementations train with dropout on attention and residuals.
DROPOUT_FAMILIES = frozenset({"gpt2", "opt", "bloom", "gptj"})

MAX_LAYERS = 100_000
MAX_CONFIG_INT = 10**12
MAX_WIDTH = 1_000_000


class ModelSpec(BaseModel):
    """A decoder-only transformer, exactly enough to count its parameters, FLOPs and memory."""

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
    linear_bias: bool = False
    dropout: bool = False
    num_experts: int = Field(default=1, ge=1, le=100_000)  # 1 = dense MLP
    experts_top_k: int = Field(default=1, ge=1, le=100_000)

    @model_validator(mode="after")
    def _consistent(self) -> ModelSpec:
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_attention_heads {self.num_heads} is not a multiple of "
                f"num_key_value_heads {self.num_kv_heads}"
            )
        if self.experts_top_k > self.num_experts:
            raise ValueError(
                f"experts per token {self.experts_top_k} exceeds the number of experts "
                f"{self.num_experts}"
            )
        return self

    # --- shapes -------------------------------------------------------------------------------
    @property
    def q_dim(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_kv_heads * self.head_dim

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 1

    @property
    def mlp_matrices(self) -> int:
        return 3 if self.mlp == "gated" else 2

    # --- parameter counts ---------------------------------------------------------------------
    @property
    def attention_params(self) -> int:
        h = self.hidden_size
        weights = h * self.q_dim + 2 * h * self.kv_dim + self.q_dim * h
        biases = (self.q_dim + 2 * self.kv_dim + h) if self.linear_bias else 0
        return weights + biases

    @property
    def expert_params(self) -> int:
        """One expert (or the dense MLP)."""
        h, f = self.hidden_size, self.ffn_hidden_size
        biases = (f * (self.mlp_matrices - 1) + h) if self.linear_bias else 0
        return self.mlp_matrices * h * f + biases

    @property
    def router_params(self) -> int:
        return self.hidden_size * self.num_experts if self.is_moe else 0

    @property
    def norm_params(self) -> int:
        return (2 if self.layernorm else 1) * self.hidden_size

    @property
    def layer_dense_params(self) -> int:
        """Per layer, everything except the experts: replicated over expert parallelism."""
        return self.attention_params + self.router_params + 2 * self.norm_params

    @property
    def layer_params(self) -> int:
        return self.layer_dense_params + self.num_experts * self.expert_params

    @property
    def embedding_params(self) -> int:
        positions = self.max_seq_len * self.hidden_size if self.learned_positions else 0
        return self.vocab_size * self.hidden_size + positions

    @property
    def head_params(self) -> int:
        """The LM head: zero when tied to the input embedding."""
        return 0 if self.tied_embeddings else self.vocab_size * self.hidden_size

    @property
    def total_params(self) -> int:
        return (
            self.num_layers * self.layer_params
            + self.embedding_params
            + self.head_params
            + self.norm_params
        )

    @property
    def active_params(self) -> int:
        """Parameters touched by one token (top-k experts of each MoE layer)."""
        inactive = (self.num_experts - self.experts_top_k) * self.expert_params
        return self.total_params - self.num_layers * inactive


# --- presets -----------------------------------------------------------------------------------

_PRESETS_DIR = "presets"


def _preset_files() -> dict[str, Any]:
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
        return model_from_config(json.loads(presets[key].read_text()), key)
    path = Path(name_or_path)
    if path.suffix.lower() == ".json" or path.exists() or "/" in name_or_path:
        return load_hf_config(path)
    raise InputError(
        f"unknown model '{name_or_path}'; accepted: a path to a config.json or one of "
        + ", ".join(sorted(presets))
    )


def load_hf_config(path: Path) -> ModelSpec:
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read model config '{path}': {exc.__class__.__name__}") from None
    try:
        config = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"model config '{path}' is not valid JSON ({exc.msg}, line {exc.lineno})") from None
    except (ValueError, RecursionError) as exc:  # e.g. an integer beyond Python's digit limit
        raise InputError(f"model config '{path}' cannot be read: {str(exc).splitlines()[0][:120]}") from None
    if not isinstance(config, dict):
        raise InputError(f"model config '{path}' must hold a JSON object, not {type(config).__name__}")
    return model_from_config(config, path.stem if path.stem != "config" else path.parent.name or "model")


def _get(config: dict[str, Any], *keys: str, default: Any = None) -> Any:
    for key in keys:
        if key in config and config[key] is not None:
            return config[key]
    return default


def _int(config: dict[str, Any], *keys: str, default: int | None = None) -> int:
    value = _get(config, *keys, default=default)
    if value is None:
        raise InputError(f"model config lacks '{keys[0]}' (nor any of {', '.join(keys[1:]) or 'its aliases'})")
    shown = _short(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"model config '{keys[0]}' = {shown} must be a whole number")
    if isinstance(value, float) and (not math.isfinite(value) or value != int(value)):
        raise InputError(f"model config '{keys[0]}' = {shown} must be a whole number")
    if value < 1:
        raise InputError(f"model config '{keys[0]}' = {shown} must be at least 1")
    if value > MAX_CONFIG_INT:
        raise InputError(f"model config '{keys[0]}' = {shown} is beyond any model (at most {MAX_CONFIG_INT:.0e})")
    return int(value)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:20] + "..." + text[-8:]


def _flag(config: dict[str, Any], key: str, default: bool) -> bool:
    value = config.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise InputError(f"model config '{key}' = {_short(value)} must be true or false")
    return value


def _mlp_kind(config: dict[str, Any]) -> MlpKind:
    model_type = str(_get(config, "model_type", default="")).lower()
    if model_type in GATED_FAMILIES:
        return "gated"
    if model_type in PLAIN_FAMILIES:
        return "plain"
    if "n_embd" in config:  # gpt2 key family
        return "plain"
    if "hidden_size" in config:  # unknown type with llama keys reads as llama
        return "gated"
    raise InputError(
        f"model config with model_type {model_type or '(none)'!r} has neither llama-style "
        "(hidden_size, ...) nor gpt2-style (n_embd, ...) keys"
    )


def model_from_config(config: dict[str, Any], name: str) -> ModelSpec:
    """Both key families of Hugging Face configs: llama-style and gpt2-style."""
    mlp = _mlp_kind(config)
    model_type = str(_get(config, "model_type", default="")).lower()
    gpt2_keys = "n_embd" in config and "hidden_size" not in config
    hidden = _int(config, "hidden_size", "n_embd", "d_model")
    layers = _int(config, "num_hidden_layers", "n_layer", "num_layers")
    heads = _int(config, "num_attention_heads", "n_head", "num_heads")
    kv_heads = _int(config, "num_key_value_heads", "num_kv_heads", "multi_query_group_num", default=heads)
    default_ffn = 4 * hidden
    ffn = _int(config, "intermediate_size", "n_inner", "ffn_hidden_size", "ffn_dim", default=default_ffn)
    experts = _int(config, "num_local_experts", "num_experts", "n_routed_experts", default=1)
    if _get(config, "head_dim") is None and hidden % heads:
        raise InputError(f"model config: hidden size {hidden} is not divisible by {heads} attention heads")
    moe_ffn = _get(config, "moe_intermediate_size")
    if experts > 1 and moe_ffn is not None:
        ffn = _int(config, "moe_intermediate_size")
    try:
        return ModelSpec(
            name=str(config.get("_paraplan_name", name)),
            hidden_size=hidden,
            num_layers=layers,
            num_heads=heads,
            num_kv_heads=kv_heads,
            head_dim=_int(config, "head_dim", default=max(1, hidden // heads)),
            ffn_hidden_size=ffn,
            vocab_size=_int(config, "vocab_size", "padded_vocab_size"),
            max_seq_len=_int(config, "max_position_embeddings", "n_positions", "n_ctx", "seq_length", default=2048),
            mlp=mlp,
            tied_embeddings=_flag(config, "tie_word_embeddings", gpt2_keys),
            learned_positions=gpt2_keys or model_type in ("gpt2", "opt"),
            layernorm=gpt2_keys or model_type in PLAIN_FAMILIES,
            linear_bias=gpt2_keys or model_type in ("gpt2", "gpt_neox", "bloom", "opt", "gptj"),
            dropout=model_type in DROPOUT_FAMILIES or (gpt2_keys and not model_type),
            num_experts=experts,
            experts_top_k=_int(config, "num_experts_per_tok", "moe_topk", "top_k", default=1),
        )
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err["loc"]) or "config"
        raise InputError(f"model config {name!r}: {where}: {err['msg']}") from None

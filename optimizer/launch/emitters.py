"""Launch configurations for a plan, in each pinned framework's own flags, checked against its schema.

`emit_launch(kind, model, layout, stack)` writes the plan as

* ``megatron``: a ``torchrun ... pretrain_gpt.py`` command with one Megatron-LM flag per line
  (``\\`` continuations), Megatron-LM at commit d98e8a64;
* ``deepspeed``: a bash script that writes the DeepSpeed 0.19.8 JSON config (a here-document) and
  launches Megatron-DeepSpeed's ``pretrain_gpt.py`` (commit 6acc370a) with ``deepspeed``: DeepSpeed's
  JSON has no tensor or pipeline degree, so those (and the model) go to the script in its own
  flags (`megatron_deepspeed.to_megatron_deepspeed`), checked against its argument list, with
  ``--deepspeed --deepspeed_config FILE``;
* ``torchtitan``: a ``torchrun ... -m torchtitan.train --module llama3 --config NAME`` command
  with ``--section.field`` flags of torchtitan 0.3.0 and the activation-checkpoint subcommand.

Every knob of the plan and every stack setting is written, or the emit is refused
(`InputError`, one sentence naming the knob and why). What a framework's flags cannot express
is not approximated: "emit what was evaluated". The text starts with comment lines that state
the plan and, when given its evaluation, the predicted step time and memory.
`check_emitted(kind, text)` runs the pinned checkers on an emitted text, and
`paraplan.launch.importer` reads it back into the same plan (a property test checks both).
"""

from __future__ import annotations

import json
import math
import shlex
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, NoReturn

from paraplan.cost_models.errors import InputError
from paraplan.cost_models.frameworks import (
    DEEPSPEED_MOE_WORDS,
    FRAMEWORKS,
    MOE_LAYER,
    a2a_overlap_reasons,
    default_stack,
    model_stack_unsupported,
    stack_unsupported,
)
from paraplan.cost_models.layout import KNOBS, CpComm, Framework, Layout, Offload, Precision, Recompute, layout_words
from paraplan.cost_models.models import GPT_OSS_GLU, ModelSpec
from paraplan.cost_models.stack import CUDA_GRAPH_SCOPES, DEFAULT_RECOMPUTE_MODULES, Fp8Recipe, Stack, module_list
from paraplan.cost_models.stages import chunk_layers
from paraplan.cost_models.units import GB, memory_text

from .megatron_deepspeed import MDS, to_megatron_deepspeed
from .schema import DEEPSPEED_VERSION, MEGATRON_COMMIT, TORCHTITAN_VERSION, Flag, render_layer_pattern

if TYPE_CHECKING:
    from paraplan.results import EvaluatedLayout

__all__ = [
    "DEEPSPEED_CONFIG_NAME",
    "EMITTERS",
    "TITAN_REGISTRY",
    "TitanConfig",
    "check_emitted",
    "emit_launch",
    "megatron_model_flags",
    "titan_config_for",
]

EMITTERS: tuple[str, ...] = ("megatron", "deepspeed", "torchtitan")
DEEPSPEED_CONFIG_NAME = "ds_config.json"
MEGATRON_SCRIPT = "pretrain_gpt.py"
# Hybrid Mamba-2 models (`ModelSpec.layer_pattern`): d98e8a64's entry point for them; its
# pretrain_mamba.py is a deprecated wrapper that runs this file ("pretrain_mamba.py has been
# deprecated. Use pretrain_hybrid.py instead.")
MEGATRON_HYBRID_SCRIPT = "pretrain_hybrid.py"


def megatron_script(model: ModelSpec) -> str:
    """The Megatron-LM training script of a model: pretrain_hybrid.py for a hybrid layer stack."""
    return MEGATRON_HYBRID_SCRIPT if model.is_hybrid else MEGATRON_SCRIPT


# Stack.fp8_recipe values each framework can be told: Megatron-LM's --fp8-recipe choices at the
# pinned commit (tensorwise, delayed, mxfp8, blockwise, custom; the last two are not modelled);
# torchtitan 0.3.0's Float8LinearConverter.Config.recipe_name (torchtitan/components/quantization/
# float8.py at 4f9e9a47: Literal["rowwise", "rowwise_with_gw_hp"]).
MEGATRON_FP8_RECIPES: tuple[Fp8Recipe, ...] = ("delayed", "tensorwise", "mxfp8")
TITAN_FP8_RECIPES: tuple[Fp8Recipe, ...] = ("rowwise", "rowwise_with_gw_hp")

# torchtitan 0.3.0 captures each forward+backward in a CUDA graph unless told not to
# (training.disable_cuda_graphs, default False; trainer.py `wrap_with_cuda_graph` at 4f9e9a47). It
# refuses them with pipeline parallelism (Trainer.Config._validate_cuda_graphs: "CUDA graphs do not
# support pipeline parallelism yet"), their capture forbids the host syncs of CPU offload, and
# paraplan prices torchtitan eager (its kernel efficiency is fitted on releases without them;
# `Stack.cuda_graph_scope` is Megatron-LM's): every torchtitan launch turns them off.
TITAN_NO_CUDA_GRAPHS: Flag = ("--training.disable_cuda_graphs", None)
# nargs "+": the value's words are separate arguments (one quoted word would reach argparse as one value,
# which --cuda-graph-modules's type, CudaGraphModule[name], rejects)
LIST_FLAGS = frozenset({"--recompute-modules", "--cuda-graph-modules"})
Refuser = Callable[[str, str], NoReturn]  # (knob, why): raise InputError naming the knob


@dataclass(frozen=True)
class TitanConfig:
    """A torchtitan 0.3.0 registry config (``--module M --config NAME``) and what it fixes."""

    module: str
    name: str
    size: str  # model_registry size ("8B", ...)
    dims: tuple[int, int, int, int, int, int]  # layers, hidden, heads, KV heads, MLP width, vocabulary
    precision: Precision  # Float8LinearConverter in its model_spec: FP8, else BF16
    recompute: Recompute  # its activation_checkpoint default
    async_tp: bool  # compile.enable_async_tensor_parallel in the config
    local_batch: int  # its training.local_batch_size
    seq_len: int  # its training.seq_len
    compiled: bool = False  # compile.enable in the config (llama3_405b's CompileConfig(enable=True, ...))


# torchtitan 0.3.0 `torchtitan/models/llama3/config_registry.py` and `__init__.py` (model_registry
# sizes; the MLP width is compute_ffn_hidden_dim(dim, multiple_of, ffn_dim_multiplier)).
TITAN_REGISTRY: dict[str, TitanConfig] = {
    "llama3_8b": TitanConfig(
        "llama3",
        "llama3_8b",
        "8B",
        (32, 4096, 32, 8, 14336, 128256),
        Precision.BF16,
        Recompute.SELECTIVE,
        False,
        1,
        8192,
    ),
    "llama3_70b": TitanConfig(
        "llama3", "llama3_70b", "70B", (80, 8192, 64, 8, 28672, 128256), Precision.BF16, Recompute.FULL, False, 8, 8192
    ),
    "llama3_405b": TitanConfig(
        "llama3",
        "llama3_405b",
        "405B",
        (126, 16384, 128, 8, 53248, 128256),
        Precision.FP8,
        Recompute.FULL,
        True,
        2,
        8192,
        compiled=True,
    ),
}


def _dims(model: ModelSpec) -> tuple[int, int, int, int, int, int]:
    return (
        model.num_layers,
        model.hidden_size,
        model.num_heads,
        model.num_kv_heads,
        model.ffn_hidden_size,
        model.vocab_size,
    )


def _slug(name: str) -> str:
    out = "".join(c if c.isalnum() else "_" for c in name.lower()).strip("_")
    return out or "model"


# The RoPE of every torchtitan 0.3.0 llama3 registry model: theta 500,000 with Llama 3.1's scaling
# (torchtitan/models/llama3/__init__.py: ComplexRoPE.Config(theta=500000, scaling="llama"))
TITAN_ROPE_THETA = 500000.0
ROPE_THETA_DEFAULT = 10000.0  # LlamaConfig's, where a config states none (and Megatron-LM's --rotary-base)


def titan_config_for(model: ModelSpec, precision: Precision) -> tuple[str, TitanConfig | None]:
    """The ``--config`` name for a model in a precision: the torchtitan 0.3.0 registry config when
    one builds exactly this model (dims and RoPE base) in this precision, else
    ``paraplan_<model>[_float8]`` (a config the user registers; the emitted comment says what it
    must hold)."""
    for cfg in TITAN_REGISTRY.values():
        if cfg.dims == _dims(model) and cfg.precision == precision and model.rope_theta == TITAN_ROPE_THETA:
            return cfg.name, cfg
    suffix = "_float8" if precision == Precision.FP8 else ""
    return f"paraplan_{_slug(model.name)}{suffix}", None


@dataclass(frozen=True)
class _Ctx:
    kind: str
    title: str
    model: ModelSpec
    lay: Layout
    stack: Stack
    evaluated: EvaluatedLayout | None
    gpus_per_node: int


# Flash-style attention as the runs the attention efficiencies are fitted on choose it: Megatron-
# Bridge's recipes leave attention_backend None (auto), so Transformer Engine picks its kernel,
# cuDNN fused attention on Hopper and Blackwell (TE d0067d0d dot_product_attention/utils.py
# get_attention_backend prefers FusedAttention there "for performance reasons"). "flash" would pin
# the flash-attn package instead, which lacks, e.g., GPT-OSS's attention sinks.
ATTENTION_BACKEND = "auto"
ATTENTION_NOTE = ("# --attention-backend auto: Transformer Engine picks its fastest flash-style kernel (NVTE_DEBUG=1 "
                  "NVTE_DEBUG_LEVEL=2 logs which); its unfused fallback would hold s x s scores the memory figure "
                  "leaves out")  # fmt: skip

# --cp-comm-type per CP exchange: Megatron-LM d98e8a64 passes the value to Transformer Engine as is
# (megatron/core/extensions/transformer_engine.py TEDotProductAttention; transformer_config.py
# cp_comm_type: "p2p", "all_gather", "a2a" or "a2a+p2p"), and TE d0067d0d raises "Unsupported
# communication type" on any other (attention/dot_product_attention/context_parallel.py
# attn_forward_func_with_cp): "allgather" is not one.
MEGATRON_CP_COMM: dict[CpComm, str] = {CpComm.RING: "p2p", CpComm.ALLGATHER: "all_gather"}
MEGATRON_CP_COMM_TYPES = ("p2p", "all_gather", "a2a", "a2a+p2p")

# Megatron-LM's MoE kernel flags the cost model assumes on (written for every MoE model; the importer
# names a launch without them)
MOE_KERNEL_FLAGS: tuple[Flag, ...] = (("--moe-grouped-gemm", None), ("--moe-permute-fusion", None))
# Squared-ReLU experts: the activation and the router-probability multiply as one kernel, as the cost
# model prices an MoE layer's activation (`compute._layer_memory_bound_fwd_s`); without it TEGroupedMLP
# runs squared_relu, then multiplies by the fp32 probabilities and casts back (moe/experts.py
# `bias_act_func` at d98e8a64). Off by default; Megatron-Bridge's Nemotron 3 Nano recipes set it.
FUSED_SQUARED_RELU: Flag = ("--use-fused-weighted-squared-relu", None)


def squared_relu(m: ModelSpec) -> bool:
    """Whether Megatron-LM runs the model's MLP with --squared-relu (Nemotron's relu2; a hybrid
    model's MLP without a stated activation, as Nemotron-H's)."""
    return m.mlp != "gated" and (m.mlp_act == "relu2" or (m.mlp_act is None and m.is_hybrid))


def grouped_experts_unfuse_bias_dropout(m: ModelSpec) -> bool:
    """Whether an MoE model needs --no-bias-dropout-fusion: moe/experts.py TEGroupedMLP at d98e8a64
    asserts "bias_dropout_fusion is not supported in TEGroupedMLP when add_bias_linear=True", and the
    fusion is on by default (Megatron-LM's own examples/gptoss/02_train.sh turns it off). The unfused
    bias-dropout-add of the few layers' outputs is not priced apart."""
    return m.is_moe and (m.has_qkv_bias, m.has_out_bias, m.has_mlp_bias) == (True, True, True)


def moe_kernel_flags(m: ModelSpec) -> tuple[Flag, ...]:
    """The MoE kernel flags the cost model assumes for an MoE model (`MOE_KERNEL_FLAGS`, and the
    fused weighted squared ReLU for squared-ReLU experts)."""
    return (*MOE_KERNEL_FLAGS, FUSED_SQUARED_RELU) if squared_relu(m) else MOE_KERNEL_FLAGS


def _refuse(ctx: _Ctx, knob: str, why: str) -> NoReturn:
    raise InputError(f"cannot emit {ctx.kind} for this plan: {knob} -- {why}")


def _refuse_older_stack(ctx: _Ctx, release: str, repeats_kv: bool = False) -> None:
    """Stack settings that describe older releases (`Stack.pp_outputs_kept`, `Stack.kv_repeated`,
    `Stack.moe_gather_scatter`, `Stack.layer_sac`, `Stack.triton_attention`), which the pinned
    frameworks' flags cannot bring back. `repeats_kv`: the emitted attention repeats K/V itself
    (Megatron-LM's unfused DotProductAttention, `key.repeat_interleave`)."""
    if ctx.stack.pp_outputs_kept:
        _refuse(ctx, "pp_outputs_kept", f"{release}'s pipeline schedules keep no micro-batch's output to the step's end "
                "(PyTorch's pipelining did until torchtitan passed return_outputs=False, e5ef99aab)")  # fmt: skip
    if ctx.stack.moe_gather_scatter and ctx.model.is_moe:
        _refuse(ctx, "moe_gather_scatter", f"{release} permutes MoE tokens with index_select / scatter_add or fused "
                "kernels; the gather/scatter path is Megatron-Core core_v0.6.0's allgather dispatcher")  # fmt: skip
    if ctx.stack.layer_sac:
        _refuse(ctx, "layer_sac", f"{release} has no selective_ac_option (torchtitan v0.2.2's checkpointing of every "
                "Nth layer)")  # fmt: skip
    if ctx.stack.triton_attention:
        _refuse(ctx, "triton_attention", f"{release} runs no FlashAttention in Triton (2022's flash_attn_triton.py, "
                "llm-foundry's attn_impl triton); its flash attention is FlashAttention-2, cuDNN or SDPA's")  # fmt: skip
    if ctx.stack.kv_repeated and not repeats_kv:
        _refuse(ctx, "kv_repeated", f"{release}'s attention takes the K/V heads as they are (torchtitan repeated them "
                "to every query head before ff0829c10); no flag repeats them")  # fmt: skip


def _refuse_unsupported_stack(ctx: _Ctx) -> None:
    """What the framework cannot run of the stack (`frameworks.stack_unsupported`) and the model
    cannot run of it (`frameworks.model_stack_unsupported`): the rules the question asks when it is
    built, so that nothing `validate` priced is refused here on those grounds."""
    lay = ctx.lay
    for knob, why in stack_unsupported(lay.framework, ctx.stack) + model_stack_unsupported(ctx.model, ctx.stack,
                                                                                          lay.precision):  # fmt: skip
        _refuse(ctx, knob, why)


def _megatron_a2a_overlap(ctx: _Ctx, lay: Layout) -> list[tuple[str, str | None]]:
    """--overlap-moe-expert-parallel-comm (and --delay-wgrad-compute), which Megatron-LM runs only
    where `frameworks.a2a_overlap_breaks` finds nothing (asserted in transformer_config.py)."""
    if not ctx.stack.moe_a2a_overlap:  # delay_wgrad alone: refused as stack_unsupported says
        return []
    broken = a2a_overlap_reasons(lay, ctx.model.is_moe, ctx.stack.recompute_modules)
    if broken:
        _refuse(ctx, "moe_a2a_overlap", f"Megatron-LM {MEGATRON_COMMIT[:8]}'s --overlap-moe-expert-parallel-comm: "
                f"{'; '.join(broken)}")  # fmt: skip
    flags: list[tuple[str, str | None]] = [("--overlap-moe-expert-parallel-comm", None)]
    if ctx.stack.delay_wgrad:
        flags.append(("--delay-wgrad-compute", None))
    return flags


def _kf(name: str, fw: Framework) -> str:
    """The framework's flag for a knob's plain value (`Knob.flags`), as written on a command line."""
    flag = KNOBS[name].flags[fw]
    return flag if flag.startswith("--") else f"--{flag}"


def _nodes(gpus: int, per_node: int) -> tuple[int, int]:
    """(processes per node, nodes) for `gpus` ranks on nodes of `per_node` GPUs."""
    per = math.gcd(gpus, max(1, per_node))
    return per, gpus // per


# ---------------------------------------------------------------------------------------------
# Header: the plan and its prediction


COMMENT_WIDTH = 100


def _comment(text: str) -> list[str]:
    """`text` as shell comment lines of at most COMMENT_WIDTH characters (every line starts with #)."""
    return textwrap.wrap(text, COMMENT_WIDTH - 2, initial_indent="# ", subsequent_indent="#   ",
                         break_long_words=False, break_on_hyphens=False)  # fmt: skip


def _comments(lines: Sequence[str]) -> list[str]:
    out: list[str] = []
    for line in lines:
        out += _comment(line[2:] if line.startswith("# ") else line.lstrip("#"))
    return out


def _header(ctx: _Ctx, pinned: str) -> list[str]:
    lay, ev = ctx.lay, ctx.evaluated
    where = f" on {ev.gpus} x {ev.hardware}" if ev is not None else f" on {lay.gpus} GPUs"
    lines = [f"# paraplan plan: {ctx.model.name}{where}: {layout_words(lay)}"]
    if ev is not None:
        low, high = ev.step_time_range_s
        mem = ev.memory_bytes
        usable = mem.total + ev.memory_margin_bytes
        verdict = "fits" if ev.memory_margin_bytes >= 0 else "does NOT fit"
        lines.append(
            f"# predicted step {ev.step_time_s:.3g} s (range {low:.3g}-{high:.3g} s), MFU {ev.mfu:.3f}; "
            f"memory {mem.total / GB:.1f} GB of {usable / GB:.1f} GB usable on the most loaded GPU "
            f"({verdict}, margin {memory_text(ev.memory_margin_bytes)})"
        )
        if not ev.feasible:
            lines.append(f"# NOT feasible: {'; '.join(ev.violations)}")
    else:
        lines.append("# (no prediction attached: emit from validate or optimize to get step time and memory)")
    lines.append(f"# {pinned}")
    return lines


def _render_command(head: str, flags: Sequence[Flag], tail: Sequence[str] = ()) -> str:
    parts = [head]
    for flag, value in flags:
        if value is not None and flag in LIST_FLAGS:  # several values, one argument each
            parts.append(" ".join([flag, *(shlex.quote(v) for v in value.split(" "))]))
        else:
            parts.append(flag if value is None else f"{flag} {shlex.quote(value)}")
    parts.extend(tail)
    return " \\\n    ".join(parts)


# ---------------------------------------------------------------------------------------------
# Megatron-LM d98e8a64


def megatron_model_flags(
    model: ModelSpec, lay: Layout, refuse: Refuser | None = None, ep_dispatcher: str = "alltoall"
) -> list[Flag]:
    """The model's architecture as Megatron-LM flags (the dims, MLP, norm, positions, biases,
    dropout, MoE, MLA, windows). Refuses (via `refuse`, default InputError) what they cannot express."""

    def no(why: str) -> NoReturn:
        if refuse is not None:
            refuse("model", why)
        raise InputError(f"cannot emit megatron for this plan: model -- {why}")

    m = model
    if m.embed_dim is not None and m.embed_dim != m.hidden_size:
        no(f"{m.name} has a word-embedding width {m.embed_dim} apart from the hidden size (OPT project_in); "
           "Megatron-LM has no flag for it")  # fmt: skip
    if m.position_offset:
        no(f"{m.name} offsets its learned positions by {m.position_offset} (OPT); Megatron-LM has no flag for it")
    if m.embedding_norm:
        no(f"{m.name} normalises the embeddings (BLOOM); Megatron-LM has no flag for it")
    if m.lm_head_bias:
        no(f"{m.name} has an LM-head bias (GPT-J); Megatron-LM has no flag for it")
    if not m.norm_affine:
        no(f"{m.name} uses non-parametric LayerNorm (OLMo); Megatron-LM has no flag for it")
    if not m.final_norm:
        no(f"{m.name} has no final norm; Megatron-LM always adds one")
    if m.norms_per_layer != m.blocks_per_layer:
        no(f"{m.name} has {m.norms_per_layer} norms per layer; Megatron-LM's GPT layer has 2")
    if m.qk_norm == "full":
        no(f"{m.name} normalises q and k over all heads (OLMo 2); Megatron-LM's --qk-layernorm is per head")
    flags: list[Flag] = [
        ("--num-layers", str(m.num_layers)),
        ("--hidden-size", str(m.hidden_size)),
        ("--num-attention-heads", str(m.num_heads)),
    ]
    if not m.is_mla and m.head_dim * m.num_heads != m.hidden_size:
        flags.append(("--kv-channels", str(m.head_dim)))
    if not m.is_mla and m.num_kv_heads != m.num_heads:
        flags += [("--group-query-attention", None), ("--num-query-groups", str(m.num_kv_heads))]
    dense_ffn = m.dense_ffn_hidden_size or m.ffn_hidden_size
    flags.append(("--ffn-hidden-size", str(dense_ffn if m.is_moe else m.ffn_hidden_size)))
    flags += _megatron_activation(m, no)
    flags.append(("--normalization", "LayerNorm" if m.layernorm else "RMSNorm"))
    if m.norm_eps is not None:
        flags.append(("--norm-epsilon", f"{m.norm_eps:g}"))
    if m.norm_zero_centered:
        flags.append(("--apply-layernorm-1p", None))
    if m.learned_positions:
        if m.positions_exceeded(lay.seq_len):
            no(f"sequence length {lay.seq_len} exceeds {m.name}'s {m.max_seq_len} learned positions "
               "(--max-position-embeddings)")  # fmt: skip
        flags += [("--position-embedding-type", "learned_absolute"), ("--max-position-embeddings", str(m.max_seq_len))]
    elif not m.rotary:
        flags += [
            ("--position-embedding-type", "none"),
            ("--max-position-embeddings", str(max(m.max_seq_len, lay.seq_len))),
        ]
    else:
        flags += [
            ("--position-embedding-type", "rope"),
            ("--max-position-embeddings", str(max(m.max_seq_len, lay.seq_len))),
        ]
        flags += _megatron_rotary(m, no)
    if not m.tied_embeddings:
        flags.append(("--untie-embeddings-and-output-weights", None))
    biases = (m.has_qkv_bias, m.has_out_bias, m.has_mlp_bias)
    if biases == (False, False, False):
        flags.append(("--disable-bias-linear", None))
    elif biases == (True, False, False):
        flags += [("--disable-bias-linear", None), ("--add-qkv-bias", None)]
    elif biases != (True, True, True):
        no(f"{m.name} has biases on (qkv, out, mlp) = {biases}; Megatron-LM sets all linear biases, none, or only qkv")
    drop = "0.1" if m.dropout else "0.0"
    flags += [("--attention-dropout", drop), ("--hidden-dropout", drop)]
    flags.append(("--vocab-size", str(m.vocab_size)))
    if m.qk_norm == "head":
        flags.append(("--qk-layernorm", None))
    if m.attention_sinks:  # GPT-OSS: one learned sink logit per head (Megatron-Bridge gpt_oss_bridge.py)
        flags.append(("--softmax-type", "learnable"))
    if m.sliding_window is not None:
        # a config's window counts the token itself; Megatron's (left, right) counts the keys beside it
        # (Megatron-Bridge models/conversion/utils.py mcore_to_hf_window_size: HF = left + 1)
        flags.append(("--window-size", f"{m.sliding_window - 1},0"))
        sliding = m.layer_is_sliding()
        if not all(sliding):  # 1 = a sliding-window layer, 0 = full attention
            flags.append(("--window-attn-skip-freq", render_layer_pattern([int(s) for s in sliding])))
    if m.attention_chunk is not None:
        no(f"{m.name} attends in chunks of {m.attention_chunk} tokens on some layers (Llama 4); Megatron-LM has no "
           "flag for chunked attention")  # fmt: skip
    if m.is_mla:
        rope = m.qk_rope_head_dim
        flags += [("--multi-latent-attention", None), ("--kv-lora-rank", str(m.kv_lora_rank)),
                  ("--qk-head-dim", str(m.head_dim - rope)), ("--qk-pos-emb-head-dim", str(rope)),
                  ("--v-head-dim", str(m.v_head_dim or m.head_dim))]  # fmt: skip
        if m.q_lora_rank is not None:
            flags.append(("--q-lora-rank", str(m.q_lora_rank)))
    if m.is_moe:
        flags += [
            ("--num-experts", str(m.num_experts)),
            ("--moe-router-topk", str(m.experts_top_k)),
            ("--moe-ffn-hidden-size", str(m.ffn_hidden_size)),
            ("--moe-token-dispatcher-type", "alltoall" if ep_dispatcher == "alltoall" else "flex"),
            # the experts and permutation the cost model prices (`compute.moe_layer_ops`): TEGroupedMLP,
            # which d98e8a64's TE spec builds only with --moe-grouped-gemm (SequentialMLP otherwise:
            # extensions/transformer_engine_spec_provider.py grouped_mlp_modules), and TE's fused
            # permutation (token_dispatcher.py `fused=self.config.moe_permute_fusion`); both default off
            *moe_kernel_flags(m),
        ]
        if grouped_experts_unfuse_bias_dropout(m):
            flags.append(("--no-bias-dropout-fusion", None))
        if ep_dispatcher != "alltoall":
            flags.append(("--moe-flex-dispatcher-backend", ep_dispatcher))
        if m.num_shared_experts:
            width = m.num_shared_experts * (m.shared_expert_ffn or m.ffn_hidden_size)
            flags.append(("--moe-shared-expert-intermediate-size", str(width)))
            if m.shared_expert_gate:
                flags.append(("--moe-shared-expert-gate", None))
        flags += _megatron_router(m, no)
        if m.router_bias and not m.has_mlp_bias:
            # DeepSeek-V3's score-correction bias; a learned router bias (GPT-OSS) comes with the linear
            # biases instead (d98e8a64 moe/router.py: the router's bias exists iff add_bias_linear).
            # TransformerConfig raises on it with softmax scores ("Expert bias for aux-loss-free routing
            # only supports 'sigmoid' and 'sqrtsoftplus'")
            if m.router_score != "sigmoid":
                no(f"{m.name} corrects its {m.router_score} router scores with a per-expert bias; Megatron-LM's "
                   "expert bias needs sigmoid scores")  # fmt: skip
            flags.append(("--moe-router-enable-expert-bias", None))
        if m.expert_groups > 1:
            if m.experts_top_k % m.group_top_k:
                no(
                    f"{m.name} limits routing to {m.group_top_k} of {m.expert_groups} expert groups with top-"
                    f"{m.experts_top_k}; Megatron-LM's group_limited_topk needs top-k a multiple of the groups chosen"
                )
            flags += [("--moe-router-num-groups", str(m.expert_groups)),
                      ("--moe-router-group-topk", str(m.group_top_k))]  # fmt: skip
        if m.dense_layer_ids:
            flags.append(("--moe-layer-freq", render_layer_pattern([int(k != "dense") for k in m.layer_kinds()])))
    if m.mamba_heads:
        # the layer pattern itself is in the split flags (`_megatron_split`: '|' marks its chunks)
        flags += [
            ("--mamba-num-heads", str(m.mamba_heads)),
            ("--mamba-head-dim", str(m.mamba_head_dim)),
            ("--mamba-state-dim", str(m.mamba_state_dim)),
            ("--mamba-num-groups", str(m.mamba_groups)),
        ]
    return flags


def _megatron_rotary(m: ModelSpec, no: Callable[[str], NoReturn]) -> list[Flag]:
    """The rotary base and the rotated share of a head in Megatron-LM d98e8a64's flags (--rotary-base,
    an int, default 10000; --rotary-percent, default 1.0), as its own HF mapping writes them
    (training/arguments.py: rotary_base = rope_theta)."""
    flags: list[Flag] = []
    if m.rope_theta is not None:
        if m.rope_theta != int(m.rope_theta):
            no(f"{m.name}'s rope_theta {m.rope_theta:g} is not a whole number; Megatron-LM's --rotary-base is an int")
        flags.append(("--rotary-base", str(int(m.rope_theta))))
    if m.rotary_fraction != 1.0:
        flags.append(("--rotary-percent", f"{m.rotary_fraction:g}"))
    return flags


def rope_scaling_notes(m: ModelSpec) -> list[str]:
    """A launch config does not write a config's RoPE scaling: it describes the context extension
    the published model ended with (Llama 3.1's, DeepSeek-V3's YaRN), which pretraining may not run,
    and it costs nothing; the comment names it."""
    if m.rope_scaling is None or not m.rotary:
        return []
    return [f"# {m.name}'s config scales RoPE ({m.rope_scaling}); not written: add the framework's flags for it "
            "where the run trains with the scaling"]  # fmt: skip


def _megatron_router(m: ModelSpec, no: Callable[[str], NoReturn]) -> list[Flag]:
    """The router's scores, renormalisation and scale in Megatron-LM d98e8a64's flags (moe/moe_utils.py
    topk_routing_with_score_function): a softmax over the top-k logits by default (renormalised
    weights), over all logits before the top-k with --moe-router-pre-softmax (no renormalisation);
    sigmoid scores (--moe-router-score-function) are always renormalised when top-k > 1; the
    weights are then multiplied by --moe-router-topk-scaling-factor."""
    flags: list[Flag] = []
    if m.router_score == "sigmoid":
        if m.experts_top_k > 1 and not m.router_renorm:
            no(f"{m.name}'s router keeps its top-{m.experts_top_k} sigmoid scores unnormalised; Megatron-LM "
               "renormalises sigmoid scores")  # fmt: skip
        flags.append(("--moe-router-score-function", "sigmoid"))
    elif not m.router_renorm:
        flags.append(("--moe-router-pre-softmax", None))
    if m.router_scale != 1.0:
        flags.append(("--moe-router-topk-scaling-factor", f"{m.router_scale:g}"))
    return flags


def _megatron_activation(m: ModelSpec, no: Callable[[str], NoReturn]) -> list[Flag]:
    """The MLP activation (`ModelSpec.mlp_act`) in Megatron-LM d98e8a64's flags (training/
    argument_utils.py: --swiglu SiLU-gated, --quick-geglu quick-GELU-gated, --squared-relu; GELU
    otherwise, of which it has the exact form and --openai-gelu's tanh form, read here as one)."""
    act = m.mlp_act
    if m.mlp == "gated":
        if act == GPT_OSS_GLU:  # Megatron-Bridge gpt_oss_bridge.py provider_bridge writes the same three
            flags: list[Flag] = [("--quick-geglu", None), ("--glu-linear-offset", "1.0")]
            if m.glu_clamp is not None:
                flags.append(("--activation-func-clamp-value", f"{m.glu_clamp:g}"))
            return flags
        if act in (None, "silu", "swish"):
            return [("--swiglu", None)]
        no(
            f"{m.name}'s gated MLP uses {act}; Megatron-LM gates with SiLU (--swiglu) or quick GELU (--quick-geglu) only"
        )
    if squared_relu(m):
        if m.has_mlp_bias:
            # the CLI turns bias_activation_fusion on with linear biases (argument_utils.py), and
            # TransformerConfig.__post_init__ raises on it with squared ReLU
            no(f"{m.name} has MLP biases with squared ReLU; Megatron-LM rejects the bias-activation fusion its "
               "flags then turn on, and paraplan does not price the unfused bias and activation")  # fmt: skip
        return [("--squared-relu", None)]
    if act is None or act.startswith("gelu"):
        return []
    no(f"{m.name}'s MLP uses {act}; Megatron-LM's plain MLP runs GELU or squared ReLU (--squared-relu) only")


def _megatron_split(ctx: _Ctx) -> list[Flag]:
    """The pipeline split in Megatron-LM's flags, with the virtual stages: the layer-count flags
    where they can say it, else --pipeline-model-parallel-layout.

    Megatron-LM d98e8a64 (transformer_config.py `__post_init__`) takes with virtual stages the
    first/last counts only where they, and each middle rank's layers, divide by the virtual stages;
    --account-for-embedding/loss-in-pipeline-split only where layers + 1 or 2 divide into PP x VPP
    chunks. Any other split that `stages.split_valid` accepts is the layout (`_megatron_layout`),
    which sets the virtual stages itself: arguments.py asserts it is not given with
    --num-virtual-stages-per-pipeline-rank."""
    if ctx.model.is_hybrid:
        return _megatron_hybrid_split(ctx)
    lay, layers = ctx.lay, ctx.model.num_layers
    f, last, pp, v = lay.first_stage_layers, lay.last_stage_layers, lay.pp, lay.virtual_stages
    virtual: list[Flag] = [("--num-virtual-stages-per-pipeline-rank", str(v))] if v > 1 else []
    counts: list[Flag] = [(_kf("first_stage_layers", Framework.MEGATRON), str(f)),
              (_kf("last_stage_layers", Framework.MEGATRON), str(last))]  # fmt: skip
    if not (f or last):
        if pp > 1 and layers % (pp * v):
            _refuse(ctx, "first_stage_layers/last_stage_layers",
                    f"an even split of {layers} layers over PP {pp} x {v} virtual stages: Megatron-LM asserts the "
                    "layers divide evenly unless the first/last stage counts are given")  # fmt: skip
        return virtual
    if pp == 1:
        _refuse(ctx, "first_stage_layers/last_stage_layers", "an uneven split needs pipeline parallelism (PP > 1)")
    if v == 1:
        return counts
    for emb, loss in ((1, 1), (0, 1), (1, 0)):
        total = layers + emb + loss
        if total % (pp * v) == 0 and (f, last) == (total // pp - emb, total // pp - loss):
            out = list(virtual)
            if emb:
                out.append(("--account-for-embedding-in-pipeline-split", None))
            if loss:
                out.append(("--account-for-loss-in-pipeline-split", None))
            return out
    per_middle = (layers - f - last) // (pp - 2) if pp > 2 else 0
    if f % v == 0 and last % v == 0 and per_middle % v == 0:
        return virtual + counts
    return [("--pipeline-model-parallel-layout", _megatron_layout(ctx))]


def _megatron_hybrid_split(ctx: _Ctx) -> list[Flag]:
    """A hybrid model's layer pattern with its pipeline split. Megatron-LM d98e8a64 (arguments.py,
    "Hybrid layer pattern" validation) takes --hybrid-layer-pattern (--hybrid-override-pattern is
    its deprecated alias) and derives the layer count from it; with it, virtual stages and any
    uneven split are '|' separators between the pattern's pipeline segments (segment i is virtual
    stage i // PP of rank i % PP), and --num-virtual-stages-per-pipeline-rank and
    --pipeline-model-parallel-layout are refused. An even split without virtual stages is the
    plain pattern; otherwise the segments are paraplan's chunks (`stages.chunk_layers`)."""
    lay, model = ctx.lay, ctx.model
    pattern = model.layer_pattern or ""
    pp, v, f, last = lay.pp, lay.virtual_stages, lay.first_stage_layers, lay.last_stage_layers
    if pp == 1 or (v == 1 and not (f or last) and model.num_layers % pp == 0):
        return [("--hybrid-layer-pattern", pattern)]
    per_rank = chunk_layers(model.num_layers, pp, v, f, last)
    segments, start = [], 0
    for i in range(pp * v):
        n = per_rank[i % pp][i // pp]
        segments.append(pattern[start : start + n])
        start += n
    if any(not seg for seg in segments):
        _refuse(ctx, "virtual_stages", "a pipeline segment without layers: Megatron-LM's hybrid pattern needs a layer "
                "in each")  # fmt: skip
    return [("--hybrid-layer-pattern", "|".join(segments))]


def _megatron_layout(ctx: _Ctx) -> str:
    """Megatron-LM's --pipeline-model-parallel-layout for the plan's split, chunk by chunk as
    paraplan priced it (`stages.chunk_layers`: each rank's layers in the most even integer shares
    over its chunks). The grammar is d98e8a64's pipeline_parallel_layer_layout.py: chunks split by
    '|', listed virtual stage by virtual stage (chunk i is virtual stage i // PP of rank i % PP);
    't' a decoder layer, 'E' the embedding (first in the first chunk), 'L' the loss (last in the
    final chunk), 'm' an MTP module, which Megatron-LM puts after the decoder layers of the last
    rank's final chunk (where it puts them without a layout: multi_token_prediction.py
    `mtp_on_this_rank`; `validate_layer_layout` wants them after every decoder layer and all in one
    final chunk), as paraplan prices them on the last stage; 'x*n' and '(...)*n' repeat."""
    lay, model = ctx.lay, ctx.model
    pp, v = lay.pp, lay.virtual_stages
    per_rank = chunk_layers(model.num_layers, pp, v, lay.first_stage_layers, lay.last_stage_layers)
    mtp = model.mtp_layers if ctx.stack.mtp else 0
    chunks: list[str] = []
    for i in range(pp * v):
        n = per_rank[i % pp][i // pp]
        text = ("E" if i == 0 else "") + _repeat("t", n)
        chunks.append(text + _repeat("m", mtp) + "L" if i == pp * v - 1 else text)
    out: list[str] = []
    i = 0
    while i < len(chunks):
        j = i
        while j + 1 < len(chunks) - 1 and chunks[j + 1] == chunks[i]:
            j += 1  # a run of equal chunks, short of the final one (it alone ends without '|')
        count = j - i + 1
        out.append(f"({chunks[i]}|)*{count}" if count > 1 else chunks[i] + ("|" if i < len(chunks) - 1 else ""))
        i = j + 1
    return "".join(out)


def _repeat(char: str, n: int) -> str:
    return char * n if n < 2 else f"{char}*{n}"


def _expert_tp(ctx: _Ctx) -> list[Flag]:
    """Expert tensor parallelism (0: the same as TP, Megatron's default); only MoE models have it."""
    if ctx.lay.expert_tp and ctx.model.is_moe:
        return [(_kf("expert_tp", Framework.MEGATRON), str(ctx.lay.expert_tp))]
    return []


def _token_drop(ctx: _Ctx) -> list[Flag]:
    """`Stack.token_drop`: Megatron-LM's capacity factor 1.0 with padding to capacity (the two flags
    Megatron-Bridge's apply_moe_token_drop sets). A dense model has no experts to drop tokens at:
    nothing to write."""
    if not (ctx.stack.token_drop and ctx.model.is_moe):
        return []
    return [("--moe-expert-capacity-factor", "1.0"), ("--moe-pad-expert-input-to-capacity", None)]


def _mtp(ctx: _Ctx) -> list[Flag]:
    """`Stack.mtp`: Megatron-LM's --mtp-num-layers with the model's MTP depth (`ModelSpec.mtp_layers`)."""
    if not ctx.stack.mtp:
        return []
    return [("--mtp-num-layers", str(ctx.model.mtp_layers))]


def _megatron_cuda_graphs(stack: Stack) -> list[Flag]:
    """`Stack.cuda_graph_scope` as Megatron-LM d98e8a64 takes it (arguments.py): full_iteration is
    --cuda-graph-impl full_iteration (the whole step; any other scope named with it is inside it),
    the per-layer scopes --cuda-graph-impl transformer_engine --cuda-graph-modules ... ."""
    scope = stack.cuda_graph_scope
    # validate_args turns the TE RNG tracker on for graphs where Transformer Engine runs the layers or
    # the graphs, and training/models/gpt.py GPTModelConfig.finalize asserts it ("Transformer engine's
    # RNG tracker is required for cudagraphs"): written with any graph, whichever path checks
    rng = ("--te-rng-tracker", None)
    if "full_iteration" in scope:
        # arguments.py asserts "--no-check-for-nan-in-loss-and-grad should be set with
        # --cuda-graph-impl=full_iteration for training"
        return [("--cuda-graph-impl", "full_iteration"), ("--no-check-for-nan-in-loss-and-grad", None), rng]
    if scope:
        return [("--cuda-graph-impl", "transformer_engine"),
                ("--cuda-graph-modules", " ".join(module_list(scope, CUDA_GRAPH_SCOPES))), rng]  # fmt: skip
    return []


def _megatron_recompute(lay: Layout, modules: frozenset[str] = DEFAULT_RECOMPUTE_MODULES) -> list[Flag]:
    """Megatron-LM's recompute flags; `modules` (`Stack.recompute_modules`, Megatron-LM's only):
    --recompute-modules where they are not the default core_attn. No module at all recomputes
    nothing, which Megatron's nargs "+" flag cannot say: no recompute flags then."""
    if lay.recompute == Recompute.SELECTIVE and not modules:
        return []
    if lay.recompute == Recompute.SELECTIVE and modules != DEFAULT_RECOMPUTE_MODULES:
        return [("--recompute-granularity", "selective"), ("--recompute-modules", " ".join(module_list(modules)))]
    if lay.recompute == Recompute.SELECTIVE:
        return [("--recompute-granularity", "selective")]
    if lay.recompute == Recompute.FULL and lay.recompute_layers > 0:
        return [("--recompute-granularity", "full"), ("--recompute-method", "block"),
                (_kf("recompute_layers", Framework.MEGATRON), str(lay.recompute_layers))]  # fmt: skip
    if lay.recompute == Recompute.FULL:
        return [("--recompute-granularity", "full"), ("--recompute-method", "uniform"), ("--recompute-num-layers", "1")]
    return []


def _megatron_flags(ctx: _Ctx) -> tuple[list[Flag], list[str]]:
    lay, stack, fw = ctx.lay, ctx.stack, Framework.MEGATRON
    notes: list[str] = rope_scaling_notes(ctx.model)
    if lay.virtual_stages > 1 and lay.pp == 1:
        _refuse(ctx, "virtual_stages", f"{lay.virtual_stages} virtual stages need pipeline parallelism (PP > 1)")
    if not stack.tp_overlap:
        _refuse(ctx, "tp_overlap", f"Megatron-LM {MEGATRON_COMMIT[:8]} always overlaps the backward tensor-parallel "
                "collectives with the weight-gradient GEMMs; no flag turns that off")  # fmt: skip
    if stack.loss != "eager":
        _refuse(ctx, "loss", f"a {stack.loss} loss: Megatron-LM {MEGATRON_COMMIT[:8]} computes the whole logits' "
                "cross entropy with its VocabParallelCrossEntropy")  # fmt: skip
    _refuse_older_stack(ctx, f"Megatron-LM {MEGATRON_COMMIT[:8]}", repeats_kv=not stack.flash_attention)
    flags: list[Flag] = [(_kf("tp", fw), str(lay.tp)), (_kf("pp", fw), str(lay.pp))]
    flags += _megatron_split(ctx)
    flags.append((_kf("cp", fw), str(lay.cp)))
    if lay.cp > 1:
        flags.append(("--cp-comm-type", MEGATRON_CP_COMM[CpComm(lay.cp_comm)]))
    flags.append((_kf("ep", fw), str(lay.ep)))
    flags += _expert_tp(ctx)
    flags += _token_drop(ctx)
    flags += _mtp(ctx)
    flags += _megatron_cuda_graphs(stack)
    if lay.sequence_parallel and lay.tp > 1:
        flags.append(("--sequence-parallel", None))
    flags += [(_kf("micro_batch", fw), str(lay.micro_batch)), (_kf("global_batch", fw), str(lay.global_batch)),
              (_kf("seq_len", fw), str(lay.seq_len))]  # fmt: skip
    flags += megatron_model_flags(ctx.model, lay, _bind(ctx), ctx.stack.ep_dispatcher)
    flags += _megatron_recompute(lay, ctx.stack.recompute_modules)
    fsdp = lay.zero >= 2
    if fsdp:
        strategy = "optim_grads" if lay.zero == 2 else "optim_grads_params"
        flags += [("--use-megatron-fsdp", None), ("--data-parallel-sharding-strategy", strategy),
                  ("--ckpt-format", "fsdp_dtensor")]  # fmt: skip
        notes.append("# Megatron-FSDP (ZeRO-2/3): leave CUDA_DEVICE_MAX_CONNECTIONS unset or > 1, as it asserts")
    elif lay.zero == 1 or lay.offload == Offload.OPTIMIZER:
        flags.append(("--use-distributed-optimizer", None))
    if lay.offload == Offload.OPTIMIZER:
        flags += [("--optimizer-cpu-offload", None), ("--use-precision-aware-optimizer", None)]
    elif lay.offload != Offload.NONE:
        _refuse(ctx, "offload", f"offload {lay.offload}: Megatron-LM {MEGATRON_COMMIT[:8]} offloads the optimizer "
                "(--optimizer-cpu-offload), never the parameters")  # fmt: skip
    if stack.master_weights != "fp32":  # NeMo's optimizer, priced for its runs (Stack.master_weights)
        _refuse(ctx, "master_weights", f"Megatron-LM {MEGATRON_COMMIT[:8]} keeps a whole master copy (--main-params-"
                f"dtype takes fp32 or fp16); master weights kept as {stack.master_weights} are Apex's "
                "DistributedFusedAdam (NeMo's distributed_fused_adam optimizer)")  # fmt: skip
    if stack.adam_moments == "bf16":
        if fsdp or (lay.zero != 1 and lay.offload != Offload.OPTIMIZER):
            _refuse(ctx, "adam_moments", f"Megatron-LM {MEGATRON_COMMIT[:8]} keeps Adam's moments in bf16 with "
                    "--use-precision-aware-optimizer, which it allows with its distributed optimizer (ZeRO-1) only")  # fmt: skip
        if lay.offload != Offload.OPTIMIZER:
            flags.append(("--use-precision-aware-optimizer", None))
        flags += [("--exp-avg-dtype", "bf16"), ("--exp-avg-sq-dtype", "bf16")]
    if stack.tp_comm_overlap and lay.tp > 1:
        # at TP 1 there is nothing to overlap: the flag is left out (Megatron turns SP off there,
        # and arguments.py at d98e8a64 asserts "Tensor parallel communication/GEMM overlap can
        # happen only when sequence parallelism is enabled"); without SP the plan breaks the
        # `tp_comm_overlap` limit, so validate never calls it feasible
        if not lay.sequence_parallel:
            _refuse(ctx, "tp_comm_overlap", f"Megatron-LM {MEGATRON_COMMIT[:8]} overlaps TP communication with "
                    "GEMMs (--tp-comm-overlap) only with sequence parallelism")  # fmt: skip
        flags.append(("--tp-comm-overlap", None))
    flags += _megatron_a2a_overlap(ctx, lay)
    if stack.moe_router_fusion and ctx.model.is_moe:  # a dense model has no router to fuse
        flags.append(("--moe-router-fusion", None))
    if stack.moe_aux_loss and ctx.model.is_moe:
        # Megatron-LM runs the loss only with a positive coefficient (router.py is_aux_loss_enabled;
        # the default is 0.0); 1e-2 is its help text's "recommended" starting value (arguments.py)
        flags += [("--moe-router-load-balancing-type", "aux_loss"), ("--moe-aux-loss-coeff", "1e-2")]
    if lay.precision == Precision.FP16:
        flags.append(("--fp16", None))
    else:
        flags.append(("--bf16", None))
    if lay.precision == Precision.FP8:
        if stack.fp8_recipe not in MEGATRON_FP8_RECIPES:
            _refuse(ctx, "fp8_recipe", f"the {stack.fp8_recipe} recipe is torchao's; Megatron-LM {MEGATRON_COMMIT[:8]}'s "
                    f"--fp8-recipe takes {', '.join(MEGATRON_FP8_RECIPES)} (Transformer Engine)")  # fmt: skip
        flags += [("--fp8-format", "hybrid"), ("--fp8-recipe", stack.fp8_recipe)]
    flags.append(("--attention-backend", ATTENTION_BACKEND if stack.flash_attention else "unfused"))
    if stack.flash_attention:
        notes.append(ATTENTION_NOTE)
    flags += _megatron_grads(ctx, fsdp)
    if stack.dp_overlap:
        flags.append(("--overlap-grad-reduce", None))
        if lay.zero >= 1 or lay.offload == Offload.OPTIMIZER:
            flags.append(("--overlap-param-gather", None))
    if not stack.p2p_overlap:
        flags.append(("--no-overlap-p2p-communication", None))
    if not fsdp:
        notes.append(
            "# CUDA_DEVICE_MAX_CONNECTIONS=1 orders the tensor-parallel collectives before the GEMMs they overlap"
        )
    return flags, notes


def _megatron_grads(ctx: _Ctx, fsdp: bool) -> list[Flag]:
    """The gradient buffer's precision (Stack.main_grads): fp32 main grads or 2-byte ones."""
    lay, fp32 = ctx.lay, ctx.stack.main_grads == "fp32"
    if fsdp:
        low = "fp16" if lay.precision == Precision.FP16 else "bf16"
        return [("--megatron-fsdp-main-grads-dtype", "fp32" if fp32 else low)]
    out: list[Flag] = []
    if lay.offload == Offload.OPTIMIZER and not fp32:
        out.append(("--main-grads-dtype", "bf16"))
    if lay.precision == Precision.FP16:
        # fp16 accumulates and reduces gradients in fp16 unless asked for fp32
        return out + ([("--accumulate-allreduce-grads-in-fp32", None)] if fp32 else [])
    return out + ([] if fp32 else [("--grad-reduce-in-bf16", None)])


def _bind(ctx: _Ctx) -> Refuser:
    def refuse(knob: str, why: str) -> NoReturn:
        _refuse(ctx, knob, why)

    return refuse


def _emit_megatron(ctx: _Ctx) -> str:
    flags, notes = _megatron_flags(ctx)
    per, nodes = _nodes(ctx.lay.gpus, ctx.gpus_per_node)
    script = megatron_script(ctx.model)
    lines = _header(ctx, f"Megatron-LM {MEGATRON_COMMIT[:8]} ({script}): every flag below is checked against "
                         "that commit's argparse")  # fmt: skip
    lines += notes
    lines.append("# add the data, tokenizer, optimizer, checkpoint and logging flags; on several nodes give torchrun "
                 "--node_rank and --master_addr/--master_port (or --rdzv_*) per node")  # fmt: skip
    lines = _comments(lines)
    if not any(f == "--use-megatron-fsdp" for f, _ in flags):
        lines.append("export CUDA_DEVICE_MAX_CONNECTIONS=1")
    lines.append(_render_command(f"torchrun --nproc_per_node {per} --nnodes {nodes} {script}", flags))
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# DeepSpeed 0.19.8 (+ Megatron-DeepSpeed 6acc370a's training script)


def _deepspeed_zero_stage(lay: Layout) -> int:
    """The ZeRO stage DeepSpeed runs: the plan's, raised to what its offload needs (ZeRO-Offload of
    the optimizer from stage 1, of the parameters at stage 3)."""
    need = 3 if lay.offload == Offload.ALL else 1 if lay.offload == Offload.OPTIMIZER else 0
    return max(lay.zero, need)


def _deepspeed_config(ctx: _Ctx) -> dict[str, object]:
    lay, stack = ctx.lay, ctx.stack
    zero: dict[str, object] = {"stage": _deepspeed_zero_stage(lay), "overlap_comm": stack.dp_overlap}
    if lay.offload != Offload.NONE:
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    if lay.offload == Offload.ALL:
        zero["offload_param"] = {"device": "cpu", "pin_memory": True}
    if zero["stage"] == 3:  # the prefetch limit paraplan prices (`Stack.zero3_max_live_params`)
        zero["stage3_max_live_parameters"] = round(stack.zero3_max_live_params)
    low = "fp16" if lay.precision == Precision.FP16 else "bf16"
    config: dict[str, object] = {
        "train_batch_size": lay.global_batch,
        "train_micro_batch_size_per_gpu": lay.micro_batch,
        "gradient_accumulation_steps": lay.global_batch // (lay.dp * lay.micro_batch),
        "zero_optimization": zero,
    }
    if lay.precision == Precision.FP16:
        config["fp16"] = {"enabled": True, "loss_scale": 0, "initial_scale_power": 16}
    else:
        config["bf16"] = {"enabled": True}
    config["data_types"] = {"grad_accum_dtype": "fp32" if stack.main_grads == "fp32" else low}
    if stack.cpu_checkpointing:
        config["activation_checkpointing"] = {"cpu_checkpointing": True}
    return config


def _deepspeed_script_flags(ctx: _Ctx) -> list[Flag]:
    """The plan in Megatron-LM's flags (the one place the architecture is spelled), rewritten into
    Megatron-DeepSpeed's, then the fork's own: --no-pipeline-parallel at PP 1 (else its pretrain_gpt.py
    builds GPTModelPipe for DeepSpeed's pipeline engine, which asserts ZeRO stage < 2 at any PP
    degree), --zero-stage (pretrain_gpt.py builds the model under deepspeed.zero.Init iff it is 3),
    DeepSpeed's checkpointing for `Stack.cpu_checkpointing`, and --deepspeed --deepspeed_config."""
    lay, stack, fw = ctx.lay, ctx.stack, Framework.MEGATRON
    flags: list[Flag] = [(_kf("tp", fw), str(lay.tp)), (_kf("pp", fw), str(lay.pp))]
    if lay.sequence_parallel and lay.tp > 1:
        flags.append(("--sequence-parallel", None))
    flags += [(_kf("micro_batch", fw), str(lay.micro_batch)), (_kf("global_batch", fw), str(lay.global_batch)),
              (_kf("seq_len", fw), str(lay.seq_len))]  # fmt: skip
    flags += megatron_model_flags(ctx.model, lay, _bind(ctx))
    if not stack.cpu_checkpointing:
        flags += _megatron_recompute(lay)
    flags.append(("--fp16", None) if lay.precision == Precision.FP16 else ("--bf16", None))
    flags.append(("--attention-backend", ATTENTION_BACKEND if stack.flash_attention else "unfused"))
    out = to_megatron_deepspeed(flags, lambda why: _refuse(ctx, "model", why))
    if stack.cpu_checkpointing:
        # layers checkpointed by DeepSpeed's checkpointing, which moves the checkpoints to the host;
        # --checkpoint-in-cpu overrides the JSON key (`Stack.cpu_checkpointing`)
        out += [("--checkpoint-activations", None), ("--deepspeed-activation-checkpointing", None),
                ("--checkpoint-in-cpu", None)]  # fmt: skip
    if lay.offload != Offload.NONE:
        # the ZeRO-Offload optimizer: DeepSpeed's engine raises on the script's default client optimizer
        # (apex FusedAdam) with offload_optimizer (runtime/engine.py, "You are using ZeRO-Offload with a
        # client provided optimizer"); the fork's --cpu-optimizer builds DeepSpeedCPUAdam (optimizer/__init__.py)
        out.append(("--cpu-optimizer", None))
    if lay.pp == 1:
        out.append(("--no-pipeline-parallel", None))
    out += [
        ("--zero-stage", str(_deepspeed_zero_stage(lay))),
        ("--deepspeed", None),
        ("--deepspeed_config", DEEPSPEED_CONFIG_NAME),
    ]
    return out


def _emit_deepspeed(ctx: _Ctx) -> str:
    lay, stack, spec = ctx.lay, ctx.stack, FRAMEWORKS[Framework.DEEPSPEED]
    if ctx.model.is_hybrid:
        _refuse(ctx, "framework", f"{ctx.model.name} has Mamba-2 layers; the Megatron-DeepSpeed GPT script builds "
                "transformer layers only (frameworks.HYBRID)")  # fmt: skip
    if lay.virtual_stages > 1:
        _refuse(ctx, "virtual_stages", f"DeepSpeed {DEEPSPEED_VERSION}'s pipeline engine has no interleaved schedule")
    if lay.cp > 1:
        _refuse(ctx, "cp", f"DeepSpeed {DEEPSPEED_VERSION} has no ring or all-gather context parallelism (its "
                "sequence parallelism is Ulysses all-to-all, which paraplan does not model)")  # fmt: skip
    if ctx.model.is_moe and not MOE_LAYER[Framework.DEEPSPEED]:
        _refuse(ctx, "model", f"{ctx.model.name} is a mixture of experts; {MDS}'s are {DEEPSPEED_MOE_WORDS}, not "
                "the dropless Megatron-style layer paraplan prices")  # fmt: skip
    if ctx.model.norm_zero_centered and not ctx.model.layernorm:
        _refuse(ctx, "model", f"{ctx.model.name} has zero-centred RMSNorm weights; {MDS}'s --apply-layernorm-1p "
                "reaches its LayerNorm only (megatron/model/transformer.py builds RMSNorm without it)")  # fmt: skip
    if lay.precision == Precision.FP8:
        _refuse(ctx, "precision", f"DeepSpeed {DEEPSPEED_VERSION} has no FP8 training")
    if lay.recompute == Recompute.FULL and lay.recompute_layers > 0:
        _refuse(ctx, "recompute_layers", "DeepSpeed has no block method (full recompute of N layers per chunk)")
    if stack.cpu_checkpointing and lay.recompute != Recompute.FULL:
        _refuse(ctx, "cpu_checkpointing", f"recompute {lay.recompute}: DeepSpeed's cpu_checkpointing moves the "
                "checkpoints of full recompute, and there are none")  # fmt: skip
    if lay.pp > 1 and lay.zero > spec.zero_with_pp:
        _refuse(ctx, "zero", f"ZeRO-{lay.zero} with PP {lay.pp}: DeepSpeed's pipeline engine asserts ZeRO stage < 2")
    if lay.first_stage_layers or lay.last_stage_layers:
        _refuse(ctx, "first_stage_layers/last_stage_layers",
                f"first {lay.first_stage_layers} / last {lay.last_stage_layers} layers: DeepSpeed's PipelineModule "
                "partitions the layers itself (partition_method), with no per-stage layer counts")  # fmt: skip
    if not stack.tp_overlap and lay.sequence_parallel and lay.tp > 1:
        _refuse(ctx, "tp_overlap", f"{MDS}'s sequence-parallel backward always reduce-scatters under the "
                "weight-gradient GEMM (core/tensor_parallel/layers.py); no flag turns that off")  # fmt: skip
    if stack.p2p_overlap:
        _refuse(ctx, "p2p_overlap", "DeepSpeed's pipeline engine has no interleaved schedule whose sends and "
                "receives could overlap compute")  # fmt: skip
    if stack.loss != "eager":
        _refuse(ctx, "loss", f"a {stack.loss} loss: {MDS}'s training script computes the whole logits' "
                "cross entropy in eager mode")  # fmt: skip
    _refuse_older_stack(ctx, f"DeepSpeed {DEEPSPEED_VERSION}", repeats_kv=True)
    if not stack.kv_repeated and ctx.model.num_kv_heads != ctx.model.num_heads and not ctx.model.is_mla:
        _refuse(ctx, "kv_repeated", f"{MDS} repeats K and V to every query head before attention "
                "(ParallelAttention.repeat_kv); no flag keeps the K/V heads as they are")  # fmt: skip
    config = _deepspeed_config(ctx)
    per, nodes = _nodes(lay.gpus, ctx.gpus_per_node)
    lines = _header(ctx, f"DeepSpeed {DEEPSPEED_VERSION}: the JSON keys are checked against it; the training script "
                         f"is {MDS}'s pretrain_gpt.py (github.com/deepspeedai/Megatron-DeepSpeed), its flags "
                         "checked against that commit's arguments")  # fmt: skip
    lines.append(f"# DeepSpeed's JSON has no tensor or pipeline degree: the script takes them; data parallelism "
                 f"= {lay.gpus} GPUs / (TP {lay.tp} x PP {lay.pp}) = {lay.dp}")  # fmt: skip
    lines += rope_scaling_notes(ctx.model)
    lines.append("# add the data, tokenizer, optimizer and logging flags; several nodes need a hostfile (--hostfile)")
    lines = _comments(lines)
    lines.append(f"cat > {DEEPSPEED_CONFIG_NAME} <<'EOF'")
    lines.append(json.dumps(config, indent=2))
    lines.append("EOF")
    if lay.sequence_parallel and lay.tp > 1:
        # the fork's validate_args raises "Using sequence parallelism requires setting the environment
        # variable CUDA_DEVICE_MAX_CONNECTIONS to 1" (megatron/arguments.py at 6acc370a)
        lines.append("export CUDA_DEVICE_MAX_CONNECTIONS=1")
    head = f"deepspeed --num_nodes {nodes} --num_gpus {per} {MEGATRON_SCRIPT}"
    lines.append(_render_command(head, _deepspeed_script_flags(ctx)))
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# torchtitan 0.3.0


def _titan_model(ctx: _Ctx) -> tuple[str, TitanConfig | None, list[str]]:
    """(--config name, the registry config if it is one, comment lines) for the model."""
    m = ctx.model
    why: list[str] = []
    if m.is_moe or m.is_mla:
        why.append("mixture-of-experts or latent attention (torchtitan's llama3 module is dense, with GQA)")
    if m.is_hybrid:
        why.append("Mamba-2 layers (torchtitan has no Mamba model; frameworks.HYBRID)")
    swiglu = m.mlp == "gated" and m.mlp_act in (None, "silu", "swish")
    if not swiglu or m.layernorm or not m.norm_affine or m.norm_zero_centered or m.norms_per_layer != 2:
        why.append("an MLP or norm other than SwiGLU with two RMSNorms per layer")
    if m.rotary_fraction != 1.0 or m.attention_sinks:
        why.append("partial rotary embeddings or attention sinks")
    if m.learned_positions or m.linear_bias or m.has_qkv_bias or m.has_out_bias or m.has_mlp_bias:
        why.append("learned positions or linear biases")
    if m.qk_norm != "none" or m.sliding_window is not None or m.tied_embeddings or m.dropout:
        why.append("q/k norms, sliding windows, tied embeddings or dropout")
    if m.attention_chunk is not None:
        why.append("chunked attention (Llama 4)")
    if m.embed_dim not in (None, m.hidden_size) or m.embedding_norm or m.lm_head_bias or not m.final_norm:
        why.append("a non-standard embedding or head")
    if why:
        _refuse(ctx, "model", f"{m.name} has {'; '.join(why)}, which torchtitan {TORCHTITAN_VERSION}'s llama3 "
                "module cannot build")  # fmt: skip
    name, cfg = titan_config_for(m, ctx.lay.precision)
    if cfg is not None:
        extra = (
            "; its Float8LinearConverter (all linears but lm_head) makes this plan's FP8"
            if cfg.precision == Precision.FP8
            else ""
        )
        scaled = (
            "" if m.rope_scaling else "; its RoPE also scales as Llama 3.1's (by 8), which this model's config does not"
        )
        return name, cfg, [f"# --config {name}: torchtitan {TORCHTITAN_VERSION}'s registry config of this model{extra}"
                           f"{scaled}"]  # fmt: skip
    theta = m.rope_theta if m.rope_theta is not None else ROPE_THETA_DEFAULT
    dims = (f"{m.num_layers} layers, hidden {m.hidden_size}, {m.num_heads} heads, {m.num_kv_heads} KV heads, "
            f"SwiGLU width {m.ffn_hidden_size}, vocabulary {m.vocab_size}, RoPE theta {theta:g}")  # fmt: skip
    same = [c for c in TITAN_REGISTRY.values() if c.dims == _dims(m) and m.rope_theta == TITAN_ROPE_THETA]
    where = (
        f"its {same[0].name} builds this model in {same[0].precision} only (float8 comes with the config's "
        "converters, which no flag changes)"
        if same
        else f"it has no registry config for {m.name}"
    )
    comments = [
        f"# --config {name}: torchtitan {TORCHTITAN_VERSION} has no registry config of {m.name} in "
        f"{ctx.lay.precision}: {where}; register one in torchtitan/models/llama3/config_registry.py (the model "
        "belongs to the config, not to the flags):",
        f"#   Llama3Model.Config with {dims}",
    ]
    if ctx.lay.precision == Precision.FP8:
        comments.append(
            "#   and model_registry(..., converters=[Float8LinearConverter.Config(filter_fqns=['lm_head'], "
            f"recipe_name={ctx.stack.fp8_recipe!r})]): in 0.3.0 float8 is enabled only by the config's converters"
        )
    else:
        comments.append("#   without float8 converters (bf16 training)")
    return name, None, comments + rope_scaling_notes(m)


def _titan_split(ctx: _Ctx) -> list[Flag]:
    """Schedule, stages per rank and the first/last stage weights that give the evaluated split."""
    lay, layers = ctx.lay, ctx.model.num_layers
    pp, v, f, last = lay.pp, lay.virtual_stages, lay.first_stage_layers, lay.last_stage_layers
    stages = pp * v
    less_first, less_last = 0, 0
    if f or last:
        if v == 1:
            if pp == 2:
                less_first, less_last = max(0, last - f), max(0, f - last)
            else:
                middle = (layers - f - last) // (pp - 2)
                if f > middle or last > middle:
                    _refuse(ctx, "first_stage_layers/last_stage_layers",
                            f"first {f} / last {last} layers with {middle} on each middle stage: torchtitan "
                            f"{TORCHTITAN_VERSION} makes the first/last stages lighter "
                            "(pipeline_parallel_first/last_stage_less_layers), never heavier")  # fmt: skip
                less_first, less_last = middle - f, middle - last
        else:
            found = None
            for emb, loss in ((1, 1), (0, 1), (1, 0)):
                total = layers + emb + loss
                if total % stages == 0 and (f, last) == (total // pp - emb, total // pp - loss):
                    found = (emb, loss)
            if found is None:
                _refuse(
                    ctx,
                    "first_stage_layers/last_stage_layers",
                    f"first {f} / last {last} layers with {v} virtual stages: torchtitan {TORCHTITAN_VERSION} "
                    "splits interleaved chunks evenly, with the embedding and output counted as layers",
                )
            less_first, less_last = found
    flags: list[Flag] = [("--parallelism.pipeline_parallel_schedule", "1F1B" if v == 1 else "Interleaved1F1B")]
    if v > 1:
        effective = layers + less_first + less_last
        per_stage = -(-effective // stages)
        if -(-effective // per_stage) != stages:
            _refuse(ctx, "virtual_stages",
                    f"{v} virtual stages on PP {pp}: torchtitan {TORCHTITAN_VERSION} derives the stage count from "
                    f"pipeline_parallel_layers_per_stage, and no value gives {stages} stages for {effective} "
                    "layers")  # fmt: skip
        flags.append(("--parallelism.pipeline_parallel_layers_per_stage", str(per_stage)))
    flags += [("--parallelism.pipeline_parallel_first_stage_less_layers", str(less_first)),
              ("--parallelism.pipeline_parallel_last_stage_less_layers", str(less_last)),
              ("--parallelism.pipeline_parallel_microbatch_size", str(lay.micro_batch))]  # fmt: skip
    return flags


def _emit_torchtitan(ctx: _Ctx) -> str:
    lay, stack, fw = ctx.lay, ctx.stack, Framework.TORCHTITAN
    if lay.precision == Precision.FP16:
        _refuse(ctx, "precision", f"torchtitan {TORCHTITAN_VERSION} computes in bfloat16 or float32 "
                "(training.mixed_precision_param), not fp16")  # fmt: skip
    if lay.zero == 1:
        _refuse(ctx, "zero", f"torchtitan {TORCHTITAN_VERSION} has no ZeRO-1: FSDP2 shards gradients too "
                "(ZeRO-2 with fsdp_reshard_after_forward never, ZeRO-3 always)")  # fmt: skip
    if lay.zero == 0 and lay.cp > 1:
        _refuse(ctx, "zero", f"ZeRO-0 with CP {lay.cp}: torchtitan {TORCHTITAN_VERSION} always shards the parameters "
                "with FSDP over the context-parallel ranks (its fsdp mesh is dp_shard x cp)")  # fmt: skip
    if lay.recompute == Recompute.FULL and lay.recompute_layers > 0:
        _refuse(ctx, "recompute_layers", f"torchtitan {TORCHTITAN_VERSION} checkpoints every layer "
                "(activation-checkpoint:full) or none; it has no count of layers per chunk")  # fmt: skip
    if lay.offload == Offload.OPTIMIZER:
        _refuse(ctx, "offload", f"torchtitan {TORCHTITAN_VERSION} offloads parameters, gradients and optimizer "
                "states together (training.enable_cpu_offload: offload all), not the optimizer alone")  # fmt: skip
    if lay.cp > 1 and lay.cp_comm != CpComm.ALLGATHER:
        _refuse(ctx, "cp_comm", f"CP {lay.cp_comm}: torchtitan {TORCHTITAN_VERSION} has no flag for the K/V exchange; "
                "its context parallelism all-gathers K/V")  # fmt: skip
    if lay.virtual_stages > 1 and lay.pp == 1:
        _refuse(ctx, "virtual_stages", f"{lay.virtual_stages} virtual stages need pipeline parallelism (PP > 1)")
    if lay.ep > 1:
        _refuse(ctx, "ep", f"EP {lay.ep}: torchtitan {TORCHTITAN_VERSION} borrows expert-parallel ranks from FSDP "
                "and TP (experts are not tensor-parallel there), which paraplan does not model")  # fmt: skip
    if not stack.flash_attention:
        _refuse(ctx, "flash_attention", f"torchtitan {TORCHTITAN_VERSION}'s registry configs pick flash-style "
                "attention (FlexAttention/SDPA) in the model config; no flag materialises the scores")  # fmt: skip
    if not stack.dp_overlap:
        _refuse(ctx, "dp_overlap", "FSDP2 always prefetches its all-gathers and overlaps the reduce-scatters")
    if stack.main_grads != "fp32":
        _refuse(ctx, "main_grads", f"torchtitan {TORCHTITAN_VERSION} reduces gradients in float32 "
                "(training.mixed_precision_reduce has no other choice)")  # fmt: skip
    if stack.p2p_overlap:
        _refuse(ctx, "p2p_overlap", f"torchtitan {TORCHTITAN_VERSION} has no flag to overlap pipeline sends and "
                "receives with compute")  # fmt: skip
    if lay.precision == Precision.FP8 and stack.fp8_recipe not in TITAN_FP8_RECIPES:
        _refuse(ctx, "fp8_recipe", f"the {stack.fp8_recipe} recipe: torchtitan {TORCHTITAN_VERSION}'s "
                f"Float8LinearConverter takes recipe_name {' or '.join(TITAN_FP8_RECIPES)}")  # fmt: skip
    if not stack.attention_saved:
        _refuse(ctx, "attention_saved", f"torchtitan {TORCHTITAN_VERSION}'s op-level selective recompute saves "
                "the output of every SDPA backend (op_sac_save_list, since b39377f9f)")  # fmt: skip
    _refuse_older_stack(ctx, f"torchtitan {TORCHTITAN_VERSION}")
    if stack.tp_overlap and not stack.compiled:
        _refuse(ctx, "tp_overlap", f"async TP without torch.compile: torchtitan {TORCHTITAN_VERSION}'s CompileConfig "
                "raises 'Async TP requires 'model' in --compile.components and --compile.enable'")  # fmt: skip
    if stack.fused_norm:
        _refuse(ctx, "fused_norm", f"the Triton fused RMSNorm: torchtitan {TORCHTITAN_VERSION} has no norm_type "
                "fused_rmsnorm (removed in 37c4b8181, 2025-02-06)")  # fmt: skip
    if stack.loss != "chunked":
        _refuse(ctx, "loss", f"a {stack.loss} loss over the whole logits: torchtitan {TORCHTITAN_VERSION} computes "
                "the loss with ChunkedLossWrapper (loss.num_chunks 8; 1 chunk still keeps its fp32 gradient buffer), "
                "and compiling it needs compile.enable, which compiles the model too")  # fmt: skip
    config, registry, comments = _titan_model(ctx)
    if lay.dp * lay.cp == 1 or lay.zero == 0:
        replicate, shard, reshard = lay.dp, 1, None
    else:
        replicate, shard, reshard = 1, lay.dp, "never" if lay.zero == 2 else "always"
    flags: list[Flag] = [
        ("--parallelism.data_parallel_replicate_degree", str(replicate)),
        ("--parallelism.data_parallel_shard_degree", str(shard)),
    ]
    if reshard is not None:
        flags.append(("--parallelism.fsdp_reshard_after_forward", reshard))
    flags.append((_kf("tp", fw), str(lay.tp)))
    if lay.tp > 1:
        sp = (
            "--parallelism.enable_sequence_parallel"
            if lay.sequence_parallel
            else "--parallelism.no-enable-sequence-parallel"
        )
        flags.append((sp, None))
    flags.append((_kf("pp", fw), str(lay.pp)))
    if lay.pp > 1:
        flags += _titan_split(ctx)
    flags += [(_kf("cp", fw), str(lay.cp)), (_kf("ep", fw), str(lay.ep))]
    local = lay.global_batch // lay.dp if lay.pp > 1 else lay.micro_batch
    flags += [("--training.local_batch_size", str(local)), (_kf("global_batch", fw), str(lay.global_batch)),
              (_kf("seq_len", fw), str(lay.seq_len)), ("--training.mixed_precision_param", "bfloat16")]  # fmt: skip
    if lay.offload == Offload.ALL:
        flags.append(("--training.enable_cpu_offload", None))
    flags.append(TITAN_NO_CUDA_GRAPHS)
    # Stack.compiled: compile.enable (its default components compile the model and the loss);
    # async TP (tp_overlap) needs it
    flags.append(("--compile.enable" if stack.compiled else "--compile.no-enable", None))
    if stack.tp_overlap:
        flags.append(("--compile.enable_async_tensor_parallel", None))
    elif registry is None or registry.async_tp:
        flags.append(("--compile.no-enable-async-tensor-parallel", None))
    per, nodes = _nodes(lay.gpus, ctx.gpus_per_node)
    token = {Recompute.NONE: "none", Recompute.SELECTIVE: "selective", Recompute.FULL: "full"}[lay.recompute]
    lines = _header(ctx, f"torchtitan {TORCHTITAN_VERSION} (pinned: 0.3's --module/--config plus --section.field "
                         "flags; every flag is checked against its config tree)")  # fmt: skip
    lines += comments
    if lay.recompute == Recompute.SELECTIVE:
        lines.append("# activation-checkpoint:selective is 0.3.0's per-op policy (every other matmul's output saved)")
    if lay.precision == Precision.FP8:
        # components/quantization/float8.py at 4f9e9a47: Float8LinearConverter raises ImportError without
        # torchao, and with a torchao older than 0.9 (no Float8LinearConfig.from_recipe_name) only warns
        lines.append("# FP8 needs torchao 0.9 or later installed (not a dependency of the torchtitan 0.3.0 wheel): "
                     "without it the converter raises ImportError, and an older one trains in bf16 with a warning")  # fmt: skip
    lines.append(
        "# several nodes: give torchrun --rdzv_backend c10d --rdzv_endpoint HOST:PORT (see multinode_trainer.slurm)"
    )
    lines = _comments(lines)
    head = f"torchrun --nproc_per_node {per} --nnodes {nodes} -m torchtitan.train"
    flags = [("--module", "llama3"), ("--config", config), *flags]
    lines.append(_render_command(head, flags, [f"activation-checkpoint:{token}"]))
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------
# Entry point


def emit_launch(
    kind: str,
    model: ModelSpec,
    layout: Layout,
    stack: Stack | None = None,
    *,
    evaluated: EvaluatedLayout | None = None,
    gpus_per_node: int = 8,
) -> str:
    """The plan's launch configuration for `kind` (megatron, deepspeed or torchtitan), starting
    with comment lines that state the plan and, with `evaluated`, its predicted step time and
    memory. `stack` defaults to the framework's. Raises InputError naming the knob when the
    framework's flags cannot express the plan, or when the plan was evaluated for another
    framework (the emitted config must be the plan that was evaluated)."""
    if kind not in EMITTERS:
        raise InputError(f"emit {kind!r}: not one of {', '.join(EMITTERS)}")
    if str(layout.framework) != kind:
        raise InputError(
            f"cannot emit {kind} for this plan: framework -- it was evaluated for {layout.framework}, whose rules and "
            f"costs differ; give --framework {kind} to evaluate (and emit) it as a {kind} run"
        )
    ctx = _Ctx(kind, FRAMEWORKS[layout.framework].title, model, layout, stack or default_stack(layout.framework),
               evaluated, gpus_per_node)  # fmt: skip
    _refuse_unsupported_stack(ctx)
    if kind == "megatron":
        return _emit_megatron(ctx)
    if kind == "deepspeed":
        return _emit_deepspeed(ctx)
    return _emit_torchtitan(ctx)


# ---------------------------------------------------------------------------------------------
# Checks of an emitted text against the pinned schemas


def check_emitted(kind: str, text: str) -> list[str]:
    """Problems of an emitted launch text, by the pinned checkers: every Megatron-LM flag against
    d98e8a64's argparse, every torchtitan flag against 0.3.0's config tree (with --module and
    --config), every DeepSpeed key against 0.19.8 (with the batch identity at the plan's DP) and
    the DeepSpeed training script's flags against Megatron-DeepSpeed 6acc370a's argparse. Also
    reports anything the reader could not resolve."""
    from .importer import read_launch_text
    from .schema import check_deepspeed, check_megatron, check_megatron_deepspeed, check_torchtitan

    if kind not in EMITTERS:
        return [f"{kind!r} is not one of {', '.join(EMITTERS)}"]
    try:
        settings = read_launch_text(text, kind, name=f"<emitted {kind}>")  # type: ignore[arg-type]
    except InputError as exc:
        return [str(exc)]
    problems: list[str] = []
    if settings.unresolved:
        problems += [f"{k}: {v}" for k, v in settings.unresolved.items()]
    if settings.world_size is None:
        problems.append("the launcher line states no world size")
    args = list(settings.args)
    if kind == "megatron":
        problems += check_megatron(args)
    elif kind == "torchtitan":
        problems += check_torchtitan(args, require_module=True)
    else:
        problems += check_megatron_deepspeed(args)
        if settings.config is None:
            problems.append(f"no DeepSpeed config ({DEEPSPEED_CONFIG_NAME}) found")
        else:
            tp = _script_int(args, "--tensor-model-parallel-size")
            pp = _script_int(args, "--pipeline-model-parallel-size")
            world = settings.world_size or 0
            dp = world // (tp * pp) if world and world % (tp * pp) == 0 else None
            problems += check_deepspeed(settings.config, dp_world_size=dp)
    return problems


def _script_int(args: Sequence[str], flag: str) -> int:
    for i, a in enumerate(args[:-1]):
        if a == flag and args[i + 1].isdigit():
            return max(1, int(args[i + 1]))
    return 1

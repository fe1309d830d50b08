"""Megatron-DeepSpeed 6acc370a's spelling of the Megatron-LM d98e8a64 flags paraplan writes.

The DeepSpeed launch runs Megatron-DeepSpeed's ``pretrain_gpt.py`` (deepspeedai/Megatron-DeepSpeed,
``megatron/arguments.py`` at 6acc370a, `schema.MEGATRON_DEEPSPEED_COMMIT`), a fork of Megatron-LM
of 2023 whose flags kept the old names where Megatron-LM renamed them since. The architecture is
written once, in Megatron-LM's flags (`emitters.megatron_model_flags`); `to_megatron_deepspeed`
rewrites a flag list into the fork's flags and refuses any flag it has no counterpart for, and
`from_megatron_deepspeed` reads a fork's script back into Megatron-LM's flags for the importer.
Each correspondence is from the two pinned argument lists (``schemas/``) and the fork's model code
at 6acc370a:

* ``--normalization``: the fork builds LayerNorm for ``layernorm`` and RMSNorm for anything else
  (``megatron/model/transformer.py``; its scripts write ``rmsnorm``);
* grouped-query attention is ``--num-key-value-heads`` alone (no ``--group-query-attention``);
* rotary positions are ``--use-rotary-position-embeddings`` (learned absolute positions otherwise,
  none with ``--no-position-embedding``), the base ``--rotary-position-embeddings-theta`` (an int);
* flash attention is the flash-attn package's, ``--use-flash-attn-v2``; without a flash flag the
  fork runs its unfused CoreAttention (the scores materialised);
* the norm epsilon is ``--layernorm-epsilon`` for both norms.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

from paraplan.cost_models.frameworks import DEEPSPEED_MOE_WORDS

from .schema import ARG_SCHEMA_NAMES, Flag, megatron_args

__all__ = ["FLASH_FLAGS", "MDS", "MDS_UNMODELLED", "RENAMED", "from_megatron_deepspeed", "to_megatron_deepspeed"]

MDS = ARG_SCHEMA_NAMES["megatron-deepspeed"]

# Megatron-LM flag -> the fork's flag for the same setting and value
RENAMED: dict[str, str] = {
    "--norm-epsilon": "--layernorm-epsilon",
    "--rotary-base": "--rotary-position-embeddings-theta",
    "--num-query-groups": "--num-key-value-heads",
    "--moe-router-topk": "--topk",
    "--expert-model-parallel-size": "--moe-expert-parallel-size",
    # the same name, another dest (Megatron-LM's TransformerConfig layernorm_zero_centered_gamma; the
    # fork's apply_layernorm_1p, which its LayerNorm takes: model/transformer.py)
    "--apply-layernorm-1p": "--apply-layernorm-1p",
}
# Megatron-LM's --normalization values -> the fork's (megatron/model/transformer.py: `layernorm`, else RMSNorm)
_NORMS: dict[str, str] = {"LayerNorm": "layernorm", "RMSNorm": "rmsnorm"}
# --position-embedding-type -> the fork's flag (None: its default, learned absolute positions)
_POSITIONS: dict[str, str | None] = {
    "learned_absolute": None,
    "rope": "--use-rotary-position-embeddings",
    "none": "--no-position-embedding",
}
FLASH_FLAG = "--use-flash-attn-v2"
# The fork's flash-attention flags (each runs a flash-attn kernel: v1, v2, Triton, DeepSpeed's builder)
FLASH_FLAGS: frozenset[str] = frozenset(
    {"--use-flash-attn", "--use-flash-attn-v1", FLASH_FLAG, "--use-flash-attn-triton", "--use-flash-attn-builder"}
)
# Megatron-LM flags that the fork's flags imply or that say what it does anyway
_IMPLIED: frozenset[str] = frozenset({"--group-query-attention"})
# The fork's flags that change what a step costs and that paraplan does not model (the importer names
# them where they are set): its MoE is DeepSpeed-MoE (megatron/model/transformer.py ParallelTransformerLayer
# builds deepspeed.moe.layer.MoE, on every --expert-interval-th layer, default 2; frameworks.MOE_LAYER)
MDS_UNMODELLED: dict[str, str] = {
    "--num-experts": DEEPSPEED_MOE_WORDS,
    "--ds-sequence-parallel-size": "DeepSpeed-Ulysses sequence parallelism",
    "--partition-activations": "checkpointed activations partitioned over TP",
    "--fp8-hybrid": "FP8 through Transformer Engine",
    "--fp8-e4m3": "FP8 through Transformer Engine",
    "--checkpoint-num-layers": "layers checkpointed in groups (the pipeline engine's activation_checkpoint_interval)",
    "--distribute-checkpointed-activations": "checkpointed activations partitioned over TP",
    "--enable-zbh1-pipeline": "the zero-bubble (ZB-H1) pipeline schedule",
    "--random-ltd": "random layer-wise token dropping",
    "--kd": "knowledge distillation (a teacher model's forward)",
    "--memory-centric-tiled-linear": "tiled linear layers",
}


def to_megatron_deepspeed(flags: Sequence[Flag], no: Callable[[str], NoReturn]) -> list[Flag]:
    """`flags` (Megatron-LM d98e8a64 spelling) as the fork's flags; `no(why)` for a flag it lacks."""
    theirs = megatron_args("megatron-deepspeed")
    ours = megatron_args()
    out: list[Flag] = []
    for flag, value in flags:
        if flag in _IMPLIED:
            continue
        if flag in RENAMED:
            if flag == "--rotary-base" and value is not None and not value.isdigit():
                no(f"rotary base {value}: {MDS}'s --rotary-position-embeddings-theta is an int")
            out.append((RENAMED[flag], value))
        elif flag == "--normalization" and value in _NORMS:
            out.append((flag, _NORMS[value]))
        elif flag == "--position-embedding-type" and value in _POSITIONS:
            written = _POSITIONS[value]
            if written is not None:
                out.append((written, None))
        elif flag == "--attention-backend":
            if value != "unfused":
                out.append((FLASH_FLAG, None))
        elif flag in theirs and flag in ours and theirs[flag].dest == ours[flag].dest:
            out.append((flag, value))
        else:
            shown = flag if value is None else f"{flag} {value}"
            no(f"{MDS} has no counterpart of Megatron-LM's {shown}")
    return out


def from_megatron_deepspeed(script: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str], list[str]]:
    """A fork's script flags (flag as written -> value) in Megatron-LM's spelling, with the fork's
    defaults that differ from Megatron-LM's made explicit (positions, attention kernel); the fork's
    flag each Megatron-LM flag came from; and a note on the attention kernel. Flags of neither
    list pass through unchanged."""
    back = {v: k for k, v in RENAMED.items()}
    out: dict[str, Any] = {}
    origin: dict[str, str] = {}
    notes: list[str] = []
    flash = [f for f in script if f in FLASH_FLAGS]
    for flag, value in script.items():
        if flag in back:
            out[back[flag]] = value
            origin[back[flag]] = flag
            if flag == "--num-key-value-heads":
                out["--group-query-attention"] = True
                origin["--group-query-attention"] = flag
        elif flag == "--normalization":
            out[flag] = "LayerNorm" if value == "layernorm" else "RMSNorm"
        elif flag == "--num-experts" and isinstance(value, list) and len(value) == 1:
            out[flag] = value[0]  # one count for every MoE layer (nargs "+": one per expert-interval group)
        elif flag in FLASH_FLAGS or flag in _POSITIONS.values():
            continue
        else:
            out[flag] = value
    # the positions the fork's flags give (--no-position-embedding first), else its learned ones
    given = [(kind, flag) for kind, flag in reversed(_POSITIONS.items()) if flag is not None and flag in script]
    out["--position-embedding-type"] = given[0][0] if given else "learned_absolute"
    if given:
        origin["--position-embedding-type"] = given[0][1]
    out["--attention-backend"] = "flash" if flash else "unfused"
    if flash:
        origin["--attention-backend"] = flash[0]
    notes.append(
        f"{' '.join(flash)}: flash attention (the flash-attn package)"
        if flash
        else f"no --use-flash-attn* flag: {MDS} runs its unfused attention (the s x s scores stored)"
    )
    return out, origin, notes

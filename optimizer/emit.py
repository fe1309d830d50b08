"""Launch arguments for a layout: Megatron-LM flags, a DeepSpeed config, a torchtitan section.

Names follow each project's own arguments: Megatron-LM `megatron/training/arguments.py`,
DeepSpeed's config JSON (`zero_optimization`, `train_micro_batch_size_per_gpu`, ...), and
torchtitan's job config (`[parallelism]`, `[training]`, `[activation_checkpoint]`).
"""

from __future__ import annotations

import json
import math

from paraplan.cost_models.layout import Layout, Precision, Recompute
from paraplan.cost_models.models import ModelSpec

EMITTERS = ("megatron", "deepspeed", "torchtitan")


def _pipeline_split_args(model: ModelSpec, lay: Layout) -> list[str]:
    layers, pp, v = model.num_layers, lay.pp, lay.virtual_stages
    if pp == 1:
        return []
    if layers % (pp * v) == 0:
        return [f"--num-layers-per-virtual-pipeline-stage {layers // (pp * v)}"] if v > 1 else []
    per_stage = math.ceil(layers / pp)
    rest = layers - (pp - 2) * per_stage
    if v == 1 and pp > 2 and rest >= 2:
        first = rest // 2
        return [
            f"--decoder-first-pipeline-num-layers {first}",
            f"--decoder-last-pipeline-num-layers {rest - first}",
        ]
    chunk = math.ceil(layers / (pp * v))
    return [
        f"# uneven split: {layers} layers over {pp * v} chunks of <= {chunk}; "
        "describe it with --pipeline-model-parallel-layout"
    ]


def megatron_args(model: ModelSpec, lay: Layout, flash_attention: bool = True) -> str:
    args = [
        f"--tensor-model-parallel-size {lay.tp}",
        f"--pipeline-model-parallel-size {lay.pp}",
        f"--context-parallel-size {lay.cp}",
        f"--expert-model-parallel-size {lay.ep}",
        f"--micro-batch-size {lay.micro_batch}",
        f"--global-batch-size {lay.global_batch}",
        f"--seq-length {lay.seq_len}",
        f"--num-layers {model.num_layers}",
    ]
    args += _pipeline_split_args(model, lay)
    if lay.sequence_parallel and lay.tp > 1:
        args.append("--sequence-parallel")
    if lay.recompute == Recompute.FULL and lay.recompute_layers > 0:
        args += [
            "--recompute-granularity full",
            "--recompute-method block",
            f"--recompute-num-layers {lay.recompute_layers}",
        ]
    elif lay.recompute == Recompute.FULL:
        args += ["--recompute-granularity full", "--recompute-method uniform", "--recompute-num-layers 1"]
    elif lay.recompute == Recompute.SELECTIVE:
        args.append("--recompute-granularity selective")
    if lay.zero >= 1:
        args += ["--use-distributed-optimizer", "--overlap-param-gather"]
    args.append("--overlap-grad-reduce")
    if flash_attention:
        args.append("--use-flash-attn")
    args += {Precision.BF16: ["--bf16"], Precision.FP16: ["--fp16"], Precision.FP8: ["--bf16", "--fp8-format hybrid"]}[
        lay.precision
    ]
    comments = [a for a in args if a.startswith("#")]
    flags = [a for a in args if not a.startswith("#")]
    return "\n".join([*comments, " \\\n".join(flags)])


def deepspeed_config(model: ModelSpec, lay: Layout) -> str:
    accumulation = lay.global_batch // (lay.dp * lay.micro_batch)
    config: dict[str, object] = {
        "train_batch_size": lay.global_batch,
        "train_micro_batch_size_per_gpu": lay.micro_batch,
        "gradient_accumulation_steps": accumulation,
        "zero_optimization": {
            "stage": lay.zero,
            "overlap_comm": True,
            "contiguous_gradients": True,
            "reduce_scatter": True,
        },
        "bf16": {"enabled": lay.precision in (Precision.BF16, Precision.FP8)},
        "fp16": {"enabled": lay.precision == Precision.FP16, "loss_scale": 0, "initial_scale_power": 16},
        "gradient_clipping": 1.0,
        "activation_checkpointing": {
            "partition_activations": lay.recompute == Recompute.FULL and lay.tp > 1,
            "contiguous_memory_optimization": False,
        },
        "paraplan": {
            "note": "TP, PP, CP and EP are set in the model code (Megatron-DeepSpeed / PipelineModule)",
            "tensor_parallel": lay.tp,
            "pipeline_parallel": lay.pp,
            "context_parallel": lay.cp,
            "expert_parallel": lay.ep,
            "data_parallel": lay.dp,
            "recompute": str(lay.recompute),
        },
    }
    return json.dumps(config, indent=2)


def torchtitan_toml(model: ModelSpec, lay: Layout) -> str:
    shard = lay.dp if lay.zero >= 1 else 1
    replicate = 1 if lay.zero >= 1 else lay.dp
    schedule = "Interleaved1F1B" if lay.virtual_stages > 1 else "1F1B"
    mode = str(lay.recompute)
    lines = [
        "[parallelism]",
        f"data_parallel_replicate_degree = {replicate}",
        f"data_parallel_shard_degree = {shard}  # FSDP shards weights too (ZeRO-3 style)",
        f"tensor_parallel_degree = {lay.tp}",
        f"pipeline_parallel_degree = {lay.pp}",
        f'pipeline_parallel_schedule = "{schedule}"',
        f"pipeline_parallel_microbatch_size = {lay.micro_batch}",
        f"context_parallel_degree = {lay.cp}",
        f"expert_parallel_degree = {lay.ep}",
        "",
        "[training]",
        f"global_batch_size = {lay.global_batch}",
        f"local_batch_size = {lay.global_batch // lay.dp}",
        f"seq_len = {lay.seq_len}",
        f'mixed_precision_param = "{"float16" if lay.precision == Precision.FP16 else "bfloat16"}"',
        "",
        "[activation_checkpoint]",
        f'mode = "{mode}"',
    ]
    if lay.precision == Precision.FP8:
        lines += ["", "[float8]", "enable_fsdp_float8_all_gather = true"]
    return "\n".join(lines)


def emit_launch(kind: str, model: ModelSpec, lay: Layout, flash_attention: bool = True) -> str:
    if kind == "megatron":
        return megatron_args(model, lay, flash_attention)
    if kind == "deepspeed":
        return deepspeed_config(model, lay)
    return torchtitan_toml(model, lay)

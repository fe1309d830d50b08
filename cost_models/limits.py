"""The hard limits a layout must meet, each as a vectorized check and a sentence with figures.

Divisibility rules are Megatron-LM's (`megatron/training/arguments.py`, `parallel_state.py`):
TP divides the attention heads and the KV groups; every pipeline chunk (PP x virtual stages of
them) holds at least one layer -- uneven splits are allowed, see `memory.layers_per_stage` --
and the interleaved schedule needs the micro-batch count to be a multiple of PP; the global
batch is DP x micro-batch x an integer; context parallelism splits the sequence into 2*CP
chunks for load balance under the causal mask; EP divides the experts and the DP x CP ranks it
is carved from. TP is kept inside one server: its per-layer collectives sit on the
critical path and would otherwise cross the network. FP8 needs FP8 tensor cores. ZeRO-2 or 3 with
pipeline parallelism is supported by neither Megatron-LM nor DeepSpeed (ZeRO-2 and 3
reduce gradients every micro-batch, which DeepSpeed's pipeline engine forbids; Megatron-LM's
distributed optimizer is stage 1).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import numpy as np

from paraplan.cost_models.layout import PRECISIONS, BoolArray, Layout, Layouts
from paraplan.cost_models.memory import MEMORY_TERMS, MemoryBreakdown
from paraplan.cost_models.models import ModelSpec
from paraplan.hardware_specs.schema import Cluster

if TYPE_CHECKING:
    from paraplan.cost_models.evaluate import Evaluation

GB = 1e9
Message = Callable[["Evaluation", int, Layout], str]


def limit_checks(
    model: ModelSpec, cluster: Cluster, lay: Layouts, memory: MemoryBreakdown, usable_bytes: float
) -> dict[str, BoolArray]:
    """Name -> mask of candidates that violate that limit."""
    per_node = cluster.gpus_per_node
    v = lay.virtual_stages
    m = lay.global_batch // np.maximum(lay.dp * lay.micro_batch, 1)
    return {
        "heads": model.num_heads % lay.tp != 0,
        "kv_heads": model.num_kv_heads % lay.tp != 0,
        "node": (lay.tp > per_node) | (per_node % lay.tp != 0),
        "layers": lay.pp > model.num_layers,
        "virtual": (v > 1) & ((lay.pp == 1) | (lay.pp * v > model.num_layers) | (m % lay.pp != 0)),
        "batch": lay.global_batch % (lay.dp * lay.micro_batch) != 0,
        "sequence": (lay.cp > 1) & (lay.seq_len % (2 * lay.cp) != 0),
        "experts": (model.num_experts % lay.ep != 0) | ((lay.dp * lay.cp) % lay.ep != 0),
        "fp8": (lay.precision == PRECISIONS.index("fp8")) & (cluster.gpu.peak_fp8_flops is None),
        "zero_pp": (lay.zero >= 2) & (lay.pp > 1),
        "memory": memory.total > usable_bytes,
    }


def _memory(ev: Evaluation, i: int, lay: Layout) -> str:
    total = float(ev.memory.total[i])
    largest = max(MEMORY_TERMS, key=lambda t: float(getattr(ev.memory, t)[i]))
    headroom = ""
    if ev.usable_bytes < ev.capacity_bytes:
        headroom = f" (capacity {ev.capacity_bytes / GB:.1f} GB less the headroom)"
    return (
        f"memory {total / GB:.1f} GB on the most loaded GPU exceeds the usable "
        f"{ev.usable_bytes / GB:.1f} GB{headroom} by {(total - ev.usable_bytes) / GB:.1f} GB; "
        f"largest term: {largest} {float(getattr(ev.memory, largest)[i]) / GB:.1f} GB"
    )


def _virtual(ev: Evaluation, i: int, lay: Layout) -> str:
    if lay.pp == 1:
        return f"virtual stages {lay.virtual_stages} need pipeline parallelism (PP > 1)"
    m = lay.global_batch // (lay.dp * lay.micro_batch)
    if lay.pp * lay.virtual_stages > ev.model.num_layers:
        return (
            f"PP {lay.pp} x {lay.virtual_stages} virtual stages = {lay.pp * lay.virtual_stages} chunks "
            f"exceed the {ev.model.num_layers} layers"
        )
    return (
        f"the interleaved schedule needs the micro-batch count ({m}) to be a multiple of "
        f"PP {lay.pp}"
    )


def _experts(ev: Evaluation, i: int, lay: Layout) -> str:
    if ev.model.num_experts % lay.ep:
        return f"EP {lay.ep} does not divide the {ev.model.num_experts} experts"
    return f"EP {lay.ep} does not divide DP x CP = {lay.dp * lay.cp}, the ranks it is carved from"


MESSAGES: dict[str, Message] = {
    "heads": lambda ev, i, lay: f"TP {lay.tp} does not divide the {ev.model.num_heads} attention heads",
    "kv_heads": lambda ev, i, lay: f"TP {lay.tp} does not divide the {ev.model.num_kv_heads} KV heads",
    "node": lambda ev, i, lay: (
        f"TP {lay.tp} does not fit the {ev.cluster.gpus_per_node}-GPU node: its per-layer "
        "collectives would cross the network"
    ),
    "layers": lambda ev, i, lay: f"PP {lay.pp} exceeds the {ev.model.num_layers} layers",
    "virtual": _virtual,
    "batch": lambda ev, i, lay: (
        f"global batch {lay.global_batch} is not divisible by DP {lay.dp} x micro-batch {lay.micro_batch}"
    ),
    "sequence": lambda ev, i, lay: (
        f"sequence length {lay.seq_len} is not divisible by 2 x CP = {2 * lay.cp} (load-balanced causal chunks)"
    ),
    "experts": _experts,
    "fp8": lambda ev, i, lay: f"{ev.cluster.gpu.name} has no FP8 tensor cores",
    "zero_pp": lambda ev, i, lay: (
        f"ZeRO-{lay.zero} with pipeline parallelism is supported by neither Megatron-LM nor DeepSpeed"
    ),
    "memory": _memory,
}

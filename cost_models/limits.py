"""The hard limits a layout must meet, each a vectorized check with a sentence that has figures.

Divisibility rules are Megatron-LM's (`megatron/training/arguments.py`, `parallel_state.py`),
which the other frameworks share: TP divides the attention heads and the KV groups; every
pipeline chunk (PP x virtual stages of them) holds at least one layer (uneven splits are
allowed, see `memory.layers_per_stage`); the interleaved schedule needs the micro-batch count to
be a multiple of PP; the global batch is DP x micro-batch x an integer; context parallelism
splits the sequence into 2*CP chunks for load balance under the causal mask; EP divides the
experts and the DP x CP ranks it is carved from. FP8 needs FP8 tensor cores. The framework's own
rules come from `frameworks`: "framework_precision" (the precisions it trains in, read from the
settings alone) and "framework" (the rest, in one sentence naming what it cannot run).

Each limit names the knobs it reads: the search applies it as soon as those are enumerated, and
drops the candidates that break it, unless every candidate does (then they are kept and the
violation reported, which is how `validate` explains a plan it cannot run). `REDUNDANT` lists
values of a free knob that the search leaves out: values that change nothing (ZeRO without data
parallelism, sequence parallelism without TP, ...) and expert parallelism that the layout's
framework runs otherwise than priced (torchtitan's: `frameworks.EXPERT_PARALLEL`); a user who gives
one is not wrong.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from paraplan.cost_models import frameworks
from paraplan.cost_models.candidates import BoolArray, Layouts
from paraplan.cost_models.layout import CpComm, Framework, Layout, Offload, Precision, Recompute
from paraplan.cost_models.models import ModelSpec
from paraplan.cost_models.stack import Stack
from paraplan.cost_models.stages import split_valid
from paraplan.cost_models.units import GB, memory_text
from paraplan.hardware_specs.schema import Cluster

if TYPE_CHECKING:
    from paraplan.cost_models.evaluate import Evaluation


@dataclass(frozen=True)
class Target:
    """What the limits depend on besides the layout."""

    model: ModelSpec
    cluster: Cluster
    stack: Stack = field(default_factory=Stack)


@dataclass(frozen=True)
class Limit:
    name: str
    knobs: tuple[str, ...]  # the layout fields it reads
    violated: Callable[[Target, Layouts], BoolArray]
    message: Callable[[Target, Layout], str]


def _micro_batches(lay: Layouts) -> np.ndarray:
    return np.asarray(lay.global_batch // np.maximum(lay.dp * lay.micro_batch, 1))


def _max_chunks(t: Target, lay: Layouts) -> np.ndarray:
    """Model chunks a pipeline can hold: one layer each at least, except that an uneven split's
    lighter first (last) stage may give a chunk to the embedding (the loss) alone -- NeMo's
    embedding-and-loss accounting, `stages` module docstring."""
    extra = (lay.first_stage_layers > 0).astype(np.int64) + (lay.last_stage_layers > 0).astype(np.int64)
    return np.asarray(t.model.num_layers + extra)


def _virtual(t: Target, lay: Layouts) -> BoolArray:
    v = lay.virtual_stages
    return np.asarray(
        (v > 1) & ((lay.pp == 1) | (lay.pp * v > _max_chunks(t, lay)) | (_micro_batches(lay) % lay.pp != 0))
    )


def _virtual_words(t: Target, lay: Layout) -> str:
    if lay.pp == 1:
        return f"virtual stages {lay.virtual_stages} need pipeline parallelism (PP > 1)"
    if lay.pp * lay.virtual_stages > int(_max_chunks(t, Layouts.of([lay]))[0]):
        return (
            f"PP {lay.pp} x {lay.virtual_stages} virtual stages = {lay.pp * lay.virtual_stages} chunks "
            f"exceed the {t.model.num_layers} layers"
        )
    return f"the interleaved schedule needs the micro-batch count ({lay.micro_batches}) to be a multiple of PP {lay.pp}"


def _experts_words(t: Target, lay: Layout) -> str:
    if not t.model.is_moe:
        return f"EP {lay.ep} needs a mixture-of-experts model; {t.model.name} is dense"
    if t.model.num_experts % lay.ep:
        return f"EP {lay.ep} does not divide the {t.model.num_experts} experts"
    etp = lay.expert_tp or lay.tp
    if etp > lay.tp or lay.tp % etp:
        return f"expert TP {etp} must divide TP {lay.tp}"
    ranks = lay.tp * lay.dp * lay.cp
    return f"EP {lay.ep} x expert TP {etp} does not divide TP x DP x CP = {ranks}, the ranks experts are carved from"


def _stages_words(t: Target, lay: Layout) -> str:
    f, last, layers = lay.first_stage_layers, lay.last_stage_layers, t.model.num_layers
    if lay.pp == 1:
        return "first/last stage layer counts need pipeline parallelism (PP > 1)"
    if (f == 0) != (last == 0):  # one end given alone: the other stages share the rest (stages.completed_end)
        end, given = ("first", f) if f else ("last", last)
        if given >= layers:
            return f"the {end} stage's {given} layers leave none for the other stages (the model has {layers})"
        return (f"the {layers} layers less the {end} stage's {given} do not split evenly over the other "
                f"{lay.pp - 1} stages")  # fmt: skip
    if lay.pp == 2:
        return f"first {f} + last {last} stage layers must add up to the {layers} layers with PP 2"
    return f"the {layers} layers less first {f} and last {last} do not split evenly over the {lay.pp - 2} middle stages"


def _framework(t: Target, lay: Layouts) -> BoolArray:
    return np.asarray(
        frameworks.even_split_needs_divisor(lay, t.model.num_layers)
        | frameworks.zero_unsupported(lay)
        | frameworks.zero_with_pp(lay)
        | frameworks.interleaved_unsupported(lay)
        | frameworks.cp_unsupported(lay)
        | frameworks.offload_unsupported(lay)
        | frameworks.uneven_unsupported(lay)
        | frameworks.cp_unsharded(lay)
        | frameworks.block_recompute_unsupported(lay, t.stack)
    )


def _a2a_overlap(t: Target, lay: Layouts) -> BoolArray:
    if not t.stack.moe_a2a_overlap:  # the common case: no requirement to check
        return np.zeros(len(lay), dtype=bool)
    return frameworks.a2a_overlap_unsupported(lay, t.model.is_moe, t.stack.recompute_modules)


def _a2a_overlap_words(t: Target, lay: Layout) -> str:
    reasons = frameworks.a2a_overlap_reasons(lay, t.model.is_moe, t.stack.recompute_modules)
    return f"moe-a2a-overlap (Megatron-LM's --overlap-moe-expert-parallel-comm): {'; '.join(reasons)}"


def _hybrid(t: Target, lay: Layouts) -> BoolArray:
    """A hybrid Mamba-2 model (`ModelSpec.layer_pattern`) on a framework without one, or with
    context parallelism, which paraplan does not price for Mamba layers (Megatron-LM's
    MambaContextParallel exchanges heads by all-to-all around the scan)."""
    if not t.model.is_hybrid:
        return np.zeros(len(lay), dtype=bool)
    return np.asarray(frameworks.hybrid_unsupported(lay) | (lay.cp > 1))


def _hybrid_words(t: Target, lay: Layout) -> str:
    fs = frameworks.spec(lay.framework)
    if not fs.hybrid:
        return (f"{t.model.name} has Mamba-2 layers, which {fs.title} {fs.version} cannot train (Megatron-LM's "
                "hybrid model does)")  # fmt: skip
    return f"context parallelism (CP {lay.cp}) of Mamba-2 layers is not modelled"


def _mamba_tp(t: Target, lay: Layouts) -> BoolArray:
    """Megatron-LM's MambaMixer asserts TP divides the Mamba heads and groups (mamba_mixer.py)."""
    m = t.model
    if not m.mamba_heads:
        return np.zeros(len(lay), dtype=bool)
    return np.asarray((m.mamba_heads % lay.tp != 0) | (m.mamba_groups % lay.tp != 0))


def _cpu_checkpointing(t: Target, lay: Layouts) -> BoolArray:
    if not t.stack.cpu_checkpointing:
        return np.zeros(len(lay), dtype=bool)
    return np.asarray(lay.recompute != Recompute.FULL)


def _tp_comm_overlap(t: Target, lay: Layouts) -> BoolArray:
    """Transformer Engine's userbuffers split the sequence-parallel collectives: Megatron-LM's
    arguments.py at d98e8a64 asserts "Tensor parallel communication/GEMM overlap can happen only
    when sequence parallelism is enabled". At TP 1 there is nothing to overlap (the setting is
    priced as off and the launch config leaves the flag out)."""
    if not t.stack.tp_comm_overlap:
        return np.zeros(len(lay), dtype=bool)
    return np.asarray((lay.framework == Framework.MEGATRON) & (lay.tp > 1) & (lay.sequence_parallel == 0))


def _bf16_moments(t: Target, lay: Layouts) -> BoolArray:
    """Megatron-LM keeps Adam's moments in bf16 through its precision-aware optimizer, which it
    allows with the distributed optimizer only (megatron/core/optimizer/__init__.py at d98e8a64:
    "--use-precision-aware-optimizer only supported with distributed optimizer"), i.e. ZeRO-1
    here, or with the optimizer offloaded to the host (--optimizer-cpu-offload runs on the same
    distributed optimizer and code path). Megatron-FSDP (ZeRO-2/3) takes neither."""
    if t.stack.adam_moments != "bf16":
        return np.zeros(len(lay), dtype=bool)
    allowed = (lay.zero == 1) | ((lay.zero < 2) & (lay.offload == Offload.OPTIMIZER))
    return np.asarray((lay.framework == Framework.MEGATRON) & ~allowed)


def _graphed_full_recompute(t: Target, lay: Layouts) -> BoolArray:
    """Megatron-LM d98e8a64 transformer_config.py `__post_init__`: "full recompute is only
    supported with full iteration CUDA graph": per-layer graphs (`Stack.cuda_graph_scope` other
    than full_iteration) cannot replay a layer whose forward runs again in the backward."""
    scope = t.stack.cuda_graph_scope
    if not scope or "full_iteration" in scope:
        return np.zeros(len(lay), dtype=bool)
    return np.asarray((lay.framework == Framework.MEGATRON) & (lay.recompute == Recompute.FULL))


LIMITS: tuple[Limit, ...] = (
    Limit("heads", ("tp",), lambda t, x: np.asarray(t.model.num_heads % x.tp != 0),
          lambda t, lay: f"TP {lay.tp} does not divide the {t.model.num_heads} attention heads"),
    Limit("kv_heads", ("tp",), lambda t, x: np.asarray(t.model.num_kv_heads % x.tp != 0),
          lambda t, lay: f"TP {lay.tp} does not divide the {t.model.num_kv_heads} KV heads"),
    Limit("layers", ("pp",), lambda t, x: np.asarray(x.pp > t.model.num_layers),
          lambda t, lay: f"PP {lay.pp} exceeds the {t.model.num_layers} layers"),
    Limit("sequence", ("cp", "seq_len"), lambda t, x: np.asarray((x.cp > 1) & (x.seq_len % (2 * x.cp) != 0)),
          lambda t, lay: f"sequence length {lay.seq_len} is not divisible by 2 x CP = {2 * lay.cp} "
                         "(load-balanced causal chunks)"),
    Limit("experts", ("ep", "dp", "cp", "tp", "expert_tp"),
          lambda t, x: np.asarray((t.model.num_experts % x.ep != 0) | ((x.tp * x.dp * x.cp) % (x.ep * x.etp) != 0)
                                  | (x.etp > x.tp) | (x.tp % x.etp != 0)), _experts_words),
    Limit("batch", ("global_batch", "dp", "micro_batch"),
          lambda t, x: np.asarray(x.global_batch % (x.dp * x.micro_batch) != 0),
          lambda t, lay: f"global batch {lay.global_batch} is not divisible by DP {lay.dp} x micro-batch "
                         f"{lay.micro_batch}"),
    Limit("virtual", ("pp", "virtual_stages", "global_batch", "dp", "micro_batch", "first_stage_layers",
                      "last_stage_layers"), _virtual, _virtual_words),
    Limit("recompute_layers", ("recompute", "recompute_layers"),
          lambda t, x: np.asarray((x.recompute_layers > 0) & (x.recompute != Recompute.FULL)),
          lambda t, lay: f"recompute_layers {lay.recompute_layers} needs full recompute, not {lay.recompute}"),
    Limit("stages", ("pp", "virtual_stages", "first_stage_layers", "last_stage_layers"),
          lambda t, x: np.asarray(split_valid(t.model, x) == 0), _stages_words),
    Limit("fp8", ("precision",),
          lambda t, x: np.asarray((x.precision == Precision.FP8) & (t.cluster.gpu.peak_fp8_flops is None)),
          lambda t, lay: f"{t.cluster.gpu.name} has no FP8 tensor cores"),
    # apart from the framework's other rules: it reads the settings alone, so a question whose
    # precision its framework cannot run is known infeasible before any knob is enumerated (`space`)
    Limit("framework_precision", ("framework", "precision"),
          lambda t, x: frameworks.precision_unsupported(x),
          lambda t, lay: frameworks.precision_words(lay)),
    Limit("framework", ("framework", "zero", "pp", "virtual_stages", "cp", "cp_comm", "offload",
                        "recompute", "recompute_layers", "first_stage_layers", "last_stage_layers"), _framework,
          lambda t, lay: frameworks.unsupported_words(lay, t.model.num_layers, t.stack)),
    Limit("a2a_overlap", ("framework", "ep", "dp", "cp", "tp", "expert_tp", "pp", "virtual_stages", "recompute"),
          _a2a_overlap, _a2a_overlap_words),
    Limit("tp_comm_overlap", ("framework", "tp", "sequence_parallel"), _tp_comm_overlap,
          lambda t, lay: f"tp-comm-overlap (Megatron-LM's --tp-comm-overlap) needs sequence parallelism at TP {lay.tp} "
                         "(Megatron-LM asserts it)"),
    Limit("adam_moments", ("framework", "zero", "offload"), _bf16_moments,
          lambda t, lay: f"adam-moments bf16 (Megatron-LM's precision-aware optimizer) needs its distributed "
                         f"optimizer (ZeRO-1) or the optimizer offloaded, not ZeRO-{lay.zero}"),
    Limit("cuda_graph_recompute", ("framework", "recompute"), _graphed_full_recompute,
          lambda t, lay: "full recompute with per-layer CUDA graphs (cuda-graph-scope): Megatron-LM supports it with "
                         "full_iteration graphs only"),
    Limit("hybrid", ("framework", "cp"), _hybrid, _hybrid_words),
    Limit("mamba_heads", ("tp",), _mamba_tp,
          lambda t, lay: f"TP {lay.tp} does not divide the {t.model.mamba_heads} Mamba heads and "
                         f"{t.model.mamba_groups} groups"),
    Limit("cpu_checkpointing", ("recompute",), _cpu_checkpointing,
          lambda t, lay: f"cpu-checkpointing moves the checkpoints of full recompute to the host; recompute "
                         f"{lay.recompute} keeps none"),
)  # fmt: skip

LIMIT_NAMES = (*(lim.name for lim in LIMITS), "memory", "host")
BY_NAME = {lim.name: lim for lim in LIMITS}


def _chunk(t: Target, lay: Layouts) -> np.ndarray:
    return np.asarray(-(-t.model.num_layers // (lay.pp * lay.virtual_stages)))


# knob -> (the knobs the test reads, rows where a free knob's value is a redundant variant)
REDUNDANT: dict[str, tuple[tuple[str, ...], Callable[[Target, Layouts], BoolArray]]] = {
    "zero": (("dp", "cp"), lambda t, x: np.asarray((x.zero > 0) & (x.dp * x.cp == 1))),
    "sequence_parallel": (("tp",), lambda t, x: np.asarray((x.sequence_parallel == 1) & (x.tp == 1))),
    "virtual_stages": (("pp",), lambda t, x: np.asarray((x.virtual_stages > 1) & (x.pp == 1))),
    "recompute_layers": (("recompute", "pp", "virtual_stages"),
                         lambda t, x: np.asarray(((x.recompute != Recompute.FULL) & (x.recompute_layers > 0))
                                                 | (x.recompute_layers >= _chunk(t, x)))),
    "cp_comm": (("cp",), lambda t, x: np.asarray((x.cp == 1) & (x.cp_comm != CpComm.RING))),
    "expert_tp": (("tp",), lambda t, x: np.asarray((x.expert_tp > 0) & ((not t.model.is_moe) | (x.expert_tp >= x.tp)))),
    # not redundant but priced only approximately, and not emitted (`frameworks.EXPERT_PARALLEL`)
    "ep": (("framework",), lambda t, x: frameworks.ep_approximate(x)),
}  # fmt: skip


def limit_checks(target: Target, lay: Layouts) -> dict[str, BoolArray]:
    """Name -> mask of the candidates that violate that limit (all but memory)."""
    return {lim.name: lim.violated(target, lay) for lim in LIMITS}


def host_message(ev: Evaluation, i: int) -> str:
    cluster = ev.cluster
    if cluster.host is None:
        return f"offload needs host figures: hardware {cluster.name} has no [host] table (memory, CPU Adam rate)"
    per_gpu = float(ev.host_bytes[i])
    need = per_gpu * cluster.gpus_per_node
    return (
        f"offloaded state {need / GB:.0f} GB per node exceeds the host's {cluster.host.memory_bytes / GB:.0f} GB "
        f"({per_gpu / GB:.1f} GB per GPU x {cluster.gpus_per_node})"
    )


def memory_message(ev: Evaluation, i: int) -> str:
    from paraplan.cost_models.memory import MEMORY_TERMS

    total = float(ev.memory.total[i])
    largest = max(MEMORY_TERMS, key=lambda t: float(getattr(ev.memory, t)[i]))
    headroom = ""
    if ev.usable_bytes < ev.capacity_bytes - float(ev.memory.other[i]):
        headroom = " (less the requested headroom)"
    return (
        f"memory {total / GB:.1f} GB on the most loaded GPU exceeds the usable "
        f"{ev.usable_bytes / GB:.1f} GB{headroom} by {memory_text(total - ev.usable_bytes)}; "
        f"largest term: {largest} {float(getattr(ev.memory, largest)[i]) / GB:.1f} GB"
    )

"""Layouts to the full breakdown: memory, time, utilization and every violated limit.

Works on arrays of candidates (`Layouts`), so the search evaluates thousands at once; a single
layout is an array of one. Step time (one optimizer step of the global batch):
    step = m * (fwd + bwd + recompute + tp + cp + ep + pp)_slowest stage        [compute, comms]
         + (p-1)/v * slot                                                      [bubble]
         + exposed DP time + optimizer step                                    [dp, compute]
with m micro-batches per pipeline and `slot` the slowest stage's time per micro-batch (the last
stage, which adds the LM head, or the first). Each `time_s` entry is exposed time, so they sum
to the step time.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from paraplan.cost_models.compute import micro_batch_times, optimizer_step_s
from paraplan.cost_models.flops import model_flops_per_step, recompute_flops_per_step
from paraplan.cost_models.layout import BoolArray, FloatArray, Layouts
from paraplan.cost_models.limits import MESSAGES, limit_checks
from paraplan.cost_models.memory import MEMORY_TERMS, MemoryBreakdown, layers_per_stage, peak_memory, stage_params
from paraplan.cost_models.models import ModelSpec
from paraplan.cost_models.pipeline import bubble_s
from paraplan.cost_models.stack import DEFAULT_STACK, Stack
from paraplan.cost_models.traffic import dp_exposed_s, micro_batch_comm, overlap_windows
from paraplan.hardware_specs.schema import Cluster

TIME_TERMS = ("compute", "recompute", "tp_comm", "cp_comm", "ep_comm", "pp_comm", "dp_comm", "bubble")


@dataclass(frozen=True)
class Evaluation:
    model: ModelSpec
    cluster: Cluster
    layouts: Layouts
    memory: MemoryBreakdown
    capacity_bytes: float
    usable_bytes: float
    times: dict[str, FloatArray]
    step_time_s: FloatArray
    mfu: FloatArray
    hfu: FloatArray
    tflops_per_gpu: FloatArray
    tokens_per_s: FloatArray
    checks: dict[str, BoolArray] = field(repr=False)

    @property
    def feasible(self) -> BoolArray:
        bad = np.zeros(len(self.layouts), dtype=bool)
        for mask in self.checks.values():
            bad |= mask
        return ~bad

    @property
    def memory_overflow_bytes(self) -> FloatArray:
        return np.asarray(np.maximum(self.memory.total - self.usable_bytes, 0.0))

    def violations(self, i: int) -> list[str]:
        lay = self.layouts.at(i)
        return [MESSAGES[name](self, i, lay) for name, mask in self.checks.items() if mask[i]]

    def to_json(self, i: int) -> dict[str, object]:
        lay = self.layouts.at(i)
        memory = {t: float(getattr(self.memory, t)[i]) for t in MEMORY_TERMS}
        memory["total"] = float(self.memory.total[i])
        memory["capacity"] = self.capacity_bytes
        return {
            "model": self.model.name,
            "hardware": self.cluster.name,
            "gpus": lay.gpus,
            "layout": lay.to_json(),
            "feasible": bool(self.feasible[i]),
            "violations": self.violations(i),
            "memory_bytes": memory,
            "step_time_s": float(self.step_time_s[i]),
            "time_s": {t: float(self.times[t][i]) for t in TIME_TERMS},
            "mfu": float(self.mfu[i]),
            "hfu": float(self.hfu[i]),
            "tflops_per_gpu": float(self.tflops_per_gpu[i]),
            "tokens_per_s": float(self.tokens_per_s[i]),
        }


def usable_memory_bytes(cluster: Cluster, mem_headroom: float) -> float:
    """Whole bytes a layout may use: capacity less the user's headroom, rounded down."""
    return float(np.floor(cluster.gpu.memory_bytes * (1.0 - mem_headroom)))


def evaluate(
    model: ModelSpec, cluster: Cluster, lay: Layouts, stack: Stack = DEFAULT_STACK, mem_headroom: float = 0.0
) -> Evaluation:
    layers = layers_per_stage(model, lay)
    times = micro_batch_times(model, lay, cluster, stack, layers)
    comm = micro_batch_comm(model, lay, cluster, layers, times)
    m = lay.num_micro_batches
    slot = times.forward_s + times.backward_s + times.recompute_s + comm.tp_s + comm.cp_s + comm.ep_s + comm.pp_s
    # DP traffic and the optimizer step scale with the stage holding the most weights: the last
    # (LM head, final norm), or the whole model with one stage.
    params = stage_params(model, lay, first=lay.pp == 1, last=True)
    breakdown = {
        "compute": m * (times.forward_s + times.backward_s) + optimizer_step_s(params, lay, cluster, stack),
        "recompute": m * times.recompute_s,
        "tp_comm": m * comm.tp_s,
        "cp_comm": m * comm.cp_s,
        "ep_comm": m * comm.ep_s,
        "pp_comm": m * comm.pp_s,
        "dp_comm": dp_exposed_s(params, lay, cluster, stack, overlap_windows(slot)),
        "bubble": bubble_s(lay, slot),
    }
    step = np.asarray(np.sum([breakdown[t] for t in TIME_TERMS], axis=0))
    gpus = (lay.tp * lay.pp * lay.dp * lay.cp).astype(np.float64)
    flops = model_flops_per_step(model, lay)
    peak = cluster.gpu.peak_bf16_flops
    memory = peak_memory(model, lay, stack, cluster.memory_reserve_bytes)
    usable = usable_memory_bytes(cluster, mem_headroom)
    return Evaluation(
        model=model,
        cluster=cluster,
        layouts=lay,
        memory=memory,
        capacity_bytes=cluster.gpu.memory_bytes,
        usable_bytes=usable,
        times=breakdown,
        step_time_s=step,
        mfu=flops / (step * gpus * peak),
        hfu=(flops + recompute_flops_per_step(model, lay, stack)) / (step * gpus * peak),
        tflops_per_gpu=flops / (step * gpus) / 1e12,
        tokens_per_s=lay.global_batch * lay.seq_len / step,
        checks=limit_checks(model, cluster, lay, memory, usable),
    )

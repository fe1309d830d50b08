"""Layouts to the full breakdown: memory, time, utilization and every violated limit.

Works on arrays of candidates (`Layouts`), so the search evaluates thousands at once; a single
layout is an array of one. Step time (one optimizer step of the global batch):
    step = m * (fwd + bwd + recompute + tp + cp + ep + wait + ckpt + pp)_slowest stage
                                                             [compute, comms, host_wait, offload]
         + (p-1)/v * slot                                                      [bubble]
         + exposed DP time + per-step work (optimizer, gradient norm)          [dp, compute]
         + offload traffic and the host's optimizer step                       [offload]
`wait` is what a host-bound dropless MoE layer waits on the CPU beyond its GPU work
(`compute.moe_host_wait_s`); `ckpt` DeepSpeed's CPU checkpoint copies (`compute.cpu_checkpoint_s`).
with m micro-batches per pipeline and `slot` the slowest stage's time per micro-batch (the last
stage, which adds the LM head, or the first). Each `time_s` entry is exposed time, so they sum
to the step time.

An `Evaluation` is computed once per question and then sliced (`take`) and joined (`concat`);
nothing downstream evaluates a layout again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from paraplan.cost_models.candidates import BoolArray, FloatArray, Layouts
from paraplan.cost_models.compute import (
    cpu_checkpoint_s,
    fsdp_copy_s,
    matmul_peak_flops,
    micro_batch_times,
    moe_host_wait_s,
    offload_s,
    optimizer_step_s,
)
from paraplan.cost_models.flops import model_flops_per_step, recompute_flops_per_step
from paraplan.cost_models.limits import Target, limit_checks
from paraplan.cost_models.memory import (
    MemoryBreakdown,
    StageParams,
    cpu_checkpoint_bytes,
    device_reserve_bytes,
    host_state_bytes,
    peak_memory,
    stage_params,
)
from paraplan.cost_models.models import ModelSpec
from paraplan.cost_models.pipeline import bubble_s
from paraplan.cost_models.stack import Stack
from paraplan.cost_models.stages import most_layers, stage_layers
from paraplan.cost_models.traffic import dp_exposed_s, live_blocked_numel, micro_batch_comm, overlap_windows
from paraplan.hardware_specs.schema import Cluster

TIME_TERMS = (
    "compute", "recompute", "tp_comm", "cp_comm", "ep_comm", "pp_comm", "dp_comm", "bubble", "offload", "host_wait",
)  # fmt: skip
Index = npt.NDArray[np.int64] | BoolArray


@dataclass(frozen=True)
class Evaluation:
    model: ModelSpec
    cluster: Cluster
    stack: Stack
    layouts: Layouts
    memory: MemoryBreakdown
    capacity_bytes: float
    usable_bytes: float  # capacity less the user's headroom (the reserve is a memory term)
    times: dict[str, FloatArray]
    step_time_s: FloatArray
    model_flops: FloatArray  # per step, causal-aware
    model_flops_palm: FloatArray  # per step, PaLM convention (full attention)
    recompute_flops: FloatArray  # per step, spent again by recompute
    peak_flops: FloatArray  # per GPU, the peak MFU and HFU are ratios of
    host_bytes: FloatArray  # per GPU, state offloaded to host memory
    gpu_count: FloatArray  # TP x PP x DP x CP
    checks: dict[str, BoolArray] = field(repr=False)

    def __len__(self) -> int:
        return len(self.layouts)

    @property
    def gpus(self) -> FloatArray:
        return self.gpu_count

    @property
    def feasible(self) -> BoolArray:
        bad = np.zeros(len(self.layouts), dtype=bool)
        for mask in self.checks.values():
            bad |= mask
        return ~bad

    @property
    def memory_margin_bytes(self) -> FloatArray:
        """Usable memory left after the model, its activations and the reserve (negative: over)."""
        return np.asarray(self.usable_bytes - self.memory.total)

    @property
    def memory_overflow_bytes(self) -> FloatArray:
        return np.asarray(np.maximum(-self.memory_margin_bytes, 0.0))

    def _ratio(self, flops: FloatArray) -> FloatArray:
        return np.asarray(flops / (self.step_time_s * self.gpus * self.peak_flops))

    @property
    def mfu(self) -> FloatArray:
        return self._ratio(self.model_flops)

    @property
    def mfu_palm(self) -> FloatArray:
        return self._ratio(self.model_flops_palm)

    @property
    def hfu(self) -> FloatArray:
        return self._ratio(self.model_flops + self.recompute_flops)

    @property
    def tflops_per_gpu(self) -> FloatArray:
        return np.asarray(self.model_flops / (self.step_time_s * self.gpus) / 1e12)

    @property
    def tokens_per_s(self) -> FloatArray:
        return np.asarray(self.layouts.global_batch * self.layouts.seq_len / self.step_time_s)

    def take(self, index: Index) -> Evaluation:
        """The candidates at `index`, without evaluating anything again."""
        return Evaluation(
            model=self.model, cluster=self.cluster, stack=self.stack, layouts=self.layouts.take(index),
            memory=self.memory.take(np.asarray(index)), capacity_bytes=self.capacity_bytes,
            usable_bytes=self.usable_bytes, times={k: v[index] for k, v in self.times.items()},
            step_time_s=self.step_time_s[index], model_flops=self.model_flops[index],
            model_flops_palm=self.model_flops_palm[index], recompute_flops=self.recompute_flops[index],
            peak_flops=self.peak_flops[index], host_bytes=self.host_bytes[index], gpu_count=self.gpu_count[index],
            checks={k: v[index] for k, v in self.checks.items()},
        )  # fmt: skip

    @staticmethod
    def concat(parts: list[Evaluation]) -> Evaluation:
        """Evaluations of the same question (model, cluster, stack, headroom) joined."""
        first = parts[0]
        if len(parts) == 1:
            return first

        def join(name: str) -> FloatArray:
            return np.concatenate([getattr(p, name) for p in parts])

        return Evaluation(
            model=first.model, cluster=first.cluster, stack=first.stack,
            layouts=Layouts.concat([p.layouts for p in parts]),
            memory=MemoryBreakdown.concat([p.memory for p in parts]), capacity_bytes=first.capacity_bytes,
            usable_bytes=first.usable_bytes, times={k: np.concatenate([p.times[k] for p in parts]) for k in TIME_TERMS},
            step_time_s=join("step_time_s"), model_flops=join("model_flops"), model_flops_palm=join("model_flops_palm"),
            recompute_flops=join("recompute_flops"), peak_flops=join("peak_flops"), host_bytes=join("host_bytes"),
            gpu_count=join("gpu_count"),
            checks={k: np.concatenate([p.checks[k] for p in parts]) for k in first.checks},
        )  # fmt: skip


def host_exceeded(cluster: Cluster, lay: Layouts, host_bytes_per_gpu: FloatArray) -> BoolArray:
    """Offload needs a `[host]` table, and the node's GPUs' offloaded state must fit its memory."""
    offloading = host_bytes_per_gpu > 0
    if cluster.host is None:
        return np.asarray(offloading | (lay.offload != 0))
    return np.asarray(offloading & (host_bytes_per_gpu * cluster.gpus_per_node > cluster.host.memory_bytes))


def usable_memory_bytes(cluster: Cluster, mem_headroom: float) -> float:
    """Whole bytes a layout may use: capacity less the user's headroom, rounded down."""
    return float(np.floor(cluster.gpu.memory_bytes * (1.0 - mem_headroom)))


def _pick(index: npt.NDArray[np.int64], options: list[FloatArray]) -> FloatArray:
    return np.asarray(np.choose(index, options))


def evaluate(model: ModelSpec, cluster: Cluster, lay: Layouts, stack: Stack, mem_headroom: float = 0.0) -> Evaluation:
    times = micro_batch_times(model, lay, cluster, stack)
    layer = times.layer_fwd_s + times.layer_bwd_s
    chunk = most_layers(model, lay) / lay.virtual_stages * layer
    comm = micro_batch_comm(model, lay, cluster, stack, times, chunk)
    layer_comm = comm.tp_layer_s + comm.cp_layer_s + comm.ep_layer_s
    # a host-bound (dropless MoE) layer takes at least the stack's floor: the wait is part of its slot
    wait = moe_host_wait_s(model, lay, stack, layer + times.layer_recompute_s + layer_comm - comm.ep_hidden_s)
    first, middle, last = stage_layers(model, lay)
    head = times.head_fwd_s
    # Trained MTP modules (Stack.mtp) sit on the last stage: each is one more layer, an eh_proj
    # and one more pass through the LM head and loss. Its layer is priced as the mean layer; when it
    # has routed experts (`ModelSpec.mtp_layer_is_moe`) its EP exchanges and host wait are an MoE
    # layer's, of which the mean layer carries `moe_share`.
    depth = float(model.mtp_layers) if stack.mtp else 0.0
    to_moe = 1.0 / model.moe_share if model.mtp_layer_is_moe else 0.0
    mtp_wait: FloatArray | float = 0.0
    mtp_module: FloatArray | float = 0.0  # no trained module (the usual question): no arithmetic for it
    if depth:
        mtp_ep, mtp_wait = comm.ep_layer_s * to_moe, wait * to_moe
        mtp_comm = comm.tp_layer_s + comm.cp_layer_s + mtp_ep
        mtp_module = layer + times.layer_recompute_s + mtp_comm + mtp_wait + 3.0 * (times.eh_proj_fwd_s + head)
    on_first = np.where(lay.pp == 1, depth, 0.0)
    # Per stage, per micro-batch: (layers, LM head, MTP modules). The slot is the slowest stage's.
    zeros = np.zeros(len(lay))
    stages = [(first, np.where(lay.pp == 1, head, 0.0), on_first), (middle, zeros, zeros), (last, head, zeros + depth)]
    # DeepSpeed's CPU checkpointing waits on each layer's copies to and from the host (0 otherwise)
    ckpt = cpu_checkpoint_s(model, lay, cluster, stack)
    slots = [n * (layer + times.layer_recompute_s + layer_comm + wait + ckpt) + 3.0 * h + d * mtp_module + comm.pp_s
             for n, h, d in stages]  # fmt: skip
    critical = np.asarray(np.argmax(np.stack(slots), axis=0), dtype=np.int64)
    n = _pick(critical, [s[0] for s in stages])
    h = _pick(critical, [s[1] for s in stages])
    d = _pick(critical, [s[2] for s in stages])
    slot = _pick(critical, slots)
    m = lay.num_micro_batches
    # DP traffic and the optimizer step scale with the stage holding the most weights.
    candidates = [
        stage_params(model, lay, first, first=True, last=lay.pp == 1, mtp=on_first),
        stage_params(model, lay, middle, first=False, last=False),
        stage_params(model, lay, last, first=lay.pp == 1, last=True, mtp=depth),
    ]
    heaviest = np.asarray(np.argmax(np.stack([c.dense + c.expert for c in candidates]), axis=0), dtype=np.int64)
    params = StageParams(*(_pick(heaviest, [getattr(c, f) for c in candidates]) for f in StageParams.FIELDS))
    breakdown = {
        "compute": m * (n * layer + 3.0 * h + d * (layer + 3.0 * (times.eh_proj_fwd_s + head)))
        + optimizer_step_s(params, lay, cluster, stack)
        + fsdp_copy_s(params, lay, cluster, stack),
        "recompute": m * (n + d) * times.layer_recompute_s,
        "tp_comm": m * (n + d) * comm.tp_layer_s,
        "cp_comm": m * (n + d) * comm.cp_layer_s,
        # the combined 1F1B hides some in the steady state (an MTP layer is scheduled like a
        # decoder layer there: model_chunk_schedule_plan.py TransformerLayerSchedulePlan at
        # d98e8a64); the bubble's slot (warmup and cooldown passes, which run alone) keeps all of it
        "ep_comm": m * (n + d * to_moe) * (comm.ep_layer_s - comm.ep_hidden_s),
        "pp_comm": m * comm.pp_s,
        "dp_comm": dp_exposed_s(
            params, lay, cluster, stack, overlap_windows(slot), live_blocked_numel(model, lay, stack)
        ),
        "bubble": bubble_s(lay, slot),
        "offload": offload_s(params, lay, cluster, stack) + m * n * ckpt,
        "host_wait": m * (n * wait + d * mtp_wait),
    }
    step = np.asarray(np.sum([breakdown[t] for t in TIME_TERMS], axis=0))
    memory = peak_memory(model, lay, stack, device_reserve_bytes(model, lay, cluster, stack))
    usable = usable_memory_bytes(cluster, mem_headroom)
    checks = limit_checks(Target(model, cluster, stack), lay)
    checks["memory"] = np.asarray(memory.total > usable)
    host = host_state_bytes(params, lay, stack) + cpu_checkpoint_bytes(model, lay, stack, first)
    checks["host"] = host_exceeded(cluster, lay, host)
    return Evaluation(
        model=model,
        cluster=cluster,
        stack=stack,
        layouts=lay,
        memory=memory,
        capacity_bytes=cluster.gpu.memory_bytes,
        usable_bytes=usable,
        times={k: np.asarray(v, dtype=np.float64) for k, v in breakdown.items()},
        step_time_s=step,
        model_flops=model_flops_per_step(model, lay, causal=True, mtp=stack.mtp),
        model_flops_palm=model_flops_per_step(model, lay, causal=False, mtp=stack.mtp),
        recompute_flops=recompute_flops_per_step(model, lay, stack.recompute_modules, mtp=stack.mtp),
        peak_flops=matmul_peak_flops(cluster, lay),
        host_bytes=host,
        gpu_count=np.asarray(lay.gpus, dtype=np.float64),
        checks=checks,
    )

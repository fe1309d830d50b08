"""Per-stage cost tables of a GPU pool, priced by the cost model (one formula in one place).

A pool plan (`paraplan.pools`) is a pipeline whose stages may sit on different GPU types, each
with its own TP degree, recompute mode and number of layers; DP replicates the whole pipeline.
The constraint model (`paraplan.stage_model`) needs, for one choice of the global knobs (DP d,
micro-batch b), the cost of every stage *option* o = (GPU type, TP, recompute) as numbers that
are linear in the stage's layer count. This module derives them by calling the cost model on
one-row `Layouts` (TP, DP = d, micro-batch b, PP, the settings), never by restating a formula:

* time per micro-batch and layer (`compute.micro_batch_times` forward + backward + recompute,
  and `traffic.tp_per_layer_s`, the exposed TP collectives), the LM head's forward + backward on
  the last stage (3 x `compute.head_fwd_s`, as `evaluate` prices it; the embedding lookup has no
  time term in the cost model);
* memory of one GPU of a stage (`memory.model_state_bytes` of `memory.stage_params` under ZeRO-1,
  `memory.activation_bytes` with the micro-batches that stage holds in flight under 1F1B, the
  hardware's reserve), against `evaluate.usable_memory_bytes`;
* the per-step tail of a stage: the optimizer step (`compute.optimizer_step_s`) and the
  data-parallel reduction of its gradients over its DP group (`traffic.dp_exposed_s`, split into
  what hides under a micro-batch's backward and what under its forward: `traffic.overlap_windows`);
* one boundary transfer between adjacent stages (`traffic.pp_per_micro_batch_s` / 2: one
  direction, T*h*2/TP bytes): on the same GPU type over that type's pair link at the stage
  distance (TP x DP ranks, as the uniform model); between different types over the network,
  through the slower NIC (its effective rate; latency the mean of the two NICs'), or the pool's
  `[link]` when the pool file gives one. With different TP degrees on the two sides, the
  narrower side's ranks each carry T*h*2/TP_min.

Stage positions count from the back (`s = 0` is the last stage, which holds the LM head): under
1F1B the stage s places from the end holds min(s + 1, m) micro-batches in flight
(`memory.in_flight_micro_batches`), whatever the pipeline's depth, so one table serves every
depth. Each linear quantity has a slope per layer and an intercept per role: a plain stage
(s >= 1: a middle stage; s = 0: the last stage of a pipeline of two or more) or the first stage
(s >= 1: the embedding's stage; s = 0: the only stage, p = 1, which holds the embedding and the
LM head, tied or not).

Fixed for pools (documented in `paraplan.pools`): ZeRO-1 (the distributed optimizer), sequence
parallelism with TP > 1, no context, expert or virtual pipeline parallelism, no offload, TP within
a node of its type. Options that another option of the same type and TP beats on every count
(time, memory, tail) are left out (with flash attention, Megatron's selective recompute stores
what no recompute stores and takes longer).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from paraplan.cost_models.candidates import FloatArray, IntArray, Layouts
from paraplan.cost_models.compute import matmul_peak_flops, micro_batch_times, moe_host_wait_s, optimizer_step_s
from paraplan.cost_models.evaluate import usable_memory_bytes
from paraplan.cost_models.layout import MAX_MICRO_BATCH_TOKENS, Layout, Recompute
from paraplan.cost_models.limits import Target, limit_checks
from paraplan.cost_models.memory import activation_bytes, device_reserve_bytes, model_state_bytes, stage_params
from paraplan.cost_models.models import ModelSpec
from paraplan.cost_models.stack import Stack
from paraplan.cost_models.traffic import (
    dp_exposed_s,
    live_blocked_numel,
    overlap_windows,
    pp_per_micro_batch_s,
    tp_per_layer_s,
)
from paraplan.hardware_specs.schema import Cluster, Link

HEAD_PASSES = 3.0  # the LM head's forward and backward (twice the forward), as `evaluate` adds it
POOL_ZERO = 1  # the distributed optimizer: states sharded over DP, gradients reduce-scattered once
_HIDDEN = 1e30  # a window that hides any transfer (to split the DP time into its two parts)


@dataclass(frozen=True)
class PoolLink:
    """The link between stages on different GPU types (per GPU, per direction)."""

    bw_bytes_per_s: float
    latency_s: float
    efficiency: float = 1.0
    sources: tuple[str, ...] = ()

    @property
    def effective_bw_bytes_per_s(self) -> float:
        return self.bw_bytes_per_s * self.efficiency


@dataclass(frozen=True)
class PoolMember:
    cluster: Cluster
    count: int

    @property
    def name(self) -> str:
        return self.cluster.name


@dataclass(frozen=True)
class Pool:
    """GPU types available together, each with how many of it; `link` joins different types."""

    members: tuple[PoolMember, ...]
    link: PoolLink | None = None
    label: str = ""  # the pool file's name; "" = the NAME:N+NAME:M form

    @property
    def name(self) -> str:
        return self.label or "+".join(f"{m.name}:{m.count}" for m in self.members)

    @property
    def counts(self) -> tuple[int, ...]:
        return tuple(m.count for m in self.members)

    def only(self, member: int) -> Pool:
        """The same pool with every other type's count set to 0 (the single-type sub-space)."""
        members = tuple(PoolMember(m.cluster, m.count if i == member else 0) for i, m in enumerate(self.members))
        return Pool(members, self.link, "")


@dataclass(frozen=True)
class PoolSettings:
    """What a pool search holds fixed: the run's settings, the stack, the headroom, and the
    per-stage recompute modes and TP degrees it may choose from."""

    base: Layout  # global batch, sequence length, precision, framework (the degrees are ignored)
    stack: Stack
    mem_headroom: float = 0.0
    recompute: tuple[Recompute, ...] = (Recompute.NONE, Recompute.SELECTIVE, Recompute.FULL)
    tp_low: int = 1
    tp_high: int = 1 << 30
    sequence_parallel: bool | None = None  # None: on whenever TP > 1

    def sp(self, tp: IntArray) -> IntArray:
        """Sequence parallelism (0/1) for these TP degrees."""
        on = np.asarray(tp) > 1
        if self.sequence_parallel is not None:
            on = on & self.sequence_parallel
        return np.asarray(on.astype(np.int64))


@dataclass(frozen=True)
class Option:
    """One way to run a stage: its GPU type (index into the pool), TP degree and recompute."""

    member: int
    tp: int
    recompute: Recompute


@dataclass(frozen=True)
class Linear:
    """A per-stage quantity linear in the stage's layers l >= 1, for stage position s (from the
    back) and option o: slope[s, o] * l + (first[s, o] if the stage is the first else plain[s, o])."""

    slope: FloatArray
    plain: FloatArray
    first: FloatArray

    def at(self, s: int, o: int, layers: int, is_first: bool) -> float:
        base = self.first[s, o] if is_first else self.plain[s, o]
        return float(self.slope[s, o] * layers + base)


@dataclass(frozen=True)
class StageTables:
    """Everything the stage model needs for one (DP, micro-batch), in seconds and bytes."""

    model: ModelSpec
    pool: Pool
    settings: PoolSettings
    dp: int
    micro_batch: int
    micro_batches: int  # m, per pipeline and step
    stages: int  # the deepest pipeline the tables cover (positions s = 0 .. stages - 1)
    options: tuple[Option, ...]
    layer_s: FloatArray  # [O] per micro-batch and layer: compute + recompute + exposed TP + host wait
    layer_compute_s: FloatArray  # [O] ... its parts: forward + backward
    layer_recompute_s: FloatArray  # [O]
    layer_tp_s: FloatArray  # [O]
    layer_host_s: FloatArray  # [O] a host-bound MoE layer's wait beyond its GPU work (compute.moe_host_wait_s)
    head_s: FloatArray  # [O] per micro-batch on the last stage: the LM head forward + backward
    boundary_s: FloatArray  # [O, O] one transfer between a stage of option a (behind) and one of b
    memory: Linear  # bytes on one GPU of the stage, reserve included
    usable_bytes: FloatArray  # [O] of the option's GPU type
    optimizer: Linear  # seconds per step: the optimizer step
    dp_bwd: Linear  # seconds per step: DP traffic that hides under a micro-batch's backward
    dp_fwd: Linear  # ... under its forward
    overlap_bwd: FloatArray  # [O] share of the slowest slot that hides dp_bwd (dp_overlap x window share)
    overlap_fwd: FloatArray  # [O]
    peak_flops: FloatArray  # [O] per GPU
    rows: Layouts = field(repr=False)  # [O] the one-row layouts the options were priced with (PP 1)


def micro_batch_domain(base: Layout) -> list[int]:
    """Sequences per micro-batch the pool search tries: as the knob's own domain (`Layout`)."""
    cap = max(1, MAX_MICRO_BATCH_TOKENS // base.seq_len)
    return [b for b in divisors(base.global_batch) if b <= cap]


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _rows(base: Layouts, count: int, **columns: IntArray | int) -> Layouts:
    return Layouts(np.repeat(base.data, count, axis=0)).replace(**columns)


def _base_row(settings: PoolSettings, dp: int, micro_batch: int) -> Layouts:
    b = settings.base
    row = Layout(
        global_batch=b.global_batch, seq_len=b.seq_len, precision=b.precision, framework=b.framework,
        micro_batch=micro_batch, dp=dp, zero=POOL_ZERO,
    )  # fmt: skip
    return Layouts.of([row])


def member_options(model: ModelSpec, settings: PoolSettings, cluster: Cluster, member: int, dp: int,
                   micro_batch: int, count: int) -> list[Option]:  # fmt: skip
    """The options of one GPU type that the cost model's limits admit (TP divides the heads and KV
    heads and the node, FP8 where the GPU has it, the framework runs it, the batch divides)."""
    base = _base_row(settings, dp, micro_batch)
    tps = [t for t in divisors(cluster.gpus_per_node) if settings.tp_low <= t <= settings.tp_high and dp * t <= count]
    candidates = [(t, r) for t in tps for r in settings.recompute]
    if not candidates:
        return []
    tp_col = np.array([t for t, _ in candidates], dtype=np.int64)
    rows = _rows(base, len(candidates), tp=tp_col, recompute=np.array([int(r) for _, r in candidates], dtype=np.int64),
                 sequence_parallel=settings.sp(tp_col))  # fmt: skip
    bad = np.zeros(len(candidates), dtype=bool)
    for mask in limit_checks(Target(model, cluster), rows).values():
        bad |= mask
    return [Option(member, t, r) for (t, r), b in zip(candidates, bad, strict=True) if not b]


def bridge_cluster(pool: Pool, a: int, b: int) -> Cluster:
    """A stand-in cluster whose every pair of ranks talks over the link between types a and b:
    one GPU per node, the network being that link. Lets `pp_per_micro_batch_s` price a boundary
    between two GPU types with its own formula."""
    ca, cb = pool.members[a].cluster, pool.members[b].cluster
    if pool.link is not None:
        link = Link(name="pool link", bw_bytes_per_s=pool.link.bw_bytes_per_s, latency_s=pool.link.latency_s,
                    efficiency=pool.link.efficiency)  # fmt: skip
    else:
        slower = min((ca.inter_node, cb.inter_node), key=lambda x: x.effective_bw_bytes_per_s)
        link = Link(name=f"network ({slower.name})", bw_bytes_per_s=slower.effective_bw_bytes_per_s,
                    latency_s=(ca.inter_node.latency_s + cb.inter_node.latency_s) / 2.0, efficiency=1.0)  # fmt: skip
    return ca.model_copy(update={"name": f"{ca.name}+{cb.name}", "gpus_per_node": 1, "inter_node": link})


def cross_link(pool: Pool, a: int, b: int) -> Link:
    """The link a boundary between GPU types a and b crosses (see `bridge_cluster`)."""
    return bridge_cluster(pool, a, b).inter_node


Quantity = tuple[FloatArray, FloatArray, FloatArray]  # slope, plain, first: each [S, n]


def stage_tables(model: ModelSpec, pool: Pool, settings: PoolSettings, dp: int, micro_batch: int,
                 stages: int) -> StageTables | None:  # fmt: skip
    """The tables for DP `dp` and micro-batch `micro_batch`, for pipelines of up to `stages`
    stages; None when no option fits the GPU counts and the limits."""
    g = settings.base.global_batch
    if g % (dp * micro_batch):
        return None
    m = g // (dp * micro_batch)
    options: list[Option] = []
    for k, member in enumerate(pool.members):
        if member.count > 0:
            options += member_options(model, settings, member.cluster, k, dp, micro_batch, member.count)
    if not options:
        return None
    stack = settings.stack
    base = _base_row(settings, dp, micro_batch)
    n_opt = len(options)
    s_count = max(1, stages)
    layer, compute, recompute, tp_comm, host, head = (np.zeros(n_opt) for _ in range(6))
    usable, peak, overlap = (np.zeros(n_opt) for _ in range(3))
    tables: list[list[FloatArray]] = [[np.zeros((s_count, n_opt)) for _ in range(3)] for _ in range(4)]
    all_rows: list[Layouts] = [Layouts.empty()] * n_opt
    for k, member in enumerate(pool.members):
        idx = [i for i, o in enumerate(options) if o.member == k]
        if not idx:
            continue
        cluster = member.cluster
        tps = np.array([options[i].tp for i in idx], dtype=np.int64)
        rcs = np.array([int(options[i].recompute) for i in idx], dtype=np.int64)
        rows = _rows(base, len(idx), tp=tps, recompute=rcs, sequence_parallel=settings.sp(tps))
        for j, i in enumerate(idx):
            all_rows[i] = rows.take(np.array([j]))
        times = micro_batch_times(model, rows, cluster, stack)
        compute[idx] = times.layer_fwd_s + times.layer_bwd_s
        recompute[idx] = times.layer_recompute_s
        tp_comm[idx] = tp_per_layer_s(model, rows, cluster, stack, times.layer_gemm_fwd_s)
        busy = compute[idx] + recompute[idx] + tp_comm[idx]
        host[idx] = moe_host_wait_s(model, rows, stack, busy)
        layer[idx] = busy + host[idx]
        head[idx] = HEAD_PASSES * times.head_fwd_s
        usable[idx] = usable_memory_bytes(cluster, settings.mem_headroom)
        peak[idx] = matmul_peak_flops(cluster, rows)
        overlap[idx] = cluster.efficiency.dp_overlap if stack.dp_overlap else 0.0
        for target, values in zip(tables, _linear_quantities(model, rows, cluster, stack, s_count), strict=True):
            for part in range(3):
                target[part][:, idx] = values[part]
    boundary = _boundaries(model, pool, settings, options, base, dp)
    keep = _undominated(options, layer, head, tables, overlap)
    idx_keep = np.nonzero(keep)[0]
    options = [options[i] for i in idx_keep]
    layer, compute, recompute, tp_comm, host, head = (
        a[idx_keep] for a in (layer, compute, recompute, tp_comm, host, head)
    )
    usable, peak, overlap = usable[idx_keep], peak[idx_keep], overlap[idx_keep]
    mem, opt, bwd, fwd = (Linear(*(q[:, idx_keep] for q in group)) for group in tables)
    boundary = boundary[np.ix_(idx_keep, idx_keep)]
    w_fwd, w_bwd = overlap_windows(np.ones(1))
    return StageTables(
        model=model, pool=pool, settings=settings, dp=dp, micro_batch=micro_batch, micro_batches=m, stages=s_count,
        options=tuple(options), layer_s=layer, layer_compute_s=compute, layer_recompute_s=recompute,
        layer_tp_s=tp_comm, layer_host_s=host, head_s=head, boundary_s=boundary, memory=mem, usable_bytes=usable, optimizer=opt,
        dp_bwd=bwd, dp_fwd=fwd, overlap_bwd=overlap * float(w_bwd[0]), overlap_fwd=overlap * float(w_fwd[0]),
        peak_flops=peak, rows=Layouts.concat([all_rows[i] for i in idx_keep]),
    )  # fmt: skip


def _undominated(options: list[Option], layer: FloatArray, head: FloatArray, quantities: list[list[FloatArray]],
                 overlap: FloatArray) -> npt.NDArray[np.bool_]:  # fmt: skip
    """Options no other option of the same GPU type and TP beats: one at least as fast per layer,
    with no more memory at any position and role and no longer a tail, is always at least as good
    (same GPUs, same boundaries), so the dominated one is left out."""
    keep = np.ones(len(options), dtype=bool)
    for i, a in enumerate(options):
        for j, b in enumerate(options):
            if i == j or not keep[j] or (a.member, a.tp) != (b.member, b.tp):
                continue
            no_worse = bool(layer[j] <= layer[i] and head[j] <= head[i] and overlap[j] == overlap[i])
            no_worse = no_worse and all(bool(np.all(q[:, j] <= q[:, i])) for group in quantities for q in group)
            better = bool(layer[j] < layer[i]) or any(bool(np.any(q[:, j] < q[:, i])) for g in quantities for q in g)
            if no_worse and (better or j < i):
                keep[i] = False
                break
    return keep


def _linear_quantities(model: ModelSpec, rows: Layouts, cluster: Cluster, stack: Stack,
                       s_count: int) -> tuple[Quantity, Quantity, Quantity, Quantity]:  # fmt: skip
    """(memory, optimizer step, DP under the backward, DP under the forward) as slope and
    intercepts, for every position s and option row, from two layer counts (1 and 2).

    The four cases (a plain or a first stage, holding 1 or 2 layers) are priced in one pass over
    four stacked copies of the rows: every term is computed row by row, so each copy gets what a
    pass of its own would give, for a quarter of the array operations."""
    n = len(rows)
    pp_rows = max(s_count, 2)
    s = np.repeat(np.arange(s_count), n)  # position of each expanded row (s-major)
    count_rows = len(s)
    cases = [(role_first, layers) for role_first in (False, True) for layers in (1.0, 2.0)]
    overlap = cluster.efficiency.dp_overlap if stack.dp_overlap else 0.0
    single = np.concatenate([role_first & (s == 0) for role_first, _ in cases])
    lay = Layouts(np.tile(rows.data, (s_count * len(cases), 1))).replace(
        pp=np.where(single, 1, pp_rows).astype(np.int64)
    )
    stage = np.where(single, 0.0, np.tile(pp_rows - 1.0 - s, len(cases)))
    first = np.concatenate([np.full(count_rows, role_first) for role_first, _ in cases])
    last = np.tile(s == 0, len(cases))
    count = np.concatenate([np.full(count_rows, layers) for _, layers in cases])
    params = stage_params(model, lay, count, first, last)
    weights, grads, optimizer = model_state_bytes(params, lay, stack)
    acts = activation_bytes(model, lay, stack, count, stage, first, last)
    memory = weights + grads + optimizer + acts + device_reserve_bytes(model, lay, cluster, stack)
    step = optimizer_step_s(params, lay, cluster, stack)
    zeros, hidden = np.zeros(len(lay)), np.full(len(lay), _HIDDEN)
    blocked_fwd, blocked_bwd = blocked = live_blocked_numel(model, lay, stack)
    if overlap > 0:  # each pass's gathers that wait in line counted with that pass only
        under_bwd = dp_exposed_s(params, lay, cluster, stack, (hidden, zeros), (zeros, blocked_bwd))
        under_fwd = dp_exposed_s(params, lay, cluster, stack, (zeros, hidden), (blocked_fwd, zeros))
    else:  # nothing hides: all of it counts once, under the backward's (zero) window
        under_bwd = dp_exposed_s(params, lay, cluster, stack, (zeros, zeros), blocked)
        under_fwd = zeros
    out: list[Quantity] = []
    for values in (memory, step, under_bwd, under_fwd):
        # per case, [S, n]: plain l=1, plain l=2, first l=1, first l=2
        plain1, plain2, first1, _first2 = np.asarray(values, dtype=np.float64).reshape(len(cases), s_count, n)
        slope = plain2 - plain1  # the first stage's slope is the plain one
        out.append((slope, plain1 - slope, first1 - slope))
    return out[0], out[1], out[2], out[3]


def _boundaries(model: ModelSpec, pool: Pool, settings: PoolSettings, options: list[Option], base: Layouts,
                dp: int) -> FloatArray:  # fmt: skip
    """[O, O]: one transfer (one direction, one micro-batch) across a boundary between a stage of
    option a (behind) and one of option b (in front): `pp_per_micro_batch_s` of a two-stage
    pipeline at the narrower TP, halved (it counts the forward and the backward transfer)."""
    groups = sorted({(o.member, o.tp) for o in options})
    cost: dict[tuple[tuple[int, int], tuple[int, int]], float] = {}
    by_link: dict[tuple[int, int], list[tuple[tuple[int, int], tuple[int, int]]]] = {}
    for ga in groups:
        for gb in groups:
            by_link.setdefault((min(ga[0], gb[0]), max(ga[0], gb[0])), []).append((ga, gb))
    for (a, b), items in by_link.items():
        cluster = pool.members[a].cluster if a == b else bridge_cluster(pool, a, b)
        tps = np.array([min(ga[1], gb[1]) for ga, gb in items], dtype=np.int64)
        lay = _rows(base, len(items), tp=tps, pp=2, dp=dp if a == b else 1, sequence_parallel=settings.sp(tps))
        both = pp_per_micro_batch_s(model, lay, cluster, settings.stack, np.zeros(len(items)))
        for pair, t in zip(items, both, strict=True):
            cost[pair] = float(t) / 2.0
    out = np.zeros((len(options), len(options)))
    for i, oa in enumerate(options):
        for j, ob in enumerate(options):
            out[i, j] = cost[((oa.member, oa.tp), (ob.member, ob.tp))]
    return out


__all__ = [
    "HEAD_PASSES",
    "POOL_ZERO",
    "Linear",
    "Option",
    "Pool",
    "PoolLink",
    "PoolMember",
    "PoolSettings",
    "StageTables",
    "bridge_cluster",
    "cross_link",
    "divisors",
    "member_options",
    "micro_batch_domain",
    "stage_tables",
]

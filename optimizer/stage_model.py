"""The CP-SAT model of a pool plan's pipeline stages, for one (DP, micro-batch), and its
brute-force twin.

A stage is decided by its *kind* -- GPU type, TP degree and recompute mode (an option o of the
tables) -- and its number of layers; the GPUs it uses follow (DP x TP of its type). The model
prices a pipeline of p stages, the last stage (s = 0, counting from the back) holding the LM head
and the first (s = p - 1) the embedding, as `plan_values` (the reference) does:

  slot_s   = c_o l_s + PP_g [+ head_o on the last stage]          per micro-batch, integer units
  PP_g     = 2 x the slowest boundary transfer a stage of (type, TP) group g can border in the
             plan: a link to any other group the plan uses, or to its own group when two or more
             stages use it (forward and backward, one micro-batch each; 0 for a lone stage).
             Exact for uniform pipelines (the uniform model's 2 x p2p), conservative otherwise,
             so that the order of the stages matters only for memory.
  M        = max_s slot_s                                 (the slowest stage: AddMaxEquality)
  W        = sum_s slot_s                                 (1F1B's fill and drain)
  tail_s   = optimizer step + the stage's DP traffic the overlap windows of M leave exposed
  step     = (m - 1) M + W + max_s tail_s   (= (m + p - 1) slot + tail for uniform stages)
  memory   stage s holds min(s + 1, m) micro-batches in flight (1F1B) and must fit its type.

Slots, tails and PP do not depend on where a stage sits, so stages of the same kind and layer
count are interchangeable: the model counts them instead of placing them. (A positional model --
per position a type, TP and layer variable -- was built first: with many positions CP-SAT proves
the same multiset of stages in every order, and it could not prove optimality beyond ~16 stages
within minutes; this formulation proves the 126-layer, 4,096-GPU instances in seconds.)

  variables  n[o, l] >= 0   middle stages of kind o with l layers               (per config)
             e[o, l], f[o, l] in {0, 1}: the last and the first stage's config; q[o]: a single
             stage (p = 1) of kind o holding all layers; p = 2 + sum n (or 1)
             K_o (the most layers a stage of kind o holds), PP_g, M, T
  layers     L sum q + sum l (n + e + f) = L
  GPUs       per type: sum DP TP_o (q + n + e + f) <= count               (the rest stays idle)
  memory     the last config fits at s = 0; the first at s = p - 1 (linear: its deepest position
             >= p - 1); the middles fill positions 1 .. p - 2, each as far back as it must
             (earliest deadline first): for every t, sum_{deepest(o, l) < t} n[o, l] <= t - 1
             (Hall's condition: then an order exists in which every stage fits)
  slots      K_o = max_l l [config (o, l) used]; slot_o = c_o K_o + PP_g(o) [+ head for q];
             M = max(slot_o, the last stage's slot)                       (AddMaxEquality)
  tail       T >= opt + max(0, DP_bwd - w_b M, DP_fwd - w_f M, both), per kind and role used at
             its largest layer count (the tail grows with the layers); linear, enforced
  objective  (m - 1) M + W + T; for the cost objective see `solve`

`brute_force` enumerates the same space the other way round -- every depth, every sequence of
options within the GPU counts, every split of the layers, each order checked for memory -- and
prices each plan with `plan_values`; the tests check that the two agree.
"""

from __future__ import annotations

import heapq
import itertools
import math
import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt
from ortools.sat.python import cp_model

from paraplan.stage_costs import Linear, StageTables

IntArray = npt.NDArray[np.int64]
Objective = Literal["time", "cost"]
Status = Literal["OPTIMAL", "INFEASIBLE", "FEASIBLE", "UNKNOWN"]
Expr = cp_model.LinearExprT
WINDOW_DEN = 1_000_000  # the DP windows' shares of the slot, as integer ratios n / WINDOW_DEN
TIME_RESOLUTION = 1e5  # the fastest option's per-layer time is at least this many units
MAX_UNIT_S = 1e-6
PRICE_RESOLUTION = 10_000  # integer prices: the dearest GPU type at this many units
MID, LAST, FIRST, SINGLE = 0, 1, 2, 3  # stage roles
ROLE_NAMES = ("middle", "last", "first", "single")


@dataclass(frozen=True)
class RoleLinear:
    """A position-independent per-stage quantity: slope[o] * layers + base[role, o]."""

    slope: IntArray  # [O]
    base: IntArray  # [4, O] by role

    def value(self, role: int, o: int, layers: int) -> int:
        return int(self.slope[o]) * layers + int(self.base[role, o])


@dataclass(frozen=True)
class IntTables:
    """The stage tables as integers: times in units of `unit_s`, memory in whole bytes."""

    unit_s: float
    layers: int
    micro_batches: int
    min_stages: int
    max_stages: int  # S: the deepest pipeline (<= layers)
    member: tuple[int, ...]  # per option: its GPU type
    group: tuple[int, ...]  # per option: its (type, TP) group (boundaries depend on nothing else)
    gpus: tuple[int, ...]  # per option: GPUs of its type one stage uses over all replicas (DP x TP)
    counts: tuple[int, ...]  # per type: GPUs available
    layer: IntArray  # [O] per micro-batch and layer
    head: IntArray  # [O] the LM head, forward and backward, per micro-batch
    group_link: IntArray  # [G, G] one boundary transfer between the groups (the slower direction)
    mem_slope: IntArray  # [S, O] bytes per layer at position s (in flight: min(s + 1, m))
    mem_base: IntArray  # [4, S, O] bytes by role (MID/LAST: plain intercepts, FIRST/SINGLE: first)
    usable: IntArray  # [O]
    optimizer: RoleLinear
    dp_bwd: RoleLinear
    dp_fwd: RoleLinear
    window_bwd: IntArray  # [O] share of M hiding dp_bwd, over WINDOW_DEN
    window_fwd: IntArray  # [O]
    price: tuple[int, ...] | None = None  # per type: integer price per GPU (cost objective)

    @property
    def options(self) -> int:
        return len(self.member)

    @property
    def groups(self) -> int:
        return int(self.group_link.shape[0])

    @staticmethod
    def of(t: StageTables, unit_s: float | None = None, min_stages: int = 1, max_stages: int | None = None,
           price: Sequence[float] | None = None) -> IntTables:  # fmt: skip
        unit = unit_s if unit_s is not None else time_unit(t)
        stages = min(t.stages, t.model.num_layers, max_stages if max_stages is not None else t.stages)

        def times(a: npt.NDArray[np.float64]) -> IntArray:
            return np.asarray(np.rint(np.asarray(a) / unit), dtype=np.int64)

        def role_linear(q: Linear) -> RoleLinear:
            second = min(1, q.slope.shape[0] - 1)
            base = np.stack([q.plain[second], q.plain[0], q.first[second], q.first[0]])
            return RoleLinear(times(q.slope[0]), times(base))

        groups = sorted({(o.member, o.tp) for o in t.options})
        gid = tuple(groups.index((o.member, o.tp)) for o in t.options)
        link = np.zeros((len(groups), len(groups)), dtype=np.int64)
        boundary = times(t.boundary_s)
        for i, gi in enumerate(gid):
            for j, gj in enumerate(gid):
                link[gi, gj] = max(link[gi, gj], boundary[i, j], boundary[j, i])
        mem = t.memory
        mem_base = np.stack([mem.plain, mem.plain, mem.first, mem.first])[:, :stages]
        int_price = None
        if price is not None:
            top = max(price) if max(price) > 0 else 1.0
            int_price = tuple(round(p / top * PRICE_RESOLUTION) for p in price)
        return IntTables(
            unit_s=unit, layers=t.model.num_layers, micro_batches=t.micro_batches, min_stages=min_stages,
            max_stages=stages, member=tuple(o.member for o in t.options), group=gid,
            gpus=tuple(t.dp * o.tp for o in t.options), counts=t.pool.counts, layer=times(t.layer_s),
            head=times(t.head_s), group_link=link, mem_slope=np.asarray(np.ceil(mem.slope[:stages]), dtype=np.int64),
            mem_base=np.asarray(np.ceil(mem_base), dtype=np.int64),
            usable=np.asarray(np.floor(t.usable_bytes), dtype=np.int64), optimizer=role_linear(t.optimizer),
            dp_bwd=role_linear(t.dp_bwd), dp_fwd=role_linear(t.dp_fwd),
            window_bwd=np.asarray(np.rint(t.overlap_bwd * WINDOW_DEN), dtype=np.int64),
            window_fwd=np.asarray(np.rint(t.overlap_fwd * WINDOW_DEN), dtype=np.int64), price=int_price,
        )  # fmt: skip

    def fits(self, role: int, s: int, o: int, layers: int) -> bool:
        """Does a stage of option o with `layers` layers, in `role`, fit at position s?"""
        return bool(self.mem_slope[s, o] * layers + self.mem_base[role, s, o] <= self.usable[o])

    def deepest(self, role: int) -> IntArray:
        """[O, L + 1]: the deepest position s >= 1 at which a stage of (o, layers) in `role` (MID or
        FIRST) fits, fitting at every position from 1 up to it; 0 where it fits at none. Memory
        grows with the position (more micro-batches in flight), so the fits form a prefix."""
        if self.max_stages < 2:
            return np.zeros((self.options, self.layers + 1), dtype=np.int64)
        count = np.arange(self.layers + 1, dtype=np.int64)
        need = self.mem_slope[1:, :, None] * count[None, None, :] + self.mem_base[role, 1:, :, None]
        prefix = np.cumprod(need <= self.usable[None, :, None], axis=0)
        out = np.asarray(prefix.sum(axis=0), dtype=np.int64)
        out[:, 0] = 0
        return out


def time_unit(t: StageTables) -> float:
    """Integer time unit: a power of ten that gives the fastest per-layer time at least
    TIME_RESOLUTION units (a relative resolution of 1e-5 on every term), at most a microsecond."""
    positive = t.layer_s[t.layer_s > 0]
    fastest = float(np.min(positive)) if positive.size else 1.0
    return min(MAX_UNIT_S, 10.0 ** math.floor(math.log10(fastest / TIME_RESOLUTION)))


@dataclass(frozen=True)
class StagePlan:
    """Stages front to back (index 0 holds the embedding, the last one the LM head)."""

    options: tuple[int, ...]
    layers: tuple[int, ...]
    objective: int  # integer step time (units), or cost

    @property
    def depth(self) -> int:
        return len(self.options)


@dataclass(frozen=True)
class Solved:
    status: Status
    plan: StagePlan | None
    wall_s: float
    branches: int = 0


# --- pricing a plan: the reference semantics ---------------------------------------------------------


def _ceil_div(a: IntArray, b: int) -> IntArray:
    return np.asarray(-((-a) // b), dtype=np.int64)


def roles(p: int) -> list[int]:
    """The role of each stage, front to back."""
    if p == 1:
        return [SINGLE]
    return [FIRST, *([MID] * (p - 2)), LAST]


def boundary_charge(it: IntTables, options: Sequence[int]) -> dict[int, int]:
    """PP_g for each (type, TP) group g the plan uses (see the module docstring)."""
    count: dict[int, int] = {}
    for o in options:
        count[it.group[o]] = count.get(it.group[o], 0) + 1
    out = {}
    for g in count:
        partners = [h for h in count if h != g or count[g] >= 2]
        out[g] = 2 * max((int(it.group_link[g, h]) for h in partners), default=0)
    return out


def plan_values(it: IntTables, options: Sequence[int], layers: IntArray) -> tuple[IntArray, npt.NDArray[np.bool_]]:
    """(step, feasible) of the plans with these options (front to back) for each row of `layers`
    ([n, p], front to back): the integer semantics the CP-SAT model optimizes. Memory is checked
    for this order of the stages; the price does not depend on the order."""
    p = len(options)
    n = layers.shape[0]
    role = roles(p)
    pp = boundary_charge(it, options)
    ok = np.ones(n, dtype=bool)
    slots = np.zeros((n, p), dtype=np.int64)
    for r, o in enumerate(options):
        s = p - 1 - r
        count = layers[:, r]
        if s >= it.max_stages:
            ok[:] = False
            continue
        ok &= it.mem_slope[s, o] * count + it.mem_base[role[r], s, o] <= it.usable[o]
        head = int(it.head[o]) if role[r] in (LAST, SINGLE) else 0
        slots[:, r] = int(it.layer[o]) * count + head + pp[it.group[o]]
    big = slots.max(axis=1)
    tail = np.zeros(n, dtype=np.int64)
    for r, o in enumerate(options):
        count = layers[:, r]
        opt = it.optimizer.slope[o] * count + it.optimizer.base[role[r], o]
        qb = it.dp_bwd.slope[o] * count + it.dp_bwd.base[role[r], o]
        qf = it.dp_fwd.slope[o] * count + it.dp_fwd.base[role[r], o]
        wb, wf = int(it.window_bwd[o]), int(it.window_fwd[o])
        eb = _ceil_div(WINDOW_DEN * qb - wb * big, WINDOW_DEN)
        ef = _ceil_div(WINDOW_DEN * qf - wf * big, WINDOW_DEN)
        both = _ceil_div(WINDOW_DEN * (qb + qf) - (wb + wf) * big, WINDOW_DEN)
        exposed = np.maximum(np.maximum(np.maximum(eb, ef), both), 0)
        tail = np.maximum(tail, opt + exposed)
    step = (it.micro_batches - 1) * big + slots.sum(axis=1) + tail
    return np.asarray(step, dtype=np.int64), ok


def used_gpus(it: IntTables, options: Sequence[int]) -> list[int]:
    used = [0] * len(it.counts)
    for o in options:
        used[it.member[o]] += it.gpus[o]
    return used


def plan_rate(it: IntTables, options: Sequence[int]) -> int:
    """sum_k price_k x GPUs_k of a plan (integer prices)."""
    if it.price is None:
        raise ValueError("the cost objective needs prices")
    return sum(u * p for u, p in zip(used_gpus(it, options), it.price, strict=True))


def plan_objective(it: IntTables, plan: StagePlan, objective: Objective = "time") -> int | None:
    """The integer objective of one plan in its order, None when it breaks a limit."""
    if not _fits_counts(it, plan.options) or sum(plan.layers) != it.layers or min(plan.layers) < 1:
        return None
    if not it.min_stages <= plan.depth <= it.max_stages:
        return None
    step, ok = plan_values(it, plan.options, np.asarray([plan.layers], dtype=np.int64))
    if not ok[0]:
        return None
    return int(step[0]) if objective == "time" else int(step[0]) * plan_rate(it, plan.options)


def _fits_counts(it: IntTables, options: Sequence[int]) -> bool:
    return all(u <= c for u, c in zip(used_gpus(it, options), it.counts, strict=True))


# --- brute force (tests, small instances) ---------------------------------------------------------


def compositions(total: int, parts: int) -> IntArray:
    """Every split of `total` layers into `parts` stages of at least one, as rows."""
    if parts == 1:
        return np.array([[total]], dtype=np.int64)
    rows = [np.diff(np.array((0, *cuts, total))) for cuts in itertools.combinations(range(1, total), parts - 1)]
    return np.asarray(rows, dtype=np.int64).reshape(-1, parts)


def _sequences(it: IntTables, p: int) -> Iterator[tuple[int, ...]]:
    """Option sequences of p stages within the GPU counts (depth first, pruned on the counts)."""
    budget = list(it.counts)
    prefix: list[int] = []

    def extend() -> Iterator[tuple[int, ...]]:
        if len(prefix) == p:
            yield tuple(prefix)
            return
        for o in range(it.options):
            k = it.member[o]
            if budget[k] >= it.gpus[o]:
                budget[k] -= it.gpus[o]
                prefix.append(o)
                yield from extend()
                prefix.pop()
                budget[k] += it.gpus[o]

    yield from extend()


def brute_force(it: IntTables, objective: Objective = "time") -> StagePlan | None:
    """The optimum by exhaustive enumeration of every plan in every order (exponential: for
    small instances and the tests)."""
    best: StagePlan | None = None
    for p in range(it.min_stages, it.max_stages + 1):
        splits = compositions(it.layers, p)
        for options in _sequences(it, p):
            step, ok = plan_values(it, options, splits)
            values = step if objective == "time" else step * plan_rate(it, options)
            values = np.where(ok, values, np.iinfo(np.int64).max)
            i = int(np.argmin(values))
            if ok[i] and (best is None or int(values[i]) < best.objective):
                best = StagePlan(options, tuple(int(v) for v in splits[i]), int(values[i]))
    return best


# --- the CP-SAT model -----------------------------------------------------------------------------


def solver_workers() -> int:
    return max(1, min(8, os.cpu_count() or 1))


class _CpModel(cp_model.CpModel):
    """CP-SAT's model without the deprecated CamelCase aliases (`AddMaxEquality`, ...) that
    `CpModel.__init__` binds on every instance: some 70 `setattr` calls, 0.16 ms a model, as
    long as building a small pool model itself (ortools 9.15; this module calls the snake_case
    names only). The model, its proto and so the solve are the same."""

    def _add_pre_pep8_methods(self) -> None:
        pass


@dataclass
class _Model:
    model: cp_model.CpModel
    mid: dict[tuple[int, int], cp_model.IntVar]
    last: dict[tuple[int, int], cp_model.IntVar]
    first: dict[tuple[int, int], cp_model.IntVar]
    single: dict[int, cp_model.IntVar]


def solve(it: IntTables, objective: Objective = "time", cutoff: int | None = None, time_limit_s: float = 120.0,
          workers: int | None = None, slot_cap: int | None = None, slot_floor: int = 0) -> Solved:  # fmt: skip
    """The optimal plan of these tables with its slowest slot in [slot_floor, slot_cap] (status
    OPTIMAL), or INFEASIBLE when none fits the GPUs and memory there, or none has an objective
    below `cutoff`. Without bounds on the slot, the optimum over every plan.

    The cost objective (step x rate, rate = sum_k price_k GPUs_k) is solved as a short sequence of
    linear models over the rate: the fastest plan P with a rate in [lo, hi] dominates every plan of
    that range with a higher rate (no faster, dearer per second), and every plan of the range
    costs at least lo x step(P); so the next model only looks at rates in [lo, rate(P) - 1], and
    the sequence stops when that bound reaches the best cost found."""
    if objective == "cost":
        return _solve_cost(it, cutoff, time_limit_s, workers, slot_cap, slot_floor)
    return _solve(it, cutoff, time_limit_s, workers, slot_cap, slot_floor, None)


def _solve(it: IntTables, cutoff: int | None, time_limit_s: float, workers: int | None, slot_cap: int | None,
           slot_floor: int, rates: tuple[int, int] | None, minimize_rate: bool = False) -> Solved:  # fmt: skip
    started = time.perf_counter()
    built = _build(it, cutoff, slot_cap, slot_floor, rates, minimize_rate)
    if built is None:
        return Solved("INFEASIBLE", None, time.perf_counter() - started)
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = workers or solver_workers()
    solver.parameters.max_time_in_seconds = time_limit_s
    # Measured (benchmarks/pool_speed.py, whole process): probing costs more than it saves on these
    # small models; presolve pays on the hardest one. The 70B pool (its winning pair needs 18k
    # conflicts without presolve) takes 7.5 s with presolve and no probing, 11.4 s with both,
    # 17.7 s with neither; the 405B pool 7.4, 6.9 and 5.4 s.
    solver.parameters.cp_model_probing_level = 0
    solver.parameters.log_search_progress = bool(os.environ.get("PARAPLAN_CPSAT_LOG"))
    status = solver.solve(built.model)
    wall = time.perf_counter() - started
    branches = int(solver.num_branches)
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        plan = _read(solver, it, built, round(solver.objective_value))
        return Solved("OPTIMAL" if status == cp_model.OPTIMAL else "FEASIBLE", plan, wall, branches)
    if status == cp_model.INFEASIBLE:
        return Solved("INFEASIBLE", None, wall, branches)
    return Solved("UNKNOWN", None, wall, branches)


def _solve_cost(it: IntTables, cutoff: int | None, time_limit_s: float, workers: int | None, slot_cap: int | None,
                slot_floor: int) -> Solved:  # fmt: skip
    """Branch and bound over the rate (see `solve`): a range [lo, hi] of rates whose plans are all
    at least s steps long costs at least lo x s; the range's lower half is solved for its fastest
    plan P (rates above P's in that half are dominated by P), the upper half keeps the parent's
    step bound with a higher rate bound; ranges are taken best bound first and dropped once their
    bound reaches the best cost found. The lowest rate of any plan that fits (a linear model of
    its own) is where the ranges start."""
    if it.price is None:
        raise ValueError("the cost objective needs prices")
    started = time.perf_counter()
    branches = 0
    floor_rate = _solve(it, None, time_limit_s, workers, slot_cap, slot_floor, None, minimize_rate=True)
    branches += floor_rate.branches
    if floor_rate.status == "INFEASIBLE" or floor_rate.plan is None:
        status: Status = "INFEASIBLE" if floor_rate.status == "INFEASIBLE" else floor_rate.status
        return Solved(status, None, time.perf_counter() - started, branches)
    lo = plan_rate(it, floor_rate.plan.options)
    hi = sum(p * c for p, c in zip(it.price, it.counts, strict=True))
    best: StagePlan | None = None
    bound = cutoff  # only plans that cost less than this are sought

    def fastest(low: int, high: int) -> Solved:
        nonlocal branches
        left = time_limit_s - (time.perf_counter() - started)  # the limit holds for the whole sequence
        if left <= 0:
            return Solved("UNKNOWN", None, 0.0)
        step_cut = None if bound is None else -(-bound // max(low, 1))  # a step at or above it costs >= bound
        found = _solve(it, step_cut, left, workers, slot_cap, slot_floor, (low, high))
        branches += found.branches
        return found

    def take(found: Solved) -> int | None:
        """Record the plan; its rate (None: no plan)."""
        nonlocal best, bound
        if found.plan is None:
            return None
        rate = plan_rate(it, found.plan.options)
        cost = found.plan.objective * rate
        if bound is None or cost < bound:
            best, bound = StagePlan(found.plan.options, found.plan.layers, cost), cost
        return rate

    top = fastest(lo, hi)
    if top.status not in ("OPTIMAL", "INFEASIBLE"):
        take(top)
        return Solved("FEASIBLE" if best else top.status, best, time.perf_counter() - started, branches)
    rate = take(top)
    ranges: list[tuple[int, int, int, int]] = []  # (bound, lo, hi, least step)
    if rate is not None and top.plan is not None:
        heapq.heappush(ranges, (lo * top.plan.objective, lo, rate - 1, top.plan.objective))
    while ranges:
        least, low, high, step = heapq.heappop(ranges)
        if low > high or (bound is not None and least >= bound):
            continue
        mid = (low + high) // 2
        half = fastest(low, mid)
        if half.status not in ("OPTIMAL", "INFEASIBLE"):
            take(half)
            return Solved("FEASIBLE" if best else half.status, best, time.perf_counter() - started, branches)
        rate = take(half)
        if rate is not None and half.plan is not None:
            heapq.heappush(ranges, (low * half.plan.objective, low, rate - 1, half.plan.objective))
        if mid + 1 <= high:
            heapq.heappush(ranges, ((mid + 1) * step, mid + 1, high, step))
    return Solved("OPTIMAL" if best is not None else "INFEASIBLE", best, time.perf_counter() - started, branches)


Config = tuple[int, int]  # (option, layers)


def _build(it: IntTables, cutoff: int | None, slot_cap: int | None, slot_floor: int = 0,
           rates: tuple[int, int] | None = None, minimize_rate: bool = False) -> _Model | None:  # fmt: skip
    S, L, m = it.max_stages, it.layers, it.micro_batches
    if max(it.min_stages, 1) > S:
        return None
    model = _CpModel()
    most = [min(S, it.counts[it.member[o]] // max(it.gpus[o], 1)) for o in range(it.options)]

    def room(o: int, extra: int) -> int:
        """Most layers a stage of o may hold under the slot cap."""
        return L if slot_cap is None else max(0, (slot_cap - extra) // max(int(it.layer[o]), 1))

    deep_mid, deep_first = it.deepest(MID), it.deepest(FIRST)
    mid: dict[Config, cp_model.IntVar] = {}
    used: dict[Config, cp_model.IntVar] = {}
    last: dict[Config, cp_model.IntVar] = {}
    first: dict[Config, cp_model.IntVar] = {}
    single: dict[int, cp_model.IntVar] = {}
    for o in range(it.options):
        if most[o] < 1:
            continue
        if it.min_stages <= 1 and it.fits(SINGLE, 0, o, L) and room(o, int(it.head[o])) >= L:
            single[o] = model.new_bool_var(f"q{o}")
        if S < 2:
            continue
        for n in range(1, min(L - 1, room(o, 0)) + 1):
            if it.fits(LAST, 0, o, n) and n <= room(o, int(it.head[o])):
                last[o, n] = model.new_bool_var(f"e{o}_{n}")
            if deep_first[o, n] >= 1:
                first[o, n] = model.new_bool_var(f"f{o}_{n}")
            top = int(min(most[o], deep_mid[o, n], S - 2))
            if L >= 3 and top >= 1:
                mid[o, n] = model.new_int_var(0, top, f"n{o}_{n}")
                used[o, n] = model.new_bool_var(f"u{o}_{n}")
                model.add(mid[o, n] <= top * used[o, n])
                model.add(mid[o, n] >= used[o, n])
    if not single and (not last or not first):
        return None
    staged = [*mid.items(), *last.items(), *first.items()]
    one = model.new_bool_var("single")
    model.add(sum(single.values()) == one)
    model.add(sum(last.values()) == 1 - one)
    model.add(sum(first.values()) == 1 - one)
    for v in mid.values():
        model.add(v == 0).only_enforce_if(one)
    depth = model.new_int_var(1, S, "p")
    model.add(depth == 2 - one + sum(mid.values()))
    model.add(depth >= it.min_stages)
    model.add(L * sum(single.values()) + sum(n * v for (_, n), v in staged) == L)
    for k, count in enumerate(it.counts):
        terms = [it.gpus[o] * v for (o, _), v in staged if it.member[o] == k]
        terms += [it.gpus[o] * v for o, v in single.items() if it.member[o] == k]
        if terms:
            model.add(sum(terms) <= count)
    # memory: the first stage at p - 1, the middles as far back as they must (Hall)
    model.add(sum(int(deep_first[c]) * v for c, v in first.items()) >= depth - 1).only_enforce_if(~one)
    for t in sorted({int(deep_mid[c]) + 1 for c in mid}):
        early = [v for c, v in mid.items() if deep_mid[c] < t]
        if early and t - 1 < S:
            model.add(sum(early) <= t - 1)
    # which kinds and (type, TP) groups are used, and how many stages each group has
    kind_used: dict[int, cp_model.IntVar] = {}
    for o in range(it.options):
        lits = [v for (oo, _), v in [*used.items(), *last.items(), *first.items()] if oo == o]
        lits += [single[o]] if o in single else []
        if lits:
            b = model.new_bool_var(f"k{o}")
            model.add_max_equality(b, lits)
            kind_used[o] = b
    group_used: dict[int, cp_model.IntVar] = {}
    group_count: dict[int, cp_model.IntVar] = {}
    for g in range(it.groups):
        kinds = [o for o in kind_used if it.group[o] == g]
        if not kinds:
            continue
        b = model.new_bool_var(f"g{g}")
        model.add_max_equality(b, [kind_used[o] for o in kinds])
        group_used[g] = b
        cnt = model.new_int_var(0, S, f"c{g}")
        model.add(cnt == sum(v for (o, _), v in staged if it.group[o] == g) + sum(single[o] for o in kinds
                                                                                    if o in single))  # fmt: skip
        group_count[g] = cnt
    link_max = int(it.group_link.max()) if it.group_link.size else 0
    pp: dict[int, cp_model.IntVar] = {}
    for g, b in group_used.items():
        charges: list[Expr] = [0]
        for h, bh in group_used.items():
            c = 2 * int(it.group_link[g, h])
            if c <= 0:
                continue
            both = model.new_bool_var(f"z{g}_{h}")
            if h != g:
                model.add_bool_and([b, bh]).only_enforce_if(both)
                model.add_bool_or([~b, ~bh]).only_enforce_if(~both)
            else:
                model.add(group_count[g] >= 2).only_enforce_if(both)
                model.add(group_count[g] <= 1).only_enforce_if(~both)
            charges.append(c * both)
        v = model.new_int_var(0, 2 * link_max, f"pp{g}")
        model.add_max_equality(v, charges)
        pp[g] = v
    # slots: the slowest through AddMaxEquality over the kinds' largest stages and the last stage
    slot_ub = L * int(it.layer.max()) + int(it.head.max()) + 2 * link_max
    if slot_cap is not None:
        slot_ub = min(slot_ub, slot_cap)
    if slot_floor > slot_ub:
        return None
    slowest = model.new_int_var(slot_floor, slot_ub, "M")
    elements: list[Expr] = []
    for o, b in kind_used.items():
        choices: list[Expr] = [n * v for (oo, n), v in [*used.items(), *first.items()] if oo == o]
        if o in single:
            choices.append(L * single[o])
        km = model.new_int_var(0, L, f"K{o}")
        if choices:
            model.add_max_equality(km, choices)
        else:
            model.add(km == 0)
        slot = model.new_int_var(0, slot_ub, f"slot{o}")
        own = int(it.layer[o]) * km + pp[it.group[o]]
        if o in single:
            own = own + int(it.head[o]) * single[o]
        model.add(slot == own).only_enforce_if(b)
        model.add(slot == 0).only_enforce_if(~b)
        elements.append(slot)
    last_slot = model.new_int_var(0, slot_ub, "slot_last")
    for (o, n), v in last.items():
        model.add(last_slot == int(it.layer[o]) * n + int(it.head[o]) + pp[it.group[o]]).only_enforce_if(v)
    model.add(last_slot == 0).only_enforce_if(one)
    elements.append(last_slot)
    model.add_max_equality(slowest, elements)
    # the sum of the slots: bodies, the LM head, each stage's boundary charge
    body: list[Expr] = [int(it.layer[o]) * n * v for (o, n), v in staged]
    body += [(int(it.layer[o]) * L + int(it.head[o])) * v for o, v in single.items()]
    body += [int(it.head[o]) * v for (o, _), v in last.items()]
    for g, cnt in group_count.items():
        w = model.new_int_var(0, S * 2 * link_max, f"ppw{g}")
        model.add_multiplication_equality(w, [cnt, pp[g]])
        body.append(w)
    fill = model.new_int_var(0, S * slot_ub, "W")
    model.add(fill == sum(body))
    # the tail: the largest stage of each kind and role bounds it (it grows with the layers)
    roles_used: list[tuple[int, int, cp_model.LinearExpr, cp_model.IntVar]] = []  # (role, option, layers, used)
    for o in kind_used:
        counted = [(n, v) for (oo, n), v in used.items() if oo == o]
        if counted:
            b = model.new_bool_var(f"km{o}")
            model.add_max_equality(b, [v for _, v in counted])
            lm = model.new_int_var(0, L, f"Lm{o}")
            model.add_max_equality(lm, [n * v for n, v in counted])
            roles_used.append((MID, o, lm, b))
        for role, table in ((LAST, last), (FIRST, first)):
            picks = [(n, v) for (oo, n), v in table.items() if oo == o]
            if picks:
                b = model.new_bool_var(f"r{role}_{o}")
                model.add(b == sum(v for _, v in picks))
                roles_used.append((role, o, cp_model.LinearExpr.weighted_sum([v for _, v in picks],
                                                                             [n for n, _ in picks]), b))  # fmt: skip
        if o in single:
            roles_used.append((SINGLE, o, L * single[o], single[o]))
    tail_ub = max([it.optimizer.value(r, o, L) + it.dp_bwd.value(r, o, L) + it.dp_fwd.value(r, o, L)
                   for r, o, _, _ in roles_used] + [0])  # fmt: skip
    tail = model.new_int_var(0, tail_ub, "T")
    for role, o, lay, b in roles_used:
        opt = lay * int(it.optimizer.slope[o]) + int(it.optimizer.base[role, o])
        qb = lay * int(it.dp_bwd.slope[o]) + int(it.dp_bwd.base[role, o])
        qf = lay * int(it.dp_fwd.slope[o]) + int(it.dp_fwd.base[role, o])
        wb, wf = int(it.window_bwd[o]), int(it.window_fwd[o])
        model.add(tail >= opt).only_enforce_if(b)
        model.add(WINDOW_DEN * tail >= WINDOW_DEN * (opt + qb) - wb * slowest).only_enforce_if(b)
        model.add(WINDOW_DEN * tail >= WINDOW_DEN * (opt + qf) - wf * slowest).only_enforce_if(b)
        model.add(WINDOW_DEN * tail >= WINDOW_DEN * (opt + qb + qf) - (wb + wf) * slowest).only_enforce_if(b)
    step = model.new_int_var(0, (m - 1) * slot_ub + S * slot_ub + tail_ub, "step")
    model.add(step == (m - 1) * slowest + fill + tail)
    if cutoff is not None:
        model.add(step <= cutoff - 1)
    if rates is not None or minimize_rate:
        if it.price is None:
            raise ValueError("the cost objective needs prices")
        rate: list[Expr] = [it.price[it.member[o]] * it.gpus[o] * v for (o, _), v in staged]
        rate += [it.price[it.member[o]] * it.gpus[o] * v for o, v in single.items()]
        if rates is not None:
            model.add_linear_constraint(sum(rate), rates[0], rates[1])
        if minimize_rate:
            model.minimize(sum(rate))
            return _Model(model, mid, last, first, single)
    model.minimize(step)
    return _Model(model, mid, last, first, single)


def _read(solver: cp_model.CpSolver, it: IntTables, built: _Model, value: int) -> StagePlan:
    """The plan in memory order: the last stage at the back, the middles from the back as far as
    each must sit (earliest deadline first: the least room first), the first stage at the front."""
    for o, v in built.single.items():
        if solver.boolean_value(v):
            return StagePlan((o,), (it.layers,), value)
    deep = it.deepest(MID)
    middles: list[tuple[int, int, int]] = []
    for (o, n), v in built.mid.items():
        middles += [(int(deep[o, n]), o, n)] * int(solver.value(v))
    middles.sort()
    back = [next(c for c, v in built.last.items() if solver.boolean_value(v))]
    back += [(o, n) for _, o, n in middles]
    back.append(next(c for c, v in built.first.items() if solver.boolean_value(v)))
    front = back[::-1]
    return StagePlan(tuple(o for o, _ in front), tuple(n for _, n in front), value)


# --- a lower bound on the slowest slot, for ordering and pruning the (DP, micro-batch) choices -----


def _knapsack(budget: int, items: list[tuple[int, int]]) -> int:
    """Most value with unbounded copies of (weight, value) items within `budget` (weights >= 1)."""
    dp = np.zeros(budget + 1, dtype=np.int64)
    for w, v in items:
        if v <= 0 or w > budget:
            continue
        rows = -(-(budget + 1) // w)
        pad = np.full(rows * w, np.iinfo(np.int64).min // 4, dtype=np.int64)
        pad[: budget + 1] = dp
        grid = pad.reshape(rows, w)  # grid[i, r] = dp[r + i w]
        idx = np.arange(rows, dtype=np.int64)[:, None]
        grid = np.maximum.accumulate(grid - idx * v, axis=0) + idx * v
        dp = np.maximum(dp, grid.reshape(-1)[: budget + 1])
    return int(dp.max())


def slot_lower_bound(it: IntTables) -> int | None:
    """The least slowest slot M at which the layers fit at all: a stage of option o holds at most
    min(floor(M / c_o), the most layers it fits at any position) layers, and each GPU type buys
    stages within its count (an unbounded knapsack per type). Boundaries, the LM head and memory
    positions only make it worse, so no plan has a smaller M. None: the layers never fit."""
    fits_any = (it.deepest(MID) >= 1) | (it.deepest(FIRST) >= 1)
    for o in range(it.options):
        for n in range(1, it.layers + 1):
            if it.fits(LAST, 0, o, n) or it.fits(SINGLE, 0, o, n):
                fits_any[o, n] = True
    most = np.where(fits_any, np.arange(it.layers + 1)[None, :], 0).max(axis=1)
    candidates = sorted({int(it.layer[o]) * k for o in range(it.options) for k in range(1, int(most[o]) + 1)})
    if not candidates:
        return None

    def covers(bound: int) -> bool:
        total = 0
        for k, count in enumerate(it.counts):
            items = [(it.gpus[o], int(min(most[o], bound // max(int(it.layer[o]), 1))))
                     for o in range(it.options) if it.member[o] == k]  # fmt: skip
            if items and count > 0:
                total += _knapsack(count, items)
        return total >= it.layers

    if not covers(candidates[-1]):
        return None
    lo, hi = 0, len(candidates) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if covers(candidates[mid]):
            hi = mid
        else:
            lo = mid + 1
    return candidates[lo]

"""The CP-SAT model of a pool plan's stages, for one (DP, micro-batch), and its brute-force twin.

Inputs: the integer tables of `IntTables.of(StageTables)` -- times in integer units of
`unit_s`, memory in whole bytes (rounded up), for every stage option o = (GPU type, TP,
recompute) and stage position s counted from the back (s = 0 is the last stage).

Variables, for every position s < S (S: the deepest pipeline admitted):
  a[s]      the stage exists (a pipeline of p stages uses positions 0 .. p-1: a[s+1] <= a[s]);
  x[s, o]   the stage runs option o (its GPU type and TP): sum_o x[s, o] = a[s];
  y[s, o]   its layers when it runs option o, else 0 (x <= y <= Lmax[s, o] x); the stage's layers
            l[s] = sum_o y[s, o], and sum_s l[s] = L;
  f[s] = a[s] - a[s+1]  the stage is the first (it holds the embedding); xf[s, o] <= x[s, o],
            sum_o xf[s, o] = f[s] (the first stage's option);
  GPUs      per type k: sum_{s, o of k} DP * TP_o * x[s, o] <= count_k (the rest stay idle).
Constraints (all linear):
  memory    sum_o slope[s,o] y[s,o] + (plain[s,o] - usable_o) x[s,o] + (first - plain)[s,o] xf[s,o] <= 0
            (one GPU of the stage, with min(s+1, m) micro-batches in flight under 1F1B);
  boundary  B[s] >= bnd[g, g'] (X[s, g] + X[s+1, g'] - 1) for the (type, TP) groups g behind and
            g' in front (X: sums of x over a group): one transfer across the boundary;
  pp[s] >= 2 B[s], pp[s] >= 2 B[s-1]: a stage waits on its slower link, forward and backward;
  slot[s] = sum_o c_o y[s,o] + [s = 0] sum_o head_o x[0,o] + pp[s]  (per micro-batch);
  M = max_s slot[s]                                        (AddMaxEquality: the slowest stage);
  tail      T >= opt[s] + eb[s] + ef[s], with den*eb[s] >= den*Qb[s] - nb_k M and eb >= 0 (the DP
            traffic not hidden by the backward windows of the slowest slot; ef likewise under the
            forward), enforced for the GPU type k the stage runs on.
Objective: step = (m - 1) * M + sum_s slot[s] + T -- 1F1B's fill and drain plus m - 1 slots of
the slowest stage, equal to (m + p - 1) * slot when the stages are uniform -- or, for the cost
objective, step * sum_k price_k * GPUs_k (AddMultiplicationEquality).

`brute_force` enumerates the same space (every depth, every option sequence within the GPU
counts, every split of the layers) and prices it with `plan_objective`, the same integer
arithmetic: the tests check that the two agree.
"""

from __future__ import annotations

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

IntMatrix = npt.NDArray[np.int64]
Objective = Literal["time", "cost"]
WINDOW_DEN = 1_000_000  # the DP windows' shares of the slot, as integer ratios n / WINDOW_DEN
TIME_RESOLUTION = 1e5  # the fastest option's per-layer time is at least this many units
MAX_UNIT_S = 1e-6


@dataclass(frozen=True)
class IntLinear:
    slope: IntMatrix  # [S, O]
    plain: IntMatrix
    first: IntMatrix


@dataclass(frozen=True)
class IntTables:
    """The stage tables as integers: times in units of `unit_s`, memory in bytes."""

    unit_s: float
    layers: int
    micro_batches: int
    stages: int  # S: the deepest pipeline
    min_stages: int
    member: tuple[int, ...]  # per option: its GPU type
    group: tuple[int, ...]  # per option: its (type, TP) group (boundaries depend on nothing else)
    gpus: tuple[int, ...]  # per option: GPUs of its type one stage uses over all replicas (DP x TP)
    counts: tuple[int, ...]  # per type: GPUs available
    layer: IntMatrix  # [O]
    head: IntMatrix  # [O]
    boundary: IntMatrix  # [O, O] (behind, in front)
    memory: IntLinear
    usable: IntMatrix  # [O]
    optimizer: IntLinear
    dp_bwd: IntLinear
    dp_fwd: IntLinear
    window_bwd: IntMatrix  # [O] numerator over WINDOW_DEN
    window_fwd: IntMatrix  # [O]
    price: tuple[int, ...] | None = None  # per type: integer price per GPU (cost objective)

    @property
    def options(self) -> int:
        return len(self.member)

    @staticmethod
    def of(t: StageTables, unit_s: float | None = None, min_stages: int = 1, max_stages: int | None = None,
           price: Sequence[float] | None = None) -> IntTables:  # fmt: skip
        unit = unit_s if unit_s is not None else time_unit(t)
        stages = t.stages if max_stages is None else min(max_stages, t.stages)

        def times(a: npt.NDArray[np.float64]) -> IntMatrix:
            return np.asarray(np.rint(np.asarray(a) / unit), dtype=np.int64)

        def linear(q: Linear, convert: str) -> IntLinear:
            f = (lambda a: np.asarray(np.ceil(a), dtype=np.int64)) if convert == "bytes" else times
            return IntLinear(f(q.slope[:stages]), f(q.plain[:stages]), f(q.first[:stages]))

        groups = sorted({(o.member, o.tp) for o in t.options})
        int_price = None
        if price is not None:
            top = max(price) if max(price) > 0 else 1.0
            int_price = tuple(int(round(p / top * 10_000)) for p in price)
        return IntTables(
            unit_s=unit, layers=t.model.num_layers, micro_batches=t.micro_batches, stages=stages,
            min_stages=min_stages, member=tuple(o.member for o in t.options),
            group=tuple(groups.index((o.member, o.tp)) for o in t.options),
            gpus=tuple(t.dp * o.tp for o in t.options), counts=t.pool.counts,
            layer=times(t.layer_s), head=times(t.head_s), boundary=times(t.boundary_s),
            memory=linear(t.memory, "bytes"), usable=np.asarray(np.floor(t.usable_bytes), dtype=np.int64),
            optimizer=linear(t.optimizer, "time"), dp_bwd=linear(t.dp_bwd, "time"), dp_fwd=linear(t.dp_fwd, "time"),
            window_bwd=np.asarray(np.rint(t.overlap_bwd * WINDOW_DEN), dtype=np.int64),
            window_fwd=np.asarray(np.rint(t.overlap_fwd * WINDOW_DEN), dtype=np.int64), price=int_price,
        )  # fmt: skip


def time_unit(t: StageTables) -> float:
    """Integer time unit: a power of ten that gives the fastest per-layer time at least
    TIME_RESOLUTION units (a relative resolution of 1e-5 on every term), at most a microsecond."""
    fastest = float(np.min(t.layer_s[t.layer_s > 0])) if np.any(t.layer_s > 0) else 1.0
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
    status: Literal["OPTIMAL", "INFEASIBLE", "FEASIBLE", "UNKNOWN"]
    plan: StagePlan | None
    wall_s: float
    branches: int = 0


def max_layers(it: IntTables) -> IntMatrix:
    """[S, O] the most layers a stage at position s can hold with option o (as a plain stage)."""
    room = it.usable[None, :] - np.minimum(it.memory.plain, it.memory.first)
    slope = np.maximum(it.memory.slope, 1)
    most = np.where(room >= it.memory.slope, room // slope, 0)
    return np.asarray(np.minimum(most, it.layers), dtype=np.int64)


# --- pricing a plan (the brute force and the check of every solver answer) ---------------------------


def _ceil_div(a: IntMatrix, b: int) -> IntMatrix:
    return np.asarray(-((-a) // b), dtype=np.int64)


def plan_values(it: IntTables, options: Sequence[int], layers: IntMatrix) -> tuple[IntMatrix, IntMatrix]:
    """(objective, feasible) of the plans with these options (front to back) and each row of
    `layers` ([n, p], front to back): the same integer arithmetic as the CP-SAT model."""
    p = len(options)
    n = layers.shape[0]
    opts = np.asarray(options, dtype=np.int64)
    s = np.arange(p - 1, -1, -1)  # back index of each stage
    first = np.zeros(p, dtype=bool)
    first[0] = True
    ok = np.ones(n, dtype=bool)
    slots = np.zeros((n, p), dtype=np.int64)
    pp = np.zeros(p, dtype=np.int64)
    for r in range(p):
        links = []
        if r > 0:
            links.append(int(it.boundary[opts[r], opts[r - 1]]))
        if r < p - 1:
            links.append(int(it.boundary[opts[r + 1], opts[r]]))
        pp[r] = 2 * max(links) if links else 0
    tail_parts: list[tuple[IntMatrix, IntMatrix, IntMatrix, int]] = []
    for r in range(p):
        o, sr = int(opts[r]), int(s[r])
        lr = layers[:, r]

        def value(q: IntLinear, o: int = o, sr: int = sr, r: int = r, lr: IntMatrix = lr) -> IntMatrix:
            base = q.first[sr, o] if first[r] else q.plain[sr, o]
            return np.asarray(q.slope[sr, o] * lr + base, dtype=np.int64)

        ok &= value(it.memory) <= it.usable[o]
        slots[:, r] = it.layer[o] * lr + (it.head[o] if sr == 0 else 0) + pp[r]
        tail_parts.append((value(it.optimizer), value(it.dp_bwd), value(it.dp_fwd), o))
    big = slots.max(axis=1)
    tail = np.zeros(n, dtype=np.int64)
    for opt, bwd, fwd, o in tail_parts:
        eb = np.maximum(_ceil_div(WINDOW_DEN * bwd - int(it.window_bwd[o]) * big, WINDOW_DEN), 0)
        ef = np.maximum(_ceil_div(WINDOW_DEN * fwd - int(it.window_fwd[o]) * big, WINDOW_DEN), 0)
        tail = np.maximum(tail, opt + eb + ef)
    step = (it.micro_batches - 1) * big + slots.sum(axis=1) + tail
    return np.asarray(step, dtype=np.int64), np.asarray(ok)


def plan_cost(it: IntTables, options: Sequence[int], step: IntMatrix) -> IntMatrix:
    assert it.price is not None
    used = [0] * len(it.counts)
    for o in options:
        used[it.member[o]] += it.gpus[o]
    rate = sum(u * p for u, p in zip(used, it.price, strict=True))
    return np.asarray(step * rate, dtype=np.int64)


def plan_objective(it: IntTables, plan: StagePlan, objective: Objective = "time") -> int | None:
    """The integer objective of one plan, None when it breaks a GPU count or memory."""
    if not _fits_counts(it, plan.options) or sum(plan.layers) != it.layers or min(plan.layers) < 1:
        return None
    step, ok = plan_values(it, plan.options, np.asarray([plan.layers], dtype=np.int64))
    if not ok[0]:
        return None
    return int(step[0]) if objective == "time" else int(plan_cost(it, plan.options, step)[0])


def _fits_counts(it: IntTables, options: Sequence[int]) -> bool:
    used = [0] * len(it.counts)
    for o in options:
        used[it.member[o]] += it.gpus[o]
    return all(u <= c for u, c in zip(used, it.counts, strict=True))


def compositions(total: int, parts: int) -> IntMatrix:
    """Every split of `total` layers into `parts` stages of at least one, as rows."""
    if parts == 1:
        return np.array([[total]], dtype=np.int64)
    rows = [
        np.diff(np.array((0, *cuts, total))) for cuts in itertools.combinations(range(1, total), parts - 1)
    ]
    return np.asarray(rows, dtype=np.int64).reshape(-1, parts)


def _sequences(it: IntTables, p: int) -> Iterator[tuple[int, ...]]:
    """Option sequences of p stages within the GPU counts (depth-first, pruned on the counts)."""
    budget = list(it.counts)

    def extend(prefix: list[int]) -> Iterator[tuple[int, ...]]:
        if len(prefix) == p:
            yield tuple(prefix)
            return
        for o in range(it.options):
            k = it.member[o]
            if budget[k] >= it.gpus[o]:
                budget[k] -= it.gpus[o]
                prefix.append(o)
                yield from extend(prefix)
                prefix.pop()
                budget[k] += it.gpus[o]

    yield from extend([])


def brute_force(it: IntTables, objective: Objective = "time") -> StagePlan | None:
    """The optimum by exhaustive enumeration (exponential: for small instances and tests)."""
    best: StagePlan | None = None
    for p in range(it.min_stages, it.stages + 1):
        if p > it.layers:
            break
        splits = compositions(it.layers, p)
        for options in _sequences(it, p):
            step, ok = plan_values(it, options, splits)
            values = step if objective == "time" else plan_cost(it, options, step)
            values = np.where(ok, values, np.iinfo(np.int64).max)
            i = int(np.argmin(values))
            if ok[i] and (best is None or int(values[i]) < best.objective):
                best = StagePlan(options, tuple(int(v) for v in splits[i]), int(values[i]))
    return best


def enumeration_size(it: IntTables) -> int:
    """How many (option sequence, split) pairs `brute_force` prices."""
    total = 0
    for p in range(it.min_stages, min(it.stages, it.layers) + 1):
        total += sum(1 for _ in _sequences(it, p)) * math.comb(it.layers - 1, p - 1)
    return total


# --- the CP-SAT model ---------------------------------------------------------------------------------


def solver_workers() -> int:
    return max(1, min(8, os.cpu_count() or 1))


def solve(it: IntTables, objective: Objective = "time", cutoff: int | None = None, time_limit_s: float = 60.0,
          workers: int | None = None, slot_cap: int | None = None, slot_floor: int = 0) -> Solved:  # fmt: skip
    """The optimal plan of these tables (status OPTIMAL), or INFEASIBLE when none fits (or none
    beats `cutoff`: only plans with an objective below it are sought)."""
    started = time.perf_counter()
    built = _build(it, objective, cutoff, slot_cap, slot_floor)
    if built is None:
        return Solved("INFEASIBLE", None, time.perf_counter() - started)
    model, x, y, goal = built
    solver = cp_model.CpSolver()
    solver.parameters.num_workers = workers or solver_workers()
    solver.parameters.max_time_in_seconds = time_limit_s
    solver.parameters.log_search_progress = bool(os.environ.get("PARAPLAN_CPSAT_LOG"))
    status = solver.solve(model)
    wall = time.perf_counter() - started
    if status == cp_model.OPTIMAL:
        plan = _read(solver, it, x, y, int(round(solver.objective_value)))
        return Solved("OPTIMAL", plan, wall, int(solver.num_branches))
    if status == cp_model.INFEASIBLE:
        return Solved("INFEASIBLE", None, wall, int(solver.num_branches))
    if status == cp_model.FEASIBLE:
        plan = _read(solver, it, x, y, int(round(solver.objective_value)))
        return Solved("FEASIBLE", plan, wall, int(solver.num_branches))
    if status == cp_model.UNKNOWN:
        return Solved("UNKNOWN", None, wall, int(solver.num_branches))
    raise RuntimeError(f"CP-SAT stopped without proof ({solver.status_name(status)}) after {wall:.1f} s")


Vars = dict[tuple[int, int], cp_model.IntVar]


def _build(it: IntTables, objective: Objective, cutoff: int | None,
           slot_cap: int | None = None,
           slot_floor: int = 0) -> tuple[cp_model.CpModel, Vars, Vars, cp_model.IntVar] | None:  # fmt: skip
    S, L, m = min(it.stages, it.layers), it.layers, it.micro_batches
    if S < it.min_stages or S < 1:
        return None
    lmax = max_layers(it)
    if slot_cap is not None:
        by_time = slot_cap // np.maximum(it.layer, 1)
        lmax = np.minimum(lmax, by_time[None, :])
    model = cp_model.CpModel()
    O = it.options
    a = [model.new_constant(1) if s < it.min_stages else model.new_bool_var(f"a{s}") for s in range(S)]
    for s in range(S - 1):
        model.add_implication(a[s + 1], a[s])
    x: Vars = {}
    y: Vars = {}
    xf: Vars = {}
    for s in range(S):
        for o in range(O):
            if lmax[s, o] < 1:
                continue
            x[s, o] = model.new_bool_var(f"x{s}_{o}")
            y[s, o] = model.new_int_var(0, int(lmax[s, o]), f"y{s}_{o}")
            model.add(y[s, o] >= x[s, o])
            model.add(y[s, o] <= int(lmax[s, o]) * x[s, o])
            xf[s, o] = model.new_bool_var(f"f{s}_{o}")
            model.add_implication(xf[s, o], x[s, o])
        here = [o for o in range(O) if (s, o) in x]
        model.add(sum(x[s, o] for o in here) == a[s])
        following = a[s + 1] if s + 1 < S else 0
        model.add(sum(xf[s, o] for o in here) == a[s] - following)
    model.add(sum(y.values()) == L)
    for k, count in enumerate(it.counts):
        mine = [(key, it.gpus[key[1]]) for key in x if it.member[key[1]] == k]
        if mine and sum(g for _, g in mine) > count:
            model.add(sum(g * x[key] for key, g in mine) <= count)
    # memory of one GPU of each stage
    for s in range(S):
        here = [o for o in range(O) if (s, o) in x]
        mem = it.memory
        model.add(
            sum(int(mem.slope[s, o]) * y[s, o] + int(mem.plain[s, o] - it.usable[o]) * x[s, o]
                + int(mem.first[s, o] - mem.plain[s, o]) * xf[s, o] for o in here) <= 0
        )  # fmt: skip
    # per (type, TP) group selection, boundaries and their transfers
    n_groups = max(it.group) + 1
    gsel: dict[tuple[int, int], cp_model.LinearExprT] = {}
    for s in range(S):
        for g in range(n_groups):
            members = [x[s, o] for o in range(O) if (s, o) in x and it.group[o] == g]
            if members:
                gsel[s, g] = sum(members)
    gcost = np.zeros((n_groups, n_groups), dtype=np.int64)
    for o in range(O):
        for q in range(O):
            gcost[it.group[o], it.group[q]] = it.boundary[o, q]
    bmax = int(gcost.max()) if gcost.size else 0
    boundary = []
    for s in range(S - 1):
        b = model.new_int_var(0, bmax, f"b{s}")
        boundary.append(b)
        low = int(gcost.min())
        for g in range(n_groups):
            for h in range(n_groups):
                c = int(gcost[g, h])
                if c <= 0 or (s, g) not in gsel or (s + 1, h) not in gsel:
                    continue
                if c <= low:
                    model.add(b >= c * a[s + 1])
                else:
                    model.add(b >= c * (gsel[s, g] + gsel[s + 1, h] - 1))
    slot_ub = int(L * int(it.layer.max()) + int(it.head.max()) + 2 * bmax)
    slots = []
    for s in range(S):
        here = [o for o in range(O) if (s, o) in x]
        body = sum(int(it.layer[o]) * y[s, o] for o in here)
        if s == 0:
            body += sum(int(it.head[o]) * x[s, o] for o in here)
        if S > 1:
            pp = model.new_int_var(0, 2 * bmax, f"pp{s}")
            if s < S - 1:
                model.add(pp >= 2 * boundary[s])
            if s > 0:
                model.add(pp >= 2 * boundary[s - 1])
            body += pp
        slot = model.new_int_var(0, slot_ub, f"slot{s}")
        model.add(slot == body)
        slots.append(slot)
    big = model.new_int_var(slot_floor, slot_ub if slot_cap is None else min(slot_ub, slot_cap), "slowest")
    model.add_max_equality(big, slots)
    # the per-step tail: optimizer step and the DP traffic the windows leave exposed
    tail_ub = 0
    tails = []
    for s in range(S):
        here = [o for o in range(O) if (s, o) in x]

        def linear(q: IntLinear, s: int = s, here: list[int] = here) -> cp_model.LinearExprT:
            return sum(int(q.slope[s, o]) * y[s, o] + int(q.plain[s, o]) * x[s, o]
                       + int(q.first[s, o] - q.plain[s, o]) * xf[s, o] for o in here)  # fmt: skip

        def upper(q: IntLinear, s: int = s, here: list[int] = here) -> int:
            return max([int(q.slope[s, o]) * L + max(int(q.plain[s, o]), int(q.first[s, o])) for o in here], default=0)

        hi_b, hi_f, hi_o = upper(it.dp_bwd), upper(it.dp_fwd), upper(it.optimizer)
        tail_ub = max(tail_ub, hi_b + hi_f + hi_o)
        eb = model.new_int_var(0, max(hi_b, 0), f"eb{s}")
        ef = model.new_int_var(0, max(hi_f, 0), f"ef{s}")
        qb, qf = linear(it.dp_bwd), linear(it.dp_fwd)
        for k in range(len(it.counts)):
            mine = [o for o in here if it.member[o] == k]
            if not mine:
                continue
            on = model.new_bool_var(f"t{s}_{k}")
            model.add(sum(x[s, o] for o in mine) == on)
            wb, wf = int(it.window_bwd[mine[0]]), int(it.window_fwd[mine[0]])
            model.add(WINDOW_DEN * eb >= WINDOW_DEN * qb - wb * big).only_enforce_if(on)
            model.add(WINDOW_DEN * ef >= WINDOW_DEN * qf - wf * big).only_enforce_if(on)
        tails.append(linear(it.optimizer) + eb + ef)
    tail = model.new_int_var(0, max(tail_ub, 0), "tail")
    for t in tails:
        model.add(tail >= t)
    # redundant, for the proof: K_o, the most layers a stage of option o holds, is at most
    # M / c_o; the option's n_o stages hold at most n_o * K_o layers (integral: floor(M / c_o))
    for o in range(O):
        keys = [(s, o) for s in range(S) if (s, o) in x]
        if not keys or it.layer[o] <= 0:
            continue
        k = it.member[o]
        most_stages = min(len(keys), it.counts[k] // max(it.gpus[o], 1))
        most_layers = int(max(lmax[s, o] for s, _ in keys))
        n_o = model.new_int_var(0, most_stages, f"n{o}")
        model.add(n_o == sum(x[key] for key in keys))
        k_o = model.new_int_var(0, most_layers, f"k{o}")
        model.add(int(it.layer[o]) * k_o <= big)
        for key in keys:
            model.add(y[key] <= k_o)
        held = model.new_int_var(0, most_stages * most_layers, f"h{o}")
        model.add_multiplication_equality(held, [n_o, k_o])
        model.add(sum(y[key] for key in keys) <= held)
    step_ub = (m - 1) * slot_ub + S * slot_ub + tail_ub
    step = model.new_int_var(0, step_ub, "step")
    model.add(step == (m - 1) * big + sum(slots) + tail)
    goal = step
    if objective == "cost":
        if it.price is None:
            raise ValueError("the cost objective needs prices")
        rate_terms = [it.price[it.member[o]] * it.gpus[o] * x[s, o] for (s, o) in x]
        rate_ub = sum(p * c for p, c in zip(it.price, it.counts, strict=True))
        rate = model.new_int_var(0, rate_ub, "rate")
        model.add(rate == sum(rate_terms))
        goal = model.new_int_var(0, step_ub * rate_ub, "cost")
        model.add_multiplication_equality(goal, [step, rate])
    if cutoff is not None:
        model.add(goal <= cutoff - 1)
    model.minimize(goal)
    return model, x, y, goal


def _read(solver: cp_model.CpSolver, it: IntTables, x: Vars, y: Vars, value: int) -> StagePlan:
    chosen: dict[int, tuple[int, int]] = {}
    for (s, o), var in x.items():
        if solver.boolean_value(var):
            chosen[s] = (o, int(solver.value(y[s, o])))
    back = [chosen[s] for s in sorted(chosen)]
    front = back[::-1]
    return StagePlan(tuple(o for o, _ in front), tuple(n for _, n in front), value)


# --- a lower bound on the slowest slot (for pruning and as a valid cut) ---------------------------


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
    """The least slowest-slot M for which the layers fit at all: each stage of option o holds at
    most min(floor(M / c_o), its memory's most layers at any position) layers, and each GPU type
    buys stages within its count (an unbounded knapsack per type). Boundaries, the LM head and
    the tail only add to a slot, and the positions' memory is taken at its most generous, so no
    plan has a smaller M. None: no M fits the layers."""
    lmax = max_layers(it)
    most = lmax.max(axis=0) if lmax.size else np.zeros(it.options, dtype=np.int64)
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

"""The search: an OR-Tools CP-SAT model over the layout knobs, exact top-k.

Model. The cost model is evaluated once, vectorized, over every candidate of the space
(`optimizer.space`), for every GPU count the user allows. Candidates are sorted by the objective
(step time, or cost) with the deterministic tie-break of `optimizer.rank`, so the position `i`
of a candidate in that order *is* its objective value. CP-SAT then decides `i` with one variable
per knob -- tp, pp, dp, cp, ep, micro-batch, virtual stages, recompute, ZeRO, sequence
parallelism, GPU count -- tied to `i` by element constraints (knob = column[i]), plus the
per-GPU memory and training-time columns. On these variables sit the hard constraints
(TP*PP*DP*CP = GPUs, TP divides the heads and KV heads, PP*VPP <= layers, DP*micro-batch divides
the global batch, memory within capacity less headroom) and every user constraint (fixed knobs,
--max-tp, --min-dp, --max-pp, --tp-within-node, --mem-headroom, a deadline for T tokens).
Objective: minimize i.

Top-k. Over the first n candidates CP-SAT enumerates every index that satisfies the model (a
complete search, so none is missed); the k smallest are the exact k best, in order. Because the
candidates are sorted, a model over the first n of them already decides the top-k whenever it
finds k answers there: any candidate beyond n ranks lower. The search starts with n = 4k and
quadruples n only when the constraints leave fewer than k answers in the prefix, so tight
constraints cost more solves, loose ones few.

The structural rules that `optimizer.space` uses to enumerate (TP within a node and dividing
the heads, CP splitting the sequence, EP dividing the experts) are stated again as constraints;
candidates the cost model marks over the physical memory capacity are dropped before solving
(no headroom could admit them).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, fields

import numpy as np
import numpy.typing as npt
from ortools.sat.python import cp_model

from paraplan.cost_models.evaluate import Evaluation, evaluate, usable_memory_bytes
from paraplan.cost_models.layout import Layouts
from paraplan.cost_models.tco import usd_per_gpu_hour
from paraplan.rank import closest, order_keys, ranking_keys
from paraplan.scenario import Choice, Scenario
from paraplan.space import candidate_space, divisors

PREFIX_PER_ANSWER = 4
GROWTH = 4
MS = 1000.0


@dataclass(frozen=True)
class Constraints:
    """User constraints beyond fixed knobs (those live in `Scenario.knobs`)."""

    max_tp: int | None = None
    min_dp: int | None = None
    max_pp: int | None = None
    tp_within_node: bool = False
    deadline_days: float | None = None
    tokens: float | None = None
    objective: str = "time"  # or "cost"

    def describe(self) -> list[str]:
        out = []
        for f in fields(self):
            value = getattr(self, f.name)
            if value not in (None, False) and f.name != "objective":
                flag = f"--{f.name.replace('_', '-')}"
                out.append(flag if value is True else f"{flag} {value}")
        return out


@dataclass(frozen=True)
class SearchResult:
    status: str  # OPTIMAL, INFEASIBLE
    wall_s: float  # the CP-SAT solves alone
    candidates: int  # layouts enumerated and evaluated
    choices: list[Choice]
    reason: str | None = None


@dataclass(frozen=True)
class Table:
    """Evaluated candidates within physical memory, sorted best first by the objective."""

    layouts: Layouts
    gpus: npt.NDArray[np.int64]
    memory_bytes: npt.NDArray[np.int64]
    train_ms: npt.NDArray[np.int64]
    enumerated: int
    closest: Choice | None  # the best infeasible candidate when nothing fits


def gpu_count_domain(lo: int, hi: int, per_node: int) -> list[int]:
    """GPU counts a range admits: whole nodes (or one partial node) of the form 2^a or 3*2^a.

    Layout degrees are products of small factors; counts with a large prime factor only admit
    degenerate layouts. Powers of two and 1.5x powers of two cover the sizes clusters are built
    in (256, 384, 512, 768, ...) at two counts per doubling.
    """
    counts = set()
    value = 1
    while value <= hi:
        for count in (value, 3 * value):
            if lo <= count <= hi and (count % per_node == 0 or count < per_node):
                counts.add(count)
        value *= 2
    if not counts:
        counts = {c for c in (lo, hi) if c % per_node == 0 or c < per_node} or {lo}
    return sorted(counts)


CP_MAX = 2**62  # CP-SAT integer domains stay within +-2^62


def _cp_int(values: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
    """Whole numbers for a CP-SAT column; overflowing or undefined values become the ceiling,
    which no constraint admits."""
    clean = np.nan_to_num(values, nan=CP_MAX, posinf=CP_MAX, neginf=0.0)
    return np.asarray(np.minimum(clean, CP_MAX), dtype=np.float64).astype(np.int64)


def _concat(parts: list[Layouts]) -> Layouts:
    return Layouts(**{f.name: np.concatenate([getattr(p, f.name) for p in parts]) for f in fields(Layouts)})


def build_table(scenario: Scenario, gpu_counts: list[int], cons: Constraints) -> Table:
    layouts, keys, objectives, steps_s, memory, train, enumerated = [], [], [], [], [], [], 0
    closest_choice: Choice | None = None
    tokens = cons.tokens
    for gpus in gpu_counts:
        space = candidate_space(scenario.model, scenario.cluster, gpus, scenario.knobs, scenario.stack.flash_attention)
        enumerated += len(space)
        if len(space) == 0:
            continue
        ev = evaluate(scenario.model, scenario.cluster, space, scenario.stack, 0.0)
        keep = np.ones(len(space), dtype=bool)
        for mask in ev.checks.values():
            keep &= ~mask
        if not keep.any():
            closest_choice = _closer(closest_choice, ev)
            continue
        sub = space.take(np.nonzero(keep)[0])
        layouts.append(sub)
        step = ev.step_time_s[keep]
        objectives.append(step if cons.objective == "time" else step * gpus * usd_per_gpu_hour(scenario.cluster))
        steps_s.append(step)
        keys.append([k[keep] for k in order_keys(ev)[1:]])
        memory.append(_cp_int(ev.memory.total[keep]))
        steps = tokens / (scenario.knobs.global_batch * scenario.knobs.seq_len) if tokens else 0.0
        train.append(_cp_int(np.ceil(step * steps * MS)))
    if not layouts:
        empty = np.zeros(0, dtype=np.int64)
        return Table(Layouts.empty(), empty, empty, empty, enumerated, closest_choice)
    merged = _concat(layouts)
    tiebreak = [np.concatenate([k[j] for k in keys]) for j in range(len(keys[0]))]
    columns = ranking_keys(np.concatenate(objectives), np.concatenate(steps_s), tiebreak, cons.objective == "cost")
    order = np.lexsort(columns[::-1])
    ordered = merged.take(order)
    gpus_col = (ordered.tp * ordered.pp * ordered.dp * ordered.cp).astype(np.int64)
    return Table(ordered, gpus_col, np.concatenate(memory)[order], np.concatenate(train)[order], enumerated, None)


def _closer(current: Choice | None, ev: Evaluation) -> Choice:
    i = closest(ev)
    if current is None:
        return Choice(ev, i)
    old = current.evaluation.memory_overflow_bytes[current.index]
    return Choice(ev, i) if ev.memory_overflow_bytes[i] < old else current


class _Model:
    """CP-SAT model over the first n rows of the table."""

    def __init__(self, scenario: Scenario, table: Table, n: int, cons: Constraints, skip: str | None = None):
        self.model = cp_model.CpModel()
        m = self.model
        self.index = m.new_int_var(0, n - 1, "candidate")
        lay = table.layouts
        self.bounds: dict[str, tuple[int, int]] = {}
        self.var: dict[str, cp_model.IntVar] = {}
        self.var |= {
            name: self._column(name, column[:n])
            for name, column in (
                ("tp", lay.tp), ("pp", lay.pp), ("dp", lay.dp), ("cp", lay.cp), ("ep", lay.ep),
                ("micro_batch", lay.micro_batch), ("virtual_stages", lay.virtual_stages),
                ("recompute", lay.recompute), ("recompute_layers", lay.recompute_layers), ("zero", lay.zero),
                ("sequence_parallel", lay.sequence_parallel.astype(np.int64)),
                ("gpus", table.gpus), ("memory", table.memory_bytes), ("train_ms", table.train_ms),
            )
        }
        self._structure(scenario)
        self._user(scenario, cons, skip)

    def _column(self, name: str, values: npt.NDArray[np.int64]) -> cp_model.IntVar:
        as_list = [int(v) for v in values]
        var = self.model.new_int_var_from_domain(cp_model.Domain.from_values(sorted(set(as_list))), name)
        self.model.add_element(self.index, as_list, var)
        self.bounds[name] = (min(as_list), max(as_list))
        return var

    def _product(self, name: str, a: str, b: str) -> cp_model.IntVar:
        """A new variable for the product of two positive ones."""
        lo = self.bounds[a][0] * self.bounds[b][0]
        hi = self.bounds[a][1] * self.bounds[b][1]
        out = self.model.new_int_var(lo, hi, name)
        self.model.add_multiplication_equality(out, [self.var[a], self.var[b]])
        self.var[name], self.bounds[name] = out, (lo, hi)
        return out

    def _within(self, name: str, values: list[int]) -> None:
        self.model.add_linear_expression_in_domain(self.var[name], cp_model.Domain.from_values(values))

    def _structure(self, sc: Scenario) -> None:
        m, v = self.model, self.var
        self._product("tp_pp", "tp", "pp")
        self._product("tp_pp_dp", "tp_pp", "dp")
        m.add_multiplication_equality(v["gpus"], [v["tp_pp_dp"], v["cp"]])
        heads = math.gcd(sc.model.num_heads, sc.model.num_kv_heads)
        self._within("tp", [d for d in divisors(heads) if sc.cluster.gpus_per_node % d == 0])
        self._within("ep", divisors(sc.model.num_experts))
        m.add(self._product("pp_vpp", "pp", "virtual_stages") <= sc.model.num_layers)
        self._product("dp_mb", "dp", "micro_batch")
        self._within("dp_mb", divisors(sc.knobs.global_batch))

    def _user(self, sc: Scenario, cons: Constraints, skip: str | None) -> None:
        m, v = self.model, self.var
        if skip != "mem_headroom":
            m.add(v["memory"] <= int(usable_memory_bytes(sc.cluster, sc.mem_headroom)))
        if cons.max_tp is not None and skip != "max_tp":
            m.add(v["tp"] <= cons.max_tp)
        if cons.min_dp is not None and skip != "min_dp":
            m.add(v["dp"] >= cons.min_dp)
        if cons.max_pp is not None and skip != "max_pp":
            m.add(v["pp"] <= cons.max_pp)
        if cons.tp_within_node and skip != "tp_within_node":
            m.add(v["tp"] <= sc.cluster.gpus_per_node)
            m.add_modulo_equality(0, sc.cluster.gpus_per_node, v["tp"])
        if cons.deadline_days is not None and cons.tokens and skip != "deadline_days":
            m.add(v["train_ms"] <= math.floor(cons.deadline_days * 86400 * MS))


def search(scenario: Scenario, gpu_counts: list[int], cons: Constraints, top: int) -> SearchResult:
    return solve(scenario, build_table(scenario, gpu_counts, cons), cons, top)


def solve(scenario: Scenario, table: Table, cons: Constraints, top: int) -> SearchResult:
    if len(table.layouts) == 0:
        return SearchResult("INFEASIBLE", 0.0, table.enumerated, [], _no_fit_reason(scenario, table))
    started = time.perf_counter()
    found = _solve_top(scenario, table, cons, top)
    wall = time.perf_counter() - started
    if not found:
        return SearchResult("INFEASIBLE", wall, table.enumerated, [], _binding_reason(scenario, table, cons))
    picked = table.layouts.take(np.asarray(found, dtype=np.int64))
    ev = evaluate(scenario.model, scenario.cluster, picked, scenario.stack, scenario.mem_headroom)
    return SearchResult("OPTIMAL", wall, table.enumerated, [Choice(ev, i) for i in range(len(found))])


class _Collector(cp_model.CpSolverSolutionCallback):
    def __init__(self, index: cp_model.IntVar):
        super().__init__()
        self.index = index
        self.found: list[int] = []

    def on_solution_callback(self) -> None:
        self.found.append(int(self.value(self.index)))


def _solve_top(scenario: Scenario, table: Table, cons: Constraints, top: int, skip: str | None = None) -> list[int]:
    """The `top` smallest candidate indices that satisfy the model, exactly.

    Over a prefix of the sorted table CP-SAT enumerates every satisfying index (a complete
    search: status OPTIMAL means none was missed); if the prefix holds `top` of them they are
    the answer, since every candidate past the prefix ranks lower. Otherwise the prefix grows.
    """
    n_total = len(table.layouts)
    n = min(PREFIX_PER_ANSWER * top, n_total)
    while True:
        built = _Model(scenario, table, n, cons, skip)
        solver = cp_model.CpSolver()
        solver.parameters.num_workers = 1
        solver.parameters.enumerate_all_solutions = True
        collector = _Collector(built.index)
        status = solver.solve(built.model, collector)
        if status not in (cp_model.OPTIMAL, cp_model.INFEASIBLE):
            raise RuntimeError(f"CP-SAT stopped with status {solver.status_name(status)}")
        found = sorted(set(collector.found))
        if len(found) >= top or n >= n_total:
            return found[:top]
        n = min(n_total, n * GROWTH)


def _binding_reason(scenario: Scenario, table: Table, cons: Constraints) -> str:
    """Which single constraint, dropped, would let a layout through."""
    candidates = [c for c in ("max_tp", "min_dp", "max_pp", "tp_within_node", "deadline_days") if getattr(cons, c)]
    if scenario.mem_headroom > 0:
        candidates.append("mem_headroom")
    binding = [c for c in candidates if _solve_top(scenario, table, cons, 1, skip=c)]
    if binding:
        names = ", ".join("--" + c.replace("_", "-") for c in binding)
        which = f"dropping {names}" if len(binding) == 1 else f"dropping any one of {names}"
        return f"no layout meets all constraints; {which} would admit one"
    return "no layout meets all the constraints together (" + ", ".join(cons.describe() or ["fixed knobs"]) + ")"


def _no_fit_reason(scenario: Scenario, table: Table) -> str:
    if table.closest is None:
        return "no layout of these GPUs meets the structural rules (heads, layers, batch divisibility)"
    ch = table.closest
    lay = ch.evaluation.layouts.at(ch.index)
    # The table is evaluated at zero headroom; the message quotes the user's usable memory.
    ev = evaluate(scenario.model, scenario.cluster, Layouts.of([lay]), scenario.stack, scenario.mem_headroom)
    return (
        f"no layout fits {scenario.model.name} on {lay.gpus} x {scenario.cluster.name}; the closest "
        f"(TP{lay.tp}/PP{lay.pp}/DP{lay.dp}, recompute {lay.recompute}, ZeRO-{lay.zero}): "
        + "; ".join(ev.violations(0))
    )

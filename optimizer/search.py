"""The search over the uniform layout space: enumerate, evaluate once, mask, rank. Exact top-k.

Every candidate of the space (`space.enumerate_space`, for each GPU count allowed) is evaluated
once, vectorized; the constraints are masks over that table (feasible under every limit and
within memory, the deadline); the admitted candidates are sorted by the objective with the
deterministic tie-break below, and the first k distinct predictions are the answer. Plain
enumeration suffices here: the space is a few hundred thousand rows at most and numpy orders it
in milliseconds, so the result is exact (status OPTIMAL) without a solver. The constraint
solver is used where enumeration is hopeless: per-stage layer splits and mixed GPU pools
(`paraplan.stages`).

Order, best first: the objective (step time, or dollars per step), values within 1e-12
relative being ties; for the cost objective then the step time; then the simpler layout, knob
by knob in the schema's order and each knob's preferred direction (`Knob.prefer`: smaller TP,
PP, ... first, larger micro-batches first, lower ZeRO stages first), DP taken after the other
degrees (`TIE_BREAK`); then less memory; then the layer split. The same layout with another
layer split, ranked later and holding no less memory, is dominated and not listed as an answer
of its own (`distinct_groups`).

Identical predictions: candidates with the same step time (1e-12 relative) and the same memory
are one answer listed once, with the others as its equivalent variants (DP and CP swapped with
the micro-batch rescaled, ZeRO stages that shard over a single rank, ...).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Literal

import numpy as np
import numpy.typing as npt

from paraplan.cost_models.candidates import COLUMNS, BoolArray, FloatArray, Layouts
from paraplan.cost_models.evaluate import Evaluation
from paraplan.cost_models.layout import DEGREES, KNOBS, SETTINGS, Layout, layout_words
from paraplan.cost_models.limits import BY_NAME, Target, host_message, memory_message
from paraplan.cost_models.units import SECONDS_PER_DAY
from paraplan.space import TRADING, Bounds, SpaceTooLarge

if TYPE_CHECKING:
    from paraplan.question import Question

IndexArray = npt.NDArray[np.int64]
TIE = 1e-12


@dataclass(frozen=True)
class Constraints:
    """optimize's constraints beyond fixed knobs: bounds on degrees, TP within a node, a deadline."""

    low: Mapping[str, int] = field(default_factory=dict)
    high: Mapping[str, int] = field(default_factory=dict)
    tp_within_node: bool = True
    deadline_days: float | None = None
    tokens: float | None = None

    @property
    def bounds(self) -> Bounds:
        return Bounds(self.low, self.high, self.tp_within_node)

    def describe(self) -> list[str]:
        out = [f"min_{k} {v}" for k, v in self.low.items()] + [f"max_{k} {v}" for k, v in self.high.items()]
        if self.deadline_days is not None:
            out.append(f"deadline {self.deadline_days:g} days for {self.tokens:.3g} tokens")
        return out


@dataclass(frozen=True)
class Ranking:
    """The evaluated table of one hardware and the best distinct answers in it."""

    evaluation: Evaluation
    groups: list[IndexArray]  # best first; each: the answer, then its equivalent variants
    order: IndexArray  # the admitted candidates that could rank (a prefix of the full order), best first
    wall_s: float
    reason: str | None = None

    @property
    def status(self) -> Literal["OPTIMAL", "INFEASIBLE"]:
        return "OPTIMAL" if self.groups else "INFEASIBLE"

    @property
    def best(self) -> list[int]:
        return [int(g[0]) for g in self.groups]


def train_time_s(ev: Evaluation, tokens: float) -> FloatArray:
    """Failure-free wall time of `tokens` training tokens at each candidate's step time."""
    steps = tokens / (ev.layouts.global_batch * ev.layouts.seq_len).astype(np.float64)
    return np.asarray(ev.step_time_s * steps)


def objective_values(ev: Evaluation, usd_per_gpu_hour: float | None, rows: IndexArray | None = None) -> FloatArray:
    """Step time, or with a price the dollars of one step (GPU-hours x price)."""
    step = ev.step_time_s if rows is None else ev.step_time_s[rows]
    if usd_per_gpu_hour is None:
        return np.asarray(step)
    gpus = ev.gpus if rows is None else ev.gpus[rows]
    return np.asarray(step * gpus * usd_per_gpu_hour / 3600.0)


def _tied(values: FloatArray, scale: float) -> FloatArray:
    """Values within 1e-12 relative (of `scale`) made equal, so that floating-point noise never
    decides an order."""
    return np.asarray(np.round(values / scale, 12))


def _scale(values: FloatArray) -> float:
    finite = values[np.isfinite(values)]
    return float(np.max(finite, initial=1.0)) or 1.0


# The knobs in tie-break order: the schema's, DP after CP and EP, the uneven split last. On a
# fixed GPU count DP x CP is what TP and PP leave, so "smaller DP first" in the schema's order
# would list DP1/CP8 mb16 before the equally fast DP8 mb2 (the same tokens per GPU and
# micro-batch): the plain data-parallel layout is the simpler one, and smaller CP first gives it.
# Layer splits that differ only in where the layers sit compare by memory first (`order_keys`).
SPLIT_KNOBS = ("first_stage_layers", "last_stage_layers")
_DEGREES_FIRST = ("tp", "pp", "cp", "ep", "dp")
TIE_BREAK: tuple[str, ...] = (*_DEGREES_FIRST, *(n for n in COLUMNS if n not in _DEGREES_FIRST + SPLIT_KNOBS))
# (column, preferred direction) of each tie-break knob, then of the split knobs
_TIE_KEYS = tuple((COLUMNS.index(n), KNOBS[n].prefer) for n in TIE_BREAK)
_SPLIT_KEYS = tuple((COLUMNS.index(n), KNOBS[n].prefer) for n in SPLIT_KNOBS)
_UNSPLIT = [COLUMNS.index(n) for n in COLUMNS if n not in SPLIT_KNOBS]


def order_keys(ev: Evaluation, rows: IndexArray, usd_per_gpu_hour: float | None,
               scales: tuple[float, float]) -> list[npt.NDArray[np.generic]]:  # fmt: skip
    """Lexicographic keys of `rows`, most significant first (see the module docstring)."""
    keys: list[npt.NDArray[np.generic]] = [_tied(objective_values(ev, usd_per_gpu_hour, rows), scales[0])]
    if usd_per_gpu_hour is not None:
        keys.append(_tied(ev.step_time_s[rows], scales[1]))
    data = ev.layouts.data[rows]
    keys += [prefer * data[:, column] for column, prefer in _TIE_KEYS]
    keys.append(ev.memory.total[rows])
    keys += [prefer * data[:, column] for column, prefer in _SPLIT_KEYS]
    return keys


def admitted_mask(ev: Evaluation, cons: Constraints) -> BoolArray:
    ok = ev.feasible.copy()
    if cons.deadline_days is not None and cons.tokens:
        ok &= train_time_s(ev, cons.tokens) <= cons.deadline_days * SECONDS_PER_DAY * (1 + TIE)
    return ok


SELECT_PER_ANSWER = 64  # rows sorted in full per answer asked; grows when ties need more


def rank(ev: Evaluation, cons: Constraints, top: int, usd_per_gpu_hour: float | None = None,
         subset: BoolArray | None = None) -> Ranking:  # fmt: skip
    """The `top` best distinct answers among the admitted candidates (within `subset`), exactly.

    Only the rows that can matter are sorted in full: those whose objective is at most the n-th
    smallest (argpartition), n growing until they hold `top` distinct answers. Every row left
    out has a larger objective than every row kept, so the answer is the full sort's."""
    started = time.perf_counter()
    ok = admitted_mask(ev, cons)
    if subset is not None:
        ok &= subset
    index = np.nonzero(ok)[0]
    if len(index) == 0:
        return Ranking(ev, [], index, time.perf_counter() - started, why_none(ev, cons, subset))
    objective = objective_values(ev, usd_per_gpu_hour, index)
    scales = (_scale(objective), _scale(ev.step_time_s[index]))
    tied = _tied(objective, scales[0])
    wanted = SELECT_PER_ANSWER * top
    while True:
        if wanted < len(index):
            boundary = np.partition(tied, wanted - 1)[wanted - 1]
            chosen = index[tied <= boundary]
        else:
            chosen = index
        order = chosen[np.lexsort(order_keys(ev, chosen, usd_per_gpu_hour, scales)[::-1])]
        groups = distinct_groups(ev, order, top, scales[1])
        if len(groups) >= top or len(chosen) == len(index):
            return Ranking(ev, groups, order, time.perf_counter() - started)
        wanted *= 4


def distinct_groups(ev: Evaluation, order: IndexArray, top: int, scale: float) -> list[IndexArray]:
    """Candidates (in `order`) with identical predictions -- the same step time and memory --
    grouped, each group led by its best-ranked member; the first `top` groups. A group whose
    leader is the layout of a member of an earlier group with another layer split
    (`SPLIT_KNOBS`) and no less memory is no answer of its own: ranked later, it is no faster
    either, so the earlier split dominates it."""
    pairs = np.stack([_tied(ev.step_time_s[order], scale), ev.memory.total[order]], axis=1)
    _, first, inverse = np.unique(pairs, axis=0, return_index=True, return_inverse=True)
    inverse = inverse.reshape(-1)
    least_memory: dict[bytes, float] = {}  # per layout but its split, the least memory listed
    groups: list[IndexArray] = []
    for position in np.sort(first).tolist():
        memory = float(pairs[position, 1])
        if least_memory.get(ev.layouts.data[order[position], _UNSPLIT].tobytes(), math.inf) <= memory:
            continue
        members = order[np.nonzero(inverse == inverse[position])[0]]
        for row in ev.layouts.data[members][:, _UNSPLIT]:
            plan = row.tobytes()
            least_memory[plan] = min(memory, least_memory.get(plan, math.inf))
        groups.append(members)
        if len(groups) == top:
            break
    return groups


def closest(ev: Evaluation) -> int:
    """The candidate that comes closest to feasible: fewest violated limits other than memory,
    then the smallest memory overflow, then the fastest."""
    structural = np.zeros(len(ev), dtype=np.int64)
    for name, mask in ev.checks.items():
        if name != "memory":
            structural += mask
    order = np.lexsort((ev.step_time_s, ev.memory_overflow_bytes, structural))
    return int(order[0])


def why_none(ev: Evaluation, cons: Constraints, subset: BoolArray | None = None) -> str:
    """Why no candidate (of `subset`, where given) is admitted, with the figures that decide it."""
    if len(ev) == 0:
        return "no layout of these GPUs meets the structural rules (heads, layers, batch divisibility)"
    if subset is not None:
        if not subset.any():
            return "no candidate differs from the plan by a single change"
        return why_none(ev.take(np.nonzero(subset)[0]), cons)
    feasible = ev.feasible
    if not feasible.any():
        i = closest(ev)
        lay = ev.layouts.at(i)
        return (
            f"no layout fits {ev.model.name} on {lay.gpus} x {ev.cluster.name}; the closest "
            f"({layout_words(lay)}): " + "; ".join(violations(ev, i))
        )
    if cons.deadline_days is None or not cons.tokens:
        return "every feasible layout is excluded by the constraints"
    best = int(np.argmin(np.where(feasible, ev.step_time_s, np.inf)))
    days = float(train_time_s(ev.take(np.array([best])), cons.tokens or 0.0)[0]) / SECONDS_PER_DAY
    return (
        f"no layout meets the deadline of {cons.deadline_days:g} days for {cons.tokens:.3g} tokens; the fastest "
        f"({ev.layouts.at(best).gpus} GPUs) takes {days:.1f} days without failures"
    )


def violations(ev: Evaluation, i: int) -> list[str]:
    """One sentence per limit candidate i breaks."""
    lay = ev.layouts.at(i)
    target = Target(ev.model, ev.cluster, ev.stack)
    special = {"memory": memory_message, "host": host_message}
    out = []
    for name, mask in ev.checks.items():
        if mask[i]:
            out.append(special[name](ev, i) if name in special else BY_NAME[name].message(target, lay))
    return out


Subset = Callable[[Layouts], BoolArray]


def kth_objective(ev: Evaluation, cons: Constraints, top: int, usd_per_gpu_hour: float | None,
                  subset: BoolArray | None = None) -> float:  # fmt: skip
    """The objective of the k-th best admitted answer of `ev` (within `subset`); inf with fewer."""
    found = rank(ev, cons, top, usd_per_gpu_hour, subset=subset)
    if len(found.groups) < top:
        return float(np.inf)
    return float(objective_values(ev, usd_per_gpu_hour, found.groups[-1][:1])[0])


def expansion_needed(base: Evaluation, cons: Constraints, top: int, usd_per_gpu_hour: float | None,
                     subset: BoolArray | None = None) -> BoolArray:  # fmt: skip
    """The cores (rows of `base`, within `subset`) whose trading variants could enter the top k.

    Knobs that only trade time for memory (recompute, its layers, offload: `Knob.trades_memory`)
    never make a layout faster: a candidate is at least as slow as its "core", the same layout
    with those knobs at their base (none). The k-th best admitted core bounds the answer, so
    only cores at least that fast, and blocked by memory alone or by limits that read those
    knobs (a variant may meet them: `--cpu-checkpointing` needs full recompute), need their
    variants.
    """
    inside = np.ones(len(base), dtype=bool) if subset is None else subset
    bound = kth_objective(base, cons, top, usd_per_gpu_hour, inside)
    need = inside.copy()
    for name, mask in base.checks.items():
        if name != "memory" and not (name in BY_NAME and set(BY_NAME[name].knobs) & set(TRADING)):
            need &= ~mask
    need &= objective_values(base, usd_per_gpu_hour) <= bound * (1 + TIE)
    if cons.deadline_days is not None and cons.tokens:
        need &= train_time_s(base, cons.tokens) <= cons.deadline_days * SECONDS_PER_DAY * (1 + TIE)
    return need


def _variants(question: Question, base: Evaluation, chosen: np.ndarray) -> Layouts:
    """The trading variants of the cores `chosen` (rows of `base`), per GPU count."""
    gpus = base.layouts.gpus[chosen]
    return Layouts.concat([question.expansion(base.layouts.take(chosen[gpus == n]), int(n)) for n in np.unique(gpus)])


RowsOf = Callable[[Evaluation], BoolArray]  # the rows of an evaluation that a criterion ranks
# Cores expanded together where expanding every needed core at once would pass the space cap: a
# core has at most recompute x recompute_layers x offload variants, a few dozen
EXPANSION_CHUNK = 16_384


def complete_ranked(question: Question, base: Evaluation, need: BoolArray, cons: Constraints, top: int,
                    usd_per_gpu_hour: float | None, subsets: Sequence[RowsOf | None] = (None,),
                    known: Evaluation | None = None) -> Evaluation:  # fmt: skip
    """`complete`, or, where expanding every core in `need` at once would pass the space cap
    (`space.MAX_ROWS`; DeepSeek-V3 on 64 H100, whose cores all need recompute or offload to fit),
    the same top k of the whole space and of each of `subsets` by bound (`complete_bounded`)."""
    try:
        return complete(question, base, need, known)
    except SpaceTooLarge:
        return complete_bounded(question, base, need, cons, top, usd_per_gpu_hour, subsets)


def complete_bounded(question: Question, base: Evaluation, need: BoolArray, cons: Constraints, top: int,
                     usd_per_gpu_hour: float | None, subsets: Sequence[RowsOf | None] = (None,)) -> Evaluation:  # fmt: skip
    """`base` with the trading variants that can enter the top k of the whole space, or of each of
    `subsets` (rows of an evaluation: validate's single changes), priced a chunk of cores at a
    time. A variant is never better than its core (`expansion_needed`), so the cores are expanded
    best first, each while it is at least as good as the k-th best found so far within a subset
    it belongs to, and the rest is skipped: the answers are those of the whole space."""
    objective = objective_values(base, usd_per_gpu_hour)
    chosen = np.nonzero(need)[0]
    chosen = chosen[np.argsort(objective[chosen], kind="stable")]
    members = [np.ones(len(base), dtype=bool) if s is None else s(base) for s in subsets]
    parts = [base]

    def bounds() -> list[float]:
        ev = Evaluation.concat(parts) if len(parts) > 1 else base
        return [kth_objective(ev, cons, top, usd_per_gpu_hour, None if s is None else s(ev)) for s in subsets]

    limit = bounds()
    start, size = 0, EXPANSION_CHUNK
    while start < len(chosen) and objective[chosen[start]] <= max(limit) * (1 + TIE):
        chunk = chosen[start : start + size]
        wanted = np.zeros(len(chunk), dtype=bool)
        for member, bound in zip(members, limit, strict=True):
            wanted |= member[chunk] & (objective[chunk] <= bound * (1 + TIE))
        try:
            variants = _variants(question, base, chunk[wanted])
        except SpaceTooLarge:
            if size == 1:
                raise
            size = max(1, size // 2)
            continue
        start += size
        if len(variants):
            parts.append(question.evaluate(variants))
            limit = bounds()
    return Evaluation.concat(parts)


def complete(question: Question, base: Evaluation, need: BoolArray, known: Evaluation | None = None) -> Evaluation:
    """`base` joined with the trading variants of the cores in `need`, each evaluated once; those
    already in `known` (one plan's candidates, priced before) are taken from it."""
    variants = _variants(question, base, np.nonzero(need)[0])
    if len(variants) == 0:
        return base
    if known is None:
        return Evaluation.concat([base, question.evaluate(variants)])
    fresh, index = rows_beside(known.layouts, variants)
    priced = Evaluation.concat([known, question.evaluate(variants.take(fresh))])
    return Evaluation.concat([base, priced.take(index)])


def _row_keys(data: np.ndarray) -> np.ndarray:
    """One opaque value per row (its bytes), so that rows compare as wholes."""
    rows = np.ascontiguousarray(data)
    return rows.view(np.dtype((np.void, rows.dtype.itemsize * rows.shape[1]))).reshape(-1)


def rows_beside(plan: Layouts, cores: Layouts) -> tuple[np.ndarray, np.ndarray]:
    """(`fresh`: the rows of `cores` that are not among `plan`'s, `index`: each row's place in
    concat([plan, cores[fresh]])), for a `plan` of one set of degrees (one plan's candidates).
    Only rows with those degrees can be among them, so only those are matched: a handful of rows,
    not the whole space."""
    if len(plan) == 0 or len(cores) == 0:
        return np.arange(len(cores)), len(plan) + np.arange(len(cores))
    same = np.ones(len(cores), dtype=bool)
    for name in DEGREES:
        same &= getattr(cores, name) == getattr(plan, name)[0]
    candidates = np.flatnonzero(same)
    _, first, inverse = np.unique(_row_keys(np.concatenate([plan.data, cores.data[candidates]])),
                                  return_index=True, return_inverse=True)  # fmt: skip
    shared_at = first[inverse.reshape(-1)[len(plan) :]]  # each candidate's first occurrence
    shared = shared_at < len(plan)
    index = np.full(len(cores), -1, dtype=np.int64)
    index[candidates[shared]] = shared_at[shared]
    fresh = np.flatnonzero(index < 0)
    index[fresh] = len(plan) + np.arange(len(fresh))
    return fresh, index


def rank_space(question: Question, counts: Sequence[int], cons: Constraints, top: int,
               usd_per_gpu_hour: float | None = None, per_count: bool = False) -> Ranking:  # fmt: skip
    """The exact top-k over every candidate of `counts` GPUs; every candidate is evaluated at
    most once and most never:
      * within a count, trading knobs are expanded only where they could win
        (`expansion_needed`; the property tests check that a layout never gets faster with more
        recompute or offload, and that this equals ranking the whole space);
      * over a range of counts ranked by step time, counts are taken from the largest down, and
        a count whose step time cannot beat the k-th best found -- no layout of n GPUs is faster
        than the model's FLOPs at n GPUs' peak -- is not enumerated at all.
    With `per_count`, the evaluation holds the best layout of every count (a scaling curve).
    Its `wall_s` is the whole search: enumeration, evaluation and ranking."""
    started = time.perf_counter()
    ranking = _rank_space(question, counts, cons, top, usd_per_gpu_hour, per_count)
    return replace(ranking, wall_s=time.perf_counter() - started)


def _rank_space(question: Question, counts: Sequence[int], cons: Constraints, top: int,
                usd_per_gpu_hour: float | None, per_count: bool) -> Ranking:  # fmt: skip
    if per_count or usd_per_gpu_hour is not None or len(counts) == 1:
        cores = Layouts.concat([question.space(n, trading=False) for n in counts])
        base = question.evaluate(cores)
        need = expansion_needed(base, cons, top, usd_per_gpu_hour)
        if per_count:
            for n in counts:
                need |= expansion_needed(base, cons, 1, usd_per_gpu_hour, subset=base.gpus == n)
            combined = complete(question, base, need)  # the best of every count: no single bound
        else:
            combined = complete_ranked(question, base, need, cons, top, usd_per_gpu_hour)
        return rank(combined, cons, top, usd_per_gpu_hour)
    floor = step_floor_s(question)
    done: list[Evaluation] = []
    best: list[float] = []  # the step times of the best answers found so far, over all counts
    bound = np.inf
    for n in sorted(counts, reverse=True):
        if floor / n > bound * (1 + TIE):
            continue  # no layout of n GPUs can enter the top k
        base = question.evaluate(question.space(n, trading=False))
        done.append(complete_ranked(question, base, expansion_needed(base, cons, top, None), cons, top, None))
        mine = rank(done[-1], cons, top)
        best = sorted(best + [float(done[-1].step_time_s[g[0]]) for g in mine.groups])[:top]
        if len(best) == top:
            bound = best[-1]
    if not done:
        return rank(question.evaluate(Layouts.empty()), cons, top)
    return rank(Evaluation.concat(done), cons, top)


def step_floor_s(question: Question) -> float:
    """GPU-seconds no step can beat: the model FLOPs of a step at the fastest rate any compute
    term of the cost model reaches (`compute.fastest_rate_flops`); recompute, communication,
    the bubble and the busiest GPU's excess over the mean only add."""
    from paraplan.cost_models.compute import fastest_rate_flops
    from paraplan.cost_models.flops import model_flops_per_step

    one = Layouts.of([Layout(**{k: v for k, v in question.given.items() if k in SETTINGS})])
    return float(model_flops_per_step(question.model, one)[0] / fastest_rate_flops(question.cluster, one)[0])


def best_per_count(ev: Evaluation, cons: Constraints, usd_per_gpu_hour: float | None = None) -> list[int]:
    """The best admitted candidate of each GPU count in `ev`, by count."""
    out = []
    gpus = ev.gpus
    for n in np.unique(gpus):
        ranking = rank(ev, cons, 1, usd_per_gpu_hour, subset=gpus == n)
        if ranking.groups:
            out.append(ranking.best[0])
    return out

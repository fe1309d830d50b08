"""The candidate space of a question: every layout of the model on N GPUs that its framework can
run, enumerated column by column from the knob schema (`cost_models.layout`).

For each layout field in turn (settings, then the degrees, then the searched knobs) the table is
crossed with the field's values: the user's value when given, else the field's domain. Two kinds
of rows are then dropped, as soon as the columns they read exist:
  * rows that break a limit (`cost_models.limits`), unless every row does: then they are kept, so
    that `validate` reports the violation of a plan the user fixed;
  * rows where a free knob takes a redundant value (ZeRO without data parallelism, sequence
    parallelism without TP, ...; `limits.REDUNDANT`).
DP is not enumerated: it is GPUs / (TP * PP * CP). The constraints of `optimize` that bound a
degree (`--max-tp`, `--min-dp`, ...) narrow the enumeration too; TP within one node is such a
bound (on by default).

Caps that keep the space finite, and so bound what "optimal" means, live with the domains in
`cost_models.layout` (micro-batches of at most 65,536 tokens, at most 8 virtual stages, CP at
most 64).
"""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from paraplan.cost_models.candidates import COLUMNS, INDEX, IntArray, Layouts
from paraplan.cost_models.errors import InputError
from paraplan.cost_models.layout import DEGREES, KNOBS, SEARCHED, SETTINGS, DomainContext, Layout
from paraplan.cost_models.limits import LIMITS, REDUNDANT, Target
from paraplan.cost_models.models import ModelSpec
from paraplan.cost_models.stages import completed_end, split_options
from paraplan.hardware_specs.schema import Cluster

ORDER: tuple[str, ...] = (*SETTINGS, "tp", "pp", "cp", "dp", "ep", *(n for n in SEARCHED))
TRADING: tuple[str, ...] = tuple(n for n in SEARCHED if KNOBS[n].trades_memory)
assert set(ORDER) == set(COLUMNS), "every layout field is enumerated exactly once"


@dataclass(frozen=True)
class Bounds:
    """Inclusive bounds on the degrees, from optimize's constraints (None: unbounded)."""

    low: Mapping[str, int] = field(default_factory=dict)
    high: Mapping[str, int] = field(default_factory=dict)
    tp_within_node: bool = True

    def admits(self, name: str, value: int, gpus_per_node: int) -> bool:
        if name == "tp" and self.tp_within_node and (value > gpus_per_node or gpus_per_node % value):
            return False
        return self.low.get(name, value) <= value <= self.high.get(name, value)


def _as_int(value: Any) -> int:
    return int(value)


def enumerate_space(
    model: ModelSpec,
    cluster: Cluster,
    gpus: int,
    given: Mapping[str, Any],
    bounds: Bounds = Bounds(),
    trading: bool = True,
) -> Layouts:
    """Every candidate layout for `gpus` GPUs. `given` holds a value for every setting and for
    each knob the user fixed; the other knobs are free. With `trading` False, the knobs that
    trade time for memory (`Knob.trades_memory`) stay at their base value unless given: the
    "cores" that `expand` later completes (see `search.rank_space`)."""
    target = Target(model, cluster)
    settings = {name: given[name] for name in SETTINGS}
    ctx = DomainContext(model, cluster, gpus, settings)
    base = Layout()
    table = np.zeros((1, len(COLUMNS)), dtype=np.int64)
    fixed = dict(given)
    if not trading:
        fixed.update({n: getattr(base, n) for n in TRADING if n not in given})
    return Layouts(_fill(table, ORDER, fixed, given, ctx, target, bounds, applied=set()))


def expand(cores: Layouts, model: ModelSpec, cluster: Cluster, gpus: int, given: Mapping[str, Any],
           bounds: Bounds = Bounds()) -> Layouts:  # fmt: skip
    """The trading variants of some cores: every value of each free trading knob, except the
    all-base combination the core already is, with the limits that read those knobs applied."""
    free = [n for n in TRADING if n not in given]
    if not free or len(cores) == 0:
        return Layouts.empty()
    target = Target(model, cluster)
    ctx = DomainContext(model, cluster, gpus, {name: given[name] for name in SETTINGS})
    applied = {lim.name for lim in LIMITS if not set(lim.knobs) & set(free)}
    table = _fill(cores.data, tuple(free), dict(given), given, ctx, target, bounds, applied)
    base = Layout()
    at_base = np.ones(len(table), dtype=bool)
    for name in free:
        at_base &= table[:, INDEX[name]] == int(getattr(base, name))
    return Layouts(table[~at_base])


def _fill(table: IntArray, names: tuple[str, ...] | list[str], fixed: Mapping[str, Any], given: Mapping[str, Any],
          ctx: DomainContext, target: Target, bounds: Bounds, applied: set[str]) -> IntArray:  # fmt: skip
    """Cross `table` with each knob of `names` in turn, dropping rows as the module docstring says.

    Once every row breaks some limit the answer is infeasible whatever the remaining knobs take
    (they are kept only to report the closest settings): a knob whose crossing would then pass
    MAX_ROWS takes its first value alone, so a question no layout can satisfy is answered as such
    instead of being refused as too large (Mixtral on 96 MI300X under DeepSpeed with fp8, which
    DeepSpeed cannot run, enumerated 2.6M rows of infeasible layouts)."""
    done = set(COLUMNS) - set(names)
    for name in names:
        if name == "last_stage_layers" and "first_stage_layers" in names:
            continue  # set with the first stage's count, as a pair
        if name == "first_stage_layers":
            table = _derive_splits(table, ctx, fixed)
            done.add("last_stage_layers")
        elif name == "dp":
            table = _derive_dp(table, ctx.gpus, fixed.get("dp"))
            if "dp" not in fixed and len(table):
                dps = table[:, INDEX["dp"]]
                table = table[np.array([bounds.admits("dp", int(v), ctx.cluster.gpus_per_node) for v in dps])]
        else:
            values = [_as_int(fixed[name])] if name in fixed else [_as_int(v) for v in _domain(name, ctx, bounds)]
            if len(table) * len(values) > MAX_ROWS and _all_break(table, target, applied):
                values = values[:1]
            table = _cross(table, name, values)
        done.add(name)
        if name not in given and name in REDUNDANT and _REDUNDANT_READS[name] <= done:
            table = _drop(table, REDUNDANT[name][1](target, Layouts(table)), keep_if_all=False)
        for limit, reads in _LIMIT_READS:
            if limit.name not in applied and reads <= done:
                applied.add(limit.name)
                table = _drop(table, limit.violated(target, Layouts(table)), keep_if_all=True)
        if len(table) == 0:
            break
    return table


def _all_break(table: IntArray, target: Target, applied: set[str]) -> bool:
    """Whether every row breaks one of the limits already applied (kept only to be reported)."""
    rows = Layouts(table)
    return len(table) > 0 and any(lim.violated(target, rows).all() for lim in LIMITS if lim.name in applied)


# The knobs each limit and redundancy test reads, as sets once (`_fill` asks after every column).
_LIMIT_READS = tuple((limit, frozenset(limit.knobs)) for limit in LIMITS)
_REDUNDANT_READS = {name: frozenset(reads) for name, (reads, _) in REDUNDANT.items()}


def _domain(name: str, ctx: DomainContext, bounds: Bounds) -> list[Any]:
    domain = KNOBS[name].domain
    if domain is None:
        raise ValueError(f"knob {name} has no domain and was not given")
    values = list(domain(ctx))
    if name in DEGREES:
        values = [v for v in values if bounds.admits(name, int(v), ctx.cluster.gpus_per_node)]
    return values


MAX_ROWS = 2_000_000  # a space past this takes more than ~10 s to evaluate: refused, saying why


class SpaceTooLarge(InputError):
    """The question's candidate space exceeds `MAX_ROWS` (a one-line message names what to narrow)."""


# Rows left to the enumerations of an optional extra (the fixes of an infeasible answer, a dozen
# whole searches): without a shared bound their sum grows with the model, past 10 s.
_ROW_BUDGET: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar("row_budget", default=None)


@contextlib.contextmanager
def row_budget(rows: int, largest: int = MAX_ROWS) -> Iterator[None]:
    """Every enumeration inside the block together creates at most `rows` rows, and no table
    more than `largest` (its evaluation's memory); past either, SpaceTooLarge. The bounds count
    rows, not time, so that an answer stays deterministic."""
    token = _ROW_BUDGET.set([rows, largest])
    try:
        yield
    finally:
        _ROW_BUDGET.reset(token)


def _cross(table: IntArray, name: str, values: list[int]) -> IntArray:
    if not values or len(table) == 0:
        return table[:0]
    if len(table) * len(values) > MAX_ROWS:
        raise SpaceTooLarge(
            f"the search space grows past {MAX_ROWS:,} candidates at {name.replace('_', '-')} ({len(values)} values "
            f"for {len(table):,} partial layouts); narrow it: fix --micro-batch or other knobs, a smaller "
            "--gpus range, or a global batch with fewer divisors"
        )
    budget = _ROW_BUDGET.get()
    if budget is not None:
        budget[0] -= len(table) * len(values)
        if budget[0] < 0 or len(table) * len(values) > budget[1]:
            raise SpaceTooLarge("the optional searches used up their share of candidates")
    if len(values) == 1:  # a setting or a given knob, the usual case: one column set, no crossing
        one = table.copy()
        one[:, INDEX[name]] = values[0]
        return one
    repeated = np.repeat(table, len(values), axis=0)
    repeated[:, INDEX[name]] = np.tile(np.asarray(values, dtype=np.int64), len(table))
    return repeated


def _derive_dp(table: IntArray, gpus: int, fixed: Any) -> IntArray:
    product = table[:, INDEX["tp"]] * table[:, INDEX["pp"]] * table[:, INDEX["cp"]]
    keep = gpus % product == 0
    if fixed is not None:
        keep &= gpus // np.maximum(product, 1) == int(fixed)
    out: IntArray = table[keep].copy()
    out[:, INDEX["dp"]] = gpus // product[keep]
    return out


def _derive_splits(table: IntArray, ctx: DomainContext, fixed: Mapping[str, Any]) -> IntArray:
    """Each row with every layer split `stages.split_options` gives for its PP and virtual stages
    (or the user's counts; one end given alone, the other left out or 0, is completed as
    Megatron-LM completes it, `stages.completed_end`)."""
    if "first_stage_layers" in fixed or "last_stage_layers" in fixed:
        out = table.copy()
        first: IntArray | int = int(fixed.get("first_stage_layers", 0))
        last: IntArray | int = int(fixed.get("last_stage_layers", 0))
        if bool(first) != bool(last):
            other = completed_end(ctx.model.num_layers, table[:, INDEX["pp"]], int(first or last))
            first, last = (first, other) if first else (other, last)
        out[:, INDEX["first_stage_layers"]], out[:, INDEX["last_stage_layers"]] = first, last
        return out
    # One integer key per (PP, virtual stages) pair: a 1-D unique is far cheaper than one by rows.
    v_span = int(table[:, INDEX["virtual_stages"]].max(initial=0)) + 1
    keys = table[:, INDEX["pp"]] * v_span + table[:, INDEX["virtual_stages"]]
    unique, inverse = np.unique(keys, return_inverse=True)
    # Rows grouped by pair, each group in table order (a stable sort: one pass, not a mask per pair).
    order = np.argsort(inverse.reshape(-1), kind="stable")
    edges = np.searchsorted(inverse.reshape(-1)[order], np.arange(len(unique) + 1))
    parts = []
    for k, key in enumerate(unique.tolist()):
        pp, v = divmod(int(key), v_span)
        rows = table[order[edges[k] : edges[k + 1]]]
        for first, last in split_options(ctx.model, int(pp), int(v)):
            block = rows.copy()
            block[:, INDEX["first_stage_layers"]] = first
            block[:, INDEX["last_stage_layers"]] = last
            parts.append(block)
    return np.concatenate(parts) if parts else table[:0]


def _drop(table: IntArray, bad: np.ndarray, keep_if_all: bool) -> IntArray:
    if not bad.any():
        return table
    if keep_if_all and bad.all():
        return table
    kept: IntArray = table[~bad]
    return kept

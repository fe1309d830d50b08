"""The hardware decision behind `paraplan compare`: per hardware, the best layout and the full
account of training T tokens on it -- time with failures, goodput, energy and money -- and a
verdict computed from those numbers.

Per hardware `H:N`:
* without a budget or deadline, the fastest layout on exactly N GPUs;
* with `deadline_days`, N is the maximum: every count of `gpu_count_domain(gpus_per_node, N)`
  and N are searched, the deadline a constraint on the failure-free training time and the
  cheapest (GPU-hours x price; fewest GPU-hours without a price) preferred. Failures stretch the
  run by 1/goodput, which the search does not see, so when the failure-aware time misses the
  deadline it is tightened by the goodput and the search repeated (a few rounds);
* with only `budget_usd`, N is the maximum: the fastest layout of each count is accounted and
  the fastest run within budget wins (the cheapest, flagged, when none is).

Every count of a hardware is enumerated and evaluated once; the rounds and counts are masks over
that one table. The account: ideal time = tokens / tokens_per_s; failures, checkpoint interval
and goodput from `cost_models.reliability`; energy at the predicted busy fraction from
`cost_models.energy`; money from `cost_models.tco`, only where the hardware has a price.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Generic, TypeVar, Unpack

import numpy as np
import numpy.typing as npt
from pydantic import ValidationError

from paraplan.answers import evaluated
from paraplan.api import (
    NameOrPath,
    _check_gpus,
    check_amount,
    check_arguments,
    gpu_count_domain,
    hardware_arg,
    hardware_items,
    input_warnings,
    layout_warnings,
    load_hardware,
)
from paraplan.api import _model as resolve_model
from paraplan.cost_models.energy import busy_fraction, energy_kwh, wall_power_per_gpu_w
from paraplan.cost_models.errors import InputError
from paraplan.cost_models.evaluate import Evaluation
from paraplan.cost_models.layout import MAX_GPUS, KnobArgs
from paraplan.cost_models.reliability import CHECKPOINT_BYTES_PER_PARAM, ReliabilityAccount, assess
from paraplan.cost_models.tco import PRICINGS, CostBreakdown, Pricing, hardware_usd_per_gpu_hour, run_cost
from paraplan.cost_models.units import SECONDS_PER_DAY
from paraplan.hardware_specs.schema import Cluster, Power, Price, Reliability
from paraplan.question import Question
from paraplan.results import CompareEntry, CompareResult, CostOut, ScalingPoint
from paraplan.search import Constraints, closest, complete, expansion_needed, rank
from paraplan.units import fmt_duration, fmt_seconds, fmt_usd

if TYPE_CHECKING:
    from paraplan.pools import PoolOutcome

LOW_GOODPUT = 0.8  # the verdict warns below this goodput
SAME_RATE = 1.01  # failure rates within 1% are called the same in the verdict
DEADLINE_ROUNDS = 4  # re-searches with the deadline tightened by the goodput
DEADLINE_MARGIN = 0.999  # tighten a little beyond the goodput so rounding does not stall the loop

PRICE_FIELDS = ("gpu_usd", "server_share_usd", "network_share_usd", "cloud_usd_per_gpu_hour", "lifetime_years")
POWER_FIELDS = ("node_overhead_w", "idle_fraction", "pue", "usd_per_kwh")
RELIABILITY_FIELDS = ("gpu_mtbf_hours", "node_mtbf_hours", "storage_write_bytes_per_s", "restart_s")
OVERRIDABLE = (*PRICE_FIELDS, *POWER_FIELDS, *RELIABILITY_FIELDS)


def _count(x: float) -> str:
    return f"{x:,.0f}" if x >= 10 else f"{x:.1f}"


def _mwh(kwh: float) -> str:
    return f"{kwh / 1000:,.0f} MWh" if kwh >= 100_000 else f"{kwh / 1000:.3g} MWh"


@dataclass(frozen=True)
class Figures:
    """The price, power and reliability figures one hardware is accounted with."""

    pricing: Pricing
    price: Price | None
    power: Power
    reliability: Reliability
    staff_usd_per_day: float
    hardware_usd_per_gpu_hour: float | None  # None: no price for this pricing
    overridden: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        def figures(spec: Price | Power | Reliability | None, names: tuple[str, ...]) -> dict[str, Any] | None:
            return None if spec is None else {n: getattr(spec, n) for n in names}

        return {
            "pricing": self.pricing,
            "hardware_usd_per_gpu_hour": self.hardware_usd_per_gpu_hour,
            "staff_usd_per_day": self.staff_usd_per_day,
            "price": figures(self.price, PRICE_FIELDS),
            "power": figures(self.power, POWER_FIELDS),
            "reliability": figures(self.reliability, RELIABILITY_FIELDS),
            "overridden": list(self.overridden),
            "sources": {
                "price": list(self.price.sources) if self.price else [],
                "power": list(self.power.sources),
                "reliability": list(self.reliability.sources),
            },
        }


def _merge(kind: type[Price] | type[Power] | type[Reliability], base: Price | Power | Reliability | None,
           given: dict[str, float], cluster: Cluster) -> Any:  # fmt: skip
    data: dict[str, Any] = base.model_dump() if base is not None else {}
    if given:
        set_here = (f"{n} = {v:g}: set on the command line" for n, v in given.items())
        data["sources"] = (*data.get("sources", ()), *set_here)
    data.update(given)
    try:
        return kind.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        name = str(err["loc"][0]) if err["loc"] else kind.__name__.lower()
        raise InputError(
            f"{cluster.name}: {name.replace('_', '-')} {err['msg']} (give it on the command line)"
        ) from None


def resolve(cluster: Cluster, pricing: Pricing, overrides: Mapping[str, float], staff_usd_per_day: float) -> Figures:
    """The preset's figures with the overrides applied. A missing price is no price (None), never
    a placeholder; missing reliability figures are bad input (the account needs them)."""
    if pricing not in PRICINGS:
        raise InputError(f"pricing {pricing!r} must be one of {', '.join(PRICINGS)}")
    unknown = set(overrides) - set(OVERRIDABLE)
    if unknown:
        raise InputError(f"unknown figure(s) {', '.join(sorted(unknown))}; accepted: {', '.join(OVERRIDABLE)}")

    def given(names: tuple[str, ...]) -> dict[str, float]:
        return {n: v for n in names if (v := overrides.get(n)) is not None}

    price_given = given(PRICE_FIELDS)
    price: Price | None = _merge(Price, cluster.price, price_given, cluster) if cluster.price or price_given else None
    power: Power = _merge(Power, cluster.power, given(POWER_FIELDS), cluster)
    if cluster.reliability is None and not {"gpu_mtbf_hours", "node_mtbf_hours"} <= given(RELIABILITY_FIELDS).keys():
        raise InputError(
            f"hardware {cluster.name} has no [reliability] figures: give --gpu-mtbf-hours and --node-mtbf-hours"
        )
    reliability: Reliability = _merge(Reliability, cluster.reliability, given(RELIABILITY_FIELDS), cluster)
    hourly = None
    if price is not None and (
        price.gpu_usd is not None if pricing == "own" else price.cloud_usd_per_gpu_hour is not None
    ):
        hourly = hardware_usd_per_gpu_hour(price, pricing)
    return Figures(pricing, price, power, reliability, staff_usd_per_day, hourly,
                   tuple(n for n in OVERRIDABLE if overrides.get(n) is not None))  # fmt: skip


class RunTotals:
    """What an account of a whole run derives from its reliability and cost (`Account`, and a
    pool's `pools.PoolAccount`)."""

    reliability: ReliabilityAccount
    tokens: float
    cost: CostBreakdown | None  # None: no price
    utilization: float
    wall_power_per_gpu_w: float
    energy_kwh: float

    @property
    def gpus(self) -> int:
        return self.reliability.gpus

    @property
    def train_time_s(self) -> float:
        return self.reliability.train_time_s

    @property
    def usd_per_billion_tokens(self) -> float | None:
        return None if self.cost is None else self.cost.total / (self.tokens / 1e9)

    def entry_fields(self) -> dict[str, Any]:
        """The `CompareEntry` fields this run's account gives."""
        r, c = self.reliability, self.cost
        return dict(
            gpus=self.gpus, train_time_s=self.train_time_s, ideal_time_s=r.ideal_time_s, goodput=r.goodput,
            goodput_first_order=r.goodput_first_order, failures_per_hour=r.failures_per_hour,
            expected_failures=r.expected_failures, job_mtbf_s=r.mtbf_s, checkpoint_bytes=r.checkpoint_bytes,
            checkpoint_write_s=r.checkpoint_write_s, checkpoint_interval_s=r.checkpoint_interval_s,
            checkpoint_interval_young_s=r.young_interval_s, restart_s=r.restart_s, busy_fraction=self.utilization,
            wall_power_per_gpu_w=self.wall_power_per_gpu_w, energy_kwh=self.energy_kwh,
            cost_usd=None if c is None else CostOut(hardware=c.hardware, energy=c.energy, staff=c.staff, total=c.total),
            usd_per_billion_tokens=self.usd_per_billion_tokens,
        )  # fmt: skip


# The CompareEntry fields of an alternative without a plan: no run to account.
NO_RUN: dict[str, Any] = dict(best=None, train_time_s=None, goodput=None, failures_per_hour=None,
                              checkpoint_interval_s=None, energy_kwh=None, cost_usd=None)  # fmt: skip


@dataclass(frozen=True)
class Account(RunTotals):
    """Training `tokens` with one layout: time, failures, energy, money."""

    evaluation: Evaluation
    index: int
    tokens: float
    figures: Figures
    reliability: ReliabilityAccount
    utilization: float  # busy fraction of the step: (compute + recompute) / step
    wall_power_per_gpu_w: float  # at the facility meter (PUE included)
    energy_kwh: float
    cost: CostBreakdown | None  # None: no price

    @property
    def step_time_s(self) -> float:
        return float(self.evaluation.step_time_s[self.index])


def account(ev: Evaluation, i: int, tokens: float, figures: Figures) -> Account:
    """The full account of training `tokens` with candidate i."""
    cluster = ev.cluster
    gpus = int(ev.layouts.gpus[i])
    ideal = tokens / float(ev.tokens_per_s[i])
    rel = figures.reliability
    failures = assess(
        ev.model.total_params, gpus, cluster.gpus_per_node, ideal,
        rel.gpu_mtbf_hours, rel.node_mtbf_hours, rel.storage_write_bytes_per_s, rel.restart_s,
    )  # fmt: skip
    u = busy_fraction(float(ev.times["compute"][i]), float(ev.times["recompute"][i]), float(ev.step_time_s[i]))
    pw = figures.power
    watts = wall_power_per_gpu_w(cluster.gpu.tdp_w, pw.idle_fraction, u, pw.node_overhead_w, cluster.gpus_per_node,
                                 pw.pue)  # fmt: skip
    kwh = energy_kwh(watts, gpus, failures.train_time_s)
    cost = None
    energy_price = pw.usd_per_kwh if figures.pricing == "own" else 0.0
    if figures.hardware_usd_per_gpu_hour is not None and energy_price is not None:
        cost = run_cost(gpus, failures.train_time_s, figures.hardware_usd_per_gpu_hour, kwh, energy_price,
                        figures.staff_usd_per_day, figures.pricing)  # fmt: skip
    return Account(ev, i, tokens, figures, failures, u, watts, kwh, cost)


@dataclass(frozen=True)
class Request:
    tokens: float
    budget_usd: float | None = None
    deadline_days: float | None = None
    scaling: bool = False  # also account the best layout of several counts (the report's curve)


Where = TypeVar("Where")  # a Cluster, or a pool's name
Acc = TypeVar("Acc")  # its Account, or a pool's PoolAccount


@dataclass(frozen=True)
class Outcome(Generic[Where, Acc]):
    """One alternative's answer (a hardware or a pool): the account of its best layout, or why
    there is none."""

    cluster: Where
    max_gpus: int
    counts: list[int]
    account: Acc | None
    reason: str | None = None
    notes: list[str] = field(default_factory=list)
    deadline_met: bool | None = None
    budget_met: bool | None = None
    scaling: list[Acc] = field(default_factory=list)  # none for a pool: its counts are fixed
    fixes: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.account is not None and self.deadline_met is not False and self.budget_met is not False


HardwareOutcome = Outcome[Cluster, Account]


# A compare needing more (hardware, GPU count) searches than this announces it first (CLI: one
# Note line on stderr); each search is 0.1-0.4 s on 2 cores (70B-405B models).
LONG_COMPARE_SEARCHES = 40


def candidate_counts(cluster: Cluster, max_gpus: int) -> list[int]:
    """The counts a budget or deadline may pick: whole nodes of 2^a or 3*2^a GPUs, and N itself."""
    per_node = cluster.gpus_per_node
    return sorted({*gpu_count_domain(min(per_node, max_gpus), max_gpus, per_node), max_gpus})


def scaling_counts(cluster: Cluster, gpus: int) -> list[int]:
    """Counts for the scaling curve: from gpus/16 (at least one node) to 2*gpus, and gpus itself."""
    per_node = cluster.gpus_per_node
    lo = max(min(per_node, gpus), gpus // 16)
    return sorted({*gpu_count_domain(lo, 2 * gpus, per_node), gpus})


# Layouts of one count kept beside its fastest: those within this share of its step time (far
# beyond the 1e-12 below which `search.rank` calls two predictions equal).
KEEP_TIE = 1e-6


class Table:
    """Every count of one hardware, enumerated and evaluated once; searches are masks over the
    rows that can answer them.

    Within one count every layout trains the same tokens per step on the same GPUs, so its
    fastest feasible layout is also its cheapest and the first to meet any deadline: no search
    over counts (a budget, a deadline, the scaling curve) picks another. So each count is
    evaluated alone and only its fastest feasible layouts and the layout closest to feasible
    (for the reason when none fits) are kept; the count `whole` (the one asked) is kept whole,
    for the fixes. Holding every count whole took 2-3 GB for 8 hardware x 1024 GPUs."""

    def __init__(self, question: Question, counts: Sequence[int], whole: int | None = None):
        self.question = question
        self.counts = sorted(set(counts))
        parts = []
        for n in self.counts:
            base = question.evaluate(question.space(n, trading=False))
            evaluation = complete(question, base, expansion_needed(base, Constraints(), 1, None))
            parts.append(evaluation if n == whole else evaluation.take(_answers(evaluation)))
        self.evaluation = Evaluation.concat(parts)
        self.gpus = self.evaluation.layouts.gpus

    def best(self, counts: Sequence[int], cons: Constraints, price: float | None = None) -> int | None:
        rows = np.nonzero(np.isin(self.gpus, np.asarray(list(counts))))[0]
        ranking = rank(self.evaluation.take(rows), cons, 1, price)
        return int(rows[ranking.best[0]]) if ranking.groups else None

    def reason(self, counts: Sequence[int], cons: Constraints) -> str:
        rows = np.nonzero(np.isin(self.gpus, np.asarray(list(counts))))[0]
        return rank(self.evaluation.take(rows), cons, 1).reason or "no layout"


def _answers(evaluation: Evaluation) -> npt.NDArray[np.int64]:
    """Rows of one count that a search over counts can pick or name: the fastest feasible (with
    their near-ties) and the one closest to feasible."""
    keep = np.zeros(len(evaluation), dtype=bool)
    if len(evaluation) == 0:
        return np.nonzero(keep)[0]
    feasible = evaluation.feasible
    if feasible.any():
        fastest = float(np.min(evaluation.step_time_s[feasible]))
        keep |= feasible & (evaluation.step_time_s <= fastest * (1 + KEEP_TIE))
    keep[closest(evaluation)] = True
    return np.nonzero(keep)[0]


def _picked_counts(cluster: Cluster, max_gpus: int, request: Request) -> list[int]:
    """The counts a budget or deadline chooses among (else the count asked)."""
    if request.deadline_days is not None or request.budget_usd is not None:
        return candidate_counts(cluster, max_gpus)
    return [max_gpus]


def _counts_searched(cluster: Cluster, max_gpus: int, request: Request) -> set[int]:
    extra = scaling_counts(cluster, max_gpus) if request.scaling else []
    return {*_picked_counts(cluster, max_gpus, request), *extra}


def decide(question: Question, max_gpus: int, request: Request, figures: Figures) -> HardwareOutcome:
    cluster = question.cluster
    counts = _picked_counts(cluster, max_gpus, request)
    table = Table(question, sorted(_counts_searched(cluster, max_gpus, request)), whole=max_gpus)
    if request.deadline_days is not None:
        outcome = _with_deadline(table, counts, max_gpus, request, figures, request.deadline_days)
    elif request.budget_usd is not None:
        outcome = _with_budget(table, counts, max_gpus, request, figures, request.budget_usd)
    else:
        i = table.best([max_gpus], Constraints())
        if i is None:
            from paraplan.fixes import fixes_for

            fixes = fixes_for(question, [max_gpus], table.evaluation, Constraints())
            outcome = Outcome(cluster, max_gpus, [max_gpus], None, table.reason([max_gpus], Constraints()), fixes=fixes)
        else:
            outcome = Outcome(cluster, max_gpus, [max_gpus], account(table.evaluation, i, request.tokens, figures))
    if request.budget_usd is not None and outcome.account is not None and request.deadline_days is not None:
        outcome = _check_budget(outcome, request.budget_usd, "the cheapest run that meets the deadline")
    if request.scaling and outcome.account is not None:
        curve = [table.best([n], Constraints()) for n in scaling_counts(cluster, outcome.account.gpus)]
        points = [account(table.evaluation, i, request.tokens, figures) for i in curve if i is not None]
        outcome = replace(outcome, scaling=points)
    return outcome


def _check_budget(o: HardwareOutcome, budget: float, what: str) -> HardwareOutcome:
    assert o.account is not None
    if o.account.cost is None:
        return replace(o, budget_met=None, notes=[*o.notes, "no price for this hardware: the budget cannot be checked"])
    total = o.account.cost.total
    if total <= budget:
        return replace(o, budget_met=True, notes=[*o.notes, f"within the budget of {fmt_usd(budget)} "
                                                            f"({fmt_usd(budget - total)} to spare)"])  # fmt: skip
    over = f" ({total / budget - 1:.0%})" if budget > 0 else ""
    note = (f"OVER BUDGET: {what} costs {fmt_usd(total)}, {fmt_usd(total - budget)}{over} more than the budget "
            f"of {fmt_usd(budget)}")  # fmt: skip
    return replace(o, budget_met=False, notes=[*o.notes, note])


def _with_deadline(table: Table, counts: list[int], max_gpus: int, request: Request, figures: Figures,
                   days: float) -> HardwareOutcome:  # fmt: skip
    cluster = table.question.cluster
    limit_s = days * SECONDS_PER_DAY
    target = days
    best: Account | None = None
    price = figures.hardware_usd_per_gpu_hour or 1.0  # without a price: fewest GPU-hours
    for _ in range(DEADLINE_ROUNDS):
        i = table.best(counts, Constraints(deadline_days=target, tokens=request.tokens), price)
        if i is None:
            break
        best = account(table.evaluation, i, request.tokens, figures)
        if best.train_time_s <= limit_s:
            cheapest = "cheapest" if figures.hardware_usd_per_gpu_hour is not None else "fewest GPU-hours (no price)"
            note = (f"the {cheapest} of {counts[0]}..{counts[-1]} GPUs that trains {request.tokens:.3g} tokens "
                    f"within {days:g} days, failures included: {fmt_seconds(best.train_time_s)}")  # fmt: skip
            return Outcome(cluster, max_gpus, counts, best, notes=[note], deadline_met=True)
        target = days * best.reliability.goodput * DEADLINE_MARGIN
    if best is None:
        why = table.reason(counts, Constraints(deadline_days=days, tokens=request.tokens))
        return Outcome(cluster, max_gpus, counts, None, why, deadline_met=False)
    note = (f"MISSES THE DEADLINE: the pick meets {days:g} days without failures "
            f"({fmt_seconds(best.reliability.ideal_time_s)}), but failures stretch it to "
            f"{fmt_seconds(best.train_time_s)}; no count up to {max_gpus} makes it with failures counted")  # fmt: skip
    return Outcome(cluster, max_gpus, counts, best, notes=[note], deadline_met=False)


def _with_budget(table: Table, counts: list[int], max_gpus: int, request: Request, figures: Figures,
                 budget: float) -> HardwareOutcome:  # fmt: skip
    cluster = table.question.cluster
    if figures.hardware_usd_per_gpu_hour is None:
        raise InputError(f"a budget needs a price: hardware {cluster.name} has none for --pricing {figures.pricing}")
    picks = [table.best([n], Constraints()) for n in counts]
    accounts = [account(table.evaluation, i, request.tokens, figures) for i in picks if i is not None]
    priced = [a for a in accounts if a.cost is not None]
    if not priced:
        return Outcome(cluster, max_gpus, counts, None, table.reason([max_gpus], Constraints()))
    within = [a for a in priced if a.cost is not None and a.cost.total <= budget]
    if within:
        best = min(within, key=lambda a: (a.train_time_s, a.cost.total if a.cost else 0.0))
        total = best.cost.total if best.cost else 0.0
        note = (f"the fastest of {counts[0]}..{counts[-1]} GPUs within the budget: {best.gpus} GPUs, "
                f"{fmt_usd(total)} of {fmt_usd(budget)}")  # fmt: skip
        return Outcome(cluster, max_gpus, counts, best, notes=[note], budget_met=True)
    cheapest = min(priced, key=lambda a: (a.cost.total if a.cost else 0.0, a.train_time_s))
    return _check_budget(
        Outcome(cluster, max_gpus, counts, cheapest), budget, f"the cheapest count ({cheapest.gpus} GPUs)"
    )


# --- the verdict ---------------------------------------------------------------------------------


def _share_less(low: float, high: float) -> str:
    """'35% less' (or 'nothing' when both are free)."""
    return "no less (both free)" if high <= 0 else f"{1 - low / high:.0%} less"


def verdict(outcomes: Sequence[HardwareOutcome | PoolOutcome]) -> list[str]:
    """Sentences computed from the accounts: fastest, cheapest, by how much; failures; energy."""
    lines: list[str] = []
    done = [(f"{o.cluster.name} x {o.account.gpus}", o.account) for o in outcomes if o.account is not None]
    for o in outcomes:
        if o.account is None:
            lines.append(f"{o.cluster.name} x {o.max_gpus}: no layout ({o.reason})")
    if not done:
        return lines
    if len(done) == 1:
        name, a = done[0]
        cost = f", {fmt_usd(a.cost.total)}" if a.cost is not None else ", no price"
        lines.append(f"{name}: {fmt_seconds(a.train_time_s)}{cost}, goodput {a.reliability.goodput:.1%}")
        return lines + _warnings(outcomes)
    by_time = sorted(done, key=lambda d: d[1].train_time_s)
    (fast_name, fast) = by_time[0]
    others_t = ", ".join(f"{n} takes {a.train_time_s / fast.train_time_s:.2f}x as long ({fmt_seconds(a.train_time_s)})"
                         for n, a in by_time[1:])  # fmt: skip
    lines.append(f"Fastest: {fast_name}, {fmt_seconds(fast.train_time_s)} with failures -- {others_t}.")
    priced = [(n, a, a.cost.total) for n, a in done if a.cost is not None]
    unpriced = [n for n, a in done if a.cost is None]
    if len(priced) >= 2:
        priced.sort(key=lambda d: d[2])
        cheap_name, cheap, cheap_total = priced[0]
        others_c = ", ".join(f"{_share_less(cheap_total, t)} than {n} ({fmt_usd(t)})" for n, _, t in priced[1:])
        per_billion = cheap.usd_per_billion_tokens or 0.0
        lines.append(f"Cheapest: {cheap_name}, {fmt_usd(cheap_total)} (${per_billion:,.0f} per billion tokens) -- "
                     f"{others_c}.")  # fmt: skip
        fast_cost = next((t for n, _, t in priced if n == fast_name), None)
        if fast_name == cheap_name:
            lines.append(f"{fast_name} wins on both time and cost.")
        elif fast_cost is not None:
            extra = fast_cost - cheap_total
            saved = cheap.train_time_s - fast.train_time_s
            per_day = f" ({fmt_usd(extra / (saved / SECONDS_PER_DAY))} per day saved)" if saved > 0 else ""
            lines.append(f"Trade-off: {fast_name} saves {fmt_seconds(saved)} for {fmt_usd(extra)} more{per_day}.")
    if unpriced:
        lines.append(f"No price for {', '.join(unpriced)}: no dollar figure (add a [price] table or give prices).")
    by_fail = sorted(done, key=lambda d: d[1].reliability.failures_per_hour)
    (calm_name, calm), (rough_name, rough) = by_fail[0], by_fail[-1]
    rf, cf = rough.reliability, calm.reliability
    if rf.failures_per_hour > cf.failures_per_hour * SAME_RATE:
        lines.append(
            f"Failures: {rough_name} fails {rf.failures_per_hour / cf.failures_per_hour:.1f}x as often as {calm_name} "
            f"({rf.failures_per_hour:.3g}/h vs {cf.failures_per_hour:.3g}/h; about {_count(rf.expected_failures)} vs "
            f"{_count(cf.expected_failures)} over the run), goodput {rf.goodput:.1%} vs {cf.goodput:.1%}."
        )
    else:
        counts = ", ".join(f"{n} {_count(a.reliability.expected_failures)}" for n, a in by_time)
        lines.append(f"Failures: the same rate everywhere ({cf.failures_per_hour:.3g}/h, goodput {cf.goodput:.1%}); "
                     f"expected over the run, the longer the more: {counts}.")  # fmt: skip
    by_energy = sorted(done, key=lambda d: d[1].energy_kwh)
    (low_name, low), (high_name, high) = by_energy[0], by_energy[-1]
    if low_name != high_name and high.energy_kwh > 0:
        lines.append(f"Energy: {low_name} uses {_mwh(low.energy_kwh)}, {_share_less(low.energy_kwh, high.energy_kwh)} "
                     f"than {high_name} ({_mwh(high.energy_kwh)}).")  # fmt: skip
    return lines + _warnings(outcomes)


def _warnings(outcomes: Sequence[HardwareOutcome | PoolOutcome]) -> list[str]:
    out = []
    for o in outcomes:
        a = o.account
        if a is not None and a.reliability.goodput < LOW_GOODPUT:
            r = a.reliability
            restart_share = 1.0 - math.exp(-r.restart_s / r.mtbf_s)
            out.append(f"Warning: {o.cluster.name} x {a.gpus} loses {1 - r.goodput:.0%} of its time to failures "
                       f"(a failure every {fmt_duration(r.mtbf_s)}); restarts alone cost {restart_share:.0%}, "
                       f"which no checkpoint interval can recover: shorten --restart-s or raise the MTBF.")  # fmt: skip
    return out


# --- the API function and its result ------------------------------------------------------------


def _entry(o: HardwareOutcome) -> CompareEntry:
    a = o.account
    common: dict[str, Any] = dict(
        hardware=o.cluster.name, max_gpus=o.max_gpus, counts_searched=o.counts, deadline_met=o.deadline_met,
        budget_met=o.budget_met, notes=o.notes, fixes=o.fixes,
    )  # fmt: skip
    if a is None:
        return CompareEntry(gpus=o.max_gpus, reason=o.reason, **NO_RUN, **common)
    price = a.figures.hardware_usd_per_gpu_hour
    best = evaluated(a.evaluation, a.index, tokens=a.tokens, usd_per_gpu_hour=price)
    scaling = [
        ScalingPoint(gpus=s.gpus, layout=s.evaluation.layouts.at(s.index), step_time_s=s.step_time_s,
                     train_time_s=s.train_time_s,
                     ideal_time_s=s.reliability.ideal_time_s, cost_usd=None if s.cost is None else s.cost.total)
        for s in o.scaling
    ]  # fmt: skip
    return CompareEntry(best=best, hardware_usd_per_gpu_hour=price, pricing=a.figures.pricing,
                        assumptions=a.figures.to_json(), scaling=scaling, **a.entry_fields(), **common)  # fmt: skip


def compare(
    model: NameOrPath | Any,
    hardware: NameOrPath | Sequence[NameOrPath],
    *,
    gpus: int | None = None,
    tokens: float = 2e12,
    budget_usd: float | None = None,
    deadline_days: float | None = None,
    pricing: Pricing = "own",
    figures: Mapping[str, float] | None = None,
    staff_usd_per_day: float = 0.0,
    scaling: bool = False,
    mem_headroom: float = 0.0,
    stack: Mapping[str, object] | None = None,
    notify: Callable[[str], None] | None = None,
    **knobs: Unpack[KnobArgs],
) -> CompareResult:
    """The hardware decision: per NAME:COUNT, the best layout and what training `tokens` costs.
    `figures` overrides preset figures for every hardware (gpu_usd, cloud_usd_per_gpu_hour,
    usd_per_kwh, gpu_mtbf_hours, restart_s, ...)."""
    check_arguments(mem_headroom=mem_headroom, stack=stack, figures=figures)
    check_amount("tokens", tokens, minimum=1.0, inclusive=True, required=True)
    check_amount("budget_usd", budget_usd)
    check_amount("deadline_days", deadline_days)
    check_amount("staff_usd_per_day", staff_usd_per_day, inclusive=True, required=True)
    from paraplan.pools import Pool, compare_pool, split_hardware

    spec = resolve_model(model)
    items: list[tuple[Cluster, int] | Pool] = []
    parts = [p for p in split_hardware(hardware_arg(hardware)) if isinstance(p, (str, Pool))]  # compare takes names
    for item in (x for p in parts for x in ([p] if isinstance(p, Pool) else hardware_items(p))):
        if isinstance(item, Pool):  # A:N+B:M or a pool TOML: one alternative, with its own counts
            items.append(item)
            continue
        if item.count is None and gpus is None:
            raise InputError(f"hardware '{item.name}' needs a GPU count: NAME:COUNT (e.g. {item.name}:256) or gpus")
        count = int(item.count) if item.count is not None and ".." not in item.count else gpus
        if item.count is not None and ".." in item.count:
            raise InputError(f"hardware '{item.name}:{item.count}': compare takes one count per hardware")
        assert count is not None
        if not 1 <= count <= MAX_GPUS:
            raise InputError(f"hardware '{item.name}:{count}': the GPU count must be 1..{MAX_GPUS}")
        _check_gpus(count)
        items.append((load_hardware(item.name), count))
    request = Request(tokens=tokens, budget_usd=budget_usd, deadline_days=deadline_days, scaling=scaling)
    searches = sum(len(_counts_searched(c, n, request)) for c, n in (x for x in items if not isinstance(x, Pool)))
    if notify is not None and searches > LONG_COMPARE_SEARCHES:
        notify(f"{searches} (hardware, GPU count) searches for the budget, deadline or scaling curve: about "
               f"{searches * 0.1:.0f}-{searches * 0.4:.0f} s, more for larger models")  # fmt: skip
    outcomes: list[HardwareOutcome | PoolOutcome] = []
    entries: list[CompareEntry] = []
    for entry_item in items:
        if isinstance(entry_item, Pool):
            entry, pool_outcome = compare_pool(
                spec, entry_item, tokens, pricing=pricing, overrides=figures or {}, staff_usd_per_day=staff_usd_per_day,
                budget_usd=budget_usd, deadline_days=deadline_days, mem_headroom=mem_headroom, stack=stack,
                knobs=dict(knobs),
            )  # fmt: skip
            entries.append(entry)
            outcomes.append(pool_outcome)
            continue
        cluster, count = entry_item
        question = Question.of(spec, cluster, dict(knobs), stack, mem_headroom)
        outcome = decide(question, count, request, resolve(cluster, pricing, figures or {}, staff_usd_per_day))
        entries.append(_entry(outcome))
        outcomes.append(outcome)
    return CompareResult(
        tokens=tokens, model=spec.name, budget_usd=budget_usd, deadline_days=deadline_days,
        checkpoint_bytes_per_param=CHECKPOINT_BYTES_PER_PARAM, results=entries,
        verdict=verdict(outcomes),
        warnings=input_warnings(spec) + layout_warnings(spec, [e.best.layout for e in entries if e.best is not None]),
    )  # fmt: skip

"""The hardware decision behind `paraplan compare`: per hardware, the best layout and the full
account of training T tokens on it -- time with failures, goodput, energy and money -- and a
verdict computed from those numbers.

Per hardware `H:N`:
* without a budget or deadline, the optimizer's fastest layout on exactly N GPUs (CP-SAT, top 1);
* with `deadline_days` (and the tokens), N is the maximum: the solver searches every count of
  `gpu_count_domain(gpus_per_node, N, gpus_per_node)` and N, with the deadline as a constraint on
  the failure-free training time and cost as the objective ("the cheapest that meets the
  deadline"). Failures stretch the run by 1/goodput, which the solver does not see, so when the
  failure-aware time misses the deadline the deadline is tightened by the goodput and the search
  repeated (a few rounds); a budget is then checked on the result;
* with only `budget_usd`, N is the maximum: the fastest layout of each count is accounted and the
  fastest run whose total cost is within budget wins (the cheapest, flagged, when none is).

The account (`Account`): ideal time = tokens / tokens_per_s; failures, checkpoint interval and
goodput from `cost_models.reliability`; energy at the predicted busy fraction from
`cost_models.energy`; money from `cost_models.tco`. Every figure comes from the hardware preset
(`[price]`, `[power]`, `[reliability]`, with sources) unless `Overrides` sets it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from functools import lru_cache
from typing import Any

from pydantic import ValidationError

from paraplan.cost_models.energy import busy_fraction, energy_kwh, wall_power_per_gpu_w
from paraplan.cost_models.errors import InputError
from paraplan.cost_models.reliability import ReliabilityAccount, assess
from paraplan.cost_models.tco import CostBreakdown, Pricing, hardware_usd_per_gpu_hour, run_cost
from paraplan.hardware_specs.schema import Cluster, Power, Price, Reliability
from paraplan.scenario import Choice, Scenario
from paraplan.search import Constraints, SearchResult, gpu_count_domain, search
from paraplan.units import fmt_duration, fmt_seconds, fmt_usd

SECONDS_PER_DAY = 86400.0
LOW_GOODPUT = 0.8  # the verdict warns below this goodput
SAME_RATE = 1.01  # failure rates within 1% are called the same in the verdict
DEADLINE_ROUNDS = 4  # re-searches with the deadline tightened by the goodput
DEADLINE_MARGIN = 0.999  # tighten a little beyond the goodput so rounding does not stall the loop

PRICE_FIELDS = ("gpu_usd", "server_share_usd", "network_share_usd", "cloud_usd_per_gpu_hour", "lifetime_years")
POWER_FIELDS = ("node_overhead_w", "idle_fraction", "pue", "usd_per_kwh")
RELIABILITY_FIELDS = ("gpu_mtbf_hours", "node_mtbf_hours", "storage_write_bytes_per_s", "restart_s")
OPTION_OF = {
    "gpu_usd": "--gpu-usd", "server_share_usd": "--server-usd", "network_share_usd": "--network-usd",
    "cloud_usd_per_gpu_hour": "--cloud-usd-per-gpu-hour", "lifetime_years": "--lifetime-years",
    "node_overhead_w": "--node-overhead-w", "idle_fraction": "--idle-fraction", "pue": "--pue",
    "usd_per_kwh": "--usd-per-kwh", "gpu_mtbf_hours": "--gpu-mtbf-hours", "node_mtbf_hours": "--node-mtbf-hours",
    "storage_write_bytes_per_s": "--checkpoint-write-gbps", "restart_s": "--restart-s",
}  # fmt: skip


def _count(x: float) -> str:
    return f"{x:,.0f}" if x >= 10 else f"{x:.1f}"


def _mwh(kwh: float) -> str:
    return f"{kwh / 1000:,.0f} MWh" if kwh >= 100_000 else f"{kwh / 1000:.3g} MWh"


@dataclass(frozen=True)
class Overrides:
    """Figures given on the command line; None keeps the preset's."""

    pricing: Pricing = "own"
    staff_usd_per_day: float = 0.0
    gpu_usd: float | None = None
    server_share_usd: float | None = None
    network_share_usd: float | None = None
    cloud_usd_per_gpu_hour: float | None = None
    lifetime_years: float | None = None
    node_overhead_w: float | None = None
    idle_fraction: float | None = None
    pue: float | None = None
    usd_per_kwh: float | None = None
    gpu_mtbf_hours: float | None = None
    node_mtbf_hours: float | None = None
    storage_write_bytes_per_s: float | None = None
    restart_s: float | None = None

    def given(self, names: tuple[str, ...]) -> dict[str, float]:
        return {n: v for n in names if (v := getattr(self, n)) is not None}


@dataclass(frozen=True)
class Figures:
    """The price, power and reliability figures one hardware is accounted with."""

    pricing: Pricing
    price: Price
    power: Power
    reliability: Reliability
    staff_usd_per_day: float
    hardware_usd_per_gpu_hour: float
    overridden: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        def figures(spec: Price | Power | Reliability, names: tuple[str, ...]) -> dict[str, Any]:
            return {n: getattr(spec, n) for n in names}

        return {
            "pricing": self.pricing,
            "hardware_usd_per_gpu_hour": self.hardware_usd_per_gpu_hour,
            "staff_usd_per_day": self.staff_usd_per_day,
            "price": figures(self.price, PRICE_FIELDS),
            "power": figures(self.power, POWER_FIELDS),
            "reliability": figures(self.reliability, RELIABILITY_FIELDS),
            "overridden": list(self.overridden),
            "sources": {
                "price": list(self.price.sources),
                "power": list(self.power.sources),
                "reliability": list(self.reliability.sources),
            },
        }


def _merge(kind: type[Price] | type[Power] | type[Reliability], base: Price | Power | Reliability | None,
           given: dict[str, float], cluster: Cluster) -> Any:
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
        option = OPTION_OF.get(name, name)
        raise InputError(f"{cluster.name}: {option} {err['msg']} (give it on the command line)") from None


def resolve(cluster: Cluster, overrides: Overrides) -> Figures:
    """The preset's figures with the overrides applied; InputError when a needed figure is missing."""
    price: Price = _merge(Price, cluster.price, overrides.given(PRICE_FIELDS), cluster)
    power: Power = _merge(Power, cluster.power, overrides.given(POWER_FIELDS), cluster)
    if cluster.reliability is None and not {"gpu_mtbf_hours", "node_mtbf_hours"} <= overrides.given(
        RELIABILITY_FIELDS
    ).keys():
        raise InputError(
            f"hardware {cluster.name} has no [reliability] figures: give --gpu-mtbf-hours and --node-mtbf-hours"
        )
    reliability: Reliability = _merge(Reliability, cluster.reliability, overrides.given(RELIABILITY_FIELDS), cluster)
    if overrides.pricing == "own" and price.gpu_usd is None:
        raise InputError(f"hardware {cluster.name} has no gpu_usd for --pricing own: give --gpu-usd or --pricing cloud")
    if overrides.pricing == "cloud" and price.cloud_usd_per_gpu_hour is None:
        raise InputError(
            f"hardware {cluster.name} has no cloud price: give --cloud-usd-per-gpu-hour or --pricing own"
        )
    names = tuple(f.name for f in fields(overrides) if f.name not in ("pricing", "staff_usd_per_day"))
    return Figures(
        pricing=overrides.pricing,
        price=price,
        power=power,
        reliability=reliability,
        staff_usd_per_day=overrides.staff_usd_per_day,
        hardware_usd_per_gpu_hour=hardware_usd_per_gpu_hour(price, overrides.pricing),
        overridden=tuple(n for n in names if getattr(overrides, n) is not None),
    )


@dataclass(frozen=True)
class Account:
    """Training `tokens` with one layout: time, failures, energy, money."""

    choice: Choice
    tokens: float
    figures: Figures
    reliability: ReliabilityAccount
    utilization: float  # busy fraction of the step: (compute + recompute) / step
    wall_power_per_gpu_w: float  # at the facility meter (PUE included)
    energy_kwh: float
    cost: CostBreakdown

    @property
    def gpus(self) -> int:
        return self.reliability.gpus

    @property
    def ideal_time_s(self) -> float:
        return self.reliability.ideal_time_s

    @property
    def train_time_s(self) -> float:
        return self.reliability.train_time_s

    @property
    def usd_per_billion_tokens(self) -> float:
        return self.cost.total / (self.tokens / 1e9)


def account(choice: Choice, tokens: float, figures: Figures) -> Account:
    """The full account of training `tokens` with the chosen layout."""
    ev, i = choice.evaluation, choice.index
    cluster = ev.cluster
    gpus = ev.layouts.at(i).gpus
    ideal = tokens / float(ev.tokens_per_s[i])
    rel = figures.reliability
    failures = assess(
        ev.model.total_params, gpus, cluster.gpus_per_node, ideal,
        rel.gpu_mtbf_hours, rel.node_mtbf_hours, rel.storage_write_bytes_per_s, rel.restart_s,
    )  # fmt: skip
    u = busy_fraction(float(ev.times["compute"][i]), float(ev.times["recompute"][i]), float(ev.step_time_s[i]))
    pw = figures.power
    watts = wall_power_per_gpu_w(cluster.gpu.tdp_w, pw.idle_fraction, u, pw.node_overhead_w, cluster.gpus_per_node,
                                 pw.pue)
    kwh = energy_kwh(watts, gpus, failures.train_time_s)
    cost = run_cost(gpus, failures.train_time_s, figures.hardware_usd_per_gpu_hour, kwh, pw.usd_per_kwh,
                    figures.staff_usd_per_day, figures.pricing)
    return Account(choice, tokens, figures, failures, u, watts, kwh, cost)


@dataclass(frozen=True)
class Request:
    tokens: float
    budget_usd: float | None = None
    deadline_days: float | None = None
    scaling: bool = False  # also account the best layout of several counts (the plot's curve)


@dataclass(frozen=True)
class Outcome:
    """One hardware's answer: the account of its best layout, or why there is none."""

    cluster: Cluster
    max_gpus: int
    counts: list[int]  # the counts searched
    account: Account | None
    reason: str | None = None
    notes: list[str] = field(default_factory=list)
    deadline_met: bool | None = None  # None: no deadline asked
    budget_met: bool | None = None  # None: no budget asked
    scaling: list[Account] = field(default_factory=list)  # best layout per count, ascending

    @property
    def ok(self) -> bool:
        return self.account is not None and self.deadline_met is not False and self.budget_met is not False


@lru_cache(maxsize=256)
def _cached(scenario: Scenario, counts: tuple[int, ...], cons: Constraints) -> SearchResult:
    return search(scenario, list(counts), cons, 1)


def _best(scenario: Scenario, counts: list[int], cons: Constraints) -> SearchResult:
    """The solver's best layout over `counts` (top 1); repeated questions in one process are answered once."""
    return _cached(scenario, tuple(counts), cons)


def candidate_counts(cluster: Cluster, max_gpus: int) -> list[int]:
    """The counts a budget or deadline may pick: whole nodes of 2^a or 3*2^a GPUs, and N itself."""
    per_node = cluster.gpus_per_node
    return sorted({*gpu_count_domain(min(per_node, max_gpus), max_gpus, per_node), max_gpus})


def sweep(scenario: Scenario, counts: list[int], tokens: float, figures: Figures) -> list[Account]:
    """The account of the fastest layout of each count (counts where nothing fits are left out)."""
    out = []
    for n in counts:
        result = _best(scenario, [n], Constraints())
        if result.choices:
            out.append(account(result.choices[0], tokens, figures))
    return out


def scaling_counts(cluster: Cluster, gpus: int) -> list[int]:
    """Counts for the scaling curve: from gpus/16 (at least one node) to 2*gpus, and gpus itself."""
    per_node = cluster.gpus_per_node
    lo = max(min(per_node, gpus), gpus // 16)
    return sorted({*gpu_count_domain(lo, 2 * gpus, per_node), gpus})


def decide(scenario: Scenario, max_gpus: int, request: Request, overrides: Overrides) -> Outcome:
    """The best layout of one hardware for the request, with its account."""
    cluster = scenario.cluster
    figures = resolve(cluster, overrides)
    if request.deadline_days is not None:
        outcome = _with_deadline(scenario, max_gpus, request, figures, request.deadline_days)
    elif request.budget_usd is not None:
        outcome = _with_budget(scenario, max_gpus, request, figures, request.budget_usd)
    else:
        result = _best(scenario, [max_gpus], Constraints())
        if not result.choices:
            outcome = Outcome(cluster, max_gpus, [max_gpus], None, result.reason)
        else:
            outcome = Outcome(cluster, max_gpus, [max_gpus], account(result.choices[0], request.tokens, figures))
    if request.budget_usd is not None and outcome.account is not None and request.deadline_days is not None:
        outcome = _check_budget(outcome, request.budget_usd, "the cheapest run that meets the deadline")
    if request.scaling and outcome.account is not None:
        counts = scaling_counts(cluster, outcome.account.gpus)
        outcome = _replace(outcome, scaling=sweep(scenario, counts, request.tokens, figures))
    return outcome


def _replace(o: Outcome, **changes: Any) -> Outcome:
    data = {f.name: getattr(o, f.name) for f in fields(o)}
    data.update(changes)
    return Outcome(**data)


def _check_budget(o: Outcome, budget: float, what: str) -> Outcome:
    assert o.account is not None
    total = o.account.cost.total
    if total <= budget:
        return _replace(o, budget_met=True, notes=[*o.notes, f"within the budget of {fmt_usd(budget)} "
                                                            f"({fmt_usd(budget - total)} to spare)"])
    note = (f"OVER BUDGET: {what} costs {fmt_usd(total)}, {fmt_usd(total - budget)} "
            f"({total / budget - 1:.0%}) more than the budget of {fmt_usd(budget)}")
    return _replace(o, budget_met=False, notes=[*o.notes, note])


def _with_deadline(scenario: Scenario, max_gpus: int, request: Request, figures: Figures, days: float) -> Outcome:
    cluster = scenario.cluster
    counts = candidate_counts(cluster, max_gpus)
    limit_s = days * SECONDS_PER_DAY
    target = days
    best: Account | None = None
    reason: str | None = None
    for _ in range(DEADLINE_ROUNDS):
        cons = Constraints(deadline_days=target, tokens=request.tokens, objective="cost")
        result = _best(scenario, counts, cons)
        if not result.choices:
            reason = result.reason
            break
        best = account(result.choices[0], request.tokens, figures)
        if best.train_time_s <= limit_s:
            note = (f"the cheapest of {counts[0]}..{counts[-1]} GPUs that trains {request.tokens:.3g} tokens "
                    f"within {days:g} days, failures included: {fmt_seconds(best.train_time_s)}")
            return Outcome(cluster, max_gpus, counts, best, notes=[note], deadline_met=True)
        target = days * best.reliability.goodput * DEADLINE_MARGIN
    if best is None:
        fastest = _best(scenario, [max_gpus], Constraints())
        why = reason or "no layout meets the deadline"
        if fastest.choices:
            quick = account(fastest.choices[0], request.tokens, figures)
            why += (f"; the fastest layout on {max_gpus} GPUs takes {fmt_seconds(quick.train_time_s)} "
                    f"with failures ({fmt_seconds(quick.ideal_time_s)} without), the deadline is {days:g} days")
        return Outcome(cluster, max_gpus, counts, None, why, deadline_met=False)
    note = (f"MISSES THE DEADLINE: the solver's pick meets {days:g} days without failures "
            f"({fmt_seconds(best.ideal_time_s)}), but failures stretch it to {fmt_seconds(best.train_time_s)}; "
            f"no count up to {max_gpus} makes it with failures counted")
    return Outcome(cluster, max_gpus, counts, best, notes=[note], deadline_met=False)


def _with_budget(scenario: Scenario, max_gpus: int, request: Request, figures: Figures, budget: float) -> Outcome:
    cluster = scenario.cluster
    counts = candidate_counts(cluster, max_gpus)
    accounts = sweep(scenario, counts, request.tokens, figures)
    if not accounts:
        result = _best(scenario, [max_gpus], Constraints())
        return Outcome(cluster, max_gpus, counts, None, result.reason or f"no layout fits any of {counts}")
    within = [a for a in accounts if a.cost.total <= budget]
    if within:
        best = min(within, key=lambda a: (a.train_time_s, a.cost.total))
        note = (f"the fastest of {counts[0]}..{counts[-1]} GPUs within the budget: {best.gpus} GPUs, "
                f"{fmt_usd(best.cost.total)} of {fmt_usd(budget)}")
        return Outcome(cluster, max_gpus, counts, best, notes=[note], budget_met=True)
    cheapest = min(accounts, key=lambda a: (a.cost.total, a.train_time_s))
    outcome = Outcome(cluster, max_gpus, counts, cheapest)
    return _check_budget(outcome, budget, f"the cheapest count ({cheapest.gpus} GPUs)")


# --- the verdict ---------------------------------------------------------------------------------


def verdict(outcomes: list[Outcome]) -> list[str]:
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
        lines.append(f"{name}: {fmt_seconds(a.train_time_s)}, {fmt_usd(a.cost.total)} "
                     f"(${a.usd_per_billion_tokens:,.0f} per billion tokens), goodput {a.reliability.goodput:.1%}")
        return lines + _warnings(outcomes)
    by_time = sorted(done, key=lambda d: d[1].train_time_s)
    by_cost = sorted(done, key=lambda d: d[1].cost.total)
    (fast_name, fast), (cheap_name, cheap) = by_time[0], by_cost[0]
    others_t = ", ".join(f"{n} takes {a.train_time_s / fast.train_time_s:.2f}x as long ({fmt_seconds(a.train_time_s)})"
                         for n, a in by_time[1:])
    lines.append(f"Fastest: {fast_name}, {fmt_seconds(fast.train_time_s)} with failures -- {others_t}.")
    others_c = ", ".join(f"{1 - cheap.cost.total / a.cost.total:.0%} less than {n} ({fmt_usd(a.cost.total)})"
                         for n, a in by_cost[1:])
    lines.append(f"Cheapest: {cheap_name}, {fmt_usd(cheap.cost.total)} "
                 f"(${cheap.usd_per_billion_tokens:,.0f} per billion tokens) -- {others_c}.")
    if fast_name == cheap_name:
        lines.append(f"{fast_name} wins on both time and cost.")
    else:
        extra = fast.cost.total - cheap.cost.total
        saved = cheap.train_time_s - fast.train_time_s
        lines.append(f"Trade-off: {fast_name} saves {fmt_seconds(saved)} for {fmt_usd(extra)} more "
                     f"({fmt_usd(extra / (saved / SECONDS_PER_DAY))} per day saved).")
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
                     f"expected over the run, the longer the more: {counts}.")
    by_energy = sorted(done, key=lambda d: d[1].energy_kwh)
    (low_name, low), (high_name, high) = by_energy[0], by_energy[-1]
    if low_name != high_name:
        lines.append(f"Energy: {low_name} uses {_mwh(low.energy_kwh)}, "
                     f"{1 - low.energy_kwh / high.energy_kwh:.0%} less than {high_name} ({_mwh(high.energy_kwh)}).")
    return lines + _warnings(outcomes)


def _warnings(outcomes: list[Outcome]) -> list[str]:
    out = []
    for o in outcomes:
        a = o.account
        if a is not None and a.reliability.goodput < LOW_GOODPUT:
            r = a.reliability
            restart_share = 1.0 - math.exp(-r.restart_s / r.mtbf_s)
            out.append(f"Warning: {o.cluster.name} x {a.gpus} loses {1 - r.goodput:.0%} of its time to failures "
                       f"(a failure every {fmt_duration(r.mtbf_s)}); restarts alone cost {restart_share:.0%}, "
                       f"which no checkpoint interval can recover: shorten --restart-s or raise the MTBF.")
    return out

"""compare's output: the contract's JSON object and the human table (metrics down, hardware across)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from paraplan.cost_models.reliability import CHECKPOINT_BYTES_PER_PARAM
from paraplan.decision import Account, Outcome, Request
from paraplan.output import EvaluatedLayoutOut
from paraplan.report import layout_json, layout_words
from paraplan.units import fmt_duration, fmt_seconds, fmt_usd

GB = 1e9


def _account_json(a: Account) -> dict[str, Any]:
    r = a.reliability
    return {
        "train_time_s": a.train_time_s,
        "ideal_time_s": a.ideal_time_s,
        "goodput": r.goodput,
        "goodput_first_order": r.goodput_first_order,
        "failures_per_hour": r.failures_per_hour,
        "expected_failures": r.expected_failures,
        "job_mtbf_s": r.mtbf_s,
        "checkpoint_bytes": r.checkpoint_bytes,
        "checkpoint_write_s": r.checkpoint_write_s,
        "checkpoint_interval_s": r.checkpoint_interval_s,
        "checkpoint_interval_young_s": r.young_interval_s,
        "restart_s": r.restart_s,
        "busy_fraction": a.utilization,
        "wall_power_per_gpu_w": a.wall_power_per_gpu_w,
        "energy_kwh": a.energy_kwh,
        "cost_usd": a.cost.to_json(),
        "usd_per_billion_tokens": a.usd_per_billion_tokens,
    }


EMPTY_ACCOUNT = dict.fromkeys(
    ("train_time_s", "ideal_time_s", "goodput", "failures_per_hour", "checkpoint_interval_s", "energy_kwh",
     "cost_usd", "usd_per_billion_tokens")
)  # fmt: skip


def outcome_json(o: Outcome) -> dict[str, Any]:
    a = o.account
    entry: dict[str, Any] = {
        "hardware": o.cluster.name,
        "gpus": a.gpus if a is not None else o.max_gpus,
        "best": layout_json(a.choice) if a is not None else None,
    }
    if a is None:
        entry.update(EMPTY_ACCOUNT)
        entry["reason"] = o.reason
    else:
        entry.update(_account_json(a))
        entry["assumptions"] = a.figures.to_json()
    entry["max_gpus"] = o.max_gpus
    entry["counts_searched"] = o.counts
    if o.deadline_met is not None:
        entry["deadline_met"] = o.deadline_met
    if o.budget_met is not None:
        entry["budget_met"] = o.budget_met
    entry["notes"] = o.notes
    if o.scaling:
        entry["scaling"] = [
            {"gpus": s.gpus, "layout": s.choice.evaluation.layouts.at(s.choice.index).to_json(),
             "train_time_s": s.train_time_s, "ideal_time_s": s.ideal_time_s, "cost_usd": s.cost.total}
            for s in o.scaling
        ]
    return entry


def compare_json(model: str, request: Request, outcomes: list[Outcome], verdict: list[str]) -> dict[str, Any]:
    return {
        "tokens": request.tokens,
        "model": model,
        "budget_usd": request.budget_usd,
        "deadline_days": request.deadline_days,
        "checkpoint_bytes_per_param": CHECKPOINT_BYTES_PER_PARAM,
        "results": [outcome_json(o) for o in outcomes],
        "verdict": verdict,
    }


class _Out(BaseModel):
    model_config = ConfigDict(extra="allow")


class CostOut(_Out):
    hardware: float = Field(ge=0, allow_inf_nan=False)
    energy: float = Field(ge=0, allow_inf_nan=False)
    total: float = Field(ge=0, allow_inf_nan=False)


class CompareResultOut(_Out):
    """One hardware of compare's JSON (the contract's keys; null where no layout fits)."""

    hardware: str
    gpus: int = Field(ge=1)
    best: EvaluatedLayoutOut | None
    train_time_s: float | None = Field(gt=0, allow_inf_nan=False)
    goodput: float | None = Field(gt=0, le=1)
    failures_per_hour: float | None = Field(ge=0, allow_inf_nan=False)
    checkpoint_interval_s: float | None = Field(ge=0, allow_inf_nan=False)
    energy_kwh: float | None = Field(ge=0, allow_inf_nan=False)
    cost_usd: CostOut | None


class CompareOut(_Out):
    tokens: float = Field(gt=0)
    results: list[CompareResultOut]


def compare_stdout(model: str, request: Request, outcomes: list[Outcome], verdict: list[str]) -> str:
    """compare's JSON, validated against the contract's keys before it is printed."""
    return CompareOut.model_validate(compare_json(model, request, outcomes, verdict)).model_dump_json(indent=2)


def _row(table: Table, label: str, values: list[str]) -> None:
    table.add_row(label, *values)


def fmt_tokens(tokens: float) -> str:
    """2e12 -> '2T', 1.5e13 -> '15T', 2e11 -> '200B'."""
    for scale, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M")):
        if tokens >= scale:
            return f"{tokens / scale:.4g}{unit}"
    return f"{tokens:,.0f}"


def render_compare(out: Console, model: str, request: Request, outcomes: list[Outcome], verdict: list[str]) -> None:
    asks = []
    if request.deadline_days is not None:
        asks.append(f"deadline {request.deadline_days:g} days")
    if request.budget_usd is not None:
        asks.append(f"budget {fmt_usd(request.budget_usd)}")
    extra = f" ({', '.join(asks)}; each NAME:COUNT is a maximum)" if asks else ""
    out.print(f"[bold]compare[/bold]: {escape(model)}, {fmt_tokens(request.tokens)} training tokens{extra}")
    for o in outcomes:
        a = o.account
        if a is None:
            out.print(f"  {o.cluster.name} x {o.max_gpus}: [red]no layout[/red] -- {escape(o.reason or '')}")
            continue
        out.print(f"  {o.cluster.name} x {a.gpus}: {escape(layout_words(layout_json(a.choice)['layout']))}")
    done = [o for o in outcomes if o.account is not None]
    if done:
        _account_table(out, done)
        _figures_table(out, done)
    for o in outcomes:
        for note in o.notes:
            text = escape(note)
            out.print(f"  {o.cluster.name}: " + (f"[red]{text}[/red]" if note.startswith(("OVER", "MISSES")) else text))
    if verdict:
        out.print("[bold]Verdict[/bold]")
        for line in verdict:
            out.print(f"  {escape(line)}")


def _per_hardware_table(title: str, done: list[Outcome]) -> tuple[Table, list[Account]]:
    """A table with one column per hardware that has an account."""
    accounts = [o.account for o in done if o.account is not None]
    table = Table(title=title, title_justify="left")
    table.add_column("")
    for o, a in zip(done, accounts, strict=True):
        table.add_column(f"{o.cluster.name} x {a.gpus}", justify="right")
    return table, accounts


def _account_table(out: Console, done: list[Outcome]) -> None:
    table, accounts = _per_hardware_table("The run, failures and energy counted", done)

    def row(label: str, fn: Any) -> None:
        _row(table, label, [fn(a) for a in accounts])

    row("nodes", lambda a: f"{a.reliability.nodes}")
    row("step time", lambda a: fmt_seconds(a.choice.step_time_s))
    row("MFU", lambda a: f"{float(a.choice.evaluation.mfu[a.choice.index]):.3f}")
    row("tokens/s", lambda a: f"{float(a.choice.evaluation.tokens_per_s[a.choice.index]):,.0f}")
    row("time without failures", lambda a: fmt_seconds(a.ideal_time_s))
    row("failures per hour", lambda a: f"{a.reliability.failures_per_hour:.4g}")
    row("job MTBF", lambda a: fmt_duration(a.reliability.mtbf_s))
    row("checkpoint size", lambda a: f"{a.reliability.checkpoint_bytes / GB:,.0f} GB")
    row("checkpoint write", lambda a: fmt_duration(a.reliability.checkpoint_write_s))
    row("checkpoint every (Daly)", lambda a: fmt_duration(a.reliability.checkpoint_interval_s))
    row("restart", lambda a: fmt_duration(a.reliability.restart_s))
    row("goodput", lambda a: f"{a.reliability.goodput:.2%}")
    row("[bold]time with failures[/bold]", lambda a: f"[bold]{fmt_seconds(a.train_time_s)}[/bold]")
    row("expected failures", lambda a: f"{a.reliability.expected_failures:,.1f}")
    row("busy fraction of step", lambda a: f"{a.utilization:.2f}")
    row("power per GPU (wall)", lambda a: f"{a.wall_power_per_gpu_w:,.0f} W")
    row("energy", lambda a: f"{a.energy_kwh / 1000:,.1f} MWh")
    row("$/GPU-hour (hardware)", lambda a: f"{a.figures.hardware_usd_per_gpu_hour:.3f} ({a.figures.pricing})")
    row("cost: hardware", lambda a: fmt_usd(a.cost.hardware))
    row("cost: energy", lambda a: fmt_usd(a.cost.energy))
    row("cost: staff", lambda a: fmt_usd(a.cost.staff))
    row("[bold]cost: total[/bold]", lambda a: f"[bold]{fmt_usd(a.cost.total)}[/bold]")
    row("$ per billion tokens", lambda a: f"${a.usd_per_billion_tokens:,.0f}")
    out.print(table)


def _figures_table(out: Console, done: list[Outcome]) -> None:
    table, accounts = _per_hardware_table("Figures used (* = set by option)", done)

    def mark(a: Account, name: str, text: str) -> str:
        return text + ("*" if name in a.figures.overridden else "")

    def row(label: str, name: str, fn: Any) -> None:
        _row(table, label, [mark(a, name, fn(a)) for a in accounts])

    row("GPU MTBF", "gpu_mtbf_hours", lambda a: f"{a.figures.reliability.gpu_mtbf_hours:,.0f} h")
    row("node MTBF", "node_mtbf_hours", lambda a: f"{a.figures.reliability.node_mtbf_hours:,.0f} h")
    row("checkpoint write per node", "storage_write_bytes_per_s",
        lambda a: f"{a.figures.reliability.storage_write_bytes_per_s / GB:.1f} GB/s")
    row("restart", "restart_s", lambda a: fmt_duration(a.figures.reliability.restart_s))

    def capex(a: Account) -> str:
        p = a.figures.price
        if p.gpu_usd is None:
            return "-"
        parts = [p.gpu_usd, p.server_share_usd or 0.0, p.network_share_usd or 0.0]
        return f"{fmt_usd(sum(parts))} / {p.lifetime_years:g} y"

    _row(table, "capex per GPU / lifetime", [
        capex(a) + ("*" if {"gpu_usd", "server_share_usd", "network_share_usd", "lifetime_years"}
                    & set(a.figures.overridden) else "") for a in accounts])
    row("cloud $/GPU-hour", "cloud_usd_per_gpu_hour",
        lambda a: "-" if a.figures.price.cloud_usd_per_gpu_hour is None
        else f"{a.figures.price.cloud_usd_per_gpu_hour:.2f}")
    row("GPU TDP / idle fraction", "idle_fraction",
        lambda a: f"{a.choice.evaluation.cluster.gpu.tdp_w:,.0f} W / {a.figures.power.idle_fraction:.2f}")
    row("node overhead", "node_overhead_w", lambda a: f"{a.figures.power.node_overhead_w:,.0f} W")
    row("PUE", "pue", lambda a: f"{a.figures.power.pue:.2f}")
    row("$/kWh", "usd_per_kwh", lambda a: f"{a.figures.power.usd_per_kwh:.3f}")
    _row(table, "staff $/day", [f"{a.figures.staff_usd_per_day:,.0f}" for a in accounts])
    out.print(table)
    out.print(f"  checkpoint = {CHECKPOINT_BYTES_PER_PARAM} B/param (bf16 weights 2 + fp32 master and Adam 12); "
              + escape("figures from the presets' [price], [power] and [reliability] tables, with sources: ")
              + "`paraplan list hardware --json`")

"""compare's human tables: metrics down, hardware across (markup off, see `report`)."""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Console
from rich.table import Table
from rich.text import Text

from paraplan.cost_models.layout import layout_words
from paraplan.cost_models.units import GB
from paraplan.report import console, range_words, safe, styled
from paraplan.results import CompareEntry, CompareResult
from paraplan.units import fmt_duration, fmt_seconds, fmt_usd


def fmt_tokens(tokens: float) -> str:
    """2e12 -> '2T', 1.5e13 -> '15T', 2e11 -> '200B'."""
    for scale, unit in ((1e12, "T"), (1e9, "B"), (1e6, "M")):
        if tokens >= scale:
            return f"{tokens / scale:.4g}{unit}"
    return f"{tokens:,.0f}"


def print_compare(r: CompareResult) -> None:
    out = console()
    asks = []
    if r.deadline_days is not None:
        asks.append(f"deadline {r.deadline_days:g} days")
    if r.budget_usd is not None:
        asks.append(f"budget {fmt_usd(r.budget_usd)}")
    extra = f" ({', '.join(asks)}; each NAME:COUNT is a maximum)" if asks else ""
    out.print(styled(("compare", "bold"), f": {r.model}, {fmt_tokens(r.tokens)} training tokens{extra}"))
    for e in r.results:
        if e.best is None:
            out.print(styled(f"  {e.hardware} x {e.max_gpus}: ", ("no layout", "red"), f" -- {e.reason or ''}"))
            for fix in e.fixes:
                out.print(styled(f"    would fit: {fix}"))
            continue
        out.print(styled(f"  {e.hardware} x {e.gpus}: {layout_words(e.best.layout)}"))
    done = [e for e in r.results if e.best is not None]
    if done:
        _account_table(out, done)
    for e in r.results:
        for note in e.notes:
            style = "red" if note.startswith(("OVER", "MISSES")) else ""
            out.print(styled(f"  {e.hardware}: ", (note, style)))
    if r.verdict:
        out.print(styled(("Verdict", "bold")))
        for line in r.verdict:
            out.print(styled(f"  {line}"))
    out.print(styled(f"  checkpoint = {r.checkpoint_bytes_per_param} B/param (bf16 weights 2 + fp32 master and Adam 12); "
                     "figures from the presets' [price], [power] and [reliability] tables, with sources: "
                     "`paraplan list hardware --json`"))  # fmt: skip


def _memory_words(e: CompareEntry) -> str:
    if e.best is None:
        return "-"
    mem = e.best.memory_bytes
    near = " ! near the limit" if e.best.near_memory_limit else ""
    return f"{mem.total / GB:.1f}/{mem.capacity / GB:.1f} GB{near}"


def _account_table(out: Console, done: list[CompareEntry]) -> None:
    table = Table(title="The run, failures and energy counted", title_justify="left")
    table.add_column("")
    for e in done:
        table.add_column(safe(f"{e.hardware} x {e.gpus}"), justify="right")

    def row(label: str | Text, fn: Callable[[CompareEntry], str]) -> None:
        table.add_row(label, *(fn(e) for e in done))

    def usd(value: float | None) -> str:
        return "no price" if value is None else fmt_usd(value)

    row("step time", lambda e: range_words(e.best) if e.best else "-")
    row("MFU", lambda e: f"{e.best.mfu:.3f}" if e.best else "-")
    row("memory (most loaded GPU)", lambda e: _memory_words(e))
    row("time without failures", lambda e: fmt_seconds(e.ideal_time_s or 0.0))
    row("failures per hour", lambda e: f"{e.failures_per_hour or 0.0:.4g}")
    row("job MTBF", lambda e: fmt_duration(e.job_mtbf_s or 0.0))
    row("checkpoint size", lambda e: f"{(e.checkpoint_bytes or 0.0) / GB:,.0f} GB")
    row("checkpoint write", lambda e: fmt_duration(e.checkpoint_write_s or 0.0))
    row("checkpoint every (Daly)", lambda e: fmt_duration(e.checkpoint_interval_s or 0.0))
    row("goodput", lambda e: f"{e.goodput or 0.0:.2%}")
    row(Text("time with failures", "bold"), lambda e: fmt_seconds(e.train_time_s or 0.0))
    row("expected failures", lambda e: f"{e.expected_failures or 0.0:,.1f}")
    row("busy fraction of step", lambda e: f"{e.busy_fraction or 0.0:.2f}")
    row("power per GPU (wall)", lambda e: f"{e.wall_power_per_gpu_w or 0.0:,.0f} W")
    row("energy", lambda e: f"{(e.energy_kwh or 0.0) / 1000:,.1f} MWh")
    row("$/GPU-hour (hardware)", lambda e: "no price" if e.hardware_usd_per_gpu_hour is None
        else f"{e.hardware_usd_per_gpu_hour:.3f} ({e.pricing})")  # fmt: skip
    row("cost: hardware", lambda e: usd(e.cost_usd.hardware if e.cost_usd else None))
    row("cost: energy", lambda e: usd(e.cost_usd.energy if e.cost_usd else None))
    row("cost: staff", lambda e: usd(e.cost_usd.staff if e.cost_usd else None))
    row(Text("cost: total", "bold"), lambda e: usd(e.cost_usd.total if e.cost_usd else None))
    row("$ per billion tokens", lambda e: "no price" if e.usd_per_billion_tokens is None
        else f"${e.usd_per_billion_tokens:,.0f}")  # fmt: skip
    out.print(table)

"""Human tables (rich) and JSON objects for the commands' results."""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from paraplan.cost_models.evaluate import TIME_TERMS, Evaluation
from paraplan.cost_models.memory import MEMORY_TERMS
from paraplan.cost_models.models import ModelSpec
from paraplan.cost_models.tco import usd_per_gpu_hour
from paraplan.hardware_specs.schema import Cluster
from paraplan.advice import Change
from paraplan.calibrate import Fit, Run, relative_errors
from paraplan.emit import emit
from paraplan.explain import binding_limits, bottleneck_sentence, dominant_term, link_words, why_loses
from paraplan.scenario import Choice
from paraplan.search import Constraints, SearchResult
from paraplan.units import fmt_seconds, fmt_usd

GB = 1e9
BAR_WIDTH = 30


def console() -> Console:
    width = None if sys.stdout.isatty() else int(os.environ.get("COLUMNS", "110"))
    return Console(width=width, highlight=False, soft_wrap=False)


def layout_words(layout: dict[str, Any]) -> str:
    # TP, PP and DP always; CP and EP only when used.
    dims = "/".join(
        f"{d.upper()}{layout[d]}" for d in ("tp", "pp", "dp", "cp", "ep") if d in ("tp", "pp", "dp") or layout[d] > 1
    )
    sp = "SP" if layout["sequence_parallel"] else "no SP"
    vpp = f", VPP{layout['virtual_stages']}" if layout["virtual_stages"] > 1 else ""
    return (
        f"{dims}{vpp}, micro-batch {layout['micro_batch']}, recompute {_recompute_words(layout)}, "
        f"ZeRO-{layout['zero']}, {sp}, {layout['precision']}"
    )


@dataclass(frozen=True)
class Assessment:
    """validate's answer: the plan's best settings, the optimum, the best single change."""

    choice: Choice
    result: SearchResult
    optimum: Choice | None
    change: Change | None
    chosen: list[str]
    requirements: list[str]  # settings the plan cannot fit or run without


@dataclass(frozen=True)
class HardwareOutcome:
    cluster: Cluster
    gpu_counts: list[int]
    result: SearchResult
    by_cost: bool = False  # ranked by cost rather than step time


def solver_json(result: SearchResult) -> dict[str, Any]:
    return {"status": result.status, "wall_s": result.wall_s, "candidates": result.candidates}


def layout_json(choice: Choice) -> dict[str, Any]:
    """The contract's evaluated-layout object plus the bottleneck and cost per step."""
    ev, i = choice.evaluation, choice.index
    obj = ev.to_json(i)
    term, share = dominant_term(ev, i)
    obj["bottleneck"] = {"term": term, "share": share, "explanation": bottleneck_sentence(ev, i)}
    gpus = ev.layouts.at(i).gpus
    obj["cost_usd_per_step"] = choice.step_time_s * gpus * usd_per_gpu_hour(ev.cluster) / 3600.0
    return obj


def _recompute_words(layout: dict[str, Any]) -> str:
    blocks = layout.get("recompute_layers", 0)
    if not blocks:
        return str(layout["recompute"])
    return f"{layout['recompute']} ({blocks} layer{'s' if blocks > 1 else ''} per chunk)"


def layout_short(layout: dict[str, Any]) -> str:
    """Compact form for tables: 'TP8/PP4/DP8 v5 mb4 rc-none Z1 SP'."""
    dims = "/".join(
        f"{d.upper()}{layout[d]}" for d in ("tp", "pp", "dp", "cp", "ep") if d in ("tp", "pp", "dp") or layout[d] > 1
    )
    vpp = f" v{layout['virtual_stages']}" if layout["virtual_stages"] > 1 else ""
    sp = " SP" if layout["sequence_parallel"] else ""
    precision = f" {layout['precision']}" if layout["precision"] != "bf16" else ""
    blocks = f"{layout['recompute_layers']}" if layout.get("recompute_layers") else ""
    return f"{dims}{vpp} mb{layout['micro_batch']} rc-{layout['recompute']}{blocks} Z{layout['zero']}{sp}{precision}"


def validate_json(a: Assessment) -> dict[str, Any]:
    obj = layout_json(a.choice)
    obj["knobs_chosen"] = a.chosen
    obj["requirements"] = a.requirements
    # No wall time here: validate's JSON is byte-identical across runs of the same input.
    obj["solver"] = {"status": a.result.status, "candidates": a.result.candidates}
    obj["optimum"] = None
    if a.optimum is not None:
        best = a.optimum.evaluation.to_json(a.optimum.index)
        obj["optimum"] = {
            "layout": best["layout"],
            "step_time_s": best["step_time_s"],
            "mfu": best["mfu"],
            "gap": a.choice.step_time_s / a.optimum.step_time_s - 1.0 if a.choice.feasible else None,
        }
    obj["best_change"] = None
    if a.change is not None:
        obj["best_change"] = {
            "change": a.change.words,
            "layout": a.change.choice.evaluation.layouts.at(a.change.choice.index).to_json(),
            "step_time_s": a.change.choice.step_time_s,
            "gain": a.change.gain,
        }
    return obj


def optimize_json(model: ModelSpec, outcomes: list[HardwareOutcome], emit_kind: str | None,
                  flash_attention: bool) -> dict[str, Any]:
    results = []
    for o in outcomes:
        layouts = [layout_json(c) for c in o.result.choices]
        entry: dict[str, Any] = {
            "hardware": o.cluster.name,
            "gpus": layouts[0]["gpus"] if layouts else o.gpu_counts[0],
            "solver": solver_json(o.result),
            "layouts": layouts,
        }
        if o.result.reason:
            entry["reason"] = o.result.reason
        if o.result.choices:
            best = o.result.choices[0]
            entry["explanation"] = {
                "best": [bottleneck_sentence(best.evaluation, best.index),
                         *binding_limits(best.evaluation, best.index)],
                "runners_up": [why_loses(best.evaluation, best.index, c.evaluation, c.index, o.by_cost)
                               for c in o.result.choices[1:]],
            }
            if emit_kind:
                lay = best.evaluation.layouts.at(best.index)
                entry["launch"] = {emit_kind: emit(emit_kind, model, lay, flash_attention)}
        results.append(entry)
    return {"results": results}


def _bar(fraction: float, width: int = BAR_WIDTH) -> str:
    filled = max(0, min(width, round(fraction * width)))
    return "#" * filled + "." * (width - filled)


def _header(out: Console, ev: Evaluation, i: int, title: str) -> None:
    lay = ev.layouts.at(i)
    summary = ev.cluster.description.split(":")[0].split(";")[0].split(".")[0]
    out.print(f"[bold]{title}[/bold]: {ev.model.name} on {lay.gpus} x {ev.cluster.name} ({summary})")
    out.print(f"  layout    {layout_words(lay.to_json())}")
    out.print(f"  batch     {lay.global_batch} sequences x {lay.seq_len} tokens per step")
    status = "[green]FEASIBLE[/green]" if ev.feasible[i] else "[red]INFEASIBLE[/red]"
    out.print(f"  status    {status}")


def _time_table(out: Console, ev: Evaluation, i: int) -> None:
    step = float(ev.step_time_s[i])
    table = Table(title="Time per step (exposed, sums to the step time)", title_justify="left")
    table.add_column("term")
    table.add_column("time", justify="right")
    table.add_column("share", justify="right")
    table.add_column("")
    for term in TIME_TERMS:
        value = float(ev.times[term][i])
        if value <= 0:
            continue
        share = value / step
        table.add_row(term + link_words(ev, i, term), fmt_seconds(value), f"{share:.1%}", _bar(share, 20))
    table.add_row("[bold]step[/bold]", f"[bold]{fmt_seconds(step)}[/bold]", "100%", "")
    out.print(table)
    out.print(
        f"  MFU {ev.mfu[i]:.3f}   HFU {ev.hfu[i]:.3f}   {ev.tflops_per_gpu[i]:.0f} TFLOP/s per GPU   "
        f"{ev.tokens_per_s[i]:,.0f} tokens/s"
    )
    out.print(f"  bottleneck  {bottleneck_sentence(ev, i)}")


def _memory_table(out: Console, ev: Evaluation, i: int) -> None:
    capacity = ev.capacity_bytes
    table = Table(title=f"Memory of the most loaded GPU vs {capacity / GB:.1f} GB capacity", title_justify="left")
    table.add_column("term")
    table.add_column("GB", justify="right")
    table.add_column("of capacity", justify="right")
    table.add_column("")
    for term in MEMORY_TERMS:
        value = float(getattr(ev.memory, term)[i])
        table.add_row(term, f"{value / GB:.1f}", f"{value / capacity:.0%}", _bar(value / capacity))
    total = float(ev.memory.total[i])
    table.add_row(
        "[bold]total[/bold]", f"[bold]{total / GB:.1f}[/bold]", f"{total / capacity:.0%}", _bar(total / capacity)
    )
    out.print(table)


def _violations(out: Console, ev: Evaluation, i: int) -> None:
    found = ev.violations(i)
    if not found:
        return
    out.print("[red]Violated limits[/red] (for the settings that come closest):")
    for sentence in found:
        out.print(f"  - {sentence}")


def _gap(out: Console, a: Assessment) -> None:
    if a.requirements:
        capacity = a.choice.evaluation.usable_bytes / GB
        out.print(f"  needs     {'; '.join(a.requirements)} (to fit {capacity:.1f} GB and the plan's rules)")
    if a.chosen:
        words = layout_words(a.choice.evaluation.layouts.at(a.choice.index).to_json())
        out.print(f"  solver    chose {', '.join(a.chosen)} ({a.result.status}, {a.result.wall_s:.2f} s): {words}")
    if a.optimum is None:
        out.print("  optimum   no layout of these GPUs fits this model")
        return
    best, j = a.optimum.evaluation, a.optimum.index
    words = layout_words(best.layouts.at(j).to_json())
    line = f"  optimum   {words}: {fmt_seconds(a.optimum.step_time_s)}, MFU {float(best.mfu[j]):.3f}"
    if a.choice.feasible:
        gap = a.choice.step_time_s / a.optimum.step_time_s - 1.0
        line += f" -- this plan is {gap:.1%} slower" if gap > 1e-9 else " -- this plan is optimal"
    out.print(line)
    if a.change is not None:
        out.print(f"  best single change  {a.change.words}: {fmt_seconds(a.change.choice.step_time_s)} "
                  f"({a.change.gain:.1%} faster)")


def render_validate(out: Console, a: Assessment) -> None:
    ev, i = a.choice.evaluation, a.choice.index
    _header(out, ev, i, "validate")
    _time_table(out, ev, i)
    _memory_table(out, ev, i)
    _violations(out, ev, i)
    _gap(out, a)


def render_memory(out: Console, a: Assessment) -> None:
    ev, i = a.choice.evaluation, a.choice.index
    _header(out, ev, i, "memory")
    _memory_table(out, ev, i)
    _violations(out, ev, i)
    if a.requirements:
        out.print(f"  needs     {'; '.join(a.requirements)}")
    if a.chosen:
        out.print(f"  chosen for this plan: {', '.join(a.chosen)}")


def render_optimize(out: Console, model: ModelSpec, outcomes: list[HardwareOutcome], cons: Constraints) -> None:
    for o in outcomes:
        _optimize_table(out, model, o, cons)
    if len(outcomes) > 1:
        _side_by_side(out, model, outcomes)


def _optimize_table(out: Console, model: ModelSpec, o: HardwareOutcome, cons: Constraints) -> None:
    r = o.result
    counts = f"{o.gpu_counts[0]}" if len(o.gpu_counts) == 1 else f"{o.gpu_counts[0]}..{o.gpu_counts[-1]}"
    out.print(
        f"\n[bold]{model.name} on {counts} x {o.cluster.name}[/bold]: CP-SAT {r.status} in {r.wall_s:.2f} s "
        f"over {r.candidates:,} candidates (objective: {cons.objective})"
    )
    if not r.choices:
        out.print(f"  [red]no layout[/red]: {r.reason}")
        return
    table = Table(show_edge=False)
    for col in ("#", "layout", "step", "MFU", "tokens/s", "memory", "$/step"):
        table.add_column(col, justify="left" if col == "layout" else "right")
    for rank, c in enumerate(r.choices, 1):
        obj = layout_json(c)
        mem = obj["memory_bytes"]
        table.add_row(
            str(rank), (f"{obj['gpus']} GPUs: " if len(o.gpu_counts) > 1 else "") + layout_short(obj["layout"]),
            fmt_seconds(obj["step_time_s"]), f"{obj['mfu']:.3f}", f"{obj['tokens_per_s']:,.0f}",
            f"{mem['total'] / GB:.1f}/{mem['capacity'] / GB:.1f} GB", fmt_usd(obj["cost_usd_per_step"]),
        )
    out.print(table)
    best = r.choices[0]
    out.print(f"  why #1    {bottleneck_sentence(best.evaluation, best.index)}")
    for limit in binding_limits(best.evaluation, best.index):
        out.print(f"  limit     {limit}")
    for rank, c in enumerate(r.choices[1:], 2):
        out.print(f"  #{rank:<8} {why_loses(best.evaluation, best.index, c.evaluation, c.index, o.by_cost)}")


def _side_by_side(out: Console, model: ModelSpec, outcomes: list[HardwareOutcome]) -> None:
    table = Table(title=f"\n{model.name}: best layout per hardware", title_justify="left")
    for col in ("hardware", "GPUs", "best layout", "step", "MFU", "tokens/s", "$/step"):
        table.add_column(col, justify="left" if col in ("hardware", "best layout") else "right")
    for o in outcomes:
        if not o.result.choices:
            table.add_row(o.cluster.name, str(o.gpu_counts[0]), "[red]none fits[/red]", "-", "-", "-", "-")
            continue
        obj = layout_json(o.result.choices[0])
        table.add_row(
            o.cluster.name, str(obj["gpus"]), layout_short(obj["layout"]), fmt_seconds(obj["step_time_s"]),
            f"{obj['mfu']:.3f}", f"{obj['tokens_per_s']:,.0f}", fmt_usd(obj["cost_usd_per_step"]),
        )
    out.print(table)


def render_emit(model: ModelSpec, outcomes: list[HardwareOutcome], kind: str, flash_attention: bool) -> None:
    for o in outcomes:
        if len(outcomes) > 1:
            print(f"# {o.cluster.name}")
        if not o.result.choices:
            print(f"# no layout: {o.result.reason}")
            continue
        best = o.result.choices[0]
        print(emit(kind, model, best.evaluation.layouts.at(best.index), flash_attention))


def model_json(m: ModelSpec) -> dict[str, Any]:
    return {**m.model_dump(), "total_params": m.total_params, "active_params": m.active_params}


def cluster_json(c: Cluster) -> dict[str, Any]:
    return c.model_dump(mode="json")


def render_models(out: Console, models: list[ModelSpec]) -> None:
    table = Table(title="Model presets")
    for col in ("name", "params", "active", "layers", "hidden", "heads/kv", "ffn", "vocab", "mlp"):
        table.add_column(col, justify="left" if col in ("name", "mlp") else "right", no_wrap=col == "name")
    for m in models:
        mlp = m.mlp + (f", {m.num_experts} experts top-{m.experts_top_k}" if m.is_moe else "")
        table.add_row(
            m.name, f"{m.total_params / 1e9:.2f}B", f"{m.active_params / 1e9:.2f}B", str(m.num_layers),
            str(m.hidden_size), f"{m.num_heads}/{m.num_kv_heads}", str(m.ffn_hidden_size), str(m.vocab_size), mlp,
        )
    out.print(table)


def render_hardware(out: Console, clusters: list[Cluster]) -> None:
    table = Table(title="Hardware presets: per GPU dense TFLOP/s, memory GB, HBM TB/s; link GB/s per direction")
    columns = ("name", "BF16", "FP8", "memory", "HBM", "node", "fabric", "fabric GB/s", "net GB/s")
    for col in columns:
        table.add_column(col, justify="left" if col in ("name", "fabric") else "right", no_wrap=True)
    for c in clusters:
        g = c.gpu
        table.add_row(
            c.name, f"{g.peak_bf16_flops / 1e12:.0f}", f"{g.peak_fp8_flops / 1e12:.0f}" if g.peak_fp8_flops else "-",
            f"{g.memory_bytes / GB:.1f}", f"{g.mem_bw_bytes_per_s / 1e12:.2f}", str(c.gpus_per_node),
            c.intra_node.kind, f"{c.intra_node.link.bw_bytes_per_s / 1e9:.0f}",
            f"{c.inter_node.bw_bytes_per_s / 1e9:.1f}",
        )
    out.print(table)



def calibrate_json(runs: list[Run], result: Fit, names: list[str], out_path: Path) -> dict[str, Any]:
    before = relative_errors(result.before_s, result.measured_s)
    after = relative_errors(result.after_s, result.measured_s)
    return {
        "hardware": result.cluster.name,
        "out": str(out_path),
        "fitted": names,
        "constants": result.values,
        "runs": [
            {"run": r.label, "measured_s": float(m), "before_s": float(b), "after_s": float(a)}
            for r, m, b, a in zip(runs, result.measured_s, result.before_s, result.after_s, strict=True)
        ],
        "mape_before": float(np.mean(np.abs(before))),
        "mape_after": float(np.mean(np.abs(after))),
        "worst_before": float(np.max(np.abs(before))),
        "worst_after": float(np.max(np.abs(after))),
    }


def render_calibrate(out: Console, obj: dict[str, Any]) -> None:
    table = Table(title=f"calibrate {obj['hardware']}: step time per run", title_justify="left")
    for col in ("run", "measured", "before", "error", "after", "error"):
        table.add_column(col, justify="left" if col == "run" else "right")
    for r in obj["runs"]:
        m = r["measured_s"]
        table.add_row(r["run"], fmt_seconds(m), fmt_seconds(r["before_s"]), f"{r['before_s'] / m - 1:+.1%}",
                      fmt_seconds(r["after_s"]), f"{r['after_s'] / m - 1:+.1%}")
    out.print(table)
    out.print(f"  MAPE {obj['mape_before']:.1%} -> {obj['mape_after']:.1%}; "
              f"worst {obj['worst_before']:.1%} -> {obj['worst_after']:.1%}")
    out.print("  constants: " + ", ".join(f"{k} {v:.3g}" for k, v in obj["constants"].items()))
    out.print(f"  wrote {obj['out']} (use it as --hardware {obj['out']})")

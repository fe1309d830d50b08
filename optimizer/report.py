"""Human tables (rich) and JSON objects for the commands' results."""

from __future__ import annotations

import os
import sys
from typing import Any

from rich.console import Console
from rich.table import Table

from cost_models.evaluate import TIME_TERMS, Evaluation
from cost_models.memory import MEMORY_TERMS
from cost_models.models import ModelSpec
from hardware_specs.schema import Cluster
from optimizer.explain import bottleneck_sentence, dominant_term, link_words
from optimizer.scenario import Choice

GB = 1e9
BAR_WIDTH = 30


def console() -> Console:
    width = None if sys.stdout.isatty() else int(os.environ.get("COLUMNS", "110"))
    return Console(width=width, highlight=False, soft_wrap=False)


def fmt_s(seconds: float) -> str:
    if seconds >= 3600 * 24:
        return f"{seconds / 86400:.1f} d"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds * 1e6:.0f} us"


def layout_words(layout: dict[str, Any]) -> str:
    dims = "/".join(f"{d.upper()}{layout[d]}" for d in ("tp", "pp", "dp", "cp", "ep") if d in ("tp", "pp", "dp") or layout[d] > 1)
    sp = "SP" if layout["sequence_parallel"] else "no SP"
    vpp = f", VPP{layout['virtual_stages']}" if layout["virtual_stages"] > 1 else ""
    return (
        f"{dims}{vpp}, micro-batch {layout['micro_batch']}, recompute {layout['recompute']}, "
        f"ZeRO-{layout['zero']}, {sp}, {layout['precision']}"
    )


def validate_json(choice: Choice, optimum: Choice | None, chosen: list[str]) -> dict[str, Any]:
    ev, i = choice.evaluation, choice.index
    obj = ev.to_json(i)
    term, share = dominant_term(ev, i)
    obj["knobs_chosen"] = chosen
    obj["bottleneck"] = {"term": term, "share": share, "explanation": bottleneck_sentence(ev, i)}
    if optimum is None:
        obj["optimum"] = None
    else:
        best = optimum.evaluation.to_json(optimum.index)
        obj["optimum"] = {
            "layout": best["layout"],
            "step_time_s": best["step_time_s"],
            "mfu": best["mfu"],
            "gap": choice.step_time_s / optimum.step_time_s - 1.0 if choice.feasible else None,
        }
    return obj


def _bar(fraction: float, width: int = BAR_WIDTH) -> str:
    filled = max(0, min(width, round(fraction * width)))
    return "#" * filled + "." * (width - filled)


def _header(out: Console, ev: Evaluation, i: int, title: str) -> None:
    lay = ev.layouts.at(i)
    out.print(f"[bold]{title}[/bold]: {ev.model.name} on {lay.gpus} x {ev.cluster.name} ({ev.cluster.description.split('.')[0]})")
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
        table.add_row(term + link_words(ev, i, term), fmt_s(value), f"{share:.1%}", _bar(share, 20))
    table.add_row("[bold]step[/bold]", f"[bold]{fmt_s(step)}[/bold]", "100%", "")
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
    table.add_row("[bold]total[/bold]", f"[bold]{total / GB:.1f}[/bold]", f"{total / capacity:.0%}", _bar(total / capacity))
    out.print(table)


def _violations(out: Console, ev: Evaluation, i: int) -> None:
    found = ev.violations(i)
    if not found:
        return
    out.print("[red]Violated limits[/red] (for the settings that come closest):")
    for sentence in found:
        out.print(f"  - {sentence}")


def _gap(out: Console, choice: Choice, optimum: Choice | None, chosen: list[str]) -> None:
    if chosen:
        out.print(f"  chosen for this plan: {', '.join(chosen)}")
    if optimum is None:
        out.print("  optimum: no layout of these GPUs fits this model")
        return
    best = optimum.evaluation.to_json(optimum.index)
    line = f"  optimum   {layout_words(best['layout'])}: {fmt_s(optimum.step_time_s)}, MFU {best['mfu']:.3f}"
    if choice.feasible:
        gap = choice.step_time_s / optimum.step_time_s - 1.0
        line += f" -- this plan is {gap:.1%} slower" if gap > 1e-9 else " -- this plan is optimal"
    out.print(line)


def render_validate(out: Console, choice: Choice, optimum: Choice | None, chosen: list[str]) -> None:
    ev, i = choice.evaluation, choice.index
    _header(out, ev, i, "validate")
    _time_table(out, ev, i)
    _memory_table(out, ev, i)
    _violations(out, ev, i)
    _gap(out, choice, optimum, chosen)


def render_memory(out: Console, choice: Choice, optimum: Choice | None, chosen: list[str]) -> None:
    ev, i = choice.evaluation, choice.index
    _header(out, ev, i, "memory")
    _memory_table(out, ev, i)
    _violations(out, ev, i)
    if chosen:
        out.print(f"  chosen for this plan: {', '.join(chosen)}")


def model_json(m: ModelSpec) -> dict[str, Any]:
    return {**m.model_dump(), "total_params": m.total_params, "active_params": m.active_params}


def cluster_json(c: Cluster) -> dict[str, Any]:
    return c.model_dump(mode="json")


def render_models(out: Console, models: list[ModelSpec]) -> None:
    table = Table(title="Model presets")
    for col in ("name", "params", "active", "layers", "hidden", "heads/kv", "ffn", "vocab", "mlp"):
        table.add_column(col, justify="left" if col in ("name", "mlp") else "right")
    for m in models:
        mlp = m.mlp + (f", {m.num_experts} experts top-{m.experts_top_k}" if m.is_moe else "")
        table.add_row(
            m.name, f"{m.total_params / 1e9:.2f}B", f"{m.active_params / 1e9:.2f}B", str(m.num_layers),
            str(m.hidden_size), f"{m.num_heads}/{m.num_kv_heads}", str(m.ffn_hidden_size), str(m.vocab_size), mlp,
        )
    out.print(table)


def render_hardware(out: Console, clusters: list[Cluster]) -> None:
    table = Table(title="Hardware presets (per GPU; links per direction)")
    for col in ("name", "GPU", "BF16 TFLOP/s", "FP8", "memory GB", "HBM TB/s", "node", "intra-node", "network GB/s"):
        table.add_column(col, justify="left" if col in ("name", "GPU", "intra-node") else "right")
    for c in clusters:
        g = c.gpu
        fp8 = f"{g.peak_fp8_flops / 1e12:.0f}" if g.peak_fp8_flops else "-"
        intra = f"{c.intra_node.kind} {c.intra_node.link.bw_bytes_per_s / 1e9:.0f} GB/s"
        table.add_row(
            c.name, g.name, f"{g.peak_bf16_flops / 1e12:.0f}", fp8, f"{g.memory_bytes / GB:.1f}",
            f"{g.mem_bw_bytes_per_s / 1e12:.2f}", str(c.gpus_per_node), intra, f"{c.inter_node.bw_bytes_per_s / 1e9:.1f}",
        )
    out.print(table)

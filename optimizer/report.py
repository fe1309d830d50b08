"""Human tables (rich) for the commands' results.

Every console is created with markup off: names and descriptions come from user files and are
printed as they are, never parsed as rich markup; control characters (ANSI escapes included) are
replaced before printing (`safe`). Styling is applied with `Text` objects only.
"""

from __future__ import annotations

import json
import os
import re
import sys

from rich.console import Console
from rich.table import Table
from rich.text import Text

from paraplan.cost_models.layout import Layout, layout_short, layout_words, legend
from paraplan.cost_models.units import GB, memory_text
from paraplan.results import EvaluatedLayout, HardwareResult, OptimizeResult, TimeOut, ValidateResult
from paraplan.units import fmt_seconds, fmt_usd

BAR_WIDTH = 30
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
TIME_WORDS = tuple(TimeOut.model_fields)  # the JSON's time terms, in their order
MEMORY_WORDS = ("params", "grads", "optimizer", "activations", "other")


def safe(text: object) -> str:
    """User-supplied text made printable: control characters (ESC included) become '?'."""
    return _CONTROL.sub("?", str(text))


class _PipeConsole(Console):
    """A console that lets a closed pipe reach the CLI's handler (exit 141, quiet).

    rich's default turns a broken pipe into exit 1, which the contract reserves for "infeasible".
    """

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise BrokenPipeError


def console() -> Console:
    width = None if sys.stdout.isatty() else int(os.environ.get("COLUMNS", "110") or 110)
    return _PipeConsole(width=width, markup=False, highlight=False, emoji=False, soft_wrap=False)


def styled(*parts: str | tuple[str, str]) -> Text:
    """Text from plain strings (made safe) and (string, style) pairs."""
    return Text.assemble(*((safe(p[0]), p[1]) if isinstance(p, tuple) else safe(p) for p in parts))


def _bar(fraction: float, width: int = BAR_WIDTH) -> str:
    filled = max(0, min(width, round(fraction * width)))
    return "#" * filled + "." * (width - filled)


def error_words(e: EvaluatedLayout) -> str:
    """'-4%..+9%, 18 runs': where the measured step time may lie, relative to the prediction,
    by the validation runs of its regime; 'unchecked' for hardware no published run measured."""
    lo, hi = e.step_time_range_s
    span = f"{lo / e.step_time_s - 1:+.0%}..{hi / e.step_time_s - 1:+.0%}"
    runs = re.match(r"(\d+) ", e.accuracy_basis)
    return f"{span}, {runs.group(1)} runs" if runs else f"{span}, unchecked"


def range_words(e: EvaluatedLayout) -> str:
    """'37.9 s (+/-7%, 18 runs)': the step time and its error bar."""
    return f"{fmt_seconds(e.step_time_s)} ({error_words(e)})"


# --- validate / memory ---------------------------------------------------------------------


def _header(out: Console, e: EvaluatedLayout, title: str) -> None:
    lay = e.layout
    out.print(styled((title, "bold"), f": {e.model} on {e.gpus} x {e.hardware}"))
    out.print(styled(f"  layout    {layout_words(lay)}"))
    out.print(styled(f"  batch     {lay.global_batch} sequences x {lay.seq_len} tokens per step"))
    status = ("FEASIBLE", "green") if e.feasible else ("INFEASIBLE", "red")
    out.print(styled("  status    ", status))


def _time_table(out: Console, e: EvaluatedLayout) -> None:
    table = Table(title="Time per step (exposed, sums to the step time)", title_justify="left")
    for col, justify in (("term", "left"), ("time", "right"), ("share", "right"), ("", "left")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    times = e.time_s.model_dump()
    for term in TIME_WORDS:
        value = times[term]
        if value <= 0:
            continue
        share = value / e.step_time_s
        table.add_row(term, fmt_seconds(value), f"{share:.1%}", _bar(share, 20))
    table.add_row(Text("step", "bold"), Text(fmt_seconds(e.step_time_s), "bold"), "100%", "")
    out.print(table)
    out.print(styled(f"  predicted {range_words(e)}"))
    out.print(styled(f"  basis     {e.accuracy_basis}"))
    out.print(styled(
        f"  MFU {e.mfu:.3f} (PaLM convention {e.mfu_palm:.3f})   HFU {e.hfu:.3f}   of {e.peak_flops / 1e12:.0f} "
        f"TFLOP/s peak   {e.tflops_per_gpu:.0f} TFLOP/s per GPU   {e.tokens_per_s:,.0f} tokens/s"
    ))  # fmt: skip
    out.print(styled(f"  bottleneck  {e.bottleneck.explanation}"))


def _memory_table(out: Console, e: EvaluatedLayout) -> None:
    memory = e.memory_bytes
    capacity = memory.capacity
    table = Table(title=f"Memory of the most loaded GPU vs {capacity / GB:.1f} GB capacity", title_justify="left")
    for col, justify in (("term", "left"), ("GB", "right"), ("of capacity", "right"), ("", "left")):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    values = memory.model_dump()
    for term in MEMORY_WORDS:
        label = "reserve" if term == "other" else term
        table.add_row(
            label, f"{values[term] / GB:.1f}", f"{values[term] / capacity:.0%}", _bar(values[term] / capacity)
        )
    table.add_row(Text("total", "bold"), Text(f"{memory.total / GB:.1f}", "bold"), f"{memory.total / capacity:.0%}",
                  _bar(memory.total / capacity))  # fmt: skip
    out.print(table)
    flag = ("  NEAR THE LIMIT", "yellow") if e.near_memory_limit and e.feasible else ""
    out.print(styled(f"  margin    {memory_text(e.memory_margin_bytes)} usable memory left after the reserve", flag))
    if memory.host_bytes_per_gpu > 0:
        out.print(styled(f"  host      {memory.host_bytes_per_gpu / GB:.1f} GB per GPU offloaded to host memory"))


def _violations(out: Console, e: EvaluatedLayout, fixes: list[str]) -> None:
    if e.violations:
        out.print(styled(("Violated limits", "red"), " (for the settings that come closest):"))
        for sentence in e.violations:
            out.print(styled(f"  - {sentence}"))
    if fixes:
        out.print(styled(("What would fit:", "bold")))
        for fix in fixes:
            out.print(styled(f"  - {fix}"))


def print_validate(r: ValidateResult, memory_only: bool = False) -> None:
    out = console()
    _header(out, r, "memory" if memory_only else "validate")
    if not memory_only:
        _time_table(out, r)
    _memory_table(out, r)
    _violations(out, r, r.fixes)
    if r.requirements:
        out.print(styled(f"  needs     {'; '.join(r.requirements)}"))
    if r.knobs_chosen:
        out.print(styled(f"  chosen    {', '.join(r.knobs_chosen)} ({r.solver.method}, {r.solver.candidates:,} "
                         "candidates)"))  # fmt: skip
    if memory_only:
        return
    if r.optimum_not_searched is not None:
        out.print(styled(f"  optimum   not searched: {r.optimum_not_searched}"))
    elif r.optimum is None:
        out.print(styled("  optimum   no layout of these GPUs fits this model"))
    else:
        line = f"  optimum   {layout_words(r.optimum.layout)}: {fmt_seconds(r.optimum.step_time_s)}, MFU {r.optimum.mfu:.3f}"
        if r.optimum.gap is not None:
            line += (
                f" -- this plan is {r.optimum.gap:.1%} slower" if r.optimum.gap > 1e-9 else " -- this plan is optimal"
            )
        out.print(styled(line))
    if r.best_change is not None:
        c = r.best_change
        out.print(styled(f"  best single change  {c.change}: {fmt_seconds(c.step_time_s)} ({c.gain:.1%} faster)"))
    if r.launch_notes:
        out.print(styled(("Launch:", "bold")))
        for note in r.launch_notes:
            out.print(styled(f"  - {note}"))
    _launch(out, r.launch)


def _launch(out: Console, launch: dict[str, str] | None) -> None:
    for framework, text in (launch or {}).items():
        out.print(styled((f"Launch ({framework}):", "bold")))
        # Never wrapped: a launch line is copied and pasted as it stands, whatever the width.
        out.print(Text(safe(text)), soft_wrap=True, overflow="ignore", crop=False)


# --- optimize ------------------------------------------------------------------------------


def _counts(r: HardwareResult) -> str:
    gpus = sorted({e.gpus for e in r.layouts})
    return str(r.gpus) if len(gpus) <= 1 else f"{gpus[0]}..{gpus[-1]}"


def print_optimize(result: OptimizeResult, objective: str) -> None:
    out = console()
    for r in result.results:
        _optimize_table(out, result.model, r, objective)
    if len(result.results) > 1:
        _side_by_side(out, result.results)
    out.print(styled(f"  legend    {legend()}"))


def _optimize_table(out: Console, model: str, r: HardwareResult, objective: str) -> None:
    s = r.solver
    out.print(styled("\n", (f"{model} on {_counts(r)} x {r.hardware}", "bold"),
                     f": {s.status} by {s.method} over {s.candidates:,} candidates in {s.wall_s:.2f} s "
                     f"(objective: {objective})"))  # fmt: skip
    if not r.layouts:
        out.print(styled("  ", ("no layout", "red"), f": {r.reason}"))
        for fix in r.fixes:
            out.print(styled(f"  would fit: {fix}"))
        return
    with_days = r.layouts[0].train_time_s is not None
    with_cost = r.layouts[0].cost_usd is not None
    table = Table(show_edge=False)
    columns = ["#", "GPUs", "layout", "step", "error bar", "MFU", "tokens/s", "memory"]
    columns += ["days"] if with_days else []
    columns += ["cost"] if with_cost else ["$/step"] if r.layouts[0].cost_usd_per_step is not None else []
    for col in columns:
        # The layout folds rather than truncates: a hidden CP or EP degree would change the plan.
        table.add_column(col, justify="left" if col == "layout" else "right", overflow="fold")
    for rank, e in enumerate(r.layouts, 1):
        mem = e.memory_bytes
        words = layout_short(e.layout) + (f" (= {len(e.equivalent)} more)" if e.equivalent else "")
        mem_text = f"{mem.total / GB:.1f}/{mem.capacity / GB:.1f} GB" + (" !" if e.near_memory_limit else "")
        row = [str(rank), str(e.gpus), safe(words), fmt_seconds(e.step_time_s), error_words(e), f"{e.mfu:.3f}",
               f"{e.tokens_per_s:,.0f}", mem_text]  # fmt: skip
        if with_days:
            row.append(f"{(e.train_time_s or 0.0) / 86400:,.1f}")
        if with_cost:
            row.append(fmt_usd(e.cost_usd or 0.0))
        elif e.cost_usd_per_step is not None:
            row.append(fmt_usd(e.cost_usd_per_step))
        table.add_row(*row)
    out.print(table)
    if any(e.near_memory_limit for e in r.layouts):
        out.print(styled("  !         within 3% of capacity: allocator spikes may run out of memory"))
    for e in r.layouts:
        if e.equivalent:
            same = ", ".join(layout_short(v) for v in e.equivalent[:4])
            out.print(styled(f"  same as {layout_short(e.layout)}: {same}"))
    if r.explanation is not None:
        out.print(styled(f"  why #1    {r.explanation.best[0]}"))
        for limit in r.explanation.best[1:]:
            out.print(styled(f"  limit     {limit}"))
        for rank, line in enumerate(r.explanation.runners_up, 2):
            out.print(styled(f"  #{rank:<8} {line}"))
    if r.pool is not None:
        from paraplan.pools import pool_text

        for line in pool_text(r):
            out.print(styled(f"  {safe(line)}"))
    _launch(out, r.launch)


def _side_by_side(out: Console, results: list[HardwareResult]) -> None:
    table = Table(title="\nbest layout per hardware", title_justify="left")
    for col in ("hardware", "GPUs", "best layout", "step", "MFU", "tokens/s"):
        table.add_column(col, justify="left" if col in ("hardware", "best layout") else "right")
    for r in results:
        if not r.layouts:
            table.add_row(safe(r.hardware), str(r.gpus), Text("none fits", "red"), "-", "-", "-")
            continue
        e = r.layouts[0]
        table.add_row(safe(r.hardware), str(e.gpus), layout_short(e.layout), fmt_seconds(e.step_time_s),
                      f"{e.mfu:.3f}", f"{e.tokens_per_s:,.0f}")  # fmt: skip
    out.print(table)


# --- list ----------------------------------------------------------------------------------


def print_models(as_json: bool) -> None:
    from paraplan.cost_models.models import load_model, model_preset_names

    models = [load_model(n) for n in model_preset_names()]
    if as_json:
        rows = [{**m.model_dump(), "total_params": m.total_params, "active_params": m.active_params} for m in models]
        print(json.dumps({"models": rows}, indent=2))
        return
    table = Table(title="Model presets")
    for col in ("name", "params", "active", "layers", "hidden", "heads/kv", "ffn", "vocab", "mlp"):
        table.add_column(col, justify="left" if col in ("name", "mlp") else "right", no_wrap=col == "name")
    for m in models:
        mlp = m.mlp + (f", {m.num_experts} experts top-{m.experts_top_k}" if m.is_moe else "")
        table.add_row(m.name, f"{m.total_params / 1e9:.2f}B", f"{m.active_params / 1e9:.2f}B", str(m.num_layers),
                      str(m.hidden_size), f"{m.num_heads}/{m.num_kv_heads}", str(m.ffn_hidden_size),
                      str(m.vocab_size), mlp)  # fmt: skip
    console().print(table)


def print_hardware(as_json: bool) -> None:
    from paraplan.hardware_specs.loader import load_cluster, preset_names

    clusters = [load_cluster(n) for n in preset_names()]
    if as_json:
        print(json.dumps({"hardware": [c.model_dump(mode="json") for c in clusters]}, indent=2))
        return
    table = Table(title="Hardware presets: per GPU dense TFLOP/s, memory GB (GiB), HBM TB/s; link GB/s per direction")
    columns = ("name", "BF16", "FP8", "memory", "HBM", "node", "fabric", "fabric GB/s", "net GB/s")
    for col in columns:
        table.add_column(col, justify="left" if col in ("name", "fabric") else "right", no_wrap=True)
    for c in clusters:
        g = c.gpu
        memory = f"{g.memory_bytes / GB:.1f} ({g.memory_bytes / 2**30:.0f})"
        table.add_row(
            c.name, f"{g.peak_bf16_flops / 1e12:.0f}", f"{g.peak_fp8_flops / 1e12:.0f}" if g.peak_fp8_flops else "-",
            memory, f"{g.mem_bw_bytes_per_s / 1e12:.2f}", str(c.gpus_per_node), c.intra_node.kind,
            f"{c.intra_node.link.bw_bytes_per_s / 1e9:.0f}", f"{c.inter_node.bw_bytes_per_s / 1e9:.1f}",
        )  # fmt: skip
    out = console()
    out.print(table)
    out.print(
        styled("  memory: GB = 1e9 bytes; in parentheses GiB = 2^30 bytes (vendors quote the A100-40GB's 40 GiB)")
    )


def layout_line(lay: Layout) -> str:
    return safe(layout_words(lay))


def print_calibrate(r: object) -> None:
    from paraplan.results import CalibrateResult

    assert isinstance(r, CalibrateResult)
    out = console()
    table = Table(title=f"calibrate {safe(r.hardware)}: step time per run", title_justify="left")
    for col in ("run", "measured", "before", "error", "after", "error"):
        table.add_column(col, justify="left" if col == "run" else "right")
    for run in r.runs:
        m = run.measured_s
        if run.flagged:
            table.add_row(safe(run.run), fmt_seconds(m), "-", "-", "-", Text("left out", "yellow"))
            continue
        table.add_row(safe(run.run), fmt_seconds(m), fmt_seconds(run.before_s), f"{run.before_s / m - 1:+.1%}",
                      fmt_seconds(run.after_s), f"{run.after_s / m - 1:+.1%}")  # fmt: skip
    out.print(table)
    for run in r.runs:
        if run.flagged:
            out.print(styled(f"  left out {run.run}: {run.flagged}"))
    out.print(
        styled(f"  MAPE {r.mape_before:.1%} -> {r.mape_after:.1%}; worst {r.worst_before:.1%} -> {r.worst_after:.1%}")
    )
    out.print(styled("  constants: " + ", ".join(f"{k} {v:.3g}" for k, v in r.constants.items())))
    for name in r.at_bound:
        out.print(
            styled(("  WARNING", "yellow"), f": {name} ended on the bound of its range (the runs push it further)")
        )
    if r.undetermined:
        from paraplan.calibration import undetermined_words

        out.print(styled(("  NOTE", "yellow"), ": " + undetermined_words(r.undetermined, r.fitted)))
    out.print(styled(f"  wrote {r.out} (use it as --hardware {r.out})"))

"""`--html FILE`: one self-contained HTML report for validate, optimize and compare.

The page holds inline CSS and inline SVG charts drawn by matplotlib (the optional extra
`paraplan[plot]`): no script, no font, no external reference, so it opens offline and can be
mailed or attached to an issue. Every string is escaped (model and hardware names come from user
files). The same result gives the same bytes: no timestamp, no solver wall time, fixed SVG ids.

matplotlib is imported at call time (Agg backend), so the rest of paraplan runs without it.
"""

from __future__ import annotations

import contextlib
import html
import importlib
import io
import os
import re
import tempfile
from collections.abc import Callable, Iterable, Sequence
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from paraplan.compare_report import fmt_tokens
from paraplan.cost_models.errors import InputError
from paraplan.cost_models.layout import layout_short, layout_words
from paraplan.cost_models.units import GB, SECONDS_PER_DAY, memory_text
from paraplan.report import MEMORY_WORDS, TIME_WORDS, error_words, safe
from paraplan.results import (
    CompareEntry,
    CompareResult,
    EvaluatedLayout,
    HardwareResult,
    OptimizeResult,
    ScalingPoint,
    ValidateResult,
)
from paraplan.units import fmt_duration, fmt_seconds, fmt_usd

INSTALL_HINT = "--html needs matplotlib: pip install 'paraplan[plot]'"
# Text stays text (small, selectable, escaped by matplotlib); ids are salted and then prefixed per
# chart so the inline SVGs never share one; a `$` in a name is not read as mathtext.
RC = {
    "svg.fonttype": "none",
    "svg.hashsalt": "paraplan",
    "text.parse_math": False,
    "font.size": 9,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.3,
}
CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",Roboto,Helvetica,Arial,sans-serif;margin:2em auto;
max-width:1300px;padding:0 1em;color:#222;line-height:1.4}
h1{font-size:1.5em;margin-bottom:.2em}h2{font-size:1.2em;margin-top:1.6em;border-bottom:1px solid #ccc}
h3{font-size:1.05em}.muted{color:#666;font-size:.9em}
table{border-collapse:collapse;margin:.6em 0;font-size:.9em}
th,td{border:1px solid #ddd;padding:.25em .6em;text-align:right;vertical-align:top}
th{background:#f4f4f4}td.l,th.l{text-align:left}
dl{display:grid;grid-template-columns:max-content auto;gap:.15em 1em}dt{font-weight:600}dd{margin:0}
figure{margin:1em 0}figure svg{max-width:100%;height:auto}figcaption{color:#555;font-size:.85em}
.bad{color:#b00020;font-weight:600}.good{color:#1b5e20;font-weight:600}
pre{background:#f6f6f6;padding:.6em;overflow-x:auto;font-size:.85em}
"""
_PROLOG = re.compile(r"^.*?(?=<svg)", re.S)
_METADATA = re.compile(r"<metadata>.*?</metadata>\s*", re.S)
_XMLNS = re.compile(r'\s+xmlns(:\w+)?="[^"]*"')


# --- the page ------------------------------------------------------------------------------------


def _e(text: object) -> str:
    """User-supplied text for HTML: control characters replaced, then escaped (quotes too)."""
    return html.escape(safe(text), quote=True)


def _label(text: str, width: int = 36) -> str:
    """A chart label (matplotlib escapes it): printable and short enough for an axis."""
    text = safe(text)
    return text if len(text) <= width else text[: width - 3] + "..."


def _pyplot() -> Any:
    try:
        matplotlib = importlib.import_module("matplotlib")
    except ImportError:
        raise InputError(INSTALL_HINT) from None
    matplotlib.use("Agg")
    return importlib.import_module("matplotlib.pyplot")


def check_available() -> None:
    """InputError (exit 2) before any work when matplotlib is missing."""
    _pyplot()


def _version() -> str:
    try:
        return version("paraplan")
    except PackageNotFoundError:
        return "unknown"


class Page:
    """An HTML body built part by part; charts are matplotlib figures inlined as SVG."""

    def __init__(self, title: str, plt: Any) -> None:
        self.title = title
        self.parts: list[str] = [f"<h1>{_e(title)}</h1>", f'<p class="muted">paraplan {_e(_version())}</p>']
        self.charts = 0
        self.plt = plt

    def add(self, raw: str) -> None:
        self.parts.append(raw)

    def h2(self, text: str) -> None:
        self.add(f"<h2>{_e(text)}</h2>")

    def h3(self, text: str) -> None:
        self.add(f"<h3>{_e(text)}</h3>")

    def p(self, text: str, cls: str = "") -> None:
        self.add(f'<p class="{cls}">{_e(text)}</p>' if cls else f"<p>{_e(text)}</p>")

    def items(self, lines: Iterable[str], cls: str = "") -> None:
        body = "".join(f"<li>{_e(line)}</li>" for line in lines)
        if body:
            self.add(f'<ul class="{cls}">{body}</ul>' if cls else f"<ul>{body}</ul>")

    def facts(self, pairs: Iterable[tuple[str, object]]) -> None:
        self.add("<dl>" + "".join(f"<dt>{_e(k)}</dt><dd>{_e(v)}</dd>" for k, v in pairs) + "</dl>")

    def table(self, head: Sequence[str], rows: Iterable[Sequence[object]], left: Sequence[int] = (0,)) -> None:
        def cell(tag: str, i: int, value: object) -> str:
            return f'<{tag} class="l">{_e(value)}</{tag}>' if i in left else f"<{tag}>{_e(value)}</{tag}>"

        out = ["<table><thead><tr>", *(cell("th", i, h) for i, h in enumerate(head)), "</tr></thead><tbody>"]
        for row in rows:
            out += ["<tr>", *(cell("td", i, v) for i, v in enumerate(row)), "</tr>"]
        self.add("".join([*out, "</tbody></table>"]))

    def details(self, summary: str, text: str) -> None:
        self.add(f"<details><summary>{_e(summary)}</summary><pre>{_e(text)}</pre></details>")

    def chart(self, fig: Any, caption: str) -> None:
        """Inline `fig` as SVG (then closed), its ids prefixed so that no two charts share one."""
        self.charts += 1
        buf = io.StringIO()
        try:
            fig.tight_layout()
            fig.savefig(buf, format="svg")
        finally:
            self.plt.close(fig)
        svg = _METADATA.sub("", _PROLOG.sub("", buf.getvalue(), count=1), count=1)
        svg = _XMLNS.sub("", svg.replace("xlink:href=", "href="))
        tag = f"c{self.charts}-"
        svg = svg.replace('id="', f'id="{tag}').replace("url(#", f"url(#{tag}").replace('href="#', f'href="#{tag}')
        self.add(f"<figure>{svg.strip()}<figcaption>{_e(caption)}</figcaption></figure>")

    def html(self) -> str:
        body = "\n".join(self.parts)
        return (
            '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
            '<meta name="viewport" content="width=device-width, initial-scale=1">\n'
            f"<title>{_e(self.title)}</title>\n<style>{CSS}</style>\n</head>\n<body>\n{body}\n</body>\n</html>\n"
        )


def _render(title: str, build: Callable[[Page], None]) -> str:
    """The page of `build(page)`, drawn under the report's matplotlib settings."""
    plt = _pyplot()
    with importlib.import_module("matplotlib").rc_context(RC):
        page = Page(title, plt)
        build(page)
        return page.html()


def _write(path: Path, text: str) -> None:
    """Write through a temporary file in the same folder and a rename: never a half-written report."""
    directory = path.parent if str(path.parent) else Path(".")
    name = None
    try:
        with tempfile.NamedTemporaryFile(
            "w", dir=directory, prefix=f".{path.name}.", suffix=".tmp", delete=False, encoding="utf-8"
        ) as handle:
            name = handle.name
            handle.write(text)
        os.chmod(name, 0o644)
        os.replace(name, path)
    except OSError as exc:
        if name is not None:
            with contextlib.suppress(OSError):
                os.unlink(name)
        raise InputError(f"cannot write --html '{path}': {exc.strerror or exc}") from None


# --- charts --------------------------------------------------------------------------------------


def _colors(plt: Any, terms: Sequence[str]) -> dict[str, Any]:
    """A fixed color per term, the same in every chart."""
    cmap = plt.get_cmap("tab10")
    return {term: cmap(i % 10) for i, term in enumerate(terms)}


def _stacked(
    plt: Any, names: Sequence[str], parts: Sequence[tuple[str, list[float], Any]], xlabel: str
) -> tuple[Any, Any]:
    """Horizontal bars, one per name, of `parts` (label, a value per name, color) stacked."""
    fig, ax = plt.subplots(figsize=(11, max(1.7, 0.8 + 0.55 * len(names))))
    ys = list(range(len(names)))
    left = [0.0] * len(names)
    for label, values, color in parts:
        if any(v > 0 for v in values):
            ax.barh(ys, values, 0.6, left=left, label=label, color=color)
            left = [a + b for a, b in zip(left, values, strict=True)]
    ax.set_yticks(ys, ["\n".join(_label(line) for line in name.split("\n")) for name in names])
    ax.invert_yaxis()
    ax.set_xlabel(xlabel)
    ax.margins(x=0.2)
    return fig, ax


def _note(ax: Any, x: float, y: float, text: str) -> None:
    ax.annotate(text, (x, y), xytext=(6, 0), textcoords="offset points", va="center", fontsize=8)


def _legend(ax: Any, rows: int) -> None:
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5), ncols=1 if rows > 2 else 3)


def _time_figure(plt: Any, rows: Sequence[tuple[str, EvaluatedLayout]]) -> Any:
    """The exposed time terms of each layout stacked, its error bar and MFU at the end."""
    colors = _colors(plt, TIME_WORDS)
    parts = [(t, [getattr(e.time_s, t) for _, e in rows], colors[t]) for t in TIME_WORDS]
    fig, ax = _stacked(plt, [name for name, _ in rows], parts, "seconds per step (exposed time by term)")
    for y, (_, e) in enumerate(rows):
        lo, hi = e.step_time_range_s
        if hi > lo:
            ax.errorbar(
                [e.step_time_s],
                [y],
                xerr=[[e.step_time_s - lo], [hi - e.step_time_s]],
                fmt="none",
                ecolor="black",
                capsize=3,
                label="error bar" if y == 0 else None,
            )
        _note(ax, max(hi, e.step_time_s), y, f"{fmt_seconds(e.step_time_s)}  MFU {e.mfu:.3f}")
    _legend(ax, len(rows))
    return fig


def _memory_figure(plt: Any, rows: Sequence[tuple[str, EvaluatedLayout]]) -> Any:
    """The memory terms of each layout's most loaded GPU stacked, a black mark at its capacity."""
    colors = _colors(plt, MEMORY_WORDS)
    parts = [
        ("reserve" if t == "other" else t, [getattr(e.memory_bytes, t) / GB for _, e in rows], colors[t])
        for t in MEMORY_WORDS
    ]
    fig, ax = _stacked(plt, [name for name, _ in rows], parts, "GB per GPU (most loaded GPU)")
    for y, (_, e) in enumerate(rows):
        cap, total = e.memory_bytes.capacity / GB, e.memory_bytes.total / GB
        ax.plot([cap, cap], [y - 0.4, y + 0.4], color="black", linewidth=2, label="capacity" if y == 0 else None)
        _note(ax, max(cap, total), y, f"{total:.1f} of {cap:.1f} GB")
    _legend(ax, len(rows))
    return fig


def _dims(e: EvaluatedLayout) -> str:
    return layout_short(e.layout).split(" ")[0]


def pareto(points: Sequence[tuple[float, float]]) -> list[bool]:
    """For each point (lower is better in both): True when no other point is at least as good in
    both coordinates and better in one."""
    return [not any(b[0] <= a[0] and b[1] <= a[1] and b != a for b in points) for a in points]


class Scaling:
    """The axes of a scaling curve: days (else seconds per step) and dollars (else GPU-hours)."""

    def __init__(self, points: Iterable[ScalingPoint]) -> None:
        listed = list(points)
        self.days = all(p.train_time_s is not None for p in listed)
        self.priced = all(p.cost_usd is not None for p in listed)
        self.time_label = "days" if self.days else "seconds per step"
        self.cost_label = "USD" if self.priced else "GPU-hours" if self.days else "GPU-hours per step"

    def time(self, p: ScalingPoint) -> float:
        return (p.train_time_s or 0.0) / SECONDS_PER_DAY if self.days else p.step_time_s

    def cost(self, p: ScalingPoint) -> float:
        if self.priced:
            return p.cost_usd or 0.0
        return p.gpus * ((p.train_time_s or 0.0) if self.days else p.step_time_s) / 3600

    def cost_words(self, p: ScalingPoint) -> str:
        return fmt_usd(self.cost(p)) if self.priced else f"{self.cost(p):,.4g}"

    def front(self, points: Sequence[ScalingPoint]) -> list[bool]:
        return pareto([(self.time(p), self.cost(p)) for p in points])


def _scaling_figure(plt: Any, series: Sequence[tuple[str, list[ScalingPoint], int | None]]) -> Any:
    """GPUs against time and against cost, and cost against time; filled markers are the Pareto
    front of each hardware (not beaten in both), a star the count chosen."""
    axes_of = Scaling(p for _, points, _ in series for p in points)
    fig, (ax_t, ax_c, ax_f) = plt.subplots(1, 3, figsize=(13, 4))
    ticker = importlib.import_module("matplotlib.ticker")
    counts = sorted({p.gpus for _, points, _ in series for p in points})
    for name, points, chosen in series:
        front = axes_of.front(points)
        ts = [axes_of.time(p) for p in points]
        cs = [axes_of.cost(p) for p in points]
        gs = [p.gpus for p in points]
        (line,) = ax_t.plot(gs, ts, marker="o", markerfacecolor="white", label=_label(name, 24))
        color = line.get_color()
        ax_c.plot(gs, cs, marker="o", markerfacecolor="white", color=color)
        ax_f.plot(ts, cs, linestyle="none", marker="o", markerfacecolor="white", color=color)
        on = [i for i, f in enumerate(front) if f]
        for ax, xs, ys in ((ax_t, gs, ts), (ax_c, gs, cs)):
            ax.plot([xs[i] for i in on], [ys[i] for i in on], linestyle="none", marker="o", color=color)
        order = sorted(on, key=lambda i: ts[i])
        ax_f.plot([ts[i] for i in order], [cs[i] for i in order], marker="o", drawstyle="steps-post", color=color)
        for i in on:
            ax_f.annotate(f" {gs[i]}", (ts[i], cs[i]), fontsize=7)
        if chosen is not None and chosen in gs:
            i = gs.index(chosen)
            for ax, x, y in ((ax_t, gs[i], ts[i]), (ax_c, gs[i], cs[i]), (ax_f, ts[i], cs[i])):
                ax.plot([x], [y], marker="*", markersize=14, color=color, markeredgecolor="black")
    for ax in (ax_t, ax_c):
        ax.set_xscale("log", base=2)
        ax.set_xticks(counts, [str(c) for c in counts], rotation=45, fontsize=7)
        ax.minorticks_off()
        ax.set_xlabel("GPUs")
    times = [axes_of.time(p) for _, points, _ in series for p in points]
    if times and max(times) > 20 * min(times):
        ax_t.set_yscale("log")
        ax_f.set_xscale("log")
        for axis in (ax_t.yaxis, ax_f.xaxis):  # plain numbers: the default labels are mathtext
            axis.set_major_formatter(ticker.LogFormatter())
            axis.set_minor_formatter(ticker.LogFormatter(labelOnlyBase=False))
    if axes_of.priced:
        usd = ticker.FuncFormatter(lambda v, _: fmt_usd(v))
        ax_c.yaxis.set_major_formatter(usd)
        ax_f.yaxis.set_major_formatter(usd)
    ax_t.set_ylabel(axes_of.time_label)
    ax_t.set_title("time vs GPUs")
    ax_c.set_ylabel(axes_of.cost_label)
    ax_c.set_title("cost vs GPUs")
    ax_f.set_xlabel(axes_of.time_label)
    ax_f.set_ylabel(axes_of.cost_label)
    ax_f.set_title("Pareto front (labels: GPUs)")
    ax_t.legend(fontsize=8, loc="best")
    return fig


def _scaling_section(page: Page, series: Sequence[tuple[str, list[ScalingPoint], int | None]]) -> None:
    axes_of = Scaling(p for _, points, _ in series for p in points)
    page.chart(
        _scaling_figure(page.plt, series),
        f"The fastest layout at each GPU count: {axes_of.time_label} and {axes_of.cost_label}. Filled markers: "
        "the Pareto front (no other count is both faster and cheaper); star: the count chosen.",
    )
    for name, points, _ in series:
        front = axes_of.front(points)
        with_ideal = any(p.ideal_time_s is not None and p.ideal_time_s != p.train_time_s for p in points)
        head = ["GPUs", "layout", "step", axes_of.time_label]
        head += ["days without failures"] if with_ideal else []
        head += [axes_of.cost_label, "Pareto front"]
        rows = []
        for p, on in zip(points, front, strict=True):
            row: list[object] = [p.gpus, layout_short(p.layout), fmt_seconds(p.step_time_s), f"{axes_of.time(p):,.4g}"]
            row += [f"{(p.ideal_time_s or 0.0) / SECONDS_PER_DAY:,.4g}"] if with_ideal else []
            row += [axes_of.cost_words(p), "yes" if on else ""]
            rows.append(row)
        page.h3(f"Scaling of {name}")
        page.table(head, rows, left=(1,))


# --- validate ------------------------------------------------------------------------------------


def _layout_facts(e: EvaluatedLayout) -> list[tuple[str, object]]:
    lay = e.layout
    return [
        ("framework", lay.framework),
        ("precision", lay.precision),
        ("batch", f"{lay.global_batch} sequences x {lay.seq_len} tokens per step"),
        ("parameters", f"{e.params.total / 1e9:.2f}B total, {e.params.active / 1e9:.2f}B active"),
    ]


def _step_facts(e: EvaluatedLayout) -> list[tuple[str, object]]:
    return [
        ("step time", f"{fmt_seconds(e.step_time_s)} ({error_words(e)})"),
        ("error bar basis", e.accuracy_basis),
        (
            "MFU",
            f"{e.mfu:.3f} (PaLM convention {e.mfu_palm:.3f}), HFU {e.hfu:.3f}, of {e.peak_flops / 1e12:.0f} "
            "TFLOP/s peak",
        ),
        ("throughput", f"{e.tflops_per_gpu:.0f} TFLOP/s per GPU, {e.tokens_per_s:,.0f} tokens/s"),
        ("bottleneck", e.bottleneck.explanation),
        (
            "memory",
            f"{e.memory_bytes.total / GB:.1f} of {e.memory_bytes.capacity / GB:.1f} GB, margin "
            + memory_text(e.memory_margin_bytes)
            + (" (near the limit)" if e.near_memory_limit and e.feasible else ""),
        ),
    ]


def _warnings(page: Page, warnings: list[str]) -> None:
    page.items([f"Warning: {w}" for w in warnings], "bad")


def _validate_page(page: Page, r: ValidateResult) -> None:
    page.h2("Inputs")
    page.facts(
        [
            ("model", r.model),
            ("hardware", r.hardware),
            ("GPUs", r.gpus),
            ("plan", layout_words(r.layout)),
            *_layout_facts(r),
            ("chosen by the search", ", ".join(r.knobs_chosen) or "none"),
            ("candidates", f"{r.solver.candidates:,} ({r.solver.method})"),
        ]
    )
    _warnings(page, r.warnings)
    page.h2("Result")
    page.add('<p class="good">FEASIBLE</p>' if r.feasible else '<p class="bad">INFEASIBLE</p>')
    page.items(r.violations, "bad")
    if r.fixes:
        page.p("What would fit:")
        page.items(r.fixes)
    page.items([f"needs {req}" for req in r.requirements])
    page.facts(_step_facts(r))
    if r.optimum_not_searched is not None:
        page.p(f"Optimum: not searched: {r.optimum_not_searched}")
    elif r.optimum is None:
        page.p("Optimum: no layout of these GPUs fits this model.")
    else:
        gap = r.optimum.gap
        tail = (
            "" if gap is None else " -- this plan is optimal" if gap <= 1e-9 else f" -- this plan is {gap:.1%} slower"
        )
        page.p(
            f"Optimum: {layout_words(r.optimum.layout)}: {fmt_seconds(r.optimum.step_time_s)}, MFU "
            f"{r.optimum.mfu:.3f}{tail}"
        )
    if r.best_change is not None:
        c = r.best_change
        page.p(f"Best single change: {c.change}: {fmt_seconds(c.step_time_s)} ({c.gain:.1%} faster)")
    row = [(_dims(r), r)]
    page.h2("Time per step")
    page.chart(_time_figure(page.plt, row), "Exposed (not overlapped) time by term; the terms sum to the step time.")
    page.table(
        ["term", "time", "share"],
        [(t, fmt_seconds(v), f"{v / r.step_time_s:.1%}") for t in TIME_WORDS if (v := getattr(r.time_s, t)) > 0],
    )
    page.h2("Memory")
    page.chart(_memory_figure(page.plt, row), "Memory of the most loaded GPU by term against its capacity.")
    mem = r.memory_bytes
    page.table(
        ["term", "GB", "of capacity"],
        [
            ("reserve" if t == "other" else t, f"{getattr(mem, t) / GB:.1f}", f"{getattr(mem, t) / mem.capacity:.0%}")
            for t in MEMORY_WORDS
        ],
    )
    if mem.host_bytes_per_gpu > 0:
        page.p(f"{mem.host_bytes_per_gpu / GB:.1f} GB per GPU offloaded to host memory.")
    if r.stages:
        page.h2("Pipeline stages")
        page.table(
            ["hardware", "GPUs per replica", "TP", "layers"],
            [(s.hardware, s.gpus_per_replica, s.tp, s.layers) for s in r.stages],
        )
    for framework, text in (r.launch or {}).items():
        page.details(f"Launch configuration ({framework})", text)


def validate_html(r: ValidateResult) -> str:
    return _render(f"paraplan validate: {r.model} on {r.gpus} x {r.hardware}", lambda page: _validate_page(page, r))


def write_validate_html(path: Path, result: ValidateResult) -> None:
    _write(path, validate_html(result))


# --- optimize ------------------------------------------------------------------------------------


def _counts(r: HardwareResult) -> str:
    gpus = sorted({p.gpus for p in r.scaling} | {e.gpus for e in r.layouts})
    return str(r.gpus) if len(gpus) <= 1 else f"{gpus[0]}..{gpus[-1]} ({len(gpus)} counts)"


def _tokens(e: EvaluatedLayout) -> str | None:
    if e.train_time_s is None:
        return None
    return fmt_tokens(e.train_time_s / e.step_time_s * e.layout.global_batch * e.layout.seq_len)


# Bars per chart: past this a chart is too tall to read (and slow to draw); the table lists all.
CHART_LAYOUTS = 20


def _hardware_section(page: Page, r: HardwareResult) -> None:
    page.h2(f"{r.hardware} x {_counts(r)}")
    s = r.solver
    page.p(f"{s.status} by {s.method} over {s.candidates:,} candidates.", "muted")
    if not r.layouts:
        page.p(f"No layout: {r.reason or ''}", "bad")
        if r.fixes:
            page.p("What would fit:")
            page.items(r.fixes)
        return
    with_days = r.layouts[0].train_time_s is not None
    with_cost = r.layouts[0].cost_usd is not None
    head = ["#", "GPUs", "layout", "step", "error bar", "MFU", "tokens/s", "memory"]
    head += (["days"] if with_days else []) + (["cost"] if with_cost else [])
    rows = []
    for rank, e in enumerate(r.layouts, 1):
        mem = e.memory_bytes
        same = f" (= {len(e.equivalent)} more)" if e.equivalent else ""
        row: list[object] = [
            rank,
            e.gpus,
            layout_short(e.layout) + same,
            fmt_seconds(e.step_time_s),
            error_words(e),
            f"{e.mfu:.3f}",
            f"{e.tokens_per_s:,.0f}",
            f"{mem.total / GB:.1f}/{mem.capacity / GB:.1f} GB" + (" !" if e.near_memory_limit else ""),
        ]
        row += [f"{(e.train_time_s or 0.0) / SECONDS_PER_DAY:,.1f}"] if with_days else []
        row += [fmt_usd(e.cost_usd or 0.0)] if with_cost else []
        rows.append(row)
    page.table(head, rows, left=(2,))
    page.p(f"#1: {layout_words(r.layouts[0].layout)}")
    if r.explanation is not None:
        page.items(
            [
                f"why #1: {r.explanation.best[0]}",
                *(f"limit: {x}" for x in r.explanation.best[1:]),
                *(f"#{i}: {x}" for i, x in enumerate(r.explanation.runners_up, 2)),
            ]
        )
    bases = sorted({e.accuracy_basis for e in r.layouts})
    page.p(f"Error bars: {'; '.join(bases)}", "muted")
    labelled = [(f"#{i} {_dims(e)}", e) for i, e in enumerate(r.layouts[:CHART_LAYOUTS], 1)]
    which = "each layout" if len(r.layouts) <= CHART_LAYOUTS else f"each of the first {CHART_LAYOUTS} layouts"
    page.chart(
        _time_figure(page.plt, labelled),
        f"Step time of {which} by exposed term (stacked), with its error bar and MFU.",
    )
    page.chart(
        _memory_figure(page.plt, labelled),
        f"Memory of the most loaded GPU of {which} by term; the black mark is the capacity.",
    )
    if len(r.scaling) > 1:
        _scaling_section(page, [(r.hardware, list(r.scaling), r.layouts[0].gpus)])
    for framework, text in (r.launch or {}).items():
        page.details(f"Launch configuration of #1 ({framework})", text)


def _optimize_page(page: Page, result: OptimizeResult) -> None:
    first = next((r.layouts[0] for r in result.results if r.layouts), None)
    page.h2("Inputs")
    facts: list[tuple[str, object]] = [("model", result.model)]
    facts += [("hardware", "; ".join(f"{r.hardware} x {_counts(r)}" for r in result.results))]
    if first is not None:
        facts += [("tokens", tokens)] if (tokens := _tokens(first)) else []
        facts += _layout_facts(first)
    facts += [("legend", result.legend)]
    page.facts(facts)
    _warnings(page, result.warnings)
    if len(result.results) > 1:
        page.h2("Best layout per hardware")
        page.table(
            ["hardware", "GPUs", "best layout", "step", "MFU", "tokens/s"],
            [
                (
                    r.hardware,
                    r.layouts[0].gpus,
                    layout_short(r.layouts[0].layout),
                    fmt_seconds(r.layouts[0].step_time_s),
                    f"{r.layouts[0].mfu:.3f}",
                    f"{r.layouts[0].tokens_per_s:,.0f}",
                )
                if r.layouts
                else (r.hardware, r.gpus, "none fits", "-", "-", "-")
                for r in result.results
            ],
            left=(0, 2),
        )
    for r in result.results:
        _hardware_section(page, r)


def optimize_html(result: OptimizeResult) -> str:
    hardware = ", ".join(r.hardware for r in result.results)
    title = f"paraplan optimize: {result.model} on {hardware}"
    return _render(title, lambda page: _optimize_page(page, result))


def write_optimize_html(path: Path, result: OptimizeResult) -> None:
    _write(path, optimize_html(result))


# --- compare -------------------------------------------------------------------------------------


def _name(e: CompareEntry) -> str:
    return f"{e.hardware} x {e.gpus}"


def _bars(ax: Any, names: Sequence[str], values: Sequence[float], texts: Sequence[str], title: str, unit: str) -> None:
    xs = list(range(len(names)))
    ax.bar(xs, values, 0.6, color=[f"C{i}" for i in xs])
    for x, v, t in zip(xs, values, texts, strict=True):
        ax.annotate(t, (x, v), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(xs, [_label(n, 20) for n in names])
    ax.set_title(title)
    ax.set_ylabel(unit)
    ax.margins(y=0.15)


def _reliability_figure(plt: Any, done: Sequence[CompareEntry]) -> Any:
    fig, (ax_t, ax_g, ax_f) = plt.subplots(1, 3, figsize=(13, 3.8))
    names = [_name(e) for e in done]
    xs = list(range(len(done)))
    ideal = [(e.ideal_time_s or 0.0) / SECONDS_PER_DAY for e in done]
    real = [(e.train_time_s or 0.0) / SECONDS_PER_DAY for e in done]
    ax_t.bar([x - 0.2 for x in xs], ideal, 0.4, label="without failures", color="#9ecae1")
    ax_t.bar([x + 0.2 for x in xs], real, 0.4, label="with failures", color="#3182bd")
    for x, v in zip(xs, real, strict=True):
        ax_t.annotate(f"{v:,.1f} d", (x + 0.2, v), ha="center", va="bottom", fontsize=8)
    ax_t.set_xticks(xs, [_label(n, 20) for n in names])
    ax_t.set_title("training time")
    ax_t.set_ylabel("days")
    ax_t.legend(fontsize=8, loc="lower right")
    ax_t.margins(y=0.15)
    goodput = [100 * (e.goodput or 0.0) for e in done]
    _bars(ax_g, names, goodput, [f"{g:.2f}%" for g in goodput], "goodput", "% of GPU time useful")
    ax_g.set_ylim(min(goodput) - 5 if goodput else 0, 100.5)
    rates = [e.failures_per_hour or 0.0 for e in done]
    _bars(
        ax_f,
        names,
        rates,
        [f"{r:.3g}/h, {e.expected_failures or 0:,.0f} in the run" for r, e in zip(rates, done, strict=True)],
        "failures per hour",
        "failures per hour",
    )
    return fig


def _cost_figure(plt: Any, done: Sequence[CompareEntry]) -> Any:
    fig, (ax_c, ax_e) = plt.subplots(1, 2, figsize=(13, 3.8))
    names = [_name(e) for e in done]
    xs = list(range(len(done)))
    bottom = [0.0] * len(done)
    for part, color in (("hardware", "#3182bd"), ("energy", "#fd8d3c"), ("staff", "#74c476")):
        values = [getattr(e.cost_usd, part) if e.cost_usd else 0.0 for e in done]
        if any(v > 0 for v in values):
            ax_c.bar(xs, values, 0.6, bottom=bottom, label=part, color=color)
            bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    for x, e in zip(xs, done, strict=True):
        ax_c.annotate(
            fmt_usd(e.cost_usd.total) if e.cost_usd else "no price",
            (x, bottom[x]),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax_c.set_xticks(xs, [_label(n, 20) for n in names])
    ax_c.yaxis.set_major_formatter(importlib.import_module("matplotlib.ticker").FuncFormatter(lambda v, _: fmt_usd(v)))
    ax_c.set_title("cost of the run")
    if any(e.cost_usd for e in done):
        ax_c.legend(fontsize=8, loc="lower right")
    ax_c.margins(y=0.15)
    energy = [(e.energy_kwh or 0.0) / 1000 for e in done]
    _bars(ax_e, names, energy, [f"{v:,.0f} MWh" for v in energy], "energy", "MWh")
    return fig


def _account_rows(done: Sequence[CompareEntry]) -> list[list[object]]:
    def usd(v: float | None) -> str:
        return "no price" if v is None else fmt_usd(v)

    rows: list[tuple[str, Any]] = [
        ("layout", lambda e: layout_short(e.best.layout) if e.best else "-"),
        ("step time", lambda e: f"{fmt_seconds(e.best.step_time_s)} ({error_words(e.best)})" if e.best else "-"),
        ("MFU", lambda e: f"{e.best.mfu:.3f}" if e.best else "-"),
        ("time without failures", lambda e: fmt_seconds(e.ideal_time_s or 0.0)),
        ("failures per hour", lambda e: f"{e.failures_per_hour or 0.0:.4g}"),
        ("job MTBF", lambda e: fmt_duration(e.job_mtbf_s or 0.0)),
        ("checkpoint size", lambda e: f"{(e.checkpoint_bytes or 0.0) / GB:,.0f} GB"),
        ("checkpoint every (Daly)", lambda e: fmt_duration(e.checkpoint_interval_s or 0.0)),
        ("goodput", lambda e: f"{e.goodput or 0.0:.2%}"),
        ("time with failures", lambda e: fmt_seconds(e.train_time_s or 0.0)),
        ("expected failures", lambda e: f"{e.expected_failures or 0.0:,.1f}"),
        ("power per GPU (wall)", lambda e: f"{e.wall_power_per_gpu_w or 0.0:,.0f} W"),
        ("energy", lambda e: f"{(e.energy_kwh or 0.0) / 1000:,.1f} MWh"),
        (
            "$/GPU-hour (hardware)",
            lambda e: usd(e.hardware_usd_per_gpu_hour) + (f" ({e.pricing})" if e.pricing else ""),
        ),
        ("cost: hardware", lambda e: usd(e.cost_usd.hardware if e.cost_usd else None)),
        ("cost: energy", lambda e: usd(e.cost_usd.energy if e.cost_usd else None)),
        ("cost: staff", lambda e: usd(e.cost_usd.staff if e.cost_usd else None)),
        ("cost: total", lambda e: usd(e.cost_usd.total if e.cost_usd else None)),
        ("$ per billion tokens", lambda e: usd(e.usd_per_billion_tokens)),
    ]
    return [[label, *(fn(e) for e in done)] for label, fn in rows]


def _compare_page(page: Page, r: CompareResult) -> None:
    page.h2("Inputs")
    facts: list[tuple[str, object]] = [("model", r.model), ("tokens", fmt_tokens(r.tokens))]
    facts += [
        (
            "hardware",
            "; ".join(
                f"{e.hardware}: at most {e.max_gpus} GPUs"
                if r.budget_usd or r.deadline_days
                else f"{e.hardware} x {e.max_gpus}"
                for e in r.results
            ),
        )
    ]
    facts += [("budget", fmt_usd(r.budget_usd))] if r.budget_usd is not None else []
    facts += [("deadline", f"{r.deadline_days:g} days")] if r.deadline_days is not None else []
    first = next((e.best for e in r.results if e.best), None)
    facts += _layout_facts(first)[:3] if first else []
    facts += [("checkpoint", f"{r.checkpoint_bytes_per_param} B/param (bf16 weights 2 + fp32 master and Adam 12)")]
    page.facts(facts)
    _warnings(page, r.warnings)
    page.h2("Verdict")
    page.items(r.verdict)
    for e in r.results:
        if e.best is None:
            page.p(f"{e.hardware} x {e.max_gpus}: no layout -- {e.reason or ''}", "bad")
            page.items(f"would fit: {fix}" for fix in e.fixes)
        page.items([f"{e.hardware}: {note}" for note in e.notes])
    done = [e for e in r.results if e.best is not None]
    if not done:
        return
    page.h2("The run, failures and energy counted")
    page.table(["", *(_name(e) for e in done)], _account_rows(done))
    page.chart(
        _reliability_figure(page.plt, done),
        "Training time without and with failures (checkpoints at the Daly interval, restarts), the goodput "
        "(useful share of GPU time) and the failure rate of the whole job.",
    )
    page.chart(
        _cost_figure(page.plt, done),
        "Cost of the run split into hardware, energy and staff; energy at the predicted utilization.",
    )
    rows = [(f"{_name(e)}\n{_dims(e.best)}", e.best) for e in done if e.best is not None]
    page.h2("The best layout of each hardware")
    page.chart(_time_figure(page.plt, rows), "Step time by exposed term (stacked), with its error bar and MFU.")
    page.chart(_memory_figure(page.plt, rows), "Memory of the most loaded GPU by term; the black mark is the capacity.")
    series = [(e.hardware, list(e.scaling), e.gpus) for e in done if len(e.scaling) > 1]
    if series:
        page.h2("Scaling")
        _scaling_section(page, series)
        axes_of = Scaling(p for _, points, _ in series for p in points)
        everything = [(name, p) for name, points, _ in series for p in points]
        front = pareto([(axes_of.time(p), axes_of.cost(p)) for _, p in everything])
        page.p(
            "Across all hardware, the Pareto front is: "
            + ", ".join(f"{name} x {p.gpus}" for (name, p), on in zip(everything, front, strict=True) if on)
            + "."
        )


def compare_html(result: CompareResult) -> str:
    hardware = ", ".join(e.hardware for e in result.results)
    title = f"paraplan compare: {result.model}, {fmt_tokens(result.tokens)} tokens on {hardware}"
    return _render(title, lambda page: _compare_page(page, result))


def write_compare_html(path: Path, result: CompareResult) -> None:
    _write(path, compare_html(result))

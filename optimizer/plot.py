"""`paraplan compare --plot FILE.png`: the decision in one figure (matplotlib, the optional extra
`paraplan[plot]`).

Six panels, one bar or line per hardware: training time without and with failures; the cost
split into hardware, energy and staff; the per-GPU memory of the best layout by term against
capacity; its step time by exposed term (share of the step); and the scaling curve -- the
fastest layout at several GPU counts (`decision.scaling_counts`) -- as train time and cost
against the GPU count.

matplotlib is imported at call time (Agg backend, no display), so the rest of paraplan runs
without it; a missing matplotlib is reported as bad input with the install command.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from paraplan.cost_models.errors import InputError
from paraplan.cost_models.evaluate import TIME_TERMS
from paraplan.cost_models.memory import MEMORY_TERMS
from paraplan.cost_models.units import GB, SECONDS_PER_DAY
from paraplan.results import CompareResult

INSTALL_HINT = "--plot needs matplotlib: pip install 'paraplan[plot]' (or pip install matplotlib)"


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


def write_plot(path: Path, result: CompareResult) -> None:
    plt = _pyplot()
    done = [e for e in result.results if e.best is not None]
    if not done:
        raise InputError("--plot: no hardware has a layout to plot")
    labels = [f"{e.hardware}\nx {e.gpus}" for e in done]
    x = list(range(len(done)))
    fig, axes = plt.subplots(2, 3, figsize=(17, 9.5))
    fig.suptitle(f"{result.model}: training {result.tokens:.3g} tokens -- best layout per hardware", fontsize=14)

    ax = axes[0][0]
    width = 0.38
    ax.bar(
        [i - width / 2 for i in x],
        [(e.ideal_time_s or 0) / SECONDS_PER_DAY for e in done],
        width,
        label="without failures",
    )
    ax.bar(
        [i + width / 2 for i in x],
        [(e.train_time_s or 0) / SECONDS_PER_DAY for e in done],
        width,
        label="with failures",
    )
    for i, e in enumerate(done):
        ax.annotate(f"{(e.train_time_s or 0) / SECONDS_PER_DAY:.1f} d\ngoodput {e.goodput or 0:.1%}",
                    (i + width / 2, (e.train_time_s or 0) / SECONDS_PER_DAY), ha="center", va="bottom", fontsize=8)  # fmt: skip
    ax.set_xticks(x, labels)
    ax.set_ylabel("days")
    ax.set_title("Training time")
    ax.legend(fontsize=8)
    ax.margins(y=0.2)

    ax = axes[0][1]
    bottom = [0.0] * len(done)
    for part in ("hardware", "energy", "staff"):
        values = [getattr(e.cost_usd, part) / 1e6 if e.cost_usd else 0.0 for e in done]
        if any(v > 0 for v in values):
            ax.bar(x, values, 0.6, bottom=bottom, label=part)
            bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    for i, e in enumerate(done):
        text = f"${e.cost_usd.total / 1e6:.2f}M" if e.cost_usd else "no price"
        ax.annotate(text, (i, bottom[i]), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x, labels)
    ax.set_ylabel("million USD")
    ax.set_title("Cost")
    ax.legend(fontsize=8)
    ax.margins(y=0.15)

    ax = axes[0][2]
    bottom = [0.0] * len(done)
    for term in MEMORY_TERMS:
        values = [getattr(e.best.memory_bytes, term) / GB if e.best else 0.0 for e in done]
        ax.bar(x, values, 0.6, bottom=bottom, label=term)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    for i, e in enumerate(done):
        cap = e.best.memory_bytes.capacity / GB if e.best else 0.0
        ax.hlines(cap, i - 0.35, i + 0.35, colors="black", linestyles="dashed")
        ax.annotate(f"{cap:.0f} GB", (i, cap), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x, labels)
    ax.set_ylabel("GB per GPU (most loaded)")
    ax.set_title("Memory of the best layout vs capacity")
    ax.legend(fontsize=7)

    ax = axes[1][0]
    bottom = [0.0] * len(done)
    for term in TIME_TERMS:
        values = [getattr(e.best.time_s, term) / e.best.step_time_s if e.best else 0.0 for e in done]
        if any(v > 0 for v in values):
            ax.bar(x, values, 0.6, bottom=bottom, label=term)
            bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    for i, e in enumerate(done):
        step = e.best.step_time_s if e.best else 0.0
        ax.annotate(f"step {step:.2f} s", (i, 1.0), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x, labels)
    ax.set_ylim(0, 1.12)
    ax.set_ylabel("share of the step (exposed time)")
    ax.set_title("Step time of the best layout")
    ax.legend(fontsize=7, loc="lower right")

    for ax, key, ylabel, title in (
        (axes[1][1], "time", "days (with failures)", "Scaling: training time vs GPUs"),
        (axes[1][2], "cost", "million USD", "Scaling: cost vs GPUs"),
    ):
        for e in done:
            points = [p for p in e.scaling if (p.train_time_s if key == "time" else p.cost_usd) is not None]
            xs = [p.gpus for p in points]
            ys = [
                (p.train_time_s or 0.0) / SECONDS_PER_DAY if key == "time" else (p.cost_usd or 0.0) / 1e6
                for p in points
            ]
            line = ax.plot(xs, ys, marker="o", label=e.hardware)
            chosen = (
                (e.train_time_s or 0) / SECONDS_PER_DAY
                if key == "time"
                else (e.cost_usd.total / 1e6 if e.cost_usd else None)
            )
            if chosen is not None:
                ax.plot([e.gpus], [chosen], marker="*", markersize=16, color=line[0].get_color())
        ax.set_xscale("log", base=2)
        if key == "time":
            ax.set_yscale("log")
        ax.set_xlabel("GPUs (fastest layout at each count; star = chosen)")
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)

    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    except OSError as exc:
        raise InputError(f"cannot write --plot '{path}': {exc.strerror or exc}") from None
    finally:
        plt.close(fig)

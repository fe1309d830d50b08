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
from paraplan.decision import Account, Outcome

DAY = 86400.0
GB = 1e9
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


def _label(o: Outcome, a: Account) -> str:
    return f"{o.cluster.name}\nx {a.gpus}"


def write_plot(path: Path, model: str, tokens: float, outcomes: list[Outcome]) -> None:
    plt = _pyplot()
    done = [(o, o.account) for o in outcomes if o.account is not None]
    if not done:
        raise InputError("--plot: no hardware has a layout to plot")
    labels = [_label(o, a) for o, a in done]
    accounts = [a for _, a in done]
    x = list(range(len(done)))
    fig, axes = plt.subplots(2, 3, figsize=(17, 9.5))
    fig.suptitle(f"{model}: training {tokens:.3g} tokens -- best layout per hardware", fontsize=14)

    ax = axes[0][0]
    width = 0.38
    ax.bar([i - width / 2 for i in x], [a.ideal_time_s / DAY for a in accounts], width, label="without failures")
    ax.bar([i + width / 2 for i in x], [a.train_time_s / DAY for a in accounts], width, label="with failures")
    for i, a in enumerate(accounts):
        ax.annotate(f"{a.train_time_s / DAY:.1f} d\ngoodput {a.reliability.goodput:.1%}",
                    (i + width / 2, a.train_time_s / DAY), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x, labels)
    ax.set_ylabel("days")
    ax.set_title("Training time")
    ax.legend(fontsize=8)
    ax.margins(y=0.2)

    ax = axes[0][1]
    bottom = [0.0] * len(done)
    for part in ("hardware", "energy", "staff"):
        values = [getattr(a.cost, part) / 1e6 for a in accounts]
        if any(v > 0 for v in values):
            ax.bar(x, values, 0.6, bottom=bottom, label=part)
            bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    for i, a in enumerate(accounts):
        ax.annotate(f"${a.cost.total / 1e6:.2f}M", (i, a.cost.total / 1e6), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x, labels)
    ax.set_ylabel("million USD")
    ax.set_title(f"Cost ({accounts[0].figures.pricing} pricing)")
    ax.legend(fontsize=8)
    ax.margins(y=0.15)

    ax = axes[0][2]
    bottom = [0.0] * len(done)
    for term in MEMORY_TERMS:
        values = [float(getattr(a.choice.evaluation.memory, term)[a.choice.index]) / GB for a in accounts]
        ax.bar(x, values, 0.6, bottom=bottom, label=term)
        bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    for i, a in enumerate(accounts):
        cap = a.choice.evaluation.capacity_bytes / GB
        ax.hlines(cap, i - 0.35, i + 0.35, colors="black", linestyles="dashed")
        ax.annotate(f"{cap:.0f} GB", (i, cap), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x, labels)
    ax.set_ylabel("GB per GPU (most loaded)")
    ax.set_title("Memory of the best layout vs capacity")
    ax.legend(fontsize=7)

    ax = axes[1][0]
    bottom = [0.0] * len(done)
    for term in TIME_TERMS:
        values = [float(a.choice.evaluation.times[term][a.choice.index]) / a.choice.step_time_s for a in accounts]
        if any(v > 0 for v in values):
            ax.bar(x, values, 0.6, bottom=bottom, label=term)
            bottom = [b + v for b, v in zip(bottom, values, strict=True)]
    for i, a in enumerate(accounts):
        ax.annotate(f"step {a.choice.step_time_s:.2f} s", (i, 1.0), ha="center", va="bottom", fontsize=8)
    ax.set_xticks(x, labels)
    ax.set_ylim(0, 1.12)
    ax.set_ylabel("share of the step (exposed time)")
    ax.set_title("Step time of the best layout")
    ax.legend(fontsize=7, loc="lower right")

    for ax, key, ylabel, title in (
        (axes[1][1], "time", "days (with failures)", "Scaling: training time vs GPUs"),
        (axes[1][2], "cost", "million USD", "Scaling: cost vs GPUs"),
    ):
        for o, a in done:
            curve = o.scaling or [a]
            xs = [s.gpus for s in curve]
            ys = [s.train_time_s / DAY if key == "time" else s.cost.total / 1e6 for s in curve]
            line = ax.plot(xs, ys, marker="o", label=o.cluster.name)
            chosen = a.train_time_s / DAY if key == "time" else a.cost.total / 1e6
            ax.plot([a.gpus], [chosen], marker="*", markersize=16, color=line[0].get_color())
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

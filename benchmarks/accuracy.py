"""Predicted vs measured step time (and peak memory) on published training runs.

    python benchmarks/accuracy.py [--runs benchmarks/data/runs_public.csv] [--memory benchmarks/data/runs_memory.csv]
                                  [--cv] [--write] [--plot FILE.png] [--json]

For each run: the model (its config.json), the hardware preset and the full layout as published;
the knobs the source states are fixed, the rest chosen as `paraplan validate` chooses them.
Reports the error per run, the mean absolute percentage error (MAPE) per source (`group`), the
macro average over sources (each source weighs the same, however many rows it has) and the
micro average over runs.

--cv: leave-one-source-out cross-validation of the whole fit (benchmarks/fit_presets.py): refit
every per-hardware and per-stack constant without one source, predict that source.
--write: store every run's signed error in optimizer/data/accuracy.json, the validation data
behind the error bars every prediction carries (`paraplan.accuracy`): in-sample, and as
predicted with the run's source left out of the fit (runs the cross-validation; the bars take
the held-out error, the one a prediction for an unseen run can expect).
--memory: predicted peak memory against the measured peaks (the most loaded GPU, reserve
included), per run and as MAPE; runs that fit in practice must not be predicted out of memory.
Each prediction is compared as the source's instrument sees it (`memory_kind`: allocated,
reserved or device-level; `paraplan.memory_runs`).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from paraplan.calibration import Run, chosen_layouts, infeasible_reasons, load_runs, predict  # noqa: E402
from paraplan.cost_models import frameworks  # noqa: E402
from paraplan.cost_models.errors import InputError  # noqa: E402
from paraplan.cost_models.layout import layout_short  # noqa: E402
from paraplan.cost_models.units import GIB  # noqa: E402
from paraplan.hardware_specs.loader import load_cluster  # noqa: E402
from paraplan.hardware_specs.schema import Cluster  # noqa: E402
from paraplan.memory_runs import memory_runs  # noqa: E402

DEFAULT_RUNS = REPO / "benchmarks" / "data" / "runs_public.csv"
DEFAULT_MEMORY = REPO / "benchmarks" / "data" / "runs_memory.csv"
ACCURACY_JSON = REPO / "optimizer" / "data" / "accuracy.json"


@dataclass(frozen=True)
class RunResult:
    run: str
    source: str
    hardware: str
    family: str
    precision: str
    framework: str
    moe: bool
    gpus: int
    measured_s: float
    predicted_s: float
    layout: str
    infeasible: str | None = None  # why validate finds the published plan infeasible (None: it fits)

    @property
    def error(self) -> float:
        return self.predicted_s / self.measured_s - 1.0


def _cluster(name: str, cache: dict[str, Cluster]) -> Cluster | None:
    if name not in cache:
        try:
            cache[name] = load_cluster(name)
        except InputError as exc:
            print(f"skipped hardware {name!r}: {exc}", file=sys.stderr)
            return None
    return cache[name]


def assess(runs: list[Run], clusters: dict[str, Cluster] | None = None) -> list[RunResult]:
    """One prediction per run (a run whose hardware cannot be loaded is reported and skipped)."""
    cache = clusters if clusters is not None else {}
    out = []
    for run in runs:
        cluster = _cluster(run.hardware, cache)
        if cluster is None:
            continue
        try:
            searched: dict[str, Any] = {}  # one validate search per run, read for its layout and its reason
            layout = chosen_layouts([run], cluster, searched)[0]
        except InputError as exc:
            print(f"skipped {run.label}: {exc}", file=sys.stderr)
            continue
        predicted = float(predict([run], [layout], cluster)[0])
        reason = infeasible_reasons([run], cluster, searched)[0]
        out.append(RunResult(run.label, run.group, cluster.name, cluster.gpu_family, str(layout.precision),
                             str(layout.framework), run.model.num_experts > 1, run.gpus, run.measured_s, predicted,
                             layout_short(layout), reason))  # fmt: skip
    return out


def mape(errors: list[float]) -> float:
    return sum(abs(e) for e in errors) / len(errors) if errors else math.nan


def by_source(results: list[RunResult]) -> dict[str, list[RunResult]]:
    groups: dict[str, list[RunResult]] = defaultdict(list)
    for r in results:
        groups[r.source].append(r)
    return dict(sorted(groups.items()))


def summary(results: list[RunResult]) -> dict[str, Any]:
    sources = {s: mape([r.error for r in rs]) for s, rs in by_source(results).items()}
    return {
        "runs": len(results),
        "sources": len(sources),
        "macro_mape": statistics.fmean(sources.values()) if sources else math.nan,
        "micro_mape": mape([r.error for r in results]),
        "worst": max((abs(r.error) for r in results), default=math.nan),
        "per_source": sources,
    }


@contextmanager
def fitted_without(runs: list[Run], source: str) -> Iterator[Callable[[str], Cluster]]:
    """The whole fit of `benchmarks/fit_presets.py` redone without the source's runs: per-hardware
    constants, per-stack kernel efficiencies and MoE host floors. The stacks' figures are in
    `frameworks.FRAMEWORKS` while the block runs (restored after); it is given a function from
    preset name to that preset with this fold's constants (hardware only the held-out source ran
    on takes its die's constants from this fold too)."""
    sys.path.insert(0, str(REPO / "benchmarks"))
    from fit_presets import apply_stacks, fit_all

    fit = fit_all([r for r in runs if r.group != source], quiet=True)
    saved = apply_stacks(fit.stacks, fit.floors)
    try:
        yield fit.cluster
    finally:
        frameworks.FRAMEWORKS.update(saved)


@dataclass(frozen=True)
class HeldOut:
    error: float  # predicted with the run's source left out of the fit
    figure_from_source: bool  # the shipped preset's stack figure for the run rests on its source alone


def held_out(runs: list[Run], source: str) -> dict[str, HeldOut]:
    """The source's runs predicted by the fit of `fitted_without` the source, by run label; each
    says whether the preset it ran on carries a stack figure (as shipped) that the fit without its
    source has not: its source alone set the figure, so its held-out error is that of another
    predictor (the global figure) than the one a prediction on that preset uses."""
    test = [r for r in runs if r.group == source]
    with fitted_without(runs, source) as cluster:
        folds = {r.hardware: cluster(r.hardware) for r in test if r.hardware}
        results = assess(test, folds)
    return {
        r.run: HeldOut(r.error, load_cluster(r.hardware).efficiency.stack_kernel_efficiency.of(r.framework) is not None
                       and folds[r.hardware].efficiency.stack_kernel_efficiency.of(r.framework) is None)
        for r in results
    }  # fmt: skip


def cross_validate(runs: list[Run], results: list[RunResult]) -> tuple[dict[str, dict[str, float]], dict[str, HeldOut]]:
    """Leave one source out: redo the whole fit (`benchmarks/fit_presets.py`: per-hardware
    constants on Megatron-family runs, per-stack kernel efficiencies and MoE host floors) without that source, and
    predict it with the refitted constants. Returns the MAPEs per source (in-sample, held out)
    and each run's held-out signed error."""
    out: dict[str, dict[str, float]] = {}
    errors: dict[str, HeldOut] = {}
    for source, held in by_source(results).items():
        after = held_out(runs, source)
        errors.update(after)
        out[source] = {"in_sample": mape([r.error for r in held]), "held_out": mape([h.error for h in after.values()])}
        print(f"  cv {source:32} in-sample {out[source]['in_sample']:6.1%}  held out {out[source]['held_out']:6.1%}",
              file=sys.stderr)  # fmt: skip
    return out, errors


def memory_check(path: Path) -> list[dict[str, Any]]:
    """Predicted peak memory (most loaded GPU, reserve included) vs the measured peaks."""
    runs, skipped = memory_runs(path)
    for line in skipped:
        print(f"memory: skipped {line}", file=sys.stderr)
    return [{**asdict(r), "visible_bytes": r.visible_bytes, "error": r.error} for r in runs]


def write_accuracy(results: list[RunResult], held_out: dict[str, HeldOut]) -> None:
    rows = [
        {"run": r.run, "source": r.source, "hardware": r.hardware, "family": r.family, "precision": r.precision,
         "framework": r.framework, "moe": r.moe, "gpus": r.gpus, "error": round(r.error, 6),
         "held_out_error": round(held_out[r.run].error, 6), "figure_from_source": held_out[r.run].figure_from_source}
        for r in results
    ]  # fmt: skip
    ACCURACY_JSON.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"generated_by": "benchmarks/accuracy.py --write", "runs": rows}, indent=1) + "\n"
    ACCURACY_JSON.write_text(text)


def plot(results: list[RunResult], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 6.5))
    for source, rs in by_source(results).items():
        ax.loglog([r.measured_s for r in rs], [r.predicted_s for r in rs], "o", ms=4, label=source)
    values = [r.measured_s for r in results] + [r.predicted_s for r in results]
    lo, hi = min(values) * 0.8, max(values) * 1.25
    ax.plot([lo, hi], [lo, hi], "k--", lw=1)
    ax.fill_between([lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], alpha=0.12, color="grey", label="+-10%")
    stats = summary(results)
    ax.set_xlabel("measured step time (s)")
    ax.set_ylabel("predicted step time (s)")
    ax.set_title(f"paraplan vs {stats['runs']} published runs: macro MAPE {stats['macro_mape']:.1%}")
    ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=Path, default=DEFAULT_RUNS)
    parser.add_argument("--memory", type=Path, nargs="?", const=DEFAULT_MEMORY, default=None)
    parser.add_argument("--cv", action="store_true", help="leave-one-source-out cross-validation of calibrate")
    parser.add_argument("--write", action="store_true", help="store the errors behind the error bars")
    parser.add_argument("--plot", type=Path, default=None)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    runs = load_runs(args.runs)
    results = assess(runs)
    if not results:
        print("no run could be predicted", file=sys.stderr)
        return 2
    stats = summary(results)
    report: dict[str, Any] = {"summary": stats, "runs": [asdict(r) | {"error": r.error} for r in results]}
    if args.cv or args.write:
        report["cross_validation"], held_out = cross_validate(runs, results)
    if args.memory:
        report["memory"] = memory_check(args.memory)
    if args.write:
        write_accuracy(results, held_out)
    if args.plot:
        plot(results, args.plot)
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"{'run':44} {'measured':>9} {'predicted':>9} {'error':>7}  layout (knobs not published: chosen)")
    for r in results:
        print(f"{r.run[:44]:44} {r.measured_s:9.3f} {r.predicted_s:9.3f} {r.error:+7.1%}  {r.layout}")
    print(f"\n{'source':32} {'runs':>4} {'MAPE':>7}")
    for source, rs in by_source(results).items():
        print(f"{source:32} {len(rs):4} {stats['per_source'][source]:7.1%}")
    print(f"\nruns {stats['runs']}, sources {stats['sources']}: macro MAPE {stats['macro_mape']:.1%}, "
          f"micro {stats['micro_mape']:.1%}, worst {stats['worst']:.1%}")  # fmt: skip
    infeasible = [r for r in results if r.infeasible]
    print(f"published plans predicted infeasible under their stack: {len(infeasible)}")
    for r in infeasible:
        print(f"  {r.run}: {r.infeasible}")
    if args.cv or args.write:
        print("\nleave-one-source-out calibrate (fit on the family's other sources):")
        for source, cv in report["cross_validation"].items():
            print(f"  {source:32} in-sample {cv['in_sample']:7.1%}   held out {cv['held_out']:7.1%}")
        held = [cv["held_out"] for cv in report["cross_validation"].values()]
        print(f"  macro MAPE over held-out sources: {statistics.fmean(held):.1%}")
    if args.memory:
        rows = report["memory"]
        fits = [m for m in rows if not m["oom"]]
        print(f"\nmemory: {len(rows)} runs, MAPE {mape([m['error'] for m in rows]):.1%}; "
              f"predicted out of memory although they ran: {sum(not m['fits'] for m in fits)}")  # fmt: skip
        for m in rows:
            flag = "" if m["fits"] or m["oom"] else "  <- predicted OOM"
            print(f"  {m['run'][:40]:40} {m['kind']:18} {m['measured_bytes'] / GIB:6.1f} GiB -> "
                  f"{m['visible_bytes'] / GIB:6.1f} GiB {m['error']:+6.1%}{flag}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

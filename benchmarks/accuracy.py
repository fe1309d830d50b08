"""Predicted vs measured step time on published training runs.

    python benchmarks/accuracy.py [--runs benchmarks/data/runs_public.csv] [--hardware H] [--plot FILE.png] [--json]

For each run: the model (its config.json), hardware preset and full layout as published; the
knobs the source states are fixed, the rest chosen as `paraplan validate` chooses them. The
measured step time is the paper's: Narayanan et al. 2021 report TFLOP/s by their eq. 3, which
the reference table converts with the paper's own batch and FLOP formula; Korthikanti et al.
2022 give iteration times. Prints the error per run, the mean absolute percentage error (MAPE)
and the worst error. The runs file may use the reference table's columns or the contract's
calibrate columns (see `optimizer.calibrate.load_runs`).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from paraplan.hardware_specs.loader import load_cluster
from paraplan.calibrate import Run, chosen_layouts, load_runs, predict

DEFAULT_RUNS = Path(__file__).resolve().parent / "data" / "runs_public.csv"


@dataclass(frozen=True)
class RunResult:
    run_id: str
    hardware: str
    measured_s: float
    predicted_s: float
    layout: dict[str, Any]

    @property
    def error(self) -> float:
        return self.predicted_s / self.measured_s - 1.0


def hardware_column(path: Path) -> list[str]:
    import csv

    with path.open(newline="") as fh:
        return [row.get("hardware", "") for row in csv.DictReader(fh)]


def assess(runs: list[Run], hardware: list[str], override: str | None = None) -> list[RunResult]:
    """One prediction per run; a run whose hardware cannot be loaded is reported and skipped."""
    results = []
    for run, name in zip(runs, hardware, strict=True):
        try:
            cluster = load_cluster(override or name)
        except ValueError as exc:
            print(f"skipped {run.label}: {exc}", file=sys.stderr)
            continue
        layout = chosen_layouts([run], cluster)[0]
        predicted = float(predict([run], [layout], cluster)[0])
        results.append(RunResult(run.label, cluster.name, run.measured_s, predicted, asdict(layout)))
    return results


def summary(results: list[RunResult]) -> dict[str, float]:
    errors = [abs(r.error) for r in results]
    return {"runs": len(results), "mape": sum(errors) / len(errors), "worst": max(errors)}


def plot(results: list[RunResult], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 6))
    xs = [r.measured_s for r in results]
    ys = [r.predicted_s for r in results]
    ax.loglog(xs, ys, "o", color="tab:blue")
    lo, hi = min(xs + ys) * 0.8, max(xs + ys) * 1.25
    ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="exact")
    ax.fill_between([lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], alpha=0.15, label="+-10%")
    for r in results:
        ax.annotate(r.run_id.split("_", 1)[-1], (r.measured_s, r.predicted_s), fontsize=6)
    stats = summary(results)
    ax.set_xlabel("measured step time (s)")
    ax.set_ylabel("predicted step time (s)")
    ax.set_title(f"paraplan vs published runs: MAPE {stats['mape']:.1%}, worst {stats['worst']:.1%}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def _words(lay: dict[str, Any]) -> str:
    return (
        f"TP{lay['tp']}/PP{lay['pp']}/DP{lay['dp']}/CP{lay['cp']} mb{lay['micro_batch']} v{lay['virtual_stages']} "
        f"{lay['recompute']} z{lay['zero']}{' SP' if lay['sequence_parallel'] else ''}"
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=Path, default=DEFAULT_RUNS)
    parser.add_argument("--hardware", default=None, help="predict every run on this preset or TOML instead")
    parser.add_argument("--plot", type=Path, default=None, help="write a predicted-vs-measured PNG (needs matplotlib)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = assess(load_runs(args.runs), hardware_column(args.runs), args.hardware)
    if not results:
        print("no run could be predicted", file=sys.stderr)
        return 2
    stats = summary(results)
    if args.json:
        print(json.dumps({"summary": stats, "runs": [asdict(r) | {"error": r.error} for r in results]}, indent=2))
    else:
        print(f"{'run':36} {'measured':>9} {'predicted':>9} {'error':>7}  layout (knobs not published: chosen)")
        for r in results:
            print(f"{r.run_id:36} {r.measured_s:9.2f} {r.predicted_s:9.2f} {r.error:+7.1%}  {_words(r.layout)}")
        print(f"\nruns {stats['runs']}   MAPE {stats['mape']:.1%}   worst {stats['worst']:.1%}")
    if args.plot:
        plot(results, args.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Predicted vs measured step time on published training runs.

    python benchmarks/accuracy.py [--runs benchmarks/data/runs_public.csv] [--plot FILE.png] [--json]

For each run: the model (its config.json), hardware preset and full layout as published; the
knobs the source states are fixed, the rest chosen as `paraplan validate` chooses them. The
measured step time is the paper's (Narayanan et al. 2021 report TFLOP/s by their eq. 3, which
the reference table already converted with the paper's batch and FLOP formula). Prints the error
per run, the mean absolute percentage error (MAPE) and the worst error.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cost_models.models import model_from_config  # noqa: E402
from cost_models.stack import Stack  # noqa: E402
from hardware_specs.loader import load_cluster  # noqa: E402
from optimizer.plan import parse_plan  # noqa: E402
from optimizer.scenario import Scenario, best_or_closest  # noqa: E402
from optimizer.space import Knobs  # noqa: E402

DEFAULT_RUNS = Path(__file__).resolve().parent / "data" / "runs_public.csv"
STACK_KEYS = ("flash_attention", "main_grads")


@dataclass(frozen=True)
class RunResult:
    run_id: str
    measured_s: float
    predicted_s: float
    feasible: bool
    layout: dict[str, Any]

    @property
    def error(self) -> float:
        return self.predicted_s / self.measured_s - 1.0


def _knobs(row: dict[str, str], extra: dict[str, Any]) -> Knobs:
    def opt_int(key: str) -> int | None:
        return int(float(extra[key])) if extra.get(key) not in (None, "") else None

    sp = extra.get("sequence_parallel")
    return Knobs(
        micro_batch=opt_int("micro_batch"),
        virtual_stages=opt_int("virtual_stages"),
        recompute=extra.get("recompute") or None,
        zero=opt_int("zero"),
        sequence_parallel=None if sp in (None, "") else bool(sp),
        precision=extra.get("precision") or "bf16",
        global_batch=int(row["global_batch"]),
        seq_len=int(row["seq_len"]),
    )


def predict(row: dict[str, str]) -> RunResult:
    knobs_json: dict[str, Any] = json.loads(row.get("knobs") or "{}")
    stack = Stack(**{k: knobs_json[k] for k in STACK_KEYS if k in knobs_json})
    model = model_from_config(json.loads(row["config"]), row["id"])
    gpus = int(row["gpus"])
    scenario = Scenario(model, load_cluster(row["hardware"]), gpus, _knobs(row, knobs_json), stack)
    choice = best_or_closest(scenario.with_plan(parse_plan(row["plan"], gpus)))
    obj = choice.evaluation.to_json(choice.index)
    return RunResult(row["id"], float(row["measured_step_time_s"]), choice.step_time_s, choice.feasible, obj["layout"])


def load_rows(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def summary(results: list[RunResult]) -> dict[str, float]:
    errors = [abs(r.error) for r in results]
    return {"runs": len(results), "mape": sum(errors) / len(errors), "worst": max(errors)}


def plot(results: list[RunResult], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 6))
    xs = [r.measured_s for r in results]
    ys = [r.predicted_s for r in results]
    ax.loglog(xs, ys, "o")
    lo, hi = min(xs + ys) * 0.8, max(xs + ys) * 1.25
    ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="exact")
    ax.fill_between([lo, hi], [lo * 0.9, hi * 0.9], [lo * 1.1, hi * 1.1], alpha=0.15, label="+-10%")
    for r in results:
        ax.annotate(r.run_id.split("_", 1)[-1], (r.measured_s, r.predicted_s), fontsize=6)
    ax.set_xlabel("measured step time (s)")
    ax.set_ylabel("predicted step time (s)")
    ax.set_title("paraplan: predicted vs measured")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=Path, default=DEFAULT_RUNS)
    parser.add_argument("--plot", type=Path, default=None, help="write a predicted-vs-measured PNG (needs matplotlib)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    results = [predict(row) for row in load_rows(args.runs)]
    stats = summary(results)
    if args.json:
        print(json.dumps({"summary": stats, "runs": [r.__dict__ | {"error": r.error} for r in results]}, indent=2))
    else:
        print(f"{'run':38} {'measured':>9} {'predicted':>9} {'error':>7}  layout")
        for r in results:
            lay = r.layout
            words = (f"TP{lay['tp']}/PP{lay['pp']}/DP{lay['dp']} mb{lay['micro_batch']} v{lay['virtual_stages']} "
                     f"{lay['recompute']} z{lay['zero']}{' SP' if lay['sequence_parallel'] else ''}")
            flag = "" if r.feasible else "  (infeasible!)"
            print(f"{r.run_id:38} {r.measured_s:9.2f} {r.predicted_s:9.2f} {r.error:+7.1%}  {words}{flag}")
        print(f"\nruns {stats['runs']}   MAPE {stats['mape']:.1%}   worst {stats['worst']:.1%}")
    if args.plot:
        plot(results, args.plot)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

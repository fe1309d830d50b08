"""Does `paraplan calibrate` on some runs of a cluster predict its other runs better? The case of a
user who measured a few configurations on their own hardware and plans the next ones.

    python benchmarks/calibrate_within.py [--fit NAMES] [--runs benchmarks/data/runs_public.csv]

Per source and preset with at least MIN_RUNS runs of benchmarks/data/runs_public.csv: every other
run (in file order) is the training half, the rest the held-out half. The starting preset is the
whole fit of benchmarks/fit_presets.py redone without the source (`accuracy.fitted_without`), so
nothing the held-out runs set is in it. The held-out half is predicted by that preset (`fit-rest`)
and by it calibrated on the training half (`calibrated`: `paraplan calibrate` with its default fit,
or `--fit NAMES`); a fit `calibrate` refuses (fewer runs than constants asked for) is reported as
such. `--determined-only`: the default constants, only those the runs determine, however many runs
(`calibration.fit(determined_only=True)`, which the default uses on no more runs than constants).
Prints each case's MAPE and the macro average over the cases both arms predicted.
Runtime: about 10 min on 2 cores (18 cases, each one refit and one calibration); figures in the README.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from accuracy import DEFAULT_RUNS, assess, fitted_without, mape  # noqa: E402

from paraplan.calibration import Run, calibrate, default_names, fit, load_runs, with_constants  # noqa: E402
from paraplan.cost_models.errors import InputError  # noqa: E402

MIN_RUNS = 6  # 3 to train on, 3 to predict


def cases(runs: list[Run]) -> list[tuple[str, str, list[Run]]]:
    """(source, preset, its runs in file order) for every pair with MIN_RUNS runs or more."""
    pairs = sorted({(r.group, r.hardware) for r in runs})
    out = [(s, h, [r for r in runs if r.group == s and r.hardware == h]) for s, h in pairs]
    return [c for c in out if len(c[2]) >= MIN_RUNS]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=Path, default=DEFAULT_RUNS)
    parser.add_argument("--fit", default=None, help="calibrate's --fit (default: the CLI's default)")
    parser.add_argument("--determined-only", action="store_true", help="fit only the constants the runs determine")
    args = parser.parse_args()
    runs = load_runs(args.runs)
    pairs: list[tuple[float, float]] = []
    print(f"{'source':28} {'preset':10} {'train/test':>10} {'fit-rest':>9} {'calibrated':>10}  fitted")
    for source, hardware, mine in cases(runs):
        train, test = mine[0::2], mine[1::2]
        with fitted_without(runs, source) as preset:
            start = preset(hardware)
            before = mape([r.error for r in assess(test, {hardware: start})])
            try:
                if args.determined_only:  # calibrate's screen leaves every training run of these cases in
                    values = fit(train, start, default_names(train), determined_only=True).values
                else:
                    values = calibrate(start, train, fit_names=args.fit).constants
            except InputError as exc:
                print(f"{source:28} {hardware:10} {len(train):>4}/{len(test):<5} {before:9.1%} {'refused':>10}  {exc}")
                continue
            after = mape([r.error for r in assess(test, {hardware: with_constants(start, values)})])
        pairs.append((before, after))
        fitted = ", ".join(values) or "nothing (no constant determined)"
        print(f"{source:28} {hardware:10} {len(train):>4}/{len(test):<5} {before:9.1%} {after:10.1%}  {fitted}")
        sys.stdout.flush()
    if pairs:
        lower = sum(1 for b, a in pairs if a < b)
        print(f"\nmacro over {len(pairs)} cases: fit-rest {statistics.fmean(b for b, _ in pairs):.1%}, "
              f"calibrated {statistics.fmean(a for _, a in pairs):.1%}; calibrating lowers the error in {lower}")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

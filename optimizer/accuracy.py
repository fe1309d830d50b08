"""Error bars: how far a prediction can be trusted, from the validation runs nearest its regime.

`benchmarks/accuracy.py --write` predicts every published run in `benchmarks/data/runs_public.csv`
and stores, per run, its hardware family, precision, GPU count, source and signed error
e = predicted / measured - 1 in `optimizer/data/accuracy.json` (package data, so an installed
paraplan carries it), twice: in-sample, and held out, the run predicted with every constant
refitted without its source (leave-one-source-out). The bars take the held-out error: a
prediction for a run paraplan has not seen can expect that one, not the error on the runs the
constants were fitted to. For a new prediction the runs of the same regime are taken, a regime
being dense or mixture-of-experts first (their errors differ: MoE runs carry router, token
permutation and all-to-all costs that dense runs never show):

  1. same hardware family, precision, framework and kind (dense/MoE), GPU counts within 8x;
  2. else the same family, precision, framework and kind at any scale;
  3. else the same family, precision and kind, any framework;
  4. else the same family, framework and kind at any precision (each stack runs its own kernels
     under one fitted efficiency of its own: another stack's runs at another precision say less
     about this one than its own runs at another precision do);
  5. else the same family and kind at any precision (an MoE run's error says more about another
     MoE run than a run of the other kind at the same precision does);
  6. else the same family, any precision or kind;
  7. else none: the hardware was never checked against a measurement, which the basis says,
     and the bar spans the errors of all runs, e_min..e_max of every run (mirroring the largest
     |e| instead would put an over-prediction of more than 100% beyond any bound).
At least 3 runs make a regime (fewer: the next, wider one).

One exception to the held-out error: where a stack's kernel efficiency on a preset is fitted on
the runs of one source alone (`benchmarks/fit_presets.py` step 2b), the fit without that source
has no figure there and predicts its runs with the stack's global one. That is the error of a
prediction on another preset of the family, which the global figure serves, but not of one on
that preset, which uses the figure: such a prediction takes those runs' in-sample errors, and
its basis says so.

With errors e_min <= e_max over the chosen runs (and never narrower than +-MIN_BAR), the
measured step time lies in [predicted / (1 + e_max), predicted / (1 + e_min)].
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from importlib import resources

MIN_BAR = 0.02  # no error bar is quoted tighter than +-2%
SCALE_WINDOW = 8.0  # "same scale": GPU counts within this factor


@dataclass(frozen=True)
class ValidationRun:
    run: str
    source: str
    family: str
    precision: str
    framework: str
    gpus: int
    error: float  # in-sample
    moe: bool = False
    held_out_error: float | None = None  # with the run's source left out of the fit (None: not measured)
    hardware: str = ""  # the preset it ran on
    # the stack's kernel efficiency on that preset is fitted on this run's source alone, so the fit
    # without the source predicted it with the global figure instead
    figure_from_source: bool = False

    def in_sample_for(self, hardware: str | None) -> bool:
        """Whether a prediction on `hardware` takes this run's in-sample error: where no held-out
        error was measured, and where the prediction uses the very stack figure this run's source
        alone set (its held-out error is the global figure's, which that prediction does not use)."""
        return self.held_out_error is None or (self.figure_from_source and self.hardware == hardware)

    def bar_error(self, hardware: str | None = None) -> float:
        """The error the bars take for a prediction on `hardware`: held out where that is the
        error of the predictor it makes (`in_sample_for`)."""
        held = self.held_out_error
        return self.error if held is None or self.in_sample_for(hardware) else held


@dataclass(frozen=True)
class ErrorBar:
    low_factor: float  # measured >= predicted * low_factor
    high_factor: float  # measured <= predicted * high_factor
    runs: int
    words: str  # the accuracy basis, one sentence
    supported: bool  # False: no run of this hardware family

    @property
    def plus_minus(self) -> float:
        return max(1.0 - self.low_factor, self.high_factor - 1.0)


@cache
def validation_runs() -> tuple[ValidationRun, ...]:
    try:
        text = resources.files("paraplan").joinpath("data", "accuracy.json").read_text()
    except (FileNotFoundError, OSError):
        return ()
    data = json.loads(text)
    return tuple(ValidationRun(**row) for row in data["runs"])


MIN_REGIME = 3


def _regime(runs: tuple[ValidationRun, ...], family: str, precision: str, framework: str, gpus: int,
            moe: bool) -> tuple[list[ValidationRun], str]:  # fmt: skip
    def near(rs: list[ValidationRun]) -> list[ValidationRun]:
        return [r for r in rs if 1 / SCALE_WINDOW <= r.gpus / gpus <= SCALE_WINDOW]

    of_kind = [r for r in runs if r.family == family and r.moe == moe]
    kind = [r for r in of_kind if r.precision == precision]
    stack = [r for r in kind if r.framework == framework]
    kind_name = "MoE" if moe else "dense"
    kind_words = f"{family} {kind_name}"
    what = f"{family} {precision} {kind_name}"
    tiers = (
        (near(stack), f"{what} {framework} runs within 8x of {gpus} GPUs"),
        (stack, f"{what} {framework} runs"),
        (kind, f"{what} runs of any framework"),
        ([r for r in of_kind if r.framework == framework], f"{kind_words} {framework} runs at any precision"),
        (of_kind, f"{kind_words} runs at any precision"),
        ([r for r in runs if r.family == family], f"{family} runs at any precision, dense or MoE"),
    )
    for chosen, words in tiers:
        if len(chosen) >= MIN_REGIME:
            return chosen, words
    return [], ""


def _span(runs: list[ValidationRun] | tuple[ValidationRun, ...], hardware: str | None = None) -> tuple[float, float]:
    """(e_min, e_max) of the runs' signed errors, never narrower than +-MIN_BAR."""
    errors = [r.bar_error(hardware) for r in runs]
    return min(min(errors), -MIN_BAR), max(max(errors), MIN_BAR)


def _how(chosen: list[ValidationRun], hardware: str | None, framework: str) -> str:
    """How the chosen runs' errors were measured, for the basis sentence."""
    inside = [r for r in chosen if r.in_sample_for(hardware)]
    if not inside:
        return "with its source left out of the fit"
    if any(r.held_out_error is None for r in inside):
        return "in-sample"
    sources = ", ".join(sorted({r.source for r in inside}))
    return (f"with its source left out of the fit, but {len(inside)} in-sample: {framework}'s kernel efficiency on "
            f"{hardware} is fitted on their source alone ({sources})")  # fmt: skip


def error_bar(
    family: str, precision: str, framework: str, gpus: int, moe: bool = False, hardware: str | None = None
) -> ErrorBar:
    """The bar of a prediction on `family` hardware (the preset `hardware`, where known: a stack
    figure fitted on one source is that preset's alone, `ValidationRun.in_sample_for`)."""
    runs = validation_runs()
    chosen, what = _regime(runs, family, precision, framework, gpus, moe)
    if not chosen:
        if not runs:
            return ErrorBar(
                1.0, 1.0, 0, "no validation data is installed: the error of this prediction is unknown", False
            )
        low, high = _span(runs)
        return ErrorBar(
            1.0 / (1.0 + high), 1.0 / (1.0 + low), 0,
            f"no published run on {family} hardware checks this prediction: the bar spans the errors of all "
            f"{len(runs)} validation runs ({low:+.0%}..{high:+.0%})", False,
        )  # fmt: skip
    low, high = _span(chosen, hardware)
    sources = sorted({r.source for r in chosen})
    shown = "; ".join(sources[:3]) + (f"; and {len(sources) - 3} more" if len(sources) > 3 else "")
    how = _how(chosen, hardware, framework)
    words = (f"{len(chosen)} {what}, errors {low:+.0%}..{high:+.0%} (predicted/measured - 1, each run predicted "
             f"{how}); sources: {shown}")  # fmt: skip
    return ErrorBar(1.0 / (1.0 + high), 1.0 / (1.0 + low), len(chosen), words, True)

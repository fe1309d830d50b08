"""`paraplan calibrate`: fit a hardware preset's efficiency constants to measured runs.

Constants fitted (each a property of the hardware and its software stack, bounded to a physical
range): `efficiency.gemm_max`, `efficiency.gemm_half_dim` (the GEMM efficiency curve),
`efficiency.attention`, `efficiency.memory_bound`, the intra-node and inter-node link
efficiencies, and `efficiency.dp_overlap`. Runs measured on another preset of the same die (the
A800 or the 40 GB A100 beside a100-80g) are fitted too, each predicted on its own preset with the
constants being fitted (`Presets`).

Method: bounded, damped Gauss-Newton (Levenberg-Marquardt) in numpy on the residuals
    w_i psi(r_i),   r_i = ln(predicted_i / measured_i)
(relative error, so long and short steps weigh alike): psi is Huber's loss with its corner at
MIN_RUN_ERROR (`robust_log_errors`: beyond it a run pulls by its absolute error, as MAPE counts it),
and w_i gives every source (the CSV's `group`) the same weight however many runs it holds
(`source_weights`; all 1 without groups). On the public A100 runs, leaving each source out in turn
(benchmarks/calibrate_holdout.py), plain least squares made the held-out sources worse than the
uncalibrated presets; with both they come out better (figures in the README). Plus a weak Tikhonov pull
    sqrt(PRIOR_WEIGHT) * (theta_j - theta_j,preset) / range_j
that keeps a constant the runs cannot see (attention in runs without flash attention, the
network in single-node runs) at its preset value instead of drifting. Each step is projected
onto the bounds. Jacobians are forward differences. The knobs each run leaves open are chosen
once with the preset's constants, as `validate` chooses them, and held during the fit so the
objective is smooth; the "after" error re-chooses them with the fitted constants.

Which constants the runs determine (`standard_errors`): at the fit, the Gauss-Newton covariance
    C = s^2 (J^T J + P)^-1,   P = PRIOR_WEIGHT diag(1 / range_j^2)
(J the Jacobian of the runs' residuals above, s^2 their variance with N - p degrees of freedom, never
taken below MIN_RUN_ERROR^2: a run's error is the model's as much as the constants') gives each
constant a standard error; one over DETERMINED_SHARE of its range is not determined by the runs,
and the result names it (`Fit.undetermined`, the TOML's header, the CLI's NOTE line).
What the default fit does with such a constant depends on how many runs there are:
  * more runs than constants: it is fitted all the same. The runs' errors are not independent
    noise but the stack's systematic behaviour, which the extra constants capture: calibrating on
    every other run of a source and predicting the rest (benchmarks/calibrate_within.py, from the
    presets refitted without the source), all 7 cases with more training runs than constants
    come out better with every constant fitted than with only the determined ones
    (`--determined-only`): LLM Foundry's 13 H100 runs 3.5% against 6.0%, Megatron-Bridge's 17
    H100 runs 13.4% against 14.3%, torchtitan's 9 H100 runs of Dec 2024 5.8% against 6.5%;
  * no more runs than constants (fewer used to be refused; as many leave no error to judge the
    fit by, every constant then undetermined): the constants the runs determine are fitted and
    the others keep the preset's values. Which ones is judged before fitting, at the preset's
    values and with each run's error at the floor (a fit of more constants than the runs hold
    has already bent the determined ones: on 7 H100 runs gemm_half_dim went to 0 and memory_bound
    to 0.34 in gemm_max's place), dropping the least determined one at a time (a constant's
    standard error depends on which others are fitted beside it: gemm_max and gemm_half_dim
    trade off on runs of similar shapes). On the same splits with 4 to 7 runs this fit lowers
    the held-out error in 8 of 11 cases (macro 5.5% -> 4.4%; e.g. the 4 B200 long-sequence NeMo
    runs 4.2% -> 1.6%, Megatron-LM 2021's 7 A100 runs 4.1% -> 1.8%, LLM Foundry's A100-80GB runs
    7.5% -> 3.9%, Moonlight's and Nemotron-3-Nano's H100 runs 6.8% -> 6.5%) and raises it in three
    (FlagPerf's 4 H100 runs 3.0% -> 5.0%, its A800 runs 6.3% -> 7.0%, NeMo 24.07's H100 runs
    4.0% -> 4.7%).
Constants asked for with --fit are fitted as asked, and a run count below their number is refused.
"""

from __future__ import annotations

import csv
import io
import json
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from paraplan.cost_models.candidates import Layouts
from paraplan.cost_models.errors import InputError
from paraplan.cost_models.evaluate import evaluate
from paraplan.cost_models.layout import KNOBS, MAX_GPUS, Framework, Layout, parse_knob
from paraplan.cost_models.models import ModelSpec, load_model, model_from_config
from paraplan.cost_models.stack import STACK_CHOICES, STACK_FIELDS, STACK_NUMBERS, STACK_SETS, Stack
from paraplan.fit_parameters import DETERMINED_SHARE, HARDWARE_PARAMETERS, PARAMETERS, STACK_PREFIX, STACKS
from paraplan.hardware_specs.files import is_regular_file, read_text_file
from paraplan.hardware_specs.loader import load_cluster, preset_names
from paraplan.hardware_specs.schema import Cluster
from paraplan.plan import parse_plan
from paraplan.question import Question, knobs_from, stack_from
from paraplan.search import Constraints, closest, rank

if TYPE_CHECKING:
    from paraplan.api import NameOrPath
    from paraplan.results import CalibrateResult

REQUIRED = ("model", "gpus", "plan", "global_batch", "seq_len", "step_time_s")
PRIOR_WEIGHT = 1e-3
MAX_ITERATIONS = 40
# The smallest per-run log error the standard errors assume, however closely the constants fit: the
# model's own error on the sources it reproduces best (benchmarks/accuracy.py: Megatron-LM's and
# NeMo's published runs, 1-4% MAPE), which no choice of constants removes.
MIN_RUN_ERROR = 0.03


def with_constants(cluster: Cluster, values: dict[str, float]) -> Cluster:
    efficiency_fields = ("gemm_max", "gemm_half_dim", "attention", "memory_bound", "dp_overlap", "kernel_overhead_s")
    eff_updates: dict[str, Any] = {k: v for k, v in values.items() if k in efficiency_fields}
    stacks = {k.removeprefix(STACK_PREFIX): v for k, v in values.items() if k.startswith(STACK_PREFIX)}
    if stacks:
        eff_updates["stack_kernel_efficiency"] = cluster.efficiency.stack_kernel_efficiency.model_copy(update=stacks)
    eff = cluster.efficiency.model_copy(update=eff_updates)
    intra = cluster.intra_node
    if "intra_node" in values:
        intra = intra.model_copy(update={"link": intra.link.model_copy(update={"efficiency": values["intra_node"]})})
    inter = cluster.inter_node
    if "inter_node" in values:
        inter = inter.model_copy(update={"efficiency": values["inter_node"]})
    return cluster.model_copy(update={"efficiency": eff, "intra_node": intra, "inter_node": inter})


# --- runs ------------------------------------------------------------------------------------

MAX_RUNS_BYTES = 16 * 2**20  # a runs CSV is a few KB per run; far beyond any real one
# A fit over more distinct models than this is announced first (CLI: one Note line on stderr).
# Measured on 2 cores: about 1 s per distinct model (26 models, 2,000 runs: 24 s).
LONG_FIT_MODELS = 8
SECONDS_PER_MODEL = 1.0


@dataclass(frozen=True)
class Run:
    label: str
    group: str
    hardware: str  # the CSV's hardware column ("" when absent)
    model: ModelSpec
    gpus: int
    plan_text: str
    knobs: dict[str, object]
    stack: dict[str, object]
    measured_s: float

    @property
    def framework(self) -> Framework:
        """The stack the run ran on (its `framework` knob; Megatron-LM when it states none)."""
        return Framework.parse(self.knobs.get("framework", "megatron"))

    def question(self, cluster: Cluster) -> Question:
        plan = parse_plan(self.plan_text, self.gpus)
        knobs = dict(self.knobs)
        if plan.virtual_stages is not None:
            knobs.setdefault("virtual_stages", plan.virtual_stages)
        q = Question.of(self.model, cluster, knobs, self.stack)
        return q.fixed(tp=plan.tp, pp=plan.pp, dp=plan.dp, cp=plan.cp, ep=plan.ep)


def _cell(row: dict[str, str], key: str) -> str | None:
    value = row.get(key)
    return value.strip() if isinstance(value, str) and value.strip() != "" else None


def _number(row: dict[str, str], key: str, where: str, whole: bool = True) -> Any:
    text = _cell(row, key)
    if text is None:
        raise InputError(f"{where}: column '{key}' is empty")
    if len(text) > 40:
        raise InputError(f"{where}: {key} = '{text[:20]}...' is not a number")
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"{where}: {key} = '{text}' is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise InputError(f"{where}: {key} = '{text}' must be a positive finite number")
    if whole:
        if value != int(value):
            raise InputError(f"{where}: {key} = '{text}' must be a whole number")
        return int(value)
    return value


def _json_object(text: str, where: str, column: str) -> dict[str, Any]:
    """A JSON object cell; `where` ('' when the caller adds it) prefixes the error."""
    where = f"{where}: " if where else ""
    try:
        value = json.loads(text)
    except RecursionError:
        raise InputError(f"{where}column '{column}' nests too deeply to be a config") from None
    except json.JSONDecodeError as exc:
        raise InputError(f"{where}column '{column}' is not valid JSON ({exc.msg})") from None
    except ValueError as exc:  # e.g. an integer of thousands of digits
        raise InputError(f"{where}column '{column}' holds an unreadable value ({exc})") from None
    if not isinstance(value, dict):
        raise InputError(f"{where}column '{column}' must hold a JSON object, not {type(value).__name__}")
    return value


def _row_settings(row: dict[str, str], where: str) -> tuple[dict[str, object], dict[str, object]]:
    """(layout knobs, stack settings) of a row: its `knobs` JSON and any knob or stack column.
    Values are checked by the same schema as the CLI options (`question.knobs_from`)."""
    extra: dict[str, Any] = _json_object(row["knobs"], where, "knobs") if _cell(row, "knobs") else {}
    for key in (*KNOBS, *STACK_FIELDS):
        if key in ("tp", "pp", "dp", "cp", "ep", "global_batch", "seq_len"):
            continue
        if _cell(row, key) is not None:
            extra[key] = _cell(row, key)
    stack = {k: extra.pop(k) for k in list(extra) if k in STACK_FIELDS}
    for key in STACK_FIELDS:
        if (
            key in stack
            and key not in (*STACK_CHOICES, *STACK_SETS, *STACK_NUMBERS)
            and not isinstance(stack[key], bool)
        ):
            try:
                stack[key] = parse_knob("sequence_parallel", stack[key])  # the same true/false reading
            except ValueError as exc:
                raise InputError(f"{where}: {key} {exc}") from None
    unknown = [k for k in extra if k not in KNOBS]
    if unknown:
        raise InputError(f"{where}: unknown knob(s) {', '.join(sorted(unknown))} in 'knobs'")
    extra["global_batch"] = _number(row, "global_batch", where)
    extra["seq_len"] = _number(row, "seq_len", where)
    try:
        knobs = knobs_from(extra)
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None
    return knobs, stack


def load_runs(path: Path) -> list[Run]:
    """Runs from a CSV: the documented columns (model, gpus, plan, global_batch, seq_len,
    step_time_s, and any knob), or the published table's (config, knobs, measured_step_time_s).
    Every problem is an InputError naming the row and column."""
    text = read_text_file(path, "runs file", MAX_RUNS_BYTES)
    try:
        rows = list(csv.DictReader(io.StringIO(text)))
    except csv.Error as exc:
        raise InputError(f"runs file '{path}' is not a CSV: {exc}") from None
    columns = set(rows[0].keys()) if rows else set()
    if not rows:
        raise InputError(f"runs file '{path}' has no runs")
    if "step_time_s" not in columns and "measured_step_time_s" in columns:
        rows = [{**r, "step_time_s": r["measured_step_time_s"]} for r in rows]
        columns.add("step_time_s")
    missing = [c for c in REQUIRED if c not in columns and not (c == "model" and "config" in columns)]
    if missing:
        raise InputError(f"runs file '{path}' lacks the column(s) {', '.join(missing)}; needs {', '.join(REQUIRED)}")
    runs = [run_from_row(row, path, n) for n, row in enumerate(rows, start=2)]
    # Rows of the same architecture share one ModelSpec (the name only labels messages), so
    # that `predict` evaluates them together.
    shared: dict[str, ModelSpec] = {}
    return [replace(r, model=shared.setdefault(r.model.model_dump_json(exclude={"name"}), r.model)) for r in runs]


def run_from_row(row: dict[str, str], path: Path, line: int) -> Run:
    """One CSV row as a run, checked as the CLI checks its options (line numbers for messages)."""
    where = f"{path.name} line {line}"
    label = _cell(row, "id") or f"line {line}"
    model_text = _cell(row, "model")
    try:
        if model_text is not None:
            candidate = path.parent / model_text
            model = load_model(str(candidate) if is_regular_file(candidate) else model_text)
        elif _cell(row, "config") is not None:
            model = model_from_config(_json_object(row["config"], "", "config"), label)
        else:
            raise InputError("column 'model' is empty")
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None
    gpus = _number(row, "gpus", where)
    if gpus > MAX_GPUS:
        raise InputError(f"{where}: gpus = {gpus} exceeds {MAX_GPUS}")
    plan_text = _cell(row, "plan") or ""
    try:
        parse_plan(plan_text, gpus)
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None
    knobs, stack = _row_settings(row, where)
    measured = _number(row, "step_time_s", where, whole=False)
    return Run(label, _cell(row, "group") or "", _cell(row, "hardware") or "", model, gpus, plan_text, knobs, stack,
               measured)  # fmt: skip


# --- fitting ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Presets:
    """The preset being calibrated and the other presets of its die (the same `family`) that runs
    were measured on, by name. Each run is predicted on its own preset, with its own memory, links
    and host; the constants being fitted are set alike on every one of them, since they describe
    the chip and its kernels, which the variants share (an A800 is an A100 whose NVLink is capped
    at 400 GB/s; a GB200 is B200 silicon in another system)."""

    main: Cluster
    others: dict[str, Cluster] = field(default_factory=dict)

    @classmethod
    def of(cls, presets: Cluster | Presets) -> Presets:
        return presets if isinstance(presets, Presets) else cls(presets)

    def for_run(self, run: Run) -> Cluster:
        return self.others.get(run.hardware.strip().lower(), self.main)

    def with_constants(self, values: dict[str, float]) -> Presets:
        return Presets(
            with_constants(self.main, values), {n: with_constants(c, values) for n, c in self.others.items()}
        )


@dataclass(frozen=True)
class _Choice:
    layout: Layout | None  # the best layout, else the closest to feasible; None: no layout at all
    step_s: float | None  # its step time when feasible
    reason: str | None  # why none is feasible


def _choose(run: Run, presets: Cluster | Presets, cache: dict[str, _Choice]) -> _Choice:
    """The search `validate` runs for the run's plan on its preset, once per distinct question (a
    runs file often repeats a configuration)."""
    cluster = Presets.of(presets).for_run(run)
    key = repr((cluster.name, id(run.model), run.plan_text, run.gpus, sorted(run.knobs.items()),
                sorted(run.stack.items())))  # fmt: skip
    if key not in cache:
        question = run.question(cluster)
        ev = question.evaluate(question.space(run.gpus))
        if len(ev) == 0:
            cache[key] = _Choice(None, None, "its plan admits no layout")
        else:
            ranking = rank(ev, Constraints(), 1)
            if ranking.groups:
                best = ranking.best[0]
                cache[key] = _Choice(ev.layouts.at(best), float(ev.step_time_s[best]), None)
            else:
                cache[key] = _Choice(ev.layouts.at(closest(ev)), None, ranking.reason or "no layout")
    return cache[key]


def chosen_layouts(
    runs: list[Run], presets: Cluster | Presets, cache: dict[str, _Choice] | None = None
) -> list[Layout]:
    """Each run's layout with its open knobs chosen as validate chooses them (`cache`: searches
    already run, shared with `infeasible_reasons`)."""
    cache = {} if cache is None else cache
    out = []
    for run in runs:
        choice = _choose(run, presets, cache)
        if choice.layout is None:
            raise InputError(f"run {run.label}: its plan admits no layout")
        out.append(choice.layout)
    return out


def infeasible_reasons(
    runs: list[Run], presets: Cluster | Presets, cache: dict[str, _Choice] | None = None
) -> list[str | None]:
    """Per run, why `validate` finds its published plan infeasible under its stack (None: it fits).
    A plan that trained in public is feasible; a reason here is a model or rule to fix."""
    cache = {} if cache is None else cache
    return [_choose(run, presets, cache).reason for run in runs]


def predict(runs: list[Run], layouts: list[Layout], presets: Cluster | Presets) -> npt.NDArray[np.float64]:
    """Each run's predicted step time on its preset. Runs of the same preset, model and stack are
    evaluated together, in one vectorized call: the fit calls this a few hundred times."""
    on = Presets.of(presets)
    groups: dict[tuple[str, int, Stack], list[int]] = {}
    stacks = [stack_from(lay.framework, r.stack) for r, lay in zip(runs, layouts, strict=True)]
    for i, (run, stack) in enumerate(zip(runs, stacks, strict=True)):
        groups.setdefault((on.for_run(run).name, id(run.model), stack), []).append(i)
    steps = np.zeros(len(runs))
    for (_, _, stack), members in groups.items():
        first = runs[members[0]]
        ev = evaluate(first.model, on.for_run(first), Layouts.of([layouts[i] for i in members]), stack)
        steps[members] = ev.step_time_s
    return np.asarray(steps, dtype=np.float64)


@dataclass(frozen=True)
class Fit:
    cluster: Cluster
    values: dict[str, float]
    before_s: npt.NDArray[np.float64]
    after_s: npt.NDArray[np.float64]
    measured_s: npt.NDArray[np.float64]
    jacobian: npt.NDArray[np.float64]  # of the runs' residuals at the fit, runs x fitted constants
    residuals: npt.NDArray[np.float64]  # the runs' residuals at the fit (`_problem`: weighted, robust log errors)
    undetermined: dict[str, float] = field(default_factory=dict)  # standard error > DETERMINED_SHARE of its range


def relative_errors(predicted: npt.NDArray[np.float64], measured: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    return np.asarray(predicted / measured - 1.0)


def fit(runs: list[Run], presets: Cluster | Presets, names: list[str], *, determined_only: bool = False) -> Fit:
    """Fit the named constants to the runs (module docstring), each run on its preset (`Presets`).
    `determined_only`: fit only the constants the runs determine, keeping the others at the
    cluster's values; `Fit.undetermined` names the undetermined ones either way, each with its
    standard error."""
    on = Presets.of(presets)
    if len(runs) < len(names) and not determined_only:
        raise InputError(
            f"{len(runs)} run(s) cannot determine {len(names)} constants ({', '.join(names)}); "
            f"give at least {len(names)} runs or fewer constants with --fit"
        )
    layouts = chosen_layouts(runs, on)
    kept: dict[str, float] = {}
    if determined_only:
        # judged at the preset's values, by the runs' design alone (each run's error the floor): at
        # a fit of more constants than the runs hold, the undetermined ones have already bent the
        # others (gemm_half_dim to 0 and memory_bound to 0.34 took gemm_max's place on 7 H100 runs)
        problem = _problem(runs, on, names, layouts)
        at_start = problem.jacobian(problem.theta0, problem.residuals(problem.theta0))[: len(runs)]
        kept = undetermined_at(at_start, np.zeros(len(runs)), names)
        names = [n for n in names if n not in kept]
    result = _fit_all(runs, on, names, layouts)
    errors = zip(names, standard_errors(result.jacobian, result.residuals, _spans(names)), strict=True)
    undetermined = {n: float(e) for n, e in errors if _undetermined(n, e)}
    return replace(result, undetermined={**kept, **undetermined})


def _spans(names: list[str]) -> npt.NDArray[np.float64]:
    return np.array([PARAMETERS[n].span() for n in names])


def _undetermined(name: str, error: float) -> bool:
    """A constant whose standard error is over DETERMINED_SHARE of its range is not determined."""
    return bool(error > DETERMINED_SHARE * PARAMETERS[name].span())


def standard_errors(jacobian: npt.NDArray[np.float64], residuals: npt.NDArray[np.float64],
                    span: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:  # fmt: skip
    """Each constant's standard error at a fit (module docstring): `jacobian` (runs x constants)
    and `residuals` of the runs only (no prior rows), `span` the constants' ranges."""
    runs, p = jacobian.shape
    variance = max(float(residuals @ residuals) / max(runs - p, 1), MIN_RUN_ERROR**2)
    information = jacobian.T @ jacobian + PRIOR_WEIGHT * np.diag(1.0 / span**2)
    return np.asarray(np.sqrt(variance * np.diag(np.linalg.inv(information))))


def undetermined_at(jacobian: npt.NDArray[np.float64], residuals: npt.NDArray[np.float64],
                    names: list[str]) -> dict[str, float]:  # fmt: skip
    """The constants to keep at their preset values, each with its standard error when dropped:
    backward elimination on the runs' information, the least determined (standard error as a share
    of its range) first, until every constant left is determined. Dropping one changes how well
    the others are determined (gemm_max and gemm_half_dim trade off on runs of similar shapes)."""
    left = list(range(len(names)))
    dropped: dict[str, float] = {}
    while left:
        spans = _spans([names[i] for i in left])
        errors = standard_errors(jacobian[:, left], residuals, spans)
        worst = int(np.argmax(errors / spans))
        name = names[left[worst]]
        if not _undetermined(name, errors[worst]):
            break
        dropped[name] = float(errors[worst])
        del left[worst]
    return dropped


@dataclass(frozen=True)
class _Problem:
    """The least-squares problem of fitting `names` to the runs: the residuals (the runs' weighted,
    robust log errors, then the prior's rows) and their forward-difference Jacobian, at any constants."""

    lower: npt.NDArray[np.float64]
    upper: npt.NDArray[np.float64]
    theta0: npt.NDArray[np.float64]  # the cluster's values, clipped to the ranges
    residuals: Callable[[npt.NDArray[np.float64]], npt.NDArray[np.float64]]

    @property
    def span(self) -> npt.NDArray[np.float64]:
        return np.asarray(self.upper - self.lower)

    def jacobian(self, theta: npt.NDArray[np.float64], r: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        jac = np.empty((len(r), len(theta)))
        for j in range(len(theta)):
            step = 1e-4 * self.span[j]
            probe = theta.copy()
            probe[j] = probe[j] + step if probe[j] + step <= self.upper[j] else probe[j] - step
            jac[:, j] = (self.residuals(probe) - r) / (probe[j] - theta[j])
        return jac


def _problem(runs: list[Run], presets: Presets, names: list[str], layouts: list[Layout]) -> _Problem:
    params = [PARAMETERS[n] for n in names]
    lower = np.array([p.lower for p in params])
    upper = np.array([p.upper for p in params])
    span = upper - lower
    theta0 = np.clip(np.array([p.get(presets.main) for p in params]), lower, upper)
    measured = np.array([r.measured_s for r in runs])
    weights = source_weights(runs)

    def residuals(theta: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        trial = presets.with_constants(dict(zip(names, map(float, theta), strict=True)))
        fit_part = weights * robust_log_errors(np.log(predict(runs, layouts, trial) / measured))
        prior = math.sqrt(PRIOR_WEIGHT) * (theta - theta0) / span
        return np.concatenate([fit_part, prior])

    return _Problem(lower, upper, theta0, residuals)


def robust_log_errors(log_errors: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """The runs' log errors as least-squares residuals under Huber's loss (Huber 1964, "Robust
    Estimation of a Location Parameter", Ann. Math. Statist. 35(1)) with its corner at
    MIN_RUN_ERROR: r itself within it, sign(r) sqrt(2 d |r| - d^2) beyond, whose square grows as
    |r| (value and slope continuous at d). Past the error the model is expected to keep whatever
    the constants, a run pulls the fit by its absolute error, as MAPE counts it, not by its square,
    so a run the model misprices for a reason no constant sizes drags the constants the other runs
    share less than its square would."""
    d = MIN_RUN_ERROR
    size = np.abs(log_errors)
    outer = np.sign(log_errors) * np.sqrt(np.maximum(2.0 * d * size - d * d, 0.0))
    return np.asarray(np.where(size <= d, log_errors, outer))


def source_weights(runs: list[Run]) -> npt.NDArray[np.float64]:
    """Each run's weight on its residual: every source (the CSV's `group`) weighs the same in the
    fit however many runs it holds, as every source weighs the same in the macro average. The runs
    of one source share its software, its recipes and its way of measuring, so their errors are
    not independent; counted run by run, a source of 17 runs would outvote one of 3 on the
    constants they share. Scaled so the squares sum to the number of runs (the prior keeps its
    weight); a run without a group is a source of its own, so without groups every weight is 1."""
    keys = [run.group or f"run {i}" for i, run in enumerate(runs)]
    counts = Counter(keys)  # each source's squares sum to len(runs) / len(counts)
    return np.asarray(np.sqrt([len(runs) / (len(counts) * counts[key]) for key in keys]))


def _fit_all(runs: list[Run], presets: Presets, names: list[str], layouts: list[Layout]) -> Fit:
    problem = _problem(runs, presets, names, layouts)
    lower, upper, span, theta0 = problem.lower, problem.upper, problem.span, problem.theta0
    residuals, jacobian = problem.residuals, problem.jacobian
    measured = np.array([r.measured_s for r in runs])

    theta = theta0.copy()
    r = residuals(theta)
    damping = 1e-2
    for _ in range(MAX_ITERATIONS if names else 0):
        jac = jacobian(theta, r)
        gradient = jac.T @ r
        normal = jac.T @ jac
        improved = False
        while damping < 1e8:
            delta = np.linalg.solve(normal + damping * np.diag(np.diag(normal) + 1e-12), -gradient)
            candidate = np.clip(theta + delta, lower, upper)
            r_new = residuals(candidate)
            if r_new @ r_new < r @ r - 1e-12:
                theta, r, damping, improved = candidate, r_new, max(damping / 3, 1e-6), True
                break
            damping *= 4
        if not improved or np.max(np.abs(delta) / span) < 1e-6:
            break
    n = len(runs)
    fitted = presets.with_constants(dict(zip(names, map(float, theta), strict=True)))
    before = predict(runs, layouts, presets)
    after = predict(runs, chosen_layouts(runs, fitted), fitted)
    return Fit(fitted.main, dict(zip(names, map(float, theta), strict=True)), before, after, measured,
               jacobian(theta, r)[:n], r[:n])  # fmt: skip


def calibrated_cluster(fitted: Cluster, source: str, runs: int, name: str | None) -> Cluster:
    eff = fitted.efficiency
    note = f"calibrated by paraplan calibrate on {runs} measured run(s) from {source}"
    return fitted.model_copy(
        update={
            "name": name or f"{fitted.name}-calibrated",
            "description": f"{fitted.description} [{note}]",
            "efficiency": eff.model_copy(update={"sources": (*eff.sources, note)}),
        }
    )


# The fewest runs of a stack that fit its kernel efficiency on the hardware, and the fewest runs of
# the reference stack beside them (benchmarks/fit_presets.py fits the global figures with the same floor).
MIN_STACK_RUNS = 3


def stacks_to_fit(runs: list[Run]) -> list[str]:
    """The stacks whose kernel efficiency on this hardware the runs tell apart from the hardware's
    own constants: MIN_STACK_RUNS runs of the stack beside as many of the reference stack,
    Megatron-LM, whose kernels the hardware constants describe (its figure is 1 by definition).
    Without reference runs a stack's figure and gemm_max move together and no fit splits them; with
    them, what a stack leaves unexplained on this hardware lands in its own figure instead of in
    the constants every stack shares."""
    counts = {s: sum(1 for r in runs if r.framework.label == s) for s in (*STACKS, "megatron")}
    if counts["megatron"] < MIN_STACK_RUNS:
        return []
    return [s for s in STACKS if counts[s] >= MIN_STACK_RUNS]


def default_names(runs: list[Run] | None = None) -> list[str]:
    """The hardware's constants, and each stack's kernel efficiency the runs can fit (`stacks_to_fit`)."""
    return [*HARDWARE_PARAMETERS, *(STACK_PREFIX + s for s in stacks_to_fit(runs or []))]


def _fit_text(fit_names: object) -> str:
    """The API's fit_names, a comma-separated string or a list of names, as the CLI's --fit text,
    so that both pass the same check (a list skipped it: an unknown name was a KeyError)."""
    if isinstance(fit_names, str):
        return fit_names
    if isinstance(fit_names, list | tuple) and all(isinstance(n, str) for n in fit_names):
        return ",".join(fit_names)
    raise InputError(f"fit_names {fit_names!r}: expected constant names, comma-separated or as a list")


def parse_fit_names(text: str | None) -> list[str]:
    if text is None:
        return default_names()
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in PARAMETERS]
    if unknown or not names:
        raise InputError(
            f"--fit '{text}': unknown constant(s) {', '.join(unknown) or '(none)'}; accepted: {', '.join(PARAMETERS)}"
        )
    return list(dict.fromkeys(names))


def undetermined_words(undetermined: dict[str, float], fitted: list[str]) -> str:
    """The line naming the constants the runs do not determine (module docstring), those kept at
    the preset's values apart from those fitted all the same."""
    groups = (("kept at the preset's values", [n for n in undetermined if n not in fitted]),
              ("fitted all the same (check them against the preset's)", [n for n in undetermined if n in fitted]))  # fmt: skip
    parts = [
        f"{words}: " + ", ".join(f"{n} (+/-{undetermined[n]:.3g})" for n in names) for words, names in groups if names
    ]
    return f"not determined by these runs (standard error over {DETERMINED_SHARE:.0%} of the range); " + "; ".join(
        parts
    )


FAR_OFF = 3.0  # a run predicted more than 3x off (either way) is left out of the fit
BOUND_TOLERANCE = 1e-3  # a constant within this share of its range from a bound "sits on" it


def _own_preset(run: Run, cluster: Cluster, others: dict[str, Cluster]) -> str | None:
    """Why the run cannot be fitted for its `hardware` column, else None; a column naming another
    preset of the die records it in `others` (`Presets`)."""
    key = run.hardware.strip().lower()
    if not key or key in (cluster.name.lower(), cluster.gpu_family.lower()) or key in others:
        return None
    if key not in preset_names():
        return f"measured on {run.hardware}, not {cluster.name} (the file's hardware column) nor a preset of its die"
    own = load_cluster(key)
    if own.gpu_family != cluster.gpu_family:
        return f"measured on {run.hardware}, another GPU than {cluster.name}'s (the file's hardware column)"
    others[key] = own
    return None


def _screen(runs: list[Run], cluster: Cluster) -> tuple[list[Run], dict[str, str], Presets]:
    """Runs fit for fitting, why each other one is left out, and the presets they run on. Left
    out: a `hardware` column naming other hardware than the one calibrated (neither its name, its
    family, nor another preset of its die, on which the run is then predicted: `Presets`); the
    model finds its plan infeasible (its prediction would be for a plan that cannot run), or
    predicts it more than 3x off (a different regime, or a mistake in the row; fitting through it
    would distort every constant)."""
    flagged: dict[str, str] = {}
    others: dict[str, Cluster] = {}
    placed = []
    for run in runs:
        why = _own_preset(run, cluster, others)
        if why is None:
            placed.append(run)
        else:
            flagged[run.label] = why
    presets = Presets(cluster, others)
    keep = []
    cache: dict[str, _Choice] = {}
    for run in placed:
        choice = _choose(run, presets, cache)
        if choice.step_s is None:
            flagged[run.label] = "infeasible under the model: " + (choice.reason or "no layout")
            continue
        ratio = choice.step_s / run.measured_s
        if not 1 / FAR_OFF <= ratio <= FAR_OFF:
            flagged[run.label] = f"predicted {ratio:.2f}x the measured step time (beyond {FAR_OFF:g}x)"
            continue
        keep.append(run)
    return keep, flagged, presets


def _variant_words(runs: list[Run], presets: Presets) -> str:
    """How many of the fitted runs ran on each other preset of the die, for the TOML's header."""
    counts = Counter(presets.for_run(r).name for r in runs if presets.for_run(r) is not presets.main)
    if not counts:
        return ""
    each = ", ".join(f"{n} on {name}" for name, n in sorted(counts.items()))
    return f" ({each}: the same die, each run predicted on its own preset)"


def calibrate(
    hardware: NameOrPath | Cluster,
    runs: NameOrPath | list[Run],
    *,
    fit_names: str | list[str] | None = None,
    name: str | None = None,
    command: str = "",
    notify: Callable[[str], None] | None = None,
) -> CalibrateResult:
    """Fit the hardware's efficiency constants to measured runs. The result carries the
    calibrated hardware TOML (`toml`), the errors before and after per run, the runs left out of
    the fit and why, and the constants that ended on a bound."""
    from paraplan.api import load_hardware, name_or_path_text
    from paraplan.hardware_specs.dump import cluster_to_toml
    from paraplan.results import CalibratedRun, CalibrateResult

    cluster = hardware if isinstance(hardware, Cluster) else load_hardware(hardware)
    if name is not None and not isinstance(name, str):
        raise InputError(f"name {name!r}: expected text")
    chosen = None if fit_names is None else parse_fit_names(_fit_text(fit_names))
    if isinstance(runs, list):
        source, all_runs = "runs", runs
    else:
        path = Path(name_or_path_text(runs, "runs"))
        source, all_runs = path.name, load_runs(path)
    models = len({id(r.model) for r in all_runs})
    if notify is not None and models > LONG_FIT_MODELS:
        # The fit evaluates each distinct model's runs together, a few hundred times over.
        notify(f"fitting {len(all_runs)} runs of {models} distinct models: this takes about "
               f"{models * SECONDS_PER_MODEL:.0f} s")  # fmt: skip
    usable, flagged, presets = _screen(all_runs, cluster)
    if not usable:
        raise InputError(f"no run can be fitted: {'; '.join(f'{k}: {v}' for k, v in list(flagged.items())[:3])}")
    asked = chosen if chosen is not None else default_names(usable)
    # no more runs than the default constants: fit the ones they determine (module docstring)
    result = fit(usable, presets, asked, determined_only=chosen is None and len(usable) <= len(asked))
    names = list(result.values)
    calibrated = calibrated_cluster(result.cluster, source, len(usable), name)
    at_bound = [
        n for n, v in result.values.items()
        if min(v - PARAMETERS[n].lower, PARAMETERS[n].upper - v) <= BOUND_TOLERANCE * PARAMETERS[n].span()
    ]  # fmt: skip
    # the command that reproduces this fit: with the constants the defaults chose for these runs
    # (fitting nothing is what the default does again on these runs: no --fit to name)
    fit_flag = f" --fit {','.join(names)}" if names else ""
    line = command or f"paraplan calibrate --hardware {cluster.name} --runs {source}"
    line = line if chosen is not None and command else f"{line}{fit_flag}"
    header = f"{line}\nfitted {', '.join(names) or 'nothing'} on {len(usable)} run(s){_variant_words(usable, presets)}; left out {len(flagged)}"
    if result.undetermined:
        header += f"\n{undetermined_words(result.undetermined, names)}"
    if at_bound:
        header += f"\nWARNING: {', '.join(at_bound)} ended on the bound of its range: the runs push it further"
    before = relative_errors(result.before_s, result.measured_s)
    after = relative_errors(result.after_s, result.measured_s)
    rows = [
        CalibratedRun(run=r.label, measured_s=float(m), before_s=float(b), after_s=float(a))
        for r, m, b, a in zip(usable, result.measured_s, result.before_s, result.after_s, strict=True)
    ]
    by_label = {r.label: r for r in all_runs}
    rows += [
        CalibratedRun(run=label, measured_s=by_label[label].measured_s, before_s=by_label[label].measured_s,
                      after_s=by_label[label].measured_s, flagged=why)
        for label, why in flagged.items()
    ]  # fmt: skip
    return CalibrateResult(
        hardware=calibrated.name, out=None, fitted=names, constants=result.values, at_bound=at_bound,
        undetermined=result.undetermined, runs=rows,
        mape_before=float(np.mean(np.abs(before))), mape_after=float(np.mean(np.abs(after))),
        worst_before=float(np.max(np.abs(before))), worst_after=float(np.max(np.abs(after))), command=line,
        toml=cluster_to_toml(calibrated, header),
    )  # fmt: skip

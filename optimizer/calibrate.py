"""`paraplan calibrate`: fit a hardware preset's efficiency constants to measured runs.

Constants fitted (each a property of the hardware and its software stack, bounded to a physical
range): `efficiency.gemm_max`, `efficiency.gemm_half_dim` (the GEMM efficiency curve),
`efficiency.attention`, `efficiency.memory_bound`, the intra-node and inter-node link
efficiencies, and `efficiency.dp_overlap`.

Method: bounded, damped Gauss-Newton (Levenberg-Marquardt) in numpy on the residuals
    r_i = ln(predicted_i / measured_i)
(relative error, so long and short steps weigh alike), plus a weak Tikhonov pull
    sqrt(PRIOR_WEIGHT) * (theta_j - theta_j,preset) / range_j
that keeps a constant the runs cannot see (attention in runs without flash attention, the
network in single-node runs) at its preset value instead of drifting. Each step is projected
onto the bounds. Jacobians are forward differences. The knobs each run leaves open are chosen
once with the preset's constants, as `validate` chooses them, and held during the fit so the
objective is smooth; the "after" error re-chooses them with the fitted constants.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from paraplan.cost_models.errors import InputError
from paraplan.cost_models.evaluate import evaluate
from paraplan.cost_models.layout import Layout, Layouts
from paraplan.cost_models.models import ModelSpec, load_model, model_from_config
from paraplan.cost_models.stack import Stack
from paraplan.hardware_specs.schema import Cluster
from paraplan.plan import parse_plan
from paraplan.scenario import Scenario, best_or_closest
from paraplan.space import Knobs

REQUIRED = ("model", "gpus", "plan", "global_batch", "seq_len", "step_time_s")
KNOB_COLUMNS = (
    "micro_batch", "recompute", "recompute_layers", "zero", "sequence_parallel", "virtual_stages", "precision"
)
STACK_COLUMNS = ("flash_attention", "dp_overlap", "main_grads")
STACK_FLAGS = ("flash_attention", "dp_overlap")
PRIOR_WEIGHT = 1e-3
MAX_ITERATIONS = 40


@dataclass(frozen=True)
class Parameter:
    name: str
    lower: float
    upper: float

    def get(self, cluster: Cluster) -> float:
        return float(_PATHS[self.name](cluster))

    def span(self) -> float:
        return self.upper - self.lower


_PATHS = {
    "gemm_max": lambda c: c.efficiency.gemm_max,
    "gemm_half_dim": lambda c: c.efficiency.gemm_half_dim,
    "attention": lambda c: c.efficiency.attention,
    "memory_bound": lambda c: c.efficiency.memory_bound,
    "intra_node": lambda c: c.intra_node.link.efficiency,
    "inter_node": lambda c: c.inter_node.efficiency,
    "dp_overlap": lambda c: c.efficiency.dp_overlap,
}

PARAMETERS = {
    p.name: p
    for p in (
        Parameter("gemm_max", 0.2, 1.0),
        Parameter("gemm_half_dim", 0.0, 1024.0),
        Parameter("attention", 0.1, 1.0),
        Parameter("memory_bound", 0.2, 1.0),
        Parameter("intra_node", 0.05, 1.0),
        Parameter("inter_node", 0.05, 1.0),
        Parameter("dp_overlap", 0.0, 1.0),
    )
}


def with_constants(cluster: Cluster, values: dict[str, float]) -> Cluster:
    efficiency_fields = ("gemm_max", "gemm_half_dim", "attention", "memory_bound", "dp_overlap")
    eff_updates = {k: v for k, v in values.items() if k in efficiency_fields}
    eff = cluster.efficiency.model_copy(update=eff_updates)
    intra = cluster.intra_node
    if "intra_node" in values:
        intra = intra.model_copy(update={"link": intra.link.model_copy(update={"efficiency": values["intra_node"]})})
    inter = cluster.inter_node
    if "inter_node" in values:
        inter = inter.model_copy(update={"efficiency": values["inter_node"]})
    return cluster.model_copy(update={"efficiency": eff, "intra_node": intra, "inter_node": inter})


# --- runs ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    label: str
    model: ModelSpec
    gpus: int
    plan_text: str
    knobs: Knobs
    stack: Stack
    measured_s: float

    def scenario(self, cluster: Cluster) -> Scenario:
        plan = parse_plan(self.plan_text, self.gpus)
        return Scenario(self.model, cluster, self.gpus, self.knobs, self.stack).with_plan(plan)


def _cell(row: dict[str, str], key: str) -> str | None:
    value = row.get(key)
    return value.strip() if value is not None and value.strip() != "" else None


def _number(row: dict[str, str], key: str, where: str, kind: type = int) -> Any:
    text = _cell(row, key)
    if text is None:
        raise InputError(f"{where}: column '{key}' is empty")
    try:
        value = kind(float(text)) if kind is int else kind(text)
    except (ValueError, OverflowError):
        raise InputError(f"{where}: {key} = '{text}' is not a number") from None
    if kind is int and float(text) != value:
        raise InputError(f"{where}: {key} = '{text}' must be a whole number")
    if not (isinstance(value, (int, float)) and math.isfinite(value) and value > 0):
        raise InputError(f"{where}: {key} = '{text}' must be positive")
    return value


def _bool(text: str, where: str) -> bool:
    lowered = text.lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise InputError(f"{where}: '{text}' is not true/false")


def _row_knobs(row: dict[str, str], where: str) -> tuple[Knobs, Stack]:
    extra: dict[str, Any] = {}
    if _cell(row, "knobs"):
        try:
            extra = json.loads(row["knobs"])
        except json.JSONDecodeError:
            raise InputError(f"{where}: column 'knobs' is not JSON") from None
    for key in (*KNOB_COLUMNS, *STACK_COLUMNS):
        if _cell(row, key) is not None:
            extra[key] = _cell(row, key)
    recompute = extra.get("recompute")
    if recompute is not None and recompute not in ("none", "selective", "full"):
        raise InputError(f"{where}: recompute '{recompute}' is not none, selective or full")
    precision = extra.get("precision", "bf16")
    if precision not in ("bf16", "fp16", "fp8"):
        raise InputError(f"{where}: precision '{precision}' is not bf16, fp16 or fp8")

    def whole(key: str) -> int | None:
        if extra.get(key) in (None, ""):
            return None
        try:
            value = float(extra[key])
        except (TypeError, ValueError):
            raise InputError(f"{where}: {key} = {extra[key]!r} is not a number") from None
        if not math.isfinite(value) or value != int(value) or value < (0 if key in ("zero", "recompute_layers") else 1):
            raise InputError(f"{where}: {key} = {extra[key]!r} must be a whole number")
        return int(value)

    zero = whole("zero")
    if zero is not None and zero > 3:
        raise InputError(f"{where}: zero = {zero} must be 0, 1, 2 or 3")
    sp = extra.get("sequence_parallel")
    knobs = Knobs(
        micro_batch=whole("micro_batch"),
        virtual_stages=whole("virtual_stages"),
        recompute_layers=whole("recompute_layers"),
        recompute=recompute,
        zero=zero,
        sequence_parallel=None if sp in (None, "") else (sp if isinstance(sp, bool) else _bool(str(sp), where)),
        precision=precision,
        global_batch=_number(row, "global_batch", where),
        seq_len=_number(row, "seq_len", where),
    )
    main_grads = extra.get("main_grads", "fp32")
    if main_grads not in ("fp32", "bf16"):
        raise InputError(f"{where}: main_grads '{main_grads}' is not fp32 or bf16")
    flags = {k: v if isinstance(v, bool) else _bool(str(v), where) for k, v in extra.items() if k in STACK_FLAGS}
    stack = Stack(main_grads=main_grads, **flags)
    return knobs, stack


def load_runs(path: Path) -> list[Run]:
    """Runs from a CSV: the contract's columns, or the reference table's (config, knobs,
    measured_step_time_s). Every problem is an InputError naming the row and column."""
    try:
        with path.open(newline="") as fh:
            rows = list(csv.DictReader(fh))
            columns = set(rows[0].keys()) if rows else set()
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise InputError(f"cannot read runs file '{path}': {exc}") from None
    if not rows:
        raise InputError(f"runs file '{path}' has no runs")
    if "step_time_s" not in columns and "measured_step_time_s" in columns:
        rows = [{**r, "step_time_s": r["measured_step_time_s"]} for r in rows]
        columns.add("step_time_s")
    missing = [c for c in REQUIRED if c not in columns and not (c == "model" and "config" in columns)]
    if missing:
        raise InputError(f"runs file '{path}' lacks the column(s) {', '.join(missing)}; needs {', '.join(REQUIRED)}")
    return [_run(row, path, n) for n, row in enumerate(rows, start=2)]


def _run(row: dict[str, str], path: Path, line: int) -> Run:
    where = f"{path.name} line {line}"
    label = _cell(row, "id") or f"line {line}"
    model_text = _cell(row, "model")
    try:
        if model_text is not None:
            candidate = path.parent / model_text
            model = load_model(str(candidate) if candidate.exists() else model_text)
        elif _cell(row, "config") is not None:
            model = model_from_config(json.loads(row["config"]), label)
        else:
            raise InputError("column 'model' is empty")
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None
    except (json.JSONDecodeError, AttributeError, TypeError):
        raise InputError(f"{where}: column 'config' is not a JSON object") from None
    gpus = _number(row, "gpus", where)
    plan_text = _cell(row, "plan") or ""
    try:
        parse_plan(plan_text, gpus)
    except InputError as exc:
        raise InputError(f"{where}: {exc}") from None
    knobs, stack = _row_knobs(row, where)
    return Run(label, model, gpus, plan_text, knobs, stack, _number(row, "step_time_s", where, float))


# --- fitting ---------------------------------------------------------------------------------


def chosen_layouts(runs: list[Run], cluster: Cluster) -> list[Layout]:
    """Each run's layout with its open knobs chosen as validate chooses them."""
    out = []
    for run in runs:
        choice = best_or_closest(run.scenario(cluster).evaluate_space())
        out.append(choice.evaluation.layouts.at(choice.index))
    return out


def predict(runs: list[Run], layouts: list[Layout], cluster: Cluster) -> npt.NDArray[np.float64]:
    steps = [
        evaluate(r.model, cluster, Layouts.of([lay]), r.stack).step_time_s[0]
        for r, lay in zip(runs, layouts, strict=True)
    ]
    return np.array(steps, dtype=np.float64)


@dataclass(frozen=True)
class Fit:
    cluster: Cluster
    values: dict[str, float]
    before_s: npt.NDArray[np.float64]
    after_s: npt.NDArray[np.float64]
    measured_s: npt.NDArray[np.float64]


def relative_errors(predicted: npt.NDArray[np.float64], measured: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    return np.asarray(predicted / measured - 1.0)


def fit(runs: list[Run], cluster: Cluster, names: list[str]) -> Fit:
    if len(runs) < len(names):
        raise InputError(
            f"{len(runs)} run(s) cannot determine {len(names)} constants ({', '.join(names)}); "
            f"give at least {len(names)} runs or fewer constants with --fit"
        )
    params = [PARAMETERS[n] for n in names]
    lower = np.array([p.lower for p in params])
    upper = np.array([p.upper for p in params])
    span = upper - lower
    theta0 = np.clip(np.array([p.get(cluster) for p in params]), lower, upper)
    measured = np.array([r.measured_s for r in runs])
    layouts = chosen_layouts(runs, cluster)

    def residuals(theta: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        trial = with_constants(cluster, dict(zip(names, map(float, theta), strict=True)))
        fit_part = np.log(predict(runs, layouts, trial) / measured)
        prior = math.sqrt(PRIOR_WEIGHT) * (theta - theta0) / span
        return np.concatenate([fit_part, prior])

    theta = theta0.copy()
    r = residuals(theta)
    damping = 1e-2
    for _ in range(MAX_ITERATIONS):
        jac = np.empty((len(r), len(theta)))
        for j in range(len(theta)):
            step = 1e-4 * span[j]
            probe = theta.copy()
            probe[j] = probe[j] + step if probe[j] + step <= upper[j] else probe[j] - step
            jac[:, j] = (residuals(probe) - r) / (probe[j] - theta[j])
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
    fitted = with_constants(cluster, dict(zip(names, map(float, theta), strict=True)))
    before = predict(runs, layouts, cluster)
    after = predict(runs, chosen_layouts(runs, fitted), fitted)
    return Fit(fitted, dict(zip(names, map(float, theta), strict=True)), before, after, measured)


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


def default_names() -> list[str]:
    return list(PARAMETERS)


def parse_fit_names(text: str | None) -> list[str]:
    if text is None:
        return default_names()
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in PARAMETERS]
    if unknown or not names:
        raise InputError(f"--fit '{text}': unknown constant(s) {', '.join(unknown) or '(none)'}; "
                         f"accepted: {', '.join(PARAMETERS)}")
    return list(dict.fromkeys(names))


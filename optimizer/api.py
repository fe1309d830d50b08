"""The public Python API: `paraplan.validate`, `optimize`, `compare`, `calibrate`, `load_model`,
`load_hardware`. The CLI is a thin layer over these functions; both return (and print) the same
result models (`paraplan.results`).

Keyword arguments take the CLI's defaults. Layout knobs (`micro_batch=2`, `recompute="full"`,
`framework="torchtitan"`, ...; the fields of `paraplan.Layout`) go as keyword arguments: a
searched knob given is fixed, one left out is chosen. Stack settings (`flash_attention`,
`dp_overlap`, `main_grads`, `tp_overlap`, `p2p_overlap`, `loss`, `fp8_recipe`, `attention_saved`,
`pp_outputs_kept`, `kv_repeated`, `compiled`, `fused_norm`, `triton_attention`, `adam_moments`,
`master_weights`, `nvls`)
go in `stack={...}` and default to the framework's. Bad input raises `paraplan.InputError` with a one-line message.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal, Unpack

import numpy as np

from paraplan.advice import best_single_change, requirements, single_change_mask
from paraplan.answers import evaluated
from paraplan.cost_models import frameworks
from paraplan.cost_models.candidates import Layouts
from paraplan.cost_models.errors import InputError
from paraplan.cost_models.evaluate import Evaluation
from paraplan.cost_models.layout import DEGREES, MAX_GPUS, KnobArgs, Layout, legend
from paraplan.cost_models.models import ModelSpec
from paraplan.cost_models.models import load_model as _load_model
from paraplan.cost_models.tco import usd_per_gpu_hour
from paraplan.cost_models.units import finite_number
from paraplan.explain import binding_limits, bottleneck_sentence, why_loses
from paraplan.hardware_specs.loader import load_cluster
from paraplan.hardware_specs.schema import Cluster
from paraplan.plan import parse_plan
from paraplan.question import Question
from paraplan.results import (
    Change,
    Explanation,
    HardwareResult,
    OptimizeResult,
    Optimum,
    ScalingPoint,
    SolverOut,
    ValidateResult,
)
from paraplan.search import (
    Constraints,
    Ranking,
    best_per_count,
    closest,
    complete_ranked,
    expansion_needed,
    rank,
    rank_space,
    rows_beside,
)
from paraplan.space import SpaceTooLarge

if TYPE_CHECKING:
    from paraplan.pools import Pool

# Layouts per hardware unless `top` is given. A pool answers its proven best plan only by
# default: each further answer is another proven (DP, micro-batch) optimum, 3-10x the time.
DEFAULT_TOP = 5
MAX_TOP = 100
Objective = Literal["time", "cost"]


# A preset's name or a file's path, as text or a path object.
NameOrPath = str | os.PathLike[str]


def load_model(name_or_path: NameOrPath) -> ModelSpec:
    """A model preset by name, or a Hugging Face style config.json."""
    return _load_model(name_or_path_text(name_or_path, "model"))


def load_hardware(name_or_path: NameOrPath) -> Cluster:
    """A hardware preset by name, or a TOML file of the same schema."""
    return load_cluster(name_or_path_text(name_or_path, "hardware"))


def name_or_path_text(value: object, what: str) -> str:
    """A name-or-path argument as text: a str, or a path object (`pathlib.Path`); anything else is
    bad input, said as such (the module docstring's promise), not an AttributeError from inside."""
    if isinstance(value, os.PathLike):
        value = os.fspath(value)
    if not isinstance(value, str):
        raise InputError(f"{what} {value!r}: expected a preset name or a file path")
    return value


def hardware_arg(hardware: object) -> str | Cluster | list[str | Cluster]:
    """optimize's and compare's `hardware` checked: a name or path, a Cluster, or a list or tuple
    of those (path objects read as their text)."""
    if isinstance(hardware, Cluster):
        return hardware
    if isinstance(hardware, (list, tuple)):
        return [v if isinstance(v, Cluster) else name_or_path_text(v, "hardware") for v in hardware]
    return name_or_path_text(hardware, "hardware")


def _model(model: NameOrPath | ModelSpec) -> ModelSpec:
    return model if isinstance(model, ModelSpec) else load_model(model)


def _cluster(hardware: NameOrPath | Cluster) -> Cluster:
    return hardware if isinstance(hardware, Cluster) else load_hardware(hardware)


def _solver(ranking: Ranking, candidates: int, wall_s: float | None = None) -> SolverOut:
    """`wall_s`: the whole search's time where the ranking's own is only its last part."""
    return SolverOut(status=ranking.status, wall_s=ranking.wall_s if wall_s is None else wall_s,
                     candidates=candidates, method="enumeration")  # fmt: skip


# --- validate --------------------------------------------------------------------------------


def validate(
    model: NameOrPath | ModelSpec,
    gpus: int | None,
    hardware: NameOrPath | Cluster,
    plan: str | None = None,
    *,
    mem_headroom: float = 0.0,
    stack: Mapping[str, object] | None = None,
    emit: str | None = None,
    from_launch: str | Path | None = None,
    **knobs: Unpack[KnobArgs],
) -> ValidateResult:
    """Is this plan feasible, and how good is it? Knobs not given are chosen to make the plan as
    good as it can be; the result gives the gap to the optimum and the best single change.
    With `from_launch` (a Megatron-LM, torchtitan or DeepSpeed launch file) the plan, its knobs,
    its stack and (where the file states it) the GPU count come from the file; explicit values
    override the file's, and `launch_notes` lists what was read, overridden or not modelled."""
    check_arguments(mem_headroom=mem_headroom, stack=stack, from_launch=from_launch)
    spec, cluster = _model(model), _cluster(hardware)
    if plan is not None and not isinstance(plan, str):
        raise InputError(f"plan {plan!r}: expected text such as 'TP8/PP4/DP8'")
    given: dict[str, object] = dict(knobs)
    launch_notes: list[str] = []
    if from_launch is not None:
        from paraplan.launch.importer import resolve_from_launch

        read = resolve_from_launch(from_launch, spec, gpus=gpus, plan=plan, knobs=given, stack=stack)
        gpus, plan, given, stack, launch_notes = read.gpus, read.plan, read.knobs, read.stack, read.notes
    _emit_framework(given, emit)
    if gpus is None or plan is None:
        raise InputError("validate needs a GPU count and a plan (or a launch file to read them from)")
    _check_gpus(gpus)
    parsed = parse_plan(plan, gpus)
    if parsed.virtual_stages is not None:
        if given.get("virtual_stages") not in (None, parsed.virtual_stages):
            raise InputError(
                f"plan '{plan}' gives VPP{parsed.virtual_stages} but virtual-stages is {given['virtual_stages']}"
            )
        given["virtual_stages"] = parsed.virtual_stages
    started = time.perf_counter()
    question = Question.of(spec, cluster, given, stack, mem_headroom)
    planned = question.fixed(tp=parsed.tp, pp=parsed.pp, dp=parsed.dp, cp=parsed.cp, ep=parsed.ep)
    free = question.free()
    plan_space = planned.space(gpus)
    not_searched = None
    try:
        free_cores = free.space(gpus, trading=False)
    except SpaceTooLarge as exc:  # the optimum is an extra: a space too large for it leaves the plan's answer
        free_cores, not_searched = plan_space.take(np.arange(0)), str(exc)
    # One evaluation for the plan's candidates and the free space's cores (those of the plan's
    # degrees are among the plan's candidates: priced once); then, once, the trading variants
    # that could beat the optimum or the best single change (`search`).
    fresh, cores_index = rows_beside(plan_space, free_cores)
    first = question.evaluate(Layouts.concat([plan_space, free_cores.take(fresh)]))
    plan_ev = first.take(np.arange(len(plan_space)))
    free_base = first.take(cores_index)
    neighbours = single_change_mask(free_base, parsed)
    need = expansion_needed(free_base, Constraints(), 1, None) | expansion_needed(
        free_base, Constraints(), 1, None, subset=neighbours
    )
    try:  # past the cap, the optimum and the best single change each by bound (`search.complete_bounded`)
        free_ev = complete_ranked(free, free_base, need, Constraints(), 1, None,
                                  subsets=(None, lambda ev: single_change_mask(ev, parsed)), known=plan_ev)  # fmt: skip
    except SpaceTooLarge as exc:
        free_ev, not_searched = plan_ev.take(np.arange(0)), str(exc)
    price = usd_per_gpu_hour(cluster)
    plan_rank = rank(plan_ev, Constraints(), 1)
    free_rank = rank(free_ev, Constraints(), 1)
    searched_s = time.perf_counter() - started
    if len(plan_ev) == 0:
        raise InputError(f"plan '{plan}' admits no layout of {spec.name} on {gpus} GPUs")
    index = plan_rank.best[0] if plan_rank.groups else closest(plan_ev)
    choice = evaluated(plan_ev, index, usd_per_gpu_hour=price)
    optimum = None
    change = None
    if free_rank.groups:
        j = free_rank.best[0]
        best_step = float(free_ev.step_time_s[j])
        optimum = Optimum(
            layout=free_ev.layouts.at(j), step_time_s=best_step, mfu=float(free_ev.mfu[j]),
            gap=choice.step_time_s / best_step - 1.0 if choice.feasible else None,
        )  # fmt: skip
        if choice.feasible:
            found = best_single_change(free_ev, parsed, choice.step_time_s)
            if found is not None:
                change = Change(
                    change=found.words, layout=free_ev.layouts.at(found.index),
                    step_time_s=float(free_ev.step_time_s[found.index]), gain=found.gain,
                )  # fmt: skip
    fixes: list[str] = []
    if not choice.feasible:
        from paraplan.fixes import fixes_for_plan

        degrees = {"tp": parsed.tp, "pp": parsed.pp, "dp": parsed.dp, "cp": parsed.cp, "ep": parsed.ep}
        fixes = fixes_for_plan(question, gpus, degrees, Constraints())
    open_knobs = planned.open_knobs()
    result = ValidateResult(
        **choice.model_dump(exclude={"layout", "equivalent"}),
        layout=choice.layout,
        equivalent=choice.equivalent,
        knobs_chosen=open_knobs,
        requirements=requirements(plan_ev, open_knobs),
        fixes=fixes,
        solver=_solver(plan_rank, len(plan_space), searched_s),
        stack=question.stack.settings(),
        optimum=optimum,
        optimum_not_searched=not_searched,
        best_change=change,
        warnings=input_warnings(spec) + layout_warnings(spec, [choice.layout]),
    )
    if emit is not None and not choice.feasible:
        # A launch file the tool itself predicts will not run is never written.
        launch_notes.append(f"no {emit} launch emitted: the plan is infeasible ({'; '.join(choice.violations)})")
    elif emit is not None:
        from paraplan.emit import emit_launch

        text = emit_launch(emit, spec, choice.layout, question.stack, evaluated=choice,
                           gpus_per_node=cluster.gpus_per_node)  # fmt: skip
        result = result.model_copy(update={"launch": {emit: text}})
    if launch_notes:
        result = result.model_copy(update={"launch_notes": launch_notes})
    return result


def _check_gpus(gpus: int) -> None:
    if isinstance(gpus, bool) or not isinstance(gpus, int) or not 1 <= gpus <= MAX_GPUS:
        raise InputError(f"gpus {gpus!r} must be a whole number in 1..{MAX_GPUS}")


# --- optimize --------------------------------------------------------------------------------


@dataclass(frozen=True)
class HardwareItem:
    """One --hardware entry: a preset or TOML, with its own GPU count (or range) if given."""

    name: str
    count: str | None


def hardware_items(values: str | Sequence[str]) -> list[HardwareItem]:
    """'a100-80g,h100-sxm:512' or ['a100-80g', 'rtx4090:2048'] -> entries. A trailing ':COUNT'
    (or ':LOW..HIGH') gives that hardware its own GPU count."""
    texts = [values] if isinstance(values, str) else list(values)
    items: list[HardwareItem] = []
    for value in texts:
        for part in hardware_entries(value):
            part = part.strip()
            if not part:
                raise InputError(f"hardware '{value}' has an empty entry")
            name, sep, count = part.rpartition(":")
            if not sep:
                items.append(HardwareItem(part, None))
                continue
            if not name.strip():
                raise InputError(f"hardware entry '{part}' has no name before ':'")
            if not re.fullmatch(_COUNT, count):
                raise InputError(
                    f"hardware entry '{part}': the GPU count '{count}' must be a whole number (e.g. {name.strip()}:256)"
                )
            items.append(HardwareItem(name.strip(), count.strip()))
    return items


# A GPU count (1024) or range (256..2048), its bounds captured.
_COUNT = r"\s*(\d{1,9})\s*(?:\.\.\s*(\d{1,9})\s*)?"


def names_a_file(value: str) -> bool:
    """Whether a --hardware entry (less a ':COUNT') is a path that exists: its name is then read as
    written, commas and '+' included, never as a list or a pool."""
    name, sep, count = value.rpartition(":")
    path = name if sep and re.fullmatch(_COUNT, count) else value
    return os.path.lexists(path.strip())


def _hardware_parts(hardware: str | Cluster | Sequence[str | Cluster]) -> list[str | Cluster | Pool]:
    """The --hardware entries, pools parsed (`pools.split_hardware`). Only a '+' or a '.toml' can
    make a pool, so without either the pool module (and its solver's code) is never imported."""
    values = [hardware] if isinstance(hardware, (str, Cluster)) else list(hardware)
    if any(isinstance(v, str) and ("+" in v or ".toml" in v.lower()) for v in values):
        from paraplan.pools import split_hardware

        return split_hardware(hardware)
    out: list[str | Cluster | Pool] = []
    for value in values:
        out += [part.strip() for part in hardware_entries(value)] if isinstance(value, str) else [value]
    return out


def hardware_entries(value: str) -> list[str]:
    """The comma-separated entries of one --hardware value (a file named with a comma is one)."""
    return value.split(",") if "," in value and not names_a_file(value) else [value]


def gpu_counts(text: str | int | None, per_node: int, where: str = "gpus") -> list[int]:
    """A count (1024) or a range (256..2048): the counts a range admits (`gpu_count_domain`)."""
    if text is None:
        raise InputError("gpus is required unless every hardware names its count as NAME:COUNT")
    if isinstance(text, int) and not isinstance(text, bool):
        _check_gpus(text)
        return [text]
    match = re.fullmatch(_COUNT, str(text))
    if not match:
        raise InputError(f"{where} '{text}' must be a GPU count (1024) or a range (256..2048)")
    lo = int(match.group(1))
    hi = int(match.group(2)) if match.group(2) else lo
    if not 1 <= lo <= hi <= MAX_GPUS:
        raise InputError(f"{where} '{text}': need 1 <= low <= high <= {MAX_GPUS}")
    return [lo] if lo == hi else gpu_count_domain(lo, hi, per_node)


def gpu_count_domain(lo: int, hi: int, per_node: int) -> list[int]:
    """GPU counts a range admits: 2^a or 3*2^a whole nodes, or 2^a or 3*2^a GPUs of one partial node.

    Layout degrees are products of small factors; counts with a large prime factor only admit
    degenerate layouts. Powers of two and 1.5x powers of two cover the sizes clusters are built
    in (256, 384, 512, 768, ...) at two counts per doubling. Counted in nodes, not GPUs, so that a
    node whose size has another factor keeps its whole nodes: no 2^a or 3*2^a GPU count is a whole
    number of 72-GPU NVL72 racks (72 = 8 x 9), while 1, 2, 3, 4, 6, 8, ... racks are how those are
    bought. For nodes of 2^k GPUs the two readings admit the same counts.
    """
    counts = set()
    value = 1
    while value <= hi:
        for count in (value, 3 * value):
            if lo <= count <= hi and count < per_node:
                counts.add(count)
            if lo <= count * per_node <= hi:
                counts.add(count * per_node)
        value *= 2
    if not counts:
        counts = {c for c in (lo, hi) if c % per_node == 0 or c < per_node} or {lo}
    return sorted(counts)


def degree_bounds(bounds: Mapping[str, int | None] | None) -> tuple[dict[str, int], dict[str, int]]:
    """`{"max_tp": 4, "min_dp": 16}` -> (lower bounds, upper bounds) by degree, checked."""
    low: dict[str, int] = {}
    high: dict[str, int] = {}
    for key, value in (bounds or {}).items():
        if value is None:
            continue
        side, _, dim = key.partition("_")
        if side not in ("min", "max") or dim not in DEGREES:
            raise InputError(f"unknown constraint {key!r}; accepted: min_/max_ + one of {', '.join(DEGREES)}")
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_GPUS:
            raise InputError(f"{key} {value!r} must be a whole number in 1..{MAX_GPUS}")
        (low if side == "min" else high)[dim] = value
    for dim in set(low) & set(high):
        if low[dim] > high[dim]:
            raise InputError(f"min_{dim} {low[dim]} exceeds max_{dim} {high[dim]}")
    return low, high


def constraints_from(
    bounds: Mapping[str, int | None] | None, tp_within_node: bool, deadline_days: float | None, tokens: float | None
) -> Constraints:
    low, high = degree_bounds(bounds)
    if deadline_days is not None and tokens is None:
        raise InputError("a deadline needs tokens (how many tokens must be trained by then)")
    check_amount("tokens", tokens, minimum=1.0, inclusive=True)
    check_amount("deadline_days", deadline_days)
    return Constraints(low, high, tp_within_node, deadline_days, tokens)


def _fixed_within_bounds(knobs: Mapping[str, object], cons: Constraints) -> None:
    """A degree both fixed and bounded must agree with its bound: contradictory input."""
    for dim in DEGREES:
        value = knobs.get(dim)
        if value is None:
            continue
        if dim in cons.low and int(str(value)) < cons.low[dim]:
            raise InputError(f"{dim} {value} is fixed below its min_{dim} {cons.low[dim]}: give one of them")
        if dim in cons.high and int(str(value)) > cons.high[dim]:
            raise InputError(f"{dim} {value} is fixed above its max_{dim} {cons.high[dim]}: give one of them")


def check_arguments(*, mem_headroom: object = 0.0, stack: object = None, bounds: object = None,
                    figures: object = None, from_launch: object = None) -> None:  # fmt: skip
    """The keyword arguments the entry points share, checked for their types as the CLI's option
    types check them: a bad one is an InputError naming it, not an error from deep inside."""
    check_amount("mem_headroom", mem_headroom, inclusive=True, required=True)  # type: ignore[arg-type]
    for name, value in (("stack", stack), ("bounds", bounds), ("figures", figures)):
        if value is not None and not isinstance(value, Mapping):
            raise InputError(f"{name} {value!r}: expected a mapping (a dict) or None")
    if from_launch is not None:
        name_or_path_text(from_launch, "from_launch")


def check_amount(name: str, value: float | None, minimum: float = 0.0, inclusive: bool = False,
                 required: bool = False) -> None:  # fmt: skip
    """A finite amount above `minimum` (or at it, when `inclusive`); None means not given, which
    only a `required` amount refuses. The CLI's option types check the same; this is the API's door."""
    if value is None and not required:
        return
    if value is None or not finite_number(value) or value < minimum or (value == minimum and not inclusive):
        raise InputError(f"{name} {value!r} must be a finite number {'>=' if inclusive else '>'} {minimum:g}")


def optimize(
    model: NameOrPath | ModelSpec,
    hardware: NameOrPath | Cluster | Sequence[NameOrPath | Cluster],
    gpus: int | str | None = None,
    *,
    top: int | None = None,
    objective: Objective = "time",
    tokens: float | None = None,
    deadline_days: float | None = None,
    bounds: Mapping[str, int | None] | None = None,
    tp_within_node: bool = True,
    mem_headroom: float = 0.0,
    stack: Mapping[str, object] | None = None,
    emit: str | None = None,
    scaling: bool = False,
    **knobs: Unpack[KnobArgs],
) -> OptimizeResult:
    """The best `top` layouts per hardware. Degrees given as knobs (tp=8) are fixed; `bounds`
    ({"max_tp": 4, "min_dp": 16}) bound them; with `tokens`, each layout carries its training
    time and cost; with `deadline_days`, only layouts that train `tokens` in time qualify; with
    `scaling`, a range search also reports the best layout of every GPU count."""
    check_arguments(mem_headroom=mem_headroom, stack=stack, bounds=bounds)
    hardware = hardware_arg(hardware)
    pool_top = 1 if top is None else top
    top = DEFAULT_TOP if top is None else top
    if isinstance(top, bool) or not isinstance(top, int) or not 1 <= top <= MAX_TOP:
        raise InputError(f"top {top!r} must be a whole number in 1..{MAX_TOP}")
    if objective not in ("time", "cost"):
        raise InputError(f"objective {objective!r} must be time or cost")
    cons = constraints_from(bounds, tp_within_node, deadline_days, tokens)
    spec = _model(model)
    given: dict[str, object] = dict(knobs)
    _emit_framework(given, emit)
    _fixed_within_bounds(given, cons)
    results: list[HardwareResult] = []
    for part in _hardware_parts(hardware):
        if not isinstance(part, (str, Cluster)):  # A:N+B:M or a pool TOML: one mixed pool, its own counts
            from paraplan.pools import optimize_pool

            pooled = optimize_pool(spec, part, top=pool_top, objective=objective, tokens=tokens, bounds=bounds,
                                   mem_headroom=mem_headroom, stack=stack, emit=emit, deadline_days=deadline_days,
                                   tp_within_node=tp_within_node, scaling=scaling, knobs=given)  # fmt: skip
            results.append(pooled)
            continue
        for cluster, count in _hardware_entries(part):
            where = f"hardware entry '{cluster.name}' count" if count is not None else "gpus"
            counts = gpu_counts(count if count is not None else gpus, cluster.gpus_per_node, where)
            results.append(_optimize_one(spec, cluster, counts, cons, top, objective, tokens, mem_headroom, stack,
                                         emit, scaling, given))  # fmt: skip
    if not results:
        raise InputError("no hardware given: name at least one preset or TOML")
    listed = [e.layout for r in results for e in r.layouts]
    return OptimizeResult(model=spec.name, results=results, legend=legend(),
                          warnings=input_warnings(spec) + layout_warnings(spec, listed))  # fmt: skip


def input_warnings(spec: ModelSpec) -> list[str]:
    """What the model's reader assumed or ignored, to be shown with every answer about it."""
    return [f"model config of {spec.name}: {w}" for w in spec.warnings]


def layout_warnings(spec: ModelSpec, layouts: list[Layout]) -> list[str]:
    """What is priced only approximately in the layouts of an answer, each warning once (the search
    proposes no such layout; a plan or knob the user gives may hold one)."""
    found = [frameworks.ep_approximation(lay) for lay in layouts]
    found += [frameworks.moe_approximation(lay, spec.is_moe) for lay in layouts]
    found += [
        f"sequence length {lay.seq_len} exceeds {spec.name}'s {spec.max_seq_len} learned positions: as configured "
        f"it embeds no position past {spec.max_seq_len}; priced at {lay.seq_len} tokens with its "
        f"{spec.max_seq_len}-row position table (the {(lay.seq_len - spec.max_seq_len) * spec.hidden_size:,} "
        "parameters of the rows a run would add are not counted), and no launch config is written for it"
        for lay in layouts
        if spec.positions_exceeded(lay.seq_len)
    ]
    return list(dict.fromkeys(w for w in found if w))


def _emit_framework(knobs: dict[str, object], emit: str | None) -> None:
    """Emitting a framework's launch without naming a framework plans for that framework: the
    emitted file then launches exactly the plan that was evaluated."""
    if emit is not None:
        knobs.setdefault("framework", emit)


def _hardware_entries(hardware: str | Cluster | Sequence[str | Cluster]) -> list[tuple[Cluster, str | None]]:
    if isinstance(hardware, Cluster):
        return [(hardware, None)]
    values = [hardware] if isinstance(hardware, str) else list(hardware)
    if not values:
        raise InputError("no hardware given: name at least one preset or TOML")
    out: list[tuple[Cluster, str | None]] = []
    for value in values:
        if isinstance(value, Cluster):
            out.append((value, None))
            continue
        for item in hardware_items(value):
            out.append((load_hardware(item.name), item.count))
    return out


def _optimize_one(
    model: ModelSpec, cluster: Cluster, counts: list[int], cons: Constraints, top: int, objective: Objective,
    tokens: float | None, mem_headroom: float, stack: Mapping[str, object] | None, emit: str | None,
    scaling: bool, knobs: Mapping[str, object],
) -> HardwareResult:  # fmt: skip
    question = Question.of(model, cluster, knobs, stack, mem_headroom, cons.bounds)
    price = usd_per_gpu_hour(cluster)
    if objective == "cost" and price is None:
        raise InputError(
            f"objective cost needs a price: hardware {cluster.name} has no [price] table "
            "(gpu_usd and shares, or cloud_usd_per_gpu_hour)"
        )
    objective_price = price if objective == "cost" else None
    ranking = rank_space(question, counts, cons, top, objective_price, per_count=scaling and len(counts) > 1)
    ev = ranking.evaluation
    layouts = [
        evaluated(ev, int(g[0]), tokens=tokens, usd_per_gpu_hour=price, equivalent=[int(j) for j in g[1:]])
        for g in ranking.groups
    ]
    result = HardwareResult(
        hardware=cluster.name, gpus=layouts[0].gpus if layouts else counts[0], solver=_solver(ranking, len(ev)),
        layouts=layouts, reason=ranking.reason, stack=question.stack.settings(),
    )  # fmt: skip
    if scaling and len(counts) > 1:
        result = result.model_copy(update={"scaling": [
            _scaling_point(ev, i, tokens, price) for i in best_per_count(ev, cons, objective_price)
        ]})  # fmt: skip
    if ranking.groups:
        best = ranking.best[0]
        result = result.model_copy(update={"explanation": Explanation(
            best=[bottleneck_sentence(ev, best), *binding_limits(ev, best)],
            runners_up=[why_loses(ev, best, ev, j, objective == "cost") for j in ranking.best[1:]],
        )})  # fmt: skip
        if emit is not None:
            from paraplan.emit import emit_launch

            text = emit_launch(emit, model, layouts[0].layout, question.stack, evaluated=layouts[0],
                               gpus_per_node=cluster.gpus_per_node)  # fmt: skip
            result = result.model_copy(update={"launch": {emit: text}})
    else:
        from paraplan.fixes import fixes_for

        result = result.model_copy(update={"fixes": fixes_for(question, counts, ev, cons)})
    return result


def _scaling_point(ev: Evaluation, i: int, tokens: float | None, price: float | None) -> ScalingPoint:
    step = float(ev.step_time_s[i])
    gpus = int(ev.layouts.gpus[i])
    train = step * tokens / float(ev.layouts.global_batch[i] * ev.layouts.seq_len[i]) if tokens else None
    cost = train * gpus * price / 3600.0 if train is not None and price is not None else None
    return ScalingPoint(gpus=gpus, layout=ev.layouts.at(i), step_time_s=step, train_time_s=train, ideal_time_s=train,
                        cost_usd=cost)  # fmt: skip


def evaluation_for(question: Question, layout: Layout) -> Evaluation:
    """One layout evaluated under a question's model, hardware and stack."""
    return question.evaluate(Layouts.of([layout]))

"""Validate's advice: the single plan change that gains most, and the settings a plan needs.

A single change moves one factor between two of TP, PP, DP, CP (e.g. TP8/DP8 -> TP4/DP16, the
GPU count fixed), or changes EP alone. Among the plans one such change away, the best feasible
one under the same cost model and constraints is reported with its gain.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from paraplan.cost_models.candidates import BoolArray
from paraplan.cost_models.evaluate import Evaluation
from paraplan.cost_models.layout import BOOLS, ENUMS, KNOBS
from paraplan.plan import Plan

DIMS = ("tp", "pp", "dp", "cp")


@dataclass(frozen=True)
class Change:
    words: str  # "TP8 -> TP4, DP8 -> DP16"
    index: int  # into the free evaluation
    gain: float  # fraction of the current step time saved


def single_change_mask(ev: Evaluation, plan: Plan) -> BoolArray:
    lay = ev.layouts
    differs = np.stack([getattr(lay, d) != getattr(plan, d) for d in DIMS])
    moved = differs.sum(axis=0)
    same_ep = lay.ep == plan.ep
    return np.asarray(((moved == 2) & same_ep) | ((moved == 0) & ~same_ep))


def best_single_change(free: Evaluation, plan: Plan, current_step_s: float) -> Change | None:
    """The best feasible plan of the free evaluation one change away from `plan`."""
    from paraplan.search import Constraints, rank

    ranking = rank(free, Constraints(), 1, subset=single_change_mask(free, plan))
    if not ranking.groups:
        return None
    i = ranking.best[0]
    step = float(free.step_time_s[i])
    if step >= current_step_s:
        return None
    new = free.layouts.at(i)
    words = ", ".join(
        f"{d.upper()}{getattr(plan, d)} -> {d.upper()}{getattr(new, d)}"
        for d in (*DIMS, "ep")
        if getattr(plan, d) != getattr(new, d)
    )
    return Change(words, i, 1.0 - step / current_step_s)


def requirements(ev: Evaluation, open_knobs: list[str]) -> list[str]:
    """Settings a plan cannot do without: for each knob left open, the values that some
    layout of the plan needs to be feasible, when other values of that knob never are.
    E.g. ['recompute full', 'ZeRO >= 1', 'micro-batch <= 1']."""
    feasible = ev.feasible
    if not feasible.any():
        return []
    out = []
    for knob in open_knobs:
        if knob == "recompute_layers":  # a refinement of full recompute, not a requirement
            continue
        values = getattr(ev.layouts, knob)
        allowed = sorted(set(np.unique(values[feasible]).tolist()))
        tried = sorted(set(np.unique(values).tolist()))
        if allowed != tried:
            out.append(_requirement_words(knob, allowed, tried))
    return out


def _requirement_words(knob: str, allowed: list[int], tried: list[int]) -> str:
    spec = KNOBS[knob]
    if knob in ENUMS or knob in BOOLS:
        kind = ENUMS.get(knob, bool)
        return " or ".join(spec.word(kind(v)) for v in allowed)
    name = spec.title or knob.replace("_", " ")
    if allowed == [v for v in tried if v >= allowed[0]]:
        return f"{name} >= {allowed[0]}"
    if allowed == [v for v in tried if v <= allowed[-1]]:
        return f"{name} <= {allowed[-1]}"
    return f"{name} in {{{', '.join(map(str, allowed))}}}"

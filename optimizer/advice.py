"""Validate's advice: the gap to the optimum and the single plan change that gains most.

A single change moves one factor between two of TP, PP, DP, CP (e.g. TP8/DP8 -> TP4/DP16, the GPU
count fixed), or changes EP alone. Among the plans one such change away, the best feasible one
under the same cost model and constraints is reported with its gain.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from paraplan.cost_models.evaluate import Evaluation, evaluate, usable_memory_bytes
from paraplan.cost_models.layout import RECOMPUTE_MODES
from paraplan.plan import Plan
from paraplan.scenario import Choice, Scenario
from paraplan.search import Table

DIMS = ("tp", "pp", "dp", "cp")


@dataclass(frozen=True)
class Change:
    words: str  # "TP8 -> TP4, DP8 -> DP16"
    choice: Choice
    gain: float  # fraction of the current step time saved


def single_change_mask(table: Table, plan: Plan) -> np.ndarray:
    lay = table.layouts
    differs = np.stack([getattr(lay, d) != getattr(plan, d) for d in DIMS])
    moved = differs.sum(axis=0)
    same_ep = lay.ep == plan.ep
    return np.asarray(((moved == 2) & same_ep) | ((moved == 0) & ~same_ep))


def best_single_change(scenario: Scenario, free_table: Table, plan: Plan, current_step_s: float) -> Change | None:
    fits = free_table.memory_bytes <= usable_memory_bytes(scenario.cluster, scenario.mem_headroom)
    rows = np.nonzero(single_change_mask(free_table, plan) & fits)[0]
    if len(rows) == 0:
        return None
    picked = free_table.layouts.take(rows[:1])  # the table is sorted: the first is the best
    ev = evaluate(scenario.model, scenario.cluster, picked, scenario.stack, scenario.mem_headroom)
    step = float(ev.step_time_s[0])
    if step >= current_step_s:
        return None
    new = ev.layouts.at(0)
    words = ", ".join(
        f"{d.upper()}{getattr(plan, d)} -> {d.upper()}{getattr(new, d)}"
        for d in (*DIMS, "ep")
        if getattr(plan, d) != getattr(new, d)
    )
    return Change(words, Choice(ev, 0), 1.0 - step / current_step_s)


def requirements(ev: Evaluation, open_knobs: list[str]) -> list[str]:
    """Settings a plan cannot do without: for each knob left open, the values that some
    layout of the plan needs to be feasible, when other values of that knob never are.
    E.g. ['recompute full', 'ZeRO >= 1', 'micro-batch <= 1']."""
    feasible = ev.feasible
    if not feasible.any():
        return []
    lay = ev.layouts
    out = []
    for knob in open_knobs:
        if knob == "recompute_layers":  # a refinement of full recompute, not a requirement
            continue
        values = getattr(lay, knob)
        allowed = set(np.unique(values[feasible]).tolist())
        tried = set(np.unique(values).tolist())
        if allowed == tried:
            continue
        out.append(_requirement_words(knob, sorted(allowed), sorted(tried)))
    return out


def _requirement_words(knob: str, allowed: list[int], tried: list[int]) -> str:
    if knob == "recompute":
        return "recompute " + " or ".join(RECOMPUTE_MODES[v] for v in allowed)
    if knob == "sequence_parallel":
        return "sequence parallelism " + ("on" if allowed == [1] else "off")
    name = {"zero": "ZeRO", "micro_batch": "micro-batch", "virtual_stages": "virtual stages"}[knob]
    if allowed == [v for v in tried if v >= allowed[0]]:
        return f"{name} >= {allowed[0]}"
    if allowed == [v for v in tried if v <= allowed[-1]]:
        return f"{name} <= {allowed[-1]}"
    return f"{name} in {{{', '.join(map(str, allowed))}}}"

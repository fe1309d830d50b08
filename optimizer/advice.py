"""Validate's advice: the gap to the optimum and the single plan change that gains most.

A single change moves one factor between two of TP, PP, DP, CP (e.g. TP8/DP8 -> TP4/DP16, the GPU
count fixed), or changes EP alone. Among the plans one such change away, the best feasible one
under the same cost model and constraints is reported with its gain.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from cost_models.evaluate import evaluate, usable_memory_bytes
from optimizer.plan import Plan
from optimizer.scenario import Choice, Scenario
from optimizer.search import Table

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

"""Parse plan strings such as `TP8/PP4/DP8`, `tp2 pp16 dp64`, `TP1/PP1/DP8/EP8`, `TP4xPP8xVPP2`.

Components are case-insensitive `<dim><count>` pairs separated by `/`, `x`, `,` or spaces.
Missing TP/PP/CP/EP default to 1, missing DP is inferred as gpus/(TP*PP*CP), VPP (virtual
pipeline stages) is left to the caller when absent. The product TP*PP*DP*CP must equal the GPUs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from paraplan.cost_models.errors import InputError
from paraplan.cost_models.layout import MAX_DEGREE, bounds

DIMENSIONS = ("tp", "pp", "dp", "cp", "ep", "vpp")
_ALIASES = {"vp": "vpp", "v": "vpp"}
_COMPONENT = re.compile(r"(vpp|vp|tp|pp|dp|cp|ep|v)\s*(?:=\s*)?([0-9]+)")
_SEPARATORS = re.compile(r"[\s/,x*]*")


@dataclass(frozen=True)
class Plan:
    tp: int
    pp: int
    dp: int
    cp: int
    ep: int
    virtual_stages: int | None  # None: not given, to be chosen

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp * self.cp


def parse_plan(text: str, gpus: int) -> Plan:
    lowered = text.strip().lower()
    if not lowered:
        raise InputError("empty --plan; expected e.g. TP8/PP4/DP8")
    found: dict[str, int] = {}
    pos = 0
    for match in _COMPONENT.finditer(lowered):
        _check_gap(text, lowered[pos : match.start()])
        dim = _ALIASES.get(match.group(1), match.group(1))
        digits = match.group(2)
        value = int(digits) if len(digits) <= len(str(MAX_DEGREE)) else MAX_DEGREE + 1
        if dim in found:
            raise InputError(f"plan '{text}' gives {dim.upper()} twice")
        lo, hi = bounds("virtual_stages" if dim == "vpp" else dim)  # the knob's own range
        if not lo <= value <= hi:
            shown = digits if len(digits) <= 12 else digits[:8] + "..."
            raise InputError(f"plan '{text}': {dim.upper()}{shown} must be between {lo} and {hi}")
        found[dim] = value
        pos = match.end()
    _check_gap(text, lowered[pos:])
    if not found:
        raise InputError(f"plan '{text}' names no dimension; expected e.g. TP8/PP4/DP8 (TP, PP, DP, CP, EP, VPP)")
    tp, pp, cp = found.get("tp", 1), found.get("pp", 1), found.get("cp", 1)
    if "dp" in found:
        dp = found["dp"]
    elif gpus % (tp * pp * cp):
        raise InputError(
            f"plan '{text}': TP*PP*CP = {tp * pp * cp} does not divide --gpus {gpus}, so DP cannot be inferred"
        )
    else:
        dp = gpus // (tp * pp * cp)
    plan = Plan(tp=tp, pp=pp, dp=dp, cp=cp, ep=found.get("ep", 1), virtual_stages=found.get("vpp"))
    if plan.gpus != gpus:
        raise InputError(
            f"plan '{text}' uses TP*PP*DP*CP = {tp}*{pp}*{dp}*{cp} = {plan.gpus} GPUs, but --gpus is {gpus}"
        )
    return plan


def _check_gap(text: str, gap: str) -> None:
    if not _SEPARATORS.fullmatch(gap):
        raise InputError(
            f"cannot read plan '{text}' at '{gap.strip()}'; expected components like TP8, PP4, DP8, "
            "CP2, EP8, VPP2 separated by '/', 'x', ',' or spaces"
        )

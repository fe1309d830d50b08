"""Sentences that say why a layout performs as it does, derived from its breakdown."""

from __future__ import annotations

from paraplan.cost_models.evaluate import TIME_TERMS, Evaluation
from paraplan.cost_models.layout import KNOBS, CpComm, Layout, Recompute
from paraplan.cost_models.pipeline import bubble_fraction
from paraplan.cost_models.units import GB, memory_text
from paraplan.hardware_specs.topology import group_link
from paraplan.units import fmt_seconds

_TERM_WORDS = {
    "compute": "GEMMs, attention and memory-bound kernels",
    "recompute": "recomputing activations",
    "tp_comm": "tensor-parallel collectives",
    "cp_comm": "context-parallel K/V exchange",
    "ep_comm": "expert-parallel all-to-all",
    "pp_comm": "pipeline point-to-point transfers",
    "dp_comm": "exposed data-parallel gradient reduction",
    "bubble": "pipeline bubble",
    "offload": "host transfers and the CPU optimizer step of offloading",
    "host_wait": "MoE layers waiting on the CPU (dropless dispatch syncs to the host every layer)",
}
NEAR_LIMIT = 0.03  # a memory margin below this share of capacity is flagged


def link_words(ev: Evaluation, i: int, term: str) -> str:
    """Which link a communication term runs on, e.g. ' over pcie_host at 9.6 GB/s'."""
    lay = ev.layouts.at(i)
    group = {
        "tp_comm": (lay.tp, 1),
        "cp_comm": (lay.cp, lay.tp),
        "ep_comm": (lay.ep, lay.tp),
        "dp_comm": (lay.dp * lay.cp, lay.tp),
    }.get(term)
    if group is None or group[0] <= 1:
        return ""
    link = group_link(ev.cluster, group[0], group[1])
    # the CP ring passes K/V between neighbours: its step runs at the slowest pair's rate
    ring = term == "cp_comm" and lay.cp_comm == CpComm.RING
    return f" over {link.kind} at {(link.pair_bw_bytes_per_s if ring else link.bw_bytes_per_s) / 1e9:.1f} GB/s"


def dominant_term(ev: Evaluation, i: int) -> tuple[str, float]:
    step = float(ev.step_time_s[i])
    term = max(TIME_TERMS, key=lambda t: float(ev.times[t][i]))
    return term, float(ev.times[term][i]) / step if step > 0 else 0.0


def bottleneck_sentence(ev: Evaluation, i: int) -> str:
    term, share = dominant_term(ev, i)
    sentence = f"{term}: {share:.0%} of the step is {_TERM_WORDS[term]}{link_words(ev, i, term)}"
    if term == "bubble":
        sentence += f" (bubble fraction {float(bubble_fraction(ev.layouts)[i]):.3f})"
    non_compute = [t for t in TIME_TERMS if t != "compute"]
    second = max(non_compute, key=lambda t: float(ev.times[t][i]))
    if term == "compute" and float(ev.times[second][i]) > 0:
        share2 = float(ev.times[second][i]) / float(ev.step_time_s[i])
        sentence += f"; next: {second} {share2:.0%}{link_words(ev, i, second)}"
    return sentence


def knob_words(lay: Layout) -> dict[str, str]:
    words = {name: spec.word(getattr(lay, name)) for name, spec in KNOBS.items()}
    words["gpus"] = f"{lay.gpus} GPUs"
    return words


def layout_difference(a: Layout, b: Layout) -> str:
    """'PP16 vs PP4, micro-batch 1 vs 2': the knobs where layout a differs from layout b. A
    setting that means nothing on one side is no difference: how CP exchanges K/V where either
    layout has no CP, how many layers full recompute covers unless both recompute in full."""
    wa, wb = knob_words(a), knob_words(b)
    moot: set[str] = set()
    if a.cp == 1 or b.cp == 1:
        moot.add("cp_comm")
    if not a.recompute == b.recompute == Recompute.FULL:
        moot.add("recompute_layers")
    return ", ".join(f"{wa[k]} vs {wb[k]}" for k in wa if wa[k] != wb[k] and k not in moot)


def distinct(a: float, b: float, digits: int = 2) -> tuple[str, str]:
    """a and b with the fewest significant digits (at least `digits`) that tell them apart."""
    for d in range(digits, 10):
        sa, sb = f"{a:.{d}g}", f"{b:.{d}g}"
        if sa != sb or a == b:
            return sa, sb
    return f"{a!r}", f"{b!r}"


def why_loses(best: Evaluation, b: int, ev: Evaluation, i: int, by_cost: bool = False) -> str:
    """One line: how much slower (or, ranking by cost, dearer) a runner-up is, which exposed
    cost grows most, and why."""
    step, best_step = float(ev.step_time_s[i]), float(best.step_time_s[b])
    diff = layout_difference(ev.layouts.at(i), best.layouts.at(b))
    if by_cost:
        # One hardware per table, so cost compares as GPU-seconds per step.
        cost = step * ev.layouts.at(i).gpus
        best_cost = best_step * best.layouts.at(b).gpus
        if cost > best_cost * (1 + 1e-9):
            return f"+{cost / best_cost - 1:.2%} cost per step ({diff})"
        if step > best_step * (1 + 1e-9):
            return f"same cost per step, {step / best_step - 1:+.2%} step time ({diff})"
    if step <= best_step * (1 + 1e-9):
        mine_gb, theirs_gb = float(ev.memory.total[i]) / 1e9, float(best.memory.total[b]) / 1e9
        if mine_gb > theirs_gb:
            return f"same step time, more memory: {mine_gb:.1f} vs {theirs_gb:.1f} GB ({diff})"
        # The tie-break prefers the simpler layout (search.py); the runner-up saves memory.
        return f"same step time, {mine_gb:.1f} vs {theirs_gb:.1f} GB, ranked after the simpler layout ({diff})"
    term = max(TIME_TERMS, key=lambda t: float(ev.times[t][i]) - float(best.times[t][b]))
    if term == "bubble":
        mine, theirs = distinct(float(bubble_fraction(ev.layouts)[i]), float(bubble_fraction(best.layouts)[b]))
        detail = f"bubble fraction {mine} vs {theirs}"
    else:
        detail = f"{term} {fmt_seconds(float(ev.times[term][i]))} vs {fmt_seconds(float(best.times[term][b]))}"
        if fmt_seconds(float(ev.times[term][i])) == fmt_seconds(float(best.times[term][b])):
            mine, theirs = distinct(float(ev.times[term][i]), float(best.times[term][b]), 3)
            detail = f"{term} {mine} s vs {theirs} s"
    gain = step / best_step - 1
    shown = f"{gain:.1%}" if gain >= 0.001 else f"{gain:.3%}"
    return f"+{shown} step time: {detail} ({diff})"


def binding_limits(ev: Evaluation, i: int) -> list[str]:
    """What holds the best layout back: memory left, TP at the node edge, the bubble."""
    lay = ev.layouts.at(i)
    total = float(ev.memory.total[i])
    margin = float(ev.memory_margin_bytes[i])
    near = (
        " -- NEAR THE LIMIT: allocator spikes may run out of memory" if margin < NEAR_LIMIT * ev.capacity_bytes else ""
    )
    out = [
        f"memory {total / GB:.1f} of {ev.usable_bytes / GB:.1f} GB usable, reserve "
        f"{float(ev.memory.other[i]) / GB:.1f} GB included ({memory_text(margin)} margin){near}"
    ]
    if lay.tp == ev.cluster.gpus_per_node:
        out.append(f"TP{lay.tp} fills the {ev.cluster.gpus_per_node}-GPU node: more TP would cross the network")
    if lay.pp > 1:
        share = float(ev.times["bubble"][i]) / float(ev.step_time_s[i])
        out.append(f"pipeline bubble {float(bubble_fraction(ev.layouts)[i]):.3f} of the work, {share:.1%} of the step")
    return out

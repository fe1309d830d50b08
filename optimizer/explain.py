"""Sentences that say why a layout performs as it does, derived from its breakdown."""

from __future__ import annotations

from cost_models.evaluate import TIME_TERMS, Evaluation
from cost_models.pipeline import bubble_fraction
from hardware_specs.topology import group_link

_TERM_WORDS = {
    "compute": "GEMMs, attention and memory-bound kernels",
    "recompute": "recomputing activations",
    "tp_comm": "tensor-parallel collectives",
    "cp_comm": "context-parallel K/V exchange",
    "ep_comm": "expert-parallel all-to-all",
    "pp_comm": "pipeline point-to-point transfers",
    "dp_comm": "exposed data-parallel gradient reduction",
    "bubble": "pipeline bubble",
}


def link_words(ev: Evaluation, i: int, term: str) -> str:
    """Which link a communication term runs on, e.g. ' over pcie_host at 9.6 GB/s'."""
    lay = ev.layouts.at(i)
    group = {
        "tp_comm": (lay.tp, 1),
        "cp_comm": (lay.cp, lay.tp),
        "ep_comm": (lay.ep, lay.tp * lay.cp),
        "dp_comm": (lay.dp * lay.cp, lay.tp),
    }.get(term)
    if group is None or group[0] <= 1:
        return ""
    link = group_link(ev.cluster, group[0], group[1])
    return f" over {link.kind} at {link.bw_bytes_per_s / 1e9:.1f} GB/s"


def dominant_term(ev: Evaluation, i: int) -> tuple[str, float]:
    step = float(ev.step_time_s[i])
    term = max(TIME_TERMS, key=lambda t: float(ev.times[t][i]))
    return term, float(ev.times[term][i]) / step if step > 0 else 0.0


def bottleneck_sentence(ev: Evaluation, i: int) -> str:
    term, share = dominant_term(ev, i)
    sentence = f"{term}: {share:.0%} of the step is {_TERM_WORDS[term]}{link_words(ev, i, term)}"
    if term == "bubble":
        sentence += f" (bubble fraction {float(bubble_fraction(ev.layouts)[i]):.2f})"
    non_compute = [t for t in TIME_TERMS if t != "compute"]
    second = max(non_compute, key=lambda t: float(ev.times[t][i]))
    if term == "compute" and float(ev.times[second][i]) > 0:
        share2 = float(ev.times[second][i]) / float(ev.step_time_s[i])
        sentence += f"; next: {second} {share2:.0%}{link_words(ev, i, second)}"
    return sentence

"""Deterministic orderings of evaluated candidates.

Best first: lower step time, then less memory, then the simpler layout (smaller TP, PP, CP,
EP, fewer virtual stages, larger micro-batch, less recompute, lower ZeRO stage, no sequence
parallelism) so that equal-time ties always resolve the same way.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from paraplan.cost_models.evaluate import Evaluation

IndexArray = npt.NDArray[np.int64]


def order_keys(ev: Evaluation) -> list[npt.NDArray[np.generic]]:
    lay = ev.layouts
    # Step times equal to 1e-12 relative are ties (floating-point noise across layouts).
    step = np.round(ev.step_time_s / np.max(ev.step_time_s[np.isfinite(ev.step_time_s)], initial=1.0), 12)
    return [step, ev.memory.total, lay.tp, lay.pp, lay.cp, lay.ep, lay.virtual_stages,
            -lay.micro_batch, lay.recompute, lay.recompute_layers, lay.zero,
            lay.sequence_parallel.astype(np.int64)]


def ranking_keys(
    objective: npt.NDArray[np.float64], step: npt.NDArray[np.float64], tiebreak: list[npt.NDArray[np.generic]],
    by_cost: bool,
) -> list[npt.NDArray[np.generic]]:
    """Lexicographic keys over candidates of one or several GPU counts, best first: the
    objective (values within 1e-12 relative are ties), then for the cost objective the step
    time (at equal cost, the faster), then the tie-break keys of `order_keys`."""

    def tied(values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
        finite = values[np.isfinite(values)]
        return np.asarray(np.round(values / np.max(finite, initial=1.0), 12))

    keys: list[npt.NDArray[np.generic]] = [tied(objective)]
    if by_cost:
        keys.append(tied(step))
    return keys + tiebreak


def ranked(ev: Evaluation, mask: npt.NDArray[np.bool_] | None = None) -> IndexArray:
    """Indices of the candidates in `mask` (default: all feasible), best first."""
    keep = ev.feasible if mask is None else mask
    keys = order_keys(ev)
    order = np.lexsort(keys[::-1])
    return np.asarray(order[keep[order]], dtype=np.int64)


def closest(ev: Evaluation) -> int:
    """The candidate that comes closest to feasible: fewest violated limits other than memory,
    then the smallest memory overflow, then the fastest."""
    structural = np.zeros(len(ev.layouts), dtype=np.int64)
    for name, mask in ev.checks.items():
        if name != "memory":
            structural += mask
    order = np.lexsort((ev.step_time_s, ev.memory_overflow_bytes, structural))
    return int(order[0])

"""Evaluation rows to the result models of `paraplan.results`, built directly (no dicts)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from paraplan.accuracy import error_bar
from paraplan.cost_models.evaluate import TIME_TERMS, Evaluation
from paraplan.cost_models.layout import Layout
from paraplan.cost_models.memory import MEMORY_TERMS
from paraplan.cost_models.stages import stage_layers
from paraplan.cost_models.units import SECONDS_PER_HOUR
from paraplan.explain import NEAR_LIMIT, bottleneck_sentence, dominant_term
from paraplan.results import (
    BottleneckOut,
    EvaluatedLayout,
    MemoryOut,
    ParamsOut,
    StageOut,
    TimeOut,
)
from paraplan.search import train_time_s, violations


def evaluated(
    ev: Evaluation,
    i: int,
    *,
    tokens: float | None = None,
    usd_per_gpu_hour: float | None = None,
    equivalent: Sequence[int] = (),
) -> EvaluatedLayout:
    """Candidate i of an evaluation as the contract's evaluated-layout object."""
    equivalent_layouts = [ev.layouts.at(int(j)) for j in equivalent]
    ev, i = ev.take(np.array([i])), 0  # every figure below is of this one row
    lay = ev.layouts.at(i)
    step = float(ev.step_time_s[i])
    memory = {t: float(getattr(ev.memory, t)[i]) for t in MEMORY_TERMS}
    host = float(ev.host_bytes[i])
    bar = error_bar(
        ev.cluster.gpu_family,
        str(lay.precision),
        str(lay.framework),
        lay.gpus,
        ev.model.num_experts > 1,
        ev.cluster.name,
    )
    term, share = dominant_term(ev, i)
    margin = float(ev.memory_margin_bytes[i])
    cost_per_step = step * lay.gpus * usd_per_gpu_hour / SECONDS_PER_HOUR if usd_per_gpu_hour is not None else None
    train = float(train_time_s(ev.take(np.array([i])), tokens)[0]) if tokens else None
    return EvaluatedLayout(
        model=ev.model.name,
        hardware=ev.cluster.name,
        gpus=lay.gpus,
        layout=lay,
        feasible=bool(ev.feasible[i]),
        violations=violations(ev, i),
        memory_bytes=MemoryOut(
            **memory, total=float(ev.memory.total[i]), capacity=ev.capacity_bytes, host_bytes_per_gpu=host
        ),
        memory_margin_bytes=margin,
        near_memory_limit=margin < NEAR_LIMIT * ev.capacity_bytes,
        step_time_s=step,
        step_time_range_s=(step * bar.low_factor, step * bar.high_factor),
        accuracy_basis=bar.words,
        time_s=TimeOut(**{t: float(ev.times[t][i]) for t in TIME_TERMS}),
        mfu=float(ev.mfu[i]),
        mfu_palm=float(ev.mfu_palm[i]),
        hfu=float(ev.hfu[i]),
        peak_flops=float(ev.peak_flops[i]),
        tflops_per_gpu=float(ev.tflops_per_gpu[i]),
        tokens_per_s=float(ev.tokens_per_s[i]),
        params=ParamsOut(
            total=ev.model.total_params, active=ev.model.active_params, mtp=ev.model.mtp_params if ev.stack.mtp else 0
        ),
        bottleneck=BottleneckOut(term=term, share=min(max(share, 0.0), 1.0), explanation=bottleneck_sentence(ev, i)),
        cost_usd_per_step=cost_per_step,
        train_time_s=train,
        cost_usd=train * lay.gpus * usd_per_gpu_hour / SECONDS_PER_HOUR
        if train is not None and usd_per_gpu_hour is not None
        else None,
        stages=_uneven_stages(ev, lay),
        equivalent=equivalent_layouts,
    )


def _uneven_stages(ev: Evaluation, lay: Layout) -> list[StageOut] | None:
    """The per-stage split of an uneven layout (first and last stages lighter), else None."""
    if lay.pp == 1 or not (lay.first_stage_layers or lay.last_stage_layers):
        return None
    first, middle, last = (int(x[0]) for x in stage_layers(ev.model, ev.layouts))
    counts = [first, *([middle] * (lay.pp - 2)), last]
    return [StageOut(hardware=ev.cluster.name, gpus_per_replica=lay.tp * lay.cp, tp=lay.tp, layers=n) for n in counts]

"""Pipeline schedule: bubble and step assembly.

1F1B (Narayanan et al. 2021, Sec 2.2.1): with p stages and m micro-batches per step, every stage
idles for (p-1) micro-batch slots, a bubble fraction of (p-1)/m of the useful time. The
interleaved schedule with v model chunks per GPU shrinks the slot to 1/v: (p-1)/(v*m)
(Sec 2.2.2), at the price of v times more point-to-point transfers. The slot is the slowest
stage's forward + backward time of one micro-batch, communication included.
"""

from __future__ import annotations

import numpy as np

from paraplan.cost_models.candidates import FloatArray, Layouts


def bubble_fraction(lay: Layouts) -> FloatArray:
    m = np.maximum(lay.num_micro_batches, 1.0)
    return np.asarray((lay.pp - 1) / (lay.virtual_stages * m))


def bubble_s(lay: Layouts, micro_batch_slot_s: FloatArray) -> FloatArray:
    return np.asarray((lay.pp - 1) / lay.virtual_stages * micro_batch_slot_s)


def combined_1f1b_share(lay: Layouts) -> FloatArray:
    """The share of a GPU's forward passes (per micro-batch and model chunk) that Megatron-LM's
    combined 1F1B (`Stack.moe_a2a_overlap`) runs beside another micro-batch's backward: only the
    steady state pairs them; warmup forwards and cooldown backwards run alone.

    Megatron-LM d98e8a64 megatron/core/pipeline_parallel/schedules.py `get_pp_rank_microbatches`:
    of the m*v forward passes of the interleaved schedule, pipeline rank r warms up with
    2(p - r - 1) + (v - 1) * g + 1 of them (g = microbatch_group_size_per_vp_stage, which
    model_parallel_config.py defaults to p; the + 1 is the extra forward that the overlap
    schedules "to ensure the forward and backward computations are independent"), all of them
    when that is m*v or more; the rest are paired. Rank 0, which warms up longest, runs from the
    step's first forward to its last backward, so its count is taken. Without pipelining
    (combined_1f1b.py `combined_1f1b_schedule_for_no_pipelining`) the first micro-batch's forward
    and the last one's backward run alone: m - 1 of m are paired."""
    m = np.maximum(lay.num_micro_batches, 1.0)
    p = lay.pp.astype(np.float64)
    v = lay.virtual_stages.astype(np.float64)
    total = m * v
    warmup = np.where(lay.pp > 1, 2.0 * (p - 1.0) + (v - 1.0) * p + 1.0, 1.0)
    return np.asarray(np.clip(total - warmup, 0.0, None) / total)

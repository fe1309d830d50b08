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

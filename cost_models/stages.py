"""How a model's layers split over the pipeline stages: the first, a middle and the last stage.

Even split (`first_stage_layers = last_stage_layers = 0`): every GPU holds v chunks of
ceil(l / (p v)) layers at most; the slowest stage carries the rounded-up share (Megatron-LM
requires l to divide evenly, a framework rule in `limits`; torchtitan and DeepSpeed split
unevenly on their own).

Uneven split (Megatron-LM's --decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-
layers, or --account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split with
virtual stages; torchtitan's per-stage module lists): f layers on the first stage and l on the
last, the rest evenly over the p - 2 middle stages. Llama 3 405B ran 126 layers on PP16 with one
layer fewer on the first and last stages (Dubey et al. 2024, Sec 3.3.2): 7 + 14 x 8 + 7. NeMo's
recipes count the embedding and the loss as one layer each: 30 layers on PP4 x VPP8 make
32 chunks of one layer, the first and last holding the embedding and the loss instead.

`split_options` gives the splits the search tries for a layout: the even split, and for a single
chunk per GPU first/last stages up to 3 layers lighter than ceil(l/p) (the first stage holds the
most micro-batches in flight, the last the LM head and loss), the middle stages taking the rest
evenly; for interleaved stages, the embedding-and-loss accounting when l + 2 (or l + 1) divides
into p v chunks, and where neither that nor an equal count per rank (p dividing l) exists, one of
the lighter first/last stages as for one chunk (of those whose most loaded rank is lightest, the
one with the lightest last stage; each rank holding at least a layer per chunk; Megatron-LM
takes such a split as --pipeline-model-parallel-layout).

`chunk_layers` spells a split out chunk by chunk, as the model prices it: each rank's layers in
the most even integer shares over its v chunks (what a launch configuration must reproduce).
"""

from __future__ import annotations

import numpy as np

from paraplan.cost_models.candidates import FloatArray, IntArray, Layouts
from paraplan.cost_models.models import ModelSpec

MAX_LIGHTER = 3  # first/last stages at most this many layers lighter than ceil(l / p)


def stage_layers(model: ModelSpec, lay: Layouts) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(first, middle, last): layers on a GPU of the first stage, of a middle stage (the most
    loaded; 0 without one) and of the last stage. Computed once per table and layer count (an
    evaluation asks three times)."""
    first, middle, last = lay.memo(("stage_layers", model.num_layers), lambda: np.stack(_stage_layers(model, lay)))
    return np.asarray(first, dtype=np.float64), np.asarray(middle, dtype=np.float64), np.asarray(last, dtype=np.float64)


def _stage_layers(model: ModelSpec, lay: Layouts) -> tuple[FloatArray, FloatArray, FloatArray]:
    """A split that `split_valid` rejects (an infeasible layout, reported as such) is priced as the
    even split: its own counts would leave layers on no stage, and a step without them is no
    estimate of anything (it read as an MFU above 1)."""
    p = lay.floats("pp")
    v = lay.floats("virtual_stages")
    even = np.ceil(model.num_layers / (p * v)) * v
    uneven = ((lay.first_stage_layers > 0) | (lay.last_stage_layers > 0)) & (split_valid(model, lay) == 1)
    f = np.where(uneven, lay.first_stage_layers, even)
    last = np.where(uneven, lay.last_stage_layers, even)
    rest = model.num_layers - f - last
    middle_uneven = np.where(p > 2, np.ceil(np.maximum(rest, 0.0) / np.maximum(p - 2.0, 1.0)), 0.0)
    middle = np.where(uneven, middle_uneven, np.where(p > 2, even, 0.0))
    single = lay.pp == 1
    all_layers = float(model.num_layers)
    return (
        np.asarray(np.where(single, all_layers, f)),
        np.asarray(np.where(single, 0.0, middle)),
        np.asarray(np.where(single, all_layers, last)),
    )


def most_layers(model: ModelSpec, lay: Layouts) -> FloatArray:
    """Layers on the most loaded GPU of the pipeline."""
    first, middle, last = stage_layers(model, lay)
    return np.asarray(np.maximum(np.maximum(first, middle), last))


def split_options(model: ModelSpec, pp: int, virtual_stages: int) -> list[tuple[int, int]]:
    """(first, last) layer counts to try for a pipeline of pp stages; (0, 0) is the even split."""
    layers = model.num_layers
    options = [(0, 0)]
    if pp == 1:
        return options
    if virtual_stages > 1:
        for extra, (f_less, l_less) in ((2, (1, 1)), (1, (0, 1))):
            if (layers + extra) % (pp * virtual_stages) == 0:
                share = (layers + extra) // pp
                options.append((share - f_less, share - l_less))
        if len(options) > 1 or layers % pp == 0:
            return options
        # No chunk-aligned split, and the ranks cannot hold equal layer counts (where they can, a
        # v that does not divide a rank's count is a poor choice, not tried). Of the lighter
        # first/last stages below (each rank holding a layer per chunk at least) whose most loaded
        # rank is lightest, the one with the lightest last stage, which also holds the LM head,
        # the loss and any MTP modules (DeepSeek-V3's 61 layers on PP8 x VPP2 ran as 8 + 6 x 8 +
        # 5). Every lighter pair, as for one chunk, would multiply the interleaved space, already
        # the largest (DeepSeek-V3 on 512 GPUs: 0.30M candidates without these splits, 0.70M with
        # this one, 1.10M with the lightest first too).
        uneven = _lighter_ends(layers, pp, virtual_stages)
        if uneven:
            heaviest = min(max(f, last, _middle(layers, pp, f, last)) for f, last in uneven)
            best = [(f, last) for f, last in uneven if max(f, last, _middle(layers, pp, f, last)) == heaviest]
            options.append(min(best, key=lambda fl: (fl[1], fl[0])))
        return options
    return options + _lighter_ends(layers, pp, 1)


def _middle(layers: int, pp: int, first: int, last: int) -> int:
    return (layers - first - last) // (pp - 2) if pp > 2 else 0


def _lighter_ends(layers: int, pp: int, virtual_stages: int) -> list[tuple[int, int]]:
    """(first, last) with each at most MAX_LIGHTER layers under ceil(l / p), the middle stages
    taking the rest evenly and at least as many, and each end a layer per virtual stage at least."""
    options: list[tuple[int, int]] = []
    ceil = -(-layers // pp)
    for f in range(max(1, ceil - MAX_LIGHTER), ceil + 1):
        for last in range(max(1, ceil - MAX_LIGHTER), ceil + 1):
            rest = layers - f - last
            if pp == 2 and rest != 0:
                continue
            if pp > 2 and (rest <= 0 or rest % (pp - 2) or rest // (pp - 2) < max(f, last)):
                continue
            if pp > 2 and f == last == rest // (pp - 2):
                continue  # that is the even split
            if min(f, last) < virtual_stages:
                continue
            if pp == 2 and f == last:
                continue
            options.append((f, last))
    return options


def completed_end(num_layers: int, pp: IntArray | int, given: int) -> IntArray:
    """The other end's layer count when only one of the first/last stage counts is given: Megatron-
    Core's rule (d98e8a64, megatron/core/transformer/transformer_block.py `get_num_layers_to_build`:
    each given end leaves the pipeline, and the layers left are divided over the stages left, the
    other end among them; TransformerConfig asserts they divide). 0 where they cannot be, which
    `split_valid` rejects: PP 1, a given end outside 1..layers - 1, or a rest that PP - 1 stages do
    not divide."""
    pp = np.asarray(pp)
    if not 0 < given < num_layers:  # also keeps a file's count beyond int64 out of the array arithmetic
        return np.zeros(pp.shape, dtype=np.int64)
    rest = num_layers - given
    others = np.maximum(pp - 1, 1)
    return np.asarray(np.where((pp > 1) & (rest % others == 0), rest // others, 0), dtype=np.int64)


def split_valid(model: ModelSpec, lay: Layouts) -> IntArray:
    """1 where the layout's first/last counts describe a split of the model's layers."""
    f, last, p = lay.first_stage_layers, lay.last_stage_layers, lay.pp
    uneven = (f > 0) | (last > 0)
    rest = model.num_layers - f - last
    ok_two = (p == 2) & (rest == 0) & (f > 0) & (last > 0)
    ok_many = (p > 2) & (rest > 0) & (f > 0) & (last > 0) & (rest % np.maximum(p - 2, 1) == 0)
    return np.asarray((~uneven | ok_two | ok_many).astype(np.int64))


def chunk_layers(num_layers: int, pp: int, virtual_stages: int, first: int, last: int) -> list[list[int]]:
    """Layers of each model chunk, `[rank][virtual stage]`, of a split that `split_valid` accepts
    (`first = last = 0`: the even split, which must then divide into pp x v chunks).

    The rank totals are `stage_layers`'s: first, (layers - first - last) / (pp - 2) on each middle
    rank, last. Within a rank the model prices an even share per chunk (`evaluate` takes a chunk as
    `most_layers / v`, the interleaved bubble (p - 1) / v of a stage's slot, `memory` the rank's
    layers x micro-batches in flight), so a total that v does not divide is split as evenly as
    integers go: the chunks differ by one layer at most. Which chunks take the extra layer does not
    change the price; they are put away from the chunks that hold more than layers: on the first
    rank the later chunks (its first chunk holds the embedding), on the other ranks the earlier
    ones (the last rank's final chunk holds the loss and any MTP modules; the middle ranks follow
    it). With pp = 1 the one rank holds everything, split as the last rank."""
    v = virtual_stages
    if pp < 1 or v < 1 or (pp == 1 and (first or last)):
        raise ValueError(f"no split of {num_layers} layers: PP {pp}, {v} virtual stages, first {first}, last {last}")
    if first or last:
        rest = num_layers - first - last
        middle = rest // (pp - 2) if pp > 2 else 0
        if first <= 0 or last <= 0 or rest < 0 or (pp == 2 and rest) or (pp > 2 and (rest % (pp - 2) or rest <= 0)):
            raise ValueError(f"first {first} / last {last} layers do not split {num_layers} layers over PP {pp}")
        totals = [first, *([middle] * (pp - 2)), last]
    else:
        if num_layers % (pp * v):
            raise ValueError(f"{num_layers} layers do not split evenly into PP {pp} x {v} virtual stages")
        totals = [num_layers // pp] * pp
    out = []
    for rank, total in enumerate(totals):
        share, extra = divmod(total, v)
        heavy = [share + 1] * extra
        light = [share] * (v - extra)
        out.append(light + heavy if rank == 0 and pp > 1 else heavy + light)
    return out

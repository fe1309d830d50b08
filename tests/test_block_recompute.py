"""Block recompute (Megatron-LM --recompute-method block --recompute-num-layers N: full recompute
of the first N layers of every model chunk), by hand."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conftest import gpt_spec, one

from paraplan.cost_models.evaluate import evaluate
from paraplan.cost_models.memory import peak_memory
from paraplan.cost_models.stack import Stack
from paraplan.hardware_specs.schema import Cluster


@pytest.mark.parametrize(
    ("knobs", "share"),
    [
        # 8 layers on PP2 x VPP2: chunks of 8 / 4 = 2 layers
        ({"recompute": "full", "recompute_layers": 1}, 0.5),
        ({"recompute": "full", "recompute_layers": 2}, 1.0),
        # N beyond the chunk is every layer of it
        ({"recompute": "full", "recompute_layers": 5}, 1.0),
        # 0 = all layers
        ({"recompute": "full", "recompute_layers": 0}, 1.0),
        ({"recompute": "none"}, 0.0),
        ({"recompute": "selective"}, 0.0),
    ],
)
def test_share_of_layers_recomputed(knobs: dict[str, Any], share: float) -> None:
    lay = one(pp=2, virtual_stages=2, **knobs)
    assert float(lay.full_recompute_share(8)[0]) == share


@pytest.mark.parametrize(
    ("blocks", "per_ht"),
    [
        # GPT (dropout), 8 layers, one stage, TP1, one micro-batch of T = 2048 tokens, flash.
        # N layers keep their 2h input, 8 - N keep 34h (Korthikanti et al. 2022 without the
        # scores), the rest of one layer (34h less the 2h input it already keeps) while it is
        # recomputed, the embedding's dropout mask h, the LM head's saved input 2h:
        (1, 1 * 2 + 7 * 34 + 32 + 1 + 2),  # 275
        (3, 3 * 2 + 5 * 34 + 32 + 1 + 2),  # 211
        (8, 8 * 2 + 0 * 34 + 32 + 1 + 2),  # 51
    ],
)
def test_block_recompute_memory_by_hand(blocks: int, per_ht: int) -> None:
    # activations = per_ht x h T + Megatron's loss (bf16 logits 2 B and one fp32 copy 4 B turned in
    # place into the softmax) 6 V T; h T = 2,097,152, 6 V T = 614,400,000.
    # E.g. N = 3: 211 * 2,097,152 + 614,400,000 = 1,056,899,072
    model = gpt_spec(h=1024, layers=8, vocab=50_000, seq=2048)
    lay = one(seq_len=2048, global_batch=1, recompute="full", recompute_layers=blocks)
    got = float(peak_memory(model, lay, Stack(), 0.0).activations[0])
    assert got == per_ht * 2_097_152 + 614_400_000


def test_block_recompute_time_is_its_share_of_full(dgx: Cluster) -> None:
    # 2 of 8 layers recomputed: a quarter of full recompute's extra forward, whatever it costs
    model = gpt_spec(h=1024, layers=8)

    def recompute_s(**knobs: object) -> float:
        lay = one(seq_len=2048, global_batch=8, recompute="full", **knobs)
        return float(evaluate(model, dgx, lay, Stack()).times["recompute"][0])

    assert recompute_s(recompute_layers=2) == pytest.approx(recompute_s() / 4, rel=1e-12)
    assert recompute_s(recompute_layers=2) > 0


def test_the_block_method_trades_memory_for_time(dgx: Cluster) -> None:
    # more layers recomputed: less memory, more time (a GPT of 8 layers, 4 micro-batches)
    model = gpt_spec(h=1024, layers=8)
    lays = [one(seq_len=2048, global_batch=4, recompute="full", recompute_layers=n) for n in (1, 2, 4, 0)]
    evs = [evaluate(model, dgx, lay, Stack()) for lay in lays]
    memory = np.array([float(ev.memory.total[0]) for ev in evs])
    time = np.array([float(ev.step_time_s[0]) for ev in evs])
    assert (np.diff(memory) < 0).all() and (np.diff(time) > 0).all()

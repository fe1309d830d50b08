"""Block recompute (Megatron --recompute-method block --recompute-num-layers N), by hand."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import gpt_spec, one

from paraplan.cost_models.compute import micro_batch_times
from paraplan.cost_models.flops import recompute_flops_per_step
from paraplan.cost_models.memory import activation_bytes, layers_per_stage
from paraplan.cost_models.stack import Stack
from paraplan.hardware_specs.loader import load_cluster
from paraplan.emit import megatron_args

STACK = Stack(flash_attention=True)


def test_activations_mix_stored_and_recomputed_layers() -> None:
    # GPT-style, 8 layers, TP1, no PP, micro-batch 1, s = 2048 (tokens T = 2048), flash attention.
    # Stored layer: 34*h bytes/token (Korthikanti, no s^2 term with flash); recomputed layer: 2h.
    # N = 3 of 8 recomputed: (3*2h + 5*34h)*T, plus one full layer while it is recomputed,
    # plus the embedding's dropout mask h*T (first stage) and the fp32 logits 4*V*T (last).
    h, layers, vocab, seq = 1024, 8, 50_000, 2048
    model = gpt_spec(h=h, layers=layers, vocab=vocab, seq=seq)
    lay = one(seq_len=seq, micro_batch=1, global_batch=1, recompute="full", recompute_layers=3,
              sequence_parallel=False, zero=0)
    got = float(activation_bytes(model, lay, STACK, first=True, last=True)[0])
    expected = (3 * 2 * h + 5 * 34 * h) * seq + 34 * h * seq + h * seq + 4 * vocab * seq
    assert got == pytest.approx(expected, rel=1e-12)


def test_recompute_time_and_flops_scale_with_the_share() -> None:
    model = gpt_spec(h=1024, layers=8)
    cluster = load_cluster("a100-80g")
    full = one(seq_len=2048, global_batch=8, recompute="full", recompute_layers=0)
    block = one(seq_len=2048, global_batch=8, recompute="full", recompute_layers=2)
    t_full = micro_batch_times(model, full, cluster, STACK, layers_per_stage(model, full)).recompute_s[0]
    t_block = micro_batch_times(model, block, cluster, STACK, layers_per_stage(model, block)).recompute_s[0]
    assert t_block == pytest.approx(t_full * 2 / 8, rel=1e-12)
    f_full = recompute_flops_per_step(model, full, STACK)[0]
    f_block = recompute_flops_per_step(model, block, STACK)[0]
    assert f_block == pytest.approx(f_full * 2 / 8, rel=1e-12)


def test_blocks_beyond_the_chunk_mean_all_layers() -> None:
    # 8 layers on PP2 x VPP2: chunks of 2 layers; N = 5 covers every layer of a chunk.
    lay = one(pp=2, virtual_stages=2, recompute="full", recompute_layers=5)
    assert np.all(lay.full_recompute_share(8) == 1.0)
    assert np.all(one(recompute="none", recompute_layers=0).full_recompute_share(8) == 0.0)


def test_megatron_args_name_the_block_method() -> None:
    from paraplan.cost_models.layout import Layout

    args = megatron_args(gpt_spec(layers=8), Layout(recompute="full", recompute_layers=2))
    assert "--recompute-method block" in args and "--recompute-num-layers 2" in args

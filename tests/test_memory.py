"""Memory of the most loaded GPU: model states under ZeRO, activations per Korthikanti et al.
2022 (and its generalisation to GQA / gated MLPs / MoE), pipeline in-flight micro-batches."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import gpt_spec, one

from paraplan.cost_models.memory import (
    MEMORY_TERMS,
    activation_bytes,
    activation_bytes_per_token_layer,
    in_flight_micro_batches,
    layers_per_stage,
    peak_memory,
    stage_memory,
    stage_params,
)
from paraplan.cost_models.models import load_model
from paraplan.cost_models.stack import Stack

NO_FLASH = Stack(flash_attention=False)
FLASH = Stack()
RESERVE = 2.5e9

LLAMA2_7B_N = 6_738_415_616
# llama2-7b layer: attention 4*4096^2 = 67,108,864 + MLP 3*4096*11008 = 135,266,304 + norms 8,192
LLAMA2_7B_LAYER = 202_383_360
LLAMA2_70B_N = 68_976_648_192


# ------------------------------------------------------------------ llama2-70b on one GPU


def _llama70_one_gpu(stack: Stack = FLASH) -> dict[str, float]:
    """llama2-70b on 1 GPU: TP1/PP1/DP1, micro-batch 8 (m=1), seq 4096, no recompute, ZeRO-0."""
    model = load_model("llama2-70b")
    lay = one(tp=1, pp=1, dp=1, micro_batch=8, global_batch=8, seq_len=4096, recompute="none", zero=0)
    mem = peak_memory(model, lay, stack, RESERVE)
    return {t: float(getattr(mem, t)[0]) for t in (*MEMORY_TERMS, "total")}


def test_llama2_70b_model_states() -> None:
    # bf16 weights 2N, fp32 main grads 4N, Adam (fp32 master + m + v) 12N; N = 68,976,648,192
    mem = _llama70_one_gpu()
    assert mem["params"] == pytest.approx(2 * LLAMA2_70B_N, rel=1e-12)
    assert mem["grads"] == pytest.approx(4 * LLAMA2_70B_N, rel=1e-12)
    assert mem["optimizer"] == pytest.approx(12 * LLAMA2_70B_N, rel=1e-12)
    assert mem["other"] == RESERVE


def test_llama2_70b_bf16_grads() -> None:
    # DeepSpeed convention: gradients in bf16, 2 bytes per parameter
    mem = _llama70_one_gpu(stack=Stack(main_grads="bf16"))
    assert mem["grads"] == pytest.approx(2 * LLAMA2_70B_N, rel=1e-12)


def test_llama2_70b_activations_by_hand() -> None:
    # per token per layer (flash attention, no dropout, TP1):
    #   replicated 8h (2 norm inputs 4h, QKV and MLP inputs 4h) = 65,536
    #   Q + attention output 4*q_dim = 32,768; K, V 4*kv_dim = 4,096; gated MLP 6f = 172,032
    #   => 274,432 bytes = 33.5 h
    # x s*b*L = 4096*8*80 = 2,621,440 tokens*layers  => 719,407,022,080
    # + fp32 logits 4*V*s*b = 4*32000*32768 = 4,194,304,000   => 723,601,326,080 (~7.2e11)
    mem = _llama70_one_gpu()
    assert 274_432 == 33.5 * 8192
    assert mem["activations"] == pytest.approx(274_432 * 4096 * 8 * 80 + 4 * 32000 * 4096 * 8, rel=1e-12)
    assert mem["activations"] == pytest.approx(7.236e11, rel=1e-3)


def test_breakdown_sums_to_total() -> None:
    mem = _llama70_one_gpu()
    assert mem["total"] == pytest.approx(sum(mem[t] for t in MEMORY_TERMS), rel=1e-15)


# ------------------------------------------------------------------ Korthikanti's GPT table

H, A, S, B = 1024, 16, 2048, 2  # a*s/h = 32


def _gpt_per_layer(**kw: object) -> float:
    """Activation bytes of one GPT layer for one micro-batch (s*b tokens)."""
    stack = kw.pop("stack", NO_FLASH)
    lay = one(micro_batch=B, seq_len=S, **kw)  # type: ignore[arg-type]
    per_token = activation_bytes_per_token_layer(gpt_spec(h=H, heads=A, seq=S), lay, stack)  # type: ignore[arg-type]
    return float(per_token[0]) * S * B


def test_korthikanti_no_parallelism() -> None:
    # Korthikanti eq. 1: s*b*h*(34 + 5*a*s/h) per layer
    assert _gpt_per_layer(recompute="none") == pytest.approx(S * B * H * (34 + 5 * A * S / H), rel=1e-12)


def test_korthikanti_selective_recompute() -> None:
    # Sec 4.2: the attention core (5as/h term) is recomputed: 34 sbh remain
    assert _gpt_per_layer(recompute="selective") == pytest.approx(34 * S * B * H, rel=1e-12)


def test_flash_attention_never_stores_scores() -> None:
    assert _gpt_per_layer(recompute="none", stack=FLASH) == pytest.approx(34 * S * B * H, rel=1e-12)


@pytest.mark.parametrize("t", [2, 4, 8])
def test_korthikanti_tensor_parallel_without_sp(t: int) -> None:
    # eq. 2: sbh*(10 + 24/t + 5as/(ht))
    got = _gpt_per_layer(recompute="none", tp=t, sequence_parallel=False)
    assert got == pytest.approx(S * B * H * (10 + 24 / t + 5 * A * S / (H * t)), rel=1e-12)


@pytest.mark.parametrize("t", [2, 4, 8])
def test_korthikanti_tensor_and_sequence_parallel(t: int) -> None:
    # eq. 4: sbh/t * (34 + 5as/h); selective: 34 sbh / t
    got = _gpt_per_layer(recompute="none", tp=t, sequence_parallel=True)
    assert got == pytest.approx(S * B * H / t * (34 + 5 * A * S / H), rel=1e-12)
    sel = _gpt_per_layer(recompute="selective", tp=t, sequence_parallel=True)
    assert sel == pytest.approx(34 * S * B * H / t, rel=1e-12)


def test_full_recompute_keeps_layer_inputs() -> None:
    # Full recompute stores each layer's 2sbh input; split over t with sequence parallelism only
    assert _gpt_per_layer(recompute="full") == pytest.approx(2 * S * B * H, rel=1e-12)
    assert _gpt_per_layer(recompute="full", tp=4, sequence_parallel=True) == pytest.approx(2 * S * B * H / 4)
    assert _gpt_per_layer(recompute="full", tp=4, sequence_parallel=False) == pytest.approx(2 * S * B * H)


def test_full_recompute_stage_total_by_hand() -> None:
    # pp=1, t=4 with SP, L=4 layers, V=50,000, m=1 micro-batch of b=2, s=2048, no flash:
    #   stored inputs        L * 2sbh/t
    #   one layer recomputed sbh/t * (34 + 5as/h)
    #   embedding dropout    sbh/t (1-byte mask)
    #   fp32 logits          4 V s b / t
    t, L, V = 4, 4, 50_000
    model = gpt_spec(h=H, layers=L, heads=A, vocab=V, seq=S)
    lay = one(tp=t, micro_batch=B, global_batch=B, seq_len=S, recompute="full", sequence_parallel=True)
    sbh = S * B * H
    expected = L * 2 * sbh / t + sbh / t * (34 + 5 * A * S / H) + sbh / t + 4 * V * S * B / t
    assert activation_bytes(model, lay, NO_FLASH, True, True)[0] == pytest.approx(expected, rel=1e-12)


def test_gqa_and_gated_mlp_generalisation() -> None:
    # llama2-70b, TP8 + SP, selective, flash: (8h + 4q + 4kv + 6f) / 8 per token per layer
    model = load_model("llama2-70b")
    lay = one(tp=8, sequence_parallel=True, recompute="selective")
    expected = (8 * 8192 + 4 * 8192 + 4 * 1024 + 6 * 28672) / 8
    assert activation_bytes_per_token_layer(model, lay, FLASH)[0] == pytest.approx(expected, rel=1e-12)


def test_moe_activations_by_hand() -> None:
    # mixtral, TP1, flash: 8h + 4q + 4kv + top_k*(6f + 2h)
    # = 32,768 + 16,384 + 4,096 + 2*(86,016 + 8,192) = 241,664 bytes per token per layer
    model = load_model("mixtral-8x7b")
    got = activation_bytes_per_token_layer(model, one(recompute="selective"), FLASH)[0]
    assert got == 241_664


def test_context_parallel_halves_activations() -> None:
    # CP splits the tokens: with flash (no s x s scores) every term, logits included, halves
    model = load_model("llama3-8b")
    a = activation_bytes(model, one(cp=1, micro_batch=1, seq_len=8192), FLASH, True, True)[0]
    b = activation_bytes(model, one(cp=2, micro_batch=1, seq_len=8192), FLASH, True, True)[0]
    assert b == pytest.approx(a / 2, rel=1e-12)


# ------------------------------------------------------------------ ZeRO


def _states(zero: int, dp: int = 8, cp: int = 1) -> tuple[float, float, float]:
    model = load_model("llama2-7b")
    mem = peak_memory(model, one(dp=dp, cp=cp, zero=zero), FLASH, RESERVE)
    return float(mem.params[0]), float(mem.grads[0]), float(mem.optimizer[0])


def test_zero_stages() -> None:
    n = LLAMA2_7B_N
    # stage 0: 2N, 4N, 12N
    assert _states(0) == pytest.approx((2 * n, 4 * n, 12 * n), rel=1e-12)
    # stage 1: optimizer / DP
    assert _states(1) == pytest.approx((2 * n, 4 * n, 12 * n / 8), rel=1e-12)
    # stage 2: and the gradients
    assert _states(2) == pytest.approx((2 * n, 4 * n / 8, 12 * n / 8), rel=1e-12)
    # stage 3: and the weights, plus a two-layer bf16 gather buffer 2 * 2 * layer
    assert _states(3) == pytest.approx((2 * n / 8 + 4 * LLAMA2_7B_LAYER, 4 * n / 8, 12 * n / 8), rel=1e-12)


def test_zero_shards_over_dp_times_cp() -> None:
    # context-parallel ranks hold the same weights: DP4 x CP2 shards like DP8
    assert _states(3, dp=4, cp=2) == pytest.approx(_states(3, dp=8, cp=1), rel=1e-12)


def test_zero_with_expert_parallelism() -> None:
    # mixtral, DP8 = EP8, ZeRO-1: each GPU holds 1 of 8 experts per layer; dense weights are
    # sharded over 8 DP ranks, expert weights over DP/EP = 1 rank.
    model = load_model("mixtral-8x7b")
    n, e = 46_702_792_704, 3 * 4096 * 14336
    dense = n - 32 * 8 * e
    mem = peak_memory(model, one(dp=8, ep=8, zero=1), FLASH, RESERVE)
    assert mem.params[0] == pytest.approx(2 * (dense + 32 * e), rel=1e-12)
    assert mem.optimizer[0] == pytest.approx(12 * (dense / 8 + 32 * e), rel=1e-12)


def test_tensor_parallel_splits_matmul_weights() -> None:
    # llama2-7b TP8, PP1: matmul weights / 8; norms (65 x 4096 incl. final) are replicated
    model = load_model("llama2-7b")
    mem = peak_memory(model, one(tp=8, zero=0), FLASH, RESERVE)
    norms = 32 * 2 * 4096 + 4096
    assert mem.params[0] == pytest.approx(2 * ((LLAMA2_7B_N - norms) / 8 + norms), rel=1e-12)


# ------------------------------------------------------------------ pipeline


def test_in_flight_micro_batches() -> None:
    # 1F1B: min(p, m); interleaved: times 1 + (p-1)/(p v)
    lay = one(pp=4, dp=1, micro_batch=1, global_batch=2)
    assert in_flight_micro_batches(lay)[0] == 2
    lay = one(pp=4, dp=1, micro_batch=1, global_batch=8)
    assert in_flight_micro_batches(lay)[0] == 4
    lay = one(pp=4, dp=1, micro_batch=1, global_batch=8, virtual_stages=2)
    assert in_flight_micro_batches(lay)[0] == pytest.approx(4 * (1 + 3 / 8))


def test_first_stage_activations_by_hand() -> None:
    # llama2-7b, PP4 (8 layers/stage), selective, flash, TP1, s=4096, b=1, m=8:
    # per token per layer 8h + 4q + 4kv + 6f = 32,768 + 16,384 + 16,384 + 66,048 = 131,584
    # first stage: 8 layers x 4 micro-batches in flight x 4096 tokens; no logits there
    model = load_model("llama2-7b")
    lay = one(pp=4, micro_batch=1, global_batch=8, seq_len=4096, recompute="selective")
    first = stage_memory(model, lay, FLASH, RESERVE, first=True, last=False)
    assert first.activations[0] == pytest.approx(131_584 * 4096 * 8 * 4, rel=1e-12)
    # last stage: one micro-batch of its 8 layers + fp32 logits 4*V*s
    last = stage_memory(model, lay, FLASH, RESERVE, first=False, last=True)
    assert last.activations[0] == pytest.approx(131_584 * 4096 * 8 + 4 * 32000 * 4096, rel=1e-12)
    # interleaved v=2: 2 chunks of 4 layers, in flight 4 * 1.375
    lay_v = one(pp=4, micro_batch=1, global_batch=8, seq_len=4096, recompute="selective", virtual_stages=2)
    first_v = stage_memory(model, lay_v, FLASH, RESERVE, first=True, last=False)
    assert first_v.activations[0] == pytest.approx(first.activations[0] * 1.375, rel=1e-12)


def test_layers_per_stage_rounds_up() -> None:
    # Llama 3 405B: 126 layers on PP16 => the slowest stage carries ceil(126/16) = 8
    model = load_model("llama3-405b")
    assert layers_per_stage(model, one(pp=16))[0] == 8
    # interleaved: 2 chunks of ceil(126/32) = 4
    assert layers_per_stage(model, one(pp=16, virtual_stages=2))[0] == 8
    assert layers_per_stage(model, one(pp=1))[0] == 126


def test_tied_head_is_copied_on_last_stage() -> None:
    # GPT-style tied embedding: PP1 holds it once; PP2's last stage keeps a V*h copy (Megatron)
    V, h, L = 50_000, 1024, 4
    model = gpt_spec(h=h, layers=L, vocab=V, seq=2048)
    layer = model.layer_params
    single = stage_params(model, one(pp=1), True, True)
    assert float(single.dense[0] + single.expert[0]) == model.total_params
    last = stage_params(model, one(pp=2), False, True)
    # 2 layers + LM head copy V*h + final LayerNorm 2h
    assert float(last.dense[0] + last.expert[0]) == 2 * layer + V * h + 2 * h
    first = stage_params(model, one(pp=2), True, False)
    # 2 layers + embedding V*h + learned positions 2048*h
    assert float(first.dense[0] + first.expert[0]) == 2 * layer + V * h + 2048 * h


def test_peak_is_the_larger_stage_and_sums() -> None:
    model = load_model("llama3-8b")
    lay = one(pp=4, micro_batch=1, global_batch=64, seq_len=8192, recompute="selective", zero=1, dp=2)
    first = stage_memory(model, lay, FLASH, RESERVE, first=True, last=False)
    last = stage_memory(model, lay, FLASH, RESERVE, first=False, last=True)
    peak = peak_memory(model, lay, FLASH, RESERVE)
    assert peak.total[0] == max(first.total[0], last.total[0])
    parts = sum(np.asarray(getattr(peak, t)) for t in MEMORY_TERMS)
    assert np.allclose(parts, peak.total, rtol=1e-15)

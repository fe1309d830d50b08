"""Compute time: the GEMM roofline, a GPT micro-batch's forward and backward, the optimizer step
and offload, worked out by hand on the round-figure cluster of conftest (`dgx`: 200e12 FLOP/s
in BF16 and FP16, 400e12 in FP8, GEMMs at gemm_max 0.5 of peak with no shape penalty,
attention at 0.5, 2e12 B/s of HBM, PCIe 10e9 B/s, host Adam at 1e9 parameters/s)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conftest import gpt_spec, one
from hypothesis import given, settings
from hypothesis import strategies as st

from paraplan.cost_models.candidates import Layouts
from paraplan.cost_models.compute import (
    cp_merge_bytes,
    eager_extra_bytes,
    eager_extra_kernels,
    expert_epilogue_bytes,
    fp8_cast_bytes,
    fsdp_copy_s,
    gemm_s,
    matmul_peak_flops,
    micro_batch_times,
    moe_host_wait_s,
    moe_layer_ops,
    moe_permute_bytes,
)
from paraplan.cost_models.evaluate import Evaluation, evaluate
from paraplan.cost_models.layout import Framework, Precision
from paraplan.cost_models.memory import StageParams
from paraplan.cost_models.models import ModelSpec
from paraplan.cost_models.stack import Stack
from paraplan.hardware_specs.schema import Cluster

# gpt_spec (h 1024, 4 layers, V 50,000, s 2048, tied): Narayanan et al. 2021 eq. 2,
# 12 l h^2 (1 + 13/(12h) + (V + s)/(12 l h)) = 103,682,048, plus the final LayerNorm 2h
GPT_N = 103_684_096


def _f(x: object) -> float:
    return float(np.asarray(x).reshape(-1)[0])


def _a(x: float) -> np.ndarray:
    return np.array([x])


# ------------------------------------------------------------------ GEMM roofline

RATE = 0.5 * 200e12  # a large BF16 GEMM's rate on `dgx`: peak x gemm_max


def test_square_gemm_is_compute_bound(dgx: Cluster) -> None:
    # 4096^3: 2 * 4096^3 = 137,438,953,472 FLOPs at 1e14 FLOP/s => 1.37438953472e-3 s;
    # bytes 2 * 3 * 4096^2 = 100,663,296 at 2e12 B/s => 5.03e-5 s. The roof is the compute.
    x = _a(4096.0)
    assert _f(gemm_s(x, x, x, RATE, dgx)) == pytest.approx(1.37438953472e-3, rel=1e-12)


def test_skinny_gemm_is_memory_bound(dgx: Cluster) -> None:
    # 8 x 4096 @ 4096 x 4096: 2 * 8 * 4096^2 = 268,435,456 FLOPs => 2.68e-6 s of compute;
    # bytes 2 * (8*4096 + 4096^2 + 8*4096) = 33,685,504 at 2e12 B/s => 1.6842752e-5 s.
    x = _a(4096.0)
    assert _f(gemm_s(_a(8.0), x, x, RATE, dgx)) == pytest.approx(1.6842752e-5, rel=1e-12)


def test_gemm_half_dim_halves_the_efficiency_per_dimension(dgx: Cluster) -> None:
    # With gemm_half_dim = 4096 each 4096 dimension runs at q = 4096 / (4096 + 4096) = 1/2 of the
    # roof: the square GEMM above takes (1/2)^-3 = 8 times as long, 1.099511627776e-2 s.
    slow = dgx.model_copy(update={"efficiency": dgx.efficiency.model_copy(update={"gemm_half_dim": 4096.0})})
    x = _a(4096.0)
    assert _f(gemm_s(x, x, x, RATE, slow)) == pytest.approx(1.099511627776e-2, rel=1e-12)


def test_a_dimension_past_a_tile_pays_for_the_whole_tile(dgx: Cluster) -> None:
    # With 128 x 128 output tiles, n = 4097 is one column past 32 tiles: the kernel computes 33
    # tiles, 4224 columns, 2 * 4096 * 4224 * 4096 = 141,733,920,768 FLOPs at 1e14 FLOP/s
    # => 1.41733920768e-3 s (bytes 2 * (4096^2 + 2 * 4096 * 4097) = 100,679,680 => 5.03e-5 s:
    # compute-bound), the time of n = 4224 itself, against 1.374725...e-3 s untiled (4097 / 4096
    # of the square GEMM above). A multiple of the tile is not rounded.
    tiled = dgx.model_copy(update={"efficiency": dgx.efficiency.model_copy(update={"gemm_tile": 128})})
    x = _a(4096.0)
    assert _f(gemm_s(x, _a(4097.0), x, RATE, tiled)) == pytest.approx(1.41733920768e-3, rel=1e-12)
    assert _f(gemm_s(x, _a(4224.0), x, RATE, tiled)) == pytest.approx(1.41733920768e-3, rel=1e-12)
    assert _f(gemm_s(_a(4097.0), x, x, RATE, tiled)) == pytest.approx(1.41733920768e-3, rel=1e-12)
    assert _f(gemm_s(x, x, x, RATE, tiled)) == _f(gemm_s(x, x, x, RATE, dgx))


@settings(max_examples=60, deadline=None)
@given(
    preset=st.sampled_from(["a100-80g", "h100-sxm", "b200", "mi300x"]),
    m=st.integers(1, 20_000),
    n=st.integers(1, 20_000),
    k=st.integers(1, 20_000),
    grow=st.integers(1, 600),
)
def test_gemm_time_never_falls_as_a_dimension_grows(
    presets: dict[str, Cluster], preset: str, m: int, n: int, k: int, grow: int
) -> None:
    # Tile rounding makes time a step function of m and n; it must still never fall as m, n or
    # k grows (a larger problem is never faster), on every kind of tile.
    cluster = presets[preset]
    rate = cluster.gpu.peak_bf16_flops * cluster.efficiency.gemm_max
    base = _f(gemm_s(_a(m), _a(n), _a(k), rate, cluster))
    for a, b, c in ((m + grow, n, k), (m, n + grow, k), (m, n, k + grow)):
        assert _f(gemm_s(_a(a), _a(b), _a(c), rate, cluster)) >= base * (1 - 1e-12)


def test_kernel_overhead_is_added_once_per_gemm(dgx: Cluster) -> None:
    # 1 x 1 x 1: nothing to compute; a launch of 4 us is all it costs (plus 6 bytes: 3e-12 s)
    launch = dgx.model_copy(update={"efficiency": dgx.efficiency.model_copy(update={"kernel_overhead_s": 4e-6})})
    one_ = _a(1.0)
    assert _f(gemm_s(one_, one_, one_, RATE, launch)) == pytest.approx(4e-6 + 3e-12, rel=1e-12)


@pytest.mark.parametrize(("precision", "peak"), [("bf16", 200e12), ("fp16", 200e12), ("fp8", 400e12)])
def test_matmul_peak_is_the_precisions_tensor_core_peak(dgx: Cluster, precision: str, peak: float) -> None:
    assert _f(matmul_peak_flops(dgx, one(precision=precision))) == peak


def test_without_fp8_tensor_cores_fp8_falls_back_to_bf16(a100: Cluster) -> None:
    # (and the "fp8" limit refuses the layout: test_evaluate_properties.py)
    assert _f(matmul_peak_flops(a100, one(precision="fp8"))) == a100.gpu.peak_bf16_flops


# ------------------------------------------------------------------ one micro-batch of a GPT

# gpt_spec: h 1024, 4 layers, 16 heads, V 50,000, plain 4h MLP, dropout, learned positions.
# One micro-batch of T = 2048 tokens, TP1, one stage, flash attention, Megatron. Every GEMM is
# compute-bound on `dgx` (the smallest, O: 2 * 2048 * 1024^2 = 4.3e9 FLOPs = 4.3e-5 s against
# 2 * (2048*1024 + 1024^2 + 2048*1024) bytes = 5.2e-6 s), so per layer:
#   GEMMs      2 T 12 h^2 / 1e14 = 51,539,607,552 / 1e14                  = 5.1539607552e-4 s
#   attention  causal: 2 T (s+1)/2 (a d + a d) / (0.5 * 200e12)
#              = 2 * 2048 * 1024.5 * 2048 / 1e14                          = 8.594128896e-5 s
#              with dropout at 0.80 of that throughput (flash-attention PR #2597's GB200
#              measurement, forward 75-85%): 8.594128896e-5 / 0.8            = 1.074266112e-4 s
#   elementwise (norms, adds 20h; dropout's mask, fused into the adds, 2h; GELU 4f = 16h)
#              38 h T bytes / 2e12                                         = 3.9845888e-5 s
# LM head: GEMM 2 T V h / 1e14 = 2.097152e-3 s + fp32 cross entropy 8 V T bytes / 2e12 = 4.096e-4 s.
GEMMS, ATTENTION, ELEMENTWISE, HEAD = 5.1539607552e-4, 1.074266112e-4, 3.9845888e-5, 2.506752e-3
# Forward: 4 layers x (GEMMs + attention + elementwise) + head                 = 5.15742629888e-3 s
# Backward: two GEMMs per forward GEMM (dX, dW), twice the elementwise traffic, flash attention's
# backward 5 matmuls to the forward's 2 (Dao 2023), 2.5 x 8.594128896e-5 = 2.148532224e-4 s, with
# dropout at 0.65 of that throughput (backward 60-70%): 3.305434190769e-4 s; the head twice:
#   4 * (2 * (GEMMs + elementwise) + 3.305434190769e-4) + 2 * head            = 1.077761338447e-2 s
FORWARD, BACKWARD = 5.15742629888e-3, 1.077761338447e-2


MEGATRON_STACK = Stack()


def _gpt(cluster: Cluster, stack: Stack = MEGATRON_STACK, **knobs: object) -> Evaluation:
    lay = one(micro_batch=1, seq_len=2048, **{"global_batch": 1, **knobs})
    return evaluate(gpt_spec(), cluster, lay, stack)


def test_gpt_step_by_hand(dgx: Cluster) -> None:
    # One GPU, one micro-batch: the step is the forward, the backward and the optimizer step.
    # Adam streams 30 B per parameter (master, m, v read and written 24, the fp32 gradient read 4,
    # the bf16 weight written 2) and the gradient norm and zeroing 2 x 4 B: 38 N bytes at 2e12 B/s
    #   = 38 * 103,684,096 / 2e12 = 1.969997824e-3 s
    ev = _gpt(dgx)
    assert _f(ev.times["compute"]) == pytest.approx(FORWARD + BACKWARD + 1.969997824e-3, rel=1e-9)
    assert _f(ev.step_time_s) == pytest.approx(FORWARD + BACKWARD + 1.969997824e-3, rel=1e-9)
    # eight micro-batches: eight forwards and backwards, one optimizer step
    ev = _gpt(dgx, global_batch=8)
    assert _f(ev.times["compute"]) == pytest.approx(8 * (FORWARD + BACKWARD) + 1.969997824e-3, rel=1e-9)


def test_flash_attention_in_triton_runs_at_the_measured_fraction(dgx: Cluster) -> None:
    # Dao 2023 (FlashAttention-2) Sec 4.1 on A100: FlashAttention-2 is 1.3-1.5x faster than
    # FlashAttention in Triton forward, 2x backward: the Triton kernel takes 1.4x and 2x as long.
    # Without dropout (gpt_spec's would multiply in, as both are fractions of one throughput).
    lay = one(micro_batch=1, seq_len=2048, global_batch=1)
    model = gpt_spec(dropout=False)
    triton = micro_batch_times(model, lay, dgx, Stack(triton_attention=True))
    fused = micro_batch_times(model, lay, dgx, MEGATRON_STACK)
    assert _f(triton.attention_fwd_s) / _f(fused.attention_fwd_s) == pytest.approx(1.4, rel=1e-12)
    assert _f(triton.attention_bwd_s) / _f(fused.attention_bwd_s) == pytest.approx(2.0, rel=1e-12)


def test_attention_dropout_slows_flash_attention_as_measured(dgx: Cluster) -> None:
    # flash-attention PR #2597 measured dropout's flash attention on GB200 at 75-85% of the
    # dropout-free throughput forward and 60-70% backward: 1 / 0.80 = 1.25 and 1 / 0.65 = 1.5385
    # times as long (the midpoints). Unfused attention draws its mask in the memory-bound softmax
    # pass instead, so there the dropout costs bytes, not a throughput fraction.
    lay = one(micro_batch=1, seq_len=2048, global_batch=1)
    times = micro_batch_times(gpt_spec(), lay, dgx, MEGATRON_STACK)
    without = micro_batch_times(gpt_spec(dropout=False), lay, dgx, MEGATRON_STACK)
    assert _f(times.attention_fwd_s) / _f(without.attention_fwd_s) == pytest.approx(1.25, rel=1e-12)
    assert _f(times.attention_bwd_s) / _f(without.attention_bwd_s) == pytest.approx(1.5384615384615, rel=1e-12)
    unfused = Stack(flash_attention=False)
    scores = micro_batch_times(gpt_spec(), lay, dgx, unfused).attention_fwd_s
    # the 5 extra bytes per score element: T a s x 5 B = 2048 * 16 * 2048 * 5 / 2e12 = 1.6777216e-4 s
    extra = _f(scores) - _f(micro_batch_times(gpt_spec(dropout=False), lay, dgx, unfused).attention_fwd_s)
    assert extra == pytest.approx(1.6777216e-4, rel=1e-9)


def test_unfused_attention_launches_each_batched_gemm_once(dgx: Cluster) -> None:
    # Megatron's CoreAttention runs Q K^T and P V each as one torch.baddbmm / torch.bmm over all
    # b x heads matrices, so a launch of 4 us adds 2 x 4 = 8 us to the forward and 4 x 4 = 16 us
    # to the backward (four GEMMs), not 8 us per matrix: 2 x 16 = 32 matrices here, which launched
    # one by one would add 32 x 8 = 256 us.
    lay = one(micro_batch=2, seq_len=2048, global_batch=2)
    launch = dgx.model_copy(update={"efficiency": dgx.efficiency.model_copy(update={"kernel_overhead_s": 4e-6})})
    unfused = Stack(flash_attention=False)
    with_launch, without = (micro_batch_times(gpt_spec(), lay, c, unfused) for c in (launch, dgx))
    assert _f(with_launch.attention_fwd_s) - _f(without.attention_fwd_s) == pytest.approx(8e-6, rel=1e-9)
    assert _f(with_launch.attention_bwd_s) - _f(without.attention_bwd_s) == pytest.approx(16e-6, rel=1e-9)


@pytest.mark.parametrize(("dropout", "expected"), [(True, -2.34881024e-4), (False, -6.7108864e-5)])
def test_unfused_attention_backward_moves_its_own_bytes(dgx: Cluster, dropout: bool, expected: float) -> None:
    # The score GEMMs' backward is twice their forward (four GEMMs to two), so backward - 2 x forward
    # leaves the memory-bound passes alone: per score element the softmax backward reads the
    # probabilities and their gradient and writes the scores' gradient (6 B against the forward's
    # 4), dropout's backward reads the gradient and the 1-byte mask and writes the gradient (5 B, as
    # its forward). T a s = 2048 * 16 * 2048 = 67,108,864 elements at 2e12 B/s:
    # with dropout (6 + 5) - 2 (4 + 5) = -7 B, without 6 - 2 * 4 = -2 B.
    lay = one(micro_batch=1, seq_len=2048, global_batch=1)
    times = micro_batch_times(gpt_spec(dropout=dropout), lay, dgx, Stack(flash_attention=False))
    assert _f(times.attention_bwd_s) - 2 * _f(times.attention_fwd_s) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize(
    ("knobs", "expected"),
    [
        ({"recompute": "none"}, 0.0),
        # Megatron selective: core attention again, 4 x attention
        ({"recompute": "selective"}, 4 * ATTENTION),
        # full: every layer's forward again (not the head)
        ({"recompute": "full"}, 4 * (GEMMS + ATTENTION + ELEMENTWISE)),
        # block method, 1 of the 4 layers
        ({"recompute": "full", "recompute_layers": 1}, GEMMS + ATTENTION + ELEMENTWISE),
    ],
)
def test_recompute_time_by_hand(dgx: Cluster, knobs: dict[str, Any], expected: float) -> None:
    assert _f(_gpt(dgx, **knobs).times["recompute"]) == pytest.approx(expected, rel=1e-9, abs=1e-15)


def test_torchtitans_selective_recompute_redoes_half_the_gemms(dgx: Cluster) -> None:
    # torchtitan's op-level policy saves every other matmul's output: it recomputes half of the
    # GEMMs and the elementwise work, against full recompute's whole forward (the framework's
    # kernel-speed factor cancels in the ratio):
    #   (GEMMs/2 + elementwise) / (GEMMs + attention + elementwise) = 3.059e-4 / 6.4957e-4
    selective = _f(_gpt(dgx, recompute="selective", framework="torchtitan").times["recompute"])
    full = _f(_gpt(dgx, recompute="full", framework="torchtitan").times["recompute"])
    expected = (GEMMS / 2 + ELEMENTWISE) / (GEMMS + ATTENTION + ELEMENTWISE)
    assert selective / full == pytest.approx(expected, rel=1e-9)


def test_megatron_deepspeeds_selective_recompute_is_the_unfused_attention_core(dgx: Cluster) -> None:
    # Megatron-DeepSpeed 6acc370a checkpoints the attention core only on its unfused CoreAttention
    # path (megatron/model/transformer.py, ParallelAttention sets checkpoint_core_attention there
    # alone): with flash attention "selective" recomputes nothing and keeps what "none" keeps
    flash = Stack(tp_overlap=False, p2p_overlap=False)
    selective = _gpt(dgx, flash, recompute="selective", framework="deepspeed")
    none = _gpt(dgx, flash, recompute="none", framework="deepspeed")
    assert _f(selective.times["recompute"]) == 0.0
    assert _f(selective.step_time_s) == _f(none.step_time_s)
    assert _f(selective.memory.activations) == _f(none.memory.activations)
    # unfused, it is the attention core again, as Megatron's default (core_attn): the same share of
    # full recompute (each framework's kernel factor cancels in the ratio), and the scores are dropped
    unfused = Stack(flash_attention=False, tp_overlap=False, p2p_overlap=False)

    def share(framework: str) -> float:
        sel = _gpt(dgx, unfused, recompute="selective", framework=framework).times["recompute"]
        return _f(sel) / _f(_gpt(dgx, unfused, recompute="full", framework=framework).times["recompute"])

    assert share("deepspeed") == pytest.approx(share("megatron"), rel=1e-12)
    assert share("deepspeed") > 0.0
    dropped = _gpt(dgx, unfused, recompute="selective", framework="deepspeed").memory.activations
    assert _f(dropped) < _f(_gpt(dgx, unfused, recompute="none", framework="deepspeed").memory.activations)


def test_op_level_recompute_redoes_attention_when_not_saved(dgx: Cluster) -> None:
    # torchtitan with cuDNN attention outside its save list (Stack.attention_saved false): the
    # attention forward runs again too: (GEMMs/2 + elementwise + attention) / the whole forward
    lost = Stack(tp_overlap=False, p2p_overlap=False, attention_saved=False)
    selective = _f(_gpt(dgx, lost, recompute="selective", framework="torchtitan").times["recompute"])
    full = _f(_gpt(dgx, lost, recompute="full", framework="torchtitan").times["recompute"])
    expected = (GEMMS / 2 + ELEMENTWISE + ATTENTION) / (GEMMS + ATTENTION + ELEMENTWISE)
    assert selective / full == pytest.approx(expected, rel=1e-9)


# ------------------------------------------------------------------ FP8 recipes' casts

# gpt_spec at T = 2048 tokens, TP 1: per token the GEMMs' distinct activation inputs are the QKV
# and MLP inputs (h = 1024 each), the output projection's (a d = 1024) and the second MLP
# projection's (f = 4096): 7,168 elements; the output gradients are QKV's 3,072, the output
# projection's 1,024, the MLP's 4,096 and 1,024: 9,216; the weights 12 h^2 = 12,582,912.
T, X_EL, DY_EL, W_EL = 2048, 7168, 9216, 12_582_912


@pytest.mark.parametrize(
    ("recipe", "fwd", "bwd"),
    [
        # TE delayed scaling: the fused cast, 3 B per input element; the backward twice that
        ("delayed", 3 * T * X_EL, 6 * T * X_EL),
        # torchao tensorwise: X 6 B (amax 2, cast to both layouts 2 + 1 + 1), W 5 B forward and
        # 3 B backward, dY 6 B
        ("tensorwise", 6 * T * X_EL + 5 * W_EL, 6 * T * DY_EL + 3 * W_EL),
        # rowwise: X and dY 8 B, W 3 B forward and 7 B backward, and the rescale of the backward
        # GEMMs' outputs 4 B per input-gradient and weight-gradient element
        ("rowwise", 8 * T * X_EL + 3 * W_EL, 8 * T * DY_EL + 4 * T * X_EL + 11 * W_EL),
        # rowwise_with_gw_hp: 3 B per cast, W cast twice
        ("rowwise_with_gw_hp", 3 * T * X_EL + 3 * W_EL, 3 * T * DY_EL + 3 * W_EL),
        # mxfp8: two 3 B casts of X and dY, of W one each way
        ("mxfp8", 6 * T * X_EL + 3 * W_EL, 6 * T * DY_EL + 3 * W_EL),
    ],
)
def test_fp8_cast_bytes_by_recipe(recipe: str, fwd: float, bwd: float) -> None:
    lay = one(micro_batch=1, seq_len=2048, global_batch=1, precision="fp8")
    got = fp8_cast_bytes(gpt_spec(), lay, Stack(fp8_recipe=recipe), np.array([2048.0]))  # type: ignore[arg-type]
    assert _f(got[0]) == pytest.approx(fwd, rel=1e-12)
    assert _f(got[1]) == pytest.approx(bwd, rel=1e-12)
    bf16 = fp8_cast_bytes(gpt_spec(), one(precision="bf16"), Stack(fp8_recipe=recipe), np.array([2048.0]))  # type: ignore[arg-type]
    assert (_f(bf16[0]), _f(bf16[1])) == (0.0, 0.0)


def test_fp8_delayed_casts_every_routed_copy() -> None:
    # gpt_spec's layers with 8 routed experts of f = 4096, top-2, at T = 2048 tokens, TP1: TE's
    # grouped expert linears cast their permuted input, one row of h = 1024 per routed copy, so
    # per token the casts read QKV's input h = 1,024, the k = 2 routed copies 2,048, the output
    # projection's input a d = 1,024 and the second expert GEMMs' k f = 8,192: 12,288 elements,
    # 3 B each => 3 * 2048 * 12,288 = 75,497,472 B forward, twice that backward.
    lay = one(micro_batch=1, seq_len=2048, global_batch=1, precision="fp8")
    fwd, bwd = fp8_cast_bytes(_tiny_moe(), lay, Stack(fp8_recipe="delayed"), _a(2048.0))
    assert (_f(fwd), _f(bwd)) == (75_497_472, 150_994_944)
    # one shared expert of width 512 reads every token once more (h) and widens the second GEMMs'
    # input by 512: 12,288 + 1,024 + 512 = 13,824 elements => 3 * 2048 * 13,824 = 84,934,656 B
    shared = _tiny_moe(num_shared_experts=1, shared_expert_ffn=512)
    assert _f(fp8_cast_bytes(shared, lay, Stack(fp8_recipe="delayed"), _a(2048.0))[0]) == 84_934_656


def test_rowwise_with_gw_hp_keeps_the_weight_gradient_gemm_in_bf16(dgx: Cluster) -> None:
    # FP8 GEMMs run at 400e12 x 0.5: a layer's forward GEMMs take GEMMS / 2. The backward's input-
    # gradient GEMMs run in FP8 (GEMMS / 2), the weight-gradient GEMMs in BF16 (GEMMS); the casts
    # move 3 T dY + 3 W = 94,371,840 B at 2e12 B/s = 4.718592e-5 s, the other elementwise work twice
    # the forward's, flash attention's backward with dropout (above) 3.305434190769e-4 s:
    #   2.5769803776e-4 + 5.1539607552e-4 + 4.718592e-5 + 7.9691776e-5 + 3.305434190769e-4
    #   = 1.2305152283569e-3 s
    lay = one(micro_batch=1, seq_len=2048, global_batch=1, precision="fp8")
    times = micro_batch_times(gpt_spec(), lay, dgx, Stack(fp8_recipe="rowwise_with_gw_hp"))
    assert _f(times.layer_bwd_s) == pytest.approx(1.2305152283569e-3, rel=1e-9)
    # and the window that hides the backward TP collectives is that BF16 weight-gradient GEMM time
    assert _f(times.layer_gemm_fwd_s) == pytest.approx(GEMMS, rel=1e-9)


# ------------------------------------------------------------------ optimizer step and offload


@pytest.mark.parametrize(
    ("knobs", "stack", "bytes_per_n"),
    [
        # ZeRO-1 over DP8, fp32 main grads: Adam on the N/8 shard streams 30 B per parameter; the
        # gradient norm reads and the zeroing writes the whole fp32 buffer, 2 x 4 B: 30/8 + 8 = 11.75
        ({"zero": 1}, Stack(), 11.75),
        # ZeRO-2 also shards the gradient buffer: 30/8 + 8/8 = 4.75
        ({"zero": 2}, Stack(), 4.75),
        # bf16 gradients: 28/8 + 4 = 7.5
        ({"zero": 1}, Stack(main_grads="bf16"), 7.5),
        # FP16 reads the gradients once more for the inf/NaN check (Micikevicius et al. 2018): 34/8 + 8
        ({"zero": 1, "precision": "fp16"}, Stack(), 34 / 8 + 8),
        # Adam offloaded to the host: only the gradient norm and zeroing stay on the GPU: 8
        ({"zero": 1, "offload": "optimizer"}, Stack(), 8.0),
        # Apex's store_param_remainders (NeMo's default): the 2 B remainders read and written
        # instead of the 4 B master, plus the bf16 weight read to rebuild it: 2x2 + 2 + m, v 16 +
        # bf16 write 2 + fp32 gradient 4 = 28 B: 28/8 + 8 = 11.5
        ({"zero": 1}, Stack(master_weights="remainders"), 11.5),
        # Apex with dtype bf16 (NeMo's Nemotron-340B): no master, bf16 moments and gradients:
        # bf16 weight read and written 2 + 2, m and v 2 x (2 + 2) = 8, gradient 2: 14/8 + 2 x 2 = 5.75
        ({"zero": 1}, Stack(master_weights="none", adam_moments="bf16", main_grads="bf16"), 5.75),
    ],
)
def test_optimizer_step_by_hand(dgx: Cluster, knobs: dict[str, Any], stack: Stack, bytes_per_n: float) -> None:
    # The GPT on DP8, one micro-batch each: the compute term is one forward and backward (above)
    # and the optimizer step, bytes_per_n x 103,684,096 bytes at 2e12 B/s
    ev = _gpt(dgx, stack, dp=8, global_batch=8, **knobs)
    step = _f(ev.times["compute"]) - (FORWARD + BACKWARD)
    assert step == pytest.approx(bytes_per_n * GPT_N / 2e12, rel=1e-6)


# torchtitan's FSDP2 copies around its collectives (frameworks GATHER_COPIES), for a stage holding
# N = 1e8 parameters unsharded, over DP8, two micro-batches (global batch 16 of micro-batch 1):
# each all-gather casts the fp32 shard to bf16 and copies it into the gather buffer,
# (4 + 2 + 2 + 2) B x N/8 = 1.25 N, and copies the gathered buffer out, (2 + 2) B x N: 5.25 N;
# each reduce-scatter copies the bf16 gradients
# into the fp32 input, (2 + 4) B x N = 6 N (bf16 reduce dtype: 4 N). At 2e12 B/s, 1 N B = 5e-5 s.
@pytest.mark.parametrize(
    ("knobs", "stack", "bytes_per_n"),
    [
        # ZeRO-3 gathers in both micro-batches' forward and backward, scatters after each backward:
        # 4 x 5.25 + 2 x 6 = 33
        ({"zero": 3}, Stack(), 33.0),
        # bf16 gradients reduced in bf16: 4 x 5.25 + 2 x 4 = 29
        ({"zero": 3}, Stack(main_grads="bf16"), 29.0),
        # ZeRO-2 regathers for every forward (reshard after backward): 2 x 5.25 + 2 x 6 = 22.5
        ({"zero": 2}, Stack(), 22.5),
        # with PP the pipeline keeps the gradients whole and the weights gathered across the step:
        # one gather, one reduce-scatter, 5.25 + 6 = 11.25
        ({"zero": 2, "pp": 2}, Stack(), 11.25),
        # without sharding (DDP) no copies
        ({"zero": 0}, Stack(), 0.0),
    ],
)
def test_fsdp_copies_by_hand(dgx: Cluster, knobs: dict[str, Any], stack: Stack, bytes_per_n: float) -> None:
    lay = one(dp=8, micro_batch=1, seq_len=2048, global_batch=16, framework=Framework.TORCHTITAN, **knobs)
    params = StageParams(dense=_a(8e7), expert=_a(2e7), layer_max=_a(2.5e7), layers=_a(4.0))
    assert _f(fsdp_copy_s(params, lay, dgx, stack)) == pytest.approx(bytes_per_n * 1e8 / 2e12, rel=1e-12)


@pytest.mark.parametrize("framework", [Framework.MEGATRON, Framework.DEEPSPEED])
def test_frameworks_that_gather_into_their_own_buffers_copy_nothing(dgx: Cluster, framework: Framework) -> None:
    # Megatron-FSDP and DeepSpeed ZeRO-3 gather into the flat buffers their parameters view
    lay = one(dp=8, zero=3, micro_batch=1, seq_len=2048, global_batch=16, framework=framework)
    params = StageParams(dense=_a(1e8), expert=_a(0.0), layer_max=_a(2.5e7), layers=_a(4.0))
    assert _f(fsdp_copy_s(params, lay, dgx, Stack())) == 0.0


def test_fsdp_copies_are_in_the_step(dgx: Cluster) -> None:
    # The GPT on DP8 under torchtitan, one micro-batch: ZeRO-3 against DDP (ZeRO 0) runs the same
    # forward and backward; its compute differs by the copies, 2 gathers x 5.25 + 1 scatter x 6 =
    # 16.5 B per parameter, and by the optimizer step over the shard, 30/8 + 8/8 = 4.75 B against
    # 30 + 8 = 38 B (`test_optimizer_step_by_hand`): (16.5 + 4.75 - 38) N B at 2e12 B/s
    sharded, ddp = (_gpt(dgx, dp=8, zero=z, global_batch=8, framework=Framework.TORCHTITAN) for z in (3, 0))
    difference = _f(sharded.times["compute"]) - _f(ddp.times["compute"])
    assert difference == pytest.approx((16.5 + 4.75 - 38.0) * GPT_N / 2e12, rel=1e-6)


@settings(max_examples=60, deadline=None)
@given(
    dp=st.sampled_from([2, 4, 8, 16, 64]),
    micro_batches=st.integers(1, 12),
    more=st.integers(1, 12),
    pp=st.sampled_from([1, 2, 4]),
    dense=st.floats(1e6, 1e10),
    expert=st.sampled_from([0.0, 1e8, 3e9]),
    stack=st.sampled_from([Stack(), Stack(main_grads="bf16")]),
)
def test_fsdp_copies_grow_with_the_work_they_copy(
    dgx: Cluster, dp: int, micro_batches: int, more: int, pp: int, dense: float, expert: float, stack: Stack
) -> None:
    # More micro-batches of the same size add collectives, so copies: ZeRO-3 gathers in every
    # micro-batch, ZeRO-2 too without PP (with PP the pipeline gathers and reduces once a step, so
    # its copies stay); ZeRO-3, which gathers for the backward too, copies at least what ZeRO-2
    # does; without sharding there is nothing to copy.
    params = StageParams(dense=_a(dense), expert=_a(expert), layer_max=_a(dense + expert), layers=_a(4.0))

    def copies(zero: int, m: int) -> float:
        lay = one(dp=dp, pp=pp, zero=zero, micro_batch=1, seq_len=2048, global_batch=dp * m,
                  framework=Framework.TORCHTITAN)  # fmt: skip
        return _f(fsdp_copy_s(params, lay, dgx, stack))

    assert 0.0 < copies(3, micro_batches) < copies(3, micro_batches + more)
    if pp == 1:
        assert 0.0 < copies(2, micro_batches) < copies(2, micro_batches + more)
    else:
        assert 0.0 < copies(2, micro_batches) == pytest.approx(copies(2, micro_batches + more), rel=1e-12)
    assert copies(3, micro_batches) >= copies(2, micro_batches) * (1 - 1e-12)
    assert copies(0, micro_batches) == 0.0


def test_offload_by_hand(dgx: Cluster) -> None:
    # ZeRO-Offload (Ren et al. 2021), the GPT on DP8 with ZeRO-1: each GPU's shard N/8 =
    # 12,960,512 parameters. The node's CPUs step 8 shards at 1e9 parameters/s: N / 1e9 =
    # 0.103684096 s; each GPU sends its fp32 gradients (4 B) and receives bf16 weights (2 B) over
    # PCIe at 10e9 B/s: 12,960,512 * 6 / 1e10 = 0.0077763072 s. Total 0.1114604032 s.
    offload = _gpt(dgx, dp=8, zero=1, offload="optimizer", global_batch=64).times["offload"]
    assert _f(offload) == pytest.approx(0.1114604032, rel=1e-12)
    # offloading everything (ZeRO-Infinity) also brings the weight shard in, forward and backward,
    # in each of the m = 64 / 8 = 8 micro-batches: 8 x 2 x 2 B x 12,960,512 / 1e10 = 0.0414736384 s
    offload = _gpt(dgx, dp=8, zero=3, offload="all", global_batch=64, framework=Framework.DEEPSPEED).times["offload"]
    assert _f(offload) == pytest.approx(0.1114604032 + 0.0414736384, rel=1e-12)
    # without offload, nothing
    assert _f(_gpt(dgx, dp=8, zero=3, global_batch=64).times["offload"]) == 0.0


def test_offload_without_a_host_is_refused(dgx: Cluster, models: dict[str, ModelSpec]) -> None:
    no_host = dgx.model_copy(update={"host": None})
    ev = evaluate(models["llama2-7b"], no_host, one(dp=8, zero=1, offload="optimizer"), Stack())
    assert ev.checks["host"][0] and not ev.feasible[0]


def test_context_parallel_merges_by_hand(models: dict[str, ModelSpec]) -> None:
    # Llama 3 8B (32 query heads, 8 KV heads, head_dim 128), torchtitan CP4 at s 131072: T = 32768
    # tokens a GPU. Output and dQ: 32768 x 4096 = 134,217,728 elements; dK, dV 32768 x 1024 =
    # 33,554,432 each. Forward: cast 6 + 3 merges x 10 + cast back 6 = 42 B per output element
    # = 5,637,144,576 B. Backward: zero 4 + 4 steps x 10 + cast back 6 = 50 B per element of dQ,
    # dK, dV: 50 x 201,326,592 = 10,066,329,600 B; with K and V repeated to 32 heads,
    # 50 x 402,653,184 = 20,132,659,200 B.
    model = models["llama3-8b"]
    lay = one(framework="torchtitan", cp=4, cp_comm="allgather", zero=3, micro_batch=1, seq_len=131072)
    fwd, bwd = cp_merge_bytes(model, lay, Stack())
    assert (_f(fwd), _f(bwd)) == (5_637_144_576.0, 10_066_329_600.0)
    fwd, bwd = cp_merge_bytes(model, lay, Stack(kv_repeated=True))
    assert (_f(fwd), _f(bwd)) == (5_637_144_576.0, 20_132_659_200.0)
    # Megatron's all-gather CP (Transformer Engine) is not this code; without CP nothing merges
    megatron = one(cp=4, cp_comm="allgather", micro_batch=1, seq_len=131072)
    assert _f(cp_merge_bytes(model, megatron, Stack())[1]) == 0.0
    alone = one(framework="torchtitan", zero=3, micro_batch=1, seq_len=131072)
    assert _f(cp_merge_bytes(model, alone, Stack())[0]) == 0.0


# ------------------------------------------------------------------ MoE token permutation


def _tiny_moe(**extra: Any) -> ModelSpec:
    """gpt_spec (h 1024, 4 layers) with 8 routed experts, top-2."""
    return gpt_spec(num_experts=8, experts_top_k=2, **extra)


def test_moe_permute_bytes_by_hand_ep1() -> None:
    # TP2 with sequence parallelism, EP1 (expert TP = TP = 2), one micro-batch of T = 2048 tokens.
    # Each GPU permutes R = T k ETP/TP = 2048 * 2 * 2 / 2 = 4096 routed rows of h = 1024 and
    # combines them into O = R/k = 2048 rows (Megatron's allgather dispatcher: the whole
    # micro-batch, gathered over the expert-TP group).
    #   forward   index_select 2Rh + 2Rh, multiply 2Rh + 2Rh, zeros 2Oh, scatter_add_ 2Rh + 4Oh
    #             = 10 * 4096 * 1024 + 6 * 2048 * 1024 = 41,943,040 + 12,582,912 = 54,525,952
    #   backward  gather 2Rh + 2Rh, multiply 2Rh + 2Rh, probability gradient 2Rh + 2Rh,
    #             zeros 2Oh, index_add_ 2Rh + 4Oh
    #             = 14 * 4096 * 1024 + 12,582,912 = 58,720,256 + 12,582,912 = 71,303,168
    lay = one(tp=2, sequence_parallel=True, micro_batch=1, seq_len=2048)
    fwd, bwd = moe_permute_bytes(_tiny_moe(), lay, _a(2048.0))
    assert _f(fwd) == 54_525_952
    assert _f(bwd) == 71_303_168


def test_moe_permute_bytes_gather_scatter_by_hand() -> None:
    # The same layout (R = 4096 routed rows, O = 2048 token rows of h = 1024) as Megatron-Core
    # core_v0.6.0's allgather dispatcher moves them (`Stack.moe_gather_scatter`):
    #   forward   gather 2Rh + 2Rh, gather into expert order 2Rh + 2Rh, zeros_like 2Rh, scatter's
    #             clone 2Rh + 2Rh and scatter_ 2Rh + 2Rh, probability multiply 2Rh + 2Rh, zeros 2Oh,
    #             scatter_add's clone 2Oh + 2Oh and scatter_add_ 2Rh + 4Oh
    #             = 24 * 4096 * 1024 + 10 * 2048 * 1024 = 100,663,296 + 20,971,520 = 121,634,816
    #   backward  gather 4Rh; multiply 4Rh, probability gradient 4Rh + 2Rh + row sum 2Rh; gather 4Rh;
    #             zeros 2Rh + scatter_add_ 2Rh + 4Rh; zeros 2Oh + scatter_add_ 2Rh + 4Oh
    #             = 30 * 4096 * 1024 + 6 * 2048 * 1024 = 125,829,120 + 12,582,912 = 138,412,032
    lay = one(tp=2, sequence_parallel=True, micro_batch=1, seq_len=2048)
    fwd, bwd = moe_permute_bytes(_tiny_moe(), lay, _a(2048.0), gather_scatter=True)
    assert _f(fwd) == 121_634_816
    assert _f(bwd) == 138_412_032


def test_gather_scatter_permutation_is_in_the_layer_time(dgx: Cluster) -> None:
    # Over the default path's 54,525,952 + 71,303,168 B: + 67,108,864 B forward and + 67,108,864 B
    # backward at 2e12 B/s (`dgx`, memory_bound 1, no launch cost): 3.3554432e-5 s each way
    lay = one(tp=2, sequence_parallel=True, micro_batch=1, seq_len=2048)
    model = _tiny_moe()
    legacy = micro_batch_times(model, lay, dgx, Stack(moe_gather_scatter=True))
    default = micro_batch_times(model, lay, dgx, Stack())
    assert _f(legacy.layer_fwd_s - default.layer_fwd_s) == pytest.approx(3.3554432e-5, rel=1e-9)
    assert _f(legacy.layer_bwd_s - default.layer_bwd_s) == pytest.approx(3.3554432e-5, rel=1e-9)


def test_moe_permute_bytes_alltoall_sorts_by_local_expert() -> None:
    # TP2, DP4, EP4, expert TP 1: R = 2048 * 2 * 1 / 2 = 2048 rows, O = 1024; 8 experts over EP4
    # leave 2 local experts, so the alltoall dispatcher also sorts the received rows by local
    # expert and back (read and write 2Rh each, forward and backward): + 8 * 2048 * 1024 = 16,777,216
    #   forward   10 * 2048 * 1024 + 6 * 1024 * 1024 + 16,777,216 = 20,971,520 + 6,291,456 + 16,777,216
    #             = 44,040,192
    #   backward  14 * 2048 * 1024 + 6,291,456 + 16,777,216 = 52,428,800
    lay = one(tp=2, dp=4, ep=4, expert_tp=1, sequence_parallel=True, micro_batch=1, seq_len=2048)
    fwd, bwd = moe_permute_bytes(_tiny_moe(), lay, _a(2048.0))
    assert _f(fwd) == 44_040_192
    assert _f(bwd) == 52_428_800
    # EP8: one expert per GPU, nothing to sort: 20,971,520 + 6,291,456 = 27,262,976 forward
    one_each = one(tp=2, dp=4, ep=8, expert_tp=1, sequence_parallel=True, micro_batch=1, seq_len=2048)
    assert _f(moe_permute_bytes(_tiny_moe(), one_each, _a(2048.0))[0]) == 27_262_976


def test_moe_permute_bytes_weighted_by_moe_layers_and_zero_for_dense() -> None:
    # a dense first layer: 3 of the 4 layers route, so the mean layer moves 3/4 of the bytes
    lay = one(tp=2, sequence_parallel=True, micro_batch=1, seq_len=2048)
    fwd, _ = moe_permute_bytes(_tiny_moe(dense_layer_ids=(0,)), lay, _a(2048.0))
    assert _f(fwd) == pytest.approx(0.75 * 54_525_952, rel=1e-12)
    dense_fwd, dense_bwd = moe_permute_bytes(gpt_spec(), lay, _a(2048.0))
    assert _f(dense_fwd) == 0.0 and _f(dense_bwd) == 0.0


def test_moe_permute_time_is_in_the_layer_forward_and_backward(dgx: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    # The permutation is memory-bound: 54,525,952 B forward and 71,303,168 B backward at 2e12 B/s
    # (`dgx`, memory_bound 1, no launch cost) add 2.7262976e-5 s and 3.5651584e-5 s.
    import paraplan.cost_models.compute as compute

    lay = one(tp=2, sequence_parallel=True, micro_batch=1, seq_len=2048)
    model = _tiny_moe()
    with_permute = micro_batch_times(model, lay, dgx, Stack())
    monkeypatch.setattr(compute, "moe_permute_bytes", lambda *_: (np.zeros(1), np.zeros(1)))
    without = micro_batch_times(model, lay, dgx, Stack())
    assert _f(with_permute.layer_fwd_s - without.layer_fwd_s) == pytest.approx(2.7262976e-5, rel=1e-9)
    assert _f(with_permute.layer_bwd_s - without.layer_bwd_s) == pytest.approx(3.5651584e-5, rel=1e-9)


def test_expert_epilogue_bytes_by_hand() -> None:
    # GPT-OSS's experts under Megatron-Core's TEGroupedMLP: TP1, DP4, EP4, expert TP 1, T = 2048
    # tokens, 8 experts top-2 of h = 1024 and f = 4096 (gpt_spec's 4h): R = 2048 * 2 = 4096
    # routed rows on each GPU; the fc1 output is R x 2f = 4096 * 8192 = 33,554,432 elements and
    # the fc2 output R x h = 4,194,304.
    #   clamp  forward 8 B x 33,554,432 = 268,435,456; backward 10 B x 33,554,432 = 335,544,320
    #   bias   forward 12 B x 4,194,304 = 50,331,648;  backward 16 B x 4,194,304 = 67,108,864
    lay = one(dp=4, ep=4, expert_tp=1, micro_batch=1, seq_len=2048)
    gated = _tiny_moe(mlp="gated")  # gpt_spec has biases on every linear layer
    fwd, bwd = expert_epilogue_bytes(gated.model_copy(update={"glu_clamp": 7.0}), lay, _a(2048.0))
    assert _f(fwd) == 268_435_456 + 50_331_648
    assert _f(bwd) == 335_544_320 + 67_108_864
    no_bias = gated.model_copy(update={"linear_bias": False, "mlp_bias": False})
    assert _f(expert_epilogue_bytes(no_bias, lay, _a(2048.0))[0]) == 0.0  # Mixtral: neither
    assert _f(expert_epilogue_bytes(gated, lay, _a(2048.0))[0]) == 50_331_648  # bias only
    # a dense model (biased MLP) and other frameworks' experts move none of it
    assert _f(expert_epilogue_bytes(gpt_spec(), lay, _a(2048.0))[1]) == 0.0
    titan = one(dp=4, ep=4, expert_tp=1, micro_batch=1, seq_len=2048, framework=Framework.TORCHTITAN)
    assert _f(expert_epilogue_bytes(gated, titan, _a(2048.0))[0]) == 0.0


# ------------------------------------------------------------------ the MoE host floor


# The tiny MoE layer (`_tiny_moe` at TP1, EP1, BF16, alltoall, no aux loss: Megatron-LM's default)
# dispatches, by the table of `moe_layer_ops`: G = 2 attention + 1 router + 2 experts = 5 GEMM
# calls; E = 5 attention + 2 (pre-MLP norm, residual add) + 4 router + 7 dispatcher (5, +2 sorts for
# its 8 local experts) + 1 activation + 18 (gpt_spec's MLP biases: the bias loop, 2 x 8 local
# experts + 2) = 37; B = 8 dispatcher + 1 tolist = 9. Native backward (no Python): N = 2 residual
# adds + 4 router calls + the 18 of the bias loop = 24: (5 + 37 + 9) + (2 x 5 + 37 - 24) = 51 + 23 = 74.
TINY_MOE_OPS = 74.0


def _with_floor(monkeypatch: pytest.MonkeyPatch, floor_s: float, ops: float = TINY_MOE_OPS) -> None:
    """Megatron's host time per dispatch set so that a layer of `ops` dispatches has this floor."""
    from dataclasses import replace

    from paraplan.cost_models import frameworks

    spec = frameworks.FRAMEWORKS[Framework.MEGATRON]
    monkeypatch.setitem(frameworks.FRAMEWORKS, Framework.MEGATRON, replace(spec, moe_host_s_per_op=floor_s / ops))


def _no_bias(**extra: Any) -> ModelSpec:
    return gpt_spec(mlp="gated", linear_bias=False, mlp_bias=False, qkv_bias=False, out_bias=False, **extra)


def test_moe_layer_ops_by_hand() -> None:
    # Qwen3-30B-A3B's layer (GQA with q/k norms, 128 experts, no shared experts, its aux loss) at
    # TP1, EP8 (16 local experts), FP8, alltoall: G = 2 attention + 1 router + 2 experts = 5; E = 7
    # attention + 2 + 7 router (4 + the aux loss's 3) + 7 dispatcher + 1 activation + 4 FP8 casts
    # (every GEMM call but the router's) = 28; B = 8 dispatcher + 1 tolist + 2 FP8 padding = 11;
    # native backward N = 2 residual adds + 6 router calls (all but MoEAuxLossAutoScaler) = 8:
    # (5 + 28 + 11) + (10 + 28 - 8) = 44 + 30 = 74.
    qwen = _no_bias(num_experts=128, experts_top_k=8, qk_norm="head")
    aux = Stack(moe_aux_loss=True)
    assert _f(moe_layer_ops(qwen, one(dp=8, ep=8, micro_batch=1, precision="fp8"), aux)) == 74.0
    # without the aux loss: E 28 - 3 = 25, N 8 - 2 = 6: (5 + 25 + 11) + (10 + 25 - 6) = 41 + 29 = 70
    assert _f(moe_layer_ops(qwen, one(dp=8, ep=8, micro_batch=1, precision="fp8"), Stack())) == 70.0
    # Moonlight's layer (MLA without a q LoRA, 64 experts, 2 shared experts, expert bias) at TP2
    # with SP, EP8 (8 local), expert TP 1, BF16, alltoall: G = 4 attention + 1 + 2 + 2 shared = 9;
    # E = 6 attention + 5 SP collectives + 2 + 7 (router with its aux loss) + 7 + 1 + 4 shared
    # (activation, add, SP all-gather and reduce-scatter) = 32; B = 2 expert bias + 8 + 1 = 11; native
    # backward N = 2 residual adds + 6 router calls + the shared experts' add = 9: (9 + 32 + 11) +
    # (18 + 32 - 9) = 52 + 41 = 93.
    moonlight = _no_bias(heads=8, num_experts=64, experts_top_k=6, kv_lora_rank=512, qk_rope_head_dim=64,
                         v_head_dim=128, num_shared_experts=2, shared_expert_ffn=1408, router_bias=True)  # fmt: skip
    lay = one(tp=2, dp=4, ep=8, sequence_parallel=True, expert_tp=1, micro_batch=1)
    assert _f(moe_layer_ops(moonlight, lay, aux)) == 93.0
    # the flex dispatcher fuses the permutations into its dispatch and combine: 7 + 8 -> 2 + 3
    # forward, 7 -> 2 backward (all with a Python backward), 15 dispatches fewer
    hybridep = Stack(ep_dispatcher="hybridep", moe_aux_loss=True)
    flex = moe_layer_ops(qwen, one(dp=8, ep=8, micro_batch=1, precision="fp8"), hybridep)
    assert _f(flex) == 74.0 - 15.0
    assert _f(moe_layer_ops(_tiny_moe(), one(micro_batch=1), Stack())) == TINY_MOE_OPS
    # GPT-OSS's clamp of both halves and their cat: 3 forward calls, native backward: + 3 only
    assert _f(moe_layer_ops(_tiny_moe(glu_clamp=7.0), one(micro_batch=1), Stack())) == TINY_MOE_OPS + 3.0


def test_router_fusion_moves_dispatches_into_python_backwards() -> None:
    # --moe-router-fusion (Megatron-LM d98e8a64 moe_utils.py `fused=`): the score, top-k and the two
    # scatters become TE's FusedTopkScoreFunction, the aux-loss scores FusedComputeScoresForMoEAuxLoss,
    # the loss FusedAuxLoss (TE d0067d0d router.py), the scaler stays: with an aux loss 7 forward
    # calls -> 4, the Python backwards 1 -> 4 (no router call is native any more).
    # Qwen3-like (softmax, aux_loss; table of test_moe_layer_ops_by_hand): E 28 -> 25, N 8 -> 2:
    # (5 + 25 + 11) + (10 + 25 - 2) = 41 + 33 = 74, as unfused.
    qwen = _no_bias(num_experts=128, experts_top_k=8, qk_norm="head")
    fp8 = one(dp=8, ep=8, micro_batch=1, precision="fp8")
    assert _f(moe_layer_ops(qwen, fp8, Stack(moe_router_fusion=True, moe_aux_loss=True))) == 74.0
    # GPT-OSS-like (biases, the clamp, a router bias: +2 B) with an aux loss: E 43 -> 40, N 29 -> 23,
    # B 9 + 2 = 11: (5 + 40 + 11) + (10 + 40 - 23) = 56 + 27 = 83, as unfused (TINY_MOE_OPS + 4 aux
    # loss + 3 clamp + 2 B)
    oss = _tiny_moe(glu_clamp=7.0, router_bias=True)
    bf16 = one(micro_batch=1)
    assert _f(moe_layer_ops(oss, bf16, Stack(moe_router_fusion=True, moe_aux_loss=True))) == 83.0
    assert _f(moe_layer_ops(oss, bf16, Stack(moe_aux_loss=True))) == TINY_MOE_OPS + 4.0 + 3.0 + 2.0
    # graphed with moe_router: the router's forward 1 + 4 + 2 B and its 2 + 4 Python backwards,
    # the norm's 2: 15 off, as unfused (1 + 7 + 2, 2 + 1); never more than the layer dispatches
    graphed = Stack(moe_router_fusion=True, moe_aux_loss=True, cuda_graph_scope=frozenset({"moe_router"}))
    assert _f(moe_layer_ops(oss, bf16, graphed)) == 83.0 - 15.0 + 2.0


def test_a_router_without_aux_loss_dispatches_less() -> None:
    # GPT-OSS routes without a load-balancing loss (Megatron-Bridge gpt_oss_bridge.py "none"; router.py
    # `routing` skips the aux-loss calls when `is_aux_loss_enabled` is false). Unfused, its router is
    # the score, top-k and two scatters, all native: E = 37 + 3 clamp = 40, B = 9 + 2 router bias = 11,
    # N = 2 adds + 4 router + 3 clamp + 18 bias loop = 27: (5 + 40 + 11) + (10 + 40 - 27) = 56 + 23 = 79.
    # Fused, the four are one FusedTopkScoreFunction with a Python backward: E 40 - 3 = 37, N 27 - 4 =
    # 23: (5 + 37 + 11) + (10 + 37 - 23) = 53 + 24 = 77.
    oss = _tiny_moe(glu_clamp=7.0, router_bias=True)
    bf16 = one(micro_batch=1)
    assert _f(moe_layer_ops(oss, bf16, Stack())) == 79.0
    assert _f(moe_layer_ops(oss, bf16, Stack(moe_router_fusion=True))) == 77.0
    # graphed with moe_router: the norm's 2 + 2, the router's forward 1 G + 1 E + 2 B, its backward
    # 2 G + 1 Python: 9 off, 2 replays on
    graphed = Stack(moe_router_fusion=True, cuda_graph_scope=frozenset({"moe_router"}))
    assert _f(moe_layer_ops(oss, bf16, graphed)) == 77.0 - 9.0 + 2.0
    # whatever else the layer has, the aux loss only adds dispatches (4 unfused: 3 forward and the
    # scaler's Python backward; 6 fused: 3 forward, 3 Python backwards)
    for model in (oss, _tiny_moe(), _no_bias(num_experts=16, experts_top_k=2, qk_norm="head")):
        for fused in (False, True):
            more = moe_layer_ops(model, bf16, Stack(moe_router_fusion=fused, moe_aux_loss=True))
            assert _f(more - moe_layer_ops(model, bf16, Stack(moe_router_fusion=fused))) == (6.0 if fused else 4.0)


def test_more_dispatches_never_lower_the_floor(monkeypatch: pytest.MonkeyPatch) -> None:
    # Each feature adds dispatches (q/k norms, MLA, a q LoRA, shared experts and their gate, an
    # expert bias, GPT-OSS's clamp and bias loop, FP8, TP collectives, expert TP), so each raises
    # the count, and a larger count never lowers the wait for the same GPU time.
    _with_floor(monkeypatch, 1.0, ops=1.0)  # 1 s per dispatch
    base: dict[str, Any] = {"num_experts": 16, "experts_top_k": 2}
    mla: dict[str, Any] = {"heads": 8, "kv_lora_rank": 256, "qk_rope_head_dim": 32, "v_head_dim": 64}
    shared: dict[str, Any] = {"num_shared_experts": 1, "shared_expert_ffn": 512}
    variants = [
        ({}, {"qk_norm": "head"}),
        ({}, mla),
        (mla, {**mla, "q_lora_rank": 128}),
        ({}, shared),
        (shared, {**shared, "shared_expert_gate": True}),
        ({}, {"router_bias": True}),
        ({}, {"glu_clamp": 7.0}),
    ]
    layouts = [
        one(dp=8, ep=4, micro_batch=1),
        one(tp=2, dp=4, ep=4, expert_tp=1, micro_batch=1),
        one(tp=2, dp=4, ep=4, expert_tp=1, sequence_parallel=True, micro_batch=1, precision="fp8"),
    ]
    gpu = np.array([0.5])
    for lay in layouts:
        for stack in (Stack(), Stack(ep_dispatcher="deepep")):
            for less, more in variants:
                fewer = moe_layer_ops(_no_bias(**base, **less), lay, stack)
                assert _f(moe_layer_ops(_no_bias(**base, **more), lay, stack)) > _f(fewer), (less, more)
            plain = _no_bias(**base)
            biased = gpt_spec(mlp="gated", **base)  # gpt_spec's MLP biases: the per-expert bias loop
            assert _f(moe_layer_ops(biased, lay, stack)) > _f(moe_layer_ops(plain, lay, stack))
            fp8 = Layouts.of([lay.at(0).model_copy(update={"precision": Precision.FP8})])
            assert _f(moe_layer_ops(plain, fp8, stack)) >= _f(moe_layer_ops(plain, lay, stack))
            waits = [_f(moe_host_wait_s(m, lay, stack, gpu)) for m in (plain, biased)]
            assert waits[1] >= waits[0] > 0.0
            # token dropping and a dense model: no floor, whatever the count
            assert _f(moe_host_wait_s(biased, lay, Stack(token_drop=True), gpu)) == 0.0
            assert _f(moe_host_wait_s(gpt_spec(), lay, stack, gpu)) == 0.0
    # expert TP adds its all-gathers and reduce-scatter, SP its collectives around attention
    sp = one(tp=2, dp=4, ep=4, expert_tp=1, sequence_parallel=True, micro_batch=1)
    etp = one(tp=2, dp=4, ep=4, expert_tp=2, sequence_parallel=True, micro_batch=1)
    single = one(dp=8, ep=4, micro_batch=1)
    model = _no_bias(**base)
    assert (
        _f(moe_layer_ops(model, etp, Stack()))
        > _f(moe_layer_ops(model, sp, Stack()))
        > _f(moe_layer_ops(model, single, Stack()))
    )


def test_moe_host_wait_by_hand(monkeypatch: pytest.MonkeyPatch) -> None:
    # H = 10 ms (TINY_MOE_OPS dispatches), 0.2 of it exposed after the host sync. A layer of 4 ms GPU
    # time takes max(10, 4 + 2) = 10 ms: it waits 6 ms; one of 20 ms takes max(10, 20 + 2) = 22 ms:
    # it waits 2 ms. With a dense first layer (3 of 4 layers route) the mean layer waits 3/4 of
    # that: 4.5 ms and 1.5 ms. Token dropping (static shapes, no host copy) and a dense model never wait.
    from paraplan.cost_models import compute

    _with_floor(monkeypatch, 0.010)
    monkeypatch.setattr(compute, "MOE_HOST_EXPOSED_SHARE", 0.2)
    lay = Layouts.concat([one(micro_batch=1), one(micro_batch=2)])
    gpu = np.array([0.004, 0.020])
    np.testing.assert_allclose(moe_host_wait_s(_tiny_moe(), lay, Stack(), gpu), [0.006, 0.002], rtol=1e-12)
    np.testing.assert_allclose(
        moe_host_wait_s(_tiny_moe(dense_layer_ids=(0,)), lay, Stack(), gpu), [0.0045, 0.0015], rtol=1e-12
    )
    monkeypatch.setattr(compute, "MOE_HOST_EXPOSED_SHARE", 0.0)  # the plain maximum: a GPU-bound layer waits nothing
    np.testing.assert_allclose(moe_host_wait_s(_tiny_moe(), lay, Stack(), gpu), [0.006, 0.0], rtol=1e-12)
    np.testing.assert_array_equal(moe_host_wait_s(_tiny_moe(), lay, Stack(token_drop=True), gpu), [0.0, 0.0])
    np.testing.assert_array_equal(moe_host_wait_s(gpt_spec(), lay, Stack(), gpu), [0.0, 0.0])
    # torchtitan's stack has no floor (0): nothing to wait for
    titan = Layouts.concat([one(micro_batch=1, framework="torchtitan", zero=2)])
    np.testing.assert_array_equal(moe_host_wait_s(_tiny_moe(), titan, Stack(), gpu[:1]), [0.0])


def test_a_host_bound_layer_takes_the_floor_in_the_step(dgx: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
    # One GPU, 4 MoE layers, 2 micro-batches, a floor of 1 s (far above any GPU time of this tiny
    # model): each layer and micro-batch takes exactly 1 s, so the layers' share of the step (their
    # forward and backward, recompute, TP/CP/EP time and the wait) is 2 x 4 x 1 s = 8 s.
    model = _tiny_moe()
    lay = one(micro_batch=1, global_batch=2, seq_len=2048)
    _with_floor(monkeypatch, 0.0)
    free = evaluate(model, dgx, lay, Stack())
    _with_floor(monkeypatch, 1.0)
    floored = evaluate(model, dgx, lay, Stack())
    times = micro_batch_times(model, lay, dgx, Stack())
    fwd_bwd = 2 * 4 * _f(times.layer_fwd_s + times.layer_bwd_s)
    layer_terms = ("recompute", "tp_comm", "cp_comm", "ep_comm", "host_wait")
    assert _f(free.times["host_wait"]) == 0.0
    assert fwd_bwd + sum(_f(floored.times[t]) for t in layer_terms) == pytest.approx(8.0, rel=1e-9)
    assert _f(floored.step_time_s - free.step_time_s) == pytest.approx(_f(floored.times["host_wait"]), rel=1e-9)
    # token dropping runs without the floor: the same step as with no floor at all
    dropped = evaluate(model, dgx, lay, Stack(token_drop=True))
    assert _f(dropped.step_time_s) == pytest.approx(_f(free.step_time_s), rel=1e-12)


# ------------------------------------------------------------------ torchtitan in eager mode


def test_eager_extra_bytes_by_hand(models: dict[str, ModelSpec]) -> None:
    # Llama 3 8B (h 4096, MLP 14336, q 4096, k 1024), torchtitan eager, TP 1, per token. Beyond the
    # fused kernels, each eager RMSNorm moves 36 - 4 = 32 B per element of h forward and 92 - 8 = 84
    # backward; SwiGLU 10 - 6 = 4 and 18 - 12 = 6 per MLP element; rotary 20 - 4 = 16 and
    # 20 - 8 = 12 per element of q and k:
    #   forward  2 x 32 x 4096 + 4 x 14336 + 16 x 5120 = 262,144 + 57,344 + 81,920 = 401,408 B
    #   backward 2 x 84 x 4096 + 6 x 14336 + 12 x 5120 = 688,128 + 86,016 + 61,440 = 835,584 B
    model = models["llama3-8b"]
    tokens = _a(16384.0)
    lay = one(framework="torchtitan", zero=3, dp=8, micro_batch=2, seq_len=8192)
    fwd, bwd = eager_extra_bytes(model, lay, Stack(compiled=False), tokens)
    assert (_f(fwd), _f(bwd)) == (16384 * 401_408.0, 16384 * 835_584.0)
    # launches: 2 norms x 7 + 1 + 5 forward, 2 x 14 + 1 + 4 backward
    kernels = eager_extra_kernels(model, lay, Stack(compiled=False))
    assert (_f(kernels[0]), _f(kernels[1])) == (20.0, 33.0)
    # with the Triton norm (norm_type fused_rmsnorm) only SwiGLU and rotary remain
    fwd, bwd = eager_extra_bytes(model, lay, Stack(compiled=False, fused_norm=True), tokens)
    assert (_f(fwd), _f(bwd)) == (16384 * 139_264.0, 16384 * 147_456.0)
    # compiled, or Megatron-LM's own fused kernels: nothing extra
    assert _f(eager_extra_bytes(model, lay, Stack(compiled=True), tokens)[1]) == 0.0
    megatron = one(dp=8, micro_batch=2, seq_len=8192)
    assert _f(eager_extra_bytes(model, megatron, Stack(compiled=False), tokens)[1]) == 0.0
    assert _f(eager_extra_kernels(model, megatron, Stack(compiled=False))[0]) == 0.0


def test_eager_extra_bytes_split_over_tp(models: dict[str, ModelSpec]) -> None:
    # TP 8 with sequence parallelism: the norms over h/8, SwiGLU and rotary over their TP shards,
    # so everything per token is 1/8 of the TP-1 figure: 401,408 / 8 = 50,176 B forward. Without
    # sequence parallelism every rank repeats the norms on whole tokens: 262,144 + 139,264 / 8
    # = 279,552 B.
    model = models["llama3-8b"]
    tokens = _a(1.0)
    sp = one(framework="torchtitan", zero=3, tp=8, sequence_parallel=True, micro_batch=1, seq_len=8192)
    assert _f(eager_extra_bytes(model, sp, Stack(compiled=False), tokens)[0]) == 50_176.0
    no_sp = one(framework="torchtitan", zero=3, tp=8, sequence_parallel=False, micro_batch=1, seq_len=8192)
    assert _f(eager_extra_bytes(model, no_sp, Stack(compiled=False), tokens)[0]) == 279_552.0


def test_eager_extra_bytes_none_for_layernorm_plain_mlp_learned_positions() -> None:
    # a GPT (LayerNorm, GELU MLP, learned positions): F.layer_norm and F.gelu are one kernel each
    lay = one(framework="torchtitan", zero=3, dp=8, micro_batch=1, seq_len=2048)
    fwd, bwd = eager_extra_bytes(gpt_spec(), lay, Stack(compiled=False), _a(2048.0))
    assert (_f(fwd), _f(bwd)) == (0.0, 0.0)


def test_eager_time_is_in_the_layer_forward_recompute_and_backward(
    models: dict[str, ModelSpec], dgx: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    # on the round cluster (2e12 B/s at memory_bound 1, no launch overhead, kernel efficiency 1):
    # T = 16384 tokens, 16384 x 401,408 B / 2e12 = 3.288334336 ms more forward, and as much more
    # in the op-level recompute (it reruns the elementwise ops); 16384 x 835,584 / 2e12 =
    # 6.845104128 ms more backward
    monkeypatch.setattr("paraplan.cost_models.compute.kernel_efficiency", lambda lay, cluster: np.ones(len(lay)))
    model = models["llama3-8b"]
    lay = one(framework="torchtitan", zero=3, dp=8, micro_batch=2, seq_len=8192, recompute="selective")
    eager = micro_batch_times(model, lay, dgx, Stack(compiled=False))
    fused = micro_batch_times(model, lay, dgx, Stack(compiled=True))
    assert _f(eager.layer_fwd_s - fused.layer_fwd_s) == pytest.approx(3.288334336e-3, rel=1e-12)
    assert _f(eager.layer_recompute_s - fused.layer_recompute_s) == pytest.approx(3.288334336e-3, rel=1e-12)
    assert _f(eager.layer_bwd_s - fused.layer_bwd_s) == pytest.approx(6.845104128e-3, rel=1e-12)


def test_cpu_checkpointing_moves_layer_inputs_to_the_host_over_pcie(dgx: Cluster) -> None:
    # DeepSpeed's cpu_checkpointing with full recompute, one stage of 4 layers, micro-batch 2 of
    # 2048 tokens, 4 micro-batches: each layer's input, 2 * 2048 * 1024 * 2 B = 8,388,608 B, goes to
    # the host in the forward and back in the backward over PCIe (10e9 B/s): 2 * 8388608 / 1e10 =
    # 1.6777216e-3 s per layer and micro-batch, 4 x 4 x that = 2.68435456e-2 s per step
    model = gpt_spec(h=1024, layers=4, heads=16, seq=2048)
    lay = one(framework="deepspeed", tp=1, pp=1, dp=1, micro_batch=2, global_batch=8, seq_len=2048, recompute="full")
    kept = evaluate(model, dgx, lay, Stack(main_grads="bf16", p2p_overlap=False))
    moved = evaluate(model, dgx, lay, Stack(main_grads="bf16", p2p_overlap=False, cpu_checkpointing=True))
    checkpoint = 2 * 2048 * 1024 * 2
    assert moved.times["offload"][0] - kept.times["offload"][0] == pytest.approx(2.68435456e-2, rel=1e-9)
    assert moved.step_time_s[0] - kept.step_time_s[0] == pytest.approx(2.68435456e-2, rel=1e-9)
    # the GPU keeps none of the 4 checkpoints, save the one back for the layer being recomputed
    assert kept.memory.activations[0] - moved.memory.activations[0] == pytest.approx(3 * checkpoint, abs=1.0)
    assert moved.host_bytes[0] - kept.host_bytes[0] == pytest.approx(4 * checkpoint)
    # Megatron-LM keeps its checkpoints on the GPU: the setting changes nothing there
    meg = one(framework="megatron", tp=1, pp=1, dp=1, micro_batch=2, global_batch=8, seq_len=2048, recompute="full")
    assert (
        evaluate(model, dgx, meg, Stack(cpu_checkpointing=True)).step_time_s[0]
        == evaluate(model, dgx, meg, Stack()).step_time_s[0]
    )

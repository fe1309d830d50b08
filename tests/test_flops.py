"""Model and recompute FLOPs against Megatron's closed forms (Narayanan et al. 2021 eq. 3,
Korthikanti et al. 2022 eq. 7) and hand counts for GQA and MoE models."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import gpt_spec, one

from paraplan.cost_models.compute import gemm_s, optimizer_step_s
from paraplan.cost_models.evaluate import evaluate
from paraplan.cost_models.flops import forward_flops_per_token, model_flops_per_step, recompute_flops_per_step
from paraplan.cost_models.memory import stage_params
from paraplan.cost_models.models import load_model
from paraplan.cost_models.stack import Stack
from paraplan.hardware_specs.schema import Cluster

NO_FLASH = Stack(flash_attention=False)
FLASH = Stack(flash_attention=True)

GPT_CASES = [
    # (h, layers, heads, vocab, seq, global batch)
    (1024, 4, 16, 50_000, 2048, 8),
    (12288, 96, 96, 51_200, 2048, 1536),  # GPT-3 as in Narayanan et al. Table 1
    (4096, 32, 32, 32_000, 4096, 64),
]


@pytest.mark.parametrize(("h", "l", "a", "V", "s", "B"), GPT_CASES)
def test_model_flops_match_megatron_formula(h: int, l: int, a: int, V: int, s: int, B: int) -> None:  # noqa: E741
    # Megatron (Korthikanti eq. 7 without recompute): 72 B s l h^2 (1 + s/(6h) + V/(12 l h))
    model = gpt_spec(h=h, layers=l, heads=a, vocab=V, seq=s)
    lay = one(global_batch=B, seq_len=s, recompute="none")
    expected = 72.0 * B * s * l * h**2 * (1 + s / (6 * h) + V / (12 * l * h))
    assert model_flops_per_step(model, lay)[0] == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(("h", "l", "a", "V", "s", "B"), GPT_CASES)
def test_full_recompute_matches_narayanan_eq3(h: int, l: int, a: int, V: int, s: int, B: int) -> None:  # noqa: E741
    # Narayanan et al. 2021 eq. 3: 96 B s l h^2 (1 + s/(6h) + V/(16 l h)). The extra over eq. 7
    # is one more forward of every layer (24 B s l h^2 + 4 B s^2 l h), not of the LM head.
    model = gpt_spec(h=h, layers=l, heads=a, vocab=V, seq=s)
    lay = one(global_batch=B, seq_len=s, recompute="full")
    total = model_flops_per_step(model, lay) + recompute_flops_per_step(model, lay, NO_FLASH)
    expected = 96.0 * B * s * l * h**2 * (1 + s / (6 * h) + V / (16 * l * h))
    assert total[0] == pytest.approx(expected, rel=1e-12)
    extra = recompute_flops_per_step(model, lay, NO_FLASH)[0]
    assert extra == pytest.approx(24.0 * B * s * l * h**2 + 4.0 * B * s * s * l * h, rel=1e-12)


def test_full_recompute_reruns_attention_even_with_flash() -> None:
    # Full recompute re-runs every layer's forward, attention core included, whatever the kernel.
    model = gpt_spec()
    lay = one(global_batch=8, seq_len=2048, recompute="full")
    assert recompute_flops_per_step(model, lay, FLASH)[0] == recompute_flops_per_step(model, lay, NO_FLASH)[0]


def test_selective_recompute_adds_attention_core_without_flash() -> None:
    # Korthikanti Sec 4.2: selective recompute re-runs QK^T and softmax*V: 4 B s^2 l h FLOPs.
    h, l, a, V, s, B = 1024, 4, 16, 50_000, 2048, 8  # noqa: E741
    model = gpt_spec(h=h, layers=l, heads=a, vocab=V, seq=s)
    lay = one(global_batch=B, seq_len=s, recompute="selective")
    assert recompute_flops_per_step(model, lay, NO_FLASH)[0] == pytest.approx(4.0 * B * s * s * l * h, rel=1e-12)
    # flash attention's backward recomputes the scores anyway: nothing extra
    assert recompute_flops_per_step(model, lay, FLASH)[0] == 0.0


def test_no_recompute_adds_nothing() -> None:
    model = gpt_spec()
    lay = one(global_batch=8, seq_len=2048, recompute="none")
    assert recompute_flops_per_step(model, lay, NO_FLASH)[0] == 0.0
    assert recompute_flops_per_step(model, lay, FLASH)[0] == 0.0


def test_llama2_70b_forward_per_token_by_hand() -> None:
    # GQA, gated MLP. Matmul weights per layer a token passes:
    #   Q + O 2*8192*8192 = 134,217,728; K + V 2*8192*1024 = 16,777,216; MLP 3*8192*28672 = 704,643,072
    #   => 855,638,016 (the layer's params minus its two norms, 16,384)
    # forward per token: 80*(2*855,638,016 + 4*s*8192) + 2*32000*8192
    model = load_model("llama2-70b")
    s = 4096
    w = 855_638_016
    expected = 80 * (2 * w + 4 * s * 8192) + 2 * 32000 * 8192
    assert forward_flops_per_token(model, np.array([float(s)]))[0] == expected
    # 6N-style: model FLOPs per step = 3 * tokens * forward
    lay = one(global_batch=16, seq_len=s)
    assert model_flops_per_step(model, lay)[0] == pytest.approx(3 * 16 * s * expected, rel=1e-12)


def test_mixtral_flops_use_top2_experts() -> None:
    # h=4096, q=4096, kv=1024, f=14336, 8 experts, top-2, l=32, V=32000.
    # per layer matmul weights one token touches:
    #   attention 2*4096*4096 + 2*4096*1024 = 41,943,040
    #   two experts 2*3*4096*14336 = 352,321,536; router 4096*8 = 32,768  => 394,297,344
    # forward per token at s: 32*(2*394,297,344 + 4*s*4096) + 2*32000*4096
    model = load_model("mixtral-8x7b")
    s = 4096
    expected = 32 * (2 * 394_297_344 + 4 * s * 4096) + 2 * 32000 * 4096
    assert forward_flops_per_token(model, np.array([float(s)]))[0] == expected
    # about 6 * active params per token for the matmuls (active 12.88B includes the 131M input
    # embedding and the norms, which do no matmul): within 1.5%
    lay = one(global_batch=1, seq_len=s)
    dense_part = model_flops_per_step(model, lay)[0] - 3 * s * 32 * 4 * s * 4096
    assert dense_part / s == pytest.approx(6 * model.active_params, rel=1.5e-2)
    # and far below 6 * total params
    assert dense_part / s < 0.3 * 6 * model.total_params


def test_flops_scale_linearly_with_global_batch() -> None:
    model = load_model("llama3-8b")
    small = model_flops_per_step(model, one(global_batch=64, seq_len=8192))[0]
    big = model_flops_per_step(model, one(global_batch=128, seq_len=8192))[0]
    assert big == pytest.approx(2 * small, rel=1e-12)


def test_flops_do_not_depend_on_parallel_layout() -> None:
    model = load_model("llama2-13b")
    a = model_flops_per_step(model, one(tp=1, pp=1, dp=1, micro_batch=1))[0]
    b = model_flops_per_step(model, one(tp=8, pp=4, dp=16, cp=2, micro_batch=4, virtual_stages=2))[0]
    assert a == b


def test_mfu_definition_in_evaluate(a100: Cluster) -> None:
    # MFU = F_model / (step * GPUs * peak); HFU adds the recompute FLOPs;
    # tflops_per_gpu = F_model / (step * GPUs) / 1e12
    model = load_model("llama2-7b")
    lay = one(tp=2, pp=2, dp=2, micro_batch=2, global_batch=64, recompute="full")
    ev = evaluate(model, a100, lay, NO_FLASH)
    step, gpus, peak = ev.step_time_s[0], 8, a100.gpu.peak_bf16_flops
    flops = model_flops_per_step(model, lay)[0]
    extra = recompute_flops_per_step(model, lay, NO_FLASH)[0]
    assert ev.mfu[0] == pytest.approx(flops / (step * gpus * peak), rel=1e-12)
    assert ev.hfu[0] == pytest.approx((flops + extra) / (step * gpus * peak), rel=1e-12)
    assert ev.tflops_per_gpu[0] * 1e12 == pytest.approx(flops / (step * gpus), rel=1e-12)
    # full recompute spends FLOPs again: HFU strictly above MFU
    assert ev.hfu[0] > ev.mfu[0]


def test_gemm_roofline_by_hand(a100: Cluster) -> None:
    # 4096^3 GEMM: q(4096) = 4096/(4096 + half); compute 2*4096^3 / (peak * gemm_max * q^3);
    # memory 2*(3*4096^2) bytes / (HBM bw * memory_bound); plus one kernel launch
    eff, gpu = a100.efficiency, a100.gpu
    q = 4096 / (4096 + eff.gemm_half_dim)
    compute = 2 * 4096**3 / (gpu.peak_bf16_flops * eff.gemm_max * q**3)
    memory = 2 * 3 * 4096**2 / (gpu.mem_bw_bytes_per_s * eff.memory_bound)
    x = np.array([4096.0])
    got = gemm_s(x, x, x, gpu.peak_bf16_flops, a100)[0]
    assert got == pytest.approx(max(compute, memory) + eff.kernel_overhead_s, rel=1e-12)
    assert compute > memory  # large square GEMMs are compute-bound
    # a skinny GEMM (8 tokens) is memory-bound: 2*(8*4096 + 4096^2 + 8*4096) bytes
    m = np.array([8.0])
    skinny = 2 * (8 * 4096 + 4096**2 + 8 * 4096) / (gpu.mem_bw_bytes_per_s * eff.memory_bound)
    assert gemm_s(m, x, x, gpu.peak_bf16_flops, a100)[0] >= skinny + eff.kernel_overhead_s


def test_optimizer_step_by_hand(a100: Cluster) -> None:
    # fused Adam streams per local parameter 24 B (master, m, v read + written) + the gradient
    # read (4 B fp32) + the bf16 weight written (2 B) = 30 B; ZeRO-1 over DP8 => N/8 parameters
    model = load_model("llama2-7b")
    lay = one(dp=8, zero=1)
    params = stage_params(model, lay, True, True)
    expected = 6_738_415_616 / 8 * 30 / (a100.gpu.mem_bw_bytes_per_s * a100.efficiency.memory_bound)
    assert optimizer_step_s(params, lay, a100, Stack())[0] == pytest.approx(expected, rel=1e-12)
    # bf16 gradients: 28 B per parameter
    got = optimizer_step_s(params, lay, a100, Stack(main_grads="bf16"))[0]
    assert got == pytest.approx(expected * 28 / 30, rel=1e-12)

"""Model and recompute FLOPs against published closed forms and hand counts.

Two conventions (cost_models/flops.py): PaLM's and Megatron-LM's count every query against
every key (s_eff = s); the causal-aware count, which `mfu` uses, (s + 1)/2 keys per query.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import gpt_spec, one

from paraplan.cost_models.flops import forward_flops_per_token, model_flops_per_step, recompute_flops_per_step
from paraplan.cost_models.models import ModelSpec, load_hf_config, load_model


def _f(x: object) -> float:
    return float(np.asarray(x).reshape(-1)[0])


def _palm(model: ModelSpec, **knobs: object) -> float:
    return _f(model_flops_per_step(model, one(**knobs), causal=False))


def _causal(model: ModelSpec, **knobs: object) -> float:
    return _f(model_flops_per_step(model, one(**knobs), causal=True))


# ------------------------------------------------------------------ PaLM / Megatron convention


def test_gpt3_175b_palm_count_is_megatrons_closed_form() -> None:
    # Korthikanti et al. 2022 eq. 7 (Narayanan et al. 2021 eq. 3 without recompute):
    #   72 B s l h^2 (1 + s/(6h) + V/(12 l h)) for a GPT.
    # GPT-3 175B as in Narayanan et al. Table 1: h 12288, l 96, a 96, V 51200, s 2048, B 1536:
    #   72 * 1536 * 2048 * 96 * 12288^2 * (1 + 2048/73728 + 51200/14155776)
    #   = 3,386,196,746,387,324,928 FLOPs per step (3.39e18)
    model = gpt_spec(h=12288, layers=96, heads=96, vocab=51_200, seq=2048)
    got = _palm(model, global_batch=1536, seq_len=2048)
    assert got == pytest.approx(3_386_196_746_387_324_928, rel=1e-12)


def test_small_gpt_palm_count_by_hand() -> None:
    # h 1024, l 4, V 50,000, s 2048, B 8:
    #   72 * 8 * 2048 * 4 * 1024^2 * (1 + 2048/6144 + 50000/49152) = 11,630,234,566,656
    model = gpt_spec(h=1024, layers=4, heads=16, vocab=50_000, seq=2048)
    assert _palm(model, global_batch=8, seq_len=2048) == pytest.approx(11_630_234_566_656, rel=1e-12)


# ------------------------------------------------------------------ causal-aware count


def test_causal_count_attends_to_half_the_keys() -> None:
    # Under the causal mask a query attends to (s + 1)/2 keys instead of s, so the attention
    # term 12 B s l h s_eff (3 passes x 4 s_eff h per token and layer) shrinks by
    # 12 B s l h (s - (s+1)/2) = 6 B s l h (s - 1). For h 1024, l 4, s 2048, B 8:
    #   6 * 8 * 2048 * 4 * 1024 * 2047 = 824,231,067,648
    model = gpt_spec(h=1024, layers=4, heads=16, vocab=50_000, seq=2048)
    palm = _palm(model, global_batch=8, seq_len=2048)
    causal = _causal(model, global_batch=8, seq_len=2048)
    assert palm - causal == pytest.approx(824_231_067_648, rel=1e-9)


def test_llama3_8b_at_128k_the_palm_count_exceeds_the_work_by_70_percent(models: dict[str, ModelSpec]) -> None:
    # Llama 3 8B: h 4096, l 32, a*d 4096, g*d 1024, f 14336, V 128,256.
    #   matmul weights per layer 2*4096^2 + 2*4096*1024 + 3*4096*14336 = 218,103,808
    #   forward per token = 32 (2 * 218,103,808 + 4 s_eff 4096) + 2 * 128,256 * 4096
    # s = 131,072: PaLM s_eff = s           -> 83,728,793,600
    #              causal s_eff = 65,536.5  -> 49,369,317,376   (ratio 1.696)
    # s = 4096:    PaLM 17,156,800,512, causal 16,083,320,832   (ratio 1.067)
    model = models["llama3-8b"]
    assert _f(forward_flops_per_token(model, np.array([131_072.0]))) == 83_728_793_600
    assert _f(forward_flops_per_token(model, np.array([65_536.5]))) == 49_369_317_376
    long = _palm(model, seq_len=131_072, global_batch=1) / _causal(model, seq_len=131_072, global_batch=1)
    short = _palm(model, seq_len=4096, global_batch=1) / _causal(model, seq_len=4096, global_batch=1)
    assert long == pytest.approx(83_728_793_600 / 49_369_317_376, rel=1e-12)
    assert short == pytest.approx(17_156_800_512 / 16_083_320_832, rel=1e-12)


def test_llama2_70b_forward_per_token_by_hand(models: dict[str, ModelSpec]) -> None:
    # GQA, gated MLP (Touvron et al. 2023: h 8192, 64 heads, 8 KV heads, f 28672, l 80, V 32000).
    # Matmul weights per layer a token passes:
    #   Q + O 2 * 8192^2 = 134,217,728; K + V 2 * 8192 * 1024 = 16,777,216;
    #   MLP 3 * 8192 * 28672 = 704,643,072                       => 855,638,016
    # forward per token at s_eff keys: 80 (2 * 855,638,016 + 4 s_eff 8192) + 2 * 32000 * 8192
    #   s_eff = 4096: 80 * (1,711,276,032 + 134,217,728) + 524,288,000 = 148,163,788,800
    model = models["llama2-70b"]
    assert _f(forward_flops_per_token(model, np.array([4096.0]))) == 148_163_788_800
    # model FLOPs per step = 3 passes x tokens x forward: B 16, s 4096 => 3 * 65,536 * forward
    assert _palm(model, global_batch=16, seq_len=4096) == pytest.approx(3 * 65_536 * 148_163_788_800, rel=1e-12)


def test_mixtral_counts_the_top2_experts_and_the_router(models: dict[str, ModelSpec]) -> None:
    # Mixtral 8x7B: h 4096, a*d 4096, g*d 1024, f 14336, 8 experts, top-2, l 32, V 32000.
    # Matmul weights per layer one token touches:
    #   attention 2 * 4096^2 + 2 * 4096 * 1024 = 41,943,040
    #   two experts 2 * 3 * 4096 * 14336 = 352,321,536; router 4096 * 8 = 32,768
    #   => 394,297,344
    # forward per token at 4096 keys: 32 (2 * 394,297,344 + 4 * 4096 * 4096) + 2 * 32000 * 4096
    #   = 32 * (788,594,688 + 67,108,864) + 262,144,000 = 27,644,657,664
    model = models["mixtral-8x7b"]
    assert _f(forward_flops_per_token(model, np.array([4096.0]))) == 27_644_657_664


def _moe_with_shared_and_dense() -> ModelSpec:
    """h 256, 4 layers, 4 heads of 64; layer 0 dense (MLP width 512), layers 1-3 MoE: 8 experts of
    width 128, top-2, one shared expert of width 256; gated MLPs; V 1000; untied."""
    return ModelSpec(
        name="moe-test", hidden_size=256, num_layers=4, num_heads=4, num_kv_heads=4, head_dim=64,
        ffn_hidden_size=128, vocab_size=1000, max_seq_len=4096, mlp="gated", tied_embeddings=False,
        num_experts=8, experts_top_k=2, num_shared_experts=1, shared_expert_ffn=256, dense_layer_ids=(0,),
        dense_ffn_hidden_size=512,
    )  # fmt: skip


def test_shared_experts_and_dense_layers_are_counted() -> None:
    # Matmul weights one token passes (DeepSeekMoE layout):
    #   attention, every layer: 4 * 256 * 256                          = 262,144
    #   dense layer 0 MLP: 3 * 256 * 512                                = 393,216
    #   MoE layers 1-3: router 256 * 8 = 2,048; top-2 experts 2 * 3 * 256 * 128 = 196,608;
    #                   shared expert 3 * 256 * 256 = 196,608         => 395,264 each
    #   => 4 * 262,144 + 393,216 + 3 * 395,264 = 2,627,584; LM head 1000 * 256 = 256,000
    # forward per token with 0 keys: 2 * (2,627,584 + 256,000) = 5,767,168
    assert _f(forward_flops_per_token(_moe_with_shared_and_dense(), np.array([0.0]))) == 5_767_168


def test_sliding_window_layers_attend_to_fewer_keys() -> None:
    # Every layer slides over w = 1024 keys; s = 4096. Mean causal keys per query:
    #   (w (w + 1)/2 + (s - w) w) / s = (524,800 + 3,145,728) / 4096 = 896.125
    # instead of (s + 1)/2 = 2048.5. Per step the attention term drops by
    #   3 B s l 4 (a d) (2048.5 - 896.125), with B 1, l 4, a*d 1024:
    #   3 * 4096 * 4 * 4 * 1024 * 1152.375 = 232,003,731,456
    full = gpt_spec(h=1024, layers=4, heads=16, seq=4096)
    sliding = gpt_spec(h=1024, layers=4, heads=16, seq=4096, sliding_window=1024)
    drop = _causal(full, seq_len=4096, global_batch=1) - _causal(sliding, seq_len=4096, global_batch=1)
    assert drop == pytest.approx(232_003_731_456, rel=1e-9)


# ------------------------------------------------------------------ recompute FLOPs (HFU - MFU)

GPT_RECOMPUTE = {"global_batch": 8, "seq_len": 2048}  # with gpt_spec(h 1024, l 4): B s l = 65,536


@pytest.mark.parametrize(
    ("knobs", "expected"),
    [
        # nothing recomputed
        ({"recompute": "none"}, 0),
        # Full: one more forward of every layer (Narayanan et al. 2021 eq. 3's 96 vs 72), causal:
        #   B s l (24 h^2 + 4 h (s+1)/2) = 65,536 * (25,165,824 + 4,196,352) = 1,924,279,566,336
        ({"recompute": "full"}, 1_924_279_566_336),
        # Block method, 1 of the 4 layers of the chunk: a quarter of that = 481,069,891,584
        ({"recompute": "full", "recompute_layers": 1}, 481_069_891_584),
        # Megatron's selective (Korthikanti Sec 4.2): the attention core, QK^T and softmax.V:
        #   B s l 4 h (s+1)/2 = 65,536 * 4,196,352 = 275,012,124,672
        ({"recompute": "selective"}, 275_012_124_672),
        # torchtitan's op-level policy: every other matmul, half the 24 h^2 per token and layer:
        #   B s l 12 h^2 = 65,536 * 12,582,912 = 824,633,720,832
        ({"recompute": "selective", "framework": "torchtitan"}, 824_633_720_832),
    ],
)
def test_recompute_flops_by_hand(knobs: dict[str, Any], expected: int) -> None:
    model = gpt_spec(h=1024, layers=4, heads=16, vocab=50_000, seq=2048)
    got = _f(recompute_flops_per_step(model, one(**GPT_RECOMPUTE, **knobs)))
    assert got == pytest.approx(expected, rel=1e-12)


def test_flops_do_not_depend_on_the_layout(models: dict[str, ModelSpec]) -> None:
    # Model FLOPs count the work of the model, not of its layout (Chowdhery et al. 2022 App. B).
    model = models["llama2-13b"]
    plain = one(global_batch=64, seq_len=4096)
    split = one(
        tp=8, pp=4, dp=16, cp=2, micro_batch=4, global_batch=64, seq_len=4096, virtual_stages=2, zero=1,
        sequence_parallel=True, precision="fp8", recompute="full", framework="torchtitan", cp_comm="allgather",
    )  # fmt: skip
    for causal in (True, False):
        assert _f(model_flops_per_step(model, plain, causal)) == _f(model_flops_per_step(model, split, causal))


def test_mtp_flops_by_hand() -> None:
    # DeepSeek-V3 at 4K, causal keys 2048.5: one MTP module per token forward = 2 x (eh_proj
    # 102,760,448 + MoE layer 585,302,016 + head 926,679,040) + 2 x 2048.5 x (128 x 192 + 128 x 128)
    # = 3,229,483,008 + 167,813,120 = 3,397,296,128, 3 x that per token per step; Megatron-Bridge's
    # 'w/ MTP' table row (557 against 534 TFLOP/s/GPU without, row note) is 4.1% more work.
    model = load_hf_config(Path(__file__).parent / "data" / "hf_configs" / "deepseek-v3.json")
    lay = one(dp=256, ep=8, seq_len=4096, global_batch=2048, micro_batch=1)
    plain = _f(model_flops_per_step(model, lay, causal=True))
    with_mtp = _f(model_flops_per_step(model, lay, causal=True, mtp=True))
    assert with_mtp - plain == pytest.approx(3.0 * 2048 * 4096 * 3_397_296_128, rel=1e-12)
    assert with_mtp / plain == pytest.approx(557 / 534, rel=0.01)
    dense = load_model("llama3-8b")
    assert _f(model_flops_per_step(dense, lay, mtp=True)) == _f(model_flops_per_step(dense, lay))


def test_mtp_layer_recomputed_like_the_others() -> None:
    # full recompute of every layer: 61 decoder layers + 1 MTP layer priced as the mean layer, so
    # the recompute FLOPs grow by exactly 62/61 with the module trained; none stays none
    model = load_hf_config(Path(__file__).parent / "data" / "hf_configs" / "deepseek-v3.json")
    lay = one(dp=256, ep=8, seq_len=4096, global_batch=2048, micro_batch=1, recompute="full")
    assert _f(recompute_flops_per_step(model, lay, mtp=True)) == pytest.approx(
        _f(recompute_flops_per_step(model, lay)) * 62 / 61, rel=1e-12
    )
    none = one(dp=256, ep=8, seq_len=4096, global_batch=2048, micro_batch=1)
    assert _f(recompute_flops_per_step(model, none, mtp=True)) == 0.0

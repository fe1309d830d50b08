"""Hybrid Mamba-2 models (`ModelSpec.layer_pattern`: Nemotron-H, Mamba-2): parameter counts against
the published totals and by hand, FLOPs of one Mamba layer by hand, the framework rules, the
Megatron-LM launch flags, and that the mean layer prices each kind of block on its share."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import paraplan
from paraplan.cost_models.candidates import Layouts
from paraplan.cost_models.compute import mamba_mixer_s
from paraplan.cost_models.errors import InputError
from paraplan.cost_models.flops import forward_flops_per_token
from paraplan.cost_models.layout import Framework, Layout
from paraplan.cost_models.limits import Target, limit_checks
from paraplan.cost_models.memory import mamba_saved_bytes
from paraplan.cost_models.models import ModelSpec, load_hf_config, model_from_config
from paraplan.cost_models.traffic import linear_blocks
from paraplan.hardware_specs.loader import load_cluster
from paraplan.hardware_specs.schema import Cluster
from paraplan.launch.emitters import check_emitted, emit_launch
from paraplan.launch.importer import layout_from_launch, read_launch_text

HF_CONFIGS = Path(__file__).parent / "data" / "hf_configs"


def _real(name: str) -> ModelSpec:
    return load_hf_config(HF_CONFIGS / f"{name}.json")


def _toy(pattern: str, **extra: object) -> ModelSpec:
    """A small Nemotron-H-style config (keys of transformers' NemotronHConfig)."""
    config: dict[str, object] = {
        "model_type": "nemotron_h", "hidden_size": 256, "hybrid_override_pattern": pattern,
        "num_hidden_layers": len(pattern), "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64,
        "intermediate_size": 1024, "mamba_num_heads": 8, "mamba_head_dim": 32, "ssm_state_size": 16,
        "n_groups": 2, "conv_kernel": 4, "chunk_size": 128, "vocab_size": 1000, "max_position_embeddings": 4096,
    }  # fmt: skip
    config.update(extra)
    return model_from_config(config, "toy")


# ===================================================================== parameters


def test_nemotron_h_8b_total() -> None:
    # nvidia/Nemotron-H-8B-Base-8K: "8B" (arXiv:2504.03624); the checkpoint holds 8,100,852,736
    # parameters (a public per-module count of the HF checkpoint). Hand count: h 4096, 24 Mamba, 4
    # attention, 24 MLP layers. Mamba: in_proj 4096 x (2*8192 + 2*8*128 + 128) = 76,021,760, conv
    # 10240 x 5 = 51,200, A_log/D/dt_bias 384, norm 8192, out_proj 33,554,432, pre-norm 4096 ->
    # 109,640,064. Attention (32 heads, 8 KV, 128): 4096 x (4096 + 2 x 1024) + 4096 x 4096 + 4096 =
    # 41,947,136. MLP (relu2, up/down 21504): 2 x 4096 x 21504 + 4096 = 176,164,864. Embedding and
    # head 2 x 131072 x 4096, final norm 4096.
    m = _real("nemotron-h-8b-base-8k")
    by_hand = 24 * 109_640_064 + 4 * 41_947_136 + 24 * 176_164_864 + 2 * 131072 * 4096 + 4096
    assert m.total_params == by_hand == 8_100_852_736
    assert m.layer_pattern is not None and m.layer_pattern.count("M") == 24


def test_nemotron_h_56b_total_within_1pct() -> None:
    # Nemotron-H-56B-Base-8K: 56B (arXiv:2504.03624, the model card)
    m = _real("nemotron-h-56b-base-8k")
    assert m.num_layers == 118
    assert abs(m.total_params / 56e9 - 1) < 0.01


def test_nemotron_3_nano_total_and_active() -> None:
    # NVIDIA-Nemotron-3-Nano-30B-A3B model card: 31.6B total, about 3.2B active per token (3.6B with
    # the embeddings). 23 Mamba, 23 MoE (128 routed + 1 shared expert, top-6), 6 attention layers.
    m = _real("nemotron-3-nano-30b-a3b")
    assert (m.layer_pattern or "").count("E") == m.num_moe_layers == 23
    assert abs(m.total_params / 31.6e9 - 1) < 0.01
    assert abs(m.active_params / 3.6e9 - 1) < 0.01  # input embedding and head included
    assert abs((m.active_params - m.embedding_params) / 3.2e9 - 1) < 0.02


def test_one_mamba_layer_by_hand() -> None:
    # h 256, 8 heads x 32 = d 256, 2 groups, state 16, kernel 4: in_proj 256 x (512 + 64 + 8) =
    # 149,504; conv (256 + 64) x (4 + 1) = 1,600; A_log, D, dt_bias 24; gated norm 256; out_proj
    # 256 x 256 = 65,536 -> 216,920, + the pre-norm 256.
    m = _toy("M*")
    assert m.mamba_params == 216_920
    assert m.layer_param_counts()[0] == 216_920 + 256
    assert m.mamba_matmul_params == 149_504 + 65_536


def test_pattern_and_config_mismatch_refused() -> None:
    with pytest.raises(InputError, match="hybrid_override_pattern"):
        _toy("MX*")
    with pytest.raises(InputError, match="mamba_proj_bias"):
        _toy("M*", mamba_proj_bias=True)


def test_layers_block_type_reads_as_the_pattern() -> None:
    # NemotronHConfig maps hybrid_override_pattern onto layers_block_type and back
    blocks = ["mamba", "mlp", "attention", "moe"]
    m = _toy("M-*E", hybrid_override_pattern=None, layers_block_type=blocks, n_routed_experts=4,
             num_experts_per_tok=2, moe_intermediate_size=128, moe_shared_expert_intermediate_size=256)  # fmt: skip
    assert m.layer_pattern == "M-*E"
    assert m.layer_kinds() == ("mamba", "dense", "attention", "moe")


# ===================================================================== FLOPs


def test_mamba_layer_forward_flops_by_hand() -> None:
    # A one-layer pure Mamba stack ("M"), at any sequence length (no attention): forward FLOPs per
    # token = 2 x (in_proj + out_proj weights) + the SSD scan + the LM head 2 V h. The scan (chunk
    # 128, N 16, G 2, d 256): C B^T 2 x 128 x 16 x 2 = 8,192; the intra-chunk output (128 + 1) x 256
    # = 33,024; the chunk states and the inter-chunk output 4 x 16 x 256 = 16,384 -> 57,600.
    m = model_from_config({"model_type": "mamba2", "hidden_size": 256, "num_hidden_layers": 1, "num_heads": 8,
                           "head_dim": 32, "state_size": 16, "n_groups": 2, "chunk_size": 128,
                           "vocab_size": 1000}, "m")  # fmt: skip
    assert m.mamba_scan_flops_per_token == 57_600
    expected = 2 * (149_504 + 65_536) + 57_600 + 2 * 1000 * 256
    assert forward_flops_per_token(m, np.array([2048.5]))[0] == pytest.approx(expected, rel=1e-12)


def test_attention_scores_count_on_attention_layers_only() -> None:
    # "M*": one attention layer of two. Its scores, 2 x keys x (a d + a d) with a d = 256, count once.
    m = _toy("M*")
    keys = 1000.0
    scores = 2 * keys * (256 + 256)
    matmuls = 2 * (m.mamba_matmul_params + m.attention_matmul_params)
    expected = matmuls + scores + m.mamba_scan_flops_per_token + 2 * 1000 * 256
    assert forward_flops_per_token(m, np.array([keys]))[0] == pytest.approx(expected, rel=1e-12)


# ===================================================================== shares and memory


def test_shares_of_a_pattern() -> None:
    m = _toy("MM*-")
    assert (m.mamba_share, m.attention_share, m.dense_mlp_share, m.moe_share) == (0.5, 0.25, 0.25, 0.0)
    assert m.blocks_per_layer == 1 and m.norms_per_layer == 1


def test_mamba_saved_bytes_by_hand() -> None:
    # in_proj output 2 x 584, out_x, norm input, out_proj input 3 x 2 x 256, rstd 4 x 2 groups
    assert mamba_saved_bytes(_toy("M*")) == 2 * 584 + 6 * 256 + 8


def test_mamba_mixer_time_by_hand(dgx: Cluster) -> None:
    # toy "M*": d 256 (8 heads x 32), N 16, G 2, Q 128, c = 256 + 2 x 2 x 16 = 320, in_proj width
    # w = 2 x 256 + 2 x 2 x 16 + 8 = 584; 1,024 tokens at TP1 on the round cluster (attention at
    # 1e14 FLOP/s, HBM 2e12 B/s, no launch cost).
    # scan FLOPs a token: 2 Q N G + (Q + 1) d + 4 N d = 8,192 + 33,024 + 16,384 = 57,600;
    #   recomputed in the backward: 2 Q N G + 2 N d = 16,384
    # bytes a token: copies, conv, scan I/O, norm 4w + 4d + 4c + 2(c + d + H) + 4d + 4d = 7,856;
    #   between the SSD kernels, forward 24 H + 2 c + 12 d N / Q + 8 G Q = 192 + 640 + 384 + 2,048
    #   = 3,264; backward 34 d N / Q + 24 G Q = 1,088 + 6,144 = 7,232
    # forward 1024 x 57,600 / 1e14 + 1024 x (7,856 + 3,264) / 2e12 = 0.589824 + 5.69344 us;
    # backward 1024 x 131,584 / 1e14 + 1024 x (2 x 7,856 + 7,232) / 2e12 = 1.34742016 + 11.747328 us
    m = _toy("M*")
    assert m.mamba_scan_intermediate_bytes_per_token == (3_264.0, 7_232.0)
    fwd, bwd = mamba_mixer_s(m, Layouts.of([Layout(global_batch=8, seq_len=1024)]), dgx)
    assert float(fwd[0]) == pytest.approx(6.283264e-6, rel=1e-9)
    assert float(bwd[0]) == pytest.approx(1.309474816e-5, rel=1e-9)


@given(
    seq=st.sampled_from([256, 1000, 4096]),
    tp=st.sampled_from([1, 2]),
    state=st.sampled_from([16, 64, 128]),
    chunk=st.sampled_from([64, 128, 256]),
)
def test_mamba_mixer_time_is_per_token_and_split_over_tp(
    dgx: Cluster, seq: int, tp: int, state: int, chunk: int
) -> None:
    # without launch costs every term of the mixer is per token and per head (or group) on the
    # GPU: twice the tokens take twice the time, TP ranks each do 1/TP of it
    m = _toy("M*", ssm_state_size=state, chunk_size=chunk)
    one = [mamba_mixer_s(m, Layouts.of([Layout(global_batch=8, seq_len=seq, tp=t)]), dgx) for t in (1, tp)]
    two = mamba_mixer_s(m, Layouts.of([Layout(global_batch=8, seq_len=2 * seq)]), dgx)
    for k in (0, 1):
        assert float(two[k][0]) == pytest.approx(2.0 * float(one[0][k][0]), rel=1e-12)
        assert float(one[1][k][0]) == pytest.approx(float(one[0][k][0]) / tp, rel=1e-12)


def test_nemotron_3_nano_ssd_intermediates_by_hand() -> None:
    # d 4096, N 128, Q 128, G 8, H 64, c = 4096 + 2 x 8 x 128 = 6144:
    # forward 24 x 64 + 2 x 6144 + 12 x 4096 + 8 x 1024 = 71,168; backward 34 x 4096 + 24 x 1024
    m = _real("nemotron-3-nano-30b-a3b")
    assert m.mamba_scan_intermediate_bytes_per_token == (71_168.0, 163_840.0)


# ===================================================================== frameworks and limits


def _checks(model: ModelSpec, **knobs: object) -> dict[str, bool]:
    cluster = load_cluster("h100-sxm")
    lay = Layouts.of([Layout(global_batch=8, **knobs)])
    return {name: bool(mask[0]) for name, mask in limit_checks(Target(model, cluster), lay).items()}


def test_only_megatron_trains_hybrid_models() -> None:
    m = _toy("M*")
    assert not _checks(m, framework=Framework.MEGATRON)["hybrid"]
    assert _checks(m, framework=Framework.TORCHTITAN)["hybrid"]
    assert _checks(m, framework=Framework.DEEPSPEED)["hybrid"]
    assert _checks(m, framework=Framework.MEGATRON, cp=2, dp=1)["hybrid"]  # Mamba CP not modelled
    assert not _checks(ModelSpec(name="d", hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=4, head_dim=16,
                                 ffn_hidden_size=128, vocab_size=100, max_seq_len=64, mlp="gated",
                                 tied_embeddings=False), framework=Framework.TORCHTITAN)["hybrid"]  # fmt: skip


def test_tp_must_divide_mamba_groups() -> None:
    m = _toy("M*")  # 8 heads, 2 groups
    assert not _checks(m, tp=2)["mamba_heads"]
    assert _checks(m, tp=4)["mamba_heads"]


# ===================================================================== launch


def test_megatron_launch_of_a_hybrid_model() -> None:
    m = _real("nemotron-3-nano-30b-a3b")
    lay = Layout(tp=2, pp=2, dp=4, ep=2, global_batch=64, seq_len=8192, zero=1, virtual_stages=2,
                 sequence_parallel=True)  # fmt: skip
    text = emit_launch("megatron", m, lay)
    assert check_emitted("megatron", text) == []
    assert "pretrain_hybrid.py" in text and "pretrain_gpt.py" not in text
    # 52 layers over PP 2 x 2 chunks of 13, in layer order, '|' between the chunks
    pattern = m.layer_pattern or ""
    chunks = "|".join(pattern[i : i + 13] for i in range(0, 52, 13))
    assert f"--hybrid-layer-pattern '{chunks}'" in text
    for flag in ("--mamba-num-heads 64", "--mamba-head-dim 64", "--mamba-state-dim 128", "--mamba-num-groups 8",
                 "--position-embedding-type none", "--squared-relu"):  # fmt: skip
        assert flag in text
    assert "--num-virtual-stages-per-pipeline-rank" not in text


def test_importer_reads_the_split_back_from_the_pattern() -> None:
    # 118 layers over PP 4 x 2 virtual stages with 29 layers on the first and last ranks: the
    # emitted pattern's '|' segments carry the split, and the importer reads it back
    m = _real("nemotron-h-56b-base-8k")
    lay = Layout(tp=8, pp=4, dp=8, global_batch=1024, virtual_stages=2, first_stage_layers=29, last_stage_layers=29,
                 sequence_parallel=True, zero=1)  # fmt: skip
    text = emit_launch("megatron", m, lay)
    knobs, _, _, notes = layout_from_launch(read_launch_text(text, "megatron"), m)
    assert (knobs["virtual_stages"], knobs["first_stage_layers"], knobs["last_stage_layers"]) == (2, 29, 29)
    assert not [n for n in notes if "layer pattern" in n]  # the pattern is the model's


def test_hybrid_model_is_refused_by_other_emitters() -> None:
    m = _toy("M*")
    with pytest.raises(InputError, match="Mamba"):
        emit_launch("deepspeed", m, Layout(framework=Framework.DEEPSPEED, global_batch=8))


def test_transformer_shares_stay_exact() -> None:
    # a transformer decoder: every layer attention + MLP, the shares exactly 1 and 0
    m = _real("mixtral-8x7b")
    assert (m.attention_share, m.mamba_share, m.blocks_per_layer) == (1.0, 0.0, 2)
    assert m.dense_mlp_share == 1.0 - m.moe_share
    assert math.isclose(m.total_params, 46.7e9, rel_tol=0.01)


def test_a_pure_mamba_model_is_priced_at_every_tp() -> None:
    # Mamba-Codestral-7B has no attention and no MLP: its layer is one Mamba-2 block, whose in_proj
    # (column-parallel) and out_proj (row-parallel) carry all of the layer's linear FLOPs. validate
    # and optimize of it died with ZeroDivisionError on the absent MLP block.
    model = _real("mamba-codestral-7b")
    blocks = linear_blocks(model, dispatcher=False)
    assert [count for count, _, _ in blocks] == [1.0]
    assert math.isclose(sum(column + row for _, column, row in blocks), 1.0)
    tp1 = paraplan.validate(model, 8, "h100-sxm", plan="TP1/PP1/DP8")
    tp2 = paraplan.validate(model, 8, "h100-sxm", plan="TP2/PP1/DP4", sequence_parallel=True)
    assert tp1.feasible and tp2.feasible
    assert tp1.time_s.tp_comm == 0.0 < tp2.time_s.tp_comm
    assert paraplan.optimize(model, "h100-sxm", 64, top=1).results[0].layouts

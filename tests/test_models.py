"""Parameter counts (presets and real config.json files against published totals, tiny configs by
hand) and the HF loader's refusals and warnings. Expected numbers come from published figures or
from the hand arithmetic written next to them, never from the code under test."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from paraplan.cost_models.errors import InputError
from paraplan.cost_models.models import (
    GPT_OSS_GLU,
    ModelSpec,
    load_hf_config,
    load_model,
    model_from_config,
    model_preset_names,
)

HF_CONFIGS = Path(__file__).parent / "data" / "hf_configs"  # sources: HF_CONFIGS / "README.md"

# ------------------------------------------------------------------ presets vs published totals

PUBLISHED_TOTALS = {
    # Touvron et al. 2023 Table 1 / HF model cards
    "llama2-7b": 6.74e9,
    "llama2-13b": 13.0e9,
    "llama2-70b": 68.98e9,
    # Dubey et al. 2024 Table 3 / HF model cards
    "llama3-8b": 8.03e9,
    "llama3-70b": 70.55e9,
    "llama3-405b": 405.9e9,
    # Brown et al. 2020 (174.6B with tied embeddings and learned positions)
    "gpt3-175b": 174.6e9,
    # Jiang et al. 2024
    "mixtral-8x7b": 46.7e9,
}


def test_every_preset_is_listed() -> None:
    assert sorted(PUBLISHED_TOTALS) == model_preset_names()


@pytest.mark.parametrize(("name", "published"), sorted(PUBLISHED_TOTALS.items()))
def test_preset_total_matches_published(name: str, published: float) -> None:
    model = load_model(name)
    assert model.total_params == pytest.approx(published, rel=3e-3)


def test_mixtral_active_params() -> None:
    # 12.9B active (Jiang et al. 2024): total minus 6 of the 8 experts in each of the 32 layers,
    # one expert = 3*4096*14336 = 176,160,768  =>  46,702,792,704 - 32*6*176,160,768
    model = load_model("mixtral-8x7b")
    assert model.active_params == 46_702_792_704 - 32 * 6 * 176_160_768 == 12_879_925_248
    assert model.active_params == pytest.approx(12.9e9, rel=3e-3)


def test_dense_active_equals_total() -> None:
    for name in ("llama2-7b", "gpt3-175b"):
        model = load_model(name)
        assert model.active_params == model.total_params


def test_llama2_70b_exact_by_hand() -> None:
    # h=8192, a=64, g=8, d=128, f=28672, l=80, V=32000, untied, RMSNorm
    # attention: 8192*8192 (Q) + 2*8192*1024 (K,V) + 8192*8192 (O) = 150,994,944
    # MLP: 3*8192*28672 = 704,643,072;  norms 2*8192 = 16,384  => layer 855,654,400
    # 80 layers 68,452,352,000 + embedding 262,144,000 + head 262,144,000 + final norm 8,192
    assert load_model("llama2-70b").total_params == 68_976_648_192


def test_gpt3_exact_by_hand() -> None:
    # h=12288, f=4h, l=96, V=50257, 2048 learned positions, tied, LayerNorm with biases
    # layer: 12h^2 weights + biases (3h + h for attention, 4h + h for MLP) + 2 LayerNorms (4h)
    #      = 12h^2 + 13h
    h = 12288
    layer = 12 * h * h + 13 * h
    total = 96 * layer + 50257 * h + 2048 * h + 2 * h
    assert total == 174_604_259_328
    assert load_model("gpt3-175b").total_params == total


def test_preset_names_case_insensitive() -> None:
    assert load_model("LLaMA2-7B").total_params == load_model("llama2-7b").total_params


# ------------------------------------------------------------------ tiny configs by hand


def _tiny_llama(**overrides: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "model_type": "llama",
        "hidden_size": 64,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 160,
        "vocab_size": 100,
        "max_position_embeddings": 32,
        "tie_word_embeddings": False,
    }
    config.update(overrides)
    return config


def test_tiny_gated_untied_by_hand() -> None:
    # h=64, a=4, g=2 => d=16, q_dim=64, kv_dim=32
    # attention: 64*64 (Q) + 2*64*32 (K,V) + 64*64 (O) = 4096 + 4096 + 4096 = 12,288
    # gated MLP: 3*64*160 = 30,720;  two RMSNorms 2*64 = 128  => layer 43,136
    # 2 layers 86,272 + embedding 100*64 = 6,400 + LM head 6,400 + final norm 64 = 99,136
    model = model_from_config(_tiny_llama(), "tiny")
    assert model.head_dim == 16 and model.q_dim == 64 and model.kv_dim == 32
    assert model.attention_params == 12_288
    assert model.expert_params == 30_720
    assert model.layer_params == 43_136
    assert model.total_params == 99_136
    assert model.mlp == "gated" and not model.layernorm and not model.linear_bias and not model.learned_positions


def test_tiny_gated_tied_by_hand() -> None:
    # same as above without the 6,400 LM head
    model = model_from_config(_tiny_llama(tie_word_embeddings=True), "tiny")
    assert model.total_params == 99_136 - 6_400 == 92_736


def test_tiny_gpt2_style_by_hand() -> None:
    # gpt2 keys: plain MLP with n_inner null => f = 4*64 = 256, LayerNorm, biases,
    # learned positions, tied embeddings.
    # attention: 4*64*64 = 16,384 weights + biases (q 64 + k 64 + v 64 + o 64) 256 = 16,640
    # MLP: 2*64*256 = 32,768 + biases 256 + 64 = 33,088
    # two LayerNorms (weight + bias) 2*2*64 = 256  => layer 49,984; 2 layers 99,968
    # embedding 100*64 = 6,400 + positions 32*64 = 2,048; tied head 0; final LayerNorm 128
    # total 99,968 + 8,448 + 128 = 108,544
    config = {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "n_inner": None,
              "vocab_size": 100, "n_positions": 32}  # fmt: skip
    model = model_from_config(config, "tiny-gpt2")
    assert model.ffn_hidden_size == 256
    assert model.mlp == "plain" and model.layernorm and model.linear_bias
    assert model.learned_positions and model.tied_embeddings and model.dropout
    assert model.total_params == 108_544


def test_stated_dropout_rate_turns_dropout_on() -> None:
    # Llama trains without dropout (family default), and a Hugging Face config's 0.0 keeps it off;
    # a launch that leaves Megatron's --attention-dropout / --hidden-dropout at their 0.1 default
    # is stated as those rates, and trains with dropout. The rest follows each config class's defaults.
    llama = {"model_type": "llama", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
             "intermediate_size": 128, "vocab_size": 100}  # fmt: skip
    assert not model_from_config(llama, "l").dropout
    assert not model_from_config({**llama, "attention_dropout": 0.0}, "l").dropout
    assert model_from_config({**llama, "attention_dropout": 0.1, "hidden_dropout": 0.1}, "l").dropout
    assert model_from_config({**llama, "hidden_dropout": 0.1}, "l").dropout
    gpt2 = {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "vocab_size": 100, "n_positions": 32,
            "resid_pdrop": 0.0}  # fmt: skip
    # GPT2Config's attn_pdrop and embd_pdrop stay 0.1: still dropout; all three at 0.0: none
    assert model_from_config(gpt2, "g").dropout
    assert not model_from_config({**gpt2, "attn_pdrop": 0.0, "embd_pdrop": 0.0}, "g").dropout
    # BloomConfig and GPTJConfig default every rate to 0.0 (BLOOM trained without dropout); OPT's
    # `dropout` defaults to 0.1
    bloom = {"model_type": "bloom", "hidden_size": 64, "n_layer": 2, "n_head": 4, "vocab_size": 100}
    assert not model_from_config(bloom, "b").dropout
    assert model_from_config({**bloom, "hidden_dropout": 0.1}, "b").dropout
    opt = {"model_type": "opt", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
           "ffn_dim": 256, "vocab_size": 100, "max_position_embeddings": 32}  # fmt: skip
    assert model_from_config(opt, "o").dropout
    assert not model_from_config({**opt, "dropout": 0.0}, "o").dropout
    for bad in (1.0, -0.1, "0.1", True):
        with pytest.raises(InputError, match="hidden_dropout"):
            model_from_config({**llama, "hidden_dropout": bad}, "l")


def test_tiny_moe_by_hand() -> None:
    # The tiny llama with 4 experts, top-2 (mixtral keys).
    # layer: attention 12,288 + router 64*4 = 256 + norms 128 + 4 experts * 30,720 = 135,552
    # total: 2*135,552 + 6,400 + 6,400 + 64 = 283,968
    # active: total - 2 layers * (4-2) experts * 30,720 = 283,968 - 122,880 = 161,088
    config = _tiny_llama(model_type="mixtral", num_local_experts=4, num_experts_per_tok=2)
    model = model_from_config(config, "tiny-moe")
    assert model.is_moe and model.num_experts == 4 and model.experts_top_k == 2
    assert model.router_params == 256
    assert model.total_params == 283_968
    assert model.active_params == 161_088


def test_moe_intermediate_size_is_the_expert_width() -> None:
    # qwen2_moe style: num_experts + moe_intermediate_size replace the dense width
    config = _tiny_llama(model_type="qwen2_moe", num_experts=4, num_experts_per_tok=2, moe_intermediate_size=32)
    model = model_from_config(config, "q")
    assert model.ffn_hidden_size == 32
    assert model.expert_params == 3 * 64 * 32


# ------------------------------------------------------------------ loader: key families


@pytest.mark.parametrize("family", ["llama", "mistral", "mixtral", "qwen2"])
def test_gated_families(family: str) -> None:
    assert model_from_config(_tiny_llama(model_type=family), "m").mlp == "gated"


@pytest.mark.parametrize("family", ["gpt2", "gpt_neox", "nemotron", "bloom", "opt", "falcon"])
def test_plain_families(family: str) -> None:
    model = model_from_config(_tiny_llama(model_type=family), "m")
    assert model.mlp == "plain"
    assert model.layernorm
    # plain MLP: 2*h*f weights (+ f + h biases for the families that have them)
    assert model.expert_params in (2 * 64 * 160, 2 * 64 * 160 + 160 + 64)


def test_unknown_model_type_with_llama_keys_reads_as_llama() -> None:
    unknown = model_from_config(_tiny_llama(model_type="somethingnew"), "m")
    llama = model_from_config(_tiny_llama(), "m")
    assert unknown.mlp == "gated"
    assert unknown.total_params == llama.total_params == 99_136


def test_llama_keys_default_kv_heads_and_head_dim() -> None:
    config = _tiny_llama()
    del config["num_key_value_heads"]
    model = model_from_config(config, "m")
    # no KV-head key => MHA; head_dim = 64 / 4
    assert model.num_kv_heads == 4 and model.head_dim == 16


def test_explicit_head_dim_is_used() -> None:
    # Gemma-like: head_dim need not be hidden/heads; q_dim = 4*32 = 128
    model = model_from_config(_tiny_llama(head_dim=32), "m")
    assert model.q_dim == 128 and model.kv_dim == 64
    # attention: 64*128 + 2*64*64 + 128*64 = 8192 + 8192 + 8192
    assert model.attention_params == 24_576


def test_load_from_path(tmp_path: Path) -> None:
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(_tiny_llama()))
    model = load_model(str(path))
    assert model.name == "tiny"
    assert model.total_params == 99_136


def test_load_from_config_json_takes_the_folder_name(tmp_path: Path) -> None:
    folder = tmp_path / "my-model"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(_tiny_llama()))
    model = load_model(str(folder / "config.json"))
    assert model.name == "my-model"


# ------------------------------------------------------------------ loader: bad input


@pytest.mark.parametrize(
    ("change", "remove"),
    [
        ({}, "hidden_size"),  # missing hidden size
        ({"num_hidden_layers": 0}, None),
        ({"num_hidden_layers": -3}, None),
        ({"hidden_size": "4096"}, None),  # string where a number is expected
        ({"num_attention_heads": True}, None),  # bool is not a number here
        ({"hidden_size": 64.5}, None),
        ({"num_attention_heads": 5}, None),  # 5 does not divide 64
        ({"num_key_value_heads": 3}, None),  # 3 does not divide 4 heads
        ({"model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 5}, None),  # top-k > experts
        ({}, "vocab_size"),
    ],
)
def test_bad_configs_raise_input_error(change: dict[str, Any], remove: str | None) -> None:
    config = _tiny_llama(**change)
    if remove:
        del config[remove]
    with pytest.raises(InputError):
        model_from_config(config, "bad")


@pytest.mark.parametrize(
    "extra",
    [
        # MoE families build their dense/MoE layer list layer by layer
        {"model_type": "qwen3_moe", "num_experts": 4, "num_experts_per_tok": 2, "moe_intermediate_size": 32},
        {"model_type": "mixtral", "num_local_experts": 4, "num_experts_per_tok": 2},
    ],
)
def test_a_layer_count_beyond_the_model_range_is_refused_as_read(extra: dict[str, Any]) -> None:
    # 10^12 layers is a whole number the config reader accepts; the per-layer lists would take
    # hours to build (it hung the CLI): refused at once, naming the key
    with pytest.raises(InputError, match="num_hidden_layers"):
        model_from_config(_tiny_llama(num_hidden_layers=10**12, **extra), "deep")
    with pytest.raises(InputError, match="num_hidden_layers"):
        model_from_config({"model_type": "mamba2", "hidden_size": 64, "num_hidden_layers": 10**12, "num_heads": 4,
                           "head_dim": 32, "vocab_size": 1000}, "deep")  # fmt: skip
    assert model_from_config(_tiny_llama(num_hidden_layers=100_000, **extra), "deep").num_layers == 100_000


def test_no_known_keys_raises_input_error() -> None:
    with pytest.raises(InputError):
        model_from_config({"model_type": "mystery", "d_model": 64}, "bad")


@pytest.mark.parametrize("text", ["[1, 2, 3]", "{not json", "", '"a string"'])
def test_bad_json_files_raise_input_error(tmp_path: Path, text: str) -> None:
    path = tmp_path / "config.json"
    path.write_text(text)
    with pytest.raises(InputError):
        load_model(str(path))


def test_nonexistent_path_raises_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError):
        load_model(str(tmp_path / "nowhere" / "config.json"))


def test_unknown_name_raises_input_error() -> None:
    with pytest.raises(InputError, match="llama2-7b"):
        load_model("not-a-model")


# ================================================================== real config.json files
# Each file under tests/data/hf_configs/ is the model's published config.json (sources and the
# way each was obtained: tests/data/hf_configs/README.md). Published figures: the model cards and
# papers cited per entry; exact counts: the hand arithmetic in the comments.


def _real(name: str) -> ModelSpec:
    return load_hf_config(HF_CONFIGS / f"{name}.json")


def test_deepseek_v3_671b_total_37b_active() -> None:
    # DeepSeek-V3 (arXiv:2412.19437, abstract and Sec 4.2; model card): 671B total, 37B activated.
    # h=7168, 128 heads, MLA q_lora 1536, kv_lora 512, d_nope 128, d_rope 64, d_v 128, 61 layers,
    # first 3 dense (intermediate 18432), then MoE: 256 routed + 1 shared experts of width 2048, top-8,
    # router 256*h + e_score_correction_bias 256, V=129280 untied.
    # MLA: q_a 7168*1536 = 11,010,048 + q_a_norm 1,536 + q_b 1536*128*192 = 37,748,736
    #    + kv_a 7168*576 = 4,128,768 + kv_a_norm 512 + kv_b 512*128*256 = 16,777,216
    #    + o 128*128*7168 = 117,440,512                               = 187,107,328
    # norms 2*7168 = 14,336; dense MLP 3*7168*18432 = 396,361,728 -> dense layer 583,483,392
    # expert 3*7168*2048 = 44,040,192; MoE layer = 187,107,328 + 14,336 + 1,835,008 + 256
    #    + 44,040,192 (shared) + 256*44,040,192 (11,274,289,152)      = 11,507,286,272
    # total = 3*583,483,392 + 58*11,507,286,272 + 2*129280*7168 (1,853,358,080) + 7168
    model = _real("deepseek-v3")
    assert model.total_params == 671_026_419_200
    assert model.total_params == pytest.approx(671e9, rel=1e-2)
    # active: MoE layer 187,107,328 + 14,336 + 1,835,008 + 256 + 9*44,040,192 = 585,318,656
    # 58*585,318,656 + 3*583,483,392 + 1,853,358,080 + 7168 = 37,552,297,472
    assert model.active_params == 37_552_297_472
    # DeepSeek counts activated parameters without the input embedding (deepseek-ai/DeepSeek-V3
    # README_WEIGHTS.md: "Activation parameters: 36.6B (including 0.9B for the output Head)")
    assert model.active_params - model.embedding_params == pytest.approx(36.6e9, rel=2e-3)
    assert 36.5e9 <= model.active_params - model.embedding_params < 37.5e9  # "37B"
    assert model.layer_kinds() == ("dense",) * 3 + ("moe",) * 58
    assert (model.num_dense_layers, model.num_moe_layers, model.dense_layers) == (3, 58, 3)
    assert model.attention_params == 187_107_328
    assert model.dense_layer_params == 583_483_392
    assert model.layer_params == 11_507_286_272
    assert model.num_shared_experts == 1 and model.shared_expert_params == 44_040_192
    assert model.router_params == 256 * 7168 + 256
    assert model.is_mla and model.head_dim == 192 and model.v_dim == 128 * 128


def test_deepseek_v3_counts_per_layer_add_up() -> None:
    model = _real("deepseek-v3")
    layers = model.layer_param_counts()
    assert len(layers) == 61
    assert sum(layers) + model.embedding_params + model.head_params + model.final_norm_params == 671_026_419_200
    # matmul weights per token: MoE layer = MLA matrices 187,107,328 - 2,048 (latent norms)
    #   + router 1,835,008 + shared 44,040,192 + 8 routed 352,321,536 = 585,302,016
    # dense layer = 187,105,280 + 396,361,728 = 583,467,008
    assert sum(model.layer_matmul_params_active()) == 58 * 585_302_016 + 3 * 583_467_008


def test_deepseek_v3_warns_only_about_mtp() -> None:
    # num_nextn_predict_layers: the MTP module is not part of the 671B (model card: 685B with MTP)
    model = _real("deepseek-v3")
    assert len(model.warnings) == 1
    assert "num_nextn_predict_layers" in model.warnings[0]


def test_deepseek_v3_mtp_module_by_hand() -> None:
    # config.json: num_nextn_predict_layers 1. One MTP module (Megatron-LM
    # MultiTokenPredictionLayer): enorm + hnorm + final_layernorm 3*7168 = 21,504, eh_proj
    # 2*7168*7168 = 102,760,448, and a layer like the last (MoE) one, 11,507,286,272
    # (test_deepseek_v3_671b_total_37b_active) = 11,610,068,224; with the checkpoint's own
    # embedding and head copies (2*129280*7168 = 1,853,358,080) 13,463,426,304: the card's "14B"
    model = _real("deepseek-v3")
    assert model.mtp_layers == 1 and model.mtp_layer_is_moe
    assert model.mtp_module_params == 11_610_068_224 == model.mtp_params
    assert model.mtp_params + 2 * 129280 * 7168 == pytest.approx(14e9, rel=0.04)
    assert model.total_params == 671_026_419_200  # the totals stay the published 671B
    # per token: eh_proj 102,760,448 + the MoE layer's 585,302,016 + head 926,679,040
    assert model.mtp_matmul_params_active == 1_614_741_504


def test_expert_groups_need_the_stated_keys() -> None:
    # DeepSeek-V3's config.json: n_group 8, topk_group 4; DeepSeek-V2 applies the groups only under
    # topk_method group_limited_greedy (its config: 8, 3)
    assert (_real("deepseek-v3").expert_groups, _real("deepseek-v3").group_top_k) == (8, 4)
    assert (_real("deepseek-v2").expert_groups, _real("deepseek-v2").group_top_k) == (8, 3)
    config = json.loads((HF_CONFIGS / "deepseek-v3.json").read_text())
    del config["n_group"]
    trimmed = model_from_config(config, "trimmed")
    assert trimmed.expert_groups == 1 and any("'n_group' / 'topk_group'" in w for w in trimmed.warnings)
    with pytest.raises(InputError, match="group"):
        model_from_config({**json.loads((HF_CONFIGS / "deepseek-v3.json").read_text()), "n_group": 7}, "bad")


def test_deepseek_v2_236b_total_21b_active() -> None:
    # DeepSeek-V2 (arXiv:2405.04434, abstract): 236B total, 21B activated per token.
    # h=5120, 128 heads, MLA as V3, 60 layers, first 1 dense (12288), then 160 routed + 2 shared
    # experts of width 1536, top-6, router 160*h (no bias: greedy routing), V=102400 untied.
    # MLA: 5120*1536 + 1536 + 1536*24576 + 5120*576 + 512 + 512*32768 + 16384*5120 = 149,227,520
    # dense layer 149,227,520 + 10,240 + 3*5120*12288 (188,743,680) = 337,981,440
    # expert 3*5120*1536 = 23,592,960; MoE layer 149,227,520 + 10,240 + 819,200 + 162*23,592,960
    #    = 3,972,116,480;  total = 337,981,440 + 59*3,972,116,480 + 2*524,288,000 + 5120
    model = _real("deepseek-v2")
    assert model.total_params == 235_741_434_880
    assert model.total_params == pytest.approx(236e9, rel=1e-2)
    # active: MoE layer 149,237,760 + 819,200 + 8*23,592,960 = 338,800,640
    # 59*338,800,640 + 337,981,440 + 1,048,581,120 = 21,375,800,320; without the input embedding
    # (DeepSeek's convention, see V3) 20,851,512,320
    assert model.active_params == 21_375_800_320
    assert model.active_params - model.embedding_params == pytest.approx(21e9, rel=1e-2)
    assert model.layer_kinds()[:2] == ("dense", "moe") and model.num_moe_layers == 59
    assert not model.router_bias and model.warnings == ()


def test_qwen15_moe_a27b_14_3b_total_2_7b_active() -> None:
    # Qwen/Qwen1.5-MoE-A2.7B model card: "14.3B parameters in total and 2.7B activated parameters".
    # h=2048, 24 layers, MHA 16 heads with q/k/v biases, 60 experts of width 1408, top-4, one shared
    # expert of width 5632 with a sigmoid gate Linear(2048, 1), V=151936 untied.
    # attention 4*2048^2 + 3*2048 = 16,783,360; norms 4,096; router 60*2048 = 122,880
    # shared 3*2048*5632 = 34,603,008 + gate 2,048; experts 60*3*2048*1408 = 519,045,120
    # layer 570,560,512;  total 24*570,560,512 + 2*151936*2048 + 2048 = 14,315,784,192
    # (cross-check: a 4-expert, 3-layer torchinfo print of this architecture shows 86,003,712 a
    # layer = 16,783,360 + 4,096 + 8,192 + 34,605,056 + 4*8,650,752)
    model = _real("qwen1.5-moe-a2.7b")
    assert model.total_params == 14_315_784_192
    assert model.total_params == pytest.approx(14.3e9, rel=1e-2)
    # active layer 16,783,360 + 4,096 + 122,880 + 34,605,056 + 4*8,650,752 = 86,118,400
    assert model.active_params == 24 * 86_118_400 + 2 * 151936 * 2048 + 2048 == 2_689_173_504
    assert model.active_params == pytest.approx(2.7e9, rel=1e-2)
    assert model.shared_expert_gate and model.shared_expert_ffn == 5632
    assert model.sliding_window is None  # use_sliding_window: false
    assert model.warnings == ()


def test_mixtral_config_46_7b_total_12_9b_active() -> None:
    # Jiang et al. 2024 (arXiv:2401.04088): 46.7B total, 12.9B active (same hand count as the preset)
    model = _real("mixtral-8x7b")
    assert model.total_params == 46_702_792_704 == pytest.approx(46.7e9, rel=1e-2)
    assert model.active_params == 12_879_925_248 == pytest.approx(12.9e9, rel=1e-2)
    assert model.warnings == () and model.sliding_window is None


def test_llama31_405b_config() -> None:
    # Dubey et al. 2024 (arXiv:2407.21783) Table 3: 405B. h=16384, 126 layers, 128 heads, 8 KV
    # heads, f=53248, V=128256 untied: layer 2*16384^2 + 2*16384*1024 + 3*16384*53248 + 2*16384
    # = 3,187,703,808;  126 * that + 2*128256*16384 + 16384 = 405,853,388,800
    model = _real("llama-3.1-405b")
    assert model.total_params == 405_853_388_800
    assert model.total_params == pytest.approx(405e9, rel=1e-2)
    assert model.warnings == ()


@pytest.mark.parametrize(
    ("name", "published", "non_embedding"),
    [
        # Gemma 2 (arXiv:2408.00118) Table 2: non-embedding 2,024,517,888 and 8,324,201,984;
        # model cards: 2.6B and 9.2B (HF: 2.61B, 9.24B). Gemma ties its embeddings by default
        # (Gemma2Config tie_word_embeddings=True; the config.json does not state it).
        # 2B: h=2304, 26 layers, 8 heads x 256, 4 KV heads, f=9216, four RMSNorms a layer:
        #   2304*2048*2 + 2*2304*1024 + 3*2304*9216 + 4*2304 = 77,865,984 a layer,
        #   26 * that + final norm 2304 = 2,024,517,888; + 256000*2304 = 2,614,341,888
        ("gemma-2-2b", 2.6e9, 2_024_517_888),
        # 9B: h=3584, 42 layers, 16 heads x 256, 8 KV heads, f=14336:
        #   3584*4096*2 + 2*3584*2048 + 3*3584*14336 + 4*3584 = 198,195,200 a layer,
        #   42 * that + 3584 = 8,324,201,984; + 256000*3584 = 9,241,705,984
        ("gemma-2-9b", 9.2e9, 8_324_201_984),
    ],
)
def test_gemma2_configs(name: str, published: float, non_embedding: int) -> None:
    model = _real(name)
    assert model.tied_embeddings and model.head_params == 0
    assert model.non_embedding_params == non_embedding
    assert model.total_params == pytest.approx(published, rel=1e-2)
    assert model.norms_per_layer == 4 and model.head_dim == 256
    assert model.warnings == ()


def test_gemma2_alternates_local_and_global_layers() -> None:
    # Gemma2Config: layer_types = sliding if (i + 1) % 2 else full; window 4096 (arXiv:2408.00118 Sec 2)
    model = _real("gemma-2-2b")
    assert model.sliding_window == 4096
    assert model.layer_is_sliding() == (True, False) * 13
    spans = model.attention_spans(8192)
    assert spans[:4] == (4096, 8192, 4096, 8192)
    assert model.mean_attention_span(8192) == (4096 + 8192) / 2
    assert model.attention_spans(1000) == (1000,) * 26  # min(s, window)


def test_opt_125m_config() -> None:
    # facebook/opt-125m (Zhang et al. 2022, arXiv:2205.01068 Table 1: 125M). h=768, 12 layers,
    # f=3072, V=50272, tied (OPTConfig leaves tie_word_embeddings at True), learned positions with
    # OPT's offset of 2 (2050 rows), biases everywhere, LayerNorm.
    # layer 4*768^2 + 4*768 + 2*768*3072 + 3072 + 768 + 2*2*768 = 7,087,872
    # total 12*7,087,872 + 50272*768 + 2050*768 + final LayerNorm 1536 = 125,239,296
    model = _real("opt-125m")
    assert model.total_params == 125_239_296
    assert model.total_params == pytest.approx(125e6, rel=1e-2)
    assert model.tied_embeddings and model.embed_dim is None and model.warnings == ()


def test_falcon_7b_config() -> None:
    # tiiuae/falcon-7b model card: "a 7B parameters causal decoder-only model" (rounded; the exact
    # count below is 6.92B). multi_query: one K and one V head; parallel attention + MLP under one
    # LayerNorm; no biases; tied embeddings (FalconConfig leaves tie_word_embeddings at True).
    # layer: query_key_value 4544*(4544 + 2*64) = 21,229,568 + dense 4544^2 = 20,647,936
    #        + MLP 2*4544*18176 = 165,183,488 + LayerNorm 9,088 = 207,070,080
    # total 32*207,070,080 + 65024*4544 + 9,088 = 6,921,720,704
    model = _real("falcon-7b")
    assert model.num_kv_heads == 1 and model.norms_per_layer == 1 and model.tied_embeddings
    assert model.total_params == 6_921_720_704
    assert 6.5e9 <= model.total_params < 7.5e9  # "7B"
    assert model.warnings == ()


def test_llama4_scout_text_model_107_8b_total_17_2b_active() -> None:
    # meta-llama/Llama-4-Scout-17B-16E (model card: 17B activated, 109B total). Its config.json is a
    # Llama4Config wrapper: the text model (text_config) is counted, the vision tower is not.
    # h=5120, 48 layers, 40 heads x 128, 8 KV heads, V=202048 untied, every layer MoE
    # (moe_layers 0..47): router 5120*16, 16 routed + 1 shared SwiGLU experts of width 8192.
    # attention 5120*5120 (q) 26,214,400 + 2*5120*1024 (k, v) 10,485,760 + 5120*5120 (o) 26,214,400
    #   = 62,914,560;  norms 2*5120 = 10,240;  router 5120*16 = 81,920
    # expert 3*5120*8192 = 125,829,120;  16 routed 2,013,265,920 + shared 125,829,120
    # layer 62,914,560 + 10,240 + 81,920 + 2,013,265,920 + 125,829,120 = 2,202,101,760
    # total 48*2,202,101,760 (105,700,884,480) + 2*202048*5120 (2,068,971,520) + final norm 5,120
    #   = 107,769,861,120
    model = _real("llama-4-scout-17b-16e")
    assert model.total_params == 107_769_861_120
    assert model.layer_params == 2_202_101_760 and model.attention_params == 62_914_560
    assert model.layer_kinds() == ("moe",) * 48 and model.num_shared_experts == 1
    # The published 109B counts the vision encoder too. Llama4VisionModel for this vision_config
    # (h=1408, 34 layers, f=5632, biases, LayerNorms; transformers modeling_llama4.py), by hand:
    #   layer 4*(1408*1408 + 1408) + (1408*5632 + 5632) + (5632*1408 + 1408) + 2*2*1408 = 23,807,872
    #   34 layers 809,467,648 + patch_embedding 3*14*14*1408 = 827,904 + class_embedding 1,408
    #   + positional ((336/14)^2 + 1)*1408 = 812,416 + layernorm_pre/post 5,632
    #   + vision_adapter 5632*4096 + 4096*4096 = 39,845,888 + multi_modal_projector 4096*5120
    #   = 20,971,520  ->  871,932,416  (the module sizes match a public per-module listing)
    # text + vision = 108,641,793,536: 0.33% below 109B. The text model alone is 1.13% below.
    assert model.total_params + 871_932_416 == pytest.approx(109e9, rel=1e-2)
    assert 107.5e9 <= model.total_params < 108.5e9
    # active: per layer 62,914,560 + 10,240 + 81,920 + 2*125,829,120 (top-1 + shared) = 314,664,960
    # 48*314,664,960 + 2,068,971,520 + 5,120 = 17,172,894,720 (1.0% above the rounded "17B")
    assert model.active_params == 17_172_894_720
    assert 16.5e9 <= model.active_params < 17.5e9  # "17B"
    # no_rope_layers [1, 1, 1, 0] * 12: RoPE layers attend in chunks of 8192, every 4th is full
    assert model.attention_chunk == 8192
    assert model.chunked_layer_ids == tuple(i for i in range(48) if i % 4 != 3)
    assert len(model.warnings) == 1 and "vision" in model.warnings[0]


def _maverick_text_config() -> dict[str, Any]:
    # meta-llama/Llama-4-Maverick-17B-128E text_config: as Scout but 128 experts, MoE on every
    # second layer (interleave_moe_layer_step 2), no q/k norm
    return {"model_type": "llama4_text", "hidden_size": 5120, "num_hidden_layers": 48, "num_attention_heads": 40,
            "num_key_value_heads": 8, "head_dim": 128, "intermediate_size": 8192, "intermediate_size_mlp": 16384,
            "num_local_experts": 128, "num_experts_per_tok": 1, "interleave_moe_layer_step": 2,
            "vocab_size": 202048, "attention_chunk_size": 8192, "no_rope_layers": [1, 1, 1, 0] * 12,
            "use_qk_norm": False, "tie_word_embeddings": False}  # fmt: skip


def test_llama4_maverick_400_7b_total_17_2b_active() -> None:
    # Llama-4-Maverick-17B-128E model card: 17B activated, 400B total. moe_layers = range(1, 48, 2):
    # 24 MoE layers (odd), 24 dense layers (even) with a SwiGLU MLP of width 16384.
    # attention 62,914,560 + norms 10,240 (as Scout)
    # MoE layer 62,914,560 + 10,240 + router 5120*128 = 655,360 + 128*125,829,120 = 16,106,127,360
    #   + shared 125,829,120 = 16,295,536,640
    # dense layer 62,914,560 + 10,240 + 3*5120*16384 = 251,658,240 -> 314,583,040
    # total 24*16,295,536,640 + 24*314,583,040 + 2,068,971,520 + 5,120 = 400,711,848,960 (0.18%)
    model = model_from_config(_maverick_text_config(), "maverick")
    assert model.total_params == 400_711_848_960
    assert model.total_params == pytest.approx(400e9, rel=1e-2)
    assert model.layer_kinds() == ("dense", "moe") * 24
    assert model.dense_layer_params == 314_583_040 and model.layer_params == 16_295_536_640
    # active MoE layer 62,914,560 + 10,240 + 655,360 + 2*125,829,120 = 315,238,400
    # 24*(315,238,400 + 314,583,040) + 2,068,976,640 = 17,184,691,200 (1.1% above "17B")
    assert model.active_params == 17_184_691_200
    assert 16.5e9 <= model.active_params < 17.5e9  # "17B"
    assert model.warnings == ()


# openai/gpt-oss-120b config.json keys that change the math (transformers GptOssConfig defaults
# agree: 36 layers, 128 experts, top-4, h = f = 2880, 64 heads x 64, 8 KV heads, V 201088, window 128).
GPT_OSS_120B: dict[str, Any] = json.loads((HF_CONFIGS / "gpt-oss-120b.json").read_text())


def test_gpt_oss_120b_116_83b_total_5_13b_active() -> None:
    # gpt-oss model card (OpenAI 2025, arXiv:2508.10925) Table 1, gpt-oss-120b: 116.83B total,
    # 5.13B active per token (embedding excluded); MLP 114.71B, attention 0.96B, (un)embedding 1.16B.
    # Hand count, h = f = 2880, a = 64, g = 8, d = 64, E = 128, k = 4, V = 201088, 36 layers:
    #   attention  q 2880*4096 + k, v 2*2880*512 + o 4096*2880 = 26,542,080
    #              + biases 4096 + 512 + 512 + 2880 = 8,000 + sinks 64            = 26,550,144
    #   expert     gate_up 2880*5760 + 5760 + down 2880*2880 + 2880               = 24,891,840
    #   router     2880*128 + 128 = 368,768;  norms 2*2880 = 5,760
    #   layer      26,550,144 + 128*24,891,840 + 368,768 + 5,760                  = 3,213,080,192
    #   total      36 * layer + 2 * 201088*2880 (untied) + 2880                   = 116,829,156,672
    #   active     36 * (26,550,144 + 4*24,891,840 + 368,768 + 5,760) + 2*579,133,440 + 2880
    #            = 4,553,713,152 + 1,158,269,760                                  = 5,711,982,912
    model = model_from_config(GPT_OSS_120B, "gpt-oss-120b")
    assert model.attention_params == 26_550_144
    assert model.total_params == 116_829_156_672 == pytest.approx(116.83e9, rel=1e-4)
    assert model.active_params == 5_711_982_912
    assert model.active_params - 201088 * 2880 == pytest.approx(5.13e9, rel=1e-3)  # card: embedding excluded
    assert 36 * (model.layer_params - model.attention_params - 5760) == pytest.approx(114.71e9, rel=1e-4)
    assert model.sliding_window == 128 and model.sliding_layer_ids == tuple(range(0, 36, 2))
    assert model.warnings == ()


def test_gpt_oss_layer_types_default_alternates_from_layer_0() -> None:
    # GptOssConfig.__post_init__: layer_types None -> "sliding_attention" where (i + 1) % 2, else full
    config = {k: v for k, v in GPT_OSS_120B.items() if k != "layer_types"}
    assert model_from_config(config, "m").sliding_layer_ids == tuple(range(0, 36, 2))


def test_gpt_oss_glu_clamp_follows_swiglu_limit() -> None:
    # GptOssConfig.swiglu_limit (default 7.0) clamps the experts' gate and linear halves;
    # an explicit null turns the clamp off
    assert model_from_config({**GPT_OSS_120B, "swiglu_limit": 10.0}, "m").glu_clamp == 10.0
    assert model_from_config({k: v for k, v in GPT_OSS_120B.items() if k != "swiglu_limit"}, "m").glu_clamp == 7.0
    assert model_from_config({**GPT_OSS_120B, "swiglu_limit": None}, "m").glu_clamp is None
    assert _real("mixtral-8x7b").glu_clamp is None
    with pytest.raises(InputError, match=r"swiglu_limit|glu_clamp"):
        model_from_config({**GPT_OSS_120B, "swiglu_limit": -1.0}, "m")


def test_mlp_activation_is_read_as_the_config_class_reads_it() -> None:
    # GPT-OSS's experts run their own GLU whatever hidden_act says (GptOssExperts._apply_gate);
    # NemotronConfig defaults hidden_act to relu2; the others take what the config names
    assert model_from_config(GPT_OSS_120B, "m").mlp_act == GPT_OSS_GLU
    assert _real("mixtral-8x7b").mlp_act == "silu"
    nemotron = {"model_type": "nemotron", "hidden_size": 1024, "num_hidden_layers": 2, "num_attention_heads": 8,
                "num_key_value_heads": 8, "intermediate_size": 4096, "vocab_size": 1000}  # fmt: skip
    assert model_from_config(nemotron, "m").mlp_act == "relu2"
    assert model_from_config({**nemotron, "hidden_act": "gelu"}, "m").mlp_act == "gelu"


def test_rotary_settings_are_read_as_the_config_classes_read_them() -> None:
    # Llama 3.1's published config: rope_theta 500000 and the "llama3" scaling by 8; Mixtral's
    # class default rope_theta is 1e6 (MixtralConfig), GPT-NeoX rotates rotary_pct of each head,
    # Nemotron partial_rotary_factor, GPT-J rotary_dim of its 256-wide heads
    llama = _real("llama-3.1-405b")
    assert (llama.rope_theta, llama.rotary_fraction, llama.rope_scaling) == (500000.0, 1.0, "llama3, factor 8.0")
    assert load_model("llama3-8b").rope_theta == 500000.0  # the preset, Dubey et al. 2024 Table 3
    mixtral = {k: v for k, v in json.loads((HF_CONFIGS / "mixtral-8x7b.json").read_text()).items() if k != "rope_theta"}
    assert model_from_config(mixtral, "m").rope_theta == 1e6
    neox = {"model_type": "gpt_neox", "hidden_size": 512, "num_hidden_layers": 2, "num_attention_heads": 8,
            "intermediate_size": 2048, "vocab_size": 1000, "rotary_pct": 0.25, "rotary_emb_base": 10000}  # fmt: skip
    assert (model_from_config(neox, "m").rotary_fraction, model_from_config(neox, "m").rope_theta) == (0.25, 10000)
    gptj = {"model_type": "gptj", "n_embd": 4096, "n_layer": 2, "n_head": 16, "vocab_size": 1000, "rotary_dim": 64}
    assert model_from_config(gptj, "m").rotary_fraction == 64 / 256
    with pytest.raises(InputError, match=r"'rotary_pct' = 1\.5 must be above 0 and at most 1"):
        model_from_config({**neox, "rotary_pct": 1.5}, "m")
    with pytest.raises(InputError, match="'rotary_dim' = 512 exceeds the head dimension 256"):
        model_from_config({**gptj, "rotary_dim": 512}, "m")
    with pytest.raises(InputError, match="'rope_theta' = 'big' must be a number"):
        model_from_config({**neox, "rope_theta": "big"}, "m")
    # an integer beyond float's range is no number either (it once raised OverflowError)
    with pytest.raises(InputError, match=r"'rotary_pct' = 1000.*000 must be a number"):
        model_from_config({**neox, "rotary_pct": 10**400}, "m")


def test_norm_settings_are_read() -> None:
    # DeepSeek-V3 states rms_norm_eps 1e-6; NemotronConfig's norms are LayerNorm1P (zero-centred)
    assert _real("deepseek-v3").norm_eps == 1e-6
    assert load_model("llama3-8b").norm_eps is None and not load_model("llama3-8b").norm_zero_centered
    nemotron = {"model_type": "nemotron", "hidden_size": 1024, "num_hidden_layers": 2, "num_attention_heads": 8,
                "num_key_value_heads": 8, "intermediate_size": 4096, "vocab_size": 1000, "norm_eps": 1e-5}  # fmt: skip
    model = model_from_config(nemotron, "m")
    assert model.norm_zero_centered and model.norm_eps == 1e-5
    with pytest.raises(InputError, match=r"'norm_eps' = 2 must be above 0 and at most 0\.5"):
        model_from_config({**nemotron, "norm_eps": 2}, "m")


def test_router_semantics_follow_each_config_class() -> None:
    # DeepSeek-V3: sigmoid scores, renormalised, x2.5 (DeepseekV3Config defaults, stated in its
    # config); DeepSeek-V2: softmax over all experts, not renormalised, x16 (its config);
    # Qwen1.5-MoE: norm_topk_prob false; Mixtral renormalises its top-2; Nemotron-3-Nano's router is
    # DeepSeek-V3's with its stated scale 2.5
    cases = {"deepseek-v3": ("sigmoid", True, 2.5), "deepseek-v2": ("softmax", False, 16.0),
             "qwen1.5-moe-a2.7b": ("softmax", False, 1.0), "mixtral-8x7b": ("softmax", True, 1.0),
             "nemotron-3-nano-30b-a3b": ("sigmoid", True, 2.5)}  # fmt: skip
    for name, expected in cases.items():
        m = _real(name)
        assert (m.router_score, m.router_renorm, m.router_scale) == expected, name
    # Qwen3MoeConfig's norm_topk_prob defaults to false; Mixtral's router renormalises whatever it says
    qwen3 = {"model_type": "qwen3_moe", "hidden_size": 512, "num_hidden_layers": 2, "num_attention_heads": 8,
             "num_key_value_heads": 4, "head_dim": 64, "num_experts": 8, "num_experts_per_tok": 2,
             "moe_intermediate_size": 256, "vocab_size": 1000}  # fmt: skip
    assert not model_from_config(qwen3, "m").router_renorm
    assert model_from_config({**qwen3, "norm_topk_prob": True}, "m").router_renorm
    mixtral = json.loads((HF_CONFIGS / "mixtral-8x7b.json").read_text())
    assert model_from_config({**mixtral, "norm_topk_prob": False}, "m").router_renorm
    with pytest.raises(InputError, match="'scoring_func' = 'relu': only softmax and sigmoid routers"):
        model_from_config({**qwen3, "scoring_func": "relu"}, "m")


def test_mamba_codestral_7b_is_counted() -> None:
    # mistralai/Mamba-Codestral-7B-v0.1 (model_type mamba2; model card: 7,285,403,648 parameters,
    # "7.3B"), read as 64 Mamba-2 layers (it was once read as a 128-head transformer). By hand, h 4096,
    # 128 heads x 64 = d 8192, 8 groups, state 128, kernel 4: in_proj 4096 x (2*8192 + 2*8*128 + 128)
    # = 76,021,760; conv (8192 + 2048) x 5 = 51,200; A_log, D, dt_bias 3 x 128; norm 8192; out_proj
    # 8192 x 4096 = 33,554,432; + the layer norm 4096 -> 109,640,064 a layer; x 64, + untied
    # embedding and head 2 x 32768 x 4096, + final norm 4096.
    m = _real("mamba-codestral-7b")
    assert m.layer_pattern == "M" * 64
    assert m.total_params == 64 * 109_640_064 + 2 * 32768 * 4096 + 4096 == 7_285_403_648


def test_every_real_config_is_covered() -> None:
    names = {p.stem for p in HF_CONFIGS.glob("*.json")}
    assert names == {
        "deepseek-v3", "deepseek-v2", "qwen1.5-moe-a2.7b", "mixtral-8x7b", "llama-3.1-405b",
        "gemma-2-2b", "gemma-2-9b", "opt-125m", "falcon-7b", "mamba-codestral-7b", "llama-4-scout-17b-16e",
        "nemotron-h-8b-base-8k", "nemotron-h-56b-base-8k", "nemotron-3-nano-30b-a3b", "gpt-oss-120b",
    }  # fmt: skip


# ================================================================== published totals from model cards


def test_bloom_176b_by_model_card() -> None:
    # bigscience/bloom model card: 176,247,271,424 parameters. h=14336, 70 layers, 112 heads,
    # V=250880 tied, ALiBi (no position table), biases, LayerNorm, plus word_embeddings_layernorm.
    # layer 12h^2 + 13h (as GPT-3) = 2,466,437,120; 70 layers + V*h + embedding LN 2h + final LN 2h
    config = {"model_type": "bloom", "hidden_size": 14336, "n_layer": 70, "n_head": 112, "n_inner": None,
              "vocab_size": 250880}  # fmt: skip
    model = model_from_config(config, "bloom")
    assert model.total_params == 70 * 2_466_437_120 + 250880 * 14336 + 4 * 14336 == 176_247_271_424
    assert model.warnings == ()


def test_gpt_neox_20b_by_model_card() -> None:
    # EleutherAI/gpt-neox-20b model card: 20,554,567,680 parameters. h=6144, 44 layers, 64 heads,
    # f=24576, V=50432, untied embed_in / embed_out, biases, two LayerNorms a layer.
    # layer 4h^2 + 4h + 2*h*f + f + h + 4h = 453,064,704
    config = {"model_type": "gpt_neox", "hidden_size": 6144, "num_hidden_layers": 44, "num_attention_heads": 64,
              "intermediate_size": 24576, "vocab_size": 50432, "tie_word_embeddings": False}  # fmt: skip
    model = model_from_config(config, "neox")
    assert model.total_params == 44 * 453_064_704 + 2 * 50432 * 6144 + 2 * 6144 == 20_554_567_680


# ================================================================== new math, tiny configs by hand


def _tiny_mla(**overrides: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "model_type": "deepseek_v3", "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
        "num_key_value_heads": 4, "intermediate_size": 96, "moe_intermediate_size": 16, "n_routed_experts": 8,
        "n_shared_experts": 1, "num_experts_per_tok": 2, "first_k_dense_replace": 1, "moe_layer_freq": 1,
        "q_lora_rank": 16, "kv_lora_rank": 8, "qk_nope_head_dim": 8, "qk_rope_head_dim": 4, "v_head_dim": 8,
        "vocab_size": 100, "tie_word_embeddings": False,
    }  # fmt: skip
    config.update(overrides)
    return config


def test_tiny_mla_attention_by_hand() -> None:
    # q_a 64*16 = 1024 + q_a_norm 16 + q_b 16*4*(8+4) = 768 + kv_a 64*(8+4) = 768 + kv_a_norm 8
    # + kv_b 8*4*(8+8) = 512 + o 4*8*64 = 2048  => 5,144
    assert model_from_config(_tiny_mla(), "mla").attention_params == 5_144
    # q_lora_rank null (DeepSeek-V2-Lite): q_proj 64*4*12 = 3072 instead of 1024 + 16 + 768
    assert model_from_config(_tiny_mla(q_lora_rank=None), "mla").attention_params == 6_408


def test_tiny_deepseek_moe_by_hand() -> None:
    # attention 5,144; norms 128; dense MLP 3*64*96 = 18,432 => dense layer 23,704
    # expert 3*64*16 = 3,072; MoE layer 5,144 + 128 + router 8*64 + 8 (V3 bias) + shared 3,072
    #   + 8*3,072 = 33,440;  total 23,704 + 3*33,440 + 100*64*2 + 64 = 136,888
    # active = total - 3 layers * 6 idle experts * 3,072 = 81,592
    model = model_from_config(_tiny_mla(), "ds")
    assert model.layer_kinds() == ("dense", "moe", "moe", "moe")
    assert model.dense_layer_params == 23_704 and model.layer_params == 33_440
    assert model.total_params == 136_888
    assert model.active_params == 81_592
    assert model.layer_param_counts() == (23_704, 33_440, 33_440, 33_440)
    # moe_layer_freq 2: MoE iff i >= 1 and i % 2 == 0 (DeepSeek's modeling code) -> only layer 2
    model = model_from_config(_tiny_mla(moe_layer_freq=2), "ds")
    assert model.layer_kinds() == ("dense", "dense", "moe", "dense")
    assert model.total_params == 3 * 23_704 + 33_440 + 12_864


def test_tiny_qwen2_moe_sparse_step_and_mlp_only_layers() -> None:
    # decoder_sparse_step 2: MoE iff (i + 1) % 2 == 0 -> layers 1, 3; mlp_only_layers [3] -> only 1
    # attention 4*64^2 + 3*64 (q/k/v biases) = 16,576; norms 128
    # dense layer 16,576 + 128 + 3*64*96 = 35,136
    # MoE layer 16,576 + 128 + router 4*64 + shared 3*64*48 + gate 64 + 4*3*64*16 = 38,528
    config = _tiny_llama(model_type="qwen2_moe", num_key_value_heads=4, intermediate_size=96, num_experts=4,
                         num_experts_per_tok=2, moe_intermediate_size=16, shared_expert_intermediate_size=48,
                         decoder_sparse_step=2, mlp_only_layers=[3], num_hidden_layers=4)  # fmt: skip
    model = model_from_config(config, "qmoe")
    assert model.layer_kinds() == ("dense", "moe", "dense", "dense")
    assert (model.dense_layers, model.num_dense_layers, model.num_moe_layers) == (1, 3, 1)
    assert model.dense_ffn_hidden_size == 96 and model.ffn_hidden_size == 16
    assert model.total_params == 3 * 35_136 + 38_528 + 2 * 6_400 + 64 == 156_800
    assert model.active_params == 156_800 - 1 * 2 * 3 * 64 * 16


def test_opt_word_embed_proj_dim_by_hand() -> None:
    # OPT-350m style: word embeddings of width 32 projected to h=64 (project_in, project_out, no bias),
    # post-LayerNorm (do_layer_norm_before false) => no final LayerNorm.
    # layer 4*64^2 + 4*64 + 2*64*128 + 128 + 64 + 2*128 = 33,472; 2 layers 66,944
    # embed 100*32 + (16+2)*64 + project_in 32*64 = 6,400; head: tied + project_out 64*32 = 2,048
    config = {"model_type": "opt", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
              "ffn_dim": 128, "vocab_size": 100, "max_position_embeddings": 16, "word_embed_proj_dim": 32,
              "do_layer_norm_before": False}  # fmt: skip
    model = model_from_config(config, "opt350")
    assert model.embed_dim == 32 and not model.final_norm
    assert model.embedding_params == 6_400 and model.head_params == 2_048
    assert model.total_params == 75_392


def test_falcon_new_decoder_architecture_by_hand() -> None:
    # Falcon-40B style: new_decoder_architecture, num_kv_heads 2, two LayerNorms (ln_attn, ln_mlp)
    # h=64, 8 heads of 8: q 64*64 + kv 2*64*16 + o 64*64 = 10,240; MLP 2*64*256 = 32,768; LN 256
    # 2 layers 86,528 + tied embedding 6,400 + final LayerNorm 128 = 93,056
    config = {"model_type": "falcon", "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 8,
              "num_kv_heads": 2, "new_decoder_architecture": True, "vocab_size": 100}  # fmt: skip
    model = model_from_config(config, "falcon40")
    assert model.num_kv_heads == 2 and model.norms_per_layer == 2
    assert model.total_params == 93_056


def test_qk_norms_and_nonparametric_norms_by_hand() -> None:
    base = _tiny_llama()  # llama total 99,136 (see test_tiny_gated_untied_by_hand); head_dim 16
    # Qwen3: q_norm + k_norm RMSNorm(head_dim) a layer: + 2 layers * 2*16
    qwen3 = model_from_config({**base, "model_type": "qwen3", "head_dim": 16}, "q3")
    assert qwen3.total_params == 99_136 + 2 * 32
    # OLMo 2: q_norm over q_dim 64, k_norm over kv_dim 32
    olmo2 = model_from_config({**base, "model_type": "olmo2"}, "o2")
    assert olmo2.total_params == 99_136 + 2 * (64 + 32)
    # OLMo: LayerNorm without parameters (2 layers * 2 norms * 64 + final 64 gone)
    olmo = model_from_config({**base, "model_type": "olmo"}, "o")
    assert olmo.total_params == 99_136 - 2 * 128 - 64


def test_gptj_layout_by_hand() -> None:
    # GPT-J: rotary (no position table), untied head with a bias, one LayerNorm a layer,
    # attention without biases, MLP with biases; n_inner null -> 4h
    # layer 4*64^2 + 2*64*256 + 256 + 64 + 2*64 = 49,600; 2 layers 99,200
    # + wte 6,400 + lm_head 6,400 + bias 100 + ln_f 128 = 112,228
    config = {"model_type": "gptj", "n_embd": 64, "n_layer": 2, "n_head": 4, "n_inner": None, "vocab_size": 100,
              "n_positions": 32, "rotary_dim": 8}  # fmt: skip
    model = model_from_config(config, "gptj")
    assert not model.learned_positions and model.lm_head_bias and model.norms_per_layer == 1
    assert model.total_params == 112_228


@pytest.mark.parametrize(
    ("model_type", "tied"),
    [("gemma", True), ("gemma2", True), ("gemma3_text", True), ("opt", True), ("falcon", True), ("bloom", True),
     ("starcoder2", True), ("gpt2", True), ("llama", False), ("mistral", False), ("qwen2", False),
     ("deepseek_v3", False), ("gpt_neox", False), ("gptj", False), ("nemotron", False), ("olmo", False)],
)  # fmt: skip
def test_tie_word_embeddings_follows_the_config_class(model_type: str, tied: bool) -> None:
    config = _tiny_mla(model_type=model_type) if model_type == "deepseek_v3" else _tiny_llama(model_type=model_type)
    del config["tie_word_embeddings"]
    config.update(num_key_value_heads=4, head_dim=16)
    assert model_from_config(config, "m").tied_embeddings is tied


# ================================================================== sliding windows


def test_mistral_v01_slides_on_every_layer() -> None:
    # Mistral 7B (arXiv:2310.06825): sliding window W=4096 on all layers
    model = model_from_config(_tiny_llama(model_type="mistral", sliding_window=4096), "mistral")
    assert model.layer_is_sliding() == (True, True)
    assert model.attention_spans(32768) == (4096, 4096)
    assert model.attention_spans(100) == (100, 100)
    assert model_from_config(_tiny_llama(model_type="mistral", sliding_window=None), "m").sliding_window is None


def test_qwen2_sliding_layers_from_max_window_layers() -> None:
    config = _tiny_llama(model_type="qwen2", num_hidden_layers=4, use_sliding_window=True, sliding_window=8,
                         max_window_layers=2)  # fmt: skip
    assert model_from_config(config, "q").layer_is_sliding() == (False, False, True, True)
    config["use_sliding_window"] = False
    assert model_from_config(config, "q").sliding_window is None


def test_gemma3_five_local_one_global() -> None:
    config = _tiny_llama(model_type="gemma3_text", num_hidden_layers=12, head_dim=16, sliding_window=1024)
    sliding = model_from_config(config, "g3").layer_is_sliding()
    assert [i for i, s in enumerate(sliding) if not s] == [5, 11]


def test_explicit_layer_types() -> None:
    config = _tiny_llama(model_type="gemma2", head_dim=16, sliding_window=16,
                         layer_types=["full_attention", "sliding_attention"])  # fmt: skip
    model = model_from_config(config, "g2")
    assert model.layer_is_sliding() == (False, True)
    assert model.attention_spans(64) == (64, 16)


def test_sliding_window_changes_no_parameter() -> None:
    plain = model_from_config(_tiny_llama(model_type="mistral", sliding_window=None), "m")
    windowed = model_from_config(_tiny_llama(model_type="mistral", sliding_window=8), "m")
    assert plain.total_params == windowed.total_params


# ================================================================== Llama 4: interleaved MoE, chunked attention


def _tiny_llama4(**overrides: Any) -> dict[str, Any]:
    config: dict[str, Any] = {"model_type": "llama4_text", "hidden_size": 64, "num_hidden_layers": 4,
                              "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
                              "intermediate_size": 32, "intermediate_size_mlp": 96, "num_local_experts": 4,
                              "num_experts_per_tok": 1, "interleave_moe_layer_step": 2, "vocab_size": 100,
                              "attention_chunk_size": 8, "tie_word_embeddings": False}  # fmt: skip
    config.update(overrides)
    return config


def test_tiny_llama4_by_hand() -> None:
    # moe_layers = range(2 - 1, 4, 2) = {1, 3}; layers 0 and 2 dense (width intermediate_size_mlp 96)
    # attention 64*64 + 2*64*32 + 64*64 = 12,288; norms 2*64 = 128
    # MoE layer: router 64*4 = 256 + 4 experts * 3*64*32 (6,144) = 24,576 + shared 6,144
    #   -> 12,288 + 128 + 256 + 24,576 + 6,144 = 43,392
    # dense layer: 12,288 + 128 + 3*64*96 (18,432) = 30,848
    # total 2*43,392 + 2*30,848 + 100*64 (embedding) + 100*64 (head) + 64 = 161,344
    # active: less 2 MoE layers * 3 idle experts * 6,144 = 36,864 -> 124,480
    model = model_from_config(_tiny_llama4(), "tiny-llama4")
    assert model.layer_kinds() == ("dense", "moe", "dense", "moe")
    assert model.layer_param_counts() == (30_848, 43_392, 30_848, 43_392)
    assert model.total_params == 161_344
    assert model.active_params == 124_480
    assert model.ffn_hidden_size == 32 and model.dense_ffn_hidden_size == 96 and model.shared_expert_ffn == 32
    assert not model.router_bias and not model.shared_expert_gate and model.qk_norm == "none"
    # no_rope_layers absent: [int((i + 1) % 4 != 0)] = [1, 1, 1, 0] -> layers 0-2 chunked, 3 full
    assert model.chunked_layer_ids == (0, 1, 2) and model.attention_chunk == 8
    assert len(model.warnings) == 1 and "'no_rope_layers' absent" in model.warnings[0]


def test_llama4_defaults_are_the_config_class_defaults() -> None:
    # Llama4TextConfig defaults: every layer MoE (step 1), 16 experts, top-1, chunk 8192; absent
    # intermediate_size_mlp is never read when no layer is dense
    config = _tiny_llama4(num_local_experts=None, num_experts_per_tok=None, attention_chunk_size=None)
    for key in ("num_local_experts", "num_experts_per_tok", "attention_chunk_size", "interleave_moe_layer_step",
                "intermediate_size_mlp"):  # fmt: skip
        del config[key]
    model = model_from_config(config, "d")
    assert model.layer_kinds() == ("moe",) * 4
    assert (model.num_experts, model.experts_top_k, model.attention_chunk) == (16, 1, 8192)
    for key in ("num_local_experts", "num_experts_per_tok", "attention_chunk_size", "interleave_moe_layer_step"):
        assert any(f"'{key}'" in w for w in model.warnings), key
    assert not any("intermediate_size_mlp" in w for w in model.warnings)


def test_llama4_moe_layers_list_overrides_the_step() -> None:
    # moe_layers [0] wins over interleave_moe_layer_step 2 (which would give {1, 3}): warned
    model = model_from_config(_tiny_llama4(moe_layers=[0]), "m")
    assert model.layer_kinds() == ("moe", "dense", "dense", "dense")
    assert any("'interleave_moe_layer_step'" in w for w in model.warnings)
    # an empty list: no MoE layer, every layer a dense MLP of width 96 (no router, no experts)
    # 4 * 30,848 + 12,864 = 136,256
    dense = model_from_config(_tiny_llama4(moe_layers=[]), "d")
    assert not dense.is_moe and dense.ffn_hidden_size == 96
    assert dense.total_params == 4 * 30_848 + 2 * 6_400 + 64 == 136_256


def test_llama4_layer_types_and_no_rope_layers() -> None:
    types = ["full_attention", "chunked_attention", "chunked_attention", "full_attention"]
    assert model_from_config(_tiny_llama4(layer_types=types), "t").chunked_layer_ids == (1, 2)
    # no_rope_layers: 1 = RoPE (chunked), 0 = NoPE (full); empty falls back to the default
    assert model_from_config(_tiny_llama4(no_rope_layers=[0, 1, 0, 1]), "n").chunked_layer_ids == (1, 3)
    assert model_from_config(_tiny_llama4(no_rope_layers=[]), "n").chunked_layer_ids == (0, 1, 2)
    assert model_from_config(_tiny_llama4(no_rope_layer_interval=2), "n").chunked_layer_ids == (0, 2)
    assert model_from_config(_tiny_llama4(no_rope_layers=[0] * 4), "n").attention_chunk is None


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        ({"attention_chunk_size": None}, "attention_chunk_size"),  # create_chunked_causal_mask raises
        ({"layer_types": ["sliding_attention"] * 4}, "sliding_attention"),
        ({"no_rope_layers": [1, 1]}, "no_rope_layers"),  # shorter than the layers
        ({"no_rope_layers": [2, 1, 1, 1]}, "no_rope_layers"),
        ({"moe_layers": [4]}, "moe_layers"),  # beyond the last layer
        ({"num_local_experts": 1}, "num_local_experts"),  # a router and a shared expert beside one expert
        ({"interleave_moe_layer_step": 0}, "interleave_moe_layer_step"),
    ],
)
def test_llama4_bad_layouts_are_refused(extra: dict[str, Any], key: str) -> None:
    with pytest.raises(InputError, match=key):
        model_from_config(_tiny_llama4(**extra), "x")


def test_llama4_wrapper_reads_the_text_config() -> None:
    text = _tiny_llama4()
    wrapped = {"model_type": "llama4", "text_config": text, "vision_config": {"hidden_size": 1408},
               "image_token_index": 200092, "tie_word_embeddings": False}  # fmt: skip
    model = model_from_config(wrapped, "w")
    assert model.total_params == 161_344
    assert any("vision" in w for w in model.warnings)
    # other wrappers stay refused
    with pytest.raises(InputError, match="text_config"):
        model_from_config({"model_type": "llava", "text_config": text}, "x")


def test_chunked_attention_keys_by_hand() -> None:
    # 4 layers, chunk 3 on layers 0-2, layer 3 full. s = 8: chunks [3, 3, 2]:
    #   chunked: (2 * 3*4/2 + 2*3/2) / 8 = (12 + 3) / 8 = 1.875;  full: (8 + 1)/2 = 4.5
    #   mean over layers (3*1.875 + 4.5)/4 = 2.53125
    spec = _spec(attention_chunk=3, chunked_layer_ids=(0, 1, 2))
    assert spec.mean_causal_keys(8) == 2.53125
    # s = 6: two full chunks: 2*6/6 = 2; full 3.5 -> (3*2 + 3.5)/4 = 2.375
    assert spec.mean_causal_keys(6) == 2.375
    # s = 3 <= chunk: every layer full causal, (3 + 1)/2 = 2
    assert spec.mean_causal_keys(3) == 2.0
    assert spec.attention_spans(8) == (3, 3, 3, 8)
    assert spec.layer_is_chunked() == (True, True, True, False)
    # every layer chunked when no ids are given: 1.875
    assert _spec(attention_chunk=3).mean_causal_keys(8) == 1.875
    # the tiny Llama 4 (chunk 8, layers 0-2 chunked) at s = 20: chunks [8, 8, 4]:
    #   (2*36 + 10)/20 = 4.1; full 10.5 -> (3*4.1 + 10.5)/4 = 5.7
    assert model_from_config(_tiny_llama4(), "t").mean_causal_keys(20) == pytest.approx(5.7, rel=1e-12)


def test_chunked_attention_changes_no_parameter() -> None:
    assert _spec(attention_chunk=3).total_params == _spec().total_params


# ================================================================== refusals


@pytest.mark.parametrize(
    ("config", "match"),
    [
        ({"model_type": "mamba", "hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 100}, "mamba"),
        ({"model_type": "rwkv", "hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 100}, "rwkv"),
        ({"model_type": "jamba", "hidden_size": 64, "num_hidden_layers": 2, "vocab_size": 100}, "jamba"),
        ({"model_type": "t5", "d_model": 64, "is_encoder_decoder": True}, "encoder"),
        ({"model_type": "llava", "text_config": {"hidden_size": 64}}, "text_config"),
    ],
)
def test_non_decoder_architectures_are_refused(config: dict[str, Any], match: str) -> None:
    with pytest.raises(InputError, match=match):
        model_from_config(config, "x")


@pytest.mark.parametrize(
    ("extra", "key"),
    [
        ({"model_type": "newhybrid", "state_size": 16}, "state_size"),  # an SSM key in an unknown type
        ({"model_type": "newhybrid", "hybrid_override_pattern": "M-M*"}, "hybrid_override_pattern"),
        # Llama 4's MoE layout keys are read for model_type llama4_text only
        ({"model_type": "llama", "interleave_moe_layer_step": 2}, "interleave_moe_layer_step"),
        ({"model_type": "somethingnew", "intermediate_size_mlp": 256}, "intermediate_size_mlp"),
        ({"model_type": "mixtral", "moe_layers": [1]}, "moe_layers"),
        ({"model_type": "minimaxish", "shared_intermediate_size": 128}, "shared_intermediate_size"),
        ({"add_cross_attention": True}, "add_cross_attention"),
        ({"model_type": "qwen2", "layer_types": ["linear_attention", "full_attention"]}, "linear_attention"),
        ({"model_type": "deepseek_v3", "moe_layer_freq": [0, 1]}, "moe_layer_freq"),
    ],
)
def test_unmodelled_math_keys_are_refused(extra: dict[str, Any], key: str) -> None:
    config = _tiny_mla(**extra) if extra.get("model_type") == "deepseek_v3" else _tiny_llama(**extra)
    with pytest.raises(InputError, match=key):
        model_from_config(config, "x")


def test_error_names_the_key_present_in_the_file() -> None:
    # GPT-2 n_inner: 0 used to be reported as 'intermediate_size' = 0
    config = {"model_type": "gpt2", "n_embd": 64, "n_layer": 2, "n_head": 4, "n_inner": 0, "vocab_size": 100}
    with pytest.raises(InputError, match="'n_inner' = 0"):
        model_from_config(config, "gpt2")
    with pytest.raises(InputError, match="'n_routed_experts' = 0"):
        model_from_config(_tiny_mla(n_routed_experts=0), "ds")


def test_default_that_breaks_the_model_is_named_in_the_error() -> None:
    # MistralConfig defaults to 8 KV heads, which 4 heads cannot hold; the message says it was assumed
    config = _tiny_llama(model_type="mistral")
    del config["num_key_value_heads"]
    with pytest.raises(InputError, match="default 8 assumed"):
        model_from_config(config, "m")


# ================================================================== warnings


def test_unknown_model_type_warns_with_its_name() -> None:
    model = model_from_config(_tiny_llama(model_type="somethingnew"), "m")
    assert model.total_params == 99_136
    assert any("'somethingnew'" in w for w in model.warnings)
    assert model_from_config(_tiny_llama(), "m").warnings == ()


def test_unknown_key_warns() -> None:
    model = model_from_config(_tiny_llama(mystery_width=128), "m")
    assert any("'mystery_width'" in w and "neither" in w for w in model.warnings)


def test_harmless_keys_do_not_warn() -> None:
    config = _tiny_llama(rope_scaling={"rope_type": "llama3", "factor": 8.0}, attn_logit_softcapping=50.0,
                         rope_theta=5e5, torch_dtype="bfloat16", initializer_range=0.02, bos_token_id=1,
                         quantization_config={"quant_method": "fp8"}, _name_or_path="x")  # fmt: skip
    assert model_from_config(config, "m").warnings == ()


@pytest.mark.parametrize(
    ("config", "key"),
    [
        (_tiny_llama(sliding_window=4096), "sliding_window"),  # LlamaAttention attends to everything
        (_tiny_llama(num_local_experts=8, num_experts_per_tok=2), "num_local_experts"),  # Llama is dense
        (_tiny_llama(model_type="gpt2"), "num_key_value_heads"),  # GPT-2 is multi-head attention
        (_tiny_llama(model_type="falcon"), "num_key_value_heads"),  # old Falcon: multi_query
        (_tiny_llama(model_type="bloom"), "intermediate_size"),  # BloomMLP always builds 4h
        (_tiny_mla(index_topk=2048, index_n_heads=64), "index_topk"),  # DeepSeek-V3.2 indexer
        (_tiny_llama(model_type="somethingnew", attention_chunk_size=8192), "attention_chunk_size"),
    ],
)
def test_ignored_or_unmodelled_keys_warn(config: dict[str, Any], key: str) -> None:
    model = model_from_config(config, "m")
    assert any(f"'{key}'" in w for w in model.warnings), model.warnings


def test_ignored_keys_do_not_change_the_count() -> None:
    assert model_from_config(_tiny_llama(sliding_window=4096), "m").sliding_window is None
    assert not model_from_config(_tiny_llama(num_local_experts=8, num_experts_per_tok=2), "m").is_moe


def test_config_class_defaults_are_warned() -> None:
    config = _tiny_llama(model_type="mixtral")  # no num_local_experts: MixtralConfig default 8, top-2
    model = model_from_config(config, "mix")
    assert model.num_experts == 8 and model.experts_top_k == 2
    assert any("'num_local_experts'" in w and "default 8" in w for w in model.warnings)


def test_generic_moe_keys_on_an_unknown_model_type() -> None:
    # an unknown model_type with DeepSeek-style MoE keys (e.g. glm4_moe) reads them generically:
    # first layer dense (f=96), then 4 routed + 1 shared experts of width 16, top-2
    config = _tiny_llama(model_type="glm4_moe_like", num_key_value_heads=4, intermediate_size=96,
                         n_routed_experts=4, n_shared_experts=1, num_experts_per_tok=2, moe_intermediate_size=16,
                         first_k_dense_replace=1)  # fmt: skip
    model = model_from_config(config, "glm")
    assert model.layer_kinds() == ("dense", "moe")
    # dense layer 4*64^2 + 128 + 3*64*96 = 34,944; MoE layer 16,384 + 128 + 256 + 5*3,072 = 32,128
    assert model.total_params == 34_944 + 32_128 + 2 * 6_400 + 64
    assert any("'glm4_moe_like'" in w for w in model.warnings)


# ================================================================== ModelSpec invariants


def _spec(**extra: Any) -> ModelSpec:
    fields: dict[str, Any] = dict(name="s", hidden_size=64, num_layers=4, num_heads=4, num_kv_heads=4, head_dim=16,
                                  ffn_hidden_size=128, vocab_size=100, max_seq_len=32, mlp="gated",
                                  tied_embeddings=False)  # fmt: skip
    fields.update(extra)
    return ModelSpec(**fields)


@pytest.mark.parametrize(
    "extra",
    [
        {"dense_layer_ids": (0,)},  # dense model
        {"num_shared_experts": 1},  # dense model
        {"num_experts": 4, "experts_top_k": 2, "dense_layer_ids": (1, 0)},  # not increasing
        {"num_experts": 4, "experts_top_k": 2, "dense_layer_ids": (4,)},  # beyond the last layer
        {"q_lora_rank": 8},  # without kv_lora_rank
        {"sliding_layer_ids": (0,)},  # without a window
        {"chunked_layer_ids": (0,)},  # without a chunk
        {"attention_chunk": 4, "chunked_layer_ids": (4,)},  # beyond the last layer
        {"attention_chunk": 4, "sliding_window": 4, "sliding_layer_ids": (0,)},  # layer 0 slides and chunks
        {"kv_lora_rank": 8, "qk_rope_head_dim": 16},  # rope part as wide as the head
    ],
)
def test_model_spec_rejects_inconsistent_fields(extra: dict[str, Any]) -> None:
    with pytest.raises(ValueError):
        _spec(**extra)


def test_hand_built_spec_defaults_keep_the_classic_counts() -> None:
    # no new field given: 2 RMSNorms a layer, final norm, no MoE extras -> the classic formula
    spec = _spec()
    layer = 4 * 64 * 64 + 3 * 64 * 128 + 2 * 64
    assert spec.layer_params == layer
    assert spec.total_params == 4 * layer + 2 * 100 * 64 + 64
    assert spec.layer_kinds() == ("dense",) * 4 and spec.attention_spans(10) == (10,) * 4

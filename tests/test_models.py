"""Parameter counts (presets against published totals, tiny configs by hand) and the HF loader."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from paraplan.cost_models.errors import InputError
from paraplan.cost_models.models import ModelSpec, load_model, model_from_config, model_preset_names

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


def test_no_known_keys_raises_input_error() -> None:
    with pytest.raises(InputError):
        model_from_config({"model_type": "mystery", "d_model": 64}, "bad")


def test_input_error_is_value_error() -> None:
    assert issubclass(InputError, ValueError)


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


def test_model_spec_is_frozen() -> None:
    model = load_model("llama2-7b")
    with pytest.raises(ValueError):
        model.hidden_size = 1  # type: ignore[misc]
    assert isinstance(model, ModelSpec)

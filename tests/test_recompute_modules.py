"""Megatron-LM's selective recompute modules (`Stack.recompute_modules`): per-module memory and
time worked out by hand, Megatron's refusals, the launch round trip, and that recomputing more
modules never raises the predicted activation peak."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from paraplan.cost_models.candidates import Layouts
from paraplan.cost_models.errors import InputError
from paraplan.cost_models.flops import recompute_flops_per_step
from paraplan.cost_models.frameworks import default_stack
from paraplan.cost_models.layout import Layout, parse_knob
from paraplan.cost_models.memory import activation_bytes, selective_dropped_bytes
from paraplan.cost_models.models import ModelSpec, load_hf_config, load_model
from paraplan.cost_models.stack import RECOMPUTE_MODULES, Stack, parse_modules
from paraplan.emit import emit_launch
from paraplan.hardware_specs.loader import load_cluster
from paraplan.launch.importer import layout_from_launch, read_launch_text
from paraplan.question import Question

# moonshotai/Moonlight-16B-A3B config.json (as benchmarks/data/runs_public.csv quotes it)
MOONLIGHT = {
    "model_type": "deepseek_v3", "hidden_size": 2048, "num_hidden_layers": 27, "num_attention_heads": 16,
    "num_key_value_heads": 16, "intermediate_size": 11264, "moe_intermediate_size": 1408, "n_routed_experts": 64,
    "n_shared_experts": 2, "num_experts_per_tok": 6, "first_k_dense_replace": 1, "moe_layer_freq": 1,
    "kv_lora_rank": 512, "q_lora_rank": None, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
    "vocab_size": 163840, "max_position_embeddings": 8192, "hidden_act": "silu", "tie_word_embeddings": False,
}  # fmt: skip


@pytest.fixture(scope="module")
def moonlight(tmp_path_factory: pytest.TempPathFactory) -> ModelSpec:
    path = Path(tmp_path_factory.mktemp("moonlight")) / "config.json"
    path.write_text(json.dumps(MOONLIGHT))
    return load_hf_config(path)


def _one(**knobs: object) -> Layouts:
    base: dict[str, object] = {"recompute": "selective", "seq_len": 4096, "global_batch": 8}
    base.update(knobs)
    return Layouts.of([Layout(**{k: parse_knob(k, v) for k, v in base.items()})])


def _f(x: object) -> float:
    return float(np.asarray(x).reshape(-1)[0])


def test_mlp_drops_inner_and_norm_output_by_hand() -> None:
    # Llama 2 7B, bf16, TP 1: a dense layer's MLP keeps gate, up and product, 6f = 6 x 11008 B per
    # token, and fc1's saved norm output 2h = 2 x 4096 B; the checkpoint keeps the residual instead.
    model = load_model("llama2-7b")
    dropped = _f(selective_dropped_bytes(model, _one(), Stack(recompute_modules=frozenset({"mlp"}))))
    assert dropped == 6 * 11008 + 2 * 4096  # 74,240 B
    # with TP 4 and sequence parallelism the inner is split over TP, the norm output too
    sp = _f(
        selective_dropped_bytes(
            model, _one(tp=4, sequence_parallel=True), Stack(recompute_modules=parse_modules("mlp"))
        )
    )
    assert sp == 6 * 11008 / 4 + 2 * 4096 / 4


def test_moonlight_modules_by_hand(moonlight: ModelSpec) -> None:
    # 26 of 27 layers MoE, top-6 experts of width 1408, 2 shared experts of 1408, MLA with 16 heads
    # of qk 192 (128 + 64 rope) and v 128; TP 1, bf16, per token of the mean layer.
    lay = _one()
    moe = 26 / 27

    def dropped(*modules: str) -> float:
        return _f(selective_dropped_bytes(moonlight, lay, Stack(recompute_modules=parse_modules(modules))))

    assert dropped("moe_act") == pytest.approx(moe * 2 * 6 * 1408)  # fc2 input of the 6 routed copies
    assert dropped("mla_up_proj") == pytest.approx(2 * (16 * 192 + 16 * 192 + 16 * 128))  # Q, K, V
    # the input norm (MLA: its own module) on every layer, the pre-MLP norm on the MoE layers, 2h each
    assert dropped("layernorm") == pytest.approx(2 * 2048 * (1 + moe))
    assert dropped("shared_experts") == pytest.approx(moe * 6 * 2 * 1408)
    # moe holds moe_act and shared_experts: the union, counted once
    assert dropped("moe", "moe_act", "shared_experts") == pytest.approx(dropped("moe"))
    assert dropped("core_attn") == 0.0  # flash attention keeps no scores


def test_recompute_time_by_hand() -> None:
    # Llama 2 7B, one micro-batch of 4096 tokens on an H100: the mlp module's recompute is the dense
    # MLP's forward GEMMs (3 matrices, 2 x 3 x 4096 x 11008 FLOPs per token) plus its activation
    # kernel (6f bytes per token), the same as that part of the forward.
    from paraplan.cost_models import compute

    model = load_model("llama2-7b")
    cluster = load_cluster("h100-sxm")
    lay = _one()
    tokens = lay.tokens_per_micro_batch
    none = compute.micro_batch_times(model, lay, cluster, Stack(recompute_modules=frozenset()))
    mlp = compute.micro_batch_times(model, lay, cluster, Stack(recompute_modules=frozenset({"mlp"})))
    assert _f(none.layer_recompute_s) == 0.0
    rate = compute.matmul_rate(cluster, lay)
    h, f = 4096.0, 11008.0
    ones = np.ones(1)
    gemms = compute.gemm_s(tokens, 2 * f * ones, h * ones, rate, cluster) + compute.gemm_s(
        tokens, h * ones, f * ones, rate, cluster
    )
    activation = compute._kernels_s(tokens * 6.0 * f, ones, cluster)
    assert _f(mlp.layer_recompute_s) == pytest.approx(
        _f((gemms + activation) / compute.kernel_efficiency(lay, cluster))
    )
    # HFU: the dense MLP's GEMM FLOPs again, 32 layers x 2 x 3 h f per token
    flops = recompute_flops_per_step(model, lay, frozenset({"mlp"}))
    assert _f(flops) == pytest.approx(8 * 4096 * 32 * 2 * 3 * h * f)


def test_megatron_refusals(moonlight: ModelSpec) -> None:
    cluster = load_cluster("h100-sxm")
    llama = load_model("llama2-7b")
    with pytest.raises(InputError, match="moe_act"):
        Question.of(llama, cluster, {"recompute": "selective"}, {"recompute_modules": "moe_act"})
    with pytest.raises(InputError, match="mla_up_proj"):
        Question.of(llama, cluster, {"recompute": "selective"}, {"recompute_modules": ["mla_up_proj"]})
    with pytest.raises(InputError, match="Delayed scaling"):
        Question.of(moonlight, cluster, {"precision": "fp8"}, {"recompute_modules": "layernorm"})
    Question.of(
        moonlight, cluster, {"precision": "fp8"}, {"recompute_modules": "layernorm", "fp8_recipe": "tensorwise"}
    )
    with pytest.raises(InputError, match="mhc"):
        Question.of(llama, cluster, {}, {"recompute_modules": "core_attn,mhc"})
    for framework in ("torchtitan", "deepspeed"):
        with pytest.raises(InputError, match="Megatron-LM's"):
            Question.of(llama, cluster, {"framework": framework}, {"recompute_modules": "mlp"})


def test_emit_import_round_trip(moonlight: ModelSpec) -> None:
    lay = Layout(tp=2, dp=4, ep=8, recompute=parse_knob("recompute", "selective"), sequence_parallel=True,
                 global_batch=8, seq_len=4096)  # fmt: skip
    for modules in ({"mla_up_proj", "mlp"}, {"layernorm", "moe_act"}, {"core_attn"}):
        stack = Stack(recompute_modules=parse_modules(modules))
        text = emit_launch("megatron", moonlight, lay, stack)
        if modules != {"core_attn"}:
            assert "--recompute-modules " + " ".join(m for m in RECOMPUTE_MODULES if m in modules) in text
        knobs, read, _, _ = layout_from_launch(read_launch_text(text, "megatron"), moonlight)
        back = default_stack(lay.framework).with_overrides(**read)
        assert back.recompute_modules == frozenset(modules)
        assert knobs["recompute"] == parse_knob("recompute", "selective")


def test_more_modules_never_raise_the_activation_peak(moonlight: ModelSpec) -> None:
    lays = [_one(tp=2, dp=4, ep=8, sequence_parallel=True), _one(tp=2, dp=2, pp=2, ep=4, precision="fp8")]
    for lay in lays:
        layers = np.full(len(lay), moonlight.num_layers / lay.floats("pp")[0])
        peaks = {}
        for n in range(len(RECOMPUTE_MODULES) + 1):
            for subset in itertools.combinations(RECOMPUTE_MODULES, n):
                stack = Stack(recompute_modules=frozenset(subset), fp8_recipe="tensorwise")
                peaks[frozenset(subset)] = _f(activation_bytes(moonlight, lay, stack, layers, 0.0, True, False))
        for small, big in itertools.product(peaks, peaks):
            if small < big:
                assert peaks[big] <= peaks[small] * (1 + 1e-12), (sorted(small), sorted(big))


def test_moe_module_by_hand(moonlight: ModelSpec) -> None:
    # The whole MoE layer: the routed experts' inner (gated 6f x top-6, f 1408), the 2 shared experts'
    # (6 x 2 x 1408) and the 6 dispatched copies of the token, 2h each (ETP 1), on the 26/27 MoE layers.
    dropped = _f(selective_dropped_bytes(moonlight, _one(), Stack(recompute_modules=parse_modules("moe"))))
    assert dropped == pytest.approx(26 / 27 * (6 * 6 * 1408 + 6 * 2 * 1408 + 6 * 2 * 2048))
    # and its dispatch and combine run again: 3 forward-direction passes' exchanges + the backward's,
    # 2 x (2 + 1) = 6 all-to-alls per MoE layer instead of 2 x (1 + 1) = 4
    from paraplan.cost_models.traffic import ep_per_layer_s

    cluster = load_cluster("h100-sxm")
    lay = _one(dp=8, ep=8)
    plain = _f(ep_per_layer_s(moonlight, lay, cluster, Stack()))
    again = _f(ep_per_layer_s(moonlight, lay, cluster, Stack(recompute_modules=parse_modules("moe"))))
    assert again == pytest.approx(plain * 6 / 4)

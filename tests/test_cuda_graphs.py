"""Megatron-LM's CUDA graphs (`Stack.cuda_graph_scope`): the dispatches a captured scope takes off
a dropless MoE layer's host floor (`compute.moe_layer_ops`), the launch flags and their reading."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conftest import gpt_spec, one

from paraplan.cost_models.compute import moe_layer_ops
from paraplan.cost_models.errors import InputError
from paraplan.cost_models.frameworks import default_stack
from paraplan.cost_models.layout import Layout
from paraplan.cost_models.models import ModelSpec
from paraplan.cost_models.stack import EpDispatcher, Stack, parse_scopes
from paraplan.emit import emit_launch
from paraplan.hardware_specs.loader import load_cluster
from paraplan.launch.emitters import check_emitted
from paraplan.launch.importer import layout_from_launch, read_launch_text
from paraplan.question import Question


def _f(x: object) -> float:
    return float(np.asarray(x).reshape(-1)[0])


def _qwen(**extra: Any) -> ModelSpec:
    # Qwen3-30B-A3B's layer: GQA with q/k norms, 128 experts top-8, no shared experts, no biases
    return gpt_spec(mlp="gated", linear_bias=False, mlp_bias=False, qkv_bias=False, out_bias=False,
                    num_experts=128, experts_top_k=8, qk_norm="head", **extra)  # fmt: skip


def _ops(scope: str, dispatcher: EpDispatcher = "alltoall") -> float:
    lay = one(dp=8, ep=8, micro_batch=1, precision="fp8")
    stack = Stack(cuda_graph_scope=parse_scopes(scope), ep_dispatcher=dispatcher, moe_aux_loss=True)  # Qwen3's
    return _f(moe_layer_ops(_qwen(), lay, stack))


def test_graphed_dispatches_by_hand() -> None:
    # Without graphs the layer dispatches 74 (tests/test_compute.py test_moe_layer_ops_by_hand).
    # moe_router takes the pre-MLP norm (forward, Python backward: 2), the router's forward (1 GEMM
    # + 7 kernels: 8) and its Python backwards (dgrad, wgrad, the aux-loss scaler: 3) = 13;
    # moe_preprocess the alltoall dispatcher's 8 bookkeeping calls but the device-to-host copy = 7;
    # the captured region costs 2 replays (forward, backward): 74 - 20 + 2 = 56.
    assert _ops("moe_router,moe_preprocess") == 56.0
    # attn takes the attention's forward (2 GEMMs, 7 kernels, 2 FP8 casts: 11) and its Python
    # backward (4 GEMMs, 7 - the residual add, 2 casts: 12) = 23, in the same region: 56 - 23 = 33.
    assert _ops("attn,moe_router,moe_preprocess") == 33.0
    # the flex dispatcher (HybridEP) books 3, of which 2 are graphed: 59 - 13 - 2 - 23 + 2 = 23
    assert _ops("", "hybridep") == 59.0
    assert _ops("attn,moe_router,moe_preprocess", "hybridep") == 23.0
    # the whole step one graph: nothing is dispatched per layer, the floor is gone
    assert _ops("full_iteration") == 0.0
    assert _ops("full_iteration,attn") == 0.0
    # moe_preprocess is captured only inside moe_router's graph; mlp, moe and mamba hold no part of
    # a dropless MoE layer: none of them changes its count
    assert _ops("moe_router") == 74.0 - 13.0 + 2.0
    assert _ops("moe_preprocess") == _ops("mlp,moe,mamba") == 74.0


def test_shared_experts_are_graphed_but_their_add() -> None:
    # two shared experts without a gate at TP1 BF16: forward 2 GEMMs + activation (their add to the
    # routed output stays outside) = 3, backward 4 GEMM backwards + the activation's = 5: 8 more
    # graphed with moe_router than for the same layer without shared experts
    lay = one(dp=8, ep=8, micro_batch=1)
    scope = Stack(cuda_graph_scope=parse_scopes("moe_router"))
    plain = _qwen()
    shared = _qwen(num_shared_experts=2)
    more = _f(moe_layer_ops(shared, lay, Stack())) - _f(moe_layer_ops(plain, lay, Stack()))
    more_graphed = _f(moe_layer_ops(shared, lay, scope)) - _f(moe_layer_ops(plain, lay, scope))
    assert more - more_graphed == 8.0


def test_scopes_are_checked_and_megatron_only() -> None:
    cluster = load_cluster("h100-sxm")
    model = _qwen()
    with pytest.raises(InputError, match="full_graph not among"):
        Question.of(model, cluster, {}, {"cuda_graph_scope": "attn,full_graph"})
    with pytest.raises(InputError, match="without CUDA graphs"):
        Question.of(model, cluster, {"framework": "torchtitan"}, {"cuda_graph_scope": "attn"})
    assert Question.of(model, cluster, {}, {"cuda_graph_scope": ["moe_router", "attn"]}).stack.cuda_graph_scope == {
        "attn", "moe_router"}  # fmt: skip


@pytest.mark.parametrize(
    ("scope", "stack", "dense", "refusal"),
    [
        # Megatron-LM d98e8a64 transformer_config.py __post_init__ asserts each of these
        ("full_iteration,attn", {}, False, "must be empty when cuda_graph_impl"),
        ("moe,moe_router", {"token_drop": True}, False, "both moe and moe_router"),
        ("moe_preprocess", {}, False, "only supported with moe_router"),
        ("moe", {}, False, "only supported with drop-padding"),
        ("mlp", {}, False, "only supported for dense layers"),
        ("moe_router", {}, True, "only supported for MoE"),
    ],
)
def test_scope_combinations_megatron_refuses(scope: str, stack: dict[str, object], dense: bool, refusal: str) -> None:
    cluster = load_cluster("h100-sxm")
    model = gpt_spec() if dense else _qwen()
    with pytest.raises(InputError, match=refusal):
        Question.of(model, cluster, {}, {"cuda_graph_scope": scope, **stack})


def test_scope_combinations_megatron_runs() -> None:
    # the recipes' scopes (Megatron-Bridge: attn + moe_router + moe_preprocess; full_iteration
    # alone; a drop-padding MoE layer graphed whole; a dense model's attn + mlp)
    cluster = load_cluster("h100-sxm")
    for model, scope, stack in [(_qwen(), "attn,moe_router,moe_preprocess", {}), (_qwen(), "full_iteration", {}),
                                (_qwen(), "moe", {"token_drop": True}), (gpt_spec(), "attn,mlp", {})]:  # fmt: skip
        assert Question.of(model, cluster, {}, {"cuda_graph_scope": scope, **stack}).stack.cuda_graph_scope


def test_emit_import_round_trip() -> None:
    model = _qwen(num_layers=4)
    lay = Layout(dp=8, ep=8, global_batch=64, seq_len=2048)
    for scope, flags in (
        # the TE RNG tracker with any graph (training/models/gpt.py at d98e8a64 asserts it), and
        # arguments.py asserts --no-check-for-nan-in-loss-and-grad with full_iteration
        ("attn,moe_router,moe_preprocess", "--cuda-graph-impl transformer_engine \\ --cuda-graph-modules attn moe_router moe_preprocess \\ --te-rng-tracker"),
        ("full_iteration", "--cuda-graph-impl full_iteration \\ --no-check-for-nan-in-loss-and-grad \\ --te-rng-tracker"),
        ("", None),
    ):  # fmt: skip
        stack = Stack(cuda_graph_scope=parse_scopes(scope))
        text = emit_launch("megatron", model, lay, stack)
        if flags is None:
            assert "--cuda-graph" not in text
        else:
            assert " ".join(text.split()).count(flags) == 1, text
        assert check_emitted("megatron", text) == []  # each module its own argument (nargs "+")
        _, read, _, _ = layout_from_launch(read_launch_text(text, "megatron"), model)
        assert default_stack(lay.framework).with_overrides(**read).cuda_graph_scope == parse_scopes(scope)

"""Stack settings a framework or a model cannot run are refused where the question is asked, as
the launch config would refuse them: an answer for a plan that cannot be launched is no answer."""

from __future__ import annotations

import itertools
from dataclasses import fields

import pytest
from conftest import Invoke, one_error_line

from paraplan.api import load_model
from paraplan.cost_models.errors import InputError
from paraplan.cost_models.frameworks import default_stack, stack_unsupported
from paraplan.cost_models.layout import Framework, Layout
from paraplan.cost_models.stack import STACK_CHOICES, Stack
from paraplan.fixes import _in_framework
from paraplan.hardware_specs.loader import load_cluster
from paraplan.launch.emitters import emit_launch
from paraplan.question import Question, stack_from
from paraplan.search import Constraints, rank_space


@pytest.mark.parametrize(
    ("setting", "frameworks"),
    [
        ("mtp", [Framework.DEEPSPEED, Framework.TORCHTITAN]),  # Megatron-LM's --mtp-num-layers
        ("token_drop", [Framework.DEEPSPEED, Framework.TORCHTITAN]),  # its capacity-factor flags
        ("cpu_checkpointing", [Framework.MEGATRON, Framework.TORCHTITAN]),  # DeepSpeed's checkpointing
    ],
)
def test_a_setting_only_another_framework_runs_is_refused(setting: str, frameworks: list[Framework]) -> None:
    for framework in frameworks:
        with pytest.raises(InputError, match=f"{setting.replace('_', '-')}: .* cannot run it"):
            stack_from(framework, {setting: True})
    runs = next(f for f in Framework if f not in frameworks)
    assert getattr(stack_from(runs, {setting: True}), setting) is True


@pytest.mark.parametrize("framework", [Framework.MEGATRON, Framework.TORCHTITAN])
def test_a_live_parameter_limit_is_deepspeeds_alone(framework: Framework) -> None:
    # FSDP and Megatron-LM have no stage3_max_live_parameters; their default value is no change
    with pytest.raises(InputError, match=r"zero3-max-live-params 3e\+09: .* DeepSpeed's stage3_max_live_parameters"):
        stack_from(framework, {"zero3_max_live_params": 3e9})
    assert stack_from(framework, {"zero3_max_live_params": 1e9}).zero3_max_live_params == 1e9
    assert stack_from(Framework.DEEPSPEED, {"zero3_max_live_params": "3e9"}).zero3_max_live_params == 3e9


@pytest.mark.parametrize("value", [0, -1, 0.0, float("nan"), float("inf"), True, "many", [3e9]])
def test_a_live_parameter_limit_is_a_positive_count(value: object) -> None:
    with pytest.raises(InputError, match="zero3-max-live-params must be a positive number"):
        stack_from(Framework.DEEPSPEED, {"zero3_max_live_params": value})
    with pytest.raises(ValueError, match="positive number"):
        Stack(zero3_max_live_params=value)  # type: ignore[arg-type]


def test_mtp_needs_a_model_with_mtp_modules() -> None:
    with pytest.raises(InputError, match="llama2-7b has no multi-token-prediction modules"):
        Question.of(load_model("llama2-7b"), load_cluster("a100-80g"), {"global_batch": 64}, {"mtp": True})


def test_cpu_checkpointing_makes_the_search_recompute_in_full() -> None:
    """DeepSpeed's cpu_checkpointing moves full recompute's checkpoints: a layout without full
    recompute breaks the limit, and the search finds the full-recompute variants of its cores
    (recompute trades memory, so the cores are priced at recompute none first)."""
    model, cluster = load_model("llama2-7b"), load_cluster("a100-80g")
    knobs = {"framework": "deepspeed", "global_batch": 64}
    on = Question.of(model, cluster, knobs, {"cpu_checkpointing": True})
    ranking = rank_space(on, [8], Constraints(), 3)
    assert ranking.groups
    best = ranking.evaluation.layouts.at(ranking.best[0])
    assert str(best.recompute) == "full"
    selective = Question.of(model, cluster, {**knobs, "recompute": "selective"}, {"cpu_checkpointing": True})
    ev = selective.evaluate(selective.space(8))
    assert ev.checks["cpu_checkpointing"].all()


def test_tp_comm_overlap_makes_the_search_take_sequence_parallelism() -> None:
    """Megatron-LM asserts --tp-comm-overlap with sequence parallelism: with the setting, every
    layout the search admits at TP > 1 runs SP, a TP > 1 layout without SP breaks the limit, and
    TP 1 (nothing to overlap) is admitted as it is."""
    model, cluster = load_model("llama2-13b"), load_cluster("h100-sxm")
    on = Question.of(model, cluster, {"global_batch": 64}, {"tp_comm_overlap": True})
    ev = on.evaluate(on.space(16))
    tp, sp = ev.layouts.tp, ev.layouts.sequence_parallel
    assert (ev.checks["tp_comm_overlap"] == ((tp > 1) & (sp == 0))).all()
    ranking = rank_space(on, [16], Constraints(), 5)
    for group in ranking.groups:
        best = ranking.evaluation.layouts.at(group[0])
        assert best.tp == 1 or best.sequence_parallel


def test_per_layer_cuda_graphs_make_the_search_leave_full_recompute() -> None:
    """Megatron-LM asserts full recompute only with full-iteration CUDA graphs: with per-layer
    graphs every full-recompute layout breaks the limit and the search takes none; with
    full_iteration (or no graphs) full recompute stays admitted."""
    model, cluster = load_model("llama2-13b"), load_cluster("h100-sxm")
    graphed = Question.of(model, cluster, {"global_batch": 64}, {"cuda_graph_scope": "attn,mlp"})
    ev = graphed.evaluate(graphed.space(16))
    full = ev.layouts.recompute == 2
    assert full.any() and (ev.checks["cuda_graph_recompute"] == full).all()
    ranking = rank_space(graphed, [16], Constraints(), 5)
    for group in ranking.groups:
        assert str(ranking.evaluation.layouts.at(group[0]).recompute) != "full"
    whole = Question.of(model, cluster, {"global_batch": 64}, {"cuda_graph_scope": "full_iteration"})
    assert not whole.evaluate(whole.space(16)).checks["cuda_graph_recompute"].any()


# --- one place for which framework runs which stack setting (frameworks.stack_unsupported) ----------

# Rules that, before, only the launch config asked: `validate` priced these stacks and `emit`
# refused them. Each (framework, CLI options, the setting the error names).
ONCE_EMITTER_ONLY = [
    ("deepspeed", ["--tp-comm-overlap"], "tp-comm-overlap"),  # TE userbuffers: Megatron-LM's flag
    ("torchtitan", ["--tp-comm-overlap"], "tp-comm-overlap"),
    ("megatron", ["--ep-dispatcher", "deepep", "--token-drop"], "ep-dispatcher"),  # DeepEP pads nothing
    ("deepspeed", ["--adam-moments", "bf16"], "adam-moments"),  # Megatron's precision-aware optimizer
    ("torchtitan", ["--adam-moments", "bf16"], "adam-moments"),
    ("deepspeed", ["--master-weights", "remainders"], "master-weights"),  # Apex's DistributedFusedAdam
    ("torchtitan", ["--master-weights", "none"], "master-weights"),
]


@pytest.mark.parametrize(("framework", "options", "setting"), ONCE_EMITTER_ONLY)
def test_validate_refuses_what_only_the_launch_config_refused(invoke: Invoke, framework: str, options: list[str],
                                                              setting: str) -> None:  # fmt: skip
    args = ["validate", "--model", "mixtral-8x7b", "--gpus", "16", "--hardware", "h100-sxm", "--plan", "TP2/PP1/DP8",
            "--framework", framework, "--zero", "1" if framework != "torchtitan" else "3", *options, "--json"]  # fmt: skip
    line = one_error_line(invoke(*args), setting)
    assert framework.replace("megatron", "Megatron-LM").replace("deepspeed", "DeepSpeed") in line


def test_the_triton_flash_kernel_needs_flash_attention(invoke: Invoke) -> None:
    """FlashAttention in Triton is a flash kernel: asked for beside unfused attention it would be
    priced as nothing, so the question refuses the pair with one error line."""
    args = ["validate", "--model", "llama3-8b", "--gpus", "8", "--hardware", "a100-80g", "--plan", "TP1/PP1/DP8",
            "--framework", "torchtitan", "--zero", "3", "--triton-attention"]  # fmt: skip
    one_error_line(invoke(*args, "--no-flash-attention"), "triton-attention needs flash-attention")
    assert invoke(*args).code == 0


def test_pool_questions_check_the_model_as_plain_questions_do(invoke: Invoke) -> None:
    """`pool_question` refused mtp only where the model has MTP modules and never asked the
    recompute modules of the model; it now runs Question.of's checks (`question.stack_for_model`)."""
    pool = ["optimize", "--model", "llama2-7b", "--hardware", "a100-80g:8+rtx4090:8", "--global-batch", "64",
            "--seq-len", "2048", "--json"]  # fmt: skip
    one_error_line(invoke(*pool, "--mtp"), "mtp", "llama2-7b has no multi-token-prediction modules")
    one_error_line(invoke(*pool, "--recompute-modules", "moe_act"), "moe_act", "llama2-7b has no experts")


def _single_changes(framework: Framework) -> list[tuple[str, object]]:
    """Every boolean setting flipped and every other word of each choice, against the framework's
    defaults (recompute module sets are Megatron's alone: refused elsewhere whatever the set)."""
    base = default_stack(framework)
    out: list[tuple[str, object]] = [(f.name, not getattr(base, f.name)) for f in fields(Stack)
                                     if isinstance(getattr(base, f.name), bool)]  # fmt: skip
    out += [(name, word) for name, words in STACK_CHOICES.items() for word in words if word != getattr(base, name)]
    out.append(("recompute_modules", ["core_attn", "mlp"]))
    out.append(("zero3_max_live_params", 3e9))  # the Azure recipes' (DeepSpeed's default is 1e9)
    return out


# A plan per framework that its emitter writes with the framework's own stack, and that meets what
# the settings need of a layout (limits, not stack rules): TP 2 with SP (tp_comm_overlap), EP 2 at
# PP 1 under selective recompute (the combined 1F1B), ZeRO-1 (bf16 moments), full recompute on
# DeepSpeed (cpu_checkpointing); a MoE model with an MTP module where the framework's emitter takes one
# (the DeepSpeed launch writes no MoE model: Megatron-DeepSpeed's are DeepSpeed-MoE layers).
_MTP_MIXTRAL = load_model("mixtral-8x7b").model_copy(update={"mtp_layers": 1, "name": "mixtral-mtp"})
PLANS = {
    Framework.MEGATRON: (_MTP_MIXTRAL, Layout(tp=2, dp=4, ep=2, zero=1, sequence_parallel=True, recompute="selective",
                                     global_batch=64)),
    Framework.DEEPSPEED: (load_model("llama3-8b"), Layout(framework="deepspeed", tp=2, dp=4, zero=1,
                                                            recompute="full", global_batch=64)),
    Framework.TORCHTITAN: (load_model("llama3-8b"), Layout(framework="torchtitan", tp=2, dp=4, zero=3,
                                                          global_batch=64)),
}  # fmt: skip
# What the pinned versions' launch configs cannot write although it is priced: settings that describe
# other releases (the published runs of those releases are calibrated with them), not rules of what
# a framework runs. The emitter may refuse these and nothing else of an accepted stack.
VERSION_ONLY = {
    Framework.MEGATRON: {"tp_overlap", "loss", "pp_outputs_kept", "kv_repeated", "master_weights", "moe_gather_scatter",
                         "triton_attention"},
    Framework.DEEPSPEED: {"tp_overlap", "p2p_overlap", "loss", "pp_outputs_kept", "kv_repeated", "moe_gather_scatter",
                          "triton_attention"},
    Framework.TORCHTITAN: {"flash_attention", "dp_overlap", "main_grads", "p2p_overlap", "attention_saved",
                           "pp_outputs_kept", "kv_repeated", "tp_overlap", "fused_norm", "loss", "moe_gather_scatter",
                           "layer_sac", "triton_attention"},
}  # fmt: skip


def test_the_question_and_the_launch_config_refuse_the_same_stacks() -> None:
    """Every framework x every pair of changed settings (each rule reads at most two): where
    stack_from refuses, the emitter refuses the same setting with the same reason, both read from
    stack_unsupported; where it accepts, the emitter refuses only a version-level setting."""
    for framework, (model, lay) in PLANS.items():
        kind = str(framework)
        emit_launch(kind, model, lay)  # the plan itself is emitted
        singles = _single_changes(framework)
        for first, second in itertools.combinations_with_replacement(singles, 2):
            overrides = dict([first, second])
            stack = default_stack(framework).with_overrides(**overrides)
            unsupported = stack_unsupported(framework, stack)
            try:
                stack_from(framework, overrides)
            except InputError as exc:
                assert unsupported and str(exc) == unsupported[0][1]
                with pytest.raises(InputError) as refused:
                    emit_launch(kind, model, lay, stack)
                setting, reason = unsupported[0]
                assert str(refused.value) == f"cannot emit {kind} for this plan: {setting} -- {reason}"
                continue
            assert not unsupported
            try:
                emit_launch(kind, model, lay, stack)
            except InputError as exc:
                knob = str(exc).split(": ", 1)[1].split(" -- ")[0]
                assert knob in VERSION_ONLY[framework], (kind, overrides, str(exc))


def test_every_framework_runs_its_own_defaults() -> None:
    for framework in Framework:
        assert stack_unsupported(framework, default_stack(framework)) == []


def test_what_would_fit_offers_no_framework_that_cannot_run_the_changed_settings() -> None:
    """fixes._in_framework keeps the user's changed settings; a framework that cannot run them
    (stack_unsupported) is not offered."""
    model, cluster = load_model("llama2-7b"), load_cluster("a100-80g")
    question = Question.of(model, cluster, {"global_batch": 64}, {"tp_comm_overlap": True})
    given = {k: v for k, v in question.given.items() if k != "framework"}
    assert _in_framework(question, given, Framework.DEEPSPEED) is None
    assert _in_framework(question, given, Framework.TORCHTITAN) is None
    plain = Question.of(model, cluster, {"global_batch": 64})
    other = _in_framework(plain, given, Framework.TORCHTITAN)
    assert other is not None and other.framework == Framework.TORCHTITAN


def test_bf16_moments_need_megatrons_distributed_optimizer() -> None:
    """Megatron-LM raises "--use-precision-aware-optimizer only supported with distributed
    optimizer": with bf16 moments, ZeRO-0 (without the offloaded optimizer) and Megatron-FSDP
    (ZeRO-2/3) break the limit, ZeRO-1 and the offloaded optimizer meet it."""
    model, cluster = load_model("llama2-7b"), load_cluster("h100-sxm")
    on = Question.of(model, cluster, {"global_batch": 64}, {"adam_moments": "bf16"})
    ev = on.evaluate(on.space(8))
    zero, off = ev.layouts.zero, ev.layouts.offload
    allowed = (zero == 1) | ((zero == 0) & (off == 1))
    assert (ev.checks["adam_moments"] == ~allowed).all()
    assert ev.checks["adam_moments"].any() and (~ev.checks["adam_moments"]).any()


# --- expert parallelism priced approximately (frameworks.EXPERT_PARALLEL) ---------------------------


def test_the_search_proposes_no_expert_parallelism_that_torchtitan_runs_otherwise() -> None:
    """torchtitan 0.3.0 borrows its expert-parallel ranks from FSDP and TP, which paraplan prices
    only as Megatron-style EP and its launch config cannot write: a free EP stays 1 under
    torchtitan (`optimize --framework torchtitan --emit torchtitan` proposed EP 4 and then refused
    to emit it), while Megatron-LM's search still spreads the experts."""
    model, cluster = load_model("mixtral-8x7b"), load_cluster("h100-sxm")

    def eps(knobs: dict[str, object]) -> set[int]:
        ranking = rank_space(Question.of(model, cluster, {"global_batch": 256, "micro_batch": 1, **knobs}),
                             [64], Constraints(), 5)  # fmt: skip
        return set(ranking.evaluation.layouts.ep.tolist())

    assert eps({"framework": "torchtitan"}) == {1}
    assert max(eps({"framework": "megatron"})) > 1
    assert eps({"framework": "torchtitan", "ep": 8}) == {8}  # a user who gives EP is not wrong


def test_torchtitan_expert_parallelism_given_is_priced_with_a_warning(invoke: Invoke) -> None:
    base = ["--model", "mixtral-8x7b", "--gpus", "64", "--hardware", "h100-sxm", "--json"]
    for command, extra in (("validate", ["--plan", "TP2/PP1/DP32/EP8"]), ("optimize", ["--ep", "8", "--top", "1"])):
        titan = invoke(command, *base, *extra, "--framework", "torchtitan")
        assert titan.code == 0, titan.err
        assert "EP 8 under torchtitan 0.3.0 is priced as Megatron-style expert parallelism" in titan.err
        megatron = invoke(command, *base, *extra, "--framework", "megatron")
        assert megatron.code == 0 and "Megatron-style" not in megatron.err


def test_a_sequence_past_the_learned_positions_is_named_in_every_answer(invoke: Invoke) -> None:
    """GPT-3 175B embeds 2048 learned positions (Brown et al. 2020): at 4096 tokens (the default
    --seq-len) the model as configured cannot train, which the Megatron launch config refuses; the
    answers say so instead of pricing it silently. A rotary model past its max_position_embeddings
    (Llama 2 7B: 4096) has no table to outgrow, and GPT-3 at 2048 tokens none to exceed."""
    gpt3 = ["--model", "gpt3-175b", "--hardware", "h100-sxm", "--json"]
    words = "exceeds gpt3-175b's 2048 learned positions"
    for args in (["validate", *gpt3, "--gpus", "64", "--plan", "TP8/PP8"], ["optimize", *gpt3, "--gpus", "64"]):
        answer = invoke(*args)
        assert answer.code == 0 and words in answer.err
        assert words in " ".join(answer.json()["warnings"])
        assert words not in invoke(*args, "--seq-len", "2048").err
    compare = invoke("compare", "--model", "gpt3-175b", "--hardware", "h100-sxm:64", "--json")
    assert compare.code == 0 and words in compare.err
    llama = invoke("validate", "--model", "llama2-7b", "--hardware", "h100-sxm", "--gpus", "8", "--plan", "TP1/PP1",
                   "--seq-len", "8192", "--json")  # fmt: skip
    assert llama.code == 0 and "learned positions" not in llama.err

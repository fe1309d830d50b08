"""Launch configs that run as predicted, both ways: the emitters (`paraplan.emit`), their checks
against the pinned schemas, the importer (`paraplan.launch.importer`) and `validate --from-launch`.

The property tests draw random feasible plans of each framework from the evaluated candidate
space of a few questions (built once per module): every emitted flag or key passes the pinned
checker, emit-then-import gives the same plan and stack back, and the imported plan evaluates to
the same step time and memory, which fits."""

from __future__ import annotations

import contextlib
import functools
import io
import random
from collections import Counter
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import paraplan
from paraplan.cli import main
from paraplan.cost_models.candidates import Layouts
from paraplan.cost_models.errors import InputError
from paraplan.cost_models.frameworks import default_stack
from paraplan.cost_models.layout import CpComm, Framework, Layout, parse_knob
from paraplan.cost_models.models import ModelSpec, load_model, model_from_config
from paraplan.cost_models.stack import Stack
from paraplan.emit import EMITTERS, check_emitted, emit_launch, megatron_args
from paraplan.hardware_specs.loader import load_cluster
from paraplan.launch import parse_launch_text
from paraplan.launch.importer import layout_from_launch, load_launch, read_launch_text
from paraplan.launch.schema import layer_pattern
from paraplan.question import Question

DATA = Path(__file__).parent / "data" / "launch"
PER_FRAMEWORK = 200


@dataclass(frozen=True)
class Case:
    model: str
    hardware: str
    gpus: int
    knobs: tuple[tuple[str, object], ...] = ()


# Small questions with diverse knobs: MoE + EP + expert TP + FP8 (Mixtral), learned positions,
# biases and dropout in fp16 (GPT-3), GQA, CP, VPP, uneven splits, offload, every ZeRO stage, and
# GPT-OSS's architecture.
CASES: dict[str, tuple[Case, ...]] = {
    "megatron": (
        Case("llama2-13b", "a100-80g", 16),
        Case("mixtral-8x7b", "h100-sxm", 8, (("precision", "fp8"),)),
        Case("gpt3-175b", "a100-80g", 32, (("precision", "fp16"), ("seq_len", 2048))),
        # sliding layers, attention sinks, the clamped quick-GELU gate, expert biases, RoPE base
        Case(
            str(Path(__file__).parent / "data" / "hf_configs" / "gpt-oss-120b.json"),
            "h100-sxm",
            64,
            (("micro_batch", 1), ("global_batch", 256)),
        ),
    ),
    "deepspeed": (
        Case("llama2-7b", "a100-80g", 16, (("precision", "fp16"),)),
        Case("llama2-13b", "a100-80g", 32),
    ),
    "torchtitan": (
        Case("llama3-8b", "h100-sxm", 16),
        Case("llama3-70b", "h100-sxm", 32, (("precision", "fp8"),)),
        Case("llama2-13b", "a100-80g", 32, (("seq_len", 8192),)),
    ),
}
# The stack settings each framework's flags can express (the others are refused).
STACK_CHOICES: dict[str, dict[str, tuple[object, ...]]] = {
    "megatron": {"flash_attention": (True, False), "dp_overlap": (True, False), "main_grads": ("fp32", "bf16"),
                 "p2p_overlap": (True, False)},
    "deepspeed": {"flash_attention": (True, False), "dp_overlap": (True, False), "main_grads": ("fp32", "bf16")},
    "torchtitan": {"tp_overlap": (True, False), "compiled": (True, False)},
}  # fmt: skip
# What the frameworks' flags cannot express although the search proposes it (see the report):
# DeepSpeed's PipelineModule picks its own split; torchtitan 0.3.0 has no layer-count AC, no ring
# CP, always shards over CP, derives the stage count from layers per stage; its async TP
# (tp_overlap) needs compile.enable, so the random stacks with tp_overlap but not compiled are refused.
EXPECTED_REFUSALS = {
    "first_stage_layers/last_stage_layers", "recompute_layers", "cp_comm", "zero", "virtual_stages", "tp_overlap",
}  # fmt: skip


@dataclass(frozen=True, repr=False)
class Planned:
    framework: str
    model: ModelSpec
    question: Question
    layout: Layout
    step_time_s: float
    memory_bytes: float

    def __repr__(self) -> str:  # short, for hypothesis' failure reports
        return f"Planned({self.model.name}: {self.layout!r}; {self.question.stack})"


@dataclass(frozen=True)
class Pool:
    plans: tuple[Planned, ...]
    refusals: Counter[str]


@functools.cache
def pool(framework: str) -> Pool:
    """PER_FRAMEWORK random feasible plans of `framework` that its flags express, with random
    expressible stacks, and the knobs of the feasible plans met on the way that were refused."""
    rng = random.Random(20261202)
    plans: list[Planned] = []
    refusals: Counter[str] = Counter()
    quota = -(-PER_FRAMEWORK // len(CASES[framework]))
    for case in CASES[framework]:
        model, cluster = load_model(case.model), load_cluster(case.hardware)
        knobs = {"framework": framework, **dict(case.knobs)}
        space = Question.of(model, cluster, knobs).space(case.gpus)
        rows = np.array(sorted(rng.sample(range(len(space)), min(len(space), 6_000))), dtype=np.int64)
        space = space.take(rows)
        names = list(STACK_CHOICES[framework])
        variants = [
            dict(zip(names, values, strict=True)) for values in _product(list(STACK_CHOICES[framework].values()))
        ]
        choice = np.array([rng.randrange(len(variants)) for _ in range(len(space))])
        candidates: list[Planned] = []
        for k, variant in enumerate(variants):
            question = Question.of(model, cluster, knobs, variant)
            part = space.take(np.flatnonzero(choice == k))
            ev = question.evaluate(part)
            for i in np.flatnonzero(ev.feasible):
                step, memory = float(ev.step_time_s[i]), float(ev.memory.total[i])
                candidates.append(Planned(framework, model, question, part.at(int(i)), step, memory))
        rng.shuffle(candidates)
        found = 0
        for plan in candidates:
            if found == quota:
                break
            try:
                emit_launch(framework, model, plan.layout, plan.question.stack)
            except InputError as exc:
                refusals[str(exc).split(" -- ")[0].rsplit(": ", 1)[1]] += 1
                continue
            plans.append(plan)
            found += 1
    return Pool(tuple(plans[:PER_FRAMEWORK]), refusals)


def _product(values: list[tuple[object, ...]]) -> list[tuple[object, ...]]:
    out: list[tuple[object, ...]] = [()]
    for options in values:
        out = [(*prefix, v) for prefix in out for v in options]
    return out


def imported(framework: str, text: str, model: ModelSpec) -> tuple[Layout, Stack, int | None, list[str]]:
    settings = read_launch_text(text, framework)  # type: ignore[arg-type]
    knobs, stack, world, notes = layout_from_launch(settings, model)
    lay = Layout(**{k: parse_knob(k, v) for k, v in knobs.items()})
    return lay, default_stack(lay.framework).with_overrides(**stack), world, notes


# --------------------------------------------------------------------------------------------
# (a)-(c): 200 random feasible plans per framework


@pytest.mark.parametrize("framework", EMITTERS)
def test_pool_has_enough_plans(framework: str) -> None:
    p = pool(framework)
    assert len(p.plans) == PER_FRAMEWORK
    # the feasible plans a framework's flags cannot express are only the documented kinds
    assert set(p.refusals) <= EXPECTED_REFUSALS, p.refusals


@pytest.mark.parametrize("framework", EMITTERS)
@settings(max_examples=PER_FRAMEWORK, deadline=None, derandomize=True, database=None,
          suppress_health_check=[HealthCheck.too_slow])  # fmt: skip
@given(data=st.data())
def test_emit_check_import_evaluate(framework: str, data: st.DataObject) -> None:
    plan = data.draw(st.sampled_from(pool(framework).plans))
    text = emit_launch(framework, plan.model, plan.layout, plan.question.stack)
    # (a) every flag or key exists in the pinned schema with a valid value
    assert check_emitted(framework, text) == []
    # (b) emit then import is the identity, stack included
    lay, stack, world, _ = imported(framework, text, plan.model)
    assert lay == plan.layout
    assert stack == plan.question.stack
    assert world == plan.layout.gpus
    # (c) the imported plan evaluates to the same step time and memory, and it fits
    ev = plan.question.evaluate(Layouts.of([lay]))
    assert float(ev.step_time_s[0]) == pytest.approx(plan.step_time_s, rel=1e-12)
    assert float(ev.memory.total[0]) == pytest.approx(plan.memory_bytes, rel=1e-12)
    assert bool(ev.feasible[0]) and float(ev.memory_margin_bytes[0]) >= 0


def test_header_states_the_prediction() -> None:
    result = paraplan.validate("llama2-13b", 16, "a100-80g", "TP2/PP2/DP4", emit="megatron", micro_batch=1)
    assert result.launch is not None
    head = result.launch["megatron"].splitlines()[:4]
    assert head[0].startswith("# paraplan plan: llama2-13b on 16 x a100-80g: TP2/PP2/DP4")
    assert any(f"predicted step {result.step_time_s:.3g} s" in line for line in head)
    assert any(f"memory {result.memory_bytes.total / 1e9:.1f} GB" in line for line in head)
    assert all(len(line) <= 100 for line in result.launch["megatron"].splitlines() if line.startswith("#"))


def test_token_drop_round_trips_and_other_capacities_are_named() -> None:
    # the emitter's two flags read back as Stack.token_drop; a capacity of 1.25 is not modelled:
    # a note names it and the stack stays dropless (the default)
    model = load_model("mixtral-8x7b")
    lay = Layout(framework="megatron", tp=2, ep=8, dp=8, sequence_parallel=True)
    text = emit_launch("megatron", model, lay, Stack(token_drop=True))
    assert "--moe-expert-capacity-factor 1.0" in text and "--moe-pad-expert-input-to-capacity" in text
    _, stack, _, _ = layout_from_launch(read_launch_text(text, "megatron"), model, gpus=128)
    assert stack.get("token_drop") is True
    other = text.replace("--moe-expert-capacity-factor 1.0", "--moe-expert-capacity-factor 1.25")
    _, stack, _, notes = layout_from_launch(read_launch_text(other, "megatron"), model, gpus=128)
    assert "token_drop" not in stack
    assert any("--moe-expert-capacity-factor 1.25 with padding" in n and "read as dropless" in n for n in notes)


MOE_LAYOUT = Layout(framework="megatron", tp=2, ep=8, dp=8, sequence_parallel=True)


def _moe_setting_round_trips(setting: str, flag: str) -> str:
    """A Megatron-only MoE stack setting: on an MoE model it is emitted as `flag` (in a launch the
    pinned Megatron-LM schema accepts) and read back as set; a dense model has no router, so the
    flag is left out; DeepSpeed refuses the setting. Returns the MoE model's launch."""
    model, on = load_model("mixtral-8x7b"), {setting: True}
    text = emit_launch("megatron", model, MOE_LAYOUT, Stack().with_overrides(**on))
    assert flag in text.split() and check_emitted("megatron", text) == []
    _, stack, _, _ = layout_from_launch(read_launch_text(text, "megatron"), model, gpus=128)
    assert stack.get(setting) is True
    dense = Layout(framework="megatron", tp=2, dp=4, sequence_parallel=True)
    assert flag not in emit_launch("megatron", load_model("llama2-7b"), dense, Stack().with_overrides(**on)).split()
    with pytest.raises(InputError, match=setting.replace("_", "-")):
        emit_launch("deepspeed", model, Layout(framework="deepspeed", dp=8), _deepspeed(**on))
    return text


def test_moe_kernel_flags_are_emitted_and_read_back(tmp_path: Path) -> None:
    # what the cost model prices for MoE experts (compute.moe_layer_ops): TE's grouped GEMM and
    # fused permutation, both off by default at Megatron-LM d98e8a64, so both are written; read
    # back they are what is priced (no note names them), and a launch without them is named as
    # not modelled
    framework = "megatron"
    result = paraplan.validate("mixtral-8x7b", 64, "h100-sxm", "TP2/PP1/DP32/EP8", framework=framework,
                               emit=framework)  # fmt: skip
    assert result.launch is not None
    text = result.launch[framework]
    assert "--moe-grouped-gemm" in text.split() and "--moe-permute-fusion" in text.split()
    path = tmp_path / "launch.sh"
    path.write_text(text)
    back = paraplan.validate("mixtral-8x7b", None, "h100-sxm", from_launch=path)
    assert not any("moe-grouped-gemm" in n or "moe-permute-fusion" in n for n in back.launch_notes)
    path.write_text(text.replace("--moe-grouped-gemm", "").replace("--moe-permute-fusion", ""))
    notes = " | ".join(paraplan.validate("mixtral-8x7b", None, "h100-sxm", from_launch=path).launch_notes)
    assert "no --moe-grouped-gemm" in notes and "no --moe-permute-fusion" in notes and "SequentialMLP" in notes


def test_router_fusion_round_trips_on_moe_models_only() -> None:
    # Stack.moe_router_fusion is Megatron-LM's --moe-router-fusion (TransformerConfig at d98e8a64)
    _moe_setting_round_trips("moe_router_fusion", "--moe-router-fusion")
    model = load_model("mixtral-8x7b")
    _, stack, _, _ = layout_from_launch(read_launch_text(emit_launch("megatron", model, MOE_LAYOUT), "megatron"),
                                        model, gpus=128)  # fmt: skip
    assert not stack.get("moe_router_fusion")


def test_aux_loss_round_trips_and_is_read_as_megatron_decides() -> None:
    # Stack.moe_aux_loss: Megatron-LM d98e8a64 runs the loss when a listed type has a positive
    # coefficient (router.py is_aux_loss_enabled); the coefficient defaults to 0.0, so the emitter
    # writes both flags, and nothing without the setting
    _moe_setting_round_trips("moe_aux_loss", "--moe-aux-loss-coeff")
    model = load_model("mixtral-8x7b")

    def read(flags: str) -> tuple[object, list[str]]:
        base = emit_launch("megatron", model, MOE_LAYOUT)
        _, stack, _, notes = layout_from_launch(
            read_launch_text(base.rstrip() + " " + flags, "megatron"), model, gpus=128
        )
        return stack.get("moe_aux_loss"), notes

    assert read("")[0] is False  # Megatron's default: type aux_loss, coefficient 0.0
    assert read("--moe-router-load-balancing-type seq_aux_loss --moe-aux-loss-coeff 1e-4")[0] is True
    assert read("--moe-router-load-balancing-type none --moe-aux-loss-coeff 1e-2")[0] is False
    # lists pair up by position: the aux_loss entry has coefficient 0, seq_aux_loss 1e-3
    assert read("--moe-router-load-balancing-type aux_loss seq_aux_loss --moe-aux-loss-coeff 0 1e-3")[0] is True
    assert read("--moe-router-load-balancing-type aux_loss seq_aux_loss --moe-aux-loss-coeff 0 0")[0] is False
    on, notes = read("--moe-router-load-balancing-type sinkhorn")
    assert on is False and any("sinkhorn: not modelled" in n for n in notes)
    # the z-loss adds router calls the count leaves out: named, not silently dropped
    assert any("--moe-z-loss-coeff" in n and "not modelled" in n for n in read("--moe-z-loss-coeff 1e-3")[1])
    # so does the input jitter (router.py apply_input_jitter: a uniform sample and a multiply of
    # the router's input per MoE layer, two more dispatches and a memory-bound pass)
    assert any("--moe-input-jitter-eps" in n and "not modelled" in n for n in read("--moe-input-jitter-eps 1e-2")[1])


def test_megatron_writes_tp_comm_overlap() -> None:
    # Stack.tp_comm_overlap is Megatron-LM's --tp-comm-overlap (a TransformerConfig flag at d98e8a64)
    lay = Layout(framework="megatron", tp=4, dp=2, sequence_parallel=True)
    text = emit_launch("megatron", load_model("llama2-13b"), lay, Stack(tp_comm_overlap=True))
    assert "--tp-comm-overlap" in text.split() and "--sequence-parallel" in text.split()
    assert check_emitted("megatron", text) == []
    assert "--tp-comm-overlap" not in emit_launch("megatron", load_model("llama2-13b"), lay, Stack()).split()
    # at TP 1 there is nothing to overlap: priced as off (no TP collectives, no userbuffers), and
    # the flag, which Megatron-LM would assert on (it turns SP off at TP 1), is left out
    tp1 = lay.model_copy(update={"tp": 1, "dp": lay.dp * lay.tp, "sequence_parallel": False})
    assert (
        "--tp-comm-overlap"
        not in emit_launch("megatron", load_model("llama2-13b"), tp1, Stack(tp_comm_overlap=True)).split()
    )


# --------------------------------------------------------------------------------------------
# (d) the README's 1024-GPU optimum, (e) Llama 3 405B on torchtitan


def test_readme_optimum_emits_a_megatron_config_that_fits() -> None:
    result = paraplan.optimize("llama2-70b", "a100-80g", 1024, top=1, emit="megatron")
    (entry,) = result.results
    best = entry.layouts[0]
    assert entry.launch is not None
    text = entry.launch["megatron"]
    assert check_emitted("megatron", text) == []
    assert f"memory {best.memory_bytes.total / 1e9:.1f} GB" in text and "(fits," in text
    model = load_model("llama2-70b")
    lay, _, world, _ = imported("megatron", text, model)
    assert lay == best.layout and world == 1024
    question = Question.of(model, load_cluster("a100-80g"), {}, {})
    ev = question.evaluate(Layouts.of([lay]))
    assert bool(ev.feasible[0])
    assert float(ev.step_time_s[0]) == pytest.approx(best.step_time_s, rel=1e-12)
    assert float(ev.memory.total[0]) == pytest.approx(best.memory_bytes.total, rel=1e-12)
    if best.layout.zero >= 2:  # Megatron-Core's ZeRO-2/3 is Megatron-FSDP, not the distributed optimizer
        assert "--use-megatron-fsdp" in text and "--use-distributed-optimizer" not in text


LLAMA3_405B = {
    # Dubey et al. 2024, Sec 3.3.2: TP8, PP16, DP128 (FSDP with PP), 8K sequences, micro-batch 1,
    # first and last stages one layer lighter (7 + 14 x 8 + 7 = 126 layers), ZeRO-2 (parameters
    # not resharded after the forward).
    "seq_len": 8192,
    "global_batch": 2048,
    "zero": 2,
    "micro_batch": 1,
    "virtual_stages": 1,
    "first_stage_layers": 7,
    "last_stage_layers": 7,
}


def test_llama3_405b_published_layout_is_a_legal_torchtitan_plan() -> None:
    # Every torchtitan rule admits the layout. Without recompute only memory is in question:
    # torchtitan 0.3.0 under PP accumulates whole fp32 gradients across micro-batches (PyTorch
    # pipelining's backward_maybe_with_nosync), 4 B x 3.2e9 parameters = 12.9 GB more than Meta's
    # per-micro-batch reduce-scatter, so its own 405B recipe recomputes (full AC): that fits and
    # emits a checked launch.
    bare = paraplan.validate("llama3-405b", 16384, "h100-sxm", "TP8/PP16/DP128", framework="torchtitan",
                             recompute="none", **LLAMA3_405B)  # type: ignore[arg-type]  # fmt: skip
    assert all(v.startswith("memory") for v in bare.violations), bare.violations
    result = paraplan.validate(
        "llama3-405b", 16384, "h100-sxm", "TP8/PP16/DP128", emit="torchtitan", framework="torchtitan",
        recompute="full", **LLAMA3_405B,  # type: ignore[arg-type]
    )  # fmt: skip
    assert result.feasible, result.violations
    assert result.launch is not None
    text = result.launch["torchtitan"]
    assert check_emitted("torchtitan", text) == []
    for flag in (
        "--parallelism.data_parallel_shard_degree 128",
        "--parallelism.fsdp_reshard_after_forward never",
        "--parallelism.pipeline_parallel_first_stage_less_layers 1",
        "activation-checkpoint:full",
    ):
        assert flag in text, flag
    lay, _, world, _ = imported("torchtitan", text, load_model("llama3-405b"))
    assert lay == result.layout and world == 16384


def test_torchtitan_launches_turn_cuda_graphs_off() -> None:
    # 0.3.0 captures each forward+backward in a CUDA graph by default and refuses that with pipeline
    # parallelism at config time (trainer.py Trainer.Config._validate_cuda_graphs); paraplan prices
    # torchtitan eager: every launch writes --training.disable_cuda_graphs, and one without it is named
    model = load_model("llama3-8b")
    piped = Layout(framework="torchtitan", pp=2, dp=4, global_batch=64, first_stage_layers=0, last_stage_layers=0)
    text = emit_launch("torchtitan", model, piped)
    assert "--training.disable_cuda_graphs" in text.split() and check_emitted("torchtitan", text) == []
    notes = imported("torchtitan", text.replace("--training.disable_cuda_graphs", ""), model)[3]
    assert any("no --training.disable_cuda_graphs: torchtitan 0.3.0 captures" in n for n in notes)
    assert not any("cuda_graphs" in n for n in imported("torchtitan", text, model)[3])


def test_llama3_405b_as_published_fits_with_per_micro_batch_gradient_reduction() -> None:
    # Meta's stack reduce-scatters the gradients every micro-batch, as Megatron's ZeRO-2 does:
    # the published plan, without recompute, fits and emits a Megatron launch that fits.
    result = paraplan.validate("llama3-405b", 16384, "h100-sxm", "TP8/PP16/DP128", emit="megatron",
                               recompute="none", **LLAMA3_405B)  # type: ignore[arg-type]  # fmt: skip
    assert result.feasible, result.violations
    assert result.launch is not None and check_emitted("megatron", result.launch["megatron"]) == []


def test_an_infeasible_plan_gets_no_launch_file() -> None:
    result = paraplan.validate("llama3-405b", 16384, "h100-sxm", "TP8/PP16/DP128", emit="torchtitan",
                               framework="torchtitan", recompute="none", **LLAMA3_405B)  # type: ignore[arg-type]  # fmt: skip
    assert not result.feasible and result.launch is None
    assert any("no torchtitan launch emitted" in note for note in result.launch_notes)


# --------------------------------------------------------------------------------------------
# The found bugs, pinned


def test_megatron_mappings() -> None:
    model = load_model("llama2-70b")
    base = {"tp": 4, "pp": 4, "dp": 8, "micro_batch": 1, "global_batch": 512}
    z3 = emit_launch("megatron", model, Layout(**base, zero=3))
    assert "--use-megatron-fsdp" in z3 and "--data-parallel-sharding-strategy optim_grads_params" in z3
    z2 = emit_launch("megatron", model, Layout(**base, zero=2))
    assert "--data-parallel-sharding-strategy optim_grads \\" in z2
    z1 = emit_launch("megatron", model, Layout(**base, zero=1))
    assert "--use-distributed-optimizer" in z1 and "--use-megatron-fsdp" not in z1
    no_flash = emit_launch("megatron", model, Layout(**base), Stack(flash_attention=False))
    assert "--attention-backend unfused" in no_flash and "--use-flash-attn" not in no_flash
    fp8 = emit_launch("megatron", model, Layout(**base, precision="fp8"))
    assert "--fp8-format hybrid" in fp8 and "--bf16" in fp8 and "--fp8-recipe delayed" in fp8
    current = emit_launch("megatron", model, Layout(**base, precision="fp8"), Stack(fp8_recipe="tensorwise"))
    assert "--fp8-recipe tensorwise" in current
    vpp = emit_launch("megatron", model, Layout(**base, virtual_stages=5, recompute="full", recompute_layers=2))
    assert "--num-virtual-stages-per-pipeline-rank 5" in vpp
    assert "--recompute-method block" in vpp and "--recompute-num-layers 2" in vpp
    offload = emit_launch("megatron", model, Layout(**base, zero=1, offload="optimizer"))
    assert "--optimizer-cpu-offload" in offload and "--use-precision-aware-optimizer" in offload
    # the block recompute helper kept for callers of paraplan.emit.megatron_args
    assert "--recompute-method block" in megatron_args(model, Layout(recompute="full", recompute_layers=2))


def test_megatron_cp_comm_types_are_the_ones_transformer_engine_accepts() -> None:
    # TE d0067d0d takes "p2p", "all_gather", "a2a" or "a2a+p2p" and raises on "allgather"
    model = load_model("llama2-7b")
    base = {"tp": 2, "pp": 1, "dp": 4, "cp": 2, "micro_batch": 1, "global_batch": 64, "seq_len": 8192}
    gathered = emit_launch("megatron", model, Layout(**base, cp_comm="allgather"))
    assert "--cp-comm-type all_gather \\" in gathered
    assert "--cp-comm-type p2p \\" in emit_launch("megatron", model, Layout(**base))
    lay, _, _, _ = imported("megatron", gathered, model)
    assert lay.cp == 2 and lay.cp_comm == CpComm.ALLGATHER
    text = (
        "--tensor-model-parallel-size 2 --context-parallel-size 2 --cp-comm-type allgather --micro-batch-size 1 "
        "--global-batch-size 64 --seq-length 8192"
    )
    with pytest.raises(InputError, match="--cp-comm-type allgather: Transformer Engine accepts p2p, all_gather"):
        layout_from_launch(parse_launch_text(text, "megatron"), model, gpus=8)


def test_megatron_token_drop_writes_megatron_bridges_two_flags() -> None:
    """Megatron-Bridge's apply_moe_token_drop sets capacity factor 1.0 and padding to capacity; the
    emitted flags are those of megatron_lm_arguments.json (check_emitted), and a dense model gets none."""
    lay = Layout(tp=1, pp=1, dp=8, ep=8, micro_batch=1, global_batch=64)
    text = emit_launch("megatron", load_model("mixtral-8x7b"), lay, Stack(token_drop=True))
    assert "--moe-expert-capacity-factor 1.0" in text and "--moe-pad-expert-input-to-capacity" in text
    assert check_emitted("megatron", text) == []
    dropless = emit_launch("megatron", load_model("mixtral-8x7b"), lay)
    assert "--moe-expert-capacity-factor" not in dropless
    dense = emit_launch("megatron", load_model("llama2-7b"), Layout(dp=8, global_batch=64), Stack(token_drop=True))
    assert "--moe-expert-capacity-factor" not in dense


def test_megatron_flex_dispatcher_flags_read_back_and_refusals() -> None:
    """The flex dispatcher is --moe-token-dispatcher-type flex with --moe-flex-dispatcher-backend
    (megatron_lm_arguments.json at d98e8a64); the importer reads the same setting back. DeepEP
    rejects padding to capacity (TransformerConfig.__post_init__), the other stacks have no flex."""
    model = load_model("mixtral-8x7b")
    lay = Layout(tp=1, pp=1, dp=8, ep=8, micro_batch=1, global_batch=64)
    text = emit_launch("megatron", model, lay, Stack(ep_dispatcher="hybridep"))
    assert "--moe-token-dispatcher-type flex" in text and "--moe-flex-dispatcher-backend hybridep" in text
    assert "--moe-token-dispatcher-type alltoall" not in text
    assert check_emitted("megatron", text) == []
    assert imported("megatron", text, model)[1].ep_dispatcher == "hybridep"
    plain = emit_launch("megatron", model, lay)
    assert "--moe-token-dispatcher-type alltoall" in plain and "--moe-flex-dispatcher-backend" not in plain
    assert imported("megatron", plain, model)[1].ep_dispatcher == "alltoall"
    with pytest.raises(InputError, match="ep_dispatcher"):
        emit_launch("megatron", model, lay, Stack(ep_dispatcher="deepep", token_drop=True))
    ds_lay = Layout(tp=1, pp=1, dp=8, micro_batch=1, global_batch=64, framework="deepspeed")
    with pytest.raises(InputError, match="ep_dispatcher"):
        emit_launch("deepspeed", model, ds_lay, Stack(main_grads="bf16", p2p_overlap=False, ep_dispatcher="deepep"))


def test_torchtitan_mappings() -> None:
    model = load_model("llama3-8b")
    base = {"framework": "torchtitan", "tp": 2, "pp": 4, "dp": 4, "micro_batch": 1, "global_batch": 64}
    vpp = emit_launch("torchtitan", model, Layout(**base, virtual_stages=2, zero=3))
    assert "--parallelism.pipeline_parallel_schedule Interleaved1F1B" in vpp
    assert "--parallelism.pipeline_parallel_layers_per_stage 4" in vpp  # 32 layers in 8 chunks of 4
    assert "--parallelism.fsdp_reshard_after_forward always" in vpp
    z2 = emit_launch("torchtitan", model, Layout(**base, zero=2, recompute="selective"))
    assert "--parallelism.fsdp_reshard_after_forward never" in z2 and z2.rstrip().endswith(
        "activation-checkpoint:selective"
    )
    ddp = emit_launch("torchtitan", model, Layout(**base, zero=0))
    assert (
        "--parallelism.data_parallel_replicate_degree 4" in ddp and "--parallelism.data_parallel_shard_degree 1" in ddp
    )
    fp8 = emit_launch("torchtitan", load_model("llama3-405b"), Layout(**{**base, "pp": 16}, zero=3, precision="fp8"))
    assert "--config llama3_405b" in fp8  # its registry config converts the linears to float8
    bf16 = emit_launch("torchtitan", load_model("llama3-405b"), Layout(**{**base, "pp": 16}, zero=3))
    assert "--config llama3_405b" not in bf16 and "--config paraplan_llama3_405b" in bf16


def test_torchtitan_compile_flag_round_trips() -> None:
    # Stack.compiled is compile.enable: paraplan's torchtitan stack compiles; 0.3.0's own default
    # is off (a file without compile.enable reads back eager), its llama3_405b registry config on
    model = load_model("llama3-8b")
    base = Layout(framework="torchtitan", dp=8, zero=3, micro_batch=1, global_batch=8)
    compiled_stack = default_stack(Framework.TORCHTITAN)
    assert compiled_stack.compiled is True
    compiled = emit_launch("torchtitan", model, base, compiled_stack)
    eager = emit_launch("torchtitan", model, base, compiled_stack.with_overrides(compiled=False))
    assert "--compile.no-enable \\" in eager and "--compile.enable \\" in compiled
    assert check_emitted("torchtitan", compiled) == []
    assert imported("torchtitan", eager, model)[1].compiled is False
    assert imported("torchtitan", compiled, model)[1].compiled is True
    big = load_model("llama3-405b")
    fp8 = emit_launch("torchtitan", big, Layout(framework="torchtitan", tp=2, pp=16, dp=4, micro_batch=1,
                                                global_batch=64, zero=3, precision="fp8"))  # fmt: skip
    without_flag = fp8.replace("    --compile.enable \\\n", "")
    assert without_flag != fp8 and imported("torchtitan", without_flag, big)[1].compiled is True
    # v0.2.2's compile.enable (false in the file) compiles the model blocks when "model" is a component
    titan = load_launch(DATA / "torchtitan_v0.2.2_llama3_8b.toml")
    assert layout_from_launch(titan, model, gpus=8)[1]["compiled"] is False
    text = (DATA / "torchtitan_v0.2.2_llama3_8b.toml").read_text().replace("enable=false", "enable=true")
    assert layout_from_launch(read_launch_text(text, name="x.toml"), model, gpus=8)[1]["compiled"] is True


def _titan(**settings: object) -> Stack:
    """torchtitan's default stack with `settings` changed."""
    return default_stack(Framework.TORCHTITAN).with_overrides(**settings)


def _deepspeed(**settings: object) -> Stack:
    """DeepSpeed's default stack with `settings` changed."""
    return default_stack(Framework.DEEPSPEED).with_overrides(**settings)


@pytest.mark.parametrize(
    ("kind", "model", "layout", "stack", "knob"),
    [
        ("megatron", "llama2-7b", {"offload": "all", "zero": 3, "dp": 8}, None, "offload"),
        ("megatron", "llama2-7b", {}, Stack(tp_overlap=False), "tp_overlap"),
        ("deepspeed", "llama2-7b", {"cp": 2, "dp": 4}, None, "cp"),
        ("deepspeed", "llama2-7b", {"precision": "fp8"}, None, "precision"),
        ("deepspeed", "llama2-7b", {"pp": 2, "virtual_stages": 2}, None, "virtual_stages"),
        ("deepspeed", "llama2-7b", {"pp": 4, "zero": 2}, None, "zero"),
        ("deepspeed", "llama2-7b", {"pp": 4, "first_stage_layers": 7, "last_stage_layers": 7}, None,
         "first_stage_layers"),
        ("deepspeed", "llama2-7b", {"recompute": "full", "recompute_layers": 2}, None, "recompute_layers"),
        ("torchtitan", "llama3-8b", {"precision": "fp16"}, None, "precision"),
        ("torchtitan", "llama3-8b", {"zero": 1, "dp": 8}, None, "zero"),
        ("torchtitan", "llama3-8b", {"zero": 0, "cp": 2, "dp": 4}, None, "zero"),
        ("torchtitan", "llama3-8b", {"recompute": "full", "recompute_layers": 4}, None, "recompute_layers"),
        ("torchtitan", "llama3-8b", {"cp": 2, "zero": 3, "cp_comm": "ring"}, None, "cp_comm"),
        ("torchtitan", "llama3-8b", {"offload": "optimizer", "zero": 3}, None, "offload"),
        ("torchtitan", "llama3-8b", {}, Stack(flash_attention=False, tp_overlap=False, p2p_overlap=False),
         "flash_attention"),
        ("torchtitan", "mixtral-8x7b", {}, None, "model"),
        ("megatron", "llama2-7b", {}, Stack(loss="chunked"), "loss"),
        ("deepspeed", "llama2-7b", {}, _deepspeed(loss="compiled"), "loss"),
        ("torchtitan", "llama3-8b", {}, Stack(tp_overlap=False, p2p_overlap=False, loss="eager"), "loss"),
        ("torchtitan", "gpt3-175b", {}, None, "model"),
        # torchao's rowwise recipes are not Transformer Engine's; 0.3.0's converter has only them
        ("megatron", "llama2-7b", {"precision": "fp8"}, Stack(fp8_recipe="rowwise"), "fp8_recipe"),
        ("torchtitan", "llama3-8b", {"precision": "fp8"},
         Stack(tp_overlap=False, p2p_overlap=False, loss="chunked", fp8_recipe="tensorwise"), "fp8_recipe"),
        ("torchtitan", "llama3-8b", {},
         _titan(attention_saved=False),
         "attention_saved"),
        # async TP needs torch.compile (0.3.0's CompileConfig); 0.3.0 has no Triton fused RMSNorm
        ("torchtitan", "llama3-8b", {"tp": 2, "dp": 4},
         Stack(tp_overlap=True, p2p_overlap=False, loss="chunked", fp8_recipe="rowwise", compiled=False),
         "tp_overlap"),
        ("torchtitan", "llama3-8b", {},
         _titan(compiled=False,
               fused_norm=True), "fused_norm"),
        # older releases' behaviours no pinned framework's flags bring back
        ("torchtitan", "llama3-8b", {"pp": 2, "dp": 4},
         _titan(pp_outputs_kept=True),
         "pp_outputs_kept"),
        ("torchtitan", "llama3-8b", {},
         _titan(kv_repeated=True),
         "kv_repeated"),
        ("megatron", "llama2-7b", {"pp": 2}, Stack(pp_outputs_kept=True), "pp_outputs_kept"),
        ("megatron", "mixtral-8x7b", {"tp": 8}, Stack(moe_gather_scatter=True), "moe_gather_scatter"),
        ("megatron", "llama3-8b", {}, Stack(kv_repeated=True), "kv_repeated"),
        # 2022's FlashAttention in Triton (llm-foundry's attn_impl triton): no pinned framework runs it
        ("megatron", "llama3-8b", {}, Stack(triton_attention=True), "triton_attention"),
        ("torchtitan", "llama3-8b", {}, _titan(triton_attention=True), "triton_attention"),
        ("deepspeed", "llama3-8b", {}, _deepspeed(triton_attention=True), "triton_attention"),
        # Megatron-DeepSpeed repeats K/V to every query head (ParallelAttention.repeat_kv): always
        ("deepspeed", "llama3-8b", {}, _deepspeed(kv_repeated=False), "kv_repeated"),
        # bf16 Adam moments: Megatron's precision-aware optimizer, with its distributed optimizer only
        ("megatron", "llama2-7b", {"zero": 0}, Stack(adam_moments="bf16"), "adam_moments"),
        ("megatron", "llama2-7b", {"zero": 2}, Stack(adam_moments="bf16"), "adam_moments"),
        ("deepspeed", "llama2-7b", {"zero": 1}, _deepspeed(adam_moments="bf16"),
         "adam_moments"),
        ("torchtitan", "llama3-8b", {},
         _titan(adam_moments="bf16"),
         "adam_moments"),
        # Transformer Engine's userbuffers: Megatron's --tp-comm-overlap, with SP only
        ("megatron", "llama2-7b", {"tp": 2, "dp": 4, "sequence_parallel": False}, Stack(tp_comm_overlap=True),
         "tp_comm_overlap"),
        ("deepspeed", "llama2-7b", {"tp": 2, "dp": 4}, _deepspeed(tp_comm_overlap=True), "tp_comm_overlap"),
        ("torchtitan", "llama3-8b", {"tp": 2, "dp": 4}, _titan(tp_comm_overlap=True), "tp_comm_overlap"),
        # the combined 1F1B (--overlap-moe-expert-parallel-comm) is Megatron-LM's schedule
        ("deepspeed", "mixtral-8x7b", {"zero": 1}, _deepspeed(moe_a2a_overlap=True), "moe_a2a_overlap"),
        ("torchtitan", "mixtral-8x7b", {}, _titan(moe_a2a_overlap=True), "moe_a2a_overlap"),
        ("megatron", "mixtral-8x7b", {"ep": 8, "dp": 8}, Stack(delay_wgrad=True), "delay_wgrad"),
        # token dropping (capacity factor with padding) is Megatron-LM's; torchtitan's MoE is dropless
        ("deepspeed", "mixtral-8x7b", {"zero": 1}, _deepspeed(token_drop=True), "token_drop"),
        # master weights as 16-bit remainders or none: Apex's DistributedFusedAdam (NeMo) only
        ("megatron", "llama2-7b", {"zero": 1}, Stack(master_weights="remainders"), "master_weights"),
        ("deepspeed", "llama2-7b", {"zero": 1}, _deepspeed(master_weights="none"),
         "master_weights"),
        ("torchtitan", "llama3-8b", {},
         _titan(master_weights="remainders"),
         "master_weights"),
    ],
)  # fmt: skip
def test_refusals_name_the_knob(kind: str, model: str, layout: dict[str, object], stack: Stack | None,
                                knob: str) -> None:  # fmt: skip
    lay = Layout(**{"framework": kind, **layout})
    with pytest.raises(InputError) as err:
        emit_launch(kind, load_model(model), lay, stack)
    message = str(err.value)
    assert "\n" not in message and message.startswith(f"cannot emit {kind}")
    assert f"{knob}" in message.split(" -- ")[0], message


def test_emit_refuses_another_frameworks_plan() -> None:
    with pytest.raises(InputError, match="framework -- it was evaluated for megatron"):
        emit_launch("deepspeed", load_model("llama2-7b"), Layout())


def test_model_features_megatron_cannot_express_are_refused() -> None:
    olmo = load_model("llama2-7b").model_copy(update={"norm_affine": False, "name": "olmo-like"})
    with pytest.raises(InputError, match="model -- olmo-like uses non-parametric LayerNorm"):
        emit_launch("megatron", olmo, Layout())
    chunked = load_model("llama2-7b").model_copy(update={"attention_chunk": 8192, "name": "chunky"})
    with pytest.raises(InputError, match="model -- chunky attends in chunks of 8192 tokens"):
        emit_launch("megatron", chunked, Layout())


# --------------------------------------------------------------------------------------------
# (f) validate --from-launch with Megatron-LM's own example scripts (and the other readers)

LLAMA3 = DATA / "megatron_train_llama3_8b_h100_fp8.sh"
GPT3 = DATA / "megatron_train_gpt3_175b_distributed.sh"
MIXTRAL = DATA / "megatron_train_mixtral_8x7b_distributed.sh"


def test_llama3_8b_fp8_example_validates_from_launch() -> None:
    result = paraplan.validate("llama3-8b", None, "h100-sxm", from_launch=LLAMA3)
    lay = result.layout
    assert (lay.tp, lay.pp, lay.dp, lay.cp, result.gpus) == (1, 1, 8, 1, 8)
    assert (lay.micro_batch, lay.global_batch, lay.seq_len) == (1, 128, 8192)
    assert (str(lay.precision), lay.zero, str(lay.recompute), lay.sequence_parallel) == ("fp8", 1, "none", False)
    assert result.knobs_chosen == []
    notes = " | ".join(result.launch_notes)
    assert "--attention-backend fused" in notes  # the backend is read from --attention-backend
    assert "sequence parallelism at TP 1" in notes
    assert "--fp8-param-gather" in notes  # read but not modelled: listed
    assert result.optimum is not None


def test_mixtral_example_validates_from_launch() -> None:
    result = paraplan.validate("mixtral-8x7b", None, "h100-sxm", from_launch=MIXTRAL)
    lay = result.layout
    assert (lay.tp, lay.pp, lay.dp, lay.ep, lay.zero, lay.micro_batch, lay.global_batch) == (1, 4, 2, 8, 1, 1, 256)
    notes = " | ".join(result.launch_notes)
    # the script's --moe-grouped-gemm is what the cost model prices (TEGroupedMLP): read, not
    # listed; it lacks --moe-permute-fusion, whose absence (the unfused permutation) is named
    assert "--moe-grouped-gemm" not in notes
    assert "no --moe-permute-fusion" in notes and "not modelled" in notes


def test_gpt3_175b_example_needs_gpus_and_reports_megatrons_quoting_bug() -> None:
    # The script's torchrun line runs 8 GPUs but asks for TP8 x PP16: its world size cannot hold
    # the plan, so validate asks for --gpus. Its unquoted --step-batch-size-schedule value splits
    # into stray words that Megatron-LM d98e8a64 rejects: the layout is still read, and the
    # problem is listed.
    with pytest.raises(InputError, match="give --gpus"):
        paraplan.validate("gpt3-175b", None, "a100-80g", from_launch=GPT3)
    result = paraplan.validate("gpt3-175b", 1024, "a100-80g", from_launch=GPT3)
    lay = result.layout
    assert (lay.tp, lay.pp, lay.dp, str(lay.precision), lay.global_batch, lay.seq_len) == (8, 16, 8, "fp16", 1536, 2048)
    notes = " | ".join(result.launch_notes)
    assert "--gpus 1024 overrides the file's world size 8" in notes
    assert "would not launch" in notes and "--step-batch-size-schedule" in notes
    assert "--data-path ($5 is a script argument)" in notes


def test_given_knobs_override_the_files() -> None:
    result = paraplan.validate("llama3-8b", None, "h100-sxm", from_launch=LLAMA3, recompute="full")
    assert str(result.layout.recompute) == "full"
    assert any("--recompute full (given) overrides the file's none" in n for n in result.launch_notes)


def test_cli_validate_from_launch(tmp_path: Path) -> None:
    code, out, err = run_cli("validate", "--from-launch", str(MIXTRAL), "--model", "mixtral-8x7b",
                             "--hardware", "h100-sxm", "--json")  # fmt: skip
    assert code in (0, 1), err
    assert '"launch_notes"' in out and '"ep": 8' in out
    code, out, err = run_cli("validate", "--model", "llama2-7b", "--hardware", "a100-80g")
    assert code == 2 and "--gpus" in err and "--plan" in err and "--from-launch" in err


@pytest.mark.parametrize(
    ("framework", "model", "hardware", "plan", "knobs"),
    [
        ("megatron", "llama2-13b", "a100-80g", "TP2/PP4/DP2", {"virtual_stages": 5, "zero": 2}),
        ("deepspeed", "llama2-7b", "a100-80g", "TP2/PP2/DP4", {"zero": 1, "offload": "optimizer"}),
        ("torchtitan", "llama3-8b", "h100-sxm", "TP2/PP2/DP4", {"zero": 3, "recompute": "selective"}),
    ],
)
def test_emitted_file_validates_to_the_same_plan(tmp_path: Path, framework: str, model: str, hardware: str,
                                                 plan: str, knobs: dict[str, object]) -> None:  # fmt: skip
    first = paraplan.validate(model, 16, hardware, plan, emit=framework, framework=framework, micro_batch=1,
                              **knobs)  # type: ignore[arg-type]  # fmt: skip
    assert first.launch is not None
    path = tmp_path / "launch.sh"
    path.write_text(first.launch[framework])
    again = paraplan.validate(model, None, hardware, from_launch=path)
    assert again.layout == first.layout
    assert again.step_time_s == first.step_time_s and again.memory_bytes == first.memory_bytes
    assert again.knobs_chosen == []


def test_torchtitan_toml_and_deepspeed_json_read() -> None:
    toml = paraplan.validate("llama3-8b", 8, "h100-sxm", from_launch=DATA / "torchtitan_v0.2.2_llama3_8b.toml")
    assert (str(toml.layout.framework), str(toml.layout.recompute), toml.layout.zero) == ("torchtitan", "selective", 3)
    assert (toml.layout.micro_batch, toml.layout.global_batch, toml.layout.seq_len) == (1, 8, 8192)
    # v0.2.2 computes the loss whole, compiled only with compile.enable (false in this file)
    titan = load_launch(DATA / "torchtitan_v0.2.2_llama3_8b.toml")
    assert layout_from_launch(titan, load_model("llama3-8b"), gpus=8)[1]["loss"] == "eager"
    compiled = read_launch_text(
        (DATA / "torchtitan_v0.2.2_llama3_8b.toml").read_text().replace("enable=false", "enable=true"), name="x.toml"
    )
    assert layout_from_launch(compiled, load_model("llama3-8b"), gpus=8)[1]["loss"] == "compiled"
    # v0.2.2's float8 converter without a recipe_name is torchao's default, tensorwise
    float8 = read_launch_text(
        (DATA / "torchtitan_v0.2.2_llama3_8b.toml").read_text().replace("[model]", '[model]\nconverters = ["float8"]'),
        name="x.toml",
    )
    assert layout_from_launch(float8, load_model("llama3-8b"), gpus=8)[1]["fp8_recipe"] == "tensorwise"
    # selective_ac_option "2": every 2nd of the 32 layers fully checkpointed, 16 per chunk, which
    # v0.2.2 runs (Stack.layer_sac) and 0.3.0 cannot; feasible as read, refused by the 0.3.0 emitter
    as_written = (DATA / "torchtitan_v0.2.2_llama3_8b.toml").read_text()
    every_2nd = as_written.replace('selective_ac_option = "op"', 'selective_ac_option = "2"')
    assert every_2nd != as_written
    knobs, stack, _, _ = layout_from_launch(read_launch_text(every_2nd, name="x.toml"), load_model("llama3-8b"), gpus=8)
    assert (str(knobs["recompute"]), knobs["recompute_layers"], stack["layer_sac"]) == ("full", 16, True)
    older = default_stack(Framework.TORCHTITAN).with_overrides(layer_sac=True)
    lay = Layout(framework="torchtitan", dp=8, zero=3, recompute="full", recompute_layers=16)
    question_ok = paraplan.validate("llama3-8b", 8, "h100-sxm", "TP1/PP1/DP8", framework="torchtitan", zero=3,
                                    recompute="full", recompute_layers=16, stack={"layer_sac": True})  # fmt: skip
    assert question_ok.feasible
    with pytest.raises(InputError, match="no count of layers per chunk"):
        emit_launch("torchtitan", load_model("llama3-8b"), lay, older)
    with pytest.raises(InputError, match="selective_ac_option"):  # the setting itself, whatever the layout
        emit_launch("torchtitan", load_model("llama3-8b"), Layout(framework="torchtitan", dp=8, zero=3), older)
    ds = load_launch(DATA / "deepspeed_zenflow_zf_config.json")
    knobs, stack, world, notes = layout_from_launch(ds, load_model("llama2-7b"), gpus=8)
    assert (knobs["zero"], str(knobs["offload"]), knobs["dp"], world) == (2, "optimizer", 8, None)
    assert any("zenflow" in n for n in notes)  # read but not modelled: listed
    assert stack["main_grads"] == "bf16" and stack["dp_overlap"] is False  # DeepSpeed's overlap_comm default at stage 2


def test_megatron_flag_readings() -> None:
    model = load_model("llama2-7b")
    text = (
        "--tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --micro-batch-size 1 "
        "--global-batch-size 64 --seq-length 4096 --num-layers 32 --hidden-size 4096 --num-attention-heads 32 "
        "--use-flash-attn --attention-backend unfused --use-megatron-fsdp "
        "--recompute-granularity full --recompute-method uniform --recompute-num-layers 1 --frobnicate 3"
    )
    settings = parse_launch_text(text, "megatron")
    knobs, stack, world, notes = layout_from_launch(settings, model, gpus=16)
    assert knobs["zero"] == 3 and knobs["dp"] == 4 and world is None  # FSDP's default: optim_grads_params
    assert stack["flash_attention"] is False  # the backend decides, not --use-flash-attn
    joined = " | ".join(notes)
    assert "--use-flash-attn is parsed but never read" in joined
    assert "--frobnicate" in joined  # unknown flags are listed
    assert "--swiglu not given" in joined  # the file's architecture differs from the model


def run_cli(*args: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code: int | str | None = 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(args))
        except SystemExit as exc:
            code = exc.code
    return int(code or 0), out.getvalue(), err.getvalue()


def test_every_framework_is_pinned_in_the_text() -> None:
    texts = {
        "megatron": emit_launch("megatron", load_model("llama2-7b"), Layout()),
        "deepspeed": emit_launch("deepspeed", load_model("llama2-7b"), Layout(framework=Framework.DEEPSPEED)),
        "torchtitan": emit_launch("torchtitan", load_model("llama3-8b"), Layout(framework=Framework.TORCHTITAN)),
    }
    assert "Megatron-LM d98e8a64" in texts["megatron"]
    assert "DeepSpeed 0.19.8" in texts["deepspeed"] and "cat > ds_config.json <<'EOF'" in texts["deepspeed"]
    assert "torchtitan 0.3.0" in texts["torchtitan"] and "--config llama3_8b" in texts["torchtitan"]
    for kind, text in texts.items():
        assert check_emitted(kind, text) == [], kind


def test_check_emitted_catches_what_the_pinned_schemas_reject() -> None:
    meg = emit_launch("megatron", load_model("llama2-7b"), Layout())
    assert any("--swiglue" in p for p in check_emitted("megatron", meg.replace("--swiglu", "--swiglue")))
    wrong_choice = meg.replace("--attention-backend auto", "--attention-backend hybrid")
    assert wrong_choice != meg
    assert any("hybrid" in p for p in check_emitted("megatron", wrong_choice))
    ds = emit_launch("deepspeed", load_model("llama2-7b"), Layout(framework=Framework.DEEPSPEED, dp=8))
    assert any("stage" in p for p in check_emitted("deepspeed", ds.replace('"stage": 0', '"stage": 5')))
    wrong_batch = ds.replace('"train_batch_size": 1024', '"train_batch_size": 1000')
    assert any("train_batch_size" in p for p in check_emitted("deepspeed", wrong_batch))
    titan = emit_launch("torchtitan", load_model("llama3-8b"), Layout(framework=Framework.TORCHTITAN, dp=8))
    bad = titan.replace("--parallelism.tensor_parallel_degree", "--parallelism.tensor_parallel_degre")
    assert any("tensor_parallel_degre" in p for p in check_emitted("torchtitan", bad))


def test_megatron_unfused_attention_repeats_kv_itself() -> None:
    # Megatron-LM's unfused DotProductAttention repeats K/V to every query head
    # (`key.repeat_interleave`, megatron/core/transformer/dot_product_attention.py at d98e8a64),
    # so a stack with repeated K/V is what --attention-backend unfused runs; the flash backend
    # takes the K/V heads as they are (refused above).
    text = emit_launch("megatron", load_model("llama3-8b"), Layout(), Stack(flash_attention=False, kv_repeated=True))
    assert "--attention-backend unfused" in text


def test_bf16_adam_moments_emit_and_read_back() -> None:
    """Megatron-LM's precision-aware optimizer flags (megatron_lm_arguments.json at d98e8a64) are
    written for bf16 moments at ZeRO-1 and read back as the same stack setting."""
    model = load_model("llama2-7b")
    text = emit_launch("megatron", model, Layout(zero=1, dp=8), Stack(adam_moments="bf16"))
    for flag in ("--use-distributed-optimizer", "--use-precision-aware-optimizer", "--exp-avg-dtype bf16",
                 "--exp-avg-sq-dtype bf16"):  # fmt: skip
        assert flag in text, flag
    _, stack, _, _ = imported("megatron", text, model)
    assert stack.adam_moments == "bf16"
    plain = emit_launch("megatron", model, Layout(zero=1, dp=8), Stack())
    assert "--exp-avg-dtype" not in plain
    assert imported("megatron", plain, model)[1].adam_moments == "fp32"


def test_megatron_expert_groups_flags() -> None:
    """n_group / topk_group are Megatron-LM's --moe-router-num-groups / --moe-router-group-topk
    (both in megatron_lm_d98e8a64.json); the importer's architecture check reads them back."""
    model = load_model(str(Path(__file__).parent / "data" / "hf_configs" / "deepseek-v3.json"))
    lay = Layout(tp=1, pp=16, dp=16, ep=8, micro_batch=1, global_batch=2048, precision="fp8",
                 first_stage_layers=4, last_stage_layers=1)  # fmt: skip
    text = emit_launch("megatron", model, lay, Stack(main_grads="bf16"))
    words = text.split()
    assert words[words.index("--moe-router-num-groups") + 1] == "8"
    assert words[words.index("--moe-router-group-topk") + 1] == "4"
    assert check_emitted("megatron", text) == []
    assert not any("architecture differs" in n for n in imported("megatron", text, model)[3])
    other = text.replace("--moe-router-group-topk 4", "--moe-router-group-topk 2")
    assert any("--moe-router-group-topk 2" in n for n in imported("megatron", other, model)[3])
    assert "--moe-router-num-groups" not in emit_launch(
        "megatron", load_model("mixtral-8x7b"), Layout(dp=8, ep=8, global_batch=64)
    )


def _flag(text: str, flag: str) -> str:
    words = text.replace("'", "").split()
    return words[words.index(flag) + 1]


def test_gpt_oss_is_written_as_megatron_bridge_builds_it() -> None:
    """GPT-OSS's architecture in Megatron-LM flags, as Megatron-Bridge's gpt_oss_bridge.py
    provider_bridge sets it: window_size (sliding_window - 1, 0), full attention on every second
    layer (window_attn_skip_freq 2: d98e8a64 transformer/utils.py slides layer numbers n with
    n % 2 != 0, i.e. 1, 3, ..., the config's sliding_attention at 0-based 0, 2, ...), learnable
    softmax (the sinks), quick_gelu gating with glu_linear_offset 1.0 and clamp 7.0, and the
    router's bias from add_bias_linear (not the DeepSeek-style expert bias)."""
    model = load_model(str(Path(__file__).parent / "data" / "hf_configs" / "gpt-oss-120b.json"))
    text = emit_launch("megatron", model, Layout(pp=4, dp=16, ep=8, micro_batch=1, global_batch=1024))
    assert _flag(text, "--window-size") == "127,0"
    assert layer_pattern("window_attn_skip_freq", _flag(text, "--window-attn-skip-freq"), 36) == [1, 0] * 18
    assert layer_pattern("window_attn_skip_freq", "2", 36) == [1, 0] * 18  # the bridge's int form
    assert _flag(text, "--softmax-type") == "learnable"
    assert "--quick-geglu" in text and "--swiglu" not in text
    assert float(_flag(text, "--glu-linear-offset")) == 1.0
    assert float(_flag(text, "--activation-func-clamp-value")) == 7.0
    assert "--disable-bias-linear" not in text and "--moe-router-enable-expert-bias" not in text
    assert check_emitted("megatron", text) == []
    assert not any("architecture differs" in n for n in imported("megatron", text, model)[3])
    # TEGroupedMLP asserts against the bias-dropout fusion (on by default) with linear biases
    # (moe/experts.py at d98e8a64); a launch without --no-bias-dropout-fusion is named
    assert "--no-bias-dropout-fusion" in text.split()
    notes = imported("megatron", text.replace("--no-bias-dropout-fusion", ""), model)[3]
    assert any("no --no-bias-dropout-fusion" in n and "would not start" in n for n in notes)
    assert not any("bias-dropout" in n for n in imported("megatron", text, model)[3])
    bridge = text.replace(_flag(text, "--window-attn-skip-freq"), "2")  # equal per layer: no note
    assert not any("architecture differs" in n for n in imported("megatron", bridge, model)[3])
    for change in (("--softmax-type learnable", "--softmax-type vanilla"), ("--quick-geglu", "--swiglu")):
        notes = imported("megatron", text.replace(*change), model)[3]
        assert any("architecture differs" in n for n in notes), change
    yarn = text.replace("--position-embedding-type rope", "--position-embedding-type yarn")  # the bridge's
    assert not any("architecture differs" in n for n in imported("megatron", yarn, model)[3])
    every = text.replace(f"--window-attn-skip-freq '{_flag(text, '--window-attn-skip-freq')}'", "")
    assert "--window-attn-skip-freq" not in every  # Megatron's default: every layer slides
    assert any("--window-attn-skip-freq (default)" in n for n in imported("megatron", every, model)[3])


def test_mlp_activations_megatron_writes_and_refuses() -> None:
    # NemotronConfig's relu2 is --squared-relu; a GELU-gated MLP (GeGLU) has no Megatron-LM flag
    plain = load_model("gpt3-175b")
    unbiased = {"linear_bias": False, "qkv_bias": None, "out_bias": None, "mlp_bias": None}
    relu2 = plain.model_copy(update={"mlp_act": "relu2", "name": "relu2", **unbiased})
    assert "--squared-relu" in emit_launch("megatron", relu2, Layout(seq_len=2048))
    assert "--squared-relu" not in emit_launch("megatron", plain, Layout(seq_len=2048))
    # with linear biases the CLI turns on bias_activation_fusion (argument_utils.py at d98e8a64), which
    # TransformerConfig.__post_init__ rejects with squared ReLU: refused
    biased = plain.model_copy(update={"mlp_act": "relu2", "name": "biased-relu2"})
    with pytest.raises(InputError, match="model -- biased-relu2 has MLP biases with squared ReLU"):
        emit_launch("megatron", biased, Layout(seq_len=2048))
    # squared-ReLU experts run fused with their router weights (--use-fused-weighted-squared-relu), as
    # priced and as Megatron-Bridge's Nemotron 3 Nano recipes set it; a launch without it is named
    nano = load_model(str(Path(__file__).parent / "data" / "hf_configs" / "nemotron-3-nano-30b-a3b.json"))
    text = emit_launch("megatron", nano, Layout(dp=8, ep=8, global_batch=64, seq_len=8192))
    assert "--use-fused-weighted-squared-relu" in text.split() and check_emitted("megatron", text) == []
    notes = imported("megatron", text.replace("--use-fused-weighted-squared-relu", ""), nano)[3]
    assert any("no --use-fused-weighted-squared-relu: Megatron-LM then runs squared ReLU" in n for n in notes)
    assert not any("squared" in n for n in imported("megatron", text, nano)[3])
    geglu = load_model("llama2-7b").model_copy(update={"mlp_act": "gelu_pytorch_tanh", "name": "geglu"})
    with pytest.raises(InputError, match="model -- geglu's gated MLP uses gelu_pytorch_tanh"):
        emit_launch("megatron", geglu, Layout())
    relu = plain.model_copy(update={"mlp_act": "relu", "name": "relu"})
    with pytest.raises(InputError, match="model -- relu's MLP uses relu"):
        emit_launch("megatron", relu, Layout(seq_len=2048))


def test_rotary_settings_are_written_and_read_back() -> None:
    """Megatron-LM's --rotary-base (default 10000) and --rotary-percent (default 1.0) carry a config's
    rope_theta and partial rotary share (its HF mapping, training/arguments.py: rotary_base =
    rope_theta); RoPE scaling is named in a comment, not written. The importer names a launch that
    trains another base: Megatron-LM's own Llama 3 8B example uses 1,000,000 where Llama 3 has
    500,000 (Dubey et al. 2024, Table 3)."""
    llama3 = load_model("llama3-8b")
    text = emit_launch("megatron", llama3, Layout(dp=8, global_batch=64))
    assert _flag(text, "--rotary-base") == "500000" and "--rotary-percent" not in text
    bare = text.replace("--rotary-base 500000", "")
    assert any("--rotary-base (default) 10000 (llama3-8b: 500000" in n for n in imported("megatron", bare, llama3)[3])
    partial = llama3.model_copy(update={"rotary_fraction": 0.5, "name": "half"})
    assert _flag(emit_launch("megatron", partial, Layout(dp=8, global_batch=64)), "--rotary-percent") == "0.5"
    odd = llama3.model_copy(update={"rope_theta": 10000.5, "name": "odd"})
    with pytest.raises(InputError, match=r"model -- odd's rope_theta 10000\.5 is not a whole number"):
        emit_launch("megatron", odd, Layout(dp=8, global_batch=64))
    scaled = load_model(str(Path(__file__).parent / "data" / "hf_configs" / "llama-3.1-405b.json"))
    text = emit_launch("megatron", scaled, Layout(tp=8, pp=14, dp=8, global_batch=1024))
    assert "# llama-3.1-405b's config scales RoPE (llama3, factor 8.0); not written" in text
    assert "--use-rope-scaling" not in text
    notes = paraplan.validate("llama3-8b", None, "h100-sxm", from_launch=LLAMA3).launch_notes
    assert any("--rotary-base 1000000 (llama3-8b: 500000)" in n for n in notes)
    assert any("--apply-layernorm-1p given (llama3-8b differs)" in n for n in notes)  # the example's own choice


def test_norm_settings_are_written() -> None:
    # DeepSeek-V3's rms_norm_eps 1e-6 (Megatron's default is 1e-5); Nemotron's LayerNorm1P stores
    # the weight zero-centred, Megatron-LM's --apply-layernorm-1p (layernorm_zero_centered_gamma)
    v3 = load_model(str(Path(__file__).parent / "data" / "hf_configs" / "deepseek-v3.json"))
    lay = Layout(tp=1, pp=16, dp=16, ep=8, micro_batch=1, global_batch=2048, first_stage_layers=4, last_stage_layers=1)
    text = emit_launch("megatron", v3, lay, Stack(main_grads="bf16"))
    assert float(_flag(text, "--norm-epsilon")) == 1e-6 and "--apply-layernorm-1p" not in text
    nemotron = load_model("gpt3-175b").model_copy(update={"norm_zero_centered": True, "name": "n1p"})
    assert "--apply-layernorm-1p" in emit_launch("megatron", nemotron, Layout(seq_len=2048))


def test_torchtitan_registry_config_needs_its_rope_base() -> None:
    # torchtitan 0.3.0's llama3 registry models all use theta 500000 (llama3/__init__.py): the Llama 3
    # preset takes llama3_8b; the same dims on LlamaConfig's default base 10000 get a config to register
    lay = Layout(framework="torchtitan", dp=8, global_batch=64, zero=3)
    assert "--config llama3_8b " in emit_launch("torchtitan", load_model("llama3-8b"), lay)
    other = load_model("llama3-8b").model_copy(update={"rope_theta": None, "name": "base10k"})
    text = emit_launch("torchtitan", other, lay)
    assert "--config paraplan_base10k" in text and "RoPE theta 10000" in text.replace("\n#  ", "")
    # what the llama3 module cannot build is refused, not registered as a SwiGLU model
    for update, words in (({"mlp_act": "gelu"}, "an MLP or norm other than SwiGLU"),
                          ({"norm_zero_centered": True}, "an MLP or norm other than SwiGLU"),
                          ({"rotary_fraction": 0.5}, "partial rotary embeddings")):  # fmt: skip
        odd = load_model("llama3-8b").model_copy(update={**update, "name": "odd"})
        with pytest.raises(InputError, match=f"model -- odd has {words}"):
            emit_launch("torchtitan", odd, lay)


def test_router_semantics_are_written_and_read_back() -> None:
    """Megatron-LM's routing (moe/moe_utils.py topk_routing_with_score_function): DeepSeek-V3's
    sigmoid scores x2.5, DeepSeek-V2's softmax over all experts (--moe-router-pre-softmax, no
    renormalisation) x16; Mixtral's default (a softmax over its top-2 logits) writes nothing."""
    hf = Path(__file__).parent / "data" / "hf_configs"
    v3 = load_model(str(hf / "deepseek-v3.json"))
    lay = Layout(tp=1, pp=16, dp=16, ep=8, micro_batch=1, global_batch=2048, first_stage_layers=4, last_stage_layers=1)
    text = emit_launch("megatron", v3, lay, Stack(main_grads="bf16"))
    assert _flag(text, "--moe-router-score-function") == "sigmoid"
    assert float(_flag(text, "--moe-router-topk-scaling-factor")) == 2.5 and "--moe-router-pre-softmax" not in text
    assert not any("architecture differs" in n for n in imported("megatron", text, v3)[3])
    softmax = text.replace("--moe-router-score-function sigmoid", "")
    assert any("--moe-router-score-function (default) softmax" in n for n in imported("megatron", softmax, v3)[3])
    v2 = load_model(str(hf / "deepseek-v2.json"))
    lay2 = Layout(
        tp=1, pp=4, dp=16, ep=8, micro_batch=1, global_batch=1024, first_stage_layers=15, last_stage_layers=15
    )
    text2 = emit_launch("megatron", v2, lay2)
    assert "--moe-router-pre-softmax" in text2 and float(_flag(text2, "--moe-router-topk-scaling-factor")) == 16.0
    plain = emit_launch("megatron", load_model("mixtral-8x7b"), Layout(dp=8, ep=8, global_batch=64))
    assert "--moe-router-pre-softmax" not in plain and "--moe-router-score-function" not in plain
    # before, the expert bias went out without sigmoid scores: Megatron's TransformerConfig raises on that
    softmax_bias = v3.model_copy(update={"router_score": "softmax", "name": "softmax-bias"})
    with pytest.raises(InputError, match="model -- softmax-bias corrects its softmax router scores with a per-expert"):
        emit_launch("megatron", softmax_bias, lay, Stack(main_grads="bf16"))
    unnormalised = v3.model_copy(update={"router_renorm": False, "name": "raw-sigmoid"})
    with pytest.raises(InputError, match="model -- raw-sigmoid's router keeps its top-8 sigmoid scores unnormalised"):
        emit_launch("megatron", unnormalised, lay, Stack(main_grads="bf16"))


def test_megatron_mtp_round_trip_and_refusals() -> None:
    """Stack.mtp is Megatron-LM's --mtp-num-layers with the config's num_nextn_predict_layers (1 for
    DeepSeek-V3; the flag is in megatron_lm_d98e8a64.json); the importer reads it back, names
    another depth, and a model without MTP modules or a stack without MTP refuses."""
    model = load_model(str(Path(__file__).parent / "data" / "hf_configs" / "deepseek-v3.json"))
    lay = Layout(tp=1, pp=16, dp=16, ep=8, micro_batch=1, global_batch=2048, precision="fp8",
                 first_stage_layers=4, last_stage_layers=1)  # fmt: skip
    text = emit_launch("megatron", model, lay, Stack(mtp=True, main_grads="bf16"))
    words = text.split()
    assert words[words.index("--mtp-num-layers") + 1] == "1"
    assert check_emitted("megatron", text) == []
    _, stack, _, notes = imported("megatron", text, model)
    assert stack.mtp is True and not any("architecture differs" in n for n in notes)
    deeper = text.replace("--mtp-num-layers 1", "--mtp-num-layers 2")
    _, stack, _, notes = imported("megatron", deeper, model)
    assert stack.mtp is False and any("--mtp-num-layers 2: not modelled" in n for n in notes)
    assert "--mtp-num-layers" not in emit_launch("megatron", model, lay, Stack(main_grads="bf16")).split()
    with pytest.raises(InputError, match="mtp"):
        emit_launch("megatron", load_model("mixtral-8x7b"), Layout(dp=8, ep=8, global_batch=64), Stack(mtp=True))
    tt = Layout(dp=256, global_batch=2048, framework="torchtitan")
    with pytest.raises(InputError, match="mtp"):
        emit_launch("torchtitan", model, tt, replace(default_stack(Framework.TORCHTITAN), mtp=True))


def test_deepspeed_launch_runs_megatron_deepspeeds_script_in_its_own_flags() -> None:
    # Llama 3 70B, TP8/PP2: Megatron-DeepSpeed 6acc370a's names (megatron/arguments.py), not
    # Megatron-LM's; PP > 1 runs DeepSpeed's pipeline engine (no --no-pipeline-parallel)
    result = paraplan.validate("llama3-70b", 64, "h100-sxm", "TP8/PP2/DP4", framework="deepspeed", emit="deepspeed",
                               global_batch=256, seq_len=4096, recompute="none", zero=1)  # fmt: skip
    assert result.launch is not None
    text = result.launch["deepspeed"]
    assert check_emitted("deepspeed", text) == []
    words = text.split()
    for flag in ("--num-key-value-heads 8", "--normalization rmsnorm", "--use-rotary-position-embeddings",
                 "--rotary-position-embeddings-theta 500000", "--use-flash-attn-v2", "--zero-stage 1", "--deepspeed"):  # fmt: skip
        assert flag in text, flag
    for flag in ("--group-query-attention", "--attention-backend", "--rotary-base", "--position-embedding-type",
                 "--no-pipeline-parallel", "--expert-model-parallel-size"):  # fmt: skip
        assert flag not in words, flag
    lay, _, world, notes = imported("deepspeed", text, load_model("llama3-70b"))
    assert lay == result.layout and world == 64
    assert not any("differs from --model" in n for n in notes)
    # PP 1: --no-pipeline-parallel (the pipeline engine asserts ZeRO < 2 at any PP degree), and
    # --zero-stage the JSON's stage, raised by the offload (pretrain_gpt.py's zero.Init needs 3)
    model = load_model("llama2-7b")
    flat = Layout(framework="deepspeed", dp=8, micro_batch=1, global_batch=64, zero=1, offload="all")
    text = emit_launch("deepspeed", model, flat)
    assert "--no-pipeline-parallel" in text.split() and "--zero-stage 3" in text and '"stage": 3' in text
    assert check_emitted("deepspeed", text) == []
    # ZeRO-Offload needs DeepSpeed's CPU Adam (its engine raises on the script's default FusedAdam):
    # the fork's --cpu-optimizer; without offload the client optimizer stays
    assert "--cpu-optimizer" in text.split()
    kept = Layout(framework="deepspeed", dp=8, micro_batch=1, global_batch=64, zero=1)
    assert "--cpu-optimizer" not in emit_launch("deepspeed", model, kept)
    # sequence parallelism: the fork's validate_args raises unless CUDA_DEVICE_MAX_CONNECTIONS=1
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1" in result.launch["deepspeed"]
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in text
    # a zero-centred LayerNorm (Nemotron's) is the fork's --apply-layernorm-1p too
    gpt = load_model("gpt3-175b").model_copy(update={"norm_zero_centered": True, "name": "gpt-1p"})
    text = emit_launch("deepspeed", gpt, flat.model_copy(update={"seq_len": 2048}))
    assert "--apply-layernorm-1p" in text.split() and "--normalization layernorm" in text
    assert check_emitted("deepspeed", text) == []
    assert not any("differs from --model" in n for n in imported("deepspeed", text, gpt)[3])
    # what the fork cannot build is refused, naming the fork
    centred = model.model_copy(update={"norm_zero_centered": True})
    with pytest.raises(InputError, match="zero-centred RMSNorm weights; Megatron-DeepSpeed 6acc370a"):
        emit_launch("deepspeed", centred, flat)
    windowed = model.model_copy(update={"sliding_window": 4096})
    with pytest.raises(InputError, match="Megatron-DeepSpeed 6acc370a has no counterpart of Megatron-LM's --window"):
        emit_launch("deepspeed", windowed, flat)


def test_megatron_deepspeeds_example_validates_from_launch() -> None:
    # examples_deepspeed/pretrain_llama2_distributed.sh at 6acc370a (its JSON is written under
    # ./tmp at run time, so the ZeRO stage and precision come from the script's --zero-stage and
    # --bf16), with the config its comments describe: h 2048, 24 layers, 16 heads, 4 K/V heads
    config = {"model_type": "llama", "hidden_size": 2048, "intermediate_size": 5504, "num_hidden_layers": 24,
              "num_attention_heads": 16, "num_key_value_heads": 4, "vocab_size": 32000,
              "max_position_embeddings": 2048, "tie_word_embeddings": False}  # fmt: skip
    model = model_from_config(config, "llama2-like")
    result = paraplan.validate(
        model, None, "a100-80g", from_launch=DATA / "megatron_deepspeed_pretrain_llama2_distributed.sh"
    )
    lay = result.layout
    assert (lay.tp, lay.pp, lay.dp, lay.micro_batch, lay.global_batch, lay.seq_len) == (2, 2, 2, 4, 32, 2048)
    assert (lay.zero, str(lay.precision), str(lay.recompute), str(lay.framework)) == (0, "bf16", "none", "deepspeed")
    assert result.stack["flash_attention"] is False  # no --use-flash-attn* flag: the fork's unfused attention
    notes = " | ".join(result.launch_notes)
    assert "differs from --model" not in notes and "would not launch" not in notes
    assert "ZeRO stage 0 from the script's --zero-stage" in notes


def test_cpu_checkpointing_round_trips_through_megatron_deepspeed_flags() -> None:
    # DeepSpeed's CPU checkpointing: the JSON key and Megatron-DeepSpeed's three flags (its
    # --checkpoint-in-cpu overrides the key), checked and read back; other stacks and other
    # recompute modes have no such checkpoints and refuse it
    model = load_model("llama2-7b")
    lay = Layout(framework="deepspeed", tp=1, pp=1, dp=8, micro_batch=1, global_batch=64, recompute="full")
    stack = default_stack(Framework.DEEPSPEED).with_overrides(cpu_checkpointing=True)
    text = emit_launch("deepspeed", model, lay, stack)
    assert '"cpu_checkpointing": true' in text and "--checkpoint-in-cpu" in text
    assert check_emitted("deepspeed", text) == []
    back, back_stack, _, _ = imported("deepspeed", text, model)
    assert back.recompute == lay.recompute and back_stack.cpu_checkpointing
    assert not imported("deepspeed", emit_launch("deepspeed", model, lay), model)[1].cpu_checkpointing
    with pytest.raises(InputError, match="cpu_checkpointing"):
        emit_launch(
            "deepspeed", model, lay.model_copy(update={"recompute": parse_knob("recompute", "selective")}), stack
        )
    with pytest.raises(InputError, match="cpu_checkpointing"):
        emit_launch(
            "megatron", model, lay.model_copy(update={"framework": Framework.MEGATRON}), Stack(cpu_checkpointing=True)
        )


def test_zero3_live_limit_round_trips_through_the_deepspeed_json() -> None:
    # DeepSpeed's zero_optimization.stage3_max_live_parameters (an int in 0.19.8's schema), written
    # at ZeRO-3 only (below it nothing is gathered per module) and read back; 3e9 as the Azure
    # recipes write it (a JSON float) is read as well
    model = load_model("llama2-7b")
    lay = Layout(framework="deepspeed", tp=1, pp=1, dp=8, zero=3, micro_batch=1, global_batch=64)
    stack = default_stack(Framework.DEEPSPEED).with_overrides(zero3_max_live_params=3e9)
    text = emit_launch("deepspeed", model, lay, stack)
    assert '"stage3_max_live_parameters": 3000000000' in text
    assert check_emitted("deepspeed", text) == []
    assert imported("deepspeed", text, model)[1].zero3_max_live_params == 3e9
    recipe = text.replace('"stage3_max_live_parameters": 3000000000', '"stage3_max_live_parameters": 3e9')
    assert imported("deepspeed", recipe, model)[1].zero3_max_live_params == 3e9
    default = imported("deepspeed", emit_launch("deepspeed", model, lay), model)[1]
    assert default.zero3_max_live_params == 1e9
    zero1 = emit_launch("deepspeed", model, lay.model_copy(update={"zero": 1}))
    assert "stage3_max_live_parameters" not in zero1


def test_the_dispatcher_is_read_whatever_the_architecture_check() -> None:
    """The flex dispatcher flags are a stack setting read on their own: a Megatron-LM script is read
    back with them where the model's architecture flags cannot be checked (the model has a feature
    Megatron-LM's flags cannot express)."""
    mixtral = load_model("mixtral-8x7b")
    lay = Layout(tp=1, pp=1, dp=8, ep=8, micro_batch=1, global_batch=64)
    text = emit_launch("megatron", mixtral, lay, Stack(ep_dispatcher="hybridep"))
    unexpressed = mixtral.model_copy(update={"norm_affine": False, "name": "mixtral-olmo-norm"})
    _, stack, _, notes = imported("megatron", text, unexpressed)
    assert any("architecture is not checked" in n for n in notes)
    assert stack.ep_dispatcher == "hybridep"


def test_megatron_deepspeed_moe_is_refused_and_read_as_unmodelled() -> None:
    """Megatron-DeepSpeed's MoE layers are DeepSpeed-MoE's (capacity-factor token dropping, an
    einsum dispatch, MoE every --expert-interval layers), not the dropless layer paraplan prices:
    the launch is refused, and a script that has them is read with them named as not modelled."""
    mixtral = load_model("mixtral-8x7b")
    ds_lay = Layout(tp=1, pp=1, dp=8, micro_batch=1, global_batch=64, framework="deepspeed")
    with pytest.raises(InputError, match="model -- mixtral-8x7b is a mixture of experts; Megatron-DeepSpeed"):
        emit_launch("deepspeed", mixtral, ds_lay)
    dense = emit_launch("deepspeed", load_model("llama3-8b"), ds_lay)
    moe = dense.replace("--bf16", "--bf16 --num-experts 8 --topk 2 --moe-expert-parallel-size 8 --enable-zbh1-pipeline")
    _, _, _, notes = imported("deepspeed", moe, mixtral)
    unmodelled = next(n for n in notes if n.startswith("read but not modelled"))
    assert "--num-experts (DeepSpeed-MoE layers" in unmodelled
    assert "--enable-zbh1-pipeline (the zero-bubble (ZB-H1) pipeline schedule)" in unmodelled
    # a DeepSpeed MoE question is answered as the Megatron-style layer, with a warning that says so
    for framework, warned in (("deepspeed", True), ("megatron", False)):
        result = paraplan.validate("mixtral-8x7b", 64, "h100-sxm", "TP1/PP1/DP64/EP8", framework=framework)
        assert any("DeepSpeed-MoE layers" in w for w in result.warnings) is warned, result.warnings
    plain = paraplan.validate("llama3-8b", 8, "h100-sxm", "TP1/PP1/DP8", framework="deepspeed")
    assert not any("DeepSpeed-MoE" in w for w in plain.warnings)

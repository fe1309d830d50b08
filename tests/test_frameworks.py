"""What each framework can run (cost_models/frameworks.py, as read from its source at the pinned
version) and the limits' one-line messages, through `limits.limit_checks`: the check `validate`
and the search apply."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from conftest import one

from paraplan.cost_models.candidates import Layouts
from paraplan.cost_models.frameworks import FRAMEWORKS
from paraplan.cost_models.layout import Framework, Layout
from paraplan.cost_models.limits import BY_NAME, Target, limit_checks
from paraplan.cost_models.models import ModelSpec
from paraplan.hardware_specs.schema import Cluster

MEGATRON, DEEPSPEED, TORCHTITAN = Framework.MEGATRON, Framework.DEEPSPEED, Framework.TORCHTITAN


@pytest.fixture(scope="module")
def target(models: dict[str, ModelSpec], presets: dict[str, Cluster]) -> Target:
    """Llama 2 7B (32 heads, 32 layers) on H100s (FP8 tensor cores)."""
    return Target(models["llama2-7b"], presets["h100-sxm"])


def _violated(target: Target, **knobs: object) -> set[str]:
    checks = limit_checks(target, one(**knobs))
    return {name for name, mask in checks.items() if mask[0]}


def _message(target: Target, name: str, **knobs: object) -> str:
    message = BY_NAME[name].message(target, Layout(**knobs))
    assert "\n" not in message
    return message


# ------------------------------------------------------------------ ZeRO with pipeline parallelism


@pytest.mark.parametrize("zero", [2, 3])
def test_zero_2_and_3_combine_with_pp_in_megatron_and_torchtitan(target: Target, zero: int) -> None:
    # Megatron-FSDP has no assertion against PP at the pinned commit; torchtitan runs FSDP with
    # PP (Llama 3 405B, Dubey et al. 2024 Sec 3.3.2)
    for fw in (MEGATRON, TORCHTITAN):
        assert not _violated(target, pp=2, dp=4, zero=zero, framework=fw, global_batch=64)


@pytest.mark.parametrize("zero", [2, 3])
def test_zero_2_and_3_with_pp_are_illegal_in_deepspeed(target: Target, zero: int) -> None:
    # deepspeed/runtime/pipe/engine.py: "ZeRO-2 and ZeRO-3 are incompatible with pipeline parallelism"
    knobs = {"pp": 2, "dp": 4, "zero": zero, "framework": DEEPSPEED, "global_batch": 64}
    assert _violated(target, **knobs) == {"framework"}
    message = _message(target, "framework", **knobs)
    assert message.startswith("DeepSpeed 0.19.8 cannot run")
    assert f"ZeRO-{zero} with pipeline parallelism" in message
    # ZeRO-1 with PP, and ZeRO-3 without, are fine
    assert not _violated(target, pp=2, dp=4, zero=1, framework=DEEPSPEED, global_batch=64)
    assert not _violated(target, pp=1, dp=8, zero=zero, framework=DEEPSPEED, global_batch=64)


def test_torchtitan_has_no_zero_1(target: Target) -> None:
    # FSDP2 shards parameters (ZeRO-3) or keeps them gathered after the forward (ZeRO-2); DDP is ZeRO-0
    assert _violated(target, dp=8, zero=1, framework=TORCHTITAN) == {"framework"}
    assert "ZeRO-1" in _message(target, "framework", dp=8, zero=1, framework=TORCHTITAN)


# ------------------------------------------------------------------ interleaving, CP, FP8, offload


def test_interleaving_is_illegal_in_deepspeed(target: Target) -> None:
    knobs = {"pp": 4, "virtual_stages": 2, "global_batch": 64, "framework": DEEPSPEED}
    assert _violated(target, **knobs) == {"framework"}
    message = _message(target, "framework", **knobs)
    assert message.startswith("DeepSpeed 0.19.8 cannot run") and "interleaved schedule" in message
    for fw in (MEGATRON, TORCHTITAN):
        assert not _violated(target, pp=4, virtual_stages=2, global_batch=64, framework=fw)


def test_context_parallelism(target: Target) -> None:
    # DeepSpeed's sequence parallelism is Ulysses all-to-all, not modelled: no CP at all
    assert _violated(target, cp=2, framework=DEEPSPEED) == {"framework"}
    assert "context parallelism" in _message(target, "framework", cp=2, framework=DEEPSPEED)
    for comm in ("ring", "allgather"):
        assert not _violated(target, cp=2, cp_comm=comm, framework=MEGATRON)
    # torchtitan 0.3.0 all-gathers K/V (no rotate method) over its FSDP mesh: ZeRO-2 or 3 only
    assert not _violated(target, cp=2, cp_comm="allgather", zero=3, framework=TORCHTITAN)
    assert _violated(target, cp=2, cp_comm="ring", zero=3, framework=TORCHTITAN) == {"framework"}
    assert "ZeRO-0" in _message(target, "framework", cp=2, cp_comm="allgather", zero=0, framework=TORCHTITAN)


def test_torchtitan_has_no_fp16_and_no_block_recompute(target: Target) -> None:
    assert _message(target, "framework_precision", precision="fp16", framework=TORCHTITAN) == (
        "torchtitan 0.3.0 cannot run fp16 training"
    )
    assert "block recompute" in _message(target, "framework", recompute="full", recompute_layers=2,
                                         framework=TORCHTITAN)  # fmt: skip


def test_torchtitan_before_0_3_ran_every_nth_layer_checkpointing(target: Target) -> None:
    # Stack.layer_sac: v0.2.2's selective_ac_option N, full recompute of L/N layers; with it a
    # torchtitan plan may use recompute_layers, which the rule refuses without it (test above)
    knobs = {"recompute": "full", "recompute_layers": 2, "framework": TORCHTITAN}
    older = replace(target, stack=target.stack.with_overrides(layer_sac=True))
    assert "framework" in _violated(target, **knobs)
    assert "framework" not in _violated(older, **knobs)
    # the setting opens nothing else: DeepSpeed still has no block recompute
    assert "framework" in _violated(older, **{**knobs, "framework": DEEPSPEED})


def test_deepspeed_partitions_its_pipeline_itself(target: Target) -> None:
    knobs = {"pp": 4, "first_stage_layers": 7, "last_stage_layers": 7, "framework": DEEPSPEED}
    assert "first/last stage" in _message(target, "framework", **knobs)
    assert not _violated(target, **{**knobs, "framework": MEGATRON})


def test_fp8_needs_the_framework_and_the_tensor_cores(target: Target, presets: dict[str, Cluster]) -> None:
    assert _violated(target, precision="fp8", framework=DEEPSPEED) == {"framework_precision"}
    assert _message(target, "framework_precision", precision="fp8", framework=DEEPSPEED) == (
        "DeepSpeed 0.19.8 cannot run fp8 training"
    )
    assert not _violated(target, precision="fp8", framework=MEGATRON)
    # an A100 has no FP8 tensor cores whatever the framework
    a100 = Target(target.model, presets["a100-80g"])
    assert _violated(a100, precision="fp8") == {"fp8"}
    assert _message(a100, "fp8", precision="fp8") == "NVIDIA A100-SXM4-80GB has no FP8 tensor cores"


@pytest.mark.parametrize(
    ("framework", "offload", "zero", "legal"),
    [
        # Megatron --optimizer-cpu-offload needs the distributed optimizer (ZeRO-1); no weights
        (MEGATRON, "optimizer", 1, True),
        (MEGATRON, "optimizer", 0, False),
        (MEGATRON, "all", 3, False),
        # ZeRO-Offload on stages 1-3; ZeRO-Infinity parameter offload on stage 3 only
        (DEEPSPEED, "optimizer", 1, True),
        (DEEPSPEED, "all", 3, True),
        (DEEPSPEED, "all", 2, False),
        # FSDP2 CPUOffloadPolicy moves everything: "all" with ZeRO-3, nothing else
        (TORCHTITAN, "all", 3, True),
        (TORCHTITAN, "optimizer", 3, False),
    ],
)
def test_offload_per_framework(target: Target, framework: Framework, offload: str, zero: int, legal: bool) -> None:
    knobs = {"dp": 8, "zero": zero, "offload": offload, "framework": framework}
    assert _violated(target, **knobs) == (set() if legal else {"framework"})
    if not legal:
        message = _message(target, "framework", **knobs)
        assert message.startswith(f"{FRAMEWORKS[framework].title} {FRAMEWORKS[framework].version} cannot run")
        assert f"offload {offload}" in message


def test_offload_with_one_rank_needs_no_zero_stage(target: Target) -> None:
    # with one data-parallel rank every stage shards over one rank
    assert not _violated(target, dp=1, zero=0, offload="all", framework=DEEPSPEED)


def test_block_recompute_is_megatrons(target: Target) -> None:
    # --recompute-method block --recompute-num-layers N; DeepSpeed's checkpointing has no such knob
    knobs = {"recompute": "full", "recompute_layers": 2}
    assert not _violated(target, **knobs, framework=MEGATRON)
    assert _violated(target, **knobs, framework=DEEPSPEED) == {"framework"}
    assert "block recompute" in _message(target, "framework", **knobs, framework=DEEPSPEED)


def test_every_framework_names_itself_in_its_messages(target: Target) -> None:
    # one layout no framework runs as given: ZeRO-1 and interleaving with FP8 and CP on DeepSpeed,
    # ZeRO-1 on torchtitan, offload of everything on Megatron
    cases: dict[Framework, dict[str, Any]] = {
        DEEPSPEED: {"pp": 4, "virtual_stages": 2, "global_batch": 64, "precision": "fp8", "cp": 2},
        TORCHTITAN: {"dp": 8, "zero": 1},
        MEGATRON: {"dp": 8, "zero": 3, "offload": "all"},
    }
    for fw, knobs in cases.items():
        message = _message(target, "framework", framework=fw, **knobs)
        assert message.startswith(f"{FRAMEWORKS[fw].title} {FRAMEWORKS[fw].version} cannot run "), message


def test_a_matrix_mixing_frameworks_applies_each_ones_rules(target: Target) -> None:
    # the same layout, ZeRO-2 on PP2, under each framework: only DeepSpeed refuses it
    rows = [Layout(pp=2, dp=4, zero=2, global_batch=64, framework=fw) for fw in (MEGATRON, DEEPSPEED, TORCHTITAN)]
    assert list(limit_checks(target, Layouts.of(rows))["framework"]) == [False, True, False]


# ------------------------------------------------------------------ the other limits


@pytest.mark.parametrize(
    ("knobs", "name", "message"),
    [
        ({"tp": 3}, "heads", "TP 3 does not divide the 32 attention heads"),
        ({"pp": 64}, "layers", "PP 64 exceeds the 32 layers"),
        ({"cp": 4, "seq_len": 4100}, "sequence",
         "sequence length 4100 is not divisible by 2 x CP = 8 (load-balanced causal chunks)"),
        ({"dp": 3, "micro_batch": 2, "global_batch": 64}, "batch",
         "global batch 64 is not divisible by DP 3 x micro-batch 2"),
        ({"virtual_stages": 2}, "virtual", "virtual stages 2 need pipeline parallelism (PP > 1)"),
        ({"pp": 4, "virtual_stages": 2, "global_batch": 6}, "virtual",
         "the interleaved schedule needs the micro-batch count (6) to be a multiple of PP 4"),
        ({"recompute": "selective", "recompute_layers": 2}, "recompute_layers",
         "recompute_layers 2 needs full recompute, not selective"),
        ({"ep": 2, "dp": 2}, "experts", "EP 2 needs a mixture-of-experts model; llama2-7b is dense"),
    ],
)  # fmt: skip
def test_limit_messages_have_the_figures(target: Target, knobs: dict[str, Any], name: str, message: str) -> None:
    assert name in _violated(target, **knobs)
    assert _message(target, name, **knobs) == message


def test_a_layout_within_every_limit(target: Target) -> None:
    assert not _violated(target, tp=8, pp=4, dp=2, cp=2, seq_len=8192, virtual_stages=2, global_batch=64)


@pytest.mark.parametrize("framework", list(Framework))
def test_the_cost_model_reads_the_framework_table_when_it_is_asked(monkeypatch: pytest.MonkeyPatch,
                                                                  framework: Framework) -> None:  # fmt: skip
    """`FRAMEWORKS` is the one source of each stack's figures: a fit that replaces an entry
    (benchmarks/fit_presets.py, the cross-validation in benchmarks/accuracy.py) changes what the
    cost model computes. Slower kernels never make a step faster, and here make it slower."""
    from dataclasses import replace

    from paraplan.cost_models.evaluate import evaluate
    from paraplan.cost_models.models import load_model
    from paraplan.hardware_specs.loader import load_cluster

    # h200 holds no stack figure of its own (h100-sxm holds torchtitan's, which the global one
    # does not reach: checked below)
    model, cluster = load_model("llama2-7b"), load_cluster("h200")
    lay = one(tp=1, pp=1, dp=8, zero=3 if framework == Framework.TORCHTITAN else 1, framework=framework,
              global_batch=64, seq_len=4096)  # fmt: skip
    stack = FRAMEWORKS[framework].stack
    before = float(evaluate(model, cluster, lay, stack).step_time_s[0])
    own = load_cluster("h100-sxm")
    own_before = float(evaluate(model, own, lay, stack).step_time_s[0])
    spec = FRAMEWORKS[framework]
    monkeypatch.setitem(FRAMEWORKS, framework, replace(spec, kernel_efficiency=spec.kernel_efficiency / 2))
    after = float(evaluate(model, cluster, lay, stack).step_time_s[0])
    assert after > before
    own_after = float(evaluate(model, own, lay, stack).step_time_s[0])
    has_own = getattr(own.efficiency.stack_kernel_efficiency, framework.label, None) is not None
    assert (own_after == own_before) if has_own else (own_after > own_before)

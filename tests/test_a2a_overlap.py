"""Megatron-LM's combined 1F1B (`Stack.moe_a2a_overlap`, `Stack.delay_wgrad`): the phase
arithmetic worked by hand, the steady-state share, the requirements Megatron asserts, and the
launch flags."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from conftest import one

from paraplan.api import load_model
from paraplan.cost_models.candidates import Layouts
from paraplan.cost_models.compute import MicroBatchTimes
from paraplan.cost_models.errors import InputError
from paraplan.cost_models.evaluate import evaluate
from paraplan.cost_models.layout import Layout
from paraplan.cost_models.pipeline import combined_1f1b_share
from paraplan.cost_models.stack import Stack
from paraplan.cost_models.traffic import a2a_hidden_s
from paraplan.hardware_specs.loader import load_cluster
from paraplan.launch.emitters import emit_launch
from paraplan.launch.importer import layout_from_launch, read_launch_text
from paraplan.question import stack_from


def _times(fwd: float, bwd: float, routed: float, routed_wgrad: float) -> MicroBatchTimes:
    zeros = {f.name: np.zeros(1) for f in dataclasses.fields(MicroBatchTimes)}
    given = {"layer_fwd_s": fwd, "layer_bwd_s": bwd, "routed_fwd_s": routed, "routed_wgrad_s": routed_wgrad}
    return MicroBatchTimes(**{**zeros, **{k: np.array([v]) for k, v in given.items()}})


# Mixtral: every layer MoE (moe_share 1). PP 1, DP 8 x micro-batch 1, global batch 32: m = 4.
MIXTRAL = load_model("mixtral-8x7b")
FLAT = one(framework="megatron", ep=8, dp=8, global_batch=32, micro_batch=1)


def test_phases_worked_by_hand() -> None:
    # One MoE layer: forward 3 s of which routed experts 1 s; backward 6 s of which routed 1 s
    # input gradients + 1 s weight gradients; four all-to-alls of x = 1.5 s (ep_layer_s = 6 s).
    # attention side: forward 3 - 1 = 2, backward 6 - 2 = 4.
    # Plain pairing: max(2, 1.5) + max(2, 1.5) + max(1, 1.5) + max(4, 1.5) = 9.5 against the
    # serial 3 + 6 + 6 = 15: 5.5 s hidden per paired layer (= 1.5 + 1.5 + 1 + 1.5, the min of each).
    # PP 1, m = 4: the first forward and the last backward run alone, 3 of 4 paired: 4.125 s.
    times = _times(3.0, 6.0, 1.0, 1.0)
    ep = np.array([6.0])
    got = a2a_hidden_s(MIXTRAL, FLAT, Stack(moe_a2a_overlap=True), times, ep)
    assert got[0] == pytest.approx(5.5 * 3 / 4)
    # delay_wgrad: phases 2-3 = max(max(D=1, 1.5) + 1.5, max(D + W = 2, 1.5) + 1) = 3 (not 2 + 1.5):
    # 2 + 3 + 4 = 9 paired, 6 s hidden, x 3/4 = 4.5 s
    delayed = a2a_hidden_s(MIXTRAL, FLAT, Stack(moe_a2a_overlap=True, delay_wgrad=True), times, ep)
    assert delayed[0] == pytest.approx(6.0 * 3 / 4)
    # off: nothing hidden
    assert a2a_hidden_s(MIXTRAL, FLAT, Stack(), times, ep)[0] == 0.0


def test_hidden_never_exceeds_the_all_to_all() -> None:
    # compute much longer than x: each phase hides all of its x, 4x = ep_layer_s per pair
    times = _times(30.0, 60.0, 10.0, 10.0)
    ep = np.array([2.0])
    assert a2a_hidden_s(MIXTRAL, FLAT, Stack(moe_a2a_overlap=True), times, ep)[0] == pytest.approx(2.0 * 3 / 4)


def test_steady_state_share_of_the_interleaved_schedule() -> None:
    # PP 4, v 2, m = 16: rank 0 warms up with 2*(4-1) + (2-1)*4 + 1 = 11 of the 32 forwards
    lay = one(framework="megatron", pp=4, virtual_stages=2, ep=2, dp=2, global_batch=32, micro_batch=1)
    assert combined_1f1b_share(lay)[0] == pytest.approx(21 / 32)
    # m = 4: 8 forwards, all warm-up: nothing paired
    few = one(framework="megatron", pp=4, virtual_stages=2, ep=2, dp=2, global_batch=8, micro_batch=1)
    assert combined_1f1b_share(few)[0] == 0.0
    assert combined_1f1b_share(FLAT)[0] == pytest.approx(3 / 4)


@pytest.mark.parametrize(
    ("knobs", "why"),
    [
        ({"ep": 1, "dp": 8}, "expert parallelism"),
        ({"pp": 2, "dp": 4, "ep": 4}, "virtual stages"),
        ({"ep": 8, "dp": 8, "recompute": "full"}, "full recompute"),
        # combined_1f1b.py asserts no Megatron-FSDP chunk in the interleaved schedule
        ({"pp": 2, "virtual_stages": 2, "dp": 4, "ep": 4, "zero": 3}, "Megatron-FSDP"),
    ],
)
def test_layouts_megatron_refuses_are_infeasible_and_not_priced(knobs: dict[str, object], why: str) -> None:
    cluster = load_cluster("h100-sxm")
    lay = Layouts.of([Layout(framework="megatron", global_batch=64, **knobs)])
    on = evaluate(MIXTRAL, cluster, lay, Stack(moe_a2a_overlap=True))
    off = evaluate(MIXTRAL, cluster, lay, Stack())
    assert on.checks["a2a_overlap"][0] and not off.checks["a2a_overlap"][0]
    assert on.step_time_s[0] == off.step_time_s[0]
    with pytest.raises(InputError, match=why):
        emit_launch("megatron", MIXTRAL, lay.at(0), Stack(moe_a2a_overlap=True))


def test_the_moe_recompute_module_is_refused_with_it() -> None:
    # transformer_config.py at d98e8a64: "disable moe in recompute_modules when enabling
    # overlap_moe_expert_parallel_comm"; moe_act is allowed
    cluster = load_cluster("h100-sxm")
    lay = Layouts.of([Layout(framework="megatron", ep=8, dp=8, global_batch=64, recompute="selective")])
    moe = evaluate(MIXTRAL, cluster, lay, Stack(moe_a2a_overlap=True, recompute_modules=frozenset({"moe"})))
    act = evaluate(MIXTRAL, cluster, lay, Stack(moe_a2a_overlap=True, recompute_modules=frozenset({"moe_act"})))
    assert moe.checks["a2a_overlap"][0] and not act.checks["a2a_overlap"][0]
    with pytest.raises(InputError, match="moe recompute module"):
        emit_launch("megatron", MIXTRAL, lay.at(0), Stack(moe_a2a_overlap=True, recompute_modules=frozenset({"moe"})))


def test_overlap_lowers_a_runnable_layouts_ep_time_only() -> None:
    cluster = load_cluster("h100-sxm")
    lay = Layouts.of([Layout(framework="megatron", ep=8, dp=16, pp=2, virtual_stages=2, global_batch=256)])
    on = evaluate(MIXTRAL, cluster, lay, Stack(moe_a2a_overlap=True))
    off = evaluate(MIXTRAL, cluster, lay, Stack())
    assert not on.checks["a2a_overlap"][0]
    assert 0.0 < on.times["ep_comm"][0] < off.times["ep_comm"][0]
    # the warm-up and cool-down passes run alone: the bubble keeps the whole all-to-all
    assert on.times["bubble"][0] == off.times["bubble"][0]
    assert on.times["compute"][0] == off.times["compute"][0]


def test_stack_validation() -> None:
    with pytest.raises(InputError, match="no combined 1F1B"):
        stack_from(Layout(framework="torchtitan").framework, {"moe_a2a_overlap": True})
    with pytest.raises(InputError, match="delay-wgrad needs moe-a2a-overlap"):
        stack_from(Layout().framework, {"delay_wgrad": True})
    assert stack_from(Layout().framework, {"moe_a2a_overlap": True, "delay_wgrad": True}).delay_wgrad


def test_flags_round_trip() -> None:
    # --overlap-moe-expert-parallel-comm and --delay-wgrad-compute: Megatron-LM d98e8a64's names
    # (optimizer/launch/schemas/megatron_lm_d98e8a64.json)
    lay = Layout(framework="megatron", ep=8, dp=16, pp=2, virtual_stages=2, global_batch=256)
    text = emit_launch("megatron", MIXTRAL, lay, Stack(moe_a2a_overlap=True, delay_wgrad=True))
    words = text.split()
    assert "--overlap-moe-expert-parallel-comm" in words and "--delay-wgrad-compute" in words
    _, stack, _, _ = layout_from_launch(read_launch_text(text, "megatron"), MIXTRAL, gpus=32)
    assert stack["moe_a2a_overlap"] is True and stack["delay_wgrad"] is True
    plain = emit_launch("megatron", MIXTRAL, lay, Stack())
    assert "--overlap-moe-expert-parallel-comm" not in plain.split() and "--delay-wgrad-compute" not in plain.split()
    _, stack, _, _ = layout_from_launch(read_launch_text(plain, "megatron"), MIXTRAL, gpus=32)
    assert not stack.get("moe_a2a_overlap")

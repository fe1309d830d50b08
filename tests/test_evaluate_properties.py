"""Properties of `cost_models.evaluate.evaluate` on random layouts of the candidate space:
monotonicity in the hardware, additivity of the breakdowns, batch scaling, utilization bounds
and consistency of the vectorized evaluation."""

from __future__ import annotations

import dataclasses
from functools import cache
from typing import Any

import numpy as np
import pytest
from conftest import one
from hypothesis import given, settings
from hypothesis import strategies as st

from paraplan.cost_models.compute import optimizer_step_s
from paraplan.cost_models.evaluate import TIME_TERMS, Evaluation, evaluate
from paraplan.cost_models.layout import Layouts
from paraplan.cost_models.memory import MEMORY_TERMS, stage_params
from paraplan.cost_models.models import ModelSpec, load_model, model_preset_names
from paraplan.cost_models.pipeline import bubble_fraction
from paraplan.cost_models.stack import Stack
from paraplan.cost_models.traffic import dp_exposed_s
from paraplan.hardware_specs.loader import load_cluster, preset_names
from paraplan.hardware_specs.schema import Cluster
from paraplan.space import Knobs, candidate_space

MODELS = model_preset_names()
HARDWARE = preset_names()
GPU_COUNTS = (8, 16, 64, 256)
SEQ_LENS = (2048, 4096)
GLOBAL_BATCH = 512
SUBSET = 48  # candidates per example, evaluated as one array
PROPERTY = settings(max_examples=60, deadline=None)
REL = 1e-9


@cache
def _model(name: str) -> ModelSpec:
    return load_model(name)


@cache
def _space(model: str, gpus: int, seq_len: int) -> Layouts:
    # Every preset has 8 GPUs per node (tests/test_hardware.py), the only hardware figure the
    # structural rules read, so one space serves all presets.
    knobs = Knobs(seq_len=seq_len, global_batch=GLOBAL_BATCH)
    return candidate_space(_model(model), load_cluster("h100-sxm"), gpus, knobs)


@dataclasses.dataclass(frozen=True)
class Case:
    model: ModelSpec
    cluster: Cluster
    layouts: Layouts
    stack: Stack

    def __repr__(self) -> str:  # hypothesis prints failing cases: keep them short
        rows = ", ".join(str(self.layouts.at(i)) for i in range(len(self.layouts)))
        return f"Case({self.model.name}, {self.cluster.name}, {self.stack}, [{rows}])"

    def evaluate(self, cluster: Cluster | None = None, layouts: Layouts | None = None) -> Evaluation:
        return evaluate(self.model, cluster or self.cluster, self.layouts if layouts is None else layouts, self.stack)


@st.composite
def cases(draw: st.DrawFn) -> Case:
    name = draw(st.sampled_from(MODELS))
    space = _space(name, draw(st.sampled_from(GPU_COUNTS)), draw(st.sampled_from(SEQ_LENS)))
    seed = draw(st.integers(0, 2**32 - 1))
    size = draw(st.integers(1, SUBSET))
    index = np.random.default_rng(seed).integers(0, len(space), size=size)
    stack = Stack(
        flash_attention=draw(st.booleans()),
        dp_overlap=draw(st.booleans()),
        main_grads=draw(st.sampled_from(["fp32", "bf16"])),
    )
    return Case(_model(name), load_cluster(draw(st.sampled_from(HARDWARE))), space.take(index), stack)


def _describe(case: Case, mask: np.ndarray) -> str:
    i = int(np.flatnonzero(mask)[0])
    return f"{case.model.name} on {case.cluster.name}, {case.stack}: {case.layouts.at(i)}"


def _scale_gpu(cluster: Cluster, factor: float) -> Cluster:
    gpu = cluster.gpu
    fp8 = None if gpu.peak_fp8_flops is None else gpu.peak_fp8_flops * factor
    faster = gpu.model_copy(
        update={
            "peak_bf16_flops": gpu.peak_bf16_flops * factor,
            "peak_fp16_flops": gpu.peak_fp16_flops * factor,
            "peak_fp8_flops": fp8,
        }
    )
    return cluster.model_copy(update={"gpu": faster})


def _scale_link(link: Any, factor: float) -> Any:
    return link.model_copy(update={"bw_bytes_per_s": link.bw_bytes_per_s * factor})


# ------------------------------------------------------------------ (a) memory


@PROPERTY
@given(case=cases(), factor=st.floats(1.0, 4.0))
def test_more_memory_never_makes_a_layout_infeasible(case: Case, factor: float) -> None:
    bigger = case.cluster.model_copy(
        update={"gpu": case.cluster.gpu.model_copy(update={"memory_bytes": case.cluster.gpu.memory_bytes * factor})}
    )
    small, large = case.evaluate(), case.evaluate(bigger)
    lost = small.feasible & ~large.feasible
    assert not lost.any(), _describe(case, lost)
    # the memory a layout needs does not depend on the capacity
    np.testing.assert_array_equal(small.memory.total, large.memory.total)


# ------------------------------------------------------------------ (b) faster hardware


@PROPERTY
@given(case=cases(), factor=st.floats(1.0, 8.0), which=st.sampled_from(["inter", "intra", "pcie", "all"]))
def test_faster_links_never_slow_the_step(case: Case, factor: float, which: str) -> None:
    c = case.cluster
    update: dict[str, Any] = {}
    intra: dict[str, Any] = {}
    if which in ("inter", "all"):
        update["inter_node"] = _scale_link(c.inter_node, factor)
    if which in ("intra", "all"):
        intra["link"] = _scale_link(c.intra_node.link, factor)
    if which in ("pcie", "all"):
        intra["pcie"] = _scale_link(c.intra_node.pcie, factor)
    if intra:
        update["intra_node"] = c.intra_node.model_copy(update=intra)
    slow, fast = case.evaluate(), case.evaluate(c.model_copy(update=update))
    worse = fast.step_time_s > slow.step_time_s * (1 + REL)
    assert not worse.any(), _describe(case, worse)


@PROPERTY
@given(case=cases(), factor=st.floats(1.0, 4.0))
def test_faster_gpu_never_slows_the_step(case: Case, factor: float) -> None:
    slow, fast = case.evaluate(), case.evaluate(_scale_gpu(case.cluster, factor))
    worse = fast.step_time_s > slow.step_time_s * (1 + REL)
    assert not worse.any(), _describe(case, worse)


def test_faster_gpu_zero3_example(a100: Cluster) -> None:
    # A concrete instance of the property above: llama2-7b on 16 A100s, DP16, ZeRO-3, micro-batch
    # 1, 64 micro-batches. Doubling every tensor-core peak cannot make the step slower: every term
    # of the step is compute (faster) or communication (unchanged links).
    model = load_model("llama2-7b")
    lay = one(dp=16, micro_batch=1, global_batch=1024, seq_len=4096, zero=3, recompute="none")
    slow = evaluate(model, a100, lay).step_time_s[0]
    fast = evaluate(model, _scale_gpu(a100, 2.0), lay).step_time_s[0]
    assert fast <= slow


def _dp_wire_time(case: Case) -> np.ndarray:
    """Every DP collective of the step, back to back, with nothing hidden (from the same
    collective costs as the model, hand-checked in test_comm.py)."""
    lay = case.layouts
    params = stage_params(case.model, lay, first=lay.pp == 1, last=True)
    zero = np.zeros(len(lay))
    return dp_exposed_s(params, lay, case.cluster, case.stack, (zero, zero))


@PROPERTY
@given(case=cases())
def test_step_covers_dense_model_dp_wire_time(case: Case) -> None:
    # For a dense model without CP, all DP collectives (the "dense" and the MLP "expert"
    # buckets) cross the same DP link of the same DP group one after another; overlap can hide
    # them behind compute, but the step cannot be shorter than the time the link is busy.
    # (CP > 1 is left out: there the expert bucket's link itself is mispriced, see
    # test_comm.py::test_mlp_gradients_reduce_over_the_dp_cp_group.)
    if case.model.is_moe:
        return
    ev = case.evaluate()
    wire = _dp_wire_time(case)
    short = (ev.step_time_s < wire * (1 - REL)) & (case.layouts.cp == 1)
    assert not short.any(), _describe(case, short) + f": step {ev.step_time_s[short][0]} < DP wire {wire[short][0]}"


# ------------------------------------------------------------------ (c) breakdowns add up


@PROPERTY
@given(case=cases())
def test_breakdowns_sum_to_totals(case: Case) -> None:
    ev = case.evaluate()
    times = np.sum([ev.times[t] for t in TIME_TERMS], axis=0)
    np.testing.assert_allclose(times, ev.step_time_s, rtol=1e-12)
    memory = np.sum([getattr(ev.memory, t) for t in MEMORY_TERMS], axis=0)
    np.testing.assert_allclose(memory, ev.memory.total, rtol=1e-12)
    for t in TIME_TERMS:
        assert (ev.times[t] >= 0).all(), t
    for t in MEMORY_TERMS:
        assert (getattr(ev.memory, t) >= 0).all(), t
    assert (ev.step_time_s > 0).all()
    # the JSON view reports the same figures
    record = ev.to_json(0)
    assert sum(record["time_s"].values()) == pytest.approx(record["step_time_s"], rel=1e-12)  # type: ignore[union-attr]


# ------------------------------------------------------------------ (d) batch scaling


@PROPERTY
@given(case=cases())
def test_doubling_global_batch_never_lowers_throughput(case: Case) -> None:
    lay = case.layouts
    doubled = dataclasses.replace(lay, global_batch=lay.global_batch * 2)
    base, big = case.evaluate(), case.evaluate(layouts=doubled)
    worse = big.tokens_per_s < base.tokens_per_s * (1 - REL)
    assert not worse.any(), _describe(case, worse)
    # twice the tokens take at most twice as long, and more than the same time
    assert (big.step_time_s <= 2 * base.step_time_s * (1 + REL)).all()
    assert (big.step_time_s > base.step_time_s).all()


# ------------------------------------------------------------------ (e) utilization


@PROPERTY
@given(case=cases())
def test_mfu_below_hfu_and_both_in_unit_interval(case: Case) -> None:
    ev = case.evaluate()
    assert (ev.mfu > 0).all() and (ev.hfu < 1).all(), _describe(case, (ev.mfu <= 0) | (ev.hfu >= 1))
    assert (ev.mfu <= ev.hfu).all()
    # no recompute => nothing spent again
    none = case.layouts.recompute == 0
    np.testing.assert_allclose(ev.mfu[none], ev.hfu[none], rtol=1e-15)


# ------------------------------------------------------------------ (f) vectorization


@settings(max_examples=30, deadline=None)
@given(case=cases())
def test_batch_evaluation_matches_one_at_a_time(case: Case) -> None:
    ev = case.evaluate()
    for i in range(min(len(case.layouts), 12)):
        alone = case.evaluate(layouts=case.layouts.take(np.array([i])))
        assert alone.layouts.at(0) == case.layouts.at(i)
        for name, batch, single in [
            ("step", ev.step_time_s, alone.step_time_s),
            ("mfu", ev.mfu, alone.mfu),
            ("hfu", ev.hfu, alone.hfu),
            ("tokens/s", ev.tokens_per_s, alone.tokens_per_s),
            *((t, ev.times[t], alone.times[t]) for t in TIME_TERMS),
            *((t, getattr(ev.memory, t), getattr(alone.memory, t)) for t in MEMORY_TERMS),
        ]:
            assert single[0] == pytest.approx(batch[i], rel=1e-12, abs=1e-300), name
        assert alone.feasible[0] == ev.feasible[i]
        assert alone.violations(0) == ev.violations(i)


# ------------------------------------------------------------------ (g) pipeline bubble


@PROPERTY
@given(case=cases())
def test_bubble_is_the_1f1b_fraction_of_the_micro_batch_work(case: Case) -> None:
    # Narayanan et al. 2021 Sec 2.2: bubble = (p-1)/(v*m) of the pipelined work, i.e. (p-1)/v
    # micro-batch slots, a slot being one micro-batch's forward + backward + recompute + exposed
    # TP/CP/EP/PP communication. The compute term also holds the optimizer step: take it out.
    lay = case.layouts
    ev = case.evaluate()
    params = stage_params(case.model, lay, first=lay.pp == 1, last=True)
    optimizer = optimizer_step_s(params, lay, case.cluster, case.stack)
    pipelined = (
        ev.times["compute"]
        - optimizer
        + sum(ev.times[t] for t in ("recompute", "tp_comm", "cp_comm", "ep_comm", "pp_comm"))
    )
    np.testing.assert_allclose(ev.times["bubble"], bubble_fraction(lay) * pipelined, rtol=1e-9, atol=1e-12)
    assert (ev.times["bubble"][lay.pp == 1] == 0).all()


def test_bubble_fraction_by_hand() -> None:
    # p=4, m=16: (p-1)/m = 3/16; interleaved v=2: 3/32
    assert bubble_fraction(one(pp=4, dp=1, micro_batch=1, global_batch=16))[0] == 3 / 16
    assert bubble_fraction(one(pp=4, dp=1, micro_batch=1, global_batch=16, virtual_stages=2))[0] == 3 / 32
    assert bubble_fraction(one(pp=1, global_batch=16))[0] == 0.0

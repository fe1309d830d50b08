"""Properties of `evaluate` on random legal layouts of the model and hardware presets, for every
framework: monotonicity in the hardware and in the knobs that trade time for memory (which
the search's pruning relies on), additive breakdowns, utilization bounds, batch scaling, and
slicing an evaluation against evaluating again. Plus the pipeline bubble by hand."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from conftest import one
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from paraplan.cost_models.candidates import Layouts
from paraplan.cost_models.compute import fastest_rate_flops
from paraplan.cost_models.evaluate import TIME_TERMS, Evaluation, evaluate
from paraplan.cost_models.flops import model_flops_per_step
from paraplan.cost_models.frameworks import FRAMEWORKS, default_stack
from paraplan.cost_models.layout import CpComm, Framework, Layout, Offload, Precision, Recompute
from paraplan.cost_models.limits import Target, limit_checks
from paraplan.cost_models.memory import MEMORY_TERMS
from paraplan.cost_models.models import ModelSpec
from paraplan.cost_models.pipeline import bubble_fraction, bubble_s
from paraplan.cost_models.stack import Stack
from paraplan.hardware_specs.loader import preset_names
from paraplan.hardware_specs.schema import Cluster, Link

BoolArray = npt.NDArray[np.bool_]
FloatArray = npt.NDArray[np.float64]
PROPERTY = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
REL = 1e-9
ROWS = 6  # candidate layouts per example, evaluated as one matrix


@dataclasses.dataclass(frozen=True)
class Case:
    model: ModelSpec
    cluster: Cluster
    stack: Stack
    rows: tuple[Layout, ...]

    @property
    def layouts(self) -> Layouts:
        return Layouts.of(list(self.rows))

    def evaluate(self, cluster: Cluster | None = None, rows: list[Layout] | None = None) -> Evaluation:
        lay = self.layouts if rows is None else Layouts.of(rows)
        return evaluate(self.model, cluster or self.cluster, lay, self.stack)

    def __repr__(self) -> str:  # what hypothesis prints for a failing example
        return f"Case({self.model.name}, {self.cluster.name}, {self.stack}, {list(self.rows)})"


def _divisors_in(values: tuple[int, ...], accept: Callable[[int], bool]) -> list[int]:
    return [v for v in values if accept(v)]


@st.composite
def layouts(draw: st.DrawFn, model: ModelSpec, cluster: Cluster, framework: Framework) -> Layout:
    """A layout the framework supports (the rules that need several knobs together are applied
    by `legal` afterwards)."""
    fs = FRAMEWORKS[framework]
    tp = draw(st.sampled_from(_divisors_in((1, 2, 4, 8), lambda t: model.num_kv_heads % t == 0)))
    pp = draw(st.sampled_from(_divisors_in((1, 2, 4, 8), lambda p: p <= model.num_layers)))
    cp = draw(st.sampled_from((1, 2, 4))) if fs.cp_comms else 1
    dp = draw(st.sampled_from((1, 2, 4, 8, 16)))
    ep = draw(st.sampled_from(_divisors_in((1, 2, 4, 8), lambda e: model.num_experts % e == 0 and dp * cp % e == 0)))
    micro_batch = draw(st.sampled_from((1, 2, 4)))
    steps = draw(st.sampled_from((1, 2, 4, 8, 16, 32)))  # micro-batches per step
    interleave = pp > 1 and fs.interleaved and steps % pp == 0

    def fits(v: int) -> bool:
        return v == 1 or (interleave and pp * v <= model.num_layers)

    virtual = draw(st.sampled_from(_divisors_in((1, 2, 4), fits)))
    recompute = draw(st.sampled_from(list(Recompute)))
    block = recompute == Recompute.FULL and fs.block_recompute
    precisions = sorted(p for p in fs.precisions if p != Precision.FP8 or cluster.gpu.peak_fp8_flops is not None)
    return Layout(
        tp=tp, pp=pp, dp=dp, cp=cp, ep=ep, micro_batch=micro_batch, global_batch=dp * micro_batch * steps,
        seq_len=draw(st.sampled_from((2048, 4096, 8192))), virtual_stages=virtual, recompute=recompute,
        recompute_layers=draw(st.sampled_from((0, 1, 2, 4))) if block else 0,
        zero=draw(st.sampled_from(sorted(z for z in fs.zero_stages if pp == 1 or z <= fs.zero_with_pp))),
        sequence_parallel=draw(st.booleans()) and tp > 1, precision=draw(st.sampled_from(precisions)),
        framework=framework, offload=draw(st.sampled_from(sorted(fs.offloads))),
        cp_comm=draw(st.sampled_from(sorted(fs.cp_comms))) if cp > 1 else CpComm.RING,
    )  # fmt: skip


def legal(model: ModelSpec, cluster: Cluster, rows: list[Layout]) -> BoolArray:
    """Rows that break no limit (memory and host aside: they depend on the hardware's size)."""
    bad = np.zeros(len(rows), dtype=bool)
    for mask in limit_checks(Target(model, cluster), Layouts.of(rows)).values():
        bad |= mask
    return np.asarray(~bad)


class Pool:
    """The presets to draw from (the session fixtures), shown briefly in hypothesis' reports."""

    def __init__(self, models: dict[str, ModelSpec], presets: dict[str, Cluster]):
        self.models = models
        self.presets = presets

    def __repr__(self) -> str:
        return f"Pool({len(self.models)} models, {len(self.presets)} hardware presets)"


@pytest.fixture(scope="session")
def pool(models: dict[str, ModelSpec], presets: dict[str, Cluster]) -> Pool:
    return Pool(models, presets)


@st.composite
def cases(draw: st.DrawFn, pool: Pool, framework: Framework | None = None) -> Case:
    fw = draw(st.sampled_from(list(Framework))) if framework is None else framework
    model = pool.models[draw(st.sampled_from(sorted(pool.models)))]
    cluster = pool.presets[draw(st.sampled_from(sorted(pool.presets)))]
    rows = draw(st.lists(layouts(model, cluster, fw), min_size=1, max_size=ROWS))
    rows = [row for row, ok in zip(rows, legal(model, cluster, rows), strict=True) if ok]
    assume(rows)
    stack = default_stack(fw).with_overrides(
        flash_attention=draw(st.booleans()), dp_overlap=draw(st.booleans()), tp_overlap=draw(st.booleans()),
        p2p_overlap=draw(st.booleans()),
    )  # fmt: skip
    return Case(model, cluster, stack, tuple(rows))


def _first(case: Case, mask: BoolArray) -> str:
    return f"{case.model.name} on {case.cluster.name}, {case.stack}: {case.rows[int(np.flatnonzero(mask)[0])]}"


# ------------------------------------------------------------------ hardware monotonicity


@PROPERTY
@given(data=st.data(), factor=st.floats(1.0, 4.0))
def test_more_memory_never_makes_a_layout_infeasible(pool: Pool, data: st.DataObject, factor: float) -> None:
    case = data.draw(cases(pool))
    gpu = case.cluster.gpu
    bigger = case.cluster.model_copy(update={"gpu": gpu.model_copy(update={"memory_bytes": gpu.memory_bytes * factor})})
    small, large = case.evaluate(), case.evaluate(bigger)
    lost = small.feasible & ~large.feasible
    assert not lost.any(), _first(case, lost)
    # what a layout needs does not depend on what the GPU has
    np.testing.assert_array_equal(small.memory.total, large.memory.total)


def _faster_link(link: Link, factor: float, latency: bool) -> Link:
    changes = {"bw_bytes_per_s": link.bw_bytes_per_s * factor}
    if latency:
        changes["latency_s"] = link.latency_s / factor
    return link.model_copy(update=changes)


@PROPERTY
@given(data=st.data(), factor=st.floats(1.0, 8.0), which=st.sampled_from(["inter", "intra", "pcie", "all"]))
def test_faster_links_never_slow_a_layout(pool: Pool, data: st.DataObject, factor: float, which: str) -> None:
    """More bandwidth on any link, or every link faster in bandwidth and latency alike. (A lower
    latency on one link alone can reroute traffic onto a narrower path: test_hardware.py::
    test_nvlink_is_preferred_over_a_lower_latency_pcie marks that as a known defect.)"""
    case = data.draw(cases(pool))
    c = case.cluster
    every = which == "all"
    update: dict[str, Any] = {}
    intra: dict[str, Any] = {}
    if which in ("inter", "all"):
        update["inter_node"] = _faster_link(c.inter_node, factor, every)
    if which in ("intra", "all"):
        intra["link"] = _faster_link(c.intra_node.link, factor, every)
    if which in ("pcie", "all"):
        intra["pcie"] = _faster_link(c.intra_node.pcie, factor, every)
    if intra:
        update["intra_node"] = c.intra_node.model_copy(update=intra)
    slow, fast = case.evaluate(), case.evaluate(c.model_copy(update=update))
    worse = fast.step_time_s > slow.step_time_s * (1 + REL)
    assert not worse.any(), _first(case, worse)


@PROPERTY
@given(data=st.data(), compute=st.floats(1.0, 4.0), memory=st.floats(1.0, 4.0))
def test_a_faster_gpu_never_slows_a_layout(pool: Pool, data: st.DataObject, compute: float, memory: float) -> None:
    case = data.draw(cases(pool))
    gpu = case.cluster.gpu
    fp8 = None if gpu.peak_fp8_flops is None else gpu.peak_fp8_flops * compute
    faster = gpu.model_copy(
        update={
            "peak_bf16_flops": gpu.peak_bf16_flops * compute, "peak_fp16_flops": gpu.peak_fp16_flops * compute,
            "peak_fp8_flops": fp8, "mem_bw_bytes_per_s": gpu.mem_bw_bytes_per_s * memory,
        }
    )  # fmt: skip
    slow, fast = case.evaluate(), case.evaluate(case.cluster.model_copy(update={"gpu": faster}))
    worse = fast.step_time_s > slow.step_time_s * (1 + REL)
    assert not worse.any(), _first(case, worse)


@PROPERTY
@given(data=st.data(), kept=st.floats(0.3, 1.0))
def test_dropout_never_speeds_a_layout_up(pool: Pool, data: st.DataObject, kept: float) -> None:
    """Training with dropout costs time (its masks' bytes, and flash attention's random draws), and
    flash attention that keeps less of its throughput under dropout never makes a step faster."""
    case = data.draw(cases(pool))
    dropout = dataclasses.replace(case, model=case.model.model_copy(update={"dropout": True}))
    plain = dataclasses.replace(case, model=case.model.model_copy(update={"dropout": False}))
    with_, without = dropout.evaluate(), plain.evaluate()
    faster = with_.step_time_s < without.step_time_s * (1 - REL)
    assert not faster.any(), _first(dropout, faster)
    eff = case.cluster.efficiency
    fwd, bwd = eff.attention_dropout_fwd * kept, eff.attention_dropout_bwd * kept
    slower_kernel = eff.model_copy(update={"attention_dropout_fwd": fwd, "attention_dropout_bwd": bwd})
    slower = dropout.evaluate(case.cluster.model_copy(update={"efficiency": slower_kernel}))
    faster = slower.step_time_s < with_.step_time_s * (1 - REL)
    assert not faster.any(), _first(dropout, faster)


# ------------------------------------------------------------------ knobs that trade time for memory


def _steps(row: Layout, model: ModelSpec) -> list[tuple[Layout, Layout, bool]]:
    """(less, more, memory too) pairs of variants of `row`, `more` doing more of one trading knob:
    the recompute ladder none -> selective -> full, Megatron's block method 1, 2, 4, ... layers ->
    all, and offload none -> optimizer -> all (the framework's own, at the row's ZeRO stage).

    Memory is compared along each knob, except selective -> full: the model gives selective
    recompute no recompute peak (test_memory.py::test_full_recompute_never_needs_more_memory_than_
    selective marks it as a known defect); none -> full is compared instead."""
    fs = FRAMEWORKS[row.framework]
    base = row.model_copy(update={"recompute": Recompute.NONE, "recompute_layers": 0, "offload": Offload.NONE})
    none, selective, full = (base.model_copy(update={"recompute": r}) for r in Recompute)
    steps = [(none, selective, True), (selective, full, False), (none, full, True)]
    if fs.block_recompute:
        blocks = [1 << k for k in range(model.num_layers.bit_length()) if (1 << k) < model.num_layers]
        ladder = [full.model_copy(update={"recompute_layers": n}) for n in [*blocks, 0]]
        steps += [(a, b, True) for a, b in itertools.pairwise(ladder)]
    recomputed = row.model_copy(update={"offload": Offload.NONE})
    offloads = [recomputed.model_copy(update={"offload": o}) for o in sorted(fs.offloads)]
    steps += [(a, b, True) for a, b in itertools.pairwise(offloads)]
    return steps


def _layer_input_bytes(model: ModelSpec, lay: Layouts) -> FloatArray:
    """One layer's input for one micro-batch, 2 h T bytes (split over TP with SP): the excess that
    test_memory.py::test_full_recompute_never_needs_more_memory_than_none marks as a known defect."""
    tokens = lay.micro_batch * lay.seq_len / lay.cp
    return np.asarray(2.0 * model.hidden_size * tokens / np.where(lay.seq_parallel_active, lay.tp, 1))


@pytest.mark.parametrize("framework", list(Framework), ids=str)
@PROPERTY
@given(data=st.data())
def test_trading_knobs_never_speed_up_and_never_add_memory(
    pool: Pool, data: st.DataObject, framework: Framework
) -> None:
    """`Knob.trades_memory` promises it and `search.expansion_needed` relies on it: more recompute
    (or more recomputed layers) or more offload never makes a layout faster, nor needs more
    memory."""
    case = data.draw(cases(pool, framework))
    steps = [step for row in case.rows for step in _steps(row, case.model)]
    rows = [layout for less, more, _ in steps for layout in (less, more)]
    ok = legal(case.model, case.cluster, rows)
    ev = case.evaluate(rows=rows)
    slack = _layer_input_bytes(case.model, ev.layouts)
    for k, (_, _, memory_too) in enumerate(steps):
        less, more = 2 * k, 2 * k + 1
        if not (ok[less] and ok[more]):
            continue
        what = f"{case.model.name} on {case.cluster.name}, {case.stack}: {rows[less]} -> {rows[more]}"
        assert ev.step_time_s[more] >= ev.step_time_s[less] * (1 - REL), "faster with more: " + what
        if memory_too:
            assert ev.memory.total[more] <= ev.memory.total[less] + slack[more], "more memory with more: " + what


# ------------------------------------------------------------------ breakdowns and utilization


@PROPERTY
@given(data=st.data())
def test_breakdowns_sum_to_their_totals(pool: Pool, data: st.DataObject) -> None:
    case = data.draw(cases(pool))
    ev = case.evaluate()
    assert set(ev.times) == set(TIME_TERMS)
    np.testing.assert_allclose(np.sum([ev.times[t] for t in TIME_TERMS], axis=0), ev.step_time_s, rtol=1e-12)
    np.testing.assert_allclose(np.sum([getattr(ev.memory, t) for t in MEMORY_TERMS], axis=0), ev.memory.total)
    for term in TIME_TERMS:
        assert (ev.times[term] >= 0).all(), term
    for term in MEMORY_TERMS:
        assert (getattr(ev.memory, term) >= 0).all(), term
    assert (ev.step_time_s > 0).all()
    # a single stage has no bubble and sends nothing between stages
    single = ev.layouts.pp == 1
    assert (ev.times["bubble"][single] == 0).all() and (ev.times["pp_comm"][single] == 0).all()


def _utilization_bounds(case: Case, ev: Evaluation) -> None:
    assert ((ev.mfu > 0) & (ev.hfu <= 1)).all(), _first(case, (ev.mfu <= 0) | (ev.hfu > 1))
    assert (ev.mfu <= ev.hfu * (1 + 1e-12)).all()
    # the causal count never exceeds the PaLM count
    assert (ev.mfu <= ev.mfu_palm * (1 + 1e-12)).all()
    none = ev.layouts.recompute == Recompute.NONE
    np.testing.assert_allclose(ev.mfu[none], ev.hfu[none], rtol=1e-12)


@PROPERTY
@given(data=st.data())
def test_utilization_stays_within_bounds(pool: Pool, data: st.DataObject) -> None:
    case = data.draw(cases(pool))
    _utilization_bounds(case, case.evaluate())


@pytest.mark.parametrize("hardware", preset_names())
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.filter_too_much])
@given(data=st.data())
def test_fp8_utilization_stays_within_bounds(pool: Pool, data: st.DataObject, hardware: str) -> None:
    # FP8 runs against the FP8 peak, so MFU and HFU stay below 1 where it runs; a GPU without FP8
    # tensor cores refuses it (the "fp8" limit).
    cluster = pool.presets[hardware]
    fw = data.draw(st.sampled_from([fw for fw, fs in FRAMEWORKS.items() if Precision.FP8 in fs.precisions]))
    case = data.draw(cases(Pool(pool.models, {hardware: cluster}), fw))
    rows = [row.model_copy(update={"precision": Precision.FP8}) for row in case.rows]
    ev = case.evaluate(rows=rows)
    if cluster.gpu.peak_fp8_flops is None:
        assert ev.checks["fp8"].all()
        return
    assert not ev.checks["fp8"].any()
    np.testing.assert_array_equal(ev.peak_flops, cluster.gpu.peak_fp8_flops)
    _utilization_bounds(case, ev)


@PROPERTY
@given(data=st.data())
def test_doubling_the_global_batch_never_lowers_throughput(pool: Pool, data: st.DataObject) -> None:
    case = data.draw(cases(pool))
    doubled = [row.model_copy(update={"global_batch": 2 * row.global_batch}) for row in case.rows]
    base, big = case.evaluate(), case.evaluate(rows=doubled)
    worse = big.tokens_per_s < base.tokens_per_s * (1 - REL)
    assert not worse.any(), _first(case, worse)
    # twice the tokens take longer, and at most twice as long
    assert (big.step_time_s > base.step_time_s).all()
    assert (big.step_time_s <= 2 * base.step_time_s * (1 + REL)).all()


# ------------------------------------------------------------------ slicing an evaluation


def _assert_same(a: Evaluation, b: Evaluation) -> None:
    """Every field of two evaluations equal (arrays to rounding, in the same order)."""
    assert len(a) == len(b)
    for f in dataclasses.fields(Evaluation):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, Layouts):
            np.testing.assert_array_equal(x.data, y.data)
        elif isinstance(x, dict):
            assert x.keys() == y.keys(), f.name
            for key in x:
                np.testing.assert_allclose(x[key], y[key], rtol=1e-12, err_msg=f"{f.name}[{key}]")
        elif isinstance(x, np.ndarray):
            np.testing.assert_allclose(x, y, rtol=1e-12, err_msg=f.name)
        elif dataclasses.is_dataclass(x) and not isinstance(x, type) and f.name == "memory":
            for term in MEMORY_TERMS:
                np.testing.assert_allclose(getattr(x, term), getattr(y, term), rtol=1e-12, err_msg=term)
        else:
            assert x == y, f.name
    for derived in ("feasible", "mfu", "mfu_palm", "hfu", "tokens_per_s", "memory_margin_bytes"):
        np.testing.assert_allclose(getattr(a, derived), getattr(b, derived), rtol=1e-12, err_msg=derived)


@PROPERTY
@given(data=st.data())
def test_take_and_concat_equal_a_fresh_evaluation(pool: Pool, data: st.DataObject) -> None:
    case = data.draw(cases(pool))
    rows = list(case.rows)
    ev = case.evaluate()
    pick = data.draw(st.lists(st.integers(0, len(rows) - 1), min_size=1, max_size=2 * len(rows)))
    index = np.array(pick, dtype=np.int64)
    _assert_same(ev.take(index), case.evaluate(rows=[rows[i] for i in pick]))
    mask = np.array(data.draw(st.lists(st.booleans(), min_size=len(rows), max_size=len(rows))))
    _assert_same(ev.take(mask), case.evaluate(rows=[r for r, m in zip(rows, mask, strict=True) if m]))
    # two slices joined: the rows of both, in order
    split = data.draw(st.integers(0, len(rows)))
    head, tail = np.arange(split, dtype=np.int64), np.arange(split, len(rows), dtype=np.int64)
    _assert_same(Evaluation.concat([ev.take(head), ev.take(tail)]), ev)


# ------------------------------------------------------------------ pipeline bubble


@pytest.mark.parametrize(
    ("knobs", "fraction"),
    [
        # Narayanan et al. 2021 Sec 2.2.1, 1F1B: (p - 1)/m, p 4, m 16 => 3/16
        ({"pp": 4, "global_batch": 16}, 3 / 16),
        # Sec 2.2.2, interleaved: (p - 1)/(v m), v 2 => 3/32; v 4 => 3/64
        ({"pp": 4, "global_batch": 16, "virtual_stages": 2}, 3 / 32),
        ({"pp": 4, "global_batch": 16, "virtual_stages": 4}, 3 / 64),
        # DP4 x micro-batch 2 of a global batch of 64: m = 8, p 8 => 7/8
        ({"pp": 8, "dp": 4, "micro_batch": 2, "global_batch": 64}, 7 / 8),
        # no pipeline, no bubble
        ({"pp": 1, "global_batch": 16}, 0.0),
    ],
)
def test_bubble_fraction_by_hand(knobs: dict[str, int], fraction: float) -> None:
    assert float(bubble_fraction(one(**knobs))[0]) == fraction


def test_bubble_is_p_minus_one_slots_over_v() -> None:
    # (p - 1)/v micro-batch slots of the slowest stage: p 4 with a 2 s slot => 6 s; v 2 => 3 s
    assert float(bubble_s(one(pp=4), np.array([2.0]))[0]) == 6.0
    assert float(bubble_s(one(pp=4, virtual_stages=2), np.array([2.0]))[0]) == 3.0


# ------------------------------------------------------------------ the search's pruning bound


@PROPERTY
@given(data=st.data())
def test_no_step_beats_the_flops_floor(pool: Pool, data: st.DataObject) -> None:
    """`search.step_floor_s` prunes whole GPU counts of a range search: it must never exceed a
    step time the cost model can produce, or a winning count would be skipped."""
    case = data.draw(cases(pool))
    ev = case.evaluate()
    lay = ev.layouts
    floor = model_flops_per_step(case.model, lay) / fastest_rate_flops(case.cluster, lay) / lay.gpus
    too_high = floor > ev.step_time_s * (1 + 1e-9)
    assert not too_high.any(), _first(case, too_high)

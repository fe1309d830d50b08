"""Invariants of the optimum, as property tests over presets and GPU counts (few examples each).

Only statements the cost model guarantees are tested, each with the reason it must hold:

* More GPU memory never shrinks the feasible set nor slows the optimum: capacity enters only the
  memory check (total <= usable), never a time term or the candidate space; so every layout
  feasible on the smaller GPU is feasible on the larger, at the same step time.
* Faster GPUs (FLOP/s and HBM bandwidth) or faster links never slow the optimum: every time term
  is work over a rate, or a max/sum of such terms (exposed communication is what overlap cannot
  hide, and hides more when compute is longer, never less in total), so each layout's step time
  is non-increasing in every rate; speed does not enter memory, so the feasible set is the same.
* Doubling the global batch never lowers a layout's tokens/s: the same micro-batches run twice
  as often; compute and per-micro-batch communication double, while the pipeline fill/drain
  (bubble), the gradient reduction and the optimizer step are paid once per step. The *optimum*
  can still get slower when memory binds (1F1B keeps min(PP, micro-batches) activations in
  flight, which can grow with the batch), so the optimum is compared only when the doubled
  optimum layout still fits.

Not tested as invariants, because they do not hold in this model: more GPUs never slower (the
global batch is fixed, so DP may stop dividing it), bigger micro-batches never slower.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from paraplan.cost_models.candidates import Layouts
from paraplan.cost_models.models import ModelSpec, load_model, model_preset_names
from paraplan.hardware_specs.loader import load_cluster, preset_names
from paraplan.hardware_specs.schema import Cluster
from paraplan.question import Question
from paraplan.search import Constraints, rank_space

NOISE = 1e-9
SETTINGS = settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])
GPUS = [8, 16, 32]
MODELS = [m for m in model_preset_names() if load_model(m).total_params < 100e9]


def spec(name: str) -> ModelSpec:
    return load_model(name)


def best(model: ModelSpec, cluster: Cluster, gpus: int, **knobs: object) -> tuple[float, int] | None:
    """(step time, index) of the optimum, or None when nothing fits."""
    question = Question.of(model, cluster, {"global_batch": 128, **knobs})
    ranking = rank_space(question, [gpus], Constraints(), 1)
    if not ranking.groups:
        return None
    return float(ranking.evaluation.step_time_s[ranking.best[0]]), ranking.best[0]


def faster_gpu(c: Cluster, f: float) -> Cluster:
    g = c.gpu
    fp8 = None if g.peak_fp8_flops is None else g.peak_fp8_flops * f
    gpu = g.model_copy(update={"peak_bf16_flops": g.peak_bf16_flops * f, "peak_fp16_flops": g.peak_fp16_flops * f,
                               "peak_fp8_flops": fp8, "mem_bw_bytes_per_s": g.mem_bw_bytes_per_s * f})  # fmt: skip
    return c.model_copy(update={"gpu": gpu})


def faster_links(c: Cluster, f: float) -> Cluster:
    intra = c.intra_node
    link = intra.link.model_copy(update={"bw_bytes_per_s": intra.link.bw_bytes_per_s * f})
    pcie = intra.pcie.model_copy(update={"bw_bytes_per_s": intra.pcie.bw_bytes_per_s * f})
    inter = c.inter_node.model_copy(update={"bw_bytes_per_s": c.inter_node.bw_bytes_per_s * f})
    return c.model_copy(update={"intra_node": intra.model_copy(update={"link": link, "pcie": pcie}),
                                "inter_node": inter})  # fmt: skip


def more_memory(c: Cluster, f: float) -> Cluster:
    return c.model_copy(update={"gpu": c.gpu.model_copy(update={"memory_bytes": c.gpu.memory_bytes * f})})


questions = st.tuples(st.sampled_from(MODELS), st.sampled_from(preset_names()), st.sampled_from(GPUS))


@SETTINGS
@given(questions, st.floats(1.0, 4.0))
def test_more_memory_never_shrinks_the_feasible_set_or_slows_the_optimum(
    question: tuple[str, str, int], factor: float
) -> None:
    name, hardware, gpus = question
    small, big = load_cluster(hardware), more_memory(load_cluster(hardware), factor)
    q_small = Question.of(spec(name), small, {"global_batch": 128})
    space = q_small.space(gpus, trading=False)
    q_big = Question.of(spec(name), big, {"global_batch": 128})
    assert len(q_big.space(gpus, trading=False)) == len(space)  # capacity never enters the space
    before, after = q_small.evaluate(space), q_big.evaluate(space)
    assert not np.any(before.feasible & ~after.feasible)
    assert np.array_equal(before.step_time_s, after.step_time_s)
    slow, fast = best(spec(name), small, gpus), best(spec(name), big, gpus)
    if slow is not None:
        assert fast is not None and fast[0] <= slow[0] * (1 + NOISE)


@SETTINGS
@given(questions, st.floats(1.0, 3.0))
def test_a_faster_gpu_never_slows_the_optimum(question: tuple[str, str, int], factor: float) -> None:
    name, hardware, gpus = question
    slow, fast = best(spec(name), load_cluster(hardware), gpus), best(spec(name), faster_gpu(load_cluster(hardware),
                                                                                             factor), gpus)  # fmt: skip
    assert (slow is None) == (fast is None)  # speed does not change what fits
    if slow is not None and fast is not None:
        assert fast[0] <= slow[0] * (1 + NOISE)


@SETTINGS
@given(questions, st.floats(1.0, 8.0))
def test_faster_links_never_slow_the_optimum(question: tuple[str, str, int], factor: float) -> None:
    name, hardware, gpus = question
    base = load_cluster(hardware)
    slow, fast = best(spec(name), base, gpus), best(spec(name), faster_links(base, factor), gpus)
    assert (slow is None) == (fast is None)
    if slow is not None and fast is not None:
        assert fast[0] <= slow[0] * (1 + NOISE)


@SETTINGS
@given(questions)
def test_doubling_the_global_batch_never_lowers_tokens_per_s(question: tuple[str, str, int]) -> None:
    name, hardware, gpus = question
    model, cluster = spec(name), load_cluster(hardware)
    question_b = Question.of(model, cluster, {"global_batch": 128})
    ranking = rank_space(question_b, [gpus], Constraints(), 1)
    if not ranking.groups:
        return
    ev_b = ranking.evaluation.take(np.array(ranking.best[:1]))
    lay = ev_b.layouts.at(0)
    question_2b = Question.of(model, cluster, {"global_batch": 256})
    doubled = question_2b.evaluate(Layouts.of([lay.model_copy(update={"global_batch": 256})]))
    assert doubled.tokens_per_s[0] >= ev_b.tokens_per_s[0] * (1 - NOISE)
    if doubled.feasible[0]:  # the doubled layout fits: the 2B optimum is at least as good
        ranking_2b = rank_space(question_2b, [gpus], Constraints(), 1)
        best_2b = ranking_2b.evaluation.take(np.array(ranking_2b.best[:1]))
        assert best_2b.tokens_per_s[0] >= ev_b.tokens_per_s[0] * (1 - NOISE)


@pytest.mark.parametrize("hardware", ["a100-80g", "rtx4090"])
def test_memory_capacity_decides_feasibility_alone(hardware: str) -> None:
    """The reason behind the first invariant, on one space: doubling the capacity changes the
    memory check and nothing else."""
    model, base = spec("llama2-70b"), load_cluster(hardware)
    q = Question.of(model, base, {"global_batch": 128})
    space = q.space(32, trading=False)
    small = q.evaluate(space)
    big = Question.of(model, more_memory(base, 2.0), {"global_batch": 128}).evaluate(space)
    for name, mask in small.checks.items():
        if name != "memory":
            assert np.array_equal(mask, big.checks[name]), name
    assert big.checks["memory"].sum() < small.checks["memory"].sum()

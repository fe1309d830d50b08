"""Invariants of the search, as property tests: the optimum never gets slower with better
hardware, never infeasible with more memory; a bigger batch never lowers throughput; every JSON
object the CLI prints validates against the output models it prints with."""

from __future__ import annotations

import contextlib
import io
import json
from dataclasses import replace

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from paraplan.cost_models.evaluate import evaluate
from paraplan.cost_models.models import load_model
from paraplan.hardware_specs.loader import load_cluster
from paraplan.hardware_specs.schema import Cluster
from paraplan.cli import main
from paraplan.output import EvaluatedLayoutOut, OptimizeOut
from paraplan.scenario import Scenario
from paraplan.search import Constraints, search
from paraplan.space import Knobs, candidate_space

MODELS = ["llama2-7b", "llama2-13b", "llama3-8b", "llama2-70b", "mixtral-8x7b"]
HARDWARE = ["a100-80g", "h100-sxm", "rtx4090", "l40s", "mi300x", "a100-80g-pcie"]
GPUS = [8, 16, 32, 64, 128, 256]
REL = 1e-9
SETTINGS = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _best(model: str, cluster: Cluster, gpus: int, seq_len: int = 4096) -> float | None:
    scenario = Scenario(load_model(model), cluster, gpus, Knobs(global_batch=max(1, 4_194_304 // seq_len),
                                                                  seq_len=seq_len))
    result = search(scenario, [gpus], Constraints(), 1)
    return result.choices[0].step_time_s if result.choices else None


def _faster_gpu(c: Cluster, f: float) -> Cluster:
    g = c.gpu
    fp8 = None if g.peak_fp8_flops is None else g.peak_fp8_flops * f
    return c.model_copy(update={"gpu": g.model_copy(update={
        "peak_bf16_flops": g.peak_bf16_flops * f, "peak_fp16_flops": g.peak_fp16_flops * f, "peak_fp8_flops": fp8,
        "mem_bw_bytes_per_s": g.mem_bw_bytes_per_s * f})})


def _faster_links(c: Cluster, f: float) -> Cluster:
    intra = c.intra_node
    link = intra.link.model_copy(update={"bw_bytes_per_s": intra.link.bw_bytes_per_s * f})
    pcie = intra.pcie.model_copy(update={"bw_bytes_per_s": intra.pcie.bw_bytes_per_s * f})
    inter = c.inter_node.model_copy(update={"bw_bytes_per_s": c.inter_node.bw_bytes_per_s * f})
    return c.model_copy(update={"intra_node": intra.model_copy(update={"link": link, "pcie": pcie}),
                                "inter_node": inter})


def _more_memory(c: Cluster, f: float) -> Cluster:
    return c.model_copy(update={"gpu": c.gpu.model_copy(update={"memory_bytes": c.gpu.memory_bytes * f})})


@SETTINGS
@given(st.sampled_from(MODELS), st.sampled_from(HARDWARE), st.sampled_from(GPUS), st.floats(1.0, 3.0))
def test_faster_gpu_never_slows_the_optimum(model: str, hardware: str, gpus: int, factor: float) -> None:
    base = load_cluster(hardware)
    slow, fast = _best(model, base, gpus), _best(model, _faster_gpu(base, factor), gpus)
    assert (slow is None) == (fast is None)  # speed does not change what fits
    if slow is not None and fast is not None:
        assert fast <= slow * (1 + REL)


@SETTINGS
@given(st.sampled_from(MODELS), st.sampled_from(HARDWARE), st.sampled_from(GPUS), st.floats(1.0, 8.0))
def test_faster_links_never_slow_the_optimum(model: str, hardware: str, gpus: int, factor: float) -> None:
    base = load_cluster(hardware)
    slow, fast = _best(model, base, gpus), _best(model, _faster_links(base, factor), gpus)
    if slow is not None and fast is not None:
        assert fast <= slow * (1 + REL)


@SETTINGS
@given(st.sampled_from(MODELS), st.sampled_from(HARDWARE), st.sampled_from(GPUS), st.floats(1.0, 4.0))
def test_more_memory_never_shrinks_the_feasible_set_or_slows_the_optimum(
    model: str, hardware: str, gpus: int, factor: float
) -> None:
    base = load_cluster(hardware)
    spec = load_model(model)
    space = candidate_space(spec, base, gpus, Knobs())
    small = evaluate(spec, base, space)
    big = evaluate(spec, _more_memory(base, factor), space)
    assert not np.any(small.feasible & ~big.feasible)
    before, after = _best(model, base, gpus), _best(model, _more_memory(base, factor), gpus)
    if before is not None:
        assert after is not None and after <= before * (1 + REL)


@SETTINGS
@given(st.sampled_from(MODELS), st.sampled_from(HARDWARE), st.sampled_from(GPUS), st.integers(0, 400))
def test_doubling_the_global_batch_never_lowers_tokens_per_s(model: str, hardware: str, gpus: int, pick: int) -> None:
    cluster, spec = load_cluster(hardware), load_model(model)
    space = candidate_space(spec, cluster, gpus, Knobs(global_batch=512))
    if len(space) == 0:
        return
    one = space.take(np.array([pick % len(space)]))
    doubled = replace(one, global_batch=one.global_batch * 2)
    a, b = evaluate(spec, cluster, one), evaluate(spec, cluster, doubled)
    assert b.tokens_per_s[0] >= a.tokens_per_s[0] * (1 - REL)


def _cli_json(args: list[str]) -> tuple[int, dict[str, object]]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), pytest.raises(SystemExit) as info:
        main(args)
    return int(info.value.code or 0), json.loads(out.getvalue())


@pytest.mark.parametrize(
    "args",
    [
        ["validate", "--model", "llama2-70b", "--gpus", "256", "--hardware", "a100-80g", "--plan", "TP8/PP4/DP8"],
        ["validate", "--model", "mixtral-8x7b", "--gpus", "64", "--hardware", "h100-sxm", "--plan", "TP2/PP2/DP16/EP8"],
        ["memory", "--model", "llama2-70b", "--gpus", "1", "--hardware", "a100-80g", "--plan", "TP1",
         "--recompute", "none", "--zero", "0", "--micro-batch", "8"],
    ],
)
def test_validate_json_matches_its_output_model(args: list[str]) -> None:
    code, obj = _cli_json([*args, "--json"])
    assert code in (0, 1)
    EvaluatedLayoutOut.model_validate(obj)


def test_optimize_json_matches_its_output_model() -> None:
    code, obj = _cli_json(["optimize", "--model", "llama3-8b", "--gpus", "64", "--hardware", "a100-80g,rtx4090:32",
                           "--top", "3", "--json"])
    assert code == 0
    parsed = OptimizeOut.model_validate(obj)
    assert [r.hardware for r in parsed.results] == ["a100-80g", "rtx4090"]
    assert [r.gpus for r in parsed.results] == [64, 32]

"""Mixed GPU pools: the pool spec, the stage tables against the uniform cost model, the CP-SAT
stage model against brute-force enumeration, the whole pool search against brute force over every
(DP, micro-batch), and the pool's answer (JSON, homogeneous comparison, emission, compare).

The brute-force check (`test_solver_equals_brute_force`, 240 scenarios, and the pool-level
`test_search_equals_brute_force`, 40) runs on small instances: two GPU types from the presets
with small nodes, up to 64 GPUs, up to 16 layers; each scenario is capped in depth so that
enumerating every option sequence and every layer split stays small. The solver runs with one
worker (deterministic), as the pool search does.
"""

from __future__ import annotations

import dataclasses
import json
import math
from functools import cache, lru_cache
from pathlib import Path
from unittest import mock

import pytest
from conftest import gpt_spec
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from paraplan import pools as pools_module
from paraplan.cost_models.candidates import Layouts
from paraplan.cost_models.errors import InputError
from paraplan.cost_models.evaluate import TIME_TERMS, evaluate
from paraplan.cost_models.frameworks import default_stack
from paraplan.cost_models.layout import Framework, Layout, Recompute
from paraplan.hardware_specs.loader import load_cluster
from paraplan.hardware_specs.schema import Cluster
from paraplan.pools import (
    PoolQuestion,
    check_pool_options,
    compare_pool,
    evaluated_plan,
    looks_like_pool,
    optimize_pool,
    parse_pool,
    plan_figures,
    pool_plan_json,
    pool_question,
    pool_text,
    solve_pool,
    split_hardware,
)
from paraplan.results import HardwareResult
from paraplan.stage_costs import Pool, PoolMember, PoolSettings, StageTables, stage_tables
from paraplan.stage_model import (
    LAST,
    SINGLE,
    IntTables,
    StagePlan,
    boundary_charge,
    brute_force,
    plan_objective,
    roles,
    slot_lower_bound,
    solve,
)

PRESETS = ("a100-80g", "rtx4090", "h100-sxm", "l40s", "a100-40g", "mi300x", "rtx3090")
SEQUENCES = 400  # most option sequences a brute-force scenario enumerates
ROWS = 60_000  # most (sequence, layer split) pairs


# --- the pool spec ------------------------------------------------------------------------------------


def test_parse_pool_spec() -> None:
    pool = parse_pool("a100-80g:64+rtx4090:512")
    assert [m.name for m in pool.members] == ["a100-80g", "rtx4090"]
    assert pool.counts == (64, 512)
    assert pool.name == "a100-80g:64+rtx4090:512"
    assert pool.link is None
    assert looks_like_pool("a100-80g:64+rtx4090:512")
    assert not looks_like_pool("a100-80g:64")


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("a100-80g+rtx4090:8", "needs a GPU count"),
        ("a100-80g:0+rtx4090:8", "must be 1.."),
        ("a100-80g:x+rtx4090:8", "whole number"),
        ("a100-80g:8+a100-80g:8", "twice"),
        ("nosuchgpu:8+rtx4090:8", "unknown hardware"),
        ("+", "needs a GPU count"),
        # a file name with '+' in it reads as two entries (found by the hostile fuzzing): the line
        # says it is the hardware option's pool syntax
        ("hw/special+:8:8", "hardware pool entry 'hw/special' needs a GPU count.*'\\+' joins"),
    ],
)
def test_parse_pool_errors(text: str, words: str) -> None:
    with pytest.raises(InputError, match=words) as info:
        parse_pool(text)
    assert "\n" not in str(info.value)


def test_pool_file(tmp_path: Path) -> None:
    path = tmp_path / "lab.toml"
    path.write_text(
        'name = "lab"\n[[member]]\nhardware = "a100-80g"\ncount = 16\n[[member]]\nhardware = "rtx4090"\n'
        'count = 32\n[link]\nbw_bytes_per_s = 12.5e9\nlatency_s = 1e-5\nefficiency = 0.8\nsources = ["lab wiring"]\n'
    )
    pool = parse_pool(str(path))
    assert pool.name == "lab" and pool.counts == (16, 32)
    assert pool.link is not None and pool.link.effective_bw_bytes_per_s == pytest.approx(10e9)
    assert looks_like_pool(str(path))


@pytest.mark.parametrize(
    ("body", "words"),
    [
        ('[[member]]\nhardware = "a100-80g"\n', "needs count"),
        ('[[member]]\nhardware = "a100-80g"\ncount = 8\ncolour = 1\n', "unknown key"),
        ('[[member]]\nhardware = "a100-80g"\ncount = 8\n[link]\nlatency_s = 1e-5\n', "needs bw_bytes_per_s"),
        ('[[member]]\nhardware = "a100-80g"\ncount = 8\n[link]\nbw_bytes_per_s = 5\nlatency_s = 0\n', "must be in"),
        ("speed = 3\n", "unknown key"),
        ("[[member\n", "invalid TOML"),
    ],
)
def test_pool_file_errors(tmp_path: Path, body: str, words: str) -> None:
    path = tmp_path / "pool.toml"
    path.write_text(body)
    with pytest.raises(InputError, match=words) as info:
        parse_pool(str(path))
    assert "\n" not in str(info.value)


def test_split_hardware_keeps_the_order() -> None:
    parts = split_hardware(["a100-80g:8", "h100-sxm:8+a100-80g:8,rtx4090"])
    assert parts[0] == "a100-80g:8" and parts[2] == "rtx4090"
    pool = parts[1]
    assert isinstance(pool, Pool) and pool.name == "h100-sxm:8+a100-80g:8"


def test_pool_options_refused() -> None:
    for kwargs, words in (({"gpus": 8}, "own GPU counts"), ({"deadline_days": 3.0}, "deadline"),
                          ({"tp_within_node": False}, "tp-across-nodes"), ({"scaling": True}, "scaling")):  # fmt: skip
        with pytest.raises(InputError, match=words):
            check_pool_options(**kwargs)


def test_pool_question_refuses_what_pools_do_not_search() -> None:
    spec = gpt_spec(layers=4)
    pool = parse_pool("a100-80g:8+rtx4090:8")
    for knobs in ({"cp": 2}, {"virtual_stages": 2}, {"offload": "optimizer"}, {"zero": 3}):
        with pytest.raises(InputError, match="pool"):
            pool_question(spec, pool, knobs)
    with pytest.raises(InputError, match="torchtitan"):
        pool_question(spec, pool, {"framework": "torchtitan"})


# --- small instances -------------------------------------------------------------------------------


@cache
def _cluster(name: str, per_node: int) -> Cluster:
    return load_cluster(name).model_copy(update={"gpus_per_node": per_node})


@lru_cache(maxsize=512)
def _tables(a: str, b: str, node_a: int, node_b: int, hidden: int, layers: int, vocab: int, batch: int,
            dp: int, micro: int, recompute: tuple[Recompute, ...], headroom: float) -> StageTables | None:  # fmt: skip
    spec = gpt_spec(h=hidden, layers=layers, heads=8, vocab=vocab, seq=1024)
    pool = Pool((PoolMember(_cluster(a, node_a), 64), PoolMember(_cluster(b, node_b), 64)))
    settings_ = PoolSettings(base=Layout(global_batch=batch, seq_len=1024), stack=default_stack(Framework.MEGATRON),
                             recompute=recompute, mem_headroom=headroom)  # fmt: skip
    return stage_tables(spec, pool, settings_, dp, micro, layers)


def _depth_cap(it: IntTables) -> int:
    """The deepest pipeline whose brute force stays small (an upper bound on the sequences)."""
    total_seq = rows = 0
    depth = 0
    for p in range(it.min_stages, it.max_stages + 1):
        total_seq += it.options**p
        rows += it.options**p * math.comb(it.layers - 1, p - 1)
        if total_seq > SEQUENCES or rows > ROWS:
            break
        depth = p
    return depth


@st.composite
def scenarios(draw: st.DrawFn) -> tuple[IntTables, str]:
    """Half general (any two presets, node sizes, DP, micro-batch, counts up to 64), half tight
    (one-GPU nodes, a few GPUs of each type, large layers): memory forces several stages, and
    often both types."""
    a, b = draw(st.sampled_from([(x, y) for x in PRESETS for y in PRESETS if x != y]))
    tight = draw(st.booleans())
    layers = draw(st.integers(4, 16) if tight else st.integers(1, 16))
    batch = draw(st.sampled_from([2, 4, 8]))
    dp = 1 if tight else draw(st.sampled_from([d for d in (1, 2, 4) if batch % d == 0]))
    micro = draw(st.sampled_from([m for m in (1, 2) if batch % (dp * m) == 0]))
    recompute = draw(st.sampled_from([(Recompute.NONE,), (Recompute.FULL,), (Recompute.NONE, Recompute.FULL)]))
    hidden = draw(st.sampled_from([4096, 8192, 12288] if tight else [1024, 2048, 4096, 8192, 12288]))
    tables = _tables(a, b, 1 if tight else draw(st.sampled_from([1, 2])), draw(st.sampled_from([1, 2, 4])), hidden,
                     layers, draw(st.sampled_from([1000, 50000])), batch, dp, micro, recompute,
                     draw(st.sampled_from([0.0, 0.3] if tight else [0.0, 0.3, 0.6])))  # fmt: skip
    if tables is None:
        return draw(scenarios())
    if tight:
        n_a, n_b = draw(st.integers(1, 4)), draw(st.integers(1, 8))
    else:
        n_a = draw(st.integers(0, 64))
        n_b = draw(st.integers(1 if n_a == 0 else 0, 64 - n_a))
    objective = draw(st.sampled_from(["time", "time", "time", "cost"]))
    it = IntTables.of(tables, price=(2.0, 1.0) if objective == "cost" else None)
    it = dataclasses.replace(it, counts=(n_a, n_b), min_stages=draw(st.sampled_from([1, 1, 2])))
    cap = _depth_cap(it)
    if cap < it.min_stages:
        it = dataclasses.replace(it, min_stages=1)
        cap = max(_depth_cap(it), 1)
    depth = cap if tight else draw(st.integers(max(1, cap // 2), cap))
    return dataclasses.replace(it, max_stages=depth), objective


@pytest.mark.slow
@settings(max_examples=240, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios())
def test_solver_equals_brute_force(case: tuple[IntTables, str]) -> None:
    """CP-SAT's optimum equals exhaustive enumeration of every plan in every order (or both find
    none); the solver's plan prices to its objective; the slot bound never exceeds the optimum's."""
    it, objective = case
    truth = brute_force(it, objective)  # type: ignore[arg-type]
    found = solve(it, objective, workers=1)  # type: ignore[arg-type]
    event(f"objective {objective}")
    if truth is None:
        event("no plan fits")
        assert found.status == "INFEASIBLE"
        return
    types = {it.member[o] for o in truth.options}
    event(f"optimum: {truth.depth} stage(s), {'mixed' if len(types) > 1 else 'one type'}, "
          f"{len(set(truth.options))} kind(s)")  # fmt: skip
    assert found.status == "OPTIMAL" and found.plan is not None
    assert found.plan.objective == truth.objective
    assert plan_objective(it, found.plan, objective) == truth.objective  # type: ignore[arg-type]
    bound = slot_lower_bound(it)
    assert bound is not None and bound <= _slowest(it, truth)


def _slowest(it: IntTables, plan: StagePlan) -> int:
    """The slowest slot of a plan, from the reference pricing (step = (m-1) M + W + T)."""
    charge = boundary_charge(it, plan.options)
    slots = []
    for role, o, n in zip(roles(plan.depth), plan.options, plan.layers, strict=True):
        head = int(it.head[o]) if role in (LAST, SINGLE) else 0
        slots.append(int(it.layer[o]) * n + head + charge[it.group[o]])
    return max(slots)


@st.composite
def pools(draw: st.DrawFn) -> PoolQuestion:
    a, b = draw(st.sampled_from([(x, y) for x in PRESETS for y in PRESETS if x != y]))
    layers = draw(st.integers(1, 6))
    spec = gpt_spec(h=draw(st.sampled_from([512, 2048, 8192])), layers=layers, heads=8, vocab=32000, seq=1024)
    n_a = draw(st.integers(1, 6))
    pool = Pool((PoolMember(_cluster(a, draw(st.sampled_from([1, 2]))), n_a),
                 PoolMember(_cluster(b, draw(st.sampled_from([1, 2]))), draw(st.integers(1, 6)))))  # fmt: skip
    knobs: dict[str, object] = {"global_batch": draw(st.sampled_from([2, 4])), "seq_len": 1024,
                                "recompute": draw(st.sampled_from(["none", "full"]))}  # fmt: skip
    question = pool_question(spec, pool, knobs, mem_headroom=draw(st.sampled_from([0.0, 0.7, 0.9])),
                             bounds={"max_pp": draw(st.integers(1, 3))})  # fmt: skip
    return question


@pytest.mark.slow
@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pools(), st.booleans())
def test_search_equals_brute_force(question: PoolQuestion, ladder: bool) -> None:
    """The whole pool search -- single-type optima first, (DP, micro-batch) pairs pruned by their
    lower bounds, slot caps from the cutoff (and, for half the examples, the ladder of caps that
    large models climb) -- finds the brute-force optimum over every pair."""
    with mock.patch.object(pools_module, "LADDER_FROM", 0 if ladder else pools_module.LADDER_FROM):
        answer = solve_pool(question)
    unit = answer.hybrid.unit_s
    truth = None
    total = sum(m.count for m in question.pool.members)
    for d in question.dp:
        depth = min(question.model.num_layers, total // d, question.max_stages or question.model.num_layers)
        for b in question.micro_batch:
            tables = stage_tables(question.model, question.pool, question.settings, d, b, max(depth, 1))
            if tables is None or depth < 1:
                continue
            it = IntTables.of(tables, unit_s=unit, max_stages=depth)
            plan = brute_force(it)
            if plan is not None and (truth is None or plan.objective < truth):
                truth = plan.objective
    if truth is None:
        assert answer.best is None
    else:
        assert answer.best is not None and answer.best.objective == truth
        for single in answer.singles:  # a single-type plan is in the pool's space
            if single is not None and single.best:
                assert truth <= single.best[0].objective


# --- the stage tables price a uniform plan as the uniform model does ----------------------------------------


@pytest.mark.parametrize(
    ("tp", "pp", "dp", "micro", "recompute"),
    [(1, 1, 1, 1, Recompute.NONE), (2, 2, 2, 1, Recompute.NONE), (8, 4, 4, 2, Recompute.FULL),
     (4, 8, 2, 1, Recompute.NONE), (2, 4, 1, 4, Recompute.FULL)],
)  # fmt: skip
def test_uniform_plan_matches_evaluate(tp: int, pp: int, dp: int, micro: int, recompute: Recompute) -> None:
    """A homogeneous, even pipeline priced by the stage model: the same slots, tail and memory as
    `evaluate`; the step differs exactly by evaluate's (p - 1) x slowest slot against the stage
    model's sum of the other stages' slots (equal when the stages are uniform)."""
    spec = gpt_spec(h=4096, layers=16, heads=32, vocab=50000, seq=4096)
    cluster = load_cluster("a100-80g")
    pool = Pool((PoolMember(cluster, tp * pp * dp),))
    settings_ = PoolSettings(base=Layout(global_batch=64, seq_len=4096), stack=default_stack(Framework.MEGATRON),
                             recompute=(recompute,))  # fmt: skip
    tables = stage_tables(spec, pool, settings_, dp, micro, pp)
    assert tables is not None
    option = next(i for i, o in enumerate(tables.options) if o.tp == tp)
    plan = StagePlan((option,) * pp, (16 // pp,) * pp, 0)
    figures = plan_figures(tables, plan)
    lay = Layout(tp=tp, pp=pp, dp=dp, micro_batch=micro, global_batch=64, seq_len=4096, recompute=recompute, zero=1,
                 sequence_parallel=tp > 1)  # fmt: skip
    ev = evaluate(spec, cluster, Layouts.of([lay]), default_stack(Framework.MEGATRON))
    slowest = float(ev.times["bubble"][0]) / (pp - 1) if pp > 1 else figures.slowest_s
    assert figures.slowest_s == pytest.approx(slowest, rel=1e-9)
    expected = float(ev.step_time_s[0]) - (pp * figures.slowest_s - figures.fill_s)
    assert figures.step_s == pytest.approx(expected, rel=1e-9)
    assert sum(figures.times.values()) == pytest.approx(figures.step_s, rel=1e-12)
    assert sum(figures.most_loaded.memory.values()) == pytest.approx(float(ev.memory.total[0]), rel=1e-9)
    assert figures.model_flops / (figures.step_s * figures.peak_sum) == pytest.approx(
        float(ev.model_flops[0]) / (figures.step_s * tp * pp * dp * float(ev.peak_flops[0])), rel=1e-9
    )


# --- the pool's answer --------------------------------------------------------------------------------


SMALL = gpt_spec(h=4096, layers=8, heads=32, vocab=32000, seq=2048)


@pytest.fixture(scope="module")
def small_pool_result() -> HardwareResult:
    result: HardwareResult = optimize_pool(SMALL, "a100-80g:8+rtx4090:16", top=2, global_batch=4, seq_len=2048)
    return result


def test_pool_result_contract(small_pool_result: HardwareResult) -> None:
    r = small_pool_result
    data = json.loads(r.model_dump_json())
    assert data["hardware"] == "a100-80g:8+rtx4090:16"
    assert data["solver"]["status"] == "OPTIMAL" and data["solver"]["method"].startswith("cp-sat")
    best = data["layouts"][0]
    assert best["feasible"] and best["stages"]
    assert {"hardware", "gpus_per_replica", "tp", "layers"} <= set(best["stages"][0])
    assert sum(s["layers"] for s in best["stages"]) == SMALL.num_layers
    assert sum(best["time_s"][t] for t in TIME_TERMS) == pytest.approx(best["step_time_s"], rel=1e-9)
    assert best["memory_bytes"]["total"] <= best["memory_bytes"]["capacity"]
    assert 0 < best["mfu"] <= 1
    used = {m["hardware"]: m["used"] for m in data["pool"]["members"]}
    assert best["gpus"] == sum(used.values()) and used["a100-80g"] <= 8 and used["rtx4090"] <= 16
    assert [h["hardware"] for h in data["homogeneous"]] == ["a100-80g", "rtx4090"]
    for h in data["homogeneous"]:
        # the single-type plans are part of the pool's space: never faster than the pool's best
        assert best["step_time_s"] <= h["layouts"][0]["step_time_s"] * (1 + 1e-9)
        assert h["enumeration"] is None or h["enumeration"]["hardware"] == h["hardware"]
    assert data["pool"]["verdict"]
    text = "\n".join(pool_text(small_pool_result))
    assert "stages    front to back" in text and "alone     a100-80g" in text and "mixing" in text
    plan = json.loads(data["pool"]["plan_json"])
    assert [s["layers"] for s in plan["stages"]] == [s["layers"] for s in best["stages"]]
    assert "stock" in plan["stock_frameworks"] or "framework" in plan["stock_frameworks"]


def test_pool_plan_json_and_runnable() -> None:
    spec = gpt_spec(h=2048, layers=8, heads=16, vocab=32000, seq=2048)
    pool = parse_pool("a100-80g:8+rtx4090:16")
    answer = solve_pool(pool_question(spec, pool, {"global_batch": 8, "seq_len": 2048}))
    assert answer.best is not None
    figures = plan_figures(answer.best.tables, answer.best.plan)
    doc = json.loads(pool_plan_json(figures))
    assert doc["stages"][0]["holds"][0] == "embedding" and "lm_head" in doc["stages"][-1]["holds"]
    assert sum(s["gpus"] for s in doc["stages"]) == sum(doc["gpus"].values())
    first = [s["first_layer"] for s in doc["stages"]]
    assert first == sorted(first) and first[0] == 0
    evaluated = evaluated_plan(figures)
    assert evaluated.gpus == figures.gpus


def test_cost_objective_is_no_dearer() -> None:
    spec = gpt_spec(h=2048, layers=4, heads=16, vocab=32000, seq=2048)
    pool = parse_pool("a100-80g:2+rtx4090:4")
    question = pool_question(spec, pool, {"global_batch": 2, "seq_len": 2048})
    by_time = solve_pool(question, "time")
    by_cost = solve_pool(question, "cost")
    assert by_time.best is not None and by_cost.best is not None
    from paraplan.pools import _value

    cheap = plan_figures(by_cost.best.tables, by_cost.best.plan)
    fast = plan_figures(by_time.best.tables, by_time.best.plan)
    assert _value(cheap, "cost") <= _value(fast, "cost") * (1 + 1e-4)
    assert fast.step_s <= cheap.step_s * (1 + 1e-9)


def test_compare_accepts_a_pool() -> None:
    from paraplan.decision import verdict

    spec = gpt_spec(h=2048, layers=8, heads=16, vocab=32000, seq=2048)
    entry, outcome = compare_pool(spec, parse_pool("a100-80g:8+rtx4090:16"), 1e9,
                                  knobs={"global_batch": 8, "seq_len": 2048})  # fmt: skip
    assert entry.best is not None and entry.train_time_s is not None and entry.ideal_time_s is not None
    assert entry.train_time_s >= entry.ideal_time_s
    assert entry.cost_usd is not None and entry.energy_kwh is not None and entry.energy_kwh > 0
    assert entry.failures_per_hour is not None and entry.failures_per_hour > 0
    lines = verdict([outcome])
    assert lines and "a100-80g:8+rtx4090:16" in lines[0]


@pytest.mark.slow
def test_70b_on_a100_and_rtx4090_says_whether_mixing_pays() -> None:
    r = optimize_pool("llama2-70b", "a100-80g:64+rtx4090:512")
    assert r.pool is not None and r.layouts
    best = r.layouts[0].step_time_s
    singles = [h.layouts[0].step_time_s for h in r.homogeneous or [] if h.layouts]
    assert singles and best <= min(singles) * (1 + 1e-9)
    words = r.pool.verdict
    assert ("Mixing pays" in words) or ("does not pay" in words)
    assert f"{best:.2f} s" in words

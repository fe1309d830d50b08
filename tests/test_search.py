"""The CP-SAT search (optimizer.search) against an independent exhaustive enumeration.

The reference: evaluate every layout of `candidate_space` for each allowed GPU count with numpy
(`cost_models.evaluate.evaluate` at the scenario's memory headroom), keep those with no violated
check that also meet every user constraint, order them as `optimizer.rank.ranking_keys` defines
(the objective, for cost then the step time, then the tie-break keys of `order_keys`), take the
first k. The search must return exactly those layouts, in that order, with status OPTIMAL iff
there is at least one.

The second half drives `optimize` through the CLI against the contract (../shared/contract.md).
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context

from paraplan.cost_models.evaluate import evaluate
from paraplan.cost_models.layout import Layout
from paraplan.cost_models.models import ModelSpec, load_model, model_preset_names
from paraplan.cost_models.stack import DEFAULT_STACK
from paraplan.cost_models.tco import usd_per_gpu_hour
from paraplan.hardware_specs.loader import load_cluster, preset_names
from paraplan.hardware_specs.schema import Cluster
from paraplan.cli import main
from paraplan.rank import order_keys, ranking_keys
from paraplan.scenario import Scenario
from paraplan.search import Constraints, SearchResult, gpu_count_domain, search
from paraplan.space import Knobs, candidate_space

REPO = Path(__file__).resolve().parent.parent
MS_PER_DAY = 86_400 * 1000
TOKENS = 2e12

_MODELS: dict[str, ModelSpec] = {}
_CLUSTERS: dict[str, Cluster] = {}


def model(name: str) -> ModelSpec:
    if name not in _MODELS:
        _MODELS[name] = load_model(name)
    return _MODELS[name]


def cluster(name: str) -> Cluster:
    if name not in _CLUSTERS:
        _CLUSTERS[name] = load_cluster(name)
    return _CLUSTERS[name]


# ---------------------------------------------------------------------------- the reference


@dataclass(frozen=True)
class Ranked:
    layout: Layout
    step_time_s: float
    objective: float


def meets_user_constraints(lay: Layout, sc: Scenario, cons: Constraints, step_time_s: float) -> bool:
    per_node = sc.cluster.gpus_per_node
    if cons.max_tp is not None and lay.tp > cons.max_tp:
        return False
    if cons.min_dp is not None and lay.dp < cons.min_dp:
        return False
    if cons.max_pp is not None and lay.pp > cons.max_pp:
        return False
    if cons.tp_within_node and (lay.tp > per_node or per_node % lay.tp != 0):
        return False
    if cons.deadline_days is not None and cons.tokens:
        steps = cons.tokens / (sc.knobs.global_batch * sc.knobs.seq_len)
        if math.ceil(step_time_s * steps * 1000) > math.floor(cons.deadline_days * MS_PER_DAY):
            return False
    return True


def user_mask(ev: Any, sc: Scenario, cons: Constraints) -> np.ndarray:
    """Vectorized `meets_user_constraints` over an evaluation."""
    lay = ev.layouts
    keep = np.ones(len(lay), dtype=bool)
    per_node = sc.cluster.gpus_per_node
    if cons.max_tp is not None:
        keep &= lay.tp <= cons.max_tp
    if cons.min_dp is not None:
        keep &= lay.dp >= cons.min_dp
    if cons.max_pp is not None:
        keep &= lay.pp <= cons.max_pp
    if cons.tp_within_node:
        keep &= (lay.tp <= per_node) & (per_node % lay.tp == 0)
    if cons.deadline_days is not None and cons.tokens:
        steps = cons.tokens / (sc.knobs.global_batch * sc.knobs.seq_len)
        train_ms = np.ceil(ev.step_time_s * steps * 1000)
        keep &= train_ms <= math.floor(cons.deadline_days * MS_PER_DAY)
    return keep


@dataclass(frozen=True)
class Enumeration:
    """Every feasible layout that meets the constraints, best first (materialized on demand)."""

    rows: list[tuple[Any, int]]  # (evaluation, index) in rank order
    objective: np.ndarray  # in rank order
    enumerated: int  # candidates evaluated

    def __len__(self) -> int:
        return len(self.rows)

    def top(self, k: int) -> list[Ranked]:
        out = []
        for (ev, i), obj in zip(self.rows[:k], self.objective[:k], strict=False):
            out.append(Ranked(ev.layouts.at(i), float(ev.step_time_s[i]), float(obj)))
        return out

    def best_step_by_gpus(self) -> dict[int, float]:
        best: dict[int, float] = {}
        for ev, i in self.rows:
            gpus = int(ev.layouts.tp[i] * ev.layouts.pp[i] * ev.layouts.dp[i] * ev.layouts.cp[i])
            best[gpus] = min(best.get(gpus, math.inf), float(ev.step_time_s[i]))
        return best


def enumerate_all(sc: Scenario, gpu_counts: list[int], cons: Constraints) -> Enumeration:
    columns: list[list[np.ndarray]] = []
    rows: list[tuple[Any, int]] = []
    enumerated = 0
    for gpus in gpu_counts:
        space = candidate_space(sc.model, sc.cluster, gpus, sc.knobs, sc.stack.flash_attention)
        enumerated += len(space)
        if len(space) == 0:
            continue
        ev = evaluate(sc.model, sc.cluster, space, sc.stack, sc.mem_headroom)
        keep = ev.feasible & user_mask(ev, sc, cons)
        idx = np.nonzero(keep)[0]
        if len(idx) == 0:
            continue
        step = ev.step_time_s[idx]
        obj = step if cons.objective == "time" else step * gpus * usd_per_gpu_hour(sc.cluster)
        columns.append([obj, step, *[k[idx] for k in order_keys(ev)[1:]]])
        rows += [(ev, int(i)) for i in idx]
    if not rows:
        return Enumeration([], np.zeros(0), enumerated)
    flat = [np.concatenate([c[j] for c in columns]) for j in range(len(columns[0]))]
    keys = ranking_keys(flat[0], flat[1], flat[2:], cons.objective == "cost")
    order = np.lexsort(keys[::-1])
    return Enumeration([rows[int(o)] for o in order], flat[0][order], enumerated)


def result_layouts(result: SearchResult) -> list[Layout]:
    return [c.evaluation.layouts.at(c.index) for c in result.choices]


def check_against_enumeration(sc: Scenario, counts: list[int], cons: Constraints, k: int) -> SearchResult:
    result = search(sc, counts, cons, k)
    ranked = enumerate_all(sc, counts, cons)
    assert result.candidates == ranked.enumerated
    if currently_in_test_context():
        event(f"{result.status}, {'all' if len(ranked) >= k else 'fewer than'} k")
    if len(ranked):
        assert result.status == "OPTIMAL", (result.status, result.reason, len(ranked))
    else:
        assert result.status == "INFEASIBLE", (result.status, result_layouts(result))
        assert result.choices == []
        assert result.reason, "an INFEASIBLE result must say why"
        return result
    got = result_layouts(result)
    want = ranked.top(k)
    assert got == [r.layout for r in want], _diff(got, want, result)
    for choice in result.choices:
        lay = choice.evaluation.layouts.at(choice.index)
        assert choice.feasible, choice.evaluation.violations(choice.index)
        assert lay.gpus in counts
        assert meets_user_constraints(lay, sc, cons, choice.step_time_s), lay
    return result


def _diff(got: list[Layout], want: list[Ranked], result: SearchResult) -> str:
    lines = ["search != enumeration"]
    for i in range(max(len(got), len(want))):
        g = got[i] if i < len(got) else None
        w = want[i] if i < len(want) else None
        gs = f"{result.choices[i].step_time_s:.9g}" if g is not None else "-"
        ws = f"{w.step_time_s:.9g}" if w is not None else "-"
        mark = "  " if w is not None and g == w.layout else "!!"
        lines.append(f"{mark} #{i}: search {g} ({gs} s) | enum {w.layout if w else None} ({ws} s)")
    return "\n".join(lines)


def scenario(
    model_name: str, hardware: str, gpus: int, knobs: Knobs | None = None, mem_headroom: float = 0.0
) -> Scenario:
    return Scenario(model(model_name), cluster(hardware), gpus, knobs or Knobs(), DEFAULT_STACK, mem_headroom)


# ---------------------------------------------------------------------------- the reference, fixed cases


@pytest.mark.parametrize(
    ("model_name", "hardware", "gpus", "cons", "k"),
    [
        ("llama2-70b", "a100-80g", 256, Constraints(), 10),
        ("llama2-7b", "h100-sxm", 64, Constraints(max_tp=2, min_dp=8), 7),
        ("mixtral-8x7b", "h100-sxm", 128, Constraints(max_pp=2), 5),
        ("llama3-70b", "rtx4090", 512, Constraints(tp_within_node=True), 10),
        ("gpt3-175b", "a100-80g", 1024, Constraints(objective="cost", min_dp=32), 3),
        ("llama2-13b", "l40s", 32, Constraints(max_tp=1), 10),
    ],
)
def test_search_equals_enumeration(model_name: str, hardware: str, gpus: int, cons: Constraints, k: int) -> None:
    check_against_enumeration(scenario(model_name, hardware, gpus), [gpus], cons, k)


def test_top_k_larger_than_feasible_set_returns_all() -> None:
    """A plan fixed down to a handful of candidates: k beyond them returns each once, in order."""
    knobs = Knobs(tp=8, pp=4, micro_batch=1, recompute="full", recompute_layers=0, zero=1, sequence_parallel=True)
    sc = scenario("llama2-70b", "a100-80g", 256, knobs)
    result = check_against_enumeration(sc, [256], Constraints(), 50)
    assert 0 < len(result.choices) < 50
    assert len(set(result_layouts(result))) == len(result.choices)


def test_tight_constraint_grows_the_prefix() -> None:
    """min-dp pushes every answer deep into the sorted table; the prefix must grow to find them."""
    sc = scenario("llama2-70b", "a100-80g", 512)
    result = check_against_enumeration(sc, [512], Constraints(min_dp=128, max_pp=4), 10)
    assert result.status == "OPTIMAL"


def test_mem_headroom_excludes_layouts_over_the_usable_memory() -> None:
    sc0 = scenario("llama2-70b", "a100-80g", 64)
    sc2 = scenario("llama2-70b", "a100-80g", 64, mem_headroom=0.2)
    r0 = check_against_enumeration(sc0, [64], Constraints(), 10)
    r2 = check_against_enumeration(sc2, [64], Constraints(), 10)
    usable = cluster("a100-80g").gpu.memory_bytes * 0.8
    for c in r2.choices:
        assert c.evaluation.memory.total[c.index] <= usable
    # a 70B model on 64 GPUs is memory-bound: headroom must change the answer.
    assert any(c.evaluation.memory.total[c.index] > usable for c in r0.choices)


def test_headroom_that_leaves_nothing_is_named_in_the_reason() -> None:
    """llama2-70b on 16 x a100-80g fits only with (nearly) all of the memory."""
    assert check_against_enumeration(scenario("llama2-70b", "a100-80g", 16), [16], Constraints(), 1).choices
    result = check_against_enumeration(scenario("llama2-70b", "a100-80g", 16, mem_headroom=0.2), [16], Constraints(), 1)
    assert result.status == "INFEASIBLE"
    assert "--mem-headroom" in (result.reason or "")


# ---------------------------------------------------------------------------- random scenarios

SMALL_GPUS = [1, 2, 4, 8, 16, 32, 64, 128]
ALL_GPUS = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]


@st.composite
def search_cases(draw: st.DrawFn) -> tuple[Scenario, Constraints, int]:
    model_name = draw(st.sampled_from(model_preset_names()))
    hardware = draw(st.sampled_from(preset_names()))
    # Big models on a few GPUs never fit: start at the count whose memory holds the weights, the
    # gradients and the Adam states (16 bytes per parameter) once, fully sharded. Fixed knobs and
    # constraints still make many cases infeasible.
    fit = model(model_name).total_params * 16 / cluster(hardware).gpu.memory_bytes
    floor = next(g for g in ALL_GPUS if g >= fit or g == ALL_GPUS[-1])
    small = [g for g in ALL_GPUS if floor <= g <= max(128, 8 * floor)]
    gpus = draw(st.one_of(st.sampled_from(small), st.sampled_from([g for g in ALL_GPUS if g >= floor])))
    seq_len = draw(st.sampled_from([4096, 4096, 2048, 8192]))

    def maybe(values: list[Any]) -> Any:
        """Mostly free: each knob or constraint is set one time in four."""
        return draw(st.one_of(st.none(), st.none(), st.none(), st.sampled_from(values)))

    knobs = Knobs(
        tp=maybe([1, 2, 4, 8]),
        pp=maybe([1, 2, 4, 8]),
        cp=maybe([1, 2, 4]),
        micro_batch=maybe([1, 2, 4]),
        virtual_stages=maybe([1, 2, 4]),
        recompute=maybe(["none", "selective", "full"]),
        zero=maybe([0, 1, 2, 3]),
        sequence_parallel=maybe([True, False]),
        global_batch=4_194_304 // seq_len,
        seq_len=seq_len,
    )
    deadline = maybe([3.0, 30.0, 300.0, 3000.0])
    cons = Constraints(
        max_tp=maybe([1, 2, 4, 8]),
        min_dp=maybe([1, 2, 8, 32]),
        max_pp=maybe([1, 2, 4, 16]),
        tp_within_node=draw(st.booleans()),
        deadline_days=deadline,
        tokens=TOKENS if deadline is not None else None,
        objective=draw(st.sampled_from(["time", "cost"])),
    )
    headroom = draw(st.sampled_from([0.0, 0.1, 0.2]))
    k = draw(st.sampled_from(range(1, 11)))
    return scenario(model_name, hardware, gpus, knobs, headroom), cons, k


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(search_cases())
def test_random_scenarios_match_enumeration(case: tuple[Scenario, Constraints, int]) -> None:
    sc, cons, k = case
    check_against_enumeration(sc, [sc.gpus], cons, k)


# ---------------------------------------------------------------------------- GPU ranges and deadlines


def test_gpu_count_domain_values() -> None:
    assert gpu_count_domain(256, 2048, 8) == [256, 384, 512, 768, 1024, 1536, 2048]
    assert gpu_count_domain(1, 8, 8) == [1, 2, 3, 4, 6, 8]
    assert gpu_count_domain(12, 12, 8) == [12]  # nothing of the form in range: the bound itself


@pytest.fixture(scope="module")
def range_best_steps() -> dict[int, float]:
    """The best step time per GPU count of the 256..2048 range (llama2-70b, a100-80g), by enumeration."""
    counts = gpu_count_domain(256, 2048, 8)
    return enumerate_all(scenario("llama2-70b", "a100-80g", counts[0]), counts, Constraints()).best_step_by_gpus()


@pytest.mark.parametrize("objective", ["time", "cost"])
def test_gpu_range_with_deadline_matches_enumeration(objective: str, range_best_steps: dict[int, float]) -> None:
    counts = gpu_count_domain(256, 2048, 8)
    sc = scenario("llama2-70b", "a100-80g", counts[0])
    assert sorted(range_best_steps) == counts
    # A deadline that only 768 GPUs and more can meet: 768's best training time for the tokens.
    steps = TOKENS / (sc.knobs.global_batch * sc.knobs.seq_len)
    deadline_days = math.ceil(range_best_steps[768] * steps * 1000) / MS_PER_DAY
    cons = Constraints(deadline_days=deadline_days, tokens=TOKENS, objective=objective)
    result = check_against_enumeration(sc, counts, cons, 5)
    assert result.status == "OPTIMAL"
    picked = [c.evaluation.layouts.at(c.index).gpus for c in result.choices]
    assert all(g >= 768 for g in picked), picked
    if objective == "cost":
        # without the deadline the cheapest run is on fewer GPUs: the deadline binds
        free = search(sc, counts, Constraints(objective="cost"), 1)
        assert free.choices[0].evaluation.layouts.at(free.choices[0].index).gpus < 768


def test_deadline_is_inclusive_to_the_millisecond() -> None:
    """The cheapest layout, whose training takes T ms, is admitted by a deadline of T ms and
    refused by one of T - 1 ms."""
    counts = [256, 512]
    sc = scenario("llama2-7b", "a100-80g", 256)
    cheapest = enumerate_all(sc, counts, Constraints(objective="cost")).top(1)[0]
    steps = TOKENS / (sc.knobs.global_batch * sc.knobs.seq_len)
    train_ms = math.ceil(cheapest.step_time_s * steps * 1000)
    for limit_ms, admitted in ((train_ms, True), (train_ms - 1, False)):
        # a quarter millisecond over the limit, so that floor(days * 86400 * 1000) is exactly the limit
        cons = Constraints(deadline_days=(limit_ms + 0.25) / MS_PER_DAY, tokens=TOKENS, objective="cost")
        assert math.floor(cons.deadline_days * MS_PER_DAY) == limit_ms  # type: ignore[operator]
        result = check_against_enumeration(sc, counts, cons, 3)
        assert (cheapest.layout in result_layouts(result)) is admitted, (limit_ms, train_ms)


def test_deadline_too_short_is_infeasible_naming_the_deadline() -> None:
    sc = scenario("llama2-70b", "a100-80g", 256)
    cons = Constraints(deadline_days=0.01, tokens=TOKENS)
    result = check_against_enumeration(sc, [256], cons, 5)
    assert result.status == "INFEASIBLE"
    assert "--deadline-days" in (result.reason or "")


# ---------------------------------------------------------------------------- infeasible


def test_405b_on_eight_rtx4090_is_infeasible_for_memory() -> None:
    sc = scenario("llama3-405b", "rtx4090", 8)
    result = check_against_enumeration(sc, [8], Constraints(), 5)
    assert result.status == "INFEASIBLE"
    assert result.choices == []
    assert "memory" in (result.reason or "").lower()


# ---------------------------------------------------------------------------- the CLI


@dataclass(frozen=True)
class Run:
    code: int | str | None
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


def invoke(*args: str) -> Run:
    out, err = io.StringIO(), io.StringIO()
    code: int | str | None = None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(args))
        except SystemExit as exc:
            code = exc.code
    return Run(code, out.getvalue(), err.getvalue())


BASE = ["optimize", "--model", "llama2-70b", "--gpus", "256", "--hardware", "a100-80g"]
LAYOUT_KEYS = {
    "tp", "pp", "dp", "cp", "ep", "micro_batch", "global_batch", "seq_len", "virtual_stages",
    "recompute", "zero", "sequence_parallel", "precision",
}  # fmt: skip


def layouts_of(run: Run) -> list[dict[str, Any]]:
    return [lay for r in run.json()["results"] for lay in r["layouts"]]


def check_optimize_shape(obj: dict[str, Any]) -> None:
    assert set(obj) >= {"results"}
    assert obj["results"], obj
    for entry in obj["results"]:
        assert set(entry) >= {"hardware", "gpus", "solver", "layouts"}, set(entry)
        solver = entry["solver"]
        assert set(solver) >= {"status", "wall_s", "candidates"}
        assert solver["status"] in ("OPTIMAL", "INFEASIBLE")
        assert isinstance(solver["wall_s"], float) and solver["wall_s"] >= 0
        assert isinstance(solver["candidates"], int) and solver["candidates"] > 0
        assert (solver["status"] == "OPTIMAL") == bool(entry["layouts"])
        steps = [lay["step_time_s"] for lay in entry["layouts"]]
        assert steps == sorted(steps), "best first"
        for lay in entry["layouts"]:
            assert lay["feasible"] is True and lay["violations"] == []
            assert set(lay["layout"]) >= LAYOUT_KEYS
            assert lay["hardware"] == entry["hardware"]
            assert lay["gpus"] == entry["gpus"]
            d = lay["layout"]
            assert d["tp"] * d["pp"] * d["dp"] * d["cp"] == lay["gpus"]


@pytest.fixture(scope="module")
def base_run() -> Run:
    return invoke(*BASE, "--top", "5", "--json")


def test_optimize_json_contract(base_run: Run) -> None:
    assert base_run.code == 0, base_run.err
    obj = base_run.json()
    check_optimize_shape(obj)
    (entry,) = obj["results"]
    assert entry["hardware"] == "a100-80g" and entry["gpus"] == 256
    assert entry["solver"]["status"] == "OPTIMAL"
    assert len(entry["layouts"]) == 5


def test_optimize_json_equals_enumeration(base_run: Run) -> None:
    ranked = enumerate_all(scenario("llama2-70b", "a100-80g", 256), [256], Constraints())
    entry = base_run.json()["results"][0]
    assert entry["solver"]["candidates"] == ranked.enumerated
    got = [Layout(**lay["layout"]) for lay in entry["layouts"]]
    assert got == [r.layout for r in ranked.top(5)]


def test_optimize_multiple_hardware_with_own_counts() -> None:
    run = invoke("optimize", "--model", "llama2-70b", "--hardware", "a100-80g:256,rtx4090:2048", "--top", "3",
                 "--json")  # fmt: skip
    assert run.code == 0, run.err
    obj = run.json()
    check_optimize_shape(obj)
    assert [(r["hardware"], r["gpus"]) for r in obj["results"]] == [("a100-80g", 256), ("rtx4090", 2048)]
    for r in obj["results"]:
        assert all(lay["gpus"] == r["gpus"] for lay in r["layouts"])


def test_optimize_emit_megatron() -> None:
    run = invoke(*BASE, "--emit", "megatron")
    assert run.code == 0, run.err
    for flag in ("--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--micro-batch-size",
                 "--global-batch-size"):  # fmt: skip
        assert flag in run.out, flag


def test_optimize_emit_deepspeed_is_json() -> None:
    run = invoke(*BASE, "--emit", "deepspeed")
    assert run.code == 0, run.err
    config = json.loads(run.out)
    assert config["zero_optimization"]["stage"] in (0, 1, 2, 3)
    assert config["train_batch_size"] == 1024


def test_optimize_emit_torchtitan() -> None:
    run = invoke(*BASE, "--emit", "torchtitan")
    assert run.code == 0, run.err
    assert "[parallelism]" in run.out
    assert "tensor_parallel_degree" in run.out


def test_max_tp_is_a_constraint() -> None:
    run = invoke(*BASE, "--max-tp", "2", "--top", "10", "--json")
    assert run.code == 0, run.err
    check_optimize_shape(run.json())
    layouts = layouts_of(run)
    assert layouts and all(lay["layout"]["tp"] <= 2 for lay in layouts)


def test_fixed_recompute_holds_in_every_layout() -> None:
    run = invoke(*BASE, "--recompute", "full", "--top", "10", "--json")
    assert run.code == 0, run.err
    layouts = layouts_of(run)
    assert layouts and all(lay["layout"]["recompute"] == "full" for lay in layouts)


def test_min_dp_is_a_constraint() -> None:
    run = invoke(*BASE, "--min-dp", "32", "--top", "10", "--json")
    assert run.code == 0, run.err
    layouts = layouts_of(run)
    assert layouts and all(lay["layout"]["dp"] >= 32 for lay in layouts)


def test_cli_deadline_too_short_is_infeasible() -> None:
    run = invoke(*BASE, "--deadline-days", "0.01", "--tokens", "2e12", "--json")
    assert run.code == 1, (run.code, run.err)
    (entry,) = run.json()["results"]
    assert entry["solver"]["status"] == "INFEASIBLE"
    assert entry["layouts"] == []
    assert "--deadline-days" in entry["reason"]


def test_cli_one_hardware_without_a_layout_exits_1() -> None:
    run = invoke("optimize", "--model", "llama3-405b", "--hardware", "a100-80g:256,rtx4090:8", "--top", "2",
                 "--json")  # fmt: skip
    assert run.code == 1, (run.code, run.err)
    obj = run.json()
    check_optimize_shape(obj)
    a100, rtx = obj["results"]
    assert (a100["gpus"], a100["solver"]["status"], len(a100["layouts"])) == (256, "OPTIMAL", 2)
    assert (rtx["gpus"], rtx["solver"]["status"], rtx["layouts"]) == (8, "INFEASIBLE", [])
    assert "memory" in rtx["reason"].lower()


def test_cli_gpu_range_picks_a_count_in_the_domain() -> None:
    run = invoke(
        "optimize", "--model", "llama2-70b", "--gpus", "256..2048", "--hardware", "a100-80g",
        "--deadline-days", "30", "--tokens", "2e12", "--objective", "cost", "--top", "3", "--json",
    )  # fmt: skip
    assert run.code == 0, run.err
    check_optimize_shape(run.json())
    for lay in layouts_of(run):
        assert lay["gpus"] in gpu_count_domain(256, 2048, 8)


def test_cli_405b_on_eight_rtx4090_exits_1_with_reason() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "paraplan", "optimize", "--model", "llama3-405b", "--gpus", "8",
         "--hardware", "rtx4090", "--json"],
        capture_output=True, text=True, cwd=REPO, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    obj = json.loads(proc.stdout)
    (entry,) = obj["results"]
    assert entry["solver"]["status"] == "INFEASIBLE"
    assert entry["layouts"] == []
    assert "memory" in entry["reason"].lower()

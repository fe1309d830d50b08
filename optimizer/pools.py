"""Mixed GPU pools: a pipeline whose stages run on different GPU types, searched by CP-SAT.

A pool (`a100-80g:64+rtx4090:512`, or a pool TOML: `parse_pool`) offers several GPU types at
once, with a count of each. A pool plan is one pipeline, replicated DP times; each stage runs on
one GPU type with its own TP degree (within a node of that type), recompute mode and number of
layers. The search chooses the stage-to-type assignment, the layers, TP and recompute of every
stage and the number of stages (CP-SAT, `paraplan.stage_model`), DP and the micro-batch (outside
the solver: one CP-SAT model per pair), and so how many GPUs of each type to use -- the rest stay
idle when that is faster or cheaper. It respects every type's memory and prices every stage
boundary over the link it crosses (`paraplan.stage_costs`). The objective is the step time, or
the dollars per step (each type at its own price per GPU-hour, `tco.usd_per_gpu_hour`).

What a pool search holds fixed (`FIXED`, shown in every answer):
  * ZeRO-1 (Megatron's distributed optimizer); sequence parallelism whenever TP > 1;
  * no context, expert or virtual-pipeline parallelism, no offload, no block recompute;
  * each stage's two boundary transfers priced over the slowest link it may border in the plan
    (exact for uniform pipelines, conservative otherwise; see `stage_model`);
  * global batch, sequence length, precision and framework from the settings; a given TP, DP,
    micro-batch or recompute is fixed, min/max bounds on TP, PP and DP bound the search.

Search order and proof. Every (DP, micro-batch) pair gets a lower bound: the least slowest slot
at which the layers fit at all (`stage_model.slot_lower_bound`) times m - 1, plus the least sum
of slots. The single-type optima are solved first -- each type alone is part of the pool's space,
so the best of them is a valid first cutoff for the pool -- then the pairs in the order of their
bounds; a pair whose bound reaches the cutoff is skipped (the bound is the proof). A pair is
solved with its slowest slot capped: without a cutoff, up a ladder of caps (1.01x, 1.02x, ... its
bound; small caps leave small models, and the first plan found makes the cutoff); with one,
straight at the cap every plan below the cutoff must meet ((cutoff - the least sum of slots) /
(m - 1)); each model also starts its slowest slot above the caps already solved. The answer is
OPTIMAL when every pair was solved to optimality or skipped by its bound.

The answer (`pool_result`): the best plans with their `stages`, each GPU type alone in
`homogeneous` (the stage model's optimum, with the uniform enumeration's `paraplan.optimize` next
to it), and `pool`: GPUs used per type, whether mixing pays and by how much (against both), what
a stock framework can run (`runnable_words`) and the per-stage JSON (`pool_plan_json`).
`compare_pool` makes a pool one alternative of `compare`.
"""

from __future__ import annotations

import math
import time
import tomllib
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, cast

import numpy as np

from paraplan.api import degree_bounds, hardware_entries, names_a_file
from paraplan.cost_models.errors import InputError
from paraplan.cost_models.layout import MAX_GPUS, Framework, KnobArgs, Layout, Precision, Recompute
from paraplan.cost_models.models import ModelSpec
from paraplan.cost_models.reliability import ReliabilityAccount
from paraplan.cost_models.tco import CostBreakdown, Pricing
from paraplan.cost_models.units import finite_number
from paraplan.decision import NO_RUN, Outcome, RunTotals
from paraplan.hardware_specs.files import is_regular_file
from paraplan.hardware_specs.schema import Cluster
from paraplan.results import (
    BottleneckOut,
    CompareEntry,
    EvaluatedLayout,
    Explanation,
    HardwareResult,
    MemoryOut,
    ParamsOut,
    PoolMemberOut,
    PoolOut,
    SolverOut,
    StageOut,
    TimeOut,
)
from paraplan.stage_costs import (
    Pool,
    PoolLink,
    PoolMember,
    PoolSettings,
    StageTables,
    micro_batch_domain,
    stage_tables,
)

if TYPE_CHECKING:
    # The CP-SAT model (and OR-Tools with it) loads only when a pool is solved: parsing
    # --hardware must stay cheap for every optimize and compare.
    from paraplan.decision import Figures
    from paraplan.stage_model import IntTables, Objective, Solved, StagePlan


MAX_POOL_TYPES = 8
SOLVE_TIME_LIMIT_S = 120.0  # per (DP, micro-batch) model; a proof that takes longer is reported
SEARCH_TIME_LIMIT_S = 120.0  # per search (one GPU type alone, or the pool); the rest is reported unproven
# Each pair is solved with a cap on its slowest slot first, these multiples of its lower bound, up
# to the cap any plan that beats the best so far must meet (then the pair is proven), and with
# no cap last: small caps leave small models, and the first plan found makes the cutoff.
# One CP-SAT worker: the same answer and time on every run, and measured faster here than a
# portfolio of workers on these small models.
SOLVER_WORKERS = 1
LADDER_FROM = 64  # stage positions x options
CAP_FACTORS = (1.01, 1.02, 1.035, 1.05, 1.075, 1.1, 1.15, 1.2, 1.3, 1.5, 2.0)


# --- the pool spec ---------------------------------------------------------------------------------


def looks_like_pool(text: str) -> bool:
    """A `+`-joined list of NAME:COUNT, or a TOML file with [[member]] tables."""
    if "+" in text and not names_a_file(text):
        return True
    path = Path(text.strip())
    if text.strip().lower().endswith(".toml") and is_regular_file(path):
        try:
            from paraplan.hardware_specs.files import read_text_file

            return "member" in tomllib.loads(read_text_file(path, "pool file"))
        except (InputError, tomllib.TOMLDecodeError, ValueError):
            return False
    return False


def parse_pool(text: str) -> Pool:
    """`a100-80g:64+rtx4090:512` (each type's count required) or a pool TOML file:

        name = "lab"                       # optional
        [[member]]
        hardware = "a100-80g"              # a preset name or a hardware TOML path
        count = 64
        [[member]]
        hardware = "rtx4090"
        count = 512
        [link]                             # optional: between different types
        bw_bytes_per_s = 12.5e9            # per GPU, per direction
        latency_s = 10e-6
        efficiency = 0.8                   # optional, default 1
        sources = ["..."]                  # optional

    Without [link], stages on different types talk over the network through the slower NIC."""
    stripped = text.strip()
    if not stripped:
        raise InputError("the pool is empty: give NAME:COUNT+NAME:COUNT or a pool TOML file")
    if "+" not in stripped and stripped.lower().endswith(".toml"):
        return _pool_file(Path(stripped))
    members: list[PoolMember] = []
    for part in stripped.split("+"):
        name, sep, count = part.strip().rpartition(":")
        if not sep or not name.strip():
            raise InputError(
                f"hardware pool entry '{part.strip()}' needs a GPU count: NAME:COUNT (e.g. a100-80g:64); "
                "'+' joins the entries of one pool"
            )
        members.append(PoolMember(_load_cluster(name.strip()), _count(count, part.strip())))
    return _checked(Pool(tuple(members)))


def _load_cluster(name: str) -> Cluster:
    from paraplan.api import load_hardware

    return load_hardware(name)


def _count(text: object, where: str) -> int:
    if isinstance(text, bool) or not isinstance(text, (int, str)):
        raise InputError(f"hardware pool entry '{where}': the GPU count must be a whole number")
    value = text.strip() if isinstance(text, str) else str(text)
    if not value.isdigit() or len(value) > 9:
        raise InputError(f"hardware pool entry '{where}': the GPU count '{value}' must be a whole number (e.g. :64)")
    count = int(value)
    if not 1 <= count <= MAX_GPUS:
        raise InputError(f"hardware pool entry '{where}': the GPU count must be 1..{MAX_GPUS}")
    return count


def _checked(pool: Pool) -> Pool:
    if len(pool.members) < 1:
        raise InputError("a pool needs at least one GPU type")
    if len(pool.members) > MAX_POOL_TYPES:
        raise InputError(f"a pool holds at most {MAX_POOL_TYPES} GPU types, not {len(pool.members)}")
    names = [m.name for m in pool.members]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InputError(f"pool names {', '.join(twice)} twice: give each GPU type once, with its total count")
    return pool


_POOL_KEYS = {"name", "member", "link"}
_MEMBER_KEYS = {"hardware", "count"}
_LINK_KEYS = {"bw_bytes_per_s", "latency_s", "efficiency", "sources"}


def _pool_file(path: Path) -> Pool:
    from paraplan.hardware_specs.files import read_text_file

    label = f"pool file {path}"
    text = read_text_file(path, "pool file")
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{label}: invalid TOML: {' '.join(str(exc).split())}") from None
    except (ValueError, RecursionError) as exc:
        raise InputError(f"{label}: cannot be read: {' '.join(str(exc).split())[:120]}") from None
    unknown = sorted(set(table) - _POOL_KEYS)
    if unknown:
        raise InputError(f"{label}: unknown key {unknown[0]!r}; a pool file has name, [[member]] and [link]")
    entries = table.get("member")
    if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
        raise InputError(f"{label}: needs [[member]] tables, each with hardware and count")
    members = []
    for i, entry in enumerate(entries, start=1):
        extra = sorted(set(entry) - _MEMBER_KEYS)
        if extra:
            raise InputError(f"{label}: member {i} has an unknown key {extra[0]!r} (hardware, count)")
        hardware = entry.get("hardware")
        if not isinstance(hardware, str) or not hardware.strip():
            raise InputError(f'{label}: member {i} needs hardware = "<preset or TOML path>"')
        if "count" not in entry:
            raise InputError(f"{label}: member {i} ({hardware}) needs count = <GPUs>")
        name = hardware.strip()
        if not Path(name).is_absolute() and ("/" in name or name.lower().endswith(".toml")):
            name = str(path.parent / name)  # relative to the pool file
        members.append(PoolMember(_load_cluster(name), _count(entry["count"], f"member {i} ({hardware})")))
    link = _link(table.get("link"), label)
    pool_name = table.get("name", "")
    if not isinstance(pool_name, str) or len(pool_name) > 64:
        raise InputError(f"{label}: name must be a string of at most 64 characters")
    base = _checked(Pool(tuple(members), link))
    return Pool(base.members, link, pool_name.strip() or base.name)


def _link(raw: object, label: str) -> PoolLink | None:
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise InputError(f"{label}: [link] must be a table")
    extra = sorted(set(raw) - _LINK_KEYS)
    if extra:
        raise InputError(f"{label}: [link] has an unknown key {extra[0]!r} ({', '.join(sorted(_LINK_KEYS))})")

    def number(key: str, low: float, high: float, default: float | None = None) -> float:
        value = raw.get(key, default)
        if value is None:
            raise InputError(f"{label}: [link] needs {key}")
        if not finite_number(value):
            raise InputError(f"{label}: [link] {key} must be a number")
        if not low <= float(value) <= high:
            raise InputError(f"{label}: [link] {key} = {value:g} must be in {low:g}..{high:g}")
        return float(value)

    sources = raw.get("sources", [])
    if not isinstance(sources, list) or not all(isinstance(s, str) for s in sources):
        raise InputError(f"{label}: [link] sources must be a list of strings")
    return PoolLink(number("bw_bytes_per_s", 1e8, 1e14), number("latency_s", 0.0, 1.0),
                    number("efficiency", 0.01, 1.0, 1.0), tuple(sources))  # fmt: skip


# --- the settings a pool search holds fixed ---------------------------------------------------------

UNSUPPORTED = {
    "cp": 1, "ep": 1, "virtual_stages": 1, "offload": "none", "first_stage_layers": 0, "last_stage_layers": 0,
    "recompute_layers": 0,
}  # fmt: skip


@dataclass(frozen=True)
class PoolQuestion:
    model: ModelSpec
    pool: Pool
    settings: PoolSettings
    dp: tuple[int, ...]  # the DP degrees allowed
    micro_batch: tuple[int, ...]
    min_stages: int = 1
    max_stages: int | None = None


def pool_question(model: ModelSpec, pool: Pool, knobs: Mapping[str, object] | None = None,
                  stack: Mapping[str, object] | None = None, mem_headroom: float = 0.0,
                  bounds: Mapping[str, int | None] | None = None) -> PoolQuestion:  # fmt: skip
    """The pool search's inputs, checked: knobs a pool plan cannot vary are refused."""
    from paraplan.question import knobs_from, stack_for_model, with_settings

    given = knobs_from(dict(knobs or {}))
    for name, neutral in UNSUPPORTED.items():
        if name in given and str(given[name]) != str(neutral):
            raise InputError(
                f"{name.replace('_', '-')} {given[name]} is not searched for pools (a pool plan has no context, "
                "expert or virtual pipeline parallelism, offload or block recompute)"
            )
    if "zero" in given and int(given["zero"]) != 1:
        raise InputError(f"ZeRO-{given['zero']}: pool plans use ZeRO-1 (the distributed optimizer)")
    settings_knobs = with_settings(given)
    if settings_knobs["framework"] == Framework.TORCHTITAN:
        raise InputError("torchtitan has no ZeRO-1: pool plans use Megatron-LM or DeepSpeed")
    if not 0.0 <= mem_headroom < 1.0:
        raise InputError(f"mem-headroom {mem_headroom} must be in 0..0.9")
    framework = Framework(settings_knobs["framework"])
    settled = stack_for_model(framework, stack, model, Precision(settings_knobs["precision"]))
    if settled.mtp:
        # the per-stage tables (stage_costs) price the LM head on the last stage, not MTP modules
        raise InputError("mtp: pool plans do not price multi-token-prediction modules on the last stage")
    base = Layout(global_batch=settings_knobs["global_batch"], seq_len=settings_knobs["seq_len"],
                  precision=settings_knobs["precision"], framework=settings_knobs["framework"])  # fmt: skip
    low, high = _bounds(bounds)
    if "tp" in given:
        low["tp"] = high["tp"] = int(given["tp"])
    if "pp" in given:
        low["pp"] = high["pp"] = int(given["pp"])
    if "dp" in given:
        low["dp"] = high["dp"] = int(given["dp"])
    recompute = (Recompute(given["recompute"]),) if "recompute" in given else tuple(Recompute)
    settings = PoolSettings(
        base=base, stack=settled, mem_headroom=mem_headroom,
        recompute=recompute, tp_low=low.get("tp", 1), tp_high=high.get("tp", 1 << 30),
        sequence_parallel=given.get("sequence_parallel"),
    )  # fmt: skip
    total = sum(m.count for m in pool.members)
    dps = [d for d in _divisors(base.global_batch) if d <= total and low.get("dp", 1) <= d <= high.get("dp", total)]
    mbs = [given["micro_batch"]] if "micro_batch" in given else micro_batch_domain(base)
    return PoolQuestion(model, pool, settings, tuple(dps), tuple(int(b) for b in mbs), low.get("pp", 1),
                        high.get("pp"))  # fmt: skip


def _bounds(bounds: Mapping[str, int | None] | None) -> tuple[dict[str, int], dict[str, int]]:
    """`api.degree_bounds`, less CP and EP: a pool plan has neither (each is 1)."""
    low, high = degree_bounds(bounds)
    for dim in ("cp", "ep"):
        least = low.pop(dim, 1)
        if least > 1:
            raise InputError(f"min_{dim} {least}: pool plans have no {dim.upper()} (it is 1)")
        high.pop(dim, None)
    return low, high


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


# --- the search ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Candidate:
    """The optimum of one (DP, micro-batch) model."""

    tables: StageTables
    ints: IntTables
    plan: StagePlan

    @property
    def objective(self) -> int:
        return self.plan.objective


@dataclass
class SearchStats:
    pairs: int = 0
    solved: int = 0
    pruned: int = 0
    solves: int = 0
    unproven: int = 0
    wall_s: float = 0.0
    solver_s: float = 0.0
    notes: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class PoolSearch:
    question: PoolQuestion
    objective: Objective
    best: list[Candidate]  # best first, one per (DP, micro-batch)
    stats: SearchStats
    unit_s: float
    prices: tuple[float, ...] | None


def search(question: PoolQuestion, objective: Objective = "time", top: int = 1,
           prices: Sequence[float] | None = None, incumbent: Sequence[Candidate] = (),
           unit_s: float | None = None) -> PoolSearch:  # fmt: skip
    """The `top` best plans, one per (DP, micro-batch), each proven optimal for its pair; the
    first is the pool's optimum. `incumbent`: plans already known to be in this pool's space
    (the single-type optima), used as the first cutoff."""
    from paraplan.stage_model import IntTables, StagePlan, slot_lower_bound, solve

    started = time.perf_counter()
    stats = SearchStats()
    model, pool = question.model, question.pool
    built: list[tuple[int, int, StageTables, int]] = []
    total = sum(m.count for m in pool.members)
    for d in question.dp:
        depth = min(model.num_layers, total // d, question.max_stages or model.num_layers)
        if depth < question.min_stages:
            continue
        for b in question.micro_batch:
            tables = stage_tables(model, pool, question.settings, d, b, depth)
            if tables is not None:
                built.append((d, b, tables, depth))
    from paraplan.stage_model import time_unit

    unit = unit_s if unit_s is not None else min([time_unit(t) for _, _, t, _ in built], default=1e-6)
    pairs: list[tuple[int, int, StageTables, IntTables, int]] = []
    for d, b, tables, depth in built:
        ints = IntTables.of(tables, unit_s=unit, min_stages=question.min_stages, max_stages=depth,
                            price=prices if objective == "cost" else None)  # fmt: skip
        bound = _lower_bound(ints, objective)
        if bound is not None:
            pairs.append((d, b, tables, ints, bound))
    stats.pairs = len(pairs)
    # best bound first; for cost, by the bound without the work term (flat across pairs: it prices
    # perfect utilization), which measured a better order
    key = {(d, b): _lower_bound(ints, objective, work=False) or 0 for d, b, _, ints, _ in pairs}
    pairs.sort(key=lambda item: (key[item[0], item[1]], item[0], item[1]))
    best: list[Candidate] = []
    for known in incumbent:
        best = _keep(best, known, top)

    def cutoff() -> int | None:
        return best[top - 1].objective if len(best) >= top else None

    for d, b, tables, ints, bound in pairs:
        limit = cutoff()
        if limit is not None and bound >= limit:
            stats.pruned += 1
            continue
        left = SEARCH_TIME_LIMIT_S - (time.perf_counter() - started)
        if left <= 0:
            stats.unproven += 1
            stats.notes.append(f"DP {d}, micro-batch {b}: not searched, the search's {SEARCH_TIME_LIMIT_S:g} s ran out")
            continue
        floor_slot = slot_lower_bound(ints) or 0
        lowest = floor_slot  # every plan of the pair has its slowest slot at least this
        # the ladder pays off on large models; a small one is solved whole at once
        factors = iter(CAP_FACTORS if ints.max_stages * ints.options > LADDER_FROM else ())
        proven = False
        while not proven:
            limit = cutoff()
            valid = _slot_cap(ints, limit, objective)
            # with an incumbent, straight to the cap every better plan must meet (measured faster
            # than climbing the ladder); without one, up the ladder of caps
            factor = next(factors, None) if valid is None else None
            cap = None if factor is None else max(int(floor_slot * factor), lowest)
            if valid is not None and (cap is None or cap >= valid):
                cap = valid
            if cap is not None and cap < lowest:
                proven = True  # no plan below the cutoff is left in this pair
                break
            budget = min(SOLVE_TIME_LIMIT_S, max(1.0, SEARCH_TIME_LIMIT_S - (time.perf_counter() - started)))
            result: Solved = solve(ints, objective, cutoff=limit, slot_cap=cap, slot_floor=lowest,
                                   time_limit_s=budget, workers=SOLVER_WORKERS)  # fmt: skip
            stats.solver_s += result.wall_s
            stats.solves += 1
            if result.plan is not None:
                value = _price(ints, result.plan, objective)
                if value is None:
                    raise RuntimeError("the solver's plan breaks a limit of its own model")
                best = _keep(best, Candidate(tables, ints, StagePlan(result.plan.options, result.plan.layers, value)),
                             top)  # fmt: skip
            if result.status not in ("OPTIMAL", "INFEASIBLE"):
                stats.unproven += 1
                stats.notes.append(f"DP {d}, micro-batch {b}: not proven optimal within {budget:.0f} s")
                break
            # every plan with its slowest slot up to the cap is now accounted for (found, or proven
            # no better than the cutoff); the pair is done once the cap covers all that could still
            # beat the cutoff
            valid = _slot_cap(ints, cutoff(), objective)
            proven = cap is None or (valid is not None and cap >= valid)
            if cap is not None:
                lowest = cap + 1
        stats.solved += proven
    stats.wall_s = time.perf_counter() - started
    return PoolSearch(question, objective, best, stats, unit, tuple(prices) if prices is not None else None)


def _keep(best: list[Candidate], new: Candidate, top: int) -> list[Candidate]:
    """The `top` best candidates, one per (DP, micro-batch): a better plan of the same pair
    replaces the one held."""
    pair = (new.tables.dp, new.tables.micro_batch)
    same = [c for c in best if (c.tables.dp, c.tables.micro_batch) == pair]
    if same and same[0].objective <= new.objective:
        return best
    others = [c for c in best if (c.tables.dp, c.tables.micro_batch) != pair]
    return sorted([*others, new], key=lambda c: c.objective)[:top]


def _price(ints: IntTables, plan: StagePlan, objective: Objective) -> int | None:
    from paraplan.stage_model import plan_objective

    return plan_objective(ints, plan, objective)


def _lower_bound(ints: IntTables, objective: Objective, work: bool = True) -> int | None:
    """No plan of this pair costs less (see the module docstring)."""
    from paraplan.stage_model import slot_lower_bound

    slot = slot_lower_bound(ints)
    if slot is None:
        return None
    fill = ints.layers * int(ints.layer.min()) + int(ints.head.min())
    step = (ints.micro_batches - 1) * slot + fill
    if objective == "time":
        return step
    assert ints.price is not None
    cheapest = min(ints.price[ints.member[o]] * ints.gpus[o] for o in range(ints.options))
    # every stage holds its GPUs for the whole step and works m x its layers x c_o of it, so a
    # plan costs at least m x L x the least (price x GPUs x per-layer time) of any option
    cheapest_layer = min(ints.price[ints.member[o]] * ints.gpus[o] * int(ints.layer[o]) for o in range(ints.options))
    least_work = ints.micro_batches * ints.layers * cheapest_layer
    return max(step * cheapest, least_work) if work else step * cheapest


def _slot_cap(ints: IntTables, cutoff: int | None, objective: Objective) -> int | None:
    """The slowest slot any plan below the cutoff can have: (cutoff - the least sum of slots) /
    (m - 1), the cutoff first divided by the cheapest rate for the cost objective; None without
    a cutoff or with one micro-batch."""
    if cutoff is None or ints.micro_batches < 2:
        return None
    fill = ints.layers * int(ints.layer.min()) + int(ints.head.min())
    step = cutoff
    if objective == "cost":
        assert ints.price is not None
        cheapest = min(ints.price[ints.member[o]] * ints.gpus[o] for o in range(ints.options))
        step = cutoff // max(cheapest, 1)
    return max(0, (step - fill) // (ints.micro_batches - 1))


# --- a plan's figures, in seconds and bytes (the same semantics as the integer model) -----------------


@dataclass(frozen=True)
class StageFigures:
    option: int  # index into the tables' options
    layers: int
    role: int
    position: int  # from the back
    slot_s: float  # per micro-batch: layers, the LM head on the last stage, boundary transfers
    compute_s: float  # per micro-batch: forward + backward (+ the LM head)
    recompute_s: float
    tp_s: float
    host_s: float  # per micro-batch: host-bound MoE layers' wait (compute.moe_host_wait_s)
    pp_s: float
    optimizer_s: float  # per step
    dp_bwd_s: float  # per step, DP traffic under the backward window / the forward window
    dp_fwd_s: float
    memory: dict[str, float]  # bytes by term (memory.MEMORY_TERMS), the cost model's stage_memory
    usable_bytes: float
    capacity_bytes: float


@dataclass(frozen=True)
class PlanFigures:
    tables: StageTables
    plan: StagePlan
    stages: list[StageFigures]  # front to back
    slowest_s: float  # M
    fill_s: float  # W: the sum of the slots
    tail_s: float  # T
    step_s: float
    times: dict[str, float]  # by evaluate.TIME_TERMS, summing to step_s
    gpus_by_type: tuple[int, ...]
    model_flops: float
    model_flops_palm: float
    recompute_flops: float
    peak_sum: float  # sum over the GPUs used of each one's peak

    @property
    def gpus(self) -> int:
        return sum(self.gpus_by_type)

    def exposed_dp_s(self, stage: StageFigures) -> float:
        o = stage.option
        windows = (
            float(self.tables.overlap_bwd[o]) * self.slowest_s,
            float(self.tables.overlap_fwd[o]) * self.slowest_s,
        )
        return max(stage.dp_bwd_s - windows[0], 0.0) + max(stage.dp_fwd_s - windows[1], 0.0)

    @property
    def most_loaded(self) -> StageFigures:
        """The stage whose GPU has the least memory to spare (relative to what it may use)."""
        return max(self.stages, key=lambda st: (sum(st.memory.values()) / st.usable_bytes, -st.position))


def plan_figures(tables: StageTables, plan: StagePlan) -> PlanFigures:
    """The plan priced in seconds and bytes: the stage model's figures from the cost model's tables,
    and each stage's memory by term from `memory.stage_memory`."""
    from paraplan.cost_models.flops import model_flops_per_step, recompute_flops_per_step
    from paraplan.cost_models.memory import MEMORY_TERMS, device_reserve_bytes, stage_memory
    from paraplan.stage_model import FIRST, LAST, SINGLE, roles

    model, p = tables.model, plan.depth
    role = roles(p)
    groups = {(tables.options[o].member, tables.options[o].tp) for o in plan.options}
    counts = {g: sum(1 for o in plan.options if (tables.options[o].member, tables.options[o].tp) == g) for g in groups}

    def link(a: int, b: int) -> float:
        return float(max(tables.boundary_s[a, b], tables.boundary_s[b, a]))

    def charge(o: int) -> float:
        g = (tables.options[o].member, tables.options[o].tp)
        partners = [q for q in plan.options if (tables.options[q].member, tables.options[q].tp) != g or counts[g] >= 2]
        return 2.0 * max((link(o, q) for q in partners), default=0.0)

    stages: list[StageFigures] = []
    m = tables.micro_batches
    for r, (o, n) in enumerate(zip(plan.options, plan.layers, strict=True)):
        s, rl = p - 1 - r, role[r]
        head = float(tables.head_s[o]) if rl in (LAST, SINGLE) else 0.0
        pp = charge(o)
        slot = float(tables.layer_s[o]) * n + head + pp
        member = tables.pool.members[tables.options[o].member]
        row = tables.rows.take(np.array([o])).replace(pp=p)
        first, last = rl in (FIRST, SINGLE), rl in (LAST, SINGLE)
        mem = stage_memory(model, row, tables.settings.stack, device_reserve_bytes(model, row, member.cluster, tables.settings.stack),
                           np.array([float(n)]), float(r), first, last)  # fmt: skip
        col = min(s, tables.stages - 1)
        lin_role_first = rl in (FIRST, SINGLE)
        stages.append(StageFigures(
            option=o, layers=n, role=rl, position=s, slot_s=slot,
            compute_s=float(tables.layer_compute_s[o]) * n + head, recompute_s=float(tables.layer_recompute_s[o]) * n,
            tp_s=float(tables.layer_tp_s[o]) * n, host_s=float(tables.layer_host_s[o]) * n, pp_s=pp,
            optimizer_s=tables.optimizer.at(col, o, n, lin_role_first), dp_bwd_s=tables.dp_bwd.at(col, o, n, lin_role_first),
            dp_fwd_s=tables.dp_fwd.at(col, o, n, lin_role_first),
            memory={t: float(getattr(mem, t)[0]) for t in MEMORY_TERMS}, usable_bytes=float(tables.usable_bytes[o]),
            capacity_bytes=member.cluster.gpu.memory_bytes,
        ))  # fmt: skip
    slowest = max(st.slot_s for st in stages)
    fill = sum(st.slot_s for st in stages)
    partial = PlanFigures(tables, plan, stages, slowest, fill, 0.0, 0.0, {}, (), 0.0, 0.0, 0.0, 0.0)
    tails = [st.optimizer_s + partial.exposed_dp_s(st) for st in stages]
    tail = max(tails)
    critical = stages[int(np.argmax([st.slot_s for st in stages]))]
    tailing = stages[int(np.argmax(tails))]
    times = {
        "compute": m * critical.compute_s + tailing.optimizer_s,
        "recompute": m * critical.recompute_s,
        "tp_comm": m * critical.tp_s,
        "cp_comm": 0.0,
        "ep_comm": 0.0,
        "pp_comm": m * critical.pp_s,
        "dp_comm": partial.exposed_dp_s(tailing),
        "bubble": fill - slowest,
        "offload": 0.0,
        "host_wait": m * critical.host_s,
    }
    used = [0] * len(tables.pool.members)
    peak = 0.0
    rc_flops = 0.0
    for st in stages:
        opt = tables.options[st.option]
        used[opt.member] += tables.dp * opt.tp
        peak += tables.dp * opt.tp * float(tables.peak_flops[st.option])
        rc_flops += (
            float(
                recompute_flops_per_step(
                    model, tables.rows.take(np.array([st.option])), tables.settings.stack.recompute_modules
                )[0]
            )
            * st.layers
        )
    rc_flops /= model.num_layers
    base = tables.rows.take(np.array([0]))
    return PlanFigures(
        tables=tables, plan=plan, stages=stages, slowest_s=slowest, fill_s=fill, tail_s=tail,
        step_s=(m - 1) * slowest + fill + tail, times=times, gpus_by_type=tuple(used),
        model_flops=float(model_flops_per_step(model, base, causal=True)[0]),
        model_flops_palm=float(model_flops_per_step(model, base, causal=False)[0]), recompute_flops=rc_flops,
        peak_sum=peak,
    )  # fmt: skip


# --- result models ------------------------------------------------------------------------------------

FIXED = [
    "ZeRO-1 (the distributed optimizer); sequence parallelism whenever TP > 1",
    "no context, expert or virtual-pipeline parallelism, no offload",
    "TP within a node of the stage's GPU type; recompute per stage (none, selective or full)",
    "each stage's two boundary transfers priced over the slowest link it may border in the plan",
    "DP and micro-batch searched outside the solver (one CP-SAT model per pair); per stage: type, TP, "
    "recompute and layers inside it",
]


def summary_layout(figures: PlanFigures) -> Layout:
    """One `Layout` that summarizes a pool plan (the `stages` list is the plan): PP, DP,
    micro-batch and the settings; TP and recompute of the stage holding the most layers; the
    first/last stage layer counts when the split is Megatron's (first, even middle, last)."""
    t = figures.tables
    main = max(figures.stages, key=lambda st: (st.layers, -st.position))
    opt = t.options[main.option]
    base = t.settings.base
    layers = [st.layers for st in figures.stages]
    p = len(layers)
    first = last = 0
    uniform_kind = len({(t.options[st.option].tp, t.options[st.option].recompute) for st in figures.stages}) == 1
    if uniform_kind and p > 1 and len(set(layers)) > 1:
        middle = layers[1:-1]
        if p == 2 or len(set(middle)) == 1:
            first, last = layers[0], layers[-1]
    sp = bool(t.settings.sp(np.array([opt.tp]))[0])
    return Layout(
        tp=opt.tp, pp=p, dp=t.dp, micro_batch=t.micro_batch, global_batch=base.global_batch, seq_len=base.seq_len,
        recompute=opt.recompute, zero=1, sequence_parallel=sp, precision=base.precision, framework=base.framework,
        first_stage_layers=first, last_stage_layers=last,
    )  # fmt: skip


def usd_per_hour_by_type(pool: Pool) -> tuple[float, ...] | None:
    """$ per GPU-hour of each type (tco.usd_per_gpu_hour), None when one has no price."""
    from paraplan.cost_models.tco import usd_per_gpu_hour

    prices = [usd_per_gpu_hour(m.cluster) for m in pool.members]
    return None if any(p is None for p in prices) else tuple(float(p) for p in prices if p is not None)


def evaluated_plan(figures: PlanFigures, *, tokens: float | None = None) -> EvaluatedLayout:
    """The plan as the contract's EvaluatedLayout: memory of the most loaded GPU, time terms that
    sum to the step, MFU = model FLOPs / (step x the sum of each used GPU's peak)."""
    from paraplan.accuracy import error_bar
    from paraplan.explain import NEAR_LIMIT

    t = figures.tables
    model, pool = t.model, t.pool
    lay = summary_layout(figures)
    step = figures.step_s
    gpus = figures.gpus
    worst = figures.most_loaded
    total = sum(worst.memory.values())
    margin = worst.usable_bytes - total
    used = sorted(
        {(c.gpu_family, c.name) for c in (pool.members[t.options[st.option].member].cluster for st in figures.stages)}
    )
    moe = model.num_experts > 1
    bars = [error_bar(f, str(lay.precision), str(lay.framework), gpus, moe, name) for f, name in used]
    low = min(b.low_factor for b in bars)
    high = max(b.high_factor for b in bars)
    per_family = Counter(f for f, _ in used)  # a family of two presets: say which preset
    words = "; ".join(f"{name if per_family[f] > 1 else f}: {b.words}" for (f, name), b in zip(used, bars, strict=True))
    term = max(figures.times, key=lambda k: figures.times[k])
    share = figures.times[term] / step
    prices = usd_per_hour_by_type(pool)
    rate = sum(u * p for u, p in zip(figures.gpus_by_type, prices, strict=True)) if prices else None
    per_step = step * rate / 3600.0 if rate is not None else None
    train = step * tokens / (lay.global_batch * lay.seq_len) if tokens else None
    stages = [
        StageOut(hardware=pool.members[t.options[st.option].member].name, gpus_per_replica=t.options[st.option].tp,
                 tp=t.options[st.option].tp, layers=st.layers, recompute=t.options[st.option].recompute,
                 slot_s=st.slot_s, memory_bytes=sum(st.memory.values()), capacity_bytes=st.capacity_bytes)
        for st in figures.stages
    ]  # fmt: skip
    peak_mean = figures.peak_sum / gpus
    ratio = 1.0 / (step * figures.peak_sum)
    return EvaluatedLayout(
        model=model.name, hardware=pool.name, gpus=gpus, layout=lay, feasible=margin >= 0,
        violations=[] if margin >= 0 else [f"memory of stage {figures.stages.index(worst)} exceeds its usable bytes"],
        memory_bytes=MemoryOut(**worst.memory, total=total, capacity=worst.capacity_bytes),
        memory_margin_bytes=margin, near_memory_limit=margin < NEAR_LIMIT * worst.capacity_bytes,
        step_time_s=step, step_time_range_s=(step * low, step * high), accuracy_basis=words,
        time_s=TimeOut(**figures.times), mfu=min(figures.model_flops * ratio, 1.0), mfu_palm=figures.model_flops_palm * ratio,
        hfu=min((figures.model_flops + figures.recompute_flops) * ratio, 1.0), peak_flops=peak_mean,
        tflops_per_gpu=figures.model_flops / (step * gpus) / 1e12,
        tokens_per_s=lay.global_batch * lay.seq_len / step,
        params=ParamsOut(total=model.total_params, active=model.active_params),
        bottleneck=BottleneckOut(term=term, share=min(max(share, 0.0), 1.0), explanation=_bottleneck(figures, term, share)),
        cost_usd_per_step=per_step, train_time_s=train,
        cost_usd=train * rate / 3600.0 if train is not None and rate is not None else None, stages=stages,
    )  # fmt: skip


_TERM_WORDS = {
    "compute": "GEMMs, attention and memory-bound kernels of the slowest stage",
    "recompute": "recomputing activations on the slowest stage",
    "tp_comm": "tensor-parallel collectives of the slowest stage",
    "pp_comm": "pipeline transfers across the slowest stage's boundaries",
    "dp_comm": "exposed data-parallel traffic",
    "bubble": "the pipeline's fill and drain (the other stages' slots)",
}


def _bottleneck(figures: PlanFigures, term: str, share: float) -> str:
    t = figures.tables
    slow = max(figures.stages, key=lambda st: st.slot_s)
    opt = t.options[slow.option]
    name = t.pool.members[opt.member].name
    where = f"; the slowest stage is {name} TP{opt.tp} with {slow.layers} layers ({fmt_s(slow.slot_s)} a micro-batch)"
    return f"{term}: {share:.0%} of the step is {_TERM_WORDS.get(term, term)}{where}"


def pool_text(result: HardwareResult) -> list[str]:
    """The pool's answer as report lines: the best plan's stages (front to back, runs of equal
    stages folded), the GPUs used of each type, each type alone (stage model and uniform
    enumeration), whether mixing pays, and what a stock framework can run."""
    pool = result.pool
    if pool is None:
        return []
    lines: list[str] = []
    if result.layouts and result.layouts[0].stages:
        best = result.layouts[0]
        runs: list[tuple[int, StageOut]] = []
        for stage in best.stages or []:
            key = (stage.hardware, stage.tp, stage.layers, stage.recompute)
            if runs and (runs[-1][1].hardware, runs[-1][1].tp, runs[-1][1].layers, runs[-1][1].recompute) == key:
                runs[-1] = (runs[-1][0] + 1, runs[-1][1])
            else:
                runs.append((1, stage))
        words = [f"{n} x " * (n > 1) + f"{st.hardware} TP{st.tp} {st.layers} layer{'s' * (st.layers != 1)}"
                 + (f" rc-{st.recompute}" if st.recompute not in (None, Recompute.NONE) else "") for n, st in runs]  # fmt: skip
        lines.append(f"stages    front to back: {' | '.join(words)} (DP {best.layout.dp}, micro-batch "
                     f"{best.layout.micro_batch})")  # fmt: skip
    used = ", ".join(f"{m.hardware} {m.used} of {m.count}" for m in pool.members)
    lines.append(f"GPUs      {used}")
    for h in result.homogeneous or []:
        mine = fmt_s(h.layouts[0].step_time_s) if h.layouts else "no plan"
        other = ""
        if h.enumeration is not None and h.enumeration.layouts:
            other = f"; uniform enumeration {fmt_s(h.enumeration.layouts[0].step_time_s)}"
        lines.append(f"alone     {h.hardware}: {mine} (stage model{other})")
    lines.append(f"mixing    {pool.verdict}")
    lines.append(f"launch    {pool.runnable}")
    return lines


def fmt_s(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms" if seconds < 1 else f"{seconds:.2f} s"


def runnable_words(figures: PlanFigures) -> str:
    """Which parts of the plan a stock framework can launch, said plainly."""
    t = figures.tables
    types = {t.options[st.option].member for st in figures.stages}
    tps = {t.options[st.option].tp for st in figures.stages}
    recomputes = {t.options[st.option].recompute for st in figures.stages}
    layers = [st.layers for st in figures.stages]
    split = (
        "an even split"
        if len(set(layers)) == 1
        else "per-stage layer counts (Megatron-LM: --pipeline-model-"
        "parallel-layout, or --decoder-first/last-pipeline-num-layers when only the ends differ)"
    )
    parts = []
    if len(tps) == 1 and len(recomputes) == 1 and len(types) == 1:
        return f"A stock framework runs this plan: one GPU type, one TP degree, one recompute mode, {split}."
    if len(tps) > 1:
        parts.append(f"different TP degrees per stage ({', '.join(map(str, sorted(tps)))}): no mainstream framework "
                     "(Megatron-LM, DeepSpeed, torchtitan) launches that; each TP degree is one job-wide setting")  # fmt: skip
    if len(recomputes) > 1:
        parts.append("recompute differing per stage: Megatron-LM and torchtitan set it for the whole model "
                     "(Megatron's --recompute-num-layers is per chunk, the same on every stage)")  # fmt: skip
    if len(types) > 1:
        parts.append("stages on different GPU types: one job can span them only if the launcher orders the ranks so "
                     "that each stage's ranks land on its type, with the same software stack on both; no framework "
                     "plans for the speed difference -- the layer split here does")  # fmt: skip
    can = [f"{split}", "DP, micro-batch, ZeRO-1 and sequence parallelism as usual"]
    return ("Not runnable as is by a stock framework: " + "; ".join(parts) + ". What a stock framework can take "
            "from it: " + ", ".join(can) + ". The per-stage JSON describes the rest.")  # fmt: skip


def pool_plan_json(figures: PlanFigures) -> str:
    """The plan stage by stage (front to back), for a launcher or a person, with the sentence on
    what stock frameworks can run."""
    import json

    from paraplan.stage_model import FIRST, LAST, SINGLE

    t = figures.tables
    base = t.settings.base
    first_layer = 0
    stages = []
    for i, st in enumerate(figures.stages):
        opt = t.options[st.option]
        holds = (["embedding"] if st.role in (FIRST, SINGLE) else []) + (["lm_head", "loss"] if st.role in (LAST, SINGLE)
                                                                            else [])  # fmt: skip
        stages.append({
            "stage": i, "hardware": t.pool.members[opt.member].name, "tp": opt.tp, "gpus_per_replica": opt.tp,
            "gpus": t.dp * opt.tp, "layers": st.layers, "first_layer": first_layer, "recompute": opt.recompute.label,
            "sequence_parallel": bool(t.settings.sp(np.array([opt.tp]))[0]), "holds": holds,
            "slot_s": round(st.slot_s, 9), "memory_bytes": round(sum(st.memory.values())),
            "capacity_bytes": round(st.capacity_bytes),
        })  # fmt: skip
        first_layer += st.layers
    doc = {
        "model": t.model.name, "pool": t.pool.name, "dp": t.dp, "micro_batch": t.micro_batch,
        "micro_batches": t.micro_batches, "global_batch": base.global_batch, "seq_len": base.seq_len,
        "precision": base.precision.label, "framework": base.framework.label, "zero": 1,
        "gpus": dict(zip([m.name for m in t.pool.members], figures.gpus_by_type, strict=True)),
        "step_time_s": round(figures.step_s, 9), "stages": stages, "stock_frameworks": runnable_words(figures),
    }  # fmt: skip
    return json.dumps(doc, indent=2)


def link_words(pool: Pool) -> str:
    if len(pool.members) < 2:
        return "one GPU type: no link between types"
    if pool.link is not None:
        lk = pool.link
        return (f"the pool file's link: {lk.bw_bytes_per_s / 1e9:g} GB/s x {lk.efficiency:g} per GPU and direction, "
                f"{lk.latency_s * 1e6:g} us")  # fmt: skip
    from paraplan.stage_costs import cross_link

    worst = min((cross_link(pool, a, b) for a in range(len(pool.members)) for b in range(a + 1, len(pool.members))),
                key=lambda x: x.bw_bytes_per_s)  # fmt: skip
    return (f"the network through the slower NIC: {worst.bw_bytes_per_s / 1e9:.3g} GB/s effective per GPU and "
            f"direction ({worst.name})")  # fmt: skip


# --- optimize: the pool's answer ----------------------------------------------------------------------


@dataclass(frozen=True)
class PoolAnswer:
    """Everything `optimize_pool` found, before it becomes result models (compare uses it too)."""

    question: PoolQuestion
    objective: Objective
    hybrid: PoolSearch
    singles: list[PoolSearch | None]  # per type: its best plan alone (stage model); None for count 0
    wall_s: float

    @property
    def best(self) -> Candidate | None:
        return self.hybrid.best[0] if self.hybrid.best else None


def common_unit(question: PoolQuestion) -> float:
    """One integer time unit for every model of a pool's searches (objectives compare across
    them): the finest any option needs (the fastest per-layer time, at the smallest micro-batch)."""
    from paraplan.stage_model import time_unit

    b = min(question.micro_batch)
    d = min(question.dp)
    t = stage_tables(question.model, question.pool, question.settings, d, b, 1)
    return time_unit(t) if t is not None else 1e-6


def solve_pool(question: PoolQuestion, objective: Objective = "time", top: int = 1) -> PoolAnswer:
    """The single-type optima first (each type alone is part of the pool's space; the best is the
    first cutoff), then the pool's."""
    started = time.perf_counter()
    prices = None
    if objective == "cost":
        prices = usd_per_hour_by_type(question.pool)
        if prices is None:
            missing = [m.name for m in question.pool.members if usd_per_hour_by_type(Pool((m,))) is None]
            raise InputError(f"objective cost needs a price for every GPU type of the pool; {', '.join(missing)} "
                             "has no [price] table")  # fmt: skip
    if not question.dp or not question.micro_batch:
        raise InputError("no DP degree and micro-batch divide the global batch within the bounds")
    unit = common_unit(question)
    singles: list[PoolSearch | None] = []
    for k, member in enumerate(question.pool.members):
        if member.count <= 0:
            singles.append(None)
            continue
        alone = PoolQuestion(question.model, question.pool.only(k), question.settings, question.dp,
                             question.micro_batch, question.min_stages, question.max_stages)  # fmt: skip
        singles.append(search(alone, objective, top, prices, unit_s=unit))
    known = [c for r in singles if r is not None for c in r.best]
    if len(question.pool.members) > 1:
        hybrid = search(question, objective, top, prices, incumbent=known, unit_s=unit)
    else:
        hybrid = singles[0] if singles[0] is not None else search(question, objective, top, prices, unit_s=unit)
    return PoolAnswer(question, objective, hybrid, singles, time.perf_counter() - started)


def optimize_pool(
    model: str | ModelSpec,
    pool: str | Pool,
    *,
    top: int = 1,
    objective: Objective = "time",
    tokens: float | None = None,
    bounds: Mapping[str, int | None] | None = None,
    mem_headroom: float = 0.0,
    stack: Mapping[str, object] | None = None,
    emit: str | None = None,
    enumeration: bool = True,
    gpus: object = None,
    deadline_days: float | None = None,
    tp_within_node: bool = True,
    scaling: bool = False,
    knobs: Mapping[str, object] | None = None,
    **more_knobs: object,
) -> HardwareResult:
    """The best plans of a mixed pool: a `HardwareResult` with `stages` on every layout,
    `homogeneous` (per GPU type its best plan alone, in the pool's stage model, with the uniform
    enumeration's next to it) and `pool` (what it uses and whether mixing pays). `top`: the best
    plan of each of the `top` best (DP, micro-batch) choices. `enumeration`: also search each type
    alone with the uniform enumeration (`paraplan.optimize` at the type's full count). Layout knobs
    (settings such as global_batch, seq_len, precision; or fixed tp, dp, micro_batch, recompute)
    go in `knobs` or as keyword arguments.
    `gpus`, `deadline_days`, `tp_within_node=False` and `scaling` do not apply to pools: given,
    they are refused (the pool names its counts; TP stays within a node of the stage's type)."""
    from paraplan.api import _model as resolve_model

    check_pool_options(gpus=gpus, deadline_days=deadline_days, tp_within_node=tp_within_node, scaling=scaling)
    spec = resolve_model(model)
    parsed = parse_pool(pool) if isinstance(pool, str) else pool
    if isinstance(top, bool) or not isinstance(top, int) or not 1 <= top <= 100:
        raise InputError(f"top {top!r} must be a whole number in 1..100")
    if objective not in ("time", "cost"):
        raise InputError(f"objective {objective!r} must be time or cost")
    given = {**(knobs or {}), **more_knobs}
    question = pool_question(spec, parsed, given, stack, mem_headroom, bounds)
    answer = solve_pool(question, objective, top)
    enumerated: list[HardwareResult | None] = []
    for member in parsed.members:
        enumerated.append(_enumerate_type(spec, member, objective, tokens, bounds, mem_headroom, stack, given)
                          if enumeration and member.count > 0 else None)  # fmt: skip
    return pool_result(answer, tokens=tokens, enumerated=enumerated, emit=emit)


def check_pool_options(*, gpus: object = None, deadline_days: float | None = None, tp_within_node: bool = True,
                       scaling: bool = False) -> None:  # fmt: skip
    """The optimize options a pool cannot take, refused with one line each."""
    if gpus is not None:
        raise InputError("a pool names its own GPU counts (A:N+B:M): give --gpus only for other hardware")
    if deadline_days is not None:
        raise InputError("a deadline with a pool: pool plans are searched for step time or cost, not to a deadline")
    if not tp_within_node:
        raise InputError("--tp-across-nodes with a pool: a pool plan keeps each stage's TP within a node of its type")
    if scaling:
        raise InputError("--scaling with a pool: a pool's counts are fixed (it may leave GPUs idle)")


def split_hardware(hardware: str | Cluster | Sequence[str | Cluster]) -> list[str | Cluster | Pool]:
    """The --hardware values with each pool parsed: a `Pool` for `A:N+B:M` or a pool TOML, and
    every other comma-separated entry (or `Cluster`) unchanged, in order."""
    values: list[str | Cluster] = [hardware] if isinstance(hardware, (str, Cluster)) else list(hardware)
    out: list[str | Cluster | Pool] = []
    for value in values:
        if not isinstance(value, str):
            out.append(value)
            continue
        for part in hardware_entries(value):
            text = part.strip()
            out.append(parse_pool(text) if text and looks_like_pool(text) else text)
    return out


def _enumerate_type(model: ModelSpec, member: PoolMember, objective: Objective, tokens: float | None,
                    bounds: Mapping[str, int | None] | None, mem_headroom: float,
                    stack: Mapping[str, object] | None, knobs: Mapping[str, object]) -> HardwareResult | None:  # fmt: skip
    from paraplan import api

    try:
        given = cast(KnobArgs, dict(knobs))
        result = api.optimize(model, member.cluster, member.count, top=1, objective=objective, tokens=tokens,
                              bounds=bounds, mem_headroom=mem_headroom, stack=stack, **given)  # fmt: skip
    except InputError:
        return None
    return result.results[0]


def _solver_out(search_: PoolSearch) -> SolverOut:
    status: Literal["OPTIMAL", "INFEASIBLE"] = "OPTIMAL" if search_.best else "INFEASIBLE"
    method = "cp-sat"
    if search_.stats.unproven:  # a model stopped at its time limit: the answer is the best found
        method += f" (NOT proven: {search_.stats.unproven} model(s) hit a time limit; the best plan found)"
    return SolverOut(status=status, wall_s=search_.stats.wall_s, candidates=search_.stats.solved, method=method)


def _figures(c: Candidate) -> PlanFigures:
    return plan_figures(c.tables, c.plan)


def _value(f: PlanFigures, objective: Objective) -> float:
    if objective == "time":
        return f.step_s
    prices = usd_per_hour_by_type(f.tables.pool) or ()
    return f.step_s * sum(u * p for u, p in zip(f.gpus_by_type, prices, strict=False)) / 3600.0


def pool_result(answer: PoolAnswer, *, tokens: float | None = None,
                enumerated: Sequence[HardwareResult | None] = (), emit: str | None = None) -> HardwareResult:  # fmt: skip
    """The pool's `HardwareResult`."""
    q = answer.question
    pool = q.pool
    hybrid = answer.hybrid
    figures = [_figures(c) for c in hybrid.best]
    layouts = [evaluated_plan(f, tokens=tokens) for f in figures]
    homogeneous = []
    single_values: list[tuple[str, float, PlanFigures]] = []
    for k, (member, found) in enumerate(zip(pool.members, answer.singles, strict=True)):
        if found is None:
            continue
        enum_result = enumerated[k] if k < len(enumerated) else None
        entry_layouts = [evaluated_plan(_figures(c), tokens=tokens) for c in found.best]
        if found.best:
            single_values.append((member.name, _value(_figures(found.best[0]), answer.objective),
                                  _figures(found.best[0])))  # fmt: skip
        homogeneous.append(HardwareResult(
            hardware=member.name, gpus=entry_layouts[0].gpus if entry_layouts else member.count,
            solver=_solver_out(found), layouts=entry_layouts,
            reason=None if entry_layouts else f"no plan of {q.model.name} fits {member.count} x {member.name} "
            "in the pool's stage model", enumeration=enum_result,
        ))  # fmt: skip
    best_fig = figures[0] if figures else None
    verdict, gain, gain_enum, best_single = _verdict(answer, best_fig, single_values, enumerated)
    used = best_fig.gpus_by_type if best_fig else tuple(0 for _ in pool.members)
    mixed = best_fig is not None and sum(1 for u in used if u > 0) > 1
    pool_out = PoolOut(
        members=[PoolMemberOut(hardware=m.name, count=m.count, used=u) for m, u in zip(pool.members, used, strict=True)],
        link=link_words(pool), objective=answer.objective, best_single=best_single, mixed=mixed, gain=gain,
        gain_vs_enumeration=gain_enum, verdict=verdict,
        runnable=runnable_words(best_fig) if best_fig else "no plan",
        plan_json=pool_plan_json(best_fig) if best_fig else None, fixed=list(FIXED),
        models_solved=hybrid.stats.solved + sum(s.stats.solved for s in answer.singles if s is not None),
        models_pruned=hybrid.stats.pruned + sum(s.stats.pruned for s in answer.singles if s is not None),
        notes=[*hybrid.stats.notes, *(n for s in answer.singles if s is not None for n in s.stats.notes)],
    )  # fmt: skip
    explanation = None
    if figures:
        best_words = [layouts[0].bottleneck.explanation]
        runners = [_runner_up(figures[0], f, answer.objective) for f in figures[1:]]
        explanation = Explanation(best=best_words, runners_up=runners)
    launch = None
    if emit is not None and best_fig is not None:
        launch = {"stages": pool_plan_json(best_fig)}
    reason = None
    if not layouts:
        reason = (f"no plan of {q.model.name} fits the pool {pool.name} (memory or GPU counts) under the pool's "
                  "fixed knobs: " + "; ".join(FIXED[:2]))  # fmt: skip
    solver = _solver_out(hybrid)
    solver = solver.model_copy(update={"wall_s": answer.wall_s})
    return HardwareResult(
        hardware=pool.name, gpus=layouts[0].gpus if layouts else max(1, sum(m.count for m in pool.members)),
        solver=solver, layouts=layouts, reason=reason, explanation=explanation, launch=launch, homogeneous=homogeneous,
        pool=pool_out,
    )  # fmt: skip


def _runner_up(best: PlanFigures, other: PlanFigures, objective: Objective) -> str:
    ratio = _value(other, objective) / _value(best, objective)
    t = other.tables
    kinds = sorted({f"{t.pool.members[t.options[st.option].member].name} TP{t.options[st.option].tp}"
                    for st in other.stages})  # fmt: skip
    return (f"DP{t.dp}, micro-batch {t.micro_batch}, {len(other.stages)} stages ({', '.join(kinds)}): "
            f"{ratio - 1:+.1%} {'step time' if objective == 'time' else 'cost per step'}")  # fmt: skip


def _verdict(answer: PoolAnswer, best: PlanFigures | None, singles: list[tuple[str, float, PlanFigures]],
             enumerated: Sequence[HardwareResult | None]) -> tuple[str, float | None, float | None, str | None]:  # fmt: skip
    objective = answer.objective
    what = "step time" if objective == "time" else "cost per step"

    def show(v: float) -> str:
        return fmt_s(v) if objective == "time" else f"${v:,.2f}"

    if best is None:
        return "no plan fits the pool", None, None, None
    mine = _value(best, objective)
    enum_values = []
    for member, res in zip(answer.question.pool.members, enumerated, strict=False):
        if res is not None and res.layouts:
            lay = res.layouts[0]
            v = lay.step_time_s if objective == "time" else lay.cost_usd_per_step
            if v is not None:
                enum_values.append((member.name, float(v)))
    gain = None
    best_single = None
    text = ""
    if singles:
        best_single, single_v, _ = min(singles, key=lambda x: x[1])
        gain = 1.0 - mine / single_v
        used = [u for u in best.gpus_by_type if u > 0]
        if len(used) > 1 and gain > 0:
            text = (
                f"Mixing pays: the pool's best plan ({show(mine)} {what}) beats the best single-type plan "
                f"({best_single} alone, {show(single_v)}) by {gain:.1%}, both priced by the pool's stage model."
            )
        elif len(used) > 1:
            text = (f"Mixing does not pay: the mixed plan ({show(mine)}) only ties the best single-type plan "
                    f"({best_single} alone, {show(single_v)}).")  # fmt: skip
        else:
            text = (f"Mixing does not pay: the best plan uses {best_single} alone ({show(mine)} {what}); no mix of the "
                    "pool's types found beats it in the stage model.")  # fmt: skip
    gain_enum = None
    if enum_values:
        name, v = min(enum_values, key=lambda x: x[1])
        gain_enum = 1.0 - mine / v
        relation = "faster" if objective == "time" else "cheaper"
        if gain_enum >= 0:
            text += (f" Against the uniform enumeration's best single-type plan ({name}, {show(v)}, with every knob "
                     f"it searches), the pool's plan is {gain_enum:.1%} {relation}.")  # fmt: skip
        else:
            text += (f" But the uniform enumeration finds {show(v)} on {name} alone, {-gain_enum:.1%} better than the "
                     "pool's plan, with knobs the pool's stage model does not search (context parallelism, "
                     "interleaving, offload, ZeRO-2/3): by that measure mixing does not pay.")  # fmt: skip
    if answer.hybrid.stats.unproven:
        text += (f" Not proven: {answer.hybrid.stats.unproven} (DP, micro-batch) model(s) of the pool's search hit "
                 "its time limit, so a better mixed plan may exist (see notes).")  # fmt: skip
    return text.strip(), gain, gain_enum, best_single


# --- compare: a pool as one alternative ---------------------------------------------------------------


@dataclass(frozen=True)
class PoolName:
    """What `decision.verdict` reads of an alternative's hardware: its name."""

    name: str


@dataclass(frozen=True)
class PoolAccount(RunTotals):
    """Training `tokens` with a pool plan: the same figures as `decision.Account`, each GPU type
    priced, powered and failing by its own preset (and the overrides)."""

    figures: PlanFigures
    tokens: float
    per_type: list[Figures]  # the price, power and reliability figures of each pool member
    pricing: str
    reliability: ReliabilityAccount  # of the whole job: every GPU used, the types' rates added
    utilization: float  # GPU-weighted busy fraction
    wall_power_per_gpu_w: float  # GPU-weighted, at the facility meter
    energy_kwh: float
    cost: CostBreakdown | None  # None: a type without a price
    hardware_usd_per_gpu_hour: float | None  # GPU-weighted

    @property
    def step_time_s(self) -> float:
        return self.figures.step_s


# A pool's answer in compare: the same fields as a single hardware's, its name and pool account.
PoolOutcome = Outcome[PoolName, PoolAccount]


def pool_account(figures: PlanFigures, tokens: float, per_type: Sequence[Figures], pricing: Pricing,
                 staff_usd_per_day: float) -> PoolAccount:  # fmt: skip
    """Failures over all GPUs used (the types' rates add up), energy and money per type."""
    import dataclasses

    from paraplan.cost_models.energy import busy_fraction, energy_kwh, wall_power_per_gpu_w
    from paraplan.cost_models.reliability import assess, failures_per_hour, nodes_for
    from paraplan.cost_models.tco import run_cost

    t = figures.tables
    pool = t.pool
    ideal = tokens / (t.settings.base.global_batch * t.settings.base.seq_len / figures.step_s)
    used = figures.gpus_by_type
    total = sum(used)
    gpu_rate = node_rate = written = 0.0
    restart = 0.0
    nodes = 0
    for member, n, fig in zip(pool.members, used, per_type, strict=True):
        if n <= 0:
            continue
        rel = fig.reliability
        gpn = member.cluster.gpus_per_node
        gpu_rate += failures_per_hour(n, gpn, rel.gpu_mtbf_hours, math.inf)
        node_rate += failures_per_hour(n, gpn, math.inf, rel.node_mtbf_hours)
        k_nodes = nodes_for(n, gpn)
        nodes += k_nodes
        written += k_nodes * rel.storage_write_bytes_per_s
        restart = max(restart, rel.restart_s)
    # `assess` on one GPU per node with the pool's summed rates and write bandwidth
    failures = assess(t.model.total_params, total, 1, ideal, total / gpu_rate, total / node_rate, written / total,
                      restart)  # fmt: skip
    failures = dataclasses.replace(failures, nodes=nodes)
    wall = failures.train_time_s
    m = t.micro_batches
    kwh_by_type = [0.0] * len(pool.members)
    watts_sum = busy_sum = 0.0
    for st in figures.stages:
        opt = t.options[st.option]
        member = pool.members[opt.member]
        power = per_type[opt.member].power
        gpus = t.dp * opt.tp
        u = busy_fraction(m * st.compute_s + st.optimizer_s, m * st.recompute_s, figures.step_s)
        watts = wall_power_per_gpu_w(member.cluster.gpu.tdp_w, power.idle_fraction, u, power.node_overhead_w,
                                     member.cluster.gpus_per_node, power.pue)  # fmt: skip
        kwh_by_type[opt.member] += energy_kwh(watts, gpus, wall)
        watts_sum += watts * gpus
        busy_sum += u * gpus
    cost = None
    hourly = [fig.hardware_usd_per_gpu_hour for fig in per_type]
    energy_prices = [fig.power.usd_per_kwh if pricing == "own" else 0.0 for fig in per_type]
    priced = all(h is not None and e is not None for h, e, n in zip(hourly, energy_prices, used, strict=True) if n > 0)
    mean_hourly = None
    if priced:
        parts = [run_cost(n, wall, float(h or 0.0), kwh, float(e or 0.0), 0.0, pricing)
                 for n, h, e, kwh in zip(used, hourly, energy_prices, kwh_by_type, strict=True) if n > 0]  # fmt: skip
        staff = run_cost(0, wall, 0.0, 0.0, 0.0, staff_usd_per_day, pricing)
        cost = CostBreakdown(hardware=sum(p.hardware for p in parts), energy=sum(p.energy for p in parts),
                             staff=staff.staff)  # fmt: skip
        mean_hourly = sum(float(h or 0.0) * n for h, n in zip(hourly, used, strict=True) if n > 0) / total
    return PoolAccount(figures, tokens, list(per_type), pricing, failures, busy_sum / total, watts_sum / total,
                       sum(kwh_by_type), cost, mean_hourly)  # fmt: skip


def compare_pool(model: ModelSpec, pool: Pool, tokens: float, *, pricing: Pricing = "own",
                 overrides: Mapping[str, float] | None = None, staff_usd_per_day: float = 0.0,
                 budget_usd: float | None = None, deadline_days: float | None = None, mem_headroom: float = 0.0,
                 stack: Mapping[str, object] | None = None, knobs: Mapping[str, object] | None = None,
                 ) -> tuple[CompareEntry, PoolOutcome]:  # fmt: skip
    """A pool as one alternative of `compare`: its fastest plan (the GPU counts are maxima; the
    plan may leave some idle), accounted like a single hardware. Returns the `CompareEntry` and an
    outcome `decision.verdict` can read."""
    from paraplan.cost_models.reliability import CHECKPOINT_BYTES_PER_PARAM  # noqa: F401  (same checkpoint model)
    from paraplan.decision import resolve

    per_type = [resolve(m.cluster, pricing, overrides or {}, staff_usd_per_day) for m in pool.members]
    question = pool_question(model, pool, knobs, stack, mem_headroom)
    answer = solve_pool(question, "time", 1)
    total = sum(m.count for m in pool.members)
    common: dict[str, Any] = dict(hardware=pool.name, max_gpus=total, counts_searched=[total])
    if answer.best is None:
        reason = f"no plan of {model.name} fits the pool {pool.name} under the pool's fixed knobs"
        outcome = PoolOutcome(PoolName(pool.name), total, [total], None, reason)
        entry = CompareEntry(gpus=total, reason=reason, **NO_RUN, **common)
        return entry, outcome
    figures = plan_figures(answer.best.tables, answer.best.plan)
    acc = pool_account(figures, tokens, per_type, pricing, staff_usd_per_day)
    notes = [f"a pool: {', '.join(f'{m.name} {u} of {m.count}' for m, u in zip(pool.members, figures.gpus_by_type, strict=True))} "
             "GPUs used; each type priced, powered and failing by its own figures"]  # fmt: skip
    deadline_met = None
    if deadline_days is not None:
        deadline_met = acc.train_time_s <= deadline_days * 86400.0
        notes.append(f"{'meets' if deadline_met else 'MISSES'} the deadline of {deadline_days:g} days "
                     f"({acc.train_time_s / 86400.0:.1f} days with failures; the pool's fastest plan)")  # fmt: skip
    budget_met = None
    if budget_usd is not None:
        if acc.cost is None:
            notes.append("no price for every GPU type of the pool: the budget cannot be checked")
        else:
            budget_met = float(acc.cost.total) <= budget_usd
            notes.append(f"{'within' if budget_met else 'OVER'} the budget of ${budget_usd:,.0f} "
                         f"(${float(acc.cost.total):,.0f}; the pool's fastest plan)")  # fmt: skip
    best = evaluated_plan(figures, tokens=tokens)
    assumptions: dict[str, object] = {m.name: f.to_json() for m, f in zip(pool.members, per_type, strict=True)}
    entry = CompareEntry(
        best=best, hardware_usd_per_gpu_hour=acc.hardware_usd_per_gpu_hour, pricing=pricing, assumptions=assumptions,
        deadline_met=deadline_met, budget_met=budget_met, notes=notes, **acc.entry_fields(), **common,
    )  # fmt: skip
    outcome = PoolOutcome(PoolName(pool.name), total, [total], acc, None, notes, deadline_met, budget_met)
    return entry, outcome


__all__ = [
    "FIXED",
    "Candidate",
    "PlanFigures",
    "Pool",
    "PoolAccount",
    "PoolAnswer",
    "PoolLink",
    "PoolMember",
    "PoolOutcome",
    "PoolQuestion",
    "PoolSearch",
    "check_pool_options",
    "compare_pool",
    "evaluated_plan",
    "looks_like_pool",
    "optimize_pool",
    "parse_pool",
    "plan_figures",
    "pool_account",
    "pool_plan_json",
    "pool_question",
    "pool_result",
    "pool_text",
    "runnable_words",
    "search",
    "solve_pool",
    "split_hardware",
]

"""What would fit: when no layout qualifies, the smallest changes that admit one.

Tried in order of how little they change the question, each a new question evaluated once:
  1. a knob the user fixed (recompute, ZeRO, micro-batch, offload, ...) left to the search;
  2. the nearest global batches that some data-parallel degree divides;
  3. more GPUs: the smallest count above the one asked that fits, among the sizes clusters are
     built in (2^a and 3 x 2^a, whole nodes, up to 64x);
  4. another framework, where the chosen one lacks what would fit (DeepSpeed's parameter
     offload, torchtitan's FSDP with pipeline parallelism, ...).
Each fix is a sentence with the resulting layout and its step time, so it can be acted on.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence

import numpy as np

from paraplan.api import gpu_count_domain
from paraplan.cost_models.candidates import INDEX, Layouts
from paraplan.cost_models.evaluate import Evaluation
from paraplan.cost_models.frameworks import default_stack, stack_unsupported
from paraplan.cost_models.layout import DEGREES, MAX_GPUS, SEARCHED, Framework, Layout, bounds, layout_words
from paraplan.cost_models.limits import LIMITS, Target
from paraplan.question import Question
from paraplan.search import Constraints, rank_space
from paraplan.space import SpaceTooLarge, row_budget
from paraplan.units import fmt_seconds

MAX_FIXES = 4
# Candidates all the searches for fixes may enumerate together (a fix is a suggestion; each is a
# whole search, and a dozen of them for a model that fits nowhere took minutes): ~4 s of work, as
# much as llama3-405b on 8 x rtx4090 needs to find its 128 GPUs. No one search may hold more than
# FIX_TABLE_ROWS candidates: evaluated, 2M (the search's own cap) take over 1 GB.
FIX_ROWS = 6_500_000
FIX_TABLE_ROWS = 1_000_000
NEAREST_BATCHES = 4
GPU_GROWTH_LIMIT = 64


def _search(question: Question, counts: Sequence[int], cons: Constraints) -> tuple[Evaluation, int] | None:
    ranking = rank_space(question, counts, cons, 1)
    return (ranking.evaluation, ranking.best[0]) if ranking.groups else None


def certainly_blocked(fix: Question, gpus: int) -> bool:
    """`fix` fixes every knob some limit reads (its data-parallel degree included, which the GPU
    count and a fixed TP, PP and CP decide), at values that break it: then no candidate of `fix`
    on `gpus` GPUs meets that limit, since a limit reads its knobs, the model and the cluster and
    nothing else (`limits.Limit`). Such a fix needs no search."""
    values = {k: v for k, v in fix.given.items() if k in INDEX}
    if "dp" not in values and all(d in values for d in ("tp", "pp", "cp")):
        split = int(str(values["tp"])) * int(str(values["pp"])) * int(str(values["cp"]))
        if gpus % split:
            return True  # no data-parallel degree fills the count
        values["dp"] = gpus // split
    try:
        row = Layouts.of([Layout.model_validate(values)])
    except ValueError:  # values a layout refuses: let the search say what it finds
        return False
    target = Target(fix.model, fix.cluster, fix.stack)
    return any(set(lim.knobs) <= values.keys() and bool(lim.violated(target, row)[0]) for lim in LIMITS)


def _best(question: Question, counts: Sequence[int], cons: Constraints) -> tuple[Evaluation, int] | None:
    if all(certainly_blocked(question, n) for n in counts):
        return None
    try:
        return _search(question, counts, cons)
    except SpaceTooLarge:  # a fix is a suggestion: one too large to search is no reason to refuse the answer
        return None


def _in_framework(question: Question, given: dict[str, object], framework: Framework) -> Question | None:
    """The question under another framework, with the stack settings the user changed from the
    current framework's defaults kept (multi-token prediction, the combined 1F1B, recompute
    modules, ...: they change what is trained or how); None where that framework cannot run them
    (`frameworks.stack_unsupported`), as its own question would refuse them."""
    ours, default = question.stack.settings(), default_stack(question.framework).settings()
    changed = {k: v for k, v in ours.items() if v != default[k]}
    if stack_unsupported(framework, default_stack(framework).with_overrides(**changed)):
        return None
    return Question.of(question.model, question.cluster, {**given, "framework": framework}, changed,
                       question.mem_headroom, question.bounds)  # fmt: skip


def _words(found: tuple[Evaluation, int]) -> str:
    ev, i = found
    lay = ev.layouts.at(i)
    return f"{layout_words(lay)} on {lay.gpus} GPUs, {fmt_seconds(float(ev.step_time_s[i]))} per step"


def _without(question: Question, name: str) -> Question:
    given = {k: v for k, v in question.given.items() if k != name}
    return Question(question.model, question.cluster, given, question.stack, question.mem_headroom, question.bounds)


def _with(question: Question, **values: object) -> Question:
    given = {**question.given, **values}
    return Question(question.model, question.cluster, given, question.stack, question.mem_headroom, question.bounds)


def _blocked_only_by(ev: Evaluation, name: str) -> np.ndarray:
    """Candidates whose one violated limit is `name` (memory included among the limits)."""
    others = np.zeros(len(ev), dtype=bool)
    for check, mask in ev.checks.items():
        if check != name:
            others |= mask
    return np.asarray(ev.checks[name] & ~others) if name in ev.checks else np.zeros(len(ev), dtype=bool)


def fixes_for(question: Question, counts: Sequence[int], ev: Evaluation, cons: Constraints) -> list[str]:
    """Changes that make some layout of `counts` GPUs (or of more) qualify."""
    with row_budget(FIX_ROWS, FIX_TABLE_ROWS):
        return _fixes_for(question, counts, ev, cons)


def _fixes_for(question: Question, counts: Sequence[int], ev: Evaluation, cons: Constraints) -> list[str]:
    out: list[str] = []
    for name in [n for n in SEARCHED if n in question.given]:
        found = _best(_without(question, name), counts, cons)
        if found:
            out.append(f"leave {name.replace('_', '-')} to the search (not {question.given[name]}): {_words(found)}")
    batch = int(question.given["global_batch"])
    # Another batch only helps where divisibility is what blocks a layout (the cheap test first:
    # every batch tried is a whole search).
    dps = sorted({int(d) for d in np.unique(ev.layouts.dp[_blocked_only_by(ev, "batch")])}) if len(ev) else []
    lowest, highest = bounds("global_batch")  # a suggestion the options would refuse is no fix
    nearby = sorted({m * d for d in dps for m in (batch // d, batch // d + 1) if m * d != batch
                     and lowest <= m * d <= highest}, key=lambda b: (abs(b - batch), b))[:NEAREST_BATCHES]  # fmt: skip
    for candidate in nearby:
        found = _best(_with(question, global_batch=candidate), counts, cons)
        if found:
            out.append(f"global batch {candidate} instead of {batch}: {_words(found)}")
            break
    top = max(counts)
    if "dp" not in question.given and top < MAX_GPUS:
        # The counts clusters are built in (2^a and 3 x 2^a whole nodes, `gpu_count_domain`):
        # two per doubling, so at most a dozen searches up to 64x. A count too large to search
        # ends the scan: no later count could be called the smallest that fits.
        with contextlib.suppress(SpaceTooLarge):
            for more in gpu_count_domain(top + 1, min(top * GPU_GROWTH_LIMIT, MAX_GPUS),
                                         question.cluster.gpus_per_node):  # fmt: skip
                found = None if certainly_blocked(question, more) else _search(question, [more], cons)
                if found:
                    out.append(f"{more} GPUs (the smallest 2^a or 3 x 2^a count above {top} that fits): "
                               f"{_words(found)}")  # fmt: skip
                    break
    for framework in Framework:
        if framework == question.framework or len(out) >= MAX_FIXES:
            continue
        other = _in_framework(question, {k: v for k, v in question.given.items() if k != "framework"}, framework)
        found = _best(other, counts, cons) if other else None
        if found:
            out.append(f"framework {framework}: {_words(found)}")
    return out[:MAX_FIXES]


def fixes_for_plan(question: Question, gpus: int, plan: dict[str, int], cons: Constraints) -> list[str]:
    """For an infeasible plan (its degrees in `plan`): the same, keeping the plan's TP/PP/CP."""
    with row_budget(FIX_ROWS, FIX_TABLE_ROWS):
        return _fixes_for_plan(question, gpus, plan, cons)


def _fixes_for_plan(question: Question, gpus: int, plan: dict[str, int], cons: Constraints) -> list[str]:
    planned = question.fixed(**plan)
    out: list[str] = []
    for name in [n for n in SEARCHED if n in question.given]:
        found = _best(_without(planned, name), [gpus], cons)
        if found:
            out.append(f"leave {name.replace('_', '-')} to the search (not {question.given[name]}): {_words(found)}")
    batch = int(question.given["global_batch"])
    unit = plan["dp"] * int(str(question.given.get("micro_batch", 1)))
    lowest, highest = bounds("global_batch")  # a suggestion the options would refuse is no fix
    nearby = sorted({m * unit for m in (batch // unit, batch // unit + 1) if m * unit != batch
                     and lowest <= m * unit <= highest}, key=lambda b: (abs(b - batch), b))  # fmt: skip
    for candidate in nearby:
        found = _best(_with(planned, global_batch=candidate), [gpus], cons)
        if found:
            out.append(f"global batch {candidate} instead of {batch}: {_words(found)}")
            break
    for factor in (2, 3, 4, 6, 8, 16):
        more = gpus * factor
        if more > MAX_GPUS:  # a count the options would refuse is no fix
            break
        bigger = question.fixed(**{d: plan[d] for d in DEGREES if d in plan and d != "dp"})
        found = _best(bigger, [more], cons)
        if found:
            out.append(f"DP x{factor} ({more} GPUs): {_words(found)}")
            break
    for framework in Framework:
        if framework == question.framework or len(out) >= MAX_FIXES:
            continue
        other = _in_framework(planned, {k: v for k, v in planned.given.items() if k != "framework"}, framework)
        found = _best(other, [gpus], cons) if other else None
        if found:
            out.append(f"framework {framework}: {_words(found)}")
    return out[:MAX_FIXES]

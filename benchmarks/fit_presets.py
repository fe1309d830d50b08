"""Fit the per-hardware and per-stack constants to the published runs, reproducibly.

    python benchmarks/fit_presets.py [--write]

Two steps, each a constant of the hardware or of the stack, never of a run or a source:
  1. Per hardware, on its dense Megatron-family runs (NeMo, Megatron-Bridge, Megatron-LM: the
     Transformer Engine kernels the presets' efficiencies describe): `paraplan calibrate --fit`
     the GEMM efficiency (BF16, and FP8 where FP8 runs exist) and the attention efficiency (by
     calibrate's objective: Huber's loss on the log errors, each source weighing the same). A
     constant the die's runs do not determine (`calibrate`'s standard error) is fitted all the
     same, as calibrate fits it, but the preset's source line says so (and where it started,
     `starting_values`, never the preset's stored fit), and no other die's prior averages it.
     Mixture-of-experts runs are left out of this fit: their router, token permutation and
     grouped-GEMM costs are not kernel efficiencies of the hardware, and fitting them in would
     bend every dense prediction (they remain validation runs, with their own error bars).
     A die's variants (`SAME_DIE`: H200, H800, the 96 GB H100; the A800, the 40 GB A100; GB200)
     are the same chip in another system, so their runs join the die's fit, each predicted on its
     own preset (its links, memory and power: `calibration.Presets`), and they take the fitted
     fractions; a die of a fitted die's architecture with fewer than MIN_RUNS
     such runs takes that die's fit (`SAME_ARCH`: Blackwell Ultra B200's, e.g. in a fold of the
     cross-validation without its runs); a die with a published MAMF but no such runs (MI300X)
     takes its MAMF share times the fitted dies' mean ratio of constant to MAMF share (`prior`).
  2. Per stack, on the runs of every other framework over all hardware: the kernel throughput
     relative to Megatron's (`cost_models.frameworks.KERNEL_EFFICIENCY`), by a one-dimensional
     search minimizing the mean absolute log error. Then, on each preset the stack ran on
     MIN_STACK_RUNS times, the stack's figure on that very preset (`efficiency.stack_kernel_efficiency`,
     as `paraplan calibrate` fits it there), with the preset's constants of step 1 (its die's fit,
     or its prior): a same-die variant (another power limit, memory or links) and a die without
     Megatron-family runs (MI300X) get one from their own runs, and nothing else takes it. Where a
     stack has its own figure on a preset, the global one serves the other hardware only.
  3. Per stack, on its dropless mixture-of-experts runs over all hardware (Megatron's: the
     Megatron-Bridge, Moonlight and Mixtral rows): the host time per dispatch that sets an MoE
     layer's floor per micro-batch with the layer's dispatch count (`compute.moe_layer_ops`;
     `cost_models.frameworks.MOE_HOST_S_PER_OP`, mechanism and evidence there), by the same
     search minimizing their MAPE (`host_floor_error` says why not the log error), with the
     hardware constants of step 1 and the stacks' efficiencies of step 2. Token-drop runs (`token_drop`) have no floor
     and are left out. Stacks with fewer than MIN_STACK_RUNS such runs keep 0 (no floor). The share
     of the host time a GPU-bound layer still pays (`frameworks.MOE_HOST_EXPOSED_SHARE`) is held
     as it is: it was chosen by running this whole fit at several values (its comment).
--write puts the values into hardware_specs/presets/*.toml (with a source line saying how they
were fitted) and prints the KERNEL_EFFICIENCY and MOE_HOST_S_PER_OP tables to paste into
cost_models/frameworks.py.
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import sys
import tomllib
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# MIN_STACK_RUNS: DeepSpeed's figure rests on MT-NLG's three runs: say so wherever it is quoted
from paraplan.calibration import MIN_STACK_RUNS, Run, calibrate, load_runs, with_constants  # noqa: E402
from paraplan.cost_models import frameworks  # noqa: E402
from paraplan.cost_models.layout import Framework  # noqa: E402
from paraplan.fit_parameters import DETERMINED_SHARE, PARAMETERS, STACK_PREFIX  # noqa: E402
from paraplan.hardware_specs.loader import load_cluster, preset_names  # noqa: E402
from paraplan.hardware_specs.schema import Cluster, StackKernelEfficiency  # noqa: E402

RUNS = REPO / "benchmarks" / "data" / "runs_public.csv"
PRESETS = REPO / "hardware_specs" / "presets"
# The preset each fitted die's constants are written from; its variants are the other presets of
# its `family` (the same field `calibrate` reads to fit a variant's runs on their own preset).
DIE_PRESETS = ("h100-sxm", "a100-80g", "b200", "gb300")
SAME_DIE = {
    main: tuple(n for n in preset_names() if n != main and load_cluster(n).gpu_family == load_cluster(main).gpu_family)
    for main in DIE_PRESETS
}
# Another die of the same architecture: fitted on its own runs where it has MIN_RUNS of them, else
# it (and its die variants) take the architecture's fitted die. Blackwell Ultra (GB300 NVL72, DGX/HGX
# B300) is a second Blackwell die (compute capability 10.3 against B200's 10.0) with the same
# fifth-generation tensor cores and the same rated dense BF16/FP8 per GPU as B200/GB200
# (hardware_specs/presets/b300.toml, gb300.toml); Megatron-Bridge's tables run it faster than
# GB200 at the same rating (its 1,400 W limit, its faster softmax exponent), so its own runs decide.
SAME_ARCH = {"b200": ("gb300",)}
MIN_RUNS = 4
# The MAMF share of each die's BF16 peak: stas00/ml-engineering compute/accelerator/README.md
# @744d01e1, 'Maximum Achievable Matmul FLOPS' BF16 table, over the preset's peak.
MAMF_SHARE: dict[str, float] = {
    "a100-80g": 0.869,  # 271.2 / 312
    "h100-sxm": 0.803,  # 794.5 / 989
    "b200": 0.776,  # 1745.0 / 2250
    "mi300x": 0.511,  # 668.4 / 1307.4 (ROCm 6.3, PYTORCH_TUNABLEOP_ENABLED=1)
}
# Attention at 0.6 of the GEMM share where no die's runs determine it: FlashAttention-2 reaches
# 50-73% of A100 peak (Dao 2023, arXiv:2307.08691).
ATTENTION_PER_GEMM = 0.6
# What a die's fit starts from, where the die has a MAMF figure (`starting_values`), in words for
# the source line of a constant the runs leave about there (`undetermined_note`).
STARTING_ESTIMATES: dict[str, str] = {
    "gemm_max": "the die's MAMF share (its best measured matmul over its peak)",
    "attention": f"an estimate: {ATTENTION_PER_GEMM} of the die's MAMF share, as FlashAttention-2 reaches 50-73% "
    "of A100 peak forward and backward (Dao 2023, arXiv:2307.08691, abstract), taken low as the paper's figures "
    "are kernel benchmarks",
}


def starting_values(die: str) -> dict[str, float]:
    """Where a die's fit starts: `prior` with nothing fitted (its MAMF share, attention at
    ATTENTION_PER_GEMM of it), not the preset's stored constants. Those are the last full fit's, so
    a cross-validation fold started there would keep, for a constant its runs do not determine, the
    value the held-out source set (the A100's attention without FlagPerf's A800 rows). A die
    without a MAMF figure (GB300) starts from its preset."""
    return prior(die, {}) or {}


def prior(
    die: str, fitted: dict[str, dict[str, float]], undetermined: dict[str, dict[str, float]] | None = None
) -> dict[str, float] | None:
    """The constants of a die without enough Megatron-family runs (in a fold, or at all): its MAMF
    share times the mean ratio (fitted constant / MAMF share) over the dies whose runs determined
    that constant (none in `undetermined`).

    MAMF is the best single-shape matmul of a short benchmark; in training no fitted die reaches
    it (the fits land at 0.70-0.89 of it: model shapes, sustained power-limited clocks, kernels
    sharing the GPU with collectives). Taking the MAMF share itself would make a die without runs
    look faster, relative to its peak, than every die with runs. So that a held-out source never
    predicts itself, a fold only uses what it fitted; with nothing fitted, the MAMF share and
    attention at ATTENTION_PER_GEMM of it."""
    if die not in MAMF_SHARE:
        return None
    share = MAMF_SHARE[die]
    out = {}
    for name, alone in (("gemm_max", share), ("attention", ATTENTION_PER_GEMM * share)):
        ratios = [fitted[d][name] / MAMF_SHARE[d] for d in determining_dies(name, fitted, undetermined) if d != die]
        out[name] = round(share * statistics.fmean(ratios), 3) if ratios else alone
    return out


def fit_sharers(hardware: str, fitted: dict[str, dict[str, float]]) -> list[tuple[str, str]]:
    """(preset, why) for each preset without a fit of its own that takes fitted preset `hardware`'s."""
    same_arch = [die for die in SAME_ARCH.get(hardware, ()) if die not in fitted]
    return [(other, "the same die") for other in SAME_DIE.get(hardware, ()) if other not in fitted] + [
        (other, "the same architecture") for die in same_arch for other in (die, *SAME_DIE.get(die, ()))
    ]


def main_preset(hardware: str) -> str:
    """The die preset whose fit `hardware` takes (`SAME_DIE`); itself where none."""
    return next((main for main, others in SAME_DIE.items() if hardware in others), hardware)


def determining_dies(
    name: str, fitted: dict[str, dict[str, float]], undetermined: dict[str, dict[str, float]] | None
) -> list[str]:
    """The fitted dies with a MAMF figure whose runs determined constant `name` (sorted)."""
    loose = undetermined or {}
    return [d for d in sorted(fitted) if d in MAMF_SHARE and name in fitted[d] and name not in loose.get(d, {})]


def die_values(
    die: str, fitted: dict[str, dict[str, float]], undetermined: dict[str, dict[str, float]] | None = None
) -> dict[str, float] | None:
    """The die's own fit, else its architecture's fitted die's (`SAME_ARCH`), else its `prior`."""
    arch = next((main for main, others in SAME_ARCH.items() if die in others), None)
    return fitted.get(die) or (fitted.get(arch) if arch else None) or prior(die, fitted, undetermined)


def fits_hardware(run: Run) -> bool:
    """A run the hardware constants are fitted on (step 1 of the module docstring)."""
    return run.framework == Framework.MEGATRON and run.model.num_experts <= 1


def die_runs(runs: list[Run]) -> dict[str, list[Run]]:
    """The runs each die's fit takes, by its main preset: the dense Megatron-family runs of the
    preset and of its variants (each predicted on its own preset)."""
    by_die: dict[str, list[Run]] = {}
    for run in runs:
        if fits_hardware(run):
            by_die.setdefault(main_preset(run.hardware), []).append(run)
    return by_die


def fit_hardware(
    runs: list[Run], quiet: bool = False
) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    """Per hardware with enough Megatron-family runs: the fitted efficiency constants, and those of
    them the runs do not determine, each with its standard error (`Fit.undetermined`): fitted all
    the same (calibrate's policy with more runs than constants), they stay about where they
    started (`starting_values`), which the preset's source line says, and no prior averages
    them."""
    out: dict[str, dict[str, float]] = {}
    loose: dict[str, dict[str, float]] = {}
    for hardware, mine in sorted(die_runs(runs).items()):
        if len(mine) < MIN_RUNS:
            continue
        names = ["gemm_max", "attention"]
        result = calibrate(with_constants(load_cluster(hardware), starting_values(hardware)), mine, fit_names=names)
        out[hardware] = result.constants
        if result.undetermined:
            loose[hardware] = dict(result.undetermined)
        if quiet:
            continue
        print(f"{hardware}: {len(mine)} Megatron-family runs, fit {', '.join(names)}: "
              + ", ".join(f"{k} {v:.3f}" for k, v in out[hardware].items())
              + "".join(f"; {k} not determined (standard error {e:.3f})" for k, e in result.undetermined.items())
              + f"; MAPE {result.mape_before:.1%} -> {result.mape_after:.1%}"
              + (f"; ON A BOUND: {result.at_bound}" if result.at_bound else ""))  # fmt: skip
    return out, loose


def with_values(cluster: Cluster, values: dict[str, float]) -> Cluster:
    """The preset with this fit's constants and only this fit's stack figures (a preset written by
    an earlier fit carries its figures; a fold must not see them)."""
    eff = cluster.efficiency.model_copy(update={"stack_kernel_efficiency": StackKernelEfficiency()})
    return with_constants(cluster.model_copy(update={"efficiency": eff}), values)


def _mean_error_with(runs: list[Run], clusters: dict[str, Cluster], framework: Framework,
                     setting: Callable[[frameworks.FrameworkSpec], frameworks.FrameworkSpec],
                     error: Callable[[float], float]) -> float:  # fmt: skip
    """Mean of `error(predicted / measured)` over the runs, with the stack's FrameworkSpec changed
    by `setting` for the duration."""
    from paraplan.calibration import chosen_layouts, predict

    saved = frameworks.FRAMEWORKS[framework]
    frameworks.FRAMEWORKS[framework] = setting(saved)
    try:
        errors = []
        for run in runs:
            cluster = clusters[run.hardware]
            layout = chosen_layouts([run], cluster)[0]
            errors.append(error(float(predict([run], [layout], cluster)[0]) / run.measured_s))
        return statistics.fmean(errors)
    finally:
        frameworks.FRAMEWORKS[framework] = saved


def stack_error(runs: list[Run], clusters: dict[str, Cluster], framework: Framework, efficiency: float) -> float:
    """Mean |log(predicted / measured)| over the stack's runs at this kernel efficiency."""
    return _mean_error_with(runs, clusters, framework, lambda spec: replace(spec, kernel_efficiency=efficiency),
                            lambda r: abs(math.log(r)))  # fmt: skip


def golden_min(error: Callable[[float], float], lo: float, hi: float, steps: int = 18) -> float:
    """Golden-section search of `error`'s minimum in (lo, hi): the middle of the last bracket."""
    ratio = (math.sqrt(5) - 1) / 2
    a, b = hi - ratio * (hi - lo), lo + ratio * (hi - lo)
    fa, fb = error(a), error(b)
    for _ in range(steps):
        if fa < fb:
            hi, b, fb = b, a, fa
            a = hi - ratio * (hi - lo)
            fa = error(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + ratio * (hi - lo)
            fb = error(b)
    return (a + b) / 2


def preset_stack_error(runs: list[Run], clusters: dict[str, Cluster], framework: Framework, efficiency: float) -> float:
    """Mean |log(predicted / measured)| over the runs with the stack's figure on their hardware
    (`efficiency.stack_kernel_efficiency`) at this value."""
    own = {
        h: with_constants(clusters[h], {STACK_PREFIX + framework.label: efficiency}) for h in {r.hardware for r in runs}
    }
    return _mean_error_with(runs, {**clusters, **own}, framework, lambda spec: spec, lambda r: abs(math.log(r)))


def fit_preset_stacks(
    runs: list[Run], clusters: dict[str, Cluster], quiet: bool = False
) -> dict[str, dict[str, float]]:
    """Step 2b: each stack's kernel efficiency on each preset it ran on MIN_STACK_RUNS times, from
    its runs on that very preset (as `paraplan calibrate` fits it there), with the preset's
    hardware constants of step 1 (its die's fit, or its prior). Keyed by preset: a same-die variant
    differs in what a stack meets there (power limit, memory, links), so a figure holds on the
    preset its runs ran on and nowhere else. With the 700 W H100 SXM's torchtitan figure (0.813)
    the 96 GB 500 W H100's torchtitan rows went from 6.1% to 7.3% MAPE (measured when that preset
    still had the SXM's peaks; on its own runs it then fit 0.841, 0.911 with its 500 W peaks)."""
    own: dict[str, dict[str, float]] = {}
    for preset in sorted(clusters):
        for framework in (Framework.DEEPSPEED, Framework.TORCHTITAN):
            mine = [r for r in runs if r.hardware == preset and r.framework == framework]
            if len(mine) < MIN_STACK_RUNS:
                continue
            bounds = PARAMETERS[STACK_PREFIX + framework.label]
            error = partial(preset_stack_error, mine, clusters, framework)
            value = round(golden_min(error, bounds.lower, bounds.upper), 3)
            if not quiet:
                before, after = (preset_stack_error(mine, clusters, framework, e) for e in
                                 (frameworks.FRAMEWORKS[framework].kernel_efficiency, value))  # fmt: skip
                print(f"{preset}: {len(mine)} {framework} runs, kernel efficiency on it {value:.3f} "
                      f"(mean |log error| {before:.3f} -> {after:.3f})")  # fmt: skip
            own.setdefault(preset, {})[STACK_PREFIX + framework.label] = value
    return own


def fit_stack(runs: list[Run], clusters: dict[str, Cluster], framework: Framework) -> float:
    """Golden-section search of the kernel efficiency in its calibration range (`fit_parameters`)."""
    bounds = PARAMETERS[STACK_PREFIX + framework.label]
    return round(golden_min(lambda e: stack_error(runs, clusters, framework, e), bounds.lower, bounds.upper), 3)


def fits_host_floor(run: Run, framework: Framework) -> bool:
    """A run the stack's MoE host floor is fitted on (step 3 of the module docstring)."""
    return run.framework == framework and run.model.num_experts > 1 and not run.stack.get("token_drop", False)


def host_floor_error(runs: list[Run], clusters: dict[str, Cluster], framework: Framework, per_op_s: float) -> float:
    """Mean |predicted / measured - 1| (the MAPE `benchmarks/accuracy.py` reports) over the runs
    with this host time per dispatch for the stack (each MoE layer's floor: it times the layer's
    dispatches).

    Not the kernel efficiencies' mean |log error|: a floor only raises predictions, and under the
    log error the runs predicted far too fast (-60% is |log| 0.92, +60% only 0.47) pull it up
    until those are fixed and the other MoE runs overshoot. On the runs of 2026-12 the log error
    fits 16.3 ms and leave-one-source-out MAPE gets worse (18.6% -> 19.0%); this error fitted 11.9 ms there
    (18.6% -> 16.2%), each Megatron-Bridge release then counted as its own source (both with one
    floor per layer, before the floor counted dispatches)."""
    return _mean_error_with(runs, clusters, framework, lambda spec: replace(spec, moe_host_s_per_op=per_op_s),
                            lambda r: abs(r - 1.0))  # fmt: skip


# The search range of the host time per dispatch: 0 to 1 ms, past any fitted value (a layer of
# about 100 dispatches, `compute.moe_layer_ops`, near 10 ms per layer in the evidence of
# frameworks.MOE_HOST_S_PER_OP, is about 0.1 ms per dispatch).
HOST_PER_OP_RANGE_S = (0.0, 0.001)


def fit_host_floor(runs: list[Run], clusters: dict[str, Cluster], framework: Framework) -> float:
    """Golden-section search of the stack's MoE host time per dispatch in HOST_PER_OP_RANGE_S, in
    seconds (rounded to 0.1 us)."""
    lo, hi = HOST_PER_OP_RANGE_S
    return round(golden_min(lambda h: host_floor_error(runs, clusters, framework, h), lo, hi), 7)


def write_preset(
    name: str, values: dict[str, float], basis: str, label: str = "fitted", stacks_basis: str = ""
) -> None:
    """Write the fitted `values` into the preset's [efficiency] table, with a source line saying
    how they were fitted (`basis`), and its stacks' figures (STACK_PREFIX keys) into its
    [efficiency.stack_kernel_efficiency] table, with a source line of their own (`stacks_basis`)."""
    path = PRESETS / f"{name}.toml"
    text = path.read_text()
    section = text.index("[efficiency]")
    end = text.index("\n[", section + 1)
    block = text[section:end]
    stacks = {k.removeprefix(STACK_PREFIX): v for k, v in values.items() if k.startswith(STACK_PREFIX)}
    values = {k: v for k, v in values.items() if not k.startswith(STACK_PREFIX)}
    for key, value in values.items():
        line = f"{key} = {value:.3f}"
        if re.search(rf"^{key} = ", block, flags=re.M):
            block = re.sub(rf"^{key} = .*$", line, block, count=1, flags=re.M)
        else:
            block = block.replace("[efficiency]\n", f"[efficiency]\n{line}\n", 1)
    block = re.sub(r'\n    "(fitted|transferred): [^\n]*",', "", block)
    for key in values:  # an older note about a fitted value would contradict the new one
        block = re.sub(rf'\n    "{key} [0-9][^\n]*",', "", block)
    notes = [f"{label}: {', '.join(f'{k} {v:.3f}' for k, v in values.items())} {basis}"] if values else []
    if stacks:
        figures = ", ".join(f"{STACK_PREFIX}{k} {v:.3f}" for k, v in stacks.items())
        notes.append(f"fitted: {figures} by `python benchmarks/fit_presets.py` (paraplan calibrate){stacks_basis}")
    block = block.replace("sources = [", "sources = [" + "".join(f'\n    "{note}",' for note in notes), 1)
    # the stacks' figures on this die: a table of their own after [efficiency], replaced whole
    rest = re.sub(r"^\n\[efficiency\.stack_kernel_efficiency\]\n(?:[a-z]+ = [^\n]*\n?)*", "", text[end:])
    table = "".join(f"{k} = {v:.3f}\n" for k, v in stacks.items())
    block = f"{block.rstrip()}\n\n[efficiency.stack_kernel_efficiency]\n{table}" if table else block
    text = text[:section] + block + rest
    tomllib.loads(text)
    path.write_text(text)


def fold_cluster(
    hardware: str,
    fitted: dict[str, dict[str, float]],
    own: dict[str, dict[str, float]] | None = None,
    undetermined: dict[str, dict[str, float]] | None = None,
) -> Cluster:
    """The preset with the constants of its die from this fit (or the die's `prior`, from the
    constants the fitted dies' runs determined: not `undetermined`) and the stack figures fitted
    on that very preset (`own`, from `fit_preset_stacks`); a preset without constants is used as
    it is (without stack figures of an earlier fit)."""
    values = die_values(main_preset(hardware), fitted, undetermined) or {}
    return with_values(load_cluster(hardware), {**values, **(own or {}).get(hardware, {})})


@dataclass(frozen=True)
class FitResult:
    fitted: dict[str, dict[str, float]]  # per fitted die, its hardware constants (step 1)
    stacks: dict[Framework, float]  # per stack, its global kernel efficiency (step 2)
    own: dict[str, dict[str, float]]  # per preset, the stacks' figures on it (step 2b)
    clusters: dict[str, Cluster]  # the presets the runs name, with this fit's constants
    floors: dict[Framework, float]  # per stack, the MoE host time per dispatch (step 3)
    # per fitted die, the constants its runs do not determine, with their standard errors
    undetermined: dict[str, dict[str, float]] = field(default_factory=dict)

    def cluster(self, hardware: str) -> Cluster:
        """The preset with this fit's constants: its own, or its die's (or prior) for a preset
        none of the fitted runs named (`fold_cluster`)."""
        return self.clusters.get(hardware) or fold_cluster(hardware, self.fitted, self.own, self.undetermined)


def fit_all(runs: list[Run], quiet: bool = False) -> FitResult:
    """The whole procedure. The stack figures are left in `frameworks.FRAMEWORKS` afterwards only
    by `apply_stacks`."""
    fitted, undetermined = fit_hardware(runs, quiet)
    hardware_named = {r.hardware for r in runs if r.hardware}
    clusters = {hardware: fold_cluster(hardware, fitted, None, undetermined) for hardware in hardware_named}
    stacks = {fw: 1.0 for fw in (Framework.DEEPSPEED, Framework.TORCHTITAN)}
    for framework, mine in _stack_runs(runs, clusters, stacks, lambda r, fw: r.framework == fw):
        stacks[framework] = fit_stack(mine, clusters, framework)
        if not quiet:
            before, after = (stack_error(mine, clusters, framework, e) for e in (1.0, stacks[framework]))
            print(f"{framework}: {len(mine)} runs, kernel efficiency {stacks[framework]:.3f} "
                  f"(mean |log error| {before:.3f} -> {after:.3f})")  # fmt: skip
    saved = apply_stacks(stacks)
    try:
        own = fit_preset_stacks(runs, clusters, quiet)
    finally:
        frameworks.FRAMEWORKS.update(saved)
    clusters = {hardware: fold_cluster(hardware, fitted, own, undetermined) for hardware in clusters}
    floors = fit_floors(runs, clusters, stacks, quiet)
    return FitResult(fitted, stacks, own, clusters, floors, undetermined)


def _stack_runs(runs: list[Run], clusters: dict[str, Cluster], stacks: dict[Framework, float],
                selects: Callable[[Run, Framework], bool]) -> list[tuple[Framework, list[Run]]]:  # fmt: skip
    """Each stack of `stacks` with the runs `selects` picks for it on fitted hardware, where there
    are at least MIN_STACK_RUNS of them (fewer: no evidence, the stack keeps its default)."""
    chosen = ((fw, [r for r in runs if selects(r, fw) and r.hardware in clusters]) for fw in stacks)
    return [(fw, mine) for fw, mine in chosen if len(mine) >= MIN_STACK_RUNS]


def fit_floors(
    runs: list[Run], clusters: dict[str, Cluster], stacks: dict[Framework, float], quiet: bool = False
) -> dict[Framework, float]:
    """Step 3: each stack's MoE host time per dispatch, with this fit's kernel efficiencies in place."""
    floors = {fw: 0.0 for fw in Framework}
    saved = apply_stacks(stacks)
    try:
        for framework, mine in _stack_runs(runs, clusters, floors, fits_host_floor):
            floors[framework] = fit_host_floor(mine, clusters, framework)
            if not quiet:
                before, after = (host_floor_error(mine, clusters, framework, h) for h in (0.0, floors[framework]))
                print(f"{framework}: {len(mine)} dropless MoE runs, host time {floors[framework] * 1e6:.1f} us per dispatch "
                      f"(MAPE {before:.1%} -> {after:.1%})")  # fmt: skip
    finally:
        frameworks.FRAMEWORKS.update(saved)
    return floors


def apply_stacks(
    stacks: dict[Framework, float], floors: dict[Framework, float] | None = None
) -> dict[Framework, frameworks.FrameworkSpec]:
    """Set the stacks' kernel efficiencies (1.0 for a stack the fold could not fit) and, when
    given, their MoE host times per dispatch in `frameworks.FRAMEWORKS`; returns the old entries."""
    saved = dict(frameworks.FRAMEWORKS)
    for framework, value in stacks.items():
        frameworks.FRAMEWORKS[framework] = replace(frameworks.FRAMEWORKS[framework], kernel_efficiency=value)
    for framework, floor in (floors or {}).items():
        frameworks.FRAMEWORKS[framework] = replace(frameworks.FRAMEWORKS[framework], moe_host_s_per_op=floor)
    return saved


def stacks_basis(preset: str, own: dict[str, float], runs: list[Run]) -> str:
    """Where a preset's stack figures come from, for their source line."""
    counts = {
        key: sum(1 for r in runs if r.hardware == preset and STACK_PREFIX + r.framework.label == key) for key in own
    }
    parts = [f"{key} on the {n} {key.removeprefix(STACK_PREFIX)} runs of {preset}" for key, n in counts.items()]
    return (f" on the stack's own runs on this very preset ({'; '.join(parts)} in benchmarks/data/runs_public.csv), "
            "with the hardware constants above")  # fmt: skip


def undetermined_note(hardware: str, values: dict[str, float], errors: dict[str, float]) -> str:
    """The source line's words for the constants these runs do not determine (`fit_hardware`):
    each stays about where the fit started, named with its standard error and, where known, what
    that start is (`STARTING_ESTIMATES`)."""
    parts = []
    for name, error in errors.items():
        start = STARTING_ESTIMATES.get(name) if name in starting_values(hardware) else None
        parts.append(f"{name} {values[name]:.3f} is not determined by them (calibrate's standard error {error:.3f}, "
                     f"over {DETERMINED_SHARE} of its range): the fit leaves it about where it started"
                     + (f", {start}" if start else ""))  # fmt: skip
    return "".join(f"; {part}" for part in parts)


def die_runs_words(hardware: str, runs: list[Run]) -> str:
    """The runs a die's fit took, counted per preset: its own and its variants' (each predicted on
    its own preset), e.g. '28 dense Megatron-family runs of a100-80g (21) and a800-80g (7)'."""
    counts = Counter(r.hardware for r in die_runs(runs).get(hardware, []))
    total = sum(counts.values())
    if set(counts) <= {hardware}:
        return f"{total} dense Megatron-family runs of {hardware}"
    each = [f"{name} ({n})" for name, n in sorted(counts.items(), key=lambda kv: (kv[0] != hardware, kv[0]))]
    return f"{total} dense Megatron-family runs of {', '.join(each[:-1])} and {each[-1]} (the same die)"


def write_all(result: FitResult, runs: list[Run]) -> None:
    """Every preset the fit sets: each fitted die, the presets that share its fit, the dies that
    take their prior, and any other preset with stack figures of its own."""
    fitted, own = result.fitted, result.own
    bases: dict[str, tuple[dict[str, float], str, str]] = {}
    for hardware, values in fitted.items():
        basis = (f"by `python benchmarks/fit_presets.py` (paraplan calibrate) on the {die_runs_words(hardware, runs)} "
                 "in benchmarks/data/runs_public.csv"
                 + undetermined_note(hardware, values, result.undetermined.get(hardware, {})))  # fmt: skip
        bases[hardware] = (values, basis, "fitted")
        for other, why in fit_sharers(hardware, fitted):
            bases[other] = (values, f"taken from {hardware} ({why}: its variants share the main preset's fit) {basis}",
                            "fitted")  # fmt: skip
    shares = "; ".join(
        f"{name}: " + ", ".join(f"{d} {MAMF_SHARE[d]}" for d in determining_dies(name, fitted, result.undetermined))
        for name in ("gemm_max", "attention")
    )
    for die in sorted(set(MAMF_SHARE) - set(fitted)):
        bases[die] = (prior(die, fitted, result.undetermined) or {},
                      f"= its MAMF share {MAMF_SHARE[die]} x the mean over the dies that fitted it of fitted constant / MAMF "
                      f"share ({shares}), by `python benchmarks/fit_presets.py` (`prior`): {die} has no Megatron-family runs "
                      "to fit", "transferred")  # fmt: skip
    # any other preset with stack figures, its own now or from an earlier fit (which this clears)
    for path in sorted(PRESETS.glob("*.toml")):
        held = "stack_kernel_efficiency" in tomllib.loads(path.read_text()).get("efficiency", {})
        if path.stem not in bases and (path.stem in own or held):
            bases[path.stem] = ({}, "", "fitted")
    for preset, (values, basis, label) in bases.items():
        mine = own.get(preset, {})
        write_preset(preset, {**values, **mine}, basis, label, stacks_basis(preset, mine, runs))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    runs = load_runs(RUNS)
    result = fit_all(runs)
    if args.write:
        write_all(result, runs)
        print("KERNEL_EFFICIENCY for cost_models/frameworks.py:", {str(k): v for k, v in result.stacks.items()})
        print("MOE_HOST_S_PER_OP for cost_models/frameworks.py:", {str(k): v for k, v in result.floors.items()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

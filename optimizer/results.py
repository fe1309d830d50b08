"""The results of every command, as pydantic models: what the Python API returns and what
`--json` prints (`model_dump_json`), one definition for both. `paraplan schema <command>`
prints their JSON Schema; docs/json.md explains the fields.

Sizes are bytes, times seconds, prices US dollars. Ratios are in 0..1 and name what they are a
ratio of (`peak_flops`), except `mfu_palm`, whose numerator counts attention over the whole
sequence (the PaLM convention) and can exceed the work done at very long sequences.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from paraplan.cost_models.layout import Layout, Recompute
from paraplan.fit_parameters import DETERMINED_SHARE

Finite = Field(allow_inf_nan=False)


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class MemoryOut(_Out):
    """Memory of the most loaded GPU, by term; `other` is the hardware's reserve."""

    params: float = Field(
        ge=0,
        description="weights held (bf16, plus the fp32 master copy where the framework keeps it with the parameters)",
    )
    grads: float = Field(
        ge=0, description="gradients (fp32 main grads in Megatron-LM and torchtitan, bf16 in DeepSpeed)"
    )
    optimizer: float = Field(ge=0, description="optimizer states (fp32 master copy and Adam m, v; sharded from ZeRO-1)")
    activations: float = Field(ge=0, description="activations at the stage's peak, the loss included")
    other: float = Field(ge=0, description="reserve: CUDA context, NCCL buffers, allocator fragmentation")
    total: float = Field(ge=0, description="the sum of the terms above, reserve included")
    capacity: float = Field(gt=0, description="the GPU's memory as the driver reports it")
    host_bytes_per_gpu: float = Field(default=0.0, ge=0, description="state offloaded to host memory, per GPU")


class TimeOut(_Out):
    """Exposed (not overlapped) time per step by term; the terms sum to `step_time_s`."""

    compute: float = Field(
        ge=0,
        description="GEMMs, attention and memory-bound kernels of every micro-batch, the optimizer step, and "
        "FSDP2's copies around its collectives (torchtitan at ZeRO-2/3)",
    )
    recompute: float = Field(ge=0, description="forward work run again by activation recompute")
    tp_comm: float = Field(ge=0, description="tensor-parallel collectives not hidden under GEMMs")
    cp_comm: float = Field(ge=0, description="context-parallel K/V exchange not hidden under attention")
    ep_comm: float = Field(ge=0, description="expert-parallel all-to-alls")
    pp_comm: float = Field(ge=0, description="pipeline sends and receives not hidden")
    dp_comm: float = Field(
        ge=0, description="data-parallel gradient reduction and weight gathers not hidden under compute"
    )
    bubble: float = Field(ge=0, description="pipeline fill and drain: (PP - 1) / VPP micro-batch slots")
    offload: float = Field(ge=0, description="host transfers and the CPU's optimizer step, when offloading")
    host_wait: float = Field(
        default=0.0, ge=0, description="dropless MoE layers waiting on the CPU beyond their GPU work (host-bound)"
    )


class ParamsOut(_Out):
    total: int = Field(ge=0, description="the model's parameter count as paraplan reads it")
    active: int = Field(ge=0, description="touched by one token (top-k experts); equal to total for dense models")
    mtp: int = Field(
        default=0,
        ge=0,
        description="trained multi-token-prediction modules' own parameters (stack setting mtp), "
        "not in total (DeepSeek-V3: 11.6B beside the published 671B); 0 without",
    )


class BottleneckOut(_Out):
    term: str = Field(description="the time term with the largest share")
    share: float = Field(ge=0, le=1, description="the term's share of the step time")
    explanation: str = Field(description="one sentence: what the term is and over which link")


class StageOut(_Out):
    """One pipeline stage of a replica: its GPU type, TP degree and layers."""

    hardware: str = Field(description="the GPU type of the stage")
    gpus_per_replica: int = Field(ge=1, description="GPUs of one data-parallel replica in this stage (its TP degree)")
    tp: int = Field(ge=1, description="tensor parallelism of the stage")
    layers: int = Field(ge=0, description="transformer layers on the stage")
    recompute: Recompute | None = Field(default=None, description="the stage's activation recompute (pool plans)")
    slot_s: float | None = Field(
        default=None, ge=0, description="pool plans: the stage's time per micro-batch (forward, backward, boundaries)"
    )
    memory_bytes: float | None = Field(default=None, ge=0, description="pool plans: memory of one GPU of the stage")
    capacity_bytes: float | None = Field(default=None, gt=0, description="pool plans: that GPU's memory")


class EvaluatedLayout(_Out):
    model: str = Field(description="the model's name")
    hardware: str = Field(description="the hardware preset's or file's name")
    gpus: int = Field(ge=1, description="TP x PP x DP x CP")
    layout: Layout = Field(description="every knob of the layout, the chosen ones included")
    feasible: bool = Field(description="meets every limit (memory, divisibility, the framework's rules)")
    violations: list[str] = Field(description="one sentence per violated limit; empty iff feasible")
    memory_bytes: MemoryOut = Field(description="memory of the most loaded GPU by term")
    memory_margin_bytes: float = Field(description="usable memory left after the model and the reserve")
    near_memory_limit: bool = Field(
        description="the margin is below 3% of capacity: an allocator spike may run out of memory"
    )
    step_time_s: float = Field(gt=0, description="one optimizer step of global_batch sequences")
    step_time_range_s: tuple[float, float] = Field(
        description="the step time's error bar: the errors of the validation runs nearest in regime, each predicted with its source left out of the fit"
    )
    accuracy_basis: str = Field(description="the validation runs behind step_time_range_s")
    time_s: TimeOut = Field(description="the step time by term; the terms sum to step_time_s")
    mfu: float = Field(ge=0, le=1, description="model FLOPs (causal attention) / (step x GPUs x peak_flops)")
    mfu_palm: float = Field(ge=0, description="model FLOPs counting full s x s attention (PaLM) / the same")
    hfu: float = Field(ge=0, le=1, description="model + recompute FLOPs / (step x GPUs x peak_flops)")
    peak_flops: float = Field(gt=0, description="per-GPU dense peak of the GEMM precision, the ratios' denominator")
    tflops_per_gpu: float = Field(ge=0, description="model FLOPs (causal) per second per GPU / 1e12")
    tokens_per_s: float = Field(ge=0, description="global batch x sequence length / step time")
    params: ParamsOut = Field(description="the model's parameter counts")
    bottleneck: BottleneckOut = Field(description="the largest time term and why")
    cost_usd_per_step: float | None = Field(default=None, ge=0, description="absent without a price")
    train_time_s: float | None = Field(default=None, ge=0, description="with --tokens: failure-free wall time")
    cost_usd: float | None = Field(default=None, ge=0, description="with --tokens and a price: the run's cost")
    stages: list[StageOut] | None = Field(default=None, description="per-stage split, when uneven or mixed")
    equivalent: list[Layout] = Field(default_factory=list, description="layouts with identical predictions")


class SolverOut(_Out):
    status: Literal["OPTIMAL", "INFEASIBLE"] = Field(
        description="OPTIMAL when the answer is proven best (exhaustive enumeration or CP-SAT), INFEASIBLE when no layout qualifies"
    )
    wall_s: float = Field(ge=0, description="seconds spent ranking or solving")
    candidates: int = Field(ge=0, description="layouts enumerated and evaluated")
    method: str = Field(description="enumeration (exhaustive, vectorized) or cp-sat")


class Explanation(_Out):
    best: list[str] = Field(description="why the best layout performs as it does, and what holds it back")
    runners_up: list[str] = Field(description="per runner-up, how much slower (or dearer) it is and why")


class ScalingPoint(_Out):
    """The best layout at one GPU count (a range search's or compare's scaling curve)."""

    gpus: int = Field(ge=1)
    layout: Layout = Field(description="the best layout at this count")
    step_time_s: float = Field(gt=0, description="its step time")
    train_time_s: float | None = Field(default=None, gt=0, description="with tokens; failures included in compare")
    ideal_time_s: float | None = Field(default=None, gt=0, description="with tokens, without failures")
    cost_usd: float | None = Field(default=None, ge=0, description="with tokens and a price")


class HardwareResult(_Out):
    hardware: str = Field(description="the hardware (a pool: A:N+B:M)")
    gpus: int = Field(ge=1, description="GPUs of the best layout (the count asked, when none fits)")
    solver: SolverOut = Field(description="how the answer was found")
    layouts: list[EvaluatedLayout] = Field(description="best first, all feasible")
    reason: str | None = Field(default=None, description="why no layout qualifies, with figures")
    stack: dict[str, bool | str | float | list[str]] = Field(
        default_factory=dict,
        description="the software-stack settings the prediction assumes: the framework's defaults with the "
        "--flash-attention, --loss, --fp8-recipe ... overrides applied (empty for a pool)",
    )
    fixes: list[str] = Field(default_factory=list, description="the smallest changes that would make a layout fit")
    explanation: Explanation | None = Field(default=None, description="sentences on the best layout and the runners-up")
    launch: dict[str, str] | None = Field(
        default=None, description="the best layout's launch configuration, by framework (with --emit)"
    )
    scaling: list[ScalingPoint] = Field(default_factory=list, description="the best layout of each GPU count searched")
    homogeneous: list[HardwareResult] | None = Field(
        default=None, description="for a pool: the best plan on each GPU type alone"
    )
    enumeration: HardwareResult | None = Field(
        default=None,
        description="for a pool's single-type entry: the same GPU type searched by the uniform enumeration "
        "(paraplan.optimize, every knob), for comparison with the pool's stage model",
    )
    pool: PoolOut | None = Field(default=None, description="for a pool: what it offers, uses, and whether mixing pays")


class PoolMemberOut(_Out):
    """One GPU type of a pool."""

    hardware: str = Field(description="the GPU type")
    count: int = Field(ge=0, description="GPUs of this type the pool offers")
    used: int = Field(ge=0, description="GPUs of this type the best plan uses (the rest stay idle)")


class PoolOut(_Out):
    """A pool's answer beyond its layouts: the types it mixes and what mixing gains."""

    members: list[PoolMemberOut] = Field(description="per GPU type: offered and used")
    link: str = Field(description="the link between stages on different GPU types")
    objective: str = Field(description="time (step time) or cost (dollars per step)")
    best_single: str | None = Field(default=None, description="the GPU type whose single-type plan is best")
    mixed: bool = Field(default=False, description="the best plan uses more than one GPU type")
    gain: float | None = Field(
        default=None, description="1 - the pool's best / the best single-type plan, both priced by the stage model"
    )
    gain_vs_enumeration: float | None = Field(
        default=None,
        description="1 - the pool's best / the best single-type plan of the uniform enumeration (other knobs "
        "included: context parallelism, interleaving, offload, ZeRO 2/3)",
    )
    verdict: str = Field(description="whether mixing pays and by how much, with both numbers")
    runnable: str = Field(description="which parts of the best plan a stock framework can launch")
    plan_json: str | None = Field(default=None, description="the best plan, stage by stage, as JSON")
    fixed: list[str] = Field(default_factory=list, description="what the pool search holds fixed")
    models_solved: int = Field(default=0, ge=0, description="(DP, micro-batch) models CP-SAT solved")
    models_pruned: int = Field(default=0, ge=0, description="(DP, micro-batch) models skipped by a proven bound")
    notes: list[str] = Field(default_factory=list)


class OptimizeResult(_Out):
    model: str = Field(description="the model's name")
    results: list[HardwareResult] = Field(description="one entry per --hardware")
    legend: str = Field(description="the compact layout words of the text tables")
    warnings: list[str] = Field(
        default_factory=list,
        description="what the input readers assumed or ignored (e.g. a config key transformers "
        "does not read); also printed on stderr as 'Warning:' lines",
    )


class Optimum(_Out):
    layout: Layout = Field(description="the fastest layout of the same model, GPUs and hardware")
    step_time_s: float = Field(gt=0, description="its step time")
    mfu: float = Field(ge=0, le=1, description="its MFU")
    gap: float | None = Field(description="this plan's step time / the optimum's - 1; null when infeasible")


class Change(_Out):
    change: str = Field(description="the degrees that move, e.g. 'TP8 -> TP4, DP8 -> DP16'")
    layout: Layout = Field(description="the resulting layout")
    step_time_s: float = Field(gt=0, description="its step time")
    gain: float = Field(description="fraction of the step time saved")


class ValidateResult(EvaluatedLayout):
    knobs_chosen: list[str] = Field(description="the knobs the search chose because they were not given")
    requirements: list[str] = Field(description="settings the plan cannot do without (e.g. 'recompute full')")
    fixes: list[str] = Field(default_factory=list, description="the smallest changes that make the plan feasible")
    solver: SolverOut = Field(description="how the plan's open knobs were chosen")
    stack: dict[str, bool | str | float | list[str]] = Field(
        default_factory=dict,
        description="the software-stack settings the prediction assumes: the framework's defaults with the "
        "--flash-attention, --loss, --fp8-recipe ... overrides applied",
    )
    optimum: Optimum | None = Field(description="the best layout of the same question; null when none fits")
    optimum_not_searched: str | None = Field(
        default=None, description="why the optimum was not searched (null: it was; `optimum` null then means none fits)"
    )
    best_change: Change | None = Field(description="the single plan change that gains most; null when none gains")
    launch: dict[str, str] | None = Field(
        default=None, description="the plan's launch configuration, by framework (with --emit)"
    )
    launch_notes: list[str] = Field(
        default_factory=list, description="with --from-launch: what was read, overridden, not modelled or unknown"
    )
    warnings: list[str] = Field(
        default_factory=list,
        description="what the input readers assumed or ignored (e.g. a config key transformers "
        "does not read); also printed on stderr as 'Warning:' lines",
    )


class CostOut(_Out):
    hardware: float = Field(ge=0, description="GPU-hours x $/GPU-hour (amortized capex, or the cloud price)")
    energy: float = Field(ge=0, description="kWh x $/kWh (0 when rented: the cloud price includes it)")
    staff: float = Field(default=0.0, ge=0, description="people, per day of wall-clock")
    total: float = Field(ge=0, description="the sum")


class CompareEntry(_Out):
    """One hardware of compare: its best layout and the account of training `tokens` on it
    (null figures where no layout fits, or where the hardware has no price)."""

    hardware: str = Field(description="the hardware (or pool)")
    gpus: int = Field(ge=1, description="GPUs of the best run (the count asked, when none fits)")
    best: EvaluatedLayout | None = Field(description="the best layout, as in validate; null when none fits")
    train_time_s: float | None = Field(gt=0, description="wall-clock for the tokens, failures included")
    ideal_time_s: float | None = Field(default=None, gt=0, description="without failures")
    goodput: float | None = Field(gt=0, le=1, description="useful fraction of GPU time after failures and restarts")
    goodput_first_order: float | None = Field(default=None, gt=0, le=1)
    failures_per_hour: float | None = Field(ge=0, description="GPU and node failures of the whole job per hour")
    expected_failures: float | None = Field(default=None, ge=0)
    job_mtbf_s: float | None = Field(default=None, gt=0)
    checkpoint_bytes: float | None = Field(default=None, ge=0)
    checkpoint_write_s: float | None = Field(default=None, ge=0)
    checkpoint_interval_s: float | None = Field(ge=0, description="work between checkpoints (Daly 2006)")
    checkpoint_interval_young_s: float | None = Field(default=None, ge=0)
    restart_s: float | None = Field(default=None, ge=0)
    busy_fraction: float | None = Field(default=None, ge=0, le=1)
    wall_power_per_gpu_w: float | None = Field(default=None, ge=0)
    energy_kwh: float | None = Field(ge=0, description="at the facility meter (PUE included), failures included")
    cost_usd: CostOut | None = Field(description="the run's cost; null without a price")
    usd_per_billion_tokens: float | None = Field(default=None, ge=0)
    hardware_usd_per_gpu_hour: float | None = Field(default=None, ge=0)
    pricing: str | None = None
    assumptions: dict[str, object] | None = None
    max_gpus: int = Field(ge=1, description="the count given (a maximum with a budget or deadline)")
    counts_searched: list[int] = Field(description="the GPU counts considered")
    deadline_met: bool | None = None
    budget_met: bool | None = None
    reason: str | None = None
    fixes: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list, description="sentences on the pick (budget, deadline)")
    scaling: list[ScalingPoint] = Field(default_factory=list)


class CompareResult(_Out):
    tokens: float = Field(gt=0, description="training tokens accounted")
    model: str = Field(description="the model's name")
    budget_usd: float | None = None
    deadline_days: float | None = None
    checkpoint_bytes_per_param: int = Field(
        description="checkpoint size per parameter (bf16 weights + fp32 master and Adam)"
    )
    results: list[CompareEntry] = Field(description="one entry per hardware")
    verdict: list[str] = Field(description="sentences computed from the accounts: fastest, cheapest, failures, energy")
    warnings: list[str] = Field(
        default_factory=list,
        description="what the input readers assumed or ignored (e.g. a config key transformers "
        "does not read); also printed on stderr as 'Warning:' lines",
    )


class CalibratedRun(_Out):
    run: str = Field(description="the run's id (or CSV line)")
    measured_s: float = Field(gt=0, description="measured step time")
    before_s: float = Field(gt=0, description="predicted with the starting constants")
    after_s: float = Field(gt=0, description="predicted with the fitted constants")
    flagged: str | None = Field(default=None, description="why the run was left out of the fit")


class CalibrateResult(_Out):
    hardware: str = Field(description="the calibrated hardware's name")
    out: str | None = Field(description="where the TOML was written (CLI)")
    fitted: list[str] = Field(description="the constants fitted")
    constants: dict[str, float] = Field(description="their fitted values")
    at_bound: list[str] = Field(description="fitted constants that ended on a bound of their range")
    undetermined: dict[str, float] = Field(
        default_factory=dict,
        description=f"constants the runs do not determine, each with its standard error (over {DETERMINED_SHARE:.0%} "
        "of its range); those not in `fitted` kept the preset's values (the default fit on no more runs than constants)",
    )
    runs: list[CalibratedRun] = Field(description="per run: measured, before and after")
    mape_before: float = Field(ge=0)
    mape_after: float = Field(ge=0)
    worst_before: float = Field(ge=0)
    worst_after: float = Field(ge=0)
    command: str = Field(description="the command that produced it, as recorded in the TOML")
    toml: str = Field(description="the calibrated hardware TOML")

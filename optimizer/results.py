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

from paraplan.cost_models.layout import Layout

Finite = Field(allow_inf_nan=False)


class _Out(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class MemoryOut(_Out):
    """Memory of the most loaded GPU, by term; `other` is the hardware's reserve."""

    params: float = Field(ge=0)
    grads: float = Field(ge=0)
    optimizer: float = Field(ge=0)
    activations: float = Field(ge=0)
    other: float = Field(ge=0, description="reserve: CUDA context, NCCL buffers, allocator fragmentation")
    total: float = Field(ge=0)
    capacity: float = Field(gt=0)
    host_bytes_per_gpu: float = Field(default=0.0, ge=0, description="state offloaded to host memory, per GPU")


class TimeOut(_Out):
    """Exposed (not overlapped) time per step by term; the terms sum to `step_time_s`."""

    compute: float = Field(ge=0)
    recompute: float = Field(ge=0)
    tp_comm: float = Field(ge=0)
    cp_comm: float = Field(ge=0)
    ep_comm: float = Field(ge=0)
    pp_comm: float = Field(ge=0)
    dp_comm: float = Field(ge=0)
    bubble: float = Field(ge=0)
    offload: float = Field(ge=0, description="host transfers and the CPU's optimizer step, when offloading")


class ParamsOut(_Out):
    total: int = Field(ge=0)
    active: int = Field(ge=0, description="touched by one token (top-k experts); equal to total for dense models")


class BottleneckOut(_Out):
    term: str
    share: float = Field(ge=0, le=1, description="the term's share of the step time")
    explanation: str


class StageOut(_Out):
    """One pipeline stage of a replica: its GPU type, TP degree and layers."""

    hardware: str
    gpus_per_replica: int = Field(ge=1)
    tp: int = Field(ge=1)
    layers: int = Field(ge=0)


class EvaluatedLayout(_Out):
    model: str
    hardware: str
    gpus: int = Field(ge=1)
    layout: Layout
    feasible: bool
    violations: list[str] = Field(description="one sentence per violated limit; empty iff feasible")
    memory_bytes: MemoryOut
    memory_margin_bytes: float = Field(description="usable memory left after the model and the reserve")
    near_memory_limit: bool = Field(description="the margin is below NEAR_LIMIT of capacity: allocator spikes may OOM")
    step_time_s: float = Field(gt=0, description="one optimizer step of global_batch sequences")
    step_time_range_s: tuple[float, float] = Field(description="the step time's error bar from validation runs")
    accuracy_basis: str = Field(description="the validation runs behind step_time_range_s")
    time_s: TimeOut
    mfu: float = Field(ge=0, le=1, description="model FLOPs (causal attention) / (step x GPUs x peak_flops)")
    mfu_palm: float = Field(ge=0, description="model FLOPs counting full s x s attention (PaLM) / the same")
    hfu: float = Field(ge=0, le=1, description="model + recompute FLOPs / (step x GPUs x peak_flops)")
    peak_flops: float = Field(gt=0, description="per-GPU dense peak of the GEMM precision, the ratios' denominator")
    tflops_per_gpu: float = Field(ge=0, description="model FLOPs (causal) per second per GPU / 1e12")
    tokens_per_s: float = Field(ge=0)
    params: ParamsOut
    bottleneck: BottleneckOut
    cost_usd_per_step: float | None = Field(default=None, ge=0, description="absent without a price")
    train_time_s: float | None = Field(default=None, ge=0, description="with --tokens: failure-free wall time")
    cost_usd: float | None = Field(default=None, ge=0, description="with --tokens and a price: the run's cost")
    stages: list[StageOut] | None = Field(default=None, description="per-stage split, when uneven or mixed")
    equivalent: list[Layout] = Field(default_factory=list, description="layouts with identical predictions")


class SolverOut(_Out):
    status: Literal["OPTIMAL", "INFEASIBLE"]
    wall_s: float = Field(ge=0)
    candidates: int = Field(ge=0, description="layouts enumerated and evaluated")
    method: str = Field(description="enumeration (exhaustive, vectorized) or cp-sat")


class Explanation(_Out):
    best: list[str]
    runners_up: list[str]


class ScalingPoint(_Out):
    """The best layout at one GPU count (a range search's or compare's scaling curve)."""

    gpus: int = Field(ge=1)
    layout: Layout
    step_time_s: float = Field(gt=0)
    train_time_s: float | None = Field(default=None, gt=0, description="with tokens; failures included in compare")
    ideal_time_s: float | None = Field(default=None, gt=0, description="with tokens, without failures")
    cost_usd: float | None = Field(default=None, ge=0, description="with tokens and a price")


class HardwareResult(_Out):
    hardware: str
    gpus: int = Field(ge=1)
    solver: SolverOut
    layouts: list[EvaluatedLayout] = Field(description="best first, all feasible")
    reason: str | None = None
    fixes: list[str] = Field(default_factory=list, description="the smallest changes that would make a layout fit")
    explanation: Explanation | None = None
    launch: dict[str, str] | None = None
    scaling: list[ScalingPoint] = Field(default_factory=list, description="the best layout of each GPU count searched")
    homogeneous: list[HardwareResult] | None = None


class OptimizeResult(_Out):
    results: list[HardwareResult]
    legend: str = Field(description="the compact layout words of the text tables")


class Optimum(_Out):
    layout: Layout
    step_time_s: float = Field(gt=0)
    mfu: float = Field(ge=0, le=1)
    gap: float | None = Field(description="this plan's step time / the optimum's - 1; null when infeasible")


class Change(_Out):
    change: str
    layout: Layout
    step_time_s: float = Field(gt=0)
    gain: float = Field(description="fraction of the step time saved")


class ValidateResult(EvaluatedLayout):
    knobs_chosen: list[str]
    requirements: list[str]
    fixes: list[str] = Field(default_factory=list, description="the smallest changes that make the plan feasible")
    solver: SolverOut
    optimum: Optimum | None
    best_change: Change | None
    launch: dict[str, str] | None = None
    launch_notes: list[str] = Field(
        default_factory=list, description="with --from-launch: what was read, overridden, not modelled or unknown"
    )


class CostOut(_Out):
    hardware: float = Field(ge=0)
    energy: float = Field(ge=0)
    staff: float = Field(default=0.0, ge=0)
    total: float = Field(ge=0)




class CompareEntry(_Out):
    """One hardware of compare: its best layout and the account of training `tokens` on it
    (null figures where no layout fits, or where the hardware has no price)."""

    hardware: str
    gpus: int = Field(ge=1)
    best: EvaluatedLayout | None
    train_time_s: float | None = Field(gt=0, description="wall-clock for the tokens, failures included")
    ideal_time_s: float | None = Field(default=None, gt=0, description="without failures")
    goodput: float | None = Field(gt=0, le=1, description="useful fraction of GPU time after failures and restarts")
    goodput_first_order: float | None = Field(default=None, gt=0, le=1)
    failures_per_hour: float | None = Field(ge=0)
    expected_failures: float | None = Field(default=None, ge=0)
    job_mtbf_s: float | None = Field(default=None, gt=0)
    checkpoint_bytes: float | None = Field(default=None, ge=0)
    checkpoint_write_s: float | None = Field(default=None, ge=0)
    checkpoint_interval_s: float | None = Field(ge=0)
    checkpoint_interval_young_s: float | None = Field(default=None, ge=0)
    restart_s: float | None = Field(default=None, ge=0)
    busy_fraction: float | None = Field(default=None, ge=0, le=1)
    wall_power_per_gpu_w: float | None = Field(default=None, ge=0)
    energy_kwh: float | None = Field(ge=0)
    cost_usd: CostOut | None
    usd_per_billion_tokens: float | None = Field(default=None, ge=0)
    hardware_usd_per_gpu_hour: float | None = Field(default=None, ge=0)
    pricing: str | None = None
    assumptions: dict[str, object] | None = None
    max_gpus: int = Field(ge=1)
    counts_searched: list[int]
    deadline_met: bool | None = None
    budget_met: bool | None = None
    reason: str | None = None
    fixes: list[str] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list)
    scaling: list[ScalingPoint] = Field(default_factory=list)


class CompareResult(_Out):
    tokens: float = Field(gt=0)
    model: str
    budget_usd: float | None = None
    deadline_days: float | None = None
    checkpoint_bytes_per_param: int
    results: list[CompareEntry]
    verdict: list[str]


class CalibratedRun(_Out):
    run: str
    measured_s: float = Field(gt=0)
    before_s: float = Field(gt=0)
    after_s: float = Field(gt=0)
    flagged: str | None = Field(default=None, description="why the run was left out of the fit")


class CalibrateResult(_Out):
    hardware: str
    out: str | None
    fitted: list[str]
    constants: dict[str, float]
    at_bound: list[str] = Field(description="fitted constants that ended on a bound of their range")
    runs: list[CalibratedRun]
    mape_before: float = Field(ge=0)
    mape_after: float = Field(ge=0)
    worst_before: float = Field(ge=0)
    worst_after: float = Field(ge=0)
    command: str
    toml: str = Field(description="the calibrated hardware TOML")

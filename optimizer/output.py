"""The JSON the CLI prints, as pydantic models: every `--json` object is validated against these
before it is printed, so what scripts read always has the contract's keys and types
(../shared/contract.md). Extra keys are allowed, as the contract allows them."""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class _Out(BaseModel):
    model_config = ConfigDict(extra="allow")


class LayoutOut(_Out):
    tp: int = Field(ge=1)
    pp: int = Field(ge=1)
    dp: int = Field(ge=1)
    cp: int = Field(ge=1)
    ep: int = Field(ge=1)
    micro_batch: int = Field(ge=1)
    global_batch: int = Field(ge=1)
    seq_len: int = Field(ge=1)
    virtual_stages: int = Field(ge=1)
    recompute: Literal["none", "selective", "full"]
    zero: int = Field(ge=0, le=3)
    sequence_parallel: bool
    precision: Literal["bf16", "fp16", "fp8"]


class MemoryOut(_Out):
    params: float = Field(ge=0)
    grads: float = Field(ge=0)
    optimizer: float = Field(ge=0)
    activations: float = Field(ge=0)
    other: float = Field(ge=0)
    total: float = Field(ge=0)
    capacity: float = Field(gt=0)


class TimeOut(_Out):
    compute: float = Field(ge=0)
    recompute: float = Field(ge=0)
    tp_comm: float = Field(ge=0)
    cp_comm: float = Field(ge=0)
    ep_comm: float = Field(ge=0)
    pp_comm: float = Field(ge=0)
    dp_comm: float = Field(ge=0)
    bubble: float = Field(ge=0)


class EvaluatedLayoutOut(_Out):
    model: str
    hardware: str
    gpus: int = Field(ge=1)
    layout: LayoutOut
    feasible: bool
    violations: list[str]
    memory_bytes: MemoryOut
    step_time_s: float = Field(gt=0)
    time_s: TimeOut
    mfu: float = Field(ge=0, le=1)
    hfu: float = Field(ge=0, le=1)
    tflops_per_gpu: float = Field(ge=0)
    tokens_per_s: float = Field(ge=0)

    @field_validator("step_time_s", "mfu", "hfu", "tflops_per_gpu", "tokens_per_s")
    @classmethod
    def _finite(cls, value: float) -> float:
        if not math.isfinite(value):
            raise ValueError("must be finite")
        return value


class SolverOut(_Out):
    status: Literal["OPTIMAL", "INFEASIBLE"]
    wall_s: float = Field(ge=0)
    candidates: int = Field(ge=0)


class OptimizeResultOut(_Out):
    hardware: str
    gpus: int = Field(ge=1)
    solver: SolverOut
    layouts: list[EvaluatedLayoutOut]


class OptimizeOut(_Out):
    results: list[OptimizeResultOut]


def render_json(model: type[_Out], obj: dict[str, Any]) -> str:
    """`obj` validated against `model` and printed by it: a malformed object never reaches stdout."""
    return model.model_validate(obj).model_dump_json(indent=2)

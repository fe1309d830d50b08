"""Predicted peak memory against runs that published theirs (`benchmarks/data/runs_memory.csv`).

Each row is a training run with its exact layout and the peak memory its source reported (the
`memory_kind` column says which figure: `allocated`, `reserved`, `nvidia_smi`, ... ; see
benchmarks/data/README.md). The prediction is the most loaded GPU's total, the hardware's
reserve and NCCL's NVLS buffers (where the row's stack has NVLS on) included, with the knobs a
row leaves open chosen as `validate` chooses them. Used by
`benchmarks/accuracy.py --memory` and by the tests (a run that trained must be predicted to fit).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from paraplan.calibration import chosen_layouts, run_from_row
from paraplan.cost_models.candidates import Layouts
from paraplan.cost_models.errors import InputError
from paraplan.cost_models.layout import layout_short
from paraplan.cost_models.units import GIB
from paraplan.hardware_specs.loader import load_cluster
from paraplan.hardware_specs.schema import Cluster

# The CUDA context (~0.5 GB: module images and per-context driver state, visible to nvidia-smi,
# not to torch.cuda's allocator statistics) plus NCCL's communicator buffers (~0.5 GB and more:
# NCCL_BUFFSIZE 4 MiB per protocol, channel and peer, allocated by NCCL itself): the low end of
# the itemised reserve in the hardware presets (hardware_specs/presets/*.toml, memory_reserve_bytes).
OUTSIDE_ALLOCATOR_BYTES = 1.0e9
RESERVED_KINDS = ("reserved", "reserved_inferred")
ALLOCATED_KINDS = ("allocated", "allocated_inferred")


@dataclass(frozen=True)
class MemoryRun:
    run: str
    source: str
    hardware: str
    kind: str  # what the source measured (allocated, reserved, nvidia_smi, ...)
    oom: bool  # the run ran out of memory
    measured_bytes: float
    predicted_bytes: float  # what the GPU holds, the preset's reserve included
    reserve_bytes: float  # the preset's memory_reserve_bytes
    nvls_bytes: (
        float  # NCCL's NVLS buffers and TE's userbuffers (memory.device_reserve_bytes): outside the allocator too
    )
    fits: bool  # predicted feasible (memory and every other limit)
    layout: str

    @property
    def visible_bytes(self) -> float:
        """The part of the prediction the source's instrument sees (module docstring)."""
        return visible_bytes(self.predicted_bytes, self.reserve_bytes, self.nvls_bytes, self.kind)

    @property
    def error(self) -> float:
        """visible / measured - 1."""
        return self.visible_bytes / self.measured_bytes - 1.0


def visible_bytes(predicted: float, reserve: float, nvls: float, kind: str) -> float:
    """What an instrument of `kind` reports of a predicted total that includes `reserve` and
    `nvls` (NCCL's NVLS buffers, which NCCL allocates itself, out of the allocator's sight)."""
    if kind in ALLOCATED_KINDS:
        return predicted - reserve - nvls
    if kind in RESERVED_KINDS:
        return predicted - min(OUTSIDE_ALLOCATOR_BYTES, reserve) - nvls
    return predicted


def memory_runs(path: Path) -> tuple[list[MemoryRun], list[str]]:
    """(the runs predicted, one line per row skipped and why)."""
    with path.open(newline="", encoding="utf-8-sig") as handle:
        rows = list(csv.DictReader(handle))
    out: list[MemoryRun] = []
    skipped: list[str] = []
    clusters: dict[str, Cluster] = {}
    for n, row in enumerate(rows, start=2):
        if not (row.get("measured_peak_memory_gib") or "").strip() or not row.get("hardware"):
            continue
        row = {**row, "step_time_s": row.get("measured_step_time_s") or "1"}
        try:
            run = run_from_row(row, path, n)
            cluster = clusters.setdefault(run.hardware, load_cluster(run.hardware))
            layout = chosen_layouts([run], cluster)[0]
        except InputError as exc:
            skipped.append(f"line {n}: {exc}")
            continue
        ev = run.question(cluster).evaluate(Layouts.of([layout]))
        out.append(MemoryRun(
            run=run.label, source=run.group, hardware=cluster.name, kind=row.get("memory_kind", ""),
            oom=(row.get("oom") or "").strip().lower() == "true",
            measured_bytes=float(row["measured_peak_memory_gib"]) * GIB,
            predicted_bytes=float(ev.memory.total[0]), reserve_bytes=cluster.memory_reserve_bytes,
            # `other` is the reserve plus the NVLS buffers and userbuffers (memory.device_reserve_bytes)
            nvls_bytes=float(ev.memory.other[0]) - cluster.memory_reserve_bytes, fits=bool(ev.feasible[0]),
            layout=layout_short(layout),
        ))  # fmt: skip
    return out, skipped

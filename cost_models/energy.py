"""Electric power and energy of a training run, at the utilization the cost model predicts.

A GPU does not draw its TDP all the time: inside a training step it is busy with kernels for part
of the step and waits for the rest (exposed communication, pipeline bubble). We take

    u     = (compute + recompute) / step_time        busy fraction of the step (exposed times of
                                                     the cost model; compute includes the optimizer step)
    P_gpu = idle_fraction * TDP + (1 - idle_fraction) * TDP * u
                                                     a waiting GPU draws idle_fraction of TDP, a busy
                                                     one its TDP (power-capped training runs at the
                                                     cap: nvidia-smi shows ~TDP under large GEMMs)
    P     = (P_gpu + node_overhead_w / gpus_per_node) * PUE
                                                     per GPU at the wall: its share of the node's CPUs,
                                                     fans and NICs, then cooling and power delivery
                                                     (PUE = facility power / IT power; The Green Grid)
    E     = P * gpus * wall_time                     [J], / 3.6e6 for kWh

The wall time is the failure-aware one; the time lost to failures (re-done work, checkpoint
writes, restarts) is taken at the same average power, a slight overestimate for restarts.
Figures (TDP, idle fraction, node overhead, PUE, price per kWh) come from the preset's `[gpu]`
and `[power]` tables, with their sources there.
"""

from __future__ import annotations

JOULES_PER_KWH = 3.6e6


def busy_fraction(compute_s: float, recompute_s: float, step_time_s: float) -> float:
    """u = (compute + recompute) / step, clipped to [0, 1]."""
    if step_time_s <= 0:
        raise ValueError("step time must be positive")
    return min(1.0, max(0.0, (compute_s + recompute_s) / step_time_s))


def gpu_power_w(tdp_w: float, idle_fraction: float, utilization: float) -> float:
    """P_gpu = idle_fraction * TDP + (1 - idle_fraction) * TDP * u."""
    if not 0.0 <= idle_fraction <= 1.0 or not 0.0 <= utilization <= 1.0:
        raise ValueError("idle fraction and utilization must lie in [0, 1]")
    return idle_fraction * tdp_w + (1.0 - idle_fraction) * tdp_w * utilization


def wall_power_per_gpu_w(
    tdp_w: float, idle_fraction: float, utilization: float, node_overhead_w: float, gpus_per_node: int, pue: float
) -> float:
    """(P_gpu + node overhead / GPUs per node) * PUE: one GPU's draw at the facility meter."""
    return (gpu_power_w(tdp_w, idle_fraction, utilization) + node_overhead_w / gpus_per_node) * pue


def energy_kwh(watts_per_gpu: float, gpus: int, seconds: float) -> float:
    """E = P * gpus * t, in kWh."""
    return watts_per_gpu * gpus * seconds / JOULES_PER_KWH

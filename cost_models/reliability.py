"""Failures, checkpoints and goodput of a training job on N GPUs.

Failure rate. GPUs and nodes fail independently, each as a Poisson process (exponentially
distributed times between failures), and any single failure stops the synchronous job. The job's
failure rate is the sum of the rates of its parts,

    lambda = N / MTBF_gpu + nodes / MTBF_node            [failures per hour]
    nodes  = ceil(N / gpus_per_node)

and the job's mean time between failures is M = 1 / lambda. Per-GPU and per-node MTBFs come from
the hardware preset's `[reliability]` table (the H100-class figures there are derived from the
Llama 3 report, Dubey et al. 2024, arXiv:2407.21783, Sec 3.3.4: 419 unexpected interruptions in
54 days on up to 16,384 H100s).

Checkpoint. A full training checkpoint holds, per parameter, the bf16 weights (2 B) and the fp32
master weights plus Adam's two moments (4 + 4 + 4 = 12 B): `CHECKPOINT_BYTES_PER_PARAM` = 14 B.
Sharded (Megatron distributed checkpoint, DeepSpeed ZeRO) each node writes its share at once, so

    delta = checkpoint_bytes / (nodes * storage_write_bytes_per_s)      [s, blocking]

Interval. Young (1974, "A first order approximation to the optimum checkpoint interval", CACM
17(9):530) minimizes the first-order waste delta/tau + tau/(2M):

    tau_Young = sqrt(2 * delta * M)

Daly (2006, "A higher order estimate of the optimum checkpoint interval for restart dumps", Future
Generation Computer Systems 22(3):303-312) gives the optimum of the exact exponential model below:

    tau_Daly = sqrt(2 delta M) * (1 + sqrt(delta / 2M) / 3 + (delta / 2M) / 9) - delta   for delta < 2M
    tau_Daly = M                                                                          otherwise

Goodput (useful fraction of the wall-clock). Split the useful work W into segments of tau, each
followed by a blocking checkpoint of delta; a failure loses the work since the last checkpoint
and costs a restart R (detect, reschedule, re-initialise, reload). To first order (each failure
loses on average half an interval plus the restart; failures are counted per unit of useful work;
the terms are small):

    wall = W * (1 + delta/tau + (tau/2 + R) / M)
    goodput_first_order = 1 / (1 + delta/tau + (tau/2 + R) / M)

That is `goodput_first_order`. It is accurate while the overheads are small (a few percent), but
not when failures are frequent: failures also strike during restarts, re-done work and
checkpoints, which the first-order count misses (and the other first-order reading, "lost time =
failures per wall-clock hour x time lost per failure", counts overlapping outages twice). With
exponential failures the expected wall-clock is exactly (Daly 2006, the complete model, with a
failure possible at any moment, restarts included):

    wall = W * (M / tau) * exp(R / M) * (exp((tau + delta) / M) - 1)
    goodput = W / wall

which agrees with the first-order form to first order in delta/M, tau/M and R/M, is in (0, 1]
for any inputs, and is what `assess` reports (with tau = tau_Daly). Assumptions: independent,
exponential failures; every failure restarts the whole job from the last checkpoint; checkpoints
block training (no asynchronous save); the restart time is the same for every failure; storage
write bandwidth scales with the number of nodes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from paraplan.cost_models.units import SECONDS_PER_HOUR

CHECKPOINT_BYTES_PER_PARAM = 14  # bf16 weights 2 B + fp32 master weights 4 B + Adam m 4 B + Adam v 4 B
MIN_GOODPUT = 1e-12  # below this the job does not finish in any meaningful sense


def nodes_for(gpus: int, gpus_per_node: int) -> int:
    """Servers that hold `gpus` GPUs (a partial node counts as one)."""
    if gpus < 1 or gpus_per_node < 1:
        raise ValueError("gpus and gpus_per_node must be positive")
    return -(-gpus // gpus_per_node)


def failures_per_hour(gpus: int, gpus_per_node: int, gpu_mtbf_hours: float, node_mtbf_hours: float) -> float:
    """lambda = N / MTBF_gpu + nodes / MTBF_node: failures of the whole job per hour."""
    if gpu_mtbf_hours <= 0 or node_mtbf_hours <= 0:
        raise ValueError("MTBFs must be positive")
    return gpus / gpu_mtbf_hours + nodes_for(gpus, gpus_per_node) / node_mtbf_hours


def checkpoint_bytes(params: int | float) -> float:
    """Bytes of a full checkpoint: 14 B per parameter (bf16 weights + fp32 master and Adam m, v)."""
    return float(params) * CHECKPOINT_BYTES_PER_PARAM


def checkpoint_write_s(size_bytes: float, nodes: int, write_bytes_per_s: float) -> float:
    """delta = size / (nodes x per-node write bandwidth): every node writes its shard in parallel."""
    if nodes < 1 or write_bytes_per_s <= 0:
        raise ValueError("nodes and the write bandwidth must be positive")
    return size_bytes / (nodes * write_bytes_per_s)


def young_interval_s(delta_s: float, mtbf_s: float) -> float:
    """Young (1974): tau = sqrt(2 * delta * M), seconds of work between checkpoints."""
    return math.sqrt(2.0 * delta_s * mtbf_s)


def daly_interval_s(delta_s: float, mtbf_s: float) -> float:
    """Daly (2006) higher-order optimum: sqrt(2dM)(1 + sqrt(d/2M)/3 + (d/2M)/9) - d for d < 2M, else M."""
    if delta_s >= 2.0 * mtbf_s:
        return mtbf_s
    x = delta_s / (2.0 * mtbf_s)
    return math.sqrt(2.0 * delta_s * mtbf_s) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - delta_s


def goodput_first_order(delta_s: float, interval_s: float, mtbf_s: float, restart_s: float) -> float:
    """1 / (1 + delta/tau + (tau/2 + R)/M): the first-order useful fraction (Young 1974)."""
    if interval_s <= 0:
        return MIN_GOODPUT if delta_s > 0 else 1.0 / (1.0 + restart_s / mtbf_s)
    return 1.0 / (1.0 + delta_s / interval_s + (interval_s / 2.0 + restart_s) / mtbf_s)


def goodput_exponential(delta_s: float, interval_s: float, mtbf_s: float, restart_s: float) -> float:
    """W / wall with wall = W (M/tau) e^(R/M) (e^((tau+delta)/M) - 1): exact for exponential failures (Daly 2006).

    Computed in log space; tau -> 0 (with delta = 0) is the limit e^(-R/M). Floored at MIN_GOODPUT.
    """
    if mtbf_s <= 0 or delta_s < 0 or interval_s < 0 or restart_s < 0:
        raise ValueError("times must be non-negative and the MTBF positive")
    work = interval_s + delta_s
    if interval_s <= 0:
        # No work between checkpoints: nothing ever completes, unless checkpoints are free too.
        if delta_s > 0:
            return MIN_GOODPUT
        log_segment = 0.0  # lim (M/tau)(e^(tau/M) - 1) = 1
    else:
        x = work / mtbf_s
        log_expm1 = x if x > 700 else math.log(math.expm1(x))  # log(e^x - 1), = x to double precision past 700
        log_segment = math.log(mtbf_s / interval_s) + log_expm1
    log_ratio = restart_s / mtbf_s + log_segment
    return max(MIN_GOODPUT, min(1.0, math.exp(-log_ratio)))


@dataclass(frozen=True)
class ReliabilityAccount:
    """The failure side of one run: rates, checkpoint figures, goodput and failure-aware time."""

    gpus: int
    nodes: int
    failures_per_hour: float
    mtbf_s: float  # of the whole job
    checkpoint_bytes: float
    checkpoint_write_s: float
    checkpoint_interval_s: float  # Daly 2006, used for the goodput
    young_interval_s: float
    restart_s: float
    goodput: float  # exact exponential model
    goodput_first_order: float  # 1 / (1 + delta/tau + (tau/2 + R)/M)
    ideal_time_s: float
    train_time_s: float  # ideal / goodput
    expected_failures: float  # over train_time_s


def assess(
    params: int | float,
    gpus: int,
    gpus_per_node: int,
    ideal_time_s: float,
    gpu_mtbf_hours: float,
    node_mtbf_hours: float,
    storage_write_bytes_per_s: float,
    restart_s: float,
) -> ReliabilityAccount:
    """Failure rate, checkpoint interval and goodput of a run whose failure-free time is `ideal_time_s`."""
    nodes = nodes_for(gpus, gpus_per_node)
    rate = failures_per_hour(gpus, gpus_per_node, gpu_mtbf_hours, node_mtbf_hours)
    mtbf_s = SECONDS_PER_HOUR / rate
    size = checkpoint_bytes(params)
    delta = checkpoint_write_s(size, nodes, storage_write_bytes_per_s)
    tau = daly_interval_s(delta, mtbf_s)
    good = goodput_exponential(delta, tau, mtbf_s, restart_s)
    train = ideal_time_s / good
    return ReliabilityAccount(
        gpus=gpus,
        nodes=nodes,
        failures_per_hour=rate,
        mtbf_s=mtbf_s,
        checkpoint_bytes=size,
        checkpoint_write_s=delta,
        checkpoint_interval_s=tau,
        young_interval_s=young_interval_s(delta, mtbf_s),
        restart_s=restart_s,
        goodput=good,
        goodput_first_order=goodput_first_order(delta, tau, mtbf_s, restart_s),
        ideal_time_s=ideal_time_s,
        train_time_s=train,
        expected_failures=rate * train / SECONDS_PER_HOUR,
    )

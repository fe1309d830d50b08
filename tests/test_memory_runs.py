"""Per-GPU memory against the runs that published their peak (benchmarks/data/runs_memory.csv)."""

from __future__ import annotations

from pathlib import Path

import pytest

from paraplan.cost_models.units import GIB
from paraplan.memory_runs import MemoryRun, memory_runs, visible_bytes

RUNS_CSV = Path(__file__).resolve().parent.parent / "benchmarks" / "data" / "runs_memory.csv"


@pytest.fixture(scope="module")
def runs() -> list[MemoryRun]:
    checked, _ = memory_runs(RUNS_CSV)
    return checked


def test_every_run_that_trained_is_predicted_to_fit(runs: list[MemoryRun]) -> None:
    # A published run is feasible under its stack: the memory model plus the preset's reserve
    # must never declare one of them out of memory.
    assert len(runs) >= 60
    wrong = [f"{r.run}: {r.predicted_bytes / GIB:.1f} GiB predicted" for r in runs if not r.oom and not r.fits]
    assert not wrong, wrong


@pytest.mark.parametrize(
    ("run", "low_gib", "high_gib"),
    [
        # torchtitan 2024 Table 5 (Llama 3.1 405B, TP8/PP8/DP8, full AC, fp8, H100 96 GB): PyTorch
        # pipelining keeps whole fp32 gradients across micro-batches, 4 B x 6.3e9 = 25 GB of the
        # 72.7-82.5 GiB reserved; without them the prediction was 35.6 GiB.
        ("tt24_t5_pp_interleaved1f1b", 50.0, 80.0),
        # FlagPerf Llama 3 8B on 8 A800 (PP2/DP4, nvidia-smi 76 GiB, the whole GPU's memory).
        ("fp_l8b_a800_pp2dp4tp1", 68.0, 84.0),
        # Megatron-Bridge Llama 3 70B, TP8/PP4/VPP5, fp8, H100: 50.2 GiB.
        ("mb_l70b_tp8pp4vpp5", 45.0, 58.0),
    ],
)
def test_clearest_runs_within_their_band(runs: list[MemoryRun], run: str, low_gib: float, high_gib: float) -> None:
    found = {r.run: r for r in runs}[run]
    assert low_gib <= found.predicted_bytes / GIB <= high_gib, f"{run}: {found.predicted_bytes / GIB:.1f} GiB"


@pytest.mark.parametrize(
    ("kind", "visible"),
    [
        # A prediction of 40 GiB = 42,949,672,960 B with a 2.5e9 B reserve (the h100-sxm preset):
        ("nvidia_smi", 42_949_672_960.0),  # the whole device
        ("unstated", 42_949_672_960.0),
        ("reserved", 41_949_672_960.0),  # less the CUDA context and NCCL buffers, 1e9 B
        ("reserved_inferred", 41_949_672_960.0),
        ("allocated", 40_449_672_960.0),  # less the whole reserve
        ("allocated_inferred", 40_449_672_960.0),
    ],
)
def test_what_each_instrument_sees(kind: str, visible: float) -> None:
    assert visible_bytes(40 * GIB, 2.5e9, 0.0, kind) == visible


@pytest.mark.parametrize(
    ("kind", "visible"),
    [
        # The same 40 GiB holding NVLS buffers of one 8-GPU communicator, 8 x 301,989,888 =
        # 2,415,919,104 B, which NCCL allocates itself: only the device-level figure sees them.
        ("nvidia_smi", 42_949_672_960.0),
        ("reserved", 39_533_753_856.0),  # 42,949,672,960 - 1e9 - 2,415,919,104
        ("allocated", 38_033_753_856.0),  # 42,949,672,960 - 2.5e9 - 2,415,919,104
    ],
)
def test_nvls_buffers_are_outside_the_allocator(kind: str, visible: float) -> None:
    assert visible_bytes(40 * GIB, 2.5e9, 2_415_919_104.0, kind) == visible


def test_reserved_never_goes_below_the_model() -> None:
    # A preset reserve smaller than the context-and-NCCL share: only the reserve is taken off.
    assert visible_bytes(10 * GIB, 0.4e9, 0.0, "reserved") == 10 * GIB - 0.4e9


def test_flagperf_h100_runs_hold_nvls_buffers(runs: list[MemoryRun]) -> None:
    # FlagPerf Llama 3 70B, TP8/PP4/DP2 on 64 H100s with NCCL's default NVLS: the world, TP and
    # TP x PP communicators each span the node's 8 GPUs, 24 x 301,989,888 B; the A800 runs none.
    found = {r.run: r for r in runs}
    assert found["fp_l70b_h100_64gpu_pp4dp2tp8"].nvls_bytes == 7_247_757_312
    assert found["fp_l8b_a800_pp1dp1tp8"].nvls_bytes == 0.0

"""Typed specifications of GPUs, links and cluster building blocks.

Every figure is in SI base units with the unit in the field name (`_bytes`, `_s`, `_flops`,
`_bytes_per_s`, `_w`), bounded below by a physical floor (100 GFLOP/s, 1 GB, 10 GB/s of HBM,
100 MB/s of link) so that a figure in the wrong unit is refused at the edge. A preset TOML
writes the same fields; the loader converts nothing, so a figure read from a data sheet in GB/s
is entered as e.g. `300e9`. Numbers and flags are taken as written: a TOML boolean, or a number
in quotes, where a figure belongs is refused rather than read as 1 or parsed (`gpus_per_node =
true` would otherwise be one GPU per node); a count (`gpus_per_node`, `gemm_tile`) is an integer.

The efficiency figures (`Efficiency`) are what software reaches on the hardware, not what the
data sheet promises. They are the constants that `paraplan calibrate` fits.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, Strict, model_validator

# Physical floors: a figure below them is a unit mistake (312 for 312e12 FLOP/s, 200 for a
# 200 Gb/s link) or nonsense, and would make every step time overflow.
MIN_FLOPS = 1e11

IntraNodeKind = Literal["nvswitch", "xgmi", "nvlink_bridge", "pcie_p2p", "pcie_host"]

# Strict: no bool or string coercion (module docstring); an integer is still a valid Number.
Number = Annotated[float, Strict()]
Count = Annotated[int, Strict()]
Flag = Annotated[bool, Strict()]


class _Spec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class GPU(_Spec):
    """One accelerator. Peaks are dense tensor-core rates (sparsity figures halved)."""

    name: str = Field(min_length=1)
    peak_bf16_flops: Number = Field(ge=MIN_FLOPS, le=1e17)
    peak_fp16_flops: Number = Field(ge=MIN_FLOPS, le=1e17)
    peak_fp8_flops: Number | None = Field(default=None, ge=MIN_FLOPS, le=1e17)  # None: no FP8 tensor cores
    memory_bytes: Number = Field(ge=1e9, le=1e14)  # capacity the driver exposes (nvidia-smi total)
    mem_bw_bytes_per_s: Number = Field(ge=1e10, le=1e14)
    tdp_w: Number = Field(ge=1, le=1e5)
    ecc: Flag
    sources: tuple[str, ...] = ()


class Link(_Spec):
    """A point-to-point path: bandwidth per direction per GPU, latency, achievable fraction."""

    name: str = Field(min_length=1)
    bw_bytes_per_s: Number = Field(ge=1e8, le=1e14)
    latency_s: Number = Field(ge=0, le=1.0)
    efficiency: Number = Field(ge=0.01, le=1.0)  # bus bandwidth reached by collectives / nominal
    sources: tuple[str, ...] = ()

    @property
    def effective_bw_bytes_per_s(self) -> float:
        return self.bw_bytes_per_s * self.efficiency


class IntraNode(_Spec):
    """How the GPUs of one server talk to each other.

    `nvswitch`: all-to-all at `link` rate (per GPU). `xgmi`: a full mesh, `link` is one pair's
    link (a group of k GPUs gets k-1 of them). `nvlink_bridge`: pairs (ranks 2i, 2i+1) share
    a bridge at `link` rate; other pairs cross `pcie`. `pcie_p2p`: every pair goes through the
    PCIe switch/root complex directly. `pcie_host`: no peer-to-peer; every transfer is staged
    through host memory (stock-driver GeForce cards).
    """

    kind: IntraNodeKind
    link: Link
    pcie: Link


class StackKernelEfficiency(_Spec):
    """Per training stack, its kernel throughput on this hardware relative to Megatron-LM with
    Transformer Engine (the reference, 1 by definition), where a calibration measured it; a stack
    left out (None) takes its global figure, fitted over all hardware
    (`cost_models.frameworks.KERNEL_EFFICIENCY`). One field per framework but the reference,
    named by its label (`cost_models.layout.Framework`; tests/test_hardware.py holds the two lists
    equal: this package cannot import that one)."""

    deepspeed: Number | None = Field(default=None, ge=0.1, le=1.5)
    torchtitan: Number | None = Field(default=None, ge=0.1, le=1.5)

    def of(self, stack: str) -> float | None:
        """The stack's figure on this hardware, by its label; None where none was measured (and for
        the reference stack, which has no field)."""
        value = getattr(self, stack, None)
        return None if value is None else float(value)


class Efficiency(_Spec):
    """Achieved fractions of the hardware peaks, used by the compute and communication models.

    gemm_max: fraction of the dense peak that a large, well-shaped GEMM reaches.
    fp8_gemm_ratio: FP8 GEMMs reach gemm_max x this of the FP8 peak. FP8 reaches a smaller
        fraction of its doubled peak than BF16 of its own (S. Bekman's MAMF tables: H100 BF16
        80.3%, FP8 70.9%, a ratio of 0.883); one measured ratio per GPU, so that runs in either
        precision inform the one fitted gemm_max.
    gemm_half_dim: a GEMM dimension of this size halves the efficiency along that dimension:
        eff(M, N, k) = gemm_max * q(M) q(N) q(k), q(x) = x / (x + gemm_half_dim), with M and N
        the GEMM's m and n rounded up to gemm_tile.
    gemm_tile: the output tile of the large-GEMM kernels, in rows and columns: a GEMM computes
        whole tiles, so its m and n count as rounded up to a multiple of it (tile quantization;
        `compute.batched_gemm_s`). 1 turns the rounding off.
    attention: fraction of the dense peak reached by fused (flash) attention kernels.
    memory_bound: fraction of HBM bandwidth reached by elementwise / normalization kernels.
    kernel_overhead_s: fixed cost per kernel launch (launch + tail), paid per GEMM and op.
    dp_overlap: fraction of the backward pass that hides the data-parallel gradient reduction
        (0 = no overlap, 1 = perfect overlap while backward compute lasts).
    attention_dropout_fwd, attention_dropout_bwd: the fraction of its dropout-free throughput that
        fused (flash) attention keeps with dropout on the attention probabilities, forward and
        backward. The kernel draws a Philox random number per score element in the forward and the
        same draws again in the backward (FlashAttention-2's csrc/flash_attn/src/philox.cuh;
        Dao-AILab/flash-attention issue #612), integer work on the CUDA cores beside the tensor-core
        matmuls. The defaults are the one published measurement: Dao-AILab/flash-attention pull
        request #2597 ("[Cute Sm100] support dropout", 2026-05-27: FlashAttention-4 on GB200
        against itself without dropout, bf16, p = 0.125, about 32K tokens; cuDNN 9.24's dropout
        kernels as fast or slower), "fwd ~ 75-85%, bwd ~ 60-70% of no-drop TFLOPS", "roughly
        constant across seqlen": the midpoints 0.80 and 0.65. A preset whose SM runs fewer
        tensor-core FLOPs per INT32 lane states its own (the A100's).
    stack_kernel_efficiency: a stack's kernel throughput here relative to the reference stack's
        (`StackKernelEfficiency`), where `paraplan calibrate` fitted it on this hardware's runs;
        the presets leave it empty.
    """

    gemm_max: Number = Field(ge=0.01, le=1.0)
    fp8_gemm_ratio: Number = Field(default=1.0, ge=0.1, le=1.5)
    gemm_half_dim: Number = Field(ge=0, le=1e5)
    gemm_tile: Count = Field(default=128, ge=1, le=1024)
    attention: Number = Field(ge=0.01, le=1.0)
    memory_bound: Number = Field(ge=0.01, le=1.0)
    kernel_overhead_s: Number = Field(ge=0, le=1e-2)
    dp_overlap: Number = Field(ge=0, le=1.0)
    attention_dropout_fwd: Number = Field(default=0.80, gt=0, le=1.0)
    attention_dropout_bwd: Number = Field(default=0.65, gt=0, le=1.0)
    stack_kernel_efficiency: StackKernelEfficiency = StackKernelEfficiency()
    sources: tuple[str, ...] = ()


class Price(_Spec):
    gpu_usd: Number | None = Field(default=None, ge=0, le=1e8)
    server_share_usd: Number | None = Field(default=None, ge=0, le=1e8)  # per GPU: chassis, CPU, RAM, NIC
    network_share_usd: Number | None = Field(default=None, ge=0, le=1e8)  # per GPU: switches, cables
    cloud_usd_per_gpu_hour: Number | None = Field(default=None, ge=0, le=1e5)
    lifetime_years: Number = Field(default=4.0, ge=0.1, le=50)
    sources: tuple[str, ...] = ()


class Power(_Spec):
    node_overhead_w: Number = Field(default=0.0, ge=0, le=1e6)  # CPUs, fans, NICs per node
    idle_fraction: Number = Field(default=0.25, ge=0, le=1)  # GPU draw when idle / TDP
    pue: Number = Field(default=1.3, ge=1.0, le=5.0)
    usd_per_kwh: Number | None = Field(default=None, ge=0, le=1e3)  # None: no energy price, no energy cost
    sources: tuple[str, ...] = ()


class Reliability(_Spec):
    gpu_mtbf_hours: Number = Field(ge=0.1, le=1e9)
    node_mtbf_hours: Number = Field(ge=0.1, le=1e9)  # non-GPU failures of one server
    storage_write_bytes_per_s: Number = Field(default=5e9, ge=1e6, le=1e15)  # per node checkpoint write
    restart_s: Number = Field(default=600.0, ge=0, le=1e7)
    sources: tuple[str, ...] = ()


class Host(_Spec):
    """The servers' CPUs and memory, for offloading optimizer states and weights (ZeRO-Offload,
    ZeRO-Infinity, FSDP2 CPU offload). Host <-> GPU transfers use `intra_node.pcie`."""

    memory_bytes: Number = Field(ge=1e9, le=1e15)  # host DRAM per node
    cpu_adam_params_per_s: Number = Field(ge=1e6, le=1e13)  # Adam steps per second on one node's CPUs
    sources: tuple[str, ...] = ()


class Cluster(_Spec):
    """A cluster building block: nodes of `gpus_per_node` identical GPUs."""

    name: str = Field(min_length=1)
    family: str = Field(default="", max_length=64)  # GPU generation, to match validation runs ("" = name)
    description: str = ""
    gpu: GPU
    gpus_per_node: Count = Field(ge=1, le=1024)
    intra_node: IntraNode
    inter_node: Link  # per-GPU share of the node's NICs, across the network
    efficiency: Efficiency
    memory_reserve_bytes: Number = Field(ge=0)  # CUDA context, NCCL buffers, allocator slack
    # NCCL's NVLink SHARP (NVLS) buffers per GPU of the node a communicator spans, for every
    # communicator with more than two of the node's GPUs (NCCL's NVLS heads: at most 32 of them,
    # cost_models/memory.NVLS_MAX_HEADS); 0 where the node has no NVLS
    # (cost_models/memory.nvls_buffer_bytes).
    nvls_bytes_per_rank: Number = Field(default=0.0, ge=0, le=1e10)
    price: Price | None = None
    power: Power | None = None
    reliability: Reliability | None = None
    host: Host | None = None

    @model_validator(mode="after")
    def _reserve_fits(self) -> Cluster:
        if self.memory_reserve_bytes >= self.gpu.memory_bytes:
            raise ValueError("memory_reserve_bytes must be below the GPU memory capacity")
        return self

    @property
    def gpu_family(self) -> str:
        return self.family or self.name

    @property
    def nvlink_domain(self) -> int:
        """GPUs that reach each other over a GPU fabric rather than PCIe or the network."""
        if self.intra_node.kind in ("nvswitch", "xgmi"):
            return self.gpus_per_node
        if self.intra_node.kind == "nvlink_bridge":
            return min(2, self.gpus_per_node)
        return 1

"""Shared test helpers: hypothesis profiles, one-layout arrays, a hand-made GPT spec, the presets."""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import settings

from paraplan.cost_models.candidates import Layouts
from paraplan.cost_models.layout import Layout
from paraplan.cost_models.models import ModelSpec, load_model, model_preset_names
from paraplan.hardware_specs.loader import load_cluster, preset_names
from paraplan.hardware_specs.schema import Cluster, Efficiency, Host, Link

# Hypothesis profiles: "ci" (set by .ci/run) derandomizes so that a CI run is reproducible.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("dev", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


def one(**knobs: Any) -> Layouts:
    """A `Layouts` matrix holding the single layout `Layout(**knobs)`."""
    return Layouts.of([Layout(**knobs)])


def gpt_spec(
    h: int = 1024, layers: int = 4, heads: int = 16, vocab: int = 50_000, seq: int = 2048, **extra: Any
) -> ModelSpec:
    """A GPT as in Megatron-LM and Korthikanti et al. 2022: full multi-head attention, a plain
    4h GELU MLP, LayerNorm, biases, learned positions, tied embeddings, dropout."""
    fields: dict[str, Any] = {
        "name": "gpt-test",
        "hidden_size": h,
        "num_layers": layers,
        "num_heads": heads,
        "num_kv_heads": heads,
        "head_dim": h // heads,
        "ffn_hidden_size": 4 * h,
        "vocab_size": vocab,
        "max_seq_len": seq,
        "mlp": "plain",
        "tied_embeddings": True,
        "learned_positions": True,
        "layernorm": True,
        "linear_bias": True,
        "dropout": True,
    }
    fields.update(extra)
    return ModelSpec(**fields)


def round_cluster(base: Cluster) -> Cluster:
    """`base` with round figures, so that hand arithmetic stays short and does not move when a
    preset is recalibrated: a GPU of 200e12 FLOP/s in BF16 and FP16, 400e12 in FP8, 2e12 B/s of
    HBM; NVLink 100e9 B/s at 2 us, PCIe 10e9 B/s at 4 us, the network 10e9 B/s at 10 us (all at
    efficiency 1); GEMMs at gemm_max 0.5 with gemm_half_dim 0 (no shape penalty), attention at
    0.5, memory-bound kernels at the full HBM rate, no launch cost, dp_overlap 0.5; a host of
    1e12 bytes whose CPUs run Adam at 1e9 parameters/s."""
    gpu = base.gpu.model_copy(
        update={"peak_bf16_flops": 200e12, "peak_fp16_flops": 200e12, "peak_fp8_flops": 400e12,
                "mem_bw_bytes_per_s": 2e12}
    )  # fmt: skip
    intra = base.intra_node.model_copy(
        update={
            "link": Link(name="nvlink", bw_bytes_per_s=100e9, latency_s=2e-6, efficiency=1.0),
            "pcie": Link(name="pcie", bw_bytes_per_s=10e9, latency_s=4e-6, efficiency=1.0),
        }
    )
    return base.model_copy(
        update={
            "name": f"{base.name}-round",
            "gpu": gpu,
            "host": Host(memory_bytes=1e12, cpu_adam_params_per_s=1e9),
            "intra_node": intra,
            "inter_node": Link(name="ib", bw_bytes_per_s=10e9, latency_s=10e-6, efficiency=1.0),
            "efficiency": Efficiency(
                gemm_max=0.5, gemm_half_dim=0, attention=0.5, memory_bound=1.0, kernel_overhead_s=0, dp_overlap=0.5
            ),
        }
    )


@pytest.fixture(scope="session")
def presets() -> dict[str, Cluster]:
    """Every bundled hardware preset, by name (from the registry, loaded once)."""
    return {name: load_cluster(name) for name in preset_names()}


@pytest.fixture(scope="session")
def models() -> dict[str, ModelSpec]:
    """Every bundled model preset, by name (from the registry, loaded once)."""
    return {name: load_model(name) for name in model_preset_names()}


@pytest.fixture(scope="session")
def a100(presets: dict[str, Cluster]) -> Cluster:
    return presets["a100-80g"]


@pytest.fixture(scope="session")
def dgx(presets: dict[str, Cluster]) -> Cluster:
    """A DGX-like node (8 GPUs on NVSwitch, one NIC per GPU) with round figures: `round_cluster`."""
    return round_cluster(presets["a100-80g"])

"""NCCL's NVLink SHARP buffers (`memory.nvls_buffer_bytes`), counted by hand per communicator.

Every figure is the h100-sxm preset's 301,989,888 B (NCCL's logged nvlsPerRankSize) times the
GPUs of one 8-GPU node that each communicator with more than two of them spans."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conftest import one

from paraplan.cost_models.evaluate import evaluate
from paraplan.cost_models.memory import nvls_buffer_bytes
from paraplan.cost_models.models import ModelSpec
from paraplan.cost_models.stack import Stack
from paraplan.hardware_specs.schema import Cluster

PER_RANK = 301_989_888
NVLS = Stack(nvls=True)


def _nvls(cluster: Cluster, stack: Stack = NVLS, **knobs: Any) -> float:
    return float(nvls_buffer_bytes(one(**knobs), cluster, stack)[0])


def test_presets_carry_the_logged_size(presets: dict[str, Cluster]) -> None:
    # NVSwitch nodes with NVLS (Hopper, Blackwell) carry NCCL's logged size; Ampere has no NVLS.
    assert presets["h100-sxm"].nvls_bytes_per_rank == PER_RANK
    assert presets["b200"].nvls_bytes_per_rank == PER_RANK
    assert presets["a100-80g"].nvls_bytes_per_rank == 0.0
    assert presets["a800-80g"].nvls_bytes_per_rank == 0.0


def test_megatron_tp8_pp4_dp2(presets: dict[str, Cluster]) -> None:
    # 64 GPUs, ranks TP fastest: the world spans all 8 GPUs of a node; TP 8 all 8; DP pairs
    # ranks 8 apart, 16 x 4 stages... one per node (2 ranks, no NVLS anyway); Megatron's TP x PP
    # group holds the node's 8 TP ranks of one stage (stages are TP x DP = 16 ranks apart).
    # 3 communicators x 8 GPUs = 24 x 301,989,888 = 7,247,757,312 B (6.75 GiB).
    got = _nvls(presets["h100-sxm"], framework="megatron", tp=8, pp=4, dp=2, micro_batch=1)
    assert got == 7_247_757_312


def test_megatron_fp8_adds_the_amax_group(presets: dict[str, Cluster]) -> None:
    # TP2 DP4 on one node: world 8; TP 2 (not NVLS); DP 4 ranks 2 apart, all on the node: 4;
    # TP x PP = 2 (not NVLS); with FP8 the amax group TP x DP = 8.  (8 + 4 + 8) x 301,989,888.
    knobs: dict[str, Any] = {"framework": "megatron", "tp": 2, "dp": 4, "micro_batch": 1}
    assert _nvls(presets["h100-sxm"], **knobs) == 12 * PER_RANK
    assert _nvls(presets["h100-sxm"], precision="fp8", **knobs) == 20 * PER_RANK == 6_039_797_760


def test_pipeline_stages_on_one_node_join_the_model_parallel_group(presets: dict[str, Cluster]) -> None:
    # TP4 PP8 DP1 on 32 GPUs: a node holds 2 stages of 4 TP ranks, so TP x PP spans 8 GPUs there;
    # world 8, TP 4, DP 1: 8 + 4 + 8 = 20 GPUs' worth.
    assert _nvls(presets["h800"], framework="megatron", tp=4, pp=8, dp=1, micro_batch=1) == 20 * PER_RANK


def test_other_frameworks_skip_megatrons_groups(presets: dict[str, Cluster]) -> None:
    # torchtitan TP2 DP4 FP8 on 8 GPUs: world 8 + DP 4; no TP x PP or amax communicator.
    got = _nvls(presets["h100-sxm"], framework="torchtitan", tp=2, dp=4, zero=2, micro_batch=1, precision="fp8")
    assert got == 12 * PER_RANK


def test_two_gpu_groups_and_nodes_without_nvls_hold_none(presets: dict[str, Cluster]) -> None:
    # Two GPUs in all: every communicator spans 2 of them, which NCCL runs without NVLS.
    assert _nvls(presets["h100-sxm"], framework="megatron", tp=2, micro_batch=1) == 0.0
    assert _nvls(presets["a800-80g"], framework="megatron", tp=8, micro_batch=1) == 0.0
    assert _nvls(presets["h100-sxm"], Stack(), framework="megatron", tp=8, micro_batch=1) == 0.0


def test_nvls_adds_to_the_other_term_and_nothing_else(
    models: dict[str, ModelSpec], presets: dict[str, Cluster]
) -> None:
    lay = one(framework="megatron", tp=8, micro_batch=1, global_batch=8)
    off = evaluate(models["llama2-7b"], presets["h100-sxm"], lay, Stack())
    on = evaluate(models["llama2-7b"], presets["h100-sxm"], lay, NVLS)
    # TP8 on 8 GPUs: world 8 + TP 8 + TP x PP 8 = 24 GPUs' worth on top of the 2.5e9 B reserve
    assert float(on.memory.other[0]) == 2.5e9 + 24 * PER_RANK
    assert float(off.memory.other[0]) == 2.5e9
    assert float(on.step_time_s[0]) == float(off.step_time_s[0])
    for term in ("params", "grads", "optimizer", "activations"):
        assert np.array_equal(getattr(on.memory, term), getattr(off.memory, term))


@pytest.mark.parametrize("gpus_per_node", [4, 8])
def test_world_never_exceeds_the_node(presets: dict[str, Cluster], gpus_per_node: int) -> None:
    # DP 64 at TP1 (64 GPUs): the world and the DP group each span the whole node.
    cluster = presets["h100-sxm"].model_copy(update={"gpus_per_node": gpus_per_node})
    assert _nvls(cluster, framework="megatron", dp=64, micro_batch=1) == 2 * gpus_per_node * PER_RANK


def test_a_stride_that_does_not_divide_the_node_counts_the_ranks_it_holds(presets: dict[str, Cluster]) -> None:
    # TP3 DP8 on 24 GPUs: a DP group is ranks 0, 3, 6, 9, ...; the first node holds 0, 3 and 6,
    # so it is an NVLS communicator of 3 there, the same count `topology` prices its ring with.
    # World 8 + TP 3 + DP 3 + TP x PP 3 = 17 GPUs' worth.
    assert _nvls(presets["h100-sxm"], framework="megatron", tp=3, dp=8, micro_batch=1) == 17 * PER_RANK


# GB200 NVL72 (the gb200 preset): NCCL's NVLS buffers per head on Blackwell inside one NVLink
# domain, from NVIDIA/nccl v2.30.7-1 src/transport/nvls.cc: nvlsPerRankSize = nChannels * 2 *
# buffSize = 24 (NVLS_NCHANNELS_SM100_NVL) * 2 * (128 KiB chunk * 8 NCCL_STEPS) = 50,331,648 B;
# a communicator holds nvlsPerRankSize * nHeads, nHeads = min(32 (NCCL_MAX_NVLS_ARITY), its GPUs
# on the node).
GB200_PER_HEAD = 24 * 2 * 131_072 * 8


def test_gb200_carries_nccls_blackwell_per_head_size(presets: dict[str, Cluster]) -> None:
    assert presets["gb200"].nvls_bytes_per_rank == GB200_PER_HEAD == 50_331_648


def test_a_72_gpu_communicator_holds_32_heads(presets: dict[str, Cluster]) -> None:
    # DP 72 at TP1 on one rack: the world and the DP group each span 72 GPUs, 32 heads each:
    # 2 x 32 x 48 MiB = 3 GiB, not 2 x 72 x 48 MiB = 6.75 GiB.
    got = _nvls(presets["gb200"], framework="megatron", dp=72, micro_batch=1)
    assert got == 2 * 32 * GB200_PER_HEAD == 3 * 1024**3


def test_megatron_tp8_dp18_on_two_racks(presets: dict[str, Cluster]) -> None:
    # 144 GPUs, TP8 PP1 DP18: the world holds 72 GPUs of the first rack (32 heads); TP 8;
    # DP 18 ranks 8 apart, 9 of them on a rack (0, 8, ..., 64); TP x PP = TP's 8. FP8 adds the
    # amax group TP x DP, 72 GPUs of the rack (32 heads).
    # BF16: (32 + 8 + 9 + 8) x 50,331,648 = 57 x 50,331,648 = 2,868,903,936 B.
    knobs: dict[str, Any] = {"framework": "megatron", "tp": 8, "dp": 18, "micro_batch": 1}
    assert _nvls(presets["gb200"], **knobs) == 2_868_903_936
    assert _nvls(presets["gb200"], precision="fp8", **knobs) == (57 + 32) * GB200_PER_HEAD


def test_heads_stop_at_32(presets: dict[str, Cluster]) -> None:
    # DP 64 at TP1: world and DP span 32 GPUs of a 32-GPU node (32 heads each) and 64 of a
    # 64-GPU node (still 32 heads each); on 8-GPU nodes (every other preset) the cap never binds.
    cluster = presets["h100-sxm"].model_copy(update={"gpus_per_node": 32})
    assert _nvls(cluster, framework="megatron", dp=64, micro_batch=1) == 2 * 32 * PER_RANK
    cluster = presets["h100-sxm"].model_copy(update={"gpus_per_node": 64})
    assert _nvls(cluster, framework="megatron", dp=64, micro_batch=1) == 2 * 32 * PER_RANK

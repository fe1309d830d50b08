"""hardware_specs: every preset loads and round-trips; datasheet figures; the topology's group
links; the loader's one-line errors; safe reading of input files."""

from __future__ import annotations

import math
import os
import tomllib
from importlib import resources
from pathlib import Path

import pytest

from paraplan.hardware_specs.dump import cluster_to_toml
from paraplan.hardware_specs.errors import InputError
from paraplan.hardware_specs.files import read_text_file
from paraplan.hardware_specs.loader import SpecError, load_cluster, preset_names
from paraplan.hardware_specs.schema import GPU, Cluster, Efficiency, Host, Link, Power, Price, Reliability
from paraplan.hardware_specs.topology import group_link, node_graph, pair_link

MIB = 1_048_576


def _preset_text(name: str) -> str:
    return resources.files("paraplan.hardware_specs").joinpath("presets", f"{name}.toml").read_text()


# ---------------------------------------------------------------------------- presets


def test_there_are_presets_and_they_are_sorted() -> None:
    names = preset_names()
    assert names and names == sorted(names)


@pytest.mark.parametrize("name", preset_names())
def test_every_preset_loads_with_sources(presets: dict[str, Cluster], name: str) -> None:
    cluster = presets[name]
    assert cluster.name == name
    # each table of figures says where its figures come from
    tables: list[GPU | Link | Efficiency | Price | Power | Reliability | Host] = [
        cluster.gpu, cluster.intra_node.link, cluster.intra_node.pcie, cluster.inter_node, cluster.efficiency,
    ]  # fmt: skip
    tables += [t for t in (cluster.price, cluster.power, cluster.reliability, cluster.host) if t is not None]
    for table in tables:
        assert table.sources, f"{name}: {type(table).__name__} has no sources"


@pytest.mark.parametrize("name", preset_names())
def test_every_preset_round_trips_through_toml(presets: dict[str, Cluster], name: str, tmp_path: Path) -> None:
    # what `paraplan calibrate` writes (hardware_specs.dump) loads back as the same cluster
    path = tmp_path / f"{name}.toml"
    path.write_text(cluster_to_toml(presets[name], header="round trip"))
    assert load_cluster(str(path)) == presets[name]


@pytest.mark.parametrize("name", preset_names())
def test_every_preset_is_plain_toml(name: str) -> None:
    # other tools can read the files too
    assert tomllib.loads(_preset_text(name))["name"] == name


@pytest.mark.parametrize("name", preset_names())
def test_figures_are_in_si_units(presets: dict[str, Cluster], name: str) -> None:
    # plausibility bands catch a figure entered in the wrong unit (GB/s for B/s, TFLOP/s for FLOP/s)
    cluster = presets[name]
    assert 1e13 < cluster.gpu.peak_bf16_flops < 1e16
    assert 1e10 < cluster.gpu.memory_bytes < 1e12
    assert 1e11 < cluster.gpu.mem_bw_bytes_per_s < 1e14
    assert 1e9 < cluster.inter_node.bw_bytes_per_s < 1e12
    assert 1e-7 < cluster.intra_node.link.latency_s < 1e-4
    assert 0 < cluster.memory_reserve_bytes < cluster.gpu.memory_bytes / 4


def test_a_stack_figure_is_stored_for_every_framework_but_the_reference() -> None:
    # hardware_specs cannot import cost_models: its list of stacks is kept equal to Framework's here
    from paraplan.cost_models.layout import Framework
    from paraplan.hardware_specs.schema import StackKernelEfficiency

    assert set(StackKernelEfficiency.model_fields) == set(Framework.labels()) - {"megatron"}
    # a stored figure round-trips through the TOML; an unset one writes no table
    b200 = load_cluster("b200")  # a preset no stack was fitted on
    assert "stack_kernel_efficiency" not in cluster_to_toml(b200)
    own = b200.efficiency.model_copy(update={"stack_kernel_efficiency": StackKernelEfficiency(deepspeed=0.9)})
    text = cluster_to_toml(b200.model_copy(update={"efficiency": own}))
    assert tomllib.loads(text)["efficiency"]["stack_kernel_efficiency"] == {"deepspeed": 0.9}
    with pytest.raises(ValueError):
        StackKernelEfficiency(torchtitan=0.0)


def test_names_are_case_insensitive_and_loaded_once() -> None:
    name = preset_names()[0]
    assert load_cluster(name.upper()) is load_cluster(name)


@pytest.mark.parametrize(
    ("name", "bf16", "fp8", "memory"),
    [
        # NVIDIA A100 datasheet: 312 TFLOP/s BF16 dense, no FP8; nvidia-smi 81920 MiB
        ("a100-80g", 312e12, None, 81920 * MIB),
        # NVIDIA H100 datasheet, SXM: 1,979 BF16 / 3,958 FP8 with sparsity, dense half; 81559 MiB
        ("h100-sxm", 989e12, 1979e12, 81559 * MIB),
        # ROCm MI300 docs: 1,307.4 BF16 / 2,614.9 FP8 dense, 192 GiB
        ("mi300x", 1307.4e12, 2614.9e12, 192 * 1024**3),
        # Ampere GA102 whitepaper: RTX 3090 71 TFLOP/s BF16 with FP32 accumulate, no FP8
        ("rtx3090", 71e12, None, 24576 * MIB),
    ],
)
def test_datasheet_figures(presets: dict[str, Cluster], name: str, bf16: float, fp8: float | None, memory: int) -> None:
    gpu = presets[name].gpu
    assert (gpu.peak_bf16_flops, gpu.peak_fp8_flops, gpu.memory_bytes) == (bf16, fp8, memory)


def test_a_power_limited_b200_has_the_rated_peaks_of_its_limit(presets: dict[str, Cluster]) -> None:
    # NVIDIA Blackwell Architecture Technical Brief, per GPU with sparsity: HGX B100 (700 W) 3.5 PF
    # BF16 / 7 PF FP8, HGX B200 (1,000 W) 4.5 / 9; dense half. At 750 W, linear in the limit:
    # BF16 1,750 + 50/300 x 500 = 1,833.3 TFLOP/s, FP8 3,500 + 50/300 x 1,000 = 3,666.7
    capped, full = presets["b200-750w"], presets["b200"]
    assert capped.gpu.peak_bf16_flops == pytest.approx(1833.33e12, rel=1e-4)
    assert capped.gpu.peak_fp8_flops == pytest.approx(3666.67e12, rel=1e-4)
    assert capped.gpu.tdp_w == 750
    # the same memory and links (both ratings: 192 GB HBM3e at 8 TB/s, NVLink 1.8 TB/s), the
    # same die's fitted efficiencies; the stacks' figures are each preset's own (fitted on the
    # stack's runs on that very preset: benchmarks/fit_presets.py step 2b)
    assert capped.gpu.memory_bytes == full.gpu.memory_bytes
    assert capped.gpu.mem_bw_bytes_per_s == full.gpu.mem_bw_bytes_per_s
    assert capped.intra_node == full.intra_node and capped.inter_node == full.inter_node
    die = {"sources", "stack_kernel_efficiency"}
    assert capped.efficiency.model_dump(exclude=die) == full.efficiency.model_dump(exclude=die)


def test_the_500_w_h100_has_the_rated_peaks_of_its_limit(presets: dict[str, Cluster]) -> None:
    # NVIDIA H100 datasheet, with sparsity: H100 SXM (up to 700 W) 1,979 TFLOPS BF16 / 3,958 FP8,
    # H100 NVL (350-400 W) 1,671 / 3,341; dense half. At Grand Teton's 500 W, linear in the limit
    # from the NVL's 400 W: BF16 835.5 + 100/300 x 154 = 886.8, FP8 1,670.5 + 100/300 x 308.5 = 1,773.3
    capped, full = presets["h100-96g"], presets["h100-sxm"]
    assert capped.gpu.peak_bf16_flops == pytest.approx(886.83e12, rel=1e-4)
    assert capped.gpu.peak_fp8_flops == pytest.approx(1773.33e12, rel=1e-4)
    assert (capped.gpu.tdp_w, full.gpu.tdp_w) == (500, 700)
    # the same die's fitted efficiencies; the stacks' figures are each preset's own
    die = {"sources", "stack_kernel_efficiency"}
    assert capped.efficiency.model_dump(exclude=die) == full.efficiency.model_dump(exclude=die)


def test_gb200_per_gpu_figures_from_the_rack(presets: dict[str, Cluster]) -> None:
    # NVIDIA GB200 NVL72 specification table, per rack of 72 GPUs: FP16/BF16 360 PFLOPS and FP8
    # 720 PFLOPS with sparsity (dense half), 576 TB/s HBM3e, NVLink 130 TB/s (bidirectional);
    # 36 Grace CPUs with up to 480 GB LPDDR5X each.
    gb200 = presets["gb200"]
    assert gb200.gpu.peak_bf16_flops == pytest.approx(360e15 / 72 / 2)
    assert gb200.gpu.peak_fp8_flops == pytest.approx(720e15 / 72 / 2)
    assert gb200.gpu.mem_bw_bytes_per_s == pytest.approx(576e12 / 72)
    # 130 TB/s is 72 x 1.8 TB/s rounded (129.6): 900 GB/s per direction
    assert gb200.intra_node.link.bw_bytes_per_s == pytest.approx(130e12 / 72 / 2, rel=0.01) == 1.8e12 / 2
    assert gb200.gpu.memory_bytes == 189471 * MIB
    assert (gb200.gpus_per_node, gb200.nvlink_domain, gb200.gpu_family) == (72, 72, "b200")
    assert gb200.host is not None and gb200.host.memory_bytes == 36 * 480e9
    # the same die as b200: its fitted fractions (benchmarks/fit_presets.py SAME_DIE)
    assert gb200.efficiency.model_dump(exclude={"sources"}) == presets["b200"].efficiency.model_dump(
        exclude={"sources"}
    )
    # no published price: no placeholder either
    assert gb200.price is None


def test_b300_per_gpu_figures_from_the_hgx_table(presets: dict[str, Cluster]) -> None:
    # NVIDIA HGX specification table, 'HGX B300' (8 GPUs): FP16/BF16 36 PFLOPS and FP8 72 PFLOPS
    # with sparsity (dense half), NVLink 14.4 TB/s total, networking 1.6 TB/s (8 x 800 Gb/s, both
    # directions); the Blackwell Ultra datasheet's 62 TB/s HBM3e; nvidia-smi 275040 MiB.
    b300, b200 = presets["b300"], presets["b200"]
    assert b300.gpu.peak_bf16_flops == pytest.approx(36e15 / 8 / 2) == 2.25e15
    assert b300.gpu.peak_fp8_flops == pytest.approx(72e15 / 8 / 2) == 4.5e15
    # NVIDIA rates B300's dense BF16/FP8 the same as B200's (HGX B200: 36 / 72 PFLOPS too)
    assert (b300.gpu.peak_bf16_flops, b300.gpu.peak_fp8_flops) == (b200.gpu.peak_bf16_flops, b200.gpu.peak_fp8_flops)
    assert b300.gpu.mem_bw_bytes_per_s == pytest.approx(62e12 / 8)
    assert b300.gpu.memory_bytes == 275040 * MIB  # 288.4e9 B: the '288 GB HBM3e'
    assert b300.gpu.memory_bytes == pytest.approx(288e9, rel=0.002)
    assert b300.intra_node.link.bw_bytes_per_s == pytest.approx(14.4e12 / 8 / 2)
    assert b300.inter_node.bw_bytes_per_s == pytest.approx(800e9 / 8) == pytest.approx(1.6e12 / 2 / 8)
    assert b300.gpu.tdp_w == 1100
    # host copies at the Xeon 6's PCIe Gen5 x16, not the GPU's Gen6 (128e9)
    assert b300.intra_node.pcie.bw_bytes_per_s == 64e9
    assert (b300.gpus_per_node, b300.nvlink_domain, b300.gpu_family) == (8, 8, "b300")
    assert b300.price is None  # no published price: no placeholder either


def test_gb300_per_gpu_figures_from_the_rack(presets: dict[str, Cluster]) -> None:
    # NVIDIA GB300 NVL72 specification table, per rack of 72 GPUs: FP16/BF16 360 PFLOPS and FP8/FP6
    # 720 PFLOPS with sparsity (dense half), 576 TB/s HBM3e, NVLink 130 TB/s (bidirectional), 36
    # Grace CPUs with up to 17 TB LPDDR5X at up to 14 TB/s.
    gb300, gb200 = presets["gb300"], presets["gb200"]
    assert gb300.gpu.peak_bf16_flops == pytest.approx(360e15 / 72 / 2) == 2.5e15
    assert gb300.gpu.peak_fp8_flops == pytest.approx(720e15 / 72 / 2) == 5e15
    # the same dense BF16/FP8 per GPU as GB200 NVL72 (whose table also reads 360 / 720 PFLOPS)
    assert (gb300.gpu.peak_bf16_flops, gb300.gpu.peak_fp8_flops) == (
        gb200.gpu.peak_bf16_flops,
        gb200.gpu.peak_fp8_flops,
    )
    assert gb300.gpu.mem_bw_bytes_per_s == pytest.approx(576e12 / 72)
    assert gb300.intra_node.link.bw_bytes_per_s == pytest.approx(130e12 / 72 / 2, rel=0.01) == 1.8e12 / 2
    # nvidia-smi 284208 MiB = 277.5 GiB: NVIDIA's '20 TB' / 72 = 277.8, in GiB-like units
    assert gb300.gpu.memory_bytes == 284208 * MIB
    assert gb300.gpu.memory_bytes / 2**30 == pytest.approx(20e3 / 72, abs=0.5)
    assert gb300.inter_node.bw_bytes_per_s == pytest.approx(800e9 / 8)
    assert gb300.gpu.tdp_w == 1400
    # host link: the Grace memory (14e12 / 36 Graces / 2 GPUs = 194.4e9 B/s) is narrower than
    # NVLink-C2C (900e9 bidirectional / 2 directions / 2 GPUs = 225e9)
    host_link = gb300.intra_node.pcie.bw_bytes_per_s
    assert host_link == pytest.approx(14e12 / 36 / 2, rel=0.01) and host_link < 900e9 / 2 / 2
    assert gb300.host is not None and gb300.host.memory_bytes == 17e12
    # 142 kW rack maximum less 72 x 1,400 W GPUs, ~60% of it under a training load
    assert gb300.power is not None
    assert gb300.power.node_overhead_w == pytest.approx(0.6 * (142e3 - 72 * 1400), rel=0.02)
    assert (gb300.gpus_per_node, gb300.nvlink_domain, gb300.gpu_family) == (72, 72, "b300")
    assert gb300.price is None


def test_b300_takes_gb300s_fitted_fractions(presets: dict[str, Cluster]) -> None:
    # the same Blackwell Ultra die, fitted on GB300's runs (benchmarks/fit_presets.py SAME_DIE)
    assert presets["b300"].efficiency.model_dump(exclude={"sources"}) == presets["gb300"].efficiency.model_dump(
        exclude={"sources"}
    )
    assert presets["b300"].gpu_family == presets["gb300"].gpu_family == "b300"


# ---------------------------------------------------------------------------- topology


def test_flash_attention_dropout_figures(presets: dict[str, Cluster]) -> None:
    # flash-attention PR #2597 on GB200: 75-85% of the dropout-free throughput forward, 60-70%
    # backward, i.e. 1/0.80 - 1 = 0.25 and 1/0.65 - 1 = 0.538 of the time added. The Hopper and
    # Blackwell presets take it; the A100 die adds half that time (its SM: the same 64 INT32
    # lanes for half the tensor-core FMAs per clock): 1/1.125 = 0.889, 1/1.269 = 0.788.
    for name in ("h100-sxm", "h200", "b200", "gb200", "gb300"):
        eff = presets[name].efficiency
        assert (eff.attention_dropout_fwd, eff.attention_dropout_bwd) == (0.80, 0.65)
    for name in ("a100-40g", "a100-80g", "a100-80g-pcie", "a800-80g"):
        eff = presets[name].efficiency
        assert 1 / eff.attention_dropout_fwd - 1 == pytest.approx(0.25 / 2, abs=1e-3)
        assert 1 / eff.attention_dropout_bwd - 1 == pytest.approx(0.538 / 2, abs=1e-3)


def test_tp8_on_nvswitch_is_nvlink(a100: Cluster) -> None:
    link = group_link(a100, 8, 1)
    assert link.kind == "nvlink"
    assert link.bw_bytes_per_s == a100.intra_node.link.effective_bw_bytes_per_s
    # a GPU -> NVSwitch -> GPU path adds the link's latency once (half on each edge)
    assert link.latency_s == pytest.approx(a100.intra_node.link.latency_s)


def test_tp8_ep8_stays_on_nvlink_in_a_72_gpu_rack(presets: dict[str, Cluster]) -> None:
    # TP8 x EP8 = 64 GPUs, ranks TP fastest. The EP group of a rank is 8 ranks 8 apart (0, 8, ...,
    # 56) and the tokens' TP x EP group the 64 consecutive ranks 0..63. On gb200 all 64 sit in the
    # first 72-GPU node: NVLink at 900e9 x 0.85 = 765e9 B/s. On b200 (8 GPUs a node) the EP group
    # has one member per node (8 nodes) and the 64 ranks span 8 nodes: the network, each EP member
    # on its own NIC share 50e9 x 0.85 = 42.5e9 B/s.
    gb200, b200 = presets["gb200"], presets["b200"]
    for size, stride in ((8, 8), (64, 1)):
        link = group_link(gb200, size, stride)
        assert link.kind == "nvlink"
        assert link.bw_bytes_per_s == pytest.approx(765e9)
        assert group_link(b200, size, stride).kind == "network"
    assert group_link(b200, 8, 8).bw_bytes_per_s == pytest.approx(42.5e9)
    # the hierarchical all-to-all's legs (comm.a2a_legs): no NIC leg inside the rack; on b200 one
    # NIC share and no NVLink leg (one member per node)
    assert math.isinf(group_link(gb200, 8, 8).nic_bw_bytes_per_s)
    spread = group_link(b200, 8, 8)
    assert spread.nic_bw_bytes_per_s == pytest.approx(42.5e9)
    assert spread.node_bw_bytes_per_s == math.inf
    # past 72 GPUs the rack is left: TP8 x EP16 (128 ranks, 72 on the first node)
    assert group_link(gb200, 16, 8).kind == "network"


def test_a_72_gpu_tp_ep_group_stays_on_nvlink_in_a_gb300_rack(presets: dict[str, Cluster]) -> None:
    # TP8 x EP9 = 72 ranks, TP fastest: the tokens' TP x EP group is ranks 0..71 and an EP group 9
    # ranks 8 apart (0, 8, ..., 64), all in the one 72-GPU node: NVLink at 900e9 x 0.85 = 765e9 B/s,
    # no NIC leg. On b300 (8 GPUs a node) the same EP group has one member per node: each on its
    # own ConnectX-8 share, 100e9 x 0.85 = 85e9 B/s (twice b200's 400 Gb/s share).
    gb300, b300 = presets["gb300"], presets["b300"]
    for size, stride in ((72, 1), (9, 8)):
        link = group_link(gb300, size, stride)
        assert link.kind == "nvlink" and link.bw_bytes_per_s == pytest.approx(765e9)
        assert math.isinf(link.nic_bw_bytes_per_s)
    spread = group_link(b300, 9, 8)
    assert spread.kind == "network" and spread.bw_bytes_per_s == pytest.approx(85e9)
    # TP8 x EP10 = 80 ranks leaves the rack: the group crosses to the next one over its NICs
    across = group_link(gb300, 10, 8)
    assert across.kind == "network" and across.nic_bw_bytes_per_s == pytest.approx(85e9)


def test_one_rank_per_node_rides_the_network(a100: Cluster) -> None:
    # 4 ranks 8 apart: every ring neighbour on another node
    link = group_link(a100, 4, 8)
    assert link.kind == "network"
    assert link.bw_bytes_per_s == a100.inter_node.effective_bw_bytes_per_s
    assert link.latency_s == pytest.approx(a100.inter_node.latency_s)


def test_a_group_spanning_nodes_is_a_network_group(a100: Cluster) -> None:
    assert group_link(a100, 16, 1).kind == "network"


@pytest.mark.parametrize(
    ("name", "size", "stride", "kind"),
    [
        ("rtx4090", 2, 1, "pcie_host"),  # no peer-to-peer: staged through host memory
        ("l40s", 4, 2, "pcie"),  # PCIe peer-to-peer
        ("mi300x", 8, 1, "xgmi"),  # Infinity Fabric
        ("rtx3090", 2, 1, "nvlink"),  # a bridged pair (0, 1)
        ("rtx3090", 2, 2, "pcie"),  # ranks 0 and 2 sit on different bridges
        ("rtx3090", 4, 1, "pcie"),  # a ring over two bridges crosses PCIe
    ],
)
def test_group_link_kinds(presets: dict[str, Cluster], name: str, size: int, stride: int, kind: str) -> None:
    assert group_link(presets[name], size, stride).kind == kind


def test_a_send_recv_ring_steps_at_its_slowest_neighbour_pair(presets: dict[str, Cluster]) -> None:
    # MI300X: a collective over 4 GPUs spreads over 3 of the mesh's dedicated links (3 x 64e9 x
    # 0.70 = 134.4e9 B/s), a send to the next GPU has one (44.8e9)
    mesh = group_link(presets["mi300x"], 4, 1)
    assert mesh.bw_bytes_per_s == pytest.approx(134.4e9)
    assert mesh.pair_bw_bytes_per_s == pytest.approx(44.8e9)
    # A100: 8 ranks 2 apart, 4 on each of two nodes: the collective gets 4 NICs (4 x 25e9 x 0.85
    # = 85e9), the ring pair across the boundary one (21.25e9); inside one node the pair is NVLink
    # (300e9 x 0.80 = 240e9)
    a100 = presets["a100-80g"]
    across = group_link(a100, 8, 2)
    assert across.bw_bytes_per_s == pytest.approx(85e9)
    assert across.pair_bw_bytes_per_s == pytest.approx(21.25e9)
    assert group_link(a100, 4, 2).pair_bw_bytes_per_s == pytest.approx(240e9)


def test_a_single_rank_is_local(a100: Cluster) -> None:
    link = group_link(a100, 1, 8)
    assert (link.bw_bytes_per_s, link.latency_s, link.kind) == (math.inf, 0.0, "local")


def test_group_link_refuses_empty_groups(a100: Cluster) -> None:
    with pytest.raises(ValueError, match="size=0"):
        group_link(a100, 0, 1)
    with pytest.raises(ValueError, match="stride=0"):
        group_link(a100, 2, 0)


def test_pair_links(a100: Cluster) -> None:
    assert pair_link(a100, 3, 3).kind == "local"
    assert pair_link(a100, 0, 5).kind == "nvlink"
    cross = pair_link(a100, 7, 8)  # the last GPU of node 0, the first of node 1
    assert cross.kind == "network"
    assert cross.latency_s == pytest.approx(a100.inter_node.latency_s)


def test_node_graph(a100: Cluster, presets: dict[str, Cluster]) -> None:
    graph = node_graph(a100, nodes=2)
    for vertex in ("gpu0.0", "gpu1.7", "nvswitch0", "nvswitch1", "cpu0", "cpu1", "network"):
        assert vertex in graph
    edge = graph.edges["gpu0.3", "network"]
    assert edge["kind"] == "network"
    assert edge["bw_bytes_per_s"] == a100.inter_node.effective_bw_bytes_per_s
    bridged = node_graph(presets["rtx3090"], nodes=1)
    assert bridged.has_edge("gpu0.0", "gpu0.1")
    assert not bridged.has_edge("gpu0.1", "gpu0.2")


def test_nvlink_is_preferred_over_a_lower_latency_pcie(a100: Cluster) -> None:
    # DGX A100 with a PCIe latency of 2 us (below NVLink's 3 us): NVLink 240e9 B/s should still
    # carry TP8; the model routes it over PCIe at 13.76e9 B/s.
    faster_pcie = a100.intra_node.pcie.model_copy(update={"latency_s": 2e-6})
    cluster = a100.model_copy(update={"intra_node": a100.intra_node.model_copy(update={"pcie": faster_pcie})})
    assert group_link(cluster, 8, 1).kind == "nvlink"


# ---------------------------------------------------------------------------- loader errors


def _write(tmp_path: Path, text: str, name: str = "x.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _error(arg: str) -> str:
    """The loader's message for `arg`: one line, and an InputError (what the CLI prints as 'Error:')."""
    with pytest.raises(InputError) as info:
        load_cluster(arg)
    assert isinstance(info.value, SpecError)
    message = str(info.value)
    assert message and "\n" not in message
    return message


def test_unknown_name_lists_the_presets() -> None:
    message = _error("a100-90g")
    assert "a100-90g" in message
    for name in preset_names():
        assert name in message


def test_a_toml_path_loads(tmp_path: Path) -> None:
    name = preset_names()[0]
    path = _write(tmp_path, _preset_text(name).replace(f'name = "{name}"', 'name = "mine"', 1))
    assert load_cluster(str(path)).name == "mine"


def test_a_byte_order_mark_is_accepted(tmp_path: Path) -> None:
    # spreadsheets and some editors write one
    path = tmp_path / "bom.toml"
    path.write_bytes(b"\xef\xbb\xbf" + _preset_text("a100-80g").encode())
    assert load_cluster(str(path)).name == "a100-80g"


def test_a_bad_number_names_the_field_and_the_value(tmp_path: Path) -> None:
    path = _write(tmp_path, _preset_text("a100-80g").replace("peak_bf16_flops = 312e12", "peak_bf16_flops = -1"))
    assert _error(str(path)) == f"hardware file {path}: gpu.peak_bf16_flops = -1 (must be >= 1e+11)"


def test_a_figure_in_the_wrong_unit_is_refused(tmp_path: Path) -> None:
    # 312 meant as TFLOP/s is 312 FLOP/s: below the physical floor
    path = _write(tmp_path, _preset_text("a100-80g").replace("peak_bf16_flops = 312e12", "peak_bf16_flops = 312"))
    assert "gpu.peak_bf16_flops = 312 (must be >= 1e+11)" in _error(str(path))


def test_a_missing_table(tmp_path: Path) -> None:
    text = _preset_text("a100-80g")
    path = _write(tmp_path, text[: text.index("[efficiency]")] + text[text.index("[price]") :])
    assert "efficiency is missing" in _error(str(path))


def test_an_unknown_field_and_a_bad_kind(tmp_path: Path) -> None:
    text = _preset_text("l40s")
    bad_kind = _write(tmp_path, text.replace('kind = "pcie_p2p"', 'kind = "pcie_magic"'), "kind.toml")
    assert "intra_node.kind = 'pcie_magic'" in _error(str(bad_kind))
    extra = _write(tmp_path, text.replace("ecc = true", "ecc = true\nhbm = 1"), "extra.toml")
    assert "gpu.hbm = 1 (unknown field)" in _error(str(extra))


def test_a_reserve_above_the_memory(tmp_path: Path) -> None:
    path = _write(
        tmp_path, _preset_text("rtx4090").replace("memory_reserve_bytes = 1.5e9", "memory_reserve_bytes = 30e9")
    )
    assert "memory_reserve_bytes must be below" in _error(str(path))


def test_malformed_toml(tmp_path: Path) -> None:
    path = _write(tmp_path, 'name = "x"\n[gpu\npeak = 1\n')
    assert _error(str(path)).startswith(f"hardware file {path}: invalid TOML")


def test_an_integer_beyond_pythons_digit_limit(tmp_path: Path) -> None:
    path = _write(tmp_path, "name = " + "9" * 5000 + "\n")
    assert _error(str(path)).startswith(f"hardware file {path}: ")


def test_a_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nope.toml"
    assert _error(str(path)) == f"cannot read hardware file '{path}': No such file or directory"


# ---------------------------------------------------------------------------- reading input files


def test_a_fifo_is_refused_without_blocking(tmp_path: Path) -> None:
    # reading a named pipe would wait forever for a writer
    fifo = tmp_path / "pipe.toml"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="not a regular file"):
        read_text_file(fifo, "hardware file")
    assert "not a regular file" in _error(str(fifo))


def test_a_device_is_refused() -> None:
    # /dev/zero never ends
    with pytest.raises(InputError, match="not a regular file"):
        read_text_file("/dev/zero", "model config")
    assert "not a regular file" in _error("/dev/zero")


def test_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="it is a directory"):
        read_text_file(tmp_path, "runs file")


def test_an_oversized_file_is_refused(tmp_path: Path) -> None:
    path = _write(tmp_path, "x" * 101)
    with pytest.raises(InputError, match="is 101 bytes; inputs are read up to 100 bytes"):
        read_text_file(path, "launch file", max_bytes=100)
    assert read_text_file(path, "launch file", max_bytes=101) == "x" * 101


def test_text_must_be_utf8(tmp_path: Path) -> None:
    path = tmp_path / "latin1.toml"
    path.write_bytes('name = "caf\u00e9"\n'.encode("latin-1"))
    with pytest.raises(InputError, match="is not UTF-8 text"):
        read_text_file(path, "hardware file")


@pytest.mark.parametrize("preset", ["h100-sxm", "mi300x", "rtx4090", "a100-80g-pcie"])
def test_group_links_follow_the_members_node_by_node(preset: str) -> None:
    # A group of `size` ranks `stride` apart: on one node it is that node's ring over its members;
    # across nodes its bandwidth is k NIC shares (k members a node), capped by the ring over the
    # k members of a node. Worked out here from the member list itself.
    cluster = load_cluster(preset)
    per_node = cluster.gpus_per_node
    network = pair_link(cluster, 0, per_node)
    for size in (2, 3, 4, 8, 16, 64, 1000):
        for stride in (1, 2, 3, 4, 8, 16, 64):
            members = [i * stride for i in range(size)]
            local = [m for m in members if m < per_node]
            link = group_link(cluster, size, stride)
            if len(local) == size:
                assert link.kind != "network"
                continue
            assert link.kind == "network"
            within = group_link(cluster, len(local), stride) if len(local) > 1 else None
            expected = len(local) * network.bw_bytes_per_s
            if within is not None:
                expected = min(expected, within.bw_bytes_per_s)
            assert link.bw_bytes_per_s == pytest.approx(expected, rel=1e-12)

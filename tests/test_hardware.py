"""Presets, the loader's error messages and the topology model of hardware_specs."""

from __future__ import annotations

import math
import tomllib
from importlib import resources
from pathlib import Path

import pytest

from paraplan.hardware_specs.loader import SpecError, load_cluster, preset_names
from paraplan.hardware_specs.schema import Cluster
from paraplan.hardware_specs.topology import GroupLink, group_link, node_graph, pair_link

MIB = 1048576
EXPECTED_PRESETS = [
    "a100-40g", "a100-80g", "a100-80g-pcie", "b200", "h100-pcie", "h100-sxm", "h200",
    "l40s", "mi300x", "rtx3090", "rtx4090",
]  # fmt: skip


def _preset_text(name: str) -> str:
    return resources.files("paraplan.hardware_specs").joinpath("presets", f"{name}.toml").read_text()


# ---------------------------------------------------------------------------- presets


def test_preset_names_sorted_and_complete() -> None:
    assert preset_names() == EXPECTED_PRESETS


@pytest.mark.parametrize("name", EXPECTED_PRESETS)
def test_every_preset_loads_with_sources(name: str) -> None:
    cluster = load_cluster(name)
    assert isinstance(cluster, Cluster)
    assert cluster.name == name
    assert cluster.gpus_per_node == 8
    assert cluster.price is not None and cluster.power is not None
    assert cluster.reliability is not None
    sourced = [
        cluster.gpu, cluster.intra_node.link, cluster.intra_node.pcie, cluster.inter_node,
        cluster.efficiency, cluster.price, cluster.power, cluster.reliability,
    ]  # fmt: skip
    for table in sourced:
        assert table.sources, f"{name}: {type(table).__name__} has no sources"


@pytest.mark.parametrize("name", EXPECTED_PRESETS)
def test_estimates_are_marked(name: str) -> None:
    # Figures not taken from a data sheet must say so; every preset has some.
    assert "estimate" in _preset_text(name)


def test_names_are_case_insensitive_and_cached() -> None:
    assert load_cluster("H100-SXM") is load_cluster("h100-sxm")


@pytest.mark.parametrize(
    ("name", "bf16", "mib"),
    [
        ("a100-40g", 312e12, 40960),
        ("a100-80g", 312e12, 81920),
        ("a100-80g-pcie", 312e12, 81920),
        ("h100-sxm", 989e12, 81559),
        ("h100-pcie", 756e12, 81559),
        ("h200", 989e12, 143771),
        ("b200", 2250e12, 183359),
        ("rtx4090", 165.2e12, 24564),
        ("rtx3090", 71e12, 24576),
        ("l40s", 362.05e12, 46068),
    ],
)
def test_figures_match_reference_csv(name: str, bf16: float, mib: int) -> None:
    gpu = load_cluster(name).gpu
    assert gpu.peak_bf16_flops == bf16
    assert gpu.memory_bytes == mib * MIB


def test_specific_reference_figures() -> None:
    assert load_cluster("mi300x").gpu.memory_bytes == 192 * 1024**3
    assert load_cluster("mi300x").gpu.peak_bf16_flops == 1307.4e12
    assert load_cluster("h100-sxm").gpu.peak_fp8_flops == 1979e12
    assert load_cluster("a100-80g").gpu.peak_fp8_flops is None
    assert load_cluster("a100-80g").gpu.mem_bw_bytes_per_s == 2039e9
    assert load_cluster("rtx4090").gpu.ecc is False
    assert load_cluster("rtx3090").gpu.ecc is False
    assert load_cluster("h100-sxm").gpu.ecc is True
    assert load_cluster("a100-80g").inter_node.bw_bytes_per_s == 25e9
    assert load_cluster("h100-sxm").inter_node.bw_bytes_per_s == 50e9
    assert load_cluster("rtx3090").intra_node.link.bw_bytes_per_s == 56.25e9
    assert load_cluster("b200").intra_node.link.bw_bytes_per_s == 900e9


@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("a100-40g", "nvswitch"),
        ("a100-80g", "nvswitch"),
        ("h100-sxm", "nvswitch"),
        ("h200", "nvswitch"),
        ("b200", "nvswitch"),
        ("mi300x", "xgmi"),
        ("a100-80g-pcie", "nvlink_bridge"),
        ("h100-pcie", "nvlink_bridge"),
        ("rtx3090", "nvlink_bridge"),
        ("l40s", "pcie_p2p"),
        ("rtx4090", "pcie_host"),
    ],
)
def test_intra_node_kinds(name: str, kind: str) -> None:
    assert load_cluster(name).intra_node.kind == kind


@pytest.mark.parametrize("name", EXPECTED_PRESETS)
def test_reserve_fits_and_units_are_si(name: str) -> None:
    cluster = load_cluster(name)
    # Plausibility bands catch a figure entered in the wrong unit (GB/s instead of B/s, ...).
    assert 1e9 <= cluster.memory_reserve_bytes <= 3e9
    assert 1e13 < cluster.gpu.peak_bf16_flops < 1e16
    assert 1e10 < cluster.gpu.memory_bytes < 1e12
    assert 1e11 < cluster.gpu.mem_bw_bytes_per_s < 1e14
    assert 1e9 < cluster.inter_node.bw_bytes_per_s < 1e12
    assert 1e-7 < cluster.intra_node.link.latency_s < 1e-4


# ---------------------------------------------------------------------------- topology


def test_tp8_on_dgx_a100_is_nvlink() -> None:
    cluster = load_cluster("a100-80g")
    link = group_link(cluster, 8, 1)
    assert link.kind == "nvlink"
    assert link.bw_bytes_per_s == pytest.approx(300e9 * cluster.intra_node.link.efficiency)


def test_tp2_on_rtx4090_is_host_staged() -> None:
    cluster = load_cluster("rtx4090")
    link = group_link(cluster, 2, 1)
    assert link.kind == "pcie_host"
    assert link.bw_bytes_per_s == pytest.approx(cluster.intra_node.link.effective_bw_bytes_per_s)


def test_dp_across_nodes_is_network() -> None:
    cluster = load_cluster("a100-80g")
    link = group_link(cluster, 4, 8)
    assert link.kind == "network"
    assert link.bw_bytes_per_s == pytest.approx(25e9 * cluster.inter_node.efficiency)


def test_group_spanning_nodes_bottlenecks_at_network() -> None:
    assert group_link(load_cluster("h100-sxm"), 16, 1).kind == "network"


def test_nvlink_bridge_pairs_only() -> None:
    cluster = load_cluster("rtx3090")
    pair = group_link(cluster, 2, 1)
    assert pair.kind == "nvlink"
    assert pair.bw_bytes_per_s == pytest.approx(56.25e9 * cluster.intra_node.link.efficiency)
    assert group_link(cluster, 4, 1).kind == "pcie"
    assert group_link(cluster, 2, 2).kind == "pcie"  # ranks 0 and 2 sit on different bridges


def test_xgmi_and_pcie_p2p() -> None:
    assert group_link(load_cluster("mi300x"), 8, 1).kind == "xgmi"
    assert group_link(load_cluster("l40s"), 4, 2).kind == "pcie"


def test_size_one_is_local() -> None:
    assert group_link(load_cluster("h100-sxm"), 1, 8) == GroupLink(math.inf, 0.0, "local")


def test_group_link_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError):
        group_link(load_cluster("h100-sxm"), 0, 1)
    with pytest.raises(ValueError):
        group_link(load_cluster("h100-sxm"), 2, 0)


def test_pair_link() -> None:
    cluster = load_cluster("a100-80g")
    assert pair_link(cluster, 3, 3).kind == "local"
    assert pair_link(cluster, 0, 5).kind == "nvlink"
    cross = pair_link(cluster, 7, 8)
    assert cross.kind == "network"
    assert cross.latency_s == pytest.approx(cluster.inter_node.latency_s)


def test_latency_adds_up_once_through_a_hub() -> None:
    cluster = load_cluster("h100-sxm")
    assert group_link(cluster, 8, 1).latency_s == pytest.approx(cluster.intra_node.link.latency_s)


def test_node_graph_vertices_and_edges() -> None:
    cluster = load_cluster("a100-80g")
    graph = node_graph(cluster, nodes=2)
    for vertex in ("gpu0.0", "gpu1.7", "nvswitch0", "nvswitch1", "cpu0", "cpu1", "network"):
        assert vertex in graph
    edge = graph.edges["gpu0.3", "network"]
    assert edge["kind"] == "network"
    assert edge["bw_bytes_per_s"] == pytest.approx(cluster.inter_node.effective_bw_bytes_per_s)
    bridged = node_graph(load_cluster("rtx3090"), nodes=1)
    assert bridged.has_edge("gpu0.0", "gpu0.1")
    assert not bridged.has_edge("gpu0.1", "gpu0.2")


def test_group_link_is_cached_and_fast() -> None:
    cluster = load_cluster("h200")
    first = group_link(cluster, 4096, 1)
    assert group_link(cluster, 4096, 1) is first
    assert first.kind == "network"


# ---------------------------------------------------------------------------- loader errors


def _write(tmp_path: Path, text: str, name: str = "x.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def _one_line_error(arg: str) -> str:
    with pytest.raises(SpecError) as info:
        load_cluster(arg)
    message = str(info.value)
    assert "\n" not in message
    return message


def test_unknown_name_lists_presets() -> None:
    message = _one_line_error("a100-90g")
    assert "a100-90g" in message
    for name in EXPECTED_PRESETS:
        assert name in message


def test_toml_path_loads(tmp_path: Path) -> None:
    path = _write(tmp_path, _preset_text("h100-sxm").replace('name = "h100-sxm"', 'name = "mine"'))
    assert load_cluster(str(path)).name == "mine"


def test_negative_number_names_field_and_value(tmp_path: Path) -> None:
    text = _preset_text("a100-80g").replace("peak_bf16_flops = 312e12", "peak_bf16_flops = -1")
    path = _write(tmp_path, text)
    message = _one_line_error(str(path))
    assert message == f"hardware file {path}: gpu.peak_bf16_flops = -1 (must be >= 1e+11)"


def test_figure_in_the_wrong_unit_is_refused(tmp_path: Path) -> None:
    # 312 meant as TFLOP/s is 312 FLOP/s: below the physical floor, so refused at the edge.
    text = _preset_text("a100-80g").replace("peak_bf16_flops = 312e12", "peak_bf16_flops = 312")
    path = _write(tmp_path, text)
    assert "gpu.peak_bf16_flops = 312" in _one_line_error(str(path))


def test_missing_table(tmp_path: Path) -> None:
    text = _preset_text("a100-80g")
    start = text.index("[efficiency]")
    end = text.index("[price]")
    path = _write(tmp_path, text[:start] + text[end:])
    message = _one_line_error(str(path))
    assert "efficiency is missing" in message


def test_unknown_field_and_bad_kind(tmp_path: Path) -> None:
    text = _preset_text("l40s").replace('kind = "pcie_p2p"', 'kind = "pcie_magic"')
    message = _one_line_error(str(_write(tmp_path, text)))
    assert "intra_node.kind = 'pcie_magic'" in message
    text = _preset_text("l40s").replace("ecc = true", "ecc = true\nhbm = 1")
    assert "gpu.hbm = 1 (unknown field)" in _one_line_error(str(_write(tmp_path, text)))


def test_reserve_above_memory(tmp_path: Path) -> None:
    text = _preset_text("rtx4090").replace("memory_reserve_bytes = 1.5e9", "memory_reserve_bytes = 30e9")
    message = _one_line_error(str(_write(tmp_path, text)))
    assert "memory_reserve_bytes must be below" in message


def test_malformed_toml(tmp_path: Path) -> None:
    path = _write(tmp_path, 'name = "x"\n[gpu\npeak = 1\n')
    message = _one_line_error(str(path))
    assert message.startswith(f"hardware file {path}: invalid TOML")


def test_nonexistent_path(tmp_path: Path) -> None:
    path = tmp_path / "nope.toml"
    message = _one_line_error(str(path))
    assert message.startswith(f"hardware file {path}: cannot read")


def test_spec_error_is_value_error() -> None:
    assert issubclass(SpecError, ValueError)


def test_preset_toml_parses_standalone() -> None:
    # The files are plain TOML that other tools can read too.
    for name in EXPECTED_PRESETS:
        assert tomllib.loads(_preset_text(name))["name"] == name

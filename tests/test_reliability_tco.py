"""Failures, checkpoints, goodput, energy and money against hand-worked numbers, plus properties.

Every expected value below is worked out by hand in the comment next to it.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paraplan.cost_models.energy import busy_fraction, energy_kwh, gpu_power_w, wall_power_per_gpu_w
from paraplan.cost_models.reliability import (
    assess,
    checkpoint_bytes,
    checkpoint_write_s,
    daly_interval_s,
    failures_per_hour,
    goodput_exponential,
    goodput_first_order,
    nodes_for,
    young_interval_s,
)
from paraplan.cost_models.tco import (
    amortized_usd_per_gpu_hour,
    capex_per_gpu_usd,
    hardware_usd_per_gpu_hour,
    run_cost,
    usd_per_gpu_hour,
)
from paraplan.hardware_specs.schema import Cluster, Power, Price

HOUR = 3600.0
PROPERTY = settings(max_examples=50, deadline=None)
# A DGX A100-like price sheet: $15,000 a GPU, $6,000 of server and $3,000 of network per GPU,
# 4 years; $1.80 an hour rented; 2,000 W of node overhead, PUE 1.3, $0.08 a kWh
PRICE = Price(gpu_usd=15_000, server_share_usd=6_000, network_share_usd=3_000, cloud_usd_per_gpu_hour=1.8,
              lifetime_years=4)  # fmt: skip
POWER = Power(node_overhead_w=2000, idle_fraction=0.25, pue=1.3, usd_per_kwh=0.08)


def _priced(cluster: Cluster, price: Price | None, power: Power | None = POWER) -> Cluster:
    """`cluster` (8 GPUs of 400 W TDP) with the given price and power sheets."""
    gpu = cluster.gpu.model_copy(update={"tdp_w": 400.0})
    return cluster.model_copy(update={"gpu": gpu, "gpus_per_node": 8, "price": price, "power": power})


# --- failure rate ---------------------------------------------------------------------------------


def test_failure_rate_2048_gpus_at_720_hours() -> None:
    # 2048 / 720 = 2.8444 per hour from the GPUs alone (node MTBF taken as practically infinite)
    assert failures_per_hour(2048, 8, 720, 1e15) == pytest.approx(2.8444, abs=1e-4)
    # plus 2048/8 = 256 nodes at 10,000 h: 256 / 10,000 = 0.0256 -> 2.8700
    assert failures_per_hour(2048, 8, 720, 10_000) == pytest.approx(2.8444 + 0.0256, abs=1e-4)


def test_failure_rate_presets() -> None:
    # A100 preset: 256/80,000 + 32/15,000 = 0.0032 + 0.0021333 = 0.0053333 per hour
    assert failures_per_hour(256, 8, 80_000, 15_000) == pytest.approx(0.0053333, rel=1e-4)
    # RTX 4090 preset: 2048/30,000 + 256/10,000 = 0.0682667 + 0.0256 = 0.0938667 per hour
    assert failures_per_hour(2048, 8, 30_000, 10_000) == pytest.approx(0.0938667, rel=1e-4)


def test_nodes_round_up() -> None:
    assert nodes_for(2048, 8) == 256
    assert nodes_for(12, 8) == 2
    assert nodes_for(1, 8) == 1


# --- checkpoint -----------------------------------------------------------------------------------


def test_checkpoint_size_and_write_time() -> None:
    # bf16 weights 2 + fp32 master 4 + Adam m 4 + Adam v 4 = 14 B per parameter:
    # 70e9 params x 14 B = 980e9 B
    assert checkpoint_bytes(70e9) == pytest.approx(980e9)
    # written by 32 nodes at 5 GB/s each: 980e9 / (32 x 5e9) = 6.125 s
    assert checkpoint_write_s(980e9, 32, 5e9) == pytest.approx(6.125)


# --- Young / Daly interval ------------------------------------------------------------------------


def test_young_interval() -> None:
    # delta = 60 s, M = 10 h = 36,000 s: sqrt(2 x 60 x 36,000) = sqrt(4,320,000) = 2078.46 s
    assert young_interval_s(60, 10 * HOUR) == pytest.approx(2078.46, abs=0.01)


def test_daly_interval() -> None:
    # x = delta / 2M = 60 / 72,000 = 1/1200; sqrt(x) = 0.0288675
    # 2078.461 x (1 + 0.0288675/3 + (1/1200)/9) - 60 = 2078.461 x 1.0097151 - 60 = 2038.65 s
    assert daly_interval_s(60, 10 * HOUR) == pytest.approx(2038.65, abs=0.01)
    # delta >= 2M: checkpoint once per MTBF
    assert daly_interval_s(100, 40) == 40


# --- goodput --------------------------------------------------------------------------------------


def test_goodput_first_order() -> None:
    # delta = 60, tau = 2078.46, M = 36,000, R = 600:
    # delta/tau = 0.028868; tau/2M = 1039.23/36,000 = 0.028868; R/M = 0.016667
    # 1 / (1 + 0.028868 + 0.028868 + 0.016667) = 1 / 1.074402 = 0.930751
    tau = young_interval_s(60, 36_000)
    assert goodput_first_order(60, tau, 36_000, 600) == pytest.approx(0.930751, abs=1e-6)


def test_goodput_exponential() -> None:
    # wall/W = (M/tau) e^(R/M) (e^((tau+delta)/M) - 1)
    #        = (36,000/2078.46) x e^0.0166667 x (e^(2138.46/36,000) - 1)
    #        = 17.32051 x 1.0168064 x 0.0612014 = 1.077841  ->  goodput 0.927768
    tau = young_interval_s(60, 36_000)
    assert goodput_exponential(60, tau, 36_000, 600) == pytest.approx(0.92777, abs=1e-4)
    # no checkpoint cost, no lost work: only restarts, e^(-R/M); 2048 GPUs at 720 h + 256 nodes at
    # 10,000 h fail every 3600/2.87004 = 1254.3 s, a 600 s restart: e^(-600/1254.3) = 0.6198
    assert goodput_exponential(0, 0, 1254.336, 600) == pytest.approx(0.6198, abs=1e-4)


def test_goodput_models_agree_when_overheads_are_small() -> None:
    # M = 1000 h, delta = 10 s, R = 60 s: both models within 1e-5
    m = 1000 * HOUR
    tau = daly_interval_s(10, m)
    assert goodput_exponential(10, tau, m, 60) == pytest.approx(goodput_first_order(10, tau, m, 60), abs=1e-5)


def test_the_720_hour_claim() -> None:
    # 2048 GPUs at a 720 h MTBF fail 2048/720 = 2.8444 times an hour; a 10 minute restart each is
    # lambda R = 0.474074 of the wall-clock counted naively. Failures strike anywhere, restarts
    # included: goodput e^(-lambda R) = e^(-0.474074) = 0.622461, 37.75% lost (not 47%).
    rate = failures_per_hour(2048, 8, 720, 1e15)
    assert goodput_exponential(0, 0, HOUR / rate, 600) == pytest.approx(0.622461, abs=1e-6)


def test_assess_by_hand() -> None:
    # Llama 2 70B (69e9 params) for 100 ideal days on 2048 RTX 4090s (8 a node, GPU MTBF
    # 30,000 h, node MTBF 10,000 h, 2e9 B/s of checkpoint writes per node, 600 s restarts):
    #   lambda = 2048/30,000 + 256/10,000 = 0.0938667 /h  =>  M = 3600 / lambda = 38,352.27 s
    #   checkpoint 69e9 x 14 B = 966e9 B over 256 x 2e9 B/s = 1.88671875 s
    #   Daly: sqrt(2 d M) (1 + sqrt(d/2M)/3 + (d/2M)/9) - d = 379.164 s
    #   goodput (M/tau) e^(R/M) (e^((tau+d)/M) - 1) = 1 / 1.025910 = 0.974744
    #   train time 8,640,000 s / 0.974744 = 8,863,862 s; failures 0.0938667 x 2462.18 h = 231.12
    acc = assess(69e9, 2048, 8, 100 * 86400.0, 30_000, 10_000, 2e9, 600)
    assert acc.nodes == 256
    assert acc.mtbf_s == pytest.approx(38_352.27, abs=0.01)
    assert acc.checkpoint_bytes == 966e9
    assert acc.checkpoint_write_s == 1.88671875
    assert acc.checkpoint_interval_s == pytest.approx(379.164, abs=1e-3)
    assert acc.goodput == pytest.approx(0.974744, abs=1e-6)
    assert acc.train_time_s == pytest.approx(8_863_862, abs=1)
    assert acc.expected_failures == pytest.approx(231.117, abs=1e-3)


# --- energy ---------------------------------------------------------------------------------------


def test_energy_hand_example() -> None:
    # H100: TDP 700 W, idle 0.25, busy u = 0.8: 0.25 x 700 + 0.75 x 700 x 0.8 = 175 + 420 = 595 W
    assert gpu_power_w(700, 0.25, 0.8) == pytest.approx(595.0)
    # + 2800 W node overhead / 8 = 350 W -> 945 W, x PUE 1.3 = 1228.5 W at the meter
    watts = wall_power_per_gpu_w(700, 0.25, 0.8, 2800, 8, 1.3)
    assert watts == pytest.approx(1228.5)
    # 1024 GPUs for 10 days (240 h): 1228.5 x 1024 x 240 / 1000 = 301,916.16 kWh
    kwh = energy_kwh(watts, 1024, 10 * 86400.0)
    assert kwh == pytest.approx(301_916.16)


def test_power_bounds() -> None:
    assert gpu_power_w(400, 0.25, 0.0) == pytest.approx(100.0)  # waiting the whole step
    assert gpu_power_w(400, 0.25, 1.0) == pytest.approx(400.0)  # busy the whole step: TDP
    # (29 s compute + 1 s recompute) of a 40 s step: busy 0.75
    assert busy_fraction(29.0, 1.0, 40.0) == pytest.approx(0.75)
    assert busy_fraction(50.0, 0.0, 40.0) == 1.0  # clipped


# --- money ----------------------------------------------------------------------------------------


def test_amortized_usd_per_gpu_hour() -> None:
    # 15,000 + 6,000 + 3,000 = 24,000 over 4 x 8760 h = 35,040 h: 0.684932 $/GPU-hour
    assert capex_per_gpu_usd(PRICE) == 24_000
    assert hardware_usd_per_gpu_hour(PRICE, "own") == pytest.approx(0.684932, abs=1e-6)
    # RTX 4090-like: 1,800 + 1,000 + 300 = 3,100 over 3 x 8760 = 26,280 h: 0.117960
    assert amortized_usd_per_gpu_hour(3100, 3) == pytest.approx(0.117960, abs=1e-6)
    assert hardware_usd_per_gpu_hour(PRICE, "cloud") == 1.8
    # missing shares count as 0
    assert capex_per_gpu_usd(Price(gpu_usd=10_000)) == 10_000


def test_usd_per_gpu_hour_for_the_optimizer(a100: Cluster) -> None:
    # owned at full load: 0.684932 + (400 W + 2000 W / 8) x 1.3 / 1000 x $0.08
    #   = 0.684932 + 650 x 1.3 x 0.08 / 1000 = 0.684932 + 0.0676 = 0.752532
    assert usd_per_gpu_hour(_priced(a100, PRICE)) == pytest.approx(0.752532, abs=1e-6)
    # without an energy price, the hardware alone
    assert usd_per_gpu_hour(_priced(a100, PRICE, None)) == pytest.approx(0.684932, abs=1e-6)
    # only a cloud price: that price; no price at all: no dollar figure is made up
    assert usd_per_gpu_hour(_priced(a100, Price(cloud_usd_per_gpu_hour=2.0))) == 2.0
    assert usd_per_gpu_hour(_priced(a100, None)) is None


def test_cost_totals() -> None:
    # 256 GPUs for 100 days = 2400 h at 0.684932: 256 x 2400 x 0.684932 = 420,821.9
    # energy 100,000 kWh x 0.08 = 8,000; staff 1,000/day x 100 = 100,000; total 528,821.9
    cost = run_cost(256, 100 * 86400.0, 24_000 / 35_040, 100_000, 0.08, 1000, "own")
    assert cost.hardware == pytest.approx(420_821.9, abs=0.1)
    assert cost.energy == pytest.approx(8000)
    assert cost.staff == pytest.approx(100_000)
    assert cost.total == pytest.approx(528_821.9, abs=0.1)
    assert cost.to_json() == pytest.approx(
        {"hardware": 420_821.9, "energy": 8000, "staff": 100_000, "total": 528_821.9}, abs=0.1
    )
    # rented: the energy is in the hourly price
    rented = run_cost(256, 100 * 86400.0, 1.8, 100_000, 0.08, 0, "cloud")
    assert rented.energy == 0.0
    assert rented.total == pytest.approx(256 * 2400 * 1.8)


# --- properties -----------------------------------------------------------------------------------

counts = st.integers(min_value=1, max_value=100_000)
mtbfs = st.floats(min_value=1.0, max_value=1e7)


@PROPERTY
@given(
    gpus=counts,
    per_node=st.sampled_from([1, 2, 4, 8, 16]),
    gpu_mtbf=mtbfs,
    node_mtbf=mtbfs,
    write=st.floats(min_value=1e6, max_value=1e12),
    restart=st.floats(min_value=0, max_value=1e5),
    params=st.floats(min_value=1e6, max_value=2e12),
    ideal=st.floats(min_value=1.0, max_value=1e9),
)
def test_failure_aware_time_and_goodput(
    gpus: int,
    per_node: int,
    gpu_mtbf: float,
    node_mtbf: float,
    write: float,
    restart: float,
    params: float,
    ideal: float,
) -> None:
    acc = assess(params, gpus, per_node, ideal, gpu_mtbf, node_mtbf, write, restart)
    assert 0.0 < acc.goodput <= 1.0
    assert 0.0 < acc.goodput_first_order <= 1.0
    assert acc.train_time_s >= acc.ideal_time_s
    assert math.isfinite(acc.train_time_s)


@PROPERTY
@given(
    gpus=counts,
    extra=st.integers(min_value=1, max_value=100_000),
    per_node=st.sampled_from([1, 4, 8]),
    gpu_mtbf=mtbfs,
    node_mtbf=mtbfs,
)
def test_more_gpus_fail_more_often(gpus: int, extra: int, per_node: int, gpu_mtbf: float, node_mtbf: float) -> None:
    assert failures_per_hour(gpus + extra, per_node, gpu_mtbf, node_mtbf) > failures_per_hour(
        gpus, per_node, gpu_mtbf, node_mtbf
    )


@PROPERTY
@given(
    m=st.floats(min_value=10.0, max_value=1e8),
    ratio=st.floats(min_value=1e-8, max_value=0.1),
    restart=st.floats(min_value=0, max_value=1e4),
)
def test_daly_interval_is_the_optimum(m: float, ratio: float, restart: float) -> None:
    """For delta <= M/10, Daly's interval is within 1e-6 of the best of 200 intervals around Young's
    under the exact model (for delta near 2M his estimate is rougher)."""
    delta = ratio * m
    young = young_interval_s(delta, m)
    best = max(goodput_exponential(delta, young * 10 ** (k / 50 - 2), m, restart) for k in range(201))
    assert goodput_exponential(delta, daly_interval_s(delta, m), m, restart) >= best * (1 - 1e-6)

"""What GPU time costs: owned hardware amortized over its life, or a cloud price; energy; staff.

Owned (`pricing = "own"`): the capital cost of one GPU's slot in the cluster,

    capex = gpu_usd + server_share_usd + network_share_usd          [per GPU]
    hardware $/GPU-hour = capex / (lifetime_years * 8760 h)           straight-line depreciation

charged for the hours the run occupies the GPUs (the cluster is assumed busy with other work for
the rest of its life; no interest, no resale value). Energy is paid separately, at the power the
run draws (`cost_models.energy`) and the price per kWh.

Rented (`pricing = "cloud"`): the preset's cloud price per GPU-hour, which includes power,
cooling and the facility, so the energy is reported in kWh but costs nothing extra.

Staff: an optional daily cost of the people who run the job, over its wall-clock days.

All figures come from the preset's `[price]` and `[power]` tables (each with its sources) and can
be overridden on the command line.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from paraplan.cost_models.energy import wall_power_per_gpu_w
from paraplan.cost_models.units import SECONDS_PER_DAY, SECONDS_PER_HOUR
from paraplan.hardware_specs.schema import Cluster, Price

HOURS_PER_YEAR = 8760.0
Pricing = Literal["own", "cloud"]
PRICINGS: tuple[Pricing, ...] = ("own", "cloud")


def capex_per_gpu_usd(price: Price) -> float:
    """gpu_usd + server_share_usd + network_share_usd (missing shares count as 0)."""
    if price.gpu_usd is None:
        raise ValueError("the price has no gpu_usd")
    return sum(p for p in (price.gpu_usd, price.server_share_usd, price.network_share_usd) if p is not None)


def amortized_usd_per_gpu_hour(capex_usd: float, lifetime_years: float) -> float:
    """capex / (lifetime_years * 8760): straight-line depreciation per GPU-hour."""
    if lifetime_years <= 0:
        raise ValueError("lifetime must be positive")
    return capex_usd / (lifetime_years * HOURS_PER_YEAR)


def hardware_usd_per_gpu_hour(price: Price, pricing: Pricing) -> float:
    """The amortized capital cost (own) or the rental price (cloud) of one GPU-hour, energy excluded for own."""
    if pricing == "own":
        return amortized_usd_per_gpu_hour(capex_per_gpu_usd(price), price.lifetime_years)
    if price.cloud_usd_per_gpu_hour is None:
        raise ValueError("the price has no cloud_usd_per_gpu_hour")
    return price.cloud_usd_per_gpu_hour


def usd_per_gpu_hour(cluster: Cluster) -> float | None:
    """One GPU-hour at full load, for the optimizer's cost objective (a per-hardware constant).

    Owned where the preset gives capital costs: amortized capex plus the energy at TDP (busy
    fraction 1) with the node share and PUE. Otherwise the cloud price. Without a price, None:
    no dollar figure is ever made up.
    """
    price = cluster.price
    if price is None:
        return None
    if price.gpu_usd is not None:
        hourly = hardware_usd_per_gpu_hour(price, "own")
        power = cluster.power
        if power is not None and power.usd_per_kwh is not None:
            watts = wall_power_per_gpu_w(
                cluster.gpu.tdp_w, power.idle_fraction, 1.0, power.node_overhead_w, cluster.gpus_per_node, power.pue
            )
            hourly += watts / 1000.0 * power.usd_per_kwh
        return hourly
    return price.cloud_usd_per_gpu_hour


@dataclass(frozen=True)
class CostBreakdown:
    """Dollars for one run: hardware (amortized or rented), energy, staff."""

    hardware: float
    energy: float
    staff: float

    @property
    def total(self) -> float:
        return self.hardware + self.energy + self.staff

    def to_json(self) -> dict[str, float]:
        return {"hardware": self.hardware, "energy": self.energy, "staff": self.staff, "total": self.total}


def run_cost(
    gpus: int,
    wall_time_s: float,
    hardware_per_gpu_hour: float,
    energy_kwh: float,
    usd_per_kwh: float,
    staff_usd_per_day: float,
    pricing: Pricing,
) -> CostBreakdown:
    """hardware = gpus * hours * $/GPU-hour; energy = kWh * $/kWh (0 when rented); staff = days * $/day."""
    hours = wall_time_s / SECONDS_PER_HOUR
    return CostBreakdown(
        hardware=gpus * hours * hardware_per_gpu_hour,
        energy=energy_kwh * usd_per_kwh if pricing == "own" else 0.0,
        staff=staff_usd_per_day * wall_time_s / SECONDS_PER_DAY,
    )

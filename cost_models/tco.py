"""What one GPU-hour costs (a first cut; the full TCO with energy at utilization, failures and
staff lives in the compare issue).

Owned hardware: (GPU + its share of the server and the network) / (lifetime in hours), plus the
energy of the GPU at TDP and its share of the node overhead, times PUE, at the price per kWh.
Rented: the preset's cloud price per GPU-hour. Owned is used where the preset gives capital
costs, rented otherwise.
"""

from __future__ import annotations

from hardware_specs.schema import Cluster

HOURS_PER_YEAR = 8760.0


def usd_per_gpu_hour(cluster: Cluster) -> float:
    price = cluster.price
    if price is None:
        return 1.0  # no figures: cost ranks as GPU-hours
    capex_parts = (price.gpu_usd, price.server_share_usd, price.network_share_usd)
    if price.gpu_usd is not None:
        capex = sum(p for p in capex_parts if p is not None)
        hourly = capex / (price.lifetime_years * HOURS_PER_YEAR)
        power = cluster.power
        if power is not None:
            watts = cluster.gpu.tdp_w + power.node_overhead_w / cluster.gpus_per_node
            hourly += watts * power.pue / 1000.0 * power.usd_per_kwh
        return hourly
    if price.cloud_usd_per_gpu_hour is not None:
        return price.cloud_usd_per_gpu_hour
    return 1.0

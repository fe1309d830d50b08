"""The constants `paraplan calibrate` can fit, with their physical ranges (no numpy here, so
the CLI's help can name them without loading the fitting code)."""

from __future__ import annotations

from dataclasses import dataclass

from paraplan.hardware_specs.schema import Cluster


@dataclass(frozen=True)
class Parameter:
    name: str
    lower: float
    upper: float

    def get(self, cluster: Cluster) -> float:
        return float(_PATHS[self.name](cluster))

    def span(self) -> float:
        return self.upper - self.lower


_PATHS = {
    "gemm_max": lambda c: c.efficiency.gemm_max,
    "kernel_overhead_s": lambda c: c.efficiency.kernel_overhead_s,
    "gemm_half_dim": lambda c: c.efficiency.gemm_half_dim,
    "attention": lambda c: c.efficiency.attention,
    "memory_bound": lambda c: c.efficiency.memory_bound,
    "intra_node": lambda c: c.intra_node.link.efficiency,
    "inter_node": lambda c: c.inter_node.efficiency,
    "dp_overlap": lambda c: c.efficiency.dp_overlap,
}

PARAMETERS = {
    p.name: p
    for p in (
        Parameter("gemm_max", 0.2, 1.0),
        Parameter("kernel_overhead_s", 0.0, 5e-5),
        Parameter("gemm_half_dim", 0.0, 1024.0),
        Parameter("attention", 0.1, 1.0),
        Parameter("memory_bound", 0.2, 1.0),
        Parameter("intra_node", 0.05, 1.0),
        Parameter("inter_node", 0.05, 1.0),
        Parameter("dp_overlap", 0.0, 1.0),
    )
}

"""The constants `paraplan calibrate` can fit, with their physical ranges (no numpy here, so
the CLI's help can name them without loading the fitting code)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from paraplan.hardware_specs.schema import Cluster, StackKernelEfficiency


@dataclass(frozen=True)
class Parameter:
    name: str
    lower: float
    upper: float

    def get(self, cluster: Cluster) -> float:
        return float(_PATHS[self.name](cluster))

    def span(self) -> float:
        return self.upper - self.lower


# A stack's kernel throughput on this hardware relative to the reference stack's (Megatron-LM with
# Transformer Engine): `efficiency.stack_kernel_efficiency.<stack>`, one parameter per stack, named
# STACK_PREFIX + the stack's label. Unset on the hardware, it is the stack's global figure.
STACK_PREFIX = "kernel_efficiency."
STACKS = tuple(StackKernelEfficiency.model_fields)


def stack_kernel_efficiency(cluster: Cluster, stack: str) -> float:
    """The stack's kernel efficiency on this hardware (`frameworks.kernel_efficiency_on`; imported
    here, not at the top: the CLI's help reads this module without loading numpy)."""
    from paraplan.cost_models.frameworks import FRAMEWORKS, kernel_efficiency_on
    from paraplan.cost_models.layout import Framework

    return kernel_efficiency_on(cluster, FRAMEWORKS[Framework.parse(stack)])


_PATHS: dict[str, Callable[[Cluster], float]] = {
    "gemm_max": lambda c: c.efficiency.gemm_max,
    "kernel_overhead_s": lambda c: c.efficiency.kernel_overhead_s,
    "gemm_half_dim": lambda c: c.efficiency.gemm_half_dim,
    "attention": lambda c: c.efficiency.attention,
    "memory_bound": lambda c: c.efficiency.memory_bound,
    "intra_node": lambda c: c.intra_node.link.efficiency,
    "inter_node": lambda c: c.inter_node.efficiency,
    "dp_overlap": lambda c: c.efficiency.dp_overlap,
    **{STACK_PREFIX + s: partial(stack_kernel_efficiency, stack=s) for s in STACKS},
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
        # the range benchmarks/fit_presets.py searches for the global figures
        *(Parameter(STACK_PREFIX + s, 0.3, 1.2) for s in STACKS),
    )
}
# The constants of the hardware itself, fitted by default; a stack's figure joins them where the
# runs can tell it apart (`calibration.default_names`).
HARDWARE_PARAMETERS = tuple(n for n in PARAMETERS if not n.startswith(STACK_PREFIX))
# A fitted constant is determined by the runs when its standard error is at most this share of its
# range (`calibration.standard_errors`): gemm_max to within +/-0.08, an efficiency of links or
# overlap to within +/-0.1, gemm_half_dim to within +/-100 (one standard error).
DETERMINED_SHARE = 0.1

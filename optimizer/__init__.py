"""paraplan: the best TP x PP x DP (x CP x EP) layout for training a transformer, with the
numbers behind it.

    import paraplan
    r = paraplan.optimize(model="llama2-70b", gpus=1024, hardware="a100-80g", top=3)
    r.results[0].layouts[0].step_time_s

The functions (`validate`, `optimize`, `compare`, `calibrate`, `load_model`, `load_hardware`)
and the result models are loaded on first use, so that importing paraplan (and the CLI's
`--help`) stays fast.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from paraplan.cost_models.errors import InputError

if TYPE_CHECKING:
    from paraplan.api import load_hardware, load_model, optimize, validate
    from paraplan.calibration import calibrate
    from paraplan.cost_models.layout import CpComm, Framework, Layout, Offload, Precision, Recompute
    from paraplan.decision import compare

__all__ = [
    "CpComm",
    "Framework",
    "InputError",
    "Layout",
    "Offload",
    "Precision",
    "Recompute",
    "calibrate",
    "compare",
    "load_hardware",
    "load_model",
    "optimize",
    "validate",
]

_LAZY = {
    "validate": "paraplan.api",
    "optimize": "paraplan.api",
    "load_model": "paraplan.api",
    "load_hardware": "paraplan.api",
    "compare": "paraplan.decision",
    "calibrate": "paraplan.calibration",
    "Layout": "paraplan.cost_models.layout",
    "Recompute": "paraplan.cost_models.layout",
    "Precision": "paraplan.cost_models.layout",
    "Framework": "paraplan.cost_models.layout",
    "Offload": "paraplan.cost_models.layout",
    "CpComm": "paraplan.cost_models.layout",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'paraplan' has no attribute {name!r}")

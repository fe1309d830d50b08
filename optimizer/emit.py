"""Launch configurations for a plan (`paraplan optimize/validate --emit FRAMEWORK`).

The emitters live in `paraplan.launch.emitters` (Megatron-LM d98e8a64 flags, a DeepSpeed 0.19.8
JSON with its launcher, torchtitan 0.3.0 flags), the reverse mapping in
`paraplan.launch.importer`; this module is the entry point the API calls.
"""

from __future__ import annotations

from paraplan.cost_models.layout import Framework, Layout
from paraplan.cost_models.models import ModelSpec
from paraplan.cost_models.stack import Stack
from paraplan.launch.emitters import EMITTERS, check_emitted, emit_launch

__all__ = ["EMITTERS", "check_emitted", "emit_launch", "megatron_args"]


def megatron_args(model: ModelSpec, lay: Layout, stack: Stack | None = None) -> str:
    """The Megatron-LM launch command for a layout (the plan's framework taken as Megatron-LM)."""
    return emit_launch("megatron", model, lay.model_copy(update={"framework": Framework.MEGATRON}), stack)

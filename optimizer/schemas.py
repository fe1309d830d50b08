"""The result model behind each command's --json output (`paraplan schema COMMAND`)."""

from __future__ import annotations

from pydantic import BaseModel

from paraplan.results import CalibrateResult, CompareResult, OptimizeResult, ValidateResult

OUTPUTS: dict[str, type[BaseModel]] = {
    "validate": ValidateResult,
    "optimize": OptimizeResult,
    "compare": CompareResult,
    "calibrate": CalibrateResult,
}


def output_model(command: str) -> type[BaseModel]:
    return OUTPUTS[command]

"""Carry a torchtitan v0.2.2 TOML job config over to torchtitan 0.3.0 command-line flags.

torchtitan 0.3.0 takes no TOML: a run is ``--module M --config F`` plus ``--section.field`` flags.
Fields with the same dotted name in both pinned schemas carry over as they are; a short list of
renames (read off the two schemas, same meaning) carries over too; everything else is returned
as dropped, with the reason.  Every flag produced passes :func:`check_torchtitan` for 0.3.0.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .schema import TORCHTITAN_TOML_VERSION, TORCHTITAN_VERSION, check_torchtitan, torchtitan_fields

__all__ = ["TitanConversion", "torchtitan_toml_to_flags"]

# v0.2.2 key -> 0.3.0 key, where only the place changed
_RENAMES: dict[str, str] = {
    "job.dump_folder": "dump_folder",
    "model.hf_assets_path": "hf_assets_path",
    "training.dataset": "dataloader.dataset",
    "training.dataset_path": "dataloader.dataset_path",
    "optimizer.lr": "optimizer.param_groups.0.optimizer_kwargs.lr",
    "optimizer.eps": "optimizer.param_groups.0.optimizer_kwargs.eps",
    "optimizer.weight_decay": "optimizer.param_groups.0.optimizer_kwargs.weight_decay",
    "validation.enable": "validator.enable",
    "validation.freq": "validator.freq",
    "validation.steps": "validator.steps",
    "validation.dataset": "validator.dataloader.dataset",
    "validation.dataset_path": "validator.dataloader.dataset_path",
}
for _f in ("num_workers", "persistent_workers", "pin_memory", "prefetch_factor"):
    _RENAMES[f"training.dataloader.{_f}"] = f"dataloader.{_f}"
    _RENAMES[f"validation.dataloader.{_f}"] = f"validator.dataloader.{_f}"
for _f in ("enable_profiling", "save_traces_folder", "profile_freq", "profiler_active", "profiler_warmup",
           "enable_memory_snapshot", "save_memory_snapshot_folder"):  # fmt: skip
    _RENAMES[f"profiling.{_f}"] = f"profiler.{_f}"
_AC_MODES = {"selective": "selective", "full": "full", "memory_budget": "memory-budget", "none": "none"}
_AC_FIELDS = ("preserve_rng_state", "determinism_check", "debug", "memory_budget", "visualize_memory_budget_pareto")


@dataclass(frozen=True)
class TitanConversion:
    """0.3.0 flags for a v0.2.2 config, and the v0.2.2 keys left behind (key -> why)."""

    flags: list[str]
    dropped: dict[str, str] = field(default_factory=dict)


def _flatten(prefix: str, obj: Mapping[str, Any], out: dict[str, Any]) -> None:
    for k, v in obj.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, Mapping):
            _flatten(key, v, out)
        else:
            out[key] = v


def _flag(key: str, value: Any, is_bool: bool) -> list[str]:
    if is_bool:
        if value is True:
            return [f"--{key}"]
        head, _, leaf = key.rpartition(".")
        return [f"--{head}.no-{leaf.replace('_', '-')}" if head else f"--no-{leaf.replace('_', '-')}"]
    if isinstance(value, list):
        return [f"--{key}", ",".join(str(x) for x in value)]
    return [f"--{key}", "None" if value is None else str(value)]


def torchtitan_toml_to_flags(config: Mapping[str, Any]) -> TitanConversion:
    """0.3.0 flags equivalent to the v0.2.2 TOML `config` (parsed with tomllib), as far as the two
    schemas allow.  ``model.name`` becomes ``--module``; ``model.flavor`` has no 0.3.0 flag (0.3.0
    picks the model size with ``--config``, a registry function name) and is dropped."""
    new = torchtitan_fields(TORCHTITAN_VERSION)
    old = torchtitan_fields(TORCHTITAN_TOML_VERSION)
    flat: dict[str, Any] = {}
    _flatten("", config, flat)
    flags: list[str] = []
    dropped: dict[str, str] = {}
    ac_token: list[str] = []
    mode = flat.pop("activation_checkpoint.mode", None)
    if mode is not None:
        variant = _AC_MODES.get(str(mode))
        if variant is None:
            dropped["activation_checkpoint.mode"] = f"{mode!r} is not an activation-checkpoint variant of 0.3.0"
        else:
            ac_token = [f"activation-checkpoint:{variant}"]
            flags += ac_token
    for key, value in flat.items():
        if key not in old:
            dropped[key] = f"not a field of torchtitan {TORCHTITAN_TOML_VERSION}"
            continue
        if key == "model.name":
            flags += ["--module", str(value)]
            continue
        if key.startswith("activation_checkpoint.") and key.split(".", 1)[1] in _AC_FIELDS:
            candidate = [f"--{key}", str(value)] if not isinstance(value, bool) else _flag(key, value, True)
            if not check_torchtitan([*ac_token, *candidate]):
                flags += candidate
            else:
                dropped[key] = "not a field of the selected activation-checkpoint variant in 0.3.0"
            continue
        target = _RENAMES.get(key, key)
        f = new.get(target)
        if f is None or not f.cli:
            why = "model size is chosen with --config in 0.3.0" if key == "model.flavor" else "no 0.3.0 flag"
            dropped[key] = why
            continue
        candidate = _flag(target, value, f.is_flag)
        problems = check_torchtitan(candidate)
        if problems:
            dropped[key] = problems[0]
            continue
        flags += candidate
    return TitanConversion(flags, dropped)

"""One question's inputs, resolved and checked: model, hardware, knobs given, stack, headroom.

`Question.of` is the single validation path for knobs from every entry point (CLI options, the
Python API's keyword arguments, calibrate's CSV cells, a launch file read back): each value goes
through `layout.parse_knob`, which applies the schema's types and bounds. Contradictory knobs
are refused here (`InputError`), before any search.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from paraplan.cost_models.candidates import Layouts
from paraplan.cost_models.errors import InputError
from paraplan.cost_models.evaluate import Evaluation, evaluate
from paraplan.cost_models.frameworks import FRAMEWORKS, default_stack
from paraplan.cost_models.layout import (
    DEGREES,
    KNOBS,
    SETTINGS,
    Framework,
    Layout,
    Precision,
    Recompute,
    default_global_batch,
    parse_knob,
)
from paraplan.cost_models.models import ModelSpec
from paraplan.cost_models.stack import (
    DEFAULT_RECOMPUTE_MODULES,
    STACK_CHOICES,
    STACK_FIELDS,
    STACK_SETS,
    Stack,
    module_list,
    parse_modules,
)
from paraplan.hardware_specs.schema import Cluster
from paraplan.space import Bounds, enumerate_space, expand

CHUNK = 250_000


def knobs_from(raw: Mapping[str, object], where: str = "") -> dict[str, Any]:
    """Parsed knob values (None entries dropped); InputError names the bad one."""
    out: dict[str, Any] = {}
    for name, value in raw.items():
        if value is None:
            continue
        if name not in KNOBS:
            raise InputError(f"{where}unknown knob {name!r}; accepted: {', '.join(KNOBS)}")
        try:
            out[name] = parse_knob(name, value)
        except ValueError as exc:
            raise InputError(f"{where}{name.replace('_', '-')} {exc}") from None
    _check_consistent(out, where)
    return out


def _check_consistent(knobs: Mapping[str, Any], where: str) -> None:
    recompute = knobs.get("recompute")
    layers = knobs.get("recompute_layers")
    if layers and recompute is not None and recompute != Recompute.FULL:
        raise InputError(
            f"{where}recompute-layers {layers} needs recompute full, not recompute {recompute} "
            "(give one of them, or recompute full)"
        )


def with_settings(knobs: Mapping[str, Any]) -> dict[str, Any]:
    """The knobs with every setting filled in: the defaults, the global batch from seq-len. A
    recompute mode given without `recompute_layers` means every layer, as Megatron-LM's full
    recompute does by default (the block method's N is the search's refinement)."""
    out = dict(knobs)
    if "recompute" in out and "recompute_layers" not in out:
        out["recompute_layers"] = 0
    defaults = Layout()
    for name in SETTINGS:
        if name not in out:
            out[name] = getattr(defaults, name)
    if "global_batch" not in knobs:
        out["global_batch"] = default_global_batch(int(out["seq_len"]))
    return out


SELECTIVE_WORDS = {"core_attention": "core attention", "op": "its per-op policy"}  # frameworks `selective`


def stack_from(framework: Framework, overrides: Mapping[str, object] | None) -> Stack:
    """The framework's stack with the user's overrides (None keeps the framework's)."""
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    unknown = set(given) - set(STACK_FIELDS)
    if unknown:
        raise InputError(f"unknown stack setting(s) {', '.join(sorted(unknown))}; accepted: {', '.join(STACK_FIELDS)}")
    for name, choices in STACK_CHOICES.items():
        if name in given and given[name] not in choices:
            raise InputError(f"{name.replace('_', '-')} {given[name]!r} is not {' or '.join(choices)}")
    for name in STACK_SETS:
        if name in given:
            try:
                given[name] = parse_modules(given[name])
            except ValueError as exc:
                raise InputError(f"{name.replace('_', '-')}: {exc}") from None
    for name, value in given.items():
        if name not in STACK_CHOICES and name not in STACK_SETS and not isinstance(value, bool):
            raise InputError(f"{name.replace('_', '-')} must be true or false, not {value!r}")
    modules = parse_modules(given.get("recompute_modules", DEFAULT_RECOMPUTE_MODULES))
    if modules != DEFAULT_RECOMPUTE_MODULES and framework != Framework.MEGATRON:
        raise InputError(f"recompute-modules {','.join(module_list(modules)) or '(none)'}: "
                         f"{FRAMEWORKS[framework].title}'s selective recompute is its own "
                         f"({SELECTIVE_WORDS[FRAMEWORKS[framework].selective]}); recompute modules are Megatron-LM's")  # fmt: skip
    runs = FRAMEWORKS[framework].ep_dispatchers
    if given.get("ep_dispatcher", "alltoall") not in runs:
        raise InputError(f"ep-dispatcher {given['ep_dispatcher']!r}: {FRAMEWORKS[framework].title} is priced with "
                         f"{' or '.join(sorted(runs))} only (the flex dispatcher is Megatron-LM's)")  # fmt: skip
    if framework != Framework.MEGATRON and (given.get("moe_a2a_overlap") or given.get("delay_wgrad")):
        raise InputError(f"moe-a2a-overlap / delay-wgrad: {FRAMEWORKS[framework].title} has no combined 1F1B "
                         "schedule (Megatron-LM's --overlap-moe-expert-parallel-comm)")  # fmt: skip
    for name in ("mtp", "token_drop", "cpu_checkpointing"):  # FrameworkSpec fields named as the settings
        if given.get(name) and not getattr(FRAMEWORKS[framework], name):
            # the launch config would refuse it: a prediction for what cannot be launched is no answer
            raise InputError(f"{name.replace('_', '-')}: {FRAMEWORKS[framework].title} "
                             f"{FRAMEWORKS[framework].version} cannot run it")  # fmt: skip
    if given.get("delay_wgrad") and not given.get("moe_a2a_overlap"):
        # transformer_config.py at d98e8a64 asserts it
        raise InputError("delay-wgrad needs moe-a2a-overlap (Megatron-LM: 'overlap_moe_expert_parallel_comm must "
                         "be enabled when enabling delay_wgrad_compute')")  # fmt: skip
    return default_stack(framework).with_overrides(**given)


def check_recompute_modules(model: ModelSpec, stack: Stack, precision: Precision) -> None:
    """What Megatron-LM d98e8a64 refuses of the selective recompute modules (transformer_config.py
    `__post_init__`): moe_act "only supported with moe_grouped_gemm" (experts, run as grouped
    GEMMs), mla_up_proj "only supported with multi_latent_attention", and under FP8 "Delayed
    scaling does not support moe_act and layernorm recompute"."""
    modules = stack.recompute_modules
    if "moe_act" in modules and not model.is_moe:
        raise InputError(f"recompute-modules moe_act: {model.name} has no experts (Megatron-LM: 'moe_act in "
                         "recompute_modules is only supported with moe_grouped_gemm')")  # fmt: skip
    if "mla_up_proj" in modules and not model.is_mla:
        raise InputError(f"recompute-modules mla_up_proj: {model.name} has no multi-head latent attention "
                         "(Megatron-LM: 'only supported with multi_latent_attention')")  # fmt: skip
    delayed = modules & {"moe_act", "layernorm"}
    if delayed and precision == Precision.FP8 and stack.fp8_recipe == "delayed":
        raise InputError(f"recompute-modules {','.join(sorted(delayed))} with fp8-recipe delayed: Megatron-LM "
                         "'Delayed scaling does not support moe_act and layernorm recompute for fp8' "
                         "(give --fp8-recipe tensorwise or mxfp8)")  # fmt: skip


@dataclass(frozen=True)
class Question:
    model: ModelSpec
    cluster: Cluster
    given: Mapping[str, Any]  # every setting, and the knobs the user fixed
    stack: Stack
    mem_headroom: float = 0.0
    bounds: Bounds = field(default_factory=Bounds)

    @staticmethod
    def of(model: ModelSpec, cluster: Cluster, knobs: Mapping[str, object], stack: Mapping[str, object] | None = None,
           mem_headroom: float = 0.0, bounds: Bounds | None = None) -> Question:  # fmt: skip
        given = with_settings(knobs_from(knobs))
        if not 0.0 <= mem_headroom < 1.0:
            raise InputError(f"mem-headroom {mem_headroom} must be in 0..0.9")
        settled = stack_from(given["framework"], stack)
        check_recompute_modules(model, settled, Precision(given["precision"]))
        if settled.mtp and not model.mtp_layers:
            raise InputError(f"mtp: {model.name} has no multi-token-prediction modules (num_nextn_predict_layers)")
        return Question(model, cluster, given, settled, mem_headroom, bounds or Bounds())

    @property
    def framework(self) -> Framework:
        return Framework(self.given["framework"])

    def fixed(self, **degrees: int | None) -> Question:
        """The same question with some degrees fixed (a plan)."""
        given = dict(self.given)
        given.update({k: v for k, v in degrees.items() if v is not None})
        return Question(self.model, self.cluster, given, self.stack, self.mem_headroom, self.bounds)

    def free(self) -> Question:
        """The same question with every degree and searched knob open (settings kept)."""
        given = {k: v for k, v in self.given.items() if k in SETTINGS}
        return Question(self.model, self.cluster, given, self.stack, self.mem_headroom, self.bounds)

    def space(self, gpus: int, trading: bool = True) -> Layouts:
        return enumerate_space(self.model, self.cluster, gpus, self.given, self.bounds, trading)

    def expansion(self, cores: Layouts, gpus: int) -> Layouts:
        return expand(cores, self.model, self.cluster, gpus, self.given, self.bounds)

    def evaluate(self, layouts: Layouts) -> Evaluation:
        """Every candidate, in chunks of `CHUNK` rows so that memory stays bounded (numpy
        temporaries are a few hundred bytes per row)."""
        if len(layouts) <= CHUNK:
            return evaluate(self.model, self.cluster, layouts, self.stack, self.mem_headroom)
        parts = [
            evaluate(self.model, self.cluster, layouts.take(np.arange(i, min(i + CHUNK, len(layouts)))), self.stack,
                     self.mem_headroom)
            for i in range(0, len(layouts), CHUNK)
        ]  # fmt: skip
        return Evaluation.concat(parts)

    def open_knobs(self) -> list[str]:
        """The searched knobs the user left to the search."""
        return [n for n in KNOBS if n not in self.given and n not in DEGREES]

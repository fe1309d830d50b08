"""One question's inputs, resolved and checked: model, hardware, knobs given, stack, headroom.

`Question.of` is the single validation path for knobs from every entry point (CLI options, the
Python API's keyword arguments, calibrate's CSV cells, a launch file read back): each value goes
through `layout.parse_knob`, which applies the schema's types and bounds. Contradictory knobs
are refused here (`InputError`), before any search.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from paraplan.cost_models.candidates import Layouts
from paraplan.cost_models.errors import InputError
from paraplan.cost_models.evaluate import Evaluation, evaluate
from paraplan.cost_models.frameworks import default_stack, model_stack_unsupported, stack_unsupported
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
    STACK_CHOICES,
    STACK_FIELDS,
    STACK_NUMBERS,
    STACK_SET_PARSERS,
    STACK_SETS,
    Stack,
    parse_count,
)
from paraplan.hardware_specs.schema import Cluster
from paraplan.space import Bounds, enumerate_space, expand

# Rows per evaluation. Every cost term is row by row, so the chunking never changes a figure; it
# sets the size of the ~hundreds of float64 temporaries an evaluation makes. At 8,192 rows each is
# 64 KiB, under glibc's mmap threshold (128 KiB): served from the heap and hot in cache, where
# larger ones are mapped and page-faulted afresh each time. Measured (process time, one question's
# whole space): llama2-70b 1,024 x a100-80g, 327,670 rows: 1.20 s at 250,000, 0.89 s at 32,768,
# 0.76 s at 8,192, 0.77 s at 4,096; mixtral-8x7b 32 x h100-sxm, 442,685 rows: 1.89, 1.37, 1.03,
# 1.16 s; llama2-7b 64 x a100-80g, 113,515 rows: 0.31, 0.28, 0.22, 0.25 s (below 8,192 the fixed
# cost of each call starts to show).
CHUNK = 8_192


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


def stack_from(framework: Framework, overrides: Mapping[str, object] | None) -> Stack:
    """The framework's stack with the user's overrides (None keeps the framework's); InputError
    where the framework cannot run it (`frameworks.stack_unsupported`, its first reason): the
    launch config would refuse it, and a prediction for what cannot be launched is no answer."""
    given = {k: v for k, v in (overrides or {}).items() if v is not None}
    unknown = set(given) - set(STACK_FIELDS)
    if unknown:
        raise InputError(f"unknown stack setting(s) {', '.join(sorted(unknown))}; accepted: {', '.join(STACK_FIELDS)}")
    for name, choices in STACK_CHOICES.items():
        if name in given and given[name] not in choices:
            raise InputError(f"{name.replace('_', '-')} {given[name]!r} is not {' or '.join(choices)}")
    parsers: tuple[tuple[Iterable[str], Callable[[Any], object], str], ...] = (
        *(((name,), parse, ": ") for name, parse in STACK_SET_PARSERS.items()), (STACK_NUMBERS, parse_count, " "))  # fmt: skip
    for names, parse, joint in parsers:
        for name in names:
            if name in given:
                try:
                    given[name] = parse(given[name])
                except ValueError as exc:
                    raise InputError(f"{name.replace('_', '-')}{joint}{exc}") from None
    for name, value in given.items():
        if name not in (*STACK_CHOICES, *STACK_SETS, *STACK_NUMBERS) and not isinstance(value, bool):
            raise InputError(f"{name.replace('_', '-')} must be true or false, not {value!r}")
    stack = default_stack(framework).with_overrides(**given)
    _refuse_first(stack_unsupported(framework, stack))
    return stack


def stack_for_model(framework: Framework, overrides: Mapping[str, object] | None, model: ModelSpec,
                    precision: Precision) -> Stack:  # fmt: skip
    """`stack_from`, and the settings `model` cannot run at `precision` refused
    (`frameworks.model_stack_unsupported`): what every question on a model checks of its stack
    (`Question.of`, `pools.pool_question`)."""
    stack = stack_from(framework, overrides)
    _refuse_first(model_stack_unsupported(model, stack, precision))
    return stack


def _refuse_first(unsupported: list[tuple[str, str]]) -> None:
    """InputError with the first reason of a (setting, reason) list, if any."""
    if unsupported:
        raise InputError(unsupported[0][1])


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
        settled = stack_for_model(given["framework"], stack, model, Precision(given["precision"]))
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

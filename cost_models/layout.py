"""The one knob schema: every setting of a training layout, defined once, with its metadata.

`Layout` is the single source of the layout knobs. Each field carries a `Knob` (its role, help
text, domain, words for reports, tie-break preference and launch-flag names) and pydantic bounds.
Everything else derives from it: the CLI options and their validation (`paraplan.cli`), the
calibrate CSV columns, the candidate columns of the search (`paraplan.space`), the ranking
tie-breaks, the JSON output (the model itself is the JSON schema of `layout`), the compact
table words and their legend, and the emitters' simple mappings. Adding a knob is one field here
plus its cost terms (and its rules in `limits`, if it has any).

Roles: a DEGREE is a parallel dimension (the plan: TP, PP, DP, CP, EP); a SEARCHED knob is
chosen by the search when the user does not give it; a SETTING is given by the user (or its
default) and never searched.

Rank order follows Megatron-LM's `RankGenerator` ("tp-cp-ep-dp-pp"): TP varies fastest, then
CP, then DP, then PP. So a TP group is `tp` consecutive ranks, a CP group has stride `tp`, a DP
group stride `tp*cp` (the DP x CP group that reduces dense gradients: `dp*cp` ranks at stride
`tp`), and consecutive pipeline stages are `tp*cp*dp` ranks apart. Expert layers re-divide the
TP x DP x CP ranks as "etp-ep-dp" (Megatron's expert rank generator, "MoE parallel folding"):
expert layers run with their own tensor parallelism ETP (`expert_tp`; 0 = ETP equal to TP), an EP
group is `ep` ranks at stride ETP, the expert-data-parallel group `tp*dp*cp/(ep*ETP)` ranks at
stride `ETP*ep`. With ETP = TP this is the classic layout: EP carved from DP x CP.

This module imports pydantic only (no numpy), so that `paraplan --help` stays fast.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import Enum, IntEnum
from typing import TYPE_CHECKING, Annotated, Any, Self, TypedDict

from pydantic import BaseModel, ConfigDict, Field, GetCoreSchemaHandler, GetJsonSchemaHandler
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import CoreSchema, core_schema

if TYPE_CHECKING:
    from paraplan.cost_models.models import ModelSpec
    from paraplan.hardware_specs.schema import Cluster

MAX_GPUS = 10_000_000  # the largest GPU count any input may name
MAX_DEGREE = MAX_GPUS  # a parallel degree never exceeds the GPU count
MAX_MICRO_BATCH_TOKENS = 65_536  # search cap: GEMMs have long saturated at this many tokens
MAX_VIRTUAL_STAGES = 8  # search cap on interleaved chunks per GPU
MAX_CP = 64  # search cap on context parallelism
TOKENS_PER_BATCH = 4_194_304  # default global batch: this many tokens per step


class Labelled(IntEnum):
    """An enum stored as a small integer in candidate arrays and read and written as its
    lower-case label (CLI, JSON, CSV, Python API). The integers are the members' own values,
    never an order elsewhere."""

    @property
    def label(self) -> str:
        return self.name.lower()

    @classmethod
    def labels(cls) -> tuple[str, ...]:
        return tuple(m.label for m in cls)

    @classmethod
    def parse(cls, value: object) -> Self:
        if isinstance(value, cls):
            return value
        if isinstance(value, str):
            for member in cls:
                if member.label == value.strip().lower():
                    return member
        raise ValueError(f"{value!r} is not one of {', '.join(cls.labels())}")

    def __str__(self) -> str:
        return self.label

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler) -> CoreSchema:
        return core_schema.no_info_plain_validator_function(
            cls.parse, serialization=core_schema.plain_serializer_function_ser_schema(lambda m: m.label)
        )

    @classmethod
    def __get_pydantic_json_schema__(cls, schema: CoreSchema, handler: GetJsonSchemaHandler) -> JsonSchemaValue:
        return {"type": "string", "enum": list(cls.labels())}


class Recompute(Labelled):
    NONE = 0
    SELECTIVE = 1  # the framework's selective activation checkpointing (see frameworks)
    FULL = 2  # every layer's forward again in the backward (or N per chunk: recompute_layers)


class Precision(Labelled):
    BF16 = 0
    FP16 = 1
    FP8 = 2  # projection and MLP GEMMs on FP8 tensor cores (Transformer Engine / torchao float8)


class Framework(Labelled):
    MEGATRON = 0
    DEEPSPEED = 1
    TORCHTITAN = 2


class Offload(Labelled):
    NONE = 0
    OPTIMIZER = 1  # ZeRO-Offload: optimizer states and the Adam step on the CPU
    ALL = 2  # ZeRO-Infinity to CPU: optimizer states and parameters in host memory


class CpComm(Labelled):
    RING = 0  # ring attention: K/V chunks passed around the CP group (Megatron p2p)
    ALLGATHER = 1  # K/V all-gathered once per layer (Llama 3, Megatron allgather)


class Role(Enum):
    DEGREE = "degree"
    SEARCHED = "searched"
    SETTING = "setting"


@dataclass(frozen=True)
class DomainContext:
    """What a knob's search domain depends on."""

    model: ModelSpec
    cluster: Cluster
    gpus: int
    settings: Mapping[str, Any]  # the SETTING knobs' values of this question


Domain = Callable[[DomainContext], Sequence[Any]]


@dataclass(frozen=True)
class Knob:
    """Metadata of one layout field.

    domain: the values the search tries when the knob is free (a superset: the rules in
        `limits` drop the combinations a framework or the hardware cannot run).
    word / short: how reports name a value ("micro-batch 4" / "mb4"); None hides the knob at
        that value in compact words (defaults need no mention).
    prefer: tie-break between equally fast layouts: 1 = smaller value first (simpler), -1 =
        larger first.
    flags: the framework's own flag or key for this knob's plain value (emitters).
    """

    role: Role
    help: str
    word: Callable[[Any], str]
    short: Callable[[Any], str | None]
    legend: str = ""
    title: str = ""  # the knob's name in sentences ("ZeRO", "micro-batch"); default: the field name
    trades_memory: bool = False  # only ever trades time for memory: a layout is never faster with more of it
    prefer: int = 1
    domain: Domain | None = None
    flags: Mapping[Framework, str] = field(default_factory=dict)


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _degree_domain(dim: str) -> Domain:
    def domain(ctx: DomainContext) -> Sequence[int]:
        caps = {"cp": MAX_CP, "pp": ctx.model.num_layers, "ep": ctx.model.num_experts}
        values = _divisors(ctx.gpus) if dim != "ep" else _divisors(ctx.model.num_experts)
        return [v for v in values if v <= caps.get(dim, ctx.gpus)]

    return domain


def _micro_batch_domain(ctx: DomainContext) -> Sequence[int]:
    cap = max(1, MAX_MICRO_BATCH_TOKENS // int(ctx.settings["seq_len"]))
    return [b for b in _divisors(int(ctx.settings["global_batch"])) if b <= cap]


def _virtual_domain(ctx: DomainContext) -> Sequence[int]:
    return list(range(1, min(MAX_VIRTUAL_STAGES, ctx.model.num_layers) + 1))


def _recompute_layers_domain(ctx: DomainContext) -> Sequence[int]:
    """All layers of a chunk (0), or Megatron's block method's N = 1, 2, 4, ... below the
    largest chunk (finer trades of memory for recompute)."""
    layers = ctx.model.num_layers
    return [0, *(1 << k for k in range(layers.bit_length()) if (1 << k) < layers)]


def _all(values: Sequence[Any]) -> Domain:
    return lambda ctx: list(values)


def _degree(dim: str, help_text: str, flags: Mapping[Framework, str]) -> Any:
    up = dim.upper()
    return Knob(
        Role.DEGREE, help_text, word=lambda v: f"{up}{v}", short=lambda v: f"{up}{v}",
        domain=_degree_domain(dim), flags=flags,
    )  # fmt: skip


class Layout(BaseModel):
    """One training layout: the plan's degrees, the searched knobs and the run's settings."""

    model_config = ConfigDict(frozen=True, extra="forbid", use_enum_values=False)

    tp: Annotated[int, Field(ge=1, le=MAX_DEGREE), _degree(
        "tp", "Tensor parallelism: each layer's matrices split over TP GPUs.",
        {Framework.MEGATRON: "--tensor-model-parallel-size", Framework.TORCHTITAN: "parallelism.tensor_parallel_degree"},
    )] = 1  # fmt: skip
    pp: Annotated[int, Field(ge=1, le=MAX_DEGREE), _degree(
        "pp", "Pipeline parallelism: the layers split into PP stages.",
        {Framework.MEGATRON: "--pipeline-model-parallel-size",
         Framework.TORCHTITAN: "parallelism.pipeline_parallel_degree"},
    )] = 1  # fmt: skip
    dp: Annotated[int, Field(ge=1, le=MAX_DEGREE), _degree(
        "dp", "Data parallelism: replicas, each with 1/DP of the global batch.", {},
    )] = 1  # fmt: skip
    cp: Annotated[int, Field(ge=1, le=MAX_DEGREE), _degree(
        "cp", "Context parallelism: the sequence split over CP GPUs.",
        {Framework.MEGATRON: "--context-parallel-size", Framework.TORCHTITAN: "parallelism.context_parallel_degree"},
    )] = 1  # fmt: skip
    ep: Annotated[int, Field(ge=1, le=MAX_DEGREE), _degree(
        "ep", "Expert parallelism: experts spread over EP GPUs (carved from TP x DP x CP over expert TP).",
        {Framework.MEGATRON: "--expert-model-parallel-size", Framework.TORCHTITAN: "parallelism.expert_parallel_degree"},
    )] = 1  # fmt: skip
    micro_batch: Annotated[int, Field(ge=1, le=1_000_000), Knob(
        Role.SEARCHED, "Sequences per micro-batch.", word=lambda v: f"micro-batch {v}", short=lambda v: f"mb{v}",
        legend="mbN: N sequences per micro-batch", title="micro-batch", prefer=-1, domain=_micro_batch_domain,
        flags={Framework.MEGATRON: "--micro-batch-size"},
    )] = 1  # fmt: skip
    global_batch: Annotated[int, Field(ge=1, le=1_000_000_000), Knob(
        Role.SETTING, f"Sequences per optimizer step [default: {TOKENS_PER_BATCH:,} tokens / seq-len].",
        word=lambda v: f"global batch {v}", short=lambda v: None,
        flags={Framework.MEGATRON: "--global-batch-size", Framework.TORCHTITAN: "training.global_batch_size"},
    )] = 1024  # fmt: skip
    seq_len: Annotated[int, Field(ge=1, le=100_000_000), Knob(
        Role.SETTING, "Sequence length in tokens.", word=lambda v: f"sequence {v}", short=lambda v: None,
        flags={Framework.MEGATRON: "--seq-length", Framework.TORCHTITAN: "training.seq_len"},
    )] = 4096  # fmt: skip
    virtual_stages: Annotated[int, Field(ge=1, le=10_000), Knob(
        Role.SEARCHED, "Interleaved 1F1B model chunks per GPU (virtual pipeline stages).",
        word=lambda v: f"VPP{v}", short=lambda v: f"v{v}" if v > 1 else None,
        legend="vN: N interleaved model chunks per GPU", title="virtual stages", domain=_virtual_domain,
    )] = 1  # fmt: skip
    recompute: Annotated[Recompute, Knob(
        Role.SEARCHED, "Activation recompute: none, selective (the framework's), or full.",
        word=lambda v: f"recompute {v}", short=lambda v: f"rc-{v}",
        legend="rc-MODE: activation recompute none / selective / full", domain=_all(list(Recompute)),
        trades_memory=True,
    )] = Recompute.NONE  # fmt: skip
    recompute_layers: Annotated[int, Field(ge=0, le=100_000), Knob(
        Role.SEARCHED, "With full recompute, layers per model chunk recomputed (Megatron's block method); 0 = all.",
        word=lambda v: f"{v} layer{'s' if v > 1 else ''} per chunk" if v else "all layers",
        short=lambda v: f"x{v}" if v else None, legend="xN: full recompute of N layers per chunk (block method)",
        domain=_recompute_layers_domain, flags={Framework.MEGATRON: "--recompute-num-layers"}, trades_memory=True,
    )] = 0  # fmt: skip
    zero: Annotated[int, Field(ge=0, le=3), Knob(
        Role.SEARCHED, "ZeRO stage: 1 shards optimizer states over DP, 2 + gradients, 3 + weights.",
        word=lambda v: f"ZeRO-{v}", short=lambda v: f"Z{v}", legend="ZN: ZeRO stage N", title="ZeRO", domain=_all([0, 1, 2, 3]),
    )] = 0  # fmt: skip
    sequence_parallel: Annotated[bool, Knob(
        Role.SEARCHED, "Megatron sequence parallelism with TP (norms and dropouts split over TP).",
        word=lambda v: "SP" if v else "no SP", short=lambda v: "SP" if v else None,
        legend="SP: sequence parallelism", domain=_all([False, True]),
    )] = False  # fmt: skip
    precision: Annotated[Precision, Knob(
        Role.SETTING, "Training precision; fp8 runs projection and MLP GEMMs on FP8 tensor cores.",
        word=lambda v: str(v), short=lambda v: str(v) if v != Precision.BF16 else None,
        legend="fp16/fp8: the training precision (bf16 when not shown)",
    )] = Precision.BF16  # fmt: skip
    framework: Annotated[Framework, Knob(
        Role.SETTING, "Training framework: decides which knob combinations are legal, their costs and the launch "
        "config (pinned versions: see the README).", word=lambda v: str(v), short=lambda v: None,
    )] = Framework.MEGATRON  # fmt: skip
    offload: Annotated[Offload, Knob(
        Role.SEARCHED, "Offload to host memory: optimizer states (DeepSpeed ZeRO-Offload, Megatron's CPU optimizer), or optimizer states and weights (DeepSpeed ZeRO-Infinity, torchtitan FSDP CPU offload).",
        word=lambda v: f"offload {v}", short=lambda v: f"off-{v}" if v != Offload.NONE else None,
        legend="off-WHAT: offload to host memory", domain=_all(list(Offload)), trades_memory=True,
    )] = Offload.NONE  # fmt: skip
    expert_tp: Annotated[int, Field(ge=0, le=MAX_DEGREE), Knob(
        Role.SEARCHED, "Tensor parallelism inside the expert layers (Megatron's --expert-tensor-parallel-size); "
        "0 = the same as TP.", word=lambda v: f"expert TP {v}" if v else "expert TP = TP",
        short=lambda v: f"etp{v}" if v else None, legend="etpN: expert layers with tensor parallelism N",
        title="expert TP", domain=_all([0, 1]), flags={Framework.MEGATRON: "--expert-tensor-parallel-size"},
    )] = 0  # fmt: skip
    first_stage_layers: Annotated[int, Field(ge=0, le=100_000), Knob(
        Role.SEARCHED, "Layers on the first pipeline stage (its GPU's chunks together); 0 = the even split. Given "
        "alone, the other stages share the rest evenly (Megatron-LM's rule).",
        word=lambda v: f"first stage {v} layers" if v else "even split", short=lambda v: f"f{v}" if v else None,
        legend="fN/lN: N layers on the first/last pipeline stage (uneven split)", title="first-stage layers",
        flags={Framework.MEGATRON: "--decoder-first-pipeline-num-layers"},
    )] = 0  # fmt: skip
    last_stage_layers: Annotated[int, Field(ge=0, le=100_000), Knob(
        Role.SEARCHED, "Layers on the last pipeline stage (with the LM head and loss); 0 = the even split. Given "
        "alone, the other stages share the rest evenly (Megatron-LM's rule).",
        word=lambda v: f"last stage {v} layers" if v else "even split", short=lambda v: f"l{v}" if v else None,
        title="last-stage layers", flags={Framework.MEGATRON: "--decoder-last-pipeline-num-layers"},
    )] = 0  # fmt: skip
    cp_comm: Annotated[CpComm, Knob(
        Role.SEARCHED, "How context parallelism exchanges K/V: ring (p2p) or all-gather.",
        word=lambda v: f"CP {v}", short=lambda v: f"cp-{v}" if v != CpComm.RING else None,
        legend="cp-allgather: context parallelism by all-gather of K/V", domain=_all(list(CpComm)),
    )] = CpComm.RING  # fmt: skip

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    @property
    def micro_batches(self) -> int:
        """Micro-batches each pipeline runs per step (rounded down)."""
        return self.global_batch // (self.dp * self.micro_batch)


class KnobArgs(TypedDict, total=False):
    """The layout fields as the Python API's typed keyword arguments (enums also as their
    labels). A test keeps it equal to `Layout`'s fields."""

    tp: int
    pp: int
    dp: int
    cp: int
    ep: int
    micro_batch: int
    global_batch: int
    seq_len: int
    virtual_stages: int
    recompute: Recompute | str
    recompute_layers: int
    zero: int
    sequence_parallel: bool
    precision: Precision | str
    framework: Framework | str
    offload: Offload | str
    expert_tp: int
    first_stage_layers: int
    last_stage_layers: int
    cp_comm: CpComm | str


def knob(name: str) -> Knob:
    """The metadata of a layout field."""
    for item in Layout.model_fields[name].metadata:
        if isinstance(item, Knob):
            return item
    raise KeyError(name)


KNOBS: dict[str, Knob] = {name: knob(name) for name in Layout.model_fields}
DEGREES = tuple(n for n, k in KNOBS.items() if k.role is Role.DEGREE)
SEARCHED = tuple(n for n, k in KNOBS.items() if k.role is Role.SEARCHED)
SETTINGS = tuple(n for n, k in KNOBS.items() if k.role is Role.SETTING)
ENUMS: dict[str, type[Labelled]] = {
    n: f.annotation for n, f in Layout.model_fields.items() if isinstance(f.annotation, type) and issubclass(
        f.annotation, Labelled)
}  # fmt: skip
BOOLS = tuple(n for n, f in Layout.model_fields.items() if f.annotation is bool)


def default_global_batch(seq_len: int) -> int:
    """The global batch when none is given: 4,194,304 tokens per step (1024 sequences of 4096)."""
    return max(1, TOKENS_PER_BATCH // seq_len)


def parse_knob(name: str, value: object) -> Any:
    """One knob's value from user input (CLI text, CSV cell, JSON value, Python argument),
    validated against the field's type and bounds: the one validation path for all inputs.
    Raises ValueError with a one-line reason."""
    if name not in KNOBS:
        raise ValueError(f"unknown knob {name!r}; accepted: {', '.join(KNOBS)}")
    if name in ENUMS:
        return ENUMS[name].parse(value)
    annotation = Layout.model_fields[name].annotation
    if annotation is bool:
        return _parse_bool(value)
    return _parse_int(name, value)


def _parse_bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "1", "yes", "on"):
        return True
    if isinstance(value, str) and value.strip().lower() in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"{_show(value)} is not true or false")


def _parse_int(name: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise ValueError(f"{_show(value)} is not a whole number")
    number: int
    if isinstance(value, str):
        text = value.strip()
        if len(text) > 24:
            raise ValueError(f"{_show(value)} is not a whole number in range")
        try:
            number = int(text)
        except ValueError:
            try:
                as_float = float(text)
            except ValueError:
                raise ValueError(f"{_show(value)} is not a whole number") from None
            number = _whole(as_float, value)
    elif isinstance(value, float):
        number = _whole(value, value)
    else:
        number = value
    lo, hi = bounds(name)
    if not lo <= number <= hi:
        raise ValueError(f"{_show(value)} is not in {lo}..{hi}")
    return number


def _whole(number: float, shown: object) -> int:
    if number != number or number in (float("inf"), float("-inf")) or number != int(number):
        raise ValueError(f"{_show(shown)} is not a whole number")
    return int(number)


def bounds(name: str) -> tuple[int, int]:
    """(lowest, highest) accepted value of an integer knob, from its pydantic constraints."""
    lo, hi = 0, MAX_DEGREE
    for item in Layout.model_fields[name].metadata:
        lo = getattr(item, "ge", lo) if getattr(item, "ge", None) is not None else lo
        hi = getattr(item, "le", hi) if getattr(item, "le", None) is not None else hi
    return int(lo), int(hi)


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:24] + "..." + text[-8:]


def layout_words(lay: Layout) -> str:
    """'TP8/PP4/DP8, VPP5, micro-batch 4, recompute none, ZeRO-1, SP, bf16' for reports."""
    dims = "/".join(KNOBS[d].word(getattr(lay, d)) for d in DEGREES if d in ("tp", "pp", "dp") or getattr(lay, d) > 1)
    words = [dims]
    for name in (*SEARCHED, "precision"):
        value = getattr(lay, name)
        if name == "virtual_stages" and value == 1:
            continue
        if name == "recompute_layers":
            if lay.recompute == Recompute.FULL and value:
                words[-1] += f" ({KNOBS[name].word(value)})"
            continue
        if (name == "offload" and value == Offload.NONE) or (name == "cp_comm" and lay.cp == 1):
            continue
        if name == "expert_tp" and lay.ep == 1 and not value:
            continue  # no expert layers split: nothing to say
        if name in ("first_stage_layers", "last_stage_layers") and not (
            lay.first_stage_layers or lay.last_stage_layers
        ):
            continue
        words.append(KNOBS[name].word(value))
    if lay.framework != Framework.MEGATRON:
        words.append(str(lay.framework))
    return ", ".join(words)


def layout_short(lay: Layout) -> str:
    """Compact words for tables, e.g. 'TP8/PP4/DP8 v5 mb4 rc-full x1 Z1 SP' (see `legend`)."""
    dims = "/".join(KNOBS[d].short(getattr(lay, d)) or "" for d in DEGREES if d in ("tp", "pp", "dp")
                    or getattr(lay, d) > 1)  # fmt: skip
    parts = [dims]
    for name in SEARCHED + SETTINGS:
        if name == "recompute_layers" and lay.recompute != Recompute.FULL:
            continue
        if name == "cp_comm" and lay.cp == 1:
            continue
        word = KNOBS[name].short(getattr(lay, name))
        if word:
            parts.append(word)
    return " ".join(parts)


def legend() -> str:
    """The key to `layout_short`'s words."""
    items = ["TPn/PPn/DPn/CPn/EPn: parallel degrees"] + [k.legend for k in KNOBS.values() if k.legend]
    return "; ".join(items)

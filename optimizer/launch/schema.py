"""The pinned framework schemas and the checks of launch configurations against them.

Pinned versions (the JSON files in ``schemas/``, see ``schemas/PROVENANCE.md``):

* Megatron-LM at commit d98e8a64ddf34856e74b24714e3bedb2f5a39553 (``megatron/training/arguments.py``
  with the ``ArgumentGroupFactory`` dataclass flags expanded): 840 argparse arguments;
* torchtitan 0.3.0 (``--module M --config F`` plus tyro ``--section.field`` flags; tree of the
  ``llama3``/``llama3_8b`` registry config) and, for reading old files, torchtitan v0.2.2's
  ``JobConfig`` (TOML tables / ``--job.config_file``);
* DeepSpeed 0.19.8 (``DeepSpeedConfig`` top-level keys, removed blocks, and the pydantic section
  models that reject unknown keys);
* Megatron-DeepSpeed at commit 6acc370a41440098031227e881bd9f1f23aa369e (``megatron/arguments.py``
  plus DeepSpeed's own ``--deepspeed --deepspeed_config``): the training script of the DeepSpeed
  launch, 315 argparse arguments, checked the same way as Megatron-LM's.

Every check returns a list of one-line sentences that name the flag or key and say what is wrong;
an empty list means the configuration passes.  Nothing here imports the frameworks.
"""

from __future__ import annotations

import ast
import difflib
import functools
import json
import math
import re
from collections.abc import Callable, Container, Iterable, Mapping, Sequence
from dataclasses import dataclass
from importlib.resources import files
from typing import Any, Literal

from pydantic import TypeAdapter, ValidationError

__all__ = [
    "DEEPSPEED_VERSION",
    "MEGATRON_COMMIT",
    "MEGATRON_DEEPSPEED_COMMIT",
    "TORCHTITAN_TOML_VERSION",
    "TORCHTITAN_VERSION",
    "MegatronArg",
    "ParsedFlag",
    "TitanField",
    "check_deepspeed",
    "check_megatron",
    "check_megatron_deepspeed",
    "check_torchtitan",
    "check_torchtitan_toml",
    "deepspeed_unknown_keys",
    "load_schema",
    "megatron_args",
    "parse_megatron_args",
    "parse_torchtitan_args",
    "torchtitan_fields",
    "torchtitan_toml_unknown_keys",
]

MEGATRON_COMMIT = "d98e8a64ddf34856e74b24714e3bedb2f5a39553"
TORCHTITAN_VERSION = "0.3.0"
TORCHTITAN_TOML_VERSION = "0.2.2"
DEEPSPEED_VERSION = "0.19.8"
# The last commit before 676a482c (2024-12-04, FPDT), which splits the fused QKV output into equal
# thirds in ParallelAttention.forward (megatron/model/transformer.py) and so breaks grouped-query
# attention; the later commits (to 4efb479d, 2025-07-16) touch tools, docs and non-CUDA LayerNorm only.
MEGATRON_DEEPSPEED_COMMIT = "6acc370a41440098031227e881bd9f1f23aa369e"

SchemaName = Literal["megatron", "megatron-deepspeed", "torchtitan", "torchtitan-0.2.2", "deepspeed"]
# The argparse schemas (Megatron-LM's and Megatron-DeepSpeed's), read by one parser
ArgSchema = Literal["megatron", "megatron-deepspeed"]
_SCHEMA_FILES: dict[str, str] = {
    "megatron": "megatron_lm_d98e8a64.json",
    "megatron-deepspeed": "megatron_deepspeed_6acc370a.json",
    "torchtitan": "torchtitan_0.3.0.json",
    "torchtitan-0.2.2": "torchtitan_0.2.2.json",
    "deepspeed": "deepspeed_0.19.8.json",
}
_MEGATRON = f"Megatron-LM {MEGATRON_COMMIT[:8]}"
Flag = tuple[str, str | None]  # a command-line flag and its value (None: a flag that takes none)
ARG_SCHEMA_NAMES: dict[ArgSchema, str] = {
    "megatron": _MEGATRON,
    "megatron-deepspeed": f"Megatron-DeepSpeed {MEGATRON_DEEPSPEED_COMMIT[:8]}",
}


@functools.cache
def load_schema(name: SchemaName) -> dict[str, Any]:
    """The vendored schema `name` (package data of ``paraplan.launch``), parsed once."""
    resource = files("paraplan.launch").joinpath("schemas", _SCHEMA_FILES[name])
    data: dict[str, Any] = json.loads(resource.read_text(encoding="utf-8"))
    return data


def _suggest(name: str, candidates: Iterable[str]) -> str:
    pool = list(candidates)
    close = difflib.get_close_matches(name, pool, n=1, cutoff=0.75)
    return f" (did you mean {close[0]}?)" if close else ""


# argparse: "-1" and "-.5" are values when the parser has no option that looks like a number
_NEGATIVE_NUMBER = re.compile(r"^-\d+$|^-\d*\.\d+$")


def _is_option(token: str) -> bool:
    """Whether argparse would read `token` as an option string rather than a value."""
    if not token.startswith("-") or token == "-":
        return False
    if _NEGATIVE_NUMBER.match(token):
        return False
    return " " not in token or (token.startswith("--") and "=" in token.split(" ", 1)[0])


def _clip(value: str, limit: int = 60) -> str:
    r = repr(value)
    return r if len(r) <= limit else r[: limit - 4] + "...'"


# ============================================================================================
# Megatron-LM


@dataclass(frozen=True)
class MegatronArg:
    """One argparse argument of Megatron-LM at the pinned commit."""

    flags: tuple[str, ...]
    dest: str
    type: str | None
    choices: tuple[Any, ...] | None
    action: str | None
    nargs: str | int | None
    default: Any
    conditional: bool

    @property
    def takes_value(self) -> bool:
        return self.action not in ("store_true", "store_false", "BooleanOptionalAction")

    def flag_value(self, flag: str) -> bool:
        """The value a value-less flag stores (store_false / --no-x store False)."""
        if self.action == "store_false":
            return False
        if self.action == "BooleanOptionalAction":
            return not flag.startswith("--no-")
        return True


@functools.cache
def megatron_args(schema: ArgSchema = "megatron") -> dict[str, MegatronArg]:
    """Every flag (all aliases) of Megatron-LM, or of Megatron-DeepSpeed's script -> its argument."""
    out: dict[str, MegatronArg] = {}
    for a in load_schema(schema)["args"]:
        choices = a.get("choices")
        arg = MegatronArg(
            flags=tuple(a["flags"]),
            dest=a["dest"],
            type=a.get("type"),
            choices=tuple(choices) if isinstance(choices, list) else None,
            action=a.get("action"),
            nargs=a.get("nargs"),
            default=a.get("default"),
            conditional=bool(a.get("conditional")),
        )
        for f in arg.flags:
            out[f] = arg
    return out


@dataclass(frozen=True)
class ParsedFlag:
    """One option of an argument list, as argparse would group it."""

    flag: str  # as written, without any "=value"
    spec: MegatronArg | None  # None: not a flag of the pinned schema
    values: tuple[str, ...]
    index: int  # position of the flag in the argument list
    value_indices: tuple[int, ...]
    inline: bool  # written --flag=value


def parse_megatron_args(args: Sequence[str], schema: ArgSchema = "megatron") -> tuple[list[ParsedFlag], list[str]]:
    """Group `args` into flags and values the way Megatron-LM's (or Megatron-DeepSpeed's) argparse
    parser would (``allow_abbrev=False``, no positional arguments).  Returns the flags and the
    structural problems (stray values, missing values, values given to flags that take none)."""
    return _parse_megatron(args, frozenset(), schema)


def _arity(spec: MegatronArg) -> str:
    if not spec.takes_value:
        return "no value"
    if spec.nargs is None:
        return "one value"
    if isinstance(spec.nargs, int):
        return f"{spec.nargs} values"
    return "values"


def _parse_megatron(
    args: Sequence[str], skip: Container[int], schema: ArgSchema = "megatron"
) -> tuple[list[ParsedFlag], list[str]]:
    table = megatron_args(schema)
    label = ARG_SCHEMA_NAMES[schema]
    parsed: list[ParsedFlag] = []
    problems: list[str] = []
    n = len(args)
    i = 0
    while i < n:
        tok = args[i]
        if tok == "--":
            rest = [a for k, a in enumerate(args[i + 1 :], i + 1) if k not in skip]
            if rest:
                problems.append(f"{' '.join(rest)!r} after '--': {label} takes no positional arguments")
            break
        if not _is_option(tok):
            stray: list[str] = []
            while i < n and not _is_option(args[i]) and args[i] != "--":
                if i not in skip:
                    stray.append(args[i])
                i += 1
            if stray:
                prev = parsed[-1] if parsed else None
                if prev is None:
                    ctx = "before any flag"
                elif prev.spec is None:
                    ctx = f"after {prev.flag}"
                else:
                    shown = " ".join([prev.flag, *prev.values])
                    ctx = f"after {_clip(shown, 80)[1:-1]}, which takes {_arity(prev.spec)}"
                what = "unexpected value" if len(stray) == 1 else "unexpected values"
                problems.append(
                    f"{_clip(' '.join(stray), 80)}: {what} {ctx}; {label} would reject it as an unrecognized argument"
                )
            continue
        name, eq, inline = tok.partition("=") if tok.startswith("--") else (tok, "", "")
        spec = table.get(name)
        start = i
        values: list[str] = []
        idx: list[int] = []
        if eq:
            values.append(inline)
            idx.append(i)
            i += 1
        else:
            i += 1
            if spec is None or spec.takes_value:
                limit = _nargs_limit(spec)
                while i < n and len(values) < limit and not _is_option(args[i]) and args[i] != "--":
                    values.append(args[i])
                    idx.append(i)
                    i += 1
        parsed.append(ParsedFlag(name, spec, tuple(values), start, tuple(idx), bool(eq)))
        if spec is None:
            continue
        if not spec.takes_value:
            if eq:
                problems.append(f"{name} takes no value ({spec.action}), but got {_clip(inline)}")
            continue
        need = spec.nargs
        if need is None and not values:
            problems.append(f"{name} expects one value and got none")
        elif need == "+" and not values:
            problems.append(f"{name} expects at least one value and got none")
        elif isinstance(need, int) and len(values) != need:
            problems.append(f"{name} expects {need} values and got {len(values)}")
    return parsed, problems


def _nargs_limit(spec: MegatronArg | None) -> int | float:
    if spec is None:
        return math.inf  # unknown flag: its arity is unknown, take the values that follow
    if spec.nargs is None:
        return 1
    if spec.nargs == "?":
        return 1
    if isinstance(spec.nargs, int):
        return spec.nargs
    return math.inf


# custom argparse `type=` functions of megatron/training/arguments.py
_PATTERN_CHARS = re.compile(r"[^,\d\[\]\(\)\+\*]")


def _eval_pattern(text: str) -> list[int] | None:
    """Megatron's _eval_pattern (a Python list expression of ints, + and *), without eval()."""
    if _PATTERN_CHARS.search(text):
        return None
    try:
        tree = ast.parse(text, mode="eval")
    except (SyntaxError, ValueError, RecursionError):
        return None

    def ev(node: ast.AST) -> Any:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.List | ast.Tuple):
            return [ev(e) for e in node.elts]
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Mult):
            left, right = ev(node.left), ev(node.right)
            if isinstance(node.op, ast.Add):
                return left + right
            count = right if isinstance(right, int) else left
            if isinstance(count, int) and count > 100_000:
                raise ValueError("pattern too long")
            return left * right
        raise ValueError("not a pattern")

    try:
        v = ev(tree)
    except (ValueError, TypeError, RecursionError):
        return None
    if isinstance(v, list) and all(isinstance(x, int) for x in v):
        return v
    return None


# What an int N means in Megatron-LM d98e8a64's per-layer pattern flags (type moe_freq_type, which
# also takes a list of 0/1 per layer), for layer i counted from 0: --moe-layer-freq makes layer i an
# MoE layer where i % N == 0 (megatron/core/models/gpt/gpt_layer_specs.py); --window-attn-skip-freq
# slides the window on layer number i + 1 unless it is a multiple of N (1 = sliding window; megatron/
# core/transformer/utils.py is_layer_window_attention).
_PATTERN_INT_RULES: dict[str, Callable[[int, int], int]] = {
    "moe_layer_freq": lambda i, n: int(i % n == 0),
    "window_attn_skip_freq": lambda i, n: int((i + 1) % n != 0),
}
LAYER_PATTERN_DESTS: frozenset[str] = frozenset(_PATTERN_INT_RULES)


def layer_pattern(dest: str, value: Any, num_layers: int) -> list[int] | None:
    """A per-layer pattern flag's value (`LAYER_PATTERN_DESTS`: an int or a list expression) as one 0/1
    per layer, as Megatron-LM expands it; None where it is not one, or not num_layers long."""
    text = str(value).strip()
    if "[" in text:
        flags = _eval_pattern(text)
    else:
        try:
            n = int(text)
        except ValueError:
            return None
        flags = [_PATTERN_INT_RULES[dest](i, n) for i in range(num_layers)] if n > 0 else None
    return flags if flags is not None and len(flags) == num_layers else None


def render_layer_pattern(flags: Sequence[int]) -> str:
    """A per-layer 0/1 pattern as the list expression Megatron-LM reads: the shortest period's runs of
    repeats, repeated, e.g. [1, 0] * 18 as '([1]*1+[0]*1)*18'."""
    n = len(flags)
    period = next(p for p in range(1, n + 1) if n % p == 0 and list(flags[:p]) * (n // p) == list(flags))
    runs: list[tuple[int, int]] = []
    for k in flags[:period]:
        if runs and runs[-1][0] == k:
            runs[-1] = (k, runs[-1][1] + 1)
        else:
            runs.append((k, 1))
    body = "(" + "+".join(f"[{k}]*{count}" for k, count in runs) + ")"
    return body if period == n else f"{body}*{n // period}"


def _freq_type_ok(value: str) -> bool:
    if "[" in value:
        return _eval_pattern(value) is not None
    try:
        int(value)
    except ValueError:
        return False
    return True


def _tuple_type_ok(value: str) -> bool:
    try:
        tuple(int(i) for i in value.strip("()").split(","))
    except ValueError:
        return False
    return True


def _megatron_value_problem(flag: str, spec: MegatronArg, value: str) -> str | None:
    t = spec.type
    converted: Any = value
    if t == "int":
        try:
            converted = int(value)
        except ValueError:
            return f"{flag}: {_clip(value)} is not an integer"
    elif t == "float":
        try:
            converted = float(value)
        except ValueError:
            return f"{flag}: {_clip(value)} is not a number"
    elif t == "bool" and value.strip().lower() in ("false", "0", "no", "off"):
        return f"{flag}: argparse type=bool turns any non-empty value into True, so {_clip(value)} means True"
    elif t in ("moe_freq_type", "no_rope_freq_type", "la_freq_type") and not _freq_type_ok(value):
        return f"{flag}: {_clip(value)} is neither an integer nor a list pattern like '([1]*3+[0]*1)*3'"
    elif t == "tuple_type" and not _tuple_type_ok(value):
        return f"{flag}: {_clip(value)} is not a comma-separated list of integers like '4,0'"
    if spec.choices is not None and converted not in spec.choices and str(converted) not in map(str, spec.choices):
        shown = ", ".join(str(c) for c in spec.choices[:12]) + (", ..." if len(spec.choices) > 12 else "")
        return f"{flag}: {_clip(value)} is not one of the choices ({shown})"
    return None


def _check_megatron(args: Sequence[str], skip_values: Container[int], schema: ArgSchema = "megatron") -> list[str]:
    parsed, problems = _parse_megatron(args, skip_values, schema)
    table = megatron_args(schema)
    for p in parsed:
        if p.spec is None:
            hint = _suggest(p.flag, table) or _suggest(p.flag.replace("_", "-"), table)
            problems.append(f"{p.flag}: not an argument of {ARG_SCHEMA_NAMES[schema]}{hint}")
            continue
        for value, at in zip(p.values, p.value_indices, strict=True):
            if at in skip_values:
                continue
            msg = _megatron_value_problem(p.flag, p.spec, value)
            if msg is not None:
                problems.append(msg)
    return problems


def check_megatron(args: list[str]) -> list[str]:
    """Problems with a Megatron-LM argument list (the arguments of pretrain_gpt.py, without the
    launcher): unknown flags, values that do not parse with the declared type, values outside
    `choices`, values given to store_true/store_false flags, wrong number of values for `nargs`,
    stray positional values.  Empty list = argparse at the pinned commit accepts it."""
    return _check_megatron(args, frozenset())


def check_megatron_deepspeed(args: list[str]) -> list[str]:
    """`check_megatron` against Megatron-DeepSpeed 6acc370a's parser (its own flags and DeepSpeed's
    --deepspeed --deepspeed_config): the training script of the DeepSpeed launch."""
    return _check_megatron(args, frozenset(), "megatron-deepspeed")


# ============================================================================================
# torchtitan


@dataclass(frozen=True)
class TitanField:
    """One CLI-settable field of the torchtitan config tree."""

    key: str  # "parallelism.tensor_parallel_degree" (top level: "dump_folder")
    type: str
    choices: tuple[Any, ...] | None
    default: Any
    bool_flag: bool
    cli: bool
    subcommand: str | None = None  # the activation_checkpoint variant it belongs to (0.3.0)

    @property
    def is_flag(self) -> bool:
        return self.bool_flag or self.type == "bool"


@dataclass(frozen=True)
class _TitanSchema:
    version: str
    fields: dict[str, TitanField]  # key -> field (subcommand fields: "activation_checkpoint.<name>.<field>")
    sections: frozenset[str]
    subcommands: dict[str, tuple[str, tuple[str, ...]]]  # key -> (default variant, variants)


def _norm(name: str) -> str:
    return name.replace("-", "_")


@functools.cache
def _titan_schema(version: str) -> _TitanSchema:
    if version == TORCHTITAN_VERSION:
        data = load_schema("torchtitan")
    elif version == TORCHTITAN_TOML_VERSION:
        data = load_schema("torchtitan-0.2.2")
    else:
        raise ValueError(
            f"torchtitan version {version!r} is not pinned (use {TORCHTITAN_VERSION} or {TORCHTITAN_TOML_VERSION})"
        )
    fields: dict[str, TitanField] = {}
    subcommands: dict[str, tuple[str, tuple[str, ...]]] = {}
    sections: set[str] = set()

    def make(key: str, f: dict[str, Any], sub: str | None = None) -> TitanField:
        choices = f.get("choices")
        return TitanField(
            key=key,
            type=str(f.get("type")),
            choices=tuple(choices) if isinstance(choices, list) else None,
            default=f.get("default"),
            bool_flag=bool(f.get("bool_flag")),
            cli=f.get("cli", True) is not False,
            subcommand=sub,
        )

    for section, entries in data["sections"].items():
        top = section == "(top level)"
        if not top:
            sections.add(section)
        for name, f in entries.items():
            key = name if top else f"{section}.{name}"
            if "subcommands" in f:
                variants = tuple(f["subcommands"])
                subcommands[key] = (str(f.get("default_subcommand") or variants[0]), variants)
                for variant, sub_fields in f["subcommands"].items():
                    for sub_name, sf in sub_fields.items():
                        fields[f"{key}.{_norm(variant)}.{sub_name}"] = make(f"{key}.{sub_name}", sf, variant)
                continue
            fields[key] = make(key, f)
    return _TitanSchema(version, fields, frozenset(sections), subcommands)


def torchtitan_fields(version: str = TORCHTITAN_VERSION) -> dict[str, TitanField]:
    """The CLI fields of a pinned torchtitan version, keyed by dotted name (underscores)."""
    s = _titan_schema(version)
    return {k: f for k, f in s.fields.items() if f.subcommand is None}


@dataclass(frozen=True)
class TitanArg:
    """One torchtitan CLI item: a ``--section.field`` flag, ``--module``/``--config``, or a
    subcommand token such as ``activation-checkpoint:full``."""

    flag: str  # as written
    key: str | None  # normalized dotted key (None: unknown flag)
    field: TitanField | None
    values: tuple[str, ...]
    value: str | int | float | bool | list[str] | None  # parsed value (bool for flags)
    index: int
    value_indices: tuple[int, ...]
    kind: Literal["field", "module", "config", "subcommand", "unknown", "positional"]


_GREEDY_TYPES = ("list[list[str]]", "tuple", "list[str | tuple")


def _titan_arity(f: TitanField) -> int | float:
    if f.is_flag:
        return 0
    if any(f.type.startswith(g) for g in _GREEDY_TYPES):
        return math.inf
    return 1


def _titan_convert(f: TitanField, raw: str) -> tuple[Any, str | None]:
    """Parse `raw` for field `f`: (value, problem)."""
    t = f.type
    optional = t.endswith("| None")
    base = t[: -len("| None")].strip() if optional else t
    if optional and raw == "None":
        return None, None
    if f.choices is not None:
        if raw in {str(c) for c in f.choices}:
            return raw, None
        return raw, f"{_clip(raw)} is not one of {', '.join(map(str, f.choices))}"
    if base == "int":
        try:
            return int(raw), None
        except ValueError:
            return raw, f"{_clip(raw)} is not an integer"
    if base in ("float", "float | int", "int | float"):
        try:
            v = float(raw)
        except ValueError:
            return raw, f"{_clip(raw)} is not a number"
        return (int(v) if base != "float" and v.is_integer() and "." not in raw and "e" not in raw.lower() else v), None
    if base == "bool":
        low = raw.lower()
        if low in ("true", "1", "yes"):
            return True, None
        if low in ("false", "0", "no"):
            return False, None
        return raw, f"{_clip(raw)} is not a boolean"
    if base.startswith("list[str]"):
        return raw.split(","), None
    return raw, None


def parse_torchtitan_args(args: Sequence[str], version: str = TORCHTITAN_VERSION) -> tuple[list[TitanArg], list[str]]:
    """Group torchtitan CLI `args` into flags (tyro rules: ``-`` or ``_`` in names, bools as
    ``--x``/``--x.no-y``, ``list[str]`` as one comma-separated value).  Returns the items and
    the problems found on the way (unknown flags, values that do not parse, stray values)."""
    return _parse_titan(args, version, frozenset())


def _parse_titan(args: Sequence[str], version: str, skip: Container[int]) -> tuple[list[TitanArg], list[str]]:
    schema = _titan_schema(version)
    items: list[TitanArg] = []
    problems: list[str] = []
    selected = {key: default for key, (default, _) in schema.subcommands.items()}
    n = len(args)
    i = 0
    label = f"torchtitan {version}"
    while i < n:
        tok = args[i]
        start = i
        if not _is_option(tok):
            sub = _titan_subcommand(tok, schema)
            if sub is not None:
                key, variant = sub
                if variant is None:
                    variants = schema.subcommands[key][1]
                    problems.append(f"{_clip(tok)}: not a variant of {key} (choose {', '.join(variants)})")
                    items.append(TitanArg(tok, key, None, (tok,), None, i, (i,), "unknown"))
                else:
                    selected[key] = variant
                    items.append(TitanArg(tok, key, None, (variant,), variant, i, (i,), "subcommand"))
                i += 1
                continue
            if i not in skip:
                problems.append(f"{_clip(tok)}: unexpected value; {label} would reject it as an unrecognized argument")
            items.append(TitanArg(tok, None, None, (tok,), None, i, (i,), "positional"))
            i += 1
            continue
        name, eq, inline = tok.partition("=")
        norm = _norm(name[2:]) if name.startswith("--") else _norm(name.lstrip("-"))
        if version == TORCHTITAN_VERSION and norm in ("module", "config"):
            vals, idx, i = _take(args, i + 1, 1, inline if eq else None, start)
            kind: Literal["module", "config"] = "module" if norm == "module" else "config"
            if not vals:
                problems.append(f"{name} expects one value and got none")
            items.append(TitanArg(tok, norm, None, tuple(vals), vals[0] if vals else None, start, tuple(idx), kind))
            continue
        f, negated, unselected = _titan_lookup(norm, schema, selected)
        if f is None:
            vals, idx, i = _take(args, i + 1, math.inf, inline if eq else None, start)
            if unselected is not None:  # a field of a subcommand variant that is not selected
                problems.append(unselected)
            else:
                pool = ["--" + k for k, fld in torchtitan_fields(version).items() if fld.cli]
                problems.append(f"{name}: not a flag of {label}{_suggest('--' + norm, pool)}")
            items.append(TitanArg(tok, None, None, tuple(vals), None, start, tuple(idx), "unknown"))
            continue
        if not f.cli:
            problems.append(f"{name}: {f.key} cannot be set from the command line in {label}")
        if f.is_flag:
            if eq:
                problems.append(f"{name} is a boolean flag and takes no value (got {_clip(inline)})")
            items.append(TitanArg(tok, f.key, f, (), not negated, start, (), "field"))
            i += 1
            continue
        vals, idx, i = _take(args, i + 1, _titan_arity(f), inline if eq else None, start)
        if not vals:
            problems.append(f"{name} expects a value and got none")
            items.append(TitanArg(tok, f.key, f, (), None, start, (), "field"))
            continue
        if len(vals) == 1:
            value, problem = _titan_convert(f, vals[0])
            if problem is not None and idx[0] not in skip:
                problems.append(f"{name}: {problem}")
        else:
            value = list(vals)
        items.append(TitanArg(tok, f.key, f, tuple(vals), value, start, tuple(idx), "field"))
    return items, problems


def _take(
    args: Sequence[str], i: int, limit: int | float, inline: str | None, at: int
) -> tuple[list[str], list[int], int]:
    if inline is not None:
        return [inline], [at], i
    vals: list[str] = []
    idx: list[int] = []
    while i < len(args) and len(vals) < limit and not _is_option(args[i]) and args[i] != "--":
        vals.append(args[i])
        idx.append(i)
        i += 1
    return vals, idx, i


def _titan_subcommand(tok: str, schema: _TitanSchema) -> tuple[str, str | None] | None:
    head, colon, variant = tok.partition(":")
    if not colon:
        return None
    key = _norm(head)
    if key not in schema.subcommands:
        return None
    for v in schema.subcommands[key][1]:
        if _norm(v) == _norm(variant):
            return key, v
    return key, None


def _titan_lookup(
    norm: str, schema: _TitanSchema, selected: Mapping[str, str]
) -> tuple[TitanField | None, bool, str | None]:
    """(field, negated, problem-for-unselected-variant)."""
    for candidate, negated in ((norm, False), (_negate(norm), True)):
        if candidate is None:
            continue
        f = schema.fields.get(candidate)
        if f is not None and (not negated or f.is_flag):
            return f, negated, None
        head, _, leaf = candidate.rpartition(".")
        if head in schema.subcommands:
            variant = selected[head]
            f = schema.fields.get(f"{head}.{_norm(variant)}.{leaf}")
            if f is not None and (not negated or f.is_flag):
                return f, negated, None
            owners = [v for v in schema.subcommands[head][1] if f"{head}.{_norm(v)}.{leaf}" in schema.fields]
            if owners and not negated:
                token = head.replace("_", "-")
                return (
                    None,
                    False,
                    f"--{candidate.replace('_', '-')}: a field of {token}:{'/'.join(owners)}, "
                    f"but {token}:{variant} is selected",
                )
    return None, False, None


def _negate(norm: str) -> str | None:
    head, dot, leaf = norm.rpartition(".")
    if leaf.startswith("no_"):
        return f"{head}{dot}{leaf[3:]}"
    return None


def check_torchtitan(flags: list[str], *, version: str = TORCHTITAN_VERSION, require_module: bool = False) -> list[str]:
    """Problems with torchtitan CLI flags (``--section.field value``; 0.3.0 by default, or
    ``version="0.2.2"``): unknown flags, values of the wrong type, values outside a Literal's
    choices, values given to boolean flags, stray values.  With `require_module`, a 0.3.0 line
    must also carry ``--module`` and ``--config`` (ConfigManager requires both)."""
    return _check_torchtitan(flags, version, require_module, frozenset())


def _check_torchtitan(
    flags: Sequence[str], version: str, require_module: bool, skip_values: Container[int]
) -> list[str]:
    items, problems = _parse_titan(flags, version, skip_values)
    if require_module and version == TORCHTITAN_VERSION:
        for kind in ("module", "config"):
            if not any(a.kind == kind for a in items):
                problems.append(f"--{kind} is missing: torchtitan {version} needs --module M --config F")
    return problems


def _toml_type_problem(f: TitanField, value: Any) -> str | None:
    t = f.type
    optional = t.endswith("| None")
    base = t[: -len("| None")].strip() if optional else t
    if f.choices is not None:
        return None if value in f.choices else f"{value!r} is not one of {', '.join(map(str, f.choices))}"
    if base == "bool":
        return None if isinstance(value, bool) else f"{value!r} is not a boolean (write true or false)"
    if base == "int":
        return None if isinstance(value, int) and not isinstance(value, bool) else f"{value!r} is not an integer"
    if base in ("float", "float | int", "int | float"):
        ok = isinstance(value, int | float) and not isinstance(value, bool)
        return None if ok else f"{value!r} is not a number"
    if base == "str":
        return None if isinstance(value, str) else f"{value!r} is not a string"
    if base == "list[str]":
        return (
            None
            if isinstance(value, list) and all(isinstance(x, str) for x in value)
            else (f"{value!r} is not a list of strings")
        )
    if base == "list[str] | str":
        ok = isinstance(value, str) or (isinstance(value, list) and all(isinstance(x, str) for x in value))
        return None if ok else f"{value!r} is not a string or a list of strings"
    return None


def check_torchtitan_toml(config: Mapping[str, Any]) -> list[str]:
    """Problems with a torchtitan v0.2.2 TOML job config (parsed with tomllib): unknown tables and
    keys (torchtitan 0.2.2 itself rejects these) and values of the wrong type or outside a
    Literal's choices (0.2.2 does not check these itself; they fail later or silently)."""
    return _check_titan_toml(config)[0]


def torchtitan_toml_unknown_keys(config: Mapping[str, Any]) -> list[str]:
    """Dotted keys/tables of a v0.2.2 TOML config that torchtitan 0.2.2 does not know."""
    return _check_titan_toml(config)[1]


def _check_titan_toml(config: Mapping[str, Any]) -> tuple[list[str], list[str]]:
    schema = _titan_schema(TORCHTITAN_TOML_VERSION)
    problems: list[str] = []
    unknown: list[str] = []
    fields = schema.fields
    prefixes = {s.rsplit(".", k)[0] for s in schema.sections for k in range(s.count(".") + 1)}
    label = f"torchtitan {TORCHTITAN_TOML_VERSION}"

    def walk(path: str, table: Mapping[str, Any]) -> None:
        for key, value in table.items():
            full = f"{path}.{key}" if path else key
            if isinstance(value, Mapping):
                if full in prefixes:
                    walk(full, value)
                elif full in fields:
                    problems.append(f"{full}: expects a {fields[full].type} value, not a table")
                else:
                    unknown.append(full)
                    pool = sorted(prefixes) if not path else [k for k in fields if k.startswith(path + ".")]
                    problems.append(f"[{full}]: not a table of {label}{_suggest(full, pool)}")
                continue
            f = fields.get(full)
            if f is None:
                unknown.append(full)
                where = f"table [{path}]" if path else "the top level"
                pool = [k for k in fields if k.startswith(path + ".")] if path else sorted(prefixes)
                problems.append(f"{full}: not a key of {where} in {label}{_suggest(full, pool)}")
                continue
            msg = _toml_type_problem(f, value)
            if msg is not None:
                problems.append(f"{full}: {msg} ({f.type})")

    walk("", config)
    return problems, unknown


# ============================================================================================
# DeepSpeed

_DS = f"DeepSpeed {DEEPSPEED_VERSION}"
# Read with get_scalar_param (no pydantic model); DeepSpeedConfig._batch_assertion requires > 0.
_DS_BATCH_KEYS = ("train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps")
_DS_INT_KEYS = frozenset({*_DS_BATCH_KEYS, "steps_per_print", "sequence_parallel_size", "data_parallel_size"})
_DS_PASSTHROUGH = frozenset({"optimizer", "scheduler"})  # their "params" go to the constructor


@functools.cache
def _adapter(kind: str) -> TypeAdapter[Any]:
    return TypeAdapter({"int": int, "float": float, "bool": bool, "str": str}[kind])


def _lax(kind: str, value: Any) -> tuple[bool, Any]:
    """Pydantic v2 lax validation, as DeepSpeed's models do it."""
    try:
        return True, _adapter(kind).validate_python(value)
    except ValidationError:
        return False, value


def _split_top(text: str) -> list[str]:
    out: list[str] = []
    depth = 0
    cur: list[str] = []
    for ch in text:
        if ch in "[(":
            depth += 1
        elif ch in "])":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(ch)
    if cur:
        out.append("".join(cur).strip())
    return out


def _ds_accepts(t: str, value: Any, nested: bool) -> tuple[bool, Any]:
    """Whether a value of pydantic type text `t` accepts `value` (unknown types: yes)."""
    t = t.strip()
    if nested:  # a sub-model: a dict (checked field by field), or null for Optional[...]
        return (isinstance(value, Mapping) or (value is None and t.startswith("Optional["))), value
    if t.startswith("Optional[") and t.endswith("]"):
        return (True, None) if value is None else _ds_accepts(t[9:-1], value, False)
    if t.startswith("Union[") and t.endswith("]"):
        for part in _split_top(t[6:-1]):
            ok, v = _ds_accepts(part, value, False)
            if ok:
                return True, v
        return False, value
    if t.startswith("Literal[") and t.endswith("]"):
        try:
            choices = ast.literal_eval("[" + t[8:-1] + "]")
        except (SyntaxError, ValueError):
            return True, value
        return value in choices, value
    if t in ("int", "float", "bool", "str"):
        return _lax(t, value)
    if t in ("list", "List", "tuple", "Tuple") or t.startswith(("List[", "list[", "Tuple[", "tuple[")):
        if not isinstance(value, list | tuple):
            return False, value
        if t in ("List[str]", "list[str]"):
            return all(isinstance(x, str) for x in value), value
        return True, value
    if t in ("Dict", "dict") or t.startswith(("Dict[", "dict[")):
        return isinstance(value, Mapping), value
    if t == "pathlib.Path":
        return isinstance(value, str), value
    return True, value


def _ds_type_name(t: str) -> str:
    return t.replace("Optional[", "").replace("]", "") if t.startswith("Optional[") else t


def _bound_ok(op: str, value: float, bound: float) -> bool:
    if op == "ge":
        return value >= bound
    if op == "gt":
        return value > bound
    if op == "le":
        return value <= bound
    return value < bound


def _check_ds_section(
    path: str, value: Any, strict: bool, problems: list[str], unknown: list[str], shown: str | None = None
) -> None:
    """Check `value` against section model `path` (field names); messages use `shown` (the keys
    as written, e.g. ``tensor_parallel.tp`` for the field path ``tensor_parallel.tensor_parallel``)."""
    sections = load_schema("deepspeed")["sections"]
    section = sections[path]
    written = shown if shown is not None else path
    model = section["model"]
    if value is None:
        return
    if not isinstance(value, Mapping):
        problems.append(f"'{written}': expects an object ({model}), not {type(value).__name__} {value!r}")
        return
    fields: dict[str, dict[str, Any]] = section["fields"]
    by_key: dict[str, tuple[str, dict[str, Any]]] = {}
    for name, f in fields.items():
        by_key[name] = (name, f)
        if "json_key" in f:
            by_key[f["json_key"]] = (name, f)
    for key, v in value.items():
        full = f"{written}.{key}"
        hit = by_key.get(key)
        if hit is None:
            unknown.append(full)
            problems.append(
                f"'{full}': not a field of {model} in {_DS} (unknown keys are rejected){_suggest(key, by_key)}"
            )
            continue
        name, f = hit
        if isinstance(v, str) and v == "auto":
            continue  # DeepSpeedConfigModel drops "auto" values before validation
        sub_path = f"{path}.{name}"
        nested = sub_path in sections
        ok, converted = _ds_accepts(f["type"], v, nested)
        if not ok:
            problems.append(f"'{full}': {v!r} is not a valid {_ds_type_name(f['type'])}")
            continue
        if nested and isinstance(v, Mapping):
            _check_ds_section(sub_path, v, strict, problems, unknown, full)
            continue
        if "choices" in f and converted is not None and not _in_choices(converted, f["choices"]):
            problems.append(f"'{full}': {v!r} is not one of {', '.join(map(str, f['choices']))}")
            continue
        if isinstance(converted, int | float) and not isinstance(converted, bool):
            for op, word in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
                if op in f and not _bound_ok(op, converted, f[op]):
                    problems.append(f"'{full}': {v!r} must be {word} {f[op]}")
        if strict and f.get("deprecated"):
            repl = f.get("new_param")
            problems.append(f"'{full}': deprecated in {_DS}" + (f"; use '{written}.{repl}'" if repl else ""))


def _in_choices(value: Any, choices: list[Any]) -> bool:
    if value in choices:
        return True
    if all(isinstance(c, int) for c in choices) and not isinstance(value, bool):
        ok, v = _lax("int", value)  # pydantic validates int enums from "3" or 3.0 too
        return ok and v in choices
    return False


def _check_deepspeed(config: Mapping[str, Any], dp_world_size: int | None, strict: bool) -> tuple[list[str], list[str]]:
    schema = load_schema("deepspeed")
    top: dict[str, dict[str, Any]] = schema["top_level"]
    problems: list[str] = []
    unknown: list[str] = []
    if not isinstance(config, Mapping):
        return [f"a DeepSpeed config must be a JSON object, not {type(config).__name__}"], []
    for key, value in config.items():
        e = top.get(key)
        if e is None:
            unknown.append(key)
            problems.append(
                f"'{key}': not a top-level key of {_DS} (DeepSpeed ignores unknown top-level keys silently)"
                f"{_suggest(key, top)}"
            )
            continue
        if "removed" in e:
            problems.append(f"'{key}': {e['removed']} in {_DS}; DeepSpeedConfig raises an error on this block")
            continue
        if "section_model" in e:
            _check_ds_section(key, value, strict, problems, unknown)
            continue
        if "lenient_sub_keys" in e:
            if not isinstance(value, Mapping):
                problems.append(f"'{key}': expects an object, not {type(value).__name__} {value!r}")
            elif strict and key not in _DS_PASSTHROUGH:
                for sub in value:
                    if sub not in e["lenient_sub_keys"]:
                        unknown.append(f"{key}.{sub}")
                        problems.append(
                            f"'{key}.{sub}': not read by {_DS} (ignored){_suggest(sub, e['lenient_sub_keys'])}"
                        )
            continue
        if value == "auto" and key in _DS_BATCH_KEYS:
            continue  # filled in by the HF Trainer / Accelerate integration
        kind = "int" if key in _DS_INT_KEYS else e.get("type")
        if kind in ("int", "float", "bool", "str"):
            ok, converted = _lax(kind, value)
            if not ok or (kind == "int" and isinstance(value, bool)):
                problems.append(f"'{key}': {value!r} is not a valid {kind}")
            elif key in _DS_BATCH_KEYS and converted <= 0:
                problems.append(f"'{key}': {value!r} must be > 0")
        elif kind == "dict" and not isinstance(value, Mapping):
            problems.append(f"'{key}': expects an object, not {type(value).__name__} {value!r}")
    problems.extend(_deepspeed_cross_checks(config, dp_world_size))
    return problems, unknown


def _enabled(config: Mapping[str, Any], key: str) -> bool:
    block = config.get(key)
    if not isinstance(block, Mapping):
        return False
    ok, v = _lax("bool", block.get("enabled", False))
    return bool(ok and v is True)


def _deepspeed_cross_checks(config: Mapping[str, Any], dp_world_size: int | None) -> list[str]:
    out: list[str] = []
    if _enabled(config, "fp16") and (_enabled(config, "bf16") or _enabled(config, "bfloat16")):
        out.append("'fp16' and 'bf16' are both enabled; DeepSpeed accepts only one")
    vals: dict[str, int] = {}
    for k in _DS_BATCH_KEYS:
        v = config.get(k)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            vals[k] = v
    tb = vals.get("train_batch_size")
    mb = vals.get("train_micro_batch_size_per_gpu")
    ga = vals.get("gradient_accumulation_steps")
    if tb is not None and mb is not None and ga is not None:
        if dp_world_size is not None and tb != mb * ga * dp_world_size:
            out.append(
                f"'train_batch_size' {tb} != train_micro_batch_size_per_gpu {mb} x gradient_accumulation_steps "
                f"{ga} x data-parallel size {dp_world_size}"
            )
        elif dp_world_size is None and tb % (mb * ga):
            out.append(
                f"'train_batch_size' {tb} is not a multiple of train_micro_batch_size_per_gpu {mb} x "
                f"gradient_accumulation_steps {ga}"
            )
    elif tb is not None and dp_world_size is None and (mb is None) != (ga is None):
        per = mb if mb is not None else ga
        other = "train_micro_batch_size_per_gpu" if mb is not None else "gradient_accumulation_steps"
        assert per is not None
        if tb % per:
            out.append(f"'train_batch_size' {tb} is not a multiple of {other} {per}")
    elif dp_world_size is not None and tb is not None:
        per = mb or ga
        if per is not None and tb % (per * dp_world_size):
            other = "train_micro_batch_size_per_gpu" if mb else "gradient_accumulation_steps"
            out.append(
                f"'train_batch_size' {tb} is not divisible by {other} {per} x data-parallel size {dp_world_size}"
            )
    return out


def check_deepspeed(config: dict[str, Any], *, dp_world_size: int | None = None, strict: bool = False) -> list[str]:
    """Problems with a DeepSpeed JSON config (a parsed dict): top-level keys that 0.19.8 does
    not read (it ignores them silently -- usually a typo), removed blocks (``elasticity``,
    ``compression_training``, ``amp``, ... raise in 0.19.8), unknown keys inside the strict
    sections (``zero_optimization``, ``bf16``, ``fp16``, ...), values of the wrong type, outside
    the enum choices or the ge/gt/le/lt bounds; ``fp16`` with ``bf16``; and the batch identity
    train_batch_size = micro x accumulation x data-parallel size when `dp_world_size` is given
    (without it: divisibility).  ``"auto"`` values pass (HF integration fills them in).
    `strict` also reports deprecated fields and sub-keys DeepSpeed would ignore."""
    if dp_world_size is not None and dp_world_size <= 0:
        raise ValueError(f"dp_world_size must be a positive number of ranks, not {dp_world_size}")
    return _check_deepspeed(config, dp_world_size, strict)[0]


def deepspeed_unknown_keys(config: Mapping[str, Any]) -> list[str]:
    """Dotted keys of `config` that the pinned DeepSpeed does not know."""
    return _check_deepspeed(config, None, False)[1]

"""Load a `Cluster` from a bundled preset name or from a user's TOML file.

Presets live in `hardware_specs/presets/<name>.toml` and are read through importlib.resources,
so they are found whether the package is installed editable, as a wheel, or from a zip.
Every failure is raised as `SpecError` with a one-line message that a CLI can print as
"Error: <message>" without a traceback.
"""

from __future__ import annotations

import tomllib
from functools import cache, lru_cache
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from paraplan.hardware_specs.errors import InputError
from paraplan.hardware_specs.files import is_regular_file, read_text_file
from paraplan.hardware_specs.schema import Cluster

_PRESET_SUFFIX = ".toml"

# pydantic error types whose limit sits in ctx under this key, shown as "must be <op> <limit>".
_BOUND_OPS = {
    "greater_than": ("gt", ">"),
    "greater_than_equal": ("ge", ">="),
    "less_than": ("lt", "<"),
    "less_than_equal": ("le", "<="),
}


class SpecError(InputError):
    """A hardware spec could not be found, read, parsed or validated (one-line message)."""


def _preset_dir() -> Traversable:
    return resources.files("paraplan.hardware_specs").joinpath("presets")


@lru_cache(maxsize=1)
def _preset_files() -> dict[str, Traversable]:
    """Preset name (lower case, file stem) -> its resource. Scanned once per process."""
    found: dict[str, Traversable] = {}
    for entry in _preset_dir().iterdir():
        if entry.is_file() and entry.name.endswith(_PRESET_SUFFIX):
            found[entry.name[: -len(_PRESET_SUFFIX)].lower()] = entry
    return found


def preset_names() -> list[str]:
    """Names of the bundled presets, sorted."""
    return sorted(_preset_files())


def load_cluster(name_or_path: str) -> Cluster:
    """A preset by name (case-insensitive) or a cluster described by a `.toml` file."""
    key = name_or_path.strip().lower()
    if key in _preset_files() and not _looks_like_path(name_or_path):
        return _load_preset(key)
    if _looks_like_path(name_or_path) or is_regular_file(name_or_path):
        return _load_file(Path(name_or_path))
    name, colon, _ = name_or_path.rpartition(":")
    if colon and name.strip().lower() in _preset_files():  # 'a100-80g:0' where one hardware is read
        raise SpecError(f"hardware {name_or_path!r}: a count (NAME:COUNT) is for optimize and compare; "
                        "here the GPU count comes from --gpus")  # fmt: skip
    raise SpecError(
        f"unknown hardware {name_or_path!r}: expected one of {', '.join(preset_names())} or a path to a .toml file"
    )


def _looks_like_path(text: str) -> bool:
    # A preset name never contains a separator or the suffix, so either means "a file".
    return "/" in text or "\\" in text or text.lower().endswith(_PRESET_SUFFIX)


@cache
def _load_preset(name: str) -> Cluster:
    # Presets are immutable package data and Cluster is frozen: one instance per name is safe.
    resource = _preset_files()[name]
    label = f"hardware preset {name}"
    return _parse(resource.read_bytes().decode("utf-8"), label)


def _load_file(path: Path) -> Cluster:
    try:
        text = read_text_file(path, "hardware file")
    except InputError as exc:
        raise SpecError(str(exc)) from None
    return _parse(text, f"hardware file {path}")


def _parse(text: str, label: str) -> Cluster:
    try:
        table = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise SpecError(f"{label}: invalid TOML: {_one_line(str(exc))}") from exc
    except (ValueError, RecursionError) as exc:  # e.g. an integer beyond Python's digit limit
        raise SpecError(f"{label}: cannot be read: {_one_line(str(exc))[:120]}") from exc
    try:
        return Cluster.model_validate(table)
    except ValidationError as exc:
        raise SpecError(f"{label}: {_describe(exc)}") from exc


def _describe(exc: ValidationError) -> str:
    """The first validation error as "field.path = value (reason)", plus a count of the rest."""
    errors = exc.errors(include_url=False)
    text = _describe_error(errors[0])
    if len(errors) > 1:
        text += f" (and {len(errors) - 1} more error{'s' if len(errors) > 2 else ''})"
    return text


def _describe_error(err: ErrorDetails) -> str:
    path = ".".join(str(part) for part in err["loc"])
    kind = err["type"]
    if kind == "missing":
        return f"{path} is missing"
    reason = _reason(err)
    if not path:  # a model-level check (e.g. the memory reserve) has no single field
        return reason
    return f"{path} = {_show(err['input'])} ({reason})"


def _reason(err: ErrorDetails) -> str:
    kind = err["type"]
    ctx: dict[str, Any] = dict(err.get("ctx") or {})
    if kind in _BOUND_OPS:
        key, op = _BOUND_OPS[kind]
        return f"must be {op} {_show(ctx.get(key))}"
    if kind == "extra_forbidden":
        return "unknown field"
    msg = _one_line(err["msg"])
    # pydantic phrases most messages as "Input should be ..."; a spec author reads "must be".
    msg = msg.replace("Input should be", "must be").replace("Value error, ", "")
    return msg


def _show(value: object) -> str:
    """A short rendering of a bad value: numbers as written, tables abbreviated."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        text = f"{value:g}"
        # an integral float reads as written in TOML (8.0), so "must be a valid integer" makes sense
        return f"{text}.0" if value.is_integer() and "e" not in text else text
    if isinstance(value, dict):
        return "{...}"
    if isinstance(value, list):
        return "[...]"
    return _one_line(repr(value) if isinstance(value, str) else str(value))


def _one_line(text: str) -> str:
    return " ".join(text.split())

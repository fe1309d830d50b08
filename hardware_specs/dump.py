"""Write a `Cluster` back as a preset TOML that `load_cluster` reads (the calibrate output).

A minimal TOML writer for the schema's value types (str, bool, int, float, tuples of str and
nested tables); the standard library reads TOML but does not write it.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from paraplan.hardware_specs.schema import Cluster


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        if not math.isfinite(v):
            raise ValueError(f"cannot write non-finite number {v} to TOML")
        return repr(v)
    if isinstance(v, str):
        # A JSON string is a TOML basic string, but JSON's ASCII mode writes characters beyond the
        # BMP as surrogate pairs, which TOML refuses; without it, DEL stays raw, which TOML refuses.
        return json.dumps(_utf8(v), ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(v, (list, tuple)):
        return "[\n" + "".join(f"    {_value(x)},\n" for x in v) + "]"
    raise TypeError(f"cannot write {type(v).__name__} to TOML")


def _table(out: list[str], prefix: str, data: dict[str, Any]) -> None:
    scalars = {k: v for k, v in data.items() if not isinstance(v, dict) and v is not None}
    # a table with nothing set (a calibration that fitted no stack) is left out
    tables = {k: v for k, v in data.items() if isinstance(v, dict) and any(x is not None for x in v.values())}
    if prefix:
        out.append(f"\n[{prefix}]")
    out.extend(f"{k} = {_value(v)}" for k, v in scalars.items())
    for key, sub in tables.items():
        _table(out, f"{prefix}.{key}" if prefix else key, sub)


def _utf8(text: str) -> str:
    # A name from the command line may carry undecodable bytes as lone surrogates (Python's
    # surrogateescape); a TOML file is UTF-8, which cannot hold them.
    return text.encode("utf-8", "replace").decode("utf-8")


def _comment(line: str) -> str:
    # A comment may hold no control character but tab; the header quotes the user's command line.
    return "# " + re.sub(r"[\x00-\x08\x0a-\x1f\x7f]", "?", _utf8(line))


def cluster_to_toml(cluster: Cluster, header: str = "") -> str:
    out = [_comment(line) for line in header.splitlines()]
    _table(out, "", cluster.model_dump(mode="python"))
    return "\n".join(out) + "\n"

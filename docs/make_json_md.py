"""Write docs/json.md, the reference of every command's --json output, from the result models
(their fields, types and descriptions live in optimizer/results.py and cost_models/layout.py:
this file only renders them).

    python docs/make_json_md.py          # rewrite docs/json.md
    python docs/make_json_md.py --check  # exit 1 if docs/json.md is out of date (a test runs this)
"""

from __future__ import annotations

import argparse
import sys
import types
import typing
from pathlib import Path

from pydantic import BaseModel

from paraplan.cost_models.layout import KNOBS, Layout
from paraplan.results import (
    CalibrateResult,
    CompareResult,
    EvaluatedLayout,
    OptimizeResult,
    ValidateResult,
)

OUT = Path(__file__).resolve().parent / "json.md"
INTRO = """# The JSON output

Every command prints one JSON object on stdout with `--json` (nothing else on stdout), and the
Python API returns the same objects as pydantic models (`paraplan.optimize(...)` etc.).
`paraplan schema validate|optimize|compare|calibrate` prints the JSON Schema of each; this page
explains the fields. It is generated from the models by `python docs/make_json_md.py`.

Units live in the names and are SI: sizes in bytes, times in seconds, money in US dollars.
Ratios are in 0..1 and say what they are a ratio of (`mfu`: model FLOPs over the peak of the
precision the GEMMs run in, `peak_flops`); `mfu_palm` counts attention over the whole sequence
(PaLM's convention) and can pass 1 at very long sequences. A figure paraplan does not have
(a price, a count that was not searched) is `null`, never a placeholder.

Exit codes: 0 done (feasible), 1 infeasible (the object still prints, with the violations),
2 bad input (one `Error:` line on stderr, nothing on stdout), 3 output could not be written or
an internal error (one `Error:` line), 141 the reader closed the pipe.
"""


def _type(annotation: object) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin in (typing.Union, types.UnionType):
        return " or ".join(_type(a) for a in args)
    if origin in (list, tuple):
        return f"{origin.__name__}[{', '.join(_type(a) for a in args if a is not Ellipsis)}]"
    if origin is dict:
        return "object"
    if origin is typing.Literal:
        return " | ".join(repr(a) for a in args)
    if annotation is type(None):
        return "null"
    if isinstance(annotation, type):
        return {"float": "number", "int": "integer", "str": "string", "bool": "boolean"}.get(
            annotation.__name__, annotation.__name__
        )
    return str(annotation)


def _table(model: type[BaseModel], seen: list[type[BaseModel]]) -> list[str]:
    lines = [f"### {model.__name__}", "", (model.__doc__ or "").strip().replace("\n", " "), ""]
    lines += ["| field | type | meaning |", "| --- | --- | --- |"]
    for name, field in model.model_fields.items():
        lines.append(f"| `{name}` | {_type(field.annotation)} | {field.description or ''} |")
        for inner in _models(field.annotation):
            if inner not in seen and inner is not Layout:
                seen.append(inner)
    return [*lines, ""]


def _models(annotation: object) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    return [m for a in typing.get_args(annotation) for m in _models(a)]


def _layout() -> list[str]:
    lines = ["### Layout", "", "The layout object (`layout`, and `equivalent` variants): every knob.", ""]
    lines += ["| field | type | role | meaning |", "| --- | --- | --- | --- |"]
    for name, field in Layout.model_fields.items():
        knob = KNOBS[name]
        lines.append(f"| `{name}` | {_type(field.annotation)} | {knob.role.value} | {knob.help} |")
    return [*lines, ""]


def render() -> str:
    out = [INTRO]
    for title, root in (("validate and memory", ValidateResult), ("optimize", OptimizeResult),
                        ("compare", CompareResult), ("calibrate", CalibrateResult)):  # fmt: skip
        out += [f"## {title}", ""]
        seen = [root]
        i = 0
        while i < len(seen):
            if seen[i] is EvaluatedLayout and root is not ValidateResult and title != "optimize":
                i += 1
                continue
            out += _table(seen[i], seen)
            i += 1
    out += ["## The layout", "", *_layout()]
    return "\n".join(out).rstrip() + "\n"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    text = render()
    if args.check:
        if OUT.read_text() != text:
            print("docs/json.md is out of date: run python docs/make_json_md.py", file=sys.stderr)
            return 1
        return 0
    OUT.write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

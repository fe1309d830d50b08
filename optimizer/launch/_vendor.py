"""Rebuild the compact pinned schemas in ``schemas/`` from the full extractor outputs.

The full JSON files are made by the extractor scripts named in ``schemas/PROVENANCE.md``
(``extract_megatron_args.py``, ``extract_torchtitan_job_config.py``,
``dump_torchtitan_config.py``, ``dump_deepspeed_config.py``).  This module only strips fields
the checks in :mod:`paraplan.launch.schema` do not read, resolves the few Megatron choices
that the extractor left as source text, and writes compact JSON.  Run it by hand::

    python -m paraplan.launch._vendor --megatron megatron_lm_arguments.json \\
        --megatron-deepspeed megatron_deepspeed_arguments.json \\
        --torchtitan torchtitan_0.3.0_config.json --torchtitan-toml torchtitan_v0.2.2_job_config.json \\
        --deepspeed deepspeed_0.19.8_config.json --out optimizer/launch/schemas
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

# Megatron-LM d98e8a64, megatron/core/transformer/enums.py: members of the enums that the
# extractor could not expand (it records the non-literal `choices=` source as {"expr": ...}).
_CUDA_GRAPH_MODULE = ["attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba"]
_MEGATRON_CHOICE_FIXES: dict[str, list[str]] = {
    # choices=[scope.name for scope in InferenceCudaGraphScope]
    "--inference-cuda-graph-scope": ["none", "layer", "block"],
    # type=_parse_cuda_graph_modules_arg: "full"/"full_iteration"/"full_iteration_inference" or
    # a CudaGraphModule member name (megatron/training/arguments.py)
    "--cuda-graph-modules": ["full", "full_iteration", "full_iteration_inference", *_CUDA_GRAPH_MODULE],
    "--cuda-graph-scope": ["full", "full_iteration", "full_iteration_inference", *_CUDA_GRAPH_MODULE],
}
_MEGATRON_KEEP = ("flags", "dest", "type", "choices", "action", "nargs", "default", "conditional")

# Megatron-DeepSpeed's parser also takes DeepSpeed's own flags: megatron/arguments.py calls
# `deepspeed.add_config_arguments(parser)`, which adds these four (deepspeed/__init__.py
# `_add_core_arguments` at deepspeedai/DeepSpeed edaa7221, version 0.19.6; the same four since 0.3).
_DEEPSPEED_PARSER_ARGS: list[dict[str, Any]] = [
    {"flags": ["--deepspeed"], "dest": "deepspeed", "action": "store_true", "default": False},
    {"flags": ["--deepspeed_config"], "dest": "deepspeed_config", "type": "str", "default": None},
    {"flags": ["--deepscale"], "dest": "deepscale", "action": "store_true", "default": False},
    {"flags": ["--deepscale_config"], "dest": "deepscale_config", "type": "str", "default": None},
]

# Keys DeepSpeed reads outside DeepSpeedConfig (deepspeed.initialize / engine, with
# torch.distributed up), so the key-recording dump cannot see them (reference README).
_DEEPSPEED_EXTRA_TOP_LEVEL: dict[str, dict[str, Any]] = {
    "sequence_parallel_size": {"type": "int", "note": "read in deepspeed.initialize()"},
    "data_parallel_size": {"type": "int", "note": "read in deepspeed.initialize()"},
}
_DEEPSPEED_FIELD_KEEP = ("json_key", "type", "choices", "ge", "gt", "le", "lt", "deprecated", "new_param")


def compact_megatron(full: list[dict[str, Any]], extra: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    header, *args = full
    out = []
    for a in [*args, *(extra or [])]:
        e = {k: a[k] for k in _MEGATRON_KEEP if k in a}
        fix = _MEGATRON_CHOICE_FIXES.get(a["flags"][0])
        if fix is not None:
            e["choices"] = fix
        out.append(e)
    return {
        "header": {
            "repo": header["repo"],
            "commit": header["commit"],
            "path": header["path"],
            "count": len(out),
        },
        "args": out,
    }


def compact_torchtitan(full: dict[str, Any]) -> dict[str, Any]:
    def field(f: dict[str, Any]) -> dict[str, Any]:
        if "subcommands" in f:
            return {
                "subcommand_token": f["subcommand_token"],
                "default_subcommand": f.get("config_value"),
                "subcommands": {
                    name: {k: field(v) for k, v in fields.items()} for name, fields in f["subcommands"].items()
                },
            }
        return {k: f[k] for k in ("type", "choices", "default", "bool_flag", "cli") if k in f}

    h = full["header"]
    header = {
        k: h[k] for k in ("package", "version", "commit", "repo", "ref", "registry_config", "cli", "usage") if k in h
    }
    return {
        "header": header,
        "sections": {s: {k: field(v) for k, v in fs.items()} for s, fs in full["sections"].items()},
    }


def compact_deepspeed(full: dict[str, Any]) -> dict[str, Any]:
    top: dict[str, dict[str, Any]] = {}
    for key, e in full["top_level"].items():
        c: dict[str, Any] = {}
        if "removed" in e:
            c["removed"] = e["removed"]
        if "type" in e:
            c["type"] = e["type"]
        if "section_model" in e:
            c["section_model"] = e["section_model"]
        sub = e.get("sub_keys (unknown ones ignored)")
        if sub:
            c["lenient_sub_keys"] = sorted(sub)
        top[key] = c
    for key, e in _DEEPSPEED_EXTRA_TOP_LEVEL.items():
        top.setdefault(key, dict(e))
    sections = {
        path: {
            "model": s["model"],
            "fields": {name: {k: f[k] for k in _DEEPSPEED_FIELD_KEEP if k in f} for name, f in s["fields"].items()},
        }
        for path, s in full["sections"].items()
    }
    h = full["header"]
    header = {k: h[k] for k in ("package", "version", "source", "unknown_top_level_key", "note")}
    return {"header": header, "top_level": top, "sections": sections}


def _dump(obj: Any, path: Path) -> None:
    path.write_text(json.dumps(obj, separators=(",", ":"), sort_keys=False) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--megatron", type=Path, required=True)
    ap.add_argument("--megatron-deepspeed", type=Path, required=True, help="Megatron-DeepSpeed 6acc370a extract")
    ap.add_argument("--torchtitan", type=Path, required=True, help="torchtitan 0.3.0 dump")
    ap.add_argument("--torchtitan-toml", type=Path, required=True, help="torchtitan v0.2.2 job_config extract")
    ap.add_argument("--deepspeed", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args(argv)

    def load(p: Path) -> Any:
        return json.loads(p.read_text(encoding="utf-8"))

    a.out.mkdir(parents=True, exist_ok=True)
    _dump(compact_megatron(load(a.megatron)), a.out / "megatron_lm_d98e8a64.json")
    mds = compact_megatron(load(a.megatron_deepspeed), _DEEPSPEED_PARSER_ARGS)
    mds["header"]["path"] = "megatron/arguments.py"  # the extractor's header names Megatron-LM's path
    _dump(mds, a.out / "megatron_deepspeed_6acc370a.json")
    _dump(compact_torchtitan(load(a.torchtitan)), a.out / "torchtitan_0.3.0.json")
    _dump(compact_torchtitan(load(a.torchtitan_toml)), a.out / "torchtitan_0.2.2.json")
    _dump(compact_deepspeed(load(a.deepspeed)), a.out / "deepspeed_0.19.8.json")


if __name__ == "__main__":
    main()

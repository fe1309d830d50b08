"""Shared test helpers: hypothesis profiles, one-layout arrays, a hand-made GPT spec, the presets, and
the one in-process runner of the command line (`invoke`) with the contract's checks."""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import subprocess
import sys
from importlib import resources
from pathlib import Path
from typing import Any, NamedTuple, Protocol

import pytest
from hypothesis import settings

from paraplan.cost_models.candidates import Layouts
from paraplan.cost_models.layout import Layout
from paraplan.cost_models.models import ModelSpec, load_model, model_preset_names
from paraplan.hardware_specs.loader import load_cluster, preset_names
from paraplan.hardware_specs.schema import Cluster, Efficiency, Host, Link

# Hypothesis profiles: "ci" (set by .ci/run) derandomizes so that a CI run is reproducible.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("dev", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))


def one(**knobs: Any) -> Layouts:
    """A `Layouts` matrix holding the single layout `Layout(**knobs)`."""
    return Layouts.of([Layout(**knobs)])


def gpt_spec(
    h: int = 1024, layers: int = 4, heads: int = 16, vocab: int = 50_000, seq: int = 2048, **extra: Any
) -> ModelSpec:
    """A GPT as in Megatron-LM and Korthikanti et al. 2022: full multi-head attention, a plain
    4h GELU MLP, LayerNorm, biases, learned positions, tied embeddings, dropout."""
    fields: dict[str, Any] = {
        "name": "gpt-test",
        "hidden_size": h,
        "num_layers": layers,
        "num_heads": heads,
        "num_kv_heads": heads,
        "head_dim": h // heads,
        "ffn_hidden_size": 4 * h,
        "vocab_size": vocab,
        "max_seq_len": seq,
        "mlp": "plain",
        "tied_embeddings": True,
        "learned_positions": True,
        "layernorm": True,
        "linear_bias": True,
        "dropout": True,
    }
    fields.update(extra)
    return ModelSpec(**fields)


def round_cluster(base: Cluster) -> Cluster:
    """`base` with round figures, so that hand arithmetic stays short and does not move when a
    preset is recalibrated: a GPU of 200e12 FLOP/s in BF16 and FP16, 400e12 in FP8, 2e12 B/s of
    HBM; NVLink 100e9 B/s at 2 us, PCIe 10e9 B/s at 4 us, the network 10e9 B/s at 10 us (all at
    efficiency 1); GEMMs at gemm_max 0.5 with gemm_half_dim 0 and gemm_tile 1 (no shape penalty,
    no tile rounding), attention at
    0.5, memory-bound kernels at the full HBM rate, no launch cost, dp_overlap 0.5; a host of
    1e12 bytes whose CPUs run Adam at 1e9 parameters/s."""
    gpu = base.gpu.model_copy(
        update={"peak_bf16_flops": 200e12, "peak_fp16_flops": 200e12, "peak_fp8_flops": 400e12,
                "mem_bw_bytes_per_s": 2e12}
    )  # fmt: skip
    intra = base.intra_node.model_copy(
        update={
            "link": Link(name="nvlink", bw_bytes_per_s=100e9, latency_s=2e-6, efficiency=1.0),
            "pcie": Link(name="pcie", bw_bytes_per_s=10e9, latency_s=4e-6, efficiency=1.0),
        }
    )
    return base.model_copy(
        update={
            "name": f"{base.name}-round",
            "gpu": gpu,
            "host": Host(memory_bytes=1e12, cpu_adam_params_per_s=1e9),
            "intra_node": intra,
            "inter_node": Link(name="ib", bw_bytes_per_s=10e9, latency_s=10e-6, efficiency=1.0),
            "efficiency": Efficiency(
                gemm_max=0.5,
                gemm_half_dim=0,
                gemm_tile=1,
                attention=0.5,
                memory_bound=1.0,
                kernel_overhead_s=0,
                dp_overlap=0.5,
            ),
        }
    )


@pytest.fixture(scope="session")
def presets() -> dict[str, Cluster]:
    """Every bundled hardware preset, by name (from the registry, loaded once)."""
    return {name: load_cluster(name) for name in preset_names()}


@pytest.fixture(scope="session")
def models() -> dict[str, ModelSpec]:
    """Every bundled model preset, by name (from the registry, loaded once)."""
    return {name: load_model(name) for name in model_preset_names()}


@pytest.fixture(scope="session")
def a100(presets: dict[str, Cluster]) -> Cluster:
    return presets["a100-80g"]


@pytest.fixture(scope="session")
def dgx(presets: dict[str, Cluster]) -> Cluster:
    """A DGX-like node (8 GPUs on NVSwitch, one NIC per GPU) with round figures: `round_cluster`."""
    return round_cluster(presets["a100-80g"])


# --- the command line, in-process: the one runner every CLI test uses -----------------------------

REPO = Path(__file__).resolve().parent.parent

# The evaluated-layout object of the interface contract (its "JSON output" and "Added in round 2" keys).
LAYOUT_KEYS = frozenset({
    "tp", "pp", "dp", "cp", "ep", "micro_batch", "global_batch", "seq_len", "virtual_stages", "recompute", "zero",
    "sequence_parallel", "precision", "framework",
})  # fmt: skip
EVALUATED_KEYS = frozenset({
    "model", "hardware", "gpus", "layout", "feasible", "violations", "memory_bytes", "step_time_s", "time_s", "mfu",
    "hfu", "tflops_per_gpu", "tokens_per_s", "params", "step_time_range_s", "accuracy_basis", "mfu_palm",
    "memory_margin_bytes",
})  # fmt: skip
MEMORY_TERMS = ("params", "grads", "optimizer", "activations", "other")
MEMORY_KEYS = frozenset({*MEMORY_TERMS, "total", "capacity"})
TIME_KEYS = frozenset({"compute", "recompute", "tp_comm", "cp_comm", "ep_comm", "pp_comm", "dp_comm", "bubble"})


class Invocation(NamedTuple):
    """What `paraplan ARGS` did: its exit code (None when an exception escaped `main`), stdout,
    stderr, and the exception that escaped (None when it exited as a CLI should)."""

    code: int | str | None
    out: str
    err: str
    exception: BaseException | None

    def json(self) -> Any:
        return json.loads(self.out)


class Invoke(Protocol):
    def __call__(self, *args: str) -> Invocation: ...


def run_cli(*args: str) -> Invocation:
    """`paraplan.cli.main(list(args))` in this process, stdout and stderr captured."""
    from paraplan.cli import main

    out, err = io.StringIO(), io.StringIO()
    code: int | str | None = 0
    exception: BaseException | None = None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(args))
        except SystemExit as exc:
            code = 0 if exc.code is None else exc.code
        except Exception as exc:  # what a user would see as a traceback
            code, exception = None, exc
    return Invocation(code, out.getvalue(), err.getvalue(), exception)


@pytest.fixture(scope="session")
def invoke() -> Invoke:
    """Run the CLI in-process: `invoke("validate", "--model", ...)` -> Invocation."""
    return run_cli


def run_module(
    module: str, *args: str, code: str | None = None, flags: tuple[str, ...] = ()
) -> subprocess.CompletedProcess[str]:
    """`python FLAGS -m MODULE ARGS` (or `python FLAGS -c CODE`) in a fresh process from the
    repository root."""
    target = ["-c", code] if code is not None else ["-m", module, *args]
    return subprocess.run([sys.executable, *flags, *target], capture_output=True, text=True, cwd=REPO, timeout=300,
                          check=False)  # fmt: skip


def preset_toml(name: str) -> str:
    """The text of a bundled hardware preset's TOML file."""
    return resources.files("paraplan.hardware_specs").joinpath("presets", f"{name}.toml").read_text()


def one_error_line(result: Invocation, *names: str) -> str:
    """Bad input: exit 2, nothing on stdout, exactly one stderr line starting `Error:` that names
    each of `names`, no traceback. Returns the line."""
    assert result.exception is None, f"exception escaped main(): {result.exception!r}"
    assert result.code == 2, (result.code, result.err)
    assert result.out == "", result.out
    assert "Traceback" not in result.err
    lines = result.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error:"), result.err
    for name in names:
        assert name in lines[0], f"{name!r} not named in {lines[0]!r}"
    return lines[0]


def single_json_object(text: str) -> dict[str, Any]:
    """`text` is exactly one JSON object (surrounding whitespace aside)."""
    stripped = text.strip()
    obj, end = json.JSONDecoder().raw_decode(stripped)
    assert end == len(stripped), "something besides the JSON object on stdout"
    assert isinstance(obj, dict)
    return obj


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_evaluated_layout(obj: dict[str, Any]) -> None:
    """The contract's evaluated-layout object: every key, and values that agree with each other."""
    assert obj.keys() >= EVALUATED_KEYS, EVALUATED_KEYS - obj.keys()
    layout = obj["layout"]
    assert layout.keys() >= LAYOUT_KEYS, LAYOUT_KEYS - layout.keys()
    for key in ("tp", "pp", "dp", "cp", "ep", "micro_batch", "global_batch", "seq_len", "virtual_stages"):
        assert isinstance(layout[key], int) and not isinstance(layout[key], bool) and layout[key] >= 1, key
    assert layout["zero"] in (0, 1, 2, 3)
    assert layout["recompute"] in ("none", "selective", "full")
    assert layout["precision"] in ("bf16", "fp16", "fp8")
    assert layout["framework"] in ("megatron", "deepspeed", "torchtitan")
    assert isinstance(layout["sequence_parallel"], bool)
    assert layout["tp"] * layout["pp"] * layout["dp"] * layout["cp"] == obj["gpus"]

    assert isinstance(obj["feasible"], bool)
    assert all(isinstance(v, str) and v for v in obj["violations"])
    assert (obj["violations"] == []) == obj["feasible"]

    memory = obj["memory_bytes"]
    assert memory.keys() >= MEMORY_KEYS, MEMORY_KEYS - memory.keys()
    assert all(_finite(memory[k]) and memory[k] >= 0 for k in MEMORY_KEYS)
    assert sum(memory[k] for k in MEMORY_TERMS) == pytest.approx(memory["total"], rel=1e-9)
    assert memory["capacity"] > 0
    assert _finite(obj["memory_margin_bytes"])
    if obj["feasible"]:
        assert memory["total"] <= memory["capacity"]
        assert obj["memory_margin_bytes"] >= 0

    step = obj["step_time_s"]
    assert _finite(step) and step > 0
    times = obj["time_s"]
    assert times.keys() >= TIME_KEYS, TIME_KEYS - times.keys()
    assert all(_finite(v) and v >= 0 for v in times.values())
    assert sum(times.values()) == pytest.approx(step, rel=1e-9)  # exposed terms sum to the step
    lo, hi = obj["step_time_range_s"]
    assert 0 < lo <= step <= hi
    assert isinstance(obj["accuracy_basis"], str) and obj["accuracy_basis"]

    assert 0 <= obj["mfu"] <= 1 and 0 <= obj["hfu"] <= 1
    assert obj["hfu"] >= obj["mfu"] * (1 - 1e-12)  # recompute only adds hardware FLOPs
    assert _finite(obj["mfu_palm"]) and obj["mfu_palm"] > 0
    assert obj["tflops_per_gpu"] > 0
    tokens_per_step = layout["global_batch"] * layout["seq_len"]
    assert obj["tokens_per_s"] == pytest.approx(tokens_per_step / step, rel=1e-9)

    params = obj["params"]
    assert isinstance(params["total"], int) and isinstance(params["active"], int)
    assert 0 < params["active"] <= params["total"]


def check_json_schema(schema: dict[str, Any], obj: Any) -> None:
    """`obj` validates against `schema`: with `jsonschema` when it is installed, else with the
    subset of JSON Schema that pydantic emits (types, required, properties, additionalProperties,
    items, prefixItems, min/maxItems, enum, const, anyOf, $ref, numeric bounds)."""
    try:
        import jsonschema  # type: ignore[import-untyped,unused-ignore]
    except ImportError:
        _check_schema_node(schema, schema, obj, "$")
    else:
        jsonschema.validate(obj, schema)


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,), "array": (list,), "string": (str,), "boolean": (bool,), "null": (type(None),),
    "integer": (int,), "number": (int, float),
}  # fmt: skip


def _check_schema_node(root: dict[str, Any], node: dict[str, Any], value: Any, where: str) -> None:
    if "$ref" in node:
        target: Any = root
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        _check_schema_node(root, target, value, where)
    if "anyOf" in node:
        errors = []
        for option in node["anyOf"]:
            try:
                _check_schema_node(root, option, value, where)
                break
            except AssertionError as exc:
                errors.append(str(exc))
        else:
            raise AssertionError(f"{where}: no anyOf branch matches: {errors}")
    if "enum" in node:
        assert value in node["enum"], f"{where}: {value!r} not in {node['enum']}"
    if "const" in node:
        assert value == node["const"], f"{where}: {value!r} is not {node['const']!r}"
    kind = node.get("type")
    if kind is not None:
        kinds = kind if isinstance(kind, list) else [kind]
        ok = any(isinstance(value, _JSON_TYPES[k]) and not (k in ("integer", "number") and isinstance(value, bool))
                 for k in kinds)  # fmt: skip
        assert ok, f"{where}: {value!r} is not {kind}"
    if isinstance(value, dict):
        for key in node.get("required", []):
            assert key in value, f"{where}: required key {key!r} missing"
        properties = node.get("properties", {})
        for key, item in value.items():
            if key in properties:
                _check_schema_node(root, properties[key], item, f"{where}.{key}")
            elif node.get("additionalProperties") is False:
                raise AssertionError(f"{where}: key {key!r} not in the schema")
            elif isinstance(node.get("additionalProperties"), dict):
                _check_schema_node(root, node["additionalProperties"], item, f"{where}.{key}")
    if isinstance(value, list):
        assert node.get("minItems", 0) <= len(value) <= node.get("maxItems", len(value)), f"{where}: length"
        prefix = node.get("prefixItems", [])
        for i, item in enumerate(value):
            if i < len(prefix):
                _check_schema_node(root, prefix[i], item, f"{where}[{i}]")
            elif isinstance(node.get("items"), dict):
                _check_schema_node(root, node["items"], item, f"{where}[{i}]")
    if _finite(value):
        if "minimum" in node:
            assert value >= node["minimum"], f"{where}: {value} < {node['minimum']}"
        if "maximum" in node:
            assert value <= node["maximum"], f"{where}: {value} > {node['maximum']}"
        if "exclusiveMinimum" in node:
            assert value > node["exclusiveMinimum"], f"{where}: {value} <= {node['exclusiveMinimum']}"

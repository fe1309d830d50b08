"""The `paraplan` command line against the contract (../shared/contract.md).

`optimizer.cli.main(argv)` is called in-process (it maps bad input to an `Error:` line and a
SystemExit), with stdout/stderr captured; a few cases run `python -m optimizer` end to end.
Every validate call costs about a second, so results are shared through module fixtures.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import subprocess
import sys
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from paraplan.cli import main

MODEL_PRESETS = [
    "llama2-7b", "llama2-13b", "llama2-70b", "llama3-8b", "llama3-70b", "llama3-405b",
    "gpt3-175b", "mixtral-8x7b",
]  # fmt: skip
HARDWARE_PRESETS = [
    "a100-40g", "a100-80g", "a100-80g-pcie", "h100-sxm", "h100-pcie", "h200", "b200",
    "rtx4090", "rtx3090", "l40s", "mi300x",
]  # fmt: skip
LAYOUT_KEYS = {
    "tp", "pp", "dp", "cp", "ep", "micro_batch", "global_batch", "seq_len", "virtual_stages",
    "recompute", "zero", "sequence_parallel", "precision",
}  # fmt: skip
TOP_KEYS = {
    "model", "hardware", "gpus", "layout", "feasible", "violations", "memory_bytes", "step_time_s",
    "time_s", "mfu", "hfu", "tflops_per_gpu", "tokens_per_s",
}  # fmt: skip
MEMORY_KEYS = {"params", "grads", "optimizer", "activations", "other", "total", "capacity"}
MEMORY_TERMS = ("params", "grads", "optimizer", "activations", "other")
TIME_KEYS = {"compute", "recompute", "tp_comm", "cp_comm", "ep_comm", "pp_comm", "dp_comm", "bubble"}

A100 = ["--model", "llama2-70b", "--gpus", "256", "--hardware", "a100-80g", "--plan", "TP8/PP4/DP8"]
RTX4090 = ["--model", "llama2-70b", "--gpus", "2048", "--hardware", "rtx4090", "--plan", "TP2/PP16/DP64"]
ONE_GPU_MEMORY = [
    "memory", "--model", "llama2-70b", "--gpus", "1", "--hardware", "a100-80g", "--plan", "TP1/PP1/DP1",
    "--micro-batch", "8", "--seq-len", "4096", "--recompute", "none", "--zero", "0", "--json",
]  # fmt: skip
REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Result:
    code: int | str | None  # the SystemExit code; None if main() returned or raised
    out: str
    err: str
    exception: BaseException | None  # anything other than SystemExit that escaped main()

    def json(self) -> Any:
        return json.loads(self.out)


def invoke(*args: str) -> Result:
    """Run `paraplan args...` in-process, capturing stdout and stderr."""
    out, err = io.StringIO(), io.StringIO()
    code: int | str | None = None
    exception: BaseException | None = None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(list(args))
        except SystemExit as exc:
            code = exc.code
        except Exception as exc:  # a traceback for the user
            exception = exc
    return Result(code, out.getvalue(), err.getvalue(), exception)


def run_module(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "paraplan", *args],
        capture_output=True, text=True, cwd=REPO, timeout=120, check=False,
    )  # fmt: skip


def assert_one_error_line(result: Result, *names: str) -> str:
    """Exit 2, exactly one `Error:` line on stderr naming each of `names`, no traceback."""
    assert result.exception is None, f"exception escaped main(): {result.exception!r}"
    assert result.code == 2, (result.code, result.err)
    assert "Traceback" not in result.err
    assert result.out == "", result.out
    lines = result.err.splitlines()
    assert len(lines) == 1, result.err
    line = lines[0]
    assert line.startswith("Error:"), line
    for name in names:
        assert name in line, f"{name!r} not named in {line!r}"
    return line


# ---------------------------------------------------------------------------- shared runs


@pytest.fixture(scope="module")
def a100() -> Result:
    return invoke("validate", *A100, "--json")


@pytest.fixture(scope="module")
def a100_json(a100: Result) -> dict[str, Any]:
    assert a100.exception is None, repr(a100.exception)
    return a100.json()  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def rtx4090() -> Result:
    return invoke("validate", *RTX4090, "--json")


@pytest.fixture(scope="module")
def one_gpu() -> Result:
    return invoke(*ONE_GPU_MEMORY)


@pytest.fixture(scope="module")
def a100_human() -> Result:
    return invoke("validate", *A100)


# ---------------------------------------------------------------------------- validate --json


def check_evaluated_layout(obj: dict[str, Any]) -> None:
    """Every key of the contract's evaluated-layout object, with consistent values."""
    assert set(obj) >= TOP_KEYS, TOP_KEYS - set(obj)
    assert set(obj["layout"]) >= LAYOUT_KEYS, LAYOUT_KEYS - set(obj["layout"])
    assert set(obj["memory_bytes"]) >= MEMORY_KEYS, MEMORY_KEYS - set(obj["memory_bytes"])
    assert set(obj["time_s"]) >= TIME_KEYS, TIME_KEYS - set(obj["time_s"])

    layout = obj["layout"]
    for key in ("tp", "pp", "dp", "cp", "ep", "micro_batch", "global_batch", "seq_len", "virtual_stages", "zero"):
        assert isinstance(layout[key], int) and not isinstance(layout[key], bool), (key, layout[key])
        assert layout[key] >= (0 if key == "zero" else 1), (key, layout[key])
    assert layout["recompute"] in ("none", "selective", "full")
    assert layout["zero"] in (0, 1, 2, 3)
    assert isinstance(layout["sequence_parallel"], bool)
    assert layout["precision"] in ("bf16", "fp16", "fp8")
    assert layout["tp"] * layout["pp"] * layout["dp"] * layout["cp"] == obj["gpus"]

    assert isinstance(obj["feasible"], bool)
    assert isinstance(obj["violations"], list)
    assert all(isinstance(v, str) and v for v in obj["violations"])
    assert (obj["violations"] == []) == obj["feasible"]

    memory = obj["memory_bytes"]
    for key in MEMORY_KEYS:
        assert isinstance(memory[key], (int, float)) and math.isfinite(memory[key]) and memory[key] >= 0, key
    assert sum(memory[k] for k in MEMORY_TERMS) == pytest.approx(memory["total"], rel=1e-9)
    assert memory["capacity"] > 0

    times = obj["time_s"]
    for key in TIME_KEYS:
        assert isinstance(times[key], (int, float)) and math.isfinite(times[key]) and times[key] >= 0, key
    assert obj["step_time_s"] > 0
    assert sum(times.values()) == pytest.approx(obj["step_time_s"], rel=1e-9)

    for key in ("mfu", "hfu"):
        assert 0 <= obj[key] <= 1, (key, obj[key])
    assert obj["hfu"] >= obj["mfu"] - 1e-12
    assert obj["tflops_per_gpu"] > 0
    assert obj["tokens_per_s"] > 0
    tokens = layout["global_batch"] * layout["seq_len"]
    assert obj["tokens_per_s"] == pytest.approx(tokens / obj["step_time_s"], rel=1e-6)


def test_validate_a100_exit_0(a100: Result) -> None:
    assert a100.exception is None, repr(a100.exception)
    assert a100.code == 0, a100.err
    assert "Traceback" not in a100.err


def test_validate_json_is_exactly_one_object(a100: Result) -> None:
    decoder = json.JSONDecoder()
    text = a100.out.strip()
    obj, end = decoder.raw_decode(text)
    assert isinstance(obj, dict)
    assert end == len(text), "something besides the JSON object on stdout"


def test_validate_json_has_every_contract_key(a100_json: dict[str, Any]) -> None:
    check_evaluated_layout(a100_json)
    assert a100_json["model"] == "llama2-70b"
    assert a100_json["hardware"] == "a100-80g"
    assert a100_json["gpus"] == 256
    layout = a100_json["layout"]
    assert (layout["tp"], layout["pp"], layout["dp"], layout["cp"], layout["ep"]) == (8, 4, 8, 1, 1)
    assert layout["seq_len"] == 4096
    assert layout["global_batch"] == 1024  # 4,194,304 tokens / 4096
    assert layout["precision"] == "bf16"


def test_validate_a100_is_feasible_with_plausible_mfu(a100_json: dict[str, Any]) -> None:
    assert a100_json["feasible"] is True
    assert a100_json["violations"] == []
    assert 0.3 <= a100_json["mfu"] <= 0.75
    assert a100_json["memory_bytes"]["total"] <= a100_json["memory_bytes"]["capacity"]


def test_validate_rtx4090(rtx4090: Result, a100_json: dict[str, Any]) -> None:
    assert rtx4090.exception is None, repr(rtx4090.exception)
    assert rtx4090.code == 0, rtx4090.err
    obj = rtx4090.json()
    check_evaluated_layout(obj)
    assert obj["hardware"] == "rtx4090"
    assert obj["gpus"] == 2048
    assert obj["feasible"] is True
    assert obj["mfu"] < a100_json["mfu"]
    assert obj["time_s"]["tp_comm"] > 0  # TP over PCIe through the host is not free


# ---------------------------------------------------------------------------- memory


def test_memory_one_gpu_is_infeasible(one_gpu: Result) -> None:
    assert one_gpu.exception is None, repr(one_gpu.exception)
    assert one_gpu.code == 1, one_gpu.err
    obj = one_gpu.json()
    check_evaluated_layout(obj)
    assert obj["feasible"] is False
    memory = obj["memory_bytes"]
    assert memory["params"] == pytest.approx(138e9, rel=0.01)  # 68.98e9 params x 2 bytes
    assert memory["optimizer"] == pytest.approx(828e9, rel=0.01)  # x 12 bytes (fp32 master, m, v)
    assert 7.0e11 <= memory["activations"] <= 7.5e11
    assert memory["total"] > memory["capacity"]
    assert obj["violations"]
    assert any("memory" in v.lower() for v in obj["violations"])


def test_memory_one_gpu_keeps_given_knobs(one_gpu: Result) -> None:
    layout = one_gpu.json()["layout"]
    assert layout["micro_batch"] == 8
    assert layout["seq_len"] == 4096
    assert layout["recompute"] == "none"
    assert layout["zero"] == 0


# ---------------------------------------------------------------------------- knobs

ALL_KNOBS = [
    "--micro-batch", "2", "--recompute", "selective", "--zero", "2", "--no-sequence-parallel",
    "--virtual-stages", "2", "--precision", "fp16", "--seq-len", "2048", "--global-batch", "512",
]  # fmt: skip


@pytest.fixture(scope="module")
def all_knobs() -> Result:
    return invoke("validate", *A100, *ALL_KNOBS, "--json")


@pytest.fixture(scope="module")
def some_knobs() -> Result:
    args = ["--model", "llama2-70b", "--gpus", "256", "--hardware", "a100-80g", "--plan", "TP4/PP8/VPP2"]
    return invoke("validate", *args, "--micro-batch", "1", "--zero", "1", "--json")


def test_given_knobs_appear_unchanged(all_knobs: Result) -> None:
    assert all_knobs.exception is None, repr(all_knobs.exception)
    assert all_knobs.code in (0, 1), all_knobs.err
    obj = all_knobs.json()
    check_evaluated_layout(obj)
    assert obj["layout"] == {
        "tp": 8, "pp": 4, "dp": 8, "cp": 1, "ep": 1, "micro_batch": 2, "global_batch": 512,
        "seq_len": 2048, "virtual_stages": 2, "recompute": "selective", "zero": 2,
        "sequence_parallel": False, "precision": "fp16", "recompute_layers": 0,
    }  # fmt: skip
    assert obj["knobs_chosen"] == []


def test_knobs_not_given_are_listed_as_chosen(some_knobs: Result) -> None:
    assert some_knobs.exception is None, repr(some_knobs.exception)
    assert some_knobs.code in (0, 1), some_knobs.err
    obj = some_knobs.json()
    check_evaluated_layout(obj)
    layout = obj["layout"]
    assert (layout["tp"], layout["pp"], layout["dp"]) == (4, 8, 8)  # DP inferred
    assert layout["virtual_stages"] == 2  # from the plan's VPP2
    assert layout["micro_batch"] == 1
    assert layout["zero"] == 1
    chosen = obj["knobs_chosen"]
    assert set(chosen) == {"recompute", "recompute_layers", "sequence_parallel"}
    assert "virtual_stages" not in chosen and "micro_batch" not in chosen and "zero" not in chosen


def test_all_layout_knobs_chosen_when_none_given(a100_json: dict[str, Any]) -> None:
    chosen = a100_json["knobs_chosen"]
    assert set(chosen) == {
        "micro_batch", "virtual_stages", "recompute", "recompute_layers", "zero", "sequence_parallel"
    }


def test_seq_len_sets_default_global_batch(a100_json: dict[str, Any]) -> None:
    assert a100_json["layout"]["global_batch"] * a100_json["layout"]["seq_len"] == 4_194_304


# ---------------------------------------------------------------------------- list


@pytest.fixture(scope="module")
def lists() -> dict[str, Result]:
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("COLUMNS", raising=False)  # the default width of a non-terminal
        return {
            "models": invoke("list", "models"),
            "models-json": invoke("list", "models", "--json"),
            "hardware": invoke("list", "hardware"),
            "hardware-json": invoke("list", "hardware", "--json"),
        }


@pytest.mark.parametrize("key", ["models", "models-json", "hardware", "hardware-json"])
def test_list_exits_0(lists: dict[str, Result], key: str) -> None:
    result = lists[key]
    assert result.exception is None, repr(result.exception)
    assert result.code == 0, result.err
    assert result.out


@pytest.mark.parametrize("name", MODEL_PRESETS)
def test_list_models_names_every_preset(lists: dict[str, Result], name: str) -> None:
    names = [m["name"] for m in lists["models-json"].json()["models"]]
    assert name in names
    assert name in lists["models"].out


@pytest.mark.parametrize("name", HARDWARE_PRESETS)
def test_list_hardware_json_names_every_preset(lists: dict[str, Result], name: str) -> None:
    names = [h["name"] for h in lists["hardware-json"].json()["hardware"]]
    assert name in names


@pytest.mark.parametrize("name", HARDWARE_PRESETS)
def test_list_hardware_table_names_every_preset(lists: dict[str, Result], name: str) -> None:
    # The human table at the default (non-terminal) width must show each preset name whole.
    words = lists["hardware"].out.replace("│", " ").replace("┃", " ").split()
    assert name in words, f"{name!r} not shown whole in `paraplan list hardware`"


def test_list_models_json_has_param_counts(lists: dict[str, Result]) -> None:
    models = {m["name"]: m for m in lists["models-json"].json()["models"]}
    assert models["llama2-70b"]["total_params"] == pytest.approx(68.98e9, rel=0.005)
    assert models["mixtral-8x7b"]["active_params"] < models["mixtral-8x7b"]["total_params"]


# ---------------------------------------------------------------------------- human output


def test_human_validate(a100_human: Result) -> None:
    assert a100_human.exception is None, repr(a100_human.exception)
    assert a100_human.code == 0, a100_human.err
    out = a100_human.out
    assert "TP8/PP4/DP8" in out  # the layout
    assert "Time per step" in out
    for term in ("compute", "tp_comm", "step"):
        assert term in out
    assert "Memory" in out
    for term in ("params", "optimizer", "activations", "total"):
        assert term in out
    assert "bottleneck" in out
    assert "MFU" in out
    assert "optimum" in out  # how far from the optimum
    assert not out.lstrip().startswith("{")


def test_human_memory() -> None:
    result = invoke("memory", *A100)
    assert result.exception is None, repr(result.exception)
    assert result.code == 0, result.err
    assert "TP8/PP4/DP8" in result.out
    assert "activations" in result.out
    assert "capacity" in result.out


def test_human_infeasible_lists_violations() -> None:
    result = invoke(*[a for a in ONE_GPU_MEMORY if a != "--json"])
    assert result.exception is None, repr(result.exception)
    assert result.code == 1
    assert "INFEASIBLE" in result.out
    assert "memory" in result.out.lower()


# ---------------------------------------------------------------------------- bad input


def _toml_preset(name: str) -> str:
    return resources.files("paraplan.hardware_specs").joinpath("presets", f"{name}.toml").read_text()


def test_unknown_model_preset() -> None:
    line = assert_one_error_line(invoke("validate", *A100[2:], "--model", "llama9-1t"), "llama9-1t")
    assert "llama2-70b" in line  # what would be accepted


def test_unknown_hardware_preset() -> None:
    args = ["--model", "llama2-70b", "--gpus", "256", "--plan", "TP8/PP4/DP8", "--hardware", "tpu-v9"]
    line = assert_one_error_line(invoke("validate", *args), "tpu-v9")
    assert "a100-80g" in line


def test_nonexistent_config_path(tmp_path: Path) -> None:
    path = tmp_path / "missing" / "config.json"
    assert_one_error_line(invoke("validate", *A100[2:], "--model", str(path)), str(path))


def test_malformed_config_json(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text('{"hidden_size": 4096, "num_hidden_layers": ')
    assert_one_error_line(invoke("validate", *A100[2:], "--model", str(path)), str(path))


def test_config_json_missing_keys(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text(json.dumps({"model_type": "llama", "hidden_size": 4096, "vocab_size": 32000}))
    assert_one_error_line(invoke("validate", *A100[2:], "--model", str(path)), "num_hidden_layers")


def test_config_json_not_an_object(tmp_path: Path) -> None:
    path = tmp_path / "config.json"
    path.write_text("[4096, 32]")
    assert_one_error_line(invoke("validate", *A100[2:], "--model", str(path)), str(path))


def test_config_json_with_huge_integer(tmp_path: Path) -> None:
    # json.loads raises a plain ValueError (not JSONDecodeError) past 4300 digits.
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama", "hidden_size": ' + "9" * 5000 + "}")
    assert_one_error_line(invoke("validate", *A100[2:], "--model", str(path)), str(path))


def test_malformed_hardware_toml(tmp_path: Path) -> None:
    path = tmp_path / "cluster.toml"
    path.write_text('name = "x"\ngpus_per_node = [\n')
    args = [*A100[:4], "--plan", "TP8/PP4/DP8", "--hardware", str(path)]
    assert_one_error_line(invoke("validate", *args), str(path))


def test_hardware_toml_with_negative_number(tmp_path: Path) -> None:
    text = _toml_preset("a100-80g")
    assert "peak_bf16_flops = 312e12" in text
    path = tmp_path / "neg.toml"
    path.write_text(text.replace("peak_bf16_flops = 312e12", "peak_bf16_flops = -1"))
    args = [*A100[:4], "--plan", "TP8/PP4/DP8", "--hardware", str(path)]
    assert_one_error_line(invoke("validate", *args), str(path), "peak_bf16_flops", "-1")


def test_hardware_toml_with_huge_integer(tmp_path: Path) -> None:
    # tomllib raises a plain ValueError (not TOMLDecodeError) past 4300 digits.
    path = tmp_path / "huge.toml"
    path.write_text("gpus_per_node = " + "9" * 5000 + "\n")
    args = [*A100[:4], "--plan", "TP8/PP4/DP8", "--hardware", str(path)]
    assert_one_error_line(invoke("validate", *args), str(path))


def test_plan_product_not_gpus() -> None:
    args = [*A100[:6], "--plan", "TP8/PP4/DP4"]
    assert_one_error_line(invoke("validate", *args), "TP8/PP4/DP4", "256")


def test_plan_garbage() -> None:
    assert_one_error_line(invoke("validate", *A100[:6], "--plan", "TP8/PP4/banana"), "TP8/PP4/banana")


def test_plan_number_beyond_int_conversion_limit() -> None:
    assert_one_error_line(invoke("validate", *A100[:6], "--plan", "TP" + "9" * 5000))


def _with(option: str, value: str) -> list[str]:
    """A100 with `option` replaced (or added) by `value`."""
    args = list(A100)
    if option in args:
        args[args.index(option) + 1] = value
        return args
    return [*args, option, value]


@pytest.mark.parametrize(
    ("option", "value", "names"),
    [
        ("--gpus", "0", ("--gpus", "0")),
        ("--gpus", "-5", ("--gpus", "-5")),
        ("--gpus", "abc", ("--gpus", "abc")),
        ("--seq-len", "0", ("--seq-len", "0")),
        ("--zero", "5", ("--zero", "5")),
        ("--recompute", "bogus", ("--recompute", "bogus", "selective")),
        ("--precision", "fp4", ("--precision", "fp4", "bf16")),
        ("--micro-batch", "0", ("--micro-batch", "0")),
        ("--global-batch", "0", ("--global-batch", "0")),
        ("--virtual-stages", "0", ("--virtual-stages", "0")),
    ],
)
@pytest.mark.parametrize("command", ["validate", "memory"])
def test_bad_option_value(command: str, option: str, value: str, names: tuple[str, ...]) -> None:
    assert_one_error_line(invoke(command, *_with(option, value), "--json"), *names)


@pytest.mark.parametrize("missing", ["--model", "--gpus", "--hardware", "--plan"])
def test_missing_required_option(missing: str) -> None:
    args = list(A100)
    i = args.index(missing)
    del args[i : i + 2]
    assert_one_error_line(invoke("validate", *args), missing)


def test_unknown_option() -> None:
    assert_one_error_line(invoke("validate", *A100, "--frobnicate"), "--frobnicate")


def test_unknown_subcommand() -> None:
    assert_one_error_line(invoke("frobnicate", *A100), "frobnicate")


def test_unknown_list_subject() -> None:
    assert_one_error_line(invoke("list", "gizmos"), "gizmos")


def test_pipeline_deeper_than_the_model_has_layers() -> None:
    # llama2-70b has 80 layers; PP81 can never work. Either an infeasible report (exit 1, with a
    # violation) or a usage error (exit 2, one Error: line), but never a traceback.
    result = invoke("validate", "--model", "llama2-70b", "--gpus", "81", "--hardware", "a100-80g",
                    "--plan", "PP81", "--json")  # fmt: skip
    assert result.exception is None, f"exception escaped main(): {result.exception!r}"
    assert "Traceback" not in result.err
    assert result.code in (1, 2)
    if result.code == 1:
        obj = result.json()
        assert obj["feasible"] is False and obj["violations"]
    else:
        assert_one_error_line(result, "81")


def test_no_arguments_shows_usage_without_traceback() -> None:
    result = invoke()
    assert result.exception is None, repr(result.exception)
    assert result.code in (0, 2)
    assert "Traceback" not in result.err
    assert "Usage" in result.out + result.err
    assert "validate" in result.out + result.err


@pytest.mark.parametrize(
    "command",
    [[], ["validate"], ["memory"], ["list"], ["list", "models"], ["list", "hardware"]],
)
def test_help_exits_0(command: list[str]) -> None:
    result = invoke(*command, "--help")
    assert result.exception is None, repr(result.exception)
    assert result.code in (0, None)
    assert "Traceback" not in result.err
    assert "Usage" in result.out


def test_validate_help_lists_the_knobs() -> None:
    out = invoke("validate", "--help").out
    options = [
        "--model", "--gpus", "--hardware", "--plan", "--seq-len", "--global-batch", "--micro-batch",
        "--recompute", "--zero", "--sequence-parallel", "--virtual-stages", "--precision", "--json",
    ]  # fmt: skip
    for option in options:
        assert option in out, option


# ---------------------------------------------------------------------------- end to end


def test_python_m_optimizer_help() -> None:
    proc = run_module("--help")
    assert proc.returncode == 0, proc.stderr
    assert "Usage" in proc.stdout
    assert "validate" in proc.stdout
    assert "Traceback" not in proc.stderr


def test_python_m_optimizer_bad_input() -> None:
    proc = run_module("validate", *A100[:6], "--plan", "TP8/PP4/DP4")
    assert proc.returncode == 2
    assert proc.stdout == ""
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error:"), proc.stderr


def test_deterministic_json_in_process(a100: Result) -> None:
    again = invoke("validate", *A100, "--json")
    assert again.code == 0
    assert again.out == a100.out


def test_deterministic_json_across_processes(a100: Result) -> None:
    proc = run_module("validate", *A100, "--json")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == a100.out  # byte-identical: same process or a fresh one

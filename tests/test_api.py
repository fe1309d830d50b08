"""The Python API: `import paraplan`, its functions, the result models they return (the same the
CLI prints with --json), `paraplan.InputError`, typed knob arguments, and what importing costs."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import Invoke, gpt_spec, run_module

import paraplan
from paraplan.calibration import calibrate
from paraplan.cost_models.models import ModelSpec
from paraplan.hardware_specs.schema import Cluster
from paraplan.results import CalibrateResult, CompareResult, OptimizeResult, ValidateResult

PUBLIC_RUNS = Path(__file__).resolve().parent.parent / "benchmarks" / "data" / "runs_public.csv"
TINY = gpt_spec(h=512, layers=4, heads=8, vocab=32_000, seq=4096)
README_CODE = (
    "import paraplan; r = paraplan.optimize(model='llama2-70b', gpus=1024, hardware='a100-80g', top=3); "
    "print(r.results[0].layouts[0].step_time_s)"
)


def without_wall_time(obj: Any) -> Any:
    """A result's JSON with the solver's wall time (the one nondeterministic figure) removed."""
    if isinstance(obj, dict):
        return {k: without_wall_time(v) for k, v in obj.items() if k != "wall_s"}
    if isinstance(obj, list):
        return [without_wall_time(v) for v in obj]
    return obj


# --- the README's snippet and what importing loads ------------------------------------------------


def test_readme_snippet_in_a_fresh_process() -> None:
    proc = run_module("paraplan", code=README_CODE)
    assert proc.returncode == 0, proc.stderr
    step = float(proc.stdout)
    here = paraplan.optimize(model="llama2-70b", gpus=1024, hardware="a100-80g", top=3)
    assert step == pytest.approx(here.results[0].layouts[0].step_time_s, rel=1e-12)
    assert len(here.results[0].layouts) == 3


def test_import_paraplan_loads_no_solver_and_no_numpy() -> None:
    code = "import json, sys, paraplan; print(json.dumps(sorted(sys.modules)))"
    proc = run_module("paraplan", code=code)
    assert proc.returncode == 0, proc.stderr
    modules = set(json.loads(proc.stdout))
    assert "paraplan" in modules
    for heavy in ("ortools", "numpy", "networkx", "paraplan.api", "paraplan.search"):
        assert heavy not in modules, heavy


def test_cli_help_imports_no_solver_and_no_numpy() -> None:
    """`python -X importtime` lists every module the process imports, on stderr."""
    proc = run_module("paraplan", "--help", flags=("-X", "importtime"))
    assert proc.returncode == 0, proc.stderr
    assert "Usage" in proc.stdout
    imported = {line.rsplit("|", 1)[1].strip() for line in proc.stderr.splitlines() if line.startswith("import time")}
    assert "paraplan.cli" in imported  # the measurement works
    roots = {name.split(".")[0] for name in imported}
    for heavy in ("ortools", "numpy", "networkx"):
        assert heavy not in roots, heavy
    assert not {"paraplan.api", "paraplan.search", "paraplan.cost_models.evaluate"} & imported


def test_paraplan_calibrate_stays_the_function() -> None:
    code = "import paraplan; first = paraplan.calibrate; print(callable(first), callable(paraplan.calibrate))"
    proc = run_module("paraplan", code=code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["True", "True"]


def test_public_names_resolve() -> None:
    for name in paraplan.__all__:
        assert getattr(paraplan, name) is not None, name
    with pytest.raises(AttributeError):
        _ = paraplan.no_such_name


# --- the functions return the result models, equal to what --json prints -------------------------------


@pytest.fixture(scope="module")
def validated() -> ValidateResult:
    return paraplan.validate("llama2-70b", 256, "a100-80g", "TP8/PP4/DP8")


def test_validate_returns_the_model_the_cli_prints(validated: ValidateResult, invoke: Invoke) -> None:
    assert isinstance(validated, ValidateResult)
    assert validated.feasible and validated.layout.tp == 8 and validated.layout.pp == 4
    printed = invoke("validate", "--model", "llama2-70b", "--gpus", "256", "--hardware", "a100-80g", "--plan",
                     "TP8/PP4/DP8", "--json")  # fmt: skip
    assert printed.code == 0, printed.err
    assert without_wall_time(json.loads(validated.model_dump_json())) == without_wall_time(printed.json())
    assert ValidateResult.model_validate_json(printed.out).layout == validated.layout


def test_optimize_returns_the_model_the_cli_prints(invoke: Invoke) -> None:
    result = paraplan.optimize("llama2-7b", "a100-80g,h100-sxm:16", 8, top=2)
    assert isinstance(result, OptimizeResult)
    assert [(r.hardware, r.gpus) for r in result.results] == [("a100-80g", 8), ("h100-sxm", 16)]
    printed = invoke("optimize", "--model", "llama2-7b", "--hardware", "a100-80g,h100-sxm:16", "--gpus", "8",
                     "--top", "2", "--json")  # fmt: skip
    assert without_wall_time(json.loads(result.model_dump_json())) == without_wall_time(printed.json())


def test_compare_returns_the_model_the_cli_prints(invoke: Invoke) -> None:
    result = paraplan.compare("llama2-7b", "a100-80g:8,h100-sxm:8", tokens=1e10)
    assert isinstance(result, CompareResult)
    assert [(e.hardware, e.gpus) for e in result.results] == [("a100-80g", 8), ("h100-sxm", 8)]
    printed = invoke("compare", "--model", "llama2-7b", "--hardware", "a100-80g:8,h100-sxm:8", "--tokens", "1e10",
                     "--json")  # fmt: skip
    assert without_wall_time(json.loads(result.model_dump_json())) == without_wall_time(printed.json())


def test_calibrate_returns_its_model(tmp_path: Path) -> None:
    import csv

    with PUBLIC_RUNS.open(newline="") as handle:
        rows = [r for r in csv.DictReader(handle) if r["hardware"] == "a100-80g" and r["group"] == "narayanan21"][:3]
    runs = tmp_path / "runs.csv"
    with runs.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    result = calibrate("a100-80g", runs, fit_names="gemm_max")
    assert isinstance(result, CalibrateResult)
    assert result.fitted == ["gemm_max"] and len(result.runs) == 3
    assert result.out is None  # the API writes nothing; the TOML is in the result
    assert "gemm_max" in result.toml


def test_load_model_and_load_hardware(tmp_path: Path) -> None:
    spec = paraplan.load_model("llama2-7b")
    assert isinstance(spec, ModelSpec) and spec.num_layers == 32 and spec.hidden_size == 4096
    config = tmp_path / "config.json"
    config.write_text(json.dumps({"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "n_inner": None,
                                  "vocab_size": 50257, "n_positions": 1024}))  # fmt: skip
    gpt2 = paraplan.load_model(str(config))
    assert gpt2.ffn_hidden_size == 4 * 768  # n_inner null means 4 * n_embd
    cluster = paraplan.load_hardware("a100-80g")
    assert isinstance(cluster, Cluster) and cluster.gpus_per_node == 8
    # a loaded model and cluster are accepted wherever a name is
    by_object = paraplan.optimize(spec, cluster, 8, top=1)
    by_name = paraplan.optimize("llama2-7b", "a100-80g", 8, top=1)
    assert by_object.results[0].layouts[0].step_time_s == by_name.results[0].layouts[0].step_time_s


# --- typed keyword arguments ------------------------------------------------------------------------


def test_typed_knobs_are_fixed_in_every_layout() -> None:
    result = paraplan.optimize("llama2-7b", "a100-80g", 16, top=3, micro_batch=2, recompute="full",
                               framework="torchtitan")  # fmt: skip
    layouts = result.results[0].layouts
    assert layouts
    for lay in layouts:
        assert lay.layout.micro_batch == 2
        assert lay.layout.recompute is paraplan.Recompute.FULL
        assert lay.layout.framework is paraplan.Framework.TORCHTITAN


def test_enum_members_and_labels_are_the_same_knob() -> None:
    by_label = paraplan.validate("llama2-7b", 8, "a100-80g", "TP2/DP4", recompute="full", precision="fp16")
    by_enum = paraplan.validate("llama2-7b", 8, "a100-80g", "TP2/DP4", recompute=paraplan.Recompute.FULL,
                                precision=paraplan.Precision.FP16)  # fmt: skip
    assert by_label.layout == by_enum.layout
    assert by_label.step_time_s == by_enum.step_time_s


def test_validate_chooses_what_is_not_given(validated: ValidateResult) -> None:
    given = paraplan.validate("llama2-70b", 256, "a100-80g", "TP8/PP4/DP8", micro_batch=1)
    assert given.layout.micro_batch == 1 and "micro_batch" not in given.knobs_chosen
    assert "micro_batch" in validated.knobs_chosen
    # chosen to make the plan as good as it can be: fixing a knob can only cost time
    assert validated.step_time_s <= given.step_time_s * (1 + 1e-12)


# --- bad input: paraplan.InputError, one line -------------------------------------------------------

BAD_CALLS: dict[str, Callable[[], object]] = {
    "unknown model": lambda: paraplan.validate("llama9-1t", 8, "a100-80g", "TP8"),
    "unknown hardware": lambda: paraplan.optimize("llama2-7b", "tpu-v9", 8),
    "plan product": lambda: paraplan.validate("llama2-7b", 8, "a100-80g", "TP3"),
    "gpus zero": lambda: paraplan.optimize("llama2-7b", "a100-80g", 0),
    "gpus text": lambda: paraplan.optimize("llama2-7b", "a100-80g", "abc"),
    "micro-batch zero": lambda: paraplan.optimize("llama2-7b", "a100-80g", 8, micro_batch=0),
    "recompute label": lambda: paraplan.optimize("llama2-7b", "a100-80g", 8, recompute="sometimes"),
    "unknown knob": lambda: paraplan.optimize("llama2-7b", "a100-80g", 8, frobnicate=1),  # type: ignore[call-arg]
    "recompute layers": lambda: paraplan.optimize("llama2-7b", "a100-80g", 8, recompute="none", recompute_layers=1),
    "top zero": lambda: paraplan.optimize("llama2-7b", "a100-80g", 8, top=0),
    "objective": lambda: paraplan.optimize("llama2-7b", "a100-80g", 8, objective="money"),  # type: ignore[arg-type]
    "bound zero": lambda: paraplan.optimize("llama2-7b", "a100-80g", 8, bounds={"max_tp": 0}),
    "deadline without tokens": lambda: paraplan.optimize("llama2-7b", "a100-80g", 8, deadline_days=3.0),
    "headroom": lambda: paraplan.optimize("llama2-7b", "a100-80g", 8, mem_headroom=2.0),
    "stack value": lambda: paraplan.validate("llama2-7b", 8, "a100-80g", "TP1", stack={"flash_attention": "yes"}),
    "compare count": lambda: paraplan.compare("llama2-7b", "a100-80g"),
    "compare tokens": lambda: paraplan.compare("llama2-7b", "a100-80g:8", tokens=float("nan")),
    "compare pricing": lambda: paraplan.compare("llama2-7b", "a100-80g:8", pricing="lease"),  # type: ignore[arg-type]
    "calibrate runs": lambda: calibrate("a100-80g", "/nonexistent/runs.csv"),
    "calibrate fit": lambda: calibrate("a100-80g", PUBLIC_RUNS, fit_names="nope"),
    "load model": lambda: paraplan.load_model("/nonexistent/config.json"),
    "load hardware": lambda: paraplan.load_hardware("tpu-v9"),
    "tokens negative": lambda: paraplan.optimize("llama2-7b", "a100-80g", 8, tokens=-1.0),
    "tokens nan": lambda: paraplan.optimize("llama2-7b", "a100-80g", 8, tokens=float("nan")),
    "deadline negative": lambda: paraplan.optimize(TINY, "a100-80g", 8, tokens=1e9, deadline_days=-1.0),
    "no hardware": lambda: paraplan.optimize("llama2-7b", [], 8),
    "budget negative": lambda: paraplan.compare("llama2-7b", "a100-80g:8", budget_usd=-1.0),
    "staff negative": lambda: paraplan.compare("llama2-7b", "a100-80g:8", staff_usd_per_day=-1.0),
}


@pytest.mark.parametrize(
    "call",
    [pytest.param(f, id=k) for k, f in BAD_CALLS.items()],
)
def test_bad_input_raises_input_error_with_one_line(call: Callable[[], object]) -> None:
    with pytest.raises(paraplan.InputError) as info:
        call()
    message = str(info.value)
    assert message and "\n" not in message and "Traceback" not in message


def test_input_error_is_one_type() -> None:
    from paraplan.cost_models.errors import InputError as CostModelsError
    from paraplan.hardware_specs.errors import InputError as SpecsError

    assert paraplan.InputError is CostModelsError is SpecsError


def test_error_names_the_bad_value_and_what_is_accepted() -> None:
    with pytest.raises(paraplan.InputError) as info:
        paraplan.optimize("llama2-7b", "a100-80g", 8, recompute="sometimes")
    assert re.search(r"sometimes.*none.*selective.*full", str(info.value))


def _recorded_rows(monkeypatch: pytest.MonkeyPatch) -> list[np.ndarray]:
    """The candidate rows each pass over the cost model (`Question.evaluate`, which prices them
    in chunks of `question.CHUNK`) receives, in order."""
    from paraplan.question import Question

    real = Question.evaluate
    calls: list[np.ndarray] = []

    def recording(self: Question, layouts: Any) -> Any:
        calls.append(layouts.data.copy())
        return real(self, layouts)

    monkeypatch.setattr(Question, "evaluate", recording)
    return calls


@pytest.mark.parametrize(
    ("model", "gpus", "hardware", "plan"),
    [("llama2-70b", 1024, "a100-80g", "TP8/PP4/DP32"), ("mixtral-8x7b", 16, "h100-sxm", "TP2/PP2/DP4/EP4")],
)
def test_validate_evaluates_each_candidate_once(
    monkeypatch: pytest.MonkeyPatch, model: str, gpus: int, hardware: str, plan: str
) -> None:
    """One pass over the plan's candidates and the free space's cores, then at most one over the
    trading variants that could change the answer; no candidate is priced twice."""
    calls = _recorded_rows(monkeypatch)
    result = paraplan.validate(model, gpus, hardware, plan)
    assert result.feasible
    assert 1 <= len(calls) <= 2
    rows = np.concatenate(calls)
    assert len(np.unique(rows, axis=0)) == len(rows)


def test_optimize_evaluates_each_candidate_once(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _recorded_rows(monkeypatch)
    paraplan.optimize(model="llama2-70b", gpus=1024, hardware="a100-80g", top=3)
    rows = np.concatenate(calls)
    assert len(np.unique(rows, axis=0)) == len(rows)


def test_results_report_the_stack_they_assume() -> None:
    """The JSON names every stack setting a prediction was priced under: the framework's defaults
    (torchtitan 0.3.0: chunked loss, rowwise FP8, no TP overlap) with the user's overrides."""
    given = paraplan.validate(
        "llama3-8b", 8, "h100-sxm", "TP1/PP1/DP8", framework="torchtitan", precision="fp8",
        stack={"fp8_recipe": "tensorwise", "flash_attention": False},
    )  # fmt: skip
    assert given.stack["fp8_recipe"] == "tensorwise"
    assert given.stack["flash_attention"] is False
    assert given.stack["loss"] == "chunked"
    assert given.stack["tp_overlap"] is False
    found = paraplan.optimize("llama2-7b", "a100-80g", 8, top=1)
    assert found.results[0].stack["fp8_recipe"] == "delayed"
    assert found.results[0].stack["loss"] == "eager"


def test_json_reference_is_current() -> None:
    """docs/json.md is rendered from the result models; a field added without re-rendering fails."""
    done = run_module("", code="import runpy, sys; sys.argv = ['make_json_md.py', '--check']; "
                      "runpy.run_path('docs/make_json_md.py', run_name='__main__')")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_quoted_outputs_are_current() -> None:
    """The outputs README.md and examples/*.md quote are paraplan's today (timings aside): a model
    or report change that moves them without re-rendering fails (python docs/make_examples.py)."""
    done = run_module("", code="import runpy, sys; sys.argv = ['make_examples.py', '--check']; "
                      "runpy.run_path('docs/make_examples.py', run_name='__main__')")  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("kind", ["model", "hardware"])
def test_a_name_too_long_for_the_os_is_an_unknown_name(kind: str) -> None:
    """Python 3.11's Path.exists/is_file raise on a name past NAME_MAX: it must read as 'not a
    file' (an unknown preset, exit 2), not as an output error."""
    name = "1" * 400
    with pytest.raises(paraplan.InputError, match="unknown"):
        if kind == "model":
            paraplan.load_model(name)
        else:
            paraplan.load_hardware(name)


HF = Path(__file__).parent / "data" / "hf_configs"
EXAMPLE_RUNS = Path(__file__).parent.parent / "examples" / "a100_runs.csv"


def test_path_objects_name_models_and_hardware() -> None:
    """A pathlib.Path is a path: it reads as its text wherever a name or path is taken (it was an
    AttributeError from inside the loaders)."""
    config = HF / "mixtral-8x7b.json"
    by_path = paraplan.validate(config, 8, Path("h100-sxm"), "TP2/PP1/DP4")
    by_text = paraplan.validate(str(config), 8, "h100-sxm", "TP2/PP1/DP4")
    assert by_path.step_time_s == by_text.step_time_s
    assert paraplan.load_model(config).total_params == paraplan.load_model(str(config)).total_params
    assert paraplan.optimize(config, [Path("h100-sxm"), "a100-80g"], 8, top=1).results
    assert paraplan.compare("llama2-7b", ["h100-sxm:8", Path("a100-80g:8")]).results


@pytest.mark.parametrize(
    ("call", "named"),
    [
        (lambda: paraplan.validate(None, 8, "h100-sxm", "TP8"), "model None"),  # type: ignore[arg-type]
        (lambda: paraplan.validate("llama2-7b", 8, 3, "TP8"), "hardware 3"),  # type: ignore[arg-type]
        (lambda: paraplan.validate("llama2-7b", 8, "h100-sxm", 8), "plan 8"),  # type: ignore[arg-type]
        (lambda: paraplan.optimize("llama2-7b", 3, 8), "hardware 3"),  # type: ignore[arg-type]
        (lambda: paraplan.optimize("llama2-7b", ["h100-sxm", None], 8), "hardware None"),  # type: ignore[list-item]
        (lambda: paraplan.compare("llama2-7b", 5), "hardware 5"),  # type: ignore[arg-type]
        (lambda: paraplan.load_model(7), "model 7"),  # type: ignore[arg-type]
        (lambda: paraplan.calibrate("a100-80g", 5), "runs 5"),  # type: ignore[arg-type]
        (lambda: paraplan.calibrate("a100-80g", EXAMPLE_RUNS, fit_names=["gemm_mx"]), "gemm_mx"),
        (lambda: paraplan.calibrate("a100-80g", EXAMPLE_RUNS, fit_names=3), "fit_names 3"),  # type: ignore[arg-type]
        (lambda: paraplan.calibrate("a100-80g", EXAMPLE_RUNS, name=3), "name 3"),  # type: ignore[arg-type]
        (lambda: paraplan.validate("llama2-7b", 8, "h100-sxm", "TP8", mem_headroom=None), "mem_headroom None"),  # type: ignore[arg-type]
        (lambda: paraplan.validate("llama2-7b", 8, "h100-sxm", "TP8", stack="x"), "stack 'x'"),  # type: ignore[arg-type]
        (lambda: paraplan.validate("llama2-7b", 8, "h100-sxm", "TP8", from_launch=1), "from_launch 1"),  # type: ignore[arg-type]
        (lambda: paraplan.optimize("llama2-7b", "h100-sxm", 8, bounds="x"), "bounds 'x'"),  # type: ignore[arg-type]
        (lambda: paraplan.compare("llama2-7b", "h100-sxm:8", figures=0), "figures 0"),  # type: ignore[arg-type]
        (lambda: paraplan.compare("llama2-7b", "h100-sxm:8", tokens=None), "tokens None"),  # type: ignore[arg-type]
        (lambda: paraplan.compare("llama2-7b", "h100-sxm:8", staff_usd_per_day=None), "staff_usd_per_day None"),  # type: ignore[arg-type]
    ],
)
def test_an_argument_of_the_wrong_type_is_an_input_error(call: Callable[[], object], named: str) -> None:
    with pytest.raises(paraplan.InputError, match=re.escape(named)):
        call()

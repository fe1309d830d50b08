"""benchmarks/fit_presets.py: the constants of a die without Megatron-family runs (`prior`),
checked against figures worked out by hand."""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import replace
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import cast

import pytest

from paraplan.cost_models.layout import Framework

SCRIPT = Path(__file__).resolve().parent.parent / "benchmarks" / "fit_presets.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fit_presets", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("fit_presets", module)
    spec.loader.exec_module(module)
    return module


fit_presets = _load()
FITTED = {  # the fit of benchmarks/fit_presets.py on the runs of 2026-12
    "a100-80g": {"gemm_max": 0.774, "attention": 0.520},
    "h100-sxm": {"gemm_max": 0.647, "attention": 0.315},
    "b200": {"gemm_max": 0.541, "attention": 0.416},
}


def test_a_die_without_runs_takes_its_mamf_share_times_the_fitted_dies_mean_ratio() -> None:
    # MI300X MAMF 668.4 of 1,307.4 = 0.511 (stas00/ml-engineering). Ratios fitted / MAMF share:
    # gemm 0.774/0.869 = 0.8907, 0.647/0.803 = 0.8057, 0.541/0.776 = 0.6972, mean 0.7979
    # attention 0.520/0.869 = 0.5984, 0.315/0.803 = 0.3923, 0.416/0.776 = 0.5361, mean 0.5089
    assert fit_presets.prior("mi300x", FITTED) == {"gemm_max": 0.408, "attention": 0.260}


def test_a_held_out_die_never_uses_its_own_fit() -> None:
    # b200 from a100 alone: 0.776 x 0.774/0.869 = 0.691, 0.776 x 0.520/0.869 = 0.464
    only_a100 = {"a100-80g": FITTED["a100-80g"], "b200": {"gemm_max": 0.9, "attention": 0.9}}
    assert fit_presets.prior("b200", only_a100) == {"gemm_max": 0.691, "attention": 0.464}


def test_a_constant_a_dies_runs_left_undetermined_is_no_evidence_for_another_dies_prior() -> None:
    # a100-80g's runs leave its attention undetermined: MI300X's gemm_max as above, 0.408; its
    # attention from b200 and h100 alone: 0.511 x (0.3923 + 0.5361) / 2 = 0.511 x 0.4642 = 0.237.
    # With attention undetermined everywhere, 0.6 of the MAMF share: 0.3066.
    loose = {"a100-80g": {"attention": 0.9}}
    assert fit_presets.prior("mi300x", FITTED, loose) == {"gemm_max": 0.408, "attention": 0.237}
    nowhere = {die: {"attention": 0.5} for die in FITTED}
    assert fit_presets.prior("mi300x", FITTED, nowhere) == {"gemm_max": 0.408, "attention": pytest.approx(0.3066)}


def test_the_a100_runs_do_not_determine_attention_as_none_runs_flash_attention() -> None:
    """The 21 Megatron-LM A100 runs (2021-2022) all run unfused attention, so nothing in them moves
    the flash attention figure: it stays where it started, 0.6 x 0.869 = 0.521 (not the preset's
    stored value, which FlagPerf's A800 rows set), is named undetermined, and the preset's source
    line says so and where that start comes from."""
    from paraplan.calibration import load_runs
    from paraplan.fit_parameters import DETERMINED_SHARE, PARAMETERS

    runs = [r for r in load_runs(fit_presets.RUNS) if r.hardware == "a100-80g" and fit_presets.fits_hardware(r)]
    assert runs and not any(r.stack.get("flash_attention", True) for r in runs)
    fitted, undetermined = fit_presets.fit_hardware(runs, quiet=True)
    start = 0.521
    assert fitted["a100-80g"]["attention"] == pytest.approx(start, abs=1e-3)
    assert set(undetermined["a100-80g"]) == {"attention"}
    assert undetermined["a100-80g"]["attention"] > DETERMINED_SHARE * PARAMETERS["attention"].span()
    note = fit_presets.undetermined_note("a100-80g", fitted["a100-80g"], undetermined["a100-80g"])
    assert f"attention {start:.3f} is not determined by them" in note and "arXiv:2307.08691" in note


def test_a_die_variants_runs_join_the_die_fit_and_determine_its_attention() -> None:
    """FlagPerf's A800 rows are Megatron-LM runs with flash attention on the A100's die: they join
    a100-80g's fit (each predicted on the A800 preset; a800-80g gets no fit of its own), and with
    them the A100's flash attention figure is determined, as the 21 runs on a100-80g alone leave it
    (the test above)."""
    from paraplan.calibration import load_runs

    runs = [r for r in load_runs(fit_presets.RUNS) if r.hardware in ("a100-80g", "a800-80g")]
    runs = [r for r in runs if fit_presets.fits_hardware(r)]
    assert any(r.hardware == "a800-80g" and r.stack.get("flash_attention") for r in runs)
    fitted, undetermined = fit_presets.fit_hardware(runs, quiet=True)
    assert set(fitted) == {"a100-80g"}
    assert "attention" not in undetermined.get("a100-80g", {})


def test_with_nothing_fitted_the_mamf_share_and_attention_at_0_6_of_it() -> None:
    values = fit_presets.prior("mi300x", {})
    assert values == {"gemm_max": 0.511, "attention": pytest.approx(0.3066)}


def test_a_die_without_a_mamf_figure_has_no_prior() -> None:
    assert fit_presets.prior("rtx4090", FITTED) is None


def test_a_preset_sharing_a_fit_carries_its_main_presets_constants() -> None:
    # --write copies a fitted die's constants to its die variants (SAME_DIE), so between two fits
    # every such preset holds them unchanged
    from paraplan.hardware_specs.loader import load_cluster

    assert fit_presets.main_preset("b300") == "gb300"
    assert fit_presets.main_preset("gb200") == fit_presets.main_preset("b200") == "b200"
    every_die_fitted: dict[str, dict[str, float]] = {main: {} for main in fit_presets.SAME_DIE}
    for main in fit_presets.SAME_DIE:
        fitted = load_cluster(main).efficiency
        for other, _ in fit_presets.fit_sharers(main, every_die_fitted):
            efficiency = load_cluster(other).efficiency
            assert (efficiency.gemm_max, efficiency.attention) == (fitted.gemm_max, fitted.attention), other


def test_a_die_without_enough_runs_takes_its_architectures_fit() -> None:
    # Blackwell Ultra fits on its own runs; without them (a cross-validation fold that holds out
    # their source) it and its die variant take B200's, not the preset file's last fit
    b200, gb300 = {"gemm_max": 0.5, "attention": 0.4}, {"gemm_max": 0.6, "attention": 0.45}
    assert fit_presets.die_values("gb300", {"b200": b200}) == b200
    assert fit_presets.die_values("gb300", {"b200": b200, "gb300": gb300}) == gb300
    shared = fit_presets.fit_sharers("b200", {"b200": b200})
    assert ("gb300", "the same architecture") in shared and ("b300", "the same architecture") in shared
    assert not {name for name, _ in fit_presets.fit_sharers("b200", {"b200": b200, "gb300": gb300})} & {"gb300", "b300"}
    assert fit_presets.fit_sharers("gb300", {"b200": b200, "gb300": gb300}) == [("b300", "the same die")]


def test_a_stacks_figure_stays_on_the_preset_its_runs_ran_on() -> None:
    # a100-80g's torchtitan figure is fitted on torchtitan runs on a100-80g: its variants (the A800,
    # the 40 GB part) take the die's gemm_max and attention, not the stack figure; a variant with
    # its own runs of the stack has its own figure, and its die does not take it
    fitted = {"a100-80g": {"gemm_max": 0.77, "attention": 0.52}}
    own = {"a100-80g": {"kernel_efficiency.torchtitan": 0.88}, "a100-40g": {"kernel_efficiency.torchtitan": 0.93}}
    a800 = fit_presets.fold_cluster("a800-80g", fitted, own).efficiency
    assert (a800.gemm_max, a800.attention, a800.stack_kernel_efficiency.torchtitan) == (0.77, 0.52, None)
    assert fit_presets.fold_cluster("a100-80g", fitted, own).efficiency.stack_kernel_efficiency.torchtitan == 0.88
    a40 = fit_presets.fold_cluster("a100-40g", fitted, own).efficiency
    assert (a40.gemm_max, a40.stack_kernel_efficiency.torchtitan) == (0.77, 0.93)
    # a fold that fits no stack figure must not see the one the shipped preset holds from the full fit
    figures = fit_presets.fold_cluster("a100-80g", fitted).efficiency.stack_kernel_efficiency
    assert figures.torchtitan is None and figures.deepspeed is None


def test_a_preset_without_a_fit_of_its_own_gets_its_stacks_figure_from_its_runs() -> None:
    # MI300X has no Megatron-family runs (its constants are a prior): its torchtitan runs alone set
    # torchtitan's figure there, and only there
    from paraplan.calibration import Run

    def run(hardware: str, framework: str) -> Run:
        return cast(Run, SimpleNamespace(hardware=hardware, framework=Framework[framework.upper()]))

    runs = [run("mi300x", "torchtitan")] * 3 + [run("mi300x", "deepspeed")] * 2 + [run("h100-sxm", "torchtitan")]
    seen: list[tuple[str, int]] = []

    def fake_error(mine: list[Run], clusters: object, framework: Framework, efficiency: float) -> float:
        seen.append((mine[0].hardware, len(mine)))
        return abs(efficiency - 0.6)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fit_presets, "preset_stack_error", fake_error)
        own = fit_presets.fit_preset_stacks(runs, {"mi300x": object(), "h100-sxm": object()}, quiet=True)
    assert set(seen) == {("mi300x", 3)}  # 2 DeepSpeed runs and 1 H100 run are too few (MIN_STACK_RUNS)
    assert own == {"mi300x": {"kernel_efficiency.torchtitan": pytest.approx(0.6, abs=1e-3)}}


def test_writing_a_stacks_figure_is_idempotent(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import tomllib

    from paraplan.hardware_specs.loader import load_cluster

    source = Path(fit_presets.PRESETS) / "a100-80g.toml"
    (tmp_path / "a100-80g.toml").write_text(source.read_text())
    monkeypatch.setattr(fit_presets, "PRESETS", tmp_path)
    values = {"gemm_max": 0.77, "attention": 0.52, "kernel_efficiency.torchtitan": 0.88}
    fit_presets.write_preset("a100-80g", values, "by hand")
    once = (tmp_path / "a100-80g.toml").read_text()
    fit_presets.write_preset("a100-80g", values, "by hand")
    assert (tmp_path / "a100-80g.toml").read_text() == once
    data = tomllib.loads(once)
    assert data["efficiency"]["stack_kernel_efficiency"] == {"torchtitan": 0.88}
    assert data["efficiency"]["gemm_max"] == 0.77 and "price" in data
    assert load_cluster(str(tmp_path / "a100-80g.toml")).efficiency.stack_kernel_efficiency.torchtitan == 0.88
    # a later fit without the figure removes the table
    fit_presets.write_preset("a100-80g", {"gemm_max": 0.77, "attention": 0.52}, "by hand")
    assert "stack_kernel_efficiency" not in tomllib.loads((tmp_path / "a100-80g.toml").read_text())["efficiency"]


def test_a_preset_that_lost_its_stacks_figure_has_the_table_cleared(tmp_path: Path) -> None:
    # rtx4090 is no fitted die, shares no fit and has no prior: a figure an earlier fit wrote there
    # goes when the runs no longer give it one, and a figure the runs give it is written
    for source in Path(fit_presets.PRESETS).glob("*.toml"):  # write_all also writes the dies' priors
        (tmp_path / source.name).write_text(source.read_text())
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(fit_presets, "PRESETS", tmp_path)
        fit_presets.write_preset("rtx4090", {"kernel_efficiency.torchtitan": 0.7}, "", stacks_basis=" by hand")
        assert "stack_kernel_efficiency" in (tmp_path / "rtx4090.toml").read_text()
        empty = fit_presets.FitResult(fitted={}, stacks={}, own={}, clusters={}, floors={})
        fit_presets.write_all(empty, [])
        assert "stack_kernel_efficiency" not in (tmp_path / "rtx4090.toml").read_text()
        fit_presets.write_all(replace(empty, own={"rtx4090": {"kernel_efficiency.torchtitan": 0.6}}), [])
        text = (tmp_path / "rtx4090.toml").read_text()
    assert "torchtitan = 0.600" in text and "kernel_efficiency.torchtitan on the 0 torchtitan runs" in text

"""`paraplan calibrate`: the fit lowers the error on held-out runs, leaves out runs it cannot
fit, reports constants on their bounds, and writes its TOML safely.

The measured runs are the published A100 rows of benchmarks/data/runs_public.csv (the file
holds other hardware too: they are filtered by its `hardware` column).
"""

from __future__ import annotations

import csv
import os
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import Invoke, check_json_schema, one_error_line, single_json_object

from paraplan.calibration import Fit, Run, chosen_layouts, fit, infeasible_reasons, load_runs, predict
from paraplan.hardware_specs.loader import load_cluster
from paraplan.hardware_specs.schema import Cluster

PUBLIC = Path(__file__).resolve().parent.parent / "benchmarks" / "data" / "runs_public.csv"
# Narayanan et al. 2021, Table 1: GPT models of 1.7B to 1T parameters on A100-80GB (Selene)
TABLE1 = [f"narayanan21_t1_{i}" for i in range(1, 11)]


def public_rows(hardware: str = "a100-80g") -> list[dict[str, str]]:
    with PUBLIC.open(newline="") as handle:
        return [row for row in csv.DictReader(handle) if row["hardware"] == hardware]


def write_runs(path: Path, rows: list[dict[str, Any]]) -> Path:
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


def mape(predicted: np.ndarray[Any, Any], runs: list[Run]) -> float:
    measured = np.array([r.measured_s for r in runs])
    return float(np.mean(np.abs(predicted / measured - 1)))


def data_sheet_a100() -> Cluster:
    """The preset with gemm_max at the data-sheet maximum achievable matmul rate (0.86 of peak,
    the MAMF table its sources cite), not the value fitted to these very runs: an honest start."""
    shipped = load_cluster("a100-80g")
    return shipped.model_copy(update={"efficiency": shipped.efficiency.model_copy(update={"gemm_max": 0.86})})


@pytest.fixture(scope="module")
def table1() -> list[Run]:
    runs = {r.label: r for r in load_runs(PUBLIC) if r.hardware == "a100-80g"}
    assert set(TABLE1) <= set(runs)
    assert {r.hardware for r in load_runs(PUBLIC)} > {"a100-80g"}  # the file holds other hardware
    return [runs[label] for label in TABLE1]


@pytest.fixture(scope="module")
def fits(table1: list[Run]) -> dict[float, Fit]:
    """gemm_max fitted on every other Table 1 run, from the data-sheet value and from a poor one."""
    start = data_sheet_a100()
    poor = start.model_copy(update={"efficiency": start.efficiency.model_copy(update={"gemm_max": 0.5})})
    return {0.86: fit(table1[0::2], start, ["gemm_max"]), 0.5: fit(table1[0::2], poor, ["gemm_max"])}


def test_fit_lowers_the_error_on_held_out_runs(table1: list[Run], fits: dict[float, Fit]) -> None:
    held_out, start, fitted = table1[1::2], data_sheet_a100(), fits[0.86].cluster
    before = mape(predict(held_out, chosen_layouts(held_out, start), start), held_out)
    after = mape(predict(held_out, chosen_layouts(held_out, fitted), fitted), held_out)
    assert after < before
    assert after < 0.10  # the model's stated accuracy on Megatron-LM runs
    train = table1[0::2]
    assert mape(fits[0.86].after_s, train) <= mape(fits[0.86].before_s, train) + 1e-12


def test_fit_does_not_depend_on_where_it_starts(fits: dict[float, Fit]) -> None:
    """One constant, a smooth least-squares problem: any start inside the range reaches the same
    minimum."""
    assert fits[0.5].values["gemm_max"] == pytest.approx(fits[0.86].values["gemm_max"], abs=2e-3)


# A stack's own kernel efficiency on this hardware: Megatron-LM runs (Narayanan et al. 2021 Table 1)
# beside torchtitan runs (its Aug 2024 A100 table; the two every-Nth-layer rows are infeasible).
MEGATRON_A100 = TABLE1[:5]
TORCHTITAN_A100 = ["tt24a_l3_8b_sel_op", "tt24a_l3_70b_full", "tt24a_l2_13b_none", "tt24a_l2_13b_sel_op",
                   "tt24a_l2_70b_full"]  # fmt: skip


def _runs(labels: list[str]) -> list[Run]:
    by_label = {r.label: r for r in load_runs(PUBLIC)}
    return [by_label[label] for label in labels]


def test_a_stack_s_kernel_efficiency_is_fitted_beside_the_hardware_s() -> None:
    """Known answer: the runs' "measured" times are the model's own predictions on the preset with
    torchtitan's kernels at 0.85 of Megatron-LM's on this hardware (away from the preset's own
    figure, which the test asserts before fitting).
    With 5 Megatron-LM runs beside 5 torchtitan ones the default fit takes the stack's figure in
    beside the hardware's constants and recovers it, with gemm_max where it was; the calibrated
    TOML stores it, and validate's predictions read it back."""
    from dataclasses import replace

    from paraplan.calibration import calibrate, default_names, stacks_to_fit
    from paraplan.calibration import with_constants as with_values

    shipped = load_cluster("a100-80g")
    own = shipped.efficiency.stack_kernel_efficiency.of("torchtitan")
    assert own is not None and abs(own - 0.85) > 0.05
    truth = with_values(shipped, {"kernel_efficiency.torchtitan": 0.85})
    runs = _runs(MEGATRON_A100 + TORCHTITAN_A100)
    exact = predict(runs, chosen_layouts(runs, truth), truth)
    runs = [replace(r, measured_s=float(s)) for r, s in zip(runs, exact, strict=True)]
    assert stacks_to_fit(runs) == ["torchtitan"]
    result = calibrate(shipped, runs)
    assert result.fitted == default_names(runs) and "kernel_efficiency.torchtitan" in result.fitted
    assert result.constants["kernel_efficiency.torchtitan"] == pytest.approx(0.85, abs=0.01)
    assert result.constants["gemm_max"] == pytest.approx(shipped.efficiency.gemm_max, abs=0.01)
    assert result.mape_after < 0.005 < result.mape_before
    assert "--fit " in result.command and "kernel_efficiency.torchtitan" in result.command
    import tomllib

    stored = tomllib.loads(result.toml)["efficiency"]["stack_kernel_efficiency"]
    assert stored["torchtitan"] == pytest.approx(result.constants["kernel_efficiency.torchtitan"])
    assert stored.get("deepspeed") == shipped.efficiency.stack_kernel_efficiency.deepspeed  # not fitted: kept
    # without Megatron-LM runs the stack's figure and gemm_max cannot be told apart: not fitted
    assert stacks_to_fit(runs[len(MEGATRON_A100) :]) == [] and stacks_to_fit(runs[:2] + runs[5:]) == []


# --- which constants the runs determine ----------------------------------------------------------------


def test_standard_error_worked_by_hand() -> None:
    """One constant that moves every run's log error by 1 per unit (a column of ones), four runs off
    by +/-0.1: s^2 = 4 x 0.01 / (4 - 1) = 0.013333; information 4 + 1e-3 (the prior over a range of
    1); standard error sqrt(0.013333 / 4.001) = 0.057728. With the runs fitted exactly the per-run
    error floor, 0.03, takes over: sqrt(0.0009 / 4.001) = 0.014998."""
    from paraplan.calibration import standard_errors

    ones, span = np.ones((4, 1)), np.array([1.0])
    assert standard_errors(ones, np.array([0.1, -0.1, 0.1, -0.1]), span)[0] == pytest.approx(0.057728, rel=1e-4)
    assert standard_errors(ones, np.zeros(4), span)[0] == pytest.approx(0.014998, rel=1e-4)


def test_robust_log_errors_worked_by_hand() -> None:
    """Huber's loss with its corner at 0.03 as residuals: errors within 0.03 unchanged; beyond,
    sqrt(2 x 0.03 x |r| - 0.03^2): 0.13 -> sqrt(0.0078 - 0.0009) = 0.0830662, -0.53 ->
    -sqrt(0.0318 - 0.0009) = -0.1757840. Beyond the corner the squares grow linearly, 2 x 0.03 per
    unit of |r|, and at the corner both branches give 0.03."""
    from paraplan.calibration import robust_log_errors

    out = robust_log_errors(np.array([0.01, -0.02, 0.03, 0.13, -0.53]))
    assert out == pytest.approx([0.01, -0.02, 0.03, 0.0830662, -0.1757840], rel=1e-6)
    assert out[4] ** 2 - out[3] ** 2 == pytest.approx(2 * 0.03 * (0.53 - 0.13))


def test_source_weights_worked_by_hand() -> None:
    """Three runs of source a, one of b: shares 1/3, 1/3, 1/3, 1, scaled to squares summing to 4:
    2/3 each for a's runs (0.816497), 2 for b's (1.414214); each source's squares sum to 2. Runs
    without a group are sources of their own: all weights 1."""
    from dataclasses import replace

    from paraplan.calibration import source_weights

    base = load_runs(PUBLIC)[0]
    grouped = [replace(base, group=g) for g in "aaab"]
    assert source_weights(grouped) == pytest.approx([0.816497, 0.816497, 0.816497, 1.414214], rel=1e-6)
    assert source_weights([replace(base, group="") for _ in range(4)]) == pytest.approx(np.ones(4))


def test_a_source_weighs_the_same_however_many_runs_it_lists(table1: list[Run]) -> None:
    """Three Table 1 runs as one source beside one more run as another: listing that run three
    times fits the same gemm_max (to the prior's weight), and without sources the three runs
    outvote the one: the fit moves toward the three's own fit, by more than that tolerance."""
    from dataclasses import replace

    start = data_sheet_a100()
    a, b = [replace(r, group="a") for r in table1[0:6:2]], replace(table1[7], group="b")
    once = fit([*a, b], start, ["gemm_max"]).values["gemm_max"]
    assert fit([*a, b, b, b], start, ["gemm_max"]).values["gemm_max"] == pytest.approx(once, abs=1e-3)
    ungrouped = [replace(r, group="") for r in [*a, b]]
    three = fit(a, start, ["gemm_max"]).values["gemm_max"]
    assert abs(fit(ungrouped, start, ["gemm_max"]).values["gemm_max"] - three) < abs(once - three) - 1e-3


def test_fewer_runs_than_constants_fit_what_they_determine(table1: list[Run]) -> None:
    """Five Table 1 runs, eight hardware constants: the default fit (which used to be refused) fits
    a GEMM constant, which every run's GEMMs see (gemm_max or gemm_half_dim: on runs of similar
    shapes the two trade off, and the elimination keeps the better determined), and keeps
    attention, which no run sees (none uses flash attention), at the preset's value; every
    constant fitted is determined, every one kept is named with its standard error; the other
    five runs come out closer than from the data sheet's constants."""
    from paraplan.calibration import calibrate, default_names, with_constants
    from paraplan.fit_parameters import DETERMINED_SHARE, PARAMETERS

    start, train, held_out = data_sheet_a100(), table1[0::2], table1[1::2]
    result = calibrate(start, train)
    assert len(train) < len(default_names(train))
    assert {"gemm_max", "gemm_half_dim"} & set(result.fitted) and "attention" not in result.fitted
    assert result.undetermined["attention"] > DETERMINED_SHARE * PARAMETERS["attention"].span()
    assert set(result.fitted) | set(result.undetermined) == set(default_names(train))
    assert not set(result.fitted) & set(result.undetermined)
    fitted = with_constants(start, result.constants)
    assert fitted.efficiency.attention == start.efficiency.attention
    before = mape(predict(held_out, chosen_layouts(held_out, start), start), held_out)
    after = mape(predict(held_out, chosen_layouts(held_out, fitted), fitted), held_out)
    assert after < before
    assert "not determined by these runs" in result.toml and "attention (+/-" in result.toml


def test_asked_constants_are_fitted_and_the_undetermined_named(table1: list[Run]) -> None:
    """--fit attention on runs without flash attention: fitted as asked (the prior holds it near the
    start), and named as undetermined, so the value is not taken for a measurement."""
    from paraplan.calibration import calibrate

    result = calibrate(data_sheet_a100(), table1[0::2], fit_names="gemm_max,attention")
    assert result.fitted == ["gemm_max", "attention"] and set(result.undetermined) == {"attention"}
    assert "fitted all the same" in result.toml


# --- the command --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def calibrated(invoke: Invoke, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, dict[str, Any]]:
    """`paraplan calibrate` on four public A100 runs: (runs file, TOML written, --json output)."""
    folder = tmp_path_factory.mktemp("calibrate")
    runs = write_runs(folder / "runs.csv", [r for r in public_rows() if r["id"] in TABLE1[:4]])
    out = folder / "a100-mine.toml"
    result = invoke("calibrate", "--hardware", "a100-80g", "--runs", str(runs), "--out", str(out), "--fit",
                    "gemm_max,intra_node", "--json")  # fmt: skip
    assert result.code == 0, result.err
    return runs, out, single_json_object(result.out)


def test_the_written_toml_loads_and_records_the_command(calibrated: tuple[Path, Path, dict[str, Any]]) -> None:
    runs, out, report = calibrated
    cluster = load_cluster(str(out))
    assert cluster.name == "a100-80g-calibrated" == report["hardware"]
    assert cluster.efficiency.gemm_max == pytest.approx(report["constants"]["gemm_max"])
    assert cluster.intra_node.link.efficiency == pytest.approx(report["constants"]["intra_node"])
    text = out.read_text()
    for words in ("paraplan calibrate", "--hardware a100-80g", f"--runs {runs}", f"--out {out}",
                  "--fit gemm_max,intra_node"):  # fmt: skip
        assert words in text, words
    assert report["command"] in text and "--fit gemm_max,intra_node" in report["command"]
    assert report["out"] == str(out)
    assert {f.name for f in out.parent.iterdir()} == {"runs.csv", out.name}  # no temporary file left behind


def test_the_report_has_the_errors_before_and_after(
    calibrated: tuple[Path, Path, dict[str, Any]], invoke: Invoke
) -> None:
    _, _, report = calibrated
    assert report["fitted"] == ["gemm_max", "intra_node"]
    assert report["mape_after"] <= report["mape_before"]
    assert len(report["runs"]) == 4 and all(r["flagged"] is None for r in report["runs"])
    errors = [abs(r["after_s"] / r["measured_s"] - 1) for r in report["runs"]]
    assert report["mape_after"] == pytest.approx(sum(errors) / 4, rel=1e-9)
    assert report["worst_after"] == pytest.approx(max(errors), rel=1e-9)
    # four runs of one GPU count: the intra-node links' efficiency is fitted as asked, and named
    # undetermined or not with its standard error (a number, never a placeholder)
    assert set(report["undetermined"]) <= {"gemm_max", "intra_node"}
    assert all(e > 0 for e in report["undetermined"].values())
    schema = invoke("schema", "calibrate").json()
    check_json_schema(schema, report)


def test_a_calibrated_hardware_is_accepted_by_validate(
    calibrated: tuple[Path, Path, dict[str, Any]], invoke: Invoke
) -> None:
    _, out, _ = calibrated
    result = invoke("validate", "--model", "llama2-7b", "--gpus", "8", "--hardware", str(out), "--plan", "TP1/DP8",
                    "--json")  # fmt: skip
    assert result.code == 0, result.err
    assert result.json()["hardware"] == "a100-80g-calibrated"


def test_out_refuses_the_runs_file(invoke: Invoke, tmp_path: Path) -> None:
    runs = write_runs(tmp_path / "runs.csv", [r for r in public_rows() if r["id"] in TABLE1[:2]])
    before = runs.read_bytes()
    one_error_line(invoke("calibrate", "--hardware", "a100-80g", "--runs", str(runs), "--out", str(runs), "--force",
                          "--fit", "gemm_max"), "--out")  # fmt: skip
    assert runs.read_bytes() == before


def test_out_refuses_an_existing_file_without_force(invoke: Invoke, tmp_path: Path) -> None:
    runs = write_runs(tmp_path / "runs.csv", [r for r in public_rows() if r["id"] in TABLE1[:2]])
    out = tmp_path / "mine.toml"
    out.write_text("# keep me\n")
    args = ["calibrate", "--hardware", "a100-80g", "--runs", str(runs), "--out", str(out), "--fit", "gemm_max"]
    one_error_line(invoke(*args), "--force")
    assert out.read_text() == "# keep me\n"
    assert invoke(*args, "--force").code == 0
    assert load_cluster(str(out)).name == "a100-80g-calibrated"


def test_a_failed_write_leaves_the_old_file_and_no_temporary(
    invoke: Invoke, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    runs = write_runs(tmp_path / "runs.csv", [r for r in public_rows() if r["id"] in TABLE1[:2]])
    out = tmp_path / "mine.toml"
    out.write_text("# keep me\n")

    def no_rename(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", no_rename)
    one_error_line(invoke("calibrate", "--hardware", "a100-80g", "--runs", str(runs), "--out", str(out), "--force",
                          "--fit", "gemm_max"), "--out")  # fmt: skip
    assert out.read_text() == "# keep me\n"
    assert {f.name for f in tmp_path.iterdir()} == {"runs.csv", "mine.toml"}


def test_runs_it_cannot_fit_are_left_out_and_listed(invoke: Invoke, tmp_path: Path) -> None:
    rows: list[dict[str, Any]] = [r for r in public_rows() if r["id"] in TABLE1[:3]]
    slower = str(10 * float(rows[0]["measured_step_time_s"]))
    far_off = {**rows[0], "id": "ten_times_slower", "measured_step_time_s": slower}
    # one GPU cannot hold a 1.7B model's 16-bit weights and Adam states next to its activations
    # at micro-batch 512 without recompute: the model finds the plan infeasible
    infeasible = {
        **rows[0],
        "id": "does_not_fit",
        "gpus": "1",
        "plan": "TP1/PP1/DP1",
        "knobs": rows[0]["knobs"].replace('"recompute": "full"', '"recompute": "none", "micro_batch": 512'),
    }
    base = write_runs(tmp_path / "base.csv", rows)
    noisy = write_runs(tmp_path / "noisy.csv", [*rows, far_off, infeasible])
    clean = invoke("calibrate", "--hardware", "a100-80g", "--runs", str(base), "--out", str(tmp_path / "a.toml"),
                   "--fit", "gemm_max", "--json")  # fmt: skip
    dirty = invoke("calibrate", "--hardware", "a100-80g", "--runs", str(noisy), "--out", str(tmp_path / "b.toml"),
                   "--fit", "gemm_max", "--json")  # fmt: skip
    assert clean.code == 0 and dirty.code == 0, dirty.err
    flagged = {r["run"]: r["flagged"] for r in dirty.json()["runs"] if r["flagged"]}
    assert set(flagged) == {"ten_times_slower", "does_not_fit"}
    assert "3x" in flagged["ten_times_slower"] and "infeasible" in flagged["does_not_fit"]
    # left out, not fitted through: the constants are those of the clean runs
    assert dirty.json()["constants"] == pytest.approx(clean.json()["constants"], rel=1e-9)


def test_a_constant_pushed_past_its_range_is_reported_at_its_bound(invoke: Invoke, tmp_path: Path) -> None:
    """Runs measured 2.5x faster than the preset predicts (within the 3x screen) would need GEMMs
    above the GPU's peak: gemm_max stops at its upper bound 1.0 and says so."""
    rows = [r for r in public_rows() if r["id"] in TABLE1[:3]]
    fast = [{**r, "measured_step_time_s": str(float(r["measured_step_time_s"]) / 2.5)} for r in rows]
    runs = write_runs(tmp_path / "fast.csv", fast)
    result = invoke("calibrate", "--hardware", "a100-80g", "--runs", str(runs), "--out", str(tmp_path / "c.toml"),
                    "--fit", "gemm_max", "--json")  # fmt: skip
    assert result.code == 0, result.err
    report = result.json()
    assert report["at_bound"] == ["gemm_max"]
    assert report["constants"]["gemm_max"] == pytest.approx(1.0, abs=1e-3)
    warning = [line for line in (tmp_path / "c.toml").read_text().splitlines() if "WARNING" in line]
    assert warning and "gemm_max" in warning[0] and "bound" in warning[0]  # said in the file it writes


def test_runs_of_other_hardware_are_not_fitted(invoke: Invoke, tmp_path: Path) -> None:
    rows: list[dict[str, Any]] = [r for r in public_rows() if r["id"] in TABLE1[:3]]
    other = {**rows[1], "id": "an_h100_run", "hardware": "h100-sxm"}
    runs = write_runs(tmp_path / "mixed.csv", [*rows, other])
    result = invoke("calibrate", "--hardware", "a100-80g", "--runs", str(runs), "--out", str(tmp_path / "m.toml"),
                    "--fit", "gemm_max", "--json")  # fmt: skip
    assert result.code == 0, result.err
    used = {r["run"] for r in result.json()["runs"] if not r["flagged"]}
    assert "an_h100_run" not in used


def test_runs_on_another_preset_of_the_die_are_fitted_on_their_own_preset(table1: list[Run]) -> None:
    """An A800 is the A100's die with NVLink capped at 400 GB/s (a800-80g's source lines): its runs
    calibrate the die's constants, each predicted on its own preset. Runs timed exactly at
    gemm_max 0.70, three on a100-80g and a TP8 one on a800-80g (7% slower there than on the
    A100's 600 GB/s links at the same constants, so the preset matters), are fitted from the data
    sheet's 0.86 back to 0.70; a run of another die is left out, and the TOML says which ran where."""
    from dataclasses import replace

    from paraplan.calibration import Presets, calibrate, with_constants

    a100, a800 = load_cluster("a100-80g"), load_cluster("a800-80g")
    truth = Presets(with_constants(a100, {"gemm_max": 0.70}), {"a800-80g": with_constants(a800, {"gemm_max": 0.70})})
    tp8 = replace(table1[3], label="tp8_on_a800", hardware="a800-80g")
    assert tp8.plan_text.startswith("TP8")
    same_die = [*table1[:3], tp8]
    exact = predict(same_die, chosen_layouts(same_die, truth), truth)
    on_a100 = predict([table1[3]], chosen_layouts([table1[3]], truth.main), truth.main)[0]
    assert exact[3] > 1.05 * on_a100
    runs = [replace(r, measured_s=float(s)) for r, s in zip(same_die, exact, strict=True)]
    other_die = replace(runs[1], label="on_h100", hardware="h100-sxm")
    result = calibrate(data_sheet_a100(), [*runs, other_die], fit_names="gemm_max")
    assert result.constants["gemm_max"] == pytest.approx(0.70, abs=2e-3)
    flagged = {r.run: r.flagged for r in result.runs if r.flagged}
    assert set(flagged) == {"on_h100"} and "another GPU" in str(flagged["on_h100"])
    assert "1 on a800-80g" in result.toml.splitlines()[1]


# --- bad run files ---------------------------------------------------------------------------------------

ROW = {"model": "llama2-7b", "gpus": 8, "plan": "TP1/PP1/DP8", "global_batch": 256, "seq_len": 4096,
       "step_time_s": 25.0}  # fmt: skip


@pytest.mark.parametrize(
    ("rows", "needle"),
    [
        ([{k: v for k, v in ROW.items() if k != "step_time_s"}], "step_time_s"),
        ([{**ROW, "model": "no-such-model"}], "no-such-model"),
        ([ROW], "cannot determine"),
        ([{**ROW, "plan": "TP3/PP1/DP8"}], "plan"),
        ([{**ROW, "step_time_s": "-4"}], "step_time_s"),
        ([{**ROW, "recompute": "sometimes"}], "recompute"),
    ],
)
def test_bad_run_files_are_refused(invoke: Invoke, tmp_path: Path, rows: list[dict[str, Any]], needle: str) -> None:
    runs = write_runs(tmp_path / "runs.csv", rows)
    out = tmp_path / "x.toml"
    one_error_line(invoke("calibrate", "--hardware", "a100-80g", "--runs", str(runs), "--out", str(out), "--fit",
                          "gemm_max,intra_node"), needle)  # fmt: skip
    assert not out.exists()


def test_a_missing_runs_file_is_refused(invoke: Invoke, tmp_path: Path) -> None:
    missing = tmp_path / "none.csv"
    one_error_line(invoke("calibrate", "--hardware", "a100-80g", "--runs", str(missing), "--out",
                          str(tmp_path / "x.toml")), str(missing))  # fmt: skip


def test_every_published_plan_is_feasible_under_its_stack() -> None:
    """A plan that trained in public fits under its stack: `validate` finds a feasible layout for
    every published run (its open knobs chosen). The torchtitan rows of 2024-08 that checkpointed
    every 2nd layer (selective_ac_option "2", gone in torchtitan 0.3.0) say so (`Stack.layer_sac`)."""
    runs = load_runs(PUBLIC)
    reasons: dict[str, str] = {}
    for hardware in sorted({r.hardware for r in runs}):
        mine = [r for r in runs if r.hardware == hardware]
        for run, reason in zip(mine, infeasible_reasons(mine, load_cluster(hardware)), strict=True):
            if reason:
                reasons[run.label] = reason
    assert reasons == {}

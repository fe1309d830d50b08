"""`paraplan compare`: the worked examples' commands, the contract's JSON, budgets, deadlines, plots.

The commands of examples/*.sh are read from the scripts and run in-process (`optimizer.cli.main`),
so the examples cannot drift from what the tests check.
"""

from __future__ import annotations

import contextlib
import io
import json
import shlex
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import paraplan.plot
from paraplan.cli import main

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"
CONTRACT_KEYS = {"hardware", "gpus", "best", "train_time_s", "goodput", "failures_per_hour", "checkpoint_interval_s",
                 "energy_kwh", "cost_usd"}
LAYOUT_KEYS = {"model", "hardware", "gpus", "layout", "feasible", "violations", "memory_bytes", "step_time_s",
               "time_s", "mfu", "hfu", "tflops_per_gpu", "tokens_per_s"}
A100_VS_4090 = ["compare", "--model", "llama2-70b", "--hardware", "a100-80g:256,rtx4090:2048", "--tokens", "2e12"]


@dataclass(frozen=True)
class Result:
    code: int | str | None
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


def invoke(args: list[str]) -> Result:
    out, err = io.StringIO(), io.StringIO()
    code: int | str | None = None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(args)
        except SystemExit as exc:
            code = exc.code
    return Result(code, out.getvalue(), err.getvalue())


def script_commands(path: Path) -> list[list[str]]:
    """The `$PARAPLAN ...` command lines of an example script (backslash continuations joined)."""
    text = path.read_text().replace("\\\n", " ")
    commands = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("$PARAPLAN "):
            commands.append(shlex.split(line)[1:])
    assert commands, f"no $PARAPLAN commands in {path}"
    return commands


@pytest.fixture(scope="module")
def a100_vs_4090() -> list[tuple[list[str], Result]]:
    return [(cmd, invoke(cmd)) for cmd in script_commands(EXAMPLES / "a100_vs_rtx4090_70b.sh")]


@pytest.fixture(scope="module")
def hopper_vs_blackwell() -> list[tuple[list[str], Result]]:
    return [(cmd, invoke(cmd)) for cmd in script_commands(EXAMPLES / "h100_vs_h200_vs_b200.sh")]


def _find(runs: list[tuple[list[str], Result]], *needles: str, absent: tuple[str, ...] = ()) -> Result:
    for cmd, result in runs:
        if all(n in cmd for n in needles) and not any(a in cmd for a in absent):
            return result
    raise AssertionError(f"no example command with {needles}")


def _by_hardware(obj: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["hardware"]: r for r in obj["results"]}


# --- the examples ---------------------------------------------------------------------------------


def test_example_commands_exit_0(a100_vs_4090: list[tuple[list[str], Result]],
                                 hopper_vs_blackwell: list[tuple[list[str], Result]]) -> None:
    for cmd, result in [*a100_vs_4090, *hopper_vs_blackwell]:
        assert result.code in (0, None), (cmd, result.code, result.err[-2000:])
        assert "Traceback" not in result.err


def test_example_scripts_are_executable() -> None:
    for name in ("a100_vs_rtx4090_70b.sh", "h100_vs_h200_vs_b200.sh"):
        path = EXAMPLES / name
        assert path.stat().st_mode & 0o111, name
        assert (EXAMPLES / name.replace(".sh", ".md")).is_file()


def test_table_and_verdict(a100_vs_4090: list[tuple[list[str], Result]]) -> None:
    out = _find(a100_vs_4090, "compare", "a100-80g:256,rtx4090:2048", absent=("--json", "--pricing")).out
    for words in ("a100-80g x 256", "rtx4090 x 2048", "goodput", "failures per hour", "time with failures",
                  "energy", "cost: total", "Verdict", "Fastest:", "Cheapest:"):
        assert words in out, words


def test_contract_json(a100_vs_4090: list[tuple[list[str], Result]]) -> None:
    obj = _find(a100_vs_4090, "--json").json()
    assert obj["tokens"] == 2e12
    results = _by_hardware(obj)
    assert set(results) == {"a100-80g", "rtx4090"}
    for r in results.values():
        assert r.keys() >= CONTRACT_KEYS
        assert r["best"].keys() >= LAYOUT_KEYS
        assert r["best"]["feasible"] is True
        assert {"hardware", "energy", "total", "staff"} <= r["cost_usd"].keys()
        cost = r["cost_usd"]
        assert cost["total"] == pytest.approx(cost["hardware"] + cost["energy"] + cost["staff"])
        assert r["train_time_s"] >= r["ideal_time_s"] > 0
        assert 0 < r["goodput"] <= 1
        assert r["train_time_s"] == pytest.approx(r["ideal_time_s"] / r["goodput"])
        assert r["ideal_time_s"] == pytest.approx(2e12 / r["best"]["tokens_per_s"])
        assert r["usd_per_billion_tokens"] == pytest.approx(cost["total"] / 2000)
        assert r["energy_kwh"] > 0 and r["checkpoint_interval_s"] > 0
    a100, rtx = results["a100-80g"], results["rtx4090"]
    assert (a100["gpus"], rtx["gpus"]) == (256, 2048)
    # presets: 256/80,000 + 32/15,000 = 0.005333/h; 2048/30,000 + 256/10,000 = 0.093867/h
    assert a100["failures_per_hour"] == pytest.approx(0.0053333, rel=1e-4)
    assert rtx["failures_per_hour"] == pytest.approx(0.0938667, rel=1e-4)
    assert rtx["failures_per_hour"] > 10 * a100["failures_per_hour"]
    assert rtx["goodput"] < a100["goodput"]
    assert rtx["checkpoint_interval_s"] < a100["checkpoint_interval_s"]
    assert any("Fastest:" in line for line in obj["verdict"])


def test_verdict_is_computed(a100_vs_4090: list[tuple[list[str], Result]]) -> None:
    obj = _find(a100_vs_4090, "--json").json()
    results = sorted(obj["results"], key=lambda r: r["train_time_s"])
    fast, slow = results[0], results[-1]
    ratio = slow["train_time_s"] / fast["train_time_s"]
    assert any(f"{ratio:.2f}x" in line and fast["hardware"] in line for line in obj["verdict"]), obj["verdict"]
    cheap = min(obj["results"], key=lambda r: r["cost_usd"]["total"])
    assert any(line.startswith(f"Cheapest: {cheap['hardware']}") for line in obj["verdict"])


def test_claim_720_hours(a100_vs_4090: list[tuple[list[str], Result]]) -> None:
    out = _find(a100_vs_4090, "--gpu-mtbf-hours", absent=("--restart-s",)).out
    assert "2.87" in out  # failures per hour: 2048/720 + 256/10,000
    assert "Warning: rtx4090 x 2048 loses" in out
    faster_restart = _find(a100_vs_4090, "--restart-s").out
    assert "Warning" not in faster_restart


def test_hopper_vs_blackwell(hopper_vs_blackwell: list[tuple[list[str], Result]]) -> None:
    out = _find(hopper_vs_blackwell, "compare", absent=("--pricing", "--json")).out
    for name in ("h100-sxm x 1024", "h200 x 1024", "b200 x 1024", "Verdict"):
        assert name in out
    obj = _find(hopper_vs_blackwell, "--deadline-days").json()
    assert obj["deadline_days"] == 90 and obj["budget_usd"] == 8e6
    for r in obj["results"]:
        assert r["deadline_met"] is True
        assert r["train_time_s"] <= 90 * 86400
        assert r["gpus"] <= 2048 and r["gpus"] in r["counts_searched"]
        assert r["budget_met"] == (r["cost_usd"]["total"] <= 8e6)


# --- counts, budgets, deadlines, no fit, bad input -------------------------------------------------


def test_same_failures_for_same_counts() -> None:
    obj = invoke(["compare", "--model", "llama2-7b", "--hardware", "h100-sxm:64,h200:64", "--tokens", "1e11",
                  "--json"]).json()
    rates = {r["failures_per_hour"] for r in obj["results"]}
    assert len(rates) == 1


def test_deadline_picks_fewer_gpus_and_is_met() -> None:
    result = invoke(["compare", "--model", "llama2-7b", "--hardware", "a100-80g:256", "--tokens", "2e11",
                     "--deadline-days", "30", "--json"])
    assert result.code == 0, result.err
    r = result.json()["results"][0]
    assert r["deadline_met"] is True
    assert r["gpus"] < 256
    assert r["train_time_s"] <= 30 * 86400


def test_impossible_deadline_exits_1() -> None:
    result = invoke(["compare", "--model", "llama2-70b", "--hardware", "a100-80g:64", "--tokens", "2e12",
                     "--deadline-days", "1", "--json"])
    assert result.code == 1
    r = result.json()["results"][0]
    assert r["best"] is None and r["deadline_met"] is False
    assert "deadline" in r["reason"]


def test_budget_is_checked() -> None:
    tight = invoke(["compare", "--model", "llama2-7b", "--hardware", "a100-80g:64", "--tokens", "1e11",
                    "--budget-usd", "100"])
    assert tight.code == 1
    assert "OVER BUDGET" in tight.out
    ample = invoke(["compare", "--model", "llama2-7b", "--hardware", "a100-80g:64", "--tokens", "1e11",
                    "--budget-usd", "1e7", "--json"])
    assert ample.code == 0, ample.err
    r = ample.json()["results"][0]
    assert r["budget_met"] is True and r["cost_usd"]["total"] <= 1e7
    assert r["gpus"] == 64  # the fastest within budget: all of them


def test_nothing_fits_exits_1_with_reason() -> None:
    result = invoke(["compare", "--model", "llama2-70b", "--hardware", "a100-80g:64,rtx4090:8", "--json"])
    assert result.code == 1
    results = _by_hardware(result.json())
    assert results["a100-80g"]["best"] is not None
    assert results["rtx4090"]["best"] is None
    assert "memory" in results["rtx4090"]["reason"]


def test_overrides_and_staff() -> None:
    base = invoke(["compare", "--model", "llama2-7b", "--hardware", "a100-80g:64", "--tokens", "1e11", "--json"])
    more = invoke(["compare", "--model", "llama2-7b", "--hardware", "a100-80g:64", "--tokens", "1e11", "--json",
                   "--usd-per-kwh", "0.16", "--staff-usd-per-day", "2000", "--gpu-mtbf-hours", "8000"])
    b, m = base.json()["results"][0], more.json()["results"][0]
    assert m["cost_usd"]["energy"] > 1.9 * b["cost_usd"]["energy"]  # twice the price, a longer run
    assert m["cost_usd"]["staff"] == pytest.approx(2000 * m["train_time_s"] / 86400)
    assert m["failures_per_hour"] == pytest.approx(64 / 8000 + 8 / 15000)
    assert "usd_per_kwh" in m["assumptions"]["overridden"]


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["--hardware", "nonesuch:8"], ["nonesuch"]),
        (["--hardware", "a100-80g"], ["a100-80g", "COUNT"]),
        (["--hardware", "a100-80g:0"], ["a100-80g:0"]),
        (["--hardware", "a100-80g:8", "--pue", "0.5"], ["--pue"]),
        (["--hardware", "a100-80g:8", "--pricing", "lease"], ["--pricing"]),
    ],
)
def test_bad_input_exits_2(args: list[str], names: list[str]) -> None:
    result = invoke(["compare", "--model", "llama2-7b", *args])
    assert result.code == 2
    assert result.out == ""
    lines = result.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error:"), result.err
    for name in names:
        assert name in lines[0]


# --- plot -----------------------------------------------------------------------------------------


def test_plot_is_written(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    png = tmp_path / "compare.png"
    result = invoke(["compare", "--model", "llama2-7b", "--hardware", "a100-80g:64,rtx4090:128", "--tokens", "1e11",
                     "--plot", str(png)])
    assert result.code == 0, result.err
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > 10_000


def test_plot_without_matplotlib_is_an_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def no_matplotlib(name: str) -> Any:
        raise ImportError(name)

    monkeypatch.setattr(paraplan.plot, "importlib", types.SimpleNamespace(import_module=no_matplotlib))
    result = invoke(["compare", "--model", "llama2-7b", "--hardware", "a100-80g:8", "--plot",
                     str(tmp_path / "x.png")])
    assert result.code == 2
    assert result.err.startswith("Error:") and "paraplan[plot]" in result.err
    assert not (tmp_path / "x.png").exists()

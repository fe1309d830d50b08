"""benchmarks/calibrate_holdout.py: the leave-one-source-out split, on a synthetic run list (the
benchmark itself takes minutes and is not run here)."""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from paraplan.calibration import Run
from paraplan.cost_models.models import load_model
from paraplan.hardware_specs.loader import load_cluster
from paraplan.hardware_specs.schema import Cluster

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))
holdout = importlib.import_module("calibrate_holdout")
MODEL = load_model("llama2-7b")


def run(label: str, group: str, hardware: str, framework: str = "megatron") -> Run:
    return Run(label, group, hardware, MODEL, 8, "TP1/PP1/DP8/CP1", {"framework": framework}, {}, 1.0)


# three sources on the A100 die (one on a same-die variant only), one on H100 only, one on both
RUNS = [
    run("a1", "alpha", "a100-80g"), run("a2", "alpha", "a100-80g"),
    run("b1", "beta", "a800-80g"), run("b2", "beta", "a100-80g", "torchtitan"),
    run("c1", "gamma", "a100-40g"), run("c2", "gamma", "h100-sxm"),
    run("d1", "delta", "h100-sxm"),
]  # fmt: skip


def test_one_fold_per_source_on_the_die_holding_out_exactly_its_runs_there() -> None:
    folds = holdout.folds(RUNS, "a100-80g")
    assert [f.source for f in folds] == ["alpha", "beta", "gamma"]  # delta never ran on the die
    by_source = {f.source: f for f in folds}
    assert [r.label for r in by_source["alpha"].test] == ["a1", "a2"]
    assert [r.label for r in by_source["alpha"].train] == ["b1", "b2", "c1"]
    assert [r.label for r in by_source["gamma"].test] == ["c1"]  # its H100 run is no A100 run
    assert [r.label for r in by_source["gamma"].train] == ["a1", "a2", "b1", "b2"]


def test_a_training_stack_narrows_what_calibrate_sees_never_what_is_predicted() -> None:
    from paraplan.cost_models.layout import Framework

    beta = {f.source: f for f in holdout.folds(RUNS, "a100-80g", Framework.MEGATRON)}["beta"]
    assert [r.label for r in beta.train] == ["a1", "a2", "c1"]
    assert [r.label for r in beta.test] == ["b1", "b2"]
    alpha = {f.source: f for f in holdout.folds(RUNS, "a100-80g", Framework.TORCHTITAN)}["alpha"]
    assert [r.label for r in alpha.train] == ["b2"]


def test_neither_calibration_of_a_fold_sees_the_held_out_sources_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[str, list[str]]] = []
    refits: list[list[str]] = []

    def fake_calibrate(start: Cluster, runs: list[Run], fit_names: str | None) -> Any:
        seen.append((start.name, [r.label for r in runs]))
        return SimpleNamespace(constants={"gemm_max": 0.5}, at_bound=[], runs=[SimpleNamespace(flagged=None)] * 2)

    @contextmanager
    def fake_fitted_without(runs: list[Run], source: str) -> Iterator[Any]:
        refits.append([r.label for r in runs if r.group != source])
        yield load_cluster

    monkeypatch.setattr(holdout, "calibrate", fake_calibrate)
    monkeypatch.setattr(holdout, "fitted_without", fake_fitted_without)
    monkeypatch.setattr(holdout, "assess", lambda runs, clusters=None: [])
    for fold in holdout.folds(RUNS, "a100-80g"):
        seen.clear()
        refits.clear()
        _, calibrated = holdout.run_fold(RUNS, fold, "a100-80g")
        held = {r.label for r in fold.test}
        assert len(seen) == 2 and all(start == "a100-80g" and not held & set(labels) for start, labels in seen)
        assert refits and not held & set(refits[0])
        assert set(calibrated) == {"cal-shipped", "cal-rest"}


def test_the_fitted_constants_go_onto_each_held_out_runs_own_preset(monkeypatch: pytest.MonkeyPatch) -> None:
    used: dict[str, Cluster] = {}
    monkeypatch.setattr(holdout, "assess", lambda runs, clusters: used.update(clusters) or [])
    holdout.predict_with([r for r in RUNS if r.label in ("b1", "c1")], load_cluster, {"gemm_max": 0.5})
    assert sorted(used) == ["a100-40g", "a800-80g"]
    assert used["a800-80g"].efficiency.gemm_max == 0.5
    # the variant's own links and memory stay (A800's NVLink is 400 GB/s, not A100's 600)
    assert used["a800-80g"].intra_node.link.bw_bytes_per_s == 200e9
    assert used["a100-40g"].gpu.memory_bytes < 50e9

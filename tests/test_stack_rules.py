"""Stack settings a framework or a model cannot run are refused where the question is asked, as
the launch config would refuse them: an answer for a plan that cannot be launched is no answer."""

from __future__ import annotations

import pytest

from paraplan.api import load_model
from paraplan.cost_models.errors import InputError
from paraplan.cost_models.layout import Framework
from paraplan.hardware_specs.loader import load_cluster
from paraplan.question import Question, stack_from
from paraplan.search import Constraints, rank_space


@pytest.mark.parametrize(
    ("setting", "frameworks"),
    [
        ("mtp", [Framework.DEEPSPEED, Framework.TORCHTITAN]),  # Megatron-LM's --mtp-num-layers
        ("token_drop", [Framework.DEEPSPEED, Framework.TORCHTITAN]),  # its capacity-factor flags
        ("cpu_checkpointing", [Framework.MEGATRON, Framework.TORCHTITAN]),  # DeepSpeed's checkpointing
    ],
)
def test_a_setting_only_another_framework_runs_is_refused(setting: str, frameworks: list[Framework]) -> None:
    for framework in frameworks:
        with pytest.raises(InputError, match=f"{setting.replace('_', '-')}: .* cannot run it"):
            stack_from(framework, {setting: True})
    runs = next(f for f in Framework if f not in frameworks)
    assert getattr(stack_from(runs, {setting: True}), setting) is True


def test_mtp_needs_a_model_with_mtp_modules() -> None:
    with pytest.raises(InputError, match="llama2-7b has no multi-token-prediction modules"):
        Question.of(load_model("llama2-7b"), load_cluster("a100-80g"), {"global_batch": 64}, {"mtp": True})


def test_cpu_checkpointing_makes_the_search_recompute_in_full() -> None:
    """DeepSpeed's cpu_checkpointing moves full recompute's checkpoints: a layout without full
    recompute breaks the limit, and the search finds the full-recompute variants of its cores
    (recompute trades memory, so the cores are priced at recompute none first)."""
    model, cluster = load_model("llama2-7b"), load_cluster("a100-80g")
    knobs = {"framework": "deepspeed", "global_batch": 64}
    on = Question.of(model, cluster, knobs, {"cpu_checkpointing": True})
    ranking = rank_space(on, [8], Constraints(), 3)
    assert ranking.groups
    best = ranking.evaluation.layouts.at(ranking.best[0])
    assert str(best.recompute) == "full"
    selective = Question.of(model, cluster, {**knobs, "recompute": "selective"}, {"cpu_checkpointing": True})
    ev = selective.evaluate(selective.space(8))
    assert ev.checks["cpu_checkpointing"].all()

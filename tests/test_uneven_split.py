"""One end of an uneven pipeline split given alone, and splits that do not add up.

Megatron-LM d98e8a64 (megatron/core/transformer/transformer_block.py `get_num_layers_to_build`)
takes --decoder-last-pipeline-num-layers without --decoder-first-pipeline-num-layers: the given
end leaves the pipeline and the other stages, the first among them, share the rest evenly. The
counts below are worked out by hand from that rule for Llama 2 7B's 32 layers. Before, paraplan
read the missing end as 0 layers and priced a PP2 pipeline of 8 layers for 32 (an MFU above 1,
and an internal error where the JSON schema refused it)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import Invoke
from hypothesis import given, settings
from hypothesis import strategies as st

from paraplan.cost_models.candidates import Layouts
from paraplan.cost_models.layout import Layout
from paraplan.cost_models.models import load_model
from paraplan.cost_models.stages import completed_end, most_layers, split_valid, stage_layers

BASE = ("validate", "--model", "llama2-7b", "--hardware", "h100-sxm", "--gpus", "8", "--seq-len", "4096",
        "--global-batch", "8", "--micro-batch", "1", "--virtual-stages", "1", "--json")  # fmt: skip


@pytest.mark.parametrize(
    ("layers", "pp", "given", "other"),
    [
        (32, 2, 8, 24),  # 32 - 8 = 24 layers on the one other stage
        (32, 4, 5, 9),  # 27 layers over 3 stages: 9 each, the other end among them
        (32, 4, 3, 0),  # 29 layers do not divide over 3 stages
        (126, 16, 6, 8),  # 120 over 15 stages: 8 + 14 x 8 + 6
        (126, 16, 7, 0),  # 119 over 15: Llama 3 405B's 7 + 14 x 8 + 7 needs both ends given
        (32, 1, 4, 0),  # no pipeline
        (32, 2, 32, 0),  # nothing left for the other stage
        (32, 2, 10**20, 0),  # a launch file's count beyond int64 (it overflowed the array arithmetic)
    ],
)
def test_the_missing_end_takes_an_even_share_of_the_rest(layers: int, pp: int, given: int, other: int) -> None:
    assert int(completed_end(layers, np.array([pp]), given)[0]) == other


def test_a_last_stage_given_alone_puts_the_rest_on_the_first(invoke: Invoke) -> None:
    alone = invoke(*BASE, "--plan", "TP1/PP2/DP4", "--last-stage-layers", "8").json()
    both = invoke(*BASE, "--plan", "TP1/PP2/DP4", "--first-stage-layers", "24", "--last-stage-layers", "8").json()
    even = invoke(*BASE, "--plan", "TP1/PP2/DP4").json()
    assert alone["feasible"]
    assert (alone["layout"]["first_stage_layers"], alone["layout"]["last_stage_layers"]) == (24, 8)
    assert [s["layers"] for s in alone["stages"]] == [24, 8]
    assert alone["step_time_s"] == pytest.approx(both["step_time_s"], rel=1e-12)
    # the 24-layer stage sets the pace: slower than 16 + 16
    assert alone["step_time_s"] > even["step_time_s"]


def test_an_end_given_as_zero_is_an_end_not_given(invoke: Invoke) -> None:
    """0 is the even split's marker (the knob's help), so 0 beside a count completes as if left out."""
    zero = invoke(*BASE, "--plan", "TP1/PP2/DP4", "--first-stage-layers", "0", "--last-stage-layers", "8").json()
    assert (zero["layout"]["first_stage_layers"], zero["layout"]["last_stage_layers"]) == (24, 8)


def test_a_first_stage_given_alone_on_four_stages(invoke: Invoke) -> None:
    out = invoke(*BASE, "--plan", "TP1/PP4/DP2", "--first-stage-layers", "5").json()
    assert out["feasible"]
    assert [s["layers"] for s in out["stages"]] == [5, 9, 9, 9]


def test_a_rest_the_other_stages_cannot_share_is_infeasible_with_its_reason(invoke: Invoke) -> None:
    result = invoke(*BASE, "--plan", "TP1/PP4/DP2", "--last-stage-layers", "3")
    assert result.exception is None and result.code == 1, (result.code, result.err)
    out = result.json()
    assert not out["feasible"]
    assert any("32 layers less the last stage's 3 do not split evenly over the other 3 stages" in v
               for v in out["violations"])  # fmt: skip


@settings(max_examples=25, deadline=None)
@given(pp=st.sampled_from([2, 4]), first=st.integers(0, 40), last=st.integers(0, 40))
def test_any_given_split_is_answered_with_ratios_in_range(invoke: Invoke, pp: int, first: int, last: int) -> None:
    """Whatever counts are given, the answer is feasible or says why not; an invalid split is
    priced as the even split, so MFU and HFU stay ratios of the peak (at most 1)."""
    args = ["--plan", f"TP1/PP{pp}/DP{8 // pp}"]
    if first:
        args += ["--first-stage-layers", str(first)]
    if last:
        args += ["--last-stage-layers", str(last)]
    result = invoke(*BASE, *args)
    assert result.exception is None and result.code in (0, 1), (result.code, result.err)
    out = result.json()
    assert 0.0 < out["mfu"] <= out["hfu"] <= 1.0
    layers = load_model("llama2-7b").num_layers
    if out["feasible"] and out["stages"]:
        assert sum(s["layers"] for s in out["stages"]) == layers


def test_a_launch_file_with_one_end_beyond_the_model_is_read_as_the_even_split(tmp_path: Path, invoke: Invoke) -> None:
    launch = tmp_path / "pretrain.sh"
    launch.write_text("torchrun --nproc-per-node 8 pretrain_gpt.py --pipeline-model-parallel-size 2 "
                      "--decoder-last-pipeline-num-layers 99999999999999999999 --micro-batch-size 1\n")  # fmt: skip
    result = invoke(
        "validate", "--model", "llama2-7b", "--hardware", "h100-sxm", "--from-launch", str(launch), "--json"
    )
    assert result.exception is None and result.code == 0, (result.code, result.err)
    out = result.json()
    assert (out["layout"]["first_stage_layers"], out["layout"]["last_stage_layers"]) == (0, 0)
    assert any("99999999999999999999" in note for note in out["launch_notes"])


@settings(max_examples=200, deadline=None)
@given(layers=st.integers(2, 130), pp=st.integers(1, 16), v=st.sampled_from([1, 2, 3]), first=st.integers(0, 40),
       last=st.integers(0, 40))  # fmt: skip
def test_the_most_loaded_stage_carries_at_least_an_even_share(layers: int, pp: int, v: int, first: int,
                                                              last: int) -> None:  # fmt: skip
    """Whatever counts a layout holds, valid or not, some stage carries at least ceil(l / p) of the
    l layers (pigeonhole), and a valid split's stages hold every layer exactly once."""
    model = load_model("llama2-7b").model_copy(update={"num_layers": layers})
    lay = Layouts.of([Layout(pp=pp, dp=1, virtual_stages=v, global_batch=pp * v, micro_batch=1,
                             first_stage_layers=first, last_stage_layers=last)])  # fmt: skip
    f, middle, end = (float(x[0]) for x in stage_layers(model, lay))
    assert float(most_layers(model, lay)[0]) >= -(-layers // pp)
    if pp > 1 and (first or last) and split_valid(model, lay)[0]:
        assert f + middle * (pp - 2) + end == layers

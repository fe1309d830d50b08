"""Uneven pipeline splits with virtual stages in Megatron-LM's flags: the layer-count flags where
Megatron-LM d98e8a64 takes them, else --pipeline-model-parallel-layout (written chunk by chunk as
paraplan prices the split, `stages.chunk_layers`), and the importer reading a layout back.

The expected layout strings are worked out by hand from the grammar of Megatron-LM d98e8a64's
pipeline_parallel_layer_layout.py: chunks split by '|', listed virtual stage by virtual stage
(chunk i is virtual stage i // PP of rank i % PP), 't' a decoder layer, 'E' the embedding, 'L'
the loss, 'm' an MTP module, 'x*n' / '(...)*n' repeats."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from paraplan.cost_models.frameworks import default_stack
from paraplan.cost_models.layout import Framework, Layout, parse_knob
from paraplan.cost_models.models import ModelSpec, load_model
from paraplan.cost_models.stack import Stack
from paraplan.cost_models.stages import chunk_layers, split_options
from paraplan.emit import check_emitted, emit_launch
from paraplan.launch.importer import layout_from_launch, parse_megatron_layout, read_launch_text

DSV3 = str(Path(__file__).parent / "data" / "hf_configs" / "deepseek-v3.json")
# The DeepSeek-V3 split of Megatron-Bridge's 26.04.01 B200 run (benchmarks/data/runs_public.csv
# row mbridge260401_dgx-b200_deepseek_v3_256gpu): 61 layers on PP8 x VPP2, first rank 8, last 5,
# each middle rank (61 - 13) / 6 = 8. Megatron-LM takes no count flags for it (5 does not divide
# by 2). paraplan prices an even share per chunk: 4 + 4 on ranks 0-6, 3 + 2 on rank 7 (the extra
# layer in its first chunk, the final one holding the MTP module and the loss):
#   chunk 0 (rank 0): E t*4;  chunks 1-6: t*4;  chunk 7 (rank 7): t*3;
#   chunks 8-14 (ranks 0-6, second virtual stage): t*4;  chunk 15 (rank 7): t*2 m L
DSV3_LAYOUT = "Et*4|(t*4|)*6t*3|(t*4|)*7t*2mL"
# the recipe's own layout (Megatron-Bridge c81012934 DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_MX_V2
# pp_layout): the same rank totals, rank 7 split 4 + 1
BRIDGE_LAYOUT = "Et*4|(t*4|)*14tmL"


def _dsv3_plan() -> tuple[ModelSpec, Layout]:
    lay = Layout(tp=1, pp=8, dp=32, ep=32, virtual_stages=2, micro_batch=1, global_batch=4096, seq_len=4096,
                 precision="fp8", first_stage_layers=8, last_stage_layers=5)  # fmt: skip
    return load_model(DSV3), lay


def _value(text: str, flag: str) -> str:
    words = text.replace("'", "").split()
    return words[words.index(flag) + 1]


def _imported(text: str, model: ModelSpec) -> tuple[Layout, Stack, list[str]]:
    knobs, stack, _, notes = layout_from_launch(read_launch_text(text, "megatron"), model)
    lay = Layout(**{k: parse_knob(k, v) for k, v in knobs.items()})
    return lay, default_stack(Framework.MEGATRON).with_overrides(**stack), notes


def _ranks(layout: str, pp: int) -> list[list[int]]:
    """Decoder layers per rank and virtual stage of a layout string."""
    chunks = parse_megatron_layout(layout)
    v = len(chunks) // pp
    return [[chunks[k * pp + r].count("t") for k in range(v)] for r in range(pp)]


def test_chunk_layers_spells_out_the_priced_split() -> None:
    # DeepSeek-V3 (61 layers) on PP8 x VPP2, first rank 8, last 5: (61 - 13) / 6 = 8 per middle
    # rank, 5 = 3 + 2 on the last; Llama 3 405B's 126 layers on PP16 as 7 + 14 x 8 + 7 (Dubey et al.
    # 2024, Sec 3.3.2) with 2 virtual stages: 7 = 3 + 4 on the first rank (the embedding's chunk
    # lighter), 4 + 3 on the last
    assert chunk_layers(61, 8, 2, 8, 5) == [[4, 4]] * 7 + [[3, 2]]
    assert chunk_layers(126, 16, 2, 7, 7) == [[3, 4]] + [[4, 4]] * 14 + [[4, 3]]
    assert chunk_layers(32, 4, 3, 7, 7) == [[2, 2, 3], [3, 3, 3], [3, 3, 3], [3, 2, 2]]
    assert chunk_layers(64, 8, 2, 0, 0) == [[4, 4]] * 8  # the even split
    assert chunk_layers(32, 4, 1, 7, 9) == [[7], [8], [8], [9]]
    for bad in ((61, 8, 2, 8, 6), (61, 8, 2, 0, 0), (32, 1, 2, 7, 7), (32, 2, 2, 7, 7)):
        with pytest.raises(ValueError):
            chunk_layers(*bad)


def test_deepseek_v3_split_is_written_as_a_layout() -> None:
    """The plan of `paraplan validate --model deepseek-v3.json --hardware b200 --gpus 256 --plan
    TP1/PP8/DP32/EP32 --virtual-stages 2 --precision fp8 --seq-len 4096 --global-batch 4096 --mtp
    --first-stage-layers 8 --last-stage-layers 5 --emit megatron`, which was refused."""
    model, lay = _dsv3_plan()
    text = emit_launch("megatron", model, lay, Stack(mtp=True, main_grads="bf16"))
    assert _value(text, "--pipeline-model-parallel-layout") == DSV3_LAYOUT
    # Megatron-LM asserts the layout is given without the other split flags (arguments.py) and
    # takes the virtual stages from it
    for flag in ("--num-virtual-stages-per-pipeline-rank", "--decoder-first-pipeline-num-layers",
                 "--decoder-last-pipeline-num-layers", "--account-for-embedding-in-pipeline-split"):  # fmt: skip
        assert flag not in text
    assert check_emitted("megatron", text) == []
    assert _ranks(DSV3_LAYOUT, 8) == [[4, 4]] * 7 + [[3, 2]]


def test_layout_round_trip_and_the_recipe_layout() -> None:
    model, lay = _dsv3_plan()
    stack = Stack(mtp=True, main_grads="bf16")
    text = emit_launch("megatron", model, lay, stack)
    back, back_stack, notes = _imported(text, model)
    assert back == lay and back_stack.mtp
    assert not any("layout" in n for n in notes)
    # the published run's layout: the same rank totals, so the same plan, and a note that rank 7's
    # 4 + 1 chunks are priced as an even share
    recipe, _, notes = _imported(text.replace(DSV3_LAYOUT, BRIDGE_LAYOUT), model)
    assert (recipe.virtual_stages, recipe.first_stage_layers, recipe.last_stage_layers) == (2, 8, 5)
    assert any("rank 7: 4+1" in n and "even share" in n for n in notes)


def test_dense_layout() -> None:
    """Llama 3 8B, 32 layers on PP4 x VPP2, first and last rank 7 layers, the middle ranks
    (32 - 14) / 2 = 9: 7 and 9 do not divide by 2, and neither 33 nor 34 into 8 chunks (the
    embedding/loss accounting). Chunks: rank 0 3 + 4, ranks 1-2 5 + 4, rank 3 4 + 3:
    E t*3 | t*5 | t*5 | t*4 (rank 3) | t*4 | t*4 | t*4 | t*3 L (rank 3)."""
    model = load_model("llama3-8b")
    lay = Layout(tp=2, pp=4, dp=4, virtual_stages=2, micro_batch=1, global_batch=64, first_stage_layers=7,
                 last_stage_layers=7)  # fmt: skip
    text = emit_launch("megatron", model, lay, Stack())
    layout = _value(text, "--pipeline-model-parallel-layout")
    assert layout == "Et*3|(t*5|)*2(t*4|)*4t*3L"
    assert _ranks(layout, 4) == [[3, 4], [5, 4], [5, 4], [4, 3]]
    assert "--num-virtual-stages-per-pipeline-rank" not in text and "--mtp-num-layers" not in text
    assert check_emitted("megatron", text) == []
    assert _imported(text, model)[0] == lay


@pytest.mark.parametrize(
    ("layout", "flags"),
    [
        # one chunk per rank: the counts always do
        (dict(pp=4, virtual_stages=1, first_stage_layers=7, last_stage_layers=7),
         {"--decoder-first-pipeline-num-layers": "7", "--decoder-last-pipeline-num-layers": "7"}),
        # 6, 6 and (32 - 12) / 2 = 10 per middle rank all divide by 2
        (dict(pp=4, virtual_stages=2, first_stage_layers=6, last_stage_layers=6),
         {"--decoder-first-pipeline-num-layers": "6", "--decoder-last-pipeline-num-layers": "6",
          "--num-virtual-stages-per-pipeline-rank": "2"}),
    ],
)  # fmt: skip
def test_count_flags_where_they_suffice(layout: dict[str, int], flags: dict[str, str]) -> None:
    model = load_model("llama3-8b")
    lay = Layout(tp=2, dp=4, micro_batch=1, global_batch=64, **layout)
    text = emit_launch("megatron", model, lay, Stack())
    assert "--pipeline-model-parallel-layout" not in text
    for flag, value in flags.items():
        assert _value(text, flag) == value
    assert _imported(text, model)[0] == lay


def test_embedding_and_loss_accounting_where_it_suffices() -> None:
    # Llama 2 13B: 40 layers + embedding + loss = 42 = PP3 x VPP2 x 7: 14 per rank, the first and
    # last rank 13 layers
    model = load_model("llama2-13b")
    lay = Layout(tp=2, pp=3, dp=2, virtual_stages=2, micro_batch=1, global_batch=12, first_stage_layers=13,
                 last_stage_layers=13)  # fmt: skip
    text = emit_launch("megatron", model, lay, Stack())
    assert "--account-for-embedding-in-pipeline-split" in text and "--account-for-loss-in-pipeline-split" in text
    assert _value(text, "--num-virtual-stages-per-pipeline-rank") == "2"
    assert "--pipeline-model-parallel-layout" not in text
    assert _imported(text, model)[0] == lay


def test_layouts_paraplan_cannot_express_are_noted() -> None:
    model, lay = _dsv3_plan()
    text = emit_launch("megatron", model, lay, Stack(mtp=True, main_grads="bf16"))

    def read(layout: str) -> tuple[Layout, list[str]]:
        back, _, notes = _imported(text.replace(DSV3_LAYOUT, layout), model)
        return back, notes

    # middle ranks of 9 and 7 layers: no first/last knob says that
    back, notes = read("Et*4|t*5|t*3|(t*4|)*4t*3|(t*4|)*7t*2mL")
    assert (back.virtual_stages, back.first_stage_layers, back.last_stage_layers) == (2, 0, 0)
    assert any("same count on each middle rank" in n for n in notes)
    # 60 decoder layers: Megatron-LM rejects it
    back, notes = read("Et*4|(t*4|)*6t*3|(t*4|)*7tmL")
    assert (back.first_stage_layers, back.last_stage_layers) == (0, 0)
    assert any("rejects it (60 decoder layers" in n for n in notes)
    # the MTP module before decoder layers
    back, notes = read("Et*4|(t*4|)*6t*3m|(t*4|)*7t*2L")
    assert any("rejects it (decoder layers after an MTP module" in n for n in notes)
    # the MTP module alone at the end of rank 6 (Megatron-LM's "MTP standalone"): priced on the last rank
    back, notes = read("Et*4|(t*4|)*6t*5|(t*4|)*6t*4m|L")
    assert (back.virtual_stages, back.first_stage_layers, back.last_stage_layers) == (2, 8, 5)
    assert any("MTP modules on rank 6 are priced on the last rank" in n for n in notes)
    # a repeat that spells out absurdly long is not expanded
    for huge in ("(t|)*99999999999", "(t*999999|)*999", "Et*999999" * 50 + "L"):
        back, notes = read(huge)
        assert any("cannot parse it" in n for n in notes)
        assert (back.virtual_stages, back.first_stage_layers) == (1, 0)


def test_search_tries_uneven_splits_where_no_chunk_aligned_split_exists() -> None:
    """DeepSeek-V3's 61 layers divide into no PP8 x VPP2 chunks, even with the embedding and loss
    counted as layers (63 and 62 are not multiples of 16), so the search tries lighter first/last
    ranks: ceil(61 / 8) = 8, first and last 5..8 layers, the 6 middle ranks taking the rest evenly
    and at least as many: 61 - f - l = 48 is the only multiple of 6 that works, so f + l = 13,
    each middle rank 8 (the most loaded in every case); of (5, 8), (6, 7), (7, 6), (8, 5) the
    search takes the one with the lightest last stage, the published split. Models that split
    evenly keep their options."""
    dsv3 = load_model(DSV3)
    assert dsv3.num_layers == 61
    assert split_options(dsv3, 8, 2) == [(0, 0), (8, 5)]
    for first, last in split_options(dsv3, 8, 2)[1:]:
        assert min(min(chunks) for chunks in chunk_layers(61, 8, 2, first, last)) >= 1
    assert split_options(load_model("llama2-70b"), 8, 2) == [(0, 0)]  # 80 = 8 x 2 x 5
    nemotron_like = load_model("llama3-8b").model_copy(update={"num_layers": 30})
    assert split_options(nemotron_like, 4, 8) == [(0, 0), (7, 7)]  # 30 + 2 = 4 x 8 one-layer chunks


@given(layers=st.integers(1, 200), pp=st.integers(2, 16), v=st.integers(1, 4))
def test_every_split_the_search_tries_is_one_the_pipeline_can_hold(layers: int, pp: int, v: int) -> None:
    """Property: each uneven split `split_options` offers spells out (`chunk_layers` raises on a
    split that is not one) with every layer placed, and no chunk is empty unless the embedding or
    the loss takes a layer's place in it (l + 1 or l + 2 chunk-aligned)."""
    model = load_model("llama3-8b").model_copy(update={"num_layers": layers})
    accounted = any((layers + extra) % (pp * v) == 0 for extra in (1, 2))
    for first, last in split_options(model, pp, v)[1:]:
        chunks = chunk_layers(layers, pp, v, first, last)
        assert sum(map(sum, chunks)) == layers
        assert accounted or min(map(min, chunks)) >= 1


def test_every_uneven_split_emits_and_reads_back() -> None:
    """Property, over every split `stages.split_valid` accepts for Llama 3 8B (32 layers) on PP 2, 3,
    5 and 8 with 1-3 virtual stages and at most 10 layers on the first and last ranks: Megatron-LM's flags say it (count flags, accounting or layout), the
    layout's chunks are `chunk_layers`'s, and emit-then-import gives the plan back."""
    model = load_model("llama3-8b")
    seen = 0
    for pp in (2, 3, 5, 8):
        for v in (1, 2, 3):
            for f in range(1, 11):
                for last in range(1, 11):
                    rest = 32 - f - last
                    if (pp == 2 and rest) or (pp > 2 and (rest <= 0 or rest % (pp - 2))) or pp * v > 34:
                        continue
                    lay = Layout(pp=pp, dp=1, virtual_stages=v, micro_batch=1, global_batch=pp,
                                 first_stage_layers=f, last_stage_layers=last)  # fmt: skip
                    text = emit_launch("megatron", model, lay, Stack())
                    if "--pipeline-model-parallel-layout" in text:
                        seen += 1
                        assert _ranks(_value(text, "--pipeline-model-parallel-layout"), pp) == chunk_layers(
                            32, pp, v, f, last
                        )
                    assert _imported(text, model)[0] == lay, text
    assert seen > 50

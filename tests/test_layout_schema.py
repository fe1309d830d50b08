"""The knob schema (cost_models/layout.py): every Layout field is a knob with its metadata, one
validation path for every input, the compact words and their legend, and the CLI options that
derive from the fields. Nothing here lists the knobs by hand: the fields are the source."""

from __future__ import annotations

import re
from typing import Any, get_type_hints

import click
import pytest

from paraplan.cost_models.candidates import COLUMNS, Layouts
from paraplan.cost_models.layout import (
    BOOLS,
    DEGREES,
    ENUMS,
    KNOBS,
    SEARCHED,
    SETTINGS,
    Knob,
    KnobArgs,
    Layout,
    Recompute,
    Role,
    bounds,
    layout_short,
    layout_words,
    legend,
    parse_knob,
)
from paraplan.cost_models.stack import STACK_FIELDS
from paraplan.explain import layout_difference

FIELDS = tuple(Layout.model_fields)
INTS = tuple(n for n in FIELDS if n not in ENUMS and n not in BOOLS)


# ------------------------------------------------------------------ one schema


def test_every_field_is_a_knob_with_its_metadata() -> None:
    assert tuple(KNOBS) == FIELDS
    for name in FIELDS:
        knob = KNOBS[name]
        assert isinstance(knob, Knob)
        assert knob.help.strip(), name
        assert knob.word(getattr(Layout(), name)), name


def test_roles_partition_the_fields() -> None:
    assert sorted(DEGREES + SEARCHED + SETTINGS) == sorted(FIELDS)
    assert DEGREES == ("tp", "pp", "dp", "cp", "ep")
    for name in DEGREES:
        assert KNOBS[name].role is Role.DEGREE


def test_knob_args_are_the_layout_fields() -> None:
    # the Python API's typed keyword arguments stay equal to the fields
    assert set(get_type_hints(KnobArgs)) == set(FIELDS)


def test_the_candidate_matrix_has_a_column_per_field() -> None:
    assert COLUMNS == FIELDS
    lay = Layout(tp=8, pp=4, dp=2, recompute=Recompute.FULL, sequence_parallel=True)
    matrix = Layouts.of([lay, Layout()])
    assert matrix.at(0) == lay and matrix.at(1) == Layout()
    assert list(matrix.tp) == [8, 1] and list(matrix.recompute) == [int(Recompute.FULL), int(Recompute.NONE)]


def test_only_time_for_memory_knobs_are_marked_as_trading() -> None:
    # the search prunes on these (optimizer/search.py expansion_needed): a searched knob that is
    # not a pure time-for-memory trade must not be marked
    trading = {n for n in FIELDS if KNOBS[n].trades_memory}
    assert trading <= set(SEARCHED)
    assert {"recompute", "recompute_layers", "offload"} <= trading


# ------------------------------------------------------------------ parse_knob: the one validation path


@pytest.mark.parametrize("name", INTS)
def test_integer_bounds_are_the_fields_bounds(name: str) -> None:
    lo, hi = bounds(name)
    assert parse_knob(name, lo) == lo and parse_knob(name, str(hi)) == hi
    for outside in (lo - 1, hi + 1):
        with pytest.raises(ValueError, match=rf"is not in {lo}\.\.{hi}"):
            parse_knob(name, str(outside))
    # pydantic enforces the same bounds on the model itself
    with pytest.raises(ValueError):
        Layout(**{name: hi + 1})


@pytest.mark.parametrize(
    ("text", "expected"),
    [("8", 8), (" 8 ", 8), ("8.0", 8), ("1e3", 1000), (16, 16), (4.0, 4)],
)
def test_whole_numbers_in_any_spelling(text: object, expected: int) -> None:
    assert parse_knob("tp", text) == expected


@pytest.mark.parametrize("text", ["8.5", 8.5, "eight", "nan", "inf", "-inf", True, None, [8], "9" * 30])
def test_not_a_whole_number(text: object) -> None:
    with pytest.raises(ValueError, match="not a whole number") as info:
        parse_knob("tp", text)
    assert "\n" not in str(info.value) and len(str(info.value)) < 120


@pytest.mark.parametrize("name", sorted(ENUMS))
def test_enums_read_their_labels(name: str) -> None:
    enum = ENUMS[name]
    for member in enum:
        assert parse_knob(name, member.label) is member
        assert parse_knob(name, f" {member.label.upper()} ") is member
        assert parse_knob(name, member) is member
        assert str(member) == member.label
    with pytest.raises(ValueError, match=re.escape(f"is not one of {', '.join(enum.labels())}")):
        parse_knob(name, "bogus")


@pytest.mark.parametrize(
    ("text", "expected"),
    [("true", True), ("YES", True), ("on", True), ("1", True), ("false", False), ("no", False), ("off", False),
     ("0", False)],
)  # fmt: skip
def test_booleans(text: str, expected: bool) -> None:
    for name in BOOLS:
        assert parse_knob(name, text) is expected


def test_booleans_refuse_other_words() -> None:
    for name in BOOLS:
        with pytest.raises(ValueError, match="is not true or false"):
            parse_knob(name, "maybe")


def test_unknown_knobs_are_named_with_the_accepted_ones() -> None:
    with pytest.raises(ValueError, match="unknown knob 'tensor_parallel'; accepted: tp, pp") as info:
        parse_knob("tensor_parallel", 8)
    assert all(name in str(info.value) for name in FIELDS)


def test_layout_json_uses_labels_and_round_trips() -> None:
    lay = Layout(tp=8, pp=2, **{name: list(enum)[-1] for name, enum in ENUMS.items()})
    dumped = lay.model_dump(mode="json")
    for name, enum in ENUMS.items():
        assert dumped[name] in enum.labels()
    assert Layout.model_validate(dumped) == lay
    schema = Layout.model_json_schema()["properties"]
    for name, enum in ENUMS.items():
        assert schema[name]["enum"] == list(enum.labels())
    with pytest.raises(ValueError):
        Layout.model_validate({**dumped, "no_such_knob": 1})


# ------------------------------------------------------------------ words and the legend


def _sample_layouts() -> list[Layout]:
    """A layout with every degree > 1 and full recompute, then each knob in turn at each of its
    non-default values (enums, booleans) or two above its lowest (integers)."""
    base = Layout(tp=8, pp=4, dp=2, cp=2, ep=2, recompute=Recompute.FULL)
    out = [base]
    for name in (*SEARCHED, *SETTINGS):
        values: list[Any]
        if name in ENUMS:
            values = list(ENUMS[name])
        elif name in BOOLS:
            values = [True]
        else:
            values = [bounds(name)[0] + 2]
        out += [base.model_copy(update={name: v}) for v in values]
    return out


def _legend_patterns() -> list[re.Pattern[str]]:
    """Each legend key ('mbN', 'rc-MODE', 'fN/lN', ...) as a pattern: N a number, an upper-case
    placeholder after '-' a lower-case word."""
    patterns = []
    for item in legend().split("; "):
        for key in item.split(":")[0].split("/"):
            regex = re.sub(r"(?<=-)[A-Z]{3,}", "[a-z0-9]+", re.escape(key))
            regex = re.sub(r"[Nn]$", r"\\d+", regex)
            patterns.append(re.compile(regex))
    return patterns


def _unexplained(lay: Layout) -> list[str]:
    patterns = _legend_patterns()
    dims, *words = layout_short(lay).split(" ")
    tokens = [*dims.split("/"), *words]
    return [t for t in tokens if not any(p.fullmatch(t) for p in patterns)]


@pytest.mark.parametrize("lay", _sample_layouts(), ids=lambda lay: layout_short(lay))
def test_the_legend_explains_every_compact_word_of_a_searched_knob(lay: Layout) -> None:
    unexplained = [t for t in _unexplained(lay) if t not in _setting_words()]
    assert not unexplained, f"{layout_short(lay)!r}: {unexplained} not in the legend {legend()!r}"


def _setting_words() -> set[str]:
    words = set()
    for name in SETTINGS:
        for value in ENUMS.get(name, ()):
            short = KNOBS[name].short(value)
            if short:
                words.add(short)
    return words


def test_the_legend_explains_the_precision_words() -> None:
    for lay in _sample_layouts():
        assert not _unexplained(lay), layout_short(lay)


def test_words_name_every_non_default_searched_knob() -> None:
    lay = Layout(tp=8, pp=4, dp=2, virtual_stages=2, micro_batch=4, recompute=Recompute.FULL, recompute_layers=2,
                 zero=1, sequence_parallel=True)  # fmt: skip
    short = layout_short(lay).split(" ")
    assert short[0] == "TP8/PP4/DP2"
    assert {"v2", "mb4", "rc-full", "x2", "Z1", "SP"} <= set(short)
    words = layout_words(lay).split(", ")
    assert words[0] == "TP8/PP4/DP2"
    assert {"VPP2", "micro-batch 4", "recompute full (2 layers per chunk)", "ZeRO-1", "SP"} <= set(words)
    # defaults need no mention
    assert layout_short(Layout(tp=8, pp=4, dp=2)).split(" ")[0] == "TP8/PP4/DP2"
    assert not {"v1", "SP", "x0", "off-none"} & set(layout_short(Layout(tp=8, pp=4, dp=2)).split(" "))


# ------------------------------------------------------------------ CLI options from the fields


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _options(command: str) -> dict[str, click.Parameter]:
    from paraplan.cli import cli

    assert isinstance(cli, click.Group)
    cmd = cli.commands[command]
    return {opt: p for p in cmd.params for opt in (*p.opts, *p.secondary_opts)}


@pytest.mark.parametrize("command", ["validate", "memory", "optimize", "compare"])
def test_every_setting_and_searched_knob_is_an_option(command: str) -> None:
    options = _options(command)
    for name in (*SETTINGS, *SEARCHED):
        assert _flag(name) in options, f"{command} lacks {_flag(name)}"
        param = options[_flag(name)]
        if name in BOOLS:
            assert f"--no-{name.replace('_', '-')}" in options
        if name in ENUMS:
            assert isinstance(param.type, click.Choice)
            assert list(param.type.choices) == list(ENUMS[name].labels())
    for name in STACK_FIELDS:
        assert _flag(name) in options


def test_optimize_fixes_and_bounds_every_degree() -> None:
    options = _options("optimize")
    for name in DEGREES:
        assert {_flag(name), f"--min-{name}", f"--max-{name}"} <= set(options)


def test_a_layout_difference_names_only_settings_that_mean_something_on_both_sides() -> None:
    base = Layout(tp=4, pp=1, dp=256, cp=1, micro_batch=2, global_batch=1024, seq_len=4096)

    def like(lay: Layout, **change: Any) -> Layout:
        return Layout(**{**lay.model_dump(), **change})

    # CP2 by all-gather against no CP: how K/V move means nothing without CP
    split = like(base, dp=128, cp=2, micro_batch=4, cp_comm="allgather")
    assert layout_difference(split, base) == "DP128 vs DP256, CP2 vs CP1, micro-batch 4 vs micro-batch 2"
    # full recompute of 1 layer against none: the layer count is part of the first, not a difference
    full = like(base, recompute="full", recompute_layers=1)
    assert layout_difference(full, base) == "recompute full vs recompute none"
    # both full: the layer counts differ, and are named
    assert layout_difference(full, like(full, recompute_layers=2)) == "1 layer per chunk vs 2 layers per chunk"

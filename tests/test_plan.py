"""optimizer.plan.parse_plan: every plan shape of the contract, its defaults and its errors."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paraplan.cost_models.errors import InputError
from paraplan.plan import Plan, parse_plan

# ---------------------------------------------------------------------------- accepted shapes


@pytest.mark.parametrize(
    ("text", "gpus", "expected"),
    [
        # the contract's examples
        ("TP8/PP4/DP8", 256, Plan(tp=8, pp=4, dp=8, cp=1, ep=1, virtual_stages=None)),
        ("tp2 pp16 dp64", 2048, Plan(tp=2, pp=16, dp=64, cp=1, ep=1, virtual_stages=None)),
        ("TP8/PP8/CP2/DP4", 512, Plan(tp=8, pp=8, dp=4, cp=2, ep=1, virtual_stages=None)),
        ("TP1/PP1/DP8/EP8", 8, Plan(tp=1, pp=1, dp=8, cp=1, ep=8, virtual_stages=None)),
        ("TP4/PP8/VPP2", 256, Plan(tp=4, pp=8, dp=8, cp=1, ep=1, virtual_stages=2)),
        # every separator
        ("TP8xPP4xDP8", 256, Plan(tp=8, pp=4, dp=8, cp=1, ep=1, virtual_stages=None)),
        ("TP8,PP4,DP8", 256, Plan(tp=8, pp=4, dp=8, cp=1, ep=1, virtual_stages=None)),
        ("TP8 PP4 DP8", 256, Plan(tp=8, pp=4, dp=8, cp=1, ep=1, virtual_stages=None)),
        ("TP8 / PP4 , DP8", 256, Plan(tp=8, pp=4, dp=8, cp=1, ep=1, virtual_stages=None)),
        ("  TP8/PP4/DP8  ", 256, Plan(tp=8, pp=4, dp=8, cp=1, ep=1, virtual_stages=None)),
        # case-insensitive
        ("tp8/pp4/dp8", 256, Plan(tp=8, pp=4, dp=8, cp=1, ep=1, virtual_stages=None)),
        ("Tp8/pP4/Dp8", 256, Plan(tp=8, pp=4, dp=8, cp=1, ep=1, virtual_stages=None)),
        ("tp8XPP4xdp8", 256, Plan(tp=8, pp=4, dp=8, cp=1, ep=1, virtual_stages=None)),
        # order does not matter
        ("DP8/PP4/TP8", 256, Plan(tp=8, pp=4, dp=8, cp=1, ep=1, virtual_stages=None)),
        ("EP8/CP2/DP4/TP1/PP1", 8, Plan(tp=1, pp=1, dp=4, cp=2, ep=8, virtual_stages=None)),
    ],
)
def test_accepted_shapes(text: str, gpus: int, expected: Plan) -> None:
    plan = parse_plan(text, gpus)
    assert plan == expected
    assert plan.gpus == gpus


def test_defaults_are_one() -> None:
    plan = parse_plan("DP64", 64)
    assert (plan.tp, plan.pp, plan.dp, plan.cp, plan.ep) == (1, 1, 64, 1, 1)
    assert plan.virtual_stages is None


@pytest.mark.parametrize(
    ("text", "gpus", "dp"),
    [
        ("TP4/PP8/VPP2", 256, 8),  # the contract's example: DP = 256 / (4*8)
        ("TP8/PP4", 256, 8),
        ("TP8/PP8/CP2", 512, 4),  # CP counts in the divisor
        ("TP1/PP1/EP8", 8, 8),  # EP does not
        ("PP4", 4, 1),
        ("TP8", 8, 1),
        ("CP2", 2048, 1024),
    ],
)
def test_missing_dp_is_inferred(text: str, gpus: int, dp: int) -> None:
    plan = parse_plan(text, gpus)
    assert plan.dp == dp
    assert plan.tp * plan.pp * plan.dp * plan.cp == gpus


def test_ep_is_not_part_of_the_gpu_product() -> None:
    plan = parse_plan("TP2/PP2/DP4/EP4", 16)
    assert plan.ep == 4
    assert plan.gpus == 16


def test_vpp_is_none_when_absent_and_kept_when_given() -> None:
    assert parse_plan("TP8/PP4/DP8", 256).virtual_stages is None
    assert parse_plan("TP8/PP4/DP8/VPP3", 256).virtual_stages == 3


# ---------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("text", "gpus"),
    [
        ("TP8/PP4/DP4", 256),  # product != gpus
        ("TP8/PP4/DP8", 512),
        ("TP1/PP1/DP8/CP2", 8),  # CP counts in the product
        ("TP8/PP4/DP8/EP2", 512),
    ],
)
def test_product_must_equal_gpus(text: str, gpus: int) -> None:
    with pytest.raises(InputError) as info:
        parse_plan(text, gpus)
    message = str(info.value)
    assert text in message
    assert str(gpus) in message


@pytest.mark.parametrize(
    ("text", "gpus"),
    [
        ("TP3/PP4", 256),  # 12 does not divide 256
        ("TP8/PP4", 100),
        ("TP16", 8),  # TP*PP*CP larger than the GPU count
        ("TP2/CP3", 8),
    ],
)
def test_dp_not_inferable(text: str, gpus: int) -> None:
    with pytest.raises(InputError, match="DP"):
        parse_plan(text, gpus)


@pytest.mark.parametrize(
    "text",
    ["TP8/TP8/PP4", "TP8/PP4/DP4/dp2", "tp2/Tp2", "VPP2/VP2/TP8/PP4/DP8", "CP2 CP2"],
)
def test_duplicate_component(text: str) -> None:
    with pytest.raises(InputError, match="twice"):
        parse_plan(text, 256)


@pytest.mark.parametrize("text", ["TP0/PP4/DP8", "TP8/PP0/DP8", "TP8/PP4/DP0", "CP0", "EP0", "VPP0", "tp00"])
def test_zero_degree(text: str) -> None:
    with pytest.raises(InputError):
        parse_plan(text, 256)


@pytest.mark.parametrize(
    "text",
    [
        "TP8/PP4/DP8/XP2",  # unknown component
        "TP8/PP4/QQ8",
        "TP8/SP2/PP4",
        "TP8/PP4/DPP8",
        "TP8/PP4/DP8/ZERO1",
        "MP8/PP4/DP8",
    ],
)
def test_unknown_component(text: str) -> None:
    with pytest.raises(InputError):
        parse_plan(text, 256)


@pytest.mark.parametrize(
    "text",
    [
        "hello",
        "8/4/8",  # numbers without a dimension
        "TP/PP/DP",  # dimensions without numbers
        "TP8;PP4;DP8",  # unsupported separator
        "TP8-PP4-DP8",
        "TP-8/PP4/DP8",
        "TP8.5/PP4/DP8",
        "TP8/PP4/DP8!",
        "{TP8}",
        "TP 8 garbage",
        "TP\u221e",
    ],
)
def test_garbage(text: str) -> None:
    with pytest.raises(InputError):
        parse_plan(text, 256)


@pytest.mark.parametrize("text", ["", " ", "   \t\n", "/", "x", ",,,", " / x , "])
def test_empty(text: str) -> None:
    with pytest.raises(InputError):
        parse_plan(text, 256)


def test_error_names_the_plan() -> None:
    with pytest.raises(InputError) as info:
        parse_plan("TP8/PP4/FOO3", 256)
    assert "TP8/PP4/FOO3" in str(info.value)


def test_out_of_range_component_is_refused_by_the_plan_with_its_knobs_range() -> None:
    # VPP has a tighter range than the other degrees (virtual_stages <= 10,000): the plan's own
    # error must name the plan, not a later knob check that never mentions --plan.
    with pytest.raises(InputError) as info:
        parse_plan("V10001", 1)
    assert "V10001" in str(info.value) and "10000" in str(info.value)
    assert parse_plan("V10000", 1).virtual_stages == 10_000


def test_huge_degree_is_an_input_error() -> None:
    with pytest.raises(InputError):
        parse_plan("TP" + "9" * 40, 256)


def test_number_beyond_int_conversion_limit_is_an_input_error() -> None:
    # Python refuses int() of strings over 4300 digits with a plain ValueError; the parser
    # must still answer with InputError (the CLI only maps InputError to "Error:" / exit 2).
    with pytest.raises(InputError):
        parse_plan("TP" + "9" * 5000, 256)


# ---------------------------------------------------------------------------- properties

DIMS = ("tp", "pp", "dp", "cp", "ep", "vpp")
SEPARATORS = ("/", "x", "X", ",", " ", " / ", ", ", "  ", " x ", "\t")


def _case(name: str, style: int) -> str:
    if style == 0:
        return name.lower()
    if style == 1:
        return name.upper()
    return "".join(c.upper() if i % 2 else c.lower() for i, c in enumerate(name))


@st.composite
def formatted_plans(draw: st.DrawFn) -> tuple[str, int, Plan]:
    degree = st.integers(min_value=1, max_value=64)
    values = {d: draw(degree) for d in DIMS}
    gpus = values["tp"] * values["pp"] * values["dp"] * values["cp"]
    # Which components to write: TP/PP/CP/EP may be left out when 1, DP may always be left out
    # (it is inferred), VPP may be left out (then None).
    written = []
    for d in DIMS:
        optional = d in ("dp", "vpp") or values[d] == 1
        if not optional or draw(st.booleans()):
            written.append(d)
    if not written:
        written.append("tp")
    written = draw(st.permutations(written))
    parts = [f"{_case(d, draw(st.integers(0, 2)))}{values[d]}" for d in written]
    text = parts[0]
    for part in parts[1:]:
        text += draw(st.sampled_from(SEPARATORS)) + part
    expected = Plan(
        tp=values["tp"], pp=values["pp"], dp=values["dp"], cp=values["cp"], ep=values["ep"],
        virtual_stages=values["vpp"] if "vpp" in written else None,
    )  # fmt: skip
    return text, gpus, expected


@settings(max_examples=150, deadline=None)
@given(formatted_plans())
def test_formatted_plan_round_trips(case: tuple[str, int, Plan]) -> None:
    text, gpus, expected = case
    assert parse_plan(text, gpus) == expected


def _parses_or_input_error(text: str, gpus: int) -> None:
    try:
        plan = parse_plan(text, gpus)
    except InputError as exc:
        message = str(exc)
        assert message
    else:
        assert plan.tp * plan.pp * plan.dp * plan.cp == gpus
        assert min(plan.tp, plan.pp, plan.dp, plan.cp, plan.ep) >= 1
        assert plan.virtual_stages is None or plan.virtual_stages >= 1


@settings(max_examples=200, deadline=None)
@given(st.text(), st.integers(min_value=1, max_value=1_000_000))
def test_arbitrary_text_parses_or_raises_input_error(text: str, gpus: int) -> None:
    _parses_or_input_error(text, gpus)


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet="tpdcevxTPDCEVX0123456789/, =\t*-", max_size=30), st.integers(min_value=1, max_value=4096))
def test_plan_like_text_parses_or_raises_input_error(text: str, gpus: int) -> None:
    _parses_or_input_error(text, gpus)

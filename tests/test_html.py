"""`--html FILE`: the self-contained report of validate, optimize and compare."""

from __future__ import annotations

import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from click.testing import CliRunner

import paraplan
from paraplan import html as report
from paraplan.results import CompareResult, OptimizeResult, ValidateResult

HOSTILE = '<script>alert(1)</script> "$x$" & <img src=x onerror=alert(2)>'
VOID = {"meta", "br", "hr", "img", "input", "link", "area", "base", "col", "embed", "source", "track", "wbr"}


class Page(HTMLParser):
    """The tags, headings and references of a page, checking that every element is closed."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.open: list[str] = []
        self.tags: list[str] = []
        self.headings: list[str] = []
        self.refs: list[str] = []
        self._heading = False
        self.feed(text)
        self.close()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.refs += [value or "" for name, value in attrs if name in ("href", "src", "xlink:href", "action")]
        self._heading = tag in ("h1", "h2", "h3")
        if tag not in VOID:
            self.open.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        self.refs += [value or "" for name, value in attrs if name in ("href", "src", "xlink:href", "action")]

    def handle_endtag(self, tag: str) -> None:
        assert self.open and self.open[-1] == tag, f"</{tag}> closes <{self.open[-1] if self.open else None}>"
        self.open.pop()
        self._heading = False

    def handle_data(self, data: str) -> None:
        if self._heading:
            self.headings.append(data)


def check(text: str, charts: int) -> Page:
    page = Page(text)
    assert not page.open
    assert text.startswith("<!DOCTYPE html>")
    assert page.tags.count("svg") == charts
    assert page.tags.count("figure") == charts
    assert "script" not in page.tags and "link" not in page.tags and "img" not in page.tags
    assert "http://" not in text and "https://" not in text and "//" not in "".join(page.refs)
    assert all(ref.startswith("#") for ref in page.refs)
    assert "paraplan " in text
    return page


@pytest.fixture(scope="module")
def optimized() -> OptimizeResult:
    return paraplan.optimize(model="llama2-7b", gpus="32..64", hardware="h100-sxm", top=3, tokens=2e11, scaling=True)


@pytest.fixture(scope="module")
def compared() -> CompareResult:
    return paraplan.compare(model="llama2-7b", hardware="a100-80g:8,rtx4090:16", scaling=True)


@pytest.fixture(scope="module")
def validated() -> ValidateResult:
    return paraplan.validate("llama2-7b", 64, "h100-sxm", "TP2/PP2/DP16")


def test_optimize_range_report(optimized: OptimizeResult, tmp_path: Path) -> None:
    path = tmp_path / "optimize.html"
    report.write_optimize_html(path, optimized)
    text = path.read_text(encoding="utf-8")
    page = check(text, charts=3)  # time terms, memory, scaling
    assert {"Inputs", "Scaling of h100-sxm"} <= set(page.headings)
    for word in ("Pareto front", "days", "error bar", "MFU", "activations", "capacity", "llama2-7b"):
        assert word in text
    assert [p.name for p in tmp_path.iterdir()] == ["optimize.html"], "no temporary file left"


def test_compare_report_escapes_names_from_user_files(compared: CompareResult) -> None:
    entries = [e.model_copy(update={"hardware": f"{HOSTILE} {i}"}) for i, e in enumerate(compared.results)]
    text = report.compare_html(compared.model_copy(update={"model": HOSTILE, "results": entries}))
    page = check(text, charts=5)  # failures, cost and energy, time terms, memory, scaling
    assert {"Inputs", "Verdict", "Scaling", f"Scaling of {HOSTILE} 0", f"Scaling of {HOSTILE} 1"} <= set(page.headings)
    for word in ("goodput", "failures per hour", "MWh", "cost: energy", "Pareto front"):
        assert word in text
    assert all(report._e(line) in text for line in compared.verdict)
    assert "<script" not in text and "<img" not in text and "&lt;script&gt;alert(1)&lt;/script&gt;" in text


def test_validate_report(validated: ValidateResult) -> None:
    text = report.validate_html(validated)
    page = check(text, charts=2)  # time terms, memory
    assert {"Inputs", "Result", "Time per step", "Memory"} <= set(page.headings)
    assert "FEASIBLE" in text and "reserve" in text
    assert text == report.validate_html(validated), "the same result gives the same page"
    hostile = report.validate_html(validated.model_copy(update={"model": HOSTILE, "hardware": HOSTILE}))
    assert HOSTILE not in hostile and "<script" not in hostile and "<img" not in hostile
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in hostile


def test_infeasible_plan_lists_its_violations() -> None:
    r = paraplan.validate("llama2-7b", 1, "a100-80g", "TP1/PP1/DP1", offload="none")
    text = report.validate_html(r)
    check(text, charts=2)
    assert "INFEASIBLE" in text and r.violations and all(report._e(v) in text for v in r.violations)


def test_pareto_front() -> None:
    # (time, cost), lower is better: (3, 1) and (1, 3) and (2, 2) trade; (3, 3) is beaten by (2, 2)
    assert report.pareto([(3, 1), (1, 3), (2, 2), (3, 3), (2, 2)]) == [True, True, True, False, True]


def test_unwritable_path_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(paraplan.InputError, match="cannot write --html"):
        report._write(tmp_path / "missing" / "r.html", "<p>x</p>")
    (tmp_path / "dir.html").mkdir()
    with pytest.raises(paraplan.InputError, match="cannot write --html"):
        report._write(tmp_path / "dir.html", "<p>x</p>")
    assert [p.name for p in tmp_path.iterdir()] == ["dir.html"], "the temporary file is removed"


def test_missing_matplotlib_is_bad_input(validated: ValidateResult, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(paraplan.InputError, match="--html needs matplotlib"):
        report.check_available()
    with pytest.raises(paraplan.InputError, match=r"pip install 'paraplan\[plot\]'"):
        report.validate_html(validated)


def test_cli_writes_the_report(tmp_path: Path) -> None:
    from paraplan.cli import cli

    path = tmp_path / "v.html"
    args = ["validate", "--model", "llama2-7b", "--gpus", "64", "--hardware", "h100-sxm", "--plan", "TP2/PP2/DP16"]
    result = CliRunner().invoke(cli, [*args, "--html", str(path)])
    assert result.exit_code == 0, result.output
    check(path.read_text(encoding="utf-8"), charts=2)


def test_charts_show_the_first_20_layouts_the_table_all() -> None:
    result = paraplan.optimize(model="llama2-7b", gpus=64, hardware="a100-80g", top=30)
    layouts = result.results[0].layouts
    assert len(layouts) > 20
    text = report.optimize_html(result)
    check(text, charts=2)
    assert "each of the first 20 layouts" in text
    assert f"<td>{len(layouts)}</td>" in text  # the table's last rank
    assert f"#{len(layouts)} TP" not in text and "#20 TP" in text  # the charts' last label is #20

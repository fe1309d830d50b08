"""Hostile input, round 2 (issue 14): each case found is a regression test, then wider fuzzing.

Part 1 pins every case of issue 14: FP8 JSON, contradictory recompute knobs, zero prices, markup
and escape sequences in names, the calibrate CSV's bounds, `calibrate --out` over existing
files, special files as inputs, byte-order marks, output-stream failures, `--top` bounds and
the messages that blamed the wrong thing.

Part 2 widens the fuzzing (hypothesis) to the classes round 1 (tests/test_hostile.py) lacks:
valid options drawn together against each other, every field of the hardware TOML, of a
config.json and of the calibrate CSV, special files, and failing output streams. The property,
for every generated input:

* the exit status is 0, 1 or 2 (141 for a broken pipe, 3 for an unwritable stdout), never a
  traceback;
* exit 2 prints exactly one `Error:` line and nothing on stdout;
* `--json` prints exactly one JSON object (the contract's checks from round 1 included);
* no file in the working directory changes except the one named by --out/--html.

Commands run in-process (`paraplan.cli.main`) with the working directory in a fresh temporary
folder, on tiny models, so each call takes milliseconds. Example counts scale with
PARAPLAN_FUZZ_EXAMPLES_SCALE as in round 1 (default 1: over 5,000 generated inputs); the
profile (HYPOTHESIS_PROFILE=ci derandomizes) comes from conftest.py.
"""

from __future__ import annotations

import contextlib
import copy
import csv
import functools
import hashlib
import io
import json
import math
import os
import re
import stat
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import pytest
from hypothesis import given
from hypothesis import strategies as st
from test_hostile import (
    CALL_LIMIT_S,
    GPT2,
    LLAMA,
    MIXTRAL,
    F,
    Result,
    assert_all_finite,
    check,
    check_error,
    fuzz_settings,
    parse_json,
    run_cli,
    time_limit,
)

import paraplan.hardware_specs as hardware_specs
from paraplan.cli import main
from paraplan.cost_models.layout import BOOLS, ENUMS, KNOBS, SEARCHED, SETTINGS, bounds
from paraplan.cost_models.models import FAMILIES
from paraplan.cost_models.stack import STACK_CHOICES, STACK_FIELDS

PRESETS_DIR = Path(hardware_specs.__file__).parent / "presets"
ROOT = os.geteuid() == 0  # root reads a file with no permissions and may make device nodes

# max_examples per fuzz test in the default profile; their sum is the count of generated inputs.
NEW_EXAMPLES = {
    "combo_validate": 220,
    "combo_optimize": 100,
    "combo_compare": 80,
    "toml_fields": 1550,
    "config_fields": 1000,
    "csv_columns": 200,
    "special_files": 1620,
    "output_streams": 250,
}


def fuzz(name: str) -> Callable[[F], F]:
    return fuzz_settings(NEW_EXAMPLES[name])


# --- running in a working directory that must not change ----------------------------------------

Snapshot = dict[str, tuple[int, int, int, int, str]]


def snapshot(root: Path) -> Snapshot:
    """Every path under `root` (links not followed): mode, inode, size, mtime, and a digest of
    small regular files (a rewrite of the same size inside one clock tick is still seen)."""
    out: Snapshot = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath, name)
            info = os.lstat(path)
            digest = ""
            if stat.S_ISREG(info.st_mode) and info.st_size <= 2**20 and os.access(path, os.R_OK):
                digest = hashlib.blake2b(path.read_bytes(), digest_size=8).hexdigest()
            out[str(path.relative_to(root))] = (info.st_mode, info.st_ino, info.st_size, info.st_mtime_ns, digest)
    return out


def run_here(work: Path, argv: list[str], written: tuple[str, ...] = (), limit_s: float = CALL_LIMIT_S) -> Result:
    """`paraplan ARGV` with `work` as the working directory, interrupted past `limit_s`; fails if
    any file there other than `written` (paths relative to `work`) was created, changed or removed."""
    before = snapshot(work)
    with contextlib.chdir(work), time_limit(limit_s):
        res = run_cli(argv)
    after = snapshot(work)
    changed = sorted(p for p in before.keys() | after.keys() if before.get(p) != after.get(p) and p not in written)
    assert not changed, f"the command changed files it was not asked to write: {changed}\n{res}"
    return res


def write_json(path: Path, obj: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj))
    return path


def check_calibrate_json(res: Result) -> None:
    assert res.code in (0, 2), f"calibrate exits 0 or 2\n{res}"
    if res.code == 0:
        obj = parse_json(res)
        assert_all_finite(obj, res)
    else:
        check_error(res)


TINY_GB = ("--global-batch", "16", "--seq-len", "512")  # a small step: every call stays fast

# =================================================================================================
# Part 1: the cases of issue 14
# =================================================================================================

# --- 1. FP8 --json: MFU/HFU in range, one JSON object -------------------------------------------

FP8_HARDWARE = ["h100-sxm", "h200", "b200", "l40s", "rtx4090"]


@pytest.mark.parametrize("hardware", FP8_HARDWARE)
@pytest.mark.parametrize("command", ["optimize", "validate", "compare"])
def test_fp8_json_is_one_object_with_utilization_in_range(command: str, hardware: str) -> None:
    if command == "optimize":
        argv = ["optimize", "--model", "llama3-8b", "--hardware", hardware, "--gpus", "8", "--top", "2"]
    elif command == "validate":
        argv = ["validate", "--model", "llama3-8b", "--hardware", hardware, "--gpus", "8", "--plan", "TP1/PP1/DP8"]
    else:
        argv = ["compare", "--model", "llama3-8b", "--hardware", f"{hardware}:8"]
    res = run_cli([*argv, "--precision", "fp8", "--json"])
    assert res.code in (0, 1), f"FP8 is a valid precision on {hardware}\n{res}"
    obj = check(res, "layout" if command == "validate" else command)
    assert obj is not None
    # check() bounds mfu/hfu of every layout; compare's best layouts are checked there too.
    if command == "compare":
        assert all(e.get("best") for e in obj["results"]), f"no layout on {hardware}\n{res}"


# --- 2. contradictory recompute knobs ------------------------------------------------------------

RECOMPUTE_CLASH = ("--recompute", "none", "--recompute-layers", "1")


@pytest.mark.parametrize(
    "argv",
    [
        ["validate", "--model", "llama2-7b", "--gpus", "8", "--hardware", "a100-80g", "--plan", "TP8"],
        ["memory", "--model", "llama2-7b", "--gpus", "8", "--hardware", "a100-80g", "--plan", "TP8"],
        ["optimize", "--model", "llama2-7b", "--gpus", "8", "--hardware", "a100-80g"],
        ["compare", "--model", "llama2-7b", "--hardware", "a100-80g:8"],
    ],
    ids=["validate", "memory", "optimize", "compare"],
)
@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_recompute_none_with_recompute_layers_is_bad_input(argv: list[str], as_json: bool) -> None:
    res = run_cli([*argv, *RECOMPUTE_CLASH, *(["--json"] if as_json else [])])
    assert res.code == 2, f"contradictory knobs are bad input\n{res}"
    check_error(res, ("recompute",))


def runs_csv(path: Path, rows: list[dict[str, str]], columns: list[str] | None = None, bom: bool = False) -> Path:
    columns = columns or list(dict.fromkeys(k for row in rows for k in row))
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, extrasaction="ignore")
    writer.writeheader()
    writer.writerows(rows)
    path.write_text(("\ufeff" if bom else "") + buffer.getvalue(), encoding="utf-8")
    return path


TINY_CONFIG = json.dumps(LLAMA)
RUN_A = {"model": "", "config": TINY_CONFIG, "gpus": "8", "plan": "TP2/PP2/DP2", "global_batch": "16",
         "seq_len": "512", "step_time_s": "", "knobs": '{"micro_batch": 2}'}  # fmt: skip
RUN_B = {"model": "", "config": TINY_CONFIG, "gpus": "4", "plan": "TP2/DP2", "global_batch": "16", "seq_len": "512",
         "step_time_s": "", "knobs": ""}  # fmt: skip


@functools.cache
def predicted_step_s(plan_row: tuple[tuple[str, str], ...]) -> str:
    """The model's own step time for a run: a CSV of such runs fits at once (the fit converges
    in one step), which keeps every valid calibrate call in the fuzzing fast."""
    row = dict(plan_row)
    with tempfile.TemporaryDirectory() as tmp:
        config = write_json(Path(tmp) / "config.json", LLAMA)
        knobs = json.loads(row["knobs"]) if row["knobs"] else {}
        extra = [a for k, v in knobs.items() for a in (f"--{k.replace('_', '-')}", str(v))]
        res = run_cli(["validate", "--model", str(config), "--gpus", row["gpus"], "--hardware", "a100-80g",
                       "--plan", row["plan"], "--global-batch", row["global_batch"], "--seq-len", row["seq_len"],
                       *extra, "--json"])  # fmt: skip
    obj = check(res, "layout")
    assert obj is not None and res.code == 0, str(res)
    return repr(obj["step_time_s"])


def good_runs() -> list[dict[str, str]]:
    return [{**row, "step_time_s": predicted_step_s(tuple(sorted(row.items())))} for row in (RUN_A, RUN_B)]


def calibrate_argv(runs: Path, out: str, *extra: str) -> list[str]:
    return ["calibrate", "--hardware", "a100-80g", "--runs", str(runs), "--out", out, *extra]


def test_recompute_clash_in_calibrate_csv_is_bad_input(tmp_path: Path) -> None:
    for cell in ('{"recompute": "none", "recompute_layers": 1}',):
        rows = good_runs()
        rows[0]["knobs"] = cell
        runs = runs_csv(tmp_path / "runs.csv", rows)
        res = run_here(tmp_path, calibrate_argv(runs, "out.toml", "--fit", "gemm_max"))
        assert res.code == 2, str(res)
        check_error(res, ("recompute",))
    # the same pair as knob columns
    rows = [{**r, "recompute": "none", "recompute_layers": "1"} for r in good_runs()]
    runs = runs_csv(tmp_path / "runs.csv", rows)
    res = run_here(tmp_path, calibrate_argv(runs, "out.toml", "--fit", "gemm_max"))
    assert res.code == 2, str(res)
    check_error(res, ("recompute",))


# --- 3. zero prices ------------------------------------------------------------------------------

ZERO_PRICE_CASES = {
    "cloud_zero": ["--pricing", "cloud", "--cloud-usd-per-gpu-hour", "0"],
    "own_all_zero": ["--gpu-usd", "0", "--server-usd", "0", "--network-usd", "0", "--usd-per-kwh", "0",
                     "--node-overhead-w", "0", "--idle-fraction", "0"],
    "cloud_zero_budget": ["--pricing", "cloud", "--cloud-usd-per-gpu-hour", "0", "--budget-usd", "1000"],
    "own_zero_deadline": ["--gpu-usd", "0", "--server-usd", "0", "--network-usd", "0", "--usd-per-kwh", "0",
                          "--deadline-days", "30"],
    "energy_only_zero": ["--usd-per-kwh", "0"],
}  # fmt: skip


@pytest.mark.parametrize("extra", list(ZERO_PRICE_CASES.values()), ids=list(ZERO_PRICE_CASES))
@pytest.mark.parametrize("as_json", [True, False], ids=["json", "text"])
def test_zero_prices_in_compare(extra: list[str], as_json: bool) -> None:
    # The command; with a budget or deadline every count up to COUNT is searched: smaller ones.
    searched = {"--budget-usd", "--deadline-days"} & set(extra)
    model, hardware = (
        ("llama2-7b", "a100-80g:64,rtx4090:128") if searched else ("llama2-70b", "a100-80g:256,rtx4090:2048")
    )
    argv = ["compare", "--model", model, "--hardware", hardware, *extra]
    res = run_cli([*argv, "--json"] if as_json else argv)
    obj = check(res, "compare" if as_json else None)
    assert res.code in (0, 1), f"zero prices are valid figures\n{res}"
    if obj is not None:
        assert obj["verdict"], f"no verdict\n{res}"


# --- 4. markup and escape sequences in names ----------------------------------------------------

MARKUP = "[red]x[/red]<b>&amp;"  # rich markup, HTML tags and an entity, all to be shown as written
ESC_NAME = f"{MARKUP}\x1b[31mRED\x1b[0m\x07[/]"  # ANSI colour, a bell, and a closing tag with no opening
ESC_DESCRIPTION = "[bold]d[/bold] \x1b]0;title\x07 [/] \x9b2J"  # an OSC title change, a C1 CSI


def _toml_string(text: str) -> str:
    return json.dumps(text)  # JSON's escapes (\\u001b, \\") are TOML basic-string escapes too


def markup_hardware(path: Path) -> Path:
    text = (PRESETS_DIR / "a100-80g.toml").read_text()
    text = text.replace('name = "a100-80g"', f"name = {_toml_string(ESC_NAME)}", 1)
    text = re.sub(r'^description = ".*"$', lambda m: f"description = {_toml_string(ESC_DESCRIPTION)}", text,
                  count=1, flags=re.M)  # fmt: skip
    text = text.replace('name = "NVIDIA A100-SXM4-80GB"', f"name = {_toml_string('[/]' + ESC_NAME)}", 1)
    path.write_text(text)
    return path


def markup_model(folder: Path) -> Path:
    """A config whose name comes from `_paraplan_name`, in a folder itself named with markup."""
    return write_json(folder / "[red]dir[/red]" / "config.json", {**LLAMA, "_paraplan_name": f"[/]{ESC_NAME}"})


def assert_shown_safely(text: str, where: str) -> None:
    leaked = [c for c in "\x1b\x07\x9b" if c in text]
    assert not leaked, f"{where} passes control characters {leaked} to the terminal: {text[:400]!r}"
    assert "[red]x[/red]" in text, f"{where} lost or mangled the markup-like name: {text[:600]!r}"


MARKUP_COMMANDS = {
    "validate": ["validate", "--gpus", "8", "--plan", "TP2/PP2/DP2", *TINY_GB],
    "memory": ["memory", "--gpus", "8", "--plan", "TP2/PP2/DP2", *TINY_GB],
    "validate_infeasible": ["validate", "--gpus", "8", "--plan", "TP2/PP2/DP2", "--global-batch", "16",
                            "--seq-len", "100000000"],
    "optimize": ["optimize", "--gpus", "8", *TINY_GB],
    "compare": ["compare", *TINY_GB],
}  # fmt: skip


@pytest.mark.parametrize("command", list(MARKUP_COMMANDS), ids=list(MARKUP_COMMANDS))
def test_markup_and_escapes_in_names_are_printed_as_written(tmp_path: Path, command: str) -> None:
    hw = markup_hardware(tmp_path / "hw.toml")
    model = markup_model(tmp_path)
    argv = list(MARKUP_COMMANDS[command])
    hardware = f"{hw}:8" if command == "compare" else str(hw)
    argv[1:1] = ["--model", str(model), "--hardware", hardware]
    res = run_here(tmp_path, [*argv, "--html", "report.html"], written=("report.html",))
    assert res.code in (0, 1), str(res)
    assert_shown_safely(res.out, f"{command}'s text report")
    assert "[/]" in res.out, f"the name '[/]' is not shown as written\n{res}"
    assert "\x1b" not in res.err and "\x07" not in res.err, f"stderr carries an escape: {res.err!r}"
    html = (tmp_path / "report.html").read_text()
    assert "\x1b" not in html and "\x07" not in html, "the HTML report carries a control character"
    assert "<b>&amp;" not in html and "&lt;b&gt;" in html, "the HTML report does not escape the name"


def test_markup_name_in_calibrated_preset(tmp_path: Path) -> None:
    runs = runs_csv(tmp_path / "runs.csv", good_runs())
    res = run_here(tmp_path, calibrate_argv(runs, "out.toml", "--fit", "gemm_max", "--name", ESC_NAME),
                   written=("out.toml",))  # fmt: skip
    assert res.code == 0, str(res)
    assert_shown_safely(res.out, "calibrate's report")
    follow = run_cli(["memory", "--model", "llama2-7b", "--gpus", "8", "--hardware", str(tmp_path / "out.toml"),
                      "--plan", "TP8"])  # fmt: skip
    assert follow.code in (0, 1), f"the calibrated TOML with that name does not load back\n{follow}"
    assert_shown_safely(follow.out, "a report on the calibrated hardware")


@pytest.fixture
def terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    """click strips ANSI codes only when the stream is no terminal: behave as on one, so that an
    escape sequence in user text would reach the captured stderr as it would a user's screen."""
    monkeypatch.setattr(click.utils, "should_strip_ansi", lambda stream=None, color=None: False)


ESCAPES_IN_ARGUMENTS = {
    "model": ["validate", "--model", "\x1b[31mred\x1b]0;t\x07", "--gpus", "8", "--hardware", "a100-80g", "--plan", "TP8"],
    "hardware": ["validate", "--model", "llama2-7b", "--gpus", "8", "--hardware", "\x1b[2Jhw", "--plan", "TP8"],
    "plan": ["validate", "--model", "llama2-7b", "--gpus", "8", "--hardware", "a100-80g", "--plan", "TP8\x1b[2J"],
    "gpus": ["optimize", "--model", "llama2-7b", "--gpus", "8\x1b[2J", "--hardware", "a100-80g"],
    "count": ["compare", "--model", "llama2-7b", "--hardware", "a100-80g:\x1b[2J"],
    "choice": ["validate", "--model", "llama2-7b", "--gpus", "8", "--hardware", "a100-80g", "--plan", "TP8",
               "--recompute", "\x1b[5mfull"],
}  # fmt: skip


@pytest.mark.usefixtures("terminal")
@pytest.mark.parametrize("argv", list(ESCAPES_IN_ARGUMENTS.values()), ids=list(ESCAPES_IN_ARGUMENTS))
def test_error_line_never_carries_an_escape_sequence(argv: list[str]) -> None:
    res = run_cli(argv)
    assert res.code == 2, str(res)
    check_error(res)
    assert "\x1b" not in res.err and "\x07" not in res.err, f"the Error line carries an escape: {res.err!r}"


# --- 5. the calibrate CSV holds the CLI's bounds -------------------------------------------------

CSV_CASES: list[tuple[str, dict[str, str], tuple[str, ...]]] = [
    ("knobs_json_list", {"knobs": "[1, 2]"}, ("knobs",)),
    ("seq_len_1e30", {"seq_len": "1e30"}, ("seq",)),
    ("virtual_stages_1e30", {"knobs": '{"virtual_stages": 1e30}'}, ("virtual",)),
    ("config_5000_brackets", {"config": "[" * 5000 + "]" * 5000}, ("config",)),
    ("config_5000_digits", {"config": '{"hidden_size": 1' + "0" * 5000 + "}"}, ("config",)),
    ("global_batch_1e30", {"global_batch": "1e30"}, ("global",)),
    ("global_batch_huge_integer", {"global_batch": "9" * 30}, ("global",)),
    ("micro_batch_column_1e30", {"micro_batch": "1e30"}, ("micro",)),
    ("knobs_not_json", {"knobs": "{recompute: full"}, ("knobs",)),
    ("knobs_nested", {"knobs": '{"zero": {"zero": 1}}'}, ("zero",)),
]


@pytest.mark.parametrize(("cells", "names"), [c[1:] for c in CSV_CASES], ids=[c[0] for c in CSV_CASES])
def test_calibrate_csv_cell_is_bounded_like_the_cli(tmp_path: Path, cells: dict[str, str],
                                                    names: tuple[str, ...]) -> None:  # fmt: skip
    rows = good_runs()
    rows[0].update(cells)
    runs = runs_csv(tmp_path / "runs.csv", rows)
    res = run_here(tmp_path, calibrate_argv(runs, "out.toml", "--fit", "gemm_max"))
    assert res.code == 2, str(res)
    check_error(res, names)
    assert "line 2" in res.err, f"the Error line does not name the row\n{res}"


# --- 6. calibrate --out never destroys a file ------------------------------------------------------


def test_calibrate_out_naming_the_runs_csv_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    runs = runs_csv(tmp_path / "runs.csv", good_runs())
    original = runs.read_bytes()

    def no_fit(*args: object, **kwargs: object) -> None:
        raise AssertionError("the same-file check came after the fit")

    # refused before any fitting: the runs file is known before the first step
    with monkeypatch.context() as patched:
        patched.setattr("paraplan.calibration.calibrate", no_fit)
        for extra in ((), ("--force",)):
            res = run_here(tmp_path, calibrate_argv(runs, "runs.csv", "--fit", "gemm_max", *extra))
            assert res.code == 2, str(res)
            check_error(res, ("--out",))
            assert runs.read_bytes() == original
    # the same file under another name: a relative path, a symlink, a hard link
    (tmp_path / "link.csv").symlink_to("runs.csv")
    os.link(runs, tmp_path / "hard.csv")
    for out in ("./runs.csv", "link.csv", "hard.csv", str(runs)):
        res = run_here(tmp_path, calibrate_argv(runs, out, "--fit", "gemm_max", "--force"))
        assert res.code == 2, f"--out {out}\n{res}"
        check_error(res, ("--out",))
        assert runs.read_bytes() == original


def test_calibrate_out_existing_file_needs_force(tmp_path: Path) -> None:
    runs = runs_csv(tmp_path / "runs.csv", good_runs())
    out = tmp_path / "existing.toml"
    out.write_text("precious\n")
    res = run_here(tmp_path, calibrate_argv(runs, "existing.toml", "--fit", "gemm_max"))
    assert res.code == 2, str(res)
    check_error(res, ("--force", "exists"))
    assert out.read_text() == "precious\n"
    res = run_here(tmp_path, calibrate_argv(runs, "existing.toml", "--fit", "gemm_max", "--force"),
                   written=("existing.toml",))  # fmt: skip
    assert res.code == 0, str(res)
    loaded = run_cli(["memory", "--model", "llama2-7b", "--gpus", "8", "--hardware", str(out), "--plan", "TP8"])
    assert loaded.code in (0, 1), f"the written TOML does not load\n{loaded}"


def test_calibrate_out_through_a_symlink(tmp_path: Path) -> None:
    runs = runs_csv(tmp_path / "runs.csv", good_runs())
    target = tmp_path / "target.toml"
    target.write_text("precious\n")
    (tmp_path / "link.toml").symlink_to("target.toml")
    res = run_here(tmp_path, calibrate_argv(runs, "link.toml", "--fit", "gemm_max"))
    assert res.code == 2, str(res)
    check_error(res, ("--force", "exists"))
    assert target.read_text() == "precious\n"
    (tmp_path / "dangling.toml").symlink_to("nowhere/never.toml")
    res = run_here(tmp_path, calibrate_argv(runs, "dangling.toml", "--fit", "gemm_max"))
    assert res.code == 2, f"a dangling link is an existing name\n{res}"
    check_error(res)
    # with --force the link's target is replaced (atomically) and the link stays a link
    res = run_here(tmp_path, calibrate_argv(runs, "link.toml", "--fit", "gemm_max", "--force"),
                   written=("target.toml",))  # fmt: skip
    assert res.code == 0, str(res)
    assert (tmp_path / "link.toml").is_symlink() and "[efficiency]" in target.read_text()


@pytest.mark.parametrize("out", ["missing/dir/out.toml", "a_directory", "a_fifo", "a_device", "link_to_fifo"])
def test_calibrate_out_unwritable(tmp_path: Path, out: str) -> None:
    """No --force makes a directory, FIFO or device a file: a rename onto one would replace the
    node itself (as root, /dev/full). The nodes are made here, so a regression harms nothing."""
    runs = runs_csv(tmp_path / "runs.csv", good_runs())
    (tmp_path / "a_directory").mkdir()
    os.mkfifo(tmp_path / "a_fifo")
    (tmp_path / "link_to_fifo").symlink_to("a_fifo")
    if out == "a_device":
        if not ROOT:
            pytest.skip("making a device node needs root")
        os.mknod(tmp_path / "a_device", 0o666 | stat.S_IFCHR, os.makedev(1, 7))  # as /dev/full
    res = run_here(tmp_path, calibrate_argv(runs, out, "--fit", "gemm_max", "--force"))
    assert res.code == 2, str(res)
    check_error(res, ("--out", out))


# --- 7. special files are refused at once ----------------------------------------------------------


def special_file(tmp: Path, kind: str, name: str = "") -> Path:
    """A path of the given kind inside `tmp` (devices are the system's), its name ending in `name`."""
    path = tmp / f"special-{kind}{name}"
    if kind == "dev_zero":
        return Path("/dev/zero")
    if kind == "dev_null":
        return Path("/dev/null")
    if kind == "dev_urandom":
        return Path("/dev/urandom")
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "symlink_loop":
        os.symlink(tmp / "loop-partner", path)
        os.symlink(path, tmp / "loop-partner")
    elif kind == "dangling_symlink":
        os.symlink(tmp / "nowhere", path)
    elif kind == "symlink_to_dev_zero":
        os.symlink("/dev/zero", path)
    elif kind == "unreadable":
        path.write_text(json.dumps(LLAMA))
        path.chmod(0)
    elif kind == "empty":
        path.touch()
    elif kind == "sparse_huge":
        with open(path, "wb") as handle:
            handle.truncate(2**34)  # 16 GiB of holes: a read of it would exhaust memory
    elif kind == "nul_bytes":
        path.write_bytes(b"\x00" * 1000)
    elif kind == "missing":
        pass
    elif kind == "trailing_slash":
        path.write_text(json.dumps(LLAMA))
        return Path(f"{path}/")
    else:
        raise ValueError(kind)
    return path


SPECIAL_KINDS = ["dev_zero", "dev_null", "dev_urandom", "fifo", "directory", "symlink_loop", "dangling_symlink",
                 "symlink_to_dev_zero", "unreadable", "empty", "sparse_huge", "nul_bytes", "missing",
                 "trailing_slash"]  # fmt: skip


def special_argv(option: str, path: Path, as_json: bool) -> tuple[list[str], str]:
    """(argv, the input option) with `path` given to `option`."""
    model, hardware = "llama2-7b", "a100-80g"
    if option == "--model":
        model = str(path)
    elif option == "--hardware":
        hardware = str(path)
    if option == "--runs":
        argv = ["calibrate", "--hardware", "a100-80g", "--runs", str(path), "--out", "out.toml"]
    elif option == "--hardware-count":
        argv = ["compare", "--model", model, "--hardware", f"{path}:8"]
    elif option == "--from-launch":
        argv = ["validate", "--model", model, "--hardware", hardware, "--from-launch", str(path)]
    else:
        argv = ["memory", "--model", model, "--gpus", "8", "--hardware", hardware, "--plan", "TP8"]
    return ([*argv, "--json"] if as_json else argv), option


def check_special(res: Result, kind: str, path: Path) -> None:
    if (kind == "unreadable" and ROOT) or kind == "trailing_slash":  # root reads it; 'file/' is read as 'file'
        assert res.code in (0, 1, 2), str(res)
        return
    assert res.code == 2, f"{kind} is no input file\n{res}"
    check_error(res, (path.name.rstrip("/"), "file", "config", "hardware", "model", "launch"))
    if kind == "sparse_huge":
        assert "bytes" in res.err, f"the message does not state the size cap\n{res}"
    if kind in ("fifo", "dev_zero", "dev_null", "dev_urandom", "directory", "symlink_to_dev_zero"):
        assert "regular file" in res.err or "directory" in res.err, f"the message does not say why\n{res}"


@pytest.mark.parametrize("kind", SPECIAL_KINDS)
@pytest.mark.parametrize("option", ["--model", "--hardware", "--runs", "--from-launch"])
def test_special_file_as_input(tmp_path: Path, option: str, kind: str) -> None:
    work = tmp_path / "work"
    work.mkdir()
    path = special_file(tmp_path, kind)
    argv, _ = special_argv(option, path, as_json=False)
    res = run_here(work, argv, limit_s=10)  # a FIFO opened for reading would block: interrupted
    check_special(res, kind, path)


# --- found by the fuzzing: a node of 1,024 GPUs (the schema's bound) -------------------------------


@pytest.mark.parametrize("preset", ["a100-80g", "a100-80g-pcie", "rtx4090", "l40s", "mi300x"])  # each intra-node kind
def test_largest_node_is_routed_in_seconds(tmp_path: Path, preset: str) -> None:
    """Routing a ring searched paths through every other GPU of the node: 20 s at 1,000 GPUs."""
    text = re.sub(r"^gpus_per_node = \d+", "gpus_per_node = 1024", (PRESETS_DIR / f"{preset}.toml").read_text(),
                  count=1, flags=re.M)  # fmt: skip
    (tmp_path / "hw.toml").write_text(text)
    res = run_here(tmp_path, ["validate", "--model", "llama2-7b", "--hardware", "hw.toml", "--gpus", "64",
                              "--plan", "TP8/PP2/DP4", "--json"], limit_s=15)  # fmt: skip
    check(res, "layout")
    assert res.code in (0, 1), str(res)


WIDEST = {"model_type": "mixtral", "hidden_size": 1_000_000, "num_hidden_layers": 100_000, "num_attention_heads": 1000,
          "num_key_value_heads": 1000, "intermediate_size": 10_000_000, "vocab_size": 100_000_000,
          "max_position_embeddings": 100_000_000, "num_local_experts": 100_000, "num_experts_per_tok": 100_000}  # fmt: skip


def test_a_fix_too_large_to_search_does_not_refuse_the_answer(tmp_path: Path) -> None:
    """The widest config fits nowhere; one search for a fix passed the space cap and turned the
    answer (exit 1, with its reason) into exit 2, after 7 s and 1 GB of fix searches."""
    config = write_json(tmp_path / "config.json", WIDEST)
    res = run_here(tmp_path, ["optimize", "--model", str(config), "--hardware", "h100-sxm", "--gpus", "8", "--json"])
    obj = check(res, "optimize")
    assert res.code == 1 and obj is not None and obj["results"][0]["reason"], str(res)


# --- 8. byte-order marks --------------------------------------------------------------------------

BOM = "\ufeff"


@pytest.mark.parametrize("newline", ["\n", "\r\n"], ids=["lf", "crlf"])
def test_bom_in_csv_toml_and_config_is_accepted(tmp_path: Path, newline: str) -> None:
    hw = tmp_path / "hw.toml"
    hw.write_bytes((BOM + (PRESETS_DIR / "a100-80g.toml").read_text()).replace("\n", newline).encode())
    config = tmp_path / "config.json"
    config.write_bytes((BOM + json.dumps(LLAMA, indent=1)).replace("\n", newline).encode())
    res = run_here(tmp_path, ["validate", "--model", str(config), "--gpus", "8", "--hardware", str(hw),
                              "--plan", "TP2/PP2/DP2", *TINY_GB, "--json"])  # fmt: skip
    assert res.code == 0, f"a BOM is no reason to refuse a file\n{res}"
    check(res, "layout")
    runs = runs_csv(tmp_path / "runs.csv", good_runs(), bom=True)
    runs.write_bytes(runs.read_bytes().replace(b"\r\n", b"\n").replace(b"\n", newline.encode()))
    res = run_here(tmp_path, calibrate_argv(runs, "out.toml", "--fit", "gemm_max", "--json"), written=("out.toml",))
    assert res.code == 0, f"a CSV with a BOM (a spreadsheet's export) must be read\n{res}"
    # the published table's columns (config, measured_step_time_s) behind a BOM
    rows = [{**r, "measured_step_time_s": r["step_time_s"]} for r in good_runs()]
    columns = ["config", "gpus", "plan", "global_batch", "seq_len", "knobs", "measured_step_time_s"]
    runs_csv(tmp_path / "published.csv", rows, columns, bom=True)
    res = run_here(tmp_path, calibrate_argv(tmp_path / "published.csv", "out2.toml", "--fit", "gemm_max"),
                   written=("out2.toml",))  # fmt: skip
    assert res.code == 0, str(res)


# --- 9. output streams (real processes) ----------------------------------------------------------

CLI = [sys.executable, "-m", "paraplan"]
BIG_TEXT = ["optimize", "--model", "llama2-7b", "--gpus", "64", "--hardware", "a100-80g", "--top", "100"]
VALIDATE = ["validate", "--model", "llama2-7b", "--gpus", "8", "--hardware", "a100-80g", "--plan", "TP8"]


def _spawn(argv: list[str], **kwargs: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen([*CLI, *argv], stderr=subprocess.PIPE, **kwargs)


@pytest.mark.parametrize(
    ("argv", "read_first"),
    [(["--help"], False), (BIG_TEXT, True), ([*BIG_TEXT, "--json"], True), ([*VALIDATE, "--json"], False)],
    ids=["help_closed_at_once", "text_head_1", "json_head_1", "json_closed_at_once"],
)
def test_broken_pipe_is_quiet_exit_141(argv: list[str], read_first: bool) -> None:
    """`paraplan ... | head -1`: the reader goes away; the writer stops quietly with 128 + SIGPIPE."""
    proc = _spawn(argv, stdout=subprocess.PIPE)
    assert proc.stdout is not None and proc.stderr is not None
    if read_first:
        proc.stdout.readline()
    proc.stdout.close()  # before the child's first write (it is still importing) or mid-output
    err = proc.stderr.read()
    code = proc.wait(timeout=60)
    assert code == 141, f"exit {code}, stderr {err!r}"
    assert err == b"", f"a broken pipe must be quiet, stderr: {err!r}"


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_stdout_on_a_full_device(as_json: bool) -> None:
    with open("/dev/full", "wb") as full:
        proc = _spawn([*VALIDATE, *(["--json"] if as_json else [])], stdout=full)
        _, err = proc.communicate(timeout=60)
    lines = err.decode().splitlines()
    assert proc.returncode not in (0, 1, 141), f"exit {proc.returncode}: a failed write is no result"
    assert len(lines) == 1 and lines[0].startswith("Error:"), f"stderr: {err!r}"


@pytest.mark.parametrize(
    "argv", [VALIDATE, [*VALIDATE, "--json"], ["list", "models"], ["--help"]], ids=["text", "json", "list", "help"]
)
def test_closed_stdout(argv: list[str]) -> None:
    """Started with no stdout at all (`paraplan ... >&-`): Python gives it sys.stdout = None."""
    command = [*CLI, *argv]
    proc = subprocess.run(["sh", "-c", 'exec "$@" >&-', "sh", *command], capture_output=False,
                          stderr=subprocess.PIPE, timeout=60, check=False)  # fmt: skip
    lines = proc.stderr.decode().splitlines()
    assert proc.returncode not in (0, 1, 141), f"exit {proc.returncode} with nowhere to write the answer"
    assert len(lines) == 1 and lines[0].startswith("Error:"), f"stderr: {proc.stderr!r}"


# --- 10. --top bounds --------------------------------------------------------------------------------


@pytest.mark.parametrize("top", ["0", "-1", "101", "1000", "1e3", "abc", "", "99999999999999999999"])
def test_top_out_of_bounds_is_bad_input(top: str) -> None:
    res = run_cli(["optimize", "--model", "llama2-7b", "--gpus", "8", "--hardware", "a100-80g", "--top", top])
    assert res.code == 2, str(res)
    check_error(res, ("--top",))


@pytest.mark.parametrize("top", ["1", "100"])
def test_top_at_its_bounds(top: str) -> None:
    res = run_cli(["optimize", "--model", "llama2-7b", "--gpus", "8", "--hardware", "a100-80g", "--top", top,
                   "--json"])  # fmt: skip
    obj = check(res, "optimize")
    assert obj is not None and 1 <= len(obj["results"][0]["layouts"]) <= int(top)


# --- 11. messages that name the right thing -------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["validate", "--model", "llama2-7b", "--gpus", "8", "--hardware", "a100-80g:0", "--plan", "TP8"],
        ["memory", "--model", "llama2-7b", "--gpus", "8", "--hardware", "a100-80g:0", "--plan", "TP8"],
        ["optimize", "--model", "llama2-7b", "--gpus", "8", "--hardware", "a100-80g:0"],
        ["compare", "--model", "llama2-7b", "--hardware", "a100-80g:0"],
        ["compare", "--model", "llama2-7b", "--gpus", "8", "--hardware", "a100-80g:0"],
    ],
    ids=["validate", "memory", "optimize", "compare", "compare_with_gpus"],
)
def test_zero_count_names_the_hardware_entry(argv: list[str]) -> None:
    res = run_cli(argv)
    assert res.code == 2, str(res)
    check_error(res, ("a100-80g",))
    assert "--gpus" not in res.err.replace("from --gpus", ""), f"the count was given in --hardware\n{res}"


@pytest.mark.parametrize("count", ["-1", "-256", "1.5", "x", "", "0x10"])
def test_bad_count_suggests_a_valid_entry(count: str) -> None:
    res = run_cli(["compare", "--model", "llama2-7b", "--hardware", f"a100-80g:{count}"])
    assert res.code == 2, str(res)
    check_error(res, ("a100-80g",))
    assert f":{count}:256" not in res.err, f"the suggestion keeps the bad count\n{res}"


def test_gpt2_n_inner_zero_names_n_inner(tmp_path: Path) -> None:
    config = write_json(tmp_path / "config.json", {**GPT2, "n_inner": 0})
    res = run_cli(["validate", "--model", str(config), "--gpus", "1", "--hardware", "a100-80g", "--plan", "TP1"])
    assert res.code == 2, str(res)
    check_error(res, ("n_inner",))
    assert "intermediate_size" not in res.err, f"GPT-2 has no intermediate_size key\n{res}"


# =================================================================================================
# Part 2: fuzzing the classes round 1 lacks
# =================================================================================================

# --- combinations of valid options -----------------------------------------------------------------

MOE_TINY = {**MIXTRAL}
DEEPSEEK_TINY = {
    "model_type": "deepseek_v3", "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 8,
    "num_key_value_heads": 8, "intermediate_size": 512, "moe_intermediate_size": 64, "n_routed_experts": 8,
    "n_shared_experts": 1, "num_experts_per_tok": 2, "first_k_dense_replace": 1, "kv_lora_rank": 64,
    "q_lora_rank": 96, "qk_nope_head_dim": 32, "qk_rope_head_dim": 16, "v_head_dim": 32, "vocab_size": 32000,
    "max_position_embeddings": 4096,
}  # fmt: skip
QWEN_MOE_TINY = {
    "model_type": "qwen2_moe", "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 8,
    "num_key_value_heads": 4, "intermediate_size": 688, "moe_intermediate_size": 128, "num_experts": 8,
    "num_experts_per_tok": 2, "shared_expert_intermediate_size": 256, "vocab_size": 32000,
    "max_position_embeddings": 4096,
}  # fmt: skip
GEMMA2_TINY = {
    "model_type": "gemma2", "hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 8,
    "num_key_value_heads": 4, "head_dim": 32, "intermediate_size": 688, "vocab_size": 32000, "sliding_window": 128,
    "max_position_embeddings": 4096,
}  # fmt: skip
# llama_deep: enough layers that a first or last stage of 0-3 layers can be far below the even
# share (with 4 layers it never is), the regime of the one-end split that was priced as a pipeline
# of 1-3 layers; tests/test_uneven_split.py checks that case directly.
TINY_MODELS = {"llama": LLAMA, "llama_deep": {**LLAMA, "num_hidden_layers": 32}, "gpt2": GPT2, "mixtral": MOE_TINY,
               "deepseek": DEEPSEEK_TINY, "qwen_moe": QWEN_MOE_TINY, "gemma2": GEMMA2_TINY}  # fmt: skip
COMBO_HARDWARE = ["a100-80g", "h100-sxm", "rtx4090", "mi300x", "l40s", "b200"]


def _int_values(name: str) -> list[int]:
    """A knob's accepted values worth combining: its bounds and small values (from the schema,
    so a new knob is fuzzed without a change here)."""
    lo, hi = bounds(name)
    typical = {
        "micro_batch": [1, 2, 3, 4, 16],
        "global_batch": [1, 2, 7, 16, 64, 1024],
        "seq_len": [1, 128, 512, 4096, 32768, 1_048_576],
        "virtual_stages": [1, 2, 3, 4],
        "recompute_layers": [0, 1, 2, 3, 4],
        "expert_tp": [0, 1, 2, 8],
        "first_stage_layers": [0, 1, 2, 3],
        "last_stage_layers": [0, 1, 2, 3],
    }.get(name, [1, 2, 3, 4, 8])
    return sorted({v for v in [lo, hi, *typical] if lo <= v <= hi})


def _knob_choices(name: str) -> list[list[str]]:
    """The argv fragments that give knob `name` one accepted value."""
    flag = "--" + name.replace("_", "-")
    if name in BOOLS:
        return [[flag], [f"--no-{name.replace('_', '-')}"]]
    if name in ENUMS:
        return [[flag, label] for label in ENUMS[name].labels()] + [[flag, ENUMS[name].labels()[0].upper()]]
    return [[flag, str(v)] for v in _int_values(name)]


KNOB_FRAGMENTS: dict[str, list[list[str]]] = {name: _knob_choices(name) for name in (*SETTINGS, *SEARCHED)}
STACK_FRAGMENTS: dict[str, list[list[str]]] = {
    name: ([[f"--{name.replace('_', '-')}", g] for g in STACK_CHOICES[name]] if name in STACK_CHOICES
           else [[f"--{name.replace('_', '-')}"], [f"--no-{name.replace('_', '-')}"]])
    for name in STACK_FIELDS
}  # fmt: skip
OPTION_FRAGMENTS = {**KNOB_FRAGMENTS, **STACK_FRAGMENTS, "mem_headroom": [["--mem-headroom", v] for v in
                                                                         ("0", "0.1", "0.5", "0.9")]}  # fmt: skip


@st.composite
def knob_options(draw: st.DrawFn, max_size: int = 8) -> list[str]:
    names = draw(st.lists(st.sampled_from(sorted(OPTION_FRAGMENTS)), max_size=max_size, unique=True))
    argv: list[str] = []
    for name in names:
        argv += draw(st.sampled_from(OPTION_FRAGMENTS[name]))
    return argv


DEGREE_VALUES = [1, 1, 1, 2, 2, 4, 8]
# Every combination starts from a small step (16 sequences of 512 tokens): the drawn options come
# after it and override it (click keeps an option's last value), and the calls stay fast.
SMALL_STEP = ["--global-batch", "16", "--seq-len", "512"]
# One combination in 40 also writes --html: a page draws its charts (0.2-0.5 s, more than the
# rest of 20 combinations); the pages themselves are checked in test_html.py.
SOMETIMES_HTML = st.sampled_from([False] * 39 + [True])


@st.composite
def plans(draw: st.DrawFn) -> tuple[int, str]:
    """(gpus, plan): mostly consistent, sometimes not (a count the degrees do not multiply to)."""
    tp, pp, dp = (draw(st.sampled_from(DEGREE_VALUES)) for _ in range(3))
    cp, ep = draw(st.sampled_from([1, 1, 1, 1, 2, 4])), draw(st.sampled_from([1, 1, 1, 2, 4, 8]))
    parts = [f"TP{tp}", f"PP{pp}", f"DP{dp}"] + ([f"CP{cp}"] if cp > 1 else []) + ([f"EP{ep}"] if ep > 1 else [])
    if draw(st.integers(0, 5)) == 0:
        parts.append(f"VPP{draw(st.sampled_from([1, 2, 3]))}")
    gpus = tp * pp * dp * cp
    if draw(st.integers(0, 9)) == 0:
        gpus = draw(st.sampled_from([1, 3, 6, 16, 64]))
    return gpus, "/".join(parts)


def combo_workdir(tmp: Path, model: str) -> tuple[Path, str]:
    work = Path(tmp)
    config = write_json(work / "inputs" / model / "config.json", TINY_MODELS[model])
    return work, str(config)


def check_combo(res: Result, kind: str | None, html: bool, work: Path) -> None:
    check(res, kind)
    if html and res.code in (0, 1):
        text = (work / "report.html").read_text()
        assert text.lstrip().lower().startswith("<!doctype html"), "--html wrote no HTML document"


@fuzz("combo_validate")
@given(
    model=st.sampled_from(sorted(TINY_MODELS)),
    hardware=st.sampled_from(COMBO_HARDWARE),
    plan=plans(),
    options=knob_options(),
    command=st.sampled_from(["validate", "validate", "memory"]),
    emit=st.sampled_from([None, None, None, "megatron", "deepspeed", "torchtitan"]),
    as_json=st.sampled_from([True, True, False]),
    html=SOMETIMES_HTML,
)
def test_fuzz_validate_option_combinations(model: str, hardware: str, plan: tuple[int, str], options: list[str],
                                           command: str, emit: str | None, as_json: bool, html: bool) -> None:  # fmt: skip
    gpus, plan_text = plan
    with tempfile.TemporaryDirectory() as tmp:
        work, config = combo_workdir(Path(tmp), model)
        argv = [command, "--model", config, "--hardware", hardware, "--gpus", str(gpus), "--plan", plan_text,
                *SMALL_STEP, *options, *(["--emit", emit] if emit and command == "validate" else []),
                *(["--html", "report.html"] if html else []), *(["--json"] if as_json else [])]  # fmt: skip
        res = run_here(work, argv, written=("report.html",) if html else ())
        check_combo(res, "layout" if as_json else None, html, work)


@st.composite
def degree_options(draw: st.DrawFn) -> list[str]:
    argv: list[str] = []
    for dim in draw(st.lists(st.sampled_from(["tp", "pp", "dp", "cp", "ep"]), max_size=3, unique=True)):
        side = draw(st.sampled_from(["", "min-", "max-"]))
        argv += [f"--{side}{dim}", str(draw(st.sampled_from([1, 2, 4, 8, 16])))]
    return argv


OPTIMIZE_EXTRAS = [
    ["--top", "1"], ["--top", "3"], ["--top", "100"], ["--objective", "cost"], ["--objective", "time"],
    ["--tokens", "1e9"], ["--tokens", "1e9", "--deadline-days", "0.01"], ["--tokens", "1e12", "--deadline-days", "30"],
    ["--tp-across-nodes"], ["--emit", "megatron"], ["--emit", "torchtitan"], ["--emit", "deepspeed"],
]  # fmt: skip


@fuzz("combo_optimize")
@given(
    model=st.sampled_from(sorted(TINY_MODELS)),
    hardware=st.lists(st.sampled_from(COMBO_HARDWARE), min_size=1, max_size=2, unique=True),
    gpus=st.sampled_from(["1", "2", "4", "8", "16", "1..8", "4..16", "6"]),
    options=knob_options(max_size=6),
    degrees=degree_options(),
    extra=st.lists(st.sampled_from(OPTIMIZE_EXTRAS), max_size=3),
    as_json=st.sampled_from([True, True, False]),
    html=SOMETIMES_HTML,
)
def test_fuzz_optimize_option_combinations(model: str, hardware: list[str], gpus: str, options: list[str],
                                           degrees: list[str], extra: list[list[str]], as_json: bool,
                                           html: bool) -> None:  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        work, config = combo_workdir(Path(tmp), model)
        argv = ["optimize", "--model", config, "--hardware", ",".join(hardware), "--gpus", gpus, *SMALL_STEP, *options,
                *degrees,
                *(a for e in extra for a in e), *(["--html", "report.html"] if html else []),
                *(["--json"] if as_json else [])]  # fmt: skip
        res = run_here(work, argv, written=("report.html",) if html else ())
        check_combo(res, "optimize" if as_json else None, html, work)


FIGURES = ["--gpu-usd", "--server-usd", "--network-usd", "--lifetime-years", "--cloud-usd-per-gpu-hour",
           "--usd-per-kwh", "--pue", "--idle-fraction", "--node-overhead-w", "--gpu-mtbf-hours", "--node-mtbf-hours",
           "--restart-s", "--checkpoint-write-gbps", "--staff-usd-per-day", "--budget-usd", "--deadline-days",
           "--tokens"]  # fmt: skip


def _figure_values(option: str) -> list[str]:
    """Accepted values of a compare figure: its bounds (as --help states them) and a few inside."""
    lows = {"--lifetime-years": "0.1", "--pue": "1", "--gpu-mtbf-hours": "0.1", "--node-mtbf-hours": "0.1",
            "--checkpoint-write-gbps": "0.001", "--tokens": "1", "--budget-usd": "0.01", "--deadline-days": "0.001"}  # fmt: skip
    highs = {"--lifetime-years": "50", "--pue": "5", "--idle-fraction": "1", "--cloud-usd-per-gpu-hour": "1e5",
             "--usd-per-kwh": "1e3", "--node-overhead-w": "1e6", "--gpu-mtbf-hours": "1e9", "--node-mtbf-hours": "1e9",
             "--restart-s": "1e7", "--checkpoint-write-gbps": "1e6", "--staff-usd-per-day": "1e9",
             "--budget-usd": "1e15", "--deadline-days": "1e6", "--tokens": "1e18"}  # fmt: skip
    return [lows.get(option, "0"), highs.get(option, "1e8"), "1", "2.5", "100"]


COUNTS = [1, 2, 8, 16, 32]


@fuzz("combo_compare")
@given(
    model=st.sampled_from(sorted(TINY_MODELS)),
    entries=st.lists(st.tuples(st.sampled_from(COMBO_HARDWARE), st.sampled_from(COUNTS)), min_size=1, max_size=2),
    options=knob_options(max_size=5),
    figures=st.dictionaries(st.sampled_from(FIGURES), st.integers(0, 4), max_size=5),
    pricing=st.sampled_from(["own", "cloud"]),
    as_json=st.sampled_from([True, True, False]),
    html=SOMETIMES_HTML,
)
def test_fuzz_compare_option_combinations(model: str, entries: list[tuple[str, int]], options: list[str],
                                          figures: dict[str, int], pricing: str, as_json: bool,
                                          html: bool) -> None:  # fmt: skip
    figure_argv = [a for option, i in figures.items() for a in (option, _figure_values(option)[i])]
    with tempfile.TemporaryDirectory() as tmp:
        work, config = combo_workdir(Path(tmp), model)
        argv = ["compare", "--model", config, "--hardware", ",".join(f"{h}:{n}" for h, n in entries),
                "--pricing", pricing, *SMALL_STEP, *options, *figure_argv, *(["--html", "report.html"] if html else []),
                *(["--json"] if as_json else [])]  # fmt: skip
        res = run_here(work, argv, written=("report.html",) if html else ())
        check_combo(res, "compare" if as_json else None, html, work)


# --- every field of the hardware TOML -------------------------------------------------------------


class RawToml:
    """A TOML value written verbatim (a date, a time: types JSON has no word for)."""

    def __init__(self, token: str) -> None:
        self.token = token

    def __repr__(self) -> str:
        return f"RawToml({self.token!r})"


_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


def toml_key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else toml_string(key)


def toml_string(text: str) -> str:
    # JSON's escapes are TOML's; DEL (and C1 controls) must be escaped in TOML, JSON leaves them.
    return re.sub(r"[\x7f-\x9f]", lambda m: f"\\u{ord(m.group()):04x}", json.dumps(text, ensure_ascii=False))


def toml_value(value: Any) -> str:
    if isinstance(value, RawToml):
        return value.token
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, list):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{toml_key(k)} = {toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(type(value))


def toml_document(table: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[str]:
    """Lines of a TOML document: a table's plain values, then each sub-table under its header."""
    plain = {k: v for k, v in table.items() if not isinstance(v, dict)}
    tables = {k: v for k, v in table.items() if isinstance(v, dict)}
    lines = []
    if prefix and (plain or not tables):
        lines.append("[" + ".".join(toml_key(p) for p in prefix) + "]")
    lines += [f"{toml_key(k)} = {toml_value(v)}" for k, v in plain.items()]
    for key, sub in tables.items():
        lines += toml_document(sub, (*prefix, key))
    return lines


PRESET_TABLES = {name: tomllib.loads((PRESETS_DIR / f"{name}.toml").read_text())
                 for name in ("a100-80g", "rtx4090", "mi300x", "h100-sxm")}  # fmt: skip


def test_toml_writer_round_trips_the_presets() -> None:
    """The fuzzer's TOML writer reproduces each preset: the mutations are the only change."""
    for name, table in PRESET_TABLES.items():
        assert tomllib.loads("\n".join(toml_document(table))) == table, name


def paths_of(table: dict[str, Any], prefix: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    out = []
    for key, value in table.items():
        out.append((*prefix, key))
        if isinstance(value, dict):
            out += paths_of(value, (*prefix, key))
    return out


FIELD_PATHS = {name: paths_of(table) for name, table in PRESET_TABLES.items()}


def _get(table: dict[str, Any], path: tuple[str, ...]) -> Any:
    node: Any = table
    for key in path:
        node = node[key]
    return node


TABLE_PATHS = {name: [(), *(p for p in FIELD_PATHS[name] if isinstance(_get(t, p), dict))]
               for name, t in PRESET_TABLES.items()}  # fmt: skip

NASTY_STRINGS = ["", " ", "0", "1e3", "312e12", "abc", "nan", "inf", "true", "[/]", "[red]x[/red]", "\x1b[31m",
                 "a100-80g", "nvswitch", "pcie", "ring", "x" * 2000, "\u202e", "\x00"]  # fmt: skip
SCALAR_VALUES = st.one_of(
    st.sampled_from([0, -1, 1, 2, 3, 7, 8, 64, 1000, 2**31, 2**53 + 1, 2**63, 2**64, 10**30, -(10**30), 10**400]),
    st.sampled_from([0.0, -0.0, 0.5, 1.0, 1e-300, 5e-324, 1e308, -1e308, 1.7976931348623157e308, math.nan, math.inf,
                     -math.inf, 312e12, 0.999999]),
    st.integers(),
    st.floats(),
    st.booleans(),
    st.sampled_from(NASTY_STRINGS),
    st.text(max_size=8),
)  # fmt: skip


def nested(leaves: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Values with nesting: lists and tables of the leaves, a few levels deep."""
    keys = st.sampled_from(["a", "name", "bw_bytes_per_s", "efficiency", "x y", ""])
    return st.recursive(leaves, lambda kids: st.lists(kids, max_size=3) | st.dictionaries(keys, kids, max_size=3),
                        max_leaves=6)  # fmt: skip


TOML_VALUES = st.one_of(
    SCALAR_VALUES,
    SCALAR_VALUES,
    nested(SCALAR_VALUES),
    st.sampled_from([RawToml("1979-05-27T07:32:00Z"), RawToml("1979-05-27"), RawToml("07:32:00"),
                     RawToml("0x10"), RawToml("0o17"), RawToml("0b101"), RawToml("1_000"), RawToml("+inf"),
                     RawToml("-nan"), RawToml("'literal'"), RawToml('"""multi\nline"""')]),
)  # fmt: skip


@st.composite
def toml_mutations(draw: st.DrawFn, preset: str) -> list[tuple[str, tuple[str, ...], Any]]:
    out: list[tuple[str, tuple[str, ...], Any]] = []
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["set", "set", "set", "set", "delete", "unknown", "deepen"]))
        if op == "unknown":
            table = draw(st.sampled_from(TABLE_PATHS[preset]))
            key = draw(st.sampled_from(["peak_tf32_flops", "Name", "memory_gb", "gpus", "x", "link", "sources"]))
            out.append(("set", (*table, key), draw(TOML_VALUES)))
        else:
            out.append((op, draw(st.sampled_from(FIELD_PATHS[preset])), draw(TOML_VALUES) if op == "set" else None))
    return out


def mutate(table: dict[str, Any], mutations: list[tuple[str, tuple[str, ...], Any]]) -> dict[str, Any]:
    """A deep copy of `table` with each mutation applied; one whose parent was replaced by an
    earlier mutation (no longer a table) is skipped."""
    out = copy.deepcopy(table)
    for op, path, value in mutations:
        node: Any = out
        for key in path[:-1]:
            node = node.get(key) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            continue
        key = path[-1]
        if op == "set":
            node[key] = value
        elif op == "delete":
            node.pop(key, None)
        elif op == "deepen" and key in node:
            node[key] = {"x": {"y": node[key]}}
    return out


@fuzz("toml_fields")
@given(
    data=st.data(),
    preset=st.sampled_from(sorted(PRESET_TABLES)),
    command=st.sampled_from(["memory", "validate", "compare", "compare", "optimize"]),
    as_json=st.sampled_from([True, True, False]),
)
def test_fuzz_every_hardware_toml_field(data: st.DataObject, preset: str, command: str, as_json: bool) -> None:
    mutations = data.draw(toml_mutations(preset), label="mutations")
    text = "\n".join(toml_document(mutate(PRESET_TABLES[preset], mutations))) + "\n"
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        hw = work / "inputs" / "hw.toml"
        hw.parent.mkdir()
        hw.write_text(text, encoding="utf-8")
        config = write_json(work / "inputs" / "config.json", LLAMA)
        if command == "compare":
            argv = ["compare", "--model", str(config), "--hardware", f"{hw}:8", *TINY_GB]
        elif command == "optimize":
            argv = ["optimize", "--model", str(config), "--hardware", str(hw), "--gpus", "8", "--top", "2", *TINY_GB]
        else:
            argv = [command, "--model", str(config), "--hardware", str(hw), "--gpus", "8", "--plan", "TP2/PP2/DP2",
                    *TINY_GB]  # fmt: skip
        res = run_here(work, [*argv, "--json"] if as_json else argv)
    kind = {"memory": "layout", "validate": "layout"}.get(command, command) if as_json else None
    names = ("hardware", *{p[-1] for _, p, _ in mutations if p})
    check(res, kind, names=names)


# --- every key of a config.json ----------------------------------------------------------------------

CONFIG_FIELDS = sorted({
    *(k for c in TINY_MODELS.values() for k in c),
    "model_type", "_paraplan_name", "hidden_size", "n_embd", "d_model", "n_embed", "num_hidden_layers", "n_layer",
    "num_layers", "num_attention_heads", "n_head", "num_heads", "num_key_value_heads", "num_kv_heads",
    "multi_query_group_num", "intermediate_size", "n_inner", "ffn_hidden_size", "ffn_dim", "vocab_size",
    "padded_vocab_size", "max_position_embeddings", "n_positions", "seq_length", "head_dim", "num_local_experts",
    "num_experts", "n_routed_experts", "num_experts_per_tok", "moe_topk", "moe_intermediate_size",
    "shared_expert_intermediate_size", "n_shared_experts", "first_k_dense_replace", "moe_layer_freq",
    "decoder_sparse_step", "mlp_only_layers", "kv_lora_rank", "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
    "v_head_dim", "sliding_window", "layer_types", "use_sliding_window", "max_window_layers", "tie_word_embeddings",
    "attention_bias", "mlp_bias", "hidden_act", "activation_function", "rope_scaling", "rope_theta",
    "partial_rotary_factor", "text_config", "architectures", "torch_dtype", "num_nextn_predict_layers",
    "interleave_moe_layer_step", "parallel_attn", "new_decoder_architecture", "multi_query", "rotary_pct",
})  # fmt: skip
CONFIG_VALUES = st.one_of(
    st.none(),
    SCALAR_VALUES,
    SCALAR_VALUES,
    st.sampled_from(sorted(FAMILIES)),
    nested(st.none() | SCALAR_VALUES),
    st.sampled_from([{"type": "linear", "factor": 2.0}, {"rope_type": "yarn", "factor": 1e308}, [0] * 4,
                     ["full_attention", "sliding_attention"] * 2, {**LLAMA}, {"hidden_size": 0}]),
)  # fmt: skip


@st.composite
def config_mutations(draw: st.DrawFn, base: dict[str, Any]) -> list[tuple[str, tuple[str, ...], Any]]:
    keys = sorted({*base, *CONFIG_FIELDS})
    out: list[tuple[str, tuple[str, ...], Any]] = []
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["set", "set", "set", "delete", "deepen"]))
        key = draw(st.sampled_from(keys))
        out.append((op, (key,), draw(CONFIG_VALUES) if op == "set" else None))
    return out


def json_text(value: Any) -> str:
    """JSON as Python's own encoder writes it: NaN and Infinity tokens, huge integers in full."""
    return json.dumps(value)


@fuzz("config_fields")
@given(
    data=st.data(),
    base=st.sampled_from(sorted(TINY_MODELS)),
    wrap=st.sampled_from([None, None, None, None, "text_config"]),
    command=st.sampled_from(["memory", "memory", "validate", "optimize"]),
    as_json=st.sampled_from([True, True, False]),
)
def test_fuzz_every_config_json_key(data: st.DataObject, base: str, wrap: str | None, command: str,
                                    as_json: bool) -> None:  # fmt: skip
    mutations = data.draw(config_mutations(TINY_MODELS[base]), label="mutations")
    config = mutate(TINY_MODELS[base], mutations)
    if wrap:  # a multimodal config: the language model under text_config
        config = {"model_type": "gemma3", "text_config": {**config, "model_type": "gemma3_text"}}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        path = work / "inputs" / "config.json"
        path.parent.mkdir()
        path.write_text(json_text(config), encoding="utf-8")
        if command == "optimize":
            argv = ["optimize", "--model", str(path), "--hardware", "a100-80g", "--gpus", "4", "--top", "2", *TINY_GB]
        else:
            argv = [command, "--model", str(path), "--hardware", "a100-80g", "--gpus", "4", "--plan", "TP2/PP2",
                    *TINY_GB]  # fmt: skip
        res = run_here(work, [*argv, "--json"] if as_json else argv)
    kind = ("optimize" if command == "optimize" else "layout") if as_json else None
    check(res, kind, names=("config", "model", *{p[-1] for _, p, _ in mutations}))


# --- every column of the calibrate CSV -----------------------------------------------------------------

CSV_COLUMNS = ["id", "group", "hardware", "model", "config", "gpus", "plan", "global_batch", "seq_len", "step_time_s",
               "measured_step_time_s", "knobs", "note", *(n for n in KNOBS if n not in ("tp", "pp", "dp", "cp", "ep")),
               *STACK_FIELDS]  # fmt: skip
CSV_CELLS = st.one_of(
    st.sampled_from(["", " ", "0", "-1", "1", "2", "8", "1e30", "-1e30", "nan", "inf", "-inf", "1.5", "0.5", "1e-300",
                     "1_000", "0x10", "1" * 5000, "9" * 30, "true", "false", "none", "full", "selective", "fp8",
                     "megatron", "deepspeed", "torchtitan", "optimizer", "ring", "bf16", "fp32", "llama2-7b",
                     "a100-80g", "TP8", "TP2/PP2/DP2", "TP2/DP2", "/dev/zero", ".", "..", "config.json", "[/]",
                     "\x1b[31m", '"', '""', "a,b", "line\nbreak", "\r", "\ufeff"]),
    st.sampled_from(['{"micro_batch": 2}', "[1, 2]", '{"virtual_stages": 1e30}', '{"recompute": "none", '
                     '"recompute_layers": 1}', "null", '"text"', "[" * 5000 + "]" * 5000, '{"seq_len": 1' + "0" * 5000
                     + "}", "{}", '{"zero": 3, "offload": "all"}', '{"framework": "torchtitan", "precision": "fp16"}',
                     '{"flash_attention": "maybe"}', '{"unknown_knob": 1}', json.dumps(LLAMA), json.dumps(GPT2),
                     json.dumps({**LLAMA, "hidden_size": 0}), "{" + '"a":' * 3000 + "1" + "}" * 3000]),
    st.integers(-(10**12), 10**12).map(str),
    st.floats().map(repr),
    st.text(max_size=12),
    CONFIG_VALUES.map(json_text),
)  # fmt: skip


@st.composite
def csv_mutations(draw: st.DrawFn) -> list[tuple[str, Any, Any]]:
    out: list[tuple[str, Any, Any]] = []
    for _ in range(draw(st.integers(1, 3))):
        op = draw(st.sampled_from(["cell", "cell", "cell", "cell", "drop_column", "rename_column", "extra_cells",
                                   "duplicate_row", "blank_row"]))  # fmt: skip
        column = draw(st.sampled_from(CSV_COLUMNS))
        value = draw(CSV_CELLS) if op in ("cell", "rename_column") else None
        row = draw(st.sampled_from([0, 1, "both"]))
        out.append((op, (column, row), value))
    return out


def csv_text(mutations: list[tuple[str, Any, Any]]) -> str:
    rows = good_runs()
    columns = list(rows[0])
    extra_cells = False
    for op, (column, row), value in mutations:
        targets = rows if row == "both" else rows[row : row + 1]
        if op == "cell":
            if column not in columns:
                columns.append(column)
            for r in targets:
                r[column] = value
        elif op == "drop_column" and column in columns:
            columns.remove(column)
        elif op == "rename_column" and column in columns:
            at = columns.index(column)
            new = str(value)
            columns[at] = new
            for r in rows:
                r[new] = r.pop(column, "")
        elif op == "extra_cells":
            extra_cells = True
        elif op == "duplicate_row":
            rows.append(dict(rows[0]))
        elif op == "blank_row":
            rows.insert(1, {})
    buffer = io.StringIO()
    writer = csv.writer(buffer)
    writer.writerow(columns)
    for r in rows:
        writer.writerow([r.get(c, "") for c in columns] + (["surplus", "cells"] if extra_cells else []))
    return buffer.getvalue()


@fuzz("csv_columns")
@given(
    mutations=csv_mutations(),
    fit=st.sampled_from(["gemm_max", "attention,gemm_max", None, None]),  # None: all constants, too many for 2 runs
    hardware=st.sampled_from(["a100-80g", "a100-80g", "h100-sxm"]),
    bom=st.booleans(),
    as_json=st.booleans(),
)
def test_fuzz_every_calibrate_csv_column(mutations: list[tuple[str, Any, Any]], fit: str | None, hardware: str,
                                         bom: bool, as_json: bool) -> None:  # fmt: skip
    text = csv_text(mutations)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        runs = work / "inputs" / "runs.csv"
        runs.parent.mkdir()
        runs.write_text(("\ufeff" if bom else "") + text, encoding="utf-8", newline="")
        argv = ["calibrate", "--hardware", hardware, "--runs", str(runs), "--out", "out.toml",
                *(["--fit", fit] if fit else []), *(["--json"] if as_json else [])]  # fmt: skip
        res = run_here(work, argv, written=("out.toml",))
        wrote = (work / "out.toml").exists()
    assert res.code in (0, 2), f"calibrate exits 0 or 2\n{res}"
    assert wrote == (res.code == 0), f"--out written {wrote} with exit {res.code}\n{res}"
    if as_json:
        check_calibrate_json(res)
    elif res.code == 2:
        check_error(res)


# --- special files, drawn ----------------------------------------------------------------------------


# File names as users make them, markup and non-ASCII included; no separator, no whitespace
# (the Error line folds whitespace), no control character (it shows those as '?').
FILE_NAMES = st.text(st.characters(exclude_categories=("Cc", "Cs", "Zs", "Zl", "Zp"), exclude_characters="/"),
                     max_size=12)  # fmt: skip


@fuzz("special_files")
@given(
    kind=st.sampled_from(SPECIAL_KINDS),
    option=st.sampled_from(["--model", "--hardware", "--hardware-count", "--runs", "--from-launch"]),
    as_json=st.booleans(),
    via_link=st.booleans(),
    name=FILE_NAMES,
)
def test_fuzz_special_files(kind: str, option: str, as_json: bool, via_link: bool, name: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "work"
        work.mkdir()
        try:
            path = special_file(Path(tmp), kind, name)
        except OSError:  # a name the file system refuses (too long in bytes): nothing to test
            return
        if via_link and kind != "trailing_slash":
            link = Path(tmp) / "via-link"
            link.symlink_to(path)
            path = link
        argv, _ = special_argv(option, path, as_json)
        res = run_here(work, argv, limit_s=10)
        check_special(res, kind, path)


# --- output streams that fail ---------------------------------------------------------------------


class FailingStdout(io.TextIOBase):
    """A stdout that accepts `room` characters, then fails as `kind` says: the reader went away
    (BrokenPipeError), the device is full or broken (OSError), or the stream is closed."""

    def __init__(self, room: int, kind: str) -> None:
        self.room = room
        self.kind = kind
        self.written = 0
        self.failed = False
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def writable(self) -> bool:
        return True

    def isatty(self) -> bool:
        return False

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "utf-8"

    def fileno(self) -> int:
        raise io.UnsupportedOperation("no file descriptor")  # never let the CLI dup2 over the real stdout

    def _fail(self) -> None:
        self.failed = True
        if self.kind == "broken_pipe":
            raise BrokenPipeError(32, "Broken pipe")
        if self.kind == "full":
            raise OSError(28, "No space left on device")
        if self.kind == "io_error":
            raise OSError(5, "Input/output error")
        self._closed = True
        raise ValueError("I/O operation on closed file.")

    def write(self, text: str) -> int:
        if self._closed:
            raise ValueError("I/O operation on closed file.")
        if self.written + len(text) > self.room:
            self._fail()
        self.written += len(text)
        return len(text)

    def flush(self) -> None:
        if self._closed:
            raise ValueError("I/O operation on closed file.")


def run_with_stdout(argv: list[str], stream: io.TextIOBase | None) -> Result:
    err = io.StringIO()
    code: object = "returned without SystemExit"
    saved = sys.stdout
    try:
        sys.stdout = stream
        with contextlib.redirect_stderr(err):
            try:
                main(argv)
            except SystemExit as exc:
                code = exc.code
            except Exception as exc:
                raise AssertionError(f"CLI crashed on argv={argv!r}: {type(exc).__name__}: {exc}") from exc
    finally:
        sys.stdout = saved
    return Result(argv, code, "", err.getvalue())


STREAM_COMMANDS: dict[str, list[str]] = {
    "help": ["--help"],
    "validate_help": ["validate", "--help"],
    "version": ["--version"],
    "list_models": ["list", "models"],
    "list_hardware_json": ["list", "hardware", "--json"],
    "schema": ["schema", "compare"],
    "validate": ["validate", "--model", "llama2-7b", "--gpus", "8", "--hardware", "a100-80g", "--plan", "TP8"],
    "validate_json": ["validate", "--model", "llama2-7b", "--gpus", "8", "--hardware", "a100-80g", "--plan", "TP8",
                      "--json"],
    "validate_infeasible": ["validate", "--model", "llama2-7b", "--gpus", "1", "--hardware", "rtx4090", "--plan",
                            "TP1", "--offload", "none"],
    "validate_emit": ["validate", "--model", "llama2-7b", "--gpus", "8", "--hardware", "a100-80g", "--plan", "TP8",
                      "--emit", "deepspeed"],
    "memory": ["memory", "--model", "llama2-7b", "--gpus", "8", "--hardware", "a100-80g", "--plan", "TP2/PP4"],
    "optimize": ["optimize", "--model", "llama2-7b", "--gpus", "8", "--hardware", "a100-80g", "--top", "3"],
    "optimize_json": ["optimize", "--model", "llama2-7b", "--gpus", "8", "--hardware", "a100-80g", "--json"],
    "compare": ["compare", "--model", "llama2-7b", "--hardware", "a100-80g:8,rtx4090:16"],
    "compare_json": ["compare", "--model", "llama2-7b", "--hardware", "a100-80g:8", "--json"],
}  # fmt: skip


@functools.cache
def full_output(name: str) -> tuple[object, int]:
    """(exit code, characters printed) of a command with a stdout that never fails."""
    res = run_cli(STREAM_COMMANDS[name])
    assert res.code in (0, 1), str(res)
    return res.code, len(res.out)


@fuzz("output_streams")
@given(
    name=st.sampled_from(sorted(STREAM_COMMANDS)),
    kind=st.sampled_from(["broken_pipe", "broken_pipe", "full", "io_error", "closed", "none"]),
    room=st.one_of(st.sampled_from([0, 1, 10, 80, 4096]), st.floats(0, 1.2)),
)
def test_fuzz_failing_stdout(name: str, kind: str, room: int | float) -> None:
    code, size = full_output(name)
    limit = int(room * size) if isinstance(room, float) else room
    stream = None if kind == "none" else FailingStdout(limit, kind)
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        before = snapshot(work)
        with contextlib.chdir(work), time_limit(CALL_LIMIT_S):
            res = run_with_stdout(STREAM_COMMANDS[name], stream)
        assert snapshot(work) == before, f"a failed write changed the working directory\n{res}"
    if stream is not None and not stream.failed:  # the output fit (its length varies a little: times)
        assert limit >= size * 0.9, f"{limit} of {size} characters fit, yet no write failed\n{res}"
        assert res.code == code, f"nothing failed, yet exit {res.code} (expected {code})\n{res}"
        return
    if kind == "broken_pipe":
        assert res.code == 141, f"a broken pipe exits 141\n{res}"
        assert res.err == "", f"a broken pipe is quiet\n{res}"
    else:
        assert res.code == 3, f"an unwritable stdout exits 3 (never 0 or 1: no answer was given)\n{res}"
        lines = res.err.splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error:"), f"one Error line\n{res}"


# Launch files with values their own framework refuses (found by a random --from-launch fuzz: each
# ended in an internal error, exit 3): a parallel degree of 0 (torchtitan's ParallelDims._validate
# asserts each is at least 1, data_parallel_shard_degree -1 aside; Megatron-LM divides the world
# size by it), DeepSpeed's gradient_accumulation_steps 0 (its _batch_assertion asserts grad_acc > 0)
# and a --seq-length below 1.
@pytest.mark.parametrize(
    ("name", "text", "names"),
    [
        ("titan_cp.sh", "torchrun --nproc_per_node 4 -m torchtitan.train --parallelism.context_parallel_degree 0\n",
         ("parallelism.context_parallel_degree",)),
        ("titan_pp.sh", "torchrun --nproc_per_node 8 -m torchtitan.train --parallelism.pipeline_parallel_degree 0\n",
         ("parallelism.pipeline_parallel_degree",)),
        ("titan_shard.sh", "torchrun --nproc_per_node 8 -m torchtitan.train --parallelism.data_parallel_shard_degree 0\n",
         ("parallelism.data_parallel_shard_degree",)),
        ("megatron_tp.sh", "torchrun --nproc-per-node 8 pretrain_gpt.py --tensor-model-parallel-size 0 --micro-batch-size 1\n",
         ("--tensor-model-parallel-size",)),
        ("megatron_seq.sh", "torchrun --nproc-per-node 8 pretrain_gpt.py --seq-length 0 --micro-batch-size 1\n", ("seq-len",)),
        ("ds.json", '{"train_batch_size": 64, "gradient_accumulation_steps": 0, "zero_optimization": {"stage": 3}}',
         ("gradient_accumulation_steps",)),
    ],
    ids=["titan_cp0", "titan_pp0", "titan_shard0", "megatron_tp0", "megatron_seq0", "deepspeed_ga0"],
)  # fmt: skip
def test_launch_values_their_framework_refuses_are_bad_input(tmp_path: Path, name: str, text: str,
                                                              names: tuple[str, ...]) -> None:  # fmt: skip
    path = tmp_path / name
    path.write_text(text)
    res = run_cli(
        ["validate", "--model", "llama3-8b", "--hardware", "h100-sxm", "--gpus", "8", "--from-launch", str(path)]
    )
    assert res.code == 2, str(res)
    check_error(res, names)

"""The `paraplan` command line: parse, call the Python API (`paraplan.api`), print. Thin.

Options for the layout knobs and the stack settings are generated from their schemas
(`cost_models.layout.Layout`, `cost_models.stack.Stack`), so a new knob is a new option without
touching this file. Exit codes: 0 feasible / done, 1 infeasible, 2 bad input (one `Error:` line
on stderr, never a traceback), 3 an output stream that cannot be written, or an internal error
(one `Error:` line; PARAPLAN_DEBUG=1 shows the traceback), 141 a closed pipe (quietly, as `head`
expects).

Heavy modules (numpy, ortools, pydantic models of the results) are imported inside the commands,
so that `paraplan --help` and `paraplan list` start fast.
"""

from __future__ import annotations

import contextlib
import io
import math
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from paraplan.cost_models.errors import InputError
from paraplan.cost_models.layout import BOOLS, DEGREES, ENUMS, KNOBS, MAX_GPUS, SEARCHED, SETTINGS, Role, parse_knob
from paraplan.cost_models.stack import STACK_CHOICES, STACK_FIELDS, STACK_NUMBERS, STACK_SETS, Stack

F = TypeVar("F", bound=Callable[..., Any])
EXIT_OK, EXIT_INFEASIBLE, EXIT_BAD_INPUT, EXIT_OUTPUT, EXIT_PIPE = 0, 1, 2, 3, 141
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # after whitespace is collapsed: ESC, BEL, C1 controls
FRAMEWORKS = ENUMS["framework"].labels()


class FiniteRange(click.FloatRange):
    """A float range that also refuses nan and inf (click's FloatRange lets nan through)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number


class KnobType(click.ParamType):  # type: ignore[type-arg]
    """A layout knob's value, validated by the schema (`layout.parse_knob`): the same path as
    the calibrate CSV and the Python API."""

    def __init__(self, name: str):
        self.knob = name
        self.name = name.replace("_", "-")

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        try:
            return parse_knob(self.knob, value)
        except ValueError as exc:
            self.fail(str(exc), param, ctx)


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _knob_option(name: str) -> Callable[[F], F]:
    spec = KNOBS[name]
    if name in BOOLS:
        return click.option(f"{_flag(name)}/--no-{name.replace('_', '-')}", default=None, help=spec.help)
    kind: click.ParamType = (  # type: ignore[type-arg]
        click.Choice(ENUMS[name].labels(), case_sensitive=False) if name in ENUMS else KnobType(name)
    )
    default = None
    suffix = "" if spec.role is Role.SETTING else " [default: chosen]"
    if spec.role is Role.SETTING and name != "global_batch":
        from paraplan.cost_models.layout import Layout

        default = str(getattr(Layout(), name))
        suffix = f" [default: {default}]"
    return click.option(_flag(name), type=kind, default=default, help=spec.help + suffix)


def _stack_option(name: str) -> Callable[[F], F]:
    from dataclasses import fields

    meta = {f.name: f.metadata.get("help", "") for f in fields(Stack)}
    help_text = f"{meta[name]} [default: the framework's]"
    if name in STACK_CHOICES:
        return click.option(_flag(name), type=click.Choice(STACK_CHOICES[name]), default=None, help=help_text)
    if name in STACK_SETS:  # comma-separated words, read by question.stack_from
        return click.option(_flag(name), type=str, default=None, metavar="A,B", help=help_text)
    if name in STACK_NUMBERS:  # a positive count, checked by question.stack_from
        return click.option(_flag(name), type=str, default=None, metavar="N", help=help_text)
    return click.option(f"{_flag(name)}/--no-{name.replace('_', '-')}", default=None, help=help_text)


def knob_options(func: F) -> F:
    """Every searched knob and setting, every stack setting, the headroom and --json."""
    options: list[Callable[[F], F]] = [_knob_option(n) for n in (*SETTINGS, *SEARCHED)]
    options += [_stack_option(n) for n in STACK_FIELDS]
    options += [
        click.option("--mem-headroom", type=FiniteRange(0.0, 0.9), default=0.0, show_default=True,
                     help="Fraction of GPU memory to keep free beyond the hardware's reserve."),
        click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout."),
    ]  # fmt: skip
    for option in reversed(options):
        func = option(func)
    return func


html_option = click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Write a self-contained HTML report.",
)


def answer(result: Any, as_json: bool, html_path: Path | None, html_writer: str,
           print_report: Callable[[], None]) -> None:  # fmt: skip
    """A command's answer: the HTML report if asked (`html_writer`, a function of paraplan.html,
    imported only then), the inputs' warnings on stderr, then the JSON object or the human report
    on stdout."""
    if html_path is not None:
        from paraplan import html

        getattr(html, html_writer)(html_path, result)
    warn(result.warnings)
    if as_json:
        _out(result.model_dump_json(indent=2))
    else:
        print_report()


def degree_options(func: F) -> F:
    """--tp N (fixed) and --min-tp/--max-tp N (bounds) for every parallel degree."""
    options: list[Callable[[F], F]] = []
    for name in DEGREES:
        options.append(click.option(_flag(name), type=KnobType(name), default=None, help=f"Fix {name.upper()}."))
    for name in DEGREES:
        for side in ("min", "max"):
            options.append(
                click.option(
                    f"--{side}-{name}",
                    type=click.IntRange(1, MAX_GPUS),
                    default=None,
                    help=f"{'Lower' if side == 'min' else 'Upper'} bound on {name.upper()}.",
                )
            )
    for option in reversed(options):
        func = option(func)
    return func


def _framework_from_emit(opts: dict[str, Any], emit: str | None) -> dict[str, Any]:
    """--emit X without --framework plans for X (the API's rule); a default --framework yields."""
    if emit is not None and click.get_current_context().get_parameter_source("framework") == (
        click.core.ParameterSource.DEFAULT
    ):
        opts = {k: v for k, v in opts.items() if k != "framework"}
    return opts


def split_options(opts: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """(layout knobs, stack settings) out of a command's options, None = not given."""
    knobs = {n: opts.pop(n) for n in list(opts) if n in KNOBS}
    stack = {n: opts.pop(n) for n in list(opts) if n in STACK_FIELDS}
    return {k: v for k, v in knobs.items() if v is not None}, stack


def _bounds(opts: dict[str, Any]) -> dict[str, int | None]:
    return {key: opts.pop(key) for key in list(opts) if key.startswith(("min_", "max_")) and key[4:] in DEGREES}


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="paraplan")
def cli() -> None:
    """paraplan: the best TP x PP x DP (x CP x EP) layout for training a transformer.

    Models are presets (`paraplan list models`) or a Hugging Face config.json; hardware is a
    preset (`paraplan list hardware`) or a TOML file of the same schema.
    """


def _plan_command(name: str, doc: str, memory_only: bool) -> click.Command:
    @click.option("--model", required=True, help="Model preset or path to a config.json.")
    @click.option("--gpus", type=click.IntRange(1, MAX_GPUS), default=None,
                  help="Number of GPUs [required unless --from-launch states the world size].")  # fmt: skip
    @click.option("--hardware", required=True, help="Hardware preset or path to a TOML file.")
    @click.option("--plan", "plan_text", default=None,
                  help="Layout, e.g. TP8/PP4/DP8 (CP, EP, VPP optional) [required unless --from-launch].")  # fmt: skip
    @click.option("--from-launch", "from_launch", type=click.Path(dir_okay=False, path_type=Path), default=None,
                  help="Read the plan and its knobs from a Megatron-LM script or argument list, a torchtitan "
                  "command line or v0.2 TOML, or a DeepSpeed JSON/launcher; given knobs override the "
                  "file's.")  # fmt: skip
    @click.option(
        "--emit",
        type=click.Choice(FRAMEWORKS),
        default=None,
        help="Also print the plan's launch configuration for this framework.",
    )
    @html_option
    @knob_options
    def command(model: str, gpus: int | None, hardware: str, plan_text: str | None, from_launch: Path | None,
                emit: str | None, html_path: Path | None, as_json: bool, mem_headroom: float,
                **opts: Any) -> int:  # fmt: skip
        from paraplan import api, report

        if from_launch is None and (gpus is None or plan_text is None):
            raise InputError(f"{name} needs --gpus and --plan, or --from-launch FILE")
        if from_launch is not None:  # the file's settings, not the options' defaults
            ctx = click.get_current_context()
            opts = {k: v for k, v in opts.items() if ctx.get_parameter_source(k) != click.core.ParameterSource.DEFAULT}
        knobs, stack = split_options(_framework_from_emit(opts, emit))
        result = api.validate(model, gpus, hardware, plan_text, mem_headroom=mem_headroom, stack=stack, emit=emit,
                              from_launch=from_launch, **knobs)  # fmt: skip
        answer(result, as_json, html_path, "write_validate_html", lambda: report.print_validate(result, memory_only))
        return EXIT_OK if result.feasible else EXIT_INFEASIBLE

    command.__doc__ = doc
    return click.command(name)(command)


cli.add_command(_plan_command(
    "validate",
    "Is this plan feasible, and how good is it? Knobs not given are chosen to make the plan as good as it can "
    "be; the report gives the gap to the optimum and the single plan change that gains most. Exit 0 if "
    "feasible, 1 if not (every violated limit is listed, with the changes that would fit), 2 on bad input.",
    memory_only=False,
))  # fmt: skip
cli.add_command(_plan_command(
    "memory",
    "Per-GPU memory of a plan, term by term against capacity (same inputs, JSON and exit codes as validate).",
    memory_only=True,
))  # fmt: skip


@cli.command("optimize")
@click.option("--model", required=True, help="Model preset or path to a config.json.")
@click.option("--gpus", "gpus_text", default=None, help="GPU count (1024) or range (256..2048: the search picks).")
@click.option(
    "--hardware",
    multiple=True,
    required=True,
    help="Hardware preset(s) or TOML path(s); comma-separated or repeated; NAME:COUNT sets its own count; "
    "A:N+B:M (or a pool TOML with [[member]] tables) is one mixed pool whose pipeline stages may run on "
    "either type.",
)
@degree_options
@click.option(
    "--tp-within-node/--tp-across-nodes",
    default=True,
    show_default=True,
    help="Keep TP groups inside one server (their per-layer collectives), or allow them to span servers.",
)
@click.option(
    "--deadline-days",
    type=FiniteRange(0, 1e6, min_open=True),
    default=None,
    help="Train --tokens within this many days (with a GPU range: the search picks the count).",
)
@click.option(
    "--tokens",
    type=FiniteRange(1, 1e18),
    default=None,
    help="Training tokens: adds days and (with a price) dollars to every layout.",
)
@click.option("--top", type=click.IntRange(1, 100), default=None,
              help="Layouts per hardware [default: 5; 1 for a pool A:N+B:M, whose each further answer is "
              "another proven optimum and takes several times longer].")  # fmt: skip
@click.option(
    "--objective",
    type=click.Choice(["time", "cost"]),
    default="time",
    show_default=True,
    help="Fastest step, or cheapest per token (needs a price).",
)
@click.option("--emit", type=click.Choice(FRAMEWORKS), default=None, help="Print the best layout's launch config.")
@html_option
@knob_options
def optimize(model: str, gpus_text: str | None, hardware: tuple[str, ...], tp_within_node: bool,
             deadline_days: float | None, tokens: float | None, top: int | None, objective: str, emit: str | None,
             html_path: Path | None, as_json: bool, mem_headroom: float, **opts: Any) -> int:  # fmt: skip
    """The best layouts per hardware, exactly (every candidate evaluated, exact top-k).

    Any knob given is fixed; --min-/--max- bounds, --tp-within-node, --mem-headroom and
    --deadline-days constrain the search. Exit 0 when every hardware has a layout, 1 when one has
    none (the reason and the changes that would fit are printed), 2 on bad input.
    """
    from paraplan import api, report

    bounds = _bounds(opts)
    knobs, stack = split_options(_framework_from_emit(opts, emit))
    result = api.optimize(model, hardware, gpus_text, top=top, objective=objective,  # type: ignore[arg-type]
                          tokens=tokens, deadline_days=deadline_days, bounds=bounds, tp_within_node=tp_within_node,
                          mem_headroom=mem_headroom, stack=stack, emit=emit, scaling=html_path is not None,
                          **knobs)  # fmt: skip
    answer(result, as_json, html_path, "write_optimize_html", lambda: report.print_optimize(result, objective))
    return EXIT_OK if all(r.layouts for r in result.results) else EXIT_INFEASIBLE


@cli.command("schema")
@click.argument("command", type=click.Choice(["validate", "optimize", "compare", "calibrate"]))
def schema(command: str) -> int:
    """Print the JSON Schema of a command's --json output (the fields are explained in docs/json.md)."""
    import json

    from paraplan.schemas import output_model

    _out(json.dumps(output_model(command).model_json_schema(), indent=2))
    return EXIT_OK


@cli.group("list")
def list_group() -> None:
    """The bundled presets."""


@list_group.command("models")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def list_models(as_json: bool) -> int:
    """Model presets with their architecture and parameter counts."""
    from paraplan import report

    report.print_models(as_json)
    return EXIT_OK


@list_group.command("hardware")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def list_hardware(as_json: bool) -> int:
    """Hardware presets with their key figures."""
    from paraplan import report

    report.print_hardware(as_json)
    return EXIT_OK


def _out(text: str) -> None:
    click.echo(text)


def warn(lines: list[str]) -> None:
    """The inputs' warnings on stderr, one `Warning:` line each (stdout stays the answer)."""
    for line in lines:
        _stderr(f"Warning: {_one_line(line)}")


def _register_late_commands() -> None:
    from paraplan.cli_compare import calibrate_command, compare_command

    cli.add_command(compare_command(knob_options))
    cli.add_command(calibrate_command())


_register_late_commands()


def main(argv: list[str] | None = None) -> None:
    """Entry point: bad input is one `Error:` line and exit 2; a closed pipe exits quietly."""
    _buffer_stdout()
    stdout = sys.stdout
    try:
        try:
            code = cli.main(args=argv, prog_name="paraplan", standalone_mode=False)
        except SystemExit:
            # click turns a closed pipe met inside a command (or its --help) into exit 1, which the
            # contract reserves for "infeasible"; it swaps in a stdout wrapper only then.
            if sys.stdout is not stdout:
                sys.stdout = stdout
                raise BrokenPipeError from None
            raise
        sys.stdout.flush()
    except InputError as exc:
        _fail(str(exc), EXIT_BAD_INPUT)
    except click.exceptions.NoArgsIsHelpError as exc:
        _stderr(exc.ctx.get_help() if exc.ctx else "")
        sys.exit(EXIT_BAD_INPUT)
    except click.ClickException as exc:
        _fail(exc.format_message(), EXIT_BAD_INPUT)
    except click.exceptions.Abort:
        _fail("aborted", EXIT_BAD_INPUT)
    except click.exceptions.Exit as exc:
        _flush_or_pipe()
        sys.exit(exc.exit_code)
    except BrokenPipeError:
        _quiet_pipe()
    except OSError as exc:
        _output_failed(f"cannot write the output: {exc.strerror or exc}")
    except Exception as exc:  # a bug: one line, no traceback (PARAPLAN_DEBUG=1 shows it)
        if _stdout_unusable():
            _output_failed("cannot write the output: standard output is closed")
        if os.environ.get("PARAPLAN_DEBUG"):
            raise
        _fail(f"internal error ({type(exc).__name__}: {exc}); please report it with the command line", EXIT_OUTPUT)
    sys.exit(code if isinstance(code, int) else EXIT_OK)


def _buffer_stdout() -> None:
    """Under PYTHONUNBUFFERED (python -u) stdout writes straight to its file descriptor, and
    CPython's text layer drops whatever a partial write leaves: a pipe whose reader goes away
    mid-write, or a signal, would cut the answer short with exit 0. A buffered writer retries
    partial writes and raises on the broken pipe."""
    raw = getattr(sys.stdout, "buffer", None)
    if not isinstance(raw, io.FileIO) or raw.closed:
        return
    with contextlib.suppress(OSError, ValueError):
        writer = io.BufferedWriter(io.FileIO(raw.fileno(), "w", closefd=False))
        sys.stdout = io.TextIOWrapper(writer, encoding=sys.stdout.encoding, errors=sys.stdout.errors,
                                      line_buffering=bool(sys.stdout.line_buffering))  # fmt: skip


def _stdout_unusable() -> bool:
    return sys.stdout is None or getattr(sys.stdout, "closed", False)


def _flush_or_pipe() -> None:
    try:
        if sys.stdout is not None:
            sys.stdout.flush()
    except BrokenPipeError:
        _quiet_pipe()
    except (OSError, ValueError):
        _output_failed("cannot write the output")


def _drop_stdout() -> None:
    # What stdout still buffers can never be written: point its descriptor at /dev/null, so that
    # the interpreter's last flush neither fails ("Exception ignored", exit 120) nor blocks.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError, AttributeError):
        pass


def _quiet_pipe() -> None:
    # The reader went away (`paraplan ... | head -1`): stop quietly, as a SIGPIPE would.
    _drop_stdout()
    sys.exit(EXIT_PIPE)


def _output_failed(message: str) -> None:
    _drop_stdout()
    _fail(message, EXIT_OUTPUT)


def _stderr(text: str) -> None:
    with contextlib.suppress(OSError, ValueError, AttributeError):
        click.echo(text, err=True)


def _one_line(message: str) -> str:
    """One line of printable text: user input quoted in a message (a model name, a plan) may hold
    escape sequences that a terminal would obey; control characters become '?'."""
    return _CONTROL.sub("?", " ".join(message.split()))


def _fail(message: str, code: int) -> None:
    _stderr(f"Error: {_one_line(message)}")
    sys.exit(code)

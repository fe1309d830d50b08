"""The `compare` and `calibrate` commands (thin, over `paraplan.decision` and `paraplan.calibration`)."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import click

from paraplan.cost_models.errors import InputError
from paraplan.cost_models.layout import MAX_GPUS

F = TypeVar("F", bound=Callable[..., Any])
EXIT_OK, EXIT_INFEASIBLE = 0, 1

# (option, figure it overrides, help, low, high)
FIGURE_OPTIONS = (
    ("--gpu-usd", "gpu_usd", "Price of one GPU [preset].", 0, 1e8),
    ("--server-usd", "server_share_usd", "Server share per GPU: chassis, CPUs, RAM, NICs [preset].", 0, 1e8),
    ("--network-usd", "network_share_usd", "Network share per GPU: switches, cables [preset].", 0, 1e8),
    ("--lifetime-years", "lifetime_years", "Amortization period [preset].", 0.1, 50),
    ("--cloud-usd-per-gpu-hour", "cloud_usd_per_gpu_hour", "Rental price per GPU-hour, for --pricing cloud [preset].",
     0, 1e5),
    ("--usd-per-kwh", "usd_per_kwh", "Electricity price [preset].", 0, 1e3),
    ("--pue", "pue", "Power usage effectiveness [preset].", 1.0, 5.0),
    ("--idle-fraction", "idle_fraction", "GPU draw while waiting, as a fraction of TDP [preset].", 0.0, 1.0),
    ("--node-overhead-w", "node_overhead_w", "Non-GPU power per node: CPUs, fans, NICs [preset].", 0, 1e6),
    ("--gpu-mtbf-hours", "gpu_mtbf_hours", "Mean time between failures of one GPU [preset].", 0.1, 1e9),
    ("--node-mtbf-hours", "node_mtbf_hours", "Mean time between non-GPU failures of one server [preset].", 0.1, 1e9),
    ("--restart-s", "restart_s", "Time to detect a failure, restart and reload the checkpoint [preset].", 0, 1e7),
)  # fmt: skip


def _figure_options(func: F) -> F:
    from paraplan.cli import FiniteRange

    options = [click.option(flag, name, type=FiniteRange(lo, hi), default=None, help=text)
               for flag, name, text, lo, hi in FIGURE_OPTIONS]  # fmt: skip
    options.append(
        click.option(
            "--checkpoint-write-gbps",
            type=FiniteRange(0.001, 1e6),
            default=None,
            help="Checkpoint write bandwidth per node in GB/s (all nodes write at once) [preset].",
        )
    )
    for option in reversed(options):
        func = option(func)
    return func


def compare_command(knob_options: Callable[[Callable[..., Any]], Callable[..., Any]]) -> click.Command:
    from paraplan.cli import FiniteRange, html_option

    @click.command("compare")
    @click.option("--model", required=True, help="Model preset or path to a config.json.")
    @click.option(
        "--hardware",
        multiple=True,
        required=True,
        help="NAME:COUNT per hardware (e.g. a100-80g:256,rtx4090:2048); comma-separated or repeated; "
        "A:N+B:M (or a pool TOML) is one mixed pool.",
    )
    @click.option(
        "--gpus",
        "default_gpus",
        type=click.IntRange(1, MAX_GPUS),
        default=None,
        help="GPU count for a --hardware given without :COUNT.",
    )
    @click.option("--tokens", type=FiniteRange(1, 1e18), default=2e12, show_default=True, help="Training tokens.")
    @click.option(
        "--budget-usd",
        type=FiniteRange(0, 1e15, min_open=True),
        default=None,
        help="Budget: COUNT becomes the maximum and the fastest run within budget is picked.",
    )
    @click.option(
        "--deadline-days",
        type=FiniteRange(0, 1e6, min_open=True),
        default=None,
        help="Deadline: COUNT becomes the maximum and the cheapest run that meets it is picked.",
    )
    @click.option(
        "--pricing",
        type=click.Choice(["own", "cloud"]),
        default="own",
        show_default=True,
        help="own: capex amortized over the lifetime + energy; cloud: price per GPU-hour.",
    )
    @click.option(
        "--staff-usd-per-day",
        type=FiniteRange(0, 1e9),
        default=0.0,
        show_default=True,
        help="People running the job, per day of wall-clock.",
    )
    @_figure_options
    @click.option(
        "--plot",
        "plot_path",
        type=click.Path(dir_okay=False, path_type=Path),
        default=None,
        help="Write a PNG of the comparison (needs matplotlib: pip install 'paraplan[plot]').",
    )
    @html_option
    @knob_options
    def compare(model: str, hardware: tuple[str, ...], default_gpus: int | None, tokens: float,
                budget_usd: float | None, deadline_days: float | None, pricing: str, staff_usd_per_day: float,
                plot_path: Path | None, html_path: Path | None, as_json: bool, mem_headroom: float,
                **opts: Any) -> int:  # fmt: skip
        """The hardware decision: per NAME:COUNT, the best layout and what training --tokens costs.

        Time without and with failures (Young/Daly checkpointing, goodput), failures per hour,
        energy at the predicted utilization, and the cost (hardware amortized or rented, energy,
        staff) where the hardware has a price, then a verdict. With --budget-usd or
        --deadline-days, COUNT is the maximum and the count is chosen. Exit 0 when every hardware
        has a run that meets the budget and deadline, 1 otherwise, 2 on bad input.
        """
        from paraplan.cli import answer, split_options
        from paraplan.compare_report import print_compare
        from paraplan.decision import compare as run_compare

        if plot_path is not None:
            from paraplan.plot import check_available

            check_available()
        gbps = opts.pop("checkpoint_write_gbps")
        figures = {name: opts.pop(name) for _, name, _, _, _ in FIGURE_OPTIONS}
        if gbps is not None:
            figures["storage_write_bytes_per_s"] = gbps * 1e9
        knobs, stack = split_options(opts)
        result = run_compare(model, list(hardware), gpus=default_gpus, tokens=tokens, budget_usd=budget_usd,
                             deadline_days=deadline_days, pricing=pricing,  # type: ignore[arg-type]
                             figures={k: v for k, v in figures.items() if v is not None},
                             staff_usd_per_day=staff_usd_per_day, scaling=plot_path is not None or html_path is not None,
                             mem_headroom=mem_headroom, stack=stack,
                             notify=lambda line: click.echo(f"Note: {line}", err=True), **knobs)  # fmt: skip
        if plot_path is not None:
            from paraplan.plot import write_plot

            write_plot(plot_path, result)

        def report() -> None:
            print_compare(result)
            for path in (plot_path, html_path):
                if path is not None:
                    click.echo(f"  wrote {path}")

        answer(result, as_json, html_path, "write_compare_html", report)
        ok = all(e.best is not None and e.deadline_met is not False and e.budget_met is not False
                 for e in result.results)  # fmt: skip
        return EXIT_OK if ok else EXIT_INFEASIBLE

    return compare


def check_out(path: Path, force: bool, protect: list[Path]) -> Path:
    """The file `--out` names (a link resolved), or InputError: it is one of `protect` (the
    inputs), it exists and `force` is not given, or it is no regular file. A rename onto a device
    or a FIFO would replace the node itself (as root, /dev/full), so those are refused even with
    `force`. Called before any work, and again just before the write."""
    for other in protect:
        try:
            if path.exists() and other.exists() and os.path.samefile(path, other):
                raise InputError(f"--out '{path}' is the input file '{other}'; choose another name")
        except OSError:
            continue
    if (path.exists() or path.is_symlink()) and not force:
        raise InputError(f"--out '{path}' exists; give --force to overwrite it")
    target = Path(os.path.realpath(path)) if path.is_symlink() else path
    if target.exists() and not target.is_file():
        raise InputError(f"--out '{path}' is not a regular file (a directory, device or pipe); name a file")
    return target


def write_atomically(path: Path, text: str, force: bool, protect: list[Path]) -> None:
    """Write `text` to `path` through a temporary file and a rename, so a failure never leaves a
    half-written file. Refuses a path that is one of `protect` (the inputs), and an existing
    file (or a link to one) unless `force`."""
    target = check_out(path, force, protect)
    directory = target.parent if str(target.parent) else Path(".")
    temporary: str | None = None
    try:
        descriptor, temporary = tempfile.mkstemp(dir=directory, prefix=f".{target.name}.", suffix=".tmp")
        with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.replace(temporary, target)
    except OSError as exc:
        if temporary is not None:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
        raise InputError(f"cannot write --out '{path}': {exc.strerror or exc}") from None


def calibrate_command() -> click.Command:
    from paraplan.fit_parameters import HARDWARE_PARAMETERS, PARAMETERS, STACK_PREFIX

    @click.command("calibrate")
    @click.option("--hardware", required=True, help="Hardware preset or TOML to start from.")
    @click.option(
        "--runs",
        "runs_path",
        required=True,
        type=click.Path(dir_okay=False, path_type=Path),
        help="CSV of measured runs: model,gpus,plan,global_batch,seq_len,step_time_s [+ knob columns].",
    )
    @click.option(
        "--out",
        "out_path",
        required=True,
        type=click.Path(dir_okay=False, path_type=Path),
        help="Where to write the calibrated hardware TOML.",
    )
    @click.option("--force", is_flag=True, help="Overwrite --out if it exists.")
    @click.option(
        "--fit",
        "fit_names",
        default=None,
        help=f"Comma-separated constants to fit, of {', '.join(PARAMETERS)} [default: {', '.join(HARDWARE_PARAMETERS)}, "
        f"and {STACK_PREFIX}<stack> for each other stack with 3 or more runs beside 3 or more Megatron-LM runs; "
        "with no more runs than these, only the ones the runs determine].",
    )
    @click.option("--name", default=None, help="Name of the calibrated preset [default: <hardware>-calibrated].")
    @click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
    def calibrate(hardware: str, runs_path: Path, out_path: Path, force: bool, fit_names: str | None,
                  name: str | None, as_json: bool) -> int:  # fmt: skip
        """Fit the hardware's efficiency constants to measured runs; write a TOML --hardware accepts.

        Bounded least squares on the log of predicted/measured step time, under Huber's loss past a
        3% error, each source (the optional `group` column) weighing the same. A run whose optional
        `hardware` column names another preset of the same die (a800-80g beside a100-80g) is
        predicted on that preset. Runs of other hardware, runs the model finds infeasible or
        predicts more than 3x off are left out and listed. Prints the error before and
        after per run, warns when a constant ends on its bound and names the constants the runs do
        not determine (with no more runs than the default constants, those keep the preset's values).
        Refuses (exit 2) a CSV with missing columns or unknown models, fewer runs than the constants
        --fit names, and an --out that exists (without --force) or is the runs file.
        """
        import shlex

        from paraplan.calibration import calibrate as run_calibrate
        from paraplan.report import print_calibrate

        check_out(out_path, force, [runs_path])  # before the fit: a refusal should not wait for it
        argv = ["paraplan", "calibrate", "--hardware", hardware, "--runs", str(runs_path), "--out", str(out_path)]
        argv += ["--fit", fit_names] if fit_names else []
        argv += ["--name", name] if name else []
        result = run_calibrate(hardware, runs_path, fit_names=fit_names, name=name, command=shlex.join(argv),
                               notify=lambda line: click.echo(f"Note: {line}", err=True))  # fmt: skip
        write_atomically(out_path, result.toml, force, [runs_path])
        result = result.model_copy(update={"out": str(out_path)})
        if as_json:
            click.echo(result.model_dump_json(indent=2))
        else:
            print_calibrate(result)
        return EXIT_OK

    return calibrate

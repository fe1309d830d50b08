"""The `paraplan` command line (contract: ../shared/contract.md). Thin: parse, call, print.

Exit codes: 0 feasible / done, 1 infeasible, 2 bad input (one `Error:` line on stderr).
"""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

import click
from rich.console import Console

from paraplan.cost_models.errors import InputError
from paraplan.cost_models.models import ModelSpec, load_model, model_preset_names
from paraplan.cost_models.stack import Stack
from paraplan.cost_models.tco import PRICINGS
from paraplan.hardware_specs.dump import cluster_to_toml
from paraplan.hardware_specs.loader import SpecError, load_cluster, preset_names
from paraplan.hardware_specs.schema import Cluster
from paraplan import report
from paraplan.advice import best_single_change, requirements
from paraplan.calibrate import PARAMETERS, calibrated_cluster, fit, load_runs, parse_fit_names
from paraplan.compare_report import compare_stdout, render_compare
from paraplan.decision import Overrides, Request, decide, verdict
from paraplan.emit import EMITTERS
from paraplan.output import EvaluatedLayoutOut, OptimizeOut, render_json
from paraplan.plan import parse_plan
from paraplan.plot import check_available, write_plot
from paraplan.scenario import LAYOUT_KNOBS, Scenario, best_or_closest
from paraplan.search import Constraints, build_table, gpu_count_domain, search, solve
from paraplan.space import Knobs

F = TypeVar("F", bound=Callable[..., Any])


class FiniteRange(click.FloatRange):
    """A float range that also refuses nan and inf (click's FloatRange lets nan through: every
    comparison with nan is false)."""

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number
TOKENS_PER_BATCH = 4_194_304
MAX_GPUS = 10_000_000
EXIT_OK, EXIT_INFEASIBLE, EXIT_BAD_INPUT = 0, 1, 2


def knob_options(func: F) -> F:
    """The layout knobs of the contract, shared by validate, memory, optimize and compare."""
    options = [
        click.option("--seq-len", type=click.IntRange(1, 100_000_000), default=4096, show_default=True,
                     help="Sequence length in tokens."),
        click.option("--global-batch", type=click.IntRange(1, 1_000_000_000), default=None,
                     help="Sequences per optimizer step [default: 4,194,304 tokens / seq-len]."),
        click.option("--micro-batch", type=click.IntRange(1, 1_000_000), default=None,
                     help="Sequences per micro-batch [default: chosen]."),
        click.option("--recompute", type=click.Choice(["none", "selective", "full"]), default=None,
                     help="Activation recompute [default: chosen]."),
        click.option("--recompute-layers", type=click.IntRange(0, 100_000), default=None,
                     help="With full recompute, layers per model chunk recomputed (Megatron's block "
                          "method); 0 = all [default: chosen]."),
        click.option("--zero", type=click.IntRange(0, 3), default=None,
                     help="ZeRO stage: 1 shards optimizer states, 2 + gradients, 3 + weights [default: chosen]."),
        click.option("--sequence-parallel/--no-sequence-parallel", default=None,
                     help="Megatron sequence parallelism with TP [default: chosen]."),
        click.option("--virtual-stages", type=click.IntRange(1, 10_000), default=None,
                     help="Interleaved 1F1B model chunks per GPU [default: chosen]."),
        click.option("--precision", type=click.Choice(["bf16", "fp16", "fp8"]), default="bf16", show_default=True,
                     help="Training precision; fp8 runs projection and MLP GEMMs on FP8 tensor cores."),
        click.option("--mem-headroom", type=FiniteRange(0.0, 0.9), default=0.0, show_default=True,
                     help="Fraction of GPU memory to keep free."),
        click.option("--main-grads", type=click.Choice(["fp32", "bf16"]), default="fp32", show_default=True,
                     help="Gradient buffer: fp32 (Megatron-LM) or bf16 (DeepSpeed)."),
        click.option("--dp-overlap/--no-dp-overlap", default=True, show_default=True,
                     help="Overlap data-parallel reduction/gathers with compute (Megatron-Core, DeepSpeed)."),
        click.option("--flash-attention/--no-flash-attention", default=True, show_default=True,
                     help="Fused attention (no s x s score matrix in memory)."),
        click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout."),
    ]
    for option in reversed(options):
        func = option(func)
    return func


def _knobs(opts: dict[str, Any]) -> Knobs:
    seq_len = opts["seq_len"]
    global_batch = opts["global_batch"] or max(1, TOKENS_PER_BATCH // seq_len)
    return Knobs(
        micro_batch=opts["micro_batch"],
        virtual_stages=opts["virtual_stages"],
        recompute=opts["recompute"],
        recompute_layers=opts["recompute_layers"],
        zero=opts["zero"],
        sequence_parallel=opts["sequence_parallel"],
        precision=opts["precision"],
        global_batch=global_batch,
        seq_len=seq_len,
    )


def _scenario(model: str, hardware: str, gpus: int, opts: dict[str, Any]) -> Scenario:
    return _scenario_for(load_model(model), load_cluster(hardware), gpus, opts, {})


def _scenario_for(
    model: ModelSpec, cluster: Cluster, gpus: int, opts: dict[str, Any], fixed: dict[str, int | None]
) -> Scenario:
    return Scenario(
        model=model,
        cluster=cluster,
        gpus=gpus,
        knobs=replace(
            _knobs(opts),
            tp=fixed.get("tp"),
            pp=fixed.get("pp"),
            dp=fixed.get("dp"),
            cp=fixed.get("cp"),
            ep=fixed.get("ep"),
        ),
        stack=Stack(
            flash_attention=opts["flash_attention"], dp_overlap=opts["dp_overlap"], main_grads=opts["main_grads"]
        ),
        mem_headroom=opts["mem_headroom"],
    )


def _emit_json(obj: object) -> None:
    click.echo(json.dumps(obj, indent=2, sort_keys=False))


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(package_name="paraplan")
def cli() -> None:
    """paraplan: the best TP x PP x DP (x CP x EP) layout for training a transformer.

    Models are presets (`paraplan list models`) or a Hugging Face config.json; hardware is a
    preset (`paraplan list hardware`) or a TOML file of the same schema.
    """


def _assess(scenario: Scenario, plan_text: str) -> report.Assessment:
    """The plan with its open knobs filled by the solver, the optimum, and the best single change."""
    plan = parse_plan(plan_text, scenario.gpus)
    planned = scenario.with_plan(plan)
    result = search(planned, [scenario.gpus], Constraints(), 1)
    plan_space = planned.evaluate_space()
    choice = result.choices[0] if result.choices else best_or_closest(plan_space)
    free = scenario.free()
    free_table = build_table(free, [scenario.gpus], Constraints())
    optimum = solve(free, free_table, Constraints(), 1)
    change = best_single_change(free, free_table, plan, choice.step_time_s) if choice.feasible else None
    chosen = [k for k in LAYOUT_KNOBS if getattr(planned.knobs, k) is None]
    if planned.knobs.recompute is not None and "recompute_layers" in chosen:
        chosen.remove("recompute_layers")  # a given mode fixes it: all layers, or none
    needs = requirements(plan_space, chosen)
    return report.Assessment(choice, result, optimum.choices[0] if optimum.choices else None, change, chosen, needs)


def _plan_command(name: str, doc: str, render: Callable[[Console, report.Assessment], None]) -> click.Command:
    @click.option("--model", required=True, help="Model preset or path to a config.json.")
    @click.option("--gpus", type=click.IntRange(1, MAX_GPUS), required=True, help="Number of GPUs.")
    @click.option("--hardware", required=True, help="Hardware preset or path to a TOML file.")
    @click.option("--plan", "plan_text", required=True, help="Layout, e.g. TP8/PP4/DP8 (CP, EP, VPP optional).")
    @knob_options
    def command(model: str, gpus: int, hardware: str, plan_text: str, as_json: bool, **opts: Any) -> int:
        assessment = _assess(_scenario(model, hardware, gpus, opts), plan_text)
        if as_json:
            click.echo(render_json(EvaluatedLayoutOut, report.validate_json(assessment)))
        else:
            render(report.console(), assessment)
        return EXIT_OK if assessment.choice.feasible else EXIT_INFEASIBLE

    command.__doc__ = doc
    return click.command(name)(command)


cli.add_command(_plan_command(
    "validate",
    "Is this plan feasible, and how good is it? Knobs not given are chosen by the solver to make the "
    "plan as good as it can be; the report gives the gap to the optimum and the single plan change "
    "that gains most. Exit 0 if feasible, 1 if not (every violated limit is listed), 2 on bad input.",
    report.render_validate,
))
cli.add_command(_plan_command(
    "memory",
    "Per-GPU memory of a plan, term by term against capacity (same inputs, JSON and exit codes as validate).",
    report.render_memory,
))


def _gpu_counts(text: str | None, cluster_per_node: int) -> list[int]:
    if text is None:
        raise InputError("--gpus is required unless every --hardware names its count as NAME:COUNT")
    match = re.fullmatch(r"\s*(\d+)\s*(?:\.\.\s*(\d+)\s*)?", text)
    if not match:
        raise InputError(f"--gpus '{text}' must be a count (1024) or a range (256..2048)")
    lo = int(match.group(1))
    hi = int(match.group(2)) if match.group(2) else lo
    if not 1 <= lo <= hi <= MAX_GPUS:
        raise InputError(f"--gpus '{text}': need 1 <= low <= high <= {MAX_GPUS}")
    return [lo] if lo == hi else gpu_count_domain(lo, hi, cluster_per_node)


def _hardware_items(values: tuple[str, ...]) -> list[tuple[str, str | None]]:
    items: list[tuple[str, str | None]] = []
    for value in values:
        for part in value.split(","):
            part = part.strip()
            if not part:
                raise InputError(f"--hardware '{value}' has an empty entry")
            name, sep, count = part.rpartition(":")
            items.append((name, count) if sep and count.strip().isdigit() else (part, None))
    return items


@cli.command("optimize")
@click.option("--model", required=True, help="Model preset or path to a config.json.")
@click.option("--gpus", "gpus_text", default=None, help="GPU count (1024) or range (256..2048, the solver picks).")
@click.option("--hardware", multiple=True, required=True,
              help="Hardware preset(s) or TOML path(s); comma-separated or repeated; NAME:COUNT sets its own count.")
@click.option("--tp", type=click.IntRange(1, MAX_GPUS), default=None, help="Fix tensor parallelism.")
@click.option("--pp", type=click.IntRange(1, MAX_GPUS), default=None, help="Fix pipeline parallelism.")
@click.option("--dp", type=click.IntRange(1, MAX_GPUS), default=None, help="Fix data parallelism.")
@click.option("--cp", type=click.IntRange(1, MAX_GPUS), default=None, help="Fix context parallelism.")
@click.option("--ep", type=click.IntRange(1, MAX_GPUS), default=None, help="Fix expert parallelism.")
@click.option("--max-tp", type=click.IntRange(1, MAX_GPUS), default=None, help="Upper bound on TP.")
@click.option("--min-dp", type=click.IntRange(1, MAX_GPUS), default=None, help="Lower bound on DP.")
@click.option("--max-pp", type=click.IntRange(1, MAX_GPUS), default=None, help="Upper bound on PP.")
@click.option("--tp-within-node", is_flag=True, help="Keep every TP group inside one server.")
@click.option("--deadline-days", type=FiniteRange(0, 1e6, min_open=True), default=None,
              help="Train --tokens within this many days (with a GPU range: the solver picks the count).")
@click.option("--tokens", type=FiniteRange(1, 1e18), default=None, help="Training tokens, for --deadline-days.")
@click.option("--top", type=click.IntRange(1, 1000), default=5, show_default=True, help="Layouts per hardware.")
@click.option("--objective", type=click.Choice(["time", "cost"]), default="time", show_default=True,
              help="Fastest step, or cheapest per token (GPU-hours x price).")
@click.option("--emit", type=click.Choice(EMITTERS), default=None, help="Print the best layout as launch arguments.")
@knob_options
def optimize(model: str, gpus_text: str | None, hardware: tuple[str, ...], top: int, objective: str,
             emit: str | None, as_json: bool, **opts: Any) -> int:
    """The best layouts per hardware, proven optimal by CP-SAT under the cost model.

    Any knob given is fixed; --max-tp, --min-dp, --max-pp, --tp-within-node, --mem-headroom and
    --deadline-days are constraints of the solver's model. Exit 0 when every hardware has a
    layout, 1 when one has none (the reason is printed), 2 on bad input.
    """
    if opts["deadline_days"] is not None and opts["tokens"] is None:
        raise InputError("--deadline-days needs --tokens (how many tokens must be trained by then)")
    fixed = {d: opts.pop(d) for d in ("tp", "pp", "dp", "cp", "ep")}
    cons = Constraints(
        max_tp=opts.pop("max_tp"), min_dp=opts.pop("min_dp"), max_pp=opts.pop("max_pp"),
        tp_within_node=opts.pop("tp_within_node"), deadline_days=opts.pop("deadline_days"),
        tokens=opts.pop("tokens"), objective=objective,
    )
    model_spec = load_model(model)
    outcomes: list[report.HardwareOutcome] = []
    for name, count in _hardware_items(hardware):
        cluster = load_cluster(name)
        counts = _gpu_counts(count if count is not None else gpus_text, cluster.gpus_per_node)
        scenario = _scenario_for(model_spec, cluster, counts[0], opts, fixed)
        result = search(scenario, counts, cons, top)
        outcomes.append(report.HardwareOutcome(cluster, counts, result, by_cost=objective == "cost"))
    if emit is not None and not as_json:
        report.render_emit(model_spec, outcomes, emit, opts["flash_attention"])
    elif as_json:
        click.echo(render_json(OptimizeOut, report.optimize_json(model_spec, outcomes, emit, opts["flash_attention"])))
    else:
        report.render_optimize(report.console(), model_spec, outcomes, cons)
    return EXIT_OK if all(o.result.choices for o in outcomes) else EXIT_INFEASIBLE


@cli.command("calibrate")
@click.option("--hardware", required=True, help="Hardware preset or TOML to start from.")
@click.option("--runs", "runs_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="CSV of measured runs: model,gpus,plan,global_batch,seq_len,step_time_s [+ knob columns].")
@click.option("--out", "out_path", required=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Where to write the calibrated hardware TOML.")
@click.option("--fit", "fit_names", default=None,
              help=f"Comma-separated constants to fit [default: all of {', '.join(PARAMETERS)}].")
@click.option("--name", default=None, help="Name of the calibrated preset [default: <hardware>-calibrated].")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object on stdout.")
def calibrate(hardware: str, runs_path: Path, out_path: Path, fit_names: str | None, name: str | None,
              as_json: bool) -> int:
    """Fit the hardware's efficiency constants to measured runs; write a TOML --hardware accepts.

    Bounded least squares on the log of predicted/measured step time. Prints the error before and
    after. Refuses (exit 2) a CSV with missing columns, unknown models, or fewer runs than constants.
    """
    cluster = load_cluster(hardware)
    names = parse_fit_names(fit_names)
    runs = load_runs(runs_path)
    result = fit(runs, cluster, names)
    calibrated = calibrated_cluster(result.cluster, runs_path.name, len(runs), name)
    try:
        header = f"paraplan calibrate --hardware {hardware} --runs {runs_path.name}"
        out_path.write_text(cluster_to_toml(calibrated, header))
    except OSError as exc:
        raise InputError(f"cannot write --out '{out_path}': {exc.strerror or exc}") from None
    obj = report.calibrate_json(runs, result, names, out_path)
    if as_json:
        _emit_json(obj)
    else:
        report.render_calibrate(report.console(), obj)
    return EXIT_OK


@cli.command("compare")
@click.option("--model", required=True, help="Model preset or path to a config.json.")
@click.option("--hardware", multiple=True, required=True,
              help="NAME:COUNT per hardware (e.g. a100-80g:256,rtx4090:2048); comma-separated or repeated.")
@click.option("--gpus", "default_gpus", type=click.IntRange(1, MAX_GPUS), default=None,
              help="GPU count for a --hardware given without :COUNT.")
@click.option("--tokens", type=FiniteRange(1, 1e18), default=2e12, show_default=True,
              help="Training tokens of the run.")
@click.option("--budget-usd", type=FiniteRange(0, 1e15, min_open=True), default=None,
              help="Budget: COUNT becomes the maximum and the fastest run within budget is picked.")
@click.option("--deadline-days", type=FiniteRange(0, 1e6, min_open=True), default=None,
              help="Deadline: COUNT becomes the maximum and the cheapest run that meets it is picked.")
@click.option("--pricing", type=click.Choice(PRICINGS), default="own", show_default=True,
              help="own: capex amortized over the lifetime + energy; cloud: price per GPU-hour (energy included).")
@click.option("--gpu-usd", type=FiniteRange(0, 1e8), default=None, help="Price of one GPU [preset].")
@click.option("--server-usd", type=FiniteRange(0, 1e8), default=None,
              help="Server share per GPU: chassis, CPUs, RAM, NICs [preset].")
@click.option("--network-usd", type=FiniteRange(0, 1e8), default=None,
              help="Network share per GPU: switches, cables [preset].")
@click.option("--lifetime-years", type=FiniteRange(0, 50, min_open=True), default=None,
              help="Amortization period [preset].")
@click.option("--cloud-usd-per-gpu-hour", type=FiniteRange(0, 1e5), default=None,
              help="Rental price per GPU-hour, for --pricing cloud [preset].")
@click.option("--usd-per-kwh", type=FiniteRange(0, 1e3), default=None, help="Electricity price [preset].")
@click.option("--pue", type=FiniteRange(1.0, 5.0), default=None, help="Power usage effectiveness [preset].")
@click.option("--idle-fraction", type=FiniteRange(0.0, 1.0), default=None,
              help="GPU draw while waiting, as a fraction of TDP [preset].")
@click.option("--node-overhead-w", type=FiniteRange(0, 1e6), default=None,
              help="Non-GPU power per node: CPUs, fans, NICs [preset].")
@click.option("--gpu-mtbf-hours", type=FiniteRange(0.1, 1e9), default=None,
              help="Mean time between failures of one GPU [preset].")
@click.option("--node-mtbf-hours", type=FiniteRange(0.1, 1e9), default=None,
              help="Mean time between non-GPU failures of one server [preset].")
@click.option("--restart-s", type=FiniteRange(0, 1e7), default=None,
              help="Time to detect a failure, restart and reload the checkpoint [preset].")
@click.option("--checkpoint-write-gbps", type=FiniteRange(0.001, 1e6), default=None,
              help="Checkpoint write bandwidth per node in GB/s (all nodes write at once) [preset].")
@click.option("--staff-usd-per-day", type=FiniteRange(0, 1e9), default=0.0, show_default=True,
              help="People running the job, per day of wall-clock.")
@click.option("--plot", "plot_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Write a PNG of the comparison (needs matplotlib: pip install 'paraplan[plot]').")
@knob_options
def compare(model: str, hardware: tuple[str, ...], default_gpus: int | None, tokens: float,
            budget_usd: float | None, deadline_days: float | None, plot_path: Path | None, as_json: bool,
            **opts: Any) -> int:
    """The hardware decision: per NAME:COUNT, the best layout and what training --tokens costs.

    Time without and with failures (Young/Daly checkpointing, goodput), failures per hour,
    energy at the predicted utilization, and the cost (hardware amortized or rented, energy,
    staff), then a verdict. Price, power and reliability figures come from the presets and can
    be overridden (applied to every hardware). With --budget-usd or --deadline-days, COUNT is the
    maximum and the count is chosen. Exit 0 when every hardware has a run that meets the budget
    and deadline, 1 otherwise (the reason is printed), 2 on bad input.
    """
    if plot_path is not None:
        check_available()
    gbps = opts.pop("checkpoint_write_gbps")
    overrides = Overrides(
        pricing=opts.pop("pricing"), staff_usd_per_day=opts.pop("staff_usd_per_day"),
        gpu_usd=opts.pop("gpu_usd"), server_share_usd=opts.pop("server_usd"),
        network_share_usd=opts.pop("network_usd"), lifetime_years=opts.pop("lifetime_years"),
        cloud_usd_per_gpu_hour=opts.pop("cloud_usd_per_gpu_hour"), usd_per_kwh=opts.pop("usd_per_kwh"),
        pue=opts.pop("pue"), idle_fraction=opts.pop("idle_fraction"), node_overhead_w=opts.pop("node_overhead_w"),
        gpu_mtbf_hours=opts.pop("gpu_mtbf_hours"), node_mtbf_hours=opts.pop("node_mtbf_hours"),
        restart_s=opts.pop("restart_s"), storage_write_bytes_per_s=gbps * 1e9 if gbps is not None else None,
    )
    request = Request(tokens=tokens, budget_usd=budget_usd, deadline_days=deadline_days, scaling=plot_path is not None)
    model_spec = load_model(model)
    items = []
    for name, count in _hardware_items(hardware):
        if count is None and default_gpus is None:
            raise InputError(f"--hardware '{name}' needs a GPU count: NAME:COUNT (e.g. {name}:256) or --gpus")
        gpus = int(count) if count is not None else default_gpus
        assert gpus is not None
        if not 1 <= gpus <= MAX_GPUS:
            raise InputError(f"--hardware '{name}:{count}': the count must be 1..{MAX_GPUS}")
        items.append((load_cluster(name), gpus))
    outcomes = [decide(_scenario_for(model_spec, cluster, gpus, opts, {}), gpus, request, overrides)
                for cluster, gpus in items]
    lines = verdict(outcomes)
    if plot_path is not None:
        write_plot(plot_path, model_spec.name, tokens, outcomes)
    if as_json:
        click.echo(compare_stdout(model_spec.name, request, outcomes, lines))
    else:
        render_compare(report.console(), model_spec.name, request, outcomes, lines)
        if plot_path is not None:
            click.echo(f"  wrote {plot_path}")
    return EXIT_OK if all(o.ok for o in outcomes) else EXIT_INFEASIBLE


@cli.group("list")
def list_group() -> None:
    """The bundled presets."""


@list_group.command("models")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def list_models(as_json: bool) -> int:
    """Model presets with their architecture and parameter counts."""
    models = [load_model(n) for n in model_preset_names()]
    if as_json:
        _emit_json({"models": [report.model_json(m) for m in models]})
    else:
        report.render_models(report.console(), models)
    return EXIT_OK


@list_group.command("hardware")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def list_hardware(as_json: bool) -> int:
    """Hardware presets with their key figures."""
    clusters = [load_cluster(n) for n in preset_names()]
    if as_json:
        _emit_json({"hardware": [report.cluster_json(c) for c in clusters]})
    else:
        report.render_hardware(report.console(), clusters)
    return EXIT_OK


def main(argv: list[str] | None = None) -> None:
    """Entry point: maps bad input to one `Error:` line and exit 2, never a traceback."""
    try:
        code = cli.main(args=argv, prog_name="paraplan", standalone_mode=False)
    except (InputError, SpecError) as exc:
        _fail(str(exc))
    except click.exceptions.NoArgsIsHelpError as exc:
        click.echo(exc.ctx.get_help() if exc.ctx else "", err=True)
        sys.exit(EXIT_BAD_INPUT)
    except click.ClickException as exc:
        _fail(exc.format_message())
    except click.exceptions.Abort:
        _fail("aborted")
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    sys.exit(code if isinstance(code, int) else EXIT_OK)


def _fail(message: str) -> None:
    first_line = " ".join(message.split())
    click.echo(f"Error: {first_line}", err=True)
    sys.exit(EXIT_BAD_INPUT)

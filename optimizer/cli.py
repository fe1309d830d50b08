"""The `paraplan` command line (contract: ../shared/contract.md). Thin: parse, call, print.

Exit codes: 0 feasible / done, 1 infeasible, 2 bad input (one `Error:` line on stderr).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from cost_models.errors import InputError
from cost_models.models import load_model, model_preset_names
from cost_models.stack import Stack
from hardware_specs.loader import SpecError, load_cluster, preset_names
from optimizer import report
from optimizer.plan import parse_plan
from optimizer.scenario import LAYOUT_KNOBS, Scenario, best_choice, best_or_closest
from optimizer.space import Knobs

F = TypeVar("F", bound=Callable[..., Any])
TOKENS_PER_BATCH = 4_194_304
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
        click.option("--zero", type=click.IntRange(0, 3), default=None,
                     help="ZeRO stage: 1 shards optimizer states, 2 + gradients, 3 + weights [default: chosen]."),
        click.option("--sequence-parallel/--no-sequence-parallel", default=None,
                     help="Megatron sequence parallelism with TP [default: chosen]."),
        click.option("--virtual-stages", type=click.IntRange(1, 10_000), default=None,
                     help="Interleaved 1F1B model chunks per GPU [default: chosen]."),
        click.option("--precision", type=click.Choice(["bf16", "fp16", "fp8"]), default="bf16", show_default=True,
                     help="Training precision; fp8 runs projection and MLP GEMMs on FP8 tensor cores."),
        click.option("--mem-headroom", type=click.FloatRange(0.0, 0.9), default=0.0, show_default=True,
                     help="Fraction of GPU memory to keep free."),
        click.option("--main-grads", type=click.Choice(["fp32", "bf16"]), default="fp32", show_default=True,
                     help="Gradient buffer: fp32 (Megatron-LM) or bf16 (DeepSpeed)."),
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
        zero=opts["zero"],
        sequence_parallel=opts["sequence_parallel"],
        precision=opts["precision"],
        global_batch=global_batch,
        seq_len=seq_len,
    )


def _scenario(model: str, hardware: str, gpus: int, opts: dict[str, Any]) -> Scenario:
    return Scenario(
        model=load_model(model),
        cluster=load_cluster(hardware),
        gpus=gpus,
        knobs=_knobs(opts),
        stack=Stack(flash_attention=opts["flash_attention"], main_grads=opts["main_grads"]),
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


def _plan_command(name: str, doc: str, render: Callable[..., None]) -> click.Command:
    @click.option("--model", required=True, help="Model preset or path to a config.json.")
    @click.option("--gpus", type=click.IntRange(1, 10_000_000), required=True, help="Number of GPUs.")
    @click.option("--hardware", required=True, help="Hardware preset or path to a TOML file.")
    @click.option("--plan", "plan_text", required=True, help="Layout, e.g. TP8/PP4/DP8 (CP, EP, VPP optional).")
    @knob_options
    def command(model: str, gpus: int, hardware: str, plan_text: str, as_json: bool, **opts: Any) -> int:
        scenario = _scenario(model, hardware, gpus, opts)
        plan = parse_plan(plan_text, gpus)
        planned = scenario.with_plan(plan)
        choice = best_or_closest(planned)
        optimum = best_choice(scenario.free())
        chosen = [k for k in LAYOUT_KNOBS if getattr(planned.knobs, k) is None]
        obj = report.validate_json(choice, optimum, chosen)
        if as_json:
            _emit_json(obj)
        else:
            render(report.console(), choice, optimum, chosen)
        return EXIT_OK if choice.feasible else EXIT_INFEASIBLE

    command.__doc__ = doc
    return click.command(name)(command)


cli.add_command(_plan_command(
    "validate",
    "Is this plan feasible, and how good is it? Knobs not given are chosen to make the plan as good "
    "as it can be. Exit 0 if feasible, 1 if not (every violated limit is listed), 2 on bad input.",
    report.render_validate,
))
cli.add_command(_plan_command(
    "memory",
    "Per-GPU memory of a plan, term by term against capacity (same inputs, JSON and exit codes as validate).",
    report.render_memory,
))


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

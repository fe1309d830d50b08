"""Read a user's existing launch configuration into a neutral :class:`LaunchSettings`.

Inputs (the framework is detected from the file, or given):

* Megatron-LM: a bash launch script (variables, arrays, ``torchrun ... pretrain_gpt.py ${ARGS[@]}``)
  or a plain argument list;
* torchtitan: a 0.3 command line (``torchrun ... -m torchtitan.train --module M --config F
  --section.field value``, ``NGPU=8 ./run_train.sh --section.field value``) or a v0.2 TOML job
  config (optionally with a command line whose flags override it);
* DeepSpeed: a JSON config (``ds_config.json``), optionally with the launcher line
  (``deepspeed --num_gpus N --num_nodes M train.py --deepspeed_config ds.json ...``) in a second
  file, or a launcher script that names the JSON next to it.

Nothing is executed: shell text goes through :mod:`paraplan.launch.shell`.  Bad files raise
:class:`~paraplan.cost_models.errors.InputError` with one line naming the file and the problem.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import stat
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from paraplan.cost_models.errors import InputError

from .schema import (
    DEEPSPEED_VERSION,
    MEGATRON_COMMIT,
    TORCHTITAN_TOML_VERSION,
    TORCHTITAN_VERSION,
    _check_deepspeed,
    _check_megatron,
    _check_titan_toml,
    _check_torchtitan,
    _parse_megatron,
    _parse_titan,
    _titan_schema,
    megatron_args,
)
from .shell import Command, Interpreter, ShellLimitError, ShellSyntaxError, Text

__all__ = [
    "MAX_BYTES",
    "Framework",
    "LaunchSettings",
    "detect_framework",
    "parse_launch_text",
    "read_deepspeed",
    "read_launch",
    "read_megatron",
    "read_torchtitan",
]

Framework = Literal["megatron", "torchtitan", "deepspeed"]
Value = str | int | float | bool | list[Any] | None
MAX_BYTES = 1 << 20  # launch files are small; anything larger is refused, not truncated

_SCHEMA_NAMES: dict[str, str] = {
    "megatron": f"Megatron-LM {MEGATRON_COMMIT[:8]}",
    "torchtitan": f"torchtitan {TORCHTITAN_VERSION}",
    "torchtitan-0.2.2": f"torchtitan {TORCHTITAN_TOML_VERSION}",
    "deepspeed": f"DeepSpeed {DEEPSPEED_VERSION}",
}


@dataclass(frozen=True)
class LaunchSettings:
    """A launch configuration as read from a user's file, in the framework's own names.

    `values` is keyed by the framework's own names: Megatron flags as written
    (``"--tensor-model-parallel-size": 8``, value-less flags ``True``), torchtitan dotted fields
    (``"parallelism.tensor_parallel_degree": 2``, plus ``"module"``/``"config"``), DeepSpeed dotted
    JSON keys (``"zero_optimization.stage": 3``) plus the training script's own ``--flags``.
    Values whose text depends on something the file does not state keep their source text
    (``"$CHECKPOINT_PATH"``) and are listed in `unresolved` with the reason.
    """

    framework: Framework
    values: dict[str, Value]
    world_size: int | None = None
    unknown: list[str] = field(default_factory=list)  # flags/keys not in the pinned schema
    unresolved: dict[str, str] = field(default_factory=dict)  # flag/key -> why its value is unknown
    launcher: dict[str, Value] = field(default_factory=dict)  # torchrun/deepspeed options as written
    launcher_name: str | None = None  # "torchrun", "deepspeed", "python", "run_train.sh"
    entrypoint: str | None = None  # "pretrain_gpt.py", "torchtitan.train", "train.py"
    args: tuple[str, ...] = ()  # the training script's argument list (placeholders kept)
    unresolved_args: frozenset[int] = frozenset()  # positions in `args` whose text is unknown
    dests: dict[str, Value] = field(default_factory=dict)  # Megatron: argparse dest -> value
    config: dict[str, Any] | None = None  # DeepSpeed JSON / torchtitan TOML as parsed
    world_size_source: str | None = None
    schema: str = ""  # the pinned schema the file was read against
    source: str = ""  # file(s) read
    input_format: str = ""  # "bash", "args", "json", "toml"
    notes: list[str] = field(default_factory=list)

    def get(self, name: str, default: Value = None) -> Value:
        """A value by the framework's name (Megatron: the flag or its argparse dest)."""
        if name in self.values:
            return self.values[name]
        return self.dests.get(name, default)

    def problems(self) -> list[str]:
        """Check against the pinned schema (unknown values are not checked, only reported)."""
        out: list[str] = []
        if self.framework == "megatron":
            out.extend(_check_megatron(self.args, self.unresolved_args))
        elif self.framework == "torchtitan":
            if self.config is not None:
                out.extend(_check_titan_toml(self.config)[0])
            if self.args:
                version = (
                    TORCHTITAN_TOML_VERSION if self.schema.endswith(TORCHTITAN_TOML_VERSION) else TORCHTITAN_VERSION
                )
                out.extend(_check_torchtitan(self.args, version, False, self.unresolved_args))
        else:
            if self.config is not None:
                out.extend(_check_deepspeed(self.config, _deepspeed_dp(self), False)[0])
            if self.runs_megatron_deepspeed:
                out.extend(_check_megatron(self.args, self.unresolved_args, "megatron-deepspeed"))
        return out

    @property
    def runs_megatron_deepspeed(self) -> bool:
        """A DeepSpeed launch of a Megatron-style pretrain_*.py: Megatron-DeepSpeed's training script,
        whose flags are checked against its pinned argument list (another script's are its own)."""
        entry = self.entrypoint
        return self.framework == "deepspeed" and entry is not None and bool(_PRETRAIN.match(_base(entry)))


# --------------------------------------------------------------------------------------------
# Files


def _label(path: str | os.PathLike[str]) -> str:
    s = os.fspath(path)
    return s if s.isprintable() else repr(s)


def _read_text(path: str | os.PathLike[str]) -> str:
    """Read a regular file of at most MAX_BYTES as UTF-8 text; InputError otherwise."""
    name = f"launch file {_label(path)}"  # the Error line says which input it is about
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0))
    except FileNotFoundError:
        raise InputError(f"{name}: no such file") from None
    except IsADirectoryError:
        raise InputError(f"{name}: is a directory, not a launch file") from None
    except OSError as e:
        raise InputError(f"{name}: cannot open: {e.strerror or e}") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise InputError(f"{name}: is a directory, not a launch file")
        if not stat.S_ISREG(st.st_mode):
            kind = (
                "a FIFO"
                if stat.S_ISFIFO(st.st_mode)
                else "a device"
                if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)
                else "a socket"
                if stat.S_ISSOCK(st.st_mode)
                else "not a regular file"
            )
            raise InputError(f"{name}: is {kind}; only regular files are read")
        if st.st_size > MAX_BYTES:
            raise InputError(f"{name}: {st.st_size} bytes; launch files are read only up to 1 MiB ({MAX_BYTES} bytes)")
        chunks: list[bytes] = []
        total = 0
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError as e:
                raise InputError(f"{name}: cannot read: {e.strerror or e}") from None
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
            if total > MAX_BYTES:
                raise InputError(f"{name}: more than 1 MiB ({MAX_BYTES} bytes); launch files are read only up to 1 MiB")
    finally:
        os.close(fd)
    data = b"".join(chunks)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{name}: not UTF-8 text (byte 0x{data[e.start]:02x} at offset {e.start})") from None
    if "\x00" in text:
        raise InputError(f"{name}: contains NUL bytes; not a text launch file")
    return text.removeprefix("\ufeff")


def _load_json(text: str, name: str) -> tuple[dict[str, Any], list[str]]:
    """The JSON object in `text` and the keys that appear more than once in one object."""
    dupes: list[str] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k, v in items:
            if k in out:
                dupes.append(k)
            out[k] = v
        return out

    try:
        data = json.loads(text, object_pairs_hook=pairs)
    except json.JSONDecodeError as e:
        raise InputError(f"{name}: not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from None
    except RecursionError:
        raise InputError(f"{name}: JSON nested too deeply") from None
    if not isinstance(data, dict):
        raise InputError(f"{name}: a DeepSpeed config must be a JSON object, not {type(data).__name__}")
    return data, sorted(set(dupes))


def _load_toml(text: str, name: str) -> dict[str, Any]:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise InputError(f"{name}: not valid TOML: {' '.join(str(e).split())}") from None
    except RecursionError:
        raise InputError(f"{name}: TOML nested too deeply") from None


def _interpret(text: str, name: str) -> Interpreter:
    it = Interpreter()
    try:
        it.run_text(text)
    except ShellSyntaxError as e:
        raise InputError(f"{name}: line {e.line}: {e.message}") from None
    except ShellLimitError as e:
        raise InputError(f"{name}: {e}") from None
    except RecursionError:
        raise InputError(f"{name}: shell constructs nested too deeply") from None
    return it


# --------------------------------------------------------------------------------------------
# Launch commands

_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")
_WRAPPERS = frozenset({"srun", "mpirun", "mpiexec", "env", "nohup", "time", "exec", "numactl", "stdbuf", "taskset"})
_TORCHRUN_FLAGS = frozenset(
    {"--standalone", "-m", "--module", "--no-python", "--no_python", "--run-path", "--run_path",
     "--virtual-local-rank", "--virtual_local_rank", "--use-env", "--use_env"}
)  # fmt: skip
_DEEPSPEED_FLAGS = frozenset(
    {"--module", "--no_python", "--no_local_rank", "--no_ssh", "--no_ssh_check", "--force_multi", "--save_pid",
     "--elastic_training", "--bind_cores_to_rank", "-q", "--quiet"}
)  # fmt: skip
_PYTHON_VALUE_OPTS = frozenset({"-W", "-X", "-c", "--check-hash-based-pycs"})


_PRETRAIN = re.compile(r"pretrain_\w+\.py$")


def _base(word: str) -> str:
    return PurePosixPath(word).name if word else word


@dataclass
class _Launch:
    command: Command | None
    launcher: str | None  # torchrun / deepspeed / python / run_train.sh / None (plain args)
    options: dict[str, Text]
    flags: list[str]  # value-less launcher options
    script: Text | None
    module: bool
    args: list[Text]
    wrapper: str | None = None  # srun / mpirun / mpiexec in front of the launcher
    wrapper_opts: dict[str, str] = field(default_factory=dict)
    sbatch: dict[str, str] = field(default_factory=dict)  # #SBATCH directives of the file


def _launcher_start(words: Sequence[Text]) -> int | None:
    for k, w in enumerate(words):
        b = _base(w.value)
        if b in ("torchrun", "deepspeed") or _PYTHON.match(b) or b.endswith((".py", ".sh")):
            return k
        if k == 0 and b not in _WRAPPERS:
            return None
    return None


_SLURM_SHORT = {"-N": "--nodes", "-n": "--ntasks", "-c": "--cpus-per-task", "-G": "--gpus"}


def _slurm_opts(tokens: Sequence[str]) -> dict[str, str]:
    """srun/sbatch/mpirun options: --opt=value, --opt value, -N 2, -N2, -np 16 (long names)."""
    out: dict[str, str] = {}
    i = 0
    while i < len(tokens):
        t = tokens[i]
        if t.startswith("--") and "=" in t:
            k, _, v = t.partition("=")
            out[k] = v
        elif t.startswith("--") or t in ("-np", "-n", "-N", "-c", "-G", "-w"):
            if i + 1 < len(tokens) and not tokens[i + 1].startswith("-"):
                out[_SLURM_SHORT.get(t, t)] = tokens[i + 1]
                i += 1
            else:
                out[t] = ""
        elif re.fullmatch(r"-[NncG]\d+", t):
            out[_SLURM_SHORT[t[:2]]] = t[2:]
        i += 1
    return out


def _sbatch(text: str) -> dict[str, str]:
    tokens: list[str] = []
    for m in re.finditer(r"(?m)^#SBATCH[ \t]+(.*)$", text):
        try:
            tokens.extend(shlex.split(m.group(1), comments=True))
        except ValueError:
            continue
    return _slurm_opts(tokens)


def _with_wrapper(launch: _Launch, cmd: Command, start: int) -> _Launch:
    if start > 0:
        launch.wrapper = _base(cmd.words[0].value)
        launch.wrapper_opts = _slurm_opts([w.value for w in cmd.words[1:start]])
    return launch


def _split_launch(cmd: Command, start: int) -> _Launch:
    return _with_wrapper(_split_launch_at(cmd, start), cmd, start)


def _split_launch_at(cmd: Command, start: int) -> _Launch:
    words = list(cmd.words[start:])
    prog = _base(words[0].value)
    options: dict[str, Text] = {}
    flags: list[str] = []

    def parse_opts(i: int, value_less: frozenset[str]) -> int:
        while i < len(words):
            w = words[i].value
            if not w.startswith("-") or w == "-":
                return i
            if w == "--":
                return i + 1
            name, eq, inline = w.partition("=")
            if eq:
                options[name] = Text(inline)
                i += 1
            elif name in value_less:
                flags.append(name)
                i += 1
            else:
                if i + 1 < len(words):
                    options[name] = words[i + 1]
                i += 2
        return i

    if prog == "torchrun":
        i = parse_opts(1, _TORCHRUN_FLAGS)
        module = "-m" in flags or "--module" in flags
        script = words[i] if i < len(words) else None
        return _Launch(cmd, "torchrun", options, flags, script, module, words[i + 1 :])
    if prog == "deepspeed":
        i = parse_opts(1, _DEEPSPEED_FLAGS)
        script = words[i] if i < len(words) else None
        return _Launch(cmd, "deepspeed", options, flags, script, "--module" in flags, words[i + 1 :])
    if _PYTHON.match(prog):
        i = 1
        while i < len(words) and words[i].value.startswith("-") and words[i].value != "-m":
            i += 2 if words[i].value in _PYTHON_VALUE_OPTS else 1
        if i < len(words) and words[i].value == "-m" and i + 1 < len(words):
            mod = words[i + 1].value
            if mod in ("torch.distributed.run", "torch.distributed.launch"):
                j = parse_opts(i + 2, _TORCHRUN_FLAGS)
                module = "-m" in flags or "--module" in flags
                script = words[j] if j < len(words) else None
                return _Launch(cmd, "torchrun", options, flags, script, module, words[j + 1 :])
            return _Launch(cmd, "python", options, flags, words[i + 1], True, words[i + 2 :])
        script = words[i] if i < len(words) else None
        return _Launch(cmd, "python", options, flags, script, False, words[i + 1 :])
    # ./run_train.sh ... or ./pretrain_gpt.py ...
    launcher = "run_train.sh" if prog.endswith(".sh") else None
    return _Launch(cmd, launcher, options, flags, words[0], False, words[1:])


def _pick_launch(it: Interpreter, text: str = "") -> _Launch | None:
    launch = _pick_launch_command(it)
    if launch is not None:
        launch.sbatch = _sbatch(text)
    return launch


def _pick_launch_command(it: Interpreter) -> _Launch | None:
    best: tuple[int, int, _Launch] | None = None
    for order, cmd in enumerate(it.commands):
        start = _launcher_start(cmd.words)
        if start is None:
            continue
        launch = _split_launch(cmd, start)
        score = sum(1 for w in launch.args if w.value.startswith("--"))
        if launch.script is None and launch.launcher in ("torchrun", "deepspeed"):
            continue
        if best is None or (score, order) >= (best[0], best[1]):
            best = (score, order, launch)
    if best is not None:
        return best[2]
    # a plain argument list: every "command" starts with a flag
    if it.commands and all(c.words[0].value.startswith("-") for c in it.commands if c.words):
        words = [w for c in it.commands for w in c.words]
        return _Launch(None, None, {}, [], None, False, words)
    return None


# --------------------------------------------------------------------------------------------
# World size

_GPUS_VARS = ("GPUS_PER_NODE", "NPROC_PER_NODE", "NGPUS_PER_NODE", "NUM_GPUS_PER_NODE", "NGPU", "NGPUS", "NUM_GPUS")
_NODES_VARS = ("NNODES", "NUM_NODES", "N_NODES", "NODES")


def _int_text(t: Text | None) -> int | None:
    if t is None or not t.resolved:
        return None
    s = t.value.strip()
    return int(s) if re.fullmatch(r"\d+", s) and int(s) > 0 else None


def _opt(launch: _Launch, *names: str) -> tuple[str, Text] | None:
    for n in names:
        if n in launch.options:
            return n, launch.options[n]
    return None


def _world_size(launch: _Launch | None, it: Interpreter | None) -> tuple[int | None, str | None, list[str]]:
    notes: list[str] = []
    if launch is not None and launch.launcher == "torchrun":
        nproc = _opt(launch, "--nproc_per_node", "--nproc-per-node")
        nnodes = _opt(launch, "--nnodes")
        procs = 1 if nproc is None else _int_text(nproc[1])
        nodes: int | None
        if "--standalone" in launch.flags or nnodes is None:
            nodes = 1
        elif nnodes[1].resolved and re.fullmatch(r"(\d+):(\d+)", nnodes[1].value.strip()):
            lo, hi = nnodes[1].value.strip().split(":")
            nodes = int(lo) if lo == hi else None
            if nodes is None:
                notes.append(f"torchrun --nnodes {nnodes[1].value}: elastic range, world size not fixed")
        else:
            nodes = _int_text(nnodes[1])
        if procs is not None and nodes is not None:
            src = f"torchrun {nproc[0] if nproc else '--nproc_per_node (default)'} {procs} x --nnodes {nodes}"
            sb_nodes = launch.wrapper_opts.get("--nodes") or launch.sbatch.get("--nodes")
            if sb_nodes and sb_nodes.isdigit() and int(sb_nodes) != nodes:
                notes.append(f"torchrun --nnodes {nodes} but the Slurm allocation has --nodes={sb_nodes}")
            return procs * nodes, src, notes
        if nproc is not None and procs is None:
            notes.append(f"torchrun {nproc[0]} {nproc[1].value}: not a fixed number of processes")
    elif launch is not None and launch.launcher == "deepspeed":
        gpus = _opt(launch, "--num_gpus", "--num_accelerators")
        nodes_opt = _opt(launch, "--num_nodes")
        include = _opt(launch, "-i", "--include")
        if include is not None and include[1].resolved:
            total = _count_include(include[1].value)
            if total is not None:
                return total, f"deepspeed {include[0]} {include[1].value}", notes
        g = _int_text(gpus[1]) if gpus else None
        n = _int_text(nodes_opt[1]) if nodes_opt else None
        if g is not None and n is not None:
            return g * n, f"deepspeed {gpus[0] if gpus else ''} {g} x --num_nodes {n}", notes
        if g is not None and nodes_opt is None:
            notes.append(
                f"deepspeed {gpus[0] if gpus else ''} {g} without --num_nodes: the node count comes from the hostfile"
            )
    elif launch is not None and launch.launcher == "python" and launch.wrapper is not None:
        tasks = _tasks(launch)
        if tasks is not None:
            return tasks[0], tasks[1], notes
    elif launch is not None and launch.launcher == "run_train.sh" and launch.command is not None:
        mode = launch.command.env.get("COMM_MODE")
        if mode is not None and mode.value:
            notes.append(f"COMM_MODE={mode.value}: run_train.sh runs one process that simulates NGPU ranks")
        ngpu = launch.command.env.get("NGPU")
        if ngpu is not None and _int_text(ngpu) is not None:
            return _int_text(ngpu), f"NGPU={ngpu.value} (run_train.sh: torchrun --nproc_per_node=$NGPU)", notes
    if it is None:
        return None, None, notes
    ws = it.vars.get("WORLD_SIZE")
    if isinstance(ws, Text) and _int_text(ws) is not None:
        return _int_text(ws), f"WORLD_SIZE={ws.value} in the script", notes
    for gv in _GPUS_VARS:
        g_val = it.vars.get(gv)
        if not isinstance(g_val, Text) or _int_text(g_val) is None:
            continue
        for nv in _NODES_VARS:
            n_val = it.vars.get(nv)
            if isinstance(n_val, Text) and _int_text(n_val) is not None:
                g_int, n_int = _int_text(g_val), _int_text(n_val)
                assert g_int is not None and n_int is not None
                return g_int * n_int, f"{gv}={g_int} x {nv}={n_int} in the script", notes
    return None, None, notes


def _tasks(launch: _Launch) -> tuple[int, str] | None:
    """Ranks of `srun python ...` / `mpirun -np N python ...` (one process per task)."""
    opts = launch.wrapper_opts
    if launch.wrapper in ("mpirun", "mpiexec"):
        n = opts.get("-np") or opts.get("--ntasks") or opts.get("--np")
        return (int(n), f"{launch.wrapper} -np {n}") if n and n.isdigit() and int(n) > 0 else None
    if launch.wrapper != "srun":
        return None
    for where, o in (("srun", opts), ("#SBATCH", launch.sbatch)):
        n = o.get("--ntasks")
        if n and n.isdigit() and int(n) > 0:
            return int(n), f"{where} --ntasks={n}"
        nodes, per = o.get("--nodes"), o.get("--ntasks-per-node")
        if nodes and per and nodes.isdigit() and per.isdigit() and int(nodes) * int(per) > 0:
            return int(nodes) * int(per), f"{where} --nodes={nodes} x --ntasks-per-node={per}"
    return None


def _count_include(spec: str) -> int | None:
    total = 0
    for host in spec.split("@"):
        _, colon, ids = host.partition(":")
        if not colon or not ids:
            return None  # all slots of the host: from the hostfile
        total += len([x for x in ids.split(",") if x.strip()])
    return total or None


def _deepspeed_dp(s: LaunchSettings) -> int | None:
    """Data-parallel size of a DeepSpeed launch when the file states it and no model parallelism."""
    if s.world_size is None:
        return None
    tp = s.values.get("--tensor-model-parallel-size", 1)
    pp = s.values.get("--pipeline-model-parallel-size", 1)
    sp = s.values.get("sequence_parallel_size", 1)
    if not all(isinstance(x, int) and not isinstance(x, bool) and x > 0 for x in (tp, pp, sp)):
        return None
    assert isinstance(tp, int) and isinstance(pp, int) and isinstance(sp, int)
    if s.world_size % (tp * pp * sp):
        return None
    return s.world_size // (tp * pp * sp)


# --------------------------------------------------------------------------------------------
# Detection

_DS_KEYS = frozenset(
    {"train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "zero_optimization",
     "fp16", "bf16", "optimizer", "scheduler", "gradient_clipping", "steps_per_print", "wall_clock_breakdown"}
)  # fmt: skip


def _titan_sections() -> frozenset[str]:
    names: set[str] = set()
    for v in (TORCHTITAN_VERSION, TORCHTITAN_TOML_VERSION):
        names |= {s.split(".")[0] for s in _titan_schema(v).sections}
    return frozenset(names)


def _looks_titan(args: Sequence[str], entry: str | None) -> bool:
    if entry is not None and (entry.startswith("torchtitan") or _base(entry) == "run_train.sh"):
        return True
    sections = _titan_sections()
    for a in args:
        m = re.match(r"^--([A-Za-z_-]+)\.", a)
        if m and m.group(1).replace("-", "_") in sections:
            return True
    return False


def _has_deepspeed_flag(args: Sequence[str]) -> bool:
    return any(a.split("=")[0] in ("--deepspeed_config", "--deepspeed-config", "--deepspeed") for a in args)


def _megatron_share(args: Sequence[str]) -> float:
    table = megatron_args()
    flags = [a.split("=")[0] for a in args if a.startswith("--")]
    return sum(1 for f in flags if f in table) / len(flags) if flags else 0.0


def detect_framework(text: str, name: str = "<text>") -> Framework:
    """Guess the framework of launch-file `text` (JSON -> DeepSpeed, TOML/`--parallelism.` ->
    torchtitan, Megatron flags -> Megatron-LM); InputError when nothing fits."""
    kind = _sniff(text, name)
    if kind == "json":
        return "deepspeed"
    if kind == "toml":
        return "torchtitan"
    it = _interpret(text, name)
    launch = _pick_launch(it)
    if launch is None:
        raise InputError(f"{name}: no launch command found (torchrun, deepspeed, python, or a --flag list)")
    return _classify(launch, name)


def _classify(launch: _Launch, name: str) -> Framework:
    args = [w.value for w in launch.args]
    entry = launch.script.value if launch.script is not None else None
    if _looks_titan(args, entry):
        return "torchtitan"
    if _has_deepspeed_flag(args):
        return "deepspeed"
    share = _megatron_share(args)
    if share >= 0.5 or (entry is not None and _PRETRAIN.match(_base(entry))):
        return "megatron"
    if launch.launcher == "deepspeed":
        return "deepspeed"
    raise InputError(
        f"{name}: cannot tell the framework (no torchtitan, DeepSpeed or Megatron-LM flags); pass framework="
    )


def _sniff(text: str, name: str) -> Literal["json", "toml", "shell"]:
    suffix = PurePosixPath(name).suffix.lower()
    head = text.lstrip()
    if suffix == ".json" or (suffix not in (".toml", ".sh", ".bash", ".slurm") and head.startswith("{")):
        return "json"
    if suffix == ".toml":
        return "toml"
    if suffix in ("", ".txt", ".cfg", ".conf") and re.search(r"(?m)^\s*\[[A-Za-z_][\w.]*\]\s*(#.*)?$", text):
        try:
            data = tomllib.loads(text)
        except (tomllib.TOMLDecodeError, RecursionError):
            return "shell"
        if set(data) & _titan_sections():
            return "toml"
    return "shell"


# --------------------------------------------------------------------------------------------
# Building settings


def _unresolved_reason(t: Text) -> str:
    return "; ".join(t.unresolved)


def _quote_note(key: str, value: str) -> str | None:
    if any(q in value for q in ("'", '"')):
        return (
            f"{key}: the value {value!r} keeps quote characters (bash passes them through from an unquoted expansion)"
        )
    return None


def _convert_megatron(spec_type: str | None, raw: str) -> Value:
    if spec_type == "int":
        try:
            return int(raw)
        except ValueError:
            return raw
    if spec_type == "float":
        try:
            return float(raw)
        except ValueError:
            return raw
    return raw


def _by_looks(raw: str) -> Value:
    if re.fullmatch(r"[-+]?\d+", raw):
        return int(raw)
    if re.fullmatch(r"[-+]?(\d+\.\d*|\.\d+|\d+)([eE][-+]?\d+)?", raw):
        return float(raw)
    return raw


def _megatron_values(
    args: list[str], skip: frozenset[int], texts: Sequence[Text]
) -> tuple[dict[str, Value], dict[str, Value], list[str], dict[str, str], list[str]]:
    parsed, _ = _parse_megatron(args, skip)
    values: dict[str, Value] = {}
    dests: dict[str, Value] = {}
    unknown: list[str] = []
    unresolved: dict[str, str] = {}
    notes: list[str] = []
    used: set[int] = set()
    for p in parsed:
        used.add(p.index)
        used.update(p.value_indices)
        if p.flag in values:
            notes.append(f"{p.flag} is given more than once; the last value wins")
        holes = [k for k in p.value_indices if k in skip]
        if holes:
            unresolved[p.flag] = "; ".join(_unresolved_reason(texts[k]) for k in holes)
        if p.spec is None:
            unknown.append(p.flag)
            values[p.flag] = True if not p.values else (p.values[0] if len(p.values) == 1 else list(p.values))
            continue
        if not p.spec.takes_value:
            values[p.flag] = True
            dests[p.spec.dest] = p.spec.flag_value(p.flag)
            continue
        conv: list[Value] = [
            v if k in skip else _convert_megatron(p.spec.type, v)
            for v, k in zip(p.values, p.value_indices, strict=True)
        ]
        single = p.spec.nargs is None or p.spec.nargs == "?"
        value: Value = (conv[0] if conv else None) if single else conv
        values[p.flag] = value
        dests[p.spec.dest] = value
        for v in p.values:
            q = _quote_note(p.flag, v)
            if q:
                notes.append(q)
    for k in sorted(skip - used):
        unresolved[texts[k].value] = f"arguments not known from the file: {_unresolved_reason(texts[k])}"
    return values, dests, unknown, unresolved, notes


def _texts_to_args(texts: Sequence[Text]) -> tuple[list[str], frozenset[int]]:
    return [t.value for t in texts], frozenset(k for k, t in enumerate(texts) if not t.resolved)


def _launcher_values(launch: _Launch) -> dict[str, Value]:
    out: dict[str, Value] = {k: (v.value) for k, v in launch.options.items()}
    for f in launch.flags:
        out[f] = True
    return out


def _build_megatron(launch: _Launch, it: Interpreter, name: str, fmt: str) -> LaunchSettings:
    args, skip = _texts_to_args(launch.args)
    values, dests, unknown, unresolved, notes = _megatron_values(args, skip, launch.args)
    ws, ws_src, ws_notes = _world_size(launch, it)
    return LaunchSettings(
        framework="megatron",
        values=values,
        world_size=ws,
        unknown=unknown,
        unresolved=unresolved,
        launcher=_launcher_values(launch),
        launcher_name=launch.launcher,
        entrypoint=launch.script.value if launch.script is not None else None,
        args=tuple(args),
        unresolved_args=skip,
        dests=dests,
        world_size_source=ws_src,
        schema=_SCHEMA_NAMES["megatron"],
        source=name,
        input_format=fmt,
        notes=[*it.notes, *ws_notes, *notes, *_assumed_notes(launch)],
    )


def _assumed_notes(launch: _Launch) -> list[str]:
    if launch.command is None or not launch.command.assumed:
        return []
    assumed = ", ".join(launch.command.assumed)
    return [f"the launch command (line {launch.command.line}) was reached only by assuming {assumed}"]


def _titan_values(
    args: list[str], skip: frozenset[int], texts: Sequence[Text], version: str
) -> tuple[dict[str, Value], list[str], dict[str, str]]:
    items, _ = _parse_titan(args, version, skip)
    values: dict[str, Value] = {}
    unknown: list[str] = []
    unresolved: dict[str, str] = {}
    used: set[int] = set()
    for a in items:
        if a.kind == "positional":
            continue
        used.add(a.index)
        used.update(a.value_indices)
        holes = [k for k in a.value_indices if k in skip]
        key = a.key if a.key is not None else a.flag.partition("=")[0].lstrip("-").replace("-", "_")
        if a.kind == "unknown":
            unknown.append(a.flag.partition("=")[0])
            values[key] = True if not a.values else (a.values[0] if len(a.values) == 1 else list(a.values))
        elif holes:
            values[key] = a.values[0] if len(a.values) == 1 else list(a.values)
        else:
            values[key] = a.value
        if holes:
            unresolved[key] = "; ".join(_unresolved_reason(texts[k]) for k in holes)
    for k in sorted(skip - used):
        unresolved[texts[k].value] = f"arguments not known from the file: {_unresolved_reason(texts[k])}"
    return values, unknown, unresolved


def _titan_version_of(args: Sequence[str], env: Mapping[str, Text]) -> str:
    if any(a.split("=")[0] in ("--job.config_file", "--job.config-file") for a in args) or "CONFIG_FILE" in env:
        return TORCHTITAN_TOML_VERSION
    return TORCHTITAN_VERSION


def _flatten(prefix: str, obj: Mapping[str, Any], out: dict[str, Value]) -> None:
    for k, v in obj.items():
        key = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, Mapping):
            if v:
                _flatten(key, v, out)
            else:
                out[key] = None
        else:
            out[key] = v


def _resolve_companion(base: str, ref: str) -> Path | None:
    p = Path(ref)
    if not p.is_absolute():
        p = Path(base).parent / p
    try:
        return p if p.is_file() else None
    except OSError:
        return None


def _build_torchtitan(
    launch: _Launch | None,
    it: Interpreter | None,
    name: str,
    fmt: str,
    toml: dict[str, Any] | None = None,
    toml_name: str | None = None,
) -> LaunchSettings:
    texts = launch.args if launch is not None else []
    env = launch.command.env if launch is not None and launch.command is not None else {}
    args, skip = _texts_to_args(texts)
    version = TORCHTITAN_TOML_VERSION if toml is not None else _titan_version_of(args, env)
    notes: list[str] = [*(it.notes if it is not None else [])]
    values: dict[str, Value] = {}
    unknown: list[str] = []
    unresolved: dict[str, str] = {}
    sources = [name] if launch is not None else []
    if toml is None and version == TORCHTITAN_TOML_VERSION and launch is not None:
        ref = next(
            (
                (args[k + 1] if a in ("--job.config_file", "--job.config-file") else a.split("=", 1)[1])
                for k, a in enumerate(args)
                if a.split("=")[0] in ("--job.config_file", "--job.config-file") and (("=" in a) or k + 1 < len(args))
            ),
            None,
        )
        if ref is None and "CONFIG_FILE" in env and env["CONFIG_FILE"].resolved:
            ref = env["CONFIG_FILE"].value  # CONFIG_FILE=x.toml ./run_train.sh (torchtitan <= 0.2)
        path = _resolve_companion(name, ref) if ref and not ref.startswith("$") else None
        if path is not None:
            toml_name = _label(path)
            toml = _load_toml(_read_text(path), toml_name)
        elif ref:
            notes.append(f"--job.config_file {ref}: not found next to {name}; pass the TOML to read its values")
    if toml is not None:
        _flatten("", toml, values)
        problems_unknown = _check_titan_toml(toml)[1]
        unknown.extend(problems_unknown)
        sources.insert(0, toml_name or "")
    cli_values, cli_unknown, cli_unresolved = _titan_values(args, skip, texts, version)
    values.update(cli_values)  # CLI > TOML > defaults
    unknown.extend(cli_unknown)
    unresolved.update(cli_unresolved)
    if version == TORCHTITAN_VERSION and launch is not None:
        for key, var in (("module", "MODULE"), ("config", "CONFIG")):
            if key not in values and var in env and env[var].resolved:
                values[key] = env[var].value
                where = launch.script.value if launch.script else "the command"
                notes.append(f"{key} {env[var].value!r} comes from {var}= in front of {where}")
        module = values.get("module")
        config = values.get("config")
        if isinstance(module, str) and isinstance(config, str) and (module, config) != ("llama3", "llama3_8b"):
            notes.append(
                f"flags are checked against the llama3/llama3_8b config tree of torchtitan {TORCHTITAN_VERSION}; "
                f"--module {module} --config {config} may add or drop model-specific flags"
            )
    ws, ws_src, ws_notes = _world_size(launch, it)
    entry = launch.script.value if launch is not None and launch.script is not None else None
    return LaunchSettings(
        framework="torchtitan",
        values=values,
        world_size=ws,
        unknown=unknown,
        unresolved=unresolved,
        launcher=_launcher_values(launch) if launch is not None else {},
        launcher_name=launch.launcher if launch is not None else None,
        entrypoint=entry,
        args=tuple(args),
        unresolved_args=skip,
        config=toml,
        world_size_source=ws_src,
        schema=_SCHEMA_NAMES["torchtitan" if version == TORCHTITAN_VERSION else "torchtitan-0.2.2"],
        source=" + ".join(s for s in sources if s),
        input_format=fmt,
        notes=[*notes, *ws_notes, *(_assumed_notes(launch) if launch is not None else [])],
    )


def _deepspeed_config_ref(args: Sequence[str]) -> str | None:
    for k, a in enumerate(args):
        flag, eq, inline = a.partition("=")
        if flag in ("--deepspeed_config", "--deepspeed-config"):
            return inline if eq else (args[k + 1] if k + 1 < len(args) else None)
        if flag == "--deepspeed":  # HF Trainer style: --deepspeed ds_config.json
            v = inline if eq else (args[k + 1] if k + 1 < len(args) else "")
            if v.endswith(".json"):
                return v
    return None


def _dupe_notes(name: str, dupes: list[str]) -> list[str]:
    if not dupes:
        return []
    return [f"{name}: duplicate keys {', '.join(dupes)} (the last value wins, as in DeepSpeed)"]


def _build_deepspeed(
    launch: _Launch | None,
    it: Interpreter | None,
    script_name: str | None,
    config: dict[str, Any] | None,
    config_name: str | None,
    fmt: str,
    dupes: list[str] | None = None,
) -> LaunchSettings:
    notes: list[str] = [*(it.notes if it is not None else []), *_dupe_notes(config_name or "", dupes or [])]
    values: dict[str, Value] = {}
    unknown: list[str] = []
    unresolved: dict[str, str] = {}
    texts = launch.args if launch is not None else []
    args, skip = _texts_to_args(texts)
    if config is None and launch is not None and script_name is not None:
        ref = _deepspeed_config_ref(args)
        path = _resolve_companion(script_name, ref) if ref and "$" not in ref else None
        if path is not None:
            config_name = _label(path)
            config, dupes = _load_json(_read_text(path), config_name)
            notes.extend(_dupe_notes(config_name, dupes))
            notes.append(f"DeepSpeed config {ref} read from {config_name} (relative to the script)")
        elif ref:
            notes.append(f"DeepSpeed config {ref}: not found next to {script_name}; pass it to read its keys")
        else:
            notes.append("the launch line names no --deepspeed_config; only launcher and script flags were read")
    if config is not None:
        _flatten("", config, values)
        unknown.extend(_check_deepspeed(config, None, False)[1])
        autos = sorted(k for k, v in values.items() if v == "auto")
        if autos:
            notes.append(f"'auto' values ({', '.join(autos)}) are filled in by the HF Trainer/Accelerate integration")
    if launch is not None:
        # the training script's flags, grouped as Megatron-DeepSpeed's argparse groups them (another
        # script's unknown flags take the values that follow), numbers converted by their looks
        parsed, _ = _parse_megatron(args, skip, "megatron-deepspeed")
        for p in parsed:
            holes = [k for k in p.value_indices if k in skip]
            conv = [v if k in skip else _by_looks(v) for v, k in zip(p.values, p.value_indices, strict=True)]
            values[p.flag] = True if not conv else (conv[0] if len(conv) == 1 else conv)
            if holes:
                unresolved[p.flag] = "; ".join(_unresolved_reason(texts[k]) for k in holes)
    ws, ws_src, ws_notes = _world_size(launch, it)
    sources = [s for s in (config_name, script_name) if s]
    return LaunchSettings(
        framework="deepspeed",
        values=values,
        world_size=ws,
        unknown=unknown,
        unresolved=unresolved,
        launcher=_launcher_values(launch) if launch is not None else {},
        launcher_name=launch.launcher if launch is not None else None,
        entrypoint=launch.script.value if launch is not None and launch.script is not None else None,
        args=tuple(args),
        unresolved_args=skip,
        config=config,
        world_size_source=ws_src,
        schema=_SCHEMA_NAMES["deepspeed"],
        source=" + ".join(sources),
        input_format=fmt,
        notes=[*notes, *ws_notes, *(_assumed_notes(launch) if launch is not None else [])],
    )


# --------------------------------------------------------------------------------------------
# Public entry points


def parse_launch_text(
    text: str,
    framework: Framework | None = None,
    *,
    name: str = "<text>",
    companion: str | os.PathLike[str] | None = None,
) -> LaunchSettings:
    """Read launch text already in memory (`name` is used in messages and to find files it
    references, such as ``--deepspeed_config ds.json``, next to it)."""
    if framework not in (None, "megatron", "torchtitan", "deepspeed"):
        raise InputError(f"framework {framework!r} is not one of megatron, torchtitan, deepspeed")
    kind = _sniff(text, name)
    comp_name = _label(companion) if companion is not None else None
    comp_text = _read_text(companion) if companion is not None else None
    if kind == "json":
        if framework not in (None, "deepspeed"):
            raise InputError(f"{name}: a JSON launch config is read as DeepSpeed, not {framework}")
        config, dupes = _load_json(text, name)
        if not set(config) & _DS_KEYS and framework is None:
            raise InputError(f"{name}: JSON without DeepSpeed keys (train_batch_size, zero_optimization, ...)")
        launch, it = None, None
        if comp_text is not None and comp_name is not None:
            it = _interpret(comp_text, comp_name)
            launch = _pick_launch(it, comp_text)
        return _build_deepspeed(launch, it, comp_name, config, name, "json", dupes)
    if kind == "toml":
        if framework not in (None, "torchtitan"):
            raise InputError(
                f"{name}: a TOML launch config is read as torchtitan {TORCHTITAN_TOML_VERSION}, not {framework}"
            )
        toml = _load_toml(text, name)
        launch, it = None, None
        if comp_text is not None and comp_name is not None:
            it = _interpret(comp_text, comp_name)
            launch = _pick_launch(it, comp_text)
        return _build_torchtitan(launch, it, comp_name or name, "toml", toml, name)
    it = _interpret(text, name)
    launch = _pick_launch(it, text)
    if launch is None:
        raise InputError(f"{name}: no launch command found (torchrun, deepspeed, python, or a --flag list)")
    fw = framework or _classify(launch, name)
    fmt = "args" if launch.command is None else "bash"
    if fw == "megatron":
        return _build_megatron(launch, it, name, fmt)
    if fw == "torchtitan":
        comp_toml = _load_toml(comp_text, comp_name) if comp_text is not None and comp_name is not None else None
        return _build_torchtitan(launch, it, name, fmt, comp_toml, comp_name)
    comp_config: dict[str, Any] | None = None
    comp_dupes: list[str] = []
    if comp_text is not None and comp_name is not None:
        comp_config, comp_dupes = _load_json(comp_text, comp_name)
    return _build_deepspeed(launch, it, name, comp_config, comp_name, fmt, comp_dupes)


def read_launch(
    path: str | os.PathLike[str],
    framework: Framework | None = None,
    *,
    companion: str | os.PathLike[str] | None = None,
) -> LaunchSettings:
    """Read a launch file (bash script, argument list, torchtitan command line or v0.2 TOML,
    DeepSpeed JSON).  `companion` is the second file of a pair: the launcher line for a DeepSpeed
    JSON (or the JSON for a launcher line), the command line for a torchtitan TOML (or the TOML for
    a command line).  The framework is detected unless given."""
    return parse_launch_text(_read_text(path), framework, name=_label(path), companion=companion)


def read_megatron(path: str | os.PathLike[str]) -> LaunchSettings:
    """Read a Megatron-LM launch script or argument list."""
    return read_launch(path, "megatron")


def read_torchtitan(path: str | os.PathLike[str], *, companion: str | os.PathLike[str] | None = None) -> LaunchSettings:
    """Read a torchtitan 0.3 command line or a v0.2 TOML job config."""
    return read_launch(path, "torchtitan", companion=companion)


def read_deepspeed(path: str | os.PathLike[str], *, companion: str | os.PathLike[str] | None = None) -> LaunchSettings:
    """Read a DeepSpeed JSON config (companion: launcher line) or launcher line (companion: JSON)."""
    return read_launch(path, "deepspeed", companion=companion)

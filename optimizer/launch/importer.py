"""A launch configuration read back into paraplan's knobs: the inverse of `paraplan.launch.emitters`.

`layout_from_launch(settings, model)` maps a `LaunchSettings` (read by `paraplan.launch.readers`
from a Megatron-LM script or argument list, a torchtitan 0.3 command line or v0.2 TOML, or a
DeepSpeed JSON with its launcher) to

* the layout knobs (`paraplan.Layout` field names; DP from the world size / (TP x PP x CP)),
* the stack settings (`paraplan.cost_models.stack.Stack` field names),
* the world size when the file states it,
* notes: every flag or key that is unknown to the pinned schema, read but not modelled, or not
  resolvable from the file, and every reading that is a modelling choice (listed, never dropped).

The framework's defaults are the file's values where it says nothing (no recompute flag in a
Megatron script means no recompute). Values the framework ignores at the plan's degrees are read
as paraplan's canonical ones, with a note (ZeRO over one data-parallel rank is ZeRO-0, sequence
parallelism at TP 1 is off, the CP exchange without CP is ring).

`resolve_from_launch` is what `paraplan validate --from-launch FILE` runs: the file's knobs, the
user's explicit knobs on top (noted), the GPU count and the plan string.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from paraplan.cost_models.errors import InputError
from paraplan.cost_models.frameworks import FRAMEWORKS, FrameworkSpec
from paraplan.cost_models.layout import CpComm, Layout, Offload, Precision, Recompute, parse_knob
from paraplan.cost_models.layout import Framework as FrameworkId
from paraplan.cost_models.models import ModelSpec
from paraplan.cost_models.stack import module_list, parse_modules, parse_scopes
from paraplan.cost_models.stages import completed_end

from .emitters import (
    MEGATRON_CP_COMM,
    MEGATRON_CP_COMM_TYPES,
    TITAN_REGISTRY,
    TitanConfig,
    grouped_experts_unfuse_bias_dropout,
    megatron_model_flags,
    moe_kernel_flags,
)
from .megatron_deepspeed import MDS, MDS_UNMODELLED, RENAMED, from_megatron_deepspeed
from .readers import Framework, LaunchSettings, _label, _read_text, parse_launch_text, read_launch
from .schema import (
    LAYER_PATTERN_DESTS,
    MEGATRON_COMMIT,
    TORCHTITAN_TOML_VERSION,
    MegatronArg,
    layer_pattern,
    megatron_args,
)

__all__ = [
    "ImportedLaunch",
    "ResolvedLaunch",
    "layout_from_launch",
    "load_launch",
    "read_launch_text",
    "resolve_from_launch",
]

Knobs = dict[str, object]
Getter = Callable[..., Any]


# =============================================================================================
# Reading files and texts (paraplan's DeepSpeed scripts carry their JSON as a here-document)

_HEREDOC = re.compile(
    r"^[ \t]*cat[ \t]+(?:>[ \t]*(?P<f1>[^\s<>|&;]+)[ \t]*<<-?[ \t]*(?P<q1>['\"]?)(?P<t1>\w+)(?P=q1)"
    r"|<<-?[ \t]*(?P<q2>['\"]?)(?P<t2>\w+)(?P=q2)[ \t]*>[ \t]*(?P<f2>[^\s<>|&;]+))[ \t]*\n",
    re.MULTILINE,
)


def _heredoc_files(text: str) -> dict[str, str]:
    """`cat > NAME <<'EOF' ... EOF` bodies of a script: file name -> text (static: nothing runs)."""
    out: dict[str, str] = {}
    for m in _HEREDOC.finditer(text):
        name = m.group("f1") or m.group("f2")
        tag = m.group("t1") or m.group("t2")
        rest = text[m.end() :]
        end = re.search(rf"(?m)^[ \t]*{re.escape(tag)}[ \t]*$", rest)
        if end is None:
            continue
        out[name] = rest[: end.start()]
    return out


def read_launch_text(
    text: str, framework: Framework | None = None, *, name: str = "<text>", base: str | None = None
) -> LaunchSettings:
    """Read launch text (as `parse_launch_text`), and also the here-document form paraplan emits
    for DeepSpeed: a script that writes its JSON config with ``cat > ds_config.json <<'EOF'``
    and launches ``deepspeed ... --deepspeed_config ds_config.json``. `base` is the directory
    that relative companion files are resolved from (default: that of `name`)."""
    docs = {k: v for k, v in _heredoc_files(text).items() if k.endswith(".json")}
    if not docs or framework not in (None, "deepspeed"):
        label = name if base is None else os.path.join(base, os.path.basename(name))
        return parse_launch_text(text, framework, name=label)
    with tempfile.TemporaryDirectory(prefix="paraplan-launch-") as tmp:
        for ref, body in docs.items():
            target = Path(tmp, ref)
            if not target.resolve().is_relative_to(Path(tmp).resolve()):
                continue  # an absolute or escaping path: not written
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(body, encoding="utf-8")
        script = Path(tmp, "launch.sh")
        script.write_text(text, encoding="utf-8")
        settings = read_launch(script, framework)
    return _relabel(settings, str(script), tmp, name)


def _relabel(settings: LaunchSettings, script: str, tmp: str, name: str) -> LaunchSettings:
    def fix(s: str) -> str:
        return s.replace(script, name).replace(tmp + os.sep, "")

    return dataclasses.replace(
        settings,
        source=fix(settings.source),
        notes=[fix(n) for n in settings.notes],
        unresolved={k: fix(v) for k, v in settings.unresolved.items()},
    )


def load_launch(path: str | os.PathLike[str], framework: Framework | None = None) -> LaunchSettings:
    """Read a launch file (see `paraplan.launch.read_launch`), including paraplan's own emitted
    DeepSpeed scripts whose JSON config is a here-document."""
    text = _read_text(path)
    if any(k.endswith(".json") for k in _heredoc_files(text)):
        return read_launch_text(text, framework, name=_label(path))
    return read_launch(path, framework)


# =============================================================================================
# The import


@dataclass(frozen=True)
class ImportedLaunch:
    knobs: Knobs
    stack: dict[str, object]
    gpus: int | None
    notes: list[str]


@dataclass
class _State:
    settings: LaunchSettings
    model: ModelSpec
    gpus: int | None
    knobs: Knobs = field(default_factory=dict)
    stack: dict[str, object] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    used: set[str] = field(default_factory=set)  # keys of settings.values accounted for
    unmodelled: list[str] = field(default_factory=list)

    def note(self, text: str) -> None:
        if text not in self.notes:
            self.notes.append(text)


def layout_from_launch(
    settings: LaunchSettings, model: ModelSpec, gpus: int | None = None
) -> tuple[dict[str, object], dict[str, object], int | None, list[str]]:
    """(layout knobs, stack settings, GPUs the file states or None, notes) of a launch file.

    `gpus`, when given, is the world size to use where the file states none (or overrides it);
    DP is the world size / (TP x PP x CP) when one is known, else left out of the knobs."""
    st = _State(settings, model, gpus)
    head = f"read {settings.source or 'the launch text'} as {settings.schema} ({settings.input_format})"
    if settings.world_size is not None:
        head += f"; world size {settings.world_size} from {settings.world_size_source}"
    st.note(head)
    if settings.framework == "megatron":
        _import_megatron(st)
    elif settings.framework == "torchtitan":
        _import_torchtitan(st)
    else:
        _import_deepspeed(st)
    _canonical(st)
    _listing(st)
    world = settings.world_size
    return st.knobs, st.stack, world, st.notes


def _canonical(st: _State) -> None:
    """Values the framework ignores at these degrees, as paraplan's canonical ones (noted)."""
    k = st.knobs
    tp, cp, dp = int(_num(k.get("tp"), 1)), int(_num(k.get("cp"), 1)), k.get("dp")
    if k.get("sequence_parallel") and tp == 1:
        k["sequence_parallel"] = False
        st.note("sequence parallelism at TP 1: the framework turns it off (read as off)")
    if cp == 1:
        k["cp_comm"] = CpComm.RING  # no context parallelism: nothing to exchange
    zero = int(_num(k.get("zero"), 0))
    if isinstance(dp, int) and dp * cp == 1 and zero > 0:
        k["zero"] = 0
        st.note(f"ZeRO-{zero} over a single data-parallel rank shards nothing: read as ZeRO-0 (the same plan)")
    if int(_num(k.get("pp"), 1)) == 1 and int(_num(k.get("virtual_stages"), 1)) > 1:
        k["virtual_stages"] = 1
        st.note("virtual pipeline stages without pipeline parallelism: read as 1")


def _listing(st: _State) -> None:
    s = st.settings
    problems = s.problems()
    if problems:
        st.note(f"as written the file would not launch: {'; '.join(problems[:6])}"
                + (f" (and {len(problems) - 6} more)" if len(problems) > 6 else ""))  # fmt: skip
    if s.unknown:
        st.note(f"not in {s.schema} (listed, not used): {', '.join(sorted(set(s.unknown)))}")
    if s.unresolved:
        items = [f"{k} ({v})" for k, v in s.unresolved.items()]
        st.note(f"values not known from the file (not used): {'; '.join(items)}")
    if st.unmodelled:
        st.note(f"read but not modelled (the prediction ignores them): {', '.join(dict.fromkeys(st.unmodelled))}")
    st.notes.extend(f"reader: {n}" for n in s.notes)


def _num(value: object, default: float) -> float:
    if isinstance(value, bool) or value is None:
        return default
    if isinstance(value, int | float):
        return value
    return default


def _int_value(st: _State, key: str, value: object) -> int | None:
    """An integer value, or None with a note when the file's value is not one."""
    if isinstance(value, bool):
        st.note(f"{key} {value!r} is not a number (not used)")
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"[-+]?\d+", value.strip()):
        return int(value)
    if value is not None and key not in st.settings.unresolved:
        st.note(f"{key} {value!r} is not a whole number (not used)")
    return None


def _degree(key: str, value: int | None, default: int = 1) -> int:
    """A parallel degree read from a launch file, the default where the file gives none. One below 1
    is a file its framework refuses (torchtitan's ParallelDims._validate: "Parallelism degree should
    be >= 1, except for dp_shard"; Megatron-LM divides the world size by each): refused here too."""
    if value is None:
        return default
    if value < 1:
        raise InputError(f"{key} {value}: a parallel degree is a whole number of at least 1")
    return value


def _dp(st: _State, tp: int, pp: int, cp: int) -> int | None:
    world = st.gpus if st.gpus is not None else st.settings.world_size
    if world is None:
        return None
    if world % (tp * pp * cp):
        st.note(f"world size {world} is not a multiple of TP {tp} x PP {pp} x CP {cp} = {tp * pp * cp}: DP unknown")
        return None
    return world // (tp * pp * cp)


# =============================================================================================
# Megatron-LM (and the Megatron-style flags of a DeepSpeed training script)

# argparse dests that change neither time nor memory (data, tokenizer, optimizer hyperparameters,
# schedules, logging, checkpoints, numerics of the same kernels).
_MEGATRON_HARMLESS_PREFIXES = (
    "adam_", "lr", "min_lr", "decoupled_", "weight_decay", "start_weight_decay", "end_weight_decay", "clip_grad",
    "init_method", "embedding_init", "data_", "tokenizer_", "tiktoken_", "vocab_file", "merge_file", "split",
    "mock_data", "num_workers", "dataloader_", "mmap_bin_files", "create_attention_mask", "reset_",
    "eod_mask_loss", "log_", "logging_level", "tensorboard", "wandb_", "save", "load", "no_load_", "no_save_",
    "ckpt_", "dist_ckpt", "async_save", "auto_detect_ckpt_format", "use_dist_ckpt", "eval_", "exit_",
    "train_iters", "train_samples", "profile", "pytorch_profiler", "timing_log", "seed", "distributed_timeout",
    "rotary_", "rope_", "yarn_", "use_rope_scaling", "mscale", "attention_softmax_in_fp32", "layernorm_epsilon",
    "layernorm_zero_centered_gamma", "apply_query_key_layer_scaling", "deprecated_use_mcore_models", "hysteresis",
    "loss_scale", "initial_loss_scale", "min_loss_scale", "check_for_", "calculate_per_token_loss", "finetune",
    "pretrained_checkpoint", "one_logger", "app_tag", "enable_one_logger", "iterations_to_skip", "override_",
    "use_checkpoint_", "valid_data_path", "train_data_path", "test_data_path", "per_split_data_args_path",
    "special_tokens", "null_tokenizer_", "num_dataset_builder_threads", "object_storage_cache_path",
    "moe_router_pre_softmax", "moe_router_topk_scaling_factor", "moe_router_score_function", "add_position_embedding",
    "use_rotary_position_embeddings", "distributed_backend", "fp8_amax_", "fp8_margin", "fp8_interval",
    "no_persist_layer_norm", "sgd_momentum", "lion_", "muon_", "vocab_extra_ids", "make_vocab_size_divisible_by",
    "use_mp_args_from_checkpoint_args", "manual_gc", "perform_initialization",
    "use_cpu_initialization", "init_model_with_meta_device", "transformer_impl", "spec", "full_validation",
    "multiple_validation_sets", "validation_set_names", "skip_train", "train_sync_interval", "rerun_mode",
)  # fmt: skip

# Kernel fusions, on by default at d98e8a64 (each --no-... flag turns one off). Fused is what the
# cost model prices (the memory-bound passes of `compute` are counted as fused kernels): a fusion
# left on is harmless, one turned off adds kernels and memory passes the prediction leaves out.
_MEGATRON_FUSIONS = frozenset({
    "masked_softmax_fusion", "bias_dropout_fusion", "bias_gelu_fusion", "bias_swiglu_fusion", "apply_rope_fusion",
    "gradient_accumulation_fusion",
})  # fmt: skip

# dests the model check reads (the model's architecture as written in the file)
_MEGATRON_MODEL_DESTS = frozenset({
    "num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size", "kv_channels", "group_query_attention",
    "num_query_groups", "swiglu", "normalization", "position_embedding_type", "max_position_embeddings",
    "untie_embeddings_and_output_weights", "add_bias_linear", "add_qkv_bias", "attention_dropout", "hidden_dropout",
    "vocab_size", "qk_layernorm", "window_size", "multi_latent_attention", "kv_lora_rank", "q_lora_rank",
    "qk_head_dim", "qk_pos_emb_head_dim", "v_head_dim", "num_experts", "moe_router_topk", "moe_ffn_hidden_size",
    "moe_shared_expert_intermediate_size", "moe_shared_expert_gate", "moe_router_enable_expert_bias",
    "moe_layer_freq", "window_attn_skip_freq", "softmax_type", "quick_geglu", "openai_gelu", "glu_linear_offset",
    "activation_func_clamp_value", "rotary_base", "rotary_percent", "layernorm_epsilon",
    "layernorm_zero_centered_gamma", "moe_router_score_function", "moe_router_pre_softmax",
    "moe_router_topk_scaling_factor", "padded_vocab_size", "moe_router_num_groups", "moe_router_group_topk",
    "squared_relu", "mamba_num_heads", "mamba_head_dim", "mamba_state_dim", "mamba_num_groups",
})  # fmt: skip


def _megatron_dests(values: Mapping[str, Any]) -> tuple[dict[str, Any], dict[str, str]]:
    """argparse dest -> value and dest -> flag as written, for the Megatron-LM flags of `values`."""
    table = megatron_args()
    dests: dict[str, Any] = {}
    flags: dict[str, str] = {}
    for flag, value in values.items():
        spec: MegatronArg | None = table.get(flag)
        if spec is None:
            continue
        dests[spec.dest] = spec.flag_value(flag) if not spec.takes_value else value
        flags[spec.dest] = flag
    return dests, flags


@dataclass
class _Megatron:
    """Megatron-style flags by dest, with the flag each came from, and which were read."""

    st: _State
    dests: dict[str, Any]
    flags: dict[str, str]
    read: set[str] = field(default_factory=set)

    def has(self, dest: str) -> bool:
        return dest in self.dests

    def get(self, dest: str, default: Any = None) -> Any:
        self.read.add(dest)
        return self.dests.get(dest, default)

    def int(self, dest: str, default: int | None = None) -> int | None:
        self.read.add(dest)
        if dest not in self.dests:
            return default
        value = _int_value(self.st, self.flags[dest], self.dests[dest])
        return default if value is None else value

    def flag(self, dest: str) -> str:
        return self.flags.get(dest, "--" + dest.replace("_", "-"))

    def leftover(self) -> list[str]:
        out = []
        for dest in self.dests:
            if dest in self.read or dest in _MEGATRON_MODEL_DESTS or dest.startswith(_MEGATRON_HARMLESS_PREFIXES):
                continue
            if dest in _MEGATRON_FUSIONS and self.dests[dest] is True:
                continue
            out.append(self.flags[dest])
        return out


def _import_megatron(st: _State) -> None:
    meg = _Megatron(st, dict(st.settings.dests), _megatron_dests(st.settings.values)[1])
    st.knobs["framework"] = "megatron"
    tp, pp, cp, _ = _megatron_degrees(meg)
    _megatron_batch(meg, tp, pp, cp)
    _megatron_pipeline(meg, pp)
    _megatron_recompute(meg)
    _megatron_sharding(meg)
    _megatron_precision(meg)
    if cp > 1:
        kinds = meg.get("cp_comm_type", ["p2p"])
        kinds = kinds if isinstance(kinds, list) else [kinds]
        unknown = [str(k) for k in kinds if k not in MEGATRON_CP_COMM_TYPES]
        if unknown:
            raise InputError(f"{meg.flag('cp_comm_type')} {' '.join(unknown)}: Transformer Engine accepts "
                             f"{', '.join(MEGATRON_CP_COMM_TYPES)} (it raises on any other)")  # fmt: skip
        if set(kinds) == {MEGATRON_CP_COMM[CpComm.ALLGATHER]}:
            st.knobs["cp_comm"] = CpComm.ALLGATHER
        else:
            st.knobs["cp_comm"] = CpComm.RING
            if set(kinds) != {"p2p"}:
                st.note(f"{meg.flag('cp_comm_type')} {' '.join(map(str, kinds))}: modelled as ring (p2p) exchange")
    meg.get("cp_comm_type")
    _megatron_stack(meg, fsdp=bool(meg.get("use_megatron_fsdp")))
    _expert_tp(meg, tp)
    _megatron_dispatcher(meg, FRAMEWORKS[FrameworkId.MEGATRON])
    _megatron_aux_loss(meg)
    _megatron_moe_kernels(meg)
    _megatron_model_check(meg)
    _megatron_specials(meg)
    st.unmodelled.extend(meg.leftover())


_MEGATRON_DEGREES = ("tensor_model_parallel_size", "pipeline_model_parallel_size", "context_parallel_size",
                     "expert_model_parallel_size")  # fmt: skip


def _megatron_degrees(meg: _Megatron) -> tuple[int, int, int, int]:
    st = meg.st
    tp, pp, cp, ep = (_degree(meg.flag(d), meg.int(d)) for d in _MEGATRON_DEGREES)
    st.knobs.update(tp=tp, pp=pp, cp=cp, ep=ep)
    if meg.int("gtp_weight_remat_size", 1) not in (None, 1):
        st.note("--gtp-weight-remat-size: a parallel dimension paraplan does not model")
    if meg.get("sequence_parallel"):
        st.knobs["sequence_parallel"] = True
    else:
        st.knobs["sequence_parallel"] = False
    return tp, pp, cp, ep


def _expert_tp(meg: _Megatron, tp: int) -> None:
    etp = meg.int("expert_tensor_parallel_size")
    meg.st.knobs["expert_tp"] = etp if etp is not None and etp != tp and meg.st.model.is_moe else 0
    if etp is not None and not meg.st.model.is_moe:
        meg.st.note(f"{meg.flag('expert_tensor_parallel_size')} {etp}: {meg.st.model.name} has no experts (ignored)")


def _megatron_batch(meg: _Megatron, tp: int, pp: int, cp: int) -> None:
    st = meg.st
    dp = _dp(st, tp, pp, cp)
    if dp is not None:
        st.knobs["dp"] = dp
    mb = meg.int("micro_batch_size")
    gb = meg.int("global_batch_size")
    seq = meg.int("seq_length")
    if mb is not None:
        st.knobs["micro_batch"] = mb
    else:
        st.note("no --micro-batch-size (Megatron-LM requires one): the micro-batch is left to the search")
    if gb is not None:
        st.knobs["global_batch"] = gb
    elif mb is not None and dp is not None:
        st.knobs["global_batch"] = mb * dp
        st.note(f"no --global-batch-size: Megatron-LM's default, micro-batch x DP = {mb * dp}")
    if seq is not None:
        st.knobs["seq_len"] = seq
    else:
        st.note("no --seq-length: the sequence length is paraplan's default unless given")
    for dest in ("rampup_batch_size", "step_batch_size_schedule"):
        if meg.has(dest):
            meg.get(dest)
            st.note(f"{meg.flag(dest)}: the global batch ramps up; modelled at the final --global-batch-size")


def _megatron_pipeline(meg: _Megatron, pp: int) -> None:
    st, layers = meg.st, meg.st.model.num_layers
    emb = bool(meg.get("account_for_embedding_in_pipeline_split"))
    loss = bool(meg.get("account_for_loss_in_pipeline_split"))
    v = meg.int("num_virtual_stages_per_pipeline_rank")
    per_chunk = meg.int("num_layers_per_virtual_pipeline_stage")
    if v is None and per_chunk is not None and pp > 1:
        total = layers + emb + loss
        if total % pp == 0 and (total // pp) % per_chunk == 0:
            v = total // pp // per_chunk
        else:
            st.note(f"{meg.flag('num_layers_per_virtual_pipeline_stage')} {per_chunk} does not divide the layers per "
                    "stage (Megatron-LM asserts it): read as no virtual stages")  # fmt: skip
    if meg.has("pipeline_model_parallel_layout"):
        _megatron_layout(meg, pp, v is not None or per_chunk is not None or emb or loss)
        return
    if _megatron_hybrid_pattern(meg, pp):
        return
    st.knobs["virtual_stages"] = v if v is not None and v > 0 else 1
    v = int(_num(st.knobs["virtual_stages"], 1))
    first = meg.int("decoder_first_pipeline_num_layers")
    last = meg.int("decoder_last_pipeline_num_layers")
    st.knobs["first_stage_layers"], st.knobs["last_stage_layers"] = 0, 0
    if pp == 1:
        return
    if first is not None or last is not None:
        if first is None or last is None:
            given = first if first is not None else last
            assert given is not None
            share = int(completed_end(layers, pp, given))
            if not share:
                st.note(
                    f"one of the first/last stage layer counts ({given}) leaves {layers - given} layers that do not "
                    f"split over {pp - 1} stages: modelled as an even split"
                )
                return
            first, last = (given, share) if first is not None else (share, given)
        st.knobs["first_stage_layers"], st.knobs["last_stage_layers"] = first, last
        return
    if emb or loss:
        total = layers + emb + loss
        if total % (pp * v) == 0 or (v == 1 and total % pp == 0):
            share = total // pp
            st.knobs["first_stage_layers"], st.knobs["last_stage_layers"] = share - emb, share - loss
        else:
            st.note("the embedding/loss accounting does not split the layers evenly (Megatron-LM asserts it): "
                    "modelled as an even split")  # fmt: skip


def _megatron_hybrid_pattern(meg: _Megatron, pp: int) -> bool:
    """A hybrid model's --hybrid-layer-pattern (or its deprecated --hybrid-override-pattern):
    Megatron-LM d98e8a64 reads its '|'-separated segments as the pipeline split, segment i virtual
    stage i // PP of rank i % PP (arguments.py "Derive VPP from pipe segments"); the pattern less
    the separators is checked against the model's. True where the pattern set the split."""
    st = meg.st
    dest = next((d for d in ("hybrid_layer_pattern", "hybrid_override_pattern") if meg.has(d)), None)
    if dest is None:
        return False
    text = str(meg.get(dest))
    main = text.split("/")[0]  # the MTP patterns after '/' are not modelled
    if main.replace("|", "") != (st.model.layer_pattern or ""):
        st.note(f"{meg.flag(dest)} {main} differs from {st.model.name}'s layer pattern {st.model.layer_pattern} "
                "(the model wins)")  # fmt: skip
    if "|" not in main:
        return False
    segments = main.split("|")
    if len(segments) % pp or pp == 1:
        st.note(f"{meg.flag(dest)}: {len(segments)} pipeline segments do not divide over PP {pp}: read as an even "
                "split")  # fmt: skip
        return False
    per_rank = [sum(len(seg) for i, seg in enumerate(segments) if i % pp == r) for r in range(pp)]
    st.knobs["virtual_stages"] = len(segments) // pp
    even = len(set(per_rank)) == 1
    st.knobs["first_stage_layers"] = 0 if even else per_rank[0]
    st.knobs["last_stage_layers"] = 0 if even else per_rank[-1]
    return True


# Megatron-LM d98e8a64 pipeline_parallel_layer_layout.py `parse_str_to_list`: cosmetic commas,
# '(...)*n' then 'x*n' repeats, chunks split by '|', one letter a layer
_LAYOUT_GROUP = re.compile(r"\(([^)]+)\)\*(\d+)")
_LAYOUT_ONE = re.compile(r"(.)\*(\d+)")
_LAYOUT_LETTERS = frozenset("ELtm")  # embedding, loss, decoder layer ("transformer"), MTP module
_LAYOUT_MAX_CHARS = 1_000_000  # a layout spelled out longer than this is no real model's


def parse_megatron_layout(text: str) -> list[str]:
    """Megatron-LM's --pipeline-model-parallel-layout as its chunks, in order (chunk i is virtual
    stage i // PP of pipeline rank i % PP), each a string of the letters E, L, t, m; ValueError
    where Megatron-LM d98e8a64's parser would fail (or the repeats spell out absurdly long)."""

    def unroll(pattern: re.Pattern[str], s: str) -> str:
        grown = [len(s)]  # the length so far, checked before each repeat is built

        def repeat(m: re.Match[str]) -> str:
            grown[0] += len(m.group(1)) * int(m.group(2)) - len(m.group(0))
            if grown[0] > _LAYOUT_MAX_CHARS:
                raise ValueError(f"it spells out to more than {_LAYOUT_MAX_CHARS:,} letters")
            return m.group(1) * int(m.group(2))

        return pattern.sub(repeat, s)

    chunks = unroll(_LAYOUT_ONE, unroll(_LAYOUT_GROUP, text.replace(",", ""))).split("|")
    bad = sorted(set("".join(chunks)) - _LAYOUT_LETTERS)
    if bad:
        raise ValueError(f"letter(s) {', '.join(map(repr, bad))} (known: E, L, t, m)")
    return chunks


def _layout_invalid(chunks: list[str], pp: int, layers: int, mtp: int) -> str | None:
    """Why Megatron-LM d98e8a64 rejects the parsed layout (`PipelineParallelLayerLayout.__init__`
    and `validate_layer_layout`), or None."""
    if len(chunks) % pp:
        return f"{len(chunks)} chunks do not divide by PP {pp}"
    flat = "".join(chunks)
    v = len(chunks) // pp
    if not flat.startswith("E") or not flat.endswith("L") or flat.count("E") != 1 or flat.count("L") != 1:
        return "the embedding E must be its first layer and the loss L its last, each once"
    if flat.count("t") != layers:
        return f"{flat.count('t')} decoder layers t, the model has {layers}"
    if flat.count("m") != mtp:
        return f"{flat.count('m')} MTP modules m, --mtp-num-layers {mtp}"
    if "m" in flat and "t" in flat[flat.index("m") :]:
        return "decoder layers after an MTP module"
    holding = [i for i, c in enumerate(chunks) if "m" in c]
    if holding and (len(holding) > 1 or holding[0] // pp != v - 1):
        return "the MTP modules must all be in one chunk, a rank's last"
    return None


def _megatron_layout(meg: _Megatron, pp: int, conflict: bool) -> None:
    """--pipeline-model-parallel-layout read into the virtual stages (chunks / PP) and the first/
    last stage layers (the decoder layers 't' of the first and last ranks), where paraplan's split
    holds it: equal middle ranks (`stages.split_valid`), a first and last rank with layers. A layout
    with every chunk alike is the even split. Each rank's chunks are priced at an even share
    (`stages.chunk_layers`); layouts whose chunks on a rank differ by more than a layer, or that put
    the MTP modules off the last rank or the embedding/loss off the first/last chunk, are read with
    a note; one that Megatron-LM rejects or paraplan cannot express is modelled as an even split
    (noted). `conflict`: other split flags given with it, which Megatron-LM rejects."""
    st, layers = meg.st, meg.st.model.num_layers
    flag = meg.flag("pipeline_model_parallel_layout")
    text = str(meg.get("pipeline_model_parallel_layout"))
    for dest in ("decoder_first_pipeline_num_layers", "decoder_last_pipeline_num_layers"):
        conflict = conflict or meg.get(dest) is not None
    if conflict:
        st.note(f"{flag} with other pipeline split flags (virtual stages, first/last stage layers, embedding/loss "
                f"accounting): Megatron-LM {MEGATRON_COMMIT[:8]} rejects that; read from the layout")  # fmt: skip
    st.knobs["virtual_stages"], st.knobs["first_stage_layers"], st.knobs["last_stage_layers"] = 1, 0, 0
    try:
        chunks = parse_megatron_layout(text)
    except ValueError as exc:
        st.note(f"{flag} {text!r}: Megatron-LM {MEGATRON_COMMIT[:8]} cannot parse it ({exc}): modelled as an even "
                "split without virtual stages")  # fmt: skip
        return
    depth = _int_value(st, meg.flag("mtp_num_layers"), meg.dests.get("mtp_num_layers")) or 0
    why = _layout_invalid(chunks, pp, layers, depth)
    if why is not None:
        v = len(chunks) // pp if len(chunks) % pp == 0 else 1
        st.knobs["virtual_stages"] = v
        st.note(f"{flag} {text!r}: Megatron-LM {MEGATRON_COMMIT[:8]} rejects it ({why}): modelled as an even split"
                + (f" of {v} virtual stages" if v > 1 else ""))  # fmt: skip
        return
    v = len(chunks) // pp
    st.knobs["virtual_stages"] = v
    per_rank = [[chunks[k * pp + r].count("t") for k in range(v)] for r in range(pp)]
    totals = [sum(c) for c in per_rank]
    described = f"{flag} {text!r} ({'/'.join(map(str, totals))} decoder layers over the {pp} ranks)"
    if pp == 1:
        return
    if any(max(c) - min(c) > 1 for c in per_rank):
        shares = "; ".join(f"rank {r}: {'+'.join(map(str, c))}" for r, c in enumerate(per_rank) if max(c) - min(c) > 1)
        st.note(f"{described}: each rank's layers are priced as an even share over its {v} chunks, not as laid "
                f"out ({shares})")  # fmt: skip
    mtp_rank = next((i % pp for i, c in enumerate(chunks) if "m" in c), pp - 1)
    if mtp_rank != pp - 1:
        st.note(f"{described}: the MTP modules on rank {mtp_rank} are priced on the last rank")
    if "E" not in chunks[0] or "L" not in chunks[-1]:
        st.note(f"{described}: the embedding and loss are priced on the first and last ranks")
    middle = totals[1:-1]
    if len(set(middle)) > 1 or min(totals[0], totals[-1]) == 0:
        st.note(f"{described}: paraplan's split holds layers on the first and last ranks and the same count on "
                "each middle rank; modelled as an even split")  # fmt: skip
        return
    if len(set(totals)) == 1 and len({c.count("t") for c in chunks}) == 1:
        return  # every chunk alike: the even split
    st.knobs["first_stage_layers"], st.knobs["last_stage_layers"] = totals[0], totals[-1]


def _megatron_recompute(meg: _Megatron) -> None:
    st = meg.st
    granularity = meg.get("recompute_granularity")
    if meg.get("recompute_activations"):
        granularity = "selective"
    method = meg.get("recompute_method")
    n = meg.int("recompute_num_layers")
    st.knobs["recompute_layers"] = 0
    if granularity == "selective":
        st.knobs["recompute"] = Recompute.SELECTIVE
        modules = meg.get("recompute_modules")
        if modules is not None:
            try:
                st.stack["recompute_modules"] = parse_modules(modules)
            except ValueError as exc:
                raise InputError(f"{meg.flag('recompute_modules')}: {exc}") from None
    elif granularity == "full":
        st.knobs["recompute"] = Recompute.FULL
        if method == "block" and n is not None and n > 0:
            st.knobs["recompute_layers"] = n
        elif method == "uniform":
            if n not in (None, 1):
                st.note(f"--recompute-method uniform with {n} layers per group: every layer is recomputed (modelled "
                        "as full recompute of all layers)")  # fmt: skip
        else:
            st.note("--recompute-granularity full without --recompute-method: Megatron-LM stops with 'Invalid "
                    "activation recompute method'; modelled as full recompute of all layers")  # fmt: skip
    else:
        st.knobs["recompute"] = Recompute.NONE
    if meg.get("distribute_saved_activations"):
        st.unmodelled.append(meg.flag("distribute_saved_activations"))
    if meg.has("checkpoint_activations"):
        meg.get("checkpoint_activations")
        st.note("--checkpoint-activations: Megatron-LM d98e8a64 exits on it (use --recompute-granularity)")


_FSDP_ZERO = {"no_shard": 0, "optim": 1, "optim_grads": 2, "optim_grads_params": 3}


def _megatron_sharding(meg: _Megatron) -> None:
    st = meg.st
    if meg.get("use_megatron_fsdp"):
        strategy = meg.get("data_parallel_sharding_strategy", "optim_grads_params")
        st.knobs["zero"] = _FSDP_ZERO.get(str(strategy), 3)
    elif meg.get("use_torch_fsdp2"):
        reshard = meg.get("torch_fsdp2_reshard_after_forward", True)
        st.knobs["zero"] = 3 if reshard else 2
        st.note("--use-torch-fsdp2: modelled as ZeRO-3 (ZeRO-2 without reshard after forward)")
    elif meg.get("use_distributed_optimizer"):
        st.knobs["zero"] = 1
        instances = meg.int("num_distributed_optimizer_instances", 1)
        if instances not in (None, 1):
            st.note(f"--num-distributed-optimizer-instances {instances}: modelled as one instance over all DP ranks")
    else:
        st.knobs["zero"] = 0
    for dest in ("megatron_fsdp_version", "ckpt_format"):
        meg.get(dest)
    if meg.get("optimizer_cpu_offload"):
        st.knobs["offload"] = Offload.OPTIMIZER
        fraction = meg.get("optimizer_offload_fraction")
        if isinstance(fraction, float | int) and not isinstance(fraction, bool) and fraction < 1:
            st.note(f"--optimizer-offload-fraction {fraction}: modelled as the whole optimizer offloaded")
        meg.get("use_precision_aware_optimizer")
    else:
        st.knobs["offload"] = Offload.NONE
    _megatron_optimizer(meg)


def _megatron_optimizer(meg: _Megatron) -> None:
    """--optimizer (Megatron-LM's, and Megatron-DeepSpeed's client optimizer where the DeepSpeed
    JSON names none): paraplan prices Adam."""
    opt = meg.get("optimizer", "adam")
    if opt not in ("adam",):
        meg.st.note(f"--optimizer {opt}: modelled as Adam (its states and step)")


def _megatron_precision(meg: _Megatron) -> None:
    st = meg.st
    fp8 = meg.get("fp8")
    if meg.get("fp4"):
        st.note("--fp4-format: FP4 is not modelled")
    if fp8:
        st.knobs["precision"] = Precision.FP8
        recipe = meg.get("fp8_recipe", "delayed")
        if recipe in ("delayed", "tensorwise", "mxfp8"):
            st.stack["fp8_recipe"] = recipe
        else:
            st.stack["fp8_recipe"] = "delayed"
            st.note(f"--fp8-recipe {recipe}: its casts modelled as the delayed recipe's")
        if meg.get("fp8_param_gather"):
            st.unmodelled.append(meg.flag("fp8_param_gather"))
    elif meg.get("fp16"):
        st.knobs["precision"] = Precision.FP16
    else:
        st.knobs["precision"] = Precision.BF16
        if not meg.get("bf16"):
            st.note(
                "neither --bf16 nor --fp16: Megatron-LM trains in fp32, which paraplan does not model (read as bf16)"
            )
    meg.get("bf16")


def _megatron_stack(meg: _Megatron, fsdp: bool) -> None:
    st = meg.st
    backend = meg.get("attention_backend", "auto")
    if backend in ("unfused", "local"):
        st.stack["flash_attention"] = False
    else:
        st.stack["flash_attention"] = True
        if backend == "fused" and meg.has("attention_backend"):
            st.note("--attention-backend fused: cuDNN fused attention, flash-style (no s x s scores): modelled as "
                    "flash attention")  # fmt: skip
        elif backend == "auto":
            st.note("--attention-backend auto (Megatron's default) picks flash or cuDNN fused attention, both "
                    "flash-style: modelled as flash attention")  # fmt: skip
    if meg.get("use_flash_attn"):
        st.note(f"--use-flash-attn is parsed but never read at Megatron-LM {MEGATRON_COMMIT[:8]}; the attention "
                "kernel is --attention-backend")  # fmt: skip
    st.stack["dp_overlap"] = bool(meg.get("overlap_grad_reduce"))
    meg.get("overlap_param_gather")
    precision = st.knobs.get("precision")
    if fsdp:
        dtype = meg.get("megatron_fsdp_main_grads_dtype", "auto")
        st.stack["main_grads"] = "fp32" if dtype == "fp32" else "bf16"
        if dtype == "auto":
            st.note("--megatron-fsdp-main-grads-dtype auto: the parameters' dtype (2-byte gradients)")
    elif meg.get("use_precision_aware_optimizer") and meg.get("main_grads_dtype", "fp32") == "bf16":
        st.stack["main_grads"] = "bf16"
    elif precision == Precision.FP16:
        st.stack["main_grads"] = "fp32" if meg.get("accumulate_allreduce_grads_in_fp32") else "bf16"
    else:
        st.stack["main_grads"] = "bf16" if meg.get("grad_reduce_in_bf16") else "fp32"
    for dest in ("grad_reduce_in_bf16", "accumulate_allreduce_grads_in_fp32", "main_grads_dtype"):
        meg.get(dest)
    moments = (meg.get("exp_avg_dtype", "fp32"), meg.get("exp_avg_sq_dtype", "fp32"))
    if meg.get("use_precision_aware_optimizer") and moments == ("bf16", "bf16"):
        st.stack["adam_moments"] = "bf16"
    elif meg.get("use_precision_aware_optimizer") and moments != ("fp32", "fp32"):
        st.note(f"--exp-avg-dtype {moments[0]} --exp-avg-sq-dtype {moments[1]}: only both bf16 (or fp32) is "
                "modelled; read as fp32 moments")  # fmt: skip
    st.stack["tp_overlap"] = True
    st.stack["tp_comm_overlap"] = bool(meg.get("tp_comm_overlap"))
    st.stack["moe_a2a_overlap"] = bool(meg.get("overlap_moe_expert_parallel_comm"))
    st.stack["delay_wgrad"] = bool(meg.get("delay_wgrad_compute"))
    st.stack["moe_router_fusion"] = bool(meg.get("moe_router_fusion"))
    st.stack["p2p_overlap"] = bool(meg.get("overlap_p2p_comm", True))
    _megatron_cuda_graphs(meg)
    _megatron_token_drop(meg)


def _megatron_cuda_graphs(meg: _Megatron) -> None:
    """--cuda-graph-impl and --cuda-graph-modules as `Stack.cuda_graph_scope` (what the emitter
    writes): full_iteration, or transformer_engine / local with their modules. Per-layer graphs
    without modules capture whole layers, which Megatron-LM allows a dropless MoE layer only with
    drop-and-pad: read as no graphs, with a note."""
    impl = meg.get("cuda_graph_impl", "none")
    modules = meg.get("cuda_graph_modules") or []
    meg.get("te_rng_tracker")  # the RNG tracker graphs need: no cost of its own
    if impl == "full_iteration":
        meg.st.stack["cuda_graph_scope"] = frozenset({"full_iteration"})
    elif impl in ("transformer_engine", "local") and modules:
        items = [modules] if isinstance(modules, str) else list(modules)
        words = [w.split(".")[-1] for m in items for w in str(m).split()]  # "CudaGraphModule.attn" too
        try:
            meg.st.stack["cuda_graph_scope"] = parse_scopes(words)
        except ValueError as exc:
            raise InputError(f"{meg.flag('cuda_graph_modules')}: {exc}") from None
    elif impl in ("transformer_engine", "local"):
        meg.st.note(f"{meg.flag('cuda_graph_impl')} {impl} without {meg.flag('cuda_graph_modules')}: whole-layer "
                    "graphs are not modelled; read as no CUDA graphs")  # fmt: skip


def _megatron_mtp(meg: _Megatron) -> None:
    """--mtp-num-layers D is `Stack.mtp` where D is the model's MTP depth (what the emitter
    writes); another depth is named as not modelled (read without MTP)."""
    if not meg.has("mtp_num_layers"):
        return
    depth = meg.get("mtp_num_layers")
    model = meg.st.model
    if depth is not None and _same_number(depth, model.mtp_layers) and model.mtp_layers > 0:
        meg.st.stack["mtp"] = True
    elif depth not in (None, 0, "0"):
        meg.st.note(f"{meg.flag('mtp_num_layers')} {depth}: not modelled ({model.name} has "
                    f"{model.mtp_layers} multi-token-prediction module(s)); read without MTP")  # fmt: skip


def _megatron_token_drop(meg: _Megatron) -> None:
    """--moe-expert-capacity-factor: 1.0 with --moe-pad-expert-input-to-capacity is `Stack.token_drop`
    (what the emitter writes); any other capacity is named as not modelled (read as dropless)."""
    factor, pad = meg.get("moe_expert_capacity_factor"), bool(meg.get("moe_pad_expert_input_to_capacity"))
    if factor is None:
        return
    try:
        capacity: float | None = float(factor)
    except (TypeError, ValueError):
        capacity = None
    if capacity == 1.0 and pad:
        meg.st.stack["token_drop"] = True
    else:
        meg.st.note(f"{meg.flag('moe_expert_capacity_factor')} {factor}{' with padding' if pad else ''}: only "
                    "capacity 1.0 padded to capacity is modelled (--token-drop); read as dropless")  # fmt: skip


AUX_LOSS_TYPES = ("aux_loss", "seq_aux_loss", "global_aux_loss")


def _megatron_aux_loss(meg: _Megatron) -> None:
    """--moe-router-load-balancing-type and --moe-aux-loss-coeff as `Stack.moe_aux_loss`, decided as
    Megatron-LM d98e8a64 decides it (router.py `get_aux_loss_coeff`, `is_aux_loss_enabled`): a loss
    type paired with its coefficient, position by position when both are lists, is on when the
    coefficient is positive (default type aux_loss, coefficient 0.0: off). Sinkhorn and quantile
    balancing route differently; they are named as priced like top-k routing."""
    if not meg.st.model.is_moe:
        return
    kinds = meg.get("moe_router_load_balancing_type", "aux_loss")
    coeffs = meg.get("moe_aux_loss_coeff", 0.0)
    kinds = [str(k) for k in (kinds if isinstance(kinds, list) else [kinds])]
    coeffs = coeffs if isinstance(coeffs, list) else [coeffs]
    try:
        values = [float(c) for c in coeffs]
    except (TypeError, ValueError):
        meg.st.note(f"{meg.flag('moe_aux_loss_coeff')} {' '.join(map(str, coeffs))}: not a number; read as no aux loss")
        values = []
    pairs = zip(kinds, values, strict=False)  # a single type takes the first coefficient
    meg.st.stack["moe_aux_loss"] = any(kind in AUX_LOSS_TYPES and value > 0.0 for kind, value in pairs)
    for kind in sorted(set(kinds) - {*AUX_LOSS_TYPES, "none"}):
        meg.st.note(f"{meg.flag('moe_router_load_balancing_type')} {kind}: not modelled; its router is priced as "
                    "top-k routing")  # fmt: skip


def _megatron_moe_kernels(meg: _Megatron) -> None:
    """An MoE model's experts and token permutation as the cost model prices them: TE's grouped GEMM
    (--moe-grouped-gemm; without it Megatron-LM d98e8a64 builds SequentialMLP, a Python loop of
    per-expert linears: more host dispatches and smaller GEMMs) and TE's fused permutation
    (--moe-permute-fusion; without it the unfused index_select / scatter path, more kernels). Both
    default off; a launch without them is named, priced as with them (`emitters.moe_kernel_flags`,
    with the fused weighted squared ReLU of squared-ReLU experts)."""
    if not meg.st.model.is_moe:
        return
    if grouped_experts_unfuse_bias_dropout(meg.st.model) and meg.get("bias_dropout_fusion", True):
        meg.st.note(f"no --no-bias-dropout-fusion: Megatron-LM's TEGroupedMLP asserts against the bias-dropout "
                    f"fusion (on by default) with {meg.st.model.name}'s linear biases; as written it would not "
                    "start")  # fmt: skip
    for flag, _ in moe_kernel_flags(meg.st.model):
        dest = flag[2:].replace("-", "_")
        if not meg.get(dest, False):
            meg.st.note(f"no {flag}: Megatron-LM then runs {_MOE_KERNEL_WORDS[dest]}, which is not modelled "
                        f"(priced as with {flag})")  # fmt: skip


_MOE_KERNEL_WORDS = {
    "moe_grouped_gemm": "SequentialMLP (a loop of per-expert linears)",
    "moe_permute_fusion": "the unfused token permutation",
    "use_fused_weighted_squared_relu": "squared ReLU, the probability multiply and a cast as three kernels",
}


def _megatron_dispatcher(meg: _Megatron, fs: FrameworkSpec) -> None:
    """An MoE model's --moe-token-dispatcher-type flex with a DeepEP or HybridEP backend
    (--moe-flex-dispatcher-backend, default deepep; the deprecated --moe-enable-deepep) is
    `Stack.ep_dispatcher` where the framework `fs` is priced with it (`FrameworkSpec.ep_dispatchers`);
    the others are priced as the all-to-all, with a note. Read whether or not the model's
    architecture flags could be checked: the dispatcher is a stack setting, not the model's."""
    st, dest = meg.st, "moe_token_dispatcher_type"
    if not st.model.is_moe:
        return
    kind = meg.get(dest, "alltoall")
    backend = meg.get("moe_flex_dispatcher_backend", "deepep")
    if meg.get("moe_enable_deepep"):
        backend = "deepep"
    runs = fs.ep_dispatchers
    if kind == "flex" and backend in runs:
        st.stack["ep_dispatcher"] = backend
    elif kind != "alltoall":
        shown = f"flex --moe-flex-dispatcher-backend {backend}" if kind == "flex" else kind
        st.note(f"--moe-token-dispatcher-type {shown}: expert traffic modelled as all-to-all "
                f"({fs.title} is priced with {' or '.join(sorted(runs))})")  # fmt: skip


def _megatron_model_check(meg: _Megatron) -> None:
    """The file's architecture flags against --model: mismatches are listed (the model wins)."""
    st = meg.st
    try:  # the file's --seq-length where it is one; a bad one is refused, by name, with the other knobs
        seq_len = parse_knob("seq_len", st.knobs.get("seq_len", Layout().seq_len))
    except ValueError:
        seq_len = Layout().seq_len
    probe = Layout(seq_len=seq_len)
    try:
        expected = megatron_model_flags(st.model, probe)
    except InputError as exc:
        st.note(f"the model's architecture is not checked against the file's flags ({str(exc).split('-- ')[-1]})")
        return
    table = megatron_args()
    want: dict[str, Any] = {}
    for flag, value in expected:
        arg = table[flag]
        want[arg.dest] = arg.flag_value(flag) if value is None else value
    # Flags whose absence from the file means Megatron-LM's default: compared even when not given. A
    # value-less one the model does not need is expected at that default (e.g. no --swiglu).
    defaults_apply = (
        "normalization",
        "position_embedding_type",
        "swiglu",
        "quick_geglu",
        "squared_relu",
        "untie_embeddings_and_output_weights",
        "group_query_attention",
        "add_bias_linear",
        "add_qkv_bias",
        "attention_dropout",
        "hidden_dropout",
        "softmax_type",
        "glu_linear_offset",
        "activation_func_clamp_value",
        "window_attn_skip_freq",
        "moe_layer_freq",
        "rotary_base",
        "rotary_percent",
        "layernorm_epsilon",
        "layernorm_zero_centered_gamma",
        "moe_router_score_function",
        "moe_router_pre_softmax",
        "moe_router_topk_scaling_factor",
    )
    by_dest: dict[str, MegatronArg] = {}
    for arg in table.values():
        by_dest.setdefault(arg.dest, arg)
    for dest in defaults_apply:
        if not by_dest[dest].takes_value:
            want.setdefault(dest, by_dest[dest].default)
    mismatches = []
    for dest, value in want.items():
        if dest == "moe_token_dispatcher_type":  # a stack setting: _megatron_dispatcher reads it
            continue
        if dest == "moe_router_pre_softmax" and want.get("moe_router_score_function") == "sigmoid":
            continue  # only the softmax router reads it (moe_utils.py); Megatron-Bridge sets it for DeepSeek-V3
        if dest == "max_position_embeddings" and not st.model.learned_positions:
            continue
        spec = by_dest.get(dest)
        if dest in defaults_apply:
            got = meg.dests.get(dest, spec.default if spec is not None else None)
        elif meg.has(dest):
            got = meg.dests[dest]
        else:
            continue
        if str(got) == str(value) or _same_number(got, value):
            continue
        if dest == "position_embedding_type" and got == "yarn" and (st.model.rope_scaling or "").startswith("yarn"):
            continue  # the config's own YaRN scaling, which the launch configs leave to the user (README)
        if dest in LAYER_PATTERN_DESTS and layer_pattern(dest, got, st.model.num_layers) == layer_pattern(
            dest, value, st.model.num_layers
        ):
            continue
        if isinstance(value, bool) and spec is not None:
            flag = next((f for f in spec.flags if spec.flag_value(f) == value), spec.flags[0])
            mismatches.append(f"{flag} not given ({st.model.name} needs it)" if not meg.has(dest)
                              else f"{meg.flag(dest)} given ({st.model.name} differs)")  # fmt: skip
        else:
            shown = meg.flag(dest) if meg.has(dest) else f"{meg.flag(dest)} (default)"
            mismatches.append(f"{shown} {got} ({st.model.name}: {value})")
    if mismatches:
        st.note(f"the file's architecture differs from --model {st.model.name}: {'; '.join(mismatches)}; the "
                "prediction uses the model")  # fmt: skip


def _same_number(a: Any, b: Any) -> bool:
    try:
        return math.isclose(float(a), float(b))
    except (TypeError, ValueError):
        return False


def _megatron_specials(meg: _Megatron) -> None:
    st = meg.st
    if meg.get("cpu_offloading") or meg.has("cpu_offloading_num_layers"):
        st.note("activation CPU offloading is not modelled")
    _megatron_mtp(meg)
    for dest in (
        "hybrid_layer_pattern",
        "hybrid_override_pattern",
        "heterogeneous_layers_config_path",
    ):
        if meg.has(dest):
            meg.get(dest)
            st.note(f"{meg.flag(dest)}: not modelled (the model is --model {st.model.name})")


# =============================================================================================
# DeepSpeed 0.19.8 (JSON) + Megatron-DeepSpeed 6acc370a's training-script flags (read as Megatron-LM's)

_DS_MAPPED = frozenset({
    "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps", "zero_optimization.stage",
    "zero_optimization.overlap_comm", "zero_optimization.offload_optimizer.device",
    "zero_optimization.offload_param.device", "zero_optimization.cpu_offload", "bf16.enabled", "bfloat16.enabled",
    "fp16.enabled", "data_types.grad_accum_dtype", "sequence_parallel_size",
    "zero_optimization.stage3_max_live_parameters",
})  # fmt: skip
_DS_HARMLESS = (
    "optimizer.", "scheduler.", "steps_per_print", "wall_clock_breakdown", "gradient_clipping", "tensorboard.",
    "wandb.", "csv_monitor.", "comms_logger.", "flops_profiler.", "zero_allow_untested_optimizer", "fp16.loss_scale",
    "fp16.initial_scale_power", "fp16.hysteresis", "fp16.min_loss_scale", "fp16.consecutive_hysteresis",
    "fp16.auto_cast", "dump_state", "zero_optimization.contiguous_gradients", "zero_optimization.reduce_scatter",
    "zero_optimization.offload_optimizer.pin_memory", "zero_optimization.offload_param.pin_memory",
    "zero_optimization.offload_optimizer.nvme_path", "zero_optimization.offload_param.nvme_path",
    "zero_optimization.load_from_fp32_weights", "zero_optimization.stage3_gather_16bit_weights_on_model_save",
    "zero_optimization.gather_16bit_weights_on_model_save", "checkpoint.", "memory_breakdown", "timers.",
    "zero_force_ds_cpu_optimizer", "gradient_predivide_factor", "prescale_gradients", "dataloader_drop_last",
    "disable_allgather", "log_level", "data_types.",
)  # fmt: skip


def _import_deepspeed(st: _State) -> None:
    s = st.settings
    v = s.values
    written = {k: val for k, val in v.items() if k.startswith("-")}
    config = {k: val for k, val in v.items() if not k.startswith("-")}
    script, origin, spelled = from_megatron_deepspeed(written)
    st.notes.extend(spelled)
    dests, flags = _megatron_dests(script)
    flags = {dest: origin.get(flag, flag) for dest, flag in flags.items()}  # notes name the flag as written
    for ours, theirs in RENAMED.items():  # and the fork's name of a flag left at its default
        flags.setdefault(megatron_args()[ours].dest, theirs)
    meg = _Megatron(st, dests, flags)
    st.knobs["framework"] = "deepspeed"
    tp, pp, ep = (_degree(meg.flag(d), meg.int(d)) for d in _MEGATRON_DEGREES if d != "context_parallel_size")
    if "--no-pipeline-parallel" in written and pp > 1:
        st.note("--no-pipeline-parallel with PP > 1: Megatron-DeepSpeed runs without its pipeline engine")
    st.knobs.update(tp=tp, pp=pp, cp=1, ep=ep, virtual_stages=1, first_stage_layers=0, last_stage_layers=0)
    _expert_tp(meg, tp)
    st.knobs["sequence_parallel"] = bool(meg.get("sequence_parallel"))
    ulysses = _int_value(st, "sequence_parallel_size", config.get("sequence_parallel_size", 1))
    if ulysses is not None and ulysses > 1:
        st.note(f"sequence_parallel_size {ulysses}: DeepSpeed-Ulysses is not modelled (CP read as 1)")
    dp = _dp(st, tp, pp, 1)
    if dp is not None:
        st.knobs["dp"] = dp
    _deepspeed_batch(st, meg, config, dp)
    seq = meg.int("seq_length")
    if seq is not None:
        st.knobs["seq_len"] = seq
    else:
        st.note("the training script states no --seq-length: the sequence length is paraplan's default unless given")
    script_stage = written.get("--zero-stage")
    if s.config is None and script_stage is not None:
        # no JSON read: the script's --zero-stage, which the fork's examples set to the JSON's stage
        stage = _int_value(st, "--zero-stage", script_stage)
        st.note(f"no DeepSpeed config read: ZeRO stage {stage} from the script's --zero-stage")
    else:
        stage = _int_value(st, "zero_optimization.stage", config.get("zero_optimization.stage", 0))
    st.knobs["zero"] = stage if stage is not None else 0
    if script_stage is not None and str(script_stage) != str(st.knobs["zero"]):
        st.note(f"--zero-stage {script_stage} differs from zero_optimization.stage {st.knobs['zero']}: the JSON is "
                "what DeepSpeed runs (pretrain_gpt.py builds the model under deepspeed.zero.Init iff "
                "--zero-stage is 3)")  # fmt: skip
    _deepspeed_offload(st, config)
    _deepspeed_precision(st, config, meg)
    _megatron_recompute(meg)
    modules = st.stack.pop("recompute_modules", None)  # Megatron-LM's; DeepSpeed's selective is core attention
    if modules is not None:
        st.note(f"--recompute-modules {' '.join(module_list(parse_modules(modules)))}: Megatron-LM's flag; DeepSpeed's selective "
                "recompute is modelled as core attention")  # fmt: skip
    if "--checkpoint-activations" in written:
        st.knobs["recompute"] = Recompute.FULL
        st.knobs["recompute_layers"] = 0
        st.notes[:] = [n for n in st.notes if not n.startswith("--checkpoint-activations")]
        st.note("--checkpoint-activations (Megatron-DeepSpeed): full recompute of every layer")
    if config.get("activation_checkpointing.partition_activations") is True:
        st.unmodelled.append("activation_checkpointing.partition_activations")
    _deepspeed_cpu_checkpointing(st, config)
    _deepspeed_stack(st, config, meg)
    _megatron_optimizer(meg)
    if meg.has("num_layers") or meg.has("hidden_size"):
        _megatron_model_check(meg)
    known = _DS_MAPPED | {
        "activation_checkpointing.partition_activations",
        "activation_checkpointing.cpu_checkpointing",
    }
    for key in config:
        if key in known or key.startswith(_DS_HARMLESS) or key in s.unknown:
            continue
        if key.startswith("activation_checkpointing.") and config[key] in (False, None, 0):
            continue
        st.unmodelled.append(key)
    table = megatron_args("megatron-deepspeed")
    others = [f for f in written if f not in table and f.startswith("--")]
    if others and not s.runs_megatron_deepspeed:  # the fork's own script: its schema check names them
        st.note(f"training-script flags that are not {MDS}'s (listed, not used): {', '.join(others)}")
    for flag, what in MDS_UNMODELLED.items():  # set to other than the fork's default
        if flag not in written:
            continue
        default, value = table[flag].default, written[flag]
        if isinstance(default, list) and not isinstance(value, list):
            value = [value]  # nargs "+" given one value
        if value != default:
            st.unmodelled.append(f"{flag} ({what})")
    st.unmodelled.extend(meg.leftover())


def _deepspeed_cpu_checkpointing(st: _State, config: Mapping[str, Any]) -> None:
    """`Stack.cpu_checkpointing` from Megatron-DeepSpeed's --checkpoint-in-cpu or the JSON's
    activation_checkpointing.cpu_checkpointing (which that flag overrides: see the Stack field)."""
    flag = "--checkpoint-in-cpu" in st.settings.values
    key = config.get("activation_checkpointing.cpu_checkpointing") is True
    if not (flag or key):
        return
    if st.knobs.get("recompute") != Recompute.FULL:
        st.note("CPU checkpointing without full recompute (--checkpoint-activations): no checkpoints to move, ignored")
        return
    st.stack["cpu_checkpointing"] = True
    if key and not flag:
        st.note("activation_checkpointing.cpu_checkpointing without --checkpoint-in-cpu: read as on, but "
                "Megatron-DeepSpeed's initialize.py overrides the key with that flag (off when absent)")  # fmt: skip


def _deepspeed_batch(st: _State, meg: _Megatron, config: Mapping[str, Any], dp: int | None) -> None:
    mb = _int_value(st, "train_micro_batch_size_per_gpu", config.get("train_micro_batch_size_per_gpu"))
    gb = _int_value(st, "train_batch_size", config.get("train_batch_size"))
    ga = _int_value(st, "gradient_accumulation_steps", config.get("gradient_accumulation_steps"))
    if ga is not None and ga < 1:  # deepspeed/runtime/config.py DeepSpeedConfig._batch_assertion asserts grad_acc > 0
        raise InputError(f"gradient_accumulation_steps {ga}: DeepSpeed requires at least 1")
    script_mb, script_gb = meg.int("micro_batch_size"), meg.int("global_batch_size")
    if mb is None:
        mb = script_mb
    if gb is None and mb is not None and ga is not None and dp is not None:
        gb = mb * ga * dp
    if gb is None:
        gb = script_gb
    if mb is None and gb is not None and ga is not None and dp is not None and gb % (ga * dp) == 0:
        mb = gb // (ga * dp)
    for ours, theirs, name in ((mb, script_mb, "--micro-batch-size"), (gb, script_gb, "--global-batch-size")):
        if ours is not None and theirs is not None and ours != theirs:
            st.note(f"{name} {theirs} in the script differs from the DeepSpeed config's {ours}: the config's is used")
    if mb is not None:
        st.knobs["micro_batch"] = mb
    else:
        st.note("no micro-batch in the DeepSpeed config or the script: left to the search")
    if gb is not None:
        st.knobs["global_batch"] = gb


def _deepspeed_offload(st: _State, config: Mapping[str, Any]) -> None:
    opt = config.get("zero_optimization.offload_optimizer.device")
    par = config.get("zero_optimization.offload_param.device")
    legacy = config.get("zero_optimization.cpu_offload") is True
    if par in ("cpu", "nvme"):
        st.knobs["offload"] = Offload.ALL
    elif opt in ("cpu", "nvme") or legacy:
        st.knobs["offload"] = Offload.OPTIMIZER
    else:
        st.knobs["offload"] = Offload.NONE
    if "nvme" in (opt, par):
        st.note("NVMe offload: modelled as offload to host memory")


def _deepspeed_precision(st: _State, config: Mapping[str, Any], meg: _Megatron) -> None:
    if st.settings.config is None and (meg.get("fp16") or meg.get("bf16")):
        st.knobs["precision"] = Precision.FP16 if meg.get("fp16") else Precision.BF16
        st.note(f"no DeepSpeed config read: {st.knobs['precision']} from the script's --{st.knobs['precision']}")
        return
    if config.get("bf16.enabled") is True or config.get("bfloat16.enabled") is True:
        st.knobs["precision"] = Precision.BF16
    elif config.get("fp16.enabled") is True:
        st.knobs["precision"] = Precision.FP16
    else:
        st.knobs["precision"] = Precision.BF16
        st.note(
            "neither bf16 nor fp16 is enabled: DeepSpeed trains in fp32, which paraplan does not model (read as bf16)"
        )
    script = "fp16" if meg.get("fp16") else "bf16" if meg.get("bf16") else None
    if script is not None and script != str(st.knobs["precision"]):
        st.note(
            f"the script's --{script} differs from the DeepSpeed config's {st.knobs['precision']}: the config's is used"
        )


def _deepspeed_stack(st: _State, config: Mapping[str, Any], meg: _Megatron) -> None:
    # the fork's attention kernel, as `from_megatron_deepspeed` spells it (its flash flags or unfused)
    st.stack["flash_attention"] = meg.get("attention_backend") != "unfused"
    overlap = config.get("zero_optimization.overlap_comm")
    st.stack["dp_overlap"] = bool(overlap) if isinstance(overlap, bool) else st.knobs.get("zero") == 3
    accum = config.get("data_types.grad_accum_dtype")
    st.stack["main_grads"] = "fp32" if accum == "fp32" else "bf16"
    st.stack["tp_overlap"] = True
    st.stack["p2p_overlap"] = False
    key = "zero_optimization.stage3_max_live_parameters"
    if key in config:  # `Stack.zero3_max_live_params`; DeepSpeed takes 3e9 written as a float too
        live = config[key]
        if isinstance(live, int | float) and not isinstance(live, bool) and live > 0:
            st.stack["zero3_max_live_params"] = float(live)
        else:
            st.note(f"{key} {live!r} is not a positive count (not used; 0 would prefetch nothing)")


# =============================================================================================
# torchtitan 0.3.0 flags (and v0.2.2 TOML)

_TITAN_HARMLESS = (
    "job.", "profiler.", "profiling.", "metrics.", "checkpoint.", "dataloader.", "validator.", "validation.",
    "optimizer.", "lr_scheduler.", "debug.seed", "debug.print_config", "debug.save_config_file",
    "debug.enable_structured_logging", "hf_assets_path", "dump_folder", "training.steps", "training.max_norm",
    "training.gc_freq", "training.gc_debug", "training.dataset", "training.dataloader.", "model.hf_assets_path",
    "model.tokenizer_path", "model.print_after_conversion", "comm.init_timeout_seconds", "comm.train_timeout_seconds",
    "comm.trace_buf_size", "comm.save_traces_folder", "comm.save_traces_file_prefix", "loss.", "compile.components",
    "compile.backend", "activation_checkpoint.preserve_rng_state", "activation_checkpoint.determinism_check",
    "activation_checkpoint.debug", "parallelism.context_parallel_load_balancer", "quantize.linear.float8.filter_fqns",
    "quantize.linear.mx.filter_fqns", "parallelism.spmd_backend", "training.mixed_precision_reduce",
)  # fmt: skip
_SINGLE_STAGE = frozenset({"1F1B", "GPipe"})
_TITAN_DEGREES = tuple(f"parallelism.{d}_degree" for d in ("tensor_parallel", "pipeline_parallel", "context_parallel",
                                                           "expert_parallel", "data_parallel_replicate"))  # fmt: skip


def _import_torchtitan(st: _State) -> None:
    s = st.settings
    v = s.values
    old = s.schema.endswith(TORCHTITAN_TOML_VERSION) and s.config is not None
    used = st.used

    def get(key: str, default: Any = None) -> Any:
        used.add(key)
        return v.get(key, default)

    def num(key: str, default: int) -> int:
        used.add(key)
        if key not in v:
            return default
        value = _int_value(st, key, v[key])
        return default if value is None else value

    st.knobs["framework"] = "torchtitan"
    registry = _titan_registry(st, get, old)
    tp, pp, cp, ep, replicate = (_degree(key, num(key, 1)) for key in _TITAN_DEGREES)
    st.knobs.update(tp=tp, pp=pp, cp=cp, ep=ep, expert_tp=0)  # EP > 1: validate warns how it is priced
    shard = num("parallelism.data_parallel_shard_degree", -1)
    if shard != -1:  # -1: the rest of the world size, as torchtitan derives it
        _degree("parallelism.data_parallel_shard_degree", shard)
    world = st.gpus if st.gpus is not None else s.world_size
    if shard == -1:
        if world is not None and world % (replicate * cp * tp * pp) == 0:
            shard = world // (replicate * cp * tp * pp)
        else:
            shard = 0  # unknown
    dp = replicate * shard if shard > 0 else None
    if dp is None:
        dp = _dp(st, tp, pp, cp)
    elif world is not None and dp * tp * pp * cp != world:
        st.note(f"replicate {replicate} x shard {shard} x CP {cp} x TP {tp} x PP {pp} != world size {world}")
    if dp is not None:
        st.knobs["dp"] = dp
    reshard = get("parallelism.fsdp_reshard_after_forward", "default")
    sharded = shard * cp > 1 if shard > 0 else replicate == 1
    if not sharded:
        st.knobs["zero"] = 0
    else:
        st.knobs["zero"] = 2 if reshard == "never" or (reshard == "default" and pp > 1) else 3
        if replicate > 1:
            st.note(f"HSDP (replicate {replicate} x shard {shard}): modelled as ZeRO-{st.knobs['zero']} over all "
                    "data-parallel ranks")  # fmt: skip
        elif shard == 1 and cp > 1:
            st.note(f"FSDP over the {cp} context-parallel ranks only: modelled as ZeRO-{st.knobs['zero']} over DP x CP")
    st.knobs["sequence_parallel"] = tp > 1 and bool(get("parallelism.enable_sequence_parallel", True))
    _titan_batch(st, num, registry, pp, dp)
    _titan_pipeline(st, get, num, pp)
    _titan_recompute(st, get, registry, old)
    _titan_precision(st, get, registry, old)
    st.knobs["offload"] = Offload.ALL if get("training.enable_cpu_offload") else Offload.NONE
    if not old and not get("training.disable_cuda_graphs"):
        # `emitters.TITAN_NO_CUDA_GRAPHS`: 0.3.0's default captures the step, which is not priced
        st.note("no --training.disable_cuda_graphs: torchtitan 0.3.0 captures each forward+backward in a CUDA "
                "graph, which is not modelled (priced as eager), and refuses it with pipeline parallelism")  # fmt: skip
    if cp > 1:
        method = get("parallelism.context_parallel_rotate_method", "allgather") if old else "allgather"
        st.knobs["cp_comm"] = CpComm.ALLGATHER if method == "allgather" else CpComm.RING
        if method == "alltoall":
            st.note("context_parallel_rotate_method alltoall: K/V passed around the ring, modelled as ring")
    if get("training.dtype", "float32") == "bfloat16":
        st.note("training.dtype bfloat16 (bf16 parameter storage) is not modelled: paraplan models FSDP2's fp32 "
                "parameters")  # fmt: skip
    async_key = "parallelism.enable_async_tensor_parallel" if old else "compile.enable_async_tensor_parallel"
    async_default = registry.async_tp if registry is not None else False
    st.stack.update(flash_attention=True, dp_overlap=True, main_grads="fp32", p2p_overlap=False,
                    tp_overlap=bool(get(async_key, async_default)))  # fmt: skip
    # Stack.compiled: the model's blocks compiled (compile.enable with "model" in compile.components)
    compile_default = registry.compiled if registry is not None and not old else False
    st.stack["compiled"] = bool(get("compile.enable", compile_default)) and "model" in (
        get("compile.components", ["model", "loss"]) or []
    )
    # the loss (Stack.loss): v0.2.2 computes it whole, compiled with compile.enable and "loss" in
    # compile.components (build_cross_entropy_loss); 0.3.0 chunks it (ChunkedLossWrapper)
    if old:
        compiled = get("compile.enable") and "loss" in (get("compile.components", ["model", "loss"]) or [])
        st.stack["loss"] = "compiled" if compiled else "eager"
    else:
        st.stack["loss"] = "chunked"
        if num("loss.num_chunks", 8) != 8:
            st.note(f"loss.num_chunks {num('loss.num_chunks', 8)}: modelled as the default 8 chunks")
    for key in ("comm.mode",):
        mode = get(key)
        if mode not in (None, "default"):
            st.note(f"comm.mode {mode}: a debugging mode without real communication")
    for key in v:
        if key in used or key.startswith(_TITAN_HARMLESS) or key in s.unknown or key in s.unresolved:
            continue
        st.unmodelled.append(key)


def _titan_registry(st: _State, get: Getter, old: bool) -> TitanConfig | None:
    """The registry config the run builds its model from (0.3.0 --config; v0.2 model.name/flavor)."""
    m = st.model
    dims = (m.num_layers, m.hidden_size, m.num_heads, m.num_kv_heads, m.ffn_hidden_size, m.vocab_size)
    if old:
        name, flavor = get("model.name", "llama3"), get("model.flavor", "debugmodel")
        cfg = next((c for c in TITAN_REGISTRY.values() if c.module == name and c.size == flavor), None)
        what = f"model.name {name} / model.flavor {flavor}"
    else:
        module, config = get("module"), get("config")
        cfg = TITAN_REGISTRY.get(str(config))
        what = f"--module {module} --config {config}"
        if module not in (None, "llama3"):
            st.note(f"--module {module}: torchtitan module other than llama3; the model is taken from --model")
        if config is None:
            st.note("no --config: torchtitan 0.3.0 requires --module and --config")
    if cfg is not None and cfg.dims != dims:
        st.note(f"{what} builds Llama 3.1 {cfg.size}, not {m.name}: the prediction uses --model {m.name}")
    elif cfg is None and (old or get("config") is not None):
        st.note(f"{what} is not a torchtitan registry config paraplan knows: the model is taken from --model "
                f"{m.name}")  # fmt: skip
    return cfg


def _titan_batch(st: _State, num: Getter, registry: TitanConfig | None, pp: int, dp: int | None) -> None:
    local = num("training.local_batch_size", -1)
    if local == -1:
        local = registry.local_batch if registry is not None else _TITAN_DEFAULT_LOCAL
        st.note(f"training.local_batch_size not given: read as the config's {local}")
    global_batch = num("training.global_batch_size", -1)
    if global_batch <= 0:
        global_batch = local * dp if dp is not None else -1
    if pp > 1:
        mb = num("parallelism.pipeline_parallel_microbatch_size", 1)
        st.knobs["micro_batch"] = mb
        if dp is not None and global_batch > 0 and global_batch > local * dp:
            flushes = global_batch // (local * dp)
            st.note(f"gradient accumulation over {flushes} pipeline flushes: modelled as one flush of "
                    f"{global_batch // (dp * mb)} micro-batches")  # fmt: skip
    else:
        st.knobs["micro_batch"] = local
    if global_batch > 0:
        st.knobs["global_batch"] = global_batch
    seq = num("training.seq_len", -1)
    if seq == -1:
        seq = registry.seq_len if registry is not None else _TITAN_DEFAULT_SEQ
        st.note(f"training.seq_len not given: read as the config's {seq}")
    st.knobs["seq_len"] = seq


_TITAN_DEFAULT_LOCAL, _TITAN_DEFAULT_SEQ = 8, 2048  # TrainingConfig's defaults (configs outside the registry)


def _titan_split_counts(layers: int, stages: int, less_first: int, less_last: int) -> list[int] | None:
    """Real layers per pipeline chunk, as torchtitan 0.3.0's _generate_llm_fqn_per_model_part."""
    effective = layers + less_first + less_last
    if stages < 1 or stages > effective:
        return None
    base, extra = divmod(effective, stages)
    if base == 0 or less_first > base or less_last > base:
        return None
    counts: list[int] = []
    left = layers
    for i in range(stages):
        share = base + (1 if i < extra else 0)
        if i == 0:
            share -= less_first
        elif i == stages - 1:
            share -= less_last
        take = max(0, min(share, left))
        counts.append(take)
        left -= take
    return counts


def _titan_pipeline(st: _State, get: Getter, num: Getter, pp: int) -> None:
    layers = st.model.num_layers
    schedule = str(get("parallelism.pipeline_parallel_schedule", "1F1B"))
    per_stage = get("parallelism.pipeline_parallel_layers_per_stage")
    less_first = num("parallelism.pipeline_parallel_first_stage_less_layers", 1)
    less_last = num("parallelism.pipeline_parallel_last_stage_less_layers", 1)
    st.knobs["virtual_stages"], st.knobs["first_stage_layers"], st.knobs["last_stage_layers"] = 1, 0, 0
    if pp == 1:
        return
    if get("parallelism.module_fqns_per_model_part") is not None:
        st.note("parallelism.module_fqns_per_model_part: an explicit split, modelled as an even split")
        return
    if schedule in _SINGLE_STAGE:
        v = 1
        if schedule == "GPipe":
            st.note("schedule GPipe: modelled as 1F1B (GPipe keeps every micro-batch's activations)")
    else:
        if schedule != "Interleaved1F1B":
            st.note(f"schedule {schedule}: modelled as interleaved 1F1B")
        if isinstance(per_stage, int) and per_stage > 0:
            stages = -(-(layers + less_first + less_last) // per_stage)
            if stages % pp:
                st.note(f"{stages} stages do not divide over PP {pp} (torchtitan stops): read as 2 stages per rank")
                stages = 2 * pp
        else:
            stages = 2 * pp
            st.note("no pipeline_parallel_layers_per_stage with a looped schedule: torchtitan's default of 2 stages "
                    "per rank")  # fmt: skip
        v = stages // pp
    st.knobs["virtual_stages"] = v
    if less_first == 0 and less_last == 0:
        return
    counts = _titan_split_counts(layers, pp * v, less_first, less_last)
    if counts is None:
        st.note("the first/last stage weights leave an empty stage (torchtitan stops): modelled as an even split")
        return
    per_gpu = [sum(counts[r::pp]) for r in range(pp)]
    first, last, middles = per_gpu[0], per_gpu[-1], per_gpu[1:-1]
    if pp == 2 or len(set(middles)) == 1:
        if pp > 2 and (layers - first - last) % (pp - 2):
            st.note(f"torchtitan splits the layers {'/'.join(map(str, per_gpu))} per GPU: modelled as an even split")
            return
        st.knobs["first_stage_layers"], st.knobs["last_stage_layers"] = first, last
        if first == last == (middles[0] if middles else first) and pp > 2:
            st.knobs["first_stage_layers"], st.knobs["last_stage_layers"] = 0, 0
    else:
        st.note(f"torchtitan splits the layers {'/'.join(map(str, per_gpu))} per GPU (first to last stage): "
                "modelled as an even split")  # fmt: skip


def _titan_recompute(st: _State, get: Getter, registry: TitanConfig | None, old: bool) -> None:
    st.knobs["recompute_layers"] = 0
    if old:
        mode = str(get("activation_checkpoint.mode", "selective"))
        option = str(get("activation_checkpoint.selective_ac_option", "2"))
        if mode == "selective" and option != "op":
            try:
                every = int(option)
            except ValueError:
                every = 0
            if every > 0:
                chunk = -(-st.model.num_layers // max(1, int(_num(st.knobs.get("pp"), 1))))
                count = max(1, round(chunk / every))
                st.knobs["recompute"] = Recompute.FULL
                st.knobs["recompute_layers"] = count
                st.stack["layer_sac"] = True
                st.note(f"selective_ac_option {every} (every {every}th layer fully checkpointed): modelled as full "
                        f"recompute of {count} layers per chunk")  # fmt: skip
                return
            mode = "selective"
        token = {"memory_budget": "memory-budget"}.get(mode, mode)
    else:
        token = str(get("activation_checkpoint", "")) or ""
        if not token:
            token = str(registry.recompute) if registry is not None else "selective"
            st.note(f"no activation-checkpoint subcommand: the config's default, {token}")
    if token == "none":
        st.knobs["recompute"] = Recompute.NONE
    elif token == "full":
        st.knobs["recompute"] = Recompute.FULL
    elif token == "memory-budget":
        st.knobs["recompute"] = Recompute.SELECTIVE
        st.note("memory-budget activation checkpointing (compile-chosen) is not modelled: read as selective")
    else:
        st.knobs["recompute"] = Recompute.SELECTIVE


def _titan_precision(st: _State, get: Getter, registry: TitanConfig | None, old: bool) -> None:
    if get("training.mixed_precision_param", "bfloat16") == "float32":
        st.note("training.mixed_precision_param float32: fp32 compute is not modelled (read as bf16)")
    if old:
        converters = get("model.converters", []) or []
        names = [str(c) for c in (converters if isinstance(converters, list) else [converters])]
        fp8 = any("float8" in c or c.startswith("mx") for c in names)
        if any(c.startswith("mx") for c in names):
            st.note("MX converters: modelled as FP8 with MX block casts (fp8_recipe mxfp8)")
            st.stack["fp8_recipe"] = "mxfp8"
            get("quantize.linear.mx.recipe_name")
        elif fp8:
            # recipe_name None: torchao's default Float8LinearConfig, tensorwise scaling
            st.stack["fp8_recipe"] = get("quantize.linear.float8.recipe_name") or "tensorwise"
    else:
        config = str(get("config", ""))
        if registry is not None:
            fp8 = registry.precision == Precision.FP8
            if fp8:
                st.note(f"--config {config} converts the linears to float8 (Float8LinearConverter): FP8")
        else:
            low = config.lower()
            fp8 = any(t in low for t in ("float8", "fp8", "mxfp8", "nvfp4"))
            if fp8:
                st.note(f"--config {config}: FP8 read from the config's name (its converters are not visible here)")
            if "nvfp4" in low:
                st.note("NVFP4 is not modelled: read as FP8")
    st.knobs["precision"] = Precision.FP8 if fp8 else Precision.BF16


# =============================================================================================
# validate --from-launch


@dataclass(frozen=True)
class ResolvedLaunch:
    """What `validate` needs from a launch file: the GPU count, the plan, the knobs, the stack."""

    gpus: int
    plan: str
    knobs: dict[str, object]
    stack: dict[str, object]
    notes: list[str]
    settings: LaunchSettings


def resolve_from_launch(
    path: str | os.PathLike[str],
    model: ModelSpec,
    *,
    gpus: int | None,
    plan: str | None,
    knobs: Mapping[str, object],
    stack: Mapping[str, object] | None,
) -> ResolvedLaunch:
    """The file's plan with the user's explicit values on top (each override noted)."""
    settings = load_launch(path)
    knobs_in, stack_in, world, notes = layout_from_launch(settings, model, gpus)
    notes = list(notes)
    if gpus is not None and world is not None and gpus != world:
        notes.insert(1, f"--gpus {gpus} overrides the file's world size {world}")
    total = gpus if gpus is not None else world
    if total is None:
        raise InputError(
            f"{settings.source}: the file does not state its world size (torchrun --nnodes/--nproc_per_node, "
            "deepspeed --num_nodes/--num_gpus, NGPU=...): give --gpus"
        )
    merged: dict[str, object] = dict(knobs_in)
    for name, value in knobs.items():
        if value is None:
            continue
        if name in merged and str(merged[name]) != str(value):
            notes.append(f"--{name.replace('_', '-')} {value} (given) overrides the file's {merged[name]}")
        merged[name] = value
    merged_stack = dict(stack_in)
    for name, value in (stack or {}).items():
        if value is None:
            continue
        if name in merged_stack and merged_stack[name] != value:
            notes.append(f"--{name.replace('_', '-')} {value} (given) overrides the file's {merged_stack[name]}")
        merged_stack[name] = value
    degrees = {d: merged.pop(d) for d in ("tp", "pp", "dp", "cp", "ep") if d in merged}
    if plan is None:
        tp, pp, cp = (int(_num(degrees.get(d), 1)) for d in ("tp", "pp", "cp"))
        if total % (tp * pp * cp):
            raise InputError(f"{settings.source}: {total} GPUs are not a multiple of TP {tp} x PP {pp} x CP {cp} "
                             f"= {tp * pp * cp}: give --gpus (the file's world size is {world})")  # fmt: skip
        dp = total // (tp * pp * cp)
        if "dp" in degrees and degrees["dp"] != dp:
            notes.append(f"DP {dp} from {total} GPUs (the file's own world size gives DP {degrees['dp']})")
        parts = [f"TP{tp}", f"PP{pp}", f"DP{dp}", f"CP{cp}", f"EP{int(_num(degrees.get('ep'), 1))}"]
        plan = "/".join(parts)
        if dp * cp == 1 and int(_num(merged.get("zero"), 0)) > 0:
            merged["zero"] = 0
    else:
        notes.append(f"--plan {plan} (given) replaces the file's degrees")
    return ResolvedLaunch(total, plan, merged, merged_stack, notes, settings)

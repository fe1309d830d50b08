"""Pinned launch schemas (Megatron-LM d98e8a64, torchtitan 0.3.0 / v0.2.2, DeepSpeed 0.19.8,
Megatron-DeepSpeed 6acc370a), the checks against them, the static shell reader and the launch-file readers.

The example inputs under tests/data/launch/ are real files from the frameworks' repositories (see
tests/data/launch/PROVENANCE.md); bad variants are made from them here."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from paraplan.cost_models.errors import InputError
from paraplan.launch import (
    MAX_BYTES,
    check_deepspeed,
    check_megatron,
    check_megatron_deepspeed,
    check_torchtitan,
    check_torchtitan_toml,
    detect_framework,
    load_schema,
    parse_launch_text,
    read_deepspeed,
    read_launch,
    read_megatron,
    read_torchtitan,
)
from paraplan.launch.convert import torchtitan_toml_to_flags
from paraplan.launch.schema import (
    LAYER_PATTERN_DESTS,
    layer_pattern,
    megatron_args,
    render_layer_pattern,
    torchtitan_fields,
)
from paraplan.launch.shell import ShellLimitError, ShellSyntaxError, interpret

DATA = Path(__file__).parent / "data" / "launch"
GPT3 = DATA / "megatron_train_gpt3_175b_distributed.sh"
LLAMA3 = DATA / "megatron_train_llama3_8b_h100_fp8.sh"
MIXTRAL = DATA / "megatron_train_mixtral_8x7b_distributed.sh"
TITAN_TOML = DATA / "torchtitan_v0.2.2_llama3_8b.toml"
TITAN_RUN = DATA / "torchtitan_0.3.0_run_train.sh"
TITAN_SLURM = DATA / "torchtitan_0.3.0_multinode_trainer.slurm"
TITAN_SEED = DATA / "torchtitan_0.3.0_docs_seed_checkpoint.sh"
TITAN_LOCAL = DATA / "torchtitan_0.3.0_docs_local_tensor.sh"
ZF_JSON = DATA / "deepspeed_zenflow_zf_config.json"
ZF_SH = DATA / "deepspeed_zenflow_finetune_llama.sh"
HF_AUTO = DATA / "deepspeed_autotuning_ds_config_fp16_z3.json"
COMPRESSION = DATA / "deepspeed_compression_gpt2_W8A8_Qgroup64_fp16.json"
DOMINO = DATA / "deepspeed_domino_pretrain_gpt3_6.7b.sh"
MDS_LLAMA2 = DATA / "megatron_deepspeed_pretrain_llama2_distributed.sh"


def has(problems: list[str], *words: str) -> bool:
    """Some problem sentence mentions all of `words`."""
    return any(all(w in p for w in words) for p in problems)


# ============================================================================================
# Vendored schemas


def test_schemas_are_pinned_and_compact() -> None:
    meg = load_schema("megatron")
    assert meg["header"]["commit"] == "d98e8a64ddf34856e74b24714e3bedb2f5a39553"
    assert meg["header"]["count"] == len(meg["args"]) == 840
    assert load_schema("torchtitan")["header"]["version"] == "0.3.0"
    assert load_schema("torchtitan-0.2.2")["header"]["ref"] == "v0.2.2"
    assert load_schema("deepspeed")["header"]["version"] == "0.19.8"
    mds = load_schema("megatron-deepspeed")
    assert mds["header"]["commit"] == "6acc370a41440098031227e881bd9f1f23aa369e"
    assert mds["header"]["count"] == len(mds["args"]) == 315  # 311 of its own + DeepSpeed's 4
    folder = Path(__file__).parent.parent / "optimizer" / "launch" / "schemas"
    for f in folder.glob("*.json"):
        assert f.stat().st_size < 128 * 1024, f
        assert "\n" not in f.read_text(encoding="utf-8").rstrip("\n"), f"{f} is not compact JSON"
    assert (folder / "PROVENANCE.md").is_file()


def test_megatron_schema_has_the_layout_flags() -> None:
    table = megatron_args()
    layout_flags = (
        "--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size",
        "--expert-model-parallel-size", "--micro-batch-size", "--global-batch-size", "--num-layers",
        "--bf16", "--sequence-parallel", "--use-distributed-optimizer", "--recompute-granularity",
    )  # fmt: skip
    for flag in layout_flags:
        assert flag in table, flag
    assert table["--tensor-model-parallel-size"].type == "int"
    assert table["--bf16"].action == "store_true"
    assert table["--no-masked-softmax-fusion"].flag_value("--no-masked-softmax-fusion") is False
    # every custom type= of the schema is one the checker knows
    known = {None, "int", "float", "str", "bool", "moe_freq_type", "no_rope_freq_type", "la_freq_type",
             "tuple_type", "_parse_cuda_graph_modules_arg"}  # fmt: skip
    types = {a.type for a in table.values()}
    assert {t for t in types if not (t in known or (t or "").startswith("enum "))} == set()
    # choices the extractor left as source text were resolved when vendoring
    assert table["--inference-cuda-graph-scope"].choices == ("none", "layer", "block")
    assert all(a.choices is None or isinstance(a.choices, tuple) for a in table.values())


def test_torchtitan_schemas_differ_where_expected() -> None:
    new = torchtitan_fields("0.3.0")
    old = torchtitan_fields("0.2.2")
    assert "parallelism.tensor_parallel_degree" in new and "parallelism.tensor_parallel_degree" in old
    assert "job.config_file" in old and "job.config_file" not in new
    assert "model.flavor" in old and not any(k.startswith("model.") for k in new)
    assert new["training.dtype"].choices == ("bfloat16", "float32")


# ============================================================================================
# check_megatron

GOOD_MEGATRON = [
    "--num-layers", "32", "--hidden-size", "4096", "--num-attention-heads", "32",
    "--tensor-model-parallel-size", "2", "--pipeline-model-parallel-size=4", "--micro-batch-size", "1",
    "--global-batch-size", "256", "--bf16", "--lr", "3e-4", "--min-lr", "-1", "--lr-decay-style", "cosine",
    "--attention-backend", "flash", "--no-masked-softmax-fusion", "--moe-layer-freq", "([1]*3+[0]*1)*3",
    "--window-size", "4096,0", "--data-path", "--persistent-save-interval", "500",
    "--moe-router-load-balancing-type", "aux_loss", "seq_aux_loss", "--rampup-batch-size", "32", "32", "1000",
    "--no-rl-partial-rollouts", "--cuda-graph-modules", "attn", "mlp", "--exit-signal", "SIGUSR1",
]  # fmt: skip


def test_check_megatron_accepts_a_valid_list() -> None:
    assert check_megatron(GOOD_MEGATRON) == []
    assert check_megatron([]) == []


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (
            ["--tensor-model-parallel-sise", "2"],
            ["--tensor-model-parallel-sise", "not an argument", "did you mean --tensor-model-parallel-size"],
        ),
        (
            ["--tensor_model_parallel_size", "2"],
            ["--tensor_model_parallel_size", "did you mean --tensor-model-parallel-size"],
        ),
        (["--lr-decay-style", "cosin"], ["--lr-decay-style", "'cosin'", "not one of the choices"]),
        (["--attention-backend", "flashy"], ["--attention-backend", "not one of the choices"]),
        (["--num-layers", "two"], ["--num-layers", "'two'", "not an integer"]),
        (["--num-layers", "2.0"], ["--num-layers", "not an integer"]),
        (["--lr", "fast"], ["--lr", "not a number"]),
        (["--bf16=true"], ["--bf16", "takes no value"]),
        (["--bf16", "true"], ["'true'", "after --bf16, which takes no value"]),
        (["--no-load-optim", "yes"], ["'yes'", "--no-load-optim"]),
        (["--num-layers"], ["--num-layers", "expects one value"]),
        (["--num-layers", "--bf16"], ["--num-layers", "expects one value"]),
        (["--moe-aux-loss-coeff"], ["--moe-aux-loss-coeff", "at least one value"]),
        (["--rampup-batch-size", "32", "32"], ["--rampup-batch-size", "expects 3 values and got 2"]),
        (["--seq-length", "2048", "4096"], ["'4096'", "after --seq-length 2048, which takes one value"]),
        (["pretrain_gpt.py", "--bf16"], ["'pretrain_gpt.py'", "before any flag"]),
        (["--moe-layer-freq", "__import__('os')"], ["--moe-layer-freq", "list pattern"]),
        (["--window-size", "a,b"], ["--window-size", "comma-separated"]),
        (["--onnx-safe", "False"], ["--onnx-safe", "means True"]),
        (["--min-lr", "-1e-5"], ["--min-lr", "expects one value"]),  # argparse reads -1e-5 as an option
        (["--bf16", "--", "x"], ["after '--'"]),
        (["--cuda-graph-modules", "everything"], ["--cuda-graph-modules", "not one of the choices"]),
    ],
)
def test_check_megatron_rejects(args: list[str], words: list[str]) -> None:
    problems = check_megatron(args)
    assert has(problems, *words), problems


def test_check_megatron_deepspeed_takes_the_forks_flags_and_deepspeeds() -> None:
    # the fork's names (megatron/arguments.py at 6acc370a) and DeepSpeed's own two flags
    # (deepspeed.add_config_arguments)
    good = ["--num-key-value-heads", "8", "--use-rotary-position-embeddings", "--rotary-position-embeddings-theta",
            "500000", "--normalization", "rmsnorm", "--layernorm-epsilon", "1e-5", "--use-flash-attn-v2",
            "--zero-stage", "1", "--no-pipeline-parallel", "--deepspeed", "--deepspeed_config", "ds_config.json",
            "--recompute-granularity", "full", "--recompute-method", "uniform", "--recompute-num-layers", "1"]  # fmt: skip
    assert check_megatron_deepspeed(good) == []
    # Megatron-LM's later names are not the fork's, and the other way round
    for flag in ("--group-query-attention", "--attention-backend", "--rotary-base", "--norm-epsilon"):
        (problem,) = check_megatron_deepspeed([flag])
        assert problem.startswith(f"{flag}: not an argument of Megatron-DeepSpeed 6acc370a"), problem
    assert check_megatron(["--num-key-value-heads", "8"])[0].startswith("--num-key-value-heads: not an argument")
    # types as its argparse declares them: --rotary-position-embeddings-theta is an int there
    assert check_megatron_deepspeed(["--rotary-position-embeddings-theta", "5e5"]) == [
        "--rotary-position-embeddings-theta: '5e5' is not an integer"
    ]


def test_read_megatron_deepspeeds_own_example() -> None:
    # examples_deepspeed/pretrain_llama2_distributed.sh at 6acc370a: torchrun with --deepspeed, its
    # JSON written by a here-document to a path under ./tmp (not read); every flag is the fork's
    s = read_launch(MDS_LLAMA2)
    assert s.framework == "deepspeed" and s.runs_megatron_deepspeed and s.world_size == 8
    assert s.values["--num-key-value-heads"] == 4 and s.values["--zero-stage"] == 0
    assert s.problems() == []
    assert any("./tmp/deepspeed.json: not found" in n for n in s.notes)


def test_check_megatron_pattern_is_not_evaluated() -> None:
    # Megatron would eval() this after its character filter; the checker parses it with ast only
    huge = "[1]*10000000"
    assert has(check_megatron(["--moe-layer-freq", huge]), "--moe-layer-freq")


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 1), min_size=1, max_size=128))
def test_layer_patterns_render_to_what_megatron_expands(flags: list[int]) -> None:
    # Megatron's _eval_pattern (character filter, then eval) of the rendered list expression gives
    # the pattern back, one entry per layer; the checker accepts it as a moe_freq_type value
    text = render_layer_pattern(flags)
    assert not set(text) - set("0123456789,[]()+*")
    assert eval(text) == flags  # what Megatron runs on the filtered alphabet above
    for dest in LAYER_PATTERN_DESTS:
        assert layer_pattern(dest, text, len(flags)) == flags
    assert check_megatron(["--window-attn-skip-freq", text]) == []


def test_layer_pattern_ints_follow_megatron() -> None:
    # --moe-layer-freq 3: MoE where i % 3 == 0 (0-based; gpt_layer_specs.py); --window-attn-skip-freq
    # 4: sliding unless the 1-based layer number is a multiple of 4 (transformer/utils.py)
    assert layer_pattern("moe_layer_freq", "3", 7) == [1, 0, 0, 1, 0, 0, 1]
    assert layer_pattern("window_attn_skip_freq", 4, 8) == [1, 1, 1, 0, 1, 1, 1, 0]
    assert layer_pattern("moe_layer_freq", "([1]*2)", 3) is None  # not one entry per layer
    assert layer_pattern("moe_layer_freq", "zero", 3) is None
    assert render_layer_pattern([0, 0, 0, 1] * 5) == "([0]*3+[1]*1)*5"
    assert render_layer_pattern([0, 0, 0] + [1] * 58) == "([0]*3+[1]*58)"


# ============================================================================================
# check_torchtitan

GOOD_TITAN = [
    "--module", "llama3", "--config", "llama3_8b",
    "--parallelism.tensor_parallel_degree", "2", "--parallelism.data-parallel-shard-degree", "-1",
    "--parallelism.pipeline_parallel_degree=2", "--parallelism.fsdp_reshard_after_forward", "always",
    "--training.local_batch_size", "2", "--training.dtype", "bfloat16", "--training.max_norm", "1",
    "--checkpoint.enable", "--parallelism.no-enable-sequence-parallel", "--compile.components", "model,loss",
    "--lr-scheduler.decay-ratio", "None", "--dump-folder", "./out",
    "activation-checkpoint:memory-budget", "--activation-checkpoint.memory-budget", "0.4",
]  # fmt: skip


def test_check_torchtitan_accepts_valid_flags() -> None:
    assert check_torchtitan(GOOD_TITAN) == []
    assert check_torchtitan(GOOD_TITAN, require_module=True) == []
    assert check_torchtitan([]) == []


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (
            ["--parallelism.tensor_parallel_degre", "2"],
            [
                "--parallelism.tensor_parallel_degre",
                "not a flag of torchtitan 0.3.0",
                "did you mean --parallelism.tensor_parallel_degree",
            ],
        ),
        (["--training.dtype", "float16"], ["--training.dtype", "'float16'", "not one of bfloat16, float32"]),
        (["--training.steps", "ten"], ["--training.steps", "not an integer"]),
        (["--training.max_norm", "big"], ["--training.max_norm", "not a number"]),
        (["--checkpoint.enable=true"], ["--checkpoint.enable", "boolean flag"]),
        (["--checkpoint.enable", "true"], ["'true'", "unexpected value"]),
        (["--training.steps"], ["--training.steps", "expects a value"]),
        (["--job.config_file", "x.toml"], ["--job.config_file", "not a flag of torchtitan 0.3.0"]),
        (
            ["--activation-checkpoint.memory-budget", "0.5"],
            ["memory-budget", "activation-checkpoint:selective is selected"],
        ),
        (["activation-checkpoint:sometimes"], ["activation-checkpoint:sometimes", "not a variant"]),
        (["--optimizer.param-groups", "x"], ["--optimizer.param-groups"]),
    ],
)
def test_check_torchtitan_rejects(flags: list[str], words: list[str]) -> None:
    problems = check_torchtitan(flags)
    assert has(problems, *words), problems


def test_check_torchtitan_needs_module_and_config_when_asked() -> None:
    problems = check_torchtitan(["--training.steps", "10"], require_module=True)
    assert has(problems, "--module is missing") and has(problems, "--config is missing")


def test_check_torchtitan_v022_cli() -> None:
    flags = ["--job.config_file", "llama3_8b.toml", "--training.steps", "10", "--model.flavor", "8B"]
    assert check_torchtitan(flags, version="0.2.2") == []
    assert has(check_torchtitan(["--module", "llama3"], version="0.2.2"), "--module", "not a flag of torchtitan 0.2.2")
    with pytest.raises(ValueError, match="not pinned"):
        check_torchtitan([], version="0.2.0")


# ============================================================================================
# check_torchtitan_toml


def test_check_torchtitan_toml_accepts_the_real_config() -> None:
    config = tomllib.loads(TITAN_TOML.read_text(encoding="utf-8"))
    assert check_torchtitan_toml(config) == []


def test_check_torchtitan_toml_rejects_crafted_variants() -> None:
    text = TITAN_TOML.read_text(encoding="utf-8")
    bad = tomllib.loads(
        text.replace("[parallelism]", "[paralelism]")
        .replace("steps = 1000", 'steps = "1000"')
        .replace('export_dtype = "float32"', 'export_dtype = "fp8"')
        .replace("enable_tensorboard = true", "enable_tensorboard = true\nenable_tensorbord = true")
    )
    problems = check_torchtitan_toml(bad)
    assert has(problems, "[paralelism]", "not a table", "did you mean parallelism")
    assert has(problems, "training.steps", "'1000'", "not an integer")
    assert has(problems, "checkpoint.export_dtype", "'fp8'", "not one of")
    assert has(problems, "metrics.enable_tensorbord", "not a key of table [metrics]")
    assert has(check_torchtitan_toml({"training": {"steps": True}}), "training.steps", "not an integer")
    assert has(check_torchtitan_toml({"quantize": {"linear": {"float8": {"filter_fqns": "output"}}}}), "filter_fqns")


# ============================================================================================
# check_deepspeed


def ds(path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def test_check_deepspeed_accepts_real_configs() -> None:
    assert check_deepspeed(ds(ZF_JSON)) == []
    assert check_deepspeed(ds(HF_AUTO)) == []


def test_check_deepspeed_rejects_the_removed_compression_block() -> None:
    problems = check_deepspeed(ds(COMPRESSION))
    assert len(problems) == 1
    assert has(problems, "'compression_training'", "removed", "0.19.8")


@pytest.mark.parametrize(
    ("patch", "words"),
    [
        ({"train_batch_sizee": 8}, ["'train_batch_sizee'", "not a top-level key", "did you mean train_batch_size"]),
        ({"elasticity": {"enabled": True}}, ["'elasticity'", "removed"]),
        ({"amp": {"enabled": True}}, ["'amp'", "removed"]),
        ({"zero_optimization": {"stage": 4}}, ["'zero_optimization.stage'", "not one of 0, 1, 2, 3"]),
        (
            {"zero_optimization": {"stagee": 2}},
            ["'zero_optimization.stagee'", "not a field of DeepSpeedZeroConfig", "did you mean stage"],
        ),
        ({"zero_optimization": {"overlap_comm": "maybe"}}, ["'zero_optimization.overlap_comm'", "not a valid bool"]),
        ({"zero_optimization": {"reduce_bucket_size": 0}}, ["'zero_optimization.reduce_bucket_size'", "must be > 0"]),
        (
            {"zero_optimization": {"offload_optimizer": {"device": "gpu"}}},
            ["'zero_optimization.offload_optimizer.device'", "'gpu'", "not one of none, cpu, nvme"],
        ),
        ({"zero_optimization": {"offload_optimizer": {"ratio": 1.5}}}, ["offload_optimizer.ratio", "must be <= 1.0"]),
        (
            {"zero_optimization": {"offload_param": {"devices": "cpu"}}},
            ["'zero_optimization.offload_param.devices'", "not a field of DeepSpeedZeroOffloadParamConfig"],
        ),
        ({"zero_optimization": 3}, ["'zero_optimization'", "expects an object"]),
        ({"bf16": {"enabled": True, "loss_scale": 0}}, ["'bf16.loss_scale'", "not a field of DeepSpeedBF16Config"]),
        ({"fp16": {"enabled": True}, "bf16": {"enabled": True}}, ["fp16", "bf16", "both enabled"]),
        ({"train_micro_batch_size_per_gpu": 0}, ["'train_micro_batch_size_per_gpu'", "must be > 0"]),
        ({"train_micro_batch_size_per_gpu": "four"}, ["'train_micro_batch_size_per_gpu'", "not a valid int"]),
        ({"gradient_accumulation_steps": 3}, ["'train_batch_size' 8", "not a multiple"]),
        ({"wall_clock_breakdown": "often"}, ["'wall_clock_breakdown'", "not a valid bool"]),
        ({"tensor_parallel": {"tp": {"tp_sizee": 2}}}, ["'tensor_parallel.tp.tp_sizee'", "not a field of TPConfig"]),
        ({"tensor_parallel": {"vocab_parallel_ce_backend": "triton"}}, ["vocab_parallel_ce_backend", "not a valid"]),
    ],
)
def test_check_deepspeed_rejects(patch: dict[str, Any], words: list[str]) -> None:
    config = ds(ZF_JSON)
    for k, v in patch.items():
        if isinstance(v, dict) and isinstance(config.get(k), dict):
            config[k] = {**config[k], **v}
        else:
            config[k] = v
    problems = check_deepspeed(config)
    assert has(problems, *words), problems


def test_check_deepspeed_follows_pydantic_lax_rules_and_aliases() -> None:
    config = {
        "train_batch_size": 8,
        "zero_optimization": {
            "stage": "3",  # pydantic validates the int enum from a numeric string
            "reduce_bucket_size": 4e8,  # an integral float is an int (DeepSpeed-SuperOffload example)
            "stage3_prefetch_bucket_size": "auto",  # "auto" values are dropped before validation
            "param_persistence_threshold": 10000,  # field name of stage3_param_persistence_threshold
            "overlap_comm": "true",
        },
        "bf16": {"enabled": "yes"},
        "gradient_clipping": 1,
    }
    assert check_deepspeed(config) == []
    assert has(check_deepspeed({"zero_optimization": {"reduce_bucket_size": 4.5e8 + 0.5}}), "reduce_bucket_size")


def test_check_deepspeed_batch_identity_and_strict_mode() -> None:
    config = {"train_batch_size": 64, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 4}
    assert check_deepspeed(config, dp_world_size=8) == []
    assert has(check_deepspeed(config, dp_world_size=4), "'train_batch_size' 64", "data-parallel size 4")
    deprecated = {"zero_optimization": {"stage": 2, "cpu_offload": True}, "activation_checkpointing": {"partition": 1}}
    assert check_deepspeed(deprecated) == []
    strict = check_deepspeed(deprecated, strict=True)
    assert has(strict, "zero_optimization.cpu_offload", "deprecated", "offload_optimizer")
    assert has(strict, "activation_checkpointing.partition", "ignored")
    assert has(check_deepspeed([1, 2]), "must be a JSON object")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="dp_world_size"):
        check_deepspeed(config, dp_world_size=0)


# ============================================================================================
# Readers on the real examples


def test_read_megatron_gpt3_175b() -> None:
    s = read_launch(GPT3)
    assert s.framework == "megatron" and s.input_format == "bash" and s.schema == "Megatron-LM d98e8a64"
    assert s.world_size == 8 and s.launcher_name == "torchrun" and s.entrypoint == "pretrain_gpt.py"
    assert s.values["--tensor-model-parallel-size"] == 8
    assert s.values["--pipeline-model-parallel-size"] == 16
    assert s.values["--num-layers"] == 96 and s.values["--lr"] == 6.0e-5 and s.values["--fp16"] is True
    assert s.dests["tensor_model_parallel_size"] == 8 and s.get("micro_batch_size") == 1
    assert s.launcher["--nproc_per_node"] == "8" and s.launcher["--nnodes"] == "1"
    assert s.unknown == []
    # script arguments ($1..$5) are reported, not guessed
    assert s.values["--save"] == "$CHECKPOINT_PATH"
    assert s.unresolved["--save"] == "$1 is a script argument"
    assert set(s.unresolved) == {"--data-path", "--vocab-file", "--merge-file", "--save", "--load", "--tensorboard-dir"}
    # Megatron-LM's own example splits a quoted value through an unquoted array expansion
    problems = s.problems()
    assert len(problems) == 1
    assert has(problems, "2.4B:320", "--step-batch-size-schedule 0:16", "unrecognized argument")


def test_read_megatron_llama3_8b_fp8() -> None:
    s = read_megatron(LLAMA3)
    assert s.framework == "megatron" and s.world_size == 8
    assert s.world_size_source is not None and "torchrun" in s.world_size_source
    v = s.values
    assert v["--num-layers"] == 32 and v["--seq-length"] == 8192 and v["--num-query-groups"] == 8
    assert v["--tensor-model-parallel-size"] == 1 and v["--context-parallel-size"] == 1
    assert "--pipeline-model-parallel-size" not in v  # commented out inside the array
    assert v["--fp8-format"] == "hybrid" and v["--fp8-param-gather"] is True  # from the `if [[ $DTYPE == fp8 ]]` block
    assert v["--mock-data"] is True and "--data-path" not in v  # the MOCK branch (defaults of ${3:-"MOCK"})
    assert v["--use-distributed-optimizer"] is True  # TRAINING_ARGS+=("${DDP_ARGS[@]}")
    assert v["--save"] == "checkpoints/llama3_8b_fp8"  # ${1:-"checkpoints/llama3_8b_fp8"}
    assert v["--split"] == "'99,1,0'"  # bash keeps the quotes of "--split '99,1,0'" when splitting
    assert s.unresolved == {"--data-cache-path": "$PWD is not set in the file"}
    assert v["--data-cache-path"] == "${PWD}/benchmark_cache_llama3_8b_fp8"
    assert s.unknown == [] and s.problems() == []
    assert any("keeps quote characters" in n for n in s.notes)
    assert any("could not decide" in n and "-f" in n for n in s.notes)


def test_read_megatron_mixtral() -> None:
    s = read_launch(MIXTRAL)
    assert s.framework == "megatron" and s.world_size == 8
    assert s.values["--num-experts"] == 8 and s.values["--expert-model-parallel-size"] == 8
    assert s.values["--moe-aux-loss-coeff"] == [0.01]  # nargs="+"
    assert s.values["--moe-router-load-balancing-type"] == ["aux_loss"]
    assert s.dests["add_position_embedding"] is False  # --no-position-embedding (store_false)
    assert s.values["--tensorboard-dir"] == "${CHECKPOINT_PATH}/tensorboard"
    assert s.problems() == []
    # `if [ -n "${WANDB_API_KEY}" ]` cannot be decided from the file: taken, and said so
    assert s.values["--wandb-project"] == "Mixtral"
    assert any("WANDB_API_KEY" in n and "assumed true" in n for n in s.notes)


def test_read_deepspeed_launched_megatron_script() -> None:
    s = read_launch(DOMINO)
    assert s.framework == "megatron" and s.launcher_name == "deepspeed"
    assert s.values["--tensor-model-parallel-size"] == 4  # $WORLD_SIZE = $(($GPUS_PER_NODE*$NNODES))
    assert s.world_size == 4 and s.world_size_source == "WORLD_SIZE=4 in the script"
    assert s.problems() == [] and s.unknown == []


def test_read_torchtitan_run_train_and_slurm() -> None:
    s = read_launch(TITAN_RUN)
    assert s.framework == "torchtitan" and s.schema == "torchtitan 0.3.0"
    assert s.entrypoint == "torchtitan.train" and s.world_size == 8  # NGPU default "8"
    assert s.values == {"module": "llama3", "config": "llama3_debugmodel"}
    assert s.unresolved == {"$@": "arguments not known from the file: $@ stands for the script's own arguments"}
    assert s.problems() == []
    slurm = read_torchtitan(TITAN_SLURM)
    assert slurm.world_size == 32 and slurm.launcher["--nnodes"] == "4"
    assert slurm.launcher_name == "torchrun" and slurm.problems() == []


def test_read_torchtitan_doc_command_lines() -> None:
    s = read_launch(TITAN_SEED)
    assert s.framework == "torchtitan" and s.launcher_name == "run_train.sh" and s.world_size == 1
    assert s.values["checkpoint.enable"] is True and s.values["checkpoint.create_seed_checkpoint"] is True
    assert s.values["parallelism.expert_parallel_degree"] == 1
    assert s.values["module"] == "llama3" and s.values["config"] == "llama3_debugmodel"
    assert s.problems() == [] and s.unknown == []
    local = read_launch(TITAN_LOCAL)
    assert local.world_size == 16
    assert local.values == {"parallelism.tensor_parallel_degree": 8, "parallelism.data_parallel_shard_degree": 2}
    assert any("COMM_MODE=local_tensor" in n for n in local.notes)


def test_read_torchtitan_v022_toml(tmp_path: Path) -> None:
    s = read_launch(TITAN_TOML)
    assert s.framework == "torchtitan" and s.schema == "torchtitan 0.2.2" and s.input_format == "toml"
    assert s.values["parallelism.data_parallel_shard_degree"] == -1
    assert s.values["training.seq_len"] == 8192 and s.values["model.flavor"] == "8B"
    assert s.values["quantize.linear.float8.filter_fqns"] == ["output"]
    assert s.world_size is None and s.unknown == [] and s.problems() == []
    # with a command line whose flags override the TOML
    cmd = tmp_path / "cmd.sh"
    cmd.write_text(
        "NGPU=8 CONFIG_FILE=./llama3_8b.toml ./run_train.sh "
        "--parallelism.tensor_parallel_degree 2 --training.steps 50\n",
        encoding="utf-8",
    )
    both = read_torchtitan(TITAN_TOML, companion=cmd)
    assert both.values["parallelism.tensor_parallel_degree"] == 2 and both.values["training.steps"] == 50
    assert both.values["training.seq_len"] == 8192 and both.world_size == 8 and both.problems() == []
    # the command line alone finds the TOML it names next to itself
    shutil.copy(TITAN_TOML, tmp_path / "llama3_8b.toml")
    alone = read_launch(cmd)
    assert alone.schema == "torchtitan 0.2.2" and alone.values["training.seq_len"] == 8192
    assert alone.values["training.steps"] == 50


def test_torchtitan_v022_toml_to_030_flags() -> None:
    config = tomllib.loads(TITAN_TOML.read_text(encoding="utf-8"))
    conv = torchtitan_toml_to_flags(config)
    assert check_torchtitan(conv.flags) == []
    f = conv.flags
    assert f[0] == "activation-checkpoint:selective"
    assert f[f.index("--module") + 1] == "llama3"
    assert f[f.index("--training.seq_len") + 1] == "8192"
    assert f[f.index("--parallelism.data_parallel_shard_degree") + 1] == "-1"
    assert f[f.index("--dataloader.dataset") + 1] == "c4"  # training.dataset moved to [dataloader]
    assert "--checkpoint.no-enable" in f and "--compile.no-enable" in f
    assert f[f.index("--compile.components") + 1] == "model,loss"
    assert conv.dropped["model.flavor"] == "model size is chosen with --config in 0.3.0"
    assert set(conv.dropped) >= {"job.description", "activation_checkpoint.selective_ac_option"}
    memory = torchtitan_toml_to_flags({"activation_checkpoint": {"mode": "memory_budget", "memory_budget": 0.3}})
    assert memory.flags == ["activation-checkpoint:memory-budget", "--activation_checkpoint.memory_budget", "0.3"]
    wrong = torchtitan_toml_to_flags({"training": {"steps": "many"}, "bogus": {"x": 1}})
    assert wrong.flags == [] and "not an integer" in wrong.dropped["training.steps"]
    assert "not a field" in wrong.dropped["bogus.x"]


def test_read_deepspeed_json_with_its_launcher(tmp_path: Path) -> None:
    s = read_launch(ZF_JSON, companion=ZF_SH)
    assert s.framework == "deepspeed" and s.schema == "DeepSpeed 0.19.8"
    assert s.values["zero_optimization.stage"] == 2
    assert s.values["zero_optimization.offload_optimizer.device"] == "cpu"
    assert s.values["zero_optimization.zenflow.topk_ratio"] == 0.1
    assert s.values["optimizer.params.betas"] == [0.9, 0.999]
    assert s.values["--model_name"] == "meta-llama/Llama-2-7b-hf" and s.values["--seed"] == 42
    assert s.launcher == {"--num_gpus": "2"} and s.entrypoint == "finetune_llama.py"
    assert s.world_size == 2 and s.unknown == [] and s.problems() == []
    # the launcher alone finds ./zf_config.json next to it
    shutil.copy(ZF_SH, tmp_path / "finetune_llama.sh")
    shutil.copy(ZF_JSON, tmp_path / "zf_config.json")
    alone = read_deepspeed(tmp_path / "finetune_llama.sh")
    assert alone.values["zero_optimization.stage"] == 2 and alone.problems() == []
    reverse = read_launch(ZF_SH, companion=ZF_JSON)
    assert reverse.values["zero_optimization.stage"] == 2 and reverse.world_size == 2


def test_read_deepspeed_hf_auto_and_removed_block() -> None:
    s = read_launch(HF_AUTO)
    assert s.values["train_micro_batch_size_per_gpu"] == "auto" and s.problems() == []
    assert any("'auto' values" in n for n in s.notes)
    old = read_deepspeed(COMPRESSION)
    assert has(old.problems(), "'compression_training'", "removed")


def test_read_deepspeed_launcher_world_size(tmp_path: Path) -> None:
    cfg = tmp_path / "ds.json"
    cfg.write_text('{"train_batch_size": 16, "train_micro_batch_size_per_gpu": 2, "gradient_accumulation_steps": 2}')
    cmd = tmp_path / "run.sh"
    cmd.write_text(
        "deepspeed --num_gpus 8 --num_nodes 2 pretrain_gpt.py --deepspeed --deepspeed_config ds.json \\\n"
        "  --tensor-model-parallel-size 2 --pipeline-model-parallel-size 2 --zero-stage 1\n"
    )
    s = read_launch(cmd)
    assert s.framework == "deepspeed" and s.world_size == 16
    assert s.values["--tensor-model-parallel-size"] == 2 and s.values["--deepspeed"] is True
    assert s.values["train_batch_size"] == 16 and s.problems() == []  # 16 = 2 x 2 x (16 / (2 x 2))
    cmd.write_text("deepspeed --include localhost:0,1,2 train.py --deepspeed_config ds.json\n")
    three = read_launch(cmd)
    assert three.world_size == 3
    assert has(three.problems(), "'train_batch_size' 16", "data-parallel size 3")


def test_world_size_from_slurm_and_mpi(tmp_path: Path) -> None:
    f = tmp_path / "job.sbatch"
    f.write_text(
        "#!/bin/bash\n#SBATCH --nodes=4\n#SBATCH --ntasks-per-node=8  # one rank per GPU\n"
        "srun --mpi=pmix python pretrain_gpt.py --tensor-model-parallel-size 8 --bf16\n"
    )
    s = read_launch(f)
    assert s.framework == "megatron" and s.world_size == 32
    assert s.world_size_source == "#SBATCH --nodes=4 x --ntasks-per-node=8"
    f.write_text("srun -N2 --ntasks-per-node 8 python pretrain_gpt.py --bf16\n")
    assert read_launch(f).world_size == 16
    f.write_text("mpirun -np 16 python3 -u pretrain_gpt.py --bf16\n")
    assert read_launch(f).world_size == 16
    f.write_text("#SBATCH --nodes=2\nsrun torchrun --nnodes 4 --nproc_per_node 8 pretrain_gpt.py --bf16\n")
    s = read_launch(f)
    assert s.world_size == 32 and any("--nodes=2" in n for n in s.notes)


def test_read_plain_megatron_argument_list(tmp_path: Path) -> None:
    f = tmp_path / "args.txt"
    f.write_text("--num-layers 24 --hidden-size 2048\n--tensor-model-parallel-size 2\n--bf16  # mixed precision\n")
    s = read_launch(f)
    assert s.framework == "megatron" and s.input_format == "args" and s.world_size is None
    assert s.values == {"--num-layers": 24, "--hidden-size": 2048, "--tensor-model-parallel-size": 2, "--bf16": True}
    assert s.args == ("--num-layers", "24", "--hidden-size", "2048", "--tensor-model-parallel-size", "2", "--bf16")


def test_crafted_bad_variants_of_real_scripts(tmp_path: Path) -> None:
    text = LLAMA3.read_text(encoding="utf-8")
    variants = {
        "unknown": (("--kv-channels 128", "--kv-channel 128"), ["--kv-channel", "not an argument"]),
        "choice": (("--normalization RMSNorm", "--normalization RMSnorm"), ["--normalization", "'RMSnorm'"]),
        "type": (
            ("GLOBAL_BATCH_SIZE=128", "GLOBAL_BATCH_SIZE=12.8"),
            ["--global-batch-size", "'12.8'", "not an integer"],
        ),
        "flag-value": (("--swiglu", "--swiglu true"), ["'true'", "--swiglu"]),
    }
    for name, ((old, new), words) in variants.items():
        assert old in text
        f = tmp_path / f"{name}.sh"
        f.write_text(text.replace(old, new), encoding="utf-8")
        s = read_launch(f)
        problems = s.problems()
        assert has(problems, *words), (name, problems)
        if name == "unknown":
            assert s.unknown == ["--kv-channel"] and s.values["--kv-channel"] == "128"
    titan = tmp_path / "titan.sh"
    titan.write_text(TITAN_SEED.read_text().replace("--checkpoint.enable", "--checkpoint.enabled"))
    s = read_launch(titan)
    assert s.unknown == ["--checkpoint.enabled"] and has(s.problems(), "--checkpoint.enabled", "did you mean")
    cfg = ds(ZF_JSON)
    cfg["zero_optimization"]["stage"] = 5
    cfg["elasticity"] = {"enabled": True}
    bad = tmp_path / "ds.json"
    bad.write_text(json.dumps(cfg))
    problems = read_launch(bad).problems()
    assert has(problems, "zero_optimization.stage", "5") and has(problems, "'elasticity'", "removed")


@pytest.mark.parametrize(
    ("path", "framework"),
    [(GPT3, "megatron"), (LLAMA3, "megatron"), (MIXTRAL, "megatron"), (DOMINO, "megatron"),
     (TITAN_TOML, "torchtitan"), (TITAN_RUN, "torchtitan"), (TITAN_SLURM, "torchtitan"), (TITAN_SEED, "torchtitan"),
     (ZF_JSON, "deepspeed"), (ZF_SH, "deepspeed"), (HF_AUTO, "deepspeed"), (COMPRESSION, "deepspeed")],
)  # fmt: skip
def test_detect_framework(path: Path, framework: str) -> None:
    assert detect_framework(path.read_text(encoding="utf-8"), path.name) == framework
    assert read_launch(path).framework == framework


def test_framework_argument_and_mismatches() -> None:
    with pytest.raises(InputError, match="read as DeepSpeed, not megatron"):
        read_launch(ZF_JSON, "megatron")
    with pytest.raises(InputError, match=r"torchtitan 0\.2\.2, not deepspeed"):
        read_launch(TITAN_TOML, "deepspeed")
    with pytest.raises(InputError, match="not one of megatron"):
        read_launch(GPT3, "jax")  # type: ignore[arg-type]
    # a torchtitan line forced through the Megatron reader: every flag is unknown to Megatron
    s = read_launch(TITAN_SEED, "megatron")
    assert "--parallelism.tensor_parallel_degree" in s.unknown


# ============================================================================================
# Bad files


def one_line_naming(err: pytest.ExceptionInfo[InputError], name: str) -> None:
    msg = str(err.value)
    assert "\n" not in msg and name in msg, msg


def test_bad_files(tmp_path: Path) -> None:
    cases: dict[str, tuple[bytes, str]] = {
        "big.sh": (b"#" * (MAX_BYTES + 1), "1 MiB"),
        "latin1.sh": ("--lr 1e-4 # caf\xe9\n".encode("latin-1"), "not UTF-8"),
        "nul.sh": (b"--lr\x001\n", "NUL"),
        "broken.json": (b'{"train_batch_size": 8,,}', "not valid JSON"),
        "list.json": (b"[1, 2]", "JSON object"),
        "deep.json": (b"[" * 100_000 + b"]" * 100_000, "JSON"),
        "plain.json": (b'{"a": 1}', "without DeepSpeed keys"),
        "broken.toml": (b"[training\nsteps = 1", "not valid TOML"),
        "quote.sh": (b"torchrun pretrain_gpt.py --lr '1e-4\n", "unterminated single quote"),
        "ifs.sh": (b"if true; then\n  torchrun x.py\n", "expected 'fi'"),
        "empty.sh": (b"# nothing here\n", "no launch command"),
        "mystery.sh": (b"python train.py --foo 1 --bar 2\n", "cannot tell the framework"),
        "bomb.sh": (b"A=xxxxxxxxxxxxxxxx\n" + b"A=$A$A$A$A\n" * 12 + b"torchrun x.py --lr $A\n", "1048576"),
        "evalbomb.sh": (b'A=\'eval "$A"\'\neval "$A"\n', "eval nested"),
    }
    for name, (data, words) in cases.items():
        p = tmp_path / name
        p.write_bytes(data)
        with pytest.raises(InputError) as err:
            read_launch(p)
        one_line_naming(err, name)
        assert words in str(err.value), (name, str(err.value))
    with pytest.raises(InputError, match="no such file") as err:
        read_launch(tmp_path / "missing.sh")
    with pytest.raises(InputError, match="is a directory"):
        read_launch(tmp_path)
    with pytest.raises(InputError, match="no such file"):
        read_launch(ZF_JSON, companion=tmp_path / "nope.sh")
    weird = tmp_path / "new\nline.sh"
    weird.write_bytes(b"\xff")
    with pytest.raises(InputError) as err:
        read_launch(weird)
    assert "\n" not in str(err.value)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs here")
def test_fifo_and_device_are_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.sh"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="is a FIFO") as err:
        read_launch(fifo)
    one_line_naming(err, "pipe.sh")
    if os.path.exists("/dev/zero"):
        with pytest.raises(InputError, match="is a device"):
            read_launch("/dev/zero")


# ============================================================================================
# The static shell reader


def last(text: str) -> list[str]:
    return interpret(text).commands[-1].argv


def test_shell_arrays_quotes_and_splitting() -> None:
    script = """
A=(--x "a b" 'c d' e\\ f)   # comment
A+=(--y)
S="p q"
printf '%s\\n' ${A[@]} "${A[@]}" "${A[*]}" $S "$S" '$S' $'t\\tu' "${#A[@]}" ${A[1]}
"""
    assert last(script) == [
        "printf", "%s\\n", "--x", "a", "b", "c", "d", "e", "f", "--y", "--x", "a b", "c d", "e f", "--y",
        "--x a b c d e f --y", "p", "q", "p q", "$S", "t\tu", "5", "a", "b",
    ]  # fmt: skip


def test_shell_defaults_arithmetic_and_conditions() -> None:
    script = """
N=${NODES:-2}
G=${GPUS:=4}
W=$((N * G + (1 << 1) - 10 / 3))
if [[ "$G" == 4 && $N -gt 1 ]]; then MODE=multi; elif true; then MODE=other; else MODE=none; fi
[ -z "$UNSET_IN_FILE" ] && X=1
run $W $MODE $G ${X:-0}
"""
    it = interpret(script)
    assert it.commands[-1].argv == ["run", "7", "multi", "4", "1"]
    assert it.defaults_used == {"NODES": "2", "GPUS": "4"}


def test_shell_unresolved_values_are_kept_with_reasons() -> None:
    it = interpret('P=$1\nD="$(date)"\ncmd --a $P --b "$D" --c $HOME/x --d `id` "$@"\n')
    words = it.commands[-1].words
    got = {w.value: w.unresolved for w in words if not w.resolved}
    assert got == {
        "$P": ("$1 is a script argument",),
        "$D": ("$(date) is a command substitution (not run)",),
        "$HOME/x": ("$HOME is not set in the file",),
        "`id`": ("`id` is a command substitution (not run)",),
        "$@": ("$@ stands for the script's own arguments",),
    }


def test_shell_skips_what_it_does_not_run(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    script = f"""
for i in 1 2 3; do touch {marker}; done
while true; do touch {marker}; done
case "$x" in a) touch {marker};; esac
f() {{ touch {marker}; }}
cat > {marker} << 'EOF'
torchrun not-a-command.py
EOF
echo $(touch {marker}) `touch {marker}` 2>&1 > /dev/null
eval "touch {marker}"
source {marker}
"""
    it = interpret(script)
    assert not marker.exists()
    progs = [c.argv[0] for c in it.commands]
    assert progs == ["cat", "echo", "touch"]  # recorded, never run
    assert any("'for' loop" in n for n in it.notes) and any("not followed" in n for n in it.notes)


def test_shell_syntax_and_limits() -> None:
    for bad, words in [
        ("echo 'x", "unterminated single quote"),
        ('echo "x', "unterminated double quote"),
        ("echo $(x", "$(...) never closed"),
        ("A=(a b", "never closed"),
        ("if true; then x", "expected 'fi'"),
        ("fi", "unexpected 'fi'"),
        ("echo a )", "unexpected ')'"),
    ]:
        with pytest.raises(ShellSyntaxError, match=words.replace("(", r"\(").replace(")", r"\)").replace("$", r"\$")):
            interpret(bad)
    with pytest.raises(ShellLimitError):
        interpret("A=0123456789abcdef\n" + "A=$A$A$A$A\n" * 12)
    assert last("echo $((2**100)) $((1/0)) $((08))") == ["echo", "$((2**100))", "$((1/0))", "$((08))"]


HOSTILE_TOKENS = [
    "torchrun ", "deepspeed ", "--num-layers ", "--parallelism.", "if ", "then ", "fi", "${A[@]}", "A=(", "$((",
    "<<E\n", "E\n", "eval ", "[[ ", " ]]", "case ", "esac", "--deepspeed_config x.json ",
]  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    st.lists(
        st.sampled_from(
            [*"aX_=$(){}[]\"'`\\ \n;&|<>#-.:0123456789", *HOSTILE_TOKENS]
        ),
        max_size=40,
    ).map("".join),
    st.sampled_from(["x.sh", "x.json", "x.toml", "x"]),
)  # fmt: skip
def test_readers_fail_only_with_input_error(text: str, name: str) -> None:
    """Hostile text: a LaunchSettings or a one-line InputError, nothing else."""
    try:
        parse_launch_text(text, name=name).problems()
    except InputError as e:
        assert "\n" not in str(e)


SAFE = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00", exclude_categories=["Cs"]), max_size=12)


@given(st.lists(SAFE, min_size=1, max_size=8))
def test_shell_words_match_shlex(words: list[str]) -> None:
    """shlex is the oracle for quoting: what shlex.join writes, the reader reads back unchanged."""
    line = "cmd " + shlex.join(words)
    assert shlex.split(line)[1:] == words
    assert interpret(line).commands[-1].argv[1:] == words


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash not installed")
@pytest.mark.parametrize(
    "script",
    [
        'A=(--x "a b" c)\nA+=("--y z")\nB="1  2"\nprintf "%s\\n" ${A[@]} "${A[@]}" $B "$B" "${A[*]}"',
        'N=${N:-3}; M=$((N*4+1))\nX="a $M"; Y=($X "$X")\nprintf "%s\\n" "${Y[@]}" ${#Y[@]} ${Y[1]}',
        'CMD="printf \'%s\\n\' --a=\\"1 2\\" \\$N"\nN=5\neval $CMD',
        'V=""\nif [ -z "$V" ] && [[ 2 -lt 10 ]]; then W=yes; else W=no; fi\nprintf "%s\\n" $W "$V" $V end',
        'S=$\'a\\tb\'\nprintf "%s\\n" $S "$S" \'l$S\' "x\\$S" x\\ y',
    ],
)
def test_shell_matches_bash(script: str) -> None:
    """Differential check on fully known scripts: the reader gives bash's own argument list."""
    real = subprocess.run(
        ["bash", "-c", script], capture_output=True, text=True, timeout=10, env={"PATH": os.defpath}, check=True
    ).stdout.split("\n")[:-1]
    mine = interpret(script).commands[-1].argv[2:]  # drop: printf "%s\n"
    assert mine == real

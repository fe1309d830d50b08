"""The training frameworks: what each can run, what its knobs cost, its defaults. Pinned versions.

A rule that one framework imposes belongs to that framework, not to the hardware: the search
proposes, and `validate` accepts, what the chosen framework runs. Each figure below is read from
the framework's own source at the pinned version.

Megatron-LM, main @ d98e8a64 (2026-08; Megatron-Core 0.19 era), `megatron/training/arguments.py`:
  * ZeRO-1 is the distributed optimizer (--use-distributed-optimizer); ZeRO-2/3 are Megatron-FSDP
    (--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads | optim_grads_params),
    with no assertion against pipeline parallelism at that commit.
  * Interleaved schedule (virtual stages) with --overlap-p2p-communication on by default.
  * Context parallelism: --cp-comm-type p2p (ring) or allgather.
  * Optimizer offload: --optimizer-cpu-offload (HybridDeviceOptimizer over the distributed
    optimizer's shards, so ZeRO-1: not combined with Megatron-FSDP here). Parameters are not
    offloaded.
  * Selective recompute (--recompute-granularity selective) recomputes the --recompute-modules
    (`Stack.recompute_modules`); by default core attention (core_attn) whatever the attention
    backend: with flash attention the flash forward runs again in the backward pass and little
    memory is saved.
  * Gradients: fp32 main grads (bf16 training accumulates and all-reduces in fp32).
  * Sequence parallelism: a column-parallel linear saves only its input's local shard and
    all-gathers it again in the backward for the weight gradient
    (`LinearWithGradAccumulationAndAsyncCommunication.backward` in
    megatron/core/tensor_parallel/layers.py; Transformer Engine's linears likewise).
  * Uneven first/last stages: --decoder-first/last-pipeline-num-layers.
DeepSpeed 0.19.8 (PyPI), `deepspeed/runtime/pipe/engine.py` and `runtime/zero/config.py`:
  * The pipeline engine asserts ZeRO stage < 2 ("ZeRO-2 and ZeRO-3 are incompatible with pipeline
    parallelism"); it has no interleaved schedule; no ring/all-gather context parallelism
    (its sequence parallelism is Ulysses all-to-all, not modelled).
  * PipelineModule partitions the layers itself (partition_method "parameters" by default): no
    user-chosen first/last stage layer counts.
  * ZeRO-Offload (offload_optimizer, stages 1-3) and ZeRO-Infinity parameter offload
    (offload_param, stage 3 only).
  * Gradients in the training dtype (bf16) by default.
  The model runs in Megatron-DeepSpeed's pretrain_gpt.py (deepspeedai/Megatron-DeepSpeed at 6acc370a,
  the script paraplan's DeepSpeed launch writes; `megatron/`):
  * Under --deepspeed the asynchronous TP all-reduce is off (arguments.py: "DeepSpeed seems to be
    incompatible with async_tensor_model_parallel_allreduce"): without sequence parallelism the
    backward's TP all-reduces wait (`tp_allreduce_overlap`); the sequence-parallel backward still
    reduce-scatters under the weight-gradient GEMM (core/tensor_parallel/layers.py).
  * Selective recompute checkpoints the attention core of its unfused CoreAttention only
    (model/transformer.py ParallelAttention sets checkpoint_core_attention without flash
    attention): with flash attention it recomputes nothing (`selective` "unfused_core_attention").
  * Grouped-query attention repeats K and V to every query head before attention
    (ParallelAttention.repeat_kv), flash or not: `Stack.kv_repeated` on by default.
torchtitan 0.3.0 (PyPI), `torchtitan/config/job_config.py` and `distributed/`:
  * FSDP2 shards the fp32 parameters (they are the optimizer's master weights), reduces
    gradients in fp32 and keeps Adam's two moments (8 bytes/param): ZeRO-3, or ZeRO-2 when the
    parameters are not resharded after the forward (parallelism.fsdp_reshard_after_forward =
    "never", the default with pipeline parallelism). Replication without sharding is DDP
    (ZeRO-0). ZeRO-1 does not exist there.
  * FSDP combines with pipeline parallelism (as Llama 3 405B ran, Dubey et al. 2024 Sec 3.3.2).
  * Interleaved schedules (Interleaved1F1B), float8 training, bf16 (no fp16 loss scaling).
  * Sequence parallelism through DTensor: autograd saves the all-gathered input of a
    colwise-parallel linear, so the backward does not gather it again; async TP
    (`Stack.tp_overlap`) fuses every TP collective into a neighbouring matmul.
  * Context parallelism all-gathers K/V (0.3.0 has no context_parallel_rotate_method, which
    v0.2.2 had) and runs over the FSDP mesh (dp_shard_cp): CP > 1 always shards, so no ZeRO-0.
    It is PyTorch's context_parallel (torch/distributed/tensor/experimental/_attention.py, the
    same algorithm from late 2024 to 2026): `_templated_ring_attention` runs CP SDPA calls per
    layer and merges their outputs in fp32 (`FrameworkSpec.cp_sdpa_merge`, priced by
    `compute.cp_merge_bytes`).
  * Activation checkpointing is activation-checkpoint:none|selective|full; 0.3.0's "selective"
    is the per-op policy: it saves every other matmul's output and recomputes the rest of the
    layer. 0.3.0 has no selective_ac_option (v0.2.2's every-k-th-layer policy), so no block
    recompute (the older releases' policy is the stack setting `Stack.layer_sac`).
  * With pipeline parallelism, PyTorch's pipelining runs every micro-batch's backward of an FSDP
    stage with set_requires_gradient_sync(False) and set_reshard_after_backward(False)
    (pytorch/pytorch torch/distributed/pipelining/stage.py, `backward_maybe_with_nosync`, at
    0138610331c9): the stage's gradients accumulate unsharded, in the fp32 reduce dtype, and
    are reduce-scattered once after the last micro-batch; the parameters stay gathered.
  * PyTorch's pipelining allocates a stage's receive buffers once, one per micro-batch, and keeps
    them across steps (stage.py `_prepare_forward_infra`: `for chunk_id in range(num_microbatches)`
    ... `_RecvInfo(..., _make_tensor_from_meta(inp, self.device))` into `args_recv_info`;
    `_prepare_backward_infra`: a `_create_grad_recv_info` per micro-batch into `grad_recv_info`):
    every non-first stage holds m activation buffers and every non-last stage m gradient buffers of
    the hidden states it exchanges (the sequence shard with SP). Megatron-LM allocates its p2p
    receive tensors per exchange (`p2p_communication._communicate`), DeepSpeed's pipeline engine
    only for the micro-batches in flight.
  * CPU offload (training.enable_cpu_offload) moves parameters, gradients and optimizer states
    to the host (FSDP2 CPUOffloadPolicy): offload "all" with ZeRO-3.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from paraplan.cost_models.candidates import BoolArray, FloatArray, Layouts
from paraplan.cost_models.layout import CpComm, Framework, Layout, Offload, Precision, Recompute
from paraplan.cost_models.models import ModelSpec
from paraplan.cost_models.stack import (
    CUDA_GRAPH_SCOPES,
    DEFAULT_RECOMPUTE_MODULES,
    DEFAULT_ZERO3_MAX_LIVE_PARAMS,
    Fp8Recipe,
    Stack,
    module_list,
)
from paraplan.cost_models.stack import EP_DISPATCHERS as ALL_EP_DISPATCHERS
from paraplan.hardware_specs.schema import Cluster


@dataclass(frozen=True)
class FrameworkSpec:
    framework: Framework
    title: str
    version: str
    stack: Stack  # the framework's defaults
    zero_stages: frozenset[int]  # the ZeRO stages it can run
    zero_with_pp: int  # the highest ZeRO stage that combines with PP > 1
    interleaved: bool  # virtual pipeline stages
    cp_comms: frozenset[CpComm]  # context-parallel exchanges (empty: no CP)
    offloads: frozenset[Offload]
    optimizer_offload_zero: frozenset[int]  # ZeRO stages its optimizer offload runs with (DP x CP > 1)
    precisions: frozenset[Precision]
    uneven_split: bool  # user-chosen first/last stage layer counts
    cp_shards: bool  # context parallelism runs over the sharding mesh (CP > 1 needs ZeRO >= 2)
    pp_defers_grad_sync: bool  # with PP > 1, unsharded gradients accumulate; one reduce-scatter per step
    pp_recv_buffers: bool  # with PP > 1, receive buffers for every micro-batch persist (see module docstring)
    sp_regathers_input: bool  # sequence parallel: column-parallel inputs all-gathered again in the backward
    tp_allreduce_overlap: bool  # without SP, the backward TP all-reduce runs under the weight-gradient GEMM
    cp_sdpa_merge: bool  # CP runs one SDPA call per step and merges the outputs in fp32 (PyTorch's CP)
    block_recompute: bool  # Megatron's block method: full recompute of N layers per chunk
    even_split_divides: bool  # an even pipeline split needs PP x VPP to divide the layers
    selective: str  # what "selective" recomputes: "core_attention", "unfused_core_attention" or "op" (docstring)
    param_bytes: int  # bytes per parameter of the parameters as stored (bf16 2, FSDP2 fp32 4)
    optimizer_bytes: int  # bytes per parameter of the optimizer states on top of them
    params_sharded_from: int  # ZeRO stage from which the parameters themselves are sharded
    kernel_efficiency: float  # the framework's kernel throughput relative to Megatron-LM + Transformer Engine
    loss_bytes_per_logit: int  # bytes per logit of the TP shard at the loss's peak (see LOSS_BYTES below)
    tp_loss_bytes_per_logit: int  # the same with TP > 1, where the loss runs on vocab-sharded logits
    head_gathered: bool  # ZeRO-3 keeps the LM head gathered from its forward to its backward (see HEAD_GATHERED)
    gather_copies: bool  # ZeRO-2/3 copies weights and gradients around its collectives (see GATHER_COPIES)
    head_input_gathered: bool  # the LM head saves its TP-gathered input, not the SP shard (HEAD_INPUT_GATHERED)
    fp8_saves_quantized_inputs: bool  # FP8 GEMMs keep their FP8 input for the backward (see FP8_SAVES below)
    model_parallel_comms: bool  # communicators over TP x PP and, with FP8, TP x DP x CP (see MODEL_PARALLEL_COMMS)
    token_drop: bool  # Stack.token_drop can run: MoE capacity factor with padding (see TOKEN_DROP)
    mtp: bool  # Stack.mtp can run: multi-token-prediction modules (see MTP)
    hybrid: bool  # hybrid Mamba-2 / attention / MLP layer stacks (ModelSpec.layer_pattern; see HYBRID)
    expert_parallel: bool  # EP > 1 as paraplan prices it (see EXPERT_PARALLEL)
    cpu_checkpointing: (
        bool  # Stack.cpu_checkpointing can run: activation checkpoints in host memory (CPU_CHECKPOINTING)
    )
    ep_dispatchers: frozenset[str]  # the Stack.ep_dispatcher values it runs (see EP_DISPATCHERS)
    moe_host_s_per_op: float  # host time per dispatch of a dropless MoE layer, its floor's unit (MOE_HOST_S_PER_OP)


# The hardware presets' efficiency constants are fitted on Megatron-family runs (NeMo,
# Megatron-Bridge, Megatron-LM: Transformer Engine kernels). Other stacks run other kernels
# (DeepSpeed's Megatron-DeepSpeed fork of 2021-22; torchtitan and llm-foundry: PyTorch-native
# cuBLAS, SDPA and compiled or eager elementwise kernels, FSDP hooks): their throughput relative
# to those kernels is one number per stack, fitted on the published runs of that stack over every
# hardware by `python benchmarks/fit_presets.py` (figures and cross-validation in its output and
# the README). Compute time is divided by it; communication is not. A preset (or a calibrated
# hardware TOML) may hold the stack's own figure on that hardware, fitted on the stack's runs there
# beside Megatron-family ones (`efficiency.stack_kernel_efficiency`, read by
# `compute.kernel_efficiency`); this global figure serves the hardware without one.
# DeepSpeed's figure is not a kernel speed: Megatron-DeepSpeed runs Megatron's fused kernels, and
# its ZeRO-3 175B run on Azure (group deepspeed_azure22) is predicted 6.0% fast at 1.0 (16% too
# slow at the fitted figure: DeepSpeed ZeRO-3 runs without model parallelism likely are too). The
# MT-NLG pipeline runs (mtnlg22) are 17-20% and the 1T/2T ZeRO-3 runs 20%/21% slower than what is
# priced for them at 1.0, after the pipeline engine's blocking transfers (`PP_SERIAL_TRANSFERS`),
# the CPU checkpoints (`Stack.cpu_checkpointing`) and the host's wait for ZeRO-3's reduce-scatters
# with the optimizer offloaded (`OFFLOAD_BLOCKS_GRAD_REDUCE`) and the gathers that ZeRO-3's
# stage3_max_live_parameters keeps from being prefetched (`Stack.zero3_max_live_params`,
# `traffic.live_blocked_numel`: the 2T run's); the fitted figure carries that unexplained rest, so
# it stays a per-stack residual until its mechanism is found.
KERNEL_EFFICIENCY: dict[Framework, float] = {
    Framework.MEGATRON: 1.0,
    Framework.DEEPSPEED: 0.81,
    Framework.TORCHTITAN: 0.937,
}

# The loss at its peak, bytes per token and vocabulary entry of the TP shard, on top of the stored
# activations (the peak is at the end of the forward or the start of the backward, when every
# layer's activations are held):
#  * Megatron-LM 6: `VocabParallelCrossEntropy` (megatron/core/tensor_parallel/cross_entropy.py at
#    d98e8a64) makes one fp32 copy of the bf16 logits (`.float()`, 4 B next to the 2 B logits) and
#    turns it in place into the softmax it saves; its backward writes the gradient into that same
#    buffer, which autograd casts back to bf16 (4 + 2 B).
#  * torchtitan 12: `F.cross_entropy(pred.float(), labels)` (torchtitan 9dec370 train.py; 0.3.0's
#    `cross_entropy_loss`, torchtitan/components/loss.py at 4f9e9a47) in eager mode: the forward
#    holds the bf16 logits, their fp32 copy and the fp32 log-softmax (10 B); the backward holds the
#    saved log-softmax, NLL's fp32 gradient and log-softmax's fp32 input gradient at once (12 B:
#    aten nll_loss_backward and _log_softmax_backward_data each allocate a new tensor). This is
#    the stack's loss "eager" (torchtitan before 0.3.0 without training.compile); 0.3.0's default
#    "chunked" and the "compiled" loss hold less (COMPILED_LOSS_BYTES, LOSS_CHUNKS below).
#  * DeepSpeed 10: the bf16 logits, an fp32 copy and an fp32 softmax (the figure used before per-
#    framework values; Megatron-DeepSpeed's loss is not pinned here).
LOSS_BYTES: dict[Framework, int] = {Framework.MEGATRON: 6, Framework.DEEPSPEED: 10, Framework.TORCHTITAN: 12}
# With TP > 1 the logits are sharded over the vocabulary and the whole (stack loss "eager") loss is
# the framework's vocab-parallel cross entropy (0.3.0's chunked loss has its own
# `_LossParallelCrossEntropy`, not priced apart: LOSS_CHUNKS below uses LOSS_BYTES):
#  * Megatron-LM: the same `VocabParallelCrossEntropy` as above, 6.
#  * torchtitan 16: TP > 1 enables loss parallelism unless training.disable_loss_parallel
#    (torchtitan 9dec370 train.py `enable_loss_parallel=not job_config.training.disable_loss_parallel`,
#    parallelize_llama.py: the output ColwiseParallel keeps Shard(-1) logits) and the loss runs
#    under torch's `loss_parallel()`, whose backward (`_nll_loss_and_log_softmax_backward`,
#    torch/distributed/tensor/parallel/loss.py, read at pytorch/pytorch@02eef6b8, not at the
#    rows' torch 1963fc8, which this repository cannot fetch) computes
#    `grad_input = torch.zeros_like(x)` and returns `(grad_input + torch.exp(x)) * grad_output`
#    from the saved fp32 log-softmax x: x, the zeros, the sum and the product are four fp32
#    tensors of the shard at once, 16 B (against aten's 12 without TP).
#  * DeepSpeed: not pinned, 10 as without TP.
TP_LOSS_BYTES: dict[Framework, int] = {Framework.MEGATRON: 6, Framework.DEEPSPEED: 10, Framework.TORCHTITAN: 16}
# FSDP2 (torchtitan) at ZeRO-3 keeps the LM head (output projection and final norm) gathered in
# bf16 over the loss, on top of the gathered layers: at torchtitan 9dec370 (2024-12) the head
# belongs to the root FSDP group (`fully_shard(model, ...)` in parallelize_llama.py `apply_fsdp`),
# which FSDP2 never reshards after forward ("For the root, do not reshard after forward since for
# training, the parameters would be freed and all-gathered immediately": `post_forward_mesh_info =
# None` in FSDPState._lazy_init, torch/distributed/_composable/fsdp/_fsdp_state.py); since
# torchtitan 83e694105 (2025-07-28) [norm, output] is its own group with reshard_after_forward
# only under the "always" policy (0.3.0: `fully_shard([model.norm, model.lm_head],
# reshard_after_forward=reshard_after_forward_policy == "always")`, torchtitan/distributed/fsdp.py
# at 4f9e9a47; with tied weights the group also holds tok_embeddings). Megatron-FSDP and
# DeepSpeed ZeRO-3 are priced with the layer buffers only.
HEAD_GATHERED: dict[Framework, bool] = {
    Framework.MEGATRON: False,
    Framework.DEEPSPEED: False,
    Framework.TORCHTITAN: True,
}
# FSDP2 (torchtitan's ZeRO-2/3) runs its collectives on flat buffers and copies on the compute
# stream around them, per FSDP unit (a layer) and collective (torch/distributed/fsdp/_fully_shard/
# _fsdp_collectives.py at 010ae4a89; the same copies at 01d66d21d under _composable/fsdp):
#  * all-gather: `_get_param_all_gather_inputs` casts the fp32 shard to bf16 (`torch._foreach_copy_`,
#    4 + 2 B per parameter of the shard), `all_gather_copy_in` copies that into its rank's slice
#    of the gather buffer (`torch._foreach_copy_`, 2 + 2 B), and `foreach_all_gather_copy_out`
#    copies the gathered buffer out to the unsharded parameters (`split_with_sizes_copy`, 2 + 2 B
#    per parameter of the layer);
#  * reduce-scatter: `foreach_reduce_scatter_copy_in` concatenates the layer's bf16 gradients
#    into the reduce-dtype input (`torch._chunk_cat`, 2 B read, 4 B written at torchtitan's fp32
#    reduce dtype); the division by the group size runs inside NCCL (ReduceOp.AVG for fp32 and
#    bf16, `_get_gradient_divide_factors`), not as a kernel. (At 01d66d21d
#    FSDP2 still pre-divided the reduce-scatter input, 8 B more per fp32 parameter: not priced.)
# The copy-in of the reduce-scatter is waited on by the compute stream before the gradients are
# freed, and the copy-out runs on it: exposed, memory-bound (`compute.fsdp_copy_s`). Megatron's
# distributed optimizer gathers into and reduces out of the buffers the parameters and main
# gradients are views of (megatron/core/distributed/param_and_grad_buffer.py); Megatron-FSDP's
# copies were not read and are not priced. DeepSpeed ZeRO-3 gathers into the flat buffer its
# parameters view, and copies the gradients into its bucket (`__add_grad_to_ipg_bucket`),
# concatenates and pre-divides them (`reduce_scatter_coalesced`,
# deepspeed/runtime/comm/coalesced_collectives.py at 17b3b5571) on its reduce stream
# (`reduce_and_partition_stream`, deepspeed/runtime/zero/stage3.py at 007cca6a2), beside the
# compute: no copies priced there.
GATHER_COPIES: dict[Framework, bool] = {
    Framework.MEGATRON: False,
    Framework.DEEPSPEED: False,
    Framework.TORCHTITAN: True,
}
# The LM head's input saved for its weight gradient, held over the loss, with sequence parallelism:
#  * Megatron-LM saves the sequence shard and gathers it again in the backward
#    (`LinearWithGradAccumulationAndAsyncCommunication`, megatron/core/tensor_parallel/layers.py:
#    `ctx.save_for_backward(input, weight)` before the forward all-gather), 2h/TP per token;
#    DeepSpeed's pipelined GPTs use Megatron's layers (Megatron-DeepSpeed).
#  * torchtitan gathers it first: the output layer is `ColwiseParallel(input_layouts=Shard(1), ...)`
#    (torchtitan 9dec370 parallelize_llama.py `apply_tp`), whose input hook redistributes the
#    sequence shard to Replicate before F.linear, which saves that whole tensor: 2h per token.
# Without sequence parallelism the input is whole on every TP rank in all of them.
HEAD_INPUT_GATHERED: dict[Framework, bool] = {
    Framework.MEGATRON: False,
    Framework.DEEPSPEED: False,
    Framework.TORCHTITAN: True,
}
# Stack.loss "compiled": torchtitan's `cross_entropy_loss` under torch.compile (`build_cross_entropy_loss`,
# torchtitan/components/loss.py from bbb1b616e, 2025-04-02, "Enable compiling the loss function
# ... result in reduction of memory"): Inductor fuses the fp32 upcast, log-softmax and NLL into
# reductions over the bf16 logits, so no fp32 logit-sized tensor exists; the backward is one
# pointwise kernel from the saved bf16 logits (and the per-token log-sum-exp) to their bf16
# gradient (the dtype of the graph's input). At the start of the backward: the saved bf16 logits
# and their bf16 gradient, 2 + 2 B.
COMPILED_LOSS_BYTES = 4
# Stack.loss "chunked": torchtitan 0.3.0's default loss, `ChunkedLossWrapper` (torchtitan/components/
# loss.py at 4f9e9a47, `num_chunks: int = 8`; loss.num_chunks default 8 in the llama3 registry
# config, optimizer/launch/schemas/torchtitan_0.3.0.json): in the forward call it runs the
# LM head and the eager loss on one of 8 sequence chunks at a time, each chunk's backward at once,
# and assembles the hidden states' gradient in a `GradAccumulator` of float32 [B, L, h] (4 B per
# token and hidden unit; the hidden states are replicated over TP before chunking). Its peak, with
# every layer's activations held, is one chunk's loss (LOSS_BYTES / 8 per logit) on top of that
# buffer; the chunks are `.contiguous()` splits of the hidden states along the sequence, copies
# (2 B per token and hidden unit) when the micro-batch holds more than one sequence.
LOSS_CHUNKS = 8

# What an FP8 linear layer keeps of its input for the weight gradient:
#  * Megatron-LM (Transformer Engine layers): the FP8 input, 1 B per element. TE's `_Linear.forward`
#    saves the quantized `inputmat` (transformer_engine/pytorch/module/linear.py at 3ec87875: "saved_inputmat
#    = inputmat", keeping only its column-wise FP8 data: "Discard row-wise data since it is not needed in
#    backward pass"), and `_LayerNormLinear` the FP8 norm output it casts (its backward transposes that
#    FP8 `ln_out` for the weight-gradient GEMM, layernorm_linear.py); the bf16 copy is not kept.
#  * torchtitan (torchao's Float8Linear): the bf16 input, cast again in the backward
#    (`matmul_with_hp_or_float8_args` saves the high-precision input and weight), so FP8 changes
#    nothing stored. DeepSpeed runs no FP8 here.
FP8_SAVES: dict[Framework, bool] = {Framework.MEGATRON: True, Framework.DEEPSPEED: False, Framework.TORCHTITAN: False}

# Stack.fp8_recipe: Megatron-LM's --fp8-recipe defaults to "delayed" (Transformer Engine's
# DelayedScaling; megatron_lm_arguments.json at d98e8a64); torchtitan 0.3.0's Float8LinearConverter
# defaults to recipe_name "rowwise" and offers only rowwise and rowwise_with_gw_hp
# (torchtitan/components/quantization/float8.py at 4f9e9a47). torchtitan before 0.3.0 (v0.2.2:
# quantize.linear.float8.recipe_name None) ran torchao's default Float8LinearConfig, tensorwise.
TORCHTITAN_FP8_RECIPE: Fp8Recipe = "rowwise"

# Communicators beyond the world, TP, DP x CP, CP and EP groups every framework runs collectives on
# (memory.nvls_buffer_bytes): Megatron-LM reduces its gradient statistics (norm, zeros) over the
# model-parallel group, TP x PP (`model_parallel_group = pg_collection.mp`, megatron/core/optimizer/
# __init__.py at d98e8a64; the distributed optimizer of core_v0.6.0 used the world instead), and
# Transformer Engine reduces FP8 amaxes over `get_amax_reduction_group(with_context_parallel=True)`,
# TP x DP x CP (megatron/core/fp8_utils.py at d98e8a64; transformer_block.py at core_v0.6.0).
MODEL_PARALLEL_COMMS: dict[Framework, bool] = {
    Framework.MEGATRON: True, Framework.DEEPSPEED: False, Framework.TORCHTITAN: False,
}  # fmt: skip

# Stack.token_drop per framework: Megatron-LM d98e8a64 has --moe-expert-capacity-factor and
# --moe-pad-expert-input-to-capacity (megatron_lm_arguments.json); torchtitan 0.3.0's MoE is
# dropless only (no capacity factor among its flags, optimizer/launch/schemas/torchtitan_0.3.0.json); paraplan's
# DeepSpeed launch (the Megatron-DeepSpeed script) is not given a capacity flag: left unmodelled.
TOKEN_DROP: dict[Framework, bool] = {
    Framework.MEGATRON: True, Framework.DEEPSPEED: False, Framework.TORCHTITAN: False,
}  # fmt: skip

# Stack.cpu_checkpointing per framework: DeepSpeed's activation checkpointing (the JSON's
# activation_checkpointing.cpu_checkpointing, Megatron-DeepSpeed's --checkpoint-in-cpu); Megatron-LM
# d98e8a64 and torchtitan 0.3.0 have no host checkpoints among their options (their schemas).
CPU_CHECKPOINTING: dict[Framework, bool] = {
    Framework.MEGATRON: False, Framework.DEEPSPEED: True, Framework.TORCHTITAN: False,
}  # fmt: skip

# Stack.mtp per framework: Megatron-LM d98e8a64 has --mtp-num-layers (megatron_lm_d98e8a64.json;
# multi_token_prediction.py); torchtitan 0.3.0's job config has no MTP option (torchtitan_0.3.0.json)
# and paraplan's DeepSpeed launch (Megatron-DeepSpeed script) none either.
MTP: dict[Framework, bool] = {
    Framework.MEGATRON: True, Framework.DEEPSPEED: False, Framework.TORCHTITAN: False,
}  # fmt: skip

# Hybrid layer stacks (`ModelSpec.layer_pattern`: Nemotron-H, Mamba-2) per framework: Megatron-LM
# d98e8a64 trains them (pretrain_hybrid.py, megatron/core/models/hybrid/ and megatron/core/ssm/,
# --hybrid-layer-pattern and the --mamba-* flags of megatron_lm_arguments.json); torchtitan 0.3.0
# has no Mamba model among its models and paraplan's DeepSpeed launch (a Megatron-DeepSpeed GPT
# script) builds transformer layers only.
HYBRID: dict[Framework, bool] = {
    Framework.MEGATRON: True, Framework.DEEPSPEED: False, Framework.TORCHTITAN: False,
}  # fmt: skip

# Expert parallelism (EP > 1) as paraplan prices it: Megatron-LM carves the expert-parallel ranks
# out of DP x CP (x TP with expert TP below TP: --expert-model-parallel-size and
# --expert-tensor-parallel-size, optimizer/launch/schemas/megatron_lm_d98e8a64.json), and DeepSpeed-MoE
# carves its expert-parallel groups out of the data-parallel ranks the same way (deepspeed/utils/
# groups.py `_create_expert_and_data_parallel`; its layer itself is another, `MOE_LAYER`). torchtitan 0.3.0 has
# parallelism.expert_parallel_degree only (schemas/torchtitan_0.3.0.json; v0.2.2 also had
# expert_tensor_parallel_degree), its expert-parallel ranks borrowed from the FSDP and TP ranks with
# the experts not tensor-parallel: a mesh paraplan prices only approximately, as Megatron-style EP
# over DP x CP, and its launch config cannot write (emitters._emit_torchtitan). So the search
# proposes a torchtitan layout with EP 1 (the experts sharded by FSDP with the rest;
# `limits.REDUNDANT`), and a torchtitan plan the user gives with EP > 1 is priced that way with a
# warning (`ep_approximation`).
EXPERT_PARALLEL: dict[Framework, bool] = {
    Framework.MEGATRON: True, Framework.DEEPSPEED: True, Framework.TORCHTITAN: False,
}  # fmt: skip

# Whether the framework's mixture-of-experts layer is the one paraplan prices: dropless top-k routing,
# the tokens permuted to their experts and run as grouped GEMMs (Megatron-Core's MoELayer at d98e8a64;
# torchtitan 0.3.0's MoE, dropless with grouped_mm). Megatron-DeepSpeed's is DeepSpeed-MoE
# (deepspeed/moe/sharded_moe.py, which its ParallelTransformerLayer builds): top-1/top-2 gating with a
# capacity factor that drops tokens unless told not to (and then pads every expert to the largest
# load), the tokens dispatched by einsum over a one-hot mask. A DeepSpeed MoE prediction is therefore
# the Megatron-style layer's, with a warning (`moe_approximation`), and its launch config is refused.
MOE_LAYER: dict[Framework, bool] = {
    Framework.MEGATRON: True, Framework.DEEPSPEED: False, Framework.TORCHTITAN: True,
}  # fmt: skip
DEEPSPEED_MOE_WORDS = (
    "DeepSpeed-MoE layers (top-1/2 gating, a capacity factor that drops or pads tokens, an einsum dispatch)"
)

# Stack.ep_dispatcher per framework: Megatron-LM d98e8a64 has --moe-token-dispatcher-type
# {allgather,alltoall,flex} and --moe-flex-dispatcher-backend {deepep,hybridep,ncclep}
# (megatron_lm_arguments.json); paraplan's DeepSpeed launch (Megatron-DeepSpeed) and torchtitan
# 0.3.0 are priced with the plain all-to-all only (torchtitan's DeepEP option is not modelled).
EP_DISPATCHERS: dict[Framework, frozenset[str]] = {
    Framework.MEGATRON: frozenset(ALL_EP_DISPATCHERS),  # every value Stack.ep_dispatcher takes
    Framework.DEEPSPEED: frozenset({"alltoall"}), Framework.TORCHTITAN: frozenset({"alltoall"}),
}  # fmt: skip

# The host floor of a dropless mixture-of-experts layer: per MoE layer and micro-batch, the forward
# plus backward pass takes at least its host dispatches (`compute.moe_layer_ops`: the Python-level
# calls that launch GPU work, counted from Megatron-Core's code per attention kind, shared experts,
# TP collectives, FP8 casts, dispatcher and GPT-OSS's per-expert bias loop, and in the backward the
# custom autograd Functions with a Python backward; native backward nodes cost no dispatch) times
# MOE_HOST_S_PER_OP, however little work its kernels do (`compute.moe_host_wait_s`). Mechanism:
# Megatron-LM's dropless alltoall dispatcher copies the
# per-expert token counts to the host in every MoE layer's forward (megatron/core/transformer/moe/
# token_dispatcher.py at d98e8a64, MoEAlltoAllTokenDispatcher.preprocess and
# `_maybe_dtoh_and_synchronize`: the all-to-all split sizes and the grouped GEMM's m_splits must be
# Python ints; with FP8, TEGroupedMLP also calls tokens_per_expert.tolist()); the flex dispatcher's
# DeepEP manager reads `tokens_per_expert.sum().item()` before its permutation, so the
# Megatron-Bridge rows that name DeepEP or HybridEP are taken as dropless the same way. The CPU waits there
# until the GPU has run everything queued before, so it cannot launch ahead: each layer costs the
# launch and Python time of its kernels (router, permutation, all-to-alls, grouped GEMMs, their
# backward) on top of, not under, the GPU's. Where the GPU work of a layer is short (small
# micro-batches, few active parameters) the layer is host-bound; the fitted constant is the host's
# time per dispatch, so the floor grows with the layer's dispatches (MLA, shared experts, sequence
# parallel collectives, FP8 casts, GPT-OSS's bias loop add to it; the flex dispatcher's fused
# permutation takes from it).
# Evidence (NVIDIA-NeMo/Megatron-Bridge docs/performance-summary-archive.md; rows in
# benchmarks/data/runs_public.csv): the 25.09 token-drop rows (apply_moe_token_drop: capacity
# factor 1.0 padded to capacity, static shapes, no device-to-host copy) against the 25.11
# dropless rows of the same shapes: Qwen3-30B-A3B on 8 B200 18066 vs 9299 tokens/s/GPU, on 16
# H100 10494 vs 5275; and Qwen3-30B-A3B on 8 B200 at MBS 4 (26.04, 26859) against MBS 1 (26.02,
# 9691): 2.8x the throughput for 4x the micro-batch, about 7.5 ms fixed per MoE layer and
# micro-batch plus 0.32 us per token. Token-drop runs (`Stack.token_drop`) have no floor.
# Fitted by `python benchmarks/fit_presets.py` on the dropless Megatron-family MoE runs (step 3
# of its docstring; 114 runs with every GB200, GB300 and B300 row of the tables, each row's CUDA
# graphs counted (`Stack.cuda_graph_scope`) and each row's load-balancing loss (`Stack.moe_aux_loss`:
# GPT-OSS's 26 rows run none), with MOE_HOST_EXPOSED_SHARE (below): 163.6 us per dispatch, their
# MAPE 20.8% -> 11.4% (21.3% -> 11.6% before the SSD kernels' intermediates in `mamba_mixer_s`,
# 21.7% -> 11.9% before GEMM tile rounding, `Efficiency.gemm_tile`;
# 163.5 us, 14.4% with the plain maximum, max(H, G); before that, with it:
# 160.3 us, 14.5% with an aux loss in every router; 155.9 us, 15.7% with every dispatch counted
# whatever the graphs); on the first 45: 159.0 us, 29.7% -> 14.1%; on the 40 runs it
# was first fitted on, the one floor of 12.4 ms per layer it replaces gave 19.3% and the count 17.4%,
# leave-one-source-out macro MAPE 13.0% -> 12.1%). Solved
# per row, the floors the runs need differ by architecture: Qwen3-30B at MBS 1 (GQA, no shared
# experts, TP1; 59-74 dispatches) 8.6-9.3 ms, Moonlight (MLA, 2 shared experts, TP2 with SP; 93) 16-18 ms,
# DeepSeek-V3 on B200 (MLA with LoRA q, a shared expert; 89-104) 19-26 ms; the count orders them
# so, though not in full. Counting every backward call (GPT-OSS-120B on H100: 144 dispatches, most
# from its 16 local experts' bias loop, whose backward is native) overshot GPT-OSS by +25..+29%
# (12-15 ms needed); with native backward nodes free it has 99. It leaves the H100 Qwen3-30B rows with many virtual
# stages (VP 12 and 24, one or two layers per chunk) too fast. Tried and not kept: a forward-only
# floor (the backward has no sync and can run ahead), better in-sample but worse held out; counting
# each local expert's GEMM launch as a dispatch (`compute.moe_layer_ops` says why not). The other
# stacks' MoE is not modelled: 0 (no floor).
MOE_HOST_S_PER_OP: dict[Framework, float] = {
    Framework.MEGATRON: 0.0001634, Framework.DEEPSPEED: 0.0, Framework.TORCHTITAN: 0.0,
}  # fmt: skip

# The share of that host time a dropless MoE layer pays even when its GPU work is the longer:
# the layer takes max(H, G + MOE_HOST_EXPOSED_SHARE x H), not max(H, G) (`compute.moe_host_wait_s`).
# Mechanism: the per-layer device-to-host copy (above) drains the GPU's queue; right after it the
# GPU has nothing queued and runs each kernel as the CPU launches it, so the host's dispatches up to
# the first kernel long enough to let the CPU run ahead again (the dispatcher's bookkeeping, the
# permutation and the all-to-alls before the experts' first GEMM) lie on the critical path however
# long the layer's GPU work is; the CPU then runs ahead until the next layer's copy. Counted from the
# table of `compute.moe_layer_ops`, those dispatches are a twentieth to a fifth of a layer's (5-10
# of 46-99); one share for all, as the count of each layer's is not pinned per dispatcher and CUDA
# graph scope. Evidence (benchmarks/data/runs_public.csv): with max(H, G) the GPU-bound Blackwell
# rows of the small MoE models were too fast where their H100 rows, host-bound, fit: Qwen3-30B-A3B
# on GB200 at micro-batch 4 with the router graphed -13..-14% (26.02 .. 26.04) while the same
# recipe with the whole iteration graphed (26.06: no host dispatch per layer) is within 6%; on
# B200, B300 and GB300 -4..-12%. Chosen by refitting everything (`python benchmarks/fit_presets.py`,
# the per-dispatch time refitted with it) at 0, 0.1, 0.15, 0.2, 0.25, 0.3 and 0.5 of H: macro MAPE
# over the 331 runs 5.87%, 5.78%, 5.71%, 5.67%, 5.72%, 5.74%, 6.72% and micro 8.79%, 8.30%, 8.08%,
# 7.96%, 7.94%, 8.09%, 8.88%; leave-one-source-out macro 10.5% at 0, 10.4% at 0.2 (Megatron-Bridge's
# performance tables held out 13.3% -> 12.6%). The per-dispatch time moves little with it
# (161-164 us). Against it: the GB200/GB300 Qwen3-235B-A22B rows of 26.02 .. 26.04.01, within 3%
# with the plain maximum, are +5..+9% with the share. Tried and not kept: a count of the
# dispatches between the copy and the first expert GEMM in place of the share (macro 5.82% at
# that count's time, 5.78% at twice it); a soft maximum (G^p + H^p)^(1/p) (p = 2: 6.01%,
# p = 3: 5.86%).
MOE_HOST_EXPOSED_SHARE = 0.2

# Pipeline transfers per micro-batch and stage that the step waits for, one after another, without
# the interleaved schedule's overlap (`traffic.pp_per_micro_batch_s`):
#  * Megatron-LM 2: the 1F1B steady state pairs each send with the opposite receive in one batched
#    isend/irecv (`send_forward_recv_backward`, `send_backward_recv_forward` in
#    megatron/core/pipeline_parallel/p2p_communication.py at d98e8a64): an activation and a gradient.
#  * DeepSpeed 4: its PipelineEngine runs `TrainSchedule` instruction by instruction
#    (deepspeed/runtime/pipe/schedule.py and engine.py `_exec_schedule`, v0.5.8 9aa288d7 of the
#    MT-NLG era and v0.19.5 cf443004 alike): every step of the 2(m + p - 1) steps sends the previous
#    step's result and receives the current input as two separate blocking calls (p2p.py `send`/`recv`:
#    `dist.send`/`dist.recv`, or `dist.broadcast` over a two-rank group before torch 1.8; `async_op`
#    is asserted False), so a stage's recv_act, send_grad, send_act and recv_grad of one micro-batch
#    all wait in line. A simulation of that schedule with blocking rendezvous transfers (p = 35,
#    m = 240, forward 1, backward 3, transfer x) takes (m + p - 1)(4 + 4x) within 1%, not the
#    (m + p - 1)(4 + 2x) of paired transfers (with x = 0 both give 1F1B's (m + p - 1)(f + b)).
#  * torchtitan 2: PyTorch's pipelining schedules post a stage's sends and receives of a step together.
PP_SERIAL_TRANSFERS: dict[Framework, int] = {Framework.MEGATRON: 2, Framework.DEEPSPEED: 4, Framework.TORCHTITAN: 2}
# With TP > 1 DeepSpeed's pipeline engine sends only a TP rank's slice of the boundary activation and
# gradient (`is_pipe_partitioned`, `is_grad_partitioned` = model parallel, on by default: engine.py
# `PartitionedTensor` over the slice-parallel group) and rebuilds the whole tensor with an all-gather
# over TP on the compute stream: the receiver before its forward (`_exec_forward_pass`
# `part_input.full()`), the sender before its backward (`_exec_backward_pass`: the output
# `part_output.full()` and the received gradient `part_grad.full()`): 3 all-gathers per micro-batch
# on a middle stage. Megatron-LM's scatter/gather optimisation does the same in the forward only
# (`--no-scatter-gather-tensors-in-pipeline` of 2021-22; not at d98e8a64, which sends whole
# sequence-parallel shards): 0 here.
PP_PARTITION_GATHERS: dict[Framework, int] = {Framework.MEGATRON: 0, Framework.DEEPSPEED: 3, Framework.TORCHTITAN: 0}
# ZeRO-3 with the optimizer offloaded: the host waits for each gradient bucket's reduce-scatter.
#  * DeepSpeed True: stage3.py `__reduce_and_partition_ipg_grads` runs a bucket's reduce-scatter
#    and then `__partition_grads` on the reduction stream; with `offload_optimizer` the latter ends
#    in `fp32_grad_tensor.copy_(grad_buffer)` into the host fp32 gradient (v0.6.2 of the Azure
#    1T/2T runs; `copy_(grad_buffer.float())` at 38327e07 of 2025-02 alike), a copy without
#    `non_blocking` from the GPU to the CPU, so the autograd thread blocks until that stream has
#    finished the reduce-scatter. It runs at the gradient accumulation boundary, the step's last
#    micro-batch (earlier ones accumulate with `non_blocking` copies). A bucket is reduced when the next gradient arrives (a weight
#    above `reduce_bucket_size` is a bucket of its own), and what the host has queued on the
#    compute stream by then is the backward between the two gradients: in Megatron's layer
#    elementwise work (fused bias-GeLU, bias-dropout-add: the MLP's biases are added outside
#    its linears) or a LayerNorm, so the compute stream waits for the reduce-scatter of the MLP
#    and QKV weights; only the attention projection's may hide under the core attention's
#    backward that follows it (taken as exposed too: the projection holds 1/12 of a layer's
#    weights). The gathers run on their own stream, prefetched before the host blocks, and
#    still hide.
#  * Megatron-LM False: its --optimizer-cpu-offload copies gradients after the step's one
#    reduce-scatter (ZeRO-1 only: `optimizer_offload_zero`). torchtitan: no optimizer offload.
OFFLOAD_BLOCKS_GRAD_REDUCE: dict[Framework, bool] = {
    Framework.MEGATRON: False,
    Framework.DEEPSPEED: True,
    Framework.TORCHTITAN: False,
}

FRAMEWORKS: dict[Framework, FrameworkSpec] = {
    Framework.MEGATRON: FrameworkSpec(
        Framework.MEGATRON, "Megatron-LM", "main @ d98e8a64 (Megatron-Core 0.19 era)",
        Stack(main_grads="fp32"), zero_stages=frozenset({0, 1, 2, 3}), zero_with_pp=3, interleaved=True,
        cp_comms=frozenset(CpComm), offloads=frozenset({Offload.NONE, Offload.OPTIMIZER}),
        optimizer_offload_zero=frozenset({1}),
        precisions=frozenset(Precision), uneven_split=True, cp_shards=False, pp_defers_grad_sync=False, pp_recv_buffers=False, sp_regathers_input=True, tp_allreduce_overlap=True,
        cp_sdpa_merge=False, block_recompute=True, even_split_divides=True, selective="core_attention", param_bytes=2, optimizer_bytes=12,
        params_sharded_from=3, kernel_efficiency=1.0, loss_bytes_per_logit=LOSS_BYTES[Framework.MEGATRON],
        tp_loss_bytes_per_logit=TP_LOSS_BYTES[Framework.MEGATRON], head_gathered=HEAD_GATHERED[Framework.MEGATRON], gather_copies=GATHER_COPIES[Framework.MEGATRON],
        head_input_gathered=HEAD_INPUT_GATHERED[Framework.MEGATRON],
        fp8_saves_quantized_inputs=FP8_SAVES[Framework.MEGATRON],
        model_parallel_comms=MODEL_PARALLEL_COMMS[Framework.MEGATRON], token_drop=TOKEN_DROP[Framework.MEGATRON], mtp=MTP[Framework.MEGATRON],
        hybrid=HYBRID[Framework.MEGATRON], expert_parallel=EXPERT_PARALLEL[Framework.MEGATRON],
        cpu_checkpointing=CPU_CHECKPOINTING[Framework.MEGATRON],
        ep_dispatchers=EP_DISPATCHERS[Framework.MEGATRON], moe_host_s_per_op=MOE_HOST_S_PER_OP[Framework.MEGATRON],
    ),
    Framework.DEEPSPEED: FrameworkSpec(
        Framework.DEEPSPEED, "DeepSpeed", "0.19.8",
        Stack(main_grads="bf16", tp_overlap=True, p2p_overlap=False, kv_repeated=True), zero_stages=frozenset({0, 1, 2, 3}),
        zero_with_pp=1, interleaved=False, cp_comms=frozenset(), offloads=frozenset(Offload),
        optimizer_offload_zero=frozenset({1, 2, 3}),
        precisions=frozenset({Precision.BF16, Precision.FP16}), uneven_split=False, cp_shards=False,
        pp_defers_grad_sync=False, pp_recv_buffers=False, sp_regathers_input=True, tp_allreduce_overlap=False,
        cp_sdpa_merge=False, block_recompute=False, even_split_divides=False, selective="unfused_core_attention", param_bytes=2,
        optimizer_bytes=12, params_sharded_from=3, kernel_efficiency=KERNEL_EFFICIENCY[Framework.DEEPSPEED],
        loss_bytes_per_logit=LOSS_BYTES[Framework.DEEPSPEED],
        tp_loss_bytes_per_logit=TP_LOSS_BYTES[Framework.DEEPSPEED], head_gathered=HEAD_GATHERED[Framework.DEEPSPEED], gather_copies=GATHER_COPIES[Framework.DEEPSPEED],
        head_input_gathered=HEAD_INPUT_GATHERED[Framework.DEEPSPEED],
        fp8_saves_quantized_inputs=FP8_SAVES[Framework.DEEPSPEED],
        model_parallel_comms=MODEL_PARALLEL_COMMS[Framework.DEEPSPEED], token_drop=TOKEN_DROP[Framework.DEEPSPEED], mtp=MTP[Framework.DEEPSPEED],
        hybrid=HYBRID[Framework.DEEPSPEED], expert_parallel=EXPERT_PARALLEL[Framework.DEEPSPEED],
        cpu_checkpointing=CPU_CHECKPOINTING[Framework.DEEPSPEED],
        ep_dispatchers=EP_DISPATCHERS[Framework.DEEPSPEED], moe_host_s_per_op=MOE_HOST_S_PER_OP[Framework.DEEPSPEED],
    ),
    Framework.TORCHTITAN: FrameworkSpec(
        Framework.TORCHTITAN, "torchtitan", "0.3.0",
        Stack(main_grads="fp32", tp_overlap=False, p2p_overlap=False, loss="chunked", fp8_recipe=TORCHTITAN_FP8_RECIPE),
        zero_stages=frozenset({0, 2, 3}),
        zero_with_pp=3, interleaved=True, cp_comms=frozenset({CpComm.ALLGATHER}),
        offloads=frozenset({Offload.NONE, Offload.ALL}), optimizer_offload_zero=frozenset(), precisions=frozenset({Precision.BF16, Precision.FP8}),
        uneven_split=True, cp_shards=True, pp_defers_grad_sync=True, pp_recv_buffers=True, sp_regathers_input=False, tp_allreduce_overlap=True, cp_sdpa_merge=True, block_recompute=False, even_split_divides=False, selective="op", param_bytes=4, optimizer_bytes=8,
        params_sharded_from=2, kernel_efficiency=KERNEL_EFFICIENCY[Framework.TORCHTITAN],
        loss_bytes_per_logit=LOSS_BYTES[Framework.TORCHTITAN],
        tp_loss_bytes_per_logit=TP_LOSS_BYTES[Framework.TORCHTITAN], head_gathered=HEAD_GATHERED[Framework.TORCHTITAN], gather_copies=GATHER_COPIES[Framework.TORCHTITAN],
        head_input_gathered=HEAD_INPUT_GATHERED[Framework.TORCHTITAN],
        fp8_saves_quantized_inputs=FP8_SAVES[Framework.TORCHTITAN],
        model_parallel_comms=MODEL_PARALLEL_COMMS[Framework.TORCHTITAN], token_drop=TOKEN_DROP[Framework.TORCHTITAN], mtp=MTP[Framework.TORCHTITAN],
        hybrid=HYBRID[Framework.TORCHTITAN], expert_parallel=EXPERT_PARALLEL[Framework.TORCHTITAN],
        cpu_checkpointing=CPU_CHECKPOINTING[Framework.TORCHTITAN],
        ep_dispatchers=EP_DISPATCHERS[Framework.TORCHTITAN], moe_host_s_per_op=MOE_HOST_S_PER_OP[Framework.TORCHTITAN],
    ),
}  # fmt: skip
# The member for the integer a layout column holds, so that no enum is built per candidate table.
_MEMBER: dict[int, Framework] = {int(fw): fw for fw in Framework}


def spec(framework: Framework | int) -> FrameworkSpec:
    return FRAMEWORKS[Framework(framework)]


def default_stack(framework: Framework) -> Stack:
    return FRAMEWORKS[framework].stack


Check = Callable[[Layouts], BoolArray]


def per_framework(lay: Layouts, test: Callable[[FrameworkSpec, Layouts], BoolArray]) -> BoolArray:
    """`test` applied to each framework's candidates (a question has one framework, but the
    arrays may mix them)."""
    used = lay.frameworks_used
    if len(used) == 1:
        return np.asarray(test(FRAMEWORKS[_MEMBER[used[0]]], lay) & np.ones(len(lay), dtype=bool))
    out = np.zeros(len(lay), dtype=bool)
    for fw in used:
        out |= (lay.framework == fw) & test(FRAMEWORKS[_MEMBER[fw]], lay)
    return out


def kernel_efficiency_on(cluster: Cluster, spec: FrameworkSpec) -> float:
    """The stack's kernel throughput relative to Megatron-LM's on this hardware: the hardware's own
    figure where a fit measured one (`efficiency.stack_kernel_efficiency`), else the global one
    (KERNEL_EFFICIENCY)."""
    own = cluster.efficiency.stack_kernel_efficiency.of(spec.framework.label)
    return spec.kernel_efficiency if own is None else own


def per_framework_value(lay: Layouts, value: Callable[[FrameworkSpec], float]) -> FloatArray:
    """A per-framework figure (`value` of its spec) for each candidate."""
    used = lay.frameworks_used
    if len(used) == 1:
        return np.full(len(lay), float(value(FRAMEWORKS[_MEMBER[used[0]]])))
    out = np.zeros(len(lay))
    for fw in used:
        out = np.where(lay.framework == fw, float(value(FRAMEWORKS[_MEMBER[fw]])), out)
    return out


def per_framework_field(lay: Layouts, field: str) -> FloatArray:
    """A `FrameworkSpec` field (a number or a flag, as 0/1) for each candidate."""
    return per_framework_value(lay, lambda fs: float(getattr(fs, field)))


def _in(
    values: np.ndarray, allowed: frozenset[int] | frozenset[CpComm] | frozenset[Offload] | frozenset[Precision]
) -> BoolArray:
    return np.asarray(_member_table(allowed)[np.minimum(values, _TABLE_SIZE - 1)], dtype=np.bool_)


# Knob values are small non-negative integers (enum values, ZeRO stages): membership is a lookup
# in a boolean table, 10x quicker than np.isin on the small tables a question evaluates.
_TABLE_SIZE = 64


@functools.cache
def _member_table(allowed: frozenset[int] | frozenset[CpComm] | frozenset[Offload] | frozenset[Precision]) -> BoolArray:
    table = np.zeros(_TABLE_SIZE, dtype=bool)  # the last slot stands for every larger value: never allowed
    table[[int(v) for v in allowed if 0 <= int(v) < _TABLE_SIZE - 1]] = True
    return table


def zero_unsupported(lay: Layouts) -> BoolArray:
    return per_framework(lay, lambda fs, x: ~_in(x.zero, fs.zero_stages))


def zero_with_pp(lay: Layouts) -> BoolArray:
    return per_framework(lay, lambda fs, x: (x.pp > 1) & (x.zero > fs.zero_with_pp))


def interleaved_unsupported(lay: Layouts) -> BoolArray:
    return per_framework(lay, lambda fs, x: (x.virtual_stages > 1) & (not fs.interleaved))


def cp_unsupported(lay: Layouts) -> BoolArray:
    return per_framework(lay, lambda fs, x: (x.cp > 1) & ~_in(x.cp_comm, fs.cp_comms))


def offload_unsupported(lay: Layouts) -> BoolArray:
    """The framework lacks this offload, or it needs a ZeRO stage the layout does not have:
    optimizer offload needs sharded optimizer states (ZeRO >= 1), parameter offload ZeRO-3. With a
    single data-parallel rank every stage shards over one rank, so any stage will do (the
    emitter writes the stage the framework requires)."""
    needs = np.where(lay.offload == Offload.ALL, 3, np.where(lay.offload == Offload.OPTIMIZER, 1, 0))
    several = lay.dp * lay.cp > 1
    sharding = (lay.zero < needs) & several

    def lacks(fs: FrameworkSpec, x: Layouts) -> BoolArray:
        stage = (x.offload == Offload.OPTIMIZER) & several & ~_in(x.zero, fs.optimizer_offload_zero)
        return np.asarray(~_in(x.offload, fs.offloads) | stage)

    return np.asarray(per_framework(lay, lacks) | sharding)


def deferred_grad_sync(lay: Layouts) -> BoolArray:
    """Gradients kept whole across a pipelined step and reduced once (`pp_defers_grad_sync`)."""
    return per_framework(lay, lambda fs, x: (x.pp > 1) & fs.pp_defers_grad_sync)


def zero2_regathers(lay: Layouts) -> BoolArray:
    """ZeRO-2 layouts whose parameters are gathered again for every micro-batch's forward: where the
    framework stores them sharded at ZeRO-2 (`params_sharded_from`: torchtitan's FSDP2 with
    reshard_after_forward False) and does not keep them gathered across the step. FSDP2 frees the
    gathered parameters after each backward (`reshard_after_backward`, default True; torchtitan 0.3.0
    turns it off only for the chunked loss's lm_head, components/loss.py, and PyTorch's pipelining for
    every micro-batch of a stage, `pp_defers_grad_sync`), so the next micro-batch's forward all-gathers
    them again (torch.distributed.fsdp `FSDPModule.set_reshard_after_backward`: turning it off "trades
    off higher memory for reduced communication since the unsharded parameters do not need to be
    re-all-gathered before the next forward")."""
    deferred = deferred_grad_sync(lay)
    return per_framework(lay, lambda fs, x: np.full(len(x), fs.params_sharded_from <= 2)) & ~deferred


def sharded_collectives_per_step(lay: Layouts) -> tuple[FloatArray, FloatArray]:
    """How often a step gathers each layer's weights and reduce-scatters its gradients at ZeRO-2
    and 3, (gathers, reduce-scatters): ZeRO-3 gathers for every micro-batch's forward and again
    for its backward, ZeRO-2 for every forward where the framework regathers (`zero2_regathers`)
    and once after the optimizer step otherwise; the gradients are reduce-scattered after every
    micro-batch's backward, or once where the sync is deferred (`deferred_grad_sync`). 0 at ZeRO 0
    and 1, which reduce the whole gradient once a step."""
    m = np.maximum(lay.num_micro_batches, 1.0)
    sharded = lay.zero >= 2
    gathers = np.where(lay.zero >= 3, 2.0 * m, np.where(zero2_regathers(lay), m, 1.0))
    scatters = np.where(deferred_grad_sync(lay), 1.0, m)
    return np.asarray(np.where(sharded, gathers, 0.0)), np.asarray(np.where(sharded, scatters, 0.0))


def tp_allreduce_overlap(lay: Layouts) -> FloatArray:
    """1 where the backward TP all-reduce of a layout without sequence parallelism runs under the
    weight-gradient GEMM (`FrameworkSpec.tp_allreduce_overlap`), else 0."""
    return per_framework_value(lay, lambda fs: 1.0 if fs.tp_allreduce_overlap else 0.0)


def sp_regathers_input(lay: Layouts) -> FloatArray:
    """1 where the framework all-gathers a column-parallel linear's input again in the backward
    (`FrameworkSpec.sp_regathers_input`), else 0."""
    return per_framework_value(lay, lambda fs: 1.0 if fs.sp_regathers_input else 0.0)


# The frameworks whose ZeRO-3 prefetches nothing while the gathered parameters reach a limit
# (`Stack.zero3_max_live_params`): DeepSpeed's `PartitionedParameterCoordinator`. FSDP prefetches
# one module ahead whatever its size; Megatron-LM's distributed optimizer gathers per bucket.
ZERO3_LIVE_LIMIT: dict[Framework, bool] = {
    Framework.MEGATRON: False,
    Framework.DEEPSPEED: True,
    Framework.TORCHTITAN: False,
}


def zero3_live_limited(lay: Layouts) -> BoolArray:
    """ZeRO-3 under a framework whose prefetch stops at a live-parameter limit (`ZERO3_LIVE_LIMIT`)."""
    return per_framework(lay, lambda fs, x: (x.zero >= 3) & ZERO3_LIVE_LIMIT[fs.framework])


def offload_blocks_grad_reduce(lay: Layouts) -> BoolArray:
    """ZeRO-3 with the optimizer offloaded, where the framework's host waits for each gradient
    reduce-scatter (`OFFLOAD_BLOCKS_GRAD_REDUCE`): the backward cannot hide it."""
    offloaded = (lay.zero >= 3) & (lay.offload != Offload.NONE)
    return per_framework(lay, lambda fs, x: offloaded & OFFLOAD_BLOCKS_GRAD_REDUCE[fs.framework])


def pp_serial_transfers(lay: Layouts) -> FloatArray:
    """Pipeline transfers per micro-batch that wait in line (`PP_SERIAL_TRANSFERS`)."""
    return per_framework_value(lay, lambda fs: PP_SERIAL_TRANSFERS[fs.framework])


def pp_partition_gathers(lay: Layouts) -> FloatArray:
    """TP all-gathers per micro-batch that rebuild partitioned pipeline tensors (`PP_PARTITION_GATHERS`)."""
    return per_framework_value(lay, lambda fs: PP_PARTITION_GATHERS[fs.framework])


def cp_sdpa_merge(lay: Layouts) -> BoolArray:
    """Context parallelism the PyTorch way: per-step SDPA outputs merged in fp32
    (`FrameworkSpec.cp_sdpa_merge`)."""
    return per_framework(lay, lambda fs, x: (x.cp > 1) & fs.cp_sdpa_merge)


def precision_unsupported(lay: Layouts) -> BoolArray:
    return per_framework(lay, lambda fs, x: ~_in(x.precision, fs.precisions))


def precision_words(lay: Layout) -> str:
    """Why the layout's framework cannot train in its precision (`precision_unsupported`)."""
    fs = FRAMEWORKS[lay.framework]
    return f"{fs.title} {fs.version} cannot run {lay.precision} training"


def uneven_unsupported(lay: Layouts) -> BoolArray:
    uneven = (lay.first_stage_layers > 0) | (lay.last_stage_layers > 0)
    return per_framework(lay, lambda fs, x: uneven & (not fs.uneven_split))


def cp_unsharded(lay: Layouts) -> BoolArray:
    return per_framework(lay, lambda fs, x: (x.cp > 1) & (x.zero < 2) & fs.cp_shards)


def block_recompute_unsupported(lay: Layouts, stack: Stack) -> BoolArray:
    """Full recompute of N layers per chunk where the framework cannot run it; torchtitan's releases
    before 0.3.0 could (`Stack.layer_sac`)."""
    return per_framework(
        lay,
        lambda fs, x: (
            (x.recompute == Recompute.FULL)
            & (x.recompute_layers > 0)
            & (not (fs.block_recompute or (stack.layer_sac and fs.framework == Framework.TORCHTITAN)))
        ),
    )


def even_split_needs_divisor(lay: Layouts, num_layers: int) -> BoolArray:
    """Megatron-LM asserts 'Number of layers should be divisible by the pipeline-model-parallel
    size' (and by PP x VPP with virtual stages) unless the first/last stage counts are given."""
    even = (lay.first_stage_layers == 0) & (lay.last_stage_layers == 0) & (lay.pp > 1)
    return per_framework(
        lay, lambda fs, x: even & fs.even_split_divides & (num_layers % (x.pp * x.virtual_stages) != 0)
    )


def ep_approximate(lay: Layouts) -> BoolArray:
    """Expert parallelism where the framework's is not what paraplan prices (`EXPERT_PARALLEL`)."""
    return per_framework(lay, lambda fs, x: (x.ep > 1) & (not fs.expert_parallel))


def ep_approximation(lay: Layout) -> str | None:
    """The warning for a layout whose expert parallelism is priced approximately (None: it is not)."""
    if not ep_approximate(Layouts.of([lay]))[0]:
        return None
    fs = FRAMEWORKS[lay.framework]
    return (
        f"EP {lay.ep} under {fs.title} {fs.version} is priced as Megatron-style expert parallelism over DP x CP; "
        f"{fs.title} borrows its expert-parallel ranks from FSDP and TP (the experts not tensor-parallel), "
        "so the prediction is approximate and no launch config is written for it"
    )


def moe_approximation(lay: Layout, is_moe: bool) -> str | None:
    """The warning for a mixture of experts under a framework whose MoE layer paraplan does not price
    (`MOE_LAYER`); None where it does."""
    if not is_moe or MOE_LAYER[lay.framework]:
        return None
    fs = FRAMEWORKS[lay.framework]
    return (
        f"the experts under {fs.title} {fs.version} are priced as Megatron-style dropless MoE layers; its training "
        f"script's are {DEEPSPEED_MOE_WORDS}, so the prediction is approximate and no launch config is written for it"
    )


def hybrid_unsupported(lay: Layouts) -> BoolArray:
    """Layouts whose framework cannot train a hybrid Mamba-2 model (`FrameworkSpec.hybrid`)."""
    return per_framework(lay, lambda fs, x: np.full(len(x), not fs.hybrid))


def unsupported_words(lay: Layout, num_layers: int, stack: Stack) -> str:
    """Why the layout's framework cannot run it, in one sentence (for the limit messages)."""
    fs = FRAMEWORKS[lay.framework]
    one = Layouts.of([lay])
    reasons = []
    if even_split_needs_divisor(one, num_layers)[0]:
        chunks = lay.pp * lay.virtual_stages
        reasons.append(f"an even split of {num_layers} layers over {chunks} pipeline chunks (give first/last stage "
                       "layer counts)")  # fmt: skip
    if zero_unsupported(one)[0]:
        reasons.append(f"ZeRO-{lay.zero} (it runs ZeRO {', '.join(map(str, sorted(fs.zero_stages)))})")
    if zero_with_pp(one)[0]:
        reasons.append(f"ZeRO-{lay.zero} with pipeline parallelism (at most ZeRO-{fs.zero_with_pp} with PP > 1)")
    if interleaved_unsupported(one)[0]:
        reasons.append("an interleaved schedule (virtual stages)")
    if cp_unsupported(one)[0]:
        reasons.append(f"context parallelism by {lay.cp_comm}" if fs.cp_comms else "context parallelism")
    if offload_unsupported(one)[0]:
        reasons.append(f"offload {lay.offload} with ZeRO-{lay.zero}")
    if uneven_unsupported(one)[0]:
        reasons.append("user-chosen first/last stage layer counts (its pipeline partitions the layers itself)")
    if cp_unsharded(one)[0]:
        reasons.append(f"context parallelism with ZeRO-{lay.zero} (its CP runs over the sharding mesh: ZeRO-2 or 3)")
    if block_recompute_unsupported(one, stack)[0]:
        reasons.append("block recompute (full recompute of N layers per chunk)")
    return f"{fs.title} {fs.version} cannot run " + "; ".join(reasons)


def a2a_overlap_breaks(lay: Layouts, is_moe: bool, modules: frozenset[str]) -> list[tuple[BoolArray, str]]:
    """What Megatron-LM's combined 1F1B (`Stack.moe_a2a_overlap`) needs of a layout, as (violated
    mask, reason) pairs: megatron/core/transformer/transformer_config.py `__post_init__` at d98e8a64
    asserts expert_model_parallel_size > 1, virtual_pipeline_model_parallel_size when
    pipeline_model_parallel_size > 1, recompute_granularity != 'full' (and no recompute method or
    layer count), "moe" not in recompute_modules (`modules`, read under selective recompute), bf16
    or fp16 (every paraplan precision is), and the alltoall or flex dispatcher (every
    `Stack.ep_dispatcher` is); megatron/core/pipeline_parallel/combined_1f1b.py asserts, for the
    interleaved schedule, that no model chunk is Megatron-FSDP-wrapped ("EP overlap 1F1B with FSDP is
    not supported for interleaved pipeline parallelism"): ZeRO-2/3 is Megatron-FSDP. Only
    Megatron-LM schedules it."""
    return [
        (np.asarray(lay.framework != Framework.MEGATRON), "only Megatron-LM runs it"),
        (np.asarray((lay.ep <= 1) | (not is_moe)), "it needs expert parallelism (EP > 1, an MoE model)"),
        (np.asarray((lay.pp > 1) & (lay.virtual_stages <= 1)), "with PP > 1 it needs virtual stages"),
        (np.asarray((lay.zero >= 2) & (lay.virtual_stages > 1)),
         "with Megatron-FSDP (ZeRO-2/3) it runs without virtual stages only"),
        (np.asarray(lay.recompute == Recompute.FULL), "it refuses full recompute"),
        (np.asarray((lay.recompute == Recompute.SELECTIVE) & ("moe" in modules)),
         "it refuses the moe recompute module"),
    ]  # fmt: skip


def a2a_overlap_reasons(lay: Layout, is_moe: bool, modules: frozenset[str]) -> list[str]:
    """The reasons `a2a_overlap_breaks` gives for one layout (none: Megatron-LM runs it)."""
    return [why for broken, why in a2a_overlap_breaks(Layouts.of([lay]), is_moe, modules) if broken[0]]


def a2a_overlap_unsupported(lay: Layouts, is_moe: bool, modules: frozenset[str]) -> BoolArray:
    """The layouts Megatron-LM refuses to run with `Stack.moe_a2a_overlap` (`a2a_overlap_breaks`)."""
    out = np.zeros(len(lay), dtype=bool)
    for broken, _ in a2a_overlap_breaks(lay, is_moe, modules):
        out |= broken
    return np.asarray(out)


# What `selective` recompute means in each framework's own words (FrameworkSpec.selective).
SELECTIVE_WORDS = {
    "core_attention": "core attention",
    "unfused_core_attention": "core attention, unless it is flash attention",
    "op": "its per-op policy",
}
# Where a setting a FrameworkSpec field of the same name allows (mtp, token_drop, cpu_checkpointing)
# can run: the flags of the framework that has it.
_RUNS_IT: dict[str, str] = {
    "mtp": "multi-token prediction is Megatron-LM's --mtp-num-layers",
    "token_drop": "token dropping with a capacity factor is Megatron-LM's --moe-expert-capacity-factor with "
                  "--moe-pad-expert-input-to-capacity",
    "cpu_checkpointing": "host checkpoints are DeepSpeed's activation_checkpointing.cpu_checkpointing",
}  # fmt: skip


def stack_unsupported(framework: Framework, stack: Stack) -> list[tuple[str, str]]:
    """The stack settings `framework` cannot run whatever the layout, as (setting, reason) pairs;
    none where it runs the whole stack (every framework runs its own defaults). The one place for
    these rules: the question refuses a stack with any (`question.stack_from`), the launch config
    refuses it as well (`launch.emitters`), and the what-would-fit advice offers no framework that
    has any. Each reason is one sentence that names the setting as the command line does, the
    framework's version and the flag that runs it elsewhere. What a framework needs of the layout
    with a setting stays a limit (`a2a_overlap_breaks`, the cpu_checkpointing limit).

    The settings that describe another release of the same framework (`Stack.kv_repeated`,
    `pp_outputs_kept`, `loss`, `compiled`, `tp_overlap` off, ...) are priced and are no rule here:
    the published runs of those releases are calibrated with them; only the pinned version's
    launch config cannot write them."""
    fs = FRAMEWORKS[framework]
    release = f"{fs.title} {fs.version}"
    out: list[tuple[str, str]] = []
    if stack.recompute_modules != DEFAULT_RECOMPUTE_MODULES and framework != Framework.MEGATRON:
        out.append(("recompute_modules", f"recompute-modules {','.join(module_list(stack.recompute_modules)) or '(none)'}: "
                    f"{release}'s selective recompute is its own ({SELECTIVE_WORDS[fs.selective]}); recompute "
                    "modules are Megatron-LM's --recompute-modules"))  # fmt: skip
    if stack.cuda_graph_scope and framework != Framework.MEGATRON:
        out.append(("cuda_graph_scope", f"cuda-graph-scope {','.join(module_list(stack.cuda_graph_scope, CUDA_GRAPH_SCOPES))}: "
                    f"{release} is priced without CUDA graphs (Megatron-LM's --cuda-graph-impl)"))  # fmt: skip
    if stack.ep_dispatcher not in fs.ep_dispatchers:
        out.append(("ep_dispatcher", f"ep-dispatcher {stack.ep_dispatcher!r}: {release} is priced with "
                    f"{' or '.join(sorted(fs.ep_dispatchers))} only (the flex dispatcher, DeepEP or HybridEP, is "
                    "Megatron-LM's --moe-token-dispatcher-type flex)"))  # fmt: skip
    if (stack.moe_a2a_overlap or stack.delay_wgrad) and framework != Framework.MEGATRON:
        out.append(("moe_a2a_overlap", f"moe-a2a-overlap / delay-wgrad: {release} has no combined 1F1B schedule "
                    "(Megatron-LM's --overlap-moe-expert-parallel-comm)"))  # fmt: skip
    if stack.moe_router_fusion and framework != Framework.MEGATRON:
        out.append(("moe_router_fusion", f"moe-router-fusion: {release} runs its own MoE router; the fused "
                    "Transformer Engine router is Megatron-LM's --moe-router-fusion"))  # fmt: skip
    if stack.layer_sac and framework != Framework.TORCHTITAN:
        out.append(("layer_sac", f"layer-sac: torchtitan's checkpointing of every Nth layer (selective_ac_option "
                    f"before 0.3.0), not a setting of {release}"))  # fmt: skip
    if stack.moe_aux_loss and framework != Framework.MEGATRON:
        out.append(("moe_aux_loss", f"moe-aux-loss: {release} runs its own MoE router and load balancing; the "
                    "setting is Megatron-LM's --moe-aux-loss-coeff"))  # fmt: skip
    for name in ("mtp", "token_drop", "cpu_checkpointing"):  # FrameworkSpec fields named as the settings
        if getattr(stack, name) and not getattr(fs, name):
            out.append((name, f"{name.replace('_', '-')}: {release} cannot run it ({_RUNS_IT[name]})"))
    if stack.tp_comm_overlap and framework != Framework.MEGATRON:
        out.append(("tp_comm_overlap", f"tp-comm-overlap: {release} has no Transformer Engine userbuffers overlap; "
                    "that is Megatron-LM's --tp-comm-overlap"))  # fmt: skip
    if stack.adam_moments == "bf16" and framework != Framework.MEGATRON:
        out.append(("adam_moments", f"adam-moments bf16: {release} keeps Adam's moments in fp32; bf16 moments are "
                    "Megatron-LM's --use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype bf16"))  # fmt: skip
    if stack.master_weights != "fp32" and framework != Framework.MEGATRON:
        out.append(("master_weights", f"master-weights {stack.master_weights}: {release} keeps an fp32 master copy; "
                    "16-bit remainders or no master copy are Apex's DistributedFusedAdam, which NeMo runs on "
                    "Megatron"))  # fmt: skip
    if stack.zero3_max_live_params != DEFAULT_ZERO3_MAX_LIVE_PARAMS and not ZERO3_LIVE_LIMIT[framework]:
        out.append(("zero3_max_live_params", f"zero3-max-live-params {stack.zero3_max_live_params:g}: {release} has no "
                    "live-parameter limit on its weight gathers; that is DeepSpeed's stage3_max_live_parameters"))  # fmt: skip
    if stack.triton_attention and not stack.flash_attention:
        out.append(("triton_attention", "triton-attention needs flash-attention: FlashAttention in Triton is a flash "
                    "attention kernel, and unfused attention runs none"))  # fmt: skip
    if stack.delay_wgrad and not stack.moe_a2a_overlap:
        # transformer_config.py at d98e8a64 asserts it
        out.append(("delay_wgrad", "delay-wgrad needs moe-a2a-overlap (Megatron-LM: 'overlap_moe_expert_parallel_comm "
                    "must be enabled when enabling delay_wgrad_compute')"))  # fmt: skip
    scope = stack.cuda_graph_scope
    # what transformer_config.py `__post_init__` at d98e8a64 asserts of the scopes themselves
    if "full_iteration" in scope and len(scope) > 1:
        out.append(("cuda_graph_scope", "cuda-graph-scope full_iteration with module scopes: Megatron-LM refuses it "
                    "('cuda_graph_modules must be empty when cuda_graph_impl=\"full_iteration\"')"))  # fmt: skip
    if {"moe", "moe_router"} <= scope:
        out.append(("cuda_graph_scope", "cuda-graph-scope moe with moe_router: Megatron-LM refuses it "
                    "('cuda_graph_modules must not contain both moe and moe_router')"))  # fmt: skip
    if "moe_preprocess" in scope and "moe_router" not in scope:
        out.append(("cuda_graph_scope", "cuda-graph-scope moe_preprocess needs moe_router (Megatron-LM: "
                    "'moe_preprocess cuda graph is only supported with moe_router cuda graph')"))  # fmt: skip
    if stack.ep_dispatcher == "deepep" and stack.token_drop and "deepep" in fs.ep_dispatchers and fs.token_drop:
        # megatron/core/transformer/transformer_config.py `__post_init__` at d98e8a64 raises it (the
        # HybridEP backend takes padding)
        out.append(("ep_dispatcher", f"ep-dispatcher 'deepep' with token-drop: {release} refuses it ('Flex token "
                    "dispatcher with deepep backend does not support moe_pad_expert_input_to_capacity'); use "
                    "hybridep or alltoall"))  # fmt: skip
    return out


def model_stack_unsupported(model: ModelSpec, stack: Stack, precision: Precision) -> list[tuple[str, str]]:
    """The stack settings `model` (at `precision`) cannot run, as (setting, reason) pairs, the same
    way as `stack_unsupported`: multi-token prediction needs the model's MTP modules, and what
    Megatron-LM d98e8a64 refuses of the selective recompute modules (transformer_config.py
    `__post_init__`): moe_act "only supported with moe_grouped_gemm" (experts, run as grouped
    GEMMs), mla_up_proj "only supported with multi_latent_attention", and under FP8 "Delayed
    scaling does not support moe_act and layernorm recompute"; and of the CUDA-graph scopes, the
    MoE ones only for MoE models, mlp only where dense layers exist, moe only with drop-padding."""
    out: list[tuple[str, str]] = []
    modules = stack.recompute_modules
    if "moe_act" in modules and not model.is_moe:
        out.append(("recompute_modules", f"recompute-modules moe_act: {model.name} has no experts (Megatron-LM: "
                    "'moe_act in recompute_modules is only supported with moe_grouped_gemm')"))  # fmt: skip
    if "mla_up_proj" in modules and not model.is_mla:
        out.append(("recompute_modules", f"recompute-modules mla_up_proj: {model.name} has no multi-head latent "
                    "attention (Megatron-LM: 'only supported with multi_latent_attention')"))  # fmt: skip
    delayed = modules & {"moe_act", "layernorm"}
    if delayed and precision == Precision.FP8 and stack.fp8_recipe == "delayed":
        out.append(("recompute_modules", f"recompute-modules {','.join(sorted(delayed))} with fp8-recipe delayed: "
                    "Megatron-LM 'Delayed scaling does not support moe_act and layernorm recompute for fp8' (give "
                    "--fp8-recipe tensorwise or mxfp8)"))  # fmt: skip
    if stack.mtp and not model.mtp_layers:
        out.append(("mtp", f"mtp: {model.name} has no multi-token-prediction modules (num_nextn_predict_layers)"))
    scope = stack.cuda_graph_scope
    if scope & {"moe", "moe_router", "moe_preprocess"} and not model.is_moe:
        out.append(("cuda_graph_scope", f"cuda-graph-scope {','.join(sorted(scope & {'moe', 'moe_router', 'moe_preprocess'}))}: "
                    f"{model.name} has no experts (Megatron-LM: 'moe cuda graph is only supported for MoE')"))  # fmt: skip
    if "mlp" in scope and model.dense_mlp_share == 0.0:
        out.append(("cuda_graph_scope", f"cuda-graph-scope mlp: every layer of {model.name} is an MoE layer (Megatron-LM: "
                    "'mlp cuda graph is only supported for dense layers')"))  # fmt: skip
    if "moe" in scope and model.is_moe and not stack.token_drop:
        out.append(("cuda_graph_scope", "cuda-graph-scope moe needs token-drop (Megatron-LM: 'moe cuda graph is only "
                    "supported with drop-padding MoE'; a dropless layer's graph is moe_router, moe_preprocess)"))  # fmt: skip
    return out

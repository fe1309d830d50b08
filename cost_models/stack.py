"""Settings of the training software stack that are not layout knobs.

Each framework (`frameworks.FRAMEWORKS`) brings its own defaults; a user may override any
field (`--no-flash-attention`, `--main-grads bf16`, ...), e.g. to describe an older release.

`flash_attention`: fused attention that never materialises the s x s score matrix (Dao et al.
2022); without it, the scores, softmax and dropout are stored (Korthikanti et al. 2022's
5*a*s/h term) and computed as batched GEMMs plus memory-bound softmax.
`dp_overlap`: data-parallel gradient reduction and weight gathers overlap the backward and
forward passes (Megatron-LM's --overlap-grad-reduce / --overlap-param-gather, since 2023;
DeepSpeed's overlap_comm; FSDP's prefetch). Megatron-LM of 2021-22 reduced gradients after
the whole backward pass ("local" DDP), so runs of that era set it off.
`main_grads`: the gradient buffer's precision: "fp32" (Megatron-LM's main grads; FSDP2's fp32
reduce dtype) or "bf16" (DeepSpeed's training-dtype gradients).
`tp_overlap`: the backward pass's tensor-parallel collectives run while the weight-gradient
GEMMs compute (Megatron-LM's asynchronous grad all-reduce / reduce-scatter in
`LinearWithGradAccumulationAndAsyncCommunication`, on by default).
`tp_comm_overlap`: every tensor-parallel collective of the attention and dense MLP linears runs
split into chunks beside its own GEMM, forward and backward: Transformer Engine's userbuffers
(`initialize_ub` in transformer_engine/pytorch/module/base.py; Megatron-LM's --tp-comm-overlap,
which needs sequence parallelism; NeMo's ub_tp_comm_overlap, Megatron-Bridge's
comm_overlap.tp_comm_overlap), off by default. Priced in `traffic.chunked_fwd_s`/`chunked_bwd_s`
(only what outlasts the GEMM chunks, the last pipelined chunk, and the split GEMMs' lost
efficiency, `traffic.split_gemm_extra_s`). torchtitan's async TP (torch's fused all-gather-matmul /
matmul-reduce-scatter, micro-pipelined the same way) is still written as `tp_overlap` there.
`p2p_overlap`: the interleaved schedule overlaps pipeline sends and receives with compute
(Megatron-LM's --overlap-p2p-communication, on by default with virtual stages).
`loss`: how the cross-entropy loss is computed, which sets what it holds at the memory peak
(`memory.loss_bytes_per_token`): "eager" (the whole logits, the framework's own loss in eager
mode: Megatron-LM's VocabParallelCrossEntropy, torchtitan's F.cross_entropy before 0.3.0),
"compiled" (the whole logits, torchtitan's loss under torch.compile: torchtitan compiles it with
training.compile from bbb1b616e, 2025-04-02, to 0.2.x) or "chunked" (torchtitan 0.3.0's default
ChunkedLossWrapper: the LM head and the loss run on 8 sequence chunks in turn).
`fp8_recipe`: how FP8 training scales and casts the linear layers' GEMM operands, which sets the
memory-bound cast work and which GEMMs run in FP8 (`compute.fp8_cast_bytes`): "delayed"
(Transformer Engine's DelayedScaling, Megatron-LM's --fp8-recipe default: the cast fused into the
producing kernel), torchao's "tensorwise", "rowwise" and "rowwise_with_gw_hp" (torchtitan's
float8 recipe_name; the last keeps the weight-gradient GEMM in BF16) or "mxfp8" (torchao's MX
recipe, 32-element blocks). Only read when the layout's precision is fp8.
`attention_saved`: torchtitan's op-level selective recompute keeps the attention output (its
save list names the SDPA op that runs). torchtitan from 3b85aa31f (2025-05-14, cuDNN attention
first on sm100) to b39377f9f (2025-12-01, "add all SDPA backends to op_sac_save_list") did not
save cuDNN attention, so on B200 the attention forward ran again in the backward.
`pp_outputs_kept`: the pipeline's last stage keeps every micro-batch's output, its bf16 logits,
until the step ends (`memory.kept_outputs_bytes`). PyTorch's `_PipelineStageBase.forward_one_chunk`
appends each output to `output_chunks` for `merge_output_chunks`, which `step()` returns; torchtitan
discarded that return value but could not stop the appends until torchtitan e5ef99aab (2025-10-22,
"Update PP to release memory earlier", train.py passes `return_outputs=False`, the API of
pytorch/pytorch#165822). The rows of December 2024 (torchtitan 9dec370, torch 1963fc8) kept them.
Before pytorch/pytorch#153383 (2025-05) the other stages kept their outputs too, a hidden-state
shard per micro-batch done; not priced: at a stage's peak no micro-batch is done when m <= PP.
The same torch (before #164329, 2025-10) kept the received inputs' gradients to the step's end:
the last stage holds those of its earlier micro-batches (`memory.stage_output_bytes`).
`kv_repeated`: K and V are repeated to every query head before attention (torchtitan 9dec370
torchtitan/models/llama/model.py `Attention.forward`: `keys = repeat_kv(xk, self.n_rep)` before
`F.scaled_dot_product_attention`), so the attention saves, and context parallelism all-gathers,
K/V of a heads, not g (`memory.cp_gathered_kv_bytes`, `traffic.cp_per_layer_s`). torchtitan passes
enable_gqa instead from ff0829c10 (2026-01-27, "GQA without kv repeats"). Megatron-DeepSpeed repeats
them too (megatron/model/transformer.py `ParallelAttention.repeat_kv` at 6acc370a): DeepSpeed's default.
`layer_sac`: torchtitan's "selective layer" activation checkpointing of its releases before
0.3.0: activation_checkpoint.mode "selective" with selective_ac_option N wraps every Nth
TransformerBlock in a full checkpoint (torchtitan/distributed/activation_checkpoint.py
`_apply_layer_sac` at v0.2.2 73a0e6979, `ac_freq = int(ac_config.selective_ac_option)`; the same
`use_layer_sac` branch in torchtitan/parallelisms/parallelize_llama.py in 2024). It is full
recompute of L/N of the layers (`Layout.recompute_layers`), which 0.3.0, the release paraplan's
torchtitan launch configs are for, cannot run: with the setting a torchtitan plan may use it.
`compiled`: the model's elementwise work runs fused, under torch.compile (torchtitan's
training.compile / compile.enable, which compiles every TransformerBlock) or in the framework's
own fused kernels (Megatron-LM's and DeepSpeed's). False: torchtitan's model runs in PyTorch
eager mode, one kernel per op, with the fp32 upcasts of its RMSNorm and rotary embedding
(`compute.eager_extra_bytes`). torchtitan 0.3.0's compile.enable defaults to false, but paraplan's
torchtitan stack compiles (its launch config sets --compile.enable): the fast way to run it, and
what the published torchtitan benchmarks mostly ran; a launch file read without it is eager.
`fused_norm`: with `compiled` false, torchtitan's norm is the Triton `FusedRMSNorm`
(norm_type "fused_rmsnorm", torchtitan/models/norms.py at 9dec370; the llama3_8b and llama2_13b
tomls of April 2024 set it), one kernel each way, instead of the eager `RMSNorm`.
`triton_attention`: the flash attention kernel is HazyResearch's FlashAttention in Triton
(flash_attn/flash_attn_triton.py, "*Experimental* implementation of FlashAttention in Triton", of
late 2022), as llm-foundry's MPT models ran it with attn_impl "triton" (the default of its
benchmarking script, scripts/train/benchmarking/submit_benchmarks.py at 5e85bd62), instead of the
fused attention the hardware's `efficiency.attention` describes (FlashAttention-2, cuDNN); its
throughput is `compute.TRITON_FLASH_THROUGHPUT` of that one's.
`cpu_checkpointing`: DeepSpeed's activation checkpointing keeps each checkpointed layer's input in
host memory instead of the GPU's (DeepSpeed JSON activation_checkpointing.cpu_checkpointing;
Megatron-DeepSpeed's --checkpoint-in-cpu, which overrides that key: megatron/initialize.py at
microsoft/Megatron-DeepSpeed f4157bea passes checkpoint_in_cpu=args.checkpoint_in_cpu, a store_true
flag, to deepspeed.checkpointing.configure, and configure sets CPU_CHECKPOINT whenever the argument
is not None). Only with full recompute, only DeepSpeed. deepspeed/runtime/activation_checkpointing/
checkpointing.py `CheckpointFunction` (v0.6.2 32d97976 and v0.19.5 cf443004 alike): the forward copies
the input with `copy_to_device(args, torch.device('cpu'), ...)` (`tensor.to('cpu')`: a blocking copy
into pageable memory, on the compute stream) and the backward brings it back with
`move_to_device(..., cuda_device, ...)` before the recompute: both wait in line
(`compute.cpu_checkpoint_s`). The GPU keeps none of the checkpoints (`memory.LayerActivations`); the
host holds them (`memory.cpu_checkpoint_bytes`).
`adam_moments`: the precision of Adam's two moments, "fp32" or "bf16" (Megatron-LM's
precision-aware optimizer: --use-precision-aware-optimizer --exp-avg-dtype bf16
--exp-avg-sq-dtype bf16, which megatron/core/optimizer/__init__.py at d98e8a64 passes to
Transformer Engine's FusedAdam and allows with the distributed optimizer only). bf16 moments
save 2 x 2 B per parameter of optimizer state (`moment_bytes_saved`) and as many bytes of the
Adam step's reads and writes; the fp32 master weights stay.
`master_weights`: what the optimizer keeps of the fp32 master weights beside the bf16 ones
(`master_bytes_saved`): "fp32" (a whole fp32 copy, 4 B: Megatron-LM's distributed optimizer,
DeepSpeed), "remainders" (only the 16 low bits of each fp32 master, 2 B, the bf16 weight being its
high bits) or "none" (the bf16 weights are the master; the optimizer updates them in place).
The last two are Apex's DistributedFusedAdam (apex/contrib/optimizers/distributed_fused_adam.py
at 810ffae3, the APEX_TAG of NeMo r2.0.0rc1's Dockerfile.ci), which NeMo's `distributed_fused_adam`
optimizer runs: its `StateBucket` holds `param_remainders_shard` (torch.int16) under
store_param_remainders, `params_shard` (the state dtype) under store_params, and
`exp_avg_shard`/`exp_avg_sq_shard` in the state dtype. NeMo r2.0.0rc1 (24.07)
`MegatronBaseModel.setup_optimization` sets store_param_remainders when the optimizer's dtype is
fp32 (its default) and the model bf16 (megatron_amp_O2), and stores no parameters when the two
dtypes are equal (optim.dtype bf16, with `adam_moments` bf16). Apex also reduce-scatters into a
separate gradient shard (`sync_grads_shard`, 1/DP of the gradient buffer) that lives from the last
micro-batch's backward to the next zero_grad, mostly after the activations' peak: not priced.
`nvls`: NCCL's NVLink SHARP (NVLS) is on, so every communicator over more than two GPUs of an
NVSwitch node that supports it holds NVLS buffers (`memory.nvls_buffer_bytes`, the hardware's
`nvls_bytes_per_rank`). NCCL turns NVLS on by default where the node supports it
(NCCL_NVLS_ENABLE); NVIDIA's training recipes turn it off to save that memory
(NVIDIA/NeMo-Framework-Launcher PR #127 "set NCCL_NVLS_ENABLE=0 for memory saving"; NeMo 2.0's
quick-start executor sets "NCCL_NVLS_ENABLE": "0"), which the default here follows; a launch
with NCCL's defaults (a bare torchrun) has it on.
`token_drop`: Megatron-LM's token-dropping MoE (--moe-expert-capacity-factor 1.0
--moe-pad-expert-input-to-capacity, as Megatron-Bridge's `apply_moe_token_drop`,
src/megatron/bridge/training/utils/moe_token_drop.py at fa0315ae2, sets them): every expert takes
at most capacity = tokens x top-k / experts rows and is padded up to it, so the expert GEMMs keep
static shapes and the alltoall dispatcher needs no device-to-host copy of the token counts
(Megatron-LM d98e8a64 megatron/core/transformer/moe/token_dispatcher.py, MoEAlltoAllTokenDispatcher
.preprocess: under drop_and_pad the per-expert counts are a torch.full of the capacity).
FLOPs: with capacity factor 1.0 and padding, each expert processes exactly its capacity, which is
the mean load, so the expert GEMM rows equal tokens x top-k whatever the routing (dropped tokens
are replaced by padding rows); paraplan's FLOP count, made under force-balanced routing, is that
count. Off (the default): dropless, the expert GEMMs take however many rows the router sends.
`ep_dispatcher`: how Megatron-LM moves MoE tokens to their experts: "alltoall" (--moe-token-dispatcher-type
alltoall: one NCCL all-to-all that sends every routed copy, top-k per token, to its expert's rank)
or the flex dispatcher (--moe-token-dispatcher-type flex) with the "deepep" or "hybridep" backend
(--moe-flex-dispatcher-backend; Megatron-LM d98e8a64 megatron/core/transformer/moe/fused_a2a.py).
Both backends forward hierarchically: a token crosses the network once per destination node, to
the GPU of the same local index there, which fans it out over NVLink to the experts' GPUs
(DeepEP README, "normal kernels ... asymmetric-domain bandwidth forwarding, such as forwarding
data from NVLink domain to RDMA domain"; DeepSeek-V3 report arXiv:2412.19437 Sec 3.2.2); the
combine reduces in the node first and goes back the same way. Megatron dispatches BF16 on both
(fused_a2a.py at d98e8a64: DeepEP gets the bf16 hidden states, HybridEP asserts `not fp8_dispatch`).
Priced in `traffic.ep_per_layer_s`.
`moe_gather_scatter`: the routed tokens are permuted as Megatron-Core core_v0.6.0's allgather token
dispatcher does it (--moe-token-dispatcher-type allgather, that release's default; megatron/core/
transformer/moe/token_dispatcher.py `MoEAllGatherTokenDispatcher` at core_v0.6.0, cac60ce4): torch.gather
of the gathered tokens by an index map expanded to the hidden width, a second torch.gather into expert
order, out-of-place `scatter` back and `scatter_add` into the gathered token rows, and the router
probabilities applied to the expert output after the experts (`unpermuted_local_hidden * scores`, which
autograd saves the expert output for). Priced in `compute.moe_permute_bytes` (more bytes than the
index_select / scatter_add path of later releases) and `memory.activation_bytes_per_token_layer` (the
saved expert output). core_v0.7.0 and core_v0.8.0 run custom moe_gather / moe_scatter Functions
instead, later releases moe_utils' permute / unpermute; the pinned Megatron-LM cannot run it. The host
dispatches (`compute.moe_layer_ops`) are counted as for the pinned dispatchers, and at EP > 1 the
tokens' exchange stays the alltoall dispatcher's (`traffic.ep_per_layer_s`), not that release's
all-gather over TP x EP.
`moe_a2a_overlap`: Megatron-LM's combined 1F1B (--overlap-moe-expert-parallel-comm; Megatron-Bridge's
comm_overlap.overlap_moe_expert_parallel_comm, which its perf scripts' moe_a2a_overlap sets together with
delay_wgrad_compute, scripts/performance/utils/overrides.py `_set_moe_a2a_overlap_overrides`): in the
steady state of the schedule one micro-batch's forward and another's backward run layer by layer side by
side, on a compute and a communication stream, so each MoE all-to-all hides under the other pass's
compute (Megatron-LM d98e8a64 megatron/core/models/common/model_chunk_schedule_plan.py
`TransformerLayerSchedulePlan.run`). Megatron only; EP > 1, virtual stages when PP > 1, no full
recompute (transformer_config.py `__post_init__`). Priced in `traffic.a2a_hidden_s`.
`delay_wgrad`: with `moe_a2a_overlap`, the expert MLP's weight-gradient GEMMs run after its
input-gradient ones, beside the backward dispatch (--delay-wgrad-compute, which Megatron allows only
with --overlap-moe-expert-parallel-comm).
`moe_router_fusion`: Megatron-LM's --moe-router-fusion (off by default, as Megatron-LM's
TransformerConfig has it): the router's top-k with its score function, the aux-loss scores and the
aux loss run as Transformer Engine's fused router Functions (transformer_engine/pytorch/router.py);
Megatron-Bridge's perf scripts turn it on for Qwen3, GPT-OSS and DeepSeek-V3
(scripts/performance/configs/*/..._llm_pretrain.py `cfg.model.moe_router_fusion = True`). Priced
in the host dispatches of a dropless MoE layer (`compute.moe_layer_ops`). Megatron only.
`moe_aux_loss`: the router computes a load-balancing loss (GShard/Switch "aux_loss", DeepSeek's per-sequence
"seq_aux_loss" or "global_aux_loss"). Megatron-LM d98e8a64 runs one exactly when a type listed in
--moe-router-load-balancing-type has a positive --moe-aux-loss-coeff (megatron/core/transformer/moe/
router.py `TopKRouter.is_aux_loss_enabled`, checked in `routing`); the coefficient defaults to 0.0
(megatron/training/arguments.py), so by default there is none, as paraplan assumes. Megatron-Bridge's
model providers turn it on for Qwen3 ("aux_loss", 1e-3: models/qwen/qwen3_moe_bridge.py), DeepSeek-V3 and
Moonlight ("seq_aux_loss", the config's aux_loss_alpha: models/deepseek/deepseek_v3_bridge.py) and
Nemotron-3-Nano ("seq_aux_loss", 1e-4: recipes/nemotronh/nemotron_3_nano.py), and leave it off for
GPT-OSS ("none": models/gpt_oss/gpt_oss_bridge.py), all at v0.4.2. Priced in the router's host
dispatches (`compute.ROUTER_AUX_E`). Megatron only.
`mtp`: the model's multi-token-prediction modules (`ModelSpec.mtp_layers`, DeepSeek-V3's
`num_nextn_predict_layers`) are trained: Megatron-LM's --mtp-num-layers D (Megatron-Bridge's
DeepSeek-V3 recipes keep the config's D = 1: recipes/deepseek/deepseek_v3.py at v0.4.2
`cfg.model.mtp_num_layers = 1`). Megatron-LM d98e8a64 places them on the last pipeline stage
(multi_token_prediction.py `mtp_on_this_rank`: without a custom layout "all of MTP layers on the
last pipeline stage"; Megatron-Bridge's DeepSeek-V3 layouts end in [decoder, "mtp", "loss"]), with
a copy of the word embedding there (gpt_model.py builds `self.embedding` when
`pre_process or mtp_process`). Each module adds, per token, its eh_proj, one transformer layer like
the decoder's last and a second pass through the output head and the loss (`ModelSpec.mtp_params`);
Megatron-LM's own FLOP count adds the same (training.py num_floating_point_operations:
`mtp_num_layers` more layers of the last layer's kind, eh_proj and `(mtp_num_layers + 1)` logits).
`recompute_modules`: what Megatron-LM's selective recompute (--recompute-granularity selective
--recompute-modules ...) checkpoints, read only where the layout's recompute is selective. Megatron-LM
d98e8a64 megatron/core/transformer/transformer_config.py `recompute_modules` (default ["core_attn"];
an empty list recomputes nothing). Each module below is one of `RECOMPUTE_MODULES`, with where its
checkpoint wraps code at d98e8a64; what its recompute costs is priced in `compute.
selective_recompute_fwd_s` (its forward again in the backward) and what it saves in
`memory.selective_dropped_bytes` (its saved activations dropped, its input kept):
  core_attn       attention.py `_checkpointed_attention_forward` (`checkpoint_core_attention`): the
                  attention core (QK^T, softmax, PV) under tensor_parallel.checkpoint.
  layernorm       transformer_layer.py `recompute_input_layernorm` / `recompute_pre_mlp_layernorm`:
                  output-discarding checkpoints (CheckpointWithoutOutput) of the input and pre-MLP
                  norms, only where the norm is a module of its own (not IdentityOp): with the
                  Transformer Engine spec (models/gpt/gpt_layer_specs.py) the input norm of MLA
                  layers and the pre-MLP norm of MoE layers; the others are fused into the next
                  linear (TELayerNormColumnParallelLinear), which keeps its output.
  mla_up_proj     multi_latent_attention.py `qkv_up_proj_and_rope_apply` under CheckpointWithoutOutput:
                  the Q projection (q_up_proj, or q_proj without q-LoRA), the KV up-projection and
                  RoPE; Q, K and V are discarded after the core attention's forward.
  mlp             transformer_layer.py `recompute_mlp` (dense layers only, `not self.is_moe_layer`):
                  the dense MLP under tensor_parallel.checkpoint from the pre-MLP norm's output.
  moe             moe/moe_layer.py `moe_layer_recompute`: the whole MoE layer (router, dispatch,
                  experts, combine, shared experts) under tensor_parallel.checkpoint.
  moe_act         moe/experts.py `activation_recompute`: the routed experts' activation (and the
                  probability scaling) under CheckpointWithoutOutput; the second expert GEMM's input
                  is discarded after it runs.
  shared_experts  moe/moe_layer.py `shared_experts_compute`: the shared experts under
                  tensor_parallel.checkpoint.
Megatron-LM also accepts gdn_norm_out, gdp_in_proj, gdp_qkv and mhc (GatedDeltaNet/Product and
HyperConnection layers), which paraplan's decoders do not have: refused.
`cuda_graph_scope`: what Megatron-LM replays as CUDA graphs, as Megatron-Bridge's recipes name it
(`cuda_graph_scope`, scripts/performance/utils/overrides.py `_set_cuda_graph_overrides` at v0.5.0):
"full_iteration" is Megatron-LM's --cuda-graph-impl full_iteration (the whole forward-backward
step one graph; Megatron-Bridge pairs it with HybridEP's capacity-bound expert buffers,
`moe_expert_rank_capacity_factor` 1.5, scripts/performance/configs/qwen/qwen3_llm_pretrain.py at
v0.5.0: with it Megatron-LM d98e8a64's token_dispatcher.py `_HybridEPManager.setup_metadata` sizes
the permuted tokens by a static budget, without it HybridEP "sizes buffers dynamically (CPU sync in
dispatch)", so nothing reads token counts on the host); the others are --cuda-graph-impl
transformer_engine --cuda-graph-modules ... (megatron/core/transformer/enums.py `CudaGraphModule` at
d98e8a64: attn, mlp (dense layers), moe (drop-and-pad MoE layers), moe_router, moe_preprocess (needs
moe_router), mamba), each layer's scope captured by Transformer Engine's make_graphed_callables.
Empty (the default): no graphs. Only the MoE host floor reads it (`compute.moe_layer_ops`: the
dispatches inside a graph cost one replay); Megatron-LM only (`frameworks.stack_unsupported`).
`zero3_max_live_params`: DeepSpeed ZeRO-3's stage3_max_live_parameters, the count of gathered
(whole, per GPU) parameters above which its coordinator prefetches nothing: `fetch_sub_module` in
deepspeed/runtime/zero/partitioned_param_coordinator.py (v0.6.2 32d97976 and v0.19.5 cf443004 alike)
prefetches at most `min(max_n_available - n_available, prefetch_bucket)` elements after gathering the
current module's. Default DeepSpeed's 1e9 (zero/config.py `max_live_parameters`); Megatron-DeepSpeed's
Azure recipes set 3e9. Only DeepSpeed at ZeRO-3 reads it (`frameworks.stack_unsupported` refuses a
changed value elsewhere); priced in `traffic.live_blocked_numel`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Literal, cast, get_args

MainGrads = Literal["fp32", "bf16"]
MAIN_GRADS: tuple[MainGrads, ...] = get_args(MainGrads)
LossMode = Literal["eager", "compiled", "chunked"]
LOSS_MODES: tuple[LossMode, ...] = get_args(LossMode)
Fp8Recipe = Literal["delayed", "tensorwise", "rowwise", "rowwise_with_gw_hp", "mxfp8"]
FP8_RECIPES: tuple[Fp8Recipe, ...] = get_args(Fp8Recipe)
AdamMoments = Literal["fp32", "bf16"]
ADAM_MOMENTS: tuple[AdamMoments, ...] = get_args(AdamMoments)
MasterWeights = Literal["fp32", "remainders", "none"]
MASTER_WEIGHTS: tuple[MasterWeights, ...] = get_args(MasterWeights)
EpDispatcher = Literal["alltoall", "deepep", "hybridep"]
EP_DISPATCHERS: tuple[EpDispatcher, ...] = get_args(EpDispatcher)
RecomputeModule = Literal["core_attn", "moe_act", "layernorm", "mla_up_proj", "mlp", "moe", "shared_experts"]
RECOMPUTE_MODULES: tuple[RecomputeModule, ...] = get_args(RecomputeModule)  # Megatron-LM's order
DEFAULT_RECOMPUTE_MODULES: frozenset[RecomputeModule] = frozenset({"core_attn"})
CudaGraphScope = Literal["full_iteration", "attn", "mlp", "moe", "moe_router", "moe_preprocess", "mamba"]
CUDA_GRAPH_SCOPES: tuple[CudaGraphScope, ...] = get_args(CudaGraphScope)  # Megatron-Bridge's order
DEFAULT_ZERO3_MAX_LIVE_PARAMS = 1e9  # DeepSpeed's stage3_max_live_parameters default (zero/config.py)


@dataclass(frozen=True)
class Stack:
    flash_attention: bool = field(default=True, metadata={"help": "Fused (flash) attention: no s x s scores."})
    dp_overlap: bool = field(
        default=True, metadata={"help": "Overlap data-parallel reduction and gathers with compute."}
    )
    main_grads: MainGrads = field(default="fp32", metadata={"help": "Gradient buffer precision: fp32 or bf16."})
    tp_overlap: bool = field(
        default=True, metadata={"help": "Hide backward tensor-parallel collectives under weight-gradient GEMMs."}
    )
    tp_comm_overlap: bool = field(
        default=False,
        metadata={
            "help": "TP collectives split into chunks beside their GEMMs (TE userbuffers, Megatron-LM, with SP)."
        },
    )
    p2p_overlap: bool = field(
        default=True, metadata={"help": "Overlap pipeline sends/receives with compute in the interleaved schedule."}
    )
    loss: LossMode = field(
        default="eager", metadata={"help": "Cross-entropy loss: eager, compiled (torch.compile) or chunked (8 chunks)."}
    )
    fp8_recipe: Fp8Recipe = field(
        default="delayed",
        metadata={
            "help": "FP8 scaling recipe: delayed (TE), tensorwise, rowwise, rowwise_with_gw_hp or mxfp8 (torchao)."
        },
    )
    attention_saved: bool = field(
        default=True, metadata={"help": "Op-level selective recompute saves the attention output (torchtitan)."}
    )
    pp_outputs_kept: bool = field(
        default=False,
        metadata={"help": "The last pipeline stage keeps every micro-batch's logits to the step's end (old torch)."},
    )
    kv_repeated: bool = field(
        default=False,
        metadata={
            "help": "K/V repeated to every query head before attention (torchtitan of 2024, Megatron-DeepSpeed)."
        },
    )
    layer_sac: bool = field(
        default=False,
        metadata={"help": "torchtitan before 0.3.0: full checkpoints of every Nth block (selective_ac_option N)."},
    )
    compiled: bool = field(
        default=True,
        metadata={"help": "Elementwise ops run fused (torch.compile, fused kernels); off: torchtitan eager."},
    )
    fused_norm: bool = field(
        default=False,
        metadata={"help": "In eager torchtitan, the norm is the Triton fused_rmsnorm (norm_type, 2024)."},
    )
    triton_attention: bool = field(
        default=False,
        metadata={"help": "Flash attention is FlashAttention in Triton (2022; llm-foundry's attn_impl triton)."},
    )

    adam_moments: AdamMoments = field(
        default="fp32",
        metadata={"help": "Adam moments' precision: fp32 or bf16 (Megatron's precision-aware optimizer)."},
    )
    master_weights: MasterWeights = field(
        default="fp32",
        metadata={"help": "Master weights beside the bf16 ones: fp32, remainders (16 bits) or none (Apex, NeMo)."},
    )
    nvls: bool = field(
        default=False,
        metadata={"help": "NCCL's NVLink SHARP is on (NCCL's default): its buffers take GPU memory."},
    )
    token_drop: bool = field(
        default=False,
        metadata={"help": "MoE experts take at most capacity factor 1.0 of tokens, padded to it (Megatron)."},
    )
    ep_dispatcher: EpDispatcher = field(
        default="alltoall",
        metadata={"help": "MoE token dispatch: alltoall, or Megatron's flex dispatcher on deepep or hybridep."},
    )

    moe_gather_scatter: bool = field(
        default=False,
        metadata={"help": "MoE tokens permuted by gather/scatter, probs after the experts (Megatron-Core 0.6.0)."},
    )
    moe_a2a_overlap: bool = field(
        default=False,
        metadata={"help": "MoE all-to-all hidden under another micro-batch's compute (Megatron's combined 1F1B)."},
    )
    delay_wgrad: bool = field(
        default=False,
        metadata={"help": "With moe-a2a-overlap, expert weight gradients run beside the backward dispatch."},
    )
    moe_router_fusion: bool = field(
        default=False,
        metadata={"help": "MoE router top-k and aux loss as Transformer Engine's fused kernels (Megatron)."},
    )
    moe_aux_loss: bool = field(
        default=False,
        metadata={"help": "The MoE router computes a load-balancing (aux) loss (Megatron's --moe-aux-loss-coeff > 0)."},
    )
    mtp: bool = field(
        default=False,
        metadata={
            "help": "Train the model's multi-token-prediction modules on the last stage (Megatron, DeepSeek-V3)."
        },
    )
    cpu_checkpointing: bool = field(
        default=False,
        metadata={"help": "Full recompute keeps each layer's checkpoint in host memory (DeepSpeed cpu_checkpointing)."},
    )
    recompute_modules: frozenset[RecomputeModule] = field(
        default=DEFAULT_RECOMPUTE_MODULES,
        metadata={
            "help": "Megatron's selective recompute modules, comma-separated: "
            + ", ".join(RECOMPUTE_MODULES)
            + " (core_attn by default)."
        },
    )
    cuda_graph_scope: frozenset[CudaGraphScope] = field(
        default=frozenset(),
        metadata={
            "help": "What Megatron replays as CUDA graphs, comma-separated: "
            + ", ".join(CUDA_GRAPH_SCOPES)
            + " (none by default)."
        },
    )

    zero3_max_live_params: float = field(
        default=DEFAULT_ZERO3_MAX_LIVE_PARAMS,
        metadata={"help": "DeepSpeed ZeRO-3's stage3_max_live_parameters: no prefetch past this many gathered."},
    )

    def __post_init__(self) -> None:
        # a list or a comma-separated string given for a word-set setting becomes the set (ValueError if unknown)
        for name, parse in STACK_SET_PARSERS.items():
            object.__setattr__(self, name, parse(getattr(self, name)))
        object.__setattr__(self, "zero3_max_live_params", parse_count(self.zero3_max_live_params))

    def settings(self) -> dict[str, bool | str | float | list[str]]:
        """Every setting by name, as the JSON reports them (module sets as lists, Megatron's order)."""
        return {f.name: module_list(v, STACK_SETS[f.name]) if isinstance(v, frozenset) else v for f in fields(self)
                for v in (getattr(self, f.name),)}  # fmt: skip

    @property
    def grad_bytes(self) -> int:
        return 4 if self.main_grads == "fp32" else 2

    @property
    def moment_bytes_saved(self) -> int:
        """Bytes per parameter the optimizer state saves against fp32 moments (two of 4 B)."""
        return 2 * (4 - 2) if self.adam_moments == "bf16" else 0

    @property
    def master_bytes_saved(self) -> int:
        """Bytes per parameter the optimizer state saves against an fp32 master copy (4 B): its
        16-bit remainders keep 2, none keeps 0."""
        return {"fp32": 0, "remainders": 4 - 2, "none": 4}[self.master_weights]

    @property
    def hierarchical_ep(self) -> bool:
        """The flex dispatcher: a token crosses the network once per destination node."""
        return self.ep_dispatcher != "alltoall"

    def with_overrides(self, **given: object) -> Stack:
        """This stack with the given fields replaced (None keeps this stack's value)."""
        changes = {k: v for k, v in given.items() if v is not None}
        unknown = set(changes) - {f.name for f in fields(self)}
        if unknown:
            raise ValueError(f"unknown stack setting(s) {', '.join(sorted(unknown))}")
        values = {f.name: changes.get(f.name, getattr(self, f.name)) for f in fields(self)}
        return Stack(**values)  # type: ignore[arg-type]


STACK_FIELDS: tuple[str, ...] = tuple(f.name for f in fields(Stack))
# the stack settings that take one of a few words (the others are true/false)
STACK_CHOICES: dict[str, tuple[str, ...]] = {
    "main_grads": MAIN_GRADS,
    "loss": LOSS_MODES,
    "fp8_recipe": FP8_RECIPES,
    "adam_moments": ADAM_MOMENTS,
    "master_weights": MASTER_WEIGHTS,
    "ep_dispatcher": EP_DISPATCHERS,
}
# the stack settings that take a set of words (a list in JSON, comma-separated on the command line)
STACK_SETS: dict[str, tuple[str, ...]] = {"recompute_modules": RECOMPUTE_MODULES, "cuda_graph_scope": CUDA_GRAPH_SCOPES}
# the stack settings that take a positive count (a number in JSON and on the command line)
STACK_NUMBERS: tuple[str, ...] = ("zero3_max_live_params",)


def module_list(modules: frozenset[str], order: tuple[str, ...] = RECOMPUTE_MODULES) -> list[str]:
    """A module set in its vocabulary's order (RECOMPUTE_MODULES by default), as JSON and launch
    flags write it."""
    return [m for m in order if m in modules]


def _parse_words(value: object, vocabulary: tuple[str, ...], what: str, why: str = "") -> frozenset[str]:
    """A set of `vocabulary`'s words from a list, a set or a comma/space-separated string, in the
    vocabulary's terms; ValueError naming the unknown ones (`why` says whose words they are)."""
    if isinstance(value, str):
        items: list[object] = [v for v in value.replace(",", " ").split() if v]
    elif isinstance(value, list | tuple | set | frozenset):
        items = list(value)
    else:
        raise ValueError(f"must be a list of {what} names, not {value!r}")
    unknown = [str(v) for v in items if v not in vocabulary]
    if unknown:
        raise ValueError(f"{', '.join(unknown)} not among {', '.join(vocabulary)}{why}")
    return frozenset(m for m in vocabulary if m in items)


def parse_modules(value: object) -> frozenset[RecomputeModule]:
    """A recompute module set (`Stack.recompute_modules`); an empty one is Megatron's empty list
    (selective recompute of nothing)."""
    why = (" (Megatron-LM's, as paraplan prices them; gdn_norm_out, gdp_in_proj, gdp_qkv and mhc belong to "
           "layers it does not model)")  # fmt: skip
    return cast(frozenset[RecomputeModule], _parse_words(value, RECOMPUTE_MODULES, "module", why))


def parse_scopes(value: object) -> frozenset[CudaGraphScope]:
    """A CUDA-graph scope set (`Stack.cuda_graph_scope`)."""
    return cast(frozenset[CudaGraphScope], _parse_words(value, CUDA_GRAPH_SCOPES, "scope"))


STACK_SET_PARSERS = {"recompute_modules": parse_modules, "cuda_graph_scope": parse_scopes}


def parse_count(value: object) -> float:
    """A positive, finite count from a number or its text ("3e9"); ValueError otherwise. A bool
    is no count (JSON's true is not 1 parameter)."""
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"must be a positive number, not {value!r}")
    try:
        count = float(value)
    except (ValueError, OverflowError):  # OverflowError: an integer beyond float's range
        raise ValueError(f"must be a positive number, not {value!r}") from None
    if not math.isfinite(count) or count <= 0:
        raise ValueError(f"must be a positive number, not {value!r}")
    return count


BF16_BYTES = 2  # bf16/fp16 weights and activations
FP32_BYTES = 4

"""Memory of the most loaded GPU against published tables and hand counts: Korthikanti et al.
2022's activations for a GPT, the ZeRO paper's model states as each framework stores them,
offload, and the micro-batches in flight under 1F1B and Megatron's interleaved schedule."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import gpt_spec, one

from paraplan.cost_models.candidates import Layouts
from paraplan.cost_models.evaluate import evaluate
from paraplan.cost_models.frameworks import default_stack
from paraplan.cost_models.layout import Framework, Layout, Recompute
from paraplan.cost_models.memory import (
    MEMORY_TERMS,
    MemoryBreakdown,
    activation_bytes,
    activation_bytes_per_token_layer,
    cp_backward_buffer_bytes,
    cp_gathered_kv_bytes,
    in_flight_micro_batches,
    kept_outputs_bytes,
    peak_memory,
    recv_buffer_bytes,
    stage_output_bytes,
    stage_params,
    userbuffers_bytes,
)
from paraplan.cost_models.models import ModelSpec, load_hf_config, load_model
from paraplan.cost_models.stack import Stack
from paraplan.hardware_specs.loader import load_cluster
from paraplan.hardware_specs.schema import Cluster, Host

NO_FLASH = Stack(flash_attention=False)
FLASH = Stack()

# Llama 2 7B (Touvron et al. 2023; the HF checkpoint): N = 6,738,415,616 parameters; a layer is
# attention 4 * 4096^2 = 67,108,864 + MLP 3 * 4096 * 11008 = 135,266,304 + 2 norms 8,192.
LLAMA2_7B_N = 6_738_415_616
LLAMA2_7B_LAYER = 202_383_360
# ZeRO-3 keeps two gathered bf16 layers (the one computed and the next, prefetched): 2 * 2 B * layer
GATHERED = 4 * LLAMA2_7B_LAYER  # 809,533,440
# torchtitan's FSDP2 also keeps the bf16 LM head gathered (frameworks.HEAD_GATHERED): the output
# projection V h = 32,000 x 4,096 = 131,072,000 and the final norm 4,096, 2 B each
TITAN_HEAD = 2 * (32_000 * 4096 + 4096)  # 262,152,192
# Llama 2 70B: 68,976,648,192 parameters
LLAMA2_70B_N = 68_976_648_192


def _f(x: object) -> float:
    return float(np.asarray(x).reshape(-1)[0])


def _peak(model: ModelSpec, lay: Layouts, stack: Stack = FLASH) -> MemoryBreakdown:
    return peak_memory(model, lay, stack, 0.0)


# ------------------------------------------------------------------ Llama 2 70B on one GPU


def test_llama2_70b_on_one_gpu(models: dict[str, ModelSpec]) -> None:
    # TP1/PP1/DP1, micro-batch 8 (one micro-batch per step), s 4096, no recompute, ZeRO-0, flash.
    # Model states (Megatron: bf16 weights, fp32 main grads, Adam's fp32 master + m + v):
    #   2 N, 4 N, 12 N bytes.
    # Activations per token and layer (no dropout, TP1; the module's table):
    #   2 norm inputs + QKV and MLP inputs 8h = 65,536; Q and attention output 4 a d = 32,768;
    #   K and V 2 g d + 2 g d = 4,096; gated MLP 6f = 172,032                  => 274,432 B
    #   x 4096 * 8 tokens x 80 layers = 719,407,022,080
    #   + the loss, bf16 logits 2 + one fp32 copy 4 that Megatron's VocabParallelCrossEntropy
    #     turns in place into the softmax: 6 V T = 6 * 32000 * 32,768 = 6,291,456,000
    #   + the LM head's saved input, 2h T = 2 * 8192 * 32,768 = 536,870,912
    #   => 726,235,348,992
    mem = _peak(models["llama2-70b"], one(micro_batch=8, global_batch=8, seq_len=4096))
    assert _f(mem.params) == 2 * LLAMA2_70B_N
    assert _f(mem.grads) == 4 * LLAMA2_70B_N
    assert _f(mem.optimizer) == 12 * LLAMA2_70B_N
    assert _f(mem.activations) == 726_235_348_992


def test_reserve_is_the_other_term(models: dict[str, ModelSpec]) -> None:
    mem = peak_memory(models["llama2-7b"], one(), FLASH, 2.5e9)
    assert _f(mem.other) == 2.5e9
    assert _f(mem.total) == sum(_f(getattr(mem, t)) for t in MEMORY_TERMS)


def test_userbuffers_by_hand(models: dict[str, ModelSpec]) -> None:
    # Transformer Engine's 12 userbuffers communicators, each a [s b / CP, h] buffer: Llama 2 70B
    # (h 8192), seq 4096, micro-batch 1, TP8 with SP. BF16: 12 x 4096 x 8192 x 2 = 805,306,368 B;
    # FP8: the 8 all-gather buffers hold 1 B, the 4 reduce-scatter ones 2: 16 x 4096 x 8192.
    model, ub = models["llama2-70b"], Stack(tp_comm_overlap=True)
    knobs: dict[str, Any] = {"tp": 8, "micro_batch": 1, "seq_len": 4096, "sequence_parallel": True}
    assert _f(userbuffers_bytes(model, one(**knobs), ub)) == 805_306_368
    assert _f(userbuffers_bytes(model, one(precision="fp8", **knobs), ub)) == 536_870_912
    # CP 2 halves the shape's rows; none without the setting, without SP, or outside Megatron
    assert _f(userbuffers_bytes(model, one(cp=2, **knobs), ub)) == 805_306_368 / 2
    assert _f(userbuffers_bytes(model, one(**knobs), Stack())) == 0.0
    assert _f(userbuffers_bytes(model, one(**{**knobs, "sequence_parallel": False}), ub)) == 0.0
    assert _f(userbuffers_bytes(model, one(framework="torchtitan", zero=3, **knobs), ub)) == 0.0


# ------------------------------------------------------------------ Korthikanti et al. 2022, GPT

S, B, H, A = 2048, 2, 1024, 16  # a s / h = 32; s b h = 4,194,304
SBH = S * B * H


def _gpt_layer(stack: Stack = NO_FLASH, **knobs: object) -> float:
    """Activation bytes of one GPT layer for one micro-batch of s*b tokens."""
    lay = one(micro_batch=B, seq_len=S, **knobs)
    return _f(activation_bytes_per_token_layer(gpt_spec(h=H, heads=A, seq=S), lay, stack)) * S * B


@pytest.mark.parametrize(
    ("knobs", "per_sbh"),
    [
        # Table 2 / eq. 1, no parallelism: 34 + 5 a s / h = 34 + 160 = 194
        ({}, 194.0),
        # eq. 2, tensor parallel t without sequence parallelism: 10 + 24/t + 5as/(ht)
        ({"tp": 2}, 10 + 12 + 80),
        ({"tp": 4}, 10 + 6 + 40),
        ({"tp": 8}, 10 + 3 + 20),
        # eq. 4, tensor + sequence parallel: (34 + 5as/h) / t
        ({"tp": 2, "sequence_parallel": True}, 194 / 2),
        ({"tp": 8, "sequence_parallel": True}, 194 / 8),
        # Sec 4.2, selective recompute drops the 5as/h score terms: 34, and 34/t with SP
        ({"recompute": "selective"}, 34.0),
        ({"recompute": "selective", "tp": 4, "sequence_parallel": True}, 34 / 4),
        # Sec 4.3 (full recompute): only each layer's input, 2 sbh, split over t with SP only
        ({"recompute": "full"}, 2.0),
        ({"recompute": "full", "tp": 4}, 2.0),
        ({"recompute": "full", "tp": 4, "sequence_parallel": True}, 2 / 4),
    ],
)
def test_korthikanti_activations_per_layer(knobs: dict[str, Any], per_sbh: float) -> None:
    assert _gpt_layer(**knobs) == pytest.approx(per_sbh * SBH, rel=1e-12)


def test_flash_attention_never_stores_the_scores() -> None:
    # With flash attention the s x s scores never exist: 34 sbh without any recompute
    assert _gpt_layer(FLASH) == pytest.approx(34 * SBH, rel=1e-12)


def test_full_recompute_stage_by_hand() -> None:
    # One stage, TP4 + SP, 4 layers, V 50,000, one micro-batch of b 2, s 2048, no flash:
    #   stored layer inputs          4 * 2 sbh / 4                    = 2 sbh
    #   one layer recomputed at once (34 + 5as/h) sbh / 4, less its input
    #   2 sbh / 4 that is already stored                              = 48 sbh
    #   embedding dropout mask       sbh / 4 (1 byte per element)     = 0.25 sbh
    #   the loss (bf16 logits, one fp32 copy made the softmax in place) 6 V s b / 4 = 307,200,000
    #   the LM head's input, saved as its sequence shard (Megatron) 2 sbh / 4     = 0.5 sbh
    # => 50.75 * 4,194,304 + 307,200,000 = 520,060,928
    model = gpt_spec(h=H, layers=4, heads=A, vocab=50_000, seq=S)
    lay = one(tp=4, micro_batch=B, global_batch=B, seq_len=S, recompute="full", sequence_parallel=True)
    assert _f(_peak(model, lay, NO_FLASH).activations) == 520_060_928


def test_loss_peak_per_framework() -> None:
    # One GPU, one sequence of 2048 tokens, V 50,000, no recompute: only the loss differs.
    # Megatron-LM: bf16 logits 2 B + one fp32 copy 4 B (made the softmax in place) = 6 B a logit.
    # torchtitan's eager F.cross_entropy(logits.float()) in the backward: the saved fp32
    # log-softmax, NLL's fp32 gradient and log-softmax's fp32 input gradient = 12 B a logit.
    # Difference: (12 - 6) x 50,000 x 2,048 = 614,400,000 bytes.
    model = gpt_spec(h=1024, layers=2, vocab=50_000, seq=2048)
    knobs: dict[str, Any] = {"seq_len": 2048, "global_batch": 1, "micro_batch": 1, "recompute": "none"}
    megatron = _f(_peak(model, one(**knobs)).activations)
    titan = _f(_peak(model, one(framework="torchtitan", zero=0, **knobs)).activations)
    assert titan - megatron == 614_400_000


def test_torchtitan_loss_parallel_with_tp() -> None:
    # TP2 (no SP), one sequence of 2048 tokens, V 50,000, no recompute, the whole ("eager") loss.
    # torch's loss_parallel backward (`_nll_loss_and_log_softmax_backward`) holds the saved fp32
    # log-softmax, `zeros_like` of it, their sum with exp and the product with the gradient: four
    # fp32 tensors of the vocabulary shard, 16 B a logit; Megatron's VocabParallelCrossEntropy 6 B.
    # Difference: (16 - 6) x 25,000 x 2,048 = 512,000,000 bytes; at TP1 (aten's 12 B) 614,400,000.
    model = gpt_spec(h=1024, layers=2, vocab=50_000, seq=2048)
    knobs: dict[str, Any] = {"seq_len": 2048, "global_batch": 1, "micro_batch": 1, "recompute": "none"}
    eager = Stack(loss="eager")
    for tp, difference in ((2, 512_000_000), (1, 614_400_000)):
        megatron = _f(_peak(model, one(tp=tp, **knobs), eager).activations)
        titan = _f(_peak(model, one(tp=tp, framework="torchtitan", zero=0, **knobs), eager).activations)
        assert titan - megatron == difference


def test_head_input_saved_whole_or_as_the_sequence_shard() -> None:
    # TP2 + SP, one sequence of 2048 tokens, h 1,024, no recompute, eager loss. The LM head's saved
    # input: Megatron keeps its sequence shard, 2 x 1,024 / 2 x 2,048 = 2,097,152; torchtitan's
    # ColwiseParallel gathers it before F.linear, 2 x 1,024 x 2,048 = 4,194,304. With the loss
    # (16 - 6) x 25,000 x 2,048 = 512,000,000 the difference is 514,097,152.
    model = gpt_spec(h=1024, layers=2, vocab=50_000, seq=2048)
    knobs: dict[str, Any] = {"seq_len": 2048, "global_batch": 1, "micro_batch": 1, "recompute": "none", "tp": 2,
                             "sequence_parallel": True}  # fmt: skip
    eager = Stack(loss="eager")
    megatron = _f(_peak(model, one(**knobs), eager).activations)
    titan = _f(_peak(model, one(framework="torchtitan", zero=0, **knobs), eager).activations)
    assert titan - megatron == 514_097_152


def test_pipeline_receive_buffers_by_hand() -> None:
    # torchtitan (PyTorch pipelining), TP1, 1F1B over PP4, 4 micro-batches of one 2048-token
    # sequence, h 1,024: a buffer is the bf16 hidden states 2 x 1,024 x 2,048 = 4,194,304 B.
    #   first stage: 4 gradient buffers, no activation buffers               = 16,777,216
    #   stage 1: 4 + 4 buffers, less the inputs of its 3 micro-batches in flight
    #            (stored as its first layer's input already): 5 buffers      = 20,971,520
    #   last stage: 4 activation buffers less 1 in flight: 3 buffers         = 12,582,912
    # Megatron-LM allocates its receive tensors per exchange: none.
    model = gpt_spec(h=1024, layers=8, vocab=50_000, seq=2048)
    knobs: dict[str, Any] = {"pp": 4, "seq_len": 2048, "global_batch": 4, "micro_batch": 1, "recompute": "full"}
    titan = one(framework="torchtitan", zero=0, **knobs)
    for stage, first, last, expected in ((0, True, False, 16_777_216), (1, False, False, 20_971_520),
                                         (3, False, True, 12_582_912)):  # fmt: skip
        in_flight = in_flight_micro_batches(titan, float(stage))
        assert _f(recv_buffer_bytes(model, titan, in_flight, first, last)) == expected
        megatron = one(**knobs)
        assert _f(recv_buffer_bytes(model, megatron, in_flight_micro_batches(megatron, 1.0), False, False)) == 0.0


def test_gathered_head_sits_on_the_last_stage(models: dict[str, ModelSpec]) -> None:
    # Llama 2 7B, TP2 PP2: the last stage's GPU holds V h / TP + the final norm = 32,000 x 4,096 / 2
    # + 4,096 = 65,540,096 head parameters (gathered in bf16 by torchtitan's ZeRO-3); the first none
    model = models["llama2-7b"]
    lay = one(tp=2, pp=2, dp=4, zero=3, framework="torchtitan", micro_batch=1, global_batch=8)
    layers = np.array([16.0])
    assert _f(stage_params(model, lay, layers, first=False, last=True).head) == 65_540_096
    assert _f(stage_params(model, lay, layers, first=True, last=False).head) == 0.0


@pytest.mark.parametrize(
    ("loss", "extra", "saved"),
    [
        # torch.compile'd loss: the saved bf16 logits and their bf16 gradient, 4 B a logit, against
        # the eager 12 B: (12 - 4) x 50,000 x 2,048 = 819,200,000 bytes less.
        ({"loss": "compiled"}, {}, 819_200_000),
        # torchtitan 0.3.0's 8 chunks: one chunk's eager loss 12 x 50,000 x 2,048 / 8 = 153,600,000
        # plus the fp32 gradient buffer of the hidden states 4 x 1,024 x 2,048 = 8,388,608; the
        # whole eager loss is 1,228,800,000 with the LM head's saved input 2 x 1,024 x 2,048 =
        # 4,194,304, so 1,232,994,304 - 161,988,608 less.
        ({"loss": "chunked"}, {}, 1_071_005_696),
        # two sequences a micro-batch (4,096 tokens): eager 2,457,600,000 + 8,388,608; chunked
        # 307,200,000 + 4 x 1,024 x 4,096 = 16,777,216 + the contiguous chunk copies 2 x 1,024 x
        # 4,096 = 8,388,608
        ({"loss": "chunked"}, {"micro_batch": 2, "global_batch": 2}, 2_133_622_784),
        # TP 2 splits the vocabulary, not the hidden states (replicated over TP before chunking):
        # the whole loss is loss-parallel, 16 x 25,000 x 2,048 = 819,200,000 + 4,194,304; chunked
        # 76,800,000 + 8,388,608
        ({"loss": "chunked"}, {"tp": 2}, 738_205_696),
    ],
)
def test_compiled_and_chunked_loss(loss: dict[str, str], extra: dict[str, Any], saved: int) -> None:
    model = gpt_spec(h=1024, layers=2, vocab=50_000, seq=2048)
    knobs: dict[str, Any] = {"seq_len": 2048, "global_batch": 1, "micro_batch": 1, "recompute": "none",
                             "framework": "torchtitan", "zero": 0, **extra}  # fmt: skip
    eager = _f(_peak(model, one(**knobs), Stack(loss="eager")).activations)
    other = _f(_peak(model, one(**knobs), Stack(**loss)).activations)  # type: ignore[arg-type]
    assert eager - other == saved


def test_torchtitan_030_chunks_its_loss_by_default() -> None:
    # torchtitan 0.3.0's registry config: loss.num_chunks 8 (ChunkedLossWrapper); the others compute it whole
    assert default_stack(Framework.TORCHTITAN).loss == "chunked"
    assert default_stack(Framework.MEGATRON).loss == default_stack(Framework.DEEPSPEED).loss == "eager"


def test_gqa_and_gated_mlp_generalisation(models: dict[str, ModelSpec]) -> None:
    # Llama 2 70B, TP8 + SP, selective, flash, per token and layer:
    #   (8h + 4 a d + 2 g d + 2 g d + 6f) / 8 = (65,536 + 32,768 + 4,096 + 172,032) / 8 = 34,304
    lay = one(tp=8, sequence_parallel=True, recompute="selective")
    assert _f(activation_bytes_per_token_layer(models["llama2-70b"], lay, FLASH)) == 34_304


def test_repeated_kv_is_saved_for_every_query_head(models: dict[str, ModelSpec]) -> None:
    # Llama 2 70B as above (a = 64, g = 8, d = 128), K and V repeated to the 64 query heads before
    # attention (torchtitan 9dec370): the attention saves 2 a d each instead of 2 g d:
    #   (65,536 + 32,768 + 2 x 2 x 8,192 + 172,032) / 8 = 303,104 / 8 = 37,888
    lay = one(tp=8, sequence_parallel=True, recompute="selective")
    assert _f(activation_bytes_per_token_layer(models["llama2-70b"], lay, Stack(kv_repeated=True))) == 37_888
    # a model without grouped queries has nothing to repeat
    gpt = gpt_spec()
    assert _f(activation_bytes_per_token_layer(gpt, one(), Stack(kv_repeated=True))) == _f(
        activation_bytes_per_token_layer(gpt, one(), FLASH)
    )


def test_context_parallel_allgather_holds_the_whole_kv(models: dict[str, ModelSpec]) -> None:
    # Llama 3 8B (g d = 8 x 128 = 1,024), TP1, CP4 all-gather, one 32,768-token sequence: 8,192
    # local tokens; the gathered K and V of one layer: 2 B x 4 x 8,192 x (1,024 + 1,024)
    # = 134,217,728 B; repeated to the 32 query heads first, 4x: 536,870,912 B.
    model = models["llama3-8b"]
    knobs: dict[str, Any] = {"cp": 4, "micro_batch": 1, "seq_len": 32_768, "global_batch": 1, "recompute": "full"}
    gather = one(cp_comm="allgather", **knobs)
    assert _f(cp_gathered_kv_bytes(model, gather, FLASH)) == 134_217_728
    assert _f(cp_gathered_kv_bytes(model, gather, Stack(kv_repeated=True))) == 536_870_912
    # the ring passes one chunk at a time (not priced); without CP nothing is gathered
    assert _f(cp_gathered_kv_bytes(model, one(**knobs), FLASH)) == 0.0
    assert _f(cp_gathered_kv_bytes(model, one(micro_batch=1, seq_len=8192), Stack(kv_repeated=True))) == 0.0
    # it adds to the peak's activations, once (one layer's attention at a time)
    ring = _f(_peak(model, one(**knobs)).activations)
    assert _f(_peak(model, gather).activations) == ring + 134_217_728


def test_pytorch_context_parallel_backward_buffers_by_hand(models: dict[str, ModelSpec]) -> None:
    # Llama 3 8B (a d = 4,096, g d = 1,024), TP1, CP4, one 32,768-token sequence: 8,192 local
    # tokens. PyTorch's ring backward keeps dQ in fp32 and sends/receives dK + dV in fp32:
    #   4 B x 8,192 x (4,096 + 2 x (1,024 + 1,024)) = 4 x 8,192 x 8,192 = 268,435,456 B;
    # K/V repeated to the 32 query heads: 4 x 8,192 x (4,096 + 2 x 8,192) = 671,088,640 B;
    # with TP2 each GPU holds half the heads: 134,217,728 B.
    model = models["llama3-8b"]
    knobs: dict[str, Any] = {"cp": 4, "micro_batch": 1, "seq_len": 32_768, "global_batch": 1, "recompute": "full"}
    titan = one(framework="torchtitan", zero=0, cp_comm="allgather", **knobs)
    assert _f(cp_backward_buffer_bytes(model, titan, FLASH)) == 268_435_456
    assert _f(cp_backward_buffer_bytes(model, titan, Stack(kv_repeated=True))) == 671_088_640
    tp2 = one(framework="torchtitan", zero=0, cp_comm="allgather", tp=2, **knobs)
    assert _f(cp_backward_buffer_bytes(model, tp2, FLASH)) == 134_217_728
    # Megatron's CP (Transformer Engine) is another implementation; without CP there is no ring
    assert _f(cp_backward_buffer_bytes(model, one(cp_comm="allgather", **knobs), FLASH)) == 0.0
    no_cp = one(framework="torchtitan", zero=0, micro_batch=1, seq_len=8192, global_batch=1)
    assert _f(cp_backward_buffer_bytes(model, no_cp, FLASH)) == 0.0
    # the ring rotate method passes dK/dV the same way; the all-gather one adds only its K/V
    ring = one(framework="torchtitan", zero=0, cp_comm="ring", **knobs)
    assert _f(cp_backward_buffer_bytes(model, ring, FLASH)) == 268_435_456
    assert _f(_peak(model, titan).activations) == _f(_peak(model, ring).activations) + 134_217_728


def test_pipeline_stage_outputs_by_hand() -> None:
    # torchtitan (PyTorch pipelining), TP1, PP4, 4 micro-batches of one 2048-token sequence, h 1,024:
    # a stage output is the bf16 hidden states 2 x 1,024 x 2,048 = 4,194,304 B, held in fwd_cache
    # from the micro-batch's forward to its backward.
    #   1F1B: the first stage at its first backward has forwarded 4: 16,777,216; stage 1, 3:
    #   12,582,912; the last stage's one in flight is its logits: 0.
    #   Interleaved, v 2: the first GPU's warm-up is min(2 x 3 + 4, 4 x 2 - 1) = 7 chunk-micro-
    #   batches, its first backward's the 8th: 8 outputs, 33,554,432; the last GPU's warm-up
    #   min(0 + 4, 7) = 4, with the 5th forwarded: 5, less the last chunk's logits, 4: 16,777,216.
    # With Stack.pp_outputs_kept the last stage also keeps the input gradients of its 3 earlier
    # micro-batches: 3 x 4,194,304 = 12,582,912. Megatron-LM keeps its own outputs: none priced.
    model = gpt_spec(h=1024, layers=8, vocab=50_000, seq=2048)
    knobs: dict[str, Any] = {"pp": 4, "seq_len": 2048, "global_batch": 4, "micro_batch": 1, "recompute": "full"}
    kept = Stack(pp_outputs_kept=True)
    for v, stage, last, expected, with_grads in (
        (1, 0.0, False, 16_777_216, 16_777_216), (1, 1.0, False, 12_582_912, 12_582_912), (1, 3.0, True, 0, 12_582_912),
        (2, 0.0, False, 33_554_432, 33_554_432), (2, 3.0, True, 16_777_216, 29_360_128),
    ):  # fmt: skip
        lay = one(framework="torchtitan", zero=0, virtual_stages=v, **knobs)
        in_flight = in_flight_micro_batches(lay, stage)
        assert _f(stage_output_bytes(model, lay, FLASH, in_flight, last)) == expected
        assert _f(stage_output_bytes(model, lay, kept, in_flight, last)) == with_grads
    megatron = one(**knobs)
    assert _f(stage_output_bytes(model, megatron, kept, in_flight_micro_batches(megatron, 0.0), False)) == 0.0
    single = one(framework="torchtitan", zero=0, seq_len=2048, global_batch=4, micro_batch=1)
    assert _f(stage_output_bytes(model, single, kept, in_flight_micro_batches(single, 0.0), True)) == 0.0


def test_pipeline_kept_logits_by_hand() -> None:
    # PyTorch's pipelining before return_outputs=False (Stack.pp_outputs_kept): PP4, 4 micro-batches
    # of one 2,048-token sequence, V 50,000. At the last stage's peak (the loss backward of the
    # last micro-batch) the 3 earlier micro-batches' bf16 logits are held:
    #   3 x 2,048 x 50,000 x 2 B = 614,400,000 B; with TP2 each GPU holds half the vocabulary.
    model = gpt_spec(h=1024, layers=8, vocab=50_000, seq=2048)
    knobs: dict[str, Any] = {"pp": 4, "seq_len": 2048, "global_batch": 4, "micro_batch": 1, "recompute": "full"}
    kept = Stack(pp_outputs_kept=True)
    lay = one(framework="torchtitan", zero=0, **knobs)
    assert _f(kept_outputs_bytes(model, lay, kept)) == 614_400_000
    assert _f(kept_outputs_bytes(model, one(framework="torchtitan", zero=0, tp=2, **knobs), kept)) == 307_200_000
    assert _f(kept_outputs_bytes(model, lay, FLASH)) == 0.0
    # only the last stage holds logits; without a pipeline there is no schedule to keep them. The
    # same torch left the 3 earlier micro-batches' input gradients in the receive buffers' .grad
    # (memory.stage_output_bytes): 3 x 2 x 1,024 x 2,048 = 12,582,912 more at the last stage.
    layers = np.array([2.0])
    for stage, first, last, extra in ((0.0, True, False, 0.0), (3.0, False, True, 614_400_000.0 + 12_582_912)):
        before = _f(activation_bytes(model, lay, FLASH, layers, stage, first, last))
        assert _f(activation_bytes(model, lay, kept, layers, stage, first, last)) == before + extra
    single = one(framework="torchtitan", zero=0, seq_len=2048, global_batch=4, micro_batch=1)
    assert _f(kept_outputs_bytes(model, single, kept)) == 0.0


def test_fp8_keeps_transformer_engine_gemm_inputs_in_fp8(models: dict[str, ModelSpec]) -> None:
    # Llama 2 70B, TP8 + SP, flash, FP8 under Megatron (Transformer Engine), per token and layer:
    #   (6h + 4 a d + 2 g d + 2 g d + 6f - f + a d) / 8: the QKV and MLP inputs at 1 B (2h, not 4h),
    #   the second MLP GEMM's input at 1 B (-f), an FP8 copy of the attention output (+a d)
    #   = (49,152 + 32,768 + 2,048 + 2,048 + 172,032 - 28,672 + 8,192) / 8 = 237,568 / 8 = 29,696
    model = models["llama2-70b"]
    lay = one(tp=8, sequence_parallel=True, recompute="selective", precision="fp8")
    assert _f(activation_bytes_per_token_layer(model, lay, FLASH)) == 29_696
    # torchao's Float8Linear (torchtitan) keeps the bf16 inputs: the bf16 figure, 34,304
    titan = one(tp=8, sequence_parallel=True, precision="fp8", framework="torchtitan")
    assert _f(activation_bytes_per_token_layer(model, titan, FLASH)) == 34_304
    # without flash attention the attention output is only the projection's input: a d at 1 B, and
    # the a s scores (2 softmax, no dropout) are kept: a s = 64 x 4,096 = 262,144 per token, so
    #   (49,152 + 32,768 - 8,192 + 2,048 + 2,048 + 172,032 - 28,672 + 2 x 262,144) / 8 = 745,472 / 8 = 93,184
    unfused = Stack(flash_attention=False)
    lay4k = one(tp=8, sequence_parallel=True, precision="fp8", seq_len=4096)
    assert _f(activation_bytes_per_token_layer(model, lay4k, unfused)) == 93_184


def test_moe_activations_by_hand(models: dict[str, ModelSpec]) -> None:
    # Mixtral, TP1, flash: 8h + 4 a d + 4 g d + top-2 x (6f + the dispatched copy 2h)
    #   = 32,768 + 16,384 + 4,096 + 2 * (86,016 + 8,192) = 241,664 bytes per token and layer
    lay = one(recompute="selective")
    assert _f(activation_bytes_per_token_layer(models["mixtral-8x7b"], lay, FLASH)) == 241_664


def test_gather_scatter_keeps_the_expert_output(models: dict[str, ModelSpec]) -> None:
    # Megatron-Core core_v0.6.0 scales the expert output by the router probabilities after the
    # experts (`Stack.moe_gather_scatter`): autograd saves that output, top-2 x 2h per token at
    # expert TP = TP. Mixtral, TP8 + SP, flash: 44,544 (the test below) + 2 x 8,192 = 60,928.
    lay = one(tp=8, sequence_parallel=True, recompute="selective")
    model = models["mixtral-8x7b"]
    assert _f(activation_bytes_per_token_layer(model, lay, Stack(moe_gather_scatter=True))) == 60_928
    # a dense model has no expert output to keep
    dense = models["llama2-70b"]
    assert _f(activation_bytes_per_token_layer(dense, lay, Stack(moe_gather_scatter=True))) == _f(
        activation_bytes_per_token_layer(dense, lay, Stack())
    )


def test_tensor_parallel_experts_keep_the_gathered_tokens(models: dict[str, ModelSpec]) -> None:
    # Mixtral, TP8 + SP, flash, per token and layer. The dispatcher gathers the tokens of all 8
    # sequence shards, so the copies the first expert GEMM saves are not split over TP:
    #   8h / 8 + (4 a d + 4 g d + top-2 x 6f) / 8 + top-2 x 2h
    #   = 32,768 / 8 + (16,384 + 4,096 + 172,032) / 8 + 16,384 = 4,096 + 24,064 + 16,384 = 44,544
    model = models["mixtral-8x7b"]
    assert _f(activation_bytes_per_token_layer(model, one(tp=8, sequence_parallel=True, recompute="selective"),
                                               FLASH)) == 44_544  # fmt: skip
    # experts without TP (ETP 1) keep their own shard's tokens: 16,384 / 8 = 2,048 instead
    lay = one(tp=8, expert_tp=1, sequence_parallel=True, recompute="selective")
    assert _f(activation_bytes_per_token_layer(model, lay, FLASH)) == 4_096 + 24_064 + 2_048


def test_context_parallel_halves_the_activations(models: dict[str, ModelSpec]) -> None:
    # CP splits the tokens; with flash (no s x s scores) every term, the loss included, halves
    model = models["llama3-8b"]
    whole = _f(_peak(model, one(micro_batch=1, seq_len=8192)).activations)
    halved = _f(_peak(model, one(cp=2, micro_batch=1, seq_len=8192)).activations)
    assert halved == whole / 2


# ------------------------------------------------------------------ model states: ZeRO per framework

N, G = LLAMA2_7B_N, GATHERED


@pytest.mark.parametrize(
    ("framework", "zero", "expected"),
    [
        # Megatron-LM: bf16 weights 2, fp32 main grads 4, Adam 12 (ZeRO paper Sec 3.1: 2 + 2 + 12
        # with fp16 grads); ZeRO-1 shards the 12 over DP8, ZeRO-2 the grads, ZeRO-3 the weights
        (Framework.MEGATRON, 0, (2 * N, 4 * N, 12 * N)),
        (Framework.MEGATRON, 1, (2 * N, 4 * N, 12 * N / 8)),
        (Framework.MEGATRON, 2, (2 * N, 4 * N / 8, 12 * N / 8)),
        (Framework.MEGATRON, 3, (2 * N / 8 + G, 4 * N / 8, 12 * N / 8)),
        # DeepSpeed: the ZeRO paper's 2 + 2 + 12 (bf16 gradients)
        (Framework.DEEPSPEED, 0, (2 * N, 2 * N, 12 * N)),
        (Framework.DEEPSPEED, 1, (2 * N, 2 * N, 12 * N / 8)),
        (Framework.DEEPSPEED, 2, (2 * N, 2 * N / 8, 12 * N / 8)),
        (Framework.DEEPSPEED, 3, (2 * N / 8 + G, 2 * N / 8, 12 * N / 8)),
        # torchtitan FSDP2: fp32 parameters (the master copy) 4, fp32 grads 4, Adam m and v 8.
        # ZeRO-2 ("reshard never") shards the fp32 parameters and keeps the gathered bf16 copy of
        # the whole stage (2 N) between forward and backward; ZeRO-3 only two gathered layers and
        # the gathered LM head.
        (Framework.TORCHTITAN, 0, (4 * N, 4 * N, 8 * N)),
        (Framework.TORCHTITAN, 2, (4 * N / 8 + 2 * N, 4 * N / 8, 8 * N / 8)),
        (Framework.TORCHTITAN, 3, (4 * N / 8 + G + TITAN_HEAD, 4 * N / 8, 8 * N / 8)),
    ],
)
def test_zero_stages_per_framework(
    models: dict[str, ModelSpec], framework: Framework, zero: int, expected: tuple[float, float, float]
) -> None:
    # Llama 2 7B on DP8, TP1, one stage, each framework's own stack defaults
    mem = _peak(models["llama2-7b"], one(dp=8, zero=zero, framework=framework), default_stack(framework))
    got = (_f(mem.params), _f(mem.grads), _f(mem.optimizer))
    assert got == pytest.approx(expected, rel=1e-12)


def test_zero_shards_over_dp_times_cp(models: dict[str, ModelSpec]) -> None:
    # context-parallel ranks hold the same weights: DP4 x CP2 shards like DP8
    model = models["llama2-7b"]
    a = _peak(model, one(dp=4, cp=2, zero=3, seq_len=4096))
    b = _peak(model, one(dp=8, cp=1, zero=3, seq_len=4096))
    for term in ("params", "grads", "optimizer"):
        assert _f(getattr(a, term)) == _f(getattr(b, term))


def test_expert_weights_shard_over_dp_divided_by_ep(models: dict[str, ModelSpec]) -> None:
    # Mixtral (46,702,792,704 parameters), DP8 = EP8, ZeRO-1: each GPU holds 1 of the 8 experts
    # of each layer (an expert 3 * 4096 * 14336 = 176,160,768); the rest (the "dense" part,
    # N - 32 * 8 * expert = 1,605,636,096) is replicated over 8 ranks and its optimizer states
    # sharded 8 ways; expert weights are replicated over DP/EP = 1 rank.
    #   params 2 * (1,605,636,096 + 32 * 176,160,768) = 14,485,561,344
    #   optimizer 12 * (1,605,636,096 / 8 + 32 * 176,160,768) = 70,054,189,056
    mem = _peak(models["mixtral-8x7b"], one(dp=8, ep=8, zero=1))
    assert _f(mem.params) == 14_485_561_344
    assert _f(mem.optimizer) == 70_054_189_056


def test_tensor_parallel_splits_matrices_not_norms(models: dict[str, ModelSpec]) -> None:
    # Llama 2 7B on TP8: matrices / 8, the 65 RMSNorm weights (2 per layer + final) of 4096
    # replicated: 2 * ((N - 266,240) / 8 + 266,240) = 1,685,069,824 bytes of weights
    mem = _peak(models["llama2-7b"], one(tp=8))
    assert _f(mem.params) == 1_685_069_824


# ------------------------------------------------------------------ offload


@pytest.mark.parametrize(
    ("framework", "zero", "offload", "expected"),
    [
        # Megatron --optimizer-cpu-offload: the optimizer states leave the GPU
        (Framework.MEGATRON, 1, "optimizer", (2 * N, 4 * N, 0.0)),
        # ZeRO-Offload: the same for DeepSpeed
        (Framework.DEEPSPEED, 3, "optimizer", (2 * N / 8 + G, 2 * N / 8, 0.0)),
        # ZeRO-Infinity to CPU / FSDP2 CPUOffloadPolicy: parameter and gradient shards leave too;
        # the two gathered layers (and torchtitan's gathered head) stay
        (Framework.DEEPSPEED, 3, "all", (G, 0.0, 0.0)),
        (Framework.TORCHTITAN, 3, "all", (G + TITAN_HEAD, 0.0, 0.0)),
    ],
)
def test_offload_moves_state_to_the_host(
    models: dict[str, ModelSpec], framework: Framework, zero: int, offload: str, expected: tuple[float, float, float]
) -> None:
    lay = one(dp=8, zero=zero, offload=offload, framework=framework)
    mem = _peak(models["llama2-7b"], lay, default_stack(framework))
    assert (_f(mem.params), _f(mem.grads), _f(mem.optimizer)) == pytest.approx(expected, rel=1e-12)


@pytest.mark.parametrize(
    ("framework", "zero", "offload", "node_bytes"),
    [
        # per GPU: Adam's 12 B on its N/8 shard => 1.5 N; the node's 8 GPUs: 12 N = 80,860,987,392
        (Framework.MEGATRON, 1, "optimizer", 80_860_987_392),
        # per GPU: (12 + bf16 weights 2 + bf16 grads 2) N / 8 = 2 N; the node: 107,814,649,856
        (Framework.DEEPSPEED, 3, "all", 107_814_649_856),
        # per GPU: (8 + fp32 params 4 + fp32 grads 4) N / 8 = 2 N; the node: 107,814,649,856
        (Framework.TORCHTITAN, 3, "all", 107_814_649_856),
    ],
)
def test_offloaded_state_must_fit_the_hosts_memory(
    dgx: Cluster, models: dict[str, ModelSpec], framework: Framework, zero: int, offload: str, node_bytes: int
) -> None:
    lay = one(dp=8, zero=zero, offload=offload, framework=framework, global_batch=64)
    stack = default_stack(framework)
    model = models["llama2-7b"]

    def host_violated(memory_bytes: float) -> bool:
        cluster = dgx.model_copy(update={"host": Host(memory_bytes=memory_bytes, cpu_adam_params_per_s=1e9)})
        return bool(evaluate(model, cluster, lay, stack).checks["host"][0])

    assert host_violated(node_bytes * 0.999)
    assert not host_violated(node_bytes * 1.001)
    # without a [host] table offload is not possible at all
    assert evaluate(model, dgx.model_copy(update={"host": None}), lay, stack).checks["host"][0]


# ------------------------------------------------------------------ pipeline: micro-batches in flight


@pytest.mark.parametrize(
    ("knobs", "first", "last"),
    [
        # 1F1B (Narayanan et al. 2021 Sec 2.2.1): stage r holds min(p - r, m): p = 4, m = 8
        ({"pp": 4, "global_batch": 8}, 4.0, 1.0),
        # ... and never more than the m = 2 micro-batches of the step
        ({"pp": 4, "global_batch": 2}, 2.0, 1.0),
        # Megatron's interleaved schedule warms up 2 (p - r - 1) + (v - 1) p chunks before its
        # first backward; at its peak stage r holds that + 1 chunks of 1/v of its layers.
        # p 4, v 2, m 8: first (6 + 4 + 1)/2 = 5.5 = p (1 + (p-1)/(p v)) (Korthikanti Sec 4.2.3);
        #                last (0 + 4 + 1)/2 = 2.5 = ((v-1) p + 1)/v
        ({"pp": 4, "virtual_stages": 2, "global_batch": 8}, 5.5, 2.5),
        # p 4, v 4, m 8: first (6 + 12 + 1)/4 = 4.75; last (12 + 1)/4 = 3.25
        ({"pp": 4, "virtual_stages": 4, "global_batch": 8}, 4.75, 3.25),
        # warm-up capped by the m v = 4 x 2 chunk-micro-batches of a step, less the one that
        # starts the backward: p 4, v 2, m 4: first min(10, 7) + 1 = 8 chunks = 4 micro-batches
        ({"pp": 4, "virtual_stages": 2, "global_batch": 4}, 4.0, 2.5),
    ],
)
def test_in_flight_micro_batches(knobs: dict[str, int], first: float, last: float) -> None:
    lay = one(micro_batch=1, **knobs)
    assert _f(in_flight_micro_batches(lay, 0)) == first
    assert _f(in_flight_micro_batches(lay, knobs["pp"] - 1)) == last


def test_first_stage_activations_by_hand(models: dict[str, ModelSpec]) -> None:
    # Llama 2 7B on PP4 (8 layers a stage), selective, flash, TP1, s 4096, b 1, m 8.
    # Per token and layer 8h + 4 a d + 4 g d + 6f = 32,768 + 16,384 + 16,384 + 66,048 = 131,584.
    # The first stage holds 4 micro-batches in flight, no loss:
    #   131,584 * 4096 * 8 layers * 4 = 17,246,978,048
    # (the last stage holds one micro-batch and the loss: 4,311,744,512 + 10 V T = 1,310,720,000, less)
    model = models["llama2-7b"]
    lay = one(pp=4, micro_batch=1, global_batch=8, seq_len=4096, recompute="selective")
    assert _f(_peak(model, lay).activations) == 17_246_978_048
    # interleaved, v = 2: 5.5 instead of 4 in flight (above): x 1.375 = 23,714,594,816
    lay = one(pp=4, virtual_stages=2, micro_batch=1, global_batch=8, seq_len=4096, recompute="selective")
    assert _f(_peak(model, lay).activations) == 23_714_594_816


def test_tied_head_is_copied_to_the_last_stage() -> None:
    # A GPT with tied embeddings and no learned positions on PP2 (2 layers a stage), 8 tokens:
    # the last stage (its loss, 10 V T = 4 MB, outweighs the first's activations) keeps
    # its own copy of the V x h head (Megatron) and the final LayerNorm 2h. Per layer 12 h^2 +
    # 13 h = 12,596,224 (Narayanan et al. 2021 eq. 2's per-layer count). Weights in bf16:
    #   2 * (2 * 12,596,224 + 50,000 * 1024 + 2048) = 152,788,992 bytes
    model = gpt_spec(h=1024, layers=4, vocab=50_000, learned_positions=False)
    mem = _peak(model, one(pp=2, seq_len=8, global_batch=1))
    assert _f(mem.params) == 152_788_992
    # one stage holds the tied matrix once: 2 N, N = 4 * 12,596,224 + 51,200,000 + 2048 = 101,586,944
    assert _f(_peak(model, one(seq_len=8, global_batch=1)).params) == 2 * 101_586_944


# ------------------------------------------------------------------ known defects


def test_full_recompute_never_needs_more_memory_than_none(models: dict[str, ModelSpec]) -> None:
    # Llama 2 7B, one stage, one micro-batch in flight. Block recompute of 1 layer stores that
    # layer's input (2h per token) instead of its activations and rebuilds them (from that very
    # input) in the backward: at most what no recompute stores. The model gives 2 h T =
    # 2 * 4096 * 4096 = 33,554,432 bytes more.
    model = models["llama2-7b"]
    none = _f(_peak(model, one(seq_len=4096, global_batch=1)).activations)
    block = _f(_peak(model, one(seq_len=4096, global_batch=1, recompute="full", recompute_layers=1)).activations)
    assert block <= none


def test_full_recompute_never_needs_more_memory_than_selective(models: dict[str, ModelSpec]) -> None:
    # Llama 2 7B on torchtitan, PP16 (2 layers a stage), one micro-batch of 4096 tokens in flight,
    # flash. Per token, the op-level policy keeps 4h + 4 a d + 2 g d + 2f = 62,976 B a layer
    # (125,952 for 2) and rebuilds the rest of a layer, 131,584 - 62,976 = 68,608 B, in its
    # backward: 194,560 at the peak. Full recompute keeps 2h a layer and rebuilds one whole layer:
    # 2 * 8192 + 131,584 = 147,968. The model gives selective 125,952: 22,016 B a token less.
    model = models["llama2-7b"]
    knobs = {"pp": 16, "seq_len": 4096, "global_batch": 1, "framework": Framework.TORCHTITAN}
    stack = default_stack(Framework.TORCHTITAN)
    selective = _f(peak_memory(model, one(recompute="selective", **knobs), stack, 0.0).total)
    full = _f(peak_memory(model, one(recompute="full", **knobs), stack, 0.0).total)
    assert full <= selective


def test_attention_not_saved_by_the_op_policy_frees_its_output(models: dict[str, ModelSpec]) -> None:
    # Llama 3 8B on torchtitan, FSDP over 8 GPUs, one 8192-token micro-batch, op-level selective
    # recompute. When the policy's save list misses the attention kernel (Stack.attention_saved
    # false), each layer's attention output, T x a x d bf16 = 8192 x 32 x 128 x 2 B = 64 MiB, is
    # recomputed instead of kept. At the peak the layer whose backward runs holds its rebuilt
    # output again, so 31 of the 32 layers' outputs are gone: 31 x 64 MiB = 2,080,374,784 B.
    model = models["llama3-8b"]
    lay = one(dp=8, zero=3, seq_len=8192, global_batch=8, recompute="selective", framework=Framework.TORCHTITAN)
    stack = default_stack(Framework.TORCHTITAN)
    saved = _f(peak_memory(model, lay, stack, 0.0).activations)
    dropped = _f(peak_memory(model, lay, replace(stack, attention_saved=False), 0.0).activations)
    assert saved - dropped == 31 * 67_108_864


def test_apex_master_weights_by_hand() -> None:
    """NeMo's Apex DistributedFusedAdam on Llama 2 70B, TP8/DP8 ZeRO-1. Its optimizer shard holds
    per parameter, against Megatron's fp32 master + m + v = 12 B:
    - store_param_remainders (NeMo's default, fp32 state, bf16 model): int16 remainders + m + v =
      2 + 4 + 4 = 10 B;
    - optim.dtype bf16 (store_params off): bf16 m + v only, 2 + 2 = 4 B.
    The GPU's share is 1/(TP x DP) = 1/64 of the parameters (all dense), so the optimizer term is
    10/64 and 4/64 B per model parameter; weights and gradients do not move."""
    model = load_model("llama2-70b")
    lay = Layouts.of([Layout(tp=8, dp=8, zero=1, micro_batch=1, recompute=Recompute.FULL)])
    megatron = peak_memory(model, lay, Stack(), 0.0)
    per_param = float(megatron.optimizer[0]) / 12.0  # parameters in this GPU's optimizer shard
    remainders = peak_memory(model, lay, Stack(master_weights="remainders"), 0.0)
    assert remainders.optimizer[0] == pytest.approx(10.0 * per_param, rel=1e-12)
    bf16_state = peak_memory(model, lay, Stack(master_weights="none", adam_moments="bf16"), 0.0)
    assert bf16_state.optimizer[0] == pytest.approx(4.0 * per_param, rel=1e-12)
    # the shard is the GPU's 1/64 of Llama 2 70B's 68,976,648,192 parameters (TP8 splits every
    # matrix; the norms, replicated over TP, are 8192 x (2 x 80 + 1) = 1,318,912 of them)
    shard = (68_976_648_192 - 1_318_912) / 64 + 1_318_912 / 8
    assert per_param == pytest.approx(shard, rel=1e-9)
    assert remainders.params[0] == megatron.params[0] and remainders.grads[0] == megatron.grads[0]


def test_bf16_adam_moments_hold_two_thirds_of_megatrons_optimizer_state() -> None:
    """Megatron's distributed optimizer keeps fp32 master, m and v: 4 + 4 + 4 = 12 B a parameter;
    with the precision-aware optimizer's bf16 moments 4 + 2 + 2 = 8 B. The same layout's
    optimizer term therefore shrinks to exactly 8/12, and nothing else in the breakdown moves."""
    model = load_model("llama2-70b")
    lay = Layouts.of([Layout(tp=8, dp=8, zero=1, micro_batch=1, recompute=Recompute.FULL)])
    full = peak_memory(model, lay, Stack(), 0.0)
    light = peak_memory(model, lay, Stack(adam_moments="bf16"), 0.0)
    assert light.optimizer[0] == pytest.approx(full.optimizer[0] * 8.0 / 12.0, rel=1e-12)
    assert light.params[0] == full.params[0] and light.grads[0] == full.grads[0]
    assert light.activations[0] == full.activations[0]


def test_mtp_module_on_the_last_stage_by_hand() -> None:
    # DeepSeek-V3 with its MTP module trained (Stack.mtp), TP1 EP8: the last stage holds, besides
    # its layer, the module's own weights and Megatron-LM's copy of the word embedding:
    # eh_proj 2*7168^2 = 102,760,448 + the MoE layer without its routed experts
    # (11,507,286,272 - 256*44,040,192 = 232,997,120) + 3 norms 21,504 + embedding 129280*7168
    # = 926,679,040 -> 1,262,458,112 dense; 256*44,040,192 / 8 = 1,409,286,144 expert weights.
    model = load_hf_config(Path(__file__).parent / "data" / "hf_configs" / "deepseek-v3.json")
    lay = one(pp=16, dp=16, ep=8, micro_batch=1, global_batch=4096, precision="fp8",
              first_stage_layers=4, last_stage_layers=1)  # fmt: skip
    layers = np.array([1.0])
    plain = stage_params(model, lay, layers, first=False, last=True)
    mtp = stage_params(model, lay, layers, first=False, last=True, mtp=1.0)
    assert _f(mtp.dense - plain.dense) == pytest.approx(1_262_458_112, rel=1e-12)
    assert _f(mtp.expert - plain.expert) == pytest.approx(1_409_286_144, rel=1e-12)
    # evaluated: the last stage now holds more work and memory than without; a model without MTP
    # modules evaluates the same either way
    cluster = load_cluster("b200")
    stack = Stack(main_grads="bf16", ep_dispatcher="hybridep")
    base = evaluate(model, cluster, lay, stack)
    with_mtp = evaluate(model, cluster, lay, replace(stack, mtp=True))
    assert _f(with_mtp.step_time_s) > _f(base.step_time_s)
    assert _f(with_mtp.model_flops) > _f(base.model_flops)
    mixtral = load_model("mixtral-8x7b")
    small = one(pp=4, dp=2, ep=2, micro_batch=1, global_batch=64)
    assert _f(evaluate(mixtral, cluster, small, replace(stack, mtp=True)).step_time_s) == _f(
        evaluate(mixtral, cluster, small, stack).step_time_s
    )

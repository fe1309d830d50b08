"""The candidate domains: every layout that meets the structural rules for a model on N GPUs.

Structural rules (the ones the search never needs to evaluate): TP divides the GPUs, the
attention heads and KV heads and fits one server; PP x VPP chunks hold a layer each at least; CP splits the sequence
into 2*CP equal chunks; EP divides the experts and DP*CP; the micro-batch divides the per-replica
batch; virtual stages divide the layers per stage. Knobs the user fixed narrow their domain to
that value (and are then taken as given even when they break a rule, so that `validate` can
report the violation). Caps that keep the space finite, documented because they bound what
"optimal" means: a micro-batch of at most 65,536 tokens (GEMMs have long saturated), at most 8
virtual stages, CP at most 64.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, fields

import numpy as np

from paraplan.cost_models.layout import PRECISIONS, RECOMPUTE_MODES, Layouts, Precision, Recompute
from paraplan.cost_models.models import ModelSpec
from paraplan.hardware_specs.schema import Cluster

MAX_MICRO_BATCH_TOKENS = 65_536
MAX_VIRTUAL_STAGES = 8
MAX_CP = 64


@dataclass(frozen=True)
class Knobs:
    """Layout knobs; None means free (chosen by the search)."""

    tp: int | None = None
    pp: int | None = None
    dp: int | None = None
    cp: int | None = None
    ep: int | None = None
    micro_batch: int | None = None
    virtual_stages: int | None = None
    recompute: Recompute | None = None
    zero: int | None = None
    sequence_parallel: bool | None = None
    recompute_layers: int | None = None
    precision: Precision = "bf16"
    global_batch: int = 1024
    seq_len: int = 4096

    def given(self) -> dict[str, object]:
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _domain(fixed: int | None, options: list[int]) -> list[int]:
    return [fixed] if fixed is not None else options


def _domain_sp(fixed: bool | None, tp: int) -> list[bool]:
    """Sequence parallelism only matters with TP > 1; without TP it is left off."""
    if fixed is not None:
        return [fixed]
    return [True, False] if tp > 1 else [False]


def structural_tuples(model: ModelSpec, cluster: Cluster, gpus: int, knobs: Knobs) -> list[tuple[int, ...]]:
    """(tp, pp, dp, cp, ep) combinations with TP*PP*DP*CP = gpus."""
    out: list[tuple[int, ...]] = []
    tps = [
        t
        for t in divisors(gpus)
        if model.num_heads % t == 0
        and model.num_kv_heads % t == 0
        and t <= cluster.gpus_per_node
        and cluster.gpus_per_node % t == 0
    ]
    for tp in _domain(knobs.tp, tps):
        if gpus % tp:
            continue
        pps = [p for p in divisors(gpus // tp) if p <= model.num_layers]
        for pp in _domain(knobs.pp, pps):
            if (gpus // tp) % pp:
                continue
            rest = gpus // (tp * pp)
            cps = [c for c in divisors(rest) if c <= MAX_CP and (c == 1 or knobs.seq_len % (2 * c) == 0)]
            for cp in _domain(knobs.cp, cps):
                if rest % cp:
                    continue
                dp = rest // cp
                if knobs.dp is not None and knobs.dp != dp:
                    continue
                eps = [e for e in divisors(model.num_experts) if (dp * cp) % e == 0]
                for ep in _domain(knobs.ep, eps):
                    out.append((tp, pp, dp, cp, ep))
    return out


def recompute_domain(knobs: Knobs, flash_attention: bool) -> list[int]:
    """Selective recompute (of the attention core) is a no-op under flash attention, whose
    backward recomputes the scores anyway: it would only duplicate 'none' in the results."""
    if knobs.recompute is not None:
        return [RECOMPUTE_MODES.index(knobs.recompute)]
    modes = ["none", "full"] if flash_attention else ["none", "selective", "full"]
    return [RECOMPUTE_MODES.index(m) for m in modes]


def recompute_layers_domain(knobs: Knobs, rc: int, chunk_layers: int) -> list[int]:
    """Layers per chunk that full recompute covers: all (0), or the block method's N in
    1, 2, 4, ... below the chunk size, which trades memory for recompute more finely. A user
    who asks for `--recompute full` without `--recompute-layers` means every layer, as
    Megatron-LM's full recompute does by default."""
    if rc != RECOMPUTE_MODES.index("full"):
        return [0] if not knobs.recompute_layers else []
    if knobs.recompute_layers is not None:
        return [knobs.recompute_layers]
    if knobs.recompute == "full":
        return [0]
    blocks = [1 << k for k in range(chunk_layers.bit_length()) if (1 << k) < chunk_layers]
    return [0, *blocks]


def candidate_space(
    model: ModelSpec, cluster: Cluster, gpus: int, knobs: Knobs, flash_attention: bool = True
) -> Layouts:
    rows: list[tuple[int, ...]] = []
    recomputes = recompute_domain(knobs, flash_attention)
    zeros = _domain(knobs.zero, [0, 1, 2, 3])
    precision = PRECISIONS.index(knobs.precision)
    max_mb = max(1, MAX_MICRO_BATCH_TOKENS // knobs.seq_len)
    for tp, pp, dp, cp, ep in structural_tuples(model, cluster, gpus, knobs):
        per_replica = knobs.global_batch // dp if knobs.global_batch % dp == 0 else 0
        mbs = _domain(knobs.micro_batch, [b for b in divisors(per_replica) if b <= max_mb] if per_replica else [1])
        vs = [v for v in range(2, MAX_VIRTUAL_STAGES + 1) if pp * v <= model.num_layers] if pp > 1 else []
        sps = _domain_sp(knobs.sequence_parallel, tp)
        for mb, v, rc, z, sp in itertools.product(mbs, _domain(knobs.virtual_stages, [1, *vs]), recomputes, zeros, sps):
            if z >= 2 and pp > 1 and knobs.zero is None:
                continue
            chunk = -(-model.num_layers // (pp * v))
            for blocks in recompute_layers_domain(knobs, rc, chunk):
                rows.append((tp, pp, dp, cp, ep, mb, v, rc, z, int(sp), blocks))
    table = np.array(rows, dtype=np.int64).reshape(-1, 11)
    n = len(table)
    return Layouts(
        tp=table[:, 0],
        pp=table[:, 1],
        dp=table[:, 2],
        cp=table[:, 3],
        ep=table[:, 4],
        micro_batch=table[:, 5],
        global_batch=np.full(n, knobs.global_batch, dtype=np.int64),
        seq_len=np.full(n, knobs.seq_len, dtype=np.int64),
        virtual_stages=table[:, 6],
        recompute=table[:, 7],
        zero=table[:, 8],
        sequence_parallel=table[:, 9].astype(bool),
        precision=np.full(n, precision, dtype=np.int64),
        recompute_layers=table[:, 10],
    )

"""The layout knobs: one `Layout`, and `Layouts`, the same knobs as numpy arrays over candidates.

Rank order follows Megatron-LM's `RankGenerator` ("tp-cp-ep-dp-pp"): TP varies fastest, then
CP, then DP, then PP. So a TP group is `tp` consecutive ranks, a CP group has stride `tp`, a DP
group stride `tp*cp` (the DP x CP group that reduces dense gradients: `dp*cp` ranks at stride
`tp`), and consecutive pipeline stages are `tp*cp*dp` ranks apart. Expert layers re-divide the
same DP x CP ranks as "tp-ep-dp" (Megatron's expert rank generator with expert TP = TP): an EP
group is `ep` ranks at stride `tp`, the expert-data-parallel group `dp*cp/ep` ranks at stride
`tp*ep`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import Literal, get_args

import numpy as np
import numpy.typing as npt

Recompute = Literal["none", "selective", "full"]
Precision = Literal["bf16", "fp16", "fp8"]
RECOMPUTE_MODES: tuple[Recompute, ...] = get_args(Recompute)
PRECISIONS: tuple[Precision, ...] = get_args(Precision)

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


@dataclass(frozen=True)
class Layout:
    tp: int = 1
    pp: int = 1
    dp: int = 1
    cp: int = 1
    ep: int = 1
    micro_batch: int = 1
    global_batch: int = 1024
    seq_len: int = 4096
    virtual_stages: int = 1
    recompute: Recompute = "selective"
    zero: int = 1
    sequence_parallel: bool = True
    precision: Precision = "bf16"
    recompute_layers: int = 0  # with full recompute: layers per model chunk recomputed, 0 = all

    @property
    def gpus(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    def to_json(self) -> dict[str, int | str | bool]:
        return asdict(self)


@dataclass(frozen=True)
class Layouts:
    """Struct of arrays: field i of every array describes candidate i."""

    tp: IntArray
    pp: IntArray
    dp: IntArray
    cp: IntArray
    ep: IntArray
    micro_batch: IntArray
    global_batch: IntArray
    seq_len: IntArray
    virtual_stages: IntArray
    recompute: IntArray  # index into RECOMPUTE_MODES
    zero: IntArray
    sequence_parallel: BoolArray
    precision: IntArray  # index into PRECISIONS
    recompute_layers: IntArray  # 0 = every layer (see Layout)

    @staticmethod
    def of(layouts: list[Layout]) -> Layouts:
        def ints(name: str) -> IntArray:
            return np.array([getattr(lay, name) for lay in layouts], dtype=np.int64)

        return Layouts(
            tp=ints("tp"),
            pp=ints("pp"),
            dp=ints("dp"),
            cp=ints("cp"),
            ep=ints("ep"),
            micro_batch=ints("micro_batch"),
            global_batch=ints("global_batch"),
            seq_len=ints("seq_len"),
            virtual_stages=ints("virtual_stages"),
            recompute=np.array([RECOMPUTE_MODES.index(lay.recompute) for lay in layouts], dtype=np.int64),
            zero=ints("zero"),
            sequence_parallel=np.array([lay.sequence_parallel for lay in layouts], dtype=np.bool_),
            precision=np.array([PRECISIONS.index(lay.precision) for lay in layouts], dtype=np.int64),
            recompute_layers=ints("recompute_layers"),
        )

    @staticmethod
    def empty() -> Layouts:
        return Layouts(
            **{
                f.name: np.zeros(0, dtype=np.bool_ if f.name == "sequence_parallel" else np.int64)
                for f in fields(Layouts)
            }
        )

    def __len__(self) -> int:
        return int(self.tp.shape[0])

    def at(self, i: int) -> Layout:
        return Layout(
            tp=int(self.tp[i]),
            pp=int(self.pp[i]),
            dp=int(self.dp[i]),
            cp=int(self.cp[i]),
            ep=int(self.ep[i]),
            micro_batch=int(self.micro_batch[i]),
            global_batch=int(self.global_batch[i]),
            seq_len=int(self.seq_len[i]),
            virtual_stages=int(self.virtual_stages[i]),
            recompute=RECOMPUTE_MODES[int(self.recompute[i])],
            zero=int(self.zero[i]),
            sequence_parallel=bool(self.sequence_parallel[i]),
            precision=PRECISIONS[int(self.precision[i])],
            recompute_layers=int(self.recompute_layers[i]),
        )

    def take(self, index: npt.NDArray[np.int64] | npt.NDArray[np.bool_]) -> Layouts:
        return Layouts(**{f.name: getattr(self, f.name)[index] for f in fields(Layouts)})

    @property
    def num_micro_batches(self) -> FloatArray:
        """Micro-batches each pipeline runs per step (fractional if the batch does not divide)."""
        return self.global_batch / (self.dp * self.micro_batch)

    def chunk_layers(self, num_layers: int) -> FloatArray:
        """Layers in one model chunk of the most loaded GPU: ceil(l / (p * v))."""
        return np.asarray(np.ceil(num_layers / (self.pp * self.virtual_stages).astype(np.float64)))

    def full_recompute_share(self, num_layers: int) -> FloatArray:
        """Share of a GPU's layers that full recompute covers: all of them, or with Megatron's
        `--recompute-method block --recompute-num-layers N` the first N of every chunk (the
        rest keep their activations). 0 without full recompute."""
        chunk = self.chunk_layers(num_layers)
        layers = np.where(self.recompute_layers <= 0, chunk, np.minimum(self.recompute_layers, chunk))
        return np.asarray(np.where(self.recompute == RECOMPUTE_MODES.index("full"), layers / chunk, 0.0))

    @property
    def seq_parallel_active(self) -> BoolArray:
        return self.sequence_parallel & (self.tp > 1)

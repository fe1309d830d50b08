"""`Layouts`: many candidate layouts as one integer matrix, a column per `Layout` field.

The columns are exactly the fields of `layout.Layout`, in its order: enums are stored as their
members' integer values, booleans as 0/1. Cost models read a column as an attribute
(`lay.tp`, `lay.recompute == Recompute.FULL`) and work on all candidates at once; a single
layout is a matrix of one row.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from paraplan.cost_models.layout import BOOLS, ENUMS, Labelled, Layout, Recompute

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]

# numpy asks an operand's type for `__array_ufunc__` on every comparison of a column with a
# member (`lay.recompute == Recompute.FULL`); an enum class without one answers through
# EnumType.__getattr__ and a caught AttributeError, 6x the cost of the comparison itself.
# ndarray's own method is numpy's "no override": the same semantics, found by a plain lookup.
# Set here, not in `layout`, which must import without numpy (`paraplan --help`).
Labelled.__array_ufunc__ = np.ndarray.__array_ufunc__  # type: ignore[attr-defined]

COLUMNS: tuple[str, ...] = tuple(Layout.model_fields)
INDEX: dict[str, int] = {name: i for i, name in enumerate(COLUMNS)}


class Layouts:
    """Struct of arrays: row i of `data` is candidate i."""

    __slots__ = ("_derived", "_frameworks", "data")

    def __init__(self, data: IntArray):
        if data.ndim != 2 or data.shape[1] != len(COLUMNS):
            raise ValueError(f"a layout matrix has {len(COLUMNS)} columns, got shape {data.shape}")
        self.data = data
        self._derived: dict[object, npt.NDArray[np.generic]] = {}  # derived columns, computed once
        self._frameworks: list[int] | None = None  # `frameworks_used`, asked by most cost terms

    if TYPE_CHECKING:  # the columns are properties set below; this tells the type checker so

        def __getattr__(self, name: str) -> IntArray: ...

    @staticmethod
    def of(layouts: Sequence[Layout]) -> Layouts:
        rows = [[int(getattr(lay, name)) for name in COLUMNS] for lay in layouts]
        return Layouts(np.array(rows, dtype=np.int64).reshape(len(rows), len(COLUMNS)))

    @staticmethod
    def empty() -> Layouts:
        return Layouts(np.zeros((0, len(COLUMNS)), dtype=np.int64))

    @staticmethod
    def concat(parts: Sequence[Layouts]) -> Layouts:
        if not parts:
            return Layouts.empty()
        return Layouts(np.concatenate([p.data for p in parts]))

    def __len__(self) -> int:
        return int(self.data.shape[0])

    def at(self, i: int) -> Layout:
        row = self.data[i]
        values: dict[str, object] = {}
        for name, raw in zip(COLUMNS, row.tolist(), strict=True):
            if name in ENUMS:
                values[name] = ENUMS[name](raw)
            elif name in BOOLS:
                values[name] = bool(raw)
            else:
                values[name] = raw
        return Layout.model_validate(values)

    def take(self, index: npt.NDArray[np.int64] | BoolArray) -> Layouts:
        return Layouts(self.data[index])

    def replace(self, **columns: IntArray | int) -> Layouts:
        data = self.data.copy()
        for name, values in columns.items():
            data[:, INDEX[name]] = values
        return Layouts(data)

    # --- derived quantities used by several cost models ------------------------------------

    def memo(self, key: object, compute: Callable[[], npt.NDArray[np.generic]]) -> npt.NDArray[np.generic]:
        """`compute()` the first time `key` is asked of this table, the stored array after (a
        table never changes; cost models ask some derived arrays several times)."""
        if key not in self._derived:
            self._derived[key] = compute()
        return self._derived[key]

    def floats(self, name: str) -> FloatArray:
        """A column (or an integer derived quantity such as `etp`) as float64, converted once."""
        return np.asarray(self.memo(("float", name), lambda: np.asarray(getattr(self, name), dtype=np.float64)))

    @property
    def tokens_per_micro_batch(self) -> FloatArray:
        """Tokens of one micro-batch on one GPU: micro-batch x sequence / CP."""
        return np.asarray(self.memo("tokens", lambda: (self.micro_batch * self.seq_len / self.cp).astype(np.float64)))

    @property
    def dp_cp(self) -> FloatArray:
        """The ranks that shard the dense weights' states, DP x CP, as float64."""
        return np.asarray(self.memo("dp_cp", lambda: (self.dp * self.cp).astype(np.float64)))

    @property
    def gpus(self) -> IntArray:
        return np.asarray(self.tp * self.pp * self.dp * self.cp)

    @property
    def num_micro_batches(self) -> FloatArray:
        """Micro-batches each pipeline runs per step (fractional if the batch does not divide)."""
        return np.asarray(self.memo("m", lambda: self.global_batch / (self.dp * self.micro_batch)), dtype=np.float64)

    def chunk_layers(self, num_layers: int) -> FloatArray:
        """Layers in one model chunk of the most loaded GPU: ceil(l / (p * v))."""
        return np.asarray(np.ceil(num_layers / (self.pp * self.virtual_stages).astype(np.float64)))

    def full_recompute_share(self, num_layers: int) -> FloatArray:
        """Share of a GPU's layers that full recompute covers: all of them, or with Megatron's
        `--recompute-method block --recompute-num-layers N` the first N of every chunk (the
        rest keep their activations). 0 without full recompute."""
        share = self.memo(("full_recompute_share", num_layers), lambda: self._full_recompute_share(num_layers))
        return np.asarray(share, dtype=np.float64)

    def _full_recompute_share(self, num_layers: int) -> FloatArray:
        chunk = self.chunk_layers(num_layers)
        layers = np.where(self.recompute_layers <= 0, chunk, np.minimum(self.recompute_layers, chunk))
        return np.asarray(np.where(self.recompute == Recompute.FULL, layers / chunk, 0.0))

    @property
    def etp(self) -> IntArray:
        """Expert tensor parallelism (`expert_tp`, 0 = TP)."""
        return np.asarray(
            self.memo("etp", lambda: np.where(self.expert_tp > 0, self.expert_tp, self.tp)), dtype=np.int64
        )

    @property
    def expert_dp(self) -> FloatArray:
        """Ranks that replicate each expert: TP x DP x CP / (EP x expert TP), at least 1."""
        ranks = self.memo("expert_dp", lambda: np.maximum((self.tp * self.dp * self.cp) / (self.ep * self.etp), 1.0))
        return np.asarray(ranks, dtype=np.float64)

    @property
    def frameworks_used(self) -> list[int]:
        """The framework values present (usually one: a question has one framework)."""
        if self._frameworks is None:
            self._frameworks = [int(v) for v in self._distinct_frameworks()]
        return self._frameworks

    def _distinct_frameworks(self) -> IntArray:
        column = self.framework
        alike = len(column) > 0 and bool((column == column[0]).all())  # the usual case, without a sort
        return np.asarray(column[:1] if alike else np.unique(column))

    @property
    def seq_parallel_active(self) -> BoolArray:
        return np.asarray(self.memo("sp", lambda: (self.sequence_parallel == 1) & (self.tp > 1)), dtype=np.bool_)


def _column(i: int) -> property:
    return property(lambda self: self.data[:, i], doc=f"column {COLUMNS[i]}")


# One property per column (`lay.tp` is column "tp" of every candidate).
for _i, _name in enumerate(COLUMNS):
    assert not hasattr(Layouts, _name), f"column {_name} shadows a Layouts attribute"
    setattr(Layouts, _name, _column(_i))

"""Settings of the training software stack that are not layout knobs.

`flash_attention`: fused attention that never materialises the s x s score matrix (Dao et al.
2022); without it, the scores, softmax and dropout are stored (Korthikanti et al. 2022's
5*a*s/h term) and computed as batched GEMMs plus memory-bound softmax.
`dp_overlap`: data-parallel gradient reduction and weight gathers overlap the backward and
forward passes (Megatron-LM's --overlap-grad-reduce / --overlap-param-gather, since 2023;
DeepSpeed's overlap_comm; PyTorch DDP buckets). Megatron-LM of 2021-22 reduced gradients after
the whole backward pass ("local" DDP), so runs of that era set it off.
`main_grads`: "fp32" is Megatron-LM's convention (an fp32 gradient buffer, 4 bytes/param);
"bf16" is DeepSpeed's (gradients kept in the training dtype, 2 bytes/param).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

MainGrads = Literal["fp32", "bf16"]


@dataclass(frozen=True)
class Stack:
    flash_attention: bool = True
    dp_overlap: bool = True
    main_grads: MainGrads = "fp32"

    @property
    def grad_bytes(self) -> int:
        return 4 if self.main_grads == "fp32" else 2


# The default stack, shared by default arguments (the class is frozen, so sharing is safe).
DEFAULT_STACK = Stack()

PARAM_BYTES = 2  # bf16/fp16 weights; FP8 training (Transformer Engine) keeps bf16 weights too
OPTIMIZER_BYTES = 12  # Adam: fp32 master weights + first and second moments, 4 bytes each

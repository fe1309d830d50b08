"""Uneven pipeline splits with virtual stages, chunk by chunk (`stages.chunk_layers`)."""

from __future__ import annotations

import pytest

from paraplan.cost_models.stages import chunk_layers


def test_chunk_layers_spells_out_the_priced_split() -> None:
    # DeepSeek-V3 (61 layers) on PP8 x VPP2, first rank 8, last 5: (61 - 13) / 6 = 8 per middle
    # rank, 5 = 3 + 2 on the last; Llama 3 405B's 126 layers on PP16 as 7 + 14 x 8 + 7 (Dubey et al.
    # 2024, Sec 3.3.2) with 2 virtual stages: 7 = 3 + 4 on the first rank (the embedding's chunk
    # lighter), 4 + 3 on the last
    assert chunk_layers(61, 8, 2, 8, 5) == [[4, 4]] * 7 + [[3, 2]]
    assert chunk_layers(126, 16, 2, 7, 7) == [[3, 4]] + [[4, 4]] * 14 + [[4, 3]]
    assert chunk_layers(32, 4, 3, 7, 7) == [[2, 2, 3], [3, 3, 3], [3, 3, 3], [3, 2, 2]]
    assert chunk_layers(64, 8, 2, 0, 0) == [[4, 4]] * 8  # the even split
    assert chunk_layers(32, 4, 1, 7, 9) == [[7], [8], [8], [9]]
    for bad in ((61, 8, 2, 8, 6), (61, 8, 2, 0, 0), (32, 1, 2, 7, 7), (32, 2, 2, 7, 7)):
        with pytest.raises(ValueError):
            chunk_layers(*bad)

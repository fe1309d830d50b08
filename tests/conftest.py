"""Shared helpers for the cost-model tests: one-layout arrays and hand-made model specs."""

from __future__ import annotations

import os
from typing import Any

import pytest
from hypothesis import settings

from paraplan.cost_models.layout import Layout, Layouts
from paraplan.cost_models.models import ModelSpec
from paraplan.hardware_specs.loader import load_cluster
from paraplan.hardware_specs.schema import Cluster


def one(**knobs: Any) -> Layouts:
    """A `Layouts` array holding the single layout `Layout(**knobs)`."""
    return Layouts.of([Layout(**knobs)])


def gpt_spec(
    h: int = 1024, layers: int = 4, heads: int = 16, vocab: int = 50_000, seq: int = 2048, **extra: Any
) -> ModelSpec:
    """A GPT-style model as in Megatron / Korthikanti: full MHA, 4h GELU MLP, LayerNorm, biases,
    learned positions, tied embeddings, dropout."""
    fields: dict[str, Any] = dict(
        name="gpt-test",
        hidden_size=h,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=heads,
        head_dim=h // heads,
        ffn_hidden_size=4 * h,
        vocab_size=vocab,
        max_seq_len=seq,
        mlp="plain",
        tied_embeddings=True,
        learned_positions=True,
        layernorm=True,
        linear_bias=True,
        dropout=True,
    )
    fields.update(extra)
    return ModelSpec(**fields)


@pytest.fixture(scope="session")
def a100() -> Cluster:
    return load_cluster("a100-80g")



# Hypothesis profiles: "ci" (set by .ci/run) derandomizes so a CI run is reproducible.
settings.register_profile("ci", derandomize=True, deadline=None, print_blob=True)
settings.register_profile("dev", deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "dev"))

"""One question's inputs, resolved and checked: model, hardware, GPU count, knobs, stack."""

from __future__ import annotations

from dataclasses import dataclass, replace

from paraplan.cost_models.evaluate import Evaluation, evaluate
from paraplan.cost_models.models import ModelSpec
from paraplan.cost_models.stack import DEFAULT_STACK, Stack
from paraplan.hardware_specs.schema import Cluster
from paraplan.plan import Plan
from paraplan.rank import closest, ranked
from paraplan.space import Knobs, candidate_space

LAYOUT_KNOBS = ("micro_batch", "virtual_stages", "recompute", "recompute_layers", "zero", "sequence_parallel")


@dataclass(frozen=True)
class Scenario:
    model: ModelSpec
    cluster: Cluster
    gpus: int
    knobs: Knobs
    stack: Stack = DEFAULT_STACK
    mem_headroom: float = 0.0

    def with_plan(self, plan: Plan) -> Scenario:
        knobs = replace(
            self.knobs,
            tp=plan.tp,
            pp=plan.pp,
            dp=plan.dp,
            cp=plan.cp,
            ep=plan.ep,
            virtual_stages=plan.virtual_stages if plan.virtual_stages is not None else self.knobs.virtual_stages,
        )
        return replace(self, knobs=knobs)

    def free(self) -> Scenario:
        """The same question with every layout knob open (batch, sequence, precision kept)."""
        k = self.knobs
        return replace(self, knobs=Knobs(precision=k.precision, global_batch=k.global_batch, seq_len=k.seq_len))

    def evaluate_space(self) -> Evaluation:
        space = candidate_space(self.model, self.cluster, self.gpus, self.knobs, self.stack.flash_attention)
        return evaluate(self.model, self.cluster, space, self.stack, self.mem_headroom)


@dataclass(frozen=True)
class Choice:
    """One candidate picked out of an evaluated space."""

    evaluation: Evaluation
    index: int

    @property
    def feasible(self) -> bool:
        return bool(self.evaluation.feasible[self.index])

    @property
    def step_time_s(self) -> float:
        return float(self.evaluation.step_time_s[self.index])


def best_or_closest(ev: Evaluation) -> Choice:
    """The fastest feasible candidate of an evaluated space, else the one closest to feasible."""
    if len(ev.layouts) == 0:
        raise ValueError("an empty candidate space has no best or closest layout")
    order = ranked(ev)
    return Choice(ev, int(order[0]) if len(order) else closest(ev))

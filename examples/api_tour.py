"""A tour of paraplan's Python API: every public function once, with the fields most scripts read.

    python examples/api_tour.py          # from the repository root, with paraplan installed

Each function returns a pydantic model; `.model_dump_json()` of it is exactly what the CLI
prints with `--json` (the fields are explained in docs/json.md). Bad input raises
`paraplan.InputError` with a one-line message. Runs in a few seconds on two CPU cores.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import paraplan

HERE = Path(__file__).resolve().parent


def gb(n_bytes: float) -> str:
    return f"{n_bytes / 1e9:.1f} GB"


# 1. Inputs: a model preset (or a Hugging Face config.json path) and a hardware preset (or TOML).
model = paraplan.load_model("llama2-70b")
a100 = paraplan.load_hardware("a100-80g")
print(f"[load] {model.name}: {model.num_layers} layers; {a100.name}: {a100.gpus_per_node} GPUs per node, "
      f"{a100.gpu.peak_bf16_flops / 1e12:.0f} TFLOP/s BF16, {gb(a100.gpu.memory_bytes)}")  # fmt: skip

# 2. validate: is this plan feasible, how fast, and how far from the optimum? Knobs not given
#    (micro-batch, recompute, ZeRO, ...) are chosen; knobs given are fixed.
v = paraplan.validate("llama2-70b", 256, "a100-80g", "TP8/PP4/DP8")
lo, hi = v.step_time_range_s
print(f"[validate] feasible={v.feasible} step {v.step_time_s:.2f} s (measured within {lo:.2f}..{hi:.2f} s: "
      f"{v.accuracy_basis.split(',')[0]}), MFU {v.mfu:.3f}, memory {gb(v.memory_bytes.total)} of "
      f"{gb(v.memory_bytes.capacity)}")  # fmt: skip
print(f"           chosen: {', '.join(v.knobs_chosen)}")
print(f"           layout: micro_batch={v.layout.micro_batch} recompute={v.layout.recompute} zero={v.layout.zero}")
if v.optimum is not None and v.optimum.gap is not None:
    print(f"           optimum {v.optimum.step_time_s:.2f} s, this plan {v.optimum.gap:+.1%}")
if v.best_change is not None:
    print(f"           best single change: {v.best_change.change} ({v.best_change.gain:.1%} faster)")

# The same plan with knobs fixed (keyword arguments are the fields of paraplan.Layout) and a
# stack setting changed (stack={...}: flash_attention, dp_overlap, main_grads, tp_overlap, p2p_overlap).
v2 = paraplan.validate("llama2-70b", 256, "a100-80g", "TP8/PP4/DP8", micro_batch=1, recompute="full",
                       stack={"dp_overlap": False})  # fmt: skip
print(f"[validate] micro_batch=1, recompute=full, no DP overlap: {v2.step_time_s:.2f} s, "
      f"recompute {v2.time_s.recompute:.2f} s, dp_comm {v2.time_s.dp_comm:.2f} s")  # fmt: skip

# An infeasible plan is an answer, not an error: feasible=False, the violations and the fixes.
bad = paraplan.validate("llama3-8b", 8, "h100-sxm", "TP1/PP1/DP8", seq_len=8192, global_batch=128,
                        micro_batch=1, recompute="none", zero=1, precision="fp8")  # fmt: skip
print(f"[validate] llama3-8b on 8 H100, recompute none, ZeRO-1: feasible={bad.feasible}")
for line in bad.violations[:1] + bad.fixes[:2]:
    print(f"           {line}")

# 3. optimize: the best layouts per hardware, exactly (every candidate evaluated).
o = paraplan.optimize("llama2-70b", ["a100-80g", "h100-sxm"], 1024, top=3, bounds={"max_tp": 4})
for hw in o.results:
    best = hw.layouts[0]
    print(f"[optimize] {hw.hardware}: {hw.solver.status} over {hw.solver.candidates:,} candidates; "
          f"best {best.step_time_s:.2f} s, MFU {best.mfu:.3f}, tp={best.layout.tp} pp={best.layout.pp} "
          f"dp={best.layout.dp} cp={best.layout.cp}")  # fmt: skip

# A GPU-count range with a deadline: the cheapest layout that trains 2e12 tokens in 30 days.
r = paraplan.optimize("llama2-70b", "h100-sxm", "256..4096", top=1, tokens=2e12, deadline_days=30,
                      objective="cost")  # fmt: skip
best = r.results[0].layouts[0]
assert best.train_time_s is not None and best.cost_usd is not None
print(f"[optimize] 2e12 tokens within 30 days: {best.gpus} GPUs, {best.train_time_s / 86400:.1f} days, "
      f"${best.cost_usd:,.0f}")  # fmt: skip

# 4. compare: the hardware decision, with failures, energy and money.
c = paraplan.compare("llama2-70b", "a100-80g:256,rtx4090:2048", tokens=2e12)
for entry in c.results:
    assert entry.train_time_s is not None and entry.cost_usd is not None and entry.goodput is not None
    print(f"[compare] {entry.hardware} x {entry.gpus}: {entry.train_time_s / 86400:.1f} days with failures, "
          f"goodput {entry.goodput:.2%}, ${entry.cost_usd.total:,.0f}")  # fmt: skip
print(f"[compare] verdict: {c.verdict[0]}")

# 5. calibrate: fit efficiency constants to measured runs (here 8 published A100 runs, which the
#    preset was already fitted on, so the change is small); the result carries the TOML.
cal = paraplan.calibrate("a100-80g", HERE / "a100_runs.csv", fit_names="gemm_max,attention")
print(f"[calibrate] MAPE {cal.mape_before:.1%} -> {cal.mape_after:.1%}; constants {cal.constants}")
with tempfile.TemporaryDirectory() as tmp:
    toml = Path(tmp) / "my_a100.toml"
    toml.write_text(cal.toml)
    again = paraplan.validate("llama2-70b", 256, str(toml), "TP8/PP4/DP8")
    print(f"[calibrate] the same plan on the calibrated hardware: {again.step_time_s:.2f} s")

# 6. JSON: the CLI's --json is model_dump_json() of the same object.
data = json.loads(v.model_dump_json())
print(f"[json] validate keys: {', '.join(list(data)[:8])}, ... ({len(data)} keys)")

# 7. Bad input: one InputError with a one-line message.
try:
    paraplan.validate("llama2-70b", 256, "a100-80g", "TP8/PP4/DP9")
except paraplan.InputError as exc:
    print(f"[error] {exc}")

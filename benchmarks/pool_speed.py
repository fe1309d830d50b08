"""How fast is a mixed-pool search? Whole-process time, the solver's time, peak memory.

Each figure is the median of N runs (default 3), every run a fresh process:

  (a) importing the runtime dependencies alone (the floor any command pays);
  (p) llama3-405b on the pool h100-sxm:2048+a100-80g:2048, --top 1 (target: proven optimal,
      whole process at most 10 s): the single-type stage-model optima, the pool's optimum and
      the uniform enumeration of each type alone;
  (q) llama2-70b on a100-80g:64+rtx4090:512 (the mixing question; informational).

The command is `python -m optimizer optimize --model M --hardware POOL --top 1 --json`.
Runs are interleaved -- rounds of (a), (p), (q) -- after one untimed warm-up of each. The
script is a report: it always exits 0.

    python benchmarks/pool_speed.py [--runs 3] [--json] [--skip-70b]
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from search_speed import IMPORTS, Measurement, Run, record_process, record_search, run_once

CASES: dict[str, tuple[str, str]] = {
    "p": ("llama3-405b", "h100-sxm:2048+a100-80g:2048"),
    "q": ("llama2-70b", "a100-80g:64+rtx4090:512"),
}
TITLES = {
    "a": "import ortools, pydantic, networkx, numpy, click, rich",
    "p": "llama3-405b on h100-sxm:2048+a100-80g:2048, top 1",
    "q": "llama2-70b on a100-80g:64+rtx4090:512, top 1",
}
TARGET_S = {"p": 10.0}


def command(name: str) -> list[str]:
    model, pool = CASES[name]
    return [sys.executable, "-m", "optimizer", "optimize", "--model", model, "--hardware", pool, "--top", "1", "--json"]


def record(m: Measurement, r: Run) -> None:
    if m.name == "a":
        record_process(m, r)
        return
    entry = record_search(m, r)
    if entry and entry.get("layouts"):
        best = entry["layouts"][0]
        kinds = sorted({(s["hardware"], s["tp"]) for s in best.get("stages") or []})
        words = ", ".join(f"{h} TP{t}" for h, t in kinds)
        pool = entry.get("pool") or {}
        m.picked = (f"{best['step_time_s']:.3f} s/step, {best['gpus']} GPUs, {len(best.get('stages') or [])} stages "
                    f"({words}); mixing gain {pool.get('gain')}")  # fmt: skip


def measure_all(runs: int, skip_70b: bool) -> dict[str, Measurement]:
    names = ["p"] if skip_70b else ["p", "q"]
    cases = [Measurement("a", TITLES["a"], [sys.executable, "-c", IMPORTS])]
    cases += [Measurement(n, TITLES[n], command(n)) for n in names]
    for m in cases:  # warm-up: page cache, .pyc files
        run_once(m.command)
    for _ in range(runs):
        for m in cases:
            record(m, run_once(m.command))
    return {m.name: m for m in cases}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--skip-70b", action="store_true")
    args = parser.parse_args()
    ms = measure_all(max(1, args.runs), args.skip_70b)
    whole = ms["p"].median(ms["p"].whole_s)
    check = {"check": "(p) whole process, proven optimal", "value": whole, "target": TARGET_S["p"], "unit": "s",
             "result": "PASS" if whole is not None and whole <= TARGET_S["p"] and ms["p"].status == "OPTIMAL"
             else "FAIL"}  # fmt: skip
    report = {"cpus": os.cpu_count(), "cases": {n: m.as_json() for n, m in ms.items()}, "checks": [check]}
    if args.json:
        print(json.dumps(report, indent=2))
        return 0
    print(f"pool search speed, median of {args.runs} fresh processes ({os.cpu_count()} CPUs)")
    for m in ms.values():
        whole_m, solver_m = m.median(m.whole_s), m.median(m.solver_s)
        line = f"  ({m.name}) {m.title}: whole {whole_m:.2f} s" if whole_m is not None else f"  ({m.name}) {m.title}: -"
        if solver_m is not None:
            line += f", search {solver_m:.2f} s, {m.status}"
        print(line)
        if m.picked:
            print(f"      best: {m.picked}")
        for e in m.errors:
            print(f"      error: {e}")
    print(f"  {check['check']}: {whole} s (target <= {TARGET_S['p']:g} s): {check['result']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

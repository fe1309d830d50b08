"""The largest inputs paraplan accepts, each run as a fresh process: wall time and peak memory.

Issue 14 ("no accepted input may take more than 10 s or 1 GB on a 2-core machine"): each case
below is an input at or near a bound the CLI accepts -- the widest GPU ranges, a global batch with
1,344 divisors, a 10T-parameter model, the widest and deepest config the loader takes,
million-token sequences, compare over 8 hardware (with a budget, a deadline and the scaling
report), calibrate on 2,000 runs. Each is run `--runs` times (default 3); the table shows the
median wall time and the largest peak RSS (the child's own ru_maxrss, read with os.wait4 on its
pid, so that one run's peak never leaks into the next). A run past `--timeout` (default 120 s) is
killed and the case is not repeated; a case whose first run is far over the limit is not repeated
either (its median would say nothing more).

Exit status: 1 if any case took more than --max-s (10) seconds without saying why first (a
`Note:` line on stderr before the work, as compare and calibrate print for long searches and
fits), or more than --max-mb (1000) MB, whether the input was accepted (exit 0/1) or refused
(exit 2: a refusal has to come fast too); else 0. The table marks announced cases.

    python benchmarks/pathological.py [--runs 3] [--only NAME ...] [--json]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from paraplan.cost_models.units import MB

REPO = Path(__file__).resolve().parent.parent
PUBLIC_RUNS = REPO / "benchmarks" / "data" / "runs_public.csv"
EIGHT_HARDWARE = "a100-80g:1024,a100-40g:1024,h100-sxm:1024,h200:1024,b200:1024,mi300x:1024,l40s:1024,rtx4090:1024"

# A 10T-parameter dense model (65,536 wide, 200 layers) and the widest, deepest config the loader
# accepts (every size at its upper bound, MoE with 100,000 experts).
TEN_T = {"model_type": "llama", "hidden_size": 65536, "num_hidden_layers": 200, "num_attention_heads": 512,
         "num_key_value_heads": 64, "intermediate_size": 4 * 65536, "vocab_size": 128_256,
         "max_position_embeddings": 8192}  # fmt: skip
WIDEST = {"model_type": "mixtral", "hidden_size": 1_000_000, "num_hidden_layers": 100_000,
          "num_attention_heads": 1000, "num_key_value_heads": 1000, "intermediate_size": 10_000_000,
          "vocab_size": 100_000_000, "max_position_embeddings": 100_000_000, "num_local_experts": 100_000,
          "num_experts_per_tok": 100_000}  # fmt: skip


# A 32k-character plan (tests/test_hostile.py: once backtracked quadratically in the plan reader) and
# a node of 1,024 GPUs, the schema's bound (tests/test_hostile_inputs.py: routing its links took 20 s)
LONG_PLAN = "TP" + " " * 16_000 + "=" + " " * 16_000


def write_inputs(folder: Path, runs: int) -> None:
    """The config files, a hardware TOML with 1,024 GPUs per node, and a calibrate CSV of `runs`
    runs (the published a100-80g runs, repeated with distinct ids: the fit's work grows with the
    row count, whatever the rows say)."""
    (folder / "10t.json").write_text(json.dumps(TEN_T))
    preset = (REPO / "hardware_specs" / "presets" / "a100-80g.toml").read_text(encoding="utf-8")
    (folder / "node1024.toml").write_text(re.sub(r"^gpus_per_node = \d+", "gpus_per_node = 1024", preset, count=1,
                                                 flags=re.M), encoding="utf-8")  # fmt: skip
    (folder / "widest.json").write_text(json.dumps(WIDEST))
    with PUBLIC_RUNS.open(newline="", encoding="utf-8") as handle:
        rows = [r for r in csv.DictReader(handle) if r["hardware"] == "a100-80g"]
    with (folder / "runs2000.csv").open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        for i in range(runs):
            writer.writerow({**rows[i % len(rows)], "id": f"run{i}"})


@dataclass(frozen=True)
class Case:
    name: str
    title: str
    args: list[str]


CASES = [
    Case("top100_4hw", "optimize --top 100, 4 hardware, 256..16384 GPUs",
         ["optimize", "--model", "llama2-70b", "--hardware", "a100-80g,h100-sxm,h200,b200", "--gpus", "256..16384",
          "--top", "100", "--json"]),
    Case("batch_divisors", "optimize --global-batch 735134400 --seq-len 1 --gpus 1..65536",
         ["optimize", "--model", "llama2-7b", "--hardware", "a100-80g", "--global-batch", "735134400",
          "--seq-len", "1", "--gpus", "1..65536", "--json"]),
    Case("gpus_10m", "optimize --gpus 1..10000000",
         ["optimize", "--model", "llama2-7b", "--hardware", "a100-80g", "--gpus", "1..10000000", "--json"]),
    Case("10t_optimize", "optimize a 10T-parameter model on 16,384 x h100-sxm",
         ["optimize", "--model", "{dir}/10t.json", "--hardware", "h100-sxm", "--gpus", "16384", "--json"]),
    Case("10t_validate", "validate a 10T-parameter model, TP8/PP8/DP256",
         ["validate", "--model", "{dir}/10t.json", "--hardware", "h100-sxm", "--gpus", "16384", "--plan",
          "TP8/PP8/DP256", "--json"]),
    Case("10t_infeasible", "optimize a 10T model on 1,024 x a100-40g (infeasible: the fixes search)",
         ["optimize", "--model", "{dir}/10t.json", "--hardware", "a100-40g", "--gpus", "1024", "--json"]),
    Case("405b_8_rtx4090", "optimize llama3-405b on 8 x rtx4090 (infeasible: the fixes search)",
         ["optimize", "--model", "llama3-405b", "--hardware", "rtx4090", "--gpus", "8", "--json"]),
    Case("widest_validate", "validate the widest, deepest config, TP8, 100M-token sequences",
         ["validate", "--model", "{dir}/widest.json", "--hardware", "h100-sxm", "--gpus", "8", "--plan", "TP8",
          "--seq-len", "100000000", "--json"]),
    Case("widest_optimize", "optimize the widest, deepest config on 8 GPUs",
         ["optimize", "--model", "{dir}/widest.json", "--hardware", "h100-sxm", "--gpus", "8", "--json"]),
    Case("widest_range", "optimize the widest, deepest config, --gpus 1..10000000",
         ["optimize", "--model", "{dir}/widest.json", "--hardware", "h100-sxm", "--gpus", "1..10000000", "--json"]),
    Case("million_validate", "validate 1,048,576-token sequences, TP8/CP8",
         ["validate", "--model", "llama2-7b", "--hardware", "h100-sxm", "--gpus", "64", "--plan", "TP8/CP8",
          "--seq-len", "1048576", "--global-batch", "1", "--json"]),
    Case("million_optimize", "optimize 1,048,576-token sequences, 64..1024 GPUs",
         ["optimize", "--model", "llama2-7b", "--hardware", "h100-sxm", "--gpus", "64..1024", "--seq-len", "1048576",
          "--json"]),
    Case("compare_8hw", "compare llama2-70b over 8 hardware x 1024",
         ["compare", "--model", "llama2-70b", "--hardware", EIGHT_HARDWARE, "--json"]),
    Case("compare_8hw_html", "compare over 8 hardware with --html (scaling curves)",
         ["compare", "--model", "llama2-70b", "--hardware", EIGHT_HARDWARE, "--html", "{dir}/compare.html"]),
    Case("compare_8hw_budget", "compare over 8 hardware with --budget-usd 1e7",
         ["compare", "--model", "llama2-70b", "--hardware", EIGHT_HARDWARE, "--budget-usd", "1e7", "--json"]),
    Case("compare_8hw_deadline", "compare llama3-405b over 8 hardware, --deadline-days 30",
         ["compare", "--model", "llama3-405b", "--hardware", EIGHT_HARDWARE, "--deadline-days", "30", "--json"]),
    Case("long_plan", "memory with a 32,000-character --plan (refused)",
         ["memory", "--model", "llama2-7b", "--hardware", "a100-80g", "--gpus", "8", "--plan", LONG_PLAN]),
    Case("node_1024", "validate on a node of 1,024 GPUs (the schema's bound)",
         ["validate", "--model", "llama2-7b", "--hardware", "{dir}/node1024.toml", "--gpus", "64", "--plan",
          "TP8/PP2/DP4", "--json"]),
    Case("calibrate_2000", "calibrate a100-80g on 2,000 runs",
         ["calibrate", "--hardware", "a100-80g", "--runs", "{dir}/runs2000.csv", "--out", "{dir}/out.toml",
          "--force", "--json"]),
]  # fmt: skip


@dataclass
class Run:
    wall_s: float
    max_rss_bytes: int
    returncode: int | None  # None: killed at the timeout
    stderr: str


def run_once(argv: list[str], timeout_s: float) -> Run:
    """One fresh process: wall time, its own peak RSS (os.wait4 on its pid), exit code."""
    with tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=REPO, stdout=subprocess.DEVNULL, stderr=err, stdin=subprocess.DEVNULL,
                                start_new_session=True)  # fmt: skip
        killed = False
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() - started > timeout_s and not killed:
                os.killpg(proc.pid, signal.SIGKILL)  # its own session: nothing else is hit
                killed = True
            time.sleep(0.01)
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here; keep Popen from waiting again
        err.seek(0)
        scale = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: kilobytes on Linux, bytes on macOS
        return Run(wall, int(usage.ru_maxrss) * scale, None if killed else proc.returncode,
                   err.read().decode(errors="replace"))  # fmt: skip


@dataclass
class Result:
    case: Case
    runs: list[Run] = field(default_factory=list)

    @property
    def wall_s(self) -> float:
        return float(statistics.median(r.wall_s for r in self.runs))

    @property
    def peak_bytes(self) -> int:
        return max(r.max_rss_bytes for r in self.runs)

    @property
    def exit_codes(self) -> str:
        return ",".join("killed" if r.returncode is None else str(r.returncode) for r in self.runs)

    @property
    def announced(self) -> bool:
        """The process said why it would take long before it did (a `Note:` first on stderr)."""
        return all(r.stderr.lstrip().startswith("Note:") for r in self.runs)

    def over(self, max_s: float, max_bytes: float) -> list[str]:
        out = []
        if any(r.returncode is None for r in self.runs):
            out.append("timed out")
        elif self.wall_s > max_s and not self.announced:
            out.append(f"> {max_s:g} s")
        if self.peak_bytes > max_bytes:
            out.append(f"> {max_bytes / MB:g} MB")
        if any(r.returncode not in (0, 1, 2, None) for r in self.runs):
            out.append("crashed")
        return out

    def as_json(self, max_s: float, max_bytes: float) -> dict[str, Any]:
        return {"case": self.case.name, "title": self.case.title, "command": " ".join(self.case.args),
                "wall_s": self.wall_s, "wall_s_all": [r.wall_s for r in self.runs], "peak_mb": self.peak_bytes / MB,
                "exit": self.exit_codes, "over": self.over(max_s, max_bytes),
                "stderr": self.runs[-1].stderr.strip()[-300:]}  # fmt: skip


def measure(case: Case, folder: Path, runs: int, timeout_s: float, max_s: float,
            progress: Callable[[str], None]) -> Result:  # fmt: skip
    argv = [sys.executable, "-m", "paraplan", *(a.replace("{dir}", str(folder)) for a in case.args)]
    result = Result(case)
    for _ in range(runs):
        run = run_once(argv, timeout_s)
        result.runs.append(run)
        progress(f"  {case.name}: {run.wall_s:.2f} s, {run.max_rss_bytes / MB:.0f} MB, exit {run.returncode}")
        if run.returncode is None or run.wall_s > 3 * max_s:
            break  # far over the limit: more runs would only make the table later
    return result


def table(results: list[Result], max_s: float, max_bytes: float) -> str:
    rows = [("case", "input", "wall s (median)", "peak MB", "exit", "over the limit")]
    for r in results:
        rows.append((r.case.name, r.case.title, f"{r.wall_s:.2f}", f"{r.peak_bytes / MB:.0f}", r.exit_codes,
                     ", ".join(r.over(max_s, max_bytes)) or ("announced" if r.announced and r.wall_s > max_s
                                                             else "-")))  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = ["| " + " | ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)) + " |" for row in rows]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--runs", type=int, default=3, help="runs per case; the median wall time is reported")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds before a run is killed")
    parser.add_argument("--max-s", type=float, default=10.0, help="wall-time limit per input")
    parser.add_argument("--max-mb", type=float, default=1000.0, help="peak-memory limit per input (MB)")
    parser.add_argument("--calibrate-runs", type=int, default=2000, help="rows of the calibrate CSV")
    parser.add_argument("--only", nargs="*", default=None, help="case names to run (default: all)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON")
    args = parser.parse_args()
    cases = [c for c in CASES if args.only is None or c.name in args.only]
    max_bytes = args.max_mb * MB
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        write_inputs(folder, args.calibrate_runs)
        results = [measure(c, folder, args.runs, args.timeout, args.max_s, lambda s: print(s, file=sys.stderr))
                   for c in cases]  # fmt: skip
    if args.json:
        print(json.dumps([r.as_json(args.max_s, max_bytes) for r in results], indent=2))
    else:
        print(table(results, args.max_s, max_bytes))
    failed = [r for r in results if r.over(args.max_s, max_bytes)]
    for r in failed:
        print(f"OVER: {r.case.name} ({', '.join(r.over(args.max_s, max_bytes))}): {r.case.title}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())

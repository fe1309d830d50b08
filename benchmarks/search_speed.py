"""How fast is `paraplan optimize`? Solver time, whole-process time and peak memory.

Each figure is the median of N runs (default 5), every run a fresh process:

  (a) importing the runtime dependencies alone
      (`python -c "import ortools.sat.python.cp_model, pydantic, networkx, numpy, click, rich"`);
  (b) `optimize --model llama2-70b --gpus 1024 --hardware a100-80g --top 10 --json`:
      the whole process, and the solver alone (the JSON's results[0].solver.wall_s);
  (c) llama3-405b on 16384 x h100-sxm, --top 10;
  (d) a GPU-count range: llama2-70b on a100-80g, --gpus 256..16384 --deadline-days 30 --tokens 2e12;
  (r) the range over three hardware: llama2-70b, --gpus 256..16384, a100-80g,h100-sxm,rtx4090, top 10;
  (h) `paraplan --help` (the CLI's startup: heavy dependencies are imported lazily);
  (e) the peak resident memory (max RSS) of each whole-process run.

Runs are interleaved -- rounds of (a), (b), (c), (d) -- after one untimed warm-up run of each,
so that other load on the machine weighs on every case alike. Peak memory is the child's own
`ru_maxrss`, read with os.wait4 on that child's pid (so one run's peak never leaks into the
next, unlike RUSAGE_CHILDREN, which is a maximum over all children).

Targets: solver < 0.5 s (b), < 2 s (c), < 5 s (d); whole process (b) and (r) < 3x the import
alone; (h) < 0.5x the import alone; peak memory < 500 MB. The script is a report: it always exits 0.

    python benchmarks/search_speed.py [--runs 5] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from paraplan.cost_models.units import MB

REPO = Path(__file__).resolve().parent.parent
IMPORTS = "import ortools.sat.python.cp_model, pydantic, networkx, numpy, click, rich"

CASES: dict[str, list[str]] = {
    "b": ["--model", "llama2-70b", "--gpus", "1024", "--hardware", "a100-80g", "--top", "10"],
    "c": ["--model", "llama3-405b", "--gpus", "16384", "--hardware", "h100-sxm", "--top", "10"],
    "d": ["--model", "llama2-70b", "--gpus", "256..16384", "--hardware", "a100-80g",
          "--deadline-days", "30", "--tokens", "2e12", "--top", "10"],
    "r": ["--model", "llama2-70b", "--gpus", "256..16384", "--hardware", "a100-80g,h100-sxm,rtx4090", "--top", "10"],
}  # fmt: skip
TITLES = {
    "a": "import ortools, pydantic, networkx, numpy, click, rich",
    "b": "llama2-70b, 1024 x a100-80g, top 10",
    "c": "llama3-405b, 16384 x h100-sxm, top 10",
    "d": "llama2-70b, a100-80g, 256..16384 GPUs, 30-day deadline for 2e12 tokens",
    "r": "llama2-70b, a100-80g,h100-sxm,rtx4090, 256..16384 GPUs, top 10",
    "h": "paraplan --help",
}
SOLVER_TARGET_S = {"b": 0.5, "c": 2.0, "d": 5.0}
WHOLE_OVER_IMPORT = 3.0
HELP_OVER_IMPORT = 0.5
PEAK_TARGET_BYTES = 500 * MB


@dataclass
class Run:
    wall_s: float
    max_rss_bytes: int
    returncode: int
    stdout: str
    stderr: str


# The children may cache bytecode, as any installed Python package does: with PYTHONDONTWRITEBYTECODE
# set (some shells and containers set it) every fresh process would compile paraplan's own modules
# from source again (about 0.13 s here), while the third-party packages of (a) load the bytecode
# pip compiled at install time; the warm-up run writes the cache.
CHILD_ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def run_once(argv: list[str]) -> Run:
    """One fresh process: wall time, its own peak RSS (os.wait4 on its pid), exit code, output."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        started = time.perf_counter()
        proc = subprocess.Popen(argv, cwd=REPO, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=CHILD_ENV)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here; keep Popen from waiting again
        out.seek(0)
        err.seek(0)
        # ru_maxrss is in kilobytes on Linux, bytes on macOS
        scale = 1 if sys.platform == "darwin" else 1024
        return Run(wall, int(usage.ru_maxrss) * scale, proc.returncode,
                   out.read().decode(errors="replace"), err.read().decode(errors="replace"))  # fmt: skip


@dataclass
class Measurement:
    name: str
    title: str
    command: list[str]
    whole_s: list[float] = field(default_factory=list)
    solver_s: list[float] = field(default_factory=list)
    peak_bytes: list[int] = field(default_factory=list)
    status: str | None = None
    picked: str | None = None
    errors: list[str] = field(default_factory=list)

    def median(self, values: list[float] | list[int]) -> float | None:
        return float(statistics.median(values)) if values else None

    def as_json(self) -> dict[str, Any]:
        return {
            "title": self.title,
            "command": " ".join(self.command),
            "runs": len(self.whole_s),
            "whole_s": self.median(self.whole_s),
            "whole_s_all": self.whole_s,
            "solver_s": self.median(self.solver_s),
            "solver_s_all": self.solver_s,
            "peak_rss_bytes": self.median(self.peak_bytes),
            "peak_rss_bytes_max": max(self.peak_bytes) if self.peak_bytes else None,
            "status": self.status,
            "best": self.picked,
            "errors": self.errors,
        }


def import_measurement() -> tuple[Measurement, list[str]]:
    return Measurement("a", TITLES["a"], ["python", "-c", f'"{IMPORTS}"']), [sys.executable, "-c", IMPORTS]


def help_measurement() -> tuple[Measurement, list[str]]:
    return Measurement("h", TITLES["h"], ["python", "-m", "optimizer", "--help"]), [
        sys.executable, "-m", "optimizer", "--help"]  # fmt: skip


def optimize_measurement(name: str) -> tuple[Measurement, list[str]]:
    args = ["optimize", *CASES[name], "--json"]
    return (Measurement(name, TITLES[name], ["python", "-m", "optimizer", *args]),
            [sys.executable, "-m", "optimizer", *args])  # fmt: skip


def record_process(m: Measurement, r: Run) -> None:
    """Add a run without JSON to read (an import, --help): its wall time and peak memory."""
    if r.returncode != 0:
        m.errors.append(f"exit {r.returncode}: {r.stderr.strip()[-300:]}")
        return
    m.whole_s.append(r.wall_s)
    m.peak_bytes.append(r.max_rss_bytes)


def record_search(m: Measurement, r: Run) -> dict[str, Any] | None:
    """Add an `optimize --json` run's figures to `m`; its first result, or None if unreadable."""
    if r.returncode not in (0, 1):
        m.errors.append(f"exit {r.returncode}: {r.stderr.strip()[-300:]}")
    try:
        entry: dict[str, Any] = json.loads(r.stdout)["results"][0]
        solver = entry["solver"]
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        m.errors.append(f"exit {r.returncode}, unreadable JSON ({exc}): {r.stderr.strip()[-300:]}")
        return None
    m.whole_s.append(r.wall_s)
    m.peak_bytes.append(r.max_rss_bytes)
    m.solver_s.append(float(solver["wall_s"]))
    m.status = str(solver["status"])
    return entry


def record(m: Measurement, r: Run) -> None:
    """Add one run's figures to `m` (the import and --help cases have no JSON to read)."""
    if m.name in ("a", "h"):
        record_process(m, r)
        return
    entry = record_search(m, r)
    if entry is None:
        return
    if entry.get("layouts"):
        best = entry["layouts"][0]
        lay = best["layout"]
        m.picked = (f"{best['gpus']} GPUs TP{lay['tp']}/PP{lay['pp']}/DP{lay['dp']}/CP{lay['cp']}"
                    f" mb{lay['micro_batch']} vpp{lay['virtual_stages']} {lay['recompute']} ZeRO-{lay['zero']}"
                    f", {best['step_time_s']:.3f} s/step")  # fmt: skip
    elif entry.get("reason"):
        m.picked = f"no layout: {entry['reason']}"


def measure_all(runs: int, warmup: bool) -> dict[str, Measurement]:
    """Rounds of (a), (b), (c), (d), one run each, so that load on the machine hits all alike."""
    cases = dict([("a", import_measurement()), ("h", help_measurement()),
                  *((n, optimize_measurement(n)) for n in CASES)])  # fmt: skip
    if warmup:  # page cache, .pyc files: not what a user's second run pays
        for _, argv in cases.values():
            run_once(argv)
    for _ in range(runs):
        for m, argv in cases.values():
            record(m, run_once(argv))
    return {n: m for n, (m, _) in cases.items()}


@dataclass
class Check:
    label: str
    value: float | None
    target: float
    unit: str

    @property
    def passed(self) -> bool:
        return self.value is not None and self.value < self.target

    def as_json(self) -> dict[str, Any]:
        return {"check": self.label, "value": self.value, "target": self.target, "unit": self.unit,
                "result": "PASS" if self.passed else "FAIL"}  # fmt: skip


def checks(ms: dict[str, Measurement]) -> list[Check]:
    out = [
        Check(f"({n}) solver, {TITLES[n]}", ms[n].median(ms[n].solver_s), SOLVER_TARGET_S[n], "s")
        for n in ("b", "c", "d")
    ]
    imp = ms["a"].median(ms["a"].whole_s)
    for n, target in (("b", WHOLE_OVER_IMPORT), ("r", WHOLE_OVER_IMPORT), ("h", HELP_OVER_IMPORT)):
        whole = ms[n].median(ms[n].whole_s)
        ratio = whole / imp if imp and whole is not None else None
        out.append(Check(f"({n}) whole process / import alone, {TITLES[n]}", ratio, target, "x"))
    for n in ("b", "c", "d", "r"):
        peak = ms[n].median(ms[n].peak_bytes)
        out.append(Check(f"(e) peak RSS ({n}), {TITLES[n]}", peak / MB if peak is not None else None,
                         PEAK_TARGET_BYTES / MB, "MB"))  # fmt: skip
    return out


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "n/a"
    if unit == "MB":
        return f"{value:.0f} MB"
    if unit == "x":
        return f"{value:.2f}x"
    return f"{value:.3f} s"


def _load() -> str:
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "n/a"


def render(ms: dict[str, Measurement], cs: list[Check], runs: int) -> str:
    lines = [
        f"paraplan optimize speed -- median of {runs} runs, each a fresh process, cases interleaved",
        f"python {sys.executable}, {os.cpu_count()} CPUs, load average {_load()}",
        "",
    ]
    header = f"{'case':<4} {'whole':>9} {'solver':>9} {'peak RSS':>9}  description"
    lines += [header, "-" * len(header)]
    for m in ms.values():
        whole, solver, peak = m.median(m.whole_s), m.median(m.solver_s), m.median(m.peak_bytes)
        lines.append(f"({m.name}) {_fmt(whole, 's'):>9} {_fmt(solver, 's') if m.name != 'a' else '':>9} "
                     f"{_fmt(peak / MB if peak is not None else None, 'MB'):>9}  {m.title}")  # fmt: skip
        if m.status or m.picked:
            lines.append(f"{'':<4} status {m.status}; best: {m.picked}")
        for e in m.errors:
            lines.append(f"{'':<4} ERROR {e}")
    imp, whole_b = ms["a"].median(ms["a"].whole_s), ms["b"].median(ms["b"].whole_s)
    if imp is not None and whole_b is not None:
        lines += ["", f"(b) whole less import alone: {whole_b - imp:.3f} s (table building, solve, JSON)"]
    lines += ["", f"{'check':<86} {'value':>9} {'target':>9}  result", "-" * 114]
    for c in cs:
        lines.append(f"{c.label:<86} {_fmt(c.value, c.unit):>9} {'< ' + _fmt(c.target, c.unit):>9}  "
                     f"{'PASS' if c.passed else 'FAIL'}")  # fmt: skip
    passed = sum(c.passed for c in cs)
    lines += ["", f"{passed}/{len(cs)} targets met"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per measurement (median reported)")
    parser.add_argument("--json", action="store_true", help="print one JSON object instead of the table")
    parser.add_argument("--no-warmup", action="store_true", help="skip the untimed first run of each command")
    args = parser.parse_args(argv)
    runs = max(1, args.runs)
    ms = measure_all(runs, warmup=not args.no_warmup)
    cs = checks(ms)
    if args.json:
        print(json.dumps({
            "runs": runs,
            "python": sys.executable,
            "cpus": os.cpu_count(),
            "load_average": _load(),
            "measurements": {n: m.as_json() for n, m in ms.items()},
            "checks": [c.as_json() for c in cs],
            "passed": sum(c.passed for c in cs),
            "total": len(cs),
        }, indent=2))  # fmt: skip
    else:
        print(render(ms, cs, runs))
    return 0


if __name__ == "__main__":
    try:
        main()
    except Exception as exc:  # a report: never a failing exit
        print(f"benchmark error: {exc!r}", file=sys.stderr)
    sys.exit(0)

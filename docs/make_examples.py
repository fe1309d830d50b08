"""Rewrite the command outputs quoted in examples/*.md and README.md from today's paraplan, or
check that they are current.

    python docs/make_examples.py          # rewrite them
    python docs/make_examples.py --check  # exit 1 if a quoted output is out of date (a test runs this)

Quoted outputs are:
  * in examples/*.md, each fenced block whose lines start with `$ paraplan ...` (a command, `\\`
    continuing it on the next line) followed by its output; a command with `--json` keeps the
    lines under it (the page shows a digest of the object, written by hand);
  * in README.md, the fenced block after a line `` `COLUMNS=100 paraplan ...` ``; where the
    quoted block ends in `  legend    ... (the legend below)`, the output's legend is cut there;
    where it is a table, it is the output's last table.
Every command runs as `COLUMNS=100 paraplan ...` from the repository root. Timings
(`in 0.17 s`) are not compared: they differ from run to run. The prose around the blocks quotes
their figures too; a rewrite is the moment to reread it.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGES = sorted((ROOT / "examples").glob("*.md"))
README = ROOT / "README.md"
FENCE = "```"
LEGEND_CUT = "  legend    ... (the legend below)"
TABLE_TOP, TABLE_BOTTOM = "┏", "└"
TIMING = re.compile(r"in \d+(\.\d+)? s\b")


def run(command: str) -> list[str]:
    """The lines `paraplan ...` prints (stdout, then stderr), trailing blanks stripped."""
    words = shlex.split(command)
    assert words[0] == "paraplan", command
    env = dict(os.environ, COLUMNS="100")
    done = subprocess.run([sys.executable, "-m", "paraplan", *words[1:]], capture_output=True, text=True,
                          cwd=ROOT, env=env, timeout=600, check=False)  # fmt: skip
    lines = [line.rstrip() for line in (done.stdout + done.stderr).rstrip("\n").split("\n")]
    return lines[1:] if lines and lines[0] == "" else lines


def _page_block(block: list[str]) -> list[str]:
    """A fenced block of `$ paraplan` commands with their outputs, rewritten."""
    starts = [i for i, line in enumerate(block) if line.startswith("$ paraplan")]
    out: list[str] = []
    for n, start in enumerate(starts):
        end = start
        while block[end].endswith("\\"):
            end += 1
        command = " ".join(line.rstrip("\\").strip() for line in block[start : end + 1])[2:]
        following = starts[n + 1] if n + 1 < len(starts) else len(block)
        out += block[start : end + 1] + (block[end + 1 : following] if "--json" in command else run(command))
    return out


def _readme_block(command: str, block: list[str]) -> list[str]:
    out = run(command.removeprefix("COLUMNS=100 "))
    if block and block[0].startswith(TABLE_TOP):  # the quote is the output's last table
        top = max(i for i, line in enumerate(out) if line.startswith(TABLE_TOP))
        bottom = next(i for i in range(top, len(out)) if out[i].startswith(TABLE_BOTTOM))
        return out[top : bottom + 1]
    if block and block[-1] == LEGEND_CUT:
        cut = next((i for i, line in enumerate(out) if line.startswith("  legend")), len(out))
        out = [*out[:cut], LEGEND_CUT]
    return out


def rewrite(text: str, readme: bool) -> str:
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    command: str | None = None
    while i < len(lines):
        line = lines[i]
        if readme and line.startswith("`COLUMNS=100 paraplan "):
            command = line.strip("`")
        if line.startswith(FENCE):  # a block opens, perhaps with a language (```bash); it closes at ```
            end = next(k for k in range(i + 1, len(lines)) if lines[k] == FENCE)
            block = lines[i + 1 : end]
            quoted = line == FENCE  # a command's output is never a ```bash block
            if quoted and not readme and block and block[0].startswith("$ paraplan"):
                block = _page_block(block)
            elif quoted and readme and command is not None:
                block = _readme_block(command, block)
                command = None
            out += [line, *block, FENCE]
            i = end + 1
            continue
        out.append(line)
        i += 1
    return "\n".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 if a quoted output is out of date")
    args = parser.parse_args()
    stale = []
    for path in [README, *PAGES]:
        text = path.read_text(encoding="utf-8")
        new = rewrite(text, readme=path == README)
        if TIMING.sub("in T s", new) == TIMING.sub("in T s", text):
            continue
        stale.append(path)
        if not args.check:
            path.write_text(new, encoding="utf-8")
    for path in stale:
        verb = "is out of date" if args.check else "rewritten"
        print(f"{path.relative_to(ROOT)}: {verb} (python docs/make_examples.py)", file=sys.stderr)
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())

"""mypy --strict over the package, the tests and the benchmarks, under the package's installed names.

The folders optimizer/, cost_models/ and hardware_specs/ install as `paraplan`,
`paraplan.cost_models` and `paraplan.hardware_specs` (pyproject's [tool.setuptools.package-dir]).
mypy resolves imports by folder names only, so this script mirrors that mapping as a tree of
symbolic links under build/typecheck and points MYPYPATH at it. Errors in the package are
reported under build/typecheck/paraplan/..., which links back to the source file.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TREE = ROOT / "build" / "typecheck"


def build_tree() -> None:
    mapping: dict[str, str] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    shutil.rmtree(TREE, ignore_errors=True)
    # Parents before children: a subpackage's link goes inside its parent's folder.
    for package, folder in sorted(mapping.items(), key=lambda item: item[0].count(".")):
        target = TREE.joinpath(*package.split("."))
        target.mkdir(parents=True, exist_ok=True)
        for entry in (ROOT / folder).iterdir():
            if entry.name == "__pycache__" or (target / entry.name).exists():
                continue
            (target / entry.name).symlink_to(entry)


def main() -> int:
    build_tree()
    env = {**os.environ, "MYPYPATH": str(TREE)}
    command = [sys.executable, "-m", "mypy", "--strict", "-p", "paraplan"]
    first = subprocess.run(command, cwd=ROOT, env=env, check=False)
    tests = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "tests", "benchmarks"], cwd=ROOT, env=env, check=False
    )
    return first.returncode or tests.returncode


if __name__ == "__main__":
    raise SystemExit(main())

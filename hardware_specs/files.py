"""Reading the user's input files safely: regular files only, bounded in size, BOM accepted.

A path may name a FIFO, a device (/dev/zero) or a huge file; reading it whole would block
forever or exhaust memory. Every input file (hardware TOML, model config.json, runs CSV, launch
file) is read here: refused unless it is a regular file of at most `max_bytes`, and decoded as
UTF-8 with an optional byte-order mark (spreadsheets write one).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from paraplan.hardware_specs.errors import InputError

MAX_INPUT_BYTES = 4 * 2**20  # a hardware TOML or config.json is a few KB; no real one approaches 4 MiB


def is_regular_file(path: Path | str) -> bool:
    """Whether `path` names a regular file; False for a name the OS refuses to look up (too long,
    a NUL byte), where Python 3.11's `Path.is_file` raises instead of answering."""
    try:
        return Path(path).is_file()
    except (OSError, ValueError):
        return False


def names_anything(path: Path | str) -> bool:
    """Whether anything exists at `path` (the same refusals read as no)."""
    try:
        return Path(path).exists()
    except (OSError, ValueError):
        return False


def read_text_file(path: Path | str, what: str, max_bytes: int = MAX_INPUT_BYTES) -> str:
    """The file's text, or InputError naming the file and why it cannot be read."""
    path = Path(path)
    try:
        info = os.stat(path)
    except OSError as exc:
        raise InputError(f"cannot read {what} '{path}': {exc.strerror or type(exc).__name__}") from None
    if not stat.S_ISREG(info.st_mode):
        kind = "a directory" if stat.S_ISDIR(info.st_mode) else "not a regular file (a pipe, device or socket)"
        raise InputError(f"cannot read {what} '{path}': it is {kind}")
    if info.st_size > max_bytes:
        raise InputError(f"{what} '{path}' is {info.st_size:,} bytes; inputs are read up to {max_bytes:,} bytes")
    try:
        with open(path, "rb") as handle:
            data = handle.read(max_bytes + 1)
    except OSError as exc:
        raise InputError(f"cannot read {what} '{path}': {exc.strerror or type(exc).__name__}") from None
    if len(data) > max_bytes:
        raise InputError(f"{what} '{path}' is larger than {max_bytes:,} bytes, the most an input is read")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{what} '{path}' is not UTF-8 text (byte {exc.start})") from None

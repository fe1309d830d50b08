"""Unit factors, each defined once: SI decimal bytes (what datasheets and this model use), the
binary GiB that memory tools report, and the seconds of an hour and a day; what counts as a
finite number in an input file; and how a memory amount reads in a sentence."""

from __future__ import annotations

import math
import sys

MB = 1e6
GB = 1e9
GIB = float(2**30)
SECONDS_PER_HOUR = 3600.0
SECONDS_PER_DAY = 86400.0


def memory_text(nbytes: float) -> str:
    """A memory amount for a sentence, with its unit: GB to one decimal from 0.1 GB on, below
    that in MB, kB or bytes, so that a nonzero amount never reads as zero (a plan 28 MB short of
    fitting reads "by 28 MB", not "by 0.0 GB", which contradicts its own verdict)."""
    size = abs(nbytes)
    if nbytes == 0.0:
        return "0.0 GB"  # -0.0 too
    if size >= 0.1 * GB:
        return f"{nbytes / GB:.1f} GB"
    if size >= MB:
        return f"{nbytes / MB:.0f} MB"
    if size >= 1e3:
        return f"{nbytes / 1e3:.0f} kB"
    return f"{nbytes:.0f} bytes" if size >= 1.0 else f"{nbytes:.1g} bytes"  # below 1: float noise, still not 0


def finite_number(value: object) -> bool:
    """A JSON/TOML number that a float holds: not a bool (JSON's true is no 1), not inf or NaN, and
    not an integer beyond float's range (10**400 parses as a Python int; math.isfinite would raise
    OverflowError converting it; Python compares an int with a float exactly)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if isinstance(value, int):
        return abs(value) <= sys.float_info.max
    return math.isfinite(value)

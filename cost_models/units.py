"""Unit factors, each defined once: SI decimal bytes (what datasheets and this model use), the
binary GiB that memory tools report, and the seconds of an hour and a day; and what counts as a
finite number in an input file."""

from __future__ import annotations

import math
import sys

MB = 1e6
GB = 1e9
GIB = float(2**30)
SECONDS_PER_HOUR = 3600.0
SECONDS_PER_DAY = 86400.0


def finite_number(value: object) -> bool:
    """A JSON/TOML number that a float holds: not a bool (JSON's true is no 1), not inf or NaN, and
    not an integer beyond float's range (10**400 parses as a Python int; math.isfinite would raise
    OverflowError converting it; Python compares an int with a float exactly)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    if isinstance(value, int):
        return abs(value) <= sys.float_info.max
    return math.isfinite(value)

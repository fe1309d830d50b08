"""Unit factors, each defined once: SI decimal bytes (what datasheets and this model use), the
binary GiB that memory tools report, and the seconds of an hour and a day."""

from __future__ import annotations

MB = 1e6
GB = 1e9
GIB = float(2**30)
SECONDS_PER_HOUR = 3600.0
SECONDS_PER_DAY = 86400.0

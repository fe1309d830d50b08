"""Formatting of quantities for people: seconds and dollars (memory amounts:
`cost_models.units.memory_text`, which the cost model's own sentences use too)."""

from __future__ import annotations


def fmt_seconds(seconds: float) -> str:
    if seconds >= 86400:
        return f"{seconds / 86400:.1f} d"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.1f} ms"
    return f"{seconds * 1e6:.0f} us"


def fmt_duration(seconds: float) -> str:
    """Like fmt_seconds, with minutes between one minute and one hour."""
    if 60 <= seconds < 3600:
        return f"{seconds / 60:.1f} min"
    return fmt_seconds(seconds)


def fmt_usd(usd: float) -> str:
    if usd >= 1e6:
        return f"${usd / 1e6:.2f}M"
    if usd >= 1e3:
        return f"${usd / 1e3:.1f}k"
    return f"${usd:.2f}"

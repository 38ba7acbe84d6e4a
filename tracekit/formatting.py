"""Number formatting: a figure becomes display text here, and only here.

Formatting is presentation, not computation: every function takes one value that was
computed elsewhere and returns text. The renderers (``tracekit.report``) use it for every
figure they show, and the what-if planner (``tracekit.whatif``) for the figures in its
sentences; it sits at the top of the package, below both, so that neither imports the other. ``None`` (a figure that could not be
computed) always becomes ``MISSING``; the reason is shown beside it by the caller.
"""

from __future__ import annotations

import math

MISSING = "—"


def num(x: float | int | None, sig: int = 3) -> str:
    """``x`` with ``sig`` significant digits (at least), thousands separated: 35.0, 0.412, 255,524."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return MISSING
    if x == 0:
        return "0"
    digits = max(0, sig - 1 - math.floor(math.log10(abs(x))))
    return f"{x:,.{digits}f}"


def ms(x: float | None) -> str:
    return MISSING if x is None else f"{num(x)} ms"


def us(x: float | None) -> str:
    return MISSING if x is None else f"{num(x)} µs"


def pct(x: float | None) -> str:
    """A fraction as a percentage: 0.1663 -> 16.6%, 0.000175 -> 0.0175%."""
    return MISSING if x is None else f"{num(x * 100)}%"


def count(x: int | None) -> str:
    return MISSING if x is None else f"{int(x):,}"


_PREFIXES = ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""))


def si(x: float | None, unit: str) -> str:
    """``x`` with an SI prefix: si(3.35e12, "B/s") -> "3.35 TB/s"."""
    if x is None:
        return MISSING
    for scale, prefix in _PREFIXES:
        if abs(x) >= scale:
            return f"{num(x / scale)} {prefix}{unit}"
    return f"{num(x)} {unit}"


def flops(x: float | None) -> str:
    return si(x, "FLOP/s")


def bandwidth(x: float | None) -> str:
    return si(x, "B/s")


def per_s(x: float | None, unit: str = "tok/s") -> str:
    return MISSING if x is None else f"{num(x)} {unit}"


def plain(value) -> str:
    """A value from the sidecar (workload, versions) as text."""
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return num(value)
    return str(value)

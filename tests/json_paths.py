"""A JSON report as paths, for tests that compare two reports figure by figure: every leaf as
``(".phases.decode.time_ms", 81.3)``, every object's keys in order, and a float comparison with a
stated tolerance."""

from __future__ import annotations


def leaves(x, path=""):
    """``(path, value)`` of every leaf, lists indexed (``.steps[3].duration_ms``)."""
    if isinstance(x, dict):
        for k, v in x.items():
            yield from leaves(v, f"{path}.{k}")
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from leaves(v, f"{path}[{i}]")
    else:
        yield path, x


def key_orders(x, path=""):
    """``(path, [keys])`` of every object, in the order it holds them."""
    if isinstance(x, dict):
        yield path, list(x)
        for k, v in x.items():
            yield from key_orders(v, f"{path}.{k}")
    elif isinstance(x, list):
        for i, v in enumerate(x):
            yield from key_orders(v, f"{path}[{i}]")


def same(a, b, rel: float, abs_: float) -> bool:
    """Equal, numbers within ``rel`` of the larger plus ``abs_`` (NaN equals NaN; bools exactly)."""
    if isinstance(a, (int, float)) and isinstance(b, (int, float)) and not isinstance(a, bool):
        return (a != a and b != b) or abs(a - b) <= rel * max(abs(a), abs(b)) + abs_
    return a == b

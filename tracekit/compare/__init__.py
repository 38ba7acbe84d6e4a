"""Comparing whole analyses: two runs (or two sets of runs) side by side.

Builds on ``tracekit.analysis``, never the other way: ``comparison.compare(before, after)`` gives
a ``Comparison``, with the verdict on each headline figure (``verdicts``), how alike the two runs
are (``context``), the kernel groups that moved (``movers``), how much each headline figure moves
by chance (``spread``), and the ``--fail-if`` gates judged on it (``gates``).

    from tracekit.compare import compare
    doc = compare(before, after).to_dict()
"""

from tracekit.compare.comparison import Comparison, compare

__all__ = ["Comparison", "compare"]

"""Comparing whole analyses: two runs (or two sets of runs) side by side.

Builds on ``tracekit.analysis``, never the other way: ``comparison.compare(before, after)`` gives
a ``Comparison``, with the kernel groups that moved (``movers``) and how much each headline
figure moves by chance (``spread``).
"""

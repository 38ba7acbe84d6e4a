"""Meaning: segmentation, taxonomy, cost models, roofline, latency, findings.

Pure functions over a ``Trace``; ``analyze`` runs them all and returns one ``Analysis``.
"""

from tracekit.analysis.analyze import analyze
from tracekit.analysis.model import SCHEMA_VERSION, Analysis, Finding

__all__ = ["SCHEMA_VERSION", "Analysis", "Finding", "analyze"]

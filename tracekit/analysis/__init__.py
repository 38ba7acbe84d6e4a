"""Meaning: a ``Trace`` in, one ``Analysis`` out, in four stages that ``analyze`` runs in order.

1. ``steps/``: which inference step and phase each unit of device work belongs to (segmentation,
   phase evidence, mixed-step splits, latency, timelines);
2. ``pricing/``: each unit's category, FLOPs, bytes and roofline bound;
3. ``waiting/``: why the GPU was idle inside each step;
4. ``findings/``: sentences and advice from the finished figures.

Beside them: ``analyze`` (the pipeline: ``measure`` runs stages 1-3, ``assemble`` builds the
``Analysis``), ``workload`` (which model, TP degree and device spec price the trace), ``figures``
and ``tables`` (what ``assemble`` computes per phase), ``model`` (the ``Analysis`` document),
``books`` (its identities), ``windows`` and ``merge`` (a split trace analysed window by window),
``ranks`` (one run's ranks side by side), ``hta`` (HTA's figures beside tracekit's), and the
shared helpers ``categorical`` and ``truncation``. Pure functions over a ``Trace``; nothing here
imports what builds on whole analyses (``tracekit.compare``, ``tracekit.whatif``).
"""

from tracekit.analysis.analyze import analyze
from tracekit.analysis.model import SCHEMA_VERSION, Analysis, Finding

__all__ = ["SCHEMA_VERSION", "Analysis", "Finding", "analyze"]

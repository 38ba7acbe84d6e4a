"""Stage 1, steps: which inference step and phase each unit of device work belongs to.

Takes a ``Trace``; gives a ``Segmentation`` (``segment``: the work table with each unit's step
and phase, and the steps table; where the steps are: ``ranges``; the work table: ``work``; the
steps table: ``table``; the device's time on work the trace did not record: ``held``), with phase
evidence for unannotated steps (``evidence``, ``step_tokens``, ``launches``), decode steps' keys
from the run's history (``history``), the prefill/decode split of mixed steps (``mixed``), the latency
figures of the steps (``latency``) and per-step timelines (``timeline``).
"""

"""Stage 1, steps: which inference step and phase each unit of device work belongs to.

Takes a ``Trace``; gives a ``Segmentation`` (``segment``: the work table with each unit's step
and phase, and the steps table; where the steps are: ``ranges``; the work table: ``work``; the
steps table: ``table``), with phase evidence for unannotated steps (``evidence``,
``step_tokens``, ``launches``), the prefill/decode split of mixed steps (``mixed``), the latency
figures of the steps (``latency``) and per-step timelines (``timeline``).
"""
